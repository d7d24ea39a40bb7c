//! `cargo xtask bench --scaling`: how each workload family's cost grows with its size, ours
//! and JAX's side by side.
//!
//! Runs the `scaling_workloads` example (release) and the `--scaling` mode of the JAX script
//! (in the JAX virtualenv of `cargo xtask bench --vs-jax`), both printing
//! `scaling=<family> n=<size> seconds=<s>` lines; prints one table per family; writes the
//! tables into docs/performance.md between its scaling markers; writes `target/scaling.tsv`
//! and draws it as `target/scaling.png` (log-log, through the example's `--plot` mode, which
//! has the plotting dependencies this crate does without).
//!
//! The loop-state families (`loop_state_*`: loops of 100 trips over carries of 8 to 4096
//! elements in half octaves) also get, per size, the time per trip and both sides' ratio to
//! the previous size, and a line naming every step of ours above [`JUMP`]: adjacent sizes
//! differ by at most 1.5× (2× from 8 to 16), so a loop whose work grows linearly stays at or
//! below it, and a change of how the loop runs shows as a jump.
//!
//! `only` (from `--only`) measures the families whose name contains one of its substrings;
//! docs/performance.md is then left as it is, since its tables hold every family.

use crate::bench::{prepare_jax_venv, run_tee, target_dir, write_jax_scripts};
use crate::{cargo, workspace_root, Result};
use std::process::Command;

/// The families of the loop-state sweep start with this.
const LOOP_STATE: &str = "loop_state_";
/// Their trip count (the examples' `LOOP_STATE_TRIPS`).
const LOOP_STATE_TRIPS: f64 = 100.0;
/// The ratio between adjacent sizes above which a step is called a jump.
const JUMP: f64 = 1.5;

/// Where docs/performance.md's generated tables start and end.
const BEGIN: &str = "<!-- scaling tables: written by `cargo xtask bench --scaling` -->";
const END: &str = "<!-- end of scaling tables -->";

/// One point of a family: its size and both sides' median seconds.
#[derive(Debug, PartialEq)]
struct Point {
    family: String,
    n: u64,
    ours: Option<f64>,
    jax: Option<f64>,
}

pub(crate) fn run(only: &[String]) -> Result<()> {
    let python = prepare_jax_venv()?;
    let only_args: Vec<String> = if only.is_empty() {
        Vec::new()
    } else {
        vec!["--only".to_owned(), only.join(",")]
    };
    let mut ours_command = cargo([
        "run",
        "--release",
        "-p",
        "quabla",
        "--example",
        "scaling_workloads",
    ]);
    if !only.is_empty() {
        ours_command.arg("--").args(&only_args);
    }
    let ours = parse(&run_tee(&mut ours_command)?)?;
    let mut command = Command::new(python);
    command
        .arg(write_jax_scripts()?)
        .arg("--scaling")
        .args(&only_args)
        .env("JAX_PLATFORMS", "cpu")
        .current_dir(workspace_root());
    let jax = parse(&run_tee(&mut command)?)?;
    let points = join(&ours, &jax);
    if points.is_empty() {
        return Err("the scaling runs printed no `scaling=` lines".into());
    }
    let tables = tables(&points);
    println!();
    print!("{tables}");

    let tsv = target_dir().join("scaling.tsv");
    std::fs::write(&tsv, to_tsv(&points))
        .map_err(|e| format!("could not write {}: {e}", tsv.display()))?;
    let png = target_dir().join("scaling.png");
    let mut plot = cargo([
        "run",
        "--release",
        "-p",
        "quabla",
        "--example",
        "scaling_workloads",
        "--",
        "--plot",
    ]);
    plot.arg(&tsv).arg(&png);
    crate::run_inherited(&mut plot)?;
    println!("xtask: wrote {}", png.display());

    if !only.is_empty() {
        println!("xtask: `--only` measured some families: docs/performance.md left as it is");
        return Ok(());
    }
    let doc = workspace_root().join("docs").join("performance.md");
    let text = std::fs::read_to_string(&doc)
        .map_err(|e| format!("could not read {}: {e}", doc.display()))?;
    std::fs::write(&doc, with_tables(&text, &tables))
        .map_err(|e| format!("could not write {}: {e}", doc.display()))?;
    println!("xtask: wrote the tables into {}", doc.display());
    Ok(())
}

