//! Execution properties of the CPU backend: float32 arithmetic is native float32 arithmetic,
//! fused groups equal node-by-node evaluation at every tile boundary, buffers are reused, and
//! binding mistakes are typed errors.

mod common;

use common::{
    assert_bitwise, check_graph, data, on_threads, random, reference, run, shape, unfused, Rng,
};
use quabla_backend::{Backend, BackendError, Executable, HostTensor, Precision};
use quabla_cpu::{run_plan, CpuBackend, CpuOptions};
use quabla_ir::{
    BinaryOp, Comparison, CustomCall, CustomRule, DType, GraphBuilder, HostData, NodeId, Op, Plan,
    TensorType, UnaryOp,
};
use std::sync::Arc;

#[test]
fn backend_identity() {
    let cpu = CpuBackend::default();
    assert_eq!(cpu.name(), "cpu");
    let caps = cpu.capabilities();
    assert!(caps.float64);
    assert_eq!(caps.device_count, 1);
}

/// float32 `+ - * /` and `sqrt`, computed in float64 and rounded, are native float32 results.
#[test]
fn f32_basic_arithmetic_is_native() {
    let mut rng = Rng::new(3);
    let n = 4096;
    let mut a: Vec<f32> = (0..n).map(|_| rng.value() as f32).collect();
    let mut b: Vec<f32> = (0..n).map(|_| rng.value() as f32).collect();
    // Raw bit patterns: subnormals, huge values and everything in between.
    for i in (0..n).step_by(3) {
        a[i] = f32::from_bits(rng.next_u64() as u32);
        b[i] = f32::from_bits((rng.next_u64() >> 32) as u32);
    }
    let s = shape(&[n]);
    let mut g = GraphBuilder::new();
    let x = g.input("a", TensorType::new(DType::F32, s.clone()));
    let y = g.input("b", TensorType::new(DType::F32, s.clone()));
    let mut outs = Vec::new();
    for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
        outs.push(g.binary(op, x, y).unwrap());
    }
    outs.push(g.unary(UnaryOp::Sqrt, x).unwrap());
    let graph = g.finish(outs).unwrap();
    let inputs = [
        HostTensor::new(s.clone(), HostData::F32(a.clone().into())),
        HostTensor::new(s.clone(), HostData::F32(b.clone().into())),
    ];
    let got = run(&graph, &inputs, common::fused());
    let native: [Box<dyn Fn(f32, f32) -> f32>; 5] = [
        Box::new(|p, q| p + q),
        Box::new(|p, q| p - q),
        Box::new(|p, q| p * q),
        Box::new(|p, q| p / q),
        Box::new(|p, _| p.sqrt()),
    ];
    for (k, f) in native.iter().enumerate() {
        let want: Vec<f32> = a.iter().zip(&b).map(|(&p, &q)| f(p, q)).collect();
        assert_bitwise(
            &format!("op {k}"),
            &got[k].data,
            &HostData::F32(want.into()),
        );
    }
}

/// A DAG of elementwise nodes (f32 and f64, casts, comparisons, selects, broadcast operands)
/// over sizes around the tile and the threading threshold.
#[test]
fn fused_groups_equal_node_by_node_evaluation() {
    let mut rng = Rng::new(5);
    for n in [1usize, 2, 2047, 2048, 2049, 4097, 100_003] {
        for dt in [DType::F32, DType::F64] {
            let s = shape(&[n]);
            let mut b = GraphBuilder::new();
            let x = b.input("x", TensorType::new(dt, s.clone()));
            let y = b.input("y", TensorType::new(dt, s.clone()));
            let w = b.input("w", TensorType::new(dt, shape(&[])));
            let a = b.unary(UnaryOp::Sin, x).unwrap();
            let p = b.mul(a, y).unwrap();
            let e = b.unary(UnaryOp::Exp, p).unwrap();
            let d = b.sub(e, x).unwrap();
            let c = b.compare(Comparison::Greater, d, w).unwrap();
            let sel = b.select(c, d, y).unwrap();
            let half = b.weak_scalar(0.5);
            let h = b.mul(sel, half).unwrap();
            let q = b.powi(h, 3).unwrap();
            let wide = b.astype(q, DType::F64).unwrap();
            let t = b.unary(UnaryOp::Tanh, wide).unwrap();
            let back = b.astype(t, dt).unwrap();
            let r = b.add(back, a).unwrap();
            let m = b.binary(BinaryOp::Fmod, r, w).unwrap();
            let graph = b.finish(vec![m, p, c]).unwrap();
            let inputs = vec![
                random(&mut rng, dt, &[n]),
                random(&mut rng, dt, &[n]),
                random(&mut rng, dt, &[]),
            ];
            check_graph(&format!("dag n={n} {dt}"), &graph, &inputs);
            let exe = CpuBackend::default()
                .compile_plan(&Plan::from_graph_unoptimized(graph))
                .unwrap();
            let stats = exe.stats();
            assert_eq!(stats.fused_groups, 1, "n={n}: {stats:?}");
            // Outputs only: m, p and c (and for f32 the cast of the weak scalar).
            let buffers = if dt == DType::F32 { 4 } else { 3 };
            assert_eq!(stats.buffers, buffers, "n={n}: {stats:?}");
        }
    }
}

