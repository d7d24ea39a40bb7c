//! Trace caches of `jvp` and `vjp` (transforms.md §2): the free functions cache stateless
//! functions per thread, `jvp_fn`/`vjp_fn` own a cache like every other transform, closures
//! with captures never reuse a trace made with other captured values, and the pullbacks of a
//! cached signature keep working after eviction.

use qb::prelude::*;
use qb::warnings::{self, Action, Warning, WarningKind};
use qb::Tensor;
use quabla as qb;
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-15 * y.abs().max(1.0))
}

#[test]
fn free_jvp_traces_a_stateless_closure_once_per_signature() -> qb::Result<()> {
    static TRACES: AtomicUsize = AtomicUsize::new(0);
    let f = |x: Tensor| {
        TRACES.fetch_add(1, Ordering::Relaxed);
        x.sin().mul(&x)
    };
    for i in 0..4 {
        let x = qb::array([i as f64, 0.5])?;
        let (y, t) = qb::jvp(f, &x, &qb::array([1.0, 2.0])?)?;
        let xs = vals(&x);
        let expected_y: Vec<f64> = xs.iter().map(|x| x.sin() * x).collect();
        let expected_t: Vec<f64> = xs
            .iter()
            .zip([1.0, 2.0])
            .map(|(x, t)| (x.cos() * x + x.sin()) * t)
            .collect();
        assert!(close(&vals(&y), &expected_y), "{:?}", vals(&y));
        assert!(close(&vals(&t), &expected_t), "{:?}", vals(&t));
    }
    assert_eq!(TRACES.load(Ordering::Relaxed), 1);
    // A new shape traces once more; the first shape is still cached.
    qb::jvp(f, &qb::zeros([3])?, &qb::ones([3])?)?;
    qb::jvp(f, &qb::zeros([3])?, &qb::ones([3])?)?;
    qb::jvp(f, &qb::zeros([2])?, &qb::ones([2])?)?;
    assert_eq!(TRACES.load(Ordering::Relaxed), 2);
    // So does a new dtype.
    qb::jvp(f, &qb::F32.zeros([2])?, &qb::F32.ones([2])?)?;
    assert_eq!(TRACES.load(Ordering::Relaxed), 3);
    Ok(())
}

static CUBE_TRACES: AtomicUsize = AtomicUsize::new(0);

fn cube(x: Tensor) -> qb::Result<Tensor> {
    CUBE_TRACES.fetch_add(1, Ordering::Relaxed);
    x.powi(3).sum()
}

#[test]
fn free_vjp_traces_a_fn_item_once_per_signature() -> qb::Result<()> {
    let mut pullbacks = Vec::new();
    for i in 1..4 {
        let x = qb::array([i as f64, -1.0])?;
        let (y, pullback) = qb::vjp(cube, &x)?;
        assert_eq!(y.item()?, (i * i * i) as f64 - 1.0);
        pullbacks.push((i as f64, pullback));
    }
    assert_eq!(CUBE_TRACES.load(Ordering::Relaxed), 1);
    // Each pullback keeps its own primal values, and may be called many times.
    for (i, pullback) in &pullbacks {
        for scale in [1.0, 2.0] {
            let ct: Tensor = pullback.call(&qb::array(scale)?)?;
            assert_eq!(vals(&ct), [3.0 * i * i * scale, 3.0 * scale]);
        }
    }
    let (_, pullback) = qb::vjp(cube, &qb::array([2.0])?)?;
    let ct: Tensor = pullback.call(&qb::array(1.0)?)?;
    assert_eq!(vals(&ct), [12.0]);
    assert_eq!(CUBE_TRACES.load(Ordering::Relaxed), 2);
    Ok(())
}

#[test]
fn different_stateless_closures_keep_separate_traces() -> qb::Result<()> {
    // Same argument and result types, same enclosing function: only the code differs.
    let sin = |x: Tensor| x.sin();
    let cos = |x: Tensor| x.cos();
    let x = qb::array([0.25, 1.5])?;
    let t = qb::ones([2])?;
    for _ in 0..2 {
        let (_, ds) = qb::jvp(sin, &x, &t)?;
        let (_, dc) = qb::jvp(cos, &x, &t)?;
        assert!(close(&vals(&ds), &[0.25f64.cos(), 1.5f64.cos()]));
        assert!(close(&vals(&dc), &[-0.25f64.sin(), -1.5f64.sin()]));
        let (ys, _) = qb::vjp(sin, &x)?;
        let (yc, _) = qb::vjp(cos, &x)?;
        assert!(close(&vals(&ys), &[0.25f64.sin(), 1.5f64.sin()]));
        assert!(close(&vals(&yc), &[0.25f64.cos(), 1.5f64.cos()]));
    }
    Ok(())
}

#[test]
fn closures_with_captures_never_reuse_a_trace_of_other_captured_values() -> qb::Result<()> {
    let traces = Cell::new(0);
    let x = qb::array([1.0, 2.0])?;
    // One closure expression, a new captured scale each iteration: a cache keyed by the
    // closure's type would keep returning the first scale.
    for k in [1.0, -2.0, 0.5] {
        let scaled = |x: Tensor| {
            traces.set(traces.get() + 1);
            &x * k
        };
        let (_, t) = qb::jvp(scaled, &x, &qb::ones([2])?)?;
        assert_eq!(vals(&t), [k, k]);
        let (_, pullback) = qb::vjp(scaled, &x)?;
        let ct: Tensor = pullback.call(&qb::ones([2])?)?;
        assert_eq!(vals(&ct), [k, k]);
    }
    assert_eq!(traces.get(), 6);
    Ok(())
}

