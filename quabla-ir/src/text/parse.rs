//! The parser: reads the text format back into a verified [`Graph`].
//!
//! Node names are mapped as written (`%k` may be any number, defined before use); the parsed
//! graph numbers nodes densely. Blank lines and lines starting with `//` are ignored, and so is
//! indentation: the structure of a region comes from its markers alone (a node line ending in
//! `{`, the `^label:` lines, `yield`, `}`). Every declared type is checked against the op's
//! type rule.
//!
//! A region node line opens its bodies; each body is parsed as a graph of its own (its own
//! `%k` names) ending with its `yield`, and the region is checked by [`Region::new`]. The first
//! label says the kind (`^then:` cond, `^cond:` while, `^body:` scan). A sibling line
//! (`same=%k`) names the node that printed the bodies: it shares that node's [`Region`] and must
//! repeat its operands and attributes.

use super::number::parse_f64;
use crate::error::{IrError, Result};
use crate::graph::{Graph, GraphBuilder, NodeId, TensorType};
use crate::op::{BinaryOp, Comparison, LinalgKind, Op, OpKind, ReduceKind, ScatterMode, UnaryOp};
use crate::region::{Region, RegionCall, RegionForm, RegionKind, ScanBody};
// The bound of the wire format also bounds the parser's recursion.
use crate::wire::MAX_REGION_DEPTH;
use crate::{DType, HostData, Shape};
use std::collections::HashMap;
use std::sync::Arc;

/// Parses a graph from text.
pub fn parse_graph(text: &str) -> Result<Graph> {
    let mut lines = Lines::new(text);
    let mut parser = Parser::new(0);
    while let Some((line_no, line)) = lines.next() {
        if let Some(rest) = line.strip_prefix("outputs:") {
            if let Some((extra, _)) = lines.next() {
                return Err(err(extra, "nothing may follow the outputs line"));
            }
            let outputs = parser.outputs(line_no, rest.trim())?;
            return parser
                .builder
                .finish(outputs)
                .map_err(|e| err(line_no, &e.to_string()));
        }
        if let Some(what) = structure_marker(line) {
            return Err(err(line_no, &format!("{what} outside a region")));
        }
        parser.node_line(line_no, line, &mut lines)?;
    }
    Err(err(text.lines().count(), "missing outputs line"))
}

/// The significant lines of a text, trimmed, with their 1-based numbers.
struct Lines<'a> {
    inner: std::iter::Enumerate<std::str::Lines<'a>>,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Lines<'a> {
        Lines {
            inner: text.lines().enumerate(),
        }
    }
}

impl<'a> Iterator for Lines<'a> {
    type Item = (usize, &'a str);

    fn next(&mut self) -> Option<(usize, &'a str)> {
        self.inner.by_ref().find_map(|(i, raw)| {
            let line = raw.trim();
            (!line.is_empty() && !line.starts_with("//")).then_some((i + 1, line))
        })
    }
}

/// Names the region markers (`^label:`, `yield`, `}`) where a node line is expected.
fn structure_marker(line: &str) -> Option<&'static str> {
    if line.starts_with('^') {
        Some("a body label")
    } else if yielded(line).is_some() {
        Some("a yield")
    } else if line == "}" {
        Some("a closing brace")
    } else {
        None
    }
}

fn err(line: usize, message: &str) -> IrError {
    IrError::Parse {
        line,
        message: message.to_string(),
    }
}

struct Parser {
    builder: GraphBuilder,
    names: HashMap<String, NodeId>,
    used: Vec<bool>,
    /// How many regions enclose the graph being parsed (0 for the top level).
    depth: usize,
}

/// The region kind, as the first body label tells it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum BodyKind {
    Cond,
    Scan,
    While,
}

impl BodyKind {
    fn of(kind: &RegionKind) -> BodyKind {
        match kind {
            RegionKind::Cond { .. } => BodyKind::Cond,
            RegionKind::Scan(_) => BodyKind::Scan,
            RegionKind::While { .. } => BodyKind::While,
        }
    }
}

/// The parsed bodies of a region node.
enum Bodies {
    Cond {
        then_branch: Graph,
        else_branch: Graph,
    },
    Scan {
        body: Graph,
    },
    While {
        cond: Graph,
        body: Graph,
    },
}