/// Groups split at consumers outside them and broadcasts read in place.
#[test]
fn groups_around_reductions_and_broadcasts() {
    let mut rng = Rng::new(9);
    for dt in [DType::F32, DType::F64] {
        let mut b = GraphBuilder::new();
        let x = b.input("x", TensorType::new(dt, shape(&[33, 70])));
        let col = b.input("col", TensorType::new(dt, shape(&[33, 1])));
        // softmax-like: exp(x - max) / sum, with explicit broadcasts.
        let m = b.max(x, Some(&[1]), true).unwrap();
        let mb = b.broadcast_to(m, shape(&[33, 70])).unwrap();
        let z = b.sub(x, mb).unwrap();
        let e = b.unary(UnaryOp::Exp, z).unwrap();
        let s = b.sum(e, Some(&[1]), true).unwrap();
        let sb = b.broadcast_to(s, shape(&[33, 70])).unwrap();
        let p = b.div(e, sb).unwrap();
        let q = b.mul(p, col).unwrap();
        let t = b.transpose(q, None).unwrap();
        let u = b.unary(UnaryOp::Log1p, t).unwrap();
        let graph = b.finish(vec![u, e]).unwrap();
        let inputs = vec![
            random(&mut rng, dt, &[33, 70]),
            random(&mut rng, dt, &[33, 1]),
        ];
        check_graph(&format!("softmax {dt}"), &graph, &inputs);
        let exe = CpuBackend::default()
            .compile_plan(&Plan::from_graph_unoptimized(graph))
            .unwrap();
        // max, exp group, sum, div-mul group, transpose, log1p: the broadcasts are read in
        // place and the keepdims reshapes are aliases.
        assert_eq!(exe.stats().steps, 6, "{:?}", exe.stats());
        assert_eq!(exe.stats().buffers, 6, "{:?}", exe.stats());
    }
}

