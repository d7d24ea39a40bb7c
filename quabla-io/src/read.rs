//! The reader of file format v1 (numerics.md §10), which trusts no length in the file.
//!
//! Reading goes in stages, and both entry points ([`read_bytes`] for a byte slice, [`read`]
//! for a stream) run the same checks in the same order, so that they report the same error
//! for the same bytes:
//!
//! 1. the magic bytes and the header length field;
//! 2. the header: present in full (a slice is checked against its length before anything is
//!    allocated; a stream is read in bounded chunks, so memory grows only with the bytes that
//!    actually arrive), UTF-8, JSON, `format` and `version`, then the node schema;
//! 3. the arrays, ordered by offset: no two overlap, then one at a time, each present in the
//!    data section (a slice is checked before the copy; a stream is read in chunks) and, for
//!    bool arrays, made of 0 and 1 bytes only;
//! 4. nothing after the last array.

use crate::error::IoError;
use crate::hexfloat::{from_hex, HexFloatError};
use crate::json::{self, JsonError};
use crate::node::{shape_text, Array, Key, Node};
use crate::{MAGIC, MAX_DEPTH, MAX_RANK};
use quabla_ir::{DType, HostData};
use serde_json::value::RawValue;
use std::collections::HashSet;
use std::io::Read;
use std::sync::Arc;

/// The size of the preamble: magic bytes and header length.
const PREAMBLE: usize = 16;

/// Bytes read from a stream per call.
const CHUNK: usize = 8192;

/// Reads a file of format v1 from memory.
///
/// Every violation of the format is an [`IoError::Format`] whose kind and message follow
/// errors.md IO1-IO4; nothing here panics or allocates more than a small multiple of
/// `bytes.len()`, whatever lengths the file claims.
pub fn read_bytes(bytes: &[u8]) -> Result<Node, IoError> {
    let preamble = bytes.get(..PREAMBLE).unwrap_or(bytes);
    let header_len = check_preamble(preamble)?;
    let rest = bytes.get(PREAMBLE..).unwrap_or(&[]);
    let available = rest.len() as u64;
    if header_len > available {
        return Err(header_truncated(header_len, available));
    }
    // header_len <= rest.len(), so it fits in a usize.
    let (header, data) = rest.split_at(header_len as usize);
    let parsed = parse_header(header)?;
    let data_start = PREAMBLE as u64 + header_len;
    let order = check_overlaps(&parsed.arrays)?;

    let mut decoded: Vec<Option<HostData>> = Vec::new();
    reserve(&mut decoded, parsed.arrays.len())?;
    decoded.resize(parsed.arrays.len(), None);
    let data_len = data.len() as u64;
    let mut end = 0u64;
    for &i in &order {
        let Some(spec) = parsed.arrays.get(i) else {
            continue;
        };
        let bytes = spec
            .end()
            .filter(|&e| e <= data_len)
            .and_then(|e| data.get(spec.offset as usize..e as usize))
            .ok_or_else(|| spec.truncated(data_start, data_len))?;
        if let Some(slot) = decoded.get_mut(i) {
            *slot = Some(spec.decode(bytes, data_start)?);
        }
        end = spec.end().unwrap_or(u64::MAX);
    }
    if data_len > end {
        return Err(trailing(&parsed.arrays, data_start + end));
    }
    Ok(fill(parsed.tree, decoded))
}

/// Reads a file of format v1 from a stream, which is read up to the end of the last array
/// and one byte further (to reject trailing bytes).
///
/// The stream is read in chunks of a few kilobytes and memory grows only with the bytes that
/// arrive, so a forged length cannot make the reader allocate what the stream does not hold.
/// Errors are those of [`read_bytes`], plus [`IoError::Io`] when the stream fails.
pub fn read<R: Read + ?Sized>(reader: &mut R) -> Result<Node, IoError> {
    read_stream(reader, None)
}

