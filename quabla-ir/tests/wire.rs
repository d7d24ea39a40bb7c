//! The plan wire format: round trips of every op and of random graphs (region groups
//! included), a golden encoding that pins the documented layout, a fuzz property over corrupted
//! encodings, and the decoder's error messages. Region-specific cases live in `regions.rs`.

mod common;

use common::{shape, ty};
use proptest::prelude::*;
use quabla_ir::text::{print_graph, OutputStyle};
use quabla_ir::wire::{
    decode_graph, decode_plan, encode_graph, encode_plan, MAX_ELEMENTS, MAX_RANK, WIRE_MAGIC,
    WIRE_VERSION,
};
use quabla_ir::{
    BinaryOp, Comparison, CustomCall, CustomRule, DType, Graph, GraphBuilder, HostData, LinalgKind,
    NodeId, Op, Plan, ReduceKind, Shape, TensorType, UnaryOp, WireError,
};
use std::sync::Arc;

/// Encodes, decodes and checks that the graph, its text and its bytes all come back.
fn assert_round_trip(g: &Graph) -> Vec<u8> {
    let bytes = encode_graph(g).unwrap();
    let back = decode_graph(&bytes).unwrap_or_else(|e| panic!("{e}\n{g}"));
    // Regions decode as new regions: equal by content, shared as in the original.
    assert!(common::same_structure(&back, g));
    assert_eq!(
        print_graph(&back, OutputStyle::Refs),
        print_graph(g, OutputStyle::Refs)
    );
    assert_eq!(
        encode_graph(&back).unwrap(),
        bytes,
        "the encoding is canonical"
    );
    bytes
}

fn decode_err(bytes: &[u8]) -> String {
    decode_plan(bytes).unwrap_err().to_string()
}

// ---------------------------------------------------------------------------------------------
// Round trips of hand-built graphs

