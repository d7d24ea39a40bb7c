//! Adaptive solves (numerics.md §7.5.4–§7.5.7): the initial step, the step-size controller,
//! the loop state and its two drivers.
//!
//! One function, [`attempt`], takes the state to the next one: it tries one step, decides
//! acceptance, updates the step size, the counters and the saved rows. Every decision (the step
//! size, acceptance, landing on `t1`) is computed behind `stop_gradient`, so derivatives are
//! those of the discrete scheme on the mesh actually chosen (§7.5.6): the mesh is
//! `t_k = t0 + sum of stop_gradient(h)`, and only the last, shortened step `t1 - t` depends on
//! `t1` (docs/ode.md).
//!
//! - Eagerly (no input traced and no trace active), a Rust loop calls `attempt` on concrete
//!   tensors until `t1` is reached and raises `OdeMaxSteps` after `max_steps` attempts, or as
//!   soon as the step size stalls (a step no longer advances `t`).
//! - Traced, the state is packed into one flat vector (a loop carry is one array) and the solve
//!   is one `while_loop` bounded to `max_steps` trips that stops when the state is done; its
//!   body unpacks, attempts and repacks. Packing and slicing move values exactly, so both
//!   drivers give the same bits. The bound gives the loop its reverse mode (docs/loops.md);
//!   a solve that runs out of trips, or stalls, stops there with `info.success` false.

use super::{dopri5, name_args, rms, rosenbrock, scalar, scaled, select, Method, OdeInfo, Problem};
use crate::prelude::*;
use crate::{DType, Error, Result, Tensor};

/// `rtol` and `atol` of an adaptive solve.
pub(super) struct Tolerances {
    pub rtol: f64,
    pub atol: f64,
}

/// The constants of §7.5.4 that differ between the two methods.
struct Controller {
    /// The order `p` of the initial-step formula.
    order: f64,
    /// `factor = 0.9 err^(-a) err_prev^b` after an accepted step.
    a: f64,
    b: f64,
    /// `factor = max(0.2, 0.9 err^(-reject))` after a rejected one.
    reject: f64,
}

fn controller(method: Method) -> Controller {
    match method {
        Method::Dopri5 => Controller {
            order: 4.0,
            a: 0.7 / 5.0,
            b: 0.4 / 5.0,
            reject: 1.0 / 5.0,
        },
        _ => Controller {
            order: 2.0,
            a: 0.7 / 3.0,
            b: 0.4 / 3.0,
            reject: 1.0 / 3.0,
        },
    }
}

/// The solve's state between attempts. Scalars are rank-0 tensors of the state's dtype; flags
/// are 0 or 1.
#[derive(Clone)]
struct State {
    /// The state at `t` (flat).
    y: Tensor,
    t: Tensor,
    /// The signed step size to attempt next (behind stop_gradient).
    h: Tensor,
    /// The error of the last accepted step, floored at 1e-4 (1 before the first).
    err_prev: Tensor,
    accepted: Tensor,
    rejected: Tensor,
    /// Whether the last attempt was rejected (caps the next growth factor at 1).
    last_rejected: Tensor,
    /// `1` once `t1` has been reached, `-1` once the step size has stalled (a step no longer
    /// advances `t`: the attempt that finds it leaves the state as it was), `0` while going.
    done: Tensor,
    /// `f(y, t)`: the first stage of the next step.
    fy: Tensor,
    /// The rows saved so far (`[m, n]`, NaN until filled), with `saveat`.
    rows: Option<Tensor>,
}

/// Where each field sits in the packed carry.
#[derive(Clone, Copy)]
struct Layout {
    n: usize,
    m: usize,
    saveat: bool,
}

const SCALARS: usize = 7;

impl Layout {
    fn len(&self) -> usize {
        2 * self.n + SCALARS + if self.saveat { self.m * self.n } else { 0 }
    }

    fn done(&self) -> usize {
        self.n + 6
    }

    fn pack(&self, s: &State) -> Result<Tensor> {
        let one = |t: &Tensor| t.reshape([1]);
        let mut parts = vec![
            s.y.clone(),
            one(&s.t)?,
            one(&s.h)?,
            one(&s.err_prev)?,
            one(&s.accepted)?,
            one(&s.rejected)?,
            one(&s.last_rejected)?,
            one(&s.done)?,
            s.fy.clone(),
        ];
        if let Some(rows) = &s.rows {
            parts.push(rows.reshape([(self.m * self.n) as isize])?);
        }
        crate::concat(&parts, 0)
    }

