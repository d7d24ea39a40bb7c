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

/// The method `name` of a file object, or the TypeError of an argument that is neither a
/// path nor such an object (`save(12345, x)`, `load(None)`).
fn file_method<'py>(
    function: &str,
    file: &Bound<'py, PyAny>,
    name: &str,
) -> PyResult<Bound<'py, PyAny>> {
    match file.getattr(name) {
        Ok(m) if m.is_callable() => Ok(m),
        _ => Err(type_error(format!(
            "{function}: file must be a path (str or os.PathLike) or a binary file object \
             with a {name}() method, got {}",
            type_name(file)
        ))),
    }
}

/// Writes all of `bytes` with `write`, as many calls as it takes: a writer may take fewer
/// bytes than offered (a raw stream does) and report how many. A count that is not an int
/// between 1 and what was offered is `OSError`, since nothing reliable can follow; `None`
/// from a raw stream (`io.RawIOBase`) means it took nothing (it would block) and is `OSError`
/// too, while other file objects that return `None` report no count and took everything.
fn write_all(file: &Bound<'_, PyAny>, write: &Bound<'_, PyAny>, bytes: &[u8]) -> PyResult<()> {
    let py = file.py();
    let data = pyo3::types::PyBytes::new(py, bytes);
    let view = py
        .import("builtins")?
        .getattr("memoryview")?
        .call1((&data,))?;
    let is_raw = py
        .import("io")?
        .getattr("RawIOBase")
        .and_then(|raw| file.is_instance(&raw))
        .unwrap_or(false);
    let total = bytes.len();
    let mut done = 0;
    while done < total {
        let rest = view.get_item(pyo3::types::PySlice::new(
            py,
            done as isize,
            total as isize,
            1,
        ))?;
        let count = write.call1((rest,))?;
        let left = total - done;
        if count.is_none() && !is_raw {
            return Ok(());
        }
        let taken = if count.is_instance_of::<PyInt>() && !count.is_instance_of::<PyBool>() {
            count.extract::<i64>().ok()
        } else {
            None
        };
        match taken {
            Some(n) if n >= 1 && n as u64 <= left as u64 => done += n as usize,
            _ => {
                let got = count.repr().map(|r| r.to_string()).unwrap_or_default();
                return Err(pyo3::exceptions::PyOSError::new_err(format!(
                    "save: {}.write() returned {got} when offered {left} bytes ({done} of \
                     {total} written); a binary file's write() returns how many bytes it took",
                    type_name(file)
                )));
            }
        }
    }
    Ok(())
}

/// `save(file, tree)`.
#[pyfunction]
fn save(py: Python<'_>, file: &Bound<'_, PyAny>, tree: &Bound<'_, PyAny>) -> PyResult<()> {
    let Some(path) = as_path(file) else {
        let write = file_method("save", file, "write")?;
        let mut bytes: Vec<u8> = Vec::new();
        qb::save(&mut bytes, &saveable(tree, 0)?).or_raise()?;
        return write_all(file, &write, &bytes);
    };
    let value = saveable(tree, 0)?;
    crate::transforms::run(py, || qb::save(path.as_path(), &value))
}

/// `load(file)`.
#[pyfunction]
fn load<'py>(py: Python<'py>, file: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let value = match as_path(file) {
        Some(path) => crate::transforms::run(py, || qb::load(path.as_path()))?,
        None => {
            let data = file_method("load", file, "read")?.call0()?;
            let bytes: Vec<u8> = match data.cast::<pyo3::types::PyBytes>() {
                Ok(b) => b.as_bytes().to_vec(),
                Err(_) => data.extract::<Vec<u8>>().map_err(|_| {
                    type_error(format!(
                        "load: {}.read() returned {}, expected bytes; open the file in binary \
                         mode ('rb')",
                        type_name(file),
                        type_name(&data)
                    ))
                })?,
            };
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
