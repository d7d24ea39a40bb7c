//! The text format of graphs and plans (transforms.md §15.3): a printer, and a parser that
//! reads it back (used by the pass file tests and the round-trip property tests).
//!
//! Two forms of the final line exist. `as_text()` prints the spec's form, the output *shapes*
//! (`outputs: [[2, 3], []]`). The reference form names the output *nodes*
//! (`outputs: [%4, %7]`) and is what round trips exactly. The parser reads both: for the shape
//! form it takes the nodes nobody uses, in order, which is exact for every plan after
//! dead-code elimination whose outputs are not also used inside the graph.
//!
//! Our choices beyond §15.3: weak inputs and weak casts print a trailing `weak`
//! (`input[name=x, weak]`, `cast(%0, f64, weak)`), like weak constants.
//!
//! Region nodes print their bodies as §15.3 says, with these attributes after the operands:
//! `lower=, upper=` for the `fori` forms, else `length=` (and `start=` when not 0); `reverse`;
//! `carries=`; `xs=` when not 0; `level=` when not 0; `output=` when the region has several
//! outputs. Each further node of the same call (same region, same operands) prints
//! `same=%k`, naming the node that printed the bodies, and no bodies; it parses back to the
//! same shared region. A scan's constants are the body inputs left after the index, the
//! carries and the `xs`. Two calls of one region on different operands print as two regions,
//! so the text keeps their values but not their sharing (the wire format keeps both).

mod number;
mod parse;
mod print;

pub use number::{format_f64, parse_f64};
pub use parse::parse_graph;
pub use print::{node_line, print_graph, print_graph_with_origins, OutputStyle};
