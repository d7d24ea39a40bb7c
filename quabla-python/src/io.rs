//! `qb.save` and `qb.load` (api.md §15): a path (written atomically by the facade) or a
//! binary file object.

use crate::convert::{enter_container, tree_int, type_name, value_to_py};
use crate::errors::{type_error, OrRaise};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use quabla as qb;
use quabla::tree::{DictKey, Value};
use std::path::PathBuf;

/// A tree of saveable leaves (TY9 for anything else; a tracer is TR2), inside `depth`
/// containers (the pytree depth limit, checked before the file crate's own).
pub(crate) fn saveable(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::None);
    }
    if let Ok(t) = obj.cast::<crate::tensor::PyTensor>() {
        return Ok(Value::Array(t.get().t.clone()));
    }
    if let Ok(v) = obj.cast::<crate::tensor::PyTensorView>() {
        return Ok(Value::Array(v.get().v.to_tensor().or_raise()?));
    }
    if obj.is_instance_of::<PyBool>() {
        return Ok(Value::Bool(obj.extract()?));
    }
    if obj.is_instance_of::<PyInt>() {
        return tree_int(obj).map(Value::Int);
    }
    if obj.is_exact_instance_of::<PyFloat>() {
        return Ok(Value::Float(obj.extract()?));
    }
    if obj.is_exact_instance_of::<PyString>() {
        return Ok(Value::Str(obj.extract()?));
    }
    if obj.is_exact_instance_of::<PyList>() {
        let inner = enter_container(depth)?;
        let items = obj
            .try_iter()?
            .map(|o| saveable(&o?, inner))
            .collect::<PyResult<_>>()?;
        return Ok(Value::List(items));
    }
    if obj.is_exact_instance_of::<PyTuple>() {
        let inner = enter_container(depth)?;
        let items = obj
            .try_iter()?
            .map(|o| saveable(&o?, inner))
            .collect::<PyResult<_>>()?;
        return Ok(Value::Tuple(items));
    }
    if obj.is_exact_instance_of::<PyDict>() {
        let inner = enter_container(depth)?;
        let mut entries = Vec::new();
        for (k, v) in obj.cast::<PyDict>()?.iter() {
            let key = if k.is_instance_of::<PyString>() {
                DictKey::Str(k.extract()?)
            } else if k.is_instance_of::<PyInt>() && !k.is_instance_of::<PyBool>() {
                DictKey::Int(tree_int(&k)?)
            } else {
                return Err(type_error(
                    "dict keys in a pytree must all be str or all be int",
                ));
            };
            entries.push((key, saveable(&v, inner)?));
        }
        return Ok(Value::Dict(entries));
    }
    Err(type_error(format!(
        "cannot save {}: allowed leaves are quabla arrays, None, bool, int, float and str",
        type_name(obj)
    )))
}

pub(crate) fn as_path(file: &Bound<'_, PyAny>) -> Option<PathBuf> {
    if file.is_instance_of::<PyString>() || file.hasattr("__fspath__").unwrap_or(false) {
        file.extract::<PathBuf>().ok()
    } else {
        None
    }
}

/// `save(file, tree)`.
#[pyfunction]
fn save(py: Python<'_>, file: &Bound<'_, PyAny>, tree: &Bound<'_, PyAny>) -> PyResult<()> {
    let value = saveable(tree, 0)?;
    match as_path(file) {
        Some(path) => crate::transforms::run(py, || qb::save(path.as_path(), &value)),
        None => {
            let mut bytes: Vec<u8> = Vec::new();
            qb::save(&mut bytes, &value).or_raise()?;
            file.call_method1("write", (pyo3::types::PyBytes::new(py, &bytes),))?;
            Ok(())
        }
    }
}

/// `load(file)`.
#[pyfunction]
fn load<'py>(py: Python<'py>, file: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let value = match as_path(file) {
        Some(path) => crate::transforms::run(py, || qb::load(path.as_path()))?,
        None => {
            let bytes: Vec<u8> = file.call_method0("read")?.extract()?;
            qb::load(&mut bytes.as_slice()).or_raise()?
        }
    };
    value_to_py(py, value)
}

/// Registers `save` and `load` on `m`.
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(save, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)
}
