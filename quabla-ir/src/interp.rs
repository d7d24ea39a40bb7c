//! The reference interpreter of whole graphs: every node through [`crate::eval::evaluate`],
//! control-flow regions by running their bodies as `region.rs` documents them (each region
//! call once for all of its output nodes), custom-rule nodes through their primal graphs.
//!
//! It is the independent reference that tests compare rewrites and backends against, so it is
//! written for clarity, not speed. Ops without a folding rule (`matmul` and the linear-algebra
//! ops, whose kernels live in `quabla-linalg`) go to a caller-supplied [`Fallback`]; without
//! one they are an [`InterpError::Unsupported`]. A `while` region that runs more than
//! [`Interpreter::max_while_trips`] iterations is an error, never a hang.

use crate::eval::{evaluate, HostValue};
use crate::graph::{Graph, Node, NodeId};
use crate::op::Op;
use crate::region::{Region, RegionKind};
use crate::HostData;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// Evaluates one node the interpreter has no rule for (its operands' values and shapes are in
/// `operands`); `None` when it cannot either.
pub type Fallback<'f> = dyn Fn(&Node, &[HostValue<'_>]) -> Option<HostData> + 'f;

/// Why a graph could not be interpreted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InterpError {
    /// An op with neither a folding rule nor a fallback value.
    Unsupported { op: String },
    /// The number of values bound does not match the graph's inputs.
    Inputs { expected: usize, got: usize },
    /// A `while` region ran more iterations than allowed.
    WhileTrips { limit: usize },
}

impl fmt::Display for InterpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InterpError::Unsupported { op } => {
                write!(f, "the reference interpreter has no rule for {op}")
            }
            InterpError::Inputs { expected, got } => {
                write!(
                    f,
                    "the graph has {expected} inputs, {got} values were bound"
                )
            }
            InterpError::WhileTrips { limit } => {
                write!(f, "a while region ran more than {limit} iterations")
            }
        }
    }
}

impl std::error::Error for InterpError {}

/// The reference interpreter; [`run_graph`] runs one with the defaults.
pub struct Interpreter<'f> {
    fallback: Option<&'f Fallback<'f>>,
    max_while_trips: usize,
}

impl fmt::Debug for Interpreter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interpreter")
            .field("fallback", &self.fallback.is_some())
            .field("max_while_trips", &self.max_while_trips)
            .finish()
    }
}

impl Default for Interpreter<'_> {
    fn default() -> Self {
        Interpreter {
            fallback: None,
            max_while_trips: 100_000,
        }
    }
}

/// Runs `g` on `inputs` (one value per input, in order) with the default interpreter.
pub fn run_graph(g: &Graph, inputs: &[HostData]) -> Result<Vec<HostData>, InterpError> {
    Interpreter::default().run(g, inputs)
}

impl<'f> Interpreter<'f> {
    /// Evaluates the ops the interpreter has no rule for with `fallback` (a backend, say).
    pub fn with_fallback(mut self, fallback: &'f Fallback<'f>) -> Self {
        self.fallback = Some(fallback);
        self
    }

    /// The most iterations one `while` region may run (default 100 000).
    pub fn max_while_trips(mut self, trips: usize) -> Self {
        self.max_while_trips = trips;
        self
    }

    /// The outputs of `g` on `inputs`.
    pub fn run(&self, g: &Graph, inputs: &[HostData]) -> Result<Vec<HostData>, InterpError> {
        let expected = g.inputs().count();
        if inputs.len() != expected {
            return Err(InterpError::Inputs {
                expected,
                got: inputs.len(),
            });
        }
        let mut values: Vec<HostData> = Vec::with_capacity(g.len());
        // Results of region calls already run, keyed by region identity and operands.
        let mut calls: HashMap<(usize, Vec<NodeId>), Vec<HostData>> = HashMap::new();
        let mut next_input = 0;
        for node in g.nodes() {
            let value = match &node.op {
                Op::Input { .. } => {
                    next_input += 1;
                    inputs[next_input - 1].clone()
                }
                Op::Constant { data, .. } => data.clone(),
                Op::Region(call) => {
                    let key = (Arc::as_ptr(&call.region) as usize, node.operands.clone());
                    if !calls.contains_key(&key) {
                        let operands = operand_values(node, &values);
                        let outs = self.run_region(&call.region, &operands)?;
                        calls.insert(key.clone(), outs);
                    }
                    calls[&key][call.output].clone()
                }
                Op::Custom(call) => {
                    let operands = operand_values(node, &values);
                    self.run(&call.rule.primal, &operands)?[call.output].clone()
                }
                op => {
                    let operands: Vec<HostValue<'_>> = node
                        .operands
                        .iter()
                        .map(|o| HostValue {
                            data: &values[o.index()],
                            shape: &g.node(*o).ty.shape,
                        })
                        .collect();
                    evaluate(op, &operands, &node.ty)
                        .or_else(|| self.fallback.and_then(|f| f(node, &operands)))
                        .ok_or_else(|| InterpError::Unsupported {
                            op: op.name().to_string(),
                        })?
                }
            };
            values.push(value);
        }
        Ok(g.outputs()
            .iter()
            .map(|o| values[o.index()].clone())
            .collect())
    }

