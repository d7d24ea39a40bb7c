//! The reference interpreter of `quabla_ir::interp` over host tensors, with the ops it has no
//! folding rule for (matmul, linear algebra) run as one-node graphs on the CPU backend.

use super::shape;
use quabla_backend::{BackendError, HostTensor};
use quabla_ir::eval::HostValue;
use quabla_ir::interp::Interpreter;
use quabla_ir::{Graph, GraphBuilder, HostData, Node, NodeId, Plan};

/// Evaluates `g` on `inputs` and returns its outputs.
pub fn eval_graph(g: &Graph, inputs: &[HostTensor]) -> Vec<HostTensor> {
    let data: Vec<HostData> = inputs.iter().map(|t| t.data.clone()).collect();
    let outs = Interpreter::default()
        .with_fallback(&on_cpu)
        .run(g, &data)
        .unwrap_or_else(|e| panic!("{e}\n{g}"));
    outs.into_iter()
        .zip(g.outputs())
        .map(|(d, o)| HostTensor::new(g.node(*o).ty.shape.clone(), d))
        .collect()
}

/// One node on the CPU backend.
fn on_cpu(node: &Node, operands: &[HostValue<'_>]) -> Option<HostData> {
    let mut b = GraphBuilder::new();
    let ins: Vec<NodeId> = operands
        .iter()
        .enumerate()
        .map(|(k, v)| {
            b.input(
                format!("x{k}"),
                quabla_ir::TensorType::new(v.data.dtype(), v.shape.clone()),
            )
        })
        .collect();
    let out = b.push(node.op.clone(), &ins).ok()?;
    let g = b.finish(vec![out]).ok()?;
    let args: Vec<HostTensor> = operands
        .iter()
        .map(|v| HostTensor::new(v.shape.clone(), v.data.clone()))
        .collect();
    let mut outs = quabla_cpu::run_plan(&Plan::from_graph_unoptimized(g), &args).ok()?;
    Some(outs.remove(0).data)
}

/// Runs `g` on the CPU backend as it is, or `None` while that backend does not execute
/// control-flow regions.
pub fn cpu_run_if_supported(g: &Graph, inputs: &[HostTensor]) -> Option<Vec<HostTensor>> {
    match quabla_cpu::run_plan(&Plan::from_graph_unoptimized(g.clone()), inputs) {
        Ok(outs) => Some(outs),
        Err(BackendError::Unsupported { op, .. })
            if quabla_ir::RegionForm::from_name(&op).is_some() =>
        {
            None
        }
        Err(e) => panic!("cpu run failed: {e}\n{g}"),
    }
}

/// A tensor of the given dims and values.
pub fn tensor(dtype: quabla_ir::DType, dims: &[usize], values: &[f64]) -> HostTensor {
    HostTensor::new(
        shape(dims),
        HostData::from_f64(dtype, values.iter().copied()),
    )
}
