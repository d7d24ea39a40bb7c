//! Integer values in machine code: every function on int32 and int64 values (wrapping
//! arithmetic, floor division and remainder with NumPy's signs, zero and `-1` divisors, shifts
//! by counts in and out of range, powers, bitwise functions, comparisons), casts between every
//! dtype both ways (NaN, infinities and values out of range converted to integers), and integer
//! reductions give the interpreter's bits, in loops and whole plans, with values held in
//! registers (at most 64 elements) and in memory (more). Integer loop indices, carries, loop
//! constants, scanned and stacked integer slices, while loops and the regions nested in a body
//! run as machine code too. Every check first asserts from the report that the machine code
//! ran, so that no check passes by falling back to the interpreter.

mod common;

use common::{
    calling, check_both_ways, check_plan_both_ways, compile, fori, graph, special_values, Rng,
};
use quabla_backend::{Executable, HostTensor};
use quabla_ir::{
    BinaryOp, Comparison, DType, Graph, GraphBuilder, HostData, NodeId, Region, RegionForm,
    RegionKind, ScanBody, Shape, TensorType, UnaryOp,
};
use std::sync::Arc;

const INTS: [DType; 2] = [DType::I32, DType::I64];

/// Elements of a value held in registers, and of one held in memory.
const SMALL: usize = 48;
const LARGE: usize = 300;

fn ty(dt: DType, dims: &[usize]) -> TensorType {
    TensorType::new(dt, Shape::new(dims.to_vec()).unwrap())
}

fn ints(dt: DType, dims: &[usize], values: &[i64]) -> HostTensor {
    assert_eq!(values.len(), dims.iter().product::<usize>());
    HostTensor::new(
        Shape::new(dims.to_vec()).unwrap(),
        HostData::from_i64(dt, values.iter().copied()),
    )
}

fn floats(dt: DType, dims: &[usize], values: &[f64]) -> HostTensor {
    assert_eq!(values.len(), dims.iter().product::<usize>());
    HostTensor::new(
        Shape::new(dims.to_vec()).unwrap(),
        HostData::from_f64(dt, values.iter().copied()),
    )
}

fn zeros(t: &TensorType) -> HostTensor {
    HostTensor::new(
        t.shape.clone(),
        HostData::from_i64(t.dtype, vec![0; t.shape.size()]),
    )
}

/// `values` repeated (or cut) to `n` elements, from position `from`.
fn cycled<T: Copy>(values: &[T], from: usize, n: usize) -> Vec<T> {
    (0..n).map(|i| values[(from + i) % values.len()]).collect()
}

/// The edges of an integer dtype and ordinary values around them: its minimum and maximum,
/// `-1`, 0, shift counts at and past the width, and (int64) values past 2^53 and the int32
/// range.
fn edges(dt: DType) -> Vec<i64> {
    let (min, max) = (dt.int_min(), dt.int_max());
    let mut v = vec![
        min,
        min + 1,
        min / 2,
        -65537,
        -64,
        -33,
        -32,
        -31,
        -7,
        -3,
        -2,
        -1,
        0,
        1,
        2,
        3,
        7,
        31,
        32,
        33,
        63,
        64,
        65536,
        max / 2,
        max - 1,
        max,
    ];
    if dt == DType::I64 {
        v.extend([
            -(1 << 53) - 1,
            (1 << 53) + 1,
            i64::from(i32::MIN) - 1,
            i64::from(i32::MAX) + 1,
        ]);
    }
    v
}

/// Every pair of edges, as two columns.
fn pairs(dt: DType) -> (Vec<i64>, Vec<i64>) {
    let e = edges(dt);
    e.iter()
        .flat_map(|&x| e.iter().map(move |&y| (x, y)))
        .unzip()
}

/// Floats whose conversion to an integer is an edge: special values, the bounds of both
/// integer ranges and values just inside and outside them, and fractions to truncate.
fn conversion_edges() -> Vec<f64> {
    let mut rng = Rng::new(29);
    let mut v = special_values(&mut rng);
    let (b31, b63) = (2f64.powi(31), 2f64.powi(63));
    v.extend([
        b31,
        -b31,
        b31 - 1.0,
        b31 - 0.5,
        -b31 - 0.5,
        -b31 - 1.0,
        2f64.powi(32),
        2f64.powi(53) + 2.0,
        b63,
        -b63,
        b63 - 1024.0,
        -b63 - 2048.0,
        1e19,
        -1e19,
        0.9999,
        -0.9999,
        -2.999,
    ]);
    v
}

