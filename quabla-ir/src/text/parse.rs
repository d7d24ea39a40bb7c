//! The parser: reads the text format back into a verified [`Graph`].
//!
//! Node names are mapped as written (`%k` may be any number, defined before use); the parsed
//! graph numbers nodes densely. Blank lines and lines starting with `//` are ignored. Every
//! declared type is checked against the op's type rule.

use super::number::parse_f64;
use crate::error::{IrError, Result};
use crate::graph::{Graph, GraphBuilder, NodeId, TensorType};
use crate::op::{BinaryOp, Comparison, LinalgKind, Op, UnaryOp};
use crate::{DType, HostData, Shape};
use std::collections::HashMap;

/// Parses a graph from text.
pub fn parse_graph(text: &str) -> Result<Graph> {
    let mut parser = Parser::default();
    let mut outputs = None;
    for (lineno, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let line_no = lineno + 1;
        if line.is_empty() || line.starts_with("//") {
            continue;
        }
        if outputs.is_some() {
            return Err(err(line_no, "nothing may follow the outputs line"));
        }
        if let Some(rest) = line.strip_prefix("outputs:") {
            outputs = Some((line_no, rest.trim().to_string()));
            continue;
        }
        parser.node_line(line_no, line)?;
    }
    let (line_no, outs) =
        outputs.ok_or_else(|| err(text.lines().count(), "missing outputs line"))?;
    let outputs = parser.outputs(line_no, &outs)?;
    parser
        .builder
        .finish(outputs)
        .map_err(|e| err(line_no, &e.to_string()))
}

fn err(line: usize, message: &str) -> IrError {
    IrError::Parse {
        line,
        message: message.to_string(),
    }
}

#[derive(Default)]
struct Parser {
    builder: GraphBuilder,
    names: HashMap<String, NodeId>,
    used: Vec<bool>,
}

/// Splits on commas that are not nested in brackets.
fn split_top(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '[' | '<' | '(' => depth += 1,
            ']' | '>' | ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        parts.push(cur.trim().to_string());
    }
    parts
}

fn parse_list(line: usize, s: &str) -> Result<Vec<usize>> {
    let inner = s
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .ok_or_else(|| err(line, &format!("expected a list [..], got {s}")))?;
    split_top(inner)
        .iter()
        .map(|x| {
            x.parse()
                .map_err(|_| err(line, &format!("expected an integer, got {x}")))
        })
        .collect()
}

fn parse_bool(line: usize, s: &str) -> Result<bool> {
    match s {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(err(line, &format!("expected true or false, got {s}"))),
    }
}

fn parse_type(line: usize, s: &str) -> Result<TensorType> {
    let inner = s
        .strip_prefix("tensor<")
        .and_then(|s| s.strip_suffix('>'))
        .ok_or_else(|| err(line, &format!("expected tensor<...>, got {s}")))?;
    let parts: Vec<&str> = inner.split('x').collect();
    let (dtype, dims) = parts.split_last().expect("split yields at least one part");
    let dtype =
        DType::from_ir_name(dtype).ok_or_else(|| err(line, &format!("unknown dtype {dtype}")))?;
    let dims: Vec<usize> = dims
        .iter()
        .map(|d| d.parse().map_err(|_| err(line, &format!("bad extent {d}"))))
        .collect::<Result<_>>()?;
    let shape = Shape::new(dims).map_err(|e| err(line, &e.to_string()))?;
    Ok(TensorType::new(dtype, shape))
}

/// Key-value attributes after the operands.
struct Attrs {
    line: usize,
    map: HashMap<String, String>,
    bare: Vec<String>,
}

impl Attrs {
    fn get(&self, key: &str) -> Result<&str> {
        self.map
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| err(self.line, &format!("missing attribute {key}")))
    }

    fn list(&self, key: &str) -> Result<Vec<usize>> {
        parse_list(self.line, self.get(key)?)
    }

    fn usize(&self, key: &str) -> Result<usize> {
        let v = self.get(key)?;
        v.parse()
            .map_err(|_| err(self.line, &format!("{key} must be an integer, got {v}")))
    }

    fn bool(&self, key: &str) -> Result<bool> {
        parse_bool(self.line, self.get(key)?)
    }

    fn shape(&self, key: &str) -> Result<Shape> {
        Shape::new(self.list(key)?).map_err(|e| err(self.line, &e.to_string()))
    }

    fn weak(&self) -> bool {
        self.bare.iter().any(|b| b == "weak")
    }
}

