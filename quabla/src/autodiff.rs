//! The differentiation transforms: `grad`, `value_and_grad`, `jvp` and `vjp` (transforms.md
//! §5), `jacobian` and `hessian` (§8). Each traces the function on tracers, rewrites the graph
//! with `quabla-autodiff`, and then either compiles and runs it (cached per signature, like
//! `jit`) or, inside another trace, inlines it there — which is how derivatives nest to any
//! order.
//!
//! Trace caches (transforms.md §2): every transformed object — [`Grad`], [`Jacobian`],
//! [`Hessian`], [`Jvp`] (from [`jvp_fn`]) and [`Vjp`] (from [`vjp_fn`]) — owns an LRU of traces
//! by signature, with `.max_traces(n)` and `RetraceWarning` on eviction. The free functions
//! [`jvp`] and [`vjp`] have no object to own a cache; they keep one per thread for each
//! *stateless* function (a closure that captures nothing, or a fn item), keyed by the
//! function's identity and then by signature, so `qb::jvp(f, ..)` in a loop traces once per
//! shape. A closure with captures is traced on every call: its type does not determine the
//! values it captured, and a trace cached under its type could bake in values of an earlier
//! call; `jvp_fn(f)`/`vjp_fn(f)` cache such closures per object, like `jit`. The pullbacks
//! ([`VjpFn`]) of one cached signature share one compiled plan.
//!
//! Differentiated positions: the selected arguments' float tensor leaves, and `f64` leaves
//! there, which become float64 rank-0 inputs (numerics.md §2.2); bool leaves and other
//! scalars get `None` gradients.

use crate::error::{Error, Result};
use crate::jit::{
    arg_positions, leaf_signature, rebuild, CacheOwner, Entry, LeafSignature, Signature, TraceCache,
};
use crate::operand::Operand;
use crate::tensor::Tensor;
use crate::trace::{self, InputLeaf, OutSlot, TracedFunction};
use crate::tree::{self, Leaf, Tree, TreeDef};
use quabla_autodiff::{jvp_graph, vjp_graph, Seed};
use quabla_ir::{DType, Graph, Shape, TensorType};
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Arguments prepared for tracing: which leaves become inputs, their values, and which are
/// differentiated.
struct Prepared {
    def: TreeDef,
    inputs: Vec<InputLeaf>,
    /// Values bound to the array inputs, in order.
    operands: Vec<Tensor>,
    /// Per array input: differentiated.
    wrt: Vec<bool>,
    /// Per leaf: differentiated.
    leaf_wrt: Vec<bool>,
    names: Vec<String>,
    signature: Signature,
}

fn prepare<A: Tree>(args: &A, selected: &dyn Fn(usize) -> bool) -> Result<Prepared> {
    let (leaves, def) = tree::flatten(args);
    let positions = arg_positions(&def);
    let names = trace::leaf_names(&def, &[]);
    let mut inputs = Vec::with_capacity(leaves.len());
    let mut operands = Vec::new();
    let mut wrt = Vec::new();
    let mut leaf_wrt = Vec::with_capacity(leaves.len());
    let mut sigs = Vec::with_capacity(leaves.len());
    for (leaf, &pos) in leaves.iter().zip(&positions) {
        let sel = selected(pos);
        match leaf {
            Leaf::Tensor(t) => {
                let ty = t.ir_type();
                let d = sel && ty.dtype != DType::Bool;
                sigs.push(leaf_signature(leaf));
                inputs.push(InputLeaf::Array(ty));
                operands.push(t.clone());
                wrt.push(d);
                leaf_wrt.push(d);
            }
            Leaf::F64(v) if sel => {
                let ty = TensorType::new(DType::F64, Shape::scalar());
                sigs.push(LeafSignature::Array {
                    dtype: DType::F64,
                    shape: Shape::scalar(),
                    weak: false,
                });
                inputs.push(InputLeaf::Array(ty));
                operands.push(crate::creation::array(*v)?);
                wrt.push(true);
                leaf_wrt.push(true);
            }
            Leaf::Abstract(_) => {
                return Err(Error::invalid(
                    "ShapeDtype placeholders are only accepted by jit(f).lower(..)",
                ))
            }
            other => {
                sigs.push(leaf_signature(other));
                inputs.push(InputLeaf::Static(other.clone()));
                leaf_wrt.push(false);
            }
        }
    }
    Ok(Prepared {
        signature: Signature {
            def: def.clone(),
            leaves: sigs,
            device: std::sync::Arc::from("cpu"),
            precision: None,
        },
        def,
        inputs,
        operands,
        wrt,
        leaf_wrt,
        names,
    })
}

/// The sub-structure of positional argument `p`.
fn arg_def(def: &TreeDef, p: usize) -> Result<&TreeDef> {
    match def {
        TreeDef::Tuple(children) => children.get(p),
        _ if p == 0 => Some(def),
        _ => None,
    }
    .ok_or_else(|| Error::invalid(format!("argnums names argument {p}, which does not exist")))
}

