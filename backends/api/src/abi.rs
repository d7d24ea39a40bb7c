//! The plugin ABI: the `abi_stable` types that cross the boundary between Quabla and a backend
//! built as a separate dynamic library.
//!
//! This module owns every type a plugin and the loader must agree on, bit for bit: the root
//! module [`QuablaPlugin`] (reached through [`QuablaPluginRef`]), the trait objects a plugin
//! hands out ([`BackendBox`], [`ExecutableBox`], [`BufferBox`]), the plain data that travels
//! through them ([`AbiDType`], [`AbiTensorType`], [`AbiHostTensor`], [`AbiCapabilities`]) and the
//! typed error [`PluginError`]. It also owns the plugin-side adapter that turns an ordinary
//! [`Backend`] into those objects ([`open_backend`], used by [`crate::export_plugin!`]), because
//! that adapter is where the "no panic crosses the boundary" rule is enforced. Loading and
//! listing plugins is [`crate::registry`]'s job, not this module's.
//!
//! # Versioning
//!
//! The interface has one version number, [`INTERFACE_VERSION`]. It is carried as the major
//! version of the root module's `abi_stable` version strings, so `abi_stable` itself refuses a
//! library of another interface version *before* it compares any type layout, and the loader
//! turns that refusal into [`crate::registry::LoadError::InterfaceVersion`]. Independently,
//! `abi_stable` compares the full layout of [`QuablaPlugin`] and of every type reachable from
//! it when a library is loaded, so a plugin built against a changed interface that forgot to
//! bump the version is refused too ([`crate::registry::LoadError::Layout`]) instead of
//! misbehaving.
//!
//! Any change to a type of this module increments [`INTERFACE_VERSION`], with two exceptions
//! that `abi_stable` checks as compatible: a field appended to the end of [`QuablaPlugin`]
//! (older plugins lack it; the loader must treat it as optional, as it does
//! [`QuablaPlugin::unwinds_on_panic`]) and a method appended to the end of one of the
//! `#[sabi_trait]` traits with a default body.
//!
//! # The boundary
//!
//! - **Plans** cross as the bytes of the versioned wire format of `quabla-ir`
//!   ([`quabla_ir::wire`]); the plugin decodes them with
//!   [`quabla_ir::wire::decode_plan`], which validates everything (structure, every type rule)
//!   and never panics, so a plugin needs no trust in the loader's memory layout of `Plan`.
//! - **Buffers** are opaque objects owned by the plugin ([`BufferBox`]). The loader uploads host
//!   data into one ([`BackendObject::upload`]) or allocates one ([`BackendObject::allocate`]),
//!   binds buffers to an executable's inputs ([`ExecutableObject::run`], which borrows them;
//!   an input marked donated ([`AbiInput::donated`]) is one the host gives up, whose storage
//!   the plugin may reuse for an output) and reads results back ([`BufferObject::download`]).
//!   Outputs stay in the plugin's buffers until the host downloads them, so a device backend
//!   keeps a training step's state in device memory. Buffers of one plugin are only valid with
//!   that plugin: the adapter creates them with `TD_CanDowncast` and reports a typed error for
//!   a buffer it cannot downcast, and for a buffer whose storage a donation took
//!   ([`PluginError::InvalidBuffer`]).
//! - **Host data** crosses as [`AbiHostTensor`]: the shape as `u64` extents and the elements in
//!   row-major order, `f32`/`f64`/`i32`/`i64` as they are and bool as bytes that must be 0 or
//!   1.
//! - **Errors** cross as [`PluginError`], a plain `#[repr(u8)]` enum of owned strings; the
//!   loader converts it into [`BackendError`]. An allocation the plugin cannot make is
//!   [`PluginError::OutOfMemory`] and a cancelled run [`PluginError::Cancelled`], so both stay
//!   typed on the host's side.
//! - **Cancellation** crosses as [`AbiCancel`], passed to every [`ExecutableObject::run`]: a
//!   reference to the host's process-wide interrupt flag and a shared handle on the flag of
//!   the token current on the calling thread. The adapter makes them current in the plugin's
//!   copy of [`crate::cancel`] for the run, so a plugin's executor that checks
//!   [`crate::cancel::watch`] stops when the host cancels. A plugin that implements
//!   [`ExecutableObject`] by hand does the same with [`crate::cancel::with_abi`].
//! - **Panics** never cross: every entry point of the adapter runs the backend's code under
//!   `catch_unwind` and returns [`PluginError::Panic`] instead (a panic in a destructor is
//!   caught and reported on stderr, since there is nothing to return it to). A plugin that
//!   implements the traits by hand must do the same: `abi_stable`'s own shims abort the
//!   process when a panic reaches them.
//!
//! # Writing a plugin
//!
//! A plugin is a crate that depends on `quabla-backend`, `quabla-ir` and `abi_stable` (the
//! version `quabla-backend` uses: the export attribute refers to it by name), whose library
//! is a `cdylib` named after the backend so that a plugin folder search finds it:
//!
//! ```toml
//! [lib]
//! name = "quabla_mydev_plugin"   # libquabla_mydev_plugin.so / .dylib, quabla_mydev_plugin.dll
//! crate-type = ["cdylib"]
//! ```
//!
//! and that contains one [`crate::export_plugin!`] invocation (a complete example is on the
//! macro):
//!
//! ```ignore
//! quabla_backend::export_plugin! {
//!     name: "mydev",
//!     open: || -> Result<MyBackend, quabla_backend::Unavailable> { MyBackend::probe() },
//! }
//! ```
//!
//! `MyBackend` implements the ordinary [`Backend`] trait; the adapter handles wire decoding,
//! host buffers, error conversion and panics. `open` runs when the plugin is opened (once per
//! registry) and is where a device backend loads its driver libraries; returning
//! [`Unavailable`] lists the backend as unavailable with that reason. A backend with
//! device-resident buffers implements [`BackendObject`], [`ExecutableObject`] and
//! [`BufferObject`] itself (under `catch_unwind`, see above) and builds the root module with
//! [`plugin_module`]. [`crate::registry::Plugin::in_process`] opens a root module without
//! building the library, for a plugin's own tests.
//!
//! A plugin must be built with `panic = "unwind"` (Cargo's default): catching panics at the
//! boundary needs unwinding, and in a plugin built with `panic = "abort"` the first panic ends
//! the host process. The root module records the strategy ([`QuablaPlugin::unwinds_on_panic`])
//! and the loader refuses an aborting plugin before calling it
//! ([`crate::registry::LoadError::AbortsOnPanic`]).
//!
//! `docs/writing-a-backend-plugin.md` in the repository is the step-by-step guide, and
//! `backends/example-plugin` a complete small plugin.

