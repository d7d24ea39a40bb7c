//! `qb::save`, `qb::load` and `qb::load_as` (api.md §15): pytrees to and from file format v1.
//!
//! This module owns the conversion between the facade's trees ([`Value`]) and the neutral
//! [`quabla_io::Node`] the file crate reads and writes, and the choice of destination (a path,
//! saved atomically, or any `Write`/`Read`). The byte layout, its validation and the atomic
//! replacement of a file belong to `quabla-io`; this module must not read or write bytes itself.
//!
//! Rust has no dynamic objects, so a tree is saved through [`Tree::to_value`]: tensors, `f64`,
//! `bool`, integers, strings (static values), `None`, lists, tuples and dicts map to the file's
//! nodes one to one. A `#[derive(Tree)]` struct is saved as a dict of its fields in declaration
//! order (data fields, then static fields that are strings, integers or bools), which
//! [`load_as`] rebuilds into the struct; [`load`] returns it as that dict. Random keys and
//! abstract `ShapeDtype` leaves are refused (TY9), as is a dict mixing string and integer keys
//! (TY8), and a tracer is TR2: nothing is written in any of these cases.

use crate::tree::{DictKey, Tree, Value};
use crate::{Error, Result, Tensor};
use quabla_io::{Array, Key, Node};
use quabla_ir::Shape;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Where [`save`] writes: a path (`&str`, `String`, `&Path`, `PathBuf`), replaced atomically,
/// or any writer (`&mut W` with `W: Write`).
pub trait SaveTarget {
    #[doc(hidden)]
    fn save_node(self, node: &Node) -> Result<()>;
}

/// Where [`load`] reads from: a path (`&str`, `String`, `&Path`, `PathBuf`) or any reader
/// (`&mut R` with `R: Read`, e.g. `&mut bytes.as_slice()` or a `Cursor`).
pub trait LoadSource {
    #[doc(hidden)]
    fn load_node(self) -> Result<Node>;
}

macro_rules! path_like {
    ($($t:ty),*) => {$(
        impl SaveTarget for $t {
            fn save_node(self, node: &Node) -> Result<()> {
                let path: &Path = self.as_ref();
                Ok(quabla_io::save_path(path, node)?)
            }
        }
        impl LoadSource for $t {
            fn load_node(self) -> Result<Node> {
                let path: &Path = self.as_ref();
                Ok(quabla_io::load_path(path)?)
            }
        }
    )*};
}

path_like!(&str, String, &String, &Path, PathBuf, &PathBuf);

impl<W: Write> SaveTarget for &mut W {
    fn save_node(self, node: &Node) -> Result<()> {
        quabla_io::write(node, self)?;
        Ok(self.flush().map_err(quabla_io::IoError::from)?)
    }
}

impl<R: Read> LoadSource for &mut R {
    fn load_node(self) -> Result<Node> {
        Ok(quabla_io::read(self)?)
    }
}

/// Writes `tree` in file format v1 to a path or a writer.
///
/// Leaves are tensors (saved bit for bit with their shape and dtype), `None`, `bool`, integers
/// (`i64` range), `f64` and strings; containers are lists, tuples, dicts with all-string or
/// all-integer keys (in their written order for a [`Value::Dict`], sorted for a map type) and
/// `#[derive(Tree)]` structs (saved as a dict of their fields). Errors: TY9 for any other
/// leaf (a random key, a `ShapeDtype`), TY8 for mixed dict keys, TR2 for a tracer, `Error::Io`
/// (with the path) when the operating system refuses. Saving to a path writes a temporary
/// file next to it and renames it over the target, so a failure never leaves a partial file
/// or destroys the previous one.
///
/// ```
/// use quabla as qb;
/// let mut bytes = Vec::new();
/// let tree = (qb::array([1.0, -0.0])?, 1200i64);
/// qb::save(&mut bytes, &tree)?;
/// let back: (qb::Tensor, i64) = qb::load_as(&mut bytes.as_slice())?;
/// assert_eq!(back.1, 1200);
/// assert_eq!(back.0.to_vec::<f64>()?[1].to_bits(), (-0.0f64).to_bits());
/// # Ok::<(), qb::Error>(())
/// ```
pub fn save<T: Tree>(target: impl SaveTarget, tree: &T) -> Result<()> {
    // `try_to_value` bounds the depth before anything below recurses over the tree.
    let node = to_node(&tree.try_to_value()?)?;
    target.save_node(&node)
}