impl Bodies {
    fn kind(&self) -> BodyKind {
        match self {
            Bodies::Cond { .. } => BodyKind::Cond,
            Bodies::Scan { .. } => BodyKind::Scan,
            Bodies::While { .. } => BodyKind::While,
        }
    }

    /// The region kind; a scan's constants are the body inputs left after the index, the
    /// carries and the `xs` slices.
    fn into_kind(self, line: usize, params: &RegionParams) -> Result<RegionKind> {
        let carries = params.carries.unwrap_or(0);
        Ok(match self {
            Bodies::Cond {
                then_branch,
                else_branch,
            } => RegionKind::Cond {
                then_branch: Arc::new(then_branch),
                else_branch: Arc::new(else_branch),
            },
            Bodies::Scan { body } => {
                let (start, length, reverse) = params.scan.unwrap_or_default();
                let inputs = body.inputs().count();
                let n_const = carries
                    .checked_add(params.xs)
                    .and_then(|n| n.checked_add(1))
                    .and_then(|n| inputs.checked_sub(n))
                    .ok_or_else(|| {
                        err(
                            line,
                            &format!(
                                "the body takes {inputs} inputs, fewer than the index, {carries} carries and {} xs",
                                params.xs
                            ),
                        )
                    })?;
                RegionKind::Scan(ScanBody {
                    length,
                    start,
                    reverse,
                    n_carry: carries,
                    n_const,
                    n_xs: params.xs,
                    body: Arc::new(body),
                })
            }
            Bodies::While { cond, body } => RegionKind::While {
                n_carry: carries,
                cond: Arc::new(cond),
                body: Arc::new(body),
                max_trips: params.max_trips,
            },
        })
    }
}

/// The attributes of a region node line, read for the region's kind (see the printer):
/// `lower=, upper=` for `fori` forms, else `length=` and `start=`; `reverse`, `carries=`, `xs=`
/// for scans; `carries=` and `max_trips=` for while; `level=` for all. `output=` and `same=` belong to the node.
#[derive(Debug, PartialEq)]
struct RegionParams {
    /// `(start, length, reverse)` of a scan.
    scan: Option<(usize, usize, bool)>,
    /// The carries of a scan or a while.
    carries: Option<usize>,
    xs: usize,
    /// The trip bound of a while.
    max_trips: Option<usize>,
    level: u8,
}

impl RegionParams {
    fn of(region: &Region) -> RegionParams {
        let (scan, carries, xs, max_trips) = match region.kind() {
            RegionKind::Cond { .. } => (None, None, 0, None),
            RegionKind::Scan(s) => (
                Some((s.start, s.length, s.reverse)),
                Some(s.n_carry),
                s.n_xs,
                None,
            ),
            RegionKind::While {
                n_carry, max_trips, ..
            } => (None, Some(*n_carry), 0, *max_trips),
        };
        RegionParams {
            scan,
            carries,
            xs,
            max_trips,
            level: region.level(),
        }
    }

