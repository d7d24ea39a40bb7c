//! Errors across the boundary: a [`qb::Error`] becomes the Python class of errors.md §1.2 with
//! the same message, and a Python exception raised inside a traced function travels through
//! the Rust transforms as [`qb::Error::User`] and comes out as the original exception object
//! (type, message and traceback unchanged).
//!
//! The Quabla classes are defined in Python (`quabla/_errors.py`, two of them have two builtin
//! bases) and looked up here when raised.

use pyo3::exceptions::{
    PyIndexError, PyKeyboardInterrupt, PyMemoryError, PyOSError, PyRuntimeError, PyTypeError,
    PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use quabla as qb;
use std::fmt;
use std::sync::Arc;

/// A Python exception carried inside a [`qb::Error::User`] while it crosses Rust code.
#[derive(Debug)]
pub struct Raised(pub PyErr);

impl fmt::Display for Raised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Raised {}

/// A Python exception as the error of a Rust callback.
///
/// Its message is read with `str()`, which runs pending signal handlers first: when one
/// raises (Ctrl-C during a callback), that exception replaces `err`, as it would in Python,
/// instead of being lost while the message is formatted.
pub fn to_qb(err: PyErr) -> qb::Error {
    let (err, message) = Python::attach(|py| {
        let mut err = err;
        // Each failed `str()` consumed the signal it ran the handler of; a few tries bound
        // even a storm of signals.
        for _ in 0..8 {
            match err.value(py).str() {
                Ok(text) => {
                    let kind = err
                        .get_type(py)
                        .qualname()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_else(|_| "exception".into());
                    let text = text.to_string_lossy();
                    let message = if text.is_empty() {
                        kind
                    } else {
                        format!("{kind}: {text}")
                    };
                    return (err, message);
                }
                Err(raised) => err = raised,
            }
        }
        (err, "exception".to_string())
    });
    qb::Error::User {
        message,
        source: Some(Arc::new(Raised(err))),
    }
}

/// One of the classes of `quabla._errors`, by name.
pub fn quabla_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || py.import("quabla._errors").map(|m| m.unbind()))?;
    Ok(module.bind(py).getattr(name)?.cast_into::<PyType>()?)
}

fn raise_quabla(py: Python<'_>, class: &str, args: impl IntoPyObjectArgs) -> PyErr {
    match quabla_class(py, class).and_then(|c| c.call1(args.into_args(py)?)) {
        Ok(instance) => PyErr::from_value(instance),
        Err(e) => e,
    }
}

/// Arguments of an exception constructor.
pub trait IntoPyObjectArgs {
    fn into_args(self, py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyTuple>>;
}

impl IntoPyObjectArgs for (String,) {
    fn into_args(self, py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyTuple>> {
        pyo3::types::PyTuple::new(py, [self.0])
    }
}

impl IntoPyObjectArgs for (String, String, Option<String>) {
    fn into_args(self, py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyTuple>> {
        (self.0, self.1, self.2).into_pyobject(py)
    }
}

/// The Python exception for a facade error (errors.md §1.2).
pub fn to_py(err: qb::Error) -> PyErr {
    Python::attach(|py| to_py_in(py, err))
}

/// A facade message in Python spelling: the few advice phrases the facade writes in Rust
/// (`qb::where_`, builder calls like `while_loop(..).max_trips(n)`) become the Python calls
/// that do the same.
pub fn python_spelling(message: &str) -> String {
    const SAME: [(&str, &str); 4] = [
        ("use qb::where_ or qb::cond", "use qb.where or qb.cond"),
        (
            "bound it with while_loop(..).max_trips(n)",
            "bound it with while_loop(..., max_trips=n)",
        ),
        ("set it with max_trips(n)", "set it with max_trips=n"),
        ("jit(f).lower(..)", "jit(f).lower(...)"),
    ];
    let mut out = message.to_string();
    for (rust, python) in SAME {
        out = out.replace(rust, python);
    }
    // Solver closures: "pass it through args (cg(..).args(&[..])) and read it from matvec's
    // second argument", and odeint's form of the same.
    if let Some(start) = out.find("pass it through args") {
        if let Some(len) = out[start..].find(" argument") {
            let end = start + len + " argument".len();
            out.replace_range(
                start..end,
                "pass it with args=(value, ...) and read it from the callback's extra arguments \
                 (after its own: matvec(v, *args), f(x, *args), f(y, t, *args))",
            );
        }
    }
    out
}

fn to_py_in(py: Python<'_>, err: qb::Error) -> PyErr {
    let message = python_spelling(&err.to_string());
    match err {
        qb::Error::User {
            source: Some(source),
            ..
        } => match source.downcast_ref::<Raised>() {
            Some(raised) => raised.0.clone_ref(py),
            None => PyValueError::new_err(message),
        },
        qb::Error::Tracer { .. } => raise_quabla(py, "TracerError", (message,)),
        qb::Error::Unsupported { op, device, .. } => {
            raise_quabla(py, "UnsupportedOperationError", (message, op, device))
        }
        qb::Error::Type { .. } => PyTypeError::new_err(message),
        qb::Error::Index { .. } => PyIndexError::new_err(message),
        qb::Error::NotConverged { .. }
        | qb::Error::OdeMaxSteps { .. }
        | qb::Error::LoopMaxTrips { .. }
        | qb::Error::Deleted { .. }
        | qb::Error::Device { .. }
        | qb::Error::Distributed { .. } => PyRuntimeError::new_err(message),
        qb::Error::Io { .. } => PyOSError::new_err(message),
        qb::Error::NonFinite { .. } => pyo3::exceptions::PyFloatingPointError::new_err(message),
        qb::Error::OutOfMemory { .. } => PyMemoryError::new_err(message),
        // Cancelled by Ctrl-C (crate::interrupt): the SIGINT handler's own exception when it
        // has not run yet.
        qb::Error::Cancelled => match py.check_signals() {
            Err(raised) => raised,
            Ok(()) => PyKeyboardInterrupt::new_err(message),
        },
        qb::Error::Warning(w) => match w.kind() {
            qb::warnings::WarningKind::Retrace => raise_quabla(py, "RetraceWarning", (message,)),
            qb::warnings::WarningKind::Float64AsFloat32 => {
                pyo3::exceptions::PyUserWarning::new_err(message)
            }
        },
        qb::Error::Internal { .. } => PyRuntimeError::new_err(message),
        _ => PyValueError::new_err(message),
    }
}

/// `?` on a facade result inside a binding function.
pub trait OrRaise<T> {
    fn or_raise(self) -> PyResult<T>;
}

impl<T> OrRaise<T> for qb::Result<T> {
    fn or_raise(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// A `TypeError` with `message`.
pub fn type_error(message: impl Into<String>) -> PyErr {
    PyTypeError::new_err(message.into())
}

/// A `TypeError` raised by a callback's result (a user function returned the wrong kind of
/// object: `None` from a schedule, a `str` from a `matvec`), carried through the facade like
/// an exception the callback raised itself.
pub fn user_type_error(message: impl Into<String>) -> qb::Error {
    to_qb(type_error(message))
}

/// A conversion error of a callback's result: the `TypeError` of a wrong kind of object said
/// in the callback's terms (`message`), any other exception (one the object's own
/// `__array__` raised, a ragged list's `ValueError`) unchanged.
pub fn result_error(py: Python<'_>, e: PyErr, message: impl FnOnce() -> String) -> qb::Error {
    if e.get_type(py).is(py.get_type::<PyTypeError>()) {
        user_type_error(message())
    } else {
        to_qb(e)
    }
}

/// A `ValueError` with `message`.
pub fn value_error(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}
