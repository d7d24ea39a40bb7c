//! The value semantics of the indexed ops [`Op::IndexGather`] and [`Op::IndexScatter`]: their
//! layout ([`IndexLayout`]), their type rule, and the element loops that the reference
//! evaluator and the CPU backend share, so that a folded value and a computed one agree bit
//! for bit.
//!
//! Both ops take their indices as a tensor (int32 or int64) and never fail on a value: an
//! index outside `[0, n)` reads zero (gather) or is dropped (scatter). Which user-facing rule
//! applies to out-of-range indices (clamping for reads, dropping for updates, Python's
//! negative indices) is the facade's business, expressed with ordinary integer ops before these
//! nodes; keeping the nodes themselves exact transposes of each other makes gather's VJP a
//! scatter-add and scatter-add's a gather with no correction terms.

use crate::error::{IrError, Result};
use crate::eval::{maximum_ieee, minimum_ieee, HostValue};
use crate::graph::TensorType;
use crate::op::{Op, ScatterMode};
use crate::{DType, HostData, Shape};

/// The extents of an indexed op over `x: [B.., P.., n, Q..]` and `idx: [B.., J..]`, each
/// group flattened: `outer` = size of `B`, `pre` = size of `P`, `n`, `picks` = size of `J`,
/// `inner` = size of `Q`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexLayout {
    pub outer: usize,
    pub pre: usize,
    pub n: usize,
    pub picks: usize,
    pub inner: usize,
}

impl IndexLayout {
    /// The layout of an op on data of extents `data` along `axis` with `batch` leading batch
    /// axes, indexed by indices of extents `idx`.
    pub fn new(data: &[usize], idx: &[usize], axis: usize, batch: usize) -> IndexLayout {
        IndexLayout {
            outer: data[..batch].iter().product(),
            pre: data[batch..axis].iter().product(),
            n: data[axis],
            picks: idx[batch..].iter().product(),
            inner: data[axis + 1..].iter().product(),
        }
    }

    /// Calls `f(index, data_offset, picked_offset)` for every picked run of `inner`
    /// elements, in row-major order of the picked (gathered, or update) tensor; runs whose
    /// index is out of range are skipped.
    fn for_each_run(&self, idx: &[i64], mut f: impl FnMut(usize, usize)) {
        let mut picked = 0;
        for b in 0..self.outer {
            for p in 0..self.pre {
                let row = (b * self.pre + p) * self.n;
                for j in 0..self.picks {
                    let i = idx[b * self.picks + j];
                    if i >= 0 && (i as u64) < self.n as u64 {
                        f((row + i as usize) * self.inner, picked);
                    }
                    picked += self.inner;
                }
            }
        }
    }

    /// Gathers into `out` (the picked tensor), zero where an index is out of range.
    pub fn gather<T: Copy + Default>(&self, x: &[T], idx: &[i64], out: &mut [T]) {
        out.fill(T::default());
        let inner = self.inner;
        self.for_each_run(idx, |from, to| {
            out[to..to + inner].copy_from_slice(&x[from..from + inner]);
        });
    }

    /// Combines the picked tensor `updates` into `acc` (a copy of the base) with `combine`, in
    /// row-major order of the updates, dropping out-of-range indices.
    pub fn scatter<T: Copy>(
        &self,
        acc: &mut [T],
        idx: &[i64],
        updates: &[T],
        combine: impl Fn(T, T) -> T,
    ) {
        let inner = self.inner;
        self.for_each_run(idx, |to, from| {
            for (a, &u) in acc[to..to + inner]
                .iter_mut()
                .zip(&updates[from..from + inner])
            {
                *a = combine(*a, u);
            }
        });
    }
}

/// The float combination of a scatter mode (float64 accumulation, each result rounded once to
/// the node dtype afterwards, like `scatter_add`).
pub fn combine_f64(mode: ScatterMode) -> fn(f64, f64) -> f64 {
    match mode {
        ScatterMode::Set => |_, u| u,
        ScatterMode::Add => |a, u| a + u,
        ScatterMode::Mul => |a, u| a * u,
        ScatterMode::Min => minimum_ieee,
        ScatterMode::Max => maximum_ieee,
    }
}

/// The integer combination of a scatter mode (int64, wrapping; a narrower dtype wraps once at
/// the end, which gives the same bits as wrapping at every step).
pub fn combine_i64(mode: ScatterMode) -> fn(i64, i64) -> i64 {
    match mode {
        ScatterMode::Set => |_, u| u,
        ScatterMode::Add => i64::wrapping_add,
        ScatterMode::Mul => i64::wrapping_mul,
        ScatterMode::Min => i64::min,
        ScatterMode::Max => i64::max,
    }
}

