//! Pytrees (api.md §13): nested containers of tensors and scalars that transforms take and
//! return. A value is flattened into its leaves, in traversal order, and a [`TreeDef`]
//! describing its structure; a structure and leaves unflatten back into a typed value.
//!
//! Containers: tuples (up to 8), `Vec<T>` and `[T; N]` (lists), `BTreeMap`/`HashMap` with
//! `String` keys (dicts, traversed in sorted key order), `Option<T>` (`None` is a container
//! without leaves), `()`, and structs with `#[derive(Tree)]`. Leaves: tensors and scalars
//! (`f64`, `bool`, integers). Static meta fields (`#[tree(static)]`) and [`Static`] values live
//! in the structure, so they are part of every trace signature.
//!
//! # What a flatten cannot represent
//!
//! [`Tree::flatten`] cannot fail (api.md §13 fixes `flatten(&tree) -> (Vec<Leaf>, TreeDef)`), yet
//! some values have no pytree form: containers nested more than [`MAX_DEPTH`] deep (every walk
//! over a structure recurses, so an unbounded depth would overflow the stack), an unsigned
//! integer beyond the signed 64-bit range of [`Leaf::Int`] (AR19), a [`Value::Dict`] mixing
//! string and integer keys (TY8). Such a part is flattened into a *refusal*: a static entry of
//! the structure that holds the error and has no leaves, and below which nothing is walked.
//! Every fallible consumer raises the refusal's error where it meets it: unflattening into any
//! type (through [`structure_mismatch`] or [`Value`]), [`map`], [`map_n`], transforms (which
//! unflatten their arguments and results) and `save`. The infallible `flatten`, `leaves` and
//! `structure` return the refusal inside the structure, printed as `<refused: ...>`.
//!
//! The module is split by concern: the structure ([`TreeDef`], paths, keys and leaf names) in
//! `def.rs`, the [`Tree`] implementations of the containers and scalars in `impls.rs`, static
//! values in `statics.rs`, and the dynamic [`Value`] in `value.rs`; this file holds the leaves,
//! the depth limit and refusals, the [`Tree`] trait and the free functions over trees.

mod def;
mod impls;
mod statics;
mod value;

pub(crate) use def::check_distinct_names;
pub use def::{node_from_dict, structure_mismatch, within, DictKey, PathEntry, TreeDef};
pub use impls::TreeKey;
pub use statics::{Static, StaticBox, StaticValue};
pub use value::Value;
// The helpers the submodules share (each reaches the others' through `use super::*`).
#[allow(unused_imports)]
use {def::*, impls::*, statics::*, value::*};

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use std::cell::Cell;
use std::fmt;
use std::hash::Hash;

/// One leaf of a flattened tree.
#[derive(Clone, Debug)]
pub enum Leaf {
    Tensor(Tensor),
    F64(f64),
    Bool(bool),
    Int(i64),
    /// A shape and dtype without data (`jit(f).lower(..)` arguments).
    Abstract(ShapeDtype),
    /// A random key: static in `jit`'s `static_argnums`, a TR6 error in any other position of
    /// a transform.
    Key(quabla_random::Key),
}

/// An abstract stand-in for an array argument of `jit(f).lower(..)`: shape and dtype only.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShapeDtype {
    pub shape: Vec<usize>,
    pub dtype: quabla_ir::DType,
}

impl ShapeDtype {
    pub fn new(shape: impl AsRef<[usize]>, dtype: quabla_ir::DType) -> ShapeDtype {
        ShapeDtype {
            shape: shape.as_ref().to_vec(),
            dtype,
        }
    }
}

impl Tree for ShapeDtype {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        leaves.push(Leaf::Abstract(self.clone()));
        TreeDef::Leaf
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        if *def != TreeDef::Leaf {
            return Err(mismatch("a ShapeDtype leaf", def));
        }
        match next_leaf(leaves)? {
            Leaf::Abstract(s) => Ok(s),
            Leaf::Tensor(t) => Ok(ShapeDtype::new(t.shape(), t.dtype())),
            other => Err(Error::Structure {
                message: format!(
                    "pytree structures differ: expected a ShapeDtype leaf, got {other:?}"
                ),
            }),
        }
    }
}

