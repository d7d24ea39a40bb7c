//! Fixed-step solves (numerics.md §7.5.1): Euler, Heun and RK4 on the mesh
//! `t_i = t0 + i * dt`, `dt = (t1 - t0) / steps` (computed, not accumulated).
//!
//! A solve is one `fori_loop` over the steps, or one `scan` with `save` (its per-step outputs
//! are the saved states). Eagerly those loops run as Rust loops on the same body, so eager and
//! traced solves agree bit for bit. With `saveat` the loop stays a `fori_loop` whose carry also
//! holds `f` at the current state and the rows saved so far: each step fills the rows of the
//! save times it covers by cubic Hermite interpolation (numerics.md §7.5.5), so a solve with
//! `saveat` supports exactly the derivative compositions of one without it (docs/ode.md).

use super::{name_args, scalar, select, Method, OdeInfo, Problem};
use crate::prelude::*;
use crate::{LoopIndex, Result, Tensor};

/// `y_{i+1}` from `y_i` at `t` with step `dt`; `k1 = f(y_i, t)`.
pub(super) fn advance(
    p: &Problem<'_>,
    method: Method,
    y: &Tensor,
    t: &Tensor,
    dt: &Tensor,
    k1: &Tensor,
    args: &[Tensor],
) -> Result<Tensor> {
    let f = |y: &Tensor, t: &Tensor| p.rhs.eval(y, t, args);
    match method {
        Method::Euler => y + dt * k1,
        Method::Heun => {
            let k2 = f(&(y + dt * k1)?, &(t + dt)?)?;
            let sum = (k1 + &k2)?;
            y + (dt / 2.0)? * sum
        }
        Method::Rk4 => {
            let half = (dt / 2.0)?;
            let t_half = (t + &half)?;
            let k2 = f(&(y + &half * k1)?, &t_half)?;
            let k3 = f(&(y + &half * &k2)?, &t_half)?;
            let k4 = f(&(y + dt * &k3)?, &(t + dt)?)?;
            let sum = ((k1 + 2.0 * &k2)? + 2.0 * &k3 + &k4)?;
            y + (dt / 6.0) * sum
        }
        Method::Dopri5 | Method::Rosenbrock23 => {
            unreachable!("adaptive methods are solved in adaptive.rs")
        }
    }
}

/// Cubic Hermite interpolation on one step from the states and slopes at both ends, at the
/// step fractions `theta` (`[m, 1]`): `[m, n]`. Exactly `y` at `theta = 0` and `y_new` at
/// `theta = 1`.
fn hermite(
    theta: &Tensor,
    y: &Tensor,
    fy: &Tensor,
    y_new: &Tensor,
    f_new: &Tensor,
    dt: &Tensor,
) -> Result<Tensor> {
    let one_minus = (1.0 - theta)?;
    let theta2 = theta.square()?;
    let one_minus2 = one_minus.square()?;
    let h00 = (theta.mul(2.0).add(1.0)? * &one_minus2)?;
    let h10 = (theta * &one_minus2)?;
    let h01 = (&theta2 * theta.mul(-2.0).add(3.0)?)?;
    let h11 = (&theta2 * (theta - 1.0))?;
    let sum = (h00 * y)?;
    let sum = (sum + h10 * (dt * fy))?;
    let sum = (sum + h01 * y_new)?;
    sum + h11 * (dt * f_new)
}

/// Runs a fixed-step solve: the final state, the `steps + 1` states (`save`), or the states at
/// the save times.
pub(super) fn solve(
    p: &Problem<'_>,
    method: Method,
    steps: usize,
    save: bool,
) -> Result<(Tensor, OdeInfo)> {
    let dtype = p.rhs.dtype;
    let dt = (&p.t1 - &p.t0).div(steps as f64)?;
    // Loop operands: t0, dt, then the user's args.
    let mut ops = vec![p.t0.clone(), dt.clone()];
    ops.extend(p.args.iter().cloned());
    // The index as a float of the state's dtype: the step's times stay float arithmetic.
    let time = |i: &LoopIndex, ops: &[Tensor]| &ops[0] + i.as_float()? * &ops[1];

    let out = if save {
        let (_, ys) = crate::scan(
            |y, i: LoopIndex, ops| {
                let t = time(&i, ops)?;
                let k1 = p.rhs.eval(&y, &t, &ops[2..])?;
                let y_new = advance(p, method, &y, &t, &ops[1], &k1, &ops[2..])?;
                Ok((y_new.clone(), y_new))
            },
            &p.y0,
            steps,
        )
        .operands(&ops)
        .eval()
        .map_err(name_args)?;
        let all = crate::concat(&[p.y0.expand_dims([0])?, ys], 0)?;
        p.rhs.unflat(&all, Some(steps + 1))?
    } else if let Some(ts) = &p.saveat {
        saveat_solve(p, method, steps, ts, &dt, ops)?
    } else {
        let y = crate::fori_loop(
            0,
            steps,
            |i, y, ops| {
                let t = time(&i, ops)?;
                let k1 = p.rhs.eval(&y, &t, &ops[2..])?;
                advance(p, method, &y, &t, &ops[1], &k1, &ops[2..])
            },
            &p.y0,
        )
        .operands(&ops)
        .eval()
        .map_err(name_args)?;
        p.rhs.unflat(&y, None)?
    };
    let info = OdeInfo {
        t: p.t1.clone(),
        accepted_steps: scalar(steps as f64, dtype)?,
        rejected_steps: scalar(0.0, dtype)?,
        success: crate::array(true)?,
    };
    Ok((out, info))
}

