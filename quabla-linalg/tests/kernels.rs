//! Value tests of the kernels against independent references: reconstructions from the factors,
//! hand-computed small cases, an independent Householder QR, and the sign rules of
//! numerics.md §6.3 checked explicitly.

use quabla_linalg::{
    batch_size, cholesky, eigh, largest_magnitude_sign, lu_factor, qr, slogdet, solve, svd,
    triangular_solve, LinalgError, SOLVE_PANEL,
};

// ---------------------------------------------------------------------------------------------
// Plain row-major helpers (no faer), so the references are independent of the kernels.

fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    assert_eq!(a.len(), m * k);
    assert_eq!(b.len(), k * n);
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    c
}

fn transpose(a: &[f64], m: usize, n: usize) -> Vec<f64> {
    let mut t = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            t[j * m + i] = a[i * n + j];
        }
    }
    t
}

fn identity(n: usize) -> Vec<f64> {
    let mut e = vec![0.0; n * n];
    for i in 0..n {
        e[i * n + i] = 1.0;
    }
    e
}

#[track_caller]
fn assert_close(actual: &[f64], expected: &[f64], tol: f64) {
    assert_eq!(actual.len(), expected.len(), "length mismatch");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() <= tol * (1.0 + e.abs()),
            "element {i}: {a} vs {e} (tol {tol}){}",
            if actual.len() <= 16 {
                format!("\nactual   {actual:?}\nexpected {expected:?}")
            } else {
                String::new()
            }
        );
    }
}

#[track_caller]
fn assert_orthonormal_columns(q: &[f64], m: usize, n: usize) {
    let qtq = matmul(&transpose(q, m, n), q, n, m, n);
    assert_close(&qtq, &identity(n), 1e-13);
}

/// Deterministic pseudo-random values in [-1, 1).
fn pseudo_random(seed: u64, len: usize) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// A symmetric positive definite matrix `M M^T + n I`.
fn spd(seed: u64, n: usize) -> Vec<f64> {
    let m = pseudo_random(seed, n * n);
    let mut a = matmul(&m, &transpose(&m, n, n), n, n, n);
    for i in 0..n {
        a[i * n + i] += n as f64;
    }
    a
}

/// Checks the §6.3 rule on one vector: its first largest-magnitude component is positive.
#[track_caller]
fn assert_sign_rule(v: &[f64]) {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if x.abs() > v[best].abs() {
            best = i;
        }
    }
    assert!(v[best] > 0.0, "sign rule violated by {v:?}");
}

fn column(a: &[f64], rows: usize, cols: usize, j: usize) -> Vec<f64> {
    (0..rows).map(|i| a[i * cols + j]).collect()
}

fn is_all_nan(v: &[f64]) -> bool {
    v.iter().all(|x| x.is_nan())
}

/// 4x4 determinant by cofactor expansion along the first row (independent of LU).
fn det(a: &[f64], n: usize) -> f64 {
    if n == 1 {
        return a[0];
    }
    (0..n)
        .map(|j| {
            let minor: Vec<f64> = (1..n)
                .flat_map(|i| (0..n).filter(move |&c| c != j).map(move |c| (i, c)))
                .map(|(i, c)| a[i * n + c])
                .collect();
            let sign = if j % 2 == 0 { 1.0 } else { -1.0 };
            sign * a[j] * det(&minor, n - 1)
        })
        .sum()
}

// ---------------------------------------------------------------------------------------------
// Batch helper and shape errors.

#[test]
fn batch_size_is_the_product_of_leading_axes() {
    assert_eq!(batch_size(&[]), Ok(1));
    assert_eq!(batch_size(&[2, 3, 4]), Ok(24));
    assert_eq!(batch_size(&[2, 0]), Ok(0));
    assert!(matches!(
        batch_size(&[usize::MAX, 2]),
        Err(LinalgError::Shape { .. })
    ));
}

#[test]
fn mismatched_lengths_are_shape_errors() {
    let e = solve(&[1.0; 4], &[1.0; 3], 1, 2, 1).unwrap_err();
    assert!(matches!(e, LinalgError::Shape { .. }), "{e:?}");
    assert!(e.to_string().starts_with("solve: b has 3 elements"), "{e}");
    assert!(matches!(
        slogdet(&[1.0; 3], 1, 2),
        Err(LinalgError::Shape { .. })
    ));
    assert!(matches!(
        cholesky(&[1.0; 5], 1, 2),
        Err(LinalgError::Shape { .. })
    ));
    assert!(matches!(
        eigh(&[1.0; 8], 3, 2),
        Err(LinalgError::Shape { .. })
    ));
    assert!(matches!(
        qr(&[1.0; 5], 1, 2, 3, false),
        Err(LinalgError::Shape { .. })
    ));
    assert!(matches!(
        svd(&[1.0; 7], 1, 2, 3, true),
        Err(LinalgError::Shape { .. })
    ));
    assert!(matches!(
        triangular_solve(&[1.0; 4], &[1.0; 4], 1, 2, 1, true, false, false),
        Err(LinalgError::Shape { .. })
    ));
    // Overflowing dimensions are an error, not a panic.
    assert!(matches!(
        svd(&[], usize::MAX, 2, 2, false),
        Err(LinalgError::Shape { .. })
    ));
}