fn op_by_name(name: &str) -> Option<Op> {
    if let Some(u) = UnaryOp::ALL.iter().find(|u| u.name() == name) {
        return Some(Op::Unary(*u));
    }
    if let Some(b) = BinaryOp::ALL.iter().find(|b| b.name() == name) {
        return Some(Op::Binary(*b));
    }
    if let Some(c) = Comparison::ALL.iter().find(|c| c.name() == name) {
        return Some(Op::Compare(*c));
    }
    match name {
        "where" => Some(Op::Where),
        "stop_gradient" => Some(Op::StopGradient),
        "sum" => Some(Op::Sum),
        "mean" => Some(Op::Mean),
        "matmul" => Some(Op::Matmul),
        "solve" => Some(Op::Solve),
        "cholesky" => Some(Op::Cholesky),
        "cholesky_ad" => Some(Op::CholeskyAd),
        _ => None,
    }
}

impl Parser {
    fn operand(&mut self, line: usize, name: &str) -> Result<NodeId> {
        let id = *self
            .names
            .get(name)
            .ok_or_else(|| err(line, &format!("{name} is used before it is defined")))?;
        self.used[id.index()] = true;
        Ok(id)
    }

    fn node_line(&mut self, line: usize, text: &str) -> Result<()> {
        let (lhs, rhs) = text
            .split_once(" = ")
            .ok_or_else(|| err(line, "expected `%k = op(...) : tensor<...>`"))?;
        let name = lhs.trim();
        if !name.starts_with('%') || self.names.contains_key(name) {
            return Err(err(line, &format!("bad or repeated node name {name}")));
        }
        let (body, ty) = rhs
            .rsplit_once(" : ")
            .ok_or_else(|| err(line, "missing ` : tensor<...>`"))?;
        let mut declared = parse_type(line, ty.trim())?;
        let body = body.trim();
        let id = if let Some(attrs) = body
            .strip_prefix("input[")
            .and_then(|b| b.strip_suffix(']'))
        {
            let attrs = self.attrs(line, split_top(attrs))?;
            declared.weak = attrs.weak();
            let input_name = attrs.get("name")?.to_string();
            let op = Op::Input {
                name: input_name,
                ty: declared.clone(),
            };
            self.builder
                .push(op, &[])
                .map_err(|e| err(line, &e.to_string()))?
        } else {
            let open = body
                .find('(')
                .ok_or_else(|| err(line, "expected op(...)"))?;
            let op_name = &body[..open];
            let args = body[open + 1..]
                .strip_suffix(')')
                .ok_or_else(|| err(line, "unbalanced parentheses"))?;
            let args = split_top(args);
            let (operands, rest): (Vec<String>, Vec<String>) =
                args.into_iter().partition(|a| a.starts_with('%'));
            let operands: Vec<NodeId> = operands
                .iter()
                .map(|o| self.operand(line, o))
                .collect::<Result<_>>()?;
            let op = self.build_op(line, op_name, rest, &declared)?;
            let id = self
                .builder
                .push(op, &operands)
                .map_err(|e| err(line, &e.to_string()))?;
            let got = self.builder.ty(id);
            if got.dtype != declared.dtype || got.shape != declared.shape {
                return Err(err(
                    line,
                    &format!("declared type {declared} but the op infers {got}"),
                ));
            }
            id
        };
        self.names.insert(name.to_string(), id);
        self.used.push(false);
        Ok(())
    }

    fn attrs(&self, line: usize, items: Vec<String>) -> Result<Attrs> {
        let mut map = HashMap::new();
        let mut bare = Vec::new();
        for item in items {
            match item.split_once('=') {
                Some((k, v)) => {
                    map.insert(k.trim().to_string(), v.trim().to_string());
                }
                None => bare.push(item),
            }
        }
        Ok(Attrs { line, map, bare })
    }