use crate::{
    Backend, BackendError, Bound, Capabilities, Executable, HostTensor, Memory, Precision,
    Unavailable,
};
use abi_stable::library::RootModule;
use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::sabi_trait::prelude::{TD_CanDowncast, TD_Opaque};
use abi_stable::sabi_types::RRef;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::{RArc, RBox, ROption, RResult, RSlice, RStr, RString, RVec};
use abi_stable::{declare_root_module_statics, StableAbi};
use quabla_ir::alloc::{self, AllocError};
use quabla_ir::{DType, HostData, Shape};
use std::any::Any;
use std::fmt;
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

#[doc(no_inline)]
pub use abi_stable;

/// The version of the plugin interface this build speaks. A plugin built against another
/// version is refused when it is loaded.
///
/// History: 1, the first interface; 2, [`PluginError::OutOfMemory`] and
/// [`PluginError::Cancelled`], and [`ExecutableObject::run`] takes the host's cancellation
/// flags ([`AbiCancel`]); 3, backend-owned buffers: [`BackendObject::allocate`], inputs of
/// [`ExecutableObject::run`] that the host donates ([`AbiInput`]), and
/// [`PluginError::InvalidBuffer`]; 4, the integer dtypes: [`AbiDType::I32`] and
/// [`AbiDType::I64`], [`AbiData::I32`] and [`AbiData::I64`] (plans in wire version 5); 4,
/// extended compatibly: [`BackendObject::compile_with`] ([`AbiPrecision`]) and
/// [`BackendObject::open_device`] appended with defaults.
pub const INTERFACE_VERSION: u32 = 4;

/// [`INTERFACE_VERSION`] as the `abi_stable` version string of the root module (its major
/// version; `abi_stable` refuses a different major version before it checks layouts).
pub const INTERFACE_VERSION_STRING: &str = "4.0.0";

