//! `qb::distributed` over MPI processes: the checks of `distributed_checks` under
//! `mpirun -np 2` and `mpirun -np 4` (in that order, sharing one directory, so that the second
//! run loads the checkpoint of the first), and a rank killed with `SIGKILL` in the middle of
//! training under `mpirun --enable-recovery -np 3`.
//!
//! This binary is its own launcher (a plain `main`, `harness = false`): run by cargo it starts
//! `mpirun` on itself with `QUABLA_MPI_WORKER` set, and each rank runs the worker part. Built
//! only with the `mpi` feature: `cargo test -p quabla --features mpi --test distributed_mpi`
//! (`cargo xtask test` does it when MPI is installed; docs/distributed.md).

mod distributed_checks;

use distributed_checks::CHECKS;
use qb::distributed as dist;
use quabla as qb;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// How long one `mpirun` may take before it is killed and the test fails.
const RUN_LIMIT: Duration = Duration::from_secs(600);
/// How soon the survivors must report the killed rank (heartbeat timeout 1.5 s in that run).
const KILL_LIMIT: Duration = Duration::from_secs(8);

fn main() -> ExitCode {
    match std::env::var("QUABLA_MPI_WORKER").as_deref() {
        Ok("checks") => worker_checks(),
        Ok("killed") => worker_killed(),
        Ok(other) => {
            eprintln!("unknown QUABLA_MPI_WORKER {other:?}");
            ExitCode::FAILURE
        }
        Err(_) => driver(),
    }
}

/// Every check on this rank; prints one line per check.
fn worker_checks() -> ExitCode {
    if let Err(e) = dist::init() {
        println!("rank ? init FAILED: {e}");
        return ExitCode::FAILURE;
    }
    let rank = dist::rank();
    let mut ok = true;
    for (name, check) in CHECKS {
        let started = Instant::now();
        match check() {
            Ok(()) => println!(
                "rank {rank} ok {name} ({:.2} s)",
                started.elapsed().as_secs_f64()
            ),
            Err(e) => {
                ok = false;
                println!("rank {rank} FAILED {name}: {e}");
            }
        }
    }
    dist::finalize();
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The killed-rank scenario: rank 1 kills itself; the others report how soon they noticed.
fn worker_killed() -> ExitCode {
    if let Err(e) = dist::init() {
        println!("rank ? init FAILED: {e}");
        return ExitCode::FAILURE;
    }
    let rank = dist::rank();
    let die = || {
        // SAFETY: sending a signal to this process.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    };
    match distributed_checks::killed_rank(die, KILL_LIMIT) {
        Ok(Some(seconds)) => {
            println!("rank {rank} survived: noticed after {seconds:.2} s");
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::FAILURE,
        Err(e) => {
            println!("rank {rank} FAILED killed_rank: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `mpirun <flags> -np <n> <this binary>` with the worker `mode`; returns its exit
/// success and output, or an error if it could not start or ran past [`RUN_LIMIT`].
fn mpirun(
    n: usize,
    flags: &[&str],
    mode: &str,
    dir: &std::path::Path,
) -> Result<(bool, String), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new("mpirun")
        .args(["--oversubscribe"])
        .args(flags)
        .args(["-np", &n.to_string()])
        .arg(&exe)
        .env("QUABLA_MPI_WORKER", mode)
        .env("QUABLA_TEST_DIR", dir)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        // The killed-rank run notices the death within 1.5 s; the checks keep the default,
        // which no busy rank on an oversubscribed machine comes near.
        .env(
            "QUABLA_DISTRIBUTED_HEARTBEAT_TIMEOUT",
            if mode == "killed" { "1.5" } else { "5" },
        )
        .env("QUABLA_DISTRIBUTED_TIMEOUT", "120")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!("cannot run mpirun ({e}); install Open MPI (apt-get install openmpi-bin libopenmpi-dev) or run the in-process tests only")
        })?;
    let out = child.stdout.take();
    let err = child.stderr.take();
    let read = |pipe: Option<std::process::ChildStdout>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = pipe {
                let _ = std::io::Read::read_to_string(&mut p, &mut text);
            }
            text
        })
    };
    let out = read(out);
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut p) = err {
            let _ = std::io::Read::read_to_string(&mut p, &mut text);
        }
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if started.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "mpirun -np {n} ({mode}) ran past {} s",
                RUN_LIMIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = format!(
        "{}{}",
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default()
    );
    Ok((status.success(), text))
}

fn driver() -> ExitCode {
    let dir = std::env::temp_dir().join(format!("quabla-mpi-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let mut failed = 0;
    let mut report = |name: &str, result: Result<(), String>| match result {
        Ok(()) => println!("test {name} ... ok"),
        Err(e) => {
            failed += 1;
            println!("test {name} ... FAILED\n{e}");
        }
    };
    for n in [2, 4] {
        let started = Instant::now();
        let result = mpirun(n, &[], "checks", &dir).and_then(|(success, text)| {
            let missing: Vec<String> = (0..n)
                .flat_map(|r| {
                    CHECKS
                        .iter()
                        .map(move |(name, _)| format!("rank {r} ok {name} "))
                })
                .filter(|line| !text.contains(line.as_str()))
                .collect();
            if success && missing.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "exit success {success}; missing {missing:?}\n{text}"
                ))
            }
        });
        report(
            &format!(
                "mpirun_np{n}_checks ({:.1} s)",
                started.elapsed().as_secs_f64()
            ),
            result,
        );
    }
    let started = Instant::now();
    let result = mpirun(3, &["--enable-recovery"], "killed", &dir).and_then(|(_, text)| {
        // mpirun's own exit status reports the killed rank; the survivors' lines matter.
        let survivors = [0, 2]
            .iter()
            .all(|r| text.contains(&format!("rank {r} survived: noticed after")));
        if survivors && !text.contains("FAILED") {
            Ok(())
        } else {
            Err(text)
        }
    });
    report(
        &format!(
            "mpirun_killed_rank_is_a_typed_error_on_the_others ({:.1} s)",
            started.elapsed().as_secs_f64()
        ),
        result,
    );
    let _ = std::fs::remove_dir_all(&dir);
    if failed == 0 {
        println!("\ntest result: ok. 3 passed; 0 failed");
        ExitCode::SUCCESS
    } else {
        println!("\ntest result: FAILED. {failed} failed");
        ExitCode::FAILURE
    }
}
