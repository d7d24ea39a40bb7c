//! The Quabla CPU backend: the reference interpreter of every op of `quabla-ir`.
//!
//! [`CpuBackend::compile`] turns a frozen plan into a [`CpuExecutable`] once: dead nodes are
//! dropped, elementwise nodes are fused into tiled register programs, `reshape` becomes an
//! alias, and buffer liveness is computed (see the `schedule` module). [`Executable::run`] then
//! binds the input buffers, runs the steps in order, returns each dead intermediate's buffer to
//! a pool that later steps reuse, and copies the outputs out.
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
//!   [`BackendError::Singular`].
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
mod kernels;
mod schedule;

pub use schedule::ScheduleStats;

use buffer::{Pool, Storage, View};
use kernels::reduce::ReduceKind;
use kernels::{internal, layout, linalg, matmul, reduce};
use quabla_backend::{
    check_inputs, Backend, BackendError, Capabilities, Executable, HostTensor, Result,
};
use quabla_ir::{Op, Plan};
use schedule::{NodeStep, Schedule, StepKind};
use std::sync::{Arc, Mutex};

/// Options of the CPU backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuOptions {
    /// Fuse chains and DAGs of elementwise nodes into tiled programs (on by default). Turning
    /// it off runs every node as its own step; values are identical either way.
    pub fuse_elementwise: bool,
    /// Threads a large kernel may use (default: the available parallelism). Values do not
    /// depend on it.
    pub threads: usize,
}

