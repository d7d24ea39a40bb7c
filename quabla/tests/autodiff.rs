//! `grad`, `value_and_grad`, `jvp`, `vjp`: the acceptance examples of `spec/acceptance.md`
//! §2–§3 that need them, the derivative conventions of numerics.md §5, nesting to third order,
//! composition with `jit`, and finite-difference checks (central differences in f64) of first
//! and second derivatives of every differentiable primitive, in forward and reverse mode.

use qb::prelude::*;
use qb::testing::{check_grads, check_grads_with, Modes, Tolerance};
use qb::{Error, Tensor};
use quabla as qb;
use std::collections::BTreeMap;

fn g1(f: impl Fn(Tensor) -> qb::Result<Tensor>, x: f64) -> f64 {
    qb::grad(f)
        .call::<Tensor, Tensor>(&qb::array(x).unwrap())
        .unwrap()
        .item()
        .unwrap()
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

#[test]
fn e18_singular_point_conventions_for_sqrt_and_pow() {
    assert_eq!(g1(|x| x.sqrt(), 0.0), 0.0);
    let dd = |x: Tensor| qb::grad(|y: Tensor| y.sqrt()).call::<Tensor, Tensor>(&x);
    assert_eq!(g1(dd, 0.0), 0.0);
    let ddd = |x: Tensor| {
        qb::grad(|y: Tensor| qb::grad(|z: Tensor| z.sqrt()).call::<Tensor, Tensor>(&y))
            .call::<Tensor, Tensor>(&x)
    };
    assert_eq!(g1(ddd, 0.0), 0.0);
    assert_eq!(g1(|x| x.pow(0.5), 0.0), 0.0);
    let d2 = |x: Tensor| qb::grad(|y: Tensor| y.pow(2.0)).call::<Tensor, Tensor>(&x);
    assert_eq!(g1(d2, 0.0), 2.0);
    let dy = qb::grad(|y: Tensor| qb::power(qb::array(-2.0)?, &y))
        .call::<Tensor, Tensor>(&2.0)
        .unwrap();
    assert_eq!(dy.item().unwrap(), 0.0);
    assert_eq!(dy.dtype(), qb::F64);
}

#[test]
fn e19_tie_and_kink_conventions() {
    assert_eq!(g1(|x| x.abs(), 0.0), -1.0);
    assert_eq!(g1(|x| x.relu(), 0.0), 0.0);
    let (da, db): (Tensor, Tensor) = qb::grad(|(a, b): (Tensor, Tensor)| qb::maximum(&a, &b))
        .argnums(&[0, 1])
        .call(&(1.0, 1.0))
        .unwrap();
    assert_eq!((da.item().unwrap(), db.item().unwrap()), (0.0, 1.0));
}

#[test]
fn e20_sigmoid_at_zero() {
    assert_eq!(g1(|x| x.sigmoid(), 0.0), 0.25);
}

#[test]
fn e21_max_reduction_ties_go_to_the_last_position() {
    let g = qb::grad(|x: Tensor| x.max())
        .call::<Tensor, Tensor>(&qb::array([1.0, 3.0, 3.0]).unwrap())
        .unwrap();
    assert_eq!(vals(&g), vec![0.0, 0.0, 1.0]);
    let g = qb::grad(|x: Tensor| x.min())
        .call::<Tensor, Tensor>(&qb::array([2.0, 1.0, 1.0, 5.0]).unwrap())
        .unwrap();
    assert_eq!(vals(&g), vec![0.0, 0.0, 1.0, 0.0]);
    // Along an axis, each row independently.
    let x = qb::array([[1.0, 3.0, 3.0], [5.0, 5.0, 2.0]]).unwrap();
    let g = qb::grad(|x: Tensor| x.max_axes(1).sum())
        .call::<Tensor, Tensor>(&x)
        .unwrap();
    assert_eq!(vals(&g), vec![0.0, 0.0, 1.0, 0.0, 1.0, 0.0]);
}

#[test]
fn e23_atan2_at_the_origin() {
    let (a, b): (Tensor, Tensor) = qb::grad(|(x, y): (Tensor, Tensor)| qb::atan2(&x, &y))
        .argnums(&[0, 1])
        .call(&(0.0, 0.0))
        .unwrap();
    assert_eq!((a.item().unwrap(), b.item().unwrap()), (0.0, 0.0));
}

#[test]
fn e26_fmod_partials() {
    let (a, b): (Tensor, Tensor) = qb::grad(|(x, y): (Tensor, Tensor)| qb::fmod(&x, &y))
        .argnums(&[0, 1])
        .call(&(7.0, 3.0))
        .unwrap();
    assert_eq!((a.item().unwrap(), b.item().unwrap()), (1.0, -2.0));
}

#[test]
fn e28_gradient_eager_and_jitted() -> qb::Result<()> {
    let x = qb::array([0.0, 0.5, 1.0])?;
    let f = |x: Tensor| x.sin().powi(2).sum();
    let g: Tensor = qb::grad(f).call(&x)?;
    assert_eq!(
        g.to_string(),
        "Tensor([0.        , 0.84147098, 0.90929743], dtype=float64)"
    );
    let jitted = qb::jit(|x: Tensor| qb::grad(f).call::<Tensor, Tensor>(&x)).call(&x)?;
    let bits = |t: &Tensor| vals(t).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&g), bits(&jitted));
    for (i, v) in vals(&g).iter().enumerate() {
        let xi = [0.0, 0.5, 1.0][i];
        assert!((v - (2.0f64 * xi).sin()).abs() < 1e-15);
    }
    Ok(())
}

