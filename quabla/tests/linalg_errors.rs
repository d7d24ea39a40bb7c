//! Bad input to `qb::linalg` and `qb::newton`: each case a typed error with its message, or the
//! IEEE result the spec (or docs/linalg.md, where the spec leaves it open) names. Never a panic
//! and never a hang.

use qb::linalg::Ord;
use qb::prelude::*;
use qb::{Error, Tensor};
use quabla as qb;

fn t(dims: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_vec(dims, v.to_vec()).unwrap()
}

fn spd() -> Tensor {
    t(&[2, 2], &[4.0, 1.0, 1.0, 3.0])
}

fn shape_message(e: Error) -> String {
    match e {
        Error::Shape { message, .. } => message,
        other => panic!("expected a shape error, got {other:?}"),
    }
}

fn invalid_message(e: Error) -> String {
    match e {
        Error::InvalidArgument { message } => message,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn non_square_and_wrong_rank_inputs_are_shape_errors() {
    let rect = qb::ones([2, 3]).unwrap();
    for (name, e) in [
        ("det", qb::linalg::det(&rect).unwrap_err()),
        ("inv", qb::linalg::inv(&rect).unwrap_err()),
        ("cholesky", qb::linalg::cholesky(&rect).unwrap_err()),
        ("slogdet", qb::linalg::slogdet(&rect).unwrap_err()),
        ("eigh", qb::linalg::eigh(&rect).unwrap_err()),
        (
            "matrix_power",
            qb::linalg::matrix_power(&rect, 2).unwrap_err(),
        ),
    ] {
        assert_eq!(
            shape_message(e),
            format!("{name} expects square matrices of shape [..., n, n], got [2, 3]")
        );
    }
    let vector = qb::ones([3]).unwrap();
    assert_eq!(
        shape_message(qb::linalg::qr(&vector).eval().unwrap_err()),
        "qr expects matrices of shape [..., m, n], got [3]"
    );
    assert_eq!(
        shape_message(qb::linalg::svd(&vector).eval().unwrap_err()),
        "svd expects matrices of shape [..., m, n], got [3]"
    );
    assert_eq!(
        shape_message(qb::linalg::cholesky(&vector).unwrap_err()),
        "cholesky expects square matrices of shape [..., n, n], got [3]"
    );
    let scalar = qb::array(1.0).unwrap();
    assert!(shape_message(qb::linalg::solve(spd(), &scalar).unwrap_err()).contains("rank-0"));
    assert_eq!(
        shape_message(qb::linalg::solve(spd(), qb::ones([3]).unwrap()).unwrap_err()),
        "solve: matrix has 2 rows but the right-hand side has 3"
    );
    assert_eq!(
        shape_message(
            qb::linalg::lstsq(qb::ones([3, 2]).unwrap(), qb::ones([2]).unwrap())
                .eval()
                .unwrap_err()
        ),
        "lstsq: matrix has 3 rows but the right-hand side has 2"
    );
}

#[test]
fn mismatched_batches_are_shape_errors() {
    let a = qb::ones([2, 3, 3])
        .unwrap()
        .add(qb::eye(3).unwrap())
        .unwrap();
    let e = qb::linalg::solve(&a, qb::ones([4, 3, 1]).unwrap()).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e:?}");
    let e = qb::linalg::solve_triangular(&a, qb::ones([4, 3, 2]).unwrap())
        .eval()
        .unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e:?}");
    // Broadcasting batch axes is fine.
    let x = qb::linalg::solve(&a, qb::ones([1, 3, 2]).unwrap()).unwrap();
    assert_eq!(x.shape(), &[2, 3, 2]);
}

#[test]
fn dtypes_are_checked() {
    let e = qb::linalg::solve(
        spd(),
        qb::ones([2]).unwrap().astype(qb::DType::F32).unwrap(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::DtypeMismatch { .. }), "{e:?}");
    let flags = qb::ones([2, 2]).unwrap().greater(0.0).unwrap();
    let e = qb::linalg::det(&flags).unwrap_err();
    assert!(matches!(e, Error::BoolOperand { .. }), "{e:?}");
}

