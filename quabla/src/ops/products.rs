//! Products: `matmul` with NumPy's rules (rank-1 operands are promoted to a row or column
//! vector and the unit axis removed again; batch axes broadcast).

use crate::dispatch::apply;
use crate::error::Result;
use crate::operand::Operand;
use crate::tensor::Tensor;

/// Matrix product with NumPy rules.
pub fn matmul(a: impl Into<Operand>, c: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into(), c.into()], |b, x| b.matmul(x[0], x[1]))
}

impl Tensor {
    /// Matrix product with NumPy rules (rank-1 operands allowed).
    pub fn matmul(&self, other: impl Into<Operand>) -> Result<Tensor> {
        matmul(self, other)
    }
}