/// `def` with every leaf not flagged in `keep` replaced by `None`; `next` counts leaves.
pub(crate) fn keep_leaves(def: &TreeDef, keep: &[bool], next: &mut usize) -> TreeDef {
    match def {
        TreeDef::Leaf => {
            *next += 1;
            if keep[*next - 1] {
                TreeDef::Leaf
            } else {
                TreeDef::None
            }
        }
        TreeDef::None | TreeDef::Static(_) => def.clone(),
        TreeDef::Tuple(c) => TreeDef::Tuple(c.iter().map(|d| keep_leaves(d, keep, next)).collect()),
        TreeDef::List(c) => TreeDef::List(c.iter().map(|d| keep_leaves(d, keep, next)).collect()),
        TreeDef::Dict(c) => TreeDef::Dict(
            c.iter()
                .map(|(k, d)| (k.clone(), keep_leaves(d, keep, next)))
                .collect(),
        ),
        TreeDef::Node { name, fields, meta } => TreeDef::Node {
            name,
            fields: fields
                .iter()
                .map(|(k, d)| (*k, keep_leaves(d, keep, next)))
                .collect(),
            meta: meta.clone(),
        },
    }
}

/// The structure of the gradients of the selected arguments, and for each of its leaves the
/// index of the differentiated input it belongs to.
fn gradient_def(p: &Prepared, argnums: &[usize], as_tuple: bool) -> Result<(TreeDef, Vec<usize>)> {
    let positions = arg_positions(&p.def);
    // Index among the differentiated inputs of every differentiated leaf.
    let mut wrt_index = vec![usize::MAX; p.leaf_wrt.len()];
    let mut k = 0;
    for (i, &d) in p.leaf_wrt.iter().enumerate() {
        if d {
            wrt_index[i] = k;
            k += 1;
        }
    }
    let mut defs = Vec::with_capacity(argnums.len());
    let mut order = Vec::new();
    for &a in argnums {
        let sub = arg_def(&p.def, a)?;
        let leaf_ids: Vec<usize> = (0..positions.len())
            .filter(|&i| positions[i] == a)
            .collect();
        let keep: Vec<bool> = leaf_ids.iter().map(|&i| p.leaf_wrt[i]).collect();
        defs.push(keep_leaves(sub, &keep, &mut 0));
        order.extend(
            leaf_ids
                .iter()
                .filter(|&&i| p.leaf_wrt[i])
                .map(|&i| wrt_index[i]),
        );
    }
    let def = if as_tuple {
        TreeDef::Tuple(defs)
    } else {
        defs.pop().expect("one argnum")
    };
    Ok((def, order))
}

/// Runs a final graph: inlined into the enclosing trace, or compiled (cached) and run. Its
/// inputs are the prepared operands, then the captures of the trace (inside another trace
/// only), then `trailing` (the tangents of `jvp`).
fn execute(
    cache: &TraceCache,
    owner: &CacheOwner<'_>,
    prepared: &Prepared,
    trailing: &[Tensor],
    stage: impl FnOnce() -> Result<(Graph, Vec<Tensor>, TreeDef, Vec<OutSlot>)>,
) -> Result<(TreeDef, Vec<OutSlot>, Vec<Tensor>)> {
    if trace::active() {
        let (graph, captures, def, slots) = stage()?;
        let operands: Vec<Operand> = prepared
            .operands
            .iter()
            .chain(&captures)
            .chain(trailing)
            .map(Operand::from)
            .collect();
        let outs = trace::inline(&graph, operands)?;
        return Ok((def, slots, outs));
    }
    let entry = cache.get_or_build(owner, prepared.signature.clone(), |sig| {
        let (graph, captures, def, slots) = stage()?;
        if !captures.is_empty() {
            return Err(Error::Internal {
                message: "a top-level trace captured tracers".into(),
            });
        }
        Entry::compile(sig, &graph, def, slots)
    })?;
    let outs = if trailing.is_empty() {
        entry.run(&prepared.operands)?
    } else {
        let mut inputs = prepared.operands.clone();
        inputs.extend_from_slice(trailing);
        entry.run(&inputs)?
    };
    Ok((entry.out_def.clone(), entry.out_slots.clone(), outs))
}

fn check_scalar_output(transform: &'static str, graph: &Graph) -> Result<()> {
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
    if ty.dtype == DType::Bool {
        return Err(Error::invalid(format!(
            "{transform} requires a floating output, got bool"
        )));
    }
    Ok(())
}

/// `grad(f)` and `value_and_grad(f)`: build with [`grad`] or [`value_and_grad`].
pub struct Grad<F, A> {
    f: F,
    transform: &'static str,
    /// `value_and_grad`: the result starts with the value.
    with_value: bool,
    argnums: Vec<usize>,
    as_tuple: bool,
    has_aux: bool,
    name: String,
    max_traces: usize,
    cache: TraceCache,
    _args: PhantomData<fn(A)>,
}

impl<F, A> fmt::Debug for Grad<F, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.transform, self.name)
    }
}

/// The gradient of a scalar function with respect to its first argument (`.argnum(i)` or
/// `.argnums(&[..])` to choose): `qb::grad(f).call::<Tensor>(&x)`.
pub fn grad<A: Tree, F>(f: F) -> Grad<F, A> {
    Grad {
        f,
        transform: "grad",
        with_value: false,
        argnums: vec![0],
        as_tuple: false,
        has_aux: false,
        name: "<closure>".into(),
        max_traces: 8,
        cache: TraceCache::default(),
        _args: PhantomData,
    }
}

/// The value and the gradient: `call` returns `(value, grads)` (`((value, aux), grads)` with
/// `has_aux`).
pub fn value_and_grad<A: Tree, F>(f: F) -> Grad<F, A> {
    Grad {
        transform: "value_and_grad",
        with_value: true,
        ..grad(f)
    }
}

