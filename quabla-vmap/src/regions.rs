//! Batching of control-flow regions (transforms.md §11): the rewrite of one region group
//! (every output node of one region call) whose operands include a batched value.
//!
//! Bodies are batched by the same sweep as the enclosing graph, with each body input batched
//! along axis 0 exactly where the matching operand is batched, so regions nested in bodies
//! batch recursively. The rewritten regions keep the [`RegionForm`](quabla_ir::RegionForm) and
//! the derivative level of the original.
//!
//! - `cond` with an unmapped predicate stays one `cond`; an output batched in either branch is
//!   made batched in both. With a mapped predicate both branches are inlined and run for every
//!   example, and each output is `where(pred, then, else)`, so nothing computed by the
//!   unselected branch reaches an example's result. Each branch reads its floating operands
//!   through `where(pred, x, stop_gradient(x))` (the same values), so that nothing of the
//!   unselected branch's derivative reaches an example's derivative either: a zero cotangent
//!   times an infinite local derivative would be NaN, a `where` drops it.
//! - `scan` (and `fori_loop`, a scan without `xs` and `ys`): a carry is batched when its
//!   initial value is, or when the body makes it depend on a batched value; the set is grown to
//!   its fixed point and such initial carries are broadcast. Batched `xs` are stored as
//!   `[length, size, ...]` so that the scan axis stays leading, and batched `ys` come out that
//!   way and are moved back to `[size, length, ...]`. The index input is never batched.
//! - `while` with a predicate that stays unbatched (given the carry fixed point) is one loop
//!   with a batched body. With a mapped predicate the loop runs while any example continues,
//!   and the body keeps the carries of finished examples bit for bit:
//!   `where(cond(carry), body(carry), carry)` per example.

use super::{internal, lift_all, logical_rank, materialize, move_axis, prepend, sweep, Value};
use quabla_ir::{
    Comparison, DType, Graph, GraphBuilder, NodeId, Op, ReduceKind, Region, RegionKind, Result,
    ScanBody, TensorType,
};
use std::sync::Arc;

/// Batches one region group. `args` are the values of the call's operands (at least one is
/// batched) and `outputs` the output index of each node of the group, in group order; returns
/// the value of each of those nodes.
pub(crate) fn batch_region(
    b: &mut GraphBuilder,
    region: &Arc<Region>,
    args: &[Value],
    outputs: &[usize],
    size: usize,
) -> Result<Vec<Value>> {
    let call = Call {
        region,
        args,
        outputs,
        size,
    };
    match region.kind() {
        RegionKind::Cond {
            then_branch,
            else_branch,
        } => {
            if args[0].batched {
                cond_mapped(b, &call, then_branch, else_branch)
            } else {
                cond_unmapped(b, &call, then_branch, else_branch)
            }
        }
        RegionKind::Scan(s) => scan(b, &call, s),
        RegionKind::While {
            n_carry,
            cond,
            body,
            max_trips,
        } => while_loop(b, &call, (*n_carry, *max_trips), cond, body),
    }
}

/// The region call being rewritten.
struct Call<'a> {
    region: &'a Region,
    /// The values of the call's operands.
    args: &'a [Value],
    /// The output index of each node of the group, in group order.
    outputs: &'a [usize],
    size: usize,
}

/// A body graph batched into a fresh builder, before its outputs are fixed.
struct Body {
    builder: GraphBuilder,
    /// The values of the body's inputs in the builder, in order.
    inputs: Vec<Value>,
    /// The values of the body's outputs, batched where they depend on a batched input.
    outputs: Vec<Value>,
}

/// Batches `g` into a fresh builder, its input `k` batched along axis 0 exactly when
/// `batched[k]`.
fn batch_body(g: &Graph, batched: &[bool], size: usize) -> Result<Body> {
    let mut builder = GraphBuilder::new();
    let mut inputs = Vec::with_capacity(batched.len());
    for ((_, name, ty), &is_batched) in g.inputs().zip(batched) {
        let ty = if is_batched {
            TensorType {
                shape: prepend(size, &ty.shape)?,
                ..ty.clone()
            }
        } else {
            ty.clone()
        };
        inputs.push(Value {
            id: builder.input(name, ty),
            batched: is_batched,
        });
    }
    let outputs = inline(&mut builder, g, &inputs, size)?;
    Ok(Body {
        builder,
        inputs,
        outputs,
    })
}

