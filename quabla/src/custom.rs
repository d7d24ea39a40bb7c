//! Custom derivative rules and checkpointing (transforms.md §14): [`custom_vjp`],
//! [`custom_jvp`], [`checkpoint`] (alias [`remat`]).
//!
//! Outside any trace a wrapped function simply runs `f`. Inside a trace (`jit`, `grad`, `vmap`,
//! ...) the call is staged: `f` and the rule functions are traced on tracers into graphs and
//! recorded as `custom` IR nodes (one per output) carrying a [`quabla_ir::CustomRule`]; the
//! symbolic transforms apply the rule and plan compilation replaces the node by `f`'s graph.
//!
//! Arguments: the tensor leaves of the argument tree are the rule's operands (differentiable
//! when floating); every other leaf (an `f64`, a bool, a [`crate::Static`]) is a constant passed
//! through unchanged, which is how non-differentiable arguments are written. Every output of
//! `f` must be a floating tensor. Inside its own rule functions a wrapper evaluates plain `f`
//! (no recursion).

use crate::error::{Error, Result, TracerErrorKind};
use crate::operand::Operand;
use crate::tensor::Tensor;
use crate::trace::{self, InputLeaf, OutSlot, TracedFunction};
use crate::tree::{self, Leaf, Tree, TreeDef};
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

/// The argument tree of one staged call: its structure, the inputs of the traced functions,
/// the tensors bound to the array inputs, and the leaf names.
struct Staged {
    def: TreeDef,
    inputs: Vec<InputLeaf>,
    operands: Vec<Tensor>,
    names: Vec<String>,
}

fn stage_args<A: Tree>(args: &A) -> Staged {
    let (leaves, def) = tree::flatten(args);
    let names = trace::leaf_names(&def, &[]);
    let mut inputs = Vec::with_capacity(leaves.len());
    let mut operands = Vec::new();
    for leaf in leaves {
        match leaf {
            Leaf::Tensor(t) => {
                inputs.push(InputLeaf::Array(t.ir_type()));
                operands.push(t);
            }
            other => inputs.push(InputLeaf::Static(other)),
        }
    }
    Staged {
        def,
        inputs,
        operands,
        names,
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

/// `graph` keeping only its outputs `[from..]`.
fn keep_outputs_from(graph: &Graph, from: usize) -> Result<Graph> {
    Ok(Graph::from_parts(
        graph.nodes().to_vec(),
        graph.outputs()[from..].to_vec(),
    )?)
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
        let got = &graph.node(outs[from + k]).ty;
        if got.dtype != ty.dtype || got.shape != ty.shape {
            return Err(Error::invalid(format!(
                "{what}: output {k} is {}{}, expected {}{}",
                got.dtype.name(),
                got.shape,
                ty.dtype.name(),
                ty.shape
            )));
        }
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
/// [`CustomVjp::defvjp`].
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

    /// The rule: `fwd(args) -> (out, residuals)` (`out` with the structure of `f(args)`,
    /// `residuals` any tree, `()` for none) and `bwd((residuals, g)) -> cotangents`, where `g`
    /// is the cotangent of the output and the result holds one tensor per tensor leaf of the
    /// arguments, in order, with that leaf's shape and dtype (a single tensor for a one-tensor
    /// argument; a tuple otherwise). Non-tensor argument leaves get no cotangent.
    pub fn defvjp<Res: Tree, G: Tree>(
        self,
        fwd: impl Fn(A) -> Result<(R, Res)> + 'a,
        bwd: impl Fn((Res, R)) -> Result<G> + 'a,
    ) -> CustomVjpFn<'a, A, R, Res, G> {
        CustomVjpFn {
            f: self.f,
            fwd: Box::new(fwd),
            bwd: Box::new(bwd),
            name: self.name,
            id: next_id(),
        }
    }
}

/// A function with a custom reverse-mode rule; call it with [`CustomVjpFn::call`].
pub struct CustomVjpFn<'a, A, R, Res, G> {
    f: Fun<'a, A, R>,
    fwd: Fun<'a, A, (R, Res)>,
    bwd: Fun<'a, (Res, R), G>,
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
        if !trace::active() || in_own_rule(self.id) {
            return (self.f)(copy_args(args)?);
        }
        let _guard = RuleGuard::enter(self.id);
        let wrapper = "custom_vjp";
        let st = stage_args(args);
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
        // bwd takes (residuals, cotangent): residual leaves as fwd produced them, then one
        // cotangent per output.
        let mut bwd_inputs = Vec::new();
        let mut bwd_names = Vec::new();
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
        let bwd_def = TreeDef::Tuple(vec![res_def, primal.out_def.clone()]);
        let bwd =
            trace::trace_function::<(Res, R), G>(&*self.bwd, &bwd_def, &bwd_inputs, &bwd_names)?;
        if !bwd.captures.is_empty() {
            return Err(capture_error(wrapper, &self.name));
        }
        let operand_types: Vec<TensorType> = st.operands.iter().map(Tensor::ir_type).collect();
        let bwd_what = format!("the bwd rule of {wrapper}({})", self.name);
        if bwd
            .out_slots
            .iter()
            .any(|s| matches!(s, OutSlot::Static(_)))
            || bwd.graph.outputs().len() != operand_types.len()
        {
            return Err(Error::invalid(format!(
                "{bwd_what} must return one cotangent tensor per tensor argument ({}), got {} tensors",
                operand_types.len(),
                bwd.graph.outputs().len()
            )));
        }
        check_types(&bwd_what, &bwd.graph, 0, &operand_types)?;
        let rule = CustomRule {
            name: self.name.clone(),
            primal: Arc::new(primal.graph),
            fwd: Some(Arc::new(fwd.graph)),
            bwd: Some(Arc::new(bwd.graph)),
            jvp: None,
            rematerialize: false,
        };
        emit(rule, st.operands, &primal.out_def)
    }
}

