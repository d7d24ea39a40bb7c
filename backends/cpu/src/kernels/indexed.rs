//! `index_gather` and `index_scatter` on float and bool values (integer-valued nodes take the
//! reference path of `exec::run_integer_node`). The element loops are
//! `quabla_ir::indexed::IndexLayout`'s, shared with the reference evaluator, so a folded value
//! and a computed one agree bit for bit; float scatters combine in float64 and round each
//! result once, like `scatter_add`.

use crate::buffer::{View, ViewMut};
use crate::kernels::{internal, scratch, scratch_oom};
use quabla_backend::Result;
use quabla_ir::indexed::{combine_f64, IndexLayout};
use quabla_ir::ScatterMode;

/// The index tensor as int64 values.
fn indices(idx: View<'_>) -> Result<Vec<i64>> {
    Ok(match idx {
        View::I32(v) => v.iter().map(|&i| i64::from(i)).collect(),
        View::I64(v) => v.to_vec(),
        _ => return Err(internal("indices of an indexed op are not integers")),
    })
}

/// `index_gather(x, idx)` along `axis` with `batch` leading batch axes.
pub(crate) fn index_gather(
    (x, dims): (View<'_>, &[usize]),
    (idx, idx_dims): (View<'_>, &[usize]),
    (axis, batch): (usize, usize),
    out: ViewMut<'_>,
) -> Result<()> {
    let layout = IndexLayout::new(dims, idx_dims, axis, batch);
    let idx = indices(idx)?;
    match (x, out) {
        (View::F32(s), ViewMut::F32(d)) => layout.gather(s, &idx, d),
        (View::F64(s), ViewMut::F64(d)) => layout.gather(s, &idx, d),
        (View::Bool(s), ViewMut::Bool(d)) => layout.gather(s, &idx, d),
        (View::I32(s), ViewMut::I32(d)) => layout.gather(s, &idx, d),
        (View::I64(s), ViewMut::I64(d)) => layout.gather(s, &idx, d),
        _ => return Err(internal("operand and result dtypes differ")),
    }
    Ok(())
}

/// `index_scatter(base, idx, updates)` combining by `mode`.
pub(crate) fn index_scatter(
    (base, dims): (View<'_>, &[usize]),
    (idx, idx_dims): (View<'_>, &[usize]),
    updates: View<'_>,
    (axis, batch, mode): (usize, usize, ScatterMode),
    out: ViewMut<'_>,
) -> Result<()> {
    let layout = IndexLayout::new(dims, idx_dims, axis, batch);
    let idx = indices(idx)?;
    match (base, updates, out) {
        (View::Bool(b), View::Bool(u), ViewMut::Bool(d)) if mode == ScatterMode::Set => {
            d.copy_from_slice(b);
            layout.scatter(d, &idx, u, |_, u| u);
        }
        (_, _, ViewMut::F64(d)) => {
            base.load_f64(0, d);
            let u = updates.as_f64().map_err(scratch_oom)?;
            layout.scatter(d, &idx, &u, combine_f64(mode));
        }
        (_, _, ViewMut::F32(d)) => {
            let mut acc = scratch(d.len())?;
            base.load_f64(0, &mut acc);
            let u = updates.as_f64().map_err(scratch_oom)?;
            layout.scatter(&mut acc, &idx, &u, combine_f64(mode));
            ViewMut::F32(d).store_f64(0, &acc);
        }
        _ => return Err(internal("index_scatter of this dtype has no float kernel")),
    }
    Ok(())
}
