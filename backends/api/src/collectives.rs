//! Collectives between devices, for data parallelism: what a backend whose devices talk to each
//! other through a library of their own (NCCL for CUDA) offers, through
//! [`crate::Backend::collectives`].
//!
//! A communicator is made from an opaque unique id that rank 0 creates
//! ([`Collectives::unique_id`]) and every rank receives by another channel (the caller's
//! process group, or a file); [`Collectives::join`] waits until every rank has joined. The
//! collectives take and return host data and run through the device: the caller (the facade's
//! process groups) adds its checks and error reporting on top and never sees device memory.
//!
//! Every collective is bounded by a deadline and fails with [`CollectiveError`] rather than
//! blocking forever; after a failure the communicator refuses every later call. A reduction is
//! the left fold of the ranks' values in rank order computed in float64, divided by the number
//! of ranks for a mean and rounded once ([`Fold`]), the same bits on every rank — whatever
//! order the library would add in.
//!
//! This module owns the interface only; it must not know a device library.

use quabla_ir::HostData;
use std::fmt;
use std::time::Instant;

/// The reductions of [`DeviceCommunicator::all_reduce`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fold {
    Sum,
    /// The sum divided by the number of ranks, in float64.
    Mean,
    /// `maximum`: NaN propagates (numerics.md §5).
    Max,
    /// `minimum`: NaN propagates.
    Min,
}

/// Why a collective did not complete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CollectiveError {
    /// The deadline passed first (a rank did not take part).
    Timeout,
    /// The library or the device reported an error.
    Failed(String),
}

impl fmt::Display for CollectiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CollectiveError::Timeout => f.write_str("the collective did not end in time"),
            CollectiveError::Failed(message) => f.write_str(message),
        }
    }
}

impl From<crate::BackendError> for CollectiveError {
    fn from(e: crate::BackendError) -> CollectiveError {
        CollectiveError::Failed(e.to_string())
    }
}

/// A backend device's way to make communicators (see the module docs).
pub trait Collectives: Send + Sync + fmt::Debug {
    /// The library the collectives run on, for messages (`"nccl"`).
    fn library(&self) -> &'static str;

    /// A new unique id, made by rank 0 and shared by the caller.
    fn unique_id(&self) -> Result<Vec<u8>, CollectiveError>;

    /// Joins the communicator of `id` as `rank` of `size` on this backend's device; waits for
    /// every rank to join.
    fn join(
        &self,
        id: &[u8],
        rank: usize,
        size: usize,
    ) -> Result<Box<dyn DeviceCommunicator>, CollectiveError>;
}

/// One rank of a communicator between devices.
pub trait DeviceCommunicator: Send + Sync + fmt::Debug {
    fn rank(&self) -> usize;

    fn size(&self) -> usize;

    /// Every rank's `mine` (the same length on every rank), concatenated in rank order.
    fn all_gather(
        &self,
        mine: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Vec<u8>, CollectiveError>;

    /// `root`'s `data` on every rank (the others pass bytes of the same length).
    fn broadcast(
        &self,
        data: &[u8],
        root: usize,
        deadline: Option<Instant>,
    ) -> Result<Vec<u8>, CollectiveError>;

    /// The fold of every rank's float32 or float64 `data` in rank order (see the module docs).
    fn all_reduce(
        &self,
        data: &HostData,
        fold: Fold,
        deadline: Option<Instant>,
    ) -> Result<HostData, CollectiveError>;
}
