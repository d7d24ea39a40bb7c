//! Loops and plans whose values are too large for machine registers, which the machine code
//! holds as arrays in memory: every elementwise op with each way an operand is read (same
//! shape, one element, broadcast through a table), the layout ops, reductions over blocks of
//! 1024 with tails along leading and trailing axes, float64 `matmul`, `solve`, large carries
//! that swap places or pass through, loops and branches nested with large carries, and scans
//! over large float32 and bool slices. Native code and the interpreter give the same bits,
//! and values past `NATIVE_ELEMENTS` stay in the interpreter.

mod common;

use common::{calling, check_both_ways, compile, every_op, fori, graph, special_values, Rng};
use quabla_backend::{Executable, HostTensor};
use quabla_ir::{
    BinaryOp, Comparison, DType, GraphBuilder, HostData, NodeId, Region, RegionForm, RegionKind,
    ScanBody, Shape, TensorType, UnaryOp,
};
use std::sync::Arc;

fn ty(dt: DType, dims: &[usize]) -> TensorType {
    TensorType::new(dt, Shape::new(dims.to_vec()).unwrap())
}

fn tensor(dt: DType, dims: &[usize], values: impl IntoIterator<Item = f64>) -> HostTensor {
    let values: Vec<f64> = values.into_iter().collect();
    assert_eq!(values.len(), dims.iter().product::<usize>());
    HostTensor::new(
        Shape::new(dims.to_vec()).unwrap(),
        HostData::from_f64(dt, values),
    )
}

/// `values` repeated (or cut) to `n` elements, from position `from`.
fn cycled(values: &[f64], from: usize, n: usize) -> Vec<f64> {
    (0..n).map(|i| values[(from + i) % values.len()]).collect()
}

/// Every elementwise op on a `[4, 40]` operand and a second operand read as the same shape,
/// as one element, along the last axis (`[40]`) and along the first (`[4, 1]`): the two
/// read through tables of positions.
#[test]
fn every_elementwise_op_over_large_operands_gives_the_same_bits() {
    let mut rng = Rng::new(17);
    let values = special_values(&mut rng);
    let big = [4, 40];
    for dt in [DType::F32, DType::F64] {
        for second in [&[4, 40][..], &[], &[40], &[4, 1]] {
            for (name, apply) in every_op() {
                let carries = [ty(dt, &big), ty(dt, second), ty(dt, &big)];
                let g = fori(2, &carries, |b, p| {
                    let out = apply(b, p[1], p[2]);
                    vec![p[1], p[2], out]
                });
                let n: usize = second.iter().product();
                let sets: Vec<Vec<HostTensor>> = (0..3)
                    .map(|shift| {
                        vec![
                            tensor(dt, &big, cycled(&values, shift * 7, 160)),
                            tensor(dt, second, cycled(&values, shift * 5 + 3, n)),
                            tensor(dt, &big, cycled(&values, 0, 160)),
                        ]
                    })
                    .collect();
                check_both_ways(&format!("{name} {dt} by {second:?}"), &g, &sets);
            }
        }
    }
}

