//! `qb.optim` (api.md §16): Adam, AdamW and SGD with their functional `init`/`update`, the
//! schedules, `clip_by_global_norm`, L-BFGS and the `Trainer`. Parameters are any Python
//! pytree of floating arrays; states are the spec's dicts.

use crate::convert::{type_name, value_from_py, value_to_py, Leaves};
use crate::errors::{to_qb, type_error, value_error, OrRaise};
use crate::tensor::{wrap, PyTensor};
use crate::transforms::{positional, run};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyInt, PyTuple};
use quabla as qb;
use quabla::optim::{self as opt, Optimizer};
use quabla::tree::Value;
use std::sync::{Arc, Mutex};

/// A Python callable `f(step) -> rate` as a schedule. As in optax, the step count it receives is
/// a float64 rank-0 tensor (a `TraceTensor` inside `jit` and in the `Trainer`'s plan), and it
/// returns a float or a rank-0 tensor; its exceptions propagate.
struct PySchedule(Py<PyAny>);

impl PySchedule {
    /// The rate at `step` as a float64 rank-0 tensor.
    fn call(&self, step: &qb::Tensor) -> qb::Result<qb::Tensor> {
        Python::attach(|py| {
            let arg = wrap(py, step.clone()).map_err(to_qb)?;
            let v = self.0.bind(py).call1((arg,)).map_err(|e| {
                // A schedule that reads the traced step as a number is a tracer error of the
                // library's own (the `Trainer` then evaluates it on the host).
                let tracer = crate::errors::quabla_class(py, "TracerError")
                    .is_ok_and(|class| e.is_instance(py, &class));
                if tracer {
                    qb::Error::Tracer {
                        kind: qb::TracerErrorKind::Concretization,
                        message: e.value(py).to_string(),
                    }
                } else {
                    to_qb(e)
                }
            })?;
            if let Ok(t) = v.cast::<PyTensor>() {
                return t.get().t.astype(qb::F64);
            }
            if v.is_instance_of::<PyFloat>() || v.is_instance_of::<PyInt>() {
                if let Ok(x) = v.extract::<f64>() {
                    return qb::array(x);
                }
            }
            Err(qb::Error::Type {
                message: format!(
                    "a learning-rate schedule must return a float or a rank-0 tensor, got {}",
                    type_name(&v)
                ),
            })
        })
    }
}

impl opt::Schedule for PySchedule {
    fn value(&self, step: u64) -> qb::Result<f64> {
        self.call(&qb::array(step as f64)?)?.item()
    }

    fn value_at(&self, step: &qb::Tensor) -> Option<qb::Result<qb::Tensor>> {
        Some(self.call(step))
    }
}

/// A built-in schedule: call it with a step to read its rate.
#[pyclass(name = "Schedule", module = "quabla.optim", frozen)]
pub struct PyBuiltinSchedule {
    inner: Arc<dyn opt::Schedule>,
    repr: String,
}

#[pymethods]
impl PyBuiltinSchedule {
    /// The rate at `step`: a float for an int step; a rank-0 tensor for a tensor step (the
    /// state's count, concrete or traced), with the same value.
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        step: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Ok(t) = step.cast::<PyTensor>() {
            let step = t.get().t.astype(qb::F64).or_raise()?;
            let rate = match self.inner.value_at(&step) {
                Some(rate) => rate.or_raise()?,
                None => return Err(value_error("this schedule runs on the host only")),
            };
            return wrap(py, rate);
        }
        let n = step_count(step, "step")?;
        Ok(self
            .inner
            .value(n)
            .or_raise()?
            .into_pyobject(py)?
            .into_any())
    }

    fn __repr__(&self) -> String {
        self.repr.clone()
    }
}

/// A built-in schedule, validated now (numerics.md §8.4: at construction).
fn schedule(inner: impl opt::Schedule + 'static, repr: String) -> PyResult<PyBuiltinSchedule> {
    inner.validate().or_raise()?;
    Ok(PyBuiltinSchedule {
        inner: Arc::new(inner),
        repr,
    })
}

