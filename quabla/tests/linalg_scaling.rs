//! Every decomposition at extreme scales: a matrix scaled by `c = 2^k` (exactly, so `c A` is
//! the scaled matrix itself) must give the factors of `A` scaled by the closed-form rule
//! (singular values, eigenvalues and `R` by `c`, the Cholesky factor by `sqrt(c)`, solutions by
//! `1/c`, `log|det|` by `n ln c`, norms by `c`; orthogonal factors unchanged), for `c` near
//! `1e±300`, `1e±150` and a scale that makes every entry subnormal. Before, the SVD of
//! `1e300 * ones([3, 2])` was all NaN and at `1e-300` silently wrong, and solves of subnormal
//! matrices met zero pivots (docs/linalg.md).

use qb::linalg as la;
use qb::Tensor;
use quabla as qb;

/// The scales: about 1e300, 1e-300, 1e150, 1e-150, and 2^-1060 (every entry below subnormal
/// entries of the matrices below are about 2^-1058: subnormal).
const SCALES: [i32; 5] = [996, -996, 498, -498, -1060];

fn pow2(k: i32) -> f64 {
    // In two steps: 2^-1060 is below the smallest normal number.
    2f64.powi(k / 2) * 2f64.powi(k - k / 2)
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

/// `got` equals `want * factor` to `rtol` of the largest magnitude of `want` (the factors'
/// accuracy is relative to the matrix's norm), or to a few units of the last place of a
/// subnormal result (which has only that many).
fn check_scaled(what: &str, k: i32, got: &Tensor, want: &Tensor, factor: f64, rtol: f64) {
    let (g, w) = (values(got), values(want));
    assert_eq!(g.len(), w.len(), "{what} at 2^{k}");
    let size = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let quantum = 4.0 * f64::from_bits(1);
    for (i, (g, w)) in g.iter().zip(&w).enumerate() {
        let back = g / factor;
        let tolerance = rtol * size + quantum / factor.abs();
        assert!(
            (back - w).abs() <= tolerance,
            "{what} at 2^{k}, element {i}: {g:e} / {factor:e} = {back} vs {w}"
        );
    }
}

fn matrices() -> (Tensor, Tensor, Tensor, Tensor) {
    let spd = qb::array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.25], [0.5, 0.25, 2.0]]).unwrap();
    let rect = qb::array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.5]]).unwrap();
    let lower = qb::array([[2.0, 0.0, 0.0], [1.0, 3.0, 0.0], [-1.0, 0.5, 4.0]]).unwrap();
    let rhs = qb::array([[1.0], [2.0], [3.0]]).unwrap();
    (spd, rect, lower, rhs)
}

#[test]
fn svd_of_a_huge_matrix_of_ones_is_finite() -> qb::Result<()> {
    let s = la::svd(qb::ones([3, 2])?.mul(1e300)?).eval_s()?;
    let s = values(&s);
    assert!(
        (s[0] - 6f64.sqrt() * 1e300).abs() <= 1e-15 * 6f64.sqrt() * 1e300,
        "{s:?}"
    );
    assert!(s[1].abs() <= 1e-15 * 1e300, "{s:?}");
    Ok(())
}

#[test]
fn decompositions_scale_with_the_matrix() -> qb::Result<()> {
    let (spd, rect, _, _) = matrices();
    let svd = la::svd(&rect).eval()?;
    let eigh = la::eigh(&spd)?;
    let qr = la::qr(&rect).eval()?;
    let chol = la::cholesky(&spd)?;
    let slog = la::slogdet(&spd)?;
    for k in SCALES {
        let c = pow2(k);
        let (a, r) = (spd.mul(c)?, rect.mul(c)?);
        let got = la::svd(&r).eval()?;
        check_scaled("svd s", k, &got.s, &svd.s, c, 1e-14);
        check_scaled("svd u", k, &got.u, &svd.u, 1.0, 1e-13);
        check_scaled("svd vh", k, &got.vh, &svd.vh, 1.0, 1e-13);
        let got = la::eigh(&a)?;
        check_scaled(
            "eigh values",
            k,
            &got.eigenvalues,
            &eigh.eigenvalues,
            c,
            1e-14,
        );
        check_scaled(
            "eigh vectors",
            k,
            &got.eigenvectors,
            &eigh.eigenvectors,
            1.0,
            1e-13,
        );
        let got = la::qr(&r).eval()?;
        check_scaled("qr r", k, &got.r, &qr.r, c, 1e-14);
        check_scaled("qr q", k, &got.q, &qr.q, 1.0, 1e-13);
        // The Cholesky factor scales by sqrt(c) = 2^(k/2) (every k here is even).
        check_scaled("cholesky", k, &la::cholesky(&a)?, &chol, pow2(k / 2), 1e-14);
        let got = la::slogdet(&a)?;
        assert_eq!(got.sign.item()?, slog.sign.item()?, "slogdet sign at 2^{k}");
        let want = slog.logabsdet.item()? + 3.0 * f64::from(k) * std::f64::consts::LN_2;
        let logabsdet = got.logabsdet.item()?;
        assert!(
            (logabsdet - want).abs() <= 1e-12 * want.abs(),
            "slogdet at 2^{k}: {logabsdet} vs {want}"
        );
    }
    Ok(())
}

