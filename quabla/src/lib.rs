//! Quabla: a differentiable array library in the spirit of JAX.
//!
//! [`Tensor`] is an immutable array of `f64`, `f32` or `bool`. Every operation returns
//! [`Result<Tensor>`](Result); operators and methods also accept results, so an expression
//! needs a single `?`:
//!
//! ```
//! use quabla as qb;
//! use qb::prelude::*;
//!
//! # fn main() -> qb::Result<()> {
//! let x = qb::array([0.0, 0.5, 1.0])?;
//! let y = x.sin().powi(2).sum()?;
//! assert!((y.item()? - 0.9379222653395013).abs() < 1e-12);
//! let r = qb::F32.array([1.0, 2.0, 3.0])?;
//! assert_eq!((&r * 2.0)?.dtype(), qb::F32); // f64 operands are weak scalars
//! # Ok(())
//! # }
//! ```
//!
//! Operations are recorded as graphs of the `quabla-ir` crate and executed by the CPU
//! reference backend (`quabla-cpu`); see `docs/architecture.md` for the whole design.

// `#[derive(Tree)]` names the facade as `::quabla`, also inside the facade itself (`ode`).
extern crate self as quabla;

mod autodiff;
mod control_flow;
mod creation;
mod custom;
mod devices;
mod dispatch;
mod error;
mod ext;
mod jit;
pub mod linalg;
pub mod ode;
mod operand;
mod operators;
mod ops;
mod print;
mod tensor;
mod trace;
pub mod tree;
mod vmap;
pub mod warnings;

pub use autodiff::{
    grad, hessian, jacobian, jvp, jvp_fn, value_and_grad, vjp, vjp_fn, Grad, Hessian, Jacobian,
    Jvp, Vjp, VjpAux, VjpFn,
};
pub use control_flow::{cond, fori_loop, scan, while_loop, ForiLoop, LoopIndex, Scan, WhileLoop};
pub use creation::{
    arange, arange_from, array, asarray, eye, eye_rect, full, full_like, linspace, ones, ones_like,
    zeros, zeros_like, ArrayLike, DTypeExt, FillValue,
};
pub use custom::{
    checkpoint, custom_jvp, custom_vjp, remat, Checkpoint, CustomJvp, CustomJvpFn,
    CustomJvpNondiff, CustomVjp, CustomVjpFn, CustomVjpNondiff,
};
pub use devices::{devices, DeviceInfo, Origin};
pub use error::{Error, Result, TracerErrorKind};
pub use ext::TensorResultExt;
pub use jit::{jit, Compiled, Jit, LeafSignature, Lowered, Signature};
pub use operand::Operand;
pub use ops::calculus::{diff, interp, polyval, trapezoid, Diff, Interp, Trapezoid};
pub use ops::compare::{
    equal, greater, greater_equal, less, less_equal, logical_and, logical_not, logical_or,
    not_equal, where_,
};
pub use ops::composite::{
    clip, exp2, gelu, hypot, isinf, logaddexp, mod_, nan_to_num, remainder, sign, silu, softplus,
    Clip, Gelu, NanToNum,
};
pub use ops::elementwise::Exponent;
pub use ops::elementwise::{
    abs, add, arccos, arccosh, arcsin, arcsinh, arctan, arctanh, atan2, cbrt, ceil, cos, cosh, div,
    erf, erfc, exp, expm1, floor, fmod, isfinite, isnan, log, log10, log1p, log2, maximum, minimum,
    mul, neg, pow, power, powi, reciprocal, relu, round, sigmoid, sin, sinh, sqrt, square,
    stop_gradient, sub, tan, tanh,
};
pub use ops::index::{IndexItem, ELLIPSIS, NEW};
pub use ops::layout::{
    diag, diagonal, flip, meshgrid, moveaxis, pad, ravel, repeat, roll, split, split_at, swapaxes,
    tile, trace, tril, triu, Diag, Diagonal, Indexing, Ints, Meshgrid, Pad, PadMode, PadWidth,
    Repeat, Roll,
};
pub use ops::normalize::{
    cumsum, log_softmax, logsumexp, norm, softmax, std, var, Cumsum, Variance,
};
pub use ops::products::matmul;
pub use ops::products::{
    cross, dot, einsum, kron, outer, tensordot, Cross, Tensordot, TensordotAxes,
};
pub use ops::reduce::{all, any, max, mean, min, prod, sum, Axes};
pub use ops::shape::{concat, stack};
pub use quabla_ir::DType;
/// `#[derive(Tree)]`: a struct as a pytree node; `#[tree(static)]` marks meta fields.
pub use quabla_macros::Tree;
pub use tensor::{Element, Tensor};
pub use tree::{ShapeDtype, Static, Tree};
pub use vmap::{vmap, InAxes, Vmap};
pub use warnings::Warning;

/// float64, the default dtype.
pub const F64: DType = DType::F64;
/// float32.
pub const F32: DType = DType::F32;
/// bool (printed `i1` in IR text).
pub const BOOL: DType = DType::Bool;

/// The package version, defined once in the workspace manifest.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The traits that make the method syntax work: `use quabla::prelude::*;`.
pub mod prelude {
    pub use crate::{DTypeExt, TensorResultExt};
}

/// The README's example is compiled and run as a doctest, so it stays true.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
