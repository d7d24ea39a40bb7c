//! Custom derivative rules and checkpointing (transforms.md §14): `custom_vjp`, `custom_jvp`,
//! `checkpoint`, under `grad`, `jvp`, `jit` and `vmap`, to second order; `nondiff_argnums`,
//! cotangents returned as `None`, the errors of misuse, and the acceptance examples E54 to E57
//! and E59.

use qb::prelude::*;
use qb::{Error, Tensor, TracerErrorKind};
use quabla as qb;

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x == y || (x - y).abs() <= tol * y.abs().max(1.0))
}

type Vjp<'a> = qb::CustomVjpFn<'a, Tensor, Tensor, Tensor, Tensor>;

/// E54's `log1pexp` with a stable reverse rule.
fn log1pexp_vjp<'a>() -> Vjp<'a> {
    qb::custom_vjp(|x: Tensor| x.exp().log1p())
        .name("log1pexp")
        .defvjp(
            |x: Tensor| Ok((x.exp().log1p()?, x)),
            |(x, g): (Tensor, Tensor)| &g * x.sigmoid()?,
        )
}

/// `log1pexp` with a stable forward rule.
fn log1pexp_jvp<'a>() -> qb::CustomJvpFn<'a, Tensor, Tensor> {
    qb::custom_jvp(|x: Tensor| x.exp().log1p())
        .name("log1pexp")
        .defjvp(|(x, t): (Tensor, Tensor)| Ok((x.exp().log1p()?, (&t * x.sigmoid()?)?)))
}

/// Identity forward, cotangent clipped to [-1, 1] backward.
fn clip_gradient<'a>() -> qb::CustomVjpFn<'a, Tensor, Tensor, (), Tensor> {
    qb::custom_vjp(|x: Tensor| Ok(x))
        .name("clip_gradient")
        .defvjp(
            |x: Tensor| Ok((x, ())),
            |((), g): ((), Tensor)| g.clip(-1.0, 1.0),
        )
}

#[test]
fn custom_vjp_clips_the_gradient() -> qb::Result<()> {
    let clip = clip_gradient();
    let x = qb::array([1.0, -2.0, 3.0])?;
    let f = |x: Tensor| clip.call(&x)?.mul(5.0).sum();
    // Outside any transform the wrapper is the plain function.
    assert_eq!(vals(&clip.call(&x)?), vals(&x));
    let (v, g): (Tensor, Tensor) = qb::value_and_grad(f).call(&x)?;
    assert_eq!(v.item()?, 10.0);
    assert_eq!(vals(&g), [1.0, 1.0, 1.0]);
    // Without the rule the gradient is 5.
    let plain: Tensor = qb::grad(|x: Tensor| x.mul(5.0).sum()).call(&x)?;
    assert_eq!(vals(&plain), [5.0, 5.0, 5.0]);
    // The pullback of vjp uses the rule too.
    let (_, pullback) = qb::vjp(|x: Tensor| clip.call(&x), &x)?;
    let ct: Tensor = pullback.call(&qb::array([0.5, -4.0, 2.0])?)?;
    assert_eq!(vals(&ct), [0.5, -1.0, 1.0]);
    Ok(())
}

#[test]
fn e54_custom_vjp_fixes_an_overflow() -> qb::Result<()> {
    let log1pexp = log1pexp_vjp();
    let x = qb::array([0.0, 100.0, 1000.0])?;
    let g: Tensor = qb::grad(|x: Tensor| log1pexp.call(&x)?.sum()).call(&x)?;
    assert_eq!(vals(&g), [0.5, 1.0, 1.0]);
    let naive: Tensor = qb::grad(|x: Tensor| x.exp().add(1.0).log()?.sum()).call(&x)?;
    let naive = vals(&naive);
    assert_eq!(naive[..2], [0.5, 1.0]);
    assert!(naive[2].is_nan());
    let batched: Tensor = qb::jit(|x: Tensor| {
        qb::vmap(|x: Tensor| qb::grad(|x: Tensor| log1pexp.call(&x)).call::<Tensor, Tensor>(&x))
            .call::<Tensor>(&x)
    })
    .call(&x)?;
    assert_eq!(vals(&batched), [0.5, 1.0, 1.0]);
    Ok(())
}

#[test]
fn e57_forward_mode_of_a_custom_vjp_is_rejected() -> qb::Result<()> {
    let log1pexp = log1pexp_vjp();
    let x = qb::array([0.0, 100.0, 1000.0])?;
    let err = qb::jvp(|x: Tensor| log1pexp.call(&x), &x, &qb::ones([3])?).unwrap_err();
    assert!(
        matches!(err, Error::Unsupported { ref op, .. } if op == "custom_vjp"),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with(
            "forward-mode differentiation (jvp) of custom_vjp(log1pexp) is not supported"
        ),
        "{err}"
    );
    Ok(())
}

#[test]
fn custom_jvp_log1pexp_matches_finite_differences_and_stays_finite() -> qb::Result<()> {
    let log1pexp = log1pexp_jvp();
    let f = |x: Tensor| log1pexp.call(&x)?.sum();
    let x = qb::array([-1.5, 0.3, 2.0])?;
    let g: Tensor = qb::grad(f).call(&x)?;
    let eps = 1e-6;
    let fd: Vec<f64> = (0..3)
        .map(|i| {
            let mut e = vec![0.0; 3];
            e[i] = eps;
            let e = qb::array(e).unwrap();
            let up = f((&x + &e).unwrap()).unwrap().item().unwrap();
            let down = f((&x - &e).unwrap()).unwrap().item().unwrap();
            (up - down) / (2.0 * eps)
        })
        .collect();
    assert!(close(&vals(&g), &fd, 1e-7), "{:?} vs {fd:?}", vals(&g));
    // Forward mode uses the rule.
    let (y, t) = qb::jvp(|x: Tensor| log1pexp.call(&x), &x, &qb::ones([3])?)?;
    assert_eq!(vals(&y), vals(&x.exp().log1p()?));
    assert!(close(&vals(&t), &vals(&x.sigmoid()?), 1e-15));
    // Large inputs: finite derivatives in both modes.
    let big = qb::array([100.0, 1000.0])?;
    let g: Tensor = qb::grad(f).call(&big)?;
    assert_eq!(vals(&g), [1.0, 1.0]);
    let (_, t) = qb::jvp(|x: Tensor| log1pexp.call(&x), &big, &qb::ones([2])?)?;
    assert_eq!(vals(&t), [1.0, 1.0]);
    Ok(())
}

