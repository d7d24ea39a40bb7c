//! `qb::ode` (api.md §18, numerics.md §7.5): [`odeint`] integrates `dy/dt = f(y, t, args)`.
//!
//! This module owns the public call object ([`Odeint`]), the method enum ([`Method`]), the
//! result record ([`OdeInfo`]), the argument validation of errors.md AR4/AR16 (all of it before
//! any step runs), and the choice between the two ways a solve runs:
//!
//! - fixed-step methods (`fixed`) are one `fori_loop` (one `scan` with `save`), which is a plain
//!   Rust loop eagerly and one region under a transform;
//! - adaptive methods (`adaptive`) run their step attempts as a Rust loop when nothing is traced
//!   (raising [`Error::OdeMaxSteps`] when `t1` is not reached), and as one bounded `fori_loop`
//!   of `max_steps` attempts over a flat packed state when a trace is active, which never
//!   raises and reports through [`OdeInfo::success`]. Both ways call the same attempt function,
//!   so they give the same bits.
//!
//! The schemes live in `dopri5` and `rosenbrock`; `rhs` calls the user's `f` with the shape and
//! dtype checks. Decisions the spec leaves open are written down in `docs/ode.md`.
//!
//! Everything is written against the facade's public API (tensors, control-flow regions,
//! `jacobian`, `linalg::solve`, `stop_gradient`), so every transform composes with it the way it
//! composes with those.

mod adaptive;
mod dopri5;
mod fixed;
mod rhs;
mod rosenbrock;

use crate::{DType, Error, Operand, Result, Tensor, TracerErrorKind};
use rhs::Rhs;
use std::fmt;
use std::str::FromStr;

/// An integration method (api.md §18).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Method {
    /// The classical four-stage Runge-Kutta method (fixed step; needs `steps`).
    #[default]
    Rk4,
    /// Heun's second-order method (fixed step; needs `steps`).
    Heun,
    /// Explicit Euler (fixed step; needs `steps`).
    Euler,
    /// Dormand-Prince 5(4), adaptive, with Shampine's dense output.
    Dopri5,
    /// The L-stable Rosenbrock 2(3) scheme of MATLAB's `ode23s`, adaptive, for stiff problems.
    Rosenbrock23,
}

impl Method {
    /// The spec's name: `"rk4"`, `"heun"`, `"euler"`, `"dopri5"`, `"rosenbrock23"`.
    pub fn name(self) -> &'static str {
        match self {
            Method::Rk4 => "rk4",
            Method::Heun => "heun",
            Method::Euler => "euler",
            Method::Dopri5 => "dopri5",
            Method::Rosenbrock23 => "rosenbrock23",
        }
    }

    /// Whether the method chooses its own steps (`dopri5`, `rosenbrock23`).
    pub fn is_adaptive(self) -> bool {
        matches!(self, Method::Dopri5 | Method::Rosenbrock23)
    }

    const ALL: [Method; 5] = [
        Method::Rk4,
        Method::Heun,
        Method::Euler,
        Method::Dopri5,
        Method::Rosenbrock23,
    ];
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses the spec's method names (AR16 `unknown method` otherwise).
impl FromStr for Method {
    type Err = Error;
    fn from_str(s: &str) -> Result<Method> {
        Method::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                invalid(format!(
                    "odeint: unknown method '{s}'; expected one of 'rk4', 'heun', 'euler', 'dopri5', 'rosenbrock23'"
                ))
            })
    }
}

/// What a solve reports with [`Odeint::eval_with_info`] (api.md §18): the time reached, the
/// numbers of accepted and rejected steps (float tensors) and whether `t1` was reached (a bool
/// tensor). It is a pytree, so it can be returned from `jit` and `vmap` (one entry per example).
/// Fixed-step solves report `t = t1`, `accepted_steps = steps`, `rejected_steps = 0` and
/// `success = true`.
#[derive(Clone, Debug, crate::Tree)]
pub struct OdeInfo {
    /// The time reached (`t1` on success), a rank-0 tensor of the state's dtype.
    pub t: Tensor,
    /// The number of accepted steps, as a float tensor.
    pub accepted_steps: Tensor,
    /// The number of rejected step attempts, as a float tensor.
    pub rejected_steps: Tensor,
    /// Whether `t1` was reached, a rank-0 bool tensor (always true eagerly, where a failure
    /// raises).
    pub success: Tensor,
}