#[test]
fn invalid_options_are_value_errors() {
    assert_eq!(
        invalid_message(qb::linalg::qr(spd()).mode("full").eval().unwrap_err()),
        "qr mode must be \"reduced\", \"complete\" or \"r\", got \"full\""
    );
    assert_eq!(
        invalid_message(
            qb::linalg::solve_triangular(spd(), qb::ones([2]).unwrap())
                .trans(2)
                .eval()
                .unwrap_err()
        ),
        "solve_triangular trans must be 0, 1, \"N\" or \"T\", got 2"
    );
    assert!(invalid_message(
        qb::linalg::solve_triangular(spd(), qb::ones([2]).unwrap())
            .trans("C")
            .eval()
            .unwrap_err()
    )
    .contains("\"C\""));
    assert!(
        invalid_message(qb::linalg::qr(spd()).mode("r").eval().unwrap_err()).contains("eval_r")
    );
    assert!(
        invalid_message(qb::linalg::pinv(spd()).rtol(-1.0).eval().unwrap_err()).contains("rtol")
    );
    let e = qb::linalg::cg(
        |x: &Tensor, _: &[Tensor]| Ok(x.clone()),
        &qb::ones([2]).unwrap(),
    )
    .tol(0.0)
    .eval()
    .unwrap_err();
    assert_eq!(invalid_message(e), "tol must be a finite positive number");
    let e = qb::linalg::gmres(
        |x: &Tensor, _: &[Tensor]| Ok(x.clone()),
        &qb::ones([2]).unwrap(),
    )
    .restart(0)
    .eval()
    .unwrap_err();
    assert_eq!(invalid_message(e), "gmres: restart must be at least 1");
}

#[test]
fn invalid_norm_orders_say_why() {
    let v = qb::ones([3]).unwrap();
    let m = qb::ones([2, 2]).unwrap();
    let r3 = qb::ones([2, 2, 2]).unwrap();
    let msg = |e: qb::Result<Tensor>| invalid_message(e.unwrap_err());
    assert_eq!(
        msg(qb::linalg::norm(&v).ord("fro").eval()),
        "norm: unknown ord \"fro\" for a vector norm (an int axis, or a rank-1 array without axis); vector norms take a real number, inf or -inf"
    );
    assert!(msg(qb::linalg::norm(&v).ord(Ord::Nuc).eval())
        .contains("unknown ord \"nuc\" for a vector norm"));
    assert_eq!(
        msg(qb::linalg::norm(&m).ord(0).eval()),
        "norm: unknown ord 0 for a matrix norm (a pair of axes, or a rank-2 array without axis); matrix norms take \"fro\", \"nuc\", 1, -1, 2, -2, inf or -inf"
    );
    assert!(msg(qb::linalg::norm(&m).ord(3).eval()).contains("unknown ord 3 for a matrix norm"));
    assert_eq!(
        msg(qb::linalg::norm(&r3).ord(1).eval()),
        "norm: ord 1 needs a vector or a matrix norm, but the array has rank 3 and no axis was given; pass axis (an int or a pair of axes), or omit ord for the 2-norm of the flattened array"
    );
    assert!(msg(qb::linalg::norm(&m).ord("max").eval()).contains("unknown ord \"max\""));
    // Without ord, any rank is the 2-norm of the flattened array.
    assert!((qb::linalg::norm(&r3).eval().unwrap().item().unwrap() - 8f64.sqrt()).abs() < 1e-15);
    assert!(matches!(
        qb::linalg::norm(&m).axis([0, 0]).eval().unwrap_err(),
        Error::Shape { .. } | Error::InvalidArgument { .. }
    ));
    assert!(qb::linalg::norm(&m).axis(2).eval().is_err());
}

#[test]
fn singular_matrices() -> qb::Result<()> {
    let s = t(&[2, 2], &[1.0, 2.0, 2.0, 4.0]);
    assert!(matches!(
        qb::linalg::inv(&s).unwrap_err(),
        Error::Singular { .. }
    ));
    assert!(matches!(
        qb::linalg::matrix_power(&s, -1).unwrap_err(),
        Error::Singular { .. }
    ));
    let sd = qb::linalg::slogdet(&s)?;
    assert_eq!(
        (sd.sign.item()?, sd.logabsdet.item()?),
        (0.0, f64::NEG_INFINITY)
    );
    // docs/linalg.md: the derivative of det at a singular matrix raises like slogdet's.
    let e = qb::grad(|m: Tensor| qb::linalg::det(&m))
        .call::<Tensor, Tensor>(&s)
        .unwrap_err();
    assert!(matches!(e, Error::Singular { .. }), "{e:?}");
    // A singular solve under jit raises when the plan runs.
    let e: Error = qb::jit(|m: Tensor| qb::linalg::solve(&m, qb::ones([2])?))
        .call(&s)
        .map(|_: Tensor| ())
        .unwrap_err();
    assert!(matches!(e, Error::Singular { .. }), "{e:?}");
    Ok(())
}

