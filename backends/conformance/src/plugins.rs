//! Building the plugin libraries that the tests load: the CPU plugin (`quabla-cpu-plugin`), the
//! example third-party plugin (`quabla-example-plugin`, the `toy` device) and the test
//! fixtures (examples of this crate built as `cdylib`s: `fixture_next_interface` and
//! `fixture_previous_interface`, plugins of the interface versions after and before this
//! build's; `fixture_changed_layout`, one of this version with another
//! layout; `fixture_panicking_backend`, whose backend panics; `fixture_aborting_plugin`, built
//! with `-C panic=abort` by [`build_aborting_fixture`]).
//!
//! Tests run after cargo has built them, so the libraries are built here on demand, once per
//! process, with the cargo that runs the tests, into the same target folder and profile as the
//! running executable (a no-op when they are up to date).

use quabla_backend::registry::plugin_file_name;
use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Where the built libraries are.
#[derive(Clone, Debug)]
pub struct Built {
    /// The profile folder (`target/debug`), which holds the CPU plugin.
    pub profile_dir: PathBuf,
}

impl Built {
    /// The CPU plugin library.
    pub fn cpu_plugin(&self) -> PathBuf {
        self.profile_dir.join(plugin_file_name("cpu"))
    }

    /// The example plugin library (`quabla-example-plugin`, the `toy` device).
    pub fn toy_plugin(&self) -> PathBuf {
        self.profile_dir.join(plugin_file_name("toy"))
    }

    /// A fixture library (an example of this crate) by example name.
    pub fn fixture(&self, example: &str) -> PathBuf {
        self.profile_dir
            .join("examples")
            .join(format!("{DLL_PREFIX}{example}{DLL_SUFFIX}"))
    }
}

/// Builds the plugins once per process; the error says what failed.
pub fn build() -> Result<&'static Built, String> {
    static BUILT: OnceLock<Result<Built, String>> = OnceLock::new();
    BUILT.get_or_init(build_now).as_ref().map_err(Clone::clone)
}

/// The profile folder of the running executable and the cargo arguments that select it.
fn profile_of_current_exe() -> Result<(PathBuf, Vec<String>), String> {
    let exe = std::env::current_exe().map_err(|e| format!("no current executable: {e}"))?;
    let mut dir = exe
        .parent()
        .ok_or("the executable has no folder")?
        .to_path_buf();
    if dir
        .file_name()
        .is_some_and(|n| n == "deps" || n == "examples")
    {
        dir = dir.parent().ok_or("no profile folder")?.to_path_buf();
    }
    let profile = dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("the profile folder has no name")?
        .to_string();
    let target = dir.parent().ok_or("no target folder")?.to_path_buf();
    let profile_args = match profile.as_str() {
        "debug" => vec!["--profile".to_string(), "dev".to_string()],
        other => vec!["--profile".to_string(), other.to_string()],
    };
    let mut args = vec!["--target-dir".to_string(), target.display().to_string()];
    args.extend(profile_args);
    Ok((dir, args))
}

fn cargo() -> PathBuf {
    std::env::var_os("CARGO")
        .map(PathBuf::from)
        .or_else(|| option_env!("CARGO").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("cargo"))
}

fn run_cargo(mut command: Command, what: &str) -> Result<(), String> {
    let output = command
        .output()
        .map_err(|e| format!("could not run {}: {e}", cargo().display()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "building {what} failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

fn build_now() -> Result<Built, String> {
    let (profile_dir, selection) = profile_of_current_exe()?;
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut command = Command::new(cargo());
    command
        .current_dir(manifest_dir)
        .args([
            "build",
            "--quiet",
            "-p",
            "quabla-cpu-plugin",
            "-p",
            "quabla-example-plugin",
            "-p",
            "quabla-conformance",
            "--lib",
            "--example",
            "fixture_next_interface",
            "--example",
            "fixture_previous_interface",
            "--example",
            "fixture_changed_layout",
            "--example",
            "fixture_panicking_backend",
        ])
        .args(&selection);
    run_cargo(command, "the plugins")?;
    let built = Built { profile_dir };
    for path in [
        built.cpu_plugin(),
        built.toy_plugin(),
        built.fixture("fixture_next_interface"),
        built.fixture("fixture_previous_interface"),
        built.fixture("fixture_changed_layout"),
        built.fixture("fixture_panicking_backend"),
    ] {
        if !path.is_file() {
            return Err(format!("{} was not built", path.display()));
        }
    }
    Ok(built)
}

/// Builds `fixture_aborting_plugin` with `-C panic=abort` (once per process) and returns its
/// path. Only the fixture itself is compiled to abort: its dependencies are the ordinary
/// (unwinding) builds, which rustc links into an aborting library as it links the standard
/// library, and the panic runtime of the result is the aborting one.
///
/// The fixture's file is shared with ordinary builds of the examples (`cargo test`, `cargo
/// clippy --all-targets`), which rebuild it to unwind; this rebuilds it to abort, so a test
/// must call this just before loading it.
pub fn build_aborting_fixture() -> Result<&'static Path, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let built = build()?;
            let (_, selection) = profile_of_current_exe()?;
            let mut command = Command::new(cargo());
            command
                .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
                .args([
                    "rustc",
                    "--quiet",
                    "-p",
                    "quabla-conformance",
                    "--example",
                    "fixture_aborting_plugin",
                ])
                .args(&selection)
                .args(["--", "-C", "panic=abort"]);
            run_cargo(command, "the aborting fixture")?;
            let path = built.fixture("fixture_aborting_plugin");
            if path.is_file() {
                Ok(path)
            } else {
                Err(format!("{} was not built", path.display()))
            }
        })
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(Clone::clone)
}

/// A folder holding only the CPU plugin library (under its plugin file name), made once per
/// process.
pub fn cpu_plugin_folder() -> Result<&'static Path, String> {
    static FOLDER: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOLDER
        .get_or_init(|| {
            let built = build()?;
            let dir = scratch_dir("cpu-plugin");
            install(&built.cpu_plugin(), &dir, &plugin_file_name("cpu"));
            Ok(dir)
        })
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(Clone::clone)
}

/// A fresh empty folder under the system's temporary folder, unique to this process and
/// `tag`.
pub fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quabla-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the temporary folder is writable");
    dir
}

/// Places `library` in `folder` under `file_name` (a symbolic link where the platform has
/// them, a copy elsewhere).
pub fn install(library: &Path, folder: &Path, file_name: &str) -> PathBuf {
    let dest = folder.join(file_name);
    let _ = std::fs::remove_file(&dest);
    #[cfg(unix)]
    std::os::unix::fs::symlink(library, &dest).expect("symlink into the scratch folder");
    #[cfg(not(unix))]
    std::fs::copy(library, &dest).expect("copy into the scratch folder");
    dest
}
