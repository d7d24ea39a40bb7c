//! Learning-rate schedules (numerics.md §8.4): functions of the number of updates completed so
//! far.
//!
//! A schedule has two forms, which give the same bits. On the host, [`Schedule::value`] of a
//! step number; and in tensors, [`Schedule::value_at`] of the step as a float64 rank-0 tensor,
//! concrete or traced, which is how the rate enters a jitted `update` or the `Trainer`'s plan
//! without a retrace or an upload per step. The built-in schedules write each formula once,
//! generic over [`Arith`], the arithmetic of both forms (host `f64` through the IR's scalar
//! functions, which are the CPU kernels' values, and tensor operations). A schedule given as a
//! Rust closure of a `u64` step is host-only: inside a trace it is an error, and a `Trainer`
//! uploads its value each step. [`LearningRate::traced`] takes a closure over the step tensor
//! instead (as optax's schedules are written).
//!
//! Every built-in schedule validates its configuration (AR8) through [`Schedule::validate`],
//! which the optimizers call when they are first used (the Python constructors call it at
//! construction); a rate that comes out negative or non-finite is AR7 at the step that produced
//! it, whenever the step is a host number ([`LearningRate::at`]).

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use quabla_ir::eval::{binary_f64, unary_f64};
use quabla_ir::{BinaryOp, UnaryOp};
use std::fmt;
use std::sync::Arc;

/// A learning-rate schedule: the rate after `step` completed updates.
///
/// Any `Fn(u64) -> f64 + Send + Sync` is a (host-only) schedule; the built-in ones are
/// [`constant`], [`exponential_decay`], [`cosine_decay`], [`warmup_cosine_decay`] and
/// [`piecewise_constant`].
pub trait Schedule: Send + Sync {
    /// The rate at `step` (AR8 for an invalid configuration).
    fn value(&self, step: u64) -> Result<f64>;

    /// AR8 for an invalid configuration; closures have none to check.
    fn validate(&self) -> Result<()> {
        Ok(())
    }

    /// The rate at `step`, a float64 rank-0 tensor (concrete or traced), as a float64 rank-0
    /// tensor with the bits of [`Schedule::value`]; `None` for a schedule that runs on the host
    /// only.
    fn value_at(&self, step: &Tensor) -> Option<Result<Tensor>> {
        let _ = step;
        None
    }

    /// Whether [`Schedule::value`] costs a few floating-point operations (the built-in
    /// schedules), so a `Trainer` whose plan computes the rate can afford to check it on the
    /// host before every step. A schedule that runs user code or tensor operations says no.
    fn cheap_on_host(&self) -> bool {
        false
    }
}

impl<F: Fn(u64) -> f64 + Send + Sync> Schedule for F {
    fn value(&self, step: u64) -> Result<f64> {
        Ok(self(step))
    }
}

/// The arithmetic a built-in schedule's formula is written in: host `f64` or tensors.
trait Arith: Sized {
    fn num(v: f64) -> Self;
    fn add(&self, o: &Self) -> Result<Self>;
    fn sub(&self, o: &Self) -> Result<Self>;
    fn mul(&self, o: &Self) -> Result<Self>;
    fn div(&self, o: &Self) -> Result<Self>;
    fn pow(&self, o: &Self) -> Result<Self>;
    fn cos(&self) -> Result<Self>;
    fn floor(&self) -> Result<Self>;
    /// IEEE maximum and minimum as `qb::maximum`/`qb::minimum` define them.
    fn maximum(&self, o: &Self) -> Result<Self>;
    fn minimum(&self, o: &Self) -> Result<Self>;
    /// `where(self <= o, yes, no)`.
    fn if_le(&self, o: &Self, yes: &Self, no: &Self) -> Result<Self>;
    /// `where(self < o, yes, no)`.
    fn if_lt(&self, o: &Self, yes: &Self, no: &Self) -> Result<Self>;
}

