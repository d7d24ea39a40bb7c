//! Python pytrees (api.md §13): the container registry (`register_dataclass`, `register`),
//! `NamedTuple` classes, static Python values inside tree structures, and the `qb.tree`
//! functions.
//!
//! A registered or NamedTuple instance is a [`Value::Node`] whose meta entries carry the class
//! (and a `register`ed class's aux data, or a dataclass's meta fields) as [`PyStatic`] values,
//! so the class is part of every trace signature and rebuilds the instance on the way out.
//! Traversal order, path naming and structure printing are the facade's.

use crate::convert::{
    enter_container, type_name, value_from_py, value_from_py_at, value_to_py, Leaves,
};
use crate::errors::{type_error, value_error};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyList, PyTuple, PyType};
use quabla::tree::{DictKey, PathEntry, StaticBox, TreeDef, Value};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, OnceLock};

/// A hashable Python object inside a tree structure: a static argument, a class, aux data.
///
/// Equality is stricter than Python's `==` (transforms.md §2.1): the types must be the same
/// (`1`, `True` and `1.0` are different keys) and floats compare by bit pattern (`0.0` and
/// `-0.0` differ, a NaN hits its own bits), also inside tuples; other values compare by `==`.
/// The hash follows the same rule (a float's bits, not Python's `hash`, which is per object for
/// NaN) and is computed once, so an unhashable value is refused when it enters (TY4).
pub struct PyStatic {
    pub obj: Py<PyAny>,
    hash: isize,
}

impl PyStatic {
    pub fn new(obj: &Bound<'_, PyAny>) -> PyResult<PyStatic> {
        let hash = static_hash(obj).map_err(|_| {
            type_error(format!(
                "static value {} is not hashable; static values must support hash()",
                type_name(obj)
            ))
        })?;
        Ok(PyStatic {
            obj: obj.clone().unbind(),
            hash,
        })
    }
}

/// The hash of a static value under [`static_eq`]: floats by their bits, tuples by their
/// items, everything else by Python's `hash()`.
fn static_hash(obj: &Bound<'_, PyAny>) -> PyResult<isize> {
    if obj.is_exact_instance_of::<PyFloat>() {
        let bits = obj.extract::<f64>()?.to_bits();
        return Ok(bits as isize ^ (bits >> 32) as isize);
    }
    if obj.is_exact_instance_of::<PyTuple>() {
        let mut h: isize = 0x345678;
        for item in obj.try_iter()? {
            h = h.wrapping_mul(1_000_003) ^ static_hash(&item?)?;
        }
        return Ok(h);
    }
    obj.hash()
}

/// Whether two static values are the same key (see [`PyStatic`]).
fn static_eq(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> bool {
    if a.is(b) {
        return true;
    }
    if !a.get_type().is(b.get_type()) {
        return false;
    }
    if a.is_exact_instance_of::<PyFloat>() {
        return match (a.extract::<f64>(), b.extract::<f64>()) {
            (Ok(x), Ok(y)) => x.to_bits() == y.to_bits(),
            _ => false,
        };
    }
    if a.is_exact_instance_of::<PyTuple>() {
        let (Ok(a), Ok(b)) = (a.cast::<PyTuple>(), b.cast::<PyTuple>()) else {
            return false;
        };
        return a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| static_eq(&x, &y));
    }
    a.eq(b).unwrap_or(false)
}

impl Clone for PyStatic {
    fn clone(&self) -> PyStatic {
        Python::attach(|py| PyStatic {
            obj: self.obj.clone_ref(py),
            hash: self.hash,
        })
    }
}

impl PartialEq for PyStatic {
    fn eq(&self, other: &PyStatic) -> bool {
        self.hash == other.hash
            && Python::attach(|py| static_eq(self.obj.bind(py), other.obj.bind(py)))
    }
}

impl Eq for PyStatic {}

impl Hash for PyStatic {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.hash.hash(state);
    }
}

