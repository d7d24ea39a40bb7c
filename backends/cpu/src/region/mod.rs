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
//!   moved out of its slot when that is safe (decided at compile time, see `body::take_plan`) and
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
//!
//! The module's parts: the compile scope (`scope.rs`), compiled bodies (`body.rs`), each
//! region kind's driver (`cond.rs`, `scan.rs`, `while_loop.rs`), the movement of carries and
//! results (`carries.rs`), and what a body costs the interpreter (`cost.rs`).

use crate::buffer::{Buffer, Storage, View, ViewMut};
use crate::exec::{Frame, Mode};
use crate::kernels::internal;
use crate::native::{self, GraphBody, LoopBody, NativeScan, NativeWhile, OwnCode, ScanShape};
use crate::scalar::ScalarBody;
use crate::schedule::{Build, RegionCall, RegionSlots, Schedule};
use crate::workspace::{out_of_memory, Workspace};
use quabla_backend::{Precision, Result};
use quabla_ir::{DType, Graph, NodeId, Plan, Region, RegionKind, TensorType};
use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

mod body;
mod carries;
mod cond;
mod cost;
mod scan;
mod scope;
mod while_loop;

use body::{interpreted, Body};
use carries::{bind_carries, collect_carries, first, missing_carry, scalar_storage, unflatten};
use scope::CompileScope;

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

/// The schedule of a plan or region body `graph`, its region calls compiled by this module
/// (each region once per plan compile, [`CompileScope`]).
pub(crate) fn compile_schedule(graph: &Graph, build: Build) -> Result<Schedule> {
    let _scope = CompileScope::enter();
    Schedule::build(graph, build, &compile_call)
}

/// What the scheduler decides for `graph` after the phase named `phase`, as text
/// ([`crate::schedule::describe_phases`]), region calls compiled by this module.
pub(crate) fn describe_schedule(graph: &Graph, build: Build, phase: &str) -> Result<String> {
    let _scope = CompileScope::enter();
    crate::schedule::describe_phases(graph, build, &compile_call, phase)
}

/// The [`crate::schedule::CompileRegion`] callback: a region call compiled as a [`RegionStep`].
fn compile_call(region: &Region, slots: RegionSlots, build: Build) -> Result<Box<dyn RegionCall>> {
    let step = RegionStep::compile(region, slots.args, slots.outs, build)?;
    Ok(Box::new(step))
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

impl RegionCall for RegionStep {
    fn args(&self) -> &[usize] {
        &self.args
    }

    fn outs(&self) -> &[(usize, usize)] {
        &self.outs
    }

    /// The region's text name (`fori`, `scan_vjp`, `while`, ...).
    fn form_name(&self) -> &'static str {
        self.form
    }

    /// Appends how the region runs to `out` for `CpuExecutable::report`: one line at
    /// indentation `depth`, then the regions nested in its bodies one level deeper.
    fn describe(&self, depth: usize, out: &mut String, inside_native: bool) {
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

    /// Runs the region once on the operand values and returns the value of every sibling (in
    /// `outs` order). `shared[i]`: sibling `i` is a plan output, so a stacked output is
    /// written straight into shared host data.
    fn run(
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

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn clone_box(&self) -> Box<dyn RegionCall> {
        Box::new(self.clone())
    }
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

impl RegionStep {
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
}
