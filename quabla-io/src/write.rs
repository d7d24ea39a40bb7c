//! The writer of file format v1 (numerics.md §10).

use crate::error::IoError;
use crate::hexfloat::to_hex;
use crate::node::{Array, Key, Node};
use crate::{MAGIC, MAX_DEPTH};
use quabla_ir::HostData;
use std::collections::HashSet;
use std::io::Write;

/// Writes `node` as a file of format v1 to `writer`, then flushes it.
///
/// The layout is exactly numerics.md §10: the magic bytes, the header length as a
/// little-endian u64, the compact JSON header `{"format":"quabla","version":1,"tree":NODE}`
/// padded with spaces so that the data section starts at a multiple of 8, then every array's
/// raw little-endian bytes in depth-first pre-order, each at the next multiple of 8 (zero
/// padding between), with nothing after the last one.
///
/// Errors: [`IoError::InvalidTree`] for a dict with a repeated key or nesting deeper than
/// [`MAX_DEPTH`] containers (checked before anything is written), [`IoError::Io`] when the
/// writer fails.
pub fn write<W: Write + ?Sized>(node: &Node, writer: &mut W) -> Result<(), IoError> {
    let layout = Layout::of(node)?;
    writer.write_all(&MAGIC).map_err(IoError::io)?;
    let header_len = layout.header.len() as u64;
    writer
        .write_all(&header_len.to_le_bytes())
        .map_err(IoError::io)?;
    writer
        .write_all(layout.header.as_bytes())
        .map_err(IoError::io)?;
    let mut position = 0u64;
    for (array, offset) in &layout.arrays {
        write_zeros(writer, offset - position)?;
        write_data(writer, array.data())?;
        position = offset + nbytes(array);
    }
    writer.flush().map_err(IoError::io)
}

/// The header text and where each array goes, computed before anything is written so that
/// an invalid tree leaves the writer untouched.
struct Layout<'a> {
    header: String,
    /// Arrays in depth-first pre-order with their offsets in the data section.
    arrays: Vec<(&'a Array, u64)>,
    /// The end of the last array placed so far.
    end: u64,
    /// The tree path of the node being written, for error messages.
    path: String,
}