/// [`read`], given the stream's total length when it is known (a file's size), so that a
/// header or an array that cannot fit is rejected before it is read. The reads still check
/// every length, so a wrong hint (a file changing underneath) cannot cause harm.
pub(crate) fn read_stream<R: Read + ?Sized>(
    reader: &mut R,
    total_len: Option<u64>,
) -> Result<Node, IoError> {
    let mut preamble = [0u8; PREAMBLE];
    let got = read_into(reader, &mut preamble)?;
    let header_len = check_preamble(preamble.get(..got).unwrap_or(&[]))?;
    if let Some(total) = total_len {
        let available = total.saturating_sub(PREAMBLE as u64);
        if header_len > available {
            return Err(header_truncated(header_len, available));
        }
    }
    let header = read_up_to(reader, header_len)?;
    let available = header.len() as u64;
    if available < header_len {
        return Err(header_truncated(header_len, available));
    }
    let parsed = parse_header(&header)?;
    drop(header);
    let data_start = PREAMBLE as u64 + header_len;
    let order = check_overlaps(&parsed.arrays)?;

    let mut decoded: Vec<Option<HostData>> = Vec::new();
    reserve(&mut decoded, parsed.arrays.len())?;
    decoded.resize(parsed.arrays.len(), None);
    let mut position = 0u64;
    for &i in &order {
        let Some(spec) = parsed.arrays.get(i) else {
            continue;
        };
        if let Some(total) = total_len {
            let data_len = total.saturating_sub(data_start);
            if spec.end().is_none_or(|e| e > data_len) {
                return Err(spec.truncated(data_start, data_len));
            }
        }
        let gap = spec.offset.saturating_sub(position);
        let skipped = skip(reader, gap)?;
        if skipped < gap {
            return Err(spec.truncated(data_start, position + skipped));
        }
        let bytes = read_up_to(reader, spec.nbytes)?;
        if (bytes.len() as u64) < spec.nbytes {
            return Err(spec.truncated(data_start, spec.offset + bytes.len() as u64));
        }
        if let Some(slot) = decoded.get_mut(i) {
            *slot = Some(spec.decode(&bytes, data_start)?);
        }
        position = spec.end().unwrap_or(u64::MAX);
    }
    let mut probe = [0u8; 1];
    if read_into(reader, &mut probe)? > 0 {
        return Err(trailing(&parsed.arrays, data_start + position));
    }
    Ok(fill(parsed.tree, decoded))
}

/// Checks the magic bytes and returns the header length, given the first (up to) 16 bytes.
fn check_preamble(preamble: &[u8]) -> Result<u64, IoError> {
    let magic_part = preamble.get(..MAGIC.len()).unwrap_or(preamble);
    if MAGIC.get(..magic_part.len()) != Some(magic_part) {
        return Err(IoError::bad_magic());
    }
    let len = preamble.len();
    if len == 0 {
        return Err(IoError::truncated("the file is empty"));
    }
    if len < MAGIC.len() {
        return Err(IoError::truncated(format!(
            "the file ends after {len} bytes, inside the magic bytes"
        )));
    }
    match preamble.get(MAGIC.len()..PREAMBLE) {
        Some(field) => {
            let mut le = [0u8; 8];
            le.copy_from_slice(field);
            Ok(u64::from_le_bytes(le))
        }
        None => Err(IoError::truncated(format!(
            "the file ends after {len} bytes, inside the header length (bytes 8 to 16)"
        ))),
    }
}

fn header_truncated(header_len: u64, available: u64) -> IoError {
    IoError::truncated(format!(
        "the header length field says {header_len} bytes, but only {available} bytes follow it"
    ))
}

fn trailing(arrays: &[ArraySpec], at: u64) -> IoError {
    let after = if arrays.is_empty() {
        "the header"
    } else {
        "the last array"
    };
    IoError::malformed(format!("trailing bytes after {after}, from byte {at}"))
}

