//! The backend registry: which backends this process can use, where each comes from, and why
//! an unusable one is unusable.
//!
//! Two kinds of backends meet here:
//!
//! - **Linked** backends are compiled into the program and announce themselves with
//!   [`crate::register_backend!`] (an `inventory` submission), so no central list names them:
//!   linking the crate is enough. The CPU reference backend is always linked.
//! - **Plugins** are dynamic libraries. The registry loads them from two places only:
//!   - the folders of the `QUABLA_PLUGIN_PATH` environment variable (separated like `PATH`,
//!     read once, when [`Registry::global`] is first used), where a file is a candidate when
//!     it is named `quabla_<name>_plugin` with the platform's prefix and suffix
//!     ([`plugin_file_name`]); not their subfolders, not the dynamic loader's search path,
//!     and not the folder of the running executable (so a program built in a plugin's
//!     workspace does not pick up, or load a second copy of, the plugins built beside it);
//!   - any path given to [`Registry::load_plugin`], whatever the file is called.
//!
//! Every library is loaded at most once per registry: files are identified by their canonical
//! path (and, on Unix, by device and inode, so a hard link is the same file), and loading a
//! file again returns the entry it already has.
//!
//! Before the dynamic loader sees a file, [`crate::library_file`] checks it (a regular,
//! non-empty library of this platform whose segments lie inside the file), so a truncated or
//! foreign file is a typed [`LoadError`] rather than a crash. Then `abi_stable` checks the
//! interface version and the layout of every type of [`crate::abi`], and the registry checks
//! the plugin's name and that it was built to unwind on panic ([`LoadError::AbortsOnPanic`]),
//! all before anything of the plugin is called (apart from the library's own initializers and
//! the constructor of its root module, as for any `abi_stable` library).
//!
//! A plugin answers to one name, the one it declares in its root module ([`Plugin::name`]):
//! the registry lists it, resolves it and reports it under that name, `export_plugin!` refuses
//! to open a backend whose [`Backend::name`] says otherwise, and a file named like a plugin
//! must be named after it.
//!
//! Loading a plugin only opens its library and asks it to open its backend (which for a device
//! backend means loading the driver library); no hardware is probed beyond that. Libraries
//! stay loaded until the process ends, as `abi_stable` requires.
//!
//! A name can be provided more than once (the linked CPU backend and the CPU plugin both answer
//! to `"cpu"`). [`Registry::backend`] picks the first available one in this order: linked
//! backends, then plugins in the order they were registered (search order, then
//! [`Registry::load_plugin`] calls).
//!
//! A loaded plugin's objects become an ordinary [`Backend`], executable and memory through the
//! proxies of `registry/proxy.rs`.

use crate::abi::{
    AbiInput, AbiTensorType, BackendBox, BufferBox, ExecutableBox, PluginError, QuablaPluginRef,
    INTERFACE_VERSION,
};
use crate::library_file::{check_library_file, FileProblem};
use crate::{
    check_inputs, Backend, BackendError, Bound, Capabilities, Executable, HostTensor, Memory,
    Precision, Result, RunFailure, TransferCounter, Transfers, Unavailable,
};
use abi_stable::library::{lib_header_from_path, LibraryError};
use abi_stable::std_types::{RResult, RSlice};
use quabla_ir::{DType, Plan, Shape};
use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use thiserror::Error;

/// The environment variable listing plugin folders.
pub const PLUGIN_PATH_VAR: &str = "QUABLA_PLUGIN_PATH";

/// The backends Quabla knows by name, in the order `devices()` lists them.
pub const KNOWN_BACKENDS: [&str; 3] = ["cpu", "cuda", "mlx"];

/// A backend linked into the program. Submit one with [`crate::register_backend!`].
#[derive(Debug)]
pub struct LinkedBackend {
    name: &'static str,
    open: fn() -> std::result::Result<Arc<dyn Backend>, Unavailable>,
}

