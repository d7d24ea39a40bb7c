//! Derivatives of `while` regions (transforms.md §12–§13, docs/loops.md).
//!
//! **Forward mode** is a `while` carrying the tangents of the active carries next to the
//! carries, with the same predicate (which carries are active is a fixed point, as for a
//! scan).
//!
//! **Reverse mode** needs a trip bound (`max_trips = m`; without one: TF2), and its cost
//! follows the trips the loop takes, not its bound. The forward pass is the loop itself with
//! a trip counter added to its carries: it runs the body `T` times (the trips taken) and gives
//! the carries bit for bit. The backward pass knows `T` and never tests the predicate again:
//! it is the reverse of `T` body applications, checkpointed over `D` nested levels of `S`
//! slots each (`S^D >= m`, [`layout`]). A level-`d` block covers up to `S^d` trips from a
//! given carry; it runs its first active sub-blocks (`S^(d-1)` trips each) forward, keeping
//! the carry entering each sub-block in a slot, then walks the sub-blocks backward, each one a
//! level-`d-1` block from its slot; a level-0 block is one trip, the body's VJP. Which
//! sub-blocks are active, and so which levels do any work, is decided at run time from `T`: a
//! block holding fewer than `S^(d-1)` of the remaining trips recomputes nothing and hands its
//! one active sub-block down. The work is `T` body runs forward, at most `T` recomputed per
//! level that `T` reaches (`ceil(log_S T)` levels) and `T` body VJPs, plus a test per inactive
//! slot of each block visited (at most `2 S` per level); the memory is `D S` carries.
//! `max_trips(usize::MAX)` is a loop of ten levels.
//!
//! The const cotangents are summed over the trips in reverse trip order, whatever the layout
//! (the sum is carried through every level), so the result does not depend on `m`: a loop
//! bounded by `2^20` or by `usize::MAX` gives the same bits as one bounded by its trips.
//!
//! Every piece is a `scan`, `cond` or bounded `while` region whose bodies are the loop's own
//! body or its VJP, so the derivative rules apply to the result again (every order and mode
//! composes), `vmap` batches it, and every executor runs it. This module never builds a
//! `scan` derivative's checkpoint blocks (`blocks.rs`) and never tests the predicate in the
//! backward pass.

use super::body::{
    dependence, input_types, keep_outputs, params, zeros, Body, Bound, LoopBody, Section, Tangents,
};
use super::forms::{call, call_shared, jvp_form, level_up, tf2, vjp_form};
use super::memo::shared_jvp;
use crate::sweep::{Forward, LoopTape, Reverse, Seed};
use quabla_ir::{
    BinaryOp, Comparison, DType, Graph, GraphBuilder, NodeId, Region, RegionForm, RegionKind,
    Result, Shape, TensorType,
};
use std::sync::Arc;

/// The parts of a `while` region: carries, predicate, body, trip bound.
pub(super) struct WhileParts<'a> {
    pub(super) n_carry: usize,
    pub(super) cond: &'a Graph,
    pub(super) body: &'a Graph,
    pub(super) max_trips: Option<usize>,
}

