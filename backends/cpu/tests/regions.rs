//! Control-flow regions on the CPU backend: `cond`, `scan` (forward, reverse, with an offset
//! index) and `while`, nested in each other, in float32 and float64, each checked bit for bit
//! against the same computation spelled out as straight-line code (a `cond` as a `where` of
//! both branches, a `scan` as its iterations one after the other, a `while` as a host loop
//! over its spelled-out predicate and body), plus buffer reuse across iterations and errors
//! raised inside bodies.

mod common;

use common::graph;

use common::{assert_bitwise, fused, random_finite, shape, single_thread, unfused, Rng};
use quabla_backend::{Backend, BackendError, Executable, HostTensor};
use quabla_cpu::{CpuBackend, CpuOptions};
use quabla_ir::{
    BinaryOp, Comparison, DType, Graph, GraphBuilder, HostData, NodeId, Op, Plan, Region,
    RegionCall, RegionForm, RegionKind, ScanBody, Shape, TensorType, UnaryOp,
};
use std::collections::HashMap;
use std::sync::Arc;

fn tt(dtype: DType, dims: &[usize]) -> TensorType {
    TensorType::new(dtype, shape(dims))
}

/// Pushes one sibling node per output of `region` and returns them.
fn call(b: &mut GraphBuilder, region: &Arc<Region>, operands: &[NodeId]) -> Vec<NodeId> {
    let n = region.output_types().len();
    b.push_region_calls(region.clone(), 0..n, operands).unwrap()
}

/// A graph calling `region` on its inputs (one per operand) and returning every output.
fn calling(region: &Arc<Region>) -> Graph {
    graph(region.operand_types(), |b, p| call(b, region, p))
}

/// Random finite values of dtype `dt` for every operand of `region`.
fn random_operands(region: &Region, dt: DType, seed: u64) -> Vec<HostTensor> {
    let mut rng = Rng::new(seed);
    region
        .operand_types()
        .iter()
        .map(|t| random_finite(&mut rng, dt, t.shape.dims()))
        .collect()
}

/// Copies `g` into `b` with its inputs bound to `inputs`, spelling every `cond` and `scan`
/// out as straight-line code; returns the nodes of its outputs.
fn inline_unrolled(b: &mut GraphBuilder, g: &Graph, inputs: &[NodeId]) -> Vec<NodeId> {
    let mut remap: Vec<NodeId> = Vec::with_capacity(g.len());
    let mut calls: HashMap<(usize, Vec<NodeId>), Vec<NodeId>> = HashMap::new();
    let mut next_input = 0;
    for node in g.nodes() {
        let operands: Vec<NodeId> = node.operands.iter().map(|o| remap[o.index()]).collect();
        let id = match &node.op {
            Op::Input { .. } => {
                next_input += 1;
                inputs[next_input - 1]
            }
            Op::Region(call) => {
                let key = (Arc::as_ptr(&call.region) as usize, operands.clone());
                let outs = match calls.get(&key) {
                    Some(outs) => outs.clone(),
                    None => {
                        let outs = unroll_region(b, &call.region, &operands);
                        calls.insert(key, outs.clone());
                        outs
                    }
                };
                outs[call.output]
            }
            op => b.push(op.clone(), &operands).unwrap(),
        };
        remap.push(id);
    }
    g.outputs().iter().map(|o| remap[o.index()]).collect()
}

fn unroll_region(b: &mut GraphBuilder, region: &Region, operands: &[NodeId]) -> Vec<NodeId> {
    match region.kind() {
        RegionKind::Cond {
            then_branch,
            else_branch,
        } => {
            let t = inline_unrolled(b, then_branch, &operands[1..]);
            let e = inline_unrolled(b, else_branch, &operands[1..]);
            t.iter()
                .zip(&e)
                .map(|(&t, &e)| b.select(operands[0], t, e).unwrap())
                .collect()
        }
        RegionKind::Scan(s) => unroll_scan(b, s, operands),
        RegionKind::While { .. } => panic!("while loops are checked with a host loop"),
    }
}

fn unroll_scan(b: &mut GraphBuilder, s: &ScanBody, operands: &[NodeId]) -> Vec<NodeId> {
    let (nc, nk) = (s.n_carry, s.n_const);
    let mut carries = operands[..nc].to_vec();
    let mut ys: Vec<Vec<Option<NodeId>>> = vec![vec![None; s.length]; s.n_ys()];
    let order: Vec<usize> = if s.reverse {
        (0..s.length).rev().collect()
    } else {
        (0..s.length).collect()
    };
    for k in order {
        let mut ins = vec![b.scalar((s.start + k) as f64, s.index_dtype(), false)];
        ins.extend(&carries);
        ins.extend(&operands[nc..nc + nk]);
        for &x in &operands[nc + nk..] {
            let dims = b.ty(x).shape.dims().to_vec();
            let mut starts = vec![0; dims.len()];
            starts[0] = k;
            let mut sizes = dims.clone();
            sizes[0] = 1;
            let row = b.slice(x, starts, sizes).unwrap();
            ins.push(b.reshape_to(row, shape(&dims[1..])).unwrap());
        }
        let outs = inline_unrolled(b, &s.body, &ins);
        carries = outs[..nc].to_vec();
        for (y, &o) in outs[nc..].iter().enumerate() {
            let mut dims = vec![1];
            dims.extend_from_slice(b.ty(o).shape.dims());
            ys[y][k] = Some(b.reshape_to(o, shape(&dims)).unwrap());
        }
    }
    let mut outs = carries;
    for parts in ys {
        let parts: Vec<NodeId> = parts.into_iter().map(Option::unwrap).collect();
        outs.push(b.concat(&parts, 0).unwrap());
    }
    outs
}

