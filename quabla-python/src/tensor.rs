//! The array classes: `dtype`, `Tensor` (with `TraceTensor`, its traced state, as a
//! subclass), `TensorView`; their properties, conversions, printing, operators and indexing.
//! The named methods of each op family are declared in `functions.rs`, next to the family's
//! module functions.

use crate::convert::{dtype_arg, ints, operand, operand_beside, shape_arg, to_tensor, type_name};
use crate::errors::{type_error, value_error, OrRaise};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyEllipsis, PyInt, PyList, PySlice, PyTuple};
use quabla as qb;

/// `qb.dtype`: the class of the three dtype objects, compared by identity.
#[pyclass(name = "dtype", module = "quabla", frozen)]
pub struct PyDType {
    pub dtype: qb::DType,
}

#[pymethods]
impl PyDType {
    /// `float64`, `float32` or `bool`.
    #[getter]
    fn name(&self) -> &'static str {
        py_name(self.dtype)
    }

    #[getter]
    fn itemsize(&self) -> usize {
        self.dtype.itemsize()
    }

    /// `quabla.float64`, `quabla.float32`, `quabla.bool_`: the names the objects have in the
    /// package.
    fn __repr__(&self) -> String {
        match self.dtype {
            qb::DType::Bool => "quabla.bool_".into(),
            d => format!("quabla.{}", py_name(d)),
        }
    }

    fn __str__(&self) -> String {
        self.dtype.to_string()
    }
}

/// The Python name of a dtype.
pub fn py_name(d: qb::DType) -> &'static str {
    d.name()
}

