//! The lowered form of a plan: what the code generator produces and the runtime executes.
//!
//! A [`Program`] is plain data, made without a GPU: the CUDA C source of every kernel (one
//! NVRTC program per plan), the buffers the plan's values live in, and the steps that compute
//! them — kernel launches, cuBLAS and cuSOLVER calls, control-flow regions driven by the host,
//! prints, the singular-matrix check, and the release of buffers after their last use. The
//! runtime (`runtime/`) executes it on a device; the test suite executes it on the host with
//! the kernels compiled by a host C++ compiler (`tests/emulated.rs`), which is how the lowering
//! is checked against the CPU reference on machines without a GPU.
//!
//! Conventions every producer and consumer of a program relies on:
//!
//! - **One floating type per program** ([`Program::compute`]): float32 by default, float64 under
//!   `precision="float64"` (numerics.md §1.6). Floating and bool values computed inside the
//!   program are stored in it; booleans are stored as 0/1 of a floating type.
//! - **Integers are exact everywhere**: int32 values are `int` and int64 values `long long`, in
//!   memory and in registers, whatever the program's floating type ([`value_elem`]); an
//!   integer never passes through a floating type except where the plan converts it.
//! - **Storage at the boundary** follows the dtype ([`storage_of`]): float32 and bool tensors are
//!   stored as `float`, float64 tensors as `double`, int32 as `int` and int64 as `long long`,
//!   whatever the program's type, so memory handed out by one program can be read by any other
//!   and downloaded without knowing who made it. Plan inputs arrive in that storage and plan
//!   outputs leave in it.
//! - **Buffers are written once per execution** (by the step that produces them) and read-only
//!   afterwards; so a loop body's input may be a view of another buffer, and a buffer may be
//!   shared by several values (a `reshape` is the same buffer).
//! - **cuBLAS and cuSOLVER calls use their own column-major conventions**: the lowering states
//!   each call in the library's terms (leading dimensions, transposition flags, row-major data
//!   read as the transposed column-major matrix), so an executor passes the fields through.
//!
//! This module owns these types and nothing else: no lowering decisions, no device calls.

use quabla_ir::{DType, Shape};
use std::fmt;

/// An element type of device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Elem {
    F32,
    F64,
    /// int32 values, index tables, and the pivots and status codes of cuSOLVER.
    I32,
    /// int64 values and the tables of dynamic scatters.
    I64,
}

impl Elem {
    /// The C type name.
    pub fn c_name(self) -> &'static str {
        match self {
            Elem::F32 => "float",
            Elem::F64 => "double",
            Elem::I32 => "int",
            Elem::I64 => "long long",
        }
    }

    /// A short tag for generated names (`f32`, `f64`, `i32`, `i64`).
    pub fn tag(self) -> &'static str {
        match self {
            Elem::F32 => "f32",
            Elem::F64 => "f64",
            Elem::I32 => "i32",
            Elem::I64 => "i64",
        }
    }

    pub fn size(self) -> usize {
        match self {
            Elem::F32 | Elem::I32 => 4,
            Elem::F64 | Elem::I64 => 8,
        }
    }

    /// `int` or `long long`.
    pub fn is_int(self) -> bool {
        matches!(self, Elem::I32 | Elem::I64)
    }
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.tag())
    }
}

/// How a tensor of `dtype` is stored in device memory at a plan's boundary (see the module
/// docs).
pub fn storage_of(dtype: DType) -> Elem {
    match dtype {
        DType::F64 => Elem::F64,
        DType::F32 | DType::Bool => Elem::F32,
        DType::I32 => Elem::I32,
        DType::I64 => Elem::I64,
    }
}

/// How a value of `dtype` computed inside a program of floating type `compute` is stored: in
/// `compute` for floats and bools, in its own integer type for integers (see the module docs).
pub fn value_elem(dtype: DType, compute: Elem) -> Elem {
    match dtype {
        DType::F32 | DType::F64 | DType::Bool => compute,
        DType::I32 => Elem::I32,
        DType::I64 => Elem::I64,
    }
}

/// A buffer's index in [`Program::buffers`].
pub type BufId = usize;

/// What a buffer holds and who fills it.
#[derive(Clone, Debug, PartialEq)]
pub enum Role {
    /// Plan input `k`, bound by the caller (read-only).
    Input(usize),
    /// Data fixed at compile time, uploaded once when the program is loaded.
    Constant(ConstData),
    /// Written by one step of the program.
    Temp,
    /// An input of a region's body, bound by the region's executor each time the body runs
    /// (to a carry buffer, a view of an operand, or the loop index).
    BodyInput,
}

