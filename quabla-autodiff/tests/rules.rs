//! The derivative rules of every op family, checked with `check_grads`: forward and reverse
//! mode against central differences in float64, to third order (every composition of the two
//! modes), at points away from each op's singular points. The reference interpreter runs the
//! graphs; `matmul`, which it has no folding rule for, runs on the CPU backend.
//!
//! Every op declares how its rules are checked, in an exhaustive `match` that a new op does
//! not compile without: each unary function its domain ([`unary_derivative`]), each binary
//! function and reduction its case ([`binary_case`], [`reduction_case`]), and each op kind
//! the tables of this file or the test file elsewhere that checks it ([`rules_checked`],
//! verified by [`every_op_kind_declares_where_its_rules_are_checked`]).

use quabla_autodiff::check::{check_grads, Array, GraphFunction, Modes, Tolerance};
use quabla_ir::eval::HostValue;
use quabla_ir::interp::Interpreter;
use quabla_ir::{
    BinaryOp, Comparison, DType, Graph, GraphBuilder, HostData, Node, NodeId, Op, OpKind, Plan,
    ReduceKind, Result, Shape, TensorType, UnaryOp,
};
use quabla_random::testing::TestRng;
use std::collections::BTreeSet;

type Build = Box<dyn Fn(&mut GraphBuilder, &[NodeId]) -> Result<NodeId>>;

/// One case: a graph of float64 inputs of the given shapes, with inputs drawn from `domain`.
struct Case {
    name: &'static str,
    shapes: Vec<Vec<usize>>,
    domain: (f64, f64),
    build: Build,
    order: usize,
}

fn case(
    name: &'static str,
    shapes: &[&[usize]],
    domain: (f64, f64),
    build: impl Fn(&mut GraphBuilder, &[NodeId]) -> Result<NodeId> + 'static,
) -> Case {
    Case {
        name,
        shapes: shapes.iter().map(|s| s.to_vec()).collect(),
        domain,
        build: Box::new(build),
        order: 3,
    }
}

fn graph(c: &Case) -> Graph {
    let mut b = GraphBuilder::new();
    let inputs: Vec<NodeId> = c
        .shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            b.input(
                format!("x{i}"),
                TensorType::new(DType::F64, Shape::new(s.clone()).unwrap()),
            )
        })
        .collect();
    let out = (c.build)(&mut b, &inputs).unwrap_or_else(|e| panic!("{}: {e}", c.name));
    b.finish(vec![out]).unwrap()
}