impl fmt::Debug for PyStatic {
    /// Python's `repr`, as signatures print static values (numerics.md §11).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let repr = Python::attach(|py| {
            self.obj
                .bind(py)
                .repr()
                .map(|r| r.to_string())
                .unwrap_or_else(|_| "<object>".into())
        });
        f.write_str(&repr)
    }
}

/// How a registered class is taken apart and rebuilt.
enum Registration {
    /// `register_dataclass`: data fields are children, meta fields static.
    Dataclass {
        data: Vec<&'static str>,
        meta: Vec<&'static str>,
    },
    /// `register(cls, flatten_fn, unflatten_fn)`.
    Custom {
        flatten: Py<PyAny>,
        unflatten: Py<PyAny>,
    },
}

/// Registered classes by the address of their type object (types live as long as their
/// registration, which holds a reference to them).
type Registry = Mutex<HashMap<usize, (Py<PyType>, Registration)>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A name kept for the life of the process: tree structures name nodes and fields with
/// `&'static str`, and the set of class and field names a program uses is small.
pub fn intern(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(|| Mutex::new(HashSet::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(n) = names.get(name) {
        return n;
    }
    let leaked: &'static str = Box::leak(name.to_string().into_boxed_str());
    names.insert(leaked);
    leaked
}

const CLASS: &str = "__class__";
const AUX: &str = "__aux__";

fn register_class(cls: &Bound<'_, PyType>, reg: Registration) -> PyResult<()> {
    let mut registry = registry().lock().unwrap_or_else(|e| e.into_inner());
    let key = cls.as_ptr() as usize;
    if registry.contains_key(&key) {
        return Err(value_error(format!(
            "{} is already registered as a pytree container",
            cls.name()?
        )));
    }
    registry.insert(key, (cls.clone().unbind(), reg));
    Ok(())
}

/// `qb.tree.register_dataclass` after the Python side has resolved the field lists.
#[pyfunction]
pub fn _register_dataclass(
    cls: &Bound<'_, PyType>,
    data_fields: Vec<String>,
    meta_fields: Vec<String>,
) -> PyResult<()> {
    let data = data_fields.iter().map(|f| intern(f)).collect();
    let meta = meta_fields.iter().map(|f| intern(f)).collect();
    register_class(cls, Registration::Dataclass { data, meta })
}

/// `qb.tree.register(cls, flatten_fn, unflatten_fn)`.
#[pyfunction]
pub fn register(
    cls: &Bound<'_, PyType>,
    flatten_fn: &Bound<'_, PyAny>,
    unflatten_fn: &Bound<'_, PyAny>,
) -> PyResult<()> {
    if !flatten_fn.is_callable() || !unflatten_fn.is_callable() {
        return Err(type_error(
            "register(cls, flatten_fn, unflatten_fn) needs two callables",
        ));
    }
    register_class(
        cls,
        Registration::Custom {
            flatten: flatten_fn.clone().unbind(),
            unflatten: unflatten_fn.clone().unbind(),
        },
    )
}

/// The parts of a container instance that is not a builtin: its node name, its children by
/// field name, and its static meta entries. `None` for an object that is no such container.
#[allow(clippy::type_complexity)]
fn node_parts<'py>(
    obj: &Bound<'py, PyAny>,
) -> PyResult<
    Option<(
        &'static str,
        Vec<(&'static str, Bound<'py, PyAny>)>,
        Vec<(&'static str, StaticBox)>,
    )>,
> {
    let cls = obj.get_type();
    let name = intern(&cls.name()?.to_string());
    let class_entry = (CLASS, StaticBox::new(PyStatic::new(cls.as_any())?));
    let key = cls.as_ptr() as usize;
    let found = {
        let registry = registry().lock().unwrap_or_else(|e| e.into_inner());
        registry.get(&key).map(|(_, reg)| match reg {
            Registration::Dataclass { data, meta } => Ok((data.clone(), meta.clone())),
            Registration::Custom { flatten, .. } => Err(flatten.clone_ref(obj.py())),
        })
    };
    match found {
        Some(Ok((data, meta))) => {
            let children = data
                .iter()
                .map(|f| Ok((*f, obj.getattr(*f)?)))
                .collect::<PyResult<Vec<_>>>()?;
            let mut metas = vec![class_entry];
            for f in meta {
                metas.push((f, StaticBox::new(PyStatic::new(&obj.getattr(f)?)?)));
            }
            Ok(Some((name, children, metas)))
        }
        Some(Err(flatten)) => {
            let out = flatten.bind(obj.py()).call1((obj,))?;
            let (children, aux): (Bound<'py, PyAny>, Bound<'py, PyAny>) = out
                .extract()
                .map_err(|_| type_error("flatten_fn must return a pair (children, aux_data)"))?;
            let children = children
                .try_iter()?
                .enumerate()
                .map(|(i, c)| Ok((intern(&i.to_string()), c?)))
                .collect::<PyResult<Vec<_>>>()?;
            let aux = StaticBox::new(PyStatic::new(&aux).map_err(|_| {
                type_error(format!(
                    "the aux_data of {name} must be hashable; it is part of the trace signature"
                ))
            })?);
            Ok(Some((name, children, vec![class_entry, (AUX, aux)])))
        }
        None if is_namedtuple(obj)? => {
            let fields: Vec<String> = obj.getattr("_fields")?.extract()?;
            let children = fields
                .iter()
                .map(|f| Ok((intern(f), obj.getattr(f.as_str())?)))
                .collect::<PyResult<Vec<_>>>()?;
            Ok(Some((name, children, vec![class_entry])))
        }
        None => Ok(None),
    }
}

/// The class name and data-field children of a NamedTuple or registered class instance
/// (`None` for other objects): how a `vmap` axes prefix like `Point(0, None)` is read.
#[allow(clippy::type_complexity)]
pub fn node_children<'py>(
    obj: &Bound<'py, PyAny>,
) -> PyResult<Option<(&'static str, Vec<(&'static str, Bound<'py, PyAny>)>)>> {
    Ok(node_parts(obj)?.map(|(name, children, _)| (name, children)))
}

fn is_namedtuple(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(obj.is_instance_of::<PyTuple>() && obj.get_type().hasattr("_fields")?)
}

/// A registered or NamedTuple instance, inside `depth` containers, as a tree node (`None`
/// for other objects).
pub fn node_from_py(obj: &Bound<'_, PyAny>, mode: Leaves, depth: usize) -> PyResult<Option<Value>> {
    let Some((name, children, meta)) = node_parts(obj)? else {
        return Ok(None);
    };
    let inner = enter_container(depth)?;
    let fields = children
        .into_iter()
        .map(|(f, c)| Ok((f, value_from_py_at(&c, mode, inner)?)))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(Some(Value::Node { name, fields, meta }))
}

fn meta_object<'py>(
    py: Python<'py>,
    meta: &[(&'static str, StaticBox)],
    name: &str,
) -> Option<Bound<'py, PyAny>> {
    meta.iter()
        .find(|(k, _)| *k == name)
        .and_then(|(_, b)| b.get::<PyStatic>())
        .map(|s| s.obj.bind(py).clone())
}

/// Rebuilds a class instance from its node and its children (already Python objects).
fn rebuild<'py>(
    py: Python<'py>,
    name: &str,
    fields: Vec<(&'static str, Bound<'py, PyAny>)>,
    meta: &[(&'static str, StaticBox)],
) -> PyResult<Bound<'py, PyAny>> {
    let cls = meta_object(py, meta, CLASS).ok_or_else(|| {
        type_error(format!(
            "cannot rebuild {name}: it is not a Python pytree class"
        ))
    })?;
    let key = cls.as_ptr() as usize;
    let custom = {
        let registry = registry().lock().unwrap_or_else(|e| e.into_inner());
        match registry.get(&key) {
            Some((_, Registration::Custom { unflatten, .. })) => Some(unflatten.clone_ref(py)),
            Some((_, Registration::Dataclass { .. })) => None,
            None => {
                // A NamedTuple class: positional construction.
                let args = PyTuple::new(py, fields.into_iter().map(|(_, v)| v))?;
                return cls.call1(args);
            }
        }
    };
    match custom {
        Some(unflatten) => {
            let aux = meta_object(py, meta, AUX).unwrap_or_else(|| py.None().into_bound(py));
            let children = PyList::new(py, fields.into_iter().map(|(_, v)| v))?;
            unflatten.bind(py).call1((aux, children))
        }
        None => {
            let kwargs = PyDict::new(py);
            for (k, v) in fields {
                kwargs.set_item(k, v)?;
            }
            for (k, _) in meta.iter().filter(|(k, _)| *k != CLASS) {
                if let Some(v) = meta_object(py, meta, k) {
                    kwargs.set_item(*k, v)?;
                }
            }
            cls.call((), Some(&kwargs))
        }
    }
}

/// A [`Value::Node`] of a Python class as its instance.
pub fn node_to_py(py: Python<'_>, node: Value) -> PyResult<Bound<'_, PyAny>> {
    let Value::Node { name, fields, meta } = node else {
        return Err(type_error("not a tree node"));
    };
    let fields = fields
        .into_iter()
        .map(|(k, v)| Ok((k, value_to_py(py, v)?)))
        .collect::<PyResult<Vec<_>>>()?;
    rebuild(py, name, fields, &meta)
}

/// TY7 for a container kind pytrees refuse (`OrderedDict`, list or dict subclasses,
/// unregistered dataclasses).
fn refused_container(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    let is_sub = (obj.is_instance_of::<PyList>() && !obj.is_exact_instance_of::<PyList>())
        || (obj.is_instance_of::<PyDict>() && !obj.is_exact_instance_of::<PyDict>());
    let is_dataclass = obj.get_type().hasattr("__dataclass_fields__")?;
    Ok(is_sub || is_dataclass)
}

/// Flattens a Python tree for the `qb.tree` functions: leaves are the Python objects
/// themselves (arrays, scalars and any other non-container), in the facade's traversal order.
fn flatten_objects<'py>(
    obj: &Bound<'py, PyAny>,
    leaves: &mut Vec<Bound<'py, PyAny>>,
) -> PyResult<TreeDef> {
    flatten_objects_at(obj, leaves, 0)
}

/// [`flatten_objects`] of an object inside `depth` containers (the depth limit of
/// `enter_container`).
fn flatten_objects_at<'py>(
    obj: &Bound<'py, PyAny>,
    leaves: &mut Vec<Bound<'py, PyAny>>,
    depth: usize,
) -> PyResult<TreeDef> {
    if obj.is_none() {
        return Ok(TreeDef::None);
    }
    if obj.is_exact_instance_of::<PyTuple>() || obj.is_exact_instance_of::<PyList>() {
        let inner = enter_container(depth)?;
        let children = obj
            .try_iter()?
            .map(|c| flatten_objects_at(&c?, leaves, inner))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(if obj.is_exact_instance_of::<PyTuple>() {
            TreeDef::Tuple(children)
        } else {
            TreeDef::List(children)
        });
    }
    if obj.is_exact_instance_of::<PyDict>() {
        let inner = enter_container(depth)?;
        let value = value_from_py_keys(obj.cast::<PyDict>()?)?;
        let mut out = Vec::with_capacity(value.len());
        for (k, child) in value {
            out.push((k, flatten_objects_at(&child, leaves, inner)?));
        }
        return Ok(TreeDef::Dict(out));
    }
    if let Some((name, children, meta)) = node_parts(obj)? {
        let inner = enter_container(depth)?;
        let fields = children
            .iter()
            .map(|(f, c)| Ok((*f, flatten_objects_at(c, leaves, inner)?)))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(TreeDef::Node { name, fields, meta });
    }
    if refused_container(obj)? {
        return Err(type_error(format!(
            "{} is not a supported pytree container; register it with quabla.tree.register \
             or register_dataclass",
            type_name(obj)
        )));
    }
    leaves.push(obj.clone());
    Ok(TreeDef::Leaf)
}

