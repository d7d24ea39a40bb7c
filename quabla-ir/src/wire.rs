//! The plan wire format: the versioned binary form in which a frozen [`Plan`] crosses the
//! plugin ABI to backends built as separate libraries, possibly by third parties.
//!
//! This module owns both directions. [`encode_plan`] writes the bytes; [`decode_plan`] reads
//! them back, validating everything: no input makes it panic, allocate more than a small
//! multiple of the input's size, or run for long. Structural problems (magic, version,
//! truncation, unknown codes, references to later nodes, trailing bytes) are reported with
//! the byte offset or the node where they occur (inside a region body, with the body and its
//! region node); the decoded nodes then go through [`Graph::from_parts`] and the regions
//! through [`Region::new`], so every type rule and body contract of the IR is checked as for
//! any other graph. A successful decode is canonical: re-encoding the decoded plan gives back
//! exactly the same bytes.
//!
//! # Layout (version 5)
//!
//! All integers are little-endian. Names used below:
//!
//! | item | encoding |
//! | --- | --- |
//! | `u8`, `u32`, `u64`, `i32` | 1, 4, 8, 4 bytes, little-endian (`i32` two's complement) |
//! | `bool` | one byte, `0` (false) or `1` (true); any other byte is an error |
//! | `index` | `u64` holding an extent, axis, start, size or gather index; at most [`MAX_ELEMENTS`] |
//! | `id` | `u32` node id: the position of a node in the node list, from 0 |
//! | `count` | `u32` number of items that follow |
//! | `list` | `count`, then `count` × `index` |
//! | `string` | `count` (bytes), then that many bytes of UTF-8 |
//! | `dtype` | `u8`: `0` = f32, `1` = f64, `2` = bool (`i1` in the text format), `3` = i32, `4` = i64 |
//! | `shape` | `count` (the rank, at most [`MAX_RANK`]), then one `index` per axis, outermost first; every extent is at least 1, and their product (the element count) is at most [`MAX_ELEMENTS`] |
//! | `type` | `dtype`, `bool` (the weak flag), `shape` |
//!
//! The data is, in order and with nothing after it:
//!
//! ```text
//! magic     8 bytes "QBLAPLAN" (51 42 4C 41 50 4C 41 4E)
//! version   u32, the value of WIRE_VERSION (5)
//! graph     the plan's graph
//! ```
//!
//! A `graph` (the plan's, and each body of a region) is
//!
//! ```text
//! nodes     count, then that many nodes, in topological order
//! outputs   count, then that many ids (each < the node count; repeats allowed)
//! ```
//!
//! Each node is
//!
//! ```text
//! tag       u8, the op (table below)
//! attrs     the op's attributes (table below)
//! operands  count, then that many ids, each less than this node's own id
//! type      type, the node's result type (checked against the op's type rule)
//! ```
//!
//! | tag | op | attributes | operands |
//! | --- | --- | --- | --- |
//! | 0 | `input` | `string` name, `type` (equal to the node's type) | 0 |
//! | 1 | `constant` | `dtype`, `bool` weak, `shape`, then the elements in row-major order: the product of the shape's extents of them (1 for rank 0), as `u32` IEEE 754 bit patterns for f32, `u64` bit patterns for f64 (NaN payloads and signed zeros as they are), `bool` bytes for bool, `u32` and `u64` two's complement for i32 and i64 | 0 |
//! | 2 | `cast` | `dtype` target, `bool` weak | 1 |
//! | 3 | unary | `u8` function: 0 `neg`, 1 `tanh`, 2 `exp`, 3 `log`, 4 `log1p`, 5 `expm1`, 6 `sqrt`, 7 `sin`, 8 `cos`, 9 `erf`, 10 `erfc`, 11 `tan`, 12 `arcsin`, 13 `arccos`, 14 `arctan`, 15 `sinh`, 16 `cosh`, 17 `arcsinh`, 18 `arccosh`, 19 `arctanh`, 20 `log2`, 21 `log10`, 22 `cbrt`, 23 `floor`, 24 `ceil`, 25 `round`, 26 `bitwise_not` | 1 |
//! | 4 | `powi` | `i32` exponent | 1 |
//! | 5 | binary | `u8` function: 0 `add`, 1 `sub`, 2 `mul`, 3 `div`, 4 `pow`, 5 `atan2`, 6 `fmod`, 7 `floor_divide`, 8 `remainder`, 9 `bitwise_and`, 10 `bitwise_or`, 11 `bitwise_xor`, 12 `shift_left`, 13 `shift_right_arithmetic`, 14 `shift_right_logical` | 2 |
//! | 6 | compare | `u8` predicate: 0 `greater`, 1 `greater_equal`, 2 `less`, 3 `less_equal`, 4 `equal`, 5 `not_equal` | 2 |
//! | 7 | `where` | none | 3 |
//! | 8 | `stop_gradient` | none | 1 |
//! | 9 | `sum` | none | 1 |
//! | 10 | `sum_axis` | `list` axes | 1 |
//! | 11 | `mean` | none | 1 |
//! | 12 | `mean_axis` | `list` axes | 1 |
//! | 13 | `max_axis` | `list` axes | 1 |
//! | 14 | `min_axis` | `list` axes | 1 |
//! | 15 | `cumsum` | `index` axis, `bool` reverse | 1 |
//! | 16 | `reshape` | `shape` | 1 |
//! | 17 | `transpose` | `list` perm | 1 |
//! | 18 | `broadcast` | `shape` | 1 |
//! | 19 | `concat` | `index` axis | 1 or more |
//! | 20 | `slice` | `list` starts, `list` sizes | 1 |
//! | 21 | `pad_slice` | `list` starts, `shape` | 1 |
//! | 22 | `gather` | `index` axis, `list` indices | 1 |
//! | 23 | `scatter_add` | `index` axis, `list` indices | 2 |
//! | 24 | `matmul` | none | 2 |
//! | 25 | `solve` | `bool` transpose_a | 2 |
//! | 26 | `cholesky` | none | 1 |
//! | 27 | `cholesky_ad` | none | 2 |
//! | 28 | `triangular_solve` | `bool` lower, `bool` transpose_a, `bool` unit_diagonal | 2 |
//! | 29 | `linalg` | `u8` kind: 0 `det_sign`, 1 `log_abs_det`, 2 `eigh_values`, 3 `eigh_vectors`, 4 `qr_r`, 5 `qr_q`, 6 `qr_q_complete`, 7 `svd_s`, 8 `svd_u`, 9 `svd_u_full`, 10 `svd_vh`, 11 `svd_vh_full` | 1 |
//! | 30 | region (the text name is its form) | see [Regions](#regions) | the region's operands |
//!
//! Every other tag is invalid. Custom-rule nodes (`custom`) have no tag: canonicalization
//! replaces them by their primal graphs before a plan is frozen, and encoding a graph that
//! still holds one is an error. The meaning of each op and attribute, and the rule that gives
//! a node's type, are those of the IR ([`Op`], [`crate::infer_type`]); inputs come before every
//! other node, and the inputs bind to the plan's arguments in order.
//!
//! # Regions
//!
//! A region node is one output of a control-flow [`Region`]; the region's kinds, operands and
//! body contracts are documented in `region.rs` ([`RegionKind`]). Its attributes are
//!
//! ```text
//! output    index, which output of the region the node is
//! source    u8: 0 = the region's definition follows, 1 = the id of an earlier node follows
//! ```
//!
//! The first node of a graph that holds a region defines it; every later node of that graph
//! holding the same region (the sibling outputs of one call, or another call of it) gives the
//! id of that first node instead, and decodes to the same shared region. The decoder accepts
//! only ids of defining nodes, so that the encoding stays canonical. Sharing does not reach
//! across graphs: a body holding a region of an enclosing graph defines it again. A definition
//! is
//!
//! ```text
//! form      u8: 0 cond, 1 fori, 2 fori_jvp, 3 fori_vjp, 4 fori_vjp_jvp, 5 fori_vjp_vjp,
//!           6 while, 7 scan, 8 scan_vjp, 9 scan_vjp_jvp, 10 scan_vjp_vjp
//! level     u8, the derivative levels the region carries
//! kind      u8, then the kind's fields:
//!   0 cond  graph then-branch, graph else-branch
//!   1 scan  index length, index start, bool reverse, u32 carries, u32 constants, u32 xs,
//!           graph body
//!   2 while u32 carries, index max_trips (0: unbounded), graph cond, graph body
//! ```
//!
//! Ids inside a body number that body's nodes. Definitions nest at most [`MAX_REGION_DEPTH`]
//! deep (a region in a body of a top-level region is at depth 1), and every operand and output
//! type of a region is within the limits below.
//!
//! # Versions
//!
//! Any change to this layout or to the code tables above increments [`WIRE_VERSION`]. A reader
//! accepts the versions it knows and rejects every other one (this one reads version 5 only).
//! Version 5 added the integer dtypes (codes 3 and 4) and the integer functions (unary 26,
//! binary 7 to 14). Version 4 gave `while` regions their `max_trips` bound. Version 3 gave `solve` its `transpose_a` flag. Version 2 added region nodes (tag 30) and the
//! `graph` item.
//!
//! # Limits
//!
//! Ranks are at most [`MAX_RANK`], and every `index`, extent and element count is at most
//! [`MAX_ELEMENTS`] (and within the reading platform's `isize`). These bounds keep every
//! computation of the decoder and of the type rules within machine integers, and the time to
//! decode proportional to the size of the data; the encoder refuses graphs beyond them, so
//! everything it writes decodes. The nesting bound [`MAX_REGION_DEPTH`] keeps the decoder's
//! recursion shallow.
//!
//! ```
//! use quabla_ir::wire::{decode_plan, encode_plan};
//! use quabla_ir::{DType, GraphBuilder, Plan, Shape, TensorType, UnaryOp};
//!
//! let mut b = GraphBuilder::new();
//! let x = b.input("x", TensorType::new(DType::F32, Shape::new(vec![3]).unwrap()));
//! let y = b.unary(UnaryOp::Sin, x).unwrap();
//! let plan = Plan::compile(&b.finish(vec![y]).unwrap());
//! let bytes = encode_plan(&plan).unwrap();
//! assert_eq!(&bytes[..8], b"QBLAPLAN");
//! assert_eq!(decode_plan(&bytes).unwrap(), plan);
//! ```

