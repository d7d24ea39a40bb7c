//! The Quabla CPU backend: the reference interpreter of every op of `quabla-ir`.
//!
//! [`CpuBackend::compile`] turns a frozen plan into a [`CpuExecutable`] once: dead nodes are
//! dropped, elementwise nodes are fused into tiled register programs, `reshape` becomes an
//! alias, and buffer liveness is computed (see the `schedule` module). [`Executable::run`] (or
//! `run_borrowed`, on buffers the caller lends) then binds the input buffers, runs the steps in
//! order (the `exec` module), returns each dead intermediate's buffer to a pool that later steps
//! reuse, and hands out the outputs, which the steps wrote straight into fresh shared host
//! data. Each concurrent run has a workspace that is kept for the next one (pool, scratch,
//! and the slot table with the constants bound), so a small plan's run allocates only its
//! outputs.
//!
//! Control-flow regions (`cond`, `scan`, `while`) run natively: their bodies are compiled into
//! schedules of their own together with the plan, and the loops rerun those schedules without
//! unrolling, reusing buffers across iterations (the `region` and `scalar` modules). Bodies
//! follow the same numerics as plans, so a loop gives the values of its unrolled iterations
//! bit for bit. Loops over small values, and whole plans over small values once they are hot,
//! run as machine code generated with Cranelift (the `native` module), with the interpreter's
//! bits; the interpreter stays the reference and the fallback.
//!
//! # Semantics (numerics.md §1.5, §4)
//!
//! - float32 nodes are computed in float64 and rounded to float32 after every node (fused or
//!   not); float64 nodes in float64; bool is one byte.
//! - Elementwise values are those of `quabla_ir::eval` (`unary_f64`, `binary_f64`,
//!   `compare_f64`, `powi_f64`, `maximum_ieee`, `minimum_ieee`), called, not re-implemented.
//! - Reductions accumulate in float64, sequentially in row-major order of the reduced
//!   elements, and round once; `cumsum` rounds each output once.
//! - So every op that `quabla_ir::eval::evaluate` folds gives bit-identical results here (NaN
//!   payloads aside, which IEEE leaves unspecified); constant folding never changes a CPU value.
//! - `matmul` runs faer's GEMM in float64 (float32 operands widened, the product rounded once);
//!   the decompositions and solves call `quabla-linalg`.
//! - No value panics: NaN and infinities propagate; an exactly singular `solve` is
//!   [`quabla_backend::BackendError::Singular`], inside a loop body too.
//! - No shape brings the process down: every buffer is allocated fallibly, and one the
//!   machine cannot hold is [`quabla_backend::BackendError::OutOfMemory`] naming the tensor;
//!   the run stops, the inputs and the executable are intact, and the executable runs again.
//! - A run watches the cancellation flags of its thread ([`quabla_backend::cancel`]: the
//!   current `CancelToken` and the process-wide interrupt), read once when it starts and
//!   checked before every step and between loop iterations; a cancelled run returns
//!   [`quabla_backend::BackendError::Cancelled`] within microseconds, however long its loops.
//!
//! Large kernels (elementwise groups and reductions over at least 100 000 elements, large
//! matrix products) use several threads; how work is split never changes a value.
//!
//! ```
//! use quabla_backend::{Backend, HostTensor};
//! use quabla_cpu::CpuBackend;
//! use quabla_ir::{DType, GraphBuilder, HostData, Plan, Shape, TensorType, UnaryOp};
//!
//! let mut b = GraphBuilder::new();
//! let shape = Shape::new(vec![3]).unwrap();
//! let x = b.input("x", TensorType::new(DType::F64, shape.clone()));
//! let y = b.unary(UnaryOp::Exp, x).unwrap();
//! let s = b.sum(y, None, false).unwrap();
//! let plan = Plan::compile(&b.finish(vec![s]).unwrap());
//! let exe = CpuBackend::default().compile(&plan).unwrap();
//! let x = HostTensor::new(shape, HostData::F64(vec![0.0, 0.0, 0.0].into()));
//! let out = exe.run(&[x]).unwrap();
//! assert_eq!(out[0].data, HostData::F64(vec![3.0].into()));
//! ```

