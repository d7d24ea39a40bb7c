//! The eager [`Tensor`]: an immutable, reference-counted, C-ordered host array of one of the
//! five dtypes, and its conversions to and from host data.
//!
//! Tensors are cheap to clone (the storage is shared) and never mutated. Identity, not value,
//! is what `same` compares: elementwise equality is `equal`.

use crate::error::{Error, Result, TracerErrorKind};
use crate::print::{format_tensor, format_tracer};
use quabla_backend::HostTensor;
use quabla_ir::{DType, HostData, NodeId, Shape, TensorType};

/// TR1, exact.
pub(crate) const CONTROL_FLOW_MESSAGE: &str = "TraceTensor cannot drive Python control flow: its value is unknown while tracing; select elementwise with quabla.where, or use cond, fori_loop, scan or while_loop";
use std::fmt;
use std::sync::Arc;

/// An array value: concrete host data, or (inside a transform) a tracer that records
/// operations into the transform's graph. Every operation returns a new tensor.
#[derive(Clone)]
pub struct Tensor {
    inner: Arc<Repr>,
}

#[derive(Debug)]
enum Repr {
    Concrete(Concrete),
    Traced(Tracer),
}

/// The value as the backend boundary takes it (shape and shared data), so a cached call binds
/// it by reference, without copying or re-wrapping.
#[derive(Debug)]
struct Concrete {
    host: HostTensor,
    /// Born from a Rust `f64` (numerics.md §2.1 rule 4): adopts the dtype of a later operand.
    weak: bool,
}

impl Drop for Concrete {
    /// A large buffer no one else holds goes to the process-wide cache of
    /// [`quabla_ir::recycle`], where the next eager output of its size and dtype finds it.
    fn drop(&mut self) {
        if quabla_ir::recycle::wanted(&self.host.data) {
            let empty = HostData::F64(Arc::from([]));
            quabla_ir::recycle::release(std::mem::replace(&mut self.host.data, empty));
        }
    }
}

/// TR5: a tracer whose trace is not running on this thread, because it ended or because it
/// runs on another thread (trace ids are unique across the process, so both look the same
/// from here).
pub(crate) fn leaked(t: &Tracer) -> Error {
    Error::Tracer {
        kind: TracerErrorKind::Leaked,
        message: format!(
            "{} was used after its trace ended (or on a thread other than the one tracing it); \
             do not store tracers outside the traced function or hand them to other threads",
            format_tracer(t.node.0, t.ty.shape.dims(), t.ty.dtype)
        ),
    }
}

/// A node of a live trace. `trace` identifies the trace, so a tracer used after its trace
/// ended is detected (errors.md TR5).
#[derive(Debug, Clone)]
pub(crate) struct Tracer {
    pub trace: u64,
    pub node: NodeId,
    pub ty: TensorType,
}

impl Tensor {
    pub(crate) fn from_parts(shape: Shape, data: HostData, weak: bool) -> Tensor {
        Tensor::from_host(HostTensor { shape, data }, weak)
    }

    /// A rank-0 float64 tensor of `value` that is weak (it adopts the dtype of the array it
    /// meets): the form of every Rust `f64` operand.
    pub(crate) fn weak_scalar(value: f64) -> Tensor {
        Tensor::from_parts(Shape::scalar(), HostData::F64([value].into()), true)
    }

    /// A rank-0 float64 tensor of `value`, not weak (what `qb::array(value)` makes of an
    /// `f64`).
    pub(crate) fn scalar_f64(value: f64) -> Tensor {
        Tensor::from_parts(Shape::scalar(), HostData::F64([value].into()), false)
    }

    /// A rank-0 int64 tensor of `value` that is weak (it adopts the dtype of the array it
    /// meets, integer or float): the form of every Rust integer operand.
    pub(crate) fn weak_int(value: i64) -> Tensor {
        Tensor::from_parts(Shape::scalar(), HostData::I64([value].into()), true)
    }

    /// A rank-0 bool tensor of `value`.
    pub(crate) fn scalar_bool(value: bool) -> Tensor {
        Tensor::from_parts(Shape::scalar(), HostData::Bool([value].into()), false)
    }

    pub(crate) fn traced(tracer: Tracer) -> Tensor {
        Tensor {
            inner: Arc::new(Repr::Traced(tracer)),
        }
    }

    pub(crate) fn from_host(host: HostTensor, weak: bool) -> Tensor {
        debug_assert_eq!(host.shape.size(), host.data.len());
        Tensor {
            inner: Arc::new(Repr::Concrete(Concrete { host, weak })),
        }
    }

    /// The tracer behind this handle, if it is traced.
    pub(crate) fn tracer(&self) -> Option<&Tracer> {
        match self.inner.as_ref() {
            Repr::Traced(t) => Some(t),
            Repr::Concrete(_) => None,
        }
    }

