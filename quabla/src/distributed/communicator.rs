//! The transport interface of `qb::distributed`: what a process group must do to move bytes
//! and reduce numbers between its ranks ([`Communicator`]), and the one reduction formula
//! every transport applies ([`fold`]).
//!
//! A communicator is deliberately small: five collectives, each bounded by a [`Deadline`] and
//! failing with a [`Fault`] (who is missing, who is gone, or what the transport reported)
//! instead of blocking forever. Everything users see — tensors, dtypes, the checks that every
//! rank calls the same collective on the same shapes, errors naming the ranks — is built once
//! on top of it, in `group.rs`, so the MPI, in-process and (to come) NCCL transports cannot
//! differ in those.
//!
//! Determinism: a reduction's element `i` is the left fold of the ranks' values in rank order,
//! `((x_0 ∘ x_1) ∘ x_2) ∘ ...`, with float32 accumulated in float64 and rounded once; every
//! rank receives the same bits. Transports must produce exactly [`fold`]'s result, whatever
//! the timing and however they split the work.
//!
//! This module must not know tensors, pytrees or any transport.

use quabla_ir::HostData;
use std::fmt;
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The elementwise reduction of [`crate::distributed::all_reduce`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    /// The sum divided by the number of ranks (in float64 for float32 data, rounded once).
    Mean,
    /// `maximum` over ranks: NaN propagates (numerics.md §5).
    Max,
    /// `minimum` over ranks: NaN propagates.
    Min,
}

impl ReduceOp {
    /// The Python spelling (`"sum"`, `"mean"`, `"max"`, `"min"`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }

    /// Parses the Python spelling.
    pub fn parse(name: &str) -> Option<ReduceOp> {
        Some(match name {
            "sum" => ReduceOp::Sum,
            "mean" => ReduceOp::Mean,
            "max" => ReduceOp::Max,
            "min" => ReduceOp::Min,
            _ => return None,
        })
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How long a collective may wait for the other ranks.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    /// When the wait gives up (`None`: never, only a lost rank ends it).
    pub at: Option<Instant>,
    /// The limit it was made from, for messages.
    pub limit: Option<Duration>,
}

impl Deadline {
    /// A deadline `limit` from now.
    pub fn after(limit: Option<Duration>) -> Deadline {
        Deadline {
            at: limit.and_then(|l| Instant::now().checked_add(l)),
            limit,
        }
    }

    /// Whether it has passed.
    pub fn passed(&self) -> bool {
        self.at.is_some_and(|at| Instant::now() >= at)
    }
}

/// Why a collective could not complete. After a fault the transport may hold operations that
/// never finish; the group that owns it refuses every later collective (`group.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// These ranks had not arrived when the deadline passed.
    Timeout { missing: Vec<usize> },
    /// A rank is gone: it stopped answering heartbeats (it died, or its machine did), or it
    /// left the group (its thread ended, it finalized).
    Lost { rank: usize, how: String },
    /// The transport reported an error.
    Transport { message: String },
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Timeout { missing } => {
                write!(f, "{} did not arrive in time", ranks_phrase(missing))
            }
            Fault::Lost { rank, how } => write!(f, "rank {rank} {how}"),
            Fault::Transport { message } => f.write_str(message),
        }
    }
}

/// `rank 1` or `ranks 1, 3`.
pub(crate) fn ranks_phrase(ranks: &[usize]) -> String {
    let list: Vec<String> = ranks.iter().map(usize::to_string).collect();
    match ranks.len() {
        1 => format!("rank {}", list[0]),
        _ => format!("ranks {}", list.join(", ")),
    }
}

/// A process group's transport: the ranks `0..size()`, each holding one communicator, and the
/// collectives between them. Every rank must call the same collectives in the same order with
/// the same lengths and dtypes (the group checks that before each data collective, so a
/// transport may assume it).
///
/// Data moves as [`HostData`]: shared, immutable host arrays. A collective takes its input by
/// value and returns a new array, so that after a [`Fault`] the transport can keep every
/// buffer an unfinished operation may still read or write alive (it cannot cancel what a lost
/// rank left half done), and so that a result becomes a tensor without a copy.
///
/// Implementations: MPI across processes (`mpi.rs`, feature `mpi`), threads of one process
/// (`local.rs`, for tests), and the single process (rank 0 of 1). A device transport such as
/// NCCL implements the same trait for host data and adds in-place reductions of device
/// buffers; see docs/distributed.md.
pub trait Communicator: Send + Sync + fmt::Debug {
    /// This process's (or thread's) rank.
    fn rank(&self) -> usize;

    /// The number of ranks.
    fn size(&self) -> usize;

