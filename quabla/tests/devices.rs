//! Devices and targets: `qb::devices()` with plugins from `QUABLA_PLUGIN_PATH` (the CPU
//! plugin and a bogus file), the `devices` example, and `jit(f).device(..)` for targets this
//! build does not have.
//!
//! The registry is built once per process, so every test first calls [`plugin_folder`], which
//! builds the CPU plugin, prepares the folder and points `QUABLA_PLUGIN_PATH` at it before
//! anything can read the registry.

use qb::{Error, Origin, Tensor};
use quabla as qb;
use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

#[path = "../examples/devices.rs"]
#[allow(dead_code)]
mod devices_example;

fn plugin_file(name: &str) -> String {
    format!("{DLL_PREFIX}quabla_{name}_plugin{DLL_SUFFIX}")
}

/// Builds the CPU plugin with the cargo running the tests, into the target folder and profile
/// of this test executable, and returns the profile folder.
fn build_cpu_plugin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let mut profile_dir = exe.parent().unwrap().to_path_buf();
    if profile_dir.ends_with("deps") {
        profile_dir.pop();
    }
    let profile = match profile_dir.file_name().unwrap().to_str().unwrap() {
        "debug" => "dev".to_string(),
        other => other.to_string(),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "build",
            "--quiet",
            "-p",
            "quabla-cpu-plugin",
            "--profile",
            &profile,
        ])
        .arg("--target-dir")
        .arg(profile_dir.parent().unwrap())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "building the CPU plugin failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    profile_dir
}

/// A folder with the CPU plugin and a bogus plugin file, set as `QUABLA_PLUGIN_PATH`.
fn plugin_folder() -> &'static Path {
    static FOLDER: OnceLock<PathBuf> = OnceLock::new();
    FOLDER.get_or_init(|| {
        let profile_dir = build_cpu_plugin();
        let folder = std::env::temp_dir().join(format!("quabla-devices-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&folder);
        std::fs::create_dir_all(&folder).unwrap();
        let plugin = folder.join(plugin_file("cpu"));
        #[cfg(unix)]
        std::os::unix::fs::symlink(profile_dir.join(plugin_file("cpu")), &plugin).unwrap();
        #[cfg(not(unix))]
        std::fs::copy(profile_dir.join(plugin_file("cpu")), &plugin).unwrap();
        std::fs::write(folder.join(plugin_file("bogus")), b"not a library").unwrap();
        std::env::set_var("QUABLA_PLUGIN_PATH", &folder);
        folder
    })
}

#[test]
fn devices_lists_the_linked_cpu_the_cpu_plugin_and_the_bogus_file() {
    let folder = plugin_folder();
    let rows = qb::devices();
    assert_eq!(rows[0].name, "cpu");
    assert_eq!(rows[0].origin, Origin::Linked);
    assert!(rows[0].available);

    let plugin = rows
        .iter()
        .find(|r| r.origin == Origin::Plugin(folder.join(plugin_file("cpu"))))
        .expect("the CPU plugin is listed");
    assert_eq!(plugin.name, "cpu");
    assert!(plugin.available, "{plugin:?}");
    assert_eq!(plugin.version.as_deref(), Some(qb::VERSION));

    let bogus = rows.iter().find(|r| r.name == "bogus").unwrap();
    assert_eq!(
        bogus.origin,
        Origin::Plugin(folder.join(plugin_file("bogus")))
    );
    assert!(!bogus.available);
    assert!(bogus
        .reason
        .as_deref()
        .unwrap()
        .contains("cannot be opened as a dynamic library"));

    // Every known backend is listed, in order, available or not.
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    let position = |n: &str| names.iter().position(|x| *x == n).unwrap();
    assert!(position("cpu") < position("cuda") && position("cuda") < position("mlx"));
}

#[test]
fn the_devices_example_lists_the_plugin_and_the_load_error() {
    let folder = plugin_folder();
    let mut out = Vec::new();
    devices_example::run(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("cpu (linked): available, 1 device(s)"),
        "{text}"
    );
    let plugin = folder.join(plugin_file("cpu"));
    assert!(
        lines.contains(
            &format!(
                "cpu (plugin {}) version {}: available, 1 device(s), float64 yes",
                plugin.display(),
                qb::VERSION
            )
            .as_str()
        ),
        "{text}"
    );
    let bogus = folder.join(plugin_file("bogus"));
    assert!(
        lines.iter().any(|l| l.starts_with(&format!(
            "bogus (plugin {}): unavailable ({}: cannot be opened as a dynamic library",
            bogus.display(),
            bogus.display()
        ))),
        "{text}"
    );
}

#[test]
fn jit_to_a_target_this_build_lacks_is_unsupported() -> qb::Result<()> {
    plugin_folder();
    for target in ["mlx", "cuda"] {
        let f = qb::jit(|x: Tensor| x.sin()).device(target);
        match f.call(&qb::ones([2])?).unwrap_err() {
            Error::Unsupported {
                op,
                device,
                message,
            } => {
                assert_eq!(op, "target");
                assert_eq!(device.as_deref(), Some(target));
                assert!(
                    message.contains(&format!("{target} target is unavailable in this build")),
                    "{message}"
                );
                // What makes it available: the plugin file, the folders searched, loading by path.
                assert!(
                    message.contains(&format!(
                        "install the plugin library {}",
                        plugin_file(target)
                    )) && message.contains(&format!("searched: {}", plugin_folder().display()))
                        && message.contains("load_plugin")
                        && !message.contains("--features"),
                    "{message}"
                );
            }
            other => panic!("{other}"),
        }
    }
    // The CPU still works, through the same registry.
    let f = qb::jit(|x: Tensor| x.sin()).device("cpu");
    assert_eq!(f.call(&qb::zeros([2])?)?.to_vec::<f64>()?, vec![0.0, 0.0]);
    Ok(())
}
