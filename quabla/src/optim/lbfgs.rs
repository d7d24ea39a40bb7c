//! L-BFGS (numerics.md §8.6): a full-batch quasi-Newton minimizer run on the host over one
//! float64 vector that concatenates the parameter leaves in flatten order. The loss and its
//! gradient come from one jitted `value_and_grad`, traced once per signature, whose compiled
//! plan each evaluation runs on flat inputs (no tree built or looked up per evaluation);
//! float32 leaves are stored rounded to float32 and evaluated at float32. [`Lbfgs::minimize`]
//! traces per call, as a fresh closure must; [`Lbfgs::minimizer`] binds one objective and keeps
//! its plans between solves.
//!
//! The direction is the two-loop recursion over the newest `history` curvature pairs; the step
//! comes from a strong-Wolfe line search (bracketing, then zoom with safeguarded cubic
//! interpolation and a bisection fallback). The line-search details are our choice; the
//! stopping rules and their order are the spec's.

use super::float_leaves;
use crate::error::{Error, Result};
use crate::runtime::with_host_refs;
use crate::staging::Entry;
use crate::tensor::Tensor;
use crate::transforms::jit::Jit;
use crate::tree::{Tree, TreeDef};
use crate::DType;
use quabla_backend::HostTensor;
use quabla_ir::HostData;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

const C1: f64 = 1e-4;
const C2: f64 = 0.9;
const MAX_SEARCH_EVALUATIONS: usize = 25;
const CURVATURE_SKIP: f64 = 1e-10;

/// Why [`Lbfgs::minimize`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// `max(abs(g)) <= tolerance_grad`.
    GradientTolerance,
    /// `abs(f_k - f_k+1) <= tolerance_change * max(abs(f_k), abs(f_k+1))`.
    ChangeTolerance,
    MaxIterations,
    MaxEvaluations,
    /// Two consecutive line searches failed (normal for a float32 problem at its resolution).
    LineSearchFailed,
}

impl StopReason {
    /// The spec's name: `gradient_tolerance`, `change_tolerance`, `max_iterations`,
    /// `max_evaluations` or `line_search_failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::GradientTolerance => "gradient_tolerance",
            StopReason::ChangeTolerance => "change_tolerance",
            StopReason::MaxIterations => "max_iterations",
            StopReason::MaxEvaluations => "max_evaluations",
            StopReason::LineSearchFailed => "line_search_failed",
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What [`Lbfgs::minimize`] reports next to the solution.
#[derive(Clone, Debug, PartialEq)]
pub struct LbfgsInfo {
    /// Accepted steps.
    pub iterations: usize,
    /// Calls of `value_and_grad`.
    pub evaluations: usize,
    /// The loss at the solution.
    pub loss: f64,
    /// `max(abs(g))` at the solution (the infinity norm).
    pub grad_norm: f64,
    pub reason: StopReason,
    /// True for the two tolerance reasons.
    pub converged: bool,
}

/// The L-BFGS minimizer: `qb::optim::Lbfgs::new().history(10).max_iterations(500)`.
#[derive(Clone, Debug)]
pub struct Lbfgs {
    history: usize,
    max_iterations: usize,
    max_evaluations: Option<usize>,
    tolerance_grad: f64,
    tolerance_change: f64,
    line_search: String,
}

impl Default for Lbfgs {
    fn default() -> Lbfgs {
        Lbfgs::new()
    }
}

/// The layout of the parameter vector: each leaf's shape, dtype and length.
struct Layout {
    def: TreeDef,
    leaves: Vec<(Vec<usize>, DType, usize)>,
}

impl Layout {
    fn of<P: Tree>(params: &P) -> Result<(Layout, Vec<f64>)> {
        let (tensors, def) = float_leaves("LBFGS", params)?;
        let mut x = Vec::new();
        let mut leaves = Vec::with_capacity(tensors.len());
        for t in &tensors {
            x.extend(t.astype(DType::F64)?.to_vec::<f64>()?);
            leaves.push((t.shape().to_vec(), t.dtype(), t.size()));
        }
        Ok((Layout { def, leaves }, x))
    }

    /// Rounds the float32 positions of `x` to float32.
    fn round(&self, x: &mut [f64]) {
        let mut at = 0;
        for (_, dtype, n) in &self.leaves {
            if *dtype == DType::F32 {
                for v in &mut x[at..at + n] {
                    *v = *v as f32 as f64;
                }
            }
            at += n;
        }
    }