/// One graph holding every op variant except `custom`, with every attribute value that has
/// its own encoding (all functions, predicates, kinds, flag combinations, dtypes).
fn every_op_graph() -> Graph {
    let mut b = GraphBuilder::new();
    let a = b.input("a", ty(DType::F64, &[2, 3]));
    let m = b.input("params.m", ty(DType::F64, &[3, 3]));
    let v = b.input("v", ty(DType::F32, &[3]));
    let p = b.input("p", ty(DType::Bool, &[2, 3]));
    let w = b.input("w", TensorType::weak(DType::F64, Shape::scalar()));
    let batch = b.input("batch[0]", ty(DType::F32, &[2, 3, 3]));
    let n = b.input("n", ty(DType::I64, &[2, 3]));
    let mut outs = vec![a, w];

    // Constants: payload NaNs, signed zeros and infinities of both float dtypes, bools, weak.
    let f32s = [
        f32::from_bits(0x7fc0_1234),
        f32::from_bits(0xffa0_0001),
        -0.0,
        0.0,
        f32::INFINITY,
        f32::MIN_POSITIVE / 4.0,
    ];
    let c32 = b
        .constant(HostData::F32(f32s.into()), shape(&[2, 3]), false)
        .unwrap();
    let f64s = [
        f64::from_bits(0x7ff8_dead_beef_0001),
        f64::from_bits(0xfff0_0000_0000_0001),
        -0.0,
        f64::NEG_INFINITY,
        5e-324,
        0.1,
    ];
    let c64 = b
        .constant(HostData::F64(f64s.into()), shape(&[2, 3]), false)
        .unwrap();
    let cb = b
        .constant(
            HostData::Bool([true, false, true, true, false, false].into()),
            shape(&[2, 3]),
            false,
        )
        .unwrap();
    let weak = b.weak_scalar(-0.0);
    let weak32 = b.scalar(2.5, DType::F32, true);
    outs.extend([c32, c64, cb, weak, weak32]);
    // Integers: both extremes of both widths, and a weak int64 scalar.
    let ci32 = b
        .constant(
            HostData::I32([i32::MIN, i32::MAX, -1, 0, 1, 7].into()),
            shape(&[2, 3]),
            false,
        )
        .unwrap();
    let ci64 = b
        .constant(
            HostData::I64([i64::MIN, i64::MAX, -1, 0, 1 << 53, -7].into()),
            shape(&[2, 3]),
            false,
        )
        .unwrap();
    let weak_int = b
        .constant(HostData::I64([3].into()), Shape::scalar(), true)
        .unwrap();
    outs.extend([ci32, ci64, weak_int, n]);
    for (x, to) in [
        (ci32, DType::I64),
        (ci64, DType::F32),
        (a, DType::I32),
        (n, DType::Bool),
    ] {
        outs.push(b.push(Op::Cast { to, weak: false }, &[x]).unwrap());
    }

    // Casts, both weak flags, every target dtype.
    for (x, to, w) in [
        (a, DType::F32, false),
        (v, DType::F64, true),
        (p, DType::F64, false),
        (a, DType::Bool, false),
        (cb, DType::F32, true),
    ] {
        outs.push(b.push(Op::Cast { to, weak: w }, &[x]).unwrap());
    }
    for u in UnaryOp::ALL {
        let x = if u == UnaryOp::BitNot { n } else { a };
        outs.push(b.push(Op::Unary(u), &[x]).unwrap());
    }
    outs.push(b.push(Op::Unary(UnaryOp::Neg), &[ci32]).unwrap());
    outs.push(b.push(Op::Unary(UnaryOp::BitNot), &[p]).unwrap());
    outs.push(b.push(Op::Powi(3), &[n]).unwrap());
    for e in [0, -3, 7, i32::MIN, i32::MAX] {
        outs.push(b.push(Op::Powi(e), &[a]).unwrap());
    }
    for op in BinaryOp::ALL {
        if op.is_integer_only() {
            outs.push(b.push(Op::Binary(op), &[n, ci64]).unwrap());
        } else {
            outs.push(b.push(Op::Binary(op), &[a, c64]).unwrap());
        }
    }
    outs.push(b.push(Op::Binary(BinaryOp::BitXor), &[p, cb]).unwrap());
    outs.push(b.push(Op::Compare(Comparison::Less), &[n, ci64]).unwrap());
    outs.push(b.push(Op::Where, &[p, n, ci64]).unwrap());
    outs.push(b.sum(n, None, false).unwrap());
    for c in Comparison::ALL {
        outs.push(b.push(Op::Compare(c), &[a, c64]).unwrap());
    }
    outs.push(b.push(Op::Compare(Comparison::Equal), &[p, cb]).unwrap());
    outs.push(b.push(Op::Where, &[p, a, c64]).unwrap());
    outs.push(b.push(Op::StopGradient, &[v]).unwrap());
    for per_example in [false, true] {
        let format = "loss, {} : (%1) [ok] = \\u{41} \"q\" ünï\n".to_string();
        let op = Op::DebugPrint {
            format,
            per_example,
        };
        outs.push(b.push(op, &[v]).unwrap());
    }
    outs.push(b.sum(a, None, false).unwrap());
    outs.push(b.mean(v, None, false).unwrap());
    outs.push(
        b.push(
            Op::Reduce {
                kind: ReduceKind::SumAxis,
                axes: vec![1],
            },
            &[a],
        )
        .unwrap(),
    );
    outs.push(
        b.push(
            Op::Reduce {
                kind: ReduceKind::MeanAxis,
                axes: vec![0],
            },
            &[a],
        )
        .unwrap(),
    );
    outs.push(
        b.push(
            Op::Reduce {
                kind: ReduceKind::MaxAxis,
                axes: vec![0, 1],
            },
            &[a],
        )
        .unwrap(),
    );
    outs.push(
        b.push(
            Op::Reduce {
                kind: ReduceKind::MinAxis,
                axes: vec![0, 2],
            },
            &[batch],
        )
        .unwrap(),
    );
    for reverse in [false, true] {
        outs.push(b.push(Op::Cumsum { axis: 1, reverse }, &[a]).unwrap());
    }
    outs.push(
        b.push(
            Op::Reshape {
                shape: shape(&[3, 2]),
            },
            &[a],
        )
        .unwrap(),
    );
    outs.push(b.push(Op::Reshape { shape: shape(&[]) }, &[w]).unwrap());
    let at = b.push(Op::Transpose { perm: vec![1, 0] }, &[a]).unwrap();
    outs.push(at);
    outs.push(
        b.push(
            Op::Transpose {
                perm: vec![2, 0, 1],
            },
            &[batch],
        )
        .unwrap(),
    );
    outs.push(
        b.push(
            Op::Broadcast {
                shape: shape(&[4, 2, 3]),
            },
            &[a],
        )
        .unwrap(),
    );
    outs.push(b.push(Op::Concat { axis: 0 }, &[a, c64, a]).unwrap());
    outs.push(b.push(Op::Concat { axis: 1 }, &[a]).unwrap());
    outs.push(
        b.push(
            Op::Slice {
                starts: vec![0, 1],
                sizes: vec![2, 2],
            },
            &[a],
        )
        .unwrap(),
    );
    outs.push(
        b.push(
            Op::PadSlice {
                starts: vec![1, 0],
                shape: shape(&[4, 3]),
            },
            &[a],
        )
        .unwrap(),
    );
    outs.push(
        b.push(
            Op::Gather {
                axis: 1,
                indices: vec![2, 0, 2, 1],
            },
            &[a],
        )
        .unwrap(),
    );
    let upd = b
        .push(
            Op::Gather {
                axis: 1,
                indices: vec![0, 0],
            },
            &[a],
        )
        .unwrap();
    outs.push(
        b.push(
            Op::ScatterAdd {
                axis: 1,
                indices: vec![2, 2],
            },
            &[a, upd],
        )
        .unwrap(),
    );
    // Indexed ops: integer indices, one with a batch axis, every scatter mode.
    let picked = b
        .push(Op::IndexGather { axis: 1, batch: 0 }, &[a, n])
        .unwrap();
    outs.push(picked);
    outs.push(
        b.push(Op::IndexGather { axis: 1, batch: 1 }, &[a, n])
            .unwrap(),
    );
    for mode in quabla_ir::ScatterMode::ALL {
        outs.push(
            b.push(
                Op::IndexScatter {
                    axis: 1,
                    batch: 0,
                    mode,
                },
                &[a, n, picked],
            )
            .unwrap(),
        );
    }
    outs.push(b.push(Op::Matmul, &[a, m]).unwrap());
    outs.push(b.push(Op::Matmul, &[batch, batch]).unwrap());
    for transpose_a in [false, true] {
        outs.push(b.push(Op::Solve { transpose_a }, &[m, at]).unwrap());
    }
    let l = b.push(Op::Cholesky, &[m]).unwrap();
    outs.push(l);
    outs.push(b.push(Op::CholeskyAd, &[l, m]).unwrap());
    for bits in 0..8u8 {
        let op = Op::TriangularSolve {
            lower: bits & 1 != 0,
            transpose_a: bits & 2 != 0,
            unit_diagonal: bits & 4 != 0,
        };
        outs.push(b.push(op, &[m, at]).unwrap());
    }
    for kind in LinalgKind::ALL {
        outs.push(b.push(Op::Linalg(kind), &[m]).unwrap());
        outs.push(b.push(Op::Linalg(kind), &[batch]).unwrap());
    }
    for kind in [
        LinalgKind::QrR,
        LinalgKind::QrQComplete,
        LinalgKind::SvdUFull,
    ] {
        outs.push(b.push(Op::Linalg(kind), &[a]).unwrap());
    }
    // Region groups of each kind (the low bits of the key): cond, fori-style scan, scan with
    // `xs` and `ys` (nested regions in its body), while; with all of their sibling nodes.
    for k in [0xe000, 0xe001, 0x5_f002, 0x8003] {
        outs.extend(common::random_region(&mut b, a, v, k, 0).unwrap());
    }
    // Outputs may repeat and may be inputs.
    outs.push(a);
    b.finish(outs).unwrap()
}

#[test]
fn every_op_round_trips() {
    let g = every_op_graph();
    // Make sure the graph really holds every variant but `custom`.
    let names: std::collections::BTreeSet<&str> = g.nodes().iter().map(|n| n.op.name()).collect();
    for name in [
        "input",
        "constant",
        "cast",
        "powi",
        "where",
        "stop_gradient",
        "debug_print",
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
        "index_gather",
        "index_scatter",
        "matmul",
        "solve",
        "cholesky",
        "cholesky_ad",
        "triangular_solve",
        "linalg",
        "cond",
        "fori",
        "scan",
        "while",
    ] {
        assert!(names.contains(name), "missing {name}");
    }
    let bytes = assert_round_trip(&g);
    assert_eq!(&bytes[..8], b"QBLAPLAN");
    assert_eq!(&bytes[8..12], &5u32.to_le_bytes());
}

