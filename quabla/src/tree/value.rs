//! The dynamic tree [`Value`] (what `save` writes and `load` reads, and what bindings build
//! from their own containers), and the nested form of a tensor.

use super::*;
use crate::error::Result;
use crate::tensor::Tensor;
use quabla_ir::HostData;

// The nested form of a tensor lives here, beside [`Value`], so that `tensor` need not import
// this module.
impl Tensor {
    /// The values as nested lists with the tensor's rank (Python's `tolist`): a rank-0 tensor
    /// is a scalar value, a rank-1 tensor a list of scalars, and so on. Floats come back as
    /// `Value::Float` (float32 values widened exactly), bools as `Value::Bool`. TR2 for a
    /// tracer.
    ///
    /// ```
    /// use quabla as qb;
    /// use qb::tree::Value;
    /// let v = qb::array([[1.0, 2.0], [3.0, 4.0]])?.to_nested()?;
    /// let Value::List(rows) = &v else { unreachable!() };
    /// assert_eq!(rows.len(), 2);
    /// assert!(matches!(&rows[1], Value::List(r) if matches!(r[0], Value::Float(x) if x == 3.0)));
    /// # Ok::<(), qb::Error>(())
    /// ```
    pub fn to_nested(&self) -> Result<Value> {
        let host = self.host_for("to_nested")?;
        let scalar = |i: usize| match &host.data {
            HostData::Bool(v) => Value::Bool(v[i]),
            HostData::I32(_) | HostData::I64(_) => Value::Int(host.data.get_i64(i)),
            other => Value::Float(other.get_f64(i)),
        };
        fn nest(dims: &[usize], offset: usize, scalar: &dyn Fn(usize) -> Value) -> Value {
            match dims.split_first() {
                None => scalar(offset),
                Some((&n, rest)) => {
                    let stride: usize = rest.iter().product();
                    Value::List(
                        (0..n)
                            .map(|i| nest(rest, offset + i * stride, scalar))
                            .collect(),
                    )
                }
            }
        }
        Ok(nest(host.shape.dims(), 0, &scalar))
    }
}

/// A dynamically typed tree (api.md §13): any structure with its leaves, as one value. It is
/// what `qb::load` returns (dicts in their written order, tuples as tuples, every leaf with its
/// type) and what a transform returns when the result type is not known statically.
///
/// Flattening follows the pytree rules: a dict is traversed in sorted key order (so its
/// written order does not survive a transform), a string is a static value.
#[derive(Clone, Debug)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Array(Tensor),
    /// A shape and dtype without data (`jit(f).lower(..)` arguments).
    Abstract(ShapeDtype),
    /// A random key (a leaf that transforms accept in static positions only).
    Key(quabla_random::Key),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    /// A dict in its written order; its keys should be all strings or all integers (a
    /// transform or `save` meeting a mix raises TY8).
    Dict(Vec<(DictKey, Value)>),
    /// A `#[derive(Tree)]` struct: its data fields, then its static meta fields.
    Node {
        name: &'static str,
        fields: Vec<(&'static str, Value)>,
        meta: Vec<(&'static str, StaticBox)>,
    },
    /// A static value other than a string (`qb::Static`).
    Static(StaticBox),
}

impl Value {
    /// The tree of a structure and its leaves (TF9 on a count mismatch).
    pub fn from_parts(def: &TreeDef, leaves: Vec<Leaf>) -> Result<Value> {
        def.unflatten(leaves)
    }

    /// Converts to a typed tree (TF8 when the structures differ).
    pub fn into_typed<T: Tree>(self) -> Result<T> {
        let (leaves, def) = flatten(&self);
        def.unflatten(leaves)
    }

    /// The entry of a dict value under `key`, if any.
    pub fn get(&self, key: impl Into<DictKey>) -> Option<&Value> {
        let key = key.into();
        match self {
            Value::Dict(entries) => entries.iter().find(|(k, _)| *k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The tensor of an array value.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Array(t) => Some(t),
            _ => None,
        }
    }

    /// [`nesting_error`] when containers nest deeper than [`MAX_DEPTH`] below `depth`
    /// enclosing ones, TY8 for a dict mixing key kinds; the recursion stops at the limit.
    fn check_form(&self, depth: usize) -> Result<()> {
        let children: Box<dyn Iterator<Item = &Value>> = match self {
            Value::List(items) | Value::Tuple(items) => Box::new(items.iter()),
            Value::Dict(entries) => {
                if mixes_key_kinds(entries) {
                    return Err(mixed_keys_error());
                }
                Box::new(entries.iter().map(|(_, v)| v))
            }
            Value::Node { fields, .. } => Box::new(fields.iter().map(|(_, v)| v)),
            _ => return Ok(()),
        };
        if depth >= MAX_DEPTH {
            return Err(nesting_error());
        }
        children
            .into_iter()
            .try_for_each(|v| v.check_form(depth + 1))
    }

    /// What the value is, in Python's words, for messages (`dict`, `Tensor`, `NamedTuple`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "NoneType",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Array(_) => "Tensor",
            Value::Abstract(_) => "ShapeDtype",
            Value::Key(_) => "Key",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(_) => "dict",
            Value::Node { name, .. } => name,
            Value::Static(_) => "static value",
        }
    }
}