#[test]
fn cholesky_of_indefinite_and_non_symmetric_input() -> qb::Result<()> {
    // docs/linalg.md: only the lower triangle is read; a lower triangle that is not positive
    // definite gives an all-NaN factor, never an error.
    let indefinite = t(&[2, 2], &[1.0, 2.0, 2.0, 1.0]);
    let l = qb::linalg::cholesky(&indefinite)?.to_vec::<f64>()?;
    assert!(l.iter().all(|v| v.is_nan()), "{l:?}");
    let non_sym = t(&[2, 2], &[4.0, 100.0, 1.0, 3.0]);
    let l = qb::linalg::cholesky(&non_sym)?.to_vec::<f64>()?;
    let want = qb::linalg::cholesky(spd())?.to_vec::<f64>()?;
    assert_eq!(l, want);
    // Its derivative is that of the lower triangle: the strict upper triangle gets zero.
    let g: Tensor = qb::grad(|m: Tensor| qb::linalg::cholesky(&m)?.sum()).call(&non_sym)?;
    assert_eq!(g.to_vec::<f64>()?[1], 0.0);
    Ok(())
}

#[test]
fn non_finite_input_gives_nan_not_a_panic() -> qb::Result<()> {
    let bad = t(&[2, 2], &[1.0, f64::NAN, 0.5, 2.0]);
    let inf = t(&[2, 2], &[1.0, f64::INFINITY, 0.5, 2.0]);
    for m in [&bad, &inf] {
        let sd = qb::linalg::slogdet(m)?;
        assert!(sd.sign.item()?.is_nan() && sd.logabsdet.item()?.is_nan());
        assert!(qb::linalg::det(m)?.item()?.is_nan());
        let e = qb::linalg::eigh(m)?;
        assert!(e.eigenvalues.to_vec::<f64>()?.iter().all(|v| v.is_nan()));
        let f = qb::linalg::svd(m).eval()?;
        assert!(f.s.to_vec::<f64>()?.iter().all(|v| v.is_nan()));
        let f = qb::linalg::qr(m).eval()?;
        assert!(f.r.to_vec::<f64>()?.iter().any(|v| v.is_nan()));
        let lower_bad = t(&[2, 2], &[1.0, 0.0, f64::NAN, 2.0]);
        assert!(qb::linalg::cholesky(&lower_bad)?
            .to_vec::<f64>()?
            .iter()
            .all(|v| v.is_nan()));
        assert!(qb::linalg::solve(m, qb::ones([2])?)?
            .to_vec::<f64>()?
            .iter()
            .any(|v| v.is_nan()));
    }
    // An iterative solver with a NaN operator stops at once: eagerly an error, traced a failed
    // info.
    let nan_op = |x: &Tensor, _: &[Tensor]| x.mul(f64::NAN);
    let e = qb::linalg::cg(nan_op, &qb::ones([3])?).eval().unwrap_err();
    assert!(
        matches!(e, Error::NotConverged { solver: "cg", .. }),
        "{e:?}"
    );
    let e = qb::linalg::gmres(nan_op, &qb::ones([3])?)
        .eval()
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotConverged {
                solver: "gmres",
                ..
            }
        ),
        "{e:?}"
    );
    let nan_b = qb::array([1.0, f64::NAN, 0.0])?;
    let e = qb::linalg::cg(|x: &Tensor, _: &[Tensor]| Ok(x.clone()), &nan_b)
        .eval()
        .unwrap_err();
    assert!(
        matches!(e, Error::NotConverged { solver: "cg", .. }),
        "{e:?}"
    );
    let e = qb::newton(|x: &Tensor, _: &[Tensor]| x.mul(f64::NAN), &qb::ones([2])?)
        .eval()
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotConverged {
                solver: "newton",
                ..
            }
        ),
        "{e:?}"
    );
    let ok: Tensor = qb::jit(|b: Tensor| {
        Ok(
            qb::linalg::cg(|x: &Tensor, _: &[Tensor]| x.mul(f64::NAN), &b)
                .eval_with_info()?
                .1
                .success,
        )
    })
    .call(&qb::ones([3])?)?;
    assert!(!ok.item_bool()?);
    Ok(())
}