/// Batches `g` into `b` with its inputs bound to `inputs`; returns its outputs' values.
fn inline(b: &mut GraphBuilder, g: &Graph, inputs: &[Value], size: usize) -> Result<Vec<Value>> {
    let mut values = inputs.to_vec();
    sweep(b, g, &mut values, size)?;
    Ok(g.outputs().iter().map(|o| values[o.index()]).collect())
}

/// Freezes a batched body whose output `k` must be batched exactly when `batched[k]`:
/// unbatched outputs that must be batched are broadcast along the batch.
fn finish(body: Body, batched: &[bool], size: usize) -> Result<Arc<Graph>> {
    let Body {
        mut builder,
        outputs,
        ..
    } = body;
    let mut ids = Vec::with_capacity(outputs.len());
    for (v, &want) in outputs.iter().zip(batched) {
        ids.push(match (v.batched, want) {
            (true, false) => {
                return Err(internal(
                    "a region body output is batched where the region result is not",
                ))
            }
            (false, true) => materialize(&mut builder, *v, size)?,
            _ => v.id,
        });
    }
    Ok(Arc::new(builder.finish(ids)?))
}

/// One node per group member, all sharing the new region and the operands.
fn push_calls(
    b: &mut GraphBuilder,
    region: Region,
    operands: &[NodeId],
    outputs: &[usize],
) -> Result<Vec<NodeId>> {
    b.push_region_calls(Arc::new(region), outputs.iter().copied(), operands)
}

fn flags(values: &[Value]) -> Vec<bool> {
    values.iter().map(|v| v.batched).collect()
}

/// The carries that must be batched: those batched on entry, grown until the body maps
/// unbatched carries to unbatched results. `inputs(carries)` lays out the body's input flags
/// for a carry set. Returns the set and the body batched with it.
fn carry_fixed_point(
    g: &Graph,
    mut carries: Vec<bool>,
    inputs: impl Fn(&[bool]) -> Vec<bool>,
    size: usize,
) -> Result<(Vec<bool>, Body)> {
    loop {
        let body = batch_body(g, &inputs(&carries), size)?;
        let mut grown = false;
        for (c, out) in carries.iter_mut().zip(&body.outputs) {
            if out.batched && !*c {
                *c = true;
                grown = true;
            }
        }
        if !grown {
            return Ok((carries, body));
        }
    }
}

/// `where(pred, a, b)` for a batched rank-0 predicate (`[size]`) and branch values of logical
/// rank `rank`, with the region result's strong type.
fn select(b: &mut GraphBuilder, pred: Value, a: Value, e: Value, rank: usize) -> Result<NodeId> {
    let ids = lift_all(b, &[pred, a, e], rank)?;
    let w = b.push(Op::Where, &ids)?;
    let ty = b.ty(w);
    if ty.weak {
        // Both branches returned weak values; the region's result is strong.
        let to = ty.dtype;
        return b.push(Op::Cast { to, weak: false }, &[w]);
    }
    Ok(w)
}

/// The values of the group's nodes `ids`, batched where the region output they read is.
fn values_of(ids: Vec<NodeId>, c: &Call<'_>, batched: &[bool]) -> Vec<Value> {
    ids.into_iter()
        .zip(c.outputs)
        .map(|(id, &k)| Value {
            id,
            batched: batched[k],
        })
        .collect()
}