/// A step count given as a Python number: a whole number in `[0, 2**53)` (ValueError
/// otherwise; a bool is a TypeError).
fn step_count(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<u64> {
    if obj.is_instance_of::<pyo3::types::PyBool>() {
        return Err(type_error(format!("{name} must be an int, got bool")));
    }
    let value: f64 = if let Ok(i) = obj.extract::<i128>() {
        i as f64
    } else if obj.is_instance_of::<PyFloat>() {
        obj.extract::<f64>()?
    } else {
        return Err(type_error(format!(
            "{name} must be an int, got {}",
            type_name(obj)
        )));
    };
    if value.is_finite() && value >= 0.0 && value.fract() == 0.0 && value < 9007199254740992.0 {
        Ok(value as u64)
    } else {
        Err(value_error(format!(
            "{name} must be a whole number in [0, 2**53), got {}",
            obj.repr().map(|r| r.to_string()).unwrap_or_default()
        )))
    }
}

#[pyfunction]
fn constant(value: f64) -> PyResult<PyBuiltinSchedule> {
    schedule(opt::constant(value), format!("constant({value})"))
}

#[pyfunction]
#[pyo3(signature = (init_value, transition_steps, decay_rate, transition_begin=0, staircase=false, end_value=None))]
fn exponential_decay(
    init_value: f64,
    #[pyo3(from_py_with = crate::ints::param::transition_steps)] transition_steps: u64,
    decay_rate: f64,
    #[pyo3(from_py_with = crate::ints::param::transition_begin)] transition_begin: u64,
    staircase: bool,
    end_value: Option<f64>,
) -> PyResult<PyBuiltinSchedule> {
    let mut s = opt::exponential_decay(init_value, transition_steps, decay_rate)
        .transition_begin(transition_begin)
        .staircase(staircase);
    if let Some(e) = end_value {
        s = s.end_value(e);
    }
    schedule(
        s,
        format!("exponential_decay({init_value}, {transition_steps}, {decay_rate})"),
    )
}

#[pyfunction]
#[pyo3(signature = (init_value, decay_steps, alpha=0.0))]
fn cosine_decay(
    init_value: f64,
    #[pyo3(from_py_with = crate::ints::param::decay_steps)] decay_steps: u64,
    alpha: f64,
) -> PyResult<PyBuiltinSchedule> {
    schedule(
        opt::cosine_decay(init_value, decay_steps).alpha(alpha),
        format!("cosine_decay({init_value}, {decay_steps}, alpha={alpha})"),
    )
}

#[pyfunction]
#[pyo3(signature = (init_value, peak_value, warmup_steps, decay_steps, end_value=0.0))]
fn warmup_cosine_decay(
    init_value: f64,
    peak_value: f64,
    #[pyo3(from_py_with = crate::ints::param::warmup_steps)] warmup_steps: u64,
    #[pyo3(from_py_with = crate::ints::param::decay_steps)] decay_steps: u64,
    end_value: f64,
) -> PyResult<PyBuiltinSchedule> {
    schedule(
        opt::warmup_cosine_decay(init_value, peak_value, warmup_steps, decay_steps)
            .end_value(end_value),
        format!("warmup_cosine_decay({init_value}, {peak_value}, {warmup_steps}, {decay_steps})"),
    )
}

#[pyfunction]
fn piecewise_constant(
    #[pyo3(from_py_with = crate::ints::list::boundaries)] boundaries: Vec<u64>,
    values: Vec<f64>,
) -> PyResult<PyBuiltinSchedule> {
    schedule(
        opt::piecewise_constant(&boundaries, &values),
        format!("piecewise_constant({boundaries:?}, {values:?})"),
    )
}

/// A `learning_rate` argument: a float, a built-in schedule or any callable.
fn read_learning_rate(obj: &Bound<'_, PyAny>) -> PyResult<opt::LearningRate> {
    if obj.is_instance_of::<PyFloat>() || obj.is_instance_of::<PyInt>() {
        return Ok(opt::LearningRate::Constant(obj.extract()?));
    }
    if let Ok(s) = obj.cast::<PyBuiltinSchedule>() {
        return Ok(opt::LearningRate::Schedule(s.get().inner.clone()));
    }
    if obj.is_callable() {
        return Ok(opt::LearningRate::schedule(PySchedule(
            obj.clone().unbind(),
        )));
    }
    Err(type_error(format!(
        "learning_rate must be a float or a schedule (a callable step -> float), got {}",
        type_name(obj)
    )))
}

#[derive(Clone, Debug)]
enum Rule {
    Adam(opt::Adam),
    AdamW(opt::AdamW),
    Sgd(opt::Sgd),
}

macro_rules! with_rule {
    ($rule:expr, $o:ident => $body:expr) => {
        match $rule {
            Rule::Adam($o) => $body,
            Rule::AdamW($o) => $body,
            Rule::Sgd($o) => $body,
        }
    };
}

/// `Adam`, `AdamW` and `SGD`: functional optimizers.
#[pyclass(name = "Optimizer", module = "quabla.optim", frozen, subclass)]
pub struct PyOptimizer {
    rule: Rule,
    is_schedule: bool,
    repr: String,
}

fn state_to_py<'py>(
    py: Python<'py>,
    s: opt::State<Value>,
    sgd: bool,
    schedule: bool,
) -> PyResult<Bound<'py, PyAny>> {
    if sgd && !schedule {
        return Ok(py.None().into_bound(py));
    }
    let d = PyDict::new(py);
    d.set_item("step", wrap(py, s.step)?)?;
    if !sgd {
        d.set_item("m", value_to_py(py, s.m.unwrap_or(Value::None))?)?;
        d.set_item("v", value_to_py(py, s.v.unwrap_or(Value::None))?)?;
    }
    Ok(d.into_any())
}

