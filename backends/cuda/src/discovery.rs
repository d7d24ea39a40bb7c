//! Finding and opening the CUDA libraries.
//!
//! The backend needs the driver (`libcuda`), NVRTC (`libnvrtc`), cuBLAS (`libcublas`, which
//! needs `libcublasLt`) and cuSOLVER (`libcusolver`). `cudarc` opens them by file name through
//! the dynamic loader when a function is first called, and panics when none of its names can
//! be opened. So before `cudarc` looks, this module opens each library itself, **by full path**,
//! from the first of these places that has it:
//!
//! 1. the folders of `QUABLA_CUDA_LIB_PATH` (separated by `:`), in order;
//! 2. the pip wheel layouts: `nvidia/*/lib` under each `site-packages` (or `dist-packages`)
//!    folder of the Python environments in sight — the one this library itself was loaded
//!    from (the Python package or a plugin inside `site-packages`), `$VIRTUAL_ENV`,
//!    `$CONDA_PREFIX`, the prefix of the running executable, the user's `~/.local`, and the
//!    system's Python folders;
//! 3. `$CUDA_PATH` and then `/usr/local/cuda` (`lib64`, `lib`, `targets/x86_64-linux/lib`);
//! 4. the loader's default search (`LD_LIBRARY_PATH`, the system's library folders), by name.
//!
//! A library opened by path stays loaded for the life of the process; when `cudarc` then asks
//! the loader for the same name, the loader hands back the library already loaded (it matches
//! the name against the `soname` of loaded libraries). An error names every place searched and
//! the last loader message, so a user can tell a missing wheel from a broken one.
//!
//! This module owns the search and the opened handles; it must not call into CUDA.

use quabla_backend::Unavailable;
use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The environment variable that names folders to search first.
pub const LIB_PATH_VAR: &str = "QUABLA_CUDA_LIB_PATH";

/// A CUDA library the backend loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Library {
    Driver,
    Nvrtc,
    Cublas,
    CublasLt,
    Cusolver,
}

impl Library {
    /// Every library, in the order the backend opens them.
    pub const ALL: [Library; 5] = [
        Library::Driver,
        Library::Nvrtc,
        Library::CublasLt,
        Library::Cublas,
        Library::Cusolver,
    ];

    /// The name errors use (`libcuda`, `libnvrtc`, ...), as errors.md UN5 spells it.
    pub fn name(self) -> &'static str {
        match self {
            Library::Driver => "libcuda",
            Library::Nvrtc => "libnvrtc",
            Library::Cublas => "libcublas",
            Library::CublasLt => "libcublasLt",
            Library::Cusolver => "libcusolver",
        }
    }

    /// The file names tried in each folder, newest major version first. They are the
    /// `soname`s `cudarc` asks the loader for, so a library opened here is the one it finds.
    /// (cuSOLVER's major version runs one behind the toolkit's: `.so.11` is CUDA 12's.)
    pub fn file_names(self) -> &'static [&'static str] {
        if cfg!(target_os = "windows") {
            return match self {
                Library::Driver => &["nvcuda.dll"],
                Library::Nvrtc => &["nvrtc64_130_0.dll", "nvrtc64_120_0.dll"],
                Library::Cublas => &["cublas64_13.dll", "cublas64_12.dll"],
                Library::CublasLt => &["cublasLt64_13.dll", "cublasLt64_12.dll"],
                Library::Cusolver => &["cusolver64_12.dll", "cusolver64_11.dll"],
            };
        }
        match self {
            Library::Driver => &["libcuda.so.1", "libcuda.so"],
            Library::Nvrtc => &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
            Library::Cublas => &["libcublas.so.13", "libcublas.so.12", "libcublas.so"],
            Library::CublasLt => &["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"],
            Library::Cusolver => &["libcusolver.so.12", "libcusolver.so.11", "libcusolver.so"],
        }
    }

    /// The pip wheel folder (under `site-packages/nvidia/`) that ships the library in CUDA 12
    /// wheels; CUDA 13 wheels put every library in `nvidia/cu13/lib`, and both are searched.
    fn wheel_folder(self) -> Option<&'static str> {
        match self {
            Library::Driver => None,
            Library::Nvrtc => Some("cuda_nvrtc"),
            Library::Cublas | Library::CublasLt => Some("cublas"),
            Library::Cusolver => Some("cusolver"),
        }
    }
}

