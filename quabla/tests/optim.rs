//! `qb::optim`: acceptance E68 (Adam, functional loop, exact bits), E70 (schedules), E71
//! (global-norm clipping), the optimizer state through save/load, and typed errors for bad
//! options. References are the spec's outputs and closed forms computed here in f64.

use qb::optim::{self, Optimizer, Schedule};
use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::collections::BTreeMap;

type Params = BTreeMap<String, Tensor>;

fn regression() -> qb::Result<(Tensor, Tensor)> {
    let x = qb::linspace(-1.0, 1.0, 32)?.reshape([32, 1])?;
    let y = (x.mul(3.0)? - 0.5)?;
    Ok((x, y))
}

fn zero_params() -> qb::Result<Params> {
    Ok(BTreeMap::from([
        ("w".to_string(), qb::zeros([1, 1])?),
        ("b".to_string(), qb::zeros([1])?),
    ]))
}

fn loss(p: &Params, x: &Tensor, y: &Tensor) -> qb::Result<Tensor> {
    (x.matmul(&p["w"])? + &p["b"] - y).powi(2).mean()
}

#[test]
fn e68_adam_on_linear_regression_gives_the_spec_bits() -> qb::Result<()> {
    let (x, y) = regression()?;
    let mut params = zero_params()?;
    let opt = optim::Adam::new(0.1);
    let mut state = opt.init(&params)?;
    let step = qb::jit(|(p, x, y): (Params, Tensor, Tensor)| {
        qb::value_and_grad(|(p, x, y): (Params, Tensor, Tensor)| loss(&p, &x, &y))
            .call::<Tensor, (Tensor, Params)>(&(p, x, y))
    });
    let mut value = qb::array(0.0)?;
    for _ in 0..300 {
        let (v, grads) = step.call(&(params.clone(), x.clone(), y.clone()))?;
        value = v;
        (params, state) = opt.update(&params, &grads, &state)?;
    }
    let value = value.item()?;
    assert!(
        (value - 9.0477979e-14).abs() <= 1e-3 * 9.0477979e-14,
        "{value:e}"
    );
    let w = params["w"].to_vec::<f64>()?[0];
    let b = params["b"].to_vec::<f64>()?[0];
    assert!((w - 3.0000004277208028).abs() <= 1e-9, "{w:?}");
    assert!((b - -0.49999999706101544).abs() <= 1e-9, "{b:?}");
    let last = loss(&params, &x, &y)?.item()?;
    assert!(
        (last - 6.49246356e-14).abs() <= 5e-2 * 6.49246356e-14,
        "{last:e}"
    );
    assert_eq!(state.steps().unwrap(), 300);
    Ok(())
}

#[test]
fn adam_first_step_matches_the_formula_in_f64() -> qb::Result<()> {
    // One step from p = 1 with gradient g: m = (1-b1) g, v = (1-b2) g^2, the bias corrections
    // cancel them exactly up to rounding, so the step is lr * g / (|g| + eps).
    let p = qb::array([1.0, -2.0])?;
    let g = qb::array([0.5, -4.0])?;
    let opt = optim::Adam::new(0.01);
    let (new, state) = opt.update(&p, &g, &opt.init(&p)?)?;
    let (b1, b2, eps, lr) = (0.9f64, 0.999f64, 1e-8, 0.01);
    for (k, (&p0, &g0)) in [1.0f64, -2.0].iter().zip(&[0.5f64, -4.0]).enumerate() {
        let m = b1 * 0.0 + (1.0 - b1) * g0;
        let v = b2 * 0.0 + (1.0 - b2) * g0 * g0;
        let m_hat = m / (1.0 - b1.powf(1.0));
        let v_hat = v / (1.0 - b2.powf(1.0));
        let expect = p0 - lr * m_hat / (v_hat.sqrt() + eps);
        assert_eq!(new.to_vec::<f64>()?[k].to_bits(), expect.to_bits());
        assert_eq!(
            state.m.as_ref().unwrap().to_vec::<f64>()?[k].to_bits(),
            m.to_bits()
        );
    }
    Ok(())
}

#[test]
fn adamw_decays_the_pre_update_parameter_and_sgd_steps_against_the_gradient() -> qb::Result<()> {
    let p = qb::array([2.0])?;
    let g = qb::array([0.0])?;
    // A zero gradient leaves only the decay: p - lr * wd * p.
    let opt = optim::AdamW::new(0.1).weight_decay(0.5);
    let (new, _) = opt.update(&p, &g, &opt.init(&p)?)?;
    assert_eq!(new.to_vec::<f64>()?, vec![2.0 - 0.1 * (0.0 + 0.5 * 2.0)]);
    let sgd = optim::Sgd::new(0.25);
    let (new, state) = sgd.update(&p, &qb::array([4.0])?, &sgd.init(&p)?)?;
    assert_eq!(new.to_vec::<f64>()?, vec![1.0]);
    assert!(state.m.is_none() && state.steps().unwrap() == 1);
    Ok(())
}

