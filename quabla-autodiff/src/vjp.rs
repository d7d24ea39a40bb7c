//! Reverse mode: the VJP of a graph by a reverse sweep, one cotangent rule per op.

use crate::helpers::{
    binary_partials, extremum_mask, lit, unary_derivative, unbroadcast, zeros_like,
};
use crate::regions::LoopSave;
use crate::sweep::{Reverse, Seed, VjpOptions};
use quabla_ir::{
    BinaryOp, DType, Graph, GraphBuilder, Node, NodeId, Op, Reducer, Result, Shape, TensorType,
    UnaryOp,
};
use quabla_linalg::rules;
use std::collections::HashMap;

/// The reverse-mode derivative of `g` with respect to the inputs flagged in `wrt`, with the
/// default options ([`vjp_graph_with`]).
///
/// `seeds` has one entry per output of `g`. The result takes the inputs of `g`, then one
/// cotangent input per [`Seed::Input`] output, and returns the outputs of `g` followed by one
/// cotangent per flagged input, in input order (zeros where structurally zero).
pub fn vjp_graph(g: &Graph, wrt: &[bool], seeds: &[Seed]) -> Result<Graph> {
    vjp_graph_with(g, wrt, seeds, VjpOptions::default())
}

/// [`vjp_graph`] under `options`, which apply to every loop and rule graph differentiated on
/// the way.
pub fn vjp_graph_with(
    g: &Graph,
    wrt: &[bool],
    seeds: &[Seed],
    options: VjpOptions,
) -> Result<Graph> {
    // The rules of ops with graphs of their own differentiate those graphs with this sweep,
    // under the same options.
    let rev = Reverse::new(vjp_graph_with, options);
    let mut b = GraphBuilder::new();
    let mut remap: Vec<NodeId> = Vec::with_capacity(g.len());
    let inputs: Vec<(NodeId, String, TensorType)> = g
        .inputs()
        .map(|(id, name, ty)| (id, name.to_string(), ty.clone()))
        .collect();
    for (_, name, ty) in &inputs {
        remap.push(b.input(name.clone(), ty.clone()));
    }
    let mut seed_inputs: Vec<Option<NodeId>> = vec![None; g.outputs().len()];
    for (k, o) in g.outputs().iter().enumerate() {
        let ty = &g.node(*o).ty;
        if seeds.get(k) == Some(&Seed::Input) && ty.dtype.is_float() {
            seed_inputs[k] = Some(b.input(
                format!("cotangent{k}"),
                TensorType::new(ty.dtype, ty.shape.clone()),
            ));
        }
    }
    // Which nodes depend on a flagged input: only those carry cotangents.
    let mut active = vec![false; g.len()];
    for (k, (id, _, ty)) in inputs.iter().enumerate() {
        active[id.index()] = wrt.get(k).copied().unwrap_or(false) && ty.dtype.is_float();
    }
    for (i, node) in g.nodes().iter().enumerate() {
        if !matches!(node.op, Op::Input { .. }) {
            // Integer and bool values carry no derivative (numerics.md §12); a region's
            // outputs are sorted out by its own rule.
            let carries = node.ty.dtype.is_float() || matches!(node.op, Op::Region(_));
            active[i] =
                node.operands.iter().any(|o| active[o.index()]) && !blocks(&node.op) && carries;
        }
    }
    let groups = quabla_ir::region_groups(g);
    // The forward pass, unchanged, except that an active loop runs as the checkpointing
    // block loops of its VJP: one forward evaluation gives the primal values and the
    // checkpoints the backward pass starts from.
    let mut tapes: HashMap<usize, LoopSave> = HashMap::new();
    let mut loop_outputs: HashMap<usize, NodeId> = HashMap::new();
    for (i, node) in g.nodes().iter().enumerate().skip(inputs.len()) {
        if let Some(out) = loop_outputs.remove(&i) {
            remap.push(out);
            continue;
        }
        let operands: Vec<NodeId> = node.operands.iter().map(|o| remap[o.index()]).collect();
        b.set_remat(node.remat);
        b.set_origin(node.origin);
        if let (Op::Region(call), true) = (&node.op, active[i]) {
            if let Some((outs, tape)) =
                crate::regions::loop_forward(&mut b, rev, &call.region, &operands)?
            {
                for &m in &groups[&i] {
                    if let Op::Region(member) = &g.nodes()[m].op {
                        loop_outputs.insert(m, outs[member.output]);
                    }
                }
                tapes.insert(i, tape);
                remap.push(
                    loop_outputs
                        .remove(&i)
                        .expect("the group holds its first node"),
                );
                continue;
            }
        }
        remap.push(b.push(node.op.clone(), &operands)?);
    }
    b.set_remat(0);
    b.set_origin(Default::default());
    let mut cts: Vec<Option<NodeId>> = vec![None; g.len()];
    for (k, o) in g.outputs().iter().enumerate() {
        if !active[o.index()] || !g.node(*o).ty.dtype.is_float() {
            continue;
        }
        let ct = match seeds.get(k).copied().unwrap_or(Seed::None) {
            Seed::None => continue,
            Seed::Input => seed_inputs[k].expect("float outputs have cotangent inputs"),
            Seed::Ones => {
                let ty = &g.node(*o).ty;
                let one = b.scalar(1.0, ty.dtype, false);
                b.broadcast_to(one, ty.shape.clone())?
            }
        };
        accumulate(&mut b, &mut cts, *o, ct)?;
    }
    for i in (0..g.len()).rev() {
        let node = g.node(NodeId(i as u32));
        // The cotangent of a recomputed node is part of the recomputation.
        b.set_remat(node.remat);
        // Cotangent nodes point at the primal line through the rule that made them.
        b.set_origin(node.origin.derived("vjp", node.op.name()));
        if let Op::Region(call) = &node.op {
            // A region group is differentiated once, at its first node, when the cotangents
            // of all its nodes are complete (every consumer of the group comes later).
            let members = &groups[&i];
            if members[0] != i || !active[i] {
                continue;
            }
            let mut out_cts: Vec<Option<NodeId>> = vec![None; call.region.output_types().len()];
            for &m in members {
                if let Op::Region(member) = &g.nodes()[m].op {
                    out_cts[member.output] = cts[m];
                }
            }
            if out_cts.iter().all(Option::is_none) {
                continue;
            }
            let x: Vec<NodeId> = node.operands.iter().map(|o| remap[o.index()]).collect();
            let wrt: Vec<bool> = node.operands.iter().map(|o| active[o.index()]).collect();
            let saved = tapes.remove(&i);
            let operand_cts =
                crate::regions::vjp_region(&mut b, rev, &call.region, (&x, &wrt), &out_cts, saved)?;
            for (k, c) in operand_cts.into_iter().enumerate() {
                let operand = node.operands[k];
                if let Some(c) = c {
                    if active[operand.index()] {
                        accumulate(&mut b, &mut cts, operand, c)?;
                    }
                }
            }
            continue;
        }
        let Some(ct) = cts[i] else { continue };
        if matches!(node.op, Op::Input { .. }) || !active[i] {
            continue;
        }
        let x: Vec<NodeId> = node.operands.iter().map(|o| remap[o.index()]).collect();
        let operand_cts = cotangent_rule(&mut b, rev, node, &x, remap[i], ct)?;
        for (k, c) in operand_cts.into_iter().enumerate() {
            let operand = node.operands[k];
            if let Some(c) = c {
                if active[operand.index()] {
                    accumulate(&mut b, &mut cts, operand, c)?;
                }
            }
        }
    }
    b.set_remat(0);
    b.set_origin(Default::default());
    let mut outputs: Vec<NodeId> = g.outputs().iter().map(|o| remap[o.index()]).collect();
    for (k, (id, _, _)) in inputs.iter().enumerate() {
        if !wrt.get(k).copied().unwrap_or(false) {
            continue;
        }
        let ct = match cts[id.index()] {
            Some(c) => c,
            None => zeros_like(&mut b, remap[id.index()])?,
        };
        outputs.push(ct);
    }
    b.finish(outputs)
}

