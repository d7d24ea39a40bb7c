//! Batching of Quabla IR graphs: [`batch_graph`] rewrites a graph into one that computes it for
//! every element of a batch at once (the graph rewrite behind `vmap`, transforms.md §9). This
//! crate never executes kernels.
//!
//! # Design
//!
//! Every value of the rewritten graph is either *unbatched* (the same value for every example,
//! with its original shape) or *batched*, with the batch axis at position 0 (shape
//! `[size, ...logical shape]`). Mapped inputs are transposed so that their mapped axis comes
//! first; everything else keeps axis 0 for the batch until the outputs, which move it to their
//! `out_axes`.
//!
//! - A node none of whose operands is batched is copied unchanged: a value that does not depend
//!   on a mapped input is never replicated along the batch.
//! - Otherwise one rule per op, in one exhaustive `match` ([`batch_rule`]): attributes that
//!   name axes shift by one, shapes gain the leading batch extent, and operands that must agree
//!   exactly (concatenation, scatter, solves) have their unbatched operands broadcast along the
//!   batch first.
//! - Broadcasting ops (elementwise ops, `broadcast`, `matmul`) keep NumPy's trailing-axis rules
//!   of the logical shapes: a batched operand is reshaped to `[size, 1, ..., 1, dims]` with the
//!   logical rank of the op, while unbatched operands are left as they are.
//! - `custom` nodes with a batched operand batch every operand and every graph of their rule
//!   (primal, `fwd`, `bwd`, `jvp`) with all inputs and outputs mapped along axis 0.
//! - Control-flow regions follow transforms.md §11 (`regions.rs`): a region group (the nodes
//!   of one call, one per output) is rewritten once, at its first node, into one new region
//!   whose bodies are batched by the same sweep, or, for a `cond` with a mapped predicate,
//!   into both branches inlined and combined with `where`.
//!
//! ```
//! use quabla_ir::{DType, GraphBuilder, Shape, TensorType};
//! use quabla_vmap::batch_graph;
//!
//! // f(x, w) = sum(x * w) for x: [3] (mapped along axis 1 of a [3, 5] batch) and w: [3].
//! let mut b = GraphBuilder::new();
//! let vector = TensorType::new(DType::F64, Shape::new(vec![3]).unwrap());
//! let x = b.input("x", vector.clone());
//! let w = b.input("w", vector);
//! let p = b.mul(x, w).unwrap();
//! let s = b.sum(p, None, false).unwrap();
//! let g = b.finish(vec![s]).unwrap();
//!
//! let batched = batch_graph(&g, &[Some(1), None], 5, &[Some(0)]).unwrap();
//! let (_, _, x_ty) = batched.inputs().next().unwrap();
//! assert_eq!(x_ty.shape.dims(), [3, 5]);
//! assert_eq!(batched.node(batched.outputs()[0]).ty.shape.dims(), [5]);
//! ```

mod regions;

use quabla_ir::{Graph, GraphBuilder, IrError, Node, NodeId, Op, Result, Shape, TensorType};

/// A value of the batched graph: its node and whether it carries the batch axis at position 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Value {
    id: NodeId,
    batched: bool,
}

impl Value {
    fn unbatched(id: NodeId) -> Value {
        Value { id, batched: false }
    }

    fn batched(id: NodeId) -> Value {
        Value { id, batched: true }
    }
}

