//! `qb::ode::odeint` (api.md §18, numerics.md §7.5): the acceptance examples E83–E89 of
//! `spec/acceptance.md` §11, closed-form solutions, convergence orders, eager versus traced
//! solves, dense output and `saveat`, `vmap`, and every validation error.

use qb::ode::{odeint, Method, OdeInfo};
use qb::prelude::*;
use qb::{Error, Tensor};
use quabla as qb;

fn close(a: f64, b: f64, rtol: f64) -> bool {
    (a - b).abs() <= rtol * b.abs().max(1e-300)
}

fn assert_rel(t: &Tensor, expected: &[f64], rtol: f64) {
    let v = t.to_vec::<f64>().unwrap();
    assert_eq!(v.len(), expected.len(), "{v:?} vs {expected:?}");
    for (a, b) in v.iter().zip(expected) {
        assert!(close(*a, *b, rtol), "{v:?} vs {expected:?} (rtol {rtol})");
    }
}

fn assert_abs(t: &Tensor, expected: &[f64], atol: f64) {
    let v = t.to_vec::<f64>().unwrap();
    assert_eq!(v.len(), expected.len(), "{v:?} vs {expected:?}");
    for (a, b) in v.iter().zip(expected) {
        assert!((a - b).abs() <= atol, "{v:?} vs {expected:?} (atol {atol})");
    }
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec::<f64>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

fn decay_rhs(y: &Tensor, _t: &Tensor, a: &[Tensor]) -> qb::Result<Tensor> {
    (y * &a[0]).neg()
}

/// Lotka-Volterra with `th = [a, b, c, d]`.
fn lv(y: &Tensor, _t: &Tensor, a: &[Tensor]) -> qb::Result<Tensor> {
    let th = &a[0];
    let (x, z) = (y.index(qb::s![0])?, y.index(qb::s![1])?);
    let xz = (&x * &z)?;
    let dx = (th.index(qb::s![0])? * &x)? - th.index(qb::s![1])? * &xz;
    let dz = (th.index(qb::s![2])? * &xz)? - th.index(qb::s![3])? * &z;
    qb::stack(&[dx?, dz?], 0)
}

fn stiff(y: &Tensor, t: &Tensor, a: &[Tensor]) -> qb::Result<Tensor> {
    (y - t.cos()?)? * a[0].neg()?
}

fn theta() -> Tensor {
    qb::array([1.5, 1.0, 1.0, 3.0]).unwrap()
}

fn y1() -> Tensor {
    qb::array([1.0, 1.0]).unwrap()
}

#[test]
fn e83_fixed_step_rk4() -> qb::Result<()> {
    let y0 = qb::array([1.0, 2.0])?;
    let k = qb::array(0.5)?;
    let y = odeint(decay_rhs, &y0, (0.0, 2.0))
        .steps(50)
        .args(&[&k])
        .eval()?;
    assert_abs(&y, &[0.36787944, 0.73575888], 1e-8);
    let saved = odeint(decay_rhs, &y0, (0.0, 2.0))
        .steps(4)
        .args(&[&k])
        .save(true)
        .eval()?;
    assert_eq!(saved.shape(), &[5, 2]);
    assert_eq!(saved.index(qb::s![0])?.to_vec::<f64>()?, vec![1.0, 2.0]);
    let g: Tensor = qb::grad(|k: Tensor| {
        odeint(decay_rhs, &y0, (0.0, 2.0))
            .steps(50)
            .args(&[&k])
            .eval()?
            .sum()
    })
    .call(&0.5)?;
    assert_abs(&g, &[-2.20727664], 1e-8);
    assert!((g.item()? + 6.0 / std::f64::consts::E).abs() < 1e-7);
    Ok(())
}

#[test]
fn e84_adaptive_dopri5() -> qb::Result<()> {
    let (y, info) = odeint(lv, &y1(), (0.0, 5.0))
        .method(Method::Dopri5)
        .args(&[theta()])
        .eval_with_info()?;
    assert_abs(&y, &[6.09849468, 0.62813790], 1e-4);
    assert_rel(&y, &[6.09850076, 0.62814261], 1e-7);
    assert_eq!(info.t.item()?, 5.0);
    assert!(info.success.item_bool()?);
    assert_eq!(info.accepted_steps.item()?, 53.0);
    assert_eq!(info.rejected_steps.item()?, 0.0);
    Ok(())
}

fn stiff_solve(method: Method) -> qb::Result<(Tensor, OdeInfo)> {
    let lam = qb::array(1e4)?;
    odeint(stiff, &qb::array([0.0])?, (0.0, 1.0))
        .method(method)
        .args(&[lam])
        .rtol(1e-4)
        .atol(1e-7)
        .max_steps(100_000)
        .eval_with_info()
}

#[test]
fn e85_stiff_relaxation() -> qb::Result<()> {
    let exact = 0.54038645;
    let (yr, ir) = stiff_solve(Method::Rosenbrock23)?;
    assert_abs(&yr, &[exact], 1e-5);
    assert_rel(&yr, &[0.54038875], 1e-7);
    assert_eq!(ir.accepted_steps.item()?, 151.0);
    // dopri5 needs thousands of steps: run it jitted (the same bits as eagerly).
    let lam = qb::array(1e4)?;
    let (yd, id): (Tensor, OdeInfo) = qb::jit(|lam: Tensor| {
        odeint(stiff, &qb::array([0.0])?, (0.0, 1.0))
            .method(Method::Dopri5)
            .args(&[lam])
            .rtol(1e-4)
            .atol(1e-7)
            .max_steps(100_000)
            .eval_with_info()
    })
    .call(&lam)?;
    assert_abs(&yd, &[exact], 1e-5);
    assert_rel(&yd, &[0.54038302], 1e-7);
    assert_eq!(id.accepted_steps.item()?, 3036.0);
    assert!(ir.accepted_steps.item()? * 10.0 < id.accepted_steps.item()?);
    Ok(())
}

#[test]
fn e86_eager_max_steps_exhaustion_and_traced_failure() -> qb::Result<()> {
    let lam = qb::array(1e4)?;
    let solve = |lam: &Tensor| {
        odeint(stiff, &qb::array([0.0])?, (0.0, 1.0))
            .method(Method::Rosenbrock23)
            .args(&[lam])
            .max_steps(512)
            .eval_with_info()
    };
    let err = solve(&lam).unwrap_err();
    let Error::OdeMaxSteps {
        method,
        t,
        max_steps,
        attempts,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(method, "rosenbrock23");
    assert_eq!(*max_steps, 512);
    assert_eq!(*attempts, 512);
    assert!(close(*t, 0.38979589336576453, 1e-9), "{t:?}");
    assert_eq!(
        err.to_string(),
        format!("rosenbrock23 stopped at t={t:?} before t1 after max_steps=512 step attempts; raise max_steps or relax rtol/atol")
    );
    // Under jit the same call returns the state reached and reports the failure.
    let (y, info): (Tensor, OdeInfo) = qb::jit(|lam: Tensor| solve(&lam)).call(&lam)?;
    assert!(!info.success.item_bool()?);
    assert_eq!(info.t.item()?.to_bits(), t.to_bits());
    assert_eq!(
        info.accepted_steps.item()? + info.rejected_steps.item()?,
        512.0
    );
    // Near the quasi-stationary solution y ~ cos(t) at the time reached.
    assert!((y.item()? - t.cos()).abs() < 1e-3);
    Ok(())
}

fn e87_rows() -> [f64; 12] {
    [
        1.0, 1.0, 2.77285128, 0.25871073, 6.77718181, 2.01275909, 0.97033109, 1.90984953,
        1.88437696, 0.32347855, 6.09850076, 0.62814261,
    ]
}

#[test]
fn e87_saveat() -> qb::Result<()> {
    let ts = qb::linspace(0.0, 5.0, 6)?;
    let data = odeint(lv, &y1(), (0.0, 5.0))
        .method(Method::Dopri5)
        .saveat(&ts)
        .args(&[theta()])
        .eval()?;
    assert_eq!(data.shape(), &[6, 2]);
    let truth = [
        1.0, 1.0, 2.77285090, 0.25871088, 6.77718939, 2.01275371, 0.97033045, 1.90985384,
        1.88437269, 0.32347856, 6.09849468, 0.62813790,
    ];
    assert_abs(&data.reshape([12])?, &truth, 1e-4);
    assert_rel(&data.reshape([12])?, &e87_rows(), 1e-7);
    // The first row is y0 and the last the final state, exactly.
    assert_eq!(data.index(qb::s![0])?.to_vec::<f64>()?, vec![1.0, 1.0]);
    let y = odeint(lv, &y1(), (0.0, 5.0))
        .method(Method::Dopri5)
        .args(&[theta()])
        .eval()?;
    assert_eq!(bits(&data.index(qb::s![5])?), bits(&y));
    Ok(())
}

fn fit_loss(th: &Tensor, data: &Tensor, ts: &Tensor) -> qb::Result<Tensor> {
    let pred = odeint(lv, &y1(), (0.0, 5.0))
        .method(Method::Dopri5)
        .saveat(ts)
        .args(&[th])
        .max_steps(200)
        .eval()?;
    (pred - data).powi(2).mean()
}

#[test]
fn e88_parameter_fitting_through_an_adaptive_solve() -> qb::Result<()> {
    let ts = qb::linspace(0.0, 5.0, 6)?;
    let data = odeint(lv, &y1(), (0.0, 5.0))
        .method(Method::Dopri5)
        .saveat(&ts)
        .args(&[theta()])
        .eval()?;
    let step = qb::jit(|th: Tensor| {
        qb::value_and_grad(|th: Tensor| fit_loss(&th, &data, &ts))
            .call::<Tensor, (Tensor, Tensor)>(&th)
    });
    let (value, grad): (Tensor, Tensor) = step.call(&(theta() + 0.1)?)?;
    assert!(close(value.item()?, 0.50908, 1e-3));
    assert_rel(&grad, &[8.8372, -2.4214, 5.4850, 0.26661], 1e-3);
    assert!(close(value.item()?, 0.50908184, 1e-7), "{}", value.item()?);
    assert_rel(
        &grad,
        &[8.83731214, -2.42140546, 5.48501747, 0.26664252],
        1e-7,
    );
    // The same value eagerly (an eager solve reaches t1 with the same bits).
    let eager = fit_loss(&(theta() + 0.1)?, &data, &ts)?;
    assert_eq!(eager.item()?.to_bits(), value.item()?.to_bits());
    Ok(())
}

fn invalid_message(r: qb::Result<Tensor>) -> String {
    match r {
        Err(Error::InvalidArgument { message }) => message,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn e89_argument_validation() -> qb::Result<()> {
    let y0 = qb::array([1.0, 2.0])?;
    let k = qb::array(0.5)?;
    let ts = qb::linspace(0.0, 2.0, 3)?;
    let base = || odeint(decay_rhs, &y0, (0.0, 2.0)).args(&[&k]);
    assert_eq!(
        invalid_message(base().eval()),
        "odeint: method 'rk4' requires steps"
    );
    assert_eq!(
        invalid_message(base().steps(4).save(true).saveat(&ts).eval()),
        "odeint: saveat cannot be combined with save=True"
    );
    assert_eq!(
        invalid_message(base().method(Method::Heun).eval()),
        "odeint: method 'heun' requires steps"
    );
    assert!(
        invalid_message(base().method(Method::Dopri5).steps(10).eval())
            .starts_with("odeint: method 'dopri5' chooses its own steps")
    );
    assert_eq!(
        invalid_message(base().method(Method::Dopri5).save(true).eval()),
        "odeint: save=True requires a fixed-step method"
    );
    assert_eq!(
        invalid_message(base().steps(0).eval()),
        "steps must be a finite positive number"
    );
    for (rtol, atol, message) in [
        (0.0, 1e-9, "rtol must be a finite positive number"),
        (-1e-6, 1e-9, "rtol must be a finite positive number"),
        (f64::NAN, 1e-9, "rtol must be a finite positive number"),
        (1e-6, -1.0, "atol must be a finite non-negative number"),
        (
            1e-6,
            f64::INFINITY,
            "atol must be a finite non-negative number",
        ),
    ] {
        let r = base().method(Method::Dopri5).rtol(rtol).atol(atol).eval();
        assert_eq!(invalid_message(r), message);
    }
    assert_eq!(
        invalid_message(base().method(Method::Dopri5).max_steps(0).eval()),
        "max_steps must be a finite positive number"
    );
    let saveat_message = "odeint: saveat must be 1-D and ordered from t0 to t1 within the span";
    for bad in [
        qb::array([0.0, 1.5, 1.0])?, // unsorted
        qb::array([0.0, 1.0, 2.5])?, // outside the span
        qb::array([-0.5, 1.0])?,     // before t0
        qb::array([[0.0, 1.0]])?,    // not 1-D
        qb::array(1.0)?,             // rank 0
    ] {
        let r = base().method(Method::Dopri5).saveat(&bad).eval();
        assert_eq!(invalid_message(r), saveat_message);
        let r = base().steps(4).saveat(&bad).eval();
        assert_eq!(invalid_message(r), saveat_message);
    }
    // Backward integration: save times run from t0 down to t1.
    let back = odeint(decay_rhs, &y0, (2.0, 0.0)).args(&[&k]).steps(4);
    assert_eq!(
        invalid_message(back.saveat(&qb::array([0.0, 2.0])?).eval()),
        saveat_message
    );
    // A y0 that is not floating.
    let flags = qb::array([1.0, 0.0])?.greater(0.5)?;
    let r = odeint(decay_rhs, &flags, (0.0, 1.0))
        .steps(2)
        .args(&[&k])
        .eval();
    assert!(
        matches!(&r, Err(Error::Type { message }) if message.starts_with("odeint: y0 must be a floating array, got bool")),
        "{r:?}"
    );
    // f returning another shape, or another dtype: checked by the first evaluation, before any
    // step.
    let calls = std::cell::Cell::new(0);
    let wrong_shape = |y: &Tensor, _: &Tensor, _: &[Tensor]| {
        calls.set(calls.get() + 1);
        y.sum()
    };
    for method in [Method::Rk4, Method::Dopri5, Method::Rosenbrock23] {
        let mut b = odeint(wrong_shape, &y0, (0.0, 1.0)).method(method);
        if !method.is_adaptive() {
            b = b.steps(3);
        }
        let err = b.eval().unwrap_err();
        assert_eq!(
            err.to_string(),
            "odeint: f returned float64[] but y0 is float64[2]; f(y, t, args) must return dy/dt with the shape and dtype of y0"
        );
        assert!(matches!(err, Error::Shape { .. }));
    }
    assert_eq!(calls.get(), 3);
    let wrong_dtype = |y: &Tensor, _: &Tensor, _: &[Tensor]| y.astype(qb::F32);
    let err = odeint(wrong_dtype, &y0, (0.0, 1.0))
        .steps(3)
        .eval()
        .unwrap_err();
    assert!(matches!(err, Error::Type { .. }), "{err:?}");
    assert!(err
        .to_string()
        .contains("f returned float32[2] but y0 is float64[2]"));
    // Bad times.
    let r = odeint(decay_rhs, &y0, (0.0, f64::NAN))
        .steps(3)
        .args(&[&k])
        .eval();
    assert_eq!(invalid_message(r), "odeint: t1 must be finite, got NaN");
    let r = odeint(decay_rhs, &y0, (qb::array([0.0, 1.0])?, 2.0))
        .steps(3)
        .args(&[&k])
        .eval();
    assert!(
        invalid_message(r).starts_with("odeint: t0 must be a number or a rank-0 floating array")
    );
    // Unknown method names (the spelling of the Python binding).
    assert_eq!("dopri5".parse::<Method>()?, Method::Dopri5);
    let err = "rk45".parse::<Method>().unwrap_err();
    assert!(err.to_string().starts_with("odeint: unknown method 'rk45'"));
    Ok(())
}

/// Errors of every fixed-step method halve as expected when the step count doubles.
#[test]
fn convergence_orders_of_the_fixed_step_methods() -> qb::Result<()> {
    // y' = y cos(t): y = exp(sin(t)), a non-autonomous problem.
    let rhs = |y: &Tensor, t: &Tensor, _: &[Tensor]| y * t.cos()?;
    let y0 = qb::array([1.0])?;
    let exact = 2f64.sin().exp();
    for (method, order) in [(Method::Euler, 1), (Method::Heun, 2), (Method::Rk4, 4)] {
        let error = |steps: usize| -> qb::Result<f64> {
            let y = odeint(rhs, &y0, (0.0, 2.0))
                .method(method)
                .steps(steps)
                .eval()?;
            Ok((y.item()? - exact).abs())
        };
        let (coarse, fine) = (error(40)?, error(80)?);
        let ratio = coarse / fine;
        let expected = f64::from(1 << order);
        assert!(
            (ratio / expected - 1.0).abs() < 0.1,
            "{method}: error ratio {ratio}, expected about {expected}"
        );
    }
    Ok(())
}

#[test]
fn harmonic_oscillator_closed_form_for_every_method() -> qb::Result<()> {
    // y = [x, v], x'' = -w^2 x: x = cos(w t), v = -w sin(w t).
    let rhs = |y: &Tensor, _: &Tensor, a: &[Tensor]| {
        let w2 = a[0].square()?;
        let x = y.index(qb::s![0..1])?;
        let v = y.index(qb::s![1..2])?;
        qb::concat(&[v, (x * w2)?.neg()?], 0)
    };
    let w = qb::array(2.0)?;
    let t1: f64 = 3.0;
    let exact = [(2.0 * t1).cos(), -2.0 * (2.0 * t1).sin()];
    for (method, steps, atol) in [
        (Method::Euler, Some(2_000), 2e-2),
        (Method::Heun, Some(2_000), 1e-4),
        (Method::Rk4, Some(200), 1e-6),
        (Method::Dopri5, None, 1e-7),
        (Method::Rosenbrock23, None, 1e-5),
    ] {
        let mut call = odeint(rhs, &qb::array([1.0, 0.0])?, (0.0, t1))
            .method(method)
            .args(&[&w])
            .rtol(1e-9)
            .atol(1e-12);
        if let Some(s) = steps {
            call = call.steps(s);
        }
        if method == Method::Rosenbrock23 {
            // Second order: a tight tolerance for a 1e-5 global error.
            call = call.rtol(1e-8).atol(1e-10).max_steps(20_000);
        }
        let y = call.eval()?;
        assert_abs(&y, &exact, atol);
    }
    Ok(())
}

#[test]
fn backward_integration_for_every_method() -> qb::Result<()> {
    // From t0 = 1 back to t1 = -1: y = y0 exp(-k (t1 - t0)).
    let k = qb::array(0.7)?;
    let y0 = qb::array([1.0, -3.0])?;
    let factor = (0.7f64 * 2.0).exp();
    let exact = [factor, -3.0 * factor];
    let ts = qb::array([1.0, 0.0, -1.0])?;
    for method in Method::ALL_FOR_TESTS {
        let mut call = odeint(decay_rhs, &y0, (1.0, -1.0))
            .method(method)
            .args(&[&k])
            .rtol(1e-8)
            .atol(1e-10);
        if !method.is_adaptive() {
            call = call.steps(400);
        }
        let (y, info) = call.eval_with_info()?;
        let tol = if method == Method::Euler { 2e-2 } else { 1e-5 };
        assert_abs(&y, &exact, tol * factor * 3.0);
        assert_eq!(info.t.item()?, -1.0);
        let mut call = odeint(decay_rhs, &y0, (1.0, -1.0))
            .method(method)
            .args(&[&k])
            .saveat(&ts)
            .rtol(1e-8)
            .atol(1e-10);
        if !method.is_adaptive() {
            call = call.steps(400);
        }
        let rows = call.eval()?;
        assert_eq!(rows.index(qb::s![0])?.to_vec::<f64>()?, vec![1.0, -3.0]);
        let mid = 0.7f64.exp();
        assert_abs(&rows.index(qb::s![1])?, &[mid, -3.0 * mid], tol * 3.0);
        assert_eq!(bits(&rows.index(qb::s![2])?), bits(&y), "{method}");
    }
    Ok(())
}

trait AllMethods {
    const ALL_FOR_TESTS: [Method; 5];
}

impl AllMethods for Method {
    const ALL_FOR_TESTS: [Method; 5] = [
        Method::Euler,
        Method::Heun,
        Method::Rk4,
        Method::Dopri5,
        Method::Rosenbrock23,
    ];
}

fn with_steps<F>(call: qb::ode::Odeint<F>, method: Method, steps: usize) -> qb::ode::Odeint<F>
where
    F: Fn(&Tensor, &Tensor, &[Tensor]) -> qb::Result<Tensor>,
{
    if method.is_adaptive() {
        call.method(method)
    } else {
        call.method(method).steps(steps)
    }
}

#[test]
fn eager_and_jitted_solves_agree_bit_for_bit() -> qb::Result<()> {
    let ts = qb::array([0.0, 0.3, 1.7, 2.5])?;
    for method in Method::ALL_FOR_TESTS {
        for saveat in [false, true] {
            let solve = |th: &Tensor| {
                let mut call = with_steps(odeint(lv, &y1(), (0.0, 2.5)), method, 30).args(&[th]);
                if saveat {
                    call = call.saveat(&ts);
                }
                call.eval_with_info()
            };
            let (ye, ie) = solve(&theta())?;
            let (yj, ij): (Tensor, OdeInfo) = qb::jit(|th: Tensor| solve(&th)).call(&theta())?;
            assert_eq!(bits(&ye), bits(&yj), "{method} saveat={saveat}");
            assert_eq!(ie.t.item()?, ij.t.item()?);
            assert_eq!(ie.accepted_steps.item()?, ij.accepted_steps.item()?);
            assert_eq!(ie.rejected_steps.item()?, ij.rejected_steps.item()?);
            assert!(ij.success.item_bool()?);
        }
    }
    Ok(())
}

#[test]
fn fixed_step_info_and_save() -> qb::Result<()> {
    let k = qb::array(0.5)?;
    let y0 = qb::array([1.0, 2.0])?;
    let (saved, info) = odeint(decay_rhs, &y0, (0.0, 2.0))
        .method(Method::Heun)
        .steps(8)
        .args(&[&k])
        .save(true)
        .eval_with_info()?;
    assert_eq!(saved.shape(), &[9, 2]);
    assert_eq!(info.t.item()?, 2.0);
    assert_eq!(info.accepted_steps.item()?, 8.0);
    assert_eq!(info.rejected_steps.item()?, 0.0);
    assert!(info.success.item_bool()?);
    // Each saved row is the solve stopped at that step: t_i = t0 + i dt.
    for i in [1usize, 5, 8] {
        let y = odeint(decay_rhs, &y0, (0.0, 0.25 * i as f64))
            .method(Method::Heun)
            .steps(i)
            .args(&[&k])
            .eval()?;
        assert_eq!(bits(&saved.index(qb::s![i])?), bits(&y), "row {i}");
    }
    // saveat on the mesh reads the mesh states exactly; between mesh points the Hermite
    // interpolant is fourth-order accurate for this smooth solution.
    let ts = qb::array([0.0, 0.5, 0.6, 2.0])?;
    let rows = odeint(decay_rhs, &y0, (0.0, 2.0))
        .method(Method::Heun)
        .steps(8)
        .args(&[&k])
        .saveat(&ts)
        .eval()?;
    assert_eq!(
        bits(&rows.index(qb::s![0])?),
        bits(&saved.index(qb::s![0])?)
    );
    assert_eq!(
        bits(&rows.index(qb::s![1])?),
        bits(&saved.index(qb::s![2])?)
    );
    assert_eq!(
        bits(&rows.index(qb::s![3])?),
        bits(&saved.index(qb::s![8])?)
    );
    let exact = (-0.3f64).exp();
    assert_abs(&rows.index(qb::s![2])?, &[exact, 2.0 * exact], 2e-3);
    Ok(())
}

#[test]
fn rk4_saveat_interpolant_is_accurate_between_mesh_points() -> qb::Result<()> {
    let k = qb::array(1.3)?;
    let ts = qb::linspace(0.0, 1.0, 37)?;
    let rows = odeint(decay_rhs, &qb::array([1.0])?, (0.0, 1.0))
        .steps(10)
        .args(&[&k])
        .saveat(&ts)
        .eval()?;
    for (s, v) in ts.to_vec::<f64>()?.iter().zip(rows.to_vec::<f64>()?) {
        assert!((v - (-1.3 * s).exp()).abs() < 2e-5, "{s}: {v}");
    }
    Ok(())
}

#[test]
fn dense_output_of_the_adaptive_methods_is_accurate() -> qb::Result<()> {
    let k = qb::array(0.8)?;
    let ts = qb::linspace(0.0, 3.0, 25)?;
    for (method, tol) in [(Method::Dopri5, 1e-8), (Method::Rosenbrock23, 1e-5)] {
        let rows = odeint(decay_rhs, &qb::array([2.0])?, (0.0, 3.0))
            .method(method)
            .args(&[&k])
            .saveat(&ts)
            .rtol(1e-9)
            .atol(1e-12)
            .max_steps(5000)
            .eval()?;
        for (s, v) in ts.to_vec::<f64>()?.iter().zip(rows.to_vec::<f64>()?) {
            let exact = 2.0 * (-0.8 * s).exp();
            assert!((v - exact).abs() < tol, "{method} at {s}: {v} vs {exact}");
        }
    }
    Ok(())
}

#[test]
fn zero_length_span_returns_y0() -> qb::Result<()> {
    let k = qb::array(0.5)?;
    let y0 = qb::array([1.0, 2.0])?;
    for method in Method::ALL_FOR_TESTS {
        let (y, info) = with_steps(odeint(decay_rhs, &y0, (1.5, 1.5)), method, 4)
            .args(&[&k])
            .eval_with_info()?;
        assert_eq!(y.to_vec::<f64>()?, vec![1.0, 2.0], "{method}");
        assert!(info.success.item_bool()?);
        assert_eq!(info.t.item()?, 1.5);
        let rows = with_steps(odeint(decay_rhs, &y0, (1.5, 1.5)), method, 4)
            .args(&[&k])
            .saveat(&qb::array([1.5, 1.5])?)
            .eval()?;
        assert_eq!(rows.to_vec::<f64>()?, vec![1.0, 2.0, 1.0, 2.0], "{method}");
        // The zero-length scheme's derivative: d y / d t1 = f(y0, t0).
        let g: Tensor = qb::grad(|t1: Tensor| {
            with_steps(odeint(decay_rhs, &y0, (1.5, &t1)), method, 4)
                .args(&[&k])
                .eval()?
                .sum()
        })
        .call(&1.5)?;
        assert!((g.item()? + 1.5).abs() < 1e-12, "{method}: {}", g.item()?);
    }
    Ok(())
}

#[test]
fn pure_relative_control_with_atol_zero() -> qb::Result<()> {
    let k = qb::array(0.5)?;
    // A component that starts at zero: its scale is zero until it moves.
    let rhs = |y: &Tensor, t: &Tensor, a: &[Tensor]| {
        let decay = (y.index(qb::s![0..1])? * &a[0]).neg()?;
        qb::concat(&[decay, t.cos()?.reshape([1])?], 0)
    };
    for method in [Method::Dopri5, Method::Rosenbrock23] {
        let (y, info) = odeint(rhs, &qb::array([1.0, 0.0])?, (0.0, 2.0))
            .method(method)
            .args(&[&k])
            .rtol(1e-7)
            .atol(0.0)
            .max_steps(5000)
            .eval_with_info()?;
        assert!(info.success.item_bool()?, "{method}");
        let tol = if method == Method::Dopri5 { 1e-6 } else { 1e-4 };
        assert_abs(&y, &[(-1f64).exp(), 2f64.sin()], tol);
    }
    Ok(())
}

#[test]
fn float32_solves_stay_float32() -> qb::Result<()> {
    let k = qb::F32.array(0.5)?;
    let y0 = qb::F32.array([1.0, 2.0])?;
    for method in Method::ALL_FOR_TESTS {
        let (y, info) = with_steps(odeint(decay_rhs, &y0, (0.0, 2.0)), method, 50)
            .args(&[&k])
            .rtol(1e-4)
            .atol(1e-6)
            .eval_with_info()?;
        assert_eq!(y.dtype(), qb::F32, "{method}");
        assert_eq!(info.t.dtype(), qb::F32);
        let tol = if method == Method::Euler { 2e-2 } else { 2e-4 };
        assert_abs(&y, &[(-1f64).exp(), 2.0 * (-1f64).exp()], tol);
    }
    Ok(())
}

#[test]
fn rank0_and_matrix_states_keep_their_shape() -> qb::Result<()> {
    let rhs = |y: &Tensor, _: &Tensor, _: &[Tensor]| y.neg();
    let y = odeint(rhs, &qb::array(1.0)?, (0.0, 1.0))
        .method(Method::Dopri5)
        .eval()?;
    assert_eq!(y.shape(), &[] as &[usize]);
    assert!((y.item()? - (-1f64).exp()).abs() < 1e-6);
    let m0 = qb::array([[1.0, 2.0], [3.0, 4.0]])?;
    for method in [Method::Rk4, Method::Rosenbrock23] {
        let rows = with_steps(odeint(rhs, &m0, (0.0, 1.0)), method, 20)
            .saveat(&qb::array([0.0, 1.0])?)
            .eval()?;
        assert_eq!(rows.shape(), &[2, 2, 2]);
        assert_eq!(
            rows.index(qb::s![0])?.to_vec::<f64>()?,
            vec![1.0, 2.0, 3.0, 4.0]
        );
    }
    Ok(())
}

#[test]
fn traced_save_times_outside_the_span_are_nan() -> qb::Result<()> {
    let k = qb::array(0.5)?;
    let y0 = qb::array([1.0])?;
    for method in [Method::Rk4, Method::Dopri5] {
        let rows: Tensor = qb::jit(|ts: Tensor| {
            with_steps(odeint(decay_rhs, &y0, (0.0, 1.0)), method, 10)
                .args(&[&k])
                .saveat(&ts)
                .eval()
        })
        .call(&qb::array([-0.5, 0.5, 1.5])?)?;
        let v = rows.to_vec::<f64>()?;
        assert!(v[0].is_nan() && v[2].is_nan(), "{method}: {v:?}");
        assert!((v[1] - (-0.25f64).exp()).abs() < 1e-5, "{method}: {v:?}");
    }
    Ok(())
}

#[test]
fn closing_over_a_tracer_is_the_region_error_naming_args() {
    let y0 = qb::array([1.0]).unwrap();
    for method in Method::ALL_FOR_TESTS {
        let r: qb::Result<Tensor> = qb::jit(|k: Tensor| {
            let rhs = |y: &Tensor, _: &Tensor, _: &[Tensor]| (y * &k).neg();
            with_steps(odeint(rhs, &y0, (0.0, 1.0)), method, 4).eval()
        })
        .call(&qb::array(0.5).unwrap());
        match r {
            Err(Error::Tracer { kind, message }) => {
                assert_eq!(kind, qb::TracerErrorKind::RegionCapture);
                assert!(
                    message.starts_with("odeint: f closes over a traced value"),
                    "{message}"
                );
                assert!(message.contains(".args(&[..])"), "{message}");
            }
            other => panic!("{method}: {other:?}"),
        }
    }
}

#[test]
fn vmap_over_initial_conditions_and_parameters() -> qb::Result<()> {
    let ts = qb::array([0.0, 1.0, 2.0])?;
    let y0s = qb::array([[1.0, 1.0], [2.0, 0.5], [0.5, 2.0]])?;
    let thetas = qb::array([[1.5, 1.0, 1.0, 3.0], [1.0, 0.5, 0.7, 2.0]])?;
    for method in Method::ALL_FOR_TESTS {
        let solve = |y0: &Tensor, th: &Tensor| {
            with_steps(odeint(lv, y0, (0.0, 2.0)), method, 40)
                .args(&[th])
                .saveat(&ts)
                .eval_with_info()
        };
        let (rows, info): (Tensor, OdeInfo) =
            qb::vmap(|y0: Tensor| solve(&y0, &theta())).call(&y0s)?;
        assert_eq!(rows.shape(), &[3, 3, 2]);
        assert_eq!(info.accepted_steps.shape(), &[3]);
        for b in 0..3 {
            let (single, single_info) = solve(&y0s.index(qb::s![b])?, &theta())?;
            let row = rows.index(qb::s![b])?;
            // Batched kernels may round differently from single ones only in the last bits.
            assert_rel(
                &row.reshape([6])?,
                &single.reshape([6])?.to_vec::<f64>()?,
                1e-12,
            );
            assert_eq!(
                info.accepted_steps.index(qb::s![b])?.item()?,
                single_info.accepted_steps.item()?
            );
        }
        let rows: Tensor = qb::vmap(|th: Tensor| Ok(solve(&y1(), &th)?.0)).call(&thetas)?;
        for b in 0..2 {
            let (single, _) = solve(&y1(), &thetas.index(qb::s![b])?)?;
            assert_rel(
                &rows.index(qb::s![b])?.reshape([6])?,
                &single.reshape([6])?.to_vec::<f64>()?,
                1e-12,
            );
        }
    }
    Ok(())
}

#[test]
fn jit_of_a_solve_with_traced_span() -> qb::Result<()> {
    let k = qb::array(0.5)?;
    let y0 = qb::array([1.0])?;
    for method in Method::ALL_FOR_TESTS {
        let f = qb::jit(|(t0, t1): (Tensor, Tensor)| {
            with_steps(odeint(decay_rhs, &y0, (&t0, &t1)), method, 200)
                .args(&[&k])
                .rtol(1e-10)
                .atol(1e-12)
                .max_steps(4000)
                .eval()
        });
        let y: Tensor = f.call(&(qb::array(0.5)?, qb::array(2.0)?))?;
        let tol = match method {
            Method::Euler => 2e-3,
            Method::Heun => 2e-6,
            _ => 1e-7,
        };
        assert_abs(&y, &[(-0.75f64).exp()], tol);
        let eager = with_steps(odeint(decay_rhs, &y0, (0.5, 2.0)), method, 200)
            .args(&[&k])
            .rtol(1e-10)
            .atol(1e-12)
            .max_steps(4000)
            .eval()?;
        assert_eq!(bits(&eager), bits(&y), "{method}");
    }
    Ok(())
}

/// docs/ode.md, landing: a step that would end within `100 eps max(|t|, |t1|)` of `t1` lands on
/// `t1` instead of leaving a last step of a few ulps.
#[test]
fn a_step_a_rounding_error_short_of_t1_lands_on_it() -> qb::Result<()> {
    // y' = 1 is integrated exactly, so every step is accepted with a zero error estimate and
    // the next step is ten times longer: 1e-4, 1e-3, 1e-2, 0.1, ...
    let rhs = |y: &Tensor, _: &Tensor, _: &[Tensor]| qb::ones_like(y);
    let y0 = qb::array([0.0])?;
    let solve = |t1: f64, max_steps: usize| {
        qb::jit(|t1: Tensor| {
            odeint(rhs, &y0, (0.0, &t1))
                .method(Method::Dopri5)
                .max_steps(max_steps)
                .eval_with_info()
        })
        .call(&qb::array(t1)?)
    };
    // Where the fourth step ends when t1 is far away.
    let (_, far): (Tensor, OdeInfo) = solve(1000.0, 4)?;
    let t4 = far.t.item()?;
    assert!((t4 - 0.1111).abs() < 1e-12, "{t4}");
    // Five ulps beyond it: the fourth step lands.
    let near = f64::from_bits(t4.to_bits() + 5);
    let (y, info): (Tensor, OdeInfo) = solve(near, 100)?;
    assert_eq!(info.accepted_steps.item()?, 4.0);
    assert_eq!(info.t.item()?, near);
    assert!((y.item()? - near).abs() < 1e-15);
    // Clearly beyond it: a fifth, short step.
    let (_, info): (Tensor, OdeInfo) = solve(t4 + 1e-6, 100)?;
    assert_eq!(info.accepted_steps.item()?, 5.0);
    assert_eq!(info.t.item()?, t4 + 1e-6);
    Ok(())
}

/// docs/ode.md, regions: a fixed-step solve (with or without `saveat`) is a `fori_loop`, with
/// `save` a `scan`; every derivative composition goes through either (docs/loops.md).
#[test]
fn fixed_step_regions_and_their_derivative_compositions() -> qb::Result<()> {
    let y0 = qb::array([1.0])?;
    let ts = qb::array([0.5, 1.0])?;
    let solve = |k: &Tensor, mode: u8| -> qb::Result<Tensor> {
        let call = odeint(decay_rhs, &y0, (0.0, 1.0)).steps(10).args(&[k]);
        match mode {
            0 => call.eval()?.sum(),
            1 => call.saveat(&ts).eval()?.sum(),
            _ => call.save(true).eval()?.sum(),
        }
    };
    for mode in 0..3 {
        let text = qb::jit(|k: Tensor| solve(&k, mode))
            .lower(&qb::array(0.5)?)?
            .as_text();
        let region = if mode == 2 { "= scan(" } else { "= fori(" };
        assert!(text.contains(region), "mode {mode}: {text}");
        let ff = qb::jvp(
            |k: Tensor| Ok(qb::jvp(|k: Tensor| solve(&k, mode), &k, &qb::array(1.0)?)?.1),
            &qb::array(0.5)?,
            &qb::array(1.0)?,
        );
        let (_, second) = ff?;
        let gg: Tensor =
            qb::grad(|k: Tensor| qb::grad(|k: Tensor| solve(&k, mode)).call::<Tensor, Tensor>(&k))
                .call(&qb::array(0.5)?)?;
        assert!(
            (second.item()? - gg.item()?).abs() < 1e-12 * gg.item()?.abs(),
            "mode {mode}"
        );
    }
    Ok(())
}

/// A solve whose inputs are all concrete but that runs inside a transform is traced too (one
/// region of the enclosing trace), with the same values.
#[test]
fn a_constant_solve_inside_jit_is_traced() -> qb::Result<()> {
    let k = qb::array(0.5)?;
    let y0 = qb::array([1.0, 2.0])?;
    for method in [Method::Dopri5, Method::Rosenbrock23] {
        let eager = odeint(decay_rhs, &y0, (0.0, 1.0))
            .method(method)
            .args(&[&k])
            .eval()?;
        let shifted: Tensor = qb::jit(|x: Tensor| {
            x + odeint(decay_rhs, &y0, (0.0, 1.0))
                .method(method)
                .args(&[&k])
                .eval()?
        })
        .call(&qb::array(1.0)?)?;
        assert_eq!(bits(&(eager + 1.0)?), bits(&shifted), "{method}");
    }
    Ok(())
}

/// `y' = y^2`, `y(0) = 1`: `y = 1 / (1 - t)`, which blows up at `t = 1`.
fn blows_up(y: &Tensor, _t: &Tensor, _args: &[Tensor]) -> qb::Result<Tensor> {
    y.square()
}

#[test]
fn a_solve_whose_step_no_longer_advances_t_stops_there() -> qb::Result<()> {
    // Past t = 1 no step can be accepted: the step size shrinks until `t + h == t`, and the
    // solve stops at that attempt, with RT1 eagerly and `success` false traced, long before
    // its million attempts.
    let max_steps = 1_000_000;
    for method in [Method::Dopri5, Method::Rosenbrock23] {
        let solve = |y0: &Tensor| {
            odeint(blows_up, y0, (0.0, 2.0))
                .method(method)
                .max_steps(max_steps)
                .eval_with_info()
        };
        let y0 = qb::array([1.0])?;
        let err = solve(&y0).unwrap_err();
        let Error::OdeMaxSteps {
            t,
            attempts,
            max_steps: bound,
            ..
        } = &err
        else {
            panic!("{}: {err:?}", method.name())
        };
        assert_eq!(*bound, max_steps as u64);
        assert!(*attempts < 10_000, "{}: {attempts} attempts", method.name());
        assert!((0.99..1.0 + 1e-6).contains(t), "{}: t = {t}", method.name());
        let message = err.to_string();
        assert!(
            message.starts_with(&format!("{} stopped at t={t:?} before t1 after {attempts} of max_steps={max_steps} step attempts", method.name()))
                && message.contains("raising max_steps will not help"),
            "{message}"
        );

        // Traced: the loop stops at the same attempt, with the same state.
        let (y, info): (Tensor, OdeInfo) = qb::jit(|y0: Tensor| solve(&y0)).call(&y0)?;
        assert!(!info.success.item_bool()?, "{}", method.name());
        assert_eq!(info.t.item()?.to_bits(), t.to_bits(), "{}", method.name());
        let tried = info.accepted_steps.item()? + info.rejected_steps.item()?;
        assert_eq!(tried, *attempts as f64, "{}", method.name());
        assert!(y.item()? > 1e6, "{}: y = {}", method.name(), y.item()?);
    }
    Ok(())
}
