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

/// A string attribute as one text token: characters that the line syntax gives a meaning
/// (spaces, commas, brackets, quotes, `=`, `:`, `%`, `\`) and every non-ASCII or control
/// character become `\u{hex}`.
pub(crate) fn escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "{}_.-!?'+*/^&|~@$;".contains(c) {
                c.to_string()
            } else {
                format!("\\u{{{:x}}}", c as u32)
            }
        })
        .collect()
}

/// The inverse of [`escape`]; `None` for a malformed escape.
pub(crate) fn unescape(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let tail = rest[at..].strip_prefix("\\u{")?;
        let end = tail.find('}')?;
        out.push(char::from_u32(u32::from_str_radix(&tail[..end], 16).ok()?)?);
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Some(out)
}
pub use print::{node_line, print_graph, print_graph_with_origins, OutputStyle};