/// Ops through which no derivative flows.
fn blocks(op: &Op) -> bool {
    matches!(
        op,
        Op::Compare(_)
            | Op::StopGradient
            | Op::Cast {
                to: DType::Bool,
                ..
            }
    )
}

fn accumulate(
    b: &mut GraphBuilder,
    cts: &mut [Option<NodeId>],
    node: NodeId,
    ct: NodeId,
) -> Result<()> {
    let slot = &mut cts[node.index()];
    *slot = Some(match *slot {
        None => ct,
        Some(prev) => b.add(prev, ct)?,
    });
    Ok(())
}

fn shape(b: &GraphBuilder, n: NodeId) -> Shape {
    b.ty(n).shape.clone()
}

/// Cotangents of a node's operands given the cotangent of its output (`None`: zero).
fn cotangent_rule(
    b: &mut GraphBuilder,
    rev: Reverse,
    node: &Node,
    x: &[NodeId],
    out: NodeId,
    ct: NodeId,
) -> Result<Vec<Option<NodeId>>> {
    let to_operand = |b: &mut GraphBuilder, v: NodeId, k: usize| -> Result<NodeId> {
        let s = shape(b, x[k]);
        unbroadcast(b, v, &s)
    };
    Ok(match &node.op {
        Op::Input { .. } | Op::Constant { .. } | Op::Compare(_) | Op::StopGradient => {
            vec![None; x.len()]
        }
        Op::DebugPrint { .. } => vec![Some(ct)],
        Op::Cast { .. } => {
            if !b.ty(x[0]).dtype.is_float() {
                vec![None]
            } else {
                let dtype = b.ty(x[0]).dtype;
                vec![Some(b.astype(ct, dtype)?)]
            }
        }
        Op::Unary(u) => match unary_derivative(b, *u, x[0], out)? {
            None => vec![None],
            Some(d) => vec![Some(b.mul(ct, d)?)],
        },
        Op::Powi(n) => {
            if *n == 0 {
                vec![None]
            } else {
                let p = b.powi(x[0], n - 1)?;
                let c = lit(b, *n as f64);
                let d = b.mul(c, p)?;
                vec![Some(b.mul(ct, d)?)]
            }
        }
        Op::Binary(op) => {
            let (ca, cb) = match op {
                BinaryOp::Add => (ct, ct),
                BinaryOp::Sub => (ct, b.unary(UnaryOp::Neg, ct)?),
                BinaryOp::Mul => (b.mul(ct, x[1])?, b.mul(x[0], ct)?),
                BinaryOp::Div => {
                    let cl = b.div(ct, x[1])?;
                    let q = b.mul(cl, out)?;
                    (cl, b.unary(UnaryOp::Neg, q)?)
                }
                other => {
                    let (dx, dy) = binary_partials(b, *other, x[0], x[1], out)?;
                    let ca = match dx {
                        Some(d) => b.mul(ct, d)?,
                        None => zeros_like(b, ct)?,
                    };
                    let cb = match dy {
                        Some(d) => b.mul(ct, d)?,
                        None => zeros_like(b, ct)?,
                    };
                    (ca, cb)
                }
            };
            vec![Some(to_operand(b, ca, 0)?), Some(to_operand(b, cb, 1)?)]
        }
        Op::Where => {
            let z = zeros_like(b, ct)?;
            let ca = b.select(x[0], ct, z)?;
            let cb = b.select(x[0], z, ct)?;
            vec![
                None,
                Some(to_operand(b, ca, 1)?),
                Some(to_operand(b, cb, 2)?),
            ]
        }
        Op::Reduce { kind, axes } => {
            // The cotangent spreads back over the reduced axes: evenly for sum and mean, to
            // the extremal entries for max and min.
            let in_shape = shape(b, x[0]);
            let keep: Vec<usize> = (0..in_shape.rank())
                .map(|a| {
                    if axes.contains(&a) {
                        1
                    } else {
                        in_shape.dims()[a]
                    }
                })
                .collect();
            let r = b.reshape_to(ct, Shape::new(keep)?)?;
            let spread = b.broadcast_to(r, in_shape.clone())?;
            match kind.reducer() {
                Reducer::Sum => vec![Some(spread)],
                Reducer::Mean => {
                    let n: usize = axes.iter().map(|&a| in_shape.dims()[a]).product();
                    let c = lit(b, n as f64);
                    vec![Some(b.div(spread, c)?)]
                }
                Reducer::Max | Reducer::Min => {
                    let mask = extremum_mask(b, x[0], out, axes)?;
                    let z = zeros_like(b, spread)?;
                    vec![Some(b.select(mask, spread, z)?)]
                }
            }
        }
        Op::Cumsum { axis, reverse } => {
            vec![Some(b.push(
                Op::Cumsum {
                    axis: *axis,
                    reverse: !reverse,
                },
                &[ct],
            )?)]
        }
        Op::Reshape { .. } => {
            let s = shape(b, x[0]);
            vec![Some(b.reshape_to(ct, s)?)]
        }
        Op::Transpose { perm } => {
            let mut inverse = vec![0usize; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inverse[p] = i;
            }
            vec![Some(b.push(Op::Transpose { perm: inverse }, &[ct])?)]
        }
        Op::Broadcast { .. } => vec![Some(to_operand(b, ct, 0)?)],
        Op::Concat { axis } => {
            let mut start = 0;
            let mut parts = Vec::with_capacity(x.len());
            for &xi in x {
                let s = shape(b, xi);
                let mut starts = vec![0; s.rank()];
                starts[*axis] = start;
                start += s.dims()[*axis];
                parts.push(Some(b.slice(ct, starts, s.dims().to_vec())?));
            }
            parts
        }
        Op::Slice { starts, .. } => {
            let s = shape(b, x[0]);
            vec![Some(b.push(
                Op::PadSlice {
                    starts: starts.clone(),
                    shape: s,
                },
                &[ct],
            )?)]
        }
        Op::PadSlice { starts, .. } => {
            let s = shape(b, x[0]);
            vec![Some(b.slice(ct, starts.clone(), s.dims().to_vec())?)]
        }
        Op::Gather { axis, indices } => {
            let z = zeros_like(b, x[0])?;
            vec![Some(b.push(
                Op::ScatterAdd {
                    axis: *axis,
                    indices: indices.clone(),
                },
                &[z, ct],
            )?)]
        }
        Op::IndexGather { .. } | Op::IndexScatter { .. } => {
            crate::indexed::vjp(b, &node.op, x, out, ct)?
        }
        Op::ScatterAdd { axis, indices } => {
            let g = b.push(
                Op::Gather {
                    axis: *axis,
                    indices: indices.clone(),
                },
                &[ct],
            )?;
            vec![Some(ct), Some(g)]
        }
        Op::Matmul => {
            let ra = b.ty(x[0]).shape.rank() as isize;
            let rb = b.ty(x[1]).shape.rank() as isize;
            let swap = |r: isize| -> Vec<isize> {
                let mut p: Vec<isize> = (0..r).collect();
                p.swap((r - 1) as usize, (r - 2) as usize);
                p
            };
            let ca = match folded_matmul_cotangent(b, x[1], ct, x[0], Side::Left)? {
                Some(ca) => ca,
                None => {
                    let bt = b.transpose(x[1], Some(&swap(rb)))?;
                    let ca = b.push(Op::Matmul, &[ct, bt])?;
                    to_operand(b, ca, 0)?
                }
            };
            let cb = match folded_matmul_cotangent(b, x[0], ct, x[1], Side::Right)? {
                Some(cb) => cb,
                None => {
                    let at = b.transpose(x[0], Some(&swap(ra)))?;
                    let cb = b.push(Op::Matmul, &[at, ct])?;
                    to_operand(b, cb, 1)?
                }
            };
            vec![Some(ca), Some(cb)]
        }
        // The linear-algebra rules live in `quabla-linalg` (numerics.md §6.5).
        Op::Solve { transpose_a } => {
            let (ca, cb) = rules::solve_vjp(b, x[0], out, ct, *transpose_a)?;
            vec![Some(ca), Some(cb)]
        }
        Op::TriangularSolve {
            lower,
            transpose_a,
            unit_diagonal,
        } => {
            let (ca, cb) = rules::triangular_solve_vjp(
                b,
                x[0],
                out,
                ct,
                (*lower, *transpose_a, *unit_diagonal),
            )?;
            vec![Some(ca), Some(cb)]
        }
        Op::Cholesky => vec![Some(rules::cholesky_vjp(b, out, ct)?)],
        Op::CholeskyAd => {
            let (cl, cs) = rules::cholesky_ad_vjp(b, x[0], x[1], out, ct)?;
            vec![Some(cl), Some(cs)]
        }
        Op::Linalg(kind) => vec![rules::linalg_vjp(b, *kind, x[0], out, ct)?],
        Op::Custom(call) => crate::custom::cotangents(b, rev, call, x, ct)?,
        // Region groups are rewritten as a whole by the sweep (`regions/`), never one node at
        // a time.
        Op::Region(_) => {
            return Err(quabla_ir::IrError::Verify {
                message: "a region node reached the per-node rule".into(),
            })
        }
    })
}

