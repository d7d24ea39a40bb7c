//! Constant folding: a node whose operands are all constants is evaluated with the CPU
//! backend's semantics ([`crate::eval`]) and replaced by a constant rounded to the node's dtype
//! (a float64 `0.1` cast to float32 folds to `0.10000000149011612`).
//!
//! Our choice: folding never grows a constant past [`MAX_GROWN_CONSTANT`] elements beyond the
//! largest operand, so `broadcast` of a scalar to a large shape stays a broadcast instead of
//! becoming a dense literal in the plan (and in its text).

use super::{rewrite, Rewrite};
use crate::eval::{evaluate, HostValue};
use crate::graph::Graph;
use crate::op::Op;

/// The largest constant folding may create when it is bigger than every operand.
pub const MAX_GROWN_CONSTANT: usize = 16;

pub fn fold_constants(graph: &Graph) -> Graph {
    rewrite(graph, |b, node| {
        if node.op.is_leaf() || node.operands.is_empty() {
            return Rewrite::Keep;
        }
        let mut values = Vec::with_capacity(node.operands.len());
        let mut largest = 0;
        for &o in &node.operands {
            match &b.node(o).op {
                Op::Constant { data, shape, .. } => {
                    largest = largest.max(shape.size());
                    values.push(HostValue { data, shape });
                }
                _ => return Rewrite::Keep,
            }
        }
        let size = node.ty.shape.size();
        if size > largest && size > MAX_GROWN_CONSTANT {
            return Rewrite::Keep;
        }
        let Some(data) = evaluate(&node.op, &values, &node.ty) else {
            return Rewrite::Keep;
        };
        let folded = Op::Constant {
            data,
            shape: node.ty.shape.clone(),
            weak: node.ty.weak,
        };
        let id = b.push_typed(folded, Vec::new(), node.ty.clone());
        Rewrite::Alias(id)
    })
}
