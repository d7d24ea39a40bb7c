//! The example third-party plugin (`backends/example-plugin`, the `toy` device) as an outside
//! author's plugin is used: built as a library, loaded by path with the registry's public API,
//! listed, selected by its own name, run, and checked by the conformance harness, where it
//! shows partial support.

use quabla_backend::registry::{plugin_file_name, Origin, PluginSearch, Registry, ResolveError};
use quabla_backend::{BackendError, HostTensor};
use quabla_conformance::plugins::{build, install, scratch_dir};
use quabla_conformance::{
    case, columns_of, run_case, run_matrix, tensor, Outcome, Subject, BUFFER_CASES, CASES,
};
use quabla_ir::{DType, GraphBuilder, Plan, Shape, TensorType, UnaryOp};

fn toy_path() -> std::path::PathBuf {
    build().unwrap_or_else(|e| panic!("{e}")).toy_plugin()
}

/// `sin(x) * x` over `[3]` f64.
fn plan() -> Plan {
    let mut b = GraphBuilder::new();
    let x = b.input(
        "x",
        TensorType::new(DType::F64, Shape::new(vec![3]).unwrap()),
    );
    let s = b.unary(UnaryOp::Sin, x).unwrap();
    let y = b.mul(s, x).unwrap();
    Plan::compile(&b.finish(vec![y]).unwrap())
}

fn x3() -> HostTensor {
    tensor(DType::F64, &[3], &[0.5, -1.0, 2.0])
}

#[test]
fn loaded_by_path_it_is_listed_selected_by_name_and_runs() {
    let registry = Registry::discover(&PluginSearch::none());
    let path = toy_path();
    let info = registry.load_plugin(&path).unwrap();
    assert_eq!(info.name, "toy");
    assert_eq!(info.origin, Origin::Plugin(path.clone()));
    assert!(info.available, "{info:?}");
    assert_eq!(info.version.as_deref(), Some(env!("CARGO_PKG_VERSION")));

    // Listed after the known backends.
    let names: Vec<String> = registry.devices().into_iter().map(|d| d.name).collect();
    assert_eq!(names, ["cpu", "cuda", "mlx", "toy"]);

    let backend = registry.backend("toy").unwrap();
    assert_eq!(backend.name(), "toy");
    let out = backend.compile(&plan()).unwrap().run(&[x3()]).unwrap();
    let expected: Vec<f64> = [0.5f64, -1.0, 2.0].iter().map(|&v| v.sin() * v).collect();
    assert_eq!(out, vec![tensor(DType::F64, &[3], &expected)]);

    // What it does not support is refused at compile time, naming the device.
    let mut b = GraphBuilder::new();
    let x = b.input(
        "x",
        TensorType::new(DType::F64, Shape::new(vec![2, 2]).unwrap()),
    );
    let y = b.push(quabla_ir::Op::Matmul, &[x, x]).unwrap();
    let matmul = Plan::compile(&b.finish(vec![y]).unwrap());
    match backend.compile(&matmul).unwrap_err() {
        BackendError::Unsupported { op, device, .. } => {
            assert_eq!((op.as_str(), device.as_str()), ("matmul", "toy"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn loading_the_same_file_again_returns_the_existing_entry() {
    let registry = Registry::discover(&PluginSearch::none());
    let path = toy_path();
    let first = registry.load_plugin(&path).unwrap();
    let count = registry.entries().len();
    // The same path, a symbolic link to it, another spelling of it, a hard link to it.
    let dir = scratch_dir("toy-twice");
    let link = install(&path, &dir, &plugin_file_name("toy"));
    let spelled = path
        .parent()
        .unwrap()
        .join(".")
        .join(path.file_name().unwrap());
    let mut paths = vec![path.clone(), link, spelled];
    let hard = dir.join("hard-link-to-toy");
    if std::fs::hard_link(&path, &hard).is_ok() {
        paths.push(hard);
    }
    for p in &paths {
        assert_eq!(registry.load_plugin(p).unwrap(), first, "{}", p.display());
    }
    assert_eq!(registry.entries().len(), count);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_folder_and_an_explicit_load_of_the_same_file_give_one_entry() {
    let dir = scratch_dir("toy-folder");
    install(&toy_path(), &dir, &plugin_file_name("toy"));
    let registry = Registry::discover(&PluginSearch::folders([dir.clone(), dir.join(".")]));
    let toys = |r: &Registry| r.entries().iter().filter(|e| e.name == "toy").count();
    assert_eq!(toys(&registry), 1);
    registry.load_plugin(toy_path()).unwrap();
    assert_eq!(toys(&registry), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_name_nothing_provides_is_not_found_until_loaded() {
    let registry = Registry::discover(&PluginSearch::none());
    assert!(matches!(
        registry.backend("toy"),
        Err(ResolveError::NotFound { .. })
    ));
    registry.load_plugin(toy_path()).unwrap();
    assert!(registry.backend("toy").is_ok());
}

#[test]
fn conformance_shows_partial_support_and_no_failure() {
    let registry = Registry::discover(&PluginSearch::none());
    registry.load_plugin(toy_path()).unwrap();
    let column = columns_of(&registry)
        .into_iter()
        .find(|c| c.label == "toy-plugin")
        .expect("a toy-plugin column");
    assert!(matches!(column.subject, Subject::Ready { .. }));

    // Seven of the unary functions are the toy's.
    let unary = run_case(case("unary_f64").unwrap(), &column);
    let total = case("unary_f64").unwrap().programs().len();
    assert_eq!(
        unary,
        match &unary {
            Outcome::Partial { why, .. } => Outcome::Partial {
                passed: 7,
                total,
                why: why.clone()
            },
            other => panic!("{other:?}"),
        }
    );
    assert_eq!(unary.cell(), format!("partial 7/{total}"));
    assert!(matches!(
        run_case(case("matmul").unwrap(), &column),
        Outcome::Unsupported(_)
    ));

    let matrix = run_matrix(vec![column]);
    assert_eq!(matrix.failures(), 0, "{matrix}");
    let text = matrix.to_string();
    assert!(text.contains(&format!("partial 7/{total}")), "{text}");
    let passed_or_partial = matrix
        .rows
        .iter()
        .filter(|(_, row)| matches!(row[0], Outcome::Pass | Outcome::Partial { .. }))
        .count();
    assert!(passed_or_partial >= 4, "{text}");
    assert_eq!(matrix.rows.len(), CASES.len() + BUFFER_CASES.len());
    // The toy keeps its values in memory of its own, and passes every buffer case.
    for case in BUFFER_CASES {
        let row = matrix.rows.iter().find(|(n, _)| *n == case.name).unwrap();
        assert_eq!(row.1[0], Outcome::Pass, "{}: {text}", case.name);
    }
}
