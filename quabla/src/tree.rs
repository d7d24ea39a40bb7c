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

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use quabla_ir::HostData;
use std::any::Any;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

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
struct Refusal(RefusalError);

#[derive(Clone, PartialEq, Eq, Hash)]
enum RefusalError {
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
fn refused(error: RefusalError) -> TreeDef {
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

/// A static (hashable) value carried in a tree structure: a `#[tree(static)]` field or a
/// [`Static`] leaf. Compared by `==` and hashed by `Hash` of the concrete type.
pub trait StaticValue: Any + fmt::Debug + Send + Sync {
    #[doc(hidden)]
    fn dyn_eq(&self, other: &dyn StaticValue) -> bool;
    #[doc(hidden)]
    fn dyn_hash(&self, state: &mut dyn Hasher);
    #[doc(hidden)]
    fn as_any(&self) -> &dyn Any;
}

impl<T: Any + fmt::Debug + Hash + Eq + Send + Sync> StaticValue for T {
    fn dyn_eq(&self, other: &dyn StaticValue) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }
    fn dyn_hash(&self, mut state: &mut dyn Hasher) {
        std::any::TypeId::of::<T>().hash(&mut state);
        self.hash(&mut state);
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A shared static value inside a [`TreeDef`].
#[derive(Clone)]
pub struct StaticBox(pub Arc<dyn StaticValue>);

impl StaticBox {
    pub fn new<T: StaticValue>(v: T) -> StaticBox {
        StaticBox(Arc::new(v))
    }

    /// The value, if it has type `T`.
    pub fn get<T: Any + Clone>(&self) -> Option<T> {
        self.0.as_any().downcast_ref::<T>().cloned()
    }

    /// The value as type `T`, also when it was read back from a file: a file stores every
    /// integer as an `i64`, so an `i64` box converts to any Rust integer type that holds its
    /// value (what `load_as` needs to restore a `#[tree(static)] n: usize` field).
    pub fn get_saved<T: Any + Clone>(&self) -> Option<T> {
        if let Some(v) = self.get::<T>() {
            return Some(v);
        }
        let i = self.get::<i64>()?;
        // Dispatch on the requested type first, then convert: a value that does not fit one
        // integer type must not stop the search for the one `T` is.
        macro_rules! convert {
            ($($t:ty),*) => {$(
                if std::any::TypeId::of::<T>() == std::any::TypeId::of::<$t>() {
                    let v = <$t>::try_from(i).ok()?;
                    return (&v as &dyn Any).downcast_ref::<T>().cloned();
                }
            )*};
        }
        convert!(i8, i16, i32, isize, u8, u16, u32, u64, usize, i128, u128);
        None
    }

    /// The value as a file can hold it (a string, an integer or a bool); `None` for a value
    /// of another type, AR19 for an integer outside the signed 64-bit range.
    pub(crate) fn saved_value(&self) -> Result<Option<Value>> {
        if let Some(s) = self.get::<String>() {
            return Ok(Some(Value::Str(s)));
        }
        if let Some(b) = self.get::<bool>() {
            return Ok(Some(Value::Bool(b)));
        }
        let any = self.0.as_any();
        macro_rules! int {
            ($($t:ty),*) => {$(
                if let Some(v) = any.downcast_ref::<$t>() {
                    return match i64::try_from(*v) {
                        Ok(i) => Ok(Some(Value::Int(i))),
                        Err(_) => Err(integer_range_error(v)),
                    };
                }
            )*};
        }
        int!(i64, i8, i16, i32, isize, u8, u16, u32, u64, usize, i128, u128);
        if let Some(s) = any.downcast_ref::<&'static str>() {
            return Ok(Some(Value::Str((*s).to_string())));
        }
        Ok(None)
    }
}

impl PartialEq for StaticBox {
    fn eq(&self, other: &Self) -> bool {
        self.0.dyn_eq(other.0.as_ref())
    }
}

impl Eq for StaticBox {}

impl Hash for StaticBox {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.dyn_hash(state);
    }
}

impl fmt::Debug for StaticBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A key of a pytree dict: the keys of one dict are all strings or all integers (api.md §13),
/// and a dict is traversed in sorted key order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DictKey {
    Int(i64),
    Str(String),
}