/// A chain of 50 nodes runs with a bounded number of live buffers, reused from the pool.
#[test]
fn long_chains_reuse_buffers() {
    let n = 10_000;
    let s = shape(&[n]);
    // Unfused elementwise chain: every node is its own step.
    let mut b = GraphBuilder::new();
    let x = b.input("x", TensorType::new(DType::F32, s.clone()));
    let mut v = x;
    for i in 0..50 {
        v = if i % 2 == 0 {
            b.unary(UnaryOp::Sin, v).unwrap()
        } else {
            b.cumsum(v, 0, false).unwrap()
        };
    }
    let graph = b.finish(vec![v]).unwrap();
    let mut rng = Rng::new(1);
    let inputs = vec![random(&mut rng, DType::F32, &[n])];
    for options in [common::fused(), unfused()] {
        let exe = CpuBackend::with_options(options)
            .compile_plan(&Plan::from_graph_unoptimized(graph.clone()))
            .unwrap();
        assert_eq!(exe.stats().steps, 50);
        assert_eq!(exe.stats().buffers, 50);
        assert!(exe.stats().peak_live_buffers <= 2, "{:?}", exe.stats());
        let first = exe.run(&inputs).unwrap();
        let allocated = exe.buffers_allocated();
        assert!(
            allocated <= 3,
            "{allocated} buffers allocated for a chain of 50"
        );
        let second = exe.run(&inputs).unwrap();
        assert_eq!(
            exe.buffers_allocated(),
            allocated,
            "a second run allocates nothing new"
        );
        assert_bitwise("rerun", &second[0].data, &first[0].data);
        assert_bitwise("chain", &first[0].data, &reference(&graph, &inputs)[0]);
    }
    // Fused, the same chain of elementwise nodes is one step and one buffer.
    let mut b = GraphBuilder::new();
    let x = b.input("x", TensorType::new(DType::F64, s.clone()));
    let mut v = x;
    for _ in 0..50 {
        v = b.unary(UnaryOp::Cos, v).unwrap();
    }
    let graph = b.finish(vec![v]).unwrap();
    let exe = CpuBackend::default()
        .compile_plan(&Plan::from_graph_unoptimized(graph.clone()))
        .unwrap();
    assert_eq!(exe.stats().steps, 1);
    assert_eq!(exe.stats().fused_nodes, 50);
    let unfused_exe = CpuBackend::with_options(unfused())
        .compile_plan(&Plan::from_graph_unoptimized(graph.clone()))
        .unwrap();
    assert!(unfused_exe.stats().peak_live_buffers <= 2);
    let inputs = vec![random(&mut rng, DType::F64, &[n])];
    let want = reference(&graph, &inputs);
    assert_bitwise("fused chain", &exe.run(&inputs).unwrap()[0].data, &want[0]);
    assert_bitwise(
        "unfused chain",
        &unfused_exe.run(&inputs).unwrap()[0].data,
        &want[0],
    );
    assert!(unfused_exe.buffers_allocated() <= 2);
}

/// Reshape aliases, dead nodes, inputs and constants returned as outputs.
#[test]
fn aliases_dead_nodes_and_leaf_outputs() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", TensorType::new(DType::F64, shape(&[2, 3])));
    let unused = b.input("unused", TensorType::new(DType::F32, shape(&[4])));
    let c = b
        .constant(data(DType::F64, &[1.0, 2.0, 3.0]), shape(&[3]), false)
        .unwrap();
    let y = b.add(x, c).unwrap();
    let r = b.reshape(y, &[3, 2]).unwrap();
    let r2 = b.reshape(r, &[6]).unwrap();
    let dead = b.unary(UnaryOp::Log, unused).unwrap();
    let _ = dead;
    let z = b.unary(UnaryOp::Exp, r2).unwrap();
    let graph = b.finish(vec![r, z, x, c, r2]).unwrap();
    let inputs = vec![
        HostTensor::new(
            shape(&[2, 3]),
            data(DType::F64, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
        ),
        HostTensor::new(shape(&[4]), data(DType::F32, &[1.0; 4])),
    ];
    check_graph("aliases", &graph, &inputs);
    let out = run_plan(&Plan::from_graph_unoptimized(graph), &inputs).unwrap();
    assert_eq!(out[0].shape, shape(&[3, 2]));
    assert_eq!(
        out[0].data,
        data(DType::F64, &[1.0, 3.0, 5.0, 4.0, 6.0, 8.0])
    );
    assert_eq!(out[2].data, inputs[0].data);
}

/// The same executable runs concurrently from several threads.
#[test]
fn concurrent_runs() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", TensorType::new(DType::F32, shape(&[1000])));
    let y = b.unary(UnaryOp::Exp, x).unwrap();
    let s = b.sum(y, None, false).unwrap();
    let graph = b.finish(vec![s]).unwrap();
    let mut rng = Rng::new(2);
    let inputs = vec![common::random_finite(&mut rng, DType::F32, &[1000])];
    let want = reference(&graph, &inputs);
    let exe: Arc<dyn Executable> = CpuBackend::default()
        .compile(&Plan::from_graph_unoptimized(graph))
        .unwrap();
    std::thread::scope(|sc| {
        for _ in 0..4 {
            let exe = exe.clone();
            let inputs = inputs.clone();
            let want = want.clone();
            sc.spawn(move || {
                for _ in 0..20 {
                    assert_bitwise("concurrent", &exe.run(&inputs).unwrap()[0].data, &want[0]);
                }
            });
        }
    });
}

