//! Batching of control-flow regions (transforms.md §11) against the per-example loop: `cond`
//! with an unmapped and a mapped predicate, `fori`-style and stacked `scan`s, `while` loops
//! with an unmapped and a mapped predicate, regions nested in bodies, and the structure of the
//! rewritten groups (one region per group, forms and levels kept).
//!
//! Graphs are evaluated by the reference interpreter of `common::interp`; when the CPU backend
//! executes regions, every batched graph is also run there and must agree bit for bit.

mod common;

use common::interp::{cpu_run_if_supported, eval_graph, tensor};
use common::*;
use quabla_backend::HostTensor;
use quabla_ir::{
    Comparison, DType, Graph, GraphBuilder, NodeId, Op, Region, RegionCall, RegionForm, RegionKind,
    ScanBody, TensorType, UnaryOp,
};
use quabla_vmap::batch_graph;
use std::sync::Arc;

/// A `cond` region of the two branches.
fn cond_region(then_branch: Arc<Graph>, else_branch: Arc<Graph>) -> Region {
    let kind = RegionKind::Cond {
        then_branch,
        else_branch,
    };
    Region::new(kind, RegionForm::Cond, 0).unwrap()
}

/// A `while` region with `n_carry` carries.
fn while_region(n_carry: usize, cond: Arc<Graph>, body: Arc<Graph>) -> Region {
    let kind = RegionKind::While {
        n_carry,
        cond,
        body,
        max_trips: None,
    };
    Region::new(kind, RegionForm::While, 0).unwrap()
}

fn ty(dims: &[usize]) -> TensorType {
    TensorType::new(DType::F64, shape(dims))
}

fn f64s(dims: &[usize], values: &[f64]) -> HostTensor {
    tensor(DType::F64, dims, values)
}

/// A body graph with inputs of the given types, whose outputs `f` builds from the inputs.
fn body(
    inputs: &[TensorType],
    f: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> Vec<NodeId>,
) -> Arc<Graph> {
    let mut b = GraphBuilder::new();
    let ids: Vec<NodeId> = inputs
        .iter()
        .enumerate()
        .map(|(k, t)| b.input(format!("a{k}"), t.clone()))
        .collect();
    let outs = f(&mut b, &ids);
    Arc::new(b.finish(outs).unwrap())
}

/// One region node per output of `region`, all sharing it and the operands.
fn call(b: &mut GraphBuilder, region: Region, operands: &[NodeId]) -> Vec<NodeId> {
    let n = region.output_types().len();
    b.push_region_calls(Arc::new(region), 0..n, operands)
        .unwrap()
}

fn strong(b: &mut GraphBuilder, value: f64) -> NodeId {
    b.scalar(value, DType::F64, false)
}

/// The distinct regions called by the nodes of `g` (not looking into bodies), in order of
/// first use, with the output index of each node that calls them.
fn regions_of(g: &Graph) -> Vec<(Arc<Region>, Vec<usize>)> {
    let mut found: Vec<(Arc<Region>, Vec<usize>)> = Vec::new();
    for node in g.nodes() {
        if let Op::Region(c) = &node.op {
            match found.iter_mut().find(|(r, _)| Arc::ptr_eq(r, &c.region)) {
                Some((_, outs)) => outs.push(c.output),
                None => found.push((c.region.clone(), vec![c.output])),
            }
        }
    }
    found
}

/// The only region of `g`, which every region node of `g` must call.
fn only_region(g: &Graph) -> (Arc<Region>, Vec<usize>) {
    let mut regions = regions_of(g);
    assert_eq!(regions.len(), 1, "expected one region in\n{g}");
    regions.remove(0)
}

fn body_input_dims(g: &Graph) -> Vec<Vec<usize>> {
    g.inputs()
        .map(|(_, _, t)| t.shape.dims().to_vec())
        .collect()
}

fn has_nan(x: &HostTensor) -> bool {
    x.data.to_f64_vec().iter().any(|v| v.is_nan())
}

