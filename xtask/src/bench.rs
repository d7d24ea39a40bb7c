//! `cargo xtask bench`: the benchmark workloads, optionally against JAX.
//!
//! This module owns the benchmark driver. It runs the `bench_workloads`
//! example of the `quabla` crate in release mode, which prints one
//! `workload=<name> seconds=<median seconds>` line per workload. With
//! `--vs-jax` it also times the same workloads in JAX on the CPU: it keeps a
//! virtualenv in `target/jax-venv` (created, and given `jax` and `diffrax`, when missing),
//! writes the embedded script `jax_bench.py` under `target/` and runs it. The
//! two sets of timings are joined by workload name and printed as a table;
//! `--json FILE` also writes them as a JSON array.
//!
//! `--rounds N` (default 1, or 3 with `--vs-jax`) runs both sides N times,
//! alternating, and reports each workload's median over the rounds: on a
//! shared machine whose speed drifts over minutes, alternating rounds expose
//! both sides to the same drift, which keeps the ratios meaningful.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{cargo, display_command, succeeds_quietly, workspace_root, Result};

/// The JAX side of the comparison, written to `target/` at run time.
pub(crate) const JAX_BENCH_SCRIPT: &str = include_str!("jax_bench.py");

/// Options of `cargo xtask bench`.
#[derive(Debug, Default, PartialEq)]
struct Options {
    vs_jax: bool,
    /// `--scaling`: the scaling families of `crate::scaling` instead of the workloads.
    scaling: bool,
    /// `--distributed`: the MPI measurements of `crate::mpi` instead of the workloads.
    distributed: bool,
    json: Option<PathBuf>,
    /// Rounds of both sides; `None` for the default.
    rounds: Option<usize>,
}

impl Options {
    fn rounds(&self) -> usize {
        self.rounds.unwrap_or(if self.vs_jax { 3 } else { 1 })
    }
}

/// One workload's timings, joined by name.
#[derive(Debug, PartialEq)]
struct Row {
    workload: String,
    ours_s: Option<f64>,
    jax_s: Option<f64>,
}

impl Row {
    /// `ours / jax`, when both are known and the JAX time is positive.
    fn ratio(&self) -> Option<f64> {
        match (self.ours_s, self.jax_s) {
            (Some(ours), Some(jax)) if jax > 0.0 => Some(ours / jax),
            _ => None,
        }
    }
}

/// Entry point of `cargo xtask bench`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let options = parse_args(args)?;
    if options.distributed {
        if options.vs_jax || options.scaling || options.json.is_some() || options.rounds.is_some() {
            return Err("`--distributed` runs alone".into());
        }
        return crate::mpi::bench();
    }
    if options.scaling {
        if options.vs_jax || options.json.is_some() || options.rounds.is_some() {
            return Err("`--scaling` runs alone: it always times both sides once".into());
        }
        return crate::scaling::run();
    }

    // Prepare the JAX environment first, so that a broken Python set-up
    // fails before the (long) Quabla run rather than after it.
    let python = if options.vs_jax {
        Some(prepare_jax_venv()?)
    } else {
        None
    };

    let mut ours_rounds = Vec::new();
    let mut jax_rounds = Vec::new();
    let rounds = options.rounds();
    for round in 1..=rounds {
        if rounds > 1 {
            println!("== xtask: round {round} of {rounds} ==");
        }
        let mut ours_command = cargo([
            "run",
            "--release",
            "-p",
            "quabla",
            "--example",
            "bench_workloads",
        ]);
        let ours = parse_timings(&run_tee(&mut ours_command)?)?;
        if ours.is_empty() {
            return Err(format!(
                "`{}` printed no `workload=<name> seconds=<s>` lines",
                display_command(&ours_command)
            ));
        }
        let mut ours = ours;
        // The same workloads timed from Python through the package (a release install into
        // target/py-venv).
        let mut py_command = crate::python::bench_command()?;
        ours.extend(parse_timings(&run_tee(&mut py_command)?)?);
        ours_rounds.push(ours);

        if let Some(python) = &python {
            let script = target_dir().join("jax_bench.py");
            std::fs::write(&script, JAX_BENCH_SCRIPT)
                .map_err(|e| format!("could not write {}: {e}", script.display()))?;
            let mut command = Command::new(python);
            command
                .arg(&script)
                .env("JAX_PLATFORMS", "cpu")
                .current_dir(workspace_root());
            jax_rounds.push(parse_timings(&run_tee(&mut command)?)?);
        }
    }
    let ours = median_over_rounds(&ours_rounds);
    let jax = python.as_ref().map(|_| median_over_rounds(&jax_rounds));

    let rows = join(&ours, jax.as_deref().unwrap_or(&[]));
    println!();
    print!("{}", table(&rows, options.vs_jax));

    if let Some(path) = &options.json {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("could not create {}: {e}", parent.display()))?;
        }
        std::fs::write(path, to_json(&rows))
            .map_err(|e| format!("could not write {}: {e}", path.display()))?;
        println!("xtask: wrote {}", path.display());
    }
    Ok(())
}