/// The state's step: a tensor (the form `init` and `update` return, traced inside `jit`) or a
/// Python number (a whole number in `[0, 2**53)`).
fn step_from_py(obj: &Bound<'_, PyAny>) -> PyResult<qb::Tensor> {
    if let Ok(t) = obj.cast::<PyTensor>() {
        return Ok(t.get().t.clone());
    }
    let n = step_count(obj, "the optimizer state's step")?;
    qb::array(n as f64).or_raise()
}

/// TypeError for arguments in optax's order (`update(grads, state, params)`): the second
/// argument is a state dict and the third is not.
fn optax_order(who: &str, grads: &Bound<'_, PyAny>, state: &Bound<'_, PyAny>) -> PyResult<()> {
    let is_state = |o: &Bound<'_, PyAny>| {
        o.cast::<PyDict>()
            .is_ok_and(|d| d.contains("step").unwrap_or(false))
    };
    if is_state(grads) && !is_state(state) {
        return Err(type_error(format!(
            "{who}.update(params, grads, state): the second argument is an optimizer state and \
             the third is not; the order here is update(params, grads, state) (optax's update \
             is update(grads, state, params))"
        )));
    }
    Ok(())
}

fn state_from_py(
    obj: &Bound<'_, PyAny>,
    who: &str,
    sgd: bool,
    schedule: bool,
) -> PyResult<opt::State<Value>> {
    if sgd && !schedule && obj.is_none() {
        return Ok(opt::State {
            step: qb::array(0.0).or_raise()?,
            m: None,
            v: None,
        });
    }
    let d = obj.cast::<PyDict>().map_err(|_| {
        type_error(format!(
            "{who}.update(params, grads, state): state must be the dict that init returned, got \
             {} (note the order: optax's update is update(grads, state, params))",
            type_name(obj)
        ))
    })?;
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        d.get_item(k)?.ok_or_else(|| {
            let _ = k;
            value_error(format!(
                "{who} state is missing one of the keys \"step\", \"m\", \"v\""
            ))
        })
    };
    let step = step_from_py(&get("step")?)?;
    if sgd {
        return Ok(opt::State {
            step,
            m: None,
            v: None,
        });
    }
    Ok(opt::State {
        step,
        m: Some(value_from_py(&get("m")?, Leaves::Transform)?),
        v: Some(value_from_py(&get("v")?, Leaves::Transform)?),
    })
}

