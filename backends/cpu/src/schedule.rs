//! The compiled schedule of a plan: which nodes run, in which order, fused into which
//! elementwise groups, in which storage slots their values live, and when each slot dies.
//!
//! Built once per plan by [`Schedule::build`]:
//!
//! 1. **Dead code**: only nodes that reach an output run.
//! 2. **Fusion**: elementwise nodes (`Op::is_elementwise`) are grouped greedily in topological
//!    order. A node joins an open group of one of its operands when it has that group's shape;
//!    failing that, the latest open group of its shape (so `sin(x)` and `cos(x)` of one input
//!    share a loop, and the kernels can compute them together); otherwise it starts a group. A
//!    group is sealed as soon as a node outside it consumes one of its members, so nothing can
//!    join it afterwards; this keeps the graph of groups acyclic (every edge out of a group
//!    seals it, so no other group depends on an open one, and a later member can never depend
//!    on a group that depends on it), and a group runs at the position of its last member. Operands from outside a group (inputs,
//!    other groups' outputs, scalars, operands of other shapes read with broadcast strides) are
//!    the group's externals; only members needed outside the group are written to memory.
//! 3. **Aliases**: `reshape` shares its operand's storage (row-major data is unchanged), a
//!    `broadcast` whose consumers are all elementwise is never materialized: its consumers read
//!    its operand with broadcast strides, and a matrix `transpose` whose consumers are all
//!    products taking it as their left operand is never copied: they read its operand
//!    transposed (`matmul::lhs_transpose_folds`, with the bits of the copy's product).
//! 4. **Shared factorizations**: `linalg` nodes of one decomposition (`svd_u`, `svd_s`,
//!    `svd_vh`, ...) on the same operand run as one step that factorizes once. Steps that use
//!    the LU factors of one matrix (every `solve` with it as the matrix, either way round, and
//!    its `slogdet`) share them across steps: the first factors it, the last drops the factors
//!    (a gradient of `slogdet` or of `solve` factors once, not twice). The factors are those
//!    each step would compute alone, so sharing never changes a bit.
//! 5. **Regions**: the sibling nodes of one control-flow region call (same region, same
//!    operands) run as one step at the first of them, which fills every sibling's slot; the
//!    region's bodies are compiled into schedules of their own here, once (see `region.rs`).
//! 6. **Parts over threads**: an elementwise group reading, element for element, a value that
//!    a step split over the threads wrote (a product in bands of rows, a split group) splits
//!    the same way (`Program::spread_input`), so each thread reads what its own cache holds.
//! 7. **Liveness**: each slot a step writes is released after the last step that reads it
//!    (plan outputs are kept), so its buffer returns to the pool and is reused by later steps.
//!    Input and constant slots are never released by steps: whoever runs the schedule binds
//!    them and takes them back, which lets a loop keep its constants bound across iterations.

use crate::kernels::elementwise::{Access, EwOp, ExtSpec, Member, Operand, Program};
use crate::kernels::layout::{broadcast_strides, strides};
use crate::kernels::linalg::Family;
use crate::region::RegionStep;
use quabla_backend::{BackendError, Precision, Result};
use quabla_ir::{
    region_groups, DType, Graph, HostData, LinalgKind, Op, Reducer, Shape, TensorType,
};
use std::collections::HashMap;

/// Figures of a compiled schedule, for tests and diagnostics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScheduleStats {
    /// Steps run per execution (fused groups and single kernels).
    pub steps: usize,
    /// Elementwise groups of two or more nodes.
    pub fused_groups: usize,
    /// Nodes computed inside those groups.
    pub fused_nodes: usize,
    /// Elementwise groups (of any size) that split their elements over the threads when the
    /// executor has several: large or expensive ones, and those reading a value a split step
    /// wrote.
    pub split_groups: usize,
    /// Values the steps write to memory (each one buffer from the pool).
    pub buffers: usize,
    /// The most step-produced values alive at once (the schedule's peak of live buffers).
    pub peak_live_buffers: usize,
    /// Bytes of step-produced values alive at once, at the schedule's peak: what a run of
    /// the plan holds beyond its inputs and constants (region bodies' own buffers aside).
    pub peak_live_bytes: usize,
    /// Steps that reuse the LU factors an earlier step computed instead of factoring again.
    pub shared_factorizations: usize,
}