/// Host arithmetic: IEEE operations and the IR's scalar functions (`quabla_ir::eval`), whose
/// values the CPU kernels reproduce bit for bit.
impl Arith for f64 {
    fn num(v: f64) -> f64 {
        v
    }
    fn add(&self, o: &f64) -> Result<f64> {
        Ok(self + o)
    }
    fn sub(&self, o: &f64) -> Result<f64> {
        Ok(self - o)
    }
    fn mul(&self, o: &f64) -> Result<f64> {
        Ok(self * o)
    }
    fn div(&self, o: &f64) -> Result<f64> {
        Ok(self / o)
    }
    fn pow(&self, o: &f64) -> Result<f64> {
        Ok(binary_f64(BinaryOp::Pow, *self, *o))
    }
    fn cos(&self) -> Result<f64> {
        Ok(unary_f64(UnaryOp::Cos, *self))
    }
    fn floor(&self) -> Result<f64> {
        Ok(unary_f64(UnaryOp::Floor, *self))
    }
    fn maximum(&self, o: &f64) -> Result<f64> {
        Ok(if self.is_nan() || self > o { *self } else { *o })
    }
    fn minimum(&self, o: &f64) -> Result<f64> {
        Ok(if self.is_nan() || self < o { *self } else { *o })
    }
    fn if_le(&self, o: &f64, yes: &f64, no: &f64) -> Result<f64> {
        Ok(if self <= o { *yes } else { *no })
    }
    fn if_lt(&self, o: &f64, yes: &f64, no: &f64) -> Result<f64> {
        Ok(if self < o { *yes } else { *no })
    }
}

/// Tensor arithmetic: the same operations recorded (or run eagerly) as IR nodes.
impl Arith for Tensor {
    fn num(v: f64) -> Tensor {
        Tensor::scalar_f64(v)
    }
    fn add(&self, o: &Tensor) -> Result<Tensor> {
        crate::add(self, o)
    }
    fn sub(&self, o: &Tensor) -> Result<Tensor> {
        crate::sub(self, o)
    }
    fn mul(&self, o: &Tensor) -> Result<Tensor> {
        crate::mul(self, o)
    }
    fn div(&self, o: &Tensor) -> Result<Tensor> {
        crate::div(self, o)
    }
    fn pow(&self, o: &Tensor) -> Result<Tensor> {
        crate::pow(self, o)
    }
    fn cos(&self) -> Result<Tensor> {
        crate::cos(self)
    }
    fn floor(&self) -> Result<Tensor> {
        crate::floor(self)
    }
    fn maximum(&self, o: &Tensor) -> Result<Tensor> {
        crate::maximum(self, o)
    }
    fn minimum(&self, o: &Tensor) -> Result<Tensor> {
        crate::minimum(self, o)
    }
    fn if_le(&self, o: &Tensor, yes: &Tensor, no: &Tensor) -> Result<Tensor> {
        crate::where_(crate::less_equal(self, o)?, yes, no)
    }
    fn if_lt(&self, o: &Tensor, yes: &Tensor, no: &Tensor) -> Result<Tensor> {
        crate::where_(crate::less(self, o)?, yes, no)
    }
}

/// The host step number as a formula's step (exact below 2^53).
fn host_step(step: u64) -> f64 {
    step as f64
}

/// AR8.
fn invalid(schedule: &str, detail: impl fmt::Display) -> Error {
    Error::invalid(format!("invalid {schedule} configuration: {detail}"))
}

fn finite(schedule: &str, name: &str, v: f64) -> Result<()> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(invalid(
            schedule,
            format_args!("{name} must be finite, got {v}"),
        ))
    }
}

/// A schedule that always returns `value`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Constant {
    value: f64,
}

/// A schedule returning `value` at every step.
pub fn constant(value: f64) -> Constant {
    Constant { value }
}

impl Constant {
    fn formula<A: Arith>(&self, _step: &A) -> Result<A> {
        Ok(A::num(self.value))
    }

    /// AR8 for an invalid configuration.
    fn check(&self) -> Result<()> {
        finite("constant", "value", self.value)
    }
}

/// `init * rate^((step - begin) / transition_steps)`, see [`exponential_decay`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExponentialDecay {
    init: f64,
    transition_steps: u64,
    rate: f64,
    begin: u64,
    staircase: bool,
    end: Option<f64>,
}

