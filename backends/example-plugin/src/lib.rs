//! An example third-party backend plugin: the `toy` device.
//!
//! It is written the way an author outside Quabla would write one, against the public API of
//! `quabla-backend` (and of `quabla-ir`, whose plans it reads) and nothing else, and it is
//! kept small on purpose: read it next to `docs/writing-a-backend-plugin.md`.
//!
//! The backend interprets a plan on the host, node by node, and computes every value itself
//! with Rust's `f64` functions (a float32 node is computed in float64 and rounded once, as
//! numerics.md asks of every backend). It supports inputs, float constants, the unary ops
//! `neg`, `exp`, `log`, `sin`, `cos`, `sqrt`, `tanh`, and `add`, `sub`, `mul`, `div` of two
//! operands of one shape or with a rank-0 operand. It refuses every other op, and bool
//! values, at compile time with [`BackendError::Unsupported`] rather than computing them
//! wrongly, so the conformance matrix shows it as `partial k/n` on the elementwise cases and
//! `unsupported` on the rest. It must not fall back to another backend for what it refuses.

use quabla_backend::{
    check_inputs, Backend, BackendError, Capabilities, Executable, HostTensor, Result, Unavailable,
};
use quabla_ir::{BinaryOp, DType, HostData, Node, Op, Plan, UnaryOp};
use std::sync::Arc;

/// The device name: what `jit(f).device("toy")` selects. `Backend::name` and
/// `export_plugin!` both use it, as they must.
pub const NAME: &str = "toy";

/// The toy backend. It has no state: everything is decided per plan in `compile`.
#[derive(Debug, Default)]
pub struct ToyBackend;

impl Backend for ToyBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            float64: true,
            device_count: 1,
        }
    }

    fn compile(&self, plan: &Plan) -> Result<Arc<dyn Executable>> {
        let graph = plan.graph();
        let mut steps = Vec::with_capacity(graph.len());
        let mut inputs = 0;
        for node in graph.nodes() {
            steps.push(step_of(node, plan, &mut inputs)?);
        }
        Ok(Arc::new(ToyExecutable {
            plan: plan.clone(),
            steps,
        }))
    }
}

/// What one node does, decided once when the plan is compiled.
#[derive(Debug)]
enum Step {
    /// The plan input with this position.
    Input(usize),
    Constant(Vec<f64>),
    Unary(fn(f64) -> f64),
    Binary(fn(f64, f64) -> f64),
}

fn unsupported(node: &Node, reason: &str) -> BackendError {
    BackendError::Unsupported {
        op: node.op.name().to_string(),
        device: NAME.to_string(),
        reason: reason.to_string(),
    }
}

fn step_of(node: &Node, plan: &Plan, inputs: &mut usize) -> Result<Step> {
    if node.ty.dtype == DType::Bool {
        return Err(unsupported(
            node,
            "the toy device computes float values only",
        ));
    }
    let step = match &node.op {
        Op::Input { .. } => {
            *inputs += 1;
            Step::Input(*inputs - 1)
        }
        Op::Constant { data, .. } => Step::Constant(data.to_f64_vec()),
        Op::Unary(op) => Step::Unary(match op {
            UnaryOp::Neg => |x: f64| -x,
            UnaryOp::Exp => f64::exp,
            UnaryOp::Log => f64::ln,
            UnaryOp::Sin => f64::sin,
            UnaryOp::Cos => f64::cos,
            UnaryOp::Sqrt => f64::sqrt,
            UnaryOp::Tanh => f64::tanh,
            _ => return Err(unsupported(node, "the toy device has no kernel for it")),
        }),
        Op::Binary(op) => {
            // Broadcasting beyond a rank-0 operand is more than this example needs.
            let same_or_scalar = node.operands.iter().all(|&id| {
                let shape = &plan.graph().node(id).ty.shape;
                *shape == node.ty.shape || shape.rank() == 0
            });
            if !same_or_scalar {
                return Err(unsupported(
                    node,
                    "the toy device broadcasts only rank-0 operands",
                ));
            }
            Step::Binary(match op {
                BinaryOp::Add => |a, b| a + b,
                BinaryOp::Sub => |a, b| a - b,
                BinaryOp::Mul => |a, b| a * b,
                BinaryOp::Div => |a, b| a / b,
                _ => return Err(unsupported(node, "the toy device has no kernel for it")),
            })
        }
        _ => {
            return Err(unsupported(
                node,
                "the toy device supports elementwise arithmetic only",
            ))
        }
    };
    Ok(step)
}