fn cond_unmapped(
    b: &mut GraphBuilder,
    c: &Call<'_>,
    then_branch: &Graph,
    else_branch: &Graph,
) -> Result<Vec<Value>> {
    let xs = &c.args[1..];
    let then_body = batch_body(then_branch, &flags(xs), c.size)?;
    let else_body = batch_body(else_branch, &flags(xs), c.size)?;
    // Both branches must return the same types, so an output batched in one is batched in both.
    let batched: Vec<bool> = then_body
        .outputs
        .iter()
        .zip(&else_body.outputs)
        .map(|(t, e)| t.batched || e.batched)
        .collect();
    let new = Region::new(
        RegionKind::Cond {
            then_branch: finish(then_body, &batched, c.size)?,
            else_branch: finish(else_body, &batched, c.size)?,
        },
        c.region.form(),
        c.region.level(),
    )?;
    let operands: Vec<NodeId> = c.args.iter().map(|a| a.id).collect();
    let ids = push_calls(b, new, &operands, c.outputs)?;
    Ok(values_of(ids, c, &batched))
}

fn cond_mapped(
    b: &mut GraphBuilder,
    c: &Call<'_>,
    then_branch: &Graph,
    else_branch: &Graph,
) -> Result<Vec<Value>> {
    let pred = c.args[0];
    let xs = &c.args[1..];
    let then_xs = branch_inputs(b, pred, xs, true, c.size)?;
    let else_xs = branch_inputs(b, pred, xs, false, c.size)?;
    let then_values = inline(b, then_branch, &then_xs, c.size)?;
    let else_values = inline(b, else_branch, &else_xs, c.size)?;
    let mut selected: Vec<Option<NodeId>> = vec![None; then_values.len()];
    let mut results = Vec::with_capacity(c.outputs.len());
    for &k in c.outputs {
        let id = match selected[k] {
            Some(id) => id,
            None => {
                let rank = c.region.output_types()[k].shape.rank();
                let id = select(b, pred, then_values[k], else_values[k], rank)?;
                selected[k] = Some(id);
                id
            }
        };
        results.push(Value::batched(id));
    }
    Ok(results)
}

/// The inputs of one branch of a `cond` with a mapped predicate: each floating operand `x`
/// becomes `where(pred, x, stop_gradient(x))` for the `then` branch (`where(pred,
/// stop_gradient(x), x)` for `else`), batched. The values are those of `x`, but a derivative
/// reaches `x` only from the examples that select the branch: the unselected branch's
/// derivative at its example (`0 * inf` from `log(-1)`, say) is dropped by the `where` instead
/// of being multiplied by the zero cotangent the result's `where` gives it, which would be
/// NaN. Unbatched operands are broadcast first, so that their derivative is selected per
/// example before the batch sums it.
fn branch_inputs(
    b: &mut GraphBuilder,
    pred: Value,
    xs: &[Value],
    then: bool,
    size: usize,
) -> Result<Vec<Value>> {
    xs.iter()
        .map(|&x| {
            if !b.ty(x.id).dtype.is_float() {
                return Ok(x);
            }
            let rank = logical_rank(b, x);
            let live = materialize(b, x, size)?;
            let frozen = b.stop_gradient(live)?;
            let (a, e) = if then { (live, frozen) } else { (frozen, live) };
            let ids = lift_all(b, &[pred, Value::batched(a), Value::batched(e)], rank)?;
            Ok(Value::batched(b.push(Op::Where, &ids)?))
        })
        .collect()
}

