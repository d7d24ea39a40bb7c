//! Machine code for loops and plans. A `fori_loop`/`scan` or a `while_loop` whose bodies
//! have a scalar form (`scalar.rs`) or translate node by node ([`GraphBody`]: values of at
//! most [`NATIVE_ELEMENTS`] elements) is compiled with Cranelift into one native function that
//! runs a chunk of iterations: small values (at most 64 elements) in machine registers, larger
//! ones as float64 arrays in the run's scratch memory with loops over their elements
//! (`memory.rs`), scanned slices read and stacked slices written in place: no value array, no
//! per-op dispatch, no per-iteration call. Whether a body's code beats the interpreter is
//! weighed when it is first needed ([`GraphBody::pays_off`], a cost model measured with the
//! loop-state sweep); the report says why a loop stays interpreted. A whole plan over small
//! and medium values ([`NativePlan`]: a model's loss and gradient, a Newton step's algebra)
//! becomes one function from its inputs to its outputs, which the executable switches to once
//! the plan is hot (`lib.rs`, `NATIVE_AFTER_RUNS`). The functions the code calls by symbol are
//! in `symbols.rs`.
//!
//! The code computes exactly what the interpreter computes: the same IEEE operations on
//! float64 values in the same order (Cranelift neither contracts a multiply and an add into
//! one rounding nor reassociates float arithmetic), float32 nodes rounded after every
//! operation, every stored value rounded to its dtype, sums in the blocked order, and every
//! function that is not one IEEE operation (`tanh`, `pow`, `powi`, `maximum`, the LU `solve`, `matmul`)
//! called by symbol: the function the interpreter calls for that op. A scalar body is
//! translated from its fused programs; a small body from its plan graph, node by node as
//! `quabla_ir::eval::evaluate` defines each node, with the regions nested in it (`cond`,
//! bounded loops) as branches and inner loops. `tests/native_loops.rs` (register form) and
//! `tests/native_memory.rs` (memory form) run every elementwise op, layout op, reduction,
//! product and nesting both ways and compare bits.
//!
//! Values are float64 in the generated code, so graphs with an integer value (or an integer
//! function on bools) are not translated (`quabla_ir::eval::has_integers`): their loops and
//! plans run in the interpreter, with the integer semantics of `quabla_ir::eval`.
//!
//! This module decides nothing about values and never fails a compile: a body it cannot
//! translate, or a host Cranelift does not support, gets no native form and the interpreter
//! runs the loop (`CpuExecutable::report` shows which). A kernel that fails inside the code
//! (a singular `solve`) leaves it through a failure exit, and the caller reruns the loop in the
//! interpreter, which raises the kernel's error. Cancellation stays with the caller, which runs
//! the code in chunks of iterations and checks its flags between them; loops nested in a body
//! are bounded ([`NESTED_TRIPS`]) so that a chunk ends soon.

mod memory;
mod symbols;

use crate::buffer::{View, ViewMut};
use crate::kernels::elementwise::{EwOp, Instr, Program, Src};
use crate::scalar::ScalarBody;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, AbiParam, FuncRef, InstBuilder, MemFlagsData, Signature, Type, Value,
};
use cranelift_codegen::ir::{Block, StackSlotData, StackSlotKind};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module, ModuleReloc};
use memory::{Fused, Home, Mem, Tables, Val, REGISTER_ELEMENTS};
use quabla_ir::eval::{
    broadcast_values, evaluate, kept_positions, HostValue, SUM_BLOCK, SUM_LANES,
};
use quabla_ir::{
    BinaryOp, Comparison, DType, Graph, HostData, Op, Plan, Reducer, Region, RegionKind, Shape,
    TensorType, UnaryOp,
};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};
use symbols::{binary_symbol, unary_symbol, MAXIMUM, MINIMUM, POWI, SOLVE, SYMBOLS};

/// A scan in machine code: its carries in registers, slice `k` of each scanned operand read
/// and slice `k` of each stacked output written in place at iteration `k`.
#[derive(Clone, Debug)]
pub(crate) struct NativeScan {
    code: Arc<Code>,
    carry_elements: usize,
    const_elements: usize,
    /// The dtype and slice length of each scanned operand and each stacked output.
    xs: Vec<(DType, usize)>,
    ys: Vec<(DType, usize)>,
}

/// `(carries, loop constants, first position, position step, iterations, index of position 0,
/// scanned operands, stacked outputs)`: iteration `i` is at position `k = first + i * step`
/// of the scanned operands and stacked outputs, and its index value is `k + index of 0`.
/// `scratch` is the run's scratch memory (`Code::scratch` float64 elements).
type ScanFn = unsafe extern "C" fn(
    *mut f64,
    *const f64,
    i64,
    i64,
    u64,
    i64,
    *const u8,
    *mut u8,
    *mut f64,
) -> u64;

/// What a loop's code returns when a kernel it calls failed (a singular `solve`): the caller
/// reruns the loop in the interpreter, which raises the kernel's error as it always does.
const FAILED: u64 = u64::MAX;

/// The scan to compile: the elements of each carry and loop constant, the dtype of the index,
/// the dtype and slice length of each scanned operand, and, for each stacked output, the body
/// output that fills it, its dtype and its slice length.
#[derive(Clone, Debug)]
pub(crate) struct ScanShape {
    pub carries: Vec<usize>,
    pub consts: Vec<usize>,
    pub index: DType,
    pub xs: Vec<(DType, usize)>,
    pub ys: Vec<(usize, DType, usize)>,
}

impl NativeScan {
    /// The native form of a scan whose body (inputs: index, carries, constants, slices;
    /// outputs: the carries, then what the stacked outputs take) is `body`, or `None` when the
    /// body has something this module does not translate.
    pub(crate) fn compile(body: LoopBody<'_>, scan: &ScanShape) -> Option<NativeScan> {
        let code = Code::build(&[types::I64; 9], Some(types::I64), |e, params| {
            let (carries_at, consts_at) = (params[0], params[1]);
            let (first, step, count, index0) = (params[2], params[3], params[4], params[5]);
            let (xs_at, ys_at) = (params[6], params[7]);
            let constants = e.given_flat(consts_at, &scan.consts);
            let xs: Vec<Value> = (0..scan.xs.len())
                .map(|x| e.load_pointer(xs_at, x))
                .collect();
            let ys: Vec<Value> = (0..scan.ys.len())
                .map(|y| e.load_pointer(ys_at, y))
                .collect();
            let carries = e.carries(carries_at, &scan.carries);
            let (trip, header, exit) = e.counted_loop(count);
            let i = e.b.use_var(trip);
            let offset = e.b.ins().imul(i, step);
            let k = e.b.ins().iadd(first, offset);
            let index = e.b.ins().iadd(k, index0);
            let index = e.b.ins().fcvt_from_sint(types::F64, index);
            let mut inputs = vec![Val::Regs(vec![e.round(scan.index, index)])];
            inputs.extend(e.use_carries(&carries));
            inputs.extend(constants.iter().cloned());
            for (&base, &(dtype, len)) in xs.iter().zip(&scan.xs) {
                inputs.push(e.given_slice(base, k, dtype, len)?);
            }
            let outs = e.loop_body(body, &inputs)?;
            for (&base, &(output, dtype, len)) in ys.iter().zip(&scan.ys) {
                let value = outs.get(output)?;
                if value.len() != len {
                    return None;
                }
                e.put_slice(base, k, dtype, value)?;
            }
            e.set_carries(&carries, &outs)?;
            e.next_trip(trip, header);

            e.b.switch_to_block(exit);
            e.store_carries(carries_at, &carries);
            let ok = e.b.ins().iconst(types::I64, 0);
            e.b.ins().return_(&[ok]);
            Some(())
        })?;
        Some(NativeScan {
            code: Arc::new(code),
            carry_elements: scan.carries.iter().sum(),
            const_elements: scan.consts.iter().sum(),
            xs: scan.xs.clone(),
            ys: scan.ys.iter().map(|y| (y.1, y.2)).collect(),
        })
    }

