//! Plans for the host-model tests: region plans built from body graphs, deterministic
//! inputs, and the comparison of lowered programs with the CPU reference.

use super::host::{self, HostKernels};
use quabla_backend::{Backend, HostTensor, Precision};
use quabla_conformance::{compare_outputs, reference_backend, tensor, Agreement, Rng};
use quabla_cuda::lower::lower;
use quabla_ir::{
    DType, Graph, GraphBuilder, NodeId, Plan, Region, RegionForm, RegionKind, Shape, TensorType,
};
use std::sync::Arc;

pub fn ty(dtype: DType, dims: &[usize]) -> TensorType {
    TensorType::new(dtype, Shape::new(dims.to_vec()).unwrap())
}

/// Deterministic inputs for a plan: moderate values, booleans alternating.
pub fn inputs_for(plan: &Plan, seed: u64) -> Vec<HostTensor> {
    let mut rng = Rng::new(seed);
    plan.graph()
        .inputs()
        .map(|(_, _, t)| {
            let n = t.shape.size();
            let values: Vec<f64> = (0..n)
                .map(|i| match t.dtype {
                    DType::Bool => (i % 2) as f64,
                    _ => rng.finite(),
                })
                .collect();
            tensor(t.dtype, t.shape.dims(), &values)
        })
        .collect()
}

/// Runs each `(label, plan, precision, inputs)` on the host model and on the CPU reference,
/// and returns the disagreements.
pub fn check_all(cases: Vec<(String, Plan, Precision, Vec<HostTensor>)>) -> Vec<String> {
    let lowered: Vec<_> = cases
        .into_iter()
        .map(|(label, plan, precision, inputs)| {
            let program = lower(&plan, precision).unwrap_or_else(|e| panic!("{label}: {e}"));
            (label, plan, precision, inputs, program)
        })
        .collect();
    let kernels = HostKernels::compile(lowered.iter().flat_map(|c| &c.4.kernels));
    let reference = reference_backend();
    let mut failures = Vec::new();
    for (label, plan, precision, inputs, program) in &lowered {
        let expected = reference.compile(plan).and_then(|e| e.run(inputs));
        let got = host::run(&kernels, program, inputs);
        let agreement = Agreement::Tolerance {
            float64: *precision == Precision::Float64,
        };
        let verdict = match (expected, got) {
            (Ok(e), Ok(g)) => compare_outputs(&e, &g, agreement),
            (Err(e), Err(g)) if std::mem::discriminant(&e) == std::mem::discriminant(&g) => Ok(()),
            (e, g) => Err(format!("reference {:?}, program {:?}", e.err(), g.err())),
        };
        if let Err(why) = verdict {
            failures.push(format!("{label} ({precision:?}): {why}"));
        }
    }
    failures
}

/// A body graph with inputs of `types` and the outputs `f` makes.
pub fn body(
    types: &[TensorType],
    f: impl Fn(&mut GraphBuilder, &[NodeId]) -> Vec<NodeId>,
) -> Arc<Graph> {
    let mut b = GraphBuilder::new();
    let ids: Vec<NodeId> = types
        .iter()
        .enumerate()
        .map(|(i, t)| b.input(format!("b{i}"), t.clone()))
        .collect();
    let outs = f(&mut b, &ids);
    Arc::new(b.finish(outs).unwrap())
}

/// A plan of one region over inputs of its operand types, returning every output (and, with
/// `twice`, output 0 a second time).
pub fn region_plan(kind: RegionKind, form: RegionForm, twice: bool) -> Plan {
    let region = Arc::new(Region::new(kind, form, 0).unwrap());
    let mut b = GraphBuilder::new();
    let operands: Vec<NodeId> = region
        .operand_types()
        .iter()
        .enumerate()
        .map(|(i, t)| b.input(format!("x{i}"), t.clone()))
        .collect();
    let n = region.output_types().len();
    let mut outs = b.push_region_calls(region, 0..n, &operands).unwrap();
    if twice {
        outs.push(outs[0]);
    }
    Plan::from_graph_unoptimized(b.finish(outs).unwrap())
}