#[pymethods]
impl PyOptimizer {
    fn init<'py>(
        &self,
        py: Python<'py>,
        params: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let p = value_from_py(params, Leaves::Transform)?;
        let s = with_rule!(&self.rule, o => o.init(&p)).or_raise()?;
        state_to_py(py, s, matches!(self.rule, Rule::Sgd(_)), self.is_schedule)
    }

    fn update<'py>(
        &self,
        py: Python<'py>,
        params: &Bound<'py, PyAny>,
        grads: &Bound<'py, PyAny>,
        state: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let sgd = matches!(self.rule, Rule::Sgd(_));
        let who = match self.rule {
            Rule::Adam(_) => "Adam",
            Rule::AdamW(_) => "AdamW",
            Rule::Sgd(_) => "SGD",
        };
        optax_order(who, grads, state)?;
        let s = state_from_py(state, who, sgd, self.is_schedule)?;
        let p = value_from_py(params, Leaves::Transform)?;
        let g = value_from_py(grads, Leaves::Transform)?;
        let (np, ns) = with_rule!(&self.rule, o => o.update(&p, &g, &s)).or_raise()?;
        Ok(PyTuple::new(
            py,
            [
                value_to_py(py, np)?,
                state_to_py(py, ns, sgd, self.is_schedule)?,
            ],
        )?
        .into_any())
    }

    fn __repr__(&self) -> String {
        self.repr.clone()
    }
}

/// An optimizer object, its configuration validated now (an error at construction, not at
/// first use).
fn optimizer(rule: Rule, lr: &opt::LearningRate, repr: String) -> PyResult<PyOptimizer> {
    with_rule!(&rule, o => o.validate()).or_raise()?;
    Ok(PyOptimizer {
        rule,
        is_schedule: lr.is_schedule(),
        repr,
    })
}

#[pyfunction]
#[pyo3(name = "Adam", signature = (learning_rate=None, b1=0.9, b2=0.999, eps=1e-8, *, clip_norm=None))]
fn adam(
    learning_rate: Option<&Bound<'_, PyAny>>,
    b1: f64,
    b2: f64,
    eps: f64,
    clip_norm: Option<f64>,
) -> PyResult<PyOptimizer> {
    let lr = learning_rate
        .map(read_learning_rate)
        .transpose()?
        .unwrap_or(opt::LearningRate::Constant(1e-3));
    let mut o = opt::Adam::new(lr.clone()).b1(b1).b2(b2).eps(eps);
    if let Some(c) = clip_norm {
        o = o.clip_norm(c);
    }
    optimizer(
        Rule::Adam(o),
        &lr,
        format!("Adam(learning_rate={lr:?}, b1={b1}, b2={b2}, eps={eps})"),
    )
}

#[pyfunction]
#[pyo3(name = "AdamW", signature = (learning_rate=None, b1=0.9, b2=0.999, eps=1e-8, weight_decay=1e-4, *, clip_norm=None))]
fn adamw(
    learning_rate: Option<&Bound<'_, PyAny>>,
    b1: f64,
    b2: f64,
    eps: f64,
    weight_decay: f64,
    clip_norm: Option<f64>,
) -> PyResult<PyOptimizer> {
    let lr = learning_rate
        .map(read_learning_rate)
        .transpose()?
        .unwrap_or(opt::LearningRate::Constant(1e-3));
    let mut o = opt::AdamW::new(lr.clone())
        .b1(b1)
        .b2(b2)
        .eps(eps)
        .weight_decay(weight_decay);
    if let Some(c) = clip_norm {
        o = o.clip_norm(c);
    }
    optimizer(
        Rule::AdamW(o),
        &lr,
        format!("AdamW(learning_rate={lr:?}, weight_decay={weight_decay})"),
    )
}

