//! The CPU kernels, one module per family of ops, and the helpers they share for splitting
//! large kernels over threads.
//!
//! Every kernel takes typed views of its operands and writes a typed output; values are
//! computed in float64 and rounded once to the node dtype (numerics.md §1.5). How work is split
//! over threads never changes a result: elementwise kernels and reductions split over
//! independent output elements, and matrix products split by a rule that depends only on the
//! shapes.

pub(crate) mod elementwise;
pub(crate) mod indexed;
pub(crate) mod lanes;
pub(crate) mod layout;
pub(crate) mod linalg;
pub(crate) mod matmul;
pub(crate) mod reduce;
pub(crate) mod team;

use quabla_backend::{BackendError, Result};
use quabla_ir::alloc::{self, AllocError};
use std::sync::Mutex;

/// Kernels over at least this many elements use every thread of the executor.
pub(crate) const PAR_MIN_ELEMENTS: usize = 100_000;

/// Splits `0..total` into at most `parts` contiguous ranges whose boundaries are multiples of
/// `align` (the last range takes the remainder). Empty ranges are never returned.
pub(crate) fn split_ranges(total: usize, parts: usize, align: usize) -> Vec<(usize, usize)> {
    let align = align.max(1);
    let units = total.div_ceil(align);
    let parts = parts.clamp(1, units.max(1));
    let mut out = Vec::with_capacity(parts);
    let mut start = 0;
    for p in 0..parts {
        let end_units = units * (p + 1) / parts;
        let end = (end_units * align).min(total);
        if end > start {
            out.push((start, end));
            start = end;
        }
    }
    out
}

/// Runs `work(item)` for every item over up to `threads` threads: item `i` goes to
/// participant `i mod p` of `p = min(threads, items)`, the helpers of [`team`] first and the
/// current thread last, which waits for the others. When the team is busy the items go to
/// rayon's pool instead (the current thread takes the last). Which thread runs an item never
/// changes its result: the items are fixed parts of the work.
pub(crate) fn par_for_each<T: Send, F>(items: Vec<T>, threads: usize, work: F)
where
    F: Fn(T) + Sync,
{
    if threads <= 1 || items.len() <= 1 {
        items.into_iter().for_each(work);
        return;
    }
    let participants = threads.min(items.len());
    let slots: Vec<Mutex<Option<T>>> = items.into_iter().map(|i| Mutex::new(Some(i))).collect();
    let take = |i: usize| {
        slots[i]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    };
    let part = |p: usize| {
        for i in (p..slots.len()).step_by(participants) {
            if let Some(item) = take(i) {
                work(item);
            }
        }
    };
    if team::run_parts(participants, &part) {
        return;
    }
    let work = &work;
    let take = &take;
    rayon::in_place_scope(|s| {
        let last = slots.len() - 1;
        for i in 0..last {
            s.spawn(move |_| {
                if let Some(item) = take(i) {
                    work(item);
                }
            });
        }
        if let Some(item) = take(last) {
            work(item);
        }
    });
}

/// A zeroed float64 working vector of `n` elements for a kernel (an accumulator, a widened
/// operand), allocated fallibly: its size follows the plan's shapes.
pub(crate) fn scratch(n: usize) -> Result<Vec<f64>> {
    alloc::try_zeroed_vec(n).map_err(scratch_oom)
}

/// The error for a kernel's float64 working vector the allocator refused.
pub(crate) fn scratch_oom(e: AllocError) -> BackendError {
    BackendError::OutOfMemory {
        bytes: e.bytes,
        what: format!("a float64 working copy of {} elements", e.bytes / 8),
    }
}

/// An internal invariant of a verified plan did not hold.
pub(crate) fn internal(message: impl Into<String>) -> BackendError {
    BackendError::Device {
        device: "cpu".into(),
        message: format!("internal error: {}", message.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_everything_aligned() {
        assert_eq!(split_ranges(10, 2, 4), vec![(0, 4), (4, 10)]);
        assert_eq!(split_ranges(3, 4, 1), vec![(0, 1), (1, 2), (2, 3)]);
        assert_eq!(split_ranges(1, 8, 2048), vec![(0, 1)]);
        let r = split_ranges(100_003, 2, 2048);
        assert_eq!(r.first().unwrap().0, 0);
        assert_eq!(r.last().unwrap().1, 100_003);
        assert_eq!(r[0].1 % 2048, 0);
    }
}
