//! The transforms of api.md §10 over Python callables: `grad`, `value_and_grad`, `jvp`,
//! `vjp`, `jacobian`, `hessian`, `vmap`, `jit` (with `lower`, `compile` and programs), and
//! `ShapeDtype`.
//!
//! A Python function becomes a facade closure over [`Value`] trees that calls back into
//! Python with tracer `Tensor`s; the facade traces, transforms, caches and runs it. Arguments
//! are read as pytrees ([`value_from_py`]); the GIL is released while the facade works and
//! taken again only to trace. A Python exception raised while tracing comes back unchanged
//! (see `errors.rs`), and a warning the facade emits goes through Python's `warnings`.

use crate::convert::{type_name, value_from_py, value_to_py, Leaves};
use crate::errors::{to_qb, type_error, value_error};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use quabla as qb;
use quabla::tree::{DictKey, Value};
use std::cell::RefCell;
use std::sync::Arc;

/// A Python function as a facade closure over its positional-argument tuple.
pub type PyCallable = Box<dyn Fn(Value) -> qb::Result<Value> + Send + Sync>;

/// Calls `f(*args)` with the tree `args` (a tuple of positional arguments).
pub fn call_python(f: &Py<PyAny>, args: Value) -> qb::Result<Value> {
    Python::attach(|py| {
        let args = positional(py, args).map_err(to_qb)?;
        let out = f.bind(py).call1(args).map_err(to_qb)?;
        value_from_py(&out, Leaves::Transform).map_err(to_qb)
    })
}

