//! `qb::linalg::solve` and `cholesky`: values (acceptance E73, E76, E79), derivatives against
//! closed forms and finite differences (numerics.md §6.5), batching, and jit.

use qb::prelude::*;
use qb::{Error, Tensor};
use quabla as qb;

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

fn a() -> Tensor {
    qb::array([[4.0, 1.0], [1.0, 3.0]]).unwrap()
}

#[test]
fn e73_e76_solve_values_and_batched_right_hand_sides() -> qb::Result<()> {
    let x = qb::linalg::solve(a(), qb::array([1.0, 2.0])?)?;
    let want = [1.0 / 11.0, 7.0 / 11.0];
    assert!(vals(&x)
        .iter()
        .zip(want)
        .all(|(g, w)| (g - w).abs() < 1e-15));
    let batch = qb::stack(&[a(), a().mul(2.0)?], 0)?;
    assert_eq!(
        qb::linalg::solve(&batch, qb::array([1.0, 2.0])?)?.shape(),
        &[2, 2]
    );
    assert_eq!(
        qb::linalg::solve(&batch, qb::ones([2, 2, 3])?)?.shape(),
        &[2, 2, 3]
    );
    Ok(())
}

#[test]
fn e79_singular_matrices_are_typed_errors() {
    let s = qb::array([[1.0, 2.0], [2.0, 4.0]]).unwrap();
    let err = qb::linalg::solve(&s, qb::array([1.0, 2.0]).unwrap()).unwrap_err();
    assert!(matches!(err, Error::Singular { .. }));
    assert_eq!(err.to_string(), "solve: matrix is singular");
    let err = qb::linalg::solve(qb::ones([2, 3]).unwrap(), qb::ones([2]).unwrap()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "solve expects square matrices of shape [..., n, n], got [2, 3]"
    );
}

#[test]
fn cholesky_values_reconstruct() -> qb::Result<()> {
    let l = a().cholesky()?;
    let back = l.matmul(l.t()?)?;
    assert!(vals(&back)
        .iter()
        .zip(vals(&a()))
        .all(|(g, w)| (g - w).abs() < 1e-14));
    assert_eq!(vals(&l)[1], 0.0, "upper triangle is zero");
    Ok(())
}

/// Central difference of a scalar function of a matrix along direction `d`.
fn fd(f: &dyn Fn(&Tensor) -> f64, x: &Tensor, d: &Tensor) -> f64 {
    let h = 1e-6;
    (f(&(x + d.mul(h).unwrap()).unwrap()) - f(&(x - d.mul(h).unwrap()).unwrap())) / (2.0 * h)
}

#[test]
fn solve_derivatives_match_closed_forms_and_finite_differences() -> qb::Result<()> {
    let b = qb::array([1.0, 2.0])?;
    // d/db sum(solve(a, b)) = solve(a^T, 1).
    let gb: Tensor = qb::grad(|b: Tensor| qb::linalg::solve(a(), &b)?.sum()).call(&b)?;
    let want = qb::linalg::solve(a().t()?, qb::ones([2])?)?;
    assert!(vals(&gb)
        .iter()
        .zip(vals(&want))
        .all(|(g, w)| (g - w).abs() < 1e-15));
    // d/da along a direction, both modes, first and second order.
    let f = |m: Tensor| qb::linalg::solve(&m, qb::array([1.0, 2.0])?)?.powi(2).sum();
    let dir = qb::array([[0.3, -0.1], [0.2, 0.5]])?;
    let fv = |m: &Tensor| f(m.clone()).unwrap().item().unwrap();
    let want = fd(&fv, &a(), &dir);
    let ga: Tensor = qb::grad(f).call(&a())?;
    let rev = ga.mul(&dir)?.sum()?.item()?;
    let (_, fwd) = qb::jvp(f, &a(), &dir)?;
    assert!((rev - want).abs() < 1e-8, "{rev} vs {want}");
    assert!((fwd.item()? - want).abs() < 1e-8);
    // Hessian-vector product (forward over reverse) against differences of the gradient.
    let g = |m: Tensor| qb::grad(f).call::<Tensor, Tensor>(&m);
    let (_, hv) = qb::jvp(g, &a(), &dir)?;
    let gd = |s: f64| g((&a() + dir.mul(s).unwrap()).unwrap()).unwrap();
    let fd_hv = ((gd(1e-6) - gd(-1e-6))?.div(2e-6))?;
    assert!(vals(&hv)
        .iter()
        .zip(vals(&fd_hv))
        .all(|(x, y)| (x - y).abs() < 1e-6));
    Ok(())
}