impl fmt::Display for Library {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One place searched: a folder, or the loader's default search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    Folder { path: PathBuf, from: &'static str },
    LoaderDefault,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Folder { path, from } => write!(f, "{} ({from})", path.display()),
            Place::LoaderDefault => f.write_str("the loader's default search path"),
        }
    }
}

/// Where to look, in order (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Search {
    /// Folders searched before the wheels and the toolkit folders (`QUABLA_CUDA_LIB_PATH`).
    pub first: Vec<PathBuf>,
    /// `site-packages` folders whose `nvidia/*/lib` folders are searched.
    pub site_packages: Vec<PathBuf>,
    /// Toolkit roots (`$CUDA_PATH`, `/usr/local/cuda`).
    pub toolkits: Vec<(PathBuf, &'static str)>,
    /// Whether to ask the loader by name at the end.
    pub loader_default: bool,
}

impl Search {
    /// The search of this process: the environment variables and folders of the module docs.
    pub fn from_env() -> Search {
        let first = std::env::var_os(LIB_PATH_VAR)
            .map(|v| {
                std::env::split_paths(&v)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let mut toolkits = Vec::new();
        if let Some(p) = std::env::var_os("CUDA_PATH").filter(|p| !p.is_empty()) {
            toolkits.push((PathBuf::from(p), "$CUDA_PATH"));
        }
        toolkits.push((PathBuf::from("/usr/local/cuda"), "/usr/local/cuda"));
        Search {
            first,
            site_packages: python_site_packages(),
            toolkits,
            loader_default: true,
        }
    }

    /// A search of `folders` only (tests, and callers that know where the libraries are).
    pub fn folders(folders: impl IntoIterator<Item = PathBuf>) -> Search {
        Search {
            first: folders.into_iter().collect(),
            ..Search::default()
        }
    }

    /// The places searched for `lib`, in order, existing folders only (plus the loader's
    /// default search when enabled).
    pub fn places(&self, lib: Library) -> Vec<Place> {
        let mut out: Vec<Place> = Vec::new();
        let mut push = |path: PathBuf, from: &'static str| {
            if path.is_dir()
                && !out
                    .iter()
                    .any(|p| matches!(p, Place::Folder { path: q, .. } if *q == path))
            {
                out.push(Place::Folder { path, from });
            }
        };
        for folder in &self.first {
            push(folder.clone(), LIB_PATH_VAR);
        }
        for site in &self.site_packages {
            let nvidia = site.join("nvidia");
            // The library's own wheel first, then every other wheel folder (CUDA 13 wheels
            // share `nvidia/cu13/lib`; some installs put everything in one folder).
            if let Some(own) = lib.wheel_folder() {
                push(nvidia.join(own).join("lib"), "pip wheel");
            }
            for sub in sorted_subfolders(&nvidia) {
                push(sub.join("lib"), "pip wheel");
                push(sub.join("lib64"), "pip wheel");
            }
        }
        for (root, from) in &self.toolkits {
            push(root.join("lib64"), from);
            push(root.join("lib"), from);
            push(root.join("targets").join("x86_64-linux").join("lib"), from);
        }
        if self.loader_default {
            out.push(Place::LoaderDefault);
        }
        out
    }
}

impl Search {
    /// What was looked at and held no library folder for `lib`: the `site-packages` folders
    /// without an NVIDIA wheel folder, the toolkit roots without a library folder, and the
    /// folders of `QUABLA_CUDA_LIB_PATH` that do not exist. An error lists these after the
    /// places searched, so a user can see which environments and toolkits were considered.
    pub fn looked_at_without_folders(&self, lib: Library) -> Vec<String> {
        let places = self.places(lib);
        let holds_place = |root: &Path| {
            places
                .iter()
                .any(|p| matches!(p, Place::Folder { path, .. } if path.starts_with(root)))
        };
        let mut out = Vec::new();
        for folder in &self.first {
            if !folder.is_dir() {
                out.push(format!(
                    "{} ({LIB_PATH_VAR}) does not exist",
                    folder.display()
                ));
            }
        }
        let sites: Vec<String> = self
            .site_packages
            .iter()
            .filter(|site| !holds_place(&site.join("nvidia")))
            .map(|site| site.display().to_string())
            .collect();
        // The driver never comes as a wheel: saying there was none would only distract.
        if !sites.is_empty() && lib.wheel_folder().is_some() {
            out.push(format!("no NVIDIA wheel in {}", sites.join(", ")));
        }
        for (root, from) in &self.toolkits {
            if !holds_place(root) {
                let name = if root.as_os_str() == *from {
                    root.display().to_string()
                } else {
                    format!("{} ({from})", root.display())
                };
                out.push(if root.is_dir() {
                    format!("{name} has no library folder")
                } else {
                    format!("{name} does not exist")
                });
            }
        }
        out
    }
}

fn sorted_subfolders(dir: &Path) -> Vec<PathBuf> {
    let mut subs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    subs.sort();
    subs
}

/// The `site-packages` folders of the Python environments in sight (see the module docs).
fn python_site_packages() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut add = |p: PathBuf| {
        if p.is_dir() && !out.contains(&p) {
            out.push(p);
        }
    };
    // The environment this very library was loaded from (the Python package's extension, or a
    // plugin installed in site-packages): the closest `site-packages` above it.
    if let Some(own) = own_library_path() {
        for dir in own.ancestors() {
            if matches!(
                dir.file_name().and_then(|n| n.to_str()),
                Some("site-packages" | "dist-packages")
            ) {
                add(dir.to_path_buf());
                break;
            }
        }
    }
    let mut prefixes: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
            prefixes.push(PathBuf::from(p));
        }
    }
    // `<prefix>/bin/python3.x` runs with `<prefix>/lib/python3.x/site-packages`.
    if let Some(prefix) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent().map(Path::to_path_buf))
    {
        prefixes.push(prefix);
    }
    if let Some(home) = std::env::var_os("HOME").filter(|p| !p.is_empty()) {
        prefixes.push(PathBuf::from(home).join(".local"));
    }
    prefixes.push(PathBuf::from("/usr/local"));
    prefixes.push(PathBuf::from("/usr"));
    for prefix in prefixes {
        for lib in ["lib", "lib64"] {
            for python in python_folders(&prefix.join(lib)) {
                add(python.join("site-packages"));
                add(python.join("dist-packages"));
            }
        }
    }
    add(PathBuf::from("/usr/lib/python3/dist-packages"));
    out
}

