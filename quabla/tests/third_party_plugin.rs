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
