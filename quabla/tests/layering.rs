//! The facade's layers, as `docs/architecture.md` lists them, hold in the code: every module
//! of `quabla/src` imports only modules of its own layer or of the layers above it in that
//! list, and no modules import each other in a circle.
//!
//! Imports are read from the source: every `crate::` and `super::` path (in `use` items, their
//! brace groups, and inline paths), and names used through the crate root's re-exports
//! (`crate::jit`) resolved to the module that defines them. The layer list is read from the
//! numbered list under "## The facade's layers" in `docs/architecture.md`: each item names its
//! files in backquotes (`tensor.rs`, `ops/`, `linalg/dense.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// A module: its path under `src` without the extension (`ops/reduce`, `linalg`, `lib`).
type Module = String;

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `src`, as (module, source).
fn modules() -> BTreeMap<Module, String> {
    fn walk(dir: &Path, out: &mut BTreeMap<Module, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src_dir()).unwrap().with_extension("");
                let mut name = rel.to_string_lossy().replace('\\', "/");
                if let Some(dir) = name.strip_suffix("/mod") {
                    name = dir.to_string();
                }
                out.insert(
                    name,
                    strip_comments(&std::fs::read_to_string(&path).unwrap()),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&src_dir(), &mut out);
    out
}

/// The source without `//` comments (doc comments mention paths that are not imports) and
/// without the contents of string literals.
fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let mut in_string = false;
        let mut prev = ' ';
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if in_string {
                if c == '"' && prev != '\\' {
                    in_string = false;
                    out.push('"');
                }
                prev = if prev == '\\' && c == '\\' { ' ' } else { c };
                continue;
            }
            if c == '/' && chars.peek() == Some(&'/') {
                break;
            }
            if c == '"' && prev != '\'' {
                in_string = true;
            }
            out.push(c);
            prev = c;
        }
        out.push('\n');
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every path starting at `crate::` or `super::`, with `use` brace groups expanded:
/// `use crate::{a::b, c::{d, e}}` gives `crate::a::b`, `crate::c::d`, `crate::c::e`.
fn paths(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes: Vec<char> = src.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts = ["crate::", "super::"]
            .iter()
            .find(|p| {
                bytes[i..].iter().take(p.len()).copied().eq(p.chars())
                    && (i == 0 || !is_ident(bytes[i - 1]))
            })
            .is_some();
        if !starts {
            i += 1;
            continue;
        }
        let (found, end) = read_path(&bytes, i);
        out.extend(found);
        i = end.max(i + 1);
    }
    out
}

/// Reads the path (or brace tree of paths) at `start`; returns the full paths and where it ended.
fn read_path(s: &[char], start: usize) -> (Vec<String>, usize) {
    let mut i = start;
    let mut prefix = String::new();
    loop {
        let begin = i;
        while i < s.len() && is_ident(s[i]) {
            i += 1;
        }
        prefix.extend(&s[begin..i]);
        if i + 1 < s.len() && s[i] == ':' && s[i + 1] == ':' {
            i += 2;
            prefix.push_str("::");
            if i < s.len() && s[i] == '{' {
                // A brace group: split its items at top-level commas.
                let mut depth = 0;
                let mut item_start = i + 1;
                let mut out = Vec::new();
                let mut j = i;
                while j < s.len() {
                    match s[j] {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                push_item(&prefix, &s[item_start..j], &mut out);
                                return (out, j + 1);
                            }
                        }
                        ',' if depth == 1 => {
                            push_item(&prefix, &s[item_start..j], &mut out);
                            item_start = j + 1;
                        }
                        _ => {}
                    }
                    j += 1;
                }
                return (out, j);
            }
            continue;
        }
        return (vec![prefix], i);
    }
}

fn push_item(prefix: &str, item: &[char], out: &mut Vec<String>) {
    let text: String = item.iter().collect();
    let text = text.trim();
    if text.is_empty() || text == "self" {
        out.push(prefix.trim_end_matches("::").to_string());
        return;
    }
    let text = text.split(" as ").next().unwrap_or(text).trim();
    let chars: Vec<char> = format!("{prefix}{text}").chars().collect();
    let (found, _) = read_path(&chars, 0);
    out.extend(found);
}

