//! `cargo xtask soak [--calls N] [--eager-ops N]`: the long-run memory check.
//!
//! This module owns the driver only: it runs the `soak` example of the facade in release
//! mode (`cargo run --release -p quabla --example soak`), which makes `N` cached `jit` calls
//! (default 10^6), 10^5 eager operations and 10^6 `Trainer` steps of a small model, and
//! prints the resident memory after 10^4 and after `N` calls or steps. It is not part of `cargo xtask test`: a soak takes seconds in release, not
//! the milliseconds a test may.

use crate::{cargo, run_inherited, Result};

pub(crate) fn run(args: &[String]) -> Result<()> {
    let mut command = cargo([
        "run",
        "--release",
        "-p",
        "quabla",
        "--example",
        "soak",
        "--",
    ]);
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--calls" | "--eager-ops" | "--steps" => {
                let value = args
                    .next()
                    .filter(|v| v.parse::<u64>().is_ok())
                    .ok_or_else(|| format!("{arg} needs a count, e.g. {arg} 1000000"))?;
                command.arg(arg).arg(value);
            }
            other => {
                return Err(format!(
                    "unknown option `{other}`; usage: cargo xtask soak [--calls N] [--eager-ops N] [--steps N]"
                ))
            }
        }
    }
    println!("== xtask: {} ==", crate::display_command(&command));
    run_inherited(&mut command)
}
