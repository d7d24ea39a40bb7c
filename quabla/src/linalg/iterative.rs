//! What `cg`, `gmres` and `newton` share (numerics.md §7.1-§7.4): the [`SolverInfo`] record,
//! option checks, the flat-vector helpers their loops are written with, calling the user's
//! function with its contract checked, and the errors said in the solvers' terms.
//!
//! **How a solve runs.** Each solver's iteration is written once against tensors, with
//! `while_loop` over one packed floating carry: eagerly `while_loop` is a Rust loop (and a
//! failure to converge raises [`Error::NotConverged`]); under a trace it is one region, which
//! never raises and reports through `info.success`. Under a trace the loop is wrapped in a
//! `custom_vjp` whose backward pass is the implicit function theorem at the returned solution
//! (the solvers' modules say which adjoint system), so reverse mode never differentiates the
//! iterations. The forward pass of that rule gets its solution from the same wrapper one level
//! down, and the backward pass solves its adjoint system with it too, so that the derivative
//! graph contains solver nodes with rules of their own rather than bare loops: reverse-mode
//! derivatives compose [`IMPLICIT_ORDER`] times. Forward mode raises TF4 (the spec's choice,
//! E81).

use crate::error::{Error, Result, TracerErrorKind};
use crate::operand::Operand;
use crate::tensor::Tensor;
use crate::{trace, DType};

/// How many reverse-mode derivatives of a solve compose (`grad` of `grad` of `grad`, a reverse
/// `hessian` and its gradient). Each level traces the solve's loop twice more (its own rule's
/// forward and adjoint solves; once for `newton`, whose adjoint is a dense solve), so the
/// staged graph of a Krylov solve grows like `2^IMPLICIT_ORDER`; deeper compositions raise
/// TF2 from the innermost loop.
pub const IMPLICIT_ORDER: usize = 3;

/// What [`super::cg`], [`super::gmres`] and [`crate::newton`] report with `eval_with_info`
/// (api.md §17): float tensors, one entry per example under `vmap`. A pytree. The info carries
/// no derivative.
#[derive(Clone, Debug, crate::Tree)]
pub struct SolverInfo {
    /// Iterations done (Arnoldi steps for `gmres`), a float tensor.
    pub iterations: Tensor,
    /// `||r||` of the final residual (`||f(x)||` for `newton`).
    pub residual_norm: Tensor,
    /// Whether the stopping test passed, a bool tensor (always true eagerly, where a failure
    /// raises).
    pub success: Tensor,
}

impl std::fmt::Display for SolverInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{{iterations: {}, residual_norm: {}, success: {}}}",
            self.iterations, self.residual_norm, self.success
        )
    }
}

/// A user function of the solvers: `f(x, args)` with `x` in the shape of the solution.
pub(super) type UserFn<'a> = dyn Fn(&Tensor, &[Tensor]) -> Result<Tensor> + 'a;

/// AR4 for `tol`.
pub(super) fn check_tol(tol: f64) -> Result<()> {
    if tol.is_finite() && tol > 0.0 {
        Ok(())
    } else {
        Err(Error::invalid("tol must be a finite positive number"))
    }
}

pub(super) fn check_atol(atol: f64) -> Result<()> {
    if atol.is_finite() && atol >= 0.0 {
        Ok(())
    } else {
        Err(Error::invalid("atol must be a finite non-negative number"))
    }
}

/// TF5, before anything is traced.
pub(super) fn check_not_in_region(solver: &str) -> Result<()> {
    match trace::enclosing_region() {
        Some(region) => Err(Error::invalid(format!(
            "custom_vjp functions and solvers cannot be called inside a {region} body ({solver} was); call {solver} outside the loop and pass its result in"
        ))),
        None => Ok(()),
    }
}

/// TR3/TR4 said in the solver's terms: the user's function read a tracer it was not given.
pub(super) fn name_args(solver: &'static str, function: &'static str) -> impl Fn(Error) -> Error {
    move |e| {
        match e {
        Error::Tracer {
            kind: TracerErrorKind::RegionCapture | TracerErrorKind::CustomRuleCapture,
            ..
        } => Error::Tracer {
            kind: TracerErrorKind::CustomRuleCapture,
            message: format!(
                "{solver}: {function} closes over a traced value of the enclosing function; pass it through args ({solver}(..).args(&[..])) and read it from {function}'s second argument (solvers cannot close over tracers of an enclosing transform)"
            ),
        },
        other => other,
    }
    }
}

/// A floating operand as a tensor (TY for anything else).
pub(super) fn floating_tensor(solver: &str, what: &str, t: &Tensor) -> Result<()> {
    if t.dtype().is_float() {
        Ok(())
    } else {
        Err(Error::Type {
            message: format!(
                "{solver}: {what} must be a floating array, got {}; convert it with astype(quabla.float64)",
                t.dtype().name()
            ),
        })
    }
}

