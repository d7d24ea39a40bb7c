//! Graphs: a flat list of nodes in topological order, and their outputs.
//!
//! Architecture invariant: a node only refers to earlier nodes, so the node list is a
//! topological order and a `NodeId` is a `u32` index. Graphs are immutable once built; every
//! pass and transform builds a new one.

use crate::error::{IrError, Result};
use crate::infer::infer_type;
use crate::op::Op;
use crate::region::{Region, RegionCall};
use crate::{DType, Shape};
use std::fmt;
use std::sync::Arc;

/// Index of a node in its graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// The static type of a value: dtype, shape and the weak flag of scalar-born values
/// (numerics.md §2).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Shape,
    pub weak: bool,
}

impl TensorType {
    pub fn new(dtype: DType, shape: Shape) -> TensorType {
        TensorType {
            dtype,
            shape,
            weak: false,
        }
    }

    pub fn weak(dtype: DType, shape: Shape) -> TensorType {
        TensorType {
            dtype,
            shape,
            weak: true,
        }
    }
}

/// `tensor<2x1xf32>`, `tensor<f64>` for rank 0.
impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tensor<")?;
        for d in self.shape.dims() {
            write!(f, "{d}x")?;
        }
        write!(f, "{}>", self.dtype.ir_name())
    }
}

/// Where a node came from: the line of user code that created it (or created the primal node
/// it differentiates), and for a node made by a derivative rule, which rule. Metadata only: it
/// never takes part in equality, hashing or CSE, so it cannot change a plan, its cache key or
/// its results. Printed by [`crate::text::print_graph_with_origins`] and named by the CPU
/// backend's non-finite check.
#[derive(Clone, Copy, Debug, Default)]
pub struct Origin {
    pub loc: Option<&'static std::panic::Location<'static>>,
    /// `Some(("vjp", "sqrt"))` for a node that the reverse-mode rule of a `sqrt` node made.
    pub rule: Option<(&'static str, &'static str)>,
}

impl Origin {
    /// The origin of a node that `mode`'s rule (`"jvp"`, `"vjp"`) makes for a node of this
    /// origin whose op is `of`: the same source line.
    pub fn derived(self, mode: &'static str, of: &'static str) -> Origin {
        Origin {
            loc: self.loc,
            rule: Some((mode, of)),
        }
    }

    /// `vjp of sqrt at src/main.rs:12:5`, `src/main.rs:12:5`, or `None` when nothing is known.
    pub fn describe(&self) -> Option<String> {
        let loc = self
            .loc
            .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
        match (self.rule, loc) {
            (Some((mode, of)), Some(loc)) => Some(format!("{mode} of {of} at {loc}")),
            (Some((mode, of)), None) => Some(format!("{mode} of {of}")),
            (None, loc) => loc,
        }
    }

    fn is_known(&self) -> bool {
        self.loc.is_some() || self.rule.is_some()
    }
}

impl PartialEq for Origin {
    fn eq(&self, _: &Origin) -> bool {
        true
    }
}

impl Eq for Origin {}

impl std::hash::Hash for Origin {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

/// One node: an op applied to earlier nodes, with its inferred type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub op: Op,
    pub operands: Vec<NodeId>,
    pub ty: TensorType,
    /// The rematerialization tag (transforms.md §17): nonzero on nodes that recompute forward
    /// values in a backward pass (`checkpoint`). It is part of the CSE key, so a recomputation
    /// is never merged with the forward computation it repeats, and printed as
    /// `rematerialized`. Backends ignore it; the wire format does not carry it (plans are
    /// encoded after CSE, when it has done its work).
    pub remat: u32,
    /// Where the node came from (metadata; not carried by the text or wire formats).
    pub origin: Origin,
}

/// An immutable dataflow graph.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Graph {
    nodes: Vec<Node>,
    outputs: Vec<NodeId>,
}

impl Graph {
    /// Builds a graph from parts, checking every invariant (see [`Graph::verify`]).
    pub fn from_parts(nodes: Vec<Node>, outputs: Vec<NodeId>) -> Result<Graph> {
        let g = Graph { nodes, outputs };
        g.verify()?;
        Ok(g)
    }

    /// Builds a graph whose invariants the caller has established (passes that only remap ids
    /// of a verified graph). Debug and test builds still verify.
    pub(crate) fn from_parts_unchecked(nodes: Vec<Node>, outputs: Vec<NodeId>) -> Graph {
        let g = Graph { nodes, outputs };
        #[cfg(debug_assertions)]
        if let Err(e) = g.verify() {
            panic!("a pass produced an invalid graph: {e}\n{g}");
        }
        g
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    pub fn outputs(&self) -> &[NodeId] {
        &self.outputs
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The input nodes in order, with their names.
    pub fn inputs(&self) -> impl Iterator<Item = (NodeId, &str, &TensorType)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match &n.op {
                Op::Input { name, ty } => Some((NodeId(i as u32), name.as_str(), ty)),
                _ => None,
            })
    }