/// One array of the header, with its place in the data section.
struct ArraySpec {
    dtype: DType,
    offset: u64,
    nbytes: u64,
    /// The array's tree path, for messages.
    path: String,
}

impl ArraySpec {
    fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.nbytes)
    }

    /// IO2: the data section, `data_len` bytes long, ends before this array does.
    fn truncated(&self, data_start: u64, data_len: u64) -> IoError {
        let end = self
            .end()
            .map_or_else(|| "beyond 2^64".to_owned(), |e| e.to_string());
        IoError::truncated(format!(
            "{} needs bytes {}..{end} of the data section, which starts at byte {data_start} \
             and holds only {data_len} bytes",
            self.path, self.offset
        ))
    }

    /// The array's elements from exactly its `nbytes` bytes.
    fn decode(&self, bytes: &[u8], data_start: u64) -> Result<HostData, IoError> {
        Ok(match self.dtype {
            DType::F64 => {
                let (words, _) = bytes.as_chunks::<8>();
                HostData::F64(words.iter().map(|w| f64::from_le_bytes(*w)).collect())
            }
            DType::F32 => {
                let (words, _) = bytes.as_chunks::<4>();
                HostData::F32(words.iter().map(|w| f32::from_le_bytes(*w)).collect())
            }
            DType::Bool => {
                if let Some(i) = bytes.iter().position(|&b| b > 1) {
                    let byte = bytes.get(i).copied().unwrap_or(0);
                    return Err(IoError::malformed(format!(
                        "{}: bool element {i} is the byte {byte:#04x}, not 0 or 1 \
                         (at byte {})",
                        self.path,
                        data_start + self.offset + i as u64
                    )));
                }
                HostData::Bool(bytes.iter().map(|&b| b == 1).collect())
            }
            DType::I32 => {
                let (words, _) = bytes.as_chunks::<4>();
                HostData::I32(words.iter().map(|w| i32::from_le_bytes(*w)).collect())
            }
            DType::I64 => {
                let (words, _) = bytes.as_chunks::<8>();
                HostData::I64(words.iter().map(|w| i64::from_le_bytes(*w)).collect())
            }
        })
    }
}

/// The indices of `arrays` in order of offset, after checking that no two overlap.
fn check_overlaps(arrays: &[ArraySpec]) -> Result<Vec<usize>, IoError> {
    let mut order: Vec<usize> = Vec::new();
    reserve(&mut order, arrays.len())?;
    order.extend(0..arrays.len());
    order.sort_by_key(|&i| arrays.get(i).map(|a| (a.offset, i)));
    for pair in order.windows(2) {
        let (Some(a), Some(b)) = (arrays.get(pair[0]), arrays.get(pair[1])) else {
            continue;
        };
        let a_end = a.offset.saturating_add(a.nbytes);
        if b.offset < a_end {
            return Err(IoError::malformed(format!(
                "the arrays at {} (data bytes {}..{a_end}) and {} (data bytes {}..{}) overlap",
                a.path,
                a.offset,
                b.path,
                b.offset,
                b.offset.saturating_add(b.nbytes)
            )));
        }
    }
    Ok(order)
}

/// `vec.try_reserve_exact(n)`, as an out-of-memory error.
fn reserve<T>(vec: &mut Vec<T>, n: usize) -> Result<(), IoError> {
    vec.try_reserve_exact(n)
        .map_err(|_| IoError::out_of_memory(n.saturating_mul(std::mem::size_of::<T>())))
}