/// The root module every plugin exports (through [`crate::export_plugin!`] or
/// `#[abi_stable::export_root_module]` on a function returning [`QuablaPluginRef`]).
///
/// It is an `abi_stable` prefix type: fields may be appended after the last one in a later
/// interface version without breaking plugins built before.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = QuablaPluginRef)))]
#[sabi(missing_field(option))]
pub struct QuablaPlugin {
    /// The target name the backend answers to (`"cpu"`, `"cuda"`, `"mlx"` or a third party's
    /// own): what `jit(f).device(..)` names.
    pub name: RStr<'static>,
    /// The plugin's own version, free-form (its crate version), shown by `devices()`.
    pub plugin_version: RStr<'static>,
    /// Opens the backend: probes whatever it needs (drivers, devices) and returns the backend
    /// object, or [`PluginError::Unavailable`] saying why it cannot run on this host. Called
    /// once per process and registry.
    #[sabi(last_prefix_field)]
    pub open: extern "C" fn() -> RResult<BackendBox, PluginError>,
    /// Whether the plugin was compiled to unwind on panic (`cfg!(panic = "unwind")`, evaluated
    /// in the crate that invokes [`crate::export_plugin!`]). The loader reads it before it
    /// calls anything and refuses a plugin built with `panic = "abort"`. Appended after the
    /// prefix, so a plugin built before the field existed still loads; the loader then reads
    /// `None` and cannot tell.
    pub unwinds_on_panic: bool,
}

impl fmt::Debug for QuablaPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuablaPlugin")
            .field("name", &self.name)
            .field("plugin_version", &self.plugin_version)
            .field("unwinds_on_panic", &self.unwinds_on_panic)
            .finish_non_exhaustive()
    }
}

impl RootModule for QuablaPluginRef {
    declare_root_module_statics! {QuablaPluginRef}
    const BASE_NAME: &'static str = "quabla_plugin";
    const NAME: &'static str = "quabla backend plugin";
    const VERSION_STRINGS: VersionStrings = VersionStrings::new(INTERFACE_VERSION_STRING);
}

/// Builds the root module of a plugin from its parts, for a plugin with its own
/// [`BackendObject`] implementation. It records the panic strategy `quabla-backend` was
/// compiled with, which under Cargo is the plugin's own (a profile's `panic` setting applies to
/// every crate of the build); [`crate::export_plugin!`] records the strategy of the crate that
/// invokes it instead.
pub fn plugin_module(
    name: &'static str,
    plugin_version: &'static str,
    open: extern "C" fn() -> RResult<BackendBox, PluginError>,
) -> QuablaPluginRef {
    plugin_module_with_strategy(name, plugin_version, open, cfg!(panic = "unwind"))
}

/// [`plugin_module`] with the panic strategy given: `unwinds_on_panic` must be
/// `cfg!(panic = "unwind")` evaluated in the plugin's crate (what [`crate::export_plugin!`]
/// passes). A plugin that claims to unwind while built to abort defeats the loader's check.
pub fn plugin_module_with_strategy(
    name: &'static str,
    plugin_version: &'static str,
    open: extern "C" fn() -> RResult<BackendBox, PluginError>,
    unwinds_on_panic: bool,
) -> QuablaPluginRef {
    QuablaPlugin {
        name: RStr::from_str(name),
        plugin_version: RStr::from_str(plugin_version),
        open,
        unwinds_on_panic,
    }
    .leak_into_prefix()
}

/// An element type as it crosses the boundary (the codes of the plan wire format).
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbiDType {
    F32 = 0,
    F64 = 1,
    Bool = 2,
    I32 = 3,
    I64 = 4,
}

impl From<DType> for AbiDType {
    fn from(d: DType) -> AbiDType {
        match d {
            DType::F32 => AbiDType::F32,
            DType::F64 => AbiDType::F64,
            DType::Bool => AbiDType::Bool,
            DType::I32 => AbiDType::I32,
            DType::I64 => AbiDType::I64,
        }
    }
}

impl From<AbiDType> for DType {
    fn from(d: AbiDType) -> DType {
        match d {
            AbiDType::F32 => DType::F32,
            AbiDType::F64 => DType::F64,
            AbiDType::Bool => DType::Bool,
            AbiDType::I32 => DType::I32,
            AbiDType::I64 => DType::I64,
        }
    }
}

/// A dtype and a shape (extents outermost first; rank 0 is an empty list).
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct AbiTensorType {
    pub dtype: AbiDType,
    pub shape: RVec<u64>,
}

/// Element data in row-major order. Bool elements are bytes, each 0 or 1.
#[repr(u8)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub enum AbiData {
    F32(RVec<f32>),
    F64(RVec<f64>),
    Bool(RVec<u8>),
    I32(RVec<i32>),
    I64(RVec<i64>),
}

/// Host data with its shape: what uploads and downloads carry.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct AbiHostTensor {
    pub shape: RVec<u64>,
    pub data: AbiData,
}