#[test]
fn float32_parameters_keep_their_dtype_with_float64_moments() -> qb::Result<()> {
    let p = qb::F32.array([1.0, 2.0])?;
    let g = qb::F32.array([0.1, -0.3])?;
    let opt = optim::Adam::new(1e-3);
    let (new, state) = opt.update(&p, &g, &opt.init(&p)?)?;
    assert_eq!(new.dtype(), qb::F32);
    assert_eq!(state.m.unwrap().dtype(), qb::F64);
    // The float64 result rounded once to float32.
    let g0 = 0.1f32 as f64;
    let m_hat = (0.1 * g0) / (1.0 - 0.9f64);
    let v_hat = (0.001 * g0 * g0) / (1.0 - 0.999f64);
    let expect = (1.0 - 1e-3 * m_hat / (v_hat.sqrt() + 1e-8)) as f32;
    assert_eq!(new.to_vec::<f32>()?[0].to_bits(), expect.to_bits());
    Ok(())
}

#[test]
fn a_schedule_is_evaluated_at_the_completed_update_count() -> qb::Result<()> {
    let p = qb::array([0.0])?;
    let g = qb::array([1.0])?;
    let sgd = optim::Sgd::new(optim::LearningRate::schedule(|t: u64| 1.0 + t as f64));
    let mut state = sgd.init(&p)?;
    let mut params = p;
    for _ in 0..3 {
        (params, state) = sgd.update(&params, &g, &state)?;
    }
    // Rates 1, 2, 3.
    assert_eq!(params.to_vec::<f64>()?, vec![-6.0]);
    let bad = optim::Sgd::new(optim::LearningRate::schedule(|t: u64| 1.0 - t as f64 * 2.0));
    let s0 = bad.init(&params)?;
    let (params, s1) = bad.update(&params, &g, &s0)?;
    let err = bad.update(&params, &g, &s1).unwrap_err().to_string();
    assert_eq!(
        err,
        "learning-rate schedule gave -1 at step 1; a rate must be finite and >= 0"
    );
    Ok(())
}

#[test]
fn e70_schedules() -> qb::Result<()> {
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-8 * b.abs().max(1e-300) || a == b;
    let s = optim::warmup_cosine_decay(0.0, 0.1, 10, 100);
    let got: Vec<f64> = [0, 5, 10, 55, 100]
        .iter()
        .map(|&t| s.value(t).map(|v| (v * 1e4).round() / 1e4))
        .collect::<qb::Result<_>>()?;
    assert_eq!(got, vec![0.0, 0.05, 0.1, 0.05, 0.0]);
    let p = optim::piecewise_constant(&[10, 20], &[1.0, 0.5, 0.1]);
    assert_eq!([0, 10, 25].map(|t| p.value(t).unwrap()), [1.0, 0.5, 0.1]);
    let e = optim::exponential_decay(1e-2, 1000, 0.5);
    for (t, want) in [
        (0, 0.01),
        (500, 0.01 * 0.5f64.sqrt()),
        (1000, 0.005),
        (2000, 0.0025),
    ] {
        assert!(close(e.value(t)?, want), "{t}: {}", e.value(t)?);
    }
    assert!(close(e.value(500)?, 0.00707107) || (e.value(500)? - 0.00707107).abs() < 1e-8);
    let c = optim::cosine_decay(1.0, 100);
    let got = [0, 50, 100, 150].map(|t| c.value(t).unwrap());
    assert!(close(got[0], 1.0) && close(got[1], 0.5) && got[2] == 0.0 && got[3] == 0.0);
    let err = optim::exponential_decay(1e-2, 0, 0.5)
        .validate()
        .unwrap_err();
    assert!(matches!(err, qb::Error::InvalidArgument { .. }));
    assert!(err
        .to_string()
        .starts_with("invalid exponential_decay configuration: "));
    // Staircase, begin and end bounds, alpha.
    let st = optim::exponential_decay(1.0, 10, 0.5)
        .staircase(true)
        .transition_begin(5);
    assert_eq!(
        [5, 14, 15, 25].map(|t| st.value(t).unwrap()),
        [1.0, 1.0, 0.5, 0.25]
    );
    let floor = optim::exponential_decay(1.0, 1, 0.5).end_value(0.2);
    assert_eq!(floor.value(10)?, 0.2);
    let ceiling = optim::exponential_decay(1.0, 1, 2.0).end_value(3.0);
    assert_eq!(ceiling.value(10)?, 3.0);
    let ca = optim::cosine_decay(2.0, 10).alpha(0.1);
    assert!(close(ca.value(10)?, 0.2));
    // Configuration errors.
    for err in [
        optim::cosine_decay(1.0, 0).validate(),
        optim::warmup_cosine_decay(0.0, 1.0, 11, 10).validate(),
        optim::piecewise_constant(&[10, 10], &[1.0, 2.0, 3.0]).validate(),
        optim::piecewise_constant(&[10], &[1.0]).validate(),
        optim::exponential_decay(1.0, 10, 0.0).validate(),
        optim::constant(f64::NAN).validate(),
    ] {
        assert!(
            matches!(err, Err(qb::Error::InvalidArgument { .. })),
            "{err:?}"
        );
    }
    Ok(())
}

