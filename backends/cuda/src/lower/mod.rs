//! Lowering: a frozen plan to a [`Program`], without a GPU.
//!
//! Every op of `quabla-ir` is lowered or refused here, at compile time, with
//! `BackendError::Unsupported` naming it — never a fallback to the host (transforms.md §6):
//!
//! - elementwise ops are fused into groups ([`fusion`]), one kernel each;
//! - `broadcast` is virtual for elementwise consumers (they read its operand with broadcast
//!   indexing) and materialized by a kernel for others; `reshape` and `stop_gradient` share
//!   their operand's buffer; size-1 constants are literals in the kernels that read them;
//! - reductions, `cumsum`, the layout ops and the indexed ops (`index_gather`,
//!   `index_scatter`, whose indices are a tensor) are kernels of their own ([`ops`]);
//! - `matmul`, triangular solves and the decompositions are cuBLAS and cuSOLVER calls with the
//!   kernels around them ([`linalg`]);
//! - control-flow regions run their bodies' blocks under the host's control, or as one kernel
//!   when the loop is elementwise ([`regions`]);
//! - `debug_print` reads its value back and prints it; `custom` never reaches a backend
//!   (canonicalization inlines it) and is refused.
//!
//! The program's floating type is float32 unless the plan is compiled at
//! `Precision::Float64`, which runs it in float64 and refuses float32 values (errors.md UN3).
//! Integer values are exact at either precision: each is held in its own integer type
//! ([`value_elem`]), and only a cast converts between integers and floats.
//!
//! This module owns the walk over a graph, the values of its nodes and the buffers they live
//! in; it must not touch a device.

mod fusion;
mod linalg;
mod ops;
mod regions;

use crate::codegen;
use crate::codegen::Scalar;
use crate::program::{
    storage_of, value_elem, Arg, BufId, BufferDecl, ConstData, Elem, Kernel, Launch, Output,
    Program, Role, Step,
};
use quabla_backend::{BackendError, Precision};
use quabla_ir::{DType, Graph, HostData, NodeId, Op, Plan};
use std::collections::HashMap;

use fusion::Fusion;

/// The device name in errors.
const DEVICE: &str = "cuda";

/// UN2: `cuda cannot lower {op}: {reason}`.
pub fn unsupported(op: &str, reason: impl Into<String>) -> BackendError {
    BackendError::Unsupported {
        op: op.to_string(),
        device: DEVICE.to_string(),
        reason: reason.into(),
    }
}

/// The program's floating type at `precision`.
pub fn compute_type(precision: Precision) -> Elem {
    match precision {
        Precision::Float64 => Elem::F64,
        _ => Elem::F32,
    }
}

/// Lowers `plan` at `precision` (see the module docs).
pub fn lower(plan: &Plan, precision: Precision) -> Result<Program, BackendError> {
    let t = compute_type(precision);
    if t == Elem::F64 {
        check_float64_only(plan.graph())?;
    }
    let mut builder = Builder::new(t);
    let graph = plan.graph();
    let inputs: Vec<BufId> = graph
        .inputs()
        .enumerate()
        .map(|(k, (_, _, ty))| {
            builder.buffer(storage_of(ty.dtype), ty.shape.size(), Role::Input(k))
        })
        .collect();
    let lowered = {
        let mut ctx = Ctx::new(&mut builder, graph, true);
        ctx.bind_inputs(&inputs);
        ctx.run()?;
        let outputs = ctx.final_outputs()?;
        (ctx.steps, outputs)
    };
    let (mut steps, output_bufs) = lowered;
    let outputs: Vec<Output> = graph
        .outputs()
        .iter()
        .zip(&output_bufs)
        .map(|(&id, &buf)| {
            let ty = &graph.node(id).ty;
            Output {
                buf,
                dtype: ty.dtype,
                shape: ty.shape.clone(),
            }
        })
        .collect();
    insert_releases(&mut steps, &builder.buffers, &output_bufs);
    Ok(Program {
        compute: t,
        kernels: builder.kernels,
        buffers: builder.buffers,
        inputs,
        steps,
        outputs,
    })
}