#[test]
fn e56_custom_jvp_forward_and_reverse() -> qb::Result<()> {
    let norm = |x: &Tensor| x.powi(2).sum()?.sqrt();
    let safe_norm = qb::custom_jvp(|x: Tensor| norm(&x))
        .name("safe_norm")
        .defjvp(|(x, t): (Tensor, Tensor)| {
            let n = norm(&x)?;
            let pos = n.greater(0.0)?;
            let denom = qb::where_(&pos, &n, 1.0)?;
            let tangent = qb::where_(&pos, x.mul(&t).sum()?.div(&denom)?, 0.0)?;
            Ok((n, tangent))
        });
    let g: Tensor = qb::grad(|x: Tensor| safe_norm.call(&x)).call(&qb::zeros([3])?)?;
    assert_eq!(vals(&g), [0.0, 0.0, 0.0]);
    let g: Tensor = qb::grad(|x: Tensor| safe_norm.call(&x)).call(&qb::array([3.0, 4.0])?)?;
    assert!(close(&vals(&g), &[0.6, 0.8], 1e-15), "{:?}", vals(&g));
    let (y, t) = qb::jvp(
        |x: Tensor| safe_norm.call(&x),
        &qb::array([3.0, 4.0])?,
        &qb::array([1.0, 0.0])?,
    )?;
    assert_eq!(y.item()?, 5.0);
    assert!((t.item()? - 0.6).abs() < 1e-15);
    Ok(())
}

#[test]
fn custom_rules_under_jit_and_vmap() -> qb::Result<()> {
    let vjp_rule = log1pexp_vjp();
    let jvp_rule = log1pexp_jvp();
    let x = qb::array([-2.0, 0.5, 700.0])?;
    let expected: Vec<f64> = vals(&x.sigmoid()?);
    // jit of the function itself and of its gradient.
    let y: Tensor = qb::jit(|x: Tensor| vjp_rule.call(&x)).call(&x)?;
    assert_eq!(vals(&y), vals(&x.exp().log1p()?));
    for g in [
        qb::jit(|x: Tensor| {
            qb::grad(|x: Tensor| vjp_rule.call(&x)?.sum()).call::<Tensor, Tensor>(&x)
        })
        .call(&x)?,
        qb::jit(|x: Tensor| {
            qb::grad(|x: Tensor| jvp_rule.call(&x)?.sum()).call::<Tensor, Tensor>(&x)
        })
        .call(&x)?,
    ] {
        assert!(close(&vals(&g), &expected, 1e-15), "{:?}", vals(&g));
    }
    // vmap over a batch of rows, in both orders with grad.
    let rows = qb::array([[0.1, -0.2], [3.0, 1000.0]])?;
    let per_row: Tensor = qb::vmap(|r: Tensor| {
        qb::grad(|r: Tensor| jvp_rule.call(&r)?.sum()).call::<Tensor, Tensor>(&r)
    })
    .call(&rows)?;
    assert!(close(&vals(&per_row), &vals(&rows.sigmoid()?), 1e-15));
    let per_row: Tensor = qb::vmap(|r: Tensor| {
        qb::grad(|r: Tensor| vjp_rule.call(&r)?.sum()).call::<Tensor, Tensor>(&r)
    })
    .call(&rows)?;
    assert!(close(&vals(&per_row), &vals(&rows.sigmoid()?), 1e-15));
    let values: Tensor = qb::vmap(|r: Tensor| vjp_rule.call(&r)).call(&rows)?;
    assert!(close(&vals(&values), &vals(&rows.exp().log1p()?), 1e-15));
    // Forward mode through a batched custom_jvp.
    let (_, t) = qb::jvp(
        |r: Tensor| qb::vmap(|r: Tensor| jvp_rule.call(&r)).call::<Tensor>(&r),
        &rows,
        &qb::ones([2, 2])?,
    )?;
    assert!(close(&vals(&t), &vals(&rows.sigmoid()?), 1e-15));
    Ok(())
}

#[test]
fn second_order_differentiates_the_rules() -> qb::Result<()> {
    let vjp_rule = log1pexp_vjp();
    let jvp_rule = log1pexp_jvp();
    let x = qb::array(0.7)?;
    let s = 1.0 / (1.0 + (-0.7f64).exp());
    let expected = s * (1.0 - s);
    let inner_vjp = |x: Tensor| qb::grad(|x: Tensor| vjp_rule.call(&x)).call::<Tensor, Tensor>(&x);
    let h: Tensor = qb::grad(inner_vjp).call(&x)?;
    assert!((h.item()? - expected).abs() < 1e-14, "{}", h.item()?);
    let inner_jvp = |x: Tensor| qb::grad(|x: Tensor| jvp_rule.call(&x)).call::<Tensor, Tensor>(&x);
    let h: Tensor = qb::grad(inner_jvp).call(&x)?;
    assert!((h.item()? - expected).abs() < 1e-14, "{}", h.item()?);
    // Forward over forward through the custom_jvp rule.
    let (_, t) = qb::jvp(
        |x: Tensor| Ok(qb::jvp(|x: Tensor| jvp_rule.call(&x), &x, &qb::array(1.0)?)?.1),
        &x,
        &qb::array(1.0)?,
    )?;
    assert!((t.item()? - expected).abs() < 1e-14);
    Ok(())
}

#[test]
fn jacobian_and_hessian_pick_reverse_mode_for_a_custom_vjp() -> qb::Result<()> {
    let log1pexp = log1pexp_vjp();
    let x = qb::array([-1.0, 0.5])?;
    let s = vals(&x.sigmoid()?);
    // Forward mode would be chosen for a [2] -> [2] Jacobian.
    let j: Tensor = qb::jacobian(|x: Tensor| log1pexp.call(&x)).call(&x)?;
    assert!(
        close(&vals(&j), &[s[0], 0.0, 0.0, s[1]], 1e-15),
        "{:?}",
        vals(&j)
    );
    let h: Tensor = qb::hessian(|x: Tensor| log1pexp.call(&x)?.sum()).call(&x)?;
    let d: Vec<f64> = s.iter().map(|s| s * (1.0 - s)).collect();
    assert!(
        close(&vals(&h), &[d[0], 0.0, 0.0, d[1]], 1e-14),
        "{:?}",
        vals(&h)
    );
    Ok(())
}

fn layer((x, w, b): (Tensor, Tensor, Tensor)) -> qb::Result<Tensor> {
    x.matmul(&w).add(&b).tanh()
}