/// The positional arguments of a call as a Python tuple.
pub fn positional(py: Python<'_>, args: Value) -> PyResult<Bound<'_, PyTuple>> {
    match args {
        Value::Tuple(items) => {
            let items = items
                .into_iter()
                .map(|v| value_to_py(py, v))
                .collect::<PyResult<Vec<_>>>()?;
            PyTuple::new(py, items)
        }
        other => PyTuple::new(py, [value_to_py(py, other)?]),
    }
}

/// A Python callable as a [`PyCallable`].
pub fn callable(f: &Bound<'_, PyAny>) -> PyResult<PyCallable> {
    if !f.is_callable() {
        return Err(type_error(format!(
            "expected a callable, got {}",
            type_name(f)
        )));
    }
    let f = f.clone().unbind();
    Ok(Box::new(move |args| call_python(&f, args)))
}

/// The name a transform reports for `f` (in signatures and RetraceWarning).
pub fn function_name(f: &Bound<'_, PyAny>) -> String {
    f.getattr("__name__")
        .and_then(|n| n.extract::<String>())
        .unwrap_or_else(|_| type_name(f))
}

/// The argument tuple of a call.
pub fn args_value(args: &Bound<'_, PyTuple>, statics: &[usize]) -> PyResult<Value> {
    let items = args
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let mode = if statics.contains(&i) {
                Leaves::Static
            } else {
                Leaves::Transform
            };
            value_from_py(&a, mode)
                .map(keys_as_tensors)
                .map_err(|e| match mode {
                    Leaves::Static => type_error(format!(
                        "static argument {i} is not hashable ({}); static values must support hash()",
                        type_name(&a)
                    )),
                    Leaves::Transform => e,
                })
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(Value::Tuple(items))
}

/// A traced argument's `Key`s as their int64 key tensors (`quabla.random.key_data`), which
/// every `quabla.random` function accepts: a key passed to a transform is traced like any
/// array (a static argument keeps its `Key`). The walk follows the value's containers, whose
/// depth the conversion has already bounded.
fn keys_as_tensors(v: Value) -> Value {
    match v {
        Value::Key(k) => Value::Array(qb::random::key_data(&k)),
        Value::List(items) => Value::List(items.into_iter().map(keys_as_tensors).collect()),
        Value::Tuple(items) => Value::Tuple(items.into_iter().map(keys_as_tensors).collect()),
        Value::Dict(entries) => Value::Dict(
            entries
                .into_iter()
                .map(|(k, v)| (k, keys_as_tensors(v)))
                .collect(),
        ),
        Value::Node { name, fields, meta } => Value::Node {
            name,
            fields: fields
                .into_iter()
                .map(|(k, v)| (k, keys_as_tensors(v)))
                .collect(),
            meta,
        },
        other => other,
    }
}

thread_local! {
    /// An exception a warning became (`warnings.simplefilter("error", ...)`), raised once the
    /// facade call that emitted the warning returns.
    static PENDING_WARNING: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// Sends the facade's warnings through Python's `warnings` module.
pub fn install_warning_handler() {
    qb::warnings::set_handler(|w| {
        Python::attach(|py| {
            let category = match w.kind() {
                qb::warnings::WarningKind::Retrace => {
                    crate::errors::quabla_class(py, "RetraceWarning").map(|c| c.into_any())
                }
                qb::warnings::WarningKind::Float64AsFloat32 => {
                    Ok(py.get_type::<pyo3::exceptions::PyUserWarning>().into_any())
                }
            };
            // Stack level 1: the innermost Python frame is the user's line that called the
            // transformed function (the binding adds no Python frame of its own).
            let result = category.and_then(|c| {
                py.import("warnings")?
                    .call_method1("warn", (w.to_string(), c, 1))
                    .map(|_| ())
            });
            if let Err(e) = result {
                PENDING_WARNING.with(|p| *p.borrow_mut() = Some(e));
            }
        })
    });
}

/// Runs a facade call with the GIL released and interruptible by Ctrl-C
/// ([`crate::interrupt`]), then raises a warning that became an error.
pub fn run<T: Send>(py: Python<'_>, f: impl FnOnce() -> qb::Result<T> + Send) -> PyResult<T> {
    let out = crate::interrupt::run(py, f);
    if let Some(e) = PENDING_WARNING.with(|p| p.borrow_mut().take()) {
        return Err(e);
    }
    out
}

fn positional_only(transform: &str, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
    if kwargs.is_some_and(|k| !k.is_empty()) {
        return Err(type_error(format!(
            "{transform}() takes positional arguments only"
        )));
    }
    Ok(())
}

/// `argnums`: an int (one gradient) or a tuple of ints (a tuple of gradients).
#[derive(Clone, Debug)]
enum Argnums {
    One(usize),
    Many(Vec<usize>),
}

impl Argnums {
    fn read(obj: &Bound<'_, PyAny>) -> PyResult<Argnums> {
        if crate::ints::is_int(obj)? {
            return Ok(Argnums::One(crate::ints::int_arg(obj, "argnums")?));
        }
        crate::ints::int_list(obj, "argnums").map(Argnums::Many)
    }
}

macro_rules! select {
    ($t:expr, $argnums:expr) => {
        match $argnums {
            Argnums::One(i) => $t.argnum(*i),
            Argnums::Many(v) => $t.argnums(v),
        }
    };
}

/// `grad(fun)` and `value_and_grad(fun)`.
#[pyclass(name = "GradFunction", module = "quabla", frozen)]
pub struct PyGrad {
    g: qb::Grad<PyCallable, Value>,
    name: &'static str,
}

#[pymethods]
impl PyGrad {
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        positional_only(self.name, kwargs)?;
        let args = args_value(args, &[])?;
        let out = run(py, || self.g.call::<Value, Value>(&args))?;
        value_to_py(py, out)
    }
}

fn make_grad(
    fun: &Bound<'_, PyAny>,
    argnums: Option<&Bound<'_, PyAny>>,
    has_aux: bool,
    with_value: bool,
) -> PyResult<PyGrad> {
    let f = callable(fun)?;
    let g = if with_value {
        qb::value_and_grad(f)
    } else {
        qb::grad(f)
    };
    // Without `argnums` the facade differentiates the first argument, as `argnums=0` does.
    let g = match argnums {
        Some(a) => select!(g, &Argnums::read(a)?),
        None => g,
    };
    let g = g.name(function_name(fun));
    let g = if has_aux { g.has_aux() } else { g };
    Ok(PyGrad {
        g,
        name: if with_value { "value_and_grad" } else { "grad" },
    })
}

#[pyfunction]
#[pyo3(signature = (fun, argnums=None, has_aux=false))]
pub fn _grad(
    fun: &Bound<'_, PyAny>,
    argnums: Option<&Bound<'_, PyAny>>,
    has_aux: bool,
) -> PyResult<PyGrad> {
    make_grad(fun, argnums, has_aux, false)
}

#[pyfunction]
#[pyo3(signature = (fun, argnums=None, has_aux=false))]
pub fn _value_and_grad(
    fun: &Bound<'_, PyAny>,
    argnums: Option<&Bound<'_, PyAny>>,
    has_aux: bool,
) -> PyResult<PyGrad> {
    make_grad(fun, argnums, has_aux, true)
}

/// `jacobian(fun)` and `hessian(fun)`.
#[pyclass(name = "JacobianFunction", module = "quabla", frozen)]
pub struct PyJacobian {
    j: Option<qb::Jacobian<PyCallable, Value>>,
    h: Option<qb::Hessian<PyCallable, Value>>,
    /// `jacobian`, `jacfwd` or `jacrev` (for `j`).
    name: &'static str,
}

#[pymethods]
impl PyJacobian {
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = args_value(args, &[])?;
        let out = match (&self.j, &self.h) {
            (Some(j), _) => {
                positional_only(self.name, kwargs)?;
                run(py, || j.call::<Value, Value>(&args))?
            }
            (_, Some(h)) => {
                positional_only("hessian", kwargs)?;
                run(py, || h.call::<Value, Value>(&args))?
            }
            _ => return Err(value_error("empty jacobian")),
        };
        value_to_py(py, out)
    }
}

