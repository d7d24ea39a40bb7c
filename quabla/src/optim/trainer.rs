//! The [`Trainer`]: a training loop whose loss, gradient and optimizer update are one compiled
//! plan, run step after step on state that stays where the plan runs.
//!
//! At `build` the trainer traces one function of `(params, m, v, step, data)` that calls
//! `value_and_grad(loss)` (inlined into the trace), clips the gradients when asked, forms the
//! rate and the bias corrections from the step ([`super::rules::Rule::step_tensors`]), applies
//! [`super::rules::apply`] and returns the loss with the new parameters, moments and step. The
//! traced graph is compiled once for the call's signature.
//!
//! Between steps the trainer keeps the plan's inputs as buffers of the plan's backend
//! ([`quabla_backend::Buffer`]): parameters, moments and the step count, which each step
//! *donates* to the plan (so the new state may take their storage: on the CPU a loop of steps
//! allocates nothing for its state), and the data, which steps lend. A step runs the plan on
//! those buffers ([`crate::runtime::Runnable::run_buffers`]) and keeps its outputs as the next
//! step's state; nothing crosses to the host unless the user asks (`loss`, `last_loss`,
//! `params`, `opt_state`, the finite check of `check_finite_every`), so on a device a step
//! moves no data at all. The one exception is a rate given as a host function of the step
//! number (a Rust closure of a `u64`), whose value is uploaded each step.
//!
//! On the CPU a step equals `jit(value_and_grad(loss))` followed by the functional `update`,
//! bit for bit (E69): the update nodes are the functional update's nodes in the same order, and
//! every float64 node rounds once in both.
//!
//! A step that fails (cancelled, out of memory, a backend error) leaves the trainer as it was:
//! the runtime gives donated buffers back when a run fails.

use super::clip::clip_leaves;
use super::rules::{apply, Optimizer, Rule, State};
use super::{float_leaves, rebuild};
use crate::error::{Error, Result};
use crate::runtime::Runnable;
use crate::staging::{leaf_signature, Entry};
use crate::tensor::Tensor;
use crate::transforms::jit::Compiled;
use crate::tree::{Leaf, Tree, TreeDef};
use quabla_backend::{Backend, Buffer, BufferArg, Memory};
use std::fmt;
use std::sync::{Arc, OnceLock};

mod data_parallel;
pub use data_parallel::DEFAULT_REPLICA_CHECK;

/// The traced function's arguments: flat parameters, moments `m` and `v`, the step count, the
/// data, and the host rate (empty unless the rate is a host-only schedule).
type StepArgs<D> = (
    Vec<Tensor>,
    Vec<Tensor>,
    Vec<Tensor>,
    Tensor,
    D,
    Vec<Tensor>,
);
/// Its results: the loss before the update, then the new parameters, moments and step.
type StepOut = (Tensor, Vec<Tensor>, Vec<Tensor>, Vec<Tensor>, Tensor);

/// Builds a [`Trainer`]: `Trainer::new(loss, params, opt, data).batch_argnums(&[0]).build()?`.
pub struct TrainerBuilder<P, D, L> {
    loss: L,
    params: P,
    rule: Rule,
    data: D,
    device: String,
    precision: Option<String>,
    batch_argnums: Vec<usize>,
    check_every: Option<u64>,
    /// `distributed(true)` and its options (`data_parallel.rs`).
    parallel: data_parallel::Config,
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
/// traced once with its gradient and the optimizer update into one compiled plan, whose state
/// stays resident on the trainer's device (see the module docs).
pub struct Trainer<P, D, L> {
    loss_fn: L,
    rule: Rule,
    device: String,
    precision: Option<String>,
    entry: Arc<Entry>,
    params_def: TreeDef,
    /// The structure and leaves of the current data (its tensor leaves as they were given,
    /// to rebuild the data tree; the plan reads `data_buffers`).
    data_def: TreeDef,
    data: Vec<Leaf>,
    /// The data's tensor leaves, resident.
    data_buffers: Vec<Buffer>,
    /// The plan's state inputs, resident: parameters, then `m`, then `v`, then the step count.
    state: Vec<Buffer>,
    n_params: usize,
    /// Completed steps (the host's count; the plan keeps its own in `state`).
    step: u64,
    /// Whether the rate is uploaded each step (a host-only schedule).
    host_rate: bool,
    batch_argnums: Vec<usize>,
    check_every: Option<u64>,
    /// The step and a snapshot of the state at the last check whose loss was finite (buffers
    /// sharing the state's storage, which a donation then never reuses).
    last_good: Option<(u64, Vec<Buffer>)>,
    last_loss: Option<Memory>,
    loss_plan: OnceLock<Compiled<(P, D), Tensor>>,
    /// The gradient and update plans and the process group of a data-parallel trainer, which
    /// runs them instead of `entry`'s fused plan (`data_parallel.rs`).
    parallel: Option<data_parallel::DataParallel>,
}

impl<P, D, L> fmt::Debug for Trainer<P, D, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trainer")
            .field("optimizer", &self.rule.name)
            .field("device", &self.device)
            .field("step", &self.step)
            .field("signature", &self.entry.signature.to_string())
            .finish_non_exhaustive()
    }
}