fn net(x: Tensor, w: &Tensor, b: &Tensor, remat: bool) -> qb::Result<Tensor> {
    let layer_remat = qb::checkpoint(layer).name("layer");
    let mut x = x;
    for _ in 0..4 {
        let args = (x, w.clone(), b.clone());
        x = if remat {
            layer_remat.call(&args)?
        } else {
            layer(args)?
        };
    }
    x.sum()
}

#[test]
fn e59_checkpoint_leaves_values_and_gradients_unchanged() -> qb::Result<()> {
    let x = qb::ones([3, 2])?;
    let w = qb::array([[0.5, -0.2], [0.1, 0.3]])?;
    let b = qb::array([0.1, 0.0])?;
    let value = |remat: bool| net(x.clone(), &w, &b, remat);
    let grad = |remat: bool| -> qb::Result<Tensor> {
        qb::grad(|(w, b): (Tensor, Tensor)| net(x.clone(), &w, &b, remat))
            .call(&(w.clone(), b.clone()))
    };
    assert!((value(true)?.item()? - 0.41373342).abs() < 1e-8);
    let g = grad(true)?;
    let expected = [1.15459362, 1.67727992, -0.36899581, -0.2378833];
    assert!(close(&vals(&g), &expected, 1e-7), "{:?}", vals(&g));
    // Bit-identical to the plain function.
    assert_eq!(value(true)?.item()?, value(false)?.item()?);
    assert_eq!(vals(&grad(true)?), vals(&grad(false)?));
    // Under jit, and the value inside a trace.
    let v: Tensor = qb::jit(|w: Tensor| net(x.clone(), &w, &b, true)).call(&w)?;
    assert_eq!(v.item()?, value(false)?.item()?);
    // Second order through the checkpoint equals second order of the plain function.
    let hvp = |remat: bool| -> qb::Result<Tensor> {
        let inner = |w: Tensor| -> qb::Result<Tensor> {
            let g: Tensor = qb::grad(|w: Tensor| net(qb::ones([3, 2])?, &w, &b, remat)).call(&w)?;
            g.sum()
        };
        qb::grad(inner).call(&w)
    };
    assert!(close(&vals(&hvp(true)?), &vals(&hvp(false)?), 1e-12));
    // Forward mode through the checkpoint.
    let (_, t1) = qb::jvp(
        |w: Tensor| net(x.clone(), &w, &b, true),
        &w,
        &qb::ones([2, 2])?,
    )?;
    let (_, t2) = qb::jvp(
        |w: Tensor| net(x.clone(), &w, &b, false),
        &w,
        &qb::ones([2, 2])?,
    )?;
    assert!((t1.item()? - t2.item()?).abs() < 1e-12);
    Ok(())
}

#[test]
fn checkpoint_may_close_over_outer_tracers() -> qb::Result<()> {
    let x = qb::array([0.3, -0.4])?;
    let w = qb::array(1.7)?;
    let x = &x;
    let f = |remat: bool| {
        move |w: Tensor| -> qb::Result<Tensor> {
            let body = |x: Tensor| x.mul(&w).sin();
            if remat {
                qb::checkpoint(body).call(&x.clone())?.sum()
            } else {
                body(x.clone())?.sum()
            }
        }
    };
    let g1: Tensor = qb::grad(f(true)).call(&w)?;
    let g2: Tensor = qb::grad(f(false)).call(&w)?;
    assert!((g1.item()? - g2.item()?).abs() < 1e-15);
    Ok(())
}