/// An op under test on one or two operands.
type Apply = Box<dyn Fn(&mut GraphBuilder, NodeId, NodeId) -> NodeId>;

/// Every function that takes integers, each on two operands of one integer dtype: `neg`,
/// `bitwise_not`, `powi` with exponents up to the width, every binary function (the float-only
/// ones promote to float64, and their results, infinities and NaN included, are converted back
/// to the integer dtype), comparisons both as bools and through `where`, casts to every dtype
/// both ways, and `stop_gradient`.
fn integer_ops() -> Vec<(String, Apply)> {
    let mut ops: Vec<(String, Apply)> = Vec::new();
    for u in [UnaryOp::Neg, UnaryOp::BitNot] {
        ops.push((
            u.name().into(),
            Box::new(move |b, x, _| b.unary(u, x).unwrap()),
        ));
    }
    for n in [-2, -1, 0, 1, 2, 3, 7, 31, 62, 63] {
        ops.push((
            format!("powi {n}"),
            Box::new(move |b, x, _| b.powi(x, n).unwrap()),
        ));
    }
    for op in BinaryOp::ALL {
        ops.push((
            op.name().into(),
            Box::new(move |b, x, y| b.binary(op, x, y).unwrap()),
        ));
        if op.is_float_only() {
            ops.push((
                format!("{} as integer", op.name()),
                Box::new(move |b, x, y| {
                    let dt = b.ty(x).dtype;
                    let v = b.binary(op, x, y).unwrap();
                    b.astype(v, dt).unwrap()
                }),
            ));
        }
    }
    for c in Comparison::ALL {
        ops.push((
            c.name().into(),
            Box::new(move |b, x, y| b.compare(c, x, y).unwrap()),
        ));
        ops.push((
            format!("where {}", c.name()),
            Box::new(move |b, x, y| {
                let p = b.compare(c, x, y).unwrap();
                b.select(p, x, y).unwrap()
            }),
        ));
    }
    for to in [DType::F32, DType::F64, DType::Bool, DType::I32, DType::I64] {
        ops.push((
            format!("cast to {to}"),
            Box::new(move |b, x, _| b.astype(x, to).unwrap()),
        ));
        ops.push((
            format!("cast to {to} and back"),
            Box::new(move |b, x, _| {
                let dt = b.ty(x).dtype;
                let c = b.astype(x, to).unwrap();
                b.astype(c, dt).unwrap()
            }),
        ));
    }
    // Bitwise functions of bools (integer functions of floats' cousins), and `where` between
    // integers of another dtype.
    for op in [BinaryOp::BitAnd, BinaryOp::BitOr, BinaryOp::BitXor] {
        ops.push((
            format!("{} of bools", op.name()),
            Box::new(move |b, x, y| {
                let zero = b.weak_int(0);
                let (p, q) = (
                    b.compare(Comparison::Less, x, zero).unwrap(),
                    b.compare(Comparison::Greater, y, zero).unwrap(),
                );
                b.binary(op, p, q).unwrap()
            }),
        ));
    }
    ops.push((
        "bitwise_not of bools".into(),
        Box::new(|b, x, y| {
            let p = b.compare(Comparison::Less, x, y).unwrap();
            b.unary(UnaryOp::BitNot, p).unwrap()
        }),
    ));
    ops.push((
        "stop_gradient".into(),
        Box::new(|b, x, _| b.stop_gradient(x).unwrap()),
    ));
    ops
}

