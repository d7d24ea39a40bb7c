//! `qb.random` (api.md §14): keys and the samplers. A `Key` samples on the host; an int64
//! key tensor (`key_data(key)`, or a `Key` passed as a traced argument of a transform)
//! samples by recorded operations, so it works inside `jit`, `vmap` and loops.

use crate::convert::{opt_dtype, shape_arg, to_tensor, type_name};
use crate::errors::{type_error, OrRaise};
use crate::tensor::ret;
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyTuple};
use quabla as qb;

/// `qb.random.Key`: immutable and hashable; usable as a static `jit` argument.
#[pyclass(name = "Key", module = "quabla.random", frozen, eq, hash)]
#[derive(PartialEq, Eq, Hash)]
pub struct PyKey {
    pub key: qb::random::Key,
}

#[pymethods]
impl PyKey {
    /// The 64-bit state as a Python int.
    #[getter]
    fn value(&self) -> u64 {
        self.key.value()
    }

    fn __repr__(&self) -> String {
        format!("Key(value={})", self.key.value())
    }
}

/// An int reduced modulo 2**64 (`what` names it in errors: a tracer is TR6).
fn modulo_64(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if let Ok(t) = obj.cast::<crate::tensor::PyTensor>() {
        if t.get().t.is_traced() {
            return Err(crate::errors::to_py(qb::Error::Tracer {
                kind: qb::TracerErrorKind::RandomTraced,
                message: format!(
                    "{what} is a tracer: a Key is a host value; use key tensors \
                     (quabla.random.key_data(key)) to derive keys inside a transform"
                ),
            }));
        }
    }
    if !obj.is_instance_of::<PyInt>() {
        return Err(type_error(format!(
            "expected an int, got {}",
            type_name(obj)
        )));
    }
    obj.call_method1("__and__", (u64::MAX,))?.extract()
}

/// A key argument: a `Key`, or an int64 key tensor (checked by the facade).
fn key_arg(obj: &Bound<'_, PyAny>) -> PyResult<qb::random::KeyArg> {
    if let Ok(k) = obj.cast::<PyKey>() {
        return Ok(qb::random::KeyArg::Host(k.get().key));
    }
    if let Ok(t) = obj.cast::<crate::tensor::PyTensor>() {
        return Ok(qb::random::KeyArg::Tensor(t.get().t.clone()));
    }
    Err(type_error(format!(
        "key must be a quabla.random.Key or an int64 key tensor, got {}",
        type_name(obj)
    )))
}

/// A parameter (`minval`, `maxval`, `p`): a number, or an array (traced or not) that
/// broadcasts to the sample's shape.
fn param(obj: &Bound<'_, PyAny>) -> PyResult<qb::random::Param> {
    if obj.is_instance_of::<PyFloat>() || obj.is_instance_of::<PyInt>() {
        return Ok(qb::random::Param::from(obj.extract::<f64>()?));
    }
    Ok(qb::random::Param::from(to_tensor(obj)?))
}

#[pyfunction]
fn key(seed: &Bound<'_, PyAny>) -> PyResult<PyKey> {
    Ok(PyKey {
        key: qb::random::key(modulo_64(seed, "the seed of quabla.random.key")?),
    })
}

/// `split`: a tuple of `Key`s for a `Key`, an int64 tensor of shape `(num,)` for a key
/// tensor.
#[pyfunction]
#[pyo3(signature = (key, num=2))]
fn split<'py>(
    py: Python<'py>,
    key: &Bound<'py, PyAny>,
    #[pyo3(from_py_with = crate::ints::param::num)] num: usize,
) -> PyResult<Bound<'py, PyAny>> {
    match key_arg(key)? {
        qb::random::KeyArg::Host(k) => {
            let keys = qb::random::split(&k, num).or_raise()?;
            Ok(PyTuple::new(py, keys.into_iter().map(|key| PyKey { key }))?.into_any())
        }
        qb::random::KeyArg::Tensor(t) => ret(py, qb::random::split(&t, num)),
    }
}

/// `fold_in`: a `Key` for a `Key` and an int; a key tensor when the key or the data is a
/// tensor (the data may be a traced integer, such as a loop index).
#[pyfunction]
fn fold_in<'py>(
    py: Python<'py>,
    key: &Bound<'py, PyAny>,
    data: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let data_tensor = match data.cast::<crate::tensor::PyTensor>() {
        Ok(t) => Some(t.get().t.clone()),
        Err(_) => None,
    };
    match (key_arg(key)?, data_tensor) {
        (qb::random::KeyArg::Host(k), None) => {
            let key =
                qb::random::fold_in(&k, modulo_64(data, "the data of quabla.random.fold_in")?);
            Ok(Bound::new(py, PyKey { key })?.into_any())
        }
        (qb::random::KeyArg::Host(k), Some(d)) => ret(py, qb::random::fold_in(&k, &d)),
        (qb::random::KeyArg::Tensor(t), Some(d)) => ret(py, qb::random::fold_in(&t, &d)),
        (qb::random::KeyArg::Tensor(t), None) => ret(
            py,
            qb::random::fold_in(&t, modulo_64(data, "the data of quabla.random.fold_in")?),
        ),
    }
}