/// The module a path names (its longest prefix that is a module), resolving `super::` from
/// `from` and names re-exported at the crate root through `roots`.
fn resolve(
    path: &str,
    from: &Module,
    modules: &BTreeMap<Module, String>,
    roots: &HashMap<String, Module>,
) -> Option<Module> {
    let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<String> = Vec::new();
    if segments.first() == Some(&"crate") {
        segments.remove(0);
    } else {
        // `super::` of a file module is its parent; of a `mod.rs` folder module too.
        base = from.split('/').map(String::from).collect();
        if from == "lib" {
            base.clear();
        }
        while segments.first() == Some(&"super") {
            segments.remove(0);
            base.pop();
        }
    }
    let mut full: Vec<String> = base;
    full.extend(segments.iter().map(|s| s.to_string()));
    for n in (1..=full.len()).rev() {
        let candidate = full[..n].join("/");
        if modules.contains_key(&candidate) {
            return Some(candidate);
        }
    }
    // A name the crate root re-exports.
    full.first().and_then(|name| roots.get(name).cloned())
}

/// Names the crate root re-exports, with the module that defines each: explicit
/// `pub use a::b::{x, y}` lists, and for glob re-exports every public item (and every row of
/// the op-family macros, `name => Op;`) of the module.
fn root_names(modules: &BTreeMap<Module, String>) -> HashMap<String, Module> {
    let lib = &modules["lib"];
    let mut out = HashMap::new();
    for item in lib.split(';') {
        let item = item.trim();
        let Some(rest) = item.strip_prefix("pub use ") else {
            continue;
        };
        if let Some(glob) = rest.strip_suffix("::*") {
            let module = glob.replace("::", "/");
            if let Some(src) = modules.get(&module) {
                for name in defined_names(src) {
                    out.entry(name).or_insert_with(|| module.clone());
                }
            }
            continue;
        }
        for path in paths(&format!("crate::{rest}")) {
            let segs: Vec<&str> = path.split("::").skip(1).collect();
            let (Some(&last), module) = (segs.last(), segs[..segs.len() - 1].join("/")) else {
                continue;
            };
            if !modules.contains_key(&module) {
                continue;
            }
            if last == "*" {
                for name in defined_names(&modules[&module]) {
                    out.entry(name).or_insert_with(|| module.clone());
                }
            } else {
                out.insert(last.to_string(), module);
            }
        }
    }
    out
}

fn defined_names(src: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in src.lines() {
        let t = line.trim_start();
        for kw in [
            "pub fn ",
            "pub struct ",
            "pub enum ",
            "pub trait ",
            "pub type ",
            "pub const ",
        ] {
            if let Some(rest) = t.strip_prefix(kw) {
                names.push(rest.chars().take_while(|&c| is_ident(c)).collect());
            }
        }
        // Op-family macro rows: `    sin => Sin;`.
        if let Some((name, _)) = t.split_once(" => ") {
            if !name.is_empty() && name.chars().all(is_ident) {
                names.push(name.to_string());
            }
        }
    }
    names
}

/// The layers of `docs/architecture.md`: for each numbered item under "## The facade's
/// layers", the files and folders it names in backquotes.
fn documented_layers() -> Vec<(String, Vec<String>)> {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/architecture.md"),
    )
    .unwrap();
    let section = doc
        .split("## The facade's layers")
        .nth(1)
        .expect("docs/architecture.md has a section \"The facade's layers\"");
    let section = section.split("\n## ").next().unwrap();
    let mut layers: Vec<(String, Vec<String>)> = Vec::new();
    for line in section.lines() {
        let t = line.trim_start();
        let numbered = t
            .split_once(". ")
            .is_some_and(|(n, _)| n.chars().all(|c| c.is_ascii_digit()) && !n.is_empty());
        if numbered && !line.starts_with(' ') {
            let title = t.split("**").nth(1).unwrap_or(t).to_string();
            layers.push((title, Vec::new()));
        }
        if let Some((_, files)) = layers.last_mut() {
            for (k, part) in line.split('`').enumerate() {
                if k % 2 == 1 && (part.ends_with(".rs") || part.ends_with('/')) {
                    files.push(part.to_string());
                }
            }
        }
    }
    layers
}

