//! The backend registry: which backends this process can use, where each comes from, and why
//! an unusable one is unusable.
//!
//! Two kinds of backends meet here:
//!
//! - **Linked** backends are compiled into the program and announce themselves with
//!   [`crate::register_backend!`] (an `inventory` submission), so no central list names them:
//!   linking the crate is enough. The CPU reference backend is always linked.
//! - **Plugins** are dynamic libraries named `quabla_<name>_plugin` (with the platform's prefix
//!   and suffix, see [`plugin_file_name`]) found in the folders of the `QUABLA_PLUGIN_PATH`
//!   environment variable (separated like `PATH`) and in the folder of the running executable,
//!   and in no other place (not in subfolders, not through the dynamic loader's search path).
//!   They are loaded through `abi_stable`, which checks the interface version and the layout
//!   of every type of [`crate::abi`] before anything in the library is called.
//!
//! Loading a plugin only opens its library and asks it to open its backend (which for a device
//! backend means loading the driver library); no hardware is probed beyond that. Libraries
//! stay loaded until the process ends, as `abi_stable` requires.
//!
//! A name can be provided more than once (the linked CPU backend and the CPU plugin both answer
//! to `"cpu"`). [`Registry::backend`] picks the first available one in this order: linked
//! backends, then plugins in search order.

use crate::abi::{
    BackendBox, BufferBox, BufferRef, ExecutableBox, PluginError, QuablaPluginRef,
    INTERFACE_VERSION,
};
use crate::{
    check_inputs, Backend, BackendError, Capabilities, Executable, HostTensor, Result, Unavailable,
};
use abi_stable::library::{lib_header_from_path, LibraryError};
use abi_stable::std_types::{RResult, RSlice};
use quabla_ir::Plan;
use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
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

/// Where plugins are looked for: an ordered list of folders.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PluginSearch {
    folders: Vec<PathBuf>,
}

impl PluginSearch {
    /// The folders of `QUABLA_PLUGIN_PATH`, in order, then the folder of the running
    /// executable.
    pub fn from_env() -> PluginSearch {
        let mut folders: Vec<PathBuf> = std::env::var_os(PLUGIN_PATH_VAR)
            .map(|v| {
                std::env::split_paths(&v)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        if let Some(dir) = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
        {
            folders.push(dir);
        }
        PluginSearch::folders(folders)
    }

    /// Exactly these folders, in order (a folder named twice is searched once).
    pub fn folders(folders: impl IntoIterator<Item = PathBuf>) -> PluginSearch {
        let mut unique: Vec<PathBuf> = Vec::new();
        for folder in folders {
            if !unique.contains(&folder) {
                unique.push(folder);
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
    /// The file is not a loadable library (or a library it needs is missing).
    #[error("{}: cannot be opened as a dynamic library: {message}", path.display())]
    Open { path: PathBuf, message: String },
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
    #[error(
        "{}: the layout of the plugin interface differs from this build's (same interface \
         version {INTERFACE_VERSION}): {message}",
        path.display()
    )]
    Layout { path: PathBuf, message: String },
    /// Any other failure while loading.
    #[error("{}: {message}", path.display())]
    Other { path: PathBuf, message: String },
}

impl LoadError {
    pub fn path(&self) -> &Path {
        match self {
            LoadError::Open { path, .. }
            | LoadError::NotAPlugin { path, .. }
            | LoadError::InterfaceVersion { path, .. }
            | LoadError::AbiStable { path, .. }
            | LoadError::Layout { path, .. }
            | LoadError::Other { path, .. } => path,
        }
    }

    fn from_library(path: &Path, e: LibraryError) -> LoadError {
        let path = path.to_path_buf();
        match e {
            LibraryError::OpenError { err, .. } => LoadError::Open {
                path,
                message: err.to_string(),
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
            LibraryError::AbiInstability(_) => LoadError::Layout {
                path,
                message: first_lines(&e.to_string(), 12),
            },
            other => LoadError::Other {
                path,
                message: other.to_string(),
            },
        }
    }
}

fn first_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= n {
        text.trim_end().to_string()
    } else {
        format!(
            "{}\n... ({} more lines)",
            lines[..n].join("\n"),
            lines.len() - n
        )
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
    /// Loads the library at `path` and checks it: that it is a Quabla plugin, of this
    /// interface version, with the interface's layout. Nothing of the plugin runs before the
    /// checks pass (apart from the library's own initializers, as for any dynamic library).
    pub fn load(path: &Path) -> std::result::Result<Plugin, LoadError> {
        let header = lib_header_from_path(path).map_err(|e| LoadError::from_library(path, e))?;
        let module = header
            .init_root_module::<QuablaPluginRef>()
            .map_err(|e| LoadError::from_library(path, e))?;
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
            }),
        })
    }
}

struct PluginInner {
    name: String,
    path: &'static Path,
    capabilities: Capabilities,
    backend: BackendBox,
}

/// A backend opened from a plugin, usable like any linked [`Backend`]: plans are encoded in
/// the wire format, host inputs uploaded into plugin buffers, and outputs downloaded.
#[derive(Clone)]
pub struct PluginBackend {
    inner: Arc<PluginInner>,
}