    fn build_op(
        &self,
        line: usize,
        name: &str,
        rest: Vec<String>,
        declared: &TensorType,
    ) -> Result<Op> {
        let a = self.attrs(line, rest)?;
        let first_bare = || {
            a.bare
                .first()
                .map(String::as_str)
                .ok_or_else(|| err(line, &format!("{name} needs a value")))
        };
        if let Some(op) = op_by_name(name) {
            return Ok(op);
        }
        let op = match name {
            "constant" => {
                let lit = first_bare()?;
                let shape = declared.shape.clone();
                let values: Vec<&str> = if let Some(inner) = lit
                    .strip_prefix("dense<[")
                    .and_then(|l| l.strip_suffix("]>"))
                {
                    inner.split(',').map(str::trim).collect()
                } else {
                    vec![lit]
                };
                if values.len() != shape.size() {
                    return Err(err(
                        line,
                        &format!("constant of type {declared} needs {} values", shape.size()),
                    ));
                }
                let data = if declared.dtype == DType::Bool {
                    HostData::Bool(
                        values
                            .iter()
                            .map(|v| parse_bool(line, v))
                            .collect::<Result<Vec<_>>>()?
                            .into(),
                    )
                } else {
                    let vals = values
                        .iter()
                        .map(|v| parse_f64(v).ok_or_else(|| err(line, &format!("bad number {v}"))))
                        .collect::<Result<Vec<_>>>()?;
                    HostData::from_f64(declared.dtype, vals)
                };
                Op::Constant {
                    data,
                    shape,
                    weak: a.weak(),
                }
            }
            "cast" => {
                let to = first_bare()?;
                let to = DType::from_ir_name(to)
                    .ok_or_else(|| err(line, &format!("unknown dtype {to}")))?;
                Op::Cast { to, weak: a.weak() }
            }
            "powi" => {
                let e = first_bare()?;
                Op::Powi(e.parse().map_err(|_| {
                    err(line, &format!("powi exponent must be an integer, got {e}"))
                })?)
            }
            "sum_axis" => Op::SumAxis {
                axes: a.list("axes")?,
            },
            "mean_axis" => Op::MeanAxis {
                axes: a.list("axes")?,
            },
            "max_axis" => Op::MaxAxis {
                axes: a.list("axes")?,
            },
            "min_axis" => Op::MinAxis {
                axes: a.list("axes")?,
            },
            "cumsum" => Op::Cumsum {
                axis: a.usize("axis")?,
                reverse: a.bool("reverse")?,
            },
            "reshape" => Op::Reshape {
                shape: a.shape("shape")?,
            },
            "broadcast" => Op::Broadcast {
                shape: a.shape("shape")?,
            },
            "transpose" => Op::Transpose {
                perm: a.list("perm")?,
            },
            "concat" => Op::Concat {
                axis: a.usize("axis")?,
            },
            "slice" => Op::Slice {
                starts: a.list("starts")?,
                sizes: a.list("sizes")?,
            },
            "pad_slice" => Op::PadSlice {
                starts: a.list("starts")?,
                shape: a.shape("shape")?,
            },
            "gather" => Op::Gather {
                axis: a.usize("axis")?,
                indices: a.list("indices")?,
            },
            "scatter_add" => Op::ScatterAdd {
                axis: a.usize("axis")?,
                indices: a.list("indices")?,
            },
            "triangular_solve" => Op::TriangularSolve {
                lower: a.bool("lower")?,
                transpose_a: a.bool("transpose_a")?,
                unit_diagonal: a.bool("unit_diagonal")?,
            },
            "linalg" => {
                let kind = a.get("kind")?;
                Op::Linalg(
                    *LinalgKind::ALL
                        .iter()
                        .find(|k| k.name() == kind)
                        .ok_or_else(|| err(line, &format!("unknown linalg kind {kind}")))?,
                )
            }
            "custom" => {
                return Err(err(
                    line,
                    "custom nodes cannot be parsed: their rule graphs are not part of the text",
                ))
            }
            other => return Err(err(line, &format!("unknown op {other}"))),
        };
        Ok(op)
    }

    fn outputs(&mut self, line: usize, text: &str) -> Result<Vec<NodeId>> {
        let inner = text
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .ok_or_else(|| err(line, "outputs must be a list"))?;
        let items = split_top(inner);
        if items.iter().all(|i| i.starts_with('%')) {
            let mut outs = Vec::new();
            for i in &items {
                outs.push(
                    *self
                        .names
                        .get(i.as_str())
                        .ok_or_else(|| err(line, &format!("unknown output {i}")))?,
                );
            }
            return Ok(outs);
        }
        // The shape form: the unused non-input nodes, in order, must carry these shapes.
        let shapes = items
            .iter()
            .map(|s| Shape::new(parse_list(line, s)?).map_err(|e| err(line, &e.to_string())))
            .collect::<Result<Vec<_>>>()?;
        let sinks: Vec<NodeId> = (0..self.builder.len())
            .map(|i| NodeId(i as u32))
            .filter(|id| !self.used[id.index()] && !self.builder.node(*id).op.is_leaf())
            .collect();
        let matches = sinks.len() == shapes.len()
            && sinks
                .iter()
                .zip(&shapes)
                .all(|(id, s)| &self.builder.ty(*id).shape == s);
        if !matches {
            return Err(err(
                line,
                "the outputs line lists shapes that do not match the unused nodes; name the outputs as [%k, ...]",
            ));
        }
        Ok(sinks)
    }
}
