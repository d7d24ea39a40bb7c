//! The checkpointed layout of a scan's reverse mode (transforms.md §13, docs/loops.md): a
//! forward scan over blocks of `B = ceil(sqrt(T))` iterations stores the carry at each block
//! boundary; the backward pass walks the blocks in reverse, recomputing each block's carries
//! from its stored boundary (an inner scan whose stacked outputs are the block's carry tape)
//! and then running the body's VJP backward through the block (an inner reverse scan). The
//! `T mod B` remaining iterations form a tail with a tape of its own. The arithmetic is the
//! same for every `B`, so the gradient is bit-identical to the full tape (`B = T`,
//! [`LoopTape::Full`]).
//!
//! This module decides where the checkpoints go and how the blocks and the tail are walked;
//! the loops over one stretch of iterations are [`ScanVjp`]'s (`scan.rs`).

use super::body::{zeros, LoopBody, Section};
use super::scan::ScanVjp;
use crate::sweep::LoopTape;
use quabla_ir::{GraphBuilder, NodeId, Result, Shape};

/// The checkpoint block length for `t` iterations: `ceil(sqrt(t))`.
pub fn block_length(t: usize) -> usize {
    let mut b = (t as f64).sqrt().ceil() as usize;
    while b * b < t {
        b += 1;
    }
    while b > 1 && (b - 1) * (b - 1) >= t {
        b -= 1;
    }
    b.max(1)
}

/// What the forward pass of a scan's VJP keeps for its backward pass: the carry at each block
/// boundary (stacked, one tensor per carry) and the carry tape of the tail iterations.
#[derive(Clone, Debug)]
pub(crate) struct ScanTape {
    checkpoints: Vec<NodeId>,
    tail_tape: Vec<NodeId>,
}

/// The blocks of one scan's VJP: `nblocks` blocks of `block` iterations, then `tail`.
pub(super) struct Blocks<'v, 'a> {
    vjp: &'v ScanVjp<'a>,
    block: usize,
    nblocks: usize,
    /// The iterations the blocks cover, `nblocks * block`.
    split: usize,
    tail: usize,
}

impl<'v, 'a> Blocks<'v, 'a> {
    pub(super) fn new(vjp: &'v ScanVjp<'a>) -> Blocks<'v, 'a> {
        let t_len = vjp.s.length;
        let block = match vjp.rev.loop_tape() {
            LoopTape::Checkpointed => block_length(t_len),
            LoopTape::Full => t_len.max(1),
        };
        let nblocks = t_len / block;
        let split = nblocks * block;
        Blocks {
            vjp,
            block,
            nblocks,
            split,
            tail: t_len - split,
        }
    }

