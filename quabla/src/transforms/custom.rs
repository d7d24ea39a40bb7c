//! Custom derivative rules and checkpointing (transforms.md §14): [`custom_vjp`],
//! [`custom_jvp`], [`checkpoint`] (alias [`remat`]).
//!
//! Outside any trace a wrapped function simply runs `f`. Inside a trace (`jit`, `grad`, `vmap`,
//! ...) the call is staged: `f` and the rule functions are traced on tracers into graphs and
//! recorded as `custom` IR nodes (one per output) carrying a [`quabla_ir::CustomRule`]; the
//! symbolic transforms apply the rule and plan compilation replaces the node by `f`'s graph.
//!
//! **Arguments.** A wrapped function takes one argument tree `A`; when `A` is a tuple its
//! elements are the positional arguments, otherwise `A` is the only one (argument 0). The
//! tensor leaves of the differentiable arguments are the rule's operands (differentiated when
//! floating); every other leaf (an `f64`, a bool, a [`crate::Static`]) is a constant passed
//! through unchanged. Every output of `f` must be a floating tensor. Inside its own rule
//! functions a wrapper evaluates plain `f` (no recursion).
//!
//! **`nondiff_argnums`.** `custom_vjp(f).nondiff_argnums(&[..])` and
//! `custom_jvp(f).nondiff_argnums(&[..])` mark positional arguments as non-differentiable:
//! they pass through unchanged, get no cotangent or tangent, and come first in the rules. They
//! are meant for static values (scales, tolerances, [`crate::Static`] options); a concrete
//! tensor there is a constant of the rules, and a traced one is a `TracerError` (TR2: its value
//! is not known while tracing; pass traced arrays in differentiable positions). In the rules the
//! non-differentiable arguments `N` are the argument itself for one index and a tuple in the
//! order given for several; the differentiable arguments `D` are the whole argument tree
//! without `nondiff_argnums`, and otherwise the remaining arguments in positional order (the
//! argument itself when one remains, a tuple when several, `()` when none).
//!
//! | rule | without `nondiff_argnums` | with |
//! | --- | --- | --- |
//! | `custom_vjp` `fwd` | `fwd(args) -> (out, residuals)` | the same: all arguments |
//! | `custom_vjp` `bwd` | `bwd((residuals, g)) -> cotangents` | `bwd((nondiff, residuals, g))` |
//! | `custom_jvp` rule | `rule((primals, tangents))` | `rule((nondiff, primals, tangents))` |
//!
//! **Cotangents.** `bwd` returns the cotangent of `D`: `D`'s structure with a tensor of the
//! operand's shape and dtype at each tensor leaf. `None` (an `Option::None` or `()`) stands for
//! zeros, for one leaf or for any subtree (a whole argument); leaves that are not tensors take
//! `None`. A wrong structure (e.g. a wrong number of cotangents) is TF8, a wrong shape or
//! dtype a `ValueError`.
//!
//! **Tangents.** The `custom_jvp` rule receives `primals` and `tangents` with `D`'s structure:
//! a tensor tangent of the operand's type at each tensor leaf, and a zero (`0.0`, `false`, `0`)
//! at each scalar leaf, which is a constant.

use crate::error::{Error, Result, TracerErrorKind};
use crate::operand::Operand;
use crate::print::format_tracer;
use crate::tensor::Tensor;
use crate::trace::{self, InputLeaf, OutSlot, TracedFunction};
use crate::tree::{self, Leaf, Tree, TreeDef, Value};
use quabla_ir::{CustomRule, DType, Graph, TensorType};
use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

type Fun<'a, A, R> = Box<dyn Fn(A) -> Result<R> + 'a>;

static NEXT_WRAPPER: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Wrappers whose rule functions are being traced: calling them evaluates plain `f`.
    static IN_RULE: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

fn next_id() -> u64 {
    NEXT_WRAPPER.fetch_add(1, Ordering::Relaxed)
}

/// Marks a wrapper as tracing its own rules until dropped.
struct RuleGuard(u64);

impl RuleGuard {
    fn enter(id: u64) -> RuleGuard {
        IN_RULE.with(|r| r.borrow_mut().push(id));
        RuleGuard(id)
    }
}

impl Drop for RuleGuard {
    fn drop(&mut self) {
        IN_RULE.with(|r| {
            let mut r = r.borrow_mut();
            if let Some(pos) = r.iter().rposition(|&i| i == self.0) {
                r.remove(pos);
            }
        });
    }
}

fn in_own_rule(id: u64) -> bool {
    IN_RULE.with(|r| r.borrow().contains(&id))
}

/// Several trees as the rules receive them: one bare, several as a tuple, none as `()`.
fn bare_or_tuple(mut defs: Vec<TreeDef>) -> TreeDef {
    match defs.len() {
        0 => TreeDef::None,
        1 => defs.pop().expect("one element"),
        _ => TreeDef::Tuple(defs),
    }
}

