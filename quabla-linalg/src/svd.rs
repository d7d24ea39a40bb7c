//! Singular value decomposition (numerics.md §6.2, §6.3).

use faer::diag::Diag;
use faer::linalg::svd as faer_svd;
use faer::reborrow::ReborrowMut;
use faer::{Mat, MatMut, MatRef, Par};

use crate::batch::{
    all_finite, is_identity, matrix, matrix_len, permute_leading_columns, sorted_spectrum,
    with_stack,
};
use crate::scale;
use crate::sign::apply_to_columns;
use crate::LinalgError;

/// `(u, s, vh)`, each row-major over the batch, as returned by [`svd`].
pub type SvdFactors = (Vec<f64>, Vec<f64>, Vec<f64>);

/// The SVD `A = U diag(s) Vh` of each of `batch` row-major `m x n` matrices. With
/// `k = min(m, n)`, returns `(u, s, vh)`:
///
/// - reduced (`full == false`): `u` is `batch` row-major `m x k`, `s` is `batch` rows of `k`,
///   `vh` is `batch` row-major `k x n`;
/// - full (`full == true`): `u` is `m x m` and `vh` is `n x n`, both orthogonal.
///
/// Conventions (numerics.md §6.3):
///
/// - singular values are nonnegative and descending;
/// - each column `j < k` of `U` is multiplied by `+-1` so that its largest-magnitude component
///   is positive (the first such component on exact ties), and row `j` of `Vh` is multiplied by
///   the same sign, so `U diag(s) Vh` is unchanged;
/// - with `full`, the extra columns `k..m` of `U` and the extra rows `k..n` of `Vh` follow the
///   same rule individually (each row of `Vh` judged by its own components).
///
/// Singular vectors of repeated (including zero) singular values are otherwise unspecified.
/// A matrix with a non-finite entry, or one on which the iteration does not converge, gives all
/// NaN `u`, `s` and `vh` (numerics.md §6.4).
///
/// # Errors
///
/// [`LinalgError::Shape`] if `a.len() != batch * m * n`.
pub fn svd(
    a: &[f64],
    batch: usize,
    m: usize,
    n: usize,
    full: bool,
) -> Result<SvdFactors, LinalgError> {
    let a_len = matrix_len("svd", "a", a.len(), batch, m, n)?;
    let k = m.min(n);
    let (u_cols, v_cols) = if full { (m, n) } else { (k, k) };
    let (u_len, vh_len) = (m * u_cols, v_cols * n);
    let mut u_out = vec![0.0; batch * u_len];
    let mut s_out = vec![0.0; batch * k];
    let mut vh_out = vec![0.0; batch * vh_len];
    for index in 0..batch {
        let a = matrix(a, index, a_len);
        let u = &mut u_out[index * u_len..(index + 1) * u_len];
        let s = &mut s_out[index * k..(index + 1) * k];
        let vh = &mut vh_out[index * vh_len..(index + 1) * vh_len];
        let e = scale::exponent(a, false);
        if !all_finite(a) || !factor(&scale::scaled(a, e), m, n, full, u, s, vh) {
            for out in [u, s, vh] {
                out.fill(f64::NAN);
            }
        }
        scale::rescale(s, e);
    }
    Ok((u_out, s_out, vh_out))
}

/// The SVD of one finite row-major `m x n` matrix into its row-major outputs (sized as in
/// [`svd`]); `false` if faer's iteration did not converge.
///
/// faer is given the matrix as its transpose, `B = Aᵀ`, which is what `a`'s row-major buffer
/// already is when read by columns: no copy in. From `B = U_B S V_Bᵀ`, `A = V_B S U_Bᵀ`, so `U`
/// is faer's `V_B` (written through a row-major view of `u`) and `Vh = U_Bᵀ` is faer's `U_B`
/// read by columns, which is `vh`'s row-major layout: no copy out either.
fn factor(
    a: &[f64],
    m: usize,
    n: usize,
    full: bool,
    u: &mut [f64],
    s: &mut [f64],
    vh: &mut [f64],
) -> bool {
    let k = m.min(n);
    let (u_cols, v_cols) = if full { (m, n) } else { (k, k) };
    let mut u = MatMut::from_row_major_slice_mut(u, m, u_cols);
    let mut v = MatMut::from_column_major_slice_mut(vh, n, v_cols);
    if k == 0 {
        // Nothing to decompose: the full factors are identities (any orthogonal matrix would
        // do; the identity already satisfies the sign rule).
        u.copy_from(Mat::<f64>::identity(m, u_cols));
        v.copy_from(Mat::<f64>::identity(n, v_cols));
        return true;
    }
    let b = MatRef::from_column_major_slice(a, n, m);
    let mut values = Diag::<f64>::zeros(k);
    let compute = if full {
        faer_svd::ComputeSvdVectors::Full
    } else {
        faer_svd::ComputeSvdVectors::Thin
    };
    let req = faer_svd::svd_scratch::<f64>(n, m, compute, compute, Par::Seq, Default::default());
    let ok = with_stack(req, |stack| {
        faer_svd::svd(
            b,
            values.as_mut(),
            Some(v.rb_mut()),
            Some(u.rb_mut()),
            Par::Seq,
            stack,
            Default::default(),
        )
        .is_ok()
    });
    let Some(order) = ok
        .then(|| sorted_spectrum(values.column_vector(), true, s))
        .flatten()
    else {
        return false;
    };
    if !is_identity(&order) {
        permute_leading_columns(u.rb_mut(), &order);
        permute_leading_columns(v.rb_mut(), &order);
    }
    apply_to_columns(u.rb_mut(), Some(v.rb_mut()), 0..k);
    apply_to_columns(u, None, k..u_cols);
    apply_to_columns(v, None, k..v_cols);
    true
}
