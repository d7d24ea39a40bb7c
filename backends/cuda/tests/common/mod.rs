//! Shared by the tests that need NVRTC or the lowered programs of the conformance plans.

#![allow(dead_code)]

pub mod host;
pub mod plans;

use quabla_backend::{BackendError, Precision};
use quabla_cuda::discovery::Search;
use quabla_cuda::lower::lower;
use quabla_cuda::nvrtc::Nvrtc;
use quabla_cuda::program::Program;
use quabla_ir::{DType, Plan};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The project's test virtualenv (`cargo xtask test` makes it; see xtask/src/python.rs).
pub fn venv() -> PathBuf {
    workspace().join("target").join("py-venv")
}

/// The `site-packages` folders of the virtualenv.
fn site_packages(venv: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for lib in ["lib", "lib64"] {
        if let Ok(entries) = std::fs::read_dir(venv.join(lib)) {
            for e in entries.flatten() {
                let p = e.path().join("site-packages");
                if p.is_dir() {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// The NVRTC wheel this project's tests use.
pub const NVRTC_WHEEL: &str = "nvidia-cuda-nvrtc-cu12";

fn search() -> Search {
    let mut search = Search::from_env();
    let mut sites = site_packages(&venv());
    sites.extend(search.site_packages);
    search.site_packages = sites;
    search
}

/// Installs the NVRTC wheel into the virtualenv (creating it if needed). `Err` only when the
/// package registry cannot be reached (then the tests that need NVRTC skip); any other failure
/// panics, since it is a broken setup rather than an offline machine.
fn install() -> Result<(), String> {
    let venv = venv();
    let python = venv.join("bin").join("python");
    if !python.is_file() {
        let interpreter = std::env::var("QUABLA_PYTHON").unwrap_or_else(|_| "python3".into());
        let status = Command::new(&interpreter)
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {interpreter} to make {}: {e}", venv.display()));
        assert!(
            status.success(),
            "{interpreter} -m venv {} failed",
            venv.display()
        );
    }
    let out = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", NVRTC_WHEEL])
        .output()
        .unwrap_or_else(|e| panic!("cannot run pip of {}: {e}", venv.display()));
    if out.status.success() {
        return Ok(());
    }
    // Offline, or a broken pip? Ask the registry directly.
    let probe = Command::new(&python)
        .args([
            "-c",
            "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/nvidia-cuda-nvrtc-cu12/', timeout=30)",
        ])
        .output();
    let reachable = probe.is_ok_and(|p| p.status.success());
    if reachable {
        panic!(
            "pip install {NVRTC_WHEEL} failed although the registry answers:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Err(format!(
        "the package registry cannot be reached to install {NVRTC_WHEEL} (pip: {})",
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// NVRTC from the test virtualenv (installed there when missing), or the reason to skip.
pub fn nvrtc() -> Result<Nvrtc, String> {
    static NVRTC: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
    NVRTC
        .get_or_init(|| {
            if let Ok(n) = Nvrtc::open(&search()) {
                return Ok(n);
            }
            install()?;
            Nvrtc::open(&search())
                .map_err(|e| panic!("{NVRTC_WHEEL} is installed but NVRTC does not open: {e}"))
        })
        .clone()
}

/// A conformance plan lowered at one precision.
pub struct Lowered {
    pub label: String,
    pub precision: Precision,
    pub plan: Plan,
    pub inputs: Vec<quabla_backend::HostTensor>,
    pub outcome: Result<Program, BackendError>,
}

/// Every conformance plan, lowered at the reference precision and, when it holds no float32
/// value, at `Precision::Float64`.
pub fn conformance_programs() -> Vec<Lowered> {
    let mut out = Vec::new();
    for case in quabla_conformance::CASES {
        for p in case.programs() {
            let label = format!("{} / {}", case.name, p.label);
            let mut precisions = vec![Precision::Reference];
            if !holds_float32(&p.plan) {
                precisions.push(Precision::Float64);
            }
            for precision in precisions {
                out.push(Lowered {
                    label: label.clone(),
                    precision,
                    plan: p.plan.clone(),
                    inputs: p.inputs.clone(),
                    outcome: lower(&p.plan, precision),
                });
            }
        }
    }
    out
}

fn holds_float32(plan: &Plan) -> bool {
    plan.graph()
        .nodes()
        .iter()
        .any(|n| n.ty.dtype == DType::F32)
}