mod buffer;
mod exec;
mod kernels;
mod native;
mod region;
mod scalar;
mod schedule;
mod workspace;

pub use native::NATIVE_ELEMENTS;
pub use schedule::ScheduleStats;

use buffer::Storage;
use exec::{Frame, Mode};
use kernels::internal;
use native::NativePlan;
use quabla_backend::{
    check_input_refs, check_inputs, Backend, Bound, Capabilities, Executable, HostTensor, Memory,
    Precision, Result, RunFailure,
};
use quabla_ir::{DType, HostData, Plan, Shape};
use schedule::{Build, Schedule};
use smallvec::SmallVec;
use std::borrow::Borrow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use workspace::Workspace;

/// Options of the CPU backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuOptions {
    /// Fuse chains and DAGs of elementwise nodes into tiled programs, and read a transpose
    /// that only feeds products in place (on by default). Turning it off runs every node as
    /// its own step; values are identical either way.
    pub fuse_elementwise: bool,
    /// Threads a large kernel may use (default: the available parallelism). Values do not
    /// depend on it.
    pub threads: usize,
    /// Compile loops (a `fori_loop`, `scan` or `while_loop` whose values all have at most
    /// [`NATIVE_ELEMENTS`] elements, with the regions nested in it) to machine code with
    /// Cranelift at their first run, and a whole plan without control flow over small and
    /// medium values once it has run a thousand times in the interpreter (on by default),
    /// where a cost model says the machine code is faster. Turning it off runs them in the
    /// interpreter; values are identical either way. [`CpuExecutable::report`] says what runs
    /// native code, and why not where it does not.
    pub native_loops: bool,
    /// Take machine code for every loop that has it, without weighing it against the
    /// interpreter (off by default): for tests and measurements of the machine code itself.
    pub native_always: bool,
}

impl Default for CpuOptions {
    fn default() -> CpuOptions {
        CpuOptions {
            fuse_elementwise: true,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            native_loops: true,
            native_always: false,
        }
    }
}

/// The CPU backend.
#[derive(Clone, Debug, Default)]
pub struct CpuBackend {
    options: CpuOptions,
}

impl CpuBackend {
    pub fn new() -> CpuBackend {
        CpuBackend::default()
    }

    pub fn with_options(options: CpuOptions) -> CpuBackend {
        CpuBackend { options }
    }

    pub fn options(&self) -> &CpuOptions {
        &self.options
    }

    /// Compiles a plan into the concrete executable type (what [`Backend::compile`] wraps).
    pub fn compile_plan(&self, plan: &Plan) -> Result<CpuExecutable> {
        self.compile_plan_with(plan, Precision::Reference)
    }

    /// [`CpuBackend::compile_plan`] at a [`Precision`] (what [`Backend::compile_with`] wraps).
    pub fn compile_plan_with(&self, plan: &Plan, precision: Precision) -> Result<CpuExecutable> {
        self.compile_build(
            plan,
            Build {
                fuse: self.options.fuse_elementwise,
                precision,
                check_nans: false,
                native: self.options.native_loops,
                native_always: self.options.native_always,
            },
        )
    }

    /// What the scheduler decides for `plan` after the phase named `phase` (`dead_code`,
    /// `fusion`, `aliases`, `factorizations`, `siblings`, `steps` or `liveness`, in that
    /// order), one fact per line: the text the schedule's file tests
    /// (`tests/schedule_files.rs`) compare. Region bodies are compiled as they would be for a
    /// run. The text may change with the scheduler; it is not an interface to build on.
    #[doc(hidden)]
    pub fn describe_schedule(&self, plan: &Plan, phase: &str) -> Result<String> {
        let build = Build {
            fuse: self.options.fuse_elementwise,
            precision: Precision::Reference,
            check_nans: false,
            native: self.options.native_loops,
            native_always: self.options.native_always,
        };
        region::describe_schedule(plan.graph(), build, phase)
    }