    fn read(a: &Attrs, kind: BodyKind, form: RegionForm) -> Result<RegionParams> {
        let fori = form.primitive() == "fori_loop";
        let mut keys = vec!["level", "output", "same"];
        let mut flags: Vec<&str> = Vec::new();
        match kind {
            BodyKind::Cond => {}
            BodyKind::Scan if fori => keys.extend(["lower", "upper", "carries", "xs"]),
            BodyKind::Scan => keys.extend(["length", "start", "carries", "xs"]),
            BodyKind::While => keys.extend(["carries", "max_trips"]),
        }
        if kind == BodyKind::Scan {
            flags.push("reverse");
        }
        let unknown = a
            .map
            .keys()
            .map(String::as_str)
            .find(|k| !keys.contains(k))
            .or_else(|| {
                a.bare
                    .iter()
                    .map(String::as_str)
                    .find(|f| !flags.contains(f))
            });
        if let Some(u) = unknown {
            return Err(err(
                a.line,
                &format!("unknown attribute {u} of a {} region", form.name()),
            ));
        }
        let optional = |key: &str| -> Result<usize> {
            match a.map.get(key) {
                Some(_) => a.usize(key),
                None => Ok(0),
            }
        };
        let scan = match kind {
            BodyKind::Scan if fori => {
                let (lower, upper) = (a.usize("lower")?, a.usize("upper")?);
                let length = upper
                    .checked_sub(lower)
                    .ok_or_else(|| err(a.line, &format!("upper={upper} is below lower={lower}")))?;
                Some((lower, length, a.bare.iter().any(|f| f == "reverse")))
            }
            BodyKind::Scan => Some((
                optional("start")?,
                a.usize("length")?,
                a.bare.iter().any(|f| f == "reverse"),
            )),
            _ => None,
        };
        let carries = match kind {
            BodyKind::Cond => None,
            BodyKind::Scan | BodyKind::While => Some(a.usize("carries")?),
        };
        let level = match a.map.get("level") {
            Some(v) => v.parse().map_err(|_| {
                err(
                    a.line,
                    &format!("level must be an integer below 256, got {v}"),
                )
            })?,
            None => 0,
        };
        let max_trips = match a.map.get("max_trips") {
            Some(_) => Some(a.usize("max_trips")?),
            None => None,
        };
        Ok(RegionParams {
            scan,
            carries,
            xs: optional("xs")?,
            max_trips,
            level,
        })
    }
}

/// The bodies of a region whose node line is `open_line`, up to and including its `}`.
fn parse_bodies(open_line: usize, lines: &mut Lines<'_>, depth: usize) -> Result<Bodies> {
    let (line, first) = label(open_line, lines, None)?;
    let bodies = match first {
        "then" => {
            let then_branch = parse_body(line, lines, depth)?;
            let (line, _) = label(open_line, lines, Some("else"))?;
            let else_branch = parse_body(line, lines, depth)?;
            Bodies::Cond {
                then_branch,
                else_branch,
            }
        }
        "cond" => {
            let cond = parse_body(line, lines, depth)?;
            let (line, _) = label(open_line, lines, Some("body"))?;
            let body = parse_body(line, lines, depth)?;
            Bodies::While { cond, body }
        }
        "body" => Bodies::Scan {
            body: parse_body(line, lines, depth)?,
        },
        other => {
            let message = format!(
                "unknown body label ^{other}: (a region starts with ^then:, ^cond: or ^body:)"
            );
            return Err(err(line, &message));
        }
    };
    match lines.next() {
        Some((_, "}")) => Ok(bodies),
        Some((line, text)) => Err(err(
            line,
            &format!("expected `}}` closing the region of line {open_line}, got {text}"),
        )),
        None => Err(err(open_line, "the region is never closed with `}`")),
    }
}

/// The next line, which must be a body label (`^name:`, and `^want:` when given).
fn label<'a>(
    open_line: usize,
    lines: &mut Lines<'a>,
    want: Option<&str>,
) -> Result<(usize, &'a str)> {
    let expected = want.map_or("a body label".to_string(), |w| format!("^{w}:"));
    let (line, text) = lines
        .next()
        .ok_or_else(|| err(open_line, &format!("the region ends before {expected}")))?;
    let name = text
        .strip_prefix('^')
        .and_then(|t| t.strip_suffix(':'))
        .filter(|name| want.is_none_or(|w| w == *name))
        .ok_or_else(|| err(line, &format!("expected {expected}, got {text}")))?;
    Ok((line, name))
}

/// One body: node lines in a namespace of their own, up to its `yield`.
fn parse_body(label_line: usize, lines: &mut Lines<'_>, depth: usize) -> Result<Graph> {
    let mut parser = Parser::new(depth);
    while let Some((line, text)) = lines.next() {
        if let Some(results) = yielded(text) {
            let outputs = split_top(results)
                .iter()
                .map(|r| {
                    parser
                        .names
                        .get(r.as_str())
                        .copied()
                        .ok_or_else(|| err(line, &format!("yield of unknown node {r}")))
                })
                .collect::<Result<Vec<_>>>()?;
            return parser
                .builder
                .finish(outputs)
                .map_err(|e| err(line, &e.to_string()));
        }
        if let Some(what) =
            structure_marker(text).or(text.starts_with("outputs:").then_some("an outputs line"))
        {
            return Err(err(
                line,
                &format!("{what} before the yield of the body labelled on line {label_line}"),
            ));
        }
        parser.node_line(line, text, lines)?;
    }
    Err(err(label_line, "the body never yields"))
}

