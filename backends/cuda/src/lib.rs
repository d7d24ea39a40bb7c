//! The CUDA backend: NVRTC-generated fused kernels, cuBLAS and cuSOLVER through `cudarc`.
//!
//! `cudarc` loads the CUDA libraries when the program runs (its `dynamic-loading` mode), so
//! this crate builds on machines without CUDA. Linking it registers the `"cuda"` target; when
//! the backend is opened it probes, in order, the driver library (`libcuda`), the driver
//! itself (`cuInit`, at least one device), NVRTC (`libnvrtc`) and cuBLAS (`libcublas`), and
//! reports the first missing piece as the reason it is unavailable (UN5 names the library).
//! Nothing of CUDA is touched before that probe: `cudarc`'s loaders panic when a library is
//! missing, so every call is guarded by its `is_culib_present` check and a caught panic.
//!
//! Lowering is still to come: on a host with CUDA the backend opens, reports its devices, and
//! rejects every plan at compile time with UN2 (`cuda cannot lower <op>: ...`), never falling
//! back to the host.

use quabla_backend::{Backend, BackendError, Capabilities, Executable, Unavailable};
use quabla_ir::{Op, Plan};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

quabla_backend::register_backend!("cuda", || Ok(Arc::new(CudaBackend::open()?)));

/// The CUDA backend of one host.
#[derive(Debug)]
pub struct CudaBackend {
    device_count: usize,
}

impl CudaBackend {
    /// Probes the CUDA libraries and the devices; the error says what is missing.
    pub fn open() -> Result<CudaBackend, Unavailable> {
        match catch_unwind(AssertUnwindSafe(probe)) {
            Ok(result) => result.map(|device_count| CudaBackend { device_count }),
            Err(payload) => Err(Unavailable::new(format!(
                "probing CUDA panicked: {}",
                quabla_backend::abi::panic_message(payload.as_ref())
            ))),
        }
    }
}

/// The names `cudarc` tries for a library, for the error message.
fn candidates(lib: &str) -> String {
    let mut names: Vec<String> = Vec::new();
    for name in cudarc::get_lib_name_candidates(lib) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names.join(", ")
}

fn probe() -> Result<usize, Unavailable> {
    // SAFETY: `is_culib_present` only tries to open the candidate library files.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Unavailable::missing_library(
            "libcuda",
            format!("none of {} could be opened", candidates("cuda")),
        ));
    }
    cudarc::driver::result::init()
        .map_err(|e| Unavailable::new(format!("the CUDA driver did not initialize: {e:?}")))?;
    let count = cudarc::driver::result::device::get_count()
        .map_err(|e| Unavailable::new(format!("the CUDA driver lists no devices: {e:?}")))?;
    if count <= 0 {
        return Err(Unavailable::new("the CUDA driver found no device"));
    }
    // SAFETY: as above.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(Unavailable::missing_library(
            "libnvrtc",
            format!("none of {} could be opened", candidates("nvrtc")),
        ));
    }
    // SAFETY: as above.
    if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        return Err(Unavailable::missing_library(
            "libcublas",
            format!("none of {} could be opened", candidates("cublas")),
        ));
    }
    Ok(count as usize)
}

impl Backend for CudaBackend {
    fn name(&self) -> &str {
        "cuda"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            float64: true,
            device_count: self.device_count,
        }
    }

    fn compile(&self, plan: &Plan) -> quabla_backend::Result<Arc<dyn Executable>> {
        let op = plan
            .graph()
            .nodes()
            .iter()
            .find(|n| !matches!(n.op, Op::Input { .. }))
            .map_or("the plan", |n| n.op.name());
        Err(BackendError::Unsupported {
            op: op.to_string(),
            device: "cuda".to_string(),
            reason: "the CUDA backend does not lower ops yet".to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_reports_devices_or_why_not_without_panicking() {
        match CudaBackend::open() {
            Ok(backend) => {
                assert!(backend.capabilities().device_count >= 1);
                assert_eq!(backend.name(), "cuda");
            }
            Err(why) => {
                assert!(!why.reason.is_empty());
                if let Some(library) = &why.library {
                    assert!(["libcuda", "libnvrtc", "libcublas"].contains(&library.as_str()));
                    assert!(why.reason.contains("could be opened"), "{why}");
                }
            }
        }
    }
}
