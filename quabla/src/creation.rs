//! Constructors (api.md §1): from Rust data (scalars, slices, arrays and nested `Vec`s, with
//! the dtype of the element type: `f64` gives float64, `f32` float32, `bool` bool, `i32`
//! int32, `i64`, `u32` and `usize` int64), and the filled, range and identity constructors. `qb::F32.zeros(..)` and friends, through
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
    fn flatten_into(&self, expected: &[usize], out: &mut Vec<Scalar>) -> Result<()>;
}

/// One element of Rust data, exact in its own type.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub enum Scalar {
    Float(f64),
    Int(i64),
}

impl Scalar {
    fn to_f64(self) -> f64 {
        match self {
            Scalar::Float(v) => v,
            Scalar::Int(v) => v as f64,
        }
    }

    /// The value converted to `dtype` as `astype` converts it (numerics.md §1.4, §12).
    fn into_dtype(self, dtype: DType) -> HostValue {
        match (self, dtype.is_integer()) {
            (Scalar::Int(v), true) => HostValue::Int(dtype.wrap_int(v)),
            (Scalar::Float(v), true) => HostValue::Int(dtype.float_to_int(v)),
            (Scalar::Int(v), false) if dtype == DType::F32 => HostValue::Float(v as f32 as f64),
            (s, false) => HostValue::Float(s.to_f64()),
        }
    }
}

/// An element on its way into storage.
enum HostValue {
    Float(f64),
    Int(i64),
}

fn ragged() -> Error {
    Error::invalid(
        "cannot build a tensor from ragged nested data: every row must have the same length",
    )
}

trait ScalarValue: Copy {
    fn scalar(self) -> Scalar;
}

fn value_of<T: ScalarValue>(v: T) -> Scalar {
    v.scalar()
}

macro_rules! scalar_value {
    ($kind:ident: $($t:ty),*) => {$(
        impl ScalarValue for $t {
            #[allow(clippy::unnecessary_cast)]
            fn scalar(self) -> Scalar {
                Scalar::$kind(self as _)
            }
        }
    )*};
}
scalar_value!(Float: f64, f32);
scalar_value!(Int: i32, i64, u32);

impl ScalarValue for usize {
    fn scalar(self) -> Scalar {
        // Beyond i64::MAX (no array extent gets there) the value saturates.
        Scalar::Int(i64::try_from(self).unwrap_or(i64::MAX))
    }
}

impl ScalarValue for bool {
    fn scalar(self) -> Scalar {
        Scalar::Int(self as i64)
    }
}

macro_rules! plain_scalar_like {
    ($($t:ty => $d:expr),*) => {$(
        impl ArrayLike for $t {
            const DTYPE: DType = $d;
            fn shape_hint(&self) -> Vec<usize> {
                Vec::new()
            }
            fn flatten_into(&self, expected: &[usize], out: &mut Vec<Scalar>) -> Result<()> {
                if !expected.is_empty() {
                    return Err(ragged());
                }
                out.push(value_of(*self));
                Ok(())
            }
        }
    )*};
}

plain_scalar_like!(f64 => DType::F64, f32 => DType::F32, i32 => DType::I32, i64 => DType::I64, u32 => DType::I64, usize => DType::I64, bool => DType::Bool);

fn seq_shape<T: ArrayLike>(items: &[T]) -> Vec<usize> {
    let mut s = vec![items.len()];
    if let Some(first) = items.first() {
        s.extend(first.shape_hint());
    }
    s
}

fn seq_flatten<T: ArrayLike>(items: &[T], expected: &[usize], out: &mut Vec<Scalar>) -> Result<()> {
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
    fn flatten_into(&self, expected: &[usize], out: &mut Vec<Scalar>) -> Result<()> {
        seq_flatten(self, expected, out)
    }
}

impl<T: ArrayLike, const N: usize> ArrayLike for [T; N] {
    const DTYPE: DType = T::DTYPE;
    fn shape_hint(&self) -> Vec<usize> {
        seq_shape(self)
    }
    fn flatten_into(&self, expected: &[usize], out: &mut Vec<Scalar>) -> Result<()> {
        seq_flatten(self, expected, out)
    }
}

impl<T: ArrayLike> ArrayLike for &[T] {
    const DTYPE: DType = T::DTYPE;
    fn shape_hint(&self) -> Vec<usize> {
        seq_shape(self)
    }
    fn flatten_into(&self, expected: &[usize], out: &mut Vec<Scalar>) -> Result<()> {
        seq_flatten(self, expected, out)
    }
}

fn from_data<A: ArrayLike>(data: &A, dtype: DType) -> Result<Tensor> {
    let dims = data.shape_hint();
    let shape = Shape::new(dims.clone())?;
    let mut values = quabla_ir::alloc::try_vec_with_capacity(shape.size())
        .map_err(|e| Error::out_of_memory(e.bytes, "the values of an array"))?;
    data.flatten_into(&dims, &mut values)?;
    // Convert from the data's own type: f32 data stays exact, integers stay exact in integer
    // dtypes, bool data reads as 0/1.
    let shape = Shape::new(dims)?;
    let n = shape.size();
    let data = if dtype.is_integer() {
        let ints = values.into_iter().map(|v| match v.into_dtype(dtype) {
            HostValue::Int(i) => i,
            HostValue::Float(f) => dtype.float_to_int(f),
        });
        HostData::try_from_i64(dtype, ints, n)?
    } else {
        let floats = values.into_iter().map(|v| match v.into_dtype(dtype) {
            HostValue::Float(f) => f,
            HostValue::Int(i) => i as f64,
        });
        HostData::try_from_f64(dtype, floats, n)?
    };
    Ok(Tensor::from_parts(shape, data, false))
}

