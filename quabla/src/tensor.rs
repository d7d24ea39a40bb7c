//! The eager [`Tensor`]: an immutable, reference-counted, C-ordered host array of one of the
//! three dtypes, and its conversions to and from host data.
//!
//! Tensors are cheap to clone (the storage is shared) and never mutated. Identity, not value,
//! is what `same` compares: elementwise equality is `equal`.

use crate::error::{Error, Result};
use crate::print::format_tensor;
use quabla_backend::HostTensor;
use quabla_ir::{DType, HostData, Shape, TensorType};
use std::fmt;
use std::sync::Arc;

/// An array value. Every operation returns a new tensor.
#[derive(Clone)]
pub struct Tensor {
    inner: Arc<Concrete>,
}

#[derive(Debug)]
struct Concrete {
    shape: Shape,
    data: HostData,
    /// Born from a Rust `f64` (numerics.md §2.1 rule 4): adopts the dtype of a later operand.
    weak: bool,
}

impl Tensor {
    pub(crate) fn from_parts(shape: Shape, data: HostData, weak: bool) -> Tensor {
        debug_assert_eq!(shape.size(), data.len());
        Tensor {
            inner: Arc::new(Concrete { shape, data, weak }),
        }
    }

    pub(crate) fn from_host(t: HostTensor, weak: bool) -> Tensor {
        Tensor::from_parts(t.shape, t.data, weak)
    }

    pub(crate) fn to_host(&self) -> HostTensor {
        HostTensor::new(self.inner.shape.clone(), self.inner.data.clone())
    }

    pub(crate) fn ir_type(&self) -> TensorType {
        TensorType {
            dtype: self.dtype(),
            shape: self.inner.shape.clone(),
            weak: self.inner.weak,
        }
    }

    /// Builds a float64 tensor (or bool, for `bool` data) from a shape and row-major data;
    /// `data.len()` must equal the product of the shape.
    pub fn from_vec<T: Element>(shape: impl AsRef<[usize]>, data: Vec<T>) -> Result<Tensor> {
        let shape = Shape::new(shape.as_ref().to_vec())?;
        if shape.size() != data.len() {
            return Err(Error::shape(
                "from_vec",
                format!(
                    "cannot build a tensor of shape {shape} ({} elements) from {} values",
                    shape.size(),
                    data.len()
                ),
            ));
        }
        Ok(Tensor::from_parts(shape, T::into_host(data), false))
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.inner.data.dtype()
    }

    /// The extents of each axis.
    pub fn shape(&self) -> &[usize] {
        self.inner.shape.dims()
    }

    /// The rank.
    pub fn ndim(&self) -> usize {
        self.inner.shape.rank()
    }

    /// The number of elements.
    pub fn size(&self) -> usize {
        self.inner.shape.size()
    }

    /// Whether this tensor is a weakly typed value (born from a Rust `f64`).
    pub fn is_weak(&self) -> bool {
        self.inner.weak
    }

    /// Identity comparison: whether both handles share the same storage.
    pub fn same(a: &Tensor, b: &Tensor) -> bool {
        Arc::ptr_eq(&a.inner, &b.inner)
    }

    /// The value of a single-element tensor as `f64` (bool as 0/1).
    pub fn item(&self) -> Result<f64> {
        self.single("item")?;
        Ok(self.inner.data.get_f64(0))
    }

    /// The value of a single-element tensor as `bool` (a float is true when nonzero or NaN).
    pub fn item_bool(&self) -> Result<bool> {
        if self.size() != 1 && self.dtype() == DType::Bool {
            return Err(Error::invalid(
                "the truth value of a multi-element tensor is ambiguous; reduce it with quabla.any or quabla.all",
            ));
        }
        self.single("item_bool")?;
        Ok(self.inner.data.get_f64(0) != 0.0)
    }

    fn single(&self, op: &str) -> Result<()> {
        if self.size() != 1 {
            return Err(Error::invalid(format!(
                "{op}() needs a tensor with exactly one element, got shape {}",
                self.inner.shape
            )));
        }
        Ok(())
    }

    /// Flat row-major values converted to `T` (`f64`, `f32` or `bool`).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        Ok(T::from_host(&self.inner.data))
    }

    /// Flat row-major values as `bool` (floats: nonzero or NaN is true).
    pub fn to_vec_bool(&self) -> Result<Vec<bool>> {
        self.to_vec::<bool>()
    }

    /// Zero-copy read-only access to the storage when `T` is the tensor's dtype.
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        T::slice(&self.inner.data).ok_or_else(|| Error::Type {
            message: format!(
                "as_slice::<{}>() of a {} tensor; convert with astype first",
                T::DTYPE.name(),
                self.dtype().name()
            ),
        })
    }

    /// A copy as an `ndarray` array of `T`.
    pub fn to_ndarray<T: Element>(&self) -> Result<ndarray::ArrayD<T>> {
        ndarray::ArrayD::from_shape_vec(self.shape().to_vec(), self.to_vec::<T>()?).map_err(|e| {
            Error::Internal {
                message: e.to_string(),
            }
        })
    }

    /// A tensor holding a copy of an `ndarray` array (any layout).
    pub fn from_ndarray<T: Element, D: ndarray::Dimension>(
        a: &ndarray::ArrayBase<impl ndarray::Data<Elem = T>, D>,
    ) -> Result<Tensor> {
        let data: Vec<T> = a.iter().cloned().collect();
        Tensor::from_vec(a.shape(), data)
    }
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_tensor(self.shape(), &self.inner.data))
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Rust element types that map to a Quabla dtype: `f64`, `f32` and `bool`.
pub trait Element: Copy + Clone + fmt::Debug + 'static {
    const DTYPE: DType;
    #[doc(hidden)]
    fn into_host(v: Vec<Self>) -> HostData;
    #[doc(hidden)]
    fn from_host(d: &HostData) -> Vec<Self>;
    #[doc(hidden)]
    fn slice(d: &HostData) -> Option<&[Self]>;
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    fn into_host(v: Vec<f64>) -> HostData {
        HostData::F64(v.into())
    }
    fn from_host(d: &HostData) -> Vec<f64> {
        d.to_f64_vec()
    }
    fn slice(d: &HostData) -> Option<&[f64]> {
        match d {
            HostData::F64(v) => Some(v),
            _ => None,
        }
    }
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn into_host(v: Vec<f32>) -> HostData {
        HostData::F32(v.into())
    }
    fn from_host(d: &HostData) -> Vec<f32> {
        match d {
            HostData::F32(v) => v.to_vec(),
            other => other.to_f64_vec().into_iter().map(|x| x as f32).collect(),
        }
    }
    fn slice(d: &HostData) -> Option<&[f32]> {
        match d {
            HostData::F32(v) => Some(v),
            _ => None,
        }
    }
}

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn into_host(v: Vec<bool>) -> HostData {
        HostData::Bool(v.into())
    }
    fn from_host(d: &HostData) -> Vec<bool> {
        match d {
            HostData::Bool(v) => v.to_vec(),
            other => other.to_f64_vec().into_iter().map(|x| x != 0.0).collect(),
        }
    }
    fn slice(d: &HostData) -> Option<&[bool]> {
        match d {
            HostData::Bool(v) => Some(v),
            _ => None,
        }
    }
}