impl AbiHostTensor {
    /// Copies a host tensor into its boundary form. The process aborts if the allocator
    /// refuses the copy; [`AbiHostTensor::try_from_host`] reports that instead.
    pub fn from_host(t: &HostTensor) -> AbiHostTensor {
        let data = match &t.data {
            HostData::F32(v) => AbiData::F32(v.iter().copied().collect()),
            HostData::F64(v) => AbiData::F64(v.iter().copied().collect()),
            HostData::Bool(v) => AbiData::Bool(v.iter().map(|&b| u8::from(b)).collect()),
            HostData::I32(v) => AbiData::I32(v.iter().copied().collect()),
            HostData::I64(v) => AbiData::I64(v.iter().copied().collect()),
        };
        AbiHostTensor {
            shape: abi_shape(&t.shape),
            data,
        }
    }

    /// [`AbiHostTensor::from_host`], with [`PluginError::OutOfMemory`] when the allocator
    /// refuses the copy (what the loader's uploads and the adapter's downloads use).
    pub fn try_from_host(t: &HostTensor) -> Result<AbiHostTensor, PluginError> {
        fn copy<T: Copy, U>(src: &[T], f: impl Fn(T) -> U) -> Result<RVec<U>, AllocError> {
            let mut v = alloc::try_vec_with_capacity(src.len())?;
            v.extend(src.iter().map(|&x| f(x)));
            Ok(RVec::from(v))
        }
        let oom = |e: AllocError| PluginError::OutOfMemory {
            bytes: u64::try_from(e.bytes).unwrap_or(u64::MAX),
            what: tensor_what(t.dtype(), &t.shape).into(),
        };
        let data = match &t.data {
            HostData::F32(v) => AbiData::F32(copy(v, |x| x).map_err(oom)?),
            HostData::F64(v) => AbiData::F64(copy(v, |x| x).map_err(oom)?),
            HostData::Bool(v) => AbiData::Bool(copy(v, u8::from).map_err(oom)?),
            HostData::I32(v) => AbiData::I32(copy(v, |x| x).map_err(oom)?),
            HostData::I64(v) => AbiData::I64(copy(v, |x| x).map_err(oom)?),
        };
        Ok(AbiHostTensor {
            shape: abi_shape(&t.shape),
            data,
        })
    }

    /// Checks and copies the boundary form back into a host tensor: every extent at least 1,
    /// the element count equal to the shape's, bool bytes 0 or 1. Nothing here trusts the
    /// other side of the boundary. The error is the message of
    /// [`AbiHostTensor::try_to_host`]'s.
    pub fn to_host(&self) -> Result<HostTensor, String> {
        self.try_to_host().map_err(|e| match e {
            PluginError::InvalidArgument { message } => message.into(),
            other => other.to_string(),
        })
    }

    /// [`AbiHostTensor::to_host`] with a typed error: [`PluginError::InvalidArgument`] for
    /// data that breaks a rule, [`PluginError::OutOfMemory`] when the allocator refuses the
    /// copy.
    pub fn try_to_host(&self) -> Result<HostTensor, PluginError> {
        let invalid = |message: String| PluginError::InvalidArgument {
            message: message.into(),
        };
        let shape = shape_from_abi(&self.shape).map_err(invalid)?;
        let len = match &self.data {
            AbiData::F32(v) => v.len(),
            AbiData::F64(v) => v.len(),
            AbiData::Bool(v) => v.len(),
            AbiData::I32(v) => v.len(),
            AbiData::I64(v) => v.len(),
        };
        if len != shape.size() {
            return Err(invalid(format!(
                "{len} elements for shape {shape} ({} expected)",
                shape.size()
            )));
        }
        let dtype = self.tensor_type().dtype.into();
        let oom = |e: AllocError| PluginError::OutOfMemory {
            bytes: u64::try_from(e.bytes).unwrap_or(u64::MAX),
            what: tensor_what(dtype, &shape).into(),
        };
        let data = match &self.data {
            AbiData::F32(v) => HostData::F32(alloc::try_shared_from_slice(v).map_err(oom)?),
            AbiData::F64(v) => HostData::F64(alloc::try_shared_from_slice(v).map_err(oom)?),
            AbiData::Bool(v) => {
                if let Some(other) = v.iter().find(|&&b| b > 1) {
                    return Err(invalid(format!(
                        "bool element byte {other} is neither 0 nor 1"
                    )));
                }
                let bools = alloc::try_shared_from_iter(v.iter().map(|&b| b == 1), len)
                    .map_err(oom)?
                    .ok_or_else(|| invalid("bool elements changed while read".into()))?;
                HostData::Bool(bools)
            }
            AbiData::I32(v) => HostData::I32(alloc::try_shared_from_slice(v).map_err(oom)?),
            AbiData::I64(v) => HostData::I64(alloc::try_shared_from_slice(v).map_err(oom)?),
        };
        Ok(HostTensor { shape, data })
    }

