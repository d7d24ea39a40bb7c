//! MPI for `cargo xtask test` and `cargo xtask bench --distributed`: finding it, installing it
//! where that is possible, and running the distributed benchmark under `mpirun`.
//!
//! The `mpi` cargo feature of `quabla` (and `quabla-python`) builds against the system's MPI
//! library and needs libclang (for the bindings), so it is only built where both exist. When
//! they are missing on a Debian-like machine where xtask runs as root (CI), they are
//! installed with `apt-get install libopenmpi-dev openmpi-bin libclang-dev`; elsewhere the
//! reason is printed and only the in-process distributed tests run
//! (`QUABLA_NO_MPI_INSTALL=1` skips the installation).

use std::process::Command;

use crate::{cargo, run_inherited, succeeds_quietly, workspace_root, Result};

/// The packages that provide `mpirun`, `mpicc`, the MPI headers and libclang.
const APT_PACKAGES: [&str; 3] = ["libopenmpi-dev", "openmpi-bin", "libclang-dev"];

/// `mpirun` flags every run uses: more processes than cores (CI has two).
pub(crate) const MPIRUN_FLAGS: [&str; 1] = ["--oversubscribe"];

/// What is missing for the MPI build, or `None` when nothing is.
fn missing() -> Option<String> {
    let mut missing = Vec::new();
    let runs = |program: &str, arg: &str| {
        let mut c = Command::new(program);
        c.arg(arg);
        succeeds_quietly(c)
    };
    if !runs("mpirun", "--version") {
        missing.push("mpirun");
    }
    if !runs("mpicc", "--version") {
        missing.push("mpicc (the MPI development files)");
    }
    if !libclang_present() {
        missing.push("libclang");
    }
    if missing.is_empty() {
        None
    } else {
        Some(missing.join(", "))
    }
}

/// Whether bindgen will find libclang: `LIBCLANG_PATH`, or a `libclang` the dynamic linker
/// knows.
fn libclang_present() -> bool {
    if std::env::var_os("LIBCLANG_PATH").is_some() {
        return true;
    }
    Command::new("ldconfig")
        .arg("-p")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("libclang"))
}

/// Whether this process runs as root (`id -u` is `0`).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Makes MPI available for the tests: `Ok(())` when it is (installing it if needed and
/// possible), `Err(reason)` when the MPI tests must be skipped.
pub(crate) fn ensure() -> std::result::Result<(), String> {
    let Some(what) = missing() else {
        return Ok(());
    };
    let manual = format!(
        "install Open MPI (or MPICH) and libclang, e.g. `apt-get install {}`",
        APT_PACKAGES.join(" ")
    );
    if std::env::var_os("QUABLA_NO_MPI_INSTALL").is_some() {
        return Err(format!(
            "{what} missing and QUABLA_NO_MPI_INSTALL is set; {manual}"
        ));
    }
    if !succeeds_quietly({
        let mut c = Command::new("apt-get");
        c.arg("--version");
        c
    }) {
        return Err(format!(
            "{what} missing and apt-get is unavailable; {manual}"
        ));
    }
    if !is_root() {
        return Err(format!(
            "{what} missing and installing packages needs root; {manual}"
        ));
    }
    let install = || {
        let mut c = Command::new("apt-get");
        c.args(["install", "-y", "--no-install-recommends"])
            .args(APT_PACKAGES)
            .env("DEBIAN_FRONTEND", "noninteractive");
        println!("== xtask: apt-get install -y {} ==", APT_PACKAGES.join(" "));
        run_inherited(&mut c)
    };
    if install().is_err() {
        // A fresh machine may have no package lists yet.
        let mut update = Command::new("apt-get");
        update
            .arg("update")
            .env("DEBIAN_FRONTEND", "noninteractive");
        println!("== xtask: apt-get update ==");
        run_inherited(&mut update).map_err(|e| format!("{what} missing; {e}; {manual}"))?;
        install().map_err(|e| format!("{what} missing; {e}; {manual}"))?;
    }
    match missing() {
        None => Ok(()),
        Some(still) => Err(format!(
            "{still} still missing after installing {}; {manual}",
            APT_PACKAGES.join(" ")
        )),
    }
}