#[test]
fn e29_value_and_grad_over_a_dict() -> qb::Result<()> {
    let mut params = BTreeMap::new();
    params.insert("w".to_string(), qb::array([[0.5], [-0.25]])?);
    params.insert("b".to_string(), qb::array([0.1])?);
    let x = qb::array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])?;
    let y = qb::array([[1.0], [2.0], [3.0]])?;
    let loss = |(p, x, y): (BTreeMap<String, Tensor>, Tensor, Tensor)| {
        (x.matmul(&p["w"]).add(&p["b"]).sub(&y)).powi(2).mean()
    };
    let args = (params, x, y);
    let (value, grads): (Tensor, BTreeMap<String, Tensor>) =
        qb::value_and_grad(loss).call(&args)?;
    assert_eq!(value.to_string(), "Tensor(2.12666667, dtype=float64)");
    assert_eq!(grads["b"].shape(), &[1]);
    assert_eq!(grads["w"].shape(), &[2, 1]);
    let (gp, gx): (BTreeMap<String, Tensor>, Tensor) =
        qb::grad(loss).argnums(&[0, 1]).call(&args)?;
    assert_eq!(gx.shape(), &[3, 2]);
    // Against central differences on w[0].
    let eps = 1e-6;
    let shifted = |d: f64| {
        let mut p = args.0.clone();
        p.insert("w".into(), qb::array([[0.5 + d], [-0.25]]).unwrap());
        loss((p, args.1.clone(), args.2.clone()))
            .unwrap()
            .item()
            .unwrap()
    };
    let fd = (shifted(eps) - shifted(-eps)) / (2.0 * eps);
    assert!(
        (vals(&gp["w"])[0] - fd).abs() < 1e-7,
        "{} vs {fd}",
        vals(&gp["w"])[0]
    );
    Ok(())
}

