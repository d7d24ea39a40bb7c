//! `cond`, `fori_loop`, `scan` and `while_loop` (api.md §11) with Python bodies. The facade
//! runs them as loops eagerly and records one region per call under a transform; the bodies
//! are called back with `Tensor`s (tracers inside a region) and the loop index as a Python
//! `int` whenever it is static.

use crate::convert::{to_tensor, type_name};
use crate::errors::{to_qb, type_error, value_error, OrRaise};
use crate::interrupt::run_holding_gil;
use crate::tensor::{wrap, PyTensor};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use quabla as qb;

/// A carry, branch result or per-step output as one tensor (transforms.md §10: one floating
/// array, no pytrees). A tuple, a dict or a list holding arrays is a pytree, which would
/// otherwise be stacked into one array silently: it is refused with the packing advice.
fn carry_tensor(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<qb::Tensor> {
    if let Ok(t) = obj.cast::<PyTensor>() {
        return Ok(t.get().t.clone());
    }
    if is_pytree(obj)? {
        return Err(pytree_refused(obj, what));
    }
    to_tensor(obj)
}

fn pytree_refused(obj: &Bound<'_, PyAny>, what: &str) -> PyErr {
    type_error(format!(
        "{what} must be one array, got {}; regions take no pytree carries: pack several values \
         with quabla.concat (or quabla.stack) and slice them apart in the body",
        type_name(obj)
    ))
}

/// Whether `obj` is a container of arrays rather than an array literal: any tuple or dict, or
/// a list with an array inside.
fn is_pytree(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if obj.is_instance_of::<PyTuple>() || obj.is_instance_of::<PyDict>() {
        return Ok(true);
    }
    if obj.is_instance_of::<PyList>() {
        for item in obj.try_iter()? {
            let item = item?;
            if item.cast::<PyTensor>().is_ok() || is_pytree(&item)? {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// A body's result as one tensor.
fn tensor_result(out: &Bound<'_, PyAny>, what: &str) -> qb::Result<qb::Tensor> {
    if let Ok(t) = out.cast::<PyTensor>() {
        return Ok(t.get().t.clone());
    }
    if is_pytree(out).map_err(to_qb)? {
        return Err(to_qb(pytree_refused(out, what)));
    }
    to_tensor(out).map_err(|e| {
        crate::errors::result_error(out.py(), e, || {
            format!(
                "{what} must return one array (the carry), got {}",
                type_name(out)
            )
        })
    })
}

fn tensors_tuple<'py>(
    py: Python<'py>,
    head: Vec<Bound<'py, PyAny>>,
    ops: &[qb::Tensor],
) -> PyResult<Bound<'py, PyTuple>> {
    let mut items = head;
    for t in ops {
        items.push(wrap(py, t.clone())?);
    }
    PyTuple::new(py, items)
}

fn index_object<'py>(py: Python<'py>, i: &qb::LoopIndex) -> PyResult<Bound<'py, PyAny>> {
    match i.static_value() {
        Some(v) => Ok(v.into_pyobject(py)?.into_any()),
        None => wrap(py, i.tensor().clone()),
    }
}

fn operand_tensors(operands: &Bound<'_, PyAny>) -> PyResult<Vec<qb::Tensor>> {
    operands.try_iter()?.map(|o| to_tensor(&o?)).collect()
}

fn callable_arg(f: &Bound<'_, PyAny>, name: &str) -> PyResult<Py<PyAny>> {
    if !f.is_callable() {
        return Err(type_error(format!(
            "{name} must be callable, got {}",
            type_name(f)
        )));
    }
    Ok(f.clone().unbind())
}

/// A `cond` branch calling the Python function `fun(*operands)`.
fn branch(fun: &Py<PyAny>) -> impl Fn(&[qb::Tensor]) -> qb::Result<qb::Tensor> + '_ {
    move |o: &[qb::Tensor]| {
        Python::attach(|py| {
            let args = tensors_tuple(py, Vec::new(), o).map_err(to_qb)?;
            let out = fun.bind(py).call1(args).map_err(to_qb)?;
            // A Python number is a weak constant: it adopts the other branch's dtype.
            if out.is_instance_of::<pyo3::types::PyFloat>()
                || (out.is_instance_of::<pyo3::types::PyInt>()
                    && !out.is_instance_of::<pyo3::types::PyBool>())
            {
                return qb::mul(out.extract::<f64>().map_err(to_qb)?, 1.0);
            }
            tensor_result(&out, "a cond branch result")
        })
    }
}

