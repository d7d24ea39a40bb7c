//! `linalg::expm`, `lu_factor`/`lu_solve` and `eigvalsh`, the compositions a port reaches for:
//! values against closed forms (diagonal, nilpotent and rotation generators), an independent
//! pivoted LU written here and `solve`; derivatives to third order against closed forms and
//! central differences; batches, `vmap`, `jit` and float32.

use qb::linalg;
use qb::testing::{check_grads, Modes};
use qb::Tensor;
use quabla as qb;

fn vals(t: &Tensor) -> Vec<f64> {
    t.astype(qb::F64).unwrap().to_vec::<f64>().unwrap()
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: {got:?} vs {want:?}"
        );
    }
}

fn rotation(theta: f64) -> Vec<f64> {
    vec![theta.cos(), -theta.sin(), theta.sin(), theta.cos()]
}

#[test]
fn expm_matches_closed_forms() -> qb::Result<()> {
    // Diagonal, small and large (the large ones need squarings).
    for d in [[-2.0f64, 0.5, 3.0], [50.0, -30.0, 0.0], [0.0, 0.0, 0.0]] {
        let a = qb::diag(qb::array(d)?).eval()?;
        let e = linalg::expm(&a)?;
        let want: Vec<f64> = (0..9)
            .map(|i| if i % 4 == 0 { d[i / 4].exp() } else { 0.0 })
            .collect();
        assert_close(&vals(&e), &want, 1e-13, "diagonal");
    }
    // Nilpotent: I + N + N²/2.
    let (a, b, c) = (0.7, -1.3, 2.1);
    let n = qb::array([[0.0, a, b], [0.0, 0.0, c], [0.0, 0.0, 0.0]])?;
    let want = [1.0, a, b + a * c / 2.0, 0.0, 1.0, c, 0.0, 0.0, 1.0];
    assert_close(&vals(&linalg::expm(&n)?), &want, 1e-15, "nilpotent");
    // Rotation generators at angles needing 0 to 8 squarings.
    for theta in [0.5f64, 3.0, 40.0, 1000.0] {
        let g = qb::array([[0.0, -theta], [theta, 0.0]])?;
        let tol = 1e-14 * theta.max(1.0);
        assert_close(&vals(&linalg::expm(&g)?), &rotation(theta), tol, "rotation");
    }
    // A batch, vmap and jit give the eager bits; exp(A) exp(-A) = I.
    let batch = qb::array([
        [[0.3, -1.2, 0.5], [2.0, 0.1, -0.7], [0.4, 0.9, -1.5]],
        [[8.0, 1.0, 0.0], [-3.0, 4.0, 2.0], [1.0, 1.0, -6.0]],
    ])?;
    let eager = linalg::expm(&batch)?;
    let jitted: Tensor = qb::jit(|a: Tensor| linalg::expm(&a)).call(&batch)?;
    let mapped: Tensor = qb::vmap(|a: Tensor| linalg::expm(&a)).call(&batch)?;
    assert_eq!(vals(&eager), vals(&jitted));
    assert_eq!(vals(&eager), vals(&mapped));
    let inverse = linalg::expm(batch.neg()?)?;
    let product = eager.matmul(&inverse)?;
    let eye: Vec<f64> = (0..18)
        .map(|i| if i % 9 % 4 == 0 { 1.0 } else { 0.0 })
        .collect();
    assert_close(&vals(&product), &eye, 1e-10, "exp(A) exp(-A)");
    // float32: the float64 result rounded once.
    let a32 = batch.astype(qb::F32)?;
    let e32 = linalg::expm(&a32)?;
    assert_eq!(e32.dtype(), qb::F32);
    let want32: Vec<f64> = vals(&linalg::expm(a32.astype(qb::F64)?)?)
        .iter()
        .map(|&v| f64::from(v as f32))
        .collect();
    assert_eq!(vals(&e32), want32);
    Ok(())
}