/// `g` with every `cond` and `scan` spelled out.
fn unrolled(g: &Graph) -> Graph {
    let types: Vec<TensorType> = g.inputs().map(|(_, _, t)| t.clone()).collect();
    graph(&types, |b, ins| inline_unrolled(b, g, ins))
}

fn run_with(plan: &Plan, inputs: &[HostTensor], options: CpuOptions) -> Vec<HostTensor> {
    let exe = CpuBackend::with_options(options).compile(plan).unwrap();
    exe.run(inputs).unwrap()
}

/// Runs the region graph `g` as it is and through the plan passes, fused, unfused and on one
/// thread, and checks every output bit for bit against `want`.
fn check_against(context: &str, g: &Graph, inputs: &[HostTensor], want: &[HostTensor]) {
    let plans = [
        ("as built", Plan::from_graph_unoptimized(g.clone())),
        ("passes", Plan::compile(g)),
    ];
    for (plan_label, plan) in &plans {
        for (label, options) in [
            ("fused", fused()),
            ("unfused", unfused()),
            ("1 thread", single_thread()),
        ] {
            let got = run_with(plan, inputs, options);
            assert_eq!(got.len(), want.len(), "{context}");
            for (k, (g, w)) in got.iter().zip(want).enumerate() {
                assert_eq!(
                    g.shape, w.shape,
                    "{context} ({plan_label}, {label}) output {k}"
                );
                assert_bitwise(
                    &format!("{context} ({plan_label}, {label}) output {k}"),
                    &g.data,
                    &w.data,
                );
            }
        }
    }
}

/// Checks `g` against its straight-line spelling.
fn check(context: &str, g: &Graph, inputs: &[HostTensor]) {
    let flat = unrolled(g);
    assert!(
        flat.nodes().iter().all(|n| !matches!(n.op, Op::Region(_))),
        "{context}: the reference still has regions"
    );
    let want = run_with(&Plan::from_graph_unoptimized(flat), inputs, fused());
    check_against(context, g, inputs, &want);
}

fn scalar(dtype: DType, v: f64) -> HostTensor {
    HostTensor::new(Shape::scalar(), HostData::from_f64(dtype, [v]))
}

fn pred(v: bool) -> HostTensor {
    HostTensor::new(Shape::scalar(), HostData::Bool(vec![v].into()))
}

/// Branches over `(x: [5], a: [])` returning `([5], [], [5])`; the then-branch returns `x`
/// itself as its last output.
fn cond_region(dt: DType) -> Arc<Region> {
    let ins = [tt(dt, &[5]), tt(dt, &[])];
    let then_branch = graph(&ins, |b, p| {
        let (x, a) = (p[0], p[1]);
        let xa = b.mul(x, a).unwrap();
        let one = b.scalar(1.0, dt, false);
        let u = b.add(xa, one).unwrap();
        let s = b.sum(x, None, false).unwrap();
        vec![u, s, x]
    });
    let else_branch = graph(&ins, |b, p| {
        let (x, a) = (p[0], p[1]);
        let sx = b.unary(UnaryOp::Sin, x).unwrap();
        let u = b.sub(sx, a).unwrap();
        let two = b.scalar(2.0, dt, false);
        let s = b.mul(a, two).unwrap();
        let e = b.unary(UnaryOp::Exp, x).unwrap();
        vec![u, s, e]
    });
    let kind = RegionKind::Cond {
        then_branch: Arc::new(then_branch),
        else_branch: Arc::new(else_branch),
    };
    Arc::new(Region::new(kind, RegionForm::Cond, 0).unwrap())
}

#[test]
fn cond_runs_the_selected_branch_with_every_output() {
    let mut rng = Rng::new(11);
    for dt in [DType::F32, DType::F64] {
        let region = cond_region(dt);
        let ins = [tt(DType::Bool, &[]), tt(dt, &[5]), tt(dt, &[])];
        let g = graph(&ins, |b, p| {
            let outs = call(b, &region, p);
            // A consumer of two siblings, so the group feeds later steps too.
            let twice = b.add(outs[0], outs[1]).unwrap();
            vec![outs[0], outs[1], outs[2], twice]
        });
        // Only the first output used: the other siblings are absent.
        let g_one = graph(&ins, |b, p| {
            let o = b
                .push(
                    Op::Region(RegionCall {
                        region: region.clone(),
                        output: 1,
                    }),
                    p,
                )
                .unwrap();
            vec![o]
        });
        for p in [true, false] {
            let inputs = [
                pred(p),
                random_finite(&mut rng, dt, &[5]),
                scalar(dt, rng.finite()),
            ];
            check(&format!("cond {dt:?} {p}"), &g, &inputs);
            check(&format!("cond one output {dt:?} {p}"), &g_one, &inputs);
        }
    }
}