/// The `python3*` folders of a `lib` folder, newest name first.
fn python_folders(lib: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(lib)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("python3"))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.reverse();
    found
}

/// The file this code was loaded from (the executable, the Python extension or a plugin
/// library), from the loader's record of the address of one of its functions.
#[cfg(unix)]
fn own_library_path() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let address = own_library_path as *const libc::c_void;
    // SAFETY: `dladdr` only reads the loader's tables and fills `info`.
    let found = unsafe { libc::dladdr(address, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: `dli_fname` is a NUL-terminated path owned by the loader while the object is
    // loaded (this one is, as it is running).
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())))
}

#[cfg(not(unix))]
fn own_library_path() -> Option<PathBuf> {
    None
}

/// A library that was opened, and from where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    pub library: Library,
    /// The file opened, or the name given to the loader.
    pub file: PathBuf,
    pub place: Place,
}

/// Opens `lib` from the first place of `search` that has it, keeping it loaded for the life of
/// the process. The error names the library, every place searched and the last loader message.
pub fn open(lib: Library, search: &Search) -> Result<Opened, Unavailable> {
    let places = search.places(lib);
    let mut last_error: Option<String> = None;
    for place in &places {
        for name in lib.file_names() {
            let file = match place {
                Place::Folder { path, .. } => {
                    let file = path.join(name);
                    if !file.exists() {
                        continue;
                    }
                    file
                }
                Place::LoaderDefault => PathBuf::from(name),
            };
            match load(&file) {
                Ok(()) => {
                    return Ok(Opened {
                        library: lib,
                        file,
                        place: place.clone(),
                    })
                }
                // Not found by name is the normal outcome of the default search (and the
                // loader says no more than that); a file that exists but does not load (a
                // missing dependency, a foreign architecture) is what the user needs to hear
                // about.
                Err(e) => {
                    if matches!(place, Place::Folder { .. }) {
                        last_error = Some(e);
                    }
                }
            }
        }
    }
    let searched: Vec<String> = places.iter().map(ToString::to_string).collect();
    let mut detail = format!(
        "none of {} could be opened; searched {}",
        lib.file_names().join(", "),
        if searched.is_empty() {
            "nothing".to_string()
        } else {
            searched.join(", ")
        }
    );
    let without = search.looked_at_without_folders(lib);
    if !without.is_empty() {
        detail.push_str(&format!(" ({})", without.join("; ")));
    }
    if let Some(e) = last_error {
        detail.push_str(&format!("; last error: {e}"));
    }
    if lib != Library::Driver {
        detail.push_str(&format!(
            "; install the CUDA wheels (pip install {}) or set {LIB_PATH_VAR}",
            wheel_package(lib)
        ));
    }
    Err(Unavailable::missing_library(lib.name(), detail))
}

