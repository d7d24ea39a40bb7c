//! Control-flow regions: `cond`, the counted loops (`fori`, `scan` and their derivative
//! forms) and `while_loop`.
//!
//! A region runs under the host's control (transforms.md §10–§13): `cond` reads its predicate
//! back once and runs one branch's block; a counted loop runs its body's block `length` times;
//! a `while_loop` runs its `cond` block, reads the predicate back (once per trip) and runs its
//! body's block. The blocks are lowered like plans, over buffers of the same program, so a body
//! has fused kernels, reductions, GEMMs and nested regions of its own.
//!
//! Two loop shapes run entirely on the device as one kernel instead ([`RegionExec::Fused`]):
//! a counted loop without `xs`/`ys` whose carries share one shape and whose body is elementwise
//! (each work item runs every trip for its element), and a `while_loop` whose carries and
//! consts are single values and whose `cond` and `body` are elementwise (one work item runs
//! the whole loop: no readback at all).

use super::{internal, Ctx};
use crate::codegen::elementwise::{External, Member, Source};
use crate::codegen::{layout, loops, Scalar};
use crate::program::{
    value_elem, Arg, Block, BufId, Elem, Launch, RegionExec, RegionStep, Role, Step,
};
use quabla_backend::BackendError;
use quabla_ir::{DType, Graph, NodeId, Op, RegionKind};
use std::collections::HashMap;