    /// The concrete value, or TR2 naming `operation`.
    fn concrete(&self, operation: &str) -> Result<&Concrete> {
        match self.inner.as_ref() {
            Repr::Concrete(c) => Ok(c),
            // A tracer whose trace has ended is a leak (TR5), not a value unknown while
            // tracing: say so instead of giving tracing advice.
            Repr::Traced(t) if !crate::liveness::is_live(t.trace) => Err(leaked(t)),
            Repr::Traced(t) => Err(Error::Tracer {
                kind: TracerErrorKind::Concretization,
                message: format!(
                    "{operation}() needs a concrete value, but got {}; its value is not known while tracing; use qb::where_ or qb::cond for data-dependent choices, a loop primitive for data-dependent loops, or mark the argument static",
                    format_tracer(t.node.0, t.ty.shape.dims(), t.ty.dtype)
                ),
            }),
        }
    }

    /// Host buffers of a concrete tensor (callers only pass concrete tensors).
    pub(crate) fn to_host(&self) -> Result<HostTensor> {
        let c = self.concrete("to_host")?;
        Ok(c.host.clone())
    }

    /// The host buffers of a concrete tensor that nobody else holds, taken out of it (for a run
    /// it is donated to); the tensor itself back when it is shared or a tracer.
    pub(crate) fn into_host(self) -> std::result::Result<HostTensor, Tensor> {
        match Arc::try_unwrap(self.inner) {
            Ok(Repr::Concrete(mut c)) => {
                let empty = HostTensor {
                    shape: Shape::scalar(),
                    data: HostData::F64(Arc::from([])),
                };
                Ok(std::mem::replace(&mut c.host, empty))
            }
            Ok(traced @ Repr::Traced(_)) => Err(Tensor {
                inner: Arc::new(traced),
            }),
            Err(inner) => Err(Tensor { inner }),
        }
    }

    /// The host buffers of a concrete tensor, borrowed (TR2 for a tracer, like `to_host`).
    pub(crate) fn host(&self) -> Result<&HostTensor> {
        Ok(&self.concrete("to_host")?.host)
    }

    /// The host buffers of a concrete tensor for `operation` (TR2 naming it for a tracer).
    pub(crate) fn host_for(&self, operation: &str) -> Result<&HostTensor> {
        Ok(&self.concrete(operation)?.host)
    }

    /// A stable identity for deduplicating captured constants within a trace.
    pub(crate) fn identity(&self) -> usize {
        Arc::as_ptr(&self.inner) as *const () as usize
    }

    pub(crate) fn ir_type(&self) -> TensorType {
        match self.inner.as_ref() {
            Repr::Concrete(c) => TensorType {
                dtype: c.host.data.dtype(),
                shape: c.host.shape.clone(),
                weak: c.weak,
            },
            Repr::Traced(t) => t.ty.clone(),
        }
    }

    /// Whether this tensor is a tracer of a transform.
    pub fn is_traced(&self) -> bool {
        self.tracer().is_some()
    }

    /// The id of a tracer's IR node in its trace (`None` for concrete tensors).
    pub fn node_id(&self) -> Option<u32> {
        self.tracer().map(|t| t.node.0)
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
        Ok(Tensor::from_parts(shape, T::into_host(data)?, false))
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match self.inner.as_ref() {
            Repr::Concrete(c) => c.host.data.dtype(),
            Repr::Traced(t) => t.ty.dtype,
        }
    }

    fn shape_ref(&self) -> &Shape {
        match self.inner.as_ref() {
            Repr::Concrete(c) => &c.host.shape,
            Repr::Traced(t) => &t.ty.shape,
        }
    }

    /// The extents of each axis.
    pub fn shape(&self) -> &[usize] {
        self.shape_ref().dims()
    }

    /// The rank.
    pub fn ndim(&self) -> usize {
        self.shape_ref().rank()
    }

    /// The number of elements.
    pub fn size(&self) -> usize {
        self.shape_ref().size()
    }

    /// Whether this tensor is a weakly typed value (born from a Rust `f64`).
    pub fn is_weak(&self) -> bool {
        match self.inner.as_ref() {
            Repr::Concrete(c) => c.weak,
            Repr::Traced(t) => t.ty.weak,
        }
    }

    /// Identity comparison: whether both handles share the same storage.
    pub fn same(a: &Tensor, b: &Tensor) -> bool {
        Arc::ptr_eq(&a.inner, &b.inner)
    }

    /// The value of a single-element tensor as `f64` (bool as 0/1).
    pub fn item(&self) -> Result<f64> {
        let c = self.concrete("item")?;
        self.single("item")?;
        Ok(c.host.data.get_f64(0))
    }