    /// The transport's name for messages: `"mpi"`, `"in-process"`, `"single process"`.
    fn transport(&self) -> &'static str;

    /// Every rank's `mine` in rank order; every rank passes the same length. Used for the
    /// small headers that precede data collectives, so it should favour latency.
    fn exchange(&self, mine: Vec<u8>, deadline: Deadline) -> Result<Vec<Vec<u8>>, Fault>;

    /// The reduction over the ranks of `data` (float32 or float64, the same dtype and length
    /// on every rank): element `i` is exactly [`fold`] of the ranks' elements `i` in rank
    /// order, the same bits on every rank.
    fn all_reduce(
        &self,
        data: HostData,
        op: ReduceOp,
        deadline: Deadline,
    ) -> Result<HostData, Fault>;

    /// `root`'s `data` on every rank (the others pass an array of the same dtype and length,
    /// whose values are ignored).
    fn broadcast(&self, data: HostData, root: usize, deadline: Deadline)
        -> Result<HostData, Fault>;

    /// The ranks' `mine` (the same dtype and length on every rank) concatenated in rank order.
    fn all_gather(&self, mine: HostData, deadline: Deadline) -> Result<HostData, Fault>;
}

/// A float a reduction accumulates: float64 as itself, float32 widened to float64 and
/// rounded once at the end.
pub(crate) trait Real: Copy + Send + Sync + 'static {
    fn widen(self) -> f64;
    fn narrow(x: f64) -> Self;
}

impl Real for f64 {
    fn widen(self) -> f64 {
        self
    }
    fn narrow(x: f64) -> f64 {
        x
    }
}

impl Real for f32 {
    fn widen(self) -> f64 {
        self as f64
    }
    fn narrow(x: f64) -> f32 {
        x as f32
    }
}

/// `maximum(a, b)` of numerics.md: `where(isnan(a) | (a > b), a, b)`.
fn maximum(a: f64, b: f64) -> f64 {
    if a.is_nan() || a > b {
        a
    } else {
        b
    }
}

/// `minimum(a, b)`: `where(isnan(a) | (a < b), a, b)`.
fn minimum(a: f64, b: f64) -> f64 {
    if a.is_nan() || a < b {
        a
    } else {
        b
    }
}

/// The reduction of `parts` (one slice per rank, in rank order, each at least `out`'s length)
/// into `out`: element `i` is `((p_0[i] ∘ p_1[i]) ∘ p_2[i]) ∘ ...` computed in float64 (exact
/// for float64 data), divided by the number of parts for [`ReduceOp::Mean`], and rounded once
/// to `T`. Every transport's reduction equals this bit for bit.
pub(crate) fn fold<T: Real>(op: ReduceOp, parts: &[&[T]], out: &mut [MaybeUninit<T>]) {
    if parts.iter().any(|p| p.len() < out.len()) {
        return;
    }
    let pointers: Vec<*const T> = parts.iter().map(|p| p.as_ptr()).collect();
    // SAFETY: every part holds `out.len()` elements (checked above), and `out` is a distinct
    // allocation borrowed mutably.
    unsafe { fold_raw(op, &pointers, out.as_mut_ptr() as *mut T, out.len()) }
}

/// [`fold`] over raw parts, so that the output may be one of the parts (a reduction in place).
///
/// # Safety
///
/// Every part and `out` must be valid for `len` elements, and no reference to them may be
/// alive. `out` may be one of the parts exactly (the same start), never overlap one otherwise.
pub(crate) unsafe fn fold_raw<T: Real>(op: ReduceOp, parts: &[*const T], out: *mut T, len: usize) {
    let n = parts.len() as f64;
    // SAFETY: forwarded.
    unsafe {
        match op {
            ReduceOp::Sum => fold_blocks(parts, out, len, |a, b| a + b, None),
            ReduceOp::Mean => fold_blocks(parts, out, len, |a, b| a + b, Some(n)),
            ReduceOp::Max => fold_blocks(parts, out, len, maximum, None),
            ReduceOp::Min => fold_blocks(parts, out, len, minimum, None),
        }
    }
}