/// Fills `buf` from the stream as far as it goes; returns the bytes read (fewer at the end).
fn read_into<R: Read + ?Sized>(reader: &mut R, buf: &mut [u8]) -> Result<usize, IoError> {
    let mut got = 0;
    while let Some(rest) = buf.get_mut(got..).filter(|r| !r.is_empty()) {
        match reader.read(rest) {
            Ok(0) => break,
            Ok(n) => got += n.min(rest.len()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(IoError::io(e)),
        }
    }
    Ok(got)
}

/// Up to `want` bytes of the stream (fewer at its end), read in chunks so that the buffer
/// grows only with the bytes that arrive.
fn read_up_to<R: Read + ?Sized>(reader: &mut R, want: u64) -> Result<Vec<u8>, IoError> {
    let mut out: Vec<u8> = Vec::new();
    let mut chunk = [0u8; CHUNK];
    while (out.len() as u64) < want {
        let n = usize::try_from(want - out.len() as u64).map_or(CHUNK, |left| left.min(CHUNK));
        let got = read_into(reader, chunk.get_mut(..n).unwrap_or(&mut []))?;
        if got == 0 {
            break;
        }
        let piece = chunk.get(..got).unwrap_or(&[]);
        out.try_reserve(piece.len())
            .map_err(|_| IoError::out_of_memory(out.len().saturating_add(piece.len())))?;
        out.extend_from_slice(piece);
        if got < n {
            break;
        }
    }
    Ok(out)
}

/// Reads and discards up to `count` bytes; returns how many there were.
fn skip<R: Read + ?Sized>(reader: &mut R, count: u64) -> Result<u64, IoError> {
    let mut chunk = [0u8; CHUNK];
    let mut skipped = 0u64;
    while skipped < count {
        let n = usize::try_from(count - skipped).map_or(CHUNK, |left| left.min(CHUNK));
        let got = read_into(reader, chunk.get_mut(..n).unwrap_or(&mut []))?;
        skipped += got as u64;
        if got < n {
            break;
        }
    }
    Ok(skipped)
}

/// The tree of a header, with placeholder data in its arrays, and the arrays in pre-order.
struct Parsed {
    tree: Node,
    arrays: Vec<ArraySpec>,
}

/// Puts the decoded data into the placeholder arrays of `tree`, in pre-order.
fn fill(mut tree: Node, decoded: Vec<Option<HostData>>) -> Node {
    let mut data = decoded.into_iter();
    fill_node(&mut tree, &mut data);
    tree
}

fn fill_node(node: &mut Node, data: &mut impl Iterator<Item = Option<HostData>>) {
    match node {
        Node::Array(array) => {
            if let Some(Some(d)) = data.next() {
                array.set_data(d);
            }
        }
        Node::List(items) | Node::Tuple(items) => {
            for item in items {
                fill_node(item, data);
            }
        }
        Node::Dict(entries) => {
            for (_, value) in entries {
                fill_node(value, data);
            }
        }
        _ => {}
    }
}

const HEADER_FIELDS: [&str; 3] = ["format", "version", "tree"];

fn parse_header(header: &[u8]) -> Result<Parsed, IoError> {
    let text = std::str::from_utf8(header).map_err(|e| {
        IoError::malformed(format!(
            "the header is not valid UTF-8 (at byte {})",
            PREAMBLE + e.valid_up_to()
        ))
    })?;
    let at = |offset: usize| PREAMBLE + offset;
    let fields = json::fields(text, &HEADER_FIELDS).map_err(|e| {
        let what = if e.syntax { "invalid JSON" } else { "header" };
        IoError::malformed(format!("{what}: {} (at byte {})", e.message, at(e.offset)))
    })?;
    let [format, version, tree] = fields.values;
    let format = format.ok_or_else(|| IoError::malformed("missing field \"format\""))?;
    let is_quabla = json::with_str(format.get(), |s| s == "quabla").map_err(|_| {
        IoError::malformed(format!(
            "format: expected a string, got {} (at byte {})",
            json::snippet(format.get()),
            at(json::offset_in(text, format.get()))
        ))
    })?;
    if !is_quabla {
        return Err(IoError::version(format!(
            "(format {} is not \"quabla\")",
            json::snippet(format.get())
        )));
    }
    let version = version.ok_or_else(|| IoError::malformed("missing field \"version\""))?;
    let v = version.get();
    if !v.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        return Err(IoError::malformed(format!(
            "version: expected an integer, got {} (at byte {})",
            json::snippet(v),
            at(json::offset_in(text, v))
        )));
    }
    if json::uint(v).ok() != Some(1) {
        return Err(IoError::version(json::snippet(v)));
    }
    if let Some(name) = fields.unknown {
        return Err(IoError::malformed(format!(
            "unknown header field \"{name}\""
        )));
    }
    let tree = tree.ok_or_else(|| IoError::malformed("missing field \"tree\""))?;
    let mut cx = Cx {
        header: text,
        path: String::from("tree"),
        arrays: Vec::new(),
        placeholder: Arc::from([]),
    };
    let tree = cx.node(tree, 0)?;
    Ok(Parsed {
        tree,
        arrays: cx.arrays,
    })
}

