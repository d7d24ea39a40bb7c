//! Reverse mode of a `while` region bounded by `max_trips`: its cost follows the trips the loop
//! takes, whatever the bound (docs/loops.md). The loop below runs `x <- sin(a * solve(A, x))`
//! while a trip counter is below a stop value; the body's `solve` has no folding rule, so the
//! reference interpreter hands every one to a fallback that counts them: each forward `solve`
//! is one run of the body (in the forward pass, a recomputation, or the forward half of the
//! body's VJP). The gradient is checked against central differences and against the same
//! trips unrolled and as a counted `scan`, and must be the same bits for every bound.

use quabla_autodiff::check::{check_grads, Array, GraphFunction, Modes, Tolerance};
use quabla_autodiff::{vjp_graph_with, LoopTape, Seed, VjpOptions};
use quabla_ir::eval::HostValue;
use quabla_ir::interp::Interpreter;
use quabla_ir::{
    Comparison, DType, Graph, GraphBuilder, HostData, Node, NodeId, Op, Plan, Region, RegionForm,
    RegionKind, Result, ScanBody, Shape, TensorType, UnaryOp,
};
use std::cell::Cell;
use std::sync::Arc;

fn f64_ty(dims: &[usize]) -> TensorType {
    TensorType::new(DType::F64, Shape::new(dims.to_vec()).unwrap())
}

/// One trip: `x <- sin(a * solve(A, x))`, `k <- k + 1` on the nodes given.
fn step(b: &mut GraphBuilder, x: NodeId, k: NodeId, a: NodeId, m: NodeId) -> Result<[NodeId; 2]> {
    let s = b.push(Op::Solve { transpose_a: false }, &[m, x])?;
    let ax = b.mul(a, s)?;
    let x = b.unary(UnaryOp::Sin, ax)?;
    let one = b.scalar(1.0, DType::F64, false);
    Ok([x, b.add(k, one)?])
}

/// The inputs every form of the loop takes: `x0 [2, 1]`, `a`, `A [2, 2]`, `stop`.
fn inputs(b: &mut GraphBuilder) -> [NodeId; 4] {
    [
        b.input("x0", f64_ty(&[2, 1])),
        b.input("a", f64_ty(&[])),
        b.input("m", f64_ty(&[2, 2])),
        b.input("stop", f64_ty(&[])),
    ]
}

/// `sum(x^2)` after the bounded loop: carries `(x, k)`, consts `(a, A, stop)`.
fn looped(max_trips: usize) -> Graph {
    let types = [
        f64_ty(&[2, 1]),
        f64_ty(&[]),
        f64_ty(&[]),
        f64_ty(&[2, 2]),
        f64_ty(&[]),
    ];
    let mut cb = GraphBuilder::new();
    let ins: Vec<NodeId> = (0..5)
        .map(|k| cb.input(format!("in{k}"), types[k].clone()))
        .collect();
    let going = cb.compare(Comparison::Less, ins[1], ins[4]).unwrap();
    let cond = cb.finish(vec![going]).unwrap();
    let mut bb = GraphBuilder::new();
    let ins: Vec<NodeId> = (0..5)
        .map(|k| bb.input(format!("in{k}"), types[k].clone()))
        .collect();
    let outs = step(&mut bb, ins[0], ins[1], ins[2], ins[3]).unwrap();
    let body = bb.finish(outs.to_vec()).unwrap();
    let kind = RegionKind::While {
        n_carry: 2,
        cond: Arc::new(cond),
        body: Arc::new(body),
        max_trips: Some(max_trips),
    };
    let region = Arc::new(Region::new(kind, RegionForm::While, 0).unwrap());
    let mut b = GraphBuilder::new();
    let [x0, a, m, stop] = inputs(&mut b);
    let k0 = b.scalar(0.0, DType::F64, false);
    let outs = b
        .push_region_calls(region, 0..2, &[x0, k0, a, m, stop])
        .unwrap();
    finish_loss(b, outs[0])
}

/// The same `trips` trips unrolled.
fn unrolled(trips: usize) -> Graph {
    let mut b = GraphBuilder::new();
    let [mut x, a, m, _stop] = inputs(&mut b);
    let mut k = b.scalar(0.0, DType::F64, false);
    for _ in 0..trips {
        [x, k] = step(&mut b, x, k, a, m).unwrap();
    }
    finish_loss(b, x)
}

