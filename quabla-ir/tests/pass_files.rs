//! Pass file tests: each `tests/passes/<pass>/<case>.txt` holds a graph in IR text, a line
//! `// ---- expected`, and the text the pass must produce (outputs named as nodes). The
//! directory name selects the pass (`pipeline` runs all of them in order).
//!
//! Run with `BLESS=1` to rewrite the expected halves from the current output (then review the
//! diff: the files are the specification of each pass).

mod common;

use common::Golden;
use quabla_ir::passes;
use quabla_ir::text::{parse_graph, print_graph, OutputStyle};
use std::fs;
use std::path::Path;

const SEPARATOR: &str = "// ---- expected";

#[test]
fn pass_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/passes");
    let mut golden = Golden::new();
    let mut count = 0;
    let mut dirs: Vec<_> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    for dir in dirs {
        let pass_name = dir.file_name().unwrap().to_str().unwrap().to_string();
        let pass = passes::by_name(&pass_name)
            .unwrap_or_else(|| panic!("unknown pass directory {pass_name}"));
        let mut files: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for file in files {
            count += 1;
            let text = fs::read_to_string(&file).unwrap();
            let (input, expected) = text.split_once(SEPARATOR).unwrap_or((&text, ""));
            let graph = parse_graph(input).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let got = print_graph(&pass(&graph), OutputStyle::Refs);
            golden.check(&file, expected.trim(), got.trim(), || {
                format!("{}{SEPARATOR}\n{got}", input.trim_end().to_string() + "\n")
            });
        }
    }
    assert!(
        count >= 30,
        "expected at least 30 pass files, found {count}"
    );
    golden.finish();
}
