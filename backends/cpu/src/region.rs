//! Control-flow regions on the CPU: each region call compiled once, with its bodies, into a
//! step, and the loops that run it.
//!
//! Every body graph goes through the plan passes (so `custom` calls inside are inlined and
//! constants folded) and becomes a [`Schedule`] of its own when the enclosing plan is compiled;
//! nested regions compile recursively. Only the outputs the plan uses are kept: a branch or a
//! scan body computes no stacked output that no sibling node reads.
//!
//! Running a region never unrolls it. A loop holds one [`Frame`] per body for the whole region
//! execution: loop constants and scanned operands are bound as borrowed views of the enclosing
//! frame (a scanned operand's slice `k` is a subslice, never a copy), and each iteration reruns
//! the same compiled steps. Nothing is validated or converted per iteration, and in steady
//! state the loop machinery allocates nothing per iteration (a kernel that needs scratch of
//! its own, or a region nested in the body, allocates as it would in a plan). Four forms, the
//! first that applies:
//!
//! - **Machine code** (`native`; loops whose values all have at most `NATIVE_ELEMENTS`
//!   elements, where the cost model says it beats the interpreter): compiled at the loop's
//!   first run, with the carries as arrays of 8-byte words in and out (float64 values, int64
//!   bits for integers: `native::words`); a kernel failing inside it sends the loop back to
//!   the forms below.
//! - **Scalar** (bodies whose every value has one element, see `scalar.rs`): the loop runs on
//!   an array of float64 values and copies each carry as one number.
//! - **Swapping** (bodies whose step-written values total at most [`REUSE_BYTES`] and whose
//!   carries are distinct step results): the frame keeps every buffer in its slot between
//!   iterations ([`Mode::Reuse`]), and after each iteration each carry's input slot swaps
//!   with the slot of the result that replaces it, so the next iteration writes its result into
//!   the old carry's buffer. An iteration moves no value through the pool.
//! - **Moving** (every other body): carries move out of the frame and back in; a result is
//!   moved out of its slot when that is safe (decided at compile time, see [`take_plan`]) and
//!   copied otherwise, and the old carries go back to the pool, where the next iteration finds
//!   them. Bodies over the size limit also release every value at its last use, as a plan
//!   does, so they keep the memory of their peak of live values.
//!
//! Every loop checks the run's cancellation flags between iterations (the scalar forms every
//! [`SCALAR_CHECK_EVERY`] iterations, a few microseconds apart), besides the check before
//! every step of a body, so a loop that never ends on its own stops soon after its token is
//! cancelled or the process is interrupted. A scan's stacked outputs (the tapes of reverse-mode
//! loops among them) are allocated before the first iteration, fallibly: a loop whose tape the
//! machine cannot hold fails at once with `OutOfMemory` instead of after running.

use crate::buffer::{Buffer, Storage, View, ViewMut};
use crate::exec::{out_of_memory, Frame, Mode, Workspace};
use crate::kernels::internal;
use crate::native::{self, GraphBody, LoopBody, NativeScan, NativeWhile, OwnCode, ScanShape};
use crate::scalar::ScalarBody;
use crate::schedule::{Build, Schedule};
use quabla_backend::{Precision, Result};
use quabla_ir::{DType, Graph, NodeId, Plan, Region, RegionKind, TensorType};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

mod cost;

/// The most bytes of step-written values a loop body may hold at once to run in the swapping
/// form: beyond it the steps' own work dwarfs the per-iteration bookkeeping, and releasing dead
/// values at their last use keeps the body's memory at its peak of live values.
const REUSE_BYTES: usize = 1 << 20;

/// Iterations of a loop in scalar form between two cancellation checks. Such an iteration is
/// a few float64 operations (tens of nanoseconds), which a check per iteration would slow
/// measurably; every 256th keeps a cancelled loop's reaction within microseconds. Loops of
/// other forms check every iteration (and every step inside it), which costs nothing next to
/// their steps.
const SCALAR_CHECK_EVERY: usize = 256;

/// Compiled regions of the plan being compiled, by region address and outputs used.
type Compiled = HashMap<(usize, Vec<usize>), Arc<Exec>>;

thread_local! {
    static COMPILED: RefCell<Option<Compiled>> = const { RefCell::new(None) };
}

/// The scope of one plan compile, in which a region called in several places (with the same
/// outputs used) is compiled once, its bodies, schedules and machine code shared. Derivatives
/// of nested loops call one inner loop from many bodies (the forward pass, the recomputation
/// of each checkpointed block, the body's VJP): compiled per call, a loop nested `d` deep was
/// compiled `O(d)` times over, and the plan's compile grew as `d²`. Addresses identify regions
/// only while the plan's graph holds them, which it does for the whole compile; the outermost
/// [`Schedule::build`] opens the scope and its guard closes it.
pub(crate) struct CompileScope {
    owner: bool,
}

impl CompileScope {
    /// Opens the scope, or joins the one already open on this thread.
    pub(crate) fn enter() -> CompileScope {
        let owner = COMPILED.with(|c| {
            let mut c = c.borrow_mut();
            let fresh = c.is_none();
            if fresh {
                *c = Some(HashMap::new());
            }
            fresh
        });
        CompileScope { owner }
    }

    fn key(region: &Region, used: &[usize]) -> (usize, Vec<usize>) {
        (std::ptr::from_ref(region) as usize, used.to_vec())
    }

    fn lookup(region: &Region, used: &[usize]) -> Option<Arc<Exec>> {
        COMPILED.with(|c| {
            c.borrow()
                .as_ref()
                .and_then(|m| m.get(&Self::key(region, used)).cloned())
        })
    }

    fn remember(region: &Region, used: Vec<usize>, exec: &Arc<Exec>) {
        COMPILED.with(|c| {
            if let Some(m) = c.borrow_mut().as_mut() {
                m.insert(Self::key(region, &used), Arc::clone(exec));
            }
        });
    }
}

impl Drop for CompileScope {
    fn drop(&mut self) {
        if self.owner {
            COMPILED.with(|c| *c.borrow_mut() = None);
        }
    }
}

/// A region call of a schedule: the operand slots, the slot of each sibling node, and the
/// compiled bodies.
#[derive(Clone, Debug)]
pub(crate) struct RegionStep {
    /// The region's text name, for messages.
    form: &'static str,
    /// The region's address: its identity while the plan holds it, by which the translated
    /// form of the enclosing body finds the region's own (`cost.rs`).
    region: usize,
    /// Operand slots, in the region's operand order.
    pub args: Vec<usize>,
    /// For each sibling node: the region output it is and its slot.
    pub outs: Vec<(usize, usize)>,
    /// Shared by every call of the same region with the same outputs used (see
    /// [`CompileScope`]).
    exec: Arc<Exec>,
}