#[test]
fn expm_derivatives_to_third_order() -> qb::Result<()> {
    // trace(expm(θ G)) = 2 cos θ for the rotation generator: derivatives -2 sin, -2 cos, 2 sin.
    let g = qb::array([[0.0, -1.0], [1.0, 0.0]])?;
    let tr = |t: Tensor| qb::trace(linalg::expm(g.mul(&t)?)?).eval();
    for theta in [0.4f64, 2.5, 30.0] {
        let t = qb::array(theta)?;
        let d1: Tensor = qb::grad(tr).call(&t)?;
        let d2: Tensor = qb::grad(|t: Tensor| qb::grad(tr).call::<Tensor, Tensor>(&t)).call(&t)?;
        let d3: Tensor = qb::grad(|t: Tensor| {
            qb::grad(|t: Tensor| qb::grad(tr).call::<Tensor, Tensor>(&t)).call::<Tensor, Tensor>(&t)
        })
        .call(&t)?;
        let tol = 1e-11 * theta.max(1.0).powi(2);
        assert_close(&vals(&d1), &[-2.0 * theta.sin()], tol, "first");
        assert_close(&vals(&d2), &[-2.0 * theta.cos()], tol, "second");
        assert_close(&vals(&d3), &[2.0 * theta.sin()], tol, "third");
        // Forward mode: d/dθ expm(θG) = G expm(θG).
        let (e, de): (Tensor, Tensor) =
            qb::jvp_fn(|t: Tensor| linalg::expm(g.mul(&t)?)).call(&t, &qb::array(1.0)?)?;
        assert_close(&vals(&de), &vals(&g.matmul(&e)?), tol, "jvp");
        let jf: Tensor = qb::jacfwd(|t: Tensor| linalg::expm(g.mul(&t)?)).call(&t)?;
        let jr: Tensor = qb::jacrev(|t: Tensor| linalg::expm(g.mul(&t)?)).call(&t)?;
        assert_close(&vals(&jf), &vals(&de), tol, "jacfwd");
        assert_close(&vals(&jr), &vals(&de), tol, "jacrev");
    }
    // A general matrix, every mode to third order against central differences.
    let a = qb::array([[0.3, -1.2, 0.5], [2.0, 0.1, -0.7], [0.4, 0.9, -1.5]])?;
    check_grads(
        |x| Ok(vec![linalg::expm(&x[0])?]),
        std::slice::from_ref(&a),
        3,
        Modes::BOTH,
    )?;
    // With squarings in the derivative (|a| large enough for s = 3).
    check_grads(
        |x| Ok(vec![linalg::expm(x[0].mul(12.0)?)?]),
        &[a],
        2,
        Modes::BOTH,
    )?;
    Ok(())
}

/// Doolittle LU with partial pivoting (first row of largest magnitude), written out: `(lu,
/// piv)` as LAPACK stores them.
fn reference_lu(a: &[f64], n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut m = a.to_vec();
    let mut piv = Vec::new();
    for k in 0..n {
        let mut p = k;
        for i in k + 1..n {
            if m[i * n + k].abs() > m[p * n + k].abs() {
                p = i;
            }
        }
        piv.push(p as f64);
        for j in 0..n {
            m.swap(k * n + j, p * n + j);
        }
        for i in k + 1..n {
            let l = m[i * n + k] / m[k * n + k];
            m[i * n + k] = l;
            for j in k + 1..n {
                m[i * n + j] -= l * m[k * n + j];
            }
        }
    }
    (m, piv)
}

