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
//!
//! `--only <substring>[,<substring>...]` runs only the rows whose name contains one of the
//! substrings, on every side (the Python package's rows, whose release install is the slow
//! part, are skipped when none of [`PYTHON_ROWS`] is selected); with `--scaling` it selects
//! scaling families instead.
//!
//! Rows that print a `check=<row> tol=<t> <key>=<value>...` line (ours) are compared with the
//! JAX script's line of the same row: every key both print must agree to a relative `t`, or
//! the command fails after printing the table, so a benchmark that computes the wrong thing
//! does not go unnoticed.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{cargo, display_command, succeeds_quietly, workspace_root, Result};

/// The JAX side of the comparison, written to `target/` at run time.
const JAX_BENCH_SCRIPT: &str = include_str!("jax_bench.py");
/// Its twins of the programs written as users write them, written beside it.
const JAX_USER_PROGRAMS: &str = include_str!("jax_user_programs.py");

/// The rows of `quabla-python/bench/bench_python.py` (a test checks the list against it).
const PYTHON_ROWS: [&str; 3] = ["py_jit_call_tiny", "py_chain_f32_1e6", "py_pinn_adam_2000"];

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
    /// `--only`: the substrings of the rows (or scaling families) to run; empty for all.
    only: Vec<String>,
}

impl Options {
    fn rounds(&self) -> usize {
        self.rounds.unwrap_or(if self.vs_jax { 3 } else { 1 })
    }

    /// Whether `--only` selects the row `name`.
    fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|part| name.contains(part.as_str()))
    }

    /// `--only <list>` for the scripts and examples, or nothing.
    fn only_args(&self) -> Vec<String> {
        if self.only.is_empty() {
            Vec::new()
        } else {
            vec!["--only".to_owned(), self.only.join(",")]
        }
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
        if options.vs_jax
            || options.scaling
            || options.json.is_some()
            || options.rounds.is_some()
            || !options.only.is_empty()
        {
            return Err("`--distributed` runs alone".into());
        }
        return crate::mpi::bench();
    }
    if options.scaling {
        if options.vs_jax || options.json.is_some() || options.rounds.is_some() {
            return Err("`--scaling` takes only `--only`: it always times both sides once".into());
        }
        return crate::scaling::run(&options.only);
    }

    // Prepare the JAX environment first, so that a broken Python set-up
    // fails before the (long) Quabla run rather than after it.
    let python = if options.vs_jax {
        Some(prepare_jax_venv()?)
    } else {
        None
    };

    let python_rows = PYTHON_ROWS.iter().any(|name| options.wants(name));
    let mut ours_rounds = Vec::new();
    let mut jax_rounds = Vec::new();
    let (mut ours_checks, mut jax_checks) = (Vec::new(), Vec::new());
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
        if !options.only.is_empty() {
            ours_command.arg("--").args(options.only_args());
        }
        let output = run_tee(&mut ours_command)?;
        let mut ours = parse_timings(&output)?;
        ours_checks = parse_checks(&output)?;
        // The same workloads timed from Python through the package (a release install into
        // target/py-venv).
        if python_rows {
            let mut py_command = crate::python::bench_command()?;
            py_command.args(options.only_args());
            ours.extend(parse_timings(&run_tee(&mut py_command)?)?);
        }
        if ours.is_empty() {
            return Err(format!(
                "`{}` printed no `workload=<name> seconds=<s>` lines{}",
                display_command(&ours_command),
                if options.only.is_empty() {
                    ""
                } else {
                    ": does `--only` name a row?"
                }
            ));
        }
        ours_rounds.push(ours);

        if let Some(python) = &python {
            let mut command = Command::new(python);
            command
                .arg(write_jax_scripts()?)
                .args(options.only_args())
                .env("JAX_PLATFORMS", "cpu")
                .current_dir(workspace_root());
            let output = run_tee(&mut command)?;
            jax_rounds.push(parse_timings(&output)?);
            jax_checks = parse_checks(&output)?;
        }
    }
    let ours = median_over_rounds(&ours_rounds);
    let jax = python.as_ref().map(|_| median_over_rounds(&jax_rounds));

    let rows = join(&ours, jax.as_deref().unwrap_or(&[]));
    println!();
    print!("{}", table(&rows, options.vs_jax));

    let compared = compare_checks(&ours_checks, &jax_checks);
    if !compared.is_empty() {
        println!("\nChecks (what each row computed, ours against JAX's):");
        for line in &compared {
            println!("{line}");
        }
    }

    if let Some(path) = &options.json {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("could not create {}: {e}", parent.display()))?;
        }
        std::fs::write(path, to_json(&rows))
            .map_err(|e| format!("could not write {}: {e}", path.display()))?;
        println!("xtask: wrote {}", path.display());
    }
    let disagree = compared.iter().filter(|l| l.ends_with("MISMATCH")).count();
    if disagree > 0 {
        return Err(format!(
            "{disagree} row(s) computed something other than their JAX twin (MISMATCH above)"
        ));
    }
    Ok(())
}

