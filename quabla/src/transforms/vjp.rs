//! `vjp` (transforms.md §5): reverse mode, `(f(primals), pullback)`.
//!
//! The shell over [`crate::staging`]: every argument is differentiated ([`Wrt::All`]). A call
//! runs the traced function (cached per signature like every transform) and returns a
//! [`VjpFn`] holding the pullback of that signature: the VJP graph from `quabla-autodiff` with
//! the primal values bound, compiled once and shared by every pullback of the signature.
//! [`Vjp`] (from [`vjp_fn`]) owns its cache; the free [`vjp`] caches per thread for stateless
//! functions only ([`super::stateless`]).

use super::stateless::{cache_for, stateless_key, Caches};
use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::staging::{
    self, config_methods, debug_as_shell, rebuild, CallScratch, Entry, LeafSignature, Prepared,
    Shell, Signature, Target, TraceCache, TransformConfig, Wrt,
};
use crate::tensor::Tensor;
use crate::trace::{self, OutSlot, TracedFunction};
use crate::tree::{self, Leaf, Tree, TreeDef};
use quabla_autodiff::{vjp_graph, Seed};
use quabla_ir::Graph;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, OnceLock, Weak};

thread_local! {
    /// The trace caches of [`vjp`] called with stateless functions, one per function.
    static VJP_CACHES: Caches<VjpCache> = Default::default();
}

/// The pullback of one traced signature: the VJP graph (primal inputs, then captures, then
/// one cotangent per output; primal outputs, then the cotangents of the differentiated
/// inputs), how its results form the cotangent tree, and its plan, compiled on the first
/// call outside a trace and shared by every [`VjpFn`] of that signature.
struct Pullback {
    graph: Graph,
    grads_def: TreeDef,
    grad_order: Vec<usize>,
    /// Outputs of the traced function (aux outputs included).
    n_out: usize,
    /// Differentiated outputs, which take a cotangent (all but the aux outputs).
    n_ct: usize,
    /// The structure of the differentiated output.
    out_def: TreeDef,
    compiled: OnceLock<Arc<Entry>>,
}

impl Pullback {
    fn entry(&self) -> Result<Arc<Entry>> {
        if let Some(e) = self.compiled.get() {
            return Ok(e.clone());
        }
        let leaves: Vec<LeafSignature> = self
            .graph
            .inputs()
            .map(|(_, _, ty)| LeafSignature::Array {
                dtype: ty.dtype,
                shape: ty.shape.clone(),
                weak: ty.weak,
            })
            .collect();
        let signature = Signature {
            def: TreeDef::Tuple(vec![TreeDef::Leaf; leaves.len()]),
            leaves,
            device: Arc::from("cpu"),
            precision: None,
            check_nans: crate::staging::Target::cpu().checks_nans(),
        };
        let n = self.graph.outputs().len();
        let slots = (0..n).map(OutSlot::Plan).collect();
        let staged = TracedFunction {
            graph: self.graph.clone(),
            captures: Vec::new(),
            out_def: TreeDef::List(vec![TreeDef::Leaf; n]),
            out_slots: slots,
        };
        let entry = Arc::new(Entry::compile(signature, staged)?);
        // Two threads may compile at once; either plan is the same.
        Ok(self.compiled.get_or_init(|| entry).clone())
    }
}

/// The trace cache of a `vjp`: the forward plans by signature, and the pullback of each
/// cached forward plan.
#[derive(Default)]
struct VjpCache {
    forward: TraceCache,
    /// Pullbacks by forward entry; those whose entry was evicted (dead `Weak`) are dropped
    /// when the next one is added.
    pullbacks: Mutex<Vec<(Weak<Entry>, Arc<Pullback>)>>,
}

impl VjpCache {
    fn len(&self) -> usize {
        self.forward.len()
    }