impl<A: Tree, F> Grad<F, A> {
    /// Differentiate with respect to positional argument `i`; the result is its tree.
    pub fn argnum(mut self, i: usize) -> Self {
        self.argnums = vec![i];
        self.as_tuple = false;
        self
    }

    /// Differentiate with respect to several positional arguments; the result is a tuple of
    /// their trees.
    pub fn argnums(mut self, argnums: &[usize]) -> Self {
        self.argnums = argnums.to_vec();
        self.as_tuple = true;
        self
    }

    /// The function returns `(output, aux)`; `aux` is returned unchanged.
    pub fn has_aux(mut self) -> Self {
        self.has_aux = true;
        self
    }

    /// The name used in warnings.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The trace-cache capacity (default 8).
    pub fn max_traces(mut self, n: usize) -> Self {
        self.max_traces = n.max(1);
        self
    }

    fn validate_argnums(&self) -> Result<()> {
        for (i, a) in self.argnums.iter().enumerate() {
            if self.argnums[..i].contains(a) {
                return Err(Error::invalid(format!(
                    "argnums must be distinct, got {:?}",
                    self.argnums
                )));
            }
        }
        if self.argnums.is_empty() {
            return Err(Error::invalid("argnums must not be empty"));
        }
        Ok(())
    }

    /// Calls the transformed function; `G` is the type of the result (the gradients' tree,
    /// or `(value, grads)` for `value_and_grad`). `args` has the structure of the function's
    /// argument; an `f64` in a differentiated position arrives as a float64 rank-0 tensor, so
    /// the function takes a `Tensor` there.
    pub fn call<R: Tree, G: Tree>(&self, args: &impl Tree) -> Result<G>
    where
        F: Fn(A) -> Result<R>,
    {
        self.validate_argnums()?;
        let argnums = self.argnums.clone();
        let prepared = prepare(args, &|p| argnums.contains(&p))?;
        let owner = CacheOwner {
            transform: self.transform,
            function: &self.name,
            max_traces: self.max_traces,
            arg_names: &[],
        };
        let stage = || -> Result<(Graph, Vec<Tensor>, TreeDef, Vec<OutSlot>)> {
            let TracedFunction {
                graph,
                captures,
                out_def,
                out_slots,
            } = trace::trace_function::<A, R>(
                &|a| (self.f)(a),
                &prepared.def,
                &prepared.inputs,
                &prepared.names,
            )?;
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
                    self.transform,
                    if self.has_aux { " and an aux tree" } else { "" }
                )));
            }
            check_scalar_output(self.transform, &graph)?;
            let n_out = graph.outputs().len();
            let mut seeds = vec![Seed::None; n_out];
            seeds[0] = Seed::Ones;
            let mut wrt = prepared.wrt.clone();
            wrt.extend(std::iter::repeat_n(false, captures.len()));
            let vjp = vjp_graph(&graph, &wrt, &seeds)?;
            let (grads_def, order) = gradient_def(&prepared, &self.argnums, self.as_tuple)?;
            let grad_slots: Vec<OutSlot> =
                order.iter().map(|&k| OutSlot::Plan(n_out + k)).collect();
            let value_slots = vec![OutSlot::Plan(0)];
            let (def, slots) = match (self.with_value, aux_def) {
                (false, None) => (grads_def, grad_slots),
                (false, Some(aux)) => (
                    TreeDef::Tuple(vec![grads_def, aux]),
                    grad_slots
                        .into_iter()
                        .chain(out_slots[1..].iter().cloned())
                        .collect(),
                ),
                (true, None) => (
                    TreeDef::Tuple(vec![TreeDef::Leaf, grads_def]),
                    value_slots.into_iter().chain(grad_slots).collect(),
                ),
                (true, Some(aux)) => (
                    TreeDef::Tuple(vec![TreeDef::Tuple(vec![TreeDef::Leaf, aux]), grads_def]),
                    value_slots
                        .into_iter()
                        .chain(out_slots[1..].iter().cloned())
                        .chain(grad_slots)
                        .collect(),
                ),
            };
            Ok((vjp, captures, def, slots))
        };
        let (def, slots, outs) = execute(&self.cache, &owner, &prepared, &[], stage)?;
        rebuild(&def, &slots, outs)
    }
}

/// The identity of a stateless function, under which the free functions [`jvp`] and [`vjp`]
/// keep their trace caches.
///
/// Rust has no identity for a closure value, and a closure's type alone does not determine
/// its behaviour: the same closure expression evaluated twice may capture different values,
/// which a cached trace would have frozen. A zero-sized function (a closure that captures
/// nothing, or a fn item) has no state, so every value of its type is the same function and a
/// cached trace is exactly what tracing again would record. Its identity is the address of
/// [`call_through`] instantiated for it — code that calls that function and nothing else — with
/// the type names as a second discriminator. Two different functions cannot share the address
/// (distinct code has distinct addresses; the linker may only merge identical code, which
/// computes the same thing); one function may get several addresses (one per codegen unit),
/// which only costs a trace per address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct FnKey {
    transform: &'static str,
    code: usize,
    function: &'static str,
    args: &'static str,
    result: &'static str,
}

/// Calls `f`: instantiated once per function type, its address identifies that type.
fn call_through<A, R, F: Fn(A) -> Result<R>>(f: &F, a: A) -> Result<R> {
    f(a)
}

