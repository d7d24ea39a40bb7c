//! Dense Jacobians as one graph (transforms.md §8): the JVP (forward mode) or VJP (reverse
//! mode) of a graph, batched with `quabla-vmap` over basis vectors that are generated inside
//! the graph, and cut into one block `[*out, *in]` per output and differentiated input.
//!
//! Forward mode runs over the input basis unless the outputs have fewer elements than the
//! inputs; reverse mode always when the graph holds a `custom_vjp` rule, which has no forward
//! mode. The choice changes the cost, never the values' meaning.

use crate::{jvp_graph, vjp_graph, Seed};
use quabla_ir::{
    Comparison, DType, Graph, GraphBuilder, HostData, NodeId, Op, Result, Shape, TensorType,
};

/// How a Jacobian is computed: chosen by size (transforms.md §8), or forced (`jacfwd`,
/// `jacrev`). A forced forward mode through a `custom_vjp` raises like `jvp` does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum JacobianMode {
    /// Forward mode unless the outputs have fewer elements than the inputs or the graph holds
    /// a `custom_vjp`.
    #[default]
    Auto,
    /// Forward mode over the input basis.
    Forward,
    /// Reverse mode over the output basis.
    Reverse,
}

/// The graph of all Jacobian blocks of `g` with respect to the flagged inputs: for each float
/// output in order, one block `[*out, *in]` per flagged input in order.
pub fn jacobian_graph(g: &Graph, wrt: &[bool]) -> Result<Graph> {
    jacobian_graph_with_mode(g, wrt, JacobianMode::Auto)
}

