//! `cargo xtask test-backends [--plugin-dir DIR]...`: the conformance suite on every backend
//! this host has.
//!
//! This module owns the backend check: it builds every plugin library of the workspace
//! ([`PLUGINS`]: the CPU plugin, the example `toy` plugin and the CUDA plugin, which lists
//! itself as unavailable on a host without a driver), gathers them in one folder
//! (`<target>/quabla-plugins`), and runs the conformance runner (`quabla-conformance`, in
//! `backends/conformance`) on the linked backends, on every plugin of that folder, of each
//! `--plugin-dir` folder and of the folders of `QUABLA_PLUGIN_PATH` (which the runner reads),
//! so a plugin built outside the workspace is checked the way ours are. The runner prints the
//! test × backend matrix (pass / FAIL / unsupported / partial k/n / skipped, with reasons) and
//! exits non-zero on any failure, which fails this command.

use std::path::{Path, PathBuf};

use crate::{cargo, run_inherited, workspace_root, Result};

/// Plugin crates and the library each one produces (the backend name in
/// `quabla_<name>_plugin`), for this host. Device plugins join this list when they exist as
/// plugin crates; their availability is decided at run time by the plugin itself.
const PLUGINS: &[(&str, &str)] = &[
    ("quabla-cpu-plugin", "cpu"),
    ("quabla-example-plugin", "toy"),
    ("quabla-cuda-plugin", "cuda"),
];

/// The folders of `--plugin-dir DIR` arguments, in order.
fn plugin_dirs(args: &[String]) -> Result<Vec<PathBuf>> {
    let mut dirs = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--plugin-dir" => match args.next() {
                Some(dir) => dirs.push(PathBuf::from(dir)),
                None => return Err("`--plugin-dir` needs a folder".to_string()),
            },
            other => {
                return Err(format!(
                    "`cargo xtask test-backends` takes only `--plugin-dir DIR` (got `{other}`); \
                     see `cargo xtask help`"
                ))
            }
        }
    }
    for dir in &dirs {
        if !dir.is_dir() {
            return Err(format!("--plugin-dir {}: not a folder", dir.display()));
        }
    }
    Ok(dirs)
}

/// Entry point of `cargo xtask test-backends`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let extra = plugin_dirs(args)?;
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

    let mut shown: Vec<String> = std::iter::once(&folder)
        .chain(&extra)
        .map(|f| f.display().to_string())
        .collect();
    if let Some(path) = std::env::var_os("QUABLA_PLUGIN_PATH").filter(|p| !p.is_empty()) {
        shown.push(format!("QUABLA_PLUGIN_PATH={}", path.to_string_lossy()));
    }
    println!(
        "== xtask: conformance matrix (plugins from {}) ==",
        shown.join(", ")
    );
    let mut runner = cargo([
        "run",
        "--quiet",
        "-p",
        "quabla-conformance",
        "--bin",
        "quabla-conformance",
        "--",
    ]);
    for dir in std::iter::once(&folder).chain(&extra) {
        runner.arg("--plugin-dir").arg(dir);
    }
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
    fn takes_plugin_dirs_and_nothing_else() {
        let dir = std::env::temp_dir();
        let arg = dir.display().to_string();
        assert_eq!(
            plugin_dirs(&[
                "--plugin-dir".into(),
                arg.clone(),
                "--plugin-dir".into(),
                arg
            ]),
            Ok(vec![dir.clone(), dir])
        );
        assert_eq!(plugin_dirs(&[]), Ok(vec![]));
        assert!(plugin_dirs(&["--plugin-dir".into()]).is_err());
        assert!(plugin_dirs(&["--release".into()]).is_err());
        assert!(plugin_dirs(&["--plugin-dir".into(), "/no/such/quabla/folder".into()]).is_err());
    }

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