    /// The dtype and shape of the data.
    pub fn tensor_type(&self) -> AbiTensorType {
        let dtype = match self.data {
            AbiData::F32(_) => AbiDType::F32,
            AbiData::F64(_) => AbiDType::F64,
            AbiData::Bool(_) => AbiDType::Bool,
            AbiData::I32(_) => AbiDType::I32,
            AbiData::I64(_) => AbiDType::I64,
        };
        AbiTensorType {
            dtype,
            shape: self.shape.clone(),
        }
    }
}

/// How an out-of-memory error names a tensor: `a tensor of shape [2, 3] float64`.
fn tensor_what(dtype: DType, shape: &Shape) -> String {
    format!("a tensor of shape {shape} {}", dtype.name())
}

fn abi_shape(shape: &Shape) -> RVec<u64> {
    shape.dims().iter().map(|&d| d as u64).collect()
}

fn shape_from_abi(dims: &[u64]) -> Result<Shape, String> {
    let dims = dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("extent {d} does not fit this platform")))
        .collect::<Result<Vec<usize>, String>>()?;
    Shape::new(dims).map_err(|e| e.to_string())
}

/// What a backend can do, as it crosses the boundary.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbiCapabilities {
    pub float64: bool,
    pub device_count: u64,
}

impl From<&Capabilities> for AbiCapabilities {
    fn from(c: &Capabilities) -> AbiCapabilities {
        AbiCapabilities {
            float64: c.float64,
            device_count: c.device_count as u64,
        }
    }
}

impl From<AbiCapabilities> for Capabilities {
    fn from(c: AbiCapabilities) -> Capabilities {
        Capabilities {
            float64: c.float64,
            device_count: usize::try_from(c.device_count).unwrap_or(usize::MAX),
        }
    }
}

/// How a plan's float32 work may be computed ([`crate::Precision`]), as it crosses the
/// boundary.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbiPrecision {
    Reference = 0,
    Float32 = 1,
    Float64 = 2,
}

impl From<Precision> for AbiPrecision {
    fn from(p: Precision) -> AbiPrecision {
        match p {
            Precision::Reference => AbiPrecision::Reference,
            Precision::Float32 => AbiPrecision::Float32,
            Precision::Float64 => AbiPrecision::Float64,
        }
    }
}

impl From<AbiPrecision> for Precision {
    fn from(p: AbiPrecision) -> Precision {
        match p {
            AbiPrecision::Reference => Precision::Reference,
            AbiPrecision::Float32 => Precision::Float32,
            AbiPrecision::Float64 => Precision::Float64,
        }
    }
}

/// The host's cancellation flags for one run (see [`crate::cancel`]): its process-wide
/// interrupt flag, which lives as long as the host, and the flag of the token current on the
/// thread that runs the plan, if any. The plugin reads them during the run and may clear the
/// interrupt (a check that observes it consumes it); it never keeps them afterwards.
#[repr(C)]
#[derive(StableAbi, Clone)]
pub struct AbiCancel {
    pub interrupt: &'static AtomicBool,
    pub token: ROption<RArc<AtomicBool>>,
}

impl fmt::Debug for AbiCancel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbiCancel")
            .field("token", &self.token.is_some())
            .finish_non_exhaustive()
    }
}

/// The typed error of every plugin entry point. `InputMismatch`, `Singular`, `Unsupported`,
/// `Device`, `OutOfMemory` and `Cancelled` mirror [`BackendError`]; the others exist only at
/// the boundary.
#[repr(u8)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub enum PluginError {
    /// The buffers bound to a plan do not match its inputs.
    InputMismatch {
        index: u64,
        name: RString,
        expected: RString,
        got: RString,
    },
    /// LA1: an exactly singular matrix.
    Singular { op: RString },
    /// UN2: the backend cannot lower an op.
    Unsupported {
        op: RString,
        device: RString,
        reason: RString,
    },
    /// Any other failure inside the backend.
    Device { device: RString, message: RString },
    /// The backend cannot run on this host (`open` only): a library that could not be loaded
    /// (`library`, e.g. `"libcuda"`) or another reason.
    Unavailable {
        library: ROption<RString>,
        reason: RString,
    },
    /// The plan bytes did not decode (wire version, validation).
    InvalidPlan { message: RString },
    /// A buffer or an argument that the plugin cannot use (a foreign buffer, bad host data).
    InvalidArgument { message: RString },
    /// The backend's code panicked; the panic was caught inside the plugin.
    Panic { message: RString },
    /// The allocator refused `bytes` bytes for `what` (saturated at `u64::MAX`, more than any
    /// allocation can be).
    OutOfMemory { bytes: u64, what: RString },
    /// The run was cancelled (the host's token or interrupt).
    Cancelled,
    /// A buffer used after a run took its storage (donation), or a buffer of another plugin.
    InvalidBuffer { message: RString },
}