/// A dict's entries in sorted key order (TY8 for mixed or other keys).
fn value_from_py_keys<'py>(
    dict: &Bound<'py, PyDict>,
) -> PyResult<Vec<(DictKey, Bound<'py, PyAny>)>> {
    let mut entries = Vec::with_capacity(dict.len());
    for (k, v) in dict.iter() {
        let key = match value_from_py(&k, Leaves::Transform) {
            Ok(Value::Int(i)) => DictKey::Int(i),
            Ok(Value::Str(s)) => DictKey::Str(s),
            _ => {
                return Err(type_error(
                    "dict keys in a pytree must all be str or all be int",
                ))
            }
        };
        entries.push((key, v));
    }
    let ints = entries
        .iter()
        .filter(|(k, _)| matches!(k, DictKey::Int(_)))
        .count();
    if ints != 0 && ints != entries.len() {
        return Err(type_error(
            "dict keys in a pytree must all be str or all be int",
        ));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(entries)
}

/// Rebuilds Python containers from a structure, placing `leaves` (any Python objects) at
/// its leaf positions.
fn unflatten_objects<'py>(
    py: Python<'py>,
    def: &TreeDef,
    leaves: &mut dyn Iterator<Item = Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match def {
        TreeDef::Leaf => leaves
            .next()
            .ok_or_else(|| value_error("unflatten ran out of leaves"))?,
        TreeDef::None => py.None().into_bound(py),
        TreeDef::Static(b) => value_to_py(py, Value::Static(b.clone()))?,
        TreeDef::Tuple(c) => {
            let items = c
                .iter()
                .map(|d| unflatten_objects(py, d, leaves))
                .collect::<PyResult<Vec<_>>>()?;
            PyTuple::new(py, items)?.into_any()
        }
        TreeDef::List(c) => {
            let items = c
                .iter()
                .map(|d| unflatten_objects(py, d, leaves))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
        TreeDef::Dict(c) => {
            let dict = PyDict::new(py);
            for (k, d) in c {
                let v = unflatten_objects(py, d, leaves)?;
                match k {
                    DictKey::Int(i) => dict.set_item(i, v)?,
                    DictKey::Str(s) => dict.set_item(s, v)?,
                }
            }
            dict.into_any()
        }
        TreeDef::Node { name, fields, meta } => {
            let fields = fields
                .iter()
                .map(|(k, d)| Ok((*k, unflatten_objects(py, d, leaves)?)))
                .collect::<PyResult<Vec<_>>>()?;
            rebuild(py, name, fields, meta)?
        }
    })
}

