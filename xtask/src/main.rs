//! `cargo xtask`: project automation for the Quabla workspace.
//!
//! This file owns command-line dispatch, the usage text and the small helpers
//! shared by the subcommands (locating the workspace root, building `cargo`
//! invocations, running a command and reporting how it failed). The
//! subcommands themselves live in [`test`] (`cargo xtask test`), [`backends`]
//! (`cargo xtask test-backends`), [`bench`] (`cargo xtask bench`, with [`scaling`] for
//! `--scaling` and [`mpi`] for `--distributed`, which also finds or installs MPI for
//! `cargo xtask test`), [`coverage`]
//! (`cargo xtask coverage-ops`), [`coverage_api`] (`cargo xtask coverage-api`), [`fuzz`]
//! (`cargo xtask fuzz`), [`soak`] (`cargo xtask soak`) and [`device_check`] (`cargo xtask
//! device-check`); [`source`] and [`items`] read the spec and the Rust sources for both
//! coverage reports.
//!
//! Arguments are parsed by hand so that the tool builds from `std` alone.

mod backends;
mod bench;
mod coverage;
mod coverage_api;
mod device_check;
mod fuzz;
mod items;
mod mpi;
mod python;
mod scaling;
mod soak;
mod source;
mod test;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Errors of xtask are human-readable messages, printed once by `main`.
type Result<T, E = String> = std::result::Result<T, E>;

const USAGE: &str = "\
Usage: cargo xtask <COMMAND> [OPTIONS]