impl<'a> Layout<'a> {
    fn of(node: &'a Node) -> Result<Layout<'a>, IoError> {
        let mut layout = Layout {
            header: String::from(r#"{"format":"quabla","version":1,"tree":"#),
            arrays: Vec::new(),
            end: 0,
            path: String::from("tree"),
        };
        layout.node(node, 0)?;
        layout.header.push('}');
        // Pad so that 16 + header_len is a multiple of 8.
        while !(16 + layout.header.len()).is_multiple_of(8) {
            layout.header.push(' ');
        }
        Ok(layout)
    }

    /// Appends the JSON of `node`, which sits inside `depth` containers.
    fn node(&mut self, node: &'a Node, depth: usize) -> Result<(), IoError> {
        match node {
            Node::None => self.header.push_str(r#"{"type":"none"}"#),
            Node::Bool(b) => {
                self.header.push_str(r#"{"type":"bool","value":"#);
                self.header.push_str(if *b { "true" } else { "false" });
                self.header.push('}');
            }
            Node::Int(i) => self.scalar("int", &i.to_string()),
            Node::Float(x) => self.scalar("float", &to_hex(*x)),
            Node::Str(s) => {
                self.header.push_str(r#"{"type":"str","value":"#);
                self.json_string(s);
                self.header.push('}');
            }
            Node::List(items) => self.sequence("list", items, depth)?,
            Node::Tuple(items) => self.sequence("tuple", items, depth)?,
            Node::Dict(entries) => self.dict(entries, depth)?,
            Node::Array(array) => self.array(array),
        }
        Ok(())
    }

    /// A node whose value is a JSON string that needs no escaping (digits, hex float text).
    fn scalar(&mut self, type_name: &str, text: &str) {
        self.header.push_str(r#"{"type":""#);
        self.header.push_str(type_name);
        self.header.push_str(r#"","value":""#);
        self.header.push_str(text);
        self.header.push_str(r#""}"#);
    }

    fn json_string(&mut self, s: &str) {
        // serde_json escapes exactly what JSON requires (quotes, backslashes, control
        // characters) and writes everything else as UTF-8.
        match serde_json::to_string(s) {
            Ok(quoted) => self.header.push_str(&quoted),
            // Serializing a str cannot fail; keep the text valid JSON regardless.
            Err(_) => self.header.push_str("\"\""),
        }
    }

    fn enter(&mut self, depth: usize) -> Result<usize, IoError> {
        if depth >= MAX_DEPTH {
            return Err(IoError::invalid_tree(format!(
                "cannot save {}: containers nest more than {MAX_DEPTH} deep",
                self.path
            )));
        }
        Ok(depth + 1)
    }

    fn sequence(
        &mut self,
        type_name: &str,
        items: &'a [Node],
        depth: usize,
    ) -> Result<(), IoError> {
        let depth = self.enter(depth)?;
        self.header.push_str(r#"{"type":""#);
        self.header.push_str(type_name);
        self.header.push_str(r#"","items":["#);
        let base = self.path.len();
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.header.push(',');
            }
            self.path.push_str(&format!(".items[{i}]"));
            self.node(item, depth)?;
            self.path.truncate(base);
        }
        self.header.push_str("]}");
        Ok(())
    }

    fn dict(&mut self, entries: &'a [(Key, Node)], depth: usize) -> Result<(), IoError> {
        let depth = self.enter(depth)?;
        let mut seen = HashSet::with_capacity(entries.len());
        for (i, (key, _)) in entries.iter().enumerate() {
            if !seen.insert(key) {
                return Err(IoError::invalid_tree(format!(
                    "cannot save {}: dict key {key} appears twice (entry {i})",
                    self.path
                )));
            }
        }
        self.header.push_str(r#"{"type":"dict","items":["#);
        let base = self.path.len();
        for (i, (key, value)) in entries.iter().enumerate() {
            if i > 0 {
                self.header.push(',');
            }
            self.header.push('[');
            match key {
                Key::Str(s) => {
                    self.header.push_str(r#"{"type":"str","value":"#);
                    self.json_string(s);
                    self.header.push('}');
                }
                Key::Int(k) => self.scalar("int", &k.to_string()),
            }
            self.header.push(',');
            self.path.push_str(&format!(".items[{i}][1]"));
            self.node(value, depth)?;
            self.path.truncate(base);
            self.header.push(']');
        }
        self.header.push_str("]}");
        Ok(())
    }

    fn array(&mut self, array: &'a Array) {
        let offset = self.end.next_multiple_of(8);
        let size = nbytes(array);
        self.end = offset + size;
        self.arrays.push((array, offset));
        self.header.push_str(r#"{"type":"array","dtype":""#);
        self.header.push_str(array.dtype().name());
        self.header.push_str(r#"","shape":["#);
        for (i, d) in array.shape().iter().enumerate() {
            if i > 0 {
                self.header.push(',');
            }
            self.header.push_str(&d.to_string());
        }
        self.header
            .push_str(&format!(r#"],"offset":{offset},"nbytes":{size}}}"#));
    }
}

/// The size of an array's data in bytes. An `Array` holds its data in memory, so this is at
/// most `isize::MAX` and fits in a u64.
fn nbytes(array: &Array) -> u64 {
    (array.data().len() as u64) * (array.dtype().itemsize() as u64)
}

fn write_zeros<W: Write + ?Sized>(writer: &mut W, count: u64) -> Result<(), IoError> {
    // Padding is at most 7 bytes.
    let zeros = [0u8; 8];
    let count = usize::try_from(count).unwrap_or(8).min(8);
    writer.write_all(&zeros[..count]).map_err(IoError::io)
}

/// Elements converted to little-endian bytes per chunk, so that a large array needs no
/// second full-size buffer.
const CHUNK_ELEMENTS: usize = 4096;

fn write_data<W: Write + ?Sized>(writer: &mut W, data: &HostData) -> Result<(), IoError> {
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK_ELEMENTS * 8);
    match data {
        HostData::F64(values) => {
            for chunk in values.chunks(CHUNK_ELEMENTS) {
                buf.clear();
                for x in chunk {
                    buf.extend_from_slice(&x.to_le_bytes());
                }
                writer.write_all(&buf).map_err(IoError::io)?;
            }
        }
        HostData::F32(values) => {
            for chunk in values.chunks(CHUNK_ELEMENTS) {
                buf.clear();
                for x in chunk {
                    buf.extend_from_slice(&x.to_le_bytes());
                }
                writer.write_all(&buf).map_err(IoError::io)?;
            }
        }
        HostData::Bool(values) => {
            for chunk in values.chunks(CHUNK_ELEMENTS) {
                buf.clear();
                buf.extend(chunk.iter().map(|&b| u8::from(b)));
                writer.write_all(&buf).map_err(IoError::io)?;
            }
        }
        HostData::I32(values) => {
            for chunk in values.chunks(CHUNK_ELEMENTS) {
                buf.clear();
                for x in chunk {
                    buf.extend_from_slice(&x.to_le_bytes());
                }
                writer.write_all(&buf).map_err(IoError::io)?;
            }
        }
        HostData::I64(values) => {
            for chunk in values.chunks(CHUNK_ELEMENTS) {
                buf.clear();
                for x in chunk {
                    buf.extend_from_slice(&x.to_le_bytes());
                }
                writer.write_all(&buf).map_err(IoError::io)?;
            }
        }
    }
    Ok(())
}