/// The one dtype object of `d`.
pub fn dtype_object(py: Python<'_>, d: qb::DType) -> PyResult<Bound<'_, PyDType>> {
    static OBJECTS: PyOnceLock<[Py<PyDType>; 5]> = PyOnceLock::new();
    let objects = OBJECTS.get_or_try_init(py, || -> PyResult<_> {
        Ok([
            Py::new(py, PyDType { dtype: qb::F64 })?,
            Py::new(py, PyDType { dtype: qb::F32 })?,
            Py::new(py, PyDType { dtype: qb::BOOL })?,
            Py::new(py, PyDType { dtype: qb::I32 })?,
            Py::new(py, PyDType { dtype: qb::I64 })?,
        ])
    })?;
    let i = match d {
        qb::DType::F64 => 0,
        qb::DType::F32 => 1,
        qb::DType::Bool => 2,
        qb::DType::I32 => 3,
        qb::DType::I64 => 4,
    };
    Ok(objects[i].bind(py).clone())
}

/// `qb.Tensor`: an eager, immutable array (and, as the base of `TraceTensor`, the methods a
/// tracer shares).
#[pyclass(name = "Tensor", module = "quabla", frozen, subclass, weakref)]
#[derive(Debug)]
pub struct PyTensor {
    pub t: qb::Tensor,
}

/// `qb.TraceTensor`: the symbolic value a transform hands to user code.
#[pyclass(name = "TraceTensor", module = "quabla", frozen, extends = PyTensor)]
pub struct PyTraceTensor;

/// A facade tensor as the Python object of its state.
pub fn wrap(py: Python<'_>, t: qb::Tensor) -> PyResult<Bound<'_, PyAny>> {
    if t.is_traced() {
        let init = PyClassInitializer::from(PyTensor { t }).add_subclass(PyTraceTensor);
        Ok(Bound::new(py, init)?.into_any())
    } else {
        Ok(Bound::new(py, PyTensor { t })?.into_any())
    }
}

/// A facade result as a Python tensor.
pub fn ret(py: Python<'_>, r: qb::Result<qb::Tensor>) -> PyResult<Bound<'_, PyAny>> {
    wrap(py, r.or_raise()?)
}

/// A list of tensors.
pub fn ret_list(py: Python<'_>, r: qb::Result<Vec<qb::Tensor>>) -> PyResult<Bound<'_, PyAny>> {
    let items = r
        .or_raise()?
        .into_iter()
        .map(|t| wrap(py, t))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.into_any())
}

/// `float(x)`, `int(x)` of a multi-element tensor: a `TypeError`, as NumPy's (`x.item()`
/// keeps its `ValueError`).
fn single_element(t: &qb::Tensor, op: &str) -> PyResult<()> {
    if t.shape().iter().product::<usize>() != 1 {
        return Err(type_error(format!(
            "only single-element tensors can be converted by {op}(), got shape {:?}; select an \
             element or reduce first",
            t.shape()
        )));
    }
    Ok(())
}

fn concrete_needed(t: &qb::Tensor, op: &str) -> PyResult<()> {
    if t.is_traced() {
        return Err(crate::errors::to_py(qb::Error::Tracer {
            kind: qb::TracerErrorKind::Concretization,
            message: format!(
                "{op}() needs a concrete value, but got {t}; its value is not known while \
                 tracing; use qb.where or qb.cond for data-dependent choices, a loop primitive \
                 for data-dependent loops, or mark the argument static"
            ),
        }));
    }
    Ok(())
}

/// Builds a tensor from `shape` and flat `data` (`qb.Tensor(shape, data, dtype=None)`).
fn tensor_from_flat(
    shape: &Bound<'_, PyAny>,
    data: &Bound<'_, PyAny>,
    dtype: Option<qb::DType>,
) -> PyResult<qb::Tensor> {
    let shape = shape_arg(shape)?;
    let flat = to_tensor(data)?;
    let t = flat.reshape(shape.iter().map(|&d| d as isize).collect::<Vec<_>>());
    let t = t.map_err(|_| {
        value_error(format!(
            "Tensor(shape, data): data has {} values but shape {:?} needs {}",
            flat.size(),
            shape,
            shape.iter().product::<usize>()
        ))
    })?;
    match dtype {
        Some(d) if d != t.dtype() => t.astype(d).or_raise(),
        _ => Ok(t),
    }
}

/// Reads one Python index item.
pub(crate) fn index_item(obj: &Bound<'_, PyAny>) -> PyResult<qb::IndexItem> {
    if obj.is_none() {
        return Ok(qb::IndexItem::NewAxis);
    }
    if obj.is_instance_of::<PyEllipsis>() {
        return Ok(qb::IndexItem::Ellipsis);
    }
    if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<pyo3::types::PyBool>() {
        let i: isize = obj.extract().map_err(|_| {
            pyo3::exceptions::PyIndexError::new_err("index out of range of the platform's integers")
        })?;
        return Ok(qb::IndexItem::Int(i));
    }
    if let Ok(s) = obj.cast::<PySlice>() {
        let part = |name: &str| -> PyResult<Option<isize>> {
            let v = s.getattr(name)?;
            if v.is_none() {
                Ok(None)
            } else {
                crate::ints::clamped_isize(&v, "slice bounds").map(Some)
            }
        };
        let step = part("step")?.unwrap_or(1);
        return Ok(qb::IndexItem::Slice {
            start: part("start")?,
            stop: part("stop")?,
            step,
        });
    }
    // TY15: the kind of the index is wrong, a TypeError (an out-of-range int is IndexError).
    Err(type_error(format!(
        "only integers, slices, None and Ellipsis are valid indices; got {}",
        type_name(obj)
    )))
}

/// The exponent of `power`/`**`: a non-negative Python int is the exact `powi`.
pub fn exponent(obj: &Bound<'_, PyAny>) -> PyResult<qb::Exponent> {
    if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<pyo3::types::PyBool>() {
        if let Ok(n) = obj.extract::<i32>() {
            if n >= 0 {
                return Ok(qb::Exponent::Int(n));
            }
        }
    }
    Ok(qb::Exponent::Operand(operand(obj)?))
}

/// A reshape target given as varargs or one sequence.
fn shape_varargs(shape: &Bound<'_, PyTuple>) -> PyResult<Vec<isize>> {
    if shape.len() == 1 {
        return ints(&shape.get_item(0)?, "shape");
    }
    shape
        .iter()
        .map(|d| crate::ints::int_arg(&d, "shape"))
        .collect()
}

#[pymethods]
impl PyTensor {
    #[new]
    #[pyo3(signature = (shape, data, dtype=None))]
    fn new(
        shape: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        let dtype = crate::convert::opt_dtype(dtype)?;
        Ok(PyTensor {
            t: tensor_from_flat(shape, data, dtype)?,
        })
    }

    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.t.shape().to_vec()
    }

    #[getter]
    fn ndim(&self) -> usize {
        self.t.ndim()
    }

    #[getter]
    fn size(&self) -> usize {
        self.t.size()
    }

    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDType>> {
        dtype_object(py, self.t.dtype())
    }

    #[getter(T)]
    fn transposed<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.t.t())
    }

    #[getter]
    fn node_id(&self) -> Option<u32> {
        self.t.node_id()
    }

    fn item<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        concrete_needed(&self.t, "item")?;
        if self.t.dtype() == qb::BOOL {
            Ok(pyo3::types::PyBool::new(py, self.t.item_bool().or_raise()?)
                .to_owned()
                .into_any())
        } else if self.t.dtype().is_integer() {
            Ok(self.t.item_i64().or_raise()?.into_pyobject(py)?.into_any())
        } else {
            Ok(self.t.item().or_raise()?.into_pyobject(py)?.into_any())
        }
    }

    fn tolist<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        concrete_needed(&self.t, "tolist")?;
        crate::convert::value_to_py(py, self.t.to_nested().or_raise()?)
    }

    fn to_flat_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        concrete_needed(&self.t, "to_flat_list")?;
        if self.t.dtype() == qb::BOOL {
            Ok(PyList::new(py, self.t.to_vec_bool().or_raise()?)?.into_any())
        } else if self.t.dtype().is_integer() {
            Ok(PyList::new(py, self.t.to_vec::<i64>().or_raise()?)?.into_any())
        } else {
            Ok(PyList::new(py, self.t.to_vec::<f64>().or_raise()?)?.into_any())
        }
    }

    /// The NumPy array interface: a zero-copy, read-only view of the host storage (NumPy keeps
    /// this tensor alive as the array's base).
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        concrete_needed(&self.t, "__array__")?;
        let (ptr, typestr) = match self.t.dtype() {
            qb::DType::F64 => (self.t.as_slice::<f64>().or_raise()?.as_ptr() as usize, "f8"),
            qb::DType::F32 => (self.t.as_slice::<f32>().or_raise()?.as_ptr() as usize, "f4"),
            qb::DType::I32 => (self.t.as_slice::<i32>().or_raise()?.as_ptr() as usize, "i4"),
            qb::DType::I64 => (self.t.as_slice::<i64>().or_raise()?.as_ptr() as usize, "i8"),
            qb::DType::Bool => (
                self.t.as_slice::<bool>().or_raise()?.as_ptr() as usize,
                "b1",
            ),
        };
        let order = if typestr == "b1" {
            "|"
        } else if cfg!(target_endian = "little") {
            "<"
        } else {
            ">"
        };
        let d = PyDict::new(py);
        d.set_item("shape", PyTuple::new(py, self.t.shape())?)?;
        d.set_item("typestr", format!("{order}{typestr}"))?;
        d.set_item("data", (ptr, true))?;
        d.set_item("version", 3)?;
        Ok(d)
    }

    /// `np.asarray(x)` with an optional dtype; read-only, zero-copy when the dtype matches.
    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        concrete_needed(&slf.get().t, "__array__")?;
        let py = slf.py();
        let np = py.import("numpy")?;
        let view = np.call_method1("asarray", (ArrayInterface::new(slf)?,))?;
        // NumPy 2's protocol: `copy=None` copies only for a dtype change, `copy=True` always,
        // `copy=False` never (ValueError when a dtype change needs one).
        let target = match dtype {
            Some(d) if !d.is_none() => np.call_method1("dtype", (d,))?,
            _ => view.getattr("dtype")?,
        };
        let same = target.eq(view.getattr("dtype")?)?;
        match (copy, same) {
            (Some(false), false) => Err(value_error(format!(
                "__array__: converting {} to {} needs a copy, but copy=False was given",
                py_name(slf.get().t.dtype()),
                target.getattr("name")?
            ))),
            (Some(true), _) | (_, false) => view.call_method1("astype", (target,)),
            _ => Ok(view),
        }
    }

    /// A read-only NumPy array sharing the host storage.
    fn numpy<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::__array__(slf, None, None)
    }

    fn __float__(&self) -> PyResult<f64> {
        concrete_needed(&self.t, "float")?;
        single_element(&self.t, "float")?;
        self.t.item().or_raise()
    }

    fn __int__(&self) -> PyResult<i64> {
        concrete_needed(&self.t, "int")?;
        single_element(&self.t, "int")?;
        if self.t.dtype().is_integer() {
            return self.t.item_i64().or_raise();
        }
        Ok(self.t.item().or_raise()?.trunc() as i64)
    }

    /// `[..][x]`, `range(x)`: a tracer has no value yet (TR2); a concrete integer tensor of
    /// one element is an index, as for NumPy; a float or bool one is not.
    fn __index__(&self) -> PyResult<i64> {
        concrete_needed(&self.t, "__index__")?;
        if self.t.dtype().is_integer() && self.t.ndim() == 0 {
            return self.t.item_i64().or_raise();
        }
        Err(type_error(format!(
            "a {} tensor cannot be used as an index; convert it with int(x)",
            py_name(self.t.dtype())
        )))
    }

    fn __bool__(&self) -> PyResult<bool> {
        if self.t.is_traced() || self.t.dtype() == qb::BOOL {
            return self.t.item_bool().or_raise();
        }
        Ok(true)
    }

    fn __repr__(&self) -> String {
        self.t.to_string()
    }

    fn __str__(&self) -> String {
        self.t.to_string()
    }

    fn __len__(&self) -> PyResult<usize> {
        self.t
            .shape()
            .first()
            .copied()
            .ok_or_else(|| type_error("len() of a rank-0 tensor"))
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        index: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // Index arrays (tensors, traced or not, lists, NumPy arrays) take the gather path.
        let entries = crate::indexing::entries(index)?;
        if crate::indexing::has_arrays(&entries) {
            return ret(py, self.t.index_with(entries));
        }
        let items: Vec<qb::IndexItem> = entries
            .into_iter()
            .filter_map(|e| match e {
                qb::IndexEntry::Basic(item) => Some(item),
                qb::IndexEntry::Array(_) => None,
            })
            .collect();
        ret(py, self.t.index(items))
    }

    fn astype<'py>(
        &self,
        py: Python<'py>,
        dtype: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.t.astype(dtype_arg(dtype)?))
    }

    #[pyo3(signature = (*shape))]
    fn reshape<'py>(
        &self,
        py: Python<'py>,
        shape: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.t.reshape(shape_varargs(shape)?))
    }

    #[pyo3(signature = (axes=None))]
    fn transpose<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::list::opt_axes)] axes: Option<Vec<isize>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match axes {
            None => ret(py, self.t.transpose()),
            Some(a) => ret(py, self.t.permute(a)),
        }
    }

    #[pyo3(signature = (axis, start, length, step=1))]
    fn slice<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::param::axis)] axis: isize,
        #[pyo3(from_py_with = crate::ints::param::start)] start: isize,
        #[pyo3(from_py_with = crate::ints::param::length)] length: usize,
        #[pyo3(from_py_with = crate::ints::param::slice_step)] step: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let v = self
            .t
            .slice(axis, start, length)
            .step(step)
            .eval()
            .or_raise()?;
        if self.t.is_traced() {
            // Under a trace the selection is a traced value, not a view.
            return ret(py, v.to_tensor());
        }
        Ok(Bound::new(py, PyTensorView { v })?.into_any())
    }

    fn add<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.__add__(py, other)
    }

    fn sub<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.__sub__(py, other)
    }

    fn mul<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.__mul__(py, other)
    }

    fn div<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.__truediv__(py, other)
    }

    fn __add__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::add(&self.t, operand_beside(&self.t, other)?))
    }

    fn __radd__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::add(self.reflected(other)?, &self.t))
    }

    fn __sub__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::sub(&self.t, operand_beside(&self.t, other)?))
    }

    fn __rsub__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::sub(self.reflected(other)?, &self.t))
    }

    fn __mul__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::mul(&self.t, operand_beside(&self.t, other)?))
    }

    fn __rmul__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::mul(self.reflected(other)?, &self.t))
    }

    fn __truediv__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::div(&self.t, operand_beside(&self.t, other)?))
    }

    fn __rtruediv__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::div(self.reflected(other)?, &self.t))
    }

    fn __neg__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::neg(&self.t))
    }

    fn __pos__<'py>(slf: &Bound<'py, Self>) -> Bound<'py, Self> {
        slf.clone()
    }

    /// Python's `abs(t)`: `qb.abs(t)`.
    fn __abs__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.t.abs())
    }

    fn __pow__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
        modulo: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if modulo.is_some_and(|m| !m.is_none()) {
            return Err(type_error(
                "pow() with a modulus is not supported for tensors",
            ));
        }
        // numerics.md §12: an integer base with a negative integer exponent is refused
        // eagerly (NumPy's rule); traced, the power is 0.
        if self.t.dtype().is_integer()
            && !self.t.is_traced()
            && other.is_instance_of::<PyInt>()
            && other.extract::<i64>().is_ok_and(|n| n < 0)
        {
            return Err(value_error(
                "integers to negative integer powers are not allowed; convert the base with \
                 astype(quabla.float64) first",
            ));
        }
        ret(py, qb::power(&self.t, exponent(other)?))
    }

    fn __rpow__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
        modulo: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if modulo.is_some_and(|m| !m.is_none()) {
            return Err(type_error(
                "pow() with a modulus is not supported for tensors",
            ));
        }
        ret(
            py,
            qb::power(
                self.reflected(other)?,
                qb::Exponent::Operand((&self.t).into()),
            ),
        )
    }

    fn __matmul__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // `@` is exactly `matmul`, rank-1 operands included (api.md §2.2).
        ret(py, qb::matmul(&self.t, operand_beside(&self.t, other)?))
    }

    fn __rmatmul__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::matmul(self.reflected(other)?, &self.t))
    }

    fn __lt__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::less(&self.t, operand_beside(&self.t, other)?))
    }

    fn __le__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::less_equal(&self.t, operand_beside(&self.t, other)?))
    }

    fn __gt__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::greater(&self.t, operand_beside(&self.t, other)?))
    }

    fn __ge__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(
            py,
            qb::greater_equal(&self.t, operand_beside(&self.t, other)?),
        )
    }

    /// `~x`: logical not of bools, bitwise not of integers.
    fn __invert__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.t.dtype().is_integer() {
            return ret(py, qb::bitwise_not(&self.t));
        }
        ret(py, qb::logical_not(&self.t))
    }

    /// `x & y`: bitwise and of integers; otherwise logical and (bools; floats are DT3).
    fn __and__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !self.t.dtype().is_integer() {
            return ret(py, qb::logical_and(&self.t, operand(other)?));
        }
        ret(py, qb::bitwise_and(&self.t, operand(other)?))
    }

    fn __rand__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !self.t.dtype().is_integer() {
            return ret(py, qb::logical_and(self.reflected(other)?, &self.t));
        }
        ret(py, qb::bitwise_and(self.reflected(other)?, &self.t))
    }

    /// `x | y`: bitwise or of integers; otherwise logical or (bools; floats are DT3).
    fn __or__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !self.t.dtype().is_integer() {
            return ret(py, qb::logical_or(&self.t, operand(other)?));
        }
        ret(py, qb::bitwise_or(&self.t, operand(other)?))
    }

    fn __ror__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !self.t.dtype().is_integer() {
            return ret(py, qb::logical_or(self.reflected(other)?, &self.t));
        }
        ret(py, qb::bitwise_or(self.reflected(other)?, &self.t))
    }

    fn __xor__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::bitwise_xor(&self.t, operand(other)?))
    }

    fn __rxor__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::bitwise_xor(self.reflected(other)?, &self.t))
    }

    fn __lshift__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::left_shift(&self.t, operand(other)?))
    }

    fn __rlshift__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::left_shift(self.reflected(other)?, &self.t))
    }

    fn __rshift__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::right_shift(&self.t, operand(other)?))
    }

    fn __rrshift__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::right_shift(self.reflected(other)?, &self.t))
    }

    /// `x // y`: floor division (NumPy's signs; 0 for an integer zero divisor).
    fn __floordiv__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(
            py,
            qb::floor_divide(&self.t, operand_beside(&self.t, other)?),
        )
    }

    fn __rfloordiv__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::floor_divide(self.reflected(other)?, &self.t))
    }

    /// `x % y`: `remainder`, with the divisor's sign.
    fn __mod__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::remainder(&self.t, operand_beside(&self.t, other)?))
    }

    fn __rmod__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::remainder(self.reflected(other)?, &self.t))
    }

    /// `x == y`: elementwise `equal` (api.md §2.1), a `bool_` tensor. An object that is no
    /// array and no number (`None`, a string) gives `NotImplemented`, so Python compares it by
    /// identity.
    fn __eq__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !comparable(other)? {
            return Ok(py.NotImplemented().into_bound(py));
        }
        ret(py, qb::equal(&self.t, operand_beside(&self.t, other)?))
    }

    /// `x != y`: elementwise `not_equal` (api.md §2.1).
    fn __ne__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !comparable(other)? {
            return Ok(py.NotImplemented().into_bound(py));
        }
        ret(py, qb::not_equal(&self.t, operand_beside(&self.t, other)?))
    }

    /// Tensors are unhashable, as in NumPy and JAX (`==` is elementwise): `hash(x)` raises
    /// `TypeError: unhashable type: 'Tensor'` (api.md §2.1); `id(x)` is the identity.
    fn __hash__(slf: &Bound<'_, Self>) -> PyResult<isize> {
        Err(type_error(format!(
            "unhashable type: '{}'",
            slf.get_type().name()?
        )))
    }

    /// Above NumPy's, so that a NumPy scalar or array on the left of a tensor defers to the
    /// tensor's reflected operator (`np.float64(2.0) * x` is the weak-scalar product, also
    /// for a tracer) instead of converting the tensor.
    #[classattr]
    #[allow(non_upper_case_globals)]
    const __array_priority__: f64 = 100.0;
}