/// The node types of §10.2.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NodeType {
    None,
    Bool,
    Int,
    Float,
    Str,
    List,
    Tuple,
    Dict,
    Array,
}

impl NodeType {
    fn from_name(name: &str) -> Option<NodeType> {
        Some(match name {
            "none" => NodeType::None,
            "bool" => NodeType::Bool,
            "int" => NodeType::Int,
            "float" => NodeType::Float,
            "str" => NodeType::Str,
            "list" => NodeType::List,
            "tuple" => NodeType::Tuple,
            "dict" => NodeType::Dict,
            "array" => NodeType::Array,
            _ => return None,
        })
    }

    /// The name with its article, for messages: `an int`, `a list`.
    fn with_article(self) -> String {
        let article = if matches!(self, NodeType::Int | NodeType::Array) {
            "an"
        } else {
            "a"
        };
        format!("{article} {}", self.name())
    }

    fn name(self) -> &'static str {
        match self {
            NodeType::None => "none",
            NodeType::Bool => "bool",
            NodeType::Int => "int",
            NodeType::Float => "float",
            NodeType::Str => "str",
            NodeType::List => "list",
            NodeType::Tuple => "tuple",
            NodeType::Dict => "dict",
            NodeType::Array => "array",
        }
    }

    /// The fields of [`NODE_FIELDS`] (after `type`) that this node type has.
    fn fields(self) -> &'static [usize] {
        match self {
            NodeType::None => &[],
            NodeType::Bool | NodeType::Int | NodeType::Float | NodeType::Str => &[VALUE],
            NodeType::List | NodeType::Tuple | NodeType::Dict => &[ITEMS],
            NodeType::Array => &[DTYPE, SHAPE, OFFSET, NBYTES],
        }
    }
}

const NODE_FIELDS: [&str; 7] = [
    "type", "value", "items", "dtype", "shape", "offset", "nbytes",
];
const TYPE: usize = 0;
const VALUE: usize = 1;
const ITEMS: usize = 2;
const DTYPE: usize = 3;
const SHAPE: usize = 4;
const OFFSET: usize = 5;
const NBYTES: usize = 6;

/// The state of the schema walk over one header.
struct Cx<'h> {
    header: &'h str,
    /// The tree path of the node being read (`tree.items[0][1]`).
    path: String,
    arrays: Vec<ArraySpec>,
    /// Shared empty storage for arrays until their data is read.
    placeholder: Arc<[f64]>,
}

impl<'h> Cx<'h> {
    /// The file offset of a piece of the header.
    fn at(&self, piece: &str) -> usize {
        PREAMBLE + json::offset_in(self.header, piece)
    }

    /// IO4 at the current path, `.field` appended when given.
    fn error(&self, field: Option<&str>, piece: &str, detail: impl std::fmt::Display) -> IoError {
        let field = field.map(|f| format!(".{f}")).unwrap_or_default();
        IoError::malformed(format!(
            "{}{field}: {detail} (at byte {})",
            self.path,
            self.at(piece)
        ))
    }