impl Ctx<'_> {
    /// Lowers the region call of node `i` and its sibling nodes (its other outputs).
    pub(super) fn region(&mut self, i: usize, siblings: &[usize]) -> Result<(), BackendError> {
        let node = &self.g.nodes()[i];
        let Op::Region(call) = &node.op else {
            return Err(internal("a region step for a node that is not a region"));
        };
        let region = call.region.clone();
        let operands: Vec<NodeId> = node.operands.clone();
        let mut op_bufs = Vec::with_capacity(operands.len());
        for &o in &operands {
            op_bufs.push(self.buf_of(o)?);
        }
        let t = self.t();
        let outputs: Vec<BufId> = region
            .output_types()
            .iter()
            .map(|ty| self.temp(value_elem(ty.dtype, t), ty.shape.size()))
            .collect();
        let exec = match region.kind() {
            RegionKind::Cond {
                then_branch,
                else_branch,
            } => {
                let specs: Vec<(Elem, usize)> =
                    op_bufs[1..].iter().map(|&b| self.spec(b)).collect();
                let then_block = self.block(then_branch, &specs, usize::MAX)?;
                let else_block = self.block(else_branch, &specs, usize::MAX)?;
                RegionExec::Cond {
                    branches: [then_block, else_block],
                }
            }
            RegionKind::Scan(s) => {
                let carries = &op_bufs[..s.n_carry];
                let consts = &op_bufs[s.n_carry..s.n_carry + s.n_const];
                let xs = &op_bufs[s.n_carry + s.n_const..];
                if s.n_xs == 0 && s.n_ys() == 0 {
                    if let Some(launch) = self.fused_counted(s, carries, consts, &outputs)? {
                        return self.finish_region(
                            region.form().name(),
                            RegionExec::Fused(launch),
                            op_bufs,
                            outputs,
                            siblings,
                        );
                    }
                }
                let x_slices: Vec<usize> = xs
                    .iter()
                    .map(|&b| self.b.buffers[b].len / s.length)
                    .collect();
                let index = index_elem(s, t);
                let carry_elems = input_elems(&s.body, 1, s.n_carry, t);
                let mut specs = vec![(index, 1)];
                specs.extend(
                    carries
                        .iter()
                        .zip(&carry_elems)
                        .map(|(&b, &e)| (e, self.b.buffers[b].len)),
                );
                specs.extend(consts.iter().map(|&b| self.spec(b)));
                specs.extend(
                    xs.iter()
                        .zip(&x_slices)
                        .map(|(&b, &len)| (self.b.elem(b), len)),
                );
                let body = self.block(&s.body, &specs, s.n_carry)?;
                let carry_init = self.copies_into(carries, &carry_elems);
                let y_slices: Vec<usize> = outputs[s.n_carry..]
                    .iter()
                    .map(|&b| self.b.buffers[b].len / s.length)
                    .collect();
                let y_copy = body.outputs[s.n_carry..]
                    .iter()
                    .zip(&outputs[s.n_carry..])
                    .map(|(&b, &y)| {
                        let (from, to) = (self.b.elem(b), self.b.elem(y));
                        self.b.kernel(layout::copy_to_offset(from, to))
                    })
                    .collect();
                // The index parameter is a float (the body casts it where it wants an
                // integer), filled with its exact value: float64 when the index is float64.
                let index_fill = self.b.kernel(layout::fill(index));
                RegionExec::Scan {
                    length: s.length,
                    start: s.start,
                    reverse: s.reverse,
                    n_carry: s.n_carry,
                    n_const: s.n_const,
                    x_slices,
                    y_slices,
                    carry_init,
                    y_copy,
                    index_fill,
                    body,
                }
            }
            RegionKind::While {
                n_carry,
                cond,
                body,
                max_trips,
            } => {
                let carries = &op_bufs[..*n_carry];
                let consts = &op_bufs[*n_carry..];
                if let Some(launch) =
                    self.fused_while(cond, body, *max_trips, carries, consts, &outputs)?
                {
                    return self.finish_region(
                        region.form().name(),
                        RegionExec::Fused(launch),
                        op_bufs,
                        outputs,
                        siblings,
                    );
                }
                let carry_elems = input_elems(body, 0, *n_carry, t);
                let mut specs: Vec<(Elem, usize)> = carries
                    .iter()
                    .zip(&carry_elems)
                    .map(|(&b, &e)| (e, self.b.buffers[b].len))
                    .collect();
                specs.extend(consts.iter().map(|&b| self.spec(b)));
                let cond_block = self.block(cond, &specs, 0)?;
                let body_block = self.block(body, &specs, *n_carry)?;
                let carry_init = self.copies_into(carries, &carry_elems);
                RegionExec::While {
                    n_carry: *n_carry,
                    max_trips: *max_trips,
                    carry_init,
                    cond: cond_block,
                    body: body_block,
                }
            }
        };
        self.finish_region(region.form().name(), exec, op_bufs, outputs, siblings)
    }

    fn finish_region(
        &mut self,
        form: &'static str,
        exec: RegionExec,
        operands: Vec<BufId>,
        outputs: Vec<BufId>,
        siblings: &[usize],
    ) -> Result<(), BackendError> {
        for &s in siblings {
            let Op::Region(call) = &self.g.nodes()[s].op else {
                return Err(internal("a sibling of a region node is not a region node"));
            };
            let buf = *outputs
                .get(call.output)
                .ok_or_else(|| internal("a region output beyond the region's outputs"))?;
            self.vals[s] = Some(super::Val::Buf(buf));
        }
        self.steps.push(Step::Region(Box::new(RegionStep {
            form,
            exec,
            operands,
            outputs,
        })));
        Ok(())
    }

    /// A buffer's element type and length.
    fn spec(&self, buf: BufId) -> (Elem, usize) {
        (self.b.elem(buf), self.b.buffers[buf].len)
    }

    /// The kernels that copy each operand of `from` into a carry of the matching `to` type.
    fn copies_into(&mut self, from: &[BufId], to: &[Elem]) -> Vec<usize> {
        from.iter()
            .zip(to)
            .map(|(&b, &e)| {
                let from = self.b.elem(b);
                self.b.kernel(layout::copy(from, e))
            })
            .collect()
    }

    /// Lowers body `g` into a block whose inputs have `specs` (element type and length). Its
    /// first `owned` outputs are made distinct temps of the block (the region moves them).
    fn block(
        &mut self,
        g: &Graph,
        specs: &[(Elem, usize)],
        owned: usize,
    ) -> Result<Block, BackendError> {
        let inputs: Vec<BufId> = specs
            .iter()
            .map(|&(elem, len)| self.b.buffer(elem, len, Role::BodyInput))
            .collect();
        let mut ctx = Ctx::new(&mut *self.b, g, false);
        ctx.bind_inputs(&inputs);
        ctx.run()?;
        // Outputs come as values of the program (`value_elem`), the type of the carries.
        let mut outputs = ctx.final_outputs()?;
        for j in 0..outputs.len().min(owned) {
            let buf = outputs[j];
            if !ctx.temps.contains(&buf) || outputs[..j].contains(&buf) {
                let (elem, len) = (ctx.b.elem(buf), ctx.b.buffers[buf].len);
                let copy = ctx.temp(elem, len);
                ctx.launch(
                    layout::copy(elem, elem),
                    len,
                    vec![Arg::Buf(buf), Arg::Buf(copy)],
                );
                outputs[j] = copy;
            }
        }
        Ok(Block {
            inputs,
            steps: ctx.steps,
            outputs,
            temps: ctx.temps,
        })
    }

    /// The fused form of a counted loop without `xs`/`ys` (see the module docs), when it
    /// applies.
    fn fused_counted(
        &mut self,
        s: &quabla_ir::ScanBody,
        carries: &[BufId],
        consts: &[BufId],
        outputs: &[BufId],
    ) -> Result<Option<Launch>, BackendError> {
        let g = &s.body;
        let input_dims: Vec<Vec<usize>> = g
            .inputs()
            .map(|(_, _, ty)| ty.shape.dims().to_vec())
            .collect();
        let Some(dims) = input_dims.get(1).cloned() else {
            return Ok(None);
        };
        let carry_dims = &input_dims[1..1 + s.n_carry];
        let const_dims = &input_dims[1 + s.n_carry..];
        if carry_dims.iter().any(|d| *d != dims) || !const_dims.iter().all(|d| broadcasts(d, &dims))
        {
            return Ok(None);
        }
        let Some(body) = elementwise_body(g, &dims) else {
            return Ok(None);
        };
        let t = self.t();
        let carry_elems: Vec<Elem> = carries.iter().map(|&b| self.b.elem(b)).collect();
        let carry_types = input_elems(g, 1, s.n_carry, t);
        let const_ext: Vec<External> = consts
            .iter()
            .zip(const_dims)
            .map(|(&b, d)| External {
                elem: self.b.elem(b),
                dims: d.clone(),
            })
            .collect();
        let out_elems: Vec<Elem> = outputs[..s.n_carry]
            .iter()
            .map(|&b| self.b.elem(b))
            .collect();
        let trips = loops::Trips {
            length: s.length,
            start: s.start,
            reverse: s.reverse,
            index: index_elem(s, t),
        };
        let kernel = loops::counted(
            &dims,
            trips,
            &carry_elems,
            &carry_types,
            &const_ext,
            &out_elems,
            &body,
            t,
        );
        let args = carries
            .iter()
            .chain(consts)
            .chain(&outputs[..s.n_carry])
            .map(|&b| Arg::Buf(b))
            .collect();
        Ok(Some(Launch {
            kernel: self.b.kernel(kernel),
            items: dims.iter().product::<usize>() as u64,
            args,
        }))
    }

    /// The fused form of a `while_loop` over single values (see the module docs), when it
    /// applies.
    fn fused_while(
        &mut self,
        cond: &Graph,
        body: &Graph,
        max_trips: Option<usize>,
        carries: &[BufId],
        consts: &[BufId],
        outputs: &[BufId],
    ) -> Result<Option<Launch>, BackendError> {
        let single = |g: &Graph| g.inputs().all(|(_, _, ty)| ty.shape.size() == 1);
        if !single(cond) || !single(body) {
            return Ok(None);
        }
        let (Some(cond_body), Some(body_body)) =
            (elementwise_body(cond, &[]), elementwise_body(body, &[]))
        else {
            return Ok(None);
        };
        let t = self.t();
        let carry_elems: Vec<Elem> = carries.iter().map(|&b| self.b.elem(b)).collect();
        let carry_types = input_elems(body, 0, carries.len(), t);
        let const_elems: Vec<Elem> = consts.iter().map(|&b| self.b.elem(b)).collect();
        let out_elems: Vec<Elem> = outputs[..carries.len()]
            .iter()
            .map(|&b| self.b.elem(b))
            .collect();
        let kernel = loops::scalar_while(
            &carry_elems,
            &carry_types,
            &const_elems,
            &out_elems,
            &cond_body,
            &body_body,
            max_trips,
            t,
        );
        let args = carries
            .iter()
            .chain(consts)
            .chain(&outputs[..carries.len()])
            .map(|&b| Arg::Buf(b))
            .collect();
        Ok(Some(Launch {
            kernel: self.b.kernel(kernel),
            items: 1,
            args,
        }))
    }
}

