use super::*;
use crate::registry::Plugin;
use crate::Result as BackendResult;
use quabla_ir::{GraphBuilder, Plan, TensorType, UnaryOp};

fn f64s(values: &[f64]) -> HostTensor {
    HostTensor::new(
        Shape::new(vec![values.len()]).unwrap(),
        HostData::F64(values.into()),
    )
}

/// `neg(neg(x))` over `[3]` f64, unoptimized: its output has the input's type.
fn identity_plan() -> Plan {
    let mut b = GraphBuilder::new();
    let x = b.input(
        "x",
        TensorType::new(DType::F64, Shape::new(vec![3]).unwrap()),
    );
    let y = b.unary(UnaryOp::Neg, x).unwrap();
    let z = b.unary(UnaryOp::Neg, y).unwrap();
    Plan::from_graph_unoptimized(b.finish(vec![z]).unwrap())
}

/// A backend that returns its inputs (right for `identity_plan`), or panics.
#[derive(Debug)]
struct Toy {
    panic_in: &'static str,
}

#[derive(Debug)]
struct ToyExecutable {
    panic: bool,
}

impl Backend for Toy {
    fn name(&self) -> &str {
        "toy"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            float64: false,
            device_count: 3,
        }
    }

    fn compile(&self, _plan: &Plan) -> BackendResult<Arc<dyn Executable>> {
        assert!(self.panic_in != "compile", "compile went wrong");
        Ok(Arc::new(ToyExecutable {
            panic: self.panic_in == "run",
        }))
    }
}

impl Executable for ToyExecutable {
    fn run(&self, inputs: &[HostTensor]) -> BackendResult<Vec<HostTensor>> {
        if self.panic {
            panic!("run went wrong: {}", inputs.len());
        }
        Ok(inputs.to_vec())
    }
}

extern "C" fn open_toy() -> RResult<BackendBox, PluginError> {
    open_backend(|| Ok(Toy { panic_in: "" }))
}

extern "C" fn open_panicking_compile() -> RResult<BackendBox, PluginError> {
    open_backend(|| {
        Ok(Toy {
            panic_in: "compile",
        })
    })
}

extern "C" fn open_panicking_run() -> RResult<BackendBox, PluginError> {
    open_backend(|| Ok(Toy { panic_in: "run" }))
}

extern "C" fn open_panicking() -> RResult<BackendBox, PluginError> {
    open_backend(|| -> Result<Toy, Unavailable> { panic!("no toy today") })
}

extern "C" fn open_unavailable() -> RResult<BackendBox, PluginError> {
    open_backend(|| -> Result<Toy, Unavailable> {
        Err(Unavailable::missing_library("libtoy", "not installed"))
    })
}

fn plugin(open: extern "C" fn() -> RResult<BackendBox, PluginError>) -> Plugin {
    Plugin::in_process(plugin_module("toy", "9.9.9", open))
}

#[test]
fn the_version_string_carries_the_interface_version() {
    let major = INTERFACE_VERSION_STRING.split('.').next().unwrap();
    assert_eq!(major, INTERFACE_VERSION.to_string());
}

#[test]
fn host_tensors_cross_and_come_back_bit_for_bit() {
    let cases = [
        HostTensor::new(
            Shape::new(vec![2, 2]).unwrap(),
            HostData::F32(vec![f32::NAN, -0.0, f32::INFINITY, 1.5].into()),
        ),
        f64s(&[f64::from_bits(0x7ff8_0000_0000_0123), -0.0, 1e-310]),
        HostTensor::new(Shape::scalar(), HostData::Bool(vec![true].into())),
    ];
    for t in cases {
        let abi = AbiHostTensor::from_host(&t);
        assert_eq!(abi.tensor_type().dtype, AbiDType::from(t.dtype()));
        assert_eq!(abi.to_host().unwrap(), t);
    }
}