impl LinkedBackend {
    pub const fn new(
        name: &'static str,
        open: fn() -> std::result::Result<Arc<dyn Backend>, Unavailable>,
    ) -> LinkedBackend {
        LinkedBackend { name, open }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Opens the backend; a panic while opening is reported as unavailability.
    pub fn open(&self) -> std::result::Result<Arc<dyn Backend>, Unavailable> {
        match catch_unwind(AssertUnwindSafe(self.open)) {
            Ok(result) => result,
            Err(payload) => Err(Unavailable::new(format!(
                "opening the backend panicked: {}",
                crate::abi::panic_message(payload.as_ref())
            ))),
        }
    }
}

inventory::collect!(LinkedBackend);

/// Registers a backend linked into the program under a target name:
/// `register_backend!("cpu", || Ok(Arc::new(CpuBackend::default())))`. The second argument is
/// a `fn() -> Result<Arc<dyn Backend>, Unavailable>` (a closure without captures works).
#[macro_export]
macro_rules! register_backend {
    ($name:expr, $open:expr $(,)?) => {
        $crate::__private::inventory::submit! {
            $crate::registry::LinkedBackend::new($name, $open)
        }
    };
}

/// Every backend linked into the program, in registration order (which is unspecified).
pub fn linked_backends() -> impl Iterator<Item = &'static LinkedBackend> {
    inventory::iter::<LinkedBackend>.into_iter()
}

/// The file name of the plugin library of backend `name` on this platform:
/// `libquabla_<name>_plugin.so` on Linux, `libquabla_<name>_plugin.dylib` on macOS,
/// `quabla_<name>_plugin.dll` on Windows.
pub fn plugin_file_name(name: &str) -> String {
    format!("{DLL_PREFIX}quabla_{name}_plugin{DLL_SUFFIX}")
}

/// The backend name a plugin file name announces (`libquabla_cpu_plugin.so` → `cpu`), or
/// `None` for a file that is not named like a plugin.
pub fn plugin_name_of_file(file_name: &str) -> Option<&str> {
    let name = file_name
        .strip_prefix(DLL_PREFIX)?
        .strip_suffix(DLL_SUFFIX)?
        .strip_prefix("quabla_")?
        .strip_suffix("_plugin")?;
    (!name.is_empty()).then_some(name)
}

/// Whether `name` can name a backend: 1 to 64 characters, lowercase ASCII letters, digits,
/// `_` and `-`, starting with a letter. Device strings are `<name>` or `<name>:<ordinal>`,
/// so a name must not contain `:`; the rest keeps names usable as file names everywhere.
pub fn is_valid_backend_name(name: &str) -> bool {
    name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// Where plugins are looked for: an ordered list of folders.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PluginSearch {
    folders: Vec<PathBuf>,
}

impl PluginSearch {
    /// The folders of `QUABLA_PLUGIN_PATH`, in order, and nothing else (empty entries are
    /// ignored; an unset variable means no folders).
    pub fn from_env() -> PluginSearch {
        let folders: Vec<PathBuf> = std::env::var_os(PLUGIN_PATH_VAR)
            .map(|v| {
                std::env::split_paths(&v)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        PluginSearch::folders(folders)
    }

    /// Exactly these folders, in order (a folder named twice, under the same or another
    /// spelling of its path, is searched once).
    pub fn folders(folders: impl IntoIterator<Item = PathBuf>) -> PluginSearch {
        let mut unique: Vec<PathBuf> = Vec::new();
        let mut canonical: Vec<PathBuf> = Vec::new();
        for folder in folders {
            let real = std::fs::canonicalize(&folder).unwrap_or_else(|_| folder.clone());
            if !unique.contains(&folder) && !canonical.contains(&real) {
                unique.push(folder);
                canonical.push(real);
            }
        }
        PluginSearch { folders: unique }
    }

    /// No folders: linked backends only.
    pub fn none() -> PluginSearch {
        PluginSearch::default()
    }

    pub fn folder_list(&self) -> &[PathBuf] {
        &self.folders
    }

    /// The plugin files of the folders, in search order (sorted by name within a folder).
    /// Folders that do not exist or cannot be read are skipped.
    pub fn candidates(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for folder in &self.folders {
            let Ok(entries) = std::fs::read_dir(folder) else {
                continue;
            };
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| plugin_name_of_file(n).is_some())
                        && p.is_file()
                })
                .collect();
            files.sort();
            found.extend(files);
        }
        found
    }
}

