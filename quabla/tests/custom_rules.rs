//! Custom derivative rules and checkpointing (transforms.md §14): `custom_vjp`, `custom_jvp`,
//! `checkpoint`, under `grad`, `jvp`, `jit` and `vmap`, to second order, and the acceptance
//! examples E54, E56, E57 and E59.

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
    // E55 in Rust: the scale is an `f64` leaf, so it gets no cotangent.
    let scaled = qb::custom_vjp(|(k, x): (f64, Tensor)| &x * k)
        .name("scaled")
        .defvjp(
            |(k, x): (f64, Tensor)| Ok(((&x * k)?, k)),
            |(k, g): (f64, Tensor)| &g * k,
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
