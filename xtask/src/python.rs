//! The Python package's checks: a virtualenv under `target/py-venv`, the package
//! (`quabla-python/`) installed into it with pip, and its pytest suite.
//!
//! The virtualenv is created once with the `python3` on `PATH` (or `$QUABLA_PYTHON`) and
//! reused; pytest and NumPy are installed into it on first use. The package is built by pip
//! through maturin, with the dev profile so that it reuses the artifacts of the Rust test
//! build (a user's `pip install ./quabla-python` builds the release profile).

use std::path::PathBuf;
use std::process::Command;

use crate::{run_inherited, succeeds_quietly, workspace_root, Result};

fn venv() -> PathBuf {
    workspace_root().join("target").join("py-venv")
}

fn venv_python() -> PathBuf {
    venv().join("bin").join("python")
}

fn python_command(args: &[&str]) -> Command {
    let mut c = Command::new(venv_python());
    c.args(args).current_dir(workspace_root());
    c
}

fn ensure_venv() -> Result<()> {
    if !venv_python().is_file() {
        let python = std::env::var("QUABLA_PYTHON").unwrap_or_else(|_| "python3".into());
        println!("== xtask: {python} -m venv target/py-venv ==");
        let mut c = Command::new(&python);
        c.args(["-m", "venv"])
            .arg(venv())
            .current_dir(workspace_root());
        run_inherited(&mut c).map_err(|e| {
            format!("{e}; the Python tests need Python 3.9 or newer with the venv module (set QUABLA_PYTHON to choose an interpreter)")
        })?;
    }
    Ok(())
}

/// The Python rows of `cargo xtask bench`: the package installed as a user installs it
/// (release profile), then `quabla-python/bench/bench_python.py`.
pub(crate) fn bench_command() -> Result<Command> {
    ensure_venv()?;
    println!("== xtask: pip install ./quabla-python (release) ==");
    run_inherited(&mut python_command(&[
        "-m",
        "pip",
        "install",
        "--quiet",
        "--force-reinstall",
        "--no-deps",
        "./quabla-python",
    ]))?;
    Ok(python_command(&["quabla-python/bench/bench_python.py"]))
}

/// The NVRTC wheel the CUDA backend's compile tests load (backends/cuda/tests/nvrtc.rs).
const NVRTC_WHEEL: &str = "nvidia-cuda-nvrtc-cu12";

/// Makes sure the virtualenv has NVRTC for the CUDA backend's compile tests, installing
/// [`NVRTC_WHEEL`] when it is missing. When the package registry cannot be reached this only
/// says so (the tests then skip with the same reason); any other failure is an error.
pub(crate) fn ensure_nvrtc() -> Result<()> {
    ensure_venv()?;
    let installed = succeeds_quietly(python_command(&[
        "-c",
        "import importlib.metadata as m; m.version('nvidia-cuda-nvrtc-cu12')",
    ]));
    if installed {
        return Ok(());
    }
    println!("== xtask: pip install {NVRTC_WHEEL} (target/py-venv) ==");
    let installed = run_inherited(&mut python_command(&[
        "-m",
        "pip",
        "install",
        "--quiet",
        NVRTC_WHEEL,
    ]));
    match installed {
        Ok(()) => Ok(()),
        Err(e) => {
            let reachable = succeeds_quietly(python_command(&[
                "-c",
                "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/nvidia-cuda-nvrtc-cu12/', timeout=30)",
            ]));
            if reachable {
                Err(e)
            } else {
                println!(
                    "xtask: the package registry cannot be reached; the NVRTC compile tests \
                     will skip"
                );
                Ok(())
            }
        }
    }
}

/// Creates the virtualenv, installs the test requirements and the package, runs pytest.
pub(crate) fn run() -> Result<()> {
    ensure_venv()?;
    let has = |module: &str| succeeds_quietly(python_command(&["-c", &format!("import {module}")]));
    if !has("pytest") || !has("numpy") {
        println!("== xtask: pip install pytest numpy ==");
        run_inherited(&mut python_command(&[
            "-m", "pip", "install", "--quiet", "pytest", "numpy",
        ]))?;
    }
    println!("== xtask: pip install ./quabla-python ==");
    run_inherited(&mut python_command(&[
        "-m",
        "pip",
        "install",
        "--quiet",
        "--force-reinstall",
        "--no-deps",
        "--config-settings=build-args=--profile dev",
        "./quabla-python",
    ]))?;
    println!("== xtask: pytest quabla-python/tests ==");
    run_inherited(&mut python_command(&[
        "-m",
        "pytest",
        "-q",
        "quabla-python/tests",
    ]))
}
