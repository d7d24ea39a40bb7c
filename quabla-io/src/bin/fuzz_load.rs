//! `fuzz_load [--execs N] [--seed S]`: mutates valid files and loads them (see
//! `quabla_io::fuzz`), printing one summary line; exits non-zero on any panic, oversize
//! allocation or reader disagreement.

use quabla_io::fuzz::{self, CountingAlloc};
use std::process::ExitCode;
use std::time::Instant;

// Counts the largest allocation of each load; installed here only, never by the library.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn main() -> ExitCode {
    let mut execs: u64 = 1_000_000;
    let mut seed: u64 = 0x5eed;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (name, value) = match arg.split_once('=') {
            Some((name, value)) => (name.to_owned(), Some(value.to_owned())),
            None => (arg.clone(), None),
        };
        let target = match name.as_str() {
            "--execs" => &mut execs,
            "--seed" => &mut seed,
            "--help" | "-h" => {
                println!("usage: fuzz_load [--execs N] [--seed S]");
                return ExitCode::SUCCESS;
            }
            _ => {
                eprintln!(
                    "fuzz_load: unknown argument `{arg}`; usage: fuzz_load [--execs N] [--seed S]"
                );
                return ExitCode::from(2);
            }
        };
        let Some(text) = value.or_else(|| args.next()) else {
            eprintln!("fuzz_load: `{name}` needs a value");
            return ExitCode::from(2);
        };
        match text.parse() {
            Ok(v) => *target = v,
            Err(_) => {
                eprintln!("fuzz_load: `{name}` takes a whole number, got `{text}`");
                return ExitCode::from(2);
            }
        }
    }

    let started = Instant::now();
    let report = fuzz::run_with_probe(execs, seed, &ALLOC);
    let seconds = started.elapsed().as_secs_f64();
    println!("{} seconds={seconds:.1}", report.summary());
    for failure in &report.failures {
        eprintln!("fuzz_load: {failure}");
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