impl PyTensor {
    /// The left operand of a reflected operator (`other + self`): as [`operand`], but a NumPy
    /// array on the left of a tracer (NumPy deferred to the tensor, `__array_priority__`)
    /// would need the tracer's value (TR2), as NumPy's own conversion would have.
    fn reflected(&self, other: &Bound<'_, PyAny>) -> PyResult<qb::Operand> {
        if self.t.is_traced()
            && other.cast::<PyTensor>().is_err()
            && other.hasattr("__array_interface__")?
            && !crate::convert::is_numpy_number(other)?
        {
            concrete_needed(&self.t, "__array__")?;
        }
        operand(other)
    }
}

/// Whether `==`/`!=` compare elementwise with `other`: tensors, numbers, sequences and
/// array-likes do; anything else (`None`, strings, arbitrary objects) is compared by Python.
fn comparable(other: &Bound<'_, PyAny>) -> PyResult<bool> {
    use pyo3::types::{PyBool, PyFloat};
    Ok(other.cast::<PyTensor>().is_ok()
        || other.cast::<PyTensorView>().is_ok()
        || other.is_instance_of::<PyBool>()
        || other.is_instance_of::<PyInt>()
        || other.is_instance_of::<PyFloat>()
        || other.is_instance_of::<PyList>()
        || other.is_instance_of::<PyTuple>()
        || other.hasattr("__array_interface__")?
        || other.hasattr("__array__")?)
}

