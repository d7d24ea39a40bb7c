//! `cargo xtask coverage-api`: for every row of every table of the spec's `api.md`
//! (sections 1 to 22), whether the Rust facade defines what the row names, and whether a
//! test uses it.
//!
//! This module owns the API-coverage report: reading the rows, extracting the Rust items a
//! row's Rust column names, and classifying each row. Nothing in it is a hand-kept list of
//! names: the rows come from `api.md`, the definitions from `quabla/src` (through
//! [`crate::items`]), the uses from the tests.
//!
//! **Rows.** Each table row is `| Python | Rust (suggested) | Contract | Tier |`; cells are
//! split at `|` (an escaped `\|` stays in its cell). §22 has no table: each name its text
//! puts in backticks (dunder names aside) is a row of its own, about the Python package.
//!
//! **Names.** The backticked spellings of the Rust column give the items, in order:
//! `qb::a::b(..)` or `qb::a::B` (a path; a capitalised segment is a type and the next one its
//! member, `qb::optim::Adam::new`, `qb::Error::Tracer { .. }`), `x.name(..)` and chained
//! `.name(..)` (methods), `qb::s![..]` (a macro), `#[derive(qb::Tree)]`, `impl Display` and
//! the operators (`&x + &y` is `impl Add`, `-&x` is `impl Neg`), `Owner::Variant` written
//! without `qb::` (`Trans::T`), a bare capitalised name (`F32`, and the return types after
//! `->`, `-> (P, LbfgsInfo)`), and a bare call at the start of a spelling, taken in the
//! module of the cell's first path (`map_n(..)` after `qb::tree::map(..)`). A spelling after
//! the word "no" (`no PartialEq`) is skipped. A Rust column without backticks ("same",
//! "Rust structs with the same field names") takes the Python column's names instead. A row
//! listing several Python functions of which the Rust column spells only some
//! (`tan(x), sinh(x), cosh(x)` | `x.tan()? etc.`) gets the others in the same form. The
//! first item of each spelling is a *head*; the others (builder methods, arguments) are
//! checked for being defined only. The few builder methods the code spells differently from
//! the spec are listed, each with its reason, in [`ALIASES`].
//!
//! **implemented**: the row's first item is defined: a path is reachable as written (defined
//! in that module, re-exported there by name, or through a glob re-export), a type's member
//! is a method, associated constant or variant of it (also in the workspace crates that the
//! facade re-exports types from, such as `quabla-ir` for `DType`), a method is a public
//! function of some type or trait, a trait is implemented (operators through the macros that
//! write them too). `yes` when every item of the row is defined, `partial` (with the
//! undefined ones) when only some are; when the first item is not, the row is `missing`.
//!
//! **tested**: every head is used by some test: a `#[test]` function of `quabla/tests/*.rs`
//! or of a `#[cfg(test)]` module of `quabla/src` (with the helpers of its file that it
//! calls), or a Rust code block of the doc comments of `quabla/src` or of a Markdown file
//! they include as documentation (the README). A path is used when a test writes it from its
//! last module on (`linalg::eigh`, `Tensor::from_vec`, `qb::zeros`) or calls the name bare
//! where its file imports it; a method as `.name(` (not taking a closure); a type or
//! constant by its name; a macro as `name!`; a derive in a `#[derive(..)]`; an operator
//! applied to a borrowed operand (`+ &y`, `&x *`); `Display`/`Debug` by any formatting.
//!
//! **binding-only** rows (the Rust column says "binding only", and §22) are the Python
//! package's: `python=yes` when the sources under `quabla-python/` mention the Python name
//! (quoted, as a `def`, a binding's `fn`, or a module file; see
//! [`PythonPackage::mentions`]).
//!
//! **missing**: §20 (`qb.distributed`) and rows whose contract names only CUDA or MLX (never
//! the CPU) are `missing (distributed)` / `missing (device)` when not defined: they need
//! CUDA or MLX devices. Any other undefined row is `missing (not defined)`.
//!
//! **Amendments.** The names added after the spec (integer dtypes, indexing by tensors,
//! integer functions, random samplers, `scan` over `xs`, ...) are rows of the project's
//! `docs/api-amendments.md`, in the spec's table form under the spec's section headings.
//! They are read after the spec's rows, counted in their sections and classified by the same
//! rules; their lines say `amended` after the place (`§14 amended choice  implemented=yes`).
//!
//! The spec is read as by `cargo xtask coverage-ops`. The report prints one line per row,
//! then one summary line per section and a total; it exits successfully whatever they say.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::coverage::rust_spelling;
use crate::items::Index;
use crate::source::{
    backticked, calls, is_ident_byte, mentions, read, rust_files, sanitize, spec_file, test_texts,
    word_positions,
};
use crate::{workspace_root, Result};

/// Spec spellings (of builder methods) that the code writes differently, and the code's
/// spelling. Each entry says why it is the same item.
const ALIASES: &[(&str, &str)] = &[
    // `lstsq(.., return_residuals=True)`: api.md §0.2 turns such result-shaping flags into a
    // second finisher (`info=True` is `.eval_with_info()`), so `.return_residuals(true)
    // .eval()` is written `.eval_with_residuals()`.
    ("return_residuals", "eval_with_residuals"),
];

/// The section about data parallelism over several CUDA devices (`qb.distributed`).
const DISTRIBUTED_SECTION: u32 = 20;

/// The section without a table: the names kept out of `from quabla import *`.
const PYTHON_ONLY_SECTION: u32 = 22;

/// The standard traits a Rust column may name bare (`impl Display`/`Debug`,
/// `Copy + Eq + Hash`).
const STD_TRAITS: &[&str] = &[
    "Display",
    "Debug",
    "Clone",
    "Copy",
    "PartialEq",
    "Eq",
    "Hash",
    "Default",
];

/// Standard types of return types (`-> Vec<Tensor>`), which are not the facade's items.
const STD_TYPES: &[&str] = &[
    "Vec", "Option", "String", "Result", "Box", "Self", "HashMap", "BTreeMap",
];

/// Binary operators and their `std::ops` traits.
const BINARY_OPERATORS: &[(&str, &str)] = &[
    ("+", "Add"),
    ("-", "Sub"),
    ("*", "Mul"),
    ("/", "Div"),
    ("&", "BitAnd"),
    ("|", "BitOr"),
];

/// Unary operators and their `std::ops` traits.
const UNARY_OPERATORS: &[(&str, &str)] = &[("-", "Neg"), ("!", "Not")];

/// Entry point of `cargo xtask coverage-api`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    if let Some(arg) = args.first() {
        return Err(format!(
            "`cargo xtask coverage-api` takes no arguments (got `{arg}`); see `cargo xtask help`"
        ));
    }
    let spec_file = spec_file()?;
    let (sections, mut rows) = parse_spec(&read(&spec_file)?);
    if rows.is_empty() {
        return Err(format!("no table rows found in {}", spec_file.display()));
    }
    let root = workspace_root();
    rows.extend(amendment_rows(&root.join(AMENDMENTS), &sections)?);
    let code = Code::load(&root)?;
    let tests = corpus(&root, &code.main)?;
    let python = PythonPackage::load(&root.join("quabla-python"))?;

    let statuses: Vec<Status> = rows
        .iter()
        .map(|row| classify(row, &code, &tests, &python))
        .collect();
    for (row, status) in rows.iter().zip(&statuses) {
        println!("{}", line(row, status));
    }
    let mut total = Tally::default();
    for section in &sections {
        let mut tally = Tally::default();
        for (_, status) in rows
            .iter()
            .zip(&statuses)
            .filter(|(row, _)| row.section == section.number)
        {
            tally.add(status);
        }
        println!("§{} {}: {}", section.number, section.title, tally.counts());
        total.merge(&tally);
    }
    println!(
        "total {} (device={} distributed={} not-defined={})",
        total.counts(),
        total.device,
        total.distributed,
        total.missing - total.device - total.distributed
    );
    Ok(())
}

/// The rows of API added after the spec, relative to the workspace root.
const AMENDMENTS: &str = "docs/api-amendments.md";