    fn pullback(&self, entry: &Arc<Entry>) -> Option<Arc<Pullback>> {
        let pullbacks = self.pullbacks.lock().unwrap_or_else(|e| e.into_inner());
        pullbacks
            .iter()
            .find(|(e, _)| std::ptr::eq(e.as_ptr(), Arc::as_ptr(entry)))
            .map(|(_, p)| p.clone())
    }

    fn remember(&self, entry: &Arc<Entry>, pullback: Arc<Pullback>) {
        let mut pullbacks = self.pullbacks.lock().unwrap_or_else(|e| e.into_inner());
        pullbacks.retain(|(e, _)| e.strong_count() > 0);
        pullbacks.push((Arc::downgrade(entry), pullback));
    }
}

/// The pullback returned by [`vjp`]: maps output cotangents to one cotangent tree per primal
/// argument.
pub struct VjpFn<A, R> {
    pullback: Arc<Pullback>,
    /// Bound to the graph's primal inputs and captures.
    operands: Vec<Tensor>,
    _types: PhantomData<fn(R) -> A>,
}

impl<A, R> fmt::Debug for VjpFn<A, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VjpFn(outputs={})", self.pullback.out_def)
    }
}

impl<A: Tree, R: Tree> VjpFn<A, R> {
    /// Cotangents for the primals, given a cotangent of the output (same structure, shapes
    /// and dtypes as the output). The result has the structure of the primals.
    pub fn call<G: Tree>(&self, cotangent: &R) -> Result<G> {
        let p = &self.pullback;
        let (leaves, def) = tree::flatten(cotangent);
        if def != p.out_def {
            return Err(Error::Structure {
                message: format!("pytree structures differ: {} vs {}", p.out_def, def),
            });
        }
        let mut operands = self.operands.clone();
        for leaf in leaves {
            match leaf {
                Leaf::Tensor(t) => operands.push(t),
                Leaf::F64(v) => operands.push(crate::creation::array(v)?),
                _ => {}
            }
        }
        let expected = p.graph.inputs().count();
        if operands.len() != expected {
            return Err(Error::Structure {
                message: format!(
                    "pytree structures differ: the cotangent has {} tensor leaves, the output {}",
                    operands.len() + p.n_ct - expected,
                    p.n_ct
                ),
            });
        }
        for ((_, name, ty), t) in p.graph.inputs().zip(&operands).skip(expected - p.n_ct) {
            if t.dtype() != ty.dtype || t.shape() != ty.shape.dims() {
                return Err(Error::invalid(format!(
                    "{name}: cotangent {}{:?} does not match the output {}{}",
                    t.dtype().name(),
                    t.shape(),
                    ty.dtype.name(),
                    ty.shape
                )));
            }
        }
        let outs = if trace::active() {
            trace::inline(&p.graph, operands.iter().map(Operand::from).collect())?
        } else {
            p.entry()?.runnable().run_tensors(&operands)?
        };
        let slots: Vec<OutSlot> = p
            .grad_order
            .iter()
            .map(|&k| OutSlot::Plan(p.n_out + k))
            .collect();
        rebuild(&p.grads_def, &slots, outs)
    }
}

/// Reverse mode: `(f(primals), pullback)`. The pullback maps an output cotangent to the
/// cotangents of every primal argument (a tuple over the positional arguments when `primals`
/// is a tuple).
///
/// Traces are cached per signature (transforms.md §2) when `f` is stateless — a closure that
/// captures nothing, or a fn item — so calling `qb::vjp(f, ..)` in a loop traces once per
/// shape, and pullbacks of one signature share one compiled plan. A closure with captures is
/// traced on every call, because its captured values may differ from call to call; use
/// [`vjp_fn`], which owns its cache, to reuse its traces.
pub fn vjp<A: Tree, R: Tree>(f: impl Fn(A) -> Result<R>, primals: &A) -> Result<(R, VjpFn<A, R>)> {
    let cache = cache_for(&VJP_CACHES, stateless_key("vjp", &f));
    vjp_call(
        &f,
        &cache,
        &TransformConfig::default(),
        &Target::cpu(),
        primals,
    )
}