    fn unpack(&self, c: &Tensor) -> Result<State> {
        let n = self.n;
        let at = |k: usize| c.index(crate::s![n + k]);
        Ok(State {
            y: c.index(crate::s![0..n])?,
            t: at(0)?,
            h: at(1)?,
            err_prev: at(2)?,
            accepted: at(3)?,
            rejected: at(4)?,
            last_rejected: at(5)?,
            done: at(6)?,
            fy: c.index(crate::s![n + SCALARS..2 * n + SCALARS])?,
            rows: if self.saveat {
                Some(
                    c.index(crate::s![2 * n + SCALARS..])?
                        .reshape([self.m as isize, n as isize])?,
                )
            } else {
                None
            },
        })
    }
}

/// The values an attempt reads besides the state: in the traced driver, tracers of the loop
/// body (its operands), so that `t0`, `t1`, the save times and the args may all be traced.
struct Inputs<'t> {
    t1: &'t Tensor,
    /// The sign of `t1 - t0` (`+1` or `-1`, also for `t1 == t0`), behind stop_gradient.
    dir: &'t Tensor,
    /// The landing tolerance `100 eps max(|t0|, |t1|)`, behind stop_gradient.
    landing: &'t Tensor,
    saveat: Option<&'t Tensor>,
    args: &'t [Tensor],
}

impl<'t> Inputs<'t> {
    /// The operand list of the traced loop: `t1, dir, landing, [saveat], args...`.
    fn operands(&self) -> Vec<Tensor> {
        let mut v = vec![self.t1.clone(), self.dir.clone(), self.landing.clone()];
        v.extend(self.saveat.cloned());
        v.extend(self.args.iter().cloned());
        v
    }

    fn from_operands(ops: &'t [Tensor], saveat: bool) -> Inputs<'t> {
        let k = 3 + usize::from(saveat);
        Inputs {
            t1: &ops[0],
            dir: &ops[1],
            landing: &ops[2],
            saveat: if saveat { Some(&ops[3]) } else { None },
            args: &ops[k..],
        }
    }
}

/// `J` and `df/dt` at `(y, t)` for the given args.
type JacobianWithArgs<'j> = dyn Fn(&Tensor, &Tensor, &[Tensor]) -> Result<(Tensor, Tensor)> + 'j;

/// Everything constant over a solve.
struct Solver<'p, 'j> {
    p: &'p Problem<'p>,
    method: Method,
    ctl: Controller,
    tol: &'p Tolerances,
    /// For `rosenbrock23`: `J` and `df/dt` from `qb::jacobian`, and the identity.
    jacobian: Option<(&'j JacobianWithArgs<'j>, Tensor)>,
    layout: Layout,
}

/// The landing tolerance in units of the dtype's epsilon times the magnitude of the times: a
/// step ending closer than that to `t1` lands on it (docs/ode.md).
const LANDING_ULPS: f64 = 100.0;

/// Either scheme's step, kept for the continuous extension.
enum Attempted {
    Dopri5(dopri5::Step),
    Rosenbrock(rosenbrock::Step),
}

impl Attempted {
    fn y_new(&self) -> &Tensor {
        match self {
            Attempted::Dopri5(s) => &s.y_new,
            Attempted::Rosenbrock(s) => &s.y_new,
        }
    }
    fn err(&self) -> &Tensor {
        match self {
            Attempted::Dopri5(s) => &s.err,
            Attempted::Rosenbrock(s) => &s.err,
        }
    }
    fn f_new(&self) -> &Tensor {
        match self {
            Attempted::Dopri5(s) => &s.f_new,
            Attempted::Rosenbrock(s) => &s.f_new,
        }
    }
    fn interpolate(&self, y: &Tensor, h: &Tensor, theta: &Tensor) -> Result<Tensor> {
        match self {
            Attempted::Dopri5(s) => dopri5::interpolate(s, y, h, theta),
            Attempted::Rosenbrock(s) => rosenbrock::interpolate(s, y, h, theta),
        }
    }
}

impl Solver<'_, '_> {
    fn dtype(&self) -> DType {
        self.p.rhs.dtype
    }

