//! Derivatives of control-flow regions (transforms.md §12–§13).
//!
//! A region group (the sibling nodes of one region call) is rewritten once, at its first node:
//!
//! - **Forward mode** of every kind is a region of the same kind whose bodies are the JVPs of
//!   the original bodies: `cond` differentiates both branches; `scan` and `while` carry the
//!   tangents of the carries next to the carries. Which carries need tangents is a fixed point
//!   (a carry is active when its initial tangent is, or when its body output depends on an
//!   active input).
//! - **Reverse mode** of `cond` is a `cond` of the branch VJPs. Reverse mode of a `scan` (and so
//!   of `fori_loop`) is built from scans only, with √T carry checkpointing (§13): a forward
//!   scan over blocks of `B = ceil(sqrt(T))` iterations stores the carry at each block
//!   boundary; the backward pass walks the blocks in reverse, recomputing each block's carries
//!   from its stored boundary (an inner scan whose stacked outputs are the block's carry tape)
//!   and then running the body's VJP backward through the block (an inner reverse scan). The
//!   `T mod B` remaining iterations form a tail handled with a tape of their own. The
//!   arithmetic is the same for every `B`, so the gradient is bit-identical to the full tape
//!   (`B = T`, see [`full_tape_loops`]).
//! - Reverse mode of a `while` with a trip bound (`max_trips`) is the reverse mode of the
//!   counted loop it equals (see [`bounded_scan`]): blocks of trips that stop working once the
//!   predicate fails. Without a bound the trip count is unknown: TF2.
//!
//! Every derivative of a loop is a loop region of the kinds above whose bodies are derivatives
//! of the original bodies, so the rules apply to their own results and every order and mode
//! composes. A derived region records its [`RegionForm`] and one more derivative level.

use crate::vjp::Seed;
use quabla_ir::{
    Graph, GraphBuilder, IrError, NodeId, Op, Region, RegionForm, RegionKind, Result, ScanBody,
    Shape, TensorType,
};
use std::cell::Cell;
use std::sync::Arc;

thread_local! {
    static FULL_TAPE: Cell<bool> = const { Cell::new(false) };
}

/// Makes loop VJPs built on this thread keep the full carry tape (one block of `T`
/// iterations) instead of √T checkpoints while the guard lives. A test switch: the
/// checkpointed gradient must be bit-identical to the full tape.
pub fn full_tape_loops() -> FullTapeGuard {
    let previous = FULL_TAPE.with(|f| f.replace(true));
    FullTapeGuard { previous }
}

/// Restores the previous loop VJP mode when dropped.
#[derive(Debug)]
pub struct FullTapeGuard {
    previous: bool,
}

impl Drop for FullTapeGuard {
    fn drop(&mut self) {
        FULL_TAPE.with(|f| f.set(self.previous));
    }
}

/// The checkpoint block length for `t` iterations: `ceil(sqrt(t))`, or `t` for a full tape.
pub fn block_length(t: usize) -> usize {
    if FULL_TAPE.with(Cell::get) {
        return t;
    }
    let mut b = (t as f64).sqrt().ceil() as usize;
    while b * b < t {
        b += 1;
    }
    while b > 1 && (b - 1) * (b - 1) >= t {
        b -= 1;
    }
    b.max(1)
}

fn tf2() -> IrError {
    IrError::Unsupported {
        op: "while_loop".into(),
        message: "reverse-mode differentiation through while_loop is not supported: the trip count depends on the data; bound it with while_loop(..).max_trips(n), or differentiate in forward mode (jvp)".into(),
    }
}

/// The form of the forward-mode derivative of a region. Forms name the primitive and the
/// kinds of its first two derivatives; deeper derivatives keep the form and count in the
/// region's level. Every order composes: a derivative of a loop is a loop.
fn jvp_form(region: &Region) -> RegionForm {
    match region.form() {
        RegionForm::Fori if region.level() == 0 => RegionForm::ForiJvp,
        RegionForm::ForiVjp if region.level() == 1 => RegionForm::ForiVjpJvp,
        RegionForm::ScanVjp if region.level() == 1 => RegionForm::ScanVjpJvp,
        other => other,
    }
}

/// The form of the reverse-mode derivative of a region; see [`jvp_form`].
fn vjp_form(region: &Region) -> RegionForm {
    let form = region.form();
    match form {
        RegionForm::Cond | RegionForm::While => form,
        RegionForm::Fori | RegionForm::ForiJvp if region.level() <= 1 => RegionForm::ForiVjp,
        RegionForm::ForiVjp | RegionForm::ForiJvp if region.level() == 1 => RegionForm::ForiVjpVjp,
        RegionForm::Scan if region.level() == 0 => RegionForm::ScanVjp,
        RegionForm::Scan | RegionForm::ScanVjp if region.level() == 1 => RegionForm::ScanVjpVjp,
        other => other,
    }
}

fn level_up(region: &Region) -> u8 {
    if region.form() == RegionForm::Cond {
        region.level()
    } else {
        region.level().saturating_add(1)
    }
}