#[test]
fn empty_dimensions_do_not_panic() {
    assert_eq!(solve(&[], &[], 3, 0, 2), Ok(vec![]));
    assert_eq!(solve(&[], &[], 0, 4, 2), Ok(vec![]));
    assert_eq!(solve(&[2.0, 0.0, 0.0, 2.0], &[], 1, 2, 0), Ok(vec![]));
    assert_eq!(slogdet(&[], 2, 0), Ok((vec![1.0, 1.0], vec![0.0, 0.0])));
    assert_eq!(cholesky(&[], 2, 0), Ok(vec![]));
    assert_eq!(eigh(&[], 2, 0), Ok((vec![], vec![])));
    assert_eq!(
        triangular_solve(&[], &[], 1, 0, 3, true, false, false),
        Ok(vec![])
    );
    // k = min(m, n) = 0: reduced factors are empty, complete/full ones are identities.
    assert_eq!(qr(&[], 1, 2, 0, false), Ok((vec![], vec![])));
    assert_eq!(qr(&[], 1, 2, 0, true), Ok((identity(2), vec![])));
    assert_eq!(svd(&[], 1, 0, 3, false), Ok((vec![], vec![], vec![])));
    assert_eq!(svd(&[], 1, 0, 3, true), Ok((vec![], vec![], identity(3))));
}

// ---------------------------------------------------------------------------------------------
// solve / slogdet (LU).

#[test]
fn solve_acceptance_e73() {
    let a = [4.0, 1.0, 1.0, 3.0];
    let x = solve(&a, &[1.0, 2.0], 1, 2, 1).unwrap();
    assert_close(&x, &[1.0 / 11.0, 7.0 / 11.0], 1e-15);
}

#[test]
fn solve_needs_pivoting() {
    // A zero leading entry: without row exchanges this would divide by zero.
    let a = [0.0, 1.0, 2.0, 0.0];
    let x = solve(&a, &[3.0, 4.0, 5.0, 6.0], 1, 2, 2).unwrap();
    assert_close(&x, &[2.5, 3.0, 3.0, 4.0], 1e-15);
}

#[test]
fn solve_residual_random() {
    for (seed, n, k) in [(1, 1, 1), (2, 5, 3), (3, 17, 2), (4, 40, 4)] {
        let a = pseudo_random(seed, n * n);
        let b = pseudo_random(seed + 100, n * k);
        let x = solve(&a, &b, 1, n, k).unwrap();
        assert_close(&matmul(&a, &x, n, n, k), &b, 1e-10);
    }
}

#[test]
fn solve_batch_equals_single_calls() {
    let (n, k) = (4, 2);
    let a = pseudo_random(7, 3 * n * n);
    let b = pseudo_random(8, 3 * n * k);
    let batched = solve(&a, &b, 3, n, k).unwrap();
    for i in 0..3 {
        let single = solve(
            &a[i * n * n..(i + 1) * n * n],
            &b[i * n * k..(i + 1) * n * k],
            1,
            n,
            k,
        )
        .unwrap();
        assert_eq!(&batched[i * n * k..(i + 1) * n * k], &single[..]);
    }
}

#[test]
fn wide_right_hand_sides_solve_in_fixed_panels_on_any_thread_count() {
    // 150 right-hand sides are three panels (64, 64, 22); each column's bits are those of its
    // panel solved alone, whether the panels run one after another or on several threads
    // (120 x 150 is large enough to be split).
    let (n, k) = (120, 2 * SOLVE_PANEL + 22);
    let a = pseudo_random(11, n * n);
    let b = pseudo_random(12, n * k);
    let factors = lu_factor(&a, 1, n).unwrap();
    for transposed in [false, true] {
        let one = factors.solve_on(&b, k, transposed, 1).unwrap();
        for threads in [2, 3, 8] {
            assert_eq!(factors.solve_on(&b, k, transposed, threads).unwrap(), one);
        }
        assert_eq!(factors.solve(&b, k, transposed).unwrap(), one);
        for col in (0..k).step_by(SOLVE_PANEL) {
            let width = SOLVE_PANEL.min(k - col);
            let panel: Vec<f64> = (0..n)
                .flat_map(|i| b[i * k + col..i * k + col + width].iter().copied())
                .collect();
            let alone = factors.solve(&panel, width, transposed).unwrap();
            for i in 0..n {
                assert_eq!(
                    &one[i * k + col..i * k + col + width],
                    &alone[i * width..(i + 1) * width]
                );
            }
        }
        let lhs = if transposed {
            transpose(&a, n, n)
        } else {
            a.clone()
        };
        assert_close(&matmul(&lhs, &one, n, n, k), &b, 1e-10);
    }
}

#[test]
fn solve_singular_is_an_error() {
    // Acceptance E79.
    let s = [1.0, 2.0, 2.0, 4.0];
    let e = solve(&s, &[1.0, 2.0], 1, 2, 1).unwrap_err();
    assert_eq!(e, LinalgError::Singular { op: "solve" });
    assert_eq!(e.to_string(), "solve: matrix is singular");
    // The zero matrix, a zero column (first pivot zero), and a singular matrix in a batch.
    assert!(solve(&[0.0; 9], &[1.0; 3], 1, 3, 1).is_err());
    let zero_col = [0.0, 1.0, 2.0, 0.0, 3.0, 4.0, 0.0, 5.0, 6.0];
    assert!(solve(&zero_col, &[1.0; 3], 1, 3, 1).is_err());
    let mut batch = vec![1.0, 0.0, 0.0, 1.0];
    batch.extend_from_slice(&s);
    assert!(solve(&batch, &[1.0; 4], 2, 2, 1).is_err());
    // Raised even with no right-hand sides.
    assert!(solve(&s, &[], 1, 2, 0).is_err());
}