#[test]
fn tr4_rules_must_not_close_over_outer_tracers() -> qb::Result<()> {
    let err = qb::grad(|y: Tensor| {
        let scaled = qb::custom_vjp(|x: Tensor| &x * &y).name("scaled").defvjp(
            |x: Tensor| Ok(((&x * &y)?, ())),
            |((), g): ((), Tensor)| Ok(g),
        );
        scaled.call(&qb::array(2.0)?)
    })
    .call::<Tensor, Tensor>(&qb::array(3.0)?)
    .unwrap_err();
    match &err {
        Error::Tracer { kind, .. } => assert_eq!(*kind, TracerErrorKind::CustomRuleCapture),
        other => panic!("expected a tracer error, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "custom_vjp(scaled) cannot close over tracers of an enclosing transform; pass them as arguments"
    );
    Ok(())
}

#[test]
fn non_tensor_arguments_are_constants() -> qb::Result<()> {
    // Without nondiff_argnums the scale is a constant leaf of a differentiable argument: its
    // cotangent entry is None (`()`), and it reaches bwd only as a residual.
    let scaled = qb::custom_vjp(|(k, x): (f64, Tensor)| &x * k)
        .name("scaled")
        .defvjp(
            |(k, x): (f64, Tensor)| Ok(((&x * k)?, k)),
            |(k, g): (f64, Tensor)| Ok(((), (&g * k)?)),
        );
    let g: Tensor =
        qb::grad(|x: Tensor| scaled.call(&(3.0, x))?.sum()).call(&qb::array([1.0, 2.0])?)?;
    assert_eq!(vals(&g), [3.0, 3.0]);
    Ok(())
}

#[test]
fn rules_nest_inside_checkpoints() -> qb::Result<()> {
    let log1pexp = log1pexp_vjp();
    let outer = qb::checkpoint(|x: Tensor| log1pexp.call(&x)?.mul(2.0));
    let x = qb::array([0.0, 1000.0])?;
    let y: Tensor = qb::jit(|x: Tensor| outer.call(&x)).call(&x)?;
    assert_eq!(vals(&y), vals(&x.exp().log1p()?.mul(2.0)?));
    let g: Tensor = qb::grad(|x: Tensor| outer.call(&x)?.sum()).call(&x)?;
    assert_eq!(vals(&g), [1.0, 2.0]);
    let g: Tensor =
        qb::jit(|x: Tensor| qb::grad(|x: Tensor| outer.call(&x)?.sum()).call::<Tensor, Tensor>(&x))
            .call(&x)?;
    assert_eq!(vals(&g), [1.0, 2.0]);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// nondiff_argnums and cotangents returned as None

/// `k * sin(x)` with the scale `k` non-differentiable; the rule saves `x` as its residual.
fn scaled_sin_vjp<'a>() -> qb::CustomVjpFn<'a, (f64, Tensor), Tensor, Tensor, Tensor> {
    qb::custom_vjp(|(k, x): (f64, Tensor)| x.sin().mul(k))
        .nondiff_argnums(&[0])
        .name("scaled_sin")
        .defvjp(
            |(k, x): (f64, Tensor)| Ok((x.sin().mul(k)?, x)),
            |(k, x, g): (f64, Tensor, Tensor)| g.mul(k).mul(x.cos()?),
        )
}

/// The same function with a forward rule.
fn scaled_sin_jvp<'a>() -> qb::CustomJvpFn<'a, (f64, Tensor), Tensor> {
    qb::custom_jvp(|(k, x): (f64, Tensor)| x.sin().mul(k))
        .nondiff_argnums(&[0])
        .name("scaled_sin")
        .defjvp(|(k, x, t): (f64, Tensor, Tensor)| Ok((x.sin().mul(k)?, x.cos().mul(k).mul(&t)?)))
}

fn each(x: &Tensor, f: impl Fn(f64) -> f64) -> Vec<f64> {
    vals(x).into_iter().map(f).collect()
}

#[test]
fn e55_nondiff_argnums() -> qb::Result<()> {
    let scaled = qb::custom_vjp(|(k, x): (f64, Tensor)| &x * k)
        .nondiff_argnums(&[0])
        .name("scaled")
        .defvjp(
            |(k, x): (f64, Tensor)| Ok(((&x * k)?, ())),
            |(k, (), g): (f64, (), Tensor)| &g * k,
        );
    let x = qb::array([1.0, 2.0])?;
    assert_eq!(vals(&scaled.call(&(3.0, x.clone()))?), [3.0, 6.0]);
    let g: Tensor = qb::grad(|x: Tensor| scaled.call(&(3.0, x))?.sum()).call(&x)?;
    assert_eq!(vals(&g), [3.0, 3.0]);
    // The scale is static: a new value retraces and is used.
    let g: Tensor = qb::grad(|x: Tensor| scaled.call(&(-0.5, x))?.sum()).call(&x)?;
    assert_eq!(vals(&g), [-0.5, -0.5]);
    Ok(())
}

#[test]
fn custom_vjp_nondiff_argnums_under_grad_jit_vmap_and_second_order() -> qb::Result<()> {
    let f = scaled_sin_vjp();
    let k = 2.5;
    let x = qb::array([0.3, -1.2, 2.0])?;
    let d1 = each(&x, |x| k * x.cos());
    let d2 = each(&x, |x| -k * x.sin());
    assert!(close(
        &vals(&f.call(&(k, x.clone()))?),
        &each(&x, |x| k * x.sin()),
        1e-15
    ));
    let grad_of =
        |x: Tensor| -> qb::Result<Tensor> { qb::grad(|x: Tensor| f.call(&(k, x))?.sum()).call(&x) };
    assert!(close(&vals(&grad_of(x.clone())?), &d1, 1e-15));
    let jitted: Tensor = qb::jit(grad_of).call(&x)?;
    assert!(close(&vals(&jitted), &d1, 1e-15));
    let per_element: Tensor =
        qb::vmap(|x: Tensor| qb::grad(|x: Tensor| f.call(&(k, x))).call::<Tensor, Tensor>(&x))
            .call(&x)?;
    assert!(close(&vals(&per_element), &d1, 1e-15));
    let values: Tensor = qb::vmap(|x: Tensor| f.call(&(k, x))).call(&x)?;
    assert!(close(&vals(&values), &each(&x, |x| k * x.sin()), 1e-15));
    // Second order differentiates bwd, through its residual.
    let second: Tensor = qb::grad(|x: Tensor| grad_of(x)?.sum()).call(&x)?;
    assert!(close(&vals(&second), &d2, 1e-14), "{:?}", vals(&second));
    let h: Tensor = qb::hessian(|x: Tensor| f.call(&(k, x))?.sum()).call(&x)?;
    let h = vals(&h);
    for i in 0..3 {
        assert!((h[4 * i] - d2[i]).abs() < 1e-14, "{h:?}");
    }
    // Forward mode still raises TF4.
    let err = qb::jvp(|x: Tensor| f.call(&(k, x)), &x, &qb::ones([3])?).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("forward-mode differentiation (jvp) of custom_vjp(scaled_sin)"),
        "{err}"
    );
    Ok(())
}

#[test]
fn custom_jvp_nondiff_argnums_in_both_modes_and_second_order() -> qb::Result<()> {
    let f = scaled_sin_jvp();
    let k = 2.5;
    let x = qb::array([0.3, -1.2, 2.0])?;
    let d1 = each(&x, |x| k * x.cos());
    let d2 = each(&x, |x| -k * x.sin());
    let (y, t) = qb::jvp(|x: Tensor| f.call(&(k, x)), &x, &qb::ones([3])?)?;
    assert!(close(&vals(&y), &each(&x, |x| k * x.sin()), 1e-15));
    assert!(close(&vals(&t), &d1, 1e-15));
    let grad_of =
        |x: Tensor| -> qb::Result<Tensor> { qb::grad(|x: Tensor| f.call(&(k, x))?.sum()).call(&x) };
    assert!(close(&vals(&grad_of(x.clone())?), &d1, 1e-15));
    let jitted: Tensor = qb::jit(grad_of).call(&x)?;
    assert!(close(&vals(&jitted), &d1, 1e-15));
    let per_element: Tensor =
        qb::vmap(|x: Tensor| qb::grad(|x: Tensor| f.call(&(k, x))).call::<Tensor, Tensor>(&x))
            .call(&x)?;
    assert!(close(&vals(&per_element), &d1, 1e-15));
    // Reverse over reverse, forward over reverse, forward over forward.
    let rr: Tensor = qb::grad(|x: Tensor| grad_of(x)?.sum()).call(&x)?;
    assert!(close(&vals(&rr), &d2, 1e-14), "{:?}", vals(&rr));
    let (_, fr) = qb::jvp(grad_of, &x, &qb::ones([3])?)?;
    assert!(close(&vals(&fr), &d2, 1e-14), "{:?}", vals(&fr));
    let (_, ff) = qb::jvp(
        |x: Tensor| Ok(qb::jvp(|x: Tensor| f.call(&(k, x)), &x, &qb::ones([3])?)?.1),
        &x,
        &qb::ones([3])?,
    )?;
    assert!(close(&vals(&ff), &d2, 1e-14), "{:?}", vals(&ff));
    Ok(())
}

#[test]
fn several_nondiff_arguments_come_first_in_the_order_given() -> qb::Result<()> {
    // f(x, k, y, p) = k x y + p with k and p static; bwd receives (p, k).
    let f = qb::custom_vjp(|(x, k, y, p): (Tensor, f64, Tensor, f64)| x.mul(&y).mul(k).add(p))
        .nondiff_argnums(&[3, 1])
        .defvjp(
            |(x, k, y, p): (Tensor, f64, Tensor, f64)| Ok((x.mul(&y).mul(k).add(p)?, (x, y))),
            |((p, k), (x, y), g): ((f64, f64), (Tensor, Tensor), Tensor)| {
                // `p` plays no part in the derivative; a swapped order would scale by it.
                let _ = p;
                Ok((g.mul(k).mul(&y)?, g.mul(k).mul(&x)?))
            },
        );
    let x = qb::array([1.0, -2.0])?;
    let y = qb::array([0.5, 4.0])?;
    let (gx, gy): (Tensor, Tensor) =
        qb::grad(|(x, y): (Tensor, Tensor)| f.call(&(x, 2.0, y, 7.0))?.sum())
            .argnums(&[0, 1])
            .call(&(x.clone(), y.clone()))?;
    assert_eq!(vals(&gx), [1.0, 8.0]);
    assert_eq!(vals(&gy), [2.0, -4.0]);
    let v = f.call(&(x, 2.0, y, 7.0))?;
    assert_eq!(vals(&v), [8.0, -9.0]);
    Ok(())
}

#[test]
fn custom_jvp_with_a_nondiff_argument_between_differentiable_ones() -> qb::Result<()> {
    // f(x, k, y) = k x y: primals and tangents are the tuple (x, y).
    let f = qb::custom_jvp(|(x, k, y): (Tensor, f64, Tensor)| x.mul(&y).mul(k))
        .nondiff_argnums(&[1])
        .defjvp(
            |(k, (x, y), (tx, ty)): (f64, (Tensor, Tensor), (Tensor, Tensor))| {
                let tangent = tx.mul(&y).add(x.mul(&ty)?).mul(k)?;
                Ok((x.mul(&y).mul(k)?, tangent))
            },
        );
    let x = qb::array([1.0, -2.0])?;
    let y = qb::array([0.5, 4.0])?;
    let (out, t) = qb::jvp(
        |(x, y): (Tensor, Tensor)| f.call(&(x, 3.0, y)),
        &(x.clone(), y.clone()),
        &(qb::ones([2])?, qb::zeros([2])?),
    )?;
    assert_eq!(vals(&out), [1.5, -24.0]);
    assert_eq!(vals(&t), [1.5, 12.0]);
    let (gx, gy): (Tensor, Tensor) =
        qb::grad(|(x, y): (Tensor, Tensor)| f.call(&(x, 3.0, y))?.sum())
            .argnums(&[0, 1])
            .call(&(x, y))?;
    assert_eq!(vals(&gx), [1.5, 12.0]);
    assert_eq!(vals(&gy), [3.0, -6.0]);
    Ok(())
}

#[test]
fn static_and_concrete_tensor_nondiff_arguments() -> qb::Result<()> {
    // A `Static` exponent.
    let power = qb::custom_jvp(|(x, n): (Tensor, qb::Static<i32>)| x.powi(n.0))
        .nondiff_argnums(&[1])
        .defjvp(|(n, x, t): (qb::Static<i32>, Tensor, Tensor)| {
            Ok((x.powi(n.0)?, x.powi(n.0 - 1).mul(&t).mul(n.0 as f64)?))
        });
    let g: Tensor = qb::grad(|x: Tensor| power.call(&(x, qb::Static(3)))).call(&qb::array(2.0)?)?;
    assert_eq!(g.item()?, 12.0);
    // A concrete tensor: a constant of the rules, under grad and jit.
    let w = qb::array([2.0, -3.0])?;
    let weighted = qb::custom_vjp(|(w, x): (Tensor, Tensor)| &w * &x)
        .nondiff_argnums(&[0])
        .defvjp(
            |(w, x): (Tensor, Tensor)| Ok(((&w * &x)?, ())),
            |(w, (), g): (Tensor, (), Tensor)| &w * &g,
        );
    let x = qb::array([1.0, 1.0])?;
    let loss = |x: Tensor| weighted.call(&(w.clone(), x))?.sum();
    let g: Tensor = qb::grad(loss).call(&x)?;
    assert_eq!(vals(&g), [2.0, -3.0]);
    let g: Tensor = qb::jit(|x: Tensor| qb::grad(loss).call::<Tensor, Tensor>(&x)).call(&x)?;
    assert_eq!(vals(&g), [2.0, -3.0]);
    Ok(())
}

#[test]
fn bwd_may_return_none_for_zero_cotangents() -> qb::Result<()> {
    // f(x, (y, z)) = x y + z.
    let exact = |g: &Tensor, x: &Tensor, y: &Tensor| -> qb::Result<(Tensor, (Tensor, Tensor))> {
        Ok(((g * y)?, ((g * x)?, g.clone())))
    };
    let x = qb::array([1.0, 2.0])?;
    let y = qb::array([3.0, -1.0])?;
    let z = qb::array([0.5, 0.5])?;
    let grads = |f: &dyn Fn((Tensor, (Tensor, Tensor))) -> qb::Result<Tensor>| {
        qb::grad(|a: (Tensor, (Tensor, Tensor))| f(a)?.sum())
            .argnums(&[0, 1])
            .call::<Tensor, (Tensor, (Tensor, Tensor))>(&(x.clone(), (y.clone(), z.clone())))
    };
    let value = |(x, (y, z)): (Tensor, (Tensor, Tensor))| x.mul(&y).add(&z);
    let residuals =
        |(x, (y, z)): (Tensor, (Tensor, Tensor))| Ok((value((x.clone(), (y.clone(), z)))?, (x, y)));
    // None for a single leaf.
    let leaf_none =
        qb::custom_vjp(value).defvjp(residuals, |((x, y), g): ((Tensor, Tensor), Tensor)| {
            let (cx, (_, cz)) = exact(&g, &x, &y)?;
            Ok((cx, (None::<Tensor>, cz)))
        });
    let (gx, (gy, gz)) = grads(&|a| leaf_none.call(&a))?;
    assert_eq!(vals(&gx), [3.0, -1.0]);
    assert_eq!(vals(&gy), [0.0, 0.0]);
    assert_eq!(vals(&gz), [1.0, 1.0]);
    // None for a whole argument.
    let arg_none =
        qb::custom_vjp(value).defvjp(residuals, |((x, y), g): ((Tensor, Tensor), Tensor)| {
            Ok((exact(&g, &x, &y)?.0, None::<(Tensor, Tensor)>))
        });
    let (gx, (gy, gz)) = grads(&|a| arg_none.call(&a))?;
    assert_eq!(vals(&gx), [3.0, -1.0]);
    assert_eq!((vals(&gy), vals(&gz)), (vec![0.0, 0.0], vec![0.0, 0.0]));
    // Every cotangent given: the exact gradient.
    let full = qb::custom_vjp(value)
        .defvjp(residuals, |((x, y), g): ((Tensor, Tensor), Tensor)| {
            exact(&g, &x, &y)
        });
    let (gx, (gy, gz)) = grads(&|a| full.call(&a))?;
    assert_eq!(
        (vals(&gx), vals(&gy), vals(&gz)),
        (vec![3.0, -1.0], vec![1.0, 2.0], vec![1.0, 1.0])
    );
    // Under vmap and jit, zeros keep their shapes.
    let per_row: Tensor = qb::vmap(|x: Tensor| {
        qb::grad(|y: Tensor| leaf_none.call(&(x.clone(), (y, qb::zeros([])?))))
            .call::<Tensor, Tensor>(&qb::array(1.0)?)
    })
    .call(&x)?;
    assert_eq!(vals(&per_row), [0.0, 0.0]);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// misuse

fn two_args_bwd_returning(
    n: usize,
) -> qb::CustomVjpFn<'static, (Tensor, Tensor), Tensor, (Tensor, Tensor), qb::tree::Value> {
    qb::custom_vjp(|(x, y): (Tensor, Tensor)| &x * &y)
        .name("product")
        .defvjp(
            |(x, y): (Tensor, Tensor)| Ok(((&x * &y)?, (x, y))),
            move |((x, y), g): ((Tensor, Tensor), Tensor)| {
                let cts = [(&g * &y)?, (&g * &x)?, g.clone()];
                let leaves = cts[..n]
                    .iter()
                    .cloned()
                    .map(qb::tree::Leaf::Tensor)
                    .collect();
                let def = if n == 1 {
                    qb::tree::TreeDef::Leaf
                } else {
                    qb::tree::TreeDef::Tuple(vec![qb::tree::TreeDef::Leaf; n])
                };
                qb::tree::Value::from_parts(&def, leaves)
            },
        )
}

#[test]
fn wrong_number_of_cotangents_is_a_structure_error() -> qb::Result<()> {
    let args = (qb::array([1.0, 2.0])?, qb::array([3.0, 4.0])?);
    for n in [1, 3] {
        let f = two_args_bwd_returning(n);
        // Eagerly the function just runs.
        assert_eq!(vals(&f.call(&args)?), [3.0, 8.0]);
        let err = qb::grad(|(x, y): (Tensor, Tensor)| f.call(&(x, y))?.sum())
            .call::<Tensor, Tensor>(&args)
            .unwrap_err();
        assert!(matches!(err, Error::Structure { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.starts_with("the bwd rule of custom_vjp(product) must return one cotangent per differentiable argument"),
            "{text}"
        );
        assert!(
            text.contains("pytree structures differ: TreeDef((*, *)) vs"),
            "{text}"
        );
    }
    let f = two_args_bwd_returning(2);
    let g: Tensor = qb::grad(|(x, y): (Tensor, Tensor)| f.call(&(x, y))?.sum()).call(&args)?;
    assert_eq!(vals(&g), [3.0, 4.0]);
    Ok(())
}

#[test]
fn wrong_cotangent_shapes_and_kinds_are_value_errors() -> qb::Result<()> {
    let x = qb::array([1.0, 2.0, 3.0])?;
    let summed = qb::custom_vjp(|x: Tensor| x.sin()).name("summed").defvjp(
        |x: Tensor| Ok((x.sin()?, x)),
        |(x, g): (Tensor, Tensor)| x.cos().mul(&g).sum(),
    );
    let err = qb::grad(|x: Tensor| summed.call(&x)?.sum())
        .call::<Tensor, Tensor>(&x)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "the bwd rule of custom_vjp(summed): the cotangent of arg0 is float64[], expected float64[3]"
    );
    let f32_ct = qb::custom_vjp(|x: Tensor| x.sin()).name("narrowed").defvjp(
        |x: Tensor| Ok((x.sin()?, ())),
        |((), g): ((), Tensor)| g.astype(qb::F32),
    );
    let err = qb::grad(|x: Tensor| f32_ct.call(&x)?.sum())
        .call::<Tensor, Tensor>(&x)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("is float32[3], expected float64[3]"),
        "{err}"
    );
    let scalar_ct = qb::custom_vjp(|x: Tensor| x.sin()).name("scalar").defvjp(
        |x: Tensor| Ok((x.sin()?, ())),
        |((), _g): ((), Tensor)| Ok(1.0),
    );
    let err = qb::grad(|x: Tensor| scalar_ct.call(&x)?.sum())
        .call::<Tensor, Tensor>(&x)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("a cotangent must be a tensor or None"),
        "{err}"
    );
    Ok(())
}

