//! Finding NCCL, the library the device transport of data parallelism runs on (api.md §20):
//! where `libnccl.so.2` is, whether it opens, and its version — or, when it does not, the UN5
//! error of errors.md (`required library libnccl could not be loaded (...)`) naming every place
//! searched and the loader's message.
//!
//! The places, in order (the same variables and layouts the CUDA backend searches for its own
//! libraries, so one setting serves both):
//!
//! 1. the folders of `QUABLA_CUDA_LIB_PATH` (separated by `:`);
//! 2. the pip wheel layout `site-packages/nvidia/nccl/lib` (the `nvidia-nccl-cu12` and `-cu13`
//!    wheels) of the Python environments in sight: `$VIRTUAL_ENV`, `$CONDA_PREFIX`, and the
//!    prefix of the running executable (a venv's `bin/python`);
//! 3. `$CUDA_PATH` and `/usr/local/cuda` (`lib64`, `lib`, `targets/x86_64-linux/lib`);
//! 4. the loader's default search (`LD_LIBRARY_PATH`, the system folders), by name.
//!
//! A file is checked with `quabla_backend::library_file` before the loader sees it (a
//! truncated or foreign file is reported, not mapped), and the library that opened stays loaded
//! for the life of the process.
//!
//! This module only finds and opens the library and reads its version; it must not call NCCL's
//! communication functions (those need device memory, so they belong with the CUDA backend:
//! docs/distributed.md, "Devices: NCCL").

use crate::error::{Error, Result};
use std::ffi::c_int;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The file names tried in each folder: NCCL 2's `soname` first.
const FILE_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

/// The variable that names folders to search first (shared with the CUDA backend).
pub const LIB_PATH_VAR: &str = "QUABLA_CUDA_LIB_PATH";

/// NCCL as found in this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NcclLibrary {
    /// The file opened, or the name the loader resolved (`libnccl.so.2`) when it came from the
    /// loader's default search.
    pub path: PathBuf,
    /// `(major, minor, patch)` from `ncclGetVersion`.
    pub version: (u32, u32, u32),
}

impl fmt::Display for NcclLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, b, c) = self.version;
        write!(f, "NCCL {a}.{b}.{c} ({})", self.path.display())
    }
}

/// Why NCCL could not be used: what was tried, and the last thing that went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NcclUnavailable {
    /// The detail of the UN5 message: the places searched, or the file and its problem.
    pub detail: String,
}

impl NcclUnavailable {
    /// UN5 of errors.md for `device` (`"cuda:0"`): `Error::Unsupported` with `op` `"libnccl"`.
    pub fn to_error(&self, device: &str) -> Error {
        Error::Unsupported {
            op: "libnccl".into(),
            device: Some(device.to_string()),
            message: format!(
                "{device}: required library libnccl could not be loaded ({}); check the driver \
                 installation and LD_LIBRARY_PATH",
                self.detail
            ),
        }
    }
}

/// NCCL for this process: found, opened and asked its version on the first call, and the same
/// answer afterwards (the search reads the environment once). The error is UN5 for `device`.
pub fn nccl_library(device: &str) -> Result<NcclLibrary> {
    static FOUND: OnceLock<std::result::Result<NcclLibrary, NcclUnavailable>> = OnceLock::new();
    FOUND
        .get_or_init(|| find(&Search::from_env()))
        .clone()
        .map_err(|e| e.to_error(device))
}

/// Where to look (see the module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct Search {
    /// Folders searched in order, each with where it came from (for messages).
    pub folders: Vec<(PathBuf, &'static str)>,
    /// Whether to ask the loader by name at the end.
    pub loader_default: bool,
}

impl Search {
    /// The search of this process, from its environment.
    pub fn from_env() -> Search {
        let mut folders: Vec<(PathBuf, &'static str)> = Vec::new();
        if let Some(v) = std::env::var_os(LIB_PATH_VAR) {
            folders.extend(std::env::split_paths(&v).map(|p| (p, LIB_PATH_VAR)));
        }
        let mut prefixes: Vec<(PathBuf, &'static str)> = Vec::new();
        for (var, from) in [
            ("VIRTUAL_ENV", "$VIRTUAL_ENV"),
            ("CONDA_PREFIX", "$CONDA_PREFIX"),
        ] {
            if let Some(p) = std::env::var_os(var) {
                prefixes.push((p.into(), from));
            }
        }
        if let Some(prefix) = std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.parent()?.to_path_buf()))
        {
            prefixes.push((prefix, "the executable's prefix"));
        }
        for (prefix, from) in prefixes {
            for site in site_packages(&prefix) {
                folders.push((site.join("nvidia").join("nccl").join("lib"), from));
            }
        }
        let mut toolkits: Vec<(PathBuf, &'static str)> = Vec::new();
        if let Some(p) = std::env::var_os("CUDA_PATH") {
            toolkits.push((p.into(), "$CUDA_PATH"));
        }
        toolkits.push(("/usr/local/cuda".into(), "the CUDA toolkit"));
        for (root, from) in toolkits {
            for sub in ["lib64", "lib", "targets/x86_64-linux/lib"] {
                folders.push((root.join(sub), from));
            }
        }
        let mut seen = std::collections::HashSet::new();
        folders.retain(|(p, _)| seen.insert(p.clone()));
        Search {
            folders,
            loader_default: true,
        }
    }
}

/// The `site-packages` (and Debian's `dist-packages`) folders of a Python prefix:
/// `lib/python3.*/site-packages`, sorted.
fn site_packages(prefix: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
        return found;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with("python3") {
            for sub in ["site-packages", "dist-packages"] {
                let site = entry.path().join(sub);
                if site.is_dir() {
                    found.push(site);
                }
            }
        }
    }
    found.sort();
    found
}

