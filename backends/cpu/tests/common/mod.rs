//! Shared helpers of the CPU backend tests: deterministic inputs with special values, the
//! node-by-node reference evaluation, and bitwise comparison.

#![allow(dead_code)]

use quabla_backend::{Backend, Executable, HostTensor};
use quabla_cpu::{CpuBackend, CpuExecutable, CpuOptions};

use quabla_ir::{
    BinaryOp, Comparison, DType, Graph, GraphBuilder, HostData, NodeId, Plan, Region, RegionForm,
    RegionKind, ScanBody, Shape, TensorType, UnaryOp,
};
use std::sync::Arc;

/// The project's deterministic test generator.
pub use quabla_random::testing::TestRng as Rng;

pub fn shape(dims: &[usize]) -> Shape {
    Shape::new(dims.to_vec()).unwrap()
}

/// Host data of `dtype` from f64 values (bool: nonzero is true).
pub fn data(dtype: DType, values: &[f64]) -> HostData {
    HostData::from_f64(dtype, values.iter().copied())
}

/// A tensor of `dims` filled with [`Rng::value`] (bool: a mix of true and false).
pub fn random(rng: &mut Rng, dtype: DType, dims: &[usize]) -> HostTensor {
    let s = shape(dims);
    let values: Vec<f64> = (0..s.size())
        .map(|_| match dtype {
            DType::Bool => (rng.next_u64() % 2) as f64,
            _ => rng.value(),
        })
        .collect();
    HostTensor::new(s, data(dtype, &values))
}

/// A tensor of finite values.
pub fn random_finite(rng: &mut Rng, dtype: DType, dims: &[usize]) -> HostTensor {
    let s = shape(dims);
    let values: Vec<f64> = (0..s.size()).map(|_| rng.finite()).collect();
    HostTensor::new(s, data(dtype, &values))
}

/// The outputs of `graph` from the reference interpreter (`quabla_ir::interp`).
pub fn reference(graph: &Graph, inputs: &[HostTensor]) -> Vec<HostData> {
    let data: Vec<HostData> = inputs.iter().map(|t| t.data.clone()).collect();
    quabla_ir::interp::run_graph(graph, &data)
        .unwrap_or_else(|e| panic!("no reference value: {e}\n{graph}"))
}

/// Runs `graph` unoptimized (no folding) on the CPU backend.
pub fn run(graph: &Graph, inputs: &[HostTensor], options: CpuOptions) -> Vec<HostTensor> {
    let plan = Plan::from_graph_unoptimized(graph.clone());
    let exe = CpuBackend::with_options(options).compile(&plan).unwrap();
    exe.run(inputs).unwrap()
}

pub fn fused() -> CpuOptions {
    CpuOptions::default()
}

pub fn unfused() -> CpuOptions {
    CpuOptions {
        fuse_elementwise: false,
        ..CpuOptions::default()
    }
}

pub fn single_thread() -> CpuOptions {
    on_threads(1)
}

/// The default options with `threads` threads.
pub fn on_threads(threads: usize) -> CpuOptions {
    CpuOptions {
        threads,
        ..CpuOptions::default()
    }
}

/// Bit patterns of every element (bool as 0/1).
pub fn bits(d: &HostData) -> Vec<u64> {
    match d {
        HostData::F32(v) => v.iter().map(|x| x.to_bits() as u64).collect(),
        HostData::F64(v) => v.iter().map(|x| x.to_bits()).collect(),
        HostData::Bool(v) => v.iter().map(|&x| x as u64).collect(),
        HostData::I32(v) => v.iter().map(|&x| x as u32 as u64).collect(),
        HostData::I64(v) => v.iter().map(|&x| x as u64).collect(),
    }
}