#[test]
fn lu_factor_and_lu_solve_match_references() -> qb::Result<()> {
    let a_rows = [
        [0.0, 2.0, 1.0, -1.0],
        [3.0, -1.0, 0.5, 2.0],
        [1.0, 4.0, -2.0, 0.0],
        [-2.0, 1.0, 3.0, 1.5],
    ];
    let a = qb::array(a_rows)?;
    let flat: Vec<f64> = a_rows.iter().flatten().copied().collect();
    let f = linalg::lu_factor(&a)?;
    let (lu, piv) = reference_lu(&flat, 4);
    assert_close(&vals(&f.lu), &lu, 1e-15, "lu");
    assert_eq!(vals(&f.piv), piv);
    let swapped = linalg::lu_factor(qb::array([[0.0, 1.0], [1.0, 0.0]])?)?;
    assert_eq!(vals(&swapped.piv), vec![1.0, 1.0]);
    // lu_solve against solve: vector and matrix right-hand sides, both transposes.
    let b = qb::array([1.0, -2.0, 0.5, 3.0])?;
    let bm = qb::array([[1.0, 0.0], [-2.0, 1.0], [0.5, 2.0], [3.0, -1.0]])?;
    for rhs in [&b, &bm] {
        let x = linalg::lu_solve(&f, rhs, false)?;
        assert_close(
            &vals(&x),
            &vals(&linalg::solve(&a, rhs)?),
            1e-13,
            "lu_solve",
        );
        let xt = linalg::lu_solve(&f, rhs, true)?;
        assert_close(
            &vals(&xt),
            &vals(&linalg::solve(a.t()?, rhs)?),
            1e-13,
            "trans",
        );
    }
    // A batch, jit and vmap; float32 in float64 rounded once.
    let batch = qb::stack(&[a.clone(), a.t()?], 0)?;
    let fb = linalg::lu_factor(&batch)?;
    let xb = linalg::lu_solve(&fb, &b, false)?;
    assert_eq!(xb.shape(), &[2, 4]);
    assert_close(
        &vals(&xb.index(qb::s![1])?),
        &vals(&linalg::solve(a.t()?, &b)?),
        1e-13,
        "batch",
    );
    let jitted: Tensor =
        qb::jit(|(a, b): (Tensor, Tensor)| linalg::lu_solve(&linalg::lu_factor(&a)?, &b, false))
            .call(&(batch.clone(), b.clone()))?;
    assert_eq!(vals(&jitted), vals(&xb));
    let mapped: Tensor = qb::vmap(|a: Tensor| Ok(linalg::lu_factor(&a)?.lu)).call(&batch)?;
    assert_eq!(vals(&mapped), vals(&fb.lu));
    let f32 = linalg::lu_factor(a.astype(qb::F32)?)?;
    assert_eq!(f32.lu.dtype(), qb::F32);
    let want: Vec<f64> = lu.iter().map(|&v| f64::from(v as f32)).collect();
    assert_eq!(vals(&f32.lu), want);
    Ok(())
}

#[test]
fn lu_and_eigvalsh_derivatives() -> qb::Result<()> {
    let a = qb::array([[0.5, 2.0, 1.0], [3.0, -1.0, 0.5], [1.0, 4.0, -2.0]])?;
    let b = qb::array([1.0, -2.0, 0.5])?;
    // Through the factorization and the solve, to second order, every mode.
    check_grads(
        |x| {
            let f = linalg::lu_factor(&x[0])?;
            Ok(vec![linalg::lu_solve(&f, &x[1], false)?, f.lu])
        },
        &[a.clone(), b.clone()],
        2,
        Modes::BOTH,
    )?;
    check_grads(
        |x| {
            Ok(vec![linalg::lu_solve(
                &linalg::lu_factor(&x[0])?,
                &x[1],
                true,
            )?])
        },
        &[a.clone(), b],
        1,
        Modes::BOTH,
    )?;
    // eigvalsh: the eigenvalues of eigh, and d(sum λ)/dA = I (the trace) even at a repeated
    // eigenvalue.
    let s = qb::array([[2.0, 1.0, 0.0], [1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])?;
    assert_eq!(
        vals(&linalg::eigvalsh(&s)?),
        vals(&linalg::eigh(&s)?.eigenvalues)
    );
    let g: Tensor = qb::grad(|m: Tensor| linalg::eigvalsh(&m)?.sum()).call(&s)?;
    assert_close(&vals(&g), &vals(&qb::eye(3)?), 1e-14, "d trace");
    let sym = |x: &Tensor| x.add(x.t()?)?.mul(0.5);
    check_grads(
        |x| Ok(vec![linalg::eigvalsh(sym(&x[0])?)?]),
        &[a],
        2,
        Modes::BOTH,
    )?;
    Ok(())
}