#[test]
fn bad_nondiff_argnums_are_value_errors() -> qb::Result<()> {
    let x = qb::array([1.0, 2.0])?;
    let out_of_range = qb::custom_vjp(|(k, x): (f64, Tensor)| &x * k)
        .nondiff_argnums(&[2])
        .name("scaled")
        .defvjp(
            |(k, x): (f64, Tensor)| Ok(((&x * k)?, ())),
            |(k, (), g): (f64, (), Tensor)| &g * k,
        );
    let expected =
        "custom_vjp(scaled): nondiff_argnums names argument 2, but the function was called with 2 arguments";
    let err = out_of_range.call(&(3.0, x.clone())).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    assert_eq!(err.to_string(), expected);
    let err = qb::grad(|x: Tensor| out_of_range.call(&(3.0, x))?.sum())
        .call::<Tensor, Tensor>(&x)
        .unwrap_err();
    assert_eq!(err.to_string(), expected);
    let repeated = qb::custom_jvp(|(k, x): (f64, Tensor)| &x * k)
        .nondiff_argnums(&[0, 0])
        .defjvp(|(k, x, t): (f64, Tensor, Tensor)| Ok(((&x * k)?, (&t * k)?)));
    for err in [
        repeated.call(&(3.0, x.clone())).unwrap_err(),
        qb::jvp(|x: Tensor| repeated.call(&(3.0, x)), &x, &x).unwrap_err(),
    ] {
        assert_eq!(
            err.to_string(),
            "custom_jvp(<closure>): nondiff_argnums must be distinct, got [0, 0]"
        );
    }
    let single = qb::custom_jvp(|x: Tensor| x.sin())
        .nondiff_argnums(&[1])
        .defjvp(|((), x, t): ((), Tensor, Tensor)| Ok((x.sin()?, t)));
    let err = single.call(&x).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("names argument 1, but the function was called with 1 argument"),
        "{err}"
    );
    Ok(())
}

