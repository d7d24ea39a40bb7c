//! Derivatives of `scan` regions, and so of `fori_loop` (transforms.md §12–§13).
//!
//! Forward mode is a `scan` carrying the tangents of the active carries next to the carries
//! (which carries are active is a fixed point: a carry is active when its initial tangent is,
//! or when its body output depends on an active input).
//!
//! For reverse mode this module owns [`ScanVjp`]: the activity of a scan's operands, its
//! body's VJP, and the two loops over a stretch of iterations that the checkpointed layout
//! (`blocks.rs`) is made of: a forward scan that can keep the carry tape, and a reverse scan
//! of the body's VJP over a tape. It does not decide where checkpoints go.

use super::body::{
    dependence, input_types, keep_outputs, plain, Bound, LoopBody, Section, Tangents,
};
use super::forms::{call, call_shared, jvp_form, level_up};
use super::memo::shared_jvp;
use crate::sweep::{Forward, Reverse, Seed};
use quabla_ir::{
    Graph, GraphBuilder, NodeId, Region, RegionForm, RegionKind, Result, ScanBody, TensorType,
};
use std::cell::OnceCell;
use std::rc::Rc;
use std::sync::Arc;

/// Forward mode of a `scan`: the primal and tangent node of each output (carries, then
/// stacked outputs).
pub(super) fn jvp(
    b: &mut GraphBuilder,
    fwd: Forward,
    region: &Arc<Region>,
    s: &ScanBody,
    x: &[NodeId],
    t: &[Option<NodeId>],
) -> Result<Vec<(NodeId, Option<NodeId>)>> {
    let (n, np, nx) = (s.n_carry, s.n_const, s.n_xs);
    let ny = s.n_ys();
    let active_operand = |k: usize| t[k].is_some() && b.ty(x[k]).dtype.is_float();
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
            return jvp_active(b, fwd, region, s, (x, t), &act, &ys_act);
        }
    }
}

/// [`jvp`] once the active carries, consts and xs (`act`) and stacked outputs (`ys_act`)
/// are known. The derived body takes `(i, carries, carry tangents, consts, const tangents,
/// xs, x tangents)` (tangents of the active ones only) and returns the carries, their
/// tangents, the stacked outputs and their tangents.
fn jvp_active(
    b: &mut GraphBuilder,
    fwd: Forward,
    region: &Arc<Region>,
    s: &ScanBody,
    (x, t): (&[NodeId], &[Option<NodeId>]),
    act: &[bool],
    ys_act: &[bool],
) -> Result<Vec<(NodeId, Option<NodeId>)>> {
    let (n, np, nx) = (s.n_carry, s.n_const, s.n_xs);
    let ny = s.n_ys();
    let mut wrt = vec![false];
    wrt.extend(act);
    let types = input_types(&s.body);
    let (mut body, i) = LoopBody::scan("i", types[0].clone());
    let mut bound = Bound {
        primals: vec![i],
        ..Bound::default()
    };
    let operands = Tangents {
        types: &types,
        x,
        t,
        active: act,
        offset: 1,
    };
    let sections = [
        (Section::Carry, 1..1 + n),
        (Section::Const, 1 + n..1 + n + np),
        (Section::Xs, 1 + n + np..1 + n + np + nx),
    ];
    for (section, inputs) in sections {
        body.tangent_section(b, section, inputs, &operands, &mut bound)?;
    }
    // Outputs of the tangent graph: carries, ys, then one tangent per output.
    let mut select: Vec<usize> = (0..n).collect();
    select.extend((0..n).filter(|&k| act[k]).map(|k| n + ny + k));
    select.extend(n..n + ny);
    select.extend((0..ny).filter(|&y| ys_act[y]).map(|y| n + ny + n + y));
    let mut key = act.to_vec();
    key.extend(ys_act);
    let call_operands = body.operands().to_vec();
    let derived = shared_jvp(region, &key, || {
        let tangent = fwd.jvp(&s.body, &wrt)?;
        let outs = body.builder().inline_graph(&tangent, &bound.args())?;
        let results = select.iter().map(|&k| outs[k]).collect();
        let (kind, _) = body
            .finish(results)?
            .dce()
            .scan(s.length, s.start, s.reverse);
        Region::new(kind, jvp_form(region), level_up(region))
    })?;
    let outs = call_shared(b, derived, &call_operands)?;
    let nc = n + (0..n).filter(|&k| act[k]).count();
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

/// The pieces of the reverse mode of one `scan` (see the module docs); `blocks.rs` lays them
/// out.
pub(super) struct ScanVjp<'a> {
    pub(super) s: &'a ScanBody,
    form: RegionForm,
    level: u8,
    pub(super) rev: Reverse,
    /// The body's VJP: inputs `(i, carries, consts, xs, carry cotangents, seeded y
    /// cotangents)`, outputs `(carry cotangents, active const cotangents, active x
    /// cotangents)`. Built on first use, by the backward pass only: a forward pass that
    /// built it too would differentiate a loop nested `d` deep `2^d` times.
    body_vjp: Rc<OnceCell<Graph>>,
    types: Vec<TensorType>,
    /// The carries that have cotangents: the floating ones (an integer carry, a key or a
    /// counter, is recomputed with the others but carries no derivative).
    pub(super) act_c: Vec<bool>,
    pub(super) act_p: Vec<bool>,
    pub(super) act_x: Vec<bool>,
    /// The ys that receive a cotangent.
    seeded: Vec<usize>,
    /// The operands: carries, consts, xs.
    pub(super) carries: Vec<NodeId>,
    pub(super) consts: Vec<NodeId>,
    pub(super) xs: Vec<NodeId>,
    /// The cotangents of the final carries (`None`: zero) and of the seeded ys.
    pub(super) g_final: Vec<Option<NodeId>>,
    pub(super) gys: Vec<NodeId>,
}

