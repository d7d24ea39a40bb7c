//! Indexing with index arrays from Python: the items of `x[...]` and `x.at[...]`, the update
//! helper classes behind `x.at[idx].set(v)`, and the module functions `take`,
//! `take_along_axis`, `dynamic_slice` and `dynamic_update_slice`. Every value is computed by
//! the facade (`quabla::ops::indexed`); this module only converts arguments.

use crate::convert::{is_numpy_number, operand, to_tensor, type_name};
use crate::errors::{type_error, OrRaise};
use crate::tensor::{ret, PyTensor, PyTensorView};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyList, PyTuple};
use quabla as qb;

/// Whether `obj` (not a tensor) is an index array: a view, a list or a NumPy array.
fn is_index_array(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(obj.cast::<PyTensorView>().is_ok()
        || obj.is_instance_of::<PyList>()
        || (obj.hasattr("__array_interface__")? && !is_numpy_number(obj)?))
}

/// One item of `x[...]`: a basic item, or an integer or boolean index array.
fn entry(obj: &Bound<'_, PyAny>) -> PyResult<qb::IndexEntry> {
    // Tensors first: asking a tracer for its array interface is a tracer error.
    if let Ok(t) = obj.cast::<PyTensor>() {
        return array_entry(t.get().t.clone());
    }
    if is_numpy_number(obj)? && !obj.is_instance_of::<PyBool>() {
        if let Ok(i) = obj.extract::<isize>() {
            return Ok(qb::IndexEntry::Basic(qb::IndexItem::Int(i)));
        }
    }
    if !is_index_array(obj)? {
        return crate::tensor::index_item(obj).map(qb::IndexEntry::Basic);
    }
    array_entry(to_tensor(obj)?)
}

/// An index array, which must be integer or bool.
fn array_entry(t: qb::Tensor) -> PyResult<qb::IndexEntry> {
    if t.dtype().is_float() {
        // TY15: the kind of the index is wrong.
        return Err(type_error(format!(
            "only integers, slices, None and Ellipsis are valid indices, besides integer or boolean arrays; got an array of dtype {}",
            t.dtype().name()
        )));
    }
    Ok(qb::IndexEntry::Array(t))
}

/// The items of an index (a tuple is a sequence of items, anything else one item).
pub fn entries(index: &Bound<'_, PyAny>) -> PyResult<Vec<qb::IndexEntry>> {
    if let Ok(t) = index.cast::<PyTuple>() {
        t.iter().map(|i| entry(&i)).collect()
    } else {
        Ok(vec![entry(index)?])
    }
}

/// Whether any item is an index array (else the index is basic and takes the static path).
pub fn has_arrays(entries: &[qb::IndexEntry]) -> bool {
    entries
        .iter()
        .any(|e| matches!(e, qb::IndexEntry::Array(_)))
}

/// `x.at`: indexed by `x.at[idx]` to give the update methods.
#[pyclass(name = "_IndexUpdateHelper", module = "quabla", frozen)]
pub struct IndexUpdateHelper {
    pub t: qb::Tensor,
}

#[pymethods]
impl IndexUpdateHelper {
    fn __getitem__(&self, index: &Bound<'_, PyAny>) -> PyResult<IndexUpdateRef> {
        Ok(IndexUpdateRef {
            at: self.t.at(entries(index)?),
        })
    }

    fn __repr__(&self) -> String {
        "_IndexUpdateHelper".into()
    }
}

/// `x.at[idx]`: functional updates of the selected elements, each returning a new tensor.
#[pyclass(name = "_IndexUpdateRef", module = "quabla", frozen)]
pub struct IndexUpdateRef {
    at: qb::At,
}

