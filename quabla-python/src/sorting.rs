//! The order and counting functions with integer results (`argmax`, `argmin`, `sort`,
//! `argsort`, `top_k`, `searchsorted`, `one_hot`, `bincount`, `cumprod`) with JAX's keyword
//! arguments. Each converts its arguments and calls the facade function of the same name.

use crate::convert::{opt_dtype, to_tensor};
use crate::errors::{value_error, OrRaise};
use crate::tensor::{ret, wrap, PyTensor};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use quabla as qb;

/// `x` flattened when `axis` is `None`, with the axis to work along.
fn along(x: qb::Tensor, axis: Option<isize>) -> PyResult<(qb::Tensor, isize)> {
    match axis {
        Some(a) => Ok((x, a)),
        None => Ok((x.ravel().or_raise()?, 0)),
    }
}

fn arg_extremum<'py>(
    py: Python<'py>,
    call: qb::ArgExtremum,
    axis: Option<isize>,
    keepdims: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let call = match axis {
        Some(a) => call.axis(a),
        None => call,
    };
    ret(py, call.keepdims(keepdims).eval())
}

/// `argmax(x, axis=None, keepdims=False)`: int64 index of the first maximum (NaN counts as
/// the maximum).
#[pyfunction]
#[pyo3(signature = (x, axis=None, keepdims=false))]
fn argmax<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    #[pyo3(from_py_with = crate::ints::param::opt_axis)] axis: Option<isize>,
    keepdims: bool,
) -> PyResult<Bound<'py, PyAny>> {
    arg_extremum(py, qb::argmax(to_tensor(x)?), axis, keepdims)
}

/// `argmin(x, axis=None, keepdims=False)`.
#[pyfunction]
#[pyo3(signature = (x, axis=None, keepdims=false))]
fn argmin<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    #[pyo3(from_py_with = crate::ints::param::opt_axis)] axis: Option<isize>,
    keepdims: bool,
) -> PyResult<Bound<'py, PyAny>> {
    arg_extremum(py, qb::argmin(to_tensor(x)?), axis, keepdims)
}

/// `sort(x, axis=-1, descending=False)`; `axis=None` sorts the flattened array.
#[pyfunction]
#[pyo3(signature = (x, axis=Some(-1), descending=false))]
fn sort<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    #[pyo3(from_py_with = crate::ints::param::opt_axis)] axis: Option<isize>,
    descending: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let (x, axis) = along(to_tensor(x)?, axis)?;
    ret(py, qb::sort(&x).axis(axis).descending(descending).eval())
}

/// `argsort(x, axis=-1, descending=False, stable=True)`: always stable.
#[pyfunction]
#[pyo3(signature = (x, axis=Some(-1), descending=false, stable=true))]
fn argsort<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    #[pyo3(from_py_with = crate::ints::param::opt_axis)] axis: Option<isize>,
    descending: bool,
    stable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    // Every sort here is stable; `stable=False` only allows an unstable one.
    let _ = stable;
    let (x, axis) = along(to_tensor(x)?, axis)?;
    ret(py, qb::argsort(&x).axis(axis).descending(descending).eval())
}

/// `top_k(x, k) -> (values, indices)` along the last axis, largest first.
#[pyfunction]
fn top_k<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    #[pyo3(from_py_with = crate::ints::param::k)] k: isize,
) -> PyResult<Bound<'py, PyAny>> {
    // A negative k is out of range like 0: the facade's error says which k is valid.
    let (values, indices) = qb::top_k(to_tensor(x)?, k.max(0) as usize).or_raise()?;
    Ok(PyTuple::new(py, [wrap(py, values)?, wrap(py, indices)?])?.into_any())
}

/// `searchsorted(a, v, side="left")`.
#[pyfunction]
#[pyo3(signature = (a, v, side="left"))]
fn searchsorted<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    side: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let side = match side {
        "left" => qb::Side::Left,
        "right" => qb::Side::Right,
        other => {
            return Err(value_error(format!(
                "searchsorted: side must be 'left' or 'right', got {other:?}"
            )))
        }
    };
    ret(
        py,
        qb::searchsorted(to_tensor(a)?, to_tensor(v)?)
            .side(side)
            .eval(),
    )
}