/// Exponential decay: `init` until `transition_begin`, then `init * decay_rate^e` with
/// `e = (step - transition_begin) / transition_steps` (floored with `staircase`); `end_value`
/// is a lower bound when `decay_rate < 1` and an upper bound otherwise.
pub fn exponential_decay(
    init_value: f64,
    transition_steps: u64,
    decay_rate: f64,
) -> ExponentialDecay {
    ExponentialDecay {
        init: init_value,
        transition_steps,
        rate: decay_rate,
        begin: 0,
        staircase: false,
        end: None,
    }
}

impl ExponentialDecay {
    /// The step at which the decay starts (default 0).
    pub fn transition_begin(mut self, begin: u64) -> Self {
        self.begin = begin;
        self
    }
    /// Decay in whole transitions only.
    pub fn staircase(mut self, staircase: bool) -> Self {
        self.staircase = staircase;
        self
    }
    /// The bound the rate never passes.
    pub fn end_value(mut self, end: f64) -> Self {
        self.end = Some(end);
        self
    }
}

impl ExponentialDecay {
    /// `c = step - begin`; `init` where `c <= 0`, else `init * rate^e` with `e = c / T`
    /// (floored with `staircase`), bounded by `end`.
    fn formula<A: Arith>(&self, step: &A) -> Result<A> {
        let c = step.sub(&A::num(self.begin as f64))?;
        let mut e = c.div(&A::num(self.transition_steps as f64))?;
        if self.staircase {
            e = e.floor()?;
        }
        let mut v = A::num(self.init).mul(&A::num(self.rate).pow(&e)?)?;
        if let Some(end) = self.end {
            v = if self.rate < 1.0 {
                v.maximum(&A::num(end))?
            } else {
                v.minimum(&A::num(end))?
            };
        }
        c.if_le(&A::num(0.0), &A::num(self.init), &v)
    }

    /// AR8 for an invalid configuration.
    fn check(&self) -> Result<()> {
        let name = "exponential_decay";
        finite(name, "init_value", self.init)?;
        finite(name, "decay_rate", self.rate)?;
        if let Some(end) = self.end {
            finite(name, "end_value", end)?;
        }
        if self.transition_steps == 0 {
            return Err(invalid(name, "transition_steps must be > 0, got 0"));
        }
        if self.rate <= 0.0 {
            return Err(invalid(
                name,
                format_args!("decay_rate must be > 0, got {}", self.rate),
            ));
        }
        Ok(())
    }
}

/// Cosine decay from `init` to `alpha * init` over `decay_steps`, see [`cosine_decay`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CosineDecay {
    init: f64,
    decay_steps: u64,
    alpha: f64,
}

/// Cosine decay: `init * ((1 - alpha) * 0.5 * (1 + cos(pi c / D)) + alpha)` with
/// `c = min(step, D)`.
pub fn cosine_decay(init_value: f64, decay_steps: u64) -> CosineDecay {
    CosineDecay {
        init: init_value,
        decay_steps,
        alpha: 0.0,
    }
}

impl CosineDecay {
    /// The final rate as a fraction of `init_value` (default 0).
    pub fn alpha(mut self, alpha: f64) -> Self {
        self.alpha = alpha;
        self
    }
}

impl CosineDecay {
    /// `c = min(step, D)`; `init * ((1 - alpha) * 0.5 * (1 + cos(pi c / D)) + alpha)`.
    fn formula<A: Arith>(&self, step: &A) -> Result<A> {
        let d = A::num(self.decay_steps as f64);
        let c = step.minimum(&d)?;
        let angle = A::num(std::f64::consts::PI).mul(&c)?.div(&d)?;
        let cosine = A::num(0.5).mul(&A::num(1.0).add(&angle.cos()?)?)?;
        let alpha = A::num(self.alpha);
        let scale = A::num(1.0 - self.alpha).mul(&cosine)?.add(&alpha)?;
        A::num(self.init).mul(&scale)
    }