    /// This graph with other outputs, chosen among its nodes (output surgery that keeps every
    /// node: a later DCE drops what no output uses).
    pub fn with_outputs(&self, outputs: Vec<NodeId>) -> Result<Graph> {
        Graph::from_parts(self.nodes.clone(), outputs)
    }

    /// A graph with the same inputs (names and types, in order) whose outputs `rewrite` chooses:
    /// it receives a builder holding a copy of this graph and the nodes of its outputs, may
    /// append nodes, and returns the new outputs. How a transform pads, casts or replaces the
    /// outputs of a traced graph without rebuilding it by hand.
    pub fn map_outputs(
        &self,
        rewrite: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> Result<Vec<NodeId>>,
    ) -> Result<Graph> {
        let mut b = GraphBuilder::new();
        let inputs: Vec<NodeId> = self
            .inputs()
            .map(|(_, name, ty)| b.input(name.to_string(), ty.clone()))
            .collect();
        let outs = b.inline_graph(self, &inputs)?;
        let outputs = rewrite(&mut b, &outs)?;
        b.finish(outputs)
    }

    /// The IR verifier: operands refer to earlier nodes, every type is what the op's type
    /// rule infers, inputs come first, outputs exist.
    pub fn verify(&self) -> Result<()> {
        let mut seen_non_input = false;
        let mut types: Vec<&TensorType> = Vec::with_capacity(self.nodes.len());
        for (i, node) in self.nodes.iter().enumerate() {
            let is_input = matches!(node.op, Op::Input { .. });
            if is_input && seen_non_input {
                return Err(IrError::verify(format!(
                    "input %{i} follows a non-input node; inputs come first"
                )));
            }
            seen_non_input |= !is_input;
            let mut operand_types = Vec::with_capacity(node.operands.len());
            for &o in &node.operands {
                if o.index() >= i {
                    return Err(IrError::verify(format!(
                        "node %{i} uses {o}, which is not an earlier node"
                    )));
                }
                operand_types.push(types[o.index()]);
            }
            let inferred = infer_type(&node.op, &operand_types).map_err(|e| {
                let reason = match e {
                    IrError::Verify { message } => message,
                    other => other.to_string(),
                };
                IrError::verify(format!("node %{i} ({}): {reason}", node.op.name()))
            })?;
            if inferred != node.ty {
                return Err(IrError::verify(format!(
                    "node %{i} ({}) is typed {} (weak={}) but its rule infers {} (weak={})",
                    node.op.name(),
                    node.ty,
                    node.ty.weak,
                    inferred,
                    inferred.weak
                )));
            }
            types.push(&node.ty);
        }
        for &o in &self.outputs {
            if o.index() >= self.nodes.len() {
                return Err(IrError::verify(format!("output {o} does not exist")));
            }
        }
        Ok(())
    }
}

/// The reference text form (outputs named as nodes), which parses back to the same graph.
impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::text::print_graph(
            self,
            crate::text::OutputStyle::Refs,
        ))
    }
}

/// Appends type-checked nodes; the low-level way to build a graph (the facade's tracer and
/// every rewrite use it). The builder methods of `builder.rs` add promotion and NumPy conveniences on top.
#[derive(Debug, Default, Clone)]
pub struct GraphBuilder {
    nodes: Vec<Node>,
    /// The rematerialization tag given to every node appended from now on.
    remat: u32,
    /// The origin given to every node appended from now on.
    origin: Origin,
}

impl GraphBuilder {
    pub fn new() -> GraphBuilder {
        GraphBuilder::default()
    }

    /// Appends `op(operands)`, inferring its type; a type error leaves the builder unchanged.
    pub fn push(&mut self, op: Op, operands: &[NodeId]) -> Result<NodeId> {
        let mut types = Vec::with_capacity(operands.len());
        for &o in operands {
            let node = self.nodes.get(o.index()).ok_or_else(|| {
                IrError::verify(format!("operand {o} is not a node of this graph"))
            })?;
            types.push(&node.ty);
        }
        let ty = infer_type(&op, &types)?;
        Ok(self.push_typed(op, operands.to_vec(), ty))
    }

    /// Appends one node per given output of `region`, all on `operands` and next to each
    /// other: the sibling nodes of one region call (see `region_groups`).
    pub fn push_region_calls(
        &mut self,
        region: Arc<Region>,
        outputs: impl IntoIterator<Item = usize>,
        operands: &[NodeId],
    ) -> Result<Vec<NodeId>> {
        outputs
            .into_iter()
            .map(|output| {
                let call = RegionCall {
                    region: region.clone(),
                    output,
                };
                self.push(Op::Region(call), operands)
            })
            .collect()
    }