/// Asserts identical dtype, length and bits of every element. NaN payloads (sign and
/// mantissa) are not compared: IEEE 754 and Rust leave them unspecified, and the compiler may
/// commute the operands of `+` and `*`, which changes which NaN propagates.
pub fn assert_bitwise(context: &str, got: &HostData, want: &HostData) {
    assert_eq!(got.dtype(), want.dtype(), "{context}: dtype");
    assert_eq!(got.len(), want.len(), "{context}: length");
    let (g, w) = (bits(got), bits(want));
    for i in 0..g.len() {
        let both_nan = got.get_f64(i).is_nan() && want.get_f64(i).is_nan();
        assert!(
            g[i] == w[i] || both_nan,
            "{context}: element {i} differs: got {} ({:#x}), want {} ({:#x})",
            got.get_f64(i),
            g[i],
            want.get_f64(i),
            w[i]
        );
    }
}

/// Runs `graph` fused, unfused and single-threaded and checks every output against the
/// node-by-node reference, bit for bit.
pub fn check_graph(context: &str, graph: &Graph, inputs: &[HostTensor]) {
    let want = reference(graph, inputs);
    for (label, options) in [
        ("fused", fused()),
        ("unfused", unfused()),
        ("1 thread", single_thread()),
    ] {
        let got = run(graph, inputs, options);
        assert_eq!(got.len(), want.len());
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                &g.shape,
                &graph.node(graph.outputs()[k]).ty.shape,
                "{context} ({label}): output {k} shape"
            );
            assert_bitwise(&format!("{context} ({label}) output {k}"), &g.data, w);
        }
    }
}

/// A graph whose inputs are `inputs` and whose outputs `f` returns.
pub fn graph(
    inputs: &[TensorType],
    f: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> Vec<NodeId>,
) -> Graph {
    let mut b = GraphBuilder::new();
    let ins: Vec<NodeId> = inputs
        .iter()
        .enumerate()
        .map(|(k, t)| b.input(format!("in{k}"), t.clone()))
        .collect();
    let outs = f(&mut b, &ins);
    b.finish(outs).unwrap()
}

/// Special and ordinary values: signed zeros, subnormals, huge, infinite and NaN values,
/// values at the edges of the inverse trigonometric and hyperbolic domains, and random ones.
pub fn special_values(rng: &mut Rng) -> Vec<f64> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.5,
        -2.5,
        3.0,
        1e-310,
        -1e-310,
        1e-40,
        1e300,
        -1e300,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        0.999,
        1.001,
        7.25,
        -30.0,
        710.0,
        1e-8,
    ];
    v.extend((0..8).map(|_| rng.finite()));
    v
}

/// An elementwise op under test, applied to one or two operands.
pub type Apply = Box<dyn Fn(&mut GraphBuilder, NodeId, NodeId) -> NodeId>;

/// Every elementwise op of the IR (comparisons through `where`, casts there and back).
pub fn every_op() -> Vec<(String, Apply)> {
    let mut ops: Vec<(String, Apply)> = Vec::new();
    for u in UnaryOp::ALL.into_iter().filter(|u| u.takes_floats()) {
        ops.push((
            u.name().into(),
            Box::new(move |b, x, _| b.unary(u, x).unwrap()),
        ));
    }
    for n in [-3, -2, -1, 0, 1, 2, 3, 7] {
        ops.push((
            format!("powi {n}"),
            Box::new(move |b, x, _| b.powi(x, n).unwrap()),
        ));
    }
    for op in BinaryOp::ALL.into_iter().filter(|op| op.takes_floats()) {
        ops.push((
            op.name().into(),
            Box::new(move |b, x, y| b.binary(op, x, y).unwrap()),
        ));
    }
    for c in Comparison::ALL {
        // A comparison's bool, brought back to the operands' dtype through `where`.
        ops.push((
            c.name().into(),
            Box::new(move |b, x, y| {
                let p = b.compare(c, x, y).unwrap();
                b.select(p, x, y).unwrap()
            }),
        ));
    }
    for to in [DType::F32, DType::F64, DType::Bool] {
        ops.push((
            format!("cast to {to}"),
            Box::new(move |b, x, _| {
                let dt = b.ty(x).dtype;
                let c = b.astype(x, to).unwrap();
                b.astype(c, dt).unwrap()
            }),
        ));
    }
    ops.push((
        "stop_gradient".into(),
        Box::new(|b, x, _| b.stop_gradient(x).unwrap()),
    ));
    ops
}