fn dict(entries: &[(&str, Tensor)]) -> Params {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

#[test]
fn e71_global_norm_clipping() -> qb::Result<()> {
    let (c, norm) = optim::clip_by_global_norm(
        &dict(&[("a", qb::array([3.0])?), ("b", qb::array([4.0])?)]),
        1.0,
    )?;
    assert_eq!(norm, 5.0);
    assert!((c["a"].to_vec::<f64>()?[0] - 0.6).abs() <= 1e-15);
    assert!((c["b"].to_vec::<f64>()?[0] - 0.8).abs() <= 1e-15);
    assert_eq!(c["a"].dtype(), qb::F64);
    let (c, norm) = optim::clip_by_global_norm(&dict(&[("a", qb::array([f64::INFINITY])?)]), 1.0)?;
    assert_eq!(norm, f64::INFINITY);
    assert!(c["a"].to_vec::<f64>()?[0].is_nan());
    let (c, norm) = optim::clip_by_global_norm(&dict(&[("a", qb::zeros([2])?)]), 1.0)?;
    assert_eq!(norm, 0.0);
    assert_eq!(c["a"].to_vec::<f64>()?, vec![0.0, 0.0]);
    // NaN anywhere: norm NaN and every leaf all-NaN.
    let (c, norm) = optim::clip_by_global_norm(
        &dict(&[("a", qb::array([1.0, f64::NAN])?), ("b", qb::array([2.0])?)]),
        1.0,
    )?;
    assert!(norm.is_nan());
    assert!(c
        .values()
        .all(|t| t.to_vec::<f64>().unwrap().iter().all(|v| v.is_nan())));
    // Below the bound nothing changes; max-scaling keeps huge values finite.
    let (c, norm) = optim::clip_by_global_norm(&qb::array([1e200, 1e200])?, 1e300)?;
    assert!((norm - 2f64.sqrt() * 1e200).abs() <= 1e-15 * norm);
    assert_eq!(c.to_vec::<f64>()?, vec![1e200, 1e200]);
    // float32 leaves keep their dtype.
    let (c, _) = optim::clip_by_global_norm(&qb::F32.array([3.0, 4.0])?, 1.0)?;
    assert_eq!(c.dtype(), qb::F32);
    assert_eq!(
        c.to_vec::<f32>()?,
        vec![(3.0f64 * 0.2) as f32, (4.0f64 * 0.2) as f32]
    );
    Ok(())
}

#[test]
fn the_optimizer_state_round_trips_through_save_and_load() -> qb::Result<()> {
    let (x, y) = regression()?;
    let mut params = zero_params()?;
    let opt = optim::Adam::new(0.1);
    let mut state = opt.init(&params)?;
    let vg = qb::value_and_grad(|(p, x, y): (Params, Tensor, Tensor)| loss(&p, &x, &y));
    for _ in 0..3 {
        let (_, g): (Tensor, Params) = vg.call(&(params.clone(), x.clone(), y.clone()))?;
        (params, state) = opt.update(&params, &g, &state)?;
    }
    let mut bytes = Vec::new();
    qb::save(&mut bytes, &state)?;
    let back: optim::State<Params> = qb::load_as(&mut bytes.as_slice())?;
    assert_eq!(back.steps().unwrap(), 3);
    for (a, b) in [(&state.m, &back.m), (&state.v, &back.v)] {
        for (k, t) in a.as_ref().unwrap() {
            let u = &b.as_ref().unwrap()[k];
            let bits = |t: &Tensor| {
                t.to_vec::<f64>()
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(t), bits(u));
        }
    }
    // Continuing from the loaded state equals continuing from the original.
    let (_, g): (Tensor, Params) = vg.call(&(params.clone(), x.clone(), y.clone()))?;
    let (p1, _) = opt.update(&params, &g, &state)?;
    let (p2, _) = opt.update(&params, &g, &back)?;
    assert_eq!(p1["w"].to_vec::<f64>()?, p2["w"].to_vec::<f64>()?);
    Ok(())
}

#[test]
fn bad_options_and_inputs_are_typed_errors() -> qb::Result<()> {
    let p = qb::array([1.0])?;
    let msg = |e: qb::Error| e.to_string();
    assert_eq!(
        msg(optim::Adam::new(0.1).b1(1.0).init(&p).unwrap_err()),
        "Adam b1 and b2 must lie in [0, 1)"
    );
    assert_eq!(
        msg(optim::Adam::new(-1.0).init(&p).unwrap_err()),
        "learning_rate must be a finite positive number"
    );
    assert_eq!(
        msg(optim::Adam::new(0.1).eps(0.0).init(&p).unwrap_err()),
        "eps must be a finite positive number"
    );
    assert_eq!(
        msg(optim::Sgd::new(0.1)
            .clip_norm(f64::NAN)
            .init(&p)
            .unwrap_err()),
        "clip_norm must be a finite positive number"
    );
    assert!(optim::AdamW::new(0.1).weight_decay(-1.0).init(&p).is_err());
    assert_eq!(
        msg(optim::clip_by_global_norm(&p, 0.0).unwrap_err()),
        "max_norm must be a finite positive number"
    );
    // A bool leaf (TY12) and a state without moments (AR6).
    let bad = dict(&[("flag", qb::array([true])?)]);
    let err = optim::Adam::new(0.1).init(&bad).unwrap_err();
    assert!(matches!(err, qb::Error::Type { .. }));
    assert_eq!(
        err.to_string(),
        "Adam parameters and gradients must be floating; got bool at ['flag']"
    );
    let opt = optim::Adam::new(0.1);
    let empty = optim::State {
        step: qb::array(0.0)?,
        m: None,
        v: None,
    };
    assert_eq!(
        msg(opt.update(&p, &p, &empty).unwrap_err()),
        "Adam state is missing one of the keys \"step\", \"m\", \"v\""
    );
    // Gradients of another shape.
    let err = opt
        .update(&p, &qb::array([1.0, 2.0])?, &opt.init(&p)?)
        .unwrap_err();
    assert!(matches!(err, qb::Error::Shape { .. }), "{err:?}");
    Ok(())
}

type Data = (Tensor, Tensor);
/// A deferred run of the functional loop.
type Reference<'a> = Box<dyn Fn() -> qb::Result<(Params, optim::State<Params>)> + 'a>;

fn data_loss(p: &Params, d: &Data) -> qb::Result<Tensor> {
    loss(p, &d.0, &d.1)
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec::<f64>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// The functional loop of E68 for `steps` steps with `opt`.
fn functional<O: Optimizer>(opt: &O, steps: usize) -> qb::Result<(Params, optim::State<Params>)> {
    let (x, y) = regression()?;
    let mut params = zero_params()?;
    let mut state = opt.init(&params)?;
    let step = qb::jit(|(p, x, y): (Params, Tensor, Tensor)| {
        qb::value_and_grad(|(p, x, y): (Params, Tensor, Tensor)| loss(&p, &x, &y))
            .call::<Tensor, (Tensor, Params)>(&(p, x, y))
    });
    for _ in 0..steps {
        let (_, grads) = step.call(&(params.clone(), x.clone(), y.clone()))?;
        (params, state) = opt.update(&params, &grads, &state)?;
    }
    Ok((params, state))
}

#[test]
fn e69_the_trainer_is_bit_identical_to_the_functional_loop() -> qb::Result<()> {
    let (reference, ref_state) = functional(&optim::Adam::new(0.1), 300)?;
    let mut trainer = optim::Trainer::new(
        data_loss,
        zero_params()?,
        optim::Adam::new(0.1),
        regression()?,
    )
    .build()?;
    for _ in 0..300 {
        trainer.step()?;
    }
    let loss = trainer.loss()?;
    assert_eq!(format!("{loss}"), "Tensor(6.49246356e-14, dtype=float64)");
    let params = trainer.params()?;
    for k in ["w", "b"] {
        assert_eq!(bits(&params[k]), bits(&reference[k]), "{k}");
    }
    let state = trainer.opt_state()?;
    assert_eq!(state.steps().unwrap(), 300);
    assert_eq!(
        bits(&state.v.unwrap()["w"]),
        bits(&ref_state.v.unwrap()["w"])
    );
    assert!(format!("{trainer:?}").contains("Trainer"));
    Ok(())
}

#[test]
fn trainer_with_schedule_clipping_adamw_and_sgd_matches_the_functional_loop() -> qb::Result<()> {
    let schedule = optim::exponential_decay(0.1, 10, 0.5);
    let cases: Vec<(Reference<'_>, Params)> = vec![
        (
            Box::new(|| functional(&optim::Adam::new(schedule).clip_norm(0.5), 40)),
            {
                let mut t = optim::Trainer::new(
                    data_loss,
                    zero_params()?,
                    optim::Adam::new(schedule).clip_norm(0.5),
                    regression()?,
                )
                .build()?;
                for _ in 0..40 {
                    t.step()?;
                }
                t.params()?
            },
        ),
        (
            Box::new(|| functional(&optim::AdamW::new(0.05).weight_decay(0.01), 40)),
            {
                let mut t = optim::Trainer::new(
                    data_loss,
                    zero_params()?,
                    optim::AdamW::new(0.05).weight_decay(0.01),
                    regression()?,
                )
                .build()?;
                for _ in 0..40 {
                    t.step()?;
                }
                t.params()?
            },
        ),
        (Box::new(|| functional(&optim::Sgd::new(schedule), 40)), {
            let mut t = optim::Trainer::new(
                data_loss,
                zero_params()?,
                optim::Sgd::new(schedule),
                regression()?,
            )
            .build()?;
            for _ in 0..40 {
                t.step()?;
            }
            t.params()?
        }),
    ];
    for (i, (reference, trained)) in cases.into_iter().enumerate() {
        let (reference, _) = reference()?;
        for k in ["w", "b"] {
            assert_eq!(bits(&trained[k]), bits(&reference[k]), "case {i}, {k}");
        }
    }
    Ok(())
}

#[test]
fn step_with_replaces_the_batch_and_refuses_a_mismatched_one() -> qb::Result<()> {
    let (x, y) = regression()?;
    let mut trainer = optim::Trainer::new(
        data_loss,
        zero_params()?,
        optim::Adam::new(0.1),
        (x.clone(), y.clone()),
    )
    .batch_argnums(&[0, 1])
    .build()?;
    // The same batch as the data gives the same step as step().
    let mut plain = optim::Trainer::new(
        data_loss,
        zero_params()?,
        optim::Adam::new(0.1),
        (x.clone(), y.clone()),
    )
    .build()?;
    trainer.step_with(&(x.clone(), y.clone()))?;
    plain.step()?;
    assert_eq!(bits(&trainer.params()?["w"]), bits(&plain.params()?["w"]));
    // Half the targets: the loss is measured on the new data.
    let y2 = y.mul(0.5)?;
    trainer.step_with(&(x.clone(), y2.clone()))?;
    let expect = loss(&trainer.params()?, &x, &y2)?.item()?;
    assert_eq!(trainer.loss()?.item()?.to_bits(), expect.to_bits());
    let before = bits(&trainer.params()?["w"]);
    let steps = trainer.steps();
    for bad in [
        trainer.step_with(&(qb::zeros([16, 1])?, y.clone())),
        trainer.step_with(&(x.astype(qb::F32)?, y.clone())),
        trainer.step_with(&(x.clone(),)),
    ] {
        let err = bad.unwrap_err();
        assert!(matches!(err, qb::Error::Structure { .. }), "{err:?}");
    }
    let err = trainer
        .step_with(&(qb::zeros([16, 1])?, y.clone()))
        .unwrap_err();
    assert!(
        err.to_string().starts_with("compiled function expects"),
        "{err}"
    );
    assert_eq!(bits(&trainer.params()?["w"]), before);
    assert_eq!(trainer.steps(), steps);
    // A bad batch_argnums is refused at build.
    let err = optim::Trainer::new(data_loss, zero_params()?, optim::Adam::new(0.1), (x, y))
        .batch_argnums(&[2])
        .build()
        .unwrap_err();
    assert!(matches!(err, qb::Error::InvalidArgument { .. }));
    Ok(())
}

#[test]
fn a_schedule_never_retraces_the_trainer() -> qb::Result<()> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static TRACES: AtomicUsize = AtomicUsize::new(0);
    let counted = |p: &Params, d: &Data| {
        TRACES.fetch_add(1, Ordering::SeqCst);
        data_loss(p, d)
    };
    let mut trainer = optim::Trainer::new(
        counted,
        zero_params()?,
        optim::Adam::new(optim::cosine_decay(0.1, 5)),
        regression()?,
    )
    .build()?;
    let traced = TRACES.load(Ordering::SeqCst);
    assert_eq!(traced, 1);
    for _ in 0..10 {
        trainer.step()?;
    }
    assert_eq!(TRACES.load(Ordering::SeqCst), traced);
    Ok(())
}

#[test]
fn a_blown_up_loss_stops_training_and_keeps_the_last_finite_check() -> qb::Result<()> {
    // SGD with a rate far above 2/L diverges geometrically on this quadratic: the loss
    // overflows to inf after a few hundred steps.
    let (x, y) = regression()?;
    let mut trainer = optim::Trainer::new(data_loss, zero_params()?, optim::Sgd::new(50.0), (x, y))
        .check_finite_every(10)
        .build()?;
    let mut snapshots = Vec::new();
    let err = loop {
        if trainer.steps() % 10 == 0 {
            snapshots.push((trainer.steps(), bits(&trainer.params()?["w"])));
        }
        match trainer.step() {
            Ok(()) => assert!(trainer.steps() < 10_000),
            Err(e) => break e,
        }
    };
    let qb::Error::NonFiniteLoss {
        step,
        loss,
        kept_step,
    } = err
    else {
        panic!("{err:?}");
    };
    assert!(!loss.is_finite());
    assert_eq!(step % 10, 0);
    let kept = kept_step.unwrap();
    assert_eq!(kept, step - 10);
    assert_eq!(trainer.steps(), kept);
    let (_, w) = snapshots.iter().find(|(s, _)| *s == kept).unwrap();
    assert_eq!(&bits(&trainer.params()?["w"]), w);
    assert!(trainer.loss()?.item()?.is_finite());
    Ok(())
}

#[test]
fn e72_lbfgs_on_rosenbrock() -> qb::Result<()> {
    let rosen = |p: &Params, _: &()| {
        let (x, y) = (&p["x"], &p["y"]);
        (1.0 - x)?.powi(2) + (y - x.powi(2)?)?.powi(2)?.mul(100.0)?
    };
    let start = dict(&[("x", qb::array(-1.2)?), ("y", qb::array(1.0)?)]);
    let (sol, info) = optim::Lbfgs::new().minimize(rosen, &start, &())?;
    let (x, y) = (sol["x"].item()?, sol["y"].item()?);
    assert!(
        (x - 1.0).abs() <= 1e-6 && (y - 1.0).abs() <= 1e-6,
        "{x} {y}"
    );
    assert_eq!(info.reason, optim::StopReason::GradientTolerance);
    assert_eq!(info.reason.as_str(), "gradient_tolerance");
    assert!(info.converged);
    assert!(info.loss < 1e-12, "{info:?}");
    assert!(info.grad_norm <= 1e-7, "{info:?}");
    assert!((20..=60).contains(&info.iterations), "{info:?}");
    assert!(info.evaluations >= info.iterations, "{info:?}");
    // The reported loss and gradient norm are those of the solution (closed forms).
    let exact = (1.0 - x).powi(2) + 100.0 * (y - x * x).powi(2);
    assert_eq!(info.loss, exact);
    let gx = -2.0 * (1.0 - x) - 400.0 * x * (y - x * x);
    let gy = 200.0 * (y - x * x);
    assert!((info.grad_norm - gx.abs().max(gy.abs())).abs() <= 1e-12);
    Ok(())
}

#[test]
fn lbfgs_traces_once_and_reports_its_limits() -> qb::Result<()> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static TRACES: AtomicUsize = AtomicUsize::new(0);
    // A float32 quadratic with an argument: traced once, solution rounded to float32.
    let f = |p: &Tensor, c: &Tensor| {
        TRACES.fetch_add(1, Ordering::SeqCst);
        (p - c).powi(2).sum()
    };
    let c = qb::F32.array([1.5, -2.0, 0.25])?;
    let (sol, info) = optim::Lbfgs::new().minimize(f, &qb::F32.zeros([3])?, &c)?;
    assert_eq!(sol.dtype(), qb::F32);
    assert_eq!(sol.to_vec::<f32>()?, vec![1.5, -2.0, 0.25]);
    assert!(info.converged, "{info:?}");
    assert_eq!(TRACES.load(Ordering::SeqCst), 1);
    // max_iterations and the option errors.
    let rosen = |p: &Tensor, _: &()| {
        let (x, y) = (p.index(qb::s![0])?, p.index(qb::s![1])?);
        (1.0 - &x)?.powi(2) + (y - x.powi(2)?)?.powi(2)?.mul(100.0)?
    };
    let (_, info) =
        optim::Lbfgs::new()
            .max_iterations(3)
            .minimize(rosen, &qb::array([-1.2, 1.0])?, &())?;
    assert_eq!(
        (info.reason, info.iterations, info.converged),
        (optim::StopReason::MaxIterations, 3, false)
    );
    let err = optim::Lbfgs::new()
        .line_search("backtracking")
        .minimize(rosen, &qb::array([0.0, 0.0])?, &())
        .unwrap_err();
    assert_eq!(err.to_string(), "line_search must be \"strong_wolfe\"");
    Ok(())
}

