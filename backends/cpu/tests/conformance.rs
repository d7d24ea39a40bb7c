//! Conformance of every op that the reference evaluator folds: small graphs of each op variant
//! (float32 and float64, with NaN, infinities and signed zeros in the inputs) run through the
//! CPU backend unoptimized, fused and unfused, must equal `quabla_ir::eval::evaluate` bit for
//! bit.

mod common;

use common::{check_graph, random, Rng};
use quabla_backend::HostTensor;
use quabla_ir::{
    BinaryOp, Comparison, DType, Graph, GraphBuilder, NodeId, Op, Shape, TensorType, UnaryOp,
};
use std::collections::BTreeSet;

struct Case {
    name: String,
    graph: Graph,
    inputs: Vec<HostTensor>,
}

/// Builds a case from typed inputs and a body.
fn case(
    name: impl Into<String>,
    rng: &mut Rng,
    inputs: &[(DType, &[usize])],
    body: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> quabla_ir::Result<NodeId>,
) -> Case {
    let mut b = GraphBuilder::new();
    let ids: Vec<NodeId> = inputs
        .iter()
        .enumerate()
        .map(|(i, (dt, dims))| {
            b.input(
                format!("x{i}"),
                TensorType::new(*dt, Shape::new(dims.to_vec()).unwrap()),
            )
        })
        .collect();
    let out = body(&mut b, &ids).unwrap();
    let graph = b.finish(vec![out]).unwrap();
    let inputs = inputs
        .iter()
        .map(|(dt, dims)| random(rng, *dt, dims))
        .collect();
    Case {
        name: name.into(),
        graph,
        inputs,
    }
}

/// Shape pairs for broadcasting binary ops.
const PAIRS: [(&[usize], &[usize]); 6] = [
    (&[4, 5], &[4, 5]),
    (&[4, 5], &[5]),
    (&[4, 1], &[1, 5]),
    (&[], &[4, 5]),
    (&[3, 1, 5], &[4, 1]),
    (&[], &[]),
];