use crate::error::IrError;
use crate::graph::{Graph, Node, NodeId, TensorType};
use crate::op::{BinaryOp, Comparison, LinalgKind, Op, OpKind, ScatterMode, UnaryOp};
use crate::region::{Region, RegionCall, RegionForm, RegionKind, ScanBody};
use crate::{DType, HostData, Plan, Shape};
use std::collections::HashMap;
use std::sync::Arc;
use thiserror::Error;

/// The first eight bytes of every encoded plan.
pub const WIRE_MAGIC: [u8; 8] = *b"QBLAPLAN";

/// The version of the layout this module writes, and the only one it reads.
pub const WIRE_VERSION: u32 = 5;

/// The largest rank a shape may have in the wire format.
pub const MAX_RANK: usize = 1024;

/// The largest extent, index or element count the wire format carries: `2^60 - 1`, so that
/// the byte size of any f64 tensor fits an `i64`.
pub const MAX_ELEMENTS: u64 = (1 << 60) - 1;

/// How deep region definitions may nest (see [Regions](self#regions)).
pub const MAX_REGION_DEPTH: usize = 64;

/// Fewest bytes a node can take: tag, operand count and a rank-0 type.
const MIN_NODE_BYTES: usize = 1 + 4 + 1 + 1 + 4;