/// `qb.tree.TreeDef`: equality and hash by structure.
#[pyclass(name = "TreeDef", module = "quabla.tree", frozen, eq, hash)]
#[derive(PartialEq, Eq, Hash)]
pub struct PyTreeDef {
    pub def: TreeDef,
}

#[pymethods]
impl PyTreeDef {
    #[getter]
    fn num_leaves(&self) -> usize {
        self.def.num_leaves()
    }

    fn unflatten<'py>(
        &self,
        py: Python<'py>,
        leaves: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        unflatten(py, self, leaves)
    }

    fn __repr__(&self) -> String {
        self.def.to_string()
    }
}

/// `flatten(tree) -> (leaves, treedef)`.
#[pyfunction]
pub fn flatten<'py>(tree: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyList>, PyTreeDef)> {
    let mut leaves = Vec::new();
    let def = flatten_objects(tree, &mut leaves)?;
    Ok((PyList::new(tree.py(), leaves)?, PyTreeDef { def }))
}

/// `unflatten(treedef, leaves)`: a wrong leaf count is `ValueError`.
#[pyfunction]
pub fn unflatten<'py>(
    py: Python<'py>,
    treedef: &PyTreeDef,
    leaves: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let items: Vec<Bound<'py, PyAny>> = leaves.try_iter()?.collect::<PyResult<_>>()?;
    let expected = treedef.def.num_leaves();
    if items.len() != expected {
        return Err(value_error(format!(
            "unflatten expected {expected} leaves, got {}",
            items.len()
        )));
    }
    unflatten_objects(py, &treedef.def, &mut items.into_iter())
}

