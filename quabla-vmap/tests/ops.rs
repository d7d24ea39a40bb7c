//! vmap versus loop for every op: a table of graph builders over random shapes, each batched
//! with random `in_axes` (unmapped operands included), batch sizes and `out_axes`, and compared
//! bitwise with running the unbatched graph on each example and stacking the results. Every
//! case is also batched twice (a batched graph batched again) and checked against a loop over
//! the once-batched graph.

mod common;

use common::*;
use quabla_ir::{
    BinaryOp, Comparison, DType, Graph, GraphBuilder, HostData, LinalgKind, NodeId, Op, ReduceKind,
    UnaryOp,
};

type Build = Box<dyn Fn(&mut Rng, DType) -> Graph>;

struct Case {
    name: String,
    dtypes: &'static [DType],
    domain: Domain,
    build: Build,
}

const FLOATS: &[DType] = &[DType::F64, DType::F32];
const INTS: &[DType] = &[DType::I32, DType::I64];
/// Integers with signs, zeros (for division) and both ends of int32, exact as f64.
const INT_VALUES: Domain = Domain::Discrete(&[
    -7.0,
    -3.0,
    -1.0,
    0.0,
    1.0,
    2.0,
    5.0,
    31.0,
    2147483647.0,
    -2147483648.0,
]);
const UNIT: Domain = Domain::Uniform(0.1, 0.9);
const SIGNED: Domain = Domain::Uniform(-1.0, 1.0);
const TIES: Domain = Domain::Discrete(&[-1.0, -0.0, 0.0, 0.5, 1.0]);

fn case(
    name: impl Into<String>,
    dtypes: &'static [DType],
    domain: Domain,
    build: impl Fn(&mut Rng, DType) -> Graph + 'static,
) -> Case {
    Case {
        name: name.into(),
        dtypes,
        domain,
        build: Box::new(build),
    }
}

/// A one-output graph from a builder body.
fn graph(f: impl FnOnce(&mut GraphBuilder) -> NodeId) -> Graph {
    let mut b = GraphBuilder::new();
    let out = f(&mut b);
    b.finish(vec![out]).unwrap()
}

/// `x + n * I` on the last two axes of a square `x` (diagonally dominant for entries in
/// `[-1, 1]`, so nonsingular and well conditioned).
fn shift_diagonal(b: &mut GraphBuilder, x: NodeId, n: usize) -> NodeId {
    let dtype = b.ty(x).dtype;
    let eye: Vec<f64> = (0..n * n)
        .map(|i| if i / n == i % n { n as f64 } else { 0.0 })
        .collect();
    let c = b
        .constant(HostData::from_f64(dtype, eye), shape(&[n, n]), false)
        .unwrap();
    b.add(x, c).unwrap()
}

/// Swaps the last two axes.
fn matrix_transpose(b: &mut GraphBuilder, x: NodeId) -> NodeId {
    let r = b.ty(x).shape.rank() as isize;
    let mut perm: Vec<isize> = (0..r).collect();
    perm.swap(r as usize - 1, r as usize - 2);
    b.transpose(x, Some(&perm)).unwrap()
}

/// `x x^T + n I`: symmetric positive definite.
fn spd(b: &mut GraphBuilder, x: NodeId, n: usize) -> NodeId {
    let xt = matrix_transpose(b, x);
    let p = b.push(Op::Matmul, &[x, xt]).unwrap();
    shift_diagonal(b, p, n)
}