/// Checks `nondiff_argnums` against a call whose argument tree has the structure `def`.
fn check_nondiff(wrapper: &str, name: &str, nondiff: &[usize], def: &TreeDef) -> Result<()> {
    let n = def.positional_args().len();
    for (i, &p) in nondiff.iter().enumerate() {
        if nondiff[..i].contains(&p) {
            return Err(Error::invalid(format!(
                "{wrapper}({name}): nondiff_argnums must be distinct, got {nondiff:?}"
            )));
        }
        if p >= n {
            return Err(Error::invalid(format!(
                "{wrapper}({name}): nondiff_argnums names argument {p}, but the function was called with {n} argument{}",
                if n == 1 { "" } else { "s" }
            )));
        }
    }
    Ok(())
}

fn traced_nondiff(wrapper: &str, name: &str, position: usize, t: &Tensor) -> Error {
    let repr = t
        .tracer()
        .map(|tr| format_tracer(tr.node.0, tr.ty.shape.dims(), tr.ty.dtype))
        .unwrap_or_default();
    Error::Tracer {
        kind: TracerErrorKind::Concretization,
        message: format!(
            "{wrapper}({name}) nondiff argument {position} needs a concrete value, but got {repr}; its value is not known while tracing; nondiff_argnums are for static values such as scales and tolerances, pass traced arrays in differentiable positions"
        ),
    }
}

/// A copy of an input description.
fn copy_input(leaf: &InputLeaf) -> InputLeaf {
    match leaf {
        InputLeaf::Array(t) => InputLeaf::Array(t.clone()),
        InputLeaf::Static(l) => InputLeaf::Static(l.clone()),
    }
}

/// The tangent input of a primal input: a tensor of the same type, or the zero of a scalar
/// constant.
fn tangent_input(leaf: &InputLeaf) -> InputLeaf {
    match leaf {
        InputLeaf::Array(t) => InputLeaf::Array(t.clone()),
        InputLeaf::Static(Leaf::F64(_)) => InputLeaf::Static(Leaf::F64(0.0)),
        InputLeaf::Static(Leaf::Bool(_)) => InputLeaf::Static(Leaf::Bool(false)),
        InputLeaf::Static(Leaf::Int(_)) => InputLeaf::Static(Leaf::Int(0)),
        InputLeaf::Static(other) => InputLeaf::Static(other.clone()),
    }
}

/// The argument tree of one staged call: its structure, the inputs of the traced functions,
/// the tensors bound to the array inputs, the leaf names, and its split into
/// non-differentiable and differentiable arguments.
struct RuleArgs {
    def: TreeDef,
    inputs: Vec<InputLeaf>,
    operands: Vec<Tensor>,
    names: Vec<String>,
    /// With `nondiff_argnums`: the structure the rules receive them in, and their leaves.
    nondiff: Option<(TreeDef, Vec<Leaf>)>,
    /// The differentiable arguments as the rules receive them.
    diff_def: TreeDef,
    /// The leaves (indices into `inputs`) of the differentiable arguments, in order.
    diff_leaves: Vec<usize>,
}

impl RuleArgs {
    fn new<A: Tree>(
        args: &A,
        nondiff: Option<&[usize]>,
        wrapper: &str,
        name: &str,
    ) -> Result<RuleArgs> {
        let (leaves, def) = tree::flatten(args);
        let marked = nondiff.unwrap_or(&[]);
        check_nondiff(wrapper, name, marked, &def)?;
        let names = def.leaf_names(&[]);
        let positions: Vec<usize> = def.leaf_args().collect();
        let mut inputs = Vec::with_capacity(leaves.len());
        let mut operands = Vec::new();
        let mut diff_leaves = Vec::new();
        for (i, (leaf, &p)) in leaves.iter().zip(&positions).enumerate() {
            if marked.contains(&p) {
                if let Leaf::Tensor(t) = leaf {
                    if t.tracer().is_some() {
                        return Err(traced_nondiff(wrapper, name, p, t));
                    }
                }
                inputs.push(InputLeaf::Static(leaf.clone()));
                continue;
            }
            diff_leaves.push(i);
            match leaf {
                Leaf::Tensor(t) => {
                    inputs.push(InputLeaf::Array(t.ir_type()));
                    operands.push(t.clone());
                }
                other => inputs.push(InputLeaf::Static(other.clone())),
            }
        }
        let args_defs = def.positional_args();
        let nondiff = nondiff.map(|marked| {
            let defs = marked.iter().map(|&p| args_defs[p].clone()).collect();
            let values = marked
                .iter()
                .flat_map(|&p| {
                    leaves
                        .iter()
                        .zip(&positions)
                        .filter(move |(_, &q)| q == p)
                        .map(|(l, _)| l.clone())
                })
                .collect();
            (bare_or_tuple(defs), values)
        });
        let diff_def = if marked.is_empty() {
            def.clone()
        } else {
            bare_or_tuple(
                (0..args_defs.len())
                    .filter(|p| !marked.contains(p))
                    .map(|p| args_defs[p].clone())
                    .collect(),
            )
        };
        Ok(RuleArgs {
            def,
            inputs,
            operands,
            names,
            nondiff,
            diff_def,
            diff_leaves,
        })
    }

