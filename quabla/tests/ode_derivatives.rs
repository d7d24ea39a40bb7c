//! Derivatives of `qb::ode::odeint` (numerics.md §7.5.6) with respect to `y0`, `t0`, `t1`, the
//! save times and the args, in reverse and forward mode, for every method, against central
//! differences of the solve in f64 and against closed forms; second order for the fixed-step
//! methods; the rules of `docs/ode.md` (save time at `t0`, `t0` moving the adaptive mesh).

use qb::ode::{odeint, Method, Odeint};
use qb::prelude::*;
use qb::Tensor;
use quabla as qb;

const METHODS: [Method; 5] = [
    Method::Euler,
    Method::Heun,
    Method::Rk4,
    Method::Dopri5,
    Method::Rosenbrock23,
];

/// A nonlinear, non-autonomous system with two parameters `p = [a, b]`.
fn rhs(y: &Tensor, t: &Tensor, args: &[Tensor]) -> qb::Result<Tensor> {
    let p = &args[0];
    let (u, v) = (y.index(qb::s![0])?, y.index(qb::s![1])?);
    let (a, b) = (p.index(qb::s![0])?, p.index(qb::s![1])?);
    let du = ((&a * &u)?.neg()? + t.sin()? * &v)?;
    let dv = ((&b * &u)? * &v)?.neg()? + t.cos()?.mul(0.5)?;
    qb::stack(&[du, dv?], 0)
}

fn configure<F>(call: Odeint<F>, method: Method) -> Odeint<F>
where
    F: Fn(&Tensor, &Tensor, &[Tensor]) -> qb::Result<Tensor>,
{
    if method.is_adaptive() {
        // Tight enough that the mesh's own dependence on the inputs (which the derivative
        // ignores, §7.5.6) stays far below the test's tolerance.
        let rtol = if method == Method::Dopri5 {
            1e-10
        } else {
            1e-8
        };
        call.method(method)
            .rtol(rtol)
            .atol(rtol * 1e-2)
            .max_steps(4000)
    } else {
        call.method(method).steps(16)
    }
}

type Args = (Tensor, Tensor, Tensor, Tensor, Tensor);

/// `w . y(t1) + W . y(ts)`: the final state and the saved rows.
fn loss(method: Method, (y0, t0, t1, p, ts): Args) -> qb::Result<Tensor> {
    let y = configure(odeint(rhs, &y0, (&t0, &t1)), method)
        .args(&[&p])
        .eval()?;
    let rows = configure(odeint(rhs, &y0, (&t0, &t1)), method)
        .args(&[&p])
        .saveat(&ts)
        .eval()?;
    let w = qb::array([0.7, -1.3])?;
    let big_w = qb::array([[0.3, 1.1], [-0.4, 0.9], [1.7, 0.2]])?;
    (y * w)?.sum().add((rows * big_w)?.sum())
}

fn point() -> qb::Result<Args> {
    Ok((
        qb::array([0.8, 0.4])?,
        qb::array(0.1)?,
        qb::array(1.3)?,
        qb::array([0.9, 0.6])?,
        // Away from the fixed-step mesh points (dt = 0.075).
        qb::array([0.23, 0.71, 1.12])?,
    ))
}

/// Every scalar input coordinate as (argument index, element index).
fn coordinates() -> Vec<(usize, usize)> {
    let sizes = [2, 1, 1, 2, 3];
    sizes
        .iter()
        .enumerate()
        .flat_map(|(a, &n)| (0..n).map(move |e| (a, e)))
        .collect()
}

fn perturb(args: &Args, (a, e): (usize, usize), delta: f64) -> qb::Result<Args> {
    let bump = |t: &Tensor, k: usize| -> qb::Result<Tensor> {
        if k != a {
            return Ok(t.clone());
        }
        let mut v = t.to_vec::<f64>()?;
        v[e] += delta;
        Tensor::from_vec(t.shape(), v)
    };
    Ok((
        bump(&args.0, 0)?,
        bump(&args.1, 1)?,
        bump(&args.2, 2)?,
        bump(&args.3, 3)?,
        bump(&args.4, 4)?,
    ))
}