    /// The weighted RMS norm of §7.5.4.
    fn error_norm(&self, e: &Tensor, y: &Tensor, y_new: &Tensor) -> Result<Tensor> {
        let size = y.abs()?.maximum(y_new.abs()?)?;
        let scale = (size * self.tol.rtol).add(self.tol.atol)?;
        rms(&scaled(e, &scale, self.tol.atol, f64::INFINITY)?)
    }

    /// The Hairer-Wanner initial step (§7.5.4), signed, behind stop_gradient.
    fn initial_step(&self, dir: &Tensor) -> Result<Tensor> {
        let p = self.p;
        let (rtol, atol) = (self.tol.rtol, self.tol.atol);
        let y0 = &p.y0;
        let f0 = &p.f0;
        let sc = (y0.abs()? * rtol).add(atol)?;
        let d0 = rms(&scaled(y0, &sc, atol, 0.0)?)?;
        let d1 = rms(&scaled(f0, &sc, atol, 0.0)?)?;
        let tiny = d0.less(1e-5)?.logical_or(d1.less(1e-5)?)?;
        let h0 = select(&tiny, 1e-6, (&d0 / &d1)?.mul(0.01)?)?;
        let h0 = h0.astype(self.dtype())?;
        let signed = (dir * &h0)?;
        let y1 = (y0 + &signed * f0)?;
        let f1 = p.rhs.eval(&y1, &(&p.t0 + &signed)?, &p.args)?;
        let d2 = (rms(&scaled(&(&f1 - f0)?, &sc, atol, 0.0)?)? / &h0)?;
        let big = d1.maximum(&d2)?;
        let flat = big.less_equal(1e-15)?;
        let grown = (0.01 / &big)?.pow(1.0 / (self.ctl.order + 1.0))?;
        let h1 = select(&flat, h0.mul(1e-3)?.maximum(1e-6)?, grown)?;
        let span = (&p.t1 - &p.t0)?.abs()?;
        let h = h0.mul(100.0)?.minimum(h1)?.minimum(span)?;
        (dir * h)?.stop_gradient()
    }

    fn initial_state(&self, dir: &Tensor) -> Result<State> {
        let p = self.p;
        let dtype = self.dtype();
        let zero = scalar(0.0, dtype)?;
        let rows = match &p.saveat {
            Some(ts) => Some(crate::full([ts.size(), p.rhs.n], f64::NAN)?.astype(dtype)?),
            None => None,
        };
        Ok(State {
            y: p.y0.clone(),
            t: p.t0.clone(),
            h: self.initial_step(dir)?,
            err_prev: scalar(1.0, dtype)?,
            accepted: zero.clone(),
            rejected: zero.clone(),
            last_rejected: zero.clone(),
            done: zero,
            fy: p.f0.clone(),
            rows,
        })
    }

    fn step(&self, s: &State, h: &Tensor, args: &[Tensor]) -> Result<Attempted> {
        let f = |y: &Tensor, t: &Tensor| self.p.rhs.eval(y, t, args);
        match (self.method, &self.jacobian) {
            (Method::Dopri5, _) => Ok(Attempted::Dopri5(dopri5::step(&f, &s.y, &s.t, h, &s.fy)?)),
            (_, Some((jacobian, eye))) => {
                let jac = |y: &Tensor, t: &Tensor| jacobian(y, t, args);
                Ok(Attempted::Rosenbrock(rosenbrock::step(
                    &f, &jac, eye, &s.y, &s.t, h, &s.fy,
                )?))
            }
            _ => Err(Error::Internal {
                message: "rosenbrock23 solve without its Jacobian".into(),
            }),
        }
    }

