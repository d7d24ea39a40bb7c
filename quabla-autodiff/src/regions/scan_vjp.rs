//! Reverse mode of a `scan` (and so of `fori_loop`) with √T carry checkpointing
//! (transforms.md §13, docs/loops.md): a forward scan over blocks of `B = ceil(sqrt(T))`
//! iterations stores the carry at each block boundary; the backward pass walks the blocks in
//! reverse, recomputing each block's carries from its stored boundary (an inner scan whose
//! stacked outputs are the block's carry tape) and then running the body's VJP backward
//! through the block (an inner reverse scan). The `T mod B` remaining iterations form a tail
//! with a tape of its own. The arithmetic is the same for every `B`, so the gradient is
//! bit-identical to the full tape (`B = T`, see [`super::full_tape_loops`]).

use super::{block_length, call, input_types, params, plain, rebind, slice_params, zeros};
use crate::vjp::Seed;
use quabla_ir::{
    Graph, GraphBuilder, NodeId, Region, RegionForm, RegionKind, Result, ScanBody, Shape,
    TensorType,
};
use std::cell::OnceCell;
use std::rc::Rc;
use std::sync::Arc;

/// The pieces of a checkpointed scan VJP (see the module docs).
pub(super) struct ScanVjp<'a> {
    s: &'a ScanBody,
    form: RegionForm,
    level: u8,
    /// The body's VJP: inputs `(i, carries, consts, xs, carry cotangents, seeded y
    /// cotangents)`, outputs `(carry cotangents, active const cotangents, active x
    /// cotangents)`. Built on first use, by the backward pass only: a forward pass that
    /// built it too would differentiate a loop nested `d` deep `2^d` times.
    body_vjp: Rc<OnceCell<Graph>>,
    types: Vec<TensorType>,
    /// The carries that have cotangents: the floating ones (an integer carry, a key or a
    /// counter, is recomputed with the others but carries no derivative).
    act_c: Vec<bool>,
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
    pub(super) fn new(
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
            level,
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

    fn n(&self) -> usize {
        self.s.n_carry
    }

    /// How many carries have cotangents.
    fn n_g(&self) -> usize {
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
        let v = crate::vjp_graph(&self.s.body, &flags, &seeds)?;
        let inputs: Vec<(String, TensorType)> = v
            .inputs()
            .map(|(_, name, ty)| (name.to_string(), plain(ty)))
            .collect();
        let bind: Vec<usize> = (0..inputs.len()).collect();
        let active = |a: &[bool]| a.iter().filter(|a| **a).count();
        let n_out = active(&self.act_c) + active(&self.act_p) + active(&self.act_x);
        let select: Vec<usize> = (n + ny..n + ny + n_out).collect();
        let g = rebind(&v, &inputs, &bind, &select)?;
        Ok(self.body_vjp.get_or_init(|| g))
    }

    fn index_ty(&self) -> TensorType {
        self.types[0].clone()
    }

    fn carry_types(&self) -> Vec<TensorType> {
        self.types[1..1 + self.n()].to_vec()
    }

    /// The types of the carries that have cotangents.
    fn cotangent_types(&self) -> Vec<TensorType> {
        self.carry_types()
            .into_iter()
            .zip(&self.act_c)
            .filter(|(_, a)| **a)
            .map(|(t, _)| t)
            .collect()
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
        let ng = self.n_g();
        let mut nb = GraphBuilder::new();
        let i = nb.input("i", self.index_ty());
        let gi = params(&mut nb, "cotangent/carry", self.cotangent_types());
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
        let outs = nb.inline_graph(self.body_vjp()?, &args)?;
        let n_acc = acc_in.len();
        let mut results: Vec<NodeId> = outs[..ng].to_vec();
        for (k, a) in acc_in.iter().enumerate() {
            results.push(nb.add(*a, outs[ng + k])?);
        }
        results.extend(&outs[ng + n_acc..]);
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
            n_carry: ng + n_acc,
            n_const: self.consts.len() + usize::from(base.is_some()),
            n_xs: tape.len() + xs.len() + gys.len(),
            body: Arc::new(quabla_ir::passes::dce(&body)),
        };
        let outs = self.region(b, scan, &ops)?;
        Ok((
            outs[..ng].to_vec(),
            outs[ng..ng + n_acc].to_vec(),
            outs[ng + n_acc..].to_vec(),
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
        let ng = self.n_g();
        let mut nb = GraphBuilder::new();
        let bi = nb.input("block", self.index_ty());
        let gi = params(&mut nb, "cotangent/carry", self.cotangent_types());
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
            n_carry: ng + n_acc,
            n_const: self.consts.len(),
            n_xs: checkpoints.len() + x_blocks.len() + gy_blocks.len(),
            body: Arc::new(quabla_ir::passes::dce(&body)),
        };
        let outs = self.region(b, scan, &ops)?;
        Ok((
            outs[..ng].to_vec(),
            outs[ng..ng + n_acc].to_vec(),
            outs[ng + n_acc..].to_vec(),
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
            body_vjp: Rc::clone(&self.body_vjp),
            types: self.types.clone(),
            act_c: self.act_c.clone(),
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
    pub(super) fn forward(&self, b: &mut GraphBuilder) -> Result<(Vec<NodeId>, ScanTape)> {
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
    pub(super) fn backward(
        self,
        b: &mut GraphBuilder,
        saved: &ScanTape,
    ) -> Result<Vec<Option<NodeId>>> {
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
            if !self.act_c[k] {
                continue;
            }
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
        let mut g_iter = g.into_iter();
        let mut result: Vec<Option<NodeId>> = self
            .act_c
            .iter()
            .map(|&a| if a { g_iter.next() } else { None })
            .collect();
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
