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

mod number;
mod parse;
mod print;

pub use number::{format_f64, parse_f64};
pub use parse::parse_graph;
pub use print::{print_graph, OutputStyle};
