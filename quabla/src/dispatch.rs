//! How an operation runs: it is recorded as a small graph with the checked builder of
//! `quabla-ir` (which owns promotion, broadcasting and every type error) and executed on the
//! CPU backend, resolved through the registry like every `jit` target (the same road: the
//! backend is looked up once per process). The compiled plan of each distinct graph is
//! cached per thread, so a repeated eager operation pays only for building its key graph and
//! binding buffers.
//!
//! Every operand, including a Rust `f64` (a weak rank-0 input), is a plan input, so the cache
//! holds one entry per op and operand signature, not per value.

use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::staging::with_host_refs;
use crate::tensor::Tensor;
use crate::trace;
use quabla_backend::{Backend, Executable};
use quabla_ir::{DType, Graph, GraphBuilder, HostData, NodeId, Plan, Shape};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// How many compiled eager plans each thread keeps before starting over.
const EAGER_CACHE_CAPACITY: usize = 4096;

thread_local! {
    static EAGER_CACHE: RefCell<HashMap<Graph, Arc<dyn Executable>>> = RefCell::new(HashMap::new());
}

/// The backend eager operations run on: the registry's `cpu`, which is always available.
#[track_caller]
fn eager_backend() -> Result<&'static Arc<dyn Backend>> {
    static CPU: OnceLock<Arc<dyn Backend>> = OnceLock::new();
    if let Some(backend) = CPU.get() {
        return Ok(backend);
    }
    let backend = crate::devices::backend_for("cpu")?;
    Ok(CPU.get_or_init(|| backend))
}

/// Resolves operands to tensors; a Rust `f64` becomes a weak float64 scalar.
#[track_caller]
fn resolve(operands: Vec<Operand>) -> Result<Vec<Tensor>> {
    operands
        .into_iter()
        .map(|o| match o {
            Operand::Tensor(t) => Ok(t),
            Operand::Scalar(v) => Ok(Tensor::from_parts(
                Shape::scalar(),
                HostData::F64([v].into()),
                true,
            )),
            Operand::Error(e) => Err(e),
        })
        .collect()
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
    let tensors = resolve(operands)?;
    let mut b = GraphBuilder::new();
    let inputs: Vec<NodeId> = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| b.input(format!("arg{i}"), t.ir_type()))
        .collect();
    let out = build(&mut b, &inputs)?;
    if let Some(i) = inputs.iter().position(|&n| n == out) {
        return Ok(tensors[i].clone());
    }
    let weak = b.ty(out).weak;
    let checked_op = crate::debug::nans_checked().then(|| b.node(out).op.name());
    let graph = b.finish(vec![out])?;
    let exe = compiled(graph)?;
    let mut outs = Vec::with_capacity(1);
    with_host_refs(tensors.iter().map(Tensor::host), |host| {
        Ok(exe.run_borrowed(host, &mut outs)?)
    })?;
    let result = outs.pop().ok_or_else(|| Error::Internal {
        message: "a plan returned no output".into(),
    })?;
    let result = Tensor::from_host(result, weak);
    if let Some(op) = checked_op {
        crate::debug::check_eager(op, &tensors, &result, std::panic::Location::caller())?;
    }
    Ok(result)
}

#[track_caller]
fn compiled(graph: Graph) -> Result<Arc<dyn Executable>> {
    if let Some(exe) = EAGER_CACHE.with(|c| c.borrow().get(&graph).cloned()) {
        return Ok(exe);
    }
    let exe = eager_backend()?.compile(&Plan::compile(&graph))?;
    EAGER_CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= EAGER_CACHE_CAPACITY {
            c.clear();
        }
        c.insert(graph, exe.clone());
    });
    Ok(exe)
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
