//! `cond`, `fori_loop`, `scan` and `while_loop` (api.md §11) with Python bodies. The facade
//! runs them as loops eagerly and records one region per call under a transform; the bodies
//! are called back with `Tensor`s (tracers inside a region) and the loop index as a Python
//! `int` whenever it is static (a weak int64 tracer otherwise, which behaves as the int).
//!
//! A loop carry is one array or, as in JAX, a pytree (tuple, list, dict, registered class)
//! of floating or integer arrays; a `Key` leaf travels as its key tensor. The facade's loops
//! take the leaves as a `Vec<Tensor>` and [`LoopCarry`] rebuilds the Python structure around
//! them for each call of the body.

use crate::convert::{to_tensor, type_name};
use crate::errors::{to_qb, type_error, value_error, OrRaise};
use crate::interrupt::run_holding_gil;
use crate::tensor::{wrap, PyTensor};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use quabla as qb;

fn pytree_refused(obj: &Bound<'_, PyAny>, what: &str) -> PyErr {
    type_error(format!(
        "{what} must be one array, got {}; return a pytree from a loop body or a scan step \
         instead, or pack several values with quabla.concat (or quabla.stack)",
        type_name(obj)
    ))
}

/// Whether `obj` is a container of arrays rather than an array literal: any tuple or dict, a
/// list with an array, a `Key` or a container inside, or a registered pytree class.
fn is_pytree(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if obj.is_instance_of::<PyTuple>() || obj.is_instance_of::<PyDict>() {
        return Ok(true);
    }
    if obj.is_instance_of::<PyList>() {
        for item in obj.try_iter()? {
            let item = item?;
            if item.cast::<PyTensor>().is_ok()
                || item.cast::<crate::random::PyKey>().is_ok()
                || is_pytree(&item)?
            {
                return Ok(true);
            }
        }
        return Ok(false);
    }
    if obj.cast::<PyTensor>().is_ok() || obj.is_none() {
        return Ok(false);
    }
    // A registered class (a dataclass, a namedtuple of arrays was a tuple above).
    Ok(crate::tree::flatten(obj)
        .map(|(_, def)| def.def != qb::tree::TreeDef::Leaf)
        .unwrap_or(false))
}

/// A loop carry: one array, or the structure of a pytree whose leaves the facade carries.
struct LoopCarry {
    /// `None` for one array.
    def: Option<crate::tree::PyTreeDef>,
    what: &'static str,
}

impl LoopCarry {
    /// The carry of `init` and its leaves as tensors.
    fn of(init: &Bound<'_, PyAny>, what: &'static str) -> PyResult<(LoopCarry, Vec<qb::Tensor>)> {
        if let Ok(t) = init.cast::<PyTensor>() {
            return Ok((LoopCarry { def: None, what }, vec![t.get().t.clone()]));
        }
        if !is_pytree(init)? {
            return Ok((LoopCarry { def: None, what }, vec![to_tensor(init)?]));
        }
        let (leaves, def) = crate::tree::flatten(init)?;
        let tensors = leaves
            .iter()
            .map(|leaf| carry_leaf(&leaf))
            .collect::<PyResult<Vec<_>>>()?;
        Ok((
            LoopCarry {
                def: Some(def),
                what,
            },
            tensors,
        ))
    }

    /// The carry as the body sees it: the array, or the pytree rebuilt around the leaves.
    fn to_py<'py>(&self, py: Python<'py>, leaves: Vec<qb::Tensor>) -> PyResult<Bound<'py, PyAny>> {
        let mut wrapped = leaves
            .into_iter()
            .map(|t| wrap(py, t))
            .collect::<PyResult<Vec<_>>>()?;
        match &self.def {
            None => Ok(wrapped.remove(0)),
            Some(def) => crate::tree::unflatten(py, def, PyList::new(py, wrapped)?.as_any()),
        }
    }

    /// The leaves of the carry a body returned; a different structure is SH13.
    fn leaves_of(&self, out: &Bound<'_, PyAny>) -> qb::Result<Vec<qb::Tensor>> {
        let Some(def) = &self.def else {
            return Ok(vec![tensor_result(out, self.what)?]);
        };
        let (leaves, got) = crate::tree::flatten(out).map_err(to_qb)?;
        if got != *def {
            return Err(qb::Error::Shape {
                op: "loop".into(),
                message: format!(
                    "{}: the body changed the carry's structure from {} to {}",
                    self.what, def.def, got.def
                ),
            });
        }
        leaves
            .iter()
            .map(|leaf| carry_leaf(&leaf).map_err(to_qb))
            .collect()
    }
}

