//! A third party's backend plugin through the facade: before it is loaded its name is not a
//! device; `qb::load_plugin` registers it; `jit(f).device("toy")` then compiles for it and runs
//! there, and what it cannot lower is the typed UN2 error naming the device.

use qb::prelude::*;
use qb::{Error, Origin, Tensor};
use quabla as qb;

#[test]
fn a_loaded_plugin_is_a_jit_target_by_its_own_name() -> qb::Result<()> {
    let f = |x: Tensor| x.sin().mul(&x);
    let x = qb::array([0.5, -1.0, 2.0])?;

    // Not loaded: "toy" is no device yet (AR1), and the message says how to make it one.
    let err = qb::jit(f).device("toy").call(&x).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    assert!(err.to_string().contains("invalid device \"toy\""), "{err}");
    assert!(err.to_string().contains("loaded backend plugin"), "{err}");

    let path = quabla_conformance::plugins::build()
        .unwrap_or_else(|e| panic!("{e}"))
        .toy_plugin();
    let info = qb::load_plugin(&path)?;
    assert_eq!(info.name, "toy");
    assert_eq!(info.origin, Origin::Plugin(path.clone()));
    assert!(info.available, "{info:?}");
    assert!(qb::devices().iter().any(|d| d.name == "toy" && d.available));

    let on_toy = qb::jit(f).device("toy").call(&x)?;
    let on_cpu = qb::jit(f).call(&x)?;
    assert_eq!(on_toy.to_vec::<f64>()?, on_cpu.to_vec::<f64>()?);
    // Loading it again returns the same row.
    assert_eq!(qb::load_plugin(&path)?.name, "toy");

    // The toy device lowers elementwise arithmetic only.
    let err = qb::jit(|x: Tensor| x.matmul(&x))
        .device("toy")
        .call(&qb::ones([2, 2])?)
        .unwrap_err();
    match err {
        Error::Unsupported { device, .. } => assert_eq!(device.as_deref(), Some("toy")),
        other => panic!("expected UN2, got {other:?}"),
    }
    // An ordinal beyond its devices is invalid.
    assert!(matches!(
        qb::jit(f).device("toy:7").call(&x),
        Err(Error::InvalidArgument { .. })
    ));
    Ok(())
}

