//! Every error the checked builder raises, triggered and its message checked against
//! `spec/errors.md`.

use quabla_ir::{
    Comparison, DType, GraphBuilder, HostData, IrError, NodeId, Op, Shape, TensorType, UnaryOp,
};

fn input(b: &mut GraphBuilder, name: &str, dtype: DType, dims: &[usize]) -> NodeId {
    b.input(
        name,
        TensorType::new(dtype, Shape::new(dims.to_vec()).unwrap()),
    )
}

#[test]
fn dt1_float32_and_float64_never_mix() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F64, &[2]);
    let y = input(&mut b, "y", DType::F32, &[2]);
    let err = b.add(x, y).unwrap_err();
    assert!(matches!(
        err,
        IrError::DtypeMismatch {
            lhs: DType::F64,
            rhs: DType::F32,
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        "tensor + operands have mismatched dtypes f64 and f32; float32 and float64 never mix implicitly, convert one side with astype"
    );
    let t = b_true(&mut b);
    let err = b.select(t, x, y).unwrap_err();
    assert!(err
        .to_string()
        .starts_with("tensor where operands have mismatched dtypes f64 and f32"));
    assert!(b.matmul(x, y).unwrap_err().to_string().contains("astype"));
    assert!(b
        .concat(&[x, y], 0)
        .unwrap_err()
        .to_string()
        .contains("mismatched dtypes"));
}

fn b_true(b: &mut GraphBuilder) -> NodeId {
    b.constant(HostData::Bool([true].into()), Shape::scalar(), false)
        .unwrap()
}

#[test]
fn dt2_bool_arithmetic_and_ordering() {
    let mut b = GraphBuilder::new();
    let m = input(&mut b, "m", DType::Bool, &[2]);
    let n = input(&mut b, "n", DType::Bool, &[2]);
    let err = b.mul(m, n).unwrap_err();
    assert_eq!(
        err.to_string(),
        "* is not defined for bool tensors; convert with astype(quabla.float64) or astype(quabla.float32) first"
    );
    let x = input(&mut b, "x", DType::F64, &[2]);
    let err = b.compare(Comparison::Less, m, x).unwrap_err();
    assert!(matches!(err, IrError::BoolOperand { .. }));
    assert!(err
        .to_string()
        .starts_with("less is not defined for bool tensors"));
    assert!(b
        .unary(UnaryOp::Sin, m)
        .unwrap_err()
        .to_string()
        .starts_with("sin is not defined for bool tensors"));
    assert!(b
        .sum(m, None, false)
        .unwrap_err()
        .to_string()
        .starts_with("sum is not defined for bool tensors"));
    // equality between bools is fine, and bool meets float as 0/1
    assert!(b.compare(Comparison::Equal, m, n).is_ok());
    let mx = b.mul(m, x).unwrap();
    assert_eq!(b.ty(mx).dtype, DType::F64);
}

#[test]
fn dt3_where_requires_bool_predicate() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F64, &[2]);
    let err = b.select(x, x, x).unwrap_err();
    assert!(matches!(err, IrError::RequiresBool { .. }));
    assert!(err.to_string().contains("requires bool operands"));
}

#[test]
fn sh1_sh2_axes() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F64, &[2, 3]);
    assert_eq!(
        b.sum(x, Some(&[2]), false).unwrap_err().to_string(),
        "axis 2 is out of range for a tensor of rank 2"
    );
    assert_eq!(
        b.cumsum(x, -3, false).unwrap_err().to_string(),
        "axis -3 is out of range for a tensor of rank 2"
    );
    let err = b.max(x, Some(&[1, -1]), false).unwrap_err();
    assert_eq!(err.to_string(), "repeated axis in max: [1, -1]");
}

#[test]
fn sh4_broadcast() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F64, &[2, 3]);
    let y = input(&mut b, "y", DType::F64, &[4]);
    assert_eq!(
        b.sub(x, y).unwrap_err().to_string(),
        "operands could not be broadcast together with shapes [2, 3] and [4]"
    );
    assert!(b
        .broadcast_to(x, Shape::new(vec![3, 3]).unwrap())
        .unwrap_err()
        .to_string()
        .contains("could not be broadcast"));
}

#[test]
fn sh5_reshape() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F64, &[2, 3]);
    assert_eq!(
        b.reshape(x, &[4, -1]).unwrap_err().to_string(),
        "cannot reshape a tensor of 6 elements into shape [4, -1]"
    );
    assert!(b
        .reshape(x, &[-1, -1])
        .unwrap_err()
        .to_string()
        .contains("cannot reshape"));
    let r = b.reshape(x, &[3, -1]).unwrap();
    assert_eq!(b.ty(r).shape.dims(), &[3, 2]);
}

#[test]
fn sh6_zero_extents() {
    assert!(Shape::new(vec![3, 0])
        .unwrap_err()
        .to_string()
        .contains("empty slices are not supported"));
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F64, &[3]);
    let err = b.slice(x, vec![1], vec![0]).unwrap_err();
    assert!(err.to_string().contains("empty slices are not supported"));
}