impl From<&str> for DictKey {
    fn from(k: &str) -> DictKey {
        DictKey::Str(k.to_string())
    }
}

impl From<String> for DictKey {
    fn from(k: String) -> DictKey {
        DictKey::Str(k)
    }
}

impl From<i64> for DictKey {
    fn from(k: i64) -> DictKey {
        DictKey::Int(k)
    }
}

impl fmt::Display for DictKey {
    /// The key as a path entry: the string itself, or the integer in decimal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DictKey::Str(k) => f.write_str(k),
            DictKey::Int(k) => write!(f, "{k}"),
        }
    }
}

impl DictKey {
    /// Python's `repr` of the key, as `TreeDef` prints it: `'a'` or `1`.
    fn repr(&self) -> String {
        match self {
            DictKey::Str(k) => format!("'{k}'"),
            DictKey::Int(k) => k.to_string(),
        }
    }
}

/// The structure of a tree: containers, dict keys, field names and static values; `*` marks a
/// leaf. Equality and hashing are by structure.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TreeDef {
    Leaf,
    None,
    Tuple(Vec<TreeDef>),
    List(Vec<TreeDef>),
    /// Entries in sorted key order.
    Dict(Vec<(DictKey, TreeDef)>),
    /// A `#[derive(Tree)]` struct: data fields in declaration order, then static meta fields.
    Node {
        name: &'static str,
        fields: Vec<(&'static str, TreeDef)>,
        meta: Vec<(&'static str, StaticBox)>,
    },
    /// A [`Static`] value: no leaves.
    Static(StaticBox),
}

/// One step of a leaf path: a dict key or field name, or a position.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathEntry {
    /// A dict key or a field name.
    Key(DictKey),
    Index(usize),
}

impl fmt::Display for PathEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathEntry::Key(k) => write!(f, "{k}"),
            PathEntry::Index(i) => write!(f, "{i}"),
        }
    }
}

impl TreeDef {
    /// This structure's refusal, when it is one (module docs).
    fn as_refusal(&self) -> Option<&Refusal> {
        match self {
            TreeDef::Static(b) => b.0.as_any().downcast_ref::<Refusal>(),
            _ => None,
        }
    }

    /// The error of this structure when it is a refusal (module docs).
    fn refusal_here(&self) -> Option<Error> {
        self.as_refusal().map(Refusal::error)
    }

    /// Whether some part of this structure nests past [`MAX_DEPTH`].
    fn nests_too_deep(&self) -> bool {
        if let Some(r) = self.as_refusal() {
            return r.0 == RefusalError::TooDeep;
        }
        match self {
            TreeDef::Leaf | TreeDef::None | TreeDef::Static(_) => false,
            TreeDef::Tuple(c) | TreeDef::List(c) => c.iter().any(TreeDef::nests_too_deep),
            TreeDef::Dict(c) => c.iter().any(|(_, d)| d.nests_too_deep()),
            TreeDef::Node { fields, .. } => fields.iter().any(|(_, d)| d.nests_too_deep()),
        }
    }

    /// The error of the first refusal in this structure (module docs), in flatten order:
    /// what a consumer raises before it uses the structure.
    pub fn check(&self) -> Result<()> {
        if let Some(e) = self.refusal_here() {
            return Err(e);
        }
        match self {
            TreeDef::Leaf | TreeDef::None | TreeDef::Static(_) => Ok(()),
            TreeDef::Tuple(c) | TreeDef::List(c) => c.iter().try_for_each(TreeDef::check),
            TreeDef::Dict(c) => c.iter().try_for_each(|(_, d)| d.check()),
            TreeDef::Node { fields, .. } => fields.iter().try_for_each(|(_, d)| d.check()),
        }
    }

