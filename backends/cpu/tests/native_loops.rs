//! Scalar loops in machine code: every elementwise op, run in a loop compiled to native code
//! and in the same loop interpreted, gives the same bits (NaN payloads aside) on special and
//! ordinary values, in float32 and float64; `fori`, reverse and offset scans, and bounded and
//! unbounded while loops agree both ways and with host loops; the executable's report says
//! which loops run native code.

mod common;

use common::graph;

use common::{assert_bitwise, calling, check_both_ways, compile, every_op, special_values, Rng};
use quabla_backend::{Executable, HostTensor};
use quabla_ir::{
    BinaryOp, Comparison, DType, Graph, GraphBuilder, HostData, NodeId, Region, RegionForm,
    RegionKind, ScanBody, Shape, TensorType, UnaryOp,
};
use std::sync::Arc;

fn scalar_type(dt: DType) -> TensorType {
    TensorType::new(dt, Shape::scalar())
}

fn scalar(dt: DType, v: f64) -> HostTensor {
    HostTensor::new(Shape::scalar(), HostData::from_f64(dt, [v]))
}

/// A `fori_loop` of three iterations over carries `(x, y, out)`: `x` and `y` pass through and
/// `out` becomes `op(x, y)` (the op under test, built by `apply`).
fn op_loop(dt: DType, apply: &dyn Fn(&mut GraphBuilder, NodeId, NodeId) -> NodeId) -> Graph {
    let s = scalar_type(dt);
    let body = graph(
        &[scalar_type(DType::F64), s.clone(), s.clone(), s.clone()],
        |b, p| {
            let out = apply(b, p[1], p[2]);
            vec![p[1], p[2], out]
        },
    );
    let scan = ScanBody {
        length: 3,
        start: 0,
        reverse: false,
        n_carry: 3,
        n_const: 0,
        n_xs: 0,
        body: Arc::new(body),
    };
    let region = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0).unwrap());
    calling(&region)
}

#[test]
fn every_elementwise_op_gives_the_same_bits_native_and_interpreted() {
    let mut rng = Rng::new(91);
    let values = special_values(&mut rng);
    for dt in [DType::F32, DType::F64] {
        for (name, apply) in every_op() {
            let g = op_loop(dt, &*apply);
            let sets: Vec<Vec<HostTensor>> = values
                .iter()
                .flat_map(|&x| {
                    let pick = [values[0], values[4], values[8], values[14], values[16], x];
                    pick.into_iter()
                        .map(move |y| vec![scalar(dt, x), scalar(dt, y), scalar(dt, 0.0)])
                })
                .collect();
            check_both_ways(&format!("{name} {dt}"), &g, &sets);
        }
    }
}

/// `sin` and `cos` of one operand pair into one instruction of the fused program.
#[test]
fn paired_sin_and_cos_give_the_same_bits() {
    let mut rng = Rng::new(5);
    let values = special_values(&mut rng);
    for dt in [DType::F32, DType::F64] {
        let g = op_loop(dt, &|b, x, _| {
            let s = b.unary(UnaryOp::Sin, x).unwrap();
            let c = b.unary(UnaryOp::Cos, x).unwrap();
            b.binary(BinaryOp::Sub, s, c).unwrap()
        });
        let sets: Vec<Vec<HostTensor>> = values
            .iter()
            .map(|&x| vec![scalar(dt, x), scalar(dt, 0.0), scalar(dt, 0.0)])
            .collect();
        check_both_ways(&format!("sin - cos {dt}"), &g, &sets);
    }
}