#[derive(Clone, Debug)]
enum Exec {
    /// Both branches compiled with the outputs of `outs`, in that order.
    Cond {
        then_branch: Body,
        else_branch: Body,
    },
    Scan(Box<Scan>),
    While {
        n_carry: usize,
        /// Stop after this many trips even while the predicate holds.
        max_trips: Option<usize>,
        /// Takes `(carries.., consts..)`; its one output is the predicate.
        cond: Body,
        body: Body,
        /// The swapping form's carry slots of `body`, when it qualifies.
        swaps: Option<Vec<Swap>>,
        /// The loop in machine code, when both bodies can be translated: the elements of the
        /// carries and of the loop constants.
        native: LazyNative<(Vec<usize>, Vec<usize>), NativeWhile>,
    },
}

#[derive(Clone, Debug)]
struct Scan {
    /// Outputs: the carries, then the stacked outputs of `ys`.
    body: Body,
    length: usize,
    start: usize,
    reverse: bool,
    n_carry: usize,
    n_const: usize,
    /// Elements of one slice of each scanned operand.
    xs_len: Vec<usize>,
    ys: Vec<StackedOut>,
    index_dtype: DType,
    /// The swapping form's carry slots, when the body qualifies.
    swaps: Option<Vec<Swap>>,
    /// The loop in machine code, when the body can be translated.
    native: LazyNative<ScanShape, NativeScan>,
}

/// A loop's machine code, compiled at the loop's first run rather than with the plan: a loop
/// nested in a body that runs as machine code never runs on its own (its code is part of the
/// enclosing loop's), so compiling it with the plan was wasted work (most of the compile time
/// of a gradient through an adaptive ODE solve), and a loop on a branch never taken costs
/// nothing.
#[derive(Clone, Debug)]
struct LazyNative<S, T> {
    /// What the compile needs beyond the bodies; `None` when the loop stays interpreted.
    shape: Option<S>,
    /// The code, once compiled, or why the code generator declined (`None`: a body has no
    /// translated form, and says why itself).
    code: OnceLock<std::result::Result<T, Option<String>>>,
}

impl<S, T> Default for LazyNative<S, T> {
    fn default() -> Self {
        LazyNative {
            shape: None,
            code: OnceLock::new(),
        }
    }
}

impl<S, T> LazyNative<S, T> {
    fn wanted(shape: S) -> Self {
        LazyNative {
            shape: Some(shape),
            code: OnceLock::new(),
        }
    }

    /// The code, compiled by `compile` on first use.
    fn get(
        &self,
        compile: impl FnOnce(&S) -> std::result::Result<T, Option<String>>,
    ) -> Option<&T> {
        let shape = self.shape.as_ref()?;
        self.code.get_or_init(|| compile(shape)).as_ref().ok()
    }

    /// Why the code generator declined the loop, once it was asked.
    fn declined(&self) -> Option<&str> {
        self.code.get()?.as_ref().err()?.as_deref()
    }
}

impl Scan {
    /// The scan's machine code, compiled on first use.
    fn native(&self) -> Option<&NativeScan> {
        self.native.get(|shape| {
            NativeScan::compile(self.body.translatable().ok_or(None)?, shape).map_err(Some)
        })
    }
}

/// The machine code of a while loop, compiled on first use.
fn native_while<'a>(
    native: &'a LazyNative<(Vec<usize>, Vec<usize>), NativeWhile>,
    cond: &Body,
    body: &Body,
) -> Option<&'a NativeWhile> {
    native.get(|(carries, consts)| {
        let (cond, body) = (cond.translatable(), body.translatable());
        NativeWhile::compile(cond.ok_or(None)?, body.ok_or(None)?, carries, consts).map_err(Some)
    })
}

/// Where a carry lives in the swapping form: the body's input slot (`None` when the body
/// never reads it) and the slot of the result that replaces it.
#[derive(Clone, Copy, Debug)]
struct Swap {
    input: Option<usize>,
    result: usize,
}

/// A stacked output of a scan that some sibling node reads.
#[derive(Clone, Debug)]
struct StackedOut {
    /// The region output.
    output: usize,
    /// The compiled body's output that fills its slices.
    body_output: usize,
    dtype: DType,
    /// Elements of one slice.
    len: usize,
    /// The extents of the whole stacked output, `[length, *slice]` (for messages).
    dims: Vec<usize>,
}

/// A compiled body, per output whether collecting it moves it out of its slot, and its
/// scalar form when it has one.
#[derive(Clone, Debug)]
struct Body {
    schedule: Schedule,
    take: Vec<bool>,
    scalar: Option<ScalarBody>,
    /// For a body without a scalar form (when machine code is on): its plan graph, from which
    /// the graph form of `native` is built when a loop's code is first needed.
    graph: Option<GraphSource>,
}

impl GraphSource {
    /// The translated form of the body whose schedule is `schedule`, built on first use, or
    /// why there is none.
    fn form(&self, schedule: &Schedule) -> &std::result::Result<GraphBody, String> {
        self.form.get_or_init(|| {
            let mut body = GraphBody::new(&self.graph, self.inputs)?;
            if self.weigh {
                let mut own_code = OwnCode::new();
                let interpreted = cost::interpreted(schedule, &body, &mut own_code);
                body.weigh(interpreted, own_code)?;
            }
            Ok(body)
        })
    }
}

/// A body's plan graph and, once built, its translated form (`None` inside when it has none).
#[derive(Clone, Debug)]
struct GraphSource {
    graph: Graph,
    inputs: usize,
    /// Whether the machine code is weighed against the interpreter (`GraphBody::pays_off`)
    /// or taken unweighed.
    weigh: bool,
    form: OnceLock<std::result::Result<GraphBody, String>>,
}