/// Forward mode of a `while`: the primal and tangent node of each carry.
pub(super) fn jvp(
    b: &mut GraphBuilder,
    fwd: Forward,
    region: &Arc<Region>,
    parts: WhileParts<'_>,
    x: &[NodeId],
    t: &[Option<NodeId>],
) -> Result<Vec<(NodeId, Option<NodeId>)>> {
    let n = parts.n_carry;
    let np = x.len() - n;
    let is_float = |b: &GraphBuilder, n: NodeId| b.ty(n).dtype.is_float();
    let mut act: Vec<bool> = (0..n + np)
        .map(|k| t[k].is_some() && is_float(b, x[k]))
        .collect();
    loop {
        let dep = dependence(parts.body, &act);
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
    let types = input_types(parts.body);
    // The derived bodies take (carries, carry tangents, consts, const tangents), tangents of
    // the active ones only.
    let mut body = LoopBody::new();
    let mut bound = Bound::default();
    let operands = Tangents {
        types: &types,
        x,
        t,
        active: &act,
        offset: 0,
    };
    body.tangent_section(b, Section::Carry, 0..n, &operands, &mut bound)?;
    body.tangent_section(b, Section::Const, n..n + np, &operands, &mut bound)?;
    // Body outputs: carries then their tangents (only active ones are carried).
    let mut select: Vec<usize> = (0..n).collect();
    select.extend((0..n).filter(|&k| act[k]).map(|k| n + k));
    let call_operands = body.operands().to_vec();
    let derived = shared_jvp(region, &act, || {
        let tangent = fwd.jvp(parts.body, &act)?;
        let (mut cb, _) = body.twin();
        let p = cb.inline_graph(parts.cond, &bound.primals)?;
        let cond = quabla_ir::passes::dce(&cb.finish(vec![p[0]])?);
        let outs = body.builder().inline_graph(&tangent, &bound.args())?;
        let results = select.iter().map(|&k| outs[k]).collect();
        let (kind, _) = body
            .finish(results)?
            .dce()
            .while_loop(cond, parts.max_trips);
        Region::new(kind, jvp_form(region), level_up(region))
    })?;
    let outs = call_shared(b, derived, &call_operands)?;
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

/// The most slots of one level. More slots mean fewer levels (less recomputation: a loop of
/// `T` trips recomputes about `T` per level it reaches) but more memory (`D S` carries, held
/// whatever the trips) and more slot tests per block visited. With 128, every bound up to
/// `2^14` has the two levels of `ceil(sqrt(m))` slots that the √T rule gives, and
/// `usize::MAX` ten levels of 85.
const SLOTS_MAX: usize = 128;

/// `(S, D)`: `D` levels of `S` slots for at most `m` trips, `S^D >= m`, the fewest levels with
/// at most [`SLOTS_MAX`] slots and at least two (one level is a full tape), `S` the least that
/// reaches `m`. With [`LoopTape::Full`], one level of `m` slots.
fn layout(m: usize, tape: LoopTape) -> (usize, usize) {
    if tape == LoopTape::Full || m <= 1 {
        return (m.max(1), 1);
    }
    let reaches = |s: usize, d: usize| s.checked_pow(d as u32).is_none_or(|p| p >= m);
    let mut depth = 2;
    while !reaches(SLOTS_MAX, depth) {
        depth += 1;
    }
    let mut slots = ((m as f64).powf(1.0 / depth as f64).floor() as usize).max(2);
    while slots > 2 && reaches(slots - 1, depth) {
        slots -= 1;
    }
    while !reaches(slots, depth) {
        slots += 1;
    }
    (slots, depth)
}

/// What the forward pass keeps for the backward pass: the trips taken.
#[derive(Clone, Debug)]
pub(crate) struct WhileTape {
    trips: NodeId,
}

fn count_ty() -> TensorType {
    TensorType::new(DType::F64, Shape::scalar())
}

/// The forward pass of a bounded `while` that reverse mode will differentiate: the loop with a
/// trip counter, returning the region's outputs and the count. `None` for an unbounded loop.
pub(super) fn forward(
    b: &mut GraphBuilder,
    region: &Region,
    x: &[NodeId],
) -> Result<Option<(Vec<NodeId>, WhileTape)>> {
    let RegionKind::While {
        n_carry,
        cond,
        body,
        max_trips: Some(m),
    } = region.kind()
    else {
        return Ok(None);
    };
    let n = *n_carry;
    let types = input_types(body);
    // Both bodies take (carries.., count, consts..).
    let zero = b.scalar(0.0, DType::F64, false);
    let mut counted = LoopBody::new();
    let mut args = counted.positional(Section::Carry, types[..n].to_vec(), &x[..n]);
    let count = counted.positional(Section::Carry, vec![count_ty()], &[zero])[0];
    args.extend(counted.positional(Section::Const, types[n..].to_vec(), &x[n..]));
    let (mut cb, _) = counted.twin();
    let p = cb.inline_graph(cond, &args)?;
    let counted_cond = cb.finish(p)?;
    let bb = counted.builder();
    let mut outs = bb.inline_graph(body, &args)?;
    let one = bb.scalar(1.0, DType::F64, false);
    outs.push(bb.add(count, one)?);
    let (kind, operands) = counted.finish(outs)?.while_loop(counted_cond, Some(*m));
    let counted = Region::new(kind, region.form(), region.level())?;
    let mut outs = call(b, counted, &operands)?;
    let trips = outs.pop().expect("the trip count");
    Ok(Some((outs, WhileTape { trips })))
}

/// The backward pass of a bounded `while` (see the module docs): one cotangent per operand.
/// `saved` is what [`forward`] kept (the loop is run again to count its trips when absent).
pub(super) fn backward(
    b: &mut GraphBuilder,
    rev: Reverse,
    region: &Region,
    (x, wrt): (&[NodeId], &[bool]),
    cts: &[Option<NodeId>],
    saved: Option<WhileTape>,
) -> Result<Vec<Option<NodeId>>> {
    let RegionKind::While {
        n_carry,
        body,
        max_trips: Some(m),
        ..
    } = region.kind()
    else {
        return Err(tf2());
    };
    let trips = match saved {
        Some(tape) => tape.trips,
        None => forward(b, region, x)?.expect("the loop is bounded").1.trips,
    };
    // The count steers the layout; it has no derivative.
    let trips = b.stop_gradient(trips)?;
    let rule = Rule::new(region, body, *n_carry, wrt, rev)?;
    let (slots, depth) = layout(*m, rev.loop_tape());
    let top = rule.level(slots, depth)?;
    let mut args = vec![trips];
    args.extend_from_slice(x);
    for &c in &rule.float_carries {
        args.push(match cts[c] {
            Some(ct) => ct,
            None => zeros(b, &rule.types[c])?,
        });
    }
    for &p in &rule.active_consts {
        args.push(zeros(b, &rule.types[rule.n + p])?);
    }
    let outs = b.inline_graph(&top, &args)?;
    let mut result = vec![None; x.len()];
    for (k, &c) in rule.float_carries.iter().enumerate() {
        result[c] = Some(outs[k]);
    }
    let nf = rule.float_carries.len();
    for (k, &p) in rule.active_consts.iter().enumerate() {
        result[rule.n + p] = Some(outs[nf + k]);
    }
    Ok(result)
}

/// The pieces every level is built from.
struct Rule<'a> {
    form: RegionForm,
    level: u8,
    body: &'a Graph,
    n: usize,
    /// The operand types: carries, then consts.
    types: Vec<TensorType>,
    /// The carries that have cotangents (the float ones), and the consts that need one.
    float_carries: Vec<usize>,
    active_consts: Vec<usize>,
    /// One trip backward: `(carries.., consts.., carry cotangents..) -> (carry cotangents..,
    /// const cotangents..)`.
    trip_vjp: Graph,
}

impl<'a> Rule<'a> {
    fn new(
        region: &Region,
        body: &'a Graph,
        n: usize,
        wrt: &[bool],
        rev: Reverse,
    ) -> Result<Rule<'a>> {
        let types = input_types(body);
        let np = types.len() - n;
        let float_carries: Vec<usize> = (0..n).filter(|&k| types[k].dtype.is_float()).collect();
        let active_consts: Vec<usize> = (0..np)
            .filter(|&k| wrt[n + k] && types[n + k].dtype.is_float())
            .collect();
        let mut flags: Vec<bool> = (0..n).map(|k| types[k].dtype.is_float()).collect();
        flags.extend((0..np).map(|k| active_consts.contains(&k)));
        let seeds: Vec<Seed> = (0..n)
            .map(|k| {
                if types[k].dtype.is_float() {
                    Seed::Input
                } else {
                    Seed::None
                }
            })
            .collect();
        let n_out = float_carries.len() + active_consts.len();
        let trip_vjp = keep_outputs(&rev.vjp(body, &flags, &seeds)?, n..n + n_out)?;
        Ok(Rule {
            form: vjp_form(region),
            level: level_up(region),
            body,
            n,
            types,
            float_carries,
            active_consts,
            trip_vjp,
        })
    }

    /// Calls a derived loop of this rule's form and level from `g`.
    fn call(
        &self,
        g: &mut GraphBuilder,
        (kind, operands): (RegionKind, Vec<NodeId>),
    ) -> Result<Vec<NodeId>> {
        call(g, Region::new(kind, self.form, self.level)?, &operands)
    }

    fn carry_types(&self) -> Vec<TensorType> {
        self.types[..self.n].to_vec()
    }

    fn const_types(&self) -> Vec<TensorType> {
        self.types[self.n..].to_vec()
    }

    /// The cotangent state: one per float carry, then one per active const.
    fn state_types(&self) -> Vec<TensorType> {
        let mut t: Vec<TensorType> = self
            .float_carries
            .iter()
            .map(|&k| self.types[k].clone())
            .collect();
        t.extend(
            self.active_consts
                .iter()
                .map(|&k| self.types[self.n + k].clone()),
        );
        t
    }

    /// The block of level `d` as a graph: `(r, carries.., consts.., state..) -> state..`, the
    /// reverse of the first `r` trips (`0 <= r <= S^d`) from `carries`, the state holding the
    /// cotangent of the carries after them and the const cotangents summed so far.
    fn level(&self, slots: usize, d: usize) -> Result<Graph> {
        if d == 0 {
            return self.one_trip();
        }
        let below = Arc::new(self.level(slots, d - 1)?);
        // Trips per sub-block; a float above 2^53 only ever meets counts far below it.
        let sub = slots.checked_pow(d as u32 - 1).unwrap_or(usize::MAX);
        let mut g = GraphBuilder::new();
        let r = g.input("trips", count_ty());
        let c = params(&mut g, "carry", self.carry_types());
        let p = params(&mut g, "operand", self.const_types());
        let state = params(&mut g, "cotangent", self.state_types());
        if slots == 1 {
            // One slot: the block's carry, nothing to run forward.
            let zero = g.scalar(0.0, DType::F64, false);
            let outs = self.run_sub_block(&mut g, below, sub, zero, r, (&c, &p), &state)?;
            return g.finish(outs);
        }
        // Forward: slot j holds the carry entering sub-block j; sub-block j runs only when
        // sub-block j + 1 is active.
        let sweep = self.forward_sweep(sub, &c, &p, r)?;
        let outs = self.call(&mut g, sweep.scan(slots, 0, false))?;
        let stack = outs[self.n..].to_vec();
        // Backward: the active sub-blocks in reverse, each a block of the level below.
        let sweep = self.backward_sweep(sub, below, &state, &p, r, &stack)?;
        let outs = self.call(&mut g, sweep.scan(slots, 0, true))?;
        g.finish(outs)
    }

    /// One trip backward, `(r, carries.., consts.., state..) -> state..` (`r` unused).
    fn one_trip(&self) -> Result<Graph> {
        let mut g = GraphBuilder::new();
        let _r = g.input("trips", count_ty());
        let c = params(&mut g, "carry", self.carry_types());
        let p = params(&mut g, "operand", self.const_types());
        let state = params(&mut g, "cotangent", self.state_types());
        let nf = self.float_carries.len();
        let mut args = c;
        args.extend(&p);
        args.extend(&state[..nf]);
        let outs = g.inline_graph(&self.trip_vjp, &args)?;
        let mut results = outs[..nf].to_vec();
        for (k, &acc) in state[nf..].iter().enumerate() {
            results.push(g.add(acc, outs[nf + k])?);
        }
        g.finish(results)
    }

    /// The forward sweep over the slots of a level whose sub-blocks take `sub` trips, from
    /// carries `c` with consts `p` and `r` trips: body `(j, carries.., consts.., r) ->
    /// (carries.., carries..)`, the second copy stacked.
    fn forward_sweep(&self, sub: usize, c: &[NodeId], p: &[NodeId], r: NodeId) -> Result<Body> {
        let n = self.n;
        let (mut sweep, j) = LoopBody::scan("slot", count_ty());
        let c = sweep.params(Section::Carry, "carry", self.carry_types(), c);
        let p = sweep.params(Section::Const, "operand", self.const_types(), p);
        let r = sweep.param(Section::Const, "trips", count_ty(), r);
        let g = sweep.builder();
        let size = g.scalar(sub as f64, DType::F64, false);
        let one = g.scalar(1.0, DType::F64, false);
        let next = g.add(j, one)?;
        let next_start = g.mul(next, size)?;
        let needed = g.compare(Comparison::Less, next_start, r)?;
        // `sub` trips or none, as a counted `while` rather than a `cond`: under `vmap` it
        // runs only while some example needs it.
        let zero = g.scalar(0.0, DType::F64, false);
        let target = g.select(needed, size, zero)?;
        let advance = self.advance(sub, (&c, &p), zero, target)?;
        let mut results = self.call(g, advance)?;
        results.truncate(n);
        results.extend(&c);
        sweep.finish(results)
    }

    /// A `while` that applies the body `target` times (`target <= bound`) to carries `c`
    /// with consts `p`, counting from `zero`: carries `(carries.., k)`, consts `(consts..,
    /// target)`.
    fn advance(
        &self,
        bound: usize,
        (c, p): (&[NodeId], &[NodeId]),
        zero: NodeId,
        target: NodeId,
    ) -> Result<(RegionKind, Vec<NodeId>)> {
        let mut counted = LoopBody::new();
        let mut args = counted.positional(Section::Carry, self.carry_types(), c);
        let k = counted.positional(Section::Carry, vec![count_ty()], &[zero])[0];
        args.extend(counted.positional(Section::Const, self.const_types(), p));
        let last = counted.positional(Section::Const, vec![count_ty()], &[target])[0];
        let (mut cb, _) = counted.twin();
        let going = cb.compare(Comparison::Less, k, last)?;
        let cond = cb.finish(vec![going])?;
        let bb = counted.builder();
        let mut outs = bb.inline_graph(self.body, &args)?;
        let one = bb.scalar(1.0, DType::F64, false);
        outs.push(bb.binary(BinaryOp::Add, k, one)?);
        Ok(counted.finish(outs)?.while_loop(cond, Some(bound)))
    }

    /// The backward sweep: body `(j, state.., consts.., r, slot carries..) -> state..`,
    /// sub-block `j` (when active) as a block of the level below from its slot.
    fn backward_sweep(
        &self,
        sub: usize,
        below: Arc<Graph>,
        state: &[NodeId],
        p: &[NodeId],
        r: NodeId,
        stack: &[NodeId],
    ) -> Result<Body> {
        let (mut sweep, j) = LoopBody::scan("slot", count_ty());
        let state = sweep.params(Section::Carry, "cotangent", self.state_types(), state);
        let p = sweep.params(Section::Const, "operand", self.const_types(), p);
        let r = sweep.param(Section::Const, "trips", count_ty(), r);
        let c = sweep.params(Section::Xs, "carry", self.carry_types(), stack);
        let g = sweep.builder();
        let size = g.scalar(sub as f64, DType::F64, false);
        let start = g.mul(j, size)?;
        let outs = self.run_sub_block(g, below, sub, start, r, (&c, &p), &state)?;
        sweep.finish(outs)
    }

    /// The sub-block of `sub = S^(d-1)` trips starting at trip `start` of a block of `r`
    /// trips, run backward from its slot `c` by `below` when it is active: the new state.
    /// It is a `while` of at most one trip rather than a `cond`, so that under `vmap` (where
    /// a `cond` on a mapped predicate runs both branches) it runs only when some example has
    /// trips there: a `cond` would run every sub-block of every level.
    #[allow(clippy::too_many_arguments)]
    fn run_sub_block(
        &self,
        g: &mut GraphBuilder,
        below: Arc<Graph>,
        sub: usize,
        start: NodeId,
        r: NodeId,
        (c, p): (&[NodeId], &[NodeId]),
        state: &[NodeId],
    ) -> Result<Vec<NodeId>> {
        let active = g.compare(Comparison::Less, start, r)?;
        let left = g.sub(r, start)?;
        let size = g.scalar(sub as f64, DType::F64, false);
        let fits = g.compare(Comparison::Less, left, size)?;
        let here = g.select(fits, left, size)?;
        // Carries (pending, state..); consts (trips, slot carries.., consts..).
        let bool_ty = TensorType::new(DType::Bool, Shape::scalar());
        let mut once = LoopBody::new();
        let pending = once.positional(Section::Carry, vec![bool_ty], &[active])[0];
        let st = once.positional(Section::Carry, self.state_types(), state);
        let trips = once.positional(Section::Const, vec![count_ty()], &[here])[0];
        let mut args = vec![trips];
        args.extend(once.positional(Section::Const, self.carry_types(), c));
        args.extend(once.positional(Section::Const, self.const_types(), p));
        args.extend(st);
        let (cb, _) = once.twin();
        let cond = cb.finish(vec![pending])?;
        let bb = once.builder();
        let done = bb.constant(
            quabla_ir::HostData::Bool([false].into()),
            Shape::scalar(),
            false,
        )?;
        let mut outs = vec![done];
        outs.extend(bb.inline_graph(&below, &args)?);
        let outs = self.call(g, once.finish(outs)?.while_loop(cond, Some(1)))?;
        Ok(outs[1..].to_vec())
    }
}
