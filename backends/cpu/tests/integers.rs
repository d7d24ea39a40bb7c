//! Integer plans on the CPU: every integer function against values computed here with Rust's
//! own integer arithmetic (NumPy's signs for `//` and `%`, two's complement wrapping), mixed
//! integer and float plans (integer nodes are never fused into the float kernels), and loops
//! over integer carries, which run as machine code holding integers as int64 machine values,
//! exact for int64 values beyond 2^53 (`tests/native_integers.rs` compares every integer
//! function there with the interpreter).

mod common;

use common::{compile, graph};
use quabla_backend::{Executable, HostTensor};
use quabla_ir::{
    BinaryOp, Comparison, DType, GraphBuilder, HostData, NodeId, Region, RegionForm, RegionKind,
    ScanBody, Shape, TensorType, UnaryOp,
};
use std::sync::Arc;

fn vector(dtype: DType, n: usize) -> TensorType {
    TensorType::new(dtype, Shape::new(vec![n]).unwrap())
}

fn ints(values: &[i64], dtype: DType) -> HostTensor {
    HostTensor::new(
        Shape::new(vec![values.len()]).unwrap(),
        HostData::from_i64(dtype, values.iter().copied()),
    )
}

/// NumPy's floor division and remainder, written independently of `quabla_ir::eval`.
fn floor_div(a: i64, b: i64) -> i64 {
    if b == 0 {
        0
    } else {
        (a as i128).div_euclid(b as i128) as i64
            - if b < 0 && (a as i128).rem_euclid(b as i128) != 0 {
                1
            } else {
                0
            }
    }
}

fn remainder(a: i64, b: i64) -> i64 {
    if b == 0 {
        0
    } else {
        (a as i128 - b as i128 * floor_div(a, b) as i128) as i64
    }
}

/// Runs `op(x, y)` elementwise on the CPU, fused-build and one-node-per-step build alike.
fn run_binary(op: BinaryOp, dtype: DType, x: &[i64], y: &[i64]) -> Vec<i64> {
    let g = graph(&[vector(dtype, x.len()), vector(dtype, y.len())], |b, p| {
        vec![b.binary(op, p[0], p[1]).unwrap()]
    });
    let mut results = Vec::new();
    for native in [false, true] {
        let out = compile(&g, native)
            .run(&[ints(x, dtype), ints(y, dtype)])
            .unwrap();
        assert_eq!(out[0].data.dtype(), dtype);
        results.push(out[0].data.to_i64_vec());
    }
    assert_eq!(results[0], results[1]);
    results.pop().unwrap()
}

#[test]
fn integer_functions_match_rust_integer_arithmetic() {
    let small = [-7i64, -1, 0, 1, 7, 13, i32::MIN as i64, i32::MAX as i64];
    let divisors = [3i64, -3, 2, -2, 0, 1, -1, 5];
    let i32s = |f: &dyn Fn(i32, i32) -> i32| -> Vec<i64> {
        small
            .iter()
            .zip(&divisors)
            .map(|(&a, &b)| f(a as i32, b as i32) as i64)
            .collect()
    };
    let want_floor: Vec<i64> = small
        .iter()
        .zip(&divisors)
        .map(|(&a, &b)| (floor_div(a, b) as i32) as i64)
        .collect();
    assert_eq!(
        run_binary(BinaryOp::FloorDiv, DType::I32, &small, &divisors),
        want_floor
    );
    let want_rem: Vec<i64> = small
        .iter()
        .zip(&divisors)
        .map(|(&a, &b)| remainder(a, b))
        .collect();
    assert_eq!(
        run_binary(BinaryOp::Rem, DType::I32, &small, &divisors),
        want_rem
    );
    assert_eq!(
        run_binary(BinaryOp::Add, DType::I32, &small, &divisors),
        i32s(&|a, b| a.wrapping_add(b))
    );
    assert_eq!(
        run_binary(BinaryOp::Mul, DType::I32, &small, &divisors),
        i32s(&|a, b| a.wrapping_mul(b))
    );
    assert_eq!(
        run_binary(BinaryOp::BitXor, DType::I32, &small, &divisors),
        i32s(&|a, b| a ^ b)
    );
    // Shift counts in and out of range.
    let counts = [0i64, 1, 31, 32, -1, 4, 63, 64];
    let want_shl: Vec<i64> = small
        .iter()
        .zip(&counts)
        .map(|(&a, &c)| {
            if (0..32).contains(&c) {
                (a as i32).wrapping_shl(c as u32) as i64
            } else {
                0
            }
        })
        .collect();
    assert_eq!(
        run_binary(BinaryOp::ShiftLeft, DType::I32, &small, &counts),
        want_shl
    );
    let want_sra: Vec<i64> = small
        .iter()
        .zip(&counts)
        .map(|(&a, &c)| match (0..32).contains(&c) {
            true => ((a as i32) >> c) as i64,
            false if a < 0 => -1,
            false => 0,
        })
        .collect();
    assert_eq!(
        run_binary(BinaryOp::ShiftRightArithmetic, DType::I32, &small, &counts),
        want_sra
    );
    // int64 at its extremes: exact, never through a float64.
    let big = [i64::MAX, i64::MIN, (1 << 53) + 1, -(1 << 53) - 1];
    let ones = [1i64, -1, 1, 1];
    assert_eq!(
        run_binary(BinaryOp::Add, DType::I64, &big, &ones),
        vec![i64::MIN, i64::MAX, (1 << 53) + 2, -(1 << 53)]
    );
    assert_eq!(
        run_binary(BinaryOp::FloorDiv, DType::I64, &big, &ones),
        vec![i64::MAX, i64::MIN, (1 << 53) + 1, -(1 << 53) - 1]
    );
    assert_eq!(
        run_binary(
            BinaryOp::ShiftRightLogical,
            DType::I64,
            &[-1, i64::MIN],
            &[1, 63]
        ),
        vec![i64::MAX, 1]
    );
}