impl fmt::Debug for PluginBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginBackend")
            .field("name", &self.inner.name)
            .field("path", &self.inner.path)
            .finish()
    }
}

impl PluginBackend {
    pub fn path(&self) -> &Path {
        self.inner.path
    }

    /// Compiles a plan into the plugin's executable type.
    pub fn compile_plan(&self, plan: &Plan) -> Result<PluginExecutable> {
        let bytes = quabla_ir::wire::encode_plan(plan).map_err(|e| BackendError::Device {
            device: self.inner.name.clone(),
            message: format!("the plan cannot be sent to the plugin: {e}"),
        })?;
        let exe = self
            .inner
            .backend
            .compile(RSlice::from_slice(&bytes))
            .into_result()
            .map_err(|e| e.into_backend(&self.inner.name))?;
        Ok(PluginExecutable {
            backend: self.inner.clone(),
            plan: plan.clone(),
            exe,
        })
    }

    /// Copies host data into a buffer of the plugin.
    pub fn upload(&self, tensor: &HostTensor) -> Result<PluginBuffer> {
        upload(&self.inner, tensor)
    }
}

fn upload(inner: &Arc<PluginInner>, tensor: &HostTensor) -> Result<PluginBuffer> {
    let abi = crate::abi::AbiHostTensor::from_host(tensor);
    let buffer = inner
        .backend
        .upload(&abi)
        .into_result()
        .map_err(|e| e.into_backend(&inner.name))?;
    Ok(PluginBuffer {
        backend: inner.clone(),
        buffer,
    })
}

impl Backend for PluginBackend {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities.clone()
    }

    fn compile(&self, plan: &Plan) -> Result<Arc<dyn Executable>> {
        Ok(Arc::new(self.compile_plan(plan)?))
    }
}

/// A plan compiled by a plugin.
pub struct PluginExecutable {
    backend: Arc<PluginInner>,
    plan: Plan,
    exe: ExecutableBox,
}

impl fmt::Debug for PluginExecutable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginExecutable")
            .field("backend", &self.backend.name)
            .finish_non_exhaustive()
    }
}

impl PluginExecutable {
    /// Runs on buffers of the same plugin, leaving the outputs in the plugin's buffers.
    pub fn run_buffers(&self, inputs: &[PluginBuffer]) -> Result<Vec<PluginBuffer>> {
        let name = &self.backend.name;
        let borrowed: Vec<BufferRef<'_>> =
            inputs.iter().map(|b| b.buffer.sabi_reborrow()).collect();
        let result = self.exe.run(RSlice::from_slice(&borrowed)).into_result();
        let outputs = result.map_err(|e| e.into_backend(name))?;
        Ok(outputs
            .into_iter()
            .map(|buffer| PluginBuffer {
                backend: self.backend.clone(),
                buffer,
            })
            .collect())
    }
}

impl Executable for PluginExecutable {
    fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_inputs(&self.plan, inputs)?;
        let buffers = inputs
            .iter()
            .map(|t| upload(&self.backend, t))
            .collect::<Result<Vec<_>>>()?;
        let outputs = self.run_buffers(&buffers)?;
        let expected = self.plan.output_types();
        if outputs.len() != expected.len() {
            return Err(BackendError::Device {
                device: self.backend.name.clone(),
                message: format!(
                    "the plugin returned {} outputs for a plan with {}",
                    outputs.len(),
                    expected.len()
                ),
            });
        }
        outputs
            .iter()
            .zip(expected)
            .enumerate()
            .map(|(i, (buffer, ty))| {
                let host = buffer.download()?;
                if host.dtype() != ty.dtype || host.shape != ty.shape {
                    return Err(BackendError::Device {
                        device: self.backend.name.clone(),
                        message: format!(
                            "the plugin returned {}{} for output {i}, which is {}{}",
                            host.dtype().name(),
                            host.shape,
                            ty.dtype.name(),
                            ty.shape
                        ),
                    });
                }
                Ok(host)
            })
            .collect()
    }
}

/// A buffer owned by a plugin.
pub struct PluginBuffer {
    backend: Arc<PluginInner>,
    buffer: BufferBox,
}

impl fmt::Debug for PluginBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginBuffer")
            .field("backend", &self.backend.name)
            .field("type", &self.buffer.tensor_type())
            .finish()
    }
}

impl PluginBuffer {
    /// Copies the buffer to the host, checking what the plugin returns.
    pub fn download(&self) -> Result<HostTensor> {
        let name = &self.backend.name;
        let abi = self
            .buffer
            .download()
            .into_result()
            .map_err(|e| e.into_backend(name))?;
        abi.to_host().map_err(|message| BackendError::Device {
            device: name.clone(),
            message: format!("the plugin returned invalid host data: {message}"),
        })
    }
}

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

/// The backends of a process: linked ones and loaded plugins.
#[derive(Clone, Debug)]
pub struct Registry {
    search: PluginSearch,
    entries: Vec<Entry>,
}

