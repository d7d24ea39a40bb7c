//! Forward and reverse rules of the indexed ops, `index_gather` and `index_scatter` (one mode
//! each: `set`, `add`, `mul`, `min`, `max`). Every rule is built from the same two ops and
//! elementwise ops, so derivatives of every order follow by applying the rules again.
//!
//! - `index_gather` is linear in the data: its VJP is a scatter-add of the cotangent, and the
//!   VJP of `index_scatter(add)` is a gather. The indices never carry a derivative.
//! - `set`: an overwritten base element gets no cotangent; of several updates sent to one
//!   destination only the last one (the one that lands) gets it.
//! - `min`/`max`: the derivative flows to every value equal to the result at a destination (the
//!   base element and the updates), shared equally among ties (JAX's convention).
//! - `mul`: the update's derivative assumes the indices are unique (as JAX's does): with two
//!   updates to one destination, each update's derivative omits the other's factor. The base's
//!   derivative is exact.

use crate::helpers::zeros_like;
use quabla_ir::{
    Comparison, DType, GraphBuilder, HostData, NodeId, Op, Result, ScatterMode, Shape,
};

/// `index_gather(x, idx)` with the attributes of an indexed node.
fn gather(b: &mut GraphBuilder, x: NodeId, idx: NodeId, at: (usize, usize)) -> Result<NodeId> {
    b.index_gather(x, idx, at.0, at.1)
}

fn scatter(
    b: &mut GraphBuilder,
    base: NodeId,
    idx: NodeId,
    upd: NodeId,
    at: (usize, usize),
    mode: ScatterMode,
) -> Result<NodeId> {
    b.index_scatter(base, idx, upd, at, mode)
}

/// `a == c` as 0/1 in the dtype of `a`.
fn eq_as_float(b: &mut GraphBuilder, a: NodeId, c: NodeId) -> Result<NodeId> {
    let dtype = b.ty(a).dtype;
    let m = b.compare(Comparison::Equal, a, c)?;
    b.astype(m, dtype)
}

/// The tie weights of `min`/`max`: `(mask_base, mask_updates, count)`, where a mask is 1 at a
/// value equal to the result at its destination and `count` is the number of such values per
/// destination of the base.
fn extremum_masks(
    b: &mut GraphBuilder,
    x: &[NodeId],
    out: NodeId,
    at: (usize, usize),
) -> Result<(NodeId, NodeId, NodeId)> {
    let mask_base = eq_as_float(b, x[0], out)?;
    let landed = gather(b, out, x[1], at)?;
    let mask_upd = eq_as_float(b, x[2], landed)?;
    let zero = zeros_like(b, x[0])?;
    let hits = scatter(b, zero, x[1], mask_upd, at, ScatterMode::Add)?;
    let count = b.add(mask_base, hits)?;
    Ok((mask_base, mask_upd, count))
}

/// For `set`: 1 (as bool) at each update that lands, false at those overwritten by a later
/// update to the same destination. Each update is numbered by its position among the picks
/// `J` of its batch row; scattering the numbers with `set` leaves the last one at each
/// destination, and an update lands when it reads its own number back.
fn landing_mask(b: &mut GraphBuilder, x: &[NodeId], at: (usize, usize)) -> Result<NodeId> {
    let (axis, batch) = at;
    let data = b.ty(x[0]).shape.dims().to_vec();
    let idx = b.ty(x[1]).shape.dims().to_vec();
    let picks: Vec<usize> = idx[batch..].to_vec();
    let count: usize = picks.iter().product();
    let numbers = b.constant(
        HostData::from_i64(DType::I64, (0..count as i64).collect::<Vec<_>>()),
        Shape::new(picks.clone())?,
        false,
    )?;
    let numbers = b.broadcast_to(numbers, Shape::new(idx.clone())?)?;
    let mut slots = data[..batch].to_vec();
    slots.push(data[axis]);
    let minus_one = b.scalar(-1.0, DType::I64, false);
    let slots = b.broadcast_to(minus_one, Shape::new(slots)?)?;
    let last = scatter(b, slots, x[1], numbers, (batch, batch), ScatterMode::Set)?;
    let read = gather(b, last, x[1], (batch, batch))?;
    let lands = b.compare(Comparison::Equal, read, numbers)?;
    // [B.., J..] to the picked shape [B.., P.., J.., Q..].
    let mut lifted = idx[..batch].to_vec();
    lifted.extend(std::iter::repeat_n(1, axis - batch));
    lifted.extend_from_slice(&picks);
    lifted.extend(std::iter::repeat_n(1, data.len() - axis - 1));
    let lands = b.reshape_to(lands, Shape::new(lifted)?)?;
    let picked = b.ty(x[2]).shape.clone();
    b.broadcast_to(lands, picked)
}

