//! Python objects to facade values and back: arrays (`asarray`, numpy.md §1.3's dtype
//! inference), operands (Python numbers stay weak scalars), dtypes, axes, and pytrees of
//! Python containers as [`qb::tree::Value`]s.
//!
//! Nothing here computes: NumPy and buffer-protocol data are read through NumPy or
//! `memoryview` into a contiguous native-endian copy, and every array operation is the
//! facade's.

use crate::errors::{type_error, value_error, OrRaise};
use crate::tensor::{wrap, PyDType, PyTensor, PyTensorView};
use crate::tree::{node_from_py, node_to_py, PyStatic};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use quabla as qb;
use quabla::tree::{DictKey, Value};

/// The TY1 message for an object `asarray` cannot read.
fn not_convertible(obj: &Bound<'_, PyAny>) -> PyErr {
    type_error(format!(
        "cannot convert {} to a quabla Tensor; accepted inputs are numbers, nested lists or \
         tuples of numbers, NumPy arrays, and objects implementing the buffer protocol or \
         __array__",
        type_name(obj)
    ))
}

/// `type(obj).__name__`, read without `str()` (which would run pending signal handlers and
/// lose what they raise).
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "object".into())
}

/// A dtype argument: one of the three dtype objects, or its name (`"float32"`).
pub fn dtype_arg(obj: &Bound<'_, PyAny>) -> PyResult<qb::DType> {
    if let Ok(d) = obj.cast::<PyDType>() {
        return Ok(d.get().dtype);
    }
    if let Ok(s) = obj.extract::<String>() {
        return match s.as_str() {
            "float64" | "f64" => Ok(qb::F64),
            "float32" | "f32" => Ok(qb::F32),
            "bool" | "bool_" => Ok(qb::BOOL),
            other => Err(type_error(format!(
                "dtype must be quabla.float64, quabla.float32 or quabla.bool_, got {other:?}"
            ))),
        };
    }
    // NumPy dtypes and scalar types name themselves.
    if let Ok(name) = obj
        .getattr("name")
        .or_else(|_| obj.getattr("__name__"))
        .and_then(|n| n.extract::<String>())
    {
        match name.as_str() {
            "float64" => return Ok(qb::F64),
            "float32" => return Ok(qb::F32),
            "bool" | "bool_" => return Ok(qb::BOOL),
            _ => {}
        }
    }
    Err(type_error(format!(
        "dtype must be quabla.float64, quabla.float32 or quabla.bool_, got {}",
        obj.repr().map(|r| r.to_string()).unwrap_or_default()
    )))
}

/// An optional dtype argument (`None` is no dtype).
pub fn opt_dtype(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<qb::DType>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => dtype_arg(o).map(Some),
    }
}

/// `asarray(obj, dtype)`: the tensor itself when it already has the dtype, otherwise a new
/// tensor (numerics.md §1.3 for the dtype of imported data).
pub fn asarray(obj: &Bound<'_, PyAny>, dtype: Option<qb::DType>) -> PyResult<qb::Tensor> {
    let t = to_tensor(obj)?;
    match dtype {
        Some(d) if d != t.dtype() => t.astype(d).or_raise(),
        _ => Ok(t),
    }
}

/// Any array-like object as a tensor, in its own dtype.
pub fn to_tensor(obj: &Bound<'_, PyAny>) -> PyResult<qb::Tensor> {
    if let Ok(t) = obj.cast::<PyTensor>() {
        return Ok(t.get().t.clone());
    }
    if let Ok(v) = obj.cast::<PyTensorView>() {
        return v.get().v.to_tensor().or_raise();
    }
    if obj.is_instance_of::<PyBool>() {
        return qb::array(obj.extract::<bool>()?).or_raise();
    }
    if obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyFloat>() {
        return qb::array(obj.extract::<f64>()?).or_raise();
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        return from_nested(obj);
    }
    if obj.is_instance_of::<PyString>() {
        return Err(not_convertible(obj));
    }
    from_array_like(obj)
}

