//! The first-order optimizers [`Adam`], [`AdamW`] and [`Sgd`]: builders with validation
//! (AR4, AR5), the functional `init`/`update` over any pytree of floating tensors, and
//! [`apply`], the one per-leaf update formula of numerics.md §8.1–8.3.
//!
//! [`apply`] is written over tensors and never looks at values: eagerly it runs as host
//! float64 arithmetic (one eager operation per node), and recorded under a trace it becomes the
//! update part of a jitted step or of the trainer's plan. The step count is a float64 rank-0
//! tensor of the state, and the numbers that depend on it (the rate and the bias corrections
//! `1 - b^t`) are tensor operations of it ([`Rule::step_tensors`]), so a jitted update traces
//! once for every step, a `Trainer` step needs nothing from the host, and every path rounds
//! alike.

use super::clip::clip_leaves;
use super::schedules::{positive, LearningRate};
use super::{float_leaves, rebuild, same_layout};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::tree::{Tree, TreeDef};
use crate::DType;

/// The state of an optimizer: `step` counts completed updates, as a float64 rank-0 tensor (so
/// that a jitted update traces once, whatever the step; a whole number below 2^53); `m` and `v`
/// are Adam's float64 moment trees (`None` for SGD). A pytree, so it saves with
/// [`crate::save`] and loads back with [`crate::load_as`] (a file whose step is an integer
/// loads too).
#[derive(Clone, Debug, crate::Tree)]
pub struct State<P> {
    pub step: Tensor,
    pub m: Option<P>,
    pub v: Option<P>,
}

impl<P> State<P> {
    /// The completed updates as a host number (TR2 inside a trace; AR4 when the step is not a
    /// whole number in `[0, 2^53)`).
    pub fn steps(&self) -> Result<u64> {
        super::schedules::step_number(self.step.item()?)
    }
}

/// Which update formula a rule applies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Kind {
    /// Adam; with `weight_decay` it is AdamW (decoupled decay of the pre-update parameter).
    Adam {
        b1: f64,
        b2: f64,
        eps: f64,
        weight_decay: Option<f64>,
    },
    Sgd,
}

/// An optimizer's complete configuration, shared by the three public builders.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct Rule {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    pub(crate) lr: LearningRate,
    pub(crate) clip_norm: Option<f64>,
}

impl Rule {
    /// AR4, AR5, AR8.
    pub(crate) fn validate(&self) -> Result<()> {
        self.lr.validate()?;
        if let Some(c) = self.clip_norm {
            positive("clip_norm", c)?;
        }
        if let Kind::Adam {
            b1,
            b2,
            eps,
            weight_decay,
        } = self.kind
        {
            if !(0.0..1.0).contains(&b1) || !(0.0..1.0).contains(&b2) {
                return Err(Error::invalid("Adam b1 and b2 must lie in [0, 1)"));
            }
            positive("eps", eps)?;
            if let Some(wd) = weight_decay {
                if !(wd.is_finite() && wd >= 0.0) {
                    return Err(Error::invalid(
                        "weight_decay must be a finite non-negative number",
                    ));
                }
            }
        }
        Ok(())
    }

    pub(crate) fn has_moments(&self) -> bool {
        matches!(self.kind, Kind::Adam { .. })
    }

    /// The numbers of the update after `step` completed updates (a float64 rank-0 tensor,
    /// concrete or traced), as float64 rank-0 tensors: `[lr]` for SGD, `[lr, 1 - b1^t,
    /// 1 - b2^t]` for Adam with `t = step + 1`. The one place they are formed, so the
    /// functional update, a jitted update and the trainer's plan compute them alike.
    pub(crate) fn step_tensors(&self, step: &Tensor) -> Result<Vec<Tensor>> {
        let lr = self.lr.at_tensor(step)?;
        self.step_tensors_with(step, lr)
    }