fn make_jacobian(
    fun: &Bound<'_, PyAny>,
    argnums: Option<&Bound<'_, PyAny>>,
    name: &'static str,
) -> PyResult<PyJacobian> {
    let f = callable(fun)?;
    let j = match name {
        "jacfwd" => qb::jacfwd(f),
        "jacrev" => qb::jacrev(f),
        _ => qb::jacobian(f),
    };
    let mut j = j.name(function_name(fun));
    if let Some(a) = argnums {
        j = select!(j, &Argnums::read(a)?);
    }
    Ok(PyJacobian {
        j: Some(j),
        h: None,
        name,
    })
}

/// `jacobian(fun, argnums=0)`: forward or reverse mode by size (transforms.md §8).
#[pyfunction]
#[pyo3(signature = (fun, argnums=None))]
pub fn jacobian(
    fun: &Bound<'_, PyAny>,
    argnums: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyJacobian> {
    make_jacobian(fun, argnums, "jacobian")
}

/// `jacfwd(fun, argnums=0)`: the Jacobian in forward mode.
#[pyfunction]
#[pyo3(signature = (fun, argnums=None))]
pub fn jacfwd(fun: &Bound<'_, PyAny>, argnums: Option<&Bound<'_, PyAny>>) -> PyResult<PyJacobian> {
    make_jacobian(fun, argnums, "jacfwd")
}

/// `jacrev(fun, argnums=0)`: the Jacobian in reverse mode.
#[pyfunction]
#[pyo3(signature = (fun, argnums=None))]
pub fn jacrev(fun: &Bound<'_, PyAny>, argnums: Option<&Bound<'_, PyAny>>) -> PyResult<PyJacobian> {
    make_jacobian(fun, argnums, "jacrev")
}

#[pyfunction]
#[pyo3(signature = (fun, argnums=None))]
pub fn hessian(fun: &Bound<'_, PyAny>, argnums: Option<&Bound<'_, PyAny>>) -> PyResult<PyJacobian> {
    let mut h = qb::hessian(callable(fun)?).name(function_name(fun));
    if let Some(a) = argnums {
        h = select!(h, &Argnums::read(a)?);
    }
    Ok(PyJacobian {
        j: None,
        h: Some(h),
        name: "hessian",
    })
}

/// `jvp(fun, primals, tangents) -> (out, tangent_out)`.
#[pyfunction]
pub fn jvp<'py>(
    py: Python<'py>,
    fun: &Bound<'py, PyAny>,
    primals: &Bound<'py, PyAny>,
    tangents: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let as_tuple = |o: &Bound<'py, PyAny>, what: &str| -> PyResult<Value> {
        let t = o.cast::<PyTuple>().map_err(|_| {
            type_error(format!(
                "jvp: {what} must be a tuple with one entry per positional argument, got {}",
                type_name(o)
            ))
        })?;
        args_value(t, &[])
    };
    let primals = as_tuple(primals, "primals")?;
    let tangents = as_tuple(tangents, "tangents")?;
    let f = qb::jvp_fn(callable(fun)?).name(function_name(fun));
    let (out, tangent) = run(py, || f.call::<Value>(&primals, &tangents))?;
    Ok(PyTuple::new(py, [value_to_py(py, out)?, value_to_py(py, tangent)?])?.into_any())
}

