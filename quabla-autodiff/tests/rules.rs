//! The derivative rules of every op family, checked with `check_grads`: forward and reverse
//! mode against central differences in float64, to third order (every composition of the two
//! modes), at points away from each op's singular points. The reference interpreter runs the
//! graphs; `matmul`, which it has no folding rule for, runs on the CPU backend.

use quabla_autodiff::check::{check_grads, Array, GraphFunction, Modes, Tolerance};
use quabla_ir::eval::HostValue;
use quabla_ir::interp::Interpreter;
use quabla_ir::{
    BinaryOp, Comparison, DType, Graph, GraphBuilder, HostData, Node, NodeId, Plan, Result, Shape,
    TensorType, UnaryOp,
};
use quabla_random::testing::TestRng;

type Build = fn(&mut GraphBuilder, &[NodeId]) -> Result<NodeId>;

/// One case: a graph of float64 inputs of the given shapes, with inputs drawn from `domain`.
struct Case {
    name: &'static str,
    shapes: Vec<Vec<usize>>,
    domain: (f64, f64),
    build: Build,
    order: usize,
}

fn case(name: &'static str, shapes: &[&[usize]], domain: (f64, f64), build: Build) -> Case {
    Case {
        name,
        shapes: shapes.iter().map(|s| s.to_vec()).collect(),
        domain,
        build,
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

fn unary(op: UnaryOp) -> Build {
    // A table of fn pointers cannot capture `op`; dispatch through the op's code instead.
    macro_rules! unary_builds {
        ($($v:ident),*) => {
            match op {
                $(UnaryOp::$v => |b, x| b.unary(UnaryOp::$v, x[0]),)*
                _ => unreachable!("piecewise-constant functions are checked separately"),
            }
        };
    }
    unary_builds!(
        Neg, Tanh, Exp, Log, Log1p, Expm1, Sqrt, Sin, Cos, Erf, Erfc, Tan, Arcsin, Arccos, Arctan,
        Sinh, Cosh, Arcsinh, Arccosh, Arctanh, Log2, Log10, Cbrt
    )
}

/// A domain inside which the function is smooth and moderate.
fn unary_domain(op: UnaryOp) -> (f64, f64) {
    match op {
        UnaryOp::Log | UnaryOp::Log2 | UnaryOp::Log10 | UnaryOp::Sqrt => (0.5, 2.0),
        UnaryOp::Log1p => (-0.5, 1.5),
        UnaryOp::Arcsin | UnaryOp::Arccos | UnaryOp::Arctanh => (-0.6, 0.6),
        UnaryOp::Arccosh => (1.5, 3.0),
        UnaryOp::Tan => (-1.0, 1.0),
        UnaryOp::Cbrt => (0.5, 2.0),
        _ => (-1.5, 1.5),
    }
}

#[test]
fn smooth_unary_functions_to_third_order() {
    for (i, op) in UnaryOp::ALL.into_iter().enumerate() {
        if matches!(
            op,
            UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::BitNot
        ) {
            continue;
        }
        let c = Case {
            name: op.name(),
            shapes: vec![vec![3]],
            domain: unary_domain(op),
            build: unary(op),
            order: 3,
        };
        check(&c, i as u64);
    }
}

#[test]
fn piecewise_constant_functions_have_zero_derivatives() {
    let cases = [
        case("floor", &[&[3]], (0.1, 0.9), |b, x| {
            b.unary(UnaryOp::Floor, x[0])
        }),
        case("ceil", &[&[3]], (0.1, 0.9), |b, x| {
            b.unary(UnaryOp::Ceil, x[0])
        }),
        case("round", &[&[3]], (0.1, 0.4), |b, x| {
            b.unary(UnaryOp::Round, x[0])
        }),
        case("comparison", &[&[3], &[3]], (-1.0, 1.0), |b, x| {
            let p = b.compare(Comparison::Greater, x[0], x[1])?;
            b.astype(p, DType::F64)
        }),
    ];
    for (i, c) in cases.iter().enumerate() {
        check(c, 100 + i as u64);
    }
}

#[test]
fn binary_functions_to_third_order() {
    let cases = [
        case("add", &[&[2, 3], &[3]], (-1.0, 1.0), |b, x| {
            b.binary(BinaryOp::Add, x[0], x[1])
        }),
        case("sub", &[&[3], &[2, 3]], (-1.0, 1.0), |b, x| {
            b.binary(BinaryOp::Sub, x[0], x[1])
        }),
        case("mul", &[&[2, 3], &[2, 1]], (-1.0, 1.0), |b, x| {
            b.binary(BinaryOp::Mul, x[0], x[1])
        }),
        case("div", &[&[3], &[3]], (0.5, 1.5), |b, x| {
            b.binary(BinaryOp::Div, x[0], x[1])
        }),
        case("pow", &[&[3], &[3]], (0.5, 1.5), |b, x| {
            b.binary(BinaryOp::Pow, x[0], x[1])
        }),
        case("atan2", &[&[3], &[3]], (0.5, 1.5), |b, x| {
            b.binary(BinaryOp::Atan2, x[0], x[1])
        }),
        case("fmod", &[&[3], &[3]], (2.1, 2.9), |b, x| {
            let one = b.scalar(1.0, DType::F64, false);
            let d = b.sub(x[1], one)?;
            b.binary(BinaryOp::Fmod, x[0], d)
        }),
        case("powi", &[&[3]], (-1.5, 1.5), |b, x| b.powi(x[0], 4)),
        case("powi negative", &[&[3]], (0.5, 1.5), |b, x| {
            b.powi(x[0], -3)
        }),
        case("where", &[&[3], &[3], &[3]], (-1.0, 1.0), |b, x| {
            let p = b.compare(Comparison::Greater, x[0], x[1])?;
            let s = b.mul(x[0], x[2])?;
            b.select(p, s, x[1])
        }),
    ];
    for (i, c) in cases.iter().enumerate() {
        check(c, 200 + i as u64);
    }
}

#[test]
fn reductions_and_scans_to_third_order() {
    let cases = [
        case("sum", &[&[2, 3]], (-1.0, 1.0), |b, x| {
            let s = b.unary(UnaryOp::Sin, x[0])?;
            b.sum(s, None, false)
        }),
        case("sum_axis", &[&[2, 3]], (-1.0, 1.0), |b, x| {
            let s = b.mul(x[0], x[0])?;
            b.sum(s, Some(&[1]), false)
        }),
        case("mean", &[&[2, 3]], (-1.0, 1.0), |b, x| {
            let s = b.mul(x[0], x[0])?;
            b.mean(s, None, true)
        }),
        case("mean_axis", &[&[2, 3]], (-1.0, 1.0), |b, x| {
            let s = b.mul(x[0], x[0])?;
            b.mean(s, Some(&[0]), false)
        }),
        case("max_axis", &[&[2, 3]], (-1.0, 1.0), |b, x| {
            let s = b.mul(x[0], x[0])?;
            b.max(s, Some(&[1]), false)
        }),
        case("min_axis", &[&[2, 3]], (-1.0, 1.0), |b, x| {
            let s = b.mul(x[0], x[0])?;
            b.min(s, Some(&[0]), false)
        }),
        case("cumsum", &[&[2, 3]], (-1.0, 1.0), |b, x| {
            let s = b.mul(x[0], x[0])?;
            b.cumsum(s, 1, true)
        }),
    ];
    for (i, c) in cases.iter().enumerate() {
        check(c, 300 + i as u64);
    }
}

#[test]
fn layout_ops_to_third_order() {
    let cases = [
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
    ];
    for (i, c) in cases.iter().enumerate() {
        check(c, 400 + i as u64);
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