    /// [`Rule::step_tensors`] with the rate given (a host-only schedule's value, uploaded).
    pub(crate) fn step_tensors_with(&self, step: &Tensor, lr: Tensor) -> Result<Vec<Tensor>> {
        Ok(match self.kind {
            Kind::Sgd => vec![lr],
            Kind::Adam { b1, b2, .. } => {
                let t = crate::add(step, 1.0)?;
                let correction = |b: f64| crate::sub(1.0, crate::pow(Tensor::scalar_f64(b), &t)?);
                vec![lr, correction(b1)?, correction(b2)?]
            }
        })
    }

    /// AR7 for a rate that is negative or non-finite at `step` (a host number), checked with
    /// the schedule's host value where that is cheap (see [`LearningRate::cheap_on_host`]); a
    /// rate only the plan computes is not checked here (a non-finite loss then shows it, as
    /// `Trainer::check_finite_every` reports).
    pub(crate) fn check_rate(&self, step: u64) -> Result<()> {
        if self.lr.cheap_on_host() {
            self.lr.at(step)?;
        }
        Ok(())
    }

    /// The moment leaves of `state` for parameters `params` of structure `def` (AR6 when
    /// Adam's are missing, TF8 or a shape error when they do not match the parameters).
    fn moments<P: Tree>(
        &self,
        def: &TreeDef,
        params: &[Tensor],
        state: &State<P>,
    ) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
        if !self.has_moments() {
            return Ok((Vec::new(), Vec::new()));
        }
        let (Some(m), Some(v)) = (&state.m, &state.v) else {
            return Err(Error::invalid(
                "Adam state is missing one of the keys \"step\", \"m\", \"v\"",
            ));
        };
        let mut out = Vec::with_capacity(2);
        for moment in [m, v] {
            let (leaves, mdef) = float_leaves(self.name, moment)?;
            same_layout("optimizer state", def, params, &mdef, &leaves)?;
            if let Some(t) = leaves.iter().find(|t| t.dtype() != DType::F64) {
                return Err(Error::Type {
                    message: format!(
                        "{} moments must be float64, got {}",
                        self.name,
                        t.dtype().name()
                    ),
                });
            }
            out.push(leaves);
        }
        let v = out.pop().unwrap_or_default();
        let m = out.pop().unwrap_or_default();
        Ok((m, v))
    }
}

/// The update formula for every leaf (numerics.md §8.1–8.3): returns the new parameters
/// (each in its own dtype) and, for Adam, the new float64 moments. `scalars` are
/// [`Rule::step_tensors`]; `grads` are already clipped.
pub(crate) fn apply(
    kind: Kind,
    params: &[Tensor],
    grads: &[Tensor],
    m: &[Tensor],
    v: &[Tensor],
    scalars: &[Tensor],
) -> Result<(Vec<Tensor>, Vec<Tensor>, Vec<Tensor>)> {
    let scalar = |i: usize| {
        scalars.get(i).ok_or_else(|| Error::Internal {
            message: format!("optimizer update expects {} step scalars", i + 1),
        })
    };
    let lr = scalar(0)?;
    let mut new_p = Vec::with_capacity(params.len());
    let mut new_m = Vec::with_capacity(m.len());
    let mut new_v = Vec::with_capacity(v.len());
    for (k, (p, g)) in params.iter().zip(grads).enumerate() {
        let dtype = p.dtype();
        let p64 = p.astype(DType::F64)?;
        let g64 = g.astype(DType::F64)?;
        let delta = match kind {
            Kind::Sgd => (lr * &g64)?,
            Kind::Adam {
                b1,
                b2,
                eps,
                weight_decay,
            } => {
                let (bc1, bc2) = (scalar(1)?, scalar(2)?);
                let (m, v) = (&m[k], &v[k]);
                let m1 = (m.mul(b1)? + g64.mul(1.0 - b1)?)?;
                let v1 = (v.mul(b2)? + (&g64 * &g64)?.mul(1.0 - b2)?)?;
                let m_hat = (&m1 / bc1)?;
                let v_hat = (&v1 / bc2)?;
                let denom = v_hat.sqrt()?.add(eps)?;
                let delta = match weight_decay {
                    None => ((lr * &m_hat)? / &denom)?,
                    Some(wd) => (lr * ((&m_hat / &denom)? + p64.mul(wd)?)?)?,
                };
                new_m.push(m1);
                new_v.push(v1);
                delta
            }
        };
        new_p.push((&p64 - &delta)?.astype(dtype)?);
    }
    Ok((new_p, new_m, new_v))
}