/// The refusal of `precision="float64"` by a plugin without float64 execution, from the
/// default of [`BackendObject::compile_with`] (the device is filled in by the host).
fn float64_refused() -> PluginError {
    PluginError::Unsupported {
        op: "precision=\"float64\"".into(),
        device: RString::new(),
        reason: "this backend computes in float32 and has no float64 mode; leave precision \
                 unset to run in float32, or run on a backend with float64 (device=\"cpu\")"
            .into(),
    }
}

/// The refusal of a device ordinal by a plugin of one device, from the default of
/// [`BackendObject::open_device`].
fn ordinal_refused(ordinal: u64) -> PluginError {
    PluginError::Unsupported {
        op: "device ordinal".into(),
        device: RString::new(),
        reason: format!("the plugin drives one device; device {ordinal} does not exist").into(),
    }
}

impl PluginError {
    /// The plugin-side form of a backend error.
    pub fn from_backend(e: &BackendError) -> PluginError {
        match e {
            BackendError::InputMismatch {
                index,
                name,
                expected,
                got,
            } => PluginError::InputMismatch {
                index: *index as u64,
                name: name.as_str().into(),
                expected: expected.as_str().into(),
                got: got.as_str().into(),
            },
            BackendError::Singular { op } => PluginError::Singular {
                op: op.as_str().into(),
            },
            BackendError::Unsupported { op, device, reason } => PluginError::Unsupported {
                op: op.as_str().into(),
                device: device.as_str().into(),
                reason: reason.as_str().into(),
            },
            BackendError::Device { device, message } => PluginError::Device {
                device: device.as_str().into(),
                message: message.as_str().into(),
            },
            BackendError::OutOfMemory { bytes, what } => PluginError::OutOfMemory {
                bytes: u64::try_from(*bytes).unwrap_or(u64::MAX),
                what: what.as_str().into(),
            },
            BackendError::Cancelled => PluginError::Cancelled,
            BackendError::InvalidBuffer { message } => PluginError::InvalidBuffer {
                message: message.as_str().into(),
            },
            // Plugins compile no checked plans; the ABI carries the message as a device error.
            BackendError::NonFinite { message } => PluginError::Device {
                device: "check_nans".into(),
                message: message.as_str().into(),
            },
        }
    }

    /// The loader-side form: a [`BackendError`] naming `device` where the plugin's error
    /// does not.
    pub fn into_backend(self, device: &str) -> BackendError {
        match self {
            PluginError::InputMismatch {
                index,
                name,
                expected,
                got,
            } => BackendError::InputMismatch {
                index: usize::try_from(index).unwrap_or(usize::MAX),
                name: name.into(),
                expected: expected.into(),
                got: got.into(),
            },
            PluginError::Singular { op } => BackendError::Singular { op: op.into() },
            // The defaults of the appended methods cannot know the plugin's name: an empty
            // device is the one the host knows the plugin by.
            PluginError::Unsupported {
                op,
                device: named,
                reason,
            } => BackendError::Unsupported {
                op: op.into(),
                device: if named.is_empty() {
                    device.into()
                } else {
                    named.into()
                },
                reason: reason.into(),
            },
            PluginError::Device { device, message } => BackendError::Device {
                device: device.into(),
                message: message.into(),
            },
            PluginError::Unavailable { library, reason } => BackendError::Device {
                device: device.into(),
                message: match library.into_option() {
                    Some(lib) => format!("required library {lib} could not be loaded ({reason})"),
                    None => format!("unavailable: {reason}"),
                },
            },
            PluginError::InvalidPlan { message } => BackendError::Device {
                device: device.into(),
                message: format!("the plugin rejected the plan: {message}"),
            },
            PluginError::InvalidArgument { message } => BackendError::Device {
                device: device.into(),
                message: format!("invalid argument at the plugin boundary: {message}"),
            },
            PluginError::Panic { message } => BackendError::Device {
                device: device.into(),
                message: format!("the plugin panicked: {message}"),
            },
            PluginError::OutOfMemory { bytes, what } => BackendError::OutOfMemory {
                bytes: u128::from(bytes),
                what: what.into(),
            },
            PluginError::Cancelled => BackendError::Cancelled,
            PluginError::InvalidBuffer { message } => BackendError::InvalidBuffer {
                message: message.into(),
            },
        }
    }
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.clone() {
            PluginError::Unavailable { library, reason } => match library.into_option() {
                Some(lib) => write!(f, "required library {lib} could not be loaded ({reason})"),
                None => write!(f, "{reason}"),
            },
            PluginError::InvalidPlan { message } => write!(f, "invalid plan: {message}"),
            PluginError::InvalidArgument { message } => write!(f, "invalid argument: {message}"),
            PluginError::Panic { message } => write!(f, "panicked: {message}"),
            other => write!(f, "{}", other.into_backend("plugin")),
        }
    }
}