/// Transposes, slices, concatenations, broadcasts, gathers (of large and small results) and
/// reshapes of a `[12, 10]` carry, each result carried too.
#[test]
fn layout_ops_over_large_values_give_the_same_bits() {
    for dt in [DType::F32, DType::F64] {
        let carries = [
            ty(dt, &[12, 10]),
            ty(dt, &[10, 12]),
            ty(dt, &[7, 10]),
            ty(dt, &[24, 10]),
            ty(dt, &[3, 120]),
            ty(dt, &[4, 10]),
            ty(dt, &[10, 12]),
            ty(dt, &[9]),
            ty(dt, &[12, 20]),
        ];
        let g = fori(3, &carries, |b, p| {
            let m = p[1];
            let half = b.scalar(0.5, dt, false);
            let one = b.scalar(1.0, dt, false);
            let m1 = b.binary(BinaryOp::Mul, m, half).unwrap();
            let m1 = b.binary(BinaryOp::Add, m1, one).unwrap();
            let t = b.transpose(m, None).unwrap();
            let s = b.slice(m, vec![2, 0], vec![7, 10]).unwrap();
            let c = b.concat(&[m, m1], 0).unwrap();
            let r = b.reshape_to(m, Shape::new(vec![1, 120]).unwrap()).unwrap();
            let r = b
                .broadcast_to(r, Shape::new(vec![3, 120]).unwrap())
                .unwrap();
            let gathered = b.gather(m, &[11, 0, 5, 5], 0).unwrap();
            let flat = b.reshape_to(t, Shape::new(vec![10, 12]).unwrap()).unwrap();
            let row = b.slice(m, vec![3, 1], vec![1, 9]).unwrap();
            let row = b.reshape_to(row, Shape::new(vec![9]).unwrap()).unwrap();
            let back = t_back(b, t);
            let side = b.concat(&[m, back], 1).unwrap();
            vec![m1, t, s, c, r, gathered, flat, row, side]
        });
        let zeros = |dims: &[usize]| tensor(dt, dims, vec![0.0; dims.iter().product()]);
        let mut inputs = vec![tensor(
            dt,
            &[12, 10],
            (0..120).map(|i| (i as f64 * 0.37).sin() * 10.0),
        )];
        for c in &carries[1..] {
            inputs.push(zeros(c.shape.dims()));
        }
        check_both_ways(&format!("layout {dt}"), &g, &[inputs]);
    }
}

/// The transpose of `t` back to `[12, 10]`.
fn t_back(b: &mut GraphBuilder, t: NodeId) -> NodeId {
    b.transpose(t, None).unwrap()
}

/// Sums, means, maxima and minima of large operands, over every axis and all of them, with
/// groups of one to three blocks of 1024 and tails that are not a multiple of 8, on values of
/// mixed magnitudes whose sums depend on the order.
#[test]
fn reductions_of_large_values_give_the_same_bits() {
    let mut rng = Rng::new(3);
    for dt in [DType::F32, DType::F64] {
        for dims in [[3, 2500], [2, 1030], [70, 3], [5, 13]] {
            let x = ty(dt, &dims);
            let outs = [
                ty(dt, &[]),
                ty(dt, &[dims[0]]),
                ty(dt, &[dims[1]]),
                ty(dt, &[dims[0]]),
                ty(dt, &[dims[1]]),
                ty(dt, &[]),
                ty(dt, &[]),
            ];
            let mut carries = vec![x.clone()];
            carries.extend(outs.iter().cloned());
            let g = fori(2, &carries, |b, p| {
                let x = p[1];
                let all = b.sum(x, None, false).unwrap();
                let rows = b.sum(x, Some(&[1]), false).unwrap();
                let cols = b.mean(x, Some(&[0]), false).unwrap();
                let row_max = b.max(x, Some(&[1]), false).unwrap();
                let col_min = b.min(x, Some(&[0]), false).unwrap();
                let mean = b.mean(x, None, false).unwrap();
                let max = b.max(x, None, false).unwrap();
                let tiny = b.scalar(1e-3, dt, false);
                let nudge = b.binary(BinaryOp::Mul, all, tiny).unwrap();
                let x1 = b.binary(BinaryOp::Add, x, nudge).unwrap();
                vec![x1, all, rows, cols, row_max, col_min, mean, max]
            });
            let n = dims[0] * dims[1];
            let mut values: Vec<f64> = (0..n)
                .map(|i| rng.finite() * 10f64.powi((i % 7) as i32 - 3))
                .collect();
            let with_specials = {
                let mut v = values.clone();
                v[n / 2] = f64::NAN;
                v[n / 3] = -0.0;
                v
            };
            let mut sets = Vec::new();
            for v in [std::mem::take(&mut values), with_specials] {
                let mut inputs = vec![tensor(dt, &dims, v)];
                for o in &outs {
                    inputs.push(tensor(dt, o.shape.dims(), vec![0.0; o.shape.size()]));
                }
                sets.push(inputs);
            }
            check_both_ways(&format!("reductions {dt} {dims:?}"), &g, &sets);
        }
    }
}

