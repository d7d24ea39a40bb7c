//! Canonicalization (transforms.md §17 step 2):
//! - casts of a strong value to its own dtype are dropped;
//! - chains of reshapes collapse into one reshape, and a reshape to the operand's own shape
//!   disappears;
//! - identity broadcasts and identity transposes are removed, and a transpose of a transpose
//!   becomes one transpose;
//! - each `custom` node is replaced by its primal graph, its output aliased (the symbolic
//!   transforms have used its rules by now; backends never see it); custom calls nested in a
//!   primal graph are inlined too.

use super::{rewrite, Rewrite};
use crate::graph::{Graph, GraphBuilder, Node, NodeId};
use crate::op::{CustomCall, Op};

pub fn canonicalize(graph: &Graph) -> Graph {
    rewrite(graph, |b, node| match &node.op {
        Op::Cast { to, weak } => {
            let x = b.ty(node.operands[0]);
            if x.dtype == *to && x.weak == *weak {
                Rewrite::Alias(node.operands[0])
            } else {
                Rewrite::Keep
            }
        }
        Op::Reshape { shape } => {
            let mut x = node.operands[0];
            if let Op::Reshape { .. } = b.node(x).op {
                x = b.node(x).operands[0];
            }
            if &b.ty(x).shape == shape {
                return Rewrite::Alias(x);
            }
            if x == node.operands[0] {
                return Rewrite::Keep;
            }
            let op = Op::Reshape {
                shape: shape.clone(),
            };
            Rewrite::Alias(b.push_typed(op, vec![x], node.ty.clone()))
        }
        Op::Broadcast { shape } => {
            if &b.ty(node.operands[0]).shape == shape {
                Rewrite::Alias(node.operands[0])
            } else {
                Rewrite::Keep
            }
        }
        Op::Transpose { perm } => {
            let x = node.operands[0];
            let (x, perm) = match &b.node(x).op {
                Op::Transpose { perm: inner } => (
                    b.node(x).operands[0],
                    perm.iter().map(|&p| inner[p]).collect::<Vec<_>>(),
                ),
                _ => (x, perm.clone()),
            };
            if perm.iter().enumerate().all(|(i, &p)| i == p) {
                return Rewrite::Alias(x);
            }
            if x == node.operands[0] {
                return Rewrite::Keep;
            }
            Rewrite::Alias(b.push_typed(Op::Transpose { perm }, vec![x], node.ty.clone()))
        }
        Op::Custom(call) => Rewrite::Alias(inline_custom(b, call, &node.operands)),
        _ => Rewrite::Keep,
    })
}

/// Appends the primal graph of a custom rule with its inputs bound to `operands`; returns the
/// node of the requested output.
fn inline_custom(b: &mut GraphBuilder, call: &CustomCall, operands: &[NodeId]) -> NodeId {
    let primal = &call.rule.primal;
    let mut remap: Vec<NodeId> = Vec::with_capacity(primal.len());
    let mut next_input = 0;
    for Node {
        op,
        operands: ops,
        ty,
        ..
    } in primal.nodes()
    {
        let id = if let Op::Input { .. } = op {
            next_input += 1;
            operands[next_input - 1]
        } else if let Op::Custom(inner) = op {
            // A custom call inside a primal graph (a rule used by another rule's function).
            let ops: Vec<NodeId> = ops.iter().map(|o| remap[o.index()]).collect();
            inline_custom(b, inner, &ops)
        } else {
            let ops = ops.iter().map(|o| remap[o.index()]).collect();
            b.push_typed(op.clone(), ops, ty.clone())
        };
        remap.push(id);
    }
    remap[primal.outputs()[call.output].index()]
}