/// The same `trips` trips as a counted `scan` (a `fori_loop`).
fn counted(trips: usize) -> Graph {
    let types = [f64_ty(&[2, 1]), f64_ty(&[]), f64_ty(&[]), f64_ty(&[2, 2])];
    let mut bb = GraphBuilder::new();
    let _i = bb.input("i", f64_ty(&[]));
    let ins: Vec<NodeId> = (0..4)
        .map(|k| bb.input(format!("in{k}"), types[k].clone()))
        .collect();
    let outs = step(&mut bb, ins[0], ins[1], ins[2], ins[3]).unwrap();
    let body = bb.finish(outs.to_vec()).unwrap();
    let scan = ScanBody {
        length: trips,
        start: 0,
        reverse: false,
        n_carry: 2,
        n_const: 2,
        n_xs: 0,
        body: Arc::new(body),
    };
    let region = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0).unwrap());
    let mut b = GraphBuilder::new();
    let [x0, a, m, _stop] = inputs(&mut b);
    let k0 = b.scalar(0.0, DType::F64, false);
    let outs = b.push_region_calls(region, 0..2, &[x0, k0, a, m]).unwrap();
    finish_loss(b, outs[0])
}

fn finish_loss(mut b: GraphBuilder, x: NodeId) -> Graph {
    let sq = b.mul(x, x).unwrap();
    let loss = b.sum(sq, None, false).unwrap();
    b.finish(vec![loss]).unwrap()
}

/// `(loss, d loss / d x0, d loss / d a)`, the loop keeping `tape`.
fn gradient(g: &Graph, tape: LoopTape) -> Graph {
    let options = VjpOptions { loop_tape: tape };
    vjp_graph_with(g, &[true, true, false, false], &[Seed::Ones], options).unwrap()
}

thread_local! {
    /// Forward `solve`s run since the last reset: runs of the loop body.
    static BODY_RUNS: Cell<usize> = const { Cell::new(0) };
}

