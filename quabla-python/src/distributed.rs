//! `qb.distributed` (api.md §20): the process group of an `mpirun` launch, collectives on
//! tensors, data-parallel `value_and_grad` and checkpoints, all over `quabla::distributed`.
//! Every call that waits for other ranks releases the GIL.

use crate::convert::value_to_py;
use crate::errors::{type_error, value_error, OrRaise};
use crate::transforms::{args_value, callable, function_name, run, PyCallable};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use quabla::distributed::{self as dist, Options, ReduceOp, Reduction};
use quabla::tree::Value;
use std::time::Duration;

/// Seconds as a duration; `0` is `None` (no limit) where `zero_is_none`.
fn seconds(name: &str, value: f64, zero_is_none: bool) -> PyResult<Option<Duration>> {
    if value == 0.0 && zero_is_none {
        return Ok(None);
    }
    if !(value.is_finite() && value > 0.0) {
        return Err(value_error(format!(
            "{name} must be a positive number of seconds{}, got {value}",
            if zero_is_none {
                " (or 0 for no limit)"
            } else {
                ""
            }
        )));
    }
    Ok(Some(Duration::from_secs_f64(value)))
}

/// `init(*, timeout=None, heartbeat_timeout=None)`: joins the launcher's process group
/// (rank 0 of 1 without a launcher). `None` takes the environment's value or the default.
#[pyfunction]
#[pyo3(signature = (*, timeout=None, heartbeat_timeout=None))]
fn init(py: Python<'_>, timeout: Option<f64>, heartbeat_timeout: Option<f64>) -> PyResult<()> {
    let mut options = Options::from_env().or_raise()?;
    if let Some(t) = timeout {
        options = options.timeout(seconds("timeout", t, true)?);
    }
    if let Some(t) = heartbeat_timeout {
        if let Some(t) = seconds("heartbeat_timeout", t, false)? {
            options = options.heartbeat_timeout(t);
        }
    }
    run(py, || dist::init_with(options))
}

#[pyfunction]
fn rank() -> usize {
    dist::rank()
}

#[pyfunction]
fn size() -> usize {
    dist::size()
}

#[pyfunction]
fn barrier(py: Python<'_>) -> PyResult<()> {
    run(py, dist::barrier)
}

/// `finalize()`: leaves the group (also done at exit).
#[pyfunction]
fn finalize(py: Python<'_>) {
    py.detach(dist::finalize)
}

fn reduce_op(op: &str) -> PyResult<ReduceOp> {
    ReduceOp::parse(op).ok_or_else(|| {
        value_error(format!(
            "op must be \"sum\", \"mean\", \"max\" or \"min\", got {op:?}"
        ))
    })
}

/// `all_reduce(x, op="sum")`.
#[pyfunction]
#[pyo3(signature = (x, op="sum"))]
fn all_reduce<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    op: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let op = reduce_op(op)?;
    let t = crate::convert::to_tensor(x)?;
    let out = run(py, || dist::all_reduce(&t, op))?;
    crate::tensor::wrap(py, out)
}

/// `broadcast(x, root=0)`.
#[pyfunction]
#[pyo3(signature = (x, root=0))]
fn broadcast<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    root: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let t = crate::convert::to_tensor(x)?;
    let out = run(py, || dist::broadcast(&t, root))?;
    crate::tensor::wrap(py, out)
}

/// `all_gather(x)`: the ranks' `x` stacked along a new leading axis.
#[pyfunction]
fn all_gather<'py>(py: Python<'py>, x: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let t = crate::convert::to_tensor(x)?;
    let out = run(py, || dist::all_gather(&t))?;
    crate::tensor::wrap(py, out)
}

/// `save(file, tree)`: rank 0 writes `tree` to the path once every rank holds the same.
#[pyfunction]
fn save(py: Python<'_>, file: &Bound<'_, PyAny>, tree: &Bound<'_, PyAny>) -> PyResult<()> {
    let value = crate::io::saveable(tree, 0)?;
    let path = crate::io::as_path(file)
        .ok_or_else(|| type_error("distributed.save takes a path (str or os.PathLike)"))?;
    run(py, || dist::save(&path, &value))
}

/// `load(file)`: the checkpoint at the path, checked to be the same on every rank.
#[pyfunction]
fn load<'py>(py: Python<'py>, file: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let path = crate::io::as_path(file)
        .ok_or_else(|| type_error("distributed.load takes a path (str or os.PathLike)"))?;
    let value = run(py, || dist::load(&path))?;
    value_to_py(py, value)
}

/// The callable `value_and_grad(fun, ...)` returns.
#[pyclass(
    name = "DistributedGradFunction",
    module = "quabla.distributed",
    frozen
)]
pub struct PyDistributedGrad {
    g: dist::ValueAndGrad<PyCallable, Value>,
}

#[pymethods]
impl PyDistributedGrad {
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if kwargs.is_some_and(|k| !k.is_empty()) {
            return Err(type_error(
                "distributed.value_and_grad() takes positional arguments only",
            ));
        }
        let args = args_value(args, &[])?;
        let out = run(py, || self.g.call::<Value, Value>(&args))?;
        value_to_py(py, out)
    }
}

/// `value_and_grad(fun, devices=None, shard_argnums=(), argnums=0, reduction="mean",
/// has_aux=False)`.
#[pyfunction]
#[pyo3(signature = (fun, devices=None, shard_argnums=None, argnums=None, reduction="mean", has_aux=false))]
fn value_and_grad(
    fun: &Bound<'_, PyAny>,
    devices: Option<Vec<String>>,
    shard_argnums: Option<Vec<usize>>,
    argnums: Option<&Bound<'_, PyAny>>,
    reduction: &str,
    has_aux: bool,
) -> PyResult<PyDistributedGrad> {
    let reduction = Reduction::parse(reduction).ok_or_else(|| {
        value_error(format!(
            "reduction must be \"mean\" or \"sum\", got {reduction:?}"
        ))
    })?;
    let mut g = dist::value_and_grad(callable(fun)?)
        .name(function_name(fun))
        .shard_argnums(&shard_argnums.unwrap_or_default())
        .reduction(reduction)
        .has_aux(has_aux);
    if let Some(a) = argnums {
        g = match a.extract::<usize>() {
            Ok(i) => g.argnum(i),
            Err(_) => g.argnums(&a.extract::<Vec<usize>>().map_err(|_| {
                type_error("argnums must be a non-negative int or a tuple of non-negative ints")
            })?),
        };
    }
    if let Some(d) = devices {
        let names: Vec<&str> = d.iter().map(String::as_str).collect();
        g = g.devices(&names);
    }
    Ok(PyDistributedGrad { g })
}

/// Registers the module's functions on `m` (`quabla._quabla._distributed`).
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(rank, m)?)?;
    m.add_function(wrap_pyfunction!(size, m)?)?;
    m.add_function(wrap_pyfunction!(barrier, m)?)?;
    m.add_function(wrap_pyfunction!(finalize, m)?)?;
    m.add_function(wrap_pyfunction!(all_reduce, m)?)?;
    m.add_function(wrap_pyfunction!(broadcast, m)?)?;
    m.add_function(wrap_pyfunction!(all_gather, m)?)?;
    m.add_function(wrap_pyfunction!(save, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(value_and_grad, m)?)?;
    m.add_class::<PyDistributedGrad>()?;
    // Whether this build can join an MPI launch (the `mpi` feature).
    m.add("mpi_available", cfg!(feature = "mpi"))?;
    Ok(())
}