/// Conversions of floats to integers and back, and integer functions of the converted value.
fn conversion_ops() -> Vec<(String, Apply)> {
    let mut ops: Vec<(String, Apply)> = Vec::new();
    for to in INTS {
        ops.push((
            format!("cast to {to}"),
            Box::new(move |b, x, _| b.astype(x, to).unwrap()),
        ));
        ops.push((
            format!("cast to {to} and back"),
            Box::new(move |b, x, _| {
                let dt = b.ty(x).dtype;
                let c = b.astype(x, to).unwrap();
                b.astype(c, dt).unwrap()
            }),
        ));
        ops.push((
            format!("cast to {to}, floor_divide by 3"),
            Box::new(move |b, x, _| {
                let c = b.astype(x, to).unwrap();
                let three = b.weak_int(3);
                b.binary(BinaryOp::FloorDiv, c, three).unwrap()
            }),
        ));
        ops.push((
            format!("{to} compared with a float"),
            Box::new(move |b, x, y| {
                let c = b.astype(y, to).unwrap();
                let dt = b.ty(x).dtype;
                let back = b.astype(c, dt).unwrap();
                let p = b.compare(Comparison::Less, x, back).unwrap();
                b.select(p, x, back).unwrap()
            }),
        ));
    }
    ops
}

/// The result type of `apply` on operands of types `x` and `y`.
fn out_type(x: &TensorType, y: &TensorType, apply: &Apply) -> TensorType {
    let mut b = GraphBuilder::new();
    let (xi, yi) = (b.input("x", x.clone()), b.input("y", y.clone()));
    let out = apply(&mut b, xi, yi);
    b.ty(out).clone()
}

/// A loop over carries `(x, y, out)` in which `x` and `y` pass through and `out` becomes
/// `apply(x, y)`, and the plan `apply(x, y)`.
fn op_loop_and_plan(x: &TensorType, y: &TensorType, apply: &Apply) -> (Graph, Graph, TensorType) {
    let out = out_type(x, y, apply);
    let carries = [x.clone(), y.clone(), out.clone()];
    let looped = fori(2, &carries, |b, p| {
        let o = apply(b, p[1], p[2]);
        vec![p[1], p[2], o]
    });
    let plan = graph(&[x.clone(), y.clone()], |b, p| vec![apply(b, p[0], p[1])]);
    (looped, plan, out)
}

/// Checks `apply` in a loop and as a whole plan, both ways, on each `(x, y)` input pair.
fn check_op(
    context: &str,
    x: &TensorType,
    y: &TensorType,
    apply: &Apply,
    sets: &[[HostTensor; 2]],
) {
    let (looped, plan, out) = op_loop_and_plan(x, y, apply);
    let loop_sets: Vec<Vec<HostTensor>> = sets
        .iter()
        .map(|[a, b]| vec![a.clone(), b.clone(), zeros(&out)])
        .collect();
    check_both_ways(&format!("{context} in a loop"), &looped, &loop_sets);
    let plan_sets: Vec<Vec<HostTensor>> = sets.iter().map(|s| s.to_vec()).collect();
    check_plan_both_ways(&format!("{context} as a plan"), &plan, &plan_sets);
}

/// Every integer function on every pair of edges, `SMALL` pairs at a time: values in
/// registers.
#[test]
fn every_integer_function_in_registers_gives_the_interpreters_bits() {
    for dt in INTS {
        let (xs, ys) = pairs(dt);
        let sets: Vec<[HostTensor; 2]> = (0..xs.len())
            .step_by(SMALL)
            .map(|at| {
                [
                    ints(dt, &[SMALL], &cycled(&xs, at, SMALL)),
                    ints(dt, &[SMALL], &cycled(&ys, at, SMALL)),
                ]
            })
            .collect();
        let v = ty(dt, &[SMALL]);
        for (name, apply) in integer_ops() {
            check_op(&format!("{name} {dt} [{SMALL}]"), &v, &v, &apply, &sets);
        }
    }
}

/// Every integer function on every pair of edges in one value held in memory, and with the
/// second operand one element (each edge in turn) or broadcast along an axis.
#[test]
fn every_integer_function_in_memory_gives_the_interpreters_bits() {
    for dt in INTS {
        let (xs, ys) = pairs(dt);
        let n = xs.len();
        let e = edges(dt);
        for (name, apply) in integer_ops() {
            let v = ty(dt, &[n]);
            let sets = [[ints(dt, &[n], &xs), ints(dt, &[n], &ys)]];
            check_op(&format!("{name} {dt} [{n}]"), &v, &v, &apply, &sets);

            let one: Vec<[HostTensor; 2]> = e
                .iter()
                .map(|&y| {
                    [
                        ints(dt, &[LARGE], &cycled(&e, 3, LARGE)),
                        ints(dt, &[], &[y]),
                    ]
                })
                .collect();
            let context = format!("{name} {dt} [{LARGE}] by one element");
            check_op(&context, &ty(dt, &[LARGE]), &ty(dt, &[]), &apply, &one);

            let rows = e.len();
            let columns = [[
                ints(dt, &[rows, rows], &xs[..rows * rows]),
                ints(dt, &[rows, 1], &e),
            ]];
            let context = format!("{name} {dt} [{rows}, {rows}] by a column");
            let (x, y) = (ty(dt, &[rows, rows]), ty(dt, &[rows, 1]));
            check_op(&context, &x, &y, &apply, &columns);
        }
    }
}