/// One node the interpreter has no folding rule for, on the CPU backend.
fn on_cpu(node: &Node, operands: &[HostValue<'_>]) -> Option<HostData> {
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

fn check(c: &Case, seed: u64) {
    let g = graph(c);
    let mut rng = TestRng::new(seed);
    let x: Vec<Array> = c
        .shapes
        .iter()
        .map(|s| {
            let n = s.iter().product();
            Array::new(s.clone(), rng.vec(n, c.domain.0, c.domain.1))
        })
        .collect();
    let f = GraphFunction::new(g, &evaluate).unwrap();
    check_grads(&f, &x, c.order, Modes::BOTH, Tolerance::default(), seed)
        .unwrap_or_else(|e| panic!("{}: {e}", c.name));
}

/// How the derivative of a unary function is checked.
#[derive(Clone, Copy, Debug)]
enum Derivative {
    /// Smooth and moderate on the domain: checked to third order.
    Smooth(f64, f64),
    /// Zero but at its jumps: checked on a domain inside one piece.
    PiecewiseConstant(f64, f64),
    /// A function of integers and bools only: no derivative (numerics.md §12).
    None,
}

/// The derivative of each unary function and where it is checked. Exhaustive: a new
/// function does not compile until it declares its domain here.
fn unary_derivative(op: UnaryOp) -> Derivative {
    use Derivative::{PiecewiseConstant, Smooth};
    match op {
        UnaryOp::Neg
        | UnaryOp::Tanh
        | UnaryOp::Exp
        | UnaryOp::Expm1
        | UnaryOp::Sin
        | UnaryOp::Cos
        | UnaryOp::Erf
        | UnaryOp::Erfc
        | UnaryOp::Arctan
        | UnaryOp::Sinh
        | UnaryOp::Cosh
        | UnaryOp::Arcsinh => Smooth(-1.5, 1.5),
        UnaryOp::Log | UnaryOp::Log2 | UnaryOp::Log10 | UnaryOp::Sqrt => Smooth(0.5, 2.0),
        UnaryOp::Log1p => Smooth(-0.5, 1.5),
        UnaryOp::Arcsin | UnaryOp::Arccos | UnaryOp::Arctanh => Smooth(-0.6, 0.6),
        UnaryOp::Arccosh => Smooth(1.5, 3.0),
        UnaryOp::Tan => Smooth(-1.0, 1.0),
        UnaryOp::Cbrt => Smooth(0.5, 2.0),
        UnaryOp::Floor | UnaryOp::Ceil => PiecewiseConstant(0.1, 0.9),
        UnaryOp::Round => PiecewiseConstant(0.1, 0.4),
        UnaryOp::BitNot => Derivative::None,
    }
}

fn unary_case(op: UnaryOp, domain: (f64, f64)) -> Case {
    case(op.name(), &[&[3]], domain, move |b, x| b.unary(op, x[0]))
}

/// The smooth unary functions, each with its seed (its place in `UnaryOp::ALL`).
fn smooth_unary_cases() -> Vec<(u64, Case)> {
    let mut cases = Vec::new();
    for (i, op) in UnaryOp::ALL.into_iter().enumerate() {
        if let Derivative::Smooth(lo, hi) = unary_derivative(op) {
            cases.push((i as u64, unary_case(op, (lo, hi))));
        }
    }
    cases
}

#[test]
fn smooth_unary_functions_to_third_order() {
    for (seed, c) in smooth_unary_cases() {
        check(&c, seed);
    }
}

/// The functions whose derivative is zero wherever it is defined.
fn zero_derivative_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = UnaryOp::ALL
        .into_iter()
        .filter_map(|op| match unary_derivative(op) {
            Derivative::PiecewiseConstant(lo, hi) => Some(unary_case(op, (lo, hi))),
            _ => None,
        })
        .collect();
    cases.push(case("comparison", &[&[3], &[3]], (-1.0, 1.0), |b, x| {
        let p = b.compare(Comparison::Greater, x[0], x[1])?;
        b.astype(p, DType::F64)
    }));
    cases
}

#[test]
fn piecewise_constant_functions_have_zero_derivatives() {
    for (i, c) in zero_derivative_cases().iter().enumerate() {
        check(c, 100 + i as u64);
    }
}

/// The case of each binary function, `None` for the integer ones (no derivative,
/// numerics.md §12). Exhaustive: a new function does not compile until it has its case.
fn binary_case(op: BinaryOp) -> Option<Case> {
    let name = op.name();
    let plain = move |b: &mut GraphBuilder, x: &[NodeId]| b.binary(op, x[0], x[1]);
    Some(match op {
        BinaryOp::Add => case(name, &[&[2, 3], &[3]], (-1.0, 1.0), plain),
        BinaryOp::Sub => case(name, &[&[3], &[2, 3]], (-1.0, 1.0), plain),
        BinaryOp::Mul => case(name, &[&[2, 3], &[2, 1]], (-1.0, 1.0), plain),
        BinaryOp::Div | BinaryOp::Pow | BinaryOp::Atan2 => {
            case(name, &[&[3], &[3]], (0.5, 1.5), plain)
        }
        BinaryOp::Fmod => case(name, &[&[3], &[3]], (2.1, 2.9), |b, x| {
            let one = b.scalar(1.0, DType::F64, false);
            let d = b.sub(x[1], one)?;
            b.binary(BinaryOp::Fmod, x[0], d)
        }),
        BinaryOp::FloorDiv
        | BinaryOp::Rem
        | BinaryOp::BitAnd
        | BinaryOp::BitOr
        | BinaryOp::BitXor
        | BinaryOp::ShiftLeft
        | BinaryOp::ShiftRightArithmetic
        | BinaryOp::ShiftRightLogical => return None,
    })
}

fn binary_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = BinaryOp::ALL.into_iter().filter_map(binary_case).collect();
    cases.push(case("powi", &[&[3]], (-1.5, 1.5), |b, x| b.powi(x[0], 4)));
    cases.push(case("powi negative", &[&[3]], (0.5, 1.5), |b, x| {
        b.powi(x[0], -3)
    }));
    cases.push(case("where", &[&[3], &[3], &[3]], (-1.0, 1.0), |b, x| {
        let p = b.compare(Comparison::Greater, x[0], x[1])?;
        let s = b.mul(x[0], x[2])?;
        b.select(p, s, x[1])
    }));
    cases
}

