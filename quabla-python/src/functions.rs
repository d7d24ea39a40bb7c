//! The array library of api.md §1 and §3–§9 as module functions, with the method twins of
//! each family on `Tensor`. Each function converts its arguments (operands, axes, keyword
//! options) and calls the facade function of the same name; none computes anything itself.

use crate::convert::{
    asarray, axes_arg, dtype_arg, ints, operand, opt_dtype, shape_arg, to_tensor,
};
use crate::errors::{type_error, value_error, OrRaise};
use crate::tensor::{exponent, ret, ret_list, PyTensor};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyTuple};
use quabla as qb;
use quabla::prelude::*;

/// Unary functions `f(x)` with the method twin `x.f()`.
macro_rules! unary_family {
    ($($name:ident),* $(,)?) => {
        mod unary {
            use super::*;
            $(
                #[pyfunction]
                pub fn $name<'py>(py: Python<'py>, x: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
                    ret(py, qb::$name(operand(x)?))
                }
            )*
            pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
                $( m.add_function(wrap_pyfunction!($name, m)?)?; )*
                Ok(())
            }
        }
        #[pymethods]
        impl PyTensor {
            $(
                fn $name<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                    ret(py, qb::$name(&self.t))
                }
            )*
        }
    };
}

unary_family!(
    sin,
    cos,
    tanh,
    exp,
    expm1,
    log,
    log1p,
    sqrt,
    tan,
    arcsin,
    arccos,
    arctan,
    sinh,
    cosh,
    arcsinh,
    arccosh,
    arctanh,
    log2,
    log10,
    cbrt,
    floor,
    ceil,
    round,
    erf,
    erfc,
    abs,
    relu,
    sigmoid,
    square,
    reciprocal,
    stop_gradient,
    isnan,
    isfinite,
    sign,
    exp2,
    isinf,
    softplus,
    silu,
    ravel,
    tril,
    triu,
    bitwise_not,
);

/// The Python function of each native unary op of the IR. The match is exhaustive, so a new
/// `UnaryOp` does not compile until it is named here, and naming it takes its function in
/// `unary_family!` above (`unary::<name>` must exist).
const fn native_unary_function(op: quabla_ir::UnaryOp) -> Option<&'static str> {
    use quabla_ir::UnaryOp as U;
    macro_rules! named {
        ($f:ident) => {{
            let _ = unary::$f;
            Some(stringify!($f))
        }};
    }
    match op {
        U::Tanh => named!(tanh),
        U::Exp => named!(exp),
        U::Log => named!(log),
        U::Log1p => named!(log1p),
        U::Expm1 => named!(expm1),
        U::Sqrt => named!(sqrt),
        U::Sin => named!(sin),
        U::Cos => named!(cos),
        U::Erf => named!(erf),
        U::Erfc => named!(erfc),
        U::Tan => named!(tan),
        U::Arcsin => named!(arcsin),
        U::Arccos => named!(arccos),
        U::Arctan => named!(arctan),
        U::Sinh => named!(sinh),
        U::Cosh => named!(cosh),
        U::Arcsinh => named!(arcsinh),
        U::Arccosh => named!(arccosh),
        U::Arctanh => named!(arctanh),
        U::Log2 => named!(log2),
        U::Log10 => named!(log10),
        U::Cbrt => named!(cbrt),
        U::Floor => named!(floor),
        U::Ceil => named!(ceil),
        U::Round => named!(round),
        U::BitNot => named!(bitwise_not),
        // The `-` operator (`Tensor.__neg__`).
        U::Neg => None,
    }
}

// Evaluated at compile time for every op, so the table above is checked in every build.
const _: () = {
    let mut i = 0;
    while i < quabla_ir::UnaryOp::ALL.len() {
        let _ = native_unary_function(quabla_ir::UnaryOp::ALL[i]);
        i += 1;
    }
};

/// Binary functions `f(a, b)` with the method twin `a.f(b)`.
macro_rules! binary_family {
    ($($py:literal => $name:ident),* $(,)?) => {
        mod binary {
            use super::*;
            $(
                #[pyfunction]
                #[pyo3(name = $py)]
                pub fn $name<'py>(py: Python<'py>, x1: &Bound<'py, PyAny>, x2: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
                    ret(py, qb::$name(operand(x1)?, operand(x2)?))
                }
            )*
            pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
                $( m.add_function(wrap_pyfunction!($name, m)?)?; )*
                Ok(())
            }
        }
        #[pymethods]
        impl PyTensor {
            $(
                #[pyo3(name = $py)]
                fn $name<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
                    ret(py, qb::$name(&self.t, operand(other)?))
                }
            )*
        }
    };
}

binary_family!(
    "maximum" => maximum, "minimum" => minimum, "atan2" => atan2, "fmod" => fmod,
    "mod" => mod_, "remainder" => remainder, "logaddexp" => logaddexp, "hypot" => hypot,
    "greater" => greater, "greater_equal" => greater_equal, "less" => less,
    "less_equal" => less_equal, "equal" => equal, "not_equal" => not_equal,
    "logical_and" => logical_and, "logical_or" => logical_or, "matmul" => matmul, "dot" => dot,
    "outer" => outer, "kron" => kron, "polyval" => polyval,
    "bitwise_and" => bitwise_and, "bitwise_or" => bitwise_or, "bitwise_xor" => bitwise_xor,
    "left_shift" => left_shift, "right_shift" => right_shift, "floor_divide" => floor_divide,
);

