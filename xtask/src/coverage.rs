//! `cargo xtask coverage-ops`: which spec functions are implemented and tested, and how.
//!
//! This module owns the operation-coverage report. Nothing in it is a hand-kept list of
//! functions: the list comes from the array sections (§3–§9) of the specification's
//! `api.md`, and each function is checked against the code and the tests:
//!
//! * **implemented**: one of its Rust spellings is defined as a `pub fn` somewhere under
//!   `quabla/src` (a free function or a method), or is re-exported by a `pub use` of
//!   `quabla/src/lib.rs`. The spellings are the Python name made a Rust identifier (`where`
//!   is `where_`, `mod` is `mod_`) and the calls of the row's Rust column (`x.sum_axes(..)`
//!   for `sum`, `x.permute(..)` for `transpose`, `x.split_at(..)` for `split`);
//! * **value**: some `#[test]` function of `quabla/tests/*.rs` calls a spelling
//!   (`qb::name(`, `x.name(`, `Tensor::name`) or one of its axis forms (`x.name_axes(`,
//!   `x.name_keepdims(`); operator forms (`!&a`) are not recognised;
//! * **grad**: such a test also differentiates (`grad`, `value_and_grad`, `jvp`, `vjp`,
//!   `jacobian`, `hessian`); `n/a` for the functions listed in [`ZERO_DERIVATIVE`];
//! * **vmap**: such a test also calls `vmap`.
//!
//! A test's text includes, transitively, the bodies of the non-test functions of its file
//! that it calls, so that table-driven tests (a `table()` helper listing the functions, a
//! `check()` helper taking the derivatives) count. Matching is textual, after comments and
//! string literals are blanked: a method of the same name on another type (`f64::abs`)
//! also counts as a mention.
//!
//! The spec is read from `$QUABLA_SPEC_DIR/api.md` when that variable is set, otherwise
//! from `shared/spec/api.md` beside the workspace (then inside it). The report prints one
//! line per function, in spec order, then `missing=<n>`, the number of functions with any
//! `no`; it exits successfully whatever that number is.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::{workspace_root, Result};

/// Functions whose derivative is 0 at all orders by nature (piecewise constant, or with a
/// `bool_` result), as numerics.md §5 states: a gradient test is not applicable to them.
const ZERO_DERIVATIVE: &[&str] = &[
    // Piecewise constant.
    "floor",
    "ceil",
    "round",
    "sign",
    // Comparisons, with `bool_` results.
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "equal",
    "not_equal",
    // Logic on `bool_` arrays.
    "logical_and",
    "logical_or",
    "logical_not",
    // Predicates and boolean reductions, with `bool_` results.
    "isnan",
    "isfinite",
    "isinf",
    "any",
    "all",
];

/// The transforms whose use makes a test a derivative test.
const DERIVATIVE_TRANSFORMS: &[&str] = &[
    "grad",
    "value_and_grad",
    "jvp",
    "vjp",
    "jacobian",
    "hessian",
];

/// Suffixes of the axis forms of a reduction (`x.sum_axes(..)`, `x.norm_keepdims(..)`, the
/// convention of api.md §5): a test calling one calls the function.
const AXIS_FORMS: &[&str] = &["_axes", "_keepdims"];

/// Python spellings that are Rust keywords, and the Rust names used for them.
const RUST_SPELLINGS: &[(&str, &str)] = &[("where", "where_"), ("mod", "mod_")];

/// Entry point of `cargo xtask coverage-ops`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    if let Some(arg) = args.first() {
        return Err(format!(
            "`cargo xtask coverage-ops` takes no arguments (got `{arg}`); see `cargo xtask help`"
        ));
    }
    let spec_file = spec_file()?;
    let spec = read(&spec_file)?;
    let functions = spec_functions(&spec);
    if functions.is_empty() {
        return Err(format!(
            "no functions found in sections 3-9 of {}",
            spec_file.display()
        ));
    }

    let root = workspace_root();
    let src_dir = root.join("quabla").join("src");
    let mut defined = BTreeSet::new();
    for file in rust_files(&src_dir, true)? {
        defined.extend(pub_fns(&sanitize(&read(&file)?)));
    }
    defined.extend(reexports(&sanitize(&read(&src_dir.join("lib.rs"))?)));

    let mut tests = Vec::new();
    for file in rust_files(&root.join("quabla").join("tests"), false)? {
        tests.extend(test_bodies(&sanitize(&read(&file)?)));
    }

    let mut missing = 0;
    for function in &functions {
        let row = Row::classify(function, &defined, &tests);
        if row.any_no() {
            missing += 1;
        }
        println!("{}", row.line(&function.name));
    }
    println!("missing={missing}");
    Ok(())
}