/// The rows of the amendments file (none without the file), each placed in its section of the
/// spec and marked `amended`; a section the spec does not have is an error (the rows would not
/// be counted anywhere).
fn amendment_rows(file: &Path, sections: &[Section]) -> Result<Vec<SpecRow>> {
    if !file.is_file() {
        return Ok(Vec::new());
    }
    let (amended, mut rows) = parse_spec(&read(file)?);
    if let Some(unknown) = amended
        .iter()
        .find(|a| !sections.iter().any(|s| s.number == a.number))
    {
        return Err(format!(
            "{}: section {} is not a section of api.md",
            file.display(),
            unknown.number
        ));
    }
    for row in &mut rows {
        row.place = format!("{} amended", row.place);
    }
    Ok(rows)
}

/// A numbered section of api.md.
#[derive(Debug, PartialEq)]
struct Section {
    number: u32,
    title: String,
}

/// One row of api.md.
#[derive(Debug, PartialEq)]
struct SpecRow {
    section: u32,
    /// The section or subsection the row is in: `2.1`, `17`.
    place: String,
    python: String,
    rust: String,
    contract: String,
}

/// The sections 1 to 22 of api.md and their rows, in order.
fn parse_spec(spec: &str) -> (Vec<Section>, Vec<SpecRow>) {
    let mut sections = Vec::new();
    let mut rows = Vec::new();
    let mut current: Option<u32> = None;
    let mut place = String::new();
    for line in spec.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            let (number, title) = heading.split_once('.').unwrap_or((heading, ""));
            current = number
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=PYTHON_ONLY_SECTION).contains(n));
            if let Some(number) = current {
                sections.push(Section {
                    number,
                    title: title.trim().to_string(),
                });
                place = number.to_string();
            }
            continue;
        }
        let Some(section) = current else {
            continue;
        };
        if let Some(heading) = line.strip_prefix("### ") {
            let number = heading.split_whitespace().next().unwrap_or("");
            if number.starts_with(&format!("{section}.")) {
                place = number.trim_end_matches('.').to_string();
            }
            continue;
        }
        if line.starts_with('|') {
            let cells = split_cells(line);
            let first = cells.first().map_or("", |c| c.trim());
            if cells.len() < 3 || first == "Python" || first.starts_with("---") {
                continue;
            }
            rows.push(SpecRow {
                section,
                place: place.clone(),
                python: cells[0].trim().to_string(),
                rust: cells[1].trim().to_string(),
                contract: cells[2].trim().to_string(),
            });
        } else if section == PYTHON_ONLY_SECTION {
            for name in backticked(line) {
                let is_name = name.bytes().all(is_ident_byte) && !name.starts_with("__");
                let known = rows
                    .iter()
                    .any(|r: &SpecRow| r.section == section && r.python.trim_matches('`') == name);
                if is_name && !known {
                    rows.push(SpecRow {
                        section,
                        place: place.clone(),
                        python: format!("`{name}`"),
                        rust: "binding only".to_string(),
                        contract: "Kept out of `__all__`.".to_string(),
                    });
                }
            }
        }
    }
    (sections, rows)
}

/// The cells of a table line: split at `|`, except at an escaped `\|`, which becomes `|`.
fn split_cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut cells = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '|' {
            cells.push(String::new());
            continue;
        }
        let c = if c == '\\' && chars.peek() == Some(&'|') {
            chars.next().unwrap_or(c)
        } else {
            c
        };
        if let Some(cell) = cells.last_mut() {
            cell.push(c);
        }
    }
    cells
}

/// An item that a Rust spelling names.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Ref {
    /// `qb::a::b` or `qb::a::B::c`: the segments after `qb::`.
    Path(Vec<String>),
    /// `Owner::member` written without `qb::` (`Trans::T`).
    Member(String, String),
    /// `x.name(..)` or a chained `.name(..)`.
    Method(String),
    /// `qb::name!`.
    Macro(String),
    /// `#[derive(qb::Name)]`.
    Derive(String),
    /// An implementation of a trait (an operator's, or a standard one), for the type named
    /// before it in the cell if any.
    Impl(String, Option<String>),
    /// A bare capitalised name: a type, a constant, a variant.
    Name(String),
}

impl std::fmt::Display for Ref {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ref::Path(segments) => write!(f, "qb::{}", segments.join("::")),
            Ref::Member(owner, member) => write!(f, "{owner}::{member}"),
            Ref::Method(name) => write!(f, ".{name}()"),
            Ref::Macro(name) => write!(f, "qb::{name}!"),
            Ref::Derive(name) => write!(f, "#[derive({name})]"),
            Ref::Impl(name, _) => write!(f, "impl {name}"),
            Ref::Name(name) => write!(f, "{name}"),
        }
    }
}

/// The items of a row, and which of them are heads (the first of each spelling).
#[derive(Debug, Default, PartialEq)]
struct RowRefs {
    refs: Vec<Ref>,
    heads: Vec<Ref>,
}

impl RowRefs {
    fn push(&mut self, spelling: Vec<Ref>) {
        let observable = |r: &Ref| match r {
            Ref::Impl(name, _) => !STD_TRAITS.contains(&name.as_str()) || is_format_trait(name),
            _ => true,
        };
        if let Some(head) = spelling.iter().find(|r| observable(r)) {
            if !self.heads.contains(head) {
                self.heads.push(head.clone());
            }
        }
        for r in spelling {
            if !self.refs.contains(&r) {
                self.refs.push(r);
            }
        }
    }
}

fn is_format_trait(name: &str) -> bool {
    matches!(name, "Display" | "Debug")
}

/// What the spellings of a cell have established so far: the module of its first path (for
/// a bare call) and the last type named (for a bare trait).
#[derive(Debug, Default)]
struct Context {
    module: Option<Vec<String>>,
    last_type: Option<String>,
}

/// The items a row names: those of its Rust column, or its Python column's when the Rust
/// column has no backticked spelling.
/// The Python package's submodules, whose functions are paths of the facade's modules of the
/// same names.
const SUBMODULES: [&str; 6] = ["tree", "random", "optim", "linalg", "ode", "distributed"];

fn row_refs(python: &str, rust: &str) -> RowRefs {
    let mut refs = RowRefs::default();
    let spellings = cell_spellings(rust);
    if spellings.is_empty() {
        // A submodule's function (`distributed.all_reduce(..)`) is a path in that module, and
        // so are the bare names listed after it in the cell (`broadcast(..)`).
        let mut module: Option<String> = None;
        for spelling in backticked(python) {
            let head = python_head(spelling);
            let name = head.rsplit('.').next().unwrap_or("");
            let prefix = head.rsplit_once('.').map(|(p, _)| p);
            let r = if let Some(m) = prefix.filter(|p| SUBMODULES.contains(p)) {
                module = Some(m.to_string());
                Ref::Path(vec![m.to_string(), name.to_string()])
            } else if head.contains('.') {
                Ref::Method(name.to_string())
            } else if starts_upper(name) {
                Ref::Name(name.to_string())
            } else if let Some(m) = &module {
                Ref::Path(vec![m.clone(), name.to_string()])
            } else {
                Ref::Path(vec![name.to_string()])
            };
            if !name.is_empty() && name.bytes().all(is_ident_byte) {
                refs.push(vec![r]);
            }
        }
        return refs;
    }
    let mut context = Context::default();
    for spelling in spellings {
        let spelling_refs = spelling_refs(spelling, &mut context)
            .into_iter()
            .map(aliased)
            .collect();
        refs.push(spelling_refs);
    }
    add_unspelled_functions(python, &mut refs);
    refs
}

