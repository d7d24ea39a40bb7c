//! The trace context: a thread-local stack of traces that record operations on tracers.
//!
//! An operation with a traced operand records into the innermost trace
//! ([`record`]). Operands are resolved there: a tracer of that trace is its node; a tracer of
//! an enclosing trace is lifted as a hidden input named `capture{i}` (closure conversion); a
//! tracer of a trace that has ended is the "escaped tracer" error; a concrete tensor becomes a
//! constant of the graph (deduplicated per tensor); a Rust `f64` becomes a weak constant.
//! [`trace_function`] runs a function on fresh tracers and returns its graph.

use crate::error::{Error, Result, TracerErrorKind};
use crate::liveness::LiveTrace;
use crate::operand::Operand;
use crate::tensor::{leaked, Tensor, Tracer};
use crate::tree::{Leaf, Tree, TreeDef};
use quabla_ir::{Graph, GraphBuilder, NodeId, Op, TensorType};
use std::cell::RefCell;
use std::collections::HashMap;

struct Frame {
    id: u64,
    builder: GraphBuilder,
    /// Tracers of enclosing traces lifted as hidden inputs, with their input nodes.
    captures: Vec<(Tensor, NodeId)>,
    /// Concrete tensors already turned into constants (kept alive so identities stay unique).
    constants: HashMap<usize, (Tensor, NodeId)>,
    /// The primitive whose body this frame traces (`"cond"`, `"fori_loop"`, ...): such a
    /// frame may not capture tracers of enclosing frames (TR3).
    region: Option<&'static str>,
}

thread_local! {
    static FRAMES: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

/// Whether any trace is active on this thread.
pub(crate) fn active() -> bool {
    FRAMES.with(|f| !f.borrow().is_empty())
}

/// TR3.
fn region_capture() -> Error {
    Error::Tracer {
        kind: TracerErrorKind::RegionCapture,
        message: "control-flow regions cannot close over an outer tracer; pass it explicitly using operands= (for cond, as extra positional operands)".into(),
    }
}

thread_local! {
    /// The control-flow primitives whose bodies this thread runs eagerly, innermost last.
    static EAGER_REGIONS: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
}

/// The innermost control-flow body being traced, or run eagerly, on this thread, if any
/// (TF5 checks it): an eager loop body refuses what its traced form refuses.
pub(crate) fn enclosing_region() -> Option<&'static str> {
    FRAMES
        .with(|f| f.borrow().iter().rev().find_map(|fr| fr.region))
        .or_else(|| EAGER_REGIONS.with(|r| r.borrow().last().copied()))
}

/// Runs one eager execution of a body of `primitive` (a loop body or a `while_loop`
/// condition run as plain Rust): inside it, [`enclosing_region`] names `primitive`, so that
/// solvers and custom rules raise TF5 there exactly as in the traced body.
pub(crate) fn eager_region_body<R>(primitive: &'static str, f: impl FnOnce() -> R) -> R {
    /// Pops the marker when `f` returns or unwinds.
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            let _ = EAGER_REGIONS.try_with(|r| r.borrow_mut().pop());
        }
    }
    EAGER_REGIONS.with(|r| r.borrow_mut().push(primitive));
    let _pop = Pop;
    f()
}

/// Resolves an operand into a node of the innermost frame.
fn resolve(frames: &mut [Frame], operand: &Operand) -> Result<NodeId> {
    let (outer, top) = frames.split_at_mut(frames.len() - 1);
    let top = &mut top[0];
    match operand {
        Operand::Scalar(v) => Ok(top.builder.weak_scalar(*v)),
        Operand::Int(v) => Ok(top.builder.weak_int(*v)),
        Operand::Error(_) => unreachable!("errors are returned before recording"),
        Operand::Tensor(t) => match t.tracer() {
            Some(tr) if tr.trace == top.id => Ok(tr.node),
            Some(tr) => {
                if !outer.iter().any(|f| f.id == tr.trace) {
                    return Err(leaked(tr));
                }
                if let Some((_, n)) = top.captures.iter().find(|(c, _)| Tensor::same(c, t)) {
                    return Ok(*n);
                }
                if top.region.is_some() {
                    return Err(region_capture());
                }
                let name = format!("capture{}", top.captures.len());
                let node = top.builder.input(name, tr.ty.clone());
                top.captures.push((t.clone(), node));
                Ok(node)
            }
            None => {
                if let Some((_, n)) = top.constants.get(&t.identity()) {
                    return Ok(*n);
                }
                let host = t.to_host()?;
                let node = top.builder.constant(host.data, host.shape, t.is_weak())?;
                top.constants.insert(t.identity(), (t.clone(), node));
                Ok(node)
            }
        },
    }
}

