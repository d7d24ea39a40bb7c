//! `qb::linalg::cg` and `qb::linalg::gmres` (api.md §17, numerics.md §7.1, §7.2, §7.4):
//! matrix-free Krylov solvers of `A x = b` with `A x = matvec(x, args)`.
//!
//! The iterations work on flat vectors of `b.size` elements, packed into the one floating
//! carry of `while_loop` (see `iterative` for how a solve runs eagerly and traced). Their
//! derivatives come from the implicit function theorem at the solution `x`: with `x_bar` the
//! cotangent of `x`, the adjoint solve `Aᵀ λ = x_bar` (the same solver, `tol`, `atol`,
//! `maxiter`, `M` and `restart`; for `cg` the same operator, for `gmres` the transpose of
//! `matvec` in `x`, obtained by differentiating it) gives `b_bar = λ` and
//! `args_bar = -∂/∂args <λ, matvec(x, args)>`. `x0` gets no derivative, nor does anything
//! `matvec` or `M` close over.

use super::iterative::{
    check_atol, check_not_in_region, check_tol, dot1, flag, floating_tensor, info, name_args,
    norm1, pack, scalar1, seg, select, stats, threshold, Flat, SolverInfo, UserFn, IMPLICIT_ORDER,
};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace;

/// The two Krylov methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Cg,
    Gmres { restart: usize },
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Cg => "cg",
            Method::Gmres { .. } => "gmres",
        }
    }
}

/// The configuration of a Krylov call, shared by [`Cg`] and [`Gmres`].
struct Call<'a> {
    method: Method,
    matvec: Box<UserFn<'a>>,
    m: Option<Box<UserFn<'a>>>,
    b: Tensor,
    x0: Option<Tensor>,
    args: Vec<Tensor>,
    tol: f64,
    atol: f64,
    maxiter: Option<usize>,
}