/// `key_data(keys)`: the int64 key tensor of a `Key` (shape `()`), or of a sequence of keys
/// (shape `(n,)`), the form `vmap` maps over.
#[pyfunction]
fn key_data<'py>(py: Python<'py>, keys: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if let Ok(k) = keys.cast::<PyKey>() {
        return ret(py, Ok(qb::random::key_data(&k.get().key)));
    }
    let items: Option<Vec<qb::random::Key>> =
        if keys.is_instance_of::<pyo3::types::PyList>() || keys.is_instance_of::<PyTuple>() {
            keys.try_iter()?
                .map(|item| {
                    item.ok()
                        .and_then(|i| i.cast::<PyKey>().ok().map(|k| k.get().key))
                })
                .collect()
        } else {
            None
        };
    match items {
        Some(keys) if !keys.is_empty() => ret(py, qb::random::keys_data(&keys)),
        _ => Err(type_error(format!(
            "key_data takes a quabla.random.Key or a non-empty list or tuple of them, got {}",
            type_name(keys)
        ))),
    }
}

/// `wrap_key_data(data)`: the `Key` of a concrete int64 key tensor of shape `()`.
#[pyfunction]
fn wrap_key_data(data: &Bound<'_, PyAny>) -> PyResult<PyKey> {
    let t = to_tensor(data)?;
    Ok(PyKey {
        key: qb::random::wrap_key_data(&t).or_raise()?,
    })
}

#[pyfunction]
#[pyo3(signature = (key, shape, minval, maxval, dtype=None))]
fn randint<'py>(
    py: Python<'py>,
    key: &Bound<'py, PyAny>,
    shape: &Bound<'py, PyAny>,
    minval: &Bound<'py, PyAny>,
    maxval: &Bound<'py, PyAny>,
    dtype: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    // Python ints (a bool is refused as a likely mistake), or integer arrays that broadcast to
    // the shape.
    let bound = |v: &Bound<'py, PyAny>, name: &str| -> PyResult<qb::random::IntParam> {
        if v.is_instance_of::<pyo3::types::PyBool>() {
            return Err(type_error(format!(
                "randint {name} must be an int, got bool"
            )));
        }
        if v.is_instance_of::<PyInt>() {
            return v
                .extract::<i64>()
                .map(qb::random::IntParam::from)
                .map_err(|_| {
                    pyo3::exceptions::PyValueError::new_err(format!(
                        "randint {name} must fit in int64, got {v}"
                    ))
                });
        }
        if v.is_instance_of::<PyFloat>() {
            return Err(type_error(format!(
                "randint {name} must be an int or an integer array, got float"
            )));
        }
        Ok(qb::random::IntParam::from(to_tensor(v)?))
    };
    let (lo, hi) = (bound(minval, "minval")?, bound(maxval, "maxval")?);
    let call = qb::random::randint(key_arg(key)?, shape_arg(shape)?, lo, hi)
        .dtype(opt_dtype(dtype)?.unwrap_or(qb::I64));
    ret(py, call.eval())
}

#[pyfunction]
#[pyo3(signature = (key, lower, upper, shape=None, dtype=None))]
fn truncated_normal<'py>(
    py: Python<'py>,
    key: &Bound<'py, PyAny>,
    lower: f64,
    upper: f64,
    shape: Option<&Bound<'py, PyAny>>,
    dtype: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let shape = shape.map(shape_arg).transpose()?.unwrap_or_default();
    let call = qb::random::truncated_normal(key_arg(key)?, lower, upper, shape)
        .dtype(opt_dtype(dtype)?.unwrap_or(qb::F64));
    ret(py, call.eval())
}

/// A population of `permutation` and `choice`: an int `n` (`range(n)`) or an array.
fn population(obj: &Bound<'_, PyAny>, function: &str) -> PyResult<qb::random::Population> {
    if obj.is_instance_of::<pyo3::types::PyBool>() {
        return Err(type_error(format!(
            "{function} takes an int or an array, got bool"
        )));
    }
    if obj.is_instance_of::<PyInt>() {
        let n: usize = obj.extract().map_err(|_| {
            pyo3::exceptions::PyValueError::new_err(format!("{function} needs n >= 1, got {obj}"))
        })?;
        return Ok(qb::random::Population::Range(n));
    }
    Ok(qb::random::Population::Array(to_tensor(obj)?))
}

/// `permutation(key, x, axis=0)`: a random order of `range(x)` for an int (int64), or `x`
/// permuted along `axis`.
#[pyfunction]
#[pyo3(signature = (key, x, axis=0))]
fn permutation<'py>(
    py: Python<'py>,
    key: &Bound<'py, PyAny>,
    x: &Bound<'py, PyAny>,
    axis: isize,
) -> PyResult<Bound<'py, PyAny>> {
    let key = key_arg(key)?;
    match population(x, "permutation")? {
        qb::random::Population::Array(t) if axis != 0 => {
            // Permute along `axis` by moving it first and back.
            let moved = t.moveaxis([axis], [0]).or_raise()?;
            let out = qb::random::permutation(key, &moved).and_then(|p| p.moveaxis([0], [axis]));
            ret(py, out)
        }
        pop => ret(py, qb::random::permutation(key, pop)),
    }
}

