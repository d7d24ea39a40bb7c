//! The neutral tree that files hold (numerics.md §10.2).

use crate::error::IoError;
use crate::MAX_RANK;
use quabla_ir::{DType, HostData};
use std::fmt;

/// One node of a saved tree.
///
/// The facade converts its own tree values to and from this type. Dicts keep their entries in
/// written order; lists and tuples are distinct.
///
/// Equality is structural and compares floats by bits (so `-0.0 != 0.0`), except that any two
/// NaN scalars are equal: a scalar float's NaN payload is not representable in the file's text
/// (`"nan"`), whereas array elements, stored as raw bytes, keep their exact bits and compare
/// bit for bit.
#[derive(Clone, Debug)]
pub enum Node {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Node>),
    Tuple(Vec<Node>),
    Dict(Vec<(Key, Node)>),
    Array(Array),
}

/// The key of a dict entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    Str(String),
    Int(i64),
}

impl Node {
    /// An int node from any integer up to 128 bits; AR19 when it does not fit in `i64`.
    pub fn int(value: impl Into<i128>) -> Result<Node, IoError> {
        let value = value.into();
        i64::try_from(value)
            .map(Node::Int)
            .map_err(|_| IoError::int_out_of_range(value))
    }

    /// The node's type name in the file (`none`, `bool`, `int`, `float`, `str`, `list`,
    /// `tuple`, `dict`, `array`).
    pub fn type_name(&self) -> &'static str {
        match self {
            Node::None => "none",
            Node::Bool(_) => "bool",
            Node::Int(_) => "int",
            Node::Float(_) => "float",
            Node::Str(_) => "str",
            Node::List(_) => "list",
            Node::Tuple(_) => "tuple",
            Node::Dict(_) => "dict",
            Node::Array(_) => "array",
        }
    }
}

impl PartialEq for Node {
    fn eq(&self, other: &Node) -> bool {
        match (self, other) {
            (Node::None, Node::None) => true,
            (Node::Bool(a), Node::Bool(b)) => a == b,
            (Node::Int(a), Node::Int(b)) => a == b,
            (Node::Float(a), Node::Float(b)) => {
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
            }
            (Node::Str(a), Node::Str(b)) => a == b,
            (Node::List(a), Node::List(b)) | (Node::Tuple(a), Node::Tuple(b)) => a == b,
            (Node::Dict(a), Node::Dict(b)) => a == b,
            (Node::Array(a), Node::Array(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Node {}

impl From<bool> for Node {
    fn from(v: bool) -> Node {
        Node::Bool(v)
    }
}

impl From<i64> for Node {
    fn from(v: i64) -> Node {
        Node::Int(v)
    }
}

impl From<f64> for Node {
    fn from(v: f64) -> Node {
        Node::Float(v)
    }
}

impl From<String> for Node {
    fn from(v: String) -> Node {
        Node::Str(v)
    }
}

impl From<&str> for Node {
    fn from(v: &str) -> Node {
        Node::Str(v.to_owned())
    }
}

impl From<Array> for Node {
    fn from(v: Array) -> Node {
        Node::Array(v)
    }
}

impl From<&str> for Key {
    fn from(v: &str) -> Key {
        Key::Str(v.to_owned())
    }
}

impl From<String> for Key {
    fn from(v: String) -> Key {
        Key::Str(v)
    }
}

impl From<i64> for Key {
    fn from(v: i64) -> Key {
        Key::Int(v)
    }
}

impl fmt::Display for Key {
    /// `"w"` for a str key (JSON-quoted), `3` for an int key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Str(s) => write!(f, "{s:?}"),
            Key::Int(i) => write!(f, "{i}"),
        }
    }
}

/// An array leaf: shape and typed host data in row-major order, whose lengths agree.
///
/// The parts live behind one box so that a [`Node`] stays four words long: a loaded file's
/// tree then never takes much more memory than the file's header text.
#[derive(Clone, PartialEq, Eq)]
pub struct Array(Box<ArrayParts>);

#[derive(Clone, PartialEq, Eq)]
struct ArrayParts {
    shape: Vec<usize>,
    data: HostData,
}

impl Array {
    /// An array of `shape` holding `data` (its dtype is the data's).
    ///
    /// Every extent must be >= 1 (a rank-0 array has shape `[]` and one element), the rank at
    /// most [`MAX_RANK`], and `data.len()` the product of the extents.
    pub fn new(shape: Vec<usize>, data: HostData) -> Result<Array, IoError> {
        if shape.contains(&0) {
            return Err(IoError::invalid_tree(format!(
                "array shape {} has a zero extent",
                shape_text(&shape)
            )));
        }
        if shape.len() > MAX_RANK {
            return Err(IoError::invalid_tree(format!(
                "array of rank {} has more than {MAX_RANK} axes",
                shape.len()
            )));
        }
        let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if count != Some(data.len()) {
            return Err(IoError::invalid_tree(format!(
                "array data holds {} elements but shape {} needs {}",
                data.len(),
                shape_text(&shape),
                count.map_or_else(|| "more than fit in memory".to_owned(), |n| n.to_string())
            )));
        }
        Ok(Array(Box::new(ArrayParts { shape, data })))
    }

    /// An array whose consistency the reader has already checked.
    pub(crate) fn checked(shape: Vec<usize>, data: HostData) -> Array {
        Array(Box::new(ArrayParts { shape, data }))
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.0.data.dtype()
    }

    /// The extents (empty for rank 0).
    pub fn shape(&self) -> &[usize] {
        &self.0.shape
    }

    /// The elements in row-major order.
    pub fn data(&self) -> &HostData {
        &self.0.data
    }

    /// The shape and the data.
    pub fn into_parts(self) -> (Vec<usize>, HostData) {
        let parts = *self.0;
        (parts.shape, parts.data)
    }

    /// Replaces the data of a placeholder array built by the reader.
    pub(crate) fn set_data(&mut self, data: HostData) {
        self.0.data = data;
    }
}

impl fmt::Debug for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Array")
            .field("dtype", &self.dtype())
            .field("shape", &self.shape())
            .field("data", self.data())
            .finish()
    }
}

/// A shape as the spec prints it: `[2, 3]`.
pub(crate) fn shape_text(shape: &[usize]) -> String {
    let mut out = String::from("[");
    for (i, d) in shape.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&d.to_string());
    }
    out.push(']');
    out
}
