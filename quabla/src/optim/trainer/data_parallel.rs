//! The data-parallel trainer: `Trainer::new(..).distributed(true)` (api.md §20).
//!
//! Every rank of the current process group builds the same trainer with the same full batch;
//! the data arguments of `shard_argnums` (all of them by default) are cut to the rank's rows.
//! A step then runs in three parts instead of the single plan of the ordinary trainer:
//!
//! 1. the *gradient plan*, `(params, data) -> (loss, grads)`, on the rank's shard (parameters
//!    and data lent, so nothing is consumed yet);
//! 2. one all-reduce of the loss and the gradients together (`mean` by default), in rank
//!    order, the same bits on every rank (`qb::distributed`); on the CPU the buffers are host
//!    memory, so this reads and writes them without copies to or from a device;
//! 3. the *update plan*, `(params, m, v, step, grads, rate) -> (params, m, v, step)`, the
//!    ordinary trainer's clipping and update nodes, with the state donated as usual.
//!
//! So every rank applies the same update to the same parameters: they stay identical. That is
//! checked, not assumed: the build compares a digest of every rank's initial parameters, each
//! step's header names its step number (a rank whose update failed falls out of step and is
//! named at the next one), and every `check_replicas_every` steps the digest of the
//! parameters is compared again. On one rank the two plans compute the fused plan's nodes, so
//! the result equals the ordinary trainer's bit for bit.
//!
//! A rank whose step fails before the reduction (its loss raises, a batch of the wrong shape)
//! still takes part in the reduction's header exchange, so every rank fails that step and no
//! rank applies an update: the trainers stay as they were, and so does any checkpoint.

use super::{download, upload, upload_state, upload_tensors, Trainer, TrainerBuilder};
use crate::distributed::{self, Flat, Group, Reduction};
use crate::error::{Error, Result};
use crate::optim::clip::clip_leaves;
use crate::optim::rules::apply;
use crate::optim::{float_leaves, rebuild};
use crate::staging::Entry;
use crate::tensor::Tensor;
use crate::tree::{Leaf, Tree, TreeDef};
use quabla_backend::{Buffer, BufferArg, Memory};
use std::fmt;
use std::sync::{Arc, OnceLock};

/// The default of [`TrainerBuilder::check_replicas_every`].
pub const DEFAULT_REPLICA_CHECK: u64 = 100;

/// The builder's data-parallel options.
#[derive(Clone, Debug)]
pub(super) struct Config {
    enabled: bool,
    shard_argnums: Option<Vec<usize>>,
    reduction: Reduction,
    check_every: u64,
    group: Option<Group>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            enabled: false,
            shard_argnums: None,
            reduction: Reduction::Mean,
            check_every: DEFAULT_REPLICA_CHECK,
            group: None,
        }
    }
}

impl Config {
    pub(super) fn enabled(&self) -> bool {
        self.enabled
    }
}

/// A built data-parallel step (see the module docs).
pub(super) struct DataParallel {
    group: Group,
    reduction: Reduction,
    shard_argnums: Vec<usize>,
    check_every: u64,
    /// `(params, data) -> (loss, grads)`.
    grad: Arc<Entry>,
    /// `(params, m, v, step, grads, rate) -> (params, m, v, step)`.
    update: Arc<Entry>,
    n_params: usize,
}

impl fmt::Debug for DataParallel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataParallel")
            .field("group", &self.group)
            .field("reduction", &self.reduction)
            .field("shard_argnums", &self.shard_argnums)
            .finish_non_exhaustive()
    }
}

/// The update plan's arguments: parameters, moments, step, gradients, host rate.
type UpdateArgs = (
    Vec<Tensor>,
    Vec<Tensor>,
    Vec<Tensor>,
    Tensor,
    Vec<Tensor>,
    Vec<Tensor>,
);
type UpdateOut = (Vec<Tensor>, Vec<Tensor>, Vec<Tensor>, Tensor);

