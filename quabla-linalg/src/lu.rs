//! LU with partial pivoting: [`LuFactors`], and [`solve`] and [`slogdet`] on them
//! (numerics.md §6.2, §6.4).
//!
//! A caller that solves with one matrix several times (both ways round) and takes its
//! determinant factors it once with [`lu_factor`] and reuses the factors: every result is the
//! same bits as the one-shot [`solve`] and [`slogdet`], which are those factors used once.

use faer::linalg::lu::partial_pivoting::{factor, solve as lu_solve};
use faer::perm::PermRef;
use faer::{Mat, MatMut, MatRef, Par};
use std::sync::Mutex;

use crate::batch::{matrix, matrix_len, push_nan, to_mat, with_stack};
use crate::scale;
use crate::LinalgError;

/// Right-hand sides are solved in panels of at most this many columns, one faer call per
/// panel. faer's blocking follows the width of what it is given, so a column's bits depend on
/// its panel; with a fixed width they are the same whether the panels run one after another
/// or on several threads. (64 columns keep faer's products efficient; up to 64 right-hand
/// sides are one panel, as one call.)
pub const SOLVE_PANEL: usize = 64;

/// Right-hand sides (`n * k` elements) below which the panels run one after another: a
/// smaller solve takes less time than handing panels to other threads.
const PARALLEL_SOLVE_ELEMENTS: usize = 1 << 14;

/// Threads a kernel splits its work over.
pub trait Threads: Sync {
    /// How many parts are worth making.
    fn count(&self) -> usize;
    /// Calls `part(p)` once for every `p` in `0..parts`, on whatever threads it has, and
    /// returns when all have returned.
    fn run(&self, parts: usize, part: &(dyn Fn(usize) + Sync));
}

/// `count` threads of rayon's pool (the calling thread takes the first part).
#[derive(Clone, Copy, Debug)]
pub struct RayonThreads(pub usize);

impl Threads for RayonThreads {
    fn count(&self) -> usize {
        self.0
    }

    fn run(&self, parts: usize, part: &(dyn Fn(usize) + Sync)) {
        rayon::in_place_scope(|s| {
            for p in 1..parts {
                s.spawn(move |_| part(p));
            }
            if parts > 0 {
                part(0);
            }
        });
    }
}

/// A packed `P A = L U` factorization of one square matrix.
struct Lu {
    /// The factors are those of `2^-scale A` ([`crate::scale`]) when `A` had to be scaled.
    scale: Option<i32>,
    /// Strictly lower part: `L` (unit diagonal implied); upper part with diagonal: `U`.
    packed: Mat<f64>,
    forward: Vec<usize>,
    inverse: Vec<usize>,
    transpositions: usize,
}