    /// Number of leaves.
    pub fn num_leaves(&self) -> usize {
        match self {
            TreeDef::Leaf => 1,
            TreeDef::None | TreeDef::Static(_) => 0,
            TreeDef::Tuple(c) | TreeDef::List(c) => c.iter().map(TreeDef::num_leaves).sum(),
            TreeDef::Dict(c) => c.iter().map(|(_, d)| d.num_leaves()).sum(),
            TreeDef::Node { fields, .. } => fields.iter().map(|(_, d)| d.num_leaves()).sum(),
        }
    }

    /// The path of every leaf, in flatten order.
    pub fn leaf_paths(&self) -> Vec<Vec<PathEntry>> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<PathEntry>, out: &mut Vec<Vec<PathEntry>>) {
        let mut child = |entry: PathEntry, d: &TreeDef, prefix: &mut Vec<PathEntry>| {
            prefix.push(entry);
            d.collect_paths(prefix, out);
            prefix.pop();
        };
        match self {
            TreeDef::Leaf => out.push(prefix.clone()),
            TreeDef::None | TreeDef::Static(_) => {}
            TreeDef::Tuple(c) | TreeDef::List(c) => {
                for (i, d) in c.iter().enumerate() {
                    child(PathEntry::Index(i), d, prefix);
                }
            }
            TreeDef::Dict(c) => {
                for (k, d) in c {
                    child(PathEntry::Key(k.clone()), d, prefix);
                }
            }
            TreeDef::Node { fields, .. } => {
                for (k, d) in fields {
                    child(PathEntry::Key(DictKey::from(*k)), d, prefix);
                }
            }
        }
    }

    /// This structure with its `k`-th leaf (in flatten order) replaced by `leaf(k)`: the one
    /// leaf map behind every rewrite of a result structure (gradient trees with `None` for
    /// undifferentiated leaves, Jacobian blocks nested inside the output structure).
    pub fn map_leaves(&self, leaf: &mut dyn FnMut(usize) -> TreeDef) -> TreeDef {
        self.map_leaves_from(leaf, &mut 0)
    }

    fn map_leaves_from(&self, leaf: &mut dyn FnMut(usize) -> TreeDef, next: &mut usize) -> TreeDef {
        let mut map = |d: &TreeDef| d.map_leaves_from(leaf, next);
        match self {
            TreeDef::Leaf => {
                *next += 1;
                leaf(*next - 1)
            }
            TreeDef::None | TreeDef::Static(_) => self.clone(),
            TreeDef::Tuple(c) => TreeDef::Tuple(c.iter().map(&mut map).collect()),
            TreeDef::List(c) => TreeDef::List(c.iter().map(&mut map).collect()),
            TreeDef::Dict(c) => TreeDef::Dict(c.iter().map(|(k, d)| (k.clone(), map(d))).collect()),
            TreeDef::Node { name, fields, meta } => TreeDef::Node {
                name,
                fields: fields.iter().map(|(k, d)| (*k, map(d))).collect(),
                meta: meta.clone(),
            },
        }
    }

    /// This structure keeping the leaves flagged in `keep` and with `None` for the others.
    pub fn keep_leaves(&self, keep: &[bool]) -> TreeDef {
        self.map_leaves(&mut |k| {
            if keep.get(k).copied().unwrap_or(false) {
                TreeDef::Leaf
            } else {
                TreeDef::None
            }
        })
    }

    /// The positional arguments of an argument tree: a tuple's elements, or the whole tree as
    /// the only argument.
    pub fn positional_args(&self) -> &[TreeDef] {
        match self {
            TreeDef::Tuple(c) => c,
            other => std::slice::from_ref(other),
        }
    }

    /// For each leaf in flatten order, the positional argument it belongs to (see
    /// [`TreeDef::positional_args`]); computed without allocating.
    pub fn leaf_args(&self) -> impl Iterator<Item = usize> + '_ {
        self.positional_args()
            .iter()
            .enumerate()
            .flat_map(|(i, d)| std::iter::repeat_n(i, d.num_leaves()))
    }

    /// The name of each leaf for plan inputs and messages: its path joined with `/`, rooted at
    /// `arg_names[i]` (or `arg{i}`) for the `i`-th positional argument (transforms.md §15.2).
    ///
    /// Each part is escaped so that the join cannot collide: a `/` inside a key or name is
    /// written `~1` and a `~` is written `~0` (as in a JSON pointer), so `{"a": [{"b": x}],
    /// "a/0/b": y}` names its leaves `arg0/a/0/b` and `arg0/a~10~1b`. Within one structure
    /// two leaves then always get different names; only the roots can repeat (duplicate
    /// `arg_names`), which [`check_distinct_names`] refuses where names matter.
    pub fn leaf_names(&self, arg_names: &[String]) -> Vec<String> {
        let root = |i: usize| match arg_names.get(i) {
            Some(name) => escape_name_part(name),
            None => format!("arg{i}"),
        };
        let join = |root: String, rest: &[PathEntry]| {
            let mut parts = vec![root];
            parts.extend(rest.iter().map(|p| escape_name_part(&p.to_string())));
            parts.join("/")
        };
        self.leaf_paths()
            .into_iter()
            .map(|p| match (self, p.split_first()) {
                (TreeDef::Tuple(_), Some((PathEntry::Index(i), rest))) => join(root(*i), rest),
                _ => join(root(0), &p),
            })
            .collect()
    }

    /// Rebuilds a value of type `T` from this structure and leaves (TF9 on a count mismatch).
    pub fn unflatten<T: Tree>(&self, leaves: Vec<Leaf>) -> Result<T> {
        let expected = self.num_leaves();
        if leaves.len() != expected {
            return Err(Error::Structure {
                message: format!("unflatten expected {expected} leaves, got {}", leaves.len()),
            });
        }
        let mut it = leaves.into_iter();
        T::unflatten(self, &mut it)
    }

    /// Prints the structure with each leaf replaced by `leaf(i)`.
    pub fn fmt_with(&self, leaf: &mut dyn FnMut(usize) -> String) -> String {
        let mut n = 0;
        self.fmt_inner(leaf, &mut n)
    }

    fn fmt_inner(&self, leaf: &mut dyn FnMut(usize) -> String, n: &mut usize) -> String {
        let join = |items: Vec<String>| items.join(", ");
        match self {
            TreeDef::Leaf => {
                *n += 1;
                leaf(*n - 1)
            }
            TreeDef::None => "None".into(),
            TreeDef::Static(v) => format!("{v:?}"),
            TreeDef::Tuple(c) => {
                let items: Vec<String> = c.iter().map(|d| d.fmt_inner(leaf, n)).collect();
                if items.len() == 1 {
                    format!("({},)", items[0])
                } else {
                    format!("({})", join(items))
                }
            }
            TreeDef::List(c) => format!(
                "[{}]",
                join(c.iter().map(|d| d.fmt_inner(leaf, n)).collect())
            ),
            TreeDef::Dict(c) => format!(
                "{{{}}}",
                join(
                    c.iter()
                        .map(|(k, d)| format!("{}: {}", k.repr(), d.fmt_inner(leaf, n)))
                        .collect()
                )
            ),
            TreeDef::Node { name, fields, meta } => {
                let mut items: Vec<String> = fields
                    .iter()
                    .map(|(k, d)| format!("{k}={}", d.fmt_inner(leaf, n)))
                    .collect();
                items.extend(meta.iter().map(|(k, v)| format!("{k}={v:?}")));
                format!("{name}({})", join(items))
            }
        }
    }
}

