//! `qb::linalg` (api.md §17, first part): `solve` and `cholesky`, with their derivatives
//! (numerics.md §6.5) from `quabla-linalg`'s rules. The other decompositions and solvers
//! arrive with the linear-algebra work.

use crate::dispatch::apply;
use crate::error::Result;
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::Op;

/// Solves `a x = b` by LU with partial pivoting. `a` is `[..., n, n]`; `b` is `[..., n, k]` or
/// a vector `[..., n]`; batch axes broadcast. An exactly singular `a` is `Error::Singular`.
pub fn solve(a: impl Into<Operand>, b: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into(), b.into()], |g, x| g.solve(x[0], x[1]))
}

/// The lower Cholesky factor of a symmetric positive-definite `[..., n, n]` matrix (only its
/// lower triangle is read; a matrix that is not positive definite gives NaN).
pub fn cholesky(a: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into()], |g, x| g.push(Op::Cholesky, &[x[0]]))
}

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
}
