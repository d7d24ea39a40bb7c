//! Property test: random graphs mixing elementwise nodes of several shapes with reductions,
//! broadcasts, reshapes, transposes and cumsums (so that fusion groups form, split and read
//! broadcast operands in every arrangement) equal node-by-node evaluation bit for bit, fused
//! and unfused.

mod common;

use common::{check_graph, random, shape, Rng};
use proptest::prelude::*;
use quabla_ir::{BinaryOp, Comparison, DType, GraphBuilder, NodeId, TensorType, UnaryOp};

const UNARY: [UnaryOp; 6] = [
    UnaryOp::Sin,
    UnaryOp::Exp,
    UnaryOp::Log1p,
    UnaryOp::Neg,
    UnaryOp::Tanh,
    UnaryOp::Sqrt,
];

/// Interprets `steps` as graph-building instructions over a `[3, 4]` world.
fn build(dt: DType, steps: &[(u8, u8, u8)], seed: u64) {
    let mut b = GraphBuilder::new();
    let x = b.input("x", TensorType::new(dt, shape(&[3, 4])));
    let r = b.input("r", TensorType::new(dt, shape(&[4])));
    let c = b.input("c", TensorType::new(dt, shape(&[3, 1])));
    let s = b.input("s", TensorType::new(dt, shape(&[])));
    let mut pool: Vec<NodeId> = vec![x, r, c, s];
    for &(op, i, j) in steps {
        let a = pool[i as usize % pool.len()];
        let bb = pool[j as usize % pool.len()];
        let made = match op % 12 {
            0 | 1 => b.unary(UNARY[(i as usize + j as usize) % UNARY.len()], a),
            2 | 3 => {
                let ops = [BinaryOp::Add, BinaryOp::Mul, BinaryOp::Sub, BinaryOp::Div];
                b.binary(ops[(i as usize) % 4], a, bb)
            }
            4 => b
                .compare(Comparison::Greater, a, bb)
                .and_then(|p| b.select(p, a, bb)),
            5 => {
                let rank = b.ty(a).shape.rank() as isize;
                if rank == 0 {
                    b.sum(a, None, false)
                } else {
                    b.sum(a, Some(&[(j as isize) % rank]), true)
                }
            }
            6 => b.broadcast_to(a, shape(&[3, 4])),
            7 => {
                let rank = b.ty(a).shape.rank();
                if rank == 2 {
                    b.transpose(a, None)
                        .and_then(|t| b.unary(UnaryOp::Cos, t))
                        .and_then(|t| b.transpose(t, None))
                } else {
                    b.powi(a, 2)
                }
            }
            8 => {
                let rank = b.ty(a).shape.rank() as isize;
                if rank == 0 {
                    b.powi(a, 3)
                } else {
                    b.cumsum(a, (i as isize) % rank, j % 2 == 0)
                }
            }
            9 => b
                .astype(a, DType::F64)
                .and_then(|w| b.unary(UnaryOp::Exp, w))
                .and_then(|w| b.astype(w, dt)),
            10 => {
                let size = b.ty(a).shape.size() as isize;
                b.reshape(a, &[size])
                    .and_then(|f| b.unary(UnaryOp::Sin, f))
                    .and_then(|f| {
                        let dims: Vec<isize> =
                            b.ty(a).shape.dims().iter().map(|&d| d as isize).collect();
                        b.reshape(f, &dims)
                    })
            }
            _ => {
                let rank = b.ty(a).shape.rank() as isize;
                if rank == 0 {
                    b.unary(UnaryOp::Neg, a)
                } else {
                    b.max(a, Some(&[(i as isize) % rank]), true)
                }
            }
        };
        // Broadcasting mismatches are simply skipped.
        if let Ok(n) = made {
            pool.push(n);
        }
    }
    let mut outputs = vec![*pool.last().unwrap()];
    for (k, &n) in pool.iter().enumerate().skip(4) {
        if k % 3 == 0 {
            outputs.push(n);
        }
    }
    let graph = b.finish(outputs).unwrap();
    let mut rng = Rng::new(seed);
    let inputs = vec![
        random(&mut rng, dt, &[3, 4]),
        random(&mut rng, dt, &[4]),
        random(&mut rng, dt, &[3, 1]),
        random(&mut rng, dt, &[]),
    ];
    check_graph(&format!("random graph {steps:?} {dt}"), &graph, &inputs);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_match_the_reference(
        steps in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 1..24),
        seed in any::<u64>(),
        f32 in any::<bool>(),
    ) {
        build(if f32 { DType::F32 } else { DType::F64 }, &steps, seed);
    }
}