/// Floats converted to integers (truncation; NaN, infinities and values out of range give the
/// minimum) and back, from float32 and float64, in registers and in memory.
#[test]
fn float_to_integer_conversions_give_the_interpreters_bits() {
    let values = conversion_edges();
    for dt in [DType::F32, DType::F64] {
        for (name, apply) in conversion_ops() {
            for n in [SMALL, LARGE] {
                let sets: Vec<[HostTensor; 2]> = (0..3)
                    .map(|shift| {
                        [
                            floats(dt, &[n], &cycled(&values, shift * 7, n)),
                            floats(dt, &[n], &cycled(&values, shift * 5 + 3, n)),
                        ]
                    })
                    .collect();
                let v = ty(dt, &[n]);
                check_op(&format!("{name} from {dt} [{n}]"), &v, &v, &apply, &sets);
            }
        }
    }
}

/// Integer sums (wrapping), maxima and minima over every axis, the leading and the trailing
/// one, of values in registers and in memory.
#[test]
fn integer_reductions_give_the_interpreters_bits() {
    for dt in INTS {
        let e = edges(dt);
        for dims in [[6, 7], [40, 30]] {
            let n = dims[0] * dims[1];
            for axes in [None, Some(&[0isize][..]), Some(&[1][..]), Some(&[0, 1][..])] {
                let reduce: Apply = Box::new(move |b, x, y| {
                    let s = b.sum(x, axes, false).unwrap();
                    let hi = b.max(x, axes, false).unwrap();
                    let lo = b.min(y, axes, false).unwrap();
                    let s = b.binary(BinaryOp::Add, s, hi).unwrap();
                    b.binary(BinaryOp::BitXor, s, lo).unwrap()
                });
                let sets: Vec<[HostTensor; 2]> = (0..3)
                    .map(|shift| {
                        [
                            ints(dt, &dims, &cycled(&e, shift * 3, n)),
                            ints(dt, &dims, &cycled(&e, shift * 11 + 1, n)),
                        ]
                    })
                    .collect();
                let context = format!("reductions {dt} {dims:?} over {axes:?}");
                let x = ty(dt, &dims);
                check_op(&context, &x, &x, &reduce, &sets);
            }
        }
    }
}

/// Integer values through the layout ops: transposes, slices, concatenations, broadcasts,
/// static gathers and zero padding of int32 and int64 values, small and large.
#[test]
fn integer_layout_ops_give_the_interpreters_bits() {
    for dt in INTS {
        let e = edges(dt);
        for (rows, cols) in [(4, 5), (20, 12)] {
            let layout: Apply = Box::new(move |b, x, y| {
                let t = b.transpose(x, None).unwrap();
                let s = b.slice(y, vec![1, 0], vec![rows - 1, cols]).unwrap();
                let first = b.slice(t, vec![0, 0], vec![1, cols]).unwrap();
                let c = b.concat(&[s, first], 0).unwrap();
                let sum = b.binary(BinaryOp::Add, t, c).unwrap();
                let g = b.gather(sum, &[rows as isize - 1, 0, 1], 0).unwrap();
                let g = b.sum(g, Some(&[0]), true).unwrap();
                let g = b
                    .broadcast_to(g, Shape::new(vec![rows, cols]).unwrap())
                    .unwrap();
                b.binary(BinaryOp::Mul, sum, g).unwrap()
            });
            let n = rows * cols;
            let sets: Vec<[HostTensor; 2]> = (0..3)
                .map(|shift| {
                    [
                        ints(dt, &[cols, rows], &cycled(&e, shift * 5, n)),
                        ints(dt, &[rows, cols], &cycled(&e, shift * 7 + 2, n)),
                    ]
                })
                .collect();
            let context = format!("layout ops {dt} [{rows}, {cols}]");
            check_op(
                &context,
                &ty(dt, &[cols, rows]),
                &ty(dt, &[rows, cols]),
                &layout,
                &sets,
            );
        }
    }
}