/// The `vjp_fun` of `vjp`: maps a cotangent of the output to a tuple of cotangents.
#[pyclass(name = "VjpFunction", module = "quabla", frozen)]
pub struct PyVjpFn {
    f: qb::VjpFn<Value, Value>,
}

#[pymethods]
impl PyVjpFn {
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        cotangent: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ct = value_from_py(cotangent, Leaves::Transform)?;
        let out = run(py, || self.f.call::<Value>(&ct))?;
        let out = match out {
            t @ Value::Tuple(_) => t,
            other => Value::Tuple(vec![other]),
        };
        value_to_py(py, out)
    }
}

/// `vjp(fun, *primals, has_aux=False)`.
#[pyfunction]
#[pyo3(signature = (fun, *primals, has_aux=false))]
pub fn vjp<'py>(
    py: Python<'py>,
    fun: &Bound<'py, PyAny>,
    primals: &Bound<'py, PyTuple>,
    has_aux: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let primals = args_value(primals, &[])?;
    let name = function_name(fun);
    if has_aux {
        let f = fun.clone().unbind();
        let split = move |args: Value| -> qb::Result<(Value, Value)> {
            match call_python(&f, args)? {
                Value::Tuple(mut items) if items.len() == 2 => {
                    let aux = items.pop().unwrap_or(Value::None);
                    let out = items.pop().unwrap_or(Value::None);
                    Ok((out, aux))
                }
                _ => Err(crate::errors::user_type_error(
                    "vjp with has_aux=True needs fun to return a pair (out, aux)",
                )),
            }
        };
        let v = qb::vjp_fn(split).name(name).has_aux();
        let (out, f, aux) = run(py, || v.call::<Value, Value>(&primals))?;
        let vjp_fun = Bound::new(py, PyVjpFn { f })?.into_any();
        Ok(PyTuple::new(py, [value_to_py(py, out)?, vjp_fun, value_to_py(py, aux)?])?.into_any())
    } else {
        let v = qb::vjp_fn(callable(fun)?).name(name);
        let (out, f) = run(py, || v.call::<Value>(&primals))?;
        let vjp_fun = Bound::new(py, PyVjpFn { f })?.into_any();
        Ok(PyTuple::new(py, [value_to_py(py, out)?, vjp_fun])?.into_any())
    }
}

/// An `in_axes`/`out_axes` value: an int, `None`, or a pytree prefix of them.
fn axes_spec(obj: &Bound<'_, PyAny>, top: bool, name: &str) -> PyResult<qb::InAxes> {
    if obj.is_none() {
        return Ok(qb::InAxes::Axis(None));
    }
    if crate::ints::is_int(obj)? {
        return Ok(qb::InAxes::Axis(Some(crate::ints::int_arg(obj, name)?)));
    }
    if obj.is_exact_instance_of::<PyTuple>() || (top && obj.is_exact_instance_of::<PyList>()) {
        let items = obj
            .try_iter()?
            .map(|o| axes_spec(&o?, false, name))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(qb::InAxes::Tuple(items));
    }
    if obj.is_exact_instance_of::<PyList>() {
        let items = obj
            .try_iter()?
            .map(|o| axes_spec(&o?, false, name))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(qb::InAxes::List(items));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut entries = Vec::new();
        for (k, v) in d.iter() {
            let key = if let Ok(s) = k.extract::<String>() {
                DictKey::Str(s)
            } else {
                DictKey::Int(k.extract()?)
            };
            entries.push((key, axes_spec(&v, false, name)?));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        return Ok(qb::InAxes::Dict(entries));
    }
    if let Some((name, children)) = crate::tree::node_children(obj)? {
        let fields = children
            .iter()
            .map(|(f, c)| Ok((f.to_string(), axes_spec(c, false, name)?)))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(qb::InAxes::Node {
            name: name.to_string(),
            fields,
        });
    }
    Err(type_error(format!(
        "in_axes and out_axes take ints, None, or tuples, lists, dicts, NamedTuples and \
         registered dataclasses of them; got {}",
        type_name(obj)
    )))
}

/// `vmap(fun, in_axes=0, out_axes=0)`.
#[pyclass(name = "VmapFunction", module = "quabla", frozen)]
pub struct PyVmap {
    v: qb::Vmap<PyCallable, Value>,
}

#[pymethods]
impl PyVmap {
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        positional_only("vmap", kwargs)?;
        let args = args_value(args, &[])?;
        let out = run(py, || self.v.call::<Value>(&args))?;
        value_to_py(py, out)
    }
}

