//! [`Operand`]: anything an operation accepts as an array argument — a tensor (owned or
//! borrowed), a Rust `f64` or integer (a weak scalar, numerics.md §2, §12), or the result of an earlier
//! operation, whose error then becomes the result of this one. This is what lets a whole
//! expression end in a single `?`.

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// An array argument of an operation.
#[derive(Debug)]
pub enum Operand {
    Tensor(Tensor),
    /// A weak scalar: adopts the dtype of the array it meets (a float array's; an integer
    /// array meeting it becomes float64, numerics.md §12).
    Scalar(f64),
    /// A weak integer (a Rust `i64` or `i32`): adopts the dtype of the array it meets, integer
    /// or float.
    Int(i64),
    /// An earlier failure, passed through.
    Error(Error),
}

impl From<Tensor> for Operand {
    fn from(t: Tensor) -> Operand {
        Operand::Tensor(t)
    }
}

impl From<&Tensor> for Operand {
    fn from(t: &Tensor) -> Operand {
        Operand::Tensor(t.clone())
    }
}

impl From<f64> for Operand {
    fn from(v: f64) -> Operand {
        Operand::Scalar(v)
    }
}

impl From<i64> for Operand {
    fn from(v: i64) -> Operand {
        Operand::Int(v)
    }
}

impl From<i32> for Operand {
    fn from(v: i32) -> Operand {
        Operand::Int(v.into())
    }
}

impl From<Result<Tensor>> for Operand {
    fn from(r: Result<Tensor>) -> Operand {
        match r {
            Ok(t) => Operand::Tensor(t),
            Err(e) => Operand::Error(e),
        }
    }
}