#[test]
fn traced_nondiff_arguments_are_tracer_errors() -> qb::Result<()> {
    let weighted = qb::custom_vjp(|(w, x): (Tensor, Tensor)| &w * &x)
        .nondiff_argnums(&[0])
        .name("weighted")
        .defvjp(
            |(w, x): (Tensor, Tensor)| Ok(((&w * &x)?, ())),
            |(w, (), g): (Tensor, (), Tensor)| &w * &g,
        );
    let args = (qb::array([2.0, -3.0])?, qb::ones([2])?);
    // Eagerly both are concrete and the call is plain.
    assert_eq!(vals(&weighted.call(&args)?), [2.0, -3.0]);
    // Under grad every tensor argument is traced, the weights included.
    let err = qb::grad(|(w, x): (Tensor, Tensor)| weighted.call(&(w, x))?.sum())
        .argnum(1)
        .call::<Tensor, Tensor>(&args)
        .unwrap_err();
    match &err {
        Error::Tracer { kind, .. } => assert_eq!(*kind, TracerErrorKind::Concretization),
        other => panic!("expected a tracer error, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.starts_with(
            "custom_vjp(weighted) nondiff argument 0 needs a concrete value, but got TraceTensor("
        ),
        "{text}"
    );
    assert!(
        text.contains("its value is not known while tracing"),
        "{text}"
    );
    Ok(())
}