#[test]
fn binary_functions_to_third_order() {
    for (i, c) in binary_cases().iter().enumerate() {
        check(c, 200 + i as u64);
    }
}

/// The case of each reduction. Exhaustive: a new reduction does not compile until it has
/// its case.
fn reduction_case(kind: ReduceKind) -> Case {
    let name = kind.name();
    let square = |b: &mut GraphBuilder, x: NodeId| b.mul(x, x);
    match kind {
        ReduceKind::Sum => case(name, &[&[2, 3]], (-1.0, 1.0), |b, x| {
            let s = b.unary(UnaryOp::Sin, x[0])?;
            b.sum(s, None, false)
        }),
        ReduceKind::SumAxis => case(name, &[&[2, 3]], (-1.0, 1.0), move |b, x| {
            let s = square(b, x[0])?;
            b.sum(s, Some(&[1]), false)
        }),
        ReduceKind::Mean => case(name, &[&[2, 3]], (-1.0, 1.0), move |b, x| {
            let s = square(b, x[0])?;
            b.mean(s, None, true)
        }),
        ReduceKind::MeanAxis => case(name, &[&[2, 3]], (-1.0, 1.0), move |b, x| {
            let s = square(b, x[0])?;
            b.mean(s, Some(&[0]), false)
        }),
        ReduceKind::MaxAxis => case(name, &[&[2, 3]], (-1.0, 1.0), move |b, x| {
            let s = square(b, x[0])?;
            b.max(s, Some(&[1]), false)
        }),
        ReduceKind::MinAxis => case(name, &[&[2, 3]], (-1.0, 1.0), move |b, x| {
            let s = square(b, x[0])?;
            b.min(s, Some(&[0]), false)
        }),
    }
}

fn reduction_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = ReduceKind::ALL.into_iter().map(reduction_case).collect();
    cases.push(case("cumsum", &[&[2, 3]], (-1.0, 1.0), |b, x| {
        let s = b.mul(x[0], x[0])?;
        b.cumsum(s, 1, true)
    }));
    cases
}

#[test]
fn reductions_and_scans_to_third_order() {
    for (i, c) in reduction_cases().iter().enumerate() {
        check(c, 300 + i as u64);
    }
}