    /// The structure of the cotangent `bwd` returns: the differentiable arguments with `*` at
    /// the tensor leaves (operands, in order) and `None` at the other leaves.
    fn cotangent_def(&self) -> TreeDef {
        let is_operand: Vec<bool> = self
            .diff_leaves
            .iter()
            .map(|&i| matches!(self.inputs[i], InputLeaf::Array(_)))
            .collect();
        self.diff_def.keep_leaves(&is_operand)
    }

    /// The names of the operands (for errors).
    fn operand_names(&self) -> Vec<&str> {
        self.diff_leaves
            .iter()
            .filter(|&&i| matches!(self.inputs[i], InputLeaf::Array(_)))
            .map(|&i| self.names[i].as_str())
            .collect()
    }

    /// Prepends the non-differentiable arguments (static leaves) to a rule's inputs.
    fn push_nondiff(
        &self,
        defs: &mut Vec<TreeDef>,
        inputs: &mut Vec<InputLeaf>,
        names: &mut Vec<String>,
    ) {
        if let Some((def, leaves)) = &self.nondiff {
            defs.push(def.clone());
            for (k, leaf) in leaves.iter().enumerate() {
                inputs.push(InputLeaf::Static(leaf.clone()));
                names.push(format!("nondiff{k}"));
            }
        }
    }
}

/// Matches what `bwd` returned (`got`, with its output slots) against the cotangent structure
/// `expected`, where `None` in `got` means zeros for its whole subtree. Returns, per leaf of
/// `expected` (per operand), the bwd output holding its cotangent, `None` for zero.
struct CotangentMatch<'s> {
    slots: &'s [OutSlot],
    next_slot: usize,
    picks: Vec<Option<usize>>,
}

impl CotangentMatch<'_> {
    /// `Err(None)`: the structures differ; `Err(Some(e))`: another error.
    fn walk(
        &mut self,
        expected: &TreeDef,
        got: &TreeDef,
    ) -> std::result::Result<(), Option<Error>> {
        if *got == TreeDef::None {
            self.picks
                .extend(std::iter::repeat_n(None, expected.num_leaves()));
            return Ok(());
        }
        match (expected, got) {
            (TreeDef::Leaf, TreeDef::Leaf) => {
                let slot = &self.slots[self.next_slot];
                self.next_slot += 1;
                match slot {
                    OutSlot::Plan(i) => {
                        self.picks.push(Some(*i));
                        Ok(())
                    }
                    OutSlot::Static(l) => Err(Some(Error::invalid(format!(
                        "a cotangent must be a tensor or None, got {l:?}"
                    )))),
                }
            }
            (TreeDef::Tuple(e), TreeDef::Tuple(g)) | (TreeDef::List(e), TreeDef::List(g))
                if e.len() == g.len() =>
            {
                e.iter().zip(g).try_for_each(|(e, g)| self.walk(e, g))
            }
            (TreeDef::Dict(e), TreeDef::Dict(g))
                if e.len() == g.len() && e.iter().zip(g).all(|(a, b)| a.0 == b.0) =>
            {
                e.iter().zip(g).try_for_each(|(e, g)| self.walk(&e.1, &g.1))
            }
            (
                TreeDef::Node {
                    name: en,
                    fields: ef,
                    ..
                },
                TreeDef::Node {
                    name: gn,
                    fields: gf,
                    ..
                },
            ) if en == gn && ef.len() == gf.len() && ef.iter().zip(gf).all(|(a, b)| a.0 == b.0) => {
                ef.iter()
                    .zip(gf)
                    .try_for_each(|(e, g)| self.walk(&e.1, &g.1))
            }
            (TreeDef::Static(a), TreeDef::Static(b)) if a == b => Ok(()),
            _ => Err(None),
        }
    }
}

/// `graph` with one output per operand: output `picks[k]` of `graph`, or zeros of
/// `types[k]` where `picks[k]` is `None`.
fn with_zero_outputs(
    graph: &Graph,
    picks: &[Option<usize>],
    types: &[TensorType],
) -> Result<Graph> {
    Ok(graph.map_outputs(|b, outs| {
        picks
            .iter()
            .zip(types)
            .map(|(pick, ty)| match pick {
                Some(i) => Ok(outs[*i]),
                None => {
                    let zero = b.scalar(0.0, ty.dtype, false);
                    b.broadcast_to(zero, ty.shape.clone())
                }
            })
            .collect()
    })?)
}