/// A row listing several Python functions whose Rust column spells only some of them
/// (`tan(x), sinh(x), cosh(x)` | `x.tan()? etc.`, `greater, greater_equal, ..` |
/// `qb::greater(..)`): the others are heads too, in the form of the first one spelled
/// (a method, or a path in the same module).
fn add_unspelled_functions(python: &str, refs: &mut RowRefs) {
    let names: Vec<String> = backticked(python)
        .map(python_head)
        .filter_map(|head| {
            let name = head.rsplit('.').next()?;
            (!name.is_empty() && name.bytes().all(is_ident_byte))
                .then(|| rust_spelling(name).to_string())
        })
        .collect();
    if names.len() < 2 {
        return;
    }
    let item_name = |r: &Ref| match r {
        Ref::Method(name) => Some(name.clone()),
        Ref::Path(segments) => segments.last().cloned(),
        _ => None,
    };
    let Some(template) = refs
        .heads
        .iter()
        .find(|r| item_name(r).is_some_and(|n| names.contains(&n)))
        .cloned()
    else {
        return;
    };
    for name in &names {
        if refs
            .refs
            .iter()
            .any(|r| item_name(r).as_ref() == Some(name))
        {
            continue;
        }
        let r = match &template {
            Ref::Path(segments) => {
                let mut path = segments[..segments.len() - 1].to_vec();
                path.push(name.clone());
                Ref::Path(path)
            }
            _ => Ref::Method(name.clone()),
        };
        refs.push(vec![r]);
    }
}

/// `r` with a spec spelling of [`ALIASES`] replaced by the code's.
fn aliased(r: Ref) -> Ref {
    let code_name = |name: &str| {
        ALIASES
            .iter()
            .find(|(spec, _)| *spec == name)
            .map(|(_, code)| code.to_string())
    };
    match r {
        Ref::Method(name) => Ref::Method(code_name(&name).unwrap_or(name)),
        other => other,
    }
}

/// The backticked spellings of a cell, without those after the word "no".
fn cell_spellings(cell: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut before = "";
    for (i, part) in cell.split('`').enumerate() {
        if i % 2 == 1 {
            let negated = before
                .trim_end()
                .rsplit(|c: char| !c.is_ascii_alphanumeric())
                .next()
                == Some("no");
            if !negated {
                out.push(part);
            }
        } else {
            before = part;
        }
    }
    out
}

/// The Python spelling up to its arguments: `sin(x)` → `sin`, `x[i, j]` → `x[..]`.
fn python_head(spelling: &str) -> String {
    let head = spelling.split('(').next().unwrap_or("").trim();
    match head.find('[') {
        Some(open) => format!("{}[..]", &head[..open]),
        None => head.to_string(),
    }
}

/// The items one Rust spelling names, in order.
fn spelling_refs(spelling: &str, context: &mut Context) -> Vec<Ref> {
    let text = blank_strings(spelling);
    let text = text.trim();
    if let Some(inner) = text.strip_prefix("#[derive(") {
        let path = inner.split(')').next().unwrap_or("");
        let name = path.rsplit("::").next().unwrap_or("").trim();
        return vec![Ref::Derive(name.to_string())];
    }
    if let Some(rest) = text.strip_prefix("impl ") {
        let rest = rest.trim();
        if !rest.starts_with("qb::") {
            let name: String = rest
                .bytes()
                .take_while(|&c| is_ident_byte(c))
                .map(char::from)
                .collect();
            return vec![Ref::Impl(name, context.last_type.clone())];
        }
    }
    if text.bytes().all(is_ident_byte) && !text.is_empty() {
        return if STD_TRAITS.contains(&text) {
            vec![Ref::Impl(text.to_string(), context.last_type.clone())]
        } else if starts_upper(text) {
            vec![Ref::Name(text.to_string())]
        } else {
            Vec::new()
        };
    }
    if let Some(traits) = operator_traits(text, context) {
        return traits;
    }
    scan_spelling(text, context)
}

/// `&x + &y` → `[impl Add]`, `-&x` → `[impl Neg]`, `Copy + Eq + Hash` → those traits; `None`
/// for a spelling that is not an operator expression.
fn operator_traits(text: &str, context: &Context) -> Option<Vec<Ref>> {
    if text.contains('(') || text.contains("::") {
        return None;
    }
    let tokens: Vec<&str> = text.split_whitespace().collect();
    let operand = |t: &str| {
        let t = t.trim_start_matches('&');
        !t.is_empty() && t.bytes().all(|c| is_ident_byte(c) || c == b'.')
    };
    if let [single] = tokens.as_slice() {
        return UNARY_OPERATORS.iter().find_map(|(op, name)| {
            single
                .strip_prefix(op)
                .filter(|rest| operand(rest))
                .map(|_| vec![Ref::Impl(name.to_string(), None)])
        });
    }
    if tokens.len() < 3 || tokens.len().is_multiple_of(2) {
        return None;
    }
    let operands: Vec<&str> = tokens.iter().step_by(2).copied().collect();
    let operators: Vec<&str> = tokens.iter().skip(1).step_by(2).copied().collect();
    if !operands.iter().all(|t| operand(t)) {
        return None;
    }
    if operands.iter().all(|t| STD_TRAITS.contains(t)) && operators.iter().all(|&o| o == "+") {
        return Some(
            operands
                .iter()
                .map(|t| Ref::Impl(t.to_string(), context.last_type.clone()))
                .collect(),
        );
    }
    operators
        .iter()
        .map(|o| {
            BINARY_OPERATORS
                .iter()
                .find(|(op, _)| op == o)
                .map(|(_, name)| Ref::Impl(name.to_string(), None))
        })
        .collect()
}

/// Paths, methods, member paths, bare calls and return types of a spelling, in order.
fn scan_spelling(text: &str, context: &mut Context) -> Vec<Ref> {
    let b = text.as_bytes();
    let mut refs = Vec::new();
    let mut after_arrow = false;
    let mut i = 0;
    while i < b.len() {
        let prev = if i > 0 { b[i - 1] } else { b' ' };
        if text[i..].starts_with("->") {
            after_arrow = true;
            i += 2;
            continue;
        }
        if text[i..].starts_with("qb::") && !is_ident_byte(prev) && prev != b':' {
            let (segments, end) = read_path(text, i + 4);
            let next = text[end..].trim_start();
            if segments.is_empty() {
                i = end.max(i + 4);
                continue;
            }
            if next.starts_with('!') {
                refs.push(Ref::Macro(segments[segments.len() - 1].clone()));
            } else {
                let first_type = segments.iter().position(|s| starts_upper(s));
                let module_len = first_type.unwrap_or(segments.len() - 1);
                if context.module.is_none() {
                    context.module = Some(segments[..module_len].to_vec());
                }
                if let Some(t) = first_type {
                    context.last_type = Some(segments[t].clone());
                }
                refs.push(Ref::Path(segments));
            }
            i = end;
            continue;
        }
        if b[i] == b'.' && (is_ident_byte(prev) || matches!(prev, b')' | b']' | b'?' | b'>')) {
            let start = i + 1;
            let len = b[start..].iter().take_while(|&&c| is_ident_byte(c)).count();
            let name = &text[start..start + len];
            let after = skip_turbofish(&text[start + len..]);
            if len > 0 && !name.as_bytes()[0].is_ascii_digit() && after.starts_with('(') {
                refs.push(Ref::Method(name.to_string()));
            }
            i = start + len.max(1);
            continue;
        }
        if is_ident_byte(b[i]) && !is_ident_byte(prev) && prev != b'.' && prev != b':' {
            let (segments, end) = read_path(text, i);
            let next = text[end..].trim_start();
            if segments.len() >= 2 && starts_upper(&segments[segments.len() - 2]) {
                let n = segments.len();
                refs.push(Ref::Member(
                    segments[n - 2].clone(),
                    segments[n - 1].clone(),
                ));
            } else if let ([name], true, Some(module)) = (
                segments.as_slice(),
                i == 0 && next.starts_with('('),
                &context.module,
            ) {
                let mut path = module.clone();
                path.push(name.clone());
                refs.push(Ref::Path(path));
            } else if let ([name], true) = (segments.as_slice(), after_arrow) {
                let is_type = starts_upper(name) && name.len() > 1;
                if is_type && !STD_TYPES.contains(&name.as_str()) {
                    refs.push(Ref::Name(name.clone()));
                }
            }
            i = end.max(i + 1);
            continue;
        }
        i += 1;
    }
    refs
}

