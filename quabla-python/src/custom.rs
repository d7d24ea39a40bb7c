//! `custom_vjp`, `custom_jvp` and `checkpoint`/`remat` (api.md §12) over Python functions.
//!
//! The Python objects keep the user's functions; each call builds the facade's rule object
//! from them (cheap: it boxes the callbacks) and calls it, so the rules see the current
//! trace exactly as the Rust wrappers would.

use crate::convert::value_to_py;
use crate::errors::{type_error, value_error, OrRaise};
use crate::transforms::{args_value, call_python, function_name};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use quabla as qb;
use quabla::tree::Value;
use std::cell::RefCell;
use std::sync::Mutex;

thread_local! {
    /// The custom-rule objects whose rules are being traced on this thread: a call of one of
    /// them from inside its own rules (`fwd` calling the function) is a plain call of the
    /// function, as in the facade.
    static ACTIVE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Marks a custom-rule object active for the life of the guard.
struct Active(usize);

impl Active {
    /// `None` when the object is already active (a call from inside its own rules).
    fn enter(id: usize) -> Option<Active> {
        ACTIVE.with(|a| {
            let mut a = a.borrow_mut();
            if a.contains(&id) {
                None
            } else {
                a.push(id);
                Some(Active(id))
            }
        })
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.borrow_mut().retain(|i| *i != self.0));
    }
}

/// The call of a custom-rule object: positional arguments only; a call from inside the
/// object's own rules is a plain call of `fun`, any other is `rule_call`.
fn guarded_call<'py>(
    wrapper: &str,
    obj: &Bound<'py, PyAny>,
    fun: &Py<PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
    rule_call: impl FnOnce() -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    if kwargs.is_some_and(|k| !k.is_empty()) {
        return Err(type_error(format!(
            "{wrapper}() takes positional arguments only"
        )));
    }
    let Some(_active) = Active::enter(obj.as_ptr() as usize) else {
        return fun.bind(obj.py()).call1(args.clone());
    };
    rule_call()
}

/// The number of positional arguments in an argument tuple.
fn args_count(args: &Value) -> usize {
    match args {
        Value::Tuple(items) => items.len(),
        _ => 1,
    }
}

/// The facade's rule arguments for `count` positional arguments (the argument itself for
/// one, a tuple for several) as the tuple Python's rules take: one entry per argument, even
/// when the only argument is itself a tuple.
fn tuple_of(v: Value, count: usize) -> Value {
    if count == 1 {
        Value::Tuple(vec![v])
    } else {
        v
    }
}

/// Splits a Python `(a, b)` result.
fn pair(v: Value, what: &str) -> qb::Result<(Value, Value)> {
    match v {
        Value::Tuple(mut items) if items.len() == 2 => {
            let b = items.pop().unwrap_or(Value::None);
            let a = items.pop().unwrap_or(Value::None);
            Ok((a, b))
        }
        _ => Err(crate::errors::user_type_error(format!(
            "{what} must return a pair"
        ))),
    }
}

/// Calls `f(*head, *rest)` where `head` are the entries of a tuple value (the non-
/// differentiable arguments) and `rest` further values.
fn call_spread(f: &Py<PyAny>, head: Option<Value>, rest: Vec<Value>) -> qb::Result<Value> {
    let mut items = match head {
        Some(Value::Tuple(items)) => items,
        Some(other) => vec![other],
        None => Vec::new(),
    };
    items.extend(rest);
    call_python(f, Value::Tuple(items))
}

fn nondiff_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<usize>> {
    match obj {
        None => Ok(Vec::new()),
        Some(o) if o.is_none() => Ok(Vec::new()),
        Some(o) => crate::ints::int_list(o, "nondiff_argnums"),
    }
}

struct VjpRules {
    fwd: Py<PyAny>,
    bwd: Py<PyAny>,
}

