//! `qb.linalg` (api.md §17), `qb.newton` and `qb.ode.odeint` (api.md §18). Results with named
//! fields come back as tuples in field order; `quabla/linalg.py` gives them their NamedTuple
//! classes. Callbacks (`matvec`, `M`, `f`) are Python functions called with `Tensor`s.

use crate::convert::{to_tensor, type_name, value_from_py, value_to_py, Leaves};
use crate::errors::{to_qb, type_error, value_error, OrRaise};
use crate::interrupt::run_holding_gil;
use crate::tensor::{ret, wrap, PyTensor};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use quabla as qb;
use quabla::linalg as la;
use quabla::tree::{Leaf, TreeDef, Value};

/// The extra arguments of a solver callback (`args=`): a tuple (or list) of pytrees. Their
/// array leaves go to the facade, which differentiates and batches through them; the structure
/// (containers, Python numbers, strings) rebuilds the Python arguments for every call.
struct ExtraArgs {
    def: TreeDef,
    /// The leaves, with the array leaves replaced on each call by what the facade passes.
    leaves: Vec<Leaf>,
}

impl ExtraArgs {
    /// Reads `args=` of `solver`; a lone array is refused (it would be iterated row by row).
    fn read(
        args: Option<&Bound<'_, PyAny>>,
        solver: &str,
    ) -> PyResult<(ExtraArgs, Vec<qb::Tensor>)> {
        let value = match args {
            None => Value::Tuple(Vec::new()),
            Some(a) if a.is_none() => Value::Tuple(Vec::new()),
            Some(a)
                if a.is_exact_instance_of::<PyTuple>() || a.is_exact_instance_of::<PyList>() =>
            {
                let items = a
                    .try_iter()?
                    .map(|item| value_from_py(&item?, Leaves::Transform))
                    .collect::<PyResult<Vec<_>>>()?;
                Value::Tuple(items)
            }
            Some(a) => {
                return Err(type_error(format!(
                    "{solver}: args must be a tuple of extra arguments, got {}; write \
                     args=(value,) for one argument",
                    type_name(a)
                )))
            }
        };
        let (leaves, def) = qb::tree::flatten(&value);
        let tensors = leaves
            .iter()
            .filter_map(|l| l.as_tensor().cloned())
            .collect();
        Ok((ExtraArgs { def, leaves }, tensors))
    }

    /// The Python arguments for the facade's current values of the array leaves.
    fn rebuild<'py>(
        &self,
        py: Python<'py>,
        tensors: &[qb::Tensor],
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let mut given = tensors.iter();
        let leaves = self
            .leaves
            .iter()
            .map(|l| match l {
                Leaf::Tensor(_) => given.next().cloned().map(Leaf::Tensor).ok_or_else(|| {
                    value_error("internal: a solver passed fewer extra arrays than it was given")
                }),
                other => Ok(other.clone()),
            })
            .collect::<PyResult<Vec<_>>>()?;
        match Value::from_parts(&self.def, leaves).or_raise()? {
            Value::Tuple(items) => items.into_iter().map(|v| value_to_py(py, v)).collect(),
            other => Ok(vec![value_to_py(py, other)?]),
        }
    }
}

/// A Python callback of a solver: `f(x, *args)` (or `f(y, t, *args)`) as a facade callback.
/// `call` is its Python calling form, used in messages (`"matvec(v, *args)"`).
fn tensor_fn<'a>(
    f: &'a Py<PyAny>,
    extra: &'a ExtraArgs,
    solver: &'a str,
    call: &'a str,
) -> impl Fn(&[&qb::Tensor], &[qb::Tensor]) -> qb::Result<qb::Tensor> + 'a {
    let what = call.split('(').next().unwrap_or(call);
    move |head: &[&qb::Tensor], args: &[qb::Tensor]| {
        Python::attach(|py| {
            let mut items = Vec::with_capacity(head.len() + args.len());
            for t in head {
                items.push(wrap(py, (*t).clone()).map_err(to_qb)?);
            }
            items.extend(extra.rebuild(py, args).map_err(to_qb)?);
            let out = f
                .bind(py)
                .call1(PyTuple::new(py, items).map_err(to_qb)?)
                .map_err(|e| to_qb(name_args(py, e, solver, call)))?;
            if let Ok(t) = out.cast::<PyTensor>() {
                return Ok(t.get().t.clone());
            }
            to_tensor(&out).map_err(|e| {
                crate::errors::result_error(py, e, || {
                    format!(
                        "{solver}: {what} must return an array, got {}",
                        type_name(&out)
                    )
                })
            })
        })
    }
}