/// Which operand of `matmul(a, b)` a cotangent is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Left,
    Right,
}

/// The cotangent of an unbatched matrix operand of a batched `matmul` as one product that
/// contracts over the batch too, instead of a batch of products summed afterwards.
///
/// For `out[β, m, n] = a[β, m, k] · w[k, n]` the cotangent of `w` is `Σ_β a[β]ᵀ ct[β]`: the
/// batch axes `β` fold into the rows, `(rows, k)ᵀ · (rows, n)` with `rows = |β| m`. For
/// `out[β, m, n] = w[m, k] · b[β, k, n]` it is `Σ_β ct[β] b[β]ᵀ`: the batch folds into the
/// columns, `(m, |β| n) · (|β| n, k)`. This is what a layer under `vmap` gives (weights shared
/// by every example), and one product of the stacked values costs far less than a product per
/// example, its result in memory, and a reduction over it. `None` when `other` (the batched
/// operand) is not batched or `w` is not a plain matrix: the general rule applies.
fn folded_matmul_cotangent(
    b: &mut GraphBuilder,
    other: NodeId,
    ct: NodeId,
    w: NodeId,
    side: Side,
) -> Result<Option<NodeId>> {
    let w_dims = b.ty(w).shape.dims().to_vec();
    let o_dims = b.ty(other).shape.dims().to_vec();
    let ct_dims = b.ty(ct).shape.dims().to_vec();
    if w_dims.len() != 2 || o_dims.len() < 3 || ct_dims.len() != o_dims.len() {
        return Ok(None);
    }
    let r = o_dims.len();
    let batch: usize = o_dims[..r - 2].iter().product();
    let shape = |dims: &[usize]| Shape::new(dims.to_vec());
    let cw = match side {
        // w = b operand [k, n]; other = a [β, m, k]; ct [β, m, n].
        Side::Right => {
            let (m, k, n) = (o_dims[r - 2], o_dims[r - 1], ct_dims[r - 1]);
            let a = b.reshape_to(other, shape(&[batch * m, k])?)?;
            let at = b.transpose(a, Some(&[1, 0]))?;
            let g = b.reshape_to(ct, shape(&[batch * m, n])?)?;
            b.push(Op::Matmul, &[at, g])?
        }
        // w = a operand [m, k]; other = b [β, k, n]; ct [β, m, n].
        Side::Left => {
            let (k, n, m) = (o_dims[r - 2], o_dims[r - 1], ct_dims[r - 2]);
            // ct [β, m, n] -> [m, β, n] -> [m, |β| n].
            let g = b.reshape_to(ct, shape(&[batch, m, n])?)?;
            let g = b.transpose(g, Some(&[1, 0, 2]))?;
            let g = b.reshape_to(g, shape(&[m, batch * n])?)?;
            // b [β, k, n] -> [β, n, k] -> [|β| n, k].
            let o = b.reshape_to(other, shape(&[batch, k, n])?)?;
            let o = b.transpose(o, Some(&[0, 2, 1]))?;
            let o = b.reshape_to(o, shape(&[batch * n, k])?)?;
            b.push(Op::Matmul, &[g, o])?
        }
    };
    Ok(Some(cw))
}