    /// IO4 for a serde_json failure inside `piece`.
    fn json_error(&self, field: Option<&str>, piece: &str, e: JsonError) -> IoError {
        let field = field.map(|f| format!(".{f}")).unwrap_or_default();
        IoError::malformed(format!(
            "{}{field}: {} (at byte {})",
            self.path,
            e.message,
            self.at(piece) + e.offset
        ))
    }

    /// Reads the node `raw`, which sits inside `depth` containers.
    fn node(&mut self, raw: &'h RawValue, depth: usize) -> Result<Node, IoError> {
        let text = raw.get();
        let fields =
            json::fields(text, &NODE_FIELDS).map_err(|e| self.json_error(None, text, e))?;
        let type_raw =
            fields.values[TYPE].ok_or_else(|| self.error(None, text, "missing field \"type\""))?;
        let ty = json::with_str(type_raw.get(), NodeType::from_name)
            .map_err(|_| {
                self.error(
                    Some("type"),
                    type_raw.get(),
                    format!("expected a string, got {}", json::snippet(type_raw.get())),
                )
            })?
            .ok_or_else(|| {
                self.error(
                    Some("type"),
                    type_raw.get(),
                    format!("unknown node type {}", json::snippet(type_raw.get())),
                )
            })?;
        if let Some(name) = &fields.unknown {
            return Err(self.error(None, text, format!("unknown field \"{name}\"")));
        }
        let allowed = ty.fields();
        for (i, value) in fields.values.iter().enumerate().skip(1) {
            match (value, allowed.contains(&i)) {
                (Some(v), false) => {
                    return Err(self.error(
                        None,
                        v.get(),
                        format!(
                            "field \"{}\" does not belong in {} node",
                            NODE_FIELDS[i],
                            ty.with_article()
                        ),
                    ))
                }
                (None, true) => {
                    return Err(self.error(
                        None,
                        text,
                        format!(
                            "missing field \"{}\" of {} node",
                            NODE_FIELDS[i],
                            ty.with_article()
                        ),
                    ))
                }
                _ => {}
            }
        }
        let field = |i: usize| fields.values[i].map_or("", |v| v.get());
        Ok(match ty {
            NodeType::None => Node::None,
            NodeType::Bool => Node::Bool(json::boolean(field(VALUE)).map_err(|_| {
                self.error(
                    Some("value"),
                    field(VALUE),
                    format!(
                        "expected true or false, got {}",
                        json::snippet(field(VALUE))
                    ),
                )
            })?),
            NodeType::Int => Node::Int(self.int(field(VALUE))?),
            NodeType::Float => Node::Float(self.float(field(VALUE))?),
            NodeType::Str => Node::Str(json::string(field(VALUE)).map_err(|_| {
                self.error(
                    Some("value"),
                    field(VALUE),
                    format!("expected a string, got {}", json::snippet(field(VALUE))),
                )
            })?),
            NodeType::List => Node::List(self.sequence(field(ITEMS), depth)?),
            NodeType::Tuple => Node::Tuple(self.sequence(field(ITEMS), depth)?),
            NodeType::Dict => Node::Dict(self.dict(field(ITEMS), depth)?),
            NodeType::Array => {
                self.array(field(DTYPE), field(SHAPE), field(OFFSET), field(NBYTES))?
            }
        })
    }