#[test]
fn host_data_from_the_other_side_is_checked() {
    let bad_bool = AbiHostTensor {
        shape: vec![2].into(),
        data: AbiData::Bool(vec![1, 7].into()),
    };
    assert!(bad_bool.to_host().unwrap_err().contains("neither 0 nor 1"));
    let zero_extent = AbiHostTensor {
        shape: vec![0].into(),
        data: AbiData::F64(RVec::new()),
    };
    assert!(zero_extent.to_host().is_err());
    let short = AbiHostTensor {
        shape: vec![2, 2].into(),
        data: AbiData::F32(vec![1.0].into()),
    };
    assert!(short
        .to_host()
        .unwrap_err()
        .contains("1 elements for shape"));
}

#[test]
fn backend_errors_cross_unchanged() {
    let errors = [
        BackendError::InputMismatch {
            index: 1,
            name: "x".into(),
            expected: "float64[3]".into(),
            got: "float32[3]".into(),
        },
        BackendError::Singular { op: "solve".into() },
        BackendError::Unsupported {
            op: "sin".into(),
            device: "toy".into(),
            reason: "no kernel".into(),
        },
        BackendError::Device {
            device: "toy".into(),
            message: "out of memory".into(),
        },
    ];
    for e in errors {
        assert_eq!(PluginError::from_backend(&e).into_backend("other"), e);
    }
}

#[test]
fn out_of_memory_and_cancellation_cross_typed() {
    let errors = [
        BackendError::OutOfMemory {
            bytes: 1 << 43,
            what: "a tensor of shape [1099511627776] float64".into(),
        },
        BackendError::Cancelled,
    ];
    for e in errors {
        assert_eq!(PluginError::from_backend(&e).into_backend("other"), e);
    }
    // More bytes than u64 holds saturate (no allocation can be that large anyway).
    let huge = BackendError::out_of_memory(u128::MAX, "x");
    assert_eq!(
        PluginError::from_backend(&huge).into_backend("other"),
        BackendError::out_of_memory(u64::MAX as u128, "x")
    );
    assert_eq!(
        PluginError::Cancelled.to_string(),
        "cancelled: the computation was interrupted"
    );
}

#[test]
fn fallible_copies_agree_with_the_infallible_ones() {
    let t = HostTensor::new(
        Shape::new(vec![3]).unwrap(),
        HostData::Bool(vec![true, false, true].into()),
    );
    let abi = AbiHostTensor::try_from_host(&t).unwrap();
    assert_eq!(abi, AbiHostTensor::from_host(&t));
    assert_eq!(abi.try_to_host().unwrap(), t);
    let bad = AbiHostTensor {
        shape: vec![1].into(),
        data: AbiData::Bool(vec![2].into()),
    };
    assert!(matches!(
        bad.try_to_host(),
        Err(PluginError::InvalidArgument { .. })
    ));
}

/// An executable that reports what the cancellation check of the running thread says.
#[derive(Debug)]
struct Checking;

impl Executable for Checking {
    fn run(&self, inputs: &[HostTensor]) -> BackendResult<Vec<HostTensor>> {
        crate::cancel::check()?;
        Ok(inputs.to_vec())
    }
}

#[derive(Debug)]
struct CheckingBackend;

impl Backend for CheckingBackend {
    fn name(&self) -> &str {
        "toy"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            float64: true,
            device_count: 1,
        }
    }

    fn compile(&self, _plan: &Plan) -> BackendResult<Arc<dyn Executable>> {
        Ok(Arc::new(Checking))
    }
}

extern "C" fn open_checking() -> RResult<BackendBox, PluginError> {
    open_backend(|| Ok(CheckingBackend))
}

#[test]
fn the_callers_token_is_watched_behind_the_abi() {
    let exe = plugin(open_checking)
        .open()
        .unwrap()
        .compile(&identity_plan())
        .unwrap();
    let x = f64s(&[1.0, 2.0, 3.0]);
    let token = crate::cancel::CancelToken::new();
    crate::cancel::with_token(&token, || {
        assert!(exe.run(std::slice::from_ref(&x)).is_ok());
        token.cancel();
        assert_eq!(
            exe.run(std::slice::from_ref(&x)).unwrap_err(),
            BackendError::Cancelled
        );
    });
    // Another token (or none) is not cancelled.
    assert!(exe.run(std::slice::from_ref(&x)).is_ok());
}

