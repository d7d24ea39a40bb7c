//! Reverse mode of a `while` region with a trip bound (`max_trips = m`), whose cost follows
//! the trips the loop takes, not its bound (docs/loops.md).
//!
//! The forward pass is the loop itself with a trip counter added to its carries: it runs the
//! body `T` times (the trips taken) and gives the carries bit for bit. The backward pass knows
//! `T` and never tests the predicate again: it is the reverse of `T` body applications,
//! checkpointed over `D` nested levels of `S` slots each (`S^D >= m`, [`layout`]). A level-`d`
//! block covers up to `S^d` trips from a given carry; it runs its first active sub-blocks
//! (`S^(d-1)` trips each) forward, keeping the carry entering each sub-block in a slot, then
//! walks the sub-blocks backward, each one a level-`d-1` block from its slot; a level-0 block
//! is one trip, the body's VJP. Which sub-blocks are active, and so which levels do any work,
//! is decided at run time from `T`: a block holding fewer than `S^(d-1)` of the remaining
//! trips recomputes nothing and hands its one active sub-block down. The work is `T` body
//! runs forward, at most `T` recomputed per level that `T` reaches (`ceil(log_S T)` levels)
//! and `T` body VJPs, plus a test per inactive slot of each block visited (at most `2 S` per
//! level); the memory is `D S` carries. `max_trips(usize::MAX)` is a loop of ten levels.
//!
//! The const cotangents are summed over the trips in reverse trip order, whatever the layout
//! (the sum is carried through every level), so the result does not depend on `m`: a loop
//! bounded by `2^20` or by `usize::MAX` gives the same bits as one bounded by its trips.
//!
//! Every piece is a `scan`, `cond` or bounded `while` region whose bodies are the loop's own
//! body or its VJP, so the derivative rules apply to the result again (every order and mode
//! composes), `vmap` batches it, and every executor runs it.

use super::{call, full_tape, input_types, level_up, params, plain, rebind, vjp_form, zeros};
use crate::vjp::Seed;
use quabla_ir::{
    BinaryOp, Comparison, DType, Graph, GraphBuilder, NodeId, Region, RegionForm, RegionKind,
    Result, ScanBody, Shape, TensorType,
};
use std::sync::Arc;

/// The most slots of one level. More slots mean fewer levels (less recomputation: a loop of
/// `T` trips recomputes about `T` per level it reaches) but more memory (`D S` carries, held
/// whatever the trips) and more slot tests per block visited. With 128, every bound up to
/// `2^14` has the two levels of `ceil(sqrt(m))` slots that the √T rule gives, and
/// `usize::MAX` ten levels of 85.
const SLOTS_MAX: usize = 128;

