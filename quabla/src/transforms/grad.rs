//! `grad` and `value_and_grad` (transforms.md §5): reverse mode of a scalar function with
//! respect to the arguments `argnums`.
//!
//! The shell over [`crate::staging`]: it selects the differentiated arguments, traces the
//! function, asks `quabla-autodiff` for the VJP graph seeded with ones at the output, and lays
//! out the result (`grads`, `(value, grads)`, with or without `aux`). Differentiated
//! positions are the selected arguments' float tensor leaves, and `f64` leaves there, which
//! become float64 rank-0 inputs (numerics.md §2.2); bool leaves and other scalars get `None`
//! gradients.

use crate::error::{Error, Result};
use crate::staging::{
    self, config_methods, debug_as_shell, selection_methods, Call, Prepared, Selection, Shell, Wrt,
};
use crate::trace::{OutSlot, TracedFunction};
use crate::tree::{Tree, TreeDef};
use quabla_autodiff::{vjp_graph_with, Seed, VjpOptions};

pub use quabla_autodiff::LoopTape;
use quabla_ir::Graph;

/// TF1 and AR20: the differentiated output must be a rank-0 float.
pub(crate) fn check_scalar_output(transform: &'static str, graph: &Graph) -> Result<()> {
    let out = graph
        .outputs()
        .first()
        .ok_or_else(|| Error::invalid(format!("{transform} needs a tensor output")))?;
    let ty = &graph.node(*out).ty;
    if ty.shape.rank() != 0 {
        return Err(Error::NonScalarOutput {
            transform,
            shape: ty.shape.dims().to_vec(),
            dtype: ty.dtype,
        });
    }
    if !ty.dtype.is_float() {
        return Err(Error::invalid(format!(
            "{transform} requires a floating output, got {}",
            ty.dtype.name()
        )));
    }
    Ok(())
}

/// `grad(f)` and `value_and_grad(f)`: build with [`grad`] or [`value_and_grad`].
pub struct Grad<F, A> {
    shell: Shell<F, A>,
    /// `value_and_grad`: the result starts with the value.
    with_value: bool,
    selection: Selection,
    has_aux: bool,
    /// How the reverse mode of loops keeps their forward pass.
    loop_tape: LoopTape,
}

debug_as_shell!(Grad);

/// The gradient of a scalar function with respect to its first argument (`.argnum(i)` or
/// `.argnums(&[..])` to choose): `qb::grad(f).call::<Tensor, Tensor>(&x)`.
pub fn grad<A: Tree, F>(f: F) -> Grad<F, A> {
    Grad {
        shell: Shell::new("grad", f),
        with_value: false,
        selection: Selection::default(),
        has_aux: false,
        loop_tape: LoopTape::default(),
    }
}

/// The value and the gradient: `call` returns `(value, grads)` (`((value, aux), grads)` with
/// `has_aux`).
pub fn value_and_grad<A: Tree, F>(f: F) -> Grad<F, A> {
    let mut g = grad(f);
    g.shell.transform = "value_and_grad";
    g.with_value = true;
    g
}

impl<A: Tree, F> Grad<F, A> {
    config_methods!();

    selection_methods!();

    /// The function returns `(output, aux)`; `aux` is returned unchanged.
    pub fn has_aux(mut self) -> Self {
        self.has_aux = true;
        self
    }

    /// What the reverse mode of the loops in the function keeps of their forward pass:
    /// checkpoints (the default: memory like the square root of the trips, each iteration
    /// recomputed once) or [`LoopTape::Full`] (every iteration's carry: no recomputation,
    /// memory for every trip). The gradient has the same bits either way.
    pub fn loop_tape(mut self, tape: LoopTape) -> Self {
        self.loop_tape = tape;
        self
    }

    /// This gradient under another transform's name (in TF1 and warnings).
    pub(crate) fn transform_name(mut self, transform: &'static str) -> Self {
        self.shell.transform = transform;
        self
    }

    /// The differentiated arguments.
    pub(crate) fn selection(&self) -> &Selection {
        &self.selection
    }

