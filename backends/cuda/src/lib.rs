//! The CUDA backend: plans lowered to NVRTC-compiled kernels, cuBLAS and cuSOLVER calls, run on
//! device memory of its own.
//!
//! The crate builds on every machine: `cudarc` loads the CUDA libraries when the backend is
//! opened (its `dynamic-loading` mode), after [`discovery`] has found them and opened each by
//! full path. Opening probes the driver (`libcuda`, `cuInit`, at least one device), NVRTC,
//! cuBLAS and cuSOLVER, and reports the first missing piece as the reason the backend is
//! unavailable (errors.md UN5 names the library; without a driver the reason says "no CUDA
//! driver"). `cudarc` panics when a library it needs is missing, so nothing of CUDA is called
//! before that probe, and every entry point catches panics: none reaches the caller or crosses
//! the plugin boundary.
//!
//! The parts, each usable without a GPU except the runtime:
//!
//! - [`program`]: the lowered form of a plan (buffers, kernels, steps);
//! - [`lower`]: plan to program — every op lowered, or refused at compile time naming it;
//! - [`codegen`]: the CUDA C of the kernels;
//! - [`coverage`]: the op × dtype table of what is lowered, checked against a file;
//! - [`nvrtc`] and [`cache`]: compiling the source for the device's architecture, cached on
//!   disk;
//! - [`runtime`]: device memory, transfers, the executor of programs, cuBLAS and cuSOLVER;
//! - [`collective`]: NCCL collectives on device memory (data parallelism).
//!
//! `docs/cuda.md` is the user's guide (installation, how libraries are found, what is lowered
//! how, precision).

pub mod cache;
pub mod codegen;
pub mod collective;
pub mod coverage;
pub mod discovery;
pub mod exec;
pub mod lower;
pub mod nvrtc;
pub mod program;
pub mod runtime;

use discovery::Library;
use quabla_backend::{
    Backend, BackendError, Bound, Capabilities, Executable, HostTensor, Memory, Precision,
    RunFailure, Transfers, Unavailable,
};
use quabla_ir::{DType, Plan, Shape};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

quabla_backend::register_backend!("cuda", || Ok(Arc::new(CudaBackend::open()?)));

/// The backend name, `jit(f).device("cuda")`.
pub const NAME: &str = "cuda";

/// The CUDA backend of one device of the host (`cuda:0` is the backend registered as `cuda`;
/// [`Backend::open_device`] opens the others), and how many devices there are.
#[derive(Debug)]
pub struct CudaBackend {
    /// `"cuda"` for device 0, `"cuda:N"` for the others (buffers of one device are refused
    /// by another because their backend names differ).
    name: String,
    device: Arc<runtime::Device>,
    device_count: usize,
}

impl CudaBackend {
    /// Finds the libraries, initializes the driver and opens device 0; the error says what is
    /// missing.
    pub fn open() -> Result<CudaBackend, Unavailable> {
        match catch_unwind(AssertUnwindSafe(|| -> Result<CudaBackend, Unavailable> {
            let device_count = probe()?;
            let device = runtime::Device::open(0)?;
            Ok(CudaBackend {
                name: NAME.to_string(),
                device,
                device_count,
            })
        })) {
            Ok(result) => result,
            Err(payload) => Err(Unavailable::new(format!(
                "opening the CUDA backend panicked: {}",
                quabla_backend::abi::panic_message(payload.as_ref())
            ))),
        }
    }

    /// The device the backend runs on.
    pub fn device(&self) -> &Arc<runtime::Device> {
        &self.device
    }

    /// How many devices the driver lists.
    pub fn driver_device_count(&self) -> usize {
        self.device_count
    }
}

/// Checks that `cudarc` finds a library opened by `discovery` under one of its names.
fn check_present(lib: Library, present: bool) -> Result<(), Unavailable> {
    if present {
        Ok(())
    } else {
        Err(Unavailable::missing_library(
            lib.name(),
            format!(
                "the library was opened, but not under a name the CUDA bindings look for ({})",
                lib.file_names().join(", ")
            ),
        ))
    }
}

/// Finds and opens every library, initializes the driver, and counts the devices.
pub fn probe() -> Result<usize, Unavailable> {
    discovery::ensure(Library::Driver).map_err(|u| {
        Unavailable::missing_library(
            u.library.unwrap_or_default(),
            format!("no CUDA driver: {}", u.reason),
        )
    })?;
    // SAFETY: `is_culib_present` only tries to open the library by its names.
    check_present(Library::Driver, unsafe {
        cudarc::driver::sys::is_culib_present()
    })?;
    cudarc::driver::result::init().map_err(|e| {
        Unavailable::new(format!(
            "the CUDA driver did not initialize ({e:?}): no usable CUDA device or driver"
        ))
    })?;
    let count = cudarc::driver::result::device::get_count()
        .map_err(|e| Unavailable::new(format!("the CUDA driver lists no devices: {e:?}")))?;
    if count <= 0 {
        return Err(Unavailable::new("the CUDA driver found no device"));
    }
    discovery::ensure(Library::Nvrtc)?;
    // SAFETY: as above.
    check_present(Library::Nvrtc, unsafe {
        cudarc::nvrtc::sys::is_culib_present()
    })?;
    discovery::ensure(Library::CublasLt)?;
    discovery::ensure(Library::Cublas)?;
    // SAFETY: as above.
    check_present(Library::Cublas, unsafe {
        cudarc::cublas::sys::is_culib_present()
    })?;
    discovery::ensure(Library::Cusolver)?;
    // SAFETY: as above.
    check_present(Library::Cusolver, unsafe {
        cudarc::cusolver::sys::is_culib_present()
    })?;
    Ok(count as usize)
}