/// `leaves(tree)`.
#[pyfunction]
pub fn leaves<'py>(tree: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    Ok(flatten(tree)?.0)
}

/// `structure(tree)`.
#[pyfunction]
pub fn structure(tree: &Bound<'_, PyAny>) -> PyResult<PyTreeDef> {
    Ok(flatten(tree)?.1)
}

/// `map(f, tree, *rest)`: `f` leafwise over trees of identical structure.
#[pyfunction]
#[pyo3(signature = (f, tree, *rest))]
pub fn map<'py>(
    f: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    rest: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = tree.py();
    let mut first = Vec::new();
    let def = flatten_objects(tree, &mut first)?;
    let mut others = Vec::new();
    for other in rest.iter() {
        let mut leaves = Vec::new();
        let d = flatten_objects(&other, &mut leaves)?;
        if d != def {
            return Err(value_error(format!(
                "pytree structures differ: {def} and {d}"
            )));
        }
        others.push(leaves);
    }
    let mut out = Vec::with_capacity(first.len());
    for (i, leaf) in first.into_iter().enumerate() {
        let mut args = vec![leaf];
        args.extend(others.iter().map(|l| l[i].clone()));
        out.push(f.call1(PyTuple::new(py, args)?)?);
    }
    unflatten_objects(py, &def, &mut out.into_iter())
}