/// Why a plugin library could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file is not a loadable library: the check before loading refused it (`cause` is
    /// [`OpenError::File`]: a truncated, foreign or missing file, an empty path, a folder) or
    /// the dynamic loader did ([`OpenError::Loader`], e.g. a library it needs is missing).
    #[error("{}: cannot be opened as a dynamic library: {cause}", path.display())]
    Open { path: PathBuf, cause: OpenError },
    /// The library loads but does not export a Quabla plugin root module.
    #[error("{}: not a Quabla backend plugin (no root module): {message}", path.display())]
    NotAPlugin { path: PathBuf, message: String },
    /// The plugin was built for another version of the plugin interface.
    #[error(
        "{}: plugin interface version {found} is not supported; this build of Quabla loads \
         interface version {expected} (rebuild the plugin against a quabla-backend with \
         interface version {expected})",
        path.display()
    )]
    InterfaceVersion {
        path: PathBuf,
        expected: u32,
        found: String,
    },
    /// The plugin was built with an incompatible version of `abi_stable`.
    #[error("{}: built with an incompatible abi_stable ABI: {message}", path.display())]
    AbiStable { path: PathBuf, message: String },
    /// The types of the interface differ from this build's although the version matches.
    /// `mismatch` names the innermost type that differs, the field leading to it and what
    /// differs; the whole report of `abi_stable` is the error's [`std::error::Error::source`].
    #[error(
        "{}: the layout of the plugin interface differs from this build's (same interface \
         version {INTERFACE_VERSION}): {mismatch}",
        path.display()
    )]
    Layout {
        path: PathBuf,
        mismatch: String,
        #[source]
        report: LayoutReport,
    },
    /// The plugin was compiled with `panic = "abort"`: a panic inside it would end the
    /// process instead of coming back as an error, so it is refused before it is opened.
    #[error(
        "{}: the plugin was built with panic = \"abort\"; Quabla loads only plugins built \
         with panic = \"unwind\" (the default), because a panic inside an aborting plugin \
         ends the whole process instead of returning an error (remove `panic = \"abort\"` \
         from the plugin's Cargo profile and rebuild it)",
        path.display()
    )]
    AbortsOnPanic { path: PathBuf },
    /// The plugin declares a name that cannot name a backend ([`is_valid_backend_name`]).
    #[error(
        "{}: the plugin declares the backend name {name:?}, which is not a valid name (1 to \
         64 lowercase ASCII letters, digits, '_' or '-', starting with a letter)",
        path.display()
    )]
    InvalidName { path: PathBuf, name: String },
    /// The file is named like the plugin of one backend but declares another.
    #[error(
        "{}: the file is named for backend {file_name:?} but the plugin declares {declared:?}; \
         rename it to {}",
        path.display(),
        plugin_file_name(declared)
    )]
    NameMismatch {
        path: PathBuf,
        file_name: String,
        declared: String,
    },
    /// Any other failure while loading.
    #[error("{}: {message}", path.display())]
    Other { path: PathBuf, message: String },
}

/// Why a file cannot be opened as a dynamic library.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum OpenError {
    /// The check before loading ([`crate::library_file`]) refused the file.
    #[error("{0}")]
    File(FileProblem),
    /// The dynamic loader refused it; its message.
    #[error("{0}")]
    Loader(String),
}

/// The full layout report of `abi_stable` behind a [`LoadError::Layout`] (hundreds of lines:
/// both layouts of every type that differs).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct LayoutReport(pub String);

impl LoadError {
    pub fn path(&self) -> &Path {
        match self {
            LoadError::Open { path, .. }
            | LoadError::NotAPlugin { path, .. }
            | LoadError::InterfaceVersion { path, .. }
            | LoadError::AbiStable { path, .. }
            | LoadError::Layout { path, .. }
            | LoadError::AbortsOnPanic { path }
            | LoadError::InvalidName { path, .. }
            | LoadError::NameMismatch { path, .. }
            | LoadError::Other { path, .. } => path,
        }
    }

    fn file(path: &Path, problem: FileProblem) -> LoadError {
        LoadError::Open {
            path: path.to_path_buf(),
            cause: OpenError::File(problem),
        }
    }

