//! Fused elementwise execution: a group of elementwise nodes of one shape compiled into a
//! small register program and run over cache-sized tiles.
//!
//! Every value of the group lives in a float64 tile register of [`TILE`] elements. Per tile, an
//! instruction dispatches on its op once and then runs a tight, monomorphized loop over the
//! tile (the scalar semantics of `quabla_ir::eval` are called with a constant op, so the
//! per-element code has no dispatch left); float32 results are rounded to float32 inside that
//! loop, after every node, exactly as node-by-node evaluation does. External operands are
//! read in place (contiguous float64), widened into a register (float32, bool), read as a
//! broadcast scalar, or gathered with broadcast strides (any other shape that broadcasts to the
//! group's shape). Only the group's outputs are written to memory.
//!
//! Registers are allocated at compile time with liveness inside the group, so a long chain
//! needs only a few registers. Large groups split their tiles over threads; every element is
//! computed independently, so the split never changes a value. A group of one element (the
//! scalar arithmetic of a loop body) skips the tiles: its registers are plain float64 values
//! and each instruction calls the same scalar semantics once. A group of float32 nodes whose
//! ops are exact in float32 or have a lane form runs in float32 registers instead
//! ([`float32`]).

use crate::buffer::{Elem, View, ViewMut};
use crate::kernels::{lanes, par_for_each, split_ranges, PAR_MIN_ELEMENTS};
use quabla_ir::eval::{binary_f64, compare_f64, powi_f64, unary_f64};
use quabla_ir::{BinaryOp, Comparison, DType, Op, UnaryOp};
use std::collections::{HashMap, VecDeque};

mod float32;

/// Elements per tile: 16 KiB per float64 register, so a program's registers stay in L1/L2.
pub(crate) const TILE: usize = 2048;

/// Registers reused by every program run on one thread: tiles for groups of many elements,
/// single values for groups of one.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    tiles: Vec<Vec<f64>>,
    /// The tiles of an [`Program::in_f32`] program.
    tiles32: Vec<Vec<f32>>,
    /// The external values of a one-element program.
    values: Vec<f64>,
    /// The registers of a one-element program.
    scalars: Vec<f64>,
    /// The output values of a one-element program.
    results: Vec<f64>,
}

impl Scratch {
    /// Room for a one-element program: its external values (emptied, for the caller to fill
    /// in external order), its registers and its output values.
    pub(crate) fn one_element(
        &mut self,
        program: &Program,
    ) -> (&mut Vec<f64>, &mut [f64], &mut [f64]) {
        if self.scalars.len() < program.nregs {
            self.scalars.resize(program.nregs, 0.0);
        }
        if self.results.len() < program.outs.len() {
            self.results.resize(program.outs.len(), 0.0);
        }
        self.values.clear();
        (&mut self.values, &mut self.scalars, &mut self.results)
    }
}

/// The elementwise ops, with what their kernels need.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum EwOp {
    Unary(UnaryOp),
    Powi(i32),
    Binary(BinaryOp),
    Compare(Comparison),
    Where,
    Cast(DType),
    /// `stop_gradient`: the identity.
    Copy,
}

impl EwOp {
    /// Number of operands.
    pub(crate) fn arity(self) -> usize {
        match self {
            EwOp::Unary(_) | EwOp::Powi(_) | EwOp::Cast(_) | EwOp::Copy => 1,
            EwOp::Binary(_) | EwOp::Compare(_) => 2,
            EwOp::Where => 3,
        }
    }

    /// The elementwise form of an op, `None` for the other ops.
    pub(crate) fn from_op(op: &Op) -> Option<EwOp> {
        Some(match op {
            Op::Unary(u) => EwOp::Unary(*u),
            Op::Powi(n) => EwOp::Powi(*n),
            Op::Binary(b) => EwOp::Binary(*b),
            Op::Compare(c) => EwOp::Compare(*c),
            Op::Where => EwOp::Where,
            Op::Cast { to, .. } => EwOp::Cast(*to),
            Op::StopGradient => EwOp::Copy,
            _ => return None,
        })
    }
}

/// Where an instruction reads an operand from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Src {
    /// A tile register.
    Reg(usize),
    /// A contiguous external of the registers' type, read in place (float64, or float32 in
    /// an [`Program::in_f32`] program).
    Direct(usize),
    /// An external of one element, broadcast.
    Scalar(usize),
}

/// How an external operand maps onto the group's elements.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Access {
    /// Same elements in the same order as the group (row-major of the group's shape).
    Full,
    /// One element, broadcast to every position.
    Scalar,
    /// Element strides for each axis of the group's shape (0 on broadcast axes).
    Strided(Vec<usize>),
}

/// An external operand of a group.
#[derive(Clone, Debug)]
pub(crate) struct ExtSpec {
    /// The executor slot holding its storage.
    pub slot: usize,
    pub dtype: DType,
    pub access: Access,
}

#[derive(Clone, Debug)]
pub(crate) enum Instr {
    /// Widens or gathers a tile of an external into a register.
    Load { ext: usize, dst: usize },
    Compute {
        op: EwOp,
        dst: usize,
        args: [Src; 3],
        /// Round every result to float32 (an f32 node whose op is not exact).
        round_f32: bool,
    },
    /// `sin` and `cos` of one operand into two registers in one pass (the two nodes share
    /// their argument reduction and polynomial kernels).
    SinCos {
        arg: Src,
        sin: usize,
        cos: usize,
        round_f32: bool,
    },
    /// Writes a register to a group output, rounding to the output's dtype.
    ///
    /// `direct`: the [`Instr::Compute`] just before it produced `src`, which nothing reads
    /// afterwards, and the output has the tile loop's register type; the tile loops then
    /// compute straight into the output and skip this copy (a one-element program and
    /// native code store the register as usual).
    Store {
        src: usize,
        out: usize,
        direct: bool,
    },
}

/// An operand of a member while a program is being built.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Operand {
    /// An earlier member of the group (its index in the member list).
    Member(usize),
    /// An external (its index in the external list).
    Ext(usize),
}

/// One node of a group, in topological order.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub op: EwOp,
    pub args: Vec<Operand>,
    pub dtype: DType,
    /// The group output this member is written to, if it is needed outside the group.
    pub output: Option<usize>,
}