#[test]
fn singular_detected_in_blocked_lu() {
    // n = 40 takes faer's recursive (blocked) LU path. Duplicate rows are eliminated exactly.
    let n = 40;
    let mut a = pseudo_random(13, n * n);
    for j in 0..n {
        a[30 * n + j] = a[7 * n + j];
    }
    let b = vec![1.0; n];
    assert_eq!(
        solve(&a, &b, 1, n, 1),
        Err(LinalgError::Singular { op: "solve" })
    );
    assert_eq!(slogdet(&a, 1, n), Ok((vec![0.0], vec![f64::NEG_INFINITY])));
    // A zero column in the second half.
    let mut a = pseudo_random(14, n * n);
    for i in 0..n {
        a[i * n + 25] = 0.0;
    }
    assert!(solve(&a, &b, 1, n, 1).is_err());
    assert_eq!(slogdet(&a, 1, n), Ok((vec![0.0], vec![f64::NEG_INFINITY])));
}

#[test]
fn solve_non_finite_matrix_gives_nan() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let a = [bad, 1.0, 1.0, 3.0, 2.0, 0.0, 0.0, 2.0];
        let x = solve(&a, &[1.0, 2.0, 2.0, 4.0], 2, 2, 1).unwrap();
        assert!(is_all_nan(&x[..2]), "{x:?}");
        assert_close(&x[2..], &[1.0, 2.0], 1e-15);
    }
    // [0, NaN] first column: the pivot search must not report "singular".
    let a = [0.0, 1.0, f64::NAN, 1.0];
    assert!(is_all_nan(&solve(&a, &[1.0, 1.0], 1, 2, 1).unwrap()));
    // NaN in b propagates without error (through `0 * NaN` in the substitutions, as LAPACK's
    // `getrs` does), and does not reach other right-hand sides.
    let x = solve(&[2.0, 0.0, 0.0, 2.0], &[f64::NAN, 2.0, 4.0, 6.0], 1, 2, 2).unwrap();
    assert!(x[0].is_nan());
    assert_eq!((x[1], x[3]), (1.0, 3.0));
}

#[test]
fn slogdet_hand_computed() {
    // Acceptance E73: det [[4, 1], [1, 3]] = 11.
    let (s, l) = slogdet(&[4.0, 1.0, 1.0, 3.0], 1, 2).unwrap();
    assert_eq!(s, vec![1.0]);
    assert_close(&l, &[11f64.ln()], 1e-15);
    assert_close(&l, &[2.39789527], 1e-8);
    // det [[1, 2], [3, 4]] = -2 (one row exchange, two negative... signs checked end to end).
    let (s, l) = slogdet(&[1.0, 2.0, 3.0, 4.0], 1, 2).unwrap();
    assert_eq!(s, vec![-1.0]);
    assert_close(&l, &[2f64.ln()], 1e-15);
    // A permutation matrix: det -1.
    let (s, l) = slogdet(&[0.0, 1.0, 1.0, 0.0], 1, 2).unwrap();
    assert_eq!((s, l), (vec![-1.0], vec![0.0]));
    // A 1x1 negative matrix.
    let (s, l) = slogdet(&[-0.5], 1, 1).unwrap();
    assert_eq!(s, vec![-1.0]);
    assert_close(&l, &[0.5f64.ln()], 1e-15);
    // diag(2, -3, 4) has det -24.
    let d = [2.0, 0.0, 0.0, 0.0, -3.0, 0.0, 0.0, 0.0, 4.0];
    let (s, l) = slogdet(&d, 1, 3).unwrap();
    assert_eq!(s, vec![-1.0]);
    assert_close(&l, &[24f64.ln()], 1e-15);
}

#[test]
fn slogdet_matches_cofactor_expansion_batched() {
    let n = 4;
    let batch = 6;
    let a = pseudo_random(11, batch * n * n);
    let (s, l) = slogdet(&a, batch, n).unwrap();
    for i in 0..batch {
        let m = &a[i * n * n..(i + 1) * n * n];
        let d = det(m, n);
        assert_eq!(s[i], d.signum(), "batch {i}");
        assert_close(&[l[i]], &[d.abs().ln()], 1e-12);
        let (s1, l1) = slogdet(m, 1, n).unwrap();
        assert_eq!((s1[0], l1[0]), (s[i], l[i]));
    }
}