/// TF5 for a custom rule called eagerly inside an eager loop body: the same call in the
/// loop's traced body is refused when it is recorded (`trace::record_custom`), and eager and
/// traced code accept the same programs.
fn refuse_in_eager_region(wrapper: &str) -> Result<()> {
    match trace::enclosing_region() {
        Some(region) => Err(Error::invalid(format!(
            "{wrapper} functions and solvers cannot be called inside a {region} body"
        ))),
        None => Ok(()),
    }
}

/// A copy of the argument tree (trees are rebuilt from their leaves).
fn copy_args<A: Tree>(args: &A) -> Result<A> {
    let (leaves, def) = tree::flatten(args);
    def.unflatten(leaves)
}

fn capture_error(wrapper: &str, name: &str) -> Error {
    Error::Tracer {
        kind: TracerErrorKind::CustomRuleCapture,
        message: format!(
            "{wrapper}({name}) cannot close over tracers of an enclosing transform; pass them as arguments"
        ),
    }
}

/// The types of the traced primal's outputs, which must all be floating tensors.
fn output_types(wrapper: &str, name: &str, traced: &TracedFunction) -> Result<Vec<TensorType>> {
    if traced
        .out_slots
        .iter()
        .any(|s| matches!(s, OutSlot::Static(_)))
    {
        return Err(Error::invalid(format!(
            "{wrapper}({name}) must return tensors only"
        )));
    }
    let types: Vec<TensorType> = traced
        .graph
        .outputs()
        .iter()
        .map(|o| traced.graph.node(*o).ty.clone())
        .collect();
    if types.iter().any(|t| t.dtype == DType::Bool) {
        return Err(Error::invalid(format!(
            "{wrapper}({name}) must return floating tensors, got bool"
        )));
    }
    Ok(types)
}

/// Checks that output `out` of `graph` has the type `expected` (`what` names it in errors).
fn check_type(what: &str, graph: &Graph, out: usize, expected: &TensorType) -> Result<()> {
    let got = &graph.node(graph.outputs()[out]).ty;
    if got.dtype != expected.dtype || got.shape != expected.shape {
        return Err(Error::invalid(format!(
            "{what} is {}{}, expected {}{}",
            got.dtype.name(),
            got.shape,
            expected.dtype.name(),
            expected.shape
        )));
    }
    Ok(())
}

/// Checks that the outputs `[from..from + n]` of `graph` have the types `expected`.
fn check_types(what: &str, graph: &Graph, from: usize, expected: &[TensorType]) -> Result<()> {
    let outs = graph.outputs();
    if outs.len() < from + expected.len() {
        return Err(Error::invalid(format!(
            "{what} returns {} tensors, expected {}",
            outs.len().saturating_sub(from),
            expected.len()
        )));
    }
    for (k, ty) in expected.iter().enumerate() {
        check_type(&format!("{what}: output {k}"), graph, from + k, ty)?;
    }
    Ok(())
}

/// Records the custom nodes and rebuilds `f`'s result from them.
fn emit<R: Tree>(rule: CustomRule, operands: Vec<Tensor>, out_def: &TreeDef) -> Result<R> {
    let outs = trace::record_custom(Arc::new(rule), operands.iter().map(Operand::from).collect())?;
    out_def.unflatten(outs.into_iter().map(Leaf::Tensor).collect())
}

// ---------------------------------------------------------------------------------------------
// custom_vjp

/// A function awaiting its reverse-mode rule: build with [`custom_vjp`], finish with
/// [`CustomVjp::defvjp`], or mark non-differentiable arguments first with
/// [`CustomVjp::nondiff_argnums`].
pub struct CustomVjp<'a, A, R> {
    f: Fun<'a, A, R>,
    name: String,
}

impl<A, R> fmt::Debug for CustomVjp<'_, A, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "custom_vjp({})", self.name)
    }
}

/// `custom_vjp(f)`: `f` with a user-defined reverse-mode rule, given by
/// [`CustomVjp::defvjp`].
pub fn custom_vjp<'a, A: Tree, R: Tree>(f: impl Fn(A) -> Result<R> + 'a) -> CustomVjp<'a, A, R> {
    CustomVjp {
        f: Box::new(f),
        name: "<closure>".into(),
    }
}

impl<'a, A: Tree, R: Tree> CustomVjp<'a, A, R> {
    /// The name shown in errors and IR text.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Marks positional arguments as non-differentiable (module docs): `bwd` then receives
    /// them first, `bwd((nondiff, residuals, g))`, and returns no cotangent for them.
    pub fn nondiff_argnums(self, argnums: &[usize]) -> CustomVjpNondiff<'a, A, R> {
        CustomVjpNondiff {
            f: self.f,
            name: self.name,
            nondiff: argnums.to_vec(),
        }
    }

    /// The rule: `fwd(args) -> (out, residuals)` (`out` with the structure of `f(args)`,
    /// `residuals` any tree, `()` for none) and `bwd((residuals, g)) -> cotangents`, where `g`
    /// is the cotangent of the output and the result has the structure of the argument tree
    /// with a cotangent of each tensor leaf's shape and dtype; `None` (or `()`) means zeros, for
    /// a leaf or a whole subtree, and is what non-tensor leaves take (module docs).
    pub fn defvjp<Res: Tree, G: Tree>(
        self,
        fwd: impl Fn(A) -> Result<(R, Res)> + 'a,
        bwd: impl Fn((Res, R)) -> Result<G> + 'a,
    ) -> CustomVjpFn<'a, A, R, Res, G> {
        CustomVjpFn {
            f: self.f,
            fwd: Box::new(fwd),
            bwd: Box::new(move |v: Value| bwd(v.into_typed()?)),
            nondiff: None,
            name: self.name,
            id: next_id(),
        }
    }
}