impl Leaf {
    /// The tensor of a tensor leaf.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Leaf::Tensor(t) => Some(t),
            _ => None,
        }
    }
}

/// The deepest nesting of containers (lists, tuples, dicts, `#[derive(Tree)]` structs) a
/// pytree may have: the depth limit of the file format (`quabla_io::MAX_DEPTH`), so every tree
/// a transform accepts can be saved. Deeper parts flatten into a refusal (module docs) whose
/// error is [`nesting_error`]; the Python package applies the same limit when it reads Python
/// containers (docs/python.md, "Limits").
pub const MAX_DEPTH: usize = quabla_io::MAX_DEPTH;

/// The error of a tree nested more than [`MAX_DEPTH`] containers deep (`ValueError` in
/// Python).
pub fn nesting_error() -> Error {
    Error::Structure {
        message: format!(
            "pytree nests containers more than {MAX_DEPTH} deep, the limit of every pytree \
             walk and of the file format; keep long chains in arrays or in flat lists"
        ),
    }
}

/// The AR19 error of an integer leaf outside the signed 64-bit range (`save`, transforms).
pub fn integer_range_error(value: impl fmt::Display) -> Error {
    Error::invalid(format!(
        "{value} is outside the signed 64-bit range of pytree and file integers"
    ))
}

/// The TY8 error of a dict mixing string and integer keys.
pub fn mixed_keys_error() -> Error {
    Error::Type {
        message: "dict keys in a pytree must all be str or all be int".into(),
    }
}

/// A part of a value that has no pytree form, kept in the structure in its place (see the
/// module documentation): the error to raise when the structure is used.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct Refusal(RefusalError);

#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) enum RefusalError {
    /// Containers nested past [`MAX_DEPTH`] ([`nesting_error`]).
    TooDeep,
    /// TY8.
    Type(String),
    /// AR19.
    Invalid(String),
}

impl Refusal {
    fn error(&self) -> Error {
        match &self.0 {
            RefusalError::TooDeep => nesting_error(),
            RefusalError::Type(m) => Error::Type { message: m.clone() },
            RefusalError::Invalid(m) => Error::invalid(m.clone()),
        }
    }
}

impl fmt::Debug for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<refused: {}>", self.error())
    }
}

/// The structure standing for a part that has no pytree form (module docs): no leaves, and
/// the refusal's error when anything fallible uses it.
pub(super) fn refused(error: RefusalError) -> TreeDef {
    TreeDef::Static(StaticBox::new(Refusal(error)))
}

thread_local! {
    /// How many containers enclose the part being flattened on this thread.
    static FLATTEN_DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Flattens one container level: `build` flattens the container's children (one level
/// deeper). Past [`MAX_DEPTH`] the container is not walked and flattens into the refusal of
/// [`nesting_error`]. Every container's `flatten` goes through here (derived impls too), so
/// the recursion of a flatten is bounded whatever the value.
#[doc(hidden)]
pub fn flatten_container(build: impl FnOnce() -> TreeDef) -> TreeDef {
    let depth = FLATTEN_DEPTH.with(Cell::get);
    if depth >= MAX_DEPTH {
        return refused(RefusalError::TooDeep);
    }
    /// Restores the depth when `build` returns or unwinds.
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = FLATTEN_DEPTH.try_with(|d| d.set(self.0));
        }
    }
    FLATTEN_DEPTH.with(|d| d.set(depth + 1));
    let _restore = Restore(depth);
    build()
}

/// A type that is a pytree.
pub trait Tree: Sized {
    /// Appends the leaves in traversal order and returns the structure.
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef;

    /// Rebuilds a value from a structure and its leaves, checking both against `Self`.
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self>;