    /// The parameter leaves at `x`, appended to `out`.
    fn tensors(&self, x: &[f64], out: &mut Vec<Tensor>) -> Result<()> {
        let mut at = 0;
        for (shape, dtype, n) in &self.leaves {
            let part = &x[at..at + n];
            at += n;
            out.push(match dtype {
                DType::F32 => Tensor::from_vec(shape, part.iter().map(|&v| v as f32).collect())?,
                _ => Tensor::from_vec(shape, part.to_vec())?,
            });
        }
        Ok(())
    }

    fn tree<P: Tree>(&self, x: &[f64]) -> Result<P> {
        let mut tensors = Vec::with_capacity(self.leaves.len());
        self.tensors(x, &mut tensors)?;
        super::rebuild(&self.def, tensors)
    }

    /// Writes the parameter leaves at `x` into the first buffers of `host`, in place where
    /// a buffer is not shared.
    fn write(&self, x: &[f64], host: &mut [HostTensor]) {
        let mut at = 0;
        for ((_, _, n), buffer) in self.leaves.iter().zip(host) {
            let part = &x[at..at + n];
            at += n;
            match &mut buffer.data {
                HostData::F32(data) => match Arc::get_mut(data) {
                    Some(data) => {
                        for (d, &v) in data.iter_mut().zip(part) {
                            *d = v as f32;
                        }
                    }
                    None => *data = part.iter().map(|&v| v as f32).collect(),
                },
                HostData::F64(data) => match Arc::get_mut(data) {
                    Some(data) => data.copy_from_slice(part),
                    None => *data = Arc::from(part),
                },
                // `Layout::of` admits floating leaves only.
                HostData::Bool(_) | HostData::I32(_) | HostData::I64(_) => {}
            }
        }
    }

    /// The loss and the flat gradient from the outputs of the `value_and_grad` plan: the
    /// loss, then one gradient leaf per parameter leaf.
    fn loss_and_gradient(&self, outputs: &[HostTensor]) -> Result<(f64, Vec<f64>)> {
        let widened = |t: &HostTensor| match &t.data {
            HostData::F32(v) => Ok(v.iter().map(|&v| f64::from(v)).collect::<Vec<f64>>()),
            HostData::F64(v) => Ok(v.to_vec()),
            HostData::Bool(_) | HostData::I32(_) | HostData::I64(_) => Err(unexpected_outputs()),
        };
        let (Some(loss), grads) = (outputs.first(), &outputs[1.min(outputs.len())..]) else {
            return Err(unexpected_outputs());
        };
        let loss = match widened(loss)?.as_slice() {
            &[loss] => loss,
            _ => return Err(unexpected_outputs()),
        };
        if grads.len() != self.leaves.len() {
            return Err(unexpected_outputs());
        }
        let mut g = Vec::with_capacity(self.leaves.iter().map(|(_, _, n)| n).sum());
        for (grad, (_, _, n)) in grads.iter().zip(&self.leaves) {
            let part = widened(grad)?;
            if part.len() != *n {
                return Err(unexpected_outputs());
            }
            g.extend(part);
        }
        Ok((loss, g))
    }
}

fn unexpected_outputs() -> Error {
    Error::Internal {
        message: "the LBFGS value_and_grad plan returned outputs of another form".into(),
    }
}

/// The jitted `value_and_grad` of an objective, with respect to its parameters.
type ValueAndGrad<'f, P, A> = Jit<Staged<'f, P, A>, (P, A), (Tensor, P)>;
type Staged<'f, P, A> = Box<dyn Fn((P, A)) -> Result<(Tensor, P)> + 'f>;

fn value_and_grad_of<'f, P, A, F>(f: F) -> ValueAndGrad<'f, P, A>
where
    P: Tree + 'f,
    A: Tree + 'f,
    F: Fn(&P, &A) -> Result<Tensor> + 'f,
{
    let staged: Staged<'f, P, A> = Box::new(move |(p, a): (P, A)| {
        crate::value_and_grad(|(p, a): (P, A)| f(&p, &a)).call::<Tensor, (Tensor, P)>(&(p, a))
    });
    crate::jit(staged).name("LBFGS.minimize")
}