#[test]
fn input_mismatch_is_a_typed_error() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", TensorType::new(DType::F32, shape(&[2, 3])));
    let y = b.input("y", TensorType::new(DType::F64, shape(&[])));
    let xs = b.astype(x, DType::F64).unwrap();
    let z = b.add(xs, y).unwrap();
    let plan = Plan::from_graph_unoptimized(b.finish(vec![z]).unwrap());
    let exe = CpuBackend::default().compile(&plan).unwrap();
    let good_x = HostTensor::new(shape(&[2, 3]), data(DType::F32, &[1.0; 6]));
    let good_y = HostTensor::new(shape(&[]), data(DType::F64, &[2.0]));
    assert!(exe.run(&[good_x.clone(), good_y.clone()]).is_ok());
    let bad: Vec<Vec<HostTensor>> = vec![
        vec![],
        vec![good_x.clone()],
        vec![good_x.clone(), good_y.clone(), good_y.clone()],
        vec![good_y.clone(), good_x.clone()],
        vec![
            HostTensor::new(shape(&[2, 3]), data(DType::F64, &[1.0; 6])),
            good_y.clone(),
        ],
        vec![
            HostTensor::new(shape(&[3, 2]), data(DType::F32, &[1.0; 6])),
            good_y.clone(),
        ],
        vec![
            good_x.clone(),
            HostTensor::new(shape(&[1]), data(DType::F64, &[2.0])),
        ],
        vec![
            good_x.clone(),
            HostTensor::new(shape(&[]), data(DType::Bool, &[1.0])),
        ],
        // Data whose length does not match its shape.
        vec![
            HostTensor {
                shape: shape(&[2, 3]),
                data: data(DType::F32, &[1.0; 5]),
            },
            good_y.clone(),
        ],
    ];
    for (k, inputs) in bad.iter().enumerate() {
        let owned = exe.run(inputs);
        match &owned {
            Err(BackendError::InputMismatch { .. }) => {}
            other => panic!("case {k}: expected InputMismatch, got {other:?}"),
        }
        // Borrowed inputs are checked alike, with the same message, and append nothing.
        let refs: Vec<&HostTensor> = inputs.iter().collect();
        let mut outputs = Vec::new();
        assert_eq!(
            exe.run_borrowed(&refs, &mut outputs),
            owned.map(|_| ()),
            "case {k}"
        );
        assert!(outputs.is_empty(), "case {k}");
    }
}

/// Runs of one executable, owned or borrowed, are independent: the outputs handed out by a
/// run are never written by a later one, the constants kept bound between runs keep their
/// values, and inputs bound by a run are not held after it.
#[test]
fn repeated_runs_are_independent() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", TensorType::new(DType::F32, shape(&[8])));
    let two = b
        .constant(data(DType::F32, &[2.0]), shape(&[]), false)
        .unwrap();
    let one = b
        .constant(data(DType::F32, &[1.0]), shape(&[]), false)
        .unwrap();
    let y = b.binary(BinaryOp::Mul, x, two).unwrap();
    let z = b.binary(BinaryOp::Add, y, one).unwrap();
    let s = b.sum(z, None, false).unwrap();
    let graph = b.finish(vec![z, s, two, x]).unwrap();
    let plan = Plan::from_graph_unoptimized(graph.clone());
    let exe = CpuBackend::default().compile(&plan).unwrap();
    let mut kept = Vec::new();
    for k in 0..6 {
        let values: Vec<f64> = (0..8).map(|i| (i * (k + 1)) as f64 - 3.5).collect();
        let input = HostTensor::new(shape(&[8]), data(DType::F32, &values));
        let want = reference(&graph, std::slice::from_ref(&input));
        let HostData::F32(shared) = &input.data else {
            unreachable!()
        };
        let handles = Arc::strong_count(shared);
        let got = if k % 2 == 0 {
            exe.run(std::slice::from_ref(&input)).unwrap()
        } else {
            let mut outputs = vec![input.clone()];
            exe.run_borrowed(&[&input], &mut outputs).unwrap();
            // Appended after what was there.
            assert_eq!(outputs.remove(0), input);
            outputs
        };
        assert_eq!(got.len(), want.len());
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_bitwise(&format!("run {k} output {j}"), &g.data, w);
        }
        // The output that returns the input is the only handle the run added.
        assert_eq!(Arc::strong_count(shared), handles + 1, "run {k}");
        kept.push((got, want));
    }
    for (k, (got, want)) in kept.iter().enumerate() {
        for (j, (g, w)) in got.iter().zip(want).enumerate() {
            assert_bitwise(&format!("kept run {k} output {j}"), &g.data, w);
        }
    }
}

