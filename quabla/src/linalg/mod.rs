//! `qb::linalg` (api.md §17): the dense functions of numerics.md §6 (`dense`, `norm`), the
//! compositions a port reaches for (`expm`; `lu`: `lu_factor`/`lu_solve`), the matrix-free
//! Krylov solvers `cg` and `gmres` (`krylov`) and the root finder [`crate::newton`]
//! (`newton`), which share `iterative`. Derivatives, batching and kernels of the dense
//! functions belong to the IR ops (`quabla-linalg`'s rules and the CPU backend); the solvers'
//! derivatives are implicit rules written with `custom_vjp`. The points the spec leaves open
//! are decided in `docs/linalg.md`.

mod dense;
mod expm;
mod iterative;
mod krylov;
mod lu;
mod newton;
mod norm;

pub use dense::{
    cho_solve, cholesky, det, eigh, eigvalsh, inv, lstsq, matrix_power, pinv, qr, slogdet, solve,
    solve_triangular, svd, ChoSolve, EighResult, IntoQrMode, IntoTrans, Lstsq, LstsqResult, Pinv,
    QRResult, Qr, QrMode, SVDResult, SlogdetResult, SolveTriangular, Svd, Trans,
};
pub use expm::{expm, MAX_SQUARINGS};
pub use iterative::{SolverInfo, IMPLICIT_ORDER};
pub use krylov::{cg, gmres, Cg, Gmres};
pub use lu::{lu_factor, lu_solve, LuFactor};
pub use newton::{newton, Newton};
pub use norm::{norm, IntoOrd, Norm, NormAxis, Ord};

use crate::error::Result;
use crate::operand::Operand;
use crate::tensor::Tensor;

crate::ops::tensor_methods! {
    /// The linear-algebra methods on `Result<Tensor>`.
    pub trait LinalgExt;

    /// `qb::linalg::solve(self, b)`.
    pub fn solve(&self, b: impl Into<Operand>) -> Result<Tensor> {
        solve(self, b)
    }

    /// `qb::linalg::cholesky(self)`.
    pub fn cholesky(&self) -> Result<Tensor> {
        cholesky(self)
    }

    /// `qb::linalg::inv(self)`.
    pub fn inv(&self) -> Result<Tensor> {
        inv(self)
    }

    /// `qb::linalg::det(self)`.
    pub fn det(&self) -> Result<Tensor> {
        det(self)
    }
}