/// Batches `g` over `size` examples.
///
/// Input `k` of `g` is mapped along `in_axes[k]` (`Some(axis)`: the position of the batch axis
/// in the *batched* input, already normalized to `0..=rank`) or unmapped (`None`). The result
/// takes the same inputs, in the same order and under the same names, a mapped input having the
/// extra axis of extent `size` at its `in_axis`. It returns each output of `g` with the batch
/// axis at `out_axes[k]` (`Some(axis)`, in `0..=rank` of the output), or unbatched for `None`,
/// which requires the output not to depend on any mapped input. An output that does not depend
/// on a mapped input but has `Some(axis)` is broadcast along the batch.
///
/// Errors: `in_axes`/`out_axes` lengths that do not match the inputs/outputs of `g`
/// ([`IrError::InvalidArgument`]), a zero `size` or an axis out of range ([`IrError::Shape`],
/// naming the input or output), `None` in `out_axes` for a batched output
/// ([`IrError::InvalidArgument`]). Every op has a batching rule; a graph that breaks an IR
/// invariant (a region whose bodies do not match its contract) gives [`IrError::Verify`].
pub fn batch_graph(
    g: &Graph,
    in_axes: &[Option<usize>],
    size: usize,
    out_axes: &[Option<usize>],
) -> Result<Graph> {
    let inputs: Vec<(NodeId, &str, &TensorType)> = g.inputs().collect();
    if in_axes.len() != inputs.len() {
        return Err(IrError::InvalidArgument {
            message: format!(
                "vmap in_axes has {} entries for a function of {} inputs",
                in_axes.len(),
                inputs.len()
            ),
        });
    }
    if out_axes.len() != g.outputs().len() {
        return Err(IrError::InvalidArgument {
            message: format!(
                "vmap out_axes has {} entries for a function of {} outputs",
                out_axes.len(),
                g.outputs().len()
            ),
        });
    }
    if size == 0 {
        return Err(IrError::Shape {
            op: "vmap".into(),
            message: "empty slices are not supported: vmap over a batch of size 0".into(),
        });
    }

    let mut b = GraphBuilder::new();
    // Inputs first (the IR keeps inputs ahead of every other node), then the transposes that
    // bring each mapped axis to the front.
    let mut raw: Vec<NodeId> = Vec::with_capacity(inputs.len());
    for (&(_, name, ty), &axis) in inputs.iter().zip(in_axes) {
        let ty = match axis {
            None => ty.clone(),
            Some(axis) => TensorType {
                shape: with_batch_axis(&ty.shape, size, axis).ok_or_else(|| IrError::Shape {
                    op: "vmap".into(),
                    message: format!(
                        "vmap in_axes: axis {axis} of input {name} is out of range for a batched tensor of rank {}",
                        ty.shape.rank() + 1
                    ),
                })?,
                ..ty.clone()
            },
        };
        raw.push(b.input(name, ty));
    }
    let mut values: Vec<Value> = Vec::with_capacity(g.len());
    for (&id, &axis) in raw.iter().zip(in_axes) {
        values.push(match axis {
            None => Value::unbatched(id),
            Some(axis) => Value::batched(move_axis(&mut b, id, axis, 0)?),
        });
    }

    sweep(&mut b, g, &mut values, size)?;

    let mut outputs = Vec::with_capacity(g.outputs().len());
    for (k, (&o, &axis)) in g.outputs().iter().zip(out_axes).enumerate() {
        let v = values[o.index()];
        let out = match axis {
            None if v.batched => {
                return Err(IrError::InvalidArgument {
                    message: format!(
                        "vmap out_axes=None requires an unmapped result, but output {k} depends on a mapped input"
                    ),
                })
            }
            None => v.id,
            Some(axis) => {
                let rank = g.node(o).ty.shape.rank();
                if axis > rank {
                    return Err(IrError::Shape {
                        op: "vmap".into(),
                        message: format!(
                            "vmap out_axes: axis {axis} of output {k} is out of range for a batched tensor of rank {}",
                            rank + 1
                        ),
                    });
                }
                let m = materialize(&mut b, v, size)?;
                move_axis(&mut b, m, 0, axis)?
            }
        };
        outputs.push(out);
    }
    b.finish(outputs)
}