/// Nested lists and tuples of numbers, bools and arrays.
fn from_nested(obj: &Bound<'_, PyAny>) -> PyResult<qb::Tensor> {
    let mut shape = Vec::new();
    let mut values = Vec::new();
    let mut all_bool = true;
    let mut has_tensor = false;
    collect_nested(
        obj,
        0,
        &mut shape,
        &mut values,
        &mut all_bool,
        &mut has_tensor,
    )?;
    if has_tensor {
        // Arrays inside the nesting (possibly tracers): stacked by the facade.
        let items: Vec<qb::Tensor> = obj
            .try_iter()?
            .map(|item| to_tensor(&item?))
            .collect::<PyResult<_>>()?;
        return qb::stack(&items, 0).or_raise();
    }
    if all_bool && !values.is_empty() {
        let data = values.iter().map(|v| *v != 0.0).collect();
        qb::Tensor::from_vec(&shape, data).or_raise()
    } else {
        qb::Tensor::from_vec(&shape, values).or_raise()
    }
}

fn collect_nested(
    obj: &Bound<'_, PyAny>,
    depth: usize,
    shape: &mut Vec<usize>,
    values: &mut Vec<f64>,
    all_bool: &mut bool,
    has_tensor: &mut bool,
) -> PyResult<()> {
    let is_seq = obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>();
    if !is_seq {
        if depth != shape.len() {
            return Err(value_error(
                "ragged nested sequence: every entry at one depth must have the same length",
            ));
        }
        if obj.is_instance_of::<PyBool>() {
            values.push(if obj.extract::<bool>()? { 1.0 } else { 0.0 });
        } else if obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyFloat>() {
            *all_bool = false;
            values.push(obj.extract::<f64>()?);
        } else if obj.cast::<PyTensor>().is_ok() || obj.cast::<PyTensorView>().is_ok() {
            *has_tensor = true;
        } else {
            return Err(not_convertible(obj));
        }
        return Ok(());
    }
    if depth >= qb::tree::MAX_DEPTH {
        // The one depth limit of every walk over user structure (an array of that many axes
        // is far past any real use; NumPy stops at 64).
        return Err(value_error(format!(
            "nested sequence is more than {} levels deep; arrays built from nested lists \
             have at most that many axes",
            qb::tree::MAX_DEPTH
        )));
    }
    let len = obj.len()?;
    if len == 0 {
        return Err(value_error(
            "zero-size arrays are not supported: every extent must be at least 1",
        ));
    }
    match shape.get(depth) {
        Some(&n) if n != len => {
            return Err(value_error(
                "ragged nested sequence: every entry at one depth must have the same length",
            ))
        }
        Some(_) => {}
        None if depth == shape.len() && values.is_empty() => shape.push(len),
        None => {
            return Err(value_error(
                "ragged nested sequence: every entry at one depth must have the same length",
            ))
        }
    }
    for item in obj.try_iter()? {
        collect_nested(&item?, depth + 1, shape, values, all_bool, has_tensor)?;
    }
    Ok(())
}

/// NumPy arrays, `__array__` objects and buffer-protocol objects.
fn from_array_like(obj: &Bound<'_, PyAny>) -> PyResult<qb::Tensor> {
    let py = obj.py();
    let is_array_like = obj.hasattr("__array__")?
        || obj.hasattr("__array_interface__")?
        || py
            .import("builtins")?
            .getattr("memoryview")?
            .call1((obj,))
            .is_ok();
    if !is_array_like {
        return Err(not_convertible(obj));
    }
    match py.import("numpy") {
        Ok(np) => from_numpy(&np, obj),
        Err(_) => from_memoryview(obj),
    }
}

fn from_numpy(np: &Bound<'_, PyModule>, obj: &Bound<'_, PyAny>) -> PyResult<qb::Tensor> {
    // An exception the object's own `__array__` raises is its answer and propagates; NumPy
    // failing to read an object that only looked array-like is TY1.
    let has_array = obj.hasattr("__array__")?;
    let a = np.call_method1("asarray", (obj,)).map_err(|e| {
        if has_array {
            e
        } else {
            not_convertible(obj)
        }
    })?;
    let dtype = a.getattr("dtype")?;
    let kind: String = dtype.getattr("kind")?.extract()?;
    let itemsize: usize = dtype.getattr("itemsize")?.extract()?;
    let shape: Vec<usize> = a.getattr("shape")?.extract()?;
    let (target, code) = match (kind.as_str(), itemsize) {
        ("f", 8) => (qb::F64, "=f8"),
        ("f", 4) => (qb::F32, "=f4"),
        ("f", 2) => {
            return Err(type_error(
                "float16 is not supported; convert to float32 or float64 first",
            ))
        }
        ("b", _) => (qb::BOOL, "?"),
        ("i" | "u", _) => (qb::F64, "=f8"),
        _ => return Err(not_convertible(obj)),
    };
    // A contiguous copy in native byte order: strided and big-endian arrays read correctly.
    let c = np.call_method1("ascontiguousarray", (a, code))?;
    let bytes: Vec<u8> = c.call_method0("tobytes")?.extract()?;
    from_bytes(&shape, target, &bytes)
}