    /// Runs `count` iterations at positions `first`, `first + step`, ... (index values those
    /// plus `index0`) on the carries' elements (one after the other, as float64) in place,
    /// with the loop constants' elements in `consts`, reading slice `k` of each scanned
    /// operand in `xs` and writing slice `k` of each stacked output in `ys`. Returns `false`
    /// when an array does not have the dtype or length the code needs (running nothing) or
    /// when a kernel the code calls failed (the loop is then to be rerun in the interpreter).
    pub(crate) fn run(
        &self,
        (carries, consts): (&mut [f64], &[f64]),
        (first, step, count): (usize, isize, usize),
        index0: usize,
        xs: &[View<'_>],
        ys: &mut [ViewMut<'_>],
    ) -> bool {
        if count == 0 {
            return true;
        }
        let last = first as isize + step * (count as isize - 1);
        let end = first.max(last.max(0) as usize) + 1;
        let holds = |len: usize, slice: usize| last >= 0 && end.saturating_mul(slice) <= len;
        let xs_fit = xs.len() == self.xs.len()
            && xs
                .iter()
                .zip(&self.xs)
                .all(|(v, &(d, n))| v.dtype() == d && holds(v.len(), n));
        let ys_fit = ys.len() == self.ys.len()
            && ys
                .iter()
                .zip(&self.ys)
                .all(|(v, &(d, n))| v.dtype() == d && holds(v.len(), n));
        if carries.len() != self.carry_elements
            || consts.len() != self.const_elements
            || !xs_fit
            || !ys_fit
        {
            return false;
        }
        let xs_at: Vec<*const u8> = xs.iter().map(View::as_ptr).collect();
        let mut ys_at: Vec<*mut u8> = ys.iter_mut().map(ViewMut::as_mut_ptr).collect();
        // SAFETY: the entry was compiled with `ScanFn`'s signature. It reads and writes the
        // `carry_elements` values of `carries`, reads the `const_elements` values of `consts`,
        // and reads or writes slice `k` of each array of `xs` and `ys` (with the dtypes and
        // slice lengths it was compiled for) for the positions `k` of this call only: every
        // length and dtype is checked above. It calls only the pure functions of `SYMBOLS`.
        let Some(mut scratch) = self.code.scratch_memory() else {
            return false;
        };
        let status = unsafe {
            let f: ScanFn = std::mem::transmute(self.code.entry);
            f(
                carries.as_mut_ptr(),
                consts.as_ptr(),
                first as i64,
                step as i64,
                count as u64,
                index0 as i64,
                xs_at.as_ptr().cast(),
                ys_at.as_mut_ptr().cast(),
                scratch.as_mut_ptr(),
            )
        };
        status != FAILED
    }
}

/// A while loop in machine code: its predicate and body run alternately.
#[derive(Clone, Debug)]
pub(crate) struct NativeWhile {
    code: Arc<Code>,
    /// Elements of all carries, and of all loop constants, one after the other.
    carry_elements: usize,
    const_elements: usize,
}

/// `(carries, loop constants, most body runs, scratch memory) -> 2 * body runs + stopped`.
type WhileFn = unsafe extern "C" fn(*mut f64, *const f64, u64, *mut f64) -> u64;

/// How a chunk of a native while loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WhileChunk {
    /// Bodies run.
    pub runs: usize,
    /// Whether the predicate came out false (after `runs` bodies).
    pub stopped: bool,
}

/// A loop body to translate: the scalar form of its schedule, or its graph when every value
/// is small.
#[derive(Clone, Copy, Debug)]
pub(crate) enum LoopBody<'a> {
    Scalar(&'a ScalarBody),
    Graph(&'a GraphBody),
}

impl NativeWhile {
    /// The native form of a while loop with predicate `cond` and body `body`, both taking
    /// `(carries.., constants..)`, whose carries and constants have `carries` and `consts`
    /// elements each.
    pub(crate) fn compile(
        cond: LoopBody<'_>,
        body: LoopBody<'_>,
        carries: &[usize],
        consts: &[usize],
    ) -> Option<NativeWhile> {
        let code = Code::build(
            &[types::I64, types::I64, types::I64, types::I64],
            Some(types::I64),
            |e, params| {
                let (carries_at, consts_at, count) = (params[0], params[1], params[2]);
                let constants = e.given_flat(consts_at, consts);
                let vars = e.carries(carries_at, carries);
                let inputs = |e: &mut Emitter<'_, '_>| {
                    let mut inputs = e.use_carries(&vars);
                    inputs.extend(constants.iter().cloned());
                    inputs
                };
                // The bodies run so far; `full` after `count` of them.
                let (runs, header, full) = e.counted_loop(count);
                let (run, stop) = (e.b.create_block(), e.b.create_block());
                let given = inputs(e);
                let predicate = e.loop_body(cond, &given)?;
                let p = e.element_at(predicate.first()?, 0)?;
                let zero = e.b.ins().f64const(0.0);
                // The interpreter stops on a predicate equal to 0.0.
                let holds = e.b.ins().fcmp(FloatCC::NotEqual, p, zero);
                e.b.ins().brif(holds, run, &[], stop, &[]);

                e.b.switch_to_block(run);
                let given = inputs(e);
                let outs = e.loop_body(body, &given)?;
                if outs.len() != vars.len() {
                    return None;
                }
                e.set_carries(&vars, &outs)?;
                e.next_trip(runs, header);

                for (block, stopped) in [(full, 0), (stop, 1)] {
                    e.b.switch_to_block(block);
                    e.store_carries(carries_at, &vars);
                    let r = e.b.use_var(runs);
                    let twice = e.b.ins().ishl_imm_u(r, 1);
                    let code = e.b.ins().iadd_imm_s(twice, stopped);
                    e.b.ins().return_(&[code]);
                }
                Some(())
            },
        )?;
        Some(NativeWhile {
            code: Arc::new(code),
            carry_elements: carries.iter().sum(),
            const_elements: consts.iter().sum(),
        })
    }

    /// Runs predicate and body alternately, at most `most` bodies, on the carries' elements
    /// (one after the other, as float64) in place, with the loop constants' elements in
    /// `consts`; `None` when the arrays do not have the lengths the code was built for
    /// (running nothing) or when a kernel the code calls failed (the loop is then to be rerun
    /// in the interpreter).
    pub(crate) fn run(
        &self,
        carries: &mut [f64],
        consts: &[f64],
        most: usize,
    ) -> Option<WhileChunk> {
        if carries.len() != self.carry_elements || consts.len() != self.const_elements {
            return None;
        }
        // SAFETY: the entry was compiled with `WhileFn`'s signature; it reads and writes the
        // `carry_elements` values of `carries` and reads the `const_elements` values of
        // `consts`, both checked above, and calls only the pure functions of `SYMBOLS`.
        let mut scratch = self.code.scratch_memory()?;
        let code = unsafe {
            let f: WhileFn = std::mem::transmute(self.code.entry);
            f(
                carries.as_mut_ptr(),
                consts.as_ptr(),
                most as u64,
                scratch.as_mut_ptr(),
            )
        };
        if code == FAILED {
            return None;
        }
        Some(WhileChunk {
            runs: (code >> 1) as usize,
            stopped: code & 1 == 1,
        })
    }
}

/// A whole plan in machine code: a plan without control flow whose values are all small (a
/// [`GraphBody`]: a scalar model, the loss and gradient of a few parameters) runs as one
/// native function from its inputs to its outputs, with no steps, slots or buffers in between.
#[derive(Clone, Debug)]
pub(crate) struct NativePlan {
    code: Arc<Code>,
    /// Dtype and element count of each input and each output.
    inputs: Vec<(DType, usize)>,
    outputs: Vec<(DType, usize)>,
}

/// `(input pointers, output pointers, scratch memory) -> 0, or FAILED`.
type PlanFn = unsafe extern "C" fn(*const *const u8, *const *mut u8, *mut f64) -> u64;

/// The most element operations of values held in registers (the elements of every such node,
/// added up) of a plan compiled whole: every element is a machine instruction or more, and
/// Cranelift's time grows with them, so a long scalar plan stays in the interpreter rather
/// than make one call pay tens of milliseconds of code generation.
pub(crate) const PLAN_ELEMENTS: usize = 4096;

/// The most element operations of values held in memory in a plan compiled whole: past it the
/// interpreter's fused kernels (vector lanes, both cores) outweigh the dispatch the machine
/// code saves (`docs/performance.md`).
pub(crate) const PLAN_MEMORY_ELEMENTS: usize = 16384;

impl NativePlan {
    /// Whether `graph` can be compiled whole: its translated form, or `None`. A plan that
    /// calls a control-flow region is not: its loops keep their own code, which runs in
    /// chunks with the run's cancellation checked between them, where one call of a whole
    /// plan could run nested loops of thousands of trips each without a check.
    pub(crate) fn small_form(graph: &Graph) -> Option<GraphBody> {
        let (mut in_registers, mut in_memory) = (0usize, 0usize);
        for node in graph.nodes() {
            if matches!(node.op, Op::Region(_)) {
                return None;
            }
            let size = node.ty.shape.size();
            if size <= REGISTER_ELEMENTS {
                in_registers += size;
            } else {
                in_memory += size;
            }
            if in_registers > PLAN_ELEMENTS || in_memory > PLAN_MEMORY_ELEMENTS {
                return None;
            }
        }
        GraphBody::new(graph, graph.inputs().count()).ok()
    }

    /// The native form of the plan whose graph has the small form `small`, or `None` when a
    /// node cannot be translated after all.
    pub(crate) fn compile(small: &GraphBody) -> Option<NativePlan> {
        let graph = &small.graph;
        let inputs: Vec<(DType, usize)> = graph
            .inputs()
            .map(|(_, _, ty)| (ty.dtype, ty.shape.size()))
            .collect();
        let outputs: Vec<(DType, usize)> = graph
            .outputs()
            .iter()
            .map(|&id| {
                let ty = &graph.node(id).ty;
                (ty.dtype, ty.shape.size())
            })
            .collect();
        let code = Code::build(&[types::I64; 3], Some(types::I64), |e, params| {
            let (inputs_at, outputs_at) = (params[0], params[1]);
            let zero = e.b.ins().iconst(types::I64, 0);
            let mut given: Vec<Val> = Vec::with_capacity(inputs.len());
            for (x, &(dtype, len)) in inputs.iter().enumerate() {
                let base = e.load_pointer(inputs_at, x);
                given.push(e.given_slice(base, zero, dtype, len)?);
            }
            let outs = e.graph_body(small, &given)?;
            if outs.len() != outputs.len() {
                return None;
            }
            for (y, (value, &(dtype, len))) in outs.iter().zip(&outputs).enumerate() {
                if value.len() != len {
                    return None;
                }
                let base = e.load_pointer(outputs_at, y);
                e.put_slice(base, zero, dtype, value)?;
            }
            let ok = e.b.ins().iconst(types::I64, 0);
            e.b.ins().return_(&[ok]);
            Some(())
        })?;
        Some(NativePlan {
            code: Arc::new(code),
            inputs,
            outputs,
        })
    }

    /// The outputs of the plan on `inputs`; `None` when an input does not have the dtype or
    /// length the code was built for (running nothing) or when a kernel the code calls failed
    /// (a singular `solve`: the interpreter then runs the plan and raises the kernel's error).
    pub(crate) fn run(&self, inputs: &[&HostData]) -> Option<Vec<HostData>> {
        let fits = inputs.len() == self.inputs.len()
            && inputs
                .iter()
                .zip(&self.inputs)
                .all(|(x, &(dtype, len))| x.dtype() == dtype && x.len() == len);
        if !fits {
            return None;
        }
        let inputs_at: SmallVec<[*const u8; 8]> =
            inputs.iter().map(|&x| View::from(x).as_ptr()).collect();
        // Fresh host data the caller receives as it is; a refused allocation (a few bytes)
        // leaves the run to the interpreter, which reports it.
        let mut outputs: SmallVec<[HostData; 4]> = self
            .outputs
            .iter()
            .map(|&(dtype, len)| HostData::try_zeroed(dtype, len).ok())
            .collect::<Option<_>>()?;
        let outputs_at: SmallVec<[*mut u8; 4]> = outputs
            .iter_mut()
            .map(|y| ViewMut::of_host(y).as_mut_ptr())
            .collect();
        // SAFETY: the entry was compiled with `PlanFn`'s signature. It reads the elements of
        // each input and writes those of each output with the dtypes and lengths it was
        // compiled for (the inputs' checked above, the outputs' allocated above, each held
        // only here), and calls only the pure functions of `SYMBOLS`.
        let mut scratch = self.code.scratch_memory()?;
        let status = unsafe {
            let f: PlanFn = std::mem::transmute(self.code.entry);
            f(
                inputs_at.as_ptr(),
                outputs_at.as_ptr(),
                scratch.as_mut_ptr(),
            )
        };
        (status != FAILED).then(|| outputs.into_vec())
    }
}

/// The most elements of a value of a [`GraphBody`]: the code makes one pass over a value's
/// elements per node, one element at a time, where the interpreter's kernels run fused groups
/// of nodes in vector lanes on both cores; past this size they are faster
/// (`docs/performance.md`, the loop-state sweep).
pub const NATIVE_ELEMENTS: usize = 1 << 16;

/// A body translated from its plan graph, node by node: every value has at most
/// [`NATIVE_ELEMENTS`] elements and every op is one this module translates (elementwise
/// arithmetic with broadcasting, reductions, reshapes, broadcasts, transposes, slices,
/// concatenations, gathers, float64 `matmul`, `solve`). Each node computes exactly what
/// `quabla_ir::eval::evaluate` computes for it: the float64 op per element, rounded to the
/// node's dtype, sums in the blocked order of numerics.md §1.5; the element moves of the
/// layout ops are taken from `evaluate` itself, run on element numbers; `matmul` and `solve`
/// call the CPU kernels' functions. Values of at most [`REGISTER_ELEMENTS`] elements are
/// machine values, larger ones arrays in memory (`memory.rs`). Control-flow regions inside
/// such a body are translated too, a `cond` as a branch and loops bounded by at most
/// [`NESTED_TRIPS`] trips as loops, when their carries and results fit in registers.
#[derive(Clone, Debug)]
pub(crate) struct GraphBody {
    graph: Graph,
    /// The translated form of each region the graph calls, by the region's address.
    nested: HashMap<usize, Arc<Nested>>,
    /// The elements of the values held in memory that the code makes a pass over.
    memory_elements: usize,
}

/// The element operations in memory that cost the machine code as much as one step costs
/// the interpreter, measured with the loop-state sweep of `cargo xtask bench --scaling`
/// (`docs/performance.md`): an interpreted step costs about 150 ns over its kernel's work,
/// and the machine code's pass over an element in memory about 0.65 ns more than the fused
/// kernel's.
const STEP_ELEMENTS: usize = 230;

/// The multiply-adds of a `matmul` that weigh as one element pass in [`STEP_ELEMENTS`]'s
/// balance.
const MATMUL_WEIGHT: usize = 8;

/// The most trips of a loop nested in a loop body: the code of a body runs between two
/// cancellation checks, so a nested loop must end soon.
const NESTED_TRIPS: usize = 4096;

/// The most regions nested in one another inside one function. Every variable that a nested
/// loop reads or writes is threaded through each enclosing loop's header, so the code
/// generator's time grows with the depth times the code: reverse-mode derivatives of loops
/// nested 40 deep spent 0.1 s in that alone. A body with deeper regions gets no machine code;
/// its inner loops get their own when they run.
const NESTED_DEPTH: usize = 8;

/// A region inside a graph body, with its bodies translated.
#[derive(Debug)]
enum Nested {
    Cond {
        then_branch: GraphBody,
        else_branch: GraphBody,
        /// Elements of each output.
        outputs: Vec<usize>,
    },
    Scan {
        body: GraphBody,
        length: usize,
        start: usize,
        reverse: bool,
        n_carry: usize,
        n_const: usize,
        index: DType,
        /// Elements of one slice of each stacked output.
        ys: Vec<usize>,
    },
    While {
        cond: GraphBody,
        body: GraphBody,
        n_carry: usize,
        max_trips: usize,
    },
}

impl Nested {
    /// The elements in memory its bodies make passes over in one run (a scan's once per trip;
    /// a while loop's trips are not known before it runs, and count once).
    fn memory_elements(&self) -> usize {
        match self {
            Nested::Cond {
                then_branch,
                else_branch,
                ..
            } => then_branch.memory_elements.max(else_branch.memory_elements),
            Nested::Scan { body, length, .. } => body.memory_elements.saturating_mul(*length),
            Nested::While { cond, body, .. } => {
                cond.memory_elements.saturating_add(body.memory_elements)
            }
        }
    }

    /// The translated form of `region`, when its bodies translate and its loops have a bound of
    /// at most [`NESTED_TRIPS`] trips.
    fn new(region: &Region, depth: usize) -> Result<Nested, String> {
        if depth > NESTED_DEPTH {
            return Err(format!("regions nested more than {NESTED_DEPTH} deep"));
        }

        let small = |graph: &Graph| {
            let plan = Plan::compile(graph);
            GraphBody::at_depth(plan.graph(), graph.inputs().count(), depth)
        };
        Ok(match region.kind() {
            RegionKind::Cond {
                then_branch,
                else_branch,
            } => Nested::Cond {
                then_branch: small(then_branch)?,
                else_branch: small(else_branch)?,
                outputs: region
                    .output_types()
                    .iter()
                    .map(|t| t.shape.size())
                    .collect(),
            },
            RegionKind::Scan(s) if s.length <= NESTED_TRIPS => Nested::Scan {
                body: small(&s.body)?,
                length: s.length,
                start: s.start,
                reverse: s.reverse,
                n_carry: s.n_carry,
                n_const: s.n_const,
                index: s.index_dtype(),
                ys: region.output_types()[s.n_carry..]
                    .iter()
                    .map(|t| t.shape.dims().iter().skip(1).product())
                    .collect(),
            },
            RegionKind::While {
                n_carry,
                cond,
                body,
                max_trips: Some(max_trips),
            } if *max_trips <= NESTED_TRIPS => Nested::While {
                cond: small(cond)?,
                body: small(body)?,
                n_carry: *n_carry,
                max_trips: *max_trips,
            },
            RegionKind::While {
                max_trips: None, ..
            } => return Err("a nested while loop without a bound".into()),
            _ => return Err(format!("a nested loop of more than {NESTED_TRIPS} trips")),
        })
    }
}

impl GraphBody {
    /// The translated form of a body graph with `inputs` inputs, or why it has none.
    pub(crate) fn new(graph: &Graph, inputs: usize) -> Result<GraphBody, String> {
        GraphBody::at_depth(graph, inputs, 0)
    }

    /// Whether the machine code pays off against an interpreter that runs the body in
    /// `steps` steps: it saves every step's dispatch and loses, per element of a value held
    /// in memory, to the interpreter's fused kernels (vector lanes, both cores); `Err` says
    /// why the interpreter is chosen.
    pub(crate) fn pays_off(&self, steps: usize) -> Result<(), String> {
        if self.memory_elements <= steps.saturating_mul(STEP_ELEMENTS) {
            Ok(())
        } else {
            Err(format!(
                "its kernels are faster on {} elements per iteration in {steps} steps",
                self.memory_elements
            ))
        }
    }

    /// [`GraphBody::new`] for a body nested in `depth` regions of the function being built.
    fn at_depth(graph: &Graph, inputs: usize, depth: usize) -> Result<GraphBody, String> {
        if graph.inputs().count() != inputs {
            return Err("a body whose inputs do not match".into());
        }
        if quabla_ir::eval::has_integers(graph) {
            return Err("integer values".into());
        }
        let mut nested = HashMap::new();
        let mut memory_elements = 0usize;
        for node in graph.nodes() {
            let size = node.ty.shape.size();
            if let Op::Region(call) = &node.op {
                let key = Arc::as_ptr(&call.region) as usize;
                if let std::collections::hash_map::Entry::Vacant(slot) = nested.entry(key) {
                    let region = Nested::new(&call.region, depth + 1)?;
                    // A nested region's work counts once per call (its sibling output nodes
                    // share one run), a scan's once per trip.
                    memory_elements = memory_elements.saturating_add(region.memory_elements());
                    slot.insert(Arc::new(region));
                }
                if size > NATIVE_ELEMENTS {
                    return Err(format!("a value of more than {NATIVE_ELEMENTS} elements"));
                }
                continue;
            }
            let translated = match &node.op {
                Op::Input { .. }
                | Op::Constant { .. }
                | Op::Reshape { .. }
                | Op::Broadcast { .. }
                | Op::Transpose { .. }
                | Op::Concat { .. }
                | Op::Slice { .. }
                | Op::PadSlice { .. }
                | Op::Gather { .. }
                | Op::Reduce { .. } => true,
                Op::Solve { .. } => solve_geometry(graph, node).is_some(),
                // The kernel's float64 product; a float32 one may run in float32 lanes
                // (numerics.md §1.5, `precision="float32"`), which this code does not model.
                Op::Matmul => {
                    node.ty.dtype == DType::F64
                        && node.operands.iter().all(|&o| {
                            let t = &graph.node(o).ty;
                            t.dtype == DType::F64 && t.shape.rank() >= 2
                        })
                }
                op => EwOp::from_op(op).is_some(),
            };
            if !translated {
                return Err(format!(
                    "`{}`, which machine code does not cover",
                    node.op.name()
                ));
            }
            if size > NATIVE_ELEMENTS {
                return Err(format!("a value of more than {NATIVE_ELEMENTS} elements"));
            }
            // Inputs, constants and reshapes of arrays in memory cost no pass over elements.
            let pass = !matches!(
                node.op,
                Op::Input { .. } | Op::Constant { .. } | Op::Reshape { .. }
            );
            if pass && size > REGISTER_ELEMENTS {
                memory_elements += size;
            }
            // A product runs on one core here, where the interpreter splits a large one over
            // both: its multiply-adds weigh against the machine code.
            if let (Op::Matmul, Some(&a)) = (&node.op, node.operands.first()) {
                let k = graph.node(a).ty.shape.dims().last().copied().unwrap_or(1);
                memory_elements =
                    memory_elements.saturating_add(size.saturating_mul(k) / MATMUL_WEIGHT);
            }
        }
        Ok(GraphBody {
            graph: graph.clone(),
            nested,
            memory_elements,
        })
    }
}

/// For each element of a layout op's result, the operand and element it is (`None`: a zero
/// of `pad_slice`), found by evaluating the op on element numbers.
fn element_sources(
    op: &Op,
    operands: &[&Shape],
    out: &Shape,
) -> Option<Vec<Option<(usize, usize)>>> {
    let mut starts = Vec::with_capacity(operands.len());
    let mut numbered = Vec::with_capacity(operands.len());
    let mut next = 1usize;
    for shape in operands {
        starts.push(next);
        let n = shape.size();
        // Numbers from 1, so that the zeros `pad_slice` fills in stand out.
        numbered.push(HostData::F64((next..next + n).map(|i| i as f64).collect()));
        next += n;
    }
    let values: Vec<HostValue<'_>> = numbered
        .iter()
        .zip(operands)
        .map(|(data, shape)| HostValue { data, shape })
        .collect();
    let result = evaluate(op, &values, &TensorType::new(DType::F64, out.clone()))?;
    (0..result.len())
        .map(|i| {
            let v = result.get_f64(i);
            if v == 0.0 {
                return Some(None);
            }
            let number = v as usize;
            let k = starts.iter().rposition(|&s| s <= number)?;
            Some(Some((k, number - starts[k])))
        })
        .collect()
}

/// For each element of the result of a reduction of `shape` over `axes`, the operand's
/// elements it reduces, in row-major order (the grouping of `quabla_ir::eval`).
fn reduced_groups(shape: &Shape, axes: &[usize], out_size: usize) -> Option<Vec<Vec<usize>>> {
    let (count, positions) = kept_positions(shape, axes);
    if count != out_size {
        return None;
    }
    let mut groups = vec![Vec::new(); count];
    for (flat, position) in positions.enumerate() {
        groups.get_mut(position)?.push(flat);
    }
    Some(groups)
}

/// A finalized function and the module that owns its memory.
struct Code {
    module: Option<JITModule>,
    entry: *const u8,
    /// The float64 elements of scratch memory a run needs (its values held in memory).
    scratch: usize,
    /// The tables of element positions and shapes the code reads.
    _tables: Tables,
}

// SAFETY: the module is written once, while it is built, and only executed afterwards; the
// code reads and writes nothing but its arguments, so it may run on any thread, concurrently.
unsafe impl Send for Code {}
// SAFETY: see `Send`.
unsafe impl Sync for Code {}

impl fmt::Debug for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Code({:p})", self.entry)
    }
}