/// The branch not taken never runs: it would fail on a singular system.
#[test]
fn cond_does_not_run_the_other_branch() {
    let ins = [tt(DType::F64, &[2, 2]), tt(DType::F64, &[2, 1])];
    let solve = graph(&ins, |b, p| {
        vec![b
            .push(Op::Solve { transpose_a: false }, &[p[0], p[1]])
            .unwrap()]
    });
    let pass = graph(&ins, |b, p| {
        let two = b.scalar(2.0, DType::F64, false);
        vec![b.mul(p[1], two).unwrap()]
    });
    let kind = RegionKind::Cond {
        then_branch: Arc::new(pass),
        else_branch: Arc::new(solve),
    };
    let region = Arc::new(Region::new(kind, RegionForm::Cond, 0).unwrap());
    let outer = [tt(DType::Bool, &[]), ins[0].clone(), ins[1].clone()];
    let g = graph(&outer, |b, p| call(b, &region, p));
    let singular = HostTensor::new(
        shape(&[2, 2]),
        HostData::F64(vec![1.0, 2.0, 2.0, 4.0].into()),
    );
    let rhs = HostTensor::new(shape(&[2, 1]), HostData::F64(vec![1.0, 3.0].into()));
    let exe = CpuBackend::default().compile(&Plan::compile(&g)).unwrap();
    let out = exe
        .run(&[pred(true), singular.clone(), rhs.clone()])
        .unwrap();
    assert_eq!(out[0].data, HostData::F64(vec![2.0, 6.0].into()));
    let err = exe.run(&[pred(false), singular, rhs]).unwrap_err();
    assert!(matches!(err, BackendError::Singular { .. }), "{err}");
}

/// A scan with three carries (the third never read, only replaced), two constants, two
/// scanned operands and two stacked outputs, whose body reads the index:
/// `(i, c1: [3], c2: [], c3: [3], k1: [3], k2: [], x1: [3], x2: [])`.
fn scan_region(dt: DType, length: usize, start: usize, reverse: bool) -> Arc<Region> {
    let ins = [
        tt(dt, &[]),
        tt(dt, &[3]),
        tt(dt, &[]),
        tt(dt, &[3]),
        tt(dt, &[3]),
        tt(dt, &[]),
        tt(dt, &[3]),
        tt(dt, &[]),
    ];
    let body = graph(&ins, |b, p| {
        let (i, c1, c2, k1, k2, x1, x2) = (p[0], p[1], p[2], p[4], p[5], p[6], p[7]);
        let a = b.mul(c1, k1).unwrap();
        let xi = b.mul(x1, i).unwrap();
        let c1n = b.add(a, xi).unwrap();
        let t = b.unary(UnaryOp::Tanh, c1n).unwrap();
        let sx = b.sum(x1, None, false).unwrap();
        let m = b.mul(sx, x2).unwrap();
        let c2a = b.add(c2, m).unwrap();
        let c2n = b.add(c2a, k2).unwrap();
        let y1 = b.sub(t, x1).unwrap();
        let y2 = b.mul(c2, i).unwrap();
        let c3n = b.mul(x1, k1).unwrap();
        vec![c1n, c2n, c3n, y1, y2]
    });
    let scan = ScanBody {
        length,
        start,
        reverse,
        n_carry: 3,
        n_const: 2,
        n_xs: 2,
        body: Arc::new(body),
    };
    Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Scan, 0).unwrap())
}

fn scan_inputs(rng: &mut Rng, dt: DType, length: usize) -> Vec<HostTensor> {
    let mut k1 = random_finite(rng, dt, &[3]);
    // Contracting constants keep the carries finite over the iterations.
    k1.data = HostData::from_f64(dt, k1.data.to_f64_vec().iter().map(|v| v / 8.0));
    vec![
        random_finite(rng, dt, &[3]),
        scalar(dt, rng.finite()),
        random_finite(rng, dt, &[3]),
        k1,
        scalar(dt, rng.finite()),
        random_finite(rng, dt, &[length, 3]),
        random_finite(rng, dt, &[length]),
    ]
}

