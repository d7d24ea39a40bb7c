//! Running one linear-algebra call with several results (a factorization's outputs) as one
//! graph: recorded into the innermost trace when an operand is traced, else compiled (cached
//! per thread, like every eager operation) and run once, so the CPU backend computes one
//! factorization for all of its outputs. `crate::dispatch::apply` is the single-result road;
//! this is its twin for several results, with the same operand rules.

use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::staging::with_host_refs;
use crate::tensor::Tensor;
use crate::trace;
use quabla_backend::Executable;
use quabla_ir::{Graph, GraphBuilder, HostData, NodeId, Plan, Shape};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

/// How many compiled plans each thread keeps before starting over.
const CACHE_CAPACITY: usize = 512;

thread_local! {
    static CACHE: RefCell<HashMap<Graph, Arc<dyn Executable>>> = RefCell::new(HashMap::new());
}

/// Applies the graph `build` makes of `operands` and returns its results (in order).
pub(crate) fn apply_many(
    operands: Vec<Operand>,
    build: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> quabla_ir::Result<Vec<NodeId>>,
) -> Result<Vec<Tensor>> {
    let mut tensors = Vec::with_capacity(operands.len());
    let mut traced = false;
    for o in operands {
        match o {
            Operand::Error(e) => return Err(e),
            Operand::Scalar(v) => tensors.push(Tensor::from_parts(
                Shape::scalar(),
                HostData::F64([v].into()),
                true,
            )),
            Operand::Tensor(t) => {
                traced |= t.is_traced();
                tensors.push(t);
            }
        }
    }
    let mut b = GraphBuilder::new();
    let inputs: Vec<NodeId> = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| b.input(format!("arg{i}"), t.ir_type()))
        .collect();
    let outs = build(&mut b, &inputs)?;
    let weak: Vec<bool> = outs.iter().map(|&o| b.ty(o).weak).collect();
    let graph = b.finish(outs)?;
    if traced {
        return trace::inline(&graph, tensors.into_iter().map(Operand::Tensor).collect());
    }
    let exe = compiled(graph)?;
    let mut results = Vec::with_capacity(weak.len());
    with_host_refs(tensors.iter().map(Tensor::host), |host| {
        Ok(exe.run_borrowed(host, &mut results)?)
    })?;
    if results.len() != weak.len() {
        return Err(Error::Internal {
            message: "a linear-algebra plan returned the wrong number of outputs".into(),
        });
    }
    Ok(results
        .into_iter()
        .zip(weak)
        .map(|(h, w)| Tensor::from_host(h, w))
        .collect())
}

fn compiled(graph: Graph) -> Result<Arc<dyn Executable>> {
    if let Some(exe) = CACHE.with(|c| c.borrow().get(&graph).cloned()) {
        return Ok(exe);
    }
    let exe = crate::devices::backend_for("cpu")?.compile(&Plan::compile(&graph))?;
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= CACHE_CAPACITY {
            c.clear();
        }
        c.insert(graph, exe.clone());
    });
    Ok(exe)
}