/// The identifiers `a::b::c` starting at `from` (stopping before a turbofish `::<`), and
/// where they end.
fn read_path(text: &str, from: usize) -> (Vec<String>, usize) {
    let b = text.as_bytes();
    let mut segments = Vec::new();
    let mut i = from;
    loop {
        let len = b[i..].iter().take_while(|&&c| is_ident_byte(c)).count();
        if len == 0 {
            break;
        }
        segments.push(text[i..i + len].to_string());
        i += len;
        let rest = &text[i..];
        if rest.starts_with("::") && rest[2..].bytes().next().is_some_and(is_ident_byte) {
            i += 2;
        } else {
            break;
        }
    }
    (segments, i)
}

/// `text` after a leading turbofish `::<..>`, if any.
fn skip_turbofish(text: &str) -> &str {
    match text.strip_prefix("::<") {
        Some(rest) => {
            let mut depth = 1;
            for (i, c) in rest.char_indices() {
                match c {
                    '<' => depth += 1,
                    '>' => {
                        depth -= 1;
                        if depth == 0 {
                            return &rest[i + 1..];
                        }
                    }
                    _ => {}
                }
            }
            ""
        }
        None => text,
    }
}

/// `text` with the contents of its string literals removed (`"ij,jk->ik"` → `""`).
fn blank_strings(text: &str) -> String {
    let mut out = String::new();
    let mut in_string = false;
    for c in text.chars() {
        if c == '"' {
            in_string = !in_string;
            out.push(c);
        } else if !in_string {
            out.push(c);
        }
    }
    out
}

fn starts_upper(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_uppercase())
}

/// The facade's index, and those of the workspace crates it re-exports items from.
#[derive(Debug)]
struct Code {
    main: Index,
    deps: Vec<Index>,
}

impl Code {
    fn load(root: &Path) -> Result<Code> {
        let main = Index::of_crate(&root.join("quabla").join("src"))?;
        let members = workspace_members(root)?;
        let mut deps = Vec::new();
        for name in main.external_crates() {
            if let Some((_, dir)) = members.iter().find(|(crate_name, _)| *crate_name == name) {
                deps.push(Index::of_crate(&dir.join("src"))?);
            }
        }
        Ok(Code { main, deps })
    }

    fn all(&self) -> impl Iterator<Item = &Index> {
        std::iter::once(&self.main).chain(&self.deps)
    }

    fn defines(&self, r: &Ref) -> bool {
        match r {
            Ref::Path(segments) => self.path_defined(segments),
            Ref::Member(owner, member) => self.all().any(|i| i.has_member(owner, member)),
            Ref::Method(name) => self.all().any(|i| i.has_fn(name)),
            Ref::Macro(name) => self.main.has_macro(name),
            Ref::Derive(name) => self.main.visible("", name),
            Ref::Impl(name, ty) => self.all().any(|i| i.implements(name, ty.as_deref())),
            Ref::Name(name) => self.all().any(|i| i.has_name(name)),
        }
    }

    /// `qb::m::name` is reachable; for `qb::m::Type::member`, `Type` is and has `member`.
    fn path_defined(&self, segments: &[String]) -> bool {
        let Some(last) = segments.len().checked_sub(1) else {
            return false;
        };
        match segments.iter().position(|s| starts_upper(s)) {
            Some(t) if t < last => {
                let owner = &segments[t];
                self.main.visible(&segments[..t].join("::"), owner)
                    && self.all().any(|i| i.has_member(owner, &segments[t + 1]))
            }
            _ => self
                .main
                .visible(&segments[..last].join("::"), &segments[last]),
        }
    }
}

/// The workspace's member crates: each one's name as a Rust identifier and its folder.
fn workspace_members(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let manifest = read(&root.join("Cargo.toml"))?;
    let Some(start) = manifest.find("members") else {
        return Ok(Vec::new());
    };
    let list = &manifest[start..];
    let list = &list[..list.find(']').unwrap_or(list.len())];
    let mut members = Vec::new();
    for folder in list.split('"').skip(1).step_by(2) {
        let dir = root.join(folder);
        let Ok(member) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let name = member.lines().find_map(|line| {
            let (key, value) = line.split_once('=')?;
            (key.trim() == "name").then(|| value.trim().trim_matches('"').replace('-', "_"))
        });
        if let Some(name) = name {
            members.push((name, dir));
        }
    }
    Ok(members)
}

/// The names a file imports by `use`: bound names, and every segment of glob paths (so that
/// `use quabla::linalg::*` lets bare `eigh(..)` count for `qb::linalg::eigh`).
#[derive(Debug, Default)]
struct Imports {
    names: BTreeSet<String>,
    glob_segments: BTreeSet<String>,
}

impl Imports {
    /// The `use` declarations of sanitized source; `module` (for a `#[cfg(test)]` module of
    /// the facade) resolves `super` and `self`.
    fn of(text: &str, module: Option<&str>) -> Imports {
        let mut imports = Imports::default();
        for at in word_positions(text, "use") {
            let rest = &text[at + 3..];
            let item = &rest[..rest.find(';').unwrap_or(rest.len())];
            for (path, name) in crate::items::use_tree(item) {
                match name {
                    Some(name) => {
                        imports.names.insert(name);
                    }
                    None => {
                        let mut segments: Vec<String> = module
                            .map(|m| m.split("::").map(str::to_string).collect())
                            .unwrap_or_default();
                        for segment in &path {
                            match segment.as_str() {
                                "super" => {
                                    segments.pop();
                                }
                                "self" => {}
                                _ => segments.push(segment.clone()),
                            }
                        }
                        imports.glob_segments.extend(segments);
                    }
                }
            }
        }
        imports
    }
}

/// Test code: the texts of its tests (or its one doc example), its whole sanitized text (for
/// derives and formatting) and its imports.
#[derive(Debug)]
struct TestFile {
    texts: Vec<String>,
    whole: String,
    imports: Imports,
}

impl TestFile {
    fn new(texts: Vec<String>, whole: String, module: Option<&str>) -> TestFile {
        let imports = Imports::of(&whole, module);
        TestFile {
            texts,
            whole,
            imports,
        }
    }

    /// Whether some test of this file uses `r`.
    fn uses(&self, r: &Ref) -> bool {
        match r {
            Ref::Derive(name) => derives(&self.whole, name),
            Ref::Impl(name, _) if is_format_trait(name) => self.texts.iter().any(|t| formats(t)),
            Ref::Impl(name, _) => self.texts.iter().any(|t| operator_used(t, name)),
            _ => self.texts.iter().any(|t| self.text_uses(t, r)),
        }
    }

    fn text_uses(&self, text: &str, r: &Ref) -> bool {
        let bare_call = |name: &str, module: Option<&String>| {
            let imported = self.imports.names.contains(name)
                || module.is_some_and(|m| self.imports.glob_segments.contains(m));
            imported && calls(text, name)
        };
        match r {
            Ref::Path(segments) => {
                let last = segments.len() - 1;
                let name = &segments[last];
                match segments.iter().position(|s| starts_upper(s)) {
                    Some(t) if t < last => writes_path(text, &segments[t], &segments[t + 1]),
                    _ if starts_upper(name) => has_word(text, name),
                    _ if last == 0 => {
                        after_path(text, name) || mentions(text, name) || bare_call(name, None)
                    }
                    _ => {
                        let module = &segments[last - 1];
                        writes_path(text, module, name) || bare_call(name, Some(module))
                    }
                }
            }
            Ref::Member(owner, member) => writes_path(text, owner, member),
            Ref::Method(name) => mentions(text, name),
            Ref::Macro(name) => word_positions(text, name)
                .any(|at| text[at + name.len()..].trim_start().starts_with('!')),
            Ref::Name(name) => has_word(text, name),
            Ref::Derive(_) | Ref::Impl(..) => false,
        }
    }
}

/// Whether `text` writes the path `a::b` (`qb::linalg::eigh`, `Tensor::from_vec`).
fn writes_path(text: &str, a: &str, b: &str) -> bool {
    word_positions(text, a).any(|at| {
        text[at + a.len()..]
            .trim_start()
            .strip_prefix("::")
            .is_some_and(|rest| {
                let rest = rest.trim_start();
                rest.starts_with(b) && !rest[b.len()..].bytes().next().is_some_and(is_ident_byte)
            })
    })
}

