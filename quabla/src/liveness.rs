//! Which traces are running on this thread: trace ids, unique across the process, and the set
//! of ids whose traces are live here.
//!
//! A tracer carries the id of its trace; a tensor operation asks [`is_live`] before it treats
//! a tracer as a value, so one whose trace ended, or that came from another thread, is the
//! escaped-tracer error (TR5) instead of being read as another trace's input. This module
//! owns the ids and the live set and nothing else: it sits below `tensor` so that tensors can
//! ask without importing the trace machinery (`trace` starts a [`LiveTrace`] for every frame
//! it pushes).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

thread_local! {
    static LIVE: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// The id of the next trace, unique across the process.
static NEXT_TRACE: AtomicU64 = AtomicU64::new(1);

/// A trace running on this thread: live from [`LiveTrace::start`] until dropped (when the trace
/// ends, normally or by an error or a panic).
#[derive(Debug)]
pub(crate) struct LiveTrace {
    id: u64,
}

impl LiveTrace {
    /// A new trace id, live on this thread.
    pub(crate) fn start() -> LiveTrace {
        let id = NEXT_TRACE.fetch_add(1, Ordering::Relaxed);
        LIVE.with(|l| l.borrow_mut().push(id));
        LiveTrace { id }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for LiveTrace {
    fn drop(&mut self) {
        LIVE.with(|l| {
            let mut l = l.borrow_mut();
            if let Some(i) = l.iter().rposition(|&id| id == self.id) {
                l.remove(i);
            }
        });
    }
}

/// Whether the trace with this id is running on this thread.
pub(crate) fn is_live(trace: u64) -> bool {
    LIVE.with(|l| l.borrow().contains(&trace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_is_live_on_its_thread_until_it_ends() {
        let outer = LiveTrace::start();
        let inner = LiveTrace::start();
        assert_ne!(outer.id(), inner.id());
        assert!(is_live(outer.id()) && is_live(inner.id()));
        let inner_id = inner.id();
        drop(inner);
        assert!(!is_live(inner_id) && is_live(outer.id()));
        let id = outer.id();
        let elsewhere = std::thread::spawn(move || is_live(id)).join().unwrap();
        assert!(!elsewhere);
    }
}
