//! An example third-party backend plugin: the `toy` device.
//!
//! It is written the way an author outside Quabla would write one, against the public API of
//! `quabla-backend` (and of `quabla-ir`, whose plans it reads) and nothing else, and it is
//! kept small on purpose: read it next to `docs/writing-a-backend-plugin.md`.
//!
//! The backend interprets a plan on the host, node by node, and computes every value itself
//! with Rust's `f64` functions (a float32 node is computed in float64 and rounded once, as
//! numerics.md asks of every backend). It supports inputs, float constants, the unary ops
//! `neg`, `exp`, `log`, `sin`, `cos`, `sqrt`, `tanh`, `add`, `sub`, `mul`, `div`, `pow` of two
//! operands of one shape or with a rank-0 operand, the whole-tensor `sum`, and the broadcast
//! of a rank-0 value. It refuses every other op, and bool values, at compile time with
//! [`BackendError::Unsupported`] rather than computing them wrongly, so the conformance matrix
//! shows it as `partial k/n` on the elementwise cases and `unsupported` on the rest. It must
//! not fall back to another backend for what it refuses.
//!
//! It keeps its values in memory of its own, as a device does ([`ToyMemory`]: `f64` elements
//! whatever the dtype, counted against a fixed capacity of [`CAPACITY_BYTES`]), so it shows
//! what a backend with device memory implements: `upload`, `download` and `allocate`
//! (`OutOfMemory` past the capacity), runs on its own memory that leave the outputs there,
//! reuse of donated inputs, and counted transfers.

use quabla_backend::{
    check_inputs, Backend, BackendError, Bound, Capabilities, Executable, HostTensor, Memory,
    Result, RunFailure, TransferCounter, Transfers, Unavailable,
};
use quabla_ir::{BinaryOp, DType, HostData, Node, Op, Plan, ReduceKind, Shape, UnaryOp};
use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The device name: what `jit(f).device("toy")` selects. `Backend::name` and
/// `export_plugin!` both use it, as they must.
pub const NAME: &str = "toy";

/// How much memory the toy device has: allocations past it are `OutOfMemory`, as on a GPU.
pub const CAPACITY_BYTES: usize = 1 << 30;

/// How many toy devices the host has: `toy` (device 0, what the plugin opens) and `toy:1`, so
/// that the plugin shows how a backend of several devices answers `Backend::open_device`.
pub const DEVICES: usize = 2;

/// The toy backend of one toy device: its name (`toy`, `toy:1`), its memory accounting and
/// transfer counts; everything else is decided per plan in `compile`.
#[derive(Debug)]
pub struct ToyBackend {
    name: String,
    memory: Arc<Accounting>,
    transfers: TransferCounter,
}

impl Default for ToyBackend {
    /// Device 0.
    fn default() -> ToyBackend {
        ToyBackend {
            name: NAME.to_string(),
            memory: Arc::default(),
            transfers: TransferCounter::default(),
        }
    }
}

/// The bytes of toy memory in use (8 per element, whatever the dtype).
#[derive(Debug, Default)]
pub struct Accounting {
    in_use: AtomicUsize,
}

impl Accounting {
    /// Bytes in use now.
    pub fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Relaxed)
    }

    /// Reserves room for `elements` elements (`OutOfMemory` naming `dtype` and `shape` past the
    /// capacity).
    fn reserve(&self, elements: usize, dtype: DType, shape: &Shape) -> Result<usize> {
        let bytes = elements.saturating_mul(8);
        let mut used = self.in_use.load(Ordering::Relaxed);
        loop {
            if bytes > CAPACITY_BYTES - used.min(CAPACITY_BYTES) {
                return Err(BackendError::OutOfMemory {
                    bytes: bytes as u128,
                    what: format!(
                        "a tensor of shape {shape} {} on the toy device ({} of {CAPACITY_BYTES} bytes in use)",
                        dtype.name(),
                        used
                    ),
                });
            }
            match self.in_use.compare_exchange_weak(
                used,
                used + bytes,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(bytes),
                Err(now) => used = now,
            }
        }
    }
}

/// One tensor in toy memory: its elements as `f64` (exact for every dtype the toy runs).
#[derive(Debug)]
pub struct ToyMemory {
    dtype: DType,
    shape: Shape,
    values: Vec<f64>,
    accounting: Arc<Accounting>,
    bytes: usize,
}

impl ToyMemory {
    fn new(
        accounting: &Arc<Accounting>,
        dtype: DType,
        shape: Shape,
        values: Vec<f64>,
    ) -> Result<ToyMemory> {
        let bytes = accounting.reserve(values.len(), dtype, &shape)?;
        Ok(ToyMemory {
            dtype,
            shape,
            values,
            accounting: accounting.clone(),
            bytes,
        })
    }
}