#[test]
fn scan_forward_and_reverse_with_carries_constants_and_stacked_outputs() {
    let mut rng = Rng::new(21);
    for dt in [DType::F32, DType::F64] {
        for reverse in [false, true] {
            for (length, start) in [(1, 0), (6, 0), (5, 3)] {
                let region = scan_region(dt, length, start, reverse);
                let types: Vec<TensorType> = region.operand_types().to_vec();
                let g = graph(&types, |b, p| call(b, &region, p));
                // Only the stacked outputs, the second one twice (siblings of one output).
                let g_ys = graph(&types, |b, p| {
                    let mut y = |output| {
                        let op = Op::Region(RegionCall {
                            region: region.clone(),
                            output,
                        });
                        b.push(op, p).unwrap()
                    };
                    let (a, c, d) = (y(4), y(3), y(4));
                    vec![a, c, d]
                });
                // The five sibling nodes are one step that fills five buffers.
                let exe = CpuBackend::default()
                    .compile_plan(&Plan::from_graph_unoptimized(g.clone()))
                    .unwrap();
                assert_eq!((exe.stats().steps, exe.stats().buffers), (1, 5));
                let inputs = scan_inputs(&mut rng, dt, length);
                let ctx = format!("scan {dt:?} length {length} start {start} reverse {reverse}");
                check(&ctx, &g, &inputs);
                check(&format!("{ctx}, stacked only"), &g_ys, &inputs);
            }
        }
    }
}

/// `fori_loop(lower, lower + length, c -> c * 0.999999 + 1e-6 + i * 1e-3)`.
fn fori_region(dt: DType, length: usize, start: usize) -> Arc<Region> {
    let body = graph(&[tt(dt, &[]), tt(dt, &[])], |b, p| {
        let (i, c) = (p[0], p[1]);
        let k = b.scalar(0.999999, dt, false);
        let e = b.scalar(1e-6, dt, false);
        let s = b.scalar(1e-3, dt, false);
        let ck = b.mul(c, k).unwrap();
        let ce = b.add(ck, e).unwrap();
        let is = b.mul(i, s).unwrap();
        vec![b.add(ce, is).unwrap()]
    });
    let scan = ScanBody {
        length,
        start,
        reverse: false,
        n_carry: 1,
        n_const: 0,
        n_xs: 0,
        body: Arc::new(body),
    };
    Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0).unwrap())
}

#[test]
fn fori_with_a_lower_bound_reads_the_offset_index() {
    for dt in [DType::F32, DType::F64] {
        for (length, start) in [(50, 7), (3, 1000)] {
            let region = fori_region(dt, length, start);
            let g = graph(&[tt(dt, &[])], |b, p| call(b, &region, p));
            check(
                &format!("fori {dt:?} {start}..{}", start + length),
                &g,
                &[scalar(dt, 0.25)],
            );
        }
    }
    // The index is the offset one: a body returning `i` ends on `start + length - 1`.
    let body = graph(&[tt(DType::F64, &[]), tt(DType::F64, &[])], |_, p| {
        vec![p[0]]
    });
    let scan = ScanBody {
        length: 4,
        start: 10,
        reverse: false,
        n_carry: 1,
        n_const: 0,
        n_xs: 0,
        body: Arc::new(body),
    };
    let region = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0).unwrap());
    let g = graph(&[tt(DType::F64, &[])], |b, p| call(b, &region, p));
    let out = run_with(&Plan::compile(&g), &[scalar(DType::F64, -1.0)], fused());
    assert_eq!(out[0].data, HostData::F64(vec![13.0].into()));
}

/// A body that passes values through: carries swapped, a constant and the index returned as
/// carries, one result returned as two carries, a scanned slice returned as a stacked output.
#[test]
fn scan_bodies_that_return_their_inputs() {
    let dt = DType::F64;
    let v = tt(dt, &[2]);
    let ins = [
        tt(dt, &[]),
        v.clone(),
        v.clone(),
        tt(dt, &[]),
        v.clone(),
        v.clone(),
        v.clone(),
        v.clone(),
    ];
    // Carries (a, b, c, d, e), the constant k and the slice x; the body returns the carries
    // (b, a + x, i, k, a + x) and the stacked (k, x, a + x).
    let body = graph(&ins, |b, p| {
        let (i, a, bb, k, x) = (p[0], p[1], p[2], p[6], p[7]);
        let ax = b.add(a, x).unwrap();
        vec![bb, ax, i, k, ax, k, x, ax]
    });
    let scan = ScanBody {
        length: 4,
        start: 2,
        reverse: true,
        n_carry: 5,
        n_const: 1,
        n_xs: 1,
        body: Arc::new(body),
    };
    let region = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Scan, 0).unwrap());
    let g = calling(&region);
    let inputs = random_operands(&region, dt, 5);
    check("pass-through scan", &g, &inputs);
}