#[test]
fn cholesky_derivatives_match_finite_differences() -> qb::Result<()> {
    let spd = qb::array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])?;
    let w = qb::array([[1.0, 0.0, 0.0], [0.3, -2.0, 0.0], [0.7, 0.1, 1.5]])?;
    let f = move |m: Tensor| m.cholesky()?.mul(&w).sum();
    // A symmetric direction: cholesky reads the lower triangle of a symmetric matrix.
    let dir = qb::array([[0.2, 0.1, -0.3], [0.1, 0.4, 0.05], [-0.3, 0.05, -0.1]])?;
    let fv = |m: &Tensor| f(m.clone()).unwrap().item().unwrap();
    let want = fd(&fv, &spd, &dir);
    let g: Tensor = qb::grad(f.clone()).call(&spd)?;
    let rev = g.mul(&dir)?.sum()?.item()?;
    let (_, fwd) = qb::jvp(f.clone(), &spd, &dir)?;
    assert!((rev - want).abs() < 1e-8, "{rev} vs {want}");
    assert!(
        (fwd.item()? - want).abs() < 1e-8,
        "{} vs {want}",
        fwd.item()?
    );
    // Second order: reverse over reverse along the direction.
    let gfun = move |m: Tensor| {
        qb::grad(f.clone())
            .call::<Tensor, Tensor>(&m)?
            .mul(&dir)?
            .sum()
    };
    let h: Tensor = qb::grad(gfun.clone()).call(&spd)?;
    let dir2 = qb::array([[0.1, -0.2, 0.3], [-0.2, 0.2, 0.1], [0.3, 0.1, 0.05]])?;
    let gv = |m: &Tensor| gfun(m.clone()).unwrap().item().unwrap();
    let want2 = fd(&gv, &spd, &dir2);
    let got2 = h.mul(&dir2)?.sum()?.item()?;
    assert!((got2 - want2).abs() < 1e-6, "{got2} vs {want2}");
    Ok(())
}

#[test]
fn cholesky_third_derivatives_match_finite_differences() -> qb::Result<()> {
    // Third order differentiates `cholesky_ad`, the op of the first-order tangent.
    let spd = qb::array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])?;
    let w = qb::array([[1.0, 0.0, 0.0], [0.3, -2.0, 0.0], [0.7, 0.1, 1.5]])?;
    let d1 = qb::array([[0.2, 0.1, -0.3], [0.1, 0.4, 0.05], [-0.3, 0.05, -0.1]])?;
    let d2 = qb::array([[0.1, -0.2, 0.3], [-0.2, 0.2, 0.1], [0.3, 0.1, 0.05]])?;
    let d3 = qb::array([[-0.3, 0.2, 0.1], [0.2, 0.1, -0.4], [0.1, -0.4, 0.3]])?;
    let f = move |m: Tensor| m.cholesky()?.powi(2).mul(&w).sum();
    // Second directional derivative: forward (along d1) over reverse, dotted with d2.
    let second = move |m: Tensor| {
        let g = |m: Tensor| qb::grad(f.clone()).call::<Tensor, Tensor>(&m);
        let (_, hv) = qb::jvp(g, &m, &d1)?;
        hv.mul(&d2)?.sum()
    };
    let sv = |m: &Tensor| second.clone()(m.clone()).unwrap().item().unwrap();
    let want = fd(&sv, &spd, &d3);
    let g3: Tensor = qb::grad(second.clone()).call(&spd)?;
    let rev = g3.mul(&d3)?.sum()?.item()?;
    let (_, fwd) = qb::jvp(second.clone(), &spd, &d3)?;
    assert!(
        (rev - want).abs() < 1e-6 * (1.0 + want.abs()),
        "{rev} vs {want}"
    );
    let fwd = fwd.item()?;
    assert!(
        (fwd - want).abs() < 1e-6 * (1.0 + want.abs()),
        "{fwd} vs {want}"
    );
    Ok(())
}

#[test]
fn solve_and_cholesky_under_vmap_and_jit() -> qb::Result<()> {
    let mats = qb::stack(&[a(), a().mul(2.0)?, a().add(qb::eye(2)?)?], 0)?;
    let rhs = qb::array([1.0, 2.0])?;
    let batched: Tensor = qb::vmap(|(m, r): (Tensor, Tensor)| qb::linalg::solve(&m, &r))
        .in_axes(&[Some(0), None])
        .call(&(mats.clone(), rhs.clone()))?;
    let looped = qb::stack(
        &(0..3)
            .map(|i| qb::linalg::solve(mats.index(qb::s![i as isize])?, &rhs))
            .collect::<qb::Result<Vec<_>>>()?,
        0,
    )?;
    assert_eq!(vals(&batched), vals(&looped));
    let chol: Tensor = qb::vmap(|m: Tensor| m.cholesky()).call(&mats)?;
    let jitted = qb::jit(|m: Tensor| m.cholesky()).call(&mats)?;
    assert_eq!(vals(&chol), vals(&jitted));
    Ok(())
}