/// TR3/TR4 raised inside a solver callback, said in the solver's Python terms: the callback
/// read a tracer of the enclosing function instead of receiving it through `args=`.
fn name_args(py: Python<'_>, e: PyErr, solver: &str, call: &str) -> PyErr {
    let is_capture = crate::errors::quabla_class(py, "TracerError")
        .map(|c| e.is_instance(py, &c))
        .unwrap_or(false)
        && {
            let m = e.value(py).to_string();
            m.starts_with("control-flow regions cannot close over an outer tracer")
                || m.contains("cannot close over tracers of an enclosing transform")
        };
    if !is_capture {
        return e;
    }
    let what = call.split('(').next().unwrap_or(call);
    crate::errors::to_py(qb::Error::Tracer {
        kind: qb::TracerErrorKind::RegionCapture,
        message: format!(
            "{solver}: {what} closes over a traced value of the enclosing function; pass it \
             with args=(value, ...) and read it from the extra arguments of {call} (solvers \
             cannot close over tracers of an enclosing transform)"
        ),
    })
}

fn callable(f: &Bound<'_, PyAny>, solver: &str, argument: &str) -> PyResult<Py<PyAny>> {
    if !f.is_callable() {
        return Err(type_error(format!("{solver}: {argument} must be callable")));
    }
    Ok(f.clone().unbind())
}

fn info_dict<'py>(
    py: Python<'py>,
    entries: Vec<(&str, qb::Tensor)>,
) -> PyResult<Bound<'py, PyAny>> {
    let d = PyDict::new(py);
    for (k, v) in entries {
        d.set_item(k, wrap(py, v)?)?;
    }
    Ok(d.into_any())
}

fn pair<'py>(
    py: Python<'py>,
    a: Bound<'py, PyAny>,
    b: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(PyTuple::new(py, [a, b])?.into_any())
}

fn solver_info<'py>(py: Python<'py>, i: la::SolverInfo) -> PyResult<Bound<'py, PyAny>> {
    info_dict(
        py,
        vec![
            ("iterations", i.iterations),
            ("residual_norm", i.residual_norm),
            ("success", i.success),
        ],
    )
}

#[pyfunction]
fn solve<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let (a, b) = (to_tensor(a)?, to_tensor(b)?);
    wrap(py, crate::transforms::run(py, || la::solve(&a, &b))?)
}

#[pyfunction]
#[pyo3(signature = (a, b, trans=None, lower=false))]
fn solve_triangular<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    trans: Option<&Bound<'py, PyAny>>,
    lower: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let call = la::solve_triangular(to_tensor(a)?, to_tensor(b)?).lower(lower);
    let call = match trans {
        None => call,
        Some(t) if t.is_instance_of::<PyString>() => call.trans(t.extract::<String>()?.as_str()),
        Some(t) => call.trans(t.extract::<i64>().map_err(|_| {
            value_error(format!(
                "solve_triangular: trans must be 0, 1, \"N\" or \"T\", got {}",
                t.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })?),
    };
    ret(py, call.eval())
}

#[pyfunction]
fn cholesky<'py>(py: Python<'py>, a: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    ret(py, la::cholesky(to_tensor(a)?))
}

#[pyfunction]
#[pyo3(signature = (c, b, lower=true))]
fn cho_solve<'py>(
    py: Python<'py>,
    c: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    lower: bool,
) -> PyResult<Bound<'py, PyAny>> {
    ret(
        py,
        la::cho_solve(to_tensor(c)?, to_tensor(b)?)
            .lower(lower)
            .eval(),
    )
}

