//! Common-subexpression elimination: nodes with the same op, attributes and operands are
//! merged. The op's equality covers every attribute and the weak flag of source ops, and the
//! node type follows from op and operands, so `(op, operands)` is the key, with the
//! rematerialization tag: a recomputation never merges with the forward value it repeats. Constants are
//! left to [`super::dedup_constants`]; inputs and effects (two `debug_print`s of one value print
//! twice) are never merged.

use super::{rewrite, Rewrite};
use crate::graph::{Graph, NodeId};
use crate::op::Op;
use std::collections::HashMap;

pub fn cse(graph: &Graph) -> Graph {
    let mut seen: HashMap<(Op, Vec<NodeId>, u32), NodeId> = HashMap::new();
    rewrite(graph, |b, node| {
        if node.op.is_leaf() || node.op.is_effect() {
            return Rewrite::Keep;
        }
        let key = (node.op.clone(), node.operands.clone(), node.remat);
        match seen.get(&key) {
            Some(&id) => Rewrite::Alias(id),
            None => {
                seen.insert(key, NodeId(b.len() as u32));
                Rewrite::Keep
            }
        }
    })
}