/// Batches `g`, evaluates it on the `batched` inputs and compares every output bit for bit
/// (NaNs aside) with evaluating `g` on each example's slices and stacking the results at the
/// output's axis. Returns the batched graph and its outputs.
fn check(
    g: &Graph,
    in_axes: &[Option<usize>],
    out_axes: &[Option<usize>],
    batched: &[HostTensor],
    context: &str,
) -> (Graph, Vec<HostTensor>) {
    let size = in_axes
        .iter()
        .zip(batched)
        .find_map(|(a, x)| a.map(|a| x.shape.dims()[a]))
        .expect("at least one mapped input");
    let bg = batch_graph(g, in_axes, size, out_axes)
        .unwrap_or_else(|e| panic!("{context}: batch_graph failed: {e}\n{g}"));
    bg.verify().unwrap();
    let got = eval_graph(&bg, batched);
    let per_example: Vec<Vec<HostTensor>> = (0..size)
        .map(|i| {
            let slices: Vec<HostTensor> = batched
                .iter()
                .zip(in_axes)
                .map(|(x, a)| match a {
                    Some(a) => take(x, *a, i),
                    None => x.clone(),
                })
                .collect();
            eval_graph(g, &slices)
        })
        .collect();
    for (k, axis) in out_axes.iter().enumerate() {
        let parts: Vec<HostTensor> = per_example.iter().map(|r| r[k].clone()).collect();
        let expected = match axis {
            Some(a) => stack(&parts, *a),
            None => {
                assert!(parts.iter().all(|p| same_values(p, &parts[0])));
                parts[0].clone()
            }
        };
        assert!(
            same_values(&got[k], &expected),
            "{context}: output {k} differs\nbatched: {:?}\nloop:    {:?}\ngraph:\n{g}\nbatched graph:\n{bg}",
            got[k],
            expected
        );
    }
    if let Some(cpu) = cpu_run_if_supported(&bg, batched) {
        for (k, (c, e)) in cpu.iter().zip(&got).enumerate() {
            assert!(
                same_values(c, e),
                "{context}: the CPU backend disagrees on output {k}: {c:?} vs {e:?}\n{bg}"
            );
        }
    }
    (bg, got)
}

/// `cond(p > 0, x, w)` with three outputs: batched in both branches, batched in the else
/// branch only, and unbatched in both.
fn cond_graph() -> Graph {
    let then_branch = body(&[ty(&[3]), ty(&[3])], |b, a| {
        let (x, w) = (a[0], a[1]);
        let xw = b.mul(x, w).unwrap();
        let one = strong(b, 1.0);
        let o0 = b.add(xw, one).unwrap();
        let o1 = b.unary(UnaryOp::Sin, w).unwrap();
        let three = strong(b, 3.0);
        let o2 = b.mul(w, three).unwrap();
        vec![o0, o1, o2]
    });
    let else_branch = body(&[ty(&[3]), ty(&[3])], |b, a| {
        let (x, w) = (a[0], a[1]);
        let o0 = b.sub(x, w).unwrap();
        let two = strong(b, 2.0);
        let o1 = b.mul(x, two).unwrap();
        vec![o0, o1, w]
    });
    let region = cond_region(then_branch, else_branch);
    let mut b = GraphBuilder::new();
    let p = b.input("p", ty(&[]));
    let x = b.input("x", ty(&[3]));
    let w = b.input("w", ty(&[3]));
    let zero = strong(&mut b, 0.0);
    let pred = b.compare(Comparison::Greater, p, zero).unwrap();
    let outs = call(&mut b, region, &[pred, x, w]);
    b.finish(outs).unwrap()
}

#[test]
fn cond_with_an_unmapped_predicate_stays_one_cond_with_batched_branches() {
    let g = cond_graph();
    let x = f64s(
        &[3, 4],
        &[
            0.5, -1.0, 2.0, 3.0, 1.5, 0.25, -2.0, 4.0, 1.0, 0.0, -0.5, 7.0,
        ],
    );
    let w = f64s(&[3], &[0.3, -0.7, 1.1]);
    for p in [1.0, -1.0] {
        let inputs = [f64s(&[], &[p]), x.clone(), w.clone()];
        let (bg, _) = check(
            &g,
            &[None, Some(1), None],
            &[Some(0), Some(1), None],
            &inputs,
            &format!("cond, p = {p}"),
        );
        let (region, outputs) = only_region(&bg);
        assert_eq!(outputs, [0, 1, 2], "one node per output, one region:\n{bg}");
        assert_eq!(region.form(), RegionForm::Cond);
        assert_eq!(region.level(), 0);
        let RegionKind::Cond {
            then_branch,
            else_branch,
        } = region.kind()
        else {
            panic!("not a cond: {bg}")
        };
        for branch in [then_branch, else_branch] {
            assert_eq!(body_input_dims(branch), [vec![4, 3], vec![3]]);
        }
        let outs: Vec<Vec<usize>> = region
            .output_types()
            .iter()
            .map(|t| t.shape.dims().to_vec())
            .collect();
        // The second output is batched in the else branch only, so the then branch
        // broadcasts it; the third depends on no mapped value in either branch.
        assert_eq!(outs, [vec![4, 3], vec![4, 3], vec![3]]);
    }
}