#[test]
fn an_lbfgs_minimizer_traces_once_per_signature_and_solves_as_minimize() -> qb::Result<()> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static TRACES: AtomicUsize = AtomicUsize::new(0);
    // A float64 Rosenbrock in a dict and a float32 quadratic with a target argument.
    let rosen = |p: &Params, scale: &Tensor| {
        TRACES.fetch_add(1, Ordering::SeqCst);
        let (x, y) = (&p["x"], &p["y"]);
        ((1.0 - x)?.powi(2) + (y - x.powi(2)?)?.powi(2)?.mul(100.0)?)?.mul(scale)
    };
    let solver = optim::Lbfgs::new();
    let bound = solver.minimizer(rosen);
    let scale = qb::array(0.5)?;
    for (x0, y0) in [(-1.2, 1.0), (0.5, -0.3), (2.0, 2.0)] {
        let start = dict(&[("x", qb::array(x0)?), ("y", qb::array(y0)?)]);
        let (sol, info) = bound.minimize(&start, &scale)?;
        // The same iterates as a fresh `minimize`: the same solution and report, bit for bit.
        let (want, want_info) = solver.minimize(rosen, &start, &scale)?;
        assert_eq!(info, want_info);
        for k in ["x", "y"] {
            assert_eq!(sol[k].item()?.to_bits(), want[k].item()?.to_bits(), "{k}");
        }
        assert!(
            info.converged && (sol["x"].item()? - 1.0).abs() < 1e-6,
            "{info:?}"
        );
    }
    // Three bound solves share one trace; each `minimize` traced its own.
    assert_eq!(TRACES.load(Ordering::SeqCst), 1 + 3);

    static QUADRATIC_TRACES: AtomicUsize = AtomicUsize::new(0);
    let quadratic = |p: &Tensor, c: &Tensor| {
        QUADRATIC_TRACES.fetch_add(1, Ordering::SeqCst);
        (p - c).powi(2).sum()
    };
    let bound = optim::Lbfgs::new().minimizer(quadratic);
    for target in [[1.5f32, -2.0, 0.25], [3.0, 0.5, -1.0]] {
        let (sol, info) = bound.minimize(&qb::F32.zeros([3])?, &qb::F32.array(target)?)?;
        assert_eq!(sol.dtype(), qb::F32);
        assert_eq!(sol.to_vec::<f32>()?, target.to_vec());
        assert!(info.converged, "{info:?}");
    }
    assert_eq!(QUADRATIC_TRACES.load(Ordering::SeqCst), 1);
    // Another signature (four parameters) traces again; the first one stays cached.
    let (sol, _) = bound.minimize(&qb::F32.zeros([4])?, &qb::F32.array([1.0, 2.0, 3.0, 4.0])?)?;
    assert_eq!(sol.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
    bound.minimize(&qb::F32.zeros([3])?, &qb::F32.zeros([3])?)?;
    assert_eq!(QUADRATIC_TRACES.load(Ordering::SeqCst), 2);
    // Option errors are reported by the bound solver too.
    let err = optim::Lbfgs::new()
        .history(0)
        .minimizer(quadratic)
        .minimize(&qb::F32.zeros([3])?, &qb::F32.zeros([3])?)
        .unwrap_err();
    assert_eq!(err.to_string(), "LBFGS history must be at least 1");
    Ok(())
}