fn attributes(op: &Op) -> (usize, usize) {
    match op {
        Op::IndexGather { axis, batch } | Op::IndexScatter { axis, batch, .. } => (*axis, *batch),
        _ => unreachable!("only indexed ops reach the indexed rules"),
    }
}

/// The tangent of an indexed node given its operands' tangents (`t[1]`, the indices', is
/// always absent).
pub(crate) fn jvp(
    b: &mut GraphBuilder,
    op: &Op,
    x: &[NodeId],
    out: NodeId,
    t: &[Option<NodeId>],
) -> Result<Option<NodeId>> {
    let at = attributes(op);
    let mode = match op {
        Op::IndexGather { .. } => {
            return t[0].map(|tx| gather(b, tx, x[1], at)).transpose();
        }
        Op::IndexScatter { mode, .. } => *mode,
        _ => unreachable!("only indexed ops reach the indexed rules"),
    };
    if t[0].is_none() && t[2].is_none() {
        return Ok(None);
    }
    let or_zeros = |b: &mut GraphBuilder, t: Option<NodeId>, like: NodeId| match t {
        Some(t) => Ok(t),
        None => zeros_like(b, like),
    };
    Ok(Some(match mode {
        // Linear in (base, updates) together.
        ScatterMode::Set | ScatterMode::Add => {
            let tb = or_zeros(b, t[0], x[0])?;
            let tu = or_zeros(b, t[2], x[2])?;
            scatter(b, tb, x[1], tu, at, mode)?
        }
        ScatterMode::Mul => {
            let from_base = t[0]
                .map(|tb| scatter(b, tb, x[1], x[2], at, ScatterMode::Mul))
                .transpose()?;
            let from_upd = match t[2] {
                Some(tu) => {
                    let landed = gather(b, x[0], x[1], at)?;
                    let d = b.mul(landed, tu)?;
                    let zero = zeros_like(b, x[0])?;
                    Some(scatter(b, zero, x[1], d, at, ScatterMode::Add)?)
                }
                None => None,
            };
            match (from_base, from_upd) {
                (Some(p), Some(q)) => b.add(p, q)?,
                (Some(p), None) | (None, Some(p)) => p,
                (None, None) => return Ok(None),
            }
        }
        ScatterMode::Min | ScatterMode::Max => {
            let (mask_base, mask_upd, count) = extremum_masks(b, x, out, at)?;
            let tb = or_zeros(b, t[0], x[0])?;
            let tu = or_zeros(b, t[2], x[2])?;
            let from_base = b.mul(tb, mask_base)?;
            let picked = b.mul(tu, mask_upd)?;
            let sum = scatter(b, from_base, x[1], picked, at, ScatterMode::Add)?;
            b.div(sum, count)?
        }
    }))
}

/// The cotangents of an indexed node's operands (`None` for the indices).
pub(crate) fn vjp(
    b: &mut GraphBuilder,
    op: &Op,
    x: &[NodeId],
    out: NodeId,
    ct: NodeId,
) -> Result<Vec<Option<NodeId>>> {
    let at = attributes(op);
    let mode = match op {
        Op::IndexGather { .. } => {
            let zero = zeros_like(b, x[0])?;
            let cx = scatter(b, zero, x[1], ct, at, ScatterMode::Add)?;
            return Ok(vec![Some(cx), None]);
        }
        Op::IndexScatter { mode, .. } => *mode,
        _ => unreachable!("only indexed ops reach the indexed rules"),
    };
    let (cb, cu) = match mode {
        ScatterMode::Add => (ct, gather(b, ct, x[1], at)?),
        ScatterMode::Set => {
            let zero = zeros_like(b, x[2])?;
            let cb = scatter(b, ct, x[1], zero, at, ScatterMode::Set)?;
            let lands = landing_mask(b, x, at)?;
            let read = gather(b, ct, x[1], at)?;
            let none = zeros_like(b, read)?;
            (cb, b.select(lands, read, none)?)
        }
        ScatterMode::Mul => {
            let cb = scatter(b, ct, x[1], x[2], at, ScatterMode::Mul)?;
            let weighted = b.mul(ct, x[0])?;
            (cb, gather(b, weighted, x[1], at)?)
        }
        ScatterMode::Min | ScatterMode::Max => {
            let (mask_base, mask_upd, count) = extremum_masks(b, x, out, at)?;
            let share = b.div(ct, count)?;
            let cb = b.mul(share, mask_base)?;
            let read = gather(b, share, x[1], at)?;
            (cb, b.mul(read, mask_upd)?)
        }
    };
    Ok(vec![Some(cb), None, Some(cu)])
}