fn cases(dt: DType, rng: &mut Rng) -> Vec<Case> {
    let mut out = Vec::new();
    let n = dt.ir_name();
    for u in UnaryOp::ALL.into_iter().filter(|u| u.takes_floats()) {
        out.push(case(
            format!("{} {n}", u.name()),
            rng,
            &[(dt, &[5, 7])],
            |b, x| b.unary(u, x[0]),
        ));
    }
    out.push(case(
        format!("neg scalar {n}"),
        rng,
        &[(dt, &[])],
        |b, x| b.unary(UnaryOp::Neg, x[0]),
    ));
    for e in [-3, -1, 0, 1, 2, 3, 7, 16] {
        out.push(case(
            format!("powi {e} {n}"),
            rng,
            &[(dt, &[6, 6])],
            |b, x| b.powi(x[0], e),
        ));
    }
    for op in BinaryOp::ALL.into_iter().filter(|op| op.takes_floats()) {
        for (sa, sb) in PAIRS {
            out.push(case(
                format!("{} {sa:?} {sb:?} {n}", op.name()),
                rng,
                &[(dt, sa), (dt, sb)],
                |b, x| b.binary(op, x[0], x[1]),
            ));
        }
    }
    for c in Comparison::ALL {
        for (sa, sb) in PAIRS {
            out.push(case(
                format!("{} {sa:?} {sb:?} {n}", c.name()),
                rng,
                &[(dt, sa), (dt, sb)],
                |b, x| b.compare(c, x[0], x[1]),
            ));
        }
    }
    for c in [Comparison::Equal, Comparison::NotEqual] {
        out.push(case(
            format!("{} bool", c.name()),
            rng,
            &[(DType::Bool, &[4, 5]), (DType::Bool, &[5])],
            |b, x| b.compare(c, x[0], x[1]),
        ));
    }
    let where_shapes: [(&[usize], &[usize], &[usize]); 4] = [
        (&[4, 5], &[4, 5], &[4, 5]),
        (&[4, 1], &[5], &[]),
        (&[], &[4, 5], &[4, 5]),
        (&[2, 1, 5], &[3, 1], &[1]),
    ];
    for (sp, sa, sb) in where_shapes {
        out.push(case(
            format!("where {sp:?} {sa:?} {sb:?} {n}"),
            rng,
            &[(DType::Bool, sp), (dt, sa), (dt, sb)],
            |b, x| b.select(x[0], x[1], x[2]),
        ));
    }
    out.push(case(
        "where bool",
        rng,
        &[
            (DType::Bool, &[3, 4]),
            (DType::Bool, &[4]),
            (DType::Bool, &[3, 4]),
        ],
        |b, x| b.select(x[0], x[1], x[2]),
    ));
    for to in [DType::F32, DType::F64, DType::Bool] {
        out.push(case(
            format!("cast {n} to {to}"),
            rng,
            &[(dt, &[4, 6])],
            |b, x| b.push(Op::Cast { to, weak: false }, &[x[0]]),
        ));
        out.push(case(
            format!("cast bool to {to}"),
            rng,
            &[(DType::Bool, &[4, 6])],
            |b, x| b.push(Op::Cast { to, weak: false }, &[x[0]]),
        ));
    }
    out.push(case(format!("weak cast {n}"), rng, &[(dt, &[])], |b, x| {
        b.push(
            Op::Cast {
                to: DType::F32,
                weak: true,
            },
            &[x[0]],
        )
    }));
    out.push(case(
        format!("stop_gradient {n}"),
        rng,
        &[(dt, &[3, 4])],
        |b, x| b.stop_gradient(x[0]),
    ));

    // Reductions.
    for dims in [&[7][..], &[3, 4], &[], &[2, 1, 3]] {
        out.push(case(
            format!("sum {dims:?} {n}"),
            rng,
            &[(dt, dims)],
            |b, x| b.sum(x[0], None, false),
        ));
        out.push(case(
            format!("mean {dims:?} {n}"),
            rng,
            &[(dt, dims)],
            |b, x| b.mean(x[0], None, false),
        ));
    }
    let axes_list: [&[isize]; 7] = [&[0], &[1], &[2], &[0, 1], &[0, 2], &[1, 2], &[0, 1, 2]];
    for dims in [&[3, 4, 5][..], &[3, 1, 5], &[1, 4, 1]] {
        for axes in axes_list {
            let all = axes.len() == 3;
            if !all {
                out.push(case(
                    format!("sum_axis {dims:?} {axes:?} {n}"),
                    rng,
                    &[(dt, dims)],
                    |b, x| b.sum(x[0], Some(axes), false),
                ));
                out.push(case(
                    format!("mean_axis {dims:?} {axes:?} {n}"),
                    rng,
                    &[(dt, dims)],
                    |b, x| b.mean(x[0], Some(axes), true),
                ));
            }
            out.push(case(
                format!("max_axis {dims:?} {axes:?} {n}"),
                rng,
                &[(dt, dims)],
                |b, x| b.max(x[0], Some(axes), false),
            ));
            out.push(case(
                format!("min_axis {dims:?} {axes:?} {n}"),
                rng,
                &[(dt, dims)],
                |b, x| b.min(x[0], Some(axes), false),
            ));
        }
    }
    // Reductions over all zeros of one sign (the initial value shows).
    for axes in [None, Some(&[0isize][..])] {
        let mut b = GraphBuilder::new();
        let x = b.input("x", TensorType::new(dt, common::shape(&[2, 3])));
        let z = b
            .constant(common::data(dt, &[-0.0; 6]), common::shape(&[6]), false)
            .unwrap();
        let z2 = b.reshape(z, &[2, 3]).unwrap();
        let s1 = b.sum(z, None, false).unwrap();
        let s2 = b.sum(z2, axes, false).unwrap();
        let m = b.max(z2, axes, false).unwrap();
        let y = b.add(z2, x).unwrap();
        let graph = b.finish(vec![s1, s2, m, y]).unwrap();
        let inputs = vec![random(rng, dt, &[2, 3])];
        out.push(Case {
            name: format!("negative zeros {axes:?} {n}"),
            graph,
            inputs,
        });
    }
    for axis in 0..3 {
        for reverse in [false, true] {
            out.push(case(
                format!("cumsum {axis} {reverse} {n}"),
                rng,
                &[(dt, &[3, 4, 5])],
                |b, x| b.cumsum(x[0], axis, reverse),
            ));
        }
    }
    out.push(case(
        format!("cumsum scalar-like {n}"),
        rng,
        &[(dt, &[1])],
        |b, x| b.cumsum(x[0], 0, false),
    ));

    // Layout.
    for ldt in [dt, DType::Bool] {
        let l = ldt.ir_name();
        out.push(case(
            format!("reshape {l}"),
            rng,
            &[(ldt, &[3, 4])],
            |b, x| b.reshape(x[0], &[2, -1, 3]),
        ));
        for perm in [&[1, 0, 2][..], &[2, 0, 1], &[2, 1, 0], &[0, 2, 1]] {
            out.push(case(
                format!("transpose {perm:?} {l}"),
                rng,
                &[(ldt, &[3, 4, 5])],
                |b, x| b.transpose(x[0], Some(perm)),
            ));
        }
        out.push(case(
            format!("transpose big {l}"),
            rng,
            &[(ldt, &[40, 70])],
            |b, x| b.transpose(x[0], None),
        ));
        for (from, to) in [
            (&[4][..], &[3, 4][..]),
            (&[3, 1], &[2, 3, 5]),
            (&[], &[2, 2]),
            (&[1, 4], &[3, 4]),
        ] {
            out.push(case(
                format!("broadcast {from:?} {to:?} {l}"),
                rng,
                &[(ldt, from)],
                |b, x| b.broadcast_to(x[0], common::shape(to)),
            ));
        }
        for axis in [0isize, 1, -1] {
            out.push(case(
                format!("concat {axis} {l}"),
                rng,
                &[(ldt, &[2, 3, 2]), (ldt, &[2, 3, 2]), (ldt, &[2, 3, 2])],
                |b, x| b.concat(x, axis),
            ));
        }
        out.push(case(
            format!("concat uneven {l}"),
            rng,
            &[(ldt, &[2, 3]), (ldt, &[2, 1]), (ldt, &[2, 4])],
            |b, x| b.concat(x, 1),
        ));
        out.push(case(
            format!("slice {l}"),
            rng,
            &[(ldt, &[5, 6, 3])],
            |b, x| b.slice(x[0], vec![1, 2, 0], vec![3, 2, 3]),
        ));
        out.push(case(
            format!("slice inner {l}"),
            rng,
            &[(ldt, &[4, 9])],
            |b, x| b.slice(x[0], vec![0, 3], vec![4, 5]),
        ));
        for axis in [0isize, 1, 2] {
            out.push(case(
                format!("gather {axis} {l}"),
                rng,
                &[(ldt, &[3, 4, 5])],
                |b, x| b.gather(x[0], &[2, 0, -1, 2], axis),
            ));
        }
    }
    out.push(case(
        format!("pad_slice {n}"),
        rng,
        &[(dt, &[2, 3])],
        |b, x| {
            b.push(
                Op::PadSlice {
                    starts: vec![1, 2],
                    shape: common::shape(&[4, 6]),
                },
                &[x[0]],
            )
        },
    ));
    out.push(case(
        format!("pad_slice scalar {n}"),
        rng,
        &[(dt, &[1, 1])],
        |b, x| {
            b.push(
                Op::PadSlice {
                    starts: vec![2, 0],
                    shape: common::shape(&[3, 2]),
                },
                &[x[0]],
            )
        },
    ));
    for axis in [0isize, 1] {
        let upd: &[usize] = if axis == 0 { &[4, 3] } else { &[5, 4] };
        out.push(case(
            format!("scatter_add {axis} {n}"),
            rng,
            &[(dt, &[5, 3]), (dt, upd)],
            |b, x| b.scatter_add(x[0], &[1, 1, -1, 0], x[1], axis),
        ));
    }
    out
}