    /// [`CpuBackend::compile_plan_with`] with the non-finite check (what
    /// [`Backend::compile_checking_nans`] wraps): every node runs as its own step, and a run
    /// stops with [`quabla_backend::BackendError::NonFinite`] at the first node that produces
    /// a NaN or an infinity from finite operands, naming the node, its operands' ranges and
    /// its origin. The values of a run that passes are those of the unchecked plan.
    pub fn compile_plan_checking_nans(
        &self,
        plan: &Plan,
        precision: Precision,
    ) -> Result<CpuExecutable> {
        self.compile_build(
            plan,
            Build {
                fuse: false,
                precision,
                check_nans: true,
                native: false,
                native_always: false,
            },
        )
    }

    fn compile_build(&self, plan: &Plan, mut build: Build) -> Result<CpuExecutable> {
        // `precision("float64")` asks a device for float64 execution, which the reference
        // rules are already.
        if build.precision == Precision::Float64 {
            build.precision = Precision::Reference;
        }
        // A plan of small values may run as one native function; only the reference rule has
        // one (under `Float32`, float32 sums accumulate in float32, which the code generator
        // does not do).
        let native = (build.native && !build.check_nans && build.precision == Precision::Reference)
            .then(|| NativePlan::small_form(plan.graph()))
            .flatten()
            .map(|small| NativeTier {
                small,
                runs: AtomicUsize::new(0),
                code: OnceLock::new(),
            });
        let schedule = region::compile_schedule(plan.graph(), build)?;
        let inputs = plan
            .graph()
            .inputs()
            .map(|(_, _, ty)| (ty.dtype, ty.shape.clone(), ty.shape.size()))
            .collect();
        let outputs = plan
            .output_types()
            .iter()
            .map(|ty| (ty.dtype, ty.shape.size()))
            .collect();
        Ok(CpuExecutable {
            plan: plan.clone(),
            schedule,
            threads: self.options.threads.max(1),
            inputs,
            outputs,
            workspaces: std::array::from_fn(|_| Mutex::default()),
            native,
        })
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "cpu"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            float64: true,
            device_count: 1,
        }
    }

    fn compile(&self, plan: &Plan) -> Result<Arc<dyn Executable>> {
        Ok(Arc::new(self.compile_plan(plan)?))
    }

    fn compile_with(&self, plan: &Plan, precision: Precision) -> Result<Arc<dyn Executable>> {
        Ok(Arc::new(self.compile_plan_with(plan, precision)?))
    }

    fn compile_checking_nans(
        &self,
        plan: &Plan,
        precision: Precision,
    ) -> Result<Arc<dyn Executable>> {
        Ok(Arc::new(self.compile_plan_checking_nans(plan, precision)?))
    }
}

// The CPU backend is always linked: it registers itself under "cpu".
quabla_backend::register_backend!("cpu", || Ok(Arc::new(CpuBackend::default())));

/// Compiles `plan` with the default options and runs it once on `inputs`.
pub fn run_plan(plan: &Plan, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
    CpuBackend::default().compile_plan(plan)?.run(inputs)
}

/// A plan compiled for the CPU.
#[derive(Debug)]
pub struct CpuExecutable {
    plan: Plan,
    schedule: Schedule,
    threads: usize,
    /// Dtype, shape and element count of each plan input: the per-call binding check compares
    /// against these directly and leaves the error text to [`check_inputs`].
    inputs: Vec<(DType, Shape, usize)>,
    /// Dtype and element count of each plan output: which donated inputs are worth keeping
    /// for the next run's outputs ([`Executable::run_resident`]).
    outputs: Vec<(DType, usize)>,
    /// Workspaces (buffer pools, scratch, slot tables) kept between runs, one per concurrent
    /// run: a run takes the first that is free, and one beyond these gets a fresh workspace
    /// that is dropped afterwards.
    workspaces: [Mutex<Workspace>; MAX_WORKSPACES],
    /// The whole plan in machine code, when every value is small.
    native: Option<NativeTier>,
}