/// A step's part in LU factors shared between steps: which of the run's shared factors it
/// uses (the first user computes them), and whether it is their last user (it drops them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LuShare {
    pub id: usize,
    pub last: bool,
}

/// How a schedule, and the schedules of its region bodies, are built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Build {
    /// Elementwise fusion, virtual broadcasts and transposes folded into products (values
    /// are identical either way).
    pub fuse: bool,
    /// The plan's [`Precision`]: under `Float32`, float32 `matmul`, `sum` and `mean` nodes run
    /// natively in float32 ([`NodeStep::native_f32`]).
    pub precision: Precision,
    /// The non-finite check (`jit(f).check_nans(true)`): no fusion and no scalar loop forms,
    /// so that every node is a step, and each step checks what it wrote ([`NanCheck`]).
    pub check_nans: bool,
    /// Loops and plans in machine code (`CpuOptions::native_loops`).
    pub native: bool,
    /// Machine code wherever it exists, unweighed (`CpuOptions::native_always`).
    pub native_always: bool,
}

/// What the non-finite check of a step knows of the node it computes, to stop the run at the
/// first non-finite value made from finite operands and say where it came from.
#[derive(Clone, Debug)]
pub(crate) struct NanCheck {
    /// The node's text line, `%7 = div(%5, %6) : tensor<3xf64>`.
    pub line: String,
    /// Where the node came from.
    pub origin: quabla_ir::Origin,
    /// The slot the step writes.
    pub out: usize,
    /// `%5` and its slot, for each operand with storage.
    pub operands: Vec<(String, usize)>,
}

/// One kernel invocation on single-node operands.
#[derive(Clone, Debug)]
pub(crate) struct NodeStep {
    pub op: Op,
    /// Slot and shape of each operand.
    pub args: Vec<(usize, Vec<usize>)>,
    pub out: usize,
    pub ty: TensorType,
    /// Further `linalg` nodes on the same operand and factorization, computed by this step
    /// from the same decomposition: their kind, slot and type.
    pub also: Vec<(LinalgKind, usize, TensorType)>,
    /// LU factors of the matrix operand shared with other steps (`solve`, `slogdet`).
    pub lu: Option<LuShare>,
    /// A float32 `matmul`, `sum` or `mean` compiled at `Precision::Float32`: computed with
    /// float32 arithmetic and accumulators instead of the float64 reference rule.
    pub native_f32: bool,
    /// A `matmul` whose left operand is a folded `transpose`: `args[0]` is the transpose's
    /// operand, read through a transposed view (`matmul::lhs_transpose_folds`).
    pub lhs_transposed: bool,
    /// Whether `args[0]` and `args[1]` are written by a step that splits its rows over the
    /// threads (when there are several): a kernel that must go through those rows in order
    /// relays from core to core (`team::relay`) instead of reading half of them from the
    /// other core's cache.
    pub rows_split: [bool; 2],
    /// An integer node ([`integer_node`]): run with the integer reference semantics.
    pub integer: bool,
}

#[derive(Clone, Debug)]
pub(crate) enum StepKind {
    Fused(Program),
    Node(NodeStep),
    /// One control-flow region call, filling the slots of all its sibling nodes.
    Region(Box<RegionStep>),
}

#[derive(Clone, Debug)]
pub(crate) struct Step {
    pub kind: StepKind,
    /// Slots whose last reader is this step.
    pub free: Vec<usize>,
    /// The non-finite check of the step's node, under [`Build::check_nans`] only.
    pub check: Option<Box<NanCheck>>,
}

/// Whether `node` computes with integer semantics or reads or writes an integer value
/// ([`quabla_ir::eval::is_integer_node`], casts to and from integers included).
pub(crate) fn integer_node(graph: &Graph, node: &quabla_ir::Node) -> bool {
    let operands: Vec<&TensorType> = node
        .operands
        .iter()
        .map(|o| &graph.nodes()[o.index()].ty)
        .collect();
    quabla_ir::eval::is_integer_node(&node.op, &operands, &node.ty)
        || operands.iter().any(|t| t.dtype.is_integer())
        || matches!(node.op, Op::Cast { to, .. } if to.is_integer())
}

