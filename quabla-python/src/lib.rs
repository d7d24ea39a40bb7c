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

mod errors;
mod functions;
mod io;
mod program;
mod random;
mod tensor;
mod transforms;
mod tree;

use pyo3::prelude::*;

#[pymodule]
fn _quabla(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", quabla::VERSION)?;
    tensor::add_to(m)?;
    functions::add_to(m)?;
    transforms::add_to(m)?;
    control_flow::add_to(m)?;

    io::add_to(m)?;
    program::add_to(m)?;
    let py = m.py();
    let tree_mod = PyModule::new(py, "tree")?;
    tree::add_to(&tree_mod)?;
    m.add_submodule(&tree_mod)?;
    let random_mod = PyModule::new(py, "random")?;
    random::add_to(&random_mod)?;
    m.add_submodule(&random_mod)?;
    m.add_function(wrap_pyfunction!(devices, m)?)?;
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