/// [`jacobian_graph`] in the given mode; the blocks are the same whatever the mode.
pub fn jacobian_graph_with_mode(g: &Graph, wrt: &[bool], mode: JacobianMode) -> Result<Graph> {
    let inputs: Vec<(String, TensorType)> = g
        .inputs()
        .map(|(_, n, t)| (n.to_string(), t.clone()))
        .collect();
    let wrt_types: Vec<TensorType> = inputs
        .iter()
        .zip(wrt)
        .filter(|(_, &w)| w)
        .map(|((_, t), _)| t.clone())
        .collect();
    let outs: Vec<TensorType> = g.outputs().iter().map(|o| g.node(*o).ty.clone()).collect();
    let float_outs: Vec<usize> = (0..outs.len())
        .filter(|&k| outs[k].dtype.is_float())
        .collect();
    let p: usize = wrt_types.iter().map(|t| t.shape.size()).sum();
    let q: usize = float_outs.iter().map(|&k| outs[k].shape.size()).sum();
    let mut b = GraphBuilder::new();
    let primals: Vec<_> = inputs
        .iter()
        .map(|(n, t)| b.input(n.clone(), t.clone()))
        .collect();
    let mut blocks = Vec::new();
    if p == 0 {
        return b.finish(Vec::new());
    }
    let reverse = match mode {
        JacobianMode::Auto => q < p || has_custom_vjp(g),
        JacobianMode::Forward => false,
        JacobianMode::Reverse => true,
    };
    if reverse {
        // Reverse mode over the output basis (always for a custom_vjp, which has no forward
        // mode).
        let seeds: Vec<Seed> = (0..outs.len())
            .map(|k| {
                if float_outs.contains(&k) {
                    Seed::Input
                } else {
                    Seed::None
                }
            })
            .collect();
        let vg = vjp_graph(g, wrt, &seeds)?;
        let n_prim = inputs.len();
        let n_ct = float_outs.len();
        let mut in_axes = vec![None; n_prim];
        in_axes.extend(std::iter::repeat_n(Some(0), n_ct));
        let mut out_axes = vec![None; outs.len()];
        out_axes.extend(std::iter::repeat_n(Some(0), wrt_types.len()));
        let batched = quabla_vmap::batch_graph(&vg, &in_axes, q, &out_axes)?;
        let mut bound = primals.clone();
        let mut offset = 0;
        let mut out_offsets = Vec::new();
        for &k in &float_outs {
            bound.push(basis(&mut b, q, offset, &outs[k].shape, outs[k].dtype)?);
            out_offsets.push(offset);
            offset += outs[k].shape.size();
        }
        let res = b.inline_graph(&batched, &bound)?;
        let grads = &res[outs.len()..];
        for (idx, &k) in float_outs.iter().enumerate() {
            let oshape = &outs[k].shape;
            for (j, t) in wrt_types.iter().enumerate() {
                // grads[j]: [q, *in]; rows of output k.
                let mut starts = vec![0; t.shape.rank() + 1];
                starts[0] = out_offsets[idx];
                let mut sizes = vec![oshape.size()];
                sizes.extend(t.shape.dims());
                let rows = b.slice(grads[j], starts, sizes)?;
                let mut dims = oshape.dims().to_vec();
                dims.extend(t.shape.dims());
                blocks.push(b.reshape_to(rows, Shape::new(dims)?)?);
            }
        }
    } else {
        // Forward mode over the input basis.
        let jg = jvp_graph(g, wrt)?;
        let n_prim = inputs.len();
        let mut in_axes = vec![None; n_prim];
        in_axes.extend(std::iter::repeat_n(Some(0), wrt_types.len()));
        let mut out_axes = vec![None; outs.len()];
        out_axes.extend(std::iter::repeat_n(Some(0), outs.len()));
        let batched = quabla_vmap::batch_graph(&jg, &in_axes, p, &out_axes)?;
        let mut bound = primals.clone();
        let mut offset = 0;
        let mut in_offsets = Vec::new();
        for t in &wrt_types {
            bound.push(basis(&mut b, p, offset, &t.shape, t.dtype)?);
            in_offsets.push(offset);
            offset += t.shape.size();
        }
        let res = b.inline_graph(&batched, &bound)?;
        let tangents = &res[outs.len()..];
        for &k in &float_outs {
            let oshape = &outs[k].shape;
            for (j, t) in wrt_types.iter().enumerate() {
                // tangents[k]: [p, *out]; rows of input j, then inputs axes last.
                let mut starts = vec![0; oshape.rank() + 1];
                starts[0] = in_offsets[j];
                let mut sizes = vec![t.shape.size()];
                sizes.extend(oshape.dims());
                let rows = b.slice(tangents[k], starts, sizes)?;
                let mut dims = t.shape.dims().to_vec();
                dims.extend(oshape.dims());
                let r = b.reshape_to(rows, Shape::new(dims)?)?;
                let ri = t.shape.rank();
                let ro = oshape.rank();
                let perm: Vec<isize> = (ri..ri + ro).chain(0..ri).map(|a| a as isize).collect();
                blocks.push(b.transpose(r, Some(&perm))?);
            }
        }
    }
    b.finish(blocks)
}

/// Whether forward mode would meet a `custom_vjp` rule (directly, or inside the primal graph
/// of a rule differentiated through its primal, such as `checkpoint`).
pub fn has_custom_vjp(g: &Graph) -> bool {
    g.nodes().iter().any(|n| match &n.op {
        Op::Custom(c) => {
            c.rule.jvp.is_none() && (c.rule.fwd.is_some() || has_custom_vjp(&c.rule.primal))
        }
        _ => false,
    })
}

/// Rows `[start, start + len)` of an identity of size `n`, as `[n, *shape]` in `dtype`: the
/// basis vectors of one leaf, generated inside the graph from an `arange` of length `n`.
fn basis(
    b: &mut GraphBuilder,
    n: usize,
    start: usize,
    shape: &Shape,
    dtype: DType,
) -> Result<NodeId> {
    let len = shape.size();
    let rows = b.constant(
        HostData::F64((0..n).map(|i| i as f64).collect()),
        Shape::new(vec![n, 1])?,
        false,
    )?;
    let cols = b.constant(
        HostData::F64((start..start + len).map(|i| i as f64).collect()),
        Shape::new(vec![1, len])?,
        false,
    )?;
    let eye = b.compare(Comparison::Equal, rows, cols)?;
    let eye = b.astype(eye, dtype)?;
    let mut dims = vec![n];
    dims.extend(shape.dims());
    b.reshape_to(eye, Shape::new(dims)?)
}