impl Tree for quabla_random::Key {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        leaves.push(Leaf::Key(*self));
        TreeDef::Leaf
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        if *def != TreeDef::Leaf {
            return Err(mismatch("a key leaf", def));
        }
        match next_leaf(leaves)? {
            Leaf::Key(k) => Ok(k),
            other => Err(Error::Structure {
                message: format!("pytree structures differ: expected a Key leaf, got {other:?}"),
            }),
        }
    }
}

/// One part of a leaf name with `~` written `~0` and `/` written `~1`, so that joining parts
/// with `/` is unambiguous.
fn escape_name_part(part: &str) -> String {
    if !part.contains(['~', '/']) {
        return part.to_string();
    }
    part.replace('~', "~0").replace('/', "~1")
}

/// Refuses plan input names that repeat (`names[k]` for each `k` where `is_input(k)`): the
/// inputs of a `Program` are given by name, so each name must pick exactly one input. With
/// escaped paths ([`TreeDef::leaf_names`]) only the roots can repeat: two `arg_names` alike,
/// or a name equal to the default `arg{i}` of another position.
pub(crate) fn check_distinct_names(
    names: &[String],
    mut is_input: impl FnMut(usize) -> bool,
) -> Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(names.len());
    for (k, name) in names.iter().enumerate() {
        if is_input(k) && !seen.insert(name.as_str()) {
            return Err(Error::invalid(format!(
                "two inputs are both named {name}; give every positional argument a \
                 distinct name (jit arg_names, or the function's parameter names)"
            )));
        }
    }
    Ok(())
}