/// `choice(key, a, shape=(), replace=True, p=None, axis=0)`.
#[pyfunction]
#[pyo3(signature = (key, a, shape=None, replace=true, p=None, axis=0))]
fn choice<'py>(
    py: Python<'py>,
    key: &Bound<'py, PyAny>,
    a: &Bound<'py, PyAny>,
    shape: Option<&Bound<'py, PyAny>>,
    replace: bool,
    p: Option<&Bound<'py, PyAny>>,
    axis: isize,
) -> PyResult<Bound<'py, PyAny>> {
    let mut call = qb::random::choice(key_arg(key)?, population(a, "choice")?)
        .replace(replace)
        .axis(axis);
    if let Some(s) = shape {
        call = call.shape(shape_arg(s)?);
    }
    if let Some(p) = p.filter(|p| !p.is_none()) {
        call = call.p(&to_tensor(p)?);
    }
    ret(py, call.eval())
}

#[pyfunction]
#[pyo3(signature = (key, logits, axis=-1))]
fn categorical<'py>(
    py: Python<'py>,
    key: &Bound<'py, PyAny>,
    logits: &Bound<'py, PyAny>,
    axis: isize,
) -> PyResult<Bound<'py, PyAny>> {
    let logits = to_tensor(logits)?;
    ret(
        py,
        qb::random::categorical(key_arg(key)?, &logits)
            .axis(axis)
            .eval(),
    )
}

#[pyfunction]
#[pyo3(signature = (key, shape=None, dtype=None, minval=None, maxval=None))]
fn uniform<'py>(
    py: Python<'py>,
    key: &Bound<'py, PyAny>,
    shape: Option<&Bound<'py, PyAny>>,
    dtype: Option<&Bound<'py, PyAny>>,
    minval: Option<&Bound<'py, PyAny>>,
    maxval: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let shape = shape.map(shape_arg).transpose()?.unwrap_or_default();
    let mut call =
        qb::random::uniform(key_arg(key)?, shape).dtype(opt_dtype(dtype)?.unwrap_or(qb::F64));
    if let Some(v) = minval {
        call = call.minval(param(v)?);
    }
    if let Some(v) = maxval {
        call = call.maxval(param(v)?);
    }
    ret(py, call.eval())
}

#[pyfunction]
#[pyo3(signature = (key, shape=None, dtype=None))]
fn normal<'py>(
    py: Python<'py>,
    key: &Bound<'py, PyAny>,
    shape: Option<&Bound<'py, PyAny>>,
    dtype: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let shape = shape.map(shape_arg).transpose()?.unwrap_or_default();
    let call = qb::random::normal(key_arg(key)?, shape).dtype(opt_dtype(dtype)?.unwrap_or(qb::F64));
    ret(py, call.eval())
}

#[pyfunction]
#[pyo3(signature = (key, p=None, shape=None))]
fn bernoulli<'py>(
    py: Python<'py>,
    key: &Bound<'py, PyAny>,
    p: Option<&Bound<'py, PyAny>>,
    shape: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut call = qb::random::bernoulli(key_arg(key)?);
    if let Some(p) = p {
        call = call.p(param(p)?);
    }
    if let Some(s) = shape {
        call = call.shape(shape_arg(s)?);
    }
    ret(py, call.eval())
}

macro_rules! initializers {
    ($($name:ident),*) => {$(
        #[pyfunction]
        #[pyo3(signature = (key, shape, dtype=None))]
        fn $name<'py>(
            py: Python<'py>,
            key: &Bound<'py, PyAny>,
            shape: &Bound<'py, PyAny>,
            dtype: Option<&Bound<'py, PyAny>>,
        ) -> PyResult<Bound<'py, PyAny>> {
            let call = qb::random::$name(key_arg(key)?, shape_arg(shape)?)
                .dtype(opt_dtype(dtype)?.unwrap_or(qb::F64));
            ret(py, call.eval())
        }
    )*};
}

initializers!(glorot_normal, glorot_uniform, he_normal);

/// Registers `qb.random` on `m`.
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyKey>()?;
    for f in [
        wrap_pyfunction!(key, m)?,
        wrap_pyfunction!(split, m)?,
        wrap_pyfunction!(fold_in, m)?,
        wrap_pyfunction!(uniform, m)?,
        wrap_pyfunction!(normal, m)?,
        wrap_pyfunction!(bernoulli, m)?,
        wrap_pyfunction!(glorot_normal, m)?,
        wrap_pyfunction!(glorot_uniform, m)?,
        wrap_pyfunction!(he_normal, m)?,
        wrap_pyfunction!(key_data, m)?,
        wrap_pyfunction!(wrap_key_data, m)?,
        wrap_pyfunction!(randint, m)?,
        wrap_pyfunction!(categorical, m)?,
        wrap_pyfunction!(truncated_normal, m)?,
        wrap_pyfunction!(permutation, m)?,
        wrap_pyfunction!(choice, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