#[pymethods]
impl IndexUpdateRef {
    /// The selected elements replaced by `values`; of repeated indices the last one wins.
    fn set<'py>(&self, py: Python<'py>, values: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.at.set(operand(values)?))
    }

    /// `values` added at the selection; repeated indices accumulate.
    fn add<'py>(&self, py: Python<'py>, values: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.at.add(operand(values)?))
    }

    /// The selection multiplied by `values`.
    fn multiply<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.at.mul(operand(values)?))
    }

    /// The same as `multiply`.
    fn mul<'py>(&self, py: Python<'py>, values: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.at.mul(operand(values)?))
    }

    /// `values` subtracted at the selection; repeated indices accumulate.
    fn subtract<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.at.subtract(operand(values)?))
    }

    /// The selection divided by `values` (by each of them at a repeated index).
    fn divide<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.at.divide(operand(values)?))
    }

    /// The selection raised to `values` (to each of them at a repeated index).
    fn power<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.at.power(operand(values)?))
    }

    /// `ufunc` applied to the selection, once per occurrence of an index (NumPy's
    /// `ufunc.at`): it receives the rank-1 array of selected values and returns their new
    /// values.
    fn apply<'py>(
        &self,
        py: Python<'py>,
        ufunc: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !ufunc.is_callable() {
            return Err(type_error(format!(
                "at[].apply takes a function, got {}",
                type_name(ufunc)
            )));
        }
        let f = ufunc.clone().unbind();
        let call = |v: &qb::Tensor| -> qb::Result<qb::Tensor> {
            Python::attach(|py| {
                let arg = crate::tensor::wrap(py, v.clone()).map_err(crate::errors::to_qb)?;
                let out = f.bind(py).call1((arg,)).map_err(crate::errors::to_qb)?;
                to_tensor(&out).map_err(crate::errors::to_qb)
            })
        };
        let out = crate::interrupt::run_holding_gil(py, || self.at.apply(call))?;
        crate::tensor::wrap(py, out)
    }

    /// The elementwise minimum of the selection and `values`.
    fn min<'py>(&self, py: Python<'py>, values: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.at.min(operand(values)?))
    }

    /// The elementwise maximum of the selection and `values`.
    fn max<'py>(&self, py: Python<'py>, values: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.at.max(operand(values)?))
    }

    /// The selection itself (`x[idx]`).
    fn get<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.at.get())
    }
}

#[pymethods]
impl PyTensor {
    /// `x.at[idx]`: the functional update API.
    #[getter]
    fn at(&self) -> IndexUpdateHelper {
        IndexUpdateHelper { t: self.t.clone() }
    }
}

/// An axis argument: `None` or an int.
fn opt_axis(axis: Option<&Bound<'_, PyAny>>) -> PyResult<Option<isize>> {
    match axis {
        None => Ok(None),
        Some(a) if a.is_none() => Ok(None),
        Some(a) if a.is_instance_of::<PyInt>() && !a.is_instance_of::<PyBool>() => {
            Ok(Some(a.extract()?))
        }
        Some(a) => Err(type_error(format!(
            "axis must be an int or None, got {}",
            type_name(a)
        ))),
    }
}

/// Start indices: a sequence of ints or integer scalar tensors (traced or not).
fn starts(obj: &Bound<'_, PyAny>) -> PyResult<Vec<qb::Operand>> {
    if obj.cast::<PyTensor>().is_ok() {
        let t = to_tensor(obj)?;
        if t.ndim() != 1 {
            return Err(type_error(format!(
                "start_indices must be a sequence of integer scalars or a 1-D integer tensor, got a tensor of shape {:?}",
                t.shape()
            )));
        }
        return (0..t.shape()[0])
            .map(|i| {
                t.index(qb::s![i as isize])
                    .map(qb::Operand::Tensor)
                    .or_raise()
            })
            .collect();
    }
    let items = obj.try_iter().map_err(|_| {
        type_error(format!(
            "start_indices must be a sequence of integer scalars, got {}",
            type_name(obj)
        ))
    })?;
    items
        .map(|i| {
            let i = i?;
            // Python and NumPy integers are static starts; tensors may be traced.
            if i.cast::<PyTensor>().is_err() && !i.is_instance_of::<PyBool>() {
                if let Ok(v) = i.extract::<i64>() {
                    return Ok(qb::Operand::Int(v));
                }
            }
            operand(&i)
        })
        .collect()
}