// ---------------------------------------------------------------------------------------------
// custom_jvp

/// A function awaiting its forward-mode rule: build with [`custom_jvp`], finish with
/// [`CustomJvp::defjvp`].
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

    /// The rule: `rule((primals, tangents)) -> (primal_out, tangent_out)`, where `tangents`
    /// has the structure and types of `primals` and `tangent_out` must be linear in
    /// `tangents`. `primal_out` is ignored: the value is always `f(args)`.
    pub fn defjvp(self, rule: impl Fn((A, A)) -> Result<(R, R)> + 'a) -> CustomJvpFn<'a, A, R> {
        CustomJvpFn {
            f: self.f,
            rule: Box::new(rule),
            name: self.name,
            id: next_id(),
        }
    }
}

/// A function with a custom forward-mode rule; call it with [`CustomJvpFn::call`].
pub struct CustomJvpFn<'a, A, R> {
    f: Fun<'a, A, R>,
    rule: Fun<'a, (A, A), (R, R)>,
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
        if !trace::active() || in_own_rule(self.id) {
            return (self.f)(copy_args(args)?);
        }
        let _guard = RuleGuard::enter(self.id);
        let wrapper = "custom_jvp";
        let st = stage_args(args);
        let primal = trace::trace_function::<A, R>(&*self.f, &st.def, &st.inputs, &st.names)?;
        if !primal.captures.is_empty() {
            return Err(capture_error(wrapper, &self.name));
        }
        let out_types = output_types(wrapper, &self.name, &primal)?;
        let n_out = out_types.len();
        // The rule takes (primals, tangents): primal leaves, then tangents of the same types.
        let mut inputs = Vec::with_capacity(2 * st.inputs.len());
        let mut names = Vec::with_capacity(2 * st.inputs.len());
        for (leaf, name) in st.inputs.iter().zip(&st.names) {
            inputs.push(match leaf {
                InputLeaf::Array(t) => InputLeaf::Array(t.clone()),
                InputLeaf::Static(l) => InputLeaf::Static(l.clone()),
            });
            names.push(name.clone());
        }
        for (leaf, name) in st.inputs.iter().zip(&st.names) {
            inputs.push(match leaf {
                InputLeaf::Array(t) => InputLeaf::Array(t.clone()),
                InputLeaf::Static(l) => InputLeaf::Static(l.clone()),
            });
            names.push(format!("tangent/{name}"));
        }
        let def = TreeDef::Tuple(vec![st.def.clone(), st.def.clone()]);
        let traced = trace::trace_function::<(A, A), (R, R)>(&*self.rule, &def, &inputs, &names)?;
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
        check_types(&what, &traced.graph, n_out, &out_types)?;
        let rule = CustomRule {
            name: self.name.clone(),
            primal: Arc::new(primal.graph),
            fwd: None,
            bwd: None,
            jvp: Some(Arc::new(keep_outputs_from(&traced.graph, n_out)?)),
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
            return (self.f)(copy_args(args)?);
        }
        let st = stage_args(args);
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