impl<'a> Call<'a> {
    fn new(method: Method, matvec: Box<UserFn<'a>>, b: &Tensor) -> Call<'a> {
        Call {
            method,
            matvec,
            m: None,
            b: b.clone(),
            x0: None,
            args: Vec::new(),
            tol: 1e-5,
            atol: 0.0,
            maxiter: None,
        }
    }

    fn run(&self) -> Result<(Tensor, SolverInfo)> {
        let solver = self.method.name();
        check_not_in_region(solver)?;
        floating_tensor(solver, "b", &self.b)?;
        check_tol(self.tol)?;
        check_atol(self.atol)?;
        let shape = self.b.shape().to_vec();
        let dtype = self.b.dtype();
        let n = self.b.size();
        let x0 = match &self.x0 {
            Some(x0) => {
                floating_tensor(solver, "x0", x0)?;
                if x0.shape() != self.b.shape() {
                    return Err(Error::Shape {
                        op: solver.into(),
                        message: format!(
                            "{solver}: x0 has shape {:?} but b has shape {:?}; x0 is the initial guess of the solution, of b's shape",
                            x0.shape(),
                            shape
                        ),
                    });
                }
                x0.astype(dtype)?
            }
            None => crate::zeros_like(&self.b)?,
        };
        let method = match self.method {
            // A Krylov space has at most n dimensions.
            Method::Gmres { restart } => {
                if restart == 0 {
                    return Err(Error::invalid("gmres: restart must be at least 1"));
                }
                Method::Gmres {
                    restart: restart.min(n),
                }
            }
            m => m,
        };
        let flat = |f, name| Flat {
            f,
            solver,
            name,
            shape: shape.clone(),
            dtype,
            same_shape: true,
        };
        let krylov = Krylov {
            method,
            matvec: flat(&*self.matvec, "matvec"),
            m: self.m.as_deref().map(|m| flat(m, "M")),
            transposed: false,
            tol: self.tol,
            atol: self.atol,
            maxiter: self.maxiter.unwrap_or(10 * n),
        };
        let (x, st) = krylov
            .solve(&self.b, &x0, &self.args, IMPLICIT_ORDER)
            .map_err(name_args(solver, "matvec"))?;
        let tolerance = threshold(&self.b, self.tol, self.atol);
        let info = info(&st, |iterations, residual| Error::NotConverged {
            solver,
            iterations,
            residual,
            tolerance: tolerance
                .as_ref()
                .ok()
                .and_then(|t| t.to_vec::<f64>().ok())
                .map_or(f64::NAN, |v| v[0]),
            reason: "",
        })?;
        Ok((x, info))
    }
}

macro_rules! krylov_options {
    () => {
        /// The arrays `matvec` and `M` receive as their second argument; traced values must
        /// come this way, and derivatives flow to each of them.
        pub fn args<O: AsRef<Tensor>>(mut self, args: &[O]) -> Self {
            self.call.args = args.iter().map(|a| a.as_ref().clone()).collect();
            self
        }

        /// The initial guess (default zeros); it gets no derivative.
        pub fn x0(mut self, x0: &Tensor) -> Self {
            self.call.x0 = Some(x0.clone());
            self
        }

        /// Relative tolerance (default `1e-5`): stop when `||r|| <= max(tol ||b||, atol)`.
        pub fn tol(mut self, tol: f64) -> Self {
            self.call.tol = tol;
            self
        }

        /// Absolute tolerance (default `0`).
        pub fn atol(mut self, atol: f64) -> Self {
            self.call.atol = atol;
            self
        }

        /// The largest number of iterations (default `10 * b.size`).
        pub fn maxiter(mut self, maxiter: usize) -> Self {
            self.call.maxiter = Some(maxiter);
            self
        }

        /// The preconditioner (the spec's `M`): `m(r, args)` applies an approximation of
        /// `A⁻¹` to a residual of `b`'s shape.
        pub fn m(mut self, m: impl Fn(&Tensor, &[Tensor]) -> Result<Tensor> + 'a) -> Self {
            self.call.m = Some(Box::new(m));
            self
        }

        /// Solves and returns `x` (of `b`'s shape). Eagerly, not converging within `maxiter`
        /// is [`Error::NotConverged`].
        pub fn eval(self) -> Result<Tensor> {
            Ok(self.call.run()?.0)
        }

        /// Solves and returns `(x, info)`; under a transform a failure is reported by
        /// `info.success` instead of an error.
        pub fn eval_with_info(self) -> Result<(Tensor, SolverInfo)> {
            self.call.run()
        }
    };
}

/// `cg(matvec, b)`: preconditioned conjugate gradients for a symmetric positive-definite
/// operator `matvec(x, args)` (numerics.md §7.1), over all elements of `b` (any shape). Finish
/// with [`Cg::eval`] or [`Cg::eval_with_info`].
///
/// ```
/// use quabla as qb;
/// use qb::prelude::*;
/// # fn main() -> qb::Result<()> {
/// let diag = |x: &qb::Tensor, args: &[qb::Tensor]| x * &args[0];
/// let d = qb::array([1.0, 2.0, 4.0])?;
/// let (x, info) = qb::linalg::cg(diag, &qb::ones([3])?)
///     .args(&[&d])
///     .tol(1e-12)
///     .eval_with_info()?;
/// assert_eq!(x.to_vec::<f64>()?, [1.0, 0.5, 0.25]);
/// assert!(info.success.item_bool()?);
/// # Ok(())
/// # }
/// ```
pub fn cg<'a>(matvec: impl Fn(&Tensor, &[Tensor]) -> Result<Tensor> + 'a, b: &Tensor) -> Cg<'a> {
    Cg {
        call: Call::new(Method::Cg, Box::new(matvec), b),
    }
}

/// A `cg` call being configured.
#[must_use = "finish the call with .eval() or .eval_with_info()"]
pub struct Cg<'a> {
    call: Call<'a>,
}

impl std::fmt::Debug for Cg<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cg(b={:?}, tol={})", self.call.b.shape(), self.call.tol)
    }
}

impl<'a> Cg<'a> {
    krylov_options!();
}

/// `gmres(matvec, b)`: restarted, right-preconditioned GMRES for a general operator
/// `matvec(x, args)` (numerics.md §7.2): Arnoldi with classical Gram-Schmidt applied twice,
/// Givens rotations, a true residual at each restart. Finish with [`Gmres::eval`] or
/// [`Gmres::eval_with_info`].
pub fn gmres<'a>(
    matvec: impl Fn(&Tensor, &[Tensor]) -> Result<Tensor> + 'a,
    b: &Tensor,
) -> Gmres<'a> {
    Gmres {
        call: Call::new(Method::Gmres { restart: 20 }, Box::new(matvec), b),
    }
}

/// A `gmres` call being configured.
#[must_use = "finish the call with .eval() or .eval_with_info()"]
pub struct Gmres<'a> {
    call: Call<'a>,
}

