//! Values of every eager op against an independent float64 reference from `std`, bit-exact
//! float32 arithmetic against native `f32`, and the IEEE cases of numerics.md §4.
// Descending slices are written as ranges with a negative step (`8..2;-2`), as in Python.
#![allow(clippy::reversed_empty_ranges)]

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;

type UnaryCase = (
    &'static str,
    fn(&Tensor) -> qb::Result<Tensor>,
    fn(f64) -> f64,
);

fn unary_cases() -> Vec<UnaryCase> {
    vec![
        ("sin", Tensor::sin, f64::sin),
        ("cos", Tensor::cos, f64::cos),
        ("tanh", Tensor::tanh, f64::tanh),
        ("exp", Tensor::exp, f64::exp),
        ("expm1", Tensor::expm1, f64::exp_m1),
        ("log", Tensor::log, f64::ln),
        ("log1p", Tensor::log1p, f64::ln_1p),
        ("sqrt", Tensor::sqrt, f64::sqrt),
        ("tan", Tensor::tan, f64::tan),
        ("arcsin", Tensor::arcsin, f64::asin),
        ("arccos", Tensor::arccos, f64::acos),
        ("arctan", Tensor::arctan, f64::atan),
        ("sinh", Tensor::sinh, f64::sinh),
        ("cosh", Tensor::cosh, f64::cosh),
        ("arcsinh", Tensor::arcsinh, f64::asinh),
        ("arccosh", Tensor::arccosh, f64::acosh),
        ("arctanh", Tensor::arctanh, f64::atanh),
        ("log2", Tensor::log2, f64::log2),
        ("log10", Tensor::log10, f64::log10),
        ("cbrt", Tensor::cbrt, f64::cbrt),
        ("floor", Tensor::floor, f64::floor),
        ("ceil", Tensor::ceil, f64::ceil),
        ("round", Tensor::round, f64::round_ties_even),
        ("abs", Tensor::abs, f64::abs),
        ("square", Tensor::square, |x| x * x),
        ("reciprocal", Tensor::reciprocal, |x| 1.0 / x),
        ("relu", Tensor::relu, |x| {
            if x.is_nan() {
                x
            } else {
                x.max(0.0)
            }
        }),
        ("sigmoid", Tensor::sigmoid, |x| 1.0 / (1.0 + (-x).exp())),
        ("neg", Tensor::neg, |x| -x),
    ]
}

const INPUTS: [f64; 16] = [
    -3.7, -1.0, -0.999, -0.5, -0.0, 0.0, 1e-300, 0.3, 0.5, 0.999, 1.0, 1.5, 2.5, 10.0, 700.0, -20.0,
];

/// Relative agreement with a few-ulp allowance (composites round after each node in f32, so
/// the float32 table allows 4 ulp): the library uses one portable libm, `std` the
/// platform's, and both are faithful to within an ulp or two.
fn close(got: f64, want: f64, rel: f64) -> bool {
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return want == got;
    }
    (got - want).abs() <= rel * want.abs().max(f64::MIN_POSITIVE)
}

#[test]
fn unary_functions_match_std_in_f64() -> qb::Result<()> {
    let x = qb::array(INPUTS)?;
    for (name, f, reference) in unary_cases() {
        let got = f(&x)?.to_vec::<f64>()?;
        for (i, &v) in INPUTS.iter().enumerate() {
            let want = reference(v);
            // sigmoid's reference overflows nowhere here; std's tanh/sinh near 0 are exact.
            assert!(
                close(got[i], want, 5e-14),
                "{name}({v}) = {} want {want}",
                got[i]
            );
        }
    }
    Ok(())
}

#[test]
fn unary_functions_in_f32_are_the_f64_value_rounded() -> qb::Result<()> {
    let x = qb::F32.array(INPUTS)?;
    for (name, f, reference) in unary_cases() {
        let got = f(&x)?;
        assert_eq!(got.dtype(), qb::F32, "{name}");
        let got = got.to_vec::<f32>()?;
        for (i, &v) in INPUTS.iter().enumerate() {
            let want = reference(v as f32 as f64) as f32;
            let ok = (got[i].is_nan() && want.is_nan())
                || got[i] == want
                || (got[i].to_bits() as i64 - want.to_bits() as i64).abs() <= 4;
            assert!(ok, "{name}({v} as f32) = {} want {want}", got[i]);
        }
    }
    Ok(())
}