    /// AR8 for an invalid configuration.
    fn check(&self) -> Result<()> {
        let name = "cosine_decay";
        finite(name, "init_value", self.init)?;
        finite(name, "alpha", self.alpha)?;
        if self.decay_steps == 0 {
            return Err(invalid(name, "decay_steps must be > 0, got 0"));
        }
        Ok(())
    }
}

/// Linear warmup then cosine decay, see [`warmup_cosine_decay`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WarmupCosineDecay {
    init: f64,
    peak: f64,
    warmup_steps: u64,
    decay_steps: u64,
    end: f64,
}

/// Linear warmup from `init_value` to `peak_value` over `warmup_steps`, then cosine decay to
/// `end_value` (default 0) at `decay_steps`, which includes the warmup.
pub fn warmup_cosine_decay(
    init_value: f64,
    peak_value: f64,
    warmup_steps: u64,
    decay_steps: u64,
) -> WarmupCosineDecay {
    WarmupCosineDecay {
        init: init_value,
        peak: peak_value,
        warmup_steps,
        decay_steps,
        end: 0.0,
    }
}

impl WarmupCosineDecay {
    /// The rate from `decay_steps` on (default 0).
    pub fn end_value(mut self, end: f64) -> Self {
        self.end = end;
        self
    }
}

impl WarmupCosineDecay {
    /// `init + (peak - init) step / W` before `W`; `end` from `D` on; in between
    /// `end + (peak - end) * 0.5 * (1 + cos(pi (step - W) / (D - W)))`. Every branch is
    /// computed and one selected (a branch that divides by zero is never the selected one).
    fn formula<A: Arith>(&self, step: &A) -> Result<A> {
        let (w, d) = (
            A::num(self.warmup_steps as f64),
            A::num(self.decay_steps as f64),
        );
        let (init, peak, end) = (A::num(self.init), A::num(self.peak), A::num(self.end));
        let warm = init.add(&A::num(self.peak - self.init).mul(step)?.div(&w)?)?;
        let span = A::num((self.decay_steps - self.warmup_steps) as f64);
        let phase = A::num(std::f64::consts::PI)
            .mul(&step.sub(&w)?)?
            .div(&span)?;
        let wave = A::num(0.5).mul(&A::num(1.0).add(&phase.cos()?)?)?;
        let decay = end.add(&peak.sub(&end)?.mul(&wave)?)?;
        let after = step.if_lt(&d, &decay, &end)?;
        step.if_lt(&w, &warm, &after)
    }

    /// AR8 for an invalid configuration.
    fn check(&self) -> Result<()> {
        let name = "warmup_cosine_decay";
        finite(name, "init_value", self.init)?;
        finite(name, "peak_value", self.peak)?;
        finite(name, "end_value", self.end)?;
        if self.decay_steps == 0 {
            return Err(invalid(name, "decay_steps must be > 0, got 0"));
        }
        if self.warmup_steps > self.decay_steps {
            return Err(invalid(
                name,
                format_args!(
                    "warmup_steps must lie in [0, decay_steps], got {} > {}",
                    self.warmup_steps, self.decay_steps
                ),
            ));
        }
        Ok(())
    }
}

/// `values[i]` where `i` counts the boundaries `<= step`, see [`piecewise_constant`].
#[derive(Clone, Debug, PartialEq)]
pub struct PiecewiseConstant {
    boundaries: Vec<u64>,
    values: Vec<f64>,
}

/// `values[i]` from step `boundaries[i-1]` on (`values[0]` before the first boundary);
/// `values.len() == boundaries.len() + 1`, boundaries strictly increasing.
pub fn piecewise_constant(boundaries: &[u64], values: &[f64]) -> PiecewiseConstant {
    PiecewiseConstant {
        boundaries: boundaries.to_vec(),
        values: values.to_vec(),
    }
}

impl PiecewiseConstant {
    /// `values[i]` where `i` counts the boundaries `<= step`.
    fn formula<A: Arith>(&self, step: &A) -> Result<A> {
        let mut rate = A::num(self.values[0]);
        for (&b, &v) in self.boundaries.iter().zip(&self.values[1..]) {
            // From boundary `b` on (b <= step), the value after it.
            rate = A::num(b as f64).if_le(step, &A::num(v), &rate)?;
        }
        Ok(rate)
    }

