//! Loading plugins: the checks at the boundary (interface version, layout, bogus files), the
//! search rules, panics inside a plugin, and buffers crossing it.

use quabla_backend::abi::INTERFACE_VERSION;
use quabla_backend::registry::{
    plugin_file_name, LoadError, Origin, Plugin, PluginSearch, Registry, ResolveError,
};
use quabla_backend::{Backend, BackendError, Bound, Executable, HostTensor, Memory};
use quabla_conformance::plugins::{build, cpu_plugin_folder, install, scratch_dir};
use quabla_conformance::tensor;
use quabla_ir::{DType, GraphBuilder, Plan, TensorType, UnaryOp};

fn built() -> &'static quabla_conformance::plugins::Built {
    build().unwrap_or_else(|e| panic!("{e}"))
}

/// `exp(x)` over `[3]` f64, with the input named `name`.
fn exp_plan(name: &str) -> Plan {
    let mut b = GraphBuilder::new();
    let x = b.input(
        name,
        TensorType::new(DType::F64, quabla_ir::Shape::new(vec![3]).unwrap()),
    );
    let y = b.unary(UnaryOp::Exp, x).unwrap();
    Plan::compile(&b.finish(vec![y]).unwrap())
}

fn x3() -> HostTensor {
    tensor(DType::F64, &[3], &[0.0, 1.0, -1.0])
}

#[test]
fn the_cpu_plugin_loads_with_its_name_version_and_capabilities() {
    let plugin = Plugin::load(&built().cpu_plugin()).unwrap();
    assert_eq!(plugin.name(), "cpu");
    assert_eq!(plugin.version(), env!("CARGO_PKG_VERSION"));
    let backend = plugin.open().unwrap();
    assert_eq!(backend.name(), "cpu");
    assert!(backend.capabilities().float64);
    let out = backend
        .compile(&exp_plan("x"))
        .unwrap()
        .run(&[x3()])
        .unwrap();
    let direct = quabla_cpu::run_plan(&exp_plan("x"), &[x3()]).unwrap();
    assert_eq!(out, direct);
}

#[test]
fn a_plugin_of_the_previous_interface_version_is_refused_with_a_typed_error() {
    let previous = (INTERFACE_VERSION - 1).to_string();
    let path = built().fixture("fixture_previous_interface");
    let err = Plugin::load(&path).unwrap_err();
    match &err {
        LoadError::InterfaceVersion {
            expected, found, ..
        } => {
            assert_eq!(*expected, INTERFACE_VERSION);
            assert_eq!(found, &previous);
        }
        other => panic!("expected an interface version error, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains(&format!(
            "plugin interface version {previous} is not supported"
        )),
        "{message}"
    );
}