/// How the index parameter of counted loop `s` is held: float64 when it is float64 (so every
/// index is exact, also in a float32 program), else the program's type `t`.
fn index_elem(s: &quabla_ir::ScanBody, t: Elem) -> Elem {
    if s.index_dtype() == DType::F64 {
        Elem::F64
    } else {
        t
    }
}

/// How inputs `first..first + count` of body `g` are held as values of a program of type `t`.
fn input_elems(g: &Graph, first: usize, count: usize, t: Elem) -> Vec<Elem> {
    g.inputs()
        .skip(first)
        .take(count)
        .map(|(_, _, ty)| value_elem(ty.dtype, t))
        .collect()
}

/// Whether `from` broadcasts to `to` (trailing-axis rules).
fn broadcasts(from: &[usize], to: &[usize]) -> bool {
    from.len() <= to.len()
        && from
            .iter()
            .rev()
            .zip(to.iter().rev())
            .all(|(&f, &t)| f == t || f == 1)
}

/// `g` as an elementwise loop body over elements of `dims`, when every node is an input, a
/// single-valued constant, a broadcast to a shape that broadcasts to `dims`, a reshape of a
/// single value, or an elementwise op whose result broadcasts to `dims`.
pub fn elementwise_body(g: &Graph, dims: &[usize]) -> Option<loops::Body> {
    let mut source: HashMap<usize, Source> = HashMap::new();
    let mut members: Vec<Member> = Vec::new();
    let mut input = 0;
    for (i, node) in g.nodes().iter().enumerate() {
        let single = node.ty.shape.size() == 1;
        let src = match &node.op {
            Op::Input { .. } => {
                input += 1;
                Source::External(input - 1)
            }
            Op::Constant { data, .. } if data.len() == 1 => Source::Literal(Scalar::of(data)),
            Op::Broadcast { .. } if broadcasts(node.ty.shape.dims(), dims) => {
                source.get(&node.operands[0].index())?.clone()
            }
            Op::Reshape { .. } => {
                let operand = node.operands[0].index();
                let from = g.nodes()[operand].ty.shape.size() == 1;
                if !from && g.nodes()[operand].ty.shape != node.ty.shape {
                    return None;
                }
                source.get(&operand)?.clone()
            }
            // Elementwise ops commute with broadcasting, so a node of a shape that broadcasts
            // to the carries' is computed by each work item at its own broadcast position.
            op if op.is_elementwise() => {
                if !single && !broadcasts(node.ty.shape.dims(), dims) {
                    return None;
                }
                let operands = node
                    .operands
                    .iter()
                    .map(|o| source.get(&o.index()).cloned())
                    .collect::<Option<Vec<_>>>()?;
                members.push(Member {
                    op: op.clone(),
                    operands,
                    dtype: node.ty.dtype,
                });
                Source::Member(members.len() - 1)
            }
            _ => return None,
        };
        source.insert(i, src);
    }
    let outputs = g
        .outputs()
        .iter()
        .map(|o| source.get(&o.index()).cloned())
        .collect::<Option<Vec<_>>>()?;
    Some(loops::Body { members, outputs })
}
