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

/// A Python callable `f(step) -> float` as a schedule; its exceptions propagate.
struct PySchedule(Py<PyAny>);

impl opt::Schedule for PySchedule {
    fn value(&self, step: u64) -> qb::Result<f64> {
        Python::attach(|py| {
            let v = self.0.bind(py).call1((step,)).map_err(to_qb)?;
            v.extract::<f64>().map_err(|e| {
                crate::errors::result_error(py, e, || {
                    format!(
                        "a learning-rate schedule must return a float, got {}",
                        type_name(&v)
                    )
                })
            })
        })
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
    fn __call__(
        &self,
        #[pyo3(from_py_with = crate::ints::param::schedule_step)] step: u64,
    ) -> PyResult<f64> {
        self.inner.value(step).or_raise()
    }

    fn __repr__(&self) -> String {
        self.repr.clone()
    }
}

fn schedule(inner: impl opt::Schedule + 'static, repr: String) -> PyBuiltinSchedule {
    PyBuiltinSchedule {
        inner: Arc::new(inner),
        repr,
    }
}

#[pyfunction]
fn constant(value: f64) -> PyBuiltinSchedule {
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
) -> PyBuiltinSchedule {
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
) -> PyBuiltinSchedule {
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
) -> PyBuiltinSchedule {
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
) -> PyBuiltinSchedule {
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
    d.set_item("step", s.step)?;
    if !sgd {
        d.set_item("m", value_to_py(py, s.m.unwrap_or(Value::None))?)?;
        d.set_item("v", value_to_py(py, s.v.unwrap_or(Value::None))?)?;
    }
    Ok(d.into_any())
}

fn state_from_py(obj: &Bound<'_, PyAny>, sgd: bool, schedule: bool) -> PyResult<opt::State<Value>> {
    if sgd && !schedule && obj.is_none() {
        return Ok(opt::State {
            step: 0,
            m: None,
            v: None,
        });
    }
    let d = obj.cast::<PyDict>().map_err(|_| {
        value_error(format!(
            "optimizer state must be the dict that init returned, got {}",
            type_name(obj)
        ))
    })?;
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        d.get_item(k)?
            .ok_or_else(|| value_error(format!("optimizer state is missing {k:?}")))
    };
    let step: u64 = crate::ints::int_arg(&get("step")?, "step")?;
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
        let p = value_from_py(params, Leaves::Transform)?;
        let g = value_from_py(grads, Leaves::Transform)?;
        let s = state_from_py(state, sgd, self.is_schedule)?;
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

fn optimizer(rule: Rule, lr: &opt::LearningRate, repr: String) -> PyOptimizer {
    PyOptimizer {
        rule,
        is_schedule: lr.is_schedule(),
        repr,
    }
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
    Ok(optimizer(
        Rule::Adam(o),
        &lr,
        format!("Adam(learning_rate={lr:?}, b1={b1}, b2={b2}, eps={eps})"),
    ))
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
    Ok(optimizer(
        Rule::AdamW(o),
        &lr,
        format!("AdamW(learning_rate={lr:?}, weight_decay={weight_decay})"),
    ))
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
    Ok(optimizer(
        Rule::Sgd(o),
        &lr,
        format!("SGD(learning_rate={lr:?})"),
    ))
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
    #[pyo3(signature = (history=10, max_iterations=500, max_evaluations=None, tolerance_grad=1e-7, tolerance_change=1e-9, line_search="strong_wolfe"))]
    fn new(
        #[pyo3(from_py_with = crate::ints::param::history)] history: usize,
        #[pyo3(from_py_with = crate::ints::param::max_iterations)] max_iterations: usize,
        #[pyo3(from_py_with = crate::ints::param::opt_max_evaluations)] max_evaluations: Option<
            usize,
        >,
        tolerance_grad: f64,
        tolerance_change: f64,
        line_search: &str,
    ) -> PyResult<Self> {
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
#[pyclass(name = "Trainer", module = "quabla.optim")]
pub struct PyTrainer {
    t: Mutex<opt::Trainer<Value, Value, Loss>>,
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
        if let Some(p) = precision {
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
        let t = with_rule!(&optimizer.get().rule, o => {
            let o = o.clone();
            run(py, move || opt::Trainer::new(l, p, o, d).device(device).batch_argnums(&batch).build())
        })?;
        Ok(PyTrainer { t: Mutex::new(t) })
    }

    /// One optimizer step (with arguments, first replaces the `batch_argnums` data).
    #[pyo3(signature = (*batch))]
    fn step(&self, py: Python<'_>, batch: &Bound<'_, PyTuple>) -> PyResult<()> {
        let mut guard = self.t.lock().unwrap_or_else(|e| e.into_inner());
        let t = &mut *guard;
        if batch.is_empty() {
            run(py, || t.step())
        } else {
            let b = crate::transforms::args_value(batch, &[])?;
            run(py, || t.step_with(&b))
        }
    }

    /// The loss at the current parameters and latest data.
    fn loss<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let guard = self.t.lock().unwrap_or_else(|e| e.into_inner());
        let t = &*guard;
        let l = run(py, || t.loss())?;
        wrap(py, l)
    }

    /// The current parameters in the original structure.
    #[getter]
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let guard = self.t.lock().unwrap_or_else(|e| e.into_inner());
        let t = &*guard;
        let p = run(py, || t.params())?;
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
