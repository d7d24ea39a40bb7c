//! The printer: one line per node, then the outputs line.

use super::number::format_f64;
use crate::graph::NodeId;
use crate::graph::{Graph, Node};
use crate::op::Op;
use crate::region::RegionKind;
use crate::HostData;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;

/// How the final `outputs:` line is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputStyle {
    /// `outputs: [[2, 3], []]`, the form of `as_text()` (transforms.md §15.3).
    Shapes,
    /// `outputs: [%4, %7]`, the form that parses back to the same graph.
    Refs,
}

/// Prints a graph in the text format.
pub fn print_graph(graph: &Graph, style: OutputStyle) -> String {
    print_with(graph, style, false)
}

/// [`print_graph`] with each node's [`crate::Origin`] as a trailing `# ...` comment (the user's
/// source line, and the derivative rule that made the node): a form for reading, which the
/// parser does not take back.
pub fn print_graph_with_origins(graph: &Graph, style: OutputStyle) -> String {
    print_with(graph, style, true)
}

/// One node's line without indentation or origin: `%7 = div(%5, %6) : f64[3]` (a region
/// node prints its head only).
pub fn node_line(graph: &Graph, id: NodeId) -> String {
    let node = graph.node(id);
    format!("{id} = {} : {}", node_body(node), node.ty)
}

fn print_with(graph: &Graph, style: OutputStyle, origins: bool) -> String {
    let mut out = String::new();
    print_nodes(graph, 0, origins, &mut out);
    let outs: Vec<String> = graph
        .outputs()
        .iter()
        .map(|&o| match style {
            OutputStyle::Shapes => graph.node(o).ty.shape.to_string(),
            OutputStyle::Refs => o.to_string(),
        })
        .collect();
    let _ = writeln!(out, "outputs: [{}]", outs.join(", "));
    out
}

/// The node lines of `graph` at `indent` levels (two spaces each). A region's first node
/// prints the bodies (transforms.md §15.3); its sibling nodes (further outputs of the same
/// call) print `same=%k` instead of repeating them.
fn print_nodes(graph: &Graph, indent: usize, origins: bool, out: &mut String) {
    let pad = "  ".repeat(indent);
    let mut first_of: HashMap<(usize, Vec<NodeId>), usize> = HashMap::new();
    for (i, node) in graph.nodes().iter().enumerate() {
        let body = node_body(node);
        let origin = match node.origin.describe() {
            Some(o) if origins => format!("  # {o}"),
            _ => String::new(),
        };
        let Op::Region(call) = &node.op else {
            let _ = writeln!(out, "{pad}%{i} = {body} : {}{origin}", node.ty);
            continue;
        };
        let key = (Arc::as_ptr(&call.region) as usize, node.operands.clone());
        if let Some(first) = first_of.get(&key) {
            let body = splice_attr(&body, &format!("same=%{first}"));
            let _ = writeln!(out, "{pad}%{i} = {body} : {}{origin}", node.ty);
            continue;
        }
        first_of.insert(key, i);
        let _ = writeln!(out, "{pad}%{i} = {body} : {} {{{origin}", node.ty);
        for (label, g) in call.region.bodies() {
            let _ = writeln!(out, "{pad}  ^{label}:");
            print_nodes(g, indent + 2, origins, out);
            let results: Vec<String> = g.outputs().iter().map(|o| o.to_string()).collect();
            let _ = writeln!(out, "{pad}    yield {}", results.join(", "));
        }
        let _ = writeln!(out, "{pad}}}");
    }
}

/// `op(a, b)` with `attr` appended inside the parentheses.
fn splice_attr(body: &str, attr: &str) -> String {
    let stem = body.strip_suffix(')').unwrap_or(body);
    if stem.ends_with('(') {
        format!("{stem}{attr})")
    } else {
        format!("{stem}, {attr})")
    }
}

fn list(xs: &[usize]) -> String {
    let items: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(", "))
}

fn literal(data: &HostData, i: usize) -> String {
    match data {
        HostData::Bool(v) => v[i].to_string(),
        HostData::I32(v) => v[i].to_string(),
        HostData::I64(v) => v[i].to_string(),
        _ => format_f64(data.get_f64(i)),
    }
}