/// A [`CustomVjp`] with non-differentiable arguments, awaiting its rule
/// ([`CustomVjpNondiff::defvjp`]).
pub struct CustomVjpNondiff<'a, A, R> {
    f: Fun<'a, A, R>,
    name: String,
    nondiff: Vec<usize>,
}

impl<A, R> fmt::Debug for CustomVjpNondiff<'_, A, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "custom_vjp({}, nondiff_argnums={:?})",
            self.name, self.nondiff
        )
    }
}

impl<'a, A: Tree, R: Tree> CustomVjpNondiff<'a, A, R> {
    /// The name shown in errors and IR text.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The rule: `fwd(args) -> (out, residuals)` receives every argument;
    /// `bwd((nondiff, residuals, g)) -> cotangents` receives the non-differentiable arguments
    /// `nondiff` (the argument itself for one index, a tuple in the order given for several)
    /// and returns the cotangent of the differentiable arguments only (the remaining argument,
    /// or a tuple of the remaining arguments in positional order; `None` means zeros).
    ///
    /// ```
    /// use quabla as qb;
    /// use qb::Tensor;
    /// # fn main() -> qb::Result<()> {
    /// let scaled = qb::custom_vjp(|(k, x): (f64, Tensor)| &x * k)
    ///     .nondiff_argnums(&[0])
    ///     .defvjp(
    ///         |(k, x): (f64, Tensor)| Ok(((&x * k)?, ())),
    ///         |(k, (), g): (f64, (), Tensor)| &g * k,
    ///     );
    /// let g: Tensor = qb::grad(|x: Tensor| scaled.call(&(3.0, x))?.sum())
    ///     .call(&qb::array([1.0, 2.0])?)?;
    /// assert_eq!(g.to_vec::<f64>()?, [3.0, 3.0]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn defvjp<N: Tree, Res: Tree, G: Tree>(
        self,
        fwd: impl Fn(A) -> Result<(R, Res)> + 'a,
        bwd: impl Fn((N, Res, R)) -> Result<G> + 'a,
    ) -> CustomVjpFn<'a, A, R, Res, G> {
        CustomVjpFn {
            f: self.f,
            fwd: Box::new(fwd),
            bwd: Box::new(move |v: Value| bwd(v.into_typed()?)),
            nondiff: Some(self.nondiff),
            name: self.name,
            id: next_id(),
        }
    }
}

/// A function with a custom reverse-mode rule; call it with [`CustomVjpFn::call`].
pub struct CustomVjpFn<'a, A, R, Res, G> {
    f: Fun<'a, A, R>,
    fwd: Fun<'a, A, (R, Res)>,
    /// `bwd`, taking its argument tree untyped: `(residuals, g)`, or `(nondiff, residuals, g)`.
    bwd: Fun<'a, Value, G>,
    nondiff: Option<Vec<usize>>,
    name: String,
    id: u64,
}

impl<A, R, Res, G> fmt::Debug for CustomVjpFn<'_, A, R, Res, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "custom_vjp({})", self.name)
    }
}

