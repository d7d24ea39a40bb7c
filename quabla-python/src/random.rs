//! `qb.random` (api.md §14): keys and the samplers, all eager on the host.

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
                    "{what} is a tracer: quabla.random samples on the host and keys are not \
                     traced; draw samples outside the transform and pass them in"
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

fn key_arg(obj: &Bound<'_, PyAny>) -> PyResult<qb::random::Key> {
    obj.cast::<PyKey>().map(|k| k.get().key).map_err(|_| {
        type_error(format!(
            "key must be a quabla.random.Key, got {}",
            type_name(obj)
        ))
    })
}

/// A bound (`minval`, `maxval`, `p`): a number or a concrete rank-0 array.
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

#[pyfunction]
#[pyo3(signature = (key, num=2))]
fn split<'py>(
    py: Python<'py>,
    key: &Bound<'py, PyAny>,
    #[pyo3(from_py_with = crate::ints::param::num)] num: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    let keys = qb::random::split(&key_arg(key)?, num).or_raise()?;
    PyTuple::new(py, keys.into_iter().map(|key| PyKey { key }))
}

#[pyfunction]
fn fold_in(key: &Bound<'_, PyAny>, data: &Bound<'_, PyAny>) -> PyResult<PyKey> {
    Ok(PyKey {
        key: qb::random::fold_in(
            &key_arg(key)?,
            modulo_64(data, "the data of quabla.random.fold_in")?,
        ),
    })
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
        qb::random::uniform(&key_arg(key)?, shape).dtype(opt_dtype(dtype)?.unwrap_or(qb::F64));
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
    let call =
        qb::random::normal(&key_arg(key)?, shape).dtype(opt_dtype(dtype)?.unwrap_or(qb::F64));
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
    let mut call = qb::random::bernoulli(&key_arg(key)?);
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
            let call = qb::random::$name(&key_arg(key)?, shape_arg(shape)?)
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
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