    /// `found` is the layout the library exports, for a layout mismatch to be located.
    fn from_library(
        path: &Path,
        e: LibraryError,
        found: Option<&'static abi_stable::type_layout::TypeLayout>,
    ) -> LoadError {
        let path = path.to_path_buf();
        match e {
            LibraryError::OpenError { err, .. } => LoadError::Open {
                path,
                cause: OpenError::Loader(err.to_string()),
            },
            LibraryError::GetSymbolError { err, .. } => LoadError::NotAPlugin {
                path,
                message: err.to_string(),
            },
            LibraryError::IncompatibleVersionNumber { actual_version, .. } => {
                LoadError::InterfaceVersion {
                    path,
                    expected: INTERFACE_VERSION,
                    found: actual_version.major.to_string(),
                }
            }
            LibraryError::ParseVersionError(e) => LoadError::InterfaceVersion {
                path,
                expected: INTERFACE_VERSION,
                found: format!("(unreadable: {e})"),
            },
            LibraryError::InvalidAbiHeader(header) => LoadError::AbiStable {
                path,
                message: format!(
                    "abi_stable ABI {}.{}, expected {}.{}",
                    header.abi_major,
                    header.abi_minor,
                    abi_stable::library::AbiHeader::VALUE.abi_major,
                    abi_stable::library::AbiHeader::VALUE.abi_minor
                ),
            },
            LibraryError::InvalidCAbi { .. } => LoadError::AbiStable {
                path,
                message: e.to_string(),
            },
            LibraryError::AbiInstability(_) => {
                let expected = <QuablaPluginRef as abi_stable::StableAbi>::LAYOUT;
                let mismatch = crate::layout::innermost_mismatch(expected, found);
                LoadError::Layout {
                    path,
                    mismatch,
                    report: LayoutReport(e.to_string()),
                }
            }
            other => LoadError::Other {
                path,
                message: other.to_string(),
            },
        }
    }
}

/// A plugin library, loaded and checked, whose backend has not been opened yet.
#[derive(Clone, Copy)]
pub struct Plugin {
    module: QuablaPluginRef,
    path: &'static Path,
}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name())
            .field("version", &self.version())
            .field("path", &self.path)
            .finish()
    }
}

impl Plugin {
    /// Loads the library at `path` and checks it: the file first ([`crate::library_file`]:
    /// a regular, non-empty library of this platform with its segments inside the file), then
    /// that it is a Quabla plugin of this interface version with the interface's layout, that
    /// its name is valid and (for a file named like a plugin) the one its file name announces,
    /// and that it was built to unwind on panic. Nothing of the plugin runs before the checks
    /// pass, apart from the library's own initializers and its root module's constructor, as
    /// for any `abi_stable` library.
    ///
    /// The loader is given the canonical path, never `path` itself: a bare file name would
    /// send it through its own search path instead of to the file that was checked.
    pub fn load(path: &Path) -> std::result::Result<Plugin, LoadError> {
        check_library_file(path).map_err(|problem| LoadError::file(path, problem))?;
        let canonical = std::fs::canonicalize(path)
            .map_err(|e| LoadError::file(path, FileProblem::Io(e.to_string())))?;
        let header =
            lib_header_from_path(&canonical).map_err(|e| LoadError::from_library(path, e, None))?;
        let module = header
            .init_root_module::<QuablaPluginRef>()
            .map_err(|e| LoadError::from_library(path, e, header.layout()))?;
        check_module(path, module)?;
        // The library is never unloaded, so neither is its path worth freeing.
        let path: &'static Path = Box::leak(path.to_path_buf().into_boxed_path());
        Ok(Plugin { module, path })
    }

    /// A plugin whose root module is compiled into this program, reached without loading a
    /// library: for testing a plugin crate in-process (`Plugin::in_process(
    /// my_plugin::quabla_plugin_root_module())`). Its path reads `<in-process>`.
    pub fn in_process(module: QuablaPluginRef) -> Plugin {
        Plugin {
            module,
            path: Path::new("<in-process>"),
        }
    }

