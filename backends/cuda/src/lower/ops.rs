//! Reductions, `cumsum`, the layout ops and the indexed ops: one kernel each (a reduction that
//! splits its rows takes a pass per tree level group, see `codegen::reduce`; an
//! `index_scatter` takes a pass that tables its indices, see `codegen::layout`).

use super::{internal, Ctx};
use crate::codegen::{layout, reduce};
use crate::program::{Arg, BufId, Elem};
use quabla_backend::BackendError;
use quabla_ir::indexed::IndexLayout;
use quabla_ir::Op;

impl Ctx<'_> {
    /// Lowers node `i` (a reduction, `cumsum` or a layout op) and returns its buffer.
    pub(super) fn layout_or_reduce(&mut self, i: usize) -> Result<BufId, BackendError> {
        let node = &self.g.nodes()[i];
        let op = node.op.clone();
        let operands = node.operands.clone();
        let out_dims = node.ty.shape.dims().to_vec();
        let size = node.ty.shape.size();
        let x = self.buf_of(operands[0])?;
        let x_elem = self.b.elem(x);
        let dims = self.dims(operands[0]);
        let out_elem = self.out_elem(i);
        if let Op::Reduce { kind, axes } = &op {
            let red = reduce::Reduction {
                dims,
                axes: axes.clone(),
            };
            return Ok(self.reduction(&red, kind.reducer(), x, out_elem));
        }
        let out = self.temp(out_elem, size);
        let (kernel, args) = match &op {
            Op::Cumsum { axis, reverse } => (
                reduce::cumsum_kernel(&dims, *axis, *reverse, x_elem, out_elem),
                vec![Arg::Buf(x), Arg::Buf(out)],
            ),
            Op::Transpose { perm } => (
                layout::transpose(&dims, perm, x_elem, out_elem),
                vec![Arg::Buf(x), Arg::Buf(out)],
            ),
            Op::Slice { starts, sizes } => (
                layout::slice(&dims, starts, sizes, x_elem, out_elem),
                vec![Arg::Buf(x), Arg::Buf(out)],
            ),
            Op::PadSlice { starts, shape } => (
                layout::pad_slice(&dims, starts, shape.dims(), x_elem, out_elem),
                vec![Arg::Buf(x), Arg::Buf(out)],
            ),
            Op::Concat { axis } => {
                let mut bufs = vec![x];
                for &o in &operands[1..] {
                    bufs.push(self.buf_of(o)?);
                }
                let parts: Vec<Vec<usize>> = operands.iter().map(|&o| self.dims(o)).collect();
                let elems: Vec<Elem> = bufs.iter().map(|&b| self.b.elem(b)).collect();
                let mut args: Vec<Arg> = bufs.into_iter().map(Arg::Buf).collect();
                args.push(Arg::Buf(out));
                (
                    layout::concat(&parts, &elems, *axis, &out_dims, out_elem),
                    args,
                )
            }
            Op::Gather { axis, indices } => {
                let table = self.index_table(indices_i32(indices)?);
                (
                    layout::gather(&dims, *axis, &out_dims, x_elem, out_elem),
                    vec![Arg::Buf(x), Arg::Buf(table), Arg::Buf(out)],
                )
            }
            Op::ScatterAdd { axis, indices } => {
                let updates = self.buf_of(operands[1])?;
                let update_dims = self.dims(operands[1]);
                // For each position of the axis, the update slices added onto it, in order.
                let extent = dims[*axis];
                let mut lists: Vec<Vec<i32>> = vec![Vec::new(); extent];
                for (j, &target) in indices.iter().enumerate() {
                    let list = lists
                        .get_mut(target)
                        .ok_or_else(|| internal("a scatter_add index is out of range"))?;
                    list.push(i32::try_from(j).map_err(|_| too_many())?);
                }
                let mut offsets = vec![0i32];
                let mut sources = Vec::with_capacity(indices.len());
                for list in lists {
                    sources.extend(list);
                    offsets.push(i32::try_from(sources.len()).map_err(|_| too_many())?);
                }
                // A scatter of no update slice still needs a table to point at.
                if sources.is_empty() {
                    sources.push(0);
                }
                let offsets = self.index_table(offsets);
                let sources = self.index_table(sources);
                let u_elem = self.b.elem(updates);
                (
                    layout::scatter_add(&dims, *axis, &update_dims, x_elem, u_elem, out_elem),
                    vec![
                        Arg::Buf(x),
                        Arg::Buf(updates),
                        Arg::Buf(offsets),
                        Arg::Buf(sources),
                        Arg::Buf(out),
                    ],
                )
            }
            other => return Err(internal(format!("{} is not a layout op", other.name()))),
        };
        let items = match &op {
            Op::Cumsum { axis, .. } => size / dims[*axis],
            _ => size,
        };
        self.launch(kernel, items, args);
        Ok(out)
    }

    /// A reduction of buffer `x` into a new buffer of `out_elem`.
    pub(super) fn reduction(
        &mut self,
        red: &reduce::Reduction,
        reducer: quabla_ir::Reducer,
        x: BufId,
        out_elem: Elem,
    ) -> BufId {
        let x_elem = self.b.elem(x);
        let outputs = red.outputs();
        let out = self.temp(out_elem, outputs);
        if !red.splits() {
            self.launch(
                reduce::row_kernel(red, reducer, x_elem, out_elem),
                outputs,
                vec![Arg::Buf(x), Arg::Buf(out)],
            );
            return out;
        }
        let acc = reduce::accumulator(x_elem);
        let mut per = reduce::partials(red, reducer, x_elem);
        let mut values = self.temp(acc, outputs * per);
        self.launch(
            reduce::partial_kernel(red, reducer, x_elem),
            outputs * per,
            vec![Arg::Buf(x), Arg::Buf(values)],
        );
        while per > reduce::TREE_CHUNK {
            let next_per = per.div_ceil(reduce::TREE_CHUNK);
            let next = self.temp(acc, outputs * next_per);
            self.launch(
                reduce::tree_kernel(reducer, acc),
                outputs * next_per,
                vec![
                    Arg::Buf(values),
                    Arg::Buf(next),
                    Arg::Int(per as i64),
                    Arg::Int(next_per as i64),
                ],
            );
            values = next;
            per = next_per;
        }
        self.launch(
            reduce::tree_final_kernel(reducer, acc, red.count(), out_elem),
            outputs,
            vec![
                Arg::Buf(values),
                Arg::Buf(out),
                Arg::Int(per as i64),
                Arg::Int(1),
            ],
        );
        out
    }
}