#[test]
fn non_convergence_is_not_converged_eagerly_and_a_failed_info_traced() -> qb::Result<()> {
    let d = t(&[4], &[1.0, 10.0, 100.0, 1000.0]);
    let mv = |x: &Tensor, args: &[Tensor]| x * &args[0];
    let e = qb::linalg::cg(mv, &qb::ones([4])?)
        .args(&[&d])
        .maxiter(1)
        .tol(1e-12)
        .eval()
        .unwrap_err();
    match &e {
        Error::NotConverged {
            solver, iterations, ..
        } => assert_eq!((*solver, *iterations), ("cg", 1)),
        other => panic!("{other:?}"),
    }
    assert!(e
        .to_string()
        .starts_with("cg did not converge after 1 iterations (residual norm "));
    let info: Tensor = qb::jit(|d: Tensor| {
        let (_, info) = qb::linalg::cg(mv, &qb::ones([4])?)
            .args(&[&d])
            .maxiter(1)
            .tol(1e-12)
            .eval_with_info()?;
        qb::stack(&[info.iterations, info.success.astype(qb::DType::F64)?], 0)
    })
    .call(&d)?;
    assert_eq!(info.to_vec::<f64>()?, [1.0, 0.0]);
    let e = qb::linalg::gmres(mv, &qb::ones([4])?)
        .args(&[&d])
        .restart(1)
        .maxiter(2)
        .tol(1e-12)
        .eval()
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("gmres did not converge after 2 Arnoldi steps"),
        "{e}"
    );
    // newton: a singular Jacobian, and too few iterations.
    let e = qb::newton(
        |x: &Tensor, _: &[Tensor]| x.mul(0.0)?.add(1.0),
        &qb::ones([2])?,
    )
    .eval()
    .unwrap_err();
    assert!(e.to_string().ends_with("the Jacobian is singular"), "{e}");
    let e = qb::newton(
        |x: &Tensor, _: &[Tensor]| x.exp()?.sub(2.0),
        &qb::zeros([1])?,
    )
    .maxiter(1)
    .eval()
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("newton did not converge after 1 iterations (residual norm ")
            && e.to_string().ends_with("increase maxiter or improve x0"),
        "{e}"
    );
    Ok(())
}

#[test]
fn solver_contracts() -> qb::Result<()> {
    let b = qb::ones([3])?;
    let e = qb::linalg::cg(|x: &Tensor, _: &[Tensor]| x.index(qb::s![0..2]), &b)
        .eval()
        .unwrap_err();
    assert!(shape_message(e).contains("matvec returned shape [2]"));
    let e = qb::linalg::cg(|x: &Tensor, _: &[Tensor]| x.astype(qb::DType::F32), &b)
        .eval()
        .unwrap_err();
    assert!(matches!(e, Error::Type { .. }), "{e:?}");
    let e = qb::linalg::cg(|x: &Tensor, _: &[Tensor]| Ok(x.clone()), &b)
        .x0(&qb::ones([4])?)
        .eval()
        .unwrap_err();
    assert!(shape_message(e).contains("x0 has shape [4]"));
    // TF5: not inside a loop body.
    let e = qb::jit(|b: Tensor| {
        qb::fori_loop(
            0,
            2,
            |_, x: Tensor, _: &[Tensor]| {
                qb::linalg::cg(|v: &Tensor, _: &[Tensor]| Ok(v.clone()), &x).eval()
            },
            &b,
        )
        .eval()
    })
    .call(&b)
    .map(|_: Tensor| ())
    .unwrap_err();
    assert!(invalid_message(e).contains("cannot be called inside a"));
    // b = 0 returns zeros after 0 iterations.
    let (x, info) = qb::linalg::cg(|v: &Tensor, _: &[Tensor]| Ok(v.clone()), &qb::zeros([3])?)
        .eval_with_info()?;
    assert_eq!(x.to_vec::<f64>()?, [0.0; 3]);
    assert_eq!(info.iterations.item()?, 0.0);
    Ok(())
}