impl Body {
    /// Compiles `graph` restricted to the outputs `outputs` (indices into its outputs), of
    /// which the first `collected` are moved or copied out after a run and the rest only read.
    /// `rebound[j]`: input `j` is bound afresh before every run, so an output that is that
    /// input may be moved out.
    fn compile(
        graph: &Graph,
        outputs: &[usize],
        collected: usize,
        rebound: &[bool],
        build: Build,
    ) -> Result<Body> {
        let selected = outputs
            .iter()
            .map(|&o| {
                graph
                    .outputs()
                    .get(o)
                    .copied()
                    .ok_or_else(|| internal(format!("a region body has no output {o}")))
            })
            .collect::<Result<Vec<NodeId>>>()?;
        let plan = if selected == graph.outputs() {
            Plan::compile(graph)
        } else {
            let pruned = Graph::from_parts(graph.nodes().to_vec(), selected)
                .map_err(|e| internal(format!("a region body: {e}")))?;
            Plan::compile(&pruned)
        };
        let schedule = Schedule::build(plan.graph(), build)?;
        let take = take_plan(&schedule, collected, rebound);
        let output_types: Vec<TensorType> = plan.output_types().into_iter().cloned().collect();
        // The scalar form runs no steps, so it has no non-finite check. It holds every value
        // as a float64, so a body with an integer value has none (int64 is not exact there):
        // its machine code is made from the graph form, which holds integers as int64.
        let scalar = if build.check_nans || quabla_ir::eval::has_integers(plan.graph()) {
            None
        } else {
            ScalarBody::new(&schedule, &output_types)
        };
        let graph_form = match (
            build.native && build.precision == Precision::Reference,
            &scalar,
        ) {
            (true, None) => Some(GraphSource {
                graph: plan.graph().clone(),
                inputs: graph.inputs().count(),
                weigh: !build.native_always,
                form: OnceLock::new(),
            }),
            _ => None,
        };
        Ok(Body {
            schedule,
            take,
            scalar,
            graph: graph_form,
        })
    }

    /// Whether machine code may be made from the body (it is then built on first use).
    fn may_translate(&self) -> bool {
        self.scalar.is_some() || self.graph.is_some()
    }

    /// The form of the body the machine code of a loop is made from, if any (the graph form
    /// is built here, on first use).
    fn translatable(&self) -> Option<LoopBody<'_>> {
        match (&self.scalar, &self.graph) {
            (Some(scalar), _) => Some(LoopBody::Scalar(scalar)),
            (None, Some(source)) => source
                .form(&self.schedule)
                .as_ref()
                .ok()
                .map(LoopBody::Graph),
            (None, None) => None,
        }
    }

    /// Why the loop's machine code was not made from this body, when the body was weighed
    /// for it (for the report).
    fn why_interpreted(&self) -> Option<&str> {
        match (&self.scalar, &self.graph) {
            (None, Some(source)) => source
                .form(&self.schedule)
                .as_ref()
                .err()
                .map(String::as_str),
            _ => None,
        }
    }

    /// How the interpreter runs the body in a loop (see the module documentation).
    fn form(&self, swapping: bool) -> &'static str {
        if self.scalar.is_some() {
            "interpreted, scalar form"
        } else if swapping {
            "interpreted, swapping form"
        } else {
            "interpreted, moving form"
        }
    }

    /// Whether the body is small enough to keep all its buffers between iterations.
    fn reusable(&self) -> bool {
        self.schedule.produced_bytes <= REUSE_BYTES
    }

    /// The swapping form of a loop body whose carry `j` is input `first_carry + j` and output
    /// `j`: available when the body is small and every carry is replaced by a result of its own
    /// (not an input, a constant, or a result that replaces another carry too).
    fn swaps(&self, first_carry: usize, n_carry: usize) -> Option<Vec<Swap>> {
        if !self.reusable() {
            return None;
        }
        let sched = &self.schedule;
        let mut swaps: Vec<Swap> = Vec::with_capacity(n_carry);
        for j in 0..n_carry {
            let result = sched.outputs.get(j)?.0;
            if !sched.produced[result] || swaps.iter().any(|s| s.result == result) {
                return None;
            }
            let input = sched.input_slots.get(first_carry + j).copied().flatten();
            swaps.push(Swap { input, result });
        }
        Some(swaps)
    }

    /// How the body runs: keeping its buffers when it is small.
    fn mode(&self) -> Mode {
        if self.reusable() {
            Mode::Reuse
        } else {
            Mode::Body
        }
    }
}

/// An interpreted form for the report, with the first reason a body gave for not running
/// machine code: ``interpreted, swapping form (`cumsum`, which machine code does not cover)``.
fn interpreted<'a>(form: &str, reasons: impl IntoIterator<Item = Option<&'a str>>) -> String {
    match reasons.into_iter().flatten().next() {
        Some(why) => format!("{form} ({why})"),
        None => form.to_string(),
    }
}

/// Which of the first `collected` outputs of a body a driver may move out of their slots
/// after a run, collecting them in order (the other outputs are read before): an output held
/// by a step-produced slot or by an input that is rebound before every run, and only at the
/// last collected output of that slot (earlier ones take a second handle first). Constants and
/// inputs bound once per region execution stay in place.
fn take_plan(schedule: &Schedule, collected: usize, rebound: &[bool]) -> Vec<bool> {
    let movable = |s: usize| {
        schedule.produced[s]
            || schedule
                .input_slots
                .iter()
                .zip(rebound)
                .any(|(slot, &r)| r && *slot == Some(s))
    };
    let outs = &schedule.outputs[..collected.min(schedule.outputs.len())];
    (0..outs.len())
        .map(|j| {
            let s = outs[j].0;
            movable(s) && outs[j + 1..].iter().all(|o| o.0 != s)
        })
        .collect()
}

impl RegionStep {
    /// Appends how the region runs to `out` for `CpuExecutable::report`: one line at
    /// indentation `depth`, then the regions nested in its bodies one level deeper.
    pub(crate) fn describe(&self, depth: usize, out: &mut String, inside_native: bool) {
        use std::fmt::Write;
        let pad = "  ".repeat(depth);
        // A loop inside machine code is part of the enclosing loop's code.
        let inside = "in the enclosing loop's machine code";
        let (bodies, native): (Vec<&Body>, bool) = match &*self.exec {
            Exec::Cond {
                then_branch,
                else_branch,
            } => {
                let how = if inside_native {
                    inside
                } else {
                    "the taken branch's steps"
                };
                let _ = writeln!(out, "{pad}{}: {how}", self.form);
                (vec![then_branch, else_branch], false)
            }
            Exec::Scan(scan) => {
                let native = !inside_native && scan.native().is_some();
                let how = match (inside_native, native) {
                    (true, _) => inside.to_string(),
                    (false, true) => "native code".to_string(),
                    (false, false) => interpreted(
                        scan.body.form(scan.swaps.is_some()),
                        [scan.body.why_interpreted(), scan.native.declined()],
                    ),
                };
                let _ = writeln!(
                    out,
                    "{pad}{} ({} iterations): {how}",
                    self.form, scan.length
                );
                (vec![&scan.body], native)
            }
            Exec::While {
                cond,
                body,
                swaps,
                native: code,
                ..
            } => {
                let native = !inside_native && native_while(code, cond, body).is_some();
                let how = match (inside_native, native) {
                    (true, _) => inside.to_string(),
                    (false, true) => "native code".to_string(),
                    (false, false) => interpreted(
                        body.form(swaps.is_some()),
                        [
                            cond.why_interpreted(),
                            body.why_interpreted(),
                            code.declined(),
                        ],
                    ),
                };
                let _ = writeln!(out, "{pad}{}: {how}", self.form);
                (vec![cond, body], native)
            }
        };
        for body in bodies {
            body.schedule
                .describe_regions(depth + 1, out, inside_native || native);
        }
    }

