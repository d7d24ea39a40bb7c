//! Python ints as Rust integers: the one conversion every integer parameter of the API goes
//! through, so that each raises the classes of errors.md §1.1 and names the parameter.
//!
//! - an object that is not an int (nor has `__index__`, as NumPy integers do) is `TypeError`:
//!   `maxiter must be an int, got float`;
//! - an int the parameter cannot take (negative for a count, beyond 64 bits) is `ValueError`:
//!   `maxiter must be a non-negative int, got -1`, `axis must be an int from
//!   -9223372036854775808 to 9223372036854775807, got 1180591620717411303424`.
//!
//! PyO3's own conversion would raise `OverflowError` for the second kind, and name no
//! parameter. Values the parameter's meaning rules out (`max_traces=0`, an axis past the
//! rank) are the facade's to refuse, with the spec's messages; this module only reads ints.
//!
//! Parameters declared with an integer type take their converter from [`param`] (generated
//! per parameter name, `#[pyo3(from_py_with = crate::ints::param::axis)]`); ints read inside
//! a function body (lists, shapes, dict entries) call [`int_arg`] or [`int_list`] directly.

use crate::convert::type_name;
use crate::errors::{type_error, value_error};
use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyString};

/// A Python int as read: its value, or (past 128 bits of range, which no parameter takes)
/// its decimal text.
enum Read {
    Value(i128),
    Huge(String),
}

fn read(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Read> {
    let not_int = || type_error(format!("{name} must be an int, got {}", type_name(obj)));
    if obj.is_instance_of::<PyFloat>() || obj.is_instance_of::<PyString>() {
        return Err(not_int());
    }
    match obj.extract::<i64>() {
        Ok(v) => return Ok(Read::Value(v.into())),
        Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {}
        // Not an int. Anything else `__index__` raised (a tracer's TracerError, a user's own
        // exception) is the object's own answer and passes through.
        Err(e) if e.get_type(obj.py()).is(obj.py().get_type::<PyTypeError>()) => {
            return Err(not_int())
        }
        Err(e) => return Err(e),
    }
    match obj.extract::<u64>() {
        Ok(v) => Ok(Read::Value(v.into())),
        Err(_) => {
            let text = obj
                .call_method0("__index__")
                .and_then(|i| i.str())
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "a huge int".into());
            Ok(Read::Huge(text))
        }
    }
}

/// The Rust integer types of parameters, with their ranges.
pub trait IntParam: TryFrom<i128> + Copy {
    const MIN: i128;
    const MAX: i128;
}

macro_rules! int_param {
    ($($t:ty),*) => {$(
        impl IntParam for $t {
            const MIN: i128 = <$t>::MIN as i128;
            const MAX: i128 = <$t>::MAX as i128;
        }
    )*};
}

int_param!(i32, i64, isize, u32, u64, usize);