/// `odeint(f, y0, (t0, t1))`: integrates `dy/dt = f(y, t, args)` from `y0` at `t0` to `t1`.
///
/// `f` receives the state (an array of `y0`'s shape and dtype), the time (a rank-0 array of
/// `y0`'s dtype) and the arrays given with [`Odeint::args`], and returns `dy/dt` with `y0`'s
/// shape and dtype. `t0` and `t1` are numbers or rank-0 floating tensors. Under a transform,
/// traced values must reach `f` through `args`: `f` may close over eager tensors but not over
/// tracers of the enclosing function.
///
/// ```
/// use quabla as qb;
/// use qb::ode::{odeint, Method};
/// use qb::prelude::*;
/// # fn main() -> qb::Result<()> {
/// let decay = |y: &qb::Tensor, _t: &qb::Tensor, a: &[qb::Tensor]| (y * &a[0]).neg();
/// let y0 = qb::array([1.0, 2.0])?;
/// let k = qb::array(0.5)?;
/// let y = odeint(decay, &y0, (0.0, 2.0)).steps(50).args(&[&k]).eval()?;
/// assert!((y.to_vec::<f64>()?[0] - (-1f64).exp()).abs() < 1e-8);
/// let (y, info) = odeint(decay, &y0, (0.0, 2.0))
///     .method(Method::Dopri5)
///     .args(&[&k])
///     .eval_with_info()?;
/// assert!((y.to_vec::<f64>()?[1] - 2.0 * (-1f64).exp()).abs() < 1e-6);
/// assert!(info.success.item_bool()?);
/// # Ok(())
/// # }
/// ```
pub fn odeint<F, A, B>(f: F, y0: &Tensor, t_span: (A, B)) -> Odeint<F>
where
    F: Fn(&Tensor, &Tensor, &[Tensor]) -> Result<Tensor>,
    A: Into<Operand>,
    B: Into<Operand>,
{
    Odeint {
        f,
        y0: y0.clone(),
        t0: time_operand(t_span.0.into()),
        t1: time_operand(t_span.1.into()),
        steps: None,
        method: Method::default(),
        args: Vec::new(),
        save: false,
        saveat: None,
        rtol: 1e-6,
        atol: 1e-9,
        max_steps: 512,
    }
}

/// An `odeint` call being configured; finish it with [`Odeint::eval`] or
/// [`Odeint::eval_with_info`].
#[must_use = "finish the call with .eval() or .eval_with_info()"]
pub struct Odeint<F> {
    f: F,
    y0: Tensor,
    t0: Result<Tensor>,
    t1: Result<Tensor>,
    steps: Option<usize>,
    method: Method,
    args: Vec<Tensor>,
    save: bool,
    saveat: Option<Tensor>,
    rtol: f64,
    atol: f64,
    max_steps: usize,
}

impl<F> fmt::Debug for Odeint<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "odeint(method={}, steps={:?})", self.method, self.steps)
    }
}