/// Resolves `operands` into the innermost frame, lets `emit` append nodes there, and returns
/// tracers for the nodes it names: the one path by which operations, custom calls and inlined
/// graphs enter a trace. A tracer whose trace has ended is TR5.
/// The source directory of this crate, as `Location::file` spells its files.
fn library_dir() -> &'static str {
    let here = file!();
    here.strip_suffix("trace.rs").unwrap_or(here)
}

/// `site` when it is the user's code; `None` when it is inside this library (a call chain
/// that lost the caller, e.g. through a closure), which would point at the wrong line.
fn user_site(
    site: &'static std::panic::Location<'static>,
) -> Option<&'static std::panic::Location<'static>> {
    let file = site.file();
    (!file.starts_with(library_dir()) && !crate::debug::hidden_source(file)).then_some(site)
}

/// Records into the innermost trace: `emit` appends nodes to its builder, each given the
/// origin of the caller of the `#[track_caller]` chain that reached here.
#[track_caller]
fn emit_into_top(
    operands: &[Operand],
    emit: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> Result<Vec<NodeId>>,
) -> Result<Vec<Tensor>> {
    let origin = quabla_ir::Origin {
        loc: user_site(std::panic::Location::caller()),
        rule: None,
    };
    FRAMES.with(|frames| {
        let mut frames = frames.borrow_mut();
        if frames.is_empty() {
            // Only a leaked tracer can bring an operation here with no trace active.
            for o in operands {
                if let Operand::Tensor(t) = o {
                    if let Some(tr) = t.tracer() {
                        return Err(leaked(tr));
                    }
                }
            }
            return Err(Error::Internal {
                message: "an operation was recorded with no active trace".into(),
            });
        }
        let nodes = operands
            .iter()
            .map(|o| resolve(&mut frames, o))
            .collect::<Result<Vec<_>>>()?;
        let top = frames.last_mut().expect("checked non-empty above");
        let previous = top.builder.set_origin(origin);
        let outputs = emit(&mut top.builder, &nodes);
        top.builder.set_origin(previous);
        let outputs = outputs?;
        Ok(outputs
            .into_iter()
            .map(|node| {
                Tensor::traced(Tracer {
                    trace: top.id,
                    node,
                    ty: top.builder.ty(node).clone(),
                })
            })
            .collect())
    })
}

/// Records an operation into the innermost trace. `operands` contains at least one tracer.
#[track_caller]
pub(crate) fn record(
    operands: Vec<Operand>,
    build: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> quabla_ir::Result<NodeId>,
) -> Result<Tensor> {
    let mut out = emit_into_top(&operands, |b, nodes| Ok(vec![build(b, nodes)?]))?;
    Ok(out.pop().expect("one node was emitted"))
}

/// Records the `custom` nodes of one call of a custom rule into the innermost trace (one node
/// per output of its primal graph, sharing the rule and the operands) and returns their
/// tracers.
#[track_caller]
pub(crate) fn record_custom(
    rule: std::sync::Arc<quabla_ir::CustomRule>,
    operands: Vec<Operand>,
) -> Result<Vec<Tensor>> {
    if let Some(region) = enclosing_region() {
        // TF5: compiled regions do not keep custom rules.
        let wrapper = if rule.fwd.is_some() {
            "custom_vjp"
        } else if rule.jvp.is_some() {
            "custom_jvp"
        } else {
            "checkpoint"
        };
        return Err(Error::invalid(format!(
            "{wrapper} functions and solvers cannot be called inside a {region} body"
        )));
    }
    let n = rule.primal.outputs().len();
    emit_into_top(&operands, |b, nodes| {
        (0..n)
            .map(|output| {
                let call = quabla_ir::CustomCall {
                    rule: rule.clone(),
                    output,
                };
                Ok(b.push(Op::Custom(call), nodes)?)
            })
            .collect()
    })
}

