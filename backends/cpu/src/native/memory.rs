//! Values of a graph body too large for machine registers. A value of at most
//! [`REGISTER_ELEMENTS`] elements is held as machine values, one per element (unrolled code);
//! a larger one is an array of 8-byte words in memory (float64 values, or int64 ones for an
//! integer dtype: [`super::word`]) — the run's scratch memory, the storage of a
//! carry, or memory the caller gave (loop constants, scanned slices, plan inputs) — and the
//! code loops over its elements: elementwise nodes as one loop applying the op per element,
//! layout ops as copies through tables of element positions computed at compile time,
//! reductions in the blocked order of numerics.md §1.5 with eight accumulators, and `matmul`
//! and `solve` as calls of the CPU kernels' own functions (`symbols.rs`).
//!
//! Every element computes exactly what the register form computes for it (the same `op`,
//! `round` and symbol calls), so both forms, and the interpreter, give the same bits. This
//! module only emits code; which nodes it translates is decided with the body
//! ([`super::GraphBody`]).

use super::symbols::{unary_code, MATMUL, MAXIMUM, MINIMUM, UNARY_LANES};
use super::{element_sources, reduced_groups, Elementwise, Emitter, EwOp};
use crate::kernels::lanes;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Type, Value};
use quabla_ir::eval::{broadcast_values, HostValue, SUM_BLOCK, SUM_LANES};
use quabla_ir::{DType, HostData, Op, Reducer, Shape, TensorType, UnaryOp};

/// The tables a function's code reads, kept alive as long as the code: element positions and
/// shapes (`u32`), and constant arrays (8-byte words: float64 or int64 bits).
#[derive(Debug, Default)]
pub(super) struct Tables {
    pub positions: Vec<Box<[u32]>>,
    pub constants: Vec<Box<[u64]>>,
}

/// The most elements of a value held as machine values: every element is then an instruction
/// or more of unrolled code, which beyond this costs more compile time and register spills
/// than a loop over memory.
pub(crate) const REGISTER_ELEMENTS: usize = 64;

/// The most 8-byte words of scratch memory one function may use (32 MiB): a body whose
/// large values add up to more runs in the interpreter, whose buffers are recycled.
const MAX_SCRATCH: usize = 1 << 22;

/// The most blocks of [`SUM_BLOCK`] elements in one reduced group (the tree that combines the
/// block sums is unrolled).
const MAX_SUM_BLOCKS: usize = 256;

/// A value of a body in the code being built.
#[derive(Clone, Debug)]
pub(super) enum Val {
    /// Its elements as machine values.
    Regs(Vec<Value>),
    /// An array in memory.
    Mem(Mem),
}

/// An array of 8-byte words in memory: the address of its first element, its length, whose
/// memory it is, and the machine type of its elements (`F64`, or `I64` for an integer dtype).
#[derive(Clone, Copy, Debug)]
pub(super) struct Mem {
    pub at: Value,
    pub len: usize,
    pub home: Home,
    pub ty: Type,
}

/// Whose memory an array is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Home {
    /// The run's scratch memory, written once per run of the node that made it.
    Scratch,
    /// The storage of a carry of a loop (one identity per carry): read during an iteration,
    /// written at its end.
    Carry(usize),
    /// Memory the caller gave (loop constants, scanned slices, plan inputs): read only.
    Given,
}

impl Val {
    pub(super) fn len(&self) -> usize {
        match self {
            Val::Regs(v) => v.len(),
            Val::Mem(m) => m.len,
        }
    }
}

/// An elementwise result in memory not computed yet: the expression of its element `i`, made
/// of loads of arrays in memory, values known before the loop and elementwise ops (each
/// rounded to its node's dtype). A chain of such nodes is computed in one loop, the way the
/// interpreter fuses it, with the same operations per element.
#[derive(Clone, Debug)]
pub(super) struct Fused {
    n: usize,
    expr: Expr,
}

#[derive(Clone, Debug)]
enum Expr {
    /// Element `i` of the array of words of the type, or element `table[i]`.
    Load(Value, Type, Option<Value>),
    /// A value known before the loop (a one-element operand).
    Only(Value),
    Op {
        ew: Elementwise,
        args: Vec<Expr>,
    },
}

impl Emitter<'_, '_> {
    fn flags_mem() -> MemFlagsData {
        MemFlagsData::trusted()
    }

