//! Singular value decomposition (numerics.md §6.2, §6.3).

use faer::diag::Diag;
use faer::linalg::svd as faer_svd;
use faer::{Mat, Par};

use crate::batch::{all_finite, matrix, matrix_len, push_nan, push_row_major, to_mat, with_stack};
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
    let mut u_out = Vec::with_capacity(batch * m * u_cols);
    let mut s_out = Vec::with_capacity(batch * k);
    let mut vh_out = Vec::with_capacity(batch * v_cols * n);
    for index in 0..batch {
        let a = matrix(a, index, a_len);
        let nan = |u_out: &mut Vec<f64>, s_out: &mut Vec<f64>, vh_out: &mut Vec<f64>| {
            push_nan(u_out, m * u_cols);
            push_nan(s_out, k);
            push_nan(vh_out, v_cols * n);
        };
        if !all_finite(a) {
            nan(&mut u_out, &mut s_out, &mut vh_out);
            continue;
        }
        if k == 0 {
            // Nothing to decompose: the full factors are identities (any orthogonal matrix
            // would do; the identity already satisfies the sign rule).
            push_row_major(Mat::<f64>::identity(m, u_cols).as_ref(), &mut u_out);
            push_row_major(Mat::<f64>::identity(v_cols, n).as_ref(), &mut vh_out);
            continue;
        }
        let a = to_mat(a, m, n);
        let mut s = Diag::<f64>::zeros(k);
        let mut u = Mat::<f64>::zeros(m, u_cols);
        let mut v = Mat::<f64>::zeros(n, v_cols);
        let compute = if full {
            faer_svd::ComputeSvdVectors::Full
        } else {
            faer_svd::ComputeSvdVectors::Thin
        };
        let req =
            faer_svd::svd_scratch::<f64>(m, n, compute, compute, Par::Seq, Default::default());
        let ok = with_stack(req, |stack| {
            faer_svd::svd(
                a.as_ref(),
                s.as_mut(),
                Some(u.as_mut()),
                Some(v.as_mut()),
                Par::Seq,
                stack,
                Default::default(),
            )
            .is_ok()
        });
        let s: Vec<f64> = s.column_vector().iter().copied().collect();
        if !ok || !all_finite(&s) {
            nan(&mut u_out, &mut s_out, &mut vh_out);
            continue;
        }
        // faer returns nonincreasing values; reorder defensively in case a version does not.
        let mut order: Vec<usize> = (0..k).collect();
        order.sort_by(|&i, &j| s[j].total_cmp(&s[i]));
        // Copy the factors only when the order changes (never, with the faer of today).
        if order.iter().enumerate().any(|(i, &o)| i != o) {
            let pick = |j: usize| if j < k { order[j] } else { j };
            u = Mat::from_fn(m, u_cols, |i, j| u[(i, pick(j))]);
            v = Mat::from_fn(n, v_cols, |i, j| v[(i, pick(j))]);
        }
        s_out.extend(order.iter().map(|&i| s[i]));
        apply_to_columns(u.as_mut(), Some(v.as_mut()), 0..k);
        apply_to_columns(u.as_mut(), None, k..u_cols);
        apply_to_columns(v.as_mut(), None, k..v_cols);
        push_row_major(u.as_ref(), &mut u_out);
        push_row_major(v.as_ref().transpose(), &mut vh_out);
    }
    Ok((u_out, s_out, vh_out))
}
