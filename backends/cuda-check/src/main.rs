//! `quabla-cuda-check`: the CUDA device check, one self-contained binary built by
//! `cargo xtask device-check --build` and carried, with `run.sh` and `jax_pinn.py`, to a GPU
//! machine that has the NVIDIA driver, the CUDA libraries and Python with JAX, but no Rust.
//!
//! It writes a report (markdown) of:
//!
//! - the machine: device, driver, NVRTC version, where each CUDA library was found;
//! - the conformance matrix against the CPU reference (`quabla-conformance`): the `cuda`
//!   column at the default precision (float32 tolerances) and `cuda-float64` at
//!   `precision="float64"` (float64 plans within `1e-12` relative), per op family;
//! - data parallelism with NCCL ([`data_parallel`]): `value_and_grad(..).devices(..)` on
//!   `cuda:0` alone and on every GPU, against the CPU;
//! - the benchmarks of `docs/cuda.md`, each as a ratio against its baseline measured in the
//!   same run ([`bench`]), and the NVRTC compile and module load time per plan.
//!
//! Exit status: 0 when the matrix and the data-parallel checks have no failure, 1 when they
//! have, 2 when CUDA is unavailable
//! (the report then says why) or the arguments are wrong.

mod bench;
mod data_parallel;
mod pinn;

use quabla_backend::{Backend, BackendError, Capabilities, Executable, Precision};
use quabla_conformance::{Agreement, Column, Subject};
use quabla_cuda::discovery::{self, Library};
use quabla_cuda::CudaBackend;
use quabla_ir::Plan;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

// Registers the linked CUDA backend with the registry the facade uses (`jit(f).device("cuda")`
// and the Trainer in the PINN benchmark).
use quabla_cuda as _;

const USAGE: &str =
    "usage: quabla-cuda-check [--report FILE] [--jax-script FILE] [--quick] [--no-bench]
  --report FILE      write the report there (default: report.md)
  --jax-script FILE  the JAX side of the PINN comparison (default: jax_pinn.py beside the binary)
  --quick            smaller benchmark sizes and fewer repetitions
  --no-bench         the conformance matrix only";

#[derive(Debug)]
struct Options {
    report: PathBuf,
    jax_script: Option<PathBuf>,
    quick: bool,
    bench: bool,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        report: PathBuf::from("report.md"),
        jax_script: std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|d| d.join("jax_pinn.py"))),
        quick: false,
        bench: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--report" => o.report = args.next().ok_or("--report needs a file")?.into(),
            "--jax-script" => {
                o.jax_script = Some(args.next().ok_or("--jax-script needs a file")?.into())
            }
            "--quick" => o.quick = true,
            "--no-bench" => o.bench = false,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    Ok(o)
}

/// The CUDA backend at `precision("float64")`: float64 plans run in float64 and are held to
/// the float64 tolerance; plans with float32 values are refused (UN3, shown as unsupported).
#[derive(Debug)]
struct Float64(Arc<CudaBackend>);

impl Backend for Float64 {
    fn name(&self) -> &str {
        "cuda"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            float64: true,
            ..self.0.capabilities()
        }
    }

    fn compile(&self, plan: &Plan) -> quabla_backend::Result<Arc<dyn Executable>> {
        self.0.compile_with(plan, Precision::Float64)
    }

    fn upload(
        &self,
        t: &quabla_backend::HostTensor,
    ) -> quabla_backend::Result<quabla_backend::Memory> {
        self.0.upload(t)
    }

    fn download(
        &self,
        m: &quabla_backend::Memory,
    ) -> quabla_backend::Result<quabla_backend::HostTensor> {
        self.0.download(m)
    }

    fn allocate(
        &self,
        d: quabla_ir::DType,
        s: &quabla_ir::Shape,
    ) -> quabla_backend::Result<quabla_backend::Memory> {
        self.0.allocate(d, s)
    }

    fn transfers(&self) -> quabla_backend::Transfers {
        self.0.transfers()
    }
}

/// Where each library was found, for the report.
fn libraries() -> String {
    let mut out = String::new();
    for lib in Library::ALL {
        let line = match discovery::ensure(lib) {
            Ok(o) => format!("- {lib}: {} ({})\n", o.file.display(), o.place),
            Err(e) => format!("- {lib}: not found ({e})\n"),
        };
        out.push_str(&line);
    }
    out
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    // A fresh kernel cache: compile times and first calls are measured cold.
    let cache =
        std::env::temp_dir().join(format!("quabla-cuda-check-cache-{}", std::process::id()));
    // SAFETY: set before any thread is started and before CUDA reads it.
    unsafe { std::env::set_var("QUABLA_CUDA_CACHE", &cache) };
    let mut report = String::from("# Quabla CUDA device check\n\n");
    let backend = match CudaBackend::open() {
        Ok(b) => Arc::new(b),
        Err(why) => {
            let _ = write!(
                report,
                "CUDA is unavailable on this machine: {why}\n\nLibraries:\n{}",
                libraries()
            );
            finish(&options, &report);
            return ExitCode::from(2);
        }
    };
    let device = backend.device().clone();
    let nvrtc = device.nvrtc().version();
    let _ =
        write!(
        report,
        "## Machine\n\n- device: {} (sm_{}, {} multiprocessors), {} device(s)\n- driver: CUDA {}\n\
         - NVRTC {}.{}; kernels compiled to {}\n- quabla {}\n\nLibraries:\n{}\n",
        device.name(),
        device.arch(),
        device.multiprocessors(),
        backend.driver_device_count(),
        device
            .driver_version()
            .map_or("unknown".into(), |v| format!("{}.{}", v / 1000, (v % 1000) / 10)),
        nvrtc.0,
        nvrtc.1,
        device.target(),
        env!("CARGO_PKG_VERSION"),
        libraries()
    );
    println!("{report}");

    let columns = vec![
        Column {
            label: "cuda".into(),
            subject: Subject::Ready {
                backend: backend.clone(),
                agreement: Agreement::Tolerance { float64: false },
            },
        },
        Column {
            label: "cuda-float64".into(),
            subject: Subject::Ready {
                backend: Arc::new(Float64(backend.clone())),
                agreement: Agreement::Tolerance { float64: true },
            },
        },
    ];
    let started = std::time::Instant::now();
    let matrix = quabla_conformance::run_matrix(columns);
    let failures = matrix.failures();
    let _ = write!(
        report,
        "## Conformance against the CPU reference ({:.1} s)\n\n`cuda`: the default precision \
         (float64 plans run in float32; float32 tolerance `1e-5 + 1e-5·|cpu|`). `cuda-float64`: \
         `precision=\"float64\"` (float64 within `1e-12` relative; plans with float32 values are \
         refused, shown as unsupported).\n\n```\n{matrix}\n```\n\n",
        started.elapsed().as_secs_f64()
    );
    println!("{matrix}");
    finish(&options, &report);
    let (section, parallel_failures) = data_parallel::run(backend.driver_device_count());
    println!("{section}");
    report.push_str(&section);
    finish(&options, &report);

    if options.bench {
        let results = bench::run_all(&backend, &options);
        report.push_str(&results);
        finish(&options, &report);
    }
    if failures == 0 && parallel_failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Writes the report so far (each section is written as soon as it is known, so a crash
/// later leaves what was measured).
fn finish(options: &Options, report: &str) {
    if let Err(e) = std::fs::write(&options.report, report) {
        eprintln!("cannot write {}: {e}", options.report.display());
    }
}

/// A backend error as text.
fn err(e: BackendError) -> String {
    e.to_string()
}