/// Two matrix products with sines: the derivative needs both products' values, which are
/// materialized (a matrix product ends every fused elementwise group).
fn mixing(x: Tensor, w: &Tensor) -> qb::Result<Tensor> {
    x.matmul(w).sin().matmul(w).sin()
}

/// Six layers of `mixing`, checkpointed or not, summed.
fn deep(x: Tensor, w: &Tensor, remat: bool) -> qb::Result<Tensor> {
    let layer = qb::checkpoint(|(x, w): (Tensor, Tensor)| mixing(x, &w)).name("mixing");
    let mut x = x;
    for _ in 0..6 {
        x = if remat {
            layer.call(&(x, w.clone()))?
        } else {
            mixing(x, w)?
        };
    }
    x.sum()
}

#[test]
fn checkpoint_recomputes_in_the_backward_pass_and_stores_fewer_intermediates() -> qb::Result<()> {
    let x = qb::linspace(-1.0, 1.0, 64 * 64)?.reshape([64, 64])?;
    let w = (qb::linspace(-1.0, 1.0, 64 * 64)?.reshape([64, 64])? * 0.05)?;
    let grad_of = |remat: bool| {
        let w = w.clone();
        qb::jit(move |x: Tensor| {
            let w = w.clone();
            qb::grad(move |x: Tensor| deep(x, &w, remat)).call::<Tensor, Tensor>(&x)
        })
    };
    let plain: Tensor = grad_of(false).call(&x)?;
    let remat: Tensor = grad_of(true).call(&x)?;
    assert_eq!(plain.to_vec::<f64>()?, remat.to_vec::<f64>()?);
    // The recomputation is tagged in the plan text: CSE kept it apart from the forward pass.
    let lowered_remat = grad_of(true).lower(&x)?;
    let lowered_plain = grad_of(false).lower(&x)?;
    let tagged = lowered_remat
        .as_text()
        .lines()
        .filter(|l| l.contains("matmul") && l.contains("rematerialized"))
        .count();
    assert!(tagged >= 6, "{}", lowered_remat.as_text());
    assert!(!lowered_plain.as_text().contains("rematerialized"));
    // Fewer values are alive at once: the forward pass keeps only each layer's output.
    let peak = |plan: &quabla_ir::Plan| -> qb::Result<usize> {
        let exe = quabla_cpu::CpuBackend::new()
            .compile_plan(plan)
            .map_err(qb::Error::from)?;
        Ok(exe.stats().peak_live_buffers)
    };
    let (p_plain, p_remat) = (
        peak(lowered_plain.program().plan())?,
        peak(lowered_remat.program().plan())?,
    );
    assert!(
        p_remat < p_plain,
        "peak live buffers: remat {p_remat}, plain {p_plain}"
    );
    Ok(())
}

/// A small regression model whose loss goes through all three wrappers: a checkpointed tanh
/// layer, a `custom_jvp` softplus and a `custom_vjp` gradient clip.
fn model_loss(
    (w, b, x, y): (Tensor, Tensor, Tensor, Tensor),
    custom: bool,
    layer: &qb::Checkpoint<'_, (Tensor, Tensor, Tensor), Tensor>,
) -> qb::Result<Tensor> {
    let softplus = log1pexp_jvp();
    let clip = clip_gradient();
    let h = if custom {
        layer.call(&(x, w, b.clone()))?
    } else {
        layer_plain((x, w, b.clone()))?
    };
    let out = if custom {
        clip.call(&softplus.call(&h)?)?
    } else {
        h.exp().log1p()?
    };
    (&out.sum_axes([1])? - &y).powi(2).mean()
}

fn layer_plain((x, w, b): (Tensor, Tensor, Tensor)) -> qb::Result<Tensor> {
    (x.matmul(&w)? + &b).tanh()
}

