//! Typed errors of graph construction, passes and parsing. Messages follow `spec/errors.md`
//! so that the facade can pass them to users unchanged.

use crate::{DType, Shape};
use thiserror::Error;

pub type Result<T, E = IrError> = std::result::Result<T, E>;

/// An error raised while building, checking, transforming or parsing a graph.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum IrError {
    /// DT1: a strong float32 and a strong float64 operand meet.
    #[error("tensor {op} operands have mismatched dtypes {lhs} and {rhs}; float32 and float64 never mix implicitly, convert one side with astype")]
    DtypeMismatch { op: String, lhs: DType, rhs: DType },
    /// DT2: an operation not defined for bool tensors.
    #[error("{op} is not defined for bool tensors; convert with astype(quabla.float64) or astype(quabla.float32) first")]
    BoolOperand { op: String },
    /// DT2 for integers: a float-only op (a transcendental, `mean`, linear algebra) given an
    /// integer tensor in a raw graph (the builder promotes such operands to float64), or an
    /// integer-only op (`floor_divide`, bitwise, shifts) given a float tensor.
    #[error("{op} is not defined for {dtype} tensors; {fix}")]
    WrongDtypeKind {
        op: String,
        dtype: DType,
        fix: String,
    },
    /// DT3: a logical operation on float operands.
    #[error("{op} requires bool operands")]
    RequiresBool { op: String },
    /// SH1..SH13: shape and axis errors; `message` is the full text.
    #[error("{message}")]
    Shape { op: String, message: String },
    /// IX1..IX3: static indices out of range or malformed.
    #[error("{message}")]
    Index { message: String },
    /// Invalid attribute values and configuration.
    #[error("{message}")]
    InvalidArgument { message: String },
    /// An op or combination that is deliberately not supported.
    #[error("{message}")]
    Unsupported { op: String, message: String },
    /// A graph that breaks an IR invariant (found by the verifier: a bug, not user input).
    #[error("invalid graph: {message}")]
    Verify { message: String },
    /// Malformed IR text.
    #[error("IR text line {line}: {message}")]
    Parse { line: usize, message: String },
    /// The allocator refused storage of `bytes` bytes for `what` (a tensor described by its
    /// shape or element count and dtype). A `ValueError`-kind failure of the request, not of
    /// the process: nothing was allocated and every existing value is intact.
    #[error(
        "cannot allocate {bytes} bytes for {what}; the machine does not have that much memory"
    )]
    OutOfMemory { bytes: u128, what: String },
}

impl IrError {
    pub(crate) fn shape(op: &str, message: impl Into<String>) -> Self {
        IrError::Shape {
            op: op.to_string(),
            message: message.into(),
        }
    }

    /// SH1.
    pub fn axis_out_of_range(axis: isize, rank: usize) -> Self {
        IrError::Shape {
            op: "axis".into(),
            message: format!("axis {axis} is out of range for a tensor of rank {rank}"),
        }
    }

    /// The allocator refused `bytes` bytes for `what`.
    pub fn out_of_memory(bytes: u128, what: impl Into<String>) -> Self {
        IrError::OutOfMemory {
            bytes,
            what: what.into(),
        }
    }

    /// The allocator refused storage for a tensor of `shape` and `dtype` (`what` reads
    /// `a tensor of shape [1099511627776] float64`).
    pub fn tensor_out_of_memory(dtype: DType, shape: &Shape) -> Self {
        IrError::OutOfMemory {
            bytes: shape.nbytes(dtype) as u128,
            what: format!("a tensor of shape {shape} {}", dtype.name()),
        }
    }

    pub(crate) fn verify(message: impl Into<String>) -> Self {
        IrError::Verify {
            message: message.into(),
        }
    }
}