/// `TreeDef({'a': [*, None], 'b': *})`.
impl fmt::Display for TreeDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TreeDef({})", self.fmt_with(&mut |_| "*".into()))
    }
}

/// The TF8 error for a structure that does not fit the expected type (used by derived impls).
pub fn structure_mismatch(expected: &str, def: &TreeDef) -> Error {
    mismatch(expected, def)
}

/// TF8, or the refusal's own error when `def` is a refusal (a part of the value that had no
/// pytree form): every typed `unflatten` reports a structure it cannot use through here.
fn mismatch(expected: &str, def: &TreeDef) -> Error {
    if let Some(e) = def.refusal_here() {
        return e;
    }
    Error::Structure {
        message: format!("{MISMATCH}: expected {expected}, got {def}"),
    }
}

const MISMATCH: &str = "pytree structures differ";

/// Places a structure mismatch found inside a container at the container's entry, so that
/// the message names the first path that differs: `pytree structures differ at
/// ['params']['w']: expected a tensor leaf, got None`. Other errors pass unchanged.
#[doc(hidden)]
pub fn within(entry: impl Into<PathEntry>) -> impl FnOnce(Error) -> Error {
    move |e| match e {
        Error::Structure { message } if message.starts_with(MISMATCH) => {
            let step = match entry.into() {
                PathEntry::Key(k) => format!("[{}]", k.repr()),
                PathEntry::Index(i) => format!("[{i}]"),
            };
            let rest = &message[MISMATCH.len()..];
            let message = match rest.strip_prefix(" at ") {
                Some(path) => format!("{MISMATCH} at {step}{path}"),
                None => format!("{MISMATCH} at {step}{rest}"),
            };
            Error::Structure { message }
        }
        other => other,
    }
}

impl From<usize> for PathEntry {
    fn from(i: usize) -> PathEntry {
        PathEntry::Index(i)
    }
}

impl From<&str> for PathEntry {
    fn from(k: &str) -> PathEntry {
        PathEntry::Key(DictKey::from(k))
    }
}

impl From<&DictKey> for PathEntry {
    fn from(k: &DictKey) -> PathEntry {
        PathEntry::Key(k.clone())
    }
}