impl Tree for Value {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        let mut leaf = |l: Leaf| {
            leaves.push(l);
            TreeDef::Leaf
        };
        match self {
            Value::None => TreeDef::None,
            Value::Bool(b) => leaf(Leaf::Bool(*b)),
            Value::Int(i) => leaf(Leaf::Int(*i)),
            Value::Float(v) => leaf(Leaf::F64(*v)),
            Value::Array(t) => leaf(Leaf::Tensor(t.clone())),
            Value::Abstract(s) => leaf(Leaf::Abstract(s.clone())),
            Value::Key(k) => leaf(Leaf::Key(*k)),
            Value::Str(s) => TreeDef::Static(StaticBox::new(s.clone())),
            Value::Static(b) => TreeDef::Static(b.clone()),
            Value::List(items) => flatten_container(|| {
                TreeDef::List(items.iter().map(|v| v.flatten(leaves)).collect())
            }),
            Value::Tuple(items) => flatten_container(|| {
                TreeDef::Tuple(items.iter().map(|v| v.flatten(leaves)).collect())
            }),
            Value::Dict(entries) => {
                if mixes_key_kinds(entries) {
                    return refused(RefusalError::Type(mixed_keys_error().to_string()));
                }
                let mut sorted: Vec<&(DictKey, Value)> = entries.iter().collect();
                sorted.sort_by(|a, b| a.0.cmp(&b.0));
                flatten_container(|| {
                    TreeDef::Dict(
                        sorted
                            .into_iter()
                            .map(|(k, v)| (k.clone(), v.flatten(leaves)))
                            .collect(),
                    )
                })
            }
            Value::Node { name, fields, meta } => flatten_container(|| TreeDef::Node {
                name,
                fields: fields
                    .iter()
                    .map(|(k, v)| (*k, v.flatten(leaves)))
                    .collect(),
                meta: meta.clone(),
            }),
        }
    }

    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        let mut each = |defs: &[TreeDef]| -> Result<Vec<Value>> {
            defs.iter().map(|d| Value::unflatten(d, leaves)).collect()
        };
        Ok(match def {
            TreeDef::Leaf => match next_leaf(leaves)? {
                Leaf::Tensor(t) => Value::Array(t),
                Leaf::F64(v) => Value::Float(v),
                Leaf::Bool(b) => Value::Bool(b),
                Leaf::Int(i) => Value::Int(i),
                Leaf::Abstract(s) => Value::Abstract(s),
                Leaf::Key(k) => Value::Key(k),
            },
            TreeDef::None => Value::None,
            TreeDef::Static(b) => match b.get::<String>() {
                Some(s) => Value::Str(s),
                None => match def.refusal_here() {
                    Some(e) => return Err(e),
                    None => Value::Static(b.clone()),
                },
            },
            TreeDef::Tuple(c) => Value::Tuple(each(c)?),
            TreeDef::List(c) => Value::List(each(c)?),
            TreeDef::Dict(c) => Value::Dict(
                c.iter()
                    .map(|(k, d)| Ok((k.clone(), Value::unflatten(d, leaves)?)))
                    .collect::<Result<_>>()?,
            ),
            TreeDef::Node { name, fields, meta } => Value::Node {
                name,
                fields: fields
                    .iter()
                    .map(|(k, d)| Ok((*k, Value::unflatten(d, leaves)?)))
                    .collect::<Result<_>>()?,
                meta: meta.clone(),
            },
        })
    }

    fn to_value(&self) -> Value {
        self.clone()
    }

    /// The value itself, once it is known to have a pytree form: its containers nest at most
    /// [`MAX_DEPTH`] deep (checked before anything recursive such as `clone` walks it) and
    /// its dicts do not mix key kinds.
    fn try_to_value(&self) -> Result<Value> {
        self.check_form(0)?;
        Ok(self.clone())
    }
}

/// Whether a dict's keys mix strings and integers (TY8).
pub(super) fn mixes_key_kinds(entries: &[(DictKey, Value)]) -> bool {
    let strings = entries
        .iter()
        .filter(|(k, _)| matches!(k, DictKey::Str(_)))
        .count();
    strings != 0 && strings != entries.len()
}