#[test]
fn extra_columns_of_full_factors_follow_tf11() -> qb::Result<()> {
    let tall = t(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.5]);
    // Reverse mode: a cotangent on the extra column is an error, whatever its values.
    let e = qb::grad(|m: Tensor| qb::linalg::qr(&m).mode("complete").eval()?.q.sum())
        .call::<Tensor, Tensor>(&tall)
        .unwrap_err();
    assert_eq!(
        invalid_message(e),
        "derivatives of the extra columns of qr(mode=\"complete\") are not unique"
    );
    let e = qb::grad(|m: Tensor| qb::linalg::svd(&m).full_matrices(true).eval()?.u.sum())
        .call::<Tensor, Tensor>(&tall)
        .unwrap_err();
    assert!(invalid_message(e).contains("svd(full_matrices=True)"));
    // R of the complete mode, and the leading columns, differentiate like the reduced factors.
    let lead = |m: Tensor| {
        let f = qb::linalg::qr(&m).mode("complete").eval()?;
        (f.q.index(qb::s![.., 0..2])?.sum()? + f.r.sum()?)?.reshape(Vec::<isize>::new())
    };
    let reduced = |m: Tensor| {
        let f = qb::linalg::qr(&m).eval()?;
        f.q.sum()? + f.r.sum()?
    };
    let g1: Tensor = qb::grad(lead).call(&tall)?;
    let g2: Tensor = qb::grad(reduced).call(&tall)?;
    for (p, q) in g1.to_vec::<f64>()?.iter().zip(g2.to_vec::<f64>()?) {
        assert!((p - q).abs() < 1e-12);
    }
    // Forward mode: NaN tangents on the extra column only.
    let dir = qb::ones([3, 2])?;
    let (_, dq): (Tensor, Tensor) = qb::jvp(
        |m: Tensor| Ok(qb::linalg::qr(&m).mode("complete").eval()?.q),
        &tall,
        &dir,
    )?;
    let dq = dq.to_vec::<f64>()?;
    for (i, v) in dq.iter().enumerate() {
        assert_eq!(v.is_nan(), i % 3 == 2, "{dq:?}");
    }
    Ok(())
}

#[test]
fn degenerate_spectra() -> qb::Result<()> {
    // Repeated eigenvalues: the eigenvalue derivatives stay finite (numerics.md §6.5).
    let eye = qb::eye(3)?.mul(2.0)?;
    let g: Tensor =
        qb::grad(|m: Tensor| qb::linalg::eigh(&m)?.eigenvalues.powi(2).sum()).call(&eye)?;
    assert_eq!(g.to_vec::<f64>()?, eye.mul(2.0)?.to_vec::<f64>()?);
    // Coinciding singular values: F is 0 there, so the vector derivatives are finite.
    let g: Tensor =
        qb::grad(|m: Tensor| (qb::linalg::svd(&m).eval()?.u * qb::eye(3)?)?.sum()).call(&eye)?;
    assert!(g.to_vec::<f64>()?.iter().all(|v| v.is_finite()));
    // eigh reads the symmetric part of a non-symmetric matrix.
    let a = t(&[2, 2], &[4.0, 3.0, -1.0, 3.0]);
    let s = t(&[2, 2], &[4.0, 1.0, 1.0, 3.0]);
    assert_eq!(
        qb::linalg::eigh(&a)?.eigenvalues.to_vec::<f64>()?,
        qb::linalg::eigh(&s)?.eigenvalues.to_vec::<f64>()?
    );
    Ok(())
}

#[test]
fn float32_inputs_give_float32_results() -> qb::Result<()> {
    let a = spd().astype(qb::DType::F32)?;
    let b = qb::ones([2])?.astype(qb::DType::F32)?;
    let x = qb::linalg::solve(&a, &b)?;
    assert_eq!(x.dtype(), qb::DType::F32);
    let want = [2.0f32 / 11.0, 3.0 / 11.0];
    for (g, w) in x.to_vec::<f32>()?.iter().zip(want) {
        assert!((g - w).abs() < 1e-6);
    }
    assert_eq!(qb::linalg::eigh(&a)?.eigenvectors.dtype(), qb::DType::F32);
    assert_eq!(qb::linalg::svd(&a).eval_s()?.dtype(), qb::DType::F32);
    assert_eq!(
        qb::linalg::norm(&a).ord(Ord::Nuc).eval()?.dtype(),
        qb::DType::F32
    );
    let p = qb::linalg::pinv(&a).eval()?;
    assert_eq!(p.dtype(), qb::DType::F32);
    Ok(())
}