    /// The target name the plugin declares.
    pub fn name(&self) -> &'static str {
        self.module.name().as_str()
    }

    /// The plugin's own version.
    pub fn version(&self) -> &'static str {
        self.module.plugin_version().as_str()
    }

    pub fn path(&self) -> &'static Path {
        self.path
    }

    /// Opens the plugin's backend (probing the libraries it needs).
    pub fn open(&self) -> std::result::Result<PluginBackend, Unavailable> {
        let name = self.name();
        let backend = match (self.module.open())() {
            RResult::ROk(b) => b,
            RResult::RErr(PluginError::Unavailable { library, reason }) => {
                return Err(Unavailable {
                    library: library.into_option().map(String::from),
                    reason: reason.into(),
                })
            }
            RResult::RErr(other) => {
                return Err(Unavailable::new(format!(
                    "opening the backend failed: {other}"
                )))
            }
        };
        let capabilities = match backend.capabilities() {
            RResult::ROk(c) => c.into(),
            RResult::RErr(e) => {
                return Err(Unavailable::new(format!(
                    "the backend did not report its capabilities: {e}"
                )))
            }
        };
        Ok(PluginBackend {
            inner: Arc::new(PluginInner {
                name: name.to_string(),
                path: self.path,
                capabilities,
                backend,
                transfers: TransferCounter::default(),
            }),
        })
    }
}

/// The checks of a root module that `abi_stable` does not make: the declared name, and that
/// the plugin unwinds on panic. Reading the module's fields runs no plugin code.
fn check_module(path: &Path, module: QuablaPluginRef) -> std::result::Result<(), LoadError> {
    let declared = module.name().as_str();
    if !is_valid_backend_name(declared) {
        return Err(LoadError::InvalidName {
            path: path.to_path_buf(),
            name: declared.to_string(),
        });
    }
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(plugin_name_of_file);
    if let Some(file_name) = file_name {
        if file_name != declared {
            return Err(LoadError::NameMismatch {
                path: path.to_path_buf(),
                file_name: file_name.to_string(),
                declared: declared.to_string(),
            });
        }
    }
    // `None`: a plugin built before the field existed, whose strategy is unknown.
    if module.unwinds_on_panic() == Some(false) {
        return Err(LoadError::AbortsOnPanic {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

mod proxy;
#[cfg(test)]
mod tests;

use proxy::PluginInner;
pub use proxy::{PluginBackend, PluginExecutable, PluginMemory};

/// Where a backend comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Compiled into the program.
    Linked,
    /// Loaded (or tried) from this plugin library.
    Plugin(PathBuf),
    /// A known backend that is neither linked nor found as a plugin.
    NotFound,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Linked => f.write_str("linked"),
            Origin::Plugin(path) => write!(f, "plugin {}", path.display()),
            Origin::NotFound => f.write_str("not found"),
        }
    }
}

/// One row of `devices()`.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceInfo {
    /// The target name (for a plugin that failed to load, the name its file announces).
    pub name: String,
    pub origin: Origin,
    pub available: bool,
    /// Why the backend is unavailable (`None` when it is available).
    pub reason: Option<String>,
    /// What the backend can do (`None` when it is unavailable).
    pub capabilities: Option<Capabilities>,
    /// A plugin's own version (`None` for linked backends).
    pub version: Option<String>,
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.origin)?;
        if let Some(v) = &self.version {
            write!(f, " version {v}")?;
        }
        match (&self.reason, &self.capabilities) {
            (None, Some(c)) => write!(
                f,
                ": available, {} device(s), float64 {}",
                c.device_count,
                if c.float64 { "yes" } else { "no" }
            ),
            (None, None) => write!(f, ": available"),
            (Some(reason), _) => write!(f, ": unavailable ({reason})"),
        }
    }
}

/// What happened to one backend source.
#[derive(Clone, Debug)]
pub enum Status {
    Available(Arc<dyn Backend>),
    /// Loaded or linked, but cannot run here.
    Unavailable(Unavailable),
    /// The plugin library could not be loaded.
    LoadFailed(LoadError),
}

/// One backend source of a [`Registry`].
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: String,
    pub origin: Origin,
    pub version: Option<String>,
    pub status: Status,
    /// The plugin file, identified (`None` for linked backends and unreadable paths).
    file: Option<FileId>,
}

impl Entry {
    pub fn backend(&self) -> Option<&Arc<dyn Backend>> {
        match &self.status {
            Status::Available(b) => Some(b),
            _ => None,
        }
    }

    pub fn info(&self) -> DeviceInfo {
        let (available, reason, capabilities) = match &self.status {
            Status::Available(b) => (true, None, Some(b.capabilities())),
            Status::Unavailable(u) => (false, Some(u.to_string()), None),
            Status::LoadFailed(e) => (false, Some(e.to_string()), None),
        };
        DeviceInfo {
            name: self.name.clone(),
            origin: self.origin.clone(),
            available,
            reason,
            capabilities,
            version: self.version.clone(),
        }
    }
}