#[test]
fn lbfgs_solves_mixed_trees_without_touching_its_inputs() -> qb::Result<()> {
    // A float32 and a float64 leaf, arguments mixing a tensor with static numbers, and a
    // gradient that is a parameter itself (`d/dp 0.5 p·p = p`, possibly its input buffer):
    // minimum at `a = 2 c`, `b = -s` (closed form).
    type Mixed = (Tensor, Tensor);
    let f = |p: &Mixed, args: &(Tensor, f64, i64)| {
        let (c, s, k) = args;
        let fa = (&p.0 - c.mul(2.0)?.astype(qb::F32)?)?.powi(2)?.sum()?;
        let fb = (&p.1 + *s)?.powi(2)?.sum()?.mul(*k as f64)?;
        let half_norm = p.1.powi(2)?.sum()?.mul(0.0)?;
        fa.astype(qb::F64)? + fb + half_norm
    };
    let start = (qb::F32.array([0.0, 1.0, -1.0])?, qb::array([[3.0, 4.0]])?);
    let c = qb::array([0.5, -1.25, 3.0])?;
    let args = (c.clone(), 1.5, 3i64);
    let before = (
        start.0.to_vec::<f32>()?,
        start.1.to_vec::<f64>()?,
        c.to_vec::<f64>()?,
    );
    let bound = optim::Lbfgs::new().minimizer(f);
    for _ in 0..2 {
        let ((a, b), info) = bound.minimize(&start, &args)?;
        assert!(info.converged, "{info:?}");
        assert_eq!((a.dtype(), b.dtype()), (qb::F32, qb::F64));
        assert_eq!(a.to_vec::<f32>()?, vec![1.0, -2.5, 6.0]);
        for v in b.to_vec::<f64>()? {
            assert!((v + 1.5).abs() < 1e-9, "{v}");
        }
    }
    // Nothing the caller passed changed.
    let after = (
        start.0.to_vec::<f32>()?,
        start.1.to_vec::<f64>()?,
        c.to_vec::<f64>()?,
    );
    assert_eq!(before, after);
    // The gradient is the parameter: 0.5 |p|^2 from (3, -4) reaches 0.
    let g = |p: &Tensor, _: &()| p.powi(2)?.sum()?.mul(0.5);
    let p0 = qb::array([3.0, -4.0])?;
    let (p, info) = optim::Lbfgs::new().minimize(g, &p0, &())?;
    assert!(info.converged && p.to_vec::<f64>()?.iter().all(|v| v.abs() < 1e-9));
    assert_eq!(p0.to_vec::<f64>()?, vec![3.0, -4.0]);
    Ok(())
}