    /// A fresh array of `len` words of type `ty` in the run's scratch memory (`None` in a
    /// function without scratch memory, or past [`MAX_SCRATCH`]).
    pub(super) fn scratch_array(&mut self, len: usize, ty: Type) -> Option<Mem> {
        let base = self.scratch?;
        let first = self.scratch_len;
        self.scratch_len = first.checked_add(len.max(1))?;
        if self.scratch_len > MAX_SCRATCH {
            return None;
        }
        let at = self
            .b
            .ins()
            .iadd_imm_s(base, i64::try_from(first * 8).ok()?);
        Some(Mem {
            at,
            len,
            home: Home::Scratch,
            ty,
        })
    }

    /// The address of a table of `u32` entries the code reads (kept alive with the code).
    fn table(&mut self, entries: Vec<u32>) -> Value {
        let table = entries.into_boxed_slice();
        let at = table.as_ptr() as i64;
        self.tables.positions.push(table);
        self.b.ins().iconst(types::I64, at)
    }

    /// The word of type `ty` at `at + 8 * index`.
    pub(super) fn load_indexed(&mut self, ty: Type, at: Value, index: Value) -> Value {
        let bytes = self.b.ins().ishl_imm_u(index, 3);
        let address = self.b.ins().iadd(at, bytes);
        self.b.ins().load(ty, Self::flags_mem(), address, 0)
    }

    /// Stores `v` at `at + 8 * index`.
    pub(super) fn store_indexed(&mut self, v: Value, at: Value, index: Value) {
        let bytes = self.b.ins().ishl_imm_u(index, 3);
        let address = self.b.ins().iadd(at, bytes);
        self.b.ins().store(Self::flags_mem(), v, address, 0);
    }

    /// Entry `index` of the `u32` table at `table`, as an `i64`.
    fn table_entry(&mut self, table: Value, index: Value) -> Value {
        let bytes = self.b.ins().ishl_imm_u(index, 2);
        let address = self.b.ins().iadd(table, bytes);
        let entry = self.b.ins().load(types::I32, Self::flags_mem(), address, 0);
        self.b.ins().uextend(types::I64, entry)
    }

    /// Runs `body` for `i` in `0..n` in a counted loop (`i` an `i64`); the builder is left
    /// after the loop.
    pub(super) fn for_each(
        &mut self,
        n: usize,
        body: impl FnOnce(&mut Self, Value) -> Option<()>,
    ) -> Option<()> {
        let bound = self.b.ins().iconst(types::I64, i64::try_from(n).ok()?);
        let (trip, header, exit) = self.counted_loop(bound);
        let i = self.b.use_var(trip);
        body(self, i)?;
        self.next_trip(trip, header);
        self.b.switch_to_block(exit);
        Some(())
    }

    /// Element `i` (a position known now) of `v`.
    pub(super) fn element_at(&mut self, v: &Val, i: usize) -> Option<Value> {
        match v {
            Val::Regs(values) => values.get(i).copied(),
            Val::Mem(m) if i < m.len => Some(self.b.ins().load(
                m.ty,
                Self::flags_mem(),
                m.at,
                super::offset(i),
            )),
            Val::Mem(_) => None,
        }
    }

    /// The elements of `v` as machine values (loaded when `v` is in memory), for a value of at
    /// most [`REGISTER_ELEMENTS`] elements.
    pub(super) fn registers(&mut self, v: &Val) -> Option<Vec<Value>> {
        match v {
            Val::Regs(values) => Some(values.clone()),
            Val::Mem(m) if m.len <= REGISTER_ELEMENTS => {
                (0..m.len).map(|i| self.element_at(v, i)).collect()
            }
            Val::Mem(_) => None,
        }
    }

    /// `v` as an array in memory (machine values stored into scratch memory).
    pub(super) fn in_memory(&mut self, v: &Val) -> Option<Mem> {
        match v {
            Val::Mem(m) => Some(*m),
            Val::Regs(values) => {
                let ty = values
                    .first()
                    .map_or(types::F64, |&x| self.b.func.dfg.value_type(x));
                let m = self.scratch_array(values.len(), ty)?;
                for (j, &x) in values.iter().enumerate() {
                    self.b
                        .ins()
                        .store(Self::flags_mem(), x, m.at, super::offset(j));
                }
                Some(m)
            }
        }
    }