impl Lu {
    /// Factorizes a finite row-major `n x n` matrix as `2^-scale a` ([`crate::scale`]).
    fn new(a: &[f64], n: usize, scale: Option<i32>) -> Lu {
        let mut packed = to_mat(&scale::scaled(a, scale), n, n);
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
            scale,
            packed,
            forward,
            inverse,
            transpositions,
        }
    }

    /// Solves with the row-major `n x k` right-hand side `b` into the row-major `x`, one
    /// [`SOLVE_PANEL`]-column panel at a time, the panels split over `threads`.
    fn solve_panels(
        &self,
        b: &[f64],
        x: &mut [f64],
        k: usize,
        transpose: bool,
        threads: &dyn Threads,
    ) {
        let n = self.packed.nrows();
        let panels: Vec<(usize, usize)> = (0..k)
            .step_by(SOLVE_PANEL)
            .map(|c| (c, (c + SOLVE_PANEL).min(k) - c))
            .collect();
        let solve_panel = |&(col, width): &(usize, usize)| -> Mat<f64> {
            let mut p = MatRef::from_row_major_slice(b, n, k)
                .subcols(col, width)
                .to_owned();
            self.solve_in_place(p.as_mut(), transpose);
            p
        };
        let count = threads.count();
        let solved: Vec<Mat<f64>> =
            if count <= 1 || panels.len() == 1 || n * k < PARALLEL_SOLVE_ELEMENTS {
                panels.iter().map(solve_panel).collect()
            } else {
                let shares: Vec<&[(usize, usize)]> =
                    panels.chunks(panels.len().div_ceil(count)).collect();
                let solved: Vec<Mutex<Vec<Mat<f64>>>> =
                    shares.iter().map(|_| Mutex::new(Vec::new())).collect();
                threads.run(shares.len(), &|s| {
                    let mine: Vec<Mat<f64>> = shares[s].iter().map(solve_panel).collect();
                    *solved[s].lock().unwrap_or_else(|p| p.into_inner()) = mine;
                });
                solved
                    .into_iter()
                    .flat_map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
                    .collect()
            };
        let mut x = MatMut::from_row_major_slice_mut(x, n, k);
        for (&(col, width), p) in panels.iter().zip(&solved) {
            x.as_mut().subcols_mut(col, width).copy_from(p);
        }
    }

    /// Solves `A X = B` (or `Aᵀ X = B`) in place for the column-major `x`.
    fn solve_in_place(&self, x: MatMut<'_, f64>, transpose: bool) {
        let (n, k) = (x.nrows(), x.ncols());
        let perm = PermRef::new_checked(&self.forward, &self.inverse, n);
        let packed = self.packed.as_ref();
        if transpose {
            let req = lu_solve::solve_transpose_in_place_scratch::<usize, f64>(n, k, Par::Seq);
            with_stack(req, |stack| {
                lu_solve::solve_transpose_in_place(packed, packed, perm, x, Par::Seq, stack);
            });
        } else {
            let req = lu_solve::solve_in_place_scratch::<usize, f64>(n, k, Par::Seq);
            with_stack(req, |stack| {
                lu_solve::solve_in_place(packed, packed, perm, x, Par::Seq, stack);
            });
        }
    }

    /// Whether some pivot `U[i, i]` is exactly zero. Pivots after the first zero one may be NaN
    /// (faer divides by the zero pivot and carries on), which does not matter: any exactly zero
    /// pivot makes the matrix singular, exactly as LAPACK's `getrf` reports `info > 0`.
    fn has_zero_pivot(&self) -> bool {
        (0..self.packed.nrows()).any(|i| self.packed[(i, i)] == 0.0)
    }
}

/// The LU factorizations (partial pivoting) of a batch of row-major `n x n` matrices, from
/// [`lu_factor`]. A matrix with a non-finite entry has no factors: it solves to NaN and its
/// `slogdet` is `(NaN, NaN)` (numerics.md §6.4).
#[derive(Debug)]
pub struct LuFactors {
    n: usize,
    /// One entry per matrix of the batch; `None` for a matrix with a non-finite entry.
    mats: Vec<Option<Lu>>,
}

impl std::fmt::Debug for Lu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lu")
            .field("n", &self.packed.nrows())
            .field("transpositions", &self.transpositions)
            .finish_non_exhaustive()
    }
}

/// Factors each of `batch` row-major `n x n` matrices held back to back in `a`.
///
/// # Errors
///
/// [`LinalgError::Shape`] if `a.len() != batch * n * n`.
pub fn lu_factor(a: &[f64], batch: usize, n: usize) -> Result<LuFactors, LinalgError> {
    let a_len = matrix_len("lu", "a", a.len(), batch, n, n)?;
    let mats = (0..batch)
        .map(|index| {
            let a = matrix(a, index, a_len);
            // One pass over the matrix decides both whether it is finite and its scale.
            scale::largest_magnitude(a)
                .map(|largest| Lu::new(a, n, scale::exponent_for(largest, false)))
        })
        .collect();
    Ok(LuFactors { n, mats })
}

impl LuFactors {
    /// The number of matrices factored.
    pub fn batch(&self) -> usize {
        self.mats.len()
    }

    /// The order `n` of each matrix.
    pub fn order(&self) -> usize {
        self.n
    }

    /// Solves `A X = B` (or `Aᵀ X = B` when `transpose`) for each matrix: `b` holds one
    /// row-major `n x k` right-hand side per matrix, and so does the result. The same as
    /// [`LuFactors::solve_on`] with one thread.
    ///
    /// # Errors
    ///
    /// - [`LinalgError::Singular`] with `op: "solve"` at the first finite matrix with an exactly
    ///   zero pivot (numerics.md §6.4), checked even when `k == 0`.
    /// - [`LinalgError::Shape`] if `b.len() != batch * n * k`.
    pub fn solve(&self, b: &[f64], k: usize, transpose: bool) -> Result<Vec<f64>, LinalgError> {
        self.solve_on(b, k, transpose, 1)
    }