#[test]
fn every_op_round_trips_through_text() {
    let g = every_op_graph();
    let text = print_graph(&g, OutputStyle::Refs);
    // The plain solve keeps its plain spelling; the transposed one names its flag.
    assert!(text.contains("transpose_a=true"), "{text}");
    let back = quabla_ir::text::parse_graph(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(print_graph(&back, OutputStyle::Refs), text);
    // A debug_print format with the line syntax's own characters comes back exactly.
    let formats = |g: &Graph| -> Vec<Op> {
        g.nodes()
            .iter()
            .filter(|n| matches!(n.op, Op::DebugPrint { .. }))
            .map(|n| n.op.clone())
            .collect()
    };
    assert_eq!(formats(&back), formats(&g));
    assert_eq!(formats(&g).len(), 2);
}

#[test]
fn constants_are_bit_exact() {
    let g = every_op_graph();
    let back = decode_graph(&encode_graph(&g).unwrap()).unwrap();
    let bits = |g: &Graph, dtype: DType| -> Vec<u64> {
        g.nodes()
            .iter()
            .filter_map(|n| match &n.op {
                Op::Constant { data, .. } if data.dtype() == dtype => Some(match data {
                    HostData::F32(v) => v.iter().map(|x| x.to_bits() as u64).collect::<Vec<_>>(),
                    HostData::F64(v) => v.iter().map(|x| x.to_bits()).collect(),
                    HostData::Bool(v) => v.iter().map(|&x| x as u64).collect(),
                    HostData::I32(v) => v.iter().map(|&x| x as u32 as u64).collect(),
                    HostData::I64(v) => v.iter().map(|&x| x as u64).collect(),
                }),
                _ => None,
            })
            .flatten()
            .collect()
    };
    for dtype in [DType::F32, DType::F64, DType::Bool, DType::I32, DType::I64] {
        assert_eq!(bits(&back, dtype), bits(&g, dtype));
    }
    assert!(
        bits(&back, DType::I32).contains(&0x8000_0000),
        "int32 minimum"
    );
    assert!(
        bits(&back, DType::I64).contains(&(i64::MIN as u64)),
        "int64 minimum"
    );
    let f32_bits = bits(&back, DType::F32);
    assert!(f32_bits.contains(&0x7fc0_1234) && f32_bits.contains(&0xffa0_0001));
    assert!(f32_bits.contains(&0x8000_0000), "-0.0f32 keeps its sign");
    let f64_bits = bits(&back, DType::F64);
    assert!(f64_bits.contains(&0x7ff8_dead_beef_0001));
    assert!(
        f64_bits.contains(&0x8000_0000_0000_0000),
        "-0.0 keeps its sign"
    );
}

#[test]
fn plans_round_trip() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", ty(DType::F32, &[2, 3]));
    let m = b.input("m", ty(DType::F32, &[3, 3]));
    let half = b.weak_scalar(0.5);
    let y = b.mul(half, x).unwrap();
    let y = b.unary(UnaryOp::Sin, y).unwrap();
    let z = b.matmul(y, m).unwrap();
    let s = b.sum(z, Some(&[1]), true).unwrap();
    let plan = Plan::compile(&b.finish(vec![s, z]).unwrap());
    let bytes = encode_plan(&plan).unwrap();
    let back = decode_plan(&bytes).unwrap();
    assert_eq!(back, plan);
    assert_eq!(back.as_text(), plan.as_text());
    assert_eq!(back.input_names(), vec!["x", "m"]);

    let empty = Plan::from_graph_unoptimized(Graph::default());
    assert_eq!(decode_plan(&encode_plan(&empty).unwrap()).unwrap(), empty);
}

#[test]
fn golden_bytes_follow_the_documented_layout() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", TensorType::weak(DType::F32, shape(&[2])));
    let c = b
        .constant(HostData::F32([-0.0f32, 1.0].into()), shape(&[2]), true)
        .unwrap();
    let y = b.push(Op::Binary(BinaryOp::Mul), &[x, c]).unwrap();
    let g = b.finish(vec![y, y]).unwrap();

    let mut want: Vec<u8> = Vec::new();
    let u32le = |w: &mut Vec<u8>, v: u32| w.extend_from_slice(&v.to_le_bytes());
    let u64le = |w: &mut Vec<u8>, v: u64| w.extend_from_slice(&v.to_le_bytes());
    want.extend_from_slice(b"QBLAPLAN");
    u32le(&mut want, WIRE_VERSION); // version
    u32le(&mut want, 3); // node count
                         // %0 = input[name=x, weak] : tensor<2xf32>
    want.push(0); // tag
    u32le(&mut want, 1);
    want.push(b'x'); // name
    want.extend([0, 1]); // attribute type: f32, weak
    u32le(&mut want, 1);
    u64le(&mut want, 2); // shape [2]
    u32le(&mut want, 0); // no operands
    want.extend([0, 1]); // declared type
    u32le(&mut want, 1);
    u64le(&mut want, 2);
    // %1 = constant(dense<[-0.0, 1.0]>, weak) : tensor<2xf32>
    want.push(1);
    want.extend([0, 1]); // f32, weak
    u32le(&mut want, 1);
    u64le(&mut want, 2); // shape [2]
    u32le(&mut want, 0x8000_0000); // -0.0
    u32le(&mut want, 0x3f80_0000); // 1.0
    u32le(&mut want, 0); // no operands
    want.extend([0, 1]);
    u32le(&mut want, 1);
    u64le(&mut want, 2);
    // %2 = mul(%0, %1) : tensor<2xf32> (weak)
    want.extend([5, 2]); // binary, mul
    u32le(&mut want, 2);
    u32le(&mut want, 0);
    u32le(&mut want, 1);
    want.extend([0, 1]);
    u32le(&mut want, 1);
    u64le(&mut want, 2);
    // outputs: [%2, %2]
    u32le(&mut want, 2);
    u32le(&mut want, 2);
    u32le(&mut want, 2);

    assert_eq!(encode_graph(&g).unwrap(), want);
    assert_eq!(decode_graph(&want).unwrap(), g);
}

#[test]
fn custom_nodes_cannot_be_encoded() {
    let mut pb = GraphBuilder::new();
    let px = pb.input("x", ty(DType::F64, &[2]));
    let py = pb.unary(UnaryOp::Exp, px).unwrap();
    let rule = Arc::new(CustomRule {
        name: "f".into(),
        primal: Arc::new(pb.finish(vec![py]).unwrap()),
        fwd: None,
        bwd: None,
        jvp: None,
        rematerialize: false,
    });
    let mut b = GraphBuilder::new();
    let x = b.input("x", ty(DType::F64, &[2]));
    let y = b.unary(UnaryOp::Sin, x).unwrap();
    let c = b
        .push(Op::Custom(CustomCall { rule, output: 0 }), &[y])
        .unwrap();
    let g = b.finish(vec![c]).unwrap();
    let err = encode_graph(&g).unwrap_err();
    assert_eq!(err, WireError::CustomNode { node: NodeId(2) });
    assert_eq!(
        err.to_string(),
        "cannot encode node %2: custom-rule nodes are never part of a plan (canonicalization replaces them by their primal graphs)"
    );
    // Once compiled, the custom node is gone and the plan encodes.
    let plan = Plan::compile(&g);
    assert_eq!(decode_plan(&encode_plan(&plan).unwrap()).unwrap(), plan);
}