/// UN3: a float64 program may not hold a float32 value (in any body either).
fn check_float64_only(g: &Graph) -> Result<(), BackendError> {
    for node in g.nodes() {
        if node.ty.dtype == DType::F32 {
            return Err(BackendError::Unsupported {
                op: "float32".into(),
                device: DEVICE.into(),
                reason: format!(
                    "precision=\"float64\" programs cannot contain float32 values ({} makes \
                     one); convert inputs with astype(quabla.float64)",
                    node.op.name()
                ),
            });
        }
        if let Op::Region(call) = &node.op {
            for (_, body) in call.region.bodies() {
                check_float64_only(body)?;
            }
        }
    }
    Ok(())
}

/// Program-wide state: buffers and kernels (shared by a plan and its bodies).
#[derive(Debug)]
pub(crate) struct Builder {
    pub t: Elem,
    pub buffers: Vec<BufferDecl>,
    pub kernels: Vec<Kernel>,
    kernel_index: HashMap<String, usize>,
}

impl Builder {
    fn new(t: Elem) -> Builder {
        Builder {
            t,
            buffers: Vec::new(),
            kernels: Vec::new(),
            kernel_index: HashMap::new(),
        }
    }

    pub fn buffer(&mut self, elem: Elem, len: usize, role: Role) -> BufId {
        self.buffers.push(BufferDecl { elem, len, role });
        self.buffers.len() - 1
    }

    /// The index of `kernel`, adding it once.
    pub fn kernel(&mut self, kernel: Kernel) -> usize {
        if let Some(&i) = self.kernel_index.get(&kernel.name) {
            return i;
        }
        self.kernels.push(kernel);
        let i = self.kernels.len() - 1;
        self.kernel_index.insert(self.kernels[i].name.clone(), i);
        i
    }

    pub fn elem(&self, buf: BufId) -> Elem {
        self.buffers[buf].elem
    }
}

/// The value of a node while its graph is lowered.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Val {
    /// In a buffer.
    Buf(BufId),
    /// A size-1 constant, written into kernels as a literal.
    Scalar(Scalar),
    /// A broadcast not materialized: its operand's value, read with broadcast indexing.
    Bcast(NodeId),
    /// A member of an open fused group (see [`fusion`]).
    Pending,
}

/// The lowering of one graph (a plan, or a region's body) into a block of steps.
pub(crate) struct Ctx<'b> {
    pub b: &'b mut Builder,
    pub g: &'b Graph,
    pub vals: Vec<Option<Val>>,
    /// The consumers of each node.
    pub users: Vec<Vec<usize>>,
    pub is_output: Vec<bool>,
    /// Whether graph outputs are the plan's (stored by dtype, see `program`) rather than a
    /// body's (stored in the program's type).
    pub plan_level: bool,
    pub steps: Vec<Step>,
    /// The temps this block's steps write.
    pub temps: Vec<BufId>,
    pub fusion: Fusion,
    converted: HashMap<(BufId, Elem), BufId>,
    materialized: HashMap<usize, BufId>,
    /// The outputs of each factorization made, by operand node and family (kinds of one
    /// family on one operand share it).
    factorizations: HashMap<(usize, linalg::Family), Vec<BufId>>,
}