/// The type rule of the indexed ops.
pub(crate) fn infer(op: &Op, operands: &[&TensorType]) -> Result<TensorType> {
    let name = op.name();
    let (axis, batch) = match op {
        Op::IndexGather { axis, batch } | Op::IndexScatter { axis, batch, .. } => (*axis, *batch),
        _ => return Err(IrError::verify(format!("{name} is not an indexed op"))),
    };
    let (x, idx) = (operands[0], operands[1]);
    if !idx.dtype.is_integer() {
        return Err(IrError::WrongDtypeKind {
            op: name.into(),
            dtype: idx.dtype,
            fix: "indices must be int32 or int64; convert with astype(quabla.int64) first".into(),
        });
    }
    let (xd, id) = (x.shape.dims(), idx.shape.dims());
    if axis >= xd.len() || batch > axis || batch > id.len() || xd[..batch] != id[..batch] {
        return Err(IrError::shape(
            name,
            format!(
                "axis {axis} with {batch} batch axes does not fit data of shape {} and indices of shape {}",
                x.shape, idx.shape
            ),
        ));
    }
    let picked: Vec<usize> = xd[..axis]
        .iter()
        .chain(&id[batch..])
        .chain(&xd[axis + 1..])
        .copied()
        .collect();
    let picked = Shape::new(picked)?;
    match op {
        Op::IndexScatter { mode, .. } => {
            let upd = operands[2];
            if upd.dtype != x.dtype {
                return Err(IrError::DtypeMismatch {
                    op: name.into(),
                    lhs: x.dtype,
                    rhs: upd.dtype,
                });
            }
            if *mode != ScatterMode::Set && x.dtype == DType::Bool {
                return Err(IrError::BoolOperand { op: name.into() });
            }
            if upd.shape != picked {
                return Err(IrError::shape(
                    name,
                    format!(
                        "updates of shape {} do not match the selected shape {picked}",
                        upd.shape
                    ),
                ));
            }
            Ok(TensorType {
                dtype: x.dtype,
                shape: x.shape.clone(),
                weak: x.weak && upd.weak,
            })
        }
        _ => Ok(TensorType {
            dtype: x.dtype,
            shape: picked,
            weak: x.weak,
        }),
    }
}

/// The reference value of an indexed op (`None` for any other op).
pub(crate) fn evaluate(op: &Op, operands: &[HostValue<'_>], out: &TensorType) -> Option<HostData> {
    let (axis, batch) = match op {
        Op::IndexGather { axis, batch } | Op::IndexScatter { axis, batch, .. } => (*axis, *batch),
        _ => return None,
    };
    let layout = IndexLayout::new(
        operands[0].shape.dims(),
        operands[1].shape.dims(),
        axis,
        batch,
    );
    let idx = operands[1].data.to_i64_vec();
    let x = operands[0].data;
    let size = out.shape.size();
    Some(match (op, x) {
        (Op::IndexGather { .. }, HostData::Bool(v)) => {
            let mut o = vec![false; size];
            layout.gather(v, &idx, &mut o);
            HostData::Bool(o.into())
        }
        (Op::IndexGather { .. }, _) if x.dtype().is_integer() => {
            let mut o = vec![0i64; size];
            layout.gather(&x.to_i64_vec(), &idx, &mut o);
            HostData::from_i64(out.dtype, o)
        }
        (Op::IndexGather { .. }, _) => {
            let mut o = vec![0f64; size];
            layout.gather(&x.to_f64_vec(), &idx, &mut o);
            HostData::from_f64(out.dtype, o)
        }
        (Op::IndexScatter { .. }, HostData::Bool(v)) => {
            let mut acc = v.to_vec();
            let HostData::Bool(u) = operands[2].data else {
                return None;
            };
            layout.scatter(&mut acc, &idx, u, |_, u| u);
            HostData::Bool(acc.into())
        }
        (Op::IndexScatter { mode, .. }, _) if x.dtype().is_integer() => {
            let mut acc = x.to_i64_vec();
            layout.scatter(
                &mut acc,
                &idx,
                &operands[2].data.to_i64_vec(),
                combine_i64(*mode),
            );
            HostData::from_i64(out.dtype, acc)
        }
        (Op::IndexScatter { mode, .. }, _) => {
            let mut acc = x.to_f64_vec();
            layout.scatter(
                &mut acc,
                &idx,
                &operands[2].data.to_f64_vec(),
                combine_f64(*mode),
            );
            HostData::from_f64(out.dtype, acc)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_reads_zero_and_scatter_drops_out_of_range() {
        // x: [2, 3] gathered along axis 1 by [2, -1, 3, 0].
        let l = IndexLayout::new(&[2, 3], &[4], 1, 0);
        let x = [1, 2, 3, 4, 5, 6];
        let mut out = [9; 8];
        l.gather(&x, &[2, -1, 3, 0], &mut out);
        assert_eq!(out, [3, 0, 0, 1, 6, 0, 0, 4]);
        let mut acc = x;
        l.scatter(
            &mut acc,
            &[2, -1, 3, 2],
            &[10, 20, 30, 40, 50, 60, 70, 80],
            |a, u| a + u,
        );
        assert_eq!(acc, [1, 2, 3 + 10 + 40, 4, 5, 6 + 50 + 80]);
    }

    #[test]
    fn batch_axes_pair_data_and_indices() {
        // x: [2, 3] with one batch axis, idx: [2, 2]: row b reads x[b, idx[b, j]].
        let l = IndexLayout::new(&[2, 3], &[2, 2], 1, 1);
        let mut out = [0; 4];
        l.gather(&[1, 2, 3, 4, 5, 6], &[2, 0, 1, 1], &mut out);
        assert_eq!(out, [3, 1, 5, 5]);
    }
}