/// Integer reductions, casts both ways and comparisons in one plan mixed with float
/// arithmetic: the values of Rust's arithmetic, and float nodes reading the cast value.
#[test]
fn mixed_integer_and_float_plans() {
    let g = graph(&[vector(DType::I64, 4), vector(DType::F64, 4)], |b, p| {
        let n = p[0];
        let sum = b.sum(n, None, false).unwrap();
        let max = b.max(n, None, false).unwrap();
        let neg = b.unary(UnaryOp::Neg, n).unwrap();
        let as_float = b.astype(n, DType::F64).unwrap();
        let scaled = b.mul(as_float, p[1]).unwrap();
        let sine = b.unary(UnaryOp::Sin, scaled).unwrap();
        let back = b.astype(p[1], DType::I32).unwrap();
        let less = b.compare(Comparison::Less, n, back).unwrap();
        let run = b.cumsum(n, 0, true).unwrap();
        let three = b.weak_int(3);
        let plus = b.add(n, three).unwrap();
        vec![sum, max, neg, sine, back, less, run, plus]
    });
    let n = [i64::MAX, 2, -3, 4];
    let x = [0.5, -1.5, f64::NAN, 3e10];
    let out = compile(&g, true)
        .run(&[
            ints(&n, DType::I64),
            HostTensor::new(Shape::new(vec![4]).unwrap(), HostData::F64(x.into())),
        ])
        .unwrap();
    let sum = n.iter().fold(0i64, |a, &b| a.wrapping_add(b));
    assert_eq!(out[0].data, HostData::I64(vec![sum].into()));
    assert_eq!(out[1].data, HostData::I64(vec![i64::MAX].into()));
    assert_eq!(
        out[2].data,
        HostData::I64(n.iter().map(|v| v.wrapping_neg()).collect())
    );
    let sines: Vec<f64> = n
        .iter()
        .zip(&x)
        .map(|(&a, &b)| libm::sin(a as f64 * b))
        .collect();
    assert_eq!(out[3].data.to_f64_vec()[..2], sines[..2]);
    // Truncation toward zero; NaN and out of range give the minimum.
    assert_eq!(
        out[4].data,
        HostData::I32(vec![0, -1, i32::MIN, i32::MIN].into())
    );
    assert_eq!(
        out[5].data,
        HostData::Bool(vec![false, false, false, false].into())
    );
    let mut run = n.to_vec();
    for i in (0..3).rev() {
        run[i] = run[i].wrapping_add(run[i + 1]);
    }
    assert_eq!(out[6].data, HostData::I64(run.into()));
    assert_eq!(
        out[7].data,
        HostData::I64(n.iter().map(|v| v.wrapping_add(3)).collect())
    );
}

/// A `fori_loop` whose carry is an int64 counter stepped by a value beyond 2^53 and an int32
/// that wraps runs as machine code (the report says so) and stays exact, run after run.
#[test]
fn integer_loops_run_as_machine_code_and_exact() {
    let body = graph(
        &[
            TensorType::new(DType::F64, Shape::scalar()),
            TensorType::new(DType::I64, Shape::scalar()),
            TensorType::new(DType::I32, Shape::scalar()),
        ],
        |b: &mut GraphBuilder, p: &[NodeId]| {
            let step = b
                .constant(
                    HostData::I64(vec![(1 << 53) + 1].into()),
                    Shape::scalar(),
                    false,
                )
                .unwrap();
            let big = b.add(p[1], step).unwrap();
            let m = b
                .constant(HostData::I32(vec![1 << 30].into()), Shape::scalar(), false)
                .unwrap();
            let wrapped = b.add(p[2], m).unwrap();
            vec![big, wrapped]
        },
    );
    let scan = ScanBody {
        length: 5,
        start: 0,
        reverse: false,
        n_carry: 2,
        n_const: 0,
        n_xs: 0,
        body: Arc::new(body),
    };
    let region = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0).unwrap());
    let g = graph(region.operand_types(), |b, p| {
        b.push_region_calls(region.clone(), 0..2, p).unwrap()
    });
    let exe = compile(&g, true);
    assert!(
        exe.report().contains("fori (5 iterations): native code"),
        "an integer loop not in machine code:\n{}",
        exe.report()
    );
    let scalar = |d: HostData| HostTensor::new(Shape::scalar(), d);
    let inputs = [
        scalar(HostData::I64(vec![1].into())),
        scalar(HostData::I32(vec![0].into())),
    ];
    let want_big = 1 + 5 * ((1i64 << 53) + 1);
    let want_wrapped = (0i32).wrapping_add(5 << 30);
    for _ in 0..1100 {
        let out = exe.run(&inputs).unwrap();
        assert_eq!(out[0].data, HostData::I64(vec![want_big].into()));
        assert_eq!(out[1].data, HostData::I32(vec![want_wrapped].into()));
    }
}