/// A user function called on flat vectors: `x` is reshaped to `shape` for the call, and the
/// result must have `out` elements (in any shape) and the dtype (TY14; a weak result adopts
/// it).
pub(super) struct Flat<'a> {
    pub f: &'a UserFn<'a>,
    pub solver: &'static str,
    pub name: &'static str,
    pub shape: Vec<usize>,
    pub dtype: DType,
    /// Whether the result must also have `shape` (a linear operator) or only its size.
    pub same_shape: bool,
}

impl Flat<'_> {
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn unflat(&self, x: &Tensor) -> Result<Tensor> {
        if x.shape() == self.shape.as_slice() {
            return Ok(x.clone());
        }
        let dims: Vec<isize> = self.shape.iter().map(|&d| d as isize).collect();
        x.reshape(dims)
    }

    pub fn call(&self, x: &Tensor, args: &[Tensor]) -> Result<Tensor> {
        let out = (self.f)(&self.unflat(x)?, args)?;
        let n = self.size();
        let shape_ok = if self.same_shape {
            out.shape() == self.shape.as_slice()
        } else {
            out.size() == n
        };
        if !shape_ok {
            let want = if self.same_shape {
                format!("the shape {:?} of its input", self.shape)
            } else {
                format!("{n} elements, as many as x has")
            };
            return Err(Error::Shape {
                op: self.solver.into(),
                message: format!(
                    "{}: {} returned shape {:?}; it must return {want}",
                    self.solver,
                    self.name,
                    out.shape()
                ),
            });
        }
        let out = if out.dtype() == self.dtype {
            out
        } else if out.is_weak() && out.dtype().is_float() {
            out.astype(self.dtype)?
        } else {
            return Err(Error::Type {
                message: format!(
                    "{}: {} returned {}, expected {}",
                    self.solver,
                    self.name,
                    out.dtype().name(),
                    self.dtype.name()
                ),
            });
        };
        if out.shape() == [n] {
            Ok(out)
        } else {
            out.reshape([n as isize])
        }
    }
}

/// Elements `start..start + len` of a flat vector.
pub(super) fn seg(x: &Tensor, start: usize, len: usize) -> Result<Tensor> {
    crate::dispatch::apply(vec![x.into()], |b, x| b.slice(x[0], vec![start], vec![len]))
}

/// Flat vectors end to end.
pub(super) fn pack(parts: &[&Tensor]) -> Result<Tensor> {
    crate::concat(parts, 0)
}

/// `sum(a * b)` as a one-element vector.
pub(super) fn dot1(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    (a * b)?.sum()?.reshape([1])
}

/// The scaled 2-norm as a one-element vector.
pub(super) fn norm1(x: &Tensor) -> Result<Tensor> {
    crate::norm(x)?.reshape([1])
}

/// A rank-0 bool from a one-element test.
pub(super) fn flag(t: Tensor) -> Result<Tensor> {
    t.reshape(Vec::<isize>::new())
}

/// A one-element constant of `dtype`.
pub(super) fn scalar1(value: f64, dtype: DType) -> Result<Tensor> {
    crate::full([1], value)?.astype(dtype)
}

/// `where(mask, a, b)`.
pub(super) fn select(
    mask: &Tensor,
    a: impl Into<Operand>,
    b: impl Into<Operand>,
) -> Result<Tensor> {
    crate::where_(mask, a, b)
}

/// The three statistics of a solve packed as one vector `[iterations, residual, success]`
/// (the outputs of a custom rule must be floating tensors).
pub(super) fn stats(iterations: &Tensor, residual: &Tensor, success: &Tensor) -> Result<Tensor> {
    let dtype = iterations.dtype();
    pack(&[iterations, residual, &success.astype(dtype)?])
}

/// The user's info from packed statistics; eagerly, `fail` is the error of a failed solve.
pub(super) fn info(stats: &Tensor, fail: impl FnOnce(u64, f64) -> Error) -> Result<SolverInfo> {
    let iterations = crate::stop_gradient(seg(stats, 0, 1)?.reshape(Vec::<isize>::new())?)?;
    let residual_norm = crate::stop_gradient(seg(stats, 1, 1)?.reshape(Vec::<isize>::new())?)?;
    let success = seg(stats, 2, 1)?
        .greater(0.5)?
        .reshape(Vec::<isize>::new())?;
    if !trace::active() && !success.item_bool()? {
        return Err(fail(iterations.item()? as u64, residual_norm.item()?));
    }
    Ok(SolverInfo {
        iterations,
        residual_norm,
        success,
    })
}

/// `max(tol * ||b||, atol)`, the residual bound of the Krylov solvers, as a one-element vector.
pub(super) fn threshold(b: &Tensor, tol: f64, atol: f64) -> Result<Tensor> {
    let relative = norm1(b)?.mul(tol)?;
    crate::maximum(&relative, atol)
}
