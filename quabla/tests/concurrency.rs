//! Concurrent use: transformed functions are `Send + Sync` and give every thread the results a
//! single thread gets; a tracer handed to another thread is refused there (TR5) by every
//! operation and transform; a non-terminating loop is stopped from another thread through a
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

/// What thread B does with thread A's tracer `a` (value 7, shape [2]) while A's trace runs:
/// every way a tracer can enter a computation on B. Each must be TR5; before trace ids were
/// unique across the process, B's first trace shared A's id and `jit(|x| x + a)(1)` gave
/// `[2, 2]` (the tracer read as B's own input).
fn use_foreign_tracer(a: Tensor) -> Vec<(&'static str, qb::Result<Tensor>)> {
    let one = qb::ones([2]).unwrap();
    let a2 = a.clone();
    let jitted = qb::jit(move |x: Tensor| x.add(&a2));
    let a2 = a.clone();
    let grad = qb::grad(move |x: Tensor| x.mul(&a2)?.sum());
    let a2 = a.clone();
    let vmapped = qb::vmap(move |x: Tensor| x.add(&a2));
    let a2 = a.clone();
    let a3 = a.clone();
    let a4 = a.clone();
    let a5 = a.clone();
    vec![
        ("jit", jitted.call(&one)),
        ("grad", grad.call(&one)),
        ("vmap", vmapped.call(&qb::ones([3, 2]).unwrap())),
        (
            "jvp",
            qb::jvp(move |x: Tensor| x.mul(&a2), &one, &one).map(|(y, _)| y),
        ),
        (
            "vjp",
            qb::vjp(move |x: Tensor| x.mul(&a3), &one).map(|(y, _)| y),
        ),
        (
            "nested jit",
            qb::jit(move |x: Tensor| {
                let a4 = a4.clone();
                qb::jit(move |y: Tensor| y.add(&a4)).call(&x)
            })
            .call(&one),
        ),
        (
            "fori_loop body",
            qb::jit(move |x: Tensor| {
                let a5 = a5.clone();
                qb::fori_loop(0, 2, move |_i, c: Tensor, _: &[Tensor]| c.add(&a5), &x).eval()
            })
            .call(&one),
        ),
        ("eager op", a.add(1.0)),
        ("eager op with a tensor", one.add(&a)),
        ("read back", a.to_vec::<f64>().map(|_| one.clone())),
    ]
}

#[test]
fn a_tracer_handed_to_another_thread_is_refused_there() {
    // Fresh threads, so that with per-thread counters both would have started at the same id.
    let (to_b, from_a) = std::sync::mpsc::channel::<Tensor>();
    let (to_a, from_b) = std::sync::mpsc::channel::<Vec<(&'static str, String)>>();
    let b = std::thread::spawn(move || {
        let a = from_a.recv().unwrap();
        let outcomes = use_foreign_tracer(a)
            .into_iter()
            .map(|(what, r)| {
                let outcome = match r {
                    Err(qb::Error::Tracer {
                        kind: qb::TracerErrorKind::Leaked,
                        message,
                    }) => format!("TR5 {message}"),
                    Err(e) => format!("other error: {e:?}"),
                    Ok(t) => format!("no error: {:?}", t.to_vec::<f64>()),
                };
                (what, outcome)
            })
            .collect();
        to_a.send(outcomes).unwrap();
    });
    let a = std::thread::spawn(move || {
        let seen = std::sync::Mutex::new(Vec::new());
        let f = qb::jit(|x: Tensor| {
            to_b.send(x.clone()).unwrap();
            *seen.lock().unwrap() = from_b.recv().unwrap();
            // A's own trace is unaffected by what B did.
            x.mul(2.0)
        });
        let y = f.call(&qb::full([2], 7.0).unwrap()).unwrap();
        (y.to_vec::<f64>().unwrap(), seen.into_inner().unwrap())
    });
    let (y, outcomes) = a.join().unwrap();
    b.join().unwrap();
    assert_eq!(y, [14.0, 14.0]);
    assert_eq!(outcomes.len(), 10);
    for (what, outcome) in outcomes {
        assert!(
            outcome.starts_with("TR5 ") && outcome.contains("was used after its trace ended"),
            "{what}: {outcome}"
        );
    }
}
