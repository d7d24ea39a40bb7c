//! `cargo xtask test-backends`: the conformance suite on every backend this host has.
//!
//! This module owns the backend check: it builds every plugin library this host can build
//! ([`PLUGINS`]), gathers them in one folder (`<target>/quabla-plugins`), and runs the
//! conformance runner (`quabla-conformance`, in `backends/conformance`) on the linked
//! backends and on every plugin of that folder. The runner prints the test × backend matrix
//! (pass / FAIL / unsupported / skipped, with reasons) and exits non-zero on any failure,
//! which fails this command.

use std::path::{Path, PathBuf};

use crate::{cargo, run_inherited, workspace_root, Result};

/// Plugin crates and the library each one produces (the backend name in
/// `quabla_<name>_plugin`), for this host. Device plugins join this list when they exist as
/// plugin crates; their availability is decided at run time by the plugin itself.
const PLUGINS: &[(&str, &str)] = &[("quabla-cpu-plugin", "cpu")];

/// Entry point of `cargo xtask test-backends`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    if let Some(arg) = args.first() {
        return Err(format!(
            "`cargo xtask test-backends` takes no arguments (got `{arg}`); see `cargo xtask help`"
        ));
    }
    let mut build = cargo(["build"]);
    for (package, _) in PLUGINS {
        build.args(["-p", package]);
    }
    println!("== xtask: building the plugins ==");
    run_inherited(&mut build)?;

    let target = target_dir()?;
    let profile_dir = target.join("debug");
    let folder = target.join("quabla-plugins");
    std::fs::create_dir_all(&folder)
        .map_err(|e| format!("cannot create {}: {e}", folder.display()))?;
    for (_, name) in PLUGINS {
        let file = plugin_file_name(name);
        place(&profile_dir.join(&file), &folder.join(&file))?;
    }

    println!(
        "== xtask: conformance matrix (plugins from {}) ==",
        folder.display()
    );
    let mut runner = cargo([
        "run",
        "--quiet",
        "-p",
        "quabla-conformance",
        "--bin",
        "quabla-conformance",
        "--",
        "--plugin-dir",
    ]);
    runner.arg(&folder);
    run_inherited(&mut runner).map_err(|e| format!("the conformance matrix has failures: {e}"))
}

/// `libquabla_<name>_plugin.so` and its equivalents (the rule of `quabla_backend::registry`).
fn plugin_file_name(name: &str) -> String {
    use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
    format!("{DLL_PREFIX}quabla_{name}_plugin{DLL_SUFFIX}")
}

/// Puts a fresh hard link (or, across file systems, a copy) of `from` at `to`.
fn place(from: &Path, to: &Path) -> Result<()> {
    if !from.is_file() {
        return Err(format!("{} was not built", from.display()));
    }
    let _ = std::fs::remove_file(to);
    std::fs::hard_link(from, to)
        .or_else(|_| std::fs::copy(from, to).map(|_| ()))
        .map_err(|e| format!("cannot place {} at {}: {e}", from.display(), to.display()))
}

/// The cargo target folder: `CARGO_TARGET_DIR` when set, otherwise what `cargo metadata`
/// reports (which also covers a `build.target-dir` setting).
fn target_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        return Ok(workspace_root().join(dir));
    }
    let output = cargo(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .map_err(|e| format!("could not run `cargo metadata`: {e}"))?;
    if !output.status.success() {
        return Err(format!("`cargo metadata` failed ({})", output.status));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    json_string_field(&text, "target_directory")
        .map(PathBuf::from)
        .ok_or_else(|| "`cargo metadata` did not report a target_directory".to_string())
}

/// The value of the first string field `key` in JSON text (enough for `cargo metadata`).
fn json_string_field(text: &str, key: &str) -> Option<String> {
    let start = text.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let mut value = String::new();
    let mut chars = text[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(value),
            '\\' => match chars.next()? {
                'n' => value.push('\n'),
                't' => value.push('\t'),
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    value.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                other => value.push(other),
            },
            c => value.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_string_field_of_cargo_metadata() {
        let text = r#"{"packages":[],"target_directory":"C:\\work\\tar\"get","version":1}"#;
        assert_eq!(
            json_string_field(text, "target_directory").as_deref(),
            Some("C:\\work\\tar\"get")
        );
        assert_eq!(json_string_field(text, "missing"), None);
    }
}
