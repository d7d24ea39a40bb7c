//! `jacobian` and `hessian` (transforms.md §8): dense blocks `[*out.shape, *in.shape]`.
//!
//! The shell over [`crate::staging`]: it selects the differentiated arguments, traces the
//! function, asks `quabla-autodiff` for the graph of every block ([`jacobian_graph`], which
//! chooses forward or reverse mode and batches over a basis generated in the graph), and nests
//! the blocks: the output's structure outside, the selected inputs' structure inside. `hessian`
//! is the Jacobian of `grad`.

use super::grad::Grad;
use crate::error::{Error, Result};
use crate::staging::{
    self, config_methods, debug_as_shell, selection_methods, Call, Prepared, Selection, Shell, Wrt,
};
use crate::trace::{OutSlot, TracedFunction};
use crate::tree::{self, Tree, TreeDef};
use quabla_autodiff::{jacobian_graph_with_mode, JacobianMode};

/// `jacobian(f)`: dense blocks `[*out.shape, *in.shape]` (transforms.md §8). Build with
/// [`jacobian`].
pub struct Jacobian<F, A> {
    shell: Shell<F, A>,
    selection: Selection,
    mode: JacobianMode,
}

/// The dense Jacobian of `f` with respect to its first argument. Forward mode over the input
/// basis unless the output has fewer elements than the inputs (then reverse mode over the
/// output basis); the basis vectors are generated inside one batched graph.
pub fn jacobian<A: Tree, F>(f: F) -> Jacobian<F, A> {
    Jacobian {
        shell: Shell::new("jacobian", f),
        selection: Selection::default(),
        mode: JacobianMode::Auto,
    }
}

/// [`jacobian`] in forward mode whatever the sizes (JAX's `jacfwd`): cheaper for few inputs
/// and many outputs; through a `custom_vjp` it raises like [`crate::jvp`].
pub fn jacfwd<A: Tree, F>(f: F) -> Jacobian<F, A> {
    Jacobian {
        shell: Shell::new("jacfwd", f),
        selection: Selection::default(),
        mode: JacobianMode::Forward,
    }
}

/// [`jacobian`] in reverse mode whatever the sizes (JAX's `jacrev`): cheaper for many inputs
/// and few outputs.
pub fn jacrev<A: Tree, F>(f: F) -> Jacobian<F, A> {
    Jacobian {
        shell: Shell::new("jacrev", f),
        selection: Selection::default(),
        mode: JacobianMode::Reverse,
    }
}

impl<A: Tree, F> Jacobian<F, A> {
    config_methods!();
    selection_methods!();

    /// Calls it; `J` is the result type (the output's structure holding, per output leaf, a
    /// block tree with the selected inputs' structure).
    pub fn call<R: Tree, J: Tree>(&self, args: &impl Tree) -> Result<J>
    where
        F: Fn(A) -> Result<R>,
    {
        jacobian_call::<A, R, J, F>(
            &|a| (self.shell.f)(a),
            &self.selection,
            self.mode,
            &self.shell,
            args,
        )
    }
}

/// The body of a Jacobian call, shared by `jacobian` and `hessian` (which own their caches).
fn jacobian_call<A: Tree, R: Tree, J: Tree, G>(
    f: &dyn Fn(A) -> Result<R>,
    selection: &Selection,
    mode: JacobianMode,
    shell: &Shell<G, A>,
    args: &impl Tree,
) -> Result<J> {
    shell.config.validate()?;
    selection.validate()?;
    let call = Call {
        cache: &shell.cache,
        owner: shell.owner(&[]),
        wrt: Wrt::Args(&selection.argnums),
        target: &shell.target,
        extra: None,
    };
    staging::execute(&call, args, |prepared| stage(f, prepared, selection, mode))
}