/// Reads a tree written by [`save`] (or by the Python `quabla.save`) from a path or a reader:
/// arrays as tensors, bit-exact with shape and dtype; scalars with their type and exact value;
/// dicts in their written order; tuples as tuples. A malformed, truncated or unknown-version
/// file is `Error::Format` (naming what is wrong and where), an unreadable file `Error::Io`.
pub fn load(source: impl LoadSource) -> Result<Value> {
    from_node(source.load_node()?)
}

/// [`load`], then the tree converted to `T` (`#[derive(Tree)]` structs, `Vec`, tuples, maps,
/// tensors, scalars), checking its structure: TF8 naming the first path that differs, such as
/// `pytree structures differ at ['params']['w']: expected a tensor leaf, got None`.
pub fn load_as<T: Tree>(source: impl LoadSource) -> Result<T> {
    load(source)?.into_typed()
}

/// The file node of a tree value.
fn to_node(value: &Value) -> Result<Node> {
    Ok(match value {
        Value::None => Node::None,
        Value::Bool(b) => Node::Bool(*b),
        Value::Int(i) => Node::Int(*i),
        Value::Float(x) => Node::Float(*x),
        Value::Str(s) => Node::Str(s.clone()),
        Value::Array(t) => Node::Array(to_array(t)?),
        Value::List(items) => Node::List(items.iter().map(to_node).collect::<Result<_>>()?),
        Value::Tuple(items) => Node::Tuple(items.iter().map(to_node).collect::<Result<_>>()?),
        Value::Dict(entries) => {
            // `try_to_value` refused mixed key kinds already.
            Node::Dict(
                entries
                    .iter()
                    .map(|(k, v)| Ok((file_key(k), to_node(v)?)))
                    .collect::<Result<_>>()?,
            )
        }
        Value::Node { name, fields, meta } => {
            let mut entries = Vec::with_capacity(fields.len() + meta.len());
            for (field, v) in fields {
                entries.push((Key::from(*field), to_node(v)?));
            }
            for (field, b) in meta {
                let v = b.saved_value()?.ok_or_else(|| {
                    unsupported(&format!("the static field {field} of {name} ({b:?})"))
                })?;
                entries.push((Key::from(*field), to_node(&v)?));
            }
            Node::Dict(entries)
        }
        Value::Static(b) => match b.saved_value()? {
            Some(v) => to_node(&v)?,
            None => return Err(unsupported(&format!("the static value {b:?}"))),
        },
        Value::Key(k) => {
            return Err(unsupported(&format!(
                "the random key {k} (save a seed or an integer derived with fold_in instead)"
            )))
        }
        Value::Abstract(s) => return Err(unsupported(&format!("the ShapeDtype {s:?}"))),
    })
}

/// TY9.
fn unsupported(what: &str) -> Error {
    quabla_io::IoError::unsupported_leaf(what).into()
}

fn file_key(k: &DictKey) -> Key {
    match k {
        DictKey::Str(s) => Key::Str(s.clone()),
        DictKey::Int(i) => Key::Int(*i),
    }
}

/// The file array of a concrete tensor (TR2 for a tracer); the data is shared, not copied.
fn to_array(t: &Tensor) -> Result<Array> {
    let host = t.host_for("save")?;
    Ok(Array::new(host.shape.dims().to_vec(), host.data.clone())?)
}

/// The tree value of a file node.
fn from_node(node: Node) -> Result<Value> {
    Ok(match node {
        Node::None => Value::None,
        Node::Bool(b) => Value::Bool(b),
        Node::Int(i) => Value::Int(i),
        Node::Float(x) => Value::Float(x),
        Node::Str(s) => Value::Str(s),
        Node::List(items) => Value::List(items.into_iter().map(from_node).collect::<Result<_>>()?),
        Node::Tuple(items) => {
            Value::Tuple(items.into_iter().map(from_node).collect::<Result<_>>()?)
        }
        Node::Dict(entries) => Value::Dict(
            entries
                .into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        Key::Str(s) => DictKey::Str(s),
                        Key::Int(i) => DictKey::Int(i),
                    };
                    Ok((key, from_node(v)?))
                })
                .collect::<Result<_>>()?,
        ),
        Node::Array(a) => {
            let (dims, data) = a.into_parts();
            Value::Array(Tensor::from_parts(Shape::new(dims)?, data, false))
        }
    })
}
