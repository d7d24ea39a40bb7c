//! Host linear-algebra kernels of the Quabla CPU backend.
//!
//! This crate owns the float64 kernels that the CPU backend calls for the linear-algebra
//! primitives (`solve`, `triangular_solve`, `cholesky`, and the `linalg` kinds `det_sign`,
//! `log_abs_det`, `eigh_*`, `qr_*`, `svd_*`). Every decomposition runs on top of
//! [`faer`] (numerics.md §6.2) and then applies the uniqueness rules of numerics.md §6.3, so the
//! results do not depend on the method beyond rounding. It also owns the derivative rules of
//! these primitives, as IR builders that `quabla-autodiff` delegates to ([`rules`]); it knows
//! nothing about tracing or the facade.
//!
//! # Calling convention
//!
//! Every function takes contiguous **row-major** `&[f64]` inputs holding `batch` matrices back to
//! back (`batch` is the product of the leading axes `[...]` of an `[..., m, n]` array, see
//! [`batch_size`]) and returns row-major `Vec<f64>` outputs laid out the same way. Operands that
//! share a batch (`a` and `b` of [`solve`]) must already be broadcast to the same `batch` by the
//! caller. A slice whose length is not `batch * rows * cols` gives [`LinalgError::Shape`]; no
//! function panics on any value (NaN, infinities, zero or singular matrices, empty dimensions).
//!
//! ```
//! // Two 2x2 systems (batch = 2, n = 2, k = 1), row-major.
//! let a = [4.0, 1.0, 1.0, 3.0, 2.0, 0.0, 0.0, 2.0];
//! let b = [1.0, 2.0, 2.0, 4.0];
//! let x = quabla_linalg::solve(&a, &b, 2, 2, 1)?;
//! assert!((x[0] - 1.0 / 11.0).abs() < 1e-15 && (x[1] - 7.0 / 11.0).abs() < 1e-15);
//! assert_eq!(&x[2..], &[1.0, 2.0]);
//! let (sign, logabsdet) = quabla_linalg::slogdet(&[1.0, 2.0, 2.0, 4.0], 1, 2)?;
//! assert_eq!((sign[0], logabsdet[0]), (0.0, f64::NEG_INFINITY));
//! # Ok::<(), quabla_linalg::LinalgError>(())
//! ```
//!
//! # Conventions (numerics.md §6)
//!
//! | Kernel | Result |
//! | --- | --- |
//! | [`solve`] | LU with partial pivoting; an exactly zero pivot is [`LinalgError::Singular`] (§6.4) |
//! | [`slogdet`] | `(sign, log|det|)` from the same LU; singular: `(0, -inf)`; non-finite: `(nan, nan)` |
//! | [`triangular_solve`] | substitution reading one triangle of `a`; never raises |
//! | [`cholesky`] | lower factor reading the lower triangle; not positive definite: all NaN |
//! | [`eigh`] | of `(a + a^T)/2`; ascending eigenvalues; vector sign rule of §6.3 |
//! | [`qr`] | Householder; `diag(R) >= 0` |
//! | [`svd`] | descending singular values; sign rule on the columns of `U`, rows of `Vh` follow |
//!
//! A matrix with a non-finite entry (in the part a kernel reads) gives an all-NaN factorization
//! (§6.4) rather than whatever the iteration would produce on it.
//!
//! # Determinism
//!
//! Every faer call runs with [`faer::Par::Seq`], whatever faer's global parallelism setting is, so
//! results are bit-for-bit reproducible from run to run and do not depend on the thread count
//! (numerics.md §1.5 asks eager and `jit` execution to agree bit for bit on the CPU). The one
//! split over threads, [`LuFactors::solve_on`] (or [`LuFactors::solve_with`] on the caller's
//! [`Threads`]), runs whole faer calls on fixed panels of
//! right-hand-side columns ([`SOLVE_PANEL`]), which are the same for every thread count.

mod batch;
mod cholesky;
mod eigh;
mod lu;
mod qr;
pub mod rules;
mod scale;
mod sign;
mod svd;
mod triangular;

pub use batch::batch_size;
pub use cholesky::cholesky;
pub use eigh::eigh;
pub use lu::{lu_factor, slogdet, solve, LuFactors, RayonThreads, Threads, SOLVE_PANEL};
pub use qr::qr;
pub use sign::{largest_magnitude_sign, SIGN_RULE};
pub use svd::{svd, SvdFactors};
pub use triangular::triangular_solve;

/// Errors of the linear-algebra kernels.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinalgError {
    /// An exactly zero LU pivot (errors.md §2.9, LA1; numerics.md §6.4).
    #[error("{op}: matrix is singular")]
    Singular {
        /// The operation that factorized the matrix, e.g. `"solve"`.
        op: &'static str,
    },
    /// A slice length that does not match the stated batch and matrix dimensions.
    #[error("{message}")]
    Shape {
        /// What did not match, naming the kernel and the operand.
        message: String,
    },
}