#[test]
fn slogdet_singular_and_non_finite() {
    // Acceptance E79: (0, -inf), and det = sign * exp(logabsdet) is exactly 0.
    let (s, l) = slogdet(&[1.0, 2.0, 2.0, 4.0], 1, 2).unwrap();
    assert_eq!((s[0], l[0]), (0.0, f64::NEG_INFINITY));
    assert_eq!(s[0] * l[0].exp(), 0.0);
    let zero_col = [0.0, 1.0, 2.0, 0.0, 3.0, 4.0, 0.0, 5.0, 6.0];
    for a in [&zero_col[..], &[0.0; 9][..]] {
        let (s, l) = slogdet(a, 1, 3).unwrap();
        assert_eq!((s[0], l[0]), (0.0, f64::NEG_INFINITY));
    }
    for bad in [f64::NAN, f64::INFINITY] {
        let (s, l) = slogdet(&[1.0, bad, 0.0, 1.0, 2.0, 0.0, 0.0, 2.0], 2, 2).unwrap();
        assert!(s[0].is_nan() && l[0].is_nan());
        assert_eq!(s[1], 1.0);
        assert_close(&l[1..], &[4f64.ln()], 1e-15);
    }
    // Singular and NaN: NaN wins (non-finite matrices give (nan, nan)).
    let (s, l) = slogdet(&[0.0, 0.0, 0.0, f64::NAN], 1, 2).unwrap();
    assert!(s[0].is_nan() && l[0].is_nan());
}

// ---------------------------------------------------------------------------------------------
// triangular_solve.

/// The dense op(A) that `triangular_solve` should use: the read triangle, zeros elsewhere.
fn triangle(a: &[f64], n: usize, lower: bool, unit: bool) -> Vec<f64> {
    let mut t = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            t[i * n + j] = if i == j {
                if unit {
                    1.0
                } else {
                    a[i * n + j]
                }
            } else if (i > j) == lower {
                a[i * n + j]
            } else {
                0.0
            };
        }
    }
    t
}

#[test]
fn triangular_solve_all_variants() {
    for (n, k) in [(6, 3), (90, 5)] {
        triangular_variants(n, k);
    }
}

fn triangular_variants(n: usize, k: usize) {
    // Off-diagonal entries of size 1/n keep even the unit-diagonal triangles well conditioned.
    let mut a: Vec<f64> = pseudo_random(21, n * n)
        .iter()
        .map(|x| x / n as f64)
        .collect();
    for i in 0..n {
        a[i * n + i] = 2.0 + i as f64; // well away from zero
    }
    let b = pseudo_random(22, n * k);
    for lower in [true, false] {
        for transpose_a in [false, true] {
            for unit in [false, true] {
                // Poison the triangle that must not be read (and the diagonal when unit).
                let mut poisoned = a.clone();
                for i in 0..n {
                    for j in 0..n {
                        if (i != j && (i > j) != lower) || (i == j && unit) {
                            poisoned[i * n + j] = f64::NAN;
                        }
                    }
                }
                let x = triangular_solve(&poisoned, &b, 1, n, k, lower, transpose_a, unit).unwrap();
                let mut t = triangle(&a, n, lower, unit);
                if transpose_a {
                    t = transpose(&t, n, n);
                }
                assert_close(&matmul(&t, &x, n, n, k), &b, 1e-12);
            }
        }
    }
}

#[test]
fn triangular_solve_hand_computed() {
    // [[2, 0], [1, 4]] x = [2, 9] -> x = [1, 2]; transposed [[2, 1], [0, 4]] x = [5, 8] -> [1.5, 2].
    let l = [2.0, f64::NAN, 1.0, 4.0];
    assert_eq!(
        triangular_solve(&l, &[2.0, 9.0], 1, 2, 1, true, false, false).unwrap(),
        vec![1.0, 2.0]
    );
    assert_eq!(
        triangular_solve(&l, &[5.0, 8.0], 1, 2, 1, true, true, false).unwrap(),
        vec![1.5, 2.0]
    );
    // Unit diagonal: [[1, 0], [1, 1]] x = [2, 9] -> [2, 7].
    assert_eq!(
        triangular_solve(&l, &[2.0, 9.0], 1, 2, 1, true, false, true).unwrap(),
        vec![2.0, 7.0]
    );
}

#[test]
fn triangular_solve_batch_and_singular() {
    let (n, k) = (3, 2);
    let a = pseudo_random(31, 3 * n * n);
    let b = pseudo_random(32, 3 * n * k);
    let batched = triangular_solve(&a, &b, 3, n, k, false, true, false).unwrap();
    for i in 0..3 {
        let single = triangular_solve(
            &a[i * n * n..(i + 1) * n * n],
            &b[i * n * k..(i + 1) * n * k],
            1,
            n,
            k,
            false,
            true,
            false,
        )
        .unwrap();
        assert_eq!(&batched[i * n * k..(i + 1) * n * k], &single[..]);
    }
    // A zero diagonal is not an error: the result is non-finite.
    let x = triangular_solve(
        &[0.0, 0.0, 1.0, 1.0],
        &[1.0, 1.0],
        1,
        2,
        1,
        true,
        false,
        false,
    )
    .unwrap();
    assert!(x.iter().all(|v| !v.is_finite()), "{x:?}");
}

// ---------------------------------------------------------------------------------------------
// cholesky.

#[test]
fn cholesky_hand_computed() {
    // [[4, 2], [2, 3]] = L L^T with L = [[2, 0], [1, sqrt 2]].
    let l = cholesky(&[4.0, 2.0, 2.0, 3.0], 1, 2).unwrap();
    assert_close(&l, &[2.0, 0.0, 1.0, 2f64.sqrt()], 1e-15);
    assert_eq!(l[1], 0.0);
}

