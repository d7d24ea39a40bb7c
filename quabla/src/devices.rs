//! Devices: which backends this build can run on ([`devices`]), and the backend that serves a
//! `jit(f).device(..)` target ([`backend_for`]).
//!
//! This module is the facade's view of the registry of `quabla-backend`
//! ([`quabla_backend::registry`]): backends linked into the program (the CPU always; CUDA and
//! MLX when built with their features), plugins found in the folders of `QUABLA_PLUGIN_PATH`
//! (only those: never the executable's own folder), and plugins loaded by path with
//! [`load_plugin`]. It owns the translation of "no such backend" and of plugin load failures
//! into the errors of `spec/errors.md` (UN1, UN5, `Error::Device`); it never probes hardware
//! beyond what opening a backend does.

use crate::{Error, Result};
use quabla_backend::registry::{Registry, ResolveError};
use quabla_backend::Backend;

pub use quabla_backend::Transfers;
use std::sync::Arc;

pub use quabla_backend::registry::{DeviceInfo, Origin};

// The CPU reference backend registers itself with the registry when it is linked; nothing in
// the facade names it, so this keeps it linked. So does the CUDA backend with the `cuda`
// feature.
use quabla_cpu as _;
#[cfg(feature = "cuda")]
use quabla_cuda as _;

/// The backends of this process, in the order `cpu`, `cuda`, `mlx`, then others by name, each
/// with its origin (linked, or the plugin library it was loaded from), whether it is
/// available, and why not. Every known backend appears, unavailable ones included; a plugin
/// file that failed to load appears with its load error. `"cpu"` is always available.
///
/// ```
/// let rows = quabla::devices();
/// assert_eq!(rows[0].name, "cpu");
/// assert!(rows[0].available);
/// ```
pub fn devices() -> Vec<DeviceInfo> {
    Registry::global().devices()
}

/// The backend for a device string accepted by `jit(f).device(..)` (`"cpu"`, `"cuda"`,
/// `"cuda:N"`, `"mlx"`): the first available backend of that name, linked ones before
/// plugins; for `"<name>:N"` with N ≥ 1, that backend's device N (opened once, named
/// `"<name>:N"`, so buffers of one device are refused by another). Errors:
///
/// - UN1 (`Error::Unsupported`, `op` `"target"`) when no backend of that name is linked in or
///   loadable, or none can run here (with the reasons);
/// - UN5 (`op` the library name) when the backend is present but a library it needs could not
///   be loaded;
/// - `Error::InvalidArgument` for an ordinal beyond the backend's devices.
pub(crate) fn backend_for(device: &str) -> Result<Arc<dyn Backend>> {
    let (target, ordinal) = match device.split_once(':') {
        Some((t, n)) => (t, n.parse::<usize>().ok()),
        None => (device, None),
    };
    let registry = Registry::global();
    match registry.backend(target) {
        Ok(backend) => {
            let Some(n) = ordinal else {
                return Ok(backend);
            };
            let count = backend.capabilities().device_count;
            if n >= count {
                return Err(Error::invalid(format!(
                    "device {device:?} does not exist: the {target} backend has {count} \
                     device(s)"
                )));
            }
            Ok(registry.device(&backend, n)?)
        }
        Err(ResolveError::Unavailable { reason, .. }) => match reason.library {
            Some(library) => Err(Error::Unsupported {
                message: format!(
                    "{target}: required library {library} could not be loaded ({}); check the \
                     driver installation and LD_LIBRARY_PATH",
                    reason.reason
                ),
                op: library,
                device: Some(device.to_string()),
            }),
            None => Err(unavailable(target, device, &[reason.reason])),
        },
        Err(ResolveError::NotFound { plugins, .. }) => Err(unavailable(target, device, &plugins)),
    }
}

/// The copies between the host and the memory of `device`'s backend since it was opened:
/// uploads, downloads and their bytes. A backend whose memory is the host's (the CPU) moves
/// nothing and reports zeros; a device counts every copy, so a loop that should keep its values
/// resident (a `Trainer`'s steps) can be checked to move none.
///
/// ```
/// let t = quabla::transfers("cpu")?;
/// assert_eq!((t.uploads, t.downloads), (0, 0));
/// # Ok::<(), quabla::Error>(())
/// ```
pub fn transfers(device: &str) -> Result<Transfers> {
    Ok(backend_for(device)?.transfers())
}

/// Loads the backend plugin library at `path` into this process and returns its row of
/// [`devices`]; its backend is then a target of `jit(f).device(<its name>)`. Loading a file
/// already loaded returns its row again. A plugin that loads but cannot run here is
/// registered as unavailable (the row says why). Errors: `Error::Device` naming the path and
/// what is wrong (not a file, a truncated or foreign library, no plugin root module, another
/// plugin interface version, a panic while opening).
pub fn load_plugin(path: impl AsRef<std::path::Path>) -> Result<DeviceInfo> {
    Registry::global()
        .load_plugin(path.as_ref())
        .map_err(|e| Error::Device {
            device: "plugin".into(),
            message: e.to_string(),
        })
}

/// Whether a backend named `name` is linked in or was registered by a plugin (available or not).
pub(crate) fn is_registered(name: &str) -> bool {
    Registry::global().entries().iter().any(|e| e.name == name)
}

/// ` (loaded: toy, other)` naming the plugins' backends, or nothing when none is loaded.
pub(crate) fn plugin_names_hint() -> String {
    let mut names: Vec<String> = Registry::global()
        .entries()
        .into_iter()
        .filter(|e| !matches!(e.name.as_str(), "cpu" | "cuda" | "mlx"))
        .map(|e| e.name)
        .collect();
    names.dedup();
    if names.is_empty() {
        String::new()
    } else {
        format!(" (loaded: {})", names.join(", "))
    }
}

/// UN1: `<target> target is unavailable in this build`, what makes it available (the plugin
/// file, the folders searched, loading by path), and the details.
fn unavailable(target: &str, device: &str, details: &[String]) -> Error {
    let mut message = format!(
        "{target} target is unavailable in this build; {}",
        Registry::global().availability_advice(target)
    );
    if !details.is_empty() {
        message.push_str(&format!(" ({})", details.join("; ")));
    }
    Error::Unsupported {
        op: "target".into(),
        device: Some(device.to_string()),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_always_available() {
        let rows = devices();
        assert_eq!(rows[0].name, "cpu");
        assert_eq!(rows[0].origin, Origin::Linked);
        assert!(rows[0].available);
        assert_eq!(backend_for("cpu").unwrap().name(), "cpu");
    }

    #[test]
    fn a_missing_target_is_un1() {
        let err = backend_for("quabla_test_nowhere").unwrap_err();
        match err {
            Error::Unsupported {
                op,
                device,
                message,
            } => {
                assert_eq!(op, "target");
                assert_eq!(device.as_deref(), Some("quabla_test_nowhere"));
                assert!(
                    message.starts_with(
                        "quabla_test_nowhere target is unavailable in this build; install the \
                         plugin library libquabla_quabla_test_nowhere_plugin"
                    ),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_ordinal_beyond_the_devices_is_invalid() {
        assert!(matches!(
            backend_for("cpu:1"),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(backend_for("cpu:0").is_ok());
    }
}