#[test]
fn jvp_fn_and_vjp_fn_own_their_caches() -> qb::Result<()> {
    let traces = Cell::new(0);
    let w = qb::array([2.0, -1.0])?;
    let f = |x: Tensor| {
        traces.set(traces.get() + 1);
        x.mul(&w).tanh()
    };
    let jvp = qb::jvp_fn(f).name("layer");
    let vjp = qb::vjp_fn(f).name("layer");
    for i in 0..3 {
        let x = qb::array([0.1 * i as f64, 0.3])?;
        let (y1, t) = jvp.call(&x, &qb::ones([2])?)?;
        let (y2, pullback) = vjp.call(&x)?;
        assert_eq!(vals(&y1), vals(&y2));
        let ct: Tensor = pullback.call(&qb::ones([2])?)?;
        // tanh' w with a unit tangent or cotangent: both modes agree.
        assert!(close(&vals(&t), &vals(&ct)));
    }
    assert_eq!(traces.get(), 2, "one trace per transformed object");
    assert_eq!((jvp.cache_size(), vjp.cache_size()), (1, 1));
    // A shape the function rejects: the failed trace caches nothing.
    jvp.call(&qb::zeros([3])?, &qb::ones([3])?).unwrap_err();
    assert_eq!(jvp.cache_size(), 1);
    Ok(())
}

#[test]
fn eviction_warns_and_pullbacks_outlive_their_entry() -> qb::Result<()> {
    let seen = Arc::new(Mutex::new(Vec::<Warning>::new()));
    let sink = seen.clone();
    warnings::set_handler(move |w| sink.lock().unwrap().push(w.clone()));
    warnings::set_action(WarningKind::Retrace, Action::Always);
    let traces = Cell::new(0);
    let f = |x: Tensor| {
        traces.set(traces.get() + 1);
        x.exp()
    };
    let jvp = qb::jvp_fn(f).name("exp").max_traces(1);
    jvp.call(&qb::zeros([1])?, &qb::ones([1])?)?;
    jvp.call(&qb::zeros([2])?, &qb::ones([2])?)?;
    let vjp = qb::vjp_fn(f).name("exp").max_traces(1);
    let (_, first) = vjp.call(&qb::zeros([1])?)?;
    let (_, second) = vjp.call(&qb::zeros([2])?)?;
    // The first signature was evicted; its pullback still runs.
    let ct: Tensor = first.call(&qb::array([3.0])?)?;
    assert_eq!(vals(&ct), [3.0]);
    let ct: Tensor = second.call(&qb::array([1.0, 2.0])?)?;
    assert_eq!(vals(&ct), [1.0, 2.0]);
    let (_, again) = vjp.call(&qb::zeros([1])?)?;
    let ct: Tensor = again.call(&qb::array([4.0])?)?;
    assert_eq!(vals(&ct), [4.0]);
    assert_eq!(traces.get(), 5);
    let seen: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|w| w.to_string().contains("(exp)"))
        .map(Warning::to_string)
        .collect();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen[0].starts_with(
        "jvp(exp) exceeded max_traces=1; evicted the least recently used trace:\n  (float64[1],)\nnew signature:\n  (float64[2],)"
    ));
    assert!(seen[1].starts_with("vjp(exp) exceeded max_traces=1"));
    Ok(())
}

#[test]
fn pullbacks_inline_inside_traces() -> qb::Result<()> {
    // A pullback made outside any trace, called inside jit and grad.
    let x = qb::array([0.5, 1.0])?;
    let (_, pullback) = qb::vjp(|x: Tensor| x.sin(), &x)?;
    let ct: Tensor = qb::jit(|g: Tensor| pullback.call::<Tensor>(&g)).call(&qb::ones([2])?)?;
    assert!(close(&vals(&ct), &[0.5f64.cos(), 1.0f64.cos()]));
    let g: Tensor =
        qb::grad(|g: Tensor| pullback.call::<Tensor>(&g)?.sum()).call(&qb::ones([2])?)?;
    assert!(close(&vals(&g), &[0.5f64.cos(), 1.0f64.cos()]));
    // jvp and vjp staged inside jit (stateless functions, cached at the top level only).
    let h: Tensor = qb::jit(|x: Tensor| {
        let (_, t) = qb::jvp(|x: Tensor| x.sin(), &x, &qb::ones([2])?)?;
        let (_, pb) = qb::vjp(|x: Tensor| x.cos(), &x)?;
        let c: Tensor = pb.call(&qb::ones([2])?)?;
        &t + &c
    })
    .call(&x)?;
    assert!(close(
        &vals(&h),
        &[0.5f64.cos() - 0.5f64.sin(), 1.0f64.cos() - 1.0f64.sin()]
    ));
    Ok(())
}

#[test]
fn vjp_with_aux_differentiates_the_output_only() -> qb::Result<()> {
    let f = qb::vjp_fn(|x: qb::Tensor| {
        let y = x.sin()?;
        let aux = (x.powi(2)?, x.greater(0.0)?);
        Ok((y, aux))
    })
    .has_aux();
    let x = qb::array([0.5, -1.0])?;
    let (y, pullback, (sq, positive)): (qb::Tensor, _, (qb::Tensor, qb::Tensor)) = f.call(&x)?;
    assert_eq!(y.to_vec::<f64>()?, vec![0.5f64.sin(), (-1.0f64).sin()]);
    assert_eq!(sq.to_vec::<f64>()?, vec![0.25, 1.0]);
    assert_eq!(positive.to_vec_bool()?, vec![true, false]);
    let g: qb::Tensor = pullback.call(&qb::array([1.0, 2.0])?)?;
    assert_eq!(
        g.to_vec::<f64>()?,
        vec![0.5f64.cos(), 2.0 * (-1.0f64).cos()]
    );
    // A function that does not return a pair does not type-check: `has_aux` requires
    // `Fn(A) -> Result<(R, X)>`.
    Ok(())
}