/// An [`Lbfgs`] configuration bound to one objective ([`Lbfgs::minimizer`]): every solve
/// reuses the plans compiled for the signatures seen before (as a jitted function does), so
/// only the first solve of a signature traces and compiles.
pub struct LbfgsMinimizer<'f, P, A> {
    config: Lbfgs,
    value_and_grad: ValueAndGrad<'f, P, A>,
}

impl<P: Tree, A: Tree + Clone> LbfgsMinimizer<'_, P, A> {
    /// Minimizes the bound objective from `params` with `args`: as [`Lbfgs::minimize`].
    pub fn minimize(&self, params: &P, args: &A) -> Result<(P, LbfgsInfo)> {
        self.config.validate()?;
        self.config.solve(&self.value_and_grad, params, args)
    }
}

impl<P, A> fmt::Debug for LbfgsMinimizer<'_, P, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LbfgsMinimizer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm2(a: &[f64]) -> f64 {
    dot(a, a).sqrt()
}

fn max_abs(a: &[f64]) -> f64 {
    a.iter().fold(
        0.0f64,
        |m, v| if v.is_nan() { f64::NAN } else { m.max(v.abs()) },
    )
}

/// One call of the loss and gradient at a parameter vector.
type Evaluate<'a> = dyn FnMut(&[f64]) -> Result<(f64, Vec<f64>)> + 'a;

/// A point of the line search: step, loss, gradient, directional derivative, parameters.
#[derive(Clone)]
struct Point {
    t: f64,
    f: f64,
    g: Vec<f64>,
    dphi: f64,
    x: Vec<f64>,
}

/// The minimizer of the cubic through `(a, fa, da)` and `(b, fb, db)`, if it exists.
fn cubic_min(a: f64, fa: f64, da: f64, b: f64, fb: f64, db: f64) -> Option<f64> {
    let d1 = da + db - 3.0 * (fa - fb) / (a - b);
    let disc = d1 * d1 - da * db;
    if disc.is_nan() || disc < 0.0 {
        return None;
    }
    let d2 = (b - a).signum() * disc.sqrt();
    let t = b - (b - a) * (db + d2 - d1) / (db - da + 2.0 * d2);
    t.is_finite().then_some(t)
}

impl Lbfgs {
    /// History 10, at most 500 iterations, `tolerance_grad` 1e-7, `tolerance_change` 1e-9.
    pub fn new() -> Lbfgs {
        Lbfgs {
            history: 10,
            max_iterations: 500,
            max_evaluations: None,
            tolerance_grad: 1e-7,
            tolerance_change: 1e-9,
            line_search: "strong_wolfe".into(),
        }
    }

    /// Curvature pairs kept (at least 1).
    pub fn history(mut self, n: usize) -> Self {
        self.history = n;
        self
    }

    /// Accepted steps at most (at least 1).
    pub fn max_iterations(mut self, n: usize) -> Self {
        self.max_iterations = n;
        self
    }

    /// Calls of `value_and_grad` after which no new iteration starts.
    pub fn max_evaluations(mut self, n: usize) -> Self {
        self.max_evaluations = Some(n);
        self
    }

    pub fn tolerance_grad(mut self, tol: f64) -> Self {
        self.tolerance_grad = tol;
        self
    }

    pub fn tolerance_change(mut self, tol: f64) -> Self {
        self.tolerance_change = tol;
        self
    }

    /// Only `"strong_wolfe"` (AR9 otherwise).
    pub fn line_search(mut self, name: &str) -> Self {
        self.line_search = name.to_string();
        self
    }

    /// Checks the configuration (AR4, AR9): what `minimize` checks first, for callers that
    /// want the error at construction (the Python constructor).
    pub fn validate(&self) -> Result<()> {
        if self.line_search != "strong_wolfe" {
            return Err(Error::invalid("line_search must be \"strong_wolfe\""));
        }
        if self.history == 0 {
            return Err(Error::invalid("LBFGS history must be at least 1"));
        }
        if self.max_iterations == 0 {
            return Err(Error::invalid("LBFGS max_iterations must be at least 1"));
        }
        if self.max_evaluations == Some(0) {
            return Err(Error::invalid("LBFGS max_evaluations must be at least 1"));
        }
        for (name, tol) in [
            ("tolerance_grad", self.tolerance_grad),
            ("tolerance_change", self.tolerance_change),
        ] {
            if !(tol.is_finite() && tol >= 0.0) {
                return Err(Error::invalid(format!(
                    "LBFGS {name} must be a finite non-negative number"
                )));
            }
        }
        Ok(())
    }