    /// The index of the first tail iteration.
    fn tail_start(&self) -> usize {
        self.vjp.s.start + self.split
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

    /// The blocks' part of `xs` as `[nblocks, block, ...]`, and the tail's part.
    fn split_xs(&self, b: &mut GraphBuilder, xs: &[NodeId]) -> Result<(Vec<NodeId>, Vec<NodeId>)> {
        let blocks = Self::window(b, xs, 0, self.split, Some(self.block))?;
        let tail = Self::window(b, xs, self.split, self.tail, None)?;
        Ok((blocks, tail))
    }

    /// `[nb, B, ...]` as `[nb * B, ...]`.
    fn unblock(b: &mut GraphBuilder, x: NodeId) -> Result<NodeId> {
        let dims = b.ty(x).shape.dims().to_vec();
        let mut flat = vec![dims[0] * dims[1]];
        flat.extend(&dims[2..]);
        b.reshape_to(x, Shape::new(flat)?)
    }

    /// Stacked per-block values `[nb, B, ...]` and the tail's `[tail, ...]` joined in index
    /// order, as the scan's stacked outputs are.
    fn join(
        &self,
        b: &mut GraphBuilder,
        blocks: &[NodeId],
        tail: &[NodeId],
    ) -> Result<Vec<NodeId>> {
        let mut joined = Vec::with_capacity(blocks.len());
        for (k, &yb) in blocks.iter().enumerate() {
            let flat = Self::unblock(b, yb)?;
            joined.push(if self.tail > 0 {
                b.concat(&[flat, tail[k]], 0)?
            } else {
                flat
            });
        }
        Ok(joined)
    }

    /// `start + block * len` in the index dtype (exact: both are integers).
    fn block_base(&self, nb: &mut GraphBuilder, bi: NodeId) -> Result<NodeId> {
        let dtype = self.vjp.index_ty().dtype;
        let scale = nb.scalar(self.block as f64, dtype, false);
        let scaled = nb.mul(bi, scale)?;
        if self.vjp.s.start == 0 {
            return Ok(scaled);
        }
        let start = nb.scalar(self.vjp.s.start as f64, dtype, false);
        nb.add(scaled, start)
    }

    /// The outer scan of the forward pass: stores the carry entering each block and returns
    /// the final carries, the checkpoints and (with `ys`) the user's outputs as
    /// `[nb, B, ...]`.
    fn blocks_forward(
        &self,
        b: &mut GraphBuilder,
        carry: &[NodeId],
        x_blocks: &[NodeId],
        ys: bool,
    ) -> Result<(Vec<NodeId>, Vec<NodeId>, Vec<NodeId>)> {
        let v = self.vjp;
        let n = v.n();
        let (mut body, bi) = LoopBody::scan("block", v.index_ty());
        let c = body.params(Section::Carry, "carry", v.carry_types(), carry);
        let p = body.params(Section::Const, "operand", v.const_types(), &v.consts);
        let xb = body.sliced(b, "x", x_blocks)?;
        let nb = body.builder();
        let base = self.block_base(nb, bi)?;
        let inner = v.nested(p);
        let reverse = v.s.reverse;
        let (c_out, _, inner_ys) =
            inner.tape_scan(nb, 0, self.block, reverse, &c, Some(base), &xb, false, ys)?;
        let mut results = c_out;
        results.extend(&c);
        results.extend(inner_ys);
        let outs = v.call(
            b,
            body.finish(results)?.dce().scan(self.nblocks, 0, reverse),
        )?;
        Ok((
            outs[..n].to_vec(),
            outs[n..2 * n].to_vec(),
            outs[2 * n..].to_vec(),
        ))
    }

    /// The outer scan of the backward pass: walks the blocks the other way, each one
    /// recomputed from its checkpoint and then differentiated. Returns `(g, acc, x
    /// cotangents as [nb, B, ...])`.
    fn blocks_backward(
        &self,
        b: &mut GraphBuilder,
        (g, acc): (&[NodeId], &[NodeId]),
        checkpoints: &[NodeId],
        x_blocks: &[NodeId],
        gy_blocks: &[NodeId],
    ) -> Result<(Vec<NodeId>, Vec<NodeId>, Vec<NodeId>)> {
        let v = self.vjp;
        let ng = v.n_g();
        let n_acc = acc.len();
        let (mut body, bi) = LoopBody::scan("block", v.index_ty());
        let gi = body.params(Section::Carry, "cotangent/carry", v.cotangent_types(), g);
        let acc_in = body.params(Section::Carry, "cotangent/operand", v.act_p_types(), acc);
        let p = body.params(Section::Const, "operand", v.const_types(), &v.consts);
        let ck = body.sliced(b, "checkpoint", checkpoints)?;
        let xb = body.sliced(b, "x", x_blocks)?;
        let gyb = body.sliced(b, "cotangent/y", gy_blocks)?;
        let nb = body.builder();
        let base = self.block_base(nb, bi)?;
        let inner = v.nested(p);
        let reverse = v.s.reverse;
        let (_, tape, _) = inner.tape_scan(
            nb,
            0,
            self.block,
            reverse,
            &ck,
            Some(base),
            &xb,
            true,
            false,
        )?;
        let (g_out, acc_out, ctx) = inner.backward_scan(
            nb,
            0,
            self.block,
            !reverse,
            (&gi, &acc_in),
            Some(base),
            &tape,
            &xb,
            &gyb,
        )?;
        let mut results = g_out;
        results.extend(acc_out);
        results.extend(ctx);
        let outs = v.call(
            b,
            body.finish(results)?.dce().scan(self.nblocks, 0, !reverse),
        )?;
        Ok((
            outs[..ng].to_vec(),
            outs[ng..ng + n_acc].to_vec(),
            outs[ng + n_acc..].to_vec(),
        ))
    }

    /// The forward pass: the region's outputs (final carries, then stacked ys), computed by
    /// the block loops, and what the backward pass keeps of it.
    pub(super) fn forward(&self, b: &mut GraphBuilder) -> Result<(Vec<NodeId>, ScanTape)> {
        let v = self.vjp;
        let (tail, tail_start) = (self.tail, self.tail_start());
        let ys = v.s.n_ys() > 0;
        let (x_blocks, x_tail) = self.split_xs(b, &v.xs)?;
        let (c_end, checkpoints, ys_blocks, tail_tape, ys_tail);
        if !v.s.reverse {
            // Time runs block 0 .. block nb-1, then the tail.
            let (c_mid, ck, yb) = self.blocks_forward(b, &v.carries, &x_blocks, ys)?;
            (checkpoints, ys_blocks) = (ck, yb);
            if tail > 0 {
                let (c, tape, yt) =
                    v.tape_scan(b, tail_start, tail, false, &c_mid, None, &x_tail, true, ys)?;
                (c_end, tail_tape, ys_tail) = (c, tape, yt);
            } else {
                (c_end, tail_tape, ys_tail) = (c_mid, Vec::new(), Vec::new());
            }
        } else {
            // Time runs the tail (highest indices) first, then blocks nb-1 .. 0.
            let mut c_mid = v.carries.clone();
            let (mut tape_t, mut yt) = (Vec::new(), Vec::new());
            if tail > 0 {
                let (c, tape, y) = v.tape_scan(
                    b, tail_start, tail, true, &v.carries, None, &x_tail, true, ys,
                )?;
                (c_mid, tape_t, yt) = (c, tape, y);
            }
            let (c, ck, yb) = self.blocks_forward(b, &c_mid, &x_blocks, ys)?;
            (c_end, checkpoints, ys_blocks, tail_tape, ys_tail) = (c, ck, yb, tape_t, yt);
        }
        let mut outputs = c_end;
        outputs.extend(self.join(b, &ys_blocks, &ys_tail)?);
        Ok((
            outputs,
            ScanTape {
                checkpoints,
                tail_tape,
            },
        ))
    }

    /// The backward pass from the forward pass's checkpoints and tail tape: one cotangent per
    /// operand of the scan.
    pub(super) fn backward(
        &self,
        b: &mut GraphBuilder,
        saved: &ScanTape,
    ) -> Result<Vec<Option<NodeId>>> {
        let v = self.vjp;
        let (tail, tail_start) = (self.tail, self.tail_start());
        let (x_blocks, x_tail) = self.split_xs(b, &v.xs)?;
        let (gy_blocks, gy_tail) = self.split_xs(b, &v.gys)?;
        let mut g: Vec<NodeId> = Vec::new();
        for (k, c) in v.g_final.iter().enumerate() {
            if !v.act_c[k] {
                continue;
            }
            g.push(match c {
                Some(c) => *c,
                None => zeros(b, &v.carry_types()[k])?,
            });
        }
        let mut acc: Vec<NodeId> = Vec::new();
        for t in v.act_p_types() {
            acc.push(zeros(b, &t)?);
        }
        let mut ct_tail = Vec::new();
        // The tail comes last in time for a forward scan, first for a reverse one.
        let tail_first_backward = !v.s.reverse;
        let tail_backward = |b: &mut GraphBuilder, g: &[NodeId], acc: &[NodeId], reverse: bool| {
            v.backward_scan(
                b,
                tail_start,
                tail,
                reverse,
                (g, acc),
                None,
                &saved.tail_tape,
                &x_tail,
                &gy_tail,
            )
        };
        if tail > 0 && tail_first_backward {
            (g, acc, ct_tail) = tail_backward(b, &g, &acc, true)?;
        }
        let (g2, acc2, ct_blocks) =
            self.blocks_backward(b, (&g, &acc), &saved.checkpoints, &x_blocks, &gy_blocks)?;
        (g, acc) = (g2, acc2);
        if tail > 0 && !tail_first_backward {
            (g, acc, ct_tail) = tail_backward(b, &g, &acc, false)?;
        }
        // Reassemble the x cotangents in index order, as the forward pass does the ys.
        let ct_x = self.join(b, &ct_blocks, &ct_tail)?;
        let (n, np, nx) = (v.s.n_carry, v.s.n_const, v.s.n_xs);
        let mut g_iter = g.into_iter();
        let mut result: Vec<Option<NodeId>> = v
            .act_c
            .iter()
            .map(|&a| if a { g_iter.next() } else { None })
            .collect();
        let mut acc_iter = acc.into_iter();
        for k in 0..np {
            result.push(if v.act_p[k] { acc_iter.next() } else { None });
        }
        let mut x_iter = ct_x.into_iter();
        for k in 0..nx {
            result.push(if v.act_x[k] { x_iter.next() } else { None });
        }
        debug_assert_eq!(result.len(), n + np + nx);
        Ok(result)
    }
}