/// Batches every non-input node of `g` into `b`. `values` holds the values of the inputs of
/// `g` on entry and of every node of `g` on return.
///
/// A region group with a batched operand is rewritten once, at its first node, by
/// [`regions::batch_region`]; its later siblings take the values computed there. A group
/// without a batched operand is copied node by node and stays one group, since every copy
/// shares the region and the operands.
fn sweep(b: &mut GraphBuilder, g: &Graph, values: &mut Vec<Value>, size: usize) -> Result<()> {
    let groups = quabla_ir::region_groups(g);
    let mut siblings: std::collections::HashMap<usize, Value> = std::collections::HashMap::new();
    for (i, node) in g.nodes().iter().enumerate().skip(values.len()) {
        if let Some(v) = siblings.remove(&i) {
            values.push(v);
            continue;
        }
        let args: Vec<Value> = node.operands.iter().map(|o| values[o.index()]).collect();
        // The batched form of a recomputed node is recomputation too, from the same line.
        let previous = b.set_remat(node.remat);
        let previous_origin = b.set_origin(node.origin);
        let value = if !args.iter().any(|a| a.batched) {
            let ids: Vec<NodeId> = args.iter().map(|a| a.id).collect();
            Value::unbatched(b.push(node.op.clone(), &ids)?)
        } else if let Op::Region(call) = &node.op {
            let members = groups.get(&i).cloned().unwrap_or_else(|| vec![i]);
            let outputs: Vec<usize> = members
                .iter()
                .map(|&m| match &g.nodes()[m].op {
                    Op::Region(c) => Ok(c.output),
                    _ => Err(internal("a region group holds a non-region node")),
                })
                .collect::<Result<_>>()?;
            let results = regions::batch_region(b, &call.region, &args, &outputs, size)?;
            let mut own = None;
            for (&m, v) in members.iter().zip(results) {
                if m == i {
                    own = Some(v);
                } else {
                    siblings.insert(m, v);
                }
            }
            own.ok_or_else(|| internal("a region node is missing from its own group"))?
        } else {
            Value::batched(batch_rule(b, node, &args, size)?)
        };
        b.set_remat(previous);
        b.set_origin(previous_origin);
        values.push(value);
    }
    Ok(())
}

/// The batch size of mapped arguments: the common extent of each mapped input at its axis.
///
/// `inputs` are the *batched* arguments' names and shapes, `in_axes` their mapped axes
/// (normalized, `None` for unmapped). Errors: no mapped input ([`IrError::InvalidArgument`]),
/// an axis out of range or differing extents ([`IrError::Shape`], naming each input, axis and
/// extent).
pub fn batch_size(inputs: &[(&str, &Shape)], in_axes: &[Option<usize>]) -> Result<usize> {
    if in_axes.len() != inputs.len() {
        return Err(IrError::InvalidArgument {
            message: format!(
                "vmap in_axes has {} entries for {} arguments",
                in_axes.len(),
                inputs.len()
            ),
        });
    }
    let mut sizes: Vec<(&str, usize, usize)> = Vec::new();
    for (&(name, shape), &axis) in inputs.iter().zip(in_axes) {
        let Some(axis) = axis else { continue };
        let extent = *shape.dims().get(axis).ok_or_else(|| IrError::Shape {
            op: "vmap".into(),
            message: format!(
                "vmap in_axes: axis {axis} of input {name} is out of range for a tensor of rank {}",
                shape.rank()
            ),
        })?;
        sizes.push((name, axis, extent));
    }
    let Some(&(_, _, first)) = sizes.first() else {
        return Err(IrError::InvalidArgument {
            message: "vmap needs at least one mapped argument".into(),
        });
    };
    if sizes.iter().any(|&(_, _, n)| n != first) {
        let listed: Vec<String> = sizes
            .iter()
            .map(|(name, axis, n)| format!("{name} (axis {axis}): {n}"))
            .collect();
        return Err(IrError::Shape {
            op: "vmap".into(),
            message: format!(
                "vmap got inconsistent sizes for mapped axes: {}",
                listed.join(", ")
            ),
        });
    }
    Ok(first)
}