/// Reductions `f(x, axis=None, keepdims=False)` with the method twin.
macro_rules! reduction_family {
    ($($name:ident, $axes:ident, $keep:ident);* $(;)?) => {
        mod reductions {
            use super::*;
            $(
                #[pyfunction]
                #[pyo3(signature = (x, axis=None, keepdims=false))]
                pub fn $name<'py>(py: Python<'py>, x: &Bound<'py, PyAny>, axis: Option<&Bound<'py, PyAny>>, keepdims: bool) -> PyResult<Bound<'py, PyAny>> {
                    let x = to_tensor(x)?;
                    reduce_with(py, &x, axis, keepdims, |t| t.$name(), |t, a| t.$axes(a), |t, a| t.$keep(a))
                }
            )*
            pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
                $( m.add_function(wrap_pyfunction!($name, m)?)?; )*
                Ok(())
            }
        }
        #[pymethods]
        impl PyTensor {
            $(
                #[pyo3(signature = (axis=None, keepdims=false))]
                fn $name<'py>(&self, py: Python<'py>, axis: Option<&Bound<'py, PyAny>>, keepdims: bool) -> PyResult<Bound<'py, PyAny>> {
                    reduce_with(py, &self.t, axis, keepdims, |t| t.$name(), |t, a| t.$axes(a), |t, a| t.$keep(a))
                }
            )*
        }
    };
}

reduction_family!(
    sum, sum_axes, sum_keepdims;
    mean, mean_axes, mean_keepdims;
    prod, prod_axes, prod_keepdims;
    max, max_axes, max_keepdims;
    min, min_axes, min_keepdims;
    any, any_axes, any_keepdims;
    all, all_axes, all_keepdims;
    norm, norm_axes, norm_keepdims;
    logsumexp, logsumexp_axes, logsumexp_keepdims;
);

fn reduce_with<'py>(
    py: Python<'py>,
    x: &qb::Tensor,
    axis: Option<&Bound<'py, PyAny>>,
    keepdims: bool,
    all: impl Fn(&qb::Tensor) -> qb::Result<qb::Tensor>,
    axes: impl Fn(&qb::Tensor, qb::Axes) -> qb::Result<qb::Tensor>,
    keep: impl Fn(&qb::Tensor, qb::Axes) -> qb::Result<qb::Tensor>,
) -> PyResult<Bound<'py, PyAny>> {
    let a = axes_arg(axis)?;
    match (keepdims, a) {
        (false, qb::Axes::All) => ret(py, all(x)),
        (false, a) => ret(py, axes(x, a)),
        (true, a) => ret(py, keep(x, a)),
    }
}

/// Shape functions of one array with their method twins, and the functions with options.
mod shapes {
    use super::*;