impl<P, D, L> TrainerBuilder<P, D, L>
where
    P: Tree,
    D: Tree,
    L: Fn(&P, &D) -> Result<Tensor>,
{
    /// Data parallelism over the ranks of the current process group (`qb::distributed`):
    /// every rank builds the trainer with the same parameters and full batch, steps on its
    /// shard, and applies the same reduced gradients (see `docs/distributed.md`). The build and
    /// every step are collective: all ranks must call them together.
    pub fn distributed(mut self, on: bool) -> Self {
        self.parallel.enabled = on;
        self
    }

    /// With `distributed(true)`: the data arguments that hold full batches, cut along axis 0
    /// into one shard per rank (default: every data argument); the others are replicated.
    pub fn shard_argnums(mut self, argnums: &[usize]) -> Self {
        self.parallel.shard_argnums = Some(argnums.to_vec());
        self
    }

    /// With `distributed(true)`: how the ranks' losses and gradients combine (default
    /// [`Reduction::Mean`]: with a loss that averages its shard's rows and equal shards, the
    /// full batch's loss and gradient).
    pub fn reduction(mut self, reduction: Reduction) -> Self {
        self.parallel.reduction = reduction;
        self
    }

    /// With `distributed(true)`: compare a digest of every rank's parameters every `n` steps
    /// (default 100; at least 1); ranks that diverged make the step fail with
    /// [`Error::Distributed`] naming each rank's digest.
    pub fn check_replicas_every(mut self, n: u64) -> Self {
        self.parallel.check_every = n;
        self
    }

    /// With `distributed(true)`: run on `group` instead of the current group.
    pub fn group(mut self, group: Group) -> Self {
        self.parallel.group = Some(group);
        self
    }

    /// `build` of a data-parallel trainer: every rank builds its part, then all agree (a rank
    /// whose build failed makes every rank's fail).
    pub(super) fn build_data_parallel(self) -> Result<Trainer<P, D, L>> {
        let group = match &self.parallel.group {
            Some(g) => g.clone(),
            None => distributed::current()?,
        };
        match self.build_parts(&group) {
            Ok((trainer, description)) => {
                group.agree("Trainer", &description, Ok(()))?;
                Ok(trainer)
            }
            Err(e) => Err(match group.agree("Trainer", "Trainer", Err(e)) {
                Err(e) => e,
                Ok(()) => Error::Internal {
                    message: "a failed build was agreed".into(),
                },
            }),
        }
    }

    /// This rank's trainer and the description the ranks compare.
    fn build_parts(self, group: &Group) -> Result<(Trainer<P, D, L>, String)> {
        let rule = self.rule;
        rule.validate()?;
        if self.check_every == Some(0) {
            return Err(Error::invalid("check_finite_every must be at least 1"));
        }
        let config = self.parallel;
        if config.check_every == 0 {
            return Err(Error::invalid("check_replicas_every must be at least 1"));
        }
        let (params, params_def) = float_leaves("Trainer", &self.params)?;
        let (data, data_def) = crate::tree::flatten(&self.data);
        let n_args = data_def.positional_args().len();
        super::check_batch_argnums(&self.batch_argnums, n_args)?;
        let shard_argnums = config
            .shard_argnums
            .clone()
            .unwrap_or_else(|| (0..n_args).collect());
        let data = distributed::shard_args(
            "Trainer(distributed=True)",
            data,
            &data_def,
            &shard_argnums,
            group,
        )?;
        let moments = if rule.has_moments() {
            params
                .iter()
                .map(|p| crate::creation::zeros(p.shape()))
                .collect::<Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        let step0 = Tensor::scalar_f64(0.0);
        let loss = &self.loss;
        let def = &params_def;
        let gradient = |(p, data): (Vec<Tensor>, D)| -> Result<(Tensor, Vec<Tensor>)> {
            let tree: P = rebuild(def, p)?;
            let (value, grads): (Tensor, P) =
                crate::value_and_grad(|(p, d): (P, D)| loss(&p, &d)).call(&(tree, data))?;
            Ok((value, float_leaves("Trainer", &grads)?.0))
        };
        let grad = crate::jit(&gradient)
            .name("Trainer.step (gradient)")
            .device(self.device.clone())
            .precision(self.precision.as_deref())
            .lower(&(params.clone(), data_def.unflatten::<D>(data.clone())?))?
            .compile()
            .entry()
            .clone();
        let rule_ref = &rule;
        let update_fn = |(p, m, v, step, g, rate): UpdateArgs| -> Result<UpdateOut> {
            let g = match rule_ref.clip_norm {
                Some(max_norm) => clip_leaves(&g, max_norm)?.0,
                None => g,
            };
            let scalars = match rate.into_iter().next() {
                Some(lr) => rule_ref.step_tensors_with(&step, lr)?,
                None => rule_ref.step_tensors(&step)?,
            };
            let (p, m, v) = apply(rule_ref.kind, &p, &g, &m, &v, &scalars)?;
            Ok((p, m, v, crate::add(&step, 1.0)?))
        };
        let lower = |host_rate: bool| {
            let rate = if host_rate {
                vec![Tensor::scalar_f64(0.0)]
            } else {
                Vec::new()
            };
            let args: UpdateArgs = (
                params.clone(),
                moments.clone(),
                moments.clone(),
                step0.clone(),
                params.clone(),
                rate,
            );
            crate::jit(&update_fn)
                .name("Trainer.step (update)")
                .device(self.device.clone())
                .precision(self.precision.as_deref())
                .lower(&args)
        };
        let mut host_rate = !rule.lr.runs_in_plan();
        let lowered = match lower(host_rate) {
            Err(Error::Tracer { .. }) if !host_rate && rule.lr.is_schedule() => {
                host_rate = true;
                lower(true)?
            }
            other => other?,
        };
        let update = lowered.compile().entry().clone();
        if !grad.outputs_in_order() || !update.outputs_in_order() {
            return Err(Error::Internal {
                message: "the data-parallel trainer's plans returned static leaves".into(),
            });
        }
        let backend = update.runnable().backend().clone();
        let n_params = params.len();
        let state = upload_state(&backend, &params, &moments, &step0)?;
        let data_buffers = upload_tensors(&backend, &data)?;
        let description = format!(
            "Trainer(distributed=True) of {} with {} parameters of digest {:016x}",
            grad.signature,
            rule.name,
            distributed::tree_digest(&params)?
        );
        let parallel = DataParallel {
            group: group.clone(),
            reduction: config.reduction,
            shard_argnums,
            check_every: config.check_every,
            grad: grad.clone(),
            update,
            n_params,
        };
        let trainer = Trainer {
            loss_fn: self.loss,
            rule,
            device: self.device,
            precision: self.precision,
            entry: grad,
            params_def,
            data_def,
            data,
            data_buffers,
            state,
            n_params,
            step: 0,
            host_rate,
            batch_argnums: self.batch_argnums,
            check_every: self.check_every,
            last_good: None,
            last_loss: None,
            loss_plan: OnceLock::new(),
            parallel: Some(parallel),
        };
        Ok((trainer, description))
    }
}

impl DataParallel {
    /// What the ranks compare before step `step`: its number and signature, and at replica
    /// checks the digest of the parameters the update will start from.
    fn describe(&self, step: u64, state: &[Buffer]) -> Result<String> {
        let mut text = format!("Trainer.step {step} of {}", self.grad.signature);
        if step > 0 && step.is_multiple_of(self.check_every) {
            let backend = self.update.runnable().backend();
            let params = state[..self.n_params]
                .iter()
                .map(|b| download(backend, b))
                .collect::<Result<Vec<Tensor>>>()?;
            text.push_str(&format!(
                " with parameters of digest {:016x}",
                distributed::tree_digest(&params)?
            ));
        }
        Ok(text)
    }

    /// One step on the resident `state` and `data` (see the module docs): the memory of the
    /// loss, then of the new state, as the ordinary trainer's plan returns them. `rate` is the
    /// host rate's buffer, when there is one.
    pub(super) fn run(
        &self,
        step: u64,
        state: &[Buffer],
        data: &[Buffer],
        rate: Option<Buffer>,
    ) -> Result<Vec<Memory>> {
        let backend = self.update.runnable().backend().clone();
        let local = (|| {
            let args = state[..self.n_params]
                .iter()
                .chain(data)
                .map(BufferArg::Lent)
                .collect();
            let outs = self.grad.runnable().run_buffers(args)?;
            outs.iter()
                .map(|b| download(&backend, b).map(Leaf::Tensor))
                .collect::<Result<Vec<Leaf>>>()
        })();
        let description = self.describe(step, state)?;
        let reduced = distributed::reduce_leaves(
            &self.group,
            "Trainer.step",
            &description,
            local,
            self.reduction.op(),
        )?;
        let mut buffers = reduced
            .iter()
            .map(|leaf| match leaf {
                Leaf::Tensor(t) => upload(&backend, t),
                _ => Err(Error::Internal {
                    message: "the gradient plan returned a non-tensor".into(),
                }),
            })
            .collect::<Result<Vec<Buffer>>>()?
            .into_iter();
        let loss = buffers.next().ok_or_else(|| Error::Internal {
            message: "the gradient plan returned no loss".into(),
        })?;
        let mut args = Vec::with_capacity(state.len() + self.n_params + 1);
        args.extend(state.iter().map(|b| BufferArg::Donated(b.clone())));
        args.extend(buffers.map(BufferArg::Donated));
        args.extend(rate.into_iter().map(BufferArg::Donated));
        let mut outs = vec![loss.memory()?];
        outs.extend(self.update.runnable().run_memories(args)?);
        Ok(outs)
    }

    /// Takes part in step `step`'s reduction with this rank's failure `error`, so that every
    /// rank fails the step; returns `error`.
    fn fail(&self, step: u64, error: Error) -> Error {
        let description = format!("Trainer.step {step} of {}", self.grad.signature);
        match distributed::reduce_leaves(
            &self.group,
            "Trainer.step",
            &description,
            Err(error),
            self.reduction.op(),
        ) {
            Err(e) => e,
            Ok(_) => Error::Internal {
                message: "a failed step was reduced".into(),
            },
        }
    }

    /// The reduction over the ranks of a rank's loss at `step` (`Trainer.loss`).
    pub(super) fn reduce_loss(&self, step: u64, loss: Result<Tensor>) -> Result<Tensor> {
        let description = format!("Trainer.loss after step {step} of {}", self.grad.signature);
        let reduced = distributed::reduce_leaves(
            &self.group,
            "Trainer.loss",
            &description,
            loss.map(|l| vec![Leaf::Tensor(l)]),
            self.reduction.op(),
        )?;
        match reduced.into_iter().next() {
            Some(Leaf::Tensor(t)) => Ok(t),
            _ => Err(Error::Internal {
                message: "the reduced loss is missing".into(),
            }),
        }
    }

    /// `batch` (for the data arguments `batch_argnums`) with the arguments this trainer shards
    /// cut to this rank's rows.
    fn shard_batch<B: Tree>(&self, batch: &B, batch_argnums: &[usize]) -> Result<Flat> {
        let (leaves, def) = crate::tree::flatten(batch);
        let sharded: Vec<usize> = batch_argnums
            .iter()
            .enumerate()
            .filter(|(_, a)| self.shard_argnums.contains(a))
            .map(|(k, _)| k)
            .collect();
        let who = "Trainer.step(distributed=True)";
        let leaves = if batch_argnums.len() == 1 {
            // The batch is the one argument itself (which may be a tuple).
            let whole = TreeDef::Tuple(vec![def.clone()]);
            distributed::shard_args(who, leaves, &whole, &sharded, &self.group)?
        } else if def.positional_args().len() == batch_argnums.len() {
            distributed::shard_args(who, leaves, &def, &sharded, &self.group)?
        } else {
            // A batch of the wrong arity: the trainer's own check names it.
            leaves
        };
        Ok(Flat { leaves, def })
    }
}

impl<P, D, L> Trainer<P, D, L>
where
    P: Tree,
    D: Tree,
    L: Fn(&P, &D) -> Result<Tensor>,
{
    /// `step_with` of a data-parallel trainer: the batch is sharded, and a batch this rank
    /// cannot use fails the step on every rank.
    pub(super) fn step_with_data_parallel<B: Tree>(&mut self, batch: &B) -> Result<()> {
        let Some(parallel) = &self.parallel else {
            return Err(Error::Internal {
                message: "not a data-parallel trainer".into(),
            });
        };
        let backend = self.entry.runnable().backend().clone();
        let prepared = parallel
            .shard_batch(batch, &self.batch_argnums)
            .and_then(|flat| self.replaced_data(&flat))
            .and_then(|data| {
                let buffers = upload_tensors(&backend, &data)?;
                Ok((data, buffers))
            });
        let (data, buffers) = match prepared {
            Ok(p) => p,
            Err(e) => return Err(parallel.fail(self.step, e)),
        };
        self.run_step(Some(&buffers))?;
        self.data = data;
        self.data_buffers = buffers;
        Ok(())
    }

    /// The process group of a data-parallel trainer (`None` for an ordinary one).
    pub fn group(&self) -> Option<&Group> {
        self.parallel.as_ref().map(|p| &p.group)
    }
}