impl Drop for ToyMemory {
    fn drop(&mut self) {
        self.accounting
            .in_use
            .fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

impl ToyBackend {
    /// The toy memory in use, in bytes (what tests of residency and donation read).
    pub fn memory_in_use(&self) -> usize {
        self.memory.in_use()
    }

    /// `memory` as toy memory of this device (memory of the other toy device is refused as a
    /// device would refuse another device's addresses).
    fn toy_memory<'m>(&self, memory: &'m Memory) -> Result<&'m ToyMemory> {
        match memory.backend::<ToyMemory>() {
            Some(m) if Arc::ptr_eq(&m.accounting, &self.memory) => Ok(m),
            _ => Err(quabla_backend::foreign_memory(&self.name)),
        }
    }
}

impl Backend for ToyBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            float64: true,
            device_count: DEVICES,
        }
    }

    /// Toy device `ordinal`: memory and transfer counts of its own.
    fn open_device(&self, ordinal: usize) -> Result<Arc<dyn Backend>> {
        if ordinal == 0 || ordinal >= DEVICES {
            return Err(BackendError::Unsupported {
                op: "device ordinal".into(),
                device: format!("{NAME}:{ordinal}"),
                reason: format!("the toy devices are {NAME} and {NAME}:1"),
            });
        }
        Ok(Arc::new(ToyBackend {
            name: format!("{NAME}:{ordinal}"),
            ..ToyBackend::default()
        }))
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
            memory: self.memory.clone(),
        }))
    }

    fn upload(&self, tensor: &HostTensor) -> Result<Memory> {
        let memory = ToyMemory::new(
            &self.memory,
            tensor.dtype(),
            tensor.shape.clone(),
            tensor.data.to_f64_vec(),
        )?;
        self.transfers.upload(tensor.shape.nbytes(tensor.dtype()));
        Ok(Memory::Backend(Arc::new(memory)))
    }

    fn download(&self, memory: &Memory) -> Result<HostTensor> {
        let m = self.toy_memory(memory)?;
        self.transfers.download(m.shape.nbytes(m.dtype));
        Ok(HostTensor::new(
            m.shape.clone(),
            HostData::from_f64(m.dtype, m.values.iter().copied()),
        ))
    }

    fn allocate(&self, dtype: DType, shape: &Shape) -> Result<Memory> {
        // Reserve before allocating, so an impossible size is refused without trying.
        let bytes = self.memory.reserve(shape.size(), dtype, shape)?;
        self.memory.in_use.fetch_sub(bytes, Ordering::Relaxed);
        let memory = ToyMemory::new(&self.memory, dtype, shape.clone(), vec![0.0; shape.size()])?;
        Ok(Memory::Backend(Arc::new(memory)))
    }

    fn transfers(&self) -> Transfers {
        self.transfers.read()
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
    /// The sum of every element, accumulated in float64 in order and rounded once.
    Sum,
    /// A rank-0 value repeated to the node's shape.
    Fill,
}

fn unsupported(node: &Node, reason: &str) -> BackendError {
    BackendError::Unsupported {
        op: node.op.name().to_string(),
        device: NAME.to_string(),
        reason: reason.to_string(),
    }
}