/// A `while` region with a trip bound `m` as the counted loop it equals, for reverse mode: an
/// outer scan over `ceil(m / B)` blocks (`B = block_length(m)`), each a `cond` on the
/// predicate that runs an inner scan of `B` trips only while the loop is still going, and the
/// inner trips a `cond` on the predicate (and on the trip index being below `m`) that runs the
/// body or keeps the carries. A finished loop leaves its carries unchanged, so the carries are
/// the loop's, bit for bit; the work after the predicate fails is a cheap test per remaining
/// block and per remaining trip of the last block, in the forward pass and in the backward
/// pass that the scan rules build from this (√ checkpointing of both levels). `None` for an
/// unbounded `while`.
fn bounded_scan(region: &Region) -> Result<Option<Region>> {
    let RegionKind::While {
        n_carry,
        cond,
        body,
        max_trips: Some(m),
    } = region.kind()
    else {
        return Ok(None);
    };
    let (n, m) = (*n_carry, *m);
    let block = block_length(m);
    let blocks = m.div_ceil(block);
    let types = input_types(body);
    let index_ty = TensorType::new(quabla_ir::DType::F64, Shape::scalar());
    let identity = |types: &[TensorType]| -> Result<Arc<Graph>> {
        let mut g = GraphBuilder::new();
        let ins = params(&mut g, "in", types.to_vec());
        Ok(Arc::new(g.finish(ins[..n].to_vec())?))
    };
    let branch = |then_branch: Arc<Graph>, types: &[TensorType]| -> Result<Region> {
        let kind = RegionKind::Cond {
            then_branch,
            else_branch: identity(types)?,
        };
        Region::new(kind, RegionForm::Cond, region.level())
    };

    // Inner trips: (i, carries.., consts.., base) -> carries.
    let mut with_base = types.clone();
    with_base.push(index_ty.clone());
    let trip = branch(body.clone(), &types)?;
    let mut ib = GraphBuilder::new();
    let i = ib.input("i", index_ty.clone());
    let ins = params(&mut ib, "in", with_base.clone());
    let (state, base) = (&ins[..types.len()], ins[types.len()]);
    let index = ib.binary(quabla_ir::BinaryOp::Add, base, i)?;
    let bound = ib.scalar(m as f64, quabla_ir::DType::F64, false);
    let in_range = ib.compare(quabla_ir::Comparison::Less, index, bound)?;
    let going = ib.inline_graph(cond, state)?[0];
    let no = ib.constant(
        quabla_ir::HostData::Bool([false].into()),
        Shape::scalar(),
        false,
    )?;
    let go = ib.select(in_range, going, no)?;
    let mut operands = vec![go];
    operands.extend_from_slice(state);
    let next = call(&mut ib, trip, &operands)?;
    let inner_body = Arc::new(ib.finish(next)?);
    let inner = ScanBody {
        length: block,
        start: 0,
        reverse: false,
        n_carry: n,
        n_const: types.len() - n + 1,
        n_xs: 0,
        body: inner_body,
    };
    let inner = Region::new(RegionKind::Scan(inner), region.form(), region.level())?;

    // A block: (carries.., consts.., base) -> carries, run when the loop is still going.
    let mut kb = GraphBuilder::new();
    let ins = params(&mut kb, "in", with_base.clone());
    let outs = call(&mut kb, inner, &ins)?;
    let run_block = branch(Arc::new(kb.finish(outs)?), &with_base)?;

    // Blocks: (j, carries.., consts..) -> carries.
    let mut ob = GraphBuilder::new();
    let j = ob.input("j", index_ty);
    let state = params(&mut ob, "in", types.clone());
    let going = ob.inline_graph(cond, &state)?[0];
    let size = ob.scalar(block as f64, quabla_ir::DType::F64, false);
    let base = ob.binary(quabla_ir::BinaryOp::Mul, j, size)?;
    let mut operands = vec![going];
    operands.extend_from_slice(&state);
    operands.push(base);
    let next = call(&mut ob, run_block, &operands)?;
    let outer_body = Arc::new(ob.finish(next)?);
    let outer = ScanBody {
        length: blocks,
        start: 0,
        reverse: false,
        n_carry: n,
        n_const: types.len() - n,
        n_xs: 0,
        body: outer_body,
    };
    Region::new(RegionKind::Scan(outer), region.form(), region.level()).map(Some)
}

/// Pushes one node per output of `region` applied to `operands`, next to each other.
fn call(b: &mut GraphBuilder, region: Region, operands: &[NodeId]) -> Result<Vec<NodeId>> {
    let n = region.output_types().len();
    b.push_region_calls(Arc::new(region), 0..n, operands)
}

fn zeros(b: &mut GraphBuilder, ty: &TensorType) -> Result<NodeId> {
    let z = b.scalar(0.0, ty.dtype, false);
    b.broadcast_to(z, ty.shape.clone())
}

fn plain(t: &TensorType) -> TensorType {
    TensorType::new(t.dtype, t.shape.clone())
}

fn input_types(g: &Graph) -> Vec<TensorType> {
    g.inputs().map(|(_, _, t)| plain(t)).collect()
}

/// One input per type, named `<prefix><k>`: the parameters of a derived body.
fn params(nb: &mut GraphBuilder, prefix: &str, types: Vec<TensorType>) -> Vec<NodeId> {
    types
        .into_iter()
        .enumerate()
        .map(|(k, t)| nb.input(format!("{prefix}{k}"), t))
        .collect()
}