/// A compiled group.
#[derive(Clone, Debug)]
pub(crate) struct Program {
    /// The group's shape.
    pub dims: Vec<usize>,
    pub size: usize,
    pub exts: Vec<ExtSpec>,
    /// Slot and dtype of each output.
    pub outs: Vec<(usize, DType)>,
    pub instrs: Vec<Instr>,
    pub nregs: usize,
    /// Number of members (nodes) the program computes.
    pub nodes: usize,
    /// Estimated work per element, in units of one arithmetic operation (see [`op_cost`]).
    pub cost: usize,
    /// An external read element for element was written by a step that split its rows over
    /// the threads (set by the schedule): the group then splits the same way from
    /// [`PAR_MIN_SPREAD_ELEMENTS`], so each thread reads what its own cache holds.
    pub spread_input: bool,
    /// Every member is a float32 node whose op is exact in float32 or has a lane form, and
    /// every external and output is float32: the tiles run in float32 registers
    /// ([`float32`]), and contiguous externals are read in place.
    pub in_f32: bool,
}

/// Work of a group (elements times cost per element) from which it is split over threads
/// even below [`PAR_MIN_ELEMENTS`]: a small group is worth splitting only when each element
/// is expensive (a chain of transcendental functions over a hidden layer, say). Measured
/// when parts went to rayon's pool, whose threads kept spinning after a part and slowed what
/// the calling thread ran next on a two-core machine: at 2^18 the backward groups of the MLP
/// step (a few operations over 1024x64) split and the step got 5–10% faster, but the
/// gradient of `slogdet` at 256x256 went from 1.35 to 1.58 ms, its identity-building group
/// from 55 to 81 µs and the LU solve after it from 1.29 to 1.50 ms. The executor's helper
/// team (`team`) also spins after a part, yielding its core; the MLP step's backward groups
/// now split anyway, as groups that follow a split step's parts.
const PAR_MIN_WORK: usize = 800_000;

/// Elements from which a group whose operand was written by a split step splits too (see
/// [`Program::spread_input`]). Below [`PAR_MIN_WORK`] a split costs a hand-off, but a group
/// run on one thread reads the other thread's part of such an operand from the other core's
/// cache, and what it writes is read back in parts by the split steps after it.
const PAR_MIN_SPREAD_ELEMENTS: usize = 1 << 15;

/// Estimated cost of one element of an instruction, in units of one arithmetic operation.
fn op_cost(op: EwOp) -> usize {
    match op {
        EwOp::Unary(u) if lanes::has_lanes(u) => 12,
        EwOp::Unary(
            UnaryOp::Neg | UnaryOp::Sqrt | UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round,
        ) => 1,
        EwOp::Unary(_) => 40,
        EwOp::Binary(BinaryOp::Pow | BinaryOp::Atan2 | BinaryOp::Fmod) => 60,
        EwOp::Powi(n) => 1 + (32 - n.unsigned_abs().leading_zeros()) as usize,
        _ => 1,
    }
}

/// Whether the op's float64 result needs rounding for a float32 node (`where`, `neg`,
/// comparisons, casts and the identity produce values that are already exact).
fn needs_round(op: EwOp) -> bool {
    !matches!(
        op,
        EwOp::Where | EwOp::Copy | EwOp::Cast(_) | EwOp::Compare(_) | EwOp::Unary(UnaryOp::Neg)
    )
}

/// How a `sin` or `cos` member is computed together with the other function of the same
/// operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Partner {
    /// This member computes both; the other is the later member given.
    Later(usize),
    /// An earlier member computed this one.
    Earlier,
}

/// Pairs each `sin` member with the first later `cos` member of the same operand and dtype (or
/// the reverse), so the two run as one [`Instr::SinCos`].
fn sin_cos_partners(members: &[Member]) -> Vec<Option<Partner>> {
    // Each `sin` (`cos`) pairs with the first later unpaired `cos` (`sin`) of the same operand
    // and dtype. Walking the members once, a member takes the earliest unpaired opposite one
    // waiting under its key, which is the same pairing without a scan per member (a long
    // chain of `sin`s with no `cos` made the scan quadratic in the group's size).
    let mut partner = vec![None; members.len()];
    let mut waiting: HashMap<(bool, usize, DType, bool), VecDeque<usize>> = HashMap::new();
    for (j, m) in members.iter().enumerate() {
        let is_sin = match m.op {
            EwOp::Unary(UnaryOp::Sin) => true,
            EwOp::Unary(UnaryOp::Cos) => false,
            _ => continue,
        };
        let (ext, operand) = match m.args[0] {
            Operand::Member(a) => (false, a),
            Operand::Ext(e) => (true, e),
        };
        let opposite = (ext, operand, m.dtype, !is_sin);
        match waiting.get_mut(&opposite).and_then(VecDeque::pop_front) {
            Some(i) => {
                partner[i] = Some(Partner::Later(j));
                partner[j] = Some(Partner::Earlier);
            }
            None => waiting
                .entry((ext, operand, m.dtype, is_sin))
                .or_default()
                .push_back(j),
        }
    }
    partner
}

/// The last reader (member index) of each member and of each external of a group.
struct LastReaders {
    member: Vec<Option<usize>>,
    ext: Vec<Option<usize>>,
}

/// Returns to the free list the registers whose last reader is member `i`.
fn release_args(
    i: usize,
    m: &Member,
    last: &LastReaders,
    member_reg: &mut [usize],
    ext_reg: &mut [Option<usize>],
    free: &mut Vec<usize>,
) {
    for a in &m.args {
        match *a {
            Operand::Member(j) if last.member[j] == Some(i) && member_reg[j] != usize::MAX => {
                free.push(member_reg[j]);
                member_reg[j] = usize::MAX;
            }
            Operand::Ext(e) if last.ext[e] == Some(i) => {
                if let Some(r) = ext_reg[e].take() {
                    free.push(r);
                }
            }
            _ => {}
        }
    }
}