    /// Copies the `from.len` elements of `from` into `to`.
    pub(super) fn copy(&mut self, from: Mem, to: Mem) -> Option<()> {
        if from.len != to.len {
            return None;
        }
        self.for_each(from.len, |e, i| {
            let v = e.load_indexed(from.ty, from.at, i);
            e.store_indexed(v, to.at, i);
            Some(())
        })
    }

    /// Writes `v` into the array `to` (of `v`'s length).
    pub(super) fn write(&mut self, v: &Val, to: Mem) -> Option<()> {
        match v {
            Val::Mem(from) => self.copy(*from, to),
            Val::Regs(values) => {
                if values.len() != to.len {
                    return None;
                }
                for (j, &x) in values.iter().enumerate() {
                    self.b
                        .ins()
                        .store(Self::flags_mem(), x, to.at, super::offset(j));
                }
                Some(())
            }
        }
    }

    /// A unary function with vector lanes over an operand in memory of the result's shape (the
    /// elementwise nodes [`Emitter::fusable`] leaves out): the interpreter's own slice kernel,
    /// called once for the whole array.
    pub(super) fn unary_lanes_in_memory(
        &mut self,
        u: UnaryOp,
        x: &Val,
        out: &TensorType,
    ) -> Option<Val> {
        let round_f32 = match out.dtype {
            DType::F64 => 0,
            DType::F32 => 1,
            _ => return None,
        };
        if !lanes::has_lanes(u) || x.len() != out.shape.size() {
            return None;
        }
        let code = unary_code(u)?;
        let n = out.shape.size();
        let x = self.in_memory(x)?;
        let result = self.scratch_array(n, types::F64)?;
        let code = self.b.ins().iconst(types::I32, i64::from(code));
        let count = self.b.ins().iconst(types::I64, i64::try_from(n).ok()?);
        let round = self.b.ins().iconst(types::I32, round_f32);
        self.call_void(UNARY_LANES, &[code, x.at, result.at, count, round])?;
        Some(Val::Mem(result))
    }

    /// The table of the element of an operand of `shape` that each element of a result of
    /// shape `out` reads (broadcasting), kept with the code.
    fn broadcast_table(&mut self, shape: &Shape, out: &Shape) -> Option<Value> {
        let numbers = HostData::F64((0..shape.size()).map(|i| i as f64).collect());
        let positions = broadcast_values(
            HostValue {
                data: &numbers,
                shape,
            },
            out,
        );
        let entries = positions
            .into_iter()
            .map(|p| u32::try_from(p as usize).ok())
            .collect::<Option<Vec<u32>>>()?;
        (entries.len() == out.size()).then(|| self.table(entries))
    }