/// The most workspaces kept for concurrent runs.
const MAX_WORKSPACES: usize = 4;

/// Runs of a plan in the interpreter before it is compiled whole to machine code. Generating
/// the code costs about as much as a thousand interpreted runs save (measured: about 230 µs
/// for the value and gradient of a two-parameter Rosenbrock function, whose native run saves
/// a quarter of a microsecond), so, as in renting before buying, a plan pays for code only
/// once it has spent about that much in the interpreter: a one-off evaluation or a short
/// L-BFGS solve never pays, a plan called in a hot loop runs native code from then on.
const NATIVE_AFTER_RUNS: usize = 1000;

/// A plan of small values on its way to machine code ([`NativePlan`]): its small form, known
/// at compile time, and its code, generated at the run after [`NATIVE_AFTER_RUNS`] runs.
#[derive(Debug)]
struct NativeTier {
    small: native::GraphBody,
    runs: AtomicUsize,
    /// `Some(Err(why))` when code generation met something it does not translate: the plan
    /// then stays in the interpreter, and the report says why.
    code: OnceLock<std::result::Result<NativePlan, String>>,
}

impl NativeTier {
    /// The plan's code once it is due (generating it on the call that makes it due).
    fn ready(&self) -> Option<&NativePlan> {
        if let Some(code) = self.code.get() {
            return code.as_ref().ok();
        }
        if self.runs.fetch_add(1, Ordering::Relaxed) < NATIVE_AFTER_RUNS {
            return None;
        }
        self.code()
    }

    /// The plan's code, generated now if it was not yet.
    fn code(&self) -> Option<&NativePlan> {
        self.code
            .get_or_init(|| NativePlan::compile(&self.small))
            .as_ref()
            .ok()
    }
}

impl CpuExecutable {
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Figures of the compiled schedule (steps, fusion, buffers, peak live buffers).
    pub fn stats(&self) -> &ScheduleStats {
        &self.schedule.stats
    }

    /// How the plan runs: its steps and fused groups; for a plan without control flow whose
    /// values are all small, whether it runs as one native function (from its 1001st run
    /// on); then one line per control-flow region (nested regions indented under theirs)
    /// saying whether the loop runs native code or which interpreted form it takes, e.g.
    ///
    /// ```text
    /// cpu: 3 steps, 1 fused elementwise group
    ///   whole plan: native code
    ///   fori (100000 iterations): native code
    /// ```
    pub fn report(&self) -> String {
        let stats = &self.schedule.stats;
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        let mut out = format!(
            "cpu: {} step{}, {} fused elementwise group{}\n",
            stats.steps,
            plural(stats.steps),
            stats.fused_groups,
            plural(stats.fused_groups)
        );
        if let Some(tier) = &self.native {
            let state = match tier.code.get() {
                Some(Ok(_)) => "native code".to_string(),
                Some(Err(why)) => format!("interpreted ({why})"),
                None => format!("native code from run {}", NATIVE_AFTER_RUNS + 1),
            };
            out.push_str(&format!("  whole plan: {state}\n"));
        }
        self.schedule.describe_regions(1, &mut out, false);
        out
    }

    /// Generates the plan's native code now instead of at its run after the thousandth (for
    /// a plan known to be hot, and for tests that compare it with the interpreter). `false`
    /// when the plan has no native form: more than 4096 element operations on values held in
    /// registers or 16384 on values held in memory, a control-flow region (its loops have
    /// code of their own), an
    /// op the code generator does not translate, a host Cranelift does not support, or the
    /// native form turned off (`CpuOptions::native_loops`, `Precision::Float32`, the
    /// non-finite check).
    pub fn compile_native_now(&self) -> bool {
        self.native
            .as_ref()
            .is_some_and(|tier| tier.code().is_some())
    }

    /// Buffers allocated fresh (not reused from a pool) by all runs so far, region bodies
    /// included.
    pub fn buffers_allocated(&self) -> usize {
        self.workspaces
            .iter()
            .map(|w| lock(w).pool.allocations)
            .sum()
    }

