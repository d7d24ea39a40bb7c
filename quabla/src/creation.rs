//! Constructors (api.md §1): from Rust data (scalars, slices, arrays and nested `Vec`s, with
//! the dtype of the element type: `f64`/integers give float64, `f32` float32, `bool` bool),
//! and the filled, range and identity constructors. `qb::F32.zeros(..)` and friends, through
//! [`DTypeExt`], choose another dtype.

use crate::dispatch::filled;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use quabla_ir::{DType, HostData, Shape};

/// Rust data that converts to a tensor: scalars and (nested) `Vec`s, arrays and slices of them.
pub trait ArrayLike {
    /// The dtype the data has unless another is asked for.
    const DTYPE: DType;
    #[doc(hidden)]
    fn shape_hint(&self) -> Vec<usize>;
    #[doc(hidden)]
    fn flatten_into(&self, expected: &[usize], out: &mut Vec<f64>) -> Result<()>;
}

fn ragged() -> Error {
    Error::invalid(
        "cannot build a tensor from ragged nested data: every row must have the same length",
    )
}

trait ScalarValue: Copy {
    fn to_f64(self) -> f64;
}

fn value_of<T: ScalarValue>(v: T) -> f64 {
    v.to_f64()
}

macro_rules! scalar_value {
    ($($t:ty),*) => {$(
        impl ScalarValue for $t {
            #[allow(clippy::unnecessary_cast)]
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    )*};
}
scalar_value!(f64, f32, i32, i64, u32, usize);

impl ScalarValue for bool {
    fn to_f64(self) -> f64 {
        if self {
            1.0
        } else {
            0.0
        }
    }
}

macro_rules! plain_scalar_like {
    ($($t:ty => $d:expr),*) => {$(
        impl ArrayLike for $t {
            const DTYPE: DType = $d;
            fn shape_hint(&self) -> Vec<usize> {
                Vec::new()
            }
            fn flatten_into(&self, expected: &[usize], out: &mut Vec<f64>) -> Result<()> {
                if !expected.is_empty() {
                    return Err(ragged());
                }
                out.push(value_of(*self));
                Ok(())
            }
        }
    )*};
}

plain_scalar_like!(f64 => DType::F64, f32 => DType::F32, i32 => DType::F64, i64 => DType::F64, u32 => DType::F64, usize => DType::F64, bool => DType::Bool);

fn seq_shape<T: ArrayLike>(items: &[T]) -> Vec<usize> {
    let mut s = vec![items.len()];
    if let Some(first) = items.first() {
        s.extend(first.shape_hint());
    }
    s
}

fn seq_flatten<T: ArrayLike>(items: &[T], expected: &[usize], out: &mut Vec<f64>) -> Result<()> {
    match expected.split_first() {
        Some((&n, rest)) if n == items.len() => {
            items.iter().try_for_each(|i| i.flatten_into(rest, out))
        }
        _ => Err(ragged()),
    }
}

impl<T: ArrayLike> ArrayLike for Vec<T> {
    const DTYPE: DType = T::DTYPE;
    fn shape_hint(&self) -> Vec<usize> {
        seq_shape(self)
    }
    fn flatten_into(&self, expected: &[usize], out: &mut Vec<f64>) -> Result<()> {
        seq_flatten(self, expected, out)
    }
}

impl<T: ArrayLike, const N: usize> ArrayLike for [T; N] {
    const DTYPE: DType = T::DTYPE;
    fn shape_hint(&self) -> Vec<usize> {
        seq_shape(self)
    }
    fn flatten_into(&self, expected: &[usize], out: &mut Vec<f64>) -> Result<()> {
        seq_flatten(self, expected, out)
    }
}

impl<T: ArrayLike> ArrayLike for &[T] {
    const DTYPE: DType = T::DTYPE;
    fn shape_hint(&self) -> Vec<usize> {
        seq_shape(self)
    }
    fn flatten_into(&self, expected: &[usize], out: &mut Vec<f64>) -> Result<()> {
        seq_flatten(self, expected, out)
    }
}

fn from_data<A: ArrayLike>(data: &A, dtype: DType) -> Result<Tensor> {
    let dims = data.shape_hint();
    let shape = Shape::new(dims.clone())?;
    let mut values = quabla_ir::alloc::try_vec_with_capacity(shape.size())
        .map_err(|e| Error::out_of_memory(e.bytes, "the values of an array"))?;
    data.flatten_into(&dims, &mut values)?;
    // Convert from the data's own dtype: f32 data stays exact, bool data reads as 0/1.
    host(dtype, dims, values)
}

/// A new tensor holding a copy of `data`, in the dtype of its element type.
pub fn array<A: ArrayLike>(data: A) -> Result<Tensor> {
    from_data(&data, A::DTYPE)
}

/// The value with which `full` fills: a number (float64), a bool (bool), or a rank-0 tensor
/// (its dtype).
pub trait FillValue {
    #[doc(hidden)]
    fn fill(&self) -> Result<(f64, DType)>;
}

impl FillValue for f64 {
    fn fill(&self) -> Result<(f64, DType)> {
        Ok((*self, DType::F64))
    }
}

impl FillValue for bool {
    fn fill(&self) -> Result<(f64, DType)> {
        Ok((if *self { 1.0 } else { 0.0 }, DType::Bool))
    }
}

impl FillValue for &Tensor {
    fn fill(&self) -> Result<(f64, DType)> {
        if self.ndim() != 0 {
            return Err(Error::invalid(format!(
                "full needs a scalar fill value, got a tensor of shape {:?}",
                self.shape()
            )));
        }
        Ok((self.item()?, self.dtype()))
    }
}

/// All zeros, float64.
pub fn zeros(shape: impl AsRef<[usize]>) -> Result<Tensor> {
    filled(shape.as_ref(), 0.0, DType::F64)
}

/// All ones, float64.
pub fn ones(shape: impl AsRef<[usize]>) -> Result<Tensor> {
    filled(shape.as_ref(), 1.0, DType::F64)
}

/// A constant tensor; the dtype follows the fill value.
pub fn full(shape: impl AsRef<[usize]>, value: impl FillValue) -> Result<Tensor> {
    let (v, dtype) = value.fill()?;
    filled(shape.as_ref(), v, dtype)
}

/// `[0, stop)` with step 1, float64.
pub fn arange(stop: f64) -> Result<Tensor> {
    arange_from(0.0, stop, 1.0)
}

/// Half-open range: element `i` is `start + i * step` computed in float64 (not accumulated).
pub fn arange_from(start: f64, stop: f64, step: f64) -> Result<Tensor> {
    DType::F64.arange_from(start, stop, step)
}

/// `num` evenly spaced points from `start` to `stop`, both included.
pub fn linspace(start: f64, stop: f64, num: usize) -> Result<Tensor> {
    DType::F64.linspace(start, stop, num)
}

/// The `[n, n]` identity, float64.
pub fn eye(n: usize) -> Result<Tensor> {
    eye_rect(n, n)
}

/// `[n, m]` with ones on the main diagonal, float64.
pub fn eye_rect(n: usize, m: usize) -> Result<Tensor> {
    DType::F64.eye_rect(n, m)
}

/// Zeros with the shape and dtype of `x`.
pub fn zeros_like(x: &Tensor) -> Result<Tensor> {
    filled(x.shape(), 0.0, x.dtype())
}

/// Ones with the shape and dtype of `x`.
pub fn ones_like(x: &Tensor) -> Result<Tensor> {
    filled(x.shape(), 1.0, x.dtype())
}

/// `value` with the shape and dtype of `x`.
pub fn full_like(x: &Tensor, value: f64) -> Result<Tensor> {
    filled(x.shape(), value, x.dtype())
}

/// Constructors in a chosen dtype: `qb::F32.zeros([2, 3])`.
pub trait DTypeExt {
    fn zeros(self, shape: impl AsRef<[usize]>) -> Result<Tensor>;
    fn ones(self, shape: impl AsRef<[usize]>) -> Result<Tensor>;
    fn full(self, shape: impl AsRef<[usize]>, value: f64) -> Result<Tensor>;
    /// Copies `data`, converting it to this dtype as `astype` would.
    fn array<A: ArrayLike>(self, data: A) -> Result<Tensor>;
    /// `qb::F32.from_vec(shape, data)`: the spelling of api.md §1.
    #[allow(clippy::wrong_self_convention)]
    fn from_vec(self, shape: impl AsRef<[usize]>, data: Vec<f64>) -> Result<Tensor>;
    fn arange(self, stop: f64) -> Result<Tensor>;
    fn arange_from(self, start: f64, stop: f64, step: f64) -> Result<Tensor>;
    fn linspace(self, start: f64, stop: f64, num: usize) -> Result<Tensor>;
    fn eye(self, n: usize) -> Result<Tensor>;
    fn eye_rect(self, n: usize, m: usize) -> Result<Tensor>;
    /// Returns `x` converted to this dtype (itself when it already has it).
    fn asarray(self, x: &Tensor) -> Result<Tensor>;
}

/// A host tensor of `dims` from its values in row-major order, written straight into its
/// storage (a lazy iterator needs no memory of its own); `Error::OutOfMemory` when the
/// allocator refuses, before anything is written.
fn host(dtype: DType, dims: Vec<usize>, values: impl IntoIterator<Item = f64>) -> Result<Tensor> {
    let shape = Shape::new(dims)?;
    let data = HostData::try_from_f64(dtype, values, shape.size())?;
    Ok(Tensor::from_parts(shape, data, false))
}

impl DTypeExt for DType {
    fn zeros(self, shape: impl AsRef<[usize]>) -> Result<Tensor> {
        filled(shape.as_ref(), 0.0, self)
    }

    fn ones(self, shape: impl AsRef<[usize]>) -> Result<Tensor> {
        filled(shape.as_ref(), 1.0, self)
    }

    fn full(self, shape: impl AsRef<[usize]>, value: f64) -> Result<Tensor> {
        filled(shape.as_ref(), value, self)
    }

    fn array<A: ArrayLike>(self, data: A) -> Result<Tensor> {
        from_data(&data, self)
    }

    fn from_vec(self, shape: impl AsRef<[usize]>, data: Vec<f64>) -> Result<Tensor> {
        Tensor::from_vec(shape, data)?.astype(self)
    }

    fn arange(self, stop: f64) -> Result<Tensor> {
        self.arange_from(0.0, stop, 1.0)
    }

    fn arange_from(self, start: f64, stop: f64, step: f64) -> Result<Tensor> {
        if step == 0.0 {
            return Err(Error::invalid("step must not be zero"));
        }
        if !(start.is_finite() && stop.is_finite() && step.is_finite()) {
            return Err(Error::invalid("arange needs finite start, stop and step"));
        }
        let len = ((stop - start) / step).ceil();
        if len < 1.0 {
            return Err(Error::shape(
                "arange",
                format!("empty slices are not supported: arange({start}, {stop}, {step}) selects no elements"),
            ));
        }
        // `len as usize` would saturate: name the count the arguments ask for instead.
        if len > quabla_ir::Shape::MAX_ELEMENTS as f64 {
            return Err(Error::shape(
                "arange",
                format!("arange({start}, {stop}, {step}) would have {len:e} elements, more than this machine can address"),
            ));
        }
        let n = len as usize;
        host(self, vec![n], (0..n).map(|i| start + i as f64 * step))
    }

    fn linspace(self, start: f64, stop: f64, num: usize) -> Result<Tensor> {
        if num == 0 {
            return Err(Error::shape(
                "linspace",
                "empty slices are not supported: linspace with num=0 selects no elements",
            ));
        }
        if num == 1 {
            return host(self, vec![1], [start]);
        }
        let step = (stop - start) / (num - 1) as f64;
        let values = (0..num).map(|i| {
            if i == num - 1 {
                stop
            } else {
                start + i as f64 * step
            }
        });
        host(self, vec![num], values)
    }

    fn eye(self, n: usize) -> Result<Tensor> {
        self.eye_rect(n, n)
    }

    fn eye_rect(self, n: usize, m: usize) -> Result<Tensor> {
        // `Shape::new` refuses an `n * m` that overflows before the iterator is drawn.
        let values = (0..n.saturating_mul(m)).map(|k| if k / m == k % m { 1.0 } else { 0.0 });
        host(self, vec![n, m], values)
    }

    fn asarray(self, x: &Tensor) -> Result<Tensor> {
        x.astype(self)
    }
}

/// `x` itself (arrays are immutable, so no copy is needed).
pub fn asarray(x: &Tensor) -> Result<Tensor> {
    Ok(x.clone())
}