impl Registry {
    /// The registry of this process, built on first use from the linked backends and the
    /// plugins of [`PluginSearch::from_env`].
    pub fn global() -> &'static Registry {
        static GLOBAL: OnceLock<Registry> = OnceLock::new();
        GLOBAL.get_or_init(|| Registry::discover(&PluginSearch::from_env()))
    }

    /// Builds a registry: every linked backend, then every plugin of `search`.
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
            });
        }
        let mut seen: Vec<PathBuf> = Vec::new();
        for path in search.candidates() {
            let canonical = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
            if seen.contains(&canonical) {
                continue;
            }
            seen.push(canonical);
            entries.push(Self::plugin_entry(&path));
        }
        Registry {
            search: search.clone(),
            entries,
        }
    }

    fn plugin_entry(path: &Path) -> Entry {
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
            },
            Ok(plugin) => Entry {
                name: plugin.name().to_string(),
                origin: Origin::Plugin(path.to_path_buf()),
                version: Some(plugin.version().to_string()),
                status: match plugin.open() {
                    Ok(b) => Status::Available(Arc::new(b)),
                    Err(u) => Status::Unavailable(u),
                },
            },
        }
    }

    /// Every source, in discovery order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn search(&self) -> &PluginSearch {
        &self.search
    }

    /// The rows of `devices()`: every source in the order `cpu`, `cuda`, `mlx`, then other
    /// names alphabetically (linked before plugins within a name), plus a row for each known
    /// backend that no source provides.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        let mut rows: Vec<(usize, DeviceInfo)> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, e.info()))
            .collect();
        for known in KNOWN_BACKENDS {
            if !self.entries.iter().any(|e| e.name == known) {
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

    fn not_found_reason(&self, name: &str) -> String {
        let folders: Vec<String> = self
            .search
            .folders
            .iter()
            .map(|f| f.display().to_string())
            .collect();
        format!(
            "not linked into this build, and no {} in the plugin folders [{}]",
            plugin_file_name(name),
            folders.join(", ")
        )
    }

    /// The backend for a target name: the first available source (linked, then plugins in
    /// search order).
    pub fn backend(&self, target: &str) -> std::result::Result<Arc<dyn Backend>, ResolveError> {
        let sources: Vec<&Entry> = self.entries.iter().filter(|e| e.name == target).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_file_names_round_trip() {
        for name in ["cpu", "cuda", "mlx", "my_dev"] {
            assert_eq!(plugin_name_of_file(&plugin_file_name(name)), Some(name));
        }
        assert_eq!(plugin_name_of_file("libquabla_cpu.rlib"), None);
        assert_eq!(
            plugin_name_of_file(&format!("{DLL_PREFIX}quabla__plugin{DLL_SUFFIX}")),
            None
        );
        assert_eq!(
            plugin_name_of_file(&format!("{DLL_PREFIX}serde_derive{DLL_SUFFIX}")),
            None
        );
    }

    #[test]
    fn search_lists_only_plugin_files_of_the_named_folders() {
        let root = std::env::temp_dir().join(format!("quabla-search-{}", std::process::id()));
        let inner = root.join("inner");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::write(root.join(plugin_file_name("b")), b"x").unwrap();
        std::fs::write(root.join(plugin_file_name("a")), b"x").unwrap();
        std::fs::write(root.join("notes.txt"), b"x").unwrap();
        std::fs::write(inner.join(plugin_file_name("c")), b"x").unwrap();
        let search = PluginSearch::folders([root.clone(), root.join("missing"), root.clone()]);
        assert_eq!(search.folder_list().len(), 2);
        assert_eq!(
            search.candidates(),
            vec![
                root.join(plugin_file_name("a")),
                root.join(plugin_file_name("b"))
            ]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_bogus_library_is_a_load_error_not_a_crash() {
        let root = std::env::temp_dir().join(format!("quabla-bogus-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let path = root.join(plugin_file_name("bogus"));
        std::fs::write(&path, b"this is not a library").unwrap();
        let err = Plugin::load(&path).unwrap_err();
        assert!(matches!(err, LoadError::Open { .. }), "{err:?}");
        assert_eq!(err.path(), path);
        let registry = Registry::discover(&PluginSearch::folders([root.clone()]));
        let row = registry
            .devices()
            .into_iter()
            .find(|d| d.name == "bogus")
            .unwrap();
        assert_eq!(row.origin, Origin::Plugin(path.clone()));
        assert!(!row.available);
        assert!(row.reason.unwrap().contains("cannot be opened"));
        match registry.backend("bogus") {
            Err(ResolveError::NotFound { plugins, .. }) => assert_eq!(plugins.len(), 1),
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn known_backends_without_a_source_are_listed_as_not_found() {
        let registry = Registry::discover(&PluginSearch::none());
        let rows = registry.devices();
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["cpu", "cuda", "mlx"]);
        assert!(rows
            .iter()
            .all(|r| r.origin == Origin::NotFound && !r.available));
        let err = registry.backend("mlx").unwrap_err();
        assert_eq!(err.to_string(), "mlx target is unavailable in this build");
    }
}
