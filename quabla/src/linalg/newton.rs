//! `qb::newton` (api.md §17, numerics.md §7.3, §7.4): the root of `f(x, args) = 0` by Newton's
//! method with a dense Jacobian per step, the step from Householder least squares (`qr` and a
//! triangular solve) and Armijo backtracking on `||f||²`.
//!
//! One iteration is one `while_loop` step on the carry `[x | iterations | status | ||f(x)||]`
//! (`status`: 0 running, 1 converged, 2 singular Jacobian, 3 line search failed), with the
//! backtracking an inner `while_loop` of at most 30 halvings. A full step already within the
//! step tolerance ends the solve as converged even if the line search rejects it (near the
//! root `||f||` is rounding noise, which no step decreases reliably). Reverse mode is the implicit
//! function theorem at the root `x*`: `J(x*)ᵀ λ = x_bar` by a dense `solve` with `J` recomputed at
//! `x*`, then `args_bar = -∂/∂args <λ, f(x*, args)>`. Both are differentiable ops, and the root
//! the rule's forward pass returns is again a staged solve with this rule, so reverse-mode
//! derivatives compose (to [`IMPLICIT_ORDER`] levels). Forward mode raises TF4, as for `cg`.

use super::iterative::{
    check_not_in_region, check_tol, flag, floating_tensor, info, name_args, norm1, pack, scalar1,
    seg, select, stats, Flat, SolverInfo, UserFn, IMPLICIT_ORDER,
};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::{trace, DType};

/// The Armijo constant of the line search (numerics.md §7.3).
const ARMIJO: f64 = 1e-4;
/// The most halvings of the step length.
const HALVINGS: f64 = 30.0;

/// The codes of the carry's `status` entry.
const RUNNING: f64 = 0.0;
const CONVERGED: f64 = 1.0;
const SINGULAR: f64 = 2.0;
const LINE_SEARCH: f64 = 3.0;

/// `newton(f, x0)`: a root of `f(x, args) = 0` with `x` one floating array of `n` elements and
/// `f` returning `n` elements (in any shape). Finish with [`Newton::eval`] or
/// [`Newton::eval_with_info`].
///
/// ```
/// use quabla as qb;
/// use qb::prelude::*;
/// # fn main() -> qb::Result<()> {
/// let cube = |x: &qb::Tensor, args: &[qb::Tensor]| x.powi(3)? - &args[0];
/// let p = qb::array([8.0, 27.0])?;
/// let x = qb::newton(cube, &qb::ones([2])?).args(&[&p]).eval()?;
/// let x = x.to_vec::<f64>()?;
/// assert!((x[0] - 2.0).abs() < 1e-10 && (x[1] - 3.0).abs() < 1e-10);
/// # Ok(())
/// # }
/// ```
pub fn newton<'a>(
    f: impl Fn(&Tensor, &[Tensor]) -> Result<Tensor> + 'a,
    x0: &Tensor,
) -> Newton<'a> {
    Newton {
        f: Box::new(f),
        x0: x0.clone(),
        args: Vec::new(),
        tol: None,
        maxiter: 50,
    }
}

/// A `newton` call being configured.
#[must_use = "finish the call with .eval() or .eval_with_info()"]
pub struct Newton<'a> {
    f: Box<UserFn<'a>>,
    x0: Tensor,
    args: Vec<Tensor>,
    tol: Option<f64>,
    maxiter: usize,
}

impl std::fmt::Debug for Newton<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "newton(x0={:?}, tol={:?}, maxiter={})",
            self.x0.shape(),
            self.tol,
            self.maxiter
        )
    }
}

impl<'a> Newton<'a> {
    /// The arrays `f` receives as its second argument; traced values must come this way, and
    /// derivatives flow to each of them.
    pub fn args<O: AsRef<Tensor>>(mut self, args: &[O]) -> Self {
        self.args = args.iter().map(|a| a.as_ref().clone()).collect();
        self
    }

    /// The step tolerance: stop when `||alpha dx|| <= tol (1 + ||x||)` (default
    /// `sqrt(eps(dtype))`).
    pub fn tol(mut self, tol: f64) -> Self {
        self.tol = Some(tol);
        self
    }

    /// The largest number of iterations (default 50).
    pub fn maxiter(mut self, maxiter: usize) -> Self {
        self.maxiter = maxiter;
        self
    }

    /// The root, of `x0`'s shape. Eagerly a failure is [`Error::NotConverged`] (RT4).
    pub fn eval(self) -> Result<Tensor> {
        Ok(self.run()?.0)
    }

    /// The root and the [`SolverInfo`]; under a transform a failure is `info.success == false`.
    pub fn eval_with_info(self) -> Result<(Tensor, SolverInfo)> {
        self.run()
    }