#[pyfunction]
fn eigvalsh<'py>(py: Python<'py>, a: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    ret(py, la::eigvalsh(to_tensor(a)?))
}

#[pyfunction]
fn expm<'py>(py: Python<'py>, a: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    ret(py, la::expm(to_tensor(a)?))
}

/// `lu_factor(a) -> (lu, piv)`.
#[pyfunction]
fn lu_factor<'py>(py: Python<'py>, a: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let f = la::lu_factor(to_tensor(a)?).or_raise()?;
    pair(py, wrap(py, f.lu)?, wrap(py, f.piv)?)
}

/// `lu_solve((lu, piv), b, trans=0)`.
#[pyfunction]
#[pyo3(signature = (lu_and_piv, b, trans=None))]
fn lu_solve<'py>(
    py: Python<'py>,
    lu_and_piv: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    trans: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let (lu, piv): (Bound<'py, PyAny>, Bound<'py, PyAny>) = lu_and_piv.extract().map_err(|_| {
        type_error(format!(
            "lu_solve: the first argument must be the pair (lu, piv) that lu_factor returned, \
             got {}",
            type_name(lu_and_piv)
        ))
    })?;
    let transpose = match trans {
        None => false,
        Some(t) if t.is_none() => false,
        Some(t) => match t.extract::<String>().ok().as_deref() {
            Some("N") => false,
            Some("T") => true,
            _ => match t.extract::<i64>() {
                Ok(0) => false,
                Ok(1) => true,
                _ => {
                    return Err(value_error(format!(
                        "lu_solve: trans must be 0, 1, \"N\" or \"T\", got {}",
                        t.repr().map(|r| r.to_string()).unwrap_or_default()
                    )))
                }
            },
        },
    };
    let factor = la::LuFactor {
        lu: to_tensor(&lu)?,
        piv: to_tensor(&piv)?,
    };
    ret(py, la::lu_solve(&factor, to_tensor(b)?, transpose))
}

#[pyfunction]
fn slogdet<'py>(py: Python<'py>, a: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let r = la::slogdet(to_tensor(a)?).or_raise()?;
    pair(py, wrap(py, r.sign)?, wrap(py, r.logabsdet)?)
}

#[pyfunction]
fn det<'py>(py: Python<'py>, a: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    ret(py, la::det(to_tensor(a)?))
}

#[pyfunction]
fn inv<'py>(py: Python<'py>, a: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    ret(py, la::inv(to_tensor(a)?))
}

#[pyfunction]
fn eigh<'py>(py: Python<'py>, a: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let r = la::eigh(to_tensor(a)?).or_raise()?;
    pair(py, wrap(py, r.eigenvalues)?, wrap(py, r.eigenvectors)?)
}

#[pyfunction]
#[pyo3(signature = (a, mode="reduced"))]
fn qr<'py>(py: Python<'py>, a: &Bound<'py, PyAny>, mode: &str) -> PyResult<Bound<'py, PyAny>> {
    let call = la::qr(to_tensor(a)?).mode(mode);
    if mode == "r" {
        return ret(py, call.eval_r());
    }
    let r = call.eval().or_raise()?;
    pair(py, wrap(py, r.q)?, wrap(py, r.r)?)
}

#[pyfunction]
#[pyo3(signature = (a, full_matrices=false, compute_uv=true))]
fn svd<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    full_matrices: bool,
    compute_uv: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let call = la::svd(to_tensor(a)?).full_matrices(full_matrices);
    if !compute_uv {
        return ret(py, call.eval_s());
    }
    let r = call.eval().or_raise()?;
    Ok(PyTuple::new(py, [wrap(py, r.u)?, wrap(py, r.s)?, wrap(py, r.vh)?])?.into_any())
}