    /// The region's text name (`fori`, `scan_vjp`, `while`, ...).
    pub(crate) fn form_name(&self) -> &'static str {
        self.form
    }

    /// Compiles a region call whose sibling nodes are `outs` (region output, slot).
    pub(crate) fn compile(
        region: &Region,
        args: Vec<usize>,
        outs: Vec<(usize, usize)>,
        build: Build,
    ) -> Result<RegionStep> {
        let n_out = region.output_types().len();
        if let Some(&(o, _)) = outs.iter().find(|o| o.0 >= n_out) {
            return Err(internal(format!(
                "{} region has no output {o}",
                region.form().name()
            )));
        }
        if args.len() != region.operand_types().len() {
            return Err(internal(format!(
                "{} region called with {} operands",
                region.form().name(),
                args.len()
            )));
        }
        let used: Vec<usize> = outs.iter().map(|o| o.0).collect();
        let exec = match CompileScope::lookup(region, &used) {
            Some(exec) => exec,
            None => {
                let exec = Arc::new(Self::compile_exec(region, &outs, &args, build)?);
                CompileScope::remember(region, used, &exec);
                exec
            }
        };
        Ok(RegionStep {
            form: region.form().name(),
            region: std::ptr::from_ref(region) as usize,
            args,
            outs,
            exec,
        })
    }

    /// The bodies and loop machinery of a region call whose sibling nodes are `outs`.
    fn compile_exec(
        region: &Region,
        outs: &[(usize, usize)],
        args: &[usize],
        build: Build,
    ) -> Result<Exec> {
        Ok(match region.kind() {
            RegionKind::Cond {
                then_branch,
                else_branch,
            } => {
                let used: Vec<usize> = outs.iter().map(|o| o.0).collect();
                let rebound = vec![false; args.len().saturating_sub(1)];
                Exec::Cond {
                    then_branch: Body::compile(then_branch, &used, used.len(), &rebound, build)?,
                    else_branch: Body::compile(else_branch, &used, used.len(), &rebound, build)?,
                }
            }
            RegionKind::Scan(s) => {
                let mut selected: Vec<usize> = (0..s.n_carry).collect();
                let mut ys = Vec::new();
                for &(o, _) in outs {
                    if o >= s.n_carry && ys.iter().all(|y: &StackedOut| y.output != o) {
                        let ty = region
                            .output_types()
                            .get(o)
                            .ok_or_else(|| internal(format!("a scan has no output {o}")))?;
                        ys.push(StackedOut {
                            output: o,
                            body_output: selected.len(),
                            dtype: ty.dtype,
                            len: ty.shape.dims().iter().skip(1).product(),
                            dims: ty.shape.dims().to_vec(),
                        });
                        selected.push(o);
                    }
                }
                // The index, the carries and the slices are bound afresh every iteration; the
                // constants once.
                let n_in = 1 + s.n_carry + s.n_const + s.n_xs;
                let rebound: Vec<bool> = (0..n_in)
                    .map(|j| j <= s.n_carry || j > s.n_carry + s.n_const)
                    .collect();
                let xs_len: Vec<usize> = region
                    .operand_types()
                    .get(s.n_carry + s.n_const..)
                    .unwrap_or_default()
                    .iter()
                    .map(|t| t.shape.dims().iter().skip(1).product())
                    .collect();
                let body = Body::compile(&s.body, &selected, s.n_carry, &rebound, build)?;
                let swaps = body.swaps(1, s.n_carry);
                let native = if build.native && body.may_translate() {
                    let operands = region.operand_types();
                    let lens = |ts: &[TensorType]| -> Vec<usize> {
                        ts.iter().map(|t| t.shape.size()).collect()
                    };
                    let (nc, nk) = (s.n_carry, s.n_const);
                    LazyNative::wanted(ScanShape {
                        carries: lens(operands.get(..nc).unwrap_or_default()),
                        consts: lens(operands.get(nc..nc + nk).unwrap_or_default()),
                        index: s.index_dtype(),
                        xs: operands
                            .get(nc + nk..)
                            .unwrap_or_default()
                            .iter()
                            .zip(&xs_len)
                            .map(|(t, &len)| (t.dtype, len))
                            .collect(),
                        ys: ys.iter().map(|y| (y.body_output, y.dtype, y.len)).collect(),
                    })
                } else {
                    LazyNative::default()
                };
                Exec::Scan(Box::new(Scan {
                    body,
                    swaps,
                    native,
                    length: s.length,
                    start: s.start,
                    reverse: s.reverse,
                    n_carry: s.n_carry,
                    n_const: s.n_const,
                    xs_len,
                    ys,
                    index_dtype: s.index_dtype(),
                }))
            }
            RegionKind::While {
                n_carry,
                cond,
                body,
                max_trips,
            } => {
                let rebound: Vec<bool> = (0..args.len()).map(|j| j < *n_carry).collect();
                let carries: Vec<usize> = (0..*n_carry).collect();
                let body = Body::compile(body, &carries, *n_carry, &rebound, build)?;
                let cond = Body::compile(cond, &[0], 0, &rebound, build)?;
                let native = if build.native && cond.may_translate() && body.may_translate() {
                    let lens: Vec<usize> = region
                        .operand_types()
                        .iter()
                        .map(|t| t.shape.size())
                        .collect();
                    let (carries, consts) = lens.split_at((*n_carry).min(lens.len()));
                    LazyNative::wanted((carries.to_vec(), consts.to_vec()))
                } else {
                    LazyNative::default()
                };
                Exec::While {
                    n_carry: *n_carry,
                    max_trips: *max_trips,
                    cond,
                    swaps: body.swaps(0, *n_carry),
                    body,
                    native,
                }
            }
        })
    }

    /// Runs the region once on the operand values and returns the value of every sibling (in
    /// `outs` order). `shared[i]`: sibling `i` is a plan output, so a stacked output is
    /// written straight into shared host data.
    pub(crate) fn run(
        &self,
        operands: &[View<'_>],
        shared: &[bool],
        ws: &mut Workspace,
        threads: usize,
    ) -> Result<Vec<Storage<'static>>> {
        if operands.len() != self.args.len() {
            return Err(internal(format!("{} region: operands missing", self.form)));
        }
        match &*self.exec {
            Exec::Cond {
                then_branch,
                else_branch,
            } => self.run_cond(then_branch, else_branch, operands, ws, threads),
            Exec::Scan(scan) => self.run_scan(scan, operands, shared, ws, threads),
            Exec::While {
                n_carry,
                max_trips,
                cond,
                body,
                swaps,
                native,
            } => self.run_while(
                (*n_carry, *max_trips),
                (cond, body, native_while(native, cond, body)),
                swaps.as_deref(),
                operands,
                ws,
                threads,
            ),
        }
    }

    fn run_cond(
        &self,
        then_branch: &Body,
        else_branch: &Body,
        operands: &[View<'_>],
        ws: &mut Workspace,
        threads: usize,
    ) -> Result<Vec<Storage<'static>>> {
        let pred = match operands.first() {
            Some(View::Bool(p)) if p.len() == 1 => p[0],
            _ => return Err(internal("cond predicate is not a rank-0 bool")),
        };
        let branch = if pred { then_branch } else { else_branch };
        let mut frame = Frame::new(&branch.schedule);
        for (j, v) in operands[1..].iter().enumerate() {
            frame.bind(j, Storage::Borrowed(*v));
        }
        let ran = frame.run(Mode::Body, ws, threads);
        let mut results = Vec::with_capacity(self.outs.len());
        if ran.is_ok() {
            for (j, &take) in branch.take.iter().enumerate() {
                let owned = frame
                    .take_output(j, take, &mut ws.pool)
                    .and_then(|v| v.into_owned(&mut ws.pool));
                match owned {
                    Ok(v) => results.push(v),
                    Err(e) => {
                        frame.finish(&mut ws.pool);
                        for v in results {
                            ws.pool.recycle(v);
                        }
                        return Err(e);
                    }
                }
            }
        }
        frame.finish(&mut ws.pool);
        ran.map(|()| results)
    }

    fn run_scan(
        &self,
        scan: &Scan,
        operands: &[View<'_>],
        shared: &[bool],
        ws: &mut Workspace,
        threads: usize,
    ) -> Result<Vec<Storage<'static>>> {
        let (nc, nk) = (scan.n_carry, scan.n_const);
        if let Some(native) = scan.native() {
            if let Some(values) = self.run_native_scan(scan, native, operands, shared, ws)? {
                return Ok(values);
            }
        }
        if let Some(sb) = &scan.body.scalar {
            return self.run_scalar_scan(scan, sb, operands, shared, ws);
        }
        let mut frame = Frame::new(&scan.body.schedule);
        for (c, v) in operands[nc..nc + nk].iter().enumerate() {
            frame.bind(1 + nc + c, Storage::Borrowed(*v));
        }
        let mut stacked = match self.stacked_buffers(scan, shared, ws) {
            Ok(stacked) => stacked,
            Err(e) => {
                frame.finish(&mut ws.pool);
                return Err(e);
            }
        };
        let mut carries: Vec<Option<Storage<'_>>> = operands[..nc]
            .iter()
            .map(|v| Some(Storage::Borrowed(*v)))
            .collect();
        let looped = self.scan_loop(
            scan,
            operands,
            &mut frame,
            &mut carries,
            &mut stacked,
            ws,
            threads,
        );
        frame.finish(&mut ws.pool);
        if let Err(e) = looped {
            for v in carries.into_iter().flatten() {
                ws.pool.recycle(v);
            }
            for b in stacked {
                ws.pool.recycle(Storage::Owned(b));
            }
            return Err(e);
        }
        let mut by_output: Vec<Option<Storage<'_>>> = carries;
        by_output.extend(stacked.into_iter().map(|b| Some(Storage::Owned(b))));
        let mut positions: Vec<usize> = (0..nc).collect();
        positions.extend(scan.ys.iter().map(|y| y.output));
        self.collect(by_output, &positions, ws)
    }

    /// A buffer for every stacked output of a scan: shared host data when a sibling of it is
    /// a plan output. These are the loop's largest allocations (a reverse-mode tape is one), so
    /// a refusal is an error naming the stacked shape, with the buffers made so far back in the
    /// pool.
    fn stacked_buffers(
        &self,
        scan: &Scan,
        shared: &[bool],
        ws: &mut Workspace,
    ) -> Result<Vec<Buffer>> {
        let mut stacked = Vec::with_capacity(scan.ys.len());
        for y in &scan.ys {
            let plan_output = self
                .outs
                .iter()
                .zip(shared)
                .any(|(o, &sh)| sh && o.0 == y.output);
            // The size of the region output `[length, *slice]`, a checked shape.
            let len = y.len * scan.length;
            let buffer = if plan_output {
                ws.pool.alloc_shared(y.dtype, len)
            } else {
                ws.pool.alloc(y.dtype, len)
            };
            match buffer {
                Ok(b) => stacked.push(b),
                Err(e) => {
                    for b in stacked {
                        ws.pool.recycle(Storage::Owned(b));
                    }
                    return Err(out_of_memory(y.dtype, &y.dims, e));
                }
            }
        }
        Ok(stacked)
    }

    /// A scan in machine code: the carries' and constants' elements as arrays of words, the
    /// scanned operands read and the stacked outputs written in place, in chunks of at most
    /// `SCALAR_CHECK_EVERY` iterations with a cancellation check before each. `None` when a
    /// kernel the code calls failed: the caller reruns the loop in the interpreter, which
    /// raises that kernel's error as it always does.
    fn run_native_scan(
        &self,
        scan: &Scan,
        native: &NativeScan,
        operands: &[View<'_>],
        shared: &[bool],
        ws: &mut Workspace,
    ) -> Result<Option<Vec<Storage<'static>>>> {
        let (nc, nk) = (scan.n_carry, scan.n_const);
        let mut carries = native::words(&operands[..nc]);
        let consts = native::words(&operands[nc..nc + nk]);
        let mut stacked = self.stacked_buffers(scan, shared, ws)?;
        let looped = (|| -> Result<bool> {
            let xs = &operands[nc + nk..];
            let mut ys: Vec<ViewMut<'_>> = stacked.iter_mut().map(|b| b.view_mut()).collect();
            let mut done = 0;
            while done < scan.length {
                ws.cancel.check()?;
                let count = (scan.length - done).min(SCALAR_CHECK_EVERY);
                let chunk = if scan.reverse {
                    (scan.length - 1 - done, -1, count)
                } else {
                    (done, 1, count)
                };
                if !native.run((&mut carries, &consts), chunk, scan.start, xs, &mut ys) {
                    return Ok(false);
                }
                done += count;
            }
            Ok(true)
        })();
        let carried = looped.and_then(|finished| {
            finished
                .then(|| unflatten(&carries, &operands[..nc], ws))
                .transpose()
        });
        let carried = match carried {
            Ok(Some(c)) => c,
            other => {
                for b in stacked {
                    ws.pool.recycle(Storage::Owned(b));
                }
                return other.map(|_| None);
            }
        };
        let mut by_output: Vec<Option<Storage<'_>>> = carried.into_iter().map(Some).collect();
        by_output.extend(stacked.into_iter().map(|b| Some(Storage::Owned(b))));
        let mut positions: Vec<usize> = (0..nc).collect();
        positions.extend(scan.ys.iter().map(|y| y.output));
        self.collect(by_output, &positions, ws).map(Some)
    }

    /// A scan whose body has a scalar form: every carry, constant, slice and stacked element
    /// is one number.
    fn run_scalar_scan(
        &self,
        scan: &Scan,
        body: &ScalarBody,
        operands: &[View<'_>],
        shared: &[bool],
        ws: &mut Workspace,
    ) -> Result<Vec<Storage<'static>>> {
        let (nc, nk) = (scan.n_carry, scan.n_const);
        let mut values = body.values();
        for c in 0..nk {
            if body.reads(1 + nc + c) {
                body.set_input(&mut values, 1 + nc + c, first(&operands[nc + c])?);
            }
        }
        let mut carries = operands[..nc]
            .iter()
            .map(first)
            .collect::<Result<Vec<f64>>>()?;
        let mut stacked = self.stacked_buffers(scan, shared, ws)?;
        let looped = self.scalar_scan_loop(
            scan,
            body,
            operands,
            &mut values,
            &mut carries,
            &mut stacked,
            ws,
        );
        if let Err(e) = looped {
            for b in stacked {
                ws.pool.recycle(Storage::Owned(b));
            }
            return Err(e);
        }
        let mut by_output: Vec<Option<Storage<'_>>> = Vec::with_capacity(nc + stacked.len());
        for (j, &c) in carries.iter().enumerate() {
            match scalar_storage(body, j, c, ws) {
                Ok(v) => by_output.push(Some(v)),
                Err(e) => {
                    for v in by_output.into_iter().flatten() {
                        ws.pool.recycle(v);
                    }
                    for b in stacked {
                        ws.pool.recycle(Storage::Owned(b));
                    }
                    return Err(e);
                }
            }
        }
        by_output.extend(stacked.into_iter().map(|b| Some(Storage::Owned(b))));
        let mut positions: Vec<usize> = (0..nc).collect();
        positions.extend(scan.ys.iter().map(|y| y.output));
        self.collect(by_output, &positions, ws)
    }

    /// The iterations of a scan in scalar form.
    #[allow(clippy::too_many_arguments)]
    fn scalar_scan_loop(
        &self,
        scan: &Scan,
        body: &ScalarBody,
        operands: &[View<'_>],
        values: &mut [f64],
        carries: &mut [f64],
        stacked: &mut [Buffer],
        ws: &mut Workspace,
    ) -> Result<()> {
        let (nc, nk) = (scan.n_carry, scan.n_const);
        let xs = &operands[nc + nk..];
        let first_x = 1 + nc + nk;
        for step in 0..scan.length {
            if step.is_multiple_of(SCALAR_CHECK_EVERY) {
                ws.cancel.check()?;
            }
            let k = if scan.reverse {
                scan.length - 1 - step
            } else {
                step
            };
            let index = scan.index_dtype.round((scan.start + k) as f64);
            body.set_input(values, 0, index);
            for (j, &c) in carries.iter().enumerate() {
                body.set_input(values, 1 + j, c);
            }
            for (x, v) in xs.iter().enumerate() {
                if body.reads(first_x + x) {
                    if scan.xs_len.get(x) != Some(&1) || k >= v.len() {
                        return Err(internal("a scanned operand does not match its slices"));
                    }
                    body.set_input(values, first_x + x, v.get_f64(k));
                }
            }
            body.run(values, &mut ws.scratch);
            for (y, buf) in scan.ys.iter().zip(stacked.iter_mut()) {
                let mut out = buf.view_mut();
                if k >= out.len() {
                    return Err(internal("a stacked output is too short"));
                }
                out.store_f64(k, &[body.output(values, y.body_output)]);
            }
            for (j, c) in carries.iter_mut().enumerate() {
                *c = body.output(values, j);
            }
        }
        Ok(())
    }

    /// The iterations of a scan: the hot loop, which only moves values between `carries` and
    /// the frame (or swaps slots) and copies stacked slices.
    #[allow(clippy::too_many_arguments)]
    fn scan_loop<'a>(
        &self,
        scan: &Scan,
        operands: &[View<'a>],
        frame: &mut Frame<'_, 'a>,
        carries: &mut [Option<Storage<'a>>],
        stacked: &mut [Buffer],
        ws: &mut Workspace,
        threads: usize,
    ) -> Result<()> {
        let (nc, nk) = (scan.n_carry, scan.n_const);
        let xs = &operands[nc + nk..];
        let first_x = 1 + nc + nk;
        let mode = scan.body.mode();
        let swaps = scan.swaps.as_deref();
        if swaps.is_some() {
            // The carries live in the frame from here on.
            bind_carries(frame, 1, carries, ws)?;
        }
        for step in 0..scan.length {
            ws.cancel.check()?;
            let k = if scan.reverse {
                scan.length - 1 - step
            } else {
                step
            };
            frame.set_scalar(0, scan.index_dtype, (scan.start + k) as f64, &mut ws.pool)?;
            if swaps.is_none() {
                bind_carries(frame, 1, carries, ws)?;
            }
            for (x, (v, &len)) in xs.iter().zip(&scan.xs_len).enumerate() {
                if frame.reads_input(first_x + x) {
                    let slice = v
                        .slice(k * len, len)
                        .ok_or_else(|| internal("a scanned operand is too short"))?;
                    frame.bind(first_x + x, Storage::Borrowed(slice));
                }
            }
            frame.run(mode, ws, threads)?;
            for (y, buf) in scan.ys.iter().zip(stacked.iter_mut()) {
                let value = frame.output(y.body_output)?;
                if !buf.view_mut().copy_from(k * y.len, value) {
                    return Err(internal(format!(
                        "{}: a stacked output does not match its slice",
                        self.form
                    )));
                }
            }
            match swaps {
                Some(swaps) => {
                    for s in swaps {
                        if let Some(input) = s.input {
                            frame.swap(input, s.result);
                        }
                    }
                }
                None => collect_carries(frame, 1, &scan.body.take, carries, ws)?,
            }
        }
        if let Some(swaps) = swaps {
            for (carry, s) in carries.iter_mut().zip(swaps) {
                *carry = frame.take_slot(s.input.unwrap_or(s.result));
            }
        }
        Ok(())
    }

    fn run_while(
        &self,
        (n_carry, max_trips): (usize, Option<usize>),
        (cond, body, native): (&Body, &Body, Option<&NativeWhile>),
        swaps: Option<&[Swap]>,
        operands: &[View<'_>],
        ws: &mut Workspace,
        threads: usize,
    ) -> Result<Vec<Storage<'static>>> {
        if let Some(native) = native {
            if let Some(values) =
                self.run_native_while((n_carry, max_trips), native, operands, ws)?
            {
                return Ok(values);
            }
        }
        if let (Some(c), Some(b)) = (&cond.scalar, &body.scalar) {
            return self.run_scalar_while((n_carry, max_trips), (c, b), operands, ws);
        }
        let mut cond_frame = Frame::new(&cond.schedule);
        let mut body_frame = Frame::new(&body.schedule);
        for (c, v) in operands.iter().enumerate().skip(n_carry) {
            cond_frame.bind(c, Storage::Borrowed(*v));
            body_frame.bind(c, Storage::Borrowed(*v));
        }
        let mut carries: Vec<Option<Storage<'_>>> = operands[..n_carry]
            .iter()
            .map(|v| Some(Storage::Borrowed(*v)))
            .collect();
        let looped = self.while_loop(
            (cond, &mut cond_frame),
            (body, &mut body_frame),
            (swaps, max_trips),
            &mut carries,
            ws,
            threads,
        );
        cond_frame.finish(&mut ws.pool);
        body_frame.finish(&mut ws.pool);
        if let Err(e) = looped {
            for v in carries.into_iter().flatten() {
                ws.pool.recycle(v);
            }
            return Err(e);
        }
        let positions: Vec<usize> = (0..n_carry).collect();
        self.collect(carries, &positions, ws)
    }

    /// A while loop in machine code: the carries' and constants' elements as arrays of words,
    /// run in chunks of at most `SCALAR_CHECK_EVERY` trips (each one predicate check and body
    /// run) with a cancellation check before each chunk, as the scalar form checks. `None`
    /// when a kernel the code calls failed: the caller reruns the loop in the interpreter.
    fn run_native_while(
        &self,
        (n_carry, max_trips): (usize, Option<usize>),
        native: &NativeWhile,
        operands: &[View<'_>],
        ws: &mut Workspace,
    ) -> Result<Option<Vec<Storage<'static>>>> {
        let mut carries = native::words(&operands[..n_carry]);
        let consts = native::words(&operands[n_carry..]);
        let mut trips: usize = 0;
        while Some(trips) != max_trips {
            ws.cancel.check()?;
            let most =
                max_trips.map_or(SCALAR_CHECK_EVERY, |m| (m - trips).min(SCALAR_CHECK_EVERY));
            let Some(chunk) = native.run(&mut carries, &consts, most) else {
                return Ok(None);
            };
            trips += chunk.runs;
            if chunk.stopped {
                break;
            }
        }
        let values = unflatten(&carries, &operands[..n_carry], ws)?;
        let values: Vec<Option<Storage<'_>>> = values.into_iter().map(Some).collect();
        let positions: Vec<usize> = (0..n_carry).collect();
        self.collect(values, &positions, ws).map(Some)
    }

    /// A while loop whose predicate and body have scalar forms.
    fn run_scalar_while(
        &self,
        (n_carry, max_trips): (usize, Option<usize>),
        (cond, body): (&ScalarBody, &ScalarBody),
        operands: &[View<'_>],
        ws: &mut Workspace,
    ) -> Result<Vec<Storage<'static>>> {
        let (mut cond_values, mut body_values) = (cond.values(), body.values());
        for (c, v) in operands.iter().enumerate().skip(n_carry) {
            // A constant neither reads may have any shape.
            if cond.reads(c) || body.reads(c) {
                let v = first(v)?;
                cond.set_input(&mut cond_values, c, v);
                body.set_input(&mut body_values, c, v);
            }
        }
        let mut carries = operands[..n_carry]
            .iter()
            .map(first)
            .collect::<Result<Vec<f64>>>()?;
        let mut trips: usize = 0;
        loop {
            if Some(trips) == max_trips {
                break;
            }
            if trips.is_multiple_of(SCALAR_CHECK_EVERY) {
                ws.cancel.check()?;
            }
            trips = trips.wrapping_add(1);
            for (j, &c) in carries.iter().enumerate() {
                cond.set_input(&mut cond_values, j, c);
            }
            cond.run(&mut cond_values, &mut ws.scratch);
            // A bool value is 0 or 1.
            if cond.output(&cond_values, 0) == 0.0 {
                break;
            }
            for (j, &c) in carries.iter().enumerate() {
                body.set_input(&mut body_values, j, c);
            }
            body.run(&mut body_values, &mut ws.scratch);
            for (j, c) in carries.iter_mut().enumerate() {
                *c = body.output(&body_values, j);
            }
        }
        let mut values: Vec<Option<Storage<'_>>> = Vec::with_capacity(n_carry);
        for (j, &c) in carries.iter().enumerate() {
            match scalar_storage(body, j, c, ws) {
                Ok(v) => values.push(Some(v)),
                Err(e) => {
                    for v in values.into_iter().flatten() {
                        ws.pool.recycle(v);
                    }
                    return Err(e);
                }
            }
        }
        let positions: Vec<usize> = (0..n_carry).collect();
        self.collect(values, &positions, ws)
    }

    /// The iterations of a while loop. The carries move into the predicate's frame, back, and
    /// into the body's frame; the body's results become the next carries (swapped with the old
    /// carries' slots in the swapping form, so the body's result buffers are reused).
    fn while_loop<'a>(
        &self,
        (cond, cond_frame): (&Body, &mut Frame<'_, 'a>),
        (body, body_frame): (&Body, &mut Frame<'_, 'a>),
        (swaps, max_trips): (Option<&[Swap]>, Option<usize>),
        carries: &mut [Option<Storage<'a>>],
        ws: &mut Workspace,
        threads: usize,
    ) -> Result<()> {
        let (cond_mode, body_mode) = (cond.mode(), body.mode());
        for trip in 0usize.. {
            if Some(trip) == max_trips {
                return Ok(());
            }
            ws.cancel.check()?;
            for (j, carry) in carries.iter_mut().enumerate() {
                if cond_frame.reads_input(j) {
                    let value = carry.take().ok_or_else(missing_carry)?;
                    cond_frame.bind(j, value);
                }
            }
            let ran = cond_frame.run(cond_mode, ws, threads);
            let pred = ran.and_then(|()| match cond_frame.output(0)? {
                View::Bool(p) if p.len() == 1 => Ok(p[0]),
                _ => Err(internal("a while predicate is not a rank-0 bool")),
            });
            if cond_mode != Mode::Reuse {
                cond_frame.clear_results(&mut ws.pool);
            }
            for (j, carry) in carries.iter_mut().enumerate() {
                if let Some(value) = cond_frame.take_input(j) {
                    *carry = Some(value);
                }
            }
            if !pred? {
                return Ok(());
            }
            bind_carries(body_frame, 0, carries, ws)?;
            body_frame.run(body_mode, ws, threads)?;
            match swaps {
                Some(swaps) => {
                    for (carry, s) in carries.iter_mut().zip(swaps) {
                        *carry = match s.input {
                            Some(input) => {
                                body_frame.swap(input, s.result);
                                body_frame.take_slot(input)
                            }
                            None => body_frame.take_slot(s.result),
                        };
                    }
                }
                None => collect_carries(body_frame, 0, &body.take, carries, ws)?,
            }
        }
        Ok(())
    }

    /// The value of every sibling from the region's results: `values[i]` is region output
    /// `positions[i]`. A sibling takes the value of the last sibling of the same output and a
    /// copy otherwise; borrowed values are copied out of the enclosing frame.
    fn collect(
        &self,
        mut values: Vec<Option<Storage<'_>>>,
        positions: &[usize],
        ws: &mut Workspace,
    ) -> Result<Vec<Storage<'static>>> {
        let mut out = Vec::with_capacity(self.outs.len());
        for (i, &(o, _)) in self.outs.iter().enumerate() {
            let k = positions
                .iter()
                .position(|&p| p == o)
                .ok_or_else(|| internal(format!("{}: output {o} not computed", self.form)))?;
            let last = self.outs[i + 1..].iter().all(|x| x.0 != o);
            let value = if last {
                Ok(values[k].take())
            } else {
                values[k]
                    .as_ref()
                    .map(|v| v.share(&mut ws.pool))
                    .transpose()
            }
            .and_then(|v| {
                v.ok_or_else(|| internal(format!("{}: output {o} not computed", self.form)))
            })
            .and_then(|v| v.into_owned(&mut ws.pool));
            match value {
                Ok(v) => out.push(v),
                Err(e) => {
                    for v in values.into_iter().flatten() {
                        ws.pool.recycle(v);
                    }
                    for v in out {
                        ws.pool.recycle(v);
                    }
                    return Err(e);
                }
            }
        }
        for v in values.into_iter().flatten() {
            ws.pool.recycle(v);
        }
        Ok(out)
    }
}