/// One leaf of a pytree carry as a tensor: an array, a `Key` (its key tensor) or an array
/// literal (a number).
fn carry_leaf(leaf: &Bound<'_, PyAny>) -> PyResult<qb::Tensor> {
    if let Ok(t) = leaf.cast::<PyTensor>() {
        return Ok(t.get().t.clone());
    }
    if let Ok(k) = leaf.cast::<crate::random::PyKey>() {
        return Ok(qb::random::key_data(&k.get().key));
    }
    to_tensor(leaf)
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
    let (carry, leaves) = LoopCarry::of(init, "the fori_loop carry")?;
    if upper <= lower {
        // No iteration: the carry is `init` itself, the same object (api.md §11), once the
        // carry contract holds.
        run_holding_gil(py, || {
            qb::fori_loop(0, 0, |_, c: Vec<qb::Tensor>, _| Ok(c), &leaves).eval()
        })?;
        return Ok(init.clone());
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
    let run_body =
        |i: qb::LoopIndex, c: Vec<qb::Tensor>, o: &[qb::Tensor]| -> qb::Result<Vec<qb::Tensor>> {
            Python::attach(|py| {
                let head = vec![
                    shifted_index(py, &i, shift).map_err(to_qb)?,
                    carry.to_py(py, c).map_err(to_qb)?,
                ];
                let args = tensors_tuple(py, head, o).map_err(to_qb)?;
                let out = body.bind(py).call1(args).map_err(to_qb)?;
                carry.leaves_of(&out)
            })
        };
    let out = run_holding_gil(py, || {
        qb::fori_loop(start, end, run_body, &leaves)
            .operands(&ops)
            .unroll(unroll)
            .eval()
    })?;
    carry.to_py(py, out)
}

/// The loop index as the body sees it, `shift` added (a Python int when static, a weak int64
/// tracer otherwise).
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
        None => wrap(py, i.tensor().add(shift).or_raise()?),
    }
}

/// A scan step's result `(carry, y)` as the carry's leaves and the leaves of `y` (a pytree
/// of arrays, or one array) with its structure.
fn step_result(
    carry: &LoopCarry,
    out: &Bound<'_, PyAny>,
) -> qb::Result<(Vec<qb::Tensor>, Vec<qb::Tensor>, crate::tree::PyTreeDef)> {
    let pair: (Bound<'_, PyAny>, Bound<'_, PyAny>) = out.extract().map_err(|_| {
        crate::errors::user_type_error("the scan function must return a pair (carry, y)")
    })?;
    let c = carry.leaves_of(&pair.0)?;
    let (leaves, def) = crate::tree::flatten(&pair.1).map_err(to_qb)?;
    let ys = leaves
        .iter()
        .map(|y| tensor_result(&y, "the scan per-step output y"))
        .collect::<qb::Result<Vec<_>>>()?;
    Ok((c, ys, def))
}

