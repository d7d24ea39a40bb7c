//! The shape of batched graphs: values that do not depend on a mapped input stay unbatched,
//! `out_axes` placement and broadcasting, nested batching against a double loop, random
//! compositions, and batched graphs going through the plan passes.

mod common;

use common::*;
use quabla_backend::HostTensor;
use quabla_ir::{
    BinaryOp, Comparison, DType, Graph, GraphBuilder, NodeId, Shape, TensorType, UnaryOp,
};
use quabla_vmap::batch_graph;

fn f64_type(dims: &[usize]) -> TensorType {
    TensorType::new(DType::F64, shape(dims))
}

/// `y = x * sum(exp(w) * 2, axis 0)` and `exp(w) * 2`, with `x: [4]` and `w: [3, 4]`.
fn per_example_scale() -> (Graph, NodeId) {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F64, &[4]);
    let w = input(&mut b, "w", DType::F64, &[3, 4]);
    let ew = b.unary(UnaryOp::Exp, w).unwrap();
    let two = b.weak_scalar(2.0);
    let ew2 = b.mul(ew, two).unwrap();
    let s = b.sum(ew2, Some(&[0]), false).unwrap();
    let y = b.mul(x, s).unwrap();
    (b.finish(vec![y, ew2]).unwrap(), ew)
}

#[test]
fn values_of_unmapped_inputs_are_not_replicated() {
    let (g, _) = per_example_scale();
    let bg = batch_graph(&g, &[Some(0), None], 5, &[Some(0), None]).unwrap();
    // Nothing is broadcast along the batch: the weight computations keep their shapes.
    assert!(nodes_named(&bg, "broadcast").is_empty(), "{bg}");
    let exp = nodes_named(&bg, "exp");
    assert_eq!(exp.len(), 1);
    assert_eq!(exp[0].ty, f64_type(&[3, 4]));
    let sums = nodes_named(&bg, "sum_axis");
    assert_eq!(sums.len(), 1);
    assert_eq!(sums[0].ty, f64_type(&[4]));
    assert_eq!(bg.node(bg.outputs()[0]).ty, f64_type(&[5, 4]));
    assert_eq!(bg.node(bg.outputs()[1]).ty, f64_type(&[3, 4]));
    // Only the one node that meets the mapped input is batched.
    let batched: Vec<&str> = bg
        .nodes()
        .iter()
        .filter(|n| n.ty.shape.dims().first() == Some(&5))
        .map(|n| n.op.name())
        .collect();
    assert_eq!(batched, ["input", "mul"], "{bg}");
    // The graph does not grow with the batch.
    let bigger = batch_graph(&g, &[Some(0), None], 500, &[Some(0), None]).unwrap();
    assert_eq!(bigger.len(), bg.len());
}

#[test]
fn an_unbatched_operand_of_higher_rank_broadcasts_without_copies() {
    // A mapped scalar times an unmapped matrix: the batched scalar becomes [B, 1, 1].
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F64, &[]);
    let w = input(&mut b, "w", DType::F64, &[2, 3]);
    let y = b.mul(x, w).unwrap();
    let g = b.finish(vec![y]).unwrap();
    let bg = batch_graph(&g, &[Some(0), None], 4, &[Some(0)]).unwrap();
    assert!(nodes_named(&bg, "broadcast").is_empty(), "{bg}");
    let reshapes = nodes_named(&bg, "reshape");
    assert_eq!(reshapes.len(), 1);
    assert_eq!(reshapes[0].ty, f64_type(&[4, 1, 1]));
    assert_eq!(bg.node(bg.outputs()[0]).ty, f64_type(&[4, 2, 3]));
    check_trial(
        &g,
        &[Some(0), None],
        4,
        &[Some(0)],
        &mut Rng::new(1),
        Domain::Uniform(-1.0, 1.0),
        "scalar times matrix",
    );
}