impl Default for CpuOptions {
    fn default() -> CpuOptions {
        CpuOptions {
            fuse_elementwise: true,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
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
        let schedule = Schedule::build(plan.graph(), self.options.fuse_elementwise)?;
        Ok(CpuExecutable {
            plan: plan.clone(),
            schedule,
            threads: self.options.threads.max(1),
            pools: Mutex::new(Vec::new()),
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
    /// Buffer pools kept between runs (one per concurrent run).
    pools: Mutex<Vec<Pool>>,
}

/// The most pools kept for concurrent runs.
const MAX_POOLS: usize = 4;

impl CpuExecutable {
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Figures of the compiled schedule (steps, fusion, buffers, peak live buffers).
    pub fn stats(&self) -> &ScheduleStats {
        &self.schedule.stats
    }

    /// Buffers allocated fresh (not reused from a pool) by all runs so far.
    pub fn buffers_allocated(&self) -> usize {
        self.lock_pools().iter().map(|p| p.allocations).sum()
    }

    fn lock_pools(&self) -> std::sync::MutexGuard<'_, Vec<Pool>> {
        self.pools.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn execute(&self, inputs: &[HostTensor], pool: &mut Pool) -> Result<Vec<HostTensor>> {
        let sched = &self.schedule;
        let mut slots: Vec<Option<Storage>> = (0..sched.nslots).map(|_| None).collect();
        for (input, slot) in inputs.iter().zip(&sched.input_slots) {
            if let Some(s) = *slot {
                slots[s] = Some(Storage::Host(input.data.clone()));
            }
        }
        for (s, data) in &sched.constants {
            slots[*s] = Some(Storage::Host(data.clone()));
        }
        let result = self.run_steps(&mut slots, pool);
        let outputs = result.and_then(|()| {
            sched
                .outputs
                .iter()
                .map(|(s, shape)| {
                    let storage = slots[*s]
                        .as_ref()
                        .ok_or_else(|| internal("an output was not computed"))?;
                    Ok(HostTensor::new(shape.clone(), storage.to_host_data()))
                })
                .collect::<Result<Vec<_>>>()
        });
        for s in slots.into_iter().flatten() {
            pool.recycle(s);
        }
        outputs
    }

    fn run_steps(&self, slots: &mut [Option<Storage>], pool: &mut Pool) -> Result<()> {
        for step in &self.schedule.steps {
            match &step.kind {
                StepKind::Fused(program) => {
                    let mut bufs: Vec<_> = program
                        .outs
                        .iter()
                        .map(|&(s, dt)| self.alloc(pool, s, dt, program.size))
                        .collect();
                    {
                        let exts = program
                            .exts
                            .iter()
                            .map(|e| view(slots, e.slot))
                            .collect::<Result<Vec<_>>>()?;
                        let outs = bufs.iter_mut().map(|b| b.view_mut()).collect();
                        program.run(&exts, outs, self.threads);
                    }
                    for (&(s, _), b) in program.outs.iter().zip(bufs) {
                        slots[s] = Some(Storage::Owned(b));
                    }
                }
                StepKind::Node(node) => {
                    let mut buf = self.alloc(pool, node.out, node.ty.dtype, node.ty.shape.size());
                    let mut extra: Vec<buffer::Buffer> = node
                        .also
                        .iter()
                        .map(|(_, s, ty)| self.alloc(pool, *s, ty.dtype, ty.shape.size()))
                        .collect();
                    if let Err(e) = self.run_node(node, slots, &mut buf, &mut extra) {
                        pool.recycle(Storage::Owned(buf));
                        for b in extra {
                            pool.recycle(Storage::Owned(b));
                        }
                        return Err(e);
                    }
                    slots[node.out] = Some(Storage::Owned(buf));
                    for ((_, s, _), b) in node.also.iter().zip(extra) {
                        slots[*s] = Some(Storage::Owned(b));
                    }
                }
            }
            for &s in &step.free {
                if let Some(st) = slots[s].take() {
                    pool.recycle(st);
                }
            }
        }
        Ok(())
    }

    /// Storage for a step's result: shared host data for a plan output, a pooled buffer else.
    fn alloc(
        &self,
        pool: &mut Pool,
        slot: usize,
        dtype: quabla_ir::DType,
        len: usize,
    ) -> buffer::Buffer {
        if self.schedule.output_slot[slot] {
            pool.alloc_shared(dtype, len)
        } else {
            pool.alloc(dtype, len)
        }
    }

    fn run_node(
        &self,
        node: &NodeStep,
        slots: &[Option<Storage>],
        buf: &mut buffer::Buffer,
        extra: &mut [buffer::Buffer],
    ) -> Result<()> {
        let arg = |i: usize| -> Result<(View<'_>, &[usize])> {
            let (s, dims) = node
                .args
                .get(i)
                .ok_or_else(|| internal("missing operand"))?;
            Ok((view(slots, *s)?, dims.as_slice()))
        };
        let out = buf.view_mut();
        let out_dims = node.ty.shape.dims();
        let threads = self.threads;
        match &node.op {
            Op::Sum => reduce::reduce_all(ReduceKind::Sum, arg(0)?.0, out),
            Op::Mean => reduce::reduce_all(ReduceKind::Mean, arg(0)?.0, out),
            Op::SumAxis { axes }
            | Op::MeanAxis { axes }
            | Op::MaxAxis { axes }
            | Op::MinAxis { axes } => {
                let kind = match node.op {
                    Op::SumAxis { .. } => ReduceKind::Sum,
                    Op::MeanAxis { .. } => ReduceKind::Mean,
                    Op::MaxAxis { .. } => ReduceKind::Max,
                    _ => ReduceKind::Min,
                };
                let (x, dims) = arg(0)?;
                reduce::reduce_axes(kind, x, dims, axes, out, threads)
            }
            Op::Cumsum { axis, reverse } => {
                let (x, dims) = arg(0)?;
                reduce::cumsum(x, dims, *axis, *reverse, out, threads)
            }
            Op::Reshape { .. } | Op::StopGradient => layout::copy(arg(0)?.0, out),
            Op::Transpose { perm } => {
                let (x, dims) = arg(0)?;
                layout::transpose(x, dims, perm, out)
            }
            Op::Broadcast { shape } => {
                let (x, dims) = arg(0)?;
                layout::broadcast(x, dims, shape.dims(), out)
            }
            Op::Concat { axis } => {
                let parts = (0..node.args.len()).map(arg).collect::<Result<Vec<_>>>()?;
                layout::concat(&parts, *axis, out_dims, out)
            }
            Op::Slice { starts, sizes } => {
                let (x, dims) = arg(0)?;
                layout::slice(x, dims, starts, sizes, out)
            }
            Op::PadSlice { starts, shape } => {
                let (x, dims) = arg(0)?;
                layout::pad_slice(x, dims, starts, shape.dims(), out)
            }
            Op::Gather { axis, indices } => {
                let (x, dims) = arg(0)?;
                layout::gather(x, dims, *axis, indices, out)
            }
            Op::ScatterAdd { axis, indices } => {
                let ((base, dims), (upd, _)) = (arg(0)?, arg(1)?);
                layout::scatter_add(base, upd, dims, *axis, indices, out)
            }
            Op::Matmul => {
                let ((a, ad), (b, bd)) = (arg(0)?, arg(1)?);
                matmul::matmul(a, ad, b, bd, out_dims, out, threads)
            }
            Op::Solve => {
                let ((a, ad), (b, bd)) = (arg(0)?, arg(1)?);
                let r = linalg::solve(a, ad, b, bd, out);
                // faer's AVX kernels leave the upper vector state dirty (see matmul.rs).
                matmul::clear_upper_vector_state();
                r
            }
            Op::TriangularSolve {
                lower,
                transpose_a,
                unit_diagonal,
            } => {
                let ((a, ad), (b, bd)) = (arg(0)?, arg(1)?);
                let r = linalg::triangular_solve(
                    a,
                    ad,
                    b,
                    bd,
                    *lower,
                    *transpose_a,
                    *unit_diagonal,
                    out,
                );
                // faer's AVX kernels leave the upper vector state dirty (see matmul.rs).
                matmul::clear_upper_vector_state();
                r
            }
            Op::Cholesky => {
                let (a, ad) = arg(0)?;
                let r = linalg::cholesky(a, ad, out);
                // faer's AVX kernels leave the upper vector state dirty (see matmul.rs).
                matmul::clear_upper_vector_state();
                r
            }
            Op::CholeskyAd => {
                let ((l, ld), (da, _)) = (arg(0)?, arg(1)?);
                let r = linalg::cholesky_ad(l, da, ld, out);
                // faer's AVX kernels leave the upper vector state dirty (see matmul.rs).
                matmul::clear_upper_vector_state();
                r
            }
            Op::Linalg(kind) => {
                let (a, ad) = arg(0)?;
                let kinds: Vec<_> = std::iter::once(*kind)
                    .chain(node.also.iter().map(|a| a.0))
                    .collect();
                let outs = std::iter::once(out)
                    .chain(extra.iter_mut().map(|b| b.view_mut()))
                    .collect();
                let r = linalg::linalg(&kinds, a, ad, outs);
                // faer's AVX kernels leave the upper vector state dirty (see matmul.rs).
                matmul::clear_upper_vector_state();
                r
            }
            Op::Custom(_) => Err(BackendError::Unsupported {
                op: "custom".into(),
                device: "cpu".into(),
                reason: "custom rules must be inlined before a plan reaches a backend".into(),
            }),
            Op::Region(call) => Err(BackendError::Unsupported {
                op: call.region.form().name().into(),
                device: "cpu".into(),
                reason: "control-flow regions are not executed yet".into(),
            }),
            Op::Input { .. }
            | Op::Constant { .. }
            | Op::Cast { .. }
            | Op::Unary(_)
            | Op::Powi(_)
            | Op::Binary(_)
            | Op::Compare(_)
            | Op::Where => Err(internal(format!(
                "{} scheduled as a single kernel",
                node.op.name()
            ))),
        }
    }
}

fn view(slots: &[Option<Storage>], s: usize) -> Result<View<'_>> {
    slots
        .get(s)
        .and_then(|x| x.as_ref())
        .map(Storage::view)
        .ok_or_else(|| internal(format!("slot {s} is empty when read")))
}

impl Executable for CpuExecutable {
    fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_inputs(&self.plan, inputs)?;
        let mut pool = self.lock_pools().pop().unwrap_or_default();
        let result = self.execute(inputs, &mut pool);
        let mut pools = self.lock_pools();
        if pools.len() < MAX_POOLS {
            pools.push(pool);
        }
        result
    }
}
