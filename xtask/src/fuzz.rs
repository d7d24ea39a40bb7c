//! `cargo xtask fuzz load [--execs N] [--seed S]`: the file-format fuzzer.
//!
//! This module owns the driver of the fuzz targets. The only target, `load`, runs the
//! `fuzz_load` binary of `quabla-io` in release mode
//! (`cargo run --release -p quabla-io --bin fuzz_load -- --execs N`), which mutates valid
//! files in memory, loads each one with both readers and prints one summary line
//! (`execs=... panics=... max_alloc=... bytes input_max=... bytes`); it exits non-zero on a
//! panic, an allocation larger than the input allows, or the readers disagreeing, and so does
//! this command.

use crate::{cargo, run_inherited, Result};

/// Options of `cargo xtask fuzz load`.
#[derive(Debug, Default, PartialEq)]
struct Options {
    execs: Option<u64>,
    seed: Option<u64>,
}

/// Entry point of `cargo xtask fuzz`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let Some((target, rest)) = args.split_first() else {
        return Err(
            "`cargo xtask fuzz` needs a target; usage: cargo xtask fuzz load \
                    [--execs N] [--seed S]"
                .into(),
        );
    };
    if target != "load" {
        return Err(format!(
            "unknown fuzz target `{target}`; the only target is `load`"
        ));
    }
    let options = parse_args(rest)?;
    let mut command = cargo([
        "run",
        "--release",
        "-p",
        "quabla-io",
        "--bin",
        "fuzz_load",
        "--",
    ]);
    if let Some(execs) = options.execs {
        command.arg("--execs").arg(execs.to_string());
    }
    if let Some(seed) = options.seed {
        command.arg("--seed").arg(seed.to_string());
    }
    println!("== xtask: {} ==", crate::display_command(&command));
    run_inherited(&mut command)
}

fn parse_args(args: &[String]) -> Result<Options> {
    let mut options = Options::default();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (arg.as_str(), None),
        };
        let slot = match name {
            "--execs" => &mut options.execs,
            "--seed" => &mut options.seed,
            _ => {
                return Err(format!(
                    "unknown option `{arg}` for `cargo xtask fuzz load`; \
                     usage: cargo xtask fuzz load [--execs N] [--seed S]"
                ))
            }
        };
        let value = match inline {
            Some(value) => value,
            None => args
                .next()
                .map(String::as_str)
                .ok_or_else(|| format!("`{name}` needs a number: `{name} N`"))?,
        };
        *slot = Some(
            value
                .parse()
                .map_err(|_| format!("`{name}` takes a whole number, got `{value}`"))?,
        );
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options() {
        assert_eq!(parse_args(&args(&[])).unwrap(), Options::default());
        assert_eq!(
            parse_args(&args(&["--execs", "1000", "--seed=7"])).unwrap(),
            Options {
                execs: Some(1000),
                seed: Some(7)
            }
        );
        assert_eq!(parse_args(&args(&["--execs=5"])).unwrap().execs, Some(5));
        assert!(parse_args(&args(&["--execs"])).is_err());
        assert!(parse_args(&args(&["--execs", "many"])).is_err());
        assert!(parse_args(&args(&["--fast"])).is_err());
    }

    #[test]
    fn targets() {
        assert!(run(&args(&[])).is_err());
        assert!(run(&args(&["save"]))
            .unwrap_err()
            .contains("unknown fuzz target"));
    }
}