    /// Minimizes the scalar `f(params, args)` from `params`; returns the solution (each leaf in
    /// its dtype) and the [`LbfgsInfo`]. The loss and gradient are one jitted `value_and_grad`
    /// of `f` with respect to `params`, traced once per signature.
    ///
    /// ```
    /// use quabla as qb;
    /// use qb::prelude::*;
    /// let f = |p: &qb::Tensor, _: &()| (p - 3.0).powi(2).sum();
    /// let (x, info) = qb::optim::Lbfgs::new().minimize(f, &qb::array([0.0, 1.0])?, &())?;
    /// assert!(info.converged && (x.to_vec::<f64>()?[0] - 3.0).abs() < 1e-8);
    /// # Ok::<(), qb::Error>(())
    /// ```
    pub fn minimize<P, A, F>(&self, f: F, params: &P, args: &A) -> Result<(P, LbfgsInfo)>
    where
        P: Tree,
        A: Tree + Clone,
        F: Fn(&P, &A) -> Result<Tensor>,
    {
        self.validate()?;
        self.solve(&value_and_grad_of(f), params, args)
    }

    /// This configuration bound to the objective `f`, for several solves: the solves of one
    /// signature (the parameters' and arguments' structure, shapes and dtypes, and the values
    /// of their static leaves) share one traced and compiled `value_and_grad`, where each
    /// [`Lbfgs::minimize`] call traces its closure afresh. As in any jitted function, values
    /// the objective captures are read when it is traced, and a number that changes between
    /// solves should be passed as a tensor argument rather than a Rust `f64` (a static leaf:
    /// each value traces again, and the cache keeps [`crate::Jit::max_traces`] of them). The
    /// minimizer holds the objective as it is (a closure need not be `Send`), so it stays on
    /// the thread that made it.
    ///
    /// ```
    /// use quabla as qb;
    /// use qb::prelude::*;
    /// let f = |p: &qb::Tensor, target: &qb::Tensor| (p - target).powi(2).sum();
    /// let solver = qb::optim::Lbfgs::new().minimizer(f);
    /// for target in [1.0, 2.0] {
    ///     let (x, info) = solver.minimize(&qb::array([0.0, 0.0])?, &qb::array(target)?)?;
    ///     assert!(info.converged && (x.to_vec::<f64>()?[1] - target).abs() < 1e-8);
    /// }
    /// # Ok::<(), qb::Error>(())
    /// ```
    pub fn minimizer<'f, P, A, F>(&self, f: F) -> LbfgsMinimizer<'f, P, A>
    where
        P: Tree + 'f,
        A: Tree + Clone + 'f,
        F: Fn(&P, &A) -> Result<Tensor> + 'f,
    {
        LbfgsMinimizer {
            config: self.clone(),
            value_and_grad: value_and_grad_of(f),
        }
    }