#[pyfunction]
#[pyo3(name = "SGD", signature = (learning_rate=None, *, clip_norm=None))]
fn sgd(learning_rate: Option<&Bound<'_, PyAny>>, clip_norm: Option<f64>) -> PyResult<PyOptimizer> {
    let lr = learning_rate
        .map(read_learning_rate)
        .transpose()?
        .unwrap_or(opt::LearningRate::Constant(1e-2));
    let mut o = opt::Sgd::new(lr.clone());
    if let Some(c) = clip_norm {
        o = o.clip_norm(c);
    }
    optimizer(Rule::Sgd(o), &lr, format!("SGD(learning_rate={lr:?})"))
}

/// `clip_by_global_norm(grads, max_norm) -> (clipped, norm)`.
#[pyfunction]
fn clip_by_global_norm<'py>(
    py: Python<'py>,
    grads: &Bound<'py, PyAny>,
    max_norm: f64,
) -> PyResult<Bound<'py, PyAny>> {
    let g = value_from_py(grads, Leaves::Transform)?;
    let (clipped, norm) = opt::clip_by_global_norm(&g, max_norm).or_raise()?;
    Ok(PyTuple::new(
        py,
        [
            value_to_py(py, clipped)?,
            norm.into_pyobject(py)?.into_any(),
        ],
    )?
    .into_any())
}

/// `LBFGS(...)`: a full-batch quasi-Newton minimizer.
#[pyclass(name = "LBFGS", module = "quabla.optim", frozen)]
pub struct PyLbfgs {
    l: opt::Lbfgs,
}

#[pymethods]
impl PyLbfgs {
    #[new]
    #[pyo3(signature = (history=10, max_iterations=500, max_evaluations=None, tolerance_grad=1e-7, tolerance_change=1e-9, line_search="strong_wolfe", **options))]
    fn new(
        #[pyo3(from_py_with = crate::ints::param::history)] history: usize,
        #[pyo3(from_py_with = crate::ints::param::max_iterations)] max_iterations: usize,
        #[pyo3(from_py_with = crate::ints::param::opt_max_evaluations)] max_evaluations: Option<
            usize,
        >,
        tolerance_grad: f64,
        tolerance_change: f64,
        line_search: &str,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        if let Some((key, _)) = options.and_then(|o| o.iter().next()) {
            let key = key.to_string();
            let hint = match key.as_str() {
                "max_iters" | "maxiter" | "max_iter" | "iterations" => {
                    " (did you mean max_iterations?)"
                }
                "maxfun" | "max_eval" | "max_evals" | "maxfev" => {
                    " (did you mean max_evaluations?)"
                }
                "tol" | "gtol" | "tolerance" => " (did you mean tolerance_grad?)",
                "m" | "maxcor" | "memory" => " (did you mean history?)",
                _ => "",
            };
            return Err(type_error(format!(
                "LBFGS() got an unexpected keyword argument {key:?}{hint}; its options are \
                 history, max_iterations, max_evaluations, tolerance_grad, tolerance_change and \
                 line_search"
            )));
        }
        if line_search != "strong_wolfe" {
            return Err(value_error(format!(
                "LBFGS: line_search must be \"strong_wolfe\", got {line_search:?}"
            )));
        }
        let mut l = opt::Lbfgs::new()
            .history(history)
            .max_iterations(max_iterations)
            .tolerance_grad(tolerance_grad)
            .tolerance_change(tolerance_change)
            .line_search(line_search);
        if let Some(n) = max_evaluations {
            l = l.max_evaluations(n);
        }
        l.validate().or_raise()?;
        Ok(PyLbfgs { l })
    }