    /// A layout op (reshape, broadcast, transpose, concatenation, slices, gathers) whose
    /// result or an operand is in memory: a reshape of an array is the array itself; a small
    /// result reads its elements at positions known now; a large one is copied from each
    /// operand through tables of (result, operand) positions, zeros where `pad_slice` puts
    /// them.
    pub(super) fn layout_in_memory(
        &mut self,
        op: &Op,
        operands: &[&Val],
        shapes: &[&Shape],
        out: &TensorType,
    ) -> Option<Val> {
        let n = out.shape.size();
        if let (Op::Reshape { .. }, [Val::Mem(m)]) = (op, operands) {
            if m.len == n {
                return Some(Val::Mem(*m));
            }
        }
        let sources = element_sources(op, shapes, &out.shape)?;
        if sources.len() != n {
            return None;
        }
        let ty = super::word(out.dtype);
        if n <= REGISTER_ELEMENTS {
            let mut values = Vec::with_capacity(n);
            for source in sources {
                values.push(match source {
                    Some((k, i)) => self.element_at(operands.get(k)?, i)?,
                    None => self.zero(ty),
                });
            }
            return Some(Val::Regs(values));
        }
        let result = self.scratch_array(n, ty)?;
        let mut zeros = Vec::new();
        let mut moves: Vec<(Vec<u32>, Vec<u32>)> = vec![(Vec::new(), Vec::new()); operands.len()];
        for (to, source) in sources.into_iter().enumerate() {
            let to = u32::try_from(to).ok()?;
            match source {
                Some((k, i)) => {
                    let (dst, src) = moves.get_mut(k)?;
                    dst.push(to);
                    src.push(u32::try_from(i).ok()?);
                }
                None => zeros.push(to),
            }
        }
        for (k, (dst, src)) in moves.into_iter().enumerate() {
            if dst.is_empty() {
                continue;
            }
            let from = self.in_memory(operands.get(k)?)?;
            let count = dst.len();
            // A run of consecutive positions on both sides (a slice of rows, one part of a
            // concatenation) is a plain copy.
            let offset_run = dst.iter().zip(&src).all(|(&d, &s)| {
                i64::from(d) - i64::from(s) == i64::from(dst[0]) - i64::from(src[0])
            }) && dst.windows(2).all(|w| w[1] == w[0] + 1)
                && src.windows(2).all(|w| w[1] == w[0] + 1);
            if offset_run {
                let (d0, s0) = (i64::from(dst[0]), i64::from(src[0]));
                let to = self.b.ins().iadd_imm_s(result.at, d0 * 8);
                let at = self.b.ins().iadd_imm_s(from.at, s0 * 8);
                self.for_each(count, |e, i| {
                    let v = e.load_indexed(ty, at, i);
                    e.store_indexed(v, to, i);
                    Some(())
                })?;
                continue;
            }
            let (dst, src) = (self.table(dst), self.table(src));
            self.for_each(count, |e, i| {
                let (d, s) = (e.table_entry(dst, i), e.table_entry(src, i));
                let v = e.load_indexed(ty, from.at, s);
                e.store_indexed(v, result.at, d);
                Some(())
            })?;
        }
        if !zeros.is_empty() {
            let count = zeros.len();
            let dst = self.table(zeros);
            self.for_each(count, |e, i| {
                let d = e.table_entry(dst, i);
                let zero = e.zero(ty);
                e.store_indexed(zero, result.at, d);
                Some(())
            })?;
        }
        Some(Val::Mem(result))
    }

    /// A reduction of an operand in memory: each group of reduced elements (all of the same
    /// length) summed in the blocked order of numerics.md §1.5 — blocks of [`SUM_BLOCK`], eight
    /// accumulators per block, the block sums combined by the pairwise tree — or folded with
    /// `maximum`/`minimum` in order, then rounded to the result's dtype; integers fold in
    /// order with wrapping sums ([`Emitter::int_fold`]).
    pub(super) fn reduce_in_memory(
        &mut self,
        reducer: Reducer,
        x: &Val,
        (shape, axes): (&Shape, &[usize]),
        out: &TensorType,
    ) -> Option<Val> {
        let groups_count = out.shape.size();
        let groups = reduced_groups(shape, axes, groups_count)?;
        let m = groups.first().map_or(0, Vec::len);
        if groups.iter().any(|g| g.len() != m) {
            return None;
        }
        let x = self.in_memory(x)?;
        // Element `t` of group `g` is at `g * m + t` when the groups are consecutive runs, else
        // at `table[g * m + t]`.
        let consecutive = groups
            .iter()
            .flatten()
            .enumerate()
            .all(|(position, &flat)| position == flat);
        let table = if consecutive {
            None
        } else {
            let entries = groups
                .into_iter()
                .flatten()
                .map(|flat| u32::try_from(flat).ok())
                .collect::<Option<Vec<u32>>>()?;
            Some(self.table(entries))
        };
        let integer = out.dtype.is_integer();
        let blocks = m.div_ceil(SUM_BLOCK);
        if blocks > MAX_SUM_BLOCKS && !integer {
            return None;
        }
        let one_group = |e: &mut Self, g: Value| -> Option<Value> {
            let first = e.b.ins().imul_imm_s(g, i64::try_from(m).ok()?);
            let read = |e: &mut Self, position: Value| match table {
                None => e.load_indexed(x.ty, x.at, position),
                Some(table) => {
                    let flat = e.table_entry(table, position);
                    e.load_indexed(x.ty, x.at, flat)
                }
            };
            let v = match reducer {
                _ if integer => {
                    let start = Self::int_fold(reducer);
                    let acc = e.b.declare_var(types::I64);
                    let init = e.b.ins().iconst(types::I64, start);
                    e.b.def_var(acc, init);
                    e.for_each(m, |e, t| {
                        let position = e.b.ins().iadd(first, t);
                        let v = read(e, position);
                        let current = e.b.use_var(acc);
                        let next = e.int_fold_step(reducer, current, v);
                        e.b.def_var(acc, next);
                        Some(())
                    })?;
                    e.b.use_var(acc)
                }
                Reducer::Sum | Reducer::Mean => {
                    let sum = e.group_sum(first, m, &read)?;
                    if reducer == Reducer::Mean {
                        let count = e.b.ins().f64const(m as f64);
                        e.b.ins().fdiv(sum, count)
                    } else {
                        sum
                    }
                }
                Reducer::Max | Reducer::Min => {
                    let (start, f) = if reducer == Reducer::Max {
                        (f64::NEG_INFINITY, MAXIMUM)
                    } else {
                        (f64::INFINITY, MINIMUM)
                    };
                    let acc = e.b.declare_var(types::F64);
                    let init = e.b.ins().f64const(start);
                    e.b.def_var(acc, init);
                    e.for_each(m, |e, t| {
                        let position = e.b.ins().iadd(first, t);
                        let v = read(e, position);
                        let current = e.b.use_var(acc);
                        let next = e.call(f, &[current, v])?;
                        e.b.def_var(acc, next);
                        Some(())
                    })?;
                    e.b.use_var(acc)
                }
            };
            Some(e.round(out.dtype, v))
        };
        if groups_count == 1 {
            let zero = self.b.ins().iconst(types::I64, 0);
            return Some(Val::Regs(vec![one_group(self, zero)?]));
        }
        let result = self.scratch_array(groups_count, super::word(out.dtype))?;
        self.for_each(groups_count, |e, g| {
            let v = one_group(e, g)?;
            e.store_indexed(v, result.at, g);
            Some(())
        })?;
        Some(Val::Mem(result))
    }

