//! `jvp` (transforms.md §5): forward mode, `(f(primals), J(primals) · tangents)`.
//!
//! The shell over [`crate::staging`]: every argument is differentiated ([`Wrt::All`]); the
//! tangents of the differentiated inputs are extra plan inputs after the primals, and
//! `quabla-autodiff` gives the JVP graph. [`Jvp`] (from [`jvp_fn`]) owns a trace cache; the
//! free [`jvp`] caches per thread for stateless functions only ([`super::stateless`]).

use super::stateless::{cache_for, stateless_key, Caches};
use crate::error::{Error, Result};
use crate::staging::{
    self, config_methods, debug_as_shell, Call, Prepared, Shell, Target, TraceCache,
    TransformConfig, Wrt,
};
use crate::tensor::Tensor;
use crate::trace::{OutSlot, TracedFunction};
use crate::tree::{self, Leaf, Tree, TreeDef};
use quabla_autodiff::jvp_graph;
use quabla_ir::{DType, Shape, TensorType};

thread_local! {
    /// The trace caches of [`jvp`] called with stateless functions, one per function.
    static JVP_CACHES: Caches<TraceCache> = Default::default();
}

/// Forward mode: `(f(primals), J(primals) · tangents)`. `tangents` has the structure of
/// `primals` (bool and static leaves are skipped; pass anything for them, e.g. the primal).
///
/// Traces are cached per signature (transforms.md §2) when `f` is stateless — a closure that
/// captures nothing, or a fn item — so calling `qb::jvp(f, ..)` in a loop traces once per
/// shape. A closure with captures is traced on every call, because its captured values may
/// differ from call to call; use [`jvp_fn`], which owns its cache, to reuse its traces.
pub fn jvp<A: Tree, R: Tree>(
    f: impl Fn(A) -> Result<R>,
    primals: &A,
    tangents: &A,
) -> Result<(R, R)> {
    let cache = cache_for(&JVP_CACHES, stateless_key("jvp", &f));
    let config = TransformConfig::default();
    jvp_call(&f, &cache, &config, &Target::cpu(), primals, tangents)
}

/// `jvp` as a transformed function that owns its trace cache: build with [`jvp_fn`], call
/// with [`Jvp::call`].
pub struct Jvp<F, A> {
    shell: Shell<F, A>,
}

debug_as_shell!(Jvp);

/// Forward mode of `f` with a trace cache of its own (transforms.md §2.2): every call with a
/// signature seen before reuses its trace, whatever `f` captures.
/// `qb::jvp_fn(f).call(&primals, &tangents)` equals `qb::jvp(f, &primals, &tangents)`.
pub fn jvp_fn<A: Tree, F>(f: F) -> Jvp<F, A> {
    Jvp {
        shell: Shell::new("jvp", f),
    }
}

impl<A: Tree, F> Jvp<F, A> {
    config_methods!();

    /// `(f(primals), J(primals) · tangents)`, as [`jvp`].
    pub fn call<R: Tree>(&self, primals: &A, tangents: &A) -> Result<(R, R)>
    where
        F: Fn(A) -> Result<R>,
    {
        let s = &self.shell;
        jvp_call(
            &|a| (s.f)(a),
            &s.cache,
            &s.config,
            &s.target,
            primals,
            tangents,
        )
    }
}

/// The tangents of the differentiated inputs of a call with structure `def` and `leaves`,
/// checked against their primals: one per float tensor leaf and per `f64` leaf, in order.
fn tangent_values<A: Tree>(def: &TreeDef, leaves: &[Leaf], tangents: &A) -> Result<Vec<Tensor>> {
    let (t_leaves, t_def) = tree::flatten(tangents);
    if t_def != *def {
        return Err(Error::Structure {
            message: format!("pytree structures differ: {def} vs {t_def}"),
        });
    }
    let mut values = Vec::new();
    for (primal, tangent) in leaves.iter().zip(t_leaves) {
        let ty = match primal {
            Leaf::Tensor(p) if p.dtype().is_float() => p.ir_type(),
            Leaf::F64(_) => TensorType::new(DType::F64, Shape::scalar()),
            _ => continue,
        };
        let t = match tangent {
            Leaf::Tensor(t) => t,
            Leaf::F64(v) => crate::creation::array(v)?,
            other => {
                return Err(Error::invalid(format!(
                    "a tangent must be a tensor, got {other:?}"
                )))
            }
        };
        if t.dtype() != ty.dtype || t.shape() != ty.shape.dims() {
            return Err(Error::invalid(format!(
                "tangent {}{:?} does not match its primal {}{}",
                t.dtype().name(),
                t.shape(),
                ty.dtype.name(),
                ty.shape
            )));
        }
        values.push(t);
    }
    Ok(values)
}

/// The body of a `jvp` call, shared by [`jvp`] and [`Jvp`].
fn jvp_call<A: Tree, R: Tree>(
    f: &dyn Fn(A) -> Result<R>,
    cache: &TraceCache,
    config: &TransformConfig,
    target: &Target,
    primals: &A,
    tangents: &A,
) -> Result<(R, R)> {
    config.validate()?;
    let extra = |def: &TreeDef, leaves: &[Leaf]| tangent_values(def, leaves, tangents);
    let call = Call {
        cache,
        owner: config.owner("jvp", &[]),
        wrt: Wrt::All,
        target,
        extra: Some(&extra),
    };
    staging::execute(&call, primals, |prepared| stage(f, prepared))
}

/// The JVP graph takes the primal inputs (then captures), then the tangent inputs, and
/// returns the primal outputs, then their tangents.
fn stage<A: Tree, R: Tree>(
    f: &dyn Fn(A) -> Result<R>,
    prepared: &Prepared,
) -> Result<TracedFunction> {
    let TracedFunction {
        graph,
        captures,
        out_def,
        out_slots,
    } = prepared.trace::<A, R>(f)?;
    let jg = jvp_graph(&graph, &prepared.wrt_with_captures(captures.len()))?;
    let n_out = graph.outputs().len();
    let tangent_slots: Vec<OutSlot> = out_slots
        .iter()
        .map(|s| match s {
            OutSlot::Plan(i) => OutSlot::Plan(n_out + i),
            OutSlot::Static(Leaf::F64(_)) => OutSlot::Static(Leaf::F64(0.0)),
            other => other.clone(),
        })
        .collect();
    Ok(TracedFunction {
        graph: jg,
        captures,
        out_def: TreeDef::Tuple(vec![out_def.clone(), out_def]),
        out_slots: out_slots.into_iter().chain(tangent_slots).collect(),
    })
}