    /// `minimize(fun, params, *args) -> (solution, info)`.
    #[pyo3(signature = (fun, params, *args))]
    fn minimize<'py>(
        &self,
        py: Python<'py>,
        fun: &Bound<'py, PyAny>,
        params: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let f = fun.clone().unbind();
        let p = value_from_py(params, Leaves::Transform)?;
        let a = crate::transforms::args_value(args, &[])?;
        let loss = move |p: &Value, a: &Value| -> qb::Result<qb::Tensor> { call_loss(&f, p, a) };
        let (x, info) = run(py, || self.l.minimize(loss, &p, &a))?;
        let d = PyDict::new(py);
        d.set_item("iterations", info.iterations)?;
        d.set_item("evaluations", info.evaluations)?;
        d.set_item("loss", info.loss)?;
        d.set_item("grad_norm", info.grad_norm)?;
        d.set_item("reason", info.reason.as_str())?;
        d.set_item("converged", info.converged)?;
        Ok(PyTuple::new(py, [value_to_py(py, x)?, d.into_any()])?.into_any())
    }
}

/// Calls `loss(params, *data)` and reads its rank-0 result.
fn call_loss(f: &Py<PyAny>, params: &Value, data: &Value) -> qb::Result<qb::Tensor> {
    Python::attach(|py| {
        let p = value_to_py(py, params.clone()).map_err(to_qb)?;
        let mut items = vec![p];
        items.extend(positional(py, data.clone()).map_err(to_qb)?.iter());
        let out = f
            .bind(py)
            .call1(PyTuple::new(py, items).map_err(to_qb)?)
            .map_err(to_qb)?;
        match out.cast::<PyTensor>() {
            Ok(t) => Ok(t.get().t.clone()),
            Err(_) => Err(qb::Error::user(format!(
                "the loss must return a rank-0 array, got {}",
                type_name(&out)
            ))),
        }
    })
}

type Loss = Box<dyn Fn(&Value, &Value) -> qb::Result<qb::Tensor> + Send + Sync>;

/// `Trainer(loss, params, optimizer, *data, device="cpu", batch_argnums=(), precision=None)`.
///
/// The trainer is locked for each call, and the lock is only ever waited for with the GIL
/// released (inside `run`), so a thread holding the lock can always take the GIL back for a
/// Python callback: two threads stepping one trainer take turns, never deadlock.
#[pyclass(name = "Trainer", module = "quabla.optim")]
pub struct PyTrainer {
    t: Mutex<opt::Trainer<Value, Value, Loss>>,
    /// How many data arguments each step may replace (`batch_argnums`).
    batch_args: usize,
}

thread_local! {
    /// The trainers whose lock this thread holds (by address): a callback of a step (the loss
    /// while it is traced, a host schedule) that calls into the same trainer is refused instead
    /// of waiting for a lock its own thread holds.
    static HELD: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl PyTrainer {
    /// Runs `f` on the locked trainer with the GIL released.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut opt::Trainer<Value, Value, Loss>) -> qb::Result<T> + Send,
    ) -> PyResult<T> {
        let me = self as *const PyTrainer as usize;
        if HELD.with(|h| h.borrow().contains(&me)) {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "a Trainer was used from inside one of its own steps (its loss or learning-rate \
                 schedule called it); a callback of a step must not step or read its trainer",
            ));
        }
        run(py, || {
            let mut guard = self.t.lock().unwrap_or_else(|e| e.into_inner());
            HELD.with(|h| h.borrow_mut().push(me));
            let out = f(&mut guard);
            HELD.with(|h| {
                let mut h = h.borrow_mut();
                if let Some(i) = h.iter().rposition(|&t| t == me) {
                    h.remove(i);
                }
            });
            out
        })
    }
}