/// One input per stacked operand of a derived loop (nodes of `outer`), typed as one slice of
/// it along the leading axis: the per-iteration parameters of its body.
fn slice_params(
    nb: &mut GraphBuilder,
    outer: &GraphBuilder,
    prefix: &str,
    stacked: &[NodeId],
) -> Result<Vec<NodeId>> {
    let types = stacked
        .iter()
        .map(|&x| {
            let ty = outer.ty(x);
            Ok(TensorType::new(
                ty.dtype,
                Shape::new(ty.shape.dims()[1..].to_vec())?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(params(nb, prefix, types))
}

/// Which outputs of `g` depend on the inputs flagged in `active`.
fn dependence(g: &Graph, active: &[bool]) -> Vec<bool> {
    let mut dep = vec![false; g.len()];
    let mut k = 0;
    for (i, node) in g.nodes().iter().enumerate() {
        if matches!(node.op, Op::Input { .. }) {
            dep[i] = active.get(k).copied().unwrap_or(false);
            k += 1;
        } else {
            dep[i] = node.operands.iter().any(|o| dep[o.index()]);
        }
    }
    g.outputs().iter().map(|o| dep[o.index()]).collect()
}

/// `g` with a new parameter list: the new graph takes `inputs` (in order), binds `g`'s input
/// `k` to new input `bind[k]`, and returns `g`'s outputs listed in `select`.
fn rebind(
    g: &Graph,
    inputs: &[(String, TensorType)],
    bind: &[usize],
    select: &[usize],
) -> Result<Graph> {
    let mut nb = GraphBuilder::new();
    let ids: Vec<NodeId> = inputs
        .iter()
        .map(|(name, ty)| nb.input(name.clone(), ty.clone()))
        .collect();
    let bound: Vec<NodeId> = bind.iter().map(|&k| ids[k]).collect();
    let outs = nb.inline_graph(g, &bound)?;
    let outputs = select.iter().map(|&k| outs[k]).collect();
    Ok(quabla_ir::passes::dce(&nb.finish(outputs)?))
}

/// Forward mode of one region group.
///
/// `x` are the (remapped) operands, `t` their tangents. Returns the primal and tangent node of
/// each output of the region, in output order.
pub(crate) fn jvp_region(
    b: &mut GraphBuilder,
    region: &Region,
    x: &[NodeId],
    t: &[Option<NodeId>],
) -> Result<Vec<(NodeId, Option<NodeId>)>> {
    let form = jvp_form(region);
    let level = level_up(region);
    let is_float = |b: &GraphBuilder, n: NodeId| b.ty(n).dtype.is_float();
    match region.kind() {
        RegionKind::Cond {
            then_branch,
            else_branch,
        } => {
            let act: Vec<bool> = (1..x.len())
                .map(|k| t[k].is_some() && is_float(b, x[k]))
                .collect();
            let tb = crate::jvp_graph(then_branch, &act)?;
            let eb = crate::jvp_graph(else_branch, &act)?;
            let kind = RegionKind::Cond {
                then_branch: Arc::new(tb),
                else_branch: Arc::new(eb),
            };
            let mut operands = x.to_vec();
            operands.extend((1..x.len()).filter(|&k| act[k - 1]).filter_map(|k| t[k]));
            let outs = call(b, Region::new(kind, form, level)?, &operands)?;
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
        RegionKind::Scan(s) => {
            let (n, np, nx) = (s.n_carry, s.n_const, s.n_xs);
            let ny = s.n_ys();
            let active_operand = |k: usize| t[k].is_some() && is_float(b, x[k]);
            let mut act: Vec<bool> = (0..n + np + nx).map(active_operand).collect();
            loop {
                let mut flags = vec![false];
                flags.extend(&act);
                let dep = dependence(&s.body, &flags);
                let mut changed = false;
                for k in 0..n {
                    if dep[k] && !act[k] && region.output_types()[k].dtype.is_float() {
                        act[k] = true;
                        changed = true;
                    }
                }
                if !changed {
                    let ys_act: Vec<bool> = (0..ny)
                        .map(|y| dep[n + y] && region.output_types()[n + y].dtype.is_float())
                        .collect();
                    return jvp_scan(b, s, form, level, x, t, &act, &ys_act);
                }
            }
        }
        RegionKind::While {
            n_carry,
            cond,
            body,
            max_trips,
        } => {
            let n = *n_carry;
            let np = x.len() - n;
            let mut act: Vec<bool> = (0..n + np)
                .map(|k| t[k].is_some() && is_float(b, x[k]))
                .collect();
            loop {
                let dep = dependence(body, &act);
                let mut changed = false;
                for k in 0..n {
                    if dep[k] && !act[k] && is_float(b, x[k]) {
                        act[k] = true;
                        changed = true;
                    }
                }
                if !changed {
                    break;
                }
            }
            let tangent = crate::jvp_graph(body, &act)?;
            let types = input_types(body);
            // New inputs: carries, active carry tangents, consts, active const tangents.
            let groups = [(0..n).collect::<Vec<_>>(), (n..n + np).collect()];
            let mut inputs = Vec::new();
            let mut bind_primal = vec![0; n + np];
            let mut bind_tangent = Vec::new();
            for group in &groups {
                for &k in group {
                    bind_primal[k] = inputs.len();
                    inputs.push((format!("in{k}"), types[k].clone()));
                }
                for &k in group {
                    if act[k] {
                        bind_tangent.push(inputs.len());
                        inputs.push((format!("tangent/in{k}"), types[k].clone()));
                    }
                }
            }
            let mut bind = bind_primal.clone();
            bind.extend(&bind_tangent);
            let n_tc = (0..n).filter(|&k| act[k]).count();
            // Body outputs: carries then their tangents (only active ones are carried).
            let mut select: Vec<usize> = (0..n).collect();
            select.extend((0..n).filter(|&k| act[k]).map(|k| n + k));
            let new_body = rebind(&tangent, &inputs, &bind, &select)?;
            let new_cond = rebind(cond, &inputs, &bind_primal, &[0])?;
            let mut operands: Vec<NodeId> = Vec::new();
            for group in &groups {
                operands.extend(group.iter().map(|&k| x[k]));
                for &k in group {
                    if act[k] {
                        operands.push(match t[k] {
                            Some(tk) => tk,
                            None => zeros(b, &types[k])?,
                        });
                    }
                }
            }
            let kind = RegionKind::While {
                n_carry: n + n_tc,
                cond: Arc::new(new_cond),
                body: Arc::new(new_body),
                max_trips: *max_trips,
            };
            let outs = call(b, Region::new(kind, form, level)?, &operands)?;
            let mut pos = n;
            Ok((0..n)
                .map(|k| {
                    let tk = act[k].then(|| {
                        pos += 1;
                        outs[pos - 1]
                    });
                    (outs[k], tk)
                })
                .collect())
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn jvp_scan(
    b: &mut GraphBuilder,
    s: &ScanBody,
    form: RegionForm,
    level: u8,
    x: &[NodeId],
    t: &[Option<NodeId>],
    act: &[bool],
    ys_act: &[bool],
) -> Result<Vec<(NodeId, Option<NodeId>)>> {
    let (n, np, nx) = (s.n_carry, s.n_const, s.n_xs);
    let ny = s.n_ys();
    let mut wrt = vec![false];
    wrt.extend(act);
    let tangent = crate::jvp_graph(&s.body, &wrt)?;
    let types = input_types(&s.body);
    // The tangent graph takes (i, primals.., tangents of active inputs..); the new body takes
    // (i, carries, carry tangents, consts, const tangents, xs, x tangents).
    let groups = [
        (1..1 + n).collect::<Vec<_>>(),
        (1 + n..1 + n + np).collect(),
        (1 + n + np..1 + n + np + nx).collect(),
    ];
    let mut inputs = vec![("i".to_string(), types[0].clone())];
    let mut bind = vec![0; 1 + n + np + nx];
    let mut bind_tangent = Vec::new();
    let mut operands = Vec::new();
    let mut counts = [0usize; 3];
    for (gi, group) in groups.iter().enumerate() {
        for &k in group {
            bind[k] = inputs.len();
            inputs.push((format!("in{k}"), types[k].clone()));
            operands.push(x[k - 1]);
        }
        counts[gi] = group.len();
        for &k in group {
            if act[k - 1] {
                bind_tangent.push(inputs.len());
                inputs.push((format!("tangent/in{k}"), types[k].clone()));
                let op_ty = plain(b.ty(x[k - 1]));
                operands.push(match t[k - 1] {
                    Some(tk) => tk,
                    None => zeros(b, &op_ty)?,
                });
                counts[gi] += 1;
            }
        }
    }
    bind.extend(bind_tangent);
    // Outputs of the tangent graph: carries, ys, then one tangent per output.
    let mut select: Vec<usize> = (0..n).collect();
    select.extend((0..n).filter(|&k| act[k]).map(|k| n + ny + k));
    select.extend(n..n + ny);
    select.extend((0..ny).filter(|&y| ys_act[y]).map(|y| n + ny + n + y));
    let body = rebind(&tangent, &inputs, &bind, &select)?;
    let kind = RegionKind::Scan(ScanBody {
        length: s.length,
        start: s.start,
        reverse: s.reverse,
        n_carry: counts[0],
        n_const: counts[1],
        n_xs: counts[2],
        body: Arc::new(body),
    });
    let outs = call(b, Region::new(kind, form, level)?, &operands)?;
    let nc = counts[0];
    let mut result = Vec::with_capacity(n + ny);
    let mut pos = n;
    for k in 0..n {
        let tk = act[k].then(|| {
            pos += 1;
            outs[pos - 1]
        });
        result.push((outs[k], tk));
    }
    let mut pos = nc + ny;
    for y in 0..ny {
        let ty = ys_act[y].then(|| {
            pos += 1;
            outs[pos - 1]
        });
        result.push((outs[nc + y], ty));
    }
    Ok(result)
}

/// Reverse mode of one region group.
///
/// `x` are the (remapped) operands, `wrt` flags the operands that need cotangents, `cts` holds
/// the cotangent of each output (`None`: zero), `saved` what [`scan_forward`] kept of a loop's
/// forward pass (built here when absent). Returns one cotangent per operand.
pub(crate) fn vjp_region(
    b: &mut GraphBuilder,
    region: &Region,
    x: &[NodeId],
    wrt: &[bool],
    cts: &[Option<NodeId>],
    saved: Option<ScanTape>,
) -> Result<Vec<Option<NodeId>>> {
    let form = vjp_form(region);
    let level = level_up(region);
    match region.kind() {
        RegionKind::Cond {
            then_branch,
            else_branch,
        } => {
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
            let branch = |g: &Graph| -> Result<Graph> {
                let v = crate::vjp_graph(g, &act, &seeds)?;
                let inputs: Vec<(String, TensorType)> = v
                    .inputs()
                    .map(|(_, name, ty)| (name.to_string(), plain(ty)))
                    .collect();
                let bind: Vec<usize> = (0..inputs.len()).collect();
                let select: Vec<usize> = (m..m + n_ct).collect();
                rebind(&v, &inputs, &bind, &select)
            };
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
            let outs = call(b, Region::new(kind, form, level)?, &operands)?;
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
        RegionKind::While { .. } => match bounded_scan(region)? {
            Some(scan) => vjp_region(b, &scan, x, wrt, cts, saved),
            None => Err(tf2()),
        },
        RegionKind::Scan(s) => {
            let vjp = ScanVjp::new(s, form, level, x, wrt, cts)?;
            let saved = match saved {
                Some(saved) => saved,
                None => vjp.forward(b)?.1,
            };
            vjp.backward(b, &saved)
        }
    }
}

/// The pieces of a checkpointed scan VJP (see the module docs).
struct ScanVjp<'a> {
    s: &'a ScanBody,
    form: RegionForm,
    level: u8,
    /// The body's VJP: inputs `(i, carries, consts, xs, carry cotangents, seeded y
    /// cotangents)`, outputs `(carry cotangents, active const cotangents, active x
    /// cotangents)`.
    body_vjp: Graph,
    types: Vec<TensorType>,
    act_p: Vec<bool>,
    act_x: Vec<bool>,
    /// The ys that receive a cotangent.
    seeded: Vec<usize>,
    carries: Vec<NodeId>,
    consts: Vec<NodeId>,
    xs: Vec<NodeId>,
    g_final: Vec<Option<NodeId>>,
    gys: Vec<NodeId>,
}

impl<'a> ScanVjp<'a> {
    fn new(
        s: &'a ScanBody,
        form: RegionForm,
        level: u8,
        x: &[NodeId],
        wrt: &[bool],
        cts: &[Option<NodeId>],
    ) -> Result<ScanVjp<'a>> {
        let (n, np, nx) = (s.n_carry, s.n_const, s.n_xs);
        let ny = s.n_ys();
        let types = input_types(&s.body);
        if types[1..1 + n].iter().any(|t| !t.dtype.is_float()) {
            return Err(IrError::Unsupported {
                op: form.primitive().into(),
                message: format!("reverse mode through {} needs float carries", form.name()),
            });
        }
        let act_p: Vec<bool> = (0..np)
            .map(|k| wrt[n + k] && types[1 + n + k].dtype.is_float())
            .collect();
        let act_x: Vec<bool> = (0..nx)
            .map(|k| wrt[n + np + k] && types[1 + n + np + k].dtype.is_float())
            .collect();
        let y_float = |y: usize| {
            let o = s.body.outputs()[n + y];
            s.body.node(o).ty.dtype.is_float()
        };
        let seeded: Vec<usize> = (0..ny)
            .filter(|&y| cts[n + y].is_some() && y_float(y))
            .collect();
        let mut flags = vec![false];
        flags.extend(std::iter::repeat_n(true, n));
        flags.extend(&act_p);
        flags.extend(&act_x);
        let mut seeds = vec![Seed::Input; n];
        seeds.extend((0..ny).map(|y| {
            if seeded.contains(&y) {
                Seed::Input
            } else {
                Seed::None
            }
        }));
        let v = crate::vjp_graph(&s.body, &flags, &seeds)?;
        let inputs: Vec<(String, TensorType)> = v
            .inputs()
            .map(|(_, name, ty)| (name.to_string(), plain(ty)))
            .collect();
        let bind: Vec<usize> = (0..inputs.len()).collect();
        let n_out = n + act_p.iter().filter(|a| **a).count() + act_x.iter().filter(|a| **a).count();
        let select: Vec<usize> = (n + ny..n + ny + n_out).collect();
        let body_vjp = rebind(&v, &inputs, &bind, &select)?;
        Ok(ScanVjp {
            s,
            form,
            level,
            body_vjp,
            types,
            act_p,
            act_x,
            carries: x[..n].to_vec(),
            consts: x[n..n + np].to_vec(),
            xs: x[n + np..].to_vec(),
            g_final: cts[..n].to_vec(),
            gys: seeded
                .iter()
                .map(|&y| cts[n + y].expect("seeded ys have cotangents"))
                .collect(),
            seeded,
        })
    }

    fn n(&self) -> usize {
        self.s.n_carry
    }

    fn index_ty(&self) -> TensorType {
        self.types[0].clone()
    }

    fn carry_types(&self) -> Vec<TensorType> {
        self.types[1..1 + self.n()].to_vec()
    }

    fn const_types(&self) -> Vec<TensorType> {
        let n = self.n();
        self.types[1 + n..1 + n + self.s.n_const].to_vec()
    }

    fn x_types(&self) -> Vec<TensorType> {
        let n = self.n();
        self.types[1 + n + self.s.n_const..].to_vec()
    }

    fn gy_types(&self) -> Vec<TensorType> {
        let outs: Vec<TensorType> = self
            .s
            .body
            .outputs()
            .iter()
            .map(|o| plain(&self.s.body.node(*o).ty))
            .collect();
        self.seeded
            .iter()
            .map(|&y| outs[self.n() + y].clone())
            .collect()
    }

    fn act_p_types(&self) -> Vec<TensorType> {
        self.const_types()
            .into_iter()
            .zip(&self.act_p)
            .filter(|(_, a)| **a)
            .map(|(t, _)| t)
            .collect()
    }

    fn region(&self, b: &mut GraphBuilder, body: ScanBody, ops: &[NodeId]) -> Result<Vec<NodeId>> {
        let region = Region::new(RegionKind::Scan(body), self.form, self.level)?;
        call(b, region, ops)
    }

    /// The index of the user body inside a derived body: `i` itself, or `base + i` when the
    /// derived loop runs at a dynamic offset.
    fn index(nb: &mut GraphBuilder, i: NodeId, base: Option<NodeId>) -> Result<NodeId> {
        match base {
            Some(base) => nb.add(base, i),
            None => Ok(i),
        }
    }

    /// A scan of `len` user iterations from `carry` that can also return the carry tape (the
    /// carry entering each iteration, stacked) and the user's stacked outputs. A `base` adds a
    /// const operand to the index (the scan then starts at 0). Returns the final carries, the
    /// tape (empty unless `tape`) and the ys (empty unless `ys`).
    #[allow(clippy::too_many_arguments)]
    fn tape_scan(
        &self,
        b: &mut GraphBuilder,
        start: usize,
        len: usize,
        reverse: bool,
        carry: &[NodeId],
        base: Option<NodeId>,
        xs: &[NodeId],
        tape: bool,
        ys: bool,
    ) -> Result<(Vec<NodeId>, Vec<NodeId>, Vec<NodeId>)> {
        let n = self.n();
        let mut nb = GraphBuilder::new();
        let i = nb.input("i", self.index_ty());
        let c = params(&mut nb, "carry", self.carry_types());
        let p = params(&mut nb, "operand", self.const_types());
        let base_in = base.map(|_| nb.input("base", self.index_ty()));
        let xk = params(&mut nb, "x", self.x_types());
        let idx = Self::index(&mut nb, i, base_in)?;
        let mut args = vec![idx];
        args.extend(&c);
        args.extend(&p);
        args.extend(&xk);
        let outs = nb.inline_graph(&self.s.body, &args)?;
        let mut results: Vec<NodeId> = outs[..n].to_vec();
        if tape {
            results.extend(&c);
        }
        if ys {
            results.extend(&outs[n..]);
        }
        let body = nb.finish(results)?;
        let mut ops = carry.to_vec();
        ops.extend(&self.consts);
        ops.extend(base);
        ops.extend(xs);
        let scan = ScanBody {
            length: len,
            start: if base.is_some() { 0 } else { start },
            reverse,
            n_carry: n,
            n_const: self.consts.len() + usize::from(base.is_some()),
            n_xs: xs.len(),
            body: Arc::new(quabla_ir::passes::dce(&body)),
        };
        let outs = self.region(b, scan, &ops)?;
        let n_tape = if tape { n } else { 0 };
        Ok((
            outs[..n].to_vec(),
            outs[n..n + n_tape].to_vec(),
            outs[n + n_tape..].to_vec(),
        ))
    }

    /// The backward pass over `len` iterations given their carry tape: carries `(g, acc)`,
    /// stacked outputs the x cotangents. Returns `(g, acc, x cotangents)`.
    #[allow(clippy::too_many_arguments)]
    fn backward_scan(
        &self,
        b: &mut GraphBuilder,
        start: usize,
        len: usize,
        reverse: bool,
        g: &[NodeId],
        acc: &[NodeId],
        base: Option<NodeId>,
        tape: &[NodeId],
        xs: &[NodeId],
        gys: &[NodeId],
    ) -> Result<(Vec<NodeId>, Vec<NodeId>, Vec<NodeId>)> {
        let n = self.n();
        let mut nb = GraphBuilder::new();
        let i = nb.input("i", self.index_ty());
        let gi = params(&mut nb, "cotangent/carry", self.carry_types());
        let acc_in = params(&mut nb, "cotangent/operand", self.act_p_types());
        let p = params(&mut nb, "operand", self.const_types());
        let base_in = base.map(|_| nb.input("base", self.index_ty()));
        let c = params(&mut nb, "carry", self.carry_types());
        let xk = params(&mut nb, "x", self.x_types());
        let gy = params(&mut nb, "cotangent/y", self.gy_types());
        let idx = Self::index(&mut nb, i, base_in)?;
        let mut args = vec![idx];
        args.extend(&c);
        args.extend(&p);
        args.extend(&xk);
        args.extend(&gi);
        args.extend(&gy);
        let outs = nb.inline_graph(&self.body_vjp, &args)?;
        let n_acc = acc_in.len();
        let mut results: Vec<NodeId> = outs[..n].to_vec();
        for (k, a) in acc_in.iter().enumerate() {
            results.push(nb.add(*a, outs[n + k])?);
        }
        results.extend(&outs[n + n_acc..]);
        let body = nb.finish(results)?;
        let mut ops = g.to_vec();
        ops.extend(acc);
        ops.extend(&self.consts);
        ops.extend(base);
        ops.extend(tape);
        ops.extend(xs);
        ops.extend(gys);
        let scan = ScanBody {
            length: len,
            start: if base.is_some() { 0 } else { start },
            reverse,
            n_carry: n + n_acc,
            n_const: self.consts.len() + usize::from(base.is_some()),
            n_xs: tape.len() + xs.len() + gys.len(),
            body: Arc::new(quabla_ir::passes::dce(&body)),
        };
        let outs = self.region(b, scan, &ops)?;
        Ok((
            outs[..n].to_vec(),
            outs[n..n + n_acc].to_vec(),
            outs[n + n_acc..].to_vec(),
        ))
    }

    /// Slices `[from, from + len)` of the leading axis of each of `xs`, reshaped to
    /// `[len / block, block, ...]` when `block` is given.
    fn window(
        b: &mut GraphBuilder,
        xs: &[NodeId],
        from: usize,
        len: usize,
        block: Option<usize>,
    ) -> Result<Vec<NodeId>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        xs.iter()
            .map(|&x| {
                let dims = b.ty(x).shape.dims().to_vec();
                let mut starts = vec![0; dims.len()];
                starts[0] = from;
                let mut sizes = dims.clone();
                sizes[0] = len;
                let sliced = if from == 0 && len == dims[0] {
                    x
                } else {
                    b.slice(x, starts, sizes)?
                };
                match block {
                    Some(bl) => {
                        let mut shape = vec![len / bl, bl];
                        shape.extend(&dims[1..]);
                        b.reshape_to(sliced, Shape::new(shape)?)
                    }
                    None => Ok(sliced),
                }
            })
            .collect()
    }

    /// The outer block scans: `forward` stores the carry entering each block and returns the
    /// final carries, the checkpoints and (with `ys`) the user's outputs as `[nb, B, ...]`;
    /// the backward one walks the blocks the other way.
    fn blocks_forward(
        &self,
        b: &mut GraphBuilder,
        nblocks: usize,
        block: usize,
        carry: &[NodeId],
        x_blocks: &[NodeId],
        ys: bool,
    ) -> Result<(Vec<NodeId>, Vec<NodeId>, Vec<NodeId>)> {
        let n = self.n();
        let mut nb = GraphBuilder::new();
        let bi = nb.input("block", self.index_ty());
        let c = params(&mut nb, "carry", self.carry_types());
        let p = params(&mut nb, "operand", self.const_types());
        let xb = slice_params(&mut nb, b, "x", x_blocks)?;
        let base = self.block_base(&mut nb, bi, block)?;
        let inner = ScanVjp {
            consts: p.clone(),
            ..self.shallow()
        };
        let (c_out, _, inner_ys) = inner.tape_scan(
            &mut nb,
            0,
            block,
            self.s.reverse,
            &c,
            Some(base),
            &xb,
            false,
            ys,
        )?;
        let mut results = c_out;
        results.extend(&c);
        results.extend(inner_ys);
        let body = nb.finish(results)?;
        let mut ops = carry.to_vec();
        ops.extend(&self.consts);
        ops.extend(x_blocks);
        let scan = ScanBody {
            length: nblocks,
            start: 0,
            reverse: self.s.reverse,
            n_carry: n,
            n_const: self.consts.len(),
            n_xs: x_blocks.len(),
            body: Arc::new(quabla_ir::passes::dce(&body)),
        };
        let outs = self.region(b, scan, &ops)?;
        Ok((
            outs[..n].to_vec(),
            outs[n..2 * n].to_vec(),
            outs[2 * n..].to_vec(),
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn blocks_backward(
        &self,
        b: &mut GraphBuilder,
        nblocks: usize,
        block: usize,
        g: &[NodeId],
        acc: &[NodeId],
        checkpoints: &[NodeId],
        x_blocks: &[NodeId],
        gy_blocks: &[NodeId],
    ) -> Result<(Vec<NodeId>, Vec<NodeId>, Vec<NodeId>)> {
        let n = self.n();
        let mut nb = GraphBuilder::new();
        let bi = nb.input("block", self.index_ty());
        let gi = params(&mut nb, "cotangent/carry", self.carry_types());
        let acc_in = params(&mut nb, "cotangent/operand", self.act_p_types());
        let p = params(&mut nb, "operand", self.const_types());
        let ck = slice_params(&mut nb, b, "checkpoint", checkpoints)?;
        let xb = slice_params(&mut nb, b, "x", x_blocks)?;
        let gyb = slice_params(&mut nb, b, "cotangent/y", gy_blocks)?;
        let base = self.block_base(&mut nb, bi, block)?;
        let inner = ScanVjp {
            consts: p.clone(),
            ..self.shallow()
        };
        let (_, tape, _) = inner.tape_scan(
            &mut nb,
            0,
            block,
            self.s.reverse,
            &ck,
            Some(base),
            &xb,
            true,
            false,
        )?;
        let (g_out, acc_out, ctx) = inner.backward_scan(
            &mut nb,
            0,
            block,
            !self.s.reverse,
            &gi,
            &acc_in,
            Some(base),
            &tape,
            &xb,
            &gyb,
        )?;
        let mut results = g_out;
        results.extend(acc_out);
        results.extend(ctx);
        let body = nb.finish(results)?;
        let mut ops = g.to_vec();
        ops.extend(acc);
        ops.extend(&self.consts);
        ops.extend(checkpoints);
        ops.extend(x_blocks);
        ops.extend(gy_blocks);
        let n_acc = acc.len();
        let scan = ScanBody {
            length: nblocks,
            start: 0,
            reverse: !self.s.reverse,
            n_carry: n + n_acc,
            n_const: self.consts.len(),
            n_xs: checkpoints.len() + x_blocks.len() + gy_blocks.len(),
            body: Arc::new(quabla_ir::passes::dce(&body)),
        };
        let outs = self.region(b, scan, &ops)?;
        Ok((
            outs[..n].to_vec(),
            outs[n..n + n_acc].to_vec(),
            outs[n + n_acc..].to_vec(),
        ))
    }

    /// `start + block * len` in the index dtype (exact: both are integers).
    fn block_base(&self, nb: &mut GraphBuilder, bi: NodeId, len: usize) -> Result<NodeId> {
        let dtype = self.types[0].dtype;
        let scale = nb.scalar(len as f64, dtype, false);
        let scaled = nb.mul(bi, scale)?;
        if self.s.start == 0 {
            return Ok(scaled);
        }
        let start = nb.scalar(self.s.start as f64, dtype, false);
        nb.add(scaled, start)
    }

    /// A copy that shares the body VJP and layout (for building inner loops).
    fn shallow(&self) -> ScanVjp<'a> {
        ScanVjp {
            s: self.s,
            form: self.form,
            level: self.level,
            body_vjp: self.body_vjp.clone(),
            types: self.types.clone(),
            act_p: self.act_p.clone(),
            act_x: self.act_x.clone(),
            seeded: self.seeded.clone(),
            carries: Vec::new(),
            consts: Vec::new(),
            xs: Vec::new(),
            g_final: Vec::new(),
            gys: Vec::new(),
        }
    }

    /// The forward pass: the region's outputs (final carries, then stacked ys), computed by
    /// the block loops, and what the backward pass keeps of it.
    fn forward(&self, b: &mut GraphBuilder) -> Result<(Vec<NodeId>, ScanTape)> {
        let t_len = self.s.length;
        let block = block_length(t_len);
        let nblocks = t_len / block;
        let split = nblocks * block;
        let tail = t_len - split;
        let ys = self.s.n_ys() > 0;
        let x_blocks = Self::window(b, &self.xs, 0, split, Some(block))?;
        let x_tail = Self::window(b, &self.xs, split, tail, None)?;
        let tail_start = self.s.start + split;
        let (c_end, checkpoints, ys_blocks, tail_tape, ys_tail);
        if !self.s.reverse {
            // Time runs block 0 .. block nb-1, then the tail.
            let (c_mid, ck, yb) =
                self.blocks_forward(b, nblocks, block, &self.carries, &x_blocks, ys)?;
            (checkpoints, ys_blocks) = (ck, yb);
            if tail > 0 {
                let (c, tape, yt) =
                    self.tape_scan(b, tail_start, tail, false, &c_mid, None, &x_tail, true, ys)?;
                (c_end, tail_tape, ys_tail) = (c, tape, yt);
            } else {
                (c_end, tail_tape, ys_tail) = (c_mid, Vec::new(), Vec::new());
            }
        } else {
            // Time runs the tail (highest indices) first, then blocks nb-1 .. 0.
            let mut c_mid = self.carries.clone();
            let (mut tape_t, mut yt) = (Vec::new(), Vec::new());
            if tail > 0 {
                let (c, tape, y) = self.tape_scan(
                    b,
                    tail_start,
                    tail,
                    true,
                    &self.carries,
                    None,
                    &x_tail,
                    true,
                    ys,
                )?;
                (c_mid, tape_t, yt) = (c, tape, y);
            }
            let (c, ck, yb) = self.blocks_forward(b, nblocks, block, &c_mid, &x_blocks, ys)?;
            (c_end, checkpoints, ys_blocks, tail_tape, ys_tail) = (c, ck, yb, tape_t, yt);
        }
        // The stacked outputs in index order: blocks [nb, B, ...] -> [nb * B, ...], then the
        // tail.
        let mut outputs = c_end;
        for (k, &yb) in ys_blocks.iter().enumerate() {
            let joined = Self::unblock(b, yb)?;
            outputs.push(if tail > 0 {
                b.concat(&[joined, ys_tail[k]], 0)?
            } else {
                joined
            });
        }
        Ok((
            outputs,
            ScanTape {
                checkpoints,
                tail_tape,
            },
        ))
    }

    /// `[nb, B, ...]` as `[nb * B, ...]`.
    fn unblock(b: &mut GraphBuilder, x: NodeId) -> Result<NodeId> {
        let dims = b.ty(x).shape.dims().to_vec();
        let mut flat = vec![dims[0] * dims[1]];
        flat.extend(&dims[2..]);
        b.reshape_to(x, Shape::new(flat)?)
    }

    /// The backward pass from the forward pass's checkpoints and tail tape.
    fn backward(self, b: &mut GraphBuilder, saved: &ScanTape) -> Result<Vec<Option<NodeId>>> {
        let t_len = self.s.length;
        let block = block_length(t_len);
        let nblocks = t_len / block;
        let split = nblocks * block;
        let tail = t_len - split;
        let x_blocks = Self::window(b, &self.xs, 0, split, Some(block))?;
        let x_tail = Self::window(b, &self.xs, split, tail, None)?;
        let gy_blocks = Self::window(b, &self.gys, 0, split, Some(block))?;
        let gy_tail = Self::window(b, &self.gys, split, tail, None)?;
        let mut g: Vec<NodeId> = Vec::new();
        for (k, c) in self.g_final.iter().enumerate() {
            g.push(match c {
                Some(c) => *c,
                None => zeros(b, &self.carry_types()[k])?,
            });
        }
        let mut acc: Vec<NodeId> = Vec::new();
        for t in self.act_p_types() {
            acc.push(zeros(b, &t)?);
        }
        let tail_start = self.s.start + split;
        let mut ct_tail = Vec::new();
        // The tail comes last in time for a forward scan, first for a reverse one.
        let tail_first_backward = !self.s.reverse;
        if tail > 0 && tail_first_backward {
            let (g2, acc2, ctx) = self.backward_scan(
                b,
                tail_start,
                tail,
                true,
                &g,
                &acc,
                None,
                &saved.tail_tape,
                &x_tail,
                &gy_tail,
            )?;
            (g, acc, ct_tail) = (g2, acc2, ctx);
        }
        let (g2, acc2, ct_blocks) = self.blocks_backward(
            b,
            nblocks,
            block,
            &g,
            &acc,
            &saved.checkpoints,
            &x_blocks,
            &gy_blocks,
        )?;
        (g, acc) = (g2, acc2);
        if tail > 0 && !tail_first_backward {
            let (g3, acc3, ctx) = self.backward_scan(
                b,
                tail_start,
                tail,
                false,
                &g,
                &acc,
                None,
                &saved.tail_tape,
                &x_tail,
                &gy_tail,
            )?;
            (g, acc, ct_tail) = (g3, acc3, ctx);
        }
        // Reassemble the x cotangents in index order, as the forward pass does the ys.
        let mut ct_x = Vec::new();
        for (k, &cb) in ct_blocks.iter().enumerate() {
            let joined = Self::unblock(b, cb)?;
            ct_x.push(if tail > 0 {
                b.concat(&[joined, ct_tail[k]], 0)?
            } else {
                joined
            });
        }
        let (n, np, nx) = (self.s.n_carry, self.s.n_const, self.s.n_xs);
        let mut result: Vec<Option<NodeId>> = g.into_iter().map(Some).collect();
        let mut acc_iter = acc.into_iter();
        for k in 0..np {
            result.push(if self.act_p[k] { acc_iter.next() } else { None });
        }
        let mut x_iter = ct_x.into_iter();
        for k in 0..nx {
            result.push(if self.act_x[k] { x_iter.next() } else { None });
        }
        debug_assert_eq!(result.len(), n + np + nx);
        Ok(result)
    }
}

/// What the forward pass of a loop VJP keeps for its backward pass: the carry at each block
/// boundary (stacked, one tensor per carry) and the carry tape of the tail iterations.
#[derive(Clone, Debug)]
pub(crate) struct ScanTape {
    checkpoints: Vec<NodeId>,
    tail_tape: Vec<NodeId>,
}

/// The forward pass of a loop that reverse mode will differentiate: the region's outputs
/// computed by the checkpointing block loops, plus the checkpoints, so that the primal values
/// and the checkpoints come from one forward evaluation. `None` for regions whose reverse
/// mode is another rule (`cond`, `while`): those keep their primal node.
pub(crate) fn scan_forward(
    b: &mut GraphBuilder,
    region: &Region,
    x: &[NodeId],
) -> Result<Option<(Vec<NodeId>, ScanTape)>> {
    if let RegionKind::While { .. } = region.kind() {
        return match bounded_scan(region)? {
            Some(scan) => scan_forward(b, &scan, x),
            None => Ok(None),
        };
    }
    let RegionKind::Scan(s) = region.kind() else {
        return Ok(None);
    };
    let form = vjp_form(region);
    let wrt = vec![false; x.len()];
    let cts = vec![None; region.output_types().len()];
    let fwd = ScanVjp::new(s, form, level_up(region), x, &wrt, &cts)?;
    fwd.forward(b).map(Some)
}