impl Program {
    /// Compiles members (in topological order) into instructions with register allocation.
    pub(crate) fn build(
        dims: Vec<usize>,
        exts: Vec<ExtSpec>,
        members: &[Member],
        outs: Vec<(usize, DType)>,
    ) -> Program {
        let size = dims.iter().product();
        let in_f32 = !members.is_empty()
            && members
                .iter()
                .all(|m| m.dtype == DType::F32 && float32::runs_in_f32(m.op))
            && exts.iter().all(|e| e.dtype == DType::F32)
            && outs.iter().all(|&(_, dtype)| dtype == DType::F32);
        // Last instruction (member index) reading each member and each external.
        let mut last = LastReaders {
            member: vec![None; members.len()],
            ext: vec![None; exts.len()],
        };
        for (i, m) in members.iter().enumerate() {
            for a in &m.args {
                match *a {
                    Operand::Member(j) => last.member[j] = Some(i),
                    Operand::Ext(e) => last.ext[e] = Some(i),
                }
            }
        }
        let mut free: Vec<usize> = Vec::new();
        let mut nregs = 0;
        let mut alloc = |free: &mut Vec<usize>| -> usize {
            free.pop().unwrap_or_else(|| {
                nregs += 1;
                nregs - 1
            })
        };
        let partner = sin_cos_partners(members);
        let mut member_reg = vec![usize::MAX; members.len()];
        let mut ext_reg: Vec<Option<usize>> = vec![None; exts.len()];
        let mut instrs = Vec::new();
        for (i, m) in members.iter().enumerate() {
            if let Some(Partner::Earlier) = partner[i] {
                // Computed with its partner; its register is live from there.
                release_args(i, m, &last, &mut member_reg, &mut ext_reg, &mut free);
                if last.member[i].is_none() {
                    free.push(member_reg[i]);
                    member_reg[i] = usize::MAX;
                }
                continue;
            }
            let mut args = [Src::Scalar(usize::MAX); 3];
            for (k, a) in m.args.iter().enumerate() {
                args[k] = match *a {
                    Operand::Member(j) => Src::Reg(member_reg[j]),
                    Operand::Ext(e) => match (&exts[e].access, exts[e].dtype) {
                        (Access::Scalar, _) => Src::Scalar(e),
                        (Access::Full, DType::F64) => Src::Direct(e),
                        (Access::Full, DType::F32) if in_f32 => Src::Direct(e),
                        _ => {
                            let r = match ext_reg[e] {
                                Some(r) => r,
                                None => {
                                    let r = alloc(&mut free);
                                    instrs.push(Instr::Load { ext: e, dst: r });
                                    ext_reg[e] = Some(r);
                                    r
                                }
                            };
                            Src::Reg(r)
                        }
                    },
                };
            }
            // The destination never shares a register with an argument.
            let dst = alloc(&mut free);
            member_reg[i] = dst;
            let round_f32 = m.dtype == DType::F32 && needs_round(m.op);
            if let Some(Partner::Later(j)) = partner[i] {
                let other = alloc(&mut free);
                member_reg[j] = other;
                let (sin, cos) = if m.op == EwOp::Unary(UnaryOp::Sin) {
                    (dst, other)
                } else {
                    (other, dst)
                };
                instrs.push(Instr::SinCos {
                    arg: args[0],
                    sin,
                    cos,
                    round_f32,
                });
                if let Some(out) = members[j].output {
                    instrs.push(Instr::Store {
                        src: other,
                        out,
                        direct: false,
                    });
                }
            } else {
                instrs.push(Instr::Compute {
                    op: m.op,
                    dst,
                    args,
                    round_f32,
                });
            }
            if let Some(out) = m.output {
                let register_type = if in_f32 { DType::F32 } else { DType::F64 };
                let direct = partner[i].is_none()
                    && last.member[i].is_none()
                    && outs[out].1 == register_type;
                instrs.push(Instr::Store {
                    src: dst,
                    out,
                    direct,
                });
            }
            release_args(i, m, &last, &mut member_reg, &mut ext_reg, &mut free);
            if last.member[i].is_none() {
                free.push(dst);
                member_reg[i] = usize::MAX;
            }
        }
        let cost = instrs
            .iter()
            .map(|i| match *i {
                Instr::Compute { op, .. } => op_cost(op),
                Instr::SinCos { .. } => op_cost(EwOp::Unary(UnaryOp::Sin)),
                Instr::Load { .. } | Instr::Store { .. } => 1,
            })
            .sum();
        Program {
            dims,
            size,
            exts,
            outs,
            instrs,
            nregs,
            nodes: members.len(),
            cost,
            spread_input: false,
            in_f32,
        }
    }