#[test]
fn out_axes_place_the_batch_axis() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F64, &[2, 3]);
    let c = input(&mut b, "c", DType::F64, &[3]);
    let y = b.unary(UnaryOp::Sin, x).unwrap();
    let d = b.unary(UnaryOp::Cos, c).unwrap();
    let g = b.finish(vec![y, d]).unwrap();
    let mut rng = Rng::new(7);
    for axis in 0..=2 {
        for d_axis in [None, Some(0), Some(1)] {
            let out_axes = [Some(axis), d_axis];
            let bg = check_trial(
                &g,
                &[Some(1), None],
                4,
                &out_axes,
                &mut rng,
                Domain::Uniform(-1.0, 1.0),
                "out_axes",
            );
            let mut dims = vec![2, 3];
            dims.insert(axis, 4);
            assert_eq!(bg.node(bg.outputs()[0]).ty, f64_type(&dims));
            let d_dims = match d_axis {
                None => vec![3],
                Some(0) => vec![4, 3],
                Some(_) => vec![3, 4],
            };
            assert_eq!(bg.node(bg.outputs()[1]).ty, f64_type(&d_dims));
        }
    }
}

#[test]
fn inputs_keep_their_names_and_take_the_batch_axis_at_in_axes() {
    let (g, _) = per_example_scale();
    let bg = batch_graph(&g, &[Some(1), Some(2)], 5, &[Some(0), Some(0)]).unwrap();
    let inputs: Vec<(String, TensorType)> = bg
        .inputs()
        .map(|(_, name, ty)| (name.to_string(), ty.clone()))
        .collect();
    assert_eq!(
        inputs,
        [
            ("x".to_string(), f64_type(&[4, 5])),
            ("w".to_string(), f64_type(&[3, 4, 5]))
        ]
    );
}

/// The loop reference of `f` mapped over `in_axes` and stacked at `out_axes`.
fn looped<'a>(
    f: &'a dyn Fn(&[HostTensor]) -> Vec<HostTensor>,
    in_axes: &'a [Option<usize>],
    size: usize,
    out_axes: &'a [Option<usize>],
) -> impl Fn(&[HostTensor]) -> Vec<HostTensor> + 'a {
    move |inputs: &[HostTensor]| {
        let per: Vec<Vec<HostTensor>> = (0..size)
            .map(|i| {
                let slices: Vec<HostTensor> = inputs
                    .iter()
                    .zip(in_axes)
                    .map(|(x, a)| a.map_or_else(|| x.clone(), |a| take(x, a, i)))
                    .collect();
                f(&slices)
            })
            .collect();
        out_axes
            .iter()
            .enumerate()
            .map(|(k, a)| match a {
                Some(a) => stack(&per.iter().map(|r| r[k].clone()).collect::<Vec<_>>(), *a),
                None => per[0][k].clone(),
            })
            .collect()
    }
}

#[test]
fn nested_batching_matches_a_double_loop() {
    // f(x: [1, 3], w: [3, 2]) = (tanh(x @ w), sum(w)).
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F64, &[1, 3]);
    let w = input(&mut b, "w", DType::F64, &[3, 2]);
    let p = b.matmul(x, w).unwrap();
    let t = b.unary(UnaryOp::Tanh, p).unwrap();
    let s = b.sum(w, None, false).unwrap();
    let g = b.finish(vec![t, s]).unwrap();

    // Inner: x mapped at axis 0 over 4 examples, w shared; sum(w) stays unbatched.
    let (in1, out1) = ([Some(0), None], [Some(2), None]);
    let inner = batch_graph(&g, &in1, 4, &out1).unwrap();
    // Outer: both mapped over 5 (x at axis 1 of [4, 1, 3], w at axis 2 of [3, 2]).
    let (in2, out2) = ([Some(1), Some(2)], [Some(3), Some(0)]);
    let outer = batch_graph(&inner, &in2, 5, &out2).unwrap();

    let mut rng = Rng::new(3);
    let args: Vec<HostTensor> = outer
        .inputs()
        .map(|(_, _, ty)| random_tensor(&mut rng, ty, Domain::Uniform(-1.0, 1.0)))
        .collect();
    let got = run(&outer, &args);
    let base = |xs: &[HostTensor]| run(&g, xs);
    let once = looped(&base, &in1, 4, &out1);
    let twice = looped(&once, &in2, 5, &out2);
    let expected = twice(&args);
    assert_eq!(got.len(), 2);
    for (a, e) in got.iter().zip(&expected) {
        assert!(same_values(a, e), "{a:?}\n{e:?}\n{outer}");
    }
    assert_eq!(got[0].shape, shape(&[1, 2, 4, 5]));
    assert_eq!(got[1].shape, shape(&[5]));
}