/// `custom_vjp(fun, nondiff_argnums=())`; define the rules with `defvjp(fwd, bwd)`.
#[pyclass(name = "custom_vjp", module = "quabla", frozen)]
pub struct PyCustomVjp {
    fun: Py<PyAny>,
    nondiff: Vec<usize>,
    name: String,
    rules: Mutex<Option<VjpRules>>,
}

#[pymethods]
impl PyCustomVjp {
    #[new]
    #[pyo3(signature = (fun, nondiff_argnums=None))]
    fn new(fun: &Bound<'_, PyAny>, nondiff_argnums: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(PyCustomVjp {
            fun: fun.clone().unbind(),
            nondiff: nondiff_arg(nondiff_argnums)?,
            name: function_name(fun),
            rules: Mutex::new(None),
        })
    }

    /// Sets the forward rule `fwd(*args) -> (out, residuals)` and the backward rule
    /// `bwd(*nondiff_args, residuals, g) -> cotangents`.
    fn defvjp(&self, fwd: &Bound<'_, PyAny>, bwd: &Bound<'_, PyAny>) -> PyResult<()> {
        if !fwd.is_callable() || !bwd.is_callable() {
            return Err(type_error("defvjp(fwd, bwd) needs two callables"));
        }
        *self.rules.lock().unwrap_or_else(|e| e.into_inner()) = Some(VjpRules {
            fwd: fwd.clone().unbind(),
            bwd: bwd.clone().unbind(),
        });
        Ok(())
    }

    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        slf: &Bound<'py, Self>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let this = slf.get();
        guarded_call("custom_vjp", slf.as_any(), &this.fun, args, kwargs, || {
            this.call(slf.py(), args)
        })
    }
}

impl PyCustomVjp {
    fn call<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (fwd, bwd) = {
            let rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
            let r = rules.as_ref().ok_or_else(|| {
                value_error(format!(
                    "custom_vjp({}) has no rules; call defvjp(fwd, bwd) first",
                    self.name
                ))
            })?;
            (r.fwd.clone_ref(py), r.bwd.clone_ref(py))
        };
        let args = args_value(args, &[])?;
        let fun = self.fun.clone_ref(py);
        let f = move |a: Value| call_python(&fun, a);
        let fwd_f = move |a: Value| pair(call_python(&fwd, a)?, "the fwd rule of custom_vjp");
        let out = if self.nondiff.is_empty() {
            let bwd_f = move |(res, g): (Value, Value)| call_spread(&bwd, None, vec![res, g]);
            let rule = qb::custom_vjp(f)
                .name(self.name.clone())
                .defvjp(fwd_f, bwd_f);
            rule.call(&args).or_raise()?
        } else {
            // Python's bwd returns a tuple with one cotangent per differentiable argument; the
            // facade takes a single differentiable argument's cotangent bare.
            let n_nondiff = self.nondiff.len();
            let n_diff = args_count(&args).saturating_sub(n_nondiff);
            let bwd_f = move |(n, res, g): (Value, Value, Value)| match call_spread(
                &bwd,
                Some(tuple_of(n, n_nondiff)),
                vec![res, g],
            )? {
                Value::Tuple(mut items) if n_diff == 1 && items.len() == 1 => Ok(items.remove(0)),
                other => Ok(other),
            };
            let rule = qb::custom_vjp(f)
                .name(self.name.clone())
                .nondiff_argnums(&self.nondiff)
                .defvjp(fwd_f, bwd_f);
            rule.call(&args).or_raise()?
        };
        value_to_py(py, out)
    }
}

/// `custom_jvp(fun, nondiff_argnums=())`; define the rule with `defjvp(rule)` (usable as a
/// decorator: it returns the rule).
#[pyclass(name = "custom_jvp", module = "quabla", frozen)]
pub struct PyCustomJvp {
    fun: Py<PyAny>,
    nondiff: Vec<usize>,
    name: String,
    rule: Mutex<Option<Py<PyAny>>>,
}