    /// The tree as a dynamic [`Value`] (what `qb::save` writes). A [`Value`] returns itself,
    /// so a dict keeps its written order. A tree with a part that has no pytree form (module
    /// docs) gives `Value::None`; [`Tree::try_to_value`] reports it.
    fn to_value(&self) -> Value {
        self.try_to_value().unwrap_or(Value::None)
    }

    /// [`Tree::to_value`], with the error of a part that has no pytree form (too deep, an
    /// integer out of range, mixed dict keys).
    #[doc(hidden)]
    fn try_to_value(&self) -> Result<Value> {
        let (leaves, def) = flatten(self);
        def.check()?;
        Value::from_parts(&def, leaves)
    }
}

/// Disposes of a value whose structure `def` came from flattening it: dropped, except when
/// it nests past [`MAX_DEPTH`], where it is leaked instead. Dropping a recursive value
/// recurses once per level, so a transform that refuses a too-deep result of the user's
/// function (which it must then dispose of) would otherwise overflow the stack doing so.
pub(crate) fn dispose_refused<T>(value: T, def: &TreeDef) {
    if def.nests_too_deep() {
        std::mem::forget(value);
    }
}

/// Leaves and structure of a tree.
pub fn flatten<T: Tree>(tree: &T) -> (Vec<Leaf>, TreeDef) {
    let mut leaves = Vec::new();
    let def = tree.flatten(&mut leaves);
    (leaves, def)
}

/// Rebuilds a tree from a structure and leaves (TF9 on a wrong count).
pub fn unflatten<T: Tree>(def: &TreeDef, leaves: Vec<Leaf>) -> Result<T> {
    def.unflatten(leaves)
}

/// The leaves only.
pub fn leaves<T: Tree>(tree: &T) -> Vec<Leaf> {
    flatten(tree).0
}

/// The structure only.
pub fn structure<T: Tree>(tree: &T) -> TreeDef {
    flatten(tree).1
}

/// Leaves with their paths (`[Key("layers"), Index(0), Key("w")]`).
pub fn flatten_with_path<T: Tree>(tree: &T) -> (Vec<(Vec<PathEntry>, Leaf)>, TreeDef) {
    let (leaves, def) = flatten(tree);
    (def.leaf_paths().into_iter().zip(leaves).collect(), def)
}

/// Applies `f` to every tensor leaf; other leaves are kept.
pub fn map<T: Tree>(tree: &T, mut f: impl FnMut(&Tensor) -> Result<Tensor>) -> Result<T> {
    let (leaves, def) = flatten(tree);
    def.check()?;
    let mapped = leaves
        .into_iter()
        .map(|l| match l {
            Leaf::Tensor(t) => f(&t).map(Leaf::Tensor),
            other => Ok(other),
        })
        .collect::<Result<Vec<_>>>()?;
    def.unflatten(mapped)
}

/// Applies `f` leafwise over trees of identical structure (TF8 otherwise); the result has the
/// structure of the first tree.
pub fn map_n<T: Tree>(trees: &[&T], mut f: impl FnMut(&[Leaf]) -> Result<Leaf>) -> Result<T> {
    let first = trees
        .first()
        .ok_or_else(|| Error::invalid("map_n needs at least one tree"))?;
    let (_, def) = flatten(*first);
    def.check()?;
    let mut columns: Vec<Vec<Leaf>> = Vec::with_capacity(trees.len());
    for t in trees {
        let (leaves, d) = flatten(*t);
        if d != def {
            return Err(Error::Structure {
                message: format!("pytree structures differ: {def} vs {d}"),
            });
        }
        columns.push(leaves);
    }
    let out = (0..def.num_leaves())
        .map(|i| {
            let row: Vec<Leaf> = columns.iter().map(|c| c[i].clone()).collect();
            f(&row)
        })
        .collect::<Result<Vec<_>>>()?;
    def.unflatten(out)
}