/// `vmap(fun, in_axes=0, out_axes=0)`: `None` is an axes value (unmapped), not "default".
#[pyfunction]
#[pyo3(signature = (fun, in_axes, out_axes))]
pub fn _vmap(
    fun: &Bound<'_, PyAny>,
    in_axes: &Bound<'_, PyAny>,
    out_axes: &Bound<'_, PyAny>,
) -> PyResult<PyVmap> {
    let v = qb::vmap(callable(fun)?)
        .name(function_name(fun))
        .in_axes_tree(axes_spec(in_axes, true, "in_axes")?)
        .out_axes_tree(axes_spec(out_axes, false, "out_axes")?);
    Ok(PyVmap { v })
}

/// `qb.ShapeDtype(shape, dtype=float64)`: an abstract argument of `jit(f).lower(...)`.
#[pyclass(name = "ShapeDtype", module = "quabla", frozen)]
pub struct PyShapeDtype {
    pub sd: qb::ShapeDtype,
}

#[pymethods]
impl PyShapeDtype {
    #[new]
    #[pyo3(signature = (shape, dtype=None))]
    fn new(shape: &Bound<'_, PyAny>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let shape = crate::convert::shape_arg(shape)?;
        let dtype = crate::convert::opt_dtype(dtype)?.unwrap_or(qb::F64);
        Ok(PyShapeDtype {
            sd: qb::ShapeDtype::new(shape, dtype),
        })
    }

    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.sd.shape.clone()
    }

    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, crate::tensor::PyDType>> {
        crate::tensor::dtype_object(py, self.sd.dtype)
    }

    fn __repr__(&self) -> String {
        format!(
            "ShapeDtype(shape={:?}, dtype={})",
            self.sd.shape,
            crate::tensor::py_name(self.sd.dtype)
        )
    }
}

/// How a call of a jitted function becomes the facade's positional argument tuple
/// (transforms.md §6): keyword arguments bound through the function's signature, static
/// positions marked. Shared by the function, its `Lowered` and its `Compiled`.
struct Binder {
    /// Static positions of the facade's tuple: `static_argnums` and the positions of
    /// `static_argnames`, shifted by one when `keywords` is set.
    statics: Vec<usize>,
    /// `inspect.Signature` of the function, to bind keyword arguments.
    signature: Option<Py<PyAny>>,
    /// The names of the function's parameters, in order.
    param_names: Vec<String>,
    static_argnames: Vec<String>,
    /// The function has keyword-only parameters (or `**kwargs`): the facade's tuple then
    /// starts with one static entry, the keyword arguments as a tuple of `(name, value)` pairs
    /// sorted by name, which [`jit_callable`] passes back as keywords.
    keywords: bool,
}

