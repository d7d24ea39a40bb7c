//! The reverse mode of loops nested `d` deep is a program whose distinct parts grow linearly
//! in `d`: each level differentiates its body once (the forward pass of a loop's VJP does not
//! build the body's VJP), and the loops a derivative runs in several places (the forward
//! pass, each recomputation, the body's VJP) are shared regions, not copies. Built `2^d`
//! times over, 20 levels took 27 s to differentiate and compile.

use quabla_autodiff::{jvp_graph, vjp_graph, vjp_graph_with, LoopTape, Seed, VjpOptions};
use quabla_ir::interp::run_graph;
use quabla_ir::{
    BinaryOp, DType, Graph, GraphBuilder, HostData, Op, Region, RegionForm, RegionKind, ScanBody,
    Shape, TensorType, UnaryOp,
};
use std::collections::HashSet;
use std::sync::Arc;

fn scalar() -> TensorType {
    TensorType::new(DType::F64, Shape::scalar())
}

/// `sin(x) * 0.75` inside `depth` one-trip `fori_loop`s nested in one another.
fn nest(depth: usize) -> Graph {
    nest_of_lengths(&vec![1; depth])
}

/// The nodes of `g` and of every region body it reaches, each region counted once.
fn distinct_nodes(g: &Graph, seen: &mut HashSet<usize>) -> usize {
    let mut total = g.len();
    for node in g.nodes() {
        if let Op::Region(call) = &node.op {
            if seen.insert(Arc::as_ptr(&call.region) as usize) {
                for (_, body) in call.region.bodies() {
                    total += distinct_nodes(body, seen);
                }
            }
        }
    }
    total
}

fn size(g: &Graph) -> usize {
    distinct_nodes(g, &mut HashSet::new())
}

#[test]
fn derivatives_of_nested_loops_grow_linearly_with_the_depth() {
    let grad = |d: usize| vjp_graph(&nest(d), &[true], &[Seed::Ones]).unwrap();
    let (g10, g20, g40) = (size(&grad(10)), size(&grad(20)), size(&grad(40)));
    assert!(
        g20 <= 2 * g10 + 200 && g40 <= 2 * g20 + 200,
        "gradient sizes at depths 10, 20, 40: {g10}, {g20}, {g40}"
    );
    // Second order (forward over reverse) too.
    let hvp = |d: usize| jvp_graph(&grad(d), &[true]).unwrap();
    let (h10, h20) = (size(&hvp(10)), size(&hvp(20)));
    assert!(
        h20 <= 2 * h10 + 400,
        "hvp sizes at depths 10, 20: {h10}, {h20}"
    );
    // And the values: d/dx of (0.75 sin)(x) once, whatever the depth.
    let outs = run_graph(&grad(30), &[HostData::F64(vec![0.4].into())]).unwrap();
    let want = 0.75 * 0.4f64.cos();
    assert!(
        (outs[1].get_f64(0) - want).abs() < 1e-15,
        "{}",
        outs[1].get_f64(0)
    );
}

/// `x -> sin(x) * 0.75` applied by a `fori_loop` of `lengths[0]` trips, itself the body of a
/// `fori_loop` of `lengths[1]` trips, and so on outwards.
fn nest_of_lengths(lengths: &[usize]) -> Graph {
    let mut b = GraphBuilder::new();
    let _i = b.input("i", scalar());
    let x = b.input("x", scalar());
    let s = b.unary(UnaryOp::Sin, x).unwrap();
    let k = b.scalar(0.75, DType::F64, false);
    let y = b.binary(BinaryOp::Mul, s, k).unwrap();
    let mut body = b.finish(vec![y]).unwrap();
    let mut outer = None;
    for &length in lengths {
        let scan = ScanBody {
            length,
            start: 0,
            reverse: false,
            n_carry: 1,
            n_const: 0,
            n_xs: 0,
            body: Arc::new(body),
        };
        let r = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0).unwrap());
        let mut b = GraphBuilder::new();
        let _i = b.input("i", scalar());
        let x = b.input("x", scalar());
        let y = b.push_region_calls(r.clone(), 0..1, &[x]).unwrap()[0];
        body = b.finish(vec![y]).unwrap();
        outer = Some(r);
    }
    let mut b = GraphBuilder::new();
    let x = b.input("x", scalar());
    let y = b.push_region_calls(outer.unwrap(), 0..1, &[x]).unwrap()[0];
    b.finish(vec![y]).unwrap()
}

#[test]
fn the_full_tape_option_reaches_every_nested_loop_with_the_same_bits() {
    // An inner loop of 16 trips inside an outer one of 9: checkpointed, their tapes hold
    // blocks of 4 and 3 carries; with the full tape, 16 and 9.
    let g = nest_of_lengths(&[16, 9]);
    let grad = |tape: LoopTape| {
        let options = VjpOptions { loop_tape: tape };
        vjp_graph_with(&g, &[true], &[Seed::Ones], options).unwrap()
    };
    let (checkpointed, full) = (grad(LoopTape::Checkpointed), grad(LoopTape::Full));
    let (text_c, text_f) = (checkpointed.to_string(), full.to_string());
    for tape in ["tensor<16xf64>", "tensor<9xf64>"] {
        assert!(text_f.contains(tape), "{tape} in\n{text_f}");
        assert!(!text_c.contains(tape), "{tape} in\n{text_c}");
    }
    for block in ["tensor<4xf64>", "tensor<3xf64>"] {
        assert!(text_c.contains(block), "{block} in\n{text_c}");
    }
    let x = [HostData::F64(vec![0.4].into())];
    let (gc, gf) = (
        run_graph(&checkpointed, &x).unwrap(),
        run_graph(&full, &x).unwrap(),
    );
    assert_eq!(gc[1].get_f64(0).to_bits(), gf[1].get_f64(0).to_bits());
    // And the value is the chain rule through 144 applications of 0.75 sin.
    let (mut v, mut d) = (0.4f64, 1.0f64);
    for _ in 0..144 {
        d *= 0.75 * v.cos();
        v = 0.75 * v.sin();
    }
    assert!(
        (gc[1].get_f64(0) - d).abs() <= 1e-14 * d.abs(),
        "{} vs {d}",
        gc[1].get_f64(0)
    );
}