fn from_memoryview(obj: &Bound<'_, PyAny>) -> PyResult<qb::Tensor> {
    let py = obj.py();
    let mv = py
        .import("builtins")?
        .getattr("memoryview")?
        .call1((obj,))
        .map_err(|_| not_convertible(obj))?;
    let format: String = mv.getattr("format")?.extract()?;
    let shape: Vec<usize> = mv.getattr("shape")?.extract()?;
    let bytes: Vec<u8> = mv.call_method0("tobytes")?.extract()?;
    let (order, code) = match format.chars().next() {
        Some(c @ ('<' | '>' | '=' | '@' | '!')) => (Some(c), &format[1..]),
        _ => (None, format.as_str()),
    };
    let swap = match order {
        Some('>') | Some('!') => cfg!(target_endian = "little"),
        Some('<') => cfg!(target_endian = "big"),
        _ => false,
    };
    let (dtype, width) = match code {
        "d" => (qb::F64, 8),
        "f" => (qb::F32, 4),
        "?" => (qb::BOOL, 1),
        "e" => {
            return Err(type_error(
                "float16 is not supported; convert to float32 or float64 first",
            ))
        }
        _ => return Err(not_convertible(obj)),
    };
    let bytes = if swap {
        bytes
            .chunks_exact(width)
            .flat_map(|c| c.iter().rev().copied().collect::<Vec<u8>>())
            .collect()
    } else {
        bytes
    };
    from_bytes(&shape, dtype, &bytes)
}

fn from_bytes(shape: &[usize], dtype: qb::DType, bytes: &[u8]) -> PyResult<qb::Tensor> {
    if shape.contains(&0) {
        return Err(value_error(
            "zero-size arrays are not supported: every extent must be at least 1",
        ));
    }
    match dtype {
        qb::DType::F64 => {
            let data = bytes
                .chunks_exact(8)
                .map(|c| f64::from_ne_bytes(c.try_into().expect("8-byte chunk")))
                .collect();
            qb::Tensor::from_vec(shape, data).or_raise()
        }
        qb::DType::F32 => {
            let data: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|c| f32::from_ne_bytes(c.try_into().expect("4-byte chunk")))
                .collect();
            qb::Tensor::from_vec(shape, data).or_raise()
        }
        _ => {
            let data: Vec<bool> = bytes.iter().map(|b| *b != 0).collect();
            qb::Tensor::from_vec(shape, data).or_raise()
        }
    }
}

/// An operand: Python numbers stay weak scalars (numerics.md §2), and so do NumPy's numeric
/// scalars (`np.float64`, `np.float32`, `np.int64`: constants like the Python numbers they
/// stand for, `np.log(2 * np.pi)` in a formula); every other object goes through `asarray`.
pub fn operand(obj: &Bound<'_, PyAny>) -> PyResult<qb::Operand> {
    if let Ok(t) = obj.cast::<PyTensor>() {
        return Ok(qb::Operand::Tensor(t.get().t.clone()));
    }
    if obj.is_instance_of::<PyFloat>()
        || (obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>())
        || is_numpy_number(obj)?
    {
        return Ok(qb::Operand::Scalar(obj.extract::<f64>()?));
    }
    Ok(qb::Operand::Tensor(to_tensor(obj)?))
}

/// Whether `obj` is a NumPy scalar of a float or integer dtype (`numpy.generic`; NumPy is
/// only looked up when it is already imported, as it must be to have made `obj`).
pub fn is_numpy_number(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if !obj.hasattr("__array_interface__")? {
        return Ok(false);
    }
    let py = obj.py();
    let modules = py.import("sys")?.getattr("modules")?;
    let Ok(np) = modules.get_item("numpy") else {
        return Ok(false);
    };
    if !obj.is_instance(&np.getattr("generic")?)? {
        return Ok(false);
    }
    let kind: String = obj.getattr("dtype")?.getattr("kind")?.extract()?;
    Ok(matches!(kind.as_str(), "f" | "i" | "u"))
}