    /// Runs the program: `exts` are the views of the externals' storage and `outs` the
    /// output buffers (each of the group's size). Groups below the threading threshold (or
    /// with one thread) run on the caller's thread in the registers of `scratch`, which keeps
    /// them free of allocation when a loop body runs them once per iteration; larger ones
    /// split their tiles over up to `threads` threads.
    pub(crate) fn run(
        &self,
        exts: &[View<'_>],
        outs: &mut [ViewMut<'_>],
        threads: usize,
        scratch: &mut Scratch,
    ) {
        let tile = TILE.min(self.size);
        if !self.splits(threads) {
            if self.in_f32 {
                let regs = registers(&mut scratch.tiles32, self.nregs, tile);
                self.run_range_f32(exts, outs, (0, self.size), regs);
            } else {
                let regs = registers(&mut scratch.tiles, self.nregs, tile);
                self.run_range(exts, outs, 0, self.size, regs);
            }
            return;
        }
        let ranges = split_ranges(self.size, threads, TILE);
        // Hand each range its own piece of every output.
        let mut pieces: Vec<((usize, usize), Vec<ViewMut<'_>>)> = Vec::with_capacity(ranges.len());
        let mut rest: Vec<ViewMut<'_>> = outs
            .iter_mut()
            .map(|v| std::mem::replace(v, ViewMut::F64(&mut [])))
            .collect();
        for &(start, end) in &ranges {
            let mut mine = Vec::with_capacity(rest.len());
            let mut next = Vec::with_capacity(rest.len());
            for v in rest {
                let (a, b) = v.split_at(end - start);
                mine.push(a);
                next.push(b);
            }
            rest = next;
            pieces.push(((start, end), mine));
        }
        par_for_each(pieces, threads, |((start, end), mut outs)| {
            // Each thread keeps its registers for the next split run (a training step runs
            // many), so a split run allocates nothing once warm.
            SPLIT_SCRATCH.with(|cell| {
                let mut own = Scratch::default();
                let mut kept = cell.try_borrow_mut();
                let scratch = match kept.as_deref_mut() {
                    Ok(s) => s,
                    Err(_) => &mut own,
                };
                if self.in_f32 {
                    let regs = registers(&mut scratch.tiles32, self.nregs, tile);
                    self.run_range_f32(exts, &mut outs, (start, end), regs);
                } else {
                    let regs = registers(&mut scratch.tiles, self.nregs, tile);
                    self.run_range(exts, &mut outs, start, end, regs);
                }
            })
        });
    }

    /// The output that instruction `j` (a compute) writes straight into, if the next
    /// instruction is its [`Instr::Store`] marked `direct`.
    #[inline(always)]
    fn direct_output<'o, 'v>(
        &self,
        j: usize,
        outs: &'o mut [ViewMut<'v>],
    ) -> Option<&'o mut ViewMut<'v>> {
        match self.instrs.get(j + 1) {
            Some(&Instr::Store {
                out, direct: true, ..
            }) => outs.get_mut(out),
            _ => None,
        }
    }

    /// Whether a run with `threads` threads splits the elements over them: for many elements,
    /// or much work (see [`PAR_MIN_WORK`]), and at least two tiles.
    fn splits(&self, threads: usize) -> bool {
        self.splits_when_threaded() && threads > 1
    }

    /// Whether a run with more than one thread splits the elements over them.
    pub(crate) fn splits_when_threaded(&self) -> bool {
        let large = self.size >= PAR_MIN_ELEMENTS || self.size * self.cost >= PAR_MIN_WORK;
        let spread = self.spread_input && self.size >= PAR_MIN_SPREAD_ELEMENTS;
        (large || spread) && self.size >= 2 * TILE
    }

    /// The same program reading external `e` at position `at[e]` of the value array given to
    /// [`Program::run_one`] (how a scalar loop body reads its values in place).
    pub(crate) fn with_externals_at(&self, at: &[usize]) -> Option<Program> {
        let map = |e: usize| at.get(e).copied();
        let src = |s: Src| -> Option<Src> {
            Some(match s {
                Src::Reg(r) => Src::Reg(r),
                Src::Direct(e) => Src::Direct(map(e)?),
                Src::Scalar(e) => Src::Scalar(map(e)?),
            })
        };
        let mut instrs = Vec::with_capacity(self.instrs.len());
        for instr in &self.instrs {
            instrs.push(match *instr {
                Instr::Load { ext, dst } => Instr::Load {
                    ext: map(ext)?,
                    dst,
                },
                Instr::Compute {
                    op,
                    dst,
                    args,
                    round_f32,
                } => {
                    // Unused argument positions hold a placeholder that maps to nothing.
                    let arity = op.arity();
                    let mut mapped = args;
                    for (k, a) in args.iter().enumerate().take(arity) {
                        mapped[k] = src(*a)?;
                    }
                    Instr::Compute {
                        op,
                        dst,
                        args: mapped,
                        round_f32,
                    }
                }
                Instr::SinCos {
                    arg,
                    sin,
                    cos,
                    round_f32,
                } => Instr::SinCos {
                    arg: src(arg)?,
                    sin,
                    cos,
                    round_f32,
                },
                Instr::Store { src, out, direct } => Instr::Store { src, out, direct },
            });
        }
        // The externals now live in the caller's value array: none are bound as views.
        Some(Program {
            instrs,
            exts: Vec::new(),
            ..self.clone()
        })
    }

    /// Runs a one-element program (`size == 1`) on the values of its externals (widened to
    /// float64, in external order) into `results` (one float64 per output, to be rounded to
    /// the output's dtype when stored): the same instructions and the same scalar functions
    /// as the tiled loops, on single registers.
    pub(crate) fn run_one(&self, exts: &[f64], regs: &mut [f64], results: &mut [f64]) {
        let read = |regs: &[f64], s: Src| match s {
            Src::Reg(r) => regs[r],
            Src::Direct(e) | Src::Scalar(e) => exts[e],
        };
        let round = |round_f32: bool, v: f64| if round_f32 { v as f32 as f64 } else { v };
        for instr in &self.instrs {
            match *instr {
                Instr::Load { ext, dst } => regs[dst] = exts[ext],
                Instr::Compute {
                    op,
                    dst,
                    args,
                    round_f32,
                } => {
                    let get = |s: Src| read(regs, s);
                    let v = match op {
                        EwOp::Unary(u) => unary_f64(u, get(args[0])),
                        EwOp::Powi(n) => powi_f64(get(args[0]), n),
                        EwOp::Binary(b) => binary_f64(b, get(args[0]), get(args[1])),
                        EwOp::Compare(c) => {
                            if compare_f64(c, get(args[0]), get(args[1])) {
                                1.0
                            } else {
                                0.0
                            }
                        }
                        EwOp::Where => {
                            let (a, b) = (get(args[1]), get(args[2]));
                            if get(args[0]) != 0.0 {
                                a
                            } else {
                                b
                            }
                        }
                        EwOp::Cast(to) => to.round(get(args[0])),
                        EwOp::Copy => get(args[0]),
                    };
                    regs[dst] = round(round_f32, v);
                }
                Instr::SinCos {
                    arg,
                    sin,
                    cos,
                    round_f32,
                } => {
                    let x = read(regs, arg);
                    regs[sin] = round(round_f32, unary_f64(UnaryOp::Sin, x));
                    regs[cos] = round(round_f32, unary_f64(UnaryOp::Cos, x));
                }
                Instr::Store { src, out, .. } => results[out] = regs[src],
            }
        }
    }

    /// Runs elements `start..end`: the AVX2 build of the tile loops where the processor has
    /// it (twice the lanes of the x86-64 baseline for the widening, rounding and arithmetic
    /// loops; the results are the same IEEE operations), else the baseline build.
    fn run_range(
        &self,
        exts: &[View<'_>],
        outs: &mut [ViewMut<'_>],
        start: usize,
        end: usize,
        regs: &mut [Vec<f64>],
    ) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: this build only requires AVX2, detected just above.
                return unsafe { self.run_range_avx2(exts, outs, start, end, regs) };
            }
        }
        self.run_range_impl(exts, outs, start, end, regs)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn run_range_avx2(
        &self,
        exts: &[View<'_>],
        outs: &mut [ViewMut<'_>],
        start: usize,
        end: usize,
        regs: &mut [Vec<f64>],
    ) {
        self.run_range_impl(exts, outs, start, end, regs)
    }

    /// The tile loop; inlined (with the kernels it calls) into each build of [`Self::run_range`].
    #[inline(always)]
    fn run_range_impl(
        &self,
        exts: &[View<'_>],
        outs: &mut [ViewMut<'_>],
        start: usize,
        end: usize,
        regs: &mut [Vec<f64>],
    ) {
        let mut t = start;
        while t < end {
            let len = TILE.min(end - t);
            for (j, instr) in self.instrs.iter().enumerate() {
                match *instr {
                    Instr::Load { ext, dst } => {
                        let d = &mut regs[dst][..len];
                        match &self.exts[ext].access {
                            Access::Strided(strides) => {
                                load_strided(&exts[ext], &self.dims, strides, t, d)
                            }
                            _ => exts[ext].load_f64(t, d),
                        }
                    }
                    Instr::Compute {
                        op,
                        dst,
                        args,
                        round_f32,
                    } => {
                        let at = t - start;
                        let direct = self.direct_output(j, outs);
                        if let Some(ViewMut::F64(o)) = direct {
                            let arg = |s: Src| tile_arg(regs, exts, s, t, len);
                            compute(op, round_f32, &args, arg, &mut o[at..at + len]);
                            continue;
                        }
                        let mut d = std::mem::take(&mut regs[dst]);
                        let arg = |s: Src| tile_arg(regs, exts, s, t, len);
                        compute(op, round_f32, &args, arg, &mut d[..len]);
                        // A direct store whose output is not float64 (never built so) is
                        // made here, since its `Store` is skipped.
                        if let Some(o) = direct {
                            o.store_f64(at, &d[..len]);
                        }
                        regs[dst] = d;
                    }
                    Instr::SinCos {
                        arg,
                        sin,
                        cos,
                        round_f32,
                    } => {
                        let mut s = std::mem::take(&mut regs[sin]);
                        let mut c = std::mem::take(&mut regs[cos]);
                        let round = |v: f64| if round_f32 { v as f32 as f64 } else { v };
                        match tile_arg(regs, exts, arg, t, len) {
                            Arg::Slice(x) => {
                                lanes::sin_cos(x, &mut s[..len], &mut c[..len], round_f32)
                            }
                            Arg::Scalar(v) => {
                                s[..len].fill(round(unary_f64(UnaryOp::Sin, v)));
                                c[..len].fill(round(unary_f64(UnaryOp::Cos, v)));
                            }
                        }
                        regs[sin] = s;
                        regs[cos] = c;
                    }
                    Instr::Store { direct: true, .. } => {}
                    Instr::Store { src, out, .. } => {
                        outs[out].store_f64(t - start, &regs[src][..len]);
                    }
                }
            }
            t += len;
        }
    }
}

thread_local! {
    /// The registers of the split runs a thread takes part in (see [`Program::run`]).
    static SPLIT_SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// The first `n` of `tiles`, each at least `tile` elements long.
fn registers<T: Copy + Default>(tiles: &mut Vec<Vec<T>>, n: usize, tile: usize) -> &mut [Vec<T>] {
    if tiles.len() < n {
        tiles.resize_with(n, Vec::new);
    }
    for r in tiles.iter_mut().take(n) {
        if r.len() < tile {
            r.resize(tile, T::default());
        }
    }
    &mut tiles[..n]
}

/// The operand `s` over the tile of `len` elements at flat position `t`.
#[inline(always)]
fn tile_arg<'a>(
    regs: &'a [Vec<f64>],
    exts: &'a [View<'_>],
    s: Src,
    t: usize,
    len: usize,
) -> Arg<'a> {
    match s {
        Src::Reg(r) => Arg::Slice(&regs[r][..len]),
        Src::Direct(e) => match exts[e] {
            View::F64(v) => Arg::Slice(&v[t..t + len]),
            // The float64 loop reads only float64 externals in place.
            _ => Arg::Scalar(f64::NAN),
        },
        Src::Scalar(e) => Arg::Scalar(exts[e].get_f64(0)),
    }
}

/// Gathers `dst.len()` elements starting at flat position `start` of a `dims`-shaped iteration
/// that reads `src` with `strides`.
fn load_strided(src: &View<'_>, dims: &[usize], strides: &[usize], start: usize, dst: &mut [f64]) {
    match src {
        View::F32(s) => gather_strided(s, dims, strides, start, dst, Elem::to_f64),
        View::F64(s) => gather_strided(s, dims, strides, start, dst, Elem::to_f64),
        View::Bool(s) => gather_strided(s, dims, strides, start, dst, Elem::to_f64),
        View::I32(s) => gather_strided(s, dims, strides, start, dst, Elem::to_f64),
        View::I64(s) => gather_strided(s, dims, strides, start, dst, Elem::to_f64),
    }
}

/// [`load_strided`] into `dst` of any element type, each element converted by `convert`.
#[inline(always)]
fn gather_strided<T: Copy, D: Copy>(
    src: &[T],
    dims: &[usize],
    strides: &[usize],
    start: usize,
    dst: &mut [D],
    convert: impl Fn(T) -> D,
) {
    let rank = dims.len();
    if rank == 0 {
        dst.fill(convert(src[0]));
        return;
    }
    let mut idx = vec![0usize; rank];
    let mut rem = start;
    for a in (0..rank).rev() {
        idx[a] = rem % dims[a];
        rem /= dims[a];
    }
    let mut base: usize = idx.iter().zip(strides).map(|(i, s)| i * s).sum();
    let last = rank - 1;
    let (extent, stride) = (dims[last], strides[last]);
    let mut filled = 0;
    while filled < dst.len() {
        let run = (extent - idx[last]).min(dst.len() - filled);
        let out = &mut dst[filled..filled + run];
        match stride {
            0 => out.fill(convert(src[base])),
            1 => {
                for (d, &s) in out.iter_mut().zip(&src[base..base + run]) {
                    *d = convert(s);
                }
            }
            _ => {
                for (j, d) in out.iter_mut().enumerate() {
                    *d = convert(src[base + j * stride]);
                }
            }
        }
        filled += run;
        idx[last] += run;
        base += run * stride;
        if idx[last] == extent && filled < dst.len() {
            base -= extent * stride;
            idx[last] = 0;
            let mut a = last;
            while a > 0 {
                a -= 1;
                idx[a] += 1;
                base += strides[a];
                if idx[a] < dims[a] {
                    break;
                }
                base -= dims[a] * strides[a];
                idx[a] = 0;
            }
        }
    }
}

/// An operand of a tile kernel: a tile of values or one broadcast value.
#[derive(Clone, Copy, Debug)]
enum Arg<'a> {
    Slice(&'a [f64]),
    Scalar(f64),
}

/// Indexed access specialized per operand kind, so each combination compiles to its own loop.
trait Get: Copy {
    /// Restricts a slice to its first `n` elements (lets the loop drop bounds checks).
    fn prefix(self, n: usize) -> Self;
    fn get(&self, i: usize) -> f64;
}

impl Get for &[f64] {
    #[inline(always)]
    fn prefix(self, n: usize) -> Self {
        &self[..n]
    }
    #[inline(always)]
    fn get(&self, i: usize) -> f64 {
        self[i]
    }
}

impl Get for f64 {
    #[inline(always)]
    fn prefix(self, _: usize) -> Self {
        self
    }
    #[inline(always)]
    fn get(&self, _: usize) -> f64 {
        *self
    }
}

/// Expands `$body` once per operand-kind combination of the given `Arg`s, binding each one to
/// a concrete [`Get`] type.
macro_rules! with_args {
    ($a:expr => $x:ident, $body:expr) => {
        match $a {
            Arg::Slice($x) => $body,
            Arg::Scalar($x) => $body,
        }
    };
    ($a:expr, $b:expr => $x:ident, $y:ident, $body:expr) => {
        match ($a, $b) {
            (Arg::Slice($x), Arg::Slice($y)) => $body,
            (Arg::Slice($x), Arg::Scalar($y)) => $body,
            (Arg::Scalar($x), Arg::Slice($y)) => $body,
            (Arg::Scalar($x), Arg::Scalar($y)) => $body,
        }
    };
}

/// Binds `$f` to `|x| unary_f64(<constant op>, x)` in one arm per unary op.
macro_rules! with_unary {
    ($u:expr, $f:ident => $body:expr) => {
        with_unary!(@arms $u, $f, $body; Neg, Tanh, Exp, Log, Log1p, Expm1, Sqrt, Sin, Cos, Erf,
            Erfc, Tan, Arcsin, Arccos, Arctan, Sinh, Cosh, Arcsinh, Arccosh, Arctanh, Log2, Log10,
            Cbrt, Floor, Ceil, Round, BitNot)
    };
    (@arms $u:expr, $f:ident, $body:expr; $($v:ident),*) => {
        match $u {
            $(UnaryOp::$v => {
                let $f = |x: f64| unary_f64(UnaryOp::$v, x);
                $body
            })*
        }
    };
}

/// Binds `$f` to `|x, y| binary_f64(<constant op>, x, y)` in one arm per binary op.
macro_rules! with_binary {
    ($b:expr, $f:ident => $body:expr) => {
        with_binary!(@arms $b, $f, $body; Add, Sub, Mul, Div, Pow, Atan2, Fmod, FloorDiv, Rem,
            BitAnd, BitOr, BitXor, ShiftLeft, ShiftRightArithmetic, ShiftRightLogical)
    };
    (@arms $b:expr, $f:ident, $body:expr; $($v:ident),*) => {
        match $b {
            $(BinaryOp::$v => {
                let $f = |x: f64, y: f64| binary_f64(BinaryOp::$v, x, y);
                $body
            })*
        }
    };
}

/// Binds `$f` to the 0/1 value of `compare_f64(<constant predicate>, x, y)`.
macro_rules! with_compare {
    ($c:expr, $f:ident => $body:expr) => {
        with_compare!(@arms $c, $f, $body; Greater, GreaterEqual, Less, LessEqual, Equal, NotEqual)
    };
    (@arms $c:expr, $f:ident, $body:expr; $($v:ident),*) => {
        match $c {
            $(Comparison::$v => {
                let $f = |x: f64, y: f64| {
                    if compare_f64(Comparison::$v, x, y) { 1.0 } else { 0.0 }
                };
                $body
            })*
        }
    };
}

#[inline(always)]
fn map1<const R32: bool, A: Get>(d: &mut [f64], a: A, f: impl Fn(f64) -> f64) {
    let n = d.len();
    let a = a.prefix(n);
    for (i, d) in d.iter_mut().enumerate() {
        let v = f(a.get(i));
        *d = if R32 { v as f32 as f64 } else { v };
    }
}

#[inline(always)]
fn map2<const R32: bool, A: Get, B: Get>(d: &mut [f64], a: A, b: B, f: impl Fn(f64, f64) -> f64) {
    let n = d.len();
    let (a, b) = (a.prefix(n), b.prefix(n));
    for (i, d) in d.iter_mut().enumerate() {
        let v = f(a.get(i), b.get(i));
        *d = if R32 { v as f32 as f64 } else { v };
    }
}

#[inline(always)]
fn select<P: Get, A: Get, B: Get>(d: &mut [f64], p: P, a: A, b: B) {
    let n = d.len();
    let (p, a, b) = (p.prefix(n), a.prefix(n), b.prefix(n));
    for (i, d) in d.iter_mut().enumerate() {
        *d = if p.get(i) != 0.0 { a.get(i) } else { b.get(i) };
    }
}

/// `powi` over a tile with the exact operation sequence of `powi_f64`, the loop over the
/// exponent's bits outside and the loop over elements inside: every element takes the same
/// branches, so the inner loops vectorize.
#[inline(always)]
fn powi_tile<A: Get>(d: &mut [f64], a: A, n: i32, r32: bool) {
    const LANES: usize = 64;
    let len = d.len();
    let a = a.prefix(len);
    let mut start = 0;
    while start < len {
        let m = LANES.min(len - start);
        let mut base = [0.0f64; LANES];
        for (i, b) in base.iter_mut().enumerate().take(m) {
            *b = a.get(start + i);
        }
        let mut acc = [1.0f64; LANES];
        let mut e = n.unsigned_abs();
        while e > 0 {
            if e & 1 == 1 {
                for (c, b) in acc.iter_mut().zip(&base) {
                    *c *= *b;
                }
            }
            e >>= 1;
            if e > 0 {
                for b in base.iter_mut() {
                    *b *= *b;
                }
            }
        }
        if n < 0 {
            for c in acc.iter_mut() {
                *c = 1.0 / *c;
            }
        }
        let out = &mut d[start..start + m];
        if r32 {
            for (o, &c) in out.iter_mut().zip(&acc) {
                *o = c as f32 as f64;
            }
        } else {
            out.copy_from_slice(&acc[..m]);
        }
        start += m;
    }
}

/// Runs one instruction over one tile: one dispatch on the op, then a monomorphized loop.
#[inline(always)]
fn compute<'a>(op: EwOp, r32: bool, args: &[Src; 3], arg: impl Fn(Src) -> Arg<'a>, d: &mut [f64]) {
    match op {
        EwOp::Unary(u) if lanes::has_lanes(u) && matches!(arg(args[0]), Arg::Slice(_)) => {
            if let Arg::Slice(x) = arg(args[0]) {
                lanes::unary(u, x, d, r32);
            }
        }
        EwOp::Unary(u) => {
            let a = arg(args[0]);
            with_unary!(u, f => with_args!(a => x, if r32 {
                map1::<true, _>(d, x, f)
            } else {
                map1::<false, _>(d, x, f)
            }))
        }
        EwOp::Powi(e) => {
            let a = arg(args[0]);
            with_args!(a => x, powi_tile(d, x, e, r32))
        }
        EwOp::Binary(b) => {
            let (a0, a1) = (arg(args[0]), arg(args[1]));
            with_binary!(b, f => with_args!(a0, a1 => x, y, if r32 {
                map2::<true, _, _>(d, x, y, f)
            } else {
                map2::<false, _, _>(d, x, y, f)
            }))
        }
        EwOp::Compare(c) => {
            let (a0, a1) = (arg(args[0]), arg(args[1]));
            with_compare!(c, f => with_args!(a0, a1 => x, y, map2::<false, _, _>(d, x, y, f)))
        }
        EwOp::Where => {
            let (p, a0, a1) = (arg(args[0]), arg(args[1]), arg(args[2]));
            with_args!(p => p, with_args!(a0, a1 => x, y, select(d, p, x, y)))
        }
        EwOp::Cast(to) => {
            let a = arg(args[0]);
            match to {
                DType::F64 => with_args!(a => x, map1::<false, _>(d, x, |v| DType::F64.round(v))),
                DType::F32 => with_args!(a => x, map1::<false, _>(d, x, |v| DType::F32.round(v))),
                DType::Bool => {
                    with_args!(a => x, map1::<false, _>(d, x, |v| DType::Bool.round(v)))
                }
                // Integer casts run as integer nodes (`exec::run_integer_node`), never fused.
                DType::I32 => with_args!(a => x, map1::<false, _>(d, x, |v| DType::I32.round(v))),
                DType::I64 => with_args!(a => x, map1::<false, _>(d, x, |v| DType::I64.round(v))),
            }
        }
        EwOp::Copy => {
            let a = arg(args[0]);
            with_args!(a => x, map1::<false, _>(d, x, |v| v))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pairing rule as written: each unpaired `sin`/`cos` takes the first later unpaired
    /// member of the other function on the same operand and dtype.
    fn partners_by_scan(members: &[Member]) -> Vec<Option<Partner>> {
        let mut partner = vec![None; members.len()];
        let key = |m: &Member| match m.args[0] {
            Operand::Member(a) => (false, a, m.dtype),
            Operand::Ext(e) => (true, e, m.dtype),
        };
        for i in 0..members.len() {
            let other = match members[i].op {
                EwOp::Unary(UnaryOp::Sin) => EwOp::Unary(UnaryOp::Cos),
                EwOp::Unary(UnaryOp::Cos) => EwOp::Unary(UnaryOp::Sin),
                _ => continue,
            };
            if partner[i].is_some() {
                continue;
            }
            if let Some(j) = (i + 1..members.len()).find(|&j| {
                partner[j].is_none()
                    && members[j].op == other
                    && key(&members[j]) == key(&members[i])
            }) {
                partner[i] = Some(Partner::Later(j));
                partner[j] = Some(Partner::Earlier);
            }
        }
        partner
    }

    #[test]
    fn sin_cos_pairing_matches_the_scan_on_random_sequences() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n) as usize
        };
        for _ in 0..300 {
            let len = 1 + next(24);
            let members: Vec<Member> = (0..len)
                .map(|_| Member {
                    op: match next(3) {
                        0 => EwOp::Unary(UnaryOp::Sin),
                        1 => EwOp::Unary(UnaryOp::Cos),
                        _ => EwOp::Unary(UnaryOp::Exp),
                    },
                    args: vec![if next(2) == 0 {
                        Operand::Ext(next(3))
                    } else {
                        Operand::Member(next(3))
                    }],
                    dtype: if next(4) == 0 { DType::F32 } else { DType::F64 },
                    output: None,
                })
                .collect();
            assert_eq!(sin_cos_partners(&members), partners_by_scan(&members));
        }
    }

    #[test]
    fn strided_gather_walks_rows_and_carries() {
        // A [2, 3] operand read transposed as a [3, 2] iteration.
        let src = [0.0f64, 1.0, 2.0, 3.0, 4.0, 5.0];
        let dims = [3, 2];
        let strides = [1, 3];
        let mut out = [0.0; 6];
        gather_strided(&src, &dims, &strides, 0, &mut out, Elem::to_f64);
        assert_eq!(out, [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        let mut part = [0.0; 3];
        gather_strided(&src, &dims, &strides, 3, &mut part, Elem::to_f64);
        assert_eq!(part, [4.0, 2.0, 5.0]);
        // A row broadcast over rows.
        let row = [7.0f32, 8.0];
        let mut b = [0.0; 6];
        gather_strided(&row, &[3, 2], &[0, 1], 1, &mut b[..5], Elem::to_f64);
        assert_eq!(&b[..5], &[8.0, 7.0, 8.0, 7.0, 8.0]);
    }

    #[test]
    fn registers_are_reused_along_a_chain() {
        let members: Vec<Member> = (0..50)
            .map(|i| Member {
                op: EwOp::Unary(UnaryOp::Sin),
                args: vec![if i == 0 {
                    Operand::Ext(0)
                } else {
                    Operand::Member(i - 1)
                }],
                dtype: DType::F32,
                output: (i == 49).then_some(0),
            })
            .collect();
        let exts = vec![ExtSpec {
            slot: 0,
            dtype: DType::F32,
            access: Access::Full,
        }];
        let p = Program::build(vec![10], exts, &members, vec![(1, DType::F32)]);
        assert!(p.nregs <= 3, "{} registers", p.nregs);
    }

    /// `[cos(x) * 2, sin(x)]` members over float32 (or float64) external 0, with an unrelated
    /// node in between: the two trigonometric nodes pair into one instruction.
    fn trig_members(dtype: DType) -> Vec<Member> {
        vec![
            Member {
                op: EwOp::Unary(UnaryOp::Cos),
                args: vec![Operand::Ext(0)],
                dtype,
                output: None,
            },
            Member {
                op: EwOp::Powi(2),
                args: vec![Operand::Member(0)],
                dtype,
                output: Some(0),
            },
            Member {
                op: EwOp::Unary(UnaryOp::Sin),
                args: vec![Operand::Ext(0)],
                dtype,
                output: Some(1),
            },
        ]
    }

    #[test]
    fn sin_and_cos_of_one_operand_run_as_one_instruction() {
        let xs: Vec<f64> = (0..5000).map(|i| (i as f64 - 2500.0) * 0.0137).collect();
        for dtype in [DType::F32, DType::F64] {
            let exts = vec![ExtSpec {
                slot: 0,
                dtype,
                access: Access::Full,
            }];
            let p = Program::build(
                vec![xs.len()],
                exts,
                &trig_members(dtype),
                vec![(1, dtype), (2, dtype)],
            );
            let pairs = p
                .instrs
                .iter()
                .filter(|i| matches!(i, Instr::SinCos { .. }))
                .count();
            assert_eq!(pairs, 1, "{:?}", p.instrs);
            let round = |v: f64| dtype.round(v);
            let x32: Vec<f32> = xs.iter().map(|&v| v as f32).collect();
            let input: Vec<f64> = xs.iter().map(|&v| round(v)).collect();
            let (mut a, mut b) = (vec![0.0f64; xs.len()], vec![0.0f64; xs.len()]);
            let (mut a32, mut b32) = (vec![0.0f32; xs.len()], vec![0.0f32; xs.len()]);
            let ext = match dtype {
                DType::F32 => View::F32(&x32),
                _ => View::F64(&input),
            };
            let mut outs = match dtype {
                DType::F32 => vec![ViewMut::F32(&mut a32), ViewMut::F32(&mut b32)],
                _ => vec![ViewMut::F64(&mut a), ViewMut::F64(&mut b)],
            };
            p.run(&[ext], &mut outs, 2, &mut Scratch::default());
            drop(outs);
            if dtype == DType::F32 {
                a = a32.iter().map(|&v| v as f64).collect();
                b = b32.iter().map(|&v| v as f64).collect();
            }
            for (i, &x) in input.iter().enumerate() {
                let c = round(libm::cos(x));
                assert_eq!(
                    a[i].to_bits(),
                    round(powi_f64(c, 2)).to_bits(),
                    "cos^2 at {x}"
                );
                assert_eq!(b[i].to_bits(), round(libm::sin(x)).to_bits(), "sin at {x}");
            }
            // The one-element form computes the same values.
            let one = Program::build(
                vec![1],
                vec![ExtSpec {
                    slot: 0,
                    dtype,
                    access: Access::Full,
                }],
                &trig_members(dtype),
                vec![(1, dtype), (2, dtype)],
            );
            let (mut regs, mut results) = (vec![0.0; one.nregs], vec![0.0; 2]);
            one.run_one(&[input[7]], &mut regs, &mut results);
            assert_eq!(results[0].to_bits(), a[7].to_bits());
            assert_eq!(results[1].to_bits(), b[7].to_bits());
        }
    }

    #[test]
    fn powi_tiles_match_the_scalar_sequence() {
        let mut xs: Vec<f64> = (0..150).map(|i| (i as f64 - 75.0) * 0.173).collect();
        xs.extend([
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            1e200,
            -1e-200,
        ]);
        for n in [-7, -2, -1, 0, 1, 2, 3, 5, 8, 13, 31, i32::MAX, i32::MIN] {
            for r32 in [false, true] {
                let mut d = vec![0.0; xs.len()];
                powi_tile(&mut d, xs.as_slice(), n, r32);
                for (&x, &got) in xs.iter().zip(&d) {
                    let v = powi_f64(x, n);
                    let want = if r32 { v as f32 as f64 } else { v };
                    assert!(
                        got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                        "powi({x}, {n}) = {got}, want {want}"
                    );
                }
                let mut one = vec![0.0; 3];
                powi_tile(&mut one, 1.5f64, n, r32);
                let v = powi_f64(1.5, n);
                assert_eq!(
                    one[2].to_bits(),
                    (if r32 { v as f32 as f64 } else { v }).to_bits()
                );
            }
        }
    }

    #[test]
    fn expensive_groups_split_below_the_size_threshold() {
        let n = 70_000;
        assert!(n < PAR_MIN_ELEMENTS);
        let ext = || {
            vec![ExtSpec {
                slot: 0,
                dtype: DType::F64,
                access: Access::Full,
            }]
        };
        let one = |op: EwOp| {
            vec![Member {
                op,
                args: vec![Operand::Ext(0)],
                dtype: DType::F64,
                output: Some(0),
            }]
        };
        let cheap = Program::build(
            vec![n],
            ext(),
            &one(EwOp::Unary(UnaryOp::Neg)),
            vec![(1, DType::F64)],
        );
        assert!(!cheap.splits(2));
        let tanh = Program::build(
            vec![n],
            ext(),
            &one(EwOp::Unary(UnaryOp::Tanh)),
            vec![(1, DType::F64)],
        );
        assert!(tanh.splits(2) && !tanh.splits(1));
        let xs: Vec<f64> = (0..n).map(|i| (i as f64 - 35_000.0) * 1e-4).collect();
        let (mut split, mut whole) = (vec![0.0; n], vec![0.0; n]);
        tanh.run(
            &[View::F64(&xs)],
            &mut [ViewMut::F64(&mut split)],
            2,
            &mut Scratch::default(),
        );
        tanh.run(
            &[View::F64(&xs)],
            &mut [ViewMut::F64(&mut whole)],
            1,
            &mut Scratch::default(),
        );
        for ((&x, &a), &b) in xs.iter().zip(&split).zip(&whole) {
            assert_eq!(a.to_bits(), b.to_bits());
            assert_eq!(a.to_bits(), libm::tanh(x).to_bits());
        }
    }
}