impl Schedule {
    /// Appends how each region step runs (`RegionStep::describe`) at indentation `depth`.
    /// `inside_native`: the schedule is a body of a loop that runs as machine code.
    pub(crate) fn describe_regions(&self, depth: usize, out: &mut String, inside_native: bool) {
        for step in &self.steps {
            if let StepKind::Region(r) = &step.kind {
                r.describe(depth, out, inside_native);
            }
        }
    }
}

impl Step {
    /// What the step runs, for profiles: the op's name and its operands' shapes (`matmul
    /// 1024x64 64x64`; a product reading a folded transpose shows that operand as stored,
    /// `matmul 1024x64 1024x1` for `hᵀ g`), `fused[k]` for an elementwise group of `k` nodes,
    /// or the region's form.
    pub(crate) fn label(&self) -> String {
        match &self.kind {
            StepKind::Fused(p) => format!("fused[{}]", p.nodes),
            StepKind::Node(n) => {
                let mut label = n.op.name().to_string();
                for (_, dims) in &n.args {
                    let dims: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
                    label.push(' ');
                    label.push_str(&dims.join("x"));
                }
                label
            }
            StepKind::Region(r) => r.form_name().to_string(),
        }
    }

    fn reads(&self) -> Vec<usize> {
        match &self.kind {
            StepKind::Fused(p) => p.exts.iter().map(|e| e.slot).collect(),
            StepKind::Node(n) => n.args.iter().map(|a| a.0).collect(),
            StepKind::Region(r) => r.args.clone(),
        }
    }

    fn writes(&self) -> Vec<usize> {
        match &self.kind {
            StepKind::Fused(p) => p.outs.iter().map(|o| o.0).collect(),
            StepKind::Node(n) => std::iter::once(n.out)
                .chain(n.also.iter().map(|a| a.1))
                .collect(),
            StepKind::Region(r) => r.outs.iter().map(|o| o.1).collect(),
        }
    }
}

/// A plan compiled for the CPU executor.
#[derive(Clone, Debug)]
pub(crate) struct Schedule {
    pub steps: Vec<Step>,
    pub nslots: usize,
    /// The slot of each plan input, in binding order (`None` when unused).
    pub input_slots: Vec<Option<usize>>,
    pub constants: Vec<(usize, HostData)>,
    /// Slot and shape of each plan output.
    pub outputs: Vec<(usize, Shape)>,
    /// Whether each slot holds a plan output (written directly into shared host data when
    /// the schedule is a plan's, not a region body's).
    pub output_slot: Vec<bool>,
    /// Whether each slot is written by a step (else it is an input or a constant).
    pub produced: Vec<bool>,
    /// The output slots written by steps, each once: what a region driver returns to the pool
    /// after collecting a body's results.
    pub result_slots: Vec<usize>,
    /// Bytes of all step-written slots together: what a run holds when it keeps every buffer.
    pub produced_bytes: usize,
    /// How many LU factorizations the steps share ([`LuShare::id`] is below it).
    pub lu_shares: usize,
    /// Elements of the value each slot holds.
    pub slot_len: Vec<usize>,
    pub stats: ScheduleStats,
}

struct GroupBuild {
    members: Vec<usize>,
    shape: Shape,
    sealed: bool,
}

/// Whether the matrix `transpose` node `t` folds into its consumer `c`: an unbatched `matmul`
/// taking it as its left operand only, of a shape whose product reads a transposed view with
/// the bits of the copy (`matmul::lhs_transpose_folds`).
fn folds_into(nodes: &[quabla_ir::Node], t: usize, c: usize) -> bool {
    let product = &nodes[c];
    if !matches!(product.op, Op::Matmul) || product.operands.len() != 2 {
        return false;
    }
    let (lhs, rhs) = (product.operands[0].index(), product.operands[1].index());
    let (&[m, k], &[kb, n]) = (nodes[t].ty.shape.dims(), nodes[rhs].ty.shape.dims()) else {
        return false;
    };
    lhs == t && rhs != t && k == kb && crate::kernels::matmul::lhs_transpose_folds(m, k, n)
}