#[test]
fn cond_with_a_mapped_predicate_selects_per_example_without_leaking() {
    // safe_log: cond(x > 0, log(x), 2x), with outputs of rank 0, an unbatched weak constant
    // in each branch, and a rank-1 output against an unmapped vector.
    let then_branch = body(&[ty(&[]), ty(&[2])], |b, a| {
        let (x, y) = (a[0], a[1]);
        let log = b.unary(UnaryOp::Log, x).unwrap();
        let seven = b.weak_scalar(7.0);
        let sqrt = b.unary(UnaryOp::Sqrt, x).unwrap();
        let v = b.mul(y, sqrt).unwrap();
        vec![log, seven, v]
    });
    let else_branch = body(&[ty(&[]), ty(&[2])], |b, a| {
        let (x, y) = (a[0], a[1]);
        let two = strong(b, 2.0);
        let twice = b.mul(x, two).unwrap();
        let minus_seven = b.weak_scalar(-7.0);
        let v = b.sub(y, x).unwrap();
        vec![twice, minus_seven, v]
    });
    let region = cond_region(then_branch, else_branch);
    let mut b = GraphBuilder::new();
    let x = b.input("x", ty(&[]));
    let y = b.input("y", ty(&[2]));
    let zero = strong(&mut b, 0.0);
    let pred = b.compare(Comparison::Greater, x, zero).unwrap();
    let outs = call(&mut b, region, &[pred, x, y]);
    let g = b.finish(outs).unwrap();

    let xs = f64s(&[5], &[2.0, -1.0, 0.5, -3.0, 0.0]);
    let y = f64s(&[2], &[1.5, -0.5]);
    let (bg, got) = check(
        &g,
        &[Some(0), None],
        &[Some(0), Some(0), Some(1)],
        &[xs, y],
        "cond with a mapped predicate",
    );
    assert!(
        regions_of(&bg).is_empty(),
        "both branches are inlined:\n{bg}"
    );
    assert!(!nodes_named(&bg, "where").is_empty(), "{bg}");
    // log and sqrt of the negative examples are NaN in the then branch, which must not reach
    // the results of the examples that take the else branch.
    for out in &got {
        assert!(!has_nan(out), "an unselected branch leaked NaN: {out:?}");
    }
    assert_eq!(got[0].data.get_f64(1), -2.0);
    assert_eq!(got[0].data.get_f64(0), 2f64.ln());
    assert_eq!(
        got[1].data.to_f64_vec(),
        [7.0, -7.0, 7.0, -7.0, -7.0],
        "unbatched branch results are selected per example"
    );
    // The region's results are strong even where both branches return weak constants.
    for (o, bo) in g.outputs().iter().zip(bg.outputs()) {
        assert!(!g.node(*o).ty.weak);
        assert!(!bg.node(*bo).ty.weak, "{bg}");
    }
}