/// What makes two paths the same plugin file: the canonical path (symbolic links and other
/// spellings resolved) or, on Unix, the device and inode (hard links).
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileId {
    canonical: PathBuf,
    #[cfg(unix)]
    inode: (u64, u64),
}

impl FileId {
    fn of(path: &Path) -> Option<FileId> {
        let canonical = std::fs::canonicalize(path).ok()?;
        #[cfg(unix)]
        let inode = {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(&canonical).ok()?;
            (m.dev(), m.ino())
        };
        Some(FileId {
            canonical,
            #[cfg(unix)]
            inode,
        })
    }

    fn same(&self, other: &FileId) -> bool {
        #[cfg(unix)]
        if self.inode == other.inode {
            return true;
        }
        self.canonical == other.canonical
    }
}

/// Why no backend answers to a target name.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ResolveError {
    /// Neither linked nor found as a plugin (UN1). `plugins` lists plugin files of that name
    /// that failed to load, with their errors.
    #[error(
        "{target} target is unavailable in this build{}",
        describe_failures(plugins)
    )]
    NotFound {
        target: String,
        plugins: Vec<String>,
    },
    /// Present, but every source is unavailable; the first reason is given.
    #[error("{target} target is unavailable on this host: {reason}")]
    Unavailable { target: String, reason: Unavailable },
}

fn describe_failures(failures: &[String]) -> String {
    if failures.is_empty() {
        String::new()
    } else {
        format!(" ({})", failures.join("; "))
    }
}

/// A device of a backend kind: the address of the kind's first backend, and the ordinal.
type DeviceKey = (usize, usize);

/// The backends of a process: linked ones and loaded plugins. Plugins can be added while it
/// is in use ([`Registry::load_plugin`]); every other method reads a consistent snapshot.
#[derive(Debug)]
pub struct Registry {
    search: PluginSearch,
    entries: RwLock<Vec<Entry>>,
    /// Held for the whole of a [`Registry::load_plugin`] call, so that two threads loading
    /// one file load it once (the entries lock is held only to read or publish entries, never
    /// while plugin code runs).
    loading: Mutex<()>,
    /// The backends of devices other than a kind's first ([`Registry::device`]), by the
    /// address of the first device's backend and the ordinal: each is opened once.
    devices: Mutex<Vec<(DeviceKey, Arc<dyn Backend>)>>,
}

impl Clone for Registry {
    /// A registry with the same search and the same entries (the backends are shared).
    fn clone(&self) -> Registry {
        Registry {
            search: self.search.clone(),
            entries: RwLock::new(self.entries()),
            loading: Mutex::new(()),
            devices: Mutex::new(
                self.devices
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone(),
            ),
        }
    }
}