impl Ctx<'_> {
    /// Lowers `index_gather` or `index_scatter` node `i` (indices given as a tensor) and
    /// returns its buffer. A scatter first tables, per batch row, which updates land on each
    /// index (so every result element combines its own updates in order, with no atomics).
    pub(super) fn indexed(&mut self, i: usize) -> Result<BufId, BackendError> {
        let node = &self.g.nodes()[i];
        let op = node.op.clone();
        let operands = node.operands.clone();
        let size = node.ty.shape.size();
        let (axis, batch) = match &op {
            Op::IndexGather { axis, batch } | Op::IndexScatter { axis, batch, .. } => {
                (*axis, *batch)
            }
            other => return Err(internal(format!("{} is not an indexed op", other.name()))),
        };
        let l = IndexLayout::new(
            &self.dims(operands[0]),
            &self.dims(operands[1]),
            axis,
            batch,
        );
        let x = self.buf_of(operands[0])?;
        let idx = self.buf_of(operands[1])?;
        let (x_elem, idx_elem) = (self.b.elem(x), self.b.elem(idx));
        let out_elem = self.out_elem(i);
        if let Op::IndexScatter { mode, .. } = op {
            let updates = self.buf_of(operands[2])?;
            let offsets = self.temp(Elem::I64, l.outer * (l.n + 1));
            let sources = self.temp(Elem::I64, l.outer * l.picks);
            self.launch(
                layout::index_scatter_table(&l, idx_elem),
                l.outer,
                vec![Arg::Buf(idx), Arg::Buf(offsets), Arg::Buf(sources)],
            );
            let out = self.temp(out_elem, size);
            let u_elem = self.b.elem(updates);
            self.launch(
                layout::index_scatter(&l, mode, x_elem, u_elem, out_elem),
                size,
                vec![
                    Arg::Buf(x),
                    Arg::Buf(updates),
                    Arg::Buf(offsets),
                    Arg::Buf(sources),
                    Arg::Buf(out),
                ],
            );
            return Ok(out);
        }
        let out = self.temp(out_elem, size);
        self.launch(
            layout::index_gather(&l, x_elem, idx_elem, out_elem),
            size,
            vec![Arg::Buf(x), Arg::Buf(idx), Arg::Buf(out)],
        );
        Ok(out)
    }
}

fn too_many() -> BackendError {
    super::unsupported(
        "scatter_add",
        "more than 2^31 index entries do not fit the device's index tables",
    )
}

fn indices_i32(indices: &[usize]) -> Result<Vec<i32>, BackendError> {
    indices
        .iter()
        .map(|&i| {
            i32::try_from(i).map_err(|_| {
                super::unsupported(
                    "gather",
                    "an index beyond 2^31 does not fit the device's index tables",
                )
            })
        })
        .collect()
}