impl Drop for Code {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: `entry`, the only pointer into the module's memory, dies with `self`.
            unsafe { module.free_memory() };
        }
    }
}

/// The most instructions of a function whose registers the backtracking allocator assigns.
/// Its time per instruction grows with the values live at once, and a loop body's reverse
/// pass keeps its whole forward pass live: at 2,000 instructions it took 4 µs an instruction,
/// at 22,000 24 µs (half a second for one function). Longer functions get the single-pass
/// allocator, whose time stays about 1 µs an instruction at every size; its code spills more,
/// which a body that long (its values spilled anyway) hardly notices. Registers change
/// nothing in the arithmetic, so both give the same bits.
const BACKTRACKING_INSTRUCTIONS: usize = 4096;

/// The host's instruction set, built once (`None` where Cranelift does not support it): with
/// the backtracking register allocator, or with the single-pass one for long functions (see
/// [`BACKTRACKING_INSTRUCTIONS`]).
fn isa(single_pass: bool) -> Option<OwnedTargetIsa> {
    static ISA: OnceLock<Option<OwnedTargetIsa>> = OnceLock::new();
    static SINGLE_PASS: OnceLock<Option<OwnedTargetIsa>> = OnceLock::new();
    let cell = if single_pass { &SINGLE_PASS } else { &ISA };
    cell.get_or_init(|| {
        let mut flags = settings::builder();
        flags.set("opt_level", "speed").ok()?;
        if single_pass {
            flags.set("regalloc_algorithm", "single_pass").ok()?;
        }
        // The IR verifier checks the code generator's own output: on in test (debug) builds,
        // off in release builds, where it was a tenth of compile time.
        let verify = if cfg!(debug_assertions) {
            "true"
        } else {
            "false"
        };
        flags.set("enable_verifier", verify).ok()?;
        flags.set("use_colocated_libcalls", "false").ok()?;
        flags.set("is_pic", "false").ok()?;
        cranelift_native::builder()
            .ok()?
            .finish(settings::Flags::new(flags))
            .ok()
    })
    .clone()
}

