//! The [`Trainer`]: a training loop whose loss, gradient and optimizer update are one compiled
//! plan, reused for every step.
//!
//! At `build` the trainer traces one function of `(params, m, v, data, step scalars)` that
//! calls `value_and_grad(loss)` (inlined into the trace), clips the gradients when asked, and
//! applies [`super::rules::apply`]; the traced graph is compiled once for the call's signature.
//! Between steps the trainer keeps the plan's inputs as one flat vector of tensors —
//! parameters, moments, data leaves — and a step binds that vector and three host scalars
//! (the rate and the bias corrections, from [`super::rules::Rule::step_scalars`], so a schedule
//! never retraces), runs the plan and keeps its output vector as the next step's inputs. No
//! pytree is flattened or rebuilt per step; [`Trainer::params`] and [`Trainer::loss`] rebuild
//! trees on demand.
//!
//! On the CPU a step equals `jit(value_and_grad(loss))` followed by the functional `update`,
//! bit for bit (E69): the update nodes are the functional update's nodes in the same order, and
//! every float64 node rounds once in both.
//!
//! What is not yet there: the buffers are the CPU backend's host tensors, lent to the plan by
//! reference and replaced by its fresh outputs each step; the backend interface has no
//! outputs that alias donated inputs, so a step allocates its outputs (parameters and moments)
//! instead of updating them in place, and device backends (P2) would copy them each step.

use super::clip::clip_leaves;
use super::rules::{apply, Optimizer, Rule, State};
use super::{float_leaves, rebuild};
use crate::error::{Error, Result};
use crate::staging::{leaf_signature, Entry};
use crate::tensor::Tensor;
use crate::transforms::jit::Compiled;
use crate::tree::{Leaf, Tree, TreeDef};
use std::fmt;
use std::sync::{Arc, OnceLock};

/// The traced function's arguments: flat parameters, moments `m` and `v`, the data, and the
/// step scalars.
type StepArgs<D> = (Vec<Tensor>, Vec<Tensor>, Vec<Tensor>, D, Vec<Tensor>);
/// Its results: the loss before the update, then the new parameters and moments.
type StepOut = (Tensor, Vec<Tensor>, Vec<Tensor>, Vec<Tensor>);

/// Builds a [`Trainer`]: `Trainer::new(loss, params, opt, data).batch_argnums(&[0]).build()?`.
pub struct TrainerBuilder<P, D, L> {
    loss: L,
    params: P,
    rule: Rule,
    data: D,
    device: String,
    batch_argnums: Vec<usize>,
    check_every: Option<u64>,
}

impl<P, D, L> fmt::Debug for TrainerBuilder<P, D, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrainerBuilder")
            .field("optimizer", &self.rule.name)
            .field("device", &self.device)
            .field("batch_argnums", &self.batch_argnums)
            .field("check_every", &self.check_every)
            .finish_non_exhaustive()
    }
}

/// A training loop with retained state (api.md §16): `loss(params, data)` (a rank-0 float) is
/// traced once with its gradient and the optimizer update into one compiled plan.
pub struct Trainer<P, D, L> {
    loss_fn: L,
    rule: Rule,
    device: String,
    entry: Arc<Entry>,
    params_def: TreeDef,
    /// The structure and leaves of the current data.
    data_def: TreeDef,
    data: Vec<Leaf>,
    /// The plan's state inputs: parameters, then `m`, then `v`.
    state: Vec<Tensor>,
    n_params: usize,
    step: u64,
    batch_argnums: Vec<usize>,
    check_every: Option<u64>,
    /// The step and state of the last check whose loss was finite.
    last_good: Option<(u64, Vec<Tensor>)>,
    last_loss: Option<Tensor>,
    loss_plan: OnceLock<Compiled<(P, D), Tensor>>,
}

impl<P, D, L> fmt::Debug for Trainer<P, D, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trainer")
            .field("optimizer", &self.rule.name)
            .field("step", &self.step)
            .field("signature", &self.entry.signature.to_string())
            .finish_non_exhaustive()
    }
}

impl<P, D, L> Trainer<P, D, L>
where
    P: Tree,
    D: Tree,
    L: Fn(&P, &D) -> Result<Tensor>,
{
    /// A trainer of `params` for `loss(params, data)` with an [`super::Adam`],
    /// [`super::AdamW`] or [`super::Sgd`] (constant rate or schedule, with or without
    /// `clip_norm`). `data` is one argument or a tuple of them.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(loss: L, params: P, optimizer: impl Optimizer, data: D) -> TrainerBuilder<P, D, L> {
        TrainerBuilder {
            loss,
            params,
            rule: optimizer.rule().clone(),
            data,
            device: "cpu".into(),
            batch_argnums: Vec::new(),
            check_every: None,
        }
    }
}