/// A dict structure read as the `#[derive(Tree)]` struct `name` (used by derived impls): a
/// file stores a struct as a dict of its fields, so `load_as` meets a dict whose string keys
/// are exactly the struct's data and static field names. Returns the struct's own structure
/// and its leaves in field order (the dict's leaves come in sorted key order), or `None` when
/// `def` is not such a dict.
#[doc(hidden)]
pub fn node_from_dict(
    def: &TreeDef,
    name: &'static str,
    data_fields: &[&'static str],
    meta_fields: &[&'static str],
    leaves: &mut dyn Iterator<Item = Leaf>,
) -> Result<Option<(TreeDef, Vec<Leaf>)>> {
    let TreeDef::Dict(entries) = def else {
        return Ok(None);
    };
    let named = |field: &str| {
        entries
            .iter()
            .position(|(k, _)| matches!(k, DictKey::Str(s) if s == field))
    };
    if entries.len() != data_fields.len() + meta_fields.len()
        || data_fields
            .iter()
            .chain(meta_fields)
            .any(|f| named(f).is_none())
    {
        return Ok(None);
    }
    let mut per_entry: Vec<Vec<Leaf>> = Vec::with_capacity(entries.len());
    for (_, d) in entries {
        let n = d.num_leaves();
        let taken: Vec<Leaf> = leaves.take(n).collect();
        if taken.len() != n {
            return Err(Error::Structure {
                message: "unflatten ran out of leaves".into(),
            });
        }
        per_entry.push(taken);
    }
    let mut fields = Vec::with_capacity(data_fields.len());
    let mut ordered = Vec::new();
    for f in data_fields {
        let i = named(f).unwrap_or_default();
        fields.push((*f, entries[i].1.clone()));
        ordered.append(&mut per_entry[i]);
    }
    let mut meta = Vec::with_capacity(meta_fields.len());
    for f in meta_fields {
        let i = named(f).unwrap_or_default();
        let value = match (&entries[i].1, per_entry[i].as_slice()) {
            (TreeDef::Static(b), _) => b.clone(),
            (TreeDef::Leaf, [Leaf::Int(v)]) => StaticBox::new(*v),
            (TreeDef::Leaf, [Leaf::Bool(v)]) => StaticBox::new(*v),
            (other, _) => {
                return Err(within(*f)(mismatch(
                    &format!("the static field {f} of {name} (a string, an integer or a bool)"),
                    other,
                )))
            }
        };
        meta.push((*f, value));
    }
    Ok(Some((TreeDef::Node { name, fields, meta }, ordered)))
}

fn next_leaf(leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Leaf> {
    leaves.next().ok_or_else(|| Error::Structure {
        message: "unflatten ran out of leaves".into(),
    })
}

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

impl Tree for Tensor {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        leaves.push(Leaf::Tensor(self.clone()));
        TreeDef::Leaf
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        if *def != TreeDef::Leaf {
            return Err(mismatch("a tensor leaf", def));
        }
        match next_leaf(leaves)? {
            Leaf::Tensor(t) => Ok(t),
            Leaf::F64(v) => Ok(Tensor::scalar_f64(v)),
            Leaf::Bool(v) => Ok(Tensor::scalar_bool(v)),
            Leaf::Int(v) => Ok(Tensor::scalar_f64(v as f64)),
            Leaf::Abstract(s) => Err(Error::Structure {
                message: format!("expected a tensor, got the abstract value {s:?}"),
            }),
            Leaf::Key(k) => Err(Error::Structure {
                message: format!("expected a tensor, got the random key {k}"),
            }),
        }
    }
}

/// A dynamic leaf: whatever leaf stands at this position (a tensor or a scalar).
impl Tree for Leaf {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        leaves.push(self.clone());
        TreeDef::Leaf
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        if *def != TreeDef::Leaf {
            return Err(mismatch("a leaf", def));
        }
        next_leaf(leaves)
    }
}

impl Tree for f64 {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        leaves.push(Leaf::F64(*self));
        TreeDef::Leaf
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        if *def != TreeDef::Leaf {
            return Err(mismatch("an f64 leaf", def));
        }
        match next_leaf(leaves)? {
            Leaf::F64(v) => Ok(v),
            Leaf::Int(v) => Ok(v as f64),
            Leaf::Tensor(t) if t.ndim() == 0 => t.item(),
            other => Err(Error::Structure {
                message: format!("pytree structures differ: expected an f64 leaf, got {other:?}"),
            }),
        }
    }
}