/// The results of a `yield` line (`yield %a, %b`), if it is one.
fn yielded(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("yield")?;
    (rest.is_empty() || rest.starts_with(' ')).then(|| rest.trim())
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

    /// A flag printed only when set: `false` when absent.
    fn flag(&self, key: &str) -> Result<bool> {
        match self.map.get(key) {
            Some(v) => parse_bool(self.line, v),
            None => Ok(false),
        }
    }

    fn shape(&self, key: &str) -> Result<Shape> {
        Shape::new(self.list(key)?).map_err(|e| err(self.line, &e.to_string()))
    }

    fn weak(&self) -> bool {
        self.bare.iter().any(|b| b == "weak")
    }
}

impl Parser {
    fn new(depth: usize) -> Parser {
        Parser {
            builder: GraphBuilder::new(),
            names: HashMap::new(),
            used: Vec::new(),
            depth,
        }
    }

    fn operand(&mut self, line: usize, name: &str) -> Result<NodeId> {
        let id = *self
            .names
            .get(name)
            .ok_or_else(|| err(line, &format!("{name} is used before it is defined")))?;
        self.used[id.index()] = true;
        Ok(id)
    }

    /// One node line; a region line also consumes its bodies from `lines`.
    fn node_line(&mut self, line: usize, text: &str, lines: &mut Lines<'_>) -> Result<()> {
        let (lhs, rhs) = text
            .split_once(" = ")
            .ok_or_else(|| err(line, "expected `%k = op(...) : tensor<...>`"))?;
        let name = lhs.trim();
        if !name.starts_with('%') || self.names.contains_key(name) {
            return Err(err(line, &format!("bad or repeated node name {name}")));
        }
        let (rhs, opens) = match rhs.trim_end().strip_suffix('{') {
            Some(r) => (r.trim_end(), true),
            None => (rhs, false),
        };
        let (body, ty) = rhs
            .rsplit_once(" : ")
            .ok_or_else(|| err(line, "missing ` : tensor<...>`"))?;
        let mut declared = parse_type(line, ty.trim())?;
        let body = body.trim();
        let no_bodies = |op: &str| {
            err(
                line,
                &format!("{op} has no bodies; only region nodes end with `{{`"),
            )
        };
        let id = if let Some(attrs) = body
            .strip_prefix("input[")
            .and_then(|b| b.strip_suffix(']'))
        {
            if opens {
                return Err(no_bodies("input"));
            }
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
            let mut args = split_top(args);
            let remat = args.iter().any(|a| a == "rematerialized");
            args.retain(|a| a != "rematerialized");
            let (operands, rest): (Vec<String>, Vec<String>) =
                args.into_iter().partition(|a| a.starts_with('%'));
            let operands: Vec<NodeId> = operands
                .iter()
                .map(|o| self.operand(line, o))
                .collect::<Result<_>>()?;
            let op = match RegionForm::from_name(op_name) {
                Some(form) => self.region_op(line, form, &operands, rest, opens, lines)?,
                None if opens => return Err(no_bodies(op_name)),
                None => self.build_op(line, op_name, rest, &operands, &declared)?,
            };
            let previous = self.builder.set_remat(u32::from(remat));
            let pushed = self.builder.push(op, &operands);
            self.builder.set_remat(previous);
            let id = pushed.map_err(|e| err(line, &e.to_string()))?;
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

    /// The op of a region node line: a new region built from the bodies that follow, or, for
    /// a sibling (`same=%k`), the region of `%k`.
    fn region_op(
        &self,
        line: usize,
        form: RegionForm,
        operands: &[NodeId],
        rest: Vec<String>,
        opens: bool,
        lines: &mut Lines<'_>,
    ) -> Result<Op> {
        let attrs = self.attrs(line, rest)?;
        let region = match attrs.map.get("same") {
            Some(first) => {
                if opens {
                    return Err(err(
                        line,
                        "a sibling (same=%k) shares the bodies of %k and has none of its own",
                    ));
                }
                self.sibling_region(line, first, form, operands, &attrs)?
            }
            None => {
                if !opens {
                    return Err(err(
                        line,
                        &format!(
                            "{} needs its bodies (a line ending in `{{`) or same=%k",
                            form.name()
                        ),
                    ));
                }
                if self.depth >= MAX_REGION_DEPTH {
                    return Err(err(
                        line,
                        &format!("regions nest deeper than {MAX_REGION_DEPTH} levels"),
                    ));
                }
                let bodies = parse_bodies(line, lines, self.depth + 1)?;
                let params = RegionParams::read(&attrs, bodies.kind(), form)?;
                let kind = bodies.into_kind(line, &params)?;
                let region =
                    Region::new(kind, form, params.level).map_err(|e| err(line, &e.to_string()))?;
                Arc::new(region)
            }
        };
        let n_outputs = region.output_types().len();
        let output = match attrs.map.get("output") {
            Some(_) => attrs.usize("output")?,
            None if n_outputs > 1 => {
                return Err(err(
                    line,
                    &format!(
                        "the {} region has {n_outputs} outputs; name this node's with output=k",
                        form.name()
                    ),
                ))
            }
            None => 0,
        };
        Ok(Op::Region(RegionCall { region, output }))
    }

    /// The region of the node `first` names, which a sibling line must describe exactly: same
    /// form, operands and region attributes.
    fn sibling_region(
        &self,
        line: usize,
        first: &str,
        form: RegionForm,
        operands: &[NodeId],
        attrs: &Attrs,
    ) -> Result<Arc<Region>> {
        let id = *self
            .names
            .get(first)
            .ok_or_else(|| err(line, &format!("same={first} names no earlier node")))?;
        let node = self.builder.node(id);
        let Op::Region(call) = &node.op else {
            return Err(err(
                line,
                &format!("same={first} is not a region node ({})", node.op.name()),
            ));
        };
        let region = &call.region;
        if region.form() != form {
            return Err(err(
                line,
                &format!(
                    "a {} node cannot share the {} region of {first}",
                    form.name(),
                    region.form().name()
                ),
            ));
        }
        if node.operands != operands {
            return Err(err(
                line,
                &format!("a sibling of {first} must take the same operands"),
            ));
        }
        let kind = BodyKind::of(region.kind());
        if RegionParams::read(attrs, kind, form)? != RegionParams::of(region) {
            return Err(err(
                line,
                &format!("the attributes differ from those of the region of {first}"),
            ));
        }
        Ok(region.clone())
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

    /// The op of a node line named `name` with the attributes `rest`, looked up in the op
    /// table; `operands` are the node's operands (a whole-tensor reduction lists their axes).
    fn build_op(
        &self,
        line: usize,
        name: &str,
        rest: Vec<String>,
        operands: &[NodeId],
        declared: &TensorType,
    ) -> Result<Op> {
        let kind =
            OpKind::from_text_name(name).ok_or_else(|| err(line, &format!("unknown op {name}")))?;
        let a = self.attrs(line, rest)?;
        let allowed = kind.attribute_names();
        if let Some(key) = a.map.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(err(line, &format!("{name} has no attribute {key}")));
        }
        let first_bare = || {
            a.bare
                .first()
                .map(String::as_str)
                .ok_or_else(|| err(line, &format!("{name} needs a value")))
        };
        let operand_rank = || {
            operands
                .first()
                .map(|&o| self.builder.ty(o).shape.rank())
                .ok_or_else(|| err(line, &format!("{name} needs an operand")))
        };
        let reduce = |kind: ReduceKind| -> Result<Op> {
            let axes = if kind.is_whole() {
                (0..operand_rank()?).collect()
            } else {
                a.list("axes")?
            };
            Ok(Op::Reduce { kind, axes })
        };
        let op = match kind {
            OpKind::Unary => Op::Unary(UnaryOp::from_name(name).ok_or_else(|| err(line, name))?),
            OpKind::Binary => Op::Binary(BinaryOp::from_name(name).ok_or_else(|| err(line, name))?),
            OpKind::Compare => {
                Op::Compare(Comparison::from_name(name).ok_or_else(|| err(line, name))?)
            }
            OpKind::Where => Op::Where,
            OpKind::StopGradient => Op::StopGradient,
            OpKind::DebugPrint => Op::DebugPrint {
                format: super::unescape(a.get("format")?)
                    .ok_or_else(|| err(line, "a debug_print format has a bad escape"))?,
                per_example: a.flag("per_example")?,
            },
            OpKind::Matmul => Op::Matmul,
            OpKind::Cholesky => Op::Cholesky,
            OpKind::CholeskyAd => Op::CholeskyAd,
            OpKind::Sum
            | OpKind::SumAxis
            | OpKind::Mean
            | OpKind::MeanAxis
            | OpKind::MaxAxis
            | OpKind::MinAxis => reduce(kind.reduce_kind().ok_or_else(|| err(line, name))?)?,
            OpKind::Constant => {
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
                } else if declared.dtype.is_integer() {
                    let (lo, hi) = (declared.dtype.int_min(), declared.dtype.int_max());
                    let vals = values
                        .iter()
                        .map(|v| {
                            v.parse::<i64>()
                                .ok()
                                .filter(|x| (lo..=hi).contains(x))
                                .ok_or_else(|| {
                                    err(line, &format!("bad {} integer {v}", declared.dtype))
                                })
                        })
                        .collect::<Result<Vec<_>>>()?;
                    HostData::from_i64(declared.dtype, vals)
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
            OpKind::Cast => {
                let to = first_bare()?;
                let to = DType::from_ir_name(to)
                    .ok_or_else(|| err(line, &format!("unknown dtype {to}")))?;
                Op::Cast { to, weak: a.weak() }
            }
            OpKind::Powi => {
                let e = first_bare()?;
                Op::Powi(e.parse().map_err(|_| {
                    err(line, &format!("powi exponent must be an integer, got {e}"))
                })?)
            }
            OpKind::Cumsum => Op::Cumsum {
                axis: a.usize("axis")?,
                reverse: a.bool("reverse")?,
            },
            OpKind::Reshape => Op::Reshape {
                shape: a.shape("shape")?,
            },
            OpKind::Broadcast => Op::Broadcast {
                shape: a.shape("shape")?,
            },
            OpKind::Transpose => Op::Transpose {
                perm: a.list("perm")?,
            },
            OpKind::Concat => Op::Concat {
                axis: a.usize("axis")?,
            },
            OpKind::Slice => Op::Slice {
                starts: a.list("starts")?,
                sizes: a.list("sizes")?,
            },
            OpKind::PadSlice => Op::PadSlice {
                starts: a.list("starts")?,
                shape: a.shape("shape")?,
            },
            OpKind::Gather => Op::Gather {
                axis: a.usize("axis")?,
                indices: a.list("indices")?,
            },
            OpKind::ScatterAdd => Op::ScatterAdd {
                axis: a.usize("axis")?,
                indices: a.list("indices")?,
            },
            OpKind::Solve => Op::Solve {
                transpose_a: a.flag("transpose_a")?,
            },
            OpKind::TriangularSolve => Op::TriangularSolve {
                lower: a.bool("lower")?,
                transpose_a: a.bool("transpose_a")?,
                unit_diagonal: a.bool("unit_diagonal")?,
            },
            OpKind::IndexGather => Op::IndexGather {
                axis: a.usize("axis")?,
                batch: a.usize("batch")?,
            },
            OpKind::IndexScatter => {
                let mode = a.get("mode")?;
                Op::IndexScatter {
                    axis: a.usize("axis")?,
                    batch: a.usize("batch")?,
                    mode: ScatterMode::from_name(mode)
                        .ok_or_else(|| err(line, &format!("unknown scatter mode {mode}")))?,
                }
            }
            OpKind::Linalg => {
                let kind = a.get("kind")?;
                Op::Linalg(
                    LinalgKind::from_name(kind)
                        .ok_or_else(|| err(line, &format!("unknown linalg kind {kind}")))?,
                )
            }
            OpKind::Custom => {
                return Err(err(
                    line,
                    "custom nodes cannot be parsed: their rule graphs are not part of the text",
                ))
            }
            // Input lines and region lines are read by `node_line` before this point.
            OpKind::Input | OpKind::Region => {
                return Err(err(line, &format!("{name} cannot appear here")))
            }
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
