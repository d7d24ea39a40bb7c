//! The backend interface of Quabla: what every execution target (the CPU reference, CUDA, MLX,
//! third-party plugins) implements.
//!
//! # Why it is shaped this way
//!
//! Quabla compiles once and runs many times, so the interface has exactly two phases:
//! [`Backend::compile`] turns a frozen [`Plan`] into an [`Executable`] once per signature
//! (where a backend does its liveness analysis, fusion and kernel generation), and
//! [`Executable::run_resident`] runs it on storage the backend owns ([`Memory`]: host memory
//! for the CPU, device memory for a device) and leaves the outputs there. A backend receives
//! only frozen plans: every transform, every pass and every custom rule has been applied
//! before, so a backend is an interpreter or compiler of the closed op set of `quabla-ir` and
//! nothing else.
//!
//! Storage crosses between the host and a backend only when asked: [`Backend::upload`],
//! [`Backend::download`] and [`Backend::allocate`] make and read a backend's memory, every
//! copy is counted ([`Backend::transfers`]), and a run may reuse the storage of inputs the
//! caller donates ([`Bound::donated`]), so a training step can update its state where it
//! lives. The caller's handles on that memory, with their freed and donated states, are
//! [`Buffer`]s ([`buffer`]). [`Executable::run`] and [`Executable::run_borrowed`] are the
//! convenience on top for host tensors, and the fast path of backends whose memory is the
//! host's.
//!
//! The interface is deliberately narrow (plans in, typed storage in and out, typed errors) so
//! that it can be carried across a stable plugin ABI without change of meaning. Optional
//! capabilities are reported by [`Capabilities`]; an op a backend cannot lower is a typed
//! [`BackendError::Unsupported`] at compile time, never a silent fallback.
//!
//! # Backends outside the program
//!
//! The same interface reaches backends built as separate dynamic libraries (plugins, possibly
//! by third parties) through a stable ABI on `abi_stable`:
//!
//! - [`abi`] defines what crosses the boundary: a versioned root module
//!   ([`abi::QuablaPlugin`], version [`abi::INTERFACE_VERSION`]), the backend, executable and
//!   buffer objects, host data, and typed errors ([`abi::PluginError`]). Plans cross in the
//!   versioned wire format of `quabla-ir`. Its documentation is the guide to writing a
//!   plugin; [`export_plugin!`] turns any [`Backend`] into one.
//! - [`registry`] finds and loads plugins (the folders of `QUABLA_PLUGIN_PATH`, and any path
//!   given to [`registry::Registry::load_plugin`]), collects the backends linked into the
//!   program ([`register_backend!`]), and answers which backend serves a target name
//!   ([`registry::Registry::backend`]) and what `devices()` lists.
//! - [`library_file`] checks a candidate plugin file (kind, object header, segments inside
//!   the file) before the dynamic loader is given it, so that a truncated or foreign file is a
//!   typed error instead of a crash.
//!
//! A loaded plugin is wrapped as an ordinary [`Backend`] ([`registry::PluginBackend`]), so the
//! rest of Quabla never knows whether a backend is linked or loaded.

pub mod abi;
pub mod buffer;
pub mod cancel;
pub mod collectives;
mod layout;
pub mod library_file;
pub mod registry;

pub use buffer::{Bound, Buffer, BufferArg, Memory, TransferCounter, Transfers};
use quabla_ir::{DType, HostData, Plan, Shape};
use std::fmt;
use std::sync::Arc;
use thiserror::Error;

/// What a backend can do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Executes float64 nodes in float64 (the CPU does; devices may not).
    pub float64: bool,
    /// Number of devices of this kind (1 for the CPU); ordinals `1..device_count` are opened
    /// with [`Backend::open_device`].
    pub device_count: usize,
}

