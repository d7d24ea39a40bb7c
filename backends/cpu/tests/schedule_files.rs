//! Schedule file tests: each `tests/schedule/<phase>/<case>.txt` holds a plan graph in IR
//! text, a line `// ---- expected`, and what the CPU scheduler has decided after that phase
//! (`CpuBackend::describe_schedule`): the phases of `schedule/mod.rs` run in order up to the
//! one the directory names, on the graph as written (no IR passes first).
//!
//! Run with `BLESS=1` to rewrite the expected halves from the current output, then review the
//! diff: the files are the specification of each phase.

use quabla_cpu::CpuBackend;
use quabla_ir::text::parse_graph;
use quabla_ir::Plan;
use std::fs;
use std::path::Path;

const SEPARATOR: &str = "// ---- expected";

/// The phases, in order; each must have a directory of cases.
const PHASES: [&str; 7] = [
    "dead_code",
    "fusion",
    "aliases",
    "factorizations",
    "siblings",
    "steps",
    "liveness",
];

#[test]
fn schedule_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schedule");
    let bless = std::env::var_os("BLESS").is_some();
    let backend = CpuBackend::default();
    let mut failures = Vec::new();
    for phase in PHASES {
        let mut files: Vec<_> = fs::read_dir(root.join(phase))
            .unwrap_or_else(|e| panic!("tests/schedule/{phase}: {e}"))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(
            files.len() >= 2,
            "tests/schedule/{phase} needs at least two cases"
        );
        for file in files {
            let text = fs::read_to_string(&file).unwrap();
            let (input, expected) = text.split_once(SEPARATOR).unwrap_or((&text, ""));
            let graph = parse_graph(input).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let plan = Plan::from_graph_unoptimized(graph);
            let got = backend
                .describe_schedule(&plan, phase)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            if bless {
                fs::write(&file, format!("{}\n{SEPARATOR}\n{got}", input.trim_end())).unwrap();
            } else if got.trim() != expected.trim() {
                failures.push(format!(
                    "{}:\n--- expected\n{}\n--- got\n{}",
                    file.display(),
                    expected.trim(),
                    got.trim()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} schedule file(s) differ (BLESS=1 rewrites them):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn an_unknown_phase_is_an_error_naming_the_phases() {
    let graph = parse_graph("%0 = input[name=x] : tensor<f64>\noutputs: [%0]\n").unwrap();
    let plan = Plan::from_graph_unoptimized(graph);
    let err = CpuBackend::default()
        .describe_schedule(&plan, "fuse")
        .unwrap_err()
        .to_string();
    assert!(err.contains("dead_code, fusion, aliases"), "{err}");
}
