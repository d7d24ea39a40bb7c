//! Acceptance E73-E82 (spec acceptance.md §10) through the facade: `qb::linalg` and
//! `qb::newton`, eagerly and under `grad`, `jit`, `vmap` and `jvp`.

use qb::prelude::*;
use qb::{Error, Tensor};
use quabla as qb;

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

fn close(got: &[f64], want: &[f64], rtol: f64) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= rtol * w.abs().max(1e-300) + 1e-14,
            "{got:?} vs {want:?}"
        );
    }
}

fn a() -> Tensor {
    qb::array([[4.0, 1.0], [1.0, 3.0]]).unwrap()
}

fn b() -> Tensor {
    qb::array([1.0, 2.0]).unwrap()
}

fn m32() -> Tensor {
    qb::array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]).unwrap()
}

/// The largest absolute difference between two tensors of one shape.
fn max_diff(x: &Tensor, y: &Tensor) -> f64 {
    assert_eq!(x.shape(), y.shape());
    vals(x)
        .iter()
        .zip(vals(y))
        .map(|(p, q)| (p - q).abs())
        .fold(0.0, f64::max)
}

#[test]
fn e73_dense_basics() -> qb::Result<()> {
    close(
        &vals(&qb::linalg::solve(a(), b())?),
        &[1.0 / 11.0, 7.0 / 11.0],
        1e-14,
    );
    close(&vals(&qb::linalg::det(a())?), &[11.0], 1e-14);
    let sd = qb::linalg::slogdet(a())?;
    assert_eq!(sd.sign.item()?, 1.0);
    close(&[sd.logabsdet.item()?], &[11f64.ln()], 1e-14);
    let w = qb::linalg::eigh(a())?.eigenvalues;
    let r5 = 5f64.sqrt();
    close(&vals(&w), &[(7.0 - r5) / 2.0, (7.0 + r5) / 2.0], 1e-14);
    Ok(())
}

/// Each column of `m` has a positive largest-magnitude entry (the first on ties).
fn columns_follow_sign_rule(m: &Tensor) {
    let (rows, cols) = (m.shape()[0], m.shape()[1]);
    let v = vals(m);
    for j in 0..cols {
        let mut best = 0usize;
        for i in 0..rows {
            if v[i * cols + j].abs() > v[best * cols + j].abs() + 1e-12 {
                best = i;
            }
        }
        assert!(v[best * cols + j] > 0.0, "column {j} of {v:?}");
    }
}

#[test]
fn e74_qr_and_svd_shapes_and_sign_rules() -> qb::Result<()> {
    let qr = qb::linalg::qr(m32()).eval()?;
    let svd = qb::linalg::svd(m32()).eval()?;
    assert_eq!(qr.q.shape(), &[3, 2]);
    assert_eq!(qr.r.shape(), &[2, 2]);
    assert_eq!(svd.u.shape(), &[3, 2]);
    assert_eq!(svd.s.shape(), &[2]);
    assert_eq!(svd.vh.shape(), &[2, 2]);
    let complete = qb::linalg::qr(m32()).mode("complete").eval()?;
    assert_eq!(complete.q.shape(), &[3, 3]);
    assert_eq!(qb::linalg::qr(m32()).mode("r").eval_r()?.shape(), &[2, 2]);
    assert_eq!(qb::linalg::svd(m32()).eval_s()?.shape(), &[2]);
    let r = vals(&qr.r);
    assert!(r[0] >= 0.0 && r[3] >= 0.0, "diag(R) >= 0: {r:?}");
    let s = vals(&svd.s);
    assert!(s[0] >= s[1]);
    columns_follow_sign_rule(&svd.u);
    columns_follow_sign_rule(&qb::linalg::eigh(a())?.eigenvectors);
    assert!(max_diff(&qr.q.matmul(&qr.r)?, &m32()) < 1e-12);
    let usv = (&svd.u * svd.s.reshape([1, 2])?)?.matmul(&svd.vh)?;
    assert!(max_diff(&usv, &m32()) < 1e-12);
    Ok(())
}

#[test]
fn e75_least_squares() -> qb::Result<()> {
    let x = qb::linalg::lstsq(
        qb::array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])?,
        qb::array([1.0, 2.0, 2.0])?,
    )
    .eval()?;
    close(&vals(&x), &[7.0 / 6.0, 0.5], 1e-13);
    Ok(())
}

#[test]
fn e76_batched_right_hand_sides() -> qb::Result<()> {
    let stack = qb::stack(&[a(), a().mul(2.0)?], 0)?;
    assert_eq!(qb::linalg::solve(&stack, b())?.shape(), &[2, 2]);
    assert_eq!(
        qb::linalg::solve(&stack, qb::ones([2, 2, 3])?)?.shape(),
        &[2, 2, 3]
    );
    Ok(())
}