/// `(family, n, seconds)` of every `scaling=` line, in order.
fn parse(output: &str) -> Result<Vec<(String, u64, f64)>> {
    let mut out = Vec::new();
    for line in output.lines().map(str::trim) {
        if !line.starts_with("scaling=") {
            continue;
        }
        let field = |key: &str| {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(key))
                .ok_or_else(|| format!("malformed scaling line `{line}`: no `{key}`"))
        };
        let family = field("scaling=")?.to_owned();
        let n = field("n=")?
            .parse()
            .map_err(|_| format!("malformed size in scaling line `{line}`"))?;
        let seconds = field("seconds=")?
            .parse()
            .map_err(|_| format!("malformed seconds in scaling line `{line}`"))?;
        out.push((family, n, seconds));
    }
    Ok(out)
}

/// Our points in order, with JAX's of the same family and size (and JAX's extra points after).
fn join(ours: &[(String, u64, f64)], jax: &[(String, u64, f64)]) -> Vec<Point> {
    let mut points: Vec<Point> = ours
        .iter()
        .map(|(family, n, s)| Point {
            family: family.clone(),
            n: *n,
            ours: Some(*s),
            jax: None,
        })
        .collect();
    for (family, n, s) in jax {
        match points.iter_mut().find(|p| &p.family == family && p.n == *n) {
            Some(p) => p.jax = Some(*s),
            None => points.push(Point {
                family: family.clone(),
                n: *n,
                ours: None,
                jax: Some(*s),
            }),
        }
    }
    points
}

fn cell(seconds: Option<f64>) -> String {
    seconds.map_or_else(|| "-".to_owned(), |s| format!("{s:.3e}"))
}

/// `a / b` with two decimals, or `-`.
fn ratio(a: Option<f64>, b: Option<f64>) -> (String, Option<f64>) {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => (format!("{:.2}", a / b), Some(a / b)),
        _ => ("-".to_owned(), None),
    }
}

/// One Markdown table per family: size, both sides' seconds, the ratio, and our seconds per
/// unit of size (the column that shows linear growth as a constant). A loop-state family
/// has our seconds per trip instead, each side's ratio to the previous size (ours marked
/// above [`JUMP`]) and a line listing our jumps.
fn tables(points: &[Point]) -> String {
    let mut families: Vec<&str> = Vec::new();
    for p in points {
        if !families.contains(&p.family.as_str()) {
            families.push(&p.family);
        }
    }
    let mut out = String::new();
    for family in families {
        let sweep = family.starts_with(LOOP_STATE);
        out.push_str(&format!("`{family}`\n\n"));
        out.push_str(if sweep {
            "| n | ours (s) | JAX (s) | ratio | ours per trip (s) | ours × prev | JAX × prev |\n\
             | --- | --- | --- | --- | --- | --- | --- |\n"
        } else {
            "| n | ours (s) | JAX (s) | ratio | ours / n (s) |\n| --- | --- | --- | --- | --- |\n"
        });
        let mut previous: Option<&Point> = None;
        let mut jumps = Vec::new();
        for p in points.iter().filter(|p| p.family == family) {
            let (vs_jax, _) = ratio(p.ours, p.jax);
            if !sweep {
                out.push_str(&format!(
                    "| {} | {} | {} | {vs_jax} | {} |\n",
                    p.n,
                    cell(p.ours),
                    cell(p.jax),
                    cell(p.ours.map(|o| o / p.n as f64))
                ));
                continue;
            }
            let (ours_step, ours_value) = ratio(p.ours, previous.and_then(|q| q.ours));
            let (jax_step, _) = ratio(p.jax, previous.and_then(|q| q.jax));
            let ours_step = match (ours_value, previous) {
                (Some(r), Some(q)) if r > JUMP => {
                    jumps.push(format!("{} → {}: {r:.2}×", q.n, p.n));
                    format!("**{ours_step}**")
                }
                _ => ours_step,
            };
            out.push_str(&format!(
                "| {} | {} | {} | {vs_jax} | {} | {ours_step} | {jax_step} |\n",
                p.n,
                cell(p.ours),
                cell(p.jax),
                cell(p.ours.map(|o| o / LOOP_STATE_TRIPS)),
            ));
            previous = Some(p);
        }
        if sweep {
            out.push_str(&if jumps.is_empty() {
                format!("\nNo step of ours above {JUMP}× between adjacent sizes.\n")
            } else {
                format!(
                    "\nSteps of ours above {JUMP}× between adjacent sizes: {}.\n",
                    jumps.join(", ")
                )
            });
        }
        out.push('\n');
    }
    out
}