/// The batched node of `node`, whose operands `args` include at least one batched value. The
/// result has the batch axis at 0 and the node's shape after it.
fn batch_rule(b: &mut GraphBuilder, node: &Node, args: &[Value], size: usize) -> Result<NodeId> {
    let logical = &node.ty.shape;
    match &node.op {
        Op::Input { .. } | Op::Constant { .. } => Err(IrError::Verify {
            message: format!("{} has no operands to batch", node.op.name()),
        }),
        // A batched value prints one line per example.
        Op::DebugPrint { format, .. } => b.push(
            Op::DebugPrint {
                format: format.clone(),
                per_example: true,
            },
            &[args[0].id],
        ),
        // Elementwise ops broadcast their operands: batched operands are given the op's
        // logical rank so that the batch axis lines up in front of every logical axis.
        Op::Cast { .. }
        | Op::Unary(_)
        | Op::Powi(_)
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Where
        | Op::StopGradient => {
            let ids = lift_all(b, args, logical.rank())?;
            b.push(node.op.clone(), &ids)
        }
        // The batch axis stays: a whole-tensor form becomes its per-axis form.
        Op::Reduce { kind, axes } => b.push(
            Op::Reduce {
                kind: kind.over_axes(),
                axes: shift(axes),
            },
            &[args[0].id],
        ),
        Op::Cumsum { axis, reverse } => b.push(
            Op::Cumsum {
                axis: axis + 1,
                reverse: *reverse,
            },
            &[args[0].id],
        ),
        Op::Reshape { shape } => b.push(
            Op::Reshape {
                shape: prepend(size, shape)?,
            },
            &[args[0].id],
        ),
        Op::Transpose { perm } => {
            let perm = std::iter::once(0)
                .chain(perm.iter().map(|p| p + 1))
                .collect();
            b.push(Op::Transpose { perm }, &[args[0].id])
        }
        Op::Broadcast { shape } => {
            let x = lift(b, args[0], shape.rank())?;
            b.push(
                Op::Broadcast {
                    shape: prepend(size, shape)?,
                },
                &[x],
            )
        }
        Op::Concat { axis } => {
            let ids = materialize_all(b, args, size)?;
            b.push(Op::Concat { axis: axis + 1 }, &ids)
        }
        Op::Slice { starts, sizes } => b.push(
            Op::Slice {
                starts: std::iter::once(0).chain(starts.iter().copied()).collect(),
                sizes: std::iter::once(size).chain(sizes.iter().copied()).collect(),
            },
            &[args[0].id],
        ),
        Op::PadSlice { starts, shape } => b.push(
            Op::PadSlice {
                starts: std::iter::once(0).chain(starts.iter().copied()).collect(),
                shape: prepend(size, shape)?,
            },
            &[args[0].id],
        ),
        Op::Gather { axis, indices } => b.push(
            Op::Gather {
                axis: axis + 1,
                indices: indices.clone(),
            },
            &[args[0].id],
        ),
        Op::ScatterAdd { axis, indices } => {
            let ids = materialize_all(b, args, size)?;
            b.push(
                Op::ScatterAdd {
                    axis: axis + 1,
                    indices: indices.clone(),
                },
                &ids,
            )
        }
        // Unbatched data read by batched indices needs no copy per example: the batch axis of
        // the indices is one more picked axis, moved to the front afterwards.
        Op::IndexGather { axis, batch: 0 } if !args[0].batched => {
            let picked = b.push(
                Op::IndexGather {
                    axis: *axis,
                    batch: 0,
                },
                &[args[0].id, args[1].id],
            )?;
            move_axis(b, picked, *axis, 0)
        }
        // Otherwise the batch axis is one more batch axis shared by every operand.
        Op::IndexGather { axis, batch } => {
            let ids = materialize_all(b, args, size)?;
            b.push(
                Op::IndexGather {
                    axis: axis + 1,
                    batch: batch + 1,
                },
                &ids,
            )
        }
        Op::IndexScatter { axis, batch, mode } => {
            let ids = materialize_all(b, args, size)?;
            b.push(
                Op::IndexScatter {
                    axis: axis + 1,
                    batch: batch + 1,
                    mode: *mode,
                },
                &ids,
            )
        }
        // The batch axes of `matmul` broadcast, so the batch axis only needs to line up in
        // front of both operands' logical batch axes.
        Op::Matmul => {
            let rank = args.iter().map(|a| logical_rank(b, *a)).max().unwrap_or(0);
            let ids = lift_all(b, args, rank)?;
            b.push(Op::Matmul, &ids)
        }
        // Leading batch axes of these ops must agree exactly: batch both operands.
        Op::Solve { .. } | Op::CholeskyAd | Op::TriangularSolve { .. } => {
            let ids = materialize_all(b, args, size)?;
            b.push(node.op.clone(), &ids)
        }
        Op::Cholesky | Op::Linalg(_) => b.push(node.op.clone(), &[args[0].id]),
        // Every operand is batched, and every rule graph is batched with all inputs and
        // outputs mapped along axis 0, so the rule keeps its conventions (and survives for
        // later differentiation) on the batched values.
        Op::Custom(call) => {
            let ids = materialize_all(b, args, size)?;
            let rule = batch_custom_rule(&call.rule, size)?;
            b.push(
                Op::Custom(quabla_ir::CustomCall {
                    rule,
                    output: call.output,
                }),
                &ids,
            )
        }
        // Region groups are rewritten as a whole by the sweep (`regions.rs`).
        Op::Region(_) => Err(internal("a region node reached the per-node batching rule")),
    }
}