/// Whether `text` writes `name` as the last segment of a path (`qb::scan(|c, i, ops| ..)`;
/// unlike [`mentions`], a closure argument does not matter).
fn after_path(text: &str, name: &str) -> bool {
    word_positions(text, name).any(|at| text[..at].trim_end().ends_with("::"))
}

fn has_word(text: &str, word: &str) -> bool {
    word_positions(text, word).next().is_some()
}

/// Whether a `#[derive(..)]` of `text` lists `name`.
fn derives(text: &str, name: &str) -> bool {
    text.match_indices("derive(").any(|(at, _)| {
        let list = &text[at + 7..];
        has_word(&list[..list.find(')').unwrap_or(list.len())], name)
    })
}

/// Whether `text` formats a value (for `Display` and `Debug`).
fn formats(text: &str) -> bool {
    [
        "format!",
        "print!",
        "println!",
        "write!",
        "writeln!",
        ".to_string()",
    ]
    .iter()
    .any(|m| text.contains(m))
}

/// Whether `text` applies the operator of the trait `name` to a borrowed operand:
/// `a + &b`, `&a * 2.0`, `-&x`, `!&m`.
fn operator_used(text: &str, name: &str) -> bool {
    if let Some((op, _)) = UNARY_OPERATORS.iter().find(|(_, n)| *n == name) {
        let pattern = format!("{op}&");
        return text.match_indices(&pattern).any(|(at, _)| {
            let before = text[..at].trim_end();
            !before
                .bytes()
                .last()
                .is_some_and(|c| is_ident_byte(c) || c == b')')
        });
    }
    let Some((op, _)) = BINARY_OPERATORS.iter().find(|(_, n)| *n == name) else {
        return false;
    };
    let pattern = format!(" {op} ");
    text.match_indices(&pattern).any(|(at, _)| {
        let right = text[at + pattern.len()..].trim_start();
        let left = text[..at].trim_end();
        let left_operand = left.trim_end_matches(|c: char| c.is_ascii_alphanumeric() || c == '_');
        right.starts_with('&') || (left_operand.ends_with('&') && left_operand.len() < left.len())
    })
}

/// The test code of the facade: its integration tests, its `#[cfg(test)]` modules and its
/// doc examples (with the Markdown files its docs include).
fn corpus(root: &Path, index: &Index) -> Result<Vec<TestFile>> {
    let quabla = root.join("quabla");
    let mut files = Vec::new();
    for file in rust_files(&quabla.join("tests"), false)? {
        let text = sanitize(&read(&file)?);
        files.push(TestFile::new(test_texts(&text), text, None));
    }
    for module in &index.test_modules {
        files.push(TestFile::new(
            test_texts(&module.text),
            module.text.clone(),
            Some(&module.module),
        ));
    }
    let src = quabla.join("src");
    for file in rust_files(&src, true)? {
        let raw = read(&file)?;
        let mut blocks = code_blocks(&raw, true);
        for included in included_docs(&raw) {
            let path = file.parent().unwrap_or(&src).join(included);
            if let Ok(markdown) = std::fs::read_to_string(&path) {
                blocks.extend(code_blocks(&markdown, false));
            }
        }
        for block in blocks {
            let text = sanitize(&block);
            files.push(TestFile::new(vec![text.clone()], text, None));
        }
    }
    Ok(files)
}

/// The Markdown files that `#[doc = include_str!("..")]` attributes of `raw` include.
fn included_docs(raw: &str) -> Vec<&str> {
    raw.match_indices("include_str!(\"")
        .filter(|(at, _)| {
            let line_start = raw[..*at].rfind('\n').map_or(0, |n| n + 1);
            raw[line_start..*at].contains("doc")
        })
        .filter_map(|(at, m)| {
            let rest = &raw[at + m.len()..];
            let path = &rest[..rest.find('"')?];
            path.ends_with(".md").then_some(path)
        })
        .collect()
}

/// The Rust code blocks of doc comments (`///`, `//!`; with `in_comments`) or of Markdown:
/// fenced with no language or `rust` (`no_run` and `should_panic` allowed, not `ignore`,
/// `text` or `compile_fail`), hidden lines (`# use ..`) included.
fn code_blocks(raw: &str, in_comments: bool) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut block: Option<String> = None;
    let mut in_other = false;
    for line in raw.lines() {
        let content = if in_comments {
            let t = line.trim_start();
            match t.strip_prefix("///").or_else(|| t.strip_prefix("//!")) {
                Some(c) if !c.starts_with('/') => c.strip_prefix(' ').unwrap_or(c),
                _ => {
                    if let Some(done) = block.take() {
                        blocks.push(done);
                    }
                    in_other = false;
                    continue;
                }
            }
        } else {
            line
        };
        let trimmed = content.trim_start();
        if let Some(lang) = trimmed.strip_prefix("```") {
            if let Some(done) = block.take() {
                blocks.push(done);
            } else if in_other {
                in_other = false;
            } else if is_rust_block(lang) {
                block = Some(String::new());
            } else {
                in_other = true;
            }
            continue;
        }
        if let Some(code) = block.as_mut() {
            let visible = if trimmed == "#" {
                ""
            } else {
                trimmed.strip_prefix("# ").unwrap_or(content)
            };
            code.push_str(visible);
            code.push('\n');
        }
    }
    blocks.extend(block);
    blocks
}

fn is_rust_block(lang: &str) -> bool {
    lang.split(',').map(str::trim).all(|tag| {
        tag.is_empty()
            || matches!(tag, "rust" | "no_run" | "should_panic")
            || tag.starts_with("edition")
    })
}

/// The Python package's sources (`quabla-python/`), when it exists.
#[derive(Debug)]
struct PythonPackage {
    present: bool,
    python: Vec<(PathBuf, String)>,
    rust: Vec<String>,
}

impl PythonPackage {
    fn load(dir: &Path) -> Result<PythonPackage> {
        let mut package = PythonPackage {
            present: dir.is_dir(),
            python: Vec::new(),
            rust: Vec::new(),
        };
        if package.present {
            package.collect(dir)?;
        }
        Ok(package)
    }

    fn collect(&mut self, dir: &Path) -> Result<()> {
        let entries =
            std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths {
            let name = path
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned());
            if path.is_dir() {
                if !name.starts_with('.') && !matches!(name.as_str(), "target" | "__pycache__") {
                    self.collect(&path)?;
                }
            } else if name.ends_with(".py") {
                let text = read(&path)?;
                self.python.push((path, text));
            } else if name.ends_with(".rs") {
                self.rust.push(read(&path)?);
            }
        }
        Ok(())
    }

    /// Whether the package mentions the Python name `name`: quoted (`"name"`: a binding's
    /// `#[pyo3(name = "name")]`, `m.add("name", ..)`, a list such as the names kept out of
    /// `__all__`), defined in Python (`def name`, `class name`), as a Rust function of the
    /// binding (`fn name(`, `fn name<`), or as a module `name.py`.
    fn mentions(&self, name: &str) -> bool {
        let quoted = format!("\"{name}\"");
        let module = format!("{name}.py");
        let python = self.python.iter().any(|(path, text)| {
            text.contains(&quoted)
                || ["def", "class"].iter().any(|k| {
                    text.contains(&format!("{k} {name}(")) || text.contains(&format!("{k} {name}:"))
                })
                || path
                    .file_name()
                    .is_some_and(|f| f.to_string_lossy() == module)
        });
        let rust = self.rust.iter().any(|text| {
            text.contains(&quoted)
                || text.contains(&format!("fn {name}("))
                || text.contains(&format!("fn {name}<"))
        });
        python || rust
    }
}

/// Why a row is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reason {
    Device,
    Distributed,
    NotDefined,
}