/// The graph of every block, and the result structure: per float output leaf (in order) the
/// selected inputs' structure of blocks, `None` for bool outputs.
fn stage<A: Tree, R: Tree>(
    f: &dyn Fn(A) -> Result<R>,
    prepared: &Prepared,
    selection: &Selection,
    mode: JacobianMode,
) -> Result<TracedFunction> {
    let TracedFunction {
        graph,
        captures,
        out_def,
        out_slots,
    } = prepared.trace::<A, R>(f)?;
    if out_slots.iter().any(|s| matches!(s, OutSlot::Static(_))) {
        return Err(Error::invalid(
            "jacobian needs a function whose outputs are all tensors",
        ));
    }
    // AR20: a function of only bool outputs has nothing to differentiate.
    if graph
        .outputs()
        .iter()
        .all(|o| !graph.node(*o).ty.dtype.is_float())
    {
        return Err(Error::invalid(
            "jacobian requires a floating output, got bool",
        ));
    }
    let wrt = prepared.wrt_with_captures(captures.len());
    let blocks = jacobian_graph_with_mode(&graph, &wrt, mode)?;
    let (in_def, order) = prepared.gradient_def(&selection.argnums, selection.as_tuple)?;
    // Blocks come in output-major order; bool outputs have none. Every output leaf is a plan
    // output here (checked above), leaf `k` being output `k`.
    let n_wrt = wrt.iter().filter(|&&w| w).count();
    let float_out: Vec<bool> = graph
        .outputs()
        .iter()
        .map(|o| graph.node(*o).ty.dtype.is_float())
        .collect();
    let mut first_block = Vec::with_capacity(float_out.len());
    let mut blocks_so_far = 0;
    for &is_float in &float_out {
        first_block.push(blocks_so_far);
        if is_float {
            blocks_so_far += n_wrt;
        }
    }
    let mut slots = Vec::new();
    let def = out_def.map_leaves(&mut |k| {
        if float_out[k] {
            slots.extend(order.iter().map(|&j| OutSlot::Plan(first_block[k] + j)));
            in_def.clone()
        } else {
            TreeDef::None
        }
    });
    Ok(TracedFunction {
        graph: blocks,
        captures,
        out_def: def,
        out_slots: slots,
    })
}

/// `hessian(f)`: the forward-mode Jacobian of `grad(f)`, blocks `[*in_i, *in_j]`
/// (reverse-over-reverse when the function contains a `custom_vjp`).
pub struct Hessian<F, A> {
    /// The gradient it differentiates; the Hessian's own configuration, cache and selection
    /// are those of this shell.
    shell: Shell<Grad<F, A>, A>,
}

debug_as_shell!(Jacobian, Hessian);

/// The dense Hessian of a scalar function with respect to its first argument.
pub fn hessian<A: Tree, F>(f: F) -> Hessian<F, A> {
    Hessian {
        shell: Shell::new("hessian", super::grad::grad(f).transform_name("hessian")),
    }
}

impl<A: Tree, F> Hessian<F, A> {
    config_methods!();

    /// Differentiate with respect to positional argument `i`.
    pub fn argnum(mut self, i: usize) -> Self {
        self.shell.f = self.shell.f.argnum(i);
        self
    }

    /// Differentiate with respect to several positional arguments.
    pub fn argnums(mut self, argnums: &[usize]) -> Self {
        self.shell.f = self.shell.f.argnums(argnums);
        self
    }

    /// Calls it; `H` is the result type.
    pub fn call<R: Tree, H: Tree>(&self, args: &impl Tree) -> Result<H>
    where
        F: Fn(A) -> Result<R>,
    {
        // The gradient is staged inside the Jacobian's trace, which inlines it.
        let grad = &self.shell.f;
        let gradient = |a: A| -> Result<tree::Value> { grad.call::<R, tree::Value>(&a) };
        jacobian_call::<A, tree::Value, H, _>(
            &gradient,
            grad.selection(),
            JacobianMode::Auto,
            &self.shell,
            args,
        )
    }
}
