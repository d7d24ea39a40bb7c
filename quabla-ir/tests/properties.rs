//! Property tests: broadcasting against an independent reference, the text format's
//! print → parse → print round trip, and value preservation of the pass pipeline on random
//! graphs (evaluated node by node with the reference evaluator of `common`, the semantics of
//! `quabla_ir::eval`).

mod common;

use common::run;
use proptest::prelude::*;
use quabla_ir::text::{parse_graph, print_graph, OutputStyle};
use quabla_ir::{
    broadcast_shapes, passes, BinaryOp, Comparison, DType, Graph, GraphBuilder, HostData, NodeId,
    Shape, TensorType, UnaryOp,
};

/// Broadcasting as NumPy's documentation states it, written independently of the crate:
/// left-pad with ones, then per axis equal or one of them 1.
fn reference_broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let pad = |s: &[usize]| {
        let mut v = vec![1; n - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (a, b) = (pad(a), pad(b));
    a.iter()
        .zip(&b)
        .map(|(&x, &y)| match (x, y) {
            _ if x == y => Some(x),
            (1, _) => Some(y),
            (_, 1) => Some(x),
            _ => None,
        })
        .collect()
}

fn small_dims() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..4, 0..4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn broadcasting_matches_reference(a in small_dims(), b in small_dims()) {
        let got = broadcast_shapes(&Shape::new(a.clone()).unwrap(), &Shape::new(b.clone()).unwrap());
        match reference_broadcast(&a, &b) {
            Some(dims) => prop_assert_eq!(got.unwrap(), Shape::new(dims).unwrap()),
            None => prop_assert!(got.is_err()),
        }
    }
}

/// One random construction step; failures of the checked builder are skipped, so every
/// generated graph is valid by construction.
#[derive(Debug, Clone)]
enum Step {
    Unary(usize, u8),
    Binary(usize, usize, u8),
    Compare(usize, usize, u8),
    Where(usize, usize, usize),
    Scalar(i8, bool),
    Powi(usize, i8),
    Sum(usize, u8),
    Reshape(usize),
    Transpose(usize),
    Cast(usize, bool),
    Concat(usize, usize),
    Gather(usize, u8),
    Cumsum(usize, bool),
    Repeat(usize),
}

fn step() -> impl Strategy<Value = Step> {
    let i = 0usize..64;
    prop_oneof![
        (i.clone(), any::<u8>()).prop_map(|(a, k)| Step::Unary(a, k)),
        (i.clone(), i.clone(), any::<u8>()).prop_map(|(a, b, k)| Step::Binary(a, b, k)),
        (i.clone(), i.clone(), any::<u8>()).prop_map(|(a, b, k)| Step::Compare(a, b, k)),
        (i.clone(), i.clone(), i.clone()).prop_map(|(p, a, b)| Step::Where(p, a, b)),
        (any::<i8>(), any::<bool>()).prop_map(|(v, w)| Step::Scalar(v, w)),
        (i.clone(), -3i8..5).prop_map(|(a, e)| Step::Powi(a, e)),
        (i.clone(), any::<u8>()).prop_map(|(a, k)| Step::Sum(a, k)),
        i.clone().prop_map(Step::Reshape),
        i.clone().prop_map(Step::Transpose),
        (i.clone(), any::<bool>()).prop_map(|(a, r)| Step::Cast(a, r)),
        (i.clone(), i.clone()).prop_map(|(a, b)| Step::Concat(a, b)),
        (i.clone(), any::<u8>()).prop_map(|(a, k)| Step::Gather(a, k)),
        (i.clone(), any::<bool>()).prop_map(|(a, r)| Step::Cumsum(a, r)),
        i.prop_map(Step::Repeat),
    ]
}

const UNARY: [UnaryOp; 8] = [
    UnaryOp::Sin,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Neg,
    UnaryOp::Tanh,
    UnaryOp::Floor,
    UnaryOp::Arctan,
];

