//! Whole plans in machine code: a plan without control flow whose values all have at most 64
//! elements runs, once hot, as one native function with the interpreter's bits: every
//! elementwise op on special values in float32 and float64, layout ops and reductions, and a
//! singular `solve` (the code's failure exit, then the interpreter's error). The report says
//! when a plan runs native code; plans that are too large, call a loop, or are interpreted by
//! choice never do.

mod common;

use common::{
    assert_bitwise, check_plan_both_ways as check_both_ways, compile, every_op, graph,
    special_values, Rng,
};
use quabla_backend::{BackendError, Executable, HostTensor, Precision};
use quabla_cpu::CpuBackend;
use quabla_ir::{
    BinaryOp, Comparison, DType, HostData, Plan, Region, RegionForm, RegionKind, ScanBody, Shape,
    TensorType, UnaryOp,
};
use std::sync::Arc;

fn ty(dt: DType, dims: &[usize]) -> TensorType {
    TensorType::new(dt, Shape::new(dims.to_vec()).unwrap())
}

fn tensor(dt: DType, dims: &[usize], values: &[f64]) -> HostTensor {
    HostTensor::new(
        Shape::new(dims.to_vec()).unwrap(),
        HostData::from_f64(dt, values.iter().copied()),
    )
}

#[test]
fn every_elementwise_op_gives_the_same_bits_as_the_interpreter() {
    const N: usize = 62;
    let mut rng = Rng::new(17);
    let values = special_values(&mut rng);
    // Every value against a few partners (zero, one half, three, infinity, NaN, itself),
    // N pairs per run.
    let pairs: Vec<(f64, f64)> = values
        .iter()
        .flat_map(|&x| [values[0], values[4], values[8], values[14], values[16], x].map(|y| (x, y)))
        .collect();
    for dt in [DType::F32, DType::F64] {
        let sets: Vec<Vec<HostTensor>> = pairs
            .chunks(N)
            .map(|chunk| {
                let mut xs: Vec<f64> = chunk.iter().map(|p| p.0).collect();
                let mut ys: Vec<f64> = chunk.iter().map(|p| p.1).collect();
                xs.resize(N, 0.25);
                ys.resize(N, -4.0);
                vec![tensor(dt, &[N], &xs), tensor(dt, &[N], &ys)]
            })
            .collect();
        for (name, apply) in every_op() {
            let g = graph(&[ty(dt, &[N]), ty(dt, &[N])], |b, p| {
                vec![apply(b, p[0], p[1])]
            });
            check_both_ways(&format!("{name} {dt}"), &g, &sets);
        }
    }
}

#[test]
fn layout_ops_reductions_and_several_outputs_give_the_same_bits() {
    let mut rng = Rng::new(3);
    for dt in [DType::F32, DType::F64] {
        // A small model: a 4x8 matrix and an 8-vector through transposes, broadcasts,
        // slices, concatenation, a gather, sums, means, max and min, a bool output and a
        // constant output.
        let g = graph(&[ty(dt, &[4, 8]), ty(dt, &[8])], |b, p| {
            let (m, v) = (p[0], p[1]);
            let mt = b.transpose(m, None).unwrap();
            let row = b.reshape_to(v, Shape::new(vec![1, 8]).unwrap()).unwrap();
            let rows = b
                .broadcast_to(row, Shape::new(vec![4, 8]).unwrap())
                .unwrap();
            let prod = b.binary(BinaryOp::Mul, m, rows).unwrap();
            let t = b.unary(UnaryOp::Tanh, prod).unwrap();
            let col_sums = b.sum(t, Some(&[0]), false).unwrap();
            let row_means = b.mean(t, Some(&[1]), true).unwrap();
            let head = b.slice(col_sums, vec![0], vec![4]).unwrap();
            let tail = b.slice(col_sums, vec![4], vec![4]).unwrap();
            let joined = b.concat(&[tail, head], 0).unwrap();
            let picked = b.gather(mt, &[7, 0, 3], 0).unwrap();
            let picked_sum = b.sum(picked, None, false).unwrap();
            let big = b.max(m, None, false).unwrap();
            let small = b.min(m, Some(&[0, 1]), false).unwrap();
            let spread = b.binary(BinaryOp::Sub, big, small).unwrap();
            let scaled = b.binary(BinaryOp::Mul, joined, spread).unwrap();
            let shifted = b.binary(BinaryOp::Add, scaled, picked_sum).unwrap();
            let positive = b.compare(Comparison::Greater, shifted, v).unwrap();
            let c = b.scalar(0.1, dt, false);
            let loss = b.binary(BinaryOp::Mul, shifted, c).unwrap();
            let loss = b.powi(loss, 2).unwrap();
            let loss = b.mean(loss, None, false).unwrap();
            vec![loss, shifted, row_means, positive, c, m]
        });
        let sets: Vec<Vec<HostTensor>> = (0..4)
            .map(|_| {
                let m: Vec<f64> = (0..32).map(|_| rng.value()).collect();
                let v: Vec<f64> = (0..8).map(|_| rng.value()).collect();
                vec![tensor(dt, &[4, 8], &m), tensor(dt, &[8], &v)]
            })
            .collect();
        check_both_ways(&format!("small model {dt}"), &g, &sets);
    }
}