    /// AR8 for an invalid configuration.
    fn check(&self) -> Result<()> {
        let name = "piecewise_constant";
        if self.values.len() != self.boundaries.len() + 1 {
            return Err(invalid(
                name,
                format_args!(
                    "len(values) must be len(boundaries) + 1, got {} values for {} boundaries",
                    self.values.len(),
                    self.boundaries.len()
                ),
            ));
        }
        if let Some(w) = self.boundaries.windows(2).find(|w| w[0] >= w[1]) {
            return Err(invalid(
                name,
                format_args!(
                    "boundaries must be strictly increasing, got {} then {}",
                    w[0], w[1]
                ),
            ));
        }
        for &v in &self.values {
            finite(name, "every value", v)?;
        }
        Ok(())
    }
}

/// The [`Schedule`] of the built-in schedules: each has a `formula` generic over [`Arith`]
/// and a `check` of its configuration, which both forms run first.
macro_rules! formula_schedules {
    ($($ty:ty),* $(,)?) => {$(
        impl Schedule for $ty {
            fn value(&self, step: u64) -> Result<f64> {
                self.check()?;
                self.formula(&host_step(step))
            }
            fn validate(&self) -> Result<()> {
                self.check()
            }
            fn value_at(&self, step: &Tensor) -> Option<Result<Tensor>> {
                Some(self.check().and_then(|()| self.formula(step)))
            }
            fn cheap_on_host(&self) -> bool {
                true
            }
        }
    )*};
}

formula_schedules!(
    Constant,
    ExponentialDecay,
    CosineDecay,
    WarmupCosineDecay,
    PiecewiseConstant
);

/// A learning rate: a constant or a schedule. Every optimizer's `new` takes
/// `impl Into<LearningRate>`: an `f64`, a built-in schedule, [`LearningRate::schedule`] of any
/// `Fn(u64) -> f64` (host-only), or [`LearningRate::traced`] of a function of the step tensor.
#[derive(Clone)]
pub enum LearningRate {
    Constant(f64),
    Schedule(Arc<dyn Schedule>),
}

impl fmt::Debug for LearningRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LearningRate::Constant(v) => write!(f, "{v}"),
            LearningRate::Schedule(_) => f.write_str("<schedule>"),
        }
    }
}

impl LearningRate {
    /// Any schedule, e.g. a closure `|step| 0.1 / (1.0 + step as f64)` (which runs on the host
    /// only: see the module docs).
    pub fn schedule(s: impl Schedule + 'static) -> LearningRate {
        LearningRate::Schedule(Arc::new(s))
    }

    /// A schedule written in tensor operations of the step (a float64 rank-0 tensor counting
    /// the completed updates), which runs inside jitted updates and the `Trainer`'s plan, as
    /// optax's schedules do: `LearningRate::traced(|step| (step.mul(-0.01)?).exp()?.mul(0.1))`.
    /// Its host value evaluates the same function on a concrete step.
    pub fn traced(f: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static) -> LearningRate {
        LearningRate::Schedule(Arc::new(TensorSchedule(f)))
    }

    /// The rate for the update after `step` completed updates, `step` a float64 rank-0 tensor
    /// (concrete or traced), as a float64 rank-0 tensor. A host-only schedule needs a concrete
    /// step; traced, it is a tracer error that says how to write it.
    pub(crate) fn at_tensor(&self, step: &Tensor) -> Result<Tensor> {
        match self {
            LearningRate::Constant(v) => {
                positive("learning_rate", *v)?;
                Ok(Tensor::scalar_f64(*v))
            }
            LearningRate::Schedule(s) => match s.value_at(step) {
                Some(rate) => rate,
                None if step.is_traced() => Err(host_only_schedule()),
                None => {
                    let n = step_number(step.item()?)?;
                    Ok(Tensor::scalar_f64(self.at(n)?))
                }
            },
        }
    }