impl Code {
    /// Fresh scratch memory for one run (no allocation for code that needs none); `None` when
    /// the allocation is refused, which leaves the run to the interpreter.
    fn scratch_memory(&self) -> Option<Vec<f64>> {
        quabla_ir::alloc::try_zeroed_vec(self.scratch).ok()
    }

    /// Builds one function taking `params` (the last is the address of the run's scratch
    /// memory) and returning `ret`, whose body `emit` writes (returning `None` when it meets
    /// something it cannot translate).
    fn build(
        params: &[Type],
        ret: Option<Type>,
        emit: impl FnOnce(&mut Emitter<'_, '_>, &[Value]) -> Option<()>,
    ) -> Option<Code> {
        let isa = isa(false)?;
        if isa.pointer_type() != types::I64 {
            return None;
        }
        let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
        for &(name, ptr) in SYMBOLS.iter() {
            builder.symbol(name, ptr);
        }
        let mut module = JITModule::new(builder);
        // A panic in the code generator (a bug, never an input's fault) must not take the run
        // down: the loop then stays in the interpreter. The module is dropped without freeing
        // its memory in that case, which leaks it rather than risk freeing code in use.
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Code::define(&mut module, params, ret, emit)
        }))
        .ok()?;
        match built {
            Some((entry, scratch, tables)) => Some(Code {
                module: Some(module),
                entry,
                scratch,
                _tables: tables,
            }),
            None => {
                // SAFETY: nothing points into the module's memory.
                unsafe { module.free_memory() };
                None
            }
        }
    }

    fn define(
        module: &mut JITModule,
        params: &[Type],
        ret: Option<Type>,
        emit: impl FnOnce(&mut Emitter<'_, '_>, &[Value]) -> Option<()>,
    ) -> Option<(*const u8, usize, Tables)> {
        let mut ctx = module.make_context();
        let mut fctx = FunctionBuilderContext::new();
        let (scratch, tables): (usize, Tables);
        ctx.func.signature.params = params.iter().map(|&t| AbiParam::new(t)).collect();
        ctx.func.signature.returns = ret.into_iter().map(AbiParam::new).collect();
        let id = module
            .declare_function("loop", Linkage::Local, &ctx.func.signature)
            .ok()?;
        {
            let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
            let entry = b.create_block();
            b.append_block_params_for_function_params(entry);
            b.switch_to_block(entry);
            let args = b.block_params(entry).to_vec();
            let mut e = Emitter {
                b,
                module: &mut *module,
                imports: HashMap::new(),
                failed: None,
                scratch: args.last().copied(),
                scratch_len: 0,
                tables: Tables::default(),
                carry_ids: 0,
            };
            emit(&mut e, &args)?;
            (scratch, tables) = (e.scratch_len, std::mem::take(&mut e.tables));
            if let Some(block) = e.failed {
                e.b.switch_to_block(block);
                let failed = e.b.ins().iconst(types::I64, FAILED as i64);
                e.b.ins().return_(&[failed]);
            }
            e.b.seal_all_blocks();
            let config = e.module.target_config();
            e.b.finalize(config);
        }
        if ctx.func.dfg.num_insts() <= BACKTRACKING_INSTRUCTIONS {
            module.define_function(id, &mut ctx).ok()?;
        } else {
            // The module's own compile would use its (backtracking) instruction set: compile
            // with the single-pass one here and hand the module the bytes and relocations.
            let fast = isa(true)?;
            let alignment = ctx
                .compile(&*fast, &mut Default::default())
                .ok()?
                .buffer
                .alignment;
            let code = ctx.compiled_code()?;
            let relocs: Vec<ModuleReloc> = code
                .buffer
                .relocs()
                .iter()
                .map(|r| ModuleReloc::from_mach_reloc(r, &ctx.func, id))
                .collect();
            module
                .define_function_bytes(id, u64::from(alignment), code.code_buffer(), &relocs)
                .ok()?;
        }
        module.clear_context(&mut ctx);
        module.finalize_definitions().ok()?;
        Some((module.get_finalized_function(id), scratch, tables))
    }
}