#[test]
fn graphs_beyond_the_limits_are_not_encoded() {
    // A shape with more elements than the wire format allows cannot be built at all: the
    // shape's own limit is the wire's, so every graph that exists passes the encoder's
    // element-count check.
    assert_eq!(Shape::MAX_ELEMENTS as u64, MAX_ELEMENTS);
    let err = Shape::new(vec![1 << 40, 1 << 40]).unwrap_err().to_string();
    assert!(
        err.starts_with("shape [1099511627776, 1099511627776] has 1208925819614629174706176"),
        "{err}"
    );
    let mut b = GraphBuilder::new();
    let x = b.input("x", ty(DType::F32, &[MAX_ELEMENTS as usize]));
    assert_round_trip(&b.finish(vec![x]).unwrap());

    let mut b = GraphBuilder::new();
    let x = b.input("x", ty(DType::F32, &vec![1; MAX_RANK + 1]));
    let g = b.finish(vec![x]).unwrap();
    let err = encode_graph(&g).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "cannot encode the graph: shape of rank {} exceeds the limit of {MAX_RANK}",
            MAX_RANK + 1
        )
    );
    let mut b = GraphBuilder::new();
    let x = b.input("x", ty(DType::F32, &vec![1; MAX_RANK]));
    assert_round_trip(&b.finish(vec![x]).unwrap());
}

// ---------------------------------------------------------------------------------------------
// Random graphs

/// One random construction step; steps the type rules reject are skipped, so every generated
/// graph is valid.
#[derive(Debug, Clone)]
enum Step {
    Unary(usize, u8),
    Binary(usize, usize, u8),
    Compare(usize, usize, u8),
    Where(usize, usize, usize),
    ConstF64(Vec<u64>, bool),
    ConstF32(Vec<u32>, bool),
    ConstBool(Vec<bool>),
    Powi(usize, i32),
    Reduce(usize, u8),
    Reshape(usize),
    Transpose(usize, u8),
    Cast(usize, u8, bool),
    Concat(usize, usize, u8),
    Gather(usize, u8, u8),
    ScatterAdd(usize, u8),
    Cumsum(usize, u8, bool),
    Slice(usize, u8),
    PadSlice(usize, u8),
    Broadcast(usize, u8),
    Matmul(usize, usize),
    Solve(usize, usize, bool),
    Cholesky(usize, usize),
    TriangularSolve(usize, usize, u8),
    Linalg(usize, u8),
    StopGradient(usize),
    Repeat(usize),
    /// A region group over two nodes; the bits choose its kind and shape.
    Region(usize, usize, u32),
}

fn step() -> impl Strategy<Value = Step> {
    let i = 0usize..64;
    let k = any::<u8>();
    prop_oneof![
        1 => (i.clone(), k).prop_map(|(a, k)| Step::Unary(a, k)),
        1 => (i.clone(), i.clone(), k).prop_map(|(a, b, k)| Step::Binary(a, b, k)),
        1 => (i.clone(), i.clone(), k).prop_map(|(a, b, k)| Step::Compare(a, b, k)),
        1 => (i.clone(), i.clone(), i.clone()).prop_map(|(p, a, b)| Step::Where(p, a, b)),
        1 => (prop::collection::vec(any::<u64>(), 1..7), any::<bool>())
            .prop_map(|(v, w)| Step::ConstF64(v, w)),
        1 => (prop::collection::vec(any::<u32>(), 1..7), any::<bool>())
            .prop_map(|(v, w)| Step::ConstF32(v, w)),
        1 => prop::collection::vec(any::<bool>(), 1..7).prop_map(Step::ConstBool),
        1 => (i.clone(), any::<i32>()).prop_map(|(a, e)| Step::Powi(a, e)),
        1 => (i.clone(), k).prop_map(|(a, k)| Step::Reduce(a, k)),
        1 => i.clone().prop_map(Step::Reshape),
        1 => (i.clone(), k).prop_map(|(a, k)| Step::Transpose(a, k)),
        1 => (i.clone(), k, any::<bool>()).prop_map(|(a, k, w)| Step::Cast(a, k, w)),
        1 => (i.clone(), i.clone(), k).prop_map(|(a, b, k)| Step::Concat(a, b, k)),
        1 => (i.clone(), k, k).prop_map(|(a, k, j)| Step::Gather(a, k, j)),
        1 => (i.clone(), k).prop_map(|(a, k)| Step::ScatterAdd(a, k)),
        1 => (i.clone(), k, any::<bool>()).prop_map(|(a, k, r)| Step::Cumsum(a, k, r)),
        1 => (i.clone(), k).prop_map(|(a, k)| Step::Slice(a, k)),
        1 => (i.clone(), k).prop_map(|(a, k)| Step::PadSlice(a, k)),
        1 => (i.clone(), k).prop_map(|(a, k)| Step::Broadcast(a, k)),
        1 => (i.clone(), i.clone()).prop_map(|(a, b)| Step::Matmul(a, b)),
        1 => (i.clone(), i.clone(), any::<bool>()).prop_map(|(a, b, t)| Step::Solve(a, b, t)),
        1 => (i.clone(), i.clone()).prop_map(|(a, b)| Step::Cholesky(a, b)),
        1 => (i.clone(), i.clone(), k).prop_map(|(a, b, k)| Step::TriangularSolve(a, b, k)),
        1 => (i.clone(), k).prop_map(|(a, k)| Step::Linalg(a, k)),
        1 => i.clone().prop_map(Step::StopGradient),
        1 => i.clone().prop_map(Step::Repeat),
        4 => (i.clone(), i, any::<u32>()).prop_map(|(a, b, k)| Step::Region(a, b, k)),
    ]
}