#[test]
fn fori_with_a_mapped_operand_batches_the_carries_that_depend_on_it() {
    // Carries: c [2], d [], e1 [2], e2 [2]; const a [2]. e2 becomes batched in the first round
    // of the fixed point and e1 (which takes e2's value) only in the second.
    let body = body(
        &[ty(&[]), ty(&[2]), ty(&[]), ty(&[2]), ty(&[2]), ty(&[2])],
        |b, p| {
            let (i, c, d, e2, a) = (p[0], p[1], p[2], p[4], p[5]);
            let half = strong(b, 0.5);
            let ch = b.mul(c, half).unwrap();
            let ai = b.mul(a, i).unwrap();
            let c2 = b.add(ch, ai).unwrap();
            let d2 = b.add(d, i).unwrap();
            let e2n = b.add(e2, a).unwrap();
            vec![c2, d2, e2, e2n]
        },
    );
    let region = Region::new(
        RegionKind::Scan(ScanBody {
            length: 4,
            start: 1,
            reverse: false,
            n_carry: 4,
            n_const: 1,
            n_xs: 0,
            body,
        }),
        RegionForm::ForiJvp,
        1,
    )
    .unwrap();
    let mut b = GraphBuilder::new();
    let c0 = b.input("c0", ty(&[2]));
    let d0 = b.input("d0", ty(&[]));
    let a = b.input("a", ty(&[2]));
    let outs = call(&mut b, region, &[c0, d0, c0, c0, a]);
    let g = b.finish(outs).unwrap();

    let inputs = [
        f64s(&[2], &[1.0, -2.0]),
        f64s(&[], &[0.5]),
        f64s(&[3, 2], &[0.1, 0.2, -1.0, 3.0, 2.5, -0.75]),
    ];
    let (bg, _) = check(
        &g,
        &[None, None, Some(0)],
        &[Some(0), None, Some(1), Some(0)],
        &inputs,
        "fori",
    );
    let (region, outputs) = only_region(&bg);
    assert_eq!(outputs, [0, 1, 2, 3]);
    assert_eq!((region.form(), region.level()), (RegionForm::ForiJvp, 1));
    let RegionKind::Scan(s) = region.kind() else {
        panic!("not a scan: {bg}")
    };
    assert_eq!((s.length, s.start, s.reverse), (4, 1, false));
    // The index stays unbatched; d depends on nothing mapped.
    assert_eq!(
        body_input_dims(&s.body),
        [
            vec![],
            vec![3, 2],
            vec![],
            vec![3, 2],
            vec![3, 2],
            vec![3, 2]
        ]
    );
}

/// `scan` over `xs` ([3, 2], mapped) and `w` ([3, 2], unmapped) with carry `c` ([2]):
/// `c' = c + x * i`, `y0 = c * x`, `y1 = w_slice * i`.
fn stacked_scan(reverse: bool, start: usize) -> Graph {
    let body = body(&[ty(&[]), ty(&[2]), ty(&[2]), ty(&[2])], |b, p| {
        let (i, c, x, w) = (p[0], p[1], p[2], p[3]);
        let xi = b.mul(x, i).unwrap();
        let c2 = b.add(c, xi).unwrap();
        let y0 = b.mul(c, x).unwrap();
        let y1 = b.mul(w, i).unwrap();
        vec![c2, y0, y1]
    });
    let region = Region::new(
        RegionKind::Scan(ScanBody {
            length: 3,
            start,
            reverse,
            n_carry: 1,
            n_const: 0,
            n_xs: 2,
            body,
        }),
        RegionForm::Scan,
        0,
    )
    .unwrap();
    let mut b = GraphBuilder::new();
    let c0 = b.input("c0", ty(&[2]));
    let xs = b.input("xs", ty(&[3, 2]));
    let w = b.input("w", ty(&[3, 2]));
    let outs = call(&mut b, region, &[c0, xs, w]);
    b.finish(outs).unwrap()
}

#[test]
fn scan_with_batched_xs_and_ys_keeps_the_scan_axis_leading() {
    let mut rng = Rng::new(11);
    for (reverse, start) in [(false, 0), (true, 2)] {
        let g = stacked_scan(reverse, start);
        for xs_axis in 0..3 {
            for out_axes in [
                [Some(0), Some(0), None],
                [Some(1), Some(2), Some(1)],
                [Some(0), Some(1), Some(0)],
            ] {
                let mut xs_dims = vec![3, 2];
                xs_dims.insert(xs_axis, 4);
                let inputs = [
                    random_tensor(&mut rng, &ty(&[2]), Domain::Uniform(-2.0, 2.0)),
                    random_tensor(&mut rng, &ty(&xs_dims), Domain::Uniform(-2.0, 2.0)),
                    random_tensor(&mut rng, &ty(&[3, 2]), Domain::Uniform(-2.0, 2.0)),
                ];
                let context = format!("scan reverse={reverse}, xs axis {xs_axis}, {out_axes:?}");
                let (bg, got) = check(
                    &g,
                    &[None, Some(xs_axis), None],
                    &out_axes,
                    &inputs,
                    &context,
                );
                let (region, outputs) = only_region(&bg);
                assert_eq!(outputs, [0, 1, 2]);
                // The batched xs enter as [length, B, ...] and y0 leaves that way; y1 stays
                // unbatched.
                assert_eq!(region.operand_types()[1].shape.dims(), [3, 4, 2]);
                let outs: Vec<Vec<usize>> = region
                    .output_types()
                    .iter()
                    .map(|t| t.shape.dims().to_vec())
                    .collect();
                assert_eq!(outs, [vec![4, 2], vec![3, 4, 2], vec![3, 2]], "{context}");
                if out_axes[1] == Some(0) {
                    assert_eq!(got[1].shape.dims(), [4, 3, 2]);
                }
            }
        }
    }
}