/// The data of a constant buffer, in the buffer's element type.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstData {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

impl ConstData {
    pub fn len(&self) -> usize {
        match self {
            ConstData::F32(v) => v.len(),
            ConstData::F64(v) => v.len(),
            ConstData::I32(v) => v.len(),
            ConstData::I64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn elem(&self) -> Elem {
        match self {
            ConstData::F32(_) => Elem::F32,
            ConstData::F64(_) => Elem::F64,
            ConstData::I32(_) => Elem::I32,
            ConstData::I64(_) => Elem::I64,
        }
    }
}

/// One buffer: its element type, its length in elements, and its role.
#[derive(Clone, Debug, PartialEq)]
pub struct BufferDecl {
    pub elem: Elem,
    pub len: usize,
    pub role: Role,
}

/// A kernel parameter after the implicit first one (`long long n`, the number of work items).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Param {
    /// A buffer read by the kernel.
    In(Elem),
    /// A buffer written by the kernel.
    Out(Elem),
    /// A 64-bit integer (counts, offsets, integer values, and floating values passed as their
    /// bits).
    Int,
}

/// A generated kernel: every kernel is a loop over `n` independent work items (a grid-stride
/// loop on a device, a plain loop on the host), so its result never depends on how the items
/// are spread over threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// `qb_` followed by a hash of the code: equal kernels share one name, so the kernels of
    /// several programs can be compiled together.
    pub name: String,
    pub params: Vec<Param>,
    /// The complete definition (`QB_GLOBAL void name(long long n, ...) { QB_LOOP(n) {...} }`).
    pub code: String,
}

/// An argument of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg {
    Buf(BufId),
    Int(i64),
}

/// A kernel launch over `items` work items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub kernel: usize,
    pub items: u64,
    pub args: Vec<Arg>,
}

/// `cublas<t>gemmStridedBatched`: `C = op(A) op(B)` for `batch` column-major matrices, `C`
/// `m x n`, `op(A)` `m x k`, `op(B)` `k x n`; a stride of 0 reuses one matrix for the batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gemm {
    pub elem: Elem,
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: BufId,
    pub lda: usize,
    pub stride_a: usize,
    pub b: BufId,
    pub ldb: usize,
    pub stride_b: usize,
    pub c: BufId,
    pub ldc: usize,
    pub stride_c: usize,
    pub batch: usize,
}

/// `cublas<t>trsm`, once per batch element: solves `op(A) X = B` (`left`) or `X op(A) = B`
/// for column-major `B` (`m x n`), overwriting `B`; `upper` names the triangle of `A` read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trsm {
    pub elem: Elem,
    pub left: bool,
    pub upper: bool,
    pub trans: bool,
    pub unit: bool,
    pub m: usize,
    pub n: usize,
    pub a: BufId,
    pub lda: usize,
    pub stride_a: usize,
    pub b: BufId,
    pub ldb: usize,
    pub stride_b: usize,
    pub batch: usize,
}

/// A cuSOLVER dense call, once per batch element, on contiguous column-major matrices with
/// leading dimension equal to their row count. `info` holds one status per batch element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Solver {
    /// LU with partial pivoting of `n x n` `a` in place; `ipiv` `n` per element (1-based).
    Getrf {
        n: usize,
        a: BufId,
        ipiv: BufId,
        info: BufId,
    },
    /// Solves `op(A) X = B` with the factors of `getrf`; `b` is `n x nrhs`, overwritten.
    Getrs {
        trans: bool,
        n: usize,
        nrhs: usize,
        a: BufId,
        ipiv: BufId,
        b: BufId,
        info: BufId,
    },
    /// Cholesky of `n x n` `a` in place, reading and writing the triangle `upper` names.
    Potrf {
        upper: bool,
        n: usize,
        a: BufId,
        info: BufId,
    },
    /// Symmetric eigendecomposition of `a` (the triangle `upper` names is read): ascending
    /// eigenvalues into `w` (`n` per element), eigenvectors (columns) over `a`.
    Syevd {
        upper: bool,
        n: usize,
        a: BufId,
        w: BufId,
        info: BufId,
    },
    /// Jacobi SVD `A = U diag(s) V^T` of `m x n` `a` (overwritten): `s` has `min(m, n)`
    /// values per element, descending; `u` is `m x c` and `v` is `n x c` with `c = min(m, n)`
    /// when `econ`, else `u` is `m x m` and `v` is `n x n`.
    Gesvdj {
        econ: bool,
        m: usize,
        n: usize,
        a: BufId,
        s: BufId,
        u: BufId,
        v: BufId,
        info: BufId,
    },
    /// Householder QR of `m x n` `a` in place: `R` in the upper triangle, the reflectors
    /// below it, their scalars in `tau` (`min(m, n)` per element).
    Geqrf {
        m: usize,
        n: usize,
        a: BufId,
        tau: BufId,
        info: BufId,
    },
    /// Forms the first `n` columns of `Q` (`m x n`, `k` reflectors) over `a`, which holds the
    /// reflectors of `geqrf` in its first `k` columns.
    Orgqr {
        m: usize,
        n: usize,
        k: usize,
        a: BufId,
        tau: BufId,
        info: BufId,
    },
}