/// `scan(c -> c * k + i * 1e-3 + cos(c))` with a loop constant `k`, forward and reverse, with
/// an offset first index, checked both ways and against the iterations in a host loop.
#[test]
fn fori_and_reverse_scans_with_constants_agree_with_a_host_loop() {
    for dt in [DType::F32, DType::F64] {
        for (length, start, reverse) in [(1000, 0, false), (777, 5, true), (300, 2, false)] {
            let s = scalar_type(dt);
            let body = graph(&[s.clone(), s.clone(), s.clone()], |b, p| {
                let (i, c, k) = (p[0], p[1], p[2]);
                let ck = b.binary(BinaryOp::Mul, c, k).unwrap();
                let step = b.scalar(1e-3, dt, false);
                let is = b.binary(BinaryOp::Mul, i, step).unwrap();
                let cos = b.unary(UnaryOp::Cos, c).unwrap();
                let sum = b.binary(BinaryOp::Add, ck, is).unwrap();
                vec![b.binary(BinaryOp::Add, sum, cos).unwrap()]
            });
            let scan = ScanBody {
                length,
                start,
                reverse,
                n_carry: 1,
                n_const: 1,
                n_xs: 0,
                body: Arc::new(body),
            };
            let region =
                Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Scan, 0).unwrap());
            let g = calling(&region);
            let inputs = vec![scalar(dt, 0.25), scalar(dt, 0.5)];
            let context = format!("scan {dt} length {length} start {start} reverse {reverse}");
            check_both_ways(&context, &g, std::slice::from_ref(&inputs));

            let round = |v: f64| dt.round(v);
            let mut c = round(0.25);
            for step in 0..length {
                let k = if reverse { length - 1 - step } else { step };
                let i = round((start + k) as f64);
                let ck = round(c * 0.5);
                let is = round(i * round(1e-3));
                let cos = round(quabla_ir::eval::unary_f64(UnaryOp::Cos, c));
                c = round(round(ck + is) + cos);
            }
            let got = compile(&g, true).run(&inputs).unwrap();
            assert_bitwise(&context, &got[0].data, &HostData::from_f64(dt, [c]));
        }
    }
}

/// `while i < limit: (i + 1, x * 0.5 + 1)`, bounded and unbounded, checked both ways and
/// against a host loop, across several chunks of iterations.
#[test]
fn while_loops_agree_with_a_host_loop_bounded_and_unbounded() {
    for dt in [DType::F32, DType::F64] {
        for max_trips in [None, Some(1), Some(2), Some(700), Some(5000)] {
            let s = scalar_type(dt);
            let ins = [s.clone(), s.clone(), s.clone()];
            let cond = graph(&ins, |b, p| {
                vec![b.compare(Comparison::Less, p[0], p[2]).unwrap()]
            });
            let body = graph(&ins, |b, p| {
                let one = b.scalar(1.0, dt, false);
                let half = b.scalar(0.5, dt, false);
                let i = b.binary(BinaryOp::Add, p[0], one).unwrap();
                let x = b.binary(BinaryOp::Mul, p[1], half).unwrap();
                vec![i, b.binary(BinaryOp::Add, x, one).unwrap()]
            });
            let kind = RegionKind::While {
                n_carry: 2,
                cond: Arc::new(cond),
                body: Arc::new(body),
                max_trips,
            };
            let region = Arc::new(Region::new(kind, RegionForm::While, 0).unwrap());
            let g = calling(&region);
            for limit in [0.0, 1.0, 255.0, 256.0, 257.0, 1000.0, f64::NAN] {
                let inputs = vec![scalar(dt, 0.0), scalar(dt, 3.0), scalar(dt, limit)];
                let context = format!("while {dt} max_trips {max_trips:?} limit {limit}");
                check_both_ways(&context, &g, std::slice::from_ref(&inputs));

                let (mut i, mut x, mut trips) = (0.0, 3.0, 0);
                while Some(trips) != max_trips && i < limit {
                    i = dt.round(i + 1.0);
                    x = dt.round(dt.round(x * 0.5) + 1.0);
                    trips += 1;
                }
                let got = compile(&g, true).run(&inputs).unwrap();
                assert_bitwise(&context, &got[0].data, &HostData::from_f64(dt, [i]));
                assert_bitwise(&context, &got[1].data, &HostData::from_f64(dt, [x]));
            }
        }
    }
}