/// Runs `f`, turning a panic into a `Device` error (a panic never leaves the backend).
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, BackendError>) -> Result<T, BackendError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => Err(BackendError::Device {
            device: NAME.into(),
            message: format!(
                "{what} panicked: {}",
                quabla_backend::abi::panic_message(payload.as_ref())
            ),
        }),
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &str {
        &self.name
    }

    /// `float64: false`: float64 plans run in float32 unless compiled at
    /// `Precision::Float64` (numerics.md §1.6). `device_count`: the devices the driver lists.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            float64: false,
            device_count: self.device_count,
        }
    }

    /// Device `ordinal`: its own context, stream, library handles and memory.
    fn open_device(&self, ordinal: usize) -> quabla_backend::Result<Arc<dyn Backend>> {
        let name = format!("{NAME}:{ordinal}");
        guarded("opening a device", || {
            let device = runtime::Device::open(ordinal).map_err(|u| BackendError::Device {
                device: name.clone(),
                message: u.to_string(),
            })?;
            Ok(Arc::new(CudaBackend {
                name: name.clone(),
                device,
                device_count: self.device_count,
            }) as Arc<dyn Backend>)
        })
    }

    fn compile(&self, plan: &Plan) -> quabla_backend::Result<Arc<dyn Executable>> {
        self.compile_with(plan, Precision::Reference)
    }

    fn compile_with(
        &self,
        plan: &Plan,
        precision: Precision,
    ) -> quabla_backend::Result<Arc<dyn Executable>> {
        guarded("compiling a plan", || {
            let program = lower::lower(plan, precision)?;
            let loaded = self.device.load(program)?;
            Ok(Arc::new(CudaExecutable {
                plan: plan.clone(),
                loaded,
            }) as Arc<dyn Executable>)
        })
    }

    fn upload(&self, tensor: &HostTensor) -> quabla_backend::Result<Memory> {
        guarded("an upload", || {
            Ok(Memory::Backend(Arc::new(self.device.upload(tensor)?)))
        })
    }

    fn download(&self, memory: &Memory) -> quabla_backend::Result<HostTensor> {
        guarded("a download", || {
            let m = memory
                .backend::<runtime::CudaMemory>()
                .ok_or_else(|| quabla_backend::foreign_memory(NAME))?;
            self.device.download(m)
        })
    }

    fn allocate(&self, dtype: DType, shape: &Shape) -> quabla_backend::Result<Memory> {
        guarded("an allocation", || {
            Ok(Memory::Backend(Arc::new(
                self.device.allocate(dtype, shape)?,
            )))
        })
    }

    fn transfers(&self) -> Transfers {
        self.device.transfers()
    }

    /// NCCL on this backend's device.
    fn collectives(&self) -> Option<Arc<dyn quabla_backend::collectives::Collectives>> {
        Some(Arc::new(collective::NcclCollectives::new(
            self.device.clone(),
        )))
    }
}

/// A plan compiled for the device.
#[derive(Debug)]
struct CudaExecutable {
    plan: Plan,
    loaded: runtime::Loaded,
}

impl Executable for CudaExecutable {
    /// Uploads each input, runs, downloads each output (every copy counted).
    fn run(&self, inputs: &[HostTensor]) -> quabla_backend::Result<Vec<HostTensor>> {
        guarded("a run", || {
            quabla_backend::check_inputs(&self.plan, inputs)?;
            let device = self.loaded.device();
            let mut bound = Vec::with_capacity(inputs.len());
            for t in inputs {
                bound.push(Bound {
                    memory: Memory::Backend(Arc::new(device.upload(t)?)),
                    donated: false,
                });
            }
            let outputs = self.loaded.run(&bound)?;
            outputs
                .iter()
                .map(|m| {
                    let m = m
                        .backend::<runtime::CudaMemory>()
                        .ok_or_else(|| quabla_backend::foreign_memory(NAME))?;
                    device.download(m)
                })
                .collect()
        })
    }

    fn report(&self) -> String {
        self.loaded.report()
    }

    /// Runs on device memory. The inputs are only read during the run (a panic is caught and
    /// reported), so a failed run gives every one of them back as it was; after a run that
    /// succeeded, donated inputs nobody else holds are reused for later runs' outputs.
    fn run_resident(&self, inputs: Vec<Bound>) -> Result<Vec<Memory>, RunFailure> {
        let outcome = guarded("a run", || self.loaded.run(&inputs));
        match outcome {
            Ok(outputs) => {
                self.loaded.recycle(inputs);
                Ok(outputs)
            }
            Err(error) => Err(RunFailure { error, inputs }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_reports_devices_or_why_not_without_panicking() {
        match CudaBackend::open() {
            Ok(backend) => {
                assert_eq!(
                    backend.capabilities().device_count,
                    backend.driver_device_count()
                );
                assert!(backend.driver_device_count() >= 1);
                assert_eq!(backend.name(), "cuda");
            }
            Err(why) => {
                assert!(!why.reason.is_empty());
                if let Some(library) = &why.library {
                    assert!(
                        [
                            "libcuda",
                            "libnvrtc",
                            "libcublas",
                            "libcublasLt",
                            "libcusolver"
                        ]
                        .contains(&library.as_str()),
                        "{why}"
                    );
                }
                if why.library.as_deref() == Some("libcuda") {
                    assert!(why.reason.contains("no CUDA driver"), "{why}");
                }
            }
        }
    }
}