    /// The text of an int node: a decimal string in the signed 64-bit range.
    fn int(&self, raw: &str) -> Result<i64, IoError> {
        let parsed = json::with_str(raw, |s| {
            let digits = s.strip_prefix('-').unwrap_or(s);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err("is not a decimal integer");
            }
            s.parse::<i64>()
                .map_err(|_| "is outside the signed 64-bit range")
        });
        match parsed {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(why)) => Err(self.error(
                Some("value"),
                raw,
                format!("int text {} {why}", json::snippet(raw)),
            )),
            Err(_) => Err(self.error(
                Some("value"),
                raw,
                format!("expected a decimal string, got {}", json::snippet(raw)),
            )),
        }
    }

    /// The text of a float node: hexadecimal float text, `inf`, `-inf` or `nan`.
    fn float(&self, raw: &str) -> Result<f64, IoError> {
        match json::with_str(raw, from_hex) {
            Ok(Ok(x)) => Ok(x),
            Ok(Err(HexFloatError::Syntax)) => Err(self.error(
                Some("value"),
                raw,
                format!("{} is not hexadecimal float text", json::snippet(raw)),
            )),
            Ok(Err(HexFloatError::Overflow)) => Err(self.error(
                Some("value"),
                raw,
                format!("float text {} is too large for float64", json::snippet(raw)),
            )),
            Err(_) => Err(self.error(
                Some("value"),
                raw,
                format!("expected a string, got {}", json::snippet(raw)),
            )),
        }
    }

    /// Checks that one more container fits, returning the depth of its items.
    fn enter(&self, raw: &str, depth: usize) -> Result<usize, IoError> {
        if depth >= MAX_DEPTH {
            return Err(self.error(
                None,
                raw,
                format!("containers nest more than {MAX_DEPTH} deep"),
            ));
        }
        Ok(depth + 1)
    }

    fn sequence(&mut self, raw: &'h str, depth: usize) -> Result<Vec<Node>, IoError> {
        let depth = self.enter(raw, depth)?;
        let items = json::items(raw).map_err(|e| self.json_error(Some("items"), raw, e))?;
        let mut out = Vec::new();
        reserve(&mut out, items.len())?;
        let base = self.path.len();
        for (i, item) in items.into_iter().enumerate() {
            self.path.push_str(&format!(".items[{i}]"));
            out.push(self.node(item, depth)?);
            self.path.truncate(base);
        }
        Ok(out)
    }

    fn dict(&mut self, raw: &'h str, depth: usize) -> Result<Vec<(Key, Node)>, IoError> {
        let depth = self.enter(raw, depth)?;
        let items = json::items(raw).map_err(|e| self.json_error(Some("items"), raw, e))?;
        let mut out: Vec<(Key, Node)> = Vec::new();
        reserve(&mut out, items.len())?;
        let base = self.path.len();
        for (i, item) in items.iter().enumerate() {
            self.path.push_str(&format!(".items[{i}]"));
            let (key, value) =
                json::pair(item.get()).map_err(|e| self.json_error(None, item.get(), e))?;
            self.path.push_str("[0]");
            let key = self.key(key, depth)?;
            self.path.truncate(base);
            self.path.push_str(&format!(".items[{i}][1]"));
            let value = self.node(value, depth)?;
            self.path.truncate(base);
            out.push((key, value));
        }
        let mut seen = HashSet::new();
        seen.try_reserve(out.len())
            .map_err(|_| IoError::out_of_memory(out.len()))?;
        for (i, (key, _)) in out.iter().enumerate() {
            if !seen.insert(key) {
                let piece = items.get(i).map_or(raw, |r| r.get());
                self.path.push_str(&format!(".items[{i}][0]"));
                let e = self.error(None, piece, format!("duplicate dict key {key}"));
                self.path.truncate(base);
                return Err(e);
            }
        }
        Ok(out)
    }

    /// A dict key: a str or int node.
    fn key(&mut self, raw: &'h RawValue, depth: usize) -> Result<Key, IoError> {
        let text = raw.get();
        // Look at the type first, so that a container key is reported as a bad key rather
        // than read as a subtree.
        let fields =
            json::fields(text, &NODE_FIELDS).map_err(|e| self.json_error(None, text, e))?;
        if let Some(type_raw) = fields.values[TYPE] {
            let ty = json::with_str(type_raw.get(), NodeType::from_name)
                .ok()
                .flatten();
            if let Some(ty) = ty.filter(|t| !matches!(t, NodeType::Str | NodeType::Int)) {
                return Err(self.error(
                    None,
                    text,
                    format!("a dict key must be a str or int node, not {}", ty.name()),
                ));
            }
        }
        match self.node(raw, depth)? {
            Node::Str(s) => Ok(Key::Str(s)),
            Node::Int(i) => Ok(Key::Int(i)),
            other => Err(self.error(
                None,
                text,
                format!(
                    "a dict key must be a str or int node, not {}",
                    other.type_name()
                ),
            )),
        }
    }

    fn array(
        &mut self,
        dtype: &str,
        shape: &str,
        offset: &str,
        nbytes: &str,
    ) -> Result<Node, IoError> {
        let dt = json::with_str(dtype, |s| match s {
            "float64" => Some(DType::F64),
            "float32" => Some(DType::F32),
            "bool" => Some(DType::Bool),
            "int32" => Some(DType::I32),
            "int64" => Some(DType::I64),
            _ => None,
        })
        .ok()
        .flatten()
        .ok_or_else(|| {
            self.error(
                Some("dtype"),
                dtype,
                format!(
                    "unknown dtype {}; expected \"float64\", \"float32\", \"bool\", \"int32\" \
                     or \"int64\"",
                    json::snippet(dtype)
                ),
            )
        })?;
        let extents = json::uint_list(shape, MAX_RANK)
            .map_err(|e| self.json_error(Some("shape"), shape, e))?;
        let mut dims: Vec<usize> = Vec::new();
        reserve(&mut dims, extents.len())?;
        for &d in &extents {
            match usize::try_from(d) {
                Ok(0) => {
                    return Err(self.error(
                        Some("shape"),
                        shape,
                        "a zero extent (empty arrays are not supported)",
                    ))
                }
                Ok(d) => dims.push(d),
                Err(_) => {
                    return Err(self.error(
                        Some("shape"),
                        shape,
                        format!("extent {d} is too large"),
                    ))
                }
            }
        }
        let offset_value = json::uint(offset).map_err(|_| {
            self.error(
                Some("offset"),
                offset,
                format!(
                    "expected a non-negative integer, got {}",
                    json::snippet(offset)
                ),
            )
        })?;
        let nbytes_value = json::uint(nbytes).map_err(|_| {
            self.error(
                Some("nbytes"),
                nbytes,
                format!(
                    "expected a non-negative integer, got {}",
                    json::snippet(nbytes)
                ),
            )
        })?;
        let expected = dims
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
            .and_then(|n| n.checked_mul(dt.itemsize() as u64))
            // Element counts must also fit in memory indices.
            .filter(|&n| usize::try_from(n).is_ok());
        match expected {
            Some(n) if n == nbytes_value => {}
            Some(n) => {
                return Err(self.error(
                    Some("nbytes"),
                    nbytes,
                    format!(
                        "nbytes {nbytes_value} does not match shape {} of {} ({n} bytes)",
                        shape_text(&dims),
                        dt.name()
                    ),
                ))
            }
            None => {
                return Err(self.error(
                    Some("shape"),
                    shape,
                    format!(
                        "shape {} of {} holds more bytes than a file can",
                        shape_text(&dims),
                        dt.name()
                    ),
                ))
            }
        }
        self.arrays
            .try_reserve(1)
            .map_err(|_| IoError::out_of_memory(0))?;
        self.arrays.push(ArraySpec {
            dtype: dt,
            offset: offset_value,
            nbytes: nbytes_value,
            path: self.path.clone(),
        });
        // The data replaces this once the data section is read; every placeholder shares one
        // empty buffer.
        let placeholder = HostData::F64(self.placeholder.clone());
        Ok(Node::Array(Array::checked(dims, placeholder)))
    }
}