/// `qb.TensorView`: a zero-copy, read-only strided view of a tensor.
#[pyclass(name = "TensorView", module = "quabla", frozen)]
pub struct PyTensorView {
    pub v: qb::TensorView,
}

#[pymethods]
impl PyTensorView {
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.v.shape().to_vec()
    }

    #[getter]
    fn ndim(&self) -> usize {
        self.v.shape().len()
    }

    #[getter]
    fn strides(&self) -> Vec<isize> {
        self.v.strides()
    }

    #[getter]
    fn offset(&self) -> usize {
        self.v.offset()
    }

    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDType>> {
        dtype_object(py, self.v.dtype())
    }

    #[pyo3(signature = (axis, start, length, step=1))]
    fn slice<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::param::axis)] axis: isize,
        #[pyo3(from_py_with = crate::ints::param::start)] start: isize,
        #[pyo3(from_py_with = crate::ints::param::length)] length: usize,
        #[pyo3(from_py_with = crate::ints::param::slice_step)] step: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let v = self
            .v
            .slice(axis, start, length)
            .step(step)
            .eval()
            .or_raise()?;
        Ok(Bound::new(py, PyTensorView { v })?.into_any())
    }

    fn to_flat_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.v.dtype() == qb::BOOL {
            Ok(PyList::new(py, self.v.to_vec::<bool>().or_raise()?)?.into_any())
        } else {
            Ok(PyList::new(py, self.v.to_vec::<f64>().or_raise()?)?.into_any())
        }
    }

    fn to_tensor<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.v.to_tensor())
    }

    fn __repr__(&self) -> String {
        format!(
            "TensorView(shape={:?}, strides={:?}, offset={}, dtype={})",
            self.v.shape(),
            self.v.strides(),
            self.v.offset(),
            py_name(self.v.dtype())
        )
    }

    fn __array__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let t = Bound::new(
            py,
            PyTensor {
                t: self.v.to_tensor().or_raise()?,
            },
        )?;
        PyTensor::__array__(&t, None, None)
    }
}

/// A helper object exposing a tensor's `__array_interface__` to NumPy (NumPy keeps it, and
/// with it the tensor, alive as the array's base).
#[pyclass(frozen)]
struct ArrayInterface {
    tensor: Py<PyTensor>,
}

impl ArrayInterface {
    fn new(t: &Bound<'_, PyTensor>) -> PyResult<ArrayInterface> {
        Ok(ArrayInterface {
            tensor: t.clone().unbind(),
        })
    }
}

#[pymethods]
impl ArrayInterface {
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.tensor.bind(py).get().__array_interface__(py)
    }
}

/// Registers the array classes on `m`.
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyDType>()?;
    m.add_class::<PyTensor>()?;
    m.add_class::<PyTraceTensor>()?;
    m.add_class::<PyTensorView>()?;
    m.add("float64", dtype_object(py, qb::F64)?)?;
    m.add("float32", dtype_object(py, qb::F32)?)?;
    m.add("bool_", dtype_object(py, qb::BOOL)?)?;
    m.add("int32", dtype_object(py, qb::I32)?)?;
    m.add("int64", dtype_object(py, qb::I64)?)?;
    Ok(())
}