/// Where a loop keeps a carry from one iteration to the next.
#[derive(Clone, Debug)]
enum Carry {
    /// One variable per element.
    Vars(Vec<Variable>),
    /// An array in memory (a carry too large for registers), written at the iteration's end.
    Stored(Mem),
}

/// Writes the instructions of one function.
struct Emitter<'m, 'f> {
    b: FunctionBuilder<'f>,
    module: &'m mut JITModule,
    /// The functions of `SYMBOLS` this function calls, declared on first use.
    imports: HashMap<&'static str, FuncRef>,
    /// The block that returns [`FAILED`], made on first use.
    failed: Option<cranelift_codegen::ir::Block>,
    /// The address of the run's scratch memory (the function's last parameter).
    scratch: Option<Value>,
    /// The float64 elements of scratch memory handed out so far.
    scratch_len: usize,
    /// The tables the code reads, kept alive with it.
    tables: Tables,
    /// The last identity given to a carry's storage ([`Home::Carry`]).
    carry_ids: usize,
}

impl Emitter<'_, '_> {
    fn flags() -> MemFlagsData {
        MemFlagsData::trusted()
    }

    /// Element `j` of an array of pointers at `at`.
    fn load_pointer(&mut self, at: Value, j: usize) -> Value {
        self.b.ins().load(types::I64, Self::flags(), at, offset(j))
    }

    /// The address of element `j` of slice `k` (of `len` elements) of an array of `dtype` at
    /// `base`.
    fn element(&mut self, base: Value, k: Value, dtype: DType, len: usize, j: usize) -> Value {
        let size = match dtype {
            DType::F64 => 8,
            DType::F32 => 4,
            DType::Bool => 1,
            // Never reached: graphs with integer values are not translated (module docs).
            DType::I32 | DType::I64 => return self.b.ins().iconst(types::I64, 0),
        };
        let slice = self.b.ins().imul_imm_s(k, (size * len) as i64);
        let at = self.b.ins().iadd(base, slice);
        self.b.ins().iadd_imm_s(at, (size * j) as i64)
    }

    /// Slice `k` of `len` elements of an array of `dtype`, widened to float64 as
    /// `View::get_f64` reads it.
    fn load_slice(&mut self, base: Value, k: Value, dtype: DType, len: usize) -> Vec<Value> {
        (0..len)
            .map(|j| {
                let at = self.element(base, k, dtype, len, j);
                let flags = Self::flags();
                match dtype {
                    DType::F64 => self.b.ins().load(types::F64, flags, at, 0),
                    DType::F32 => {
                        let v = self.b.ins().load(types::F32, flags, at, 0);
                        self.b.ins().fpromote(types::F64, v)
                    }
                    DType::Bool => {
                        let v = self.b.ins().load(types::I8, flags, at, 0);
                        let holds = self.b.ins().icmp_imm_u(IntCC::NotEqual, v, 0);
                        self.select_one_zero(holds)
                    }
                    // Never reached: graphs with integer values are not translated.
                    DType::I32 => {
                        let v = self.b.ins().load(types::I32, flags, at, 0);
                        self.b.ins().fcvt_from_sint(types::F64, v)
                    }
                    DType::I64 => {
                        let v = self.b.ins().load(types::I64, flags, at, 0);
                        self.b.ins().fcvt_from_sint(types::F64, v)
                    }
                }
            })
            .collect()
    }

    /// Stores `values` as slice `k` of an array of `dtype`, as `ViewMut::store_f64` stores.
    fn store_slice(&mut self, base: Value, k: Value, dtype: DType, values: &[Value]) {
        for (j, &v) in values.iter().enumerate() {
            let at = self.element(base, k, dtype, values.len(), j);
            let stored = match dtype {
                DType::F64 => v,
                DType::F32 => self.b.ins().fdemote(types::F32, v),
                DType::Bool => {
                    let zero = self.b.ins().f64const(0.0);
                    let holds = self.b.ins().fcmp(FloatCC::NotEqual, v, zero);
                    let one = self.b.ins().iconst(types::I8, 1);
                    let none = self.b.ins().iconst(types::I8, 0);
                    self.b.ins().select(holds, one, none)
                }
                // Never reached: graphs with integer values are not translated.
                DType::I32 => self.b.ins().fcvt_to_sint_sat(types::I32, v),
                DType::I64 => self.b.ins().fcvt_to_sint_sat(types::I64, v),
            };
            self.b.ins().store(Self::flags(), stored, at, 0);
        }
    }

    /// Where a loop keeps each carry (of `lens` elements, stored one after the other in the
    /// float64 array at `at`): one variable per element holding its value, or, for a carry too
    /// large for registers, its storage in that array.
    fn carries(&mut self, at: Value, lens: &[usize]) -> Vec<Carry> {
        let mut first = 0;
        lens.iter()
            .map(|&len| {
                let carry = if len <= REGISTER_ELEMENTS {
                    let values: Vec<Value> = (first..first + len)
                        .map(|i| self.b.ins().load(types::F64, Self::flags(), at, offset(i)))
                        .collect();
                    self.variables(&[values]).remove(0)
                } else {
                    let start = self.b.ins().iadd_imm_s(at, (first * 8) as i64);
                    Carry::Stored(self.carry_storage(Mem {
                        at: start,
                        len,
                        home: Home::Given,
                    }))
                };
                first += len;
                carry
            })
            .collect()
    }

    /// The current values of the carries.
    fn use_carries(&mut self, carries: &[Carry]) -> Vec<Val> {
        carries
            .iter()
            .map(|c| match c {
                Carry::Vars(vars) => Val::Regs(vars.iter().map(|&v| self.b.use_var(v)).collect()),
                Carry::Stored(m) => Val::Mem(*m),
            })
            .collect()
    }

    /// Sets the carries to the first outputs of a body run (`None` when an output does not
    /// have its carry's length). Every output is read before any carry is written: an output
    /// may be another carry's storage (carries that swap places).
    fn set_carries(&mut self, carries: &[Carry], outs: &[Val]) -> Option<()> {
        let mut ready: Vec<Val> = Vec::with_capacity(carries.len());
        for (c, v) in carries.iter().zip(outs) {
            ready.push(match (c, v) {
                (Carry::Vars(vars), v) => {
                    if vars.len() != v.len() {
                        return None;
                    }
                    Val::Regs(self.registers(v)?)
                }
                (Carry::Stored(own), Val::Mem(m))
                    if matches!(m.home, Home::Carry(_)) && m.home != own.home =>
                {
                    let copy = self.scratch_array(m.len)?;
                    self.copy(*m, copy)?;
                    Val::Mem(copy)
                }
                (Carry::Stored(_), v) => v.clone(),
            });
        }
        for (c, v) in carries.iter().zip(&ready) {
            match (c, v) {
                (Carry::Vars(vars), Val::Regs(values)) => {
                    for (&var, &value) in vars.iter().zip(values) {
                        self.b.def_var(var, value);
                    }
                }
                (Carry::Stored(m), Val::Mem(from)) if from.at == m.at => {}
                (Carry::Stored(m), v) => self.write(v, *m)?,
                (Carry::Vars(_), Val::Mem(_)) => return None,
            }
        }
        Some(())
    }

    /// The elements of values of `lens` elements stored one after the other in the float64
    /// array at `at`, which the caller gave and the code only reads: machine values for small
    /// values, the array itself for large ones.
    fn given_flat(&mut self, at: Value, lens: &[usize]) -> Vec<Val> {
        let mut first = 0;
        lens.iter()
            .map(|&len| {
                let value = if len <= REGISTER_ELEMENTS {
                    Val::Regs(
                        (first..first + len)
                            .map(|j| self.b.ins().load(types::F64, Self::flags(), at, offset(j)))
                            .collect(),
                    )
                } else {
                    Val::Mem(Mem {
                        at: self.b.ins().iadd_imm_s(at, (first * 8) as i64),
                        len,
                        home: Home::Given,
                    })
                };
                first += len;
                value
            })
            .collect()
    }

    /// Slice `k` of `len` elements of an array of `dtype` the caller gave: machine values when
    /// small, else the slice itself (float64) or a float64 copy of it in scratch memory.
    fn given_slice(&mut self, base: Value, k: Value, dtype: DType, len: usize) -> Option<Val> {
        if len <= REGISTER_ELEMENTS {
            return Some(Val::Regs(self.load_slice(base, k, dtype, len)));
        }
        let first = self.element(base, k, dtype, len, 0);
        if dtype == DType::F64 {
            return Some(Val::Mem(Mem {
                at: first,
                len,
                home: Home::Given,
            }));
        }
        let copy = self.scratch_array(len)?;
        self.for_each(len, |e, i| {
            let v = e.load_converted(first, i, dtype)?;
            e.store_indexed(v, copy.at, i);
            Some(())
        })?;
        Some(Val::Mem(copy))
    }

    /// Stores `value` as slice `k` of an array of `dtype`, as `ViewMut::store_f64` stores.
    fn put_slice(&mut self, base: Value, k: Value, dtype: DType, value: &Val) -> Option<()> {
        match value {
            Val::Regs(values) => {
                self.store_slice(base, k, dtype, values);
                Some(())
            }
            Val::Mem(m) => {
                let first = self.element(base, k, dtype, m.len, 0);
                let from = m.at;
                self.for_each(m.len, |e, i| {
                    let v = e.load_indexed(from, i);
                    e.store_converted(v, first, i, dtype)
                })
            }
        }
    }