/// A scan whose every value is a scalar (the loop runs on plain numbers): float and bool
/// carries, one of them never read, a constant and a vector constant the body never reads, a
/// scanned operand, and a float and a bool stacked output. Body
/// `(i, c1, c2, flag, c3, k, unused, x)`.
#[test]
fn scalar_scans_with_bool_carries_slices_and_stacked_outputs() {
    let mut rng = Rng::new(23);
    for dt in [DType::F32, DType::F64] {
        for reverse in [false, true] {
            let s = tt(dt, &[]);
            let ins = [
                s.clone(),
                s.clone(),
                s.clone(),
                tt(DType::Bool, &[]),
                s.clone(),
                s.clone(),
                tt(dt, &[4]),
                s.clone(),
            ];
            let body = graph(&ins, |b, p| {
                let (i, c1, c2, flag, k, x) = (p[0], p[1], p[2], p[3], p[5], p[7]);
                let ck = b.mul(c1, k).unwrap();
                let xi = b.mul(x, i).unwrap();
                let c1n = b.add(ck, xi).unwrap();
                let up = b.add(c2, x).unwrap();
                let one = b.scalar(1.0, dt, false);
                let down = b.sub(c2, one).unwrap();
                let c2n = b.select(flag, up, down).unwrap();
                let flagn = b.compare(Comparison::Greater, c1n, c2n).unwrap();
                let c3n = b.unary(UnaryOp::Sin, x).unwrap();
                let two = b.scalar(2.0, dt, false);
                let y = b.mul(c1n, two).unwrap();
                vec![c1n, c2n, flagn, c3n, y, flag]
            });
            let scan = ScanBody {
                length: 9,
                start: 2,
                reverse,
                n_carry: 4,
                n_const: 2,
                n_xs: 1,
                body: Arc::new(body),
            };
            let region =
                Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Scan, 0).unwrap());
            let g = calling(&region);
            let inputs = vec![
                scalar(dt, rng.finite()),
                scalar(dt, rng.finite()),
                pred(true),
                scalar(dt, rng.finite()),
                scalar(dt, 0.5),
                random_finite(&mut rng, dt, &[4]),
                random_finite(&mut rng, dt, &[9]),
            ];
            check(
                &format!("scalar scan {dt:?} reverse {reverse}"),
                &g,
                &inputs,
            );
        }
    }
}

/// A float32 index past 2^24 is rounded to float32, as a float32 constant would be.
#[test]
fn float32_indices_round() {
    let start = (1 << 24) - 2;
    for dt in [DType::F32, DType::F64] {
        // Stack the index itself, and a vector built from it (not a scalar body).
        let body = graph(&[tt(dt, &[]), tt(dt, &[2])], |b, p| {
            let v = b.add(p[1], p[0]).unwrap();
            vec![v, p[0]]
        });
        let scan = ScanBody {
            length: 5,
            start,
            reverse: false,
            n_carry: 1,
            n_const: 0,
            n_xs: 0,
            body: Arc::new(body),
        };
        let region = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0).unwrap());
        let g = graph(&[tt(dt, &[2])], |b, p| call(b, &region, p));
        let zeros = HostTensor::new(shape(&[2]), HostData::from_f64(dt, [0.0, 0.0]));
        check(&format!("index {dt:?}"), &g, std::slice::from_ref(&zeros));
        let out = run_with(&Plan::compile(&g), &[zeros], fused());
        let indices = (start..start + 5).map(|i| i as f64);
        assert_eq!(out[1].data, HostData::from_f64(dt, indices), "{dt:?}");
    }
    // Past 2^24 float32 has no odd integers: 2^24 + 1 rounds to 2^24.
    assert_eq!(
        HostData::from_f64(DType::F32, [16_777_217.0]).get_f64(0),
        16_777_216.0
    );
}

/// Bodies above the size that keeps every buffer between iterations release values at their
/// last use and move carries through the pool: a scan and a while loop over 300 000 elements.
#[test]
fn large_loop_bodies() {
    let n = 300_000;
    let mut rng = Rng::new(77);
    for dt in [DType::F32, DType::F64] {
        let ins = [tt(dt, &[]), tt(dt, &[n]), tt(dt, &[n])];
        let body = graph(&ins, |b, p| {
            let (i, c, k) = (p[0], p[1], p[2]);
            let ck = b.mul(c, k).unwrap();
            let s = b.unary(UnaryOp::Sin, ck).unwrap();
            let t = b.add(s, i).unwrap();
            let m = b.max(t, None, false).unwrap();
            vec![t, m]
        });
        let scan = ScanBody {
            length: 3,
            start: 1,
            reverse: true,
            n_carry: 1,
            n_const: 1,
            n_xs: 0,
            body: Arc::new(body),
        };
        let region = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Scan, 0).unwrap());
        let types: Vec<TensorType> = region.operand_types().to_vec();
        let g = graph(&types, |b, p| call(b, &region, p));
        let inputs = vec![
            random_finite(&mut rng, dt, &[n]),
            random_finite(&mut rng, dt, &[n]),
        ];
        check(&format!("large scan {dt:?}"), &g, &inputs);

        let ins = [tt(dt, &[]), tt(dt, &[n]), tt(dt, &[n])];
        let cond = graph(&ins, |b, p| {
            let three = b.scalar(3.0, dt, false);
            vec![b.compare(Comparison::Less, p[0], three).unwrap()]
        });
        let body = graph(&ins, |b, p| {
            let (i, c, k) = (p[0], p[1], p[2]);
            let one = b.scalar(1.0, dt, false);
            let ck = b.mul(c, k).unwrap();
            vec![b.add(i, one).unwrap(), b.unary(UnaryOp::Cos, ck).unwrap()]
        });
        let kind = RegionKind::While {
            n_carry: 2,
            cond: Arc::new(cond),
            body: Arc::new(body),
            max_trips: None,
        };
        let region = Arc::new(Region::new(kind, RegionForm::While, 0).unwrap());
        let g = calling(&region);
        let inputs = vec![
            scalar(dt, 0.0),
            random_finite(&mut rng, dt, &[n]),
            random_finite(&mut rng, dt, &[n]),
        ];
        let (want, trips) = while_reference(&region, &inputs);
        assert_eq!(trips, 3);
        check_against(&format!("large while {dt:?}"), &g, &inputs, &want);
    }
}