/// The loop index (a float32 or float64 in the IR) converted to integers that count with it (a
/// running sum past 2^53 in int64, a product that wraps in int32), forward, reverse and from an
/// offset: native code, the interpreter and a host loop agree.
#[test]
fn integer_counts_of_the_loop_index_are_exact_in_machine_code() {
    for index in [DType::F32, DType::F64] {
        for (length, start, reverse) in [(1000, 0, false), (777, 5, true), (300, 2, false)] {
            let carries = [
                ty(DType::I64, &[]),
                ty(DType::I32, &[]),
                ty(DType::F64, &[]),
            ];
            let body = graph(
                &[
                    ty(index, &[]),
                    carries[0].clone(),
                    carries[1].clone(),
                    carries[2].clone(),
                ],
                |b, p| {
                    let (i, total, prod, x) = (p[0], p[1], p[2], p[3]);
                    let wide = b.astype(i, DType::I64).unwrap();
                    let big = b.weak_int((1 << 53) + 1);
                    let step = b.binary(BinaryOp::Mul, wide, big).unwrap();
                    let total = b.binary(BinaryOp::Add, total, step).unwrap();
                    let narrow = b.astype(i, DType::I32).unwrap();
                    let three = b.weak_int(3);
                    let odd = b.binary(BinaryOp::BitOr, narrow, three).unwrap();
                    let prod = b.binary(BinaryOp::Mul, prod, odd).unwrap();
                    let f = b.astype(i, DType::F64).unwrap();
                    let x = b.binary(BinaryOp::Add, x, f).unwrap();
                    vec![total, prod, x]
                },
            );
            let scan = ScanBody {
                length,
                start,
                reverse,
                n_carry: 3,
                n_const: 0,
                n_xs: 0,
                body: Arc::new(body),
            };
            let region =
                Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Scan, 0).unwrap());
            let g = calling(&region);
            let inputs = vec![
                ints(DType::I64, &[], &[-5]),
                ints(DType::I32, &[], &[1]),
                floats(DType::F64, &[], &[0.5]),
            ];
            let context = format!("{index} index, length {length} start {start} reverse {reverse}");
            check_both_ways(&context, &g, std::slice::from_ref(&inputs));

            let (mut total, mut prod, mut x) = (-5i64, 1i32, 0.5f64);
            for step in 0..length {
                let k = if reverse { length - 1 - step } else { step };
                let i = (start + k) as i64;
                total = total.wrapping_add(i.wrapping_mul((1 << 53) + 1));
                prod = prod.wrapping_mul(i as i32 | 3);
                x += i as f64;
            }
            let got = compile(&g, true).run(&inputs).unwrap();
            assert_eq!(got[0].data, HostData::I64(vec![total].into()), "{context}");
            assert_eq!(got[1].data, HostData::I32(vec![prod].into()), "{context}");
            assert_eq!(got[2].data, HostData::F64(vec![x].into()), "{context}");
        }
    }
}