/// Errors a backend returns. Messages follow `spec/errors.md`.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The buffers bound to a plan do not match its inputs.
    #[error("plan input {index} ({name}) expects {expected}, got {got}")]
    InputMismatch {
        index: usize,
        name: String,
        expected: String,
        got: String,
    },
    /// LA1: an exactly singular matrix met by `solve`.
    #[error("{op}: matrix is singular")]
    Singular { op: String },
    /// UN2: the backend cannot lower an op.
    #[error("{device} cannot lower {op}: {reason}")]
    Unsupported {
        op: String,
        device: String,
        reason: String,
    },
    /// Any other failure inside the backend.
    #[error("{device}: {message}")]
    Device { device: String, message: String },
    /// The allocator refused `bytes` bytes for `what` (`a tensor of shape [1099511627776]
    /// float64`). The run stopped before it changed anything the caller holds: its inputs,
    /// every buffer and the executable are intact, and the executable can run again.
    #[error(
        "cannot allocate {bytes} bytes for {what}; the machine does not have that much memory"
    )]
    OutOfMemory { bytes: u128, what: String },
    /// The run was cancelled through a [`cancel::CancelToken`] or the process-wide
    /// [`cancel::interrupt`]; like [`BackendError::OutOfMemory`], it leaves everything intact.
    #[error("cancelled: the computation was interrupted")]
    Cancelled,
    /// The non-finite check ([`Backend::compile_checking_nans`]) stopped a run; the message
    /// names the node, its operands' ranges and the user's source line.
    #[error("{message}")]
    NonFinite { message: String },
    /// A [`Buffer`] used after it was freed or donated, or given to a backend that does not
    /// own it.
    #[error("{message}")]
    InvalidBuffer { message: String },
}

impl BackendError {
    /// The allocator refused `bytes` bytes for `what`.
    pub fn out_of_memory(bytes: u128, what: impl Into<String>) -> BackendError {
        BackendError::OutOfMemory {
            bytes,
            what: what.into(),
        }
    }

    /// The allocator refused storage for a tensor of `shape` and `dtype` (`what` reads
    /// `a tensor of shape [1099511627776] float64`).
    pub fn tensor_out_of_memory(dtype: DType, shape: &Shape) -> BackendError {
        BackendError::OutOfMemory {
            bytes: shape.nbytes(dtype) as u128,
            what: format!("a tensor of shape {shape} {}", dtype.name()),
        }
    }
}

pub type Result<T, E = BackendError> = std::result::Result<T, E>;

/// Why a backend cannot run on this host: a library it needs could not be loaded, or another
/// reason (no device, wrong platform).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{}", match library {
    Some(lib) => format!("required library {lib} could not be loaded ({reason})"),
    None => reason.clone(),
})]
pub struct Unavailable {
    /// The library that could not be loaded (`"libcuda"`, `"libnvrtc"`, ...), if that is why.
    pub library: Option<String>,
    pub reason: String,
}

impl Unavailable {
    pub fn new(reason: impl Into<String>) -> Unavailable {
        Unavailable {
            library: None,
            reason: reason.into(),
        }
    }

    /// A required library could not be loaded; `detail` says what was tried or what failed.
    pub fn missing_library(library: impl Into<String>, detail: impl Into<String>) -> Unavailable {
        Unavailable {
            library: Some(library.into()),
            reason: detail.into(),
        }
    }
}

/// A host buffer together with its shape: what crosses the backend boundary.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub shape: Shape,
    pub data: HostData,
}

impl HostTensor {
    pub fn new(shape: Shape, data: HostData) -> HostTensor {
        debug_assert_eq!(shape.size(), data.len());
        HostTensor { shape, data }
    }

    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }
}

/// How a plan's float32 work may be computed (numerics.md §1.5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// The reference rules: every float32 node is evaluated in float64 and rounded once.
    #[default]
    Reference,
    /// `jit(f).precision("float32")`: float32 contractions (`matmul`) run as native float32
    /// GEMM with float32 accumulation, and float32 `sum`/`mean` reductions accumulate in
    /// float32 in the same blocked order; every other node keeps the reference rule.
    Float32,
    /// `jit(f).precision("float64")`: a device that runs float64 plans in float32 by default
    /// (CUDA) runs the whole plan in float64 and refuses float32 values in it (numerics.md
    /// §1.6, errors.md UN3). The CPU's reference rules compute in float64 already, so it
    /// compiles the plan as at [`Precision::Reference`].
    Float64,
}

/// An execution target.
pub trait Backend: Send + Sync + fmt::Debug {
    /// The target name used by `jit(f).device(..)`: `"cpu"`, `"cuda"`, `"mlx"`.
    fn name(&self) -> &str;

    fn capabilities(&self) -> Capabilities;

    /// Compiles a frozen plan once; the result is run many times.
    fn compile(&self, plan: &Plan) -> Result<Arc<dyn Executable>>;