/// `obj` as the integer parameter `name` of type `T` (module docs for the errors).
pub fn int_arg<T: IntParam>(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<T> {
    let (value, text) = match read(obj, name)? {
        Read::Value(v) => match T::try_from(v) {
            Ok(t) => return Ok(t),
            Err(_) => (Some(v), v.to_string()),
        },
        Read::Huge(text) => (None, text),
    };
    let negative = value.map_or(text.starts_with('-'), |v| v < 0);
    Err(value_error(if T::MIN == 0 && negative {
        format!("{name} must be a non-negative int, got {text}")
    } else {
        format!(
            "{name} must be an int from {} to {}, got {text}",
            T::MIN,
            T::MAX
        )
    }))
}

/// An int or a sequence of ints (a list, a tuple or any other iterable but a string) as a
/// list of the parameter `name`'s type.
pub fn int_list<T: IntParam>(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<T>> {
    if is_int(obj)? {
        return Ok(vec![int_arg(obj, name)?]);
    }
    let not_ints = || {
        type_error(format!(
            "{name} must be an int or a sequence of ints, got {}",
            type_name(obj)
        ))
    };
    if obj.is_instance_of::<PyString>() {
        return Err(not_ints());
    }
    let items = obj.try_iter().map_err(|_| not_ints())?;
    items.map(|item| int_arg(&item?, name)).collect()
}

/// An int where Python clamps what is out of range (slice bounds: `x[:2**70]` is `x[:]`):
/// an int beyond `isize` is its nearest end. A non-int is `TypeError`.
pub fn clamped_isize(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<isize> {
    match read(obj, name)? {
        Read::Value(v) => Ok(v.clamp(isize::MIN as i128, isize::MAX as i128) as isize),
        Read::Huge(text) if text.starts_with('-') => Ok(isize::MIN),
        Read::Huge(_) => Ok(isize::MAX),
    }
}

/// Whether `obj` stands for one int (it has `__index__`, as ints and NumPy integers do)
/// rather than a sequence of them.
pub fn is_int(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if obj.is_instance_of::<PyFloat>() || obj.is_instance_of::<PyString>() {
        return Ok(false);
    }
    obj.hasattr("__index__")
}

/// Declares one `from_py_with` converter per integer parameter, printing the parameter's
/// name in its errors, and one for its optional form (`None` passes through).
macro_rules! params {
    ($($function:ident, $optional:ident = $name:literal: $t:ty;)*) => {
        /// The converters of the integer parameters ([`super::int_arg`]), named after the
        /// parameters (with the type when one name has two: `slice_step`, `power`).
        #[allow(dead_code, reason = "each parameter uses the form its signature declares")]
        pub mod param {
            use pyo3::prelude::*;
            $(
                pub fn $function(obj: &Bound<'_, PyAny>) -> PyResult<$t> {
                    super::int_arg(obj, $name)
                }

                pub fn $optional(obj: &Bound<'_, PyAny>) -> PyResult<Option<$t>> {
                    if obj.is_none() {
                        return Ok(None);
                    }
                    super::int_arg(obj, $name).map(Some)
                }
            )*
        }
    };
}

params! {
    axis, opt_axis = "axis": isize;
    axis1, opt_axis1 = "axis1": isize;
    axis2, opt_axis2 = "axis2": isize;
    axisa, opt_axisa = "axisa": isize;
    axisb, opt_axisb = "axisb": isize;
    axisc, opt_axisc = "axisc": isize;
    k, opt_k = "k": isize;
    offset, opt_offset = "offset": isize;
    start, opt_start = "start": isize;
    slice_step, opt_slice_step = "step": isize;
    length, opt_length = "length": usize;
    ddof, opt_ddof = "ddof": usize;
    exponent, opt_exponent = "exponent": i32;
    n, opt_n = "n": usize;
    power, opt_power = "n": i64;
    m, opt_m = "m": usize;
    num, opt_num = "num": usize;
    max_trips, opt_max_trips = "max_trips": usize;
    max_traces, opt_max_traces = "max_traces": usize;
    maxiter, opt_maxiter = "maxiter": usize;
    restart, opt_restart = "restart": usize;
    steps, opt_steps = "steps": usize;
    max_steps, opt_max_steps = "max_steps": usize;
    history, opt_history = "history": usize;
    max_iterations, opt_max_iterations = "max_iterations": usize;
    max_evaluations, opt_max_evaluations = "max_evaluations": usize;
    device_ordinal, opt_device_ordinal = "device_ordinal": usize;
    transition_steps, opt_transition_steps = "transition_steps": u64;
    transition_begin, opt_transition_begin = "transition_begin": u64;
    decay_steps, opt_decay_steps = "decay_steps": u64;
    warmup_steps, opt_warmup_steps = "warmup_steps": u64;
    num_classes, opt_num_classes = "num_classes": usize;
    minlength, opt_minlength = "minlength": usize;
}

/// `from_py_with` converters of the integer-list parameters ([`int_list`]).
pub mod list {
    use pyo3::prelude::*;

    pub fn indices(obj: &Bound<'_, PyAny>) -> PyResult<Vec<isize>> {
        super::int_list(obj, "indices")
    }

    pub fn boundaries(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
        super::int_list(obj, "boundaries")
    }

    /// `axes` of `transpose`: `None` reverses the axes.
    pub fn opt_axes(obj: &Bound<'_, PyAny>) -> PyResult<Option<Vec<isize>>> {
        if obj.is_none() {
            return Ok(None);
        }
        super::int_list(obj, "axes").map(Some)
    }
}