/// The fold a block at a time: the block of every part is read into a float64 accumulator
/// before the block of `out` is written, which makes `out` aliasing a part harmless and lets
/// the compiler vectorize each pass.
///
/// # Safety
///
/// As [`fold_raw`].
#[inline(always)]
unsafe fn fold_blocks<T: Real>(
    parts: &[*const T],
    out: *mut T,
    len: usize,
    combine: impl Fn(f64, f64) -> f64,
    divide: Option<f64>,
) {
    const BLOCK: usize = 512;
    let Some((&first, rest)) = parts.split_first() else {
        return;
    };
    let mut acc = [0.0f64; BLOCK];
    let mut start = 0;
    while start < len {
        let m = BLOCK.min(len - start);
        let acc = &mut acc[..m];
        // SAFETY: `start + m <= len` elements of every part and of `out` are valid.
        unsafe {
            let p = std::slice::from_raw_parts(first.add(start), m);
            for (a, x) in acc.iter_mut().zip(p) {
                *a = x.widen();
            }
            for &part in rest {
                let p = std::slice::from_raw_parts(part.add(start), m);
                for (a, x) in acc.iter_mut().zip(p) {
                    *a = combine(*a, x.widen());
                }
            }
            if let Some(n) = divide {
                for a in acc.iter_mut() {
                    *a /= n;
                }
            }
            for (j, a) in acc.iter().enumerate() {
                out.add(start + j).write(T::narrow(*a));
            }
        }
        start += m;
    }
}

/// The communicator of a process without a launcher: rank 0 of 1, every collective a copy.
#[derive(Debug, Default)]
pub(crate) struct SingleProcess;

impl Communicator for SingleProcess {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        1
    }

    fn transport(&self) -> &'static str {
        "single process"
    }

    fn exchange(&self, mine: Vec<u8>, _: Deadline) -> Result<Vec<Vec<u8>>, Fault> {
        Ok(vec![mine])
    }

    fn all_reduce(&self, data: HostData, op: ReduceOp, _: Deadline) -> Result<HostData, Fault> {
        // The fold of one part: itself for float64, and for float32 too (a float32 widened
        // and rounded back is itself, and so is its division by 1).
        let _ = op;
        Ok(data)
    }

    fn broadcast(&self, data: HostData, _: usize, _: Deadline) -> Result<HostData, Fault> {
        Ok(data)
    }

    fn all_gather(&self, mine: HostData, _: Deadline) -> Result<HostData, Fault> {
        Ok(mine)
    }
}

/// A shared array of `len` elements filled by `fill` (which must write every element).
pub(crate) fn filled<T>(len: usize, fill: impl FnOnce(&mut [MaybeUninit<T>])) -> Arc<[T]> {
    let mut out = Arc::<[T]>::new_uninit_slice(len);
    match Arc::get_mut(&mut out) {
        Some(slots) => fill(slots),
        None => unreachable!("a new allocation has one handle"),
    }
    // SAFETY: `fill` wrote every element (its contract).
    unsafe { out.assume_init() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fold of one-element parts.
    fn run<T: Real>(op: ReduceOp, parts: &[&[T]]) -> T {
        filled(1, |out| fold(op, parts, out))[0]
    }

    #[test]
    fn fold_is_the_left_fold_in_rank_order() {
        // Addition in float64 is not associative: the order is visible.
        let (a, b, c) = ([1e16], [1.0], [1.0]);
        let sum = |parts: &[&[f64]]| run(ReduceOp::Sum, parts);
        assert_eq!(sum(&[&a, &b, &c]), (1e16 + 1.0) + 1.0);
        assert_eq!(sum(&[&b, &c, &a]), (1.0 + 1.0) + 1e16);
        assert_ne!((1e16 + 1.0) + 1.0, (1.0 + 1.0) + 1e16);
        // float32 accumulates in float64 and rounds once.
        let (x, y) = ([16_777_216.0f32], [1.0f32]);
        assert_eq!(run(ReduceOp::Sum, &[&x, &y, &y]), 16_777_218.0);
        assert_eq!(run(ReduceOp::Mean, &[&[1.0f32][..], &[2.0f32][..]]), 1.5);
    }

    #[test]
    fn max_and_min_propagate_nan_like_maximum() {
        let nan = f64::NAN;
        for parts in [[1.0, nan, 3.0], [nan, 1.0, 3.0], [1.0, 3.0, nan]] {
            let slices: Vec<[f64; 1]> = parts.iter().map(|&v| [v]).collect();
            let refs: Vec<&[f64]> = slices.iter().map(|s| &s[..]).collect();
            assert!(run(ReduceOp::Max, &refs).is_nan(), "{parts:?}");
            assert!(run(ReduceOp::Min, &refs).is_nan(), "{parts:?}");
        }
        assert_eq!(
            run(ReduceOp::Max, &[&[-0.0][..], &[0.0][..], &[-3.0][..]]),
            0.0
        );
        assert_eq!(
            run(ReduceOp::Min, &[&[2.0][..], &[-1.0][..], &[5.0][..]]),
            -1.0
        );
    }

    #[test]
    fn reduce_op_names_round_trip() {
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
            assert_eq!(ReduceOp::parse(op.name()), Some(op));
        }
        assert_eq!(ReduceOp::parse("prod"), None);
    }
}
