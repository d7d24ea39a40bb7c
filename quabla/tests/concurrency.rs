//! Concurrent use: transformed functions are `Send + Sync` and give every thread the results a
//! single thread gets; a non-terminating loop is stopped from another thread through a
//! `CancelToken`, eagerly and compiled.

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn assert_send_sync<T: Send + Sync>(_: &T) {}

fn f(x: Tensor) -> qb::Result<Tensor> {
    x.sin().mul(&x).add(x.powi(2)).sum()
}

/// Inputs of a few signatures: lengths 1..=4, float64 and float32.
fn input(i: usize) -> Tensor {
    let n = 1 + i % 4;
    let x = qb::linspace(-1.0, 1.0 + i as f64 * 0.01, n).unwrap();
    if i.is_multiple_of(3) {
        x.astype(qb::F32).unwrap()
    } else {
        x
    }
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.astype(qb::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

#[test]
fn eight_threads_share_one_jit_and_one_grad() {
    let jitted = Arc::new(qb::jit(f));
    let grad = Arc::new(qb::grad(f));
    assert_send_sync(&*jitted);
    assert_send_sync(&*grad);
    const CALLS: usize = 2000;
    // The single-threaded reference, from fresh transform objects.
    let (j1, g1) = (qb::jit(f), qb::grad(f));
    let expected: Vec<(Vec<u64>, Vec<u64>)> = (0..CALLS)
        .map(|i| {
            let x = input(i);
            let g: Tensor = g1.call(&x).unwrap();
            (bits(&j1.call(&x).unwrap()), bits(&g))
        })
        .collect();
    let expected = Arc::new(expected);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (jitted, grad, expected) = (jitted.clone(), grad.clone(), expected.clone());
            std::thread::spawn(move || {
                for k in 0..CALLS {
                    // Each thread walks the inputs in its own order.
                    let i = (k * 7 + t * 131) % CALLS;
                    let x = input(i);
                    let y = jitted.call(&x).unwrap();
                    let g: Tensor = grad.call(&x).unwrap();
                    assert_eq!((bits(&y), bits(&g)), expected[i], "thread {t}, input {i}");
                    assert!(!y.is_traced() && !g.is_traced(), "a tracer crossed threads");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a worker thread panicked");
    }
}

/// Runs `work` under a fresh token that another thread cancels after `after`; returns the
/// result and how long cancellation took to take effect.
fn cancel_after(
    after: Duration,
    work: impl FnOnce() -> qb::Result<Tensor>,
) -> (qb::Result<Tensor>, Duration) {
    let token = qb::CancelToken::new();
    let remote = token.clone();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(after);
        remote.cancel();
        Instant::now()
    });
    let result = qb::with_token(&token, work);
    let stopped = Instant::now();
    let cancelled_at = canceller.join().unwrap();
    (result, stopped.saturating_duration_since(cancelled_at))
}

fn forever(c: &Tensor, _: &[Tensor]) -> qb::Result<Tensor> {
    c.sum()?.greater(-1.0)
}

fn step(c: Tensor, _: &[Tensor]) -> qb::Result<Tensor> {
    c.add(1.0)
}

#[test]
fn a_runaway_eager_while_loop_is_cancelled_from_another_thread() {
    let init = qb::zeros([4]).unwrap();
    let (result, latency) = cancel_after(Duration::from_millis(50), || {
        qb::while_loop(forever, step, &init).eval()
    });
    assert!(matches!(result, Err(qb::Error::Cancelled)), "{result:?}");
    assert!(latency < Duration::from_secs(2), "took {latency:?}");
    assert_eq!(init.to_vec::<f64>().unwrap(), [0.0; 4]);
}

#[test]
fn a_runaway_compiled_while_loop_is_cancelled_from_another_thread() {
    let looped = qb::jit(|x: Tensor| qb::while_loop(forever, step, &x).eval());
    let x = qb::zeros([4]).unwrap();
    let (result, latency) = cancel_after(Duration::from_millis(50), || looped.call(&x));
    assert!(matches!(result, Err(qb::Error::Cancelled)), "{result:?}");
    assert!(latency < Duration::from_secs(2), "took {latency:?}");
    // The same compiled function still runs a terminating loop afterwards.
    let bounded = qb::jit(|x: Tensor| {
        qb::while_loop(|c: &Tensor, _: &[Tensor]| c.sum()?.less(10.0), step, &x).eval()
    });
    assert_eq!(bounded.call(&x).unwrap().to_vec::<f64>().unwrap(), [3.0; 4]);
}
