//! The errors of `batch_graph` and `batch_size`: each kind, and the exact messages users see.

mod common;

use common::*;
use quabla_ir::{CustomCall, CustomRule, DType, Graph, GraphBuilder, IrError, Op, UnaryOp};
use quabla_vmap::{batch_graph, batch_size};
use std::sync::Arc;

/// `(sin(x), cos(c))` with `x: [2, 3]` and `c: [3]`.
fn two_outputs() -> Graph {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F64, &[2, 3]);
    let c = input(&mut b, "c", DType::F64, &[3]);
    let y = b.unary(UnaryOp::Sin, x).unwrap();
    let d = b.unary(UnaryOp::Cos, c).unwrap();
    b.finish(vec![y, d]).unwrap()
}

#[test]
fn out_axes_none_on_a_mapped_result() {
    let g = two_outputs();
    let err = batch_graph(&g, &[Some(0), None], 3, &[None, None]).unwrap_err();
    assert!(matches!(err, IrError::InvalidArgument { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "vmap out_axes=None requires an unmapped result, but output 0 depends on a mapped input"
    );
    // The second output depends on a mapped input only when `c` is mapped.
    assert!(batch_graph(&g, &[Some(0), None], 3, &[Some(0), None]).is_ok());
    let err = batch_graph(&g, &[Some(0), Some(0)], 3, &[Some(0), None]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "vmap out_axes=None requires an unmapped result, but output 1 depends on a mapped input"
    );
}

#[test]
fn axes_out_of_range_name_the_input_or_output() {
    let g = two_outputs();
    let err = batch_graph(&g, &[Some(3), None], 3, &[Some(0), None]).unwrap_err();
    assert!(matches!(err, IrError::Shape { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "vmap in_axes: axis 3 of input x is out of range for a batched tensor of rank 3"
    );
    let err = batch_graph(&g, &[Some(2), None], 3, &[Some(0), Some(2)]).unwrap_err();
    assert!(matches!(err, IrError::Shape { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "vmap out_axes: axis 2 of output 1 is out of range for a batched tensor of rank 2"
    );
}

#[test]
fn axis_lists_must_match_the_graph() {
    let g = two_outputs();
    let err = batch_graph(&g, &[Some(0)], 3, &[Some(0), None]).unwrap_err();
    assert!(matches!(err, IrError::InvalidArgument { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "vmap in_axes has 1 entries for a function of 2 inputs"
    );
    let err = batch_graph(&g, &[Some(0), None], 3, &[Some(0)]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "vmap out_axes has 1 entries for a function of 2 outputs"
    );
}

#[test]
fn an_empty_batch_is_rejected() {
    let err = batch_graph(&two_outputs(), &[Some(0), None], 0, &[Some(0), None]).unwrap_err();
    assert!(matches!(err, IrError::Shape { .. }), "{err:?}");
    assert!(err.to_string().contains("empty slices are not supported"));
}

#[test]
fn batch_size_checks_the_mapped_extents() {
    let (x, y, s) = (shape(&[3, 4]), shape(&[4, 3]), shape(&[]));
    let inputs = [("x", &x), ("y", &y), ("s", &s)];
    assert_eq!(batch_size(&inputs, &[Some(0), Some(1), None]).unwrap(), 3);
    assert_eq!(batch_size(&inputs, &[Some(1), Some(0), None]).unwrap(), 4);

    let err = batch_size(&inputs, &[Some(0), Some(0), None]).unwrap_err();
    assert!(matches!(err, IrError::Shape { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "vmap got inconsistent sizes for mapped axes: x (axis 0): 3, y (axis 0): 4"
    );

    let err = batch_size(&inputs, &[Some(0), None, Some(0)]).unwrap_err();
    assert!(matches!(err, IrError::Shape { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "vmap in_axes: axis 0 of input s is out of range for a tensor of rank 0"
    );

    let err = batch_size(&inputs, &[None, None, None]).unwrap_err();
    assert!(matches!(err, IrError::InvalidArgument { .. }), "{err:?}");
    assert_eq!(err.to_string(), "vmap needs at least one mapped argument");

    let err = batch_size(&inputs, &[None]).unwrap_err();
    assert!(matches!(err, IrError::InvalidArgument { .. }), "{err:?}");
}

/// A graph calling the custom rule `twice(v) = 2 v` on `x: [3]`, next to `y: [3]`.
fn custom_graph() -> Graph {
    let mut p = GraphBuilder::new();
    let v = input(&mut p, "v", DType::F64, &[3]);
    let two = p.weak_scalar(2.0);
    let out = p.mul(v, two).unwrap();
    let rule = Arc::new(CustomRule {
        name: "twice".into(),
        primal: Arc::new(p.finish(vec![out]).unwrap()),
        fwd: None,
        bwd: None,
        jvp: None,
        rematerialize: false,
    });
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F64, &[3]);
    let y = input(&mut b, "y", DType::F64, &[3]);
    let c = b
        .push(Op::Custom(CustomCall { rule, output: 0 }), &[x])
        .unwrap();
    let r = b.add(c, y).unwrap();
    b.finish(vec![r]).unwrap()
}

#[test]
fn custom_rules_with_a_mapped_operand_batch_their_rule_graphs() {
    let g = custom_graph();
    let bg = batch_graph(&g, &[Some(0), None], 2, &[Some(0)]).unwrap();
    let custom = nodes_named(&bg, "custom");
    assert_eq!(custom.len(), 1);
    assert_eq!(custom[0].ty.shape, shape(&[2, 3]));
    match &custom[0].op {
        Op::Custom(call) => {
            let p = &call.rule.primal;
            assert_eq!(p.inputs().next().unwrap().2.shape, shape(&[2, 3]));
        }
        other => panic!("expected a custom node, got {other:?}"),
    }
    assert_eq!(bg.node(bg.outputs()[0]).ty.shape, shape(&[2, 3]));
}

#[test]
fn custom_rules_of_unmapped_operands_are_kept_unbatched() {
    let g = custom_graph();
    let bg = batch_graph(&g, &[None, Some(0)], 2, &[Some(1)]).unwrap();
    let custom = nodes_named(&bg, "custom");
    assert_eq!(custom.len(), 1);
    assert_eq!(custom[0].ty.shape, shape(&[3]));
    assert_eq!(bg.node(bg.outputs()[0]).ty.shape, shape(&[3, 2]));
    // The plan passes inline the rule, so the batched graph runs like a loop.
    let mut rng = Rng::new(5);
    let args: Vec<_> = bg
        .inputs()
        .map(|(_, _, ty)| random_tensor(&mut rng, ty, Domain::Uniform(-1.0, 1.0)))
        .collect();
    let got = run_compiled(&bg, &args);
    let parts: Vec<_> = (0..2)
        .map(|i| run_compiled(&g, &[args[0].clone(), take(&args[1], 0, i)]).remove(0))
        .collect();
    assert!(same_values(&got[0], &stack(&parts, 1)));
}
