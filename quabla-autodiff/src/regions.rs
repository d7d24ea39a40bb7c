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
//!   of `fori_loop`) is built from scans only, with √T carry checkpointing (§13, see
//!   [`scan_vjp`]).
//! - Reverse mode of a `while` with a trip bound (`max_trips`) runs the loop with a trip
//!   counter, then walks back over the trips it took with checkpoints laid out from that count
//!   at run time (see [`while_vjp`]): its cost follows the trips taken, not the bound. Without
//!   a bound the trip count has no limit to lay checkpoints out for: TF2.
//!
//! Every derivative of a loop is a loop region of the kinds above whose bodies are derivatives
//! of the original bodies, so the rules apply to their own results and every order and mode
//! composes. A derived region records its [`RegionForm`] and one more derivative level.

mod scan_vjp;
mod while_vjp;

use crate::vjp::Seed;
use quabla_ir::{
    Graph, GraphBuilder, IrError, NodeId, Op, Region, RegionForm, RegionKind, Result, ScanBody,
    Shape, TensorType,
};
use scan_vjp::{ScanTape, ScanVjp};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;
use while_vjp::WhileTape;

thread_local! {
    static FULL_TAPE: Cell<bool> = const { Cell::new(false) };
}

/// Makes loop VJPs built on this thread keep the full carry tape (one block of `T`
/// iterations, or one level of `max_trips` slots for a bounded `while`) instead of
/// checkpoints while the guard lives. A test switch: the checkpointed gradient must be
/// bit-identical to the full tape.
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

/// Whether [`full_tape_loops`] is on for this thread.
fn full_tape() -> bool {
    FULL_TAPE.with(Cell::get)
}