#[test]
fn cholesky_reconstructs_and_reads_the_lower_triangle() {
    for (seed, n) in [(41, 1), (42, 3), (43, 8), (44, 33)] {
        let a = spd(seed, n);
        let mut poisoned = a.clone();
        for i in 0..n {
            for j in i + 1..n {
                poisoned[i * n + j] = f64::NAN;
            }
        }
        let l = cholesky(&poisoned, 1, n).unwrap();
        for i in 0..n {
            assert!(l[i * n + i] > 0.0);
            for j in i + 1..n {
                assert_eq!(l[i * n + j], 0.0, "upper triangle must be exactly zero");
            }
        }
        assert_close(&matmul(&l, &transpose(&l, n, n), n, n, n), &a, 1e-13);
    }
}

#[test]
fn cholesky_batch_and_failures() {
    let n = 3;
    let mut a = spd(51, n);
    a.extend(spd(52, n));
    a.extend(spd(53, n));
    let batched = cholesky(&a, 3, n).unwrap();
    for i in 0..3 {
        let single = cholesky(&a[i * 9..(i + 1) * 9], 1, n).unwrap();
        assert_eq!(&batched[i * 9..(i + 1) * 9], &single[..]);
    }
    // Indefinite, semi-definite, zero and non-finite matrices give all-NaN factors, alongside a
    // good one that is unaffected.
    for bad in [
        [-1.0, 0.0, 0.0, 1.0],
        [1.0, 1.0, 1.0, 1.0],
        [0.0; 4],
        [f64::NAN, 0.0, 0.0, 1.0],
        [1.0, 0.0, f64::INFINITY, 1.0],
    ] {
        let mut input = bad.to_vec();
        input.extend([4.0, 2.0, 2.0, 3.0]);
        let l = cholesky(&input, 2, 2).unwrap();
        assert!(is_all_nan(&l[..4]), "{bad:?} -> {l:?}");
        assert_close(&l[4..], &[2.0, 0.0, 1.0, 2f64.sqrt()], 1e-15);
    }
}

// ---------------------------------------------------------------------------------------------
// eigh.

#[test]
fn eigh_acceptance_e73() {
    let (w, v) = eigh(&[4.0, 1.0, 1.0, 3.0], 1, 2).unwrap();
    let s5 = 5f64.sqrt();
    assert_close(&w, &[(7.0 - s5) / 2.0, (7.0 + s5) / 2.0], 1e-15);
    assert_close(&w, &[2.38196601, 4.61803399], 1e-8);
    for j in 0..2 {
        assert_sign_rule(&column(&v, 2, 2, j));
    }
}

#[test]
fn eigh_reconstructs_random_symmetric() {
    for (seed, n) in [(61, 1), (62, 4), (63, 12), (64, 30)] {
        let m = pseudo_random(seed, n * n);
        let a: Vec<f64> = (0..n * n)
            .map(|p| (m[p] + m[(p % n) * n + p / n]) / 2.0)
            .collect();
        let (w, v) = eigh(&a, 1, n).unwrap();
        assert!(w.windows(2).all(|p| p[0] <= p[1]), "ascending: {w:?}");
        assert_orthonormal_columns(&v, n, n);
        let mut vw = v.clone();
        for i in 0..n {
            for j in 0..n {
                vw[i * n + j] *= w[j];
            }
        }
        assert_close(&matmul(&vw, &transpose(&v, n, n), n, n, n), &a, 1e-13);
        for j in 0..n {
            assert_sign_rule(&column(&v, n, n, j));
        }
    }
}

#[test]
fn eigh_uses_the_symmetric_part() {
    let n = 5;
    let a = pseudo_random(71, n * n);
    let sym: Vec<f64> = (0..n * n)
        .map(|p| (a[p] + a[(p % n) * n + p / n]) / 2.0)
        .collect();
    let (w1, v1) = eigh(&a, 1, n).unwrap();
    let (w2, v2) = eigh(&sym, 1, n).unwrap();
    assert_close(&w1, &w2, 1e-14);
    assert_close(&v1, &v2, 1e-12);
}

#[test]
fn eigh_sign_rule_and_known_vectors() {
    // diag(3, -1, 2): values [-1, 2, 3], vectors e1, e2, e0 with +1 entries after the rule.
    let a = [3.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 2.0];
    let (w, v) = eigh(&a, 1, 3).unwrap();
    assert_close(&w, &[-1.0, 2.0, 3.0], 1e-15);
    assert_close(&v, &[0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0], 1e-15);
    // [[2, -1], [-1, 2]]: values [1, 3]; vector for 3 is +-(1, -1)/sqrt 2 (an exact tie up to
    // rounding), for 1 it is (1, 1)/sqrt 2.
    let (w, v) = eigh(&[2.0, -1.0, -1.0, 2.0], 1, 2).unwrap();
    assert_close(&w, &[1.0, 3.0], 1e-15);
    let h = 0.5f64.sqrt();
    assert_close(&column(&v, 2, 2, 0), &[h, h], 1e-15);
    let c = column(&v, 2, 2, 1);
    assert_close(&[c[0].abs(), c[1].abs()], &[h, h], 1e-15);
    assert!(c[0] * c[1] < 0.0);
    assert_sign_rule(&c);
    // A vector whose largest component is negative in the natural basis: [[0, 0], [0, 1]] has
    // eigenvector e1 for 1 -- check it comes out as +e1, and -A's as well.
    for s in [1.0, -1.0] {
        let (_, v) = eigh(&[0.0, 0.0, 0.0, s], 1, 2).unwrap();
        for j in 0..2 {
            assert_sign_rule(&column(&v, 2, 2, j));
        }
    }
}

