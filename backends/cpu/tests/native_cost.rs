//! The cost model that chooses between a loop's machine code and the interpreter, for loops
//! around nested regions: the interpreter's side counts the steps of the nested bodies as the
//! machine code's side counts their element passes (a scan's per trip, a while loop's once, a
//! `cond`'s costlier branch), a nested loop that would run as code of its own weighs on
//! neither side, and code too long for the backtracking register allocator leaves such a loop
//! its own code. Whichever form runs, the values are the interpreter's, bit for bit.

mod common;

use common::{assert_bitwise, graph};
use quabla_backend::{Executable, HostTensor};
use quabla_cpu::{CpuBackend, CpuExecutable, CpuOptions};
use quabla_ir::{
    BinaryOp, Comparison, DType, Graph, GraphBuilder, HostData, NodeId, Plan, Region, RegionForm,
    RegionKind, ScanBody, Shape, TensorType, UnaryOp,
};
use std::sync::Arc;

fn f64s(dims: &[usize]) -> TensorType {
    TensorType::new(DType::F64, Shape::new(dims.to_vec()).unwrap())
}

/// Compiles `g` with the default options (machine code where the cost model chooses it), or
/// with no machine code.
fn compile(g: &Graph, native_loops: bool) -> CpuExecutable {
    let options = CpuOptions {
        native_loops,
        ..CpuOptions::default()
    };
    CpuBackend::with_options(options)
        .compile_plan(&Plan::from_graph_unoptimized(g.clone()))
        .unwrap()
}

/// A graph calling `region` on its inputs and returning every output.
fn calling(region: &Arc<Region>) -> Graph {
    graph(region.operand_types(), |b, p| {
        let n = region.output_types().len();
        b.push_region_calls(region.clone(), 0..n, p).unwrap()
    })
}

/// A scan of `length` trips over carries of `carries` whose body is `body` (inputs: the
/// index, then the carries).
fn scan(
    length: usize,
    carries: &[TensorType],
    body: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> Vec<NodeId>,
) -> Arc<Region> {
    let mut inputs = vec![f64s(&[])];
    inputs.extend(carries.iter().cloned());
    let scan = ScanBody {
        length,
        start: 0,
        reverse: false,
        n_carry: carries.len(),
        n_const: 0,
        n_xs: 0,
        body: Arc::new(graph(&inputs, body)),
    };
    Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0).unwrap())
}

/// A while loop over `(t, carries..)` while `t < trips` (at most `trips + 2` trips), whose
/// body is `(t + 1, step(carries..))`.
fn while_loop(
    trips: usize,
    carries: &[TensorType],
    step: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> Vec<NodeId>,
) -> Arc<Region> {
    let mut inputs = vec![f64s(&[])];
    inputs.extend(carries.iter().cloned());
    let cond = graph(&inputs, |b, p| {
        let bound = b.scalar(trips as f64, DType::F64, false);
        vec![b.compare(Comparison::Less, p[0], bound).unwrap()]
    });
    let body = graph(&inputs, |b, p| {
        let one = b.scalar(1.0, DType::F64, false);
        let mut out = vec![b.binary(BinaryOp::Add, p[0], one).unwrap()];
        out.extend(step(b, &p[1..]));
        out
    });
    let kind = RegionKind::While {
        n_carry: inputs.len(),
        cond: Arc::new(cond),
        body: Arc::new(body),
        max_trips: Some(trips + 2),
    };
    Arc::new(Region::new(kind, RegionForm::While, 0).unwrap())
}

/// Elements of the vector the nested loops work on: more than machine registers hold.
const N: usize = 160;

/// One trip of work over `c` (`[N]`) in several interpreter steps (slices, a concatenation,
/// two reductions, an elementwise group): `tanh(c / 2 + rot(c) / 4) + (sum(c) - max(c)) / 1000`.
fn mix(b: &mut GraphBuilder, c: NodeId) -> NodeId {
    let head = b.slice(c, vec![1], vec![N - 1]).unwrap();
    let tail = b.slice(c, vec![0], vec![1]).unwrap();
    let rotated = b.concat(&[head, tail], 0).unwrap();
    let sum = b.sum(c, None, false).unwrap();
    let max = b.max(c, None, false).unwrap();
    let (half, quarter, milli) = (
        b.scalar(0.5, DType::F64, false),
        b.scalar(0.25, DType::F64, false),
        b.scalar(1e-3, DType::F64, false),
    );
    let a = b.binary(BinaryOp::Mul, c, half).unwrap();
    let r = b.binary(BinaryOp::Mul, rotated, quarter).unwrap();
    let t = b.binary(BinaryOp::Add, a, r).unwrap();
    let t = b.unary(UnaryOp::Tanh, t).unwrap();
    let spread = b.binary(BinaryOp::Sub, sum, max).unwrap();
    let spread = b.binary(BinaryOp::Mul, spread, milli).unwrap();
    b.binary(BinaryOp::Add, t, spread).unwrap()
}

