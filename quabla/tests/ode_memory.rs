//! Memory of reverse mode through `odeint`: a fixed-step solve is one `fori_loop`, whose VJP
//! stores the carry only at block boundaries (transforms.md §13), so the peak heap grows like
//! `sqrt(steps)`, not like `steps`. Measured with a counting global allocator (this test binary
//! holds this one test only, so nothing else allocates meanwhile).

use qb::ode::odeint;
use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwards the caller's layout to the system allocator.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `realloc`'s contract; we forward it.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let grow = new_size - layout.size();
                let now = CURRENT.fetch_add(grow, Ordering::Relaxed) + grow;
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                CURRENT.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Peak heap bytes above the level at the start of `f`.
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed) - base)
}

fn rhs(y: &Tensor, t: &Tensor, a: &[Tensor]) -> qb::Result<Tensor> {
    (y * &a[0]).neg()? + (t.sin()? * 0.01)
}

#[test]
fn reverse_mode_memory_grows_like_the_square_root_of_the_steps() -> qb::Result<()> {
    // A 512-element state (4 KiB per carry), so that stored carries dominate the plan's fixed
    // costs.
    let n = 512;
    let y0 = qb::linspace(0.5, 1.5, n)?;
    let k = qb::array(0.3)?;
    let mut peaks = Vec::new();
    for steps in [100usize, 1_000, 10_000] {
        let loss = |k: Tensor| {
            odeint(rhs, &y0, (0.0, 1.0))
                .steps(steps)
                .args(&[&k])
                .eval()?
                .sum()
        };
        let (g, peak) = peak_during(|| qb::grad(loss).call::<Tensor, Tensor>(&k));
        let g = g?;
        // d/dk of sum(y(1)) for y' = -k y + 0.01 sin(t) is close to -sum(y0) exp(-k).
        let expected = -qb::linspace(0.5, 1.5, n)?.sum()?.item()? * (-0.3f64).exp();
        assert!(
            (g.item()? - expected).abs() < 1e-2 * expected.abs(),
            "{}",
            g.item()?
        );
        println!("reverse-mode peak for {steps} rk4 steps of a {n}-element state: {peak} bytes");
        peaks.push(peak as f64);
    }
    // For contrast, the full tape (every step's residuals kept) at 1000 steps.
    let full_1000 = {
        let loss = |k: Tensor| {
            odeint(rhs, &y0, (0.0, 1.0))
                .steps(1_000)
                .args(&[&k])
                .eval()?
                .sum()
        };
        let (g, peak) = peak_during(|| {
            qb::grad(loss)
                .loop_tape(qb::LoopTape::Full)
                .call::<Tensor, Tensor>(&k)
        });
        g?;
        println!("full-tape peak for 1000 rk4 steps of a {n}-element state: {peak} bytes");
        peak as f64
    };
    assert!(full_1000 > 4.0 * peaks[1], "{full_1000} vs {peaks:?}");
    // A full tape stores every step: 100 times more for 100 times the steps. The checkpointed
    // loop stores about sqrt(steps) carries and one block's tape.
    let ratio = peaks[2] / peaks[0];
    assert!(ratio < 25.0, "peaks {peaks:?}: ratio {ratio}");
    // Each carry alone is 4 KiB: 10_000 of them would be 40 MB.
    assert!(peaks[2] < 20e6, "peaks {peaks:?}");
    Ok(())
}