#[test]
fn e30_jvp_and_vjp() -> qb::Result<()> {
    let f = |x: Tensor| x.sin().mul(&x);
    let (out, tan) = qb::jvp(f, &qb::array([0.0, 1.0])?, &qb::array([1.0, 1.0])?)?;
    assert_eq!(
        out.to_string(),
        "Tensor([0.        , 0.84147098], dtype=float64)"
    );
    assert_eq!(
        tan.to_string(),
        "Tensor([0.        , 1.38177329], dtype=float64)"
    );
    let (out, pullback) = qb::vjp(f, &qb::array([0.0, 1.0])?)?;
    assert_eq!(vals(&out)[1], 1.0f64.sin());
    let ct: Tensor = pullback.call(&qb::array([1.0, 1.0])?)?;
    assert_eq!(
        ct.to_string(),
        "Tensor([0.        , 1.38177329], dtype=float64)"
    );
    // With a tuple of primals, one cotangent per primal.
    let (_, pb) = qb::vjp(
        |(x, w): (Tensor, Tensor)| x.mul(&w),
        &(qb::array([1.0, 2.0])?, qb::array(3.0)?),
    )?;
    let (cx, cw): (Tensor, Tensor) = pb.call(&qb::ones([2])?)?;
    assert_eq!(vals(&cx), vec![3.0, 3.0]);
    assert_eq!(
        cw.item()?,
        3.0,
        "the broadcast operand's cotangent is summed"
    );
    Ok(())
}