    #[pyfunction]
    pub fn reshape<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        shape: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, to_tensor(x)?.reshape(ints(shape, "shape")?))
    }

    #[pyfunction]
    #[pyo3(signature = (x, axes=None))]
    pub fn transpose<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::list::opt_axes)] axes: Option<Vec<isize>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let x = to_tensor(x)?;
        match axes {
            None => ret(py, x.transpose()),
            Some(a) => ret(py, x.permute(a)),
        }
    }

    #[pyfunction]
    pub fn broadcast_to<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        shape: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, to_tensor(x)?.broadcast_to(shape_arg(shape)?))
    }

    #[pyfunction]
    pub fn astype<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        dtype: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, to_tensor(x)?.astype(dtype_arg(dtype)?))
    }

    #[pyfunction]
    #[pyo3(signature = (x, axis=None))]
    pub fn squeeze<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        axis: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        squeeze_tensor(py, &to_tensor(x)?, axis)
    }

    pub fn squeeze_tensor<'py>(
        py: Python<'py>,
        x: &qb::Tensor,
        axis: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match axis {
            Some(a) if !a.is_none() => ret(py, x.squeeze_axes(ints(a, "axis")?)),
            _ => ret(py, x.squeeze()),
        }
    }

    #[pyfunction]
    pub fn expand_dims<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        axis: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, to_tensor(x)?.expand_dims(ints(axis, "axis")?))
    }

    #[pyfunction]
    #[pyo3(signature = (x, indices_or_sections, axis=0))]
    pub fn split<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        indices_or_sections: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::axis)] axis: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        split_tensor(py, &to_tensor(x)?, indices_or_sections, axis)
    }

    pub fn split_tensor<'py>(
        py: Python<'py>,
        x: &qb::Tensor,
        spec: &Bound<'py, PyAny>,
        axis: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        if crate::ints::is_int(spec)? {
            let n = crate::ints::int_arg(spec, "indices_or_sections")?;
            ret_list(py, x.split(n, axis))
        } else {
            ret_list(py, x.split_at(ints(spec, "indices_or_sections")?, axis))
        }
    }

    fn tensors(seq: &Bound<'_, PyAny>) -> PyResult<Vec<qb::Tensor>> {
        seq.try_iter()?.map(|t| to_tensor(&t?)).collect()
    }

    #[pyfunction]
    pub fn concat<'py>(
        py: Python<'py>,
        tensors_: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::axis)] axis: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::concat(&tensors(tensors_)?, axis))
    }

    #[pyfunction]
    #[pyo3(signature = (tensors_, axis=0))]
    pub fn stack<'py>(
        py: Python<'py>,
        tensors_: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::axis)] axis: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::stack(&tensors(tensors_)?, axis))
    }

    #[pyfunction]
    #[pyo3(signature = (*xs, indexing="xy"))]
    pub fn meshgrid<'py>(
        py: Python<'py>,
        xs: &Bound<'py, PyTuple>,
        indexing: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let xs: Vec<qb::Tensor> = xs.iter().map(|x| to_tensor(&x)).collect::<PyResult<_>>()?;
        let indexing = match indexing {
            "xy" => qb::Indexing::Xy,
            "ij" => qb::Indexing::Ij,
            other => {
                return Err(value_error(format!(
                    "meshgrid: indexing must be \"xy\" or \"ij\", got {other:?}"
                )))
            }
        };
        ret_list(py, qb::meshgrid(&xs).indexing(indexing).eval())
    }

    #[pyfunction]
    #[pyo3(signature = (x, axis=None))]
    pub fn flip<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        axis: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::flip(to_tensor(x)?, axes_arg(axis)?))
    }

    #[pyfunction]
    #[pyo3(signature = (x, shift, axis=None))]
    pub fn roll<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        shift: &Bound<'py, PyAny>,
        axis: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = qb::roll(to_tensor(x)?, ints(shift, "shift")?);
        match axis {
            Some(a) if !a.is_none() => ret(py, call.axis(ints(a, "axis")?).eval()),
            _ => ret(py, call.eval()),
        }
    }

    /// `pad_width`: an int, a `(before, after)` pair, or one pair per axis, each a
    /// non-negative int (`crate::ints`).
    fn pad_width_arg(w: &Bound<'_, PyAny>) -> PyResult<qb::PadWidth> {
        use crate::ints::{int_arg, is_int};
        let shape_error =
            || type_error("pad_width must be an int, a (before, after) pair or one pair per axis");
        if is_int(w)? {
            return Ok(int_arg::<usize>(w, "pad_width")?.into());
        }
        let pair = |p: &Bound<'_, PyAny>| -> PyResult<(usize, usize)> {
            let (a, b): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
                p.extract().map_err(|_| shape_error())?;
            Ok((int_arg(&a, "pad_width")?, int_arg(&b, "pad_width")?))
        };
        let items: Vec<Bound<'_, PyAny>> = w
            .try_iter()
            .map_err(|_| shape_error())?
            .collect::<PyResult<_>>()?;
        let all_ints = items
            .iter()
            .map(is_int)
            .collect::<PyResult<Vec<bool>>>()?
            .into_iter()
            .all(|b| b);
        if items.len() == 2 && all_ints {
            return Ok(pair(w)?.into());
        }
        Ok(items.iter().map(pair).collect::<PyResult<Vec<_>>>()?.into())
    }

    #[pyfunction]
    #[pyo3(signature = (x, pad_width, mode="constant", constant_values=0.0))]
    pub fn pad<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        pad_width: &Bound<'py, PyAny>,
        mode: &str,
        constant_values: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let x = to_tensor(x)?;
        let width = pad_width_arg(pad_width)?;
        let mode = match mode {
            "constant" => qb::PadMode::Constant,
            "edge" => qb::PadMode::Edge,
            "reflect" => qb::PadMode::Reflect,
            "symmetric" => qb::PadMode::Symmetric,
            "wrap" => qb::PadMode::Wrap,
            other => return Err(value_error(format!(
                "pad: mode must be \"constant\", \"edge\", \"reflect\", \"symmetric\" or \"wrap\", got {other:?}"
            ))),
        };
        ret(
            py,
            qb::pad(&x, width)
                .mode(mode)
                .constant_values(constant_values)
                .eval(),
        )
    }

    #[pyfunction]
    pub fn tile<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        reps: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::tile(to_tensor(x)?, shape_arg(reps)?))
    }

    #[pyfunction]
    #[pyo3(signature = (x, repeats, axis=None))]
    pub fn repeat<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        repeats: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::opt_axis)] axis: Option<isize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = qb::repeat(to_tensor(x)?, ints(repeats, "repeats")?);
        match axis {
            Some(a) => ret(py, call.axis(a).eval()),
            None => ret(py, call.eval()),
        }
    }

    #[pyfunction]
    pub fn moveaxis<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        source: &Bound<'py, PyAny>,
        destination: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(
            py,
            qb::moveaxis(
                &to_tensor(x)?,
                ints(source, "source")?,
                ints(destination, "destination")?,
            ),
        )
    }

    #[pyfunction]
    pub fn swapaxes<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::axis1)] axis1: isize,
        #[pyo3(from_py_with = crate::ints::param::axis2)] axis2: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::swapaxes(&to_tensor(x)?, axis1, axis2))
    }

    #[pyfunction]
    #[pyo3(signature = (v, k=0))]
    pub fn diag<'py>(
        py: Python<'py>,
        v: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::k)] k: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::diag(to_tensor(v)?).k(k).eval())
    }

    #[pyfunction]
    #[pyo3(signature = (x, offset=0, axis1=0, axis2=1))]
    pub fn diagonal<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::offset)] offset: isize,
        #[pyo3(from_py_with = crate::ints::param::axis1)] axis1: isize,
        #[pyo3(from_py_with = crate::ints::param::axis2)] axis2: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(
            py,
            qb::diagonal(to_tensor(x)?)
                .offset(offset)
                .axis1(axis1)
                .axis2(axis2)
                .eval(),
        )
    }

    #[pyfunction]
    #[pyo3(signature = (a, offset=0, axis1=0, axis2=1))]
    pub fn trace<'py>(
        py: Python<'py>,
        a: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::offset)] offset: isize,
        #[pyo3(from_py_with = crate::ints::param::axis1)] axis1: isize,
        #[pyo3(from_py_with = crate::ints::param::axis2)] axis2: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(
            py,
            qb::trace(to_tensor(a)?)
                .offset(offset)
                .axis1(axis1)
                .axis2(axis2)
                .eval(),
        )
    }

    #[pyfunction]
    #[pyo3(signature = (x, axis=None, reverse=false))]
    pub fn cumsum<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::opt_axis)] axis: Option<isize>,
        reverse: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let x = to_tensor(x)?;
        let call = match axis {
            Some(a) => qb::cumsum(&x).axis(a),
            None => qb::cumsum(x.ravel().or_raise()?).axis(0),
        };
        ret(py, call.reverse(reverse).eval())
    }

    fn variance<'py>(
        py: Python<'py>,
        call: qb::Variance,
        axis: Option<&Bound<'py, PyAny>>,
        keepdims: bool,
        ddof: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = call.axes(axes_arg(axis)?).keepdims(keepdims).ddof(ddof);
        ret(py, call.eval())
    }

    #[pyfunction]
    #[pyo3(signature = (x, axis=None, keepdims=false, ddof=0))]
    pub fn var<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        axis: Option<&Bound<'py, PyAny>>,
        keepdims: bool,
        #[pyo3(from_py_with = crate::ints::param::ddof)] ddof: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        variance(py, qb::var(to_tensor(x)?), axis, keepdims, ddof)
    }

    #[pyfunction]
    #[pyo3(name = "std", signature = (x, axis=None, keepdims=false, ddof=0))]
    pub fn std_<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        axis: Option<&Bound<'py, PyAny>>,
        keepdims: bool,
        #[pyo3(from_py_with = crate::ints::param::ddof)] ddof: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        variance(py, qb::std(to_tensor(x)?), axis, keepdims, ddof)
    }

    #[pyfunction]
    #[pyo3(signature = (x, axis=-1))]
    pub fn softmax<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::axis)] axis: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::softmax(to_tensor(x)?, axis))
    }

    #[pyfunction]
    #[pyo3(signature = (x, axis=-1))]
    pub fn log_softmax<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::axis)] axis: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::log_softmax(to_tensor(x)?, axis))
    }

    #[pyfunction]
    #[pyo3(signature = (x, approximate=true))]
    pub fn gelu<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        approximate: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::gelu(operand(x)?).approximate(approximate).eval())
    }

    #[pyfunction]
    #[pyo3(signature = (x, lo=None, hi=None))]
    pub fn clip<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        lo: Option<&Bound<'py, PyAny>>,
        hi: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut call = qb::clip(operand(x)?);
        if let Some(lo) = lo.filter(|v| !v.is_none()) {
            call = call.lo(operand(lo)?);
        }
        if let Some(hi) = hi.filter(|v| !v.is_none()) {
            call = call.hi(operand(hi)?);
        }
        ret(py, call.eval())
    }

    #[pyfunction]
    #[pyo3(signature = (x, copy=true, nan=0.0, posinf=None, neginf=None))]
    pub fn nan_to_num<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        copy: bool,
        nan: f64,
        posinf: Option<f64>,
        neginf: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = copy; // Arrays are immutable: `copy` is accepted and has no effect.
        let mut call = qb::nan_to_num(operand(x)?).nan(nan);
        if let Some(v) = posinf {
            call = call.posinf(v);
        }
        if let Some(v) = neginf {
            call = call.neginf(v);
        }
        ret(py, call.eval())
    }

    #[pyfunction]
    #[pyo3(name = "where")]
    pub fn where_<'py>(
        py: Python<'py>,
        mask: &Bound<'py, PyAny>,
        on_true: &Bound<'py, PyAny>,
        on_false: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(
            py,
            qb::where_(operand(mask)?, operand(on_true)?, operand(on_false)?),
        )
    }

    #[pyfunction]
    pub fn logical_not<'py>(py: Python<'py>, a: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::logical_not(operand(a)?))
    }

    #[pyfunction]
    pub fn power<'py>(
        py: Python<'py>,
        x1: &Bound<'py, PyAny>,
        x2: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::power(operand(x1)?, exponent(x2)?))
    }

    #[pyfunction]
    pub fn powi<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::exponent)] exponent: i32,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::powi(operand(x)?, exponent))
    }

    #[pyfunction]
    #[pyo3(signature = (a, b, axes=None))]
    pub fn tensordot<'py>(
        py: Python<'py>,
        a: &Bound<'py, PyAny>,
        b: &Bound<'py, PyAny>,
        axes: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = qb::tensordot(to_tensor(a)?, to_tensor(b)?);
        let call = match axes {
            None => call.axes(2usize),
            Some(ax) => {
                if crate::ints::is_int(ax)? {
                    call.axes(crate::ints::int_arg::<usize>(ax, "axes")?)
                } else {
                    let (l, r): (Bound<'py, PyAny>, Bound<'py, PyAny>) =
                        ax.extract().map_err(|_| {
                            type_error(format!(
                                "tensordot: axes must be an int or a pair of axis lists, got {}",
                                crate::convert::type_name(ax)
                            ))
                        })?;
                    call.axes((ints(&l, "axes")?, ints(&r, "axes")?))
                }
            }
        };
        ret(py, call.eval())
    }

    #[pyfunction]
    #[pyo3(signature = (a, b, axisa=-1, axisb=-1, axisc=-1, axis=None))]
    pub fn cross<'py>(
        py: Python<'py>,
        a: &Bound<'py, PyAny>,
        b: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::axisa)] axisa: isize,
        #[pyo3(from_py_with = crate::ints::param::axisb)] axisb: isize,
        #[pyo3(from_py_with = crate::ints::param::axisc)] axisc: isize,
        #[pyo3(from_py_with = crate::ints::param::opt_axis)] axis: Option<isize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = qb::cross(to_tensor(a)?, to_tensor(b)?)
            .axisa(axisa)
            .axisb(axisb)
            .axisc(axisc);
        match axis {
            Some(ax) => ret(py, call.axis(ax).eval()),
            None => ret(py, call.eval()),
        }
    }

    #[pyfunction]
    #[pyo3(signature = (equation, *operands))]
    pub fn einsum<'py>(
        py: Python<'py>,
        equation: &str,
        operands: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ops: Vec<qb::Tensor> = operands
            .iter()
            .map(|o| to_tensor(&o))
            .collect::<PyResult<_>>()?;
        ret(py, qb::einsum(equation, &ops))
    }

    #[pyfunction]
    pub fn solve<'py>(
        py: Python<'py>,
        a: &Bound<'py, PyAny>,
        b: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::solve(&to_tensor(a)?, &to_tensor(b)?))
    }

    #[pyfunction]
    pub fn cholesky<'py>(py: Python<'py>, a: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::cholesky(&to_tensor(a)?))
    }

    #[pyfunction]
    #[pyo3(signature = (x, n=1, axis=-1, prepend=None, append=None))]
    pub fn diff<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::n)] n: usize,
        #[pyo3(from_py_with = crate::ints::param::axis)] axis: isize,
        prepend: Option<&Bound<'py, PyAny>>,
        append: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut call = qb::diff(to_tensor(x)?).n(n).axis(axis);
        if let Some(p) = prepend.filter(|v| !v.is_none()) {
            call = call.prepend(operand(p)?);
        }
        if let Some(a) = append.filter(|v| !v.is_none()) {
            call = call.append(operand(a)?);
        }
        ret(py, call.eval())
    }

    #[pyfunction]
    #[pyo3(signature = (y, x=None, dx=1.0, axis=-1))]
    pub fn trapezoid<'py>(
        py: Python<'py>,
        y: &Bound<'py, PyAny>,
        x: Option<&Bound<'py, PyAny>>,
        dx: f64,
        #[pyo3(from_py_with = crate::ints::param::axis)] axis: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut call = qb::trapezoid(to_tensor(y)?).dx(dx).axis(axis);
        if let Some(x) = x.filter(|v| !v.is_none()) {
            call = call.x(operand(x)?);
        }
        ret(py, call.eval())
    }

    #[pyfunction]
    #[pyo3(signature = (x, xp, fp, left=None, right=None))]
    pub fn interp<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        xp: &Bound<'py, PyAny>,
        fp: &Bound<'py, PyAny>,
        left: Option<&Bound<'py, PyAny>>,
        right: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut call = qb::interp(operand(x)?, operand(xp)?, operand(fp)?);
        if let Some(l) = left.filter(|v| !v.is_none()) {
            call = call.left(operand(l)?);
        }
        if let Some(r) = right.filter(|v| !v.is_none()) {
            call = call.right(operand(r)?);
        }
        ret(py, call.eval())
    }

    /// `isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False)`: NumPy's elementwise test.
    #[pyfunction]
    #[pyo3(signature = (a, b, rtol=1e-5, atol=1e-8, equal_nan=false))]
    pub fn isclose<'py>(
        py: Python<'py>,
        a: &Bound<'py, PyAny>,
        b: &Bound<'py, PyAny>,
        rtol: f64,
        atol: f64,
        equal_nan: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = qb::isclose(operand(a)?, operand(b)?);
        ret(py, call.rtol(rtol).atol(atol).equal_nan(equal_nan).eval())
    }

    /// `allclose(a, b, ...)`: whether every element is close, a rank-0 `bool_` tensor (JAX's
    /// convention; `bool()` of it, or an `if`, reads it eagerly).
    #[pyfunction]
    #[pyo3(signature = (a, b, rtol=1e-5, atol=1e-8, equal_nan=false))]
    pub fn allclose<'py>(
        py: Python<'py>,
        a: &Bound<'py, PyAny>,
        b: &Bound<'py, PyAny>,
        rtol: f64,
        atol: f64,
        equal_nan: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = qb::allclose(operand(a)?, operand(b)?);
        ret(py, call.rtol(rtol).atol(atol).equal_nan(equal_nan).eval())
    }

    #[pyfunction]
    #[pyo3(signature = (x, indices, axis=0))]
    pub fn gather<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::list::indices)] indices: Vec<isize>,
        #[pyo3(from_py_with = crate::ints::param::axis)] axis: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, to_tensor(x)?.gather(indices, axis))
    }

    #[pyfunction]
    #[pyo3(signature = (x, indices, updates, axis=0))]
    pub fn scatter_add<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::list::indices)] indices: Vec<isize>,
        updates: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::axis)] axis: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(
            py,
            to_tensor(x)?.scatter_add(indices, operand(updates)?, axis),
        )
    }

    pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
        for f in [
            wrap_pyfunction!(reshape, m)?,
            wrap_pyfunction!(transpose, m)?,
            wrap_pyfunction!(broadcast_to, m)?,
            wrap_pyfunction!(astype, m)?,
            wrap_pyfunction!(squeeze, m)?,
            wrap_pyfunction!(expand_dims, m)?,
            wrap_pyfunction!(split, m)?,
            wrap_pyfunction!(concat, m)?,
            wrap_pyfunction!(stack, m)?,
            wrap_pyfunction!(meshgrid, m)?,
            wrap_pyfunction!(flip, m)?,
            wrap_pyfunction!(roll, m)?,
            wrap_pyfunction!(pad, m)?,
            wrap_pyfunction!(tile, m)?,
            wrap_pyfunction!(repeat, m)?,
            wrap_pyfunction!(moveaxis, m)?,
            wrap_pyfunction!(swapaxes, m)?,
            wrap_pyfunction!(diag, m)?,
            wrap_pyfunction!(diagonal, m)?,
            wrap_pyfunction!(trace, m)?,
            wrap_pyfunction!(cumsum, m)?,
            wrap_pyfunction!(var, m)?,
            wrap_pyfunction!(std_, m)?,
            wrap_pyfunction!(softmax, m)?,
            wrap_pyfunction!(log_softmax, m)?,
            wrap_pyfunction!(gelu, m)?,
            wrap_pyfunction!(clip, m)?,
            wrap_pyfunction!(nan_to_num, m)?,
            wrap_pyfunction!(where_, m)?,
            wrap_pyfunction!(logical_not, m)?,
            wrap_pyfunction!(power, m)?,
            wrap_pyfunction!(powi, m)?,
            wrap_pyfunction!(tensordot, m)?,
            wrap_pyfunction!(cross, m)?,
            wrap_pyfunction!(einsum, m)?,
            wrap_pyfunction!(solve, m)?,
            wrap_pyfunction!(cholesky, m)?,
            wrap_pyfunction!(diff, m)?,
            wrap_pyfunction!(trapezoid, m)?,
            wrap_pyfunction!(interp, m)?,
            wrap_pyfunction!(isclose, m)?,
            wrap_pyfunction!(allclose, m)?,
            wrap_pyfunction!(gather, m)?,
            wrap_pyfunction!(scatter_add, m)?,
        ] {
            m.add_function(f)?;
        }
        Ok(())
    }
}