impl Registry {
    /// The registry of this process, built on first use from the linked backends and the
    /// plugins of [`PluginSearch::from_env`].
    pub fn global() -> &'static Registry {
        static GLOBAL: OnceLock<Registry> = OnceLock::new();
        GLOBAL.get_or_init(|| Registry::discover(&PluginSearch::from_env()))
    }

    /// Builds a registry: every linked backend, then every plugin of `search` (each file
    /// once, however many folders or links lead to it).
    pub fn discover(search: &PluginSearch) -> Registry {
        let mut entries = Vec::new();
        let mut linked: Vec<&LinkedBackend> = linked_backends().collect();
        linked.sort_by_key(|l| order_key(l.name));
        for l in linked {
            entries.push(Entry {
                name: l.name.to_string(),
                origin: Origin::Linked,
                version: None,
                status: match l.open() {
                    Ok(b) => Status::Available(b),
                    Err(u) => Status::Unavailable(u),
                },
                file: None,
            });
        }
        let mut seen: Vec<FileId> = Vec::new();
        for path in search.candidates() {
            let file = FileId::of(&path);
            if let Some(id) = &file {
                if seen.iter().any(|s| s.same(id)) {
                    continue;
                }
                seen.push(id.clone());
            }
            entries.push(Self::plugin_entry(&path, file));
        }
        Registry {
            search: search.clone(),
            entries: RwLock::new(entries),
            loading: Mutex::new(()),
            devices: Mutex::new(Vec::new()),
        }
    }

    fn plugin_entry(path: &Path, file: Option<FileId>) -> Entry {
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(plugin_name_of_file)
            .unwrap_or("?")
            .to_string();
        match Plugin::load(path) {
            Err(e) => Entry {
                name: file_name,
                origin: Origin::Plugin(path.to_path_buf()),
                version: None,
                status: Status::LoadFailed(e),
                file,
            },
            Ok(plugin) => Entry {
                name: plugin.name().to_string(),
                origin: Origin::Plugin(path.to_path_buf()),
                version: Some(plugin.version().to_string()),
                status: match plugin.open() {
                    Ok(b) => Status::Available(Arc::new(b)),
                    Err(u) => Status::Unavailable(u),
                },
                file,
            },
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Entry>> {
        // Entries are replaced whole under the lock, so a panic elsewhere cannot leave them
        // half-written: a poisoned lock still holds a consistent list.
        self.entries.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Loads the plugin library at `path` (any file name), opens its backend and registers it
    /// under the name the plugin declares, after the sources registered before it; returns
    /// its row of [`Registry::devices`]. A plugin that loads but cannot run here is registered
    /// too and comes back with `available: false` and the reason.
    ///
    /// Loading a file this registry already has (the same canonical path, or on Unix the
    /// same file through a hard link) loads nothing and returns the existing entry's row. A
    /// file that failed to load is not registered (the error says why); one that failed
    /// during discovery is tried again, and replaced by the result.
    pub fn load_plugin(
        &self,
        path: impl AsRef<Path>,
    ) -> std::result::Result<DeviceInfo, LoadError> {
        let path = path.as_ref();
        let _loading = self.loading.lock().unwrap_or_else(|e| e.into_inner());
        let file = FileId::of(path);
        let existing = file.as_ref().and_then(|id| {
            self.read()
                .iter()
                .position(|e| e.file.as_ref().is_some_and(|f| f.same(id)))
        });
        if let Some(i) = existing {
            let entries = self.read();
            if let Some(entry) = entries.get(i) {
                if !matches!(entry.status, Status::LoadFailed(_)) {
                    return Ok(entry.info());
                }
            }
        }
        // Plugin code (the root module's constructor, `open`) runs here, outside the entries
        // lock, so readers are never blocked by it.
        let entry = Self::plugin_entry(path, file);
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        let result = match &entry.status {
            Status::LoadFailed(e) => Err(e.clone()),
            _ => Ok(entry.info()),
        };
        match existing.and_then(|i| entries.get_mut(i)) {
            Some(slot) => *slot = entry,
            None if result.is_ok() => entries.push(entry),
            None => {}
        }
        result
    }

    /// Every source, in registration order.
    pub fn entries(&self) -> Vec<Entry> {
        self.read().clone()
    }

    pub fn search(&self) -> &PluginSearch {
        &self.search
    }

    /// The rows of `devices()`: every source in the order `cpu`, `cuda`, `mlx`, then other
    /// names alphabetically (linked before plugins within a name), plus a row for each known
    /// backend that no source provides.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        let entries = self.read();
        let mut rows: Vec<(usize, DeviceInfo)> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, e.info()))
            .collect();
        for known in KNOWN_BACKENDS {
            if !entries.iter().any(|e| e.name == known) {
                rows.push((
                    usize::MAX,
                    DeviceInfo {
                        name: known.to_string(),
                        origin: Origin::NotFound,
                        available: false,
                        reason: Some(self.not_found_reason(known)),
                        capabilities: None,
                        version: None,
                    },
                ));
            }
        }
        rows.sort_by(|(ia, a), (ib, b)| {
            order_key(&a.name).cmp(&order_key(&b.name)).then(ia.cmp(ib))
        });
        rows.into_iter().map(|(_, row)| row).collect()
    }

    fn folder_names(&self) -> Vec<String> {
        self.search
            .folders
            .iter()
            .map(|f| f.display().to_string())
            .collect()
    }

    fn not_found_reason(&self, name: &str) -> String {
        format!(
            "not linked into this build, and no {} in the plugin folders [{}]",
            plugin_file_name(name),
            self.folder_names().join(", ")
        )
    }

    /// What makes `target` available, in words, for the message of an unavailable target
    /// (UN1): the plugin file to install, the folders this registry searched, the variable
    /// that lists them, and loading by path. For example: `install the plugin library
    /// libquabla_toy_plugin.so in a folder of QUABLA_PLUGIN_PATH (searched: /opt/plugins),
    /// which is read when the program first uses a device, or load it by path with
    /// load_plugin`.
    pub fn availability_advice(&self, target: &str) -> String {
        let folders = self.folder_names();
        let searched = if folders.is_empty() {
            format!("{PLUGIN_PATH_VAR} names no folder now")
        } else {
            format!("searched: {}", folders.join(", "))
        };
        format!(
            "install the plugin library {} in a folder of {PLUGIN_PATH_VAR} ({searched}), \
             which is read when the program first uses a device, or load it by path with \
             load_plugin",
            plugin_file_name(target)
        )
    }

    /// The backend for a target name (any registered name, linked or plugin): the first
    /// available source (linked, then plugins in registration order).
    pub fn backend(&self, target: &str) -> std::result::Result<Arc<dyn Backend>, ResolveError> {
        let entries = self.read();
        let sources: Vec<&Entry> = entries.iter().filter(|e| e.name == target).collect();
        if let Some(b) = sources.iter().find_map(|e| e.backend()) {
            return Ok(b.clone());
        }
        if let Some(reason) = sources.iter().find_map(|e| match &e.status {
            Status::Unavailable(u) => Some(u.clone()),
            _ => None,
        }) {
            return Err(ResolveError::Unavailable {
                target: target.to_string(),
                reason,
            });
        }
        Err(ResolveError::NotFound {
            target: target.to_string(),
            plugins: sources
                .iter()
                .filter_map(|e| match &e.status {
                    Status::LoadFailed(err) => Some(err.to_string()),
                    _ => None,
                })
                .collect(),
        })
    }
}