/// A plan calling a loop is not compiled whole: its loop keeps code of its own, run in chunks
/// with cancellation checks between them.
#[test]
fn a_plan_calling_a_loop_keeps_the_loops_own_code() {
    // out = fori(10, c -> c * k + cos(c)) applied to x, plus x.
    let s = TensorType::new(DType::F64, Shape::scalar());
    let body = graph(&[s.clone(), ty(DType::F64, &[4]), s.clone()], |b, p| {
        let (c, k) = (p[1], p[2]);
        let ck = b.binary(BinaryOp::Mul, c, k).unwrap();
        let cos = b.unary(UnaryOp::Cos, c).unwrap();
        vec![b.binary(BinaryOp::Add, ck, cos).unwrap()]
    });
    let scan = ScanBody {
        length: 10,
        start: 0,
        reverse: false,
        n_carry: 1,
        n_const: 1,
        n_xs: 0,
        body: Arc::new(body),
    };
    let region = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0).unwrap());
    let g = graph(&[ty(DType::F64, &[4]), s], |b, p| {
        let out = b.push_region_calls(region.clone(), 0..1, p).unwrap()[0];
        vec![b.binary(BinaryOp::Add, out, p[0]).unwrap()]
    });
    let native = compile(&g, true);
    assert!(!native.compile_native_now());
    let report = native.report();
    assert!(!report.contains("whole plan"), "{report}");
    assert!(
        report.contains("fori (10 iterations): native code"),
        "{report}"
    );
    let inputs = vec![
        tensor(DType::F64, &[4], &[0.1, -2.0, f64::NAN, 1e-310]),
        tensor(DType::F64, &[], &[0.9]),
    ];
    let got = native.run(&inputs).unwrap();
    let want = compile(&g, false).run(&inputs).unwrap();
    assert_bitwise("plan calling a fori loop", &got[0].data, &want[0].data);
}

#[test]
fn a_singular_solve_leaves_the_code_and_raises_the_interpreters_error() {
    let g = graph(
        &[ty(DType::F64, &[2, 2]), ty(DType::F64, &[2, 1])],
        |b, p| {
            let x = b.solve(p[0], p[1]).unwrap();
            let one = b.scalar(1.0, DType::F64, false);
            vec![b.binary(BinaryOp::Add, x, one).unwrap()]
        },
    );
    let b = tensor(DType::F64, &[2, 1], &[0.5, -1.0]);
    let regular = vec![
        tensor(DType::F64, &[2, 2], &[3.0, 0.5, 0.5, 0.25]),
        b.clone(),
    ];
    check_both_ways("solve", &g, &[regular]);
    let singular = vec![tensor(DType::F64, &[2, 2], &[1.0, 2.0, 2.0, 4.0]), b];
    let native = compile(&g, true);
    assert!(native.compile_native_now());
    for exe in [native, compile(&g, false)] {
        let err = exe.run(&singular).unwrap_err();
        assert!(matches!(err, BackendError::Singular { .. }), "{err}");
    }
}

#[test]
fn a_plan_gets_native_code_after_a_thousand_interpreted_runs() {
    let g = graph(&[ty(DType::F32, &[8])], |b, p| {
        let two = b.scalar(2.0, DType::F32, false);
        let y = b.binary(BinaryOp::Mul, p[0], two).unwrap();
        vec![b.unary(UnaryOp::Sin, y).unwrap()]
    });
    let exe = compile(&g, true);
    let interpreted = compile(&g, false);
    let x = vec![tensor(
        DType::F32,
        &[8],
        &[0.5, 1.0, -2.0, 3.0, 0.0, -0.0, 1e30, 7.0],
    )];
    let want = interpreted.run(&x).unwrap();
    assert!(exe
        .report()
        .contains("whole plan: native code from run 1001\n"));
    for run in 1..=1001 {
        let got = exe.run(&x).unwrap();
        assert_bitwise(&format!("run {run}"), &got[0].data, &want[0].data);
    }
    assert!(
        exe.report().contains("whole plan: native code\n"),
        "{}",
        exe.report()
    );
}

#[test]
fn large_plans_and_plans_interpreted_by_choice_have_no_native_form() {
    // More elements in memory than the dispatch the machine code saves is worth.
    let wide = graph(&[ty(DType::F64, &[1 << 15])], |b, p| {
        vec![b.unary(UnaryOp::Exp, p[0]).unwrap()]
    });
    // Small values, but more element operations than code generation is worth.
    let long = graph(&[ty(DType::F64, &[64])], |b, p| {
        let mut x = p[0];
        for _ in 0..70 {
            x = b.unary(UnaryOp::Sin, x).unwrap();
        }
        vec![x]
    });
    for g in [&wide, &long] {
        let exe = compile(g, true);
        assert!(!exe.compile_native_now());
        assert!(!exe.report().contains("whole plan"), "{}", exe.report());
    }
    let small = graph(&[ty(DType::F32, &[4])], |b, p| {
        vec![b.sum(p[0], None, false).unwrap()]
    });
    let backend = CpuBackend::default();
    let plan = Plan::from_graph_unoptimized(small);
    // Under precision("float32") float32 sums accumulate in float32, and the non-finite
    // check runs every node as its own step.
    for exe in [
        backend
            .compile_plan_with(&plan, Precision::Float32)
            .unwrap(),
        backend
            .compile_plan_checking_nans(&plan, Precision::Reference)
            .unwrap(),
    ] {
        assert!(!exe.compile_native_now());
    }
    assert!(backend.compile_plan(&plan).unwrap().compile_native_now());
}