    /// [`LuFactors::solve`] with the [`SOLVE_PANEL`]-column panels of each right-hand side
    /// spread over `threads` threads of rayon's pool. The panels are the same for every thread
    /// count, and so are the bits of the result.
    ///
    /// # Errors
    ///
    /// As [`LuFactors::solve`].
    pub fn solve_on(
        &self,
        b: &[f64],
        k: usize,
        transpose: bool,
        threads: usize,
    ) -> Result<Vec<f64>, LinalgError> {
        self.solve_with(b, k, transpose, &RayonThreads(threads))
    }

    /// [`LuFactors::solve_on`] with the panels spread over the caller's [`Threads`] (an
    /// executor's own helper threads).
    ///
    /// # Errors
    ///
    /// As [`LuFactors::solve`].
    pub fn solve_with(
        &self,
        b: &[f64],
        k: usize,
        transpose: bool,
        threads: &dyn Threads,
    ) -> Result<Vec<f64>, LinalgError> {
        let n = self.n;
        let b_len = matrix_len("solve", "b", b.len(), self.batch(), n, k)?;
        let mut out = Vec::with_capacity(b.len());
        for (index, lu) in self.mats.iter().enumerate() {
            let b = matrix(b, index, b_len);
            let Some(lu) = lu else {
                push_nan(&mut out, b_len);
                continue;
            };
            if lu.has_zero_pivot() {
                return Err(LinalgError::Singular { op: "solve" });
            }
            let start = out.len();
            out.resize(start + b_len, 0.0);
            if n > 0 && k > 0 {
                // `(2^-e A) y = 2^-f b` (or its transpose) gives `x = 2^(f-e) y`; `b` is scaled
                // on its own, so that a subnormal right-hand side keeps its digits.
                let f = if lu.scale.is_some() {
                    scale::exponent(b, false)
                } else {
                    None
                };
                lu.solve_panels(
                    &scale::scaled(b, f),
                    &mut out[start..],
                    k,
                    transpose,
                    threads,
                );
                let back = match (f, lu.scale) {
                    (None, None) => None,
                    (f, e) => Some(f.unwrap_or(0) - e.unwrap_or(0)),
                };
                scale::rescale(&mut out[start..], back);
            }
        }
        Ok(out)
    }

    /// Sign and natural log of the absolute determinant of each matrix (see [`slogdet`]).
    pub fn slogdet(&self) -> (Vec<f64>, Vec<f64>) {
        self.mats
            .iter()
            .map(|lu| match lu {
                None => (f64::NAN, f64::NAN),
                Some(lu) if lu.has_zero_pivot() => (0.0, f64::NEG_INFINITY),
                Some(lu) => {
                    let mut sign = if lu.transpositions.is_multiple_of(2) {
                        1.0
                    } else {
                        -1.0
                    };
                    let mut log = 0.0;
                    for i in 0..self.n {
                        let u = lu.packed[(i, i)];
                        if u < 0.0 {
                            sign = -sign;
                        }
                        log += u.abs().ln();
                    }
                    if let Some(e) = lu.scale {
                        // det A = 2^(n e) det(2^-e A).
                        log += (self.n as f64) * f64::from(e) * std::f64::consts::LN_2;
                    }
                    (sign, log)
                }
            })
            .unzip()
    }
}

/// Solves `A X = B` for each of `batch` pairs: `a` holds `batch` row-major `n x n` matrices,
/// `b` holds `batch` row-major `n x k` right-hand sides, and the result is `batch` row-major
/// `n x k` solutions (a rank-1 `b` of the facade is `k = 1`).
///
/// Method: LU with partial pivoting (numerics.md §6.2), [`lu_factor`] then
/// [`LuFactors::solve`].
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
    matrix_len("solve", "a", a.len(), batch, n, n)?;
    matrix_len("solve", "b", b.len(), batch, n, k)?;
    lu_factor(a, batch, n)?.solve(b, k, false)
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
    matrix_len("slogdet", "a", a.len(), batch, n, n)?;
    Ok(lu_factor(a, batch, n)?.slogdet())
}