#[test]
fn eigh_batch_and_non_finite() {
    let n = 3;
    let a = pseudo_random(81, 3 * n * n);
    let (w, v) = eigh(&a, 3, n).unwrap();
    for i in 0..3 {
        let (w1, v1) = eigh(&a[i * 9..(i + 1) * 9], 1, n).unwrap();
        assert_eq!(&w[i * 3..(i + 1) * 3], &w1[..]);
        assert_eq!(&v[i * 9..(i + 1) * 9], &v1[..]);
    }
    let mut bad = vec![f64::NAN, 0.0, 0.0, 1.0];
    bad.extend([f64::INFINITY, 0.0, 0.0, 1.0]);
    bad.extend([2.0, 0.0, 0.0, 1.0]);
    let (w, v) = eigh(&bad, 3, 2).unwrap();
    assert!(is_all_nan(&w[..4]) && is_all_nan(&v[..8]));
    assert_eq!(&w[4..], &[1.0, 2.0]);
    assert_eq!(&v[8..], &[0.0, 1.0, 1.0, 0.0]);
    // The zero matrix is fine.
    let (w, v) = eigh(&[0.0; 9], 1, 3).unwrap();
    assert_eq!(w, vec![0.0; 3]);
    assert_orthonormal_columns(&v, 3, 3);
}

// ---------------------------------------------------------------------------------------------
// qr.

/// An independent unblocked Householder QR with LAPACK's `larfg` convention
/// (`beta = -sign(alpha) * norm`, `H = I` for a zero tail), returning the complete `Q` (`m x m`)
/// and `R` (`m x n`) before any sign rule: what NumPy's `qr(mode="complete")` computes.
fn reference_householder_qr(a: &[f64], m: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut r = a.to_vec();
    let mut q = identity(m);
    for j in 0..m.min(n) {
        let alpha = r[j * n + j];
        let tail: f64 = (j + 1..m).map(|i| r[i * n + j].powi(2)).sum();
        if tail == 0.0 {
            continue;
        }
        let norm = (alpha * alpha + tail).sqrt();
        let beta = if alpha >= 0.0 { -norm } else { norm };
        let mut v = vec![0.0; m];
        v[j] = 1.0;
        for i in j + 1..m {
            v[i] = r[i * n + j] / (alpha - beta);
        }
        let tau = (beta - alpha) / beta;
        // R <- H R, Q <- Q H with H = I - tau v v^T.
        for c in 0..n {
            let d: f64 = (j..m).map(|i| v[i] * r[i * n + c]).sum();
            for i in j..m {
                r[i * n + c] -= tau * v[i] * d;
            }
        }
        for row in 0..m {
            let d: f64 = (j..m).map(|i| q[row * m + i] * v[i]).sum();
            for i in j..m {
                q[row * m + i] -= tau * d * v[i];
            }
        }
    }
    (q, r)
}

const M32: [f64; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];

#[test]
fn qr_acceptance_e74_hand_computed() {
    let (q, r) = qr(&M32, 1, 3, 2, false).unwrap();
    assert_eq!((q.len(), r.len()), (6, 4)); // [3, 2] and [2, 2]
    let s35 = 35f64.sqrt();
    // Column 0 of Q is a_0 / |a_0| with diag(R) >= 0; R = [[sqrt 35, 44/sqrt 35], [0, r11]].
    let r11 = (56.0 - 44.0 * 44.0 / 35.0f64).sqrt();
    assert_close(&r, &[s35, 44.0 / s35, 0.0, r11], 1e-14);
    assert_close(
        &column(&q, 3, 2, 0),
        &[1.0 / s35, 3.0 / s35, 5.0 / s35],
        1e-14,
    );
    assert_close(&matmul(&q, &r, 3, 2, 2), &M32, 1e-12);
    assert_orthonormal_columns(&q, 3, 2);
    let (qc, rc) = qr(&M32, 1, 3, 2, true).unwrap();
    assert_eq!((qc.len(), rc.len()), (9, 6)); // [3, 3] and [3, 2]
    assert_eq!(&rc[4..], &[0.0, 0.0]);
    assert_close(&matmul(&qc, &rc, 3, 3, 2), &M32, 1e-12);
    assert_orthonormal_columns(&qc, 3, 3);
    // The extra column spans the orthogonal complement: +-(1, -2, 1)/sqrt 6.
    let c = column(&qc, 3, 3, 2);
    let s6 = 6f64.sqrt();
    assert_close(&[c[0] / c[1], c[2] / c[1]], &[-0.5, -0.5], 1e-12);
    assert_close(&[c[1].abs()], &[2.0 / s6], 1e-14);
}