/// The right operand of an operator whose left operand is `lhs`: as [`operand`], but a NumPy
/// array next to a tracer is refused (TY3).
pub fn operand_beside(lhs: &qb::Tensor, obj: &Bound<'_, PyAny>) -> PyResult<qb::Operand> {
    if lhs.is_traced()
        && obj.cast::<PyTensor>().is_err()
        && obj.hasattr("__array_interface__")?
        && !is_numpy_number(obj)?
    {
        return Err(type_error(
            "NumPy arrays are not captured automatically; wrap the array with quabla.asarray",
        ));
    }
    operand(obj)
}

/// An axis argument: `None` (all axes), an int, or a sequence of ints.
pub fn axes_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<qb::Axes> {
    match obj {
        None => Ok(qb::Axes::All),
        Some(o) if o.is_none() => Ok(qb::Axes::All),
        Some(o) => Ok(qb::Axes::List(ints(o, "axis")?)),
    }
}

/// An int or a sequence of ints, for the parameter `name` ([`crate::ints`]).
pub fn ints(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<isize>> {
    crate::ints::int_list(obj, name)
}

/// A shape: a sequence of ints, or one int. A negative or huge extent is `ValueError`, an
/// entry that is not an int `TypeError`; a zero extent is the facade's SH6.
pub fn shape_arg(obj: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    crate::ints::int_list(obj, "shape").map_err(|e| {
        let py = obj.py();
        let shown = obj
            .repr()
            .map(|r| r.to_string_lossy().into_owned())
            .unwrap_or_default();
        if e.is_instance_of::<pyo3::exceptions::PyValueError>(py) {
            value_error(format!("a shape must be non-negative ints, got {shown}"))
        } else if e
            .get_type(py)
            .is(py.get_type::<pyo3::exceptions::PyTypeError>())
        {
            type_error(format!(
                "a shape must be an int or a tuple or list of ints, got {shown}"
            ))
        } else {
            e
        }
    })
}

/// How a pytree is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leaves {
    /// Arguments and results of transformed functions: arrays, scalars, `None`, strings,
    /// keys and `ShapeDtype`s; any other object is TY7.
    Transform,
    /// A static position (`static_argnums`): the whole value is one hashable static leaf.
    Static,
}

/// The depth of the children of a container that sits inside `depth` containers: the
/// facade's pytree depth limit (`qb::tree::MAX_DEPTH`, `ValueError`) applied while Python
/// containers are read, so no walk over a Python tree recurses without bound.
pub fn enter_container(depth: usize) -> PyResult<usize> {
    if depth >= qb::tree::MAX_DEPTH {
        return Err(crate::errors::to_py(qb::tree::nesting_error()));
    }
    Ok(depth + 1)
}

/// A Python int as a tree integer (AR19 outside the signed 64-bit range: a tree never
/// carries a wrapped or rounded integer).
pub fn tree_int(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    obj.extract::<i64>().map_err(|_| {
        let repr = obj.repr().map(|r| r.to_string()).unwrap_or_default();
        crate::errors::to_py(qb::tree::integer_range_error(repr))
    })
}

/// A Python pytree as a facade tree.
pub fn value_from_py(obj: &Bound<'_, PyAny>, mode: Leaves) -> PyResult<Value> {
    value_from_py_at(obj, mode, 0)
}