impl<A: Tree, R: Tree, Res: Tree, G: Tree> CustomVjpFn<'_, A, R, Res, G> {
    /// Calls the function: `f(args)` outside any trace, a staged custom rule inside one.
    pub fn call(&self, args: &A) -> Result<R> {
        let wrapper = "custom_vjp";
        if !trace::active() || in_own_rule(self.id) {
            if !in_own_rule(self.id) {
                refuse_in_eager_region(wrapper)?;
            }
            if let Some(nondiff) = &self.nondiff {
                check_nondiff(wrapper, &self.name, nondiff, &tree::structure(args))?;
            }
            return (self.f)(copy_args(args)?);
        }
        let _guard = RuleGuard::enter(self.id);
        let st = RuleArgs::new(args, self.nondiff.as_deref(), wrapper, &self.name)?;
        let primal = trace::trace_function::<A, R>(&*self.f, &st.def, &st.inputs, &st.names)?;
        if !primal.captures.is_empty() {
            return Err(capture_error(wrapper, &self.name));
        }
        let out_types = output_types(wrapper, &self.name, &primal)?;
        let n_out = out_types.len();
        let fwd = trace::trace_function::<A, (R, Res)>(&*self.fwd, &st.def, &st.inputs, &st.names)?;
        if !fwd.captures.is_empty() {
            return Err(capture_error(wrapper, &self.name));
        }
        let fwd_what = format!("the fwd rule of {wrapper}({})", self.name);
        let res_def = match &fwd.out_def {
            TreeDef::Tuple(c) if c.len() == 2 && c[0] == primal.out_def => c[1].clone(),
            other => {
                return Err(Error::Structure {
                    message: format!(
                        "{fwd_what} must return (output, residuals) with the output's structure: pytree structures differ: {} vs {other}",
                        primal.out_def
                    ),
                })
            }
        };
        if fwd.out_slots[..n_out]
            .iter()
            .any(|s| matches!(s, OutSlot::Static(_)))
        {
            return Err(Error::invalid(format!("{fwd_what} must return tensors")));
        }
        check_types(&fwd_what, &fwd.graph, 0, &out_types)?;
        // bwd takes ([nondiff,] residuals, cotangent): the non-differentiable arguments as
        // static leaves, residual leaves as fwd produced them, then one cotangent per output.
        let mut bwd_defs = Vec::new();
        let mut bwd_inputs = Vec::new();
        let mut bwd_names = Vec::new();
        st.push_nondiff(&mut bwd_defs, &mut bwd_inputs, &mut bwd_names);
        for (k, slot) in fwd.out_slots[n_out..].iter().enumerate() {
            bwd_inputs.push(match slot {
                OutSlot::Plan(i) => {
                    InputLeaf::Array(fwd.graph.node(fwd.graph.outputs()[*i]).ty.clone())
                }
                OutSlot::Static(l) => InputLeaf::Static(l.clone()),
            });
            bwd_names.push(format!("residual{k}"));
        }
        for (k, ty) in out_types.iter().enumerate() {
            bwd_inputs.push(InputLeaf::Array(ty.clone()));
            bwd_names.push(format!("cotangent{k}"));
        }
        bwd_defs.push(res_def);
        bwd_defs.push(primal.out_def.clone());
        let bwd_def = TreeDef::Tuple(bwd_defs);
        let bwd = trace::trace_function::<Value, G>(&*self.bwd, &bwd_def, &bwd_inputs, &bwd_names)?;
        if !bwd.captures.is_empty() {
            return Err(capture_error(wrapper, &self.name));
        }
        let bwd_graph = self.cotangent_graph(&st, &bwd)?;
        let rule = CustomRule {
            name: self.name.clone(),
            primal: Arc::new(primal.graph),
            fwd: Some(Arc::new(fwd.graph)),
            bwd: Some(Arc::new(bwd_graph)),
            jvp: None,
            rematerialize: false,
        };
        emit(rule, st.operands, &primal.out_def)
    }

    /// The bwd graph in the form of [`CustomRule`]: one cotangent per operand, with the
    /// cotangents `bwd` returned as `None` made zeros.
    fn cotangent_graph(&self, st: &RuleArgs, bwd: &TracedFunction) -> Result<Graph> {
        let what = format!("the bwd rule of custom_vjp({})", self.name);
        let expected = st.cotangent_def();
        let mut m = CotangentMatch {
            slots: &bwd.out_slots,
            next_slot: 0,
            picks: Vec::new(),
        };
        match m.walk(&expected, &bwd.out_def) {
            Ok(()) => {}
            Err(None) => {
                return Err(Error::Structure {
                    message: format!(
                        "{what} must return one cotangent per differentiable argument, with that argument's structure (None for zeros): pytree structures differ: {expected} vs {}",
                        bwd.out_def
                    ),
                })
            }
            Err(Some(e)) => return Err(Error::invalid(format!("{what}: {e}"))),
        }
        let operand_types: Vec<TensorType> = st.operands.iter().map(Tensor::ir_type).collect();
        for ((pick, ty), name) in m.picks.iter().zip(&operand_types).zip(st.operand_names()) {
            if let Some(out) = pick {
                check_type(
                    &format!("{what}: the cotangent of {name}"),
                    &bwd.graph,
                    *out,
                    ty,
                )?;
            }
        }
        with_zero_outputs(&bwd.graph, &m.picks, &operand_types)
    }
}

// ---------------------------------------------------------------------------------------------
// custom_jvp

/// A function awaiting its forward-mode rule: build with [`custom_jvp`], finish with
/// [`CustomJvp::defjvp`], or mark non-differentiable arguments first with
/// [`CustomJvp::nondiff_argnums`].
pub struct CustomJvp<'a, A, R> {
    f: Fun<'a, A, R>,
    name: String,
}

impl<A, R> fmt::Debug for CustomJvp<'_, A, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "custom_jvp({})", self.name)
    }
}

/// `custom_jvp(f)`: `f` with a user-defined forward-mode rule, given by
/// [`CustomJvp::defjvp`]; reverse mode transposes the rule.
pub fn custom_jvp<'a, A: Tree, R: Tree>(f: impl Fn(A) -> Result<R> + 'a) -> CustomJvp<'a, A, R> {
    CustomJvp {
        f: Box::new(f),
        name: "<closure>".into(),
    }
}

