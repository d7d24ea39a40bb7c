//! Values of the composite array library (api.md §3–§9) against float64 references from `std`
//! and closed forms: the formulas and special values of numerics.md §4.3–§4.4 (NaN, infinities,
//! signed zeros, overflow-free scaling), layout and product functions against hand-computed
//! NumPy results, error messages of errors.md, and eager/`jit` bit-identity.

use qb::prelude::*;
use qb::{Error, Indexing, PadMode, Tensor};
use quabla as qb;

fn v(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

fn arr(x: &[f64]) -> Tensor {
    qb::array(x.to_vec()).unwrap()
}

fn mat(rows: usize, cols: usize, x: &[f64]) -> Tensor {
    Tensor::from_vec([rows, cols], x.to_vec()).unwrap()
}

/// Elementwise agreement to `rel` (NaN matches NaN, infinities must be equal).
fn assert_close(got: &[f64], want: &[f64], rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() || w == 0.0 {
            g == w
        } else {
            (g - w).abs() <= rel * w.abs()
        };
        assert!(ok, "{what}[{i}]: got {g:e}, want {w:e}");
    }
}

fn bits(x: &[f64]) -> Vec<u64> {
    x.iter().map(|v| v.to_bits()).collect()
}

const INF: f64 = f64::INFINITY;
const NAN: f64 = f64::NAN;

// ---------------------------------------------------------------------------------------------
// Elementwise composites

#[test]
fn sign_keeps_zeros_and_nan() -> qb::Result<()> {
    let x = arr(&[-2.5, -0.0, 0.0, 3.0, NAN, -INF, INF]);
    let s = x.sign()?;
    let got = v(&s);
    assert_eq!(got[0], -1.0);
    assert!(
        got[1] == 0.0 && got[1].is_sign_negative(),
        "sign(-0.0) is -0.0"
    );
    assert!(got[2] == 0.0 && got[2].is_sign_positive());
    assert_eq!(got[3], 1.0);
    assert!(got[4].is_nan());
    assert_eq!((got[5], got[6]), (-1.0, 1.0));
    let s32 = qb::F32.array([-3.0, 2.0])?.sign()?;
    assert_eq!(s32.dtype(), qb::F32);
    assert_eq!(v(&s32), vec![-1.0, 1.0]);
    assert!(qb::sign(qb::array([true])?).is_err(), "bool input is DT2");
    Ok(())
}

#[test]
fn exp2_is_exact_for_integers() -> qb::Result<()> {
    let got = v(&qb::exp2(arr(&[
        0.0, 1.0, 10.0, -2.0, -1075.0, 1024.0, -1074.0,
    ]))?);
    assert_eq!(got, vec![1.0, 2.0, 1024.0, 0.25, 0.0, INF, 5e-324]);
    let half = qb::exp2(qb::array(0.5)?)?.item()?;
    assert_close(&[half], &[std::f64::consts::SQRT_2], 3e-16, "exp2(0.5)");
    let f = qb::F32.array([3.0, -1.0])?.exp2()?;
    assert_eq!((f.dtype(), v(&f)), (qb::F32, vec![8.0, 0.5]));
    Ok(())
}

#[test]
fn isinf_and_nan_to_num() -> qb::Result<()> {
    let x = arr(&[INF, -INF, NAN, 1.0, -0.0]);
    assert_eq!(
        x.isinf()?.to_vec_bool()?,
        vec![true, true, false, false, false]
    );
    assert_eq!(
        v(&x.nan_to_num()?),
        vec![f64::MAX, -f64::MAX, 0.0, 1.0, -0.0]
    );
    let custom = qb::nan_to_num(&x)
        .nan(-1.0)
        .posinf(9.0)
        .neginf(-9.0)
        .eval()?;
    assert_eq!(v(&custom), vec![9.0, -9.0, -1.0, 1.0, -0.0]);
    let x32 = qb::F32.array([INF, -INF, NAN])?.nan_to_num()?;
    assert_eq!(x32.dtype(), qb::F32);
    assert_eq!(x32.to_vec::<f32>()?, vec![f32::MAX, -f32::MAX, 0.0]);
    Ok(())
}

#[test]
fn clip_bounds_broadcast_and_nan_propagates() -> qb::Result<()> {
    let x = arr(&[-2.0, 0.5, 3.0, NAN]);
    assert_close(
        &v(&qb::clip(&x).lo(0.0).hi(1.0).eval()?),
        &[0.0, 0.5, 1.0, NAN],
        0.0,
        "clip",
    );
    assert_close(
        &v(&x.clip(-1.0, 2.0)?),
        &[-1.0, 0.5, 2.0, NAN],
        0.0,
        "method",
    );
    assert_close(
        &v(&qb::clip(&x).lo(0.0).eval()?),
        &[0.0, 0.5, 3.0, NAN],
        0.0,
        "lo only",
    );
    assert_close(
        &v(&qb::clip(&x).hi(0.0).eval()?),
        &[-2.0, 0.0, 0.0, NAN],
        0.0,
        "hi only",
    );
    let m = mat(2, 2, &[0.0, 5.0, 10.0, -5.0]);
    let lo = qb::array([1.0, -1.0])?;
    assert_eq!(
        v(&qb::clip(&m).lo(&lo).hi(4.0).eval()?),
        vec![1.0, 4.0, 4.0, -1.0]
    );
    let err = qb::clip(&x).eval().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }));
    assert_eq!(err.to_string(), "clip requires lo or hi");
    Ok(())
}