/// A scan over one-element slices of float32, float64 and bool operands, stacking float32,
/// float64 and bool outputs, forward and reverse: native code, the interpreter and a host loop
/// agree.
#[test]
fn scans_over_slices_with_stacked_outputs_agree_both_ways_and_with_a_host_loop() {
    for reverse in [false, true] {
        let f64t = scalar_type(DType::F64);
        let ins = [
            f64t.clone(),
            f64t.clone(),
            scalar_type(DType::F32),
            scalar_type(DType::F64),
            scalar_type(DType::Bool),
        ];
        // (i, c, x32, x64, flag) -> (c', f32(c'), c' > 1, c')
        let body = graph(&ins, |b, p| {
            let (c, x32, x64, flag) = (p[1], p[2], p[3], p[4]);
            let wide = b.astype(x32, DType::F64).unwrap();
            let sum = b.binary(BinaryOp::Add, c, wide).unwrap();
            let scaled = b.binary(BinaryOp::Mul, sum, x64).unwrap();
            let next = b.select(flag, scaled, sum).unwrap();
            let narrow = b.astype(next, DType::F32).unwrap();
            let one = b.scalar(1.0, DType::F64, false);
            let big = b.compare(Comparison::Greater, next, one).unwrap();
            vec![next, narrow, big, next]
        });
        let length = 600;
        let scan = ScanBody {
            length,
            start: 3,
            reverse,
            n_carry: 1,
            n_const: 0,
            n_xs: 3,
            body: Arc::new(body),
        };
        let region = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Scan, 0).unwrap());
        let g = calling(&region);
        let mut rng = Rng::new(17);
        let x32: Vec<f64> = (0..length).map(|_| rng.finite() / 4.0).collect();
        let x64: Vec<f64> = (0..length).map(|_| 0.5 + rng.finite() / 8.0).collect();
        let flag: Vec<f64> = (0..length).map(|_| (rng.next_u64() % 2) as f64).collect();
        let stacked = |dt: DType, v: &[f64]| {
            HostTensor::new(
                Shape::new(vec![length]).unwrap(),
                HostData::from_f64(dt, v.iter().copied()),
            )
        };
        let inputs = vec![
            scalar(DType::F64, 0.5),
            stacked(DType::F32, &x32),
            stacked(DType::F64, &x64),
            stacked(DType::Bool, &flag),
        ];
        let context = format!("scan over slices, reverse {reverse}");
        check_both_ways(&context, &g, std::slice::from_ref(&inputs));

        let mut c = 0.5;
        let (mut narrow, mut big, mut all) =
            (vec![0.0; length], vec![0.0; length], vec![0.0; length]);
        for step in 0..length {
            let k = if reverse { length - 1 - step } else { step };
            let sum = c + DType::F32.round(x32[k]);
            c = if flag[k] != 0.0 { sum * x64[k] } else { sum };
            narrow[k] = c;
            big[k] = if c > 1.0 { 1.0 } else { 0.0 };
            all[k] = c;
        }
        let got = compile(&g, true).run(&inputs).unwrap();
        assert_bitwise(&context, &got[0].data, &HostData::F64(vec![c].into()));
        assert_bitwise(
            &context,
            &got[1].data,
            &HostData::from_f64(DType::F32, narrow),
        );
        assert_bitwise(
            &context,
            &got[2].data,
            &HostData::from_f64(DType::Bool, big),
        );
        assert_bitwise(&context, &got[3].data, &HostData::from_f64(DType::F64, all));
    }
}

/// A loop over a vector of 100 elements (too many for registers) runs machine code; one over
/// a vector past `NATIVE_ELEMENTS` stays interpreted; the report says which, and both give
/// the host loop's values.
#[test]
fn loops_over_large_vectors_run_native_code_up_to_the_limit_and_the_report_says_so() {
    for (n, how) in [
        (100, "native code"),
        (
            quabla_cpu::NATIVE_ELEMENTS + 1,
            "interpreted, swapping form",
        ),
    ] {
        let v = TensorType::new(DType::F64, Shape::new(vec![n]).unwrap());
        let body = graph(&[scalar_type(DType::F64), v.clone()], |b, p| {
            let two = b.scalar(2.0, DType::F64, false);
            vec![b.binary(BinaryOp::Mul, p[1], two).unwrap()]
        });
        let scan = ScanBody {
            length: 4,
            start: 0,
            reverse: false,
            n_carry: 1,
            n_const: 0,
            n_xs: 0,
            body: Arc::new(body),
        };
        let region = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0).unwrap());
        let exe = compile(&calling(&region), true);
        let report = exe.report();
        assert!(
            report.contains(&format!("fori (4 iterations): {how}")),
            "{n}: {report}"
        );
        let values: Vec<f64> = (0..n).map(|i| i as f64 - 50.0).collect();
        let x = HostTensor::new(
            Shape::new(vec![n]).unwrap(),
            HostData::F64(values.clone().into()),
        );
        let out = exe.run(&[x]).unwrap();
        let want: Vec<f64> = values.iter().map(|v| v * 16.0).collect();
        assert_eq!(out[0].data, HostData::F64(want.into()));
    }
}

