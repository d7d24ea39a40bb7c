//! `Program` and `Executable` (api.md §19): a lowered plan with named inputs, compiled for a
//! target and run with a dict of inputs.

use crate::convert::to_tensor;

use crate::tensor::wrap;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use quabla as qb;

/// `lowered.program`.
#[pyclass(name = "Program", module = "quabla", frozen)]
pub struct PyProgram {
    p: qb::Program,
}

impl PyProgram {
    pub fn new(p: qb::Program) -> PyProgram {
        PyProgram { p }
    }
}

#[pymethods]
impl PyProgram {
    #[getter]
    fn input_names(&self) -> Vec<String> {
        self.p.input_names()
    }

    #[getter]
    fn output_shapes(&self) -> Vec<Vec<usize>> {
        self.p.output_shapes()
    }

    fn as_text(&self) -> String {
        self.p.as_text()
    }

    #[pyo3(signature = (target, device_ordinal=0))]
    fn compile(
        &self,
        py: Python<'_>,
        target: &str,
        #[pyo3(from_py_with = crate::ints::param::device_ordinal)] device_ordinal: usize,
    ) -> PyResult<PyExecutable> {
        let e = crate::transforms::run(py, || {
            self.p.compile(target).device_ordinal(device_ordinal).eval()
        })?;
        Ok(PyExecutable { e })
    }
}

/// `program.compile(target)`: call it with a dict from input name to array.
#[pyclass(name = "Executable", module = "quabla", frozen)]
pub struct PyExecutable {
    e: qb::Executable,
}

#[pymethods]
impl PyExecutable {
    #[getter]
    fn input_names(&self) -> Vec<String> {
        self.e.input_names()
    }

    fn __call__<'py>(
        &self,
        py: Python<'py>,
        inputs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut bound: Vec<(String, qb::Tensor)> = Vec::with_capacity(inputs.len());
        for (k, v) in inputs.iter() {
            bound.push((k.extract()?, to_tensor(&v)?));
        }
        let outs = crate::transforms::run(py, || {
            self.e.call(bound.iter().map(|(k, t)| (k.as_str(), t)))
        })?;
        let items = outs
            .into_iter()
            .map(|t| wrap(py, t))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }
}

/// Registers the program classes on `m`.
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyProgram>()?;
    m.add_class::<PyExecutable>()?;
    Ok(())
}
