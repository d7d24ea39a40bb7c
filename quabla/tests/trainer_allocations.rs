//! A `Trainer` step on the CPU allocates nothing for its parameters and optimizer state: each
//! step donates the state to the plan, and the CPU writes the next state into the storage of
//! the state before last. Measured with a counting allocator over the whole process (this test
//! binary has one test, so nothing else allocates meanwhile).

use qb::Tensor;
use quabla as qb;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the counter is a side
// effect only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        BYTES.fetch_add(
            new_size.saturating_sub(layout.size()) as u64,
            Ordering::Relaxed,
        );
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A 1024x64 tanh layer and a linear read-out: 66,048 parameters (516 KiB in float64), and
/// Adam's two moments of the same size.
fn loss(p: &(Tensor, Tensor, Tensor), data: &(Tensor, Tensor)) -> qb::Result<Tensor> {
    let (w, b, v) = p;
    let (x, y) = data;
    let h = (x.matmul(w)? + b)?.tanh()?;
    let out = h.matmul(v)?;
    let r = (out - y)?;
    (&r * &r)?.mean()
}

#[test]
fn a_cpu_trainer_step_allocates_nothing_for_its_state() -> qb::Result<()> {
    let key = qb::random::key(3);
    let keys = qb::random::split(&key, 4)?;
    let x = qb::random::normal(&keys[0], [32, 1024]).eval()?;
    let y = qb::random::normal(&keys[1], [32, 1]).eval()?;
    let params = (
        qb::random::normal(&keys[2], [1024, 64]).eval()?.mul(0.03)?,
        qb::zeros([64])?,
        qb::random::normal(&keys[3], [64, 1]).eval()?.mul(0.1)?,
    );
    let state_bytes = 3 * (1024 * 64 + 64 + 64) * 8;
    let mut trainer =
        qb::optim::Trainer::new(loss, params, qb::optim::Adam::new(1e-3), (x, y)).build()?;
    // Warm: the workspace's pool and the kept buffers fill during the first steps.
    for _ in 0..5 {
        trainer.step()?;
    }
    let steps = 50;
    let start = BYTES.load(Ordering::Relaxed);
    for _ in 0..steps {
        trainer.step()?;
    }
    let per_step = (BYTES.load(Ordering::Relaxed) - start) / steps;
    eprintln!("bytes allocated per step: {per_step} (state: {state_bytes} bytes)");
    // Before donation every step allocated its whole new state; what remains is bookkeeping
    // (the loss, buffer handles), far below one parameter tensor.
    assert!(
        per_step < 16 * 1024,
        "{per_step} bytes allocated per step (state {state_bytes} bytes)"
    );
    // The state is intact and training went on.
    assert_eq!(trainer.opt_state()?.steps()?, 55);
    assert!(trainer.loss()?.item()?.is_finite());
    Ok(())
}