impl<'b> Ctx<'b> {
    pub fn new(b: &'b mut Builder, g: &'b Graph, plan_level: bool) -> Ctx<'b> {
        let n = g.len();
        let mut users = vec![Vec::new(); n];
        for (i, node) in g.nodes().iter().enumerate() {
            for op in &node.operands {
                if !users[op.index()].contains(&i) {
                    users[op.index()].push(i);
                }
            }
        }
        let mut is_output = vec![false; n];
        for o in g.outputs() {
            is_output[o.index()] = true;
        }
        Ctx {
            b,
            g,
            vals: vec![None; n],
            users,
            is_output,
            plan_level,
            steps: Vec::new(),
            temps: Vec::new(),
            fusion: Fusion::default(),
            converted: HashMap::new(),
            materialized: HashMap::new(),
            factorizations: HashMap::new(),
        }
    }

    pub fn t(&self) -> Elem {
        self.b.t
    }

    /// How a value of node `id`'s dtype is stored inside the program ([`value_elem`]).
    pub fn value_elem(&self, id: NodeId) -> Elem {
        value_elem(self.g.node(id).ty.dtype, self.t())
    }

    /// Binds the graph's inputs, in order, to `bufs`.
    pub fn bind_inputs(&mut self, bufs: &[BufId]) {
        let ids: Vec<NodeId> = self.g.inputs().map(|(id, _, _)| id).collect();
        for (id, &buf) in ids.iter().zip(bufs) {
            self.vals[id.index()] = Some(Val::Buf(buf));
        }
    }

    pub fn dims(&self, id: NodeId) -> Vec<usize> {
        self.g.node(id).ty.shape.dims().to_vec()
    }

    pub fn size(&self, id: NodeId) -> usize {
        self.g.node(id).ty.shape.size()
    }

    /// A new temp of this block.
    pub fn temp(&mut self, elem: Elem, len: usize) -> BufId {
        let buf = self.b.buffer(elem, len, Role::Temp);
        self.temps.push(buf);
        buf
    }

    /// Appends a launch of `kernel` over `items` work items.
    pub fn launch(&mut self, kernel: Kernel, items: usize, args: Vec<Arg>) {
        let kernel = self.b.kernel(kernel);
        self.steps.push(Step::Launch(Launch {
            kernel,
            items: items as u64,
            args,
        }));
    }

    /// The stored type of node `id`'s own result when a step writes it: the dtype's storage
    /// for a plan output, its [`value_elem`] otherwise.
    pub fn out_elem(&self, id: usize) -> Elem {
        let dtype = self.g.nodes()[id].ty.dtype;
        if self.plan_level && self.is_output[id] {
            storage_of(dtype)
        } else {
            value_elem(dtype, self.t())
        }
    }

    /// Appends a fill of a new temp of `elem` (`len` elements) with the scalar `v`.
    fn filled(&mut self, v: Scalar, elem: Elem, len: usize) -> BufId {
        let buf = self.temp(elem, len);
        let (kernel, value) = match v {
            Scalar::Float(x) => (codegen::layout::fill(elem), x.to_bits() as i64),
            Scalar::I32(x) => (codegen::layout::fill_int(elem), i64::from(x)),
            Scalar::I64(x) => (codegen::layout::fill_int(elem), x),
        };
        self.launch(kernel, len, vec![Arg::Buf(buf), Arg::Int(value)]);
        buf
    }

    /// Node `id`'s value in a buffer: seals its fused group, materializes a broadcast or a
    /// literal.
    pub fn buf_of(&mut self, id: NodeId) -> Result<BufId, BackendError> {
        let val = self.vals[id.index()]
            .clone()
            .ok_or_else(|| internal(format!("node {id} is used before it is lowered")))?;
        match val {
            Val::Buf(b) => Ok(b),
            Val::Pending => {
                self.seal_group_of(id.index())?;
                match self.vals[id.index()] {
                    Some(Val::Buf(b)) => Ok(b),
                    _ => Err(internal(format!(
                        "sealing the group of {id} gave no buffer"
                    ))),
                }
            }
            Val::Scalar(v) => {
                if let Some(&b) = self.materialized.get(&id.index()) {
                    return Ok(b);
                }
                let (n, elem) = (self.size(id), self.value_elem(id));
                let buf = self.filled(v, elem, n);
                self.materialized.insert(id.index(), buf);
                Ok(buf)
            }
            Val::Bcast(of) => {
                if let Some(&b) = self.materialized.get(&id.index()) {
                    return Ok(b);
                }
                let to = self.dims(id);
                let elem = self.value_elem(id);
                let buf = if let Some(Val::Scalar(v)) = self.vals[of.index()].clone() {
                    self.filled(v, elem, to.iter().product())
                } else {
                    let src = self.buf_of(of)?;
                    let from = self.dims(of);
                    let (x, out) = (self.b.elem(src), elem);
                    let buf = self.temp(out, to.iter().product());
                    self.launch(
                        codegen::layout::broadcast(&from, &to, x, out),
                        to.iter().product(),
                        vec![Arg::Buf(src), Arg::Buf(buf)],
                    );
                    buf
                };
                self.materialized.insert(id.index(), buf);
                Ok(buf)
            }
        }
    }

    /// Node `id`'s value in a buffer of `elem` (converting with a copy when it is stored
    /// otherwise).
    pub fn buf_as(&mut self, id: NodeId, elem: Elem) -> Result<BufId, BackendError> {
        let buf = self.buf_of(id)?;
        self.convert(buf, elem)
    }

    /// `buf` as `elem`: itself, or a converted copy (made once). Floating types convert to
    /// each other; an integer buffer is only ever wanted in its own type (a conversion
    /// between integers and floats is a `cast` node, with its own rules).
    pub fn convert(&mut self, buf: BufId, elem: Elem) -> Result<BufId, BackendError> {
        if self.b.elem(buf) == elem {
            return Ok(buf);
        }
        if self.b.elem(buf).is_int() || elem.is_int() {
            return Err(internal(format!(
                "a buffer of {} is wanted as {elem}",
                self.b.elem(buf)
            )));
        }
        if let Some(&c) = self.converted.get(&(buf, elem)) {
            return Ok(c);
        }
        let len = self.b.buffers[buf].len;
        let from = self.b.elem(buf);
        let out = self.temp(elem, len);
        self.launch(
            codegen::layout::copy(from, elem),
            len,
            vec![Arg::Buf(buf), Arg::Buf(out)],
        );
        self.converted.insert((buf, elem), out);
        Ok(out)
    }

    /// Lowers every node in order, then seals the groups still open.
    pub fn run(&mut self) -> Result<(), BackendError> {
        let groups = quabla_ir::region_groups(self.g);
        for i in 0..self.g.len() {
            if self.vals[i].is_some() {
                continue;
            }
            self.node(i, &groups)?;
        }
        self.seal_all()
    }

    fn node(&mut self, i: usize, groups: &HashMap<usize, Vec<usize>>) -> Result<(), BackendError> {
        let node = &self.g.nodes()[i];
        let op = node.op.clone();
        let operands = node.operands.clone();
        let val = match &op {
            Op::Input { .. } => {
                return Err(internal(format!("input %{i} was not bound")));
            }
            Op::Constant { data, .. } => self.constant(data),
            op if op.is_elementwise() => {
                self.fuse(i)?;
                Val::Pending
            }
            Op::Broadcast { .. } => match self.vals[operands[0].index()] {
                // A broadcast of a broadcast reads the innermost operand.
                Some(Val::Bcast(inner)) => Val::Bcast(inner),
                _ => Val::Bcast(operands[0]),
            },
            Op::Reshape { .. } => match self.vals[operands[0].index()].clone() {
                Some(Val::Scalar(v)) => Val::Scalar(v),
                _ => Val::Buf(self.buf_of(operands[0])?),
            },
            Op::DebugPrint {
                format,
                per_example,
            } => {
                let buf = self.buf_of(operands[0])?;
                let ty = &self.g.node(operands[0]).ty;
                self.steps.push(Step::Print(crate::program::Print {
                    buf,
                    dtype: ty.dtype,
                    shape: ty.shape.clone(),
                    format: format.clone(),
                    per_example: *per_example,
                }));
                Val::Buf(buf)
            }
            Op::Reduce { .. }
            | Op::Cumsum { .. }
            | Op::Transpose { .. }
            | Op::Concat { .. }
            | Op::Slice { .. }
            | Op::PadSlice { .. }
            | Op::Gather { .. }
            | Op::ScatterAdd { .. } => Val::Buf(self.layout_or_reduce(i)?),
            Op::IndexGather { .. } | Op::IndexScatter { .. } => Val::Buf(self.indexed(i)?),
            Op::Matmul
            | Op::Solve { .. }
            | Op::Cholesky
            | Op::CholeskyAd
            | Op::TriangularSolve { .. }
            | Op::Linalg(_) => Val::Buf(self.linear_algebra(i)?),
            Op::Region(_) => {
                let siblings = groups.get(&i).cloned().unwrap_or_else(|| vec![i]);
                return self.region(i, &siblings);
            }
            Op::Custom(_) => {
                return Err(unsupported(
                    "custom",
                    "custom-rule calls are inlined before a plan reaches a backend",
                ))
            }
            other => {
                return Err(unsupported(
                    other.name(),
                    "the CUDA backend has no lowering for this op",
                ))
            }
        };
        self.vals[i] = Some(val);
        Ok(())
    }

    /// A constant: a literal when it has one element, else a constant buffer in the program's
    /// type (integers in their own).
    fn constant(&mut self, data: &HostData) -> Val {
        if data.len() == 1 {
            return Val::Scalar(Scalar::of(data));
        }
        let data = match data {
            HostData::I32(v) => ConstData::I32(v.to_vec()),
            HostData::I64(v) => ConstData::I64(v.to_vec()),
            _ => {
                let values = data.to_f64_vec();
                match self.t() {
                    Elem::F64 => ConstData::F64(values),
                    _ => ConstData::F32(values.iter().map(|&v| v as f32).collect()),
                }
            }
        };
        let (elem, len) = (data.elem(), data.len());
        Val::Buf(self.b.buffer(elem, len, Role::Constant(data)))
    }

    /// An `int` constant buffer (index tables).
    pub fn index_table(&mut self, values: Vec<i32>) -> BufId {
        let len = values.len();
        self.b
            .buffer(Elem::I32, len, Role::Constant(ConstData::I32(values)))
    }

    /// The graph's outputs as buffers: stored by dtype for a plan, as values of the program
    /// ([`value_elem`]) for a body (whose outputs the region executor moves and copies).
    pub fn final_outputs(&mut self) -> Result<Vec<BufId>, BackendError> {
        let outputs: Vec<NodeId> = self.g.outputs().to_vec();
        let mut out = Vec::with_capacity(outputs.len());
        for id in outputs {
            let elem = if self.plan_level {
                storage_of(self.g.node(id).ty.dtype)
            } else {
                self.value_elem(id)
            };
            out.push(self.buf_as(id, elem)?);
        }
        Ok(out)
    }
}