/// `g` compiled unoptimized, with machine code for loops and plans on (wherever it exists,
/// unweighed: `CpuOptions::native_always`) or off (`CpuOptions::native_loops`).
pub fn compile(g: &Graph, native_loops: bool) -> CpuExecutable {
    let options = CpuOptions {
        native_loops,
        native_always: native_loops,
        ..CpuOptions::default()
    };
    CpuBackend::with_options(options)
        .compile_plan(&Plan::from_graph_unoptimized(g.clone()))
        .unwrap()
}

/// A graph calling `region` on its inputs and returning every output.
pub fn calling(region: &Arc<Region>) -> Graph {
    graph(region.operand_types(), |b, p| {
        let n = region.output_types().len();
        b.push_region_calls(region.clone(), 0..n, p).unwrap()
    })
}

/// A graph of one `fori_loop` of `trips` iterations whose body is `body` (inputs: the index, a
/// float64 as the IR has it, then the carries of `carries`; outputs: the new carries).
pub fn fori(
    trips: usize,
    carries: &[TensorType],
    body: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> Vec<NodeId>,
) -> Graph {
    let mut inputs = vec![TensorType::new(DType::F64, shape(&[]))];
    inputs.extend(carries.iter().cloned());
    let body = graph(&inputs, body);
    let scan = ScanBody {
        length: trips,
        start: 0,
        reverse: false,
        n_carry: carries.len(),
        n_const: 0,
        n_xs: 0,
        body: Arc::new(body),
    };
    let region = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0).unwrap());
    calling(&region)
}

/// Compiles `g` both ways, checks that the report names native code only for the native
/// build, and checks equal bits on every input set.
pub fn check_both_ways(context: &str, g: &Graph, input_sets: &[Vec<HostTensor>]) {
    let native = compile(g, true);
    let interpreted = compile(g, false);
    // A loop's own line, not the line of a small plan compiled whole.
    let loop_native = |report: &str| {
        report
            .lines()
            .any(|l| l.contains("native code") && !l.contains("whole plan"))
    };
    assert!(
        loop_native(&native.report()),
        "{context}: not compiled to native code:\n{}",
        native.report()
    );
    assert!(
        !interpreted.report().contains("native code"),
        "{context}: native code although turned off:\n{}",
        interpreted.report()
    );
    for inputs in input_sets {
        let (got, want) = (
            native.run(inputs).unwrap(),
            interpreted.run(inputs).unwrap(),
        );
        let shown: Vec<f64> = inputs.iter().map(|t| t.data.get_f64(0)).collect();
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_bitwise(
                &format!("{context} on {shown:?}, output {k}"),
                &g.data,
                &w.data,
            );
        }
    }
}

/// Compiles `g` to native code as a whole plan and for the interpreter, checks that the
/// report says the plan runs native code only for the native build, and checks equal bits on
/// every input set.
pub fn check_plan_both_ways(context: &str, g: &Graph, input_sets: &[Vec<HostTensor>]) {
    let native = compile(g, true);
    assert!(
        native.compile_native_now(),
        "{context}: no native form:\n{}",
        native.report()
    );
    assert!(
        native.report().contains("whole plan: native code\n"),
        "{context}:\n{}",
        native.report()
    );
    let interpreted = compile(g, false);
    assert!(!interpreted.report().contains("whole plan"));
    for (set, inputs) in input_sets.iter().enumerate() {
        let got = native.run(inputs).unwrap();
        let want = interpreted.run(inputs).unwrap();
        assert_eq!(got.len(), want.len());
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.shape, w.shape, "{context}: shape of output {k}");
            assert_bitwise(
                &format!("{context}, input set {set}, output {k}"),
                &g.data,
                &w.data,
            );
        }
    }
}
