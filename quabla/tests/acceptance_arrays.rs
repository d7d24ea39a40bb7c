//! The examples of `spec/acceptance.md` §1 (arrays, dtypes, indexing, printing) and the
//! eager value examples of §2, through the Rust facade.

use qb::prelude::*;
use qb::{s, Error, Tensor};
use quabla as qb;

fn x23() -> Tensor {
    qb::array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

#[test]
fn e1_elementwise_chain() -> qb::Result<()> {
    let x = qb::array([0.0, 0.5, 1.0])?;
    let y = qb::sum(qb::sin(&x).powi(2))?;
    assert_eq!(y.to_string(), "Tensor(0.93792227, dtype=float64)");
    assert!((y.item()? - 0.9379222653395013).abs() <= 1e-12 * 0.9379222653395013);
    Ok(())
}

#[test]
fn e2_shape_rank_dtype() -> qb::Result<()> {
    let x = x23();
    assert_eq!(
        format!("{:?} {} {}", x.shape(), x.ndim(), x.dtype()),
        "[2, 3] 2 f64"
    );
    assert_eq!(
        qb::F32.array([1, 2, 3])?.to_string(),
        "Tensor([1., 2., 3.], dtype=float32)"
    );
    Ok(())
}

#[test]
fn e3_strict_promotion_and_weak_scalars() -> qb::Result<()> {
    let a = qb::array([1.0, 2.0, 3.0])?;
    let r = qb::F32.array([1.0, 2.0, 3.0])?;
    let err = (&a + &r).unwrap_err();
    assert!(matches!(err, Error::DtypeMismatch { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("mismatched dtypes f64 and f32") && msg.contains("astype"),
        "{msg}"
    );
    assert_eq!(
        ((&r * 2.0)?.dtype(), (0.5 * &r)?.dtype()),
        (qb::F32, qb::F32)
    );
    let m = r.greater(1.0)?;
    assert_eq!((&m * 2.0 + &r)?.dtype(), qb::F32);
    assert_eq!((&a * a.greater(1.0)?)?.dtype(), qb::F64);
    let err = (&m + &m).unwrap_err();
    assert!(matches!(err, Error::BoolOperand { .. }));
    assert!(err.to_string().contains("astype"));
    Ok(())
}

#[test]
fn e4_masks() -> qb::Result<()> {
    let x = qb::array([1.0, 2.0, 3.0])?;
    let m = (x.greater(1.0)? & x.less(3.0)?)?;
    assert_eq!(m.to_string(), "Tensor([False,  True, False], dtype=bool)");
    assert_eq!(
        (!&m)?.to_string(),
        "Tensor([ True, False,  True], dtype=bool)"
    );
    assert_eq!(qb::any(&m)?.to_string(), "Tensor( True, dtype=bool)");
    assert_eq!(qb::all(&m)?.to_string(), "Tensor(False, dtype=bool)");
    Ok(())
}

#[test]
fn e5_selection_versus_masking() -> qb::Result<()> {
    let x = qb::array([1.0, 2.0, 3.0])?;
    let m = (x.greater(1.0)? & x.less(3.0)?)?;
    let w = qb::where_(&m, &x, 0.0)?;
    let xm = (&x * &m)?;
    for t in [&w, &xm] {
        assert_eq!(t.dtype(), qb::F64);
        assert_eq!(values(t), vec![0.0, 2.0, 0.0]);
    }
    let y = qb::array([1.0, f64::NAN])?;
    assert_eq!(values(&qb::where_(y.isfinite()?, &y, 0.0)?), vec![1.0, 0.0]);
    let masked = values(&(&y * qb::array([true, false])?)?);
    assert_eq!(masked[0], 1.0);
    assert!(masked[1].is_nan(), "0 * NaN is NaN");
    Ok(())
}

#[test]
fn e6_basic_indexing() -> qb::Result<()> {
    let x = x23();
    assert_eq!(x.index(s![1, -1])?.to_string(), "Tensor(6., dtype=float64)");
    assert_eq!(values(&x.index(s![..;-1, 0])?), vec![4.0, 1.0]);
    assert_eq!(x.index(s![qb::NEW])?.shape(), &[1, 2, 3]);
    assert_eq!(x.t()?.shape(), &[3, 2]);
    let rev = x.index(s![qb::ELLIPSIS, ..;-1])?;
    assert_eq!(rev.shape(), &[2, 3]);
    assert_eq!(values(&rev), vec![3.0, 2.0, 1.0, 6.0, 5.0, 4.0]);
    assert!(matches!(
        x.index(s![0, 5]).unwrap_err(),
        Error::Index { .. }
    ));
    let err = x.index(s![1..1]).unwrap_err();
    assert!(matches!(err, Error::Shape { .. }));
    assert!(err.to_string().contains("empty slices are not supported"));
    Ok(())
}

#[test]
fn e7_gather() -> qb::Result<()> {
    let g = x23().gather([2, 0], 1)?;
    assert_eq!(g.shape(), &[2, 2]);
    assert_eq!(values(&g), vec![3.0, 1.0, 6.0, 4.0]);
    Ok(())
}

#[test]
fn e8_scatter_add_accumulates_in_index_order() -> qb::Result<()> {
    let r = qb::zeros([3])?.scatter_add([0, 2, 0], qb::array([1.0, 2.0, 3.0])?, 0)?;
    assert_eq!(values(&r), vec![4.0, 0.0, 2.0]);
    Ok(())
}

#[test]
fn e9_reductions() -> qb::Result<()> {
    let x = x23();
    assert_eq!(values(&x.sum_axes(0)?), vec![5.0, 7.0, 9.0]);
    assert_eq!(x.mean()?.item()?, 3.5);
    let m = x.max_keepdims(1)?;
    assert_eq!(m.shape(), &[2, 1]);
    assert_eq!(values(&m), vec![3.0, 6.0]);
    Ok(())
}

#[test]
fn e11_ieee_results_no_exceptions() -> qb::Result<()> {
    assert!(qb::arcsin(qb::array(2.0)?)?.item()?.is_nan());
    assert_eq!(qb::log10(qb::array(0.0)?)?.item()?, f64::NEG_INFINITY);
    assert_eq!(qb::log1p(qb::array(-1.0)?)?.item()?, f64::NEG_INFINITY);
    assert!(qb::sqrt(qb::array(-1.0)?)?.item()?.is_nan());
    Ok(())
}

#[test]
fn e13_printing() -> qb::Result<()> {
    assert_eq!(
        x23().to_string(),
        "Tensor([[1., 2., 3.],\n        [4., 5., 6.]], dtype=float64)"
    );
    assert_eq!(
        qb::array(6.49246356e-14)?.to_string(),
        "Tensor(6.49246356e-14, dtype=float64)"
    );
    assert_eq!(qb::array(true)?.to_string(), "Tensor( True, dtype=bool)");
    Ok(())
}

#[test]
fn e14_constructors() -> qb::Result<()> {
    assert_eq!(values(&qb::arange(5.0)?), vec![0.0, 1.0, 2.0, 3.0, 4.0]);
    assert_eq!(
        values(&qb::arange_from(1.0, 2.0, 0.25)?),
        vec![1.0, 1.25, 1.5, 1.75]
    );
    assert_eq!(
        values(&qb::linspace(0.0, 1.0, 5)?),
        vec![0.0, 0.25, 0.5, 0.75, 1.0]
    );
    let e = qb::eye_rect(2, 3)?;
    assert_eq!(e.shape(), &[2, 3]);
    assert_eq!(values(&e), vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    assert_eq!(qb::full([2], true)?.dtype(), qb::BOOL);
    assert!(matches!(qb::zeros([0]).unwrap_err(), Error::Shape { .. }));
    Ok(())
}

#[test]
fn e27_signed_zero_survives_indexing() -> qb::Result<()> {
    let g = values(&qb::array([-0.0, 1.0])?.gather([0, 0], 0)?);
    assert!(g.iter().all(|v| *v == 0.0 && v.is_sign_negative()));
    let s = values(&qb::zeros([2])?.scatter_add([1], qb::array([-0.0])?, 0)?);
    assert!(s.iter().all(|v| *v == 0.0 && v.is_sign_positive()));
    Ok(())
}

#[test]
fn e26_rounding_and_fmod_values() -> qb::Result<()> {
    assert_eq!(qb::fmod(qb::array(-7.0)?, 3.0)?.item()?, -1.0);
    let r = values(&qb::round(qb::array([0.5, 1.5, 2.5, -0.5])?)?);
    assert_eq!(r, vec![0.0, 2.0, 2.0, -0.0]);
    assert!(r[3].is_sign_negative());
    Ok(())
}