/// A while loop over scalars, with a bool carry the body sets and reads.
#[test]
fn scalar_while_with_a_bool_carry() {
    for dt in [DType::F32, DType::F64] {
        let s = tt(dt, &[]);
        let ins = [s.clone(), s.clone(), tt(DType::Bool, &[]), s.clone()];
        let cond = graph(&ins, |b, p| {
            vec![b.compare(Comparison::Less, p[0], p[3]).unwrap()]
        });
        let body = graph(&ins, |b, p| {
            let (i, x, done) = (p[0], p[1], p[2]);
            let one = b.scalar(1.0, dt, false);
            let k = b.scalar(1.5, dt, false);
            let q = b.scalar(0.1, dt, false);
            let xk = b.mul(x, k).unwrap();
            let grown = b.add(xk, q).unwrap();
            let x1 = b.select(done, x, grown).unwrap();
            let ten = b.scalar(10.0, dt, false);
            let done1 = b.compare(Comparison::Greater, x1, ten).unwrap();
            vec![b.add(i, one).unwrap(), x1, done1]
        });
        let kind = RegionKind::While {
            n_carry: 3,
            cond: Arc::new(cond),
            body: Arc::new(body),
            max_trips: None,
        };
        let region = Arc::new(Region::new(kind, RegionForm::While, 0).unwrap());
        let g = calling(&region);
        for (limit, trips) in [(12.0, 12), (0.0, 0)] {
            let inputs = vec![
                scalar(dt, 0.0),
                scalar(dt, 0.3),
                pred(false),
                scalar(dt, limit),
            ];
            let (want, n) = while_reference(&region, &inputs);
            assert_eq!(n, trips);
            check_against(&format!("scalar while {dt:?} {limit}"), &g, &inputs, &want);
        }
    }
}

/// `while i < limit: (i + 1, acc * 0.5 + v * i)` with constants `(limit, v)`.
fn while_region_bounded(dt: DType, max_trips: Option<usize>) -> Arc<Region> {
    let ins = [tt(dt, &[]), tt(dt, &[4]), tt(dt, &[]), tt(dt, &[4])];
    let cond = graph(&ins, |b, p| {
        vec![b.compare(Comparison::Less, p[0], p[2]).unwrap()]
    });
    let body = graph(&ins, |b, p| {
        let (i, acc, v) = (p[0], p[1], p[3]);
        let one = b.scalar(1.0, dt, false);
        let half = b.scalar(0.5, dt, false);
        let i1 = b.add(i, one).unwrap();
        let h = b.mul(acc, half).unwrap();
        let vi = b.mul(v, i).unwrap();
        vec![i1, b.add(h, vi).unwrap()]
    });
    let kind = RegionKind::While {
        n_carry: 2,
        cond: Arc::new(cond),
        body: Arc::new(body),
        max_trips,
    };
    Arc::new(Region::new(kind, RegionForm::While, 0).unwrap())
}

/// The outputs of a `while` region computed by a host loop over its predicate and body graphs
/// (each spelled out and run on the CPU backend).
fn while_reference(region: &Region, inputs: &[HostTensor]) -> (Vec<HostTensor>, usize) {
    let RegionKind::While {
        n_carry,
        cond,
        body,
        max_trips,
    } = region.kind()
    else {
        panic!("not a while region");
    };
    let cond = Plan::from_graph_unoptimized(unrolled(cond));
    let body = Plan::from_graph_unoptimized(unrolled(body));
    let mut carries: Vec<HostTensor> = inputs[..*n_carry].to_vec();
    let mut trips = 0;
    loop {
        let mut args = carries.clone();
        args.extend_from_slice(&inputs[*n_carry..]);
        let p = run_with(&cond, &args, fused());
        if p[0].data == HostData::Bool(vec![false].into()) || Some(trips) == *max_trips {
            return (carries, trips);
        }
        carries = run_with(&body, &args, fused());
        trips += 1;
    }
}