impl Registry {
    /// The backend of device `ordinal` of `first`'s kind, where `first` is a backend this
    /// registry resolved ([`Registry::backend`]): `first` itself for ordinal 0, otherwise the
    /// backend [`Backend::open_device`] returns, opened once and kept (so every
    /// `jit(f).device("cuda:1")` shares one device, its memory and its transfer counts).
    /// Errors: `Unsupported` (op `device ordinal`) for an ordinal past
    /// `capabilities().device_count`, without asking the backend, and whatever opening the
    /// device returns.
    pub fn device(&self, first: &Arc<dyn Backend>, ordinal: usize) -> Result<Arc<dyn Backend>> {
        if ordinal == 0 {
            return Ok(first.clone());
        }
        let count = first.capabilities().device_count;
        if ordinal >= count {
            return Err(BackendError::Unsupported {
                op: "device ordinal".into(),
                device: format!("{}:{ordinal}", first.name()),
                reason: format!(
                    "the {} backend has {count} device(s), numbered from 0",
                    first.name()
                ),
            });
        }
        let key = (Arc::as_ptr(first) as *const () as usize, ordinal);
        // Held while the device opens, so that two threads asking for it open it once.
        let mut opened = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, backend)) = opened.iter().find(|(k, _)| *k == key) {
            return Ok(backend.clone());
        }
        let backend = match catch_unwind(AssertUnwindSafe(|| first.open_device(ordinal))) {
            Ok(result) => result?,
            Err(payload) => {
                return Err(BackendError::Device {
                    device: format!("{}:{ordinal}", first.name()),
                    message: format!(
                        "opening the device panicked: {}",
                        crate::abi::panic_message(payload.as_ref())
                    ),
                })
            }
        };
        opened.push((key, backend.clone()));
        Ok(backend)
    }
}

/// Sort key of a backend name: the known backends first, in their order, then the others.
fn order_key(name: &str) -> (usize, String) {
    let rank = KNOWN_BACKENDS
        .iter()
        .position(|k| *k == name)
        .unwrap_or(KNOWN_BACKENDS.len());
    (rank, name.to_string())
}

/// The rows of `devices()` for this process ([`Registry::global`]).
pub fn devices() -> Vec<DeviceInfo> {
    Registry::global().devices()
}

/// Loads a plugin library into this process's registry ([`Registry::load_plugin`] on
/// [`Registry::global`]).
pub fn load_plugin(path: impl AsRef<Path>) -> std::result::Result<DeviceInfo, LoadError> {
    Registry::global().load_plugin(path)
}