/// A random valid graph: fixed inputs of several dtypes and shapes, then the steps that
/// type-check, then outputs picked among all nodes (repeats and inputs allowed).
fn build_random(steps: &[Step], outputs: &[usize]) -> Graph {
    let mut b = GraphBuilder::new();
    let mut nodes = vec![
        b.input("x", ty(DType::F64, &[2, 3])),
        b.input("y", ty(DType::F64, &[3])),
        b.input("z", ty(DType::F32, &[2, 1])),
        b.input("m", ty(DType::F64, &[3, 3])),
        b.input("p", ty(DType::Bool, &[2, 3])),
        b.input("w", TensorType::weak(DType::F64, Shape::scalar())),
        b.input("s", ty(DType::F32, &[2, 2, 2])),
    ];
    let pick = |nodes: &[NodeId], i: usize| nodes[i % nodes.len()];
    for s in steps {
        let dims = |b: &GraphBuilder, x: NodeId| b.ty(x).shape.dims().to_vec();
        let r = match s.clone() {
            Step::Unary(a, k) => b.unary(UnaryOp::ALL[k as usize % 26], pick(&nodes, a)),
            Step::Binary(a, c, k) => b.binary(
                BinaryOp::ALL[k as usize % 7],
                pick(&nodes, a),
                pick(&nodes, c),
            ),
            Step::Compare(a, c, k) => b.compare(
                Comparison::ALL[k as usize % 6],
                pick(&nodes, a),
                pick(&nodes, c),
            ),
            Step::Where(p, a, c) => b.select(pick(&nodes, p), pick(&nodes, a), pick(&nodes, c)),
            Step::ConstF64(v, weak) => {
                let n = v.len();
                let data = HostData::F64(v.into_iter().map(f64::from_bits).collect());
                let dims: &[usize] = if n == 1 { &[] } else { &[n] };
                b.constant(data, shape(dims), weak)
            }
            Step::ConstF32(v, weak) => {
                let n = v.len();
                let data = HostData::F32(v.into_iter().map(f32::from_bits).collect());
                b.constant(data, shape(&[n, 1]), weak)
            }
            Step::ConstBool(v) => {
                let n = v.len();
                b.constant(HostData::Bool(v.into()), shape(&[n]), false)
            }
            Step::Powi(a, e) => b.powi(pick(&nodes, a), e),
            Step::Reduce(a, k) => {
                let x = pick(&nodes, a);
                let rank = dims(&b, x).len();
                let axes: Vec<usize> = (0..rank).filter(|i| k >> i & 1 == 1).collect();
                let op = match k % 6 {
                    0 => Op::Reduce {
                        kind: ReduceKind::Sum,
                        axes: (0..rank).collect(),
                    },
                    1 => Op::Reduce {
                        kind: ReduceKind::Mean,
                        axes: (0..rank).collect(),
                    },
                    2 => Op::Reduce {
                        kind: ReduceKind::SumAxis,
                        axes,
                    },
                    3 => Op::Reduce {
                        kind: ReduceKind::MeanAxis,
                        axes,
                    },
                    4 => Op::Reduce {
                        kind: ReduceKind::MaxAxis,
                        axes,
                    },
                    _ => Op::Reduce {
                        kind: ReduceKind::MinAxis,
                        axes,
                    },
                };
                b.push(op, &[x])
            }
            Step::Reshape(a) => b.reshape(pick(&nodes, a), &[-1]),
            Step::Transpose(a, k) => {
                let x = pick(&nodes, a);
                let mut perm: Vec<usize> = (0..dims(&b, x).len()).collect();
                if !perm.is_empty() {
                    let n = perm.len();
                    perm.rotate_left(k as usize % n);
                }
                b.push(Op::Transpose { perm }, &[x])
            }
            Step::Cast(a, k, weak) => {
                let to = [DType::F32, DType::F64, DType::Bool][k as usize % 3];
                b.push(Op::Cast { to, weak }, &[pick(&nodes, a)])
            }
            Step::Concat(a, c, k) => {
                let (x, y) = (pick(&nodes, a), pick(&nodes, c));
                let operands = if k % 2 == 0 {
                    vec![x, y]
                } else {
                    vec![x, y, x]
                };
                b.push(
                    Op::Concat {
                        axis: k as usize % 3,
                    },
                    &operands,
                )
            }
            Step::Gather(a, k, j) => {
                let x = pick(&nodes, a);
                let d = dims(&b, x);
                if d.is_empty() {
                    continue;
                }
                let axis = k as usize % d.len();
                let indices = vec![j as usize % d[axis], 0, k as usize % d[axis]];
                b.push(Op::Gather { axis, indices }, &[x])
            }
            Step::ScatterAdd(a, k) => {
                let x = pick(&nodes, a);
                let d = dims(&b, x);
                if d.is_empty() {
                    continue;
                }
                let axis = k as usize % d.len();
                let indices = vec![k as usize % d[axis], 0];
                let upd = match b.push(
                    Op::Gather {
                        axis,
                        indices: vec![0, 0],
                    },
                    &[x],
                ) {
                    Ok(u) => u,
                    Err(_) => continue,
                };
                b.push(Op::ScatterAdd { axis, indices }, &[x, upd])
            }
            Step::Cumsum(a, k, reverse) => {
                let x = pick(&nodes, a);
                let rank = dims(&b, x).len().max(1);
                b.push(
                    Op::Cumsum {
                        axis: k as usize % rank,
                        reverse,
                    },
                    &[x],
                )
            }
            Step::Slice(a, k) => {
                let x = pick(&nodes, a);
                let d = dims(&b, x);
                let starts: Vec<usize> = d.iter().map(|&n| k as usize % n).collect();
                let sizes: Vec<usize> = d.iter().zip(&starts).map(|(n, s)| n - s).collect();
                b.push(Op::Slice { starts, sizes }, &[x])
            }
            Step::PadSlice(a, k) => {
                let x = pick(&nodes, a);
                let d = dims(&b, x);
                let starts: Vec<usize> = d.iter().map(|_| k as usize % 3).collect();
                let full: Vec<usize> = d.iter().map(|&n| n + k as usize % 3 + 1).collect();
                b.push(
                    Op::PadSlice {
                        starts,
                        shape: shape(&full),
                    },
                    &[x],
                )
            }
            Step::Broadcast(a, k) => {
                let x = pick(&nodes, a);
                let mut full = vec![k as usize % 3 + 1];
                full.extend(dims(&b, x));
                b.push(
                    Op::Broadcast {
                        shape: shape(&full),
                    },
                    &[x],
                )
            }
            Step::Matmul(a, c) => b.matmul(pick(&nodes, a), pick(&nodes, c)),
            Step::Solve(a, c, t) => b.push(
                Op::Solve { transpose_a: t },
                &[pick(&nodes, a), pick(&nodes, c)],
            ),
            Step::Cholesky(a, c) => match b.push(Op::Cholesky, &[pick(&nodes, a)]) {
                Ok(l) => b.push(Op::CholeskyAd, &[l, pick(&nodes, c)]).or(Ok(l)),
                Err(e) => Err(e),
            },
            Step::TriangularSolve(a, c, k) => b.push(
                Op::TriangularSolve {
                    lower: k & 1 != 0,
                    transpose_a: k & 2 != 0,
                    unit_diagonal: k & 4 != 0,
                },
                &[pick(&nodes, a), pick(&nodes, c)],
            ),
            Step::Linalg(a, k) => b.push(
                Op::Linalg(LinalgKind::ALL[k as usize % 12]),
                &[pick(&nodes, a)],
            ),
            Step::StopGradient(a) => b.stop_gradient(pick(&nodes, a)),
            Step::Repeat(a) => {
                let x = pick(&nodes, a);
                let node = b.node(x).clone();
                if node.op.is_leaf() {
                    continue;
                }
                b.push(node.op, &node.operands)
            }
            Step::Region(a, c, k) => {
                if let Some(group) =
                    common::random_region(&mut b, pick(&nodes, a), pick(&nodes, c), k, 0)
                {
                    nodes.extend(group);
                }
                continue;
            }
        };
        if let Ok(id) = r {
            nodes.push(id);
        }
    }
    let outputs: Vec<NodeId> = outputs.iter().map(|&o| pick(&nodes, o)).collect();
    b.finish(outputs).unwrap()
}

