//! The builder of derived loop bodies, shared by every region rule: [`LoopBody`] declares
//! each parameter of a body together with the operand that feeds it in the call, section by
//! section, so that a body's parameter list and its call's operand list cannot drift apart;
//! and the graph helpers the rules share (zeros, plain types, rebinding a graph's inputs,
//! keeping some of its outputs, which outputs depend on which inputs).
//!
//! It builds graphs and computes nothing: it knows no derivative rule, no region form and no
//! sweep.

use quabla_ir::{Graph, GraphBuilder, NodeId, Op, RegionKind, Result, ScanBody, Shape, TensorType};
use std::ops::Range;
use std::sync::Arc;

/// The sections of a loop body's parameters, in their order: a `scan` body takes `(index,
/// carries, consts, xs)`, a `while` body (and its predicate) `(carries, consts)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Section {
    Carry,
    Const,
    Xs,
}

/// A derived loop body under construction and the operands of the call that runs it.
///
/// Parameters are added in section order (a parameter of an earlier section after a later one
/// is a bug, caught by a debug assertion); every parameter but a scan's index has its operand.
pub(super) struct LoopBody {
    nb: GraphBuilder,
    /// The parameters, in order: what a twin builder replays.
    inputs: Vec<NodeId>,
    operands: Vec<NodeId>,
    /// Parameters per section.
    counts: [usize; 3],
    section: Section,
}

impl LoopBody {
    /// A `scan` body, whose first parameter is the iteration index `name` (no operand).
    pub(super) fn scan(name: &str, ty: TensorType) -> (LoopBody, NodeId) {
        let mut body = LoopBody::new();
        let i = body.nb.input(name, ty);
        body.inputs.push(i);
        (body, i)
    }

    /// A `while` body (or any body without an index parameter).
    pub(super) fn new() -> LoopBody {
        LoopBody {
            nb: GraphBuilder::new(),
            inputs: Vec::new(),
            operands: Vec::new(),
            counts: [0; 3],
            section: Section::Carry,
        }
    }

    /// One parameter of `section`, fed by `operand`.
    pub(super) fn param(
        &mut self,
        section: Section,
        name: impl Into<String>,
        ty: TensorType,
        operand: NodeId,
    ) -> NodeId {
        debug_assert!(section >= self.section, "parameters come in section order");
        self.section = section;
        self.counts[section as usize] += 1;
        self.operands.push(operand);
        let id = self.nb.input(name, ty);
        self.inputs.push(id);
        id
    }

    /// One parameter of `section` per type, named `<prefix><k>`, fed by `operands`.
    pub(super) fn params(
        &mut self,
        section: Section,
        prefix: &str,
        types: Vec<TensorType>,
        operands: &[NodeId],
    ) -> Vec<NodeId> {
        self.named(section, types, operands, |_, k| format!("{prefix}{k}"))
    }

    /// One parameter of `section` per type, fed by `operands`, named `in<position>` by its
    /// place in the whole parameter list (the names of counted loops' bodies).
    pub(super) fn positional(
        &mut self,
        section: Section,
        types: Vec<TensorType>,
        operands: &[NodeId],
    ) -> Vec<NodeId> {
        self.named(section, types, operands, |position, _| {
            format!("in{position}")
        })
    }

    /// One parameter of `section` per type, fed by `operands`, the `k`-th named
    /// `name(position in the parameter list, k)`.
    fn named(
        &mut self,
        section: Section,
        types: Vec<TensorType>,
        operands: &[NodeId],
        name: impl Fn(usize, usize) -> String,
    ) -> Vec<NodeId> {
        debug_assert_eq!(types.len(), operands.len(), "one operand per parameter");
        types
            .into_iter()
            .zip(operands)
            .enumerate()
            .map(|(k, (ty, &x))| {
                let name = name(self.inputs.len(), k);
                self.param(section, name, ty, x)
            })
            .collect()
    }