/// Slice sizes: a sequence of ints.
fn sizes(obj: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    crate::convert::ints(obj, "slice_sizes")?
        .into_iter()
        .map(|s| {
            usize::try_from(s)
                .map_err(|_| type_error(format!("slice_sizes must be positive, got {s}")))
        })
        .collect()
}

/// JAX's `mode` and `fill_value` of `take` and `take_along_axis`: `None` or `"fill"` (the
/// default), `"clip"`, `"wrap"`.
fn take_mode(
    mode: Option<&Bound<'_, PyAny>>,
    fill_value: Option<&Bound<'_, PyAny>>,
) -> PyResult<qb::TakeMode> {
    let name = match mode.filter(|m| !m.is_none()) {
        None => "fill".to_string(),
        Some(m) => m.extract::<String>().map_err(|_| {
            type_error(format!(
                "mode must be \"fill\", \"clip\" or \"wrap\", got {}",
                type_name(m)
            ))
        })?,
    };
    let fill = fill_value
        .filter(|v| !v.is_none())
        .map(to_tensor)
        .transpose()?;
    match name.as_str() {
        "fill" => Ok(qb::TakeMode::Fill(fill)),
        "clip" => Ok(qb::TakeMode::Clip),
        "wrap" => Ok(qb::TakeMode::Wrap),
        other => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "mode must be \"fill\", \"clip\" or \"wrap\", got \"{other}\""
        ))),
    }
}

/// `qb.take(a, indices, axis=None, mode=None, fill_value=None)`: JAX's modes, `"fill"` by
/// default (NaN, the integer minimum or True where an index is out of range).
#[pyfunction]
#[pyo3(signature = (a, indices, axis=None, mode=None, fill_value=None))]
fn take<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    indices: &Bound<'py, PyAny>,
    axis: Option<&Bound<'py, PyAny>>,
    mode: Option<&Bound<'py, PyAny>>,
    fill_value: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let x = to_tensor(a)?;
    let idx = to_tensor(indices)?;
    let mode = take_mode(mode, fill_value)?;
    ret(py, qb::take_with(&x, &idx, opt_axis(axis)?, mode))
}

/// `qb.take_along_axis(arr, indices, axis, mode=None, fill_value=None)`.
#[pyfunction]
#[pyo3(signature = (arr, indices, axis, mode=None, fill_value=None))]
fn take_along_axis<'py>(
    py: Python<'py>,
    arr: &Bound<'py, PyAny>,
    indices: &Bound<'py, PyAny>,
    axis: isize,
    mode: Option<&Bound<'py, PyAny>>,
    fill_value: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let x = to_tensor(arr)?;
    let idx = to_tensor(indices)?;
    let mode = take_mode(mode, fill_value)?;
    ret(py, qb::take_along_axis_with(&x, &idx, axis, mode))
}

/// `qb.dynamic_slice(operand, start_indices, slice_sizes)` (JAX's `lax.dynamic_slice`).
#[pyfunction]
fn dynamic_slice<'py>(
    py: Python<'py>,
    operand: &Bound<'py, PyAny>,
    start_indices: &Bound<'py, PyAny>,
    slice_sizes: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let x = to_tensor(operand)?;
    ret(
        py,
        qb::dynamic_slice(&x, starts(start_indices)?, &sizes(slice_sizes)?),
    )
}

/// `qb.dynamic_update_slice(operand, update, start_indices)`.
#[pyfunction]
fn dynamic_update_slice<'py>(
    py: Python<'py>,
    operand: &Bound<'py, PyAny>,
    update: &Bound<'py, PyAny>,
    start_indices: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let x = to_tensor(operand)?;
    let u = to_tensor(update)?;
    ret(py, qb::dynamic_update_slice(&x, &u, starts(start_indices)?))
}

pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<IndexUpdateHelper>()?;
    m.add_class::<IndexUpdateRef>()?;
    m.add_function(wrap_pyfunction!(take, m)?)?;
    m.add_function(wrap_pyfunction!(take_along_axis, m)?)?;
    m.add_function(wrap_pyfunction!(dynamic_slice, m)?)?;
    m.add_function(wrap_pyfunction!(dynamic_update_slice, m)?)?;
    Ok(())
}