/// A new tensor holding a copy of `data`, in the dtype of its element type.
pub fn array<A: ArrayLike>(data: A) -> Result<Tensor> {
    from_data(&data, A::DTYPE)
}

/// The value with which `full` fills: a float (float64), an integer (int64), a bool (bool),
/// or a rank-0 tensor (its dtype).
pub trait FillValue {
    #[doc(hidden)]
    fn fill(&self) -> Result<(Scalar, DType)>;
}

impl FillValue for f64 {
    fn fill(&self) -> Result<(Scalar, DType)> {
        Ok((Scalar::Float(*self), DType::F64))
    }
}

impl FillValue for i64 {
    fn fill(&self) -> Result<(Scalar, DType)> {
        Ok((Scalar::Int(*self), DType::I64))
    }
}

impl FillValue for i32 {
    fn fill(&self) -> Result<(Scalar, DType)> {
        Ok((Scalar::Int((*self).into()), DType::I64))
    }
}

impl FillValue for bool {
    fn fill(&self) -> Result<(Scalar, DType)> {
        Ok((Scalar::Int(*self as i64), DType::Bool))
    }
}

impl FillValue for &Tensor {
    fn fill(&self) -> Result<(Scalar, DType)> {
        if self.ndim() != 0 {
            return Err(Error::invalid(format!(
                "full needs a scalar fill value, got a tensor of shape {:?}",
                self.shape()
            )));
        }
        let value = if self.dtype().is_integer() {
            Scalar::Int(self.item_i64()?)
        } else {
            Scalar::Float(self.item()?)
        };
        Ok((value, self.dtype()))
    }
}

/// `shape` filled with `value` converted to `dtype` as `astype` converts it.
fn filled_with(shape: &[usize], value: Scalar, dtype: DType) -> Result<Tensor> {
    match value.into_dtype(dtype) {
        HostValue::Float(v) => filled(shape, v, dtype),
        HostValue::Int(v) => {
            let shape = Shape::new(shape.to_vec())?;
            let n = shape.size();
            let data = HostData::try_from_i64(dtype, std::iter::repeat_n(v, n), n)?;
            Ok(Tensor::from_parts(shape, data, false))
        }
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
    filled_with(shape.as_ref(), v, dtype)
}

/// A bound or step of [`arange`]: `f64` gives a float64 range, integers an int64 range (api.md
/// `arange`, amended: all-integer arguments give int64, as NumPy and JAX).
pub trait RangeValue: Copy {
    #[doc(hidden)]
    fn range_scalar(self) -> Scalar;
}

impl RangeValue for f64 {
    fn range_scalar(self) -> Scalar {
        Scalar::Float(self)
    }
}

impl RangeValue for i64 {
    fn range_scalar(self) -> Scalar {
        Scalar::Int(self)
    }
}

impl RangeValue for i32 {
    fn range_scalar(self) -> Scalar {
        Scalar::Int(self.into())
    }
}

/// `[0, stop)` with step 1: float64 for an `f64` bound (`qb::arange(5.0)`), int64 for an
/// integer one (`qb::arange(5)`).
pub fn arange<T: RangeValue>(stop: T) -> Result<Tensor> {
    match stop.range_scalar() {
        Scalar::Float(stop) => DType::F64.arange_from(0.0, stop, 1.0),
        Scalar::Int(stop) => int_range(0, stop, 1),
    }
}

/// Half-open range: element `i` is `start + i * step`, computed in float64 (not accumulated)
/// for `f64` arguments and exactly in int64 for integer ones.
pub fn arange_from<T: RangeValue>(start: T, stop: T, step: T) -> Result<Tensor> {
    match (
        start.range_scalar(),
        stop.range_scalar(),
        step.range_scalar(),
    ) {
        (Scalar::Int(a), Scalar::Int(b), Scalar::Int(s)) => int_range(a, b, s),
        (a, b, s) => DType::F64.arange_from(a.to_f64(), b.to_f64(), s.to_f64()),
    }
}

/// The int64 range `start, start + step, ...` below `stop` (above it for a negative step).
fn int_range(start: i64, stop: i64, step: i64) -> Result<Tensor> {
    if step == 0 {
        return Err(Error::invalid("step must not be zero"));
    }
    // ceil((stop - start) / step) in i128, so no bound overflows.
    let span = stop as i128 - start as i128;
    let (num, den) = if step > 0 {
        (span, step as i128)
    } else {
        (-span, -(step as i128))
    };
    let len = (num + den - 1).div_euclid(den);
    if len < 1 {
        return Err(Error::shape(
            "arange",
            format!(
                "empty slices are not supported: arange({start}, {stop}, {step}) selects no elements"
            ),
        ));
    }
    if len > quabla_ir::Shape::MAX_ELEMENTS as i128 {
        return Err(Error::shape(
            "arange",
            format!("arange({start}, {stop}, {step}) would have {len} elements, more than this machine can address"),
        ));
    }
    let n = len as usize;
    let shape = Shape::new(vec![n])?;
    let values = (0..n as i64).map(|i| start.wrapping_add(i.wrapping_mul(step)));
    let data = HostData::try_from_i64(DType::I64, values, n)?;
    Ok(Tensor::from_parts(shape, data, false))
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