    fn run_region(&self, r: &Region, operands: &[HostData]) -> Result<Vec<HostData>, InterpError> {
        match r.kind() {
            RegionKind::Cond {
                then_branch,
                else_branch,
            } => {
                let branch = if operands[0].get_f64(0) != 0.0 {
                    then_branch
                } else {
                    else_branch
                };
                self.run(branch, &operands[1..])
            }
            RegionKind::Scan(s) => {
                let fixed = s.n_carry + s.n_const;
                let mut carries = operands[..s.n_carry].to_vec();
                let slice_sizes: Vec<usize> = s
                    .body
                    .inputs()
                    .skip(1 + fixed)
                    .map(|(_, _, t)| t.shape.size())
                    .collect();
                let out_types = &r.output_types()[s.n_carry..];
                let mut ys: Vec<Vec<f64>> = out_types
                    .iter()
                    .map(|t| vec![0.0; t.shape.size()])
                    .collect();
                for step in 0..s.length {
                    let k = if s.reverse { s.length - 1 - step } else { step };
                    let mut ins = vec![HostData::from_f64(s.index_dtype(), [(s.start + k) as f64])];
                    ins.extend(carries.iter().cloned());
                    ins.extend(operands[s.n_carry..fixed].iter().cloned());
                    for (x, &n) in operands[fixed..].iter().zip(&slice_sizes) {
                        ins.push(HostData::from_f64(
                            x.dtype(),
                            (k * n..(k + 1) * n).map(|e| x.get_f64(e)),
                        ));
                    }
                    let outs = self.run(&s.body, &ins)?;
                    carries = outs[..s.n_carry].to_vec();
                    for (stack, y) in ys.iter_mut().zip(&outs[s.n_carry..]) {
                        let n = y.len();
                        for e in 0..n {
                            stack[k * n + e] = y.get_f64(e);
                        }
                    }
                }
                carries.extend(
                    ys.into_iter()
                        .zip(out_types)
                        .map(|(v, t)| HostData::from_f64(t.dtype, v)),
                );
                Ok(carries)
            }
            RegionKind::While {
                n_carry,
                cond,
                body,
                max_trips,
            } => {
                let mut carries = operands[..*n_carry].to_vec();
                for trip in 0..=self.max_while_trips {
                    if Some(trip) == *max_trips {
                        return Ok(carries);
                    }
                    let mut ins = carries.clone();
                    ins.extend(operands[*n_carry..].iter().cloned());
                    if self.run(cond, &ins)?[0].get_f64(0) == 0.0 {
                        return Ok(carries);
                    }
                    carries = self.run(body, &ins)?;
                }
                Err(InterpError::WhileTrips {
                    limit: self.max_while_trips,
                })
            }
        }
    }
}

fn operand_values(node: &Node, values: &[HostData]) -> Vec<HostData> {
    node.operands
        .iter()
        .map(|o| values[o.index()].clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, GraphBuilder, Shape, TensorType, UnaryOp};

    #[test]
    fn runs_a_graph_and_reports_missing_rules() {
        let mut b = GraphBuilder::new();
        let ty = TensorType::new(DType::F64, Shape::new(vec![2, 2]).unwrap());
        let x = b.input("x", ty);
        let s = b.unary(UnaryOp::Sin, x).unwrap();
        let m = b.matmul(s, x).unwrap();
        let g = b.finish(vec![s, m]).unwrap();
        let x = HostData::F64(vec![0.0, 1.0, 2.0, 3.0].into());
        assert_eq!(
            run_graph(&g, std::slice::from_ref(&x)),
            Err(InterpError::Unsupported {
                op: "matmul".into()
            })
        );
        let ones = |_: &Node, _: &[HostValue<'_>]| Some(HostData::F64(vec![1.0; 4].into()));
        let outs = Interpreter::default()
            .with_fallback(&ones)
            .run(&g, std::slice::from_ref(&x))
            .unwrap();
        assert_eq!(outs[0].get_f64(1), 1f64.sin());
        assert_eq!(outs[1].get_f64(3), 1.0);
        assert_eq!(
            run_graph(&g, &[]),
            Err(InterpError::Inputs {
                expected: 1,
                got: 0
            })
        );
    }
}