/// `vjp` as a transformed function that owns its trace cache: build with [`vjp_fn`], call
/// with [`Vjp::call`].
pub struct Vjp<F, A> {
    shell: Shell<F, A, VjpCache>,
}

debug_as_shell!(Vjp);

/// Reverse mode of `f` with a trace cache of its own (transforms.md §2.2): every call with a
/// signature seen before reuses its trace and plans, whatever `f` captures.
/// `qb::vjp_fn(f).call(&primals)` equals `qb::vjp(f, &primals)`.
pub fn vjp_fn<A: Tree, F>(f: F) -> Vjp<F, A> {
    Vjp {
        shell: Shell::new("vjp", f),
    }
}

impl<A: Tree, F> Vjp<F, A> {
    config_methods!();

    /// `(f(primals), pullback)`, as [`vjp`].
    pub fn call<R: Tree>(&self, primals: &A) -> Result<(R, VjpFn<A, R>)>
    where
        F: Fn(A) -> Result<R>,
    {
        let s = &self.shell;
        vjp_call(&|a| (s.f)(a), &s.cache, &s.config, &s.target, primals)
    }

    /// `f` returns `(output, aux)`: only `output` is differentiated, and the call returns
    /// `(output, pullback, aux)` (`vjp(..., has_aux=True)`).
    pub fn has_aux(self) -> VjpAux<F, A> {
        VjpAux { inner: self }
    }
}

/// A [`Vjp`] of a function returning `(output, aux)`: build with [`Vjp::has_aux`].
pub struct VjpAux<F, A> {
    inner: Vjp<F, A>,
}

impl<F, A> fmt::Debug for VjpAux<F, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vjp({}, has_aux)", self.inner.shell.config.name)
    }
}

impl<A: Tree, F> VjpAux<F, A> {
    /// `(output, pullback, aux)`: the pullback maps a cotangent of `output` alone.
    pub fn call<R: Tree, X: Tree>(&self, primals: &A) -> Result<(R, VjpFn<A, R>, X)>
    where
        F: Fn(A) -> Result<(R, X)>,
    {
        let v = &self.inner.shell;
        let ((out, aux), pullback, operands) =
            vjp_stage::<A, (R, X)>(&|a| (v.f)(a), &v.cache, &v.config, &v.target, primals, true)?;
        let pullback = VjpFn {
            pullback,
            operands,
            _types: PhantomData,
        };
        Ok((out, pullback, aux))
    }
}

/// The body of a `vjp` call, shared by [`vjp`] and [`Vjp`].
fn vjp_call<A: Tree, R: Tree>(
    f: &dyn Fn(A) -> Result<R>,
    cache: &VjpCache,
    config: &TransformConfig,
    target: &Target,
    primals: &A,
) -> Result<(R, VjpFn<A, R>)> {
    let (out, pullback, operands) = vjp_stage(f, cache, config, target, primals, false)?;
    Ok((
        out,
        VjpFn {
            pullback,
            operands,
            _types: PhantomData,
        },
    ))
}