/// Runs `while_region_bounded(dt, max_trips)` from counters `i0` up to `limit` and checks the
/// trips taken and the values against the host loop.
fn check_while(seed: u64, max_trips: Option<usize>, cases: [(f64, f64, usize); 3]) {
    let mut rng = Rng::new(seed);
    for dt in [DType::F32, DType::F64] {
        let region = while_region_bounded(dt, max_trips);
        let g = calling(&region);
        for (i0, limit, trips) in cases {
            let inputs = vec![
                scalar(dt, i0),
                random_finite(&mut rng, dt, &[4]),
                scalar(dt, limit),
                random_finite(&mut rng, dt, &[4]),
            ];
            let (want, n) = while_reference(&region, &inputs);
            assert_eq!(n, trips);
            assert_eq!(want[0].data.get_f64(0), i0 + trips as f64);
            let name = format!("while (max_trips {max_trips:?}) {dt:?} {i0} < {limit}");
            check_against(&name, &g, &inputs, &want);
        }
    }
}

#[test]
fn while_loops_until_the_predicate_fails() {
    check_while(31, None, [(0.0, 7.0, 7), (2.5, 3.0, 1), (5.0, 1.0, 0)]);
}

#[test]
fn a_bounded_while_stops_at_its_bound_or_earlier() {
    // 7 trips wanted: stopped after 4. 1 trip wanted: the predicate stops it.
    check_while(37, Some(4), [(0.0, 7.0, 4), (2.5, 3.0, 1), (5.0, 1.0, 0)]);
}

/// An outer scan over rows whose body runs an inner `fori` over the outer carry, reading the
/// outer index and the current row as the inner loop's constants.
#[test]
fn scan_inside_a_scan_body() {
    for dt in [DType::F32, DType::F64] {
        let inner_ins = [tt(dt, &[]), tt(dt, &[4]), tt(dt, &[4]), tt(dt, &[])];
        let inner_body = graph(&inner_ins, |b, p| {
            let (j, c, x, outer_i) = (p[0], p[1], p[2], p[3]);
            let k = b.scalar(0.75, dt, false);
            let ck = b.mul(c, k).unwrap();
            let ji = b.mul(j, outer_i).unwrap();
            let xj = b.mul(x, ji).unwrap();
            let c1 = b.add(ck, xj).unwrap();
            vec![c1, b.sum(c1, None, false).unwrap()]
        });
        let inner = Arc::new(
            Region::new(
                RegionKind::Scan(ScanBody {
                    length: 3,
                    start: 1,
                    reverse: false,
                    n_carry: 1,
                    n_const: 2,
                    n_xs: 0,
                    body: Arc::new(inner_body),
                }),
                RegionForm::Scan,
                0,
            )
            .unwrap(),
        );
        let outer_ins = [tt(dt, &[]), tt(dt, &[4]), tt(dt, &[4])];
        let outer_body = graph(&outer_ins, |b, p| {
            let (i, c, x) = (p[0], p[1], p[2]);
            let r = call(b, &inner, &[c, x, i]);
            let t = b.unary(UnaryOp::Tanh, r[0]).unwrap();
            vec![t, r[1]]
        });
        let outer = Arc::new(
            Region::new(
                RegionKind::Scan(ScanBody {
                    length: 5,
                    start: 0,
                    reverse: true,
                    n_carry: 1,
                    n_const: 0,
                    n_xs: 1,
                    body: Arc::new(outer_body),
                }),
                RegionForm::Scan,
                0,
            )
            .unwrap(),
        );
        let g = calling(&outer);
        let mut rng = Rng::new(41);
        let inputs = vec![
            random_finite(&mut rng, dt, &[4]),
            random_finite(&mut rng, dt, &[5, 4]),
        ];
        check(&format!("nested scan {dt:?}"), &g, &inputs);
    }
}

/// A while loop whose body branches on its carry: halve the accumulator while its sum is
/// above a threshold, else add one.
#[test]
fn cond_inside_a_while_body() {
    for dt in [DType::F32, DType::F64] {
        let branch_ins = [tt(dt, &[3])];
        let halve = graph(&branch_ins, |b, p| {
            let h = b.scalar(0.5, dt, false);
            vec![b.mul(p[0], h).unwrap()]
        });
        let bump = graph(&branch_ins, |b, p| {
            let one = b.scalar(1.0, dt, false);
            vec![b.add(p[0], one).unwrap()]
        });
        let branch = Arc::new(
            Region::new(
                RegionKind::Cond {
                    then_branch: Arc::new(halve),
                    else_branch: Arc::new(bump),
                },
                RegionForm::Cond,
                0,
            )
            .unwrap(),
        );
        let ins = [tt(dt, &[]), tt(dt, &[3]), tt(dt, &[])];
        let cond = graph(&ins, |b, p| {
            let ten = b.scalar(10.0, dt, false);
            vec![b.compare(Comparison::Less, p[0], ten).unwrap()]
        });
        let body = graph(&ins, |b, p| {
            let (i, acc, threshold) = (p[0], p[1], p[2]);
            let s = b.sum(acc, None, false).unwrap();
            let big = b.compare(Comparison::Greater, s, threshold).unwrap();
            let r = call(b, &branch, &[big, acc]);
            let one = b.scalar(1.0, dt, false);
            vec![b.binary(BinaryOp::Add, i, one).unwrap(), r[0]]
        });
        let region = Arc::new(
            Region::new(
                RegionKind::While {
                    n_carry: 2,
                    cond: Arc::new(cond),
                    body: Arc::new(body),
                    max_trips: None,
                },
                RegionForm::While,
                0,
            )
            .unwrap(),
        );
        let g = calling(&region);
        let acc = HostTensor::new(shape(&[3]), HostData::from_f64(dt, [3.0, 5.5, -1.25]));
        let inputs = vec![scalar(dt, 0.0), acc, scalar(dt, 4.0)];
        let (want, trips) = while_reference(&region, &inputs);
        assert_eq!(trips, 10);
        check_against(&format!("cond in while {dt:?}"), &g, &inputs, &want);
    }
}

