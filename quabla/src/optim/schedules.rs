//! Learning-rate schedules (numerics.md §8.4): functions of the number of updates completed so
//! far, evaluated on the host. Every built-in schedule validates its configuration (AR8) when
//! it is first used through [`Schedule::validate`] or [`Schedule::value`]; a rate that comes
//! out negative or non-finite is AR7 at the step that produced it ([`LearningRate::at`]).

use crate::error::{Error, Result};
use std::fmt;
use std::sync::Arc;

/// A learning-rate schedule: the rate after `step` completed updates.
///
/// Any `Fn(u64) -> f64 + Send + Sync` is a schedule; the built-in ones are
/// [`constant`], [`exponential_decay`], [`cosine_decay`], [`warmup_cosine_decay`] and
/// [`piecewise_constant`].
pub trait Schedule: Send + Sync {
    /// The rate at `step` (AR8 for an invalid configuration).
    fn value(&self, step: u64) -> Result<f64>;

    /// AR8 for an invalid configuration; closures have none to check.
    fn validate(&self) -> Result<()> {
        Ok(())
    }
}

impl<F: Fn(u64) -> f64 + Send + Sync> Schedule for F {
    fn value(&self, step: u64) -> Result<f64> {
        Ok(self(step))
    }
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

impl Schedule for Constant {
    fn value(&self, _step: u64) -> Result<f64> {
        self.validate()?;
        Ok(self.value)
    }
    fn validate(&self) -> Result<()> {
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

impl Schedule for ExponentialDecay {
    fn value(&self, step: u64) -> Result<f64> {
        self.validate()?;
        if step <= self.begin {
            return Ok(self.init);
        }
        let c = (step - self.begin) as f64;
        let mut e = c / self.transition_steps as f64;
        if self.staircase {
            e = e.floor();
        }
        let v = self.init * self.rate.powf(e);
        Ok(match self.end {
            Some(end) if self.rate < 1.0 => v.max(end),
            Some(end) => v.min(end),
            None => v,
        })
    }
    fn validate(&self) -> Result<()> {
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

impl Schedule for CosineDecay {
    fn value(&self, step: u64) -> Result<f64> {
        self.validate()?;
        let d = self.decay_steps as f64;
        let c = step.min(self.decay_steps) as f64;
        let cosine = 0.5 * (1.0 + (std::f64::consts::PI * c / d).cos());
        Ok(self.init * ((1.0 - self.alpha) * cosine + self.alpha))
    }
    fn validate(&self) -> Result<()> {
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

impl Schedule for WarmupCosineDecay {
    fn value(&self, step: u64) -> Result<f64> {
        self.validate()?;
        let (w, d) = (self.warmup_steps, self.decay_steps);
        if step < w {
            return Ok(self.init + (self.peak - self.init) * step as f64 / w as f64);
        }
        if step >= d {
            return Ok(self.end);
        }
        let phase = std::f64::consts::PI * (step - w) as f64 / (d - w) as f64;
        Ok(self.end + (self.peak - self.end) * 0.5 * (1.0 + phase.cos()))
    }
    fn validate(&self) -> Result<()> {
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

impl Schedule for PiecewiseConstant {
    fn value(&self, step: u64) -> Result<f64> {
        self.validate()?;
        let i = self.boundaries.iter().take_while(|&&b| b <= step).count();
        Ok(self.values[i])
    }
    fn validate(&self) -> Result<()> {
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

/// A learning rate: a constant or a schedule. Every optimizer's `new` takes
/// `impl Into<LearningRate>`: an `f64`, a built-in schedule, or [`LearningRate::schedule`]
/// of any `Fn(u64) -> f64`.
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
    /// Any schedule, e.g. a closure `|step| 0.1 / (1.0 + step as f64)`.
    pub fn schedule(s: impl Schedule + 'static) -> LearningRate {
        LearningRate::Schedule(Arc::new(s))
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
                if v.is_finite() && v >= 0.0 {
                    Ok(v)
                } else {
                    Err(Error::invalid(format!(
                        "learning-rate schedule gave {v} at step {step}; a rate must be finite and >= 0"
                    )))
                }
            }
        }
    }

    /// Whether the rate is a schedule (an SGD state then counts its steps).
    pub fn is_schedule(&self) -> bool {
        matches!(self, LearningRate::Schedule(_))
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