#[test]
fn solves_and_the_functions_built_on_decompositions_scale_too() -> qb::Result<()> {
    let (spd, rect, lower, rhs) = matrices();
    let x = la::solve(&spd, &rhs)?;
    let xt = la::solve_triangular(&lower, &rhs).lower(true).eval()?;
    let lst = la::lstsq(&rect, &rhs).eval()?;
    let inv = la::inv(&spd)?;
    let pinv = la::pinv(&rect).eval()?;
    let norms = |m: &Tensor| -> qb::Result<Vec<Tensor>> {
        Ok(vec![
            la::norm(m).ord("fro").eval()?,
            la::norm(m).ord(2.0).eval()?,
            la::norm(m).ord("nuc").eval()?,
            la::norm(m.reshape([-1])?).eval()?,
        ])
    };
    let base_norms = norms(&rect)?;
    for k in SCALES {
        let c = pow2(k);
        let (a, r, l, b) = (spd.mul(c)?, rect.mul(c)?, lower.mul(c)?, rhs.mul(c)?);
        // Both sides scaled: the same solution.
        check_scaled("solve", k, &la::solve(&a, &b)?, &x, 1.0, 1e-14);
        let got = la::solve_triangular(&l, &b).lower(true).eval()?;
        check_scaled("solve_triangular", k, &got, &xt, 1.0, 1e-14);
        if k.abs() <= 996 {
            // (Least squares multiplies by the factors, so subnormal data keeps its few digits
            // in the products: it is checked at the normal scales.)
            check_scaled("lstsq", k, &la::lstsq(&r, &b).eval()?, &lst, 1.0, 1e-13);
        }
        for (n, (got, want)) in norms(&r)?.iter().zip(&base_norms).enumerate() {
            check_scaled(&format!("norm {n}"), k, got, want, c, 1e-14);
        }
        if k.abs() <= 996 {
            // Only the matrix scaled: solutions and inverses by 1/c (representable here).
            check_scaled("solve by 1/c", k, &la::solve(&a, &rhs)?, &x, 1.0 / c, 1e-14);
            check_scaled("inv", k, &la::inv(&a)?, &inv, 1.0 / c, 1e-14);
            check_scaled("pinv", k, &la::pinv(&r).eval()?, &pinv, 1.0 / c, 1e-13);
        }
    }
    // det where c^3 is representable.
    let det = la::det(&spd)?.item()?;
    for k in [200, -200] {
        let got = la::det(spd.mul(pow2(k))?)?.item()?;
        let want = det * pow2(3 * k);
        // det is exp(log|det|): a log of about 416 carries 416 ulps of it into the result.
        assert!(
            (got - want).abs() <= 1e-12 * want.abs(),
            "det at 2^{k}: {got} vs {want}"
        );
    }
    Ok(())
}

/// The functions added for ports (`eigvalsh`, `lu_factor`/`lu_solve`, `cho_solve`) share the
/// sweep. (`expm` is not homogeneous: `expm(c A)` is no multiple of `expm(A)`, so it has no
/// scale rule to check.)
#[test]
fn the_port_compositions_scale_too() -> qb::Result<()> {
    let (spd, _, _, rhs) = matrices();
    let values_h = la::eigvalsh(&spd)?;
    let lu = la::lu_factor(&spd)?;
    let x = la::solve(&spd, &rhs)?;
    for k in SCALES {
        let c = pow2(k);
        let (a, b) = (spd.mul(c)?, rhs.mul(c)?);
        check_scaled("eigvalsh", k, &la::eigvalsh(&a)?, &values_h, c, 1e-14);
        let got = la::lu_factor(&a)?;
        // The packed factors: U (on and above the diagonal) scales by c, the multipliers of L
        // (below it) do not.
        let split = |packed: &Tensor| -> qb::Result<(Tensor, Tensor)> {
            let upper = qb::triu(packed)?;
            Ok((packed.sub(&upper)?, upper))
        };
        let ((got_l, got_u), (want_l, want_u)) = (split(&got.lu)?, split(&lu.lu)?);
        check_scaled("lu_factor U", k, &got_u, &want_u, c, 1e-14);
        check_scaled("lu_factor L", k, &got_l, &want_l, 1.0, 1e-14);
        assert_eq!(
            values(&got.piv),
            values(&lu.piv),
            "lu_factor pivots at 2^{k}"
        );
        if k.abs() > 996 {
            // Solves from returned factors: at the subnormal scale the factors themselves are
            // subnormal and carry only a subnormal's few digits (as in SciPy), so solving from
            // them is checked at the normal scales.
            continue;
        }
        for trans in [false, true] {
            // spd is symmetric: the transposed solve has the same solution.
            check_scaled(
                "lu_solve",
                k,
                &la::lu_solve(&got, &b, trans)?,
                &x,
                1.0,
                1e-14,
            );
        }
        let factor = la::cholesky(&a)?;
        let got = la::cho_solve(&factor, &b).eval()?;
        check_scaled("cho_solve", k, &got, &x, 1.0, 1e-14);
    }
    Ok(())
}
