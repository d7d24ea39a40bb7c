//! Data parallelism across processes and machines (api.md §20): `qb::distributed`.
//!
//! A program runs as several processes (`mpirun -np 4 ./train`), each a *rank* of one process
//! group. [`init`] joins the group the launcher started (MPI; without a launcher the process is
//! rank 0 of 1), and everything else runs on it:
//!
//! - [`rank`], [`size`], [`barrier`], and collectives on tensors: [`all_reduce`] (`sum`,
//!   `mean`, `max`, `min`), [`broadcast`], [`all_gather`];
//! - [`value_and_grad`]: each rank differentiates on its shard of the batch, and the value and
//!   the gradients are all-reduced;
//! - the data-parallel trainer, `qb::optim::Trainer::new(..).distributed(true)`;
//! - checkpoints: [`save`] writes from rank 0 only, atomically, once every rank agrees; [`load`]
//!   works with any number of processes.
//!
//! Results never depend on timing: every reduction is the left fold of the ranks' values in
//! rank order, computed identically on every rank (`communicator.rs`). Faults never hang: a
//! rank that raises tells the others, a rank that dies is noticed by heartbeats, a rank that
//! never arrives is reported after a timeout, and ranks that call different collectives or pass
//! different shapes get an error naming what each did (`group.rs`). docs/distributed.md is the
//! guide.
//!
//! Files: `communicator.rs` (the transport trait and the reduction formula), `group.rs` (the
//! protocol on top of any transport, tensor collectives, the current group), `local.rs`
//! (threads of one process, for tests), `mpi.rs` (MPI, behind the `mpi` cargo feature),
//! `launcher.rs` (reading the launcher's environment), `grad.rs` (data-parallel
//! `value_and_grad`), `checkpoint.rs` (`save`/`load`), `bootstrap.rs` (sharing a device
//! transport's unique id), `nccl.rs` (finding NCCL), `device_transport.rs` (the transport over a
//! backend's collectives between devices: NCCL on CUDA). This module must not import the optimizers (the
//! trainer imports it).

mod bootstrap;
mod checkpoint;
mod communicator;
mod device_transport;
mod grad;
mod group;
mod launcher;
mod local;
#[cfg(feature = "mpi")]
mod mpi;
mod nccl;

pub use bootstrap::{share_unique_id, share_unique_id_through_file};
pub(crate) use checkpoint::tree_digest;
pub use checkpoint::{load, save};
pub use communicator::{Communicator, Deadline, Fault, ReduceOp};
pub use device_transport::device_group;
pub(crate) use grad::{reduce_leaves, shard_args, Flat};
pub use grad::{value_and_grad, Reduction, ValueAndGrad};
pub use group::{with_group, Group, Options, DEFAULT_HEARTBEAT_TIMEOUT, DEFAULT_TIMEOUT};
pub use nccl::{nccl_library, NcclLibrary, NcclUnavailable};
/// The host arrays a [`Communicator`] moves.
pub use quabla_ir::HostData;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Joins the process group the launcher started (`mpirun`, `mpiexec`, `srun`), with the
/// options of the environment ([`Options::from_env`]). A process without a launcher is rank 0
/// of 1. Calling it again does nothing. The collectives call it when it was not called.
///
/// Errors: a launcher started several processes but this build has no MPI (the `mpi` feature;
/// `Error::Unsupported`), or MPI failed to start.
pub fn init() -> Result<()> {
    init_with(Options::from_env()?)
}

/// [`init`] with explicit options (a second call keeps the first call's group and options).
pub fn init_with(options: Options) -> Result<()> {
    options.validate()?;
    let mut world = group::world();
    if world.is_some() {
        return Ok(());
    }
    let group = match launcher::detect() {
        None => Group::new(std::sync::Arc::new(communicator::SingleProcess), options),
        Some(launch) => start_mpi(launch, options)?,
    };
    *world = Some(group);
    Ok(())
}

#[cfg(feature = "mpi")]
fn start_mpi(_launch: launcher::Launch, options: Options) -> Result<Group> {
    let comm = mpi::Mpi::start(&options)?;
    Ok(Group::new(comm, options))
}

#[cfg(not(feature = "mpi"))]
fn start_mpi(launch: launcher::Launch, options: Options) -> Result<Group> {
    if launch.size <= 1 {
        // One process under a launcher is still rank 0 of 1.
        return Ok(Group::new(
            std::sync::Arc::new(communicator::SingleProcess),
            options,
        ));
    }
    Err(Error::Unsupported {
        op: "mpi".into(),
        device: None,
        message: format!(
            "{} started {} processes, but this build of quabla has no MPI support; rebuild with the `mpi` cargo feature (for Python: pip install with --config-settings=build-args=\"--features mpi\"), see docs/distributed.md",
            launch.launcher, launch.size
        ),
    })
}