#[test]
fn softplus_silu_and_gelu_match_closed_forms() -> qb::Result<()> {
    let xs = [-30.0, -20.0, -3.0, -0.5, 0.0, 0.7, 4.0, 30.0];
    let x = arr(&xs);
    let want: Vec<f64> = xs.iter().map(|&x| x.exp().ln_1p()).collect();
    assert_close(&v(&x.softplus()?), &want, 1e-15, "softplus");
    let big = v(&arr(&[1000.0, -1000.0]).softplus()?);
    assert_eq!(big, vec![1000.0, 0.0], "no overflow");
    let sp20 = qb::softplus(qb::array(-20.0)?)?.item()?;
    assert_close(&[sp20], &[(-20f64).exp().ln_1p()], 2e-16, "softplus(-20)");
    assert!((sp20 - 2.0611536e-9).abs() < 1e-16, "{sp20:e}");
    let sp20_32 = qb::F32.array(-20.0)?.softplus()?;
    assert_eq!(sp20_32.dtype(), qb::F32);
    assert!((sp20_32.item()? - 2.0611536e-9).abs() < 1e-15);

    let want: Vec<f64> = xs.iter().map(|&x| x / (1.0 + (-x).exp())).collect();
    assert_close(&v(&x.silu()?), &want, 1e-15, "silu");

    let k = (2.0 / std::f64::consts::PI).sqrt();
    let moderate = [-3.0, -0.5, 0.0, 0.7, 4.0];
    let want: Vec<f64> = moderate
        .iter()
        .map(|&x| 0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh()))
        .collect();
    assert_close(&v(&arr(&moderate).gelu()?), &want, 1e-14, "gelu (tanh)");
    let g = v(&qb::gelu(&x).eval()?);
    assert_eq!(
        bits(&g),
        bits(&v(&x.gelu()?)),
        "default is the approximation"
    );
    // The sigmoid form keeps the negative tail that `0.5 x (1 + tanh u)` cancels to -0.
    let u = k * (-20.0 + 0.044715 * -8000.0);
    assert_close(&g[1..2], &[-20.0 / (1.0 + (-2.0 * u).exp())], 1e-13, "tail");
    assert!(g[1] < 0.0 && g[1] > -1e-250);
    // The exact form: x * Phi(x) with known normal CDF values.
    let exact = qb::gelu(arr(&[1.0, -3.0, 2.0, 0.0]))
        .approximate(false)
        .eval()?;
    assert_close(
        &v(&exact),
        &[
            0.8413447460685429,
            -3.0 * 0.0013498980316300946,
            2.0 * 0.9772498680518208,
            0.0,
        ],
        1e-15,
        "gelu (erfc)",
    );
    // Accurate in the negative tail: -10 * Phi(-10).
    let tail = qb::gelu(qb::array(-10.0)?)
        .approximate(false)
        .eval()?
        .item()?;
    assert!(
        (tail - -10.0 * 7.619853024160527e-24).abs() < 1e-36,
        "{tail:e}"
    );
    Ok(())
}

#[test]
fn logaddexp_is_overflow_free_with_infinities() -> qb::Result<()> {
    let a = arr(&[1.0, -1000.0, 1000.0, -INF, INF, -INF, NAN, 0.0]);
    let b = arr(&[2.0, -1000.0, 0.0, -INF, INF, 3.0, 1.0, -INF]);
    let got = v(&qb::logaddexp(&a, &b)?);
    let want = [
        (1f64.exp() + 2f64.exp()).ln(),
        -1000.0 + std::f64::consts::LN_2,
        1000.0,
        -INF,
        INF,
        3.0,
        NAN,
        0.0,
    ];
    assert_close(&got, &want, 1e-15, "logaddexp");
    assert_eq!(a.logaddexp(&b)?.shape(), &[8]);
    Ok(())
}

#[test]
fn hypot_neither_overflows_nor_underflows() -> qb::Result<()> {
    let pairs = [
        (3.0, 4.0),
        (-3.0, 0.0),
        (1e200, 1e200),
        (1e-200, 3e-200),
        (0.0, 0.0),
        (-0.0, 0.0),
        (INF, NAN),
        (NAN, -INF),
        (NAN, 1.0),
        (5.0, -12.0),
    ];
    let a = arr(&pairs.map(|p| p.0));
    let b = arr(&pairs.map(|p| p.1));
    let want: Vec<f64> = pairs.iter().map(|&(x, y)| x.hypot(y)).collect();
    assert_close(&v(&qb::hypot(&a, &b)?), &want, 3e-16, "hypot");
    let h32 = qb::F32
        .array([1e30, 3e-30])?
        .hypot(qb::F32.array([1e30, 4e-30])?)?;
    assert_eq!(h32.dtype(), qb::F32);
    assert_close(
        &v(&h32),
        &[std::f64::consts::SQRT_2 * 1e30, 5e-30],
        2e-7,
        "f32",
    );
    Ok(())
}

#[test]
fn mod_takes_the_sign_of_the_divisor() -> qb::Result<()> {
    let pairs = [
        (-7.0, 3.0, 2.0),
        (7.0, -3.0, -2.0),
        (7.0, 3.0, 1.0),
        (-7.0, -3.0, -1.0),
        (5.5, 2.0, 1.5),
        (-5.5, 2.0, 0.5),
        (6.0, 3.0, 0.0),
        (-6.0, 3.0, 0.0),
        (6.0, -3.0, -0.0),
        (-6.0, -3.0, -0.0),
        (1.0, 0.0, NAN),
        (INF, 2.0, NAN),
        (-3.0, INF, INF),
        (3.0, INF, 3.0),
    ];
    let a = arr(&pairs.map(|p| p.0));
    let b = arr(&pairs.map(|p| p.1));
    let got = v(&qb::mod_(&a, &b)?);
    for (i, &(x, y, want)) in pairs.iter().enumerate() {
        let g = got[i];
        let ok = if want.is_nan() {
            g.is_nan()
        } else {
            g == want && g.is_sign_negative() == want.is_sign_negative()
        };
        assert!(ok, "mod({x}, {y}) = {g}, want {want}");
    }
    assert_eq!(bits(&v(&qb::remainder(&a, &b)?)), bits(&got), "alias");
    assert_eq!(bits(&v(&a.mod_(&b)?)), bits(&got));
    Ok(())
}