    /// Calls the transformed function; `G` is the type of the result (the gradients' tree,
    /// or `(value, grads)` for `value_and_grad`). `args` has the structure of the function's
    /// argument; an `f64` in a differentiated position arrives as a float64 rank-0 tensor, so
    /// the function takes a `Tensor` there.
    pub fn call<R: Tree, G: Tree>(&self, args: &impl Tree) -> Result<G>
    where
        F: Fn(A) -> Result<R>,
    {
        self.call_for::<R, G>(args, &self.shell.target)
    }

    /// [`Grad::call`] compiled for and run on `device` (`"cuda:1"`) instead of the CPU: the
    /// data-parallel `value_and_grad` runs each local device's shard this way. The trace cache
    /// is shared; the device is part of each entry's signature.
    pub(crate) fn call_on<R: Tree, G: Tree>(&self, args: &impl Tree, device: &str) -> Result<G>
    where
        F: Fn(A) -> Result<R>,
    {
        let target = crate::staging::Target {
            device: std::sync::Arc::from(device),
            ..self.shell.target.clone()
        };
        self.call_for::<R, G>(args, &target)
    }

    /// The call compiled for `target`.
    fn call_for<R: Tree, G: Tree>(
        &self,
        args: &impl Tree,
        target: &crate::staging::Target,
    ) -> Result<G>
    where
        F: Fn(A) -> Result<R>,
    {
        let s = &self.shell;
        s.config.validate()?;
        self.selection.validate()?;
        let call = Call {
            cache: &s.cache,
            owner: s.owner(&[]),
            wrt: Wrt::Args(&self.selection.argnums),
            target,
            extra: None,
        };
        staging::execute(&call, args, |prepared| self.stage::<R>(prepared))
    }

    /// Traces the function and builds its VJP graph: outputs the traced outputs (the value,
    /// then the aux leaves), then the gradients of the differentiated inputs.
    fn stage<R: Tree>(&self, prepared: &Prepared) -> Result<TracedFunction>
    where
        F: Fn(A) -> Result<R>,
    {
        let TracedFunction {
            graph,
            captures,
            out_def,
            out_slots,
        } = prepared.trace::<A, R>(&|a| (self.shell.f)(a))?;
        // The differentiated output is the first leaf (of `(output, aux)` with has_aux).
        let (value_def, aux_def) = match (&out_def, self.has_aux) {
            (TreeDef::Tuple(c), true) if c.len() == 2 => (c[0].clone(), Some(c[1].clone())),
            (_, true) => {
                return Err(Error::invalid(
                    "has_aux functions must return (output, aux)",
                ))
            }
            (d, false) => (d.clone(), None),
        };
        if value_def != TreeDef::Leaf || !matches!(out_slots.first(), Some(OutSlot::Plan(0))) {
            return Err(Error::invalid(format!(
                "{} needs a function returning one tensor{}",
                self.shell.transform,
                if self.has_aux { " and an aux tree" } else { "" }
            )));
        }
        check_scalar_output(self.shell.transform, &graph)?;
        let n_out = graph.outputs().len();
        let mut seeds = vec![Seed::None; n_out];
        seeds[0] = Seed::Ones;
        let options = VjpOptions {
            loop_tape: self.loop_tape,
        };
        let wrt = prepared.wrt_with_captures(captures.len());
        let vjp = vjp_graph_with(&graph, &wrt, &seeds, options)?;
        let (grads_def, order) =
            prepared.gradient_def(&self.selection.argnums, self.selection.as_tuple)?;
        let grad_slots = order.iter().map(|&k| OutSlot::Plan(n_out + k));
        let aux_slots = out_slots[1..].iter().cloned();
        let value_slot = std::iter::once(OutSlot::Plan(0));
        let (out_def, out_slots) = match (self.with_value, aux_def) {
            (false, None) => (grads_def, grad_slots.collect()),
            (false, Some(aux)) => (
                TreeDef::Tuple(vec![grads_def, aux]),
                grad_slots.chain(aux_slots).collect(),
            ),
            (true, None) => (
                TreeDef::Tuple(vec![TreeDef::Leaf, grads_def]),
                value_slot.chain(grad_slots).collect(),
            ),
            (true, Some(aux)) => (
                TreeDef::Tuple(vec![TreeDef::Tuple(vec![TreeDef::Leaf, aux]), grads_def]),
                value_slot.chain(aux_slots).chain(grad_slots).collect(),
            ),
        };
        Ok(TracedFunction {
            graph: vjp,
            captures,
            out_def,
            out_slots,
        })
    }
}