fn parse_args(args: &[String]) -> Result<Options> {
    let mut options = Options::default();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--vs-jax" => options.vs_jax = true,
            "--scaling" => options.scaling = true,
            "--distributed" => options.distributed = true,
            "--rounds" => {
                let n = args
                    .next()
                    .ok_or("`--rounds` needs a count: `--rounds N`")?;
                options.rounds = Some(parse_rounds(n)?);
            }
            "--json" => {
                let file = args
                    .next()
                    .ok_or("`--json` needs a file name: `--json FILE`")?;
                options.json = Some(PathBuf::from(file));
            }
            other => {
                if let Some(n) = other.strip_prefix("--rounds=") {
                    options.rounds = Some(parse_rounds(n)?);
                    continue;
                }
                match other.strip_prefix("--json=") {
                    Some(file) if !file.is_empty() => options.json = Some(PathBuf::from(file)),
                    _ => {
                        return Err(format!(
                            "unknown option `{other}` for `cargo xtask bench`; \
                             usage: cargo xtask bench [--vs-jax] [--rounds N] [--json FILE], \
                             cargo xtask bench --scaling or cargo xtask bench --distributed"
                        ))
                    }
                }
            }
        }
    }
    Ok(options)
}

/// A round count of at least 1.
fn parse_rounds(text: &str) -> Result<usize> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "`--rounds` takes a whole number of at least 1, got `{text}`"
        )),
    }
}

