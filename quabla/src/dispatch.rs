//! How an operation runs: it is recorded as a small graph with the checked builder of
//! `quabla-ir` (which owns promotion, broadcasting and every type error), inlined into the
//! innermost trace when an operand is a tracer, and otherwise run eagerly through
//! [`crate::runtime::run_eager`], on the CPU backend resolved through the registry like every
//! `jit` target (the same road, the same kernels, the same bits).
//!
//! Every operand, including a Rust `f64` (a weak rank-0 input), is a plan input, so the eager
//! cache holds one entry per op and operand signature, not per value. [`apply`] is the road of
//! one-result operations and [`apply_many`] of operations with several results (a
//! factorization's outputs, computed by one kernel run).
//!
//! It must not keep a cache of its own (the runtime's is the one eager cache).

use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::tensor::Tensor;
use crate::trace;
use quabla_ir::{DType, GraphBuilder, HostData, NodeId, Shape};

/// Resolves operands to tensors; a Rust `f64` becomes a weak float64 scalar. Returns the
/// tensors and whether any is a tracer; the first error among them is returned instead.
fn resolve(operands: Vec<Operand>) -> Result<(Vec<Tensor>, bool)> {
    let mut tensors = Vec::with_capacity(operands.len());
    let mut traced = false;
    for operand in operands {
        match operand {
            Operand::Tensor(t) => {
                traced |= t.is_traced();
                tensors.push(t);
            }
            Operand::Scalar(v) => tensors.push(Tensor::weak_scalar(v)),
            Operand::Int(v) => tensors.push(Tensor::weak_int(v)),
            Operand::Error(e) => return Err(e),
        }
    }
    Ok((tensors, traced))
}

/// A builder with one input per tensor (`arg0`, `arg1`, ...), and those inputs.
fn builder_over(tensors: &[Tensor]) -> (GraphBuilder, Vec<NodeId>) {
    let mut b = GraphBuilder::new();
    let inputs = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| b.input(format!("arg{i}"), t.ir_type()))
        .collect();
    (b, inputs)
}

/// Applies one operation built by `build` to `operands` and returns its single result: recorded
/// into the innermost trace when an operand is a tracer, executed eagerly otherwise.
#[track_caller]
pub(crate) fn apply(
    operands: Vec<Operand>,
    build: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> quabla_ir::Result<NodeId>,
) -> Result<Tensor> {
    let mut operands = operands;
    if let Some(i) = operands.iter().position(|o| matches!(o, Operand::Error(_))) {
        if let Operand::Error(e) = operands.swap_remove(i) {
            return Err(e);
        }
    }
    let traced = operands
        .iter()
        .any(|o| matches!(o, Operand::Tensor(t) if t.is_traced()));
    if traced {
        return trace::record(operands, build);
    }
    let (tensors, _) = resolve(operands)?;
    let (mut b, inputs) = builder_over(&tensors);
    let out = build(&mut b, &inputs)?;
    if let Some(i) = inputs.iter().position(|&n| n == out) {
        return Ok(tensors[i].clone());
    }
    let op = b.node(out).op.name();
    let graph = b.finish(vec![out])?;
    let mut results =
        crate::runtime::run_eager(graph, &tensors, op, std::panic::Location::caller())?;
    results.pop().ok_or_else(|| Error::Internal {
        message: "a plan returned no output".into(),
    })
}

/// Applies the graph `build` makes of `operands` and returns its results (in order): inlined
/// into the innermost trace when an operand is traced, else run eagerly as one plan, so the CPU
/// backend computes one factorization for all of its outputs.
#[track_caller]
pub(crate) fn apply_many(
    operands: Vec<Operand>,
    build: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> quabla_ir::Result<Vec<NodeId>>,
) -> Result<Vec<Tensor>> {
    let (tensors, traced) = resolve(operands)?;
    let (mut b, inputs) = builder_over(&tensors);
    let outs = build(&mut b, &inputs)?;
    let op = outs.first().map_or("operation", |&o| b.node(o).op.name());
    let graph = b.finish(outs)?;
    if traced {
        return trace::inline(&graph, tensors.into_iter().map(Operand::Tensor).collect());
    }
    crate::runtime::run_eager(graph, &tensors, op, std::panic::Location::caller())
}

/// A constant tensor filled with one value, built on the host.
#[track_caller]
pub(crate) fn filled(shape: &[usize], value: f64, dtype: DType) -> Result<Tensor> {
    let shape = Shape::new(shape.to_vec())?;
    let n = shape.size();
    Ok(Tensor::from_parts(
        shape,
        HostData::try_filled(dtype, value, n)?,
        false,
    ))
}