impl Tree for bool {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        leaves.push(Leaf::Bool(*self));
        TreeDef::Leaf
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        if *def != TreeDef::Leaf {
            return Err(mismatch("a bool leaf", def));
        }
        match next_leaf(leaves)? {
            Leaf::Bool(v) => Ok(v),
            Leaf::Tensor(t) if t.ndim() == 0 => t.item_bool(),
            other => Err(Error::Structure {
                message: format!("pytree structures differ: expected a bool leaf, got {other:?}"),
            }),
        }
    }
}

macro_rules! int_leaf {
    ($($t:ty),*) => {$(
        impl Tree for $t {
            /// An integer leaf; an unsigned value beyond `i64::MAX` has no leaf form and
            /// flattens into the AR19 refusal (never a wrapped negative number).
            fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
                match i64::try_from(*self) {
                    Ok(v) => {
                        leaves.push(Leaf::Int(v));
                        TreeDef::Leaf
                    }
                    Err(_) => refused(RefusalError::Invalid(integer_range_error(self).to_string())),
                }
            }
            fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
                if *def != TreeDef::Leaf {
                    return Err(mismatch("an integer leaf", def));
                }
                match next_leaf(leaves)? {
                    Leaf::Int(v) => <$t>::try_from(v).map_err(|_| Error::invalid(format!(
                        "the integer {v} is out of range for {} (from {} to {})",
                        stringify!($t), <$t>::MIN, <$t>::MAX
                    ))),
                    other => Err(Error::Structure {
                        message: format!("pytree structures differ: expected an integer leaf, got {other:?}"),
                    }),
                }
            }
        }
    )*};
}

int_leaf!(i32, i64, usize, u32, u64);

impl Tree for () {
    fn flatten(&self, _: &mut Vec<Leaf>) -> TreeDef {
        TreeDef::None
    }
    fn unflatten(def: &TreeDef, _: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        match def {
            TreeDef::None => Ok(()),
            other => Err(mismatch("None", other)),
        }
    }
}

impl<T: Tree> Tree for Option<T> {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        match self {
            None => TreeDef::None,
            Some(v) => v.flatten(leaves),
        }
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        match def {
            TreeDef::None => Ok(None),
            other => T::unflatten(other, leaves).map(Some),
        }
    }
}

impl<T: Tree> Tree for Vec<T> {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        flatten_container(|| TreeDef::List(self.iter().map(|v| v.flatten(leaves)).collect()))
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        match def {
            TreeDef::List(children) => children
                .iter()
                .enumerate()
                .map(|(i, d)| T::unflatten(d, leaves).map_err(within(i)))
                .collect(),
            other => Err(mismatch("a list", other)),
        }
    }
}

impl<T: Tree, const N: usize> Tree for [T; N] {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        flatten_container(|| TreeDef::List(self.iter().map(|v| v.flatten(leaves)).collect()))
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        let v: Vec<T> = Vec::unflatten(def, leaves)?;
        let n = v.len();
        v.try_into().map_err(|_| Error::Structure {
            message: format!("pytree structures differ: expected a list of {N}, got {n} entries"),
        })
    }
}

/// The Rust types that are keys of pytree dicts: `String` and `i64` (api.md §13).
pub trait TreeKey: Ord + Clone {
    fn to_key(&self) -> DictKey;
    fn from_key(key: &DictKey) -> Option<Self>;
}

impl TreeKey for String {
    fn to_key(&self) -> DictKey {
        DictKey::Str(self.clone())
    }
    fn from_key(key: &DictKey) -> Option<String> {
        match key {
            DictKey::Str(k) => Some(k.clone()),
            DictKey::Int(_) => None,
        }
    }
}