/// `flatten_with_path(tree) -> ([(path, leaf), ...], treedef)`.
#[pyfunction]
pub fn flatten_with_path<'py>(
    tree: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyList>, PyTreeDef)> {
    let py = tree.py();
    let mut leaves = Vec::new();
    let def = flatten_objects(tree, &mut leaves)?;
    let paths = def.leaf_paths();
    let mut items = Vec::with_capacity(leaves.len());
    for (path, leaf) in paths.into_iter().zip(leaves) {
        let entries = path
            .into_iter()
            .map(|p| -> PyResult<Bound<'py, PyAny>> {
                Ok(match p {
                    PathEntry::Index(i) => i.into_pyobject(py)?.into_any(),
                    PathEntry::Key(DictKey::Int(i)) => i.into_pyobject(py)?.into_any(),
                    PathEntry::Key(DictKey::Str(s)) => s.into_pyobject(py)?.into_any(),
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        items.push(PyTuple::new(
            py,
            [PyTuple::new(py, entries)?.into_any(), leaf],
        )?);
    }
    Ok((PyList::new(py, items)?, PyTreeDef { def }))
}

/// Registers the `qb.tree` functions on `m`.
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTreeDef>()?;
    m.add_function(wrap_pyfunction!(flatten, m)?)?;
    m.add_function(wrap_pyfunction!(unflatten, m)?)?;
    m.add_function(wrap_pyfunction!(leaves, m)?)?;
    m.add_function(wrap_pyfunction!(structure, m)?)?;
    m.add_function(wrap_pyfunction!(map, m)?)?;
    m.add_function(wrap_pyfunction!(flatten_with_path, m)?)?;
    m.add_function(wrap_pyfunction!(register, m)?)?;
    m.add_function(wrap_pyfunction!(_register_dataclass, m)?)?;
    Ok(())
}