fn step_of(node: &Node, plan: &Plan, inputs: &mut usize) -> Result<Step> {
    // Bool and integer values (and integer functions, which only they reach) are refused.
    if !node.ty.dtype.is_float() {
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
        Op::Reduce {
            kind: ReduceKind::Sum,
            ..
        } if node.ty.shape.rank() == 0 => Step::Sum,
        Op::Broadcast { .. }
            if node
                .operands
                .iter()
                .all(|&id| plan.graph().node(id).ty.shape.rank() == 0) =>
        {
            Step::Fill
        }
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
                BinaryOp::Pow => f64::powf,
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
    memory: Arc<Accounting>,
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

    /// Every node's value, the inputs read by `input(k)`.
    fn evaluate(&self, input: impl Fn(usize) -> Vec<f64>) -> Result<Vec<Vec<f64>>> {
        let graph = self.plan.graph();
        let mut values: Vec<Vec<f64>> = Vec::with_capacity(graph.len());
        for (node, step) in graph.nodes().iter().zip(&self.steps) {
            let f32_node = node.ty.dtype == DType::F32;
            let round = |x: f64| if f32_node { x as f32 as f64 } else { x };
            let value = match step {
                Step::Input(k) => input(*k),
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
                Step::Sum => vec![round(self.operand(&values, node, 0)?.iter().sum())],
                Step::Fill => {
                    let v = self.operand(&values, node, 0)?.first().copied();
                    vec![v.unwrap_or(f64::NAN); node.ty.shape.size()]
                }
            };
            values.push(value);
        }
        Ok(values)
    }

    /// The value of each output node.
    fn outputs(&self, values: &[Vec<f64>]) -> Result<Vec<(DType, Shape, Vec<f64>)>> {
        let graph = self.plan.graph();
        graph
            .outputs()
            .iter()
            .map(|&id| {
                let ty = &graph.node(id).ty;
                let value = values.get(id.index()).ok_or_else(|| BackendError::Device {
                    device: NAME.to_string(),
                    message: format!("output node {} was not computed", id.index()),
                })?;
                Ok((ty.dtype, ty.shape.clone(), value.clone()))
            })
            .collect()
    }
}

impl Executable for ToyExecutable {
    fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_inputs(&self.plan, inputs)?;
        // `check_inputs` has matched every input with the plan's.
        let values =
            self.evaluate(|k| inputs.get(k).map_or_else(Vec::new, |t| t.data.to_f64_vec()))?;
        Ok(self
            .outputs(&values)?
            .into_iter()
            .map(|(dtype, shape, v)| HostTensor::new(shape, HostData::from_f64(dtype, v)))
            .collect())
    }

    /// Runs on toy memory. An output is written into the memory of a donated input of its
    /// dtype and shape when nobody else holds that input (the whole run has read it by then:
    /// the toy computes every value before it writes any output), else into new toy memory.
    fn run_resident(&self, inputs: Vec<Bound>) -> std::result::Result<Vec<Memory>, RunFailure> {
        let values = match self.evaluate_resident(&inputs) {
            Ok(values) => values,
            Err(error) => return Err(RunFailure { error, inputs }),
        };
        let outputs = match self.outputs(&values) {
            Ok(outputs) => outputs,
            Err(error) => return Err(RunFailure { error, inputs }),
        };
        // The run has succeeded: from here the donated inputs are the toy's to reuse.
        let mut donated: Vec<Arc<dyn quabla_backend::buffer::BackendMemory>> = inputs
            .into_iter()
            .filter(|b| b.donated)
            .filter_map(|b| match b.memory {
                Memory::Backend(m) => Some(m),
                Memory::Host(_) => None,
            })
            .collect();
        let mut memories = Vec::with_capacity(outputs.len());
        for (dtype, shape, v) in outputs {
            let reusable = donated
                .iter_mut()
                .position(|m| toy_mut(m).is_some_and(|m| m.dtype == dtype && m.shape == shape));
            let memory = match reusable {
                Some(i) => {
                    let mut m = donated.swap_remove(i);
                    if let Some(toy) = toy_mut(&mut m) {
                        toy.values.copy_from_slice(&v);
                    }
                    m
                }
                None => match ToyMemory::new(&self.memory, dtype, shape, v) {
                    Ok(m) => Arc::new(m),
                    // The inputs are spent; what is lost is this run's result only.
                    Err(error) => {
                        return Err(RunFailure {
                            error,
                            inputs: Vec::new(),
                        })
                    }
                },
            };
            memories.push(Memory::Backend(memory));
        }
        Ok(memories)
    }
}

/// The toy memory behind `m` for writing, when `m` is toy memory that nobody else holds.
fn toy_mut(m: &mut Arc<dyn quabla_backend::buffer::BackendMemory>) -> Option<&mut ToyMemory> {
    Arc::get_mut(m).and_then(|m| (m as &mut dyn Any).downcast_mut::<ToyMemory>())
}

impl ToyExecutable {
    /// Every node's value, the inputs read from toy memory (checked against the plan's
    /// inputs).
    fn evaluate_resident(&self, inputs: &[Bound]) -> Result<Vec<Vec<f64>>> {
        let graph = self.plan.graph();
        let count = graph.inputs().count();
        if inputs.len() != count {
            return Err(BackendError::InputMismatch {
                index: inputs.len().min(count),
                name: "<count>".into(),
                expected: format!("{count} inputs"),
                got: format!("{} inputs", inputs.len()),
            });
        }
        let mut read = Vec::with_capacity(inputs.len());
        for (index, ((_, name, ty), bound)) in graph.inputs().zip(inputs).enumerate() {
            let m = match bound.memory.backend::<ToyMemory>() {
                Some(m) if Arc::ptr_eq(&m.accounting, &self.memory) => m,
                _ => return Err(quabla_backend::foreign_memory(NAME)),
            };
            if m.dtype != ty.dtype || m.shape != ty.shape {
                return Err(BackendError::InputMismatch {
                    index,
                    name: name.to_string(),
                    expected: format!("{}{}", ty.dtype.name(), ty.shape),
                    got: format!("{}{}", m.dtype.name(), m.shape),
                });
            }
            read.push(m.values.as_slice());
        }
        self.evaluate(|k| read.get(k).map_or_else(Vec::new, |v| v.to_vec()))
    }
}

quabla_backend::export_plugin! {
    name: NAME,
    open: || -> std::result::Result<ToyBackend, Unavailable> { Ok(ToyBackend::default()) },
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
        let err = ToyBackend::default()
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
        // Integer values, from a cast or an integer input, are refused the same way.
        let err = ToyBackend::default()
            .compile(&plan(|b, x| b.astype(x, DType::I32).unwrap()))
            .unwrap_err();
        assert!(
            matches!(&err, BackendError::Unsupported { op, .. } if op == "cast"),
            "{err:?}"
        );
    }
}