/// A solver call with its element type and batch count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SolverCall {
    pub elem: Elem,
    pub batch: usize,
    pub call: Solver,
}

/// `debug_print`: the value is read back and printed each time the step runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Print {
    pub buf: BufId,
    pub dtype: DType,
    pub shape: Shape,
    pub format: String,
    pub per_example: bool,
}

/// The steps of a region body, over the program's buffers.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Block {
    /// The body's inputs, in the body graph's order (role [`Role::BodyInput`]).
    pub inputs: Vec<BufId>,
    pub steps: Vec<Step>,
    /// The body's outputs, in order. Those the region moves (a `cond`'s outputs, a loop's
    /// carries) are distinct temps of the block; a stacked output's slice may be any buffer.
    pub outputs: Vec<BufId>,
    /// The temps the body's steps write (released when the region ends).
    pub temps: Vec<BufId>,
}

/// The fewest trips of a loop whose body is replayed as a CUDA graph: two trips run as
/// launches (the first binds the body's buffers; the carries then alternate between two
/// allocations), the next two are recorded, one graph per alternation, and replayed from then
/// on. Recording and instantiating a graph costs about as much as launching its kernels a few
/// times, so shorter loops keep their launches.
pub const GRAPH_MIN_TRIPS: usize = 8;

impl Block {
    /// Whether the block can be recorded once and replayed as a CUDA graph: its steps are
    /// kernel launches, cuBLAS calls and releases only. A readback (a nested region's
    /// predicate, a print, a singular-matrix check) or a cuSOLVER call, whose status the host
    /// reads, keeps the block's launches.
    pub fn replayable(&self) -> bool {
        self.steps.iter().all(|s| {
            matches!(
                s,
                Step::Launch(_) | Step::Gemm(_) | Step::Trsm(_) | Step::Release(_)
            )
        })
    }
}

impl RegionStep {
    /// Whether the loop's body is replayed as a CUDA graph (a `Scan` of at least
    /// [`GRAPH_MIN_TRIPS`] trips or any `While`, with a [`Block::replayable`] body).
    pub fn replays_body(&self) -> bool {
        match &self.exec {
            RegionExec::Scan { length, body, .. } => {
                *length >= GRAPH_MIN_TRIPS && body.replayable()
            }
            RegionExec::While { body, .. } => body.replayable(),
            RegionExec::Cond { .. } | RegionExec::Fused(_) => false,
        }
    }
}

/// How a region runs.
#[derive(Clone, Debug, PartialEq)]
pub enum RegionExec {
    /// `operands[0]` is the predicate (read back once); the chosen branch's inputs are the
    /// other operands, bound as views.
    Cond { branches: [Block; 2] },
    /// A counted loop (`fori`, `scan` and their derivative forms). Before the first trip the
    /// carries are copied from the operands into buffers of the region (`carry_init[j]`, a
    /// copy kernel, for carry `j`). Each trip `k` (`0..length`, run in decreasing order when
    /// `reverse`) binds the body's inputs: the index (a buffer filled by `index_fill` with the
    /// float64 value `start + k`, passed as its bits), the carries, the consts (views of the
    /// operands) and the slices of the `xs` operands (views at offset `k * x_slices[i]`); runs
    /// the body; copies each stacked output's slice with `y_copy[i]` (source, destination,
    /// destination offset `k * y_slices[i]`); and swaps each carry's buffer with the body
    /// output that holds its new value (the body's carry outputs are temps of its own). The
    /// region's outputs are the final carries, then the stacked outputs.
    Scan {
        length: usize,
        start: usize,
        reverse: bool,
        n_carry: usize,
        n_const: usize,
        x_slices: Vec<usize>,
        y_slices: Vec<usize>,
        carry_init: Vec<usize>,
        y_copy: Vec<usize>,
        index_fill: usize,
        body: Block,
    },
    /// `while_loop`: `cond` and `body` take the carries then the consts (carries prepared and
    /// swapped as for `Scan`); `cond`'s one output is read back once per trip; at most
    /// `max_trips` trips when bounded.
    While {
        n_carry: usize,
        max_trips: Option<usize>,
        carry_init: Vec<usize>,
        cond: Block,
        body: Block,
    },
    /// A loop whose body is elementwise, run entirely inside one kernel: the launch reads the
    /// operands and writes the outputs (no readback, no per-iteration launches).
    Fused(Launch),
}