/// A while loop over small vectors and matrices, an explicit integrator of a 2-state system
/// with an error estimate, which exercises every layout op and reduction the machine code
/// covers (slices, concatenation, reshape, transpose, broadcast, gather, sums and means over
/// all or some axes, max and min, `pow`, `where`): native code and the interpreter give the
/// same bits, with special values in the state.
#[test]
fn while_loops_over_small_vectors_give_the_same_bits_native_and_interpreted() {
    for dt in [DType::F32, DType::F64] {
        let vec2 = TensorType::new(dt, Shape::new(vec![2]).unwrap());
        let mat = TensorType::new(dt, Shape::new(vec![2, 3]).unwrap());
        // carries (t, y[2]), constants (limit, m[2, 3])
        let ins = [scalar_type(dt), vec2.clone(), scalar_type(dt), mat.clone()];
        let cond = graph(&ins, |b, p| {
            vec![b.compare(Comparison::Less, p[0], p[2]).unwrap()]
        });
        let body = graph(&ins, |b, p| {
            let (t, y, m) = (p[0], p[1], p[3]);
            let u = b.slice(y, vec![0], vec![1]).unwrap();
            let v = b.slice(y, vec![1], vec![1]).unwrap();
            let uv = b.binary(BinaryOp::Mul, u, v).unwrap();
            let du = b.binary(BinaryOp::Sub, u, uv).unwrap();
            let dv = b.binary(BinaryOp::Sub, uv, v).unwrap();
            let dy = b.concat(&[du, dv], 0).unwrap();
            // Terms from the matrix: column sums, row means, max and min, a transpose and a
            // gather, broadcast against the state.
            let col = b.sum(m, Some(&[0]), false).unwrap();
            let col2 = b.slice(col, vec![0], vec![2]).unwrap();
            let row = b.mean(m, Some(&[1]), false).unwrap();
            let mt = b.transpose(m, None).unwrap();
            let g = b.gather(mt, &[2, 0], 0).unwrap();
            let gsum = b.sum(g, Some(&[1]), false).unwrap();
            let big = b.max(m, None, false).unwrap();
            let small = b.min(m, Some(&[0, 1]), false).unwrap();
            let spread = b.binary(BinaryOp::Sub, big, small).unwrap();
            let h = b.scalar(0.01, dt, false);
            let hs = b.binary(BinaryOp::Mul, h, spread).unwrap();
            let step = b.binary(BinaryOp::Mul, dy, hs).unwrap();
            let extra = b.binary(BinaryOp::Add, col2, row).unwrap();
            let extra = b.binary(BinaryOp::Sub, extra, gsum).unwrap();
            let small_h = b.scalar(1e-3, dt, false);
            let extra = b.binary(BinaryOp::Mul, extra, small_h).unwrap();
            let y1 = b.binary(BinaryOp::Add, y, step).unwrap();
            let y1 = b.binary(BinaryOp::Add, y1, extra).unwrap();
            // An error norm and a controller: sqrt(mean(e^2)), pow, where.
            let sq = b.binary(BinaryOp::Mul, step, step).unwrap();
            let norm = b.mean(sq, None, false).unwrap();
            let norm = b.unary(UnaryOp::Sqrt, norm).unwrap();
            let fifth = b.scalar(-0.2, dt, false);
            let factor = b.binary(BinaryOp::Pow, norm, fifth).unwrap();
            let cap = b.scalar(5.0, dt, false);
            let over = b.compare(Comparison::Greater, factor, cap).unwrap();
            let factor = b.select(over, cap, factor).unwrap();
            let r = b.reshape_to(y1, Shape::new(vec![1, 2]).unwrap()).unwrap();
            let r = b.broadcast_to(r, Shape::new(vec![3, 2]).unwrap()).unwrap();
            let total = b.sum(r, None, false).unwrap();
            let tiny = b.scalar(1e-6, dt, false);
            let nudge = b.binary(BinaryOp::Mul, total, tiny).unwrap();
            let y1 = b.binary(BinaryOp::Add, y1, nudge).unwrap();
            // A sum of six inexact values, whose rounding depends on the summation order.
            let parts: Vec<NodeId> = [0.1, 0.3, 0.7]
                .iter()
                .map(|&c| {
                    let c = b.scalar(c, dt, false);
                    b.binary(BinaryOp::Mul, y1, c).unwrap()
                })
                .collect();
            let mix = b.concat(&parts, 0).unwrap();
            let mixed = b.sum(mix, None, false).unwrap();
            let mixed = b.binary(BinaryOp::Mul, mixed, small_h).unwrap();
            let y1 = b.binary(BinaryOp::Sub, y1, mixed).unwrap();
            let dt_step = b.binary(BinaryOp::Mul, h, factor).unwrap();
            let one = b.scalar(1.0, dt, false);
            let t1 = b.binary(BinaryOp::Add, t, one).unwrap();
            let t1 = b.binary(BinaryOp::Add, t1, dt_step).unwrap();
            let t1 = b.binary(BinaryOp::Sub, t1, dt_step).unwrap();
            vec![t1, y1]
        });
        let kind = RegionKind::While {
            n_carry: 2,
            cond: Arc::new(cond),
            body: Arc::new(body),
            max_trips: Some(400),
        };
        let region = Arc::new(Region::new(kind, RegionForm::While, 0).unwrap());
        let g = calling(&region);
        let vector = |a: f64, b: f64| {
            HostTensor::new(Shape::new(vec![2]).unwrap(), HostData::from_f64(dt, [a, b]))
        };
        let matrix = |v: [f64; 6]| {
            HostTensor::new(Shape::new(vec![2, 3]).unwrap(), HostData::from_f64(dt, v))
        };
        let sets = vec![
            vec![
                scalar(dt, 0.0),
                vector(1.0, 0.5),
                scalar(dt, 300.0),
                matrix([1.0, -2.0, 0.5, 3.0, 0.25, -1.0]),
            ],
            vec![
                scalar(dt, 0.0),
                vector(-0.0, 0.0),
                scalar(dt, 50.0),
                matrix([-0.0, 0.0, 0.0, -0.0, 0.0, 0.0]),
            ],
            vec![
                scalar(dt, 0.0),
                vector(f64::NAN, 1.0),
                scalar(dt, 10.0),
                matrix([1.0, f64::INFINITY, 0.5, 3.0, 0.25, -1.0]),
            ],
            vec![
                scalar(dt, 0.0),
                vector(0.3, 0.7),
                scalar(dt, 1000.0),
                matrix([1e-3, 2e-3, -1e-3, 0.0, 5e-4, 1e-3]),
            ],
        ];
        check_both_ways(&format!("small vector while {dt}"), &g, &sets);
    }
}