/// Fourth-order central difference along one coordinate of a (jitted) loss.
fn central(
    value: &dyn Fn(&Args) -> qb::Result<f64>,
    args: &Args,
    c: (usize, usize),
) -> qb::Result<f64> {
    let h = 1e-3;
    let at = |d: f64| -> qb::Result<f64> { value(&perturb(args, c, d)?) };
    Ok((8.0 * (at(h)? - at(-h)?) - (at(2.0 * h)? - at(-2.0 * h)?)) / (12.0 * h))
}

fn flat(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

fn grads_flat(g: &Args) -> Vec<f64> {
    [&g.0, &g.1, &g.2, &g.3, &g.4]
        .iter()
        .flat_map(|t| flat(t))
        .collect()
}

/// Reverse mode (`grad`) and forward mode (`jvp`) of `loss` with respect to every input
/// coordinate, against central differences.
fn check_first_order(method: Method) -> qb::Result<()> {
    let args = point()?;
    {
        // Jitted (the same bits as eagerly), so that the many evaluations reuse one plan.
        let value = qb::jit(|a: Args| loss(method, a));
        let value = |a: &Args| -> qb::Result<f64> { value.call(a)?.item() };
        let reverse: Args = qb::grad(|a: Args| loss(method, a))
            .argnums(&[0, 1, 2, 3, 4])
            .call(&args)?;
        let reverse = grads_flat(&reverse);
        let forward =
            qb::jit(|(a, t): (Args, Args)| Ok(qb::jvp(|a: Args| loss(method, a), &a, &t)?.1));
        for (k, c) in coordinates().into_iter().enumerate() {
            let fd = central(&value, &args, c)?;
            // Fixed-step solves are differentiated exactly. Adaptive ones are differentiated on
            // the mesh they chose, while differences also see the mesh move with the inputs: a
            // change of the order of the solve's own error (larger for the second-order
            // rosenbrock23), which the tolerance allows for.
            let rel = if method == Method::Rosenbrock23 {
                2e-5
            } else {
                1e-6
            };
            let tol = rel * (1.0 + fd.abs());
            assert!(
                (reverse[k] - fd).abs() < tol,
                "{method} reverse d/d{c:?}: {} vs {fd}",
                reverse[k]
            );
            // Forward mode along the same coordinate.
            let tangent = perturb(&zeros_like(&args)?, c, 1.0)?;
            let t: Tensor = forward.call(&(args.clone(), tangent))?;
            assert!(
                (t.item()? - reverse[k]).abs() < 1e-9 * (1.0 + fd.abs()),
                "{method} forward d/d{c:?}: {} vs {}",
                t.item()?,
                reverse[k]
            );
        }
    }
    Ok(())
}

#[test]
fn first_order_derivatives_euler() -> qb::Result<()> {
    check_first_order(Method::Euler)
}

#[test]
fn first_order_derivatives_heun() -> qb::Result<()> {
    check_first_order(Method::Heun)
}

#[test]
fn first_order_derivatives_rk4() -> qb::Result<()> {
    check_first_order(Method::Rk4)
}

#[test]
fn first_order_derivatives_dopri5() -> qb::Result<()> {
    check_first_order(Method::Dopri5)
}

#[test]
fn first_order_derivatives_rosenbrock23() -> qb::Result<()> {
    check_first_order(Method::Rosenbrock23)
}

fn zeros_like(a: &Args) -> qb::Result<Args> {
    Ok((
        qb::zeros_like(&a.0)?,
        qb::zeros_like(&a.1)?,
        qb::zeros_like(&a.2)?,
        qb::zeros_like(&a.3)?,
        qb::zeros_like(&a.4)?,
    ))
}

#[test]
fn second_order_derivatives_of_the_fixed_step_methods() -> qb::Result<()> {
    let args = point()?;
    for method in [Method::Euler, Method::Heun, Method::Rk4] {
        let of_p = |p: Tensor| {
            loss(
                method,
                (
                    args.0.clone(),
                    args.1.clone(),
                    args.2.clone(),
                    p,
                    args.4.clone(),
                ),
            )
        };
        // Forward-over-reverse (hessian) and reverse-over-reverse against differences of the
        // gradient.
        let h: Tensor = qb::hessian(of_p).call(&args.3)?;
        let grad_at = |p: Vec<f64>| -> qb::Result<Vec<f64>> {
            let g: Tensor = qb::grad(of_p).call(&qb::array(p)?)?;
            g.to_vec::<f64>()
        };
        let p0 = flat(&args.3);
        let eps = 1e-5;
        for j in 0..2 {
            let (mut up, mut down) = (p0.clone(), p0.clone());
            up[j] += eps;
            down[j] -= eps;
            let (gu, gd) = (grad_at(up)?, grad_at(down)?);
            for i in 0..2 {
                let fd = (gu[i] - gd[i]) / (2.0 * eps);
                let hv = flat(&h)[i * 2 + j];
                assert!(
                    (hv - fd).abs() < 1e-6 * (1.0 + fd.abs()),
                    "{method} H[{i},{j}]: {hv} vs {fd}"
                );
            }
        }
        // d^2/dt1^2 by reverse-over-reverse.
        let of_t1 = |t1: Tensor| {
            loss(
                method,
                (
                    args.0.clone(),
                    args.1.clone(),
                    t1,
                    args.3.clone(),
                    args.4.clone(),
                ),
            )
        };
        let gg: Tensor =
            qb::grad(|t1: Tensor| qb::grad(of_t1).call::<Tensor, Tensor>(&t1)).call(&args.2)?;
        let g1 = |t1: f64| -> qb::Result<f64> {
            let g: Tensor = qb::grad(of_t1).call(&qb::array(t1)?)?;
            g.item()
        };
        let fd = (g1(1.3 + eps)? - g1(1.3 - eps)?) / (2.0 * eps);
        assert!(
            (gg.item()? - fd).abs() < 1e-6 * (1.0 + fd.abs()),
            "{method} d2/dt1^2: {} vs {fd}",
            gg.item()?
        );
    }
    Ok(())
}

fn decay(y: &Tensor, _t: &Tensor, a: &[Tensor]) -> qb::Result<Tensor> {
    (y * &a[0]).neg()
}

/// On `y' = -k y` every derivative has a closed form: `y(s) = y0 exp(-k (s - t0))`.
#[test]
fn derivatives_of_exponential_decay_match_the_closed_form() -> qb::Result<()> {
    let (k, t0, t1): (f64, f64, f64) = (0.7, 0.2, 1.5);
    for method in METHODS {
        let solve = |(y0, t0, t1, k): (Tensor, Tensor, Tensor, Tensor)| {
            let call = odeint(decay, &y0, (&t0, &t1)).args(&[&k]);
            let call = if method.is_adaptive() {
                call.method(method)
                    .rtol(1e-12)
                    .atol(1e-14)
                    .max_steps(20_000)
            } else {
                call.method(method)
                    .steps(if method == Method::Euler { 20_000 } else { 400 })
            };
            call.eval()?.sum()
        };
        let args = (
            qb::array([2.0])?,
            qb::array(t0)?,
            qb::array(t1)?,
            qb::array(k)?,
        );
        let (gy0, gt0, gt1, gk): (Tensor, Tensor, Tensor, Tensor) =
            qb::grad(solve).argnums(&[0, 1, 2, 3]).call(&args)?;
        let e = (-k * (t1 - t0)).exp();
        let tol = match method {
            Method::Euler => 1e-4,
            Method::Heun => 2e-6,
            _ => 1e-7,
        };
        let check = |name: &str, got: f64, want: f64| {
            assert!(
                (got - want).abs() < tol * (1.0 + want.abs()),
                "{method} {name}: {got} vs {want}"
            );
        };
        check("d/dy0", gy0.item()?, e);
        check("d/dt0", gt0.item()?, k * 2.0 * e);
        check("d/dt1", gt1.item()?, -k * 2.0 * e);
        check("d/dk", gk.item()?, -(t1 - t0) * 2.0 * e);
    }
    Ok(())
}

/// docs/ode.md: a save time equal to `t0` reads the first step's continuous extension at
/// `theta = 0`: the value is `y0` exactly and its time derivative is the extension's slope
/// there (`f(y0, t0)` for the Hermite and dopri5 extensions).
#[test]
fn derivative_with_respect_to_a_save_time_at_t0() -> qb::Result<()> {
    let k = qb::array(0.7)?;
    let y0 = qb::array([2.0])?;
    for method in METHODS {
        let rows = |ts: Tensor| {
            let call = odeint(decay, &y0, (0.0, 1.0)).args(&[&k]).saveat(&ts);
            let call = if method.is_adaptive() {
                call.method(method).rtol(1e-10).atol(1e-12).max_steps(5000)
            } else {
                call.method(method).steps(10)
            };
            call.eval()
        };
        let ts = qb::array([0.0, 0.5])?;
        assert_eq!(rows(ts.clone())?.to_vec::<f64>()?[0], 2.0);
        let g: Tensor = qb::grad(|ts: Tensor| rows(ts)?.index(qb::s![0, 0])).call(&ts)?;
        let slope = g.to_vec::<f64>()?[0];
        let tol = if method == Method::Rosenbrock23 {
            1e-3
        } else {
            1e-12
        };
        assert!((slope + 1.4).abs() < tol, "{method}: {slope}");
        // The other save time gets the solution's slope there.
        let mid = g.to_vec::<f64>()?[1];
        assert_eq!(mid, 0.0);
    }
    Ok(())
}

/// docs/ode.md: an adaptive mesh is `t_k = t0 + sum stop_gradient(h)`, so moving `t0` moves
/// every mesh point and the last step absorbs it. For an autonomous problem the derivative
/// with respect to `t0` is then minus the one with respect to `t1`, exactly.
#[test]
fn t0_moves_the_adaptive_mesh() -> qb::Result<()> {
    let th = qb::array([1.5, 1.0, 1.0, 3.0])?;
    let lv = |y: &Tensor, _: &Tensor, a: &[Tensor]| {
        let th = &a[0];
        let (x, z) = (y.index(qb::s![0])?, y.index(qb::s![1])?);
        let xz = (&x * &z)?;
        let dx = (th.index(qb::s![0])? * &x)? - th.index(qb::s![1])? * &xz;
        let dz = (th.index(qb::s![2])? * &xz)? - th.index(qb::s![3])? * &z;
        qb::stack(&[dx?, dz?], 0)
    };
    for method in [Method::Dopri5, Method::Rosenbrock23] {
        let y0 = qb::array([1.0, 1.0])?;
        let solve = |(t0, t1): (Tensor, Tensor)| {
            odeint(lv, &y0, (&t0, &t1))
                .method(method)
                .args(&[&th])
                .max_steps(5000)
                .eval()?
                .index(qb::s![0])
        };
        let (g0, g1): (Tensor, Tensor) = qb::grad(solve)
            .argnums(&[0, 1])
            .call(&(qb::array(0.0)?, qb::array(2.0)?))?;
        assert!(
            (g0.item()? + g1.item()?).abs() < 1e-9 * g1.item()?.abs(),
            "{method}: {} vs {}",
            g0.item()?,
            g1.item()?
        );
    }
    Ok(())
}

/// The Rosenbrock Jacobian is differentiated through (docs/ode.md): on a nonlinear stiff
/// problem the gradient matches differences of the solve at tight tolerances.
#[test]
fn rosenbrock_gradients_differentiate_through_the_jacobian() -> qb::Result<()> {
    // Van der Pol with mu = 50 (stiff), over a short span.
    let vdp = |y: &Tensor, _: &Tensor, a: &[Tensor]| {
        let (x, v) = (y.index(qb::s![0])?, y.index(qb::s![1])?);
        let damp = ((1.0 - x.square()?)? * &v)? * &a[0];
        qb::stack(&[v.clone(), (damp? - &x)?], 0)
    };
    let y0 = qb::array([2.0, 0.0])?;
    let solve = |mu: Tensor| {
        odeint(vdp, &y0, (0.0, 0.5))
            .method(Method::Rosenbrock23)
            .args(&[&mu])
            .rtol(1e-8)
            .atol(1e-10)
            .max_steps(20_000)
            .eval()?
            .sum()
    };
    let g: Tensor = qb::grad(solve).call(&50.0)?;
    let eps = 1e-3;
    let value = qb::jit(solve);
    let at = |m: f64| -> qb::Result<f64> { value.call(&qb::array(m)?)?.item() };
    let fd = (at(50.0 + eps)? - at(50.0 - eps)?) / (2.0 * eps);
    assert!(
        (g.item()? - fd).abs() < 1e-4 * fd.abs(),
        "{} vs {fd}",
        g.item()?
    );
    Ok(())
}

/// The CPU compiles the solvers' loops to machine code (the adaptive solve's bounded while,
/// and in the gradient the nested block scans, branches and bounded loops of its reverse
/// pass); values and gradients have the interpreter's bits, for every method.
#[test]
fn native_loops_give_the_interpreters_bits_for_values_and_gradients() -> qb::Result<()> {
    use quabla_backend::{Executable, HostTensor};
    use quabla_cpu::{CpuBackend, CpuOptions};
    let args = point()?;
    let host = |t: &Tensor| -> qb::Result<HostTensor> {
        let shape = quabla_ir::Shape::new(t.shape().to_vec()).map_err(qb::Error::from)?;
        Ok(HostTensor::new(
            shape,
            quabla_ir::HostData::F64(t.to_vec::<f64>()?.into()),
        ))
    };
    let inputs = [&args.0, &args.1, &args.2, &args.3, &args.4]
        .iter()
        .map(|t| host(t))
        .collect::<qb::Result<Vec<_>>>()?;
    for method in METHODS {
        let step = qb::jit(move |a: Args| {
            let (value, grads): (Tensor, Args) = qb::value_and_grad(move |a: Args| loss(method, a))
                .argnums(&[0, 1, 2, 3, 4])
                .call(&a)?;
            Ok((value, grads))
        });
        let lowered = step.lower(&args)?;
        let plan = lowered.program().plan();
        let run = |native_loops: bool| -> qb::Result<(String, Vec<HostTensor>)> {
            let options = CpuOptions {
                native_loops,
                ..CpuOptions::default()
            };
            let exe = CpuBackend::with_options(options)
                .compile_plan(plan)
                .map_err(qb::Error::from)?;
            Ok((exe.report(), exe.run(&inputs).map_err(qb::Error::from)?))
        };
        let (report, native) = run(true)?;
        let (_, interpreted) = run(false)?;
        if method.is_adaptive() {
            assert!(report.contains("native code"), "{method}:\n{report}");
        }
        for (k, (n, i)) in native.iter().zip(&interpreted).enumerate() {
            let (n, i) = (n.data.to_f64_vec(), i.data.to_f64_vec());
            let same = n.iter().zip(&i).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same && n.len() == i.len(),
                "{method} output {k}: {n:?} vs {i:?}"
            );
        }
    }
    Ok(())
}