#[pyfunction]
#[pyo3(signature = (a, b, return_residuals=false))]
fn lstsq<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    return_residuals: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let call = la::lstsq(to_tensor(a)?, to_tensor(b)?);
    if !return_residuals {
        return ret(py, call.eval());
    }
    let r = call.eval_with_residuals().or_raise()?;
    pair(py, wrap(py, r.solution)?, wrap(py, r.residuals)?)
}

#[pyfunction]
#[pyo3(signature = (x, ord=None, axis=None, keepdims=false))]
fn norm<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    ord: Option<&Bound<'py, PyAny>>,
    axis: Option<&Bound<'py, PyAny>>,
    keepdims: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let mut call = la::norm(to_tensor(x)?).keepdims(keepdims);
    match ord {
        None => {}
        Some(o) if o.is_none() => {}
        Some(o) if o.is_instance_of::<PyString>() => {
            call = call.ord(o.extract::<String>()?.as_str())
        }
        Some(o) if o.is_instance_of::<PyInt>() || o.is_instance_of::<PyFloat>() => {
            call = call.ord(o.extract::<f64>()?)
        }
        Some(o) => {
            return Err(value_error(format!(
                "norm: invalid ord {}",
                o.repr().map(|r| r.to_string()).unwrap_or_default()
            )))
        }
    }
    match axis {
        None => {}
        Some(a) if a.is_none() => {}
        Some(a) if crate::ints::is_int(a)? => {
            call = call.axis(crate::ints::int_arg::<isize>(a, "axis")?)
        }
        Some(a) => match a.extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>() {
            Ok((i, j)) => {
                call = call.axis((
                    crate::ints::int_arg::<isize>(&i, "axis")?,
                    crate::ints::int_arg::<isize>(&j, "axis")?,
                ))
            }
            Err(_) => {
                return Err(type_error(format!(
                    "norm: axis must be None, an int or a pair of ints, got {}",
                    type_name(a)
                )))
            }
        },
    }
    ret(py, call.eval())
}

#[pyfunction]
fn matrix_power<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    #[pyo3(from_py_with = crate::ints::param::power)] n: i64,
) -> PyResult<Bound<'py, PyAny>> {
    ret(py, la::matrix_power(to_tensor(a)?, n))
}

#[pyfunction]
#[pyo3(signature = (a, rtol=None))]
fn pinv<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    rtol: Option<f64>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut call = la::pinv(to_tensor(a)?);
    if let Some(r) = rtol {
        call = call.rtol(r);
    }
    ret(py, call.eval())
}

/// `cg` and `gmres` share their options.
#[allow(clippy::too_many_arguments)]
fn krylov<'py>(
    py: Python<'py>,
    solver: &str,
    matvec: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    args: Option<&Bound<'py, PyAny>>,
    x0: Option<&Bound<'py, PyAny>>,
    tol: f64,
    atol: f64,
    maxiter: Option<usize>,
    m: Option<&Bound<'py, PyAny>>,
    info: bool,
    restart: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let mv = callable(matvec, solver, "matvec")?;
    let pre = m
        .filter(|m| !m.is_none())
        .map(|m| callable(m, solver, "M"))
        .transpose()?;
    let b = to_tensor(b)?;
    let (extra, args) = ExtraArgs::read(args, solver)?;
    let x0 = x0.filter(|x| !x.is_none()).map(to_tensor).transpose()?;
    let mvf = tensor_fn(&mv, &extra, solver, "matvec(v, *args)");
    let mv_call = move |x: &qb::Tensor, a: &[qb::Tensor]| mvf(&[x], a);
    macro_rules! configure {
        ($call:expr) => {{
            let mut call = $call.args(&args).tol(tol).atol(atol);
            if let Some(x0) = &x0 {
                call = call.x0(x0);
            }
            if let Some(n) = maxiter {
                call = call.maxiter(n);
            }
            if let Some(p) = &pre {
                let pf = tensor_fn(p, &extra, solver, "M(v, *args)");
                call = call.m(move |x: &qb::Tensor, a: &[qb::Tensor]| pf(&[x], a));
            }
            if info {
                let (x, i) = run_holding_gil(py, || call.eval_with_info())?;
                pair(py, wrap(py, x)?, solver_info(py, i)?)
            } else {
                wrap(py, run_holding_gil(py, || call.eval())?)
            }
        }};
    }
    if solver == "gmres" {
        configure!(la::gmres(mv_call, &b).restart(restart.unwrap_or(20)))
    } else {
        configure!(la::cg(mv_call, &b))
    }
}