fn square_dims(rng: &mut Rng, n: usize) -> Vec<usize> {
    let mut d = rng.dims(0, 2);
    d.extend([n, n]);
    d
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();

    // Leaves.
    cases.push(case("input", FLOATS, SIGNED, |rng, dt| {
        let d = rng.dims(0, 3);
        graph(|b| input(b, "x", dt, &d))
    }));
    cases.push(case("constant", FLOATS, SIGNED, |rng, dt| {
        let d = rng.dims(0, 3);
        let mut b = GraphBuilder::new();
        let x = input(&mut b, "x", dt, &d);
        let values: Vec<f64> = (0..d.iter().product::<usize>())
            .map(|i| i as f64 * 0.25 - 1.0)
            .collect();
        let c = b
            .constant(HostData::from_f64(dt, values), shape(&d), false)
            .unwrap();
        let y = b.mul(x, c).unwrap();
        b.finish(vec![y, c]).unwrap()
    }));

    // Elementwise.
    for u in [UnaryOp::Neg, UnaryOp::BitNot] {
        cases.push(case(
            format!("{} int", u.name()),
            INTS,
            INT_VALUES,
            move |rng, dt| {
                let d = rng.dims(0, 3);
                graph(|b| {
                    let x = input(b, "x", dt, &d);
                    b.unary(u, x).unwrap()
                })
            },
        ));
    }
    for op in [
        BinaryOp::Add,
        BinaryOp::Mul,
        BinaryOp::Pow,
        BinaryOp::FloorDiv,
        BinaryOp::Rem,
        BinaryOp::BitAnd,
        BinaryOp::BitOr,
        BinaryOp::BitXor,
        BinaryOp::ShiftLeft,
        BinaryOp::ShiftRightArithmetic,
        BinaryOp::ShiftRightLogical,
    ] {
        cases.push(case(
            format!("{} int", op.name()),
            INTS,
            INT_VALUES,
            move |rng, dt| {
                let s = rng.dims(0, 3);
                let (da, db) = (rng.partner(&s), rng.partner(&s));
                graph(|b| {
                    let x = input(b, "x", dt, &da);
                    let y = input(b, "y", dt, &db);
                    b.push(Op::Binary(op), &[x, y]).unwrap()
                })
            },
        ));
    }
    for u in UnaryOp::ALL.into_iter().filter(|u| u.takes_floats()) {
        let domain = match u {
            UnaryOp::Arccosh => Domain::Uniform(1.1, 3.0),
            UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => {
                Domain::Discrete(&[-1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5])
            }
            _ => UNIT,
        };
        cases.push(case(u.name(), FLOATS, domain, move |rng, dt| {
            let d = rng.dims(0, 3);
            graph(|b| {
                let x = input(b, "x", dt, &d);
                b.unary(u, x).unwrap()
            })
        }));
    }
    for e in [-3, 0, 1, 2, 5] {
        cases.push(case(
            format!("powi({e})"),
            FLOATS,
            SIGNED,
            move |rng, dt| {
                let d = rng.dims(0, 3);
                graph(|b| {
                    let x = input(b, "x", dt, &d);
                    b.powi(x, e).unwrap()
                })
            },
        ));
    }
    for op in BinaryOp::ALL.into_iter().filter(|op| op.takes_floats()) {
        cases.push(case(op.name(), FLOATS, UNIT, move |rng, dt| {
            let s = rng.dims(0, 3);
            let (da, db) = (rng.partner(&s), rng.partner(&s));
            graph(|b| {
                let x = input(b, "x", dt, &da);
                let y = input(b, "y", dt, &db);
                b.push(Op::Binary(op), &[x, y]).unwrap()
            })
        }));
    }
    for c in Comparison::ALL {
        cases.push(case(c.name(), FLOATS, TIES, move |rng, dt| {
            let s = rng.dims(0, 3);
            let (da, db) = (rng.partner(&s), rng.partner(&s));
            graph(|b| {
                let x = input(b, "x", dt, &da);
                let y = input(b, "y", dt, &db);
                b.push(Op::Compare(c), &[x, y]).unwrap()
            })
        }));
    }
    for c in [Comparison::Equal, Comparison::NotEqual] {
        cases.push(case(
            format!("{} of bools", c.name()),
            &[DType::Bool],
            TIES,
            move |rng, dt| {
                let s = rng.dims(0, 3);
                let (da, db) = (rng.partner(&s), rng.partner(&s));
                graph(|b| {
                    let x = input(b, "x", dt, &da);
                    let y = input(b, "y", dt, &db);
                    b.push(Op::Compare(c), &[x, y]).unwrap()
                })
            },
        ));
    }
    cases.push(case("where", FLOATS, SIGNED, |rng, dt| {
        let s = rng.dims(0, 3);
        let (dp, da, db) = (rng.partner(&s), rng.partner(&s), rng.partner(&s));
        graph(|b| {
            let p = input(b, "p", DType::Bool, &dp);
            let x = input(b, "x", dt, &da);
            let y = input(b, "y", dt, &db);
            b.push(Op::Where, &[p, x, y]).unwrap()
        })
    }));
    for (from, to, weak) in [
        (DType::F64, DType::F32, false),
        (DType::F32, DType::F64, false),
        (DType::F64, DType::Bool, false),
        (DType::Bool, DType::F64, false),
        (DType::Bool, DType::F32, true),
    ] {
        cases.push(case(
            format!("cast {} to {}", from.ir_name(), to.ir_name()),
            &[DType::F64],
            TIES,
            move |rng, _| {
                let d = rng.dims(0, 3);
                graph(|b| {
                    let x = input(b, "x", from, &d);
                    b.push(Op::Cast { to, weak }, &[x]).unwrap()
                })
            },
        ));
    }
    cases.push(case("stop_gradient", FLOATS, SIGNED, |rng, dt| {
        let d = rng.dims(0, 3);
        graph(|b| {
            let x = input(b, "x", dt, &d);
            b.stop_gradient(x).unwrap()
        })
    }));

    // Reductions.
    cases.push(case("sum", FLOATS, TIES, |rng, dt| {
        let d = rng.dims(0, 3);
        graph(|b| {
            let x = input(b, "x", dt, &d);
            b.sum(x, None, false).unwrap()
        })
    }));
    cases.push(case("mean", FLOATS, SIGNED, |rng, dt| {
        let d = rng.dims(0, 3);
        graph(|b| {
            let x = input(b, "x", dt, &d);
            b.mean(x, None, false).unwrap()
        })
    }));
    type AxesOp = fn(Vec<usize>) -> Op;
    let axis_reductions: [(&str, AxesOp); 4] = [
        ("sum_axis", |axes| Op::Reduce {
            kind: ReduceKind::SumAxis,
            axes,
        }),
        ("mean_axis", |axes| Op::Reduce {
            kind: ReduceKind::MeanAxis,
            axes,
        }),
        ("max_axis", |axes| Op::Reduce {
            kind: ReduceKind::MaxAxis,
            axes,
        }),
        ("min_axis", |axes| Op::Reduce {
            kind: ReduceKind::MinAxis,
            axes,
        }),
    ];
    for (name, make) in axis_reductions {
        cases.push(case(name, FLOATS, TIES, move |rng, dt| {
            let d = rng.dims(1, 3);
            let axes = rng.subset(d.len());
            graph(|b| {
                let x = input(b, "x", dt, &d);
                b.push(make(axes), &[x]).unwrap()
            })
        }));
    }
    cases.push(case("cumsum", FLOATS, TIES, |rng, dt| {
        let d = rng.dims(1, 3);
        let axis = rng.below(d.len());
        let reverse = rng.chance(0.5);
        graph(|b| {
            let x = input(b, "x", dt, &d);
            b.push(Op::Cumsum { axis, reverse }, &[x]).unwrap()
        })
    }));

    // Layout.
    cases.push(case("reshape", FLOATS, SIGNED, |rng, dt| {
        let d = rng.dims(0, 3);
        // Merge random neighbours, insert unit axes, maybe reverse: same element count.
        let mut target: Vec<usize> = Vec::new();
        for &e in &d {
            match target.last_mut() {
                Some(last) if rng.chance(0.4) => *last *= e,
                _ => target.push(e),
            }
            if rng.chance(0.2) {
                target.push(1);
            }
        }
        if rng.chance(0.5) {
            target.reverse();
        }
        graph(|b| {
            let x = input(b, "x", dt, &d);
            b.push(
                Op::Reshape {
                    shape: shape(&target),
                },
                &[x],
            )
            .unwrap()
        })
    }));
    cases.push(case("transpose", FLOATS, SIGNED, |rng, dt| {
        let d = rng.dims(0, 4);
        let perm = rng.permutation(d.len());
        graph(|b| {
            let x = input(b, "x", dt, &d);
            b.push(Op::Transpose { perm }, &[x]).unwrap()
        })
    }));
    cases.push(case("broadcast", FLOATS, SIGNED, |rng, dt| {
        let target = rng.dims(0, 3);
        let d = rng.partner(&target);
        graph(|b| {
            let x = input(b, "x", dt, &d);
            b.push(
                Op::Broadcast {
                    shape: shape(&target),
                },
                &[x],
            )
            .unwrap()
        })
    }));
    cases.push(case("concat", FLOATS, SIGNED, |rng, dt| {
        let d = rng.dims(1, 3);
        let axis = rng.below(d.len());
        let parts: Vec<Vec<usize>> = (0..rng.range(1, 3))
            .map(|_| {
                let mut p = d.clone();
                p[axis] = rng.range(1, 3);
                p
            })
            .collect();
        graph(|b| {
            let xs: Vec<NodeId> = parts
                .iter()
                .enumerate()
                .map(|(i, p)| input(b, &format!("x{i}"), dt, p))
                .collect();
            b.push(Op::Concat { axis }, &xs).unwrap()
        })
    }));
    cases.push(case("slice", FLOATS, SIGNED, |rng, dt| {
        let d = rng.dims(0, 3);
        let sizes: Vec<usize> = d.iter().map(|&e| rng.range(1, e)).collect();
        let starts: Vec<usize> = d
            .iter()
            .zip(&sizes)
            .map(|(&e, &s)| rng.range(0, e - s))
            .collect();
        graph(|b| {
            let x = input(b, "x", dt, &d);
            b.push(Op::Slice { starts, sizes }, &[x]).unwrap()
        })
    }));
    cases.push(case("pad_slice", FLOATS, SIGNED, |rng, dt| {
        let full = rng.dims(0, 3);
        let d: Vec<usize> = full.iter().map(|&e| rng.range(1, e)).collect();
        let starts: Vec<usize> = full
            .iter()
            .zip(&d)
            .map(|(&e, &s)| rng.range(0, e - s))
            .collect();
        graph(|b| {
            let x = input(b, "x", dt, &d);
            b.push(
                Op::PadSlice {
                    starts,
                    shape: shape(&full),
                },
                &[x],
            )
            .unwrap()
        })
    }));
    cases.push(case("gather", FLOATS, SIGNED, |rng, dt| {
        let d = rng.dims(1, 3);
        let axis = rng.below(d.len());
        let indices: Vec<usize> = (0..rng.range(1, 4)).map(|_| rng.below(d[axis])).collect();
        graph(|b| {
            let x = input(b, "x", dt, &d);
            b.push(Op::Gather { axis, indices }, &[x]).unwrap()
        })
    }));
    cases.push(case("scatter_add", FLOATS, SIGNED, |rng, dt| {
        let d = rng.dims(1, 3);
        let axis = rng.below(d.len());
        let indices: Vec<usize> = (0..rng.range(1, 4)).map(|_| rng.below(d[axis])).collect();
        let mut du = d.clone();
        du[axis] = indices.len();
        graph(|b| {
            let base = input(b, "base", dt, &d);
            let upd = input(b, "updates", dt, &du);
            b.push(Op::ScatterAdd { axis, indices }, &[base, upd])
                .unwrap()
        })
    }));

    // Linear algebra.
    cases.push(case("matmul", FLOATS, SIGNED, |rng, dt| {
        let s = rng.dims(0, 2);
        let (m, k, n) = (rng.range(1, 3), rng.range(1, 3), rng.range(1, 3));
        let mut da = rng.partner(&s);
        da.extend([m, k]);
        let mut db = rng.partner(&s);
        db.extend([k, n]);
        graph(|b| {
            let x = input(b, "a", dt, &da);
            let y = input(b, "b", dt, &db);
            b.push(Op::Matmul, &[x, y]).unwrap()
        })
    }));
    cases.push(case("solve", FLOATS, SIGNED, |rng, dt| {
        let n = rng.range(1, 3);
        let da = square_dims(rng, n);
        let mut db = da[..da.len() - 1].to_vec();
        db.push(rng.range(1, 3));
        graph(|b| {
            let x = input(b, "a", dt, &da);
            let y = input(b, "b", dt, &db);
            let a = shift_diagonal(b, x, n);
            b.push(Op::Solve { transpose_a: false }, &[a, y]).unwrap()
        })
    }));
    cases.push(case("cholesky", FLOATS, SIGNED, |rng, dt| {
        let n = rng.range(1, 3);
        let d = square_dims(rng, n);
        graph(|b| {
            let x = input(b, "x", dt, &d);
            let a = spd(b, x, n);
            b.push(Op::Cholesky, &[a]).unwrap()
        })
    }));
    cases.push(case("cholesky_ad", FLOATS, SIGNED, |rng, dt| {
        let n = rng.range(1, 3);
        let d = square_dims(rng, n);
        graph(|b| {
            let x = input(b, "x", dt, &d);
            let da = input(b, "da", dt, &d);
            let a = spd(b, x, n);
            let l = b.push(Op::Cholesky, &[a]).unwrap();
            b.push(Op::CholeskyAd, &[l, da]).unwrap()
        })
    }));
    for flags in 0..8u8 {
        let (lower, transpose_a, unit_diagonal) = (flags & 1 != 0, flags & 2 != 0, flags & 4 != 0);
        cases.push(case(
            format!("triangular_solve(lower={lower}, transpose_a={transpose_a}, unit_diagonal={unit_diagonal})"),
            FLOATS,
            SIGNED,
            move |rng, dt| {
                let n = rng.range(1, 3);
                let da = square_dims(rng, n);
                let mut db = da[..da.len() - 1].to_vec();
                db.push(rng.range(1, 3));
                graph(|b| {
                    let x = input(b, "a", dt, &da);
                    let y = input(b, "b", dt, &db);
                    let a = shift_diagonal(b, x, n);
                    let op = Op::TriangularSolve {
                        lower,
                        transpose_a,
                        unit_diagonal,
                    };
                    b.push(op, &[a, y]).unwrap()
                })
            },
        ));
    }
    for kind in LinalgKind::ALL {
        cases.push(case(kind.name(), FLOATS, SIGNED, move |rng, dt| {
            let mut d = rng.dims(0, 2);
            let (m, n) = (rng.range(1, 3), rng.range(1, 3));
            graph(|b| match kind {
                LinalgKind::DetSign | LinalgKind::LogAbsDet => {
                    d.extend([n, n]);
                    let x = input(b, "x", dt, &d);
                    b.push(Op::Linalg(kind), &[x]).unwrap()
                }
                LinalgKind::EighValues | LinalgKind::EighVectors => {
                    d.extend([n, n]);
                    let x = input(b, "x", dt, &d);
                    let xt = matrix_transpose(b, x);
                    let s = b.add(x, xt).unwrap();
                    b.push(Op::Linalg(kind), &[s]).unwrap()
                }
                _ => {
                    d.extend([m, n]);
                    let x = input(b, "x", dt, &d);
                    b.push(Op::Linalg(kind), &[x]).unwrap()
                }
            })
        }));
    }

    // Compositions: several outputs, some independent of every input, shared subexpressions.
    cases.push(case("composite", FLOATS, UNIT, |rng, dt| {
        let d = rng.dims(1, 3);
        let mut b = GraphBuilder::new();
        let x = input(&mut b, "x", dt, &d);
        let w = input(&mut b, "w", dt, &d[d.len() - 1..]);
        let s = b.weak_scalar(2.0);
        let ew = b.unary(UnaryOp::Exp, w).unwrap();
        let ew2 = b.mul(ew, s).unwrap();
        let y = b.mul(x, ew2).unwrap();
        let t = b.unary(UnaryOp::Tanh, y).unwrap();
        let r = b.sum(t, Some(&[-1]), true).unwrap();
        let z = b.sub(t, r).unwrap();
        let m = b.max(z, None, false).unwrap();
        let c = b.scalar(3.0, dt, false);
        b.finish(vec![z, m, ew2, c, x]).unwrap()
    }));

    cases
}

