//! Reading the specification and Rust sources as text, shared by the coverage reports
//! ([`crate::coverage`], [`crate::coverage_api`]).
//!
//! This module owns where the spec's `api.md` is found, listing and reading source files,
//! blanking comments and literals out of Rust source ([`sanitize`]) so that braces and names
//! are only those of the code, the word-level matching built on that (a name as a whole
//! identifier, a call, a mention as a path or method), and the texts of `#[test]` functions
//! with the helpers they call. Everything is textual: no Rust is parsed beyond balancing
//! braces.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::{workspace_root, Result};

/// Where api.md is: `$QUABLA_SPEC_DIR`, else `shared/spec` beside, then inside, the workspace.
pub(crate) fn spec_file() -> Result<PathBuf> {
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

pub(crate) fn read(file: &Path) -> Result<String> {
    std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))
}

/// The `.rs` files of `dir`, sorted; with `recursive`, those of its subfolders too.
pub(crate) fn rust_files(dir: &Path, recursive: bool) -> Result<Vec<PathBuf>> {
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

/// The texts between backticks of a table cell.
pub(crate) fn backticked(cell: &str) -> impl Iterator<Item = &str> {
    cell.split('`').skip(1).step_by(2)
}

/// Rust source with comments and the contents of string and character literals replaced by
/// spaces (newlines kept), so that braces and names are only those of the code.
pub(crate) fn sanitize(src: &str) -> String {
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

pub(crate) fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Byte positions where `word` occurs as a whole identifier.
pub(crate) fn word_positions<'a>(text: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    let b = text.as_bytes();
    text.match_indices(word).map(|(i, _)| i).filter(move |&i| {
        let end = i + word.len();
        (i == 0 || !is_ident_byte(b[i - 1])) && (end == b.len() || !is_ident_byte(b[end]))
    })
}

/// The identifier starting at `text`'s first non-blank character, if any.
pub(crate) fn leading_ident(text: &str) -> Option<&str> {
    let text = text.trim_start();
    let len = text.bytes().take_while(|&c| is_ident_byte(c)).count();
    (len > 0).then(|| &text[..len])
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
/// functions that it calls, transitively, so that table-driven tests (a `table()` helper
/// listing the functions, a `check()` helper taking the derivatives) count. Helpers that
/// never name `Tensor` or `qb::` (float comparisons such as `close(a: f64, ..)`) are left
/// out: their `.abs()` and `.max(..)` are not the array functions.
pub(crate) fn test_texts(text: &str) -> Vec<String> {
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
            text
        })
        .collect()
}

/// Whether `text` calls the function `name` (`name(`, `qb::name(`, not a method `.name(`).
pub(crate) fn calls(text: &str, name: &str) -> bool {
    word_positions(text, name).any(|at| {
        let after = text[at + name.len()..].trim_start();
        let before = text[..at].trim_end();
        after.starts_with('(') && !before.ends_with('.')
    })
}

/// Whether `text` mentions the operation `name` as a call or a path: `qb::name`,
/// `Tensor::name`, `.name(`. A method taking a closure (`.all(|x| ..)`) is an iterator's.
pub(crate) fn mentions(text: &str, name: &str) -> bool {
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
pub(crate) fn is_closure(args: &str) -> bool {
    let args = args.trim_start();
    args.starts_with('|')
        || args
            .strip_prefix("move")
            .is_some_and(|rest| rest.trim_start().starts_with('|'))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