#[test]
fn a_plugin_of_another_interface_version_is_refused_with_a_typed_error() {
    // The fixture speaks the version after this build's.
    let next = (INTERFACE_VERSION + 1).to_string();
    let path = built().fixture("fixture_next_interface");
    let err = Plugin::load(&path).unwrap_err();
    match &err {
        LoadError::InterfaceVersion {
            path: p,
            expected,
            found,
        } => {
            assert_eq!(p, &path);
            assert_eq!(*expected, INTERFACE_VERSION);
            assert_eq!(found, &next);
        }
        other => panic!("expected an interface version error, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains(&format!("plugin interface version {next} is not supported"))
            && message.contains(&format!("loads interface version {INTERFACE_VERSION}")),
        "{message}"
    );

    // Found in a plugin folder, it is listed as unavailable with that error, and the target it
    // announces resolves to a not-found error that carries it.
    let dir = scratch_dir("next-plugin");
    install(&path, &dir, &plugin_file_name("next"));
    let registry = Registry::discover(&PluginSearch::folders([dir.clone()]));
    let row = registry
        .devices()
        .into_iter()
        .find(|d| d.name == "next")
        .unwrap();
    assert!(!row.available);
    assert!(row
        .reason
        .unwrap()
        .contains(&format!("interface version {next}")));
    match registry.backend("next") {
        Err(e @ ResolveError::NotFound { .. }) => {
            assert!(
                e.to_string().contains(&format!("interface version {next}")),
                "{e}"
            )
        }
        other => panic!("{other:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_plugin_whose_layout_changed_without_a_version_bump_is_refused() {
    let path = built().fixture("fixture_changed_layout");
    let err = Plugin::load(&path).unwrap_err();
    assert!(matches!(err, LoadError::Layout { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("the layout of the plugin interface differs from this build's"),
        "{err}"
    );
}

#[test]
fn a_panic_inside_a_plugin_becomes_an_error() {
    let plugin = Plugin::load(&built().fixture("fixture_panicking_backend")).unwrap();
    let backend = plugin.open().unwrap();

    let err = backend.compile(&exp_plan("panic_in_compile")).unwrap_err();
    match err {
        BackendError::Device { device, message } => {
            assert_eq!(device, "panicking");
            assert_eq!(message, "the plugin panicked: compile exploded");
        }
        other => panic!("{other:?}"),
    }

    let exe = backend.compile(&exp_plan("x")).unwrap();
    let err = exe.run(&[x3()]).unwrap_err();
    assert_eq!(
        err,
        BackendError::Device {
            device: "panicking".into(),
            message: "the plugin panicked: run exploded".into(),
        }
    );
    // The plugin stays usable after a panic.
    assert!(exe.run(&[x3()]).is_err());
    assert!(backend.compile(&exp_plan("x")).is_ok());
}

#[test]
fn buffers_stay_with_their_plugin() {
    let cpu = Plugin::load(&built().cpu_plugin()).unwrap().open().unwrap();
    let other = Plugin::load(&built().fixture("fixture_panicking_backend"))
        .unwrap()
        .open()
        .unwrap();
    let exe = cpu.compile_plan(&exp_plan("x")).unwrap();

    // Buffers of the same plugin: outputs stay in the plugin until downloaded.
    let input = cpu.upload(&x3()).unwrap();
    let outputs = exe
        .run_resident(vec![Bound {
            memory: input,
            donated: false,
        }])
        .unwrap();
    assert!(matches!(outputs[0], Memory::Backend(_)));
    assert_eq!(
        cpu.download(&outputs[0]).unwrap(),
        quabla_cpu::run_plan(&exp_plan("x"), &[x3()]).unwrap()[0]
    );

    // Memory of another plugin is a typed error, not a crash, and comes back with the failure.
    let foreign = other.upload(&x3()).unwrap();
    let failure = exe
        .run_resident(vec![Bound {
            memory: foreign,
            donated: true,
        }])
        .unwrap_err();
    match failure.error {
        BackendError::InvalidBuffer { message } => {
            assert!(
                message.contains("cpu was given memory of another backend"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(failure.inputs.len(), 1);
    assert_eq!(other.download(&failure.inputs[0].memory).unwrap(), x3());

    // Host inputs that do not match the plan are refused before they cross.
    let err = exe
        .run(&[tensor(DType::F32, &[3], &[1.0, 2.0, 3.0])])
        .unwrap_err();
    assert!(
        matches!(err, BackendError::InputMismatch { index: 0, .. }),
        "{err:?}"
    );
}

#[test]
fn bogus_files_are_reported_and_the_others_still_load() {
    let dir = scratch_dir("bogus-plugins");
    install(&built().cpu_plugin(), &dir, &plugin_file_name("cpu"));
    let bogus = dir.join(plugin_file_name("bogus"));
    std::fs::write(&bogus, b"not a library").unwrap();
    let registry = Registry::discover(&PluginSearch::folders([dir.clone()]));
    let rows = registry.devices();
    let cpu_plugin = rows
        .iter()
        .find(|r| r.origin == Origin::Plugin(dir.join(plugin_file_name("cpu"))))
        .expect("the CPU plugin is listed");
    assert!(cpu_plugin.available, "{cpu_plugin:?}");
    let bogus_row = rows.iter().find(|r| r.name == "bogus").unwrap();
    assert_eq!(bogus_row.origin, Origin::Plugin(bogus.clone()));
    assert!(!bogus_row.available);
    assert!(
        bogus_row
            .reason
            .as_deref()
            .unwrap()
            .contains("cannot be opened as a dynamic library"),
        "{bogus_row:?}"
    );
    // "cpu" still resolves (to the linked backend, which comes first).
    assert!(registry.backend("cpu").is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_library_without_a_root_module_is_not_a_plugin() {
    // A real dynamic library that is not a Quabla plugin: a procedural-macro library of the
    // build (abi_stable's derive macros), found beside the test executable.
    let deps = built().profile_dir.join("deps");
    let Some(library) = std::fs::read_dir(&deps).ok().and_then(|entries| {
        entries.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.starts_with(&format!(
                    "{}abi_stable_derive-",
                    std::env::consts::DLL_PREFIX
                )) && n.ends_with(std::env::consts::DLL_SUFFIX)
            })
        })
    }) else {
        eprintln!("no procedural-macro library in {}; skipped", deps.display());
        return;
    };
    let err = Plugin::load(&library).unwrap_err();
    assert!(matches!(err, LoadError::NotAPlugin { .. }), "{err:?}");
    assert!(
        err.to_string().contains("not a Quabla backend plugin"),
        "{err}"
    );
}

#[test]
fn only_the_named_folders_are_searched() {
    let dir = scratch_dir("nested-plugins");
    let nested = dir.join("nested");
    std::fs::create_dir_all(&nested).unwrap();
    install(&built().cpu_plugin(), &nested, &plugin_file_name("cpu"));
    // Wrongly named: not a candidate.
    install(&built().cpu_plugin(), &dir, "libquabla_cpu.so");
    let registry = Registry::discover(&PluginSearch::folders([dir.clone()]));
    assert!(registry
        .entries()
        .iter()
        .all(|e| matches!(e.origin, Origin::Linked)));
    let registry = Registry::discover(&PluginSearch::folders([nested.clone()]));
    assert!(registry
        .entries()
        .iter()
        .any(|e| e.origin == Origin::Plugin(nested.join(plugin_file_name("cpu")))));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn plugins_of_the_same_name_resolve_linked_first_then_in_search_order() {
    let folder = cpu_plugin_folder().unwrap().to_path_buf();
    let registry = Registry::discover(&PluginSearch::folders([folder.clone()]));
    let rows = registry.devices();
    let cpu_rows: Vec<&Origin> = rows
        .iter()
        .filter(|r| r.name == "cpu")
        .map(|r| &r.origin)
        .collect();
    assert_eq!(
        cpu_rows,
        [
            &Origin::Linked,
            &Origin::Plugin(folder.join(plugin_file_name("cpu")))
        ]
    );
    // The linked backend is the one `jit(...).device("cpu")` gets.
    let backend = registry.backend("cpu").unwrap();
    assert!(
        format!("{backend:?}").starts_with("CpuBackend"),
        "{backend:?}"
    );
}

#[test]
fn linked_device_backends_report_why_they_are_unavailable() {
    let registry = Registry::discover(&PluginSearch::none());
    for name in ["cuda", "mlx"] {
        let row = registry
            .devices()
            .into_iter()
            .find(|r| r.name == name)
            .unwrap();
        assert_eq!(row.origin, Origin::Linked);
        if !row.available {
            assert!(!row.reason.unwrap().is_empty());
            assert!(matches!(
                registry.backend(name),
                Err(ResolveError::Unavailable { .. })
            ));
        }
    }
    let mlx = registry.backend("mlx").unwrap_err();
    if !cfg!(target_os = "macos") {
        assert!(mlx.to_string().contains("MLX runs only on macOS"), "{mlx}");
    }
}

/// `x @ y` of float32 `[1, k] @ [k, 1]` and `sum(x)`: the nodes whose float32 work
/// `Precision::Float32` changes (float32 accumulation) on the CPU.
fn float32_contractions(k: usize) -> (Plan, Vec<HostTensor>) {
    let mut b = GraphBuilder::new();
    let ty = |dims: Vec<usize>| TensorType::new(DType::F32, quabla_ir::Shape::new(dims).unwrap());
    let x = b.input("x", ty(vec![1, k]));
    let y = b.input("y", ty(vec![k, 1]));
    let m = b.push(quabla_ir::Op::Matmul, &[x, y]).unwrap();
    let s = b
        .push(
            quabla_ir::Op::Reduce {
                kind: quabla_ir::ReduceKind::Sum,
                axes: vec![0, 1],
            },
            &[x],
        )
        .unwrap();
    let plan = Plan::compile(&b.finish(vec![m, s]).unwrap());
    let xs: Vec<f64> = (0..k)
        .map(|i| 1.0 + (i as f64 * 0.37).sin() * 1e-3)
        .collect();
    let ys: Vec<f64> = (0..k)
        .map(|i| 0.5 + (i as f64 * 0.11).cos() * 1e-2)
        .collect();
    let inputs = vec![
        tensor(DType::F32, &[1, k], &xs),
        tensor(DType::F32, &[k, 1], &ys),
    ];
    (plan, inputs)
}

#[test]
fn the_precision_crosses_the_plugin_boundary() {
    use quabla_backend::Precision;
    let plugin = Plugin::load(&built().cpu_plugin()).unwrap().open().unwrap();
    let linked = quabla_cpu::CpuBackend::default();
    let (plan, inputs) = float32_contractions(4096);
    let run = |backend: &dyn Backend, precision| {
        backend
            .compile_with(&plan, precision)
            .unwrap()
            .run(&inputs)
            .unwrap()
    };
    // The two precisions give different bits here, so the plugin's agreement with each is a
    // test that it received the precision asked for.
    assert_ne!(
        run(&linked, Precision::Reference),
        run(&linked, Precision::Float32)
    );
    for precision in [Precision::Reference, Precision::Float32, Precision::Float64] {
        assert_eq!(
            run(&plugin, precision),
            run(&linked, precision),
            "{precision:?}"
        );
    }
}

#[test]
fn a_plugins_other_devices_are_opened_through_the_interface_and_keep_their_memory() {
    let registry = Registry::discover(&PluginSearch::none());
    registry.load_plugin(built().toy_plugin()).unwrap();
    let first = registry.backend("toy").unwrap();
    assert_eq!(first.capabilities().device_count, 2);
    assert!(std::sync::Arc::ptr_eq(
        &registry.device(&first, 0).unwrap(),
        &first
    ));
    let second = registry.device(&first, 1).unwrap();
    assert_eq!(second.name(), "toy:1");
    // Opened once: every request for it is the same backend.
    assert!(std::sync::Arc::ptr_eq(
        &registry.device(&first, 1).unwrap(),
        &second
    ));

    let on_first = first.compile(&exp_plan("x")).unwrap().run(&[x3()]).unwrap();
    let exe = second.compile(&exp_plan("x")).unwrap();
    assert_eq!(exe.run(&[x3()]).unwrap(), on_first);
    assert_eq!(second.transfers().uploads, 1);

    // Memory of one device is refused by the other, and given back with the failure.
    let elsewhere = first.upload(&x3()).unwrap();
    let failure = exe
        .run_resident(vec![Bound {
            memory: elsewhere,
            donated: true,
        }])
        .unwrap_err();
    assert!(
        matches!(&failure.error, BackendError::InvalidBuffer { message }
            if message.contains("toy:1 was given memory of another backend")),
        "{:?}",
        failure.error
    );
    assert_eq!(first.download(&failure.inputs[0].memory).unwrap(), x3());
    assert!(second.download(&failure.inputs[0].memory).is_err());

    // Past the devices, and on a plugin of one device (the CPU), ordinals are refused.
    for (backend, ordinal) in [(&first, 2), (&first, 9)] {
        match registry.device(backend, ordinal) {
            Err(BackendError::Unsupported { op, device, .. }) => {
                assert_eq!(op, "device ordinal");
                assert_eq!(device, format!("toy:{ordinal}"));
            }
            other => panic!("{other:?}"),
        }
    }
    let cpu = Plugin::load(&built().cpu_plugin()).unwrap().open().unwrap();
    match cpu.open_device(1) {
        Err(BackendError::Unsupported { op, device, .. }) => {
            assert_eq!((op.as_str(), device.as_str()), ("device ordinal", "cpu:1"))
        }
        other => panic!("{other:?}"),
    }
}