/// The nodes the interpreter has no folding rule for, on the CPU backend; forward solves
/// counted.
fn on_cpu(node: &Node, operands: &[HostValue<'_>]) -> Option<HostData> {
    if node.op == (Op::Solve { transpose_a: false }) {
        BODY_RUNS.with(|c| c.set(c.get() + 1));
    }
    let mut b = GraphBuilder::new();
    let ins: Vec<NodeId> = operands
        .iter()
        .enumerate()
        .map(|(k, v)| {
            b.input(
                format!("x{k}"),
                TensorType::new(v.data.dtype(), v.shape.clone()),
            )
        })
        .collect();
    let out = b.push(node.op.clone(), &ins).ok()?;
    let g = b.finish(vec![out]).ok()?;
    let args: Vec<quabla_backend::HostTensor> = operands
        .iter()
        .map(|v| quabla_backend::HostTensor::new(v.shape.clone(), v.data.clone()))
        .collect();
    let mut outs = quabla_cpu::run_plan(&Plan::from_graph_unoptimized(g), &args).ok()?;
    Some(outs.remove(0).data)
}

fn evaluate(g: &Graph, inputs: &[HostData]) -> std::result::Result<Vec<HostData>, String> {
    Interpreter::default()
        .with_fallback(&on_cpu)
        .run(g, inputs)
        .map_err(|e| e.to_string())
}

const X0: [f64; 2] = [0.3, 0.7];
const A: f64 = 0.8;
const M: [f64; 4] = [2.0, 0.5, -0.25, 1.5];

fn point(x0: [f64; 2], a: f64, stop: usize) -> Vec<HostData> {
    vec![
        HostData::F64(x0.to_vec().into()),
        HostData::F64(vec![a].into()),
        HostData::F64(M.to_vec().into()),
        HostData::F64(vec![stop as f64].into()),
    ]
}

/// The gradient's values `[d/dx0_0, d/dx0_1, d/da]` and the body runs it took.
fn run_gradient(g: &Graph, stop: usize) -> (Vec<f64>, usize) {
    run_gradient_with(g, stop, LoopTape::Checkpointed)
}

/// [`run_gradient`] with the loop keeping `tape`.
fn run_gradient_with(g: &Graph, stop: usize, tape: LoopTape) -> (Vec<f64>, usize) {
    BODY_RUNS.with(|c| c.set(0));
    let outs = evaluate(&gradient(g, tape), &point(X0, A, stop)).unwrap();
    let runs = BODY_RUNS.with(Cell::get);
    let mut values: Vec<f64> = (0..2).map(|i| outs[1].get_f64(i)).collect();
    values.push(outs[2].get_f64(0));
    (values, runs)
}

fn loss(g: &Graph, x0: [f64; 2], a: f64, stop: usize) -> f64 {
    evaluate(g, &point(x0, a, stop)).unwrap()[0].get_f64(0)
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn the_gradient_is_the_same_bits_for_every_bound_and_matches_its_references() {
    for trips in [1usize, 5, 12] {
        let (want, _) = run_gradient(&unrolled(trips), trips);
        let (scan, _) = run_gradient(&counted(trips), trips);
        let full = run_gradient_with(&looped(trips), trips, LoopTape::Full).0;
        // Central differences of the loop's value, in float64.
        let g = looped(usize::MAX);
        let h = 1e-6;
        let mut fd = Vec::new();
        for i in 0..2 {
            let (mut up, mut down) = (X0, X0);
            up[i] += h;
            down[i] -= h;
            fd.push((loss(&g, up, A, trips) - loss(&g, down, A, trips)) / (2.0 * h));
        }
        fd.push((loss(&g, X0, A + h, trips) - loss(&g, X0, A - h, trips)) / (2.0 * h));
        for bound in [trips, trips + 1, 1 << 20, 1 << 44, usize::MAX] {
            let (got, _) = run_gradient(&looped(bound), trips);
            assert_eq!(
                bits(&got),
                bits(&scan),
                "{trips} trips, bound {bound}: as a scan"
            );
            assert_eq!(
                bits(&got),
                bits(&full),
                "{trips} trips, bound {bound}: full tape"
            );
            for k in 0..3 {
                let close = |x: f64, y: f64, tol: f64| (x - y).abs() <= tol * (1.0 + y.abs());
                assert!(
                    close(got[k], want[k], 1e-13),
                    "{trips} trips, bound {bound}, component {k}: {} vs unrolled {}",
                    got[k],
                    want[k]
                );
                assert!(
                    close(got[k], fd[k], 1e-7),
                    "{trips} trips, bound {bound}, component {k}: {} vs differences {}",
                    got[k],
                    fd[k]
                );
            }
        }
    }
}

#[test]
fn the_work_follows_the_trips_taken_not_the_bound() {
    // Trips taken, bound: body runs. The forward pass runs the body `T` times, the backward
    // pass recomputes at most `T` per level the trips reach and runs `T` body VJPs.
    let runs = |trips: usize, bound: usize| run_gradient(&looped(bound), trips).1;
    for trips in [0usize, 1, 5, 40] {
        let big: Vec<usize> = [1 << 20, 1 << 44, usize::MAX]
            .iter()
            .map(|&m| runs(trips, m))
            .collect();
        // Past `128^2` trips of bound every layout reaches the same levels for these counts.
        assert!(
            big.iter().all(|&r| r == big[0]),
            "{trips} trips: body runs {big:?} differ with the bound"
        );
        // Forward, one level of recomputation (`T - 1` runs: the last trip needs none), VJPs.
        assert_eq!(big[0], (3 * trips).saturating_sub(1), "{trips} trips");
        let tight = runs(trips, trips.max(1));
        assert!(
            tight <= 4 * trips,
            "{trips} trips, tight bound: {tight} runs"
        );
    }
    // Twice the trips, twice the work, with the largest bound.
    assert_eq!(runs(80, usize::MAX), 2 * runs(40, usize::MAX) + 1);
}

#[test]
fn every_order_and_mode_through_the_widest_bound() {
    // The backward pass is built of scans, conds and bounded whiles, so the rules apply to it
    // again: forward and reverse mode to second order against central differences.
    let g = looped(usize::MAX);
    let f = GraphFunction::new(g, &evaluate).unwrap();
    let x = vec![
        Array::new(vec![2, 1], X0.to_vec()),
        Array::new(vec![], vec![A]),
        Array::new(vec![2, 2], M.to_vec()),
        Array::new(vec![], vec![4.5]),
    ];
    check_grads(&f, &x, 2, Modes::BOTH, Tolerance::default(), 7).unwrap();
}