    /// The minimization itself, evaluating through `value_and_grad`.
    fn solve<P, A>(
        &self,
        value_and_grad: &ValueAndGrad<'_, P, A>,
        params: &P,
        args: &A,
    ) -> Result<(P, LbfgsInfo)>
    where
        P: Tree,
        A: Tree + Clone,
    {
        if crate::trace::active() {
            return Err(Error::Tracer {
                kind: crate::error::TracerErrorKind::Concretization,
                message: "LBFGS runs on the host with concrete values and cannot be called \
                          inside a traced function; call minimize outside jit/grad/vmap"
                    .into(),
            });
        }
        let (layout, mut x) = Layout::of(params)?;
        layout.round(&mut x);
        // The plan for the parameters as every evaluation builds them (fresh tensors of their
        // dtypes), and the arguments' tensor leaves, its remaining inputs.
        let entry: Arc<Entry> = value_and_grad.compiled(&(layout.tree::<P>(&x)?, args.clone()))?;
        let (arg_leaves, _) = crate::tree::flatten(args);
        let arg_tensors: Vec<Tensor> = arg_leaves
            .iter()
            .filter_map(|l| l.as_tensor().cloned())
            .collect();
        // The plan's inputs as host buffers: the parameter leaves, rewritten in place at each
        // evaluation (no tensor is built per evaluation), then the arguments' leaves.
        let mut host = Vec::with_capacity(layout.leaves.len() + arg_tensors.len());
        let mut first = Vec::with_capacity(layout.leaves.len());
        layout.tensors(&x, &mut first)?;
        for t in first.iter().chain(&arg_tensors) {
            host.push(t.host()?.clone());
        }
        drop(first);
        let mut outputs = Vec::new();
        let evaluations = std::cell::Cell::new(0usize);
        let mut evaluate = |x: &[f64]| -> Result<(f64, Vec<f64>)> {
            evaluations.set(evaluations.get() + 1);
            // The last outputs go first: one may share an input's buffer.
            outputs.clear();
            layout.write(x, &mut host);
            // Every leaf of `(loss, gradients)` is a tensor, so the plan's outputs are the
            // result's leaves in order.
            if !entry.outputs_in_order() {
                return Err(unexpected_outputs());
            }
            with_host_refs(host.iter().map(Ok), |refs| {
                entry.runnable().run(refs, &mut outputs)
            })?;
            layout.loss_and_gradient(&outputs)
        };
        let (mut fx, mut g) = evaluate(&x)?;
        if !fx.is_finite() {
            return Err(Error::invalid(format!(
                "LBFGS: the loss at the initial parameters is {fx}; it must be finite"
            )));
        }
        let mut pairs: VecDeque<(Vec<f64>, Vec<f64>, f64)> = VecDeque::new();
        let mut iterations = 0usize;
        let mut failures = 0usize;
        let reason = loop {
            // Checked before the first iteration too.
            if max_abs(&g) <= self.tolerance_grad {
                break StopReason::GradientTolerance;
            }
            let mut d = self.direction(&g, &pairs);
            let mut dphi0 = dot(&g, &d);
            if dphi0.is_nan() || dphi0 >= 0.0 {
                pairs.clear();
                d = g.iter().map(|v| -v).collect();
                dphi0 = dot(&g, &d);
            }
            let t0 = if pairs.is_empty() {
                (1.0 / norm2(&g)).min(1.0)
            } else {
                1.0
            };
            let accepted = line_search(&mut evaluate, &layout, &x, fx, &d, dphi0, t0)?;
            let Some(next) = accepted else {
                failures += 1;
                pairs.clear();
                if failures >= 2 {
                    break StopReason::LineSearchFailed;
                }
                continue;
            };
            failures = 0;
            let s: Vec<f64> = next.x.iter().zip(&x).map(|(a, b)| a - b).collect();
            let y: Vec<f64> = next.g.iter().zip(&g).map(|(a, b)| a - b).collect();
            let sy = dot(&s, &y);
            if sy > CURVATURE_SKIP * norm2(&s) * norm2(&y) {
                pairs.push_back((s, y, 1.0 / sy));
                if pairs.len() > self.history {
                    pairs.pop_front();
                }
            }
            iterations += 1;
            let previous = fx;
            x = next.x;
            fx = next.f;
            g = next.g;
            if max_abs(&g) <= self.tolerance_grad {
                break StopReason::GradientTolerance;
            }
            if (previous - fx).abs() <= self.tolerance_change * previous.abs().max(fx.abs()) {
                break StopReason::ChangeTolerance;
            }
            if iterations >= self.max_iterations {
                break StopReason::MaxIterations;
            }
            if self.max_evaluations.is_some_and(|m| evaluations.get() >= m) {
                break StopReason::MaxEvaluations;
            }
        };
        let info = LbfgsInfo {
            iterations,
            evaluations: evaluations.get(),
            loss: fx,
            grad_norm: max_abs(&g),
            reason,
            converged: matches!(
                reason,
                StopReason::GradientTolerance | StopReason::ChangeTolerance
            ),
        };
        Ok((layout.tree(&x)?, info))
    }