/// Writes the JAX scripts under `target/`; returns the path of the one to run.
pub(crate) fn write_jax_scripts() -> Result<PathBuf> {
    let dir = target_dir();
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("could not create {}: {e}", dir.display()))?;
    for (name, text) in [
        ("jax_bench.py", JAX_BENCH_SCRIPT),
        ("jax_user_programs.py", JAX_USER_PROGRAMS),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .map_err(|e| format!("could not write {}: {e}", path.display()))?;
    }
    Ok(dir.join("jax_bench.py"))
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
            "--only" => {
                let list = args
                    .next()
                    .ok_or("`--only` needs a substring of a row name: `--only ode_fit`")?;
                options.only.extend(parse_only(list)?);
            }
            other => {
                if let Some(n) = other.strip_prefix("--rounds=") {
                    options.rounds = Some(parse_rounds(n)?);
                    continue;
                }
                if let Some(list) = other.strip_prefix("--only=") {
                    options.only.extend(parse_only(list)?);
                    continue;
                }
                match other.strip_prefix("--json=") {
                    Some(file) if !file.is_empty() => options.json = Some(PathBuf::from(file)),
                    _ => {
                        return Err(format!(
                            "unknown option `{other}` for `cargo xtask bench`; \
                             usage: cargo xtask bench [--vs-jax] [--rounds N] [--json FILE] \
                             [--only SUBSTRING[,SUBSTRING...]], \
                             cargo xtask bench --scaling [--only SUBSTRING[,SUBSTRING...]] \
                             or cargo xtask bench --distributed"
                        ))
                    }
                }
            }
        }
    }
    Ok(options)
}

/// The comma-separated substrings of `--only`, at least one.
fn parse_only(list: &str) -> Result<Vec<String>> {
    let parts: Vec<String> = list
        .split(',')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    if parts.is_empty() {
        return Err(format!(
            "`--only` takes substrings of row names separated by commas, got `{list}`"
        ));
    }
    Ok(parts)
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

/// What a row computed: the keys and values of a `check=<row> [tol=<t>] <key>=<value>...`
/// line.
#[derive(Debug, PartialEq)]
struct Check {
    workload: String,
    /// The relative difference allowed (ours prints it; the JAX lines have none).
    tol: Option<f64>,
    values: Vec<(String, f64)>,
}

/// The `check=` lines of an output, the last one of each row kept.
fn parse_checks(output: &str) -> Result<Vec<Check>> {
    let mut checks: Vec<Check> = Vec::new();
    for line in output.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("check=") else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let workload = fields.next().unwrap_or_default().to_owned();
        let mut check = Check {
            workload,
            tol: None,
            values: Vec::new(),
        };
        for field in fields {
            let parsed = field
                .split_once('=')
                .and_then(|(key, value)| Some((key, value.parse::<f64>().ok()?)));
            match parsed {
                Some(("tol", t)) => check.tol = Some(t),
                Some((key, value)) => check.values.push((key.to_owned(), value)),
                None => return Err(format!("malformed check line `{line}`")),
            }
        }
        if check.workload.is_empty() || check.values.is_empty() {
            return Err(format!("malformed check line `{line}`"));
        }
        checks.retain(|c| c.workload != check.workload);
        checks.push(check);
    }
    Ok(checks)
}