#[test]
fn custom_nodes_are_unsupported() {
    let mut pb = GraphBuilder::new();
    let px = pb.input("x", TensorType::new(DType::F64, shape(&[2])));
    let py = pb.unary(UnaryOp::Sin, px).unwrap();
    let primal = Arc::new(pb.finish(vec![py]).unwrap());
    let rule = Arc::new(CustomRule {
        name: "my_sin".into(),
        primal,
        fwd: None,
        bwd: None,
        jvp: None,
        rematerialize: false,
    });
    let mut b = GraphBuilder::new();
    let x = b.input("x", TensorType::new(DType::F64, shape(&[2])));
    let c = b
        .push(Op::Custom(CustomCall { rule, output: 0 }), &[x])
        .unwrap();
    let plan = Plan::from_graph_unoptimized(b.finish(vec![c]).unwrap());
    match CpuBackend::default().compile(&plan) {
        Err(BackendError::Unsupported { op, device, .. }) => {
            assert_eq!(op, "custom");
            assert_eq!(device, "cpu");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

/// Values never panic: poles, domain errors and overflow give IEEE results.
#[test]
fn ieee_values_without_panics() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", TensorType::new(DType::F32, shape(&[4])));
    let l = b.unary(UnaryOp::Log, x).unwrap();
    let one = b.weak_scalar(1.0);
    let r = b.div(one, x).unwrap();
    let graph = b.finish(vec![l, r]).unwrap();
    let inputs = vec![HostTensor::new(
        shape(&[4]),
        data(DType::F32, &[-1.0, 0.0, -0.0, 1e38]),
    )];
    let out = run(&graph, &inputs, CpuOptions::default());
    let HostData::F32(l) = &out[0].data else {
        panic!()
    };
    let HostData::F32(r) = &out[1].data else {
        panic!()
    };
    assert!(l[0].is_nan());
    assert_eq!(l[1], f32::NEG_INFINITY);
    assert_eq!(r[1], f32::INFINITY);
    assert_eq!(r[2], f32::NEG_INFINITY);
}

/// A matrix `transpose` whose consumers are all products taking it as their left operand is
/// not copied (the products read its operand transposed) when the product is too large for
/// the small-product kernel, and the results keep the bits of
/// the product of the copy (the unfused schedule copies it), in float64, float32 and float32
/// at `Precision::Float32`, on one to three threads. As in the MLP gradient, the transposed
/// matrix's operand also feeds another node.
#[test]
fn transposed_left_operands_fold_into_products_with_the_bits_of_the_copy() {
    let mut rng = Rng::new(41);
    for (m, k, n) in [
        (64, 1024, 64),
        (1, 1024, 64),
        (64, 1024, 1),
        (64, 1024, 2),
        (33, 300, 17),
        (8, 8, 8),
        (128, 512, 96),
    ] {
        for dtype in [DType::F64, DType::F32] {
            let mut g = GraphBuilder::new();
            let x = g.input("x", TensorType::new(dtype, shape(&[k, m])));
            let y = g.input("y", TensorType::new(dtype, shape(&[k, n])));
            let xt = g.transpose(x, Some(&[1, 0])).unwrap();
            let p = g.matmul(xt, y).unwrap();
            let sq = g.binary(BinaryOp::Mul, x, x).unwrap();
            let graph = g.finish(vec![p, sq]).unwrap();
            let plan = Plan::from_graph_unoptimized(graph);
            let inputs = [
                random(&mut rng, dtype, &[k, m]),
                random(&mut rng, dtype, &[k, n]),
            ];
            let folds = m * k * n > 8192;
            for precision in [Precision::Reference, Precision::Float32] {
                let want = CpuBackend::with_options(unfused())
                    .compile_plan_with(&plan, precision)
                    .unwrap()
                    .run(&inputs)
                    .unwrap();
                for threads in 1..=3 {
                    let exe = CpuBackend::with_options(on_threads(threads))
                        .compile_plan_with(&plan, precision)
                        .unwrap();
                    let context = format!("{dtype:?} {m}x{k}x{n} {precision:?} {threads} threads");
                    let steps = if folds { 2 } else { 3 };
                    assert_eq!(exe.stats().steps, steps, "{context}: steps");
                    let got = exe.run(&inputs).unwrap();
                    for (g, w) in got.iter().zip(&want) {
                        assert_bitwise(&context, &g.data, &w.data);
                    }
                }
            }
        }
    }
}

/// A transpose is copied, not folded, when a consumer is not a product taking it as its left
/// operand only (an elementwise node, a right operand, both operands), when it is a plan
/// output, and when it transposes a batch of matrices; the results are those of the unfused
/// schedule either way.
#[test]
fn transposes_fold_only_into_left_operands_of_matrix_products() {
    type Build<'a> = &'a dyn Fn(&mut GraphBuilder, &[NodeId]) -> Vec<NodeId>;
    let f64s = |dims: &[usize]| TensorType::new(DType::F64, shape(dims));
    let (k, m, n) = (300, 40, 20);
    let mut rng = Rng::new(17);
    let mut check = |case: &str, inputs: &[&[usize]], folds: bool, build: Build<'_>| {
        let mut g = GraphBuilder::new();
        let ins: Vec<NodeId> = inputs
            .iter()
            .enumerate()
            .map(|(i, dims)| g.input(format!("in{i}"), f64s(dims)))
            .collect();
        let outs = build(&mut g, &ins);
        let graph = g.finish(outs).unwrap();
        let plan = Plan::from_graph_unoptimized(graph.clone());
        let values: Vec<HostTensor> = inputs
            .iter()
            .map(|dims| random(&mut rng, DType::F64, dims))
            .collect();
        let exe = CpuBackend::default().compile_plan(&plan).unwrap();
        let profile = exe.profile(&values, 1).unwrap();
        let copies = profile
            .iter()
            .any(|(label, _)| label.starts_with("transpose "));
        assert_eq!(copies, !folds, "{case}: a transpose step");
        let want = run(&graph, &values, unfused());
        for (got, want) in exe.run(&values).unwrap().iter().zip(&want) {
            assert_bitwise(case, &got.data, &want.data);
        }
    };
    let t = |g: &mut GraphBuilder, x: NodeId| g.transpose(x, Some(&[1, 0])).unwrap();
    check("left operand only", &[&[k, m], &[k, n]], true, &|g, i| {
        let xt = t(g, i[0]);
        vec![g.matmul(xt, i[1]).unwrap()]
    });
    check("also elementwise", &[&[k, m], &[k, n]], false, &|g, i| {
        let xt = t(g, i[0]);
        let p = g.matmul(xt, i[1]).unwrap();
        vec![p, g.binary(BinaryOp::Add, xt, xt).unwrap()]
    });
    check(
        "also a right operand",
        &[&[k, m], &[k, n], &[5, m]],
        false,
        &|g, i| {
            let xt = t(g, i[0]);
            let p = g.matmul(xt, i[1]).unwrap();
            vec![p, g.matmul(i[2], xt).unwrap()]
        },
    );
    check("both operands", &[&[m, m]], false, &|g, i| {
        let xt = t(g, i[0]);
        vec![g.matmul(xt, xt).unwrap()]
    });
    check("a plan output", &[&[k, m], &[k, n]], false, &|g, i| {
        let xt = t(g, i[0]);
        vec![g.matmul(xt, i[1]).unwrap(), xt]
    });
    check(
        "a batch of matrices",
        &[&[2, k, m], &[2, k, n]],
        false,
        &|g, i| {
            let xt = g.transpose(i[0], Some(&[0, 2, 1])).unwrap();
            vec![g.matmul(xt, i[1]).unwrap()]
        },
    );
}

/// An elementwise group too cheap to split by its own size splits over the threads when it
/// reads, element for element, a value a split step wrote (here a product in bands of rows),
/// and not when it reads only inputs; the values are those of one thread either way.
#[test]
fn groups_reading_a_split_value_split_the_same_way() {
    let f64_matrix = |dims: &[usize]| TensorType::new(DType::F64, shape(dims));
    let plan_of = |after_product: bool| {
        let mut g = GraphBuilder::new();
        let x = g.input("x", f64_matrix(&[1024, 64]));
        let w = g.input("w", f64_matrix(&[64, 64]));
        let y = g.input("y", f64_matrix(&[1024, 64]));
        let p = g.matmul(x, w).unwrap();
        let out = if after_product {
            g.binary(BinaryOp::Mul, p, y).unwrap()
        } else {
            g.binary(BinaryOp::Sub, x, y).unwrap()
        };
        Plan::from_graph_unoptimized(g.finish(vec![p, out]).unwrap())
    };
    for (after_product, split) in [(true, 1), (false, 0)] {
        let exe = CpuBackend::default()
            .compile_plan(&plan_of(after_product))
            .unwrap();
        assert_eq!(exe.stats().steps, 2);
        assert_eq!(
            exe.stats().split_groups,
            split,
            "after the product: {after_product}"
        );
    }
    let plan = plan_of(true);
    let mut rng = Rng::new(5);
    let inputs = [
        random(&mut rng, DType::F64, &[1024, 64]),
        random(&mut rng, DType::F64, &[64, 64]),
        random(&mut rng, DType::F64, &[1024, 64]),
    ];
    let want = CpuBackend::with_options(on_threads(1))
        .compile_plan(&plan)
        .unwrap()
        .run(&inputs)
        .unwrap();
    for threads in [2, 3] {
        let got = CpuBackend::with_options(on_threads(threads))
            .compile_plan(&plan)
            .unwrap()
            .run(&inputs)
            .unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert_bitwise(&format!("{threads} threads"), &g.data, &w.data);
        }
    }
}

