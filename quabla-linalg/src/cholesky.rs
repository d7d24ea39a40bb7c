//! Lower Cholesky factorization (numerics.md §6.2).

use faer::linalg::cholesky::llt::factor as llt;
use faer::{Mat, Par};

use crate::batch::{matrix, matrix_len, push_nan, push_row_major, with_stack};
use crate::scale;
use crate::LinalgError;

/// The lower Cholesky factor `L` (`A = L L^T`) of each of `batch` row-major `n x n` matrices,
/// returned as `batch` row-major `n x n` matrices with exact zeros above the diagonal.
///
/// - Only the lower triangle of `A` (diagonal included) is read, as NumPy/LAPACK `potrf('L')`
///   does; the strict upper triangle may hold anything, NaN included (our choice; numerics.md
///   §6.2 says "lower Cholesky").
/// - A matrix that is not (numerically) positive definite, including a semi-definite one whose
///   factorization meets a zero pivot, gives an all-NaN `n x n` result instead of an error (our
///   choice, as JAX; numerics.md §6.4 raises only for LU pivots).
/// - A non-finite entry in the lower triangle gives an all-NaN result (numerics.md §6.4).
///
/// # Errors
///
/// [`LinalgError::Shape`] if `a.len() != batch * n * n`.
pub fn cholesky(a: &[f64], batch: usize, n: usize) -> Result<Vec<f64>, LinalgError> {
    let a_len = matrix_len("cholesky", "a", a.len(), batch, n, n)?;
    let mut out = Vec::with_capacity(a.len());
    for index in 0..batch {
        let a = matrix(a, index, a_len);
        let lower_finite = (0..n).all(|i| (0..=i).all(|j| a[i * n + j].is_finite()));
        if !lower_finite {
            push_nan(&mut out, a_len);
            continue;
        }
        // Only the lower triangle is read, so only it decides the scale; `e` is even, so the
        // factor of `2^-e A` is `2^(-e/2) L`.
        let e = scale::exponent_of_parts((0..n).map(|i| &a[i * n..i * n + i + 1]), true);
        let a = scale::scaled(a, e);
        let mut l = Mat::from_fn(n, n, |i, j| if j <= i { a[i * n + j] } else { 0.0 });
        let req = llt::cholesky_in_place_scratch::<f64>(n, Par::Seq, Default::default());
        let ok = with_stack(req, |stack| {
            llt::cholesky_in_place(
                l.as_mut(),
                Default::default(),
                Par::Seq,
                stack,
                Default::default(),
            )
            .is_ok()
        });
        // A pivot can be positive yet produce overflowing entries; treat those like failure.
        if !ok || !(0..n).all(|i| (0..=i).all(|j| l[(i, j)].is_finite())) {
            push_nan(&mut out, a_len);
            continue;
        }
        for j in 0..n {
            for i in 0..j {
                l[(i, j)] = 0.0;
            }
        }
        let start = out.len();
        push_row_major(l.as_ref(), &mut out);
        scale::rescale(&mut out[start..], e.map(|e| e / 2));
    }
    Ok(out)
}