/// The regions nested in the loops under test, each taking and giving one `[N]` vector: a
/// scan of 20 trips of [`mix`], a while loop of 6, and a `cond` whose branches each hold a
/// scan.
fn nested(kind: &str) -> Arc<Region> {
    let v = f64s(&[N]);
    match kind {
        "scan" => scan(20, std::slice::from_ref(&v), |b, p| vec![mix(b, p[1])]),
        "while" => while_loop(6, std::slice::from_ref(&v), |b, p| vec![mix(b, p[0])]),
        "cond" => {
            let inner = scan(20, std::slice::from_ref(&v), |b, p| vec![mix(b, p[1])]);
            let branch = |negate: bool| {
                let inner = inner.clone();
                Arc::new(graph(std::slice::from_ref(&v), move |b, p| {
                    let mut x = p[0];
                    if negate {
                        x = b.unary(UnaryOp::Neg, x).unwrap();
                    }
                    b.push_region_calls(inner, 0..1, &[x]).unwrap()
                }))
            };
            let kind = RegionKind::Cond {
                then_branch: branch(false),
                else_branch: branch(true),
            };
            Arc::new(Region::new(kind, RegionForm::Cond, 0).unwrap())
        }
        _ => unreachable!("{kind}"),
    }
}

/// Calls `region` (from [`nested`]) on `v` inside a body: a `cond` on `sum(v) > 0`.
fn call_nested(b: &mut GraphBuilder, kind: &str, region: &Arc<Region>, v: NodeId) -> NodeId {
    match kind {
        "while" => {
            let zero = b.scalar(0.0, DType::F64, false);
            b.push_region_calls(region.clone(), 0..2, &[zero, v])
                .unwrap()[1]
        }
        "cond" => {
            let zero = b.scalar(0.0, DType::F64, false);
            let total = b.sum(v, None, false).unwrap();
            let positive = b.compare(Comparison::Greater, total, zero).unwrap();
            b.push_region_calls(region.clone(), 0..1, &[positive, v])
                .unwrap()[0]
        }
        _ => b.push_region_calls(region.clone(), 0..1, &[v]).unwrap()[0],
    }
}

/// An outer loop of `outer` form (`fori` of 3 trips or a while loop of 3) over a vector of
/// `N` whose body is `body(v)`.
fn outer_loop(
    outer: &str,
    carries: &[TensorType],
    body: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> Vec<NodeId>,
) -> Graph {
    let region = match outer {
        "fori" => scan(3, carries, |b, p| body(b, &p[1..])),
        _ => while_loop(3, carries, body),
    };
    calling(&region)
}

/// The report's lines, with the first line (the plan's) left out.
fn loop_lines(exe: &CpuExecutable) -> Vec<String> {
    exe.report()
        .lines()
        .skip(1)
        .map(|l| l.trim().to_string())
        .collect()
}

/// Runs `g` chosen by the cost model and interpreted: the same bits.
fn same_bits(context: &str, g: &Graph, chosen: &CpuExecutable, inputs: &[HostTensor]) {
    let got = chosen.run(inputs).unwrap();
    let want = compile(g, false).run(inputs).unwrap();
    assert_eq!(got.len(), want.len(), "{context}");
    for (k, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_bitwise(&format!("{context}: output {k}"), &a.data, &b.data);
    }
}

fn vector(n: usize, sign: f64) -> HostTensor {
    HostTensor::new(
        Shape::new(vec![n]).unwrap(),
        HostData::F64((0..n).map(|i| sign * (i as f64 * 0.37).sin()).collect()),
    )
}

fn scalar(v: f64) -> HostTensor {
    HostTensor::new(Shape::scalar(), HostData::F64(vec![v].into()))
}

/// A loop whose own body is a step or two around a nested scan, while loop or `cond` of many
/// steps runs as machine code: the nested bodies' steps count on the interpreter's side as
/// their element passes count on the code's (before, the two or three steps of the outer body
/// alone were weighed against the nested passes, and such loops stayed interpreted).
#[test]
fn loops_around_nested_regions_of_many_steps_run_native_code() {
    for outer in ["fori", "while"] {
        for kind in ["scan", "while", "cond"] {
            let context = format!("{outer} around a nested {kind}");
            let region = nested(kind);
            let g = outer_loop(outer, &[f64s(&[N])], |b, p| {
                vec![call_nested(b, kind, &region, p[0])]
            });
            let exe = compile(&g, true);
            let lines = loop_lines(&exe);
            assert!(lines[0].ends_with(": native code"), "{context}: {lines:#?}");
            assert!(
                lines[1..]
                    .iter()
                    .all(|l| l.ends_with("in the enclosing loop's machine code")),
                "{context}: {lines:#?}"
            );
            let inputs: Vec<HostTensor> = match outer {
                "fori" => vec![vector(N, 1.0)],
                _ => vec![scalar(0.0), vector(N, 1.0)],
            };
            same_bits(&context, &g, &exe, &inputs);
            let mut negative = inputs.clone();
            *negative.last_mut().unwrap() = vector(N, -1.0);
            same_bits(&context, &g, &exe, &negative);
        }
    }
}