/// `op(operands, attributes)` for one node.
fn node_body(node: &Node) -> String {
    let mut args: Vec<String> = node.operands.iter().map(|o| o.to_string()).collect();
    if node.remat != 0 {
        args.push("rematerialized".into());
    }
    let weak = |args: &mut Vec<String>, w: bool| {
        if w {
            args.push("weak".into());
        }
    };
    match &node.op {
        Op::Input { name, ty } => {
            let mut attrs = vec![format!("name={name}")];
            weak(&mut attrs, ty.weak);
            return format!("input[{}]", attrs.join(", "));
        }
        Op::Constant {
            data,
            shape,
            weak: w,
        } => {
            if shape.rank() == 0 {
                args.push(literal(data, 0));
            } else {
                let items: Vec<String> = (0..data.len()).map(|i| literal(data, i)).collect();
                args.push(format!("dense<[{}]>", items.join(", ")));
            }
            weak(&mut args, *w);
        }
        Op::Cast { to, weak: w } => {
            args.push(to.ir_name().into());
            weak(&mut args, *w);
        }
        Op::Powi(e) => args.push(e.to_string()),
        Op::DebugPrint {
            format,
            per_example,
        } => {
            args.push(format!("format={}", super::escape(format)));
            if *per_example {
                args.push("per_example=true".into());
            }
        }
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Where
        | Op::StopGradient
        | Op::Matmul
        | Op::Cholesky
        | Op::CholeskyAd => {}
        Op::Reduce { kind, axes } => {
            if !kind.is_whole() {
                args.push(format!("axes={}", list(axes)))
            }
        }
        Op::Cumsum { axis, reverse } => {
            args.push(format!("axis={axis}"));
            args.push(format!("reverse={reverse}"));
        }
        Op::Reshape { shape } | Op::Broadcast { shape } => {
            args.push(format!("shape={}", list(shape.dims())))
        }
        Op::Transpose { perm } => args.push(format!("perm={}", list(perm))),
        Op::Concat { axis } => args.push(format!("axis={axis}")),
        Op::Slice { starts, sizes } => {
            args.push(format!("starts={}", list(starts)));
            args.push(format!("sizes={}", list(sizes)));
        }
        Op::PadSlice { starts, shape } => {
            args.push(format!("starts={}", list(starts)));
            args.push(format!("shape={}", list(shape.dims())));
        }
        Op::Gather { axis, indices } | Op::ScatterAdd { axis, indices } => {
            args.push(format!("axis={axis}"));
            args.push(format!("indices={}", list(indices)));
        }
        // The common form keeps its plain spelling: the flag prints only when set.
        Op::Solve { transpose_a } => {
            if *transpose_a {
                args.push("transpose_a=true".into());
            }
        }
        Op::TriangularSolve {
            lower,
            transpose_a,
            unit_diagonal,
        } => {
            args.push(format!("lower={lower}"));
            args.push(format!("transpose_a={transpose_a}"));
            args.push(format!("unit_diagonal={unit_diagonal}"));
        }
        Op::Linalg(kind) => args.push(format!("kind={}", kind.name())),
        Op::IndexGather { axis, batch } => {
            args.push(format!("axis={axis}"));
            args.push(format!("batch={batch}"));
        }
        Op::IndexScatter { axis, batch, mode } => {
            args.push(format!("axis={axis}"));
            args.push(format!("batch={batch}"));
            args.push(format!("mode={}", mode.name()));
        }
        Op::Custom(call) => {
            args.push(format!("name={}", call.rule.name));
            args.push(format!("output={}", call.output));
            if call.rule.rematerialize {
                args.push("remat".into());
            }
        }
        Op::Region(call) => {
            let region = &call.region;
            match region.kind() {
                RegionKind::Cond { .. } => {}
                RegionKind::Scan(s) => {
                    if region.form().primitive() == "fori_loop" {
                        args.push(format!("lower={}", s.start));
                        args.push(format!("upper={}", s.start + s.length));
                    } else {
                        args.push(format!("length={}", s.length));
                        if s.start != 0 {
                            args.push(format!("start={}", s.start));
                        }
                    }
                    if s.reverse {
                        args.push("reverse".into());
                    }
                    args.push(format!("carries={}", s.n_carry));
                    if s.n_xs > 0 {
                        args.push(format!("xs={}", s.n_xs));
                    }
                }
                RegionKind::While {
                    n_carry, max_trips, ..
                } => {
                    args.push(format!("carries={n_carry}"));
                    if let Some(n) = max_trips {
                        args.push(format!("max_trips={n}"));
                    }
                }
            }
            if region.level() > 0 {
                args.push(format!("level={}", region.level()));
            }
            if region.output_types().len() > 1 {
                args.push(format!("output={}", call.output));
            }
        }
    }
    format!("{}({})", node.op.name(), args.join(", "))
}
