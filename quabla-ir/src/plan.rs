//! Frozen plans: the graph a backend compiles and runs, after every pass of transforms.md §17.

use crate::graph::{Graph, NodeId, TensorType};
use crate::passes;
use crate::text::{print_graph, OutputStyle};
use std::sync::Arc;

/// A frozen, shared plan with named inputs (pytree paths) and ordered outputs. Cloning is
/// cheap; a plan never changes once compiled.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    graph: Arc<Graph>,
}

impl Plan {
    /// Runs every pass over `graph` and freezes the result.
    pub fn compile(graph: &Graph) -> Plan {
        Plan {
            graph: Arc::new(passes::run_all(graph)),
        }
    }

    /// Freezes a graph as it is, without passes (for backends' own tests of single ops).
    pub fn from_graph_unoptimized(graph: Graph) -> Plan {
        Plan {
            graph: Arc::new(graph),
        }
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Input names and types, in binding order.
    pub fn inputs(&self) -> Vec<(NodeId, &str, &TensorType)> {
        self.graph.inputs().collect()
    }

    pub fn input_names(&self) -> Vec<&str> {
        self.graph.inputs().map(|(_, n, _)| n).collect()
    }

    /// Output types in order.
    pub fn output_types(&self) -> Vec<&TensorType> {
        self.graph
            .outputs()
            .iter()
            .map(|&o| &self.graph.node(o).ty)
            .collect()
    }

    /// The text of transforms.md §15.3 (`outputs:` lists shapes).
    pub fn as_text(&self) -> String {
        print_graph(&self.graph, OutputStyle::Shapes)
    }

    /// [`Plan::as_text`] with each node's origin (source line, derivative rule) as a trailing
    /// comment.
    pub fn as_text_with_origins(&self) -> String {
        crate::text::print_graph_with_origins(&self.graph, OutputStyle::Shapes)
    }
}
