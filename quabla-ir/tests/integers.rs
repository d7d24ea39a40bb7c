//! Integer dtypes in the builder and the type rules: the promotion chain with weak scalars
//! (numerics.md §12), the float-only functions' conversion to float64, and the typed errors
//! of integer-only functions on floats.

use quabla_ir::{
    BinaryOp, Comparison, DType, GraphBuilder, IrError, NodeId, Shape, TensorType, UnaryOp,
};

fn input(b: &mut GraphBuilder, dtype: DType) -> NodeId {
    let name = format!("x{}", b.len());
    b.input(name, TensorType::new(dtype, Shape::new(vec![2]).unwrap()))
}

/// Every pair of strong dtypes under `+`: the join on the chain
/// `bool < int32 < int64 < float32 < float64`, float32 with float64 refused.
#[test]
fn strong_operands_join_on_the_chain() {
    use DType::*;
    let all = [Bool, I32, I64, F32, F64];
    for a in all {
        for c in all {
            let mut b = GraphBuilder::new();
            let (x, y) = (input(&mut b, a), input(&mut b, c));
            let r = b.add(x, y);
            let want = match (a, c) {
                (Bool, Bool) => None,
                (F32, F64) | (F64, F32) => None,
                _ => a.join(c),
            };
            match want {
                Some(d) => {
                    let ty = b.ty(r.unwrap()).clone();
                    assert_eq!((ty.dtype, ty.weak), (d, false), "{a} + {c}");
                }
                None => assert!(r.is_err(), "{a} + {c}"),
            }
        }
    }
}

#[test]
fn weak_scalars_adopt_or_widen() {
    let mut b = GraphBuilder::new();
    let i32s = input(&mut b, DType::I32);
    let f32s = input(&mut b, DType::F32);
    let bools = input(&mut b, DType::Bool);
    let one = b.weak_int(1);
    let half = b.weak_scalar(0.5);
    // A weak int adopts an int32 or float32 array.
    let r = b.add(i32s, one).unwrap();
    assert_eq!(b.ty(r).dtype, DType::I32);
    let r = b.mul(one, f32s).unwrap();
    assert_eq!(b.ty(r).dtype, DType::F32);
    // A weak float meeting an integer array gives float64, strong.
    let r = b.add(i32s, half).unwrap();
    assert_eq!((b.ty(r).dtype, b.ty(r).weak), (DType::F64, false));
    // A bool array with a weak int stays weak, and adopts a later int32 array.
    let w = b.add(bools, one).unwrap();
    assert_eq!((b.ty(w).dtype, b.ty(w).weak), (DType::I64, true));
    let r = b.add(w, i32s).unwrap();
    assert_eq!(b.ty(r).dtype, DType::I32);
    // Two weak values: int meets float gives the float, weak.
    let r = b.add(one, half).unwrap();
    assert_eq!((b.ty(r).dtype, b.ty(r).weak), (DType::F64, true));
}

#[test]
fn float_only_functions_convert_integers_to_float64() {
    let mut b = GraphBuilder::new();
    let n = input(&mut b, DType::I32);
    for r in [
        b.unary(UnaryOp::Sin, n).unwrap(),
        b.div(n, n).unwrap(),
        b.binary(BinaryOp::Atan2, n, n).unwrap(),
        b.mean(n, None, false).unwrap(),
    ] {
        assert_eq!(b.ty(r).dtype, DType::F64);
    }
    // Rounding is the identity on integers; `neg`, powers, sums and maxima stay integer.
    assert_eq!(b.unary(UnaryOp::Floor, n).unwrap(), n);
    for r in [
        b.unary(UnaryOp::Neg, n).unwrap(),
        b.powi(n, 3).unwrap(),
        b.sum(n, None, false).unwrap(),
        b.max(n, None, false).unwrap(),
        b.binary(BinaryOp::FloorDiv, n, n).unwrap(),
        b.binary(BinaryOp::ShiftLeft, n, n).unwrap(),
        b.cumsum(n, 0, false).unwrap(),
    ] {
        assert_eq!(b.ty(r).dtype, DType::I32);
    }
    let c = b.compare(Comparison::Less, n, n).unwrap();
    assert_eq!(b.ty(c).dtype, DType::Bool);
}

#[test]
fn integer_only_functions_refuse_floats_and_bitwise_takes_bools() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, DType::F64);
    let p = input(&mut b, DType::Bool);
    for op in [BinaryOp::FloorDiv, BinaryOp::BitAnd, BinaryOp::ShiftLeft] {
        let err = b.binary(op, x, x).unwrap_err();
        assert!(matches!(
            err,
            IrError::WrongDtypeKind {
                dtype: DType::F64,
                ..
            }
        ));
        assert!(err.to_string().contains("astype(quabla.int64)"), "{err}");
    }
    let r = b.binary(BinaryOp::BitXor, p, p).unwrap();
    assert_eq!(b.ty(r).dtype, DType::Bool);
    let r = b.unary(UnaryOp::BitNot, p).unwrap();
    assert_eq!(b.ty(r).dtype, DType::Bool);
    assert!(matches!(
        b.unary(UnaryOp::BitNot, x).unwrap_err(),
        IrError::WrongDtypeKind { .. }
    ));
}