impl<P, D, L> TrainerBuilder<P, D, L>
where
    P: Tree,
    D: Tree,
    L: Fn(&P, &D) -> Result<Tensor>,
{
    /// `"cpu"` (default); `"cuda"`, `"cuda:N"` and `"mlx"` are P2 and unavailable (UN1).
    pub fn device(mut self, device: impl Into<String>) -> Self {
        self.device = device.into();
        self
    }

    /// The data arguments (positions in `data`'s tuple) that [`Trainer::step_with`] replaces,
    /// in that order.
    pub fn batch_argnums(mut self, argnums: &[usize]) -> Self {
        self.batch_argnums = argnums.to_vec();
        self
    }

    /// Check the loss every `n` steps (at steps 0, n, 2n, ...): a non-finite value stops the
    /// step with [`Error::NonFiniteLoss`] and restores the parameters and optimizer state of the
    /// last check whose loss was finite. `n` must be at least 1.
    pub fn check_finite_every(mut self, n: u64) -> Self {
        self.check_every = Some(n);
        self
    }

    /// Validates the configuration, traces and compiles the step plan.
    pub fn build(self) -> Result<Trainer<P, D, L>> {
        let rule = self.rule;
        rule.validate()?;
        if self.check_every == Some(0) {
            return Err(Error::invalid("check_finite_every must be at least 1"));
        }
        let (params, params_def) = float_leaves("Trainer", &self.params)?;
        let (data, data_def) = crate::tree::flatten(&self.data);
        let n_args = data_def.positional_args().len();
        for (i, &a) in self.batch_argnums.iter().enumerate() {
            if a >= n_args || self.batch_argnums[..i].contains(&a) {
                return Err(Error::invalid(format!(
                    "batch_argnums must name distinct data arguments below {n_args}, got {:?}",
                    self.batch_argnums
                )));
            }
        }
        let moments = if rule.has_moments() {
            params
                .iter()
                .map(|p| crate::creation::zeros(p.shape()))
                .collect::<Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        let scalars = rule
            .step_scalars(0)?
            .into_iter()
            .map(crate::creation::array)
            .collect::<Result<Vec<_>>>()?;
        let loss = &self.loss;
        let def = &params_def;
        let fused = |(p, m, v, data, h): StepArgs<D>| -> Result<StepOut> {
            let tree: P = rebuild(def, p.clone())?;
            let (value, grads): (Tensor, P) =
                crate::value_and_grad(|(p, d): (P, D)| loss(&p, &d)).call(&(tree, data))?;
            let (g, _) = float_leaves("Trainer", &grads)?;
            let g = match rule.clip_norm {
                Some(max_norm) => clip_leaves(&g, max_norm)?.0,
                None => g,
            };
            let (p, m, v) = apply(rule.kind, &p, &g, &m, &v, &h)?;
            Ok((value, p, m, v))
        };
        let args: StepArgs<D> = (
            params.clone(),
            moments.clone(),
            moments.clone(),
            self.data,
            scalars,
        );
        let lowered = crate::jit(fused)
            .name("Trainer.step")
            .device(self.device.clone())
            .lower(&args)?;
        let entry = lowered.compile().entry().clone();
        let n_params = params.len();
        let mut state = params;
        state.extend(moments.iter().cloned());
        state.extend(moments);
        Ok(Trainer {
            loss_fn: self.loss,
            rule,
            device: self.device,
            entry,
            params_def,
            data_def,
            data,
            state,
            n_params,
            step: 0,
            batch_argnums: self.batch_argnums,
            check_every: self.check_every,
            last_good: None,
            last_loss: None,
            loss_plan: OnceLock::new(),
        })
    }
}

impl<P, D, L> Trainer<P, D, L>
where
    P: Tree,
    D: Tree,
    L: Fn(&P, &D) -> Result<Tensor>,
{
    /// One optimizer step on the current data.
    pub fn step(&mut self) -> Result<()> {
        let data = std::mem::take(&mut self.data);
        let ran = self.run_step(&data);
        self.data = data;
        ran
    }

    /// One optimizer step after replacing the data arguments named by `batch_argnums` (in that
    /// order) with `batch`: one value for one argument, a tuple for several. Each must have the
    /// structure, shapes and dtypes (and static values) of the argument it replaces: otherwise
    /// TF8 or TF10, and the trainer is untouched. The compiled plan is reused.
    pub fn step_with<B: Tree>(&mut self, batch: &B) -> Result<()> {
        let data = self.replaced_data(batch)?;
        self.run_step(&data)?;
        self.data = data;
        Ok(())
    }

    /// The data leaves with the batch arguments replaced, after checking them.
    fn replaced_data<B: Tree>(&self, batch: &B) -> Result<Vec<Leaf>> {
        let (leaves, def) = crate::tree::flatten(batch);
        let given: Vec<&TreeDef> = if self.batch_argnums.len() == 1 {
            vec![&def]
        } else {
            def.positional_args().iter().collect()
        };
        if given.len() != self.batch_argnums.len() {
            return Err(Error::Structure {
                message: format!(
                    "pytree structures differ: Trainer.step expects {} batch argument(s) for batch_argnums {:?}, got {}",
                    self.batch_argnums.len(),
                    self.batch_argnums,
                    given.len()
                ),
            });
        }
        let args = self.data_def.positional_args();
        // The leaf range of each data argument.
        let mut ranges = Vec::with_capacity(args.len());
        let mut at = 0;
        for a in args {
            ranges.push(at..at + a.num_leaves());
            at += a.num_leaves();
        }
        let mut data = self.data.clone();
        let mut from = 0;
        for (k, (&argnum, d)) in self.batch_argnums.iter().zip(given).enumerate() {
            if *d != args[argnum] {
                return Err(Error::Structure {
                    message: format!(
                        "pytree structures differ: {} vs {d} (Trainer.step batch argument {k}, data argument {argnum})",
                        args[argnum]
                    ),
                });
            }
            let n = d.num_leaves();
            let new = &leaves[from..from + n];
            from += n;
            let range = ranges[argnum].clone();
            for (old, new) in self.data[range.clone()].iter().zip(new) {
                let (a, b) = (leaf_signature(old, false), leaf_signature(new, false));
                if a != b {
                    return Err(Error::Structure {
                        message: format!(
                            "compiled function expects {a}, got {b} (Trainer.step batch argument {k}, data argument {argnum})"
                        ),
                    });
                }
            }
            data[range].clone_from_slice(new);
        }
        Ok(data)
    }

    fn run_step(&mut self, data: &[Leaf]) -> Result<()> {
        let scalars = self.rule.step_scalars(self.step)?;
        let mut inputs = Vec::with_capacity(self.state.len() + data.len() + scalars.len());
        inputs.extend(self.state.iter().cloned());
        inputs.extend(data.iter().filter_map(|l| l.as_tensor().cloned()));
        for s in scalars {
            inputs.push(crate::creation::array(s)?);
        }
        let outs = self.entry.run_leaves(&inputs)?;
        let mut outs = outs.into_iter().map(|l| match l {
            Leaf::Tensor(t) => Ok(t),
            other => Err(Error::Internal {
                message: format!("the trainer's plan returned a static leaf {other:?}"),
            }),
        });
        let loss = outs.next().ok_or_else(|| Error::Internal {
            message: "the trainer's plan returned no loss".into(),
        })??;
        let state = outs.collect::<Result<Vec<_>>>()?;
        if state.len() != self.state.len() {
            return Err(Error::Internal {
                message: "the trainer's plan returned a state of another size".into(),
            });
        }
        if let Some(n) = self.check_every {
            if self.step.is_multiple_of(n) {
                let value = loss.item()?;
                if !value.is_finite() {
                    let step = self.step;
                    let kept_step = match self.last_good.take() {
                        Some((k, good)) => {
                            self.state = good;
                            self.step = k;
                            Some(k)
                        }
                        None => None,
                    };
                    self.last_good = kept_step.map(|k| (k, self.state.clone()));
                    return Err(Error::NonFiniteLoss {
                        step,
                        loss: value,
                        kept_step,
                    });
                }
                // The loss was measured at the parameters before this update.
                self.last_good = Some((self.step, self.state.clone()));
            }
        }
        self.state = state;
        self.step += 1;
        self.last_loss = Some(loss);
        Ok(())
    }

    /// The loss at the current parameters and latest data, as a rank-0 tensor.
    pub fn loss(&self) -> Result<Tensor> {
        let args = (self.params()?, self.data_tree()?);
        if self.loss_plan.get().is_none() {
            let loss = &self.loss_fn;
            let compiled = crate::jit(|(p, d): (P, D)| loss(&p, &d))
                .name("Trainer.loss")
                .device(self.device.clone())
                .lower(&args)?
                .compile();
            let _ = self.loss_plan.set(compiled);
        }
        match self.loss_plan.get() {
            Some(plan) => plan.call(&args),
            None => Err(Error::Internal {
                message: "the trainer's loss plan is missing".into(),
            }),
        }
    }

    /// The loss the last step computed (at the parameters before its update), if any step ran.
    pub fn last_loss(&self) -> Option<&Tensor> {
        self.last_loss.as_ref()
    }

    /// The current parameters in the original tree structure.
    pub fn params(&self) -> Result<P> {
        rebuild(&self.params_def, self.state[..self.n_params].to_vec())
    }

    /// The optimizer state in the form the functional `update` uses.
    pub fn opt_state(&self) -> Result<State<P>> {
        let n = self.n_params;
        let (m, v) = if self.rule.has_moments() {
            (
                Some(rebuild(&self.params_def, self.state[n..2 * n].to_vec())?),
                Some(rebuild(&self.params_def, self.state[2 * n..].to_vec())?),
            )
        } else {
            (None, None)
        };
        Ok(State {
            step: self.step,
            m,
            v,
        })
    }

    /// Updates completed.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// The current data in its original structure.
    fn data_tree(&self) -> Result<D> {
        self.data_def.unflatten(self.data.clone())
    }
}