#[test]
fn e77_decomposition_derivatives() -> qb::Result<()> {
    let g: Tensor = qb::grad(|m: Tensor| Ok(qb::linalg::slogdet(&m)?.logabsdet)).call(&a())?;
    close(
        &vals(&g),
        &[3.0 / 11.0, -1.0 / 11.0, -1.0 / 11.0, 4.0 / 11.0],
        1e-13,
    );
    let g: Tensor =
        qb::grad(|m: Tensor| qb::linalg::eigh(&m)?.eigenvalues.powi(2).sum()).call(&a())?;
    close(&vals(&g), &[8.0, 2.0, 2.0, 6.0], 1e-13);
    Ok(())
}

#[test]
fn e78_norms() -> qb::Result<()> {
    close(
        &[qb::linalg::norm(a()).ord("fro").eval()?.item()?],
        &[27f64.sqrt()],
        1e-15,
    );
    assert_eq!(qb::linalg::norm(b()).ord(1).eval()?.item()?, 3.0);
    Ok(())
}

#[test]
fn e79_singular_matrices() -> qb::Result<()> {
    let s = qb::array([[1.0, 2.0], [2.0, 4.0]])?;
    let err = qb::linalg::solve(&s, b()).unwrap_err();
    assert!(matches!(err, Error::Singular { .. }), "{err:?}");
    assert!(err.to_string().contains("matrix is singular"));
    let sd = qb::linalg::slogdet(&s)?;
    assert_eq!(sd.sign.item()?, 0.0);
    assert_eq!(sd.logabsdet.item()?, f64::NEG_INFINITY);
    assert_eq!(qb::linalg::det(&s)?.item()?, 0.0);
    let err = qb::grad(|m: Tensor| Ok(qb::linalg::slogdet(&m)?.logabsdet))
        .call::<Tensor, Tensor>(&s)
        .unwrap_err();
    assert!(matches!(err, Error::Singular { .. }), "{err:?}");
    Ok(())
}

/// The 1-D Laplacian `k (2 x_i - x_{i-1} - x_{i+1})` with zero boundary values.
fn laplacian(x: &Tensor, args: &[Tensor]) -> qb::Result<Tensor> {
    let n = x.shape()[0] as isize;
    let zero = qb::zeros([1])?;
    let left = qb::concat(&[&zero, &x.index(qb::s![0..n - 1])?], 0)?;
    let right = qb::concat(&[&x.index(qb::s![1..n])?, &zero], 0)?;
    &args[0] * ((x.mul(2.0)? - left)? - right)?
}

#[test]
fn e80_conjugate_gradients() -> qb::Result<()> {
    let k = qb::array(1.0)?;
    let (x, info) = qb::linalg::cg(laplacian, &qb::ones([8])?)
        .args(&[&k])
        .eval_with_info()?;
    close(
        &vals(&x),
        &[4.0, 7.0, 9.0, 10.0, 10.0, 9.0, 7.0, 4.0],
        1e-12,
    );
    assert_eq!(info.iterations.item()?, 4.0);
    assert!(info.residual_norm.item()? <= 1e-12);
    assert!(info.success.item_bool()?);
    Ok(())
}

fn total(k: &Tensor) -> qb::Result<Tensor> {
    qb::linalg::cg(laplacian, &qb::ones([8])?)
        .args(&[k])
        .tol(1e-10)
        .eval()?
        .sum()
}

#[test]
fn e81_implicit_differentiation_jit_and_vmap_of_cg() -> qb::Result<()> {
    let k = qb::array(2.0)?;
    let g: Tensor = qb::grad(|k: Tensor| total(&k)).call(&k)?;
    close(&[g.item()?], &[-15.0], 1e-8);
    let jg: Tensor =
        qb::jit(|k: Tensor| qb::grad(|k: Tensor| total(&k)).call::<Tensor, Tensor>(&k)).call(&k)?;
    close(&[jg.item()?], &[-15.0], 1e-8);
    let v: Tensor = qb::vmap(|k: Tensor| total(&k)).call(&qb::array([1.0, 2.0])?)?;
    close(&vals(&v), &[60.0, 30.0], 1e-8);
    let err = qb::jvp(|k: Tensor| total(&k), &k, &qb::array(1.0)?).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    Ok(())
}

fn root(p: &Tensor) -> qb::Result<Tensor> {
    let cube = |x: &Tensor, args: &[Tensor]| x.powi(3)? - &args[0];
    qb::newton(cube, &qb::array([1.0, 1.0])?).args(&[p]).eval()
}

#[test]
fn e82_newton_with_implicit_gradients() -> qb::Result<()> {
    let p = qb::array([8.0, 27.0])?;
    close(&vals(&root(&p)?), &[2.0, 3.0], 1e-7);
    let g: Tensor = qb::grad(|p: Tensor| root(&p)?.sum()).call(&p)?;
    close(
        &vals(&g),
        &[
            1.0 / (3.0 * 8f64.powf(2.0 / 3.0)),
            1.0 / (3.0 * 27f64.powf(2.0 / 3.0)),
        ],
        1e-7,
    );
    Ok(())
}
