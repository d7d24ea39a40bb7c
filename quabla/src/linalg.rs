//! `qb::linalg` (api.md §17, first part): `solve` and `cholesky`, with their derivatives
//! (numerics.md §6.5) from `quabla-linalg`'s rules. The other decompositions and solvers
//! arrive with the linear-algebra work.

use crate::dispatch::apply;
use crate::error::Result;
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{broadcast_shapes, Op, Shape};

/// Solves `a x = b` by LU with partial pivoting. `a` is `[..., n, n]`; `b` is `[..., n, k]` or
/// a vector `[..., n]`; batch axes broadcast. An exactly singular `a` is `Error::Singular`.
pub fn solve(a: impl Into<Operand>, b: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into(), b.into()], |g, x| {
        let (a, rhs) = (x[0], x[1]);
        let (sa, sb) = (g.ty(a).shape.clone(), g.ty(rhs).shape.clone());
        let vector = sb.rank() + 1 == sa.rank() || sb.rank() == 1;
        let rhs = if vector {
            let mut dims = sb.dims().to_vec();
            dims.push(1);
            g.reshape_to(rhs, Shape::new(dims)?)?
        } else {
            rhs
        };
        let sr = g.ty(rhs).shape.clone();
        let (ra, rr) = (sa.rank(), sr.rank());
        let batch = if ra >= 2 && rr >= 2 {
            broadcast_shapes(
                &Shape::new(sa.dims()[..ra - 2].to_vec())?,
                &Shape::new(sr.dims()[..rr - 2].to_vec())?,
            )?
        } else {
            Shape::scalar()
        };
        let full = |g: &mut quabla_ir::GraphBuilder, n: quabla_ir::NodeId, tail: &[usize]| {
            let mut dims = batch.dims().to_vec();
            dims.extend(tail);
            g.broadcast_to(n, Shape::new(dims)?)
        };
        let a2 = if ra >= 2 {
            full(g, a, &sa.dims()[ra - 2..])?
        } else {
            a
        };
        let r2 = if rr >= 2 {
            full(g, rhs, &sr.dims()[rr - 2..])?
        } else {
            rhs
        };
        let x = g.push(Op::Solve, &[a2, r2])?;
        if vector {
            let mut dims = g.ty(x).shape.dims().to_vec();
            dims.pop();
            g.reshape_to(x, Shape::new(dims)?)
        } else {
            Ok(x)
        }
    })
}

/// The lower Cholesky factor of a symmetric positive-definite `[..., n, n]` matrix (only its
/// lower triangle is read; a matrix that is not positive definite gives NaN).
pub fn cholesky(a: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into()], |g, x| g.push(Op::Cholesky, &[x[0]]))
}

impl Tensor {
    /// `qb::linalg::solve(self, b)`.
    pub fn solve(&self, b: impl Into<Operand>) -> Result<Tensor> {
        solve(self, b)
    }

    /// `qb::linalg::cholesky(self)`.
    pub fn cholesky(&self) -> Result<Tensor> {
        cholesky(self)
    }
}