/// The executor's per-step timing covers every step of the schedule, then the whole run.
#[test]
fn profile_times_every_step_and_the_run() {
    let mut g = GraphBuilder::new();
    let x = g.input("x", TensorType::new(DType::F64, shape(&[64, 64])));
    let p = g.matmul(x, x).unwrap();
    let t = g.unary(UnaryOp::Tanh, p).unwrap();
    let s = g.sum(t, None, false).unwrap();
    let graph = g.finish(vec![s]).unwrap();
    let exe = CpuBackend::default()
        .compile_plan(&Plan::from_graph_unoptimized(graph))
        .unwrap();
    let x: Vec<f64> = (0..64 * 64).map(|i| (i as f64 * 0.01).sin()).collect();
    let inputs = [HostTensor::new(shape(&[64, 64]), data(DType::F64, &x))];
    let profile = exe.profile(&inputs, 3).unwrap();
    let labels: Vec<&str> = profile.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        labels,
        ["matmul 64x64 64x64", "fused[1]", "sum 64x64", "run"]
    );
    assert_eq!(profile.len(), exe.stats().steps + 1);
    let steps: f64 = profile[..3].iter().map(|p| p.1).sum();
    assert!(profile.iter().all(|p| p.1 >= 0.0) && steps <= profile[3].1);
    // Profiling leaves the executable as it was: a plain run gives the same value.
    assert_eq!(exe.run(&inputs).unwrap()[0], exe.run(&inputs).unwrap()[0]);
}