/// `(S, D)`: `D` levels of `S` slots for at most `m` trips, `S^D >= m`, the fewest levels with
/// at most [`SLOTS_MAX`] slots and at least two (one level is a full tape), `S` the least that
/// reaches `m`. Under [`super::full_tape_loops`], one level of `m` slots.
pub(crate) fn layout(m: usize) -> (usize, usize) {
    if full_tape() || m <= 1 {
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

/// The forward pass of a bounded `while` that reverse mode will differentiate: the loop with a
/// trip counter, returning the region's outputs and the count. `None` for an unbounded loop.
pub(crate) fn forward(
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
    let count_ty = TensorType::new(DType::F64, Shape::scalar());
    // Both bodies take (carries.., count, consts..).
    let mut inputs = types[..n].to_vec();
    inputs.push(count_ty.clone());
    inputs.extend_from_slice(&types[n..]);
    let mut cb = GraphBuilder::new();
    let ins = params(&mut cb, "in", inputs.clone());
    let mut args = ins[..n].to_vec();
    args.extend_from_slice(&ins[n + 1..]);
    let p = cb.inline_graph(cond, &args)?;
    let counted_cond = cb.finish(p)?;
    let mut bb = GraphBuilder::new();
    let ins = params(&mut bb, "in", inputs);
    let mut args = ins[..n].to_vec();
    args.extend_from_slice(&ins[n + 1..]);
    let mut outs = bb.inline_graph(body, &args)?;
    let one = bb.scalar(1.0, DType::F64, false);
    outs.push(bb.add(ins[n], one)?);
    let counted_body = bb.finish(outs)?;
    let kind = RegionKind::While {
        n_carry: n + 1,
        cond: Arc::new(counted_cond),
        body: Arc::new(counted_body),
        max_trips: Some(*m),
    };
    let counted = Region::new(kind, region.form(), region.level())?;
    let zero = b.scalar(0.0, DType::F64, false);
    let mut operands = x[..n].to_vec();
    operands.push(zero);
    operands.extend_from_slice(&x[n..]);
    let mut outs = call(b, counted, &operands)?;
    let trips = outs.pop().expect("the trip count");
    Ok(Some((outs, WhileTape { trips })))
}

/// The backward pass of a bounded `while` (see the module docs): one cotangent per operand.
/// `saved` is what [`forward`] kept (the loop is run again to count its trips when absent).
pub(crate) fn backward(
    b: &mut GraphBuilder,
    region: &Region,
    x: &[NodeId],
    wrt: &[bool],
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
        return Err(super::tf2());
    };
    let trips = match saved {
        Some(tape) => tape.trips,
        None => forward(b, region, x)?.expect("the loop is bounded").1.trips,
    };
    // The count steers the layout; it has no derivative.
    let trips = b.stop_gradient(trips)?;
    let rule = Rule::new(region, body, *n_carry, wrt)?;
    let (slots, depth) = layout(*m);
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
    fn new(region: &Region, body: &'a Graph, n: usize, wrt: &[bool]) -> Result<Rule<'a>> {
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
        let v = crate::vjp_graph(body, &flags, &seeds)?;
        let inputs: Vec<(String, TensorType)> = v
            .inputs()
            .map(|(_, name, ty)| (name.to_string(), plain(ty)))
            .collect();
        let bind: Vec<usize> = (0..inputs.len()).collect();
        let n_out = float_carries.len() + active_consts.len();
        let select: Vec<usize> = (n..n + n_out).collect();
        let trip_vjp = rebind(&v, &inputs, &bind, &select)?;
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

    fn region(&self, kind: RegionKind) -> Result<Region> {
        Region::new(kind, self.form, self.level)
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

    fn count_ty() -> TensorType {
        TensorType::new(DType::F64, Shape::scalar())
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
        let (carry_t, const_t, state_t) =
            (self.carry_types(), self.const_types(), self.state_types());
        let (n, np, ns) = (self.n, const_t.len(), state_t.len());

        let mut g = GraphBuilder::new();
        let r = g.input("trips", Self::count_ty());
        let c = params(&mut g, "carry", carry_t.clone());
        let p = params(&mut g, "operand", const_t.clone());
        let state = params(&mut g, "cotangent", state_t.clone());
        if slots == 1 {
            // One slot: the block's carry, nothing to run forward.
            let zero = g.scalar(0.0, DType::F64, false);
            let outs = self.run_sub_block(&mut g, below, sub, zero, r, &c, &p, &state)?;
            return g.finish(outs);
        }

        // Forward: slot j holds the carry entering sub-block j; sub-block j runs only when
        // sub-block j + 1 is active.
        let sweep = self.forward_sweep(sub)?;
        let mut ops = c.clone();
        ops.extend(&p);
        ops.push(r);
        let fwd = ScanBody {
            length: slots,
            start: 0,
            reverse: false,
            n_carry: n,
            n_const: np + 1,
            n_xs: 0,
            body: Arc::new(sweep),
        };
        let outs = call(&mut g, self.region(RegionKind::Scan(fwd))?, &ops)?;
        let stack = outs[n..].to_vec();

        // Backward: the active sub-blocks in reverse, each a block of the level below.
        let sweep = self.backward_sweep(sub, below)?;
        let mut ops = state.clone();
        ops.extend(&p);
        ops.push(r);
        ops.extend(&stack);
        let bwd = ScanBody {
            length: slots,
            start: 0,
            reverse: true,
            n_carry: ns,
            n_const: np + 1,
            n_xs: n,
            body: Arc::new(sweep),
        };
        let outs = call(&mut g, self.region(RegionKind::Scan(bwd))?, &ops)?;
        g.finish(outs)
    }

    /// One trip backward, `(r, carries.., consts.., state..) -> state..` (`r` unused).
    fn one_trip(&self) -> Result<Graph> {
        let mut g = GraphBuilder::new();
        let _r = g.input("trips", Self::count_ty());
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

    /// The body of the forward sweep over the slots of a level whose sub-blocks take `sub`
    /// trips: `(j, carries.., consts.., r) -> (carries.., carries..)`, the second copy stacked.
    fn forward_sweep(&self, sub: usize) -> Result<Graph> {
        let n = self.n;
        let mut g = GraphBuilder::new();
        let j = g.input("slot", Self::count_ty());
        let c = params(&mut g, "carry", self.carry_types());
        let p = params(&mut g, "operand", self.const_types());
        let r = g.input("trips", Self::count_ty());
        let size = g.scalar(sub as f64, DType::F64, false);
        let one = g.scalar(1.0, DType::F64, false);
        let next = g.add(j, one)?;
        let next_start = g.mul(next, size)?;
        let needed = g.compare(Comparison::Less, next_start, r)?;
        // `sub` trips or none, as a counted `while` rather than a `cond`: under `vmap` it
        // runs only while some example needs it.
        let zero = g.scalar(0.0, DType::F64, false);
        let target = g.select(needed, size, zero)?;
        let kind = self.advance(sub)?;
        let mut operands = c.clone();
        operands.push(zero);
        operands.extend(&p);
        operands.push(target);
        let mut results = call(&mut g, self.region(kind)?, &operands)?;
        results.truncate(n);
        results.extend(&c);
        g.finish(results)
    }

    /// A `while` that applies the body `target` times (`target <= bound`): carries
    /// `(carries.., k)`, consts `(consts.., target)`.
    fn advance(&self, bound: usize) -> Result<RegionKind> {
        let n = self.n;
        let mut inputs = self.carry_types();
        inputs.push(Self::count_ty());
        inputs.extend(self.const_types());
        inputs.push(Self::count_ty());
        let last = inputs.len() - 1;
        let mut cb = GraphBuilder::new();
        let ins = params(&mut cb, "in", inputs.clone());
        let going = cb.compare(Comparison::Less, ins[n], ins[last])?;
        let cond = cb.finish(vec![going])?;
        let mut bb = GraphBuilder::new();
        let ins = params(&mut bb, "in", inputs);
        let mut args = ins[..n].to_vec();
        args.extend_from_slice(&ins[n + 1..last]);
        let mut outs = bb.inline_graph(self.body, &args)?;
        let one = bb.scalar(1.0, DType::F64, false);
        outs.push(bb.binary(BinaryOp::Add, ins[n], one)?);
        let body = bb.finish(outs)?;
        Ok(RegionKind::While {
            n_carry: n + 1,
            cond: Arc::new(cond),
            body: Arc::new(body),
            max_trips: Some(bound),
        })
    }

    /// The body of the backward sweep: `(j, state.., consts.., r, slot carries..) -> state..`,
    /// sub-block `j` (when active) as a block of the level below from its slot.
    fn backward_sweep(&self, sub: usize, below: Arc<Graph>) -> Result<Graph> {
        let mut g = GraphBuilder::new();
        let j = g.input("slot", Self::count_ty());
        let state = params(&mut g, "cotangent", self.state_types());
        let p = params(&mut g, "operand", self.const_types());
        let r = g.input("trips", Self::count_ty());
        let c = params(&mut g, "carry", self.carry_types());
        let size = g.scalar(sub as f64, DType::F64, false);
        let start = g.mul(j, size)?;
        let outs = self.run_sub_block(&mut g, below, sub, start, r, &c, &p, &state)?;
        g.finish(outs)
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
        c: &[NodeId],
        p: &[NodeId],
        state: &[NodeId],
    ) -> Result<Vec<NodeId>> {
        let active = g.compare(Comparison::Less, start, r)?;
        let left = g.sub(r, start)?;
        let size = g.scalar(sub as f64, DType::F64, false);
        let fits = g.compare(Comparison::Less, left, size)?;
        let here = g.select(fits, left, size)?;
        // Carries (pending, state..); consts (trips, slot carries.., consts..).
        let bool_ty = TensorType::new(DType::Bool, Shape::scalar());
        let mut inputs = vec![bool_ty];
        inputs.extend(self.state_types());
        inputs.push(Self::count_ty());
        inputs.extend(self.types.clone());
        let ns = self.state_types().len();
        let mut cb = GraphBuilder::new();
        let ins = params(&mut cb, "in", inputs.clone());
        let cond = cb.finish(vec![ins[0]])?;
        let mut bb = GraphBuilder::new();
        let ins = params(&mut bb, "in", inputs);
        let done = bb.constant(
            quabla_ir::HostData::Bool([false].into()),
            Shape::scalar(),
            false,
        )?;
        let mut args = vec![ins[1 + ns]];
        args.extend_from_slice(&ins[2 + ns..]);
        args.extend_from_slice(&ins[1..1 + ns]);
        let mut outs = vec![done];
        outs.extend(bb.inline_graph(&below, &args)?);
        let body = bb.finish(outs)?;
        let kind = RegionKind::While {
            n_carry: 1 + ns,
            cond: Arc::new(cond),
            body: Arc::new(body),
            max_trips: Some(1),
        };
        let mut operands = vec![active];
        operands.extend(state);
        operands.push(here);
        operands.extend(c);
        operands.extend(p);
        let outs = call(g, self.region(kind)?, &operands)?;
        Ok(outs[1..].to_vec())
    }
}
