//! Control flow (transforms.md §10–§13): `cond`, `fori_loop`, `scan`, `while_loop` eagerly, as
//! jitted regions, under every supported derivative composition and under `vmap`; the
//! examples E43–E53 and E60 of `spec/acceptance.md` §4; every error of the support matrix.

use qb::prelude::*;
use qb::testing::{check_grads, Modes};
use qb::{Error, Tensor};
use quabla as qb;

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + b.abs())
}

fn assert_vec(t: &Tensor, expected: &[f64], tol: f64) {
    let v = t.to_vec::<f64>().unwrap();
    assert_eq!(v.len(), expected.len(), "{v:?} vs {expected:?}");
    for (a, b) in v.iter().zip(expected) {
        assert!(close(*a, *b, tol), "{v:?} vs {expected:?}");
    }
}

fn safe_log(x: &Tensor) -> qb::Result<Tensor> {
    qb::cond(
        &x.greater(0.0)?,
        |o| o[0].log(),
        |o| qb::zeros_like(&o[0]),
        &[&x],
    )
}

fn decay(x0: &Tensor, a: &Tensor) -> qb::Result<Tensor> {
    qb::fori_loop(0, 100, |_, x, ops| &x - (0.01 * &ops[0]) * &x, x0)
        .operands(&[&a])
        .eval()
}

fn newton_sqrt(a: &Tensor) -> qb::Result<Tensor> {
    qb::while_loop(
        |x, ops| (x * x - &ops[0]).abs().greater(1e-12 * &ops[0]),
        |x, ops| (&x + &ops[0] / &x).mul(0.5),
        a,
    )
    .operands(&[&a])
    .eval()
}

fn is_unsupported(e: &Error, op: &str, prefix: &str) -> bool {
    matches!(e, Error::Unsupported { op: o, message, .. } if o == op && message.starts_with(prefix))
}

#[test]
fn e43_cond_eager_jit_and_grad() -> qb::Result<()> {
    assert!(close(
        safe_log(&qb::array(2.0)?)?.item()?,
        std::f64::consts::LN_2,
        1e-8
    ));
    let jitted: Tensor = qb::jit(|x: Tensor| safe_log(&x)).call(&qb::array(-1.0)?)?;
    assert_eq!(jitted.item()?, 0.0);
    let g: Tensor = qb::grad(|x: Tensor| safe_log(&x)).call(&2.0)?;
    assert_eq!(g.item()?, 0.5);
    // The other branch is selected under grad too, and no NaN leaks from log(-1).
    let g: Tensor = qb::grad(|x: Tensor| safe_log(&x)).call(&-1.0)?;
    assert_eq!(g.item()?, 0.0);
    Ok(())
}

#[test]
fn eager_cond_calls_each_branch_once_and_runs_the_selected_one() -> qb::Result<()> {
    use std::cell::RefCell;
    let x = qb::array([1.0, 2.0])?;
    for (pred, taken) in [(true, "then"), (false, "else")] {
        let calls = RefCell::new(Vec::new());
        let branch = |name: &'static str, scale: f64| {
            let calls = &calls;
            move |o: &[Tensor]| {
                calls.borrow_mut().push((name, o[0].is_traced()));
                o[0].mul(scale)
            }
        };
        let p = qb::array(pred)?;
        let out = qb::cond(&p, branch("then", 2.0), branch("else", 3.0), &[&x])?;
        let scale = if pred { 2.0 } else { 3.0 };
        assert_vec(&out, &[scale, 2.0 * scale], 0.0);
        let mut seen = calls.borrow().clone();
        seen.sort();
        // The selected branch runs on the concrete operands, the other is traced for the
        // checks only; each is called once.
        let other = if pred { "else" } else { "then" };
        let mut want = vec![(taken, false), (other, true)];
        want.sort();
        assert_eq!(seen, want);
        calls.borrow_mut().clear();
        let _: Tensor =
            qb::jit(|x: Tensor| qb::cond(&p, branch("then", 2.0), branch("else", 3.0), &[&x]))
                .call(&x)?;
        assert_eq!(calls.borrow().len(), 2, "each branch traced once under jit");
    }
    // The eager checks are the traced ones: shapes (SH13) whichever branch is taken.
    for pred in [true, false] {
        let err = qb::cond(
            &qb::array(pred)?,
            |o| Ok(o[0].clone()),
            |_| qb::ones([3]),
            &[&x],
        )
        .unwrap_err();
        assert!(err
            .to_string()
            .contains("cond branches return different shapes"));
    }
    Ok(())
}

#[test]
fn e44_fori_loop_value_and_gradient() -> qb::Result<()> {
    let x0 = qb::array([1.0, 2.0])?;
    let a = qb::array(0.5)?;
    let expected = [0.60577044, 1.21154087];
    assert_vec(&decay(&x0, &a)?, &expected, 1e-8);
    let jitted: Tensor =
        qb::jit(|(x, a): (Tensor, Tensor)| decay(&x, &a)).call(&(x0.clone(), a))?;
    assert_vec(&jitted, &expected, 1e-8);
    let g: Tensor = qb::grad(|a: Tensor| decay(&x0, &a)?.sum()).call(&0.5)?;
    assert!(close(g.item()?, -1.82644353, 1e-8), "{}", g.item()?);
    Ok(())
}

#[test]
fn e45_hessian_through_a_loop() -> qb::Result<()> {
    let a = qb::array(0.5)?;
    let h: Tensor =
        qb::hessian(|x: Tensor| decay(&x, &a)?.powi(2).sum()).call(&qb::array([1.0, 2.0])?)?;
    assert_vec(&h, &[0.73391564, 0.0, 0.0, 0.73391564], 1e-8);
    Ok(())
}