    /// The blocked sum of the `m` elements at positions `first..first + m`, read by `read`.
    fn group_sum(
        &mut self,
        first: Value,
        m: usize,
        read: &dyn Fn(&mut Self, Value) -> Value,
    ) -> Option<Value> {
        let full = m / SUM_BLOCK;
        let last = m % SUM_BLOCK;
        let mut block_sums = Vec::with_capacity(full + 1);
        if full > 0 {
            // The full blocks' sums go through a stack array, filled by a loop over blocks.
            let sums = self.stack_array(full);
            self.for_each(full, |e, q| {
                let start = e.b.ins().imul_imm_s(q, SUM_BLOCK as i64);
                let start = e.b.ins().iadd(first, start);
                let s = e.block_sum(start, SUM_BLOCK, read)?;
                e.store_indexed(s, sums, q);
                Some(())
            })?;
            for q in 0..full {
                block_sums.push(self.b.ins().load(
                    types::F64,
                    Self::flags_mem(),
                    sums,
                    super::offset(q),
                ));
            }
        }
        if last > 0 || m == 0 {
            let start = self
                .b
                .ins()
                .iadd_imm_s(first, i64::try_from(full * SUM_BLOCK).ok()?);
            block_sums.push(self.block_sum(start, last, read)?);
        }
        // The pairwise tree of numerics.md §4.4, as `quabla_ir::eval::pairwise_sum`.
        let mut n = block_sums.len();
        while n > 1 {
            let half = n / 2;
            for i in 0..half {
                block_sums[i] = self.b.ins().fadd(block_sums[2 * i], block_sums[2 * i + 1]);
            }
            if n % 2 == 1 {
                block_sums[half] = block_sums[n - 1];
                n = half + 1;
            } else {
                n = half;
            }
        }
        block_sums.first().copied()
    }

