//! Machine code for loops and plans. A `fori_loop`/`scan` or a `while_loop` whose bodies
//! have a scalar form (`scalar.rs`) or translate node by node ([`GraphBody`]: values of at
//! most [`NATIVE_ELEMENTS`] elements) is compiled with Cranelift into one native function that
//! runs a chunk of iterations: small values (at most 64 elements) in machine registers, larger
//! ones as arrays of 8-byte words in the run's scratch memory with loops over their elements
//! (`memory.rs`), scanned slices read and stacked slices written in place: no value array, no
//! per-op dispatch, no per-iteration call. Whether a body's code beats the interpreter is
//! weighed when it is first needed ([`GraphBody::pays_off`], a cost model measured with the
//! loop-state sweep, against the interpreter's steps counted with those of the regions
//! nested in the body, `region/cost.rs`), and once more when the code is built, if it grew
//! too long for the backtracking register allocator around nested loops that would run as
//! shorter code of their own ([`OwnCode`]); the report says why a loop stays interpreted.
//! A whole plan over small and medium values ([`NativePlan`]: a model's loss and gradient, a
//! Newton step's algebra) becomes one function from its inputs to its outputs, which the
//! executable switches to once the plan is hot (`lib.rs`, `NATIVE_AFTER_RUNS`). The functions
//! the code calls by symbol are in `symbols.rs`.
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
//! Each value has one machine type ([`word`]): floats and bools are float64 machine values
//! (a bool 0.0 or 1.0), integers int64 ones (an int32 sign-extended, wrapped back after every
//! operation), so that an int64 beyond 2^53 stays exact. Integer nodes compute as
//! `quabla_ir::eval` does (`integers.rs`: wrapping arithmetic, floor division and remainder
//! with NumPy's signs, shifts, powers, comparisons, conversions both ways), and
//! `index_gather`/`index_scatter` with traced indices run the element loops of
//! `quabla_ir::indexed` (`indexed.rs`). Carries, loop constants and values in memory are
//! 8-byte words of those types ([`words`]). `tests/native_integers.rs` and
//! `tests/native_indexed.rs` run every integer function, conversion and indexed op both ways
//! in both forms and compare bits.
//!
//! This module decides nothing about values and never fails a compile: a body it cannot
//! translate, or a host Cranelift does not support, gets no native form and the interpreter
//! runs the loop (`CpuExecutable::report` shows which). A kernel that fails inside the code
//! (a singular `solve`) leaves it through a failure exit, and the caller reruns the loop in the
//! interpreter, which raises the kernel's error. Cancellation stays with the caller, which runs
//! the code in chunks of iterations and checks its flags between them; loops nested in a body
//! are bounded (`NESTED_TRIPS`) so that a chunk ends soon.

mod body;
mod code;
mod emit;
mod indexed;
mod integers;
mod memory;
mod ops;
mod runners;
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

pub use body::NATIVE_ELEMENTS;
use body::{element_sources, reduced_groups, solve_geometry, Nested};
pub(crate) use body::{GraphBody, Interpreted, OwnCode};
use code::Code;
use integers::int_cc;
use ops::Elementwise;
use runners::FAILED;
pub(crate) use runners::{NativePlan, NativeScan, NativeWhile, ScanShape};

/// A loop body to translate: the scalar form of its schedule, or its graph when every value
/// is small.
#[derive(Clone, Copy, Debug)]
pub(crate) enum LoopBody<'a> {
    Scalar(&'a ScalarBody),
    Graph(&'a GraphBody),
}

impl LoopBody<'_> {
    /// The machine type of each of the body's first `count` inputs, in order ([`word`]; a
    /// scalar body holds floats only).
    fn input_words(&self, count: usize) -> Vec<Type> {
        match self {
            LoopBody::Scalar(_) => vec![types::F64; count],
            LoopBody::Graph(body) => body
                .graph
                .inputs()
                .map(|(_, _, ty)| word(ty.dtype))
                .chain(std::iter::repeat(types::F64))
                .take(count)
                .collect(),
        }
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
    /// The 8-byte words of scratch memory handed out so far.
    scratch_len: usize,
    /// The tables the code reads, kept alive with it.
    tables: Tables,
    /// The last identity given to a carry's storage ([`Home::Carry`]).
    carry_ids: usize,
    /// The loops nested in the function's bodies that the interpreter would run as code of
    /// their own ([`OwnCode`]), the margin by which the bodies' code paid off, and the element
    /// passes of those of the loops whose own code would stay under
    /// `BACKTRACKING_INSTRUCTIONS` (what `Code::build` weighs when the function does not).
    own_code: OwnCode,
    margin: usize,
    short_own_code: usize,
}

/// The byte offset of element `j` of an array of 8-byte words.
fn offset(j: usize) -> i32 {
    i32::try_from(j * 8).unwrap_or(i32::MAX)
}

/// The machine type that holds a value of `dtype` in the code: an integer as an int64 (an
/// int32 sign-extended), every other dtype as a float64 (a bool as 0.0 or 1.0). Arrays in
/// memory hold these as 8-byte words.
fn word(dtype: DType) -> Type {
    if dtype.is_integer() {
        types::I64
    } else {
        types::F64
    }
}

/// The dtype whose arrays hold the code's words of type `ty` as they are.
fn word_dtype(ty: Type) -> DType {
    if ty == types::I64 {
        DType::I64
    } else {
        DType::F64
    }
}

/// The elements of `views` one after the other as the 8-byte words the code's carries and loop
/// constants are passed in: a float or a bool as the bits of its float64 value, an integer as
/// those of its int64 value. Words, not floats, so that no integer passes through a float64.
pub(crate) fn words(views: &[View<'_>]) -> Vec<u64> {
    views
        .iter()
        .flat_map(|v| {
            (0..v.len()).map(move |i| match v {
                View::I32(x) => i64::from(x[i]) as u64,
                View::I64(x) => x[i] as u64,
                _ => v.get_f64(i).to_bits(),
            })
        })
        .collect()
}

/// Stores `words` (laid out as [`words`] lays them) into `out`, from its element `start`: an
/// int32 wraps the int64 it is given, as the code keeps it sign-extended.
pub(crate) fn store_words(out: &mut ViewMut<'_>, start: usize, words: &[u64]) {
    match out {
        ViewMut::I32(x) => {
            for (d, &w) in x[start..].iter_mut().zip(words) {
                *d = w as i64 as i32;
            }
        }
        ViewMut::I64(x) => {
            for (d, &w) in x[start..].iter_mut().zip(words) {
                *d = w as i64;
            }
        }
        _ => {
            let floats: Vec<f64> = words.iter().map(|&w| f64::from_bits(w)).collect();
            out.store_f64(start, &floats);
        }
    }
}