    /// Compiles a plan at a [`Precision`]. The default compiles it as [`Backend::compile`]
    /// does: a backend whose float32 is native already (CUDA, MLX, plugins) accepts
    /// [`Precision::Float32`] and changes nothing. It refuses [`Precision::Float64`] on a
    /// backend without float64 execution (UN2, op `precision="float64"`) rather than run the
    /// plan in float32 unasked: such a backend must implement this method to honour it (the
    /// CUDA backend does, linked or as a plugin: the plugin ABI carries the precision).
    fn compile_with(&self, plan: &Plan, precision: Precision) -> Result<Arc<dyn Executable>> {
        if precision == Precision::Float64 && !self.capabilities().float64 {
            return Err(BackendError::Unsupported {
                op: "precision=\"float64\"".into(),
                device: self.name().into(),
                reason: "this backend computes in float32 and has no float64 mode; leave \
                         precision unset to run in float32, or run on a backend with float64 \
                         (device=\"cpu\")"
                    .into(),
            });
        }
        self.compile(plan)
    }

    /// The backend of device `ordinal` of this kind (`jit(f).device("cuda:1")`), for
    /// `1 <= ordinal < capabilities().device_count`: device 0 is this backend itself, and the
    /// registry opens each other ordinal once and keeps it ([`registry::Registry::device`]).
    /// The backend returned answers [`Backend::name`] with `"<name>:<ordinal>"`, so that
    /// [`Buffer`]s of one device are refused by another. The default, for a backend of one
    /// device, refuses every ordinal (UN2, op `device ordinal`).
    fn open_device(&self, ordinal: usize) -> Result<Arc<dyn Backend>> {
        Err(BackendError::Unsupported {
            op: "device ordinal".into(),
            device: format!("{}:{ordinal}", self.name()),
            reason: format!("the {} backend drives one device", self.name()),
        })
    }

    /// Compiles a plan whose runs stop with [`BackendError::NonFinite`] at the first node that
    /// produces a NaN or an infinity from finite operands (`jit(f).check_nans(true)`). A
    /// debugging mode: the CPU backend has it; others answer `Unsupported`, naming the CPU.
    fn compile_checking_nans(
        &self,
        plan: &Plan,
        precision: Precision,
    ) -> Result<Arc<dyn Executable>> {
        let _ = (plan, precision);
        Err(BackendError::Unsupported {
            op: "check_nans".into(),
            device: self.name().to_string(),
            reason: "the non-finite check runs on the CPU; debug with device=\"cpu\"".into(),
        })
    }

    /// Copies host data into new memory of this backend. The default, for a backend whose
    /// memory is the host's, shares the data (no copy, nothing counted); a device backend
    /// copies and counts the upload.
    fn upload(&self, tensor: &HostTensor) -> Result<Memory> {
        Ok(Memory::Host(tensor.clone()))
    }

    /// Copies this backend's memory to the host. The default reads host memory and refuses
    /// anything else (a backend with memory of its own overrides it).
    fn download(&self, memory: &Memory) -> Result<HostTensor> {
        match memory {
            Memory::Host(t) => Ok(t.clone()),
            Memory::Backend(_) => Err(foreign_memory(self.name())),
        }
    }

    /// New memory of this backend for a tensor of `dtype` and `shape`, filled with zeros
    /// (`OutOfMemory` when it cannot be had).
    fn allocate(&self, dtype: DType, shape: &Shape) -> Result<Memory> {
        let data = HostData::try_zeroed(dtype, shape.size())
            .map_err(|_| BackendError::tensor_out_of_memory(dtype, shape))?;
        Ok(Memory::Host(HostTensor::new(shape.clone(), data)))
    }

    /// The copies between the host and this backend's memory so far (zeros for a backend whose
    /// memory is the host's).
    fn transfers(&self) -> Transfers {
        Transfers::default()
    }

    /// Collectives between this backend's devices and those of other processes (NCCL for
    /// CUDA), for data parallelism; `None` (the default) for a backend without them. The plugin
    /// ABI does not carry them: only a linked backend offers them.
    fn collectives(&self) -> Option<Arc<dyn collectives::Collectives>> {
        None
    }
}

/// `InvalidBuffer` for memory that `backend` did not make.
pub fn foreign_memory(backend: &str) -> BackendError {
    BackendError::InvalidBuffer {
        message: format!(
            "{backend} was given memory of another backend; buffers do not move between \
             backends (download it and upload it to {backend})"
        ),
    }
}