/// `while n != 1: n = n // 2 if n % 2 == 0 else 3 n + 1` on int64 starting values past 2^53
/// (the steps counted in an int32 carry, and a large int64 carry shifted each trip), bounded and
/// unbounded, across several chunks of trips.
#[test]
fn integer_while_loops_agree_with_a_host_loop() {
    for max_trips in [None, Some(1), Some(300), Some(5000)] {
        let big = ty(DType::I64, &[LARGE]);
        let ins = [ty(DType::I64, &[]), ty(DType::I32, &[]), big.clone()];
        let cond = graph(&ins, |b, p| {
            let one = b.weak_int(1);
            vec![b.compare(Comparison::NotEqual, p[0], one).unwrap()]
        });
        let body = graph(&ins, |b, p| {
            let (n, steps, v) = (p[0], p[1], p[2]);
            let (one, two, three) = (b.weak_int(1), b.weak_int(2), b.weak_int(3));
            let half = b.binary(BinaryOp::FloorDiv, n, two).unwrap();
            let triple = b.binary(BinaryOp::Mul, n, three).unwrap();
            let triple = b.binary(BinaryOp::Add, triple, one).unwrap();
            let parity = b.binary(BinaryOp::Rem, n, two).unwrap();
            let zero = b.weak_int(0);
            let even = b.compare(Comparison::Equal, parity, zero).unwrap();
            let n = b.select(even, half, triple).unwrap();
            let steps = b.binary(BinaryOp::Add, steps, one).unwrap();
            let shifted = b.binary(BinaryOp::ShiftLeft, v, one).unwrap();
            let v = b.binary(BinaryOp::BitXor, shifted, n).unwrap();
            vec![n, steps, v]
        });
        let kind = RegionKind::While {
            n_carry: 3,
            cond: Arc::new(cond),
            body: Arc::new(body),
            max_trips,
        };
        let region = Arc::new(Region::new(kind, RegionForm::While, 0).unwrap());
        let g = calling(&region);
        for start in [1i64, 27, (1 << 53) + 1, 837_799, (1 << 40) + 1] {
            let v: Vec<i64> = (0..LARGE as i64)
                .map(|k| k.wrapping_mul(0x1E37_79B9_7F4A_7C15))
                .collect();
            let inputs = vec![
                ints(DType::I64, &[], &[start]),
                ints(DType::I32, &[], &[i64::from(i32::MAX) - 10]),
                ints(DType::I64, &[LARGE], &v),
            ];
            let context = format!("collatz from {start}, max_trips {max_trips:?}");
            check_both_ways(&context, &g, std::slice::from_ref(&inputs));

            let (mut n, mut steps, mut trips) = (start, i32::MAX - 10, 0);
            while Some(trips) != max_trips && n != 1 {
                n = if n % 2 == 0 {
                    n / 2
                } else {
                    n.wrapping_mul(3).wrapping_add(1)
                };
                steps = steps.wrapping_add(1);
                trips += 1;
            }
            let got = compile(&g, true).run(&inputs).unwrap();
            assert_eq!(got[0].data, HostData::I64(vec![n].into()), "{context}");
            assert_eq!(got[1].data, HostData::I32(vec![steps].into()), "{context}");
        }
    }
}

/// A scan over int32 scalars, int64 and int32 rows (in registers, and in memory) and bools,
/// with int32, int64 and bool stacked outputs and an int64 loop constant, forward and reverse
/// from an offset.
#[test]
fn scans_over_integer_slices_with_stacked_integer_outputs() {
    for reverse in [false, true] {
        for row in [5, 80] {
            let length = 12;
            let ins = [
                ty(DType::F64, &[]),
                ty(DType::I64, &[row]),
                ty(DType::I64, &[]),
                ty(DType::I32, &[]),
                ty(DType::I64, &[row]),
                ty(DType::Bool, &[]),
                ty(DType::I32, &[row]),
            ];
            // (i, c, k, a, r, flag, q) -> (c', a * i, c' > k, where(flag, r, -r), q * a)
            let body = graph(&ins, |b, p| {
                let (i, c, k, a, r, flag, q) = (p[0], p[1], p[2], p[3], p[4], p[5], p[6]);
                let ai = b.astype(i, DType::I32).unwrap();
                let ai = b.binary(BinaryOp::Mul, a, ai).unwrap();
                let kc = b.binary(BinaryOp::Mul, c, k).unwrap();
                let c = b.binary(BinaryOp::Add, kc, r).unwrap();
                let above = b.compare(Comparison::Greater, c, k).unwrap();
                let neg = b.unary(UnaryOp::Neg, r).unwrap();
                let picked = b.select(flag, r, neg).unwrap();
                let qa = b.binary(BinaryOp::Mul, q, a).unwrap();
                vec![c, ai, above, picked, qa]
            });
            let scan = ScanBody {
                length,
                start: 3,
                reverse,
                n_carry: 1,
                n_const: 1,
                n_xs: 4,
                body: Arc::new(body),
            };
            let region =
                Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Scan, 0).unwrap());
            let g = calling(&region);
            let e = edges(DType::I64);
            let e32 = edges(DType::I32);
            let inputs = vec![
                ints(DType::I64, &[row], &cycled(&e, 1, row)),
                ints(DType::I64, &[], &[-3]),
                ints(DType::I32, &[length], &cycled(&e32, 4, length)),
                ints(DType::I64, &[length, row], &cycled(&e, 7, length * row)),
                HostTensor::new(
                    Shape::new(vec![length]).unwrap(),
                    HostData::Bool((0..length).map(|k| k % 3 == 0).collect()),
                ),
                ints(DType::I32, &[length, row], &cycled(&e32, 2, length * row)),
            ];
            let context = format!("scan over integer slices of {row}, reverse {reverse}");
            check_both_ways(&context, &g, std::slice::from_ref(&inputs));
        }
    }
}

