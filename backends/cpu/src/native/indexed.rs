//! `index_gather` and `index_scatter` with traced indices (`dynamic_slice`, `take`, `x[i]`,
//! `dynamic_update_slice`, `x.at[i].set/add/...`): the element loops of
//! `quabla_ir::indexed::IndexLayout`, which the interpreter runs too. An index outside
//! `[0, n)` reads zero (gather) or is dropped (scatter); a scatter combines the updates into a
//! copy of the base in row-major order of the updates, floats in float64 rounded once to the
//! dtype at the end and integers wrapping, as `quabla_ir::indexed::evaluate` does.
//!
//! The data is read from memory at an address computed from the index (a value in registers is
//! stored into scratch memory first); an index out of range is replaced by 0 for the access and
//! its result selected away, so the code has no branch per index. Small results are unrolled,
//! large ones are loops over the runs of the layout.

use super::*;
use quabla_ir::indexed::IndexLayout;
use quabla_ir::ScatterMode;

impl Emitter<'_, '_> {
    /// Whether the int64 index `i` is in `[0, n)` (a condition), and the index to access:
    /// `i` when it is, else 0.
    fn checked_index(&mut self, i: Value, n: usize) -> Option<(Value, Value)> {
        let n = i64::try_from(n).ok()?;
        let inside = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, i, n);
        let zero = self.b.ins().iconst(types::I64, 0);
        Some((inside, self.b.ins().select(inside, i, zero)))
    }

    /// Runs `body` once per position of nested counted loops over `extents` (outermost
    /// first), with the position's coordinate in each (an extent of 1 is no loop: its
    /// coordinate is 0).
    fn nested_loops(
        &mut self,
        extents: &[usize],
        body: impl FnOnce(&mut Self, &[Value]) -> Option<()>,
    ) -> Option<()> {
        let mut loops = Vec::with_capacity(extents.len());
        let mut coordinates = Vec::with_capacity(extents.len());
        for &extent in extents {
            if extent == 1 {
                coordinates.push(self.b.ins().iconst(types::I64, 0));
                continue;
            }
            let bound = self.b.ins().iconst(types::I64, i64::try_from(extent).ok()?);
            let (trip, header, exit) = self.counted_loop(bound);
            coordinates.push(self.b.use_var(trip));
            loops.push((trip, header, exit));
        }
        body(self, &coordinates)?;
        for (trip, header, exit) in loops.into_iter().rev() {
            self.next_trip(trip, header);
            self.b.switch_to_block(exit);
        }
        Some(())
    }

    /// `a * k + b` for a constant `k`.
    fn scaled_add(&mut self, a: Value, k: usize, b: Value) -> Option<Value> {
        let scaled = self.b.ins().imul_imm_s(a, i64::try_from(k).ok()?);
        Some(self.b.ins().iadd(scaled, b))
    }

    /// At position `c` = (batch, leading position, pick) of the loops over a layout with
    /// extents `(pre, n, picks, inner)` and indices at `idx_at`: whether the picked index is in
    /// `[0, n)`, the first element of the indexed row (index 0 when outside) and the first
    /// element of the picked row, as element numbers. A gather reads the first and writes the
    /// second; a scatter the other way round.
    fn picked_rows(
        &mut self,
        c: &[Value],
        idx_at: Value,
        (pre, n, picks, inner): (usize, usize, usize, usize),
    ) -> Option<(Value, Value, Value)> {
        let (b, p, j) = (c[0], c[1], c[2]);
        let i = self.scaled_add(b, picks, j)?;
        let i = self.load_indexed(types::I64, idx_at, i);
        let (inside, at) = self.checked_index(i, n)?;
        let row = self.scaled_add(b, pre, p)?;
        let inner = i64::try_from(inner).ok()?;
        let indexed = self.scaled_add(row, n, at)?;
        let indexed = self.b.ins().imul_imm_s(indexed, inner);
        let picked = self.scaled_add(row, picks, j)?;
        let picked = self.b.ins().imul_imm_s(picked, inner);
        Some((inside, indexed, picked))
    }

    /// `index_gather` of `x` by `idx` with `layout`, a result of type `out`.
    pub(super) fn index_gather(
        &mut self,
        layout: IndexLayout,
        x: &Val,
        idx: &Val,
        out: &TensorType,
    ) -> Option<Val> {
        let IndexLayout {
            outer,
            pre,
            n,
            picks,
            inner,
        } = layout;
        let size = out.shape.size();
        if outer * pre * picks * inner != size
            || x.len() != outer * pre * n * inner
            || idx.len() != outer * picks
        {
            return None;
        }
        let ty = word(out.dtype);
        let x = self.in_memory(x)?;
        if x.ty != ty {
            return None;
        }
        if size <= REGISTER_ELEMENTS {
            let mut values = Vec::with_capacity(size);
            for b in 0..outer {
                for p in 0..pre {
                    let row = (b * pre + p) * n;
                    for j in 0..picks {
                        let i = self.element_at(idx, b * picks + j)?;
                        let (inside, at) = self.checked_index(i, n)?;
                        let bytes = self.b.ins().imul_imm_s(at, i64::try_from(inner * 8).ok()?);
                        let base = self.b.ins().iadd(x.at, bytes);
                        for t in 0..inner {
                            let v =
                                self.b
                                    .ins()
                                    .load(ty, Self::flags(), base, offset(row * inner + t));
                            let zero = self.zero(ty);
                            values.push(self.b.ins().select(inside, v, zero));
                        }
                    }
                }
            }
            return Some(Val::Regs(values));
        }
        let idx = self.in_memory(idx)?;
        let result = self.scratch_array(size, ty)?;
        self.nested_loops(&[outer, pre, picks], |e, c| {
            let (inside, from, to) = e.picked_rows(c, idx.at, (pre, n, picks, inner))?;
            e.for_each(inner, |e, t| {
                let (from, to) = (e.b.ins().iadd(from, t), e.b.ins().iadd(to, t));
                let v = e.load_indexed(ty, x.at, from);
                let zero = e.zero(ty);
                let v = e.b.ins().select(inside, v, zero);
                e.store_indexed(v, result.at, to);
                Some(())
            })
        })?;
        Some(Val::Mem(result))
    }

    /// `index_scatter` of `updates` into `x` at `idx` with `layout`, combining by `mode`, a
    /// result of type `out`.
    pub(super) fn index_scatter(
        &mut self,
        layout: IndexLayout,
        mode: ScatterMode,
        (x, idx, updates): (&Val, &Val, &Val),
        out: &TensorType,
    ) -> Option<Val> {
        let IndexLayout {
            outer,
            pre,
            n,
            picks,
            inner,
        } = layout;
        let size = out.shape.size();
        if x.len() != size
            || size != outer * pre * n * inner
            || updates.len() != outer * pre * picks * inner
            || idx.len() != outer * picks
        {
            return None;
        }
        let ty = word(out.dtype);
        let acc = self.scratch_array(size, ty)?;
        self.write(x, acc)?;
        if updates.len() <= REGISTER_ELEMENTS {
            let mut picked = 0;
            for b in 0..outer {
                for p in 0..pre {
                    let row = (b * pre + p) * n;
                    for j in 0..picks {
                        let i = self.element_at(idx, b * picks + j)?;
                        let (inside, at) = self.checked_index(i, n)?;
                        let bytes = self.b.ins().imul_imm_s(at, i64::try_from(inner * 8).ok()?);
                        let base = self.b.ins().iadd(acc.at, bytes);
                        for t in 0..inner {
                            let place = offset(row * inner + t);
                            let old = self.b.ins().load(ty, Self::flags(), base, place);
                            let u = self.element_at(updates, picked + t)?;
                            let new = self.combine(mode, out.dtype, old, u)?;
                            // An index out of range writes the old value back.
                            let v = self.b.ins().select(inside, new, old);
                            self.b.ins().store(Self::flags(), v, base, place);
                        }
                        picked += inner;
                    }
                }
            }
        } else {
            let (idx, updates) = (self.in_memory(idx)?, self.in_memory(updates)?);
            self.nested_loops(&[outer, pre, picks], |e, c| {
                let (inside, to, from) = e.picked_rows(c, idx.at, (pre, n, picks, inner))?;
                e.for_each(inner, |e, t| {
                    let (from, to) = (e.b.ins().iadd(from, t), e.b.ins().iadd(to, t));
                    let old = e.load_indexed(ty, acc.at, to);
                    let u = e.load_indexed(updates.ty, updates.at, from);
                    let new = e.combine(mode, out.dtype, old, u)?;
                    let v = e.b.ins().select(inside, new, old);
                    e.store_indexed(v, acc.at, to);
                    Some(())
                })
            })?;
        }
        // Float32 results are combined in float64 and rounded once, at the end.
        if out.dtype == DType::F32 {
            self.for_each(size, |e, i| {
                let v = e.load_indexed(ty, acc.at, i);
                let v = e.round(DType::F32, v);
                e.store_indexed(v, acc.at, i);
                Some(())
            })?;
        }
        self.held(Val::Mem(acc))
    }

    /// `combine_f64(mode)` or `combine_i64(mode)` (wrapped to `dtype`) of an accumulated
    /// element and an update.
    fn combine(&mut self, mode: ScatterMode, dtype: DType, acc: Value, u: Value) -> Option<Value> {
        if dtype.is_integer() {
            let v = match mode {
                ScatterMode::Set => u,
                ScatterMode::Add => self.b.ins().iadd(acc, u),
                ScatterMode::Mul => self.b.ins().imul(acc, u),
                ScatterMode::Min => self.int_fold_step(Reducer::Min, acc, u),
                ScatterMode::Max => self.int_fold_step(Reducer::Max, acc, u),
            };
            // Wrapping every step gives the bits of wrapping once at the end.
            return Some(self.int_to(dtype, v));
        }
        Some(match mode {
            ScatterMode::Set => u,
            ScatterMode::Add => self.b.ins().fadd(acc, u),
            ScatterMode::Mul => self.b.ins().fmul(acc, u),
            ScatterMode::Min => self.call(MINIMUM, &[acc, u])?,
            ScatterMode::Max => self.call(MAXIMUM, &[acc, u])?,
        })
    }
}