#[test]
fn errors_of_differentiation() {
    let err = qb::grad(|x: Tensor| x.sin())
        .call::<Tensor, Tensor>(&qb::ones([2]).unwrap())
        .unwrap_err();
    assert!(matches!(err, Error::NonScalarOutput { .. }));
    assert!(err
        .to_string()
        .starts_with("grad requires a scalar output, got shape [2]"));
    let err = qb::value_and_grad(|x: Tensor| x.greater(0.0)?.index(qb::s![0]))
        .call::<Tensor, (Tensor, Tensor)>(&qb::ones([2]).unwrap())
        .unwrap_err();
    assert!(
        err.to_string().contains("requires a floating output"),
        "{err}"
    );
    let err = qb::jvp(
        |x: Tensor| x.sin(),
        &qb::ones([2]).unwrap(),
        &qb::ones([3]).unwrap(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("does not match its primal"));
    let (_, pb) = qb::vjp(|x: Tensor| x.sin(), &qb::ones([2]).unwrap()).unwrap();
    assert!(pb.call::<Tensor>(&qb::ones([3]).unwrap()).is_err());
}

#[test]
fn bool_leaves_get_no_gradient_and_has_aux_passes_through() -> qb::Result<()> {
    let f = |(x, m): (Tensor, Tensor)| {
        let y = qb::where_(&m, x.exp(), 0.0)?.sum()?;
        Ok((y.clone(), vec![y.clone(), x.clone()]))
    };
    let args = (qb::array([0.0, 1.0])?, qb::array([true, false])?);
    let ((gx,), aux): ((Tensor,), Vec<Tensor>) = qb::grad(f).argnums(&[0]).has_aux().call(&args)?;
    assert_eq!(
        vals(&gx),
        vec![1.0, 0.0],
        "where gives the unselected branch exactly 0"
    );
    assert_eq!(aux.len(), 2);
    let (g_all, _): ((Tensor, Option<Tensor>), Vec<Tensor>) =
        qb::grad(f).argnums(&[0, 1]).has_aux().call(&args)?;
    assert!(g_all.1.is_none(), "a bool argument's gradient is None");
    Ok(())
}

#[test]
fn gradients_keep_dtypes_and_nest_with_closures() -> qb::Result<()> {
    let x32 = qb::F32.array([0.5, 1.5])?;
    let g: Tensor = qb::grad(|x: Tensor| x.powi(3).sum()).call(&x32)?;
    assert_eq!(g.dtype(), qb::F32);
    assert_eq!(g.to_vec::<f32>()?, vec![0.75, 6.75]);
    // d/dw of d/dx (w x^2) = 2x: the inner grad closes over the outer tracer w.
    let outer = |w: Tensor| {
        let inner = |x: Tensor| x.powi(2).mul(&w).sum();
        qb::grad(inner).call::<Tensor, Tensor>(&qb::array(3.0)?)
    };
    let d: Tensor = qb::grad(outer).call(&qb::array(2.0)?)?;
    assert_eq!(d.item()?, 6.0);
    Ok(())
}

#[test]
fn unused_inputs_get_zero_gradients() -> qb::Result<()> {
    let (a, b): (Tensor, Tensor) = qb::grad(|(x, _y): (Tensor, Tensor)| x.sum())
        .argnums(&[0, 1])
        .call(&(qb::ones([2])?, qb::ones([3])?))?;
    assert_eq!(vals(&a), vec![1.0, 1.0]);
    assert_eq!(vals(&b), vec![0.0, 0.0, 0.0]);
    Ok(())
}

#[test]
fn hessian_vector_products_as_jvp_of_grad() -> qb::Result<()> {
    // f = sum(x^3): H = diag(6x); Hv = 6 x v.
    let grad_f = |x: Tensor| qb::grad(|y: Tensor| y.powi(3).sum()).call::<Tensor, Tensor>(&x);
    let (_, hv) = qb::jvp(grad_f, &qb::array([1.0, 2.0])?, &qb::array([1.0, -1.0])?)?;
    assert_eq!(vals(&hv), vec![6.0, -12.0]);
    Ok(())
}

type Unary = fn(&Tensor) -> qb::Result<Tensor>;

/// Every differentiable unary primitive and composite at points inside its domain.
fn unary_table() -> Vec<(&'static str, Unary, Vec<f64>)> {
    let general = vec![-1.3, -0.4, 0.3, 0.9, 2.2];
    let unit = vec![-0.7, -0.2, 0.3, 0.6];
    let positive = vec![0.3, 0.8, 1.7, 3.1];
    vec![
        ("sin", Tensor::sin as Unary, general.clone()),
        ("cos", Tensor::cos, general.clone()),
        ("tan", Tensor::tan, unit.clone()),
        ("tanh", Tensor::tanh, general.clone()),
        ("exp", Tensor::exp, general.clone()),
        ("expm1", Tensor::expm1, general.clone()),
        ("log", Tensor::log, positive.clone()),
        ("log1p", Tensor::log1p, positive.clone()),
        ("log2", Tensor::log2, positive.clone()),
        ("log10", Tensor::log10, positive.clone()),
        ("sqrt", Tensor::sqrt, positive.clone()),
        ("cbrt", Tensor::cbrt, positive.clone()),
        ("arcsin", Tensor::arcsin, unit.clone()),
        ("arccos", Tensor::arccos, unit.clone()),
        ("arctan", Tensor::arctan, general.clone()),
        ("sinh", Tensor::sinh, general.clone()),
        ("cosh", Tensor::cosh, general.clone()),
        ("arcsinh", Tensor::arcsinh, vec![-3.0, -0.5, 0.4, 1.5, 4.0]),
        ("arccosh", Tensor::arccosh, vec![1.3, 2.0, 3.5]),
        ("arctanh", Tensor::arctanh, unit.clone()),
        ("erf", Tensor::erf, general.clone()),
        ("erfc", Tensor::erfc, general.clone()),
        ("abs", Tensor::abs, general.clone()),
        ("relu", Tensor::relu, general.clone()),
        ("sigmoid", Tensor::sigmoid, general.clone()),
        ("square", Tensor::square, general.clone()),
        ("reciprocal", Tensor::reciprocal, positive.clone()),
        ("powi3", |x| x.powi(3), general.clone()),
        ("powi-2", |x| x.powi(-2), positive.clone()),
        ("pow2.5", |x| x.pow(2.5), positive.clone()),
        ("neg", |x| x.neg(), general.clone()),
    ]
}

fn scalar_fn(f: Unary) -> impl Fn(Tensor) -> qb::Result<Tensor> + Copy {
    move |x: Tensor| f(&x)?.sum()
}

/// The float64 tensor arguments of `check_grads` for scalars.
fn scalars(xs: &[f64]) -> Vec<Tensor> {
    xs.iter().map(|&x| qb::array(x).unwrap()).collect()
}

/// Deeper derivative graphs round a little more: the tolerance grows tenfold per order.
fn widening(rtol: f64) -> Tolerance {
    Tolerance {
        rtol,
        atol: rtol,
        eps: 1e-5,
        growth: 10.0,
    }
}

#[test]
fn first_and_second_derivatives_match_finite_differences() {
    // Every composition of forward and reverse mode to second order.
    for (i, (name, f, points)) in unary_table().into_iter().enumerate() {
        let f0 = scalar_fn(f);
        for &x in &points {
            check_grads_with(
                |v: Vec<Tensor>| Ok(vec![f0(v[0].clone())?]),
                &scalars(&[x]),
                2,
                Modes::BOTH,
                widening(1e-6),
                i as u64,
            )
            .unwrap_or_else(|e| panic!("{name} at {x}: {e}"));
        }
    }
}

type Binary = fn(&Tensor, &Tensor) -> qb::Result<Tensor>;

#[test]
fn binary_partials_match_finite_differences() {
    let table: Vec<(&str, Binary)> = vec![
        ("add", |a, b| a + b),
        ("sub", |a, b| a - b),
        ("mul", |a, b| a * b),
        ("div", |a, b| a / b),
        ("pow", |a, b| a.pow(b)),
        ("atan2", |a, b| a.atan2(b)),
        ("maximum", |a, b| a.maximum(b)),
        ("minimum", |a, b| a.minimum(b)),
        ("fmod", |a, b| a.fmod(b)),
    ];
    let points = [(1.3, 0.7), (2.1, -1.6), (0.4, 2.5)];
    for (name, f) in table {
        for &(a, b) in &points {
            if name == "pow" && a <= 0.0 {
                continue;
            }
            check_grads(
                |v: Vec<Tensor>| Ok(vec![f(&v[0], &v[1])?]),
                &scalars(&[a, b]),
                1,
                Modes::BOTH,
            )
            .unwrap_or_else(|e| panic!("{name} at ({a}, {b}): {e}"));
        }
    }
}

#[test]
fn structural_ops_match_finite_differences() {
    // A function mixing reductions, layout ops and matmul, checked along a random direction.
    let w = qb::array([[0.3, -0.2, 0.5], [0.1, 0.4, -0.6]]).unwrap();
    let f = move |x: Tensor| -> qb::Result<Tensor> {
        let m = x.reshape([2, 3])?;
        let t = m.t()?.matmul(&w)?; // [3, 3]
        let c = qb::concat(&[&t, &t.index(qb::s![..;-1, ..])?], 0)?; // slices, gather, concat
        let g =
            c.gather([0, 5, 2], 0)?
                .scatter_add([1], x.index(qb::s![..3])?.reshape([1, 3])?, 0)?;
        let s = g.cumsum_like()?;
        (s.tanh()?.mean_axes(1)?.max()? + c.prod_axes(0)?.sum()?)?
            + x.broadcast_to([2, 6])?.sum_axes(0)?.sin()?.sum()?
    };
    let x0 = [0.2, -0.5, 0.9, 1.1, -0.3, 0.6];
    check_grads(
        |v: Vec<Tensor>| Ok(vec![f(v[0].clone())?]),
        &[qb::array(x0).unwrap()],
        1,
        Modes::BOTH,
    )
    .unwrap();
}

trait CumsumLike {
    fn cumsum_like(&self) -> qb::Result<Tensor>;
}

impl CumsumLike for Tensor {
    /// A running sum along the last axis, built from slices (the public cumsum arrives with
    /// the full array library).
    fn cumsum_like(&self) -> qb::Result<Tensor> {
        let n = self.shape()[1];
        let mut parts = Vec::new();
        for k in 1..=n {
            parts.push(self.index(qb::s![.., ..k as isize])?.sum_keepdims([1])?);
        }
        qb::concat(&parts, 1)
    }
}

/// E40's loss with the per-point second derivative taken in a Rust loop (the `vmap` form
/// arrives with batching): `u_xx` closes over the outer tracer `w`.
fn pinn_loss((w, x): (Tensor, Tensor)) -> qb::Result<Tensor> {
    let n = x.shape()[0];
    let mut u_xx = Vec::with_capacity(n);
    for i in 0..n {
        let xi = x.index(qb::s![i as isize])?;
        let u = |t: Tensor| t.mul(&w).sin();
        let u_x = |t: Tensor| qb::grad(u).call::<Tensor, Tensor>(&t);
        u_xx.push(qb::grad(u_x).call::<Tensor, Tensor>(&xi)?);
    }
    let u_xx = qb::stack(&u_xx, 0)?;
    let pi = std::f64::consts::PI;
    let residual = (u_xx + qb::sin(x.mul(pi))?.mul(pi * pi))?;
    residual.powi(2).mean()
}

#[test]
fn e40_pinn_residual_with_nested_derivatives() -> qb::Result<()> {
    let xs = qb::linspace(0.05, 0.95, 8)?;
    let (value, g): (Tensor, (Tensor,)) = qb::value_and_grad(pinn_loss)
        .argnums(&[0])
        .call(&(2.5, xs))?;
    let close = |got: f64, want: f64| (got - want).abs() <= 1e-8 * want.abs();
    assert!(close(value.item()?, 7.78437462), "{}", value.item()?);
    assert!(close(g.0.item()?, -19.9407213), "{}", g.0.item()?);
    Ok(())
}

#[test]
fn e41_the_pinn_parameter_converges_to_pi() -> qb::Result<()> {
    let xs = qb::linspace(0.05, 0.95, 8)?;
    let step = qb::jit(|(w, x): (Tensor, Tensor)| {
        qb::value_and_grad(pinn_loss)
            .argnum(0)
            .call::<Tensor, (Tensor, Tensor)>(&(w, x))
    });
    let mut w = qb::array(2.5)?;
    let mut value = qb::array(f64::NAN)?;
    for _ in 0..200 {
        let (v, g) = step.call(&(w.clone(), xs.clone()))?;
        w = (&w - g.mul(0.01)?)?;
        value = v;
    }
    assert!(
        (w.item()? - std::f64::consts::PI).abs() <= 1e-9,
        "{}",
        w.item()?
    );
    assert!(value.item()? <= 1e-20, "{}", value.item()?);
    Ok(())
}

#[test]
fn e37_tracer_in_control_flow_under_grad() {
    let err = qb::grad(|x: Tensor| {
        if x.greater(0.0)?.item_bool()? {
            Ok(x)
        } else {
            -&x
        }
    })
    .call::<Tensor, Tensor>(&qb::array(1.0).unwrap())
    .unwrap_err();
    assert!(matches!(
        err,
        Error::Tracer {
            kind: qb::TracerErrorKind::ControlFlow,
            ..
        }
    ));
    assert!(err
        .to_string()
        .starts_with("TraceTensor cannot drive Python control flow:"));
}

#[test]
fn grad_caches_traces_per_signature() -> qb::Result<()> {
    let traces = std::cell::Cell::new(0);
    let g = qb::grad(|x: Tensor| {
        traces.set(traces.get() + 1);
        x.powi(2).sum()
    });
    let a: Tensor = g.call(&qb::array([1.0, 2.0])?)?;
    let b: Tensor = g.call(&qb::array([3.0, 4.0])?)?;
    let _: Tensor = g.call(&qb::array([1.0])?)?;
    assert_eq!(traces.get(), 2);
    assert_eq!((vals(&a), vals(&b)), (vec![2.0, 4.0], vec![6.0, 8.0]));
    // An f64 in a differentiated position is an input: new values do not retrace.
    let h = qb::grad(|x: Tensor| {
        traces.set(traces.get() + 1);
        x.powi(3)
    });
    let d1: Tensor = h.call(&1.0)?;
    let d2: Tensor = h.call(&2.0)?;
    assert_eq!((d1.item()?, d2.item()?), (3.0, 12.0));
    assert_eq!(traces.get(), 3);
    Ok(())
}

#[test]
fn third_derivatives_match_finite_differences() {
    // Every composition of forward and reverse mode to third order, at one point per function.
    for (i, (name, f, points)) in unary_table().into_iter().enumerate() {
        let f0 = scalar_fn(f);
        let x = points[points.len() / 2];
        check_grads_with(
            |v: Vec<Tensor>| Ok(vec![f0(v[0].clone())?]),
            &scalars(&[x]),
            3,
            Modes::BOTH,
            widening(1e-6),
            100 + i as u64,
        )
        .unwrap_or_else(|e| panic!("{name} at {x}: {e}"));
    }
}
