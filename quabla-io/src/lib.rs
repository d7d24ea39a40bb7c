//! The Quabla file format v1 (`save` / `load`): its writer and its reader, exactly as
//! `spec/numerics.md` §10 lays the format out.
//!
//! # What this crate owns
//!
//! - [`Node`], a neutral tree of the leaves and containers a file can hold (`None`, `bool`,
//!   `int`, `float`, `str`, lists, tuples, dicts with str or int keys in written order, and
//!   [`Array`]s of float64, float32, bool, int32 or int64 data). The facade converts its own tree values to
//!   and from it; this crate does not depend on the facade.
//! - [`write`] and the atomic [`save_path`]: the byte layout of the format (magic bytes,
//!   header length, compact padded JSON header, 8-aligned raw array data in pre-order), with
//!   floats as Python's `float.hex()` text ([`hexfloat`]).
//! - [`read`], [`read_bytes`] and [`load_path`]: a reader that validates every rule of the
//!   format and reports each violation as the [`IoError::Format`] error of errors.md IO1-IO4.
//! - [`fuzz`]: a mutation fuzzer of the reader, run by the `fuzz_load` binary
//!   (`cargo xtask fuzz load`).
//!
//! # What it must not do
//!
//! Loading never executes, imports or looks up anything named by a file: the header is data,
//! read against a fixed schema. The reader never trusts a length in the file: the header
//! length is checked against the bytes present before anything is allocated for the header
//! (or, for a stream, memory grows only with the bytes that arrive), every array's `offset`
//! and `nbytes` are checked against its shape and the data section with overflow-checked
//! arithmetic before anything is copied, containers are counted before their vectors are
//! allocated, and nesting is limited to [`MAX_DEPTH`] containers, so a malicious file can
//! neither exhaust memory nor overflow the stack. Nothing here panics on any input.
//!
//! ```
//! use quabla_io::{read_bytes, write, Array, Key, Node};
//! use quabla_ir::HostData;
//! use std::sync::Arc;
//!
//! let w = Array::new(vec![1, 2], HostData::F64(Arc::from([1.0, -0.0]))).unwrap();
//! let tree = Node::Dict(vec![
//!     (Key::from("w"), Node::Array(w)),
//!     (Key::from("step"), Node::Int(1200)),
//!     (Key::from("t"), Node::Tuple(vec![Node::Float(1.5), Node::from("s"), Node::None])),
//! ]);
//! let mut bytes = Vec::new();
//! write(&tree, &mut bytes).unwrap();
//! assert_eq!(&bytes[..8], b"\x93QUABLA\n");
//! assert_eq!(read_bytes(&bytes).unwrap(), tree);
//! ```

mod error;
pub mod fuzz;
pub mod hexfloat;
mod json;
mod node;
mod path;
mod read;
mod write;

pub use error::{ErrorKind, FormatErrorKind, IoError};
pub use node::{Array, Key, Node};
pub use path::{load_path, save_path};
pub use read::{read, read_bytes};
pub use write::write;

/// The first 8 bytes of every file: `\x93QUABLA\n`.
pub const MAGIC: [u8; 8] = [0x93, b'Q', b'U', b'A', b'B', b'L', b'A', b'\n'];

/// The format version this crate reads and writes.
pub const VERSION: u64 = 1;

/// The deepest nesting of containers (lists, tuples, dicts) a file may have; the writer
/// refuses deeper trees and the reader rejects deeper headers.
pub const MAX_DEPTH: usize = 128;

/// The most axes an array may have (NumPy's limit), which also bounds what a shape in a file
/// can make the reader allocate.
pub const MAX_RANK: usize = 64;
