//! Constant deduplication: constants with the same dtype, shape, weak flag and bit pattern are
//! merged (`0.0` and `-0.0` stay apart; identical NaN payloads merge), by the bitwise equality
//! of [`crate::HostData`].

use super::{rewrite, Rewrite};
use crate::graph::{Graph, NodeId};
use crate::op::Op;
use std::collections::HashMap;

pub fn dedup_constants(graph: &Graph) -> Graph {
    let mut seen: HashMap<Op, NodeId> = HashMap::new();
    rewrite(graph, |b, node| {
        if !matches!(node.op, Op::Constant { .. }) {
            return Rewrite::Keep;
        }
        match seen.get(&node.op) {
            Some(&id) => Rewrite::Alias(id),
            None => {
                seen.insert(node.op.clone(), NodeId(b.len() as u32));
                Rewrite::Keep
            }
        }
    })
}