#[test]
fn a_group_with_some_outputs_keeps_exactly_those_nodes() {
    let g = stacked_scan(false, 0);
    // The same region called for its stacked output only.
    let Op::Region(c) = &g.nodes().iter().find(|n| n.op.name() == "scan").unwrap().op else {
        unreachable!()
    };
    let mut b = GraphBuilder::new();
    let c0 = b.input("c0", ty(&[2]));
    let xs = b.input("xs", ty(&[3, 2]));
    let w = b.input("w", ty(&[3, 2]));
    let y0 = b
        .push(
            Op::Region(RegionCall {
                region: c.region.clone(),
                output: 1,
            }),
            &[c0, xs, w],
        )
        .unwrap();
    let g = b.finish(vec![y0]).unwrap();
    let mut rng = Rng::new(5);
    let inputs = [
        random_tensor(&mut rng, &ty(&[2, 5]), Domain::Uniform(-1.0, 1.0)),
        random_tensor(&mut rng, &ty(&[3, 2]), Domain::Uniform(-1.0, 1.0)),
        random_tensor(&mut rng, &ty(&[3, 2]), Domain::Uniform(-1.0, 1.0)),
    ];
    let (bg, _) = check(&g, &[Some(1), None, None], &[Some(2)], &inputs, "ys only");
    let (_, outputs) = only_region(&bg);
    assert_eq!(outputs, [1]);
}

#[test]
fn while_with_an_unmapped_predicate_is_one_loop_with_a_batched_body() {
    // while n < limit: c = c * a + 1; n = n + 1, with c mapped and the counter unmapped.
    let carries = [ty(&[2]), ty(&[])];
    let consts = [ty(&[2]), ty(&[])];
    let all: Vec<TensorType> = carries.iter().chain(&consts).cloned().collect();
    let cond = body(&all, |b, p| {
        vec![b.compare(Comparison::Less, p[1], p[3]).unwrap()]
    });
    let step = body(&all, |b, p| {
        let ca = b.mul(p[0], p[2]).unwrap();
        let one = strong(b, 1.0);
        let c2 = b.add(ca, one).unwrap();
        let n2 = b.add(p[1], one).unwrap();
        vec![c2, n2]
    });
    let region = while_region(2, cond, step);
    let mut b = GraphBuilder::new();
    let c0 = b.input("c0", ty(&[2]));
    let a = b.input("a", ty(&[2]));
    let limit = b.input("limit", ty(&[]));
    let n0 = strong(&mut b, 0.0);
    let outs = call(&mut b, region, &[c0, n0, a, limit]);
    let g = b.finish(outs).unwrap();

    let inputs = [
        f64s(&[3, 2], &[1.0, 2.0, -0.5, 0.25, 3.0, -1.0]),
        f64s(&[2], &[0.9, -1.1]),
        f64s(&[], &[5.0]),
    ];
    let (bg, got) = check(
        &g,
        &[Some(0), None, None],
        &[Some(0), None],
        &inputs,
        "while, unmapped predicate",
    );
    assert_eq!(got[1].data.to_f64_vec(), [5.0]);
    let (region, outputs) = only_region(&bg);
    assert_eq!(outputs, [0, 1]);
    let RegionKind::While { cond, body, .. } = region.kind() else {
        panic!("not a while: {bg}")
    };
    assert!(nodes_named(cond, "max_axis").is_empty(), "{cond}");
    assert!(nodes_named(body, "where").is_empty(), "{body}");
    assert_eq!(body_input_dims(body), [vec![3, 2], vec![], vec![2], vec![]]);
}

