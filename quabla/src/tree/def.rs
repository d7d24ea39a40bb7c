//! The structure of a flattened tree: [`TreeDef`], with its leaf paths and leaf names (each
//! part escaped so that names never collide), dict keys, and the structural errors.

use super::*;
use crate::error::{Error, Result};
use std::fmt;
use std::hash::Hash;

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
    pub(super) fn refusal_here(&self) -> Option<Error> {
        self.as_refusal().map(Refusal::error)
    }

    /// Whether some part of this structure nests past [`MAX_DEPTH`].
    pub(super) fn nests_too_deep(&self) -> bool {
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

/// One part of a leaf name with `~` written `~0` and `/` written `~1`, so that joining parts
/// with `/` is unambiguous.
pub(super) fn escape_name_part(part: &str) -> String {
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
pub(super) fn mismatch(expected: &str, def: &TreeDef) -> Error {
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

pub(super) fn next_leaf(leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Leaf> {
    leaves.next().ok_or_else(|| Error::Structure {
        message: "unflatten ran out of leaves".into(),
    })
}