impl<'a> ScanVjp<'a> {
    /// The reverse mode of `region` (a scan `s`) at operands `x`, with respect to the
    /// operands flagged in `wrt`, given the outputs' cotangents `cts`.
    pub(super) fn new(
        region: &Region,
        s: &'a ScanBody,
        rev: Reverse,
        x: &[NodeId],
        wrt: &[bool],
        cts: &[Option<NodeId>],
    ) -> Result<ScanVjp<'a>> {
        let form = super::forms::vjp_form(region);
        let (n, np, nx) = (s.n_carry, s.n_const, s.n_xs);
        let ny = s.n_ys();
        let types = input_types(&s.body);
        let act_c: Vec<bool> = types[1..1 + n].iter().map(|t| t.dtype.is_float()).collect();
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
        Ok(ScanVjp {
            s,
            form,
            level: level_up(region),
            rev,
            body_vjp: Rc::new(OnceCell::new()),
            types,
            act_c,
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

    pub(super) fn n(&self) -> usize {
        self.s.n_carry
    }

    /// How many carries have cotangents.
    pub(super) fn n_g(&self) -> usize {
        self.act_c.iter().filter(|a| **a).count()
    }

    /// The body's VJP (see the field), built on first use.
    fn body_vjp(&self) -> Result<&Graph> {
        if let Some(g) = self.body_vjp.get() {
            return Ok(g);
        }
        let (n, ny) = (self.n(), self.s.n_ys());
        let mut flags = vec![false];
        flags.extend(&self.act_c);
        flags.extend(&self.act_p);
        flags.extend(&self.act_x);
        let mut seeds: Vec<Seed> = self
            .act_c
            .iter()
            .map(|&a| if a { Seed::Input } else { Seed::None })
            .collect();
        seeds.extend((0..ny).map(|y| {
            if self.seeded.contains(&y) {
                Seed::Input
            } else {
                Seed::None
            }
        }));
        let v = self.rev.vjp(&self.s.body, &flags, &seeds)?;
        let active = |a: &[bool]| a.iter().filter(|a| **a).count();
        let n_out = active(&self.act_c) + active(&self.act_p) + active(&self.act_x);
        let g = keep_outputs(&v, n + ny..n + ny + n_out)?;
        Ok(self.body_vjp.get_or_init(|| g))
    }

    pub(super) fn index_ty(&self) -> TensorType {
        self.types[0].clone()
    }

    pub(super) fn carry_types(&self) -> Vec<TensorType> {
        self.types[1..1 + self.n()].to_vec()
    }

    /// The types of the carries that have cotangents.
    pub(super) fn cotangent_types(&self) -> Vec<TensorType> {
        self.carry_types()
            .into_iter()
            .zip(&self.act_c)
            .filter(|(_, a)| **a)
            .map(|(t, _)| t)
            .collect()
    }

    pub(super) fn const_types(&self) -> Vec<TensorType> {
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

    pub(super) fn act_p_types(&self) -> Vec<TensorType> {
        self.const_types()
            .into_iter()
            .zip(&self.act_p)
            .filter(|(_, a)| **a)
            .map(|(t, _)| t)
            .collect()
    }

    /// Calls a derived loop of this VJP's form and level.
    pub(super) fn call(
        &self,
        b: &mut GraphBuilder,
        (kind, operands): (RegionKind, Vec<NodeId>),
    ) -> Result<Vec<NodeId>> {
        call(b, Region::new(kind, self.form, self.level)?, &operands)
    }

    /// The arguments of the user body (or of its VJP, which starts with them) inside a
    /// derived body: the index, `i` itself or `base + i` when the derived loop runs at a
    /// dynamic offset, then the carries `c`, consts `p` and xs `xk`.
    fn user_args(
        nb: &mut GraphBuilder,
        (i, base): (NodeId, Option<NodeId>),
        c: &[NodeId],
        p: &[NodeId],
        xk: &[NodeId],
    ) -> Result<Vec<NodeId>> {
        let index = match base {
            Some(base) => nb.add(base, i)?,
            None => i,
        };
        let mut args = vec![index];
        args.extend(c);
        args.extend(p);
        args.extend(xk);
        Ok(args)
    }

    /// A scan of `len` user iterations from `carry` that can also return the carry tape (the
    /// carry entering each iteration, stacked) and the user's stacked outputs. A `base` adds a
    /// const operand to the index (the scan then starts at 0). Returns the final carries, the
    /// tape (empty unless `tape`) and the ys (empty unless `ys`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn tape_scan(
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
        let (mut body, i) = LoopBody::scan("i", self.index_ty());
        let c = body.params(Section::Carry, "carry", self.carry_types(), carry);
        let p = body.params(Section::Const, "operand", self.const_types(), &self.consts);
        let base_in = base.map(|base| body.param(Section::Const, "base", self.index_ty(), base));
        let xk = body.params(Section::Xs, "x", self.x_types(), xs);
        let nb = body.builder();
        let args = Self::user_args(nb, (i, base_in), &c, &p, &xk)?;
        let outs = nb.inline_graph(&self.s.body, &args)?;
        let mut results: Vec<NodeId> = outs[..n].to_vec();
        if tape {
            results.extend(&c);
        }
        if ys {
            results.extend(&outs[n..]);
        }
        let start = if base.is_some() { 0 } else { start };
        let outs = self.call(b, body.finish(results)?.dce().scan(len, start, reverse))?;
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
    pub(super) fn backward_scan(
        &self,
        b: &mut GraphBuilder,
        start: usize,
        len: usize,
        reverse: bool,
        (g, acc): (&[NodeId], &[NodeId]),
        base: Option<NodeId>,
        tape: &[NodeId],
        xs: &[NodeId],
        gys: &[NodeId],
    ) -> Result<(Vec<NodeId>, Vec<NodeId>, Vec<NodeId>)> {
        let ng = self.n_g();
        let (mut body, i) = LoopBody::scan("i", self.index_ty());
        let gi = body.params(Section::Carry, "cotangent/carry", self.cotangent_types(), g);
        let acc_in = body.params(Section::Carry, "cotangent/operand", self.act_p_types(), acc);
        let p = body.params(Section::Const, "operand", self.const_types(), &self.consts);
        let base_in = base.map(|base| body.param(Section::Const, "base", self.index_ty(), base));
        let c = body.params(Section::Xs, "carry", self.carry_types(), tape);
        let xk = body.params(Section::Xs, "x", self.x_types(), xs);
        let gy = body.params(Section::Xs, "cotangent/y", self.gy_types(), gys);
        let body_vjp = self.body_vjp()?;
        let nb = body.builder();
        let mut args = Self::user_args(nb, (i, base_in), &c, &p, &xk)?;
        args.extend(&gi);
        args.extend(&gy);
        let outs = nb.inline_graph(body_vjp, &args)?;
        let n_acc = acc_in.len();
        let mut results: Vec<NodeId> = outs[..ng].to_vec();
        for (k, a) in acc_in.iter().enumerate() {
            results.push(nb.add(*a, outs[ng + k])?);
        }
        results.extend(&outs[ng + n_acc..]);
        let start = if base.is_some() { 0 } else { start };
        let outs = self.call(b, body.finish(results)?.dce().scan(len, start, reverse))?;
        Ok((
            outs[..ng].to_vec(),
            outs[ng..ng + n_acc].to_vec(),
            outs[ng + n_acc..].to_vec(),
        ))
    }

    /// The same pieces (sharing the body's VJP) for a loop nested in a derived body, whose
    /// consts are that body's parameters `consts`.
    pub(super) fn nested(&self, consts: Vec<NodeId>) -> ScanVjp<'a> {
        ScanVjp {
            s: self.s,
            form: self.form,
            level: self.level,
            rev: self.rev,
            body_vjp: Rc::clone(&self.body_vjp),
            types: self.types.clone(),
            act_c: self.act_c.clone(),
            act_p: self.act_p.clone(),
            act_x: self.act_x.clone(),
            seeded: self.seeded.clone(),
            carries: Vec::new(),
            consts,
            xs: Vec::new(),
            g_final: Vec::new(),
            gys: Vec::new(),
        }
    }
}