/// `while x < limit: x = x * 1.5 + 0.25; y = sin(y) + x`, with `x` mapped and `y` unmapped.
fn growth_loop() -> Graph {
    let all = [ty(&[]), ty(&[2]), ty(&[])];
    let cond = body(&all, |b, p| {
        vec![b.compare(Comparison::Less, p[0], p[2]).unwrap()]
    });
    let step = body(&all, |b, p| {
        let k = strong(b, 1.5);
        let xk = b.mul(p[0], k).unwrap();
        let quarter = strong(b, 0.25);
        let x2 = b.add(xk, quarter).unwrap();
        let s = b.unary(UnaryOp::Sin, p[1]).unwrap();
        let y2 = b.add(s, p[0]).unwrap();
        vec![x2, y2]
    });
    let region = while_region(2, cond, step);
    let mut b = GraphBuilder::new();
    let x0 = b.input("x0", ty(&[]));
    let y0 = b.input("y0", ty(&[2]));
    let limit = b.input("limit", ty(&[]));
    let outs = call(&mut b, region, &[x0, y0, limit]);
    b.finish(outs).unwrap()
}

#[test]
fn while_with_a_mapped_predicate_runs_until_every_example_stops() {
    let g = growth_loop();
    // Trip counts 13, 11, 2, 0 and 7: the finished examples must keep their carries bit for
    // bit while the others go on.
    let x0 = f64s(&[5], &[0.1, 1.0, 50.0, 200.0, 7.3]);
    let inputs = [x0, f64s(&[2], &[0.3, -1.2]), f64s(&[], &[100.0])];
    let (bg, got) = check(
        &g,
        &[Some(0), None, None],
        &[Some(0), Some(1)],
        &inputs,
        "while, mapped predicate",
    );
    assert_eq!(got[0].data.get_f64(3), 200.0, "an example with no trip");
    let (region, outputs) = only_region(&bg);
    assert_eq!(outputs, [0, 1]);
    let RegionKind::While { cond, body, .. } = region.kind() else {
        panic!("not a while: {bg}")
    };
    // The loop predicate is `any` of the per-example ones; every carry is batched.
    assert_eq!(cond.node(cond.outputs()[0]).ty.shape.rank(), 0);
    assert_eq!(nodes_named(cond, "max_axis").len(), 1, "{cond}");
    assert_eq!(nodes_named(body, "where").len(), 2, "{body}");
    assert_eq!(body_input_dims(body), [vec![5], vec![5, 2], vec![]]);

    // Batching the batched graph again (a mapped limit this time) against the loop over it.
    let limits = f64s(&[3], &[100.0, 2.0, 1e4]);
    let x0 = f64s(&[5], &[0.1, 1.0, 50.0, 200.0, 7.3]);
    let outer = [x0, f64s(&[2], &[0.3, -1.2]), limits];
    let (bbg, _) = check(
        &bg,
        &[None, None, Some(0)],
        &[Some(0), Some(2)],
        &outer,
        "while, batched twice",
    );
    let (region, _) = only_region(&bbg);
    let RegionKind::While { cond, .. } = region.kind() else {
        panic!("not a while: {bbg}")
    };
    assert_eq!(body_input_dims(cond), [vec![3, 5], vec![3, 5, 2], vec![3]]);
}

#[test]
fn while_predicate_mapped_through_the_carry_fixed_point() {
    // while c < 10: c = c + a; n = n + 1, with a mapped and c, n starting unmapped: c is
    // batched from the first iteration, which maps the predicate, which batches n.
    let all = [ty(&[]), ty(&[]), ty(&[])];
    let cond = body(&all, |b, p| {
        let ten = strong(b, 10.0);
        vec![b.compare(Comparison::Less, p[0], ten).unwrap()]
    });
    let step = body(&all, |b, p| {
        let c2 = b.add(p[0], p[2]).unwrap();
        let one = strong(b, 1.0);
        let n2 = b.add(p[1], one).unwrap();
        vec![c2, n2]
    });
    let region = while_region(2, cond, step);
    let mut b = GraphBuilder::new();
    let a = b.input("a", ty(&[]));
    let zero = strong(&mut b, 0.0);
    let outs = call(&mut b, region, &[zero, zero, a]);
    let g = b.finish(outs).unwrap();
    let (_, got) = check(
        &g,
        &[Some(0)],
        &[Some(0), Some(0)],
        &[f64s(&[5], &[1.0, 3.0, 0.7, 20.0, 2.5])],
        "while, predicate mapped through the carry",
    );
    assert_eq!(got[1].data.to_f64_vec(), [10.0, 4.0, 15.0, 1.0, 4.0]);
}