fn missing_carry() -> quabla_backend::BackendError {
    internal("a carry is missing")
}

/// Moves the carries into the body's inputs `first ..`; a carry the body never reads goes
/// back to the pool.
fn bind_carries<'a>(
    frame: &mut Frame<'_, 'a>,
    first: usize,
    carries: &mut [Option<Storage<'a>>],
    ws: &mut Workspace,
) -> Result<()> {
    for (j, carry) in carries.iter_mut().enumerate() {
        let value = carry.take().ok_or_else(missing_carry)?;
        if let Some(unused) = frame.bind(first + j, value) {
            ws.pool.recycle(unused);
        }
    }
    Ok(())
}

/// The moving form's end of an iteration: the body's first outputs become the carries (moved
/// where `take` allows, else copied), and the rest of the results and the old carries go back
/// to the pool.
fn collect_carries<'a>(
    frame: &mut Frame<'_, 'a>,
    first: usize,
    take: &[bool],
    carries: &mut [Option<Storage<'a>>],
    ws: &mut Workspace,
) -> Result<()> {
    for (j, carry) in carries.iter_mut().enumerate() {
        let t = take.get(j).copied().unwrap_or(false);
        *carry = Some(frame.take_output(j, t, &mut ws.pool)?);
    }
    frame.clear_results(&mut ws.pool);
    for j in 0..carries.len() {
        if let Some(old) = frame.take_input(first + j) {
            ws.pool.recycle(old);
        }
    }
    Ok(())
}