/// A random graph built with the checked builder from a few inputs; failing steps are skipped.
fn random_graph(rng: &mut Rng) -> Graph {
    let mut b = GraphBuilder::new();
    let mut nodes = vec![
        input(&mut b, "x", DType::F64, &[2, 3]),
        input(&mut b, "y", DType::F64, &[3]),
        input(&mut b, "z", DType::F64, &[2, 1]),
        input(&mut b, "s", DType::F64, &[]),
        input(&mut b, "p", DType::Bool, &[3]),
    ];
    let unary = [UnaryOp::Sin, UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Neg];
    for _ in 0..rng.range(1, 16) {
        let pick = |rng: &mut Rng, nodes: &[NodeId]| nodes[rng.below(nodes.len())];
        let (a, c) = (pick(rng, &nodes), pick(rng, &nodes));
        let rank = b.ty(a).shape.rank();
        let r = match rng.below(12) {
            0 => b.unary(unary[rng.below(unary.len())], a),
            1 => b.binary(BinaryOp::ALL[rng.below(4)], a, c),
            2 => b.compare(Comparison::Less, a, c),
            3 => {
                let p = pick(rng, &nodes);
                b.select(p, a, c)
            }
            4 => {
                let axes: Vec<isize> = rng.subset(rank).iter().map(|&x| x as isize).collect();
                let keep = rng.chance(0.5);
                if rng.chance(0.5) {
                    b.sum(a, Some(&axes), keep)
                } else {
                    b.max(a, None, keep)
                }
            }
            5 => b.reshape(a, &[-1]),
            6 => b.transpose(a, None),
            7 => b.concat(&[a, c], 0),
            8 if rank > 0 => b.gather(a, &[0, -1, 0], -1),
            9 if rank > 0 => b.cumsum(a, 0, rng.chance(0.5)),
            10 => b.matmul(a, c),
            11 => {
                let target = Shape::new(vec![2, 2, 3]).unwrap();
                b.broadcast_to(a, target)
            }
            _ => continue,
        };
        if let Ok(n) = r {
            nodes.push(n);
        }
    }
    let k = nodes.len();
    let outputs = vec![nodes[k - 1], nodes[rng.below(k)], nodes[rng.below(k)]];
    b.finish(outputs).unwrap()
}

#[test]
fn random_compositions_batch_like_a_loop() {
    for seed in 0..300 {
        let mut rng = Rng::new(seed);
        let g = random_graph(&mut rng);
        let in_axes = random_in_axes(&mut rng, &g);
        let size = rng.range(1, 3);
        let out_axes = random_out_axes(&mut rng, &g, &in_axes);
        check_trial(
            &g,
            &in_axes,
            size,
            &out_axes,
            &mut rng,
            Domain::Uniform(0.1, 0.9),
            &format!("random graph (seed {seed})"),
        );
    }
}

#[test]
fn batched_graphs_give_the_same_values_after_the_plan_passes() {
    for seed in 0..100 {
        let mut rng = Rng::new(seed);
        let g = random_graph(&mut rng);
        let in_axes = random_in_axes(&mut rng, &g);
        let size = rng.range(1, 3);
        let out_axes = random_out_axes(&mut rng, &g, &in_axes);
        let bg = batch_graph(&g, &in_axes, size, &out_axes).unwrap();
        let args: Vec<HostTensor> = bg
            .inputs()
            .map(|(_, _, ty)| random_tensor(&mut rng, ty, Domain::Uniform(0.1, 0.9)))
            .collect();
        let plain = run(&bg, &args);
        let compiled = run_compiled(&bg, &args);
        for (a, c) in plain.iter().zip(&compiled) {
            assert!(same_values(a, c), "seed {seed}: {a:?} vs {c:?}\n{bg}");
        }
    }
}
