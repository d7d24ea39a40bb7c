//! Householder QR (numerics.md §6.2, §6.3).

use faer::linalg::householder;
use faer::linalg::qr::no_pivoting::factor as qr_factor;
use faer::{Conj, Mat, Par};

use crate::batch::{all_finite, matrix, matrix_len, push_nan, push_row_major, to_mat, with_stack};
use crate::scale;
use crate::sign::negate;
use crate::LinalgError;

/// The QR decomposition `A = Q R` of each of `batch` row-major `m x n` matrices, by Householder
/// reflections (numerics.md §6.2). With `k = min(m, n)`:
///
/// - reduced (`complete == false`): `q` holds `batch` row-major `m x k` matrices with
///   orthonormal columns and `r` holds `batch` row-major upper-trapezoidal `k x n` matrices;
/// - complete (`complete == true`): `q` is `m x m` orthogonal and `r` is `m x n` (rows `k..m`
///   are zero).
///
/// Sign rule: `diag(R) >= 0`; a row of `R` with a negative diagonal entry is negated together
/// with the matching column of `Q` (numerics.md §6.3). A zero diagonal entry (rank-deficient
/// input) is left as computed. The extra columns `k..m` of a complete `Q` are left as the
/// Householder product gives them (our choice; §6.3 is silent): faer's reflectors follow
/// LAPACK's `larfg` convention (`beta = -sign(alpha) * norm`), so they match NumPy's up to
/// rounding.
///
/// A matrix with a non-finite entry gives all-NaN `q` and `r` (numerics.md §6.4).
///
/// # Errors
///
/// [`LinalgError::Shape`] if `a.len() != batch * m * n`.
pub fn qr(
    a: &[f64],
    batch: usize,
    m: usize,
    n: usize,
    complete: bool,
) -> Result<(Vec<f64>, Vec<f64>), LinalgError> {
    let a_len = matrix_len("qr", "a", a.len(), batch, m, n)?;
    let k = m.min(n);
    let q_cols = if complete { m } else { k };
    let r_rows = q_cols;
    let mut q_out = Vec::with_capacity(batch * m * q_cols);
    let mut r_out = Vec::with_capacity(batch * r_rows * n);
    for index in 0..batch {
        let a = matrix(a, index, a_len);
        if !all_finite(a) {
            push_nan(&mut q_out, m * q_cols);
            push_nan(&mut r_out, r_rows * n);
            continue;
        }
        let e = scale::exponent(a, false);
        let a = scale::scaled(a, e);
        let mut q = Mat::<f64>::identity(m, q_cols);
        let mut r = Mat::<f64>::zeros(r_rows, n);
        if k > 0 {
            let mut packed = to_mat(&a, m, n);
            let block = qr_factor::recommended_block_size::<f64>(m, n);
            let mut coeff = Mat::<f64>::zeros(block, k);
            let req =
                qr_factor::qr_in_place_scratch::<f64>(m, n, block, Par::Seq, Default::default());
            with_stack(req, |stack| {
                qr_factor::qr_in_place(
                    packed.as_mut(),
                    coeff.as_mut(),
                    Par::Seq,
                    stack,
                    Default::default(),
                );
            });
            // The Householder basis: unit lower trapezoidal m x k.
            let basis = Mat::from_fn(m, k, |i, j| match i.cmp(&j) {
                core::cmp::Ordering::Greater => packed[(i, j)],
                core::cmp::Ordering::Equal => 1.0,
                core::cmp::Ordering::Less => 0.0,
            });
            let req = householder::apply_block_householder_sequence_on_the_left_in_place_scratch::<
                f64,
            >(m, block, q_cols);
            with_stack(req, |stack| {
                householder::apply_block_householder_sequence_on_the_left_in_place_with_conj(
                    basis.as_ref(),
                    coeff.as_ref(),
                    Conj::No,
                    q.as_mut(),
                    Par::Seq,
                    stack,
                );
            });
            for i in 0..k {
                for j in i..n {
                    r[(i, j)] = packed[(i, j)];
                }
            }
            for i in 0..k {
                if r[(i, i)] < 0.0 {
                    negate(r.as_mut().row_mut(i).transpose_mut());
                    negate(q.as_mut().col_mut(i));
                }
            }
        }
        push_row_major(q.as_ref(), &mut q_out);
        let start = r_out.len();
        push_row_major(r.as_ref(), &mut r_out);
        scale::rescale(&mut r_out[start..], e);
    }
    Ok((q_out, r_out))
}