/// Float64 products in a loop: a matrix by a loop constant, the product's transpose by the
/// constant's, a batched product, and a transposed left operand large enough that the
/// interpreter's schedule folds the transpose into the product.
#[test]
fn matmuls_in_loops_give_the_kernel_bits() {
    let dt = DType::F64;
    let carries = [
        ty(dt, &[8, 20]),
        ty(dt, &[20, 30]),
        ty(dt, &[2, 8, 20]),
        ty(dt, &[64, 48]),
        ty(dt, &[48, 48]),
    ];
    let g = fori(3, &carries, |b, p| {
        let (a, w, batch, tall, square) = (p[1], p[2], p[3], p[4], p[5]);
        let c = b.matmul(a, w).unwrap();
        let wt = b.transpose(w, None).unwrap();
        let back = b.matmul(c, wt).unwrap();
        let small = b.scalar(1e-3, dt, false);
        let back = b.binary(BinaryOp::Mul, back, small).unwrap();
        let a1 = b.binary(BinaryOp::Add, a, back).unwrap();
        let wb = b
            .broadcast_to(w, Shape::new(vec![2, 20, 30]).unwrap())
            .unwrap();
        let bc = b.matmul(batch, wb).unwrap();
        let bs = b.sum(bc, Some(&[2]), false).unwrap();
        let bs = b
            .reshape_to(bs, Shape::new(vec![2, 8, 1]).unwrap())
            .unwrap();
        let bs = b.binary(BinaryOp::Mul, bs, small).unwrap();
        let batch1 = b.binary(BinaryOp::Add, batch, bs).unwrap();
        let tt = b.transpose(tall, None).unwrap();
        let gram = b.matmul(tt, tall).unwrap();
        let gram = b.binary(BinaryOp::Mul, gram, small).unwrap();
        let square1 = b.binary(BinaryOp::Add, square, gram).unwrap();
        vec![a1, w, batch1, tall, square1]
    });
    let fill = |dims: &[usize], k: f64| {
        let n: usize = dims.iter().product();
        tensor(dt, dims, (0..n).map(|i| ((i as f64 + k) * 0.731).sin()))
    };
    let inputs = vec![
        fill(&[8, 20], 0.0),
        fill(&[20, 30], 1.0),
        fill(&[2, 8, 20], 2.0),
        fill(&[64, 48], 3.0),
        fill(&[48, 48], 4.0),
    ];
    check_both_ways("matmul f64", &g, &[inputs]);
}

/// A loop solving a 10 x 10 system with 8 right-hand sides (80 elements, in memory) per trip.
#[test]
fn solves_of_large_right_hand_sides_give_the_kernel_bits() {
    for dt in [DType::F32, DType::F64] {
        let carries = [ty(dt, &[10, 10]), ty(dt, &[10, 8])];
        let g = fori(4, &carries, |b, p| {
            let x = b.solve(p[1], p[2]).unwrap();
            let k = b.scalar(0.9, dt, false);
            let x = b.binary(BinaryOp::Mul, x, k).unwrap();
            let x = b.binary(BinaryOp::Add, x, p[2]).unwrap();
            vec![p[1], x]
        });
        let a = tensor(
            dt,
            &[10, 10],
            (0..100).map(|i| {
                if i % 11 == 0 {
                    4.0
                } else {
                    ((i as f64) * 0.3).cos() * 0.5
                }
            }),
        );
        let rhs = tensor(dt, &[10, 8], (0..80).map(|i| (i as f64 * 0.1).sin()));
        check_both_ways(&format!("solve {dt}"), &g, &[vec![a, rhs]]);
    }
}