impl<'a, A: Tree, R: Tree> CustomJvp<'a, A, R> {
    /// The name shown in errors and IR text.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Marks positional arguments as non-differentiable (module docs): the rule then receives
    /// them first, `rule((nondiff, primals, tangents))`, with primals and tangents of the
    /// differentiable arguments only.
    pub fn nondiff_argnums(self, argnums: &[usize]) -> CustomJvpNondiff<'a, A, R> {
        CustomJvpNondiff {
            f: self.f,
            name: self.name,
            nondiff: argnums.to_vec(),
        }
    }

    /// The rule: `rule((primals, tangents)) -> (primal_out, tangent_out)`, where `tangents`
    /// has the structure and types of `primals` (zeros at scalar leaves) and `tangent_out`
    /// must be linear in `tangents`. `primal_out` is ignored: the value is always `f(args)`.
    pub fn defjvp(self, rule: impl Fn((A, A)) -> Result<(R, R)> + 'a) -> CustomJvpFn<'a, A, R> {
        CustomJvpFn {
            f: self.f,
            rule: Box::new(move |v: Value| rule(v.into_typed()?)),
            nondiff: None,
            name: self.name,
            id: next_id(),
        }
    }
}

/// A [`CustomJvp`] with non-differentiable arguments, awaiting its rule
/// ([`CustomJvpNondiff::defjvp`]).
pub struct CustomJvpNondiff<'a, A, R> {
    f: Fun<'a, A, R>,
    name: String,
    nondiff: Vec<usize>,
}

impl<A, R> fmt::Debug for CustomJvpNondiff<'_, A, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "custom_jvp({}, nondiff_argnums={:?})",
            self.name, self.nondiff
        )
    }
}

impl<'a, A: Tree, R: Tree> CustomJvpNondiff<'a, A, R> {
    /// The name shown in errors and IR text.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The rule: `rule((nondiff, primals, tangents)) -> (primal_out, tangent_out)`, where
    /// `nondiff` holds the non-differentiable arguments (the argument itself for one index, a
    /// tuple in the order given for several) and `primals`/`tangents` the differentiable ones
    /// (the remaining argument, or a tuple of the remaining arguments in positional order).
    ///
    /// ```
    /// use quabla as qb;
    /// use qb::prelude::*;
    /// use qb::Tensor;
    /// # fn main() -> qb::Result<()> {
    /// let scaled_sin = qb::custom_jvp(|(k, x): (f64, Tensor)| x.sin().mul(k))
    ///     .nondiff_argnums(&[0])
    ///     .defjvp(|(k, x, t): (f64, Tensor, Tensor)| {
    ///         Ok((x.sin().mul(k)?, x.cos().mul(&t).mul(k)?))
    ///     });
    /// let (_, t) = qb::jvp(
    ///     |x: Tensor| scaled_sin.call(&(2.0, x)),
    ///     &qb::array(0.0)?,
    ///     &qb::array(1.0)?,
    /// )?;
    /// assert_eq!(t.item()?, 2.0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn defjvp<N: Tree, P: Tree>(
        self,
        rule: impl Fn((N, P, P)) -> Result<(R, R)> + 'a,
    ) -> CustomJvpFn<'a, A, R> {
        CustomJvpFn {
            f: self.f,
            rule: Box::new(move |v: Value| rule(v.into_typed()?)),
            nondiff: Some(self.nondiff),
            name: self.name,
            id: next_id(),
        }
    }
}

/// A function with a custom forward-mode rule; call it with [`CustomJvpFn::call`].
pub struct CustomJvpFn<'a, A, R> {
    f: Fun<'a, A, R>,
    /// The rule, taking its argument tree untyped: `(primals, tangents)`, or
    /// `(nondiff, primals, tangents)`.
    rule: Fun<'a, Value, (R, R)>,
    nondiff: Option<Vec<usize>>,
    name: String,
    id: u64,
}

impl<A, R> fmt::Debug for CustomJvpFn<'_, A, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "custom_jvp({})", self.name)
    }
}

