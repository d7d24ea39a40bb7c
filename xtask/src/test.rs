//! `cargo xtask test`: every check the project requires, in order.
//!
//! This module owns the check pipeline: formatting (`cargo fmt --check`),
//! lints (`cargo clippy -D warnings`), a build of the plugins the device and
//! plugin tests load, and the whole test suite. The suite runs
//! under cargo-nextest when it is installed (followed by `cargo test --doc`,
//! since nextest does not run doctests) and under plain `cargo test`
//! otherwise, then the backend conformance matrix (`cargo xtask
//! test-backends`, see [`crate::backends`]), and last the Python package's pytest suite
//! (see [`crate::python`]). Steps run from the workspace root;
//! the first failing step stops the run with an error naming it. Missing rustfmt or clippy components are
//! installed with `rustup` once before giving up, and NVRTC (the `nvidia-cuda-nvrtc-cu12`
//! wheel, for the CUDA backend's compile tests) is installed into the test virtualenv when
//! missing (see [`crate::python::ensure_nvrtc`]).

use std::process::Command;
use std::time::Instant;

use crate::{cargo, display_command, run_inherited, succeeds_quietly, Result};

/// Entry point of `cargo xtask test`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    if let Some(arg) = args.first() {
        return Err(format!(
            "`cargo xtask test` takes no arguments (got `{arg}`); see `cargo xtask help`"
        ));
    }
    ensure_components()?;
    // The CUDA backend's compile tests load NVRTC from the test virtualenv.
    crate::python::ensure_nvrtc()?;

    let use_nextest = succeeds_quietly(cargo(["nextest", "--version"]));
    let mut steps = vec![
        cargo(["fmt", "--all", "--", "--check"]),
        cargo([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    ];
    // The device and plugin tests load the CPU plugin and the example plugin and build them
    // when they are missing; building them here first keeps that compilation out of the
    // tests' time.
    steps.push(cargo([
        "build",
        "--quiet",
        "-p",
        "quabla-cpu-plugin",
        "-p",
        "quabla-example-plugin",
        "-p",
        "quabla-cuda-plugin",
    ]));
    if use_nextest {
        steps.push(cargo(["nextest", "run", "--workspace"]));
        steps.push(cargo(["test", "--workspace", "--doc"]));
    } else {
        println!("xtask: cargo-nextest not found; running the suite with `cargo test`");
        steps.push(cargo(["test", "--workspace"]));
    }

    let started = Instant::now();
    let total = steps.len() + 2;
    for (index, mut step) in steps.into_iter().enumerate() {
        let shown = display_command(&step);
        println!("== xtask: {shown} ==");
        run_inherited(&mut step)
            .map_err(|e| format!("step {} of {total} failed: {e}", index + 1))?;
    }
    println!("== xtask: test-backends ==");
    crate::backends::run(&[]).map_err(|e| format!("step {} of {total} failed: {e}", total - 1))?;
    crate::python::run().map_err(|e| format!("step {total} of {total} failed: {e}"))?;
    println!(
        "== xtask: all {total} steps passed in {:.1}s ==",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Makes sure `cargo fmt` and `cargo clippy` are available, installing the
/// components with `rustup` once if either is missing.
fn ensure_components() -> Result<()> {
    let available = || {
        succeeds_quietly(cargo(["fmt", "--version"]))
            && succeeds_quietly(cargo(["clippy", "--version"]))
    };
    if available() {
        return Ok(());
    }
    println!("== xtask: rustup component add rustfmt clippy ==");
    let mut rustup = Command::new("rustup");
    rustup
        .args(["component", "add", "rustfmt", "clippy"])
        .current_dir(crate::workspace_root());
    let installed = run_inherited(&mut rustup);
    if available() {
        return Ok(());
    }
    let why = match installed {
        Ok(()) => "they are still unavailable afterwards".to_owned(),
        Err(e) => e,
    };
    Err(format!(
        "`cargo fmt` and `cargo clippy` are required, and installing the rustfmt and \
         clippy components with rustup did not work ({why}); install them with your \
         toolchain manager and retry"
    ))
}