#[test]
fn float32_arithmetic_is_bit_exact() -> qb::Result<()> {
    let a: Vec<f32> = (0..257)
        .map(|i| ((i as f32) * 0.37 - 40.0).sin() * 1e3 + 0.1)
        .collect();
    let b: Vec<f32> = (0..257)
        .map(|i| ((i as f32) * 1.91 + 3.0).cos() * 7.0 - 0.3)
        .collect();
    let (ta, tb) = (
        Tensor::from_vec([257], a.clone())?,
        Tensor::from_vec([257], b.clone())?,
    );
    let check = |t: Tensor, f: &dyn Fn(f32, f32) -> f32, name: &str| {
        let got = t.to_vec::<f32>().unwrap();
        for i in 0..a.len() {
            assert_eq!(got[i].to_bits(), f(a[i], b[i]).to_bits(), "{name} at {i}");
        }
    };
    check((&ta + &tb)?, &|x, y| x + y, "add");
    check((&ta - &tb)?, &|x, y| x - y, "sub");
    check((&ta * &tb)?, &|x, y| x * y, "mul");
    check((&ta / &tb)?, &|x, y| x / y, "div");
    check(ta.abs()?.sqrt()?, &|x, _| x.abs().sqrt(), "sqrt");
    Ok(())
}