#[pymethods]
impl PyTrainer {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (loss, params, optimizer, *data, device="cpu", batch_argnums=None, precision=None))]
    fn new(
        py: Python<'_>,
        loss: &Bound<'_, PyAny>,
        params: &Bound<'_, PyAny>,
        optimizer: &Bound<'_, PyOptimizer>,
        data: &Bound<'_, PyTuple>,
        device: &str,
        batch_argnums: Option<Vec<usize>>,
        precision: Option<String>,
    ) -> PyResult<Self> {
        if let Some(p) = &precision {
            if p != "float64" {
                return Err(value_error(format!(
                    "precision must be None or \"float64\", got {p:?}"
                )));
            }
        }
        let f = loss.clone().unbind();
        let l: Loss = Box::new(move |p: &Value, d: &Value| call_loss(&f, p, d));
        let p = value_from_py(params, Leaves::Transform)?;
        let d = crate::transforms::args_value(data, &[])?;
        let batch = batch_argnums.unwrap_or_default();
        let batch_args = batch.len();
        let t = with_rule!(&optimizer.get().rule, o => {
            let o = o.clone();
            let precision = precision.clone();
            run(py, move || {
                opt::Trainer::new(l, p, o, d)
                    .device(device)
                    .precision(precision.as_deref())
                    .batch_argnums(&batch)
                    .build()
            })
        })?;
        Ok(PyTrainer {
            t: Mutex::new(t),
            batch_args,
        })
    }

    /// One optimizer step; with arguments, first replaces the `batch_argnums` data (one value
    /// per name in `batch_argnums`, in that order). Returns `None`; the loss the step computed
    /// is `last_loss`.
    #[pyo3(signature = (*batch))]
    fn step(&self, py: Python<'_>, batch: &Bound<'_, PyTuple>) -> PyResult<()> {
        if batch.is_empty() {
            return self.with(py, |t| t.step());
        }
        if batch.len() != self.batch_args {
            return Err(type_error(format!(
                "Trainer.step takes one batch value per name in batch_argnums ({}), got {}",
                self.batch_args,
                batch.len()
            )));
        }
        // One argument replaces one data argument: pass it itself, not a 1-tuple.
        let b = if batch.len() == 1 {
            value_from_py(&batch.get_item(0)?, Leaves::Transform)?
        } else {
            crate::transforms::args_value(batch, &[])?
        };
        self.with(py, |t| t.step_with(&b))
    }

    /// The loss at the current parameters and latest data (computed on the device; one
    /// readback).
    fn loss<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let l = self.with(py, |t| t.loss())?;
        wrap(py, l)
    }

    /// The loss the last step computed, at the parameters before its update (one readback);
    /// `None` before the first step.
    #[getter]
    fn last_loss<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.with(py, |t| t.last_loss())? {
            Some(l) => wrap(py, l),
            None => Ok(py.None().into_bound(py)),
        }
    }

    /// The number of steps taken.
    #[getter]
    fn steps(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |t| Ok(t.steps()))
    }

    /// The current parameters in the original structure (read back from the device).
    #[getter]
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let p = self.with(py, |t| t.params())?;
        value_to_py(py, p)
    }
}

/// Registers `qb.optim` on `m`.
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyOptimizer>()?;
    m.add_class::<PyBuiltinSchedule>()?;
    m.add_class::<PyLbfgs>()?;
    m.add_class::<PyTrainer>()?;
    for f in [
        wrap_pyfunction!(adam, m)?,
        wrap_pyfunction!(adamw, m)?,
        wrap_pyfunction!(sgd, m)?,
        wrap_pyfunction!(constant, m)?,
        wrap_pyfunction!(exponential_decay, m)?,
        wrap_pyfunction!(cosine_decay, m)?,
        wrap_pyfunction!(warmup_cosine_decay, m)?,
        wrap_pyfunction!(piecewise_constant, m)?,
        wrap_pyfunction!(clip_by_global_norm, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