    /// Appends a node whose type is already known to satisfy its rule.
    pub(crate) fn push_typed(&mut self, op: Op, operands: Vec<NodeId>, ty: TensorType) -> NodeId {
        let (remat, origin) = (self.remat, self.origin);
        self.push_node(Node {
            op,
            operands,
            ty,
            remat,
            origin,
        })
    }

    /// Appends a verified node as it is (its tag included): how passes copy nodes.
    pub(crate) fn push_node(&mut self, node: Node) -> NodeId {
        let id = NodeId(self.nodes.len() as u32);
        self.nodes.push(node);
        id
    }

    /// Sets the rematerialization tag of the nodes appended from now on (0: none) and returns
    /// the previous one. Rewrites set it to the tag of the node they are rewriting, so that
    /// derivatives and batched forms of a recomputation stay apart from the forward values.
    pub fn set_remat(&mut self, tag: u32) -> u32 {
        std::mem::replace(&mut self.remat, tag)
    }

    /// Sets the [`Origin`] of the nodes appended from now on and returns the previous one.
    /// Tracers set it to the user's call site; rewrites set it to the origin of the node they
    /// are rewriting (derived, for the nodes of a derivative rule).
    pub fn set_origin(&mut self, origin: Origin) -> Origin {
        std::mem::replace(&mut self.origin, origin)
    }

    pub fn ty(&self, id: NodeId) -> &TensorType {
        &self.nodes[id.index()].ty
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Copies `g` into this builder with its inputs bound to `inputs` (in order) and returns
    /// the nodes of its outputs: how transforms splice one graph into another.
    pub fn inline_graph(&mut self, g: &Graph, inputs: &[NodeId]) -> Result<Vec<NodeId>> {
        let mut remap: Vec<NodeId> = Vec::with_capacity(g.len());
        let mut next_input = 0;
        for node in g.nodes() {
            let id = if let Op::Input { .. } = node.op {
                next_input += 1;
                *inputs.get(next_input - 1).ok_or_else(|| {
                    IrError::verify("an inlined graph has more inputs than bound operands")
                })?
            } else {
                let ops: Vec<NodeId> = node.operands.iter().map(|o| remap[o.index()]).collect();
                // Inlined nodes keep their own rematerialization tag (on top of the
                // builder's current one, for graphs inlined into a recomputation).
                let previous = self.set_remat(node.remat.max(self.remat));
                // Inlined nodes keep their own origin when they know it.
                let origin = if node.origin.is_known() {
                    node.origin
                } else {
                    self.origin
                };
                let previous_origin = self.set_origin(origin);
                let pushed = self.push(node.op.clone(), &ops);
                self.set_remat(previous);
                self.set_origin(previous_origin);
                pushed?
            };
            remap.push(id);
        }
        Ok(g.outputs().iter().map(|o| remap[o.index()]).collect())
    }

    /// Freezes the graph for a pass that only rearranged a verified graph (still verified in
    /// debug and test builds).
    pub(crate) fn finish_unchecked(self, outputs: Vec<NodeId>) -> Graph {
        Graph::from_parts_unchecked(self.nodes, outputs)
    }

    /// Freezes the graph with the given outputs.
    pub fn finish(self, outputs: Vec<NodeId>) -> Result<Graph> {
        Graph::from_parts(self.nodes, outputs)
    }

    /// Freezes a graph whose inputs were not all pushed first (a trace lifts an enclosing
    /// tracer as an input when it is first used): every input moves to the front, in creation
    /// order, and every other node keeps its order.
    pub fn finish_inputs_first(self, outputs: Vec<NodeId>) -> Result<Graph> {
        let n = self.nodes.len();
        let is_input = |n: &Node| matches!(n.op, Op::Input { .. });
        let order: Vec<usize> = (0..n)
            .filter(|&i| is_input(&self.nodes[i]))
            .chain((0..n).filter(|&i| !is_input(&self.nodes[i])))
            .collect();
        let mut remap = vec![NodeId(0); n];
        for (new, &old) in order.iter().enumerate() {
            remap[old] = NodeId(new as u32);
        }
        let reordered: Vec<Node> = order
            .iter()
            .map(|&old| {
                let mut node = self.nodes[old].clone();
                node.operands = node.operands.iter().map(|o| remap[o.index()]).collect();
                node
            })
            .collect();
        let outputs = outputs
            .iter()
            .map(|o| {
                remap
                    .get(o.index())
                    .copied()
                    .ok_or_else(|| IrError::verify(format!("output {o} is not a node")))
            })
            .collect::<Result<_>>()?;
        Graph::from_parts(reordered, outputs)
    }
}