fn scan(b: &mut GraphBuilder, c: &Call<'_>, s: &ScanBody) -> Result<Vec<Value>> {
    let (nc, size) = (s.n_carry, c.size);
    let rest = flags(&c.args[nc..]);
    let layout = |carries: &[bool]| -> Vec<bool> {
        std::iter::once(false)
            .chain(carries.iter().copied())
            .chain(rest.iter().copied())
            .collect()
    };
    let (carries, body) = carry_fixed_point(&s.body, flags(&c.args[..nc]), layout, size)?;
    let mut batched = carries.clone();
    batched.extend(body.outputs[nc..].iter().map(|v| v.batched));
    let new = Region::new(
        RegionKind::Scan(ScanBody {
            body: finish(body, &batched, size)?,
            ..s.clone()
        }),
        c.region.form(),
        c.region.level(),
    )?;

    let mut operands = Vec::with_capacity(c.args.len());
    for (k, &a) in c.args.iter().enumerate() {
        operands.push(if k < nc && carries[k] {
            materialize(b, a, size)?
        } else if k >= nc + s.n_const && a.batched {
            // [size, length, ...] -> [length, size, ...]: the body reads batched slices.
            move_axis(b, a.id, 0, 1)?
        } else {
            a.id
        });
    }
    // The group's nodes go next to each other; the stacked outputs are moved afterwards.
    let ids = push_calls(b, new, &operands, c.outputs)?;
    let mut results = values_of(ids, c, &batched);
    for (v, &k) in results.iter_mut().zip(c.outputs) {
        if k >= nc && v.batched {
            v.id = move_axis(b, v.id, 1, 0)?;
        }
    }
    Ok(results)
}

fn while_loop(
    b: &mut GraphBuilder,
    c: &Call<'_>,
    (n_carry, max_trips): (usize, Option<usize>),
    cond: &Graph,
    body: &Graph,
) -> Result<Vec<Value>> {
    // The batched loop takes as many trips as its longest example, so the same bound holds.
    let size = c.size;
    let consts = flags(&c.args[n_carry..]);
    let layout =
        |carries: &[bool]| -> Vec<bool> { carries.iter().chain(&consts).copied().collect() };
    let (mut carries, batched_body) =
        carry_fixed_point(body, flags(&c.args[..n_carry]), layout, size)?;
    let batched_cond = batch_body(cond, &layout(&carries), size)?;

    let kind = if !batched_cond.outputs[0].batched {
        RegionKind::While {
            n_carry,
            cond: finish(batched_cond, &[false], size)?,
            body: finish(batched_body, &carries, size)?,
            max_trips,
        }
    } else {
        // Examples stop at different iterations, so every carry differs per example.
        carries = vec![true; n_carry];
        let in_flags = layout(&carries);

        let Body {
            builder: mut cb,
            outputs: pred,
            ..
        } = batch_body(cond, &in_flags, size)?;
        let go = any(&mut cb, pred[0].id)?;
        let new_cond = Arc::new(cb.finish(vec![go])?);

        // The body evaluates the per-example predicate again and steps only the examples
        // that continue.
        let Body {
            builder: mut bb,
            inputs,
            outputs: pred,
        } = batch_body(cond, &in_flags, size)?;
        let stepped = inline(&mut bb, body, &inputs, size)?;
        let mut next = Vec::with_capacity(n_carry);
        for (k, (&new, &old)) in stepped.iter().zip(&inputs).enumerate() {
            let rank = body.node(body.outputs()[k]).ty.shape.rank();
            next.push(select(&mut bb, pred[0], new, old, rank)?);
        }
        RegionKind::While {
            n_carry,
            cond: new_cond,
            body: Arc::new(bb.finish(next)?),
            max_trips,
        }
    };
    let new = Region::new(kind, c.region.form(), c.region.level())?;

    let mut operands = Vec::with_capacity(c.args.len());
    for (k, &a) in c.args.iter().enumerate() {
        operands.push(if k < n_carry && carries[k] {
            materialize(b, a, size)?
        } else {
            a.id
        });
    }
    let ids = push_calls(b, new, &operands, c.outputs)?;
    Ok(values_of(ids, c, &carries))
}

/// Whether any element of a `[size]` bool vector is true, as a rank-0 bool.
fn any(b: &mut GraphBuilder, pred: NodeId) -> Result<NodeId> {
    let as_float = b.push(
        Op::Cast {
            to: DType::F32,
            weak: false,
        },
        &[pred],
    )?;
    let largest = b.push(
        Op::Reduce {
            kind: ReduceKind::MaxAxis,
            axes: vec![0],
        },
        &[as_float],
    )?;
    let zero = b.scalar(0.0, DType::F32, false);
    b.push(Op::Compare(Comparison::Greater), &[largest, zero])
}
