//! The runtime: how a compiled plan runs. Every caller that runs a plan — an eager operation,
//! a cached call of any transform, a VJP pullback, L-BFGS's evaluations, the `Trainer`'s steps,
//! a `Program`'s executable — runs it through one [`Runnable`].
//!
//! This module owns:
//!
//! - [`Runnable`]: a plan compiled for one backend, with the weak flag and type of each output.
//!   It runs in two ways, which are the two ways a backend holds values: on host tensors lent
//!   by reference ([`Runnable::run`]: the outputs come back as host tensors; on a device
//!   backend that means one upload per input and one download per output, each counted), and
//!   on buffers resident in the backend's memory ([`Runnable::run_buffers`]: the outputs stay
//!   there, inputs may be donated, and nothing crosses to the host).
//! - The per-thread cache of eager plans ([`run_eager`]): every eager operation, one result or
//!   several (a factorization's outputs), is a small graph compiled once per thread and
//!   operand signature, and checked by [`crate::debug_nans`] when that is on.
//! - The lending of host buffers ([`with_host_refs`]).
//!
//! Invariants: a run never copies an input that it can lend; a donated buffer is ended (its
//! handle refuses further use) only by a run that succeeds, so a failed or cancelled run gives
//! the caller back everything it donated; buffers of one backend never reach another.
//!
//! It must not trace, build graphs of its own, know transforms, pytrees or signatures (those
//! are staging's), or import any module above it (see `docs/architecture.md`).

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use quabla_backend::{Backend, Buffer, BufferArg, Executable, HostTensor, Memory, Precision};
use quabla_ir::{DType, Graph, Plan, Shape};
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// A compiled plan, ready to run on one backend (see the module docs).
pub(crate) struct Runnable {
    backend: Arc<dyn Backend>,
    exe: Arc<dyn Executable>,
    /// The weak flag of each output (a weak output comes back as a weak tensor).
    out_weak: Vec<bool>,
    /// The type of each output (what a resident output buffer holds).
    out_types: Vec<(DType, Shape)>,
}

impl fmt::Debug for Runnable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runnable")
            .field("backend", &self.backend.name())
            .field("outputs", &self.out_weak.len())
            .finish()
    }
}

impl Runnable {
    /// Compiles `plan` for `backend` at `precision`, with the non-finite check when
    /// `check_nans`.
    pub(crate) fn compile(
        backend: Arc<dyn Backend>,
        plan: &Plan,
        precision: Precision,
        check_nans: bool,
    ) -> Result<Runnable> {
        let exe = if check_nans {
            backend.compile_checking_nans(plan, precision)?
        } else {
            backend.compile_with(plan, precision)?
        };
        // WR2: a device without float64 execution (CUDA, MLX) runs a plan holding float64
        // values in float32, unless it was compiled at `precision("float64")`.
        if precision != Precision::Float64
            && !backend.capabilities().float64
            && holds_float64(plan.graph())
        {
            crate::warnings::warn(crate::error::Warning::Float64AsFloat32 {
                backend: backend.name().to_string(),
            })?;
        }
        let types = plan.output_types();
        Ok(Runnable {
            out_weak: types.iter().map(|ty| ty.weak).collect(),
            out_types: types
                .iter()
                .map(|ty| (ty.dtype, ty.shape.clone()))
                .collect(),
            backend,
            exe,
        })
    }

    /// The backend the plan runs on.
    pub(crate) fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// How the backend runs the plan ([`quabla_backend::Executable::report`]).
    pub(crate) fn report(&self) -> String {
        self.exe.report()
    }

    /// The number of outputs.
    pub(crate) fn outputs(&self) -> usize {
        self.out_weak.len()
    }

    /// The weak flag of each output.
    pub(crate) fn out_weak(&self) -> &[bool] {
        &self.out_weak
    }

    /// Runs the plan on host tensors lent in plan input order and appends its outputs to
    /// `outputs` in plan order. On an error the caller discards `outputs` (a backend may have
    /// appended some). The path of every cached call: nothing here but the call.
    #[inline]
    pub(crate) fn run(&self, inputs: &[&HostTensor], outputs: &mut Vec<HostTensor>) -> Result<()> {
        Ok(self.exe.run_borrowed(inputs, outputs)?)
    }

    /// [`Runnable::run`] on concrete tensors, returning tensors (TR2 for a tracer).
    pub(crate) fn run_tensors(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut outs = Vec::with_capacity(self.out_weak.len());
        with_host_refs(inputs.iter().map(Tensor::host), |host| {
            self.run(host, &mut outs)
        })?;
        Ok(self.tensors(outs))
    }

    /// Host outputs of this plan as tensors with their weak flags.
    pub(crate) fn tensors(&self, outs: Vec<HostTensor>) -> Vec<Tensor> {
        outs.into_iter()
            .zip(&self.out_weak)
            .map(|(h, &weak)| Tensor::from_host(h, weak))
            .collect()
    }