/// The key of `F` when it is stateless (zero-sized); `None` for closures with captures.
fn stateless_key<A, R, F: Fn(A) -> Result<R>>(transform: &'static str, _: &F) -> Option<FnKey> {
    if std::mem::size_of::<F>() != 0 {
        return None;
    }
    let code = call_through::<A, R, F> as fn(&F, A) -> Result<R> as usize;
    Some(FnKey {
        transform,
        code,
        function: std::any::type_name::<F>(),
        args: std::any::type_name::<A>(),
        result: std::any::type_name::<R>(),
    })
}

thread_local! {
    /// The trace caches of [`jvp`] called with stateless functions, one per function.
    static JVP_CACHES: RefCell<HashMap<FnKey, Rc<TraceCache>>> = RefCell::new(HashMap::new());
    /// The trace caches of [`vjp`] called with stateless functions, one per function.
    static VJP_CACHES: RefCell<HashMap<FnKey, Rc<VjpCache>>> = RefCell::new(HashMap::new());
}

/// The cache `key` names in `caches` (created on first use); a fresh one, used for this call
/// only, when there is no key.
fn stateless_cache<C: Default>(
    caches: &'static std::thread::LocalKey<RefCell<HashMap<FnKey, Rc<C>>>>,
    key: Option<FnKey>,
) -> Rc<C> {
    match key {
        Some(key) => caches.with(|c| c.borrow_mut().entry(key).or_default().clone()),
        None => Rc::new(C::default()),
    }
}

/// The owner of a free function's cache, for `RetraceWarning`.
fn free_owner(transform: &'static str) -> CacheOwner<'static> {
    CacheOwner {
        transform,
        function: "<closure>",
        max_traces: 8,
        arg_names: &[],
    }
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
    let cache = stateless_cache(&JVP_CACHES, stateless_key("jvp", &f));
    jvp_call(&f, &cache, &free_owner("jvp"), primals, tangents)
}

/// `jvp` as a transformed function that owns its trace cache: build with [`jvp_fn`], call
/// with [`Jvp::call`].
pub struct Jvp<F, A> {
    f: F,
    name: String,
    max_traces: usize,
    cache: TraceCache,
    _args: PhantomData<fn(A)>,
}

impl<F, A> fmt::Debug for Jvp<F, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "jvp({})", self.name)
    }
}

/// Forward mode of `f` with a trace cache of its own (transforms.md §2.2): every call with a
/// signature seen before reuses its trace, whatever `f` captures.
/// `qb::jvp_fn(f).call(&primals, &tangents)` equals `qb::jvp(f, &primals, &tangents)`.
pub fn jvp_fn<A: Tree, F>(f: F) -> Jvp<F, A> {
    Jvp {
        f,
        name: "<closure>".into(),
        max_traces: 8,
        cache: TraceCache::default(),
        _args: PhantomData,
    }
}

impl<A: Tree, F> Jvp<F, A> {
    /// The name used in warnings (`jvp(<name>)`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The trace-cache capacity (default 8).
    pub fn max_traces(mut self, n: usize) -> Self {
        self.max_traces = n.max(1);
        self
    }

    /// Number of traces currently cached.
    pub fn cache_size(&self) -> usize {
        self.cache.len()
    }

    /// `(f(primals), J(primals) · tangents)`, as [`jvp`].
    pub fn call<R: Tree>(&self, primals: &A, tangents: &A) -> Result<(R, R)>
    where
        F: Fn(A) -> Result<R>,
    {
        let owner = CacheOwner {
            transform: "jvp",
            function: &self.name,
            max_traces: self.max_traces,
            arg_names: &[],
        };
        jvp_call(&|a| (self.f)(a), &self.cache, &owner, primals, tangents)
    }
}

/// The tangent values of the differentiated inputs, checked against their primals.
fn tangent_values<A: Tree>(prepared: &Prepared, tangents: &A) -> Result<Vec<Tensor>> {
    let (t_leaves, t_def) = tree::flatten(tangents);
    if t_def != prepared.def {
        return Err(Error::Structure {
            message: format!("pytree structures differ: {} vs {}", prepared.def, t_def),
        });
    }
    let mut values = Vec::new();
    let mut k = 0;
    for (leaf, input) in t_leaves.iter().zip(&prepared.inputs) {
        if let InputLeaf::Array(ty) = input {
            if prepared.wrt[k] {
                let t = match leaf {
                    Leaf::Tensor(t) => t.clone(),
                    Leaf::F64(v) => crate::creation::array(*v)?,
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
            k += 1;
        }
    }
    Ok(values)
}

/// The body of a `jvp` call, shared by [`jvp`] and [`Jvp`].
fn jvp_call<A: Tree, R: Tree>(
    f: &dyn Fn(A) -> Result<R>,
    cache: &TraceCache,
    owner: &CacheOwner<'_>,
    primals: &A,
    tangents: &A,
) -> Result<(R, R)> {
    let prepared = prepare(primals, &|_| true)?;
    let tangent_values = tangent_values(&prepared, tangents)?;
    let stage = || -> Result<(Graph, Vec<Tensor>, TreeDef, Vec<OutSlot>)> {
        let TracedFunction {
            graph,
            captures,
            out_def,
            out_slots,
        } = trace::trace_function::<A, R>(f, &prepared.def, &prepared.inputs, &prepared.names)?;
        let mut wrt = prepared.wrt.clone();
        wrt.extend(std::iter::repeat_n(false, captures.len()));
        // The JVP graph takes primal inputs (then captures), then tangent inputs, and returns
        // the primal outputs, then their tangents.
        let jg = jvp_graph(&graph, &wrt)?;
        let n_out = graph.outputs().len();
        let tangent_slots: Vec<OutSlot> = out_slots
            .iter()
            .map(|s| match s {
                OutSlot::Plan(i) => OutSlot::Plan(n_out + i),
                OutSlot::Static(Leaf::F64(_)) => OutSlot::Static(Leaf::F64(0.0)),
                other => other.clone(),
            })
            .collect();
        let def = TreeDef::Tuple(vec![out_def.clone(), out_def]);
        let slots = out_slots.into_iter().chain(tangent_slots).collect();
        Ok((jg, captures, def, slots))
    };
    let (def, slots, outs) = execute(cache, owner, &prepared, &tangent_values, stage)?;
    rebuild(&def, &slots, outs)
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
        };
        let n = self.graph.outputs().len();
        let slots = (0..n).map(OutSlot::Plan).collect();
        let entry = Arc::new(Entry::compile(
            signature,
            &self.graph,
            TreeDef::List(vec![TreeDef::Leaf; n]),
            slots,
        )?);
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
            p.entry()?.run(&operands)?
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
    let cache = stateless_cache(&VJP_CACHES, stateless_key("vjp", &f));
    vjp_call(&f, &cache, &free_owner("vjp"), primals)
}

/// `vjp` as a transformed function that owns its trace cache: build with [`vjp_fn`], call
/// with [`Vjp::call`].
pub struct Vjp<F, A> {
    f: F,
    name: String,
    max_traces: usize,
    cache: VjpCache,
    _args: PhantomData<fn(A)>,
}

impl<F, A> fmt::Debug for Vjp<F, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vjp({})", self.name)
    }
}