/// `cond(pred, true_fun, false_fun, *operands)`.
#[pyfunction]
#[pyo3(signature = (pred, true_fun, false_fun, *operands))]
fn cond<'py>(
    py: Python<'py>,
    pred: &Bound<'py, PyAny>,
    true_fun: &Bound<'py, PyAny>,
    false_fun: &Bound<'py, PyAny>,
    operands: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    let pred = to_tensor(pred)?;
    let ops = operand_tensors(operands.as_any())?;
    let (t, f) = (
        callable_arg(true_fun, "true_fun")?,
        callable_arg(false_fun, "false_fun")?,
    );
    let out = run_holding_gil(py, || qb::cond(&pred, branch(&t), branch(&f), &ops))?;
    wrap(py, out)
}

/// `fori_loop(lower, upper, body, init, *, operands=(), unroll=False)`.
#[pyfunction]
#[pyo3(signature = (lower, upper, body, init, *, operands=None, unroll=false))]
fn fori_loop<'py>(
    py: Python<'py>,
    lower: &Bound<'py, PyAny>,
    upper: &Bound<'py, PyAny>,
    body: &Bound<'py, PyAny>,
    init: &Bound<'py, PyAny>,
    operands: Option<&Bound<'py, PyAny>>,
    unroll: bool,
) -> PyResult<Bound<'py, PyAny>> {
    // Static Python ints of any sign (`range(lower, upper)`); a bool is refused as a likely
    // mistake, a tracer is TR2.
    let bound = |obj: &Bound<'py, PyAny>, name: &str| -> PyResult<i64> {
        if obj.is_instance_of::<pyo3::types::PyBool>() {
            return Err(type_error(format!("{name} must be an int, got bool")));
        }
        crate::ints::int_arg(obj, name)
    };
    let (lower, upper) = (bound(lower, "lower")?, bound(upper, "upper")?);
    let body = callable_arg(body, "body")?;
    let init_obj = init;
    let init = carry_tensor(init, "the fori_loop carry")?;
    if upper <= lower && init_obj.cast::<PyTensor>().is_ok() {
        // No iteration: the carry is `init` itself, the same object (api.md §11).
        return Ok(init_obj.clone());
    }
    let ops = operands
        .map(operand_tensors)
        .transpose()?
        .unwrap_or_default();
    // The facade counts from 0 up: a negative lower bound runs the loop over
    // `0..upper - lower` and hands the body `i + lower`.
    let (start, end, shift) = if lower >= 0 {
        (lower as usize, upper.max(lower) as usize, 0)
    } else {
        let trips = usize::try_from((upper as i128 - lower as i128).max(0))
            .map_err(|_| value_error("fori_loop: upper - lower does not fit a loop count"))?;
        (0, trips, lower)
    };
    let run_body = |i: qb::LoopIndex, c: qb::Tensor, o: &[qb::Tensor]| -> qb::Result<qb::Tensor> {
        Python::attach(|py| {
            let head = vec![
                shifted_index(py, &i, shift).map_err(to_qb)?,
                wrap(py, c).map_err(to_qb)?,
            ];
            let args = tensors_tuple(py, head, o).map_err(to_qb)?;
            let out = body.bind(py).call1(args).map_err(to_qb)?;
            tensor_result(&out, "the fori_loop carry")
        })
    };
    let out = run_holding_gil(py, || {
        qb::fori_loop(start, end, run_body, &init)
            .operands(&ops)
            .unroll(unroll)
            .eval()
    })?;
    wrap(py, out)
}

/// The loop index as the body sees it, `shift` added (a Python int when static).
fn shifted_index<'py>(
    py: Python<'py>,
    i: &qb::LoopIndex,
    shift: i64,
) -> PyResult<Bound<'py, PyAny>> {
    if shift == 0 {
        return index_object(py, i);
    }
    match i.static_value() {
        Some(v) => Ok((v as i64 + shift).into_pyobject(py)?.into_any()),
        None => wrap(py, i.tensor().add(shift as f64).or_raise()?),
    }
}