/// Values with the dtypes and lengths of `like` from their elements one after the other in
/// `flat` (as [`native::words`] lays them out).
fn unflatten(flat: &[u64], like: &[View<'_>], ws: &mut Workspace) -> Result<Vec<Storage<'static>>> {
    let mut values: Vec<Storage<'static>> = Vec::with_capacity(like.len());
    let mut at = 0;
    for v in like {
        let (dtype, len) = (v.dtype(), v.len());
        let elements = flat.get(at..at + len);
        let stored = match elements {
            Some(elements) => ws.pool.alloc(dtype, len).map(|mut b| {
                native::store_words(&mut b.view_mut(), 0, elements);
                Storage::Owned(b)
            }),
            None => {
                for v in values {
                    ws.pool.recycle(v);
                }
                return Err(internal("a native loop's carries are too short"));
            }
        };
        at += len;
        match stored {
            Ok(s) => values.push(s),
            Err(e) => {
                for v in values {
                    ws.pool.recycle(v);
                }
                return Err(out_of_memory(dtype, &[len], e));
            }
        }
    }
    Ok(values)
}

/// The one element of a value that a scalar body reads.
fn first(v: &View<'_>) -> Result<f64> {
    if v.len() == 1 {
        Ok(v.get_f64(0))
    } else {
        Err(internal("a scalar loop value has several elements"))
    }
}

/// Output `j` of a scalar body as a one-element buffer of its dtype.
fn scalar_storage(
    body: &ScalarBody,
    j: usize,
    v: f64,
    ws: &mut Workspace,
) -> Result<Storage<'static>> {
    let dtype = body.outputs.get(j).map_or(DType::F64, |o| o.1);
    let mut b = ws
        .pool
        .alloc(dtype, 1)
        .map_err(|e| out_of_memory(dtype, &[], e))?;
    b.view_mut().store_f64(0, &[v]);
    Ok(Storage::Owned(b))
}
