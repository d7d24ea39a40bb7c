//! Triangular solves by substitution (numerics.md §6.2).

use faer::linalg::triangular_solve as tri;
use faer::{Mat, Par};

use crate::batch::{matrix, matrix_len, push_row_major, to_mat};
use crate::scale;
use crate::LinalgError;

/// Solves `op(A) X = B` for each of `batch` pairs by forward/back substitution, where `a` holds
/// `batch` row-major `n x n` matrices, `b` holds `batch` row-major `n x k` right-hand sides, and
/// the result is `batch` row-major `n x k` solutions.
///
/// - Only the triangle of `A` named by `lower` is read (the diagonal included unless
///   `unit_diagonal`); the other entries may hold anything, NaN included (numerics.md §6.2,
///   api.md `solve_triangular`).
/// - `transpose_a` solves `A^T X = B` with the same stored triangle of `A` (SciPy's `trans=1`:
///   `lower` describes `A`, not `A^T`).
/// - `unit_diagonal` takes the diagonal of `A` to be all ones without reading it.
/// - A zero on the read diagonal is not an error (only LU pivots raise, numerics.md §6.4): the
///   division by zero gives infinities/NaN, as do non-finite entries, which propagate.
///
/// # Errors
///
/// [`LinalgError::Shape`] if a slice length does not match `batch`, `n` and `k`.
#[allow(clippy::too_many_arguments)]
pub fn triangular_solve(
    a: &[f64],
    b: &[f64],
    batch: usize,
    n: usize,
    k: usize,
    lower: bool,
    transpose_a: bool,
    unit_diagonal: bool,
) -> Result<Vec<f64>, LinalgError> {
    let a_len = matrix_len("triangular_solve", "a", a.len(), batch, n, n)?;
    let b_len = matrix_len("triangular_solve", "b", b.len(), batch, n, k)?;
    let mut out = Vec::with_capacity(b.len());
    for index in 0..batch {
        let a = matrix(a, index, a_len);
        let b = matrix(b, index, b_len);
        // The triangle read decides the scale (never with a unit diagonal, which does not
        // scale): `(2^-e A) y = 2^-f b` gives `x = 2^(f-e) y`, `b` scaled on its own.
        // Row `i` of the triangle read: columns `..=i` of a lower one, `i..` of an upper one.
        let row = |i: usize| {
            if lower {
                &a[i * n..i * n + i + 1]
            } else {
                &a[i * n + i..(i + 1) * n]
            }
        };
        let e = if unit_diagonal {
            None
        } else {
            scale::exponent_of_parts((0..n).map(row), false)
        };
        let a = scale::scaled(a, e);
        let f = e.and_then(|_| scale::exponent(b, false));
        let mut x = to_mat(&scale::scaled(b, f), n, k);
        if n > 0 && k > 0 {
            // A clean copy of the read triangle, zeros elsewhere, so that nothing in the other
            // triangle (NaN included) can reach the result whatever faer's blocking reads.
            let t = Mat::from_fn(n, n, |i, j| {
                if i == j {
                    if unit_diagonal {
                        1.0
                    } else {
                        a[i * n + j]
                    }
                } else if (i > j) == lower {
                    a[i * n + j]
                } else {
                    0.0
                }
            });
            let t = if transpose_a {
                t.as_ref().transpose()
            } else {
                t.as_ref()
            };
            if lower != transpose_a {
                tri::solve_lower_triangular_in_place(t, x.as_mut(), Par::Seq);
            } else {
                tri::solve_upper_triangular_in_place(t, x.as_mut(), Par::Seq);
            }
        }
        let start = out.len();
        push_row_major(x.as_ref(), &mut out);
        scale::rescale(&mut out[start..], e.map(|e| f.unwrap_or(0) - e));
    }
    Ok(out)
}
