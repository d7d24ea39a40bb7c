//! The array library, one module per op family. Every function builds its graph with the
//! checked builder of `quabla-ir` and runs it through [`crate::dispatch::apply`]; composite
//! functions (`maximum`, `abs`, `sigmoid`, `prod`, ...) are several IR nodes built in one go,
//! so they run as one plan.
//!
//! Each function is named once: a family macro row (or a method in a [`tensor_methods!`]
//! block) gives the free function where there is one, the `Tensor` method, and the same
//! method on `Result<Tensor>` through the family's extension trait (exported by the prelude),
//! and `lib.rs` re-exports each module's public items whole.

/// Declares tensor methods once (api.md §2.3): each becomes an inherent method of
/// [`Tensor`], and a method of `Result<Tensor>` through the extension trait named first, so
/// that a chain needs one `?` at its end (`x.sin().powi(2).sum()?`; an `Err` receiver passes
/// through unchanged). Every extension trait is in `quabla::prelude`.
macro_rules! tensor_methods {
    (
        $(#[$trait_meta:meta])*
        pub trait $ext:ident;
        $(
            $(#[$meta:meta])*
            pub fn $name:ident(&$this:ident $(, $arg:ident : $ty:ty)* $(,)?) -> Result<Tensor>
                $body:block
        )*
    ) => {
        impl Tensor {
            $(
                $(#[$meta])*
                #[track_caller]
                pub fn $name(&$this $(, $arg: $ty)*) -> Result<Tensor> $body
            )*
        }

        $(#[$trait_meta])*
        pub trait $ext: Sized {
            $(
                #[doc = concat!("[`Tensor::", stringify!($name), "`] on a result.")]
                fn $name(self $(, $arg: $ty)*) -> Result<Tensor>;
            )*
        }

        impl $ext for Result<Tensor> {
            $(
                #[track_caller]
                fn $name(self $(, $arg: $ty)*) -> Result<Tensor> {
                    self?.$name($($arg),*)
                }
            )*
        }
    };
}

pub(crate) use tensor_methods;

pub mod at;
pub mod calculus;
pub mod compare;
pub mod composite;
pub mod effects;
pub mod elementwise;
pub mod index;
pub mod indexed;
pub mod layout;
pub mod normalize;
pub mod products;
pub mod reduce;
pub mod shape;
pub mod sorting;

use crate::error::Result;
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{GraphBuilder, HostData, NodeId, Shape};

/// A rank-0 bool constant.
#[track_caller]
pub(crate) fn bool_const(b: &mut GraphBuilder, value: bool) -> quabla_ir::Result<NodeId> {
    b.constant(HostData::Bool([value].into()), Shape::scalar(), false)
}

/// A bool constant of shape `dims` holding `values` in row-major order.
#[track_caller]
pub(crate) fn bool_mask(
    b: &mut GraphBuilder,
    dims: Vec<usize>,
    values: Vec<bool>,
) -> quabla_ir::Result<NodeId> {
    b.constant(HostData::Bool(values.into()), Shape::new(dims)?, false)
}

/// The extents of a node.
#[track_caller]
pub(crate) fn dims(b: &GraphBuilder, x: NodeId) -> Vec<usize> {
    b.ty(x).shape.dims().to_vec()
}

/// A strong rank-0 constant `value` in the dtype of `like` (`false`/`true` for bool).
#[track_caller]
pub(crate) fn scalar_like(b: &mut GraphBuilder, value: f64, like: NodeId) -> NodeId {
    let dtype = b.ty(like).dtype;
    b.scalar(value, dtype, false)
}

/// `len` entries of `x` along `axis` starting at `start` (the axis is kept).
#[track_caller]
pub(crate) fn slice_axis(
    b: &mut GraphBuilder,
    x: NodeId,
    axis: usize,
    start: usize,
    len: usize,
) -> quabla_ir::Result<NodeId> {
    let mut sizes = dims(b, x);
    let mut starts = vec![0; sizes.len()];
    starts[axis] = start;
    sizes[axis] = len;
    b.slice(x, starts, sizes)
}

/// Entry `i` of `x` along `axis`, with that axis removed.
#[track_caller]
pub(crate) fn take(
    b: &mut GraphBuilder,
    x: NodeId,
    axis: usize,
    i: usize,
) -> quabla_ir::Result<NodeId> {
    let s = slice_axis(b, x, axis, i, 1)?;
    let mut d = dims(b, s);
    d.remove(axis);
    b.reshape_to(s, Shape::new(d)?)
}

/// The reduced axes (sorted) and the result extents without `keepdims` of a reduction of
/// `shape` over `axes` (`None`: all).
#[track_caller]
pub(crate) fn reduced_dims(
    shape: &Shape,
    axes: Option<&[isize]>,
    op: &str,
) -> quabla_ir::Result<(Vec<usize>, Vec<usize>)> {
    let mut reduced = match axes {
        None => (0..shape.rank()).collect(),
        Some(a) => shape.axes(op, a)?,
    };
    reduced.sort_unstable();
    let out = (0..shape.rank())
        .filter(|a| !reduced.contains(a))
        .map(|a| shape.dims()[a])
        .collect();
    Ok((reduced, out))
}

/// An operand as a tensor: a Rust `f64` becomes a weak rank-0 tensor, an error is returned.
#[track_caller]
pub(crate) fn operand_tensor(o: Operand) -> Result<Tensor> {
    match o {
        Operand::Tensor(t) => Ok(t),
        Operand::Scalar(v) => Ok(Tensor::from_parts(
            Shape::scalar(),
            HostData::F64([v].into()),
            true,
        )),
        Operand::Int(v) => Ok(Tensor::weak_int(v)),
        Operand::Error(e) => Err(e),
    }
}