    /// One step attempt: the next state. Called only on unfinished states (a finished one is
    /// left unchanged by the drivers), but finite on finished ones too (the step is then of
    /// length 0), because a batched `cond` evaluates both branches.
    fn attempt(&self, s: &State, inp: &Inputs<'_>) -> Result<State> {
        let dtype = self.dtype();
        let ctl = &self.ctl;
        let (t1, dir) = (inp.t1, inp.dir);
        let remaining = (t1 - &s.t)?;
        // Landing: the step would end within a rounding error of t1, or past it.
        let short = ((&remaining - &s.h)? * dir)?;
        let lands = short.less_equal(inp.landing)?;
        let h = select(&lands, &remaining, &s.h)?;
        let step = self.step(s, &h, inp.args)?;

        let err = self
            .error_norm(step.err(), &s.y, step.y_new())?
            .stop_gradient()?;
        let accept = err.less_equal(1.0)?;

        // Step-size factors (§7.5.4), all behind stop_gradient.
        let grow = err
            .pow(-ctl.a)?
            .mul(&s.err_prev.pow(ctl.b)?)?
            .mul(0.9)?
            .clip(0.2, 10.0)?;
        let grow = select(&err.equal(0.0)?, 10.0, grow)?;
        let grow = select(&s.last_rejected.greater(0.5)?, grow.minimum(1.0)?, grow)?;
        let shrink = err.pow(-ctl.reject)?.mul(0.9)?.maximum(0.2)?;
        let shrink = select(&err.isfinite()?, shrink, 0.2)?;
        let factor = select(&accept, grow, shrink)?;
        let h_next = (factor * &h)?.stop_gradient()?;

        let t_end = select(&lands, t1, (&s.t + &h)?)?;
        let finished = accept.logical_and(&lands)?;
        // A step that ends where it starts (`t + h == t`: `h` below the spacing of the
        // floating-point numbers at `t`) cannot advance `t`, and every later step would be
        // shorter still: the solve has stalled (at a blow-up, say). Stop rather than spin.
        let stalled = lands.logical_not()?.logical_and(&t_end.equal(&s.t)?)?;
        let accept = accept.logical_and(&stalled.logical_not()?)?;
        let accepted_f = select(&accept, 1.0, 0.0)?.astype(dtype)?;
        let rows = match (&s.rows, inp.saveat) {
            (Some(rows), Some(ts)) => {
                Some(self.save_rows(s, &step, &h, &t_end, &accept, dir, rows, ts)?)
            }
            _ => None,
        };
        Ok(State {
            y: select(&accept, step.y_new(), &s.y)?,
            t: select(&accept, t_end, &s.t)?,
            h: h_next,
            err_prev: select(&accept, err.maximum(1e-4)?, &s.err_prev)?,
            accepted: (&s.accepted + &accepted_f)?,
            rejected: (&s.rejected + (1.0 - &accepted_f)?)?,
            last_rejected: (1.0 - &accepted_f)?,
            done: select(&finished, 1.0, select(&stalled, -1.0, &s.done)?)?,
            fy: select(&accept, step.f_new(), &s.fy)?,
            rows,
        })
    }