/// The `saveat` form: the carry is `[y, f(y, t), saved rows]`; step `i` fills the rows whose
/// time lies in its interval `[t_i, t_i + dt]` (a time on a mesh point goes to the step that
/// starts there, `t1` to the last step; times outside the span stay NaN).
fn saveat_solve(
    p: &Problem<'_>,
    method: Method,
    steps: usize,
    ts: &Tensor,
    dt: &Tensor,
    mut ops: Vec<Tensor>,
) -> Result<Tensor> {
    let dtype = p.rhs.dtype;
    let n = p.rhs.n;
    let m = ts.size();
    let (t0, t1) = (&p.t0, &p.t1);
    // Which step holds each save time, decided once and behind stop_gradient: the index is
    // piecewise constant in the times.
    let dir = select(&t1.greater_equal(t0)?, 1.0, -1.0)?;
    let dt_safe = select(&dt.equal(0.0)?, 1.0, dt)?;
    let from_start = ((ts - t0) / &dt_safe)?.floor()?;
    let step_of = from_start.clip(0.0, (steps - 1) as f64)?;
    let inside = (&dir * (ts - t0))
        .greater_equal(0.0)?
        .logical_and((&dir * (t1 - ts)).greater_equal(0.0)?)?;
    let step_of = select(&inside, step_of, -1.0)?.stop_gradient()?;
    // Operands after t0, dt and the args: the save times, their steps, t1.
    let n_args = p.args.len();
    ops.extend([ts.clone(), step_of, t1.clone()]);
    let nan = crate::full([m * n], f64::NAN)?.astype(dtype)?;
    let init = crate::concat(&[p.y0.clone(), p.f0.clone(), nan], 0)?;
    let carry = crate::fori_loop(
        0,
        steps,
        |i, c, ops| {
            let args = &ops[2..2 + n_args];
            let (ts, step_of, t1) = (&ops[2 + n_args], &ops[3 + n_args], &ops[4 + n_args]);
            let dt = &ops[1];
            let y = c.index(crate::s![0..n])?;
            let fy = c.index(crate::s![n..2 * n])?;
            let rows = c
                .index(crate::s![2 * n..])?
                .reshape([m as isize, n as isize])?;
            let i = i.as_float()?;
            let t = (&ops[0] + &i * dt)?;
            let y_new = advance(p, method, &y, &t, dt, &fy, args)?;
            let t_new = (&ops[0] + (&i + 1.0) * dt)?;
            let f_new = p.rhs.eval(&y_new, &t_new, args)?;
            // The last step ends at t1 itself (t0 + steps * dt may round elsewhere), so that a
            // save time at t1 reads the final state exactly.
            let last = i.equal((steps - 1) as f64)?;
            let length = select(&last, (t1 - &t)?, dt)?;
            let length = select(&length.equal(0.0)?, 1.0, length)?;
            let theta = ((ts - &t) / length)?.reshape([m as isize, 1])?;
            let here = step_of.equal(&i)?.reshape([m as isize, 1])?;
            let values = hermite(&theta, &y, &fy, &y_new, &f_new, dt)?;
            let rows = select(&here, values, rows)?.reshape([(m * n) as isize])?;
            crate::concat(&[y_new, f_new, rows], 0)
        },
        &init,
    )
    .operands(&ops)
    .eval()
    .map_err(name_args)?;
    let rows = carry.index(crate::s![2 * n..])?;
    p.rhs.unflat(&rows, Some(m))
}