/// An `mpirun` of `n` processes with the flags every run uses; it may run as root (CI
/// containers do), which Open MPI refuses unless told.
pub(crate) fn mpirun(n: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.args(MPIRUN_FLAGS)
        .args(["-np", &n.to_string()])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .current_dir(workspace_root());
    c
}

/// One measurement line of the benchmark: its `key=value` pairs.
fn fields(line: &str) -> Vec<(&str, &str)> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect()
}

fn field<'a>(line: &[(&'a str, &'a str)], key: &str) -> &'a str {
    line.iter().find(|(k, _)| *k == key).map_or("-", |(_, v)| v)
}

/// `cargo xtask bench --distributed`: builds the `distributed_bench` example with MPI, runs it
/// under `mpirun -np 1`, `2` and `4`, and prints its two tables.
pub(crate) fn bench() -> Result<()> {
    if let Some(what) = missing() {
        return Err(format!(
            "`bench --distributed` needs MPI and libclang ({what} missing); install them, e.g. `apt-get install {}`",
            APT_PACKAGES.join(" ")
        ));
    }
    let mut build = cargo([
        "build",
        "--release",
        "-p",
        "quabla",
        "--features",
        "mpi",
        "--example",
        "distributed_bench",
    ]);
    println!(
        "== xtask: cargo build --release -p quabla --features mpi --example distributed_bench =="
    );
    run_inherited(&mut build)?;
    let exe = workspace_root().join("target/release/examples/distributed_bench");
    let mut allreduce: Vec<(usize, String)> = Vec::new();
    let mut steps: Vec<String> = Vec::new();
    for n in [1, 2, 4] {
        let mut run = mpirun(n);
        run.arg(&exe);
        let out = crate::bench::run_tee(&mut run)?;
        for line in out.lines() {
            if line.starts_with("allreduce ") {
                allreduce.push((n, line.to_string()));
            } else if line.starts_with("mlp_step ") {
                steps.push(line.to_string());
            }
        }
    }
    println!();
    println!("all-reduce of float64, median of the slowest rank (ratio = MPI's time / ours; >= 1 is at least MPI's bandwidth)");
    println!(
        "{:>5} {:>9} {:>12} {:>10} {:>14} {:>7} {:>14} {:>7}",
        "procs", "n", "MPI_Allreduce", "MPI GB/s", "transport", "ratio", "qb all_reduce", "ratio"
    );
    for (n, line) in allreduce.iter().filter(|(n, _)| *n > 1) {
        let f = fields(line);
        println!(
            "{:>5} {:>9} {:>10} us {:>10} {:>11} us {:>7} {:>11} us {:>7}",
            n,
            field(&f, "n"),
            field(&f, "mpi_us"),
            field(&f, "mpi_gbs"),
            field(&f, "transport_us"),
            field(&f, "transport_ratio"),
            field(&f, "tensor_us"),
            field(&f, "tensor_ratio"),
        );
    }
    println!();
    println!("data-parallel MLP step (2-256-256-1, Adam, 4096 rows in all)");
    println!(
        "{:>5} {:>13} {:>10} {:>14} {:>10} {:>15}",
        "procs", "rows per rank", "step", "all-reduce", "comm share", "fused 1-proc step"
    );
    for line in &steps {
        let f = fields(line);
        println!(
            "{:>5} {:>13} {:>7} ms {:>11} ms {:>10} {:>12} ms",
            field(&f, "processes"),
            field(&f, "rows_per_rank"),
            field(&f, "step_ms"),
            field(&f, "allreduce_ms"),
            field(&f, "comm_share"),
            field(&f, "fused_step_ms"),
        );
    }
    Ok(())
}