/// [`value_from_py`] of an object that sits inside `depth` containers.
pub fn value_from_py_at(obj: &Bound<'_, PyAny>, mode: Leaves, depth: usize) -> PyResult<Value> {
    if mode == Leaves::Static {
        return Ok(Value::Static(qb::tree::StaticBox::new(PyStatic::new(obj)?)));
    }
    if obj.is_none() {
        return Ok(Value::None);
    }
    if let Ok(t) = obj.cast::<PyTensor>() {
        return Ok(Value::Array(t.get().t.clone()));
    }
    if let Ok(v) = obj.cast::<PyTensorView>() {
        return Ok(Value::Array(v.get().v.to_tensor().or_raise()?));
    }
    if obj.is_instance_of::<PyBool>() {
        return Ok(Value::Bool(obj.extract()?));
    }
    if obj.is_instance_of::<PyInt>() {
        return Ok(Value::Int(tree_int(obj)?));
    }
    if obj.is_instance_of::<PyFloat>() {
        return Ok(Value::Float(obj.extract()?));
    }
    if obj.is_exact_instance_of::<PyString>() {
        return Ok(Value::Str(obj.extract()?));
    }
    if let Ok(k) = obj.cast::<crate::random::PyKey>() {
        return Ok(Value::Key(k.get().key));
    }
    if let Ok(s) = obj.cast::<crate::transforms::PyShapeDtype>() {
        return Ok(Value::Abstract(s.get().sd.clone()));
    }
    if obj.is_exact_instance_of::<PyTuple>() {
        let inner = enter_container(depth)?;
        let items = obj
            .try_iter()?
            .map(|item| value_from_py_at(&item?, mode, inner))
            .collect::<PyResult<_>>()?;
        return Ok(Value::Tuple(items));
    }
    if obj.is_exact_instance_of::<PyList>() {
        let inner = enter_container(depth)?;
        let items = obj
            .try_iter()?
            .map(|item| value_from_py_at(&item?, mode, inner))
            .collect::<PyResult<_>>()?;
        return Ok(Value::List(items));
    }
    if obj.is_exact_instance_of::<PyDict>() {
        let inner = enter_container(depth)?;
        let dict = obj.cast::<PyDict>()?;
        let mut entries = Vec::with_capacity(dict.len());
        let mut kinds = (false, false);
        for (k, v) in dict.iter() {
            let key = if k.is_instance_of::<PyInt>() && !k.is_instance_of::<PyBool>() {
                kinds.0 = true;
                DictKey::Int(tree_int(&k)?)
            } else if k.is_instance_of::<PyString>() {
                kinds.1 = true;
                DictKey::Str(k.extract()?)
            } else {
                return Err(type_error(
                    "dict keys in a pytree must all be str or all be int",
                ));
            };
            entries.push((key, value_from_py_at(&v, mode, inner)?));
        }
        if kinds.0 && kinds.1 {
            return Err(type_error(
                "dict keys in a pytree must all be str or all be int",
            ));
        }
        return Ok(Value::Dict(entries));
    }
    if let Some(node) = node_from_py(obj, mode, depth)? {
        return Ok(node);
    }
    if obj.hasattr("__array_interface__")? || obj.hasattr("__array__")? {
        return Ok(Value::Array(to_tensor(obj)?));
    }
    Err(type_error(format!(
        "{} is not a supported pytree container; register it with quabla.tree.register or \
         register_dataclass",
        type_name(obj)
    )))
}

/// A facade tree as Python objects: tensors as `Tensor`s (tracers as `TraceTensor`s), tuples
/// as tuples, dicts in their entry order, registered classes rebuilt.
pub fn value_to_py<'py>(py: Python<'py>, value: Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::None => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, b).to_owned().into_any(),
        Value::Int(i) => i.into_pyobject(py)?.into_any(),
        Value::Float(f) => f.into_pyobject(py)?.into_any(),
        Value::Str(s) => s.into_pyobject(py)?.into_any(),
        Value::Array(t) => wrap(py, t)?,
        Value::Abstract(s) => Bound::new(py, crate::transforms::PyShapeDtype { sd: s })?.into_any(),
        Value::Key(k) => Bound::new(py, crate::random::PyKey { key: k })?.into_any(),
        Value::List(items) => {
            let items = items
                .into_iter()
                .map(|v| value_to_py(py, v))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
        Value::Tuple(items) => {
            let items = items
                .into_iter()
                .map(|v| value_to_py(py, v))
                .collect::<PyResult<Vec<_>>>()?;
            PyTuple::new(py, items)?.into_any()
        }
        Value::Dict(entries) => {
            let dict = PyDict::new(py);
            for (k, v) in entries {
                let v = value_to_py(py, v)?;
                match k {
                    DictKey::Int(i) => dict.set_item(i, v)?,
                    DictKey::Str(s) => dict.set_item(s, v)?,
                }
            }
            dict.into_any()
        }
        Value::Static(b) => match b.get::<PyStatic>() {
            Some(s) => s.obj.bind(py).clone(),
            None => format!("{b:?}").into_pyobject(py)?.into_any(),
        },
        node @ Value::Node { .. } => node_to_py(py, node)?,
    })
}