    /// Bytes of the buffers the executable's workspaces keep between runs (freed at their last
    /// use during a run, reused by the next): its footprint beyond inputs, constants and the
    /// outputs handed to the caller. Compare with [`ScheduleStats::peak_live_bytes`].
    pub fn pooled_bytes(&self) -> usize {
        self.workspaces
            .iter()
            .map(|w| lock(w).pool.free_bytes())
            .sum()
    }

    /// Runs the plan `runs` times on `inputs` and returns, for each step of the schedule in
    /// order, what it runs (an op's name and its operands' shapes, `matmul 1024x64 64x64`;
    /// `fused[k]` for an elementwise group of `k` nodes; a region's form, ...) and its mean
    /// seconds per run, with the mean seconds of a whole run (binding, steps, outputs) last
    /// under `"run"`: the executor's per-node timing, for profiles (the difference between
    /// the run and its steps is dispatch and binding).
    pub fn profile(&self, inputs: &[HostTensor], runs: usize) -> Result<Vec<(String, f64)>> {
        let runs = runs.max(1);
        let mut total = 0.0;
        let times = self.with_workspace(|ws| -> Result<Vec<f64>> {
            ws.step_seconds = Some(vec![0.0; self.schedule.steps.len()]);
            let mut outputs = Vec::new();
            for _ in 0..runs {
                outputs.clear();
                let started = std::time::Instant::now();
                let ran = self.execute(inputs, ws, &mut outputs);
                total += started.elapsed().as_secs_f64();
                if let Err(e) = ran {
                    ws.step_seconds = None;
                    return Err(e);
                }
            }
            Ok(ws.step_seconds.take().unwrap_or_default())
        })?;
        let mut out: Vec<(String, f64)> = self
            .schedule
            .steps
            .iter()
            .zip(times)
            .map(|(step, t)| (step.label(), t / runs as f64))
            .collect();
        out.push(("run".into(), total / runs as f64));
        Ok(out)
    }

    /// Runs `f` in the first free workspace. A workspace left poisoned by a panicking run is
    /// replaced, since that run may have stopped halfway through its bookkeeping.
    fn with_workspace<R>(&self, f: impl FnOnce(&mut Workspace) -> R) -> R {
        for w in &self.workspaces {
            match w.try_lock() {
                Ok(mut ws) => return f(&mut ws),
                Err(TryLockError::Poisoned(e)) => {
                    let mut ws = e.into_inner();
                    *ws = Workspace::default();
                    w.clear_poison();
                    return f(&mut ws);
                }
                Err(TryLockError::WouldBlock) => {}
            }
        }
        f(&mut Workspace::default())
    }

    /// How many of the plan's outputs have `dtype` and `len` elements.
    fn outputs_of(&self, dtype: DType, len: usize) -> usize {
        self.outputs
            .iter()
            .filter(|&&(d, l)| d == dtype && l == len)
            .count()
    }

    /// Whether `inputs` bind to the plan's inputs (what [`check_inputs`] accepts).
    fn inputs_match<T: Borrow<HostTensor>>(&self, inputs: &[T]) -> bool {
        inputs.len() == self.inputs.len()
            && self
                .inputs
                .iter()
                .zip(inputs)
                .all(|((dtype, shape, size), t)| {
                    let t = t.borrow();
                    t.dtype() == *dtype && t.shape == *shape && t.data.len() == *size
                })
    }