/// Traces `f` for a prepared call and builds its pullback. With `aux`, `f` returns `(output,
/// aux)` and only `output` takes a cotangent.
fn trace_with_pullback<A: Tree, O: Tree>(
    f: &dyn Fn(A) -> Result<O>,
    prepared: &Prepared,
    aux: bool,
) -> Result<(TracedFunction, Pullback)> {
    let traced = prepared.trace::<A, O>(f)?;
    let graph = &traced.graph;
    if traced
        .out_slots
        .iter()
        .any(|s| matches!(s, OutSlot::Static(_)))
    {
        return Err(Error::invalid(
            "vjp needs a function whose outputs are all tensors",
        ));
    }
    // The differentiated output: all of it, or the first element of `(output, aux)`.
    let out_def = match (&traced.out_def, aux) {
        (_, false) => traced.out_def.clone(),
        (TreeDef::Tuple(parts), true) if parts.len() == 2 => parts[0].clone(),
        (other, true) => {
            return Err(Error::Structure {
                message: format!(
                    "has_aux functions must return (output, aux), got a result of structure {other}"
                ),
            })
        }
    };
    let n_ct = out_def.num_leaves();
    if graph.outputs()[..n_ct.min(graph.outputs().len())]
        .iter()
        .any(|o| !graph.node(*o).ty.dtype.is_float())
    {
        return Err(Error::invalid(
            "vjp requires floating outputs, got a bool or integer output",
        ));
    }
    let seeds: Vec<Seed> = (0..graph.outputs().len())
        .map(|k| if k < n_ct { Seed::Input } else { Seed::None })
        .collect();
    let vg = vjp_graph(
        graph,
        &prepared.wrt_with_captures(traced.captures.len()),
        &seeds,
    )?;
    let argnums: Vec<usize> = (0..prepared.def.positional_args().len()).collect();
    let (grads_def, grad_order) =
        prepared.gradient_def(&argnums, matches!(prepared.def, TreeDef::Tuple(_)))?;
    let pullback = Pullback {
        graph: vg,
        grads_def,
        grad_order,
        n_out: graph.outputs().len(),
        n_ct,
        out_def,
        compiled: OnceLock::new(),
    };
    Ok((traced, pullback))
}

/// Runs `f` and stages its pullback: the output, the pullback and the operands it binds.
fn vjp_stage<A: Tree, O: Tree>(
    f: &dyn Fn(A) -> Result<O>,
    cache: &VjpCache,
    config: &TransformConfig,
    target: &Target,
    primals: &A,
    aux: bool,
) -> Result<(O, Arc<Pullback>, Vec<Tensor>)> {
    config.validate()?;
    if trace::active() {
        // Inside another trace: stage, inline the primal, and let the pullback inline its
        // graph with the same operands.
        let (leaves, def) = tree::flatten(primals);
        staging::refuse_keys(&def, &leaves)?;
        let prepared = Prepared::new(&def, &leaves, Wrt::All, &[], false)?;
        let (traced, pullback) = trace_with_pullback(f, &prepared, aux)?;
        let mut operands = prepared.operands;
        operands.extend(traced.captures.iter().cloned());
        let outs = trace::inline(&traced.graph, operands.iter().map(Operand::from).collect())?;
        let out = rebuild(&traced.out_def, &traced.out_slots, outs)?;
        return Ok((out, Arc::new(pullback), operands));
    }
    CallScratch::with(|scratch| {
        let def = primals.flatten(&mut scratch.leaves);
        let leaves = &scratch.leaves;
        let call = staging::Call {
            cache: &cache.forward,
            owner: config.owner("vjp", &[]),
            wrt: Wrt::All,
            target,
            extra: None,
        };
        let mut staged = None;
        let entry = staging::cached_entry(&call, &def, leaves, |prepared| {
            let (traced, pullback) = trace_with_pullback(f, prepared, aux)?;
            staged = Some(Arc::new(pullback));
            Ok(traced)
        })?;
        let pullback = match staged {
            Some(p) => {
                cache.remember(&entry, p.clone());
                p
            }
            None => match cache.pullback(&entry) {
                Some(p) => p,
                None => {
                    // Another thread built this entry and has not stored its pullback yet:
                    // stage it again (the same trace).
                    let prepared = Prepared::new(&def, leaves, Wrt::All, &[], false)?;
                    let p = Arc::new(trace_with_pullback(f, &prepared, aux)?.1);
                    cache.remember(&entry, p.clone());
                    p
                }
            },
        };
        let operands = staging::input_tensors(&def, leaves, Wrt::All)?;
        let out = entry.call(&def, leaves, Wrt::All, &[], &mut scratch.outputs)?;
        Ok((out, pullback, operands))
    })
}