impl std::fmt::Debug for Gmres<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "gmres(b={:?}, tol={}, {:?})",
            self.call.b.shape(),
            self.call.tol,
            self.call.method
        )
    }
}

impl<'a> Gmres<'a> {
    krylov_options!();

    /// The Krylov dimension of a cycle (default 20; at most `b.size`, the dimension of the
    /// whole space).
    pub fn restart(mut self, restart: usize) -> Self {
        self.call.method = Method::Gmres { restart };
        self
    }
}

/// A validated Krylov problem: the operator (possibly transposed, for an adjoint solve), the
/// preconditioner and the stopping rule.
struct Krylov<'s> {
    method: Method,
    matvec: Flat<'s>,
    m: Option<Flat<'s>>,
    /// Whether this solves with the transpose of `matvec` (the adjoint of a `gmres` solve).
    transposed: bool,
    tol: f64,
    atol: f64,
    maxiter: usize,
}

/// `(b, x0, args)`: the operands of a staged solve.
type Operands = (Tensor, Tensor, Vec<Tensor>);

impl Krylov<'_> {
    fn size(&self) -> usize {
        self.matvec.size()
    }

    /// The same problem with the transposed operator (`cg`'s is symmetric: itself).
    fn adjoint(&self) -> Krylov<'_> {
        Krylov {
            method: self.method,
            matvec: self.matvec.reborrow(),
            m: self.m.as_ref().map(Flat::reborrow),
            transposed: match self.method {
                Method::Cg => self.transposed,
                Method::Gmres { .. } => !self.transposed,
            },
            tol: self.tol,
            atol: self.atol,
            maxiter: self.maxiter,
        }
    }

    /// `A v` on a flat vector; for the transposed operator, `Aᵀ v = ∇_x <v, A x>` (at `x = 0`:
    /// the operator is linear).
    fn apply(&self, v: &Tensor, args: &[Tensor]) -> Result<Tensor> {
        if !self.transposed {
            return self.matvec.call(v, args);
        }
        let at = |x: Tensor| (v * &self.matvec.call(&x, args)?)?.sum();
        crate::grad(at).call(&crate::zeros_like(v)?)
    }

    /// `M r` (the identity without a preconditioner).
    fn precondition(&self, r: &Tensor, args: &[Tensor]) -> Result<Tensor> {
        match &self.m {
            Some(m) => m.call(r, args),
            None => Ok(r.clone()),
        }
    }

    /// The solution (of `b`'s shape) and the packed statistics; staged with the implicit rule
    /// when a trace is active and `depth > 0`.
    fn solve(
        &self,
        b: &Tensor,
        x0: &Tensor,
        args: &[Tensor],
        depth: usize,
    ) -> Result<(Tensor, Tensor)> {
        if depth == 0 || !trace::active() {
            return self.iterate(b, x0, args);
        }
        let f = |(b, x0, args): Operands| self.iterate(&b, &x0, &args);
        let fwd = |(b, x0, args): Operands| {
            let (x, st) = self.solve(&b, &x0, &args, depth - 1)?;
            Ok(((x.clone(), st), (x, args)))
        };
        let bwd = |((x, args), (x_bar, _)): ((Tensor, Vec<Tensor>), (Tensor, Tensor))| {
            let adjoint = self.adjoint();
            let zeros = crate::zeros_like(&x_bar)?;
            let (lambda, _) = adjoint.solve(&x_bar, &zeros, &args, depth - 1)?;
            let args_bar = self.args_cotangent(&x, &lambda, &args)?;
            Ok((lambda, None::<Tensor>, args_bar))
        };
        crate::custom_vjp(f)
            .name(self.method.name())
            .defvjp(fwd, bwd)
            .call(&(b.clone(), x0.clone(), args.to_vec()))
    }

    /// `-∂/∂args <λ, A(args) x>`, `None` for arrays that are not floating.
    fn args_cotangent(
        &self,
        x: &Tensor,
        lambda: &Tensor,
        args: &[Tensor],
    ) -> Result<Vec<Option<Tensor>>> {
        if args.is_empty() {
            return Ok(Vec::new());
        }
        let (x, lambda) = (self.matvec.flat(x)?, self.matvec.flat(lambda)?);
        let pairing = |a: Vec<Tensor>| (&lambda * &self.apply(&x, &a)?)?.sum();
        let grads: Vec<Option<Tensor>> = crate::grad(pairing).call(&args.to_vec())?;
        grads
            .into_iter()
            .map(|g| g.map(|g| g.neg()).transpose())
            .collect()
    }

    /// The iterations, eagerly or as one region: `(x, stats)`.
    fn iterate(&self, b: &Tensor, x0: &Tensor, args: &[Tensor]) -> Result<(Tensor, Tensor)> {
        let b_flat = self.matvec.flat(b)?;
        let x0 = self.matvec.flat(x0)?;
        let thresh = threshold(&b_flat, self.tol, self.atol)?;
        let (x, st) = match self.method {
            Method::Cg => self.cg(&b_flat, &x0, &thresh, args)?,
            Method::Gmres { restart } => self.gmres(&b_flat, &x0, &thresh, args, restart)?,
        };
        Ok((self.matvec.unflat(&x)?, st))
    }

    /// Conjugate gradients (numerics.md §7.1) on the carry `[x | r | p | r.z | iterations]`.
    fn cg(
        &self,
        b: &Tensor,
        x0: &Tensor,
        thresh: &Tensor,
        args: &[Tensor],
    ) -> Result<(Tensor, Tensor)> {
        let n = self.size();
        let dtype = b.dtype();
        let maxiter = self.maxiter as f64;
        let r0 = (b - self.apply(x0, args)?)?;
        let z0 = self.precondition(&r0, args)?;
        let rz0 = dot1(&r0, &z0)?;
        let init = pack(&[x0, &r0, &z0, &rz0, &scalar1(0.0, dtype)?])?;
        let mut operands = vec![thresh.clone()];
        operands.extend(args.iter().cloned());
        let cond = |c: &Tensor, ops: &[Tensor]| {
            let r = seg(c, n, n)?;
            let k = seg(c, 3 * n + 1, 1)?;
            let going = norm1(&r)?.greater(&ops[0])?;
            flag(going.logical_and(k.less(maxiter)?)?)
        };
        let body = |c: Tensor, ops: &[Tensor]| {
            let args = &ops[1..];
            let x = seg(&c, 0, n)?;
            let r = seg(&c, n, n)?;
            let p = seg(&c, 2 * n, n)?;
            let rz = seg(&c, 3 * n, 1)?;
            let k = seg(&c, 3 * n + 1, 1)?;
            let q = self.apply(&p, args)?;
            let alpha = (&rz / dot1(&p, &q)?)?;
            let x = (&x + (&alpha * &p)?)?;
            let r = (&r - (&alpha * &q)?)?;
            let z = self.precondition(&r, args)?;
            let rz_new = dot1(&r, &z)?;
            let beta = (&rz_new / &rz)?;
            let p = (&z + (&beta * &p)?)?;
            pack(&[&x, &r, &p, &rz_new, &k.add(1.0)?])
        };
        let out = crate::while_loop(cond, body, &init)
            .operands(&operands)
            .eval()?;
        let x = seg(&out, 0, n)?;
        let rnorm = norm1(&seg(&out, n, n)?)?;
        let k = seg(&out, 3 * n + 1, 1)?;
        let success = rnorm.less_equal(thresh)?;
        Ok((x, stats(&k, &rnorm, &success)?))
    }

    /// Restarted GMRES (numerics.md §7.2): an outer loop of cycles on `[x | r | iterations |
    /// ||r||]`, each an inner loop of Arnoldi steps on `[V | R | cs | sn | g | j | iterations |
    /// estimate]` followed by the update of `x` and its true residual.
    fn gmres(
        &self,
        b: &Tensor,
        x0: &Tensor,
        thresh: &Tensor,
        args: &[Tensor],
        m: usize,
    ) -> Result<(Tensor, Tensor)> {
        let n = self.size();
        let dtype = b.dtype();
        let maxiter = self.maxiter as f64;
        let r0 = (b - self.apply(x0, args)?)?;
        let init = pack(&[x0, &r0, &scalar1(0.0, dtype)?, &norm1(&r0)?])?;
        let mut operands = vec![b.clone(), thresh.clone()];
        operands.extend(args.iter().cloned());
        let cond = |c: &Tensor, ops: &[Tensor]| {
            let k = seg(c, 2 * n, 1)?;
            let rnorm = seg(c, 2 * n + 1, 1)?;
            flag(rnorm.greater(&ops[1])?.logical_and(k.less(maxiter)?)?)
        };
        let body = |c: Tensor, ops: &[Tensor]| {
            let (b, thresh, args) = (&ops[0], &ops[1], &ops[2..]);
            let x = seg(&c, 0, n)?;
            let r = seg(&c, n, n)?;
            let k = seg(&c, 2 * n, 1)?;
            let beta = seg(&c, 2 * n + 1, 1)?;
            let (y, v) = self.cycle(&r, &beta, &k, thresh, args, m)?;
            let (y, k) = y;
            // x += M (V[:m]ᵀ y).
            let vm = v
                .reshape([(m + 1) as isize, n as isize])?
                .index(crate::s![0..m as isize])?;
            let update = y.matmul(&vm)?;
            let x = (&x + self.precondition(&update, args)?)?;
            let r = (b - self.apply(&x, args)?)?;
            let rnorm = norm1(&r)?;
            pack(&[&x, &r, &k, &rnorm])
        };
        let out = crate::while_loop(cond, body, &init)
            .operands(&operands)
            .eval()?;
        let x = seg(&out, 0, n)?;
        let k = seg(&out, 2 * n, 1)?;
        let rnorm = seg(&out, 2 * n + 1, 1)?;
        let success = rnorm.less_equal(thresh)?;
        Ok((x, stats(&k, &rnorm, &success)?))
    }

    /// One cycle of at most `m` Arnoldi steps from the residual `r` (norm `beta`): returns the
    /// least-squares coefficients `y` of the basis, the iteration count, and the basis `V`
    /// (`(m + 1) n` elements, row `i` the `i`-th basis vector).
    #[allow(clippy::type_complexity)]
    fn cycle(
        &self,
        r: &Tensor,
        beta: &Tensor,
        k: &Tensor,
        thresh: &Tensor,
        args: &[Tensor],
        m: usize,
    ) -> Result<((Tensor, Tensor), Tensor)> {
        let n = self.size();
        let dtype = r.dtype();
        let maxiter = self.maxiter as f64;
        let v0 = (r / safe(beta)?)?;
        let v = pack(&[&v0, &crate::zeros([m * n])?.astype(dtype)?])?;
        let g = pack(&[beta, &crate::zeros([m])?.astype(dtype)?])?;
        let cs = crate::ones([m])?.astype(dtype)?;
        let sn = crate::zeros([m])?.astype(dtype)?;
        let big_r = crate::zeros([m * m])?.astype(dtype)?;
        let zero = scalar1(0.0, dtype)?;
        let init = pack(&[&v, &big_r, &cs, &sn, &g, &zero, k, beta])?;
        // Offsets of the inner carry.
        let o_v = 0;
        let o_r = o_v + (m + 1) * n;
        let o_cs = o_r + m * m;
        let o_sn = o_cs + m;
        let o_g = o_sn + m;
        let o_j = o_g + m + 1;
        let o_k = o_j + 1;
        let o_est = o_k + 1;
        // Row indices of the basis and of R, as constants of the loop bodies.
        let idx1 = crate::arange((m + 1) as f64)?.astype(dtype)?;
        let idx = crate::arange(m as f64)?.astype(dtype)?;
        let mut operands = vec![thresh.clone()];
        operands.extend(args.iter().cloned());
        let cond = |c: &Tensor, ops: &[Tensor]| {
            let j = seg(c, o_j, 1)?;
            let k = seg(c, o_k, 1)?;
            let est = seg(c, o_est, 1)?;
            let going = j
                .less(m as f64)?
                .logical_and(est.greater(&ops[0])?)?
                .logical_and(k.less(maxiter)?)?;
            flag(going)
        };
        let body = |c: Tensor, ops: &[Tensor]| {
            let args = &ops[1..];
            let vm = seg(&c, o_v, (m + 1) * n)?.reshape([(m + 1) as isize, n as isize])?;
            let rm = seg(&c, o_r, m * m)?.reshape([m as isize, m as isize])?;
            let cs = seg(&c, o_cs, m)?;
            let sn = seg(&c, o_sn, m)?;
            let g = seg(&c, o_g, m + 1)?;
            let j = seg(&c, o_j, 1)?;
            let k = seg(&c, o_k, 1)?;
            let at_j = idx1.equal(&j)?;
            let at_j1 = idx1.equal(j.add(1.0)?)?;
            let e_j = at_j.astype(dtype)?;
            let e_j1 = at_j1.astype(dtype)?;
            // w = A M v_j, orthogonalized twice against the basis so far (its later rows are
            // zero, so they contribute nothing).
            let v_j = e_j.matmul(&vm)?;
            let w = self.apply(&self.precondition(&v_j, args)?, args)?;
            let h1 = vm.matmul(&w)?;
            let w = (&w - h1.matmul(&vm)?)?;
            let h2 = vm.matmul(&w)?;
            let w = (&w - h2.matmul(&vm)?)?;
            let hnorm = norm1(&w)?;
            let h = ((&h1 + &h2)? + (&e_j1 * &hnorm)?)?;
            // The rotations so far; those not set yet (i >= j) are the identity.
            let mut hs: Vec<Tensor> = (0..=m).map(|i| seg(&h, i, 1)).collect::<Result<_>>()?;
            for i in 0..m {
                let (ci, si) = (seg(&cs, i, 1)?, seg(&sn, i, 1)?);
                let (a, bb) = (hs[i].clone(), hs[i + 1].clone());
                hs[i] = ((&ci * &a)? + (&si * &bb)?)?;
                hs[i + 1] = ((&ci * &bb)? - (&si * &a)?)?;
            }
            let h = pack(&hs.iter().collect::<Vec<_>>())?;
            // The new rotation zeroes h[j + 1].
            let a = dot1(&e_j, &h)?;
            let bb = dot1(&e_j1, &h)?;
            let rr = (a.square()? + bb.square()?)?.sqrt()?;
            let degenerate = rr.equal(0.0)?;
            let c_new = select(&degenerate, 1.0, (&a / safe(&rr)?)?)?;
            let s_new = select(&degenerate, 0.0, (&bb / safe(&rr)?)?)?;
            let h = select(&at_j, &rr, select(&at_j1, 0.0, &h)?)?;
            let at_jm = idx.equal(&j)?;
            let cs = select(&at_jm, &c_new, &cs)?;
            let sn = select(&at_jm, &s_new, &sn)?;
            let gj = dot1(&e_j, &g)?;
            let g = select(
                &at_j,
                (&c_new * &gj)?,
                select(&at_j1, (&s_new * &gj)?.neg()?, &g)?,
            )?;
            let est = (&s_new * &gj)?.abs()?;
            // Column j of R, and the next basis vector (zero after a happy breakdown).
            let col = seg(&h, 0, m)?.reshape([m as isize, 1])?;
            let rm = select(&at_jm.reshape([1, m as isize])?, &col, &rm)?;
            let v_next = (&w / safe(&hnorm)?)?.reshape([1, n as isize])?;
            let vm = select(&at_j1.reshape([(m + 1) as isize, 1])?, &v_next, &vm)?;
            pack(&[
                &vm.reshape([((m + 1) * n) as isize])?,
                &rm.reshape([(m * m) as isize])?,
                &cs,
                &sn,
                &g,
                &j.add(1.0)?,
                &k.add(1.0)?,
                &est,
            ])
        };
        let out = crate::while_loop(cond, body, &init)
            .operands(&operands)
            .eval()?;
        // Solve R[:j, :j] y = g[:j], with the identity standing in for the unused part.
        let j = seg(&out, o_j, 1)?;
        let k = seg(&out, o_k, 1)?;
        let rm = seg(&out, o_r, m * m)?.reshape([m as isize, m as isize])?;
        let g = seg(&out, o_g, m)?;
        let active = idx.less(&j)?;
        let both = active
            .reshape([m as isize, 1])?
            .logical_and(active.reshape([1, m as isize])?)?;
        let rm = select(&both, &rm, crate::eye(m)?.astype(dtype)?)?;
        let g = select(&active, &g, 0.0)?;
        let y = super::solve_triangular(&rm, &g).eval()?;
        let v = seg(&out, o_v, (m + 1) * n)?;
        Ok(((y, k), v))
    }
}

/// `x` with zeros replaced by ones, for divisions whose zero case is selected away.
fn safe(x: &Tensor) -> Result<Tensor> {
    select(&x.equal(0.0)?, 1.0, x)
}

impl<'s> Flat<'s> {
    /// A copy of this description (the function is borrowed, not cloned).
    fn reborrow(&self) -> Flat<'s> {
        Flat {
            f: self.f,
            solver: self.solver,
            name: self.name,
            shape: self.shape.clone(),
            dtype: self.dtype,
            same_shape: self.same_shape,
        }
    }

    /// A tensor of this shape as a flat vector.
    fn flat(&self, x: &Tensor) -> Result<Tensor> {
        let n = self.size();
        if x.shape() == [n] {
            Ok(x.clone())
        } else {
            x.reshape([n as isize])
        }
    }
}