fn random_graph() -> impl Strategy<Value = Graph> {
    (
        prop::collection::vec(step(), 0..32),
        prop::collection::vec(0usize..1000, 0..4),
    )
        .prop_map(|(steps, outputs)| build_random(&steps, &outputs))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_graphs_round_trip(g in random_graph()) {
        let bytes = encode_graph(&g).unwrap();
        let back = decode_graph(&bytes).map_err(|e| TestCaseError::fail(format!("{e}\n{g}")))?;
        prop_assert_eq!(print_graph(&back, OutputStyle::Refs), print_graph(&g, OutputStyle::Refs));
        // Regions decode as new regions: equal by content, shared as in the original.
        prop_assert!(common::same_structure(&back, &g));
        prop_assert_eq!(encode_graph(&back).unwrap(), bytes);

        let plan = Plan::compile(&g);
        let back = decode_plan(&encode_plan(&plan).unwrap()).unwrap();
        prop_assert_eq!(back.as_text(), plan.as_text());
        prop_assert!(common::same_structure(back.graph(), plan.graph()));
    }
}

// ---------------------------------------------------------------------------------------------
// Fuzzing corrupted encodings

/// One corruption of an encoding; positions are taken modulo the current length.
#[derive(Debug, Clone)]
enum Corruption {
    Flip(prop::sample::Index, u8),
    Truncate(prop::sample::Index),
    Insert(prop::sample::Index, u8),
    Delete(prop::sample::Index),
    /// Overwrites 4 or 8 bytes with a large value, as a corrupted length or extent would be.
    Huge(prop::sample::Index, u64, bool),
}

fn corruption() -> impl Strategy<Value = Corruption> {
    let huge = prop_oneof![
        Just(u64::from(u32::MAX)),
        Just(0x8000_0000),
        Just(0x0100_0000),
        Just(0x7fff_ffff),
        Just(u64::MAX),
        Just(1 << 60),
        Just(1 << 32),
        Just(1 << 40),
        any::<u64>(),
    ];
    prop_oneof![
        (any::<prop::sample::Index>(), 1u8..=255).prop_map(|(i, m)| Corruption::Flip(i, m)),
        any::<prop::sample::Index>().prop_map(Corruption::Truncate),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Corruption::Insert(i, b)),
        any::<prop::sample::Index>().prop_map(Corruption::Delete),
        (any::<prop::sample::Index>(), huge, any::<bool>())
            .prop_map(|(i, v, wide)| Corruption::Huge(i, v, wide)),
    ]
}