/// Records the nodes of one region call into the innermost trace (one node per output,
/// sharing the region and the operands) and returns their tracers.
#[track_caller]
pub(crate) fn record_region(
    region: std::sync::Arc<quabla_ir::Region>,
    operands: Vec<Operand>,
) -> Result<Vec<Tensor>> {
    let n = region.output_types().len();
    emit_into_top(&operands, |b, nodes| {
        Ok(b.push_region_calls(region.clone(), 0..n, nodes)?)
    })
}

/// Traces one body of a control-flow region: `f` runs on fresh tracers of `inputs` (named
/// parameters) in a frame that rejects captures of enclosing tracers (TR3), and the graph of
/// its results is returned. Eager tensors it closes over become constants.
pub(crate) fn trace_region_body(
    primitive: &'static str,
    inputs: &[(String, TensorType)],
    f: impl FnOnce(Vec<Tensor>) -> Result<Vec<Tensor>>,
) -> Result<Graph> {
    let live = LiveTrace::start();
    let id = live.id();
    let mut builder = GraphBuilder::new();
    let mut params = Vec::with_capacity(inputs.len());
    for (name, ty) in inputs {
        let node = builder.input(name.clone(), ty.clone());
        params.push(Tensor::traced(Tracer {
            trace: id,
            node,
            ty: ty.clone(),
        }));
    }
    FRAMES.with(|f| {
        f.borrow_mut().push(Frame {
            id,
            builder,
            captures: Vec::new(),
            constants: HashMap::new(),
            region: Some(primitive),
        })
    });
    let guard = FrameGuard { id };
    let results = f(params)?;
    let out_nodes = FRAMES.with(|frames| -> Result<Vec<NodeId>> {
        let mut frames = frames.borrow_mut();
        results
            .into_iter()
            .map(|t| resolve(&mut frames, &Operand::Tensor(t)))
            .collect()
    })?;
    let frame = FRAMES
        .with(|f| f.borrow_mut().pop())
        .expect("the frame pushed above");
    std::mem::forget(guard);
    Ok(frame.builder.finish(out_nodes)?)
}

/// Inlines `graph` into the innermost trace with its inputs bound to `operands` (in input
/// order) and returns tracers for its outputs.
#[track_caller]
pub(crate) fn inline(graph: &Graph, operands: Vec<Operand>) -> Result<Vec<Tensor>> {
    emit_into_top(&operands, |b, nodes| Ok(b.inline_graph(graph, nodes)?))
}

/// Pops the frame it pushed even when the traced function fails or panics.
struct FrameGuard {
    id: u64,
}

impl Drop for FrameGuard {
    fn drop(&mut self) {
        FRAMES.with(|f| {
            let mut f = f.borrow_mut();
            if f.last().map(|fr| fr.id) == Some(self.id) {
                f.pop();
            }
        });
    }
}

/// The input a traced function receives for one argument leaf.
pub(crate) enum InputLeaf {
    /// An array leaf: becomes a plan input of this type.
    Array(TensorType),
    /// A static leaf passed through unchanged.
    Static(Leaf),
}

/// A traced function: its graph (inputs first: argument leaves in order, then captures),
/// the enclosing tracers it captured, and the structure of its result. A transform's stage
/// returns one too, with the graph rewritten (`crate::staging::execute`).
pub(crate) struct TracedFunction {
    pub graph: Graph,
    /// Tracers of enclosing traces, bound to the trailing `capture{i}` inputs.
    pub captures: Vec<Tensor>,
    pub out_def: TreeDef,
    /// For each output leaf: a plan output index, or a static leaf.
    pub out_slots: Vec<OutSlot>,
}

#[derive(Clone, Debug)]
pub(crate) enum OutSlot {
    Plan(usize),
    Static(Leaf),
}

