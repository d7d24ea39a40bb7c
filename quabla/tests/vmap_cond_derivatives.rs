//! Derivatives of `vmap` over a `cond` with a mapped predicate (transforms.md §11): both
//! branches run for every example, yet neither the value nor any derivative of the branch an
//! example does not select reaches that example's result. Every derivative transform around
//! the `vmap` (and `vmap` around the derivative), with the unsafe side in either branch,
//! batched and unbatched operands, eagerly and under `jit`, against closed forms.

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;

/// Points where each branch, when not selected, sees an input outside its domain: `log` at
/// `-1` and `-3`, `sqrt(1 - v)` at `2`; and one (`0.5`) where both are defined.
const V: [f64; 4] = [2.0, -1.0, 0.5, -3.0];
const W: f64 = 1.5;

/// `w * log(v)` for `v > 0`, else `w * sqrt(1 - v)`; `flip` swaps which branch is `then`.
fn piece(v: &Tensor, w: &Tensor, flip: bool) -> qb::Result<Tensor> {
    let log_side = |o: &[Tensor]| o[0].log()?.mul(&o[1]);
    let sqrt_side = |o: &[Tensor]| (1.0 - &o[0]).sqrt()?.mul(&o[1]);
    if flip {
        qb::cond(&v.less_equal(0.0)?, sqrt_side, log_side, &[v, w])
    } else {
        qb::cond(&v.greater(0.0)?, log_side, sqrt_side, &[v, w])
    }
}

/// Value, d/dv, d2/dv2 and d/dw of one example, in closed form.
fn reference(v: f64) -> [f64; 4] {
    if v > 0.0 {
        [W * v.ln(), W / v, -W / (v * v), v.ln()]
    } else {
        let s = (1.0 - v).sqrt();
        [W * s, -W / (2.0 * s), -W / (4.0 * s * s * s), s]
    }
}

fn column(k: usize) -> Vec<f64> {
    V.iter().map(|&v| reference(v)[k]).collect()
}

fn assert_close(got: &Tensor, want: &[f64], what: &str) {
    let got = got.to_vec::<f64>().unwrap();
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-12 * (1.0 + w.abs()),
            "{what}: {got:?} vs {want:?}"
        );
    }
}

/// The batched function: `v` mapped, `w` unbatched (rank 0).
fn batched(v: &Tensor, w: &Tensor, flip: bool) -> qb::Result<Tensor> {
    qb::vmap(move |(v, w): (Tensor, Tensor)| piece(&v, &w, flip))
        .in_axes(&[Some(0), None])
        .call(&(v.clone(), w.clone()))
}

#[test]
fn every_derivative_of_vmap_cond_ignores_the_unselected_branch() -> qb::Result<()> {
    let v = qb::array(V)?;
    let w = qb::array(W)?;
    let total = |flip: bool| move |(v, w): (Tensor, Tensor)| batched(&v, &w, flip)?.sum();
    for flip in [false, true] {
        let what = |s: &str| format!("{s} (flip={flip})");
        assert_close(&batched(&v, &w, flip)?, &column(0), &what("value"));

        // Reverse mode, with respect to the mapped and to the unbatched operand.
        let args = (v.clone(), w.clone());
        let (gv, gw): (Tensor, Tensor) = qb::grad(total(flip)).argnums(&[0, 1]).call(&args)?;
        assert_close(&gv, &column(1), &what("grad v"));
        assert_close(&gw, &[column(3).iter().sum()], &what("grad w"));
        let jitted: Tensor = qb::jit(|(v, w): (Tensor, Tensor)| {
            qb::grad(total(flip)).call::<Tensor, Tensor>(&(v, w))
        })
        .call(&(v.clone(), w.clone()))?;
        assert_close(&jitted, &column(1), &what("jit(grad)"));

        // vjp with a non-unit cotangent, jvp with a non-unit tangent.
        let scale = qb::array([1.0, 2.0, -1.0, 0.5])?;
        let (_, pullback) = qb::vjp_fn(|v: Tensor| batched(&v, &w, flip)).call(&v)?;
        let ct: Tensor = pullback.call(&scale)?;
        let scaled: Vec<f64> = column(1)
            .iter()
            .zip([1.0, 2.0, -1.0, 0.5])
            .map(|(a, b)| a * b)
            .collect();
        assert_close(&ct, &scaled, &what("vjp"));
        let (_, t): (Tensor, Tensor) =
            qb::jvp_fn(|v: Tensor| batched(&v, &w, flip)).call(&v, &scale)?;
        assert_close(&t, &scaled, &what("jvp"));

        // Forward-mode jacobian ([4] -> [4]) and reverse-mode jacobian ([4] -> [2]).
        let diag = |d: &[f64]| -> Vec<f64> {
            (0..16)
                .map(|i| if i % 5 == 0 { d[i / 5] } else { 0.0 })
                .collect()
        };
        let j: Tensor = qb::jacobian(|v: Tensor| batched(&v, &w, flip)).call(&v)?;
        assert_close(&j, &diag(&column(1)), &what("forward jacobian"));
        let jr: Tensor =
            qb::jacobian(|v: Tensor| batched(&v, &w, flip)?.reshape([2, 2])?.sum_axes([1]))
                .call(&v)?;
        let d1 = column(1);
        let pairs = [d1[0], d1[1], 0.0, 0.0, 0.0, 0.0, d1[2], d1[3]];
        assert_close(&jr, &pairs, &what("reverse jacobian"));

        // Second order: hessian (forward over reverse) and grad of grad.
        let h: Tensor = qb::hessian(|v: Tensor| batched(&v, &w, flip)?.sum()).call(&v)?;
        assert_close(&h, &diag(&column(2)), &what("hessian"));
        let gg: Tensor = qb::grad(|v: Tensor| {
            qb::grad(|v: Tensor| batched(&v, &w, flip)?.sum())
                .call::<Tensor, Tensor>(&v)?
                .sum()
        })
        .call(&v)?;
        assert_close(&gg, &column(2), &what("grad(grad)"));

        // The derivative inside the map (already per example).
        let inner: Tensor = qb::vmap(|v: Tensor| {
            qb::grad(|v: Tensor| piece(&v, &qb::array(W)?, flip)).call::<Tensor, Tensor>(&v)
        })
        .call(&v)?;
        assert_close(&inner, &column(1), &what("vmap(grad)"));
    }
    Ok(())
}