fn rollout(c0: &Tensor, w: &Tensor) -> qb::Result<(Tensor, Tensor)> {
    qb::scan(
        |c, _, ops| {
            let c = (&c * &ops[0]).add(0.1).tanh()?;
            let y = (&c * 2.0)?;
            Ok((c, y))
        },
        c0,
        4,
    )
    .operands(&[&w])
    .eval()
}

#[test]
fn e46_scan_carry_first_then_index() -> qb::Result<()> {
    let c0 = qb::array([0.5, 1.0])?;
    let w = qb::array(0.8)?;
    let (carry, ys): (Tensor, Tensor) =
        qb::jit(|(c, w): (Tensor, Tensor)| rollout(&c, &w)).call(&(c0.clone(), w.clone()))?;
    assert_vec(&carry, &[0.41178338, 0.47153359], 1e-8);
    assert_eq!(ys.shape(), &[4, 2]);
    assert_vec(&ys.index(qb::s![0])?, &[0.92423431, 1.43259574], 1e-8);
    // Eager and jitted scans agree bit for bit.
    let (c_eager, ys_eager) = rollout(&c0, &w)?;
    assert_eq!(c_eager.to_vec::<f64>()?, carry.to_vec::<f64>()?);
    assert_eq!(ys_eager.to_vec::<f64>()?, ys.to_vec::<f64>()?);
    Ok(())
}

#[test]
fn scan_index_and_gradient_against_finite_differences() -> qb::Result<()> {
    // c_{i+1} = sin(c_i * w + 0.1 i); loss = sum(ys) + carry.
    let f = |w: Tensor| -> qb::Result<Tensor> {
        let (c, ys) = qb::scan(
            |c, i, ops| {
                let c = (&c * &ops[0]).add(0.1 * i.tensor()).sin()?;
                Ok((c.clone(), c.powi(2)?))
            },
            &qb::array([0.3, -0.2])?,
            7,
        )
        .operands(&[w])
        .eval()?;
        ys.sum().add(c.sum())
    };
    let w0 = 0.9;
    let g: Tensor = qb::grad(f).call(&w0)?;
    let eps = 1e-6;
    let fd = (f(qb::array(w0 + eps)?)?.item()? - f(qb::array(w0 - eps)?)?.item()?) / (2.0 * eps);
    assert!(close(g.item()?, fd, 1e-7), "{} vs {fd}", g.item()?);
    // Forward mode agrees with reverse mode.
    let (_, t) = qb::jvp(f, &qb::array(w0)?, &qb::array(1.0)?)?;
    assert!(close(t.item()?, g.item()?, 1e-12));
    Ok(())
}

#[test]
fn e47_while_loop_value_forward_mode_and_reverse_rejected() -> qb::Result<()> {
    let two = qb::array(2.0)?;
    assert!(close(
        newton_sqrt(&two)?.item()?,
        std::f64::consts::SQRT_2,
        1e-8
    ));
    let (v, t) = qb::jvp(|a: Tensor| newton_sqrt(&a), &two, &qb::array(1.0)?)?;
    assert!(close(v.item()?, 2f64.sqrt(), 1e-12));
    assert!(close(t.item()?, 0.35355339, 1e-8), "{}", t.item()?);
    let err = qb::grad(|a: Tensor| newton_sqrt(&a))
        .call::<Tensor, Tensor>(&2.0)
        .unwrap_err();
    assert!(
        is_unsupported(
            &err,
            "while_loop",
            "reverse-mode differentiation through while_loop is not supported"
        ),
        "{err:?}"
    );
    // The message names the fix.
    assert!(err.to_string().contains("max_trips(n)"), "{err}");
    Ok(())
}

#[test]
fn e48_bounded_loop_with_a_freeze_is_differentiable() -> qb::Result<()> {
    let sqrt_bounded = |a: Tensor| {
        qb::fori_loop(
            0,
            30,
            |_, x, ops| {
                let a = &ops[0];
                let done = (&x * &x - a).abs().less_equal(1e-12 * a)?;
                qb::where_(&done, &x, (&x + a / &x).mul(0.5))
            },
            &a,
        )
        .operands(&[&a])
        .eval()
    };
    let g: Tensor = qb::grad(sqrt_bounded).call(&2.0)?;
    assert!(close(g.item()?, 0.35355339, 1e-8), "{}", g.item()?);
    Ok(())
}

#[test]
fn e49_vmap_of_while_loop_with_a_mapped_predicate() -> qb::Result<()> {
    let out: Tensor = qb::vmap(|a: Tensor| newton_sqrt(&a)).call(&qb::array([2.0, 9.0, 1e6])?)?;
    assert_vec(&out, &[std::f64::consts::SQRT_2, 3.0, 1000.0], 1e-8);
    // Each example's carry is bit-identical to its own unbatched loop.
    for (k, a) in [2.0, 9.0, 1e6].into_iter().enumerate() {
        let single = newton_sqrt(&qb::array(a)?)?.item()?;
        assert_eq!(out.to_vec::<f64>()?[k].to_bits(), single.to_bits());
    }
    Ok(())
}

#[test]
fn e50_vmap_of_cond_with_a_mapped_predicate() -> qb::Result<()> {
    let xs = qb::array([2.0, -1.0])?;
    let v: Tensor = qb::vmap(|x: Tensor| safe_log(&x)).call(&xs)?;
    assert_vec(&v, &[std::f64::consts::LN_2, 0.0], 1e-8);
    let g: Tensor =
        qb::vmap(|x: Tensor| qb::grad(|x: Tensor| safe_log(&x)).call::<Tensor, Tensor>(&x))
            .call(&xs)?;
    assert_eq!(g.to_vec::<f64>()?, vec![0.5, 0.0]);
    Ok(())
}