    /// One run of a loop body on `inputs`: its outputs.
    fn loop_body(&mut self, body: LoopBody<'_>, inputs: &[Val]) -> Option<Vec<Val>> {
        match body {
            LoopBody::Scalar(body) => {
                // An input of several elements is one the scalar form does not read.
                let mut scalars: Vec<Option<Value>> = Vec::with_capacity(inputs.len());
                for v in inputs {
                    scalars.push(if v.len() == 1 {
                        Some(self.element_at(v, 0)?)
                    } else {
                        None
                    });
                }
                Some(
                    self.body(body, &scalars)?
                        .into_iter()
                        .map(|v| Val::Regs(vec![v]))
                        .collect(),
                )
            }
            LoopBody::Graph(body) => self.graph_body(body, inputs),
        }
    }

    /// One run of a graph body: each node as `quabla_ir::eval::evaluate` computes it, element
    /// by element (a loop over the elements of a value held in memory).
    fn graph_body(&mut self, body: &GraphBody, inputs: &[Val]) -> Option<Vec<Val>> {
        let graph = &body.graph;
        let mut values: Vec<Val> = Vec::with_capacity(graph.len());
        let mut next_input = 0;
        // The outputs of each region call, by region and operands (its sibling nodes share
        // one run).
        let mut calls: HashMap<(usize, Vec<usize>), Vec<Val>> = HashMap::new();
        // Uses of each node by other nodes and the outputs: an elementwise result in memory
        // used once by an elementwise node of its shape is computed inside that node's loop
        // (`Fused`), never stored.
        let mut uses = vec![0usize; graph.len()];
        for node in graph.nodes() {
            for o in &node.operands {
                uses[o.index()] += 1;
            }
        }
        for o in graph.outputs() {
            uses[o.index()] += 2;
        }
        let mut pending: HashMap<usize, Fused> = HashMap::new();
        for (index, node) in graph.nodes().iter().enumerate() {
            let fusing = self.fusable(graph, node);
            for (k, o) in node.operands.iter().enumerate() {
                let same_shape = graph.node(*o).ty.shape == node.ty.shape;
                if pending.contains_key(&o.index()) && !(fusing && same_shape && k < 3) {
                    let fused = pending.remove(&o.index())?;
                    *values.get_mut(o.index())? = self.materialize(&fused)?;
                }
            }
            if fusing {
                let fused = self.fuse(graph, node, &values, &mut pending)?;
                if uses[index] == 1 {
                    pending.insert(index, fused);
                    values.push(Val::Regs(Vec::new()));
                } else {
                    let value = self.materialize(&fused)?;
                    values.push(value);
                }
                continue;
            }
            if let Op::Region(call) = &node.op {
                let key = (
                    Arc::as_ptr(&call.region) as usize,
                    node.operands.iter().map(|o| o.index()).collect::<Vec<_>>(),
                );
                if !calls.contains_key(&key) {
                    let nested = body.nested.get(&key.0)?.clone();
                    let operands: Vec<Val> = key
                        .1
                        .iter()
                        .map(|&o| values.get(o).cloned())
                        .collect::<Option<_>>()?;
                    let outs = self.nested(&nested, &operands)?;
                    calls.insert(key.clone(), outs);
                }
                let result = calls.get(&key)?.get(call.output)?.clone();
                if result.len() != node.ty.shape.size() {
                    return None;
                }
                values.push(result);
                continue;
            }
            let out = &node.ty;
            let n = out.shape.size();
            let shapes: Vec<&Shape> = node
                .operands
                .iter()
                .map(|o| &graph.node(*o).ty.shape)
                .collect();
            let operands: Vec<&Val> = node
                .operands
                .iter()
                .map(|o| values.get(o.index()))
                .collect::<Option<_>>()?;
            let in_memory =
                n > REGISTER_ELEMENTS || operands.iter().any(|v| matches!(v, Val::Mem(_)));
            let result: Val = match &node.op {
                Op::Input { .. } => {
                    let given = inputs.get(next_input)?.clone();
                    next_input += 1;
                    given
                }
                Op::Constant { data, .. } => {
                    if data.len() != n {
                        return None;
                    }
                    if n <= REGISTER_ELEMENTS {
                        Val::Regs(
                            (0..n)
                                .map(|i| self.b.ins().f64const(data.get_f64(i)))
                                .collect(),
                        )
                    } else {
                        let values: Vec<f64> = (0..n).map(|i| data.get_f64(i)).collect();
                        self.constant_array(values)?
                    }
                }
                Op::Solve { transpose_a } => {
                    let geometry = solve_geometry(graph, node)?;
                    let (a, b) = (operands.first()?, operands.get(1)?);
                    self.solve(a, b, geometry, *transpose_a, out.dtype)?
                }
                Op::Matmul => {
                    let dims = |k: usize| shapes.get(k).map(|s| s.dims());
                    let product = self.matmul(
                        (operands.first()?, operands.get(1)?),
                        (dims(0)?, dims(1)?),
                        out.shape.dims(),
                    )?;
                    self.held(product)?
                }
                Op::Reduce { kind, axes } if in_memory => {
                    let x = operands.first()?;
                    let reduced =
                        self.reduce_in_memory(kind.reducer(), x, (shapes.first()?, axes), out)?;
                    self.held(reduced)?
                }
                Op::Reduce { kind, axes } => {
                    let x = self.registers(operands.first()?)?;
                    let groups = reduced_groups(shapes.first()?, axes, n)?;
                    let mut result = Vec::with_capacity(n);
                    for group in groups {
                        let elements: Vec<Value> = group
                            .iter()
                            .map(|&i| x.get(i).copied())
                            .collect::<Option<_>>()?;
                        let v = match kind.reducer() {
                            Reducer::Sum => self.blocked_sum(&elements)?,
                            Reducer::Mean => {
                                let sum = self.blocked_sum(&elements)?;
                                let count = self.b.ins().f64const(elements.len() as f64);
                                self.b.ins().fdiv(sum, count)
                            }
                            Reducer::Max => self.fold(f64::NEG_INFINITY, MAXIMUM, &elements)?,
                            Reducer::Min => self.fold(f64::INFINITY, MINIMUM, &elements)?,
                        };
                        result.push(self.round(out.dtype, v));
                    }
                    Val::Regs(result)
                }
                op => match EwOp::from_op(op) {
                    Some(ew) if n > REGISTER_ELEMENTS => {
                        self.elementwise_in_memory(ew, &operands, &shapes, out)?
                    }
                    Some(ew) => {
                        // Each operand's element that each result element reads.
                        let reads: Vec<Vec<usize>> = shapes
                            .iter()
                            .map(|shape| {
                                let numbers =
                                    HostData::F64((0..shape.size()).map(|i| i as f64).collect());
                                broadcast_values(
                                    HostValue {
                                        data: &numbers,
                                        shape,
                                    },
                                    &out.shape,
                                )
                                .into_iter()
                                .map(|v| v as usize)
                                .collect()
                            })
                            .collect();
                        let mut result = Vec::with_capacity(n);
                        for i in 0..n {
                            let mut args = [None; 3];
                            for (k, read) in reads.iter().enumerate().take(3) {
                                args[k] = Some(self.element_at(operands.get(k)?, *read.get(i)?)?);
                            }
                            let v = self.op(ew, args)?;
                            result.push(self.round(out.dtype, v));
                        }
                        Val::Regs(result)
                    }
                    None if in_memory => self.layout_in_memory(op, &operands, &shapes, out)?,
                    None => {
                        let sources = element_sources(op, &shapes, &out.shape)?;
                        let mut result = Vec::with_capacity(n);
                        for source in sources {
                            result.push(match source {
                                Some((k, i)) => self.element_at(operands.get(k)?, i)?,
                                None => self.b.ins().f64const(0.0),
                            });
                        }
                        Val::Regs(result)
                    }
                },
            };
            if result.len() != n {
                return None;
            }
            values.push(result);
        }
        graph
            .outputs()
            .iter()
            .map(|o| values.get(o.index()).cloned())
            .collect()
    }