/// Each workload's median over the rounds (the mean of the two middle values for an even
/// count), in the order of first appearance.
fn median_over_rounds(rounds: &[Vec<(String, f64)>]) -> Vec<(String, f64)> {
    let mut names: Vec<&str> = Vec::new();
    for round in rounds {
        for (name, _) in round {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
    }
    names
        .into_iter()
        .map(|name| {
            let mut values: Vec<f64> = rounds
                .iter()
                .filter_map(|r| r.iter().find(|(n, _)| n == name).map(|&(_, s)| s))
                .collect();
            values.sort_by(f64::total_cmp);
            let mid = values.len() / 2;
            let median = if values.len() % 2 == 1 {
                values[mid]
            } else {
                (values[mid - 1] + values[mid]) / 2.0
            };
            (name.to_owned(), median)
        })
        .collect()
}

/// `<workspace>/target`, which holds the JAX virtualenv and script.
pub(crate) fn target_dir() -> PathBuf {
    workspace_root().join("target")
}

/// Ensures `target/jax-venv` exists and can `import jax`; returns its Python.
pub(crate) fn prepare_jax_venv() -> Result<PathBuf> {
    let venv = target_dir().join("jax-venv");
    let python = venv_python(&venv);
    if !python.exists() {
        std::fs::create_dir_all(target_dir())
            .map_err(|e| format!("could not create {}: {e}", target_dir().display()))?;
        let system_python = if cfg!(windows) { "python" } else { "python3" };
        let mut command = Command::new(system_python);
        command.arg("-m").arg("venv").arg(&venv);
        println!("== xtask: {} ==", display_command(&command));
        crate::run_inherited(&mut command)?;
    }
    // diffrax is the peer of the ode rows; a virtualenv made before it was listed gets it too.
    let imports_jax = |python: &Path| {
        let mut command = Command::new(python);
        command
            .args(["-c", "import jax, diffrax"])
            .env("JAX_PLATFORMS", "cpu");
        succeeds_quietly(command)
    };
    if !imports_jax(&python) {
        let mut command = Command::new(&python);
        command.args(["-m", "pip", "install", "jax[cpu]", "diffrax"]);
        println!("== xtask: {} ==", display_command(&command));
        crate::run_inherited(&mut command)?;
        if !imports_jax(&python) {
            return Err(format!(
                "`{} -c \"import jax, diffrax\"` still fails after installing jax and diffrax",
                python.display()
            ));
        }
    }
    Ok(python)
}

fn venv_python(venv: &Path) -> PathBuf {
    if cfg!(windows) {
        venv.join("Scripts").join("python.exe")
    } else {
        venv.join("bin").join("python")
    }
}

/// Runs `command`, echoing its stdout line by line as it comes and returning
/// all of it; stderr passes straight through.
pub(crate) fn run_tee(command: &mut Command) -> Result<String> {
    let shown = display_command(command);
    println!("== xtask: {shown} ==");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("could not start `{shown}`: {e}"))?;
    let mut captured = String::new();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = line.map_err(|e| format!("reading the output of `{shown}`: {e}"))?;
            println!("{line}");
            captured.push_str(&line);
            captured.push('\n');
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for `{shown}`: {e}"))?;
    if status.success() {
        Ok(captured)
    } else {
        Err(format!("`{shown}` failed ({status})"))
    }
}

/// Parses `workload=<name> seconds=<s>` lines, in order of first appearance
/// (a later line for the same workload replaces the earlier timing). Other
/// lines are ignored; a `workload=` line without a valid `seconds=` is an
/// error.
fn parse_timings(output: &str) -> Result<Vec<(String, f64)>> {
    let mut timings: Vec<(String, f64)> = Vec::new();
    for line in output.lines() {
        let line = line.trim();
        if !line.starts_with("workload=") {
            continue;
        }
        let mut workload = None;
        let mut seconds = None;
        for field in line.split_whitespace() {
            if let Some(value) = field.strip_prefix("workload=") {
                workload = Some(value);
            } else if let Some(value) = field.strip_prefix("seconds=") {
                seconds = Some(value);
            }
        }
        let (Some(workload), Some(seconds)) = (workload, seconds) else {
            return Err(format!("malformed benchmark line `{line}`"));
        };
        let seconds: f64 = seconds
            .parse()
            .map_err(|_| format!("malformed seconds in benchmark line `{line}`"))?;
        match timings.iter_mut().find(|(name, _)| name == workload) {
            Some(entry) => entry.1 = seconds,
            None => timings.push((workload.to_owned(), seconds)),
        }
    }
    Ok(timings)
}

/// Joins the two sets of timings by name: our workloads in our order, then
/// any that only JAX reported.
fn join(ours: &[(String, f64)], jax: &[(String, f64)]) -> Vec<Row> {
    let lookup =
        |set: &[(String, f64)], name: &str| set.iter().find(|(n, _)| n == name).map(|&(_, s)| s);
    let mut rows: Vec<Row> = ours
        .iter()
        .map(|(name, seconds)| Row {
            workload: name.clone(),
            ours_s: Some(*seconds),
            jax_s: lookup(jax, name),
        })
        .collect();
    rows.extend(
        jax.iter()
            .filter(|(name, _)| lookup(ours, name).is_none())
            .map(|(name, seconds)| Row {
                workload: name.clone(),
                ours_s: None,
                jax_s: Some(*seconds),
            }),
    );
    rows
}