#[test]
fn qr_sign_rule_single_column() {
    // [3, 4]^T -> Q = [0.6, 0.8]^T, R = [5]; [-3, 4]^T -> Q = [-0.6, 0.8]^T, R = [5].
    let (q, r) = qr(&[3.0, 4.0], 1, 2, 1, false).unwrap();
    assert_close(&q, &[0.6, 0.8], 1e-15);
    assert_close(&r, &[5.0], 1e-15);
    let (q, r) = qr(&[-3.0, 4.0], 1, 2, 1, false).unwrap();
    assert_close(&q, &[-0.6, 0.8], 1e-15);
    assert_close(&r, &[5.0], 1e-15);
    // Negative diagonal entry with a zero tail: the reflector is the identity, the sign rule flips.
    let (q, r) = qr(&[-2.0, 1.0, 0.0, 3.0], 1, 2, 2, false).unwrap();
    assert_close(&q, &[-1.0, 0.0, 0.0, 1.0], 1e-15);
    assert_close(&r, &[2.0, -1.0, 0.0, 3.0], 1e-15);
}

#[test]
fn qr_matches_reference_householder_up_to_the_sign_rule() {
    for (seed, m, n) in [(91, 5, 3), (92, 4, 4), (93, 3, 6), (94, 9, 2), (95, 40, 25)] {
        let a = pseudo_random(seed, m * n);
        let k = m.min(n);
        let (q_ref, r_ref) = reference_householder_qr(&a, m, n);
        let (q, r) = qr(&a, 1, m, n, true).unwrap();
        // Apply the rule to the reference: flip row i of R and column i of Q when R[i, i] < 0.
        let mut q_exp = q_ref.clone();
        let mut r_exp = r_ref.clone();
        for i in 0..k {
            if r_ref[i * n + i] < 0.0 {
                for c in 0..n {
                    r_exp[i * n + c] = -r_exp[i * n + c];
                }
                for row in 0..m {
                    q_exp[row * m + i] = -q_exp[row * m + i];
                }
            }
        }
        for i in 0..m {
            for c in 0..i.min(n) {
                r_exp[i * n + c] = 0.0;
            }
        }
        assert_close(&q, &q_exp, 1e-12);
        assert_close(&r, &r_exp, 1e-12);
        for i in 0..k {
            assert!(r[i * n + i] >= 0.0);
        }
        // Reduced mode is the leading block of the complete one.
        let (q_red, r_red) = qr(&a, 1, m, n, false).unwrap();
        let q_lead: Vec<f64> = (0..m).flat_map(|i| q[i * m..i * m + k].to_vec()).collect();
        assert_close(&q_red, &q_lead, 1e-14);
        assert_close(&r_red, &r[..k * n], 1e-14);
        assert_close(&matmul(&q_red, &r_red, m, k, n), &a, 1e-12);
    }
}

#[test]
fn qr_batch_rank_deficient_and_non_finite() {
    let (m, n) = (4, 3);
    let a = pseudo_random(101, 3 * m * n);
    let (q, r) = qr(&a, 3, m, n, false).unwrap();
    for i in 0..3 {
        let (q1, r1) = qr(&a[i * 12..(i + 1) * 12], 1, m, n, false).unwrap();
        assert_eq!(&q[i * 12..(i + 1) * 12], &q1[..]);
        assert_eq!(&r[i * 9..(i + 1) * 9], &r1[..]);
    }
    // Rank deficient (second column = 2 * first) and zero matrices: still A = QR, diag >= 0.
    for a in [vec![1.0, 2.0, 2.0, 4.0, 3.0, 6.0], vec![0.0; 6]] {
        let (q, r) = qr(&a, 1, 3, 2, false).unwrap();
        assert_close(&matmul(&q, &r, 3, 2, 2), &a, 1e-14);
        assert!(r[0] >= 0.0 && r[3] >= 0.0);
        assert_orthonormal_columns(&q, 3, 2);
    }
    let (q, r) = qr(&[1.0, f64::NAN, 0.0, 1.0], 1, 2, 2, true).unwrap();
    assert!(is_all_nan(&q) && is_all_nan(&r));
}

// ---------------------------------------------------------------------------------------------
// svd.

/// `U[:, :k] diag(s) Vh[:k, :]`.
fn svd_reconstruct(
    u: &[f64],
    s: &[f64],
    vh: &[f64],
    m: usize,
    n: usize,
    u_cols: usize,
) -> Vec<f64> {
    let k = s.len();
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k)
                .map(|p| u[i * u_cols + p] * s[p] * vh[p * n + j])
                .sum();
        }
    }
    out
}

#[test]
fn svd_acceptance_e74_hand_computed() {
    let (u, s, vh) = svd(&M32, 1, 3, 2, false).unwrap();
    assert_eq!((u.len(), s.len(), vh.len()), (6, 2, 4)); // [3, 2], [2], [2, 2]
                                                         // s^2 are the eigenvalues of A^T A = [[35, 44], [44, 56]]: (91 +- sqrt 8185)/2.
    let d = 8185f64.sqrt();
    assert_close(
        &s,
        &[((91.0 + d) / 2.0).sqrt(), ((91.0 - d) / 2.0).sqrt()],
        1e-13,
    );
    assert_close(&s, &[9.52551809, 0.51430058], 1e-8);
    assert_close(&svd_reconstruct(&u, &s, &vh, 3, 2, 2), &M32, 1e-12);
    for j in 0..2 {
        assert_sign_rule(&column(&u, 3, 2, j));
    }
}