/// `scan(f, init, *, length, operands=(), unroll=False) -> (carry, ys)`.
#[pyfunction]
#[pyo3(signature = (f, init, *, length, operands=None, unroll=false))]
fn scan<'py>(
    py: Python<'py>,
    f: &Bound<'py, PyAny>,
    init: &Bound<'py, PyAny>,
    #[pyo3(from_py_with = crate::ints::param::length)] length: usize,
    operands: Option<&Bound<'py, PyAny>>,
    unroll: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let f = callable_arg(f, "f")?;
    let init = carry_tensor(init, "the scan carry")?;
    let ops = operands
        .map(operand_tensors)
        .transpose()?
        .unwrap_or_default();
    let step = |c: qb::Tensor,
                i: qb::LoopIndex,
                o: &[qb::Tensor]|
     -> qb::Result<(qb::Tensor, qb::Tensor)> {
        Python::attach(|py| {
            let head = vec![
                wrap(py, c).map_err(to_qb)?,
                index_object(py, &i).map_err(to_qb)?,
            ];
            let args = tensors_tuple(py, head, o).map_err(to_qb)?;
            let out = f.bind(py).call1(args).map_err(to_qb)?;
            let pair: (Bound<'_, PyAny>, Bound<'_, PyAny>) = out.extract().map_err(|_| {
                crate::errors::user_type_error("the scan function must return a pair (carry, y)")
            })?;
            Ok((
                tensor_result(&pair.0, "the scan carry")?,
                tensor_result(&pair.1, "the scan per-step output y")?,
            ))
        })
    };
    let (carry, ys) = run_holding_gil(py, || {
        qb::scan(step, &init, length)
            .operands(&ops)
            .unroll(unroll)
            .eval()
    })?;
    Ok(PyTuple::new(py, [wrap(py, carry)?, wrap(py, ys)?])?.into_any())
}

/// `switch(index, branches, *operands)`: `branches[index](*operands)` with the index clamped
/// into range (JAX's `lax.switch`).
#[pyfunction]
#[pyo3(signature = (index, branches, *operands))]
fn switch<'py>(
    py: Python<'py>,
    index: &Bound<'py, PyAny>,
    branches: &Bound<'py, PyAny>,
    operands: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    let index = to_tensor(index)?;
    let funs = branches
        .try_iter()
        .map_err(|_| type_error("switch: branches must be a sequence of callables"))?
        .enumerate()
        .map(|(k, f)| callable_arg(&f?, &format!("branches[{k}]")))
        .collect::<PyResult<Vec<_>>>()?;
    let ops = operand_tensors(operands.as_any())?;
    let closures: Vec<_> = funs.iter().map(branch).collect();
    let refs: Vec<qb::Branch<'_>> = closures
        .iter()
        .map(|c| c as &dyn Fn(&[qb::Tensor]) -> qb::Result<qb::Tensor>)
        .collect();
    let out = run_holding_gil(py, || qb::switch(&index, &refs, &ops))?;
    wrap(py, out)
}