#[test]
fn power_with_an_integer_exponent_lowers_to_powi() -> qb::Result<()> {
    let x = arr(&[-1.5, 0.0, 2.0, NAN]);
    assert_eq!(bits(&v(&qb::power(&x, 3)?)), bits(&v(&x.powi(3)?)));
    assert_eq!(
        v(&qb::power(&x, 0)?),
        vec![1.0; 4],
        "powi(x, 0) = 1, NaN included"
    );
    let text = |f: fn(Tensor) -> qb::Result<Tensor>| {
        qb::jit(f)
            .lower(&qb::array([1.0, 2.0]).unwrap())
            .unwrap()
            .as_text()
    };
    assert!(text(|x| qb::power(&x, 3)).contains("powi"));
    assert!(text(|x| qb::power(&x, 3.0)).contains("pow("));
    assert!(
        !text(|x| qb::power(&x, -2)).contains("powi"),
        "negative ints use pow"
    );
    assert_eq!(v(&qb::power(arr(&[2.0]), -2)?), vec![0.25]);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reductions and normalizations

#[test]
fn norm_is_scaled() -> qb::Result<()> {
    assert_eq!(arr(&[3.0, 4.0]).norm()?.item()?, 5.0);
    let v32 = qb::F32.array([1e20, 1e20])?;
    let n32 = qb::norm(&v32)?;
    assert_eq!(n32.dtype(), qb::F32);
    assert_eq!(n32.to_vec::<f32>()?, vec![1.4142136e20]);
    assert_eq!(
        qb::F32.array([1e-30, 1e-30])?.norm()?.to_vec::<f32>()?,
        vec![1.4142136e-30]
    );
    assert_close(
        &v(&arr(&[1e-200, 1e-200]).norm()?),
        &[std::f64::consts::SQRT_2 * 1e-200],
        3e-16,
        "tiny",
    );
    assert_eq!(qb::zeros([3])?.norm()?.item()?, 0.0);
    assert_eq!(arr(&[INF, 1.0]).norm()?.item()?, INF);
    assert!(arr(&[NAN, INF]).norm()?.item()?.is_nan());
    assert!(arr(&[NAN, 1.0]).norm()?.item()?.is_nan());
    let m = mat(2, 3, &[1.0, 2.0, 2.0, 0.0, -3.0, 4.0]);
    assert_close(&v(&m.norm_axes(1)?), &[3.0, 5.0], 2e-16, "axis 1");
    assert_close(
        &v(&m.norm_axes(0)?),
        &[1.0, 13f64.sqrt(), 20f64.sqrt()],
        5e-16,
        "axis 0",
    );
    assert_eq!(m.norm_keepdims([1])?.shape(), &[2, 1]);
    assert_close(&[m.norm()?.item()?], &[34f64.sqrt()], 5e-16, "all");
    Ok(())
}

#[test]
fn logsumexp_shifts_and_handles_infinities() -> qb::Result<()> {
    let x = arr(&[1.0, 2.0, 3.0]);
    let want = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
    assert_close(&[x.logsumexp()?.item()?], &[want], 4e-16, "lse");
    assert_close(
        &[arr(&[1000.0, 1000.0]).logsumexp()?.item()?],
        &[1000.0 + std::f64::consts::LN_2],
        0.0,
        "large",
    );
    assert_eq!(arr(&[-INF, -INF]).logsumexp()?.item()?, -INF);
    assert_eq!(arr(&[INF, 1.0, -INF]).logsumexp()?.item()?, INF);
    assert!(arr(&[NAN, 1.0]).logsumexp()?.item()?.is_nan());
    let m = mat(2, 2, &[0.0, 0.0, -INF, 5.0]);
    assert_close(
        &v(&m.logsumexp_axes(1)?),
        &[std::f64::consts::LN_2, 5.0],
        2e-16,
        "axis",
    );
    assert_eq!(m.logsumexp_keepdims([0])?.shape(), &[1, 2]);
    assert_eq!(qb::logsumexp(&m)?.shape(), &[] as &[usize]);
    Ok(())
}

#[test]
fn softmax_and_log_softmax() -> qb::Result<()> {
    // E10.
    assert_eq!(v(&qb::softmax(arr(&[1000.0, 0.0]), -1)?), vec![1.0, 0.0]);
    let s32 = qb::softmax(qb::F32.array([1000.0, 0.0])?, -1)?;
    assert_eq!((s32.dtype(), v(&s32)), (qb::F32, vec![1.0, 0.0]));
    let xs: [f64; 4] = [0.3, -1.2, 2.5, 0.0];
    let z: f64 = xs.iter().map(|x| x.exp()).sum();
    let want: Vec<f64> = xs.iter().map(|x| x.exp() / z).collect();
    let got = v(&arr(&xs).softmax(-1)?);
    assert_close(&got, &want, 1e-15, "softmax");
    let want: Vec<f64> = xs.iter().map(|x| x - z.ln()).collect();
    assert_close(&v(&arr(&xs).log_softmax(0)?), &want, 1e-15, "log_softmax");
    assert!(v(&arr(&[INF, 0.0]).softmax(-1)?)[0].is_nan());
    assert!(v(&arr(&[-INF, -INF]).softmax(-1)?)[0].is_nan());
    let m = mat(2, 2, &[1.0, 3.0, 1.0, 0.0]);
    let cols = v(&m.softmax(0)?);
    let e3 = (-3f64).exp();
    assert_close(
        &cols,
        &[0.5, 1.0 / (1.0 + e3), 0.5, e3 / (1.0 + e3)],
        1e-15,
        "axis 0",
    );
    Ok(())
}

#[test]
fn var_and_std_two_pass() -> qb::Result<()> {
    let x = arr(&[1.0, 2.0, 3.0, 4.0]);
    // E24.
    let v1 = qb::var(&x).ddof(1).eval()?;
    assert_eq!(v1.item()?, 5.0 / 3.0);
    assert_eq!(v1.to_string(), "Tensor(1.66666667, dtype=float64)");
    assert_eq!(x.var()?.item()?, 1.25);
    assert_eq!(x.std()?.item()?, 1.25f64.sqrt());
    assert_eq!(qb::std(&x).ddof(1).eval()?.item()?, (5.0f64 / 3.0).sqrt());
    let m = mat(2, 3, &[1.0, 2.0, 6.0, 3.0, 3.0, 3.0]);
    assert_close(
        &v(&qb::var(&m).axis(1).eval()?),
        &[14.0 / 3.0, 0.0],
        1e-15,
        "axis 1",
    );
    assert_eq!(
        v(&qb::var(&m).axes([0]).keepdims(true).eval()?),
        vec![1.0, 0.25, 2.25]
    );
    assert_eq!(
        qb::var(&m).axes([0]).keepdims(true).eval()?.shape(),
        &[1, 3]
    );
    assert_eq!(qb::var(&x).ddof(4).eval()?.item()?, INF, "n == ddof");
    // Two passes keep the cancellation-prone case exact.
    let shifted = arr(&[1e9 + 1.0, 1e9 + 2.0, 1e9 + 3.0]);
    assert_eq!(shifted.var()?.item()?, 2.0 / 3.0);
    Ok(())
}

#[test]
fn cumsum_accumulates_in_f64() -> qb::Result<()> {
    let x = arr(&[1.0, 2.0, 3.0, 4.0]);
    assert_eq!(v(&x.cumsum(0)?), vec![1.0, 3.0, 6.0, 10.0]);
    assert_eq!(
        v(&qb::cumsum(&x).reverse(true).eval()?),
        vec![10.0, 9.0, 7.0, 4.0]
    );
    let m = mat(2, 2, &[1.0, 2.0, 3.0, 4.0]);
    let flat = qb::cumsum(&m).eval()?;
    assert_eq!(
        (flat.shape(), v(&flat)),
        (&[4][..], vec![1.0, 3.0, 6.0, 10.0])
    );
    assert_eq!(v(&m.cumsum(1)?), vec![1.0, 3.0, 3.0, 7.0]);
    assert_eq!(
        v(&qb::cumsum(&m).axis(0).reverse(true).eval()?),
        vec![4.0, 6.0, 3.0, 4.0]
    );
    let c32 = qb::F32.array([1e8, 1.0, -1e8])?.cumsum(0)?;
    assert_eq!(c32.to_vec::<f32>()?, vec![1e8, 1e8, 1.0], "f64 accumulator");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Shape and layout

#[test]
fn split_and_meshgrid() -> qb::Result<()> {
    let x = qb::arange(6.0)?;
    let parts = x.split(3, 0)?;
    let got: Vec<Vec<f64>> = parts.iter().map(v).collect();
    assert_eq!(got, vec![vec![0.0, 1.0], vec![2.0, 3.0], vec![4.0, 5.0]]);
    let parts = qb::arange(7.0)?.split_at([2, -2], 0)?;
    let got: Vec<Vec<f64>> = parts.iter().map(v).collect();
    assert_eq!(
        got,
        vec![vec![0.0, 1.0], vec![2.0, 3.0, 4.0], vec![5.0, 6.0]]
    );
    let err = x.split(4, 0).unwrap_err();
    assert!(err.to_string().contains("shapes differ"), "{err}");
    let err = x.split_at([2, 2], 0).unwrap_err();
    assert!(
        err.to_string().contains("empty slices are not supported"),
        "{err}"
    );
    let m = mat(2, 4, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    let cols = m.split(2, -1)?;
    assert_eq!(v(&cols[1]), vec![2.0, 3.0, 6.0, 7.0]);

    let a = arr(&[1.0, 2.0, 3.0]);
    let b = arr(&[4.0, 5.0]);
    let xy = qb::meshgrid(&[&a, &b]).eval()?;
    assert_eq!(xy[0].shape(), &[2, 3]);
    assert_eq!(v(&xy[0]), vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    assert_eq!(v(&xy[1]), vec![4.0, 4.0, 4.0, 5.0, 5.0, 5.0]);
    let ij = qb::meshgrid(&[&a, &b]).indexing(Indexing::Ij).eval()?;
    assert_eq!(ij[0].shape(), &[3, 2]);
    assert_eq!(v(&ij[0]), vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
    assert_eq!(v(&ij[1]), vec![4.0, 5.0, 4.0, 5.0, 4.0, 5.0]);
    assert_eq!("ij".parse::<Indexing>()?, Indexing::Ij);
    let err = "ab".parse::<Indexing>().unwrap_err();
    assert!(matches!(err, Error::Shape { .. }));
    assert!(err
        .to_string()
        .contains("meshgrid indexing must be \"xy\" or \"ij\""));
    Ok(())
}

#[test]
fn flip_roll_and_pad() -> qb::Result<()> {
    let m = mat(2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(v(&m.flip(0)?), vec![4.0, 5.0, 6.0, 1.0, 2.0, 3.0]);
    assert_eq!(v(&m.flip(-1)?), vec![3.0, 2.0, 1.0, 6.0, 5.0, 4.0]);
    assert_eq!(v(&m.flip_all()?), vec![6.0, 5.0, 4.0, 3.0, 2.0, 1.0]);
    assert_eq!(bits(&v(&m.flip_axes([0, 1])?)), bits(&v(&m.flip_all()?)));
    assert_eq!(
        bits(&v(&qb::flip(&m, qb::Axes::All)?)),
        bits(&v(&m.flip_all()?))
    );

    let r = qb::arange(5.0)?;
    assert_eq!(v(&r.roll(2, 0)?), vec![3.0, 4.0, 0.0, 1.0, 2.0]);
    assert_eq!(v(&r.roll(-1, 0)?), vec![1.0, 2.0, 3.0, 4.0, 0.0]);
    assert_eq!(v(&r.roll(12, 0)?), vec![3.0, 4.0, 0.0, 1.0, 2.0]);
    let g = mat(2, 3, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let flat = qb::roll(&g, 1).eval()?;
    assert_eq!(
        (flat.shape(), v(&flat)),
        (&[2, 3][..], vec![5.0, 0.0, 1.0, 2.0, 3.0, 4.0])
    );
    let both = qb::roll(&g, [1, 1]).axis([0, 1]).eval()?;
    assert_eq!(v(&both), vec![5.0, 3.0, 4.0, 2.0, 0.0, 1.0]);

    let x = arr(&[1.0, 2.0, 3.0]);
    let pad = |mode| qb::pad(&x, (2, 2)).mode(mode).eval().map(|t| v(&t));
    assert_eq!(
        pad(PadMode::Constant)?,
        vec![0.0, 0.0, 1.0, 2.0, 3.0, 0.0, 0.0]
    );
    assert_eq!(pad(PadMode::Edge)?, vec![1.0, 1.0, 1.0, 2.0, 3.0, 3.0, 3.0]);
    assert_eq!(
        pad(PadMode::Reflect)?,
        vec![3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0]
    );
    assert_eq!(
        pad(PadMode::Symmetric)?,
        vec![2.0, 1.0, 1.0, 2.0, 3.0, 3.0, 2.0]
    );
    assert_eq!(pad(PadMode::Wrap)?, vec![2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0]);
    assert_eq!(
        v(&qb::pad(&x, 1).constant_values(9.0).eval()?),
        vec![9.0, 1.0, 2.0, 3.0, 9.0]
    );
    let sq = mat(2, 2, &[1.0, 2.0, 3.0, 4.0]);
    let p = qb::pad(&sq, &[(1, 0), (0, 1)]).eval()?;
    assert_eq!(p.shape(), &[3, 3]);
    assert_eq!(v(&p), vec![0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 3.0, 4.0, 0.0]);
    let p = qb::pad(&sq, &[(1, 1)]).mode(PadMode::Edge).eval()?;
    assert_eq!(p.shape(), &[4, 4]);
    assert_eq!(v(&p)[..4], [1.0, 1.0, 2.0, 2.0]);
    let p32 = qb::pad(qb::F32.array([1.0])?, 1)
        .constant_values(0.1)
        .eval()?;
    assert_eq!(p32.to_vec::<f32>()?, vec![0.1, 1.0, 0.1]);
    assert!(qb::pad(&x, 3).mode(PadMode::Reflect).eval().is_err());
    assert_eq!(
        v(&qb::pad(&x, (0, 5)).mode(PadMode::Wrap).eval()?),
        vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0]
    );
    assert!(qb::pad(&sq, &[(1, 1), (1, 1), (1, 1)]).eval().is_err());
    assert_eq!("reflect".parse::<PadMode>()?, PadMode::Reflect);
    let err = "mean".parse::<PadMode>().unwrap_err();
    assert!(
        err.to_string().starts_with("pad mode must be one of"),
        "{err}"
    );
    Ok(())
}

#[test]
fn tile_repeat_and_axes() -> qb::Result<()> {
    let x = arr(&[1.0, 2.0]);
    assert_eq!(v(&x.tile([2])?), vec![1.0, 2.0, 1.0, 2.0]);
    let t = x.tile([2, 2])?;
    assert_eq!(
        (t.shape(), v(&t)),
        (&[2, 4][..], vec![1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0])
    );
    let m = mat(2, 2, &[1.0, 2.0, 3.0, 4.0]);
    assert_eq!(
        v(&m.tile([2, 1])?),
        vec![1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0]
    );
    assert_eq!(m.tile([3])?.shape(), &[2, 6]);
    assert!(x.tile([0]).is_err());

    let y = arr(&[1.0, 2.0, 3.0]);
    assert_eq!(v(&y.repeat(2, 0)?), vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
    assert_eq!(
        v(&qb::repeat(&y, [2, 1, 3]).axis(0).eval()?),
        vec![1.0, 1.0, 2.0, 3.0, 3.0, 3.0]
    );
    assert_eq!(
        v(&qb::repeat(&m, 2).eval()?),
        vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]
    );
    let r0 = m.repeat(2, 0)?;
    assert_eq!(
        (r0.shape(), v(&r0)),
        (&[4, 2][..], vec![1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0])
    );
    assert!(qb::repeat(&y, [1, 0, 1]).axis(0).eval().is_err());
    assert!(qb::repeat(&y, [1, 2]).axis(0).eval().is_err());

    let z = qb::zeros([2, 3, 4])?;
    assert_eq!(z.moveaxis([0], [-1])?.shape(), &[3, 4, 2]);
    assert_eq!(z.moveaxis([0, 1], [-1, -2])?.shape(), &[4, 3, 2]);
    assert_eq!(z.swapaxes(0, 2)?.shape(), &[4, 3, 2]);
    let g = mat(2, 3, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(v(&g.swapaxes(0, 1)?), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    assert_eq!(bits(&v(&g.moveaxis([1], [0])?)), bits(&v(&g.t()?)));
    let r = g.ravel()?;
    assert_eq!(
        (r.shape(), v(&r)),
        (&[6][..], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    );
    assert!(z.moveaxis([0, 0], [1, 2]).is_err());
    Ok(())
}

#[test]
fn diagonals_and_triangles() -> qb::Result<()> {
    let d = arr(&[1.0, 2.0]);
    assert_eq!(v(&d.diag()?), vec![1.0, 0.0, 0.0, 2.0]);
    let up = qb::diag(&d).k(1).eval()?;
    assert_eq!(up.shape(), &[3, 3]);
    assert_eq!(v(&up), vec![0.0, 1.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0]);
    let down = qb::diag(&d).k(-1).eval()?;
    assert_eq!(v(&down), vec![0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0, 0.0]);
    let m = Tensor::from_vec([3, 3], (0..9).map(f64::from).collect())?;
    assert_eq!(v(&m.diag()?), vec![0.0, 4.0, 8.0]);
    assert_eq!(v(&qb::diag(&m).k(1).eval()?), vec![1.0, 5.0]);
    assert_eq!(v(&qb::diag(&m).k(-2).eval()?), vec![6.0]);
    assert!(qb::diag(&m).k(3).eval().is_err());

    let c = Tensor::from_vec([2, 3, 4], (0..24).map(f64::from).collect())?;
    let dg = c.diagonal()?;
    assert_eq!(dg.shape(), &[4, 2]);
    assert_eq!(v(&dg), vec![0.0, 16.0, 1.0, 17.0, 2.0, 18.0, 3.0, 19.0]);
    let dg = qb::diagonal(&c).offset(1).axis1(1).axis2(2).eval()?;
    assert_eq!(dg.shape(), &[2, 3]);
    assert_eq!(v(&dg), vec![1.0, 6.0, 11.0, 13.0, 18.0, 23.0]);
    let dg = qb::diagonal(&c).offset(-1).axis1(-1).axis2(1).eval()?;
    // Rows along the last axis, columns along axis 1: entries c[b, i, i + 1].
    assert_eq!(v(&dg), vec![1.0, 6.0, 11.0, 13.0, 18.0, 23.0]);
    assert!(qb::diagonal(&c).axis1(1).axis2(1).eval().is_err());

    let sq = mat(2, 2, &[1.0, 2.0, 3.0, 4.0]);
    assert_eq!(sq.trace()?.item()?, 5.0);
    assert_eq!(qb::trace(&sq).offset(1).eval()?.item()?, 2.0);
    assert_eq!(
        v(&qb::trace(&c).axis1(1).axis2(2).eval()?),
        vec![15.0, 51.0]
    );

    let r = mat(2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(v(&r.tril()?), vec![1.0, 0.0, 0.0, 4.0, 5.0, 0.0]);
    assert_eq!(v(&r.triu()?), vec![1.0, 2.0, 3.0, 0.0, 5.0, 6.0]);
    let b = Tensor::from_vec([2, 2, 2], (1..9).map(f64::from).collect())?;
    assert_eq!(
        v(&qb::tril(&b)?),
        vec![1.0, 0.0, 3.0, 4.0, 5.0, 0.0, 7.0, 8.0]
    );
    let mask = qb::array([[true, true], [true, true]])?.triu()?;
    assert_eq!(mask.dtype(), qb::BOOL);
    assert_eq!(mask.to_vec_bool()?, vec![true, true, false, true]);
    assert!(arr(&[1.0]).tril().is_err());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Products

#[test]
fn dot_outer_tensordot_kron() -> qb::Result<()> {
    let a = arr(&[1.0, 2.0, 3.0]);
    let b = arr(&[4.0, 5.0, 6.0]);
    assert_eq!(qb::dot(&a, &b)?.item()?, 32.0);
    assert_eq!(v(&qb::dot(2.0, &a)?), vec![2.0, 4.0, 6.0]);
    let m = mat(2, 3, &[1.0, 0.0, 2.0, -1.0, 3.0, 1.0]);
    assert_eq!(v(&m.dot(&a)?), vec![7.0, 8.0]);
    let t = Tensor::from_vec([2, 2, 3], (0..12).map(f64::from).collect())?;
    let k = Tensor::from_vec([4, 3, 2], (0..24).map(|i| (i % 5) as f64).collect())?;
    let d = qb::dot(&t, &k)?;
    assert_eq!(d.shape(), &[2, 2, 4, 2]);
    let (tv, kv, dv) = (v(&t), v(&k), v(&d));
    for i in 0..2 {
        for j in 0..2 {
            for p in 0..4 {
                for q in 0..2 {
                    let want: f64 = (0..3)
                        .map(|s| tv[(i * 2 + j) * 3 + s] * kv[(p * 3 + s) * 2 + q])
                        .sum();
                    assert_eq!(dv[((i * 2 + j) * 4 + p) * 2 + q], want);
                }
            }
        }
    }
    let err = qb::dot(&a, arr(&[1.0, 2.0])).unwrap_err();
    assert!(err.to_string().contains("inner dimensions differ"), "{err}");

    let o = qb::outer(arr(&[1.0, 2.0]), &b)?;
    assert_eq!(
        (o.shape(), v(&o)),
        (&[2, 3][..], vec![4.0, 5.0, 6.0, 8.0, 10.0, 12.0])
    );

    let a3 = Tensor::from_vec([2, 3, 4], (0..24).map(|i| (i as f64) * 0.5).collect())?;
    let b3 = Tensor::from_vec([3, 4, 5], (0..60).map(|i| ((i * 7) % 11) as f64).collect())?;
    let td = qb::tensordot(&a3, &b3).eval()?;
    assert_eq!(td.shape(), &[2, 5]);
    let (av, bv, tdv) = (v(&a3), v(&b3), v(&td));
    for i in 0..2 {
        for n in 0..5 {
            let want: f64 = (0..12).map(|jk| av[i * 12 + jk] * bv[jk * 5 + n]).sum();
            assert_eq!(tdv[i * 5 + n], want);
        }
    }
    let mm = qb::tensordot(&m, m.t()?).axes(([1], [0])).eval()?;
    assert_eq!(bits(&v(&mm)), bits(&v(&m.matmul(m.t()?)?)));
    assert_eq!(qb::tensordot(&a, &b).axes(0).eval()?.shape(), &[3, 3]);
    assert!(qb::tensordot(&a, &m).axes(1).eval().is_err());

    let ka = mat(2, 2, &[1.0, 2.0, 3.0, 4.0]);
    let kb = mat(2, 2, &[0.0, 5.0, 6.0, 7.0]);
    let kr = qb::kron(&ka, &kb)?;
    assert_eq!(kr.shape(), &[4, 4]);
    assert_eq!(
        v(&kr),
        vec![
            0.0, 5.0, 0.0, 10.0, 6.0, 7.0, 12.0, 14.0, 0.0, 15.0, 0.0, 20.0, 18.0, 21.0, 24.0, 28.0
        ]
    );
    let kr = qb::kron(arr(&[1.0, 2.0]), mat(2, 1, &[1.0, 3.0]))?;
    assert_eq!(
        (kr.shape(), v(&kr)),
        (&[2, 2][..], vec![1.0, 2.0, 3.0, 6.0])
    );
    Ok(())
}

#[test]
fn cross_and_einsum() -> qb::Result<()> {
    let e = qb::cross(arr(&[1.0, 0.0, 0.0]), arr(&[0.0, 1.0, 0.0])).eval()?;
    assert_eq!(v(&e), vec![0.0, 0.0, 1.0]);
    let (a, b) = ([1.5, -2.0, 0.5], [0.3, 4.0, -1.0]);
    let want = [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ];
    assert_eq!(v(&qb::cross(arr(&a), arr(&b)).eval()?), want.to_vec());
    let z = qb::cross(arr(&[1.0, 2.0]), arr(&[3.0, 4.0])).eval()?;
    assert_eq!((z.shape(), z.item()?), (&[][..], -2.0));
    let mixed = qb::cross(arr(&[1.0, 2.0]), arr(&[3.0, 4.0, 5.0])).eval()?;
    assert_eq!(v(&mixed), vec![10.0, -5.0, -2.0]);
    // Vectors as columns: axis 0 for the operands and the result.
    let ca = mat(3, 2, &[1.0, a[0], 0.0, a[1], 0.0, a[2]]);
    let cb = mat(3, 2, &[0.0, b[0], 1.0, b[1], 0.0, b[2]]);
    let c = qb::cross(&ca, &cb).axis(0).eval()?;
    assert_eq!(c.shape(), &[3, 2]);
    assert_eq!(v(&c), vec![0.0, want[0], 0.0, want[1], 1.0, want[2]]);
    let c = qb::cross(&ca, &cb).axisa(0).axisb(0).eval()?;
    assert_eq!(c.shape(), &[2, 3]);
    assert!(qb::cross(arr(&[1.0; 4]), arr(&[1.0; 4])).eval().is_err());

    let m = mat(2, 3, &[1.0, 0.0, 2.0, -1.0, 3.0, 1.0]);
    let n = mat(3, 2, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let want = v(&m.matmul(&n)?);
    assert_eq!(v(&qb::einsum("ij,jk->ik", &[&m, &n])?), want);
    assert_eq!(v(&qb::einsum(" ...ij , ...jk -> ...ik", &[&m, &n])?), want);
    let bm = qb::stack(&[&m, &m], 0)?;
    assert_eq!(
        qb::einsum("...ij,...jk->...ik", &[&bm, &n])?.shape(),
        &[2, 2, 2]
    );
    let err = qb::einsum("ij->ji", &[&m]).unwrap_err();
    match &err {
        Error::Unsupported { op, device, .. } => {
            assert_eq!((op.as_str(), device), ("einsum", &None));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "einsum supports only matrix products (\"ij,jk->ik\", \"...ij,...jk->...ik\"), got 'ij->ji'"
    );
    assert!(qb::einsum("ij,jk->ik", &[&bm, &n]).is_err());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Calculus helpers

#[test]
fn diff_and_trapezoid() -> qb::Result<()> {
    let x = arr(&[1.0, 4.0, 9.0, 16.0]);
    assert_eq!(v(&qb::diff(&x).eval()?), vec![3.0, 5.0, 7.0]);
    assert_eq!(v(&qb::diff(&x).n(2).eval()?), vec![2.0, 2.0]);
    assert_eq!(v(&qb::diff(&x).n(3).eval()?), vec![0.0]);
    assert!(Tensor::same(&qb::diff(&x).n(0).eval()?, &x));
    assert_eq!(
        v(&qb::diff(&x).prepend(0.0).eval()?),
        vec![1.0, 3.0, 5.0, 7.0]
    );
    assert_eq!(
        v(&qb::diff(&x).append(arr(&[20.0, 30.0])).eval()?),
        vec![3.0, 5.0, 7.0, 4.0, 10.0]
    );
    let m = mat(2, 3, &[1.0, 2.0, 4.0, 0.0, 5.0, 5.0]);
    assert_eq!(v(&qb::diff(&m).axis(0).eval()?), vec![-1.0, 3.0, 1.0]);
    assert_eq!(v(&qb::diff(&m).eval()?), vec![1.0, 2.0, 5.0, 0.0]);
    let err = qb::diff(&x).n(4).eval().unwrap_err();
    assert!(
        err.to_string().contains("empty slices are not supported"),
        "{err}"
    );

    let y = arr(&[1.0, 2.0, 3.0]);
    assert_eq!(qb::trapezoid(&y).eval()?.item()?, 4.0);
    assert_eq!(qb::trapezoid(&y).dx(0.5).eval()?.item()?, 2.0);
    assert_eq!(
        qb::trapezoid(&y).x(arr(&[0.0, 1.0, 3.0])).eval()?.item()?,
        6.5
    );
    assert_eq!(v(&qb::trapezoid(&m).axis(0).eval()?), vec![0.5, 3.5, 4.5]);
    assert_eq!(v(&qb::trapezoid(&m).eval()?), vec![4.5, 7.5]);
    let xs = mat(2, 3, &[0.0, 1.0, 2.0, 0.0, 2.0, 4.0]);
    assert_eq!(v(&qb::trapezoid(&m).x(&xs).eval()?), vec![4.5, 15.0]);
    assert_eq!(
        v(&qb::trapezoid(mat(1, 2, &[1.0, 2.0])).axis(0).eval()?),
        vec![0.0, 0.0]
    );
    Ok(())
}

#[test]
fn polyval_horner_and_limits() -> qb::Result<()> {
    let p = arr(&[1.0, 2.0, 3.0]);
    assert_eq!(
        v(&qb::polyval(&p, arr(&[0.0, 1.0, 2.0, -1.5]))?),
        vec![3.0, 6.0, 11.0, 2.25]
    );
    let lim = |p: &[f64], x: f64| {
        qb::polyval(arr(p), qb::array(x).unwrap())
            .unwrap()
            .item()
            .unwrap()
    };
    assert_eq!(lim(&[1.0, -2.0, 3.0], INF), INF);
    assert_eq!(lim(&[1.0, -2.0, 3.0], -INF), INF, "even degree");
    assert_eq!(lim(&[2.0, 0.0, 0.0, 1.0], -INF), -INF, "odd degree");
    assert_eq!(lim(&[-2.0, 0.0, 0.0, 1.0], -INF), INF);
    assert_eq!(lim(&[0.0, 0.0, 5.0], INF), 5.0, "constant polynomial");
    assert_eq!(lim(&[0.0, 3.0, 1.0], -INF), -INF, "leading zeros skipped");
    assert_eq!(lim(&[0.0, 0.0, 0.0], INF), 0.0);
    assert!(lim(&[1.0, 2.0], NAN).is_nan());
    let c = qb::polyval(arr(&[7.0]), arr(&[1.0, 2.0]))?;
    assert_eq!((c.shape(), v(&c)), (&[2][..], vec![7.0, 7.0]));
    let p32 = qb::polyval(qb::F32.array([1.0, 0.5])?, qb::F32.array([2.0])?)?;
    assert_eq!((p32.dtype(), v(&p32)), (qb::F32, vec![2.5]));
    Ok(())
}

#[test]
fn interp_is_exact_at_knots() -> qb::Result<()> {
    let (xp, fp) = (arr(&[0.0, 1.0, 2.0]), arr(&[0.0, 10.0, 0.0]));
    let x = arr(&[-1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, NAN]);
    assert_close(
        &v(&qb::interp(&x, &xp, &fp).eval()?),
        &[0.0, 0.0, 5.0, 10.0, 5.0, 0.0, 0.0, NAN],
        0.0,
        "interp",
    );
    assert_close(
        &v(&qb::interp(&x, &xp, &fp).left(-7.0).right(7.0).eval()?),
        &[-7.0, 0.0, 5.0, 10.0, 5.0, 0.0, 7.0, NAN],
        0.0,
        "left/right",
    );
    let knots = [0.1, 0.7, 1.3, 2.9];
    let values = [0.3, 0.9, 0.2, -0.4];
    let at = qb::interp(arr(&knots), arr(&knots), arr(&values)).eval()?;
    assert_eq!(v(&at), values.to_vec(), "knots give fp exactly");
    let mid = qb::interp(qb::array(1.0)?, arr(&knots), arr(&values)).eval()?;
    assert_close(
        &[mid.item()?],
        &[0.9 + (1.0 - 0.7) * ((0.2 - 0.9) / (1.3 - 0.7))],
        0.0,
        "mid",
    );
    let one = qb::interp(arr(&[0.0, 1.0, 2.0]), arr(&[1.0]), arr(&[4.0])).eval()?;
    assert_eq!(v(&one), vec![4.0, 4.0, 4.0]);
    let err = qb::interp(&x, arr(&[0.0, 2.0, 1.0]), &fp)
        .eval()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }));
    assert_eq!(err.to_string(), "interp requires strictly increasing xp");
    assert!(qb::interp(&x, arr(&[0.0, 0.0, 1.0]), &fp).eval().is_err());
    assert!(qb::interp(&x, arr(&[0.0, 1.0]), &fp).eval().is_err());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Tracing

#[test]
fn composites_are_bit_identical_under_jit() -> qb::Result<()> {
    let x = arr(&[-20.0, -1.3, 0.0, 0.4, 2.2, 30.0]);
    let f = |x: Tensor| -> qb::Result<Tensor> {
        let parts = [
            x.softplus()?,
            x.silu()?,
            x.gelu()?,
            qb::gelu(&x).approximate(false).eval()?,
            x.sign()?,
            qb::logaddexp(&x, x.flip(0)?)?,
            qb::hypot(&x, x.roll(1, 0)?)?,
            qb::mod_(&x, 0.7)?,
            x.softmax(0)?,
            x.log_softmax(0)?,
            x.cumsum(0)?,
            qb::pad(&x, (2, 1)).mode(PadMode::Reflect).eval()?,
            qb::diff(&x).n(2).eval()?,
            qb::polyval(arr(&[0.5, -1.0, 2.0]), &x)?,
            qb::interp(&x, arr(&[-2.0, 0.0, 1.0]), arr(&[1.0, -1.0, 3.0])).eval()?,
            x.norm_keepdims([0])?,
            x.logsumexp_keepdims([0])?,
            qb::std(&x).ddof(1).keepdims(true).eval()?,
            qb::trapezoid(&x).eval()?.reshape([1])?,
        ];
        qb::concat(&parts, 0)
    };
    let eager = f(x.clone())?;
    let jitted = qb::jit(f).call(&x)?;
    assert_eq!(bits(&v(&eager)), bits(&v(&jitted)));
    Ok(())
}

#[test]
fn methods_forward_through_results() -> qb::Result<()> {
    let x = arr(&[1.0, -2.0, 3.0]);
    let chained = x.mul(2.0).softplus().flip(0).cumsum(0).norm()?;
    let direct = (&x * 2.0)?.softplus()?.flip(0)?.cumsum(0)?.norm()?;
    assert_eq!(chained.item()?, direct.item()?);
    let m = x.reshape([1, 3]).tile([2, 1]).tril().trace()?;
    assert_eq!(m.item()?, 1.0 + -2.0);
    Ok(())
}

#[test]
fn composites_batch_under_vmap_like_a_loop() -> qb::Result<()> {
    let f = |x: Tensor| -> qb::Result<Tensor> {
        let parts = [
            x.softplus()?,
            x.gelu()?,
            x.sign()?,
            qb::logaddexp(&x, x.flip(0)?)?,
            qb::hypot(&x, x.roll(1, 0)?)?,
            qb::mod_(&x, 0.7)?,
            x.softmax(0)?,
            x.cumsum(0)?,
            qb::pad(&x, (2, 1)).mode(PadMode::Reflect).eval()?,
            qb::diff(&x).n(2).eval()?,
            qb::polyval(arr(&[0.5, -1.0, 2.0]), &x)?,
            qb::interp(&x, arr(&[-2.0, 0.0, 1.0]), arr(&[1.0, -1.0, 3.0])).eval()?,
            x.norm_keepdims([0])?,
            x.logsumexp_keepdims([0])?,
            qb::std(&x).ddof(1).keepdims(true).eval()?,
            x.tile([2])?,
            x.repeat(2, 0)?,
            x.diag()?.ravel()?,
            x.reshape([2, 2])?.tril()?.ravel()?,
            qb::kron(&x, &x)?,
            qb::trapezoid(&x).eval()?.reshape([1])?,
        ];
        qb::concat(&parts, 0)
    };
    let xs = mat(
        3,
        4,
        &[
            -20.0, -1.3, 0.0, 0.4, 2.2, 30.0, 0.1, -0.2, 1.0, 2.0, 3.0, 4.0,
        ],
    );
    let batched: Tensor = qb::vmap(f).call(&xs)?;
    for i in 0..3 {
        let row = f(xs.index(qb::s![i])?)?;
        assert_eq!(bits(&v(&batched.index(qb::s![i])?)), bits(&v(&row)));
    }
    Ok(())
}