    /// Runs the schedule on checked inputs and appends the outputs to `outputs` (nothing on
    /// an error).
    fn execute<T: Borrow<HostTensor>>(
        &self,
        inputs: &[T],
        ws: &mut Workspace,
        outputs: &mut Vec<HostTensor>,
    ) -> Result<()> {
        let sched = &self.schedule;
        // Profiles time the interpreter's steps, so they never take the native form.
        let native = match (&self.native, &ws.step_seconds) {
            (Some(tier), None) => tier.ready(),
            _ => None,
        };
        if let Some(code) = native {
            quabla_backend::cancel::check()?;
            let data: SmallVec<[&HostData; 8]> = inputs.iter().map(|t| &t.borrow().data).collect();
            // `None` (a kernel the code calls failed) falls through to the interpreter, which
            // raises the kernel's error.
            if let Some(values) = code.run(&data) {
                let shapes = sched.outputs.iter().map(|(_, shape)| shape.clone());
                outputs.extend(
                    shapes
                        .zip(values)
                        .map(|(shape, data)| HostTensor::new(shape, data)),
                );
                return Ok(());
            }
        }
        // The cancellation flags of the calling thread, read once for the whole run.
        ws.cancel = quabla_backend::cancel::watch();
        let mut frame = Frame::for_plan(sched, std::mem::take(&mut ws.slots));
        for (j, input) in inputs.iter().enumerate() {
            // An input the schedule never reads is handed back and dropped.
            let _ = frame.bind(j, Storage::Host(input.borrow().data.clone()));
        }
        let start = outputs.len();
        let result = frame.run(Mode::Plan, ws, self.threads).and_then(|()| {
            for (s, shape) in &sched.outputs {
                let storage = frame.slots()[*s]
                    .as_ref()
                    .ok_or_else(|| internal("an output was not computed"))?;
                outputs.push(HostTensor::new(shape.clone(), storage.to_host_data()?));
            }
            Ok(())
        });
        if result.is_err() {
            outputs.truncate(start);
        }
        ws.slots = frame.finish_plan(&mut ws.pool);
        // A token is watched only by the run it was current for.
        ws.cancel = Default::default();
        result
    }
}

fn lock(w: &Mutex<Workspace>) -> MutexGuard<'_, Workspace> {
    w.lock().unwrap_or_else(|e| e.into_inner())
}

impl Executable for CpuExecutable {
    fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        if !self.inputs_match(inputs) {
            check_inputs(&self.plan, inputs)?;
        }
        let mut outputs = Vec::with_capacity(self.schedule.outputs.len());
        self.with_workspace(|ws| self.execute(inputs, ws, &mut outputs))?;
        Ok(outputs)
    }

    fn run_borrowed(&self, inputs: &[&HostTensor], outputs: &mut Vec<HostTensor>) -> Result<()> {
        if !self.inputs_match(inputs) {
            check_input_refs(&self.plan, inputs)?;
        }
        self.with_workspace(|ws| self.execute(inputs, ws, outputs))
    }

    /// The CPU's memory is the host's. A donated input that nobody else holds is kept by the
    /// workspace after a successful run and becomes the storage of a same-sized output of the
    /// next run (its elements overwritten), so a loop of training steps that donates its state
    /// writes each step's state into the buffers of the state before last and allocates
    /// nothing for it. What a plan keeps this way is at most one buffer per output.
    fn run_resident(&self, inputs: Vec<Bound>) -> std::result::Result<Vec<Memory>, RunFailure> {
        if inputs
            .iter()
            .any(|b| matches!(b.memory, Memory::Backend(_)))
        {
            let error = quabla_backend::foreign_memory("cpu");
            return Err(RunFailure { error, inputs });
        }
        let mut outputs = Vec::with_capacity(self.outputs.len());
        self.with_workspace(move |ws| {
            // Borrowed, not cloned, and dropped before the donated inputs are kept, so that
            // those are unique again.
            let host: SmallVec<[&HostTensor; 16]> =
                inputs.iter().filter_map(|b| b.memory.host()).collect();
            let ran = if self.inputs_match(&host) {
                Ok(())
            } else {
                check_input_refs(&self.plan, &host)
            }
            .and_then(|()| self.execute(&host, ws, &mut outputs));
            drop(host);
            if let Err(error) = ran {
                return Err(RunFailure { error, inputs });
            }
            for bound in inputs {
                if let (true, Memory::Host(t)) = (bound.donated, bound.memory) {
                    ws.pool
                        .keep_donated(t.data, |dtype, len| self.outputs_of(dtype, len));
                }
            }
            Ok(outputs.into_iter().map(Memory::Host).collect())
        })
    }

    fn report(&self) -> String {
        CpuExecutable::report(self)
    }
}