impl<P, D, L> TrainerBuilder<P, D, L>
where
    P: Tree,
    D: Tree,
    L: Fn(&P, &D) -> Result<Tensor>,
{
    /// The device the plan runs on and the state lives on: `"cpu"` (default), or any
    /// registered backend (`"cuda"`, `"cuda:N"`, a plugin's name).
    pub fn device(mut self, device: impl Into<String>) -> Self {
        self.device = device.into();
        self
    }

    /// `None` (the reference rules) or `"float64"`: on CUDA, run the step in float64
    /// (numerics.md §1.6; the parameters and data must be float64); ignored on the CPU.
    pub fn precision(mut self, precision: Option<&str>) -> Self {
        self.precision = precision.map(str::to_string);
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
    /// last check whose loss was finite. `n` must be at least 1. Each check reads the loss back
    /// from the device.
    pub fn check_finite_every(mut self, n: u64) -> Self {
        self.check_every = Some(n);
        self
    }

    /// Validates the configuration, traces and compiles the step plan, and places the state
    /// and the data on the device. A schedule is traced into the plan once, here; one that
    /// cannot be traced (a tracer error: it reads the step as a host number) is evaluated on
    /// the host at every step instead, and its value uploaded.
    pub fn build(self) -> Result<Trainer<P, D, L>> {
        if self.parallel.enabled() {
            return self.build_data_parallel();
        }
        let rule = self.rule;
        rule.validate()?;
        if self.check_every == Some(0) {
            return Err(Error::invalid("check_finite_every must be at least 1"));
        }
        let (params, params_def) = float_leaves("Trainer", &self.params)?;
        let (data, data_def) = crate::tree::flatten(&self.data);
        check_batch_argnums(&self.batch_argnums, data_def.positional_args().len())?;
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
        let rule_ref = &rule;
        let fused = |(p, m, v, step, data, rate): StepArgs<D>| -> Result<StepOut> {
            let tree: P = rebuild(def, p.clone())?;
            let (value, grads): (Tensor, P) =
                crate::value_and_grad(|(p, d): (P, D)| loss(&p, &d)).call(&(tree, data))?;
            let (g, _) = float_leaves("Trainer", &grads)?;
            let g = match rule_ref.clip_norm {
                Some(max_norm) => clip_leaves(&g, max_norm)?.0,
                None => g,
            };
            let scalars = match rate.into_iter().next() {
                Some(lr) => rule_ref.step_tensors_with(&step, lr)?,
                None => rule_ref.step_tensors(&step)?,
            };
            let (p, m, v) = apply(rule_ref.kind, &p, &g, &m, &v, &scalars)?;
            Ok((value, p, m, v, crate::add(&step, 1.0)?))
        };
        let lower = |host_rate: bool| {
            // A placeholder for the host rate: the plan takes its value at every step.
            let rate = if host_rate {
                vec![Tensor::scalar_f64(0.0)]
            } else {
                Vec::new()
            };
            let args: StepArgs<D> = (
                params.clone(),
                moments.clone(),
                moments.clone(),
                step0.clone(),
                data_def.unflatten(data.clone())?,
                rate,
            );
            crate::jit(&fused)
                .name("Trainer.step")
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
        let entry = lowered.compile().entry().clone();
        if !entry.outputs_in_order() {
            return Err(Error::Internal {
                message: "the trainer's plan returned static leaves".into(),
            });
        }
        let backend = entry.runnable().backend().clone();
        let n_params = params.len();
        let state = upload_state(&backend, &params, &moments, &step0)?;
        let data_buffers = upload_tensors(&backend, &data)?;
        Ok(Trainer {
            loss_fn: self.loss,
            rule,
            device: self.device,
            precision: self.precision,
            entry,
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
            parallel: None,
        })
    }
}

/// `batch_argnums` must name distinct data arguments below `n_args`.
fn check_batch_argnums(batch_argnums: &[usize], n_args: usize) -> Result<()> {
    for (i, &a) in batch_argnums.iter().enumerate() {
        if a >= n_args || batch_argnums[..i].contains(&a) {
            return Err(Error::invalid(format!(
                "batch_argnums must name distinct data arguments below {n_args}, got {batch_argnums:?}"
            )));
        }
    }
    Ok(())
}

/// A tensor as a new buffer of `backend` (one counted upload on a device).
fn upload(backend: &Arc<dyn Backend>, t: &Tensor) -> Result<Buffer> {
    let host = t.host_for("Trainer")?;
    let memory = backend.upload(host)?;
    Ok(Buffer::new(
        backend.name(),
        host.dtype(),
        host.shape.clone(),
        memory,
    ))
}

/// The tensor leaves of `leaves`, each as a new buffer of `backend`.
/// The resident state of a step, in the plan's order: parameters, first and second moments
/// (both starting from `moments`), and the step count.
fn upload_state(
    backend: &Arc<dyn Backend>,
    params: &[Tensor],
    moments: &[Tensor],
    step0: &Tensor,
) -> Result<Vec<Buffer>> {
    params
        .iter()
        .chain(moments)
        .chain(moments)
        .chain([step0])
        .map(|t| upload(backend, t))
        .collect()
}

fn upload_tensors(backend: &Arc<dyn Backend>, leaves: &[Leaf]) -> Result<Vec<Buffer>> {
    leaves
        .iter()
        .filter_map(Leaf::as_tensor)
        .map(|t| upload(backend, t))
        .collect()
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
            precision: None,
            batch_argnums: Vec::new(),
            check_every: None,
            parallel: data_parallel::Config::default(),
        }
    }

    /// One optimizer step on the current data.
    pub fn step(&mut self) -> Result<()> {
        self.run_step(None)
    }

    /// One optimizer step after replacing the data arguments named by `batch_argnums` (in that
    /// order) with `batch`: one value for one argument, a tuple for several. Each must have the
    /// structure, shapes and dtypes (and static values) of the argument it replaces: otherwise
    /// TF8 or TF10, and the trainer is untouched. The compiled plan is reused; the batch is
    /// uploaded to the device once.
    pub fn step_with<B: Tree>(&mut self, batch: &B) -> Result<()> {
        if self.parallel.is_some() {
            return self.step_with_data_parallel(batch);
        }
        let data = self.replaced_data(batch)?;
        let buffers = upload_tensors(self.entry.runnable().backend(), &data)?;
        self.run_step(Some(&buffers))?;
        self.data = data;
        self.data_buffers = buffers;
        Ok(())
    }

    /// The data leaves with the batch arguments replaced, after checking them.
    fn replaced_data<B: Tree>(&self, batch: &B) -> Result<Vec<Leaf>> {
        let (leaves, def) = crate::tree::flatten(batch);
        if self.batch_argnums.is_empty() {
            return Err(Error::invalid(
                "Trainer.step got a batch, but the trainer was built without batch_argnums; \
                 name the data arguments a batch replaces with batch_argnums",
            ));
        }
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

    /// Runs one step on the resident state and `data` (the current data when `None`).
    fn run_step(&mut self, data: Option<&[Buffer]>) -> Result<()> {
        self.rule.check_rate(self.step)?;
        let checking = self
            .check_every
            .is_some_and(|n| self.step.is_multiple_of(n));
        // A check that finds a non-finite loss goes back to the last good state: keep it, in
        // buffers sharing the state's storage (which the donation below then never reuses).
        let snapshot = if checking {
            Some(
                self.state
                    .iter()
                    .map(share)
                    .collect::<Result<Vec<Buffer>>>()?,
            )
        } else {
            None
        };
        let runnable: &Runnable = self.entry.runnable();
        let rate = if self.host_rate {
            Some(upload(
                runnable.backend(),
                &Tensor::scalar_f64(self.rule.lr.at(self.step)?),
            )?)
        } else {
            None
        };
        let data = data.unwrap_or(&self.data_buffers);
        let outs = match &self.parallel {
            Some(parallel) => parallel.run(self.step, &self.state, data, rate)?,
            None => {
                let mut args = Vec::with_capacity(self.state.len() + data.len() + 1);
                args.extend(self.state.iter().map(|b| BufferArg::Donated(b.clone())));
                args.extend(data.iter().map(BufferArg::Lent));
                args.extend(rate.into_iter().map(BufferArg::Donated));
                runnable.run_memories(args)?
            }
        };
        let mut outs = outs.into_iter();
        let loss = outs.next().ok_or_else(|| Error::Internal {
            message: "the trainer's plan returned no loss".into(),
        })?;
        let state: Vec<Memory> = outs.collect();
        if state.len() != self.state.len() {
            return Err(Error::Internal {
                message: "the trainer's plan returned a state of another size".into(),
            });
        }
        if let Some(snapshot) = snapshot {
            let value = download_memory(runnable.backend(), &loss)?.item()?;
            if !value.is_finite() {
                let step = self.step;
                let kept_step = match self.last_good.take() {
                    Some((k, good)) => {
                        self.state = good.iter().map(share).collect::<Result<_>>()?;
                        self.step = k;
                        self.last_good = Some((k, good));
                        Some(k)
                    }
                    None => {
                        // No earlier check: the state before this step is the one to keep.
                        self.state = snapshot;
                        None
                    }
                };
                return Err(Error::NonFiniteLoss {
                    step,
                    loss: value,
                    kept_step,
                });
            }
            // The loss was measured at the parameters before this update.
            self.last_good = Some((self.step, snapshot));
        }
        // The state buffers, donated to the run, take its outputs: the same handles step after
        // step (nothing is allocated for them).
        for (buffer, memory) in self.state.iter().zip(state) {
            buffer.refill(memory)?;
        }
        self.step += 1;
        self.last_loss = Some(loss);
        Ok(())
    }

    /// The loss at the current parameters and latest data, as a rank-0 tensor (computed by a
    /// plan of its own on the resident state; one readback).
    pub fn loss(&self) -> Result<Tensor> {
        if self.loss_plan.get().is_none() {
            let args = (self.params()?, self.data_tree()?);
            let loss = &self.loss_fn;
            let compiled = crate::jit(|(p, d): (P, D)| loss(&p, &d))
                .name("Trainer.loss")
                .device(self.device.clone())
                .precision(self.precision.as_deref())
                .lower(&args)?
                .compile();
            let _ = self.loss_plan.set(compiled);
        }
        let plan = self.loss_plan.get().ok_or_else(|| Error::Internal {
            message: "the trainer's loss plan is missing".into(),
        })?;
        let runnable = plan.entry().runnable();
        let args = self.state[..self.n_params]
            .iter()
            .chain(&self.data_buffers)
            .map(BufferArg::Lent)
            .collect();
        let out = runnable.run_buffers(args)?;
        let value = out.first().ok_or_else(|| Error::Internal {
            message: "the loss plan returned no output".into(),
        })?;
        let value = download(runnable.backend(), value);
        match &self.parallel {
            // Every rank's loss is of its shard: the trainer's loss is their reduction.
            Some(parallel) => parallel.reduce_loss(self.step, value),
            None => value,
        }
    }

    /// The loss the last step computed (at the parameters before its update), read back from
    /// the device; `None` before the first step.
    pub fn last_loss(&self) -> Result<Option<Tensor>> {
        self.last_loss
            .as_ref()
            .map(|m| download_memory(self.entry.runnable().backend(), m))
            .transpose()
    }

    /// The current parameters in the original tree structure (read back from the device).
    pub fn params(&self) -> Result<P> {
        rebuild(&self.params_def, self.download(0..self.n_params)?)
    }

    /// The optimizer state in the form the functional `update` uses (read back from the
    /// device).
    pub fn opt_state(&self) -> Result<State<P>> {
        let n = self.n_params;
        let (m, v) = if self.rule.has_moments() {
            (
                Some(rebuild(&self.params_def, self.download(n..2 * n)?)?),
                Some(rebuild(&self.params_def, self.download(2 * n..3 * n)?)?),
            )
        } else {
            (None, None)
        };
        let step = self
            .download(self.state.len() - 1..self.state.len())?
            .pop()
            .ok_or_else(|| Error::Internal {
                message: "the trainer's state has no step".into(),
            })?;
        Ok(State { step, m, v })
    }

    /// Updates completed.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// The device the trainer's plan runs on.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The state buffers in `range`, read back as tensors.
    fn download(&self, range: std::ops::Range<usize>) -> Result<Vec<Tensor>> {
        let backend = self.entry.runnable().backend();
        self.state[range]
            .iter()
            .map(|b| download(backend, b))
            .collect()
    }

    /// The current data in its original structure.
    fn data_tree(&self) -> Result<D> {
        self.data_def.unflatten(self.data.clone())
    }
}

/// A buffer as a tensor (one counted download on a device; none on the CPU, whose buffers are
/// host memory).
fn download(backend: &Arc<dyn Backend>, buffer: &Buffer) -> Result<Tensor> {
    download_memory(backend, &buffer.memory()?)
}

fn download_memory(backend: &Arc<dyn Backend>, memory: &Memory) -> Result<Tensor> {
    Ok(Tensor::from_host(backend.download(memory)?, false))
}

/// Another buffer on `buffer`'s storage, which a donation of `buffer` does not end.
fn share(buffer: &Buffer) -> Result<Buffer> {
    Ok(Buffer::new(
        buffer.backend(),
        buffer.dtype(),
        buffer.shape().clone(),
        buffer.memory()?,
    ))
}