#[test]
fn a_cond_with_a_mapped_predicate_inside_a_fori_body() {
    // fori i in 0..5: x = cond(x > 1, (x, i), then: (x/2, x - 1), else: (x + i, x * i));
    //                 x = o0 + 0.125 * o1
    let inner_then = body(&[ty(&[]), ty(&[])], |b, p| {
        let half = strong(b, 0.5);
        let one = strong(b, 1.0);
        vec![b.mul(p[0], half).unwrap(), b.sub(p[0], one).unwrap()]
    });
    let inner_else = body(&[ty(&[]), ty(&[])], |b, p| {
        vec![b.add(p[0], p[1]).unwrap(), b.mul(p[0], p[1]).unwrap()]
    });
    let inner = cond_region(inner_then, inner_else);
    let fori_body = body(&[ty(&[]), ty(&[])], |b, p| {
        let (i, x) = (p[0], p[1]);
        let one = strong(b, 1.0);
        let pred = b.compare(Comparison::Greater, x, one).unwrap();
        let o = call(b, inner, &[pred, x, i]);
        let k = strong(b, 0.125);
        let scaled = b.mul(o[1], k).unwrap();
        vec![b.add(o[0], scaled).unwrap()]
    });
    let fori = Region::new(
        RegionKind::Scan(ScanBody {
            length: 5,
            start: 0,
            reverse: false,
            n_carry: 1,
            n_const: 0,
            n_xs: 0,
            body: fori_body,
        }),
        RegionForm::Fori,
        0,
    )
    .unwrap();
    let mut b = GraphBuilder::new();
    let x0 = b.input("x0", ty(&[]));
    let outs = call(&mut b, fori, &[x0]);
    let g = b.finish(outs).unwrap();
    let (bg, _) = check(
        &g,
        &[Some(0)],
        &[Some(0)],
        &[f64s(&[4], &[0.5, 3.0, 1.0, -2.0])],
        "cond in fori",
    );
    let (region, _) = only_region(&bg);
    let RegionKind::Scan(s) = region.kind() else {
        panic!("not a scan: {bg}")
    };
    assert!(regions_of(&s.body).is_empty(), "{}", s.body);
    // One `where` per output, and one per floating operand (`x`, `i`) and branch: each branch
    // reads its operands through `where(pred, x, stop_gradient(x))`.
    assert_eq!(nodes_named(&s.body, "where").len(), 2 + 2 * 2, "{}", s.body);
    assert_eq!(
        nodes_named(&s.body, "stop_gradient").len(),
        2 * 2,
        "{}",
        s.body
    );
}