/// The report's verdict on a row.
#[derive(Debug, PartialEq)]
enum Status {
    /// The first item is defined; `undefined` lists the row's other items that are not;
    /// `untested` the heads no test uses.
    Implemented {
        undefined: Vec<String>,
        untested: Vec<String>,
    },
    /// A Python-side row; `python` is `None` without a `quabla-python/` folder.
    BindingOnly {
        python: Option<bool>,
    },
    Missing {
        reason: Reason,
        detail: String,
    },
}

fn classify(row: &SpecRow, code: &Code, tests: &[TestFile], python: &PythonPackage) -> Status {
    if row.rust.to_ascii_lowercase().contains("binding only") {
        let names: Vec<String> = backticked(&row.python)
            .map(python_head)
            .map(|h| h.rsplit('.').next().unwrap_or("").to_string())
            .collect();
        return Status::BindingOnly {
            python: python
                .present
                .then(|| names.iter().all(|n| python.mentions(n))),
        };
    }
    let refs = row_refs(&row.python, &row.rust);
    let Some(first) = refs.refs.first() else {
        return Status::Missing {
            reason: Reason::NotDefined,
            detail: "no Rust item recognised in the Rust column".to_string(),
        };
    };
    if !code.defines(first) {
        let undefined: Vec<String> = refs
            .refs
            .iter()
            .filter(|r| !code.defines(r))
            .map(Ref::to_string)
            .collect();
        let reason = if row.section == DISTRIBUTED_SECTION {
            Reason::Distributed
        } else if device_only(&row.contract) {
            Reason::Device
        } else {
            Reason::NotDefined
        };
        return Status::Missing {
            reason,
            detail: undefined.join(", "),
        };
    }
    let undefined = refs
        .refs
        .iter()
        .filter(|r| !code.defines(r))
        .map(Ref::to_string)
        .collect();
    let untested = refs
        .heads
        .iter()
        .filter(|h| !tests.iter().any(|t| t.uses(h)))
        .map(Ref::to_string)
        .collect();
    Status::Implemented {
        undefined,
        untested,
    }
}

/// Whether a contract is about CUDA or MLX alone: it names one of them and never the CPU.
fn device_only(contract: &str) -> bool {
    let names = |words: &[&str]| words.iter().any(|w| has_word(contract, w));
    names(&["CUDA", "MLX", "cuda", "mlx"]) && !names(&["CPU", "cpu"])
}