/// The pip package that ships `lib` (CUDA 12 names).
pub fn wheel_package(lib: Library) -> &'static str {
    match lib {
        Library::Driver => "(the NVIDIA driver is not a wheel)",
        Library::Nvrtc => "nvidia-cuda-nvrtc-cu12",
        Library::Cublas | Library::CublasLt => "nvidia-cublas-cu12",
        Library::Cusolver => "nvidia-cusolver-cu12",
    }
}

/// Handles of the libraries opened here, keyed by file, kept for the life of the process.
fn loaded() -> &'static Mutex<HashMap<OsString, libloading::Library>> {
    static LOADED: OnceLock<Mutex<HashMap<OsString, libloading::Library>>> = OnceLock::new();
    LOADED.get_or_init(|| Mutex::new(HashMap::new()))
}

fn load(file: &Path) -> Result<(), String> {
    let key = file.as_os_str().to_os_string();
    let mut map = loaded().lock().unwrap_or_else(|e| e.into_inner());
    if map.contains_key(&key) {
        return Ok(());
    }
    // SAFETY: loading a CUDA library runs its initializers, which only set up the library's
    // own state; the handle is kept for the life of the process, so nothing is unloaded while
    // `cudarc` holds function pointers into it.
    let library = unsafe { libloading::Library::new(file) }.map_err(|e| e.to_string())?;
    map.insert(key, library);
    Ok(())
}