/// Large carries that swap places every trip, pass through unchanged, or take another
/// carry's reshaped value.
#[test]
fn large_carries_that_swap_or_pass_through_give_the_same_bits() {
    for dt in [DType::F32, DType::F64] {
        let v = ty(dt, &[100]);
        let carries = [v.clone(), v.clone(), v.clone(), ty(dt, &[10, 10])];
        let g = fori(5, &carries, |b, p| {
            let k = b.scalar(1.5, dt, false);
            let scaled = b.binary(BinaryOp::Mul, p[1], k).unwrap();
            let square = b
                .reshape_to(p[2], Shape::new(vec![10, 10]).unwrap())
                .unwrap();
            // (p, q, r, s) -> (q, 1.5 p, r, reshape(q))
            vec![p[2], scaled, p[3], square]
        });
        let inputs = vec![
            tensor(dt, &[100], (0..100).map(|i| i as f64)),
            tensor(dt, &[100], (0..100).map(|i| -(i as f64) * 0.25)),
            tensor(dt, &[100], (0..100).map(|i| (i as f64).sqrt())),
            tensor(dt, &[10, 10], vec![0.0; 100]),
        ];
        check_both_ways(&format!("swapping carries {dt}"), &g, &[inputs]);
    }
}

/// A loop whose body holds a bounded while loop with a large carry, a scan over the rows of
/// a large operand stacking large rows, and a `cond` with a large result.
#[test]
fn regions_nested_with_large_values_give_the_same_bits() {
    for dt in [DType::F32, DType::F64] {
        let v = ty(dt, &[3, 100]);
        let s = ty(dt, &[]);
        // while (t, w): t < 5: (t + 1, 0.9 w + sin(w))
        let ins = [s.clone(), v.clone()];
        let cond = graph(&ins, |b, p| {
            let five = b.scalar(5.0, dt, false);
            vec![b.compare(Comparison::Less, p[0], five).unwrap()]
        });
        let body = graph(&ins, |b, p| {
            let one = b.scalar(1.0, dt, false);
            let t = b.binary(BinaryOp::Add, p[0], one).unwrap();
            let k = b.scalar(0.9, dt, false);
            let w = b.binary(BinaryOp::Mul, p[1], k).unwrap();
            let sin = b.unary(UnaryOp::Sin, p[1]).unwrap();
            vec![t, b.binary(BinaryOp::Add, w, sin).unwrap()]
        });
        let inner_while = Arc::new(
            Region::new(
                RegionKind::While {
                    n_carry: 2,
                    cond: Arc::new(cond),
                    body: Arc::new(body),
                    max_trips: Some(10),
                },
                RegionForm::While,
                0,
            )
            .unwrap(),
        );
        // scan over the 3 rows of v: carry a running sum row, stack 2 * row + carry
        let row = ty(dt, &[100]);
        let scan_body = graph(&[ty(DType::F64, &[]), row.clone(), row.clone()], |b, p| {
            let sum = b.binary(BinaryOp::Add, p[1], p[2]).unwrap();
            let two = b.scalar(2.0, dt, false);
            let twice = b.binary(BinaryOp::Mul, p[2], two).unwrap();
            vec![sum, b.binary(BinaryOp::Add, twice, p[1]).unwrap()]
        });
        let inner_scan = Arc::new(
            Region::new(
                RegionKind::Scan(ScanBody {
                    length: 3,
                    start: 0,
                    reverse: true,
                    n_carry: 1,
                    n_const: 0,
                    n_xs: 1,
                    body: Arc::new(scan_body),
                }),
                RegionForm::Scan,
                0,
            )
            .unwrap(),
        );
        // cond(sum > 0, 2 v, v - 1)
        let branch = |double: bool| {
            graph(std::slice::from_ref(&v), |b, p| {
                let out = if double {
                    let two = b.scalar(2.0, dt, false);
                    b.binary(BinaryOp::Mul, p[0], two).unwrap()
                } else {
                    let one = b.scalar(1.0, dt, false);
                    b.binary(BinaryOp::Sub, p[0], one).unwrap()
                };
                vec![out]
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
        let g = fori(3, std::slice::from_ref(&v), |b, p| {
            let zero = b.scalar(0.0, dt, false);
            let w = b
                .push_region_calls(inner_while.clone(), 0..2, &[zero, p[1]])
                .unwrap()[1];
            let init = b.slice(w, vec![0, 0], vec![1, 100]).unwrap();
            let init = b.reshape_to(init, Shape::new(vec![100]).unwrap()).unwrap();
            let scanned = b
                .push_region_calls(inner_scan.clone(), 0..2, &[init, w])
                .unwrap();
            let total = b.sum(scanned[1], None, false).unwrap();
            let positive = b.compare(Comparison::Greater, total, zero).unwrap();
            let chosen = b
                .push_region_calls(inner_cond.clone(), 0..1, &[positive, scanned[1]])
                .unwrap()[0];
            let small = b.scalar(1e-2, dt, false);
            let chosen = b.binary(BinaryOp::Mul, chosen, small).unwrap();
            let first = b
                .broadcast_to(scanned[0], Shape::new(vec![3, 100]).unwrap())
                .unwrap();
            let first = b.binary(BinaryOp::Mul, first, small).unwrap();
            let out = b.binary(BinaryOp::Add, chosen, first).unwrap();
            vec![out]
        });
        for sign in [1.0, -1.0] {
            let inputs = vec![tensor(
                dt,
                &[3, 100],
                (0..300).map(|i| sign * ((i as f64) * 0.05).cos()),
            )];
            check_both_ways(&format!("nested {dt} sign {sign}"), &g, &[inputs]);
        }
    }
}

/// A scan over large float32 and bool slices stacking large float32 and bool slices.
#[test]
fn scans_over_large_slices_of_every_dtype_give_the_same_bits() {
    let (f32v, boolv) = (ty(DType::F32, &[100]), ty(DType::Bool, &[100]));
    let body = graph(
        &[
            ty(DType::F64, &[]),
            ty(DType::F64, &[100]),
            f32v.clone(),
            boolv.clone(),
        ],
        |b, p| {
            let wide = b.astype(p[2], DType::F64).unwrap();
            let zero = b.scalar(0.0, DType::F64, false);
            let picked = b.select(p[3], wide, zero).unwrap();
            let carry = b.binary(BinaryOp::Add, p[1], picked).unwrap();
            let narrow = b.astype(carry, DType::F32).unwrap();
            let mask = b.compare(Comparison::Greater, carry, zero).unwrap();
            vec![carry, narrow, mask]
        },
    );
    let region = Arc::new(
        Region::new(
            RegionKind::Scan(ScanBody {
                length: 5,
                start: 0,
                reverse: false,
                n_carry: 1,
                n_const: 0,
                n_xs: 2,
                body: Arc::new(body),
            }),
            RegionForm::Scan,
            0,
        )
        .unwrap(),
    );
    let g = calling(&region);
    let inputs = vec![
        tensor(DType::F64, &[100], (0..100).map(|i| -(i as f64) * 0.1)),
        tensor(
            DType::F32,
            &[5, 100],
            (0..500).map(|i| (i as f64 * 0.7).sin() + 0.1),
        ),
        tensor(
            DType::Bool,
            &[5, 100],
            (0..500).map(|i| (i % 3 != 0) as u8 as f64),
        ),
    ];
    check_both_ways("scan over f32 and bool slices", &g, &[inputs]);
}

/// A whole plan with values of 200 elements, compiled to machine code, against the
/// interpreter.
#[test]
fn plans_with_large_values_give_the_same_bits() {
    for dt in [DType::F32, DType::F64] {
        let g = graph(&[ty(dt, &[200]), ty(dt, &[20, 10])], |b, p| {
            let s = b.unary(UnaryOp::Tanh, p[0]).unwrap();
            let m = b.reshape_to(s, Shape::new(vec![20, 10]).unwrap()).unwrap();
            let m = b.binary(BinaryOp::Mul, m, p[1]).unwrap();
            let rows = b.sum(m, Some(&[1]), false).unwrap();
            let total = b.mean(m, None, false).unwrap();
            vec![m, rows, total]
        });
        let native = compile(&g, true);
        assert!(native.compile_native_now(), "no native form");
        let interpreted = compile(&g, false);
        let inputs = vec![
            tensor(dt, &[200], (0..200).map(|i| (i as f64 - 100.0) * 0.03)),
            tensor(dt, &[20, 10], (0..200).map(|i| (i as f64 * 0.11).cos())),
        ];
        let (got, want) = (
            native.run(&inputs).unwrap(),
            interpreted.run(&inputs).unwrap(),
        );
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            common::assert_bitwise(&format!("plan {dt} output {k}"), &g.data, &w.data);
        }
    }
}