impl<A: Tree, R: Tree> CustomJvpFn<'_, A, R> {
    /// Calls the function: `f(args)` outside any trace, a staged custom rule inside one.
    pub fn call(&self, args: &A) -> Result<R> {
        let wrapper = "custom_jvp";
        if !trace::active() || in_own_rule(self.id) {
            if !in_own_rule(self.id) {
                refuse_in_eager_region(wrapper)?;
            }
            if let Some(nondiff) = &self.nondiff {
                check_nondiff(wrapper, &self.name, nondiff, &tree::structure(args))?;
            }
            return (self.f)(copy_args(args)?);
        }
        let _guard = RuleGuard::enter(self.id);
        let st = RuleArgs::new(args, self.nondiff.as_deref(), wrapper, &self.name)?;
        let primal = trace::trace_function::<A, R>(&*self.f, &st.def, &st.inputs, &st.names)?;
        if !primal.captures.is_empty() {
            return Err(capture_error(wrapper, &self.name));
        }
        let out_types = output_types(wrapper, &self.name, &primal)?;
        let n_out = out_types.len();
        // The rule takes ([nondiff,] primals, tangents): the non-differentiable arguments as
        // static leaves, then the differentiable arguments' leaves, then their tangents. Its
        // graph inputs are therefore the operands, then one tangent per operand.
        let mut defs = Vec::new();
        let mut inputs = Vec::new();
        let mut names = Vec::new();
        st.push_nondiff(&mut defs, &mut inputs, &mut names);
        for &i in &st.diff_leaves {
            inputs.push(copy_input(&st.inputs[i]));
            names.push(st.names[i].clone());
        }
        for &i in &st.diff_leaves {
            inputs.push(tangent_input(&st.inputs[i]));
            names.push(format!("tangent/{}", st.names[i]));
        }
        defs.push(st.diff_def.clone());
        defs.push(st.diff_def.clone());
        let def = TreeDef::Tuple(defs);
        let traced = trace::trace_function::<Value, (R, R)>(&*self.rule, &def, &inputs, &names)?;
        if !traced.captures.is_empty() {
            return Err(capture_error(wrapper, &self.name));
        }
        let what = format!("the jvp rule of {wrapper}({})", self.name);
        let expected = TreeDef::Tuple(vec![primal.out_def.clone(), primal.out_def.clone()]);
        if traced.out_def != expected
            || traced
                .out_slots
                .iter()
                .any(|s| matches!(s, OutSlot::Static(_)))
        {
            return Err(Error::Structure {
                message: format!(
                    "{what} must return (primal_out, tangent_out) with the output's structure: pytree structures differ: {expected} vs {}",
                    traced.out_def
                ),
            });
        }
        // The value is always `fun`'s, but a rule whose primal_out differs from it in shape or
        // dtype is wrong (its tangents describe some other function): refused, not ignored.
        check_types(&format!("{what}: primal_out"), &traced.graph, 0, &out_types)?;
        check_types(
            &format!("{what}: tangent_out"),
            &traced.graph,
            n_out,
            &out_types,
        )?;
        let rule = CustomRule {
            name: self.name.clone(),
            primal: Arc::new(primal.graph),
            fwd: None,
            bwd: None,
            jvp: Some(Arc::new(
                traced
                    .graph
                    .with_outputs(traced.graph.outputs()[n_out..].to_vec())?,
            )),
            rematerialize: false,
        };
        emit(rule, st.operands, &primal.out_def)
    }
}

// ---------------------------------------------------------------------------------------------
// checkpoint

/// A checkpointed function: build with [`checkpoint`] (or [`remat`]), call with
/// [`Checkpoint::call`].
pub struct Checkpoint<'a, A, R> {
    f: Fun<'a, A, R>,
    name: String,
}

impl<A, R> fmt::Debug for Checkpoint<'_, A, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "checkpoint({})", self.name)
    }
}

/// `checkpoint(f)`: the same values and derivatives of every order as `f`; the backward pass
/// recomputes `f`'s intermediates from its arguments. `f` may close over outer tracers.
/// Non-tensor argument leaves are static.
pub fn checkpoint<'a, A: Tree, R: Tree>(f: impl Fn(A) -> Result<R> + 'a) -> Checkpoint<'a, A, R> {
    Checkpoint {
        f: Box::new(f),
        name: "<closure>".into(),
    }
}

/// Alias of [`checkpoint`].
pub fn remat<'a, A: Tree, R: Tree>(f: impl Fn(A) -> Result<R> + 'a) -> Checkpoint<'a, A, R> {
    checkpoint(f)
}

impl<A: Tree, R: Tree> Checkpoint<'_, A, R> {
    /// The name shown in IR text.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Calls the function: `f(args)` outside any trace, a staged checkpoint inside one.
    pub fn call(&self, args: &A) -> Result<R> {
        if !trace::active() {
            refuse_in_eager_region("checkpoint")?;
            return (self.f)(copy_args(args)?);
        }
        let st = RuleArgs::new(args, None, "checkpoint", &self.name)?;
        let primal = trace::trace_function::<A, R>(&*self.f, &st.def, &st.inputs, &st.names)?;
        output_types("checkpoint", &self.name, &primal)?;
        // Captured outer tracers become trailing operands (the primal's `capture{i}` inputs).
        let mut operands = st.operands;
        operands.extend(primal.captures.iter().cloned());
        let rule = CustomRule {
            name: self.name.clone(),
            primal: Arc::new(primal.graph),
            fwd: None,
            bwd: None,
            jvp: None,
            rematerialize: true,
        };
        emit(rule, operands, &primal.out_def)
    }
}