/// The libraries opened by this module, kept loaded for the life of the process (the device
/// transport will call into the one found).
fn keep(library: libloading::Library) {
    static KEPT: std::sync::Mutex<Vec<libloading::Library>> = std::sync::Mutex::new(Vec::new());
    if let Ok(mut kept) = KEPT.lock() {
        kept.push(library);
    }
}

/// Runs the search: the first file that exists is opened and asked its version; its failure
/// is the answer (a broken NCCL earlier in the search is not skipped silently for a later one,
/// so what is reported is what would run).
pub(crate) fn find(search: &Search) -> std::result::Result<NcclLibrary, NcclUnavailable> {
    for (folder, _) in &search.folders {
        for name in FILE_NAMES {
            let file = folder.join(name);
            if file.exists() {
                if let Err(problem) = quabla_backend::library_file::check_library_file(&file) {
                    return Err(NcclUnavailable {
                        detail: format!("{}: {problem}", file.display()),
                    });
                }
                return open(&file, file.as_os_str());
            }
        }
    }
    let searched: Vec<String> = search
        .folders
        .iter()
        .map(|(p, from)| format!("{} ({from})", p.display()))
        .collect();
    if !search.loader_default {
        return Err(NcclUnavailable {
            detail: format!("{} not found in: {}", FILE_NAMES[0], searched.join(", ")),
        });
    }
    match open(Path::new(FILE_NAMES[0]), FILE_NAMES[0].as_ref()) {
        Ok(found) => Ok(found),
        Err(e) => {
            let mut detail = format!("{} not found in: ", FILE_NAMES[0]);
            for s in &searched {
                detail.push_str(s);
                detail.push_str(", ");
            }
            detail.push_str(&format!(
                "nor by the loader's default search ({})",
                e.detail
            ));
            Err(NcclUnavailable { detail })
        }
    }
}

/// Opens `what` (a path, or a bare name for the loader's search) and reads the version.
fn open(shown: &Path, what: &std::ffi::OsStr) -> std::result::Result<NcclLibrary, NcclUnavailable> {
    let fail = |detail: String| NcclUnavailable {
        detail: format!("{}: {detail}", shown.display()),
    };
    // SAFETY: opening a shared library runs its initializers; NCCL's only set up its own
    // state. The file was checked to be a library of this platform when given by path.
    let library = unsafe { libloading::Library::new(what) }.map_err(|e| fail(e.to_string()))?;
    let code = {
        // SAFETY: `ncclGetVersion(int*)` has had this signature since NCCL 2.0.
        let get: libloading::Symbol<'_, unsafe extern "C" fn(*mut c_int) -> c_int> =
            unsafe { library.get("ncclGetVersion") }.map_err(|e| fail(format!("not NCCL: {e}")))?;
        let mut code: c_int = 0;
        // SAFETY: writes one int.
        let status = unsafe { get(&mut code) };
        if status != 0 {
            return Err(fail(format!("ncclGetVersion failed with status {status}")));
        }
        code
    };
    let version = decode_version(code).ok_or_else(|| fail(format!("unknown version {code}")))?;
    keep(library);
    Ok(NcclLibrary {
        path: shown.to_path_buf(),
        version,
    })
}