fn build_random(steps: &[Step], n_outputs: usize) -> Graph {
    let mut b = GraphBuilder::new();
    let mut nodes = vec![
        b.input(
            "x",
            TensorType::new(DType::F64, Shape::new(vec![2, 3]).unwrap()),
        ),
        b.input(
            "y",
            TensorType::new(DType::F64, Shape::new(vec![3]).unwrap()),
        ),
        b.input(
            "z",
            TensorType::new(DType::F32, Shape::new(vec![2, 1]).unwrap()),
        ),
    ];
    let pick = |nodes: &[NodeId], i: usize| nodes[i % nodes.len()];
    for s in steps {
        let r = match *s {
            Step::Unary(a, k) => b.unary(UNARY[k as usize % UNARY.len()], pick(&nodes, a)),
            Step::Binary(a, c, k) => {
                let op = [
                    BinaryOp::Add,
                    BinaryOp::Sub,
                    BinaryOp::Mul,
                    BinaryOp::Div,
                    BinaryOp::Pow,
                    BinaryOp::Atan2,
                    BinaryOp::Fmod,
                ][k as usize % 7];
                b.binary(op, pick(&nodes, a), pick(&nodes, c))
            }
            Step::Compare(a, c, k) => b.compare(
                Comparison::ALL[k as usize % 6],
                pick(&nodes, a),
                pick(&nodes, c),
            ),
            Step::Where(p, a, c) => b.select(pick(&nodes, p), pick(&nodes, a), pick(&nodes, c)),
            Step::Scalar(v, weak) => Ok(b.scalar(v as f64 / 4.0, DType::F64, weak)),
            Step::Powi(a, e) => b.powi(pick(&nodes, a), e as i32),
            Step::Sum(a, k) => {
                let x = pick(&nodes, a);
                let rank = b.ty(x).shape.rank() as isize;
                if rank == 0 || k % 3 == 0 {
                    b.sum(x, None, k % 2 == 0)
                } else {
                    let axis = (k as isize) % rank;
                    if k % 3 == 1 {
                        b.max(x, Some(&[axis]), false)
                    } else {
                        b.mean(x, Some(&[axis]), true)
                    }
                }
            }
            Step::Reshape(a) => b.reshape(pick(&nodes, a), &[-1]),
            Step::Transpose(a) => b.transpose(pick(&nodes, a), None),
            Step::Cast(a, roundtrip) => {
                let x = pick(&nodes, a);
                let to = if roundtrip { DType::F32 } else { DType::F64 };
                b.astype(x, to)
            }
            Step::Concat(a, c) => b.concat(&[pick(&nodes, a), pick(&nodes, c)], 0),
            Step::Gather(a, k) => {
                let x = pick(&nodes, a);
                if b.ty(x).shape.rank() == 0 {
                    continue;
                }
                let extent = b.ty(x).shape.dims()[0] as isize;
                b.gather(x, &[(k as isize) % extent, 0], 0)
            }
            Step::Cumsum(a, rev) => {
                let x = pick(&nodes, a);
                if b.ty(x).shape.rank() == 0 {
                    continue;
                }
                b.cumsum(x, 0, rev)
            }
            Step::Repeat(a) => {
                // Re-apply the op of an existing node to the same operands: food for CSE.
                let x = pick(&nodes, a);
                let node = b.node(x).clone();
                if node.op.is_leaf() {
                    continue;
                }
                b.push(node.op, &node.operands)
            }
        };
        if let Ok(id) = r {
            nodes.push(id);
        }
    }
    let outputs: Vec<NodeId> = nodes.iter().rev().take(n_outputs).copied().collect();
    b.finish(outputs).unwrap()
}

fn same_bits(a: &HostData, b: &HostData) -> bool {
    a.dtype() == b.dtype()
        && a.len() == b.len()
        && (0..a.len()).all(|i| {
            let (x, y) = (a.get_f64(i), b.get_f64(i));
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
        })
}

fn inputs() -> Vec<HostData> {
    vec![
        HostData::F64(vec![0.5, -1.25, 2.0, 0.0, -0.0, 3.5].into()),
        HostData::F64(vec![1.5, f64::NAN, -2.0].into()),
        HostData::F32(vec![0.1f32, -7.0].into()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn text_round_trips(steps in prop::collection::vec(step(), 0..24), n_out in 1usize..3) {
        let g = build_random(&steps, n_out);
        let text = print_graph(&g, OutputStyle::Refs);
        let parsed = parse_graph(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(print_graph(&parsed, OutputStyle::Refs), text);
        prop_assert_eq!(parsed, g);
    }

    #[test]
    fn passes_preserve_values(steps in prop::collection::vec(step(), 0..24), n_out in 1usize..3) {
        let g = build_random(&steps, n_out);
        let want = run(&g, &inputs());
        for name in ["dce", "canonicalize", "fold", "dedup", "cse", "pipeline"] {
            let pass = passes::by_name(name).unwrap();
            let optimized = pass(&g);
            prop_assert!(optimized.verify().is_ok());
            let got = run(&optimized, &inputs());
            prop_assert_eq!(got.len(), want.len());
            for (a, b) in got.iter().zip(&want) {
                prop_assert!(same_bits(a, b), "pass {} changed a value\n{}\n{}", name, g, optimized);
            }
        }
        // The pipeline never grows the graph.
        prop_assert!(passes::run_all(&g).len() <= g.len());
    }
}