/// The buffers a plan keeps between runs stop growing after the first run, and the schedule's
/// largest live set is below the bytes of all its values together.
#[test]
fn pooled_memory_does_not_grow_with_runs() {
    let mut g = GraphBuilder::new();
    let x = g.input("x", TensorType::new(DType::F64, shape(&[128, 64])));
    let mut h = x;
    for _ in 0..6 {
        let t = g.unary(UnaryOp::Tanh, h).unwrap();
        let s = g.sum(t, Some(&[1]), true).unwrap();
        h = g.sub(t, s).unwrap();
    }
    let out = g.sum(h, None, false).unwrap();
    let graph = g.finish(vec![out]).unwrap();
    let exe = CpuBackend::default()
        .compile_plan(&Plan::compile(&graph))
        .unwrap();
    let x: Vec<f64> = (0..128 * 64).map(|i| (i as f64 * 0.01).sin()).collect();
    let inputs = [HostTensor::new(shape(&[128, 64]), data(DType::F64, &x))];
    exe.run(&inputs).unwrap();
    let after_one = exe.pooled_bytes();
    for _ in 0..50 {
        exe.run(&inputs).unwrap();
    }
    assert_eq!(exe.pooled_bytes(), after_one);
    let stats = exe.stats();
    assert!(
        stats.peak_live_bytes > 0 && stats.peak_live_bytes < 6 * 128 * 64 * 8,
        "{stats:?}"
    );
}