/// Runs `f` on tracers for the array leaves of `inputs` (static leaves pass through) and
/// returns the recorded graph.
pub(crate) fn trace_function<A: Tree, R: Tree>(
    f: &dyn Fn(A) -> Result<R>,
    in_def: &TreeDef,
    inputs: &[InputLeaf],
    names: &[String],
) -> Result<TracedFunction> {
    let live = LiveTrace::start();
    let id = live.id();
    let mut builder = GraphBuilder::new();
    let mut arg_leaves = Vec::with_capacity(inputs.len());
    for (i, leaf) in inputs.iter().enumerate() {
        arg_leaves.push(match leaf {
            InputLeaf::Array(ty) => {
                let node = builder.input(names[i].clone(), ty.clone());
                Leaf::Tensor(Tensor::traced(Tracer {
                    trace: id,
                    node,
                    ty: ty.clone(),
                }))
            }
            InputLeaf::Static(l) => l.clone(),
        });
    }
    FRAMES.with(|f| {
        f.borrow_mut().push(Frame {
            id,
            builder,
            captures: Vec::new(),
            constants: HashMap::new(),
            region: None,
        })
    });
    let guard = FrameGuard { id };
    let args: A = in_def.unflatten(arg_leaves)?;
    let result = f(args)?;
    let (out_leaves, out_def) = crate::tree::flatten(&result);
    if let Err(e) = out_def.check() {
        // A result with no pytree form (e.g. nested too deep) is refused here.
        crate::tree::dispose_refused(result, &out_def);
        return Err(e);
    }
    // Resolve output leaves into nodes of this frame (constants and captures included).
    let mut out_nodes = Vec::new();
    let mut out_slots = Vec::with_capacity(out_leaves.len());
    FRAMES.with(|frames| -> Result<()> {
        let mut frames = frames.borrow_mut();
        for leaf in out_leaves {
            match leaf {
                Leaf::Tensor(t) => {
                    let node = resolve(&mut frames, &Operand::Tensor(t))?;
                    out_slots.push(OutSlot::Plan(out_nodes.len()));
                    out_nodes.push(node);
                }
                other => out_slots.push(OutSlot::Static(other)),
            }
        }
        Ok(())
    })?;
    let frame = FRAMES
        .with(|f| f.borrow_mut().pop())
        .expect("the frame pushed above");
    std::mem::forget(guard);
    let graph = frame.builder.finish_inputs_first(out_nodes)?;
    Ok(TracedFunction {
        graph,
        captures: frame.captures.into_iter().map(|(t, _)| t).collect(),
        out_def,
        out_slots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quabla_ir::{DType, Shape};

    fn vector(n: usize) -> InputLeaf {
        InputLeaf::Array(TensorType::new(DType::F64, Shape::new(vec![n]).unwrap()))
    }

    #[test]
    fn nested_traces_lift_outer_tracers_as_captures() {
        let inner_graph = std::cell::RefCell::new(None);
        let outer = |y: Tensor| -> Result<Tensor> {
            // An inner trace whose function closes over the outer tracer `y`.
            let inner = |x: Tensor| -> Result<Tensor> { (&x * &y)? + &y };
            let traced = trace_function::<Tensor, Tensor>(
                &inner,
                &TreeDef::Leaf,
                &[vector(2)],
                &["x".to_string()],
            )?;
            assert_eq!(traced.captures.len(), 1, "y is captured once");
            assert!(Tensor::same(&traced.captures[0], &y));
            *inner_graph.borrow_mut() = Some(traced.graph);
            y.sin()
        };
        let traced = trace_function::<Tensor, Tensor>(
            &outer,
            &TreeDef::Leaf,
            &[vector(2)],
            &["y".to_string()],
        )
        .unwrap();
        assert!(traced.captures.is_empty());
        let text = inner_graph.borrow().as_ref().unwrap().to_string();
        assert!(
            text.starts_with(
                "%0 = input[name=x] : tensor<2xf64>\n%1 = input[name=capture0] : tensor<2xf64>\n"
            ),
            "{text}"
        );
        assert!(text.contains("mul(%0, %1)"), "{text}");
    }

    #[test]
    fn frames_are_popped_on_errors() {
        let failing = |_: Tensor| -> Result<Tensor> { Err(Error::invalid("boom")) };
        let r = trace_function::<Tensor, Tensor>(
            &failing,
            &TreeDef::Leaf,
            &[vector(1)],
            &["x".to_string()],
        );
        assert!(r.is_err());
        assert!(!active());
    }
}