#[test]
fn e51_regions_must_not_capture_outer_tracers() {
    let bad = qb::jit(|(x, a): (Tensor, Tensor)| qb::fori_loop(0, 3, |_, c, _| &c * &a, &x).eval());
    let r: qb::Result<Tensor> = bad.call(&(qb::array([1.0]).unwrap(), qb::array(2.0).unwrap()));
    let err = r.unwrap_err();
    match err {
        Error::Tracer { kind, message } => {
            assert_eq!(kind, qb::TracerErrorKind::RegionCapture);
            assert_eq!(
                message,
                "control-flow regions cannot close over an outer tracer; pass it explicitly using operands= (for cond, as extra positional operands)"
            );
        }
        other => panic!("{other:?}"),
    }
    // Eager tensors may be closed over: they become constants of the body.
    let w = qb::array(2.0).unwrap();
    let ok: Tensor = qb::jit(|x: Tensor| qb::fori_loop(0, 3, |_, c, _| &c * &w, &x).eval())
        .call(&qb::array([1.0]).unwrap())
        .unwrap();
    assert_eq!(ok.to_vec::<f64>().unwrap(), vec![8.0]);
}

#[test]
fn e52_loop_derivatives_of_second_and_third_order_in_every_mode() -> qb::Result<()> {
    let x0 = qb::array([1.0, 2.0])?;
    let s = |a: Tensor| decay(&x0, &a)?.sum();
    let expected = 3.0 * 100.0 * 99.0 * 1e-4 * 0.995f64.powi(98);
    // reverse-over-reverse
    let gg: Tensor = qb::grad(|a: Tensor| qb::grad(s).call::<Tensor, Tensor>(&a)).call(&0.5)?;
    assert!(close(gg.item()?, 1.81726542, 1e-8), "{}", gg.item()?);
    assert!(close(gg.item()?, expected, 1e-10));
    // forward-over-reverse
    let (g, h) = qb::jvp(
        |a: Tensor| qb::grad(s).call::<Tensor, Tensor>(&a),
        &qb::array(0.5)?,
        &qb::array(1.0)?,
    )?;
    assert!(close(g.item()?, -1.82644353, 1e-8));
    assert!(close(h.item()?, 1.81726542, 1e-8));
    // reverse-over-forward
    let rf: Tensor = qb::grad(|a: Tensor| {
        let (_, t) = qb::jvp(s, &a, &qb::array(1.0)?)?;
        Ok(t)
    })
    .call(&0.5)?;
    assert!(close(rf.item()?, expected, 1e-10));
    // forward-over-forward through fori_loop (TF3 in the reference system): a loop of loops.
    let (_, ff) = qb::jvp(
        |a: Tensor| Ok(qb::jvp(s, &a, &qb::array(1.0)?)?.1),
        &qb::array(0.5)?,
        &qb::array(1.0)?,
    )?;
    assert!(close(ff.item()?, expected, 1e-10), "{}", ff.item()?);
    // third order (TF3 in the reference system): d³/da³ of 3 (1 - 0.01 a)^100.
    let ggg: Tensor = qb::grad(|a: Tensor| {
        qb::grad(|a: Tensor| qb::grad(s).call::<Tensor, Tensor>(&a)).call::<Tensor, Tensor>(&a)
    })
    .call(&0.5)?;
    let third = -3.0 * 100.0 * 99.0 * 98.0 * 1e-6 * 0.995f64.powi(97);
    assert!(close(ggg.item()?, third, 1e-10), "{}", ggg.item()?);
    Ok(())
}

#[test]
fn scan_supports_forward_over_forward() -> qb::Result<()> {
    let f = |w: Tensor| -> qb::Result<Tensor> {
        let (c, _) = rollout(&qb::array([0.5, 1.0])?, &w)?;
        c.sum()
    };
    let d1 = |w: Tensor| Ok(qb::jvp(f, &w, &qb::array(1.0)?)?.1);
    let (_, d2) = qb::jvp(d1, &qb::array(0.8)?, &qb::array(1.0)?)?;
    let gg: Tensor =
        qb::grad(|w: Tensor| qb::grad(f).call::<Tensor, Tensor>(&w)).call(&qb::array(0.8)?)?;
    assert!(close(d2.item()?, gg.item()?, 1e-10));
    Ok(())
}