#[test]
fn svd_random_shapes_reduced_and_full() {
    for (seed, m, n) in [
        (111, 1, 1),
        (112, 5, 3),
        (113, 3, 5),
        (114, 6, 6),
        (115, 30, 12),
    ] {
        let a = pseudo_random(seed, m * n);
        let k = m.min(n);
        for full in [false, true] {
            let (u_cols, v_rows) = if full { (m, n) } else { (k, k) };
            let (u, s, vh) = svd(&a, 1, m, n, full).unwrap();
            assert_eq!((u.len(), s.len(), vh.len()), (m * u_cols, k, v_rows * n));
            assert!(s.windows(2).all(|p| p[0] >= p[1]), "descending: {s:?}");
            assert!(s.iter().all(|&x| x >= 0.0));
            assert_orthonormal_columns(&u, m, u_cols);
            assert_orthonormal_columns(&transpose(&vh, v_rows, n), n, v_rows);
            assert_close(&svd_reconstruct(&u, &s, &vh, m, n, u_cols), &a, 1e-12);
            // Sign rule on every column of U, and on each extra row of Vh.
            for j in 0..u_cols {
                assert_sign_rule(&column(&u, m, u_cols, j));
            }
            for r in k..v_rows {
                assert_sign_rule(&vh[r * n..(r + 1) * n]);
            }
            // Singular values agree with the eigenvalues of A^T A (independent of the SVD).
            let ata = matmul(&transpose(&a, m, n), &a, n, m, n);
            let (w, _) = eigh(&ata, 1, n).unwrap();
            let mut expected: Vec<f64> =
                w.iter().rev().take(k).map(|x| x.max(0.0).sqrt()).collect();
            expected.truncate(k);
            assert_close(&s, &expected, 1e-7);
        }
    }
}

#[test]
fn svd_sign_rule_flips_vh_with_u() {
    // A = -e0 e0^T * 2 + e1 e1^T: s = [2, 1]; U column 0 is +e0 after the rule, so Vh row 0
    // must carry the minus sign.
    let a = [-2.0, 0.0, 0.0, 1.0];
    let (u, s, vh) = svd(&a, 1, 2, 2, false).unwrap();
    assert_close(&s, &[2.0, 1.0], 1e-15);
    assert_close(&u, &[1.0, 0.0, 0.0, 1.0], 1e-15);
    assert_close(&vh, &[-1.0, 0.0, 0.0, 1.0], 1e-15);
}

#[test]
fn svd_batch_degenerate_and_non_finite() {
    let (m, n) = (3, 4);
    let a = pseudo_random(121, 3 * m * n);
    let (u, s, vh) = svd(&a, 3, m, n, true).unwrap();
    for i in 0..3 {
        let (u1, s1, vh1) = svd(&a[i * 12..(i + 1) * 12], 1, m, n, true).unwrap();
        assert_eq!(&u[i * 9..(i + 1) * 9], &u1[..]);
        assert_eq!(&s[i * 3..(i + 1) * 3], &s1[..]);
        assert_eq!(&vh[i * 16..(i + 1) * 16], &vh1[..]);
    }
    // Rank one and zero matrices.
    let rank1 = [1.0, 2.0, 2.0, 4.0, 3.0, 6.0];
    let (u, s, vh) = svd(&rank1, 1, 3, 2, false).unwrap();
    assert_close(&s, &[70f64.sqrt(), 0.0], 1e-14);
    assert_close(&svd_reconstruct(&u, &s, &vh, 3, 2, 2), &rank1, 1e-13);
    let (u, s, vh) = svd(&[0.0; 6], 1, 2, 3, true).unwrap();
    assert_eq!(s, vec![0.0, 0.0]);
    assert_orthonormal_columns(&u, 2, 2);
    assert_orthonormal_columns(&transpose(&vh, 3, 3), 3, 3);
    for bad in [f64::NAN, f64::INFINITY] {
        let (u, s, vh) = svd(&[1.0, bad, 0.0, 1.0], 1, 2, 2, false).unwrap();
        assert!(is_all_nan(&u) && is_all_nan(&s) && is_all_nan(&vh));
    }
}

// ---------------------------------------------------------------------------------------------
// The sign-rule helper itself.

#[test]
fn largest_magnitude_sign_rule() {
    assert_eq!(largest_magnitude_sign([0.1, -0.9, 0.5]), -1.0);
    assert_eq!(largest_magnitude_sign([0.1, 0.9, -0.5]), 1.0);
    // Exact tie: the first one decides.
    assert_eq!(largest_magnitude_sign([-0.5, 0.5]), -1.0);
    assert_eq!(largest_magnitude_sign([0.5, -0.5]), 1.0);
    // Degenerate vectors are left alone.
    assert_eq!(largest_magnitude_sign([]), 1.0);
    assert_eq!(largest_magnitude_sign([0.0, -0.0]), 1.0);
    assert_eq!(largest_magnitude_sign([f64::NAN, -1.0]), -1.0);
    assert_eq!(largest_magnitude_sign([f64::NAN]), 1.0);
}