/// A scan over small vector slices (float32 and bool operands) stacking vector outputs,
/// forward and reverse: native code and the interpreter give the same bits.
#[test]
fn scans_over_vector_slices_give_the_same_bits_native_and_interpreted() {
    let length = 300;
    for reverse in [false, true] {
        let f64v = |n: usize| TensorType::new(DType::F64, Shape::new(vec![n]).unwrap());
        let ins = [
            scalar_type(DType::F64),
            f64v(2),
            TensorType::new(DType::F32, Shape::new(vec![3]).unwrap()),
            TensorType::new(DType::Bool, Shape::new(vec![2]).unwrap()),
        ];
        // (i, c[2], x[3] f32, flag[2]) -> (c', c' as f32, c' > 0, sum(x) * c')
        let body = graph(&ins, |b, p| {
            let (i, c, x, flag) = (p[0], p[1], p[2], p[3]);
            let wide = b.astype(x, DType::F64).unwrap();
            let head = b.slice(wide, vec![0], vec![2]).unwrap();
            let tenth = b.scalar(0.1, DType::F64, false);
            let di = b.binary(BinaryOp::Mul, i, tenth).unwrap();
            let moved = b.binary(BinaryOp::Add, c, head).unwrap();
            let moved = b.binary(BinaryOp::Mul, moved, tenth).unwrap();
            let moved = b.binary(BinaryOp::Add, moved, di).unwrap();
            let next = b.select(flag, moved, c).unwrap();
            let narrow = b.astype(next, DType::F32).unwrap();
            let zero = b.scalar(0.0, DType::F64, false);
            let positive = b.compare(Comparison::Greater, next, zero).unwrap();
            let total = b.sum(wide, None, false).unwrap();
            let scaled = b.binary(BinaryOp::Mul, next, total).unwrap();
            vec![next, narrow, positive, scaled]
        });
        let scan = ScanBody {
            length,
            start: 2,
            reverse,
            n_carry: 1,
            n_const: 0,
            n_xs: 2,
            body: Arc::new(body),
        };
        let region = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Scan, 0).unwrap());
        let g = calling(&region);
        let mut rng = Rng::new(29);
        let x: Vec<f64> = (0..3 * length).map(|_| rng.finite() / 3.0).collect();
        let flag: Vec<f64> = (0..2 * length)
            .map(|_| (!rng.next_u64().is_multiple_of(3)) as u8 as f64)
            .collect();
        let inputs = vec![
            HostTensor::new(
                Shape::new(vec![2]).unwrap(),
                HostData::F64(vec![0.5, -1.5].into()),
            ),
            HostTensor::new(
                Shape::new(vec![length, 3]).unwrap(),
                HostData::from_f64(DType::F32, x),
            ),
            HostTensor::new(
                Shape::new(vec![length, 2]).unwrap(),
                HostData::from_f64(DType::Bool, flag),
            ),
        ];
        check_both_ways(&format!("vector scan, reverse {reverse}"), &g, &[inputs]);
    }
}

