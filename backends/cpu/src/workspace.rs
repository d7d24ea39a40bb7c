//! What the runs of one executable share and keep between runs: the buffer pool, the scratch
//! of fused programs, the plan's slot table, the cancellation flags of the run in progress and
//! the step timings of a profile. It sits below the scheduler, the executor and the region
//! runner, which all hand it on; it knows nothing of schedules or steps.

use crate::buffer::{Buffer, Pool, Storage};
use crate::kernels::elementwise::Scratch;
use quabla_backend::cancel::Watch;
use quabla_backend::BackendError;
use quabla_ir::alloc::AllocError;
use quabla_ir::DType;

/// What every run of an executable shares, kept between runs.
#[derive(Debug, Default)]
pub(crate) struct Workspace {
    pub pool: Pool,
    /// Registers of fused programs run on the calling thread.
    pub scratch: Scratch,
    /// The output buffers of the fused step being run.
    pub bufs: Vec<Buffer>,
    /// The slot table of the plan's frame between runs, with only the constants bound (empty
    /// before the first run): kept so that a run of a small plan allocates nothing but its
    /// outputs and does not rebind its constants.
    pub slots: Vec<Option<Storage<'static>>>,
    /// The cancellation flags the current run watches (set when a run starts, reset when it
    /// ends so that no token outlives its run).
    pub cancel: Watch,
    /// Seconds spent in each step of the plan's schedule, added up over the runs made while
    /// it is `Some` ([`crate::CpuExecutable::profile`]); `None`, and never looked at beyond
    /// one test per step, on every other run.
    pub step_seconds: Option<Vec<f64>>,
}

/// The error for a buffer of `dtype` and shape `dims` that the allocator refused.
pub(crate) fn out_of_memory(dtype: DType, dims: &[usize], e: AllocError) -> BackendError {
    BackendError::out_of_memory(
        e.bytes,
        format!("a tensor of shape {dims:?} {}", dtype.name()),
    )
}