fn layout_cases() -> Vec<Case> {
    vec![
        case("reshape", &[&[2, 3]], (-1.0, 1.0), |b, x| {
            let s = b.mul(x[0], x[0])?;
            b.reshape(s, &[3, -1])
        }),
        case("transpose", &[&[2, 3]], (-1.0, 1.0), |b, x| {
            let s = b.mul(x[0], x[0])?;
            b.transpose(s, None)
        }),
        case("broadcast", &[&[3]], (-1.0, 1.0), |b, x| {
            let s = b.mul(x[0], x[0])?;
            b.broadcast_to(s, Shape::new(vec![2, 3])?)
        }),
        case("concat", &[&[2], &[3]], (-1.0, 1.0), |b, x| {
            let s = b.mul(x[0], x[0])?;
            let t = b.unary(UnaryOp::Sin, x[1])?;
            b.concat(&[s, t], 0)
        }),
        case("slice", &[&[4, 3]], (-1.0, 1.0), |b, x| {
            let s = b.mul(x[0], x[0])?;
            b.slice(s, vec![1, 0], vec![2, 2])
        }),
        case("gather", &[&[4]], (-1.0, 1.0), |b, x| {
            let s = b.mul(x[0], x[0])?;
            b.gather(s, &[2, 0, 2], 0)
        }),
        case("scatter_add", &[&[3], &[2]], (-1.0, 1.0), |b, x| {
            let s = b.mul(x[1], x[1])?;
            let base = b.unary(UnaryOp::Sin, x[0])?;
            b.scatter_add(base, &[1, 1], s, 0)
        }),
        case("matmul", &[&[2, 3], &[3, 2]], (-1.0, 1.0), |b, x| {
            let s = b.unary(UnaryOp::Sin, x[0])?;
            b.matmul(s, x[1])
        }),
        // A batch times a shared matrix on the right and on the left (the cotangent of the
        // shared matrix contracts over the batch in one product), and a batch whose second
        // operand broadcasts along one batch axis only (the general rule).
        case(
            "matmul_shared_right",
            &[&[2, 2, 2, 3], &[3, 2]],
            (-1.0, 1.0),
            |b, x| {
                let s = b.unary(UnaryOp::Sin, x[0])?;
                let w = b.mul(x[1], x[1])?;
                b.matmul(s, w)
            },
        ),
        case(
            "matmul_shared_left",
            &[&[2, 3], &[2, 2, 3, 2]],
            (-1.0, 1.0),
            |b, x| {
                let s = b.unary(UnaryOp::Sin, x[1])?;
                let w = b.mul(x[0], x[0])?;
                b.matmul(w, s)
            },
        ),
        case(
            "matmul_partial_broadcast",
            &[&[2, 2, 3], &[1, 3, 2]],
            (-1.0, 1.0),
            |b, x| {
                let s = b.unary(UnaryOp::Sin, x[0])?;
                b.matmul(s, x[1])
            },
        ),
        // The cotangent of `slice`, differentiated again by the third-order check above but
        // also checked on its own.
        case("pad_slice", &[&[2, 2]], (-1.0, 1.0), |b, x| {
            let s = b.mul(x[0], x[0])?;
            let shape = Shape::new(vec![4, 3])?;
            b.push(
                Op::PadSlice {
                    starts: vec![1, 0],
                    shape,
                },
                &[s],
            )
        }),
    ]
}

#[test]
fn layout_ops_to_third_order() {
    for (i, c) in layout_cases().iter().enumerate() {
        check(c, 400 + i as u64);
    }
}