/// The checkpoint block length for `t` iterations: `ceil(sqrt(t))`, or `t` for a full tape.
pub fn block_length(t: usize) -> usize {
    if full_tape() {
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

/// Pushes one node per output of `region` applied to `operands`, next to each other.
fn call(b: &mut GraphBuilder, region: Region, operands: &[NodeId]) -> Result<Vec<NodeId>> {
    let n = region.output_types().len();
    b.push_region_calls(Arc::new(region), 0..n, operands)
}

/// [`call`] for a region that may be called elsewhere too.
fn call_shared(
    b: &mut GraphBuilder,
    region: Arc<Region>,
    operands: &[NodeId],
) -> Result<Vec<NodeId>> {
    let n = region.output_types().len();
    b.push_region_calls(region, 0..n, operands)
}

/// Forward-mode regions derived during the outermost `jvp_graph` on this thread, by the
/// address of the region they derive from and the activity that shaped them. The entry holds
/// its source, so that the address cannot be reused while the entry lives.
type Derived = HashMap<(usize, Vec<bool>), (Arc<Region>, Arc<Region>)>;

thread_local! {
    static JVP_REGIONS: RefCell<Option<Derived>> = const { RefCell::new(None) };
}

/// The scope of one outermost `jvp_graph`: within it, a region differentiated in several
/// places with the same activity is differentiated once and its derivative shared. A
/// derivative of nested loops calls each inner loop from several bodies (the forward pass,
/// each recomputation, the body's VJP); differentiated per call, forward over reverse of loops
/// nested `d` deep was a program of `d²` parts.
pub(crate) struct JvpScope {
    owner: bool,
}

impl JvpScope {
    pub(crate) fn enter() -> JvpScope {
        let owner = JVP_REGIONS.with(|c| {
            let mut c = c.borrow_mut();
            let fresh = c.is_none();
            if fresh {
                *c = Some(HashMap::new());
            }
            fresh
        });
        JvpScope { owner }
    }
}

impl Drop for JvpScope {
    fn drop(&mut self) {
        if self.owner {
            JVP_REGIONS.with(|c| *c.borrow_mut() = None);
        }
    }
}

/// The forward-mode derivative of `region` under the activity `key`, built by `build` unless
/// this scope built it already.
fn shared_jvp(
    region: &Arc<Region>,
    key: &[bool],
    build: impl FnOnce() -> Result<Region>,
) -> Result<Arc<Region>> {
    let key = (Arc::as_ptr(region) as usize, key.to_vec());
    let known = JVP_REGIONS.with(|c| {
        c.borrow()
            .as_ref()
            .and_then(|m| m.get(&key).map(|(_, d)| Arc::clone(d)))
    });
    if let Some(derived) = known {
        return Ok(derived);
    }
    let derived = Arc::new(build()?);
    JVP_REGIONS.with(|c| {
        if let Some(m) = c.borrow_mut().as_mut() {
            m.insert(key, (Arc::clone(region), Arc::clone(&derived)));
        }
    });
    Ok(derived)
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
    region: &Arc<Region>,
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
            let derived = shared_jvp(region, &act, || {
                let kind = RegionKind::Cond {
                    then_branch: Arc::new(crate::jvp_graph(then_branch, &act)?),
                    else_branch: Arc::new(crate::jvp_graph(else_branch, &act)?),
                };
                Region::new(kind, form, level)
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
                    return jvp_scan(b, region, s, x, t, &act, &ys_act);
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
            let derived = shared_jvp(region, &act, || {
                let tangent = crate::jvp_graph(body, &act)?;
                let kind = RegionKind::While {
                    n_carry: n + n_tc,
                    cond: Arc::new(rebind(cond, &inputs, &bind_primal, &[0])?),
                    body: Arc::new(rebind(&tangent, &inputs, &bind, &select)?),
                    max_trips: *max_trips,
                };
                Region::new(kind, form, level)
            })?;
            let outs = call_shared(b, derived, &operands)?;
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
    region: &Arc<Region>,
    s: &ScanBody,
    x: &[NodeId],
    t: &[Option<NodeId>],
    act: &[bool],
    ys_act: &[bool],
) -> Result<Vec<(NodeId, Option<NodeId>)>> {
    let (form, level) = (jvp_form(region), level_up(region));
    let (n, np, nx) = (s.n_carry, s.n_const, s.n_xs);
    let ny = s.n_ys();
    let mut wrt = vec![false];
    wrt.extend(act);
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
    let mut key = act.to_vec();
    key.extend(ys_act);
    let derived = shared_jvp(region, &key, || {
        let tangent = crate::jvp_graph(&s.body, &wrt)?;
        let kind = RegionKind::Scan(ScanBody {
            length: s.length,
            start: s.start,
            reverse: s.reverse,
            n_carry: counts[0],
            n_const: counts[1],
            n_xs: counts[2],
            body: Arc::new(rebind(&tangent, &inputs, &bind, &select)?),
        });
        Region::new(kind, form, level)
    })?;
    let outs = call_shared(b, derived, &operands)?;
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
    saved: Option<LoopTape>,
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
        RegionKind::While {
            max_trips: Some(_), ..
        } => {
            let saved = match saved {
                Some(LoopTape::While(tape)) => Some(tape),
                _ => None,
            };
            while_vjp::backward(b, region, x, wrt, cts, saved)
        }
        RegionKind::While { .. } => Err(tf2()),
        RegionKind::Scan(s) => {
            let vjp = ScanVjp::new(s, form, level, x, wrt, cts)?;
            let saved = match saved {
                Some(LoopTape::Scan(saved)) => saved,
                _ => vjp.forward(b)?.1,
            };
            vjp.backward(b, &saved)
        }
    }
}

/// What the forward pass of a loop VJP keeps for its backward pass.
#[derive(Clone, Debug)]
pub(crate) enum LoopTape {
    Scan(ScanTape),
    While(WhileTape),
}

/// The forward pass of a loop that reverse mode will differentiate: the region's outputs
/// computed by the loop forms its VJP starts from (the checkpointing block loops of a scan,
/// the counted loop of a bounded `while`) and what the backward pass keeps, so that the
/// primal values and the tape come from one forward evaluation. `None` for regions whose
/// reverse mode needs nothing of the kind (`cond`, an unbounded `while`): those keep their
/// primal node.
pub(crate) fn scan_forward(
    b: &mut GraphBuilder,
    region: &Region,
    x: &[NodeId],
) -> Result<Option<(Vec<NodeId>, LoopTape)>> {
    if let RegionKind::While { .. } = region.kind() {
        let forward = while_vjp::forward(b, region, x)?;
        return Ok(forward.map(|(outs, tape)| (outs, LoopTape::While(tape))));
    }
    let RegionKind::Scan(s) = region.kind() else {
        return Ok(None);
    };
    let form = vjp_form(region);
    let wrt = vec![false; x.len()];
    let cts = vec![None; region.output_types().len()];
    let fwd = ScanVjp::new(s, form, level_up(region), x, &wrt, &cts)?;
    let (outs, tape) = fwd.forward(b)?;
    Ok(Some((outs, LoopTape::Scan(tape))))
}