/// Reverse mode of `f` with a trace cache of its own (transforms.md §2.2): every call with a
/// signature seen before reuses its trace and plans, whatever `f` captures.
/// `qb::vjp_fn(f).call(&primals)` equals `qb::vjp(f, &primals)`.
pub fn vjp_fn<A: Tree, F>(f: F) -> Vjp<F, A> {
    Vjp {
        f,
        name: "<closure>".into(),
        max_traces: 8,
        cache: VjpCache::default(),
        _args: PhantomData,
    }
}

impl<A: Tree, F> Vjp<F, A> {
    /// The name used in warnings (`vjp(<name>)`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The trace-cache capacity (default 8).
    pub fn max_traces(mut self, n: usize) -> Self {
        self.max_traces = n.max(1);
        self
    }

    /// Number of traces currently cached.
    pub fn cache_size(&self) -> usize {
        self.cache.forward.len()
    }

    /// `(f(primals), pullback)`, as [`vjp`].
    pub fn call<R: Tree>(&self, primals: &A) -> Result<(R, VjpFn<A, R>)>
    where
        F: Fn(A) -> Result<R>,
    {
        let owner = CacheOwner {
            transform: "vjp",
            function: &self.name,
            max_traces: self.max_traces,
            arg_names: &[],
        };
        vjp_call(&|a| (self.f)(a), &self.cache, &owner, primals)
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
        write!(f, "vjp({}, has_aux)", self.inner.name)
    }
}

impl<A: Tree, F> VjpAux<F, A> {
    /// `(output, pullback, aux)`: the pullback maps a cotangent of `output` alone.
    pub fn call<R: Tree, X: Tree>(&self, primals: &A) -> Result<(R, VjpFn<A, R>, X)>
    where
        F: Fn(A) -> Result<(R, X)>,
    {
        let v = &self.inner;
        let owner = CacheOwner {
            transform: "vjp",
            function: &v.name,
            max_traces: v.max_traces,
            arg_names: &[],
        };
        let ((out, aux), pullback, operands) =
            vjp_stage::<A, (R, X)>(&|a| (v.f)(a), &v.cache, &owner, primals, true)?;
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
    owner: &CacheOwner<'_>,
    primals: &A,
) -> Result<(R, VjpFn<A, R>)> {
    let (out, pullback, operands) = vjp_stage(f, cache, owner, primals, false)?;
    Ok((
        out,
        VjpFn {
            pullback,
            operands,
            _types: PhantomData,
        },
    ))
}

/// Runs `f` and stages its pullback: the output, the pullback and the operands it binds.
/// With `aux`, `f` returns `(output, aux)` and only `output` takes a cotangent.
fn vjp_stage<A: Tree, O: Tree>(
    f: &dyn Fn(A) -> Result<O>,
    cache: &VjpCache,
    owner: &CacheOwner<'_>,
    primals: &A,
    aux: bool,
) -> Result<(O, Arc<Pullback>, Vec<Tensor>)> {
    let prepared = prepare(primals, &|_| true)?;
    // Traces `f`: its graph, captures, output structure and pullback.
    let stage = || -> Result<(TracedFunction, Pullback)> {
        let traced =
            trace::trace_function::<A, O>(f, &prepared.def, &prepared.inputs, &prepared.names)?;
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
        let mut wrt = prepared.wrt.clone();
        wrt.extend(std::iter::repeat_n(false, traced.captures.len()));
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
            .any(|o| graph.node(*o).ty.dtype == DType::Bool)
        {
            return Err(Error::invalid("vjp requires floating outputs, got bool"));
        }
        let seeds: Vec<Seed> = (0..graph.outputs().len())
            .map(|k| if k < n_ct { Seed::Input } else { Seed::None })
            .collect();
        let vg = vjp_graph(graph, &wrt, &seeds)?;
        let n_args = match &prepared.def {
            TreeDef::Tuple(c) => c.len(),
            _ => 1,
        };
        let argnums: Vec<usize> = (0..n_args).collect();
        let (grads_def, grad_order) = gradient_def(
            &prepared,
            &argnums,
            matches!(prepared.def, TreeDef::Tuple(_)),
        )?;
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
    };
    if trace::active() {
        // Inside another trace: stage, inline the primal, and let the pullback inline its
        // graph with the same operands.
        let (traced, pullback) = stage()?;
        let mut operands = prepared.operands.clone();
        operands.extend(traced.captures.iter().cloned());
        let outs = trace::inline(&traced.graph, operands.iter().map(Operand::from).collect())?;
        let out = rebuild(&traced.out_def, &traced.out_slots, outs)?;
        return Ok((out, Arc::new(pullback), operands));
    }
    let mut staged = None;
    let entry = cache
        .forward
        .get_or_build(owner, prepared.signature.clone(), |sig| {
            let (traced, pullback) = stage()?;
            if !traced.captures.is_empty() {
                return Err(Error::Internal {
                    message: "a top-level trace captured tracers".into(),
                });
            }
            staged = Some(Arc::new(pullback));
            Entry::compile(sig, &traced.graph, traced.out_def, traced.out_slots)
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
                let p = Arc::new(stage()?.1);
                cache.remember(&entry, p.clone());
                p
            }
        },
    };
    let outs = entry.run(&prepared.operands)?;
    let out = rebuild(&entry.out_def, &entry.out_slots, outs)?;
    Ok((out, pullback, prepared.operands))
}