/// Opens `lib` once per process with [`Search::from_env`] and remembers the outcome.
pub fn ensure(lib: Library) -> Result<Opened, Unavailable> {
    static OUTCOMES: OnceLock<Mutex<HashMap<Library, Result<Opened, Unavailable>>>> =
        OnceLock::new();
    let outcomes = OUTCOMES.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = outcomes.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(outcome) = map.get(&lib) {
        return outcome.clone();
    }
    let outcome = open(lib, &Search::from_env());
    map.insert(lib, outcome.clone());
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_names_every_place_searched() {
        let dir = std::env::temp_dir().join(format!("quabla-cuda-search-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let search = Search::folders([dir.clone(), PathBuf::from("/no/such/folder")]);
        let err = open(Library::Nvrtc, &search).unwrap_err();
        assert_eq!(err.library.as_deref(), Some("libnvrtc"));
        assert!(err.reason.contains("libnvrtc.so.12"), "{err}");
        assert!(err.reason.contains(&dir.display().to_string()), "{err}");
        // Folders that do not exist are not listed as searched, but said to be missing.
        assert!(
            !err.reason.contains("searched /no/such/folder")
                && !err.reason.contains(", /no/such/folder ("),
            "{err}"
        );
        assert!(
            err.reason
                .contains("/no/such/folder (QUABLA_CUDA_LIB_PATH) does not exist"),
            "{err}"
        );
        assert!(err.reason.contains("nvidia-cuda-nvrtc-cu12"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_that_is_not_a_library_is_reported_with_the_loader_message() {
        let dir = std::env::temp_dir().join(format!("quabla-cuda-broken-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("libnvrtc.so.12"), b"not an ELF file").unwrap();
        let err = open(Library::Nvrtc, &Search::folders([dir.clone()])).unwrap_err();
        assert!(err.reason.contains("last error"), "{err}");
        assert!(err.reason.contains("libnvrtc.so.12"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn wheel_layouts_are_searched_under_site_packages() {
        let root = std::env::temp_dir().join(format!("quabla-cuda-wheels-{}", std::process::id()));
        let own = root.join("nvidia").join("cuda_nvrtc").join("lib");
        let shared = root.join("nvidia").join("cu13").join("lib");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::create_dir_all(&shared).unwrap();
        let search = Search {
            site_packages: vec![root.clone()],
            ..Search::default()
        };
        let places = search.places(Library::Nvrtc);
        let folders: Vec<&PathBuf> = places
            .iter()
            .filter_map(|p| match p {
                Place::Folder { path, .. } => Some(path),
                Place::LoaderDefault => None,
            })
            .collect();
        assert_eq!(folders, [&own, &shared]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn environments_and_toolkits_without_the_library_are_named() {
        let root = std::env::temp_dir().join(format!("quabla-cuda-empty-{}", std::process::id()));
        let site = root.join("site-packages");
        let toolkit = root.join("cuda");
        std::fs::create_dir_all(&site).unwrap();
        std::fs::create_dir_all(&toolkit).unwrap();
        let search = Search {
            site_packages: vec![site.clone()],
            toolkits: vec![
                (toolkit.clone(), "$CUDA_PATH"),
                (root.join("absent"), "/usr/local/cuda"),
            ],
            ..Search::default()
        };
        let err = open(Library::Cusolver, &search).unwrap_err();
        for part in [
            format!("no NVIDIA wheel in {}", site.display()),
            format!("{} ($CUDA_PATH) has no library folder", toolkit.display()),
            format!(
                "{} (/usr/local/cuda) does not exist",
                root.join("absent").display()
            ),
        ] {
            assert!(err.reason.contains(&part), "{part:?} in {err}");
        }
        // The driver is never a wheel: no word about wheels for it.
        let err = open(Library::Driver, &search).unwrap_err();
        assert!(!err.reason.contains("wheel"), "{err}");
        assert!(err.reason.contains("has no library folder"), "{err}");
        // A wheel folder found is a place searched, not a missing one.
        std::fs::create_dir_all(site.join("nvidia").join("cusolver").join("lib")).unwrap();
        let err = open(Library::Cusolver, &search).unwrap_err();
        assert!(!err.reason.contains("no NVIDIA wheel"), "{err}");
        assert!(err.reason.contains("(pip wheel)"), "{err}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_lib_path_variable_comes_first_and_the_loader_last() {
        let search = Search {
            first: vec![std::env::temp_dir()],
            loader_default: true,
            ..Search::default()
        };
        let places = search.places(Library::Cublas);
        assert!(matches!(&places[0], Place::Folder { from, .. } if *from == LIB_PATH_VAR));
        assert_eq!(places.last(), Some(&Place::LoaderDefault));
    }
}