/// The method twins of the shape functions and of the methods with options.
#[pymethods]
impl PyTensor {
    fn broadcast_to<'py>(
        &self,
        py: Python<'py>,
        shape: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.t.broadcast_to(shape_arg(shape)?))
    }

    #[pyo3(signature = (axis=None))]
    fn squeeze<'py>(
        &self,
        py: Python<'py>,
        axis: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        shapes::squeeze_tensor(py, &self.t, axis)
    }

    fn expand_dims<'py>(
        &self,
        py: Python<'py>,
        axis: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.t.expand_dims(ints(axis, "axis")?))
    }

    #[pyo3(signature = (indices_or_sections, axis=0))]
    fn split<'py>(
        &self,
        py: Python<'py>,
        indices_or_sections: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::axis)] axis: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        shapes::split_tensor(py, &self.t, indices_or_sections, axis)
    }

    #[pyo3(signature = (axis=None))]
    fn flip<'py>(
        &self,
        py: Python<'py>,
        axis: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::flip(&self.t, axes_arg(axis)?))
    }

    fn tile<'py>(&self, py: Python<'py>, reps: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.t.tile(shape_arg(reps)?))
    }

    fn swapaxes<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::param::axis1)] axis1: isize,
        #[pyo3(from_py_with = crate::ints::param::axis2)] axis2: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.t.swapaxes(axis1, axis2))
    }

    fn moveaxis<'py>(
        &self,
        py: Python<'py>,
        source: &Bound<'py, PyAny>,
        destination: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(
            py,
            self.t
                .moveaxis(ints(source, "source")?, ints(destination, "destination")?),
        )
    }

    #[pyo3(signature = (axis=-1))]
    fn softmax<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::param::axis)] axis: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.t.softmax(axis))
    }

    #[pyo3(signature = (axis=-1))]
    fn log_softmax<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::param::axis)] axis: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.t.log_softmax(axis))
    }

    #[pyo3(signature = (axis=None, keepdims=false, ddof=0))]
    fn var<'py>(
        slf: &Bound<'py, Self>,
        axis: Option<&Bound<'py, PyAny>>,
        keepdims: bool,
        #[pyo3(from_py_with = crate::ints::param::ddof)] ddof: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        shapes::var(slf.py(), slf.as_any(), axis, keepdims, ddof)
    }

    #[pyo3(signature = (axis=None, keepdims=false, ddof=0))]
    fn std<'py>(
        slf: &Bound<'py, Self>,
        axis: Option<&Bound<'py, PyAny>>,
        keepdims: bool,
        #[pyo3(from_py_with = crate::ints::param::ddof)] ddof: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        shapes::std_(slf.py(), slf.as_any(), axis, keepdims, ddof)
    }

    #[pyo3(signature = (axis=None, reverse=false))]
    fn cumsum<'py>(
        slf: &Bound<'py, Self>,
        #[pyo3(from_py_with = crate::ints::param::opt_axis)] axis: Option<isize>,
        reverse: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        shapes::cumsum(slf.py(), slf.as_any(), axis, reverse)
    }

    #[pyo3(signature = (approximate=true))]
    fn gelu<'py>(slf: &Bound<'py, Self>, approximate: bool) -> PyResult<Bound<'py, PyAny>> {
        shapes::gelu(slf.py(), slf.as_any(), approximate)
    }

    #[pyo3(signature = (lo=None, hi=None))]
    fn clip<'py>(
        slf: &Bound<'py, Self>,
        lo: Option<&Bound<'py, PyAny>>,
        hi: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        shapes::clip(slf.py(), slf.as_any(), lo, hi)
    }

    #[pyo3(signature = (copy=true, nan=0.0, posinf=None, neginf=None))]
    fn nan_to_num<'py>(
        slf: &Bound<'py, Self>,
        copy: bool,
        nan: f64,
        posinf: Option<f64>,
        neginf: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        shapes::nan_to_num(slf.py(), slf.as_any(), copy, nan, posinf, neginf)
    }

    fn logical_not<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::logical_not(&self.t))
    }

    fn powi<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::param::exponent)] exponent: i32,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.t.powi(exponent))
    }

    #[pyo3(signature = (indices, axis=0))]
    fn gather<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::list::indices)] indices: Vec<isize>,
        #[pyo3(from_py_with = crate::ints::param::axis)] axis: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.t.gather(indices, axis))
    }

    #[pyo3(signature = (indices, updates, axis=0))]
    fn scatter_add<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::list::indices)] indices: Vec<isize>,
        updates: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::axis)] axis: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, self.t.scatter_add(indices, operand(updates)?, axis))
    }

    fn cholesky<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::cholesky(&self.t))
    }

    fn solve<'py>(&self, py: Python<'py>, rhs: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::solve(&self.t, &to_tensor(rhs)?))
    }

    #[pyo3(signature = (k=0))]
    fn diag<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::param::k)] k: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::diag(&self.t).k(k).eval())
    }

    #[pyo3(signature = (offset=0, axis1=0, axis2=1))]
    fn diagonal<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::param::offset)] offset: isize,
        #[pyo3(from_py_with = crate::ints::param::axis1)] axis1: isize,
        #[pyo3(from_py_with = crate::ints::param::axis2)] axis2: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(
            py,
            qb::diagonal(&self.t)
                .offset(offset)
                .axis1(axis1)
                .axis2(axis2)
                .eval(),
        )
    }

    #[pyo3(signature = (offset=0, axis1=0, axis2=1))]
    fn trace<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::param::offset)] offset: isize,
        #[pyo3(from_py_with = crate::ints::param::axis1)] axis1: isize,
        #[pyo3(from_py_with = crate::ints::param::axis2)] axis2: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(
            py,
            qb::trace(&self.t)
                .offset(offset)
                .axis1(axis1)
                .axis2(axis2)
                .eval(),
        )
    }

    #[pyo3(signature = (shift, axis=None))]
    fn roll<'py>(
        slf: &Bound<'py, Self>,
        shift: &Bound<'py, PyAny>,
        axis: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        shapes::roll(slf.py(), slf.as_any(), shift, axis)
    }

    #[pyo3(signature = (repeats, axis=None))]
    fn repeat<'py>(
        slf: &Bound<'py, Self>,
        repeats: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = crate::ints::param::opt_axis)] axis: Option<isize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        shapes::repeat(slf.py(), slf.as_any(), repeats, axis)
    }

    fn pow<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        ret(py, qb::power(&self.t, exponent(other)?))
    }
}