/// Rows `[start, start + len)` of an identity of size `n`, as `[n, *shape]` in `dtype`: the
/// basis vectors of one leaf, generated inside the graph from an `arange` of length `n`.
fn basis(
    b: &mut quabla_ir::GraphBuilder,
    n: usize,
    start: usize,
    shape: &Shape,
    dtype: DType,
) -> Result<quabla_ir::NodeId> {
    use quabla_ir::{Comparison, HostData};
    let len = shape.size();
    let rows = b.constant(
        HostData::F64((0..n).map(|i| i as f64).collect()),
        Shape::new(vec![n, 1])?,
        false,
    )?;
    let cols = b.constant(
        HostData::F64((start..start + len).map(|i| i as f64).collect()),
        Shape::new(vec![1, len])?,
        false,
    )?;
    let eye = b.compare(Comparison::Equal, rows, cols)?;
    let eye = b.astype(eye, dtype)?;
    let mut dims = vec![n];
    dims.extend(shape.dims());
    Ok(b.reshape_to(eye, Shape::new(dims)?)?)
}

/// `def` with its `k`-th leaf replaced by `leaf(k)`.
fn replace_leaves(
    def: &TreeDef,
    leaf: &mut dyn FnMut(usize) -> TreeDef,
    next: &mut usize,
) -> TreeDef {
    match def {
        TreeDef::Leaf => {
            *next += 1;
            leaf(*next - 1)
        }
        TreeDef::None | TreeDef::Static(_) => def.clone(),
        TreeDef::Tuple(c) => {
            TreeDef::Tuple(c.iter().map(|d| replace_leaves(d, leaf, next)).collect())
        }
        TreeDef::List(c) => {
            TreeDef::List(c.iter().map(|d| replace_leaves(d, leaf, next)).collect())
        }
        TreeDef::Dict(c) => TreeDef::Dict(
            c.iter()
                .map(|(k, d)| (k.clone(), replace_leaves(d, leaf, next)))
                .collect(),
        ),
        TreeDef::Node { name, fields, meta } => TreeDef::Node {
            name,
            fields: fields
                .iter()
                .map(|(k, d)| (*k, replace_leaves(d, leaf, next)))
                .collect(),
            meta: meta.clone(),
        },
    }
}

/// `jacobian(f)`: dense blocks `[*out.shape, *in.shape]` (transforms.md §8). Build with
/// [`jacobian`] or [`hessian`].
pub struct Jacobian<F, A> {
    f: F,
    argnums: Vec<usize>,
    as_tuple: bool,
    name: String,
    max_traces: usize,
    cache: TraceCache,
    _args: PhantomData<fn(A)>,
}

impl<F, A> fmt::Debug for Jacobian<F, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "jacobian({})", self.name)
    }
}

/// The dense Jacobian of `f` with respect to its first argument. Forward mode over the input
/// basis unless the output has fewer elements than the inputs (then reverse mode over the
/// output basis); the basis vectors are generated inside one batched graph.
pub fn jacobian<A: Tree, F>(f: F) -> Jacobian<F, A> {
    Jacobian {
        f,
        argnums: vec![0],
        as_tuple: false,
        name: "<closure>".into(),
        max_traces: 8,
        cache: TraceCache::default(),
        _args: PhantomData,
    }
}

impl<A: Tree, F> Jacobian<F, A> {
    /// Differentiate with respect to positional argument `i`.
    pub fn argnum(mut self, i: usize) -> Self {
        self.argnums = vec![i];
        self.as_tuple = false;
        self
    }

    /// Differentiate with respect to several positional arguments (blocks become tuples).
    pub fn argnums(mut self, argnums: &[usize]) -> Self {
        self.argnums = argnums.to_vec();
        self.as_tuple = true;
        self
    }

