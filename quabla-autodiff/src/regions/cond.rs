//! Derivatives of `cond` regions (transforms.md §12): forward mode is a `cond` of the branch
//! JVPs, reverse mode a `cond` of the branch VJPs; the predicate (operand 0) has no
//! derivative. A branch is differentiated whole, so each derivative runs only the branch the
//! predicate picks, like the primal.
//!
//! This module owns the operand and output layout of the derived `cond`s; it never builds a
//! loop.

use super::body::keep_outputs;
use super::forms::{call, call_shared, jvp_form, level_up, vjp_form};
use super::memo::shared_jvp;
use crate::sweep::{Forward, Reverse, Seed};
use quabla_ir::{Graph, GraphBuilder, NodeId, Region, RegionKind, Result};
use std::sync::Arc;

/// Forward mode: the derived `cond` takes the operands, then the tangents of the active
/// (float, non-zero) ones, and returns the outputs, then one tangent per output.
pub(super) fn jvp(
    b: &mut GraphBuilder,
    fwd: Forward,
    region: &Arc<Region>,
    (then_branch, else_branch): (&Graph, &Graph),
    x: &[NodeId],
    t: &[Option<NodeId>],
) -> Result<Vec<(NodeId, Option<NodeId>)>> {
    let act: Vec<bool> = (1..x.len())
        .map(|k| t[k].is_some() && b.ty(x[k]).dtype.is_float())
        .collect();
    let derived = shared_jvp(region, &act, || {
        let kind = RegionKind::Cond {
            then_branch: Arc::new(fwd.jvp(then_branch, &act)?),
            else_branch: Arc::new(fwd.jvp(else_branch, &act)?),
        };
        Region::new(kind, jvp_form(region), level_up(region))
    })?;
    let mut operands = x.to_vec();
    operands.extend((1..x.len()).filter(|&k| act[k - 1]).filter_map(|k| t[k]));
    let outs = call_shared(b, derived, &operands)?;
    let m = region.output_types().len();
    Ok((0..m)
        .map(|o| {
            let tangent = region.output_types()[o]
                .dtype
                .is_float()
                .then_some(outs[m + o]);
            (outs[o], tangent)
        })
        .collect())
}

/// Reverse mode: the derived `cond` takes the operands, then the cotangents of the float
/// outputs that have one, and returns one cotangent per active operand.
pub(super) fn vjp(
    b: &mut GraphBuilder,
    rev: Reverse,
    region: &Region,
    (then_branch, else_branch): (&Graph, &Graph),
    x: &[NodeId],
    wrt: &[bool],
    cts: &[Option<NodeId>],
) -> Result<Vec<Option<NodeId>>> {
    let act: Vec<bool> = (1..x.len())
        .map(|k| wrt[k] && b.ty(x[k]).dtype.is_float())
        .collect();
    let seeds: Vec<Seed> = cts
        .iter()
        .zip(region.output_types())
        .map(|(c, ty)| {
            if c.is_some() && ty.dtype.is_float() {
                Seed::Input
            } else {
                Seed::None
            }
        })
        .collect();
    let m = region.output_types().len();
    let n_ct = act.iter().filter(|a| **a).count();
    // Each branch's VJP, keeping only the cotangents of the operands.
    let branch = |g: &Graph| keep_outputs(&rev.vjp(g, &act, &seeds)?, m..m + n_ct);
    let kind = RegionKind::Cond {
        then_branch: Arc::new(branch(then_branch)?),
        else_branch: Arc::new(branch(else_branch)?),
    };
    let mut operands = x.to_vec();
    operands.extend(
        cts.iter()
            .zip(&seeds)
            .filter(|(_, s)| **s == Seed::Input)
            .filter_map(|(c, _)| *c),
    );
    let derived = Region::new(kind, vjp_form(region), level_up(region))?;
    let outs = call(b, derived, &operands)?;
    let mut pos = 0;
    let mut result = vec![None];
    for a in act {
        result.push(a.then(|| {
            pos += 1;
            outs[pos - 1]
        }));
    }
    Ok(result)
}