/// An error of encoding or decoding a plan.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum WireError {
    /// The data does not start with [`WIRE_MAGIC`].
    #[error("plan wire data: bad magic bytes (expected \"QBLAPLAN\")")]
    BadMagic,
    /// The data was written in a version this build does not read.
    #[error("plan wire data: unsupported wire version {found} (this build reads version {WIRE_VERSION})")]
    UnsupportedVersion { found: u32 },
    /// The data ends inside an item that starts at byte `at`.
    #[error("plan wire data: truncated at byte {at} (reading {what})")]
    Truncated { at: usize, what: &'static str },
    /// An op tag outside the table of the module documentation.
    #[error("plan wire data: unknown op tag {tag} at byte {at}")]
    UnknownTag { tag: u8, at: usize },
    /// A code (dtype, bool, function, predicate, kind) outside its table.
    #[error("plan wire data: {what} at byte {at} has the invalid value {value}")]
    InvalidCode {
        what: &'static str,
        value: u64,
        at: usize,
    },
    /// A value that is well formed but not allowed (zero extent, limits, bad UTF-8).
    #[error("plan wire data: {message} at byte {at}")]
    InvalidValue { at: usize, message: String },
    /// An operand that does not refer to an earlier node.
    #[error("plan wire data: operand {operand} of node {node} is not an earlier node")]
    ForwardReference { node: NodeId, operand: NodeId },
    /// An output that is not a node of the plan.
    #[error("plan wire data: output {output} is not a node (the plan has {nodes} nodes)")]
    UnknownOutput { output: NodeId, nodes: usize },
    /// Bytes left over after the outputs.
    #[error("plan wire data: trailing bytes ({count} after the end of the plan at byte {at})")]
    TrailingBytes { at: usize, count: usize },
    /// The decoded nodes break an invariant of the IR (a type rule, inputs first, ...).
    #[error("plan wire data: {0}")]
    Graph(IrError),
    /// An error inside the body `^label` of the region defined at `node` (whose ids, in the
    /// error, number the body's nodes).
    #[error("plan wire data: in ^{body} of node {node}: {}", .error.detail())]
    InBody {
        node: NodeId,
        body: &'static str,
        error: Box<WireError>,
    },
    /// Encoding met a custom-rule node, which no plan may carry.
    #[error("cannot encode node {node}: custom-rule nodes are never part of a plan (canonicalization replaces them by their primal graphs)")]
    CustomNode { node: NodeId },
    /// Encoding met a graph beyond the limits of the format.
    #[error("cannot encode the graph: {message}")]
    Unencodable { message: String },
}

impl WireError {
    /// The message without its `plan wire data: ` prefix, for nesting in [`WireError::InBody`].
    fn detail(&self) -> String {
        let message = self.to_string();
        match message.strip_prefix("plan wire data: ") {
            Some(rest) => rest.to_string(),
            None => message,
        }
    }
}

type Result<T, E = WireError> = std::result::Result<T, E>;

/// Region kind codes.
mod kind {
    pub const COND: u8 = 0;
    pub const SCAN: u8 = 1;
    pub const WHILE: u8 = 2;
}

/// Region sources: a definition, or the id of the node that defined the region.
mod source {
    pub const DEFINITION: u8 = 0;
    pub const SHARED: u8 = 1;
}

fn dtype_code(d: DType) -> u8 {
    match d {
        DType::F32 => 0,
        DType::F64 => 1,
        DType::Bool => 2,
        DType::I32 => 3,
        DType::I64 => 4,
    }
}

fn dtype_from_code(code: u8) -> Option<DType> {
    [DType::F32, DType::F64, DType::Bool, DType::I32, DType::I64]
        .into_iter()
        .find(|&d| dtype_code(d) == code)
}

/// The largest `index` value on this platform: [`MAX_ELEMENTS`], or less where `isize` is
/// narrower. Two such values always add up without overflow.
const INDEX_LIMIT: u64 = if MAX_ELEMENTS < isize::MAX as u64 {
    MAX_ELEMENTS
} else {
    isize::MAX as u64
};

/// The element count of `dims`, or `None` when it exceeds the limit.
fn element_count(dims: &[usize]) -> Option<usize> {
    let limit = INDEX_LIMIT;
    dims.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d).filter(|&n| n as u64 <= limit)
    })
}

// ---------------------------------------------------------------------------------------------
// Encoding

/// Encodes a plan. Fails only for graphs no plan can hold (custom-rule nodes) or beyond the
/// limits of the format.
pub fn encode_plan(plan: &Plan) -> Result<Vec<u8>> {
    encode_graph(plan.graph())
}

/// Encodes a graph in the plan wire format (see the module documentation).
pub fn encode_graph(graph: &Graph) -> Result<Vec<u8>> {
    let mut w = Writer::default();
    w.out.extend_from_slice(&WIRE_MAGIC);
    w.u32(WIRE_VERSION);
    w.graph(graph, 0)?;
    Ok(w.out)
}