#[test]
fn a_plain_backend_runs_behind_the_abi() {
    let plugin = plugin(open_toy);
    assert_eq!((plugin.name(), plugin.version()), ("toy", "9.9.9"));
    let backend = plugin.open().unwrap();
    assert_eq!(
        backend.capabilities(),
        Capabilities {
            float64: false,
            device_count: 3
        }
    );
    let exe = backend.compile(&identity_plan()).unwrap();
    let x = f64s(&[1.0, f64::NAN, -0.0]);
    assert_eq!(exe.run(std::slice::from_ref(&x)).unwrap(), vec![x.clone()]);
    // The ABI carries no precision: a float32 plugin refuses float64 rather than run the
    // plan in float32 unasked, and takes the others as `compile`.
    let err = backend
        .compile_with(&identity_plan(), crate::Precision::Float64)
        .err()
        .unwrap();
    assert!(
        matches!(&err, BackendError::Unsupported { op, device, .. }
            if op == "precision=\"float64\"" && device == "toy"),
        "{err}"
    );
    for p in [crate::Precision::Reference, crate::Precision::Float32] {
        let exe = backend.compile_with(&identity_plan(), p).unwrap();
        assert_eq!(exe.run(std::slice::from_ref(&x)).unwrap(), vec![x.clone()]);
    }
}

#[test]
fn panics_become_errors_and_the_plugin_stays_usable() {
    let backend = plugin(open_panicking_compile).open().unwrap();
    assert_eq!(
        backend.compile(&identity_plan()).unwrap_err(),
        BackendError::Device {
            device: "toy".into(),
            message: "the plugin panicked: compile went wrong".into()
        }
    );
    let backend = plugin(open_panicking_run).open().unwrap();
    let exe = backend.compile(&identity_plan()).unwrap();
    for _ in 0..2 {
        assert_eq!(
            exe.run(&[f64s(&[1.0, 2.0, 3.0])]).unwrap_err(),
            BackendError::Device {
                device: "toy".into(),
                message: "the plugin panicked: run went wrong: 1".into()
            }
        );
    }
    let err = plugin(open_panicking).open().unwrap_err();
    assert_eq!(err.library, None);
    assert_eq!(
        err.reason,
        "opening the backend failed: panicked: no toy today"
    );
}

extern "C" fn open_misnamed() -> RResult<BackendBox, PluginError> {
    // Declared as "other", but `Toy::name()` is "toy".
    open_named_backend("other", || Ok(Toy { panic_in: "" }))
}

extern "C" fn open_named() -> RResult<BackendBox, PluginError> {
    open_named_backend("toy", || Ok(Toy { panic_in: "" }))
}

#[test]
fn a_backend_must_answer_to_the_name_it_is_exported_as() {
    assert!(plugin(open_named).open().is_ok());
    let err = plugin(open_misnamed).open().unwrap_err();
    assert_eq!(err.library, None);
    assert_eq!(
        err.reason,
        "the plugin is exported as \"other\" but its backend's Backend::name() returns \
         \"toy\"; the two must be the same name"
    );
}

#[test]
fn the_root_module_records_the_panic_strategy() {
    let plugin = plugin_module_with_strategy("toy", "1", open_toy, false);
    assert_eq!(plugin.unwinds_on_panic(), Some(false));
    assert_eq!(
        quabla_plugin_root_module_for_tests().unwinds_on_panic(),
        Some(cfg!(panic = "unwind"))
    );
}

// What `export_plugin!` generates, compiled into this test crate.
mod exported {
    use super::Toy;
    use crate::Unavailable;

    crate::export_plugin! {
        name: "toy",
        open: || -> Result<Toy, Unavailable> { Ok(Toy { panic_in: "" }) },
    }
}

fn quabla_plugin_root_module_for_tests() -> QuablaPluginRef {
    exported::quabla_plugin_root_module()
}

#[test]
fn unavailability_names_the_missing_library() {
    let err = plugin(open_unavailable).open().unwrap_err();
    assert_eq!(err, Unavailable::missing_library("libtoy", "not installed"));
    assert_eq!(
        err.to_string(),
        "required library libtoy could not be loaded (not installed)"
    );
}
