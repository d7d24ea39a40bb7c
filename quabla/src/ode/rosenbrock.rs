//! The Rosenbrock 2(3) scheme of MATLAB's `ode23s` (numerics.md §7.5.3): L-stable, second
//! order, with a third-order error estimate and the continuous extension of §7.5.5.
//!
//! `J = df/dy` and `df/dt` come from `qb::jacobian` of `f` at the step's start, and every
//! `W^-1 b` is `qb::linalg::solve(W, b)`. The Jacobian is part of the scheme, so derivatives of
//! a solve differentiate through it like through every other value (docs/ode.md).

use crate::{Error, Result, Tensor};

/// `d = 1 / (2 + sqrt(2))`.
fn d() -> f64 {
    1.0 / (2.0 + std::f64::consts::SQRT_2)
}

/// `e32 = 6 + sqrt(2)`.
const E32: f64 = 6.0 + std::f64::consts::SQRT_2;

/// One attempted step and its continuous extension's data.
pub(super) struct Step {
    pub y_new: Tensor,
    pub err: Tensor,
    /// `f(y_new, t + h)`: the next step's `F0`.
    pub f_new: Tensor,
    pub k1: Tensor,
    pub k2: Tensor,
}

/// `J` (`[n, n]`) and `df/dt` (`[n]`) at `(y, t)`.
pub(super) type JacobianFn<'a> = dyn Fn(&Tensor, &Tensor) -> Result<(Tensor, Tensor)> + 'a;

/// One step of size `h` from `y` at `t`, with `f0 = f(y, t)`; `eye` is the `[n, n]` identity.
pub(super) fn step(
    f: &dyn Fn(&Tensor, &Tensor) -> Result<Tensor>,
    jacobian: &JacobianFn<'_>,
    eye: &Tensor,
    y: &Tensor,
    t: &Tensor,
    h: &Tensor,
    f0: &Tensor,
) -> Result<Step> {
    let (j, dfdt) = jacobian(y, t)?;
    let hd = (h * d())?;
    let tt = (&hd * &dfdt)?;
    let w = (eye - &hd * &j)?;
    // A singular W is LA1 named after the method.
    let solve = |b: Tensor| {
        crate::linalg::solve(&w, b).map_err(|e| match e {
            Error::Singular { .. } => Error::Singular {
                op: "rosenbrock23".into(),
            },
            other => other,
        })
    };
    let k1 = solve((f0 + &tt)?)?;
    let half = (h / 2.0)?;
    let f1 = f(&(y + &half * &k1)?, &(t + &half)?)?;
    let k2 = (solve((&f1 - &k1)?)? + &k1)?;
    let y_new = (y + h * &k2)?;
    let f2 = f(&y_new, &(t + h)?)?;
    let rhs = ((&f2 - (&k2 - &f1)?.mul(E32)?)? - (&k1 - f0)?.mul(2.0)?)?;
    let k3 = solve((rhs + &tt)?)?;
    let e = ((&k1 - &k2 * 2.0)? + &k3)?;
    let err = ((h / 6.0)? * e)?;
    Ok(Step {
        y_new,
        err,
        f_new: f2,
        k1,
        k2,
    })
}

/// `y(t + theta h) = y + h (theta (1 - theta) / (1 - 2d) k1 + theta (theta - 2d) / (1 - 2d) k2)`
/// at the fractions `theta` (`[m, 1]`): `[m, n]`; exactly `y_new` at `theta = 1`.
pub(super) fn interpolate(s: &Step, y: &Tensor, h: &Tensor, theta: &Tensor) -> Result<Tensor> {
    let two_d = 2.0 * d();
    let denom = 1.0 - two_d;
    let c1 = (theta * (1.0 - theta)?)?.div(denom)?;
    let c2 = (theta * (theta - two_d)?)?.div(denom)?;
    let sum = ((c1 * &s.k1)? + c2 * &s.k2)?;
    y + h * sum
}