/// A loop whose own work in memory outweighs its steps stays interpreted when the loop nested
/// in it runs as code of its own anyway (a scalar scan of 400 trips: its steps are not saved
/// by the enclosing code, so they do not count), and when the nested loop's work loses to the
/// kernels too (a scan over 20,000 elements in one step a trip).
#[test]
fn loops_whose_own_work_loses_stay_interpreted_around_nested_loops() {
    const BIG: usize = 20_000;
    let big = f64s(&[BIG]);
    let decay = |b: &mut GraphBuilder, w: NodeId| {
        let k = b.scalar(0.999, DType::F64, false);
        let e = b.scalar(1e-3, DType::F64, false);
        let x = b.binary(BinaryOp::Mul, w, k).unwrap();
        let s = b.unary(UnaryOp::Sin, w).unwrap();
        let s = b.binary(BinaryOp::Mul, s, e).unwrap();
        b.binary(BinaryOp::Add, x, s).unwrap()
    };
    // The outer body's own `decay` over BIG elements, beside a scalar scan.
    let scalar_scan = scan(400, &[f64s(&[])], |b, p| {
        let half = b.scalar(0.5, DType::F64, false);
        let c = b.unary(UnaryOp::Cos, p[1]).unwrap();
        let c = b.binary(BinaryOp::Mul, c, half).unwrap();
        vec![b.binary(BinaryOp::Add, c, half).unwrap()]
    });
    // The nested scan's own `decay`, ten trips.
    let big_scan = scan(10, std::slice::from_ref(&big), |b, p| vec![decay(b, p[1])]);
    for outer in ["fori", "while"] {
        let g = outer_loop(outer, &[big.clone(), f64s(&[])], |b, p| {
            let s = b
                .push_region_calls(scalar_scan.clone(), 0..1, &[p[1]])
                .unwrap()[0];
            vec![decay(b, p[0]), s]
        });
        let exe = compile(&g, true);
        let lines = loop_lines(&exe);
        assert!(
            lines[0].contains("interpreted") && lines[0].contains("its kernels are faster"),
            "{outer} beside a scalar scan: {lines:#?}"
        );
        assert!(lines[1].ends_with(": native code"), "{lines:#?}");
        let mut inputs = vec![vector(BIG, 1.0), scalar(0.25)];
        if outer == "while" {
            inputs.insert(0, scalar(0.0));
        }
        same_bits(&format!("{outer} beside a scalar scan"), &g, &exe, &inputs);

        let g = outer_loop(outer, std::slice::from_ref(&big), |b, p| {
            b.push_region_calls(big_scan.clone(), 0..1, &[p[0]])
                .unwrap()
        });
        let exe = compile(&g, true);
        let lines = loop_lines(&exe);
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(
            lines
                .iter()
                .all(|l| l.contains("interpreted") && l.contains("its kernels are faster")),
            "{outer} around a large scan: {lines:#?}"
        );
        let mut inputs = vec![vector(BIG, 1.0)];
        if outer == "while" {
            inputs.insert(0, scalar(0.0));
        }
        same_bits(&format!("{outer} around a large scan"), &g, &exe, &inputs);
    }
}

/// A loop that pays off around a nested scan with code of its own, but whose code grows past
/// the backtracking register allocator's limit (a long chain of elementwise ops on a vector
/// held in registers), leaves the nested scan its own code and stays interpreted, saying why;
/// with a short chain it runs as one piece of machine code.
#[test]
fn long_loop_code_leaves_nested_loops_their_own_code() {
    let (small, v) = (f64s(&[64]), f64s(&[N]));
    let region = nested("scan");
    for (links, whole) in [(4, true), (120, false)] {
        let g = outer_loop("fori", &[small.clone(), v.clone()], |b, p| {
            let mut r = p[0];
            for link in 0..links {
                let k = b.scalar(1.0 + link as f64 * 1e-3, DType::F64, false);
                let op = if link % 2 == 0 {
                    BinaryOp::Mul
                } else {
                    BinaryOp::Add
                };
                r = b.binary(op, r, k).unwrap();
            }
            vec![r, call_nested(b, "scan", &region, p[1])]
        });
        let exe = compile(&g, true);
        let lines = loop_lines(&exe);
        if whole {
            assert!(lines[0].ends_with(": native code"), "{links}: {lines:#?}");
            assert!(
                lines[1].ends_with("in the enclosing loop's machine code"),
                "{links}: {lines:#?}"
            );
        } else {
            assert!(
                lines[0].contains("interpreted")
                    && lines[0].contains("nested loops that run as shorter code of their own"),
                "{links}: {lines:#?}"
            );
            assert!(lines[1].ends_with(": native code"), "{links}: {lines:#?}");
        }
        let inputs = vec![vector(64, 0.5), vector(N, 1.0)];
        same_bits(&format!("a chain of {links}"), &g, &exe, &inputs);
    }
}