/// The `y` structure a scan's steps share (TY when a step changes it).
fn same_structure(
    seen: &std::cell::RefCell<Option<crate::tree::PyTreeDef>>,
    def: crate::tree::PyTreeDef,
) -> qb::Result<()> {
    let mut seen = seen.borrow_mut();
    match &*seen {
        Some(first) if *first != def => Err(to_qb(type_error(
            "scan: the per-step output y must keep one pytree structure",
        ))),
        Some(_) => Ok(()),
        None => {
            *seen = Some(def);
            Ok(())
        }
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
    let (carry, leaves) = LoopCarry::of(init, "the scan carry")?;
    let ops = operands
        .map(operand_tensors)
        .transpose()?
        .unwrap_or_default();
    let y_def = std::cell::RefCell::new(None);
    let step = |c: Vec<qb::Tensor>,
                i: qb::LoopIndex,
                o: &[qb::Tensor]|
     -> qb::Result<(Vec<qb::Tensor>, Vec<qb::Tensor>)> {
        Python::attach(|py| {
            let head = vec![
                carry.to_py(py, c).map_err(to_qb)?,
                index_object(py, &i).map_err(to_qb)?,
            ];
            let args = tensors_tuple(py, head, o).map_err(to_qb)?;
            let out = f.bind(py).call1(args).map_err(to_qb)?;
            let (c, ys, def) = step_result(&carry, &out)?;
            same_structure(&y_def, def)?;
            Ok((c, ys))
        })
    };
    let (out, ys) = run_holding_gil(py, || {
        qb::scan(step, &leaves, length)
            .operands(&ops)
            .unroll(unroll)
            .eval::<Vec<qb::Tensor>>()
    })?;
    let ys = ys
        .into_iter()
        .map(|t| wrap(py, t))
        .collect::<PyResult<Vec<_>>>()?;
    let y_def = y_def.into_inner().expect("length >= 1");
    let ys = crate::tree::unflatten(py, &y_def, PyList::new(py, ys)?.as_any())?;
    Ok(PyTuple::new(py, [carry.to_py(py, out)?, ys])?.into_any())
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
/// the trees of `xs` and `y`; the carry's pytree is rebuilt here).
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
    let (carry, leaves) = LoopCarry::of(init, "the scan carry")?;
    let xs = operand_tensors(xs)?;
    let ops = operands
        .map(operand_tensors)
        .transpose()?
        .unwrap_or_default();
    let body = |c: Vec<qb::Tensor>,
                x: Vec<qb::Tensor>,
                o: &[qb::Tensor]|
     -> qb::Result<(Vec<qb::Tensor>, Vec<qb::Tensor>)> {
        Python::attach(|py| {
            let x_leaves = x
                .into_iter()
                .map(|t| wrap(py, t))
                .collect::<PyResult<Vec<_>>>()
                .map_err(to_qb)?;
            let head = vec![
                carry.to_py(py, c).map_err(to_qb)?,
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
            Ok((carry.leaves_of(&pair.0)?, ys))
        })
    };
    let (out, ys) = run_holding_gil(py, || {
        qb::scan_over(body, &leaves, &xs)
            .operands(&ops)
            .reverse(reverse)
            .unroll(unroll)
            .eval::<Vec<qb::Tensor>>()
    })?;
    let ys = ys
        .into_iter()
        .map(|t| wrap(py, t))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyTuple::new(py, [carry.to_py(py, out)?, PyList::new(py, ys)?.into_any()])?.into_any())
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
    let (carry, leaves) = LoopCarry::of(init, "the while_loop carry")?;
    let ops = operands
        .map(operand_tensors)
        .transpose()?
        .unwrap_or_default();
    let test = |c: &Vec<qb::Tensor>, o: &[qb::Tensor]| -> qb::Result<qb::Tensor> {
        Python::attach(|py| {
            let args = tensors_tuple(py, vec![carry.to_py(py, c.clone()).map_err(to_qb)?], o)
                .map_err(to_qb)?;
            let out = cf.bind(py).call1(args).map_err(to_qb)?;
            tensor_result(&out, "cond_fun")
        })
    };
    let body = |c: Vec<qb::Tensor>, o: &[qb::Tensor]| -> qb::Result<Vec<qb::Tensor>> {
        Python::attach(|py| {
            let args =
                tensors_tuple(py, vec![carry.to_py(py, c).map_err(to_qb)?], o).map_err(to_qb)?;
            let out = bf.bind(py).call1(args).map_err(to_qb)?;
            carry.leaves_of(&out)
        })
    };
    let mut looped = qb::while_loop(test, body, &leaves).operands(&ops);
    if let Some(n) = max_trips {
        looped = looped.max_trips(n);
    }
    let out = run_holding_gil(py, || looped.eval())?;
    carry.to_py(py, out)
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