/// `_scan_over(step, init, xs, *, operands=(), reverse=False, unroll=False)`: the native half
/// of `scan(f, init, xs)`. `xs` is the list of leaves of the user's pytree; `step(carry,
/// x_leaves, *operands)` returns `(carry, y_leaves)` (the Python half flattens and rebuilds
/// the trees).
#[pyfunction]
#[pyo3(signature = (step, init, xs, *, operands=None, reverse=false, unroll=false))]
fn _scan_over<'py>(
    py: Python<'py>,
    step: &Bound<'py, PyAny>,
    init: &Bound<'py, PyAny>,
    xs: &Bound<'py, PyAny>,
    operands: Option<&Bound<'py, PyAny>>,
    reverse: bool,
    unroll: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let step = callable_arg(step, "f")?;
    let init = carry_tensor(init, "the scan carry")?;
    let xs = operand_tensors(xs)?;
    let ops = operands
        .map(operand_tensors)
        .transpose()?
        .unwrap_or_default();
    let body = |c: qb::Tensor,
                x: Vec<qb::Tensor>,
                o: &[qb::Tensor]|
     -> qb::Result<(qb::Tensor, Vec<qb::Tensor>)> {
        Python::attach(|py| {
            let x_leaves = x
                .into_iter()
                .map(|t| wrap(py, t))
                .collect::<PyResult<Vec<_>>>()
                .map_err(to_qb)?;
            let head = vec![
                wrap(py, c).map_err(to_qb)?,
                PyList::new(py, x_leaves).map_err(to_qb)?.into_any(),
            ];
            let args = tensors_tuple(py, head, o).map_err(to_qb)?;
            let out = step.bind(py).call1(args).map_err(to_qb)?;
            let pair: (Bound<'_, PyAny>, Bound<'_, PyAny>) = out.extract().map_err(|_| {
                crate::errors::user_type_error("the scan function must return a pair (carry, y)")
            })?;
            let ys = pair
                .1
                .try_iter()
                .map_err(to_qb)?
                .map(|y| {
                    let y = y.map_err(to_qb)?;
                    tensor_result(&y, "the scan per-step output y")
                })
                .collect::<qb::Result<Vec<_>>>()?;
            Ok((tensor_result(&pair.0, "the scan carry")?, ys))
        })
    };
    let (carry, ys) = run_holding_gil(py, || {
        qb::scan_over(body, &init, &xs)
            .operands(&ops)
            .reverse(reverse)
            .unroll(unroll)
            .eval::<Vec<qb::Tensor>>()
    })?;
    let ys = ys
        .into_iter()
        .map(|t| wrap(py, t))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyTuple::new(py, [wrap(py, carry)?, PyList::new(py, ys)?.into_any()])?.into_any())
}

/// `while_loop(cond_fun, body_fun, init, *, operands=(), max_trips=None)`; `max_trips` bounds
/// the loop and gives it a reverse mode (docs/loops.md).
#[pyfunction]
#[pyo3(signature = (cond_fun, body_fun, init, *, operands=None, max_trips=None))]
fn while_loop<'py>(
    py: Python<'py>,
    cond_fun: &Bound<'py, PyAny>,
    body_fun: &Bound<'py, PyAny>,
    init: &Bound<'py, PyAny>,
    operands: Option<&Bound<'py, PyAny>>,
    #[pyo3(from_py_with = crate::ints::param::opt_max_trips)] max_trips: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let cf = callable_arg(cond_fun, "cond_fun")?;
    let bf = callable_arg(body_fun, "body_fun")?;
    let init = carry_tensor(init, "the while_loop carry")?;
    let ops = operands
        .map(operand_tensors)
        .transpose()?
        .unwrap_or_default();
    let test = |c: &qb::Tensor, o: &[qb::Tensor]| -> qb::Result<qb::Tensor> {
        Python::attach(|py| {
            let args =
                tensors_tuple(py, vec![wrap(py, c.clone()).map_err(to_qb)?], o).map_err(to_qb)?;
            let out = cf.bind(py).call1(args).map_err(to_qb)?;
            tensor_result(&out, "cond_fun")
        })
    };
    let body = |c: qb::Tensor, o: &[qb::Tensor]| -> qb::Result<qb::Tensor> {
        Python::attach(|py| {
            let args = tensors_tuple(py, vec![wrap(py, c).map_err(to_qb)?], o).map_err(to_qb)?;
            let out = bf.bind(py).call1(args).map_err(to_qb)?;
            tensor_result(&out, "the while_loop carry")
        })
    };
    let mut looped = qb::while_loop(test, body, &init).operands(&ops);
    if let Some(n) = max_trips {
        looped = looped.max_trips(n);
    }
    wrap(py, run_holding_gil(py, || looped.eval())?)
}

/// Registers the control-flow functions on `m`.
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cond, m)?)?;
    m.add_function(wrap_pyfunction!(fori_loop, m)?)?;
    m.add_function(wrap_pyfunction!(scan, m)?)?;
    m.add_function(wrap_pyfunction!(switch, m)?)?;
    m.add_function(wrap_pyfunction!(_scan_over, m)?)?;
    m.add_function(wrap_pyfunction!(while_loop, m)?)
}