    /// The name used in warnings.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Calls it; `J` is the result type (the output's structure holding, per output leaf, a
    /// block tree with the selected inputs' structure).
    pub fn call<R: Tree, J: Tree>(&self, args: &impl Tree) -> Result<J>
    where
        F: Fn(A) -> Result<R>,
    {
        let owner = CacheOwner {
            transform: "jacobian",
            function: &self.name,
            max_traces: self.max_traces,
            arg_names: &[],
        };
        jacobian_call::<A, R, J>(
            &|a| (self.f)(a),
            &self.argnums,
            self.as_tuple,
            &owner,
            &self.cache,
            args,
        )
    }
}

/// The body of a Jacobian call, shared by `jacobian` and `hessian` (which own their caches).
fn jacobian_call<A: Tree, R: Tree, J: Tree>(
    f: &dyn Fn(A) -> Result<R>,
    argnums: &[usize],
    as_tuple: bool,
    owner: &CacheOwner<'_>,
    cache: &TraceCache,
    args: &impl Tree,
) -> Result<J> {
    {
        let prepared = prepare(args, &|p| argnums.contains(&p))?;
        let stage = || -> Result<(Graph, Vec<Tensor>, TreeDef, Vec<OutSlot>)> {
            let TracedFunction {
                graph,
                captures,
                out_def,
                out_slots,
            } = trace::trace_function::<A, R>(f, &prepared.def, &prepared.inputs, &prepared.names)?;
            if out_slots.iter().any(|s| matches!(s, OutSlot::Static(_))) {
                return Err(Error::invalid(
                    "jacobian needs a function whose outputs are all tensors",
                ));
            }
            let mut wrt = prepared.wrt.clone();
            wrt.extend(std::iter::repeat_n(false, captures.len()));
            let build = jacobian_graph(&graph, &wrt)?;
            let (in_def, order) = gradient_def(&prepared, argnums, as_tuple)?;
            // Blocks in output-major order; bool outputs hold None.
            let n_wrt = wrt.iter().filter(|&&w| w).count();
            let float_out: Vec<bool> = graph
                .outputs()
                .iter()
                .map(|o| graph.node(*o).ty.dtype != DType::Bool)
                .collect();
            let mut slots = Vec::new();
            let mut block_base = 0;
            let mut per_out_base = Vec::new();
            for &is_float in &float_out {
                per_out_base.push(block_base);
                if is_float {
                    block_base += n_wrt;
                }
            }
            let def = replace_leaves(
                &out_def,
                &mut |k| {
                    if float_out[k] {
                        for &j in &order {
                            slots.push(OutSlot::Plan(per_out_base[k] + j));
                        }
                        in_def.clone()
                    } else {
                        TreeDef::None
                    }
                },
                &mut 0,
            );
            Ok((build, captures, def, slots))
        };
        let (def, slots, outs) = execute(cache, owner, &prepared, &[], stage)?;
        rebuild(&def, &slots, outs)
    }
}