impl From<Unavailable> for PluginError {
    fn from(u: Unavailable) -> PluginError {
        PluginError::Unavailable {
            library: u.library.map(RString::from).into(),
            reason: u.reason.into(),
        }
    }
}

/// The `#[sabi_trait]` traits (in a module of their own: the attribute generates impls that
/// the `non_local_definitions` lint flags).
mod objects {
    #![allow(non_local_definitions)]

    use super::{
        AbiCancel, AbiCapabilities, AbiHostTensor, AbiInput, AbiPrecision, AbiTensorType,
        BackendBox, BufferBox, ExecutableBox, PluginError,
    };
    use abi_stable::sabi_trait;
    use abi_stable::std_types::{RResult, RSlice, RVec};

    /// A backend as a plugin hands it out.
    #[sabi_trait]
    pub trait BackendObject: Send + Sync {
        /// What the backend can do.
        fn capabilities(&self) -> RResult<AbiCapabilities, PluginError>;

        /// Compiles a plan given as wire-format bytes ([`quabla_ir::wire`]).
        fn compile(&self, plan: RSlice<'_, u8>) -> RResult<ExecutableBox, PluginError>;

        /// Copies host data into a new buffer of this backend.
        fn upload(&self, tensor: &AbiHostTensor) -> RResult<BufferBox, PluginError>;

        /// A new buffer of this backend for a tensor of `ty`, filled with zeros
        /// ([`PluginError::OutOfMemory`] when the memory cannot be had).
        #[sabi(last_prefix_field)]
        fn allocate(&self, ty: &AbiTensorType) -> RResult<BufferBox, PluginError>;

        /// Compiles a plan at a precision ([`crate::Backend::compile_with`]). Appended after
        /// the prefix: a plugin built before it has none, and the default compiles the plan
        /// as [`BackendObject::compile`] does, refusing `Float64` on a backend without float64
        /// execution (the rule of [`crate::Backend::compile_with`]'s default).
        fn compile_with(
            &self,
            plan: RSlice<'_, u8>,
            precision: AbiPrecision,
        ) -> RResult<ExecutableBox, PluginError> {
            if precision == AbiPrecision::Float64 {
                match self.capabilities() {
                    RResult::ROk(c) if c.float64 => {}
                    RResult::ROk(_) => return RResult::RErr(crate::abi::float64_refused()),
                    RResult::RErr(e) => return RResult::RErr(e),
                }
            }
            self.compile(plan)
        }

        /// The backend of device `ordinal` of this kind ([`crate::Backend::open_device`]).
        /// Appended after the prefix; the default, and a plugin built before it, drives one
        /// device and refuses every ordinal.
        fn open_device(&self, ordinal: u64) -> RResult<BackendBox, PluginError> {
            RResult::RErr(crate::abi::ordinal_refused(ordinal))
        }
    }

    /// A compiled plan.
    #[sabi_trait]
    pub trait ExecutableObject: Send + Sync {
        /// Runs the plan with `inputs` (borrowed buffers of the same plugin, some donated)
        /// bound to its inputs in order; returns the outputs in the plan's output order, as
        /// new buffers. A run that fails leaves every input buffer as it was, donated ones
        /// included (storage taken from them is put back). `cancel` holds the host's cancellation flags for this run (make them
        /// current with [`crate::cancel::with_abi`]; a cancelled run returns
        /// [`PluginError::Cancelled`]).
        #[sabi(last_prefix_field)]
        fn run<'a, 'b>(
            &self,
            inputs: RSlice<'a, AbiInput<'b>>,
            cancel: &AbiCancel,
        ) -> RResult<RVec<BufferBox>, PluginError>;
    }