/// The check of the step computing node `i`, under [`Build::check_nans`].
fn nan_check(
    build: Build,
    graph: &Graph,
    i: usize,
    slot_of: &[Option<usize>],
) -> Option<Box<NanCheck>> {
    if !build.check_nans {
        return None;
    }
    let id = quabla_ir::NodeId(i as u32);
    let node = graph.node(id);
    Some(Box::new(NanCheck {
        line: quabla_ir::text::node_line(graph, id),
        origin: node.origin,
        out: slot_of[i]?,
        operands: node
            .operands
            .iter()
            .filter_map(|o| Some((o.to_string(), slot_of[o.index()]?)))
            .collect(),
    }))
}

impl Schedule {
    /// Compiles a verified graph. `build.fuse` enables elementwise fusion and virtual broadcasts
    /// (without it every node is its own step); it applies to region bodies too.
    pub(crate) fn build(graph: &Graph, build: Build) -> Result<Schedule> {
        let _scope = crate::region::CompileScope::enter();
        let fuse = build.fuse && !build.check_nans;
        let nodes = graph.nodes();
        let n = nodes.len();
        let mut needed = vec![false; n];
        let mut is_output = vec![false; n];
        for &o in graph.outputs() {
            needed[o.index()] = true;
            is_output[o.index()] = true;
        }
        // Effects run whether or not their result is used.
        for (i, node) in nodes.iter().enumerate() {
            if node.op.is_effect() {
                needed[i] = true;
            }
        }
        for i in (0..n).rev() {
            if needed[i] {
                for o in &nodes[i].operands {
                    needed[o.index()] = true;
                }
            }
        }
        if let Some(node) = (0..n)
            .filter(|&i| needed[i])
            .map(|i| &nodes[i])
            .find(|nd| matches!(nd.op, Op::Custom(_)))
        {
            let name = match &node.op {
                Op::Custom(c) => c.rule.name.clone(),
                _ => String::new(),
            };
            return Err(BackendError::Unsupported {
                op: "custom".into(),
                device: "cpu".into(),
                reason: format!(
                    "the custom rule {name} must be inlined before a plan reaches a backend"
                ),
            });
        }
        let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); n];
        for i in (0..n).filter(|&i| needed[i]) {
            for o in &nodes[i].operands {
                consumers[o.index()].push(i);
            }
        }
        // Integer nodes are never fused: they run one by one with the integer semantics of
        // `quabla_ir::eval` (`exec::run_integer_node`), since the fused kernels compute in
        // float64, which int64 does not fit.
        let ew: Vec<Option<EwOp>> = nodes
            .iter()
            .enumerate()
            .map(|(i, nd)| {
                if needed[i] && !integer_node(graph, nd) {
                    EwOp::from_op(&nd.op)
                } else {
                    None
                }
            })
            .collect();
        let virt: Vec<bool> = (0..n)
            .map(|i| {
                fuse && needed[i]
                    && matches!(nodes[i].op, Op::Broadcast { .. })
                    && !is_output[i]
                    && !consumers[i].is_empty()
                    && consumers[i].iter().all(|&c| ew[c].is_some())
            })
            .collect();

        // A matrix `transpose` whose every consumer is a large enough `matmul` taking it as
        // its left operand is never copied: the products read its operand transposed.
        let folded: Vec<bool> = (0..n)
            .map(|i| {
                fuse && needed[i]
                    && !is_output[i]
                    && !consumers[i].is_empty()
                    && matches!(&nodes[i].op, Op::Transpose { perm } if perm[..] == [1, 0])
                    && consumers[i].iter().all(|&c| folds_into(nodes, i, c))
            })
            .collect();

        // Fusion groups.
        let mut group_of: Vec<Option<usize>> = vec![None; n];
        let mut groups: Vec<GroupBuild> = Vec::new();
        // The latest group started for each shape (it may have been sealed since).
        let mut latest_of_shape: HashMap<Shape, usize> = HashMap::new();
        for i in (0..n).filter(|&i| needed[i]) {
            let node = &nodes[i];
            if ew[i].is_some() {
                let joined = if fuse {
                    node.operands
                        .iter()
                        .filter_map(|o| group_of[o.index()])
                        .find(|&g| !groups[g].sealed && groups[g].shape == node.ty.shape)
                        .or_else(|| {
                            latest_of_shape
                                .get(&node.ty.shape)
                                .copied()
                                .filter(|&g| !groups[g].sealed)
                        })
                } else {
                    None
                };
                let g = joined.unwrap_or_else(|| {
                    groups.push(GroupBuild {
                        members: Vec::new(),
                        shape: node.ty.shape.clone(),
                        sealed: false,
                    });
                    latest_of_shape.insert(node.ty.shape.clone(), groups.len() - 1);
                    groups.len() - 1
                });
                groups[g].members.push(i);
                group_of[i] = Some(g);
            }
            for o in &node.operands {
                if let Some(g) = group_of[o.index()] {
                    if group_of[i] != Some(g) {
                        groups[g].sealed = true;
                    }
                }
            }
        }
        let group_output = |m: usize| -> bool {
            is_output[m] || consumers[m].iter().any(|&c| group_of[c] != group_of[m])
        };

        // Storage slots.
        let mut slot_of: Vec<Option<usize>> = vec![None; n];
        let mut nslots = 0;
        let mut new_slot = || {
            nslots += 1;
            nslots - 1
        };
        for i in (0..n).filter(|&i| needed[i]) {
            slot_of[i] = match &nodes[i].op {
                Op::Reshape { .. } => slot_of[nodes[i].operands[0].index()],
                _ if virt[i] || folded[i] => None,
                _ if group_of[i].is_some() && !group_output(i) => None,
                _ => Some(new_slot()),
            };
        }
        let slot = |i: usize| -> Result<usize> {
            slot_of[i].ok_or_else(|| crate::kernels::internal(format!("node %{i} has no storage")))
        };

        // `linalg` nodes sharing an operand and a factorization run as one step, at the first.
        let mut absorbed = vec![false; n];
        let mut also: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut first_of: HashMap<(usize, Family), usize> = HashMap::new();
        for i in (0..n).filter(|&i| needed[i]) {
            if let Op::Linalg(kind) = nodes[i].op {
                let key = (nodes[i].operands[0].index(), Family::of(kind));
                match first_of.get(&key) {
                    Some(&f) => {
                        absorbed[i] = true;
                        also[f].push(i);
                    }
                    None => {
                        first_of.insert(key, i);
                    }
                }
            }
        }

        // Steps that read the LU factors of one matrix node share them. `first_of` holds one
        // `slogdet` step per operand, so a matrix contributes each of its steps once.
        let lu_user = |i: usize| -> bool {
            matches!(nodes[i].op, Op::Solve { .. })
                || matches!(nodes[i].op, Op::Linalg(k) if Family::of(k) == Family::Slogdet)
        };
        let mut lu_users: HashMap<usize, Vec<usize>> = HashMap::new();
        for i in (0..n).filter(|&i| needed[i] && !absorbed[i] && lu_user(i)) {
            lu_users
                .entry(nodes[i].operands[0].index())
                .or_default()
                .push(i);
        }
        let mut lu_share: Vec<Option<LuShare>> = vec![None; n];
        let mut shared_users: Vec<Vec<usize>> = lu_users
            .into_values()
            .filter(|users| users.len() > 1)
            .collect();
        shared_users.sort_unstable();
        let lu_shares = shared_users.len();
        for (id, users) in shared_users.iter().enumerate() {
            for (k, &i) in users.iter().enumerate() {
                lu_share[i] = Some(LuShare {
                    id,
                    last: k + 1 == users.len(),
                });
            }
        }

        // The needed siblings of a region call run as one step, at the first of them: they
        // share their operands, so all of them are available there, and every consumer of a
        // sibling comes after it.
        let mut siblings: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (first, members) in region_groups(graph) {
            let live: Vec<usize> = members.into_iter().filter(|&m| needed[m]).collect();
            if live.first() == Some(&first) {
                for &m in &live[1..] {
                    absorbed[m] = true;
                }
                siblings[first] = live;
            }
        }

        // Steps, in order of each unit's last node. `spread[s]`: slot `s` is written by a step
        // that splits its rows over the threads (when there are several), which makes the
        // elementwise groups reading it split the same way (`Program::spread_input`).
        let mut steps: Vec<Step> = Vec::new();
        let mut spread = vec![false; nslots];
        for i in (0..n).filter(|&i| needed[i] && !absorbed[i]) {
            let node = &nodes[i];
            if let Some(g) = group_of[i] {
                if groups[g].members.last() == Some(&i) {
                    let mut program =
                        build_group(graph, &groups[g], &group_of, &virt, &slot_of, &group_output)?;
                    program.spread_input = program
                        .exts
                        .iter()
                        .any(|e| e.access == Access::Full && spread[e.slot]);
                    if program.splits_when_threaded() {
                        for &(s, _) in &program.outs {
                            spread[s] = true;
                        }
                    }
                    steps.push(Step {
                        kind: StepKind::Fused(program),
                        free: Vec::new(),
                        check: nan_check(build, graph, i, &slot_of),
                    });
                }
                continue;
            }
            if node.op.is_leaf() || virt[i] || folded[i] || matches!(node.op, Op::Reshape { .. }) {
                continue;
            }
            if let Op::Region(call) = &node.op {
                let args = node
                    .operands
                    .iter()
                    .map(|o| slot(o.index()))
                    .collect::<Result<Vec<_>>>()?;
                let outs = siblings[i]
                    .iter()
                    .map(|&m| match &nodes[m].op {
                        Op::Region(c) => Ok((c.output, slot(m)?)),
                        _ => Err(crate::kernels::internal(
                            "a non-region node in a region group",
                        )),
                    })
                    .collect::<Result<Vec<_>>>()?;
                let step = RegionStep::compile(&call.region, args, outs, build)?;
                // A region's body steps check themselves.
                steps.push(Step {
                    kind: StepKind::Region(Box::new(step)),
                    free: Vec::new(),
                    check: None,
                });
                continue;
            }
            if let (Op::Matmul, [_, rhs]) = (&node.op, &node.operands[..]) {
                if let (&[rows, cols], &[inner, _]) =
                    (node.ty.shape.dims(), nodes[rhs.index()].ty.shape.dims())
                {
                    if crate::kernels::matmul::splits_rows_when_threaded(rows, inner, cols) {
                        spread[slot(i)?] = true;
                    }
                }
            }
            // A folded transpose is read as its own operand.
            let lhs_transposed = matches!(node.op, Op::Matmul) && folded[node.operands[0].index()];
            let args = node
                .operands
                .iter()
                .enumerate()
                .map(|(position, o)| {
                    let o = if position == 0 && lhs_transposed {
                        nodes[o.index()].operands[0]
                    } else {
                        *o
                    };
                    Ok((slot(o.index())?, nodes[o.index()].ty.shape.dims().to_vec()))
                })
                .collect::<Result<Vec<_>>>()?;
            let rows_split = [0, 1].map(|a| args.get(a).is_some_and(|&(s, _)| spread[s]));
            steps.push(Step {
                kind: StepKind::Node(NodeStep {
                    op: node.op.clone(),
                    args,
                    out: slot(i)?,
                    ty: node.ty.clone(),
                    also: also[i]
                        .iter()
                        .map(|&j| match nodes[j].op {
                            Op::Linalg(kind) => Ok((kind, slot(j)?, nodes[j].ty.clone())),
                            _ => Err(crate::kernels::internal(
                                "a non-linalg node shares a factorization",
                            )),
                        })
                        .collect::<Result<Vec<_>>>()?,
                    lu: lu_share[i],
                    native_f32: build.precision == Precision::Float32
                        && node.ty.dtype == DType::F32
                        && match &node.op {
                            Op::Matmul => true,
                            Op::Reduce { kind, .. } => {
                                matches!(kind.reducer(), Reducer::Sum | Reducer::Mean)
                            }
                            _ => false,
                        },
                    lhs_transposed,
                    rows_split,
                    integer: integer_node(graph, node),
                }),
                free: Vec::new(),
                check: nan_check(build, graph, i, &slot_of),
            });
        }

        // Liveness.
        let mut keep = vec![false; nslots];
        let mut outputs = Vec::new();
        for &o in graph.outputs() {
            let s = slot(o.index())?;
            keep[s] = true;
            outputs.push((s, nodes[o.index()].ty.shape.clone()));
        }
        let mut last: Vec<Option<usize>> = vec![None; nslots];
        let mut produced_by: Vec<Option<usize>> = vec![None; nslots];
        for (k, step) in steps.iter().enumerate() {
            for s in step.reads() {
                last[s] = Some(k);
            }
            for s in step.writes() {
                produced_by[s] = Some(k);
            }
        }
        for s in 0..nslots {
            if keep[s] || produced_by[s].is_none() {
                continue;
            }
            if let Some(k) = last[s].or(produced_by[s]) {
                if !steps[k].free.contains(&s) {
                    steps[k].free.push(s);
                }
            }
        }

        // Leaves.
        let mut input_slots = Vec::new();
        let mut constants = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            match &node.op {
                Op::Input { .. } => input_slots.push(slot_of[i]),
                Op::Constant { data, .. } => {
                    if let Some(s) = slot_of[i] {
                        constants.push((s, data.clone()));
                    }
                }
                _ => {}
            }
        }

        validate(&steps, nslots, &input_slots, &constants, &keep)?;
        let produced: Vec<bool> = produced_by.iter().map(Option::is_some).collect();
        let mut slot_len = vec![0usize; nslots];
        let mut slot_bytes = vec![0usize; nslots];
        let mut produced_bytes: usize = 0;
        for i in 0..n {
            if let Some(s) = slot_of[i] {
                // A reshape shares its operand's slot (and element count): count a slot once.
                // Each term fits (a checked shape); their sum saturates, since many large
                // values of a traced graph may together exceed any address space.
                let bytes = nodes[i].ty.shape.nbytes(nodes[i].ty.dtype);
                if slot_len[s] == 0 && produced[s] {
                    produced_bytes = produced_bytes.saturating_add(bytes);
                }
                slot_len[s] = nodes[i].ty.shape.size();
                slot_bytes[s] = bytes;
            }
        }
        let mut result_slots: Vec<usize> = Vec::new();
        for (s, _) in &outputs {
            if produced[*s] && !result_slots.contains(s) {
                result_slots.push(*s);
            }
        }

        // Statistics.
        let mut stats = ScheduleStats {
            steps: steps.len(),
            shared_factorizations: shared_users.iter().map(|u| u.len() - 1).sum(),
            ..ScheduleStats::default()
        };
        let mut live = 0usize;
        let mut live_bytes = 0usize;
        for step in &steps {
            let writes = step.writes();
            stats.buffers += writes.len();
            live += writes.len();
            live_bytes = writes
                .iter()
                .fold(live_bytes, |b, &s| b.saturating_add(slot_bytes[s]));
            stats.peak_live_buffers = stats.peak_live_buffers.max(live);
            stats.peak_live_bytes = stats.peak_live_bytes.max(live_bytes);
            for &s in step.free.iter().filter(|&&s| produced_by[s].is_some()) {
                live -= 1;
                live_bytes = live_bytes.saturating_sub(slot_bytes[s]);
            }
            if let StepKind::Fused(p) = &step.kind {
                stats.split_groups += usize::from(p.splits_when_threaded());
                if p.nodes > 1 {
                    stats.fused_groups += 1;
                    stats.fused_nodes += p.nodes;
                }
            }
        }
        Ok(Schedule {
            steps,
            nslots,
            input_slots,
            constants,
            outputs,
            output_slot: keep,
            produced,
            result_slots,
            produced_bytes,
            lu_shares,
            slot_len,
            stats,
        })
    }
}