/// A control-flow region: its operands and its outputs, buffers of the enclosing block.
#[derive(Clone, Debug, PartialEq)]
pub struct RegionStep {
    pub form: &'static str,
    pub exec: RegionExec,
    pub operands: Vec<BufId>,
    pub outputs: Vec<BufId>,
}

/// One step of a program or block.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Launch(Launch),
    Gemm(Gemm),
    Trsm(Trsm),
    Solver(SolverCall),
    Region(Box<RegionStep>),
    Print(Print),
    /// `solve` met an exactly zero pivot where `info` (one status per matrix, `count` of them)
    /// is positive: the run ends with `Singular` (checked once, after the last step).
    CheckSingular {
        info: BufId,
        count: usize,
    },
    /// The buffer is not read again: its memory may go.
    Release(BufId),
}

/// One output of the plan: the buffer, and the dtype and shape of the tensor it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    pub buf: BufId,
    pub dtype: DType,
    pub shape: Shape,
}

/// A lowered plan (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub compute: Elem,
    pub kernels: Vec<Kernel>,
    pub buffers: Vec<BufferDecl>,
    /// The buffer of each plan input, in binding order.
    pub inputs: Vec<BufId>,
    pub steps: Vec<Step>,
    pub outputs: Vec<Output>,
}

impl Program {
    /// Every step, regions' bodies included, depth first.
    pub fn all_steps(&self) -> Vec<&Step> {
        fn walk<'s>(steps: &'s [Step], out: &mut Vec<&'s Step>) {
            for step in steps {
                out.push(step);
                if let Step::Region(region) = step {
                    match &region.exec {
                        RegionExec::Cond { branches } => {
                            for b in branches {
                                walk(&b.steps, out);
                            }
                        }
                        RegionExec::Scan { body, .. } => walk(&body.steps, out),
                        RegionExec::While { cond, body, .. } => {
                            walk(&cond.steps, out);
                            walk(&body.steps, out);
                        }
                        RegionExec::Fused(_) => {}
                    }
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.steps, &mut out);
        out
    }

    /// How the plan runs, for `Executable::report`: one line per kind of step.
    pub fn report(&self) -> String {
        let steps = self.all_steps();
        let count = |f: &dyn Fn(&Step) -> bool| steps.iter().filter(|s| f(s)).count();
        let mut out = format!(
            "cuda: one NVRTC program of {} kernels ({} program)\n",
            self.kernels.len(),
            match self.compute {
                Elem::F64 => "float64",
                _ => "float32",
            }
        );
        let lines = [
            ("kernel launches", count(&|s| matches!(s, Step::Launch(_)))),
            ("cuBLAS GEMM calls", count(&|s| matches!(s, Step::Gemm(_)))),
            (
                "cuBLAS triangular solves",
                count(&|s| matches!(s, Step::Trsm(_))),
            ),
            ("cuSOLVER calls", count(&|s| matches!(s, Step::Solver(_)))),
            (
                "regions driven by the host",
                count(&|s| matches!(s, Step::Region(r) if !matches!(r.exec, RegionExec::Fused(_)))),
            ),
            (
                "loops whose body is replayed as a CUDA graph",
                count(&|s| matches!(s, Step::Region(r) if r.replays_body())),
            ),
            (
                "loops fused into one kernel",
                count(&|s| matches!(s, Step::Region(r) if matches!(r.exec, RegionExec::Fused(_)))),
            ),
        ];
        for (what, n) in lines {
            if n > 0 {
                out.push_str(&format!("  {n} {what}\n"));
            }
        }
        out
    }
}