#[test]
fn loops_inside_the_branches_of_a_cond_with_an_unmapped_predicate() {
    // cond(p > 0, (x [2], lim [])):
    //   then: while max(y) < lim: y = 2y  (the predicate is mapped: y is batched)
    //   else: fori 3 times: (y, s) = (y + s, s / 2), returning y
    let loop_types = [ty(&[2]), ty(&[])];
    let w_cond = body(&loop_types, |b, p| {
        let m = b.max(p[0], None, false).unwrap();
        vec![b.compare(Comparison::Less, m, p[1]).unwrap()]
    });
    let w_body = body(&loop_types, |b, p| {
        let two = strong(b, 2.0);
        vec![b.mul(p[0], two).unwrap()]
    });
    let doubling = Region::new(
        RegionKind::While {
            n_carry: 1,
            cond: w_cond,
            body: w_body,
            max_trips: None,
        },
        RegionForm::While,
        0,
    )
    .unwrap();
    let then_branch = body(&loop_types, |b, p| call(b, doubling, &[p[0], p[1]]));
    let f_body = body(&[ty(&[]), ty(&[2]), ty(&[])], |b, p| {
        let y2 = b.add(p[1], p[2]).unwrap();
        let half = strong(b, 0.5);
        let s2 = b.mul(p[2], half).unwrap();
        vec![y2, s2]
    });
    let stepping = Region::new(
        RegionKind::Scan(ScanBody {
            length: 3,
            start: 0,
            reverse: false,
            n_carry: 2,
            n_const: 0,
            n_xs: 0,
            body: f_body,
        }),
        RegionForm::Fori,
        0,
    )
    .unwrap();
    let else_branch = body(&loop_types, |b, p| {
        let outs = call(b, stepping, &[p[0], p[1]]);
        vec![outs[0]]
    });
    let cond = cond_region(then_branch, else_branch);
    let mut b = GraphBuilder::new();
    let p = b.input("p", ty(&[]));
    let x = b.input("x", ty(&[2]));
    let lim = b.input("lim", ty(&[]));
    let zero = strong(&mut b, 0.0);
    let pred = b.compare(Comparison::Greater, p, zero).unwrap();
    let outs = call(&mut b, cond, &[pred, x, lim]);
    let g = b.finish(outs).unwrap();

    let x = f64s(&[4, 2], &[0.1, 0.2, 3.0, -1.0, 40.0, 2.0, 0.5, 0.5]);
    for p in [1.0, -1.0] {
        let inputs = [f64s(&[], &[p]), x.clone(), f64s(&[], &[10.0])];
        let (bg, _) = check(
            &g,
            &[None, Some(0), None],
            &[Some(0)],
            &inputs,
            &format!("loops in cond branches, p = {p}"),
        );
        let (region, _) = only_region(&bg);
        let RegionKind::Cond {
            then_branch,
            else_branch,
        } = region.kind()
        else {
            panic!("not a cond: {bg}")
        };
        let (inner, _) = only_region(then_branch);
        let RegionKind::While { cond, .. } = inner.kind() else {
            panic!("not a while: {then_branch}")
        };
        assert_eq!(
            nodes_named(cond, "max_axis").len(),
            2,
            "max and any: {cond}"
        );
        // The fori keeps its two-output group as one region; s stays unbatched.
        let (inner, outputs) = only_region(else_branch);
        assert_eq!(outputs, [0, 1]);
        let outs: Vec<Vec<usize>> = inner
            .output_types()
            .iter()
            .map(|t| t.shape.dims().to_vec())
            .collect();
        assert_eq!(outs, [vec![4, 2], vec![]]);
    }
}

#[test]
fn a_region_that_depends_on_no_mapped_input_is_not_batched() {
    let g = stacked_scan(false, 1);
    // `x` is mapped, but nothing that reaches the scan depends on it.
    let mut b = GraphBuilder::new();
    let x = b.input("x", ty(&[2]));
    let c0 = b.input("c0", ty(&[2]));
    let xs = b.input("xs", ty(&[3, 2]));
    let w = b.input("w", ty(&[3, 2]));
    let outs = b.inline_graph(&g, &[c0, xs, w]).unwrap();
    let y = b.mul(x, outs[0]).unwrap();
    let h = b.finish(vec![y, outs[1]]).unwrap();
    let mut rng = Rng::new(3);
    let inputs: Vec<HostTensor> = [ty(&[3, 2]), ty(&[2]), ty(&[3, 2]), ty(&[3, 2])]
        .iter()
        .map(|t| random_tensor(&mut rng, t, Domain::Uniform(-1.0, 1.0)))
        .collect();
    let (bg, _) = check(
        &h,
        &[Some(0), None, None, None],
        &[Some(0), None],
        &inputs,
        "unmapped region",
    );
    let (region, outputs) = only_region(&bg);
    let (original, _) = only_region(&g);
    assert!(
        Arc::ptr_eq(&region, &original),
        "the region is reused as it is"
    );
    assert_eq!(outputs, [0, 1, 2]);
}

#[test]
fn batched_region_nodes_stay_next_to_each_other() {
    let g = stacked_scan(true, 0);
    let bg = batch_graph(&g, &[Some(0), Some(0), None], 2, &[Some(0); 3]).unwrap();
    let positions: Vec<usize> = bg
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| matches!(n.op, Op::Region(_)))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(positions.len(), 3, "{bg}");
    assert_eq!(positions[2] - positions[0], 2, "{bg}");
    // Every node of the group has the same operands.
    let operands: Vec<&Vec<NodeId>> = positions.iter().map(|&i| &bg.nodes()[i].operands).collect();
    assert!(operands.iter().all(|o| *o == operands[0]));
    assert_eq!(quabla_ir::region_groups(&bg)[&positions[0]], positions);
}