#[derive(Default)]
struct Writer {
    out: Vec<u8>,
}

impl Writer {
    /// A `graph` whose regions are defined at nesting depth `depth`.
    fn graph(&mut self, graph: &Graph, depth: usize) -> Result<()> {
        self.count(graph.len(), "the node count")?;
        // The node that defined each region of this graph, by the region's identity.
        let mut defined: HashMap<*const Region, NodeId> = HashMap::new();
        for (i, node) in graph.nodes().iter().enumerate() {
            let id = NodeId(i as u32);
            self.op(id, &node.op, &mut defined, depth)?;
            self.count(node.operands.len(), "an operand count")?;
            for o in &node.operands {
                self.u32(o.0);
            }
            self.ty(&node.ty)?;
        }
        self.count(graph.outputs().len(), "the output count")?;
        for o in graph.outputs() {
            self.u32(o.0);
        }
        Ok(())
    }

    fn region(
        &mut self,
        id: NodeId,
        call: &RegionCall,
        defined: &mut HashMap<*const Region, NodeId>,
        depth: usize,
    ) -> Result<()> {
        self.u8(OpKind::Region.code());
        self.index(call.output)?;
        let region = &call.region;
        if let Some(first) = defined.get(&Arc::as_ptr(region)) {
            self.u8(source::SHARED);
            self.u32(first.0);
            return Ok(());
        }
        defined.insert(Arc::as_ptr(region), id);
        if depth >= MAX_REGION_DEPTH {
            return Err(WireError::Unencodable {
                message: format!("regions nest deeper than {MAX_REGION_DEPTH} levels"),
            });
        }
        // The decoder checks every type of the region, used by a node or not.
        for t in region.operand_types().iter().chain(region.output_types()) {
            self.shape_limits(&t.shape)?;
        }
        self.u8(source::DEFINITION);
        self.u8(region.form().code());
        self.u8(region.level());
        match region.kind() {
            RegionKind::Cond {
                then_branch,
                else_branch,
            } => {
                self.u8(kind::COND);
                self.graph(then_branch, depth + 1)?;
                self.graph(else_branch, depth + 1)?;
            }
            RegionKind::Scan(s) => {
                self.u8(kind::SCAN);
                self.index(s.length)?;
                self.index(s.start)?;
                self.bool(s.reverse);
                self.count(s.n_carry, "a carry count")?;
                self.count(s.n_const, "a constant count")?;
                self.count(s.n_xs, "an xs count")?;
                self.graph(&s.body, depth + 1)?;
            }
            RegionKind::While {
                n_carry,
                cond,
                body,
                max_trips,
            } => {
                self.u8(kind::WHILE);
                self.count(*n_carry, "a carry count")?;
                // 0 encodes "unbounded": a bound is at least 1.
                self.index(max_trips.unwrap_or(0))?;
                self.graph(cond, depth + 1)?;
                self.graph(body, depth + 1)?;
            }
        }
        Ok(())
    }

    fn u8(&mut self, v: u8) {
        self.out.push(v);
    }

    fn bool(&mut self, v: bool) {
        self.out.push(u8::from(v));
    }

    fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    fn count(&mut self, n: usize, what: &str) -> Result<()> {
        let n = u32::try_from(n).map_err(|_| WireError::Unencodable {
            message: format!("{what} {n} does not fit a u32"),
        })?;
        self.u32(n);
        Ok(())
    }

    fn index(&mut self, v: usize) -> Result<()> {
        if v as u64 > INDEX_LIMIT {
            return Err(WireError::Unencodable {
                message: format!("the value {v} exceeds the limit of {}", INDEX_LIMIT),
            });
        }
        self.u64(v as u64);
        Ok(())
    }

    fn list(&mut self, xs: &[usize]) -> Result<()> {
        self.count(xs.len(), "a list length")?;
        xs.iter().try_for_each(|&x| self.index(x))
    }

    fn shape(&mut self, shape: &Shape) -> Result<()> {
        self.shape_limits(shape)?;
        self.list(shape.dims())
    }

    fn shape_limits(&self, shape: &Shape) -> Result<()> {
        if shape.rank() > MAX_RANK {
            return Err(WireError::Unencodable {
                message: format!(
                    "shape of rank {} exceeds the limit of {MAX_RANK}",
                    shape.rank()
                ),
            });
        }
        if element_count(shape.dims()).is_none() {
            return Err(WireError::Unencodable {
                message: format!("shape {shape} has more than {} elements", INDEX_LIMIT),
            });
        }
        Ok(())
    }

    fn ty(&mut self, ty: &TensorType) -> Result<()> {
        self.u8(dtype_code(ty.dtype));
        self.bool(ty.weak);
        self.shape(&ty.shape)
    }