/// One line per row that both sides checked: the key with the largest relative difference
/// `|a - b| / max(|a|, |b|)`, and `ok` or `MISMATCH` against ours' tolerance (default 1e-9).
/// Keys only one side printed are a mismatch too.
fn compare_checks(ours: &[Check], jax: &[Check]) -> Vec<String> {
    let mut lines = Vec::new();
    for check in ours {
        let Some(twin) = jax.iter().find(|c| c.workload == check.workload) else {
            continue;
        };
        let tol = check.tol.unwrap_or(1e-9);
        let mut keys: Vec<&str> = check.values.iter().map(|(k, _)| k.as_str()).collect();
        for (key, _) in &twin.values {
            if !keys.contains(&key.as_str()) {
                keys.push(key);
            }
        }
        let lookup = |c: &Check, key: &str| c.values.iter().find(|(k, _)| k == key).map(|p| p.1);
        let mut worst: Option<(f64, &str, f64, f64)> = None;
        let mut missing = Vec::new();
        for key in keys {
            match (lookup(check, key), lookup(twin, key)) {
                (Some(a), Some(b)) => {
                    let scale = a.abs().max(b.abs());
                    let rel = if a == b {
                        0.0
                    } else if scale > 0.0 {
                        (a - b).abs() / scale
                    } else {
                        f64::INFINITY
                    };
                    let rel = if rel.is_nan() { f64::INFINITY } else { rel };
                    if worst.is_none_or(|w| rel > w.0) {
                        worst = Some((rel, key, a, b));
                    }
                }
                _ => missing.push(key),
            }
        }
        let verdict = |ok: bool| if ok { "ok" } else { "MISMATCH" };
        let line = match worst {
            Some((rel, key, a, b)) if missing.is_empty() => format!(
                "  {}: largest difference at {key}: ours {a:e}, jax {b:e}, relative {rel:.1e} (tol {tol:e}) {}",
                check.workload,
                verdict(rel <= tol)
            ),
            _ => format!(
                "  {}: keys printed by one side only: {} MISMATCH",
                check.workload,
                missing.join(", ")
            ),
        };
        lines.push(line);
    }
    lines
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
                only: Vec::new(),
            }
        );
        let only = parse_args(&strings(&["--only", "ode_fit,newton", "--only=gp_"])).unwrap();
        assert_eq!(only.only, ["ode_fit", "newton", "gp_"]);
        assert!(only.wants("ode_fit_lv_obs40") && only.wants("newton_cg_logreg_d200"));
        assert!(only.wants("gp_mll_grad_n200") && !only.wants("matmul_f64_512"));
        assert_eq!(only.only_args(), ["--only", "ode_fit,newton,gp_"]);
        assert!(parse_args(&[]).unwrap().wants("anything"));
        assert!(parse_args(&[]).unwrap().only_args().is_empty());
        assert!(parse_args(&strings(&["--only"])).is_err());
        assert!(parse_args(&strings(&["--only", ","])).is_err());
        assert!(parse_args(&strings(&["--only="])).is_err());
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
    fn python_rows_are_those_of_the_python_bench() {
        let script = include_str!("../../quabla-python/bench/bench_python.py");
        let printed = script.matches("(\"py_").count();
        assert_eq!(printed, PYTHON_ROWS.len(), "{script}");
        for name in PYTHON_ROWS {
            assert!(script.contains(&format!("(\"{name}\"")), "{name}");
        }
    }

    #[test]
    fn compares_checks() {
        let ours = parse_checks(
            "noise\n\
             check=a tol=1e-6 value=1.0 grad0=2.0 grad1=-3.0\n\
             check=b value=5.0\n\
             check=c tol=1e-3 w_sum=0\n\
             check=d value=1\n\
             check=e value=1.0 extra=2\n",
        )
        .unwrap();
        assert_eq!(ours.len(), 5);
        assert_eq!(ours[0].tol, Some(1e-6));
        assert_eq!(ours[0].values[2], ("grad1".to_owned(), -3.0));
        let jax = parse_checks(
            "check=a value=1.0000001 grad0=2.0 grad1=-3.0\n\
             check=b value=5.1\n\
             check=c w_sum=0.0\n\
             check=e value=1.0\n",
        )
        .unwrap();
        let lines = compare_checks(&ours, &jax);
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines[0].contains("a: largest difference at value") && lines[0].ends_with(" ok"));
        assert!(
            lines[1].contains("b:") && lines[1].ends_with("MISMATCH"),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].contains("relative 0.0e0") && lines[2].ends_with(" ok"),
            "{}",
            lines[2]
        );
        assert!(lines[3].contains("extra") && lines[3].ends_with("MISMATCH"));
        // The last line of a row wins; a line without values or with a bad number is an error.
        let twice = parse_checks("check=a x=1\ncheck=a x=2\n").unwrap();
        assert_eq!(twice[0].values, [("x".to_owned(), 2.0)]);
        assert!(parse_checks("check=a\n").is_err());
        assert!(parse_checks("check=a x=fast\n").is_err());
        let nan = parse_checks("check=a x=NaN\n").unwrap();
        assert!(compare_checks(&nan, &nan)[0].ends_with("MISMATCH"));
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