/// The layer of each module: the most specific documented file or folder that holds it.
fn layer_of(module: &Module, layers: &[(String, Vec<String>)]) -> Option<usize> {
    let file = format!("{module}.rs");
    let mut best: Option<(usize, usize)> = None;
    for (i, (_, files)) in layers.iter().enumerate() {
        for f in files {
            let matches = *f == file
                || f.strip_suffix('/')
                    .is_some_and(|dir| module == dir || module.starts_with(&format!("{dir}/")));
            if matches && best.is_none_or(|(_, len)| f.len() > len) {
                best = Some((i, f.len()));
            }
        }
    }
    best.map(|(i, _)| i)
}

fn imports() -> BTreeMap<Module, BTreeSet<Module>> {
    let modules = modules();
    let roots = root_names(&modules);
    let mut out = BTreeMap::new();
    for (module, src) in &modules {
        let mut deps = BTreeSet::new();
        for path in paths(src) {
            if let Some(target) = resolve(&path, module, &modules, &roots) {
                // A module's own submodules and its parent folder's `mod.rs` declarations are
                // structure, not imports.
                if target != *module && target != "lib" {
                    deps.insert(target);
                }
            }
        }
        out.insert(module.clone(), deps);
    }
    out
}

#[test]
fn every_module_imports_only_its_layer_and_the_layers_above() {
    let layers = documented_layers();
    assert!(layers.len() >= 5, "{layers:?}");
    let imports = imports();
    let mut unplaced = Vec::new();
    let mut violations = Vec::new();
    for (module, deps) in &imports {
        if module == "lib" {
            continue;
        }
        let Some(own) = layer_of(module, &layers) else {
            unplaced.push(module.clone());
            continue;
        };
        for dep in deps {
            if let Some(theirs) = layer_of(dep, &layers) {
                if theirs > own {
                    violations.push(format!(
                        "{module}.rs ({}) imports {dep}.rs ({})",
                        layers[own].0, layers[theirs].0
                    ));
                }
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules no layer of docs/architecture.md names: {unplaced:?}"
    );
    assert!(
        violations.is_empty(),
        "imports of a lower layer:\n{}",
        violations.join("\n")
    );
}

#[test]
fn no_modules_import_each_other_in_a_circle() {
    let imports = imports();
    // Tarjan's strongly connected components.
    struct State<'a> {
        imports: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        circles: Vec<Vec<String>>,
    }
    fn visit<'a>(v: &'a str, s: &mut State<'a>) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        let imports = s.imports;
        for w in imports.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(w, s);
                let low = s.low[w].min(s.low[v]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.index[w].min(s.low[v]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut circle = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                circle.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if circle.len() > 1 {
                s.circles.push(circle);
            }
        }
    }
    let mut state = State {
        imports: &imports,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        circles: Vec::new(),
    };
    for m in imports.keys() {
        if !state.index.contains_key(m.as_str()) {
            visit(m, &mut state);
        }
    }
    assert!(
        state.circles.is_empty(),
        "modules that import each other in a circle: {:?}",
        state.circles
    );
}

#[test]
fn the_reader_sees_imports_through_groups_super_and_root_re_exports() {
    let found = paths("use crate::{error::{Error, Result}, tensor::Tensor};\nlet x = super::rules::apply(a); crate::jit(f)");
    assert_eq!(
        found,
        [
            "crate::error::Error",
            "crate::error::Result",
            "crate::tensor::Tensor",
            "super::rules::apply",
            "crate::jit"
        ]
    );
    let modules = modules();
    let roots = root_names(&modules);
    let from = "optim/trainer".to_string();
    assert_eq!(
        resolve("super::rules::apply", &from, &modules, &roots).as_deref(),
        Some("optim/rules")
    );
    assert_eq!(
        resolve("crate::jit", &from, &modules, &roots).as_deref(),
        Some("transforms/jit")
    );
    assert_eq!(
        resolve("crate::sin", &from, &modules, &roots).as_deref(),
        Some("ops/elementwise")
    );
    assert_eq!(
        strip_comments("a // crate::b\n\"crate::c\" d"),
        "a \n\"\" d\n"
    );
}