    fn run(&self) -> Result<(Tensor, SolverInfo)> {
        let solver = "newton";
        check_not_in_region(solver)?;
        floating_tensor(solver, "x0", &self.x0)?;
        let dtype = self.x0.dtype();
        let tol = match self.tol {
            Some(t) => {
                check_tol(t)?;
                t
            }
            None => eps(dtype).sqrt(),
        };
        let problem = Problem {
            f: Flat {
                f: &*self.f,
                solver,
                name: "f",
                shape: self.x0.shape().to_vec(),
                dtype,
                same_shape: false,
            },
            tol,
            maxiter: self.maxiter as f64,
        };
        let (x, st) = problem
            .solve(&self.x0, &self.args, IMPLICIT_ORDER)
            .map_err(name_args(solver, "f"))?;
        let status = if trace::active() {
            RUNNING
        } else {
            seg(&st, 3, 1)?.item()?
        };
        let reason = if status == SINGULAR {
            "the Jacobian is singular"
        } else if status == LINE_SEARCH {
            "the line search failed"
        } else {
            "increase maxiter or improve x0"
        };
        let info = info(&seg(&st, 0, 3)?, |iterations, residual| {
            Error::NotConverged {
                solver,
                iterations,
                residual,
                tolerance: tol,
                reason,
            }
        })?;
        Ok((x, info))
    }
}

fn eps(dtype: DType) -> f64 {
    if dtype == DType::F32 {
        f32::EPSILON as f64
    } else {
        f64::EPSILON
    }
}

/// A validated root-finding problem.
struct Problem<'s> {
    f: Flat<'s>,
    tol: f64,
    maxiter: f64,
}

