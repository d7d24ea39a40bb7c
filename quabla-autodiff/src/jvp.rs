//! Forward mode: the JVP of a graph, one tangent rule per op.

use crate::helpers::{binary_partials, extremum_mask, unary_derivative, zeros_like};
use crate::sweep::Forward;
use quabla_ir::{BinaryOp, Graph, GraphBuilder, Node, NodeId, Op, Reducer, Result, TensorType};
use quabla_linalg::rules;

/// The forward-mode derivative of `g`.
///
/// The result takes the inputs of `g` (same names and order), then one tangent input per input
/// flagged in `wrt` (named `tangent/<name>`, same type), and returns the outputs of `g` followed
/// by one tangent per output (zeros where the tangent is structurally zero; a bool output's
/// tangent is a bool `false` array).
pub fn jvp_graph(g: &Graph, wrt: &[bool]) -> Result<Graph> {
    // The rules of ops with graphs of their own differentiate those graphs with this sweep.
    const FORWARD: Forward = Forward::new(jvp_graph);
    let _scope = crate::regions::JvpScope::enter();
    let mut b = GraphBuilder::new();
    let mut remap: Vec<NodeId> = Vec::with_capacity(g.len());
    let inputs: Vec<(NodeId, String, TensorType)> = g
        .inputs()
        .map(|(id, name, ty)| (id, name.to_string(), ty.clone()))
        .collect();
    // Primal inputs first, then tangent inputs, so the graph keeps inputs first.
    for (_, name, ty) in &inputs {
        remap.push(b.input(name.clone(), ty.clone()));
    }
    let mut tangents: Vec<Option<NodeId>> = vec![None; g.len()];
    for (k, (id, name, ty)) in inputs.iter().enumerate() {
        if wrt.get(k).copied().unwrap_or(false) && ty.dtype.is_float() {
            let t = b.input(
                format!("tangent/{name}"),
                TensorType::new(ty.dtype, ty.shape.clone()),
            );
            tangents[id.index()] = Some(t);
        }
    }
    let groups = quabla_ir::region_groups(g);
    // Primal and tangent of region outputs computed with an earlier node of their group.
    let mut done: std::collections::HashMap<usize, (NodeId, Option<NodeId>)> =
        std::collections::HashMap::new();
    for (i, node) in g.nodes().iter().enumerate().skip(inputs.len()) {
        // A recomputed node's tangent is recomputation too.
        b.set_remat(node.remat);
        // Its primal keeps its origin; its tangent nodes point at it through the rule.
        b.set_origin(node.origin);
        let derived = node.origin.derived("jvp", node.op.name());
        if let Some((out, t)) = done.remove(&i) {
            remap.push(out);
            tangents[i] = t;
            continue;
        }
        let operands: Vec<NodeId> = node.operands.iter().map(|o| remap[o.index()]).collect();
        let ts: Vec<Option<NodeId>> = node.operands.iter().map(|o| tangents[o.index()]).collect();
        if let (Op::Region(call), false) = (&node.op, ts.iter().all(Option::is_none)) {
            // The whole group becomes one derived region (`regions/`).
            b.set_origin(derived);
            let results =
                crate::regions::jvp_region(&mut b, FORWARD, &call.region, &operands, &ts)?;
            for &m in &groups[&i] {
                let Op::Region(member) = &g.nodes()[m].op else {
                    unreachable!("groups hold region nodes")
                };
                done.insert(m, results[member.output]);
            }
            let (out, t) = done.remove(&i).expect("the group holds its first node");
            remap.push(out);
            tangents[i] = t;
            continue;
        }
        let out = b.push(node.op.clone(), &operands)?;
        remap.push(out);
        // Integer and bool values carry no derivative (numerics.md §12).
        if ts.iter().all(Option::is_none) || !node.ty.dtype.is_float() {
            continue;
        }
        b.set_origin(derived);
        tangents[i] = tangent_rule(&mut b, FORWARD, node, &operands, out, &ts)?;
    }
    b.set_remat(0);
    b.set_origin(Default::default());
    let mut outputs: Vec<NodeId> = g.outputs().iter().map(|o| remap[o.index()]).collect();
    for o in g.outputs() {
        let t = match tangents[o.index()] {
            Some(t) => t,
            None => zeros_like(&mut b, remap[o.index()])?,
        };
        outputs.push(t);
    }
    b.finish(outputs)
}