#[test]
fn lbfgs_inside_a_trace_is_a_tracer_error() -> qb::Result<()> {
    let inner = |p: &Tensor, _: &()| p.powi(2)?.sum();
    let outer = qb::jit(|p: Tensor| {
        let (x, _) = optim::Lbfgs::new().minimize(inner, &p, &())?;
        Ok(x)
    });
    let err = outer.call(&qb::array([1.0, 2.0])?).unwrap_err();
    assert!(matches!(err, qb::Error::Tracer { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("cannot be called inside a traced function"),
        "{err}"
    );
    Ok(())
}

/// Every built-in schedule gives the same bits on the host and as tensor operations of the
/// step (concrete, and traced inside `jit`), over a sweep of steps through every branch.
#[test]
fn schedules_give_the_same_bits_on_the_host_and_in_a_plan() -> qb::Result<()> {
    use optim::Schedule;
    let schedules: Vec<(&str, Box<dyn Schedule>)> = vec![
        ("constant", Box::new(optim::constant(0.3))),
        (
            "exponential",
            Box::new(
                optim::exponential_decay(0.1, 7, 0.5)
                    .transition_begin(5)
                    .end_value(0.01),
            ),
        ),
        (
            "exponential staircase up",
            Box::new(
                optim::exponential_decay(0.1, 3, 1.5)
                    .staircase(true)
                    .end_value(0.4),
            ),
        ),
        ("cosine", Box::new(optim::cosine_decay(0.2, 17).alpha(0.05))),
        (
            "warmup",
            Box::new(optim::warmup_cosine_decay(0.0, 0.3, 4, 19).end_value(0.01)),
        ),
        (
            "piecewise",
            Box::new(optim::piecewise_constant(
                &[3, 9, 12],
                &[0.1, 0.05, 0.02, 0.01],
            )),
        ),
    ];
    for (name, s) in &schedules {
        let traced = qb::jit(|step: Tensor| s.value_at(&step).unwrap());
        for step in 0..40u64 {
            let host = s.value(step)?;
            let t = qb::array(step as f64)?;
            let eager = s.value_at(&t).unwrap()?.item()?;
            let jitted = traced.call(&t)?.item()?;
            assert_eq!(host.to_bits(), eager.to_bits(), "{name} at {step}");
            assert_eq!(host.to_bits(), jitted.to_bits(), "{name} at {step} (jit)");
        }
    }
    // A closure of the step number is host-only: inside a trace it is a tracer error.
    let closure = optim::LearningRate::schedule(|step: u64| 1.0 / (1.0 + step as f64));
    let err = qb::jit(|w: Tensor| {
        let opt = optim::Sgd::new(closure.clone());
        let state = qb::optim::State {
            step: w.sum()?,
            m: None,
            v: None,
        };
        Ok(opt.update(&w, &w, &state)?.0)
    })
    .call(&qb::array([1.0])?)
    .unwrap_err();
    assert!(err.to_string().contains("LearningRate::traced"), "{err}");
    Ok(())
}

/// The state's step must be a whole number in [0, 2^53): a counter a user sets out of range is
/// AR4, never a wrapped or rounded count (u64::MAX used to overflow).
#[test]
fn a_state_step_out_of_range_is_an_invalid_argument() -> qb::Result<()> {
    let p = qb::array([1.0, 2.0])?;
    let opt = optim::Adam::new(0.1);
    for bad in [
        -1.0,
        0.5,
        9007199254740992.0,
        u64::MAX as f64,
        f64::INFINITY,
        f64::NAN,
    ] {
        let mut state = opt.init(&p)?;
        state.step = qb::array(bad)?;
        let err = opt.update(&p, &p, &state).unwrap_err();
        assert!(
            matches!(err, qb::Error::InvalidArgument { .. })
                && err
                    .to_string()
                    .contains("step must be a whole number in [0, 2**53)"),
            "{bad}: {err}"
        );
    }
    let mut state = opt.init(&p)?;
    state.step = qb::array(9007199254740990.0)?;
    assert_eq!(opt.update(&p, &p, &state)?.1.steps()?, 9007199254740991);
    Ok(())
}

/// A string (or another static value) among the parameters is TY12 naming its path, for
/// every optimizer and the trainer, instead of being left alone (or handed to the loss).
#[test]
fn a_string_parameter_is_ty12() {
    use qb::tree::{DictKey, Value};
    let params = Value::Dict(vec![
        (DictKey::from("w"), Value::Array(qb::ones([2]).unwrap())),
        (DictKey::from("name"), Value::Str("mlp".into())),
    ]);
    let expect = |r: qb::Result<()>, who: &str| match r {
        Err(qb::Error::Type { message }) => assert_eq!(
            message,
            format!("{who} parameters and gradients must be floating; got str at ['name']")
        ),
        other => panic!("{who}: {other:?}"),
    };
    expect(qb::optim::Sgd::new(0.1).init(&params).map(|_| ()), "SGD");
    expect(qb::optim::Adam::new(0.1).init(&params).map(|_| ()), "Adam");
    let static_box = Value::List(vec![Value::Static(qb::tree::StaticBox::new(3u8))]);
    match qb::optim::Sgd::new(0.1).init(&static_box) {
        Err(qb::Error::Type { message }) => {
            assert!(
                message.ends_with("got the static value 3 at [0]"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
}