#[test]
fn sh7_sh8_sh9_linear_algebra_shapes() {
    let mut b = GraphBuilder::new();
    let a = input(&mut b, "a", DType::F64, &[2, 3]);
    let sq = input(&mut b, "s", DType::F64, &[3, 3]);
    let rhs = input(&mut b, "r", DType::F64, &[2, 1]);
    let err = b.push(Op::Cholesky, &[a]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cholesky expects square matrices of shape [..., n, n], got [2, 3]"
    );
    let err = b
        .push(Op::Solve { transpose_a: false }, &[sq, rhs])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "solve: matrix has 3 rows but the right-hand side has 2"
    );
    let err = b.matmul(a, rhs).unwrap_err();
    assert_eq!(
        err.to_string(),
        "matmul: inner dimensions differ (3 vs 2) for shapes [2, 3] and [2, 1]"
    );
    let v = input(&mut b, "v", DType::F64, &[2]);
    let err = b.matmul(a, v).unwrap_err();
    assert_eq!(
        err.to_string(),
        "matmul: inner dimensions differ (3 vs 2) for shapes [2, 3] and [2]"
    );
}

#[test]
fn sh11_concat_shapes() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F64, &[2, 3]);
    let y = input(&mut b, "y", DType::F64, &[2, 4]);
    let err = b.concat(&[x, y], 0).unwrap_err();
    assert_eq!(
        err.to_string(),
        "concat: shapes differ along non-concatenated axes: [2, 3] and [2, 4]"
    );
    let c = b.concat(&[x, y], 1).unwrap();
    assert_eq!(b.ty(c).shape.dims(), &[2, 7]);
}

#[test]
fn ix1_indices_out_of_range() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F64, &[2, 3]);
    let err = b.gather(x, &[0, 3], 1).unwrap_err();
    assert!(matches!(err, IrError::Index { .. }));
    assert_eq!(
        err.to_string(),
        "index 3 is out of range for axis 1 with extent 3"
    );
    assert!(b
        .gather(x, &[-3], 0)
        .unwrap_err()
        .to_string()
        .contains("index -3 is out of range"));
    let err = b.slice(x, vec![1, 1], vec![2, 1]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "index 2 is out of range for axis 0 with extent 2"
    );
    let u = input(&mut b, "u", DType::F64, &[2, 1]);
    assert!(b
        .scatter_add(x, &[5], u, 1)
        .unwrap_err()
        .to_string()
        .contains("out of range"));
}

#[test]
fn weak_scalars_adopt_and_bool_weak_stays_weak() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F32, &[2]);
    let m = input(&mut b, "m", DType::Bool, &[2]);
    let half = b.weak_scalar(0.5);
    let y = b.mul(half, x).unwrap();
    assert_eq!(b.ty(y).dtype, DType::F32);
    assert!(!b.ty(y).weak);
    // mask * 2.0 is weak float64 and adopts a later float32 operand (numerics.md §2.1 rule 4)
    let two = b.weak_scalar(2.0);
    let w = b.mul(m, two).unwrap();
    assert_eq!((b.ty(w).dtype, b.ty(w).weak), (DType::F64, true));
    let z = b.add(w, x).unwrap();
    assert_eq!((b.ty(z).dtype, b.ty(z).weak), (DType::F32, false));
    // comparisons give strong bool
    let c = b.compare(Comparison::Greater, x, half).unwrap();
    assert_eq!((b.ty(c).dtype, b.ty(c).weak), (DType::Bool, false));
    // astype to the current dtype is the identity
    assert_eq!(b.astype(x, DType::F32).unwrap(), x);
}

#[test]
fn verify_errors_for_broken_graphs() {
    use quabla_ir::{Graph, Node};
    let ty = TensorType::new(DType::F64, Shape::scalar());
    let nodes = vec![Node {
        op: Op::Unary(UnaryOp::Sin),
        operands: vec![NodeId(0)],
        ty: ty.clone(),
        remat: 0,
        origin: Default::default(),
    }];
    let err = Graph::from_parts(nodes, vec![NodeId(0)]).unwrap_err();
    assert!(err.to_string().contains("not an earlier node"), "{err}");
    let nodes = vec![Node {
        op: Op::Input {
            name: "x".into(),
            ty: ty.clone(),
        },
        operands: vec![],
        ty: TensorType::new(DType::F32, Shape::scalar()),
        remat: 0,
        origin: Default::default(),
    }];
    let err = Graph::from_parts(nodes, vec![]).unwrap_err();
    assert!(err.to_string().contains("its rule infers"), "{err}");
}

#[test]
fn parse_errors_name_the_line() {
    use quabla_ir::text::parse_graph;
    let err = parse_graph(
        "%0 = input[name=x] : tensor<2xf64>\n%1 = frobnicate(%0) : tensor<2xf64>\noutputs: [%1]\n",
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "IR text line 2: unknown op frobnicate");
    let err = parse_graph(
        "%0 = input[name=x] : tensor<2xf64>\n%1 = sin(%5) : tensor<2xf64>\noutputs: [%1]\n",
    )
    .unwrap_err();
    assert!(err.to_string().contains("%5 is used before it is defined"));
    let err = parse_graph(
        "%0 = input[name=x] : tensor<2xf64>\n%1 = sum(%0) : tensor<2xf64>\noutputs: [%1]\n",
    )
    .unwrap_err();
    assert!(err
        .to_string()
        .contains("declared type tensor<2xf64> but the op infers tensor<f64>"));
    let err = parse_graph("%0 = input[name=x] : tensor<2xf64>\n").unwrap_err();
    assert!(err.to_string().contains("missing outputs line"));
    let err = parse_graph(
        "%0 = input[name=x] : tensor<2xf64>\n%1 = add(%0, %0) : tensor<2xf64>\noutputs: [[3]]\n",
    )
    .unwrap_err();
    assert!(err.to_string().contains("name the outputs"));
}
