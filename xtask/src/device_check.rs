//! `cargo xtask device-check --build`: the bundle that checks the CUDA backend on a GPU
//! machine without a Rust toolchain.
//!
//! It builds `quabla-cuda-check` (crate `backends/cuda-check`) in release mode with symbols
//! stripped, and gathers in `target/device-check/` the binary, `run.sh` (the one command to run
//! there, which writes `report.md`), `jax_pinn.py` (the JAX side of the PINN comparison, run
//! with the machine's own JAX) and a README; then packs the folder as
//! `target/device-check.tar.gz`. The binary must stay under [`MAX_BYTES`] so that it can be
//! carried anywhere; the command fails otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{cargo, run_inherited, workspace_root, Result};

/// The most the carried binary may weigh.
const MAX_BYTES: u64 = 40 * 1024 * 1024;

const RUN_SCRIPT: &str = include_str!("../../backends/cuda-check/run.sh");
const JAX_SCRIPT: &str = include_str!("../../backends/cuda-check/jax_pinn.py");

const README: &str = "Quabla CUDA device check

Copy this folder to the GPU machine and run ./run.sh there (./run.sh --quick for a short
run). It needs the NVIDIA driver, the CUDA 12 or 13 libraries (NVRTC, cuBLAS, cuSOLVER: pip
wheels in the Python environment, $CUDA_PATH, /usr/local/cuda or QUABLA_CUDA_LIB_PATH), and
for the PINN comparison Python with JAX (QUABLA_PYTHON, default python3). It writes report.md:
the conformance matrix against the CPU reference and the benchmarks of docs/cuda.md.
";

/// Entry point of `cargo xtask device-check`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    match args {
        [flag] if flag == "--build" => build(),
        _ => Err(
            "`cargo xtask device-check` takes `--build` (build the bundle for a GPU machine); \
             see `cargo xtask help`"
                .to_string(),
        ),
    }
}

fn build() -> Result<()> {
    println!("== xtask: cargo build --release -p quabla-cuda-check (stripped) ==");
    let mut c = cargo([
        "build",
        "--release",
        "-p",
        "quabla-cuda-check",
        "--config",
        "profile.release.strip=\"symbols\"",
        "--config",
        "profile.release.debug=false",
    ]);
    run_inherited(&mut c)?;
    let target = target_dir();
    let binary = target.join("release").join("quabla-cuda-check");
    let size = std::fs::metadata(&binary)
        .map_err(|e| format!("{}: {e}", binary.display()))?
        .len();
    if size > MAX_BYTES {
        return Err(format!(
            "{} is {} MiB, over the {} MiB the bundle may carry",
            binary.display(),
            size / (1024 * 1024),
            MAX_BYTES / (1024 * 1024)
        ));
    }
    let bundle = target.join("device-check");
    let _ = std::fs::remove_dir_all(&bundle);
    std::fs::create_dir_all(&bundle).map_err(|e| format!("{}: {e}", bundle.display()))?;
    copy(&binary, &bundle.join("quabla-cuda-check"))?;
    write(&bundle.join("run.sh"), RUN_SCRIPT, true)?;
    write(&bundle.join("jax_pinn.py"), JAX_SCRIPT, false)?;
    write(&bundle.join("README.txt"), README, false)?;
    let archive = target.join("device-check.tar.gz");
    let mut tar = Command::new("tar");
    tar.arg("czf")
        .arg(&archive)
        .arg("-C")
        .arg(&target)
        .arg("device-check");
    run_inherited(&mut tar)?;
    println!(
        "xtask: the device check is in {} ({:.1} MiB binary) and {}; on the GPU machine run \
         ./run.sh in the unpacked folder, which writes report.md",
        bundle.display(),
        size as f64 / (1024.0 * 1024.0),
        archive.display()
    );
    Ok(())
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))
}

fn write(path: &Path, text: &str, executable: bool) -> Result<()> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    #[cfg(unix)]
    if executable {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    #[cfg(not(unix))]
    let _ = executable;
    Ok(())
}