/// The graph of all Jacobian blocks of `g` with respect to the flagged inputs: for each float
/// output in order, one block `[*out, *in]` per flagged input in order.
fn jacobian_graph(g: &Graph, wrt: &[bool]) -> Result<Graph> {
    use quabla_ir::GraphBuilder;
    let inputs: Vec<(String, TensorType)> = g
        .inputs()
        .map(|(_, n, t)| (n.to_string(), t.clone()))
        .collect();
    let wrt_types: Vec<TensorType> = inputs
        .iter()
        .zip(wrt)
        .filter(|(_, &w)| w)
        .map(|((_, t), _)| t.clone())
        .collect();
    let outs: Vec<TensorType> = g.outputs().iter().map(|o| g.node(*o).ty.clone()).collect();
    let float_outs: Vec<usize> = (0..outs.len())
        .filter(|&k| outs[k].dtype != DType::Bool)
        .collect();
    let p: usize = wrt_types.iter().map(|t| t.shape.size()).sum();
    let q: usize = float_outs.iter().map(|&k| outs[k].shape.size()).sum();
    let mut b = GraphBuilder::new();
    let primals: Vec<_> = inputs
        .iter()
        .map(|(n, t)| b.input(n.clone(), t.clone()))
        .collect();
    let mut blocks = Vec::new();
    if p == 0 {
        return Ok(b.finish(Vec::new())?);
    }
    if q < p || has_custom_vjp(g) {
        // Reverse mode over the output basis (always for a custom_vjp, which has no forward
        // mode).
        let seeds: Vec<Seed> = (0..outs.len())
            .map(|k| {
                if float_outs.contains(&k) {
                    Seed::Input
                } else {
                    Seed::None
                }
            })
            .collect();
        let vg = vjp_graph(g, wrt, &seeds)?;
        let n_prim = inputs.len();
        let n_ct = float_outs.len();
        let mut in_axes = vec![None; n_prim];
        in_axes.extend(std::iter::repeat_n(Some(0), n_ct));
        let mut out_axes = vec![None; outs.len()];
        out_axes.extend(std::iter::repeat_n(Some(0), wrt_types.len()));
        let batched = quabla_vmap::batch_graph(&vg, &in_axes, q, &out_axes)?;
        let mut bound = primals.clone();
        let mut offset = 0;
        let mut out_offsets = Vec::new();
        for &k in &float_outs {
            bound.push(basis(&mut b, q, offset, &outs[k].shape, outs[k].dtype)?);
            out_offsets.push(offset);
            offset += outs[k].shape.size();
        }
        let res = b.inline_graph(&batched, &bound)?;
        let grads = &res[outs.len()..];
        for (idx, &k) in float_outs.iter().enumerate() {
            let oshape = &outs[k].shape;
            for (j, t) in wrt_types.iter().enumerate() {
                // grads[j]: [q, *in]; rows of output k.
                let mut starts = vec![0; t.shape.rank() + 1];
                starts[0] = out_offsets[idx];
                let mut sizes = vec![oshape.size()];
                sizes.extend(t.shape.dims());
                let rows = b.slice(grads[j], starts, sizes)?;
                let mut dims = oshape.dims().to_vec();
                dims.extend(t.shape.dims());
                blocks.push(b.reshape_to(rows, Shape::new(dims)?)?);
            }
        }
    } else {
        // Forward mode over the input basis.
        let jg = jvp_graph(g, wrt)?;
        let n_prim = inputs.len();
        let mut in_axes = vec![None; n_prim];
        in_axes.extend(std::iter::repeat_n(Some(0), wrt_types.len()));
        let mut out_axes = vec![None; outs.len()];
        out_axes.extend(std::iter::repeat_n(Some(0), outs.len()));
        let batched = quabla_vmap::batch_graph(&jg, &in_axes, p, &out_axes)?;
        let mut bound = primals.clone();
        let mut offset = 0;
        let mut in_offsets = Vec::new();
        for t in &wrt_types {
            bound.push(basis(&mut b, p, offset, &t.shape, t.dtype)?);
            in_offsets.push(offset);
            offset += t.shape.size();
        }
        let res = b.inline_graph(&batched, &bound)?;
        let tangents = &res[outs.len()..];
        for &k in &float_outs {
            let oshape = &outs[k].shape;
            for (j, t) in wrt_types.iter().enumerate() {
                // tangents[k]: [p, *out]; rows of input j, then inputs axes last.
                let mut starts = vec![0; oshape.rank() + 1];
                starts[0] = in_offsets[j];
                let mut sizes = vec![t.shape.size()];
                sizes.extend(oshape.dims());
                let rows = b.slice(tangents[k], starts, sizes)?;
                let mut dims = t.shape.dims().to_vec();
                dims.extend(oshape.dims());
                let r = b.reshape_to(rows, Shape::new(dims)?)?;
                let ri = t.shape.rank();
                let ro = oshape.rank();
                let perm: Vec<isize> = (ri..ri + ro).chain(0..ri).map(|a| a as isize).collect();
                blocks.push(b.transpose(r, Some(&perm))?);
            }
        }
    }
    Ok(b.finish(blocks)?)
}

/// Whether forward mode would meet a `custom_vjp` rule (directly, or inside the primal graph
/// of a rule differentiated through its primal, such as `checkpoint`).
fn has_custom_vjp(g: &Graph) -> bool {
    g.nodes().iter().any(|n| match &n.op {
        quabla_ir::Op::Custom(c) => {
            c.rule.jvp.is_none() && (c.rule.fwd.is_some() || has_custom_vjp(&c.rule.primal))
        }
        _ => false,
    })
}

/// `hessian(f)`: the forward-mode Jacobian of `grad(f)`, blocks `[*in_i, *in_j]`
/// (reverse-over-reverse when the function contains a `custom_vjp`).
pub struct Hessian<F, A> {
    f: F,
    argnums: Vec<usize>,
    as_tuple: bool,
    cache: TraceCache,
    _args: PhantomData<fn(A)>,
}

impl<F, A> fmt::Debug for Hessian<F, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "hessian")
    }
}

/// The dense Hessian of a scalar function with respect to its first argument.
pub fn hessian<A: Tree, F>(f: F) -> Hessian<F, A> {
    Hessian {
        f,
        argnums: vec![0],
        as_tuple: false,
        cache: TraceCache::default(),
        _args: PhantomData,
    }
}

impl<A: Tree, F> Hessian<F, A> {
    /// Differentiate with respect to positional argument `i`.
    pub fn argnum(mut self, i: usize) -> Self {
        self.argnums = vec![i];
        self.as_tuple = false;
        self
    }

    /// Differentiate with respect to several positional arguments.
    pub fn argnums(mut self, argnums: &[usize]) -> Self {
        self.argnums = argnums.to_vec();
        self.as_tuple = true;
        self
    }

    /// Calls it; `H` is the result type.
    pub fn call<R: Tree, H: Tree>(&self, args: &impl Tree) -> Result<H>
    where
        F: Fn(A) -> Result<R>,
    {
        let inner = |a: A| -> Result<tree::Value> {
            let g = Grad {
                f: &self.f,
                transform: "hessian",
                with_value: false,
                argnums: self.argnums.clone(),
                as_tuple: self.as_tuple,
                has_aux: false,
                name: "<closure>".into(),
                max_traces: 8,
                cache: TraceCache::default(),
                _args: PhantomData::<fn(A)>,
            };
            g.call::<R, tree::Value>(&a)
        };
        let owner = CacheOwner {
            transform: "hessian",
            function: "<closure>",
            max_traces: 8,
            arg_names: &[],
        };
        jacobian_call::<A, tree::Value, H>(
            &inner,
            &self.argnums,
            self.as_tuple,
            &owner,
            &self.cache,
            args,
        )
    }
}