    /// One run of a region nested in a graph body on `operands`: its outputs, as the CPU's
    /// region steps compute them. Carries are machine values ([`Nested::new`]); a scan's
    /// scanned operands and stacked outputs are arrays in memory.
    fn nested(&mut self, nested: &Nested, operands: &[Val]) -> Option<Vec<Val>> {
        match nested {
            Nested::Cond {
                then_branch,
                else_branch,
                outputs,
            } => {
                let pred = self.element_at(operands.first()?, 0)?;
                let mut vars: Vec<Carry> = Vec::with_capacity(outputs.len());
                for &n in outputs {
                    vars.push(if n <= REGISTER_ELEMENTS {
                        Carry::Vars((0..n).map(|_| self.b.declare_var(types::F64)).collect())
                    } else {
                        let m = self.scratch_array(n)?;
                        Carry::Stored(self.carry_storage(m))
                    });
                }
                let (then_block, else_block, merge) = (
                    self.b.create_block(),
                    self.b.create_block(),
                    self.b.create_block(),
                );
                let zero = self.b.ins().f64const(0.0);
                let holds = self.b.ins().fcmp(FloatCC::NotEqual, pred, zero);
                self.b.ins().brif(holds, then_block, &[], else_block, &[]);
                for (block, branch) in [(then_block, then_branch), (else_block, else_branch)] {
                    self.b.switch_to_block(block);
                    let outs = self.graph_body(branch, &operands[1..])?;
                    if outs.len() != vars.len() {
                        return None;
                    }
                    self.set_carries(&vars, &outs)?;
                    self.b.ins().jump(merge, &[]);
                }
                self.b.switch_to_block(merge);
                Some(self.use_carries(&vars))
            }
            Nested::Scan {
                body,
                length,
                start,
                reverse,
                n_carry,
                n_const,
                index,
                ys,
            } => {
                let (nc, nk) = (*n_carry, *n_const);
                let vars = self.loop_carries(operands.get(..nc)?)?;
                // Scanned operands and stacked outputs are arrays in memory, indexed by the
                // iteration.
                let mut xs: Vec<(Value, usize)> = Vec::new();
                for x in operands.get(nc + nk..)? {
                    let m = self.in_memory(x)?;
                    xs.push((m.at, m.len / (*length).max(1)));
                }
                let mut stacked: Vec<(Mem, usize)> = Vec::new();
                for &len in ys {
                    stacked.push((self.scratch_array(len * length)?, len));
                }
                let bound = self.b.ins().iconst(types::I64, *length as i64);
                let (trip, header, exit) = self.counted_loop(bound);
                let i = self.b.use_var(trip);
                let k = if *reverse {
                    let last = self.b.ins().iconst(types::I64, *length as i64 - 1);
                    self.b.ins().isub(last, i)
                } else {
                    i
                };
                let at = self.b.ins().iadd_imm_s(k, *start as i64);
                let at = self.b.ins().fcvt_from_sint(types::F64, at);
                let mut inputs = vec![Val::Regs(vec![self.round(*index, at)])];
                inputs.extend(self.use_carries(&vars));
                inputs.extend(operands.get(nc..nc + nk)?.iter().cloned());
                for &(base, len) in &xs {
                    inputs.push(self.given_slice(base, k, DType::F64, len)?);
                }
                let outs = self.graph_body(body, &inputs)?;
                for (&(m, len), out) in stacked.iter().zip(outs.get(nc..)?) {
                    if out.len() != len {
                        return None;
                    }
                    self.put_slice(m.at, k, DType::F64, out)?;
                }
                self.set_carries(&vars, &outs)?;
                self.next_trip(trip, header);

                self.b.switch_to_block(exit);
                let mut results = self.use_carries(&vars);
                for &(m, _) in &stacked {
                    results.push(self.held(Val::Mem(m))?);
                }
                Some(results)
            }
            Nested::While {
                cond,
                body,
                n_carry,
                max_trips,
            } => {
                let vars = self.loop_carries(operands.get(..*n_carry)?)?;
                let consts = operands.get(*n_carry..)?;
                // As the interpreter: stop at the bound before testing the predicate.
                let bound = self.b.ins().iconst(types::I64, *max_trips as i64);
                let (trips, header, exit) = self.counted_loop(bound);
                let run = self.b.create_block();
                let mut inputs = self.use_carries(&vars);
                inputs.extend(consts.iter().cloned());
                let predicate = self.graph_body(cond, &inputs)?;
                let p = self.element_at(predicate.first()?, 0)?;
                let zero = self.b.ins().f64const(0.0);
                let holds = self.b.ins().fcmp(FloatCC::NotEqual, p, zero);
                self.b.ins().brif(holds, run, &[], exit, &[]);

                self.b.switch_to_block(run);
                let mut inputs = self.use_carries(&vars);
                inputs.extend(consts.iter().cloned());
                let outs = self.graph_body(body, &inputs)?;
                self.set_carries(&vars, &outs)?;
                self.next_trip(trips, header);

                self.b.switch_to_block(exit);
                Some(self.use_carries(&vars))
            }
        }
    }

    /// `solve` of the systems `a x = b` (`aᵀ x = b` when `transpose`) of the given geometry
    /// (batch, unknowns, right-hand sides) by the CPU kernel's own function (through
    /// [`SOLVE`]), on arrays in memory, rounded to `dtype`; a singular matrix leaves the code
    /// through the failure exit.
    fn solve(
        &mut self,
        a: &Val,
        b: &Val,
        (batch, n, k): (usize, usize, usize),
        transpose: bool,
        dtype: DType,
    ) -> Option<Val> {
        if a.len() != batch * n * n || b.len() != batch * n * k {
            return None;
        }
        let (a, b) = (self.in_memory(a)?, self.in_memory(b)?);
        let x = self.scratch_array(b.len)?;
        let mut args = vec![a.at, b.at, x.at];
        for v in [batch, n, k, transpose as usize] {
            args.push(self.b.ins().iconst(types::I64, v as i64));
        }
        let status = self.call_returning(SOLVE, &args, types::I32)?;
        self.exit_on_failure(status);
        if dtype != DType::F64 {
            let from = x.at;
            self.for_each(x.len, |e, i| {
                let v = e.load_indexed(from, i);
                let v = e.round(dtype, v);
                e.store_indexed(v, from, i);
                Some(())
            })?;
        }
        self.held(Val::Mem(x))
    }

    /// Leaves the code through the failure exit when `status` is not zero.
    fn exit_on_failure(&mut self, status: Value) {
        let next = self.b.create_block();
        let failed = *self.failed.get_or_insert_with(|| self.b.create_block());
        self.b.ins().brif(status, failed, &[], next, &[]);
        self.b.switch_to_block(next);
    }

    /// A value made in memory, as machine values when it is small enough.
    fn held(&mut self, v: Val) -> Option<Val> {
        match &v {
            Val::Mem(m) if m.len <= REGISTER_ELEMENTS => Some(Val::Regs(self.registers(&v)?)),
            _ => Some(v),
        }
    }

    /// The carries of a loop nested in a body, holding `initial`: variables for small values,
    /// arrays in scratch memory for large ones.
    fn loop_carries(&mut self, initial: &[Val]) -> Option<Vec<Carry>> {
        let mut carries = Vec::with_capacity(initial.len());
        for v in initial {
            carries.push(if v.len() <= REGISTER_ELEMENTS {
                let values = self.registers(v)?;
                self.variables(&[values]).remove(0)
            } else {
                let m = self.scratch_array(v.len())?;
                self.write(v, m)?;
                Carry::Stored(self.carry_storage(m))
            });
        }
        Some(carries)
    }

    /// `m` as the storage of a carry, with an identity of its own.
    fn carry_storage(&mut self, m: Mem) -> Mem {
        self.carry_ids += 1;
        Mem {
            home: Home::Carry(self.carry_ids),
            ..m
        }
    }

    /// One variable per element of each of `values`, holding it.
    fn variables(&mut self, values: &[Vec<Value>]) -> Vec<Carry> {
        values
            .iter()
            .map(|c| {
                Carry::Vars(
                    c.iter()
                        .map(|&v| {
                            let var = self.b.declare_var(types::F64);
                            self.b.def_var(var, v);
                            var
                        })
                        .collect(),
                )
            })
            .collect()
    }