#[test]
fn every_folded_op_matches_the_reference_bitwise() {
    let mut rng = Rng::new(7);
    let mut seen = BTreeSet::new();
    let mut count = 0;
    for dt in [DType::F64, DType::F32] {
        for c in cases(dt, &mut rng) {
            for node in c.graph.nodes() {
                seen.insert(node.op.name());
            }
            check_graph(&c.name, &c.graph, &c.inputs);
            count += 1;
        }
    }
    assert!(count > 400, "{count} cases");
    // Every op the evaluator folds is covered.
    let mut expected: Vec<&str> = vec![
        "cast",
        "powi",
        "where",
        "stop_gradient",
        "sum",
        "sum_axis",
        "mean",
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
        "constant",
        "input",
    ];
    expected.extend(
        UnaryOp::ALL
            .iter()
            .filter(|u| u.takes_floats())
            .map(|u| u.name()),
    );
    expected.extend(
        BinaryOp::ALL
            .iter()
            .filter(|b| b.takes_floats())
            .map(|b| b.name()),
    );
    expected.extend(Comparison::ALL.iter().map(|c| c.name()));
    for name in expected {
        assert!(seen.contains(name), "no conformance case for {name}");
    }
}

/// Kernels large enough to run on several threads (and, for elementwise groups, many tiles).
#[test]
fn large_kernels_match_the_reference_bitwise() {
    let mut rng = Rng::new(11);
    for dt in [DType::F64, DType::F32] {
        let dims: &[usize] = &[300, 401];
        let mut list = vec![
            case("sum_axis 0", &mut rng, &[(dt, dims)], |b, x| {
                b.sum(x[0], Some(&[0]), false)
            }),
            case("sum_axis 1", &mut rng, &[(dt, dims)], |b, x| {
                b.sum(x[0], Some(&[1]), false)
            }),
            case("mean", &mut rng, &[(dt, dims)], |b, x| {
                b.mean(x[0], None, false)
            }),
            case("max_axis", &mut rng, &[(dt, dims)], |b, x| {
                b.max(x[0], Some(&[0, 1]), false)
            }),
            case("min_axis 0", &mut rng, &[(dt, dims)], |b, x| {
                b.min(x[0], Some(&[0]), false)
            }),
            case("cumsum 0", &mut rng, &[(dt, dims)], |b, x| {
                b.cumsum(x[0], 0, true)
            }),
            case("cumsum 1", &mut rng, &[(dt, dims)], |b, x| {
                b.cumsum(x[0], 1, false)
            }),
            case("transpose", &mut rng, &[(dt, dims)], |b, x| {
                b.transpose(x[0], None)
            }),
        ];
        list.push(case(
            "elementwise",
            &mut rng,
            &[(dt, dims), (dt, &[401])],
            |b, x| {
                let s = b.unary(UnaryOp::Sin, x[0])?;
                let p = b.mul(s, x[1])?;
                let c = b.compare(Comparison::Greater, p, x[0])?;
                b.select(c, p, x[1])
            },
        ));
        list.push(case(
            "sum_axis 3d",
            &mut rng,
            &[(dt, &[60, 50, 40])],
            |b, x| b.sum(x[0], Some(&[0, 2]), false),
        ));
        for c in list {
            check_graph(&format!("{} {}", c.name, dt.ir_name()), &c.graph, &c.inputs);
        }
    }
}