    /// [`Runnable::run_buffers`] returning the outputs' memory, for a caller that refills
    /// buffers it keeps ([`quabla_backend::Buffer::refill`]).
    pub(crate) fn run_memories(&self, inputs: Vec<BufferArg<'_>>) -> Result<Vec<Memory>> {
        Ok(quabla_backend::buffer::run_memories(
            self.exe.as_ref(),
            self.backend.name(),
            inputs,
        )?)
    }

    /// Runs the plan on buffers resident in its backend's memory, lent or donated, and returns
    /// the outputs as buffers of that backend (nothing crosses to the host); see
    /// [`quabla_backend::buffer::run_buffers`] for the checks and for what a failed run gives
    /// back.
    pub(crate) fn run_buffers(&self, inputs: Vec<BufferArg<'_>>) -> Result<Vec<Buffer>> {
        Ok(quabla_backend::buffer::run_buffers(
            self.exe.as_ref(),
            self.backend.name(),
            &self.out_types,
            inputs,
        )?)
    }
}

/// Whether a graph (or a region body in it) holds a float64 value.
fn holds_float64(graph: &Graph) -> bool {
    graph.nodes().iter().any(|n| {
        n.ty.dtype == DType::F64
            || matches!(&n.op, quabla_ir::Op::Region(call)
                if call.region.bodies().iter().any(|(_, body)| holds_float64(body)))
    })
}

/// Calls `f` with the host buffers of `buffers` (TR2 for a tracer), lent by reference from a
/// stack array for the usual argument counts.
#[inline]
pub(crate) fn with_host_refs<'t, T>(
    mut buffers: impl Iterator<Item = Result<&'t HostTensor>>,
    f: impl FnOnce(&[&HostTensor]) -> Result<T>,
) -> Result<T> {
    const INLINE: usize = 8;
    let Some(first) = buffers.next() else {
        return f(&[]);
    };
    // Unused positions hold the first buffer; only the filled prefix is passed on.
    let mut inline = [first?; INLINE];
    let mut n = 1;
    while let Some(buffer) = buffers.next() {
        if n == INLINE {
            let mut heap = inline.to_vec();
            heap.push(buffer?);
            for buffer in buffers {
                heap.push(buffer?);
            }
            return f(&heap);
        }
        inline[n] = buffer?;
        n += 1;
    }
    f(&inline[..n])
}

// ---------------------------------------------------------------------------------------------
// Eager operations

/// How many compiled eager plans each thread keeps before starting over.
const EAGER_CACHE_CAPACITY: usize = 4096;

thread_local! {
    static EAGER_CACHE: RefCell<HashMap<Graph, Arc<Runnable>>> = RefCell::new(HashMap::new());
}

/// The backend eager operations run on: the registry's `cpu`, which is always available.
fn eager_backend() -> Result<&'static Arc<dyn Backend>> {
    static CPU: OnceLock<Arc<dyn Backend>> = OnceLock::new();
    if let Some(backend) = CPU.get() {
        return Ok(backend);
    }
    let backend = crate::devices::backend_for("cpu")?;
    Ok(CPU.get_or_init(|| backend))
}

/// The compiled plan of an eager operation's graph, from this thread's cache.
fn eager_plan(graph: Graph) -> Result<Arc<Runnable>> {
    if let Some(plan) = EAGER_CACHE.with(|c| c.borrow().get(&graph).cloned()) {
        return Ok(plan);
    }
    let backend = eager_backend()?.clone();
    let plan = Arc::new(Runnable::compile(
        backend,
        &Plan::compile(&graph),
        Precision::Reference,
        false,
    )?);
    EAGER_CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= EAGER_CACHE_CAPACITY {
            c.clear();
        }
        c.insert(graph, plan.clone());
    });
    Ok(plan)
}

/// Runs an eager operation: `graph` (whose inputs are `operands`, in order) compiled once per
/// thread and graph, then run on the operands' host buffers. With [`crate::debug_nans`] on,
/// a result that is NaN or infinite while every operand is finite is [`Error::NonFinite`]
/// naming `op` and `site`.
pub(crate) fn run_eager(
    graph: Graph,
    operands: &[Tensor],
    op: &str,
    site: &'static std::panic::Location<'static>,
) -> Result<Vec<Tensor>> {
    let plan = eager_plan(graph)?;
    let mut outs = Vec::with_capacity(plan.outputs());
    with_host_refs(operands.iter().map(Tensor::host), |host| {
        plan.run(host, &mut outs)
    })?;
    if outs.len() != plan.outputs() {
        return Err(Error::Internal {
            message: format!("an eager {op} returned the wrong number of outputs"),
        });
    }
    let results = plan.tensors(outs);
    if crate::debug::nans_checked() {
        for result in &results {
            crate::debug::check_eager(op, operands, result, site)?;
        }
    }
    Ok(results)
}