/// An internal error of the lowering (a bug, never a user's mistake).
pub fn internal(message: impl Into<String>) -> BackendError {
    BackendError::Device {
        device: DEVICE.into(),
        message: format!("internal error while lowering a plan: {}", message.into()),
    }
}

/// The buffers a step reads or writes (a region's operands and outputs; its bodies' buffers
/// are its own).
pub fn step_buffers(step: &Step) -> Vec<BufId> {
    use crate::program::Solver;
    match step {
        Step::Launch(l) => l
            .args
            .iter()
            .filter_map(|a| match a {
                Arg::Buf(b) => Some(*b),
                Arg::Int(_) => None,
            })
            .collect(),
        Step::Gemm(g) => vec![g.a, g.b, g.c],
        Step::Trsm(t) => vec![t.a, t.b],
        Step::Solver(s) => match &s.call {
            Solver::Getrf { a, ipiv, info, .. } => vec![*a, *ipiv, *info],
            Solver::Getrs {
                a, ipiv, b, info, ..
            } => vec![*a, *ipiv, *b, *info],
            Solver::Potrf { a, info, .. } => vec![*a, *info],
            Solver::Syevd { a, w, info, .. } => vec![*a, *w, *info],
            Solver::Gesvdj {
                a, s, u, v, info, ..
            } => vec![*a, *s, *u, *v, *info],
            Solver::Geqrf { a, tau, info, .. } => vec![*a, *tau, *info],
            Solver::Orgqr { a, tau, info, .. } => vec![*a, *tau, *info],
        },
        Step::Region(r) => r.operands.iter().chain(&r.outputs).copied().collect(),
        Step::Print(p) => vec![p.buf],
        Step::CheckSingular { info, .. } => vec![*info],
        Step::Release(b) => vec![*b],
    }
}

/// Inserts a [`Step::Release`] after the last step that uses each temp of the plan's top
/// level, except outputs and the status buffers a deferred singular check reads.
fn insert_releases(steps: &mut Vec<Step>, buffers: &[BufferDecl], outputs: &[BufId]) {
    let mut last: HashMap<BufId, usize> = HashMap::new();
    let mut checked: Vec<BufId> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        if let Step::CheckSingular { info, .. } = step {
            checked.push(*info);
        }
        for b in step_buffers(step) {
            last.insert(b, i);
        }
    }
    let mut after: Vec<Vec<BufId>> = vec![Vec::new(); steps.len()];
    for (&b, &i) in &last {
        if buffers[b].role == Role::Temp && !outputs.contains(&b) && !checked.contains(&b) {
            after[i].push(b);
        }
    }
    let old = std::mem::take(steps);
    for (step, mut releases) in old.into_iter().zip(after) {
        steps.push(step);
        releases.sort_unstable();
        steps.extend(releases.into_iter().map(Step::Release));
    }
}