    /// Starts a counted loop: a trip counter from 0 and a header block that goes on to a
    /// fresh block, where the builder is left, while the counter is below `bound`, and to the
    /// returned exit block after. Returns the counter, the header and the exit.
    fn counted_loop(&mut self, bound: Value) -> (Variable, Block, Block) {
        let trips = self.b.declare_var(types::I64);
        let zero = self.b.ins().iconst(types::I64, 0);
        self.b.def_var(trips, zero);
        let (header, run, exit) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(header);
        let t = self.b.use_var(trips);
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, t, bound);
        self.b.ins().brif(more, run, &[], exit, &[]);
        self.b.switch_to_block(run);
        (trips, header, exit)
    }

    /// Ends an iteration of a counted loop: one more trip, back to its header.
    fn next_trip(&mut self, trips: Variable, header: Block) {
        let t = self.b.use_var(trips);
        let next = self.b.ins().iadd_imm_s(t, 1);
        self.b.def_var(trips, next);
        self.b.ins().jump(header, &[]);
    }

    /// The address of a fresh float64 array of `len` elements in the function's stack frame.
    fn stack_array(&mut self, len: usize) -> Value {
        let bytes = u32::try_from(len.max(1) * 8).unwrap_or(u32::MAX);
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            bytes,
            3,
        ));
        self.b.ins().stack_addr(types::I64, slot, 0)
    }

    /// The sum of `elements` in the blocked order of numerics.md §1.5 (one block: eight
    /// accumulators from `+0.0`, element `k` into accumulator `k % 8`, then
    /// `((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))`), as `quabla_ir::eval::blocked_sum`.
    fn blocked_sum(&mut self, elements: &[Value]) -> Option<Value> {
        if elements.len() > SUM_BLOCK {
            return None;
        }
        let zero = self.b.ins().f64const(0.0);
        let mut acc = [zero; SUM_LANES];
        for (k, &v) in elements.iter().enumerate() {
            acc[k % SUM_LANES] = self.b.ins().fadd(acc[k % SUM_LANES], v);
        }
        let mut add = |a: Value, b: Value| self.b.ins().fadd(a, b);
        let (s01, s23) = (add(acc[0], acc[1]), add(acc[2], acc[3]));
        let (s45, s67) = (add(acc[4], acc[5]), add(acc[6], acc[7]));
        let (low, high) = (add(s01, s23), add(s45, s67));
        Some(add(low, high))
    }

    /// `f(...f(f(start, e0), e1)..., en)` with the symbol `f`.
    fn fold(&mut self, start: f64, f: &'static str, elements: &[Value]) -> Option<Value> {
        let mut acc = self.b.ins().f64const(start);
        for &v in elements {
            acc = self.call(f, &[acc, v])?;
        }
        Some(acc)
    }

    /// Stores the carries kept in variables into their places in the float64 array at `at`
    /// (the others are there already).
    fn store_carries(&mut self, at: Value, carries: &[Carry]) {
        let mut first = 0;
        for c in carries {
            match c {
                Carry::Vars(vars) => {
                    for (j, &var) in vars.iter().enumerate() {
                        let v = self.b.use_var(var);
                        self.b.ins().store(Self::flags(), v, at, offset(first + j));
                    }
                    first += vars.len();
                }
                Carry::Stored(m) => first += m.len,
            }
        }
    }

    /// One run of `body` on `inputs` (one per body input; `None` where it is not given): the
    /// value of each body output, or `None` when the body reads a value it has no source for
    /// or runs an instruction this module does not translate.
    fn body(&mut self, body: &ScalarBody, inputs: &[Option<Value>]) -> Option<Vec<Value>> {
        let mut slots: Vec<Option<Value>> = vec![None; body.nslots()];
        for &(s, v) in body.constants() {
            *slots.get_mut(s)? = Some(self.b.ins().f64const(v));
        }
        for (j, slot) in body.inputs.iter().enumerate() {
            if let Some(s) = *slot {
                *slots.get_mut(s)? = Some((*inputs.get(j)?)?);
            }
        }
        for program in body.steps() {
            self.program(program, &mut slots)?;
        }
        body.outputs
            .iter()
            .map(|&(s, _)| slots.get(s).copied().flatten())
            .collect()
    }

    /// The instructions of a one-element program whose externals are slot positions (see
    /// `Program::with_externals_at`), as `Program::run_one` runs them, and its outputs
    /// stored rounded to their dtypes as `ScalarBody::run` stores them.
    fn program(&mut self, program: &Program, slots: &mut [Option<Value>]) -> Option<()> {
        let mut regs: Vec<Option<Value>> = vec![None; program.nregs];
        let mut results: Vec<Option<Value>> = vec![None; program.outs.len()];
        let read = |regs: &[Option<Value>], slots: &[Option<Value>], s: Src| match s {
            Src::Reg(r) => regs.get(r).copied().flatten(),
            Src::Direct(e) | Src::Scalar(e) => slots.get(e).copied().flatten(),
        };
        for instr in &program.instrs {
            match *instr {
                Instr::Load { ext, dst } => {
                    *regs.get_mut(dst)? = Some(slots.get(ext).copied().flatten()?);
                }
                Instr::Compute {
                    op,
                    dst,
                    args,
                    round_f32,
                } => {
                    let mut operands = [None; 3];
                    for (k, a) in args.iter().enumerate().take(op.arity()) {
                        operands[k] = Some(read(&regs, slots, *a)?);
                    }
                    let v = self.op(op, operands)?;
                    let v = if round_f32 {
                        self.round(DType::F32, v)
                    } else {
                        v
                    };
                    *regs.get_mut(dst)? = Some(v);
                }
                Instr::SinCos {
                    arg,
                    sin,
                    cos,
                    round_f32,
                } => {
                    let x = read(&regs, slots, arg)?;
                    for (op, dst) in [(UnaryOp::Sin, sin), (UnaryOp::Cos, cos)] {
                        let v = self.call(unary_symbol(op), &[x])?;
                        let v = if round_f32 {
                            self.round(DType::F32, v)
                        } else {
                            v
                        };
                        *regs.get_mut(dst)? = Some(v);
                    }
                }
                Instr::Store { src, out, .. } => {
                    *results.get_mut(out)? = Some(regs.get(src).copied().flatten()?);
                }
            }
        }
        for (&(s, dtype), v) in program.outs.iter().zip(results) {
            let v = self.round(dtype, v?);
            *slots.get_mut(s)? = Some(v);
        }
        Some(())
    }

    /// One elementwise op on float64 operands, as `Program::run_one` computes it.
    fn op(&mut self, op: EwOp, a: [Option<Value>; 3]) -> Option<Value> {
        let x = a[0]?;
        Some(match op {
            EwOp::Unary(UnaryOp::Neg) => self.b.ins().fneg(x),
            EwOp::Unary(UnaryOp::Sqrt) => self.b.ins().sqrt(x),
            EwOp::Unary(UnaryOp::Floor) => self.b.ins().floor(x),
            EwOp::Unary(UnaryOp::Ceil) => self.b.ins().ceil(x),
            // Ties to even, as `f64::round_ties_even`.
            EwOp::Unary(UnaryOp::Round) => self.b.ins().nearest(x),
            EwOp::Unary(u) => self.call(unary_symbol(u), &[x])?,
            EwOp::Powi(n) => {
                let n = self.b.ins().iconst(types::I32, i64::from(n));
                self.call(POWI, &[x, n])?
            }
            EwOp::Binary(op) => {
                let y = a[1]?;
                match op {
                    BinaryOp::Add => self.b.ins().fadd(x, y),
                    BinaryOp::Sub => self.b.ins().fsub(x, y),
                    BinaryOp::Mul => self.b.ins().fmul(x, y),
                    BinaryOp::Div => self.b.ins().fdiv(x, y),
                    BinaryOp::Pow | BinaryOp::Atan2 | BinaryOp::Fmod => {
                        self.call(binary_symbol(op)?, &[x, y])?
                    }
                    // Integer functions: graphs holding them are not translated.
                    _ => return None,
                }
            }
            EwOp::Compare(c) => {
                let y = a[1]?;
                let cc = match c {
                    Comparison::Greater => FloatCC::GreaterThan,
                    Comparison::GreaterEqual => FloatCC::GreaterThanOrEqual,
                    Comparison::Less => FloatCC::LessThan,
                    Comparison::LessEqual => FloatCC::LessThanOrEqual,
                    Comparison::Equal => FloatCC::Equal,
                    // C's `!=`: true when either operand is NaN.
                    Comparison::NotEqual => FloatCC::NotEqual,
                };
                let holds = self.b.ins().fcmp(cc, x, y);
                self.select_one_zero(holds)
            }
            EwOp::Where => {
                let (t, f) = (a[1]?, a[2]?);
                let zero = self.b.ins().f64const(0.0);
                let holds = self.b.ins().fcmp(FloatCC::NotEqual, x, zero);
                self.b.ins().select(holds, t, f)
            }
            EwOp::Cast(to) => self.round(to, x),
            EwOp::Copy => x,
        })
    }

    /// 1.0 where `holds`, else 0.0.
    fn select_one_zero(&mut self, holds: Value) -> Value {
        let one = self.b.ins().f64const(1.0);
        let zero = self.b.ins().f64const(0.0);
        self.b.ins().select(holds, one, zero)
    }

    /// `dtype.round(v)`: float32 through float32, bool as 0 or 1.
    fn round(&mut self, dtype: DType, v: Value) -> Value {
        match dtype {
            DType::F64 => v,
            DType::F32 => {
                let narrow = self.b.ins().fdemote(types::F32, v);
                self.b.ins().fpromote(types::F64, narrow)
            }
            DType::Bool => {
                let zero = self.b.ins().f64const(0.0);
                let holds = self.b.ins().fcmp(FloatCC::NotEqual, v, zero);
                self.select_one_zero(holds)
            }
            // Never reached: graphs with integer values are not translated (module docs).
            DType::I32 | DType::I64 => v,
        }
    }

    /// Calls the symbol `name` (float64 operands, except `powi`'s int32 exponent).
    fn call(&mut self, name: &'static str, args: &[Value]) -> Option<Value> {
        self.call_returning(name, args, types::F64)
    }

    /// Calls the symbol `name`, which returns a `ret`.
    fn call_returning(&mut self, name: &'static str, args: &[Value], ret: Type) -> Option<Value> {
        let call = self.call_inst(name, args, Some(ret))?;
        self.b.inst_results(call).first().copied()
    }

    /// Calls the symbol `name`, which returns nothing.
    fn call_void(&mut self, name: &'static str, args: &[Value]) -> Option<()> {
        self.call_inst(name, args, None).map(|_| ())
    }

    /// The call instruction of the symbol `name`, declared on first use with the types of
    /// `args` and the return type `ret`.
    fn call_inst(
        &mut self,
        name: &'static str,
        args: &[Value],
        ret: Option<Type>,
    ) -> Option<cranelift_codegen::ir::Inst> {
        let callee = match self.imports.get(name) {
            Some(&f) => f,
            None => {
                let mut sig = Signature::new(self.module.isa().default_call_conv());
                for &a in args {
                    sig.params
                        .push(AbiParam::new(self.b.func.dfg.value_type(a)));
                }
                sig.returns.extend(ret.map(AbiParam::new));
                let id = self
                    .module
                    .declare_function(name, Linkage::Import, &sig)
                    .ok()?;
                let f = self.module.declare_func_in_func(id, self.b.func);
                self.imports.insert(name, f);
                f
            }
        };
        Some(self.b.ins().call(callee, args))
    }
}

/// The byte offset of element `j` of a float64 array.
fn offset(j: usize) -> i32 {
    i32::try_from(j * 8).unwrap_or(i32::MAX)
}

/// The batch, unknowns and right-hand sides of a `solve` node whose matrix is `[..., n, n]` and
/// right-hand side `[..., n, k]` with the same batch extents (what the code generator takes).
fn solve_geometry(graph: &Graph, node: &quabla_ir::Node) -> Option<(usize, usize, usize)> {
    let a = graph.node(*node.operands.first()?).ty.shape.dims();
    let b = graph.node(*node.operands.get(1)?).ty.shape.dims();
    let (ra, rb) = (a.len(), b.len());
    if ra < 2
        || ra != rb
        || a[..ra - 2] != b[..rb - 2]
        || a[ra - 1] != a[ra - 2]
        || b[rb - 2] != a[ra - 1]
    {
        return None;
    }
    Some((a[..ra - 2].iter().product(), a[ra - 1], b[rb - 1]))
}