    /// The value of a single-element tensor as `i64`: integers exactly, bool as 0/1, floats
    /// truncated as a cast to int64 (numerics.md §12).
    pub fn item_i64(&self) -> Result<i64> {
        let c = self.concrete("item_i64")?;
        self.single("item_i64")?;
        Ok(c.host.data.get_i64(0))
    }

    /// The value of a single-element tensor as `bool` (a float is true when nonzero or NaN).
    pub fn item_bool(&self) -> Result<bool> {
        if self.is_traced() {
            return Err(Error::Tracer {
                kind: TracerErrorKind::ControlFlow,
                message: CONTROL_FLOW_MESSAGE.into(),
            });
        }
        if self.size() != 1 && self.dtype() == DType::Bool {
            return Err(Error::invalid(
                "the truth value of a multi-element tensor is ambiguous; reduce it with quabla.any or quabla.all",
            ));
        }
        self.single("item_bool")?;
        Ok(self.concrete("item_bool")?.host.data.get_f64(0) != 0.0)
    }

    fn single(&self, op: &str) -> Result<()> {
        if self.size() != 1 {
            return Err(Error::invalid(format!(
                "{op}() needs a tensor with exactly one element, got shape {}",
                self.shape_ref()
            )));
        }
        Ok(())
    }

    /// Flat row-major values converted to `T` (`f64`, `f32` or `bool`).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        Ok(T::from_host(&self.concrete("to_vec")?.host.data))
    }

    /// Flat row-major values as `bool` (floats: nonzero or NaN is true).
    pub fn to_vec_bool(&self) -> Result<Vec<bool>> {
        self.to_vec::<bool>()
    }

    /// Zero-copy read-only access to the storage when `T` is the tensor's dtype.
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        T::slice(&self.concrete("as_slice")?.host.data).ok_or_else(|| Error::Type {
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
        match self.inner.as_ref() {
            Repr::Concrete(c) => f.write_str(&format_tensor(c.host.shape.dims(), &c.host.data)),
            Repr::Traced(t) => f.write_str(&format_tracer(t.node.0, t.ty.shape.dims(), t.ty.dtype)),
        }
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// `values` in fresh shared storage, or `Error::OutOfMemory`.
fn shared_copy<T: Copy>(values: &[T]) -> Result<std::sync::Arc<[T]>> {
    quabla_ir::alloc::try_shared_from_slice(values).map_err(|e| {
        Error::out_of_memory(e.bytes, format!("a tensor of {} elements", values.len()))
    })
}

/// Rust element types that map to a Quabla dtype: `f64`, `f32`, `bool`, `i32` and `i64`.
pub trait Element: Copy + Clone + fmt::Debug + 'static {
    const DTYPE: DType;
    /// Shared storage holding a copy of `v` (`Error::OutOfMemory` when the allocator refuses).
    #[doc(hidden)]
    fn into_host(v: Vec<Self>) -> Result<HostData>;
    #[doc(hidden)]
    fn from_host(d: &HostData) -> Vec<Self>;
    #[doc(hidden)]
    fn slice(d: &HostData) -> Option<&[Self]>;
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    fn into_host(v: Vec<f64>) -> Result<HostData> {
        Ok(HostData::F64(shared_copy(&v)?))
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
    fn into_host(v: Vec<f32>) -> Result<HostData> {
        Ok(HostData::F32(shared_copy(&v)?))
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
    fn into_host(v: Vec<bool>) -> Result<HostData> {
        Ok(HostData::Bool(shared_copy(&v)?))
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

macro_rules! integer_element {
    ($t:ty, $variant:ident, $dtype:expr) => {
        impl Element for $t {
            const DTYPE: DType = $dtype;
            fn into_host(v: Vec<$t>) -> Result<HostData> {
                Ok(HostData::$variant(shared_copy(&v)?))
            }
            /// Integers exactly (int64 to int32 wraps); floats truncate as `astype` does.
            fn from_host(d: &HostData) -> Vec<$t> {
                match d {
                    HostData::$variant(v) => v.to_vec(),
                    other => match other.cast($dtype) {
                        HostData::$variant(v) => v.to_vec(),
                        _ => unreachable!("a cast to {} gives {} data", $dtype, $dtype),
                    },
                }
            }
            fn slice(d: &HostData) -> Option<&[$t]> {
                match d {
                    HostData::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}
integer_element!(i32, I32, DType::I32);
integer_element!(i64, I64, DType::I64);

/// Lets APIs that take several tensors (`operands(&[..])`) accept tensors or references.
impl AsRef<Tensor> for Tensor {
    fn as_ref(&self) -> &Tensor {
        self
    }
}