#[test]
fn custom_rules_inside_a_jitted_training_loop() -> qb::Result<()> {
    let x = qb::linspace(-1.0, 1.0, 16)?.reshape([8, 2])?;
    let y = x.sum_axes([1])?.sin()?;
    let train = |custom: bool| -> qb::Result<(Vec<f64>, Tensor)> {
        let layer = qb::checkpoint(layer_plain).name("layer");
        let step = qb::jit(|(w, b, x, y): (Tensor, Tensor, Tensor, Tensor)| {
            let (loss, (gw, gb)): (Tensor, (Tensor, Tensor)) =
                qb::value_and_grad(|args: (Tensor, Tensor, Tensor, Tensor)| {
                    model_loss(args, custom, &layer)
                })
                .argnums(&[0, 1])
                .call(&(w.clone(), b.clone(), x, y))?;
            Ok((loss, (&w - &gw * 0.1)?, (&b - &gb * 0.1)?))
        });
        let mut w = qb::array([[0.3, -0.2, 0.1], [0.05, 0.4, -0.3]])?;
        let mut b = qb::zeros([3])?;
        let mut losses = Vec::new();
        for _ in 0..40 {
            let (loss, w2, b2): (Tensor, Tensor, Tensor) =
                step.call(&(w, b, x.clone(), y.clone()))?;
            losses.push(loss.item()?);
            (w, b) = (w2, b2);
        }
        assert_eq!(step.cache_size(), 1, "the step traces once");
        Ok((losses, w))
    };
    let (custom_losses, custom_w) = train(true)?;
    let (plain_losses, plain_w) = train(false)?;
    assert!(
        custom_losses[39] < 0.5 * custom_losses[0],
        "{custom_losses:?}"
    );
    // The clip never binds at these magnitudes and the rules are exact derivatives, so both
    // runs follow the same path.
    assert!(close(&custom_losses, &plain_losses, 1e-12));
    assert!(close(&vals(&custom_w), &vals(&plain_w), 1e-12));
    Ok(())
}

/// Every output of every custom rule is checked against the function's output (or argument,
/// for cotangents) in shape and dtype, with a typed error naming the rule and the output, in
/// every transform that stages the rule: a `custom_jvp` rule whose primal output had the
/// wrong shape used to be ignored silently.
#[test]
fn every_output_of_every_custom_rule_is_checked() {
    // Defects applied to a correct output `y` (float64 [2]).
    type Defect = fn(Tensor) -> qb::Result<Tensor>;
    let defects: [(&str, Defect, &str); 4] = [
        (
            "wrong shape",
            |y| qb::concat(&[&y, &y], 0),
            "float64[4], expected float64[2]",
        ),
        (
            "wrong rank",
            |y| y.reshape([1, 2]),
            "float64[1, 2], expected float64[2]",
        ),
        ("scalar", |y| y.sum(), "float64[], expected float64[2]"),
        (
            "wrong dtype",
            |y| y.astype(qb::F32),
            "float32[2], expected float64[2]",
        ),
    ];
    let x = qb::array([0.5, 1.5]).unwrap();
    let mut checked = 0;
    let mut failures = Vec::new();
    for (defect, bad, detail) in defects {
        // custom_jvp: the rule's primal_out, then its tangent_out.
        let jvp_primal = qb::custom_jvp(|x: Tensor| x.sin())
            .name("f")
            .defjvp(move |(x, t): (Tensor, Tensor)| Ok((bad(x.sin()?)?, t.mul(x.cos()?)?)));
        let jvp_tangent = qb::custom_jvp(|x: Tensor| x.sin())
            .name("f")
            .defjvp(move |(x, t): (Tensor, Tensor)| Ok((x.sin()?, bad(t.mul(x.cos()?)?)?)));
        // custom_vjp: fwd's output, then bwd's cotangent.
        let vjp_fwd = qb::custom_vjp(|x: Tensor| x.sin()).name("f").defvjp(
            move |x: Tensor| Ok((bad(x.sin()?)?, x)),
            |(x, g): (Tensor, Tensor)| g.mul(x.cos()?),
        );
        let vjp_bwd = qb::custom_vjp(|x: Tensor| x.sin()).name("f").defvjp(
            |x: Tensor| Ok((x.sin()?, x)),
            move |(x, g): (Tensor, Tensor)| bad(g.mul(x.cos()?)?),
        );
        type Call<'a> = Box<dyn Fn(&Tensor) -> qb::Result<Tensor> + 'a>;
        let rules: [(&str, Call, &str); 4] = [
            (
                "custom_jvp primal_out",
                Box::new(|x| jvp_primal.call(x)),
                "the jvp rule of custom_jvp(f): primal_out: output 0 is",
            ),
            (
                "custom_jvp tangent_out",
                Box::new(|x| jvp_tangent.call(x)),
                "the jvp rule of custom_jvp(f): tangent_out: output 0 is",
            ),
            (
                "custom_vjp fwd",
                Box::new(|x| vjp_fwd.call(x)),
                "the fwd rule of custom_vjp(f): output 0 is",
            ),
            (
                "custom_vjp bwd",
                Box::new(|x| vjp_bwd.call(x)),
                "the bwd rule of custom_vjp(f): the cotangent of",
            ),
        ];
        for (rule, call, prefix) in &rules {
            let loss = |x: Tensor| call(&x)?.sum();
            let mut outcomes: Vec<(&str, qb::Result<()>)> = vec![
                ("grad", qb::grad(loss).call(&x).map(|_: Tensor| ())),
                ("vjp", qb::vjp(|x: Tensor| call(&x), &x).map(|_| ())),
                (
                    "jit of grad",
                    qb::jit(|x: Tensor| qb::grad(loss).call::<Tensor, Tensor>(&x))
                        .call(&x)
                        .map(|_| ()),
                ),
                (
                    "vmap of grad",
                    qb::vmap(|x: Tensor| {
                        qb::grad(|x: Tensor| call(&x)?.sum()).call::<Tensor, Tensor>(&x)
                    })
                    .call(&qb::ones([3, 2]).unwrap())
                    .map(|_: Tensor| ()),
                ),
            ];
            if rule.starts_with("custom_jvp") {
                outcomes.push(("jvp", qb::jvp(|x: Tensor| call(&x), &x, &x).map(|_| ())));
            }
            if *rule != "custom_vjp bwd" {
                // A rule is staged with the function wherever it is traced, even where no
                // derivative is taken (the bwd rule is checked at the cotangent's shape, which
                // a scalar defect keeps for the vmapped case).
                outcomes.push(("jit", qb::jit(|x: Tensor| call(&x)).call(&x).map(|_| ())));
            }
            for (transform, outcome) in outcomes {
                match outcome {
                    Err(Error::InvalidArgument { message }) if message.starts_with(prefix) => {}
                    other => failures.push(format!("{rule}, {defect}, {transform}: {other:?}")),
                }
                checked += 1;
            }
            // The message says what was wrong (shown once per rule, outside vmap).
            let message = qb::grad(loss)
                .call(&x)
                .map(|_: Tensor| ())
                .unwrap_err()
                .to_string();
            assert!(message.ends_with(detail), "{rule}, {defect}: {message}");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(checked, 4 * (4 * 4 + 3 + 2));
}