/// `one_hot(x, num_classes, dtype=float64)`.
#[pyfunction]
#[pyo3(signature = (x, num_classes, dtype=None))]
fn one_hot<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    #[pyo3(from_py_with = crate::ints::param::num_classes)] num_classes: usize,
    dtype: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let dtype = opt_dtype(dtype)?.unwrap_or(qb::F64);
    ret(
        py,
        qb::one_hot(to_tensor(x)?, num_classes).dtype(dtype).eval(),
    )
}

/// `bincount(x, weights=None, minlength=0, *, length=None)`. Without `length` the count runs
/// to `max(x) + 1` (at least `minlength`), read eagerly; under a transform `length` is needed.
#[pyfunction]
#[pyo3(signature = (x, weights=None, minlength=0, *, length=None))]
fn bincount<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    weights: Option<&Bound<'py, PyAny>>,
    #[pyo3(from_py_with = crate::ints::param::minlength)] minlength: usize,
    #[pyo3(from_py_with = crate::ints::param::opt_length)] length: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let x = to_tensor(x)?;
    let length = match length {
        Some(n) => n,
        None => {
            if x.is_traced() {
                return Err(crate::errors::to_py(qb::Error::Tracer {
                    kind: qb::TracerErrorKind::Concretization,
                    message: "bincount of a traced array needs a static output size: pass \
                              length="
                        .into(),
                }));
            }
            let top = if x.size() == 0 || !x.dtype().is_integer() {
                0
            } else {
                x.max().or_raise()?.item_i64().or_raise()?.max(-1) + 1
            };
            (top as usize).max(minlength).max(1)
        }
    };
    let mut call = qb::bincount(&x, length);
    if let Some(w) = weights {
        if !w.is_none() {
            call = call.weights(to_tensor(w)?);
        }
    }
    ret(py, call.eval())
}

/// `cumprod(x, axis=None, reverse=False)`.
#[pyfunction]
#[pyo3(signature = (x, axis=None, reverse=false))]
fn cumprod<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    #[pyo3(from_py_with = crate::ints::param::opt_axis)] axis: Option<isize>,
    reverse: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let (x, axis) = along(to_tensor(x)?, axis)?;
    ret(py, qb::cumprod(&x).axis(axis).reverse(reverse).eval())
}

#[pymethods]
impl PyTensor {
    #[pyo3(signature = (axis=None, keepdims=false))]
    fn argmax<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::param::opt_axis)] axis: Option<isize>,
        keepdims: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        arg_extremum(py, qb::argmax(&self.t), axis, keepdims)
    }

    #[pyo3(signature = (axis=None, keepdims=false))]
    fn argmin<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::param::opt_axis)] axis: Option<isize>,
        keepdims: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        arg_extremum(py, qb::argmin(&self.t), axis, keepdims)
    }

    #[pyo3(signature = (axis=Some(-1), descending=false))]
    fn sort<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::param::opt_axis)] axis: Option<isize>,
        descending: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (x, axis) = along(self.t.clone(), axis)?;
        ret(py, qb::sort(&x).axis(axis).descending(descending).eval())
    }

    #[pyo3(signature = (axis=Some(-1), descending=false))]
    fn argsort<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::param::opt_axis)] axis: Option<isize>,
        descending: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (x, axis) = along(self.t.clone(), axis)?;
        ret(py, qb::argsort(&x).axis(axis).descending(descending).eval())
    }

    #[pyo3(signature = (axis=None, reverse=false))]
    fn cumprod<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::param::opt_axis)] axis: Option<isize>,
        reverse: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (x, axis) = along(self.t.clone(), axis)?;
        ret(py, qb::cumprod(&x).axis(axis).reverse(reverse).eval())
    }
}

/// Registers the functions on `m`.
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for f in [
        wrap_pyfunction!(argmax, m)?,
        wrap_pyfunction!(argmin, m)?,
        wrap_pyfunction!(sort, m)?,
        wrap_pyfunction!(argsort, m)?,
        wrap_pyfunction!(top_k, m)?,
        wrap_pyfunction!(searchsorted, m)?,
        wrap_pyfunction!(one_hot, m)?,
        wrap_pyfunction!(bincount, m)?,
        wrap_pyfunction!(cumprod, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