impl Binder {
    /// The facade's argument tuple of a call (TY5 for a keyword argument that is not static).
    fn bind(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Value> {
        let kwargs = kwargs.filter(|k| !k.is_empty());
        let (positional, keywords) = match (kwargs, &self.signature) {
            (None, _) if !self.keywords => (args.clone(), None),
            (_, None) => {
                return Err(type_error(
                    "jit: keyword arguments need a function with an inspectable signature",
                ))
            }
            (kwargs, Some(sig)) => {
                if let Some(kwargs) = kwargs {
                    for (k, _) in kwargs.iter() {
                        let k: String = k.extract()?;
                        if !self.is_static_name(&k) {
                            return Err(type_error(format!(
                                "keyword argument {k} must be static; declare it in \
                                 static_argnames or pass it positionally"
                            )));
                        }
                    }
                }
                let bound = sig.bind(py).call_method("bind", args.clone(), kwargs)?;
                bound.call_method0("apply_defaults")?;
                let positional: Bound<'_, PyTuple> = bound.getattr("args")?.cast_into()?;
                let keywords = bound.getattr("kwargs")?;
                (positional, self.keywords.then_some(keywords))
            }
        };
        let mut items = Vec::with_capacity(positional.len() + 1);
        if let Some(keywords) = keywords {
            let dict = keywords.cast::<PyDict>()?;
            let mut pairs: Vec<(String, Bound<'_, PyAny>)> = dict
                .iter()
                .map(|(k, v)| Ok((k.extract::<String>()?, v)))
                .collect::<PyResult<_>>()?;
            // Keyword-only arguments are static (a passed one was checked above; a default
            // is a constant of the function).
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            let pairs = PyTuple::new(
                py,
                pairs
                    .into_iter()
                    .map(|(k, v)| PyTuple::new(py, [k.into_pyobject(py)?.into_any(), v]))
                    .collect::<PyResult<Vec<_>>>()?,
            )?;
            let value = value_from_py(&pairs, Leaves::Static).map_err(|_| {
                type_error(
                    "static keyword arguments must be hashable; static values must support hash()",
                )
            })?;
            items.push(value);
        }
        let offset = usize::from(self.keywords);
        match args_value(&positional, &self.statics_of_positional(offset))? {
            Value::Tuple(rest) => items.extend(rest),
            other => items.push(other),
        }
        Ok(Value::Tuple(items))
    }

    fn is_static_name(&self, name: &str) -> bool {
        let offset = usize::from(self.keywords);
        self.static_argnames.iter().any(|n| n == name)
            || self
                .param_names
                .iter()
                .position(|n| n == name)
                .is_some_and(|p| self.statics.contains(&(p + offset)))
    }

    /// The static positions among the positional arguments alone.
    fn statics_of_positional(&self, offset: usize) -> Vec<usize> {
        self.statics
            .iter()
            .filter(|&&i| i >= offset)
            .map(|&i| i - offset)
            .collect()
    }
}

/// The facade closure of a jitted function: with [`Binder::keywords`], the first entry of the
/// tuple is the static keyword arguments, passed back as keywords.
fn jit_callable(f: &Bound<'_, PyAny>, keywords: bool) -> PyResult<PyCallable> {
    if !keywords {
        return callable(f);
    }
    if !f.is_callable() {
        return Err(type_error(format!(
            "expected a callable, got {}",
            type_name(f)
        )));
    }
    let f = f.clone().unbind();
    Ok(Box::new(move |args: Value| {
        Python::attach(|py| {
            let Value::Tuple(mut items) = args else {
                return Err(qb::Error::user("jit: expected an argument tuple"));
            };
            let kw = if items.is_empty() {
                Value::None
            } else {
                items.remove(0)
            };
            let kwargs = PyDict::new(py);
            if let Value::Static(b) = &kw {
                if let Some(s) = b.get::<crate::tree::PyStatic>() {
                    for pair in s.obj.bind(py).try_iter().map_err(to_qb)? {
                        let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
                            pair.map_err(to_qb)?.extract().map_err(to_qb)?;
                        kwargs.set_item(k, v).map_err(to_qb)?;
                    }
                }
            }
            let args = positional(py, Value::Tuple(items)).map_err(to_qb)?;
            let out = f.bind(py).call(args, Some(&kwargs)).map_err(to_qb)?;
            value_from_py(&out, Leaves::Transform).map_err(to_qb)
        })
    }))
}

/// `jit(fun, ...)`.
#[pyclass(name = "JitFunction", module = "quabla", frozen)]
pub struct PyJit {
    j: qb::Jit<PyCallable, Value, Value>,
    /// `donate_argnums`: checked against each call. A Python caller holds every argument while
    /// the call runs, so a donated argument is lent, never written (docs/python/optim.md,
    /// "Donation in jit").
    donate: Vec<usize>,
    binder: Arc<Binder>,
}

#[pymethods]
impl PyJit {
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Some(&i) = self.donate.iter().find(|&&i| i >= args.len()) {
            return Err(value_error(format!(
                "donate_argnums names argument {i}, but the function was called with {} \
                 positional argument{}",
                args.len(),
                if args.len() == 1 { "" } else { "s" }
            )));
        }
        let args = self.binder.bind(py, args, kwargs)?;
        let out = run(py, || self.j.call(&args))?;
        value_to_py(py, out)
    }

    /// Traces and transforms without executing (`ShapeDtype` placeholders allowed).
    #[pyo3(signature = (*args, **kwargs))]
    fn lower<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<PyLowered> {
        let args = self.binder.bind(py, args, kwargs)?;
        let l = run(py, || self.j.lower(&args))?;
        Ok(PyLowered {
            l,
            binder: self.binder.clone(),
        })
    }
}

/// `precision=`: `None` or a string the facade checks (AR2); anything else is the same
/// `ValueError`, not a conversion `TypeError`.
fn precision_arg(p: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    match p {
        None => Ok(None),
        Some(p) if p.is_none() => Ok(None),
        Some(p) => match p.extract::<String>() {
            Ok(s) if s == "float32" || s == "float64" => Ok(Some(s)),
            _ => Err(value_error(format!(
                "precision must be None, \"float32\" or \"float64\", got {}",
                p.repr().map(|r| r.to_string()).unwrap_or_default()
            ))),
        },
    }
}

#[pyfunction]
#[pyo3(signature = (fun, device=None, static_argnums=None, max_traces=8, static_argnames=None, precision=None, check_nans=false, donate_argnums=None))]
// One parameter per keyword of `qb.jit` (api.md §10).
#[allow(clippy::too_many_arguments)]
pub fn _jit(
    py: Python<'_>,
    fun: &Bound<'_, PyAny>,
    device: Option<String>,
    static_argnums: Option<&Bound<'_, PyAny>>,
    #[pyo3(from_py_with = crate::ints::param::max_traces)] max_traces: usize,
    static_argnames: Option<&Bound<'_, PyAny>>,
    precision: Option<&Bound<'_, PyAny>>,
    check_nans: bool,
    donate_argnums: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyJit> {
    let precision = precision_arg(precision)?;
    let donate: Vec<usize> = match donate_argnums {
        None => Vec::new(),
        Some(a) if a.is_none() => Vec::new(),
        Some(a) => match a.extract::<i64>() {
            Ok(i) => vec![argnum(i, "donate_argnums")?],
            Err(_) => a
                .extract::<Vec<i64>>()
                .map_err(|_| type_error("donate_argnums must be an int or a tuple of ints"))?
                .into_iter()
                .map(|i| argnum(i, "donate_argnums"))
                .collect::<PyResult<_>>()?,
        },
    };
    let static_argnums: Vec<usize> = match static_argnums {
        None => Vec::new(),
        Some(a) if a.is_none() => Vec::new(),
        Some(a) => crate::ints::int_list(a, "static_argnums")?,
    };
    let static_argnames: Vec<String> = match static_argnames {
        None => Vec::new(),
        Some(a) if a.is_none() => Vec::new(),
        Some(a) => match a.extract::<String>() {
            Ok(s) => vec![s],
            Err(_) => a
                .extract::<Vec<String>>()
                .map_err(|_| type_error("static_argnames must be a str or a tuple of str"))?,
        },
    };
    let signature = py
        .import("inspect")?
        .call_method1("signature", (fun,))
        .ok()
        .map(|s| s.unbind());
    // The parameters (name, kind), read once. Kinds: POSITIONAL_ONLY = 0,
    // POSITIONAL_OR_KEYWORD = 1, VAR_POSITIONAL = 2, KEYWORD_ONLY = 3, VAR_KEYWORD = 4.
    let params: Vec<(String, i64)> = match &signature {
        Some(sig) => sig
            .bind(py)
            .getattr("parameters")?
            .call_method0("values")?
            .try_iter()?
            .map(|p| {
                let p = p?;
                Ok((p.getattr("name")?.extract()?, p.getattr("kind")?.extract()?))
            })
            .collect::<PyResult<_>>()?,
        None => Vec::new(),
    };
    let keywords = params.iter().any(|(_, kind)| *kind >= 3);
    let offset = usize::from(keywords);
    let param_names: Vec<String> = params.iter().map(|(n, _)| n.clone()).collect();
    // Names given in static_argnames that are positional parameters are static positions.
    let mut statics: Vec<usize> = static_argnums.iter().map(|&i| i + offset).collect();
    for n in &static_argnames {
        if let Some(p) = params.iter().position(|(m, kind)| m == n && *kind <= 1) {
            if !statics.contains(&(p + offset)) {
                statics.push(p + offset);
            }
        }
    }
    if let Some(&i) = donate.iter().find(|&&i| statics.contains(&(i + offset))) {
        return Err(value_error(format!(
            "argument {i} is both static and donated; a static argument has no buffers to donate"
        )));
    }
    if keywords {
        statics.push(0);
    }
    // Plan inputs are named by the positional parameters, so `lower` prints `params/w`.
    let mut names: Vec<&str> = Vec::new();
    if keywords {
        names.push("**kwargs");
    }
    names.extend(
        params
            .iter()
            .filter(|(_, kind)| *kind <= 1)
            .map(|(n, _)| n.as_str()),
    );
    let mut j = qb::jit(jit_callable(fun, keywords)?)
        .name(function_name(fun))
        .arg_names(&names)
        .max_traces(max_traces)
        .static_argnums(&statics)
        .donate_argnums(&donate.iter().map(|&i| i + offset).collect::<Vec<_>>());
    if let Some(d) = device {
        j = j.device(d);
    }
    if precision.is_some() {
        j = j.precision(precision.as_deref());
    }
    if check_nans {
        j = j.check_nans(true);
    }
    Ok(PyJit {
        j,
        donate,
        binder: Arc::new(Binder {
            statics,
            signature,
            param_names,
            static_argnames,
            keywords,
        }),
    })
}

/// A non-negative argument index (ValueError naming `what` otherwise).
fn argnum(i: i64, what: &str) -> PyResult<usize> {
    usize::try_from(i).map_err(|_| value_error(format!("{what} must be non-negative, got {i}")))
}

/// `jit(f).lower(...)`: the frozen plan.
#[pyclass(name = "Lowered", module = "quabla", frozen)]
pub struct PyLowered {
    l: qb::Lowered<Value, Value>,
    binder: Arc<Binder>,
}

#[pymethods]
impl PyLowered {
    /// The plan as text, one node per line.
    fn as_text(&self) -> String {
        self.l.as_text()
    }

    /// The plan as text with each node's origin as a trailing comment (the derivative rule
    /// that made it; Rust call sites, not Python lines).
    fn as_text_with_locations(&self) -> String {
        self.l.as_text_with_locations()
    }

    /// How the backend runs the compiled plan: which loops run machine code, which are
    /// interpreted.
    fn compile_report(&self) -> String {
        self.l.compile_report()
    }

    /// A callable bound to the lowered signature: called with the arguments `lower` was
    /// called with (static ones included, by position or keyword).
    fn compile(&self) -> PyCompiled {
        PyCompiled {
            c: self.l.compile(),
            binder: self.binder.clone(),
        }
    }

    /// The plan as a `Program` with named inputs and ordered outputs.
    #[getter]
    fn program(&self) -> crate::program::PyProgram {
        crate::program::PyProgram::new(self.l.program().clone())
    }
}

/// `lowered.compile()`.
#[pyclass(name = "Compiled", module = "quabla", frozen)]
pub struct PyCompiled {
    c: qb::Compiled<Value, Value>,
    binder: Arc<Binder>,
}

#[pymethods]
impl PyCompiled {
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = self.binder.bind(py, args, kwargs)?;
        let out = run(py, || self.c.call(&args))?;
        value_to_py(py, out)
    }
}

/// Registers the transforms on `m`.
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGrad>()?;
    m.add_class::<PyJacobian>()?;
    m.add_class::<PyVjpFn>()?;
    m.add_class::<PyVmap>()?;
    m.add_class::<PyJit>()?;
    m.add_class::<PyLowered>()?;
    m.add_class::<PyCompiled>()?;
    m.add_class::<PyShapeDtype>()?;
    for f in [
        wrap_pyfunction!(_grad, m)?,
        wrap_pyfunction!(_value_and_grad, m)?,
        wrap_pyfunction!(jacobian, m)?,
        wrap_pyfunction!(jacfwd, m)?,
        wrap_pyfunction!(jacrev, m)?,
        wrap_pyfunction!(hessian, m)?,
        wrap_pyfunction!(jvp, m)?,
        wrap_pyfunction!(vjp, m)?,
        wrap_pyfunction!(_vmap, m)?,
        wrap_pyfunction!(_jit, m)?,
    ] {
        m.add_function(f)?;
    }
    install_warning_handler();
    Ok(())
}