#[test]
fn e53_custom_rules_are_rejected_inside_region_bodies() {
    let layer = qb::checkpoint(|x: Tensor| x.tanh());
    let r: qb::Result<Tensor> =
        qb::jit(|x: Tensor| qb::fori_loop(0, 2, |_, c, _| layer.call(&c), &x).eval())
            .call(&qb::array([1.0]).unwrap());
    let err = r.unwrap_err();
    match err {
        Error::InvalidArgument { message } => assert_eq!(
            message,
            "checkpoint functions and solvers cannot be called inside a fori_loop body"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn e60_checkpointed_loop_vjp_equals_the_full_tape() -> qb::Result<()> {
    let long_loop = |(x, w): (Tensor, Tensor)| -> qb::Result<Tensor> {
        qb::fori_loop(0, 4096, |_, c, ops| (&c * &ops[0]).sin() + &c, &x)
            .operands(&[w])
            .eval()?
            .sum()
    };
    let args = (qb::linspace(0.0, 1.0, 512)?, qb::array(0.001)?);
    let checkpointed: (Tensor, Tensor) = qb::grad(long_loop).argnums(&[0, 1]).call(&args)?;
    let full: (Tensor, Tensor) = qb::grad(long_loop)
        .argnums(&[0, 1])
        .loop_tape(qb::LoopTape::Full)
        .call(&args)?;
    assert_eq!(checkpointed.0.to_vec::<f64>()?, full.0.to_vec::<f64>()?);
    assert_eq!(checkpointed.1.item()?.to_bits(), full.1.item()?.to_bits());
    // The checkpointed gradient stores ceil(4096 / 64) carries plus one block's tape: its plan
    // holds no [4096, 512] tape.
    let text = qb::jit(|(x, w): (Tensor, Tensor)| {
        qb::grad(long_loop)
            .argnums(&[0, 1])
            .call::<_, (Tensor, Tensor)>(&(x, w))
    })
    .lower(&args)?
    .as_text();
    assert!(text.contains("tensor<64x512xf64>"), "{text}");
    assert!(!text.contains("tensor<4096x512xf64>"), "{text}");
    Ok(())
}

/// Scalar loops under `jit` run machine code on the CPU, say so in the compile report, and give
/// the bits of the eager loops (which run op by op).
#[test]
fn jitted_scalar_loops_run_native_code_with_the_eager_bits() -> qb::Result<()> {
    let a = qb::array(0.7)?;
    let x0 = qb::array(1.25)?;
    let fori = qb::jit(|(x, a): (Tensor, Tensor)| decay(&x, &a)).lower(&(x0.clone(), a.clone()))?;
    let report = fori.compile_report();
    assert!(
        report.contains("fori (100 iterations): native code"),
        "{report}"
    );
    let jitted = fori.compile().call(&(x0.clone(), a.clone()))?;
    assert_eq!(jitted.item()?.to_bits(), decay(&x0, &a)?.item()?.to_bits());

    let sqrt = qb::jit(|a: Tensor| newton_sqrt(&a)).lower(&qb::array(2.0)?)?;
    let report = sqrt.compile_report();
    assert!(report.contains("while: native code"), "{report}");
    for v in [2.0f64, 0.3, 1e6] {
        let a = qb::array(v)?;
        let jitted = sqrt.compile().call(&a)?.item()?;
        assert_eq!(jitted.to_bits(), newton_sqrt(&a)?.item()?.to_bits());
        assert!(close(jitted, v.sqrt(), 1e-12));
    }
    Ok(())
}

#[test]
fn loop_forms_record_their_derivative_level_in_text() -> qb::Result<()> {
    let x0 = qb::array([1.0, 2.0])?;
    let text =
        qb::jit(|a: Tensor| qb::grad(|a: Tensor| decay(&x0, &a)?.sum()).call::<Tensor, Tensor>(&a))
            .lower(&qb::array(0.5)?)?
            .as_text();
    // Only the derivative is an output: the primal loop is dead code, the reverse pass is
    // made of fori_vjp regions (the block loops and, in their bodies, the block passes).
    assert!(!text.contains("= fori("), "{text}");
    assert!(text.contains("= fori_vjp("), "{text}");
    assert!(text.contains("level=1"), "{text}");
    assert!(text.contains("^body:"), "{text}");
    let text = qb::jit(|x: Tensor| safe_log(&x))
        .lower(&qb::array(1.0)?)?
        .as_text();
    assert!(text.contains("^then:") && text.contains("^else:"), "{text}");
    Ok(())
}

#[test]
fn fori_loop_eager_jit_unroll_agree_and_index_is_static_when_unrolled() -> qb::Result<()> {
    let body = |i: qb::LoopIndex, c: Tensor, _: &[Tensor]| -> qb::Result<Tensor> {
        (&c * 1.5 + i.tensor()).sin()
    };
    let x = qb::array([0.1, 0.2, 0.3])?;
    let eager = qb::fori_loop(2, 9, body, &x).eval()?;
    let jitted: Tensor = qb::jit(|x: Tensor| qb::fori_loop(2, 9, body, &x).eval()).call(&x)?;
    let unrolled: Tensor =
        qb::jit(|x: Tensor| qb::fori_loop(2, 9, body, &x).unroll(true).eval()).call(&x)?;
    assert_eq!(eager.to_vec::<f64>()?, jitted.to_vec::<f64>()?);
    assert_eq!(eager.to_vec::<f64>()?, unrolled.to_vec::<f64>()?);
    let seen = std::cell::RefCell::new(Vec::new());
    let _: Tensor = qb::jit(|x: Tensor| {
        qb::fori_loop(
            0,
            3,
            |i, c, _| {
                seen.borrow_mut().push(i.static_value());
                Ok(c)
            },
            &x,
        )
        .unroll(true)
        .eval()
    })
    .call(&x)?;
    assert_eq!(*seen.borrow(), vec![Some(0), Some(1), Some(2)]);
    // upper <= lower returns init.
    assert_eq!(
        qb::fori_loop(5, 5, body, &x).eval()?.to_vec::<f64>()?,
        x.to_vec::<f64>()?
    );
    Ok(())
}

#[test]
fn fori_loop_gradient_matches_finite_differences_in_f32_and_f64() -> qb::Result<()> {
    let f = |x: Tensor| -> qb::Result<Tensor> {
        qb::fori_loop(
            0,
            13,
            |i, c, _| (&c * 0.9).add(0.05 * i.tensor()).tanh(),
            &x,
        )
        .eval()?
        .sum()
    };
    let x = qb::array([0.3, -0.7, 1.1])?;
    let g: Tensor = qb::grad(f).call(&x)?;
    let eps = 1e-6;
    for k in 0..3 {
        let mut plus = x.to_vec::<f64>()?;
        let mut minus = plus.clone();
        plus[k] += eps;
        minus[k] -= eps;
        let fd = (f(qb::array(plus)?)?.item()? - f(qb::array(minus)?)?.item()?) / (2.0 * eps);
        assert!(close(g.to_vec::<f64>()?[k], fd, 1e-7));
    }
    let g32: Tensor = qb::grad(f).call(&x.astype(qb::F32)?)?;
    assert_eq!(g32.dtype(), qb::F32);
    for (a, b) in g32.to_vec::<f32>()?.iter().zip(g.to_vec::<f64>()?) {
        assert!((*a as f64 - b).abs() < 1e-5);
    }
    Ok(())
}

#[test]
fn region_contract_errors() {
    let x = qb::array([1.0, 2.0]).unwrap();
    // Carry shape change: SH13, eagerly and traced.
    let grow = |_: qb::LoopIndex, c: Tensor, _: &[Tensor]| qb::concat(&[c.clone(), c], 0);
    let err = qb::fori_loop(0, 2, grow, &x).eval().unwrap_err();
    assert_eq!(
        err.to_string(),
        "fori_loop: body changed the carry from float64[2] to float64[4]"
    );
    let r: qb::Result<Tensor> = qb::jit(|x: Tensor| qb::fori_loop(0, 2, grow, &x).eval()).call(&x);
    let err = r.unwrap_err();
    assert_eq!(
        err.to_string(),
        "fori_loop: body changed the carry from float64[2] to float64[4]"
    );
    // cond branches of different shapes.
    let r: qb::Result<Tensor> = qb::jit(|x: Tensor| {
        qb::cond(
            &x.sum()?.greater(0.0)?,
            |o| Ok(o[0].clone()),
            |o| o[0].sum(),
            &[&x],
        )
    })
    .call(&x);
    let err = r.unwrap_err();
    assert_eq!(
        err.to_string(),
        "cond branches return different shapes [2] and []"
    );
    // A bool carry.
    let flags = qb::array([1.0]).unwrap().greater(0.0).unwrap();
    assert!(matches!(
        qb::fori_loop(0, 1, |_, c, _| Ok(c), &flags).eval(),
        Err(Error::Type { .. })
    ));
    // A while predicate that is not a rank-0 bool.
    let err = qb::while_loop(|c, _| Ok(c.clone()), |c, _| Ok(c), &x)
        .eval()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    // A weak branch result (born from Rust scalars) adopts the other branch's dtype.
    let x32 = qb::F32.array(3.0).unwrap();
    let weak_zero = |_: &[Tensor]| qb::add(0.0, 0.0);
    let f = qb::jit(|x: Tensor| qb::cond(&x.less(0.0)?, |o| Ok(o[0].clone()), weak_zero, &[&x]));
    let out: Tensor = f.call(&x32).unwrap();
    assert_eq!(out.dtype(), qb::F32);
    assert_eq!(out.item().unwrap(), 0.0);
    let strong64 = |_: &[Tensor]| qb::array(0.0);
    let r: qb::Result<Tensor> =
        qb::jit(|x: Tensor| qb::cond(&x.less(0.0)?, |o| Ok(o[0].clone()), strong64, &[&x]))
            .call(&x32);
    assert!(matches!(r, Err(Error::DtypeMismatch { .. })), "{r:?}");
}

#[test]
fn vmap_of_fori_and_scan_match_per_example_loops() -> qb::Result<()> {
    let xs = qb::array([[1.0, 2.0], [3.0, 4.0], [0.5, -1.0]])?;
    let a = qb::array(0.5)?;
    let batched: Tensor = qb::vmap(|x: Tensor| decay(&x, &a)).call(&xs)?;
    for k in 0..3 {
        let row = decay(&xs.index(qb::s![k])?, &a)?;
        assert_eq!(
            batched.index(qb::s![k])?.to_vec::<f64>()?,
            row.to_vec::<f64>()?
        );
    }
    let ws = qb::array([0.8, 0.3])?;
    let c0 = qb::array([0.5, 1.0])?;
    let (cs, ys): (Tensor, Tensor) = qb::vmap(|w: Tensor| rollout(&c0, &w)).call(&ws)?;
    assert_eq!(cs.shape(), &[2, 2]);
    assert_eq!(ys.shape(), &[2, 4, 2]);
    let (c1, y1) = rollout(&c0, &qb::array(0.3)?)?;
    assert_eq!(cs.index(qb::s![1])?.to_vec::<f64>()?, c1.to_vec::<f64>()?);
    assert_eq!(ys.index(qb::s![1])?.to_vec::<f64>()?, y1.to_vec::<f64>()?);
    Ok(())
}

#[path = "../examples/control_flow.rs"]
mod example;

#[test]
fn control_flow_example_matches_closed_forms() -> qb::Result<()> {
    let check =
        |f: fn(Tensor) -> qb::Result<Tensor>, x: f64, value: f64, grad: f64| -> qb::Result<()> {
            let v: Tensor = qb::jit(f).call(&qb::array(x)?)?;
            let g: Tensor = qb::grad(f).call(&x)?;
            assert!(close(v.item()?, value, 1e-13), "{} vs {value}", v.item()?);
            assert!(close(g.item()?, grad, 1e-13), "{} vs {grad}", g.item()?);
            Ok(())
        };
    check(example::sign_cond, -1.5, 3.375, -6.75)?;
    check(example::sign_cond, 1.5, 2.25, 3.0)?;
    check(
        example::compound,
        2.0,
        2.0 * 1.01f64.powi(100),
        1.01f64.powi(100),
    )?;
    check(example::cumulative_products, 0.5, 9.6875, 30.75)?;
    let (v, t) = qb::jvp(example::newton_sqrt, &qb::array(2.0)?, &qb::array(1.0)?)?;
    assert!(close(v.item()?, 2f64.sqrt(), 1e-15));
    assert!(close(t.item()?, 0.5 / 2f64.sqrt(), 1e-12));
    example::main()
}

/// A nest of every region: a fori_loop whose body runs a scan whose step holds a cond.
fn nested(w: Tensor) -> qb::Result<Tensor> {
    qb::fori_loop(
        0,
        3,
        |i, c, ops| {
            let (c2, ys) = qb::scan(
                |c, _, ops| {
                    let c = qb::cond(
                        &c.sum()?.greater(0.0)?,
                        |o| (&o[0] * &o[1]).sin(),
                        |o| (&o[0] * 0.5).add(&o[1]),
                        &[&c, &ops[0]],
                    )?;
                    Ok((c.clone(), c.powi(2)?))
                },
                &c,
                4,
            )
            .operands(&[&ops[0]])
            .eval()?;
            (&c2 + ys.mean()?).add(i.tensor() * 0.01)
        },
        &qb::array([0.4, -0.3])?,
    )
    .operands(&[&w])
    .eval()?
    .sum()
}

#[test]
fn nested_regions_first_and_second_derivatives_match_finite_differences() -> qb::Result<()> {
    let value = |x: f64| nested(qb::array(x)?)?.item();
    let one =
        |f: fn(Tensor) -> qb::Result<Tensor>| move |v: Vec<Tensor>| Ok(vec![f(v[0].clone())?]);
    let gradient = |w: Tensor| qb::grad(nested).call::<Tensor, Tensor>(&w);
    let tangent = |v: Vec<Tensor>| Ok(vec![qb::jvp(nested, &v[0], &v[1])?.1]);
    for w in [0.7, -0.4, 1.3] {
        // Eager, jitted and unrolled agree; the gradient matches finite differences.
        let jitted: Tensor = qb::jit(nested).call(&qb::array(w)?)?;
        assert_eq!(jitted.item()?.to_bits(), value(w)?.to_bits());
        let x = [qb::array(w)?];
        // First order in both modes, and second order in every supported mode: reverse over
        // reverse, forward over reverse, and reverse over forward (forward over forward
        // through a fori_loop is TF3).
        check_grads(one(nested), &x, 2, Modes::REVERSE)?;
        check_grads(one(nested), &x, 1, Modes::FORWARD)?;
        check_grads(one(gradient), &x, 1, Modes::FORWARD)?;
        check_grads(
            tangent,
            &[qb::array(w)?, qb::array(1.0)?],
            1,
            Modes::REVERSE,
        )?;
        let rr: Tensor =
            qb::grad(|w: Tensor| qb::grad(nested).call::<Tensor, Tensor>(&w)).call(&w)?;
        let h: Tensor = qb::hessian(nested).call(&qb::array(w)?)?;
        assert!(close(h.item()?, rr.item()?, 1e-12));
    }
    Ok(())
}

#[test]
fn while_loop_jitted_and_vmapped_forward_mode() -> qb::Result<()> {
    let a = qb::array(7.0)?;
    let jitted: Tensor = qb::jit(|a: Tensor| newton_sqrt(&a)).call(&a)?;
    assert_eq!(jitted.item()?.to_bits(), newton_sqrt(&a)?.item()?.to_bits());
    // Forward mode under vmap: d sqrt(a) / da = 1 / (2 sqrt a).
    let ts: Tensor =
        qb::vmap(|a: Tensor| Ok(qb::jvp(|a: Tensor| newton_sqrt(&a), &a, &qb::ones_like(&a)?)?.1))
            .call(&qb::array([4.0, 9.0, 2.0])?)?;
    assert_vec(&ts, &[0.25, 1.0 / 6.0, 0.5 / 2f64.sqrt()], 1e-10);
    Ok(())
}

#[test]
fn value_and_grad_of_a_loop_runs_one_checkpointing_forward_pass() -> qb::Result<()> {
    let x0 = qb::array([1.0, 2.0])?;
    let f = |a: Tensor| decay(&x0, &a)?.sum();
    let vg = |a: Tensor| qb::value_and_grad(f).call::<Tensor, (Tensor, Tensor)>(&a);
    let (v, g): (Tensor, Tensor) = qb::jit(vg).call(&qb::array(0.5)?)?;
    // The value comes from the block loops of the VJP, bit for bit the plain loop's value.
    assert_eq!(v.item()?.to_bits(), f(qb::array(0.5)?)?.item()?.to_bits());
    assert!(close(g.item()?, -1.82644353, 1e-8));
    let text = qb::jit(vg).lower(&qb::array(0.5)?)?.as_text();
    assert!(
        !text.contains("= fori("),
        "the primal loop is not run separately:\n{text}"
    );
    Ok(())
}

#[test]
fn while_loop_forward_over_forward_and_vmap_of_loop_gradients() -> qb::Result<()> {
    // d²/da² sqrt(a) = -1 / (4 a^1.5), by forward-over-forward through the while loop.
    let d1 = |a: Tensor| Ok(qb::jvp(|a: Tensor| newton_sqrt(&a), &a, &qb::array(1.0)?)?.1);
    let (t1, t2) = qb::jvp(d1, &qb::array(4.0)?, &qb::array(1.0)?)?;
    assert!(close(t1.item()?, 0.25, 1e-12));
    assert!(close(t2.item()?, -1.0 / 32.0, 1e-10), "{}", t2.item()?);
    // vmap of the reverse-mode loop gradient equals the per-example gradients.
    let x0 = qb::array([1.0, 2.0])?;
    let g = |a: Tensor| qb::grad(|a: Tensor| decay(&x0, &a)?.sum()).call::<Tensor, Tensor>(&a);
    let batched: Tensor = qb::vmap(g).call(&qb::array([0.5, 0.1, -0.3])?)?;
    for (k, a) in [0.5, 0.1, -0.3].into_iter().enumerate() {
        assert_eq!(
            batched.to_vec::<f64>()?[k].to_bits(),
            g(qb::array(a)?)?.item()?.to_bits()
        );
    }
    Ok(())
}

fn bounded_sqrt(a: &Tensor, max_trips: usize) -> qb::Result<(Tensor, qb::WhileInfo)> {
    qb::while_loop(
        |x, ops| (x * x - &ops[0]).abs().greater(1e-12 * &ops[0]),
        |x, ops| (&x + &ops[0] / &x).mul(0.5),
        a,
    )
    .operands(&[&a])
    .max_trips(max_trips)
    .eval_with_info()
}

#[test]
fn while_loop_with_max_trips_has_a_reverse_mode() -> qb::Result<()> {
    let f = |a: Tensor| Ok(bounded_sqrt(&a, 100)?.0);
    for a in [2.0, 9.0, 0.3] {
        let g: Tensor = qb::grad(f).call(&a)?;
        assert!(
            close(g.item()?, 0.5 / a.sqrt(), 1e-10),
            "{a}: {}",
            g.item()?
        );
        // Reverse over reverse: d²/da² sqrt(a) = -1 / (4 a^1.5).
        let h: Tensor = qb::grad(|a: Tensor| qb::grad(f).call::<Tensor, Tensor>(&a)).call(&a)?;
        assert!(
            close(h.item()?, -0.25 / a.powf(1.5), 1e-8),
            "{a}: {}",
            h.item()?
        );
        // Jitted, the gradient is the eager one bit for bit, and so is value_and_grad's value.
        let jg: Tensor =
            qb::jit(|a: Tensor| qb::grad(f).call::<Tensor, Tensor>(&a)).call(&qb::array(a)?)?;
        assert_eq!(jg.item()?.to_bits(), g.item()?.to_bits());
        let (v, _): (Tensor, Tensor) =
            qb::jit(|a: Tensor| qb::value_and_grad(f).call::<Tensor, (Tensor, Tensor)>(&a))
                .call(&qb::array(a)?)?;
        assert_eq!(v.item()?.to_bits(), f(qb::array(a)?)?.item()?.to_bits());
    }
    // The text records the bound.
    let text = qb::jit(f).lower(&qb::array(2.0)?)?.as_text();
    assert!(text.contains("max_trips=100"), "{text}");
    Ok(())
}

#[test]
fn while_loop_trips_and_its_bound_eagerly_and_traced() -> qb::Result<()> {
    let a = qb::array(2.0)?;
    let (x, info) = bounded_sqrt(&a, 100)?;
    let trips = info.trips.item()?;
    assert!(info.success.item_bool()?);
    assert!((3.0..10.0).contains(&trips), "{trips}");
    // Traced: the same trips and values; the forward pass stopped when the predicate failed.
    let (jx, jtrips, jok): (Tensor, Tensor, Tensor) = qb::jit(|a: Tensor| {
        let (x, info) = bounded_sqrt(&a, 100)?;
        Ok((x, info.trips, info.success))
    })
    .call(&a)?;
    assert_eq!(jx.item()?.to_bits(), x.item()?.to_bits());
    assert_eq!(jtrips.item()?, trips);
    assert!(jok.item_bool()?);
    // Too few trips: eagerly a typed error naming the bound; traced, success is false.
    let err = qb::while_loop(
        |x, ops| (x * x - &ops[0]).abs().greater(1e-12 * &ops[0]),
        |x, ops| (&x + &ops[0] / &x).mul(0.5),
        &a,
    )
    .operands(&[&a])
    .max_trips(2)
    .eval()
    .unwrap_err();
    assert!(
        matches!(err, qb::Error::LoopMaxTrips { max_trips: 2 }),
        "{err:?}"
    );
    assert!(err.to_string().contains("raise max_trips"), "{err}");
    let (t2, ok2): (Tensor, Tensor) = qb::jit(|a: Tensor| {
        let (_, info) = bounded_sqrt(&a, 2)?;
        Ok((info.trips, info.success))
    })
    .call(&a)?;
    assert_eq!(t2.item()?, 2.0);
    assert!(!ok2.item_bool()?);
    // Exactly enough trips is a success.
    let (_, exact) = bounded_sqrt(&a, trips as usize)?;
    assert!(exact.success.item_bool()?);
    // Under vmap each example reports its own trips, and gradients are per example.
    let batch = qb::array([2.0, 1e6, 0.25])?;
    let ts: Tensor = qb::vmap(|a: Tensor| Ok(bounded_sqrt(&a, 100)?.1.trips)).call(&batch)?;
    let per: Vec<f64> = [2.0, 1e6, 0.25]
        .iter()
        .map(|&a| bounded_sqrt(&qb::array(a)?, 100)?.1.trips.item())
        .collect::<qb::Result<_>>()?;
    assert_eq!(ts.to_vec::<f64>()?, per);
    let gs: Tensor = qb::vmap(|a: Tensor| {
        qb::grad(|a: Tensor| Ok(bounded_sqrt(&a, 100)?.0)).call::<Tensor, Tensor>(&a)
    })
    .call(&batch)?;
    assert_vec(&gs, &[0.5 / 2f64.sqrt(), 0.5e-3, 1.0], 1e-9);
    // A zero bound is rejected.
    let err = bounded_sqrt(&a, 0).unwrap_err();
    assert!(
        err.to_string().contains("max_trips must be at least 1"),
        "{err}"
    );
    Ok(())
}

/// Every solver and custom rule (TF5's list) in every kind of region body, eagerly and under
/// `jit`: the same program is refused with the same TF5 in both (an eager loop body used to run
/// `cg` and `newton` that its traced form refused). An unrolled loop is plain code in both
/// forms and accepts them.
#[test]
fn solvers_and_custom_rules_in_region_bodies_are_tf5_eagerly_and_traced() {
    type Inner = fn(&Tensor) -> qb::Result<Tensor>;
    let calls: [(&str, Inner); 6] = [
        ("cg", |x| {
            qb::linalg::cg(|v: &Tensor, _: &[Tensor]| v.mul(2.0), x).eval()
        }),
        ("gmres", |x| {
            qb::linalg::gmres(|v: &Tensor, _: &[Tensor]| v.mul(2.0), x).eval()
        }),
        ("newton", |x| {
            qb::newton(|v: &Tensor, a: &[Tensor]| v.mul(2.0)?.sub(&a[0]), x)
                .args(&[x])
                .eval()
        }),
        ("custom_vjp", |x| {
            qb::custom_vjp(|x: Tensor| x.sin())
                .defvjp(
                    |x: Tensor| Ok((x.sin()?, x)),
                    |(x, g): (Tensor, Tensor)| g.mul(x.cos()?),
                )
                .call(x)
        }),
        ("custom_jvp", |x| {
            qb::custom_jvp(|x: Tensor| x.sin())
                .defjvp(|(x, t): (Tensor, Tensor)| Ok((x.sin()?, t.mul(x.cos()?)?)))
                .call(x)
        }),
        ("checkpoint", |x| {
            qb::checkpoint(|x: Tensor| x.sin()).call(x)
        }),
    ];
    type Region = fn(Inner, &Tensor) -> qb::Result<Tensor>;
    let regions: [(&str, &str, Region); 6] = [
        ("cond true branch", "cond", |inner, x| {
            qb::cond(
                &qb::array(true)?,
                |o: &[Tensor]| inner(&o[0]),
                |o: &[Tensor]| Ok(o[0].clone()),
                &[x],
            )
        }),
        ("cond false branch", "cond", |inner, x| {
            qb::cond(
                &qb::array(false)?,
                |o: &[Tensor]| Ok(o[0].clone()),
                |o: &[Tensor]| inner(&o[0]),
                &[x],
            )
        }),
        ("fori_loop", "fori_loop", |inner, x| {
            qb::fori_loop(0, 2, move |_, c: Tensor, _: &[Tensor]| inner(&c), x).eval()
        }),
        ("scan", "scan", |inner, x| {
            qb::scan(move |c: Tensor, _, _: &[Tensor]| Ok((inner(&c)?, c)), x, 2)
                .eval()
                .map(|(c, _)| c)
        }),
        ("while_loop body", "while_loop", |inner, x| {
            qb::while_loop(
                |c: &Tensor, _: &[Tensor]| c.sum()?.less(1e9),
                move |c: Tensor, _: &[Tensor]| inner(&c),
                x,
            )
            .max_trips(2)
            .eval_with_info()
            .map(|(c, _)| c)
        }),
        ("while_loop cond", "while_loop", |inner, x| {
            qb::while_loop(
                move |c: &Tensor, _: &[Tensor]| inner(c)?.sum()?.less(1e9),
                |c: Tensor, _: &[Tensor]| c.mul(2.0),
                x,
            )
            .max_trips(2)
            .eval_with_info()
            .map(|(c, _)| c)
        }),
    ];
    let x = qb::array([1.0, 2.0]).unwrap();
    let mut checked = 0;
    for (call_name, inner) in calls {
        for (region_name, primitive, region) in regions {
            let eager = region(inner, &x);
            let traced = qb::jit(|x: Tensor| region(inner, &x)).call(&x);
            for (mode, r) in [("eagerly", eager), ("under jit", traced)] {
                match r {
                    Err(Error::InvalidArgument { message }) => assert!(
                        message.starts_with(&format!(
                            "{} functions and solvers cannot be called inside a {primitive} body",
                            match call_name {
                                "cg" | "gmres" | "newton" => "custom_vjp",
                                other => other,
                            }
                        )),
                        "{call_name} in {region_name} {mode}: {message}"
                    ),
                    other => panic!("{call_name} in {region_name} {mode}: {other:?}"),
                }
                checked += 1;
            }
        }
        // Unrolled, the loops are plain code eagerly and traced: the call runs in both and
        // gives the same value.
        let unrolled = |x: &Tensor| {
            let c = qb::fori_loop(0, 2, move |_, c: Tensor, _: &[Tensor]| inner(&c), x)
                .unroll(true)
                .eval()?;
            qb::scan(move |c: Tensor, _, _: &[Tensor]| Ok((inner(&c)?, c)), &c, 1)
                .unroll(true)
                .eval()
                .map(|(c, _)| c)
        };
        let eager = unrolled(&x).unwrap().to_vec::<f64>().unwrap();
        let traced = qb::jit(|x: Tensor| unrolled(&x)).call(&x).unwrap();
        let traced = traced.to_vec::<f64>().unwrap();
        for (e, t) in eager.iter().zip(&traced) {
            assert!(
                (e - t).abs() <= 1e-6 * e.abs().max(1.0),
                "{call_name}: {eager:?} vs {traced:?}"
            );
        }
    }
    assert_eq!(checked, 6 * 6 * 2);
}
