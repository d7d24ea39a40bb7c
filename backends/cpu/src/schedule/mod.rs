//! The compiled schedule of a plan: which nodes run, in which order, fused into which
//! elementwise groups, in which storage slots their values live, and when each slot dies.
//!
//! Built once per plan by [`Schedule::build`], in seven phases over a draft schedule
//! (`draft.rs`), each in its own module and each with file tests of its own
//! (`tests/schedule/<phase>/`, compared with [`describe_phases`]):
//!
//! 1. **Dead code** (`dead_code.rs`): only nodes that reach an output, and effects, run.
//! 2. **Fusion** (`fusion.rs`): elementwise nodes grouped greedily into tiled register
//!    programs.
//! 3. **Aliases** (`aliases.rs`): which values get storage; reshapes share, broadcasts read by
//!    fused groups and transposes read by products are never materialized.
//! 4. **Shared factorizations** (`factorizations.rs`): one step per decomposition and operand,
//!    LU factors shared by every step that solves with one matrix.
//! 5. **Region calls** (`siblings.rs`): the siblings of one control-flow call run as one step.
//! 6. **Steps and parts over threads** (`steps.rs`): the steps in order, region bodies
//!    compiled by the [`CompileRegion`] callback the caller gives, and groups reading a split
//!    value split the same way.
//! 7. **Liveness** (`liveness.rs`): each written slot released after its last reader.
//!
//! The scheduler knows a region step only as a [`RegionCall`]: the region runner
//! (`region/`) compiles region bodies and runs them, and is never imported here, so the
//! modules of the CPU crate import one another without a circle (schedule, then exec, then
//! region).

mod aliases;
mod dead_code;
mod draft;
mod factorizations;
mod fusion;
mod liveness;
mod siblings;
mod steps;
mod text;

use crate::buffer::{Storage, View};
use crate::kernels::elementwise::Program;
use crate::workspace::Workspace;
use draft::Draft;
use quabla_backend::{Precision, Result};
use quabla_ir::{Graph, HostData, LinalgKind, Op, Region, Shape, TensorType};
use std::any::Any;

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
    Region(Box<dyn RegionCall>),
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
            StepKind::Region(r) => r.args().to_vec(),
        }
    }

    fn writes(&self) -> Vec<usize> {
        match &self.kind {
            StepKind::Fused(p) => p.outs.iter().map(|o| o.0).collect(),
            StepKind::Node(n) => std::iter::once(n.out)
                .chain(n.also.iter().map(|a| a.1))
                .collect(),
            StepKind::Region(r) => r.outs().iter().map(|o| o.1).collect(),
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

/// The slots of a region call: its operands', in the region's operand order, and for each
/// sibling node the region output it is and its slot.
#[derive(Clone, Debug)]
pub(crate) struct RegionSlots {
    pub args: Vec<usize>,
    pub outs: Vec<(usize, usize)>,
}

/// A compiled control-flow region call, as the schedule and the executor see it. The region
/// runner implements it; the scheduler gets one for each region call from the
/// [`CompileRegion`] callback.
pub(crate) trait RegionCall: std::fmt::Debug + Send + Sync {
    /// The slots of the call's operands, in the region's operand order.
    fn args(&self) -> &[usize];
    /// For each sibling node: the region output it is and its slot.
    fn outs(&self) -> &[(usize, usize)];
    /// The region's text name (`fori`, `scan_vjp`, `while`, ...).
    fn form_name(&self) -> &'static str;
    /// Appends how the region runs to `out` for `CpuExecutable::report`: one line at
    /// indentation `depth`, then the regions nested in its bodies one level deeper.
    /// `inside_native`: the call is part of an enclosing loop's machine code.
    fn describe(&self, depth: usize, out: &mut String, inside_native: bool);
    /// Runs the region once on the operand values and returns the value of every sibling (in
    /// `outs` order). `shared[i]`: sibling `i` is a plan output, so a stacked output may be
    /// written straight into shared host data.
    fn run(
        &self,
        operands: &[View<'_>],
        shared: &[bool],
        ws: &mut Workspace,
        threads: usize,
    ) -> Result<Vec<Storage<'static>>>;
    /// The runner's own type, for the runner's cost model.
    fn as_any(&self) -> &dyn Any;
    fn clone_box(&self) -> Box<dyn RegionCall>;
}

impl Clone for Box<dyn RegionCall> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// How the scheduler compiles a region call: the region, its slots, and the build of the
/// enclosing schedule (which its bodies follow).
pub(crate) type CompileRegion<'c> =
    &'c dyn Fn(&Region, RegionSlots, Build) -> Result<Box<dyn RegionCall>>;

impl Schedule {
    /// Compiles a verified graph, phase by phase (the module doc). `build.fuse` enables
    /// elementwise fusion and the aliases (without it every node is its own step); it applies
    /// to region bodies too, which `compile_region` compiles.
    pub(crate) fn build(
        graph: &Graph,
        build: Build,
        compile_region: CompileRegion<'_>,
    ) -> Result<Schedule> {
        let draft = draft_through(graph, build, compile_region, Phase::Steps)?;
        liveness::finish(draft)
    }
}

/// The phases of [`Schedule::build`], in order, by the names of their file-test directories.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    DeadCode,
    Fusion,
    Aliases,
    Factorizations,
    Siblings,
    Steps,
    Liveness,
}

impl Phase {
    pub(crate) const ALL: [Phase; 7] = [
        Phase::DeadCode,
        Phase::Fusion,
        Phase::Aliases,
        Phase::Factorizations,
        Phase::Siblings,
        Phase::Steps,
        Phase::Liveness,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Phase::DeadCode => "dead_code",
            Phase::Fusion => "fusion",
            Phase::Aliases => "aliases",
            Phase::Factorizations => "factorizations",
            Phase::Siblings => "siblings",
            Phase::Steps => "steps",
            Phase::Liveness => "liveness",
        }
    }
}

/// The draft after the phases up to `last` (at most [`Phase::Steps`]).
fn draft_through<'g>(
    graph: &'g Graph,
    build: Build,
    compile_region: CompileRegion<'_>,
    last: Phase,
) -> Result<Draft<'g>> {
    let mut draft = Draft::new(graph, build);
    dead_code::mark(&mut draft)?;
    if last >= Phase::Fusion {
        fusion::group(&mut draft);
    }
    if last >= Phase::Aliases {
        aliases::assign(&mut draft);
    }
    if last >= Phase::Factorizations {
        factorizations::share(&mut draft);
    }
    if last >= Phase::Siblings {
        siblings::gather(&mut draft);
    }
    if last >= Phase::Steps {
        steps::make(&mut draft, compile_region)?;
    }
    Ok(draft)
}

/// What the scheduler has decided after the phase named `phase`, as text (one fact per line):
/// what the file tests of each phase compare. The phases after it do not run.
pub(crate) fn describe_phases(
    graph: &Graph,
    build: Build,
    compile_region: CompileRegion<'_>,
    phase: &str,
) -> Result<String> {
    let Some(phase) = Phase::ALL.into_iter().find(|p| p.name() == phase) else {
        return Err(crate::kernels::internal(format!(
            "no schedule phase {phase:?} (the phases: {})",
            Phase::ALL.map(Phase::name).join(", ")
        )));
    };
    if phase == Phase::Liveness {
        let schedule = Schedule::build(graph, build, compile_region)?;
        return Ok(text::schedule(&schedule));
    }
    let draft = draft_through(graph, build, compile_region, phase)?;
    Ok(text::draft(&draft, phase))
}