#[test]
fn binary_functions_match_std() -> qb::Result<()> {
    let xs = [-7.0, -2.5, -0.0, 0.0, 0.5, 3.0, f64::INFINITY, f64::NAN];
    let ys = [3.0, -2.0, 0.0, 1.5, -0.5, 2.0, 4.0, 1.0];
    let (x, y) = (qb::array(xs)?, qb::array(ys)?);
    type Case = (&'static str, qb::Result<Tensor>, fn(f64, f64) -> f64);
    let cases: Vec<Case> = vec![
        ("add", &x + &y, |a, b| a + b),
        ("sub", &x - &y, |a, b| a - b),
        ("mul", &x * &y, |a, b| a * b),
        ("div", &x / &y, |a, b| a / b),
        ("pow", x.pow(&y), f64::powf),
        ("atan2", x.atan2(&y), f64::atan2),
        ("fmod", x.fmod(&y), |a, b| a % b),
        ("maximum", x.maximum(&y), |a, b| {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else if a > b {
                a
            } else {
                b
            }
        }),
        ("minimum", x.minimum(&y), |a, b| {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else if a < b {
                a
            } else {
                b
            }
        }),
    ];
    for (name, got, reference) in cases {
        let got = got?.to_vec::<f64>()?;
        for i in 0..xs.len() {
            let want = reference(xs[i], ys[i]);
            assert!(
                close(got[i], want, 4e-15),
                "{name}({}, {}) = {} want {want}",
                xs[i],
                ys[i],
                got[i]
            );
            if want == 0.0 {
                assert_eq!(
                    got[i].is_sign_negative(),
                    want.is_sign_negative(),
                    "{name} sign of zero"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn comparisons_follow_ieee() -> qb::Result<()> {
    let x = qb::array([1.0, f64::NAN, 2.0, -0.0])?;
    let y = qb::array([1.0, f64::NAN, 3.0, 0.0])?;
    let b = |t: qb::Result<Tensor>| t.unwrap().to_vec_bool().unwrap();
    assert_eq!(b(x.equal(&y)), vec![true, false, false, true]);
    assert_eq!(b(x.not_equal(&y)), vec![false, true, true, false]);
    assert_eq!(b(x.less(&y)), vec![false, false, true, false]);
    assert_eq!(b(x.less_equal(&y)), vec![true, false, true, true]);
    assert_eq!(b(x.greater(&y)), vec![false, false, false, false]);
    assert_eq!(b(x.greater_equal(&y)), vec![true, false, false, true]);
    assert_eq!(b(x.isnan()), vec![false, true, false, false]);
    let inf = qb::array([f64::INFINITY, -1.0, f64::NAN])?;
    assert_eq!(b(inf.isfinite()), vec![false, true, false]);
    Ok(())
}

#[test]
fn division_by_zero_and_logs_are_ieee() -> qb::Result<()> {
    let r = (qb::array([1.0, -1.0, 0.0])? / 0.0)?.to_vec::<f64>()?;
    assert_eq!(r[0], f64::INFINITY);
    assert_eq!(r[1], f64::NEG_INFINITY);
    assert!(r[2].is_nan());
    let l = qb::array([0.0, -1.0])?.log()?.to_vec::<f64>()?;
    assert_eq!(l[0], f64::NEG_INFINITY);
    assert!(l[1].is_nan());
    Ok(())
}

#[test]
fn reductions_follow_the_blocked_order_and_nan_propagates() -> qb::Result<()> {
    let data: Vec<f64> = (0..24).map(|i| ((i * 7 % 11) as f64) * 0.1 - 0.4).collect();
    let x = Tensor::from_vec([2, 3, 4], data.clone())?;
    let at = |i: usize, j: usize, k: usize| data[i * 12 + j * 4 + k];
    // Eight or fewer elements: one block whose element k sits alone in accumulator k, so the
    // sum is ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) (numerics.md §1.5).
    let s = x.sum_axes([0, 2])?.to_vec::<f64>()?;
    for (j, &got) in s.iter().enumerate() {
        let a: Vec<f64> = (0..2)
            .flat_map(|i| (0..4).map(move |k| (i, k)))
            .map(|(i, k)| at(i, j, k))
            .collect();
        let want = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        assert_eq!(got, want);
    }
    // 24 elements: accumulator k adds elements k, k + 8, k + 16 in order.
    let lanes: Vec<f64> = (0..8)
        .map(|k| ((0.0 + data[k]) + data[k + 8]) + data[k + 16])
        .collect();
    let total = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))
        + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    assert_eq!(x.sum()?.item()?, total);
    assert_eq!(x.mean()?.item()?, total / 24.0);
    assert_eq!(
        x.max()?.item()?,
        data.iter().cloned().fold(f64::MIN, f64::max)
    );
    assert_eq!(x.min_axes(-1)?.shape(), &[2, 3]);
    assert_eq!(x.sum_keepdims([1])?.shape(), &[2, 1, 4]);
    let n = qb::array([1.0, f64::NAN, 3.0])?;
    assert!(n.max()?.item()?.is_nan());
    assert!(n.min()?.item()?.is_nan());
    assert!(n.sum()?.item()?.is_nan());
    Ok(())
}

#[test]
fn prod_is_the_pairwise_tree() -> qb::Result<()> {
    // ((a*b)*(c*d))*e for five elements.
    let v = [1.1, 2.3, 0.7, 5.9, 1.3];
    let want = ((v[0] * v[1]) * (v[2] * v[3])) * v[4];
    assert_eq!(qb::array(v)?.prod()?.item()?, want);
    let m = qb::array([[2.0, 3.0, 4.0], [1.0, 0.5, -2.0]])?;
    assert_eq!(m.prod_axes(1)?.to_vec::<f64>()?, vec![24.0, -1.0]);
    assert_eq!(m.prod_keepdims(0)?.shape(), &[1, 3]);
    assert!(qb::array([true, false])?.prod().is_err());
    Ok(())
}

/// The pairwise tree of numerics.md §4.4 in float64.
fn pairwise_f64(v: &[f64]) -> f64 {
    let mut cur = v.to_vec();
    while cur.len() > 1 {
        // Neighbours multiply; an odd last element is a chunk of one, carried unchanged.
        cur = cur.chunks(2).map(|c| c.iter().product()).collect();
    }
    cur[0]
}

#[test]
fn float32_prod_is_one_float64_tree_rounded_once() -> qb::Result<()> {
    // The reported case: float32 partial products would overflow (1e30 * 1e30) and underflow.
    let x = qb::array([1e30f32, 1e30, 1e-30, 1e-30])?;
    assert_eq!(x.prod()?.item()?, 1.0);
    // Every axis form, eager, under jit and under vmap, against the float64 tree rounded once.
    let data: Vec<f32> = (0..24)
        .map(|i| {
            let e = [30.0f32, -30.0, 20.0, -25.0, 1.0, 0.5][i % 6];
            (if i % 5 == 0 { -1.0 } else { 1.0 }) * 10f32.powf(e) * (1.0 + i as f32 / 7.0)
        })
        .collect();
    let m = qb::Tensor::from_vec([4, 6], data.clone())?;
    let rows: Vec<f32> = data
        .chunks(6)
        .map(|r| pairwise_f64(&r.iter().map(|&v| f64::from(v)).collect::<Vec<_>>()) as f32)
        .collect();
    let cols: Vec<f32> = (0..6)
        .map(|j| {
            let col: Vec<f64> = (0..4).map(|i| f64::from(data[i * 6 + j])).collect();
            pairwise_f64(&col) as f32
        })
        .collect();
    let all = pairwise_f64(&data.iter().map(|&v| f64::from(v)).collect::<Vec<_>>()) as f32;
    assert_eq!(m.prod_axes(1)?.to_vec::<f32>()?, rows);
    assert_eq!(m.prod_keepdims(1)?.to_vec::<f32>()?, rows);
    assert_eq!(m.prod_axes(0)?.to_vec::<f32>()?, cols);
    assert_eq!(m.prod()?.to_vec::<f32>()?, vec![all]);
    assert_eq!(m.prod()?.dtype(), qb::F32);
    let jitted: Tensor = qb::jit(|m: Tensor| m.prod_axes(1)).call(&m)?;
    assert_eq!(jitted.to_vec::<f32>()?, rows);
    let mapped: Tensor = qb::vmap(|r: Tensor| r.prod()).call(&m)?;
    assert_eq!(mapped.to_vec::<f32>()?, rows);
    // The gradient: the product of the others, also one float64 tree rounded once.
    let v = [1e30f32, 1e30, 1e-30, 2e-30];
    let g: Tensor = qb::grad(|x: Tensor| x.prod()).call(&qb::array(v)?)?;
    assert_eq!(g.dtype(), qb::F32);
    let want: Vec<f32> = (0..4)
        .map(|i| {
            (0..4)
                .filter(|&j| j != i)
                .map(|j| f64::from(v[j]))
                .product::<f64>() as f32
        })
        .collect();
    let got = g.to_vec::<f32>()?;
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() <= 1e-6 * b.abs(), "{got:?} vs {want:?}");
    }
    Ok(())
}

#[test]
fn shape_ops() -> qb::Result<()> {
    let x = qb::arange(6.0)?.reshape([2, -1])?;
    assert_eq!(x.shape(), &[2, 3]);
    assert_eq!(x.t()?.to_vec::<f64>()?, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    let y = x.expand_dims([0, -1])?;
    assert_eq!(y.shape(), &[1, 2, 3, 1]);
    assert_eq!(y.squeeze()?.shape(), &[2, 3]);
    assert_eq!(y.squeeze_axes([0])?.shape(), &[2, 3, 1]);
    assert!(y
        .squeeze_axes([1])
        .unwrap_err()
        .to_string()
        .contains("cannot squeeze axis 1"));
    let b = qb::array([1.0, 2.0, 3.0])?.broadcast_to([2, 3])?;
    assert_eq!(b.to_vec::<f64>()?, vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    let c = qb::concat(&[&x, &x], 1)?;
    assert_eq!(c.shape(), &[2, 6]);
    assert_eq!(c.to_vec::<f64>()?[..6], [0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
    let s = qb::stack(&[&x, &x], 1)?;
    assert_eq!(s.shape(), &[2, 2, 3]);
    let p = qb::arange(24.0)?.reshape([2, 3, 4])?.permute([2, 0, 1])?;
    assert_eq!(p.shape(), &[4, 2, 3]);
    assert_eq!(p.index(qb::s![1, 1, 2])?.item()?, 12.0 + 8.0 + 1.0);
    Ok(())
}

#[test]
fn strided_and_negative_indexing() -> qb::Result<()> {
    let x = qb::arange(10.0)?;
    assert_eq!(
        x.index(qb::s![1..8;3])?.to_vec::<f64>()?,
        vec![1.0, 4.0, 7.0]
    );
    assert_eq!(
        x.index(qb::s![8..2;-2])?.to_vec::<f64>()?,
        vec![8.0, 6.0, 4.0]
    );
    assert_eq!(x.index(qb::s![-3..])?.to_vec::<f64>()?, vec![7.0, 8.0, 9.0]);
    assert!(x
        .index(qb::s![..;0])
        .unwrap_err()
        .to_string()
        .contains("step must not be zero"));
    assert!(x
        .index(qb::s![1, 2])
        .unwrap_err()
        .to_string()
        .contains("too many indices"));
    assert!(x
        .index(vec![qb::ELLIPSIS, qb::ELLIPSIS])
        .unwrap_err()
        .to_string()
        .contains("at most one Ellipsis"));
    Ok(())
}

#[test]
fn matmul_numpy_rules() -> qb::Result<()> {
    let a = qb::array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])?;
    let v = qb::array([1.0, -1.0])?;
    assert_eq!(a.matmul(&v)?.to_vec::<f64>()?, vec![-1.0, -1.0, -1.0]);
    let w = qb::array([1.0, 0.0, 2.0])?;
    assert_eq!(w.matmul(&a)?.to_vec::<f64>()?, vec![11.0, 14.0]);
    let p = a.matmul(a.t()?)?;
    assert_eq!(p.shape(), &[3, 3]);
    assert_eq!(p.to_vec::<f64>()?[..3], [5.0, 11.0, 17.0]);
    let batch = qb::ones([4, 2, 3])?.matmul(&a)?;
    assert_eq!(batch.shape(), &[4, 2, 2]);
    assert_eq!(batch.to_vec::<f64>()?[..2], [9.0, 12.0]);
    assert!(a
        .matmul(&a)
        .unwrap_err()
        .to_string()
        .contains("inner dimensions differ"));
    Ok(())
}

#[test]
fn errors_pass_through_expressions() {
    let a = qb::array([1.0, 2.0]).unwrap();
    let bad = qb::array([1.0, 2.0, 3.0]).unwrap();
    let err = ((&a + &bad) * &a).unwrap_err();
    assert!(err.to_string().contains("could not be broadcast"));
    let err = (&a + &bad).sin().sum().unwrap_err();
    assert!(err.to_string().contains("could not be broadcast"));
    assert!(qb::array([true])
        .unwrap()
        .sin()
        .unwrap_err()
        .to_string()
        .contains("sin is not defined for bool tensors"));
    assert!(qb::logical_and(&a, &a)
        .unwrap_err()
        .to_string()
        .contains("requires bool operands"));
}

#[test]
fn conversions_and_items() -> qb::Result<()> {
    let x = qb::array([[1.5, 2.0], [3.0, 4.0]])?;
    assert!(x.item().is_err());
    assert_eq!(x.index(qb::s![0, 0])?.item()?, 1.5);
    let nd = x.to_ndarray::<f64>()?;
    assert_eq!(nd.shape(), &[2, 2]);
    assert_eq!(nd[[1, 0]], 3.0);
    let back = Tensor::from_ndarray(&nd.t())?;
    assert_eq!(back.to_vec::<f64>()?, vec![1.5, 3.0, 2.0, 4.0]);
    assert_eq!(x.astype(qb::F32)?.as_slice::<f32>()?, &[1.5, 2.0, 3.0, 4.0]);
    assert!(x.as_slice::<f32>().is_err());
    assert_eq!(
        qb::F32.array([0.1])?.astype(qb::F64)?.item()?,
        0.10000000149011612
    );
    assert_eq!(
        qb::array([f64::NAN, 0.0, -0.0])?
            .astype(qb::BOOL)?
            .to_vec_bool()?,
        vec![true, false, false]
    );
    assert!(qb::array([[1.0, 2.0], [3.0, 4.0]]).is_ok());
    assert!(qb::array(vec![vec![1.0, 2.0], vec![3.0]])
        .unwrap_err()
        .to_string()
        .contains("ragged"));
    assert!(qb::array([true, false])?
        .item_bool()
        .unwrap_err()
        .to_string()
        .contains("ambiguous"));
    Ok(())
}