    /// One `xs` parameter per stacked operand of `outer`, typed as one slice of it along the
    /// leading axis, named `<prefix><k>`.
    pub(super) fn sliced(
        &mut self,
        outer: &GraphBuilder,
        prefix: &str,
        stacked: &[NodeId],
    ) -> Result<Vec<NodeId>> {
        let types = stacked
            .iter()
            .map(|&x| {
                let ty = outer.ty(x);
                Ok(TensorType::new(
                    ty.dtype,
                    Shape::new(ty.shape.dims()[1..].to_vec())?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(self.params(Section::Xs, prefix, types, stacked))
    }

    /// One section of a forward-mode body: a parameter `in<k>` per body input `k` of
    /// `inputs`, fed by its operand, then a parameter `tangent/in<k>` per active one, fed by
    /// its tangent (zeros of the operand's type, built in `b`, where the tangent is symbolic).
    /// The primal parameters are pushed onto `primals`, the tangent ones onto `tangents`.
    pub(super) fn tangent_section(
        &mut self,
        b: &mut GraphBuilder,
        section: Section,
        inputs: Range<usize>,
        operands: &Tangents<'_>,
        bound: &mut Bound,
    ) -> Result<()> {
        for k in inputs.clone() {
            let j = k - operands.offset;
            let ty = operands.types[k].clone();
            bound
                .primals
                .push(self.param(section, format!("in{k}"), ty, operands.x[j]));
        }
        for k in inputs {
            let j = k - operands.offset;
            if operands.active[j] {
                let ty = operands.types[k].clone();
                // The operand's type, not the parameter's: a scan's xs are stacked.
                let tangent = match operands.t[j] {
                    Some(t) => t,
                    None => zeros(b, &plain(b.ty(operands.x[j])))?,
                };
                bound
                    .tangents
                    .push(self.param(section, format!("tangent/in{k}"), ty, tangent));
            }
        }
        Ok(())
    }

    /// The body's builder, to add its computation.
    pub(super) fn builder(&mut self) -> &mut GraphBuilder {
        &mut self.nb
    }

    /// The operands of the call, in parameter order (the index has none).
    pub(super) fn operands(&self) -> &[NodeId] {
        &self.operands
    }

    /// A new builder with the same parameters (same names, types and node ids: the
    /// parameters come before any other node), for a graph that takes what the body takes: a
    /// `while`'s predicate.
    pub(super) fn twin(&self) -> (GraphBuilder, Vec<NodeId>) {
        let mut nb = GraphBuilder::new();
        let ids = self
            .inputs
            .iter()
            .map(|&id| {
                let Op::Input { name, ty } = &self.nb.node(id).op else {
                    unreachable!("parameters are inputs")
                };
                let twin = nb.input(name.clone(), ty.clone());
                debug_assert_eq!(twin, id, "a body's parameters come first");
                twin
            })
            .collect();
        (nb, ids)
    }

    /// The body returning `results`, with its call's operands.
    pub(super) fn finish(self, results: Vec<NodeId>) -> Result<Body> {
        Ok(Body {
            graph: self.nb.finish(results)?,
            operands: self.operands,
            counts: self.counts,
        })
    }
}

/// The operands of a forward-mode body section (see [`LoopBody::tangent_section`]): the
/// operand of body input `k` is `x[k - offset]` (a scan's index has none), its tangent
/// `t[k - offset]`, used when `active[k - offset]`; `types` are the body's input types.
pub(super) struct Tangents<'a> {
    pub(super) types: &'a [TensorType],
    pub(super) x: &'a [NodeId],
    pub(super) t: &'a [Option<NodeId>],
    pub(super) active: &'a [bool],
    pub(super) offset: usize,
}

/// The parameters a forward-mode body binds a tangent graph's inputs to: its primal inputs
/// in order, then its tangent inputs in order.
#[derive(Default)]
pub(super) struct Bound {
    pub(super) primals: Vec<NodeId>,
    pub(super) tangents: Vec<NodeId>,
}

impl Bound {
    /// The arguments of the tangent graph: primals, then tangents.
    pub(super) fn args(&self) -> Vec<NodeId> {
        let mut args = self.primals.clone();
        args.extend(&self.tangents);
        args
    }
}

/// A finished loop body and its call's operands.
pub(super) struct Body {
    pub(super) graph: Graph,
    pub(super) operands: Vec<NodeId>,
    counts: [usize; 3],
}

impl Body {
    /// Without the nodes that no output needs.
    pub(super) fn dce(self) -> Body {
        Body {
            graph: quabla_ir::passes::dce(&self.graph),
            ..self
        }
    }

    /// A `scan` of `length` iterations from index `start` running this body, and its
    /// operands.
    pub(super) fn scan(
        self,
        length: usize,
        start: usize,
        reverse: bool,
    ) -> (RegionKind, Vec<NodeId>) {
        let [n_carry, n_const, n_xs] = self.counts;
        let kind = RegionKind::Scan(ScanBody {
            length,
            start,
            reverse,
            n_carry,
            n_const,
            n_xs,
            body: Arc::new(self.graph),
        });
        (kind, self.operands)
    }

    /// A `while` running this body while `cond` (which takes the same parameters) holds,
    /// and its operands.
    pub(super) fn while_loop(
        self,
        cond: Graph,
        max_trips: Option<usize>,
    ) -> (RegionKind, Vec<NodeId>) {
        let kind = RegionKind::While {
            n_carry: self.counts[Section::Carry as usize],
            cond: Arc::new(cond),
            body: Arc::new(self.graph),
            max_trips,
        };
        (kind, self.operands)
    }
}

/// Zeros of type `ty`.
pub(super) fn zeros(b: &mut GraphBuilder, ty: &TensorType) -> Result<NodeId> {
    let z = b.scalar(0.0, ty.dtype, false);
    b.broadcast_to(z, ty.shape.clone())
}

/// `t` without its weak flag: the type of a parameter.
pub(super) fn plain(t: &TensorType) -> TensorType {
    TensorType::new(t.dtype, t.shape.clone())
}

/// The (plain) types of `g`'s inputs.
pub(super) fn input_types(g: &Graph) -> Vec<TensorType> {
    g.inputs().map(|(_, _, t)| plain(t)).collect()
}

/// One input per type, named `<prefix><k>`: the parameters of a derived graph that is not a
/// loop body (it is inlined, not called).
pub(super) fn params(nb: &mut GraphBuilder, prefix: &str, types: Vec<TensorType>) -> Vec<NodeId> {
    types
        .into_iter()
        .enumerate()
        .map(|(k, t)| nb.input(format!("{prefix}{k}"), t))
        .collect()
}

/// `g` keeping only the outputs in `keep`, same inputs; the nodes only the others needed are
/// dropped. A body's VJP keeps the cotangents and drops the primal outputs.
pub(super) fn keep_outputs(g: &Graph, keep: Range<usize>) -> Result<Graph> {
    let mut nb = GraphBuilder::new();
    let ids: Vec<NodeId> = g
        .inputs()
        .map(|(_, name, ty)| nb.input(name.to_string(), plain(ty)))
        .collect();
    let outs = nb.inline_graph(g, &ids)?;
    Ok(quabla_ir::passes::dce(&nb.finish(outs[keep].to_vec())?))
}

/// Which outputs of `g` depend on the inputs flagged in `active`.
pub(super) fn dependence(g: &Graph, active: &[bool]) -> Vec<bool> {
    let mut dep = vec![false; g.len()];
    let mut k = 0;
    for (i, node) in g.nodes().iter().enumerate() {
        if matches!(node.op, Op::Input { .. }) {
            dep[i] = active.get(k).copied().unwrap_or(false);
            k += 1;
        } else {
            dep[i] = node.operands.iter().any(|o| dep[o.index()]);
        }
    }
    g.outputs().iter().map(|o| dep[o.index()]).collect()
}