/// What every optimizer offers: the functional `init` and `update` of api.md §16.
pub trait Optimizer {
    /// The configuration (used by [`super::Trainer`]).
    #[doc(hidden)]
    fn rule(&self) -> &Rule;

    /// Checks the configuration (AR4, AR5, AR8: the rate or the schedule's configuration,
    /// `clip_norm`, `b1`, `b2`, `eps`, `weight_decay`), which `init`, `update` and
    /// `Trainer::build` check too; the Python constructors call it, so a bad option is an error
    /// at construction.
    fn validate(&self) -> Result<()> {
        self.rule().validate()
    }

    /// The initial state: `step` 0 and, for Adam, float64 zero moments of the parameters'
    /// shapes (TY12 for a leaf that is not a floating tensor).
    fn init<P: Tree>(&self, params: &P) -> Result<State<P>> {
        let rule = self.rule();
        rule.validate()?;
        let (leaves, def) = float_leaves(rule.name, params)?;
        let (m, v) = if rule.has_moments() {
            let zeros = || {
                let z = leaves
                    .iter()
                    .map(|t| crate::creation::zeros(t.shape()))
                    .collect::<Result<Vec<_>>>()?;
                rebuild::<P>(&def, z)
            };
            (Some(zeros()?), Some(zeros()?))
        } else {
            (None, None)
        };
        Ok(State {
            step: Tensor::scalar_f64(0.0),
            m,
            v,
        })
    }

    /// One update: with `clip_norm` the gradients first pass through
    /// [`super::clip_by_global_norm`]; then the formula of numerics.md §8 in float64, each
    /// parameter rounded to its dtype. `grads` has the structure and shapes of `params` (TF8).
    fn update<P: Tree>(&self, params: &P, grads: &P, state: &State<P>) -> Result<(P, State<P>)> {
        let rule = self.rule();
        rule.validate()?;
        let (p, def) = float_leaves(rule.name, params)?;
        let (g, gdef) = float_leaves(rule.name, grads)?;
        same_layout("update", &def, &p, &gdef, &g)?;
        let (m, v) = rule.moments(&def, &p, state)?;
        let step = step_tensor(&state.step)?;
        let scalars = rule.step_tensors(&step)?;
        if !step.is_traced() {
            // The rate this update uses, checked once it is known (AR7); traced, it cannot be.
            let n = super::schedules::step_number(step.item()?)?;
            if let Some(lr) = scalars.first() {
                super::schedules::check_scheduled(lr.item()?, n)?;
            }
        }
        let g = match rule.clip_norm {
            Some(max_norm) => clip_leaves(&g, max_norm)?.0,
            None => g,
        };
        let (new_p, new_m, new_v) = apply(rule.kind, &p, &g, &m, &v, &scalars)?;
        let moments = |leaves: Vec<Tensor>| -> Result<Option<P>> {
            if rule.has_moments() {
                rebuild(&def, leaves).map(Some)
            } else {
                Ok(None)
            }
        };
        Ok((
            rebuild(&def, new_p)?,
            State {
                step: crate::add(&step, 1.0)?,
                m: moments(new_m)?,
                v: moments(new_v)?,
            },
        ))
    }
}

/// The state's step as a float64 rank-0 tensor (TY12-style type error for anything else).
fn step_tensor(step: &Tensor) -> Result<Tensor> {
    if !step.shape().is_empty() || step.dtype() == DType::Bool {
        return Err(Error::Type {
            message: format!(
                "the optimizer state's step must be a rank-0 number, got a {} tensor of shape {:?}",
                step.dtype().name(),
                step.shape()
            ),
        });
    }
    step.astype(DType::F64)
}