    /// The two-loop recursion: `-H g` with `H0 = (s^T y / y^T y) I` from the newest pair.
    fn direction(&self, g: &[f64], pairs: &VecDeque<(Vec<f64>, Vec<f64>, f64)>) -> Vec<f64> {
        let mut q = g.to_vec();
        let Some((s_new, y_new, _)) = pairs.back() else {
            return q.iter().map(|v| -v).collect();
        };
        let mut alphas = Vec::with_capacity(pairs.len());
        for (s, y, rho) in pairs.iter().rev() {
            let a = rho * dot(s, &q);
            for (qi, yi) in q.iter_mut().zip(y) {
                *qi -= a * yi;
            }
            alphas.push(a);
        }
        let gamma = dot(s_new, y_new) / dot(y_new, y_new);
        for qi in &mut q {
            *qi *= gamma;
        }
        for ((s, y, rho), a) in pairs.iter().zip(alphas.iter().rev()) {
            let b = rho * dot(y, &q);
            for (qi, si) in q.iter_mut().zip(s) {
                *qi += si * (a - b);
            }
        }
        q.iter().map(|v| -v).collect()
    }
}

/// A strong-Wolfe line search along `d` from `x` (loss `f0`, slope `dphi0 < 0`), first trial
/// step `t0`, at most [`MAX_SEARCH_EVALUATIONS`] evaluations. `None` when it fails.
fn line_search(
    evaluate: &mut Evaluate<'_>,
    layout: &Layout,
    x: &[f64],
    f0: f64,
    d: &[f64],
    dphi0: f64,
    t0: f64,
) -> Result<Option<Point>> {
    let mut used = 0usize;
    let mut at = |t: f64, used: &mut usize| -> Result<Point> {
        *used += 1;
        let mut xt: Vec<f64> = x.iter().zip(d).map(|(xi, di)| xi + t * di).collect();
        layout.round(&mut xt);
        let (f, g) = evaluate(&xt)?;
        let dphi = dot(&g, d);
        Ok(Point {
            t,
            f,
            g,
            dphi,
            x: xt,
        })
    };
    let armijo = |p: &Point| p.f <= f0 + C1 * p.t * dphi0;
    let curvature = |p: &Point| p.dphi.abs() <= -C2 * dphi0;
    let mut prev = Point {
        t: 0.0,
        f: f0,
        g: Vec::new(),
        dphi: dphi0,
        x: x.to_vec(),
    };
    let mut t = t0;
    let mut first = true;
    // Bracketing.
    let (mut lo, mut hi) = loop {
        if used >= MAX_SEARCH_EVALUATIONS {
            return Ok(None);
        }
        let p = at(t, &mut used)?;
        if !p.f.is_finite() || !p.dphi.is_finite() {
            // A non-finite trial loss halves the step.
            t = prev.t + 0.5 * (t - prev.t);
            continue;
        }
        if !armijo(&p) || (!first && p.f >= prev.f) {
            break (prev, p);
        }
        if curvature(&p) {
            return Ok(Some(p));
        }
        if p.dphi >= 0.0 {
            break (p, prev);
        }
        // Extrapolate: the cubic's minimizer, kept within [1.1 t, 4 t].
        let next = cubic_min(prev.t, prev.f, prev.dphi, p.t, p.f, p.dphi)
            .filter(|&c| c > p.t)
            .unwrap_or(2.0 * p.t)
            .clamp(1.1 * p.t, 4.0 * p.t);
        first = false;
        prev = p;
        t = next;
    };
    // Zoom: `lo` satisfies the sufficient decrease with the lowest loss so far; the interval
    // between `lo` and `hi` contains a point of the strong Wolfe conditions.
    loop {
        if used >= MAX_SEARCH_EVALUATIONS {
            return Ok(None);
        }
        let (a, b) = (lo.t.min(hi.t), lo.t.max(hi.t));
        let width = b - a;
        if width.is_nan() || width <= f64::EPSILON * b.abs().max(f64::MIN_POSITIVE) {
            return Ok(None);
        }
        let t = match (
            hi.f.is_finite(),
            cubic_min(lo.t, lo.f, lo.dphi, hi.t, hi.f, hi.dphi),
        ) {
            (true, Some(c)) if c > a + 0.1 * width && c < b - 0.1 * width => c,
            _ => 0.5 * (a + b),
        };
        let p = at(t, &mut used)?;
        if !p.f.is_finite() || !p.dphi.is_finite() || !armijo(&p) || p.f >= lo.f {
            hi = p;
            continue;
        }
        if curvature(&p) {
            return Ok(Some(p));
        }
        if p.dphi * (hi.t - lo.t) >= 0.0 {
            hi = lo;
        }
        lo = p;
    }
}