impl<F> Odeint<F>
where
    F: Fn(&Tensor, &Tensor, &[Tensor]) -> Result<Tensor>,
{
    /// The number of steps of a fixed-step method (required there; refused with an adaptive
    /// one).
    pub fn steps(mut self, steps: usize) -> Self {
        self.steps = Some(steps);
        self
    }

    /// The method (default [`Method::Rk4`]).
    pub fn method(mut self, method: Method) -> Self {
        self.method = method;
        self
    }

    /// The arrays `f` receives as its third argument; traced values must come this way, and
    /// derivatives flow to each of them.
    pub fn args<O: AsRef<Tensor>>(mut self, args: &[O]) -> Self {
        self.args = args.iter().map(|a| a.as_ref().clone()).collect();
        self
    }

    /// Return the `steps + 1` states `[steps + 1, *y0.shape]` of a fixed-step solve instead of
    /// the final state.
    pub fn save(mut self, save: bool) -> Self {
        self.save = save;
        self
    }

    /// Return the states at the 1-D times `ts` (`[len(ts), *y0.shape]`), read from each
    /// method's continuous extension; `ts` is ordered from `t0` to `t1`.
    pub fn saveat(mut self, ts: &Tensor) -> Self {
        self.saveat = Some(ts.clone());
        self
    }

    /// Relative tolerance of an adaptive method (default `1e-6`).
    pub fn rtol(mut self, rtol: f64) -> Self {
        self.rtol = rtol;
        self
    }

    /// Absolute tolerance of an adaptive method (default `1e-9`; `0` gives pure relative
    /// control, see `docs/ode.md`).
    pub fn atol(mut self, atol: f64) -> Self {
        self.atol = atol;
        self
    }

    /// The number of step attempts (accepted plus rejected) of an adaptive method (default
    /// 512); under a transform it is the trip count of the solve's loop.
    pub fn max_steps(mut self, max_steps: usize) -> Self {
        self.max_steps = max_steps;
        self
    }

    /// Runs the solve and returns the final state, the saved states (`save`) or the states at
    /// the save times (`saveat`).
    pub fn eval(self) -> Result<Tensor> {
        Ok(self.run()?.0)
    }

    /// Runs the solve and returns the value of [`Odeint::eval`] with an [`OdeInfo`].
    pub fn eval_with_info(self) -> Result<(Tensor, OdeInfo)> {
        self.run()
    }

    fn run(self) -> Result<(Tensor, OdeInfo)> {
        let problem = self.validate()?;
        let out = if self.method.is_adaptive() {
            adaptive::solve(
                &problem,
                self.method,
                &adaptive::Tolerances {
                    rtol: self.rtol,
                    atol: self.atol,
                },
                self.max_steps,
            )
        } else {
            let steps = self
                .steps
                .expect("validated: fixed-step methods have steps");
            fixed::solve(&problem, self.method, steps, self.save)
        };
        let (y, info) = out.map_err(name_args)?;
        Ok((y, info))
    }

    /// Every check of errors.md AR4/AR16 and of the contract of `f`, before any step runs.
    fn validate(&self) -> Result<Problem<'_>> {
        let method = self.method;
        let y0 = &self.y0;
        let dtype = y0.dtype();
        if !dtype.is_float() {
            return Err(Error::Type {
                message: format!(
                    "odeint: y0 must be a floating array, got {}; convert it with astype(quabla.float64)",
                    dtype.name()
                ),
            });
        }
        match (method.is_adaptive(), self.steps) {
            (false, None) => {
                return Err(invalid(format!("odeint: method '{method}' requires steps")))
            }
            (true, Some(_)) => {
                return Err(invalid(format!(
                    "odeint: method '{method}' chooses its own steps; steps applies only to the fixed-step methods 'rk4', 'heun' and 'euler' (set rtol, atol and max_steps instead)"
                )))
            }
            (false, Some(0)) => return Err(invalid("steps must be a finite positive number")),
            _ => {}
        }
        if self.save && self.saveat.is_some() {
            return Err(invalid("odeint: saveat cannot be combined with save=True"));
        }
        if self.save && method.is_adaptive() {
            return Err(invalid("odeint: save=True requires a fixed-step method"));
        }
        if !(self.rtol.is_finite() && self.rtol > 0.0) {
            return Err(invalid("rtol must be a finite positive number"));
        }
        // Pure relative control (atol = 0) is allowed (docs/ode.md).
        if !(self.atol.is_finite() && self.atol >= 0.0) {
            return Err(invalid("atol must be a finite non-negative number"));
        }
        if self.max_steps == 0 {
            return Err(invalid("max_steps must be a finite positive number"));
        }
        let t0 = time("t0", &self.t0, dtype)?;
        let t1 = time("t1", &self.t1, dtype)?;
        let saveat = match &self.saveat {
            None => None,
            Some(ts) => Some(check_saveat(ts, &t0, &t1, dtype)?),
        };
        let rhs = Rhs::new(&self.f, y0.shape(), dtype);
        let y0_flat = rhs.flat(y0)?;
        // One evaluation of f checks its contract; the solvers reuse the value as f(y0, t0).
        let f0 = rhs.eval(&y0_flat, &t0, &self.args)?;
        Ok(Problem {
            rhs,
            y0: y0_flat,
            t0,
            t1,
            args: self.args.clone(),
            saveat,
            f0,
        })
    }
}

/// A validated problem: the state flattened to `[n]`, the times as rank-0 tensors of its dtype.
pub(crate) struct Problem<'a> {
    rhs: Rhs<'a>,
    y0: Tensor,
    t0: Tensor,
    t1: Tensor,
    args: Vec<Tensor>,
    saveat: Option<Tensor>,
    /// `f(y0, t0)`.
    f0: Tensor,
}

fn invalid(message: impl Into<String>) -> Error {
    Error::InvalidArgument {
        message: message.into(),
    }
}

fn time_operand(op: Operand) -> Result<Tensor> {
    match op {
        Operand::Tensor(t) => Ok(t),
        Operand::Scalar(v) => crate::array(v),
        Operand::Int(v) => crate::array(v as f64),
        Operand::Error(e) => Err(e),
    }
}