fn check_case(case: &Case, seeds: std::ops::Range<u64>, nested: bool) {
    for &dt in case.dtypes {
        for seed in seeds.clone() {
            let mut rng = Rng::new(seed);
            let g = (case.build)(&mut rng, dt);
            let in_axes = random_in_axes(&mut rng, &g);
            let size = rng.range(1, 3);
            let out_axes = random_out_axes(&mut rng, &g, &in_axes);
            let context = format!("{} ({}, seed {seed})", case.name, dt.ir_name());
            let bg = check_trial(
                &g,
                &in_axes,
                size,
                &out_axes,
                &mut rng,
                case.domain,
                &context,
            );
            if nested {
                let in2 = random_in_axes(&mut rng, &bg);
                let size2 = rng.range(1, 3);
                let out2 = random_out_axes(&mut rng, &bg, &in2);
                let context = format!("{context}, batched twice");
                check_trial(&bg, &in2, size2, &out2, &mut rng, case.domain, &context);
            }
        }
    }
}

#[test]
fn every_op_batches_like_a_loop() {
    let cases = cases();
    for case in &cases {
        check_case(case, 0..24, false);
    }
}

#[test]
fn every_op_batches_twice_like_a_loop() {
    for case in &cases() {
        check_case(case, 100..108, true);
    }
}