/// Where api.md is: `$QUABLA_SPEC_DIR`, else `shared/spec` beside, then inside, the workspace.
fn spec_file() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("QUABLA_SPEC_DIR") {
        let file = PathBuf::from(dir).join("api.md");
        return if file.is_file() {
            Ok(file)
        } else {
            Err(format!(
                "QUABLA_SPEC_DIR is set but {} does not exist",
                file.display()
            ))
        };
    }
    let root = workspace_root();
    let mut candidates = Vec::new();
    if let Some(parent) = root.parent() {
        candidates.push(parent.join("shared").join("spec").join("api.md"));
    }
    candidates.push(root.join("shared").join("spec").join("api.md"));
    match candidates.iter().find(|file| file.is_file()) {
        Some(file) => Ok(file.clone()),
        None => Err(format!(
            "cannot find the spec's api.md (looked at {}); set QUABLA_SPEC_DIR to the folder \
             that holds it",
            candidates
                .iter()
                .map(|file| file.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn read(file: &Path) -> Result<String> {
    std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))
}

/// The `.rs` files of `dir`, sorted; with `recursive`, those of its subfolders too.
fn rust_files(dir: &Path, recursive: bool) -> Result<Vec<PathBuf>> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
            .path();
        if path.is_dir() {
            if recursive {
                files.extend(rust_files(&path, true)?);
            }
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// One report line.
#[derive(Debug, PartialEq)]
struct Row {
    value: bool,
    /// `None` when a derivative test does not apply.
    grad: Option<bool>,
    vmap: bool,
}

impl Row {
    fn classify(function: &SpecFunction, defined: &BTreeSet<String>, tests: &[TestBody]) -> Row {
        let spellings = &function.spellings;
        let implemented = spellings.iter().any(|s| defined.contains(s));
        let mentioning: Vec<&TestBody> = tests
            .iter()
            .filter(|t| {
                spellings.iter().any(|s| {
                    mentions(&t.text, s)
                        || AXIS_FORMS
                            .iter()
                            .any(|form| mentions(&t.text, &format!("{s}{form}")))
                })
            })
            .collect();
        let covered =
            |kind: fn(&TestBody) -> bool| implemented && mentioning.iter().any(|t| kind(t));
        Row {
            value: covered(|_| true),
            grad: if ZERO_DERIVATIVE.contains(&function.name.as_str()) {
                None
            } else {
                Some(covered(|t| t.grad))
            },
            vmap: covered(|t| t.vmap),
        }
    }

    fn any_no(&self) -> bool {
        !self.value || self.grad == Some(false) || !self.vmap
    }

    fn line(&self, name: &str) -> String {
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        let grad = self.grad.map_or("n/a", yes_no);
        format!(
            "{name} value={} grad={grad} vmap={}",
            yes_no(self.value),
            yes_no(self.vmap)
        )
    }
}

fn rust_spelling(name: &str) -> &str {
    RUST_SPELLINGS
        .iter()
        .find(|(python, _)| *python == name)
        .map_or(name, |(_, rust)| rust)
}

/// A function of the spec: its Python name and the Rust names that spell it.
#[derive(Debug, PartialEq)]
struct SpecFunction {
    name: String,
    /// The Rust name of `name` first, then the other names the row's Rust column gives it.
    spellings: Vec<String>,
}

/// The functions of the tables of sections 3 to 9 of api.md, in order, without repeats.
///
/// Each row's first cell holds Python spellings in backticks (`` `sin(x)`, `cos(x)` ``,
/// `` `x.gather(indices, axis=0)` ``, `` `greater_equal` ``); the name is the identifier
/// before `(` (after the last `.`). Spellings that are not a name (`x + y`, `x[i, ...]`)
/// are skipped. The second cell's calls (`x.sum_axes(..)`, `qb::where_(..)`) are further
/// Rust spellings: of the row's function when it is alone in its row, otherwise of the
/// function whose Rust name they extend (`min_axes` spells `min`).
fn spec_functions(spec: &str) -> Vec<SpecFunction> {
    let mut functions: Vec<SpecFunction> = Vec::new();
    let mut in_arrays = false;
    for line in spec.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            let number = heading.split('.').next().unwrap_or("").trim();
            in_arrays = number.parse::<u32>().is_ok_and(|n| (3..=9).contains(&n));
            continue;
        }
        if !in_arrays || !line.starts_with('|') {
            continue;
        }
        let mut cells = line[1..].split('|');
        let python = cells.next().unwrap_or("");
        let rust = cells.next().unwrap_or("");
        let names: Vec<&str> = backticked(python).filter_map(function_name).collect();
        let calls: Vec<&str> = backticked(rust).filter_map(rust_call).collect();
        for &name in &names {
            let own = rust_spelling(name);
            let mut spellings = vec![own.to_string()];
            for &call in &calls {
                let extends = call
                    .strip_prefix(own)
                    .is_some_and(|rest| rest.starts_with('_'));
                if (names.len() == 1 || extends) && !spellings.iter().any(|s| s == call) {
                    spellings.push(call.to_string());
                }
            }
            match functions.iter_mut().find(|f| f.name == name) {
                Some(known) => {
                    for spelling in spellings {
                        if !known.spellings.contains(&spelling) {
                            known.spellings.push(spelling);
                        }
                    }
                }
                None => functions.push(SpecFunction {
                    name: name.to_string(),
                    spellings,
                }),
            }
        }
    }
    functions
}

/// The texts between backticks of a table cell.
fn backticked(cell: &str) -> impl Iterator<Item = &str> {
    cell.split('`').skip(1).step_by(2)
}

/// The function a Rust spelling calls first: `qb::name(..)` or `x.name(..)`.
fn rust_call(spelling: &str) -> Option<&str> {
    let rest = match spelling.strip_prefix("qb::") {
        Some(rest) => rest,
        None => {
            let receiver = spelling.bytes().take_while(|&c| is_ident_byte(c)).count();
            spelling[receiver..]
                .strip_prefix('.')
                .filter(|_| receiver > 0)?
        }
    };
    let len = rest.bytes().take_while(|&c| is_ident_byte(c)).count();
    (len > 0 && rest[len..].starts_with('(')).then(|| &rest[..len])
}

/// `sin(x)` → `sin`, `x.gather(..)` → `gather`, `greater_equal` → itself; else `None`.
fn function_name(spelling: &str) -> Option<&str> {
    let head = spelling.split('(').next().unwrap_or("").trim();
    let name = head.rsplit('.').next().unwrap_or("");
    let mut chars = name.chars();
    let starts_well = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    (starts_well && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        .then_some(name)
}

/// Rust source with comments and the contents of string and character literals replaced by
/// spaces (newlines kept), so that braces and names are only those of the code.
fn sanitize(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for byte in &mut out[from..to.min(b.len())] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let prev_ident = i > 0 && is_ident_byte(b[i - 1]);
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = src[i..].find('\n').map_or(b.len(), |n| i + n);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let (mut j, mut depth) = (i + 2, 1);
                while j < b.len() && depth > 0 {
                    if b[j..].starts_with(b"/*") {
                        depth += 1;
                        j += 2;
                    } else if b[j..].starts_with(b"*/") {
                        depth -= 1;
                        j += 2;
                    } else {
                        j += 1;
                    }
                }
                blank(&mut out, i, j);
                i = j;
            }
            b'r' if !prev_ident
                || (i > 0 && b[i - 1] == b'b' && (i < 2 || !is_ident_byte(b[i - 2]))) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) == Some(&b'"') {
                    let start = i + 2 + hashes;
                    let closing: Vec<u8> = std::iter::once(b'"')
                        .chain(std::iter::repeat_n(b'#', hashes))
                        .collect();
                    let end = b[start..]
                        .windows(closing.len())
                        .position(|w| w == closing.as_slice())
                        .map_or(b.len(), |n| start + n);
                    blank(&mut out, start, end);
                    i = end + closing.len();
                } else {
                    i += 1;
                }
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                blank(&mut out, i + 1, j);
                i = j + 1;
            }
            b'\'' => {
                // A character literal, or else a lifetime (left as it is).
                let end = if b.get(i + 1) == Some(&b'\\') {
                    b[i + 3..]
                        .iter()
                        .position(|&c| c == b'\'')
                        .map(|n| i + 3 + n)
                } else {
                    let len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 1 + len)
                };
                match end {
                    Some(end) => {
                        blank(&mut out, i + 1, end);
                        i = end + 1;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Byte positions where `word` occurs as a whole identifier.
fn word_positions<'a>(text: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    let b = text.as_bytes();
    text.match_indices(word).map(|(i, _)| i).filter(move |&i| {
        let end = i + word.len();
        (i == 0 || !is_ident_byte(b[i - 1])) && (end == b.len() || !is_ident_byte(b[end]))
    })
}

/// The identifier starting at `text`'s first non-blank character, if any.
fn leading_ident(text: &str) -> Option<&str> {
    let text = text.trim_start();
    let len = text.bytes().take_while(|&c| is_ident_byte(c)).count();
    (len > 0).then(|| &text[..len])
}

/// Whether `text` ends with the identifier `word` (after trailing blanks).
fn ends_with_word(text: &str, word: &str) -> bool {
    let text = text.trim_end();
    text.ends_with(word) && {
        let before = text.len() - word.len();
        before == 0 || !is_ident_byte(text.as_bytes()[before - 1])
    }
}

/// Names of the `pub fn`s (also `pub const fn` and the like) of sanitized source.
fn pub_fns(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for at in word_positions(text, "fn") {
        let mut before = &text[..at];
        while let Some(rest) = ["const", "unsafe", "async"].iter().find_map(|q| {
            ends_with_word(before, q)
                .then(|| &before.trim_end()[..before.trim_end().len() - q.len()])
        }) {
            before = rest;
        }
        if ends_with_word(before, "pub") {
            if let Some(name) = leading_ident(&text[at + 2..]) {
                names.push(name.to_string());
            }
        }
    }
    names
}

/// Names that the `pub use` items of sanitized source re-export (the last path segment, or
/// the `as` alias).
fn reexports(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for at in word_positions(text, "use") {
        if !ends_with_word(&text[..at], "pub") {
            continue;
        }
        let item = &text[at + 3..];
        let item = &item[..item.find(';').unwrap_or(item.len())];
        let b = item.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if !is_ident_byte(b[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < b.len() && is_ident_byte(b[i]) {
                i += 1;
            }
            let ident = &item[start..i];
            let rest = item[i..].trim_start();
            let is_path = rest.starts_with("::");
            let is_renamed = leading_ident(rest) == Some("as");
            if !is_path && !is_renamed && !matches!(ident, "as" | "self" | "crate" | "super") {
                names.push(ident.to_string());
            }
        }
    }
    names
}

/// A `#[test]` function's text (with the helpers it calls) and the transforms it uses.
#[derive(Debug)]
struct TestBody {
    text: String,
    grad: bool,
    vmap: bool,
}

/// A function of a file: its name, its signature, its body and whether it is a `#[test]`.
struct Function<'a> {
    name: &'a str,
    signature: &'a str,
    body: &'a str,
    is_test: bool,
}

/// The functions with a body in sanitized source (nested ones included).
fn functions(text: &str) -> Vec<Function<'_>> {
    let b = text.as_bytes();
    let mut found = Vec::new();
    for at in word_positions(text, "fn") {
        let Some(name) = leading_ident(&text[at + 2..]) else {
            continue;
        };
        let Some(open) = text[at..].find(['{', ';']).map(|n| at + n) else {
            continue;
        };
        if b[open] == b';' {
            continue; // a declaration without a body
        }
        let mut depth = 0usize;
        let mut close = b.len();
        for (j, &c) in b.iter().enumerate().skip(open) {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = j + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        // The attributes are what lies between the previous item boundary and `fn`.
        let attrs_start = text[..at].rfind(['{', '}', ';']).map_or(0, |n| n + 1);
        found.push(Function {
            name,
            signature: &text[at..open],
            body: &text[open..close],
            is_test: text[attrs_start..at].contains("#[test]"),
        });
    }
    found
}

/// The `#[test]` functions of sanitized source, each with the bodies of the file's other
/// functions that it calls, transitively. Helpers that never name `Tensor` or `qb::` (float
/// comparisons such as `close(a: f64, ..)`) are left out: their `.abs()` and `.max(..)` are
/// not the array functions.
fn test_bodies(text: &str) -> Vec<TestBody> {
    let all = functions(text);
    let about_arrays = |f: &Function| {
        [f.signature, f.body]
            .iter()
            .any(|t| t.contains("Tensor") || t.contains("qb::"))
    };
    let helpers: HashMap<&str, &str> = all
        .iter()
        .filter(|f| !f.is_test && about_arrays(f))
        .map(|f| (f.name, f.body))
        .collect();
    all.iter()
        .filter(|f| f.is_test)
        .map(|test| {
            let mut text = test.body.to_string();
            let mut seen = BTreeSet::new();
            let mut pending = vec![test.body];
            while let Some(body) = pending.pop() {
                for (&name, &helper) in &helpers {
                    if !seen.contains(name) && calls(body, name) {
                        seen.insert(name);
                        text.push('\n');
                        text.push_str(helper);
                        pending.push(helper);
                    }
                }
            }
            let grad = DERIVATIVE_TRANSFORMS.iter().any(|t| calls(&text, t));
            let vmap = calls(&text, "vmap");
            TestBody { text, grad, vmap }
        })
        .collect()
}

/// Whether `text` calls the function `name` (`name(`, `qb::name(`, not a method `.name(`).
fn calls(text: &str, name: &str) -> bool {
    word_positions(text, name).any(|at| {
        let after = text[at + name.len()..].trim_start();
        let before = text[..at].trim_end();
        after.starts_with('(') && !before.ends_with('.')
    })
}

/// Whether `text` mentions the operation `name` as a call or a path: `qb::name`,
/// `Tensor::name`, `.name(`. A method taking a closure (`.all(|x| ..)`) is an iterator's.
fn mentions(text: &str, name: &str) -> bool {
    word_positions(text, name).any(|at| {
        let before = text[..at].trim_end();
        let takes_closure = text[at + name.len()..]
            .trim_start()
            .strip_prefix('(')
            .is_some_and(is_closure);
        (before.ends_with("::") || before.ends_with('.')) && !takes_closure
    })
}

/// Whether call arguments start with a closure: `|..|` or `move |..|`.
fn is_closure(args: &str) -> bool {
    let args = args.trim_start();
    args.starts_with('|')
        || args
            .strip_prefix("move")
            .is_some_and(|rest| rest.trim_start().starts_with('|'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = "\
## 2. Creation

| Python | Rust | Contract | Tier |
| --- | --- | --- | --- |
| `zeros(shape)` | `qb::zeros(..)` | Not an array section. | P0 |

## 3. Elementwise unary functions (`qb`)

| Python | Rust (suggested) | Contract | Tier |
| --- | --- | --- | --- |
| `sin(x)`, `cos(x)` | `x.sin()?`, `x.cos()?` | Native. | P0 |
| `floor(x)` | `x.floor()?` | Zero derivative. | P1 |

## 4. Binary (`qb`)

| `where(mask, on_true, on_false)` | `qb::where_(..)` | Select. | P0 |
| `greater(lhs, rhs)`, `greater_equal`, `less` | `qb::greater(..)` | Comparisons. | P0 |

## 7. Indexing

| `x[i, j:k:s, None, ...]` | `x.index(..)` | Basic indexing. | P0 |
| `x.gather(indices, axis=0)` | `x.gather(..)` | Gather. | P0 |
| `x + y` | `&x + &y` | Operator. | P0 |
| `sin(x)` | `x.sin()?` | A repeat. | P0 |

## 9. More

| `min(x, axis=None)`, `max(...)` | `x.max()?`, `x.min_axes(..)?` | Extremum. | P0 |
| `transpose(x, axes=None)` | `x.transpose()?`, `x.permute([2, 0, 1])?` | Permutation. | P0 |

## 10. Transforms

| `grad(f)` | `qb::grad(f)` | Not an array section. | P0 |
";

    #[test]
    fn spec_functions_are_the_names_of_sections_3_to_9() {
        let functions = spec_functions(SPEC);
        let names: Vec<&str> = functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "sin",
                "cos",
                "floor",
                "where",
                "greater",
                "greater_equal",
                "less",
                "gather",
                "min",
                "max",
                "transpose"
            ]
        );
        let spellings = |name: &str| {
            let f = functions.iter().find(|f| f.name == name).unwrap();
            f.spellings.iter().map(String::as_str).collect::<Vec<_>>()
        };
        assert_eq!(spellings("sin"), ["sin"]);
        assert_eq!(spellings("where"), ["where_"]);
        assert_eq!(spellings("greater_equal"), ["greater_equal"]);
        assert_eq!(spellings("min"), ["min", "min_axes"]);
        assert_eq!(spellings("max"), ["max"]);
        assert_eq!(spellings("transpose"), ["transpose", "permute"]);
    }

    #[test]
    fn sanitize_blanks_comments_and_literals_but_keeps_lifetimes() {
        let src = "fn a<'x>(s: &'x str) { // x.sin()\n let c = '{'; let t = \"qb::cos(\"; \
                   let r = r#\"}\"#; /* .tan( */ }";
        let clean = sanitize(src);
        assert_eq!(clean.len(), src.len());
        assert!(clean.contains("fn a<'x>(s: &'x str)"));
        for gone in ["sin", "cos", "tan", "'{'", "\"}\""] {
            assert!(!clean.contains(gone), "{gone} left in {clean:?}");
        }
        assert_eq!(clean.matches('{').count(), 1);
        assert_eq!(clean.matches('}').count(), 1);
    }

    #[test]
    fn tests_include_the_helpers_they_call() {
        let file = sanitize(
            r#"
fn table() -> Vec<(&'static str, Unary)> {
    vec![("sin", Tensor::sin as Unary), ("exp", |x| x.exp())]
}
fn check(f: Unary) { let _ = qb::grad(f); assert!(close(1.0, 1.0)); }
fn close(a: f64, b: f64) -> bool { (a - b).abs() <= a.abs().max(1.0) }
#[test]
fn derivatives() { for (_, f) in table() { check(f); } }
#[test]
fn batched() -> qb::Result<()> {
    let y = qb::vmap(|x: Tensor| qb::cos(&x)).call(&x)?; // not .tanh(
    Ok(())
}
#[test]
fn values() { assert_eq!(qb::where_(&m, &a, 0.0).unwrap().shape(), [2]); }
"#,
        );
        let tests = test_bodies(&file);
        assert_eq!(tests.len(), 3);
        assert!(tests[0].grad && !tests[0].vmap);
        assert!(mentions(&tests[0].text, "sin") && mentions(&tests[0].text, "exp"));
        assert!(!mentions(&tests[0].text, "abs") && !mentions(&tests[0].text, "max"));
        assert!(!mentions("v.iter().all(|x| *x > 0.0)", "all"));
        assert!(mentions("m.all()?", "all"));
        assert!(tests[1].vmap && !tests[1].grad);
        assert!(mentions(&tests[1].text, "cos") && !mentions(&tests[1].text, "tanh"));

        let defined: BTreeSet<String> = ["sin", "exp", "cos", "where_", "floor"]
            .map(String::from)
            .into();
        let row = |name: &str| {
            let function = SpecFunction {
                name: name.to_string(),
                spellings: vec![rust_spelling(name).to_string()],
            };
            Row::classify(&function, &defined, &tests).line(name)
        };
        assert_eq!(row("sin"), "sin value=yes grad=yes vmap=no");
        assert_eq!(row("cos"), "cos value=yes grad=no vmap=yes");
        assert_eq!(row("where"), "where value=yes grad=no vmap=no");
        assert_eq!(row("floor"), "floor value=no grad=n/a vmap=no");
        assert_eq!(row("tanh"), "tanh value=no grad=no vmap=no");
    }

    #[test]
    fn implemented_names_are_pub_fns_and_reexports() {
        let src = sanitize(
            "pub fn sin(x: &Tensor) {}\nimpl Tensor { pub const fn cos(&self) {} fn tan(&self) {} }\n\
             pub use ops::{a as exp, log, sub::{mod_, where_}};\nuse private::hidden;",
        );
        assert_eq!(pub_fns(&src), ["sin", "cos"]);
        assert_eq!(reexports(&src), ["exp", "log", "mod_", "where_"]);
    }
}