/// A compiled plan: the plan and one step per node.
#[derive(Debug)]
struct ToyExecutable {
    plan: Plan,
    steps: Vec<Step>,
}

impl ToyExecutable {
    /// The value of node `id`, computed before the node that reads it (plans are in
    /// topological order).
    fn operand<'v>(&self, values: &'v [Vec<f64>], node: &Node, i: usize) -> Result<&'v [f64]> {
        node.operands
            .get(i)
            .and_then(|id| values.get(id.index()))
            .map(Vec::as_slice)
            .ok_or_else(|| BackendError::Device {
                device: NAME.to_string(),
                message: format!("operand {i} of a {} node is missing", node.op.name()),
            })
    }
}

impl Executable for ToyExecutable {
    fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_inputs(&self.plan, inputs)?;
        let graph = self.plan.graph();
        let mut values: Vec<Vec<f64>> = Vec::with_capacity(graph.len());
        for (node, step) in graph.nodes().iter().zip(&self.steps) {
            let f32_node = node.ty.dtype == DType::F32;
            let round = |x: f64| if f32_node { x as f32 as f64 } else { x };
            let value = match step {
                // `check_inputs` has matched every input with the plan's.
                Step::Input(k) => inputs
                    .get(*k)
                    .map_or_else(Vec::new, |t| t.data.to_f64_vec()),
                Step::Constant(v) => v.clone(),
                Step::Unary(f) => self
                    .operand(&values, node, 0)?
                    .iter()
                    .map(|&x| round(f(x)))
                    .collect(),
                Step::Binary(f) => {
                    let (a, b) = (
                        self.operand(&values, node, 0)?,
                        self.operand(&values, node, 1)?,
                    );
                    // A rank-0 operand has one element, read for every output element.
                    let at = |v: &[f64], i: usize| {
                        let i = if v.len() == 1 { 0 } else { i };
                        v.get(i).copied().unwrap_or(f64::NAN)
                    };
                    (0..node.ty.shape.size())
                        .map(|i| round(f(at(a, i), at(b, i))))
                        .collect()
                }
            };
            values.push(value);
        }
        graph
            .outputs()
            .iter()
            .map(|&id| {
                let ty = &graph.node(id).ty;
                let value = values.get(id.index()).ok_or_else(|| BackendError::Device {
                    device: NAME.to_string(),
                    message: format!("output node {} was not computed", id.index()),
                })?;
                Ok(HostTensor::new(
                    ty.shape.clone(),
                    HostData::from_f64(ty.dtype, value.iter().copied()),
                ))
            })
            .collect()
    }
}

quabla_backend::export_plugin! {
    name: NAME,
    open: || -> std::result::Result<ToyBackend, Unavailable> { Ok(ToyBackend) },
}

#[cfg(test)]
mod tests {
    use super::*;
    use quabla_backend::registry::Plugin;
    use quabla_ir::{GraphBuilder, Shape, TensorType};

    fn plan(op: impl Fn(&mut GraphBuilder, quabla_ir::NodeId) -> quabla_ir::NodeId) -> Plan {
        let mut b = GraphBuilder::new();
        let x = b.input(
            "x",
            TensorType::new(DType::F32, Shape::new(vec![3]).unwrap()),
        );
        let y = op(&mut b, x);
        Plan::from_graph_unoptimized(b.finish(vec![y]).unwrap())
    }

    #[test]
    fn runs_elementwise_plans_in_process_behind_the_abi() {
        let backend = Plugin::in_process(quabla_plugin_root_module())
            .open()
            .unwrap();
        let exe = backend
            .compile(&plan(|b, x| {
                let e = b.unary(UnaryOp::Exp, x).unwrap();
                b.binary(BinaryOp::Mul, e, x).unwrap()
            }))
            .unwrap();
        let x = HostTensor::new(
            Shape::new(vec![3]).unwrap(),
            HostData::F32(vec![0.0, 1.0, -2.0].into()),
        );
        let out = exe.run(&[x]).unwrap();
        let expected: Vec<f32> = [0.0f64, 1.0, -2.0]
            .iter()
            .map(|&v| ((v.exp() as f32 as f64) * v) as f32)
            .collect();
        assert_eq!(out[0].data, HostData::F32(expected.into()));
    }

    #[test]
    fn refuses_what_it_does_not_support_at_compile_time() {
        let err = ToyBackend
            .compile(&plan(|b, x| b.unary(UnaryOp::Erf, x).unwrap()))
            .unwrap_err();
        assert_eq!(
            err,
            BackendError::Unsupported {
                op: "erf".into(),
                device: "toy".into(),
                reason: "the toy device has no kernel for it".into(),
            }
        );
    }
}