#[pyfunction]
#[pyo3(signature = (matvec, b, *, args=None, x0=None, tol=1e-5, atol=0.0, maxiter=None, M=None, info=false))]
#[allow(non_snake_case, clippy::too_many_arguments)]
fn cg<'py>(
    py: Python<'py>,
    matvec: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    args: Option<&Bound<'py, PyAny>>,
    x0: Option<&Bound<'py, PyAny>>,
    tol: f64,
    atol: f64,
    #[pyo3(from_py_with = crate::ints::param::opt_maxiter)] maxiter: Option<usize>,
    M: Option<&Bound<'py, PyAny>>,
    info: bool,
) -> PyResult<Bound<'py, PyAny>> {
    krylov(
        py, "cg", matvec, b, args, x0, tol, atol, maxiter, M, info, None,
    )
}

#[pyfunction]
#[pyo3(signature = (matvec, b, *, args=None, x0=None, tol=1e-5, atol=0.0, restart=20, maxiter=None, M=None, info=false))]
#[allow(non_snake_case, clippy::too_many_arguments)]
fn gmres<'py>(
    py: Python<'py>,
    matvec: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    args: Option<&Bound<'py, PyAny>>,
    x0: Option<&Bound<'py, PyAny>>,
    tol: f64,
    atol: f64,
    #[pyo3(from_py_with = crate::ints::param::restart)] restart: usize,
    #[pyo3(from_py_with = crate::ints::param::opt_maxiter)] maxiter: Option<usize>,
    M: Option<&Bound<'py, PyAny>>,
    info: bool,
) -> PyResult<Bound<'py, PyAny>> {
    krylov(
        py,
        "gmres",
        matvec,
        b,
        args,
        x0,
        tol,
        atol,
        maxiter,
        M,
        info,
        Some(restart),
    )
}

/// `qb.newton(f, x0, *, args=(), tol=None, maxiter=50, info=False)`.
#[pyfunction]
#[pyo3(signature = (f, x0, *, args=None, tol=None, maxiter=50, info=false))]
pub fn newton<'py>(
    py: Python<'py>,
    f: &Bound<'py, PyAny>,
    x0: &Bound<'py, PyAny>,
    args: Option<&Bound<'py, PyAny>>,
    tol: Option<f64>,
    #[pyo3(from_py_with = crate::ints::param::maxiter)] maxiter: usize,
    info: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let fun = callable(f, "newton", "f")?;
    let (extra, args) = ExtraArgs::read(args, "newton")?;
    let ff = tensor_fn(&fun, &extra, "newton", "f(x, *args)");
    let x0 = to_tensor(x0)?;
    let mut call = qb::newton(move |x: &qb::Tensor, a: &[qb::Tensor]| ff(&[x], a), &x0)
        .args(&args)
        .maxiter(maxiter);
    if let Some(t) = tol {
        call = call.tol(t);
    }
    if info {
        let (x, i) = run_holding_gil(py, || call.eval_with_info())?;
        pair(py, wrap(py, x)?, solver_info(py, i)?)
    } else {
        wrap(py, run_holding_gil(py, || call.eval())?)
    }
}