/// A broken invariant of this crate or of the graph it was given.
fn internal(message: &str) -> IrError {
    IrError::Verify {
        message: message.into(),
    }
}

/// Axes of a logical operand, shifted past the batch axis.
fn shift(axes: &[usize]) -> Vec<usize> {
    axes.iter().map(|a| a + 1).collect()
}

/// `[size, ...shape]`.
fn prepend(size: usize, shape: &Shape) -> Result<Shape> {
    Shape::new(
        std::iter::once(size)
            .chain(shape.dims().iter().copied())
            .collect::<Vec<_>>(),
    )
}

/// `shape` with an axis of extent `size` inserted at `axis`, or `None` when `axis > rank`.
fn with_batch_axis(shape: &Shape, size: usize, axis: usize) -> Option<Shape> {
    if axis > shape.rank() {
        return None;
    }
    let mut dims = shape.dims().to_vec();
    dims.insert(axis, size);
    Shape::new(dims).ok()
}

/// The rank of a value without its batch axis.
fn logical_rank(b: &GraphBuilder, v: Value) -> usize {
    b.ty(v.id).shape.rank() - usize::from(v.batched)
}

/// A batched value reshaped to `[size, 1, ..., 1, dims]` of logical rank `rank` (at least its
/// own), so that trailing-axis broadcasting against unbatched operands of rank up to `rank`
/// matches that of the logical shapes; unbatched values are returned as they are.
fn lift(b: &mut GraphBuilder, v: Value, rank: usize) -> Result<NodeId> {
    if !v.batched {
        return Ok(v.id);
    }
    let dims = b.ty(v.id).shape.dims().to_vec();
    let own = dims.len() - 1;
    if own >= rank {
        return Ok(v.id);
    }
    let mut lifted = Vec::with_capacity(rank + 1);
    lifted.push(dims[0]);
    lifted.extend(std::iter::repeat_n(1, rank - own));
    lifted.extend_from_slice(&dims[1..]);
    b.reshape_to(v.id, Shape::new(lifted)?)
}

fn lift_all(b: &mut GraphBuilder, args: &[Value], rank: usize) -> Result<Vec<NodeId>> {
    args.iter().map(|&a| lift(b, a, rank)).collect()
}

/// The value in batched form: an unbatched value is broadcast along a new leading axis.
fn materialize(b: &mut GraphBuilder, v: Value, size: usize) -> Result<NodeId> {
    if v.batched {
        return Ok(v.id);
    }
    let shape = prepend(size, &b.ty(v.id).shape)?;
    b.broadcast_to(v.id, shape)
}

fn materialize_all(b: &mut GraphBuilder, args: &[Value], size: usize) -> Result<Vec<NodeId>> {
    args.iter().map(|&a| materialize(b, a, size)).collect()
}

/// Moves axis `from` of `x` to position `to`, keeping the order of the other axes.
fn move_axis(b: &mut GraphBuilder, x: NodeId, from: usize, to: usize) -> Result<NodeId> {
    if from == to {
        return Ok(x);
    }
    let rank = b.ty(x).shape.rank();
    let mut perm: Vec<usize> = (0..rank).filter(|&a| a != from).collect();
    perm.insert(to, from);
    b.push(Op::Transpose { perm }, &[x])
}

/// A custom rule whose graphs all take and return values batched along axis 0.
fn batch_custom_rule(
    rule: &std::sync::Arc<quabla_ir::CustomRule>,
    size: usize,
) -> Result<std::sync::Arc<quabla_ir::CustomRule>> {
    let all = |g: &Graph| -> Result<std::sync::Arc<Graph>> {
        let ins = vec![Some(0); g.inputs().count()];
        let outs = vec![Some(0); g.outputs().len()];
        Ok(std::sync::Arc::new(batch_graph(g, &ins, size, &outs)?))
    };
    let opt = |g: &Option<std::sync::Arc<Graph>>| g.as_deref().map(all).transpose();
    Ok(std::sync::Arc::new(quabla_ir::CustomRule {
        name: rule.name.clone(),
        primal: all(&rule.primal)?,
        fwd: opt(&rule.fwd)?,
        bwd: opt(&rule.bwd)?,
        jvp: opt(&rule.jvp)?,
        rematerialize: rule.rematerialize,
    }))
}