    /// A buffer owned by a plugin (host or device memory).
    #[sabi_trait]
    pub trait BufferObject: Send + Sync {
        /// The dtype and shape of the buffer.
        fn tensor_type(&self) -> AbiTensorType;

        /// Copies the buffer to the host.
        #[sabi(last_prefix_field)]
        fn download(&self) -> RResult<AbiHostTensor, PluginError>;
    }
}

pub use objects::{
    BackendObject, BackendObject_TO, BufferObject, BufferObject_TO, ExecutableObject,
    ExecutableObject_TO,
};

/// An owned backend object.
pub type BackendBox = BackendObject_TO<'static, RBox<()>>;
/// An owned executable object.
pub type ExecutableBox = ExecutableObject_TO<'static, RBox<()>>;
/// An owned buffer object.
pub type BufferBox = BufferObject_TO<'static, RBox<()>>;
/// A borrowed buffer object (`buffer.sabi_reborrow()`).
pub type BufferRef<'a> = BufferObject_TO<'a, RRef<'a, ()>>;

/// One input of [`ExecutableObject::run`]: a buffer of the plugin, and whether the host donates
/// it. The host never uses a donated buffer again (it drops it after the run), so the plugin
/// may take its storage for an output; a buffer whose storage was taken answers every later
/// call with [`PluginError::InvalidBuffer`].
#[repr(C)]
#[derive(StableAbi)]
pub struct AbiInput<'a> {
    pub buffer: BufferRef<'a>,
    pub donated: bool,
}

impl fmt::Debug for AbiInput<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbiInput")
            .field("type", &self.buffer.tensor_type())
            .field("donated", &self.donated)
            .finish()
    }
}

mod adapter;
#[cfg(test)]
mod tests;

pub use adapter::{guard, open_backend, open_named_backend, panic_message};

/// Exports a plain [`Backend`] as a plugin: the root module of a `cdylib`.
///
/// `name` is the target name (see [`crate::registry::is_valid_backend_name`]); `open` is an
/// expression of type `fn() -> Result<B, Unavailable>` (a closure without captures works)
/// where `B: Backend + 'static`; it runs when the plugin is opened and is where a device
/// backend probes its libraries. [`Backend::name`] of the opened backend must return `name`:
/// a backend that says otherwise is refused at open, so the plugin has one name everywhere.
/// The macro records whether the invoking crate is compiled with `panic = "unwind"`, and the
/// loader refuses a plugin built with `panic = "abort"`. The crate must depend on
/// `abi_stable` directly (the export attribute names it). See [`crate::abi`] for the whole
/// contract.
///
/// ```
/// use quabla_backend::{Backend, BackendError, Capabilities, Executable, Unavailable};
/// use quabla_ir::Plan;
/// use std::sync::Arc;
///
/// #[derive(Debug)]
/// struct MyBackend;
///
/// impl Backend for MyBackend {
///     fn name(&self) -> &str {
///         "mydev"
///     }
///     fn capabilities(&self) -> Capabilities {
///         Capabilities { float64: false, device_count: 1 }
///     }
///     fn compile(&self, _plan: &Plan) -> quabla_backend::Result<Arc<dyn Executable>> {
///         Err(BackendError::Unsupported {
///             op: "everything".into(),
///             device: "mydev".into(),
///             reason: "an example".into(),
///         })
///     }
/// }
///
/// quabla_backend::export_plugin! {
///     name: "mydev",
///     open: || -> Result<MyBackend, Unavailable> { Ok(MyBackend) },
/// }
///
/// // The root module, as the loader sees it once the library is loaded:
/// let plugin = quabla_backend::registry::Plugin::in_process(quabla_plugin_root_module());
/// assert_eq!(plugin.name(), "mydev");
/// assert!(plugin.open().is_ok());
/// ```
#[macro_export]
macro_rules! export_plugin {
    (name: $name:expr, open: $open:expr $(,)?) => {
        /// The root module of this Quabla backend plugin.
        #[::abi_stable::export_root_module]
        pub fn quabla_plugin_root_module() -> $crate::abi::QuablaPluginRef {
            extern "C" fn open(
            ) -> ::abi_stable::std_types::RResult<$crate::abi::BackendBox, $crate::abi::PluginError>
            {
                $crate::abi::open_named_backend($name, $open)
            }
            // Evaluated here, in the plugin's crate: the panic strategy it is compiled with.
            $crate::abi::plugin_module_with_strategy(
                $name,
                env!("CARGO_PKG_VERSION"),
                open,
                cfg!(panic = "unwind"),
            )
        }
    };
}