/// `NCCL_VERSION_CODE`: `major*10000 + minor*100 + patch` since 2.9, `major*1000 + minor*100 +
/// patch` before.
fn decode_version(code: c_int) -> Option<(u32, u32, u32)> {
    let code = u32::try_from(code).ok()?;
    let (major, rest) = if code >= 20900 {
        (code / 10000, code % 10000)
    } else {
        (code / 1000, code % 1000)
    };
    (major >= 2).then_some((major, rest / 100, rest % 100))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("quabla-nccl-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn versions_decode_in_both_schemes() {
        assert_eq!(decode_version(22304), Some((2, 23, 4)));
        assert_eq!(decode_version(21003), Some((2, 10, 3)));
        assert_eq!(decode_version(2804), Some((2, 8, 4)));
        assert_eq!(decode_version(-1), None);
        assert_eq!(decode_version(7), None);
    }

    #[test]
    fn a_missing_library_names_every_place_searched() {
        let (a, b) = (folder("empty-a"), folder("empty-b"));
        let search = Search {
            folders: vec![(a.clone(), "first"), (b.clone(), "second")],
            loader_default: false,
        };
        let err = find(&search).unwrap_err().to_error("cuda:0");
        let text = err.to_string();
        assert!(
            matches!(&err, Error::Unsupported { op, device, .. }
                if op == "libnccl" && device.as_deref() == Some("cuda:0")),
            "{err:?}"
        );
        assert!(
            text.starts_with("cuda:0: required library libnccl could not be loaded (")
                && text.contains(&format!("{} (first)", a.display()))
                && text.contains(&format!("{} (second)", b.display()))
                && text.ends_with("check the driver installation and LD_LIBRARY_PATH"),
            "{text}"
        );
    }

    #[test]
    fn a_file_that_is_no_library_is_reported_not_loaded() {
        let dir = folder("garbage");
        std::fs::write(dir.join("libnccl.so.2"), b"not an ELF file").unwrap();
        let search = Search {
            folders: vec![(dir.clone(), "first")],
            loader_default: true,
        };
        let detail = find(&search).unwrap_err().detail;
        assert!(
            detail.starts_with(&dir.join("libnccl.so.2").display().to_string()),
            "{detail}"
        );
    }

    /// Compiles `source` into `dir/libnccl.so.2` with the system's C compiler (the one that
    /// links Rust programs on Linux).
    #[cfg(target_os = "linux")]
    fn shared_library(dir: &Path, source: &str) {
        let c = dir.join("fake_nccl.c");
        std::fs::write(&c, source).unwrap();
        let status = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(dir.join("libnccl.so.2"))
            .arg(&c)
            .status()
            .expect("cc, the C compiler that links Rust programs, runs");
        assert!(status.success());
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn libraries_are_opened_and_asked_their_version() {
        let cases = [
            (
                "v2_23_4",
                "int ncclGetVersion(int *v) { *v = 22304; return 0; }",
                Ok((2, 23, 4)),
            ),
            (
                "v2_8_4",
                "int ncclGetVersion(int *v) { *v = 2804; return 0; }",
                Ok((2, 8, 4)),
            ),
            (
                "other",
                "int somethingElse(void) { return 1; }",
                Err("not NCCL"),
            ),
            (
                "failing",
                "int ncclGetVersion(int *v) { return 3; }",
                Err("ncclGetVersion failed with status 3"),
            ),
            (
                "nonsense",
                "int ncclGetVersion(int *v) { *v = 5; return 0; }",
                Err("unknown version 5"),
            ),
        ];
        for (name, source, expected) in cases {
            let dir = folder(name);
            shared_library(&dir, source);
            let search = Search {
                // An empty folder first: the search goes on to the next.
                folders: vec![
                    (folder(&format!("{name}-empty")), "first"),
                    (dir.clone(), "second"),
                ],
                loader_default: false,
            };
            let file = dir.join("libnccl.so.2");
            match (find(&search), expected) {
                (Ok(found), Ok(version)) => {
                    assert_eq!(
                        found,
                        NcclLibrary {
                            path: file.clone(),
                            version
                        },
                        "{name}"
                    );
                    let (a, b, c) = version;
                    assert_eq!(
                        found.to_string(),
                        format!("NCCL {a}.{b}.{c} ({})", file.display())
                    );
                }
                (Err(e), Err(text)) => {
                    assert!(
                        e.detail.starts_with(&file.display().to_string())
                            && e.detail.contains(text),
                        "{name}: {}",
                        e.detail
                    );
                }
                (got, _) => panic!("{name}: {got:?}"),
            }
        }
    }

    #[test]
    fn the_environment_search_has_the_documented_order() {
        let search = Search::from_env();
        let tail: Vec<&Path> = search
            .folders
            .iter()
            .rev()
            .take(3)
            .map(|(p, _)| p.as_path())
            .collect();
        assert_eq!(
            tail,
            [
                Path::new("/usr/local/cuda/targets/x86_64-linux/lib"),
                Path::new("/usr/local/cuda/lib"),
                Path::new("/usr/local/cuda/lib64"),
            ]
        );
        assert!(search.loader_default);
    }
}
