//! The native module of the Python package (`quabla._quabla`, imported by `quabla`).
//!
//! This crate owns the adaptation between Python and the Rust facade: converting Python
//! objects (numbers, nested lists, NumPy arrays, pytrees of Python containers) to facade
//! values and back, keyword arguments, operators, printing, and the mapping of errors and
//! warnings to Python's classes. It must not compute, trace or transform anything itself:
//! every call ends in the `quabla` crate. The Python side of the package
//! (`python/quabla`) adds what is most naturally Python: the exception classes, decorator
//! forms, dataclass registration and `__all__`.

mod control_flow;
mod convert;
mod custom;
mod distributed;
mod errors;
mod functions;
mod indexing;
mod interrupt;
mod ints;
mod io;
mod optim;
mod program;
mod random;
mod solvers;
mod sorting;
mod tensor;
mod transforms;
mod tree;

use pyo3::prelude::*;

#[pymodule]
fn _quabla(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", quabla::VERSION)?;
    // Call sites in this binding are not the user's lines.
    quabla::hide_source_dir(file!().strip_suffix("lib.rs").unwrap_or(file!()));
    tensor::add_to(m)?;
    functions::add_to(m)?;
    indexing::add_to(m)?;
    sorting::add_to(m)?;
    transforms::add_to(m)?;
    control_flow::add_to(m)?;
    custom::add_to(m)?;

    io::add_to(m)?;
    program::add_to(m)?;
    let py = m.py();
    let tree_mod = PyModule::new(py, "_tree")?;
    tree::add_to(&tree_mod)?;
    m.add_submodule(&tree_mod)?;
    let random_mod = PyModule::new(py, "_random")?;
    random::add_to(&random_mod)?;
    m.add_submodule(&random_mod)?;
    let optim_mod = PyModule::new(py, "_optim")?;
    optim::add_to(&optim_mod)?;
    m.add_submodule(&optim_mod)?;
    let distributed_mod = PyModule::new(py, "_distributed")?;
    distributed::add_to(&distributed_mod)?;
    m.add_submodule(&distributed_mod)?;
    let linalg_mod = PyModule::new(py, "_linalg")?;
    let ode_mod = PyModule::new(py, "_ode")?;
    solvers::add_to(m, &linalg_mod, &ode_mod)?;
    m.add_submodule(&linalg_mod)?;
    m.add_submodule(&ode_mod)?;
    m.add_function(wrap_pyfunction!(devices, m)?)?;
    m.add_function(wrap_pyfunction!(transfers, m)?)?;
    m.add_function(wrap_pyfunction!(debug_nans, m)?)?;
    m.add_function(wrap_pyfunction!(debug_print, m)?)?;
    Ok(())
}

/// `devices()`: names of the available backends, `cpu` first.
#[pyfunction]
fn devices() -> Vec<String> {
    let mut names: Vec<String> = quabla::devices()
        .into_iter()
        .filter(|d| d.available)
        .map(|d| d.name.to_string())
        .collect();
    names.dedup();
    names
}

/// `transfers(device)`: the copies between the host and the device's memory so far, as a dict
/// `{"uploads", "downloads", "bytes_uploaded", "bytes_downloaded"}` (all zero for the CPU,
/// whose memory is the host's; docs/devices.md).
#[pyfunction]
fn transfers<'py>(py: Python<'py>, device: &str) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    use crate::errors::OrRaise;
    let t = quabla::transfers(device).or_raise()?;
    let d = pyo3::types::PyDict::new(py);
    d.set_item("uploads", t.uploads)?;
    d.set_item("downloads", t.downloads)?;
    d.set_item("bytes_uploaded", t.bytes_uploaded)?;
    d.set_item("bytes_downloaded", t.bytes_downloaded)?;
    Ok(d)
}

/// `debug_nans(enable)`: the process-wide non-finite check (docs/debugging.md).
#[pyfunction]
fn debug_nans(enable: bool) {
    quabla::debug_nans(enable);
}

/// `debug_print(fmt, x)`: prints `fmt` with `{}` replaced by `x`'s value, at run time when
/// traced.
#[pyfunction]
fn debug_print(fmt: &str, x: &Bound<'_, PyAny>) -> PyResult<()> {
    let x = crate::convert::to_tensor(x)?;
    quabla::debug_print(fmt, &x).map_err(crate::errors::to_py)
}