/// `t0` or `t1` as a rank-0 tensor of the state's dtype; finite when concrete.
fn time(name: &str, t: &Result<Tensor>, dtype: DType) -> Result<Tensor> {
    let t = match t {
        Ok(t) => t,
        Err(e) => {
            return Err(invalid(format!(
                "odeint: {name} could not be computed: {e}"
            )))
        }
    };
    if t.size() != 1 || t.ndim() != 0 || !t.dtype().is_float() {
        return Err(invalid(format!(
            "odeint: {name} must be a number or a rank-0 floating array, got {}{:?}",
            t.dtype().name(),
            t.shape()
        )));
    }
    if !t.is_traced() && !t.item()?.is_finite() {
        return Err(invalid(format!(
            "odeint: {name} must be finite, got {}",
            t.item()?
        )));
    }
    if t.dtype() == dtype {
        Ok(t.clone())
    } else {
        t.astype(dtype)
    }
}

/// AR16's last rule: 1-D, ordered from `t0` to `t1`, within the span. Shape and dtype are
/// checked always; order and span whenever the values involved are concrete.
fn check_saveat(ts: &Tensor, t0: &Tensor, t1: &Tensor, dtype: DType) -> Result<Tensor> {
    let bad = || invalid("odeint: saveat must be 1-D and ordered from t0 to t1 within the span");
    if ts.ndim() != 1 || !ts.dtype().is_float() {
        return Err(bad());
    }
    let ts = if ts.dtype() == dtype {
        ts.clone()
    } else {
        ts.astype(dtype)?
    };
    if ts.is_traced() {
        return Ok(ts);
    }
    let values = ts.to_vec::<f64>()?;
    if values.iter().any(|v| !v.is_finite()) {
        return Err(bad());
    }
    let span = match (t0.is_traced(), t1.is_traced()) {
        (false, false) => Some((t0.item()?, t1.item()?)),
        _ => None,
    };
    // Without concrete bounds the direction is that of the times themselves.
    let dir = match span {
        Some((a, b)) => {
            if b >= a {
                1.0
            } else {
                -1.0
            }
        }
        None => {
            if values.last() >= values.first() {
                1.0
            } else {
                -1.0
            }
        }
    };
    if values.windows(2).any(|w| dir * (w[1] - w[0]) < 0.0) {
        return Err(bad());
    }
    if let Some((a, b)) = span {
        if values
            .iter()
            .any(|&s| dir * (s - a) < 0.0 || dir * (b - s) < 0.0)
        {
            return Err(bad());
        }
    }
    Ok(ts)
}

/// A body of the solve's loop read a tracer of the enclosing function: TR3, said in terms of
/// `odeint`, whose regions the user never wrote.
fn name_args(e: Error) -> Error {
    match e {
        Error::Tracer {
            kind: TracerErrorKind::RegionCapture,
            ..
        } => Error::Tracer {
            kind: TracerErrorKind::RegionCapture,
            message: "odeint: f closes over a traced value of the enclosing function; pass it through args, odeint(f, &y0, (t0, t1)).args(&[..]), and read it from f's third argument (control-flow regions cannot close over an outer tracer)".into(),
        },
        other => other,
    }
}

/// `where(mask, a, b)` with float results: the selection every masked update uses.
fn select(mask: &Tensor, a: impl Into<Operand>, b: impl Into<Operand>) -> Result<Tensor> {
    crate::where_(mask, a, b)
}

/// A rank-0 constant of `dtype`.
fn scalar(value: f64, dtype: DType) -> Result<Tensor> {
    crate::array(value)?.astype(dtype)
}

/// Root mean square of all elements.
fn rms(x: &Tensor) -> Result<Tensor> {
    x.square()?.mean()?.sqrt()
}

/// `x / scale`, elementwise. A zero scale is possible only with `atol = 0` (pure relative
/// control, on a zero component): a zero `x` then counts as zero, and a nonzero one as
/// `degenerate` (infinity in the error test, which rejects the step; zero in the initial-step
/// heuristic, which then sizes the first step from the other components).
fn scaled(x: &Tensor, scale: &Tensor, atol: f64, degenerate: f64) -> Result<Tensor> {
    if atol > 0.0 {
        return x / scale;
    }
    let positive = scale.greater(0.0)?;
    let ratio = x / select(&positive, scale, 1.0)?;
    let degenerate = select(&x.equal(0.0)?, 0.0, degenerate)?;
    select(&positive, ratio, degenerate)
}