/// A compiled plan, ready to run on buffers.
pub trait Executable: Send + Sync + fmt::Debug {
    /// Runs the plan. `inputs` are bound to the plan's inputs in order and must match their
    /// dtypes and shapes; the outputs come back in the plan's output order.
    fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>>;

    /// Runs the plan on borrowed input buffers and appends its outputs to `outputs`: the form
    /// a caller that keeps its buffers elsewhere (and reuses one output vector) calls on every
    /// cached call. The default clones the input handles (the data stays shared) and calls
    /// [`Executable::run`]; a backend that can read borrowed buffers overrides it.
    fn run_borrowed(&self, inputs: &[&HostTensor], outputs: &mut Vec<HostTensor>) -> Result<()> {
        let owned: Vec<HostTensor> = inputs.iter().map(|t| (*t).clone()).collect();
        outputs.extend(self.run(&owned)?);
        Ok(())
    }

    /// How the backend runs the plan, in lines for people: which loops run machine code and
    /// which are interpreted, say (what `Lowered::compile_report` prints). A backend with
    /// nothing to say keeps this default.
    fn report(&self) -> String {
        "this backend gives no report of its compiled form\n".into()
    }

    /// Runs the plan on memory of this backend, bound to the plan's inputs in order, and
    /// returns the outputs in the plan's output order, left in the backend's memory. A donated
    /// input ([`Bound::donated`]) may have its storage reused for an output when no other
    /// handle on it exists; the caller never reads a donated input again. A run that fails
    /// gives every input back unchanged ([`RunFailure`]), so a caller that donated its state
    /// keeps it: a backend reuses donated storage only in a run that succeeds. The default, for
    /// a backend whose memory is the host's, runs [`Executable::run_borrowed`] on the host
    /// tensors and ignores donation (the storage is released after the run).
    fn run_resident(&self, inputs: Vec<Bound>) -> std::result::Result<Vec<Memory>, RunFailure> {
        let mut host = Vec::with_capacity(inputs.len());
        for bound in &inputs {
            match &bound.memory {
                Memory::Host(t) => host.push(t),
                Memory::Backend(_) => {
                    let error = BackendError::InvalidBuffer {
                        message: "a host-memory backend was given memory of another backend; \
                                  buffers do not move between backends"
                            .into(),
                    };
                    return Err(RunFailure { error, inputs });
                }
            }
        }
        let mut outputs = Vec::new();
        let ran = self.run_borrowed(&host, &mut outputs);
        drop(host);
        match ran {
            Ok(()) => Ok(outputs.into_iter().map(Memory::Host).collect()),
            Err(error) => Err(RunFailure { error, inputs }),
        }
    }
}

/// A run on resident memory that failed: the error, and the inputs given back unchanged
/// (donated ones included).
#[derive(Debug)]
pub struct RunFailure {
    pub error: BackendError,
    pub inputs: Vec<Bound>,
}

/// Checks buffers against a plan's inputs (shared by backends so that every backend reports
/// binding mistakes identically).
pub fn check_inputs(plan: &Plan, inputs: &[HostTensor]) -> Result<()> {
    check_bound(plan, inputs)
}

/// [`check_inputs`] for borrowed buffers (what [`Executable::run_borrowed`] receives).
pub fn check_input_refs(plan: &Plan, inputs: &[&HostTensor]) -> Result<()> {
    check_bound(plan, inputs)
}

fn check_bound<T: std::borrow::Borrow<HostTensor>>(plan: &Plan, inputs: &[T]) -> Result<()> {
    // Counted and checked without collecting: this runs on every call of a cached plan.
    let count = plan.graph().inputs().count();
    if count != inputs.len() {
        return Err(BackendError::InputMismatch {
            index: inputs.len().min(count),
            name: "<count>".into(),
            expected: format!("{count} inputs"),
            got: format!("{} inputs", inputs.len()),
        });
    }
    for (index, ((_, name, ty), got)) in plan.graph().inputs().zip(inputs).enumerate() {
        let got: &HostTensor = got.borrow();
        if ty.dtype != got.dtype() || ty.shape != got.shape || got.data.len() != got.shape.size() {
            return Err(BackendError::InputMismatch {
                index,
                name: name.to_string(),
                expected: format!("{}{}", ty.dtype.name(), ty.shape),
                got: format!("{}{}", got.dtype().name(), got.shape),
            });
        }
    }
    Ok(())
}

#[doc(hidden)]
pub mod __private {
    pub use inventory;
}
