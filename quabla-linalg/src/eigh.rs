//! Symmetric eigendecomposition (numerics.md §6.2, §6.3).

use faer::diag::Diag;
use faer::linalg::evd;
use faer::{Mat, MatMut, Par};

use crate::batch::{
    all_finite, is_identity, matrix, matrix_len, permute_leading_columns, sorted_spectrum,
    with_stack,
};
use crate::scale;
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
    let mut values = vec![0.0; batch * n];
    let mut vectors = vec![0.0; a.len()];
    for index in 0..batch {
        let a = matrix(a, index, a_len);
        let w = &mut values[index * n..(index + 1) * n];
        let v = &mut vectors[index * a_len..(index + 1) * a_len];
        let e = scale::exponent(a, false);
        if !all_finite(a) || !factor(&scale::scaled(a, e), n, w, v) {
            w.fill(f64::NAN);
            v.fill(f64::NAN);
        }
        scale::rescale(w, e);
    }
    Ok((values, vectors))
}

/// The eigendecomposition of one finite row-major `n x n` matrix: ascending eigenvalues into
/// `w`, and the eigenvectors into the row-major `v`; `false` if the solver did not converge.
/// (faer writes the vectors column-major: written straight through a row-major view, its
/// back-transformation is half again slower than the copy out.)
fn factor(a: &[f64], n: usize, w: &mut [f64], v: &mut [f64]) -> bool {
    if n == 0 {
        return true;
    }
    let sym = Mat::from_fn(n, n, |i, j| {
        let (x, y) = (a[i * n + j], a[j * n + i]);
        if x == y {
            x
        } else {
            0.5 * x + 0.5 * y
        }
    });
    let mut values = Diag::<f64>::zeros(n);
    let mut vectors = Mat::<f64>::zeros(n, n);
    let req = evd::self_adjoint_evd_scratch::<f64>(
        n,
        evd::ComputeEigenvectors::Yes,
        Par::Seq,
        Default::default(),
    );
    let ok = with_stack(req, |stack| {
        evd::self_adjoint_evd(
            sym.as_ref(),
            values.as_mut(),
            Some(vectors.as_mut()),
            Par::Seq,
            stack,
            Default::default(),
        )
        .is_ok()
    });
    let Some(order) = ok
        .then(|| sorted_spectrum(values.column_vector(), false, w))
        .flatten()
    else {
        return false;
    };
    if !is_identity(&order) {
        permute_leading_columns(vectors.as_mut(), &order);
    }
    let mut out = MatMut::from_row_major_slice_mut(v, n, n);
    out.copy_from(&vectors);
    apply_to_columns(out, None, 0..n);
    true
}