/// The report line of a row.
fn line(row: &SpecRow, status: &Status) -> String {
    let mut labels: Vec<String> = Vec::new();
    for head in backticked(&row.python).map(python_head) {
        if !labels.contains(&head) {
            labels.push(head);
        }
    }
    let prefix = format!("§{} {}", row.place, labels.join(", "));
    match status {
        Status::Implemented {
            undefined,
            untested,
        } => {
            let mut line = format!(
                "{prefix}  implemented={} tested={}",
                if undefined.is_empty() {
                    "yes"
                } else {
                    "partial"
                },
                if untested.is_empty() { "yes" } else { "no" }
            );
            if !undefined.is_empty() {
                line.push_str(&format!(" (undefined: {})", undefined.join(", ")));
            }
            if !untested.is_empty() {
                line.push_str(&format!(" (untested: {})", untested.join(", ")));
            }
            line
        }
        Status::BindingOnly { python } => match python {
            Some(yes) => format!("{prefix}  binding-only python={}", yes_no(*yes)),
            None => format!("{prefix}  binding-only python=no (no quabla-python/)"),
        },
        Status::Missing { reason, detail } => {
            let reason = match reason {
                Reason::Device => "device",
                Reason::Distributed => "distributed",
                Reason::NotDefined => "not defined",
            };
            format!("{prefix}  missing ({reason}: {detail})")
        }
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// Counts of a section or of the whole report.
#[derive(Debug, Default)]
struct Tally {
    rows: usize,
    implemented: usize,
    partial: usize,
    tested: usize,
    binding_only: usize,
    missing: usize,
    device: usize,
    distributed: usize,
}

impl Tally {
    fn add(&mut self, status: &Status) {
        self.rows += 1;
        match status {
            Status::Implemented {
                undefined,
                untested,
            } => {
                self.implemented += 1;
                self.partial += usize::from(!undefined.is_empty());
                self.tested += usize::from(untested.is_empty());
            }
            Status::BindingOnly { .. } => self.binding_only += 1,
            Status::Missing { reason, .. } => {
                self.missing += 1;
                self.device += usize::from(*reason == Reason::Device);
                self.distributed += usize::from(*reason == Reason::Distributed);
            }
        }
    }

    fn merge(&mut self, other: &Tally) {
        self.rows += other.rows;
        self.implemented += other.implemented;
        self.partial += other.partial;
        self.tested += other.tested;
        self.binding_only += other.binding_only;
        self.missing += other.missing;
        self.device += other.device;
        self.distributed += other.distributed;
    }

    fn counts(&self) -> String {
        format!(
            "rows={} implemented={} tested={} missing={} binding-only={} partial={}",
            self.rows, self.implemented, self.tested, self.missing, self.binding_only, self.partial
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of api.md as they are written there, under their real headings.
    const SPEC: &str = r#"# Public API

## 0. Conventions

| `not` | `a row` | Section 0 is not reported. | P0 |

## 1. Types, dtypes and constructors (`qb`)

| Python | Rust (suggested) | Contract | Tier |
| --- | --- | --- | --- |
| `dtype` | `qb::DType` (enum `F32`, `F64`, `Bool`) | Class of the three dtype objects. | P0 |

## 2. Tensor members

### 2.1 Properties and conversion

| Python | Rust (suggested) | Contract | Tier |
| --- | --- | --- | --- |
| `x.shape` | `x.shape() -> &[usize]` | Extents as a Python `list` of ints. | P0 |
| `x.numpy()` (concrete) | binding only | NumPy array with the same dtype. | P2 |
| `hash(x)`, `x == y`, `x != y` | no `PartialEq`; `qb::Tensor::same(&a, &b)` | Identity semantics. | P0 |

### 2.2 Operators

| Python | Rust (suggested) | Contract | Tier |
| --- | --- | --- | --- |
| `~x`, `x & y`, `x \| y` | `!&x`, `&x & &y`, `&x \| &y` | Logical not/and/or. | P0 |

## 3. Elementwise unary functions (`qb`)

| `tan(x)`, `sinh(x)`, `cosh(x)` | `x.tan()?` etc. | Native (one IR op family). | P1 |

## 13. Pytrees (`qb.tree`)

| `map(f, tree, *rest)` | `qb::tree::map(&tree, \|l\| ..)?`, `map_n(&[&t1, &t2], f)` | Applies `f` leafwise. | P0 |
| `register_dataclass(cls=None)` | `#[derive(qb::Tree)]` with `#[tree(static)]` on meta fields | Registers a dataclass. | P1 |

## 20. Data parallelism (`qb.distributed`)

| `value_and_grad(fun, devices=["cuda:0"])` | `qb::distributed::value_and_grad(f).reduction(Reduction::Mean)` | Single-node CUDA data parallelism. | P2 |

## 22. Names kept out of `from quabla import *`

`sum`, `max` and the submodule `random` are module attributes but are left out of `__all__`.

## 23. Out of scope for this product

| `eig` | `qb::linalg::eig` | Not reported. | P2 |
"#;

    fn refs_of(python: &str, rust: &str) -> Vec<String> {
        row_refs(python, rust)
            .refs
            .iter()
            .map(Ref::to_string)
            .collect()
    }

    fn heads_of(python: &str, rust: &str) -> Vec<String> {
        row_refs(python, rust)
            .heads
            .iter()
            .map(Ref::to_string)
            .collect()
    }

    #[test]
    fn rows_of_sections_1_to_22_with_their_places() {
        let (sections, rows) = parse_spec(SPEC);
        let numbers: Vec<u32> = sections.iter().map(|s| s.number).collect();
        assert_eq!(numbers, [1, 2, 3, 13, 20, 22]);
        assert_eq!(sections[0].title, "Types, dtypes and constructors (`qb`)");
        let places: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| (r.place.as_str(), r.python.as_str()))
            .collect();
        assert_eq!(
            places,
            [
                ("1", "`dtype`"),
                ("2.1", "`x.shape`"),
                ("2.1", "`x.numpy()` (concrete)"),
                ("2.1", "`hash(x)`, `x == y`, `x != y`"),
                ("2.2", "`~x`, `x & y`, `x | y`"),
                ("3", "`tan(x)`, `sinh(x)`, `cosh(x)`"),
                ("13", "`map(f, tree, *rest)`"),
                ("13", "`register_dataclass(cls=None)`"),
                ("20", "`value_and_grad(fun, devices=[\"cuda:0\"])`"),
                ("22", "`sum`"),
                ("22", "`max`"),
                ("22", "`random`"),
            ]
        );
        assert_eq!(rows[4].rust, "`!&x`, `&x & &y`, `&x | &y`");
        assert_eq!(
            rows[6].rust,
            "`qb::tree::map(&tree, |l| ..)?`, `map_n(&[&t1, &t2], f)`"
        );
        assert_eq!(rows[9].rust, "binding only");
        assert_eq!(
            split_cells("| a | b \\| c |"),
            ["a", "b | c"].map(|c| format!(" {c} "))
        );
    }

    #[test]
    fn amendment_rows_join_the_sections_of_the_spec() {
        let (sections, _) = parse_spec(SPEC);
        let dir = std::env::temp_dir().join(format!("coverage-api-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("api-amendments.md");
        std::fs::write(
            &file,
            "# API amendments\n\n## 13. Pytrees (`qb.tree`)\n\n| Python | Rust (suggested) | Contract | Tier |\n| --- | --- | --- | --- |\n| `leaves(tree)` | `qb::tree::leaves(&tree)` | The leaves. | P1 |\n",
        )
        .unwrap();
        let rows = amendment_rows(&file, &sections).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (
                rows[0].section,
                rows[0].place.as_str(),
                rows[0].python.as_str()
            ),
            (13, "13 amended", "`leaves(tree)`")
        );
        std::fs::write(&file, "## 21. Errors\n\n| `a` | `qb::a` | A. | P1 |\n").unwrap();
        let err = amendment_rows(&file, &sections).unwrap_err();
        assert!(
            err.contains("section 21 is not a section of api.md"),
            "{err}"
        );
        assert!(amendment_rows(&dir.join("absent.md"), &sections)
            .unwrap()
            .is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn items_named_by_rust_columns() {
        assert_eq!(
            refs_of("`x.shape`", "`x.shape() -> &[usize]`"),
            [".shape()"]
        );
        assert_eq!(
            refs_of("`eigh(a)`", "`qb::linalg::eigh(&a)? -> EighResult`"),
            ["qb::linalg::eigh", "EighResult"]
        );
        let adam = "`qb::optim::Adam::new(1e-3).b1(0.9).b2(0.999).eps(1e-8).clip_norm(1.0)`";
        assert_eq!(
            refs_of("`Adam(learning_rate=1e-3)`", adam),
            [
                "qb::optim::Adam::new",
                ".b1()",
                ".b2()",
                ".eps()",
                ".clip_norm()"
            ]
        );
        assert_eq!(
            heads_of("`Adam(learning_rate=1e-3)`", adam),
            ["qb::optim::Adam::new"]
        );
        assert_eq!(
            refs_of(
                "`map(f, tree, *rest)`",
                "`qb::tree::map(&tree, |l| ..)?`, `map_n(&[&t1, &t2], f)`"
            ),
            ["qb::tree::map", "qb::tree::map_n"]
        );
        assert_eq!(
            refs_of("`dtype`", "`qb::DType` (enum `F32`, `F64`, `Bool`)"),
            ["qb::DType", "F32", "F64", "Bool"]
        );
        assert_eq!(
            refs_of("`hash(x)`", "no `PartialEq`; `qb::Tensor::same(&a, &b)`"),
            ["qb::Tensor::same"]
        );
        assert_eq!(
            refs_of("`repr(x)`, `str(x)`", "`impl Display`/`Debug`"),
            ["impl Display", "impl Debug"]
        );
        assert_eq!(
            refs_of(
                "`register_dataclass(cls=None)`",
                "`#[derive(qb::Tree)]` with `#[tree(static)]` on meta fields"
            ),
            ["#[derive(Tree)]"]
        );
        assert_eq!(
            refs_of(
                "`TracerError(QuablaError, TypeError)`",
                "`qb::Error::Tracer { .. }`"
            ),
            ["qb::Error::Tracer"]
        );
        assert_eq!(
            refs_of("`x[index]`", "`x.index(qb::s![1, .., -1])?`"),
            [".index()", "qb::s!"]
        );
        assert_eq!(
            refs_of(
                "`x.to_flat_list()`",
                "`x.to_vec::<f64>()?`, `x.to_vec_bool()?`"
            ),
            [".to_vec()", ".to_vec_bool()"]
        );
        assert_eq!(
            refs_of(
                "`einsum(equation)`",
                "`qb::einsum(\"ij,jk->ik\", &[&a, &b])?`"
            ),
            ["qb::einsum"]
        );
        assert_eq!(
            refs_of(
                "`solve_triangular(a, b)`",
                "`qb::linalg::solve_triangular(&a, &b).lower(true).trans(Trans::T).eval()?`"
            ),
            [
                "qb::linalg::solve_triangular",
                ".lower()",
                ".trans()",
                "Trans::T",
                ".eval()"
            ]
        );
        let key = "`qb::random::Key` (`Copy + Eq + Hash`)";
        assert_eq!(
            refs_of("`Key`", key),
            ["qb::random::Key", "impl Copy", "impl Eq", "impl Hash"]
        );
        assert_eq!(heads_of("`Key`", key), ["qb::random::Key"]);
        assert_eq!(
            row_refs("`Key`", key).refs[1],
            Ref::Impl("Copy".into(), Some("Key".into()))
        );
        assert_eq!(
            refs_of(
                "`opt.update(params, grads, state)`",
                "`opt.update(&params, &grads, &state)? -> (P, State)`"
            ),
            [".update()", "State"]
        );
        assert_eq!(
            refs_of(
                "`lstsq(a, b)`",
                "`qb::linalg::lstsq(&a, &b).return_residuals(true).eval()?`"
            ),
            ["qb::linalg::lstsq", ".eval_with_residuals()", ".eval()"],
            "through ALIASES"
        );
    }

    #[test]
    fn operators_are_trait_implementations() {
        assert_eq!(
            refs_of("`x + y`", "`&x + &y`, `&x - 2.0`, `2.0 * &x`, `&x / &y`"),
            ["impl Add", "impl Sub", "impl Mul", "impl Div"]
        );
        assert_eq!(
            refs_of("`~x`", "`!&x`, `&x & &y`, `&x | &y`"),
            ["impl Not", "impl BitAnd", "impl BitOr"]
        );
        assert_eq!(refs_of("`-x`", "`-&x`"), ["impl Neg"]);
    }

    #[test]
    fn python_names_fill_in_what_the_rust_column_leaves_out() {
        assert_eq!(
            heads_of("`tan(x)`, `sinh(x)`, `cosh(x)`", "`x.tan()?` etc."),
            [".tan()", ".sinh()", ".cosh()"]
        );
        assert_eq!(
            heads_of(
                "`greater(lhs, rhs)`, `greater_equal`, `less`",
                "`qb::greater(&a, &b)?`, `a.equal(&b)?`"
            ),
            ["qb::greater", ".equal()", "qb::greater_equal", "qb::less"]
        );
        assert_eq!(
            heads_of("`x.maximum(y)`, `x.minimum(y)`", "same"),
            [".maximum()", ".minimum()"]
        );
        assert_eq!(
            heads_of(
                "`SlogdetResult`, `EighResult`",
                "Rust structs with the same field names"
            ),
            ["SlogdetResult", "EighResult"]
        );
        // Different names on the two sides: nothing is added.
        assert_eq!(heads_of("`float(x)`, `int(x)`", "`x.item()?`"), [".item()"]);
    }

    const CODE: &str = r#"
pub mod tree {
    pub fn map() {}
    pub trait Tree {}
}
pub mod linalg { pub fn solve() {} }
pub use quabla_macros::Tree;
pub struct Tensor;
impl Tensor {
    pub fn shape(&self) {}
    pub fn same(&self) {}
    pub fn tan(&self) {}
    pub fn size(&self) {}
}
impl std::ops::Not for Tensor { fn not(self) {} }
"#;

    const TESTS: &str = r#"
use quabla as qb;
use quabla::linalg::*;
#[derive(Debug, qb::Tree)]
struct Params { w: Tensor }
#[test]
fn t() {
    let y = qb::tree::map(&t, |l| l.tan()).unwrap();
    assert!(qb::Tensor::same(&y, &y));
    let m = !&mask;
    let z = solve(&a, &b);
    let s = x.shape();
}
"#;

    fn row(section: u32, python: &str, rust: &str, contract: &str) -> SpecRow {
        SpecRow {
            section,
            place: section.to_string(),
            python: python.to_string(),
            rust: rust.to_string(),
            contract: contract.to_string(),
        }
    }

    #[test]
    fn rows_are_classified_against_code_and_tests() {
        let code = Code {
            main: Index::of_text(CODE),
            deps: Vec::new(),
        };
        let tests = [TestFile::new(
            test_texts(&sanitize(TESTS)),
            sanitize(TESTS),
            None,
        )];
        let python = PythonPackage {
            present: true,
            python: vec![(
                PathBuf::from("quabla/__init__.py"),
                "_NOT_IN_ALL = {\"sum\"}\n".to_string(),
            )],
            rust: vec!["fn numpy<'py>(slf: &Bound<'py, Self>) {}".to_string()],
        };
        let report = |r: SpecRow| line(&r, &classify(&r, &code, &tests, &python));
        let cases = [
            (
                row(2, "`x.shape`", "`x.shape() -> &[usize]`", ""),
                "§2 x.shape  implemented=yes tested=yes",
            ),
            (
                row(2, "`x.size`", "`x.size()`", ""),
                "§2 x.size  implemented=yes tested=no (untested: .size())",
            ),
            (
                row(
                    2,
                    "`hash(x)`",
                    "no `PartialEq`; `qb::Tensor::same(&a, &b)`",
                    "",
                ),
                "§2 hash  implemented=yes tested=yes",
            ),
            (
                row(2, "`~x`, `x & y`", "`!&x`, `&x & &y`", ""),
                "§2 ~x, x & y  implemented=partial tested=no (undefined: impl BitAnd) \
                 (untested: impl BitAnd)",
            ),
            (
                row(3, "`tan(x)`, `sinh(x)`", "`x.tan()?` etc.", ""),
                "§3 tan, sinh  implemented=partial tested=no (undefined: .sinh()) \
                 (untested: .sinh())",
            ),
            (
                row(13, "`map(f, tree)`", "`qb::tree::map(&tree, |l| ..)?`", ""),
                "§13 map  implemented=yes tested=yes",
            ),
            (
                row(13, "`register(cls)`", "`impl qb::tree::Tree for T`", ""),
                // The derive is outside the test function: a type is used inside one.
                "§13 register  implemented=yes tested=no (untested: qb::tree::Tree)",
            ),
            (
                row(13, "`register_dataclass()`", "`#[derive(qb::Tree)]`", ""),
                "§13 register_dataclass  implemented=yes tested=yes",
            ),
            (
                row(17, "`solve(a, b)`", "`qb::linalg::solve(&a, &b)?`", ""),
                "§17 solve  implemented=yes tested=yes",
            ),
            (
                row(17, "`eig(a)`", "`qb::linalg::eig(&a)?`", "On the CPU."),
                "§17 eig  missing (not defined: qb::linalg::eig)",
            ),
            (
                row(
                    19,
                    "`x.to_device()`",
                    "`x.to_device(\"cuda\")?`",
                    "CUDA and MLX only.",
                ),
                "§19 x.to_device  missing (device: .to_device())",
            ),
            (
                row(
                    20,
                    "`value_and_grad(fun)`",
                    "`qb::distributed::value_and_grad(f).shard_argnums(&[1])`",
                    "Single-node CUDA data parallelism.",
                ),
                "§20 value_and_grad  missing (distributed: qb::distributed::value_and_grad, \
                 .shard_argnums())",
            ),
            (
                row(2, "`x.numpy()` (concrete)", "binding only", ""),
                "§2 x.numpy  binding-only python=yes",
            ),
            (
                row(22, "`sum`", "binding only", ""),
                "§22 sum  binding-only python=yes",
            ),
            (
                row(22, "`abs`", "binding only", ""),
                "§22 abs  binding-only python=no",
            ),
        ];
        for (spec_row, expected) in cases {
            assert_eq!(report(spec_row), expected);
        }
        let absent = PythonPackage {
            present: false,
            python: Vec::new(),
            rust: Vec::new(),
        };
        let r = row(22, "`sum`", "binding only", "");
        assert_eq!(
            line(&r, &classify(&r, &code, &tests, &absent)),
            "§22 sum  binding-only python=no (no quabla-python/)"
        );
    }

    #[test]
    fn uses_in_test_code() {
        let text = sanitize(
            "use quabla::tree::{flatten, leaves as all_leaves};\n\
             #[test] fn t() { let (l, d) = flatten(&t); let v = qb::linalg::eigh(&a); \
             let c = (&a * 2.0)?; let s = a.sum_axes([0]); let i = x.index(qb::s![0])?; \
             let n = v.iter().all(|x| x > 0); let q = format!(\"{y}\"); }",
        );
        let file = TestFile::new(test_texts(&text), text, None);
        let uses = |r: Ref| file.uses(&r);
        let path = |p: &str| Ref::Path(p.split("::").map(str::to_string).collect());
        assert!(uses(path("tree::flatten")), "imported, called bare");
        assert!(!uses(path("tree::leaves")), "imported under another name");
        assert!(uses(path("linalg::eigh")));
        assert!(!uses(path("linalg::solve")));
        assert!(uses(Ref::Impl("Mul".into(), None)));
        assert!(!uses(Ref::Impl("Add".into(), None)));
        assert!(uses(Ref::Method("sum_axes".into())));
        assert!(
            !uses(Ref::Method("all".into())),
            "an iterator's, with a closure"
        );
        assert!(uses(Ref::Macro("s".into())));
        assert!(uses(Ref::Impl("Display".into(), None)));

        let module = sanitize("use super::*;\n#[test] fn t() { let x = eigh(&a); }");
        let file = TestFile::new(test_texts(&module), module, Some("linalg::dense::tests"));
        assert!(file.uses(&path("linalg::eigh")), "through `use super::*`");
        assert!(!file.uses(&path("random::eigh")));
    }

    #[test]
    fn doc_examples_are_the_rust_code_blocks() {
        let src = "//! Intro.\n//!\n//! ```\n//! # use quabla as qb;\n//! let x = qb::zeros([2])?;\n\
                   //! ```\n//!\n//! ```text\n//! qb::ones(\n//! ```\n/// ```no_run\n/// qb::eye(2);\n\
                   /// ```\nfn f() {}\n#[doc = include_str!(\"../../README.md\")]\n";
        assert_eq!(
            code_blocks(src, true),
            [
                "use quabla as qb;\nlet x = qb::zeros([2])?;\n",
                "qb::eye(2);\n"
            ]
        );
        assert_eq!(included_docs(src), ["../../README.md"]);
        let markdown = "# Title\n\n```rust\nqb::grad(f);\n```\n\n```sh\ncargo test\n```\n";
        assert_eq!(code_blocks(markdown, false), ["qb::grad(f);\n"]);
    }

    #[test]
    fn device_only_contracts() {
        assert!(device_only("Single-node CUDA data parallelism."));
        assert!(device_only("Runs on `\"mlx\"` only."));
        assert!(!device_only("`\"cuda\"`, `\"mlx\"` in P2; CPU in P1."));
        assert!(!device_only("Dense Jacobian."));
    }
}