#[test]
fn loading_a_file_that_is_not_a_plugin_is_a_device_error_naming_the_path() {
    let dir = std::env::temp_dir().join(format!("quabla-plugin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bogus = dir.join("libquabla_bogus_plugin.so");
    std::fs::write(&bogus, b"\x7fELF truncated").unwrap();
    for path in [bogus.clone(), dir.clone(), std::path::PathBuf::new()] {
        match qb::load_plugin(&path) {
            Err(Error::Device { message, .. }) => {
                assert!(message.contains(&path.display().to_string()), "{message}");
            }
            other => panic!("expected a device error for {path:?}, got {other:?}"),
        }
    }
    std::fs::remove_dir_all(dir).ok();
}

/// `sum((w * x - y)^2)`: what the toy device can run, gradient and Adam update included.
fn squared_error(w: &Tensor, data: &(Tensor, Tensor)) -> qb::Result<Tensor> {
    let (x, y) = data;
    let r = (w * x - y)?;
    (&r * &r)?.sum()
}

fn toy_loaded() -> qb::Result<()> {
    let path = quabla_conformance::plugins::build()
        .unwrap_or_else(|e| panic!("{e}"))
        .toy_plugin();
    qb::load_plugin(&path).map(|_| ())
}

#[test]
fn a_trainer_on_a_resident_backend_moves_nothing_between_reads_of_the_loss() -> qb::Result<()> {
    toy_loaded()?;
    let data = (
        qb::array([0.5, -1.0, 2.0, 3.0])?,
        qb::array([1.0, -2.0, 4.5, 5.0])?,
    );
    let w0 = qb::array([0.1, 0.2, 0.3, 0.4])?;
    let build = |device: &str| {
        qb::optim::Trainer::new(
            squared_error,
            w0.clone(),
            qb::optim::Adam::new(0.05),
            data.clone(),
        )
        .device(device)
        .build()
    };
    let mut toy = build("toy")?;
    let mut cpu = build("cpu")?;
    let first = toy.loss()?.item()?;
    let before = qb::transfers("toy")?;
    for _ in 0..100 {
        toy.step()?;
        cpu.step()?;
    }
    let between = qb::transfers("toy")?;
    assert_eq!(
        (between.uploads, between.downloads),
        (before.uploads, before.downloads),
        "100 steps moved data: {before} -> {between}"
    );
    // Reading the loss is one download.
    let last = toy.loss()?.item()?;
    let after = qb::transfers("toy")?;
    assert_eq!(after.downloads, between.downloads + 1);
    assert_eq!(after.uploads, between.uploads);
    assert!(last < first / 10.0, "{first} -> {last}");
    // The toy computes the CPU's formulas in float64 with Rust's own functions: the same
    // parameters to rounding.
    let (w_toy, w_cpu) = (
        toy.params()?.to_vec::<f64>()?,
        cpu.params()?.to_vec::<f64>()?,
    );
    for (a, b) in w_toy.iter().zip(&w_cpu) {
        assert!(
            (a - b).abs() <= 1e-12 * b.abs().max(1.0),
            "{w_toy:?} vs {w_cpu:?}"
        );
    }
    assert_eq!(toy.steps(), 100);
    assert_eq!(toy.opt_state()?.steps()?, 100);
    Ok(())
}

#[test]
fn a_host_only_schedule_uploads_its_rate_each_step_and_nothing_else() -> qb::Result<()> {
    toy_loaded()?;
    let data = (qb::array([1.0, 2.0])?, qb::array([2.0, 3.0])?);
    let rate = qb::optim::LearningRate::schedule(|step: u64| 0.1 / (1.0 + step as f64));
    let mut toy = qb::optim::Trainer::new(
        squared_error,
        qb::array([0.0, 0.0])?,
        qb::optim::Sgd::new(rate),
        data,
    )
    .device("toy")
    .build()?;
    let before = qb::transfers("toy")?;
    for _ in 0..10 {
        toy.step()?;
    }
    let after = qb::transfers("toy")?;
    assert_eq!(after.uploads - before.uploads, 10);
    assert_eq!(after.bytes_uploaded - before.bytes_uploaded, 80);
    assert_eq!(after.downloads, before.downloads);
    Ok(())
}

#[test]
fn donation_crosses_the_plugin_boundary() -> qb::Result<()> {
    toy_loaded()?;
    let f = qb::jit(|x: Tensor| x.mul(0.5).add(1.0))
        .device("toy")
        .donate_argnums(&[0]);
    let mut x = qb::array([4.0, -2.0, 8.0])?;
    let mut expected = vec![4.0, -2.0, 8.0];
    for _ in 0..5 {
        x = f.call_donated(x)?;
        expected = expected.iter().map(|v| v * 0.5 + 1.0).collect();
    }
    assert_eq!(x.to_vec::<f64>()?, expected);
    Ok(())
}

#[test]
fn a_plugins_second_device_is_its_own_target_with_its_own_memory() -> qb::Result<()> {
    toy_loaded()?;
    let f = |x: Tensor| x.sin().mul(&x);
    let x = qb::array([0.5, -1.0, 2.0])?;
    let on_cpu = qb::jit(f).call(&x)?.to_vec::<f64>()?;

    // `toy:0` is `toy`; `toy:1` is another device, whose copies are counted apart: a run on
    // `toy:1` moves its input and output there, and a run on `toy:0` moves nothing there.
    let first_before = qb::transfers("toy")?;
    let second_before = qb::transfers("toy:1")?;
    assert_eq!(
        qb::jit(f).device("toy:1").call(&x)?.to_vec::<f64>()?,
        on_cpu
    );
    let second_after = qb::transfers("toy:1")?;
    assert_eq!(second_after.uploads, second_before.uploads + 1);
    assert_eq!(second_after.downloads, second_before.downloads + 1);
    // (Other tests of this binary use `toy` meanwhile: only `toy:1` is this test's alone.)
    assert_eq!(
        qb::jit(f).device("toy:0").call(&x)?.to_vec::<f64>()?,
        on_cpu
    );
    assert_eq!(qb::transfers("toy:1")?, second_after);
    assert!(qb::transfers("toy")?.uploads > first_before.uploads);

    // A Trainer on the second device keeps its state there and matches the CPU.
    let data = (qb::array([0.5, -1.0, 2.0])?, qb::array([1.0, -2.0, 4.5])?);
    let build = |device: &str| {
        qb::optim::Trainer::new(
            squared_error,
            qb::array([0.1, 0.2, 0.3])?,
            qb::optim::Sgd::new(0.01),
            data.clone(),
        )
        .device(device)
        .build()
    };
    let (mut second, mut cpu) = (build("toy:1")?, build("cpu")?);
    let resident = qb::transfers("toy:1")?;
    for _ in 0..20 {
        second.step()?;
        cpu.step()?;
    }
    let moved = qb::transfers("toy:1")?;
    assert_eq!(
        (moved.uploads, moved.downloads),
        (resident.uploads, resident.downloads)
    );
    let (a, b) = (
        second.params()?.to_vec::<f64>()?,
        cpu.params()?.to_vec::<f64>()?,
    );
    for (a, b) in a.iter().zip(&b) {
        assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "{a} vs {b}");
    }

    // The toy host has two devices.
    let err = qb::jit(f).device("toy:2").call(&x).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    assert!(err.to_string().contains("has 2 device(s)"), "{err}");
    Ok(())
}
