//! The CPU crate's modules form layers without a circle: each top-level module of `src`
//! imports (through `crate::` paths, comments aside) only modules of the layers before it in
//! [`LAYERS`]. The scheduler compiles region calls through a callback and the executor runs
//! them through a trait, so neither names the region runner above them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The top-level modules, lowest first: a module may import only those listed before it.
const LAYERS: [&str; 8] = [
    "buffer",
    "kernels",
    "workspace",
    "schedule",
    "scalar",
    "native",
    "exec",
    "region",
];

/// The source of `path` without its comments (line comments only: the crate has no block
/// comments), so that prose naming a module is not an import.
fn code_of(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `.rs` file of each top-level module (`src/<name>.rs` and everything under
/// `src/<name>/`), joined.
fn top_level_modules() -> BTreeMap<String, String> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut modules: BTreeMap<String, String> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let name = first.trim_end_matches(".rs").to_string();
        if name == "lib" {
            continue;
        }
        modules.entry(name).or_default().push_str(&code_of(&file));
    }
    modules
}

/// The modules `code` names as `crate::<module>`.
fn imports(code: &str) -> Vec<&str> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        found.push(&rest[..end]);
    }
    found
}

#[test]
fn the_modules_import_only_layers_below_them() {
    let modules = top_level_modules();
    let mut listed: Vec<&str> = modules.keys().map(String::as_str).collect();
    listed.sort_unstable();
    let mut layers = LAYERS.to_vec();
    layers.sort_unstable();
    assert_eq!(
        listed, layers,
        "every top-level module of src must have its place in LAYERS"
    );
    let layer = |m: &str| LAYERS.iter().position(|&l| l == m);
    let mut wrong = Vec::new();
    for (module, code) in &modules {
        let own = layer(module).unwrap();
        for imported in imports(code) {
            match layer(imported) {
                Some(l) if l >= own && imported != module => {
                    wrong.push(format!("{module} imports {imported}"))
                }
                _ => {}
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "imports against the layers {LAYERS:?}:\n{}",
        wrong.join("\n")
    );
}