fn corrupt(bytes: &mut Vec<u8>, c: &Corruption) {
    if bytes.is_empty() {
        if let Corruption::Insert(_, b) = c {
            bytes.push(*b);
        }
        return;
    }
    match c {
        Corruption::Flip(i, m) => {
            let i = i.index(bytes.len());
            bytes[i] ^= m;
        }
        Corruption::Truncate(i) => bytes.truncate(i.index(bytes.len())),
        Corruption::Insert(i, b) => {
            let i = i.index(bytes.len() + 1);
            bytes.insert(i, *b);
        }
        Corruption::Delete(i) => {
            let i = i.index(bytes.len());
            bytes.remove(i);
        }
        Corruption::Huge(i, v, wide) => {
            let i = i.index(bytes.len());
            let le = v.to_le_bytes();
            let width = if *wide { 8 } else { 4 };
            for (k, b) in le.iter().take(width).enumerate() {
                if let Some(slot) = bytes.get_mut(i + k) {
                    *slot = *b;
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Corrupted encodings never panic the decoder; whatever it accepts is a valid plan whose
    /// encoding is exactly the bytes it read.
    #[test]
    fn corrupted_encodings_never_panic(
        g in random_graph(),
        corruptions in prop::collection::vec(corruption(), 1..4),
    ) {
        let mut bytes = encode_graph(&g).unwrap();
        for c in &corruptions {
            corrupt(&mut bytes, c);
        }
        match decode_plan(&bytes) {
            Ok(plan) => {
                prop_assert!(plan.graph().verify().is_ok());
                prop_assert_eq!(encode_plan(&plan).unwrap(), bytes);
            }
            Err(e) => prop_assert!(e.to_string().starts_with("plan wire data: "), "{}", e),
        }
    }

    /// Arbitrary bytes behind a valid header never panic the decoder either.
    #[test]
    fn random_bodies_never_panic(body in prop::collection::vec(any::<u8>(), 0..256)) {
        let mut bytes = WIRE_MAGIC.to_vec();
        bytes.extend_from_slice(&WIRE_VERSION.to_le_bytes());
        bytes.extend_from_slice(&body);
        if let Ok(plan) = decode_plan(&bytes) {
            prop_assert_eq!(encode_plan(&plan).unwrap(), bytes);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Error cases

/// Hand-written wire data, for inputs the encoder would never produce.
#[derive(Default)]
struct Wire(Vec<u8>);

impl Wire {
    fn header() -> Wire {
        let mut w = Wire::default();
        w.0.extend_from_slice(b"QBLAPLAN");
        w.u32(WIRE_VERSION)
    }

    fn u8(mut self, v: u8) -> Wire {
        self.0.push(v);
        self
    }

    fn u32(mut self, v: u32) -> Wire {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn u64(mut self, v: u64) -> Wire {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// A type: dtype code, weak flag, extents.
    fn ty(self, dtype: u8, weak: u8, dims: &[u64]) -> Wire {
        let mut w = self.u8(dtype).u8(weak).u32(dims.len() as u32);
        for &d in dims {
            w = w.u64(d);
        }
        w
    }

    /// `input[name=x] : tensor<3xf64>`.
    fn input_x(self) -> Wire {
        self.u8(0)
            .u32(1)
            .u8(b'x')
            .ty(1, 0, &[3])
            .u32(0)
            .ty(1, 0, &[3])
    }
}

/// `%0 = input[name=x] : tensor<3xf64>`, `%1 = sin(%0)`, `outputs: [%1]`.
fn small_encoding() -> Vec<u8> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", ty(DType::F64, &[3]));
    let y = b.unary(UnaryOp::Sin, x).unwrap();
    encode_graph(&b.finish(vec![y]).unwrap()).unwrap()
}

#[test]
fn bad_magic() {
    let mut bytes = small_encoding();
    bytes[0] = b'X';
    assert_eq!(decode_plan(&bytes).unwrap_err(), WireError::BadMagic);
    assert_eq!(
        decode_err(&bytes),
        "plan wire data: bad magic bytes (expected \"QBLAPLAN\")"
    );
    assert_eq!(decode_plan(b"PK\x03\x04").unwrap_err(), WireError::BadMagic);
    // A prefix of the magic is cut-off data, not foreign data.
    assert_eq!(
        decode_err(b"QBLA"),
        "plan wire data: truncated at byte 0 (reading the magic bytes)"
    );
    assert_eq!(
        decode_err(b""),
        "plan wire data: truncated at byte 0 (reading the magic bytes)"
    );
}

#[test]
fn wrong_version() {
    let mut bytes = small_encoding();
    bytes[8..12].copy_from_slice(&7u32.to_le_bytes());
    assert_eq!(
        decode_plan(&bytes).unwrap_err(),
        WireError::UnsupportedVersion { found: 7 }
    );
    assert_eq!(
        decode_err(&bytes),
        "plan wire data: unsupported wire version 7 (this build reads version 5)"
    );
    bytes[8..12].copy_from_slice(&0u32.to_le_bytes());
    assert!(decode_err(&bytes).contains("unsupported wire version 0"));
}

#[test]
fn truncation_at_every_length() {
    let bytes = small_encoding();
    for n in 0..bytes.len() {
        let err = decode_plan(&bytes[..n]).unwrap_err();
        assert!(
            matches!(err, WireError::Truncated { .. }),
            "cut at {n}: {err}"
        );
    }
    assert_eq!(
        decode_err(&bytes[..10]),
        "plan wire data: truncated at byte 8 (reading the wire version)"
    );
    assert_eq!(
        decode_err(&bytes[..14]),
        "plan wire data: truncated at byte 12 (reading the node count)"
    );
    // The last output id starts 4 bytes before the end.
    let n = bytes.len();
    assert_eq!(
        decode_err(&bytes[..n - 1]),
        format!(
            "plan wire data: truncated at byte {} (reading an output id)",
            n - 4
        )
    );
}

#[test]
fn unknown_tag() {
    let bytes = Wire::header().u32(1).u8(200).u32(0).ty(1, 0, &[]).u32(0).0;
    assert_eq!(
        decode_plan(&bytes).unwrap_err(),
        WireError::UnknownTag { tag: 200, at: 16 }
    );
    assert_eq!(
        decode_err(&bytes),
        "plan wire data: unknown op tag 200 at byte 16"
    );
    // Tag 31 is the first past the table.
    let bytes = Wire::header().u32(1).u8(31).0;
    assert_eq!(
        decode_err(&bytes),
        "plan wire data: unknown op tag 31 at byte 16"
    );
}

#[test]
fn forward_reference() {
    // %0 = input x, %1 = sin(%5).
    let bytes = Wire::header()
        .u32(2)
        .input_x()
        .u8(3)
        .u8(7)
        .u32(1)
        .u32(5)
        .ty(1, 0, &[3])
        .u32(1)
        .u32(1)
        .0;
    assert_eq!(
        decode_plan(&bytes).unwrap_err(),
        WireError::ForwardReference {
            node: NodeId(1),
            operand: NodeId(5)
        }
    );
    assert_eq!(
        decode_err(&bytes),
        "plan wire data: operand %5 of node %1 is not an earlier node"
    );
    // A node may not use itself either.
    let bytes = Wire::header().u32(2).input_x().u8(3).u8(7).u32(1).u32(1).0;
    assert_eq!(
        decode_err(&bytes),
        "plan wire data: operand %1 of node %1 is not an earlier node"
    );
}

#[test]
fn unknown_output() {
    let bytes = Wire::header().u32(1).input_x().u32(2).u32(0).u32(1).0;
    assert_eq!(
        decode_err(&bytes),
        "plan wire data: output %1 is not a node (the plan has 1 nodes)"
    );
}

#[test]
fn trailing_bytes() {
    let mut bytes = small_encoding();
    let end = bytes.len();
    bytes.extend_from_slice(&[0, 0, 0]);
    assert_eq!(
        decode_plan(&bytes).unwrap_err(),
        WireError::TrailingBytes { at: end, count: 3 }
    );
    assert_eq!(
        decode_err(&bytes),
        format!("plan wire data: trailing bytes (3 after the end of the plan at byte {end})")
    );
}

#[test]
fn huge_lengths_stop_at_the_end_of_the_data() {
    // Counts never reserve more than the remaining bytes can hold; reading stops where the
    // data ends.
    let bytes = Wire::header().u32(u32::MAX).0;
    assert_eq!(
        decode_err(&bytes),
        "plan wire data: truncated at byte 16 (reading an op tag)"
    );
    let bytes = Wire::header().u32(1).u8(0).u32(u32::MAX).u8(b'x').0;
    assert_eq!(
        decode_err(&bytes),
        "plan wire data: truncated at byte 21 (reading an input name)"
    );
    let bytes = Wire::header().u32(1).u8(10).u32(0x1000_0000).u64(0).0;
    assert_eq!(
        decode_err(&bytes),
        "plan wire data: truncated at byte 29 (reading an axis)"
    );
    let bytes = Wire::header().u32(1).input_x().u32(u32::MAX).u32(0).0;
    assert_eq!(
        decode_err(&bytes),
        "plan wire data: truncated at byte 62 (reading an output id)"
    );
    // Constant elements beyond the data: 2^50 f64 values are not read one by one.
    let bytes = Wire::header()
        .u32(1)
        .u8(1)
        .ty(1, 0, &[1 << 30, 1 << 20])
        .u64(0)
        .0;
    assert_eq!(
        decode_err(&bytes),
        "plan wire data: truncated at byte 39 (reading constant elements)"
    );
}

#[test]
fn shapes_are_checked_before_they_are_built() {
    let input = |dims: &[u64]| {
        Wire::header()
            .u32(1)
            .u8(0)
            .u32(1)
            .u8(b'x')
            .ty(0, 0, dims)
            .u32(0)
            .ty(0, 0, dims)
            .u32(1)
            .u32(0)
            .0
    };
    assert!(decode_plan(&input(&[2, 3])).is_ok());
    assert_eq!(
        decode_err(&input(&[2, 0])),
        "plan wire data: shape [2, 0] has a zero extent at byte 24"
    );
    // Each extent is in range but their product overflows.
    assert_eq!(
        decode_err(&input(&[1 << 32, 1 << 32, 1 << 32])),
        "plan wire data: shape [4294967296, 4294967296, 4294967296] has more than 1152921504606846975 elements at byte 24"
    );
    assert_eq!(
        decode_err(&input(&[u64::MAX])),
        "plan wire data: an extent (18446744073709551615) exceeds the limit of 1152921504606846975 at byte 28"
    );
    let too_deep = vec![1u64; MAX_RANK + 1];
    assert_eq!(
        decode_err(&input(&too_deep)),
        format!(
            "plan wire data: rank {} exceeds the limit of {MAX_RANK} at byte 24",
            MAX_RANK + 1
        )
    );
}

#[test]
fn invalid_codes() {
    let weak_seven = Wire::header().u32(1).u8(0).u32(1).u8(b'x').ty(1, 7, &[]).0;
    assert_eq!(
        decode_err(&weak_seven),
        "plan wire data: a weak flag at byte 23 has the invalid value 7"
    );
    let dtype_nine = Wire::header().u32(1).u8(0).u32(0).ty(9, 0, &[]).0;
    assert_eq!(
        decode_err(&dtype_nine),
        "plan wire data: a dtype at byte 21 has the invalid value 9"
    );
    let unary_99 = Wire::header().u32(2).input_x().u8(3).u8(99).0;
    assert!(decode_err(&unary_99)
        .ends_with("a unary function code at byte 55 has the invalid value 99"));
    let bad_bool_element = Wire::header().u32(1).u8(1).ty(2, 0, &[2]).u8(1).u8(2).0;
    assert_eq!(
        decode_err(&bad_bool_element),
        "plan wire data: a bool element at byte 32 has the invalid value 2"
    );
    let bad_utf8 = Wire::header().u32(1).u8(0).u32(1).u8(0xff).0;
    assert_eq!(
        decode_err(&bad_utf8),
        "plan wire data: an input name is not UTF-8 at byte 17"
    );
}

#[test]
fn the_ir_verifier_checks_decoded_graphs() {
    // sin(x) declared as f32 although x is f64.
    let wrong_type = Wire::header()
        .u32(2)
        .input_x()
        .u8(3)
        .u8(7)
        .u32(1)
        .u32(0)
        .ty(0, 0, &[3])
        .u32(1)
        .u32(1)
        .0;
    assert_eq!(
        decode_err(&wrong_type),
        "plan wire data: invalid graph: node %1 (sin) is typed tensor<3xf32> (weak=false) but its rule infers tensor<3xf64> (weak=false)"
    );
    // An input after a non-input node.
    let late_input = Wire::header()
        .u32(3)
        .input_x()
        .u8(3)
        .u8(7)
        .u32(1)
        .u32(0)
        .ty(1, 0, &[3])
        .input_x()
        .u32(0)
        .0;
    assert_eq!(
        decode_err(&late_input),
        "plan wire data: invalid graph: input %2 follows a non-input node; inputs come first"
    );
    // An input whose attribute type differs from its declared type.
    let mismatch = Wire::header()
        .u32(1)
        .u8(0)
        .u32(1)
        .u8(b'x')
        .ty(1, 0, &[3])
        .u32(0)
        .ty(1, 1, &[3])
        .u32(0)
        .0;
    assert!(decode_err(&mismatch).starts_with("plan wire data: invalid graph: node %0 (input)"));
    // Operands that the op's arity rejects.
    let sin_of_two = Wire::header()
        .u32(2)
        .input_x()
        .u8(3)
        .u8(7)
        .u32(2)
        .u32(0)
        .u32(0)
        .ty(1, 0, &[3])
        .u32(0)
        .0;
    assert_eq!(
        decode_err(&sin_of_two),
        "plan wire data: invalid graph: node %1 (sin): sin takes 1 operands, got 2"
    );
}

#[test]
fn hostile_attributes_do_not_overflow() {
    // slice with a start near the limit: start + size must not overflow.
    let limit = (1u64 << 60) - 1;
    let slice = Wire::header()
        .u32(2)
        .input_x()
        .u8(20)
        .u32(1)
        .u64(limit)
        .u32(1)
        .u64(limit)
        .u32(1)
        .u32(0)
        .ty(1, 0, &[limit])
        .u32(0)
        .0;
    assert!(decode_err(&slice).starts_with("plan wire data: invalid graph: node %1 (slice)"));
    // concat of many huge extents: their sum would overflow.
    let mut w = Wire::header()
        .u32(2)
        .u8(0)
        .u32(1)
        .u8(b'x')
        .ty(1, 0, &[limit])
        .u32(0)
        .ty(1, 0, &[limit])
        .u8(19)
        .u64(0)
        .u32(20);
    for _ in 0..20 {
        w = w.u32(0);
    }
    let concat = w.ty(1, 0, &[limit]).u32(0).0;
    assert!(
        decode_err(&concat).contains("concat extents along axis 0 add up to more than"),
        "{}",
        decode_err(&concat)
    );
    // reshape between shapes of (in-range) different sizes.
    let reshape = Wire::header()
        .u32(2)
        .u8(0)
        .u32(1)
        .u8(b'x')
        .ty(1, 0, &[limit])
        .u32(0)
        .ty(1, 0, &[limit])
        .u8(16)
        .u32(2)
        .u64(1 << 30)
        .u64(1 << 29)
        .u32(1)
        .u32(0)
        .ty(1, 0, &[1 << 30, 1 << 29])
        .u32(0)
        .0;
    assert!(decode_err(&reshape).starts_with("plan wire data: invalid graph: node %1 (reshape)"));
}