/// Seconds with four significant digits, without an exponent.
fn format_seconds(seconds: Option<f64>) -> String {
    match seconds {
        Some(s) if s.is_finite() && s > 0.0 => {
            let magnitude = s.log10().floor() as i32;
            let decimals = (3 - magnitude).clamp(0, 12) as usize;
            format!("{s:.decimals$}")
        }
        Some(s) => format!("{s}"),
        None => "-".to_owned(),
    }
}

/// The results as an aligned text table.
fn table(rows: &[Row], vs_jax: bool) -> String {
    let mut header = vec!["workload", "ours (s)"];
    if vs_jax {
        header.extend(["jax (s)", "ratio (ours/jax)"]);
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            let mut cells = vec![row.workload.clone(), format_seconds(row.ours_s)];
            if vs_jax {
                cells.push(format_seconds(row.jax_s));
                cells.push(row.ratio().map_or("-".to_owned(), |r| format!("{r:.2}")));
            }
            cells
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|column| {
            cells
                .iter()
                .map(|row| row[column].len())
                .chain([header[column].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();

    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let joined = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(column, (cell, &width))| {
                if column == 0 {
                    format!("{cell:<width$}")
                } else {
                    format!("{cell:>width$}")
                }
            })
            .collect::<Vec<_>>()
            .join(" | ");
        let _ = writeln!(out, "{}", joined.trim_end());
    };
    line(&header);
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    line(&rule.iter().map(String::as_str).collect::<Vec<_>>());
    for row in &cells {
        line(&row.iter().map(String::as_str).collect::<Vec<_>>());
    }
    out
}

/// The results as a JSON array of
/// `{"workload", "ours_s", "jax_s", "ratio"}` objects.
fn to_json(rows: &[Row]) -> String {
    let mut out = String::from("[");
    for (index, row) in rows.iter().enumerate() {
        let _ = write!(
            out,
            "{}\n  {{\"workload\": {}, \"ours_s\": {}, \"jax_s\": {}, \"ratio\": {}}}",
            if index == 0 { "" } else { "," },
            json_string(&row.workload),
            json_number(row.ours_s),
            json_number(row.jax_s),
            json_number(row.ratio()),
        );
    }
    out.push_str(if rows.is_empty() { "]\n" } else { "\n]\n" });
    out
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number, or `null` when absent or not finite (JSON has no NaN/inf).
/// Rust's `Display` for `f64` never uses an exponent, so it is valid JSON.
fn json_number(value: Option<f64>) -> String {
    match value {
        Some(v) if v.is_finite() => format!("{v}"),
        _ => "null".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn parses_options() {
        assert_eq!(parse_args(&[]).unwrap(), Options::default());
        assert_eq!(
            parse_args(&strings(&["--vs-jax", "--json", "target/bench.json"])).unwrap(),
            Options {
                vs_jax: true,
                scaling: false,
                distributed: false,
                json: Some(PathBuf::from("target/bench.json")),
                rounds: None,
            }
        );
        assert!(parse_args(&strings(&["--scaling"])).unwrap().scaling);
        assert!(
            parse_args(&strings(&["--distributed"]))
                .unwrap()
                .distributed
        );
        assert_eq!(
            parse_args(&strings(&["--json=out.json"])).unwrap().json,
            Some(PathBuf::from("out.json"))
        );
        assert!(parse_args(&strings(&["--json"])).is_err());
        let rounds = parse_args(&strings(&["--rounds", "5"])).unwrap();
        assert_eq!((rounds.rounds, rounds.rounds()), (Some(5), 5));
        assert_eq!(parse_args(&strings(&["--rounds=2"])).unwrap().rounds(), 2);
        assert_eq!(parse_args(&strings(&["--vs-jax"])).unwrap().rounds(), 3);
        assert_eq!(parse_args(&[]).unwrap().rounds(), 1);
        assert!(parse_args(&strings(&["--rounds", "0"])).is_err());
        assert!(parse_args(&strings(&["--rounds=x"])).is_err());
        assert!(parse_args(&strings(&["--rounds"])).is_err());
        assert!(parse_args(&strings(&["--json="])).is_err());
        assert!(parse_args(&strings(&["--fast"])).is_err());
    }

    #[test]
    fn medians_over_rounds() {
        let round = |pairs: &[(&str, f64)]| -> Vec<(String, f64)> {
            pairs.iter().map(|&(n, s)| (n.to_owned(), s)).collect()
        };
        let rounds = vec![
            round(&[("a", 3.0), ("b", 10.0)]),
            round(&[("a", 1.0), ("b", 30.0), ("c", 7.0)]),
            round(&[("a", 2.0), ("b", 20.0)]),
        ];
        assert_eq!(
            median_over_rounds(&rounds),
            round(&[("a", 2.0), ("b", 20.0), ("c", 7.0)])
        );
        assert_eq!(
            median_over_rounds(&rounds[..2]),
            round(&[("a", 2.0), ("b", 20.0), ("c", 7.0)])
        );
        assert!(median_over_rounds(&[]).is_empty());
    }

    #[test]
    fn parses_timing_lines() {
        let output = "warming up\n\
                      workload=chain_f32_1e6 seconds=0.00125\n\
                      workload=sum_f64_1e7   seconds=3.5e-3 runs=20\n\
                      workload=chain_f32_1e6 seconds=0.001\n";
        assert_eq!(
            parse_timings(output).unwrap(),
            vec![
                ("chain_f32_1e6".to_owned(), 0.001),
                ("sum_f64_1e7".to_owned(), 0.0035),
            ]
        );
        assert!(parse_timings("workload=x\n").is_err());
        assert!(parse_timings("workload=x seconds=fast\n").is_err());
        assert!(parse_timings("nothing here\n").unwrap().is_empty());
    }

    #[test]
    fn joins_by_name() {
        let ours = vec![("a".to_owned(), 2.0), ("b".to_owned(), 1.0)];
        let jax = vec![("c".to_owned(), 3.0), ("a".to_owned(), 4.0)];
        let rows = join(&ours, &jax);
        assert_eq!(
            rows,
            vec![
                Row {
                    workload: "a".into(),
                    ours_s: Some(2.0),
                    jax_s: Some(4.0)
                },
                Row {
                    workload: "b".into(),
                    ours_s: Some(1.0),
                    jax_s: None
                },
                Row {
                    workload: "c".into(),
                    ours_s: None,
                    jax_s: Some(3.0)
                },
            ]
        );
        assert_eq!(rows[0].ratio(), Some(0.5));
        assert_eq!(rows[1].ratio(), None);
    }

    #[test]
    fn writes_json() {
        let rows = vec![
            Row {
                workload: "matmul_f32_512".into(),
                ours_s: Some(0.002),
                jax_s: Some(0.001),
            },
            Row {
                workload: "odd \"name\"\\".into(),
                ours_s: Some(1e-7),
                jax_s: None,
            },
        ];
        assert_eq!(
            to_json(&rows),
            "[\n  {\"workload\": \"matmul_f32_512\", \"ours_s\": 0.002, \"jax_s\": 0.001, \"ratio\": 2}\
             ,\n  {\"workload\": \"odd \\\"name\\\"\\\\\", \"ours_s\": 0.0000001, \"jax_s\": null, \"ratio\": null}\
             \n]\n"
        );
        assert_eq!(to_json(&[]), "[]\n");
        assert_eq!(json_number(Some(f64::NAN)), "null");
    }

    #[test]
    fn formats_seconds_and_table() {
        assert_eq!(format_seconds(Some(1.23456)), "1.235");
        assert_eq!(format_seconds(Some(0.000512)), "0.0005120");
        assert_eq!(format_seconds(Some(12.5)), "12.50");
        assert_eq!(format_seconds(None), "-");
        let rows = vec![Row {
            workload: "sum_f64_1e7".into(),
            ours_s: Some(0.004),
            jax_s: Some(0.002),
        }];
        let text = table(&rows, true);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "workload    | ours (s) |  jax (s) | ratio (ours/jax)"
        );
        assert_eq!(
            lines[2],
            "sum_f64_1e7 | 0.004000 | 0.002000 |             2.00"
        );
        assert!(!table(&rows, false).contains("jax"));
    }
}