/// The graphs of the table contain every op variant except `custom` (tested with the errors).
#[test]
fn table_covers_every_op() {
    let mut seen: Vec<String> = Vec::new();
    for case in &cases() {
        for &dt in case.dtypes {
            for seed in 0..4 {
                let g = (case.build)(&mut Rng::new(seed), dt);
                for node in g.nodes() {
                    seen.push(match &node.op {
                        Op::Linalg(kind) => kind.name().to_string(),
                        op => op.name().to_string(),
                    });
                }
            }
        }
    }
    let mut expected: Vec<&str> = vec![
        "input",
        "constant",
        "cast",
        "powi",
        "where",
        "stop_gradient",
        "sum",
        "mean",
        "sum_axis",
        "mean_axis",
        "max_axis",
        "min_axis",
        "cumsum",
        "reshape",
        "transpose",
        "broadcast",
        "concat",
        "slice",
        "pad_slice",
        "gather",
        "scatter_add",
        "matmul",
        "solve",
        "cholesky",
        "cholesky_ad",
        "triangular_solve",
    ];
    expected.extend(UnaryOp::ALL.iter().map(|u| u.name()));
    expected.extend(BinaryOp::ALL.iter().map(|o| o.name()));
    expected.extend(Comparison::ALL.iter().map(|c| c.name()));
    expected.extend(LinalgKind::ALL.iter().map(|k| k.name()));
    for op in expected {
        assert!(seen.iter().any(|s| s == op), "no vmap case contains {op}");
    }
}