#[pymethods]
impl PyCustomJvp {
    #[new]
    #[pyo3(signature = (fun, nondiff_argnums=None))]
    fn new(fun: &Bound<'_, PyAny>, nondiff_argnums: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(PyCustomJvp {
            fun: fun.clone().unbind(),
            nondiff: nondiff_arg(nondiff_argnums)?,
            name: function_name(fun),
            rule: Mutex::new(None),
        })
    }

    /// Sets `rule(*nondiff_args, primals, tangents) -> (primal_out, tangent_out)`.
    fn defjvp<'py>(&self, rule: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if !rule.is_callable() {
            return Err(type_error("defjvp(rule) needs a callable"));
        }
        *self.rule.lock().unwrap_or_else(|e| e.into_inner()) = Some(rule.clone().unbind());
        Ok(rule.clone())
    }

    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        slf: &Bound<'py, Self>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let this = slf.get();
        guarded_call("custom_jvp", slf.as_any(), &this.fun, args, kwargs, || {
            this.call(slf.py(), args)
        })
    }
}

impl PyCustomJvp {
    fn call<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let rule = self
            .rule
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|r| r.clone_ref(py))
            .ok_or_else(|| {
                value_error(format!(
                    "custom_jvp({}) has no rule; call defjvp(rule) first",
                    self.name
                ))
            })?;
        let args = args_value(args, &[])?;
        let fun = self.fun.clone_ref(py);
        let f = move |a: Value| call_python(&fun, a);
        let out = if self.nondiff.is_empty() {
            let r = move |(p, t): (Value, Value)| {
                pair(call_spread(&rule, None, vec![p, t])?, "the jvp rule")
            };
            let c = qb::custom_jvp(f).name(self.name.clone()).defjvp(r);
            c.call(&args).or_raise()?
        } else {
            // Python's rule takes `primals` and `tangents` as tuples with one entry per
            // differentiable argument; the facade passes a single one bare.
            let n_nondiff = self.nondiff.len();
            let n_diff = args_count(&args).saturating_sub(n_nondiff);
            let r = move |(n, p, t): (Value, Value, Value)| {
                let (p, t) = (tuple_of(p, n_diff), tuple_of(t, n_diff));
                pair(
                    call_spread(&rule, Some(tuple_of(n, n_nondiff)), vec![p, t])?,
                    "the jvp rule",
                )
            };
            let c = qb::custom_jvp(f)
                .name(self.name.clone())
                .nondiff_argnums(&self.nondiff)
                .defjvp(r);
            c.call(&args).or_raise()?
        };
        value_to_py(py, out)
    }
}

/// `checkpoint(fun, static_argnums=())` (alias `remat`): same values and derivatives, the
/// backward pass recomputes `fun`'s intermediates.
#[pyclass(name = "checkpoint", module = "quabla", frozen)]
pub struct PyCheckpoint {
    fun: Py<PyAny>,
    static_argnums: Vec<usize>,
    name: String,
}

#[pymethods]
impl PyCheckpoint {
    #[new]
    #[pyo3(signature = (fun, static_argnums=None))]
    fn new(fun: &Bound<'_, PyAny>, static_argnums: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(PyCheckpoint {
            fun: fun.clone().unbind(),
            static_argnums: nondiff_arg(static_argnums)?,
            name: function_name(fun),
        })
    }

    #[pyo3(signature = (*args))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = args_value(args, &self.static_argnums)?;
        let fun = self.fun.clone_ref(py);
        let c = qb::checkpoint(move |a: Value| call_python(&fun, a)).name(self.name.clone());
        let out = c.call(&args).or_raise()?;
        value_to_py(py, out)
    }
}

/// Registers the custom-rule classes on `m`.
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCustomVjp>()?;
    m.add_class::<PyCustomJvp>()?;
    m.add_class::<PyCheckpoint>()?;
    m.add("remat", m.getattr("checkpoint")?)?;
    Ok(())
}
