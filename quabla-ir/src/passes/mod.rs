//! Plan compilation passes, run in the order of transforms.md §17: dead-code elimination,
//! canonicalization, constant folding, constant deduplication, common-subexpression
//! elimination and a final pruning. Each pass builds a new graph; in debug and test builds the
//! verifier checks every result.

mod canonicalize;
mod cse;
mod dce;
mod dedup;
mod fold;

pub use canonicalize::canonicalize;
pub use cse::cse;
pub use dce::dce;
pub use dedup::dedup_constants;
pub use fold::fold_constants;

use crate::graph::{Graph, GraphBuilder, Node, NodeId};

/// A pass by name, as the file tests select them.
pub fn by_name(name: &str) -> Option<fn(&Graph) -> Graph> {
    Some(match name {
        "dce" => dce,
        "canonicalize" => canonicalize,
        "fold" => fold_constants,
        "dedup" => dedup_constants,
        "cse" => cse,
        "pipeline" => run_all,
        _ => return None,
    })
}

/// Every pass in order (transforms.md §17).
pub fn run_all(graph: &Graph) -> Graph {
    let g = dce(graph);
    let g = canonicalize(&g);
    let g = fold_constants(&g);
    let g = dedup_constants(&g);
    let g = cse(&g);
    dce(&g)
}

/// What a rewriting sweep does with one node.
pub(crate) enum Rewrite {
    /// Append the node (with remapped operands) unchanged.
    Keep,
    /// Use an existing node of the new graph instead.
    Alias(NodeId),
}

/// Rebuilds `graph` front to back. `decide` sees each node with its operands already remapped
/// into the new graph and may append replacement nodes to the builder before answering.
pub(crate) fn rewrite(
    graph: &Graph,
    mut decide: impl FnMut(&mut GraphBuilder, &Node) -> Rewrite,
) -> Graph {
    let mut b = GraphBuilder::new();
    let mut remap: Vec<NodeId> = Vec::with_capacity(graph.len());
    for node in graph.nodes() {
        let node = Node {
            op: node.op.clone(),
            operands: node.operands.iter().map(|o| remap[o.index()]).collect(),
            ty: node.ty.clone(),
            remat: node.remat,
            origin: node.origin,
        };
        // Replacement nodes a rule appends inherit the tag and origin of the node they replace.
        let previous = b.set_remat(node.remat);
        let previous_origin = b.set_origin(node.origin);
        let id = match decide(&mut b, &node) {
            Rewrite::Alias(id) => id,
            Rewrite::Keep => b.push_node(node),
        };
        b.set_remat(previous);
        b.set_origin(previous_origin);
        remap.push(id);
    }
    let outputs = graph.outputs().iter().map(|o| remap[o.index()]).collect();
    b.finish_unchecked(outputs)
}