impl TreeKey for i64 {
    fn to_key(&self) -> DictKey {
        DictKey::Int(*self)
    }
    fn from_key(key: &DictKey) -> Option<i64> {
        match key {
            DictKey::Int(k) => Some(*k),
            DictKey::Str(_) => None,
        }
    }
}

/// The entries of a dict structure rebuilt as `(K, T)` pairs.
fn dict_entries<K: TreeKey, T: Tree>(
    def: &TreeDef,
    leaves: &mut dyn Iterator<Item = Leaf>,
) -> Result<Vec<(K, T)>> {
    match def {
        TreeDef::Dict(children) => children
            .iter()
            .map(|(k, d)| {
                let key = K::from_key(k).ok_or_else(|| {
                    mismatch(
                        &format!("a dict keyed by {}", std::any::type_name::<K>()),
                        def,
                    )
                })?;
                Ok((key, T::unflatten(d, leaves).map_err(within(k))?))
            })
            .collect(),
        other => Err(mismatch("a dict", other)),
    }
}

impl<K: TreeKey, T: Tree> Tree for BTreeMap<K, T> {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        flatten_container(|| {
            TreeDef::Dict(
                self.iter()
                    .map(|(k, v)| (k.to_key(), v.flatten(leaves)))
                    .collect(),
            )
        })
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        Ok(dict_entries(def, leaves)?.into_iter().collect())
    }
}

impl<K: TreeKey + Hash, T: Tree, S: std::hash::BuildHasher + Default> Tree for HashMap<K, T, S> {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        let mut keys: Vec<&K> = self.keys().collect();
        keys.sort();
        flatten_container(|| {
            TreeDef::Dict(
                keys.into_iter()
                    .map(|k| (k.to_key(), self[k].flatten(leaves)))
                    .collect(),
            )
        })
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        Ok(dict_entries(def, leaves)?.into_iter().collect())
    }
}

macro_rules! tuple_tree {
    ($(($($t:ident $i:tt),+))*) => {$(
        impl<$($t: Tree),+> Tree for ($($t,)+) {
            fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
                flatten_container(|| TreeDef::Tuple(vec![$(self.$i.flatten(leaves)),+]))
            }
            fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
                const N: usize = [$($i),+].len();
                match def {
                    TreeDef::Tuple(c) if c.len() == N => Ok((
                        $($t::unflatten(&c[$i], leaves).map_err(within($i as usize))?,)+
                    )),
                    other => Err(mismatch(&format!("a tuple of {N}"), other)),
                }
            }
        }
    )*};
}

tuple_tree! {
    (A 0)
    (A 0, B 1)
    (A 0, B 1, C 2)
    (A 0, B 1, C 2, D 3)
    (A 0, B 1, C 2, D 3, E 4)
    (A 0, B 1, C 2, D 3, E 4, F 5)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7)
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
fn mixes_key_kinds(entries: &[(DictKey, Value)]) -> bool {
    let strings = entries
        .iter()
        .filter(|(k, _)| matches!(k, DictKey::Str(_)))
        .count();
    strings != 0 && strings != entries.len()
}

/// A value that is always static: part of the structure (and so of every signature), never a
/// leaf. `qb::Static(3usize)` passes a loop count to a jitted function.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Static<T>(pub T);

impl<T: StaticValue + Clone> Tree for Static<T> {
    fn flatten(&self, _: &mut Vec<Leaf>) -> TreeDef {
        TreeDef::Static(StaticBox::new(self.0.clone()))
    }
    fn unflatten(def: &TreeDef, _: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        match def {
            TreeDef::Static(v) => v
                .get::<T>()
                .map(Static)
                .ok_or_else(|| mismatch("a static value of another type", def)),
            other => Err(mismatch("a static value", other)),
        }
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