    /// The sum of one block of `len` (at most [`SUM_BLOCK`]) elements from position `start`:
    /// element `k` into accumulator `k % 8`, the accumulators combined as
    /// `((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))`.
    fn block_sum(
        &mut self,
        start: Value,
        len: usize,
        read: &dyn Fn(&mut Self, Value) -> Value,
    ) -> Option<Value> {
        let zero = self.b.ins().f64const(0.0);
        let acc: Vec<_> = (0..SUM_LANES)
            .map(|_| {
                let var = self.b.declare_var(types::F64);
                self.b.def_var(var, zero);
                var
            })
            .collect();
        let rounds = len / SUM_LANES;
        if rounds > 0 {
            self.for_each(rounds, |e, c| {
                let base = e.b.ins().imul_imm_s(c, SUM_LANES as i64);
                let base = e.b.ins().iadd(start, base);
                for (lane, &var) in acc.iter().enumerate() {
                    let position = e.b.ins().iadd_imm_s(base, lane as i64);
                    let v = read(e, position);
                    let current = e.b.use_var(var);
                    let next = e.b.ins().fadd(current, v);
                    e.b.def_var(var, next);
                }
                Some(())
            })?;
        }
        for (lane, &var) in acc.iter().enumerate().take(len % SUM_LANES) {
            let position = self
                .b
                .ins()
                .iadd_imm_s(start, i64::try_from(rounds * SUM_LANES + lane).ok()?);
            let v = read(self, position);
            let current = self.b.use_var(var);
            let next = self.b.ins().fadd(current, v);
            self.b.def_var(var, next);
        }
        let a: Vec<Value> = acc.iter().map(|&var| self.b.use_var(var)).collect();
        let mut add = |x: Value, y: Value| self.b.ins().fadd(x, y);
        let (s01, s23) = (add(a[0], a[1]), add(a[2], a[3]));
        let (s45, s67) = (add(a[4], a[5]), add(a[6], a[7]));
        let (low, high) = (add(s01, s23), add(s45, s67));
        Some(add(low, high))
    }

    /// A float64 `matmul` by the CPU kernel's own function (through [`MATMUL`]) into scratch
    /// memory; the operand and result shapes are in a table the call reads.
    pub(super) fn matmul(
        &mut self,
        (a, b): (&Val, &Val),
        (a_dims, b_dims): (&[usize], &[usize]),
        out_dims: &[usize],
    ) -> Option<Val> {
        let (a, b) = (self.in_memory(a)?, self.in_memory(b)?);
        let n: usize = out_dims.iter().product();
        let result = self.scratch_array(n, types::F64)?;
        let mut entries = Vec::new();
        for dims in [a_dims, b_dims, out_dims] {
            entries.push(u32::try_from(dims.len()).ok()?);
            for &d in dims {
                entries.push(u32::try_from(d).ok()?);
            }
        }
        let shapes = self.table(entries);
        let status = self.call_returning(MATMUL, &[a.at, b.at, result.at, shapes], types::I32)?;
        self.exit_on_failure(status);
        Some(Val::Mem(result))
    }

    /// Element `index` of an array of `dtype` at `at` as the code holds it ([`super::word`]):
    /// floats and bools widened to float64 as `View::get_f64` reads them, integers as int64.
    pub(super) fn load_converted(
        &mut self,
        at: Value,
        index: Value,
        dtype: DType,
    ) -> Option<Value> {
        let flags = Self::flags_mem();
        let address = |e: &mut Self, size: i64| {
            let bytes = e.b.ins().imul_imm_s(index, size);
            e.b.ins().iadd(at, bytes)
        };
        Some(match dtype {
            DType::F64 => self.load_indexed(types::F64, at, index),
            DType::I64 => self.load_indexed(types::I64, at, index),
            DType::I32 => {
                let address = address(self, 4);
                self.b.ins().sload32(flags, address, 0)
            }
            DType::F32 => {
                let address = address(self, 4);
                let v = self.b.ins().load(types::F32, flags, address, 0);
                self.b.ins().fpromote(types::F64, v)
            }
            DType::Bool => {
                let address = address(self, 1);
                let v = self.b.ins().load(types::I8, flags, address, 0);
                let holds = self.b.ins().icmp_imm_u(IntCC::NotEqual, v, 0);
                self.select_one_zero(holds)
            }
        })
    }

    /// Stores `v` (a value of `dtype` as the code holds it) as element `index` of an array of
    /// `dtype` at `at`, as `ViewMut::store_f64` stores a float and an integer array holds an
    /// integer.
    pub(super) fn store_converted(
        &mut self,
        v: Value,
        at: Value,
        index: Value,
        dtype: DType,
    ) -> Option<()> {
        let flags = Self::flags_mem();
        let (stored, size) = match dtype {
            DType::F64 => (v, 8),
            DType::F32 => (self.b.ins().fdemote(types::F32, v), 4),
            DType::Bool => {
                let zero = self.b.ins().f64const(0.0);
                let holds = self.b.ins().fcmp(FloatCC::NotEqual, v, zero);
                let one = self.b.ins().iconst(types::I8, 1);
                let none = self.b.ins().iconst(types::I8, 0);
                (self.b.ins().select(holds, one, none), 1)
            }
            DType::I64 => (self.round(dtype, v), 8),
            DType::I32 => {
                let v = self.round(dtype, v);
                let bytes = self.b.ins().imul_imm_s(index, 4);
                let address = self.b.ins().iadd(at, bytes);
                self.b.ins().istore32(flags, v, address, 0);
                return Some(());
            }
        };
        let bytes = self.b.ins().imul_imm_s(index, size);
        let address = self.b.ins().iadd(at, bytes);
        self.b.ins().store(flags, stored, address, 0);
        Some(())
    }

