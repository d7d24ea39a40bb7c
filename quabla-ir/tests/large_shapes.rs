//! Shapes too large for the machine are refused wherever a shape is made, with a typed error
//! and without a panic or a wrapped element count: the constructor, broadcasting, reshape,
//! concat, slicing, stacked region outputs and the text parser.

use quabla_ir::text::parse_graph;
use quabla_ir::{
    DType, Graph, GraphBuilder, IrError, NodeId, Op, Region, RegionForm, RegionKind, ScanBody,
    Shape, TensorType,
};
use std::sync::Arc;

fn input(b: &mut GraphBuilder, dims: &[usize]) -> NodeId {
    b.input(
        "x",
        TensorType::new(DType::F64, Shape::new(dims.to_vec()).unwrap()),
    )
}

fn too_large(err: &IrError) -> bool {
    matches!(err, IrError::Shape { .. })
        && err
            .to_string()
            .contains("more than this machine can address")
}

#[test]
fn the_constructor_refuses_counts_that_would_wrap() {
    for dims in [
        vec![1 << 32, 1 << 32],
        vec![1 << 40, 1 << 40],
        vec![usize::MAX],
        vec![1 << 61],
        vec![3, 1 << 62],
    ] {
        let err = Shape::new(dims.clone()).unwrap_err();
        assert!(too_large(&err), "{dims:?}: {err}");
    }
    assert_eq!(
        Shape::new(vec![1 << 20, 1 << 20, 1 << 20])
            .unwrap_err()
            .to_string(),
        "shape [1048576, 1048576, 1048576] has 1152921504606846976 elements, more than this \
         machine can address"
    );
    // Large shapes that fit are fine: a shape holds no memory.
    assert_eq!(Shape::new(vec![1 << 30, 1 << 29]).unwrap().size(), 1 << 59);
}

#[test]
fn broadcasting_to_a_shape_too_large_is_refused() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, &[1 << 32, 1]);
    let y = b.input(
        "y",
        TensorType::new(DType::F64, Shape::new(vec![1 << 32]).unwrap()),
    );
    let err = b.add(x, y).unwrap_err();
    assert!(too_large(&err), "{err}");
}

#[test]
fn reshape_with_extents_that_multiply_past_usize_is_sh5() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, &[4]);
    let huge = 1isize << 40;
    for dims in [vec![huge, huge], vec![-1, huge, huge], vec![isize::MAX, 2]] {
        let err = b.reshape(x, &dims).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot reshape a tensor of 4 elements into shape"),
            "{err}"
        );
    }
    assert!(b.reshape(x, &[2, -1]).is_ok());
}

#[test]
fn concat_whose_extent_would_overflow_is_refused() {
    let mut b = GraphBuilder::new();
    let big = 1usize << 59;
    let x = input(&mut b, &[big]);
    // Two operands: the sum fits a usize but not the machine.
    let err = b.concat(&[x, x], 0).unwrap_err();
    assert!(too_large(&err), "{err}");
    // Many operands: the sum itself passes usize.
    let many = vec![x; 40];
    let err = b.concat(&many, 0).unwrap_err();
    assert!(
        err.to_string()
            .contains("more elements than this machine can address"),
        "{err}"
    );
}

#[test]
fn slice_starts_that_overflow_are_out_of_range() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, &[8]);
    let err = b.slice(x, vec![usize::MAX], vec![2]).unwrap_err();
    assert!(matches!(err, IrError::Index { .. }));
    assert_eq!(
        err.to_string(),
        "index 18446744073709551616 is out of range for axis 0 with extent 8"
    );
    let err = b
        .push(
            Op::PadSlice {
                starts: vec![usize::MAX],
                shape: Shape::new(vec![8]).unwrap(),
            },
            &[x],
        )
        .unwrap_err();
    assert!(matches!(err, IrError::Index { .. }), "{err}");
}

fn scan_body() -> Graph {
    let mut b = GraphBuilder::new();
    b.input("i", TensorType::new(DType::F64, Shape::scalar()));
    let c = b.input("c", TensorType::new(DType::F64, Shape::scalar()));
    b.finish(vec![c, c]).unwrap()
}

#[test]
fn stacked_outputs_too_large_and_index_overflow_are_refused() {
    let scan = |length, start| {
        Region::new(
            RegionKind::Scan(ScanBody {
                length,
                start,
                reverse: false,
                n_carry: 1,
                n_const: 0,
                n_xs: 0,
                body: Arc::new(scan_body()),
            }),
            RegionForm::Scan,
            0,
        )
    };
    assert!(scan(1 << 40, 0).is_ok());
    let err = scan(usize::MAX, 0).unwrap_err();
    assert!(too_large(&err), "{err}");
    let err = scan(4, usize::MAX - 1).unwrap_err();
    assert!(
        err.to_string().contains("overflows the index range"),
        "{err}"
    );
    let err = Region::new(
        RegionKind::Scan(ScanBody {
            length: 2,
            start: 0,
            reverse: false,
            n_carry: usize::MAX,
            n_const: 2,
            n_xs: 0,
            body: Arc::new(scan_body()),
        }),
        RegionForm::Scan,
        0,
    )
    .unwrap_err();
    assert!(matches!(err, IrError::Verify { .. }), "{err}");
}

#[test]
fn the_text_parser_refuses_shapes_too_large() {
    let err =
        parse_graph("%0 = input[name=x] : tensor<4294967296x4294967296xf64>\noutputs: [%0]\n")
            .unwrap_err();
    assert_eq!(
        err.to_string(),
        "IR text line 1: shape [4294967296, 4294967296] has 18446744073709551616 elements, \
         more than this machine can address"
    );
    let err = parse_graph(
        "%0 = input[name=x] : tensor<2xf64>\n\
         %1 = broadcast(%0, shape=[4294967296, 4294967296, 2]) : tensor<4294967296x4294967296x2xf64>\n\
         outputs: [%1]\n",
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("more than this machine can address"),
        "{err}"
    );
}