/// `t` or zeros of `like`'s type.
fn or_zeros(b: &mut GraphBuilder, t: Option<NodeId>, like: NodeId) -> Result<NodeId> {
    match t {
        Some(t) => Ok(t),
        None => zeros_like(b, like),
    }
}

fn add_opt(b: &mut GraphBuilder, a: Option<NodeId>, c: Option<NodeId>) -> Result<Option<NodeId>> {
    Ok(match (a, c) {
        (None, None) => None,
        (Some(x), None) | (None, Some(x)) => Some(x),
        (Some(x), Some(y)) => Some(b.add(x, y)?),
    })
}

/// The tangent of one node given its operands' tangents (at least one is present).
fn tangent_rule(
    b: &mut GraphBuilder,
    fwd: Forward,
    node: &Node,
    x: &[NodeId],
    out: NodeId,
    t: &[Option<NodeId>],
) -> Result<Option<NodeId>> {
    let out_shape = b.ty(out).shape.clone();
    Ok(match &node.op {
        Op::Input { .. } | Op::Constant { .. } => None,
        Op::Compare(_) | Op::StopGradient => None,
        // The primal prints; its tangent passes through.
        Op::DebugPrint { .. } => t[0],
        Op::Cast { to, .. } => {
            if !to.is_float() || !b.ty(x[0]).dtype.is_float() {
                None
            } else {
                Some(b.astype(t[0].expect("one operand"), *to)?)
            }
        }
        Op::Unary(u) => {
            let Some(tx) = t[0] else { return Ok(None) };
            match unary_derivative(b, *u, x[0], out)? {
                None => None,
                Some(d) => Some(b.mul(tx, d)?),
            }
        }
        Op::Powi(n) => {
            let Some(tx) = t[0] else { return Ok(None) };
            if *n == 0 {
                return Ok(None);
            }
            let p = b.powi(x[0], n - 1)?;
            let c = b.weak_scalar(*n as f64);
            let d = b.mul(c, p)?;
            Some(b.mul(tx, d)?)
        }
        Op::Binary(op) => {
            let broadcast = |b: &mut GraphBuilder, v: NodeId| b.broadcast_to(v, out_shape.clone());
            match op {
                BinaryOp::Add => {
                    let s = add_opt(b, t[0], t[1])?;
                    s.map(|s| broadcast(b, s)).transpose()?
                }
                BinaryOp::Sub => {
                    let n1 = t[1]
                        .map(|v| b.unary(quabla_ir::UnaryOp::Neg, v))
                        .transpose()?;
                    let s = add_opt(b, t[0], n1)?;
                    s.map(|s| broadcast(b, s)).transpose()?
                }
                BinaryOp::Mul => {
                    let a = t[0].map(|v| b.mul(v, x[1])).transpose()?;
                    let c = t[1].map(|v| b.mul(x[0], v)).transpose()?;
                    let s = add_opt(b, a, c)?;
                    s.map(|s| broadcast(b, s)).transpose()?
                }
                BinaryOp::Div => {
                    // d(l/r) = (dl - (l/r) dr) / r, reusing the quotient.
                    let qdr = t[1].map(|v| b.mul(out, v)).transpose()?;
                    let nqdr = qdr
                        .map(|v| b.unary(quabla_ir::UnaryOp::Neg, v))
                        .transpose()?;
                    let num = add_opt(b, t[0], nqdr)?;
                    match num {
                        None => None,
                        Some(n) => {
                            let d = b.div(n, x[1])?;
                            Some(broadcast(b, d)?)
                        }
                    }
                }
                other => {
                    let (dx, dy) = binary_partials(b, *other, x[0], x[1], out)?;
                    let a = match (t[0], dx) {
                        (Some(tv), Some(d)) => Some(b.mul(tv, d)?),
                        _ => None,
                    };
                    let c = match (t[1], dy) {
                        (Some(tv), Some(d)) => Some(b.mul(tv, d)?),
                        _ => None,
                    };
                    let s = add_opt(b, a, c)?;
                    s.map(|s| broadcast(b, s)).transpose()?
                }
            }
        }
        Op::Where => {
            if t[1].is_none() && t[2].is_none() {
                return Ok(None);
            }
            let a = or_zeros(b, t[1], x[1])?;
            let c = or_zeros(b, t[2], x[2])?;
            let s = b.select(x[0], a, c)?;
            Some(b.broadcast_to(s, out_shape)?)
        }
        Op::Reduce { kind, axes } => {
            let Some(tx) = t[0] else { return Ok(None) };
            match kind.reducer() {
                // Linear: the same reduction of the tangent.
                Reducer::Sum | Reducer::Mean => Some(b.push(node.op.clone(), &[tx])?),
                Reducer::Max | Reducer::Min => {
                    let mask = extremum_mask(b, x[0], out, axes)?;
                    let z = zeros_like(b, tx)?;
                    let picked = b.select(mask, tx, z)?;
                    let axes: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
                    Some(b.sum(picked, Some(&axes), false)?)
                }
            }
        }
        Op::Cumsum { .. } => {
            let Some(tx) = t[0] else { return Ok(None) };
            Some(b.push(node.op.clone(), &[tx])?)
        }
        Op::Reshape { .. }
        | Op::Transpose { .. }
        | Op::Broadcast { .. }
        | Op::Slice { .. }
        | Op::PadSlice { .. }
        | Op::Gather { .. } => {
            let Some(tx) = t[0] else { return Ok(None) };
            Some(b.push(node.op.clone(), &[tx])?)
        }
        Op::Concat { .. } => {
            let parts: Vec<NodeId> = t
                .iter()
                .zip(x)
                .map(|(tv, &xv)| or_zeros(b, *tv, xv))
                .collect::<Result<_>>()?;
            Some(b.push(node.op.clone(), &parts)?)
        }
        Op::IndexGather { .. } | Op::IndexScatter { .. } => {
            crate::indexed::jvp(b, &node.op, x, out, t)?
        }
        Op::ScatterAdd { .. } => {
            let base = or_zeros(b, t[0], x[0])?;
            let upd = or_zeros(b, t[1], x[1])?;
            Some(b.push(node.op.clone(), &[base, upd])?)
        }
        Op::Matmul => {
            let a = t[0].map(|v| b.push(Op::Matmul, &[v, x[1]])).transpose()?;
            let c = t[1].map(|v| b.push(Op::Matmul, &[x[0], v])).transpose()?;
            add_opt(b, a, c)?
        }
        // The linear-algebra rules live in `quabla-linalg` (numerics.md §6.5).
        Op::Solve { transpose_a } => rules::solve_jvp(b, x[0], out, t[0], t[1], *transpose_a)?,
        Op::TriangularSolve {
            lower,
            transpose_a,
            unit_diagonal,
        } => rules::triangular_solve_jvp(
            b,
            x[0],
            out,
            t[0],
            t[1],
            (*lower, *transpose_a, *unit_diagonal),
        )?,
        Op::Cholesky => match t[0] {
            Some(da) => Some(rules::cholesky_jvp(b, out, da)?),
            None => None,
        },
        Op::CholeskyAd => rules::cholesky_ad_jvp(b, x[0], x[1], out, t[0], t[1])?,
        Op::Linalg(kind) => match t[0] {
            Some(da) => rules::linalg_jvp(b, *kind, x[0], out, da)?,
            None => None,
        },
        Op::Custom(call) => crate::custom::tangent(b, fwd, call, x, t)?,
        // Region groups are rewritten as a whole by the sweep (`regions/`), never one node at
        // a time.
        Op::Region(_) => {
            return Err(quabla_ir::IrError::Verify {
                message: "a region node reached the per-node rule".into(),
            })
        }
    })
}