macro_rules! common_options {
    () => {
        /// Clip the gradients to this global norm first (`clip_by_global_norm`).
        pub fn clip_norm(mut self, max_norm: f64) -> Self {
            self.rule.clip_norm = Some(max_norm);
            self
        }
    };
}

macro_rules! moment_options {
    () => {
        /// Decay of the first moment (default 0.9; in `[0, 1)`).
        pub fn b1(mut self, b1: f64) -> Self {
            if let Kind::Adam { b1: ref mut x, .. } = self.rule.kind {
                *x = b1;
            }
            self
        }

        /// Decay of the second moment (default 0.999; in `[0, 1)`).
        pub fn b2(mut self, b2: f64) -> Self {
            if let Kind::Adam { b2: ref mut x, .. } = self.rule.kind {
                *x = b2;
            }
            self
        }

        /// Added outside the square root (default 1e-8).
        pub fn eps(mut self, eps: f64) -> Self {
            if let Kind::Adam { eps: ref mut x, .. } = self.rule.kind {
                *x = eps;
            }
            self
        }
    };
}

fn adam_rule(name: &'static str, lr: LearningRate, weight_decay: Option<f64>) -> Rule {
    Rule {
        name,
        kind: Kind::Adam {
            b1: 0.9,
            b2: 0.999,
            eps: 1e-8,
            weight_decay,
        },
        lr,
        clip_norm: None,
    }
}

/// Adam with bias correction (numerics.md §8.1): `qb::optim::Adam::new(1e-3).b1(0.9)`.
#[derive(Clone, Debug)]
pub struct Adam {
    rule: Rule,
}

impl Adam {
    /// Adam with a constant rate or a schedule.
    pub fn new(learning_rate: impl Into<LearningRate>) -> Adam {
        Adam {
            rule: adam_rule("Adam", learning_rate.into(), None),
        }
    }
    moment_options!();
    common_options!();
}

/// Adam with decoupled weight decay, scaled by the rate and applied to the pre-update
/// parameter (numerics.md §8.2): `qb::optim::AdamW::new(1e-3).weight_decay(1e-4)`.
#[derive(Clone, Debug)]
pub struct AdamW {
    rule: Rule,
}

impl AdamW {
    /// AdamW with weight decay 1e-4.
    pub fn new(learning_rate: impl Into<LearningRate>) -> AdamW {
        AdamW {
            rule: adam_rule("AdamW", learning_rate.into(), Some(1e-4)),
        }
    }
    moment_options!();
    common_options!();

    /// The decay coefficient (finite, non-negative).
    pub fn weight_decay(mut self, weight_decay: f64) -> Self {
        if let Kind::Adam {
            weight_decay: ref mut x,
            ..
        } = self.rule.kind
        {
            *x = Some(weight_decay);
        }
        self
    }
}

/// Plain gradient descent `p - lr * g` (numerics.md §8.3): `qb::optim::Sgd::new(1e-2)`. Its
/// state has no moments; `step` still counts the updates (a schedule needs it).
#[derive(Clone, Debug)]
pub struct Sgd {
    rule: Rule,
}

impl Sgd {
    pub fn new(learning_rate: impl Into<LearningRate>) -> Sgd {
        Sgd {
            rule: Rule {
                name: "SGD",
                kind: Kind::Sgd,
                lr: learning_rate.into(),
                clip_norm: None,
            },
        }
    }
    common_options!();
}

impl Optimizer for Adam {
    fn rule(&self) -> &Rule {
        &self.rule
    }
}

impl Optimizer for AdamW {
    fn rule(&self) -> &Rule {
        &self.rule
    }
}

impl Optimizer for Sgd {
    fn rule(&self) -> &Rule {
        &self.rule
    }
}