/// Constructors (api.md §1).
mod creation {
    use super::*;

    /// A fill value: a Python bool gives `bool_`, a number float64, a rank-0 array its dtype.
    fn fill(value: &Bound<'_, PyAny>) -> PyResult<qb::Tensor> {
        if value.is_instance_of::<PyBool>() {
            return qb::array(value.extract::<bool>()?).or_raise();
        }
        to_tensor(value)
    }

    #[pyfunction]
    #[pyo3(signature = (obj, dtype=None))]
    pub fn array<'py>(
        py: Python<'py>,
        obj: &Bound<'py, PyAny>,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::tensor::wrap(py, asarray(obj, opt_dtype(dtype)?)?)
    }

    #[pyfunction]
    #[pyo3(name = "asarray", signature = (obj, dtype=None))]
    pub fn asarray_<'py>(
        py: Python<'py>,
        obj: &Bound<'py, PyAny>,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let dtype = opt_dtype(dtype)?;
        if let Ok(t) = obj.cast::<PyTensor>() {
            if dtype.is_none_or(|d| d == t.get().t.dtype()) {
                return Ok(obj.clone());
            }
        }
        crate::tensor::wrap(py, asarray(obj, dtype)?)
    }

    fn of_dtype(dtype: Option<&Bound<'_, PyAny>>) -> PyResult<qb::DType> {
        Ok(opt_dtype(dtype)?.unwrap_or(qb::F64))
    }

    #[pyfunction]
    #[pyo3(signature = (shape, dtype=None))]
    pub fn zeros<'py>(
        py: Python<'py>,
        shape: &Bound<'py, PyAny>,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, of_dtype(dtype)?.zeros(shape_arg(shape)?))
    }

    #[pyfunction]
    #[pyo3(signature = (shape, dtype=None))]
    pub fn ones<'py>(
        py: Python<'py>,
        shape: &Bound<'py, PyAny>,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, of_dtype(dtype)?.ones(shape_arg(shape)?))
    }

    #[pyfunction]
    #[pyo3(signature = (shape, fill_value, dtype=None))]
    pub fn full<'py>(
        py: Python<'py>,
        shape: &Bound<'py, PyAny>,
        fill_value: &Bound<'py, PyAny>,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let v = fill(fill_value)?;
        with_dtype(py, qb::full(shape_arg(shape)?, &v), dtype)
    }

    /// `arange(start, stop=None, step=1, dtype=None)`: all-integer arguments give int64 (api.md,
    /// amended), any float argument float64; `dtype` converts the result.
    #[pyfunction]
    #[pyo3(signature = (start, stop=None, step=None, dtype=None))]
    pub fn arange<'py>(
        py: Python<'py>,
        start: &Bound<'py, PyAny>,
        stop: Option<&Bound<'py, PyAny>>,
        step: Option<&Bound<'py, PyAny>>,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let stop = stop.filter(|s| !s.is_none());
        let step = step.filter(|s| !s.is_none());
        let int_of = |o: &Bound<'py, PyAny>| -> Option<i64> {
            (o.is_instance_of::<PyInt>() && !o.is_instance_of::<PyBool>())
                .then(|| o.extract::<i64>().ok())
                .flatten()
        };
        let ints = (
            int_of(start),
            stop.map(int_of).unwrap_or(Some(0)),
            step.map(int_of).unwrap_or(Some(1)),
        );
        let dtype = opt_dtype(dtype)?;
        if let (Some(a), Some(b), Some(s)) = ints {
            let (a, b) = if stop.is_some() { (a, b) } else { (0, a) };
            let r = qb::arange_from(a, b, s);
            return match dtype {
                Some(d) => ret(py, r.and_then(|t| t.astype(d))),
                None => ret(py, r),
            };
        }
        let float = |o: &Bound<'py, PyAny>| o.extract::<f64>();
        let start = float(start)?;
        let (start, stop) = match stop {
            Some(s) => (start, float(s)?),
            None => (0.0, start),
        };
        let step = match step {
            Some(s) => float(s)?,
            None => 1.0,
        };
        ret(py, dtype.unwrap_or(qb::F64).arange_from(start, stop, step))
    }

    #[pyfunction]
    #[pyo3(signature = (start, stop, num, dtype=None))]
    pub fn linspace<'py>(
        py: Python<'py>,
        start: f64,
        stop: f64,
        #[pyo3(from_py_with = crate::ints::param::num)] num: usize,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, of_dtype(dtype)?.linspace(start, stop, num))
    }

    #[pyfunction]
    #[pyo3(signature = (n, m=None, dtype=None))]
    pub fn eye<'py>(
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::param::n)] n: usize,
        #[pyo3(from_py_with = crate::ints::param::opt_m)] m: Option<usize>,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ret(py, of_dtype(dtype)?.eye_rect(n, m.unwrap_or(n)))
    }

    /// `t`, converted to `dtype` when one is given.
    fn with_dtype<'py>(
        py: Python<'py>,
        t: qb::Result<qb::Tensor>,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let t = t.or_raise()?;
        match opt_dtype(dtype)? {
            Some(d) if d != t.dtype() => ret(py, t.astype(d)),
            _ => crate::tensor::wrap(py, t),
        }
    }

    #[pyfunction]
    #[pyo3(signature = (x, dtype=None))]
    pub fn zeros_like<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        with_dtype(py, qb::zeros_like(&to_tensor(x)?), dtype)
    }

    #[pyfunction]
    #[pyo3(signature = (x, dtype=None))]
    pub fn ones_like<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        with_dtype(py, qb::ones_like(&to_tensor(x)?), dtype)
    }

    #[pyfunction]
    #[pyo3(signature = (x, fill_value, dtype=None))]
    pub fn full_like<'py>(
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        fill_value: f64,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        with_dtype(py, qb::full_like(&to_tensor(x)?, fill_value), dtype)
    }

    pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
        for f in [
            wrap_pyfunction!(array, m)?,
            wrap_pyfunction!(asarray_, m)?,
            wrap_pyfunction!(zeros, m)?,
            wrap_pyfunction!(ones, m)?,
            wrap_pyfunction!(full, m)?,
            wrap_pyfunction!(arange, m)?,
            wrap_pyfunction!(linspace, m)?,
            wrap_pyfunction!(eye, m)?,
            wrap_pyfunction!(zeros_like, m)?,
            wrap_pyfunction!(ones_like, m)?,
            wrap_pyfunction!(full_like, m)?,
        ] {
            m.add_function(f)?;
        }
        Ok(())
    }
}

/// Registers every array function on `m`.
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    unary::add_to(m)?;
    binary::add_to(m)?;
    reductions::add_to(m)?;
    shapes::add_to(m)?;
    creation::add_to(m)
}