/// `qb.ode.odeint(f, y0, t_span, *, steps=None, method="rk4", ...)`.
#[pyfunction]
#[pyo3(signature = (f, y0, t_span, *, steps=None, method="rk4", args=None, save=false, saveat=None, rtol=1e-6, atol=1e-9, max_steps=512, info=false))]
#[allow(clippy::too_many_arguments)]
fn odeint<'py>(
    py: Python<'py>,
    f: &Bound<'py, PyAny>,
    y0: &Bound<'py, PyAny>,
    t_span: &Bound<'py, PyAny>,
    #[pyo3(from_py_with = crate::ints::param::opt_steps)] steps: Option<usize>,
    method: &str,
    args: Option<&Bound<'py, PyAny>>,
    save: bool,
    saveat: Option<&Bound<'py, PyAny>>,
    rtol: f64,
    atol: f64,
    #[pyo3(from_py_with = crate::ints::param::max_steps)] max_steps: usize,
    info: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let fun = callable(f, "odeint", "f")?;
    let (extra, args) = ExtraArgs::read(args, "odeint")?;
    let ff = tensor_fn(&fun, &extra, "odeint", "f(y, t, *args)");
    let y0 = to_tensor(y0)?;
    let (t0, t1): (Bound<'py, PyAny>, Bound<'py, PyAny>) = t_span
        .extract()
        .map_err(|_| type_error("odeint: t_span must be a pair (t0, t1)"))?;
    let time = |t: &Bound<'py, PyAny>| -> PyResult<qb::Operand> {
        if t.is_instance_of::<PyFloat>() || t.is_instance_of::<PyInt>() {
            Ok(qb::Operand::Scalar(t.extract()?))
        } else {
            Ok(qb::Operand::Tensor(to_tensor(t)?))
        }
    };
    let method: qb::ode::Method = method.parse().or_raise()?;
    let mut call = qb::ode::odeint(
        move |y: &qb::Tensor, t: &qb::Tensor, a: &[qb::Tensor]| ff(&[y, t], a),
        &y0,
        (time(&t0)?, time(&t1)?),
    )
    .method(method)
    .args(&args)
    .save(save)
    .rtol(rtol)
    .atol(atol)
    .max_steps(max_steps);
    if let Some(n) = steps {
        call = call.steps(n);
    }
    let ts;
    if let Some(s) = saveat.filter(|s| !s.is_none()) {
        ts = to_tensor(s)?;
        call = call.saveat(&ts);
    }
    if info {
        let (y, i) = run_holding_gil(py, || call.eval_with_info())?;
        let d = info_dict(
            py,
            vec![
                ("t", i.t),
                ("accepted_steps", i.accepted_steps),
                ("rejected_steps", i.rejected_steps),
                ("success", i.success),
            ],
        )?;
        pair(py, wrap(py, y)?, d)
    } else {
        wrap(py, run_holding_gil(py, || call.eval())?)
    }
}

/// Registers `qb.linalg` on `linalg`, `odeint` on `ode` and `newton` on the top module.
pub fn add_to(
    top: &Bound<'_, PyModule>,
    linalg: &Bound<'_, PyModule>,
    ode: &Bound<'_, PyModule>,
) -> PyResult<()> {
    for f in [
        wrap_pyfunction!(solve, linalg)?,
        wrap_pyfunction!(solve_triangular, linalg)?,
        wrap_pyfunction!(cholesky, linalg)?,
        wrap_pyfunction!(cho_solve, linalg)?,
        wrap_pyfunction!(slogdet, linalg)?,
        wrap_pyfunction!(det, linalg)?,
        wrap_pyfunction!(inv, linalg)?,
        wrap_pyfunction!(eigh, linalg)?,
        wrap_pyfunction!(eigvalsh, linalg)?,
        wrap_pyfunction!(expm, linalg)?,
        wrap_pyfunction!(lu_factor, linalg)?,
        wrap_pyfunction!(lu_solve, linalg)?,
        wrap_pyfunction!(qr, linalg)?,
        wrap_pyfunction!(svd, linalg)?,
        wrap_pyfunction!(lstsq, linalg)?,
        wrap_pyfunction!(norm, linalg)?,
        wrap_pyfunction!(matrix_power, linalg)?,
        wrap_pyfunction!(pinv, linalg)?,
        wrap_pyfunction!(cg, linalg)?,
        wrap_pyfunction!(gmres, linalg)?,
    ] {
        linalg.add_function(f)?;
    }
    ode.add_function(wrap_pyfunction!(odeint, ode)?)?;
    top.add_function(wrap_pyfunction!(newton, top)?)
}