/// Checks the schedule by simulation: every step reads only slots that hold a value, writes
/// only empty slots, and every output is present at the end.
fn validate(
    steps: &[Step],
    nslots: usize,
    input_slots: &[Option<usize>],
    constants: &[(usize, HostData)],
    keep: &[bool],
) -> Result<()> {
    let mut present = vec![false; nslots];
    for &s in input_slots.iter().flatten() {
        present[s] = true;
    }
    for (s, _) in constants {
        present[*s] = true;
    }
    for (k, step) in steps.iter().enumerate() {
        if let Some(s) = step.reads().into_iter().find(|&s| !present[s]) {
            return Err(crate::kernels::internal(format!(
                "step {k} reads slot {s} before it is written"
            )));
        }
        for s in step.writes() {
            if present[s] {
                return Err(crate::kernels::internal(format!(
                    "step {k} overwrites slot {s}"
                )));
            }
            present[s] = true;
        }
        for &s in &step.free {
            present[s] = false;
        }
    }
    match (0..nslots).find(|&s| keep[s] && !present[s]) {
        Some(s) => Err(crate::kernels::internal(format!(
            "output slot {s} is not computed"
        ))),
        None => Ok(()),
    }
}

/// Compiles one group into a register program.
fn build_group(
    graph: &Graph,
    group: &GroupBuild,
    group_of: &[Option<usize>],
    virt: &[bool],
    slot_of: &[Option<usize>],
    group_output: &dyn Fn(usize) -> bool,
) -> Result<Program> {
    let nodes = graph.nodes();
    let gdims = group.shape.dims().to_vec();
    let g = group_of[group.members[0]];
    let index: HashMap<usize, usize> = group
        .members
        .iter()
        .enumerate()
        .map(|(k, &m)| (m, k))
        .collect();
    let mut exts: Vec<ExtSpec> = Vec::new();
    // The index of each distinct (slot, access) in `exts`: a group may read thousands of
    // externals (one scalar constant per node of a long chain), so no linear search.
    let mut ext_index: HashMap<(usize, Access), usize> = HashMap::new();
    let mut outs = Vec::new();
    let mut members = Vec::with_capacity(group.members.len());
    for &m in &group.members {
        let node = &nodes[m];
        let mut args = Vec::with_capacity(node.operands.len());
        for o in &node.operands {
            let o = o.index();
            if group_of[o] == g {
                args.push(Operand::Member(index[&o]));
                continue;
            }
            // Resolve the storage the external is read from, and its strides over the group.
            let (src, strides_in_group) = if virt[o] {
                let s = nodes[o].operands[0].index();
                let sb = nodes[o].ty.shape.dims();
                let inner = broadcast_strides(nodes[s].ty.shape.dims(), sb);
                let outer = broadcast_strides(sb, &gdims);
                let lead = gdims.len() - sb.len();
                let st: Vec<usize> = (0..gdims.len())
                    .map(|a| {
                        if a < lead || outer[a] == 0 {
                            0
                        } else {
                            inner[a - lead]
                        }
                    })
                    .collect();
                (s, st)
            } else {
                (
                    o,
                    broadcast_strides(nodes[o].ty.shape.dims(), &gdims).to_vec(),
                )
            };
            let slot = slot_of[src].ok_or_else(|| {
                crate::kernels::internal(format!("external %{src} has no storage"))
            })?;
            let access = if nodes[src].ty.shape.size() == 1 {
                Access::Scalar
            } else {
                let rm = strides(&gdims);
                let full = (0..gdims.len()).all(|a| gdims[a] == 1 || strides_in_group[a] == rm[a]);
                if full {
                    Access::Full
                } else {
                    Access::Strided(strides_in_group)
                }
            };
            let e = *ext_index.entry((slot, access.clone())).or_insert_with(|| {
                exts.push(ExtSpec {
                    slot,
                    dtype: nodes[src].ty.dtype,
                    access,
                });
                exts.len() - 1
            });
            args.push(Operand::Ext(e));
        }
        let output = if group_output(m) {
            let s = slot_of[m]
                .ok_or_else(|| crate::kernels::internal("a group output has no storage"))?;
            outs.push((s, node.ty.dtype));
            Some(outs.len() - 1)
        } else {
            None
        };
        let op = EwOp::from_op(&node.op)
            .ok_or_else(|| crate::kernels::internal("a non-elementwise group member"))?;
        members.push(Member {
            op,
            args,
            dtype: node.ty.dtype,
            output,
        });
    }
    Ok(Program::build(gdims, exts, &members, outs))
}
