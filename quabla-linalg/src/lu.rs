//! LU with partial pivoting: [`solve`] and [`slogdet`] (numerics.md §6.2, §6.4).

use faer::linalg::lu::partial_pivoting::{factor, solve as lu_solve};
use faer::perm::PermRef;
use faer::{Mat, Par};

use crate::batch::{all_finite, matrix, matrix_len, push_nan, push_row_major, to_mat, with_stack};
use crate::LinalgError;

/// A packed `P A = L U` factorization of one square matrix.
struct Lu {
    /// Strictly lower part: `L` (unit diagonal implied); upper part with diagonal: `U`.
    packed: Mat<f64>,
    forward: Vec<usize>,
    inverse: Vec<usize>,
    transpositions: usize,
}

impl Lu {
    /// Factorizes a finite row-major `n x n` matrix.
    fn new(a: &[f64], n: usize) -> Lu {
        let mut packed = to_mat(a, n, n);
        let mut forward = vec![0usize; n];
        let mut inverse = vec![0usize; n];
        let req = factor::lu_in_place_scratch::<usize, f64>(n, n, Par::Seq, Default::default());
        let transpositions = with_stack(req, |stack| {
            let (info, _) = factor::lu_in_place(
                packed.as_mut(),
                &mut forward,
                &mut inverse,
                Par::Seq,
                stack,
                Default::default(),
            );
            info.transposition_count
        });
        Lu {
            packed,
            forward,
            inverse,
            transpositions,
        }
    }

    /// Whether some pivot `U[i, i]` is exactly zero. Pivots after the first zero one may be NaN
    /// (faer divides by the zero pivot and carries on), which does not matter: any exactly zero
    /// pivot makes the matrix singular, exactly as LAPACK's `getrf` reports `info > 0`.
    fn has_zero_pivot(&self) -> bool {
        (0..self.packed.nrows()).any(|i| self.packed[(i, i)] == 0.0)
    }
}

/// Solves `A X = B` for each of `batch` pairs: `a` holds `batch` row-major `n x n` matrices,
/// `b` holds `batch` row-major `n x k` right-hand sides, and the result is `batch` row-major
/// `n x k` solutions (a rank-1 `b` of the facade is `k = 1`).
///
/// Method: LU with partial pivoting (numerics.md §6.2).
///
/// # Errors
///
/// - [`LinalgError::Singular`] with `op: "solve"` (`solve: matrix is singular`) if the LU of
///   some finite `A` meets an exactly zero pivot (numerics.md §6.4); near-singular matrices are
///   not detected. The check is made even when `k == 0`.
/// - [`LinalgError::Shape`] if a slice length does not match `batch`, `n` and `k`.
///
/// A matrix `A` with a non-finite entry is not an error: its solution is all NaN (numerics.md
/// §6.4, "NaN factorizations"; our reading for `solve`). Non-finite entries of `B` propagate
/// through the substitutions as usual.
pub fn solve(
    a: &[f64],
    b: &[f64],
    batch: usize,
    n: usize,
    k: usize,
) -> Result<Vec<f64>, LinalgError> {
    let a_len = matrix_len("solve", "a", a.len(), batch, n, n)?;
    let b_len = matrix_len("solve", "b", b.len(), batch, n, k)?;
    let mut out = Vec::with_capacity(b.len());
    for index in 0..batch {
        let a = matrix(a, index, a_len);
        let b = matrix(b, index, b_len);
        if !all_finite(a) {
            push_nan(&mut out, b_len);
            continue;
        }
        let lu = Lu::new(a, n);
        if lu.has_zero_pivot() {
            return Err(LinalgError::Singular { op: "solve" });
        }
        let mut x = to_mat(b, n, k);
        if n > 0 && k > 0 {
            let perm = PermRef::new_checked(&lu.forward, &lu.inverse, n);
            let req = lu_solve::solve_in_place_scratch::<usize, f64>(n, k, Par::Seq);
            with_stack(req, |stack| {
                lu_solve::solve_in_place(
                    lu.packed.as_ref(),
                    lu.packed.as_ref(),
                    perm,
                    x.as_mut(),
                    Par::Seq,
                    stack,
                );
            });
        }
        push_row_major(x.as_ref(), &mut out);
    }
    Ok(out)
}

/// Sign and natural log of the absolute determinant of each of `batch` row-major `n x n`
/// matrices, from LU with partial pivoting (numerics.md §6.2): `det = sign * exp(logabsdet)`.
///
/// - An exactly singular matrix (a zero LU pivot) gives `(0.0, -inf)` without an error
///   (numerics.md §6.4), so `sign * exp(logabsdet)` is exactly `0.0`.
/// - A matrix with a non-finite entry gives `(NaN, NaN)` (numerics.md §6.4).
/// - The empty matrix (`n == 0`) has determinant 1: `(1.0, 0.0)` (our choice, as NumPy).
/// - Otherwise `sign` is `+-1.0` and `logabsdet` is the sum of `ln |U[i, i]|` (it may still
///   overflow or underflow to `+-inf` for extreme finite input).
///
/// # Errors
///
/// [`LinalgError::Shape`] if `a.len() != batch * n * n`.
pub fn slogdet(a: &[f64], batch: usize, n: usize) -> Result<(Vec<f64>, Vec<f64>), LinalgError> {
    let a_len = matrix_len("slogdet", "a", a.len(), batch, n, n)?;
    let mut signs = Vec::with_capacity(batch);
    let mut logs = Vec::with_capacity(batch);
    for index in 0..batch {
        let a = matrix(a, index, a_len);
        let (sign, log) = if !all_finite(a) {
            (f64::NAN, f64::NAN)
        } else {
            let lu = Lu::new(a, n);
            if lu.has_zero_pivot() {
                (0.0, f64::NEG_INFINITY)
            } else {
                let mut sign = if lu.transpositions.is_multiple_of(2) {
                    1.0
                } else {
                    -1.0
                };
                let mut log = 0.0;
                for i in 0..n {
                    let u = lu.packed[(i, i)];
                    if u < 0.0 {
                        sign = -sign;
                    }
                    log += u.abs().ln();
                }
                (sign, log)
            }
        };
        signs.push(sign);
        logs.push(log);
    }
    Ok((signs, logs))
}
