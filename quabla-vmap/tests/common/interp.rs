//! A reference interpreter for graphs with control-flow regions, independent of any backend's
//! region support: ordinary nodes go through `quabla_ir::eval::evaluate` (or, for the ops it
//! does not fold, a one-node graph on the CPU backend), and region nodes are interpreted by
//! running their bodies recursively, following the semantics documented in
//! `quabla_ir::region`. Each region call runs once for all of its output nodes.

use super::{shape, stack, take};
use quabla_backend::{BackendError, HostTensor};
use quabla_ir::eval::{evaluate, HostValue};
use quabla_ir::{Graph, GraphBuilder, HostData, Node, NodeId, Op, Plan, RegionKind, Shape};
use std::collections::HashMap;
use std::sync::Arc;

/// Bound on the iterations of one `while` region, so that a wrong rewrite fails instead of
/// hanging.
const MAX_WHILE_TRIPS: usize = 100_000;

/// Evaluates `g` on `inputs` and returns its outputs.
pub fn eval_graph(g: &Graph, inputs: &[HostTensor]) -> Vec<HostTensor> {
    assert_eq!(
        inputs.len(),
        g.inputs().count(),
        "wrong number of inputs for\n{g}"
    );
    let mut values: Vec<HostTensor> = Vec::with_capacity(g.len());
    // Results of region calls already run, keyed by region identity and operands.
    let mut calls: HashMap<(usize, Vec<NodeId>), Vec<HostTensor>> = HashMap::new();
    let mut next_input = 0;
    for node in g.nodes() {
        let value = match &node.op {
            Op::Input { .. } => {
                next_input += 1;
                let x = inputs[next_input - 1].clone();
                assert_eq!(x.shape, node.ty.shape, "input {} shape", next_input - 1);
                x
            }
            Op::Region(call) => {
                let key = (Arc::as_ptr(&call.region) as usize, node.operands.clone());
                let outs = calls.entry(key).or_insert_with(|| {
                    let args: Vec<HostTensor> = node
                        .operands
                        .iter()
                        .map(|o| values[o.index()].clone())
                        .collect();
                    run_region(call.region.kind(), &args)
                });
                outs[call.output].clone()
            }
            _ => eval_node(node, &values),
        };
        values.push(value);
    }
    g.outputs()
        .iter()
        .map(|o| values[o.index()].clone())
        .collect()
}

fn eval_node(node: &Node, values: &[HostTensor]) -> HostTensor {
    let operands: Vec<HostValue<'_>> = node
        .operands
        .iter()
        .map(|o| {
            let v = &values[o.index()];
            HostValue {
                data: &v.data,
                shape: &v.shape,
            }
        })
        .collect();
    if let Op::Constant { data, shape, .. } = &node.op {
        return HostTensor::new(shape.clone(), data.clone());
    }
    if let Some(data) = evaluate(&node.op, &operands, &node.ty) {
        return HostTensor::new(node.ty.shape.clone(), data);
    }
    // Ops without a folding rule (matmul, linear algebra): one node on the CPU backend.
    let mut b = GraphBuilder::new();
    let ins: Vec<NodeId> = node
        .operands
        .iter()
        .enumerate()
        .map(|(k, o)| {
            let v = &values[o.index()];
            b.input(
                format!("x{k}"),
                quabla_ir::TensorType::new(v.dtype(), v.shape.clone()),
            )
        })
        .collect();
    let out = b.push(node.op.clone(), &ins).unwrap();
    let g = b.finish(vec![out]).unwrap();
    let args: Vec<HostTensor> = node
        .operands
        .iter()
        .map(|o| values[o.index()].clone())
        .collect();
    quabla_cpu::run_plan(&Plan::from_graph_unoptimized(g), &args)
        .unwrap_or_else(|e| panic!("{} failed: {e}", node.op.name()))
        .remove(0)
}

fn truth(x: &HostTensor) -> bool {
    assert_eq!(x.shape.size(), 1, "a predicate must have one element");
    x.data.get_f64(0) != 0.0
}

fn run_region(kind: &RegionKind, args: &[HostTensor]) -> Vec<HostTensor> {
    match kind {
        RegionKind::Cond {
            then_branch,
            else_branch,
        } => {
            let branch = if truth(&args[0]) {
                then_branch
            } else {
                else_branch
            };
            eval_graph(branch, &args[1..])
        }
        RegionKind::Scan(s) => {
            let index_dtype = s.index_dtype();
            let mut carries: Vec<HostTensor> = args[..s.n_carry].to_vec();
            let consts = &args[s.n_carry..s.n_carry + s.n_const];
            let xs = &args[s.n_carry + s.n_const..];
            let mut ys: Vec<Vec<HostTensor>> = vec![Vec::new(); s.length];
            let order: Vec<usize> = if s.reverse {
                (0..s.length).rev().collect()
            } else {
                (0..s.length).collect()
            };
            for k in order {
                let index = HostTensor::new(
                    Shape::scalar(),
                    HostData::filled(index_dtype, (s.start + k) as f64, 1),
                );
                let mut body_args = vec![index];
                body_args.extend(carries.iter().cloned());
                body_args.extend(consts.iter().cloned());
                body_args.extend(xs.iter().map(|x| take(x, 0, k)));
                let mut outs = eval_graph(&s.body, &body_args);
                ys[k] = outs.split_off(s.n_carry);
                carries = outs;
            }
            let mut results = carries;
            for j in 0..s.n_ys() {
                let slices: Vec<HostTensor> = ys.iter().map(|y| y[j].clone()).collect();
                results.push(stack(&slices, 0));
            }
            results
        }
        RegionKind::While {
            n_carry,
            cond,
            body,
        } => {
            let mut carries: Vec<HostTensor> = args[..*n_carry].to_vec();
            let consts = &args[*n_carry..];
            let with_consts = |carries: &[HostTensor]| -> Vec<HostTensor> {
                carries.iter().chain(consts).cloned().collect()
            };
            let mut trips = 0;
            while truth(&eval_graph(cond, &with_consts(&carries))[0]) {
                trips += 1;
                assert!(trips <= MAX_WHILE_TRIPS, "while region does not terminate");
                carries = eval_graph(body, &with_consts(&carries));
            }
            carries
        }
    }
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