impl Problem<'_> {
    fn size(&self) -> usize {
        self.f.size()
    }

    fn flat(&self, x: &Tensor) -> Result<Tensor> {
        let n = self.size();
        if x.shape() == [n] {
            Ok(x.clone())
        } else {
            x.reshape([n as isize])
        }
    }

    /// The Jacobian `[n, n]` of the flat `f` at the flat `x`.
    fn jacobian(&self, x: &Tensor, args: &[Tensor]) -> Result<Tensor> {
        crate::jacobian(|x: Tensor| self.f.call(&x, args)).call::<Tensor, Tensor>(x)
    }

    /// The root (of `x0`'s shape) and the packed statistics `[iterations, ||f||, success,
    /// status]`; staged with the implicit rule when a trace is active and `depth > 0`.
    fn solve(&self, x0: &Tensor, args: &[Tensor], depth: usize) -> Result<(Tensor, Tensor)> {
        if depth == 0 || !trace::active() {
            return self.iterate(x0, args);
        }
        let f = |(x0, args): (Tensor, Vec<Tensor>)| self.iterate(&x0, &args);
        let fwd = |(x0, args): (Tensor, Vec<Tensor>)| {
            let (x, st) = self.solve(&x0, &args, depth - 1)?;
            Ok(((x.clone(), st), (x, args)))
        };
        let bwd = |((x, args), (x_bar, _)): ((Tensor, Vec<Tensor>), (Tensor, Tensor))| {
            let x = self.flat(&x)?;
            let x_bar = self.flat(&x_bar)?;
            let jt = self.jacobian(&x, &args)?.t()?;
            let lambda = super::solve(&jt, &x_bar)?;
            let args_bar = self.args_cotangent(&x, &lambda, &args)?;
            Ok((None::<Tensor>, args_bar))
        };
        crate::custom_vjp(f)
            .name("newton")
            .defvjp(fwd, bwd)
            .call(&(x0.clone(), args.to_vec()))
    }

    /// `-∂/∂args <λ, f(x, args)>`.
    fn args_cotangent(
        &self,
        x: &Tensor,
        lambda: &Tensor,
        args: &[Tensor],
    ) -> Result<Vec<Option<Tensor>>> {
        if args.is_empty() {
            return Ok(Vec::new());
        }
        let pairing = |a: Vec<Tensor>| (lambda * &self.f.call(x, &a)?)?.sum();
        let grads: Vec<Option<Tensor>> = crate::grad(pairing).call(&args.to_vec())?;
        grads
            .into_iter()
            .map(|g| g.map(|g| g.neg()).transpose())
            .collect()
    }

    /// `||f(x + alpha dx)||` and whether it passes the Armijo test against `f0 = ||f(x)||²`.
    fn trial(
        &self,
        x: &Tensor,
        dx: &Tensor,
        alpha: &Tensor,
        f0: &Tensor,
        args: &[Tensor],
    ) -> Result<(Tensor, Tensor)> {
        let ft = self.f.call(&(x + (alpha * dx)?)?, args)?;
        let s = ft.square()?.sum()?.reshape([1])?;
        let bound = (alpha.mul(-2.0 * ARMIJO)?.add(1.0)? * f0)?;
        let ok = s.less_equal(&bound)?;
        Ok((ok, s.sqrt()?))
    }

    /// The iterations, eagerly or as one region.
    fn iterate(&self, x0: &Tensor, args: &[Tensor]) -> Result<(Tensor, Tensor)> {
        let n = self.size();
        let dtype = self.f.dtype;
        let x0 = self.flat(&x0.astype(dtype)?)?;
        let f_start = self.f.call(&x0, args)?;
        let init = pack(&[
            &x0,
            &scalar1(0.0, dtype)?,
            &scalar1(RUNNING, dtype)?,
            &norm1(&f_start)?,
        ])?;
        let maxiter = self.maxiter;
        let cond = |c: &Tensor, _: &[Tensor]| {
            let k = seg(c, n, 1)?;
            let status = seg(c, n + 1, 1)?;
            flag(status.equal(RUNNING)?.logical_and(k.less(maxiter)?)?)
        };
        let body = |c: Tensor, args: &[Tensor]| {
            let x = seg(&c, 0, n)?;
            let k = seg(&c, n, 1)?;
            let fx = self.f.call(&x, args)?;
            let j = self.jacobian(&x, args)?;
            // J = Q R; the least-squares step solves R dx = -Qᵀ F. An exactly zero pivot of R
            // is a singular Jacobian: the identity stands in for R so that nothing divides by
            // zero, and the step is discarded.
            let qr = super::qr(&j).eval()?;
            let diag = qr.r.diagonal()?;
            let singular = diag
                .equal(0.0)?
                .astype(dtype)?
                .sum()?
                .greater(0.5)?
                .reshape([1])?;
            let eye = crate::eye(n)?.astype(dtype)?;
            let r = select(&singular, &eye, &qr.r)?;
            let rhs = qr.q.t()?.matmul(&fx)?.neg()?;
            let dx = super::solve_triangular(&r, &rhs).eval()?;
            let dx = select(&singular, 0.0, &dx)?;
            let f0 = fx.square()?.sum()?.reshape([1])?;
            let one = scalar1(1.0, dtype)?;
            let (ok1, fn1) = self.trial(&x, &dx, &one, &f0, args)?;
            let ls_init = pack(&[&one, &scalar1(0.0, dtype)?, &ok1.astype(dtype)?, &fn1])?;
            let mut ls_ops = vec![x.clone(), dx.clone(), f0.clone()];
            ls_ops.extend(args.iter().cloned());
            let ls_cond = |c: &Tensor, _: &[Tensor]| {
                let halvings = seg(c, 1, 1)?;
                let accepted = seg(c, 2, 1)?;
                flag(accepted.less(0.5)?.logical_and(halvings.less(HALVINGS)?)?)
            };
            let ls_body = |c: Tensor, ops: &[Tensor]| {
                let (x, dx, f0, args) = (&ops[0], &ops[1], &ops[2], &ops[3..]);
                let alpha = seg(&c, 0, 1)?.mul(0.5)?;
                let halvings = seg(&c, 1, 1)?.add(1.0)?;
                let (ok, fnorm) = self.trial(x, dx, &alpha, f0, args)?;
                pack(&[&alpha, &halvings, &ok.astype(dtype)?, &fnorm])
            };
            let ls = crate::while_loop(ls_cond, ls_body, &ls_init)
                .operands(&ls_ops)
                .eval()?;
            let alpha = seg(&ls, 0, 1)?;
            let armijo = seg(&ls, 2, 1)?.greater(0.5)?;
            let fn_trial = seg(&ls, 3, 1)?;
            // Near the root `f` is at rounding level and no step decreases it reliably: a full
            // Newton step already within the step tolerance is taken as converged even when
            // the line search rejects it (docs/linalg.md).
            let full_bound = norm1(&(&x + &dx)?)?.add(1.0)?.mul(self.tol)?;
            let full_small = norm1(&dx)?.less_equal(&full_bound)?;
            let rescued = armijo.logical_not()?.logical_and(&full_small)?;
            let accepted = armijo.logical_or(&full_small)?;
            let alpha = select(&rescued, 1.0, &alpha)?;
            let fn_trial = select(&rescued, &fn1, &fn_trial)?;
            let moved = accepted.logical_and(singular.logical_not()?)?;
            let step = (&alpha * &dx)?;
            let x_new = select(&moved, (&x + &step)?, &x)?;
            let bound = norm1(&x_new)?.add(1.0)?.mul(self.tol)?;
            let converged = norm1(&step)?.less_equal(&bound)?;
            let status = select(
                &singular,
                SINGULAR,
                select(
                    &accepted.logical_not()?,
                    LINE_SEARCH,
                    select(&converged, CONVERGED, RUNNING)?,
                )?,
            )?
            .astype(dtype)?;
            let fnorm = select(&moved, &fn_trial, norm1(&fx)?)?;
            pack(&[&x_new, &k.add(1.0)?, &status, &fnorm])
        };
        let out = crate::while_loop(cond, body, &init).operands(args).eval()?;
        let x = seg(&out, 0, n)?;
        let k = seg(&out, n, 1)?;
        let status = seg(&out, n + 1, 1)?;
        let fnorm = seg(&out, n + 2, 1)?;
        let success = status.equal(CONVERGED)?;
        let st = pack(&[&stats(&k, &fnorm, &success)?, &status])?;
        Ok((self.f.unflat(&x)?, st))
    }
}