/// Regions nested in an integer loop body: a `cond` choosing between integer results (small
/// and large), and a reverse scan over int32 rows (small and large) whose index, converted
/// to int64, steps an int64 carry, stacking int32 rows.
#[test]
fn regions_nested_in_integer_bodies_give_the_interpreters_bits() {
    for n in [6, 100] {
        let v = ty(DType::I64, &[n]);
        let branch = |double: bool| {
            graph(&[v.clone(), ty(DType::I32, &[])], |b, p| {
                let out = if double {
                    let two = b.weak_int(2);
                    b.binary(BinaryOp::Mul, p[0], two).unwrap()
                } else {
                    let seven = b.weak_int(7);
                    b.binary(BinaryOp::Rem, p[0], seven).unwrap()
                };
                let k = b.binary(BinaryOp::BitXor, p[1], p[1]).unwrap();
                vec![out, k]
            })
        };
        let inner_cond = Arc::new(
            Region::new(
                RegionKind::Cond {
                    then_branch: Arc::new(branch(true)),
                    else_branch: Arc::new(branch(false)),
                },
                RegionForm::Cond,
                0,
            )
            .unwrap(),
        );
        // (j, c, row) -> (c - j + row, 3 * row): a scan over int32 rows stacking int32 rows.
        let inner_body = graph(
            &[ty(DType::F64, &[]), v.clone(), ty(DType::I32, &[n])],
            |b, p| {
                let j = b.astype(p[0], DType::I64).unwrap();
                let c = b.binary(BinaryOp::Sub, p[1], j).unwrap();
                let row = b.astype(p[2], DType::I64).unwrap();
                let c = b.binary(BinaryOp::Add, c, row).unwrap();
                let three = b.weak_int(3);
                vec![c, b.binary(BinaryOp::Mul, p[2], three).unwrap()]
            },
        );
        let inner_scan = Arc::new(
            Region::new(
                RegionKind::Scan(ScanBody {
                    length: 5,
                    start: 1,
                    reverse: true,
                    n_carry: 1,
                    n_const: 0,
                    n_xs: 1,
                    body: Arc::new(inner_body),
                }),
                RegionForm::Scan,
                0,
            )
            .unwrap(),
        );
        let g = fori(9, std::slice::from_ref(&v), |b, p| {
            let (i, x) = (b.astype(p[0], DType::I32).unwrap(), p[1]);
            let two = b.weak_int(2);
            let parity = b.binary(BinaryOp::Rem, i, two).unwrap();
            let zero = b.weak_int(0);
            let even = b.compare(Comparison::Equal, parity, zero).unwrap();
            let chosen = b
                .push_region_calls(inner_cond.clone(), 0..2, &[even, x, i])
                .unwrap()[0];
            let rows = b.astype(x, DType::I32).unwrap();
            let rows = b.reshape_to(rows, Shape::new(vec![1, n]).unwrap()).unwrap();
            let rows = b
                .broadcast_to(rows, Shape::new(vec![5, n]).unwrap())
                .unwrap();
            let scanned = b
                .push_region_calls(inner_scan.clone(), 0..2, &[chosen, rows])
                .unwrap();
            let stacked = b.astype(scanned[1], DType::I64).unwrap();
            let total = b.sum(stacked, Some(&[0]), false).unwrap();
            vec![b.binary(BinaryOp::BitXor, scanned[0], total).unwrap()]
        });
        let e = edges(DType::I64);
        let sets: Vec<Vec<HostTensor>> = (0..3)
            .map(|shift| vec![ints(DType::I64, &[n], &cycled(&e, shift * 5, n))])
            .collect();
        check_both_ways(&format!("nested regions over [{n}]"), &g, &sets);
    }
}