    /// Fills the rows of the save times an accepted step covers: `(t, t_end]`, and `[t0, t_end]`
    /// on the first accepted step (so a save time equal to `t0` reads the interpolant at
    /// `theta = 0`, which is `y0` exactly).
    #[allow(clippy::too_many_arguments)]
    fn save_rows(
        &self,
        s: &State,
        step: &Attempted,
        h: &Tensor,
        t_end: &Tensor,
        accept: &Tensor,
        dir: &Tensor,
        rows: &Tensor,
        ts: &Tensor,
    ) -> Result<Tensor> {
        let m = ts.size() as isize;
        let from_t = (dir * (ts - &s.t)?)?;
        let first = s.accepted.equal(0.0)?;
        let after_start = select(
            &first,
            from_t.greater_equal(0.0)?.astype(self.dtype())?,
            from_t.greater(0.0)?.astype(self.dtype())?,
        )?
        .greater(0.5)?;
        let before_end = (dir * (ts - t_end)?)?.less_equal(0.0)?;
        let here = after_start
            .logical_and(before_end)?
            .logical_and(accept)?
            .reshape([m, 1])?;
        // A zero-length step (t1 == t0, or a finished state in a batch) divides by 1 instead.
        let h_safe = select(&h.equal(0.0)?, 1.0, h)?;
        let theta = ((ts - &s.t)? / h_safe)?.reshape([m, 1])?;
        let values = step.interpolate(&s.y, h, &theta)?;
        select(&here, values, rows)
    }
}

/// Runs an adaptive solve.
pub(super) fn solve(
    p: &Problem<'_>,
    method: Method,
    tol: &Tolerances,
    max_steps: usize,
) -> Result<(Tensor, OdeInfo)> {
    let dtype = p.rhs.dtype;
    let eps = match dtype {
        DType::F32 => f32::EPSILON as f64,
        _ => f64::EPSILON,
    };
    let layout = Layout {
        n: p.rhs.n,
        m: p.saveat.as_ref().map_or(0, Tensor::size),
        saveat: p.saveat.is_some(),
    };
    // J and df/dt in one forward-mode pass with n + 1 tangents (§7.5.3): the Jacobian of
    // z = [y, t] -> [f(y, t), 0], whose output is padded to n + 1 elements so that `jacobian`
    // picks forward mode. One Jacobian object per solve, so an eager solve compiles it once.
    let n = p.rhs.n;
    let padding = scalar(0.0, dtype)?.reshape([1])?;
    let jacobian_of = crate::jacobian(|(z, a): (Tensor, Vec<Tensor>)| {
        let y = z.index(crate::s![0..n])?;
        let t = z.index(crate::s![n])?;
        crate::concat(&[p.rhs.eval(&y, &t, &a)?, padding.clone()], 0)
    });
    let jacobian = |y: &Tensor, t: &Tensor, a: &[Tensor]| -> Result<(Tensor, Tensor)> {
        let z = crate::concat(&[y.clone(), t.reshape([1])?], 0)?;
        let full: Tensor = jacobian_of.call::<Tensor, Tensor>(&(z, a.to_vec()))?;
        Ok((
            full.index(crate::s![0..n, 0..n])?,
            full.index(crate::s![0..n, n])?,
        ))
    };
    let jacobian_ref: &JacobianWithArgs<'_> = &jacobian;
    let solver = Solver {
        p,
        method,
        ctl: controller(method),
        tol,
        jacobian: match method {
            Method::Rosenbrock23 => Some((jacobian_ref, crate::eye(p.rhs.n)?.astype(dtype)?)),
            _ => None,
        },
        layout,
    };
    let (t0, t1) = (&p.t0, &p.t1);
    let dir = select(&t1.greater_equal(t0)?, 1.0, -1.0)?
        .astype(dtype)?
        .stop_gradient()?;
    let landing = t0
        .abs()?
        .maximum(t1.abs()?)?
        .mul(LANDING_ULPS * eps)?
        .stop_gradient()?;
    let inputs = Inputs {
        t1,
        dir: &dir,
        landing: &landing,
        saveat: p.saveat.as_ref(),
        args: &p.args,
    };
    let init = solver.initial_state(&dir)?;
    // Under any transform (a trace is active) the solve is staged, as every region is.
    let last = if crate::trace::active() {
        traced(&solver, init, &inputs, max_steps).map_err(name_args)?
    } else {
        eager(&solver, init, &inputs, max_steps)?
    };
    let y = match &last.rows {
        Some(rows) => p.rhs.unflat(rows, Some(layout.m))?,
        None => p.rhs.unflat(&last.y, None)?,
    };
    let info = OdeInfo {
        t: last.t.clone(),
        accepted_steps: last.accepted.clone(),
        rejected_steps: last.rejected.clone(),
        success: last.done.greater(0.5)?,
    };
    Ok((y, info))
}

/// The eager driver: attempts until `t1` is reached; RT1 after `max_steps` attempts.
fn eager(
    s: &Solver<'_, '_>,
    mut state: State,
    inp: &Inputs<'_>,
    max_steps: usize,
) -> Result<State> {
    let mut attempts = 0;
    while attempts < max_steps {
        state = s.attempt(&state, inp)?;
        attempts += 1;
        let done = state.done.item()?;
        if done > 0.5 {
            return Ok(state);
        }
        if done < -0.5 {
            break;
        }
    }
    Err(Error::OdeMaxSteps {
        method: s.method.name().to_string(),
        t: state.t.item()?,
        max_steps: max_steps as u64,
        attempts: attempts as u64,
    })
}

/// The traced driver: one `while_loop` over the packed state that stops when the state is
/// done, bounded to `max_steps` trips (the bound gives it its reverse mode).
fn traced(s: &Solver<'_, '_>, state: State, inp: &Inputs<'_>, max_steps: usize) -> Result<State> {
    let layout = s.layout;
    let saveat = inp.saveat.is_some();
    let init = layout.pack(&state)?;
    debug_assert_eq!(init.size(), layout.len());
    let carry = crate::while_loop(
        // Going while `done` is 0: neither finished (1) nor stalled (-1).
        |c, _| c.index(crate::s![layout.done()])?.abs()?.less(0.5),
        |c, ops| {
            let state = layout.unpack(&c)?;
            let next = s.attempt(&state, &Inputs::from_operands(ops, saveat))?;
            layout.pack(&next)
        },
        &init,
    )
    .operands(&inp.operands())
    .max_trips(max_steps)
    .eval_with_info()?
    .0;
    layout.unpack(&carry)
}
