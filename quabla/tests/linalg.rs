//! `qb::linalg::solve` and `cholesky`: values (acceptance E73, E76, E79), derivatives against
//! closed forms and finite differences (numerics.md §6.5), batching, and jit.

use qb::prelude::*;
use qb::testing::{check_grads, check_grads_with, Modes, Tolerance};
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

/// The symmetric part of a matrix: perturbations of `m` in any direction then stay symmetric,
/// which the Cholesky rules assume (they read the lower triangle of a symmetric matrix).
fn sym(m: &Tensor) -> qb::Result<Tensor> {
    (m + m.t()?)?.mul(0.5)
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
    // d/da and d/db, both modes, to second order (the Hessian-vector products included).
    let f = |v: Vec<Tensor>| Ok(vec![qb::linalg::solve(&v[0], &v[1])?.powi(2).sum()?]);
    check_grads(f, &[a(), b], 2, Modes::BOTH)
}

#[test]
fn cholesky_derivatives_match_finite_differences() -> qb::Result<()> {
    let spd = qb::array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])?;
    let w = qb::array([[1.0, 0.0, 0.0], [0.3, -2.0, 0.0], [0.7, 0.1, 1.5]])?;
    let f = move |v: Vec<Tensor>| Ok(vec![sym(&v[0])?.cholesky()?.mul(&w).sum()?]);
    check_grads(f, &[spd], 2, Modes::BOTH)
}

#[test]
fn cholesky_third_derivatives_match_finite_differences() -> qb::Result<()> {
    // Third order differentiates `cholesky_ad`, the op of the first-order tangent.
    let spd = qb::array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])?;
    let w = qb::array([[1.0, 0.0, 0.0], [0.3, -2.0, 0.0], [0.7, 0.1, 1.5]])?;
    let f = move |v: Vec<Tensor>| Ok(vec![sym(&v[0])?.cholesky()?.powi(2).mul(&w).sum()?]);
    let tolerance = Tolerance {
        growth: 10.0,
        ..Tolerance::default()
    };
    check_grads_with(f, &[spd], 3, Modes::BOTH, tolerance, 3)
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