/// Leaves the process group: stops the heartbeats and finalizes MPI when this process
/// started it. Later collectives fail. Called automatically at exit; call it earlier only to
/// leave before the process ends.
pub fn finalize() {
    #[cfg(feature = "mpi")]
    mpi::finalize();
}

/// The group the calls of this thread use: its own (an in-process group, see [`with_group`])
/// or the process's, made by [`init`] if needed.
pub fn current() -> Result<Group> {
    if let Some(g) = group::current_if_any() {
        return Ok(g);
    }
    init()?;
    group::current_if_any().ok_or_else(|| Error::Internal {
        message: "distributed.init made no group".into(),
    })
}

/// This process's rank: of the current group once there is one, else the rank the launcher
/// assigned (0 without a launcher).
pub fn rank() -> usize {
    match group::current_if_any() {
        Some(g) => g.rank(),
        None => launcher::detect().map_or(0, |l| l.rank),
    }
}

/// The number of ranks: of the current group once there is one, else the number the
/// launcher started (1 without a launcher).
pub fn size() -> usize {
    match group::current_if_any() {
        Some(g) => g.size(),
        None => launcher::detect().map_or(1, |l| l.size),
    }
}

/// Waits until every rank has called `barrier`.
pub fn barrier() -> Result<()> {
    current()?.barrier()
}

/// The elementwise reduction of `x` over the ranks, the same on every rank: element `i` is
/// the left fold of the ranks' values in rank order (float32 in float64, rounded once), so the
/// result does not depend on timing. `bool` tensors take `max` (any) and `min` (all) only.
/// Every rank must pass the same shape and dtype.
pub fn all_reduce(x: &Tensor, op: ReduceOp) -> Result<Tensor> {
    current()?.all_reduce(x, op)
}

/// `root`'s `x` on every rank (every rank passes a tensor of the same shape and dtype).
pub fn broadcast(x: &Tensor, root: usize) -> Result<Tensor> {
    current()?.broadcast(x, root)
}

/// The ranks' `x` stacked along a new leading axis in rank order: shape `[size, *x.shape]`.
pub fn all_gather(x: &Tensor) -> Result<Tensor> {
    current()?.all_gather(x)
}

/// Runs `f` on `size` threads, each rank `r` of a new in-process group (its current group
/// while `f` runs), and returns each rank's result in rank order. A rank whose `f` returns,
/// fails or panics leaves the group, so the others' collectives that still need it fail
/// with [`Error::Distributed`] instead of waiting: the same program as under `mpirun`, in one
/// process (the tests of data parallelism run this way).
pub fn run_local<T: Send>(
    size: usize,
    options: Options,
    f: impl Fn() -> Result<T> + Sync,
) -> Result<Vec<Result<T>>> {
    if size == 0 {
        return Err(Error::invalid("run_local needs at least one rank"));
    }
    options.validate()?;
    let ranks: Vec<std::sync::Arc<local::Local>> = local::group(size)
        .into_iter()
        .map(std::sync::Arc::new)
        .collect();
    let f = &f;
    Ok(std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter()
            .map(|comm| {
                let comm = comm.clone();
                let options = options.clone();
                s.spawn(move || {
                    let group = Group::new(comm.clone(), options);
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        with_group(&group, f)
                    }));
                    let result = match result {
                        Ok(r) => r,
                        Err(payload) => Err(Error::Internal {
                            message: format!(
                                "rank {} panicked: {}",
                                comm.rank(),
                                quabla_backend::abi::panic_message(payload.as_ref())
                            ),
                        }),
                    };
                    comm.leave(match &result {
                        Ok(_) => "it finished".to_string(),
                        Err(e) => format!("it failed: {e}"),
                    });
                    result
                })
            })
            .collect();
        join_all(handles, "a rank's thread could not be joined")
    }))
}

/// The results of scoped threads, in order; a thread that panicked gives
/// `Error::Internal` with `what` (the threads' own code catches the panics it can report).
pub(crate) fn join_all<T>(
    handles: Vec<std::thread::ScopedJoinHandle<'_, Result<T>>>,
    what: &str,
) -> Vec<Result<T>> {
    handles
        .into_iter()
        .map(|h| {
            h.join().unwrap_or_else(|_| {
                Err(Error::Internal {
                    message: what.to_string(),
                })
            })
        })
        .collect()
}