    /// A constant array of more than [`REGISTER_ELEMENTS`] words of type `ty` (their bits),
    /// kept with the code.
    pub(super) fn constant_array(&mut self, words: Vec<u64>, ty: Type) -> Option<Val> {
        let len = words.len();
        let array = words.into_boxed_slice();
        let at = self.b.ins().iconst(types::I64, array.as_ptr() as i64);
        self.tables.constants.push(array);
        Some(Val::Mem(Mem {
            at,
            len,
            home: Home::Given,
            ty,
        }))
    }

    /// Whether `node` is an elementwise node whose result is held in memory and computed in a
    /// loop of its own or fused into its consumer's (a function with vector lanes runs the
    /// interpreter's slice kernel instead).
    pub(super) fn fusable(&self, graph: &quabla_ir::Graph, node: &quabla_ir::Node) -> bool {
        let Some(ew) = EwOp::from_op(&node.op) else {
            return false;
        };
        let lanes = matches!(ew, EwOp::Unary(u) if lanes::has_lanes(u))
            && matches!(node.ty.dtype, DType::F32 | DType::F64)
            && node
                .operands
                .first()
                .is_some_and(|&o| graph.node(o).ty.shape == node.ty.shape);
        node.ty.shape.size() > REGISTER_ELEMENTS && !lanes && node.operands.len() <= 3
    }

    /// The expression of the elementwise `node` over its operands: pending ones (removed from
    /// `pending`) are inlined, the others read from memory or known before the loop.
    pub(super) fn fuse(
        &mut self,
        graph: &quabla_ir::Graph,
        node: &quabla_ir::Node,
        values: &[Val],
        pending: &mut std::collections::HashMap<usize, Fused>,
    ) -> Option<Fused> {
        let ew = Elementwise::of(graph, node)?;
        let out = &node.ty;
        let n = out.shape.size();
        let mut args = Vec::with_capacity(node.operands.len());
        for &o in &node.operands {
            if let Some(inner) = pending.remove(&o.index()) {
                args.push(inner.expr);
                continue;
            }
            let v = values.get(o.index())?;
            let shape = &graph.node(o).ty.shape;
            if v.len() == 1 {
                args.push(Expr::Only(self.element_at(v, 0)?));
                continue;
            }
            let m = self.in_memory(v)?;
            let table = if shape == &out.shape {
                None
            } else {
                Some(self.broadcast_table(shape, &out.shape)?)
            };
            args.push(Expr::Load(m.at, m.ty, table));
        }
        Some(Fused {
            n,
            expr: Expr::Op { ew, args },
        })
    }

    /// Computes a pending result into a fresh array, one loop over its elements.
    pub(super) fn materialize(&mut self, fused: &Fused) -> Option<Val> {
        let Expr::Op { ew, .. } = &fused.expr else {
            return None;
        };
        let result = self.scratch_array(fused.n, super::word(ew.out))?;
        self.for_each(fused.n, |e, i| {
            let v = e.expression(&fused.expr, i)?;
            e.store_indexed(v, result.at, i);
            Some(())
        })?;
        Some(Val::Mem(result))
    }

    /// Element `i` of `expr`.
    fn expression(&mut self, expr: &Expr, i: Value) -> Option<Value> {
        Some(match expr {
            Expr::Load(at, ty, None) => self.load_indexed(*ty, *at, i),
            Expr::Load(at, ty, Some(table)) => {
                let j = self.table_entry(*table, i);
                self.load_indexed(*ty, *at, j)
            }
            Expr::Only(v) => *v,
            Expr::Op { ew, args } => {
                let mut operands = [None; 3];
                for (k, a) in args.iter().enumerate().take(3) {
                    operands[k] = Some(self.expression(a, i)?);
                }
                self.elementwise(*ew, operands)?
            }
        })
    }
}