/// The buffers a run of a scan of `length` iterations allocates, for a body over `[n]`
/// values: `t = sin(c * k) + x; (t, sum(t * i))`, or with `swapped` a body of two carries
/// `(c, d)` with `t = sin(c * k) + x + d` that returns `(t, c)` (a carry returned as another
/// one rules out swapping slots).
fn scan_allocations(length: usize, n: usize, swapped: bool) -> usize {
    let dt = DType::F64;
    let v = tt(dt, &[n]);
    let mut ins = vec![tt(dt, &[]), v.clone()];
    if swapped {
        ins.push(v.clone());
    }
    ins.extend([v.clone(), v.clone()]);
    let body = graph(&ins, |b, p| {
        let (i, c) = (p[0], p[1]);
        let (k, x) = (p[p.len() - 2], p[p.len() - 1]);
        let ck = b.mul(c, k).unwrap();
        let s = b.unary(UnaryOp::Sin, ck).unwrap();
        let mut t = b.add(s, x).unwrap();
        if swapped {
            t = b.add(t, p[2]).unwrap();
        }
        let ti = b.mul(t, i).unwrap();
        let m = b.sum(ti, None, false).unwrap();
        if swapped {
            vec![t, c, m]
        } else {
            vec![t, m]
        }
    });
    let scan = ScanBody {
        length,
        start: 0,
        reverse: false,
        n_carry: if swapped { 2 } else { 1 },
        n_const: 1,
        n_xs: 1,
        body: Arc::new(body),
    };
    let region = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Scan, 0).unwrap());
    let g = calling(&region);
    let inputs = random_operands(&region, dt, 3);
    let exe = CpuBackend::with_options(single_thread())
        .compile_plan(&Plan::compile(&g))
        .unwrap();
    let first = exe.run(&inputs).unwrap();
    let after_first = exe.buffers_allocated();
    let second = exe.run(&inputs).unwrap();
    assert_eq!(first, second);
    // A second run reuses everything of the first.
    assert_eq!(exe.buffers_allocated(), after_first, "length {length}");
    after_first
}

/// A scan's buffers come from the pool and are reused across iterations: 10 000 iterations
/// allocate no more buffers than 10, whichever form the loop runs in (values kept in place and
/// carries swapped, carries moved through the pool, or plain numbers).
#[test]
fn long_scans_reuse_their_buffers() {
    for (n, swapped) in [(64, false), (64, true), (1, false)] {
        let short = scan_allocations(10, n, swapped);
        let long = scan_allocations(10_000, n, swapped);
        assert_eq!(
            short, long,
            "[{n}] swapped {swapped}: buffers grow with the iterations"
        );
        assert!(
            short <= 8,
            "[{n}] swapped {swapped}: {short} buffers for a short body"
        );
    }
}

/// An error inside a body is a typed error of the run, not a panic.
#[test]
fn errors_inside_bodies_are_returned() {
    let ins = [
        tt(DType::F64, &[]),
        tt(DType::F64, &[2, 1]),
        tt(DType::F64, &[2, 2]),
    ];
    let body = graph(&ins, |b, p| {
        vec![b
            .push(Op::Solve { transpose_a: false }, &[p[2], p[1]])
            .unwrap()]
    });
    let scan = ScanBody {
        length: 3,
        start: 0,
        reverse: false,
        n_carry: 1,
        n_const: 1,
        n_xs: 0,
        body: Arc::new(body),
    };
    let region = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0).unwrap());
    let g = calling(&region);
    let exe = CpuBackend::default().compile(&Plan::compile(&g)).unwrap();
    let c = HostTensor::new(shape(&[2, 1]), HostData::F64(vec![1.0, 1.0].into()));
    let singular = HostTensor::new(
        shape(&[2, 2]),
        HostData::F64(vec![1.0, 1.0, 1.0, 1.0].into()),
    );
    let err = exe.run(&[c.clone(), singular]).unwrap_err();
    assert!(matches!(err, BackendError::Singular { .. }), "{err}");
    // The executable still works afterwards.
    let eye = HostTensor::new(
        shape(&[2, 2]),
        HostData::F64(vec![2.0, 0.0, 0.0, 4.0].into()),
    );
    let out = exe.run(&[c, eye]).unwrap();
    assert_eq!(out[0].data, HostData::F64(vec![0.125, 1.0 / 64.0].into()));
}
