//! [`TensorResultExt`]: every tensor method on `Result<Tensor>` too, so that chains need one
//! `?` at their end (`x.sin().powi(2).sum()?`). An `Err` receiver passes through unchanged.

use crate::error::Result;
use crate::operand::Operand;
use crate::ops::index::IndexItem;
use crate::ops::reduce::Axes;
use crate::tensor::Tensor;
use quabla_ir::DType;

macro_rules! forward {
    ($($name:ident($($arg:ident : $ty:ty),*);)*) => {
        /// Tensor methods on `Result<Tensor>`.
        pub trait TensorResultExt: Sized {
            $(
                #[doc = concat!("[`Tensor::", stringify!($name), "`] on a result.")]
                fn $name(self $(, $arg: $ty)*) -> Result<Tensor>;
            )*
        }

        impl TensorResultExt for Result<Tensor> {
            $(
                fn $name(self $(, $arg: $ty)*) -> Result<Tensor> {
                    self?.$name($($arg),*)
                }
            )*
        }
    };
}

forward! {
    sin(); cos(); tanh(); exp(); expm1(); log(); log1p(); sqrt(); tan(); arcsin(); arccos();
    arctan(); sinh(); cosh(); arcsinh(); arccosh(); arctanh(); log2(); log10(); cbrt(); floor();
    ceil(); round(); erf(); erfc(); abs(); relu(); sigmoid(); square(); reciprocal();
    stop_gradient(); isnan(); isfinite(); neg();
    add(other: impl Into<Operand>); sub(other: impl Into<Operand>); mul(other: impl Into<Operand>);
    div(other: impl Into<Operand>); pow(other: impl Into<Operand>); atan2(other: impl Into<Operand>);
    fmod(other: impl Into<Operand>); maximum(other: impl Into<Operand>);
    minimum(other: impl Into<Operand>); powi(exponent: i32); astype(dtype: DType);
    greater(other: impl Into<Operand>); greater_equal(other: impl Into<Operand>);
    less(other: impl Into<Operand>); less_equal(other: impl Into<Operand>);
    equal(other: impl Into<Operand>); not_equal(other: impl Into<Operand>);
    logical_and(other: impl Into<Operand>); logical_or(other: impl Into<Operand>); logical_not();
    sum(); sum_axes(axes: impl Into<Axes>); sum_keepdims(axes: impl Into<Axes>);
    mean(); mean_axes(axes: impl Into<Axes>); mean_keepdims(axes: impl Into<Axes>);
    max(); max_axes(axes: impl Into<Axes>); max_keepdims(axes: impl Into<Axes>);
    min(); min_axes(axes: impl Into<Axes>); min_keepdims(axes: impl Into<Axes>);
    prod(); prod_axes(axes: impl Into<Axes>); prod_keepdims(axes: impl Into<Axes>);
    any(); any_axes(axes: impl Into<Axes>); any_keepdims(axes: impl Into<Axes>);
    all(); all_axes(axes: impl Into<Axes>); all_keepdims(axes: impl Into<Axes>);
    reshape(shape: impl AsRef<[isize]>); transpose(); t(); permute(axes: impl AsRef<[isize]>);
    broadcast_to(shape: impl AsRef<[usize]>); squeeze(); squeeze_axes(axes: impl AsRef<[isize]>);
    expand_dims(axes: impl AsRef<[isize]>); matmul(other: impl Into<Operand>);
    index(items: impl AsRef<[IndexItem]>); gather(indices: impl AsRef<[isize]>, axis: isize);
    scatter_add(indices: impl AsRef<[isize]>, updates: impl Into<Operand>, axis: isize);
    sign(); exp2(); isinf(); softplus(); silu(); gelu(); nan_to_num();
    clip(lo: impl Into<Operand>, hi: impl Into<Operand>);
    logaddexp(other: impl Into<Operand>); hypot(other: impl Into<Operand>);
    mod_(other: impl Into<Operand>); remainder(other: impl Into<Operand>);
    norm(); norm_axes(axes: impl Into<Axes>); norm_keepdims(axes: impl Into<Axes>);
    logsumexp(); logsumexp_axes(axes: impl Into<Axes>); logsumexp_keepdims(axes: impl Into<Axes>);
    softmax(axis: isize); log_softmax(axis: isize); var(); std(); cumsum(axis: isize);
    flip(axis: isize); flip_axes(axes: impl Into<Axes>); flip_all(); roll(shift: isize, axis: isize);
    tile(reps: impl AsRef<[usize]>); repeat(repeats: usize, axis: isize);
    moveaxis(source: impl AsRef<[isize]>, destination: impl AsRef<[isize]>);
    swapaxes(axis1: isize, axis2: isize); ravel(); diag(); diagonal(); trace(); tril(); triu();
    dot(other: impl Into<Operand>);
}