    /// Whether the rate can be computed inside a plan from a traced step (a constant, a
    /// built-in schedule, a [`LearningRate::traced`] one); a host-only schedule cannot.
    pub(crate) fn runs_in_plan(&self) -> bool {
        match self {
            LearningRate::Constant(_) => true,
            LearningRate::Schedule(s) => s.value_at(&Tensor::scalar_f64(0.0)).is_some(),
        }
    }

    /// AR4 for a constant rate that is not finite and positive, AR8 for a schedule's
    /// configuration.
    pub fn validate(&self) -> Result<()> {
        match self {
            LearningRate::Constant(v) => positive("learning_rate", *v),
            LearningRate::Schedule(s) => s.validate(),
        }
    }

    /// The rate for the update after `step` completed updates (AR7 for a negative or
    /// non-finite scheduled rate).
    pub fn at(&self, step: u64) -> Result<f64> {
        match self {
            LearningRate::Constant(v) => {
                positive("learning_rate", *v)?;
                Ok(*v)
            }
            LearningRate::Schedule(s) => {
                let v = s.value(step)?;
                check_scheduled(v, step)?;
                Ok(v)
            }
        }
    }

    /// Whether the host value at a step costs a few floating-point operations (a constant, a
    /// built-in schedule), so a `Trainer` checks it (AR7) before every step.
    pub(crate) fn cheap_on_host(&self) -> bool {
        match self {
            LearningRate::Constant(_) => true,
            LearningRate::Schedule(s) => s.cheap_on_host(),
        }
    }

    /// Whether the rate is a schedule (an SGD state then counts its steps).
    pub fn is_schedule(&self) -> bool {
        matches!(self, LearningRate::Schedule(_))
    }
}

/// A schedule over tensors ([`LearningRate::traced`]).
struct TensorSchedule<F>(F);

impl<F: Fn(&Tensor) -> Result<Tensor> + Send + Sync> Schedule for TensorSchedule<F> {
    fn value(&self, step: u64) -> Result<f64> {
        (self.0)(&Tensor::scalar_f64(host_step(step)))?.item()
    }
    fn value_at(&self, step: &Tensor) -> Option<Result<Tensor>> {
        Some((self.0)(step).and_then(|rate| rate.astype(quabla_ir::DType::F64)))
    }
}

/// TR2 for a host-only schedule asked for its rate inside a trace.
fn host_only_schedule() -> Error {
    Error::Tracer {
        kind: crate::error::TracerErrorKind::Concretization,
        message: "this learning-rate schedule is a host function of the step number and cannot \
                  run inside a traced function; use a built-in schedule, or write it in tensor \
                  operations of the step with LearningRate::traced"
            .into(),
    }
}

/// The step count a float holds: a whole number in `[0, 2^53)` (AR4 otherwise).
pub(crate) fn step_number(step: f64) -> Result<u64> {
    if step.is_finite() && step >= 0.0 && step.fract() == 0.0 && step < 9007199254740992.0 {
        Ok(step as u64)
    } else {
        Err(Error::invalid(format!(
            "the optimizer state's step must be a whole number in [0, 2**53), got {step}"
        )))
    }
}

/// AR7: a scheduled rate `v` at `step` that is negative or not finite.
pub(crate) fn check_scheduled(v: f64, step: u64) -> Result<()> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "learning-rate schedule gave {v} at step {step}; a rate must be finite and >= 0"
        )))
    }
}

/// AR4, exact.
pub(crate) fn positive(name: &str, v: f64) -> Result<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{name} must be a finite positive number"
        )))
    }
}

impl From<f64> for LearningRate {
    fn from(v: f64) -> LearningRate {
        LearningRate::Constant(v)
    }
}

macro_rules! schedule_into_rate {
    ($($t:ty),*) => {$(
        impl From<$t> for LearningRate {
            fn from(s: $t) -> LearningRate {
                LearningRate::schedule(s)
            }
        }
    )*};
}

schedule_into_rate!(
    Constant,
    ExponentialDecay,
    CosineDecay,
    WarmupCosineDecay,
    PiecewiseConstant
);