    fn op(
        &mut self,
        id: NodeId,
        op: &Op,
        defined: &mut HashMap<*const Region, NodeId>,
        depth: usize,
    ) -> Result<()> {
        if let Op::Custom(_) = op {
            return Err(WireError::CustomNode { node: id });
        }
        if !matches!(op, Op::Region(_)) {
            self.u8(op.kind().code());
        }
        match op {
            Op::Input { name, ty } => {
                self.count(name.len(), "an input name length")?;
                self.out.extend_from_slice(name.as_bytes());
                self.ty(ty)?;
            }
            Op::Constant { data, shape, weak } => {
                self.u8(dtype_code(data.dtype()));
                self.bool(*weak);
                self.shape(shape)?;
                if data.len() != shape.size() {
                    // Unreachable for a verified graph; never write data that cannot decode.
                    return Err(WireError::Unencodable {
                        message: format!(
                            "constant {id} of shape {shape} holds {} values",
                            data.len()
                        ),
                    });
                }
                match data {
                    HostData::F32(v) => v.iter().for_each(|x| self.u32(x.to_bits())),
                    HostData::F64(v) => v.iter().for_each(|x| self.u64(x.to_bits())),
                    HostData::Bool(v) => v.iter().for_each(|&x| self.bool(x)),
                    HostData::I32(v) => v.iter().for_each(|&x| self.u32(x as u32)),
                    HostData::I64(v) => v.iter().for_each(|&x| self.u64(x as u64)),
                }
            }
            Op::Cast { to, weak } => {
                self.u8(dtype_code(*to));
                self.bool(*weak);
            }
            Op::Unary(u) => {
                self.u8(u.code());
            }
            Op::Powi(e) => {
                self.out.extend_from_slice(&e.to_le_bytes());
            }
            Op::Binary(b) => {
                self.u8(b.code());
            }
            Op::Compare(c) => {
                self.u8(c.code());
            }
            Op::Where => {}
            Op::StopGradient => {}
            Op::DebugPrint {
                format,
                per_example,
            } => {
                self.count(format.len(), "a format length")?;
                self.out.extend_from_slice(format.as_bytes());
                self.bool(*per_example);
            }
            Op::Reduce { kind, axes } => {
                // The whole-tensor forms reduce every axis of the operand: nothing to write.
                if !kind.is_whole() {
                    self.list(axes)?;
                }
            }
            Op::Cumsum { axis, reverse } => {
                self.index(*axis)?;
                self.bool(*reverse);
            }
            Op::Reshape { shape } => {
                self.shape(shape)?;
            }
            Op::Transpose { perm } => {
                self.list(perm)?;
            }
            Op::Broadcast { shape } => {
                self.shape(shape)?;
            }
            Op::Concat { axis } => {
                self.index(*axis)?;
            }
            Op::Slice { starts, sizes } => {
                self.list(starts)?;
                self.list(sizes)?;
            }
            Op::PadSlice { starts, shape } => {
                self.list(starts)?;
                self.shape(shape)?;
            }
            Op::Gather { axis, indices } => {
                self.index(*axis)?;
                self.list(indices)?;
            }
            Op::ScatterAdd { axis, indices } => {
                self.index(*axis)?;
                self.list(indices)?;
            }
            Op::Matmul => {}
            Op::Solve { transpose_a } => self.bool(*transpose_a),
            Op::Cholesky => {}
            Op::CholeskyAd => {}
            Op::TriangularSolve {
                lower,
                transpose_a,
                unit_diagonal,
            } => {
                self.bool(*lower);
                self.bool(*transpose_a);
                self.bool(*unit_diagonal);
            }
            Op::Linalg(kind) => {
                self.u8(kind.code());
            }
            Op::IndexGather { axis, batch } => {
                self.index(*axis)?;
                self.index(*batch)?;
            }
            Op::IndexScatter { axis, batch, mode } => {
                self.index(*axis)?;
                self.index(*batch)?;
                self.u8(mode.code());
            }
            Op::Custom(_) => return Err(WireError::CustomNode { node: id }),
            Op::Region(call) => self.region(id, call, defined, depth)?,
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding

/// Decodes a plan written by [`encode_plan`]. The plan is frozen as it is (it was optimized
/// before it was encoded); every invariant is verified.
pub fn decode_plan(bytes: &[u8]) -> Result<Plan> {
    decode_graph(bytes).map(Plan::from_graph_unoptimized)
}

/// Decodes and verifies a graph written by [`encode_graph`].
pub fn decode_graph(bytes: &[u8]) -> Result<Graph> {
    let mut r = Reader {
        bytes,
        pos: 0,
        depth: 0,
    };
    r.header()?;
    let graph = r.graph()?;
    if r.remaining() > 0 {
        return Err(WireError::TrailingBytes {
            at: r.pos,
            count: r.remaining(),
        });
    }
    Ok(graph)
}

/// A whole-tensor reduction (`sum`, `mean`) with the axes of its operand, which the wire
/// format leaves implied.
fn whole_reduction_axes(op: Op, operands: &[NodeId], nodes: &[Node]) -> Op {
    match op {
        Op::Reduce { kind, .. } if kind.is_whole() => {
            let rank = operands
                .first()
                .map_or(0, |o| nodes[o.index()].ty.shape.rank());
            Op::Reduce {
                kind,
                axes: (0..rank).collect(),
            }
        }
        other => other,
    }
}

/// Rejects the one combination whose type rule would add beyond the machine integers: a
/// `concat` whose extents along its axis sum past the limit (each extent alone is in range;
/// every other rule only compares or adds two in-range values).
fn guard_type_rule(op: &Op, operands: &[NodeId], nodes: &[Node], at: usize) -> Result<()> {
    if let Op::Concat { axis } = op {
        let mut total: u64 = 0;
        for o in operands {
            if let Some(&d) = nodes[o.index()].ty.shape.dims().get(*axis) {
                total = total.saturating_add(d as u64);
            }
        }
        if total > INDEX_LIMIT {
            return Err(WireError::InvalidValue {
                at,
                message: format!(
                    "concat extents along axis {axis} add up to more than {}",
                    INDEX_LIMIT
                ),
            });
        }
    }
    Ok(())
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// How many region definitions enclose the graph being read.
    depth: usize,
}

impl<'a> Reader<'a> {
    /// A `graph`, verified.
    fn graph(&mut self) -> Result<Graph> {
        let (node_count, capacity) = self.count("the node count", MIN_NODE_BYTES)?;
        // Only the top level reserves ahead: a reservation is bounded by the bytes left, and
        // nested bodies reserving too would multiply that bound by the nesting depth.
        let capacity = if self.depth == 0 { capacity } else { 0 };
        let mut nodes: Vec<Node> = Vec::with_capacity(capacity);
        // Whether each node defines its region (see the module docs on sharing).
        let mut defines: Vec<bool> = Vec::with_capacity(capacity);
        for i in 0..node_count {
            let id = NodeId(i as u32);
            let (op, definition) = self.op(id, &nodes, &defines)?;
            let (operand_count, capacity) = self.count("an operand count", 4)?;
            let mut operands = Vec::with_capacity(capacity);
            for _ in 0..operand_count {
                let operand = NodeId(self.u32("an operand id")?);
                if operand.index() >= i {
                    return Err(WireError::ForwardReference { node: id, operand });
                }
                operands.push(operand);
            }
            let op = whole_reduction_axes(op, &operands, &nodes);
            let at = self.pos;
            let ty = self.ty()?;
            guard_type_rule(&op, &operands, &nodes, at)?;
            nodes.push(Node {
                op,
                operands,
                ty,
                remat: 0,
                origin: Default::default(),
            });
            defines.push(definition);
        }
        let (output_count, capacity) = self.count("the output count", 4)?;
        let mut outputs = Vec::with_capacity(capacity);
        for _ in 0..output_count {
            let output = NodeId(self.u32("an output id")?);
            if output.index() >= nodes.len() {
                return Err(WireError::UnknownOutput {
                    output,
                    nodes: nodes.len(),
                });
            }
            outputs.push(output);
        }
        Graph::from_parts(nodes, outputs).map_err(WireError::Graph)
    }

    /// The attributes of a region node (after its tag); the flag tells whether they define
    /// the region.
    fn region(&mut self, id: NodeId, nodes: &[Node], defines: &[bool]) -> Result<(Op, bool)> {
        let output = self.index("a region output")?;
        let at = self.pos;
        match self.u8("a region source")? {
            source::DEFINITION => {
                let region = Arc::new(self.region_definition(id)?);
                Ok((Op::Region(RegionCall { region, output }), true))
            }
            source::SHARED => {
                let at = self.pos;
                let first = NodeId(self.u32("a region reference")?);
                let region = match (nodes.get(first.index()), defines.get(first.index())) {
                    (Some(Node { op: Op::Region(call), .. }), Some(true)) => call.region.clone(),
                    _ => {
                        return Err(WireError::InvalidValue {
                            at,
                            message: format!(
                                "node {id} shares the region of {first}, which is not an earlier node defining a region"
                            ),
                        })
                    }
                };
                Ok((Op::Region(RegionCall { region, output }), false))
            }
            v => Err(WireError::InvalidCode {
                what: "a region source",
                value: v.into(),
                at,
            }),
        }
    }

    fn region_definition(&mut self, id: NodeId) -> Result<Region> {
        let at = self.pos;
        if self.depth >= MAX_REGION_DEPTH {
            return Err(WireError::InvalidValue {
                at,
                message: format!("regions nest deeper than {MAX_REGION_DEPTH} levels"),
            });
        }
        let form = self.code("a region form", RegionForm::from_code)?;
        let level = self.u8("a region level")?;
        let kind_at = self.pos;
        let kind = match self.u8("a region kind")? {
            kind::COND => RegionKind::Cond {
                then_branch: self.body(id, "then")?,
                else_branch: self.body(id, "else")?,
            },
            kind::SCAN => {
                let length = self.index("a scan length")?;
                let start = self.index("a scan start")?;
                let reverse = self.bool("a reverse flag")?;
                let n_carry = self.u32("a carry count")?;
                let n_const = self.u32("a constant count")?;
                let n_xs = self.u32("an xs count")?;
                let body = self.body(id, "body")?;
                // Region::new compares the counts with the body's inputs; adding them here in
                // u64 keeps that sum within machine integers on every platform.
                let inputs = body.inputs().count() as u64;
                let declared = 1 + u64::from(n_carry) + u64::from(n_const) + u64::from(n_xs);
                if declared != inputs {
                    return Err(WireError::Graph(IrError::verify(format!(
                        "node {id}: the {} body takes {inputs} inputs, not 1 + {n_carry} + {n_const} + {n_xs}",
                        form.name()
                    ))));
                }
                RegionKind::Scan(ScanBody {
                    length,
                    start,
                    reverse,
                    n_carry: n_carry as usize,
                    n_const: n_const as usize,
                    n_xs: n_xs as usize,
                    body,
                })
            }
            kind::WHILE => RegionKind::While {
                n_carry: self.u32("a carry count")? as usize,
                max_trips: Some(self.index("a trip bound")?).filter(|&n| n != 0),
                cond: self.body(id, "cond")?,
                body: self.body(id, "body")?,
            },
            v => {
                return Err(WireError::InvalidCode {
                    what: "a region kind",
                    value: v.into(),
                    at: kind_at,
                })
            }
        };
        let region = Region::new(kind, form, level).map_err(|e| {
            let message = match e {
                IrError::Verify { message } => message,
                other => other.to_string(),
            };
            WireError::Graph(IrError::verify(format!("node {id}: {message}")))
        })?;
        // Stacked types add an axis to body types that are each within the limits.
        for t in region.operand_types().iter().chain(region.output_types()) {
            let dims = t.shape.dims();
            if dims.len() > MAX_RANK || element_count(dims).is_none() {
                return Err(WireError::InvalidValue {
                    at,
                    message: format!(
                        "the {} region of node {id} has the type {t}, beyond the limits of the format",
                        form.name()
                    ),
                });
            }
        }
        Ok(region)
    }

    /// One body `graph` of the region defined at `node`.
    fn body(&mut self, node: NodeId, label: &'static str) -> Result<Arc<Graph>> {
        self.depth += 1;
        let graph = self.graph();
        self.depth -= 1;
        graph.map(Arc::new).map_err(|e| WireError::InBody {
            node,
            body: label,
            error: Box::new(e),
        })
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(WireError::Truncated { at: self.pos, what });
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn header(&mut self) -> Result<()> {
        let n = self.bytes.len().min(WIRE_MAGIC.len());
        if self.bytes[..n] != WIRE_MAGIC[..n] {
            return Err(WireError::BadMagic);
        }
        self.take(WIRE_MAGIC.len(), "the magic bytes")?;
        let version = self.u32("the wire version")?;
        if version != WIRE_VERSION {
            return Err(WireError::UnsupportedVersion { found: version });
        }
        Ok(())
    }

    fn u8(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u32(&mut self, what: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn bool(&mut self, what: &'static str) -> Result<bool> {
        let at = self.pos;
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(WireError::InvalidCode {
                what,
                value: v.into(),
                at,
            }),
        }
    }

    /// A `u8` code looked up by `decode`.
    fn code<T>(&mut self, what: &'static str, decode: impl Fn(u8) -> Option<T>) -> Result<T> {
        let at = self.pos;
        let v = self.u8(what)?;
        decode(v).ok_or(WireError::InvalidCode {
            what,
            value: v.into(),
            at,
        })
    }

    /// A `u32` count of items that take at least `item_bytes` bytes each, with the capacity
    /// to reserve for them: never more than the remaining bytes can hold, so that a corrupted
    /// count cannot make the decoder allocate beyond the input's size (reading the items then
    /// stops at the end of the data).
    fn count(&mut self, what: &'static str, item_bytes: usize) -> Result<(usize, usize)> {
        let count = self.u32(what)? as usize;
        Ok((count, count.min(self.remaining() / item_bytes)))
    }

    /// A `u64` extent, axis, start, size or index, within the limit.
    fn index(&mut self, what: &'static str) -> Result<usize> {
        let at = self.pos;
        let v = self.u64(what)?;
        if v > INDEX_LIMIT {
            return Err(WireError::InvalidValue {
                at,
                message: format!("{what} ({v}) exceeds the limit of {INDEX_LIMIT}"),
            });
        }
        Ok(v as usize)
    }

    fn list(&mut self, what: &'static str) -> Result<Vec<usize>> {
        let (n, capacity) = self.count("a list length", 8)?;
        let mut items = Vec::with_capacity(capacity);
        for _ in 0..n {
            items.push(self.index(what)?);
        }
        Ok(items)
    }

    fn shape(&mut self) -> Result<Shape> {
        let at = self.pos;
        let (rank, _) = self.count("a rank", 8)?;
        if rank > MAX_RANK {
            return Err(WireError::InvalidValue {
                at,
                message: format!("rank {rank} exceeds the limit of {MAX_RANK}"),
            });
        }
        let mut dims = Vec::with_capacity(rank);
        for _ in 0..rank {
            dims.push(self.index("an extent")?);
        }
        if dims.contains(&0) {
            return Err(WireError::InvalidValue {
                at,
                message: format!("shape {dims:?} has a zero extent"),
            });
        }
        if element_count(&dims).is_none() {
            return Err(WireError::InvalidValue {
                at,
                message: format!("shape {dims:?} has more than {} elements", INDEX_LIMIT),
            });
        }
        Shape::new(dims).map_err(|e| WireError::InvalidValue {
            at,
            message: e.to_string(),
        })
    }

    fn dtype(&mut self, what: &'static str) -> Result<DType> {
        self.code(what, dtype_from_code)
    }

    fn ty(&mut self) -> Result<TensorType> {
        let dtype = self.dtype("a dtype")?;
        let weak = self.bool("a weak flag")?;
        let shape = self.shape()?;
        Ok(TensorType { dtype, shape, weak })
    }

    fn string(&mut self, what: &'static str) -> Result<String> {
        let at = self.pos;
        let (n, _) = self.count(what, 1)?;
        let bytes = self.take(n, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| WireError::InvalidValue {
            at,
            message: format!("{what} is not UTF-8"),
        })
    }

    fn constant(&mut self) -> Result<Op> {
        let dtype = self.dtype("a constant dtype")?;
        let weak = self.bool("a weak flag")?;
        let shape = self.shape()?;
        let at = self.pos;
        // The shape check bounds the count; the byte count is checked before allocating.
        let n = shape.size();
        let bytes = n as u128 * dtype.itemsize() as u128;
        if bytes > self.remaining() as u128 {
            return Err(WireError::Truncated {
                at,
                what: "constant elements",
            });
        }
        let raw = self.take(n * dtype.itemsize(), "constant elements")?;
        let data = match dtype {
            DType::F32 => HostData::F32(
                raw.chunks_exact(4)
                    .map(|c| f32::from_bits(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                    .collect(),
            ),
            DType::F64 => HostData::F64(
                raw.chunks_exact(8)
                    .map(|c| {
                        let mut a = [0u8; 8];
                        a.copy_from_slice(c);
                        f64::from_bits(u64::from_le_bytes(a))
                    })
                    .collect(),
            ),
            DType::Bool => {
                if let Some(i) = raw.iter().position(|&b| b > 1) {
                    return Err(WireError::InvalidCode {
                        what: "a bool element",
                        value: raw[i].into(),
                        at: at + i,
                    });
                }
                HostData::Bool(raw.iter().map(|&b| b == 1).collect())
            }
            DType::I32 => HostData::I32(
                raw.chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            DType::I64 => HostData::I64(
                raw.chunks_exact(8)
                    .map(|c| {
                        let mut a = [0u8; 8];
                        a.copy_from_slice(c);
                        i64::from_le_bytes(a)
                    })
                    .collect(),
            ),
        };
        Ok(Op::Constant { data, shape, weak })
    }

    /// One node's op and attributes, and whether it defines a region.
    fn op(&mut self, id: NodeId, nodes: &[Node], defines: &[bool]) -> Result<(Op, bool)> {
        let at = self.pos;
        let t = self.u8("an op tag")?;
        let Some(kind) = OpKind::from_code(t) else {
            return Err(WireError::UnknownTag { tag: t, at });
        };
        let op = match kind {
            OpKind::Input => {
                let name = self.string("an input name")?;
                let ty = self.ty()?;
                Op::Input { name, ty }
            }
            OpKind::Constant => self.constant()?,
            OpKind::Cast => Op::Cast {
                to: self.dtype("a cast dtype")?,
                weak: self.bool("a weak flag")?,
            },
            OpKind::Unary => Op::Unary(self.code("a unary function code", UnaryOp::from_code)?),
            OpKind::Powi => Op::Powi(i32::from_le_bytes(self.array("a powi exponent")?)),
            OpKind::Binary => Op::Binary(self.code("a binary function code", BinaryOp::from_code)?),
            OpKind::Compare => Op::Compare(self.code("a comparison code", Comparison::from_code)?),
            OpKind::Where => Op::Where,
            OpKind::StopGradient => Op::StopGradient,
            OpKind::DebugPrint => Op::DebugPrint {
                format: self.string("a format")?,
                per_example: self.bool("a per-example flag")?,
            },
            OpKind::Sum
            | OpKind::SumAxis
            | OpKind::Mean
            | OpKind::MeanAxis
            | OpKind::MaxAxis
            | OpKind::MinAxis => {
                let kind = kind
                    .reduce_kind()
                    .ok_or(WireError::UnknownTag { tag: t, at })?;
                // The axes of a whole-tensor form are filled in from the operand by
                // `whole_reduction_axes` once the operands are read.
                let axes = if kind.is_whole() {
                    Vec::new()
                } else {
                    self.list("an axis")?
                };
                Op::Reduce { kind, axes }
            }
            OpKind::Cumsum => Op::Cumsum {
                axis: self.index("an axis")?,
                reverse: self.bool("a reverse flag")?,
            },
            OpKind::Reshape => Op::Reshape {
                shape: self.shape()?,
            },
            OpKind::Transpose => Op::Transpose {
                perm: self.list("a permutation entry")?,
            },
            OpKind::Broadcast => Op::Broadcast {
                shape: self.shape()?,
            },
            OpKind::Concat => Op::Concat {
                axis: self.index("an axis")?,
            },
            OpKind::Slice => Op::Slice {
                starts: self.list("a slice start")?,
                sizes: self.list("a slice size")?,
            },
            OpKind::PadSlice => Op::PadSlice {
                starts: self.list("a slice start")?,
                shape: self.shape()?,
            },
            OpKind::Gather => Op::Gather {
                axis: self.index("an axis")?,
                indices: self.list("an index")?,
            },
            OpKind::ScatterAdd => Op::ScatterAdd {
                axis: self.index("an axis")?,
                indices: self.list("an index")?,
            },
            OpKind::Matmul => Op::Matmul,
            OpKind::Solve => Op::Solve {
                transpose_a: self.bool("a transpose_a flag")?,
            },
            OpKind::Cholesky => Op::Cholesky,
            OpKind::CholeskyAd => Op::CholeskyAd,
            OpKind::TriangularSolve => Op::TriangularSolve {
                lower: self.bool("a lower flag")?,
                transpose_a: self.bool("a transpose_a flag")?,
                unit_diagonal: self.bool("a unit_diagonal flag")?,
            },
            OpKind::Linalg => Op::Linalg(self.code("a linalg kind code", LinalgKind::from_code)?),
            OpKind::IndexGather => Op::IndexGather {
                axis: self.index("an axis")?,
                batch: self.index("a batch axis count")?,
            },
            OpKind::IndexScatter => Op::IndexScatter {
                axis: self.index("an axis")?,
                batch: self.index("a batch axis count")?,
                mode: self.code("a scatter mode code", ScatterMode::from_code)?,
            },
            OpKind::Region => return self.region(id, nodes, defines),
            // Custom rules never cross the wire (see the module docs).
            OpKind::Custom => return Err(WireError::UnknownTag { tag: t, at }),
        };
        Ok((op, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_decode() {
        for d in [DType::F32, DType::F64, DType::Bool, DType::I32, DType::I64] {
            assert_eq!(dtype_from_code(dtype_code(d)), Some(d));
        }
    }

    #[test]
    fn element_counts_are_bounded() {
        assert_eq!(element_count(&[]), Some(1));
        assert_eq!(element_count(&[2, 3]), Some(6));
        assert_eq!(element_count(&[1 << 40, 1 << 40]), None);
        assert_eq!(element_count(&[usize::MAX, 2]), None);
    }
}