/// Where the derivative rules of an op kind are checked against finite differences.
#[derive(Clone, Copy, Debug)]
enum Checked {
    /// By a case of this file's tables.
    Here,
    /// By the tests in this file of the workspace.
    In(&'static str),
    /// Nowhere: a leaf of every graph, with nothing to differentiate.
    Leaf,
}

/// Where each op kind's rules are checked. Exhaustive: a new op does not compile until it
/// says where.
fn rules_checked(kind: OpKind) -> Checked {
    use Checked::{Here, In, Leaf};
    match kind {
        OpKind::Input | OpKind::Constant => Leaf,
        OpKind::Cast
        | OpKind::Unary
        | OpKind::Powi
        | OpKind::Binary
        | OpKind::Compare
        | OpKind::Where
        | OpKind::Sum
        | OpKind::SumAxis
        | OpKind::Mean
        | OpKind::MeanAxis
        | OpKind::MaxAxis
        | OpKind::MinAxis
        | OpKind::Cumsum
        | OpKind::Reshape
        | OpKind::Transpose
        | OpKind::Broadcast
        | OpKind::Concat
        | OpKind::Slice
        | OpKind::PadSlice
        | OpKind::Gather
        | OpKind::ScatterAdd
        | OpKind::Matmul => Here,
        // Zero by definition, which finite differences do not see: checked for zeros.
        OpKind::StopGradient => In("quabla/tests/vmap_library.rs"),
        OpKind::Solve
        | OpKind::Cholesky
        | OpKind::CholeskyAd
        | OpKind::TriangularSolve
        | OpKind::Linalg => In("quabla-linalg/tests/rules.rs"),
        OpKind::Region => In("quabla-autodiff/tests/bounded_while.rs"),
        OpKind::Custom => In("quabla/tests/custom_rules.rs"),
        OpKind::DebugPrint => In("quabla/tests/debugging.rs"),
        OpKind::IndexGather | OpKind::IndexScatter => In("quabla/tests/indexing.rs"),
    }
}

#[test]
fn every_op_kind_declares_where_its_rules_are_checked() {
    let tables = [
        smooth_unary_cases().into_iter().map(|(_, c)| c).collect(),
        zero_derivative_cases(),
        binary_cases(),
        reduction_cases(),
        layout_cases(),
    ];
    let built: BTreeSet<OpKind> = tables
        .iter()
        .flatten()
        .flat_map(|c| {
            graph(c)
                .nodes()
                .iter()
                .map(|n| n.op.kind())
                .collect::<Vec<_>>()
        })
        .collect();
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for kind in OpKind::ALL {
        match rules_checked(kind) {
            Checked::Here => assert!(
                built.contains(&kind),
                "`{}`: rules_checked says a case of this file checks it, but no case of the \
                 unary, zero-derivative, binary, reduction or layout tables builds one",
                kind.name()
            ),
            Checked::In(file) => assert!(
                workspace.join(file).is_file(),
                "`{}`: rules_checked names {file}, which does not exist",
                kind.name()
            ),
            Checked::Leaf => {}
        }
    }
}

#[test]
fn a_wrong_rule_is_caught() {
    // The checker must fail on a derivative that is wrong: compare sin's JVP with cos's
    // values by checking a graph whose "derivative" is deliberately a different function.
    struct Wrong;
    impl quabla_autodiff::check::Differentiable for Wrong {
        fn eval(&self, x: &[Array]) -> std::result::Result<Vec<Array>, String> {
            Ok(vec![Array::new(
                x[0].shape.clone(),
                x[0].values.iter().map(|v| v.sin()).collect(),
            )])
        }
        fn jvp(
            &self,
            _: usize,
        ) -> std::result::Result<Box<dyn quabla_autodiff::check::Differentiable + '_>, String>
        {
            Ok(Box::new(WrongJvp))
        }
        fn vjp(
            &self,
            _: usize,
        ) -> std::result::Result<Box<dyn quabla_autodiff::check::Differentiable + '_>, String>
        {
            Err("no reverse mode".into())
        }
    }
    struct WrongJvp;
    impl quabla_autodiff::check::Differentiable for WrongJvp {
        fn eval(&self, x: &[Array]) -> std::result::Result<Vec<Array>, String> {
            let (p, t) = (&x[0], &x[1]);
            Ok(vec![
                Array::new(p.shape.clone(), p.values.iter().map(|v| v.sin()).collect()),
                // 1.001 * cos(x) * t: off by 0.1%.
                Array::new(
                    p.shape.clone(),
                    p.values
                        .iter()
                        .zip(&t.values)
                        .map(|(v, d)| 1.001 * v.cos() * d)
                        .collect(),
                ),
            ])
        }
        fn jvp(
            &self,
            _: usize,
        ) -> std::result::Result<Box<dyn quabla_autodiff::check::Differentiable + '_>, String>
        {
            Err("not needed".into())
        }
        fn vjp(
            &self,
            _: usize,
        ) -> std::result::Result<Box<dyn quabla_autodiff::check::Differentiable + '_>, String>
        {
            Err("not needed".into())
        }
    }
    let x = [Array::new(vec![3], vec![0.1, 0.5, 1.0])];
    let err = check_grads(&Wrong, &x, 1, Modes::FORWARD, Tolerance::default(), 1).unwrap_err();
    assert!(err.contains("order 1 forward"), "{err}");
}