/// A while loop whose body solves a small linear system: native code calls the CPU kernel's
/// own solve and gives its bits; when the matrix turns singular, the loop reruns in the
/// interpreter, which returns the kernel's typed error.
#[test]
fn solves_in_native_loops_give_the_kernel_bits_and_its_singular_error() {
    let mat = TensorType::new(DType::F64, Shape::new(vec![2, 2]).unwrap());
    let rhs = TensorType::new(DType::F64, Shape::new(vec![2, 1]).unwrap());
    // carries (i, x[2, 1]), constants (limit, a[2, 2]): x <- solve(a - i * I0, x) + 1 where
    // I0 = [[1, 0], [0, 0]].
    let ins = [
        scalar_type(DType::F64),
        rhs.clone(),
        scalar_type(DType::F64),
        mat.clone(),
    ];
    let cond = graph(&ins, |b, p| {
        vec![b.compare(Comparison::Less, p[0], p[2]).unwrap()]
    });
    let body = graph(&ins, |b, p| {
        let (i, x, a) = (p[0], p[1], p[3]);
        let e = b
            .constant(
                HostData::F64(vec![1.0, 0.0, 0.0, 0.0].into()),
                Shape::new(vec![2, 2]).unwrap(),
                false,
            )
            .unwrap();
        let shift = b.binary(BinaryOp::Mul, e, i).unwrap();
        let m = b.binary(BinaryOp::Sub, a, shift).unwrap();
        let y = b.solve(m, x).unwrap();
        let one = b.scalar(1.0, DType::F64, false);
        let y = b.binary(BinaryOp::Add, y, one).unwrap();
        let i = b.binary(BinaryOp::Add, i, one).unwrap();
        vec![i, y]
    });
    let kind = RegionKind::While {
        n_carry: 2,
        cond: Arc::new(cond),
        body: Arc::new(body),
        max_trips: None,
    };
    let region = Arc::new(Region::new(kind, RegionForm::While, 0).unwrap());
    let g = calling(&region);
    let x0 = HostTensor::new(
        Shape::new(vec![2, 1]).unwrap(),
        HostData::F64(vec![0.5, -1.0].into()),
    );
    let a = |d: f64| {
        HostTensor::new(
            Shape::new(vec![2, 2]).unwrap(),
            HostData::F64(vec![d, 0.5, 0.5, 0.25].into()),
        )
    };
    // det(a - i I0) = (d - i) / 4 - 1 / 4: regular for 20 trips from d = 30.5, exactly
    // singular at the third trip from d = 3.
    let regular = vec![
        scalar(DType::F64, 0.0),
        x0.clone(),
        scalar(DType::F64, 20.0),
        a(30.5),
    ];
    check_both_ways("solve in a while loop", &g, &[regular]);
    let singular = vec![scalar(DType::F64, 0.0), x0, scalar(DType::F64, 5.0), a(3.0)];
    for native_loops in [true, false] {
        let err = compile(&g, native_loops).run(&singular).unwrap_err();
        assert!(
            matches!(err, quabla_backend::BackendError::Singular { .. }),
            "native {native_loops}: {err}"
        );
    }
}