fn to_tsv(points: &[Point]) -> String {
    points
        .iter()
        .filter_map(|p| match (p.ours, p.jax) {
            (Some(o), Some(j)) => Some(format!("{}\t{}\t{o:e}\t{j:e}\n", p.family, p.n)),
            _ => None,
        })
        .collect()
}

/// `text` with the tables between the markers replaced (or, without markers, appended under
/// a heading of their own).
fn with_tables(text: &str, tables: &str) -> String {
    let block = format!("{BEGIN}\n\n{tables}{END}");
    match (text.find(BEGIN), text.find(END)) {
        (Some(b), Some(e)) if e > b => {
            format!("{}{block}{}", &text[..b], &text[e + END.len()..])
        }
        _ => format!("{}\n\n## Scaling\n\n{block}\n", text.trim_end()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_joins_and_tabulates() {
        let ours =
            parse("noise\nscaling=fori n=100 seconds=2e-6\nscaling=fori n=1000 seconds=2e-5\n")
                .unwrap();
        let jax =
            parse("scaling=fori n=100 seconds=4e-6\nscaling=matmul n=32 seconds=1e-6\n").unwrap();
        let points = join(&ours, &jax);
        assert_eq!(points.len(), 3);
        assert_eq!(points[0].ours, Some(2e-6));
        assert_eq!(points[0].jax, Some(4e-6));
        assert_eq!(points[1].jax, None);
        assert_eq!(points[2].family, "matmul");
        let t = tables(&points);
        assert!(
            t.contains("| 100 | 2.000e-6 | 4.000e-6 | 0.50 | 2.000e-8 |"),
            "{t}"
        );
        assert!(t.contains("| 1000 | 2.000e-5 | - | - | 2.000e-8 |"), "{t}");
        assert!(t.contains("`matmul`"), "{t}");
        assert!(!t.contains("× prev"), "{t}");
        assert_eq!(to_tsv(&points), "fori\t100\t2e-6\t4e-6\n");
        assert!(parse("scaling=fori n=x seconds=1").is_err());
        assert!(parse("scaling=fori seconds=1").is_err());
    }

    #[test]
    fn loop_state_tables_show_steps_between_sizes_and_jumps() {
        let ours = parse(
            "scaling=loop_state_fori_elementwise n=8 seconds=1e-6\n\
             scaling=loop_state_fori_elementwise n=16 seconds=1.2e-6\n\
             scaling=loop_state_fori_elementwise n=32 seconds=1e-5\n",
        )
        .unwrap();
        let jax = parse(
            "scaling=loop_state_fori_elementwise n=8 seconds=2e-6\n\
             scaling=loop_state_fori_elementwise n=16 seconds=3e-6\n",
        )
        .unwrap();
        let t = tables(&join(&ours, &jax));
        assert!(
            t.contains("| ours per trip (s) | ours × prev | JAX × prev |"),
            "{t}"
        );
        assert!(
            t.contains("| 8 | 1.000e-6 | 2.000e-6 | 0.50 | 1.000e-8 | - | - |"),
            "{t}"
        );
        assert!(
            t.contains("| 16 | 1.200e-6 | 3.000e-6 | 0.40 | 1.200e-8 | 1.20 | 1.50 |"),
            "{t}"
        );
        assert!(
            t.contains("| 32 | 1.000e-5 | - | - | 1.000e-7 | **8.33** | - |"),
            "{t}"
        );
        assert!(t.contains("adjacent sizes: 16 → 32: 8.33×."), "{t}");
        let smooth = tables(&join(&ours[..2], &jax));
        assert!(smooth.contains("No step of ours above 1.5×"), "{smooth}");
    }

    #[test]
    fn tables_replace_the_marked_block_or_are_appended() {
        let first = with_tables("# Doc\n\ntext", "T1\n");
        assert!(first.starts_with("# Doc\n\ntext\n\n## Scaling\n\n"));
        assert!(first.contains("T1"));
        let second = with_tables(&first, "T2\n");
        assert!(second.contains("T2") && !second.contains("T1"));
        assert_eq!(second.matches(BEGIN).count(), 1);
        assert_eq!(with_tables(&second, "T2\n"), second);
    }
}
