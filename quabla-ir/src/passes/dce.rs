//! Dead-code elimination: drops every node the outputs do not reach. Inputs always stay, since
//! they are the plan's signature, and so do effects (`debug_print`) with what they read.

use crate::graph::{Graph, GraphBuilder, Node, NodeId};
use crate::op::Op;

pub fn dce(graph: &Graph) -> Graph {
    let mut live = vec![false; graph.len()];
    for &o in graph.outputs() {
        live[o.index()] = true;
    }
    for i in (0..graph.len()).rev() {
        let node = graph.node(NodeId(i as u32));
        if matches!(node.op, Op::Input { .. }) || node.op.is_effect() {
            live[i] = true;
        }
        if live[i] {
            for o in &node.operands {
                live[o.index()] = true;
            }
        }
    }
    let mut b = GraphBuilder::new();
    let mut remap = vec![NodeId(u32::MAX); graph.len()];
    for (i, node) in graph.nodes().iter().enumerate() {
        if live[i] {
            let mut node: Node = node.clone();
            node.operands = node.operands.iter().map(|o| remap[o.index()]).collect();
            remap[i] = b.push_node(node);
        }
    }
    let outputs = graph.outputs().iter().map(|o| remap[o.index()]).collect();
    b.finish_unchecked(outputs)
}