/// A `fori_loop` of `trips` iterations whose scalar body is a chain of `pairs` `sin` and
/// multiply steps.
fn long_body_loop(pairs: usize, trips: usize) -> Graph {
    let s = scalar_type(DType::F64);
    let body = graph(&[s.clone(), s.clone()], |b, p| {
        let mut c = p[1];
        for k in 0..pairs {
            let sin = b.unary(UnaryOp::Sin, c).unwrap();
            let f = b.scalar(1.0 + k as f64 * 1e-6, DType::F64, false);
            c = b.binary(BinaryOp::Mul, sin, f).unwrap();
        }
        vec![c]
    });
    let scan = ScanBody {
        length: trips,
        start: 0,
        reverse: false,
        n_carry: 1,
        n_const: 0,
        n_xs: 0,
        body: Arc::new(body),
    };
    calling(&Arc::new(
        Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0).unwrap(),
    ))
}

#[test]
fn long_bodies_get_the_single_pass_allocator_and_the_same_bits() {
    // Past a few thousand instructions the code generator's register allocator changes (its
    // time would grow faster than the code); the arithmetic must not.
    for pairs in [10, 3_000] {
        let g = long_body_loop(pairs, 7);
        let inputs = vec![scalar(DType::F64, 0.7)];
        check_both_ways(&format!("{pairs} pairs"), &g, std::slice::from_ref(&inputs));
    }
}

/// `depth` scans of two trips nested in one another around `x * 0.5 + 1`.
fn nested_scans(depth: usize) -> Arc<Region> {
    let s = scalar_type(DType::F64);
    let mut body = graph(&[s.clone(), s.clone()], |b, p| {
        let half = b.scalar(0.5, DType::F64, false);
        let one = b.scalar(1.0, DType::F64, false);
        let x = b.binary(BinaryOp::Mul, p[1], half).unwrap();
        vec![b.binary(BinaryOp::Add, x, one).unwrap()]
    });
    let mut region = None;
    for _ in 0..depth {
        let scan = ScanBody {
            length: 2,
            start: 0,
            reverse: false,
            n_carry: 1,
            n_const: 0,
            n_xs: 0,
            body: Arc::new(body),
        };
        let r = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0).unwrap());
        body = graph(&[s.clone(), s.clone()], |b, p| {
            b.push_region_calls(r.clone(), 0..1, &[p[1]]).unwrap()
        });
        region = Some(r);
    }
    region.unwrap()
}

#[test]
fn deep_nests_split_into_several_machine_code_loops_with_the_same_bits() {
    // One function holds a few levels of nested loops; deeper ones run their own code.
    for depth in [3, 12] {
        let region = nested_scans(depth);
        let g = calling(&region);
        let inputs = vec![scalar(DType::F64, 0.25)];
        check_both_ways(&format!("depth {depth}"), &g, std::slice::from_ref(&inputs));
        let mut want = 0.25f64;
        for _ in 0..1usize << depth {
            want = want * 0.5 + 1.0;
        }
        let got = compile(&g, true).run(&inputs).unwrap();
        assert_bitwise(
            &format!("depth {depth}"),
            &got[0].data,
            &HostData::from_f64(DType::F64, [want]),
        );
    }
}
