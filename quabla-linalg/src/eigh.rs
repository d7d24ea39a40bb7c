//! Symmetric eigendecomposition (numerics.md §6.2, §6.3).

use faer::diag::Diag;
use faer::linalg::evd;
use faer::{Mat, Par};

use crate::batch::{all_finite, matrix, matrix_len, push_nan, push_row_major, with_stack};
use crate::sign::apply_to_columns;
use crate::LinalgError;

/// Eigenvalues and eigenvectors of the symmetric part `(A + A^T)/2` of each of `batch` row-major
/// `n x n` matrices. Returns `(values, vectors)`: `values` holds `batch` rows of `n` eigenvalues
/// in ascending order; `vectors` holds `batch` row-major `n x n` matrices whose **columns** are
/// the matching unit eigenvectors, so that `A_sym = V diag(w) V^T`.
///
/// - The symmetric part is formed entry by entry as `(a_ij + a_ji)/2`, exactly `a_ij` when the
///   two entries are equal (numerics.md §6.2: "symmetric eigensolver on `(a + a^T)/2`").
/// - Each eigenvector is multiplied by `+-1` so that its largest-magnitude component is positive,
///   the first such component on exact ties ([`crate::largest_magnitude_sign`], numerics.md
///   §6.3). Repeated eigenvalues leave the basis of their eigenspace otherwise unspecified.
/// - A matrix with a non-finite entry, or one on which the solver does not converge, gives all
///   NaN values and vectors (numerics.md §6.4).
///
/// # Errors
///
/// [`LinalgError::Shape`] if `a.len() != batch * n * n`.
pub fn eigh(a: &[f64], batch: usize, n: usize) -> Result<(Vec<f64>, Vec<f64>), LinalgError> {
    let a_len = matrix_len("eigh", "a", a.len(), batch, n, n)?;
    let mut values = Vec::with_capacity(batch * n);
    let mut vectors = Vec::with_capacity(a.len());
    for index in 0..batch {
        let a = matrix(a, index, a_len);
        if !all_finite(a) {
            push_nan(&mut values, n);
            push_nan(&mut vectors, a_len);
            continue;
        }
        if n == 0 {
            continue;
        }
        let sym = Mat::from_fn(n, n, |i, j| {
            let (x, y) = (a[i * n + j], a[j * n + i]);
            if x == y {
                x
            } else {
                0.5 * x + 0.5 * y
            }
        });
        let mut w = Diag::<f64>::zeros(n);
        let mut v = Mat::<f64>::zeros(n, n);
        let req = evd::self_adjoint_evd_scratch::<f64>(
            n,
            evd::ComputeEigenvectors::Yes,
            Par::Seq,
            Default::default(),
        );
        let ok = with_stack(req, |stack| {
            evd::self_adjoint_evd(
                sym.as_ref(),
                w.as_mut(),
                Some(v.as_mut()),
                Par::Seq,
                stack,
                Default::default(),
            )
            .is_ok()
        });
        let w: Vec<f64> = w.column_vector().iter().copied().collect();
        if !ok || !all_finite(&w) {
            push_nan(&mut values, n);
            push_nan(&mut vectors, a_len);
            continue;
        }
        // faer returns ascending eigenvalues; reorder defensively in case a version does not.
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&i, &j| w[i].total_cmp(&w[j]));
        let mut v = Mat::from_fn(n, n, |i, j| v[(i, order[j])]);
        values.extend(order.iter().map(|&i| w[i]));
        apply_to_columns(v.as_mut(), None, 0..n);
        push_row_major(v.as_ref(), &mut vectors);
    }
    Ok((values, vectors))
}
