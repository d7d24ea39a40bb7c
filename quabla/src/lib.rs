//! Quabla: a differentiable array library in the spirit of JAX.
//!
//! [`Tensor`] is an immutable array of `f64`, `f32`, `bool`, `i32` or `i64`. Every operation returns
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

mod control_flow;
mod creation;
mod debug;
mod devices;
mod dispatch;
pub mod distributed;
mod error;
mod io;
pub mod linalg;
mod liveness;
pub mod ode;
mod operand;
mod operators;
mod ops;
pub mod optim;
mod print;
mod program;
pub mod random;
mod runtime;
mod staging;
mod tensor;
pub mod testing;
mod trace;
mod transforms;
pub mod tree;
mod view;
pub mod warnings;

pub use control_flow::{
    cond, fori_loop, scan, scan_over, switch, while_loop, Branch, ForiLoop, LoopIndex, Scan,
    ScanOver, WhileInfo, WhileLoop,
};
pub use creation::{
    arange, arange_from, array, asarray, eye, eye_rect, full, full_like, linspace, ones, ones_like,
    zeros, zeros_like, ArrayLike, DTypeExt, FillValue,
};
pub use debug::{debug_nans, hide_source_dir};
pub use devices::{devices, load_plugin, transfers, DeviceInfo, Origin, Transfers};
pub use error::{Error, Result, TracerErrorKind};
pub use io::{load, load_as, save, LoadSource, SaveTarget};
pub use linalg::{cholesky, newton, solve};
pub use operand::Operand;
// Each module of the array library is exported whole: a function is named once, where it is
// defined (see `ops`).
pub use ops::at::At;
pub use ops::calculus::*;
pub use ops::compare::*;
pub use ops::composite::*;
pub use ops::effects::*;
pub use ops::elementwise::*;
pub use ops::index::*;
pub use ops::indexed::*;
pub use ops::layout::*;
pub use ops::normalize::*;
pub use ops::products::*;
pub use ops::reduce::*;
pub use ops::shape::*;
pub use ops::sorting::*;
pub use program::{CompileProgram, Executable, Program};
pub use quabla_backend::cancel::{interrupt, with_token, CancelToken};
pub use quabla_ir::DType;
/// `#[derive(Tree)]`: a struct as a pytree node; `#[tree(static)]` marks meta fields.
pub use quabla_macros::Tree;
pub use staging::{LeafSignature, Signature};
pub use tensor::{Element, Tensor};
pub use transforms::custom::{
    checkpoint, custom_jvp, custom_vjp, remat, Checkpoint, CustomJvp, CustomJvpFn,
    CustomJvpNondiff, CustomVjp, CustomVjpFn, CustomVjpNondiff,
};
pub use transforms::grad::{grad, value_and_grad, Grad, LoopTape};
pub use transforms::jacobian::{hessian, jacfwd, jacobian, jacrev, Hessian, Jacobian};
pub use transforms::jit::{jit, Compiled, Jit, Lowered};
pub use transforms::jvp::{jvp, jvp_fn, Jvp};
pub use transforms::vjp::{vjp, vjp_fn, Vjp, VjpAux, VjpFn};
pub use transforms::vmap::{vmap, InAxes, Vmap};
pub use tree::{ShapeDtype, Static, Tree};
pub use view::{Slice, TensorView};
pub use warnings::Warning;

/// float64, the default dtype.
pub const F64: DType = DType::F64;
/// float32.
pub const F32: DType = DType::F32;
/// bool (printed `i1` in IR text).
pub const BOOL: DType = DType::Bool;
/// int32 (numerics.md §12: two's complement, wrapping arithmetic).
pub const I32: DType = DType::I32;
/// int64, the dtype of Rust `i64` data and of integer ranges.
pub const I64: DType = DType::I64;

/// The package version, defined once in the workspace manifest.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The traits that make the method syntax work: `use quabla::prelude::*;`. Besides
/// [`DTypeExt`] (constructors on a dtype, `qb::F32.zeros(..)`), each family of the array
/// library has an extension trait giving `Result<Tensor>` its tensor methods, so a chain
/// needs a single `?` at its end (`x.sin().powi(2).sum()?`).
pub mod prelude {
    pub use crate::linalg::LinalgExt;
    pub use crate::ops::compare::{CompareExt, LogicExt};
    pub use crate::ops::composite::{BinaryCompositeExt, CompositeDefaultsExt, CompositeExt};
    pub use crate::ops::elementwise::{BinaryExt, PowerCastExt, UnaryCompositeExt, UnaryExt};
    pub use crate::ops::index::IndexExt;
    pub use crate::ops::layout::LayoutExt;
    pub use crate::ops::normalize::{NormExt, NormalizeExt};
    pub use crate::ops::products::ProductExt;
    pub use crate::ops::reduce::ReduceExt;
    pub use crate::ops::shape::ShapeExt;
    pub use crate::DTypeExt;
}

/// The README's example is compiled and run as a doctest, so it stays true.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