Commands:
  test                     Run every check, in order: `cargo fmt --all -- --check`,
                           `cargo clippy --workspace --all-targets -- -D warnings`,
                           then the test suite (`cargo nextest run --workspace` plus
                           `cargo test --workspace --doc` when cargo-nextest is
                           installed, `cargo test --workspace` otherwise); where MPI
                           and libclang are installed (or apt-get can install them,
                           as root), clippy and the MPI tests with `--features mpi`
                           (mpirun -np 2 and 4, a killed rank), else the reason;
                           then `cargo xtask test-backends` and the Python suite.
  test-backends [--plugin-dir DIR]...
                           Build the workspace's plugins (the CPU plugin and the example
                           toy plugin), run the conformance suite on the linked backends,
                           on those plugins, on the plugins of every --plugin-dir folder
                           and of the folders of QUABLA_PLUGIN_PATH, and print the test x
                           backend matrix (pass / FAIL / unsupported / partial k/n /
                           skipped, with reasons); fails on any failure.
  bench [--vs-jax] [--rounds N] [--json FILE] [--only SUBSTRING[,SUBSTRING...]]
                           Run the benchmark workloads
                           (`cargo run --release -p quabla --example bench_workloads`).
                           --vs-jax     also time the same workloads in JAX on the CPU
                                        (uses a virtualenv in target/jax-venv, created
                                        and populated on first use) and print the ratio;
                                        rows that print a `check=` line must compute
                                        what their JAX twin computes, or the run fails
                           --rounds N   alternate both sides N times (default 1, 3 with
                                        --vs-jax) and report each row's median
                           --json FILE  write the results as a JSON array to FILE
                           --only LIST  run only the rows whose name contains one of
                                        the comma-separated substrings
  bench --distributed      Build the distributed_bench example with MPI and run it under
                           mpirun -np 1, 2 and 4: all-reduce of 1e3..1e7 float64 against
                           MPI_Allreduce, and a data-parallel MLP step with its
                           communication share (needs MPI and libclang)
  bench --scaling [--only SUBSTRING[,SUBSTRING...]]
                           Time each workload family over a range of sizes, ours
                           (`cargo run --release -p quabla --example scaling_workloads`)
                           and JAX's, print one table per family (the loop-state sweep
                           with each size's ratio to the previous one, jumps over 1.5x
                           marked), write them into docs/performance.md, and draw
                           target/scaling.png (log-log); with --only, only the families
                           whose name contains a substring, and docs/ is left alone
  coverage-ops             For each function of the spec's array sections (api.md
                           sections 3-9), print `<name> value=<yes|no> grad=<yes|no|n/a>
                           vmap=<yes|no>`: whether it is implemented and called by a
                           quabla test of that kind (found in the code and the tests),
                           then `missing=<count of functions with any no>`. The spec is
                           read from $QUABLA_SPEC_DIR/api.md, else from
                           shared/spec/api.md beside the workspace.
  coverage-api             For each row of every table of the spec's api.md (sections
                           1-22), print `§<section> <python names>  implemented=<yes|
                           partial> tested=<yes|no>`, `binding-only python=<yes|no>` (rows
                           for the Python package) or `missing (<reason>: <items>)`, with
                           `device` and `distributed` as the expected reasons; then
                           `§N <title>: rows= implemented= tested= missing=` per section
                           and a total. The spec is found as for coverage-ops.
  fuzz load [--execs N] [--seed S]
                           Fuzz the file reader
                           (`cargo run --release -p quabla-io --bin fuzz_load`): load N
                           (default 1000000) mutations of valid files (truncations, bit
                           flips, forged lengths, spliced JSON) with both readers and
                           print `execs= panics= max_alloc= input_max=`; fails on a
                           panic, an allocation larger than the input allows, or the two
                           readers disagreeing.
  soak [--calls N] [--eager-ops N] [--steps N]
                           Run the soak example in release
                           (`cargo run --release -p quabla --example soak`): N cached jit
                           calls (default 1000000), 100000 eager operations and 1000000
                           Trainer steps of a small model, printing the resident memory
                           after 10^4 and after N calls or steps.
  device-check --build     Build the CUDA device check for a GPU machine: the stripped
                           release binary of backends/cuda-check (under 40 MiB), run.sh
                           and jax_pinn.py in target/device-check/ and
                           target/device-check.tar.gz. On the GPU machine, ./run.sh
                           writes report.md (conformance against the CPU reference and
                           the CUDA benchmarks; see docs/cuda.md).
  help                     Print this message.
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        eprint!("xtask: no command given\n\n{USAGE}");
        return ExitCode::from(2);
    };
    let result = match command.as_str() {
        "test" => test::run(rest),
        "test-backends" => backends::run(rest),
        "bench" => bench::run(rest),
        "coverage-ops" => coverage::run(rest),
        "coverage-api" => coverage_api::run(rest),
        "fuzz" => fuzz::run(rest),
        "soak" => soak::run(rest),
        "device-check" => device_check::run(rest),
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(())
        }
        other => {
            eprint!("xtask: unknown command `{other}`\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root: the parent of this crate's manifest directory.
///
/// `cargo run` sets `CARGO_MANIFEST_DIR` for the process it starts; that value
/// is preferred over the one baked in at compile time, so that a binary built
/// from one checkout and reused from a shared target directory still acts on
/// the checkout it was invoked from.
fn workspace_root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    match manifest_dir.parent() {
        Some(parent) => parent.to_path_buf(),
        None => manifest_dir,
    }
}

/// A `cargo` command run from the workspace root.
///
/// Uses the `cargo` that launched xtask (the `CARGO` variable that
/// `cargo run` sets), so the same toolchain is used throughout.
fn cargo<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(program);
    command.args(args).current_dir(workspace_root());
    command
}

/// How a command is shown in headers and error messages.
fn display_command(command: &Command) -> String {
    let program = Path::new(command.get_program())
        .file_stem()
        .unwrap_or(command.get_program())
        .to_string_lossy()
        .into_owned();
    std::iter::once(program)
        .chain(
            command
                .get_args()
                .map(|arg| arg.to_string_lossy().into_owned()),
        )
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `command` runs and exits successfully, with its output discarded.
fn succeeds_quietly(mut command: Command) -> bool {
    use std::process::Stdio;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Runs `command` with inherited stdio; an error names the command on failure.
fn run_inherited(command: &mut Command) -> Result<()> {
    let shown = display_command(command);
    let status = command
        .status()
        .map_err(|e| format!("could not start `{shown}`: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{shown}` failed ({status})"))
    }
}
