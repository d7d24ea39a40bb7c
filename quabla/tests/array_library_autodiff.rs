//! Derivatives of the composite array library: every differentiable function against central
//! finite differences in float64 (first order in reverse and forward mode; second order as
//! Hessian-vector products, reverse-over-reverse and forward-over-reverse), the conventions of
//! numerics.md §5 at their special points, and the acceptance examples E10, E15, E16 and
//! E22–E26 of `spec/acceptance.md` §2.

use qb::prelude::*;
use qb::{PadMode, Tensor};
use quabla as qb;

type F = fn(Tensor) -> qb::Result<Tensor>;

fn v(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

fn arr(x: &[f64]) -> Tensor {
    qb::array(x.to_vec()).unwrap()
}

/// Fixed, non-symmetric weights of a given shape, so that weighted sums see every output.
fn weights(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let w: Vec<f64> = (0..n)
        .map(|i| 0.4 + ((i as f64) * 0.77 + 0.3).sin())
        .collect();
    Tensor::from_vec(shape, w).unwrap()
}

/// `sum(w * f(x))` with the weights of `f(x)`'s shape.
fn weighted(y: qb::Result<Tensor>) -> qb::Result<Tensor> {
    let y = y?;
    (&y * &weights(y.shape()))?.sum()
}

fn direction(n: usize) -> Vec<f64> {
    (0..n).map(|i| ((i as f64) * 1.3 + 0.7).sin()).collect()
}

fn grad_of(f: F, x: &Tensor) -> Tensor {
    qb::grad(f).call::<Tensor, Tensor>(x).unwrap()
}

fn shifted(x0: &[f64], d: &[f64], s: f64) -> Vec<f64> {
    x0.iter().zip(d).map(|(a, b)| a + s * b).collect()
}

fn close(got: f64, want: f64, tol: f64) -> bool {
    (got - want).abs() <= tol * want.abs().max(1.0)
}

/// Checks the gradient and Hessian-vector products of the scalar function `f` at `x0`
/// (of `shape`) against central differences along a fixed direction.
fn check(name: &str, f: F, x0: &[f64], shape: &[usize]) {
    let n = x0.len();
    let d = direction(n);
    let at = |x: Vec<f64>| Tensor::from_vec(shape, x).unwrap();
    let x = at(x0.to_vec());
    let dt = at(d.clone());
    let value = |s: f64| f(at(shifted(x0, &d, s))).unwrap().item().unwrap();
    let h = 1e-5;
    let fd1 = (value(h) - value(-h)) / (2.0 * h);
    let g = grad_of(f, &x);
    assert_eq!(g.shape(), shape, "{name}: gradient shape");
    let rev: f64 = v(&g).iter().zip(&d).map(|(a, b)| a * b).sum();
    assert!(close(rev, fd1, 1e-6), "{name}: reverse {rev} vs fd {fd1}");
    let (_, t) = qb::jvp(f, &x, &dt).unwrap();
    let fwd = t.item().unwrap();
    assert!(close(fwd, fd1, 1e-6), "{name}: forward {fwd} vs fd {fd1}");

    // Second order: H d by central differences of the gradient.
    let gp = v(&grad_of(f, &at(shifted(x0, &d, h))));
    let gm = v(&grad_of(f, &at(shifted(x0, &d, -h))));
    let fd2: Vec<f64> = gp
        .iter()
        .zip(&gm)
        .map(|(a, b)| (a - b) / (2.0 * h))
        .collect();
    let grad_f = move |y: Tensor| qb::grad(f).call::<Tensor, Tensor>(&y);
    let (_, hv_fwd) = qb::jvp(grad_f, &x, &dt).unwrap();
    let dd = dt.clone();
    let hv_rev = qb::grad(move |y: Tensor| grad_f(y)?.mul(&dd).sum())
        .call::<Tensor, Tensor>(&x)
        .unwrap();
    for (i, want) in fd2.iter().enumerate() {
        let (a, b) = (v(&hv_fwd)[i], v(&hv_rev)[i]);
        assert!(
            close(a, *want, 2e-5),
            "{name}: (H d)[{i}] fwd-over-rev {a} vs fd {want}"
        );
        assert!(
            close(b, *want, 2e-5),
            "{name}: (H d)[{i}] rev-over-rev {b} vs fd {want}"
        );
    }
}

const X6: [f64; 6] = [0.3, -1.2, 2.1, 0.75, -0.4, 1.6];

/// Every differentiable new function, reduced to a scalar.
fn table() -> Vec<(&'static str, F, Vec<f64>, Vec<usize>)> {
    let x6 = X6.to_vec();
    let s6 = vec![6];
    let m23 = vec![2, 3];
    vec![
        ("sign", |x| weighted(x.sign()), x6.clone(), s6.clone()),
        ("exp2", |x| weighted(x.exp2()), x6.clone(), s6.clone()),
        (
            "softplus",
            |x| weighted(x.softplus()),
            x6.clone(),
            s6.clone(),
        ),
        ("silu", |x| weighted(x.silu()), x6.clone(), s6.clone()),
        ("gelu", |x| weighted(x.gelu()), x6.clone(), s6.clone()),
        (
            "gelu exact",
            |x| weighted(qb::gelu(&x).approximate(false).eval()),
            x6.clone(),
            s6.clone(),
        ),
        (
            "nan_to_num",
            |x| weighted(x.nan_to_num()),
            x6.clone(),
            s6.clone(),
        ),
        (
            "clip",
            |x| weighted(x.clip(-1.0, 1.0)),
            x6.clone(),
            s6.clone(),
        ),
        (
            "clip arrays",
            |x| {
                let lo = x.index(qb::s![..3])?;
                let hi = x.index(qb::s![3..])?;
                weighted(qb::clip(lo.mul(1.5)).hi(hi).eval())
            },
            x6.clone(),
            s6.clone(),
        ),
        (
            "logaddexp",
            |x| weighted(qb::logaddexp(x.index(qb::s![..3]), x.index(qb::s![3..]))),
            x6.clone(),
            s6.clone(),
        ),
        (
            "hypot",
            |x| weighted(qb::hypot(x.index(qb::s![..3]), x.index(qb::s![3..]))),
            x6.clone(),
            s6.clone(),
        ),
        (
            "mod",
            |x| {
                weighted(qb::mod_(
                    x.index(qb::s![..3]).mul(2.9),
                    x.index(qb::s![3..]),
                ))
            },
            x6.clone(),
            s6.clone(),
        ),
        (
            "power int",
            |x| qb::power(&x, 3)?.sum(),
            x6.clone(),
            s6.clone(),
        ),
        ("norm", |x| x.norm(), x6.clone(), s6.clone()),
        (
            "norm axes",
            |x| weighted(x.norm_axes(1)),
            x6.clone(),
            m23.clone(),
        ),
        ("logsumexp", |x| x.logsumexp(), x6.clone(), s6.clone()),
        (
            "logsumexp axes",
            |x| weighted(x.logsumexp_keepdims([0])),
            x6.clone(),
            m23.clone(),
        ),
        (
            "softmax",
            |x| weighted(x.softmax(-1)),
            x6.clone(),
            m23.clone(),
        ),
        (
            "softmax axis 0",
            |x| weighted(x.softmax(0)),
            x6.clone(),
            m23.clone(),
        ),
        (
            "log_softmax",
            |x| weighted(x.log_softmax(1)),
            x6.clone(),
            m23.clone(),
        ),
        ("var", |x| x.var(), x6.clone(), s6.clone()),
        (
            "var ddof axis",
            |x| weighted(qb::var(&x).axis(1).ddof(1).eval()),
            x6.clone(),
            m23.clone(),
        ),
        ("std", |x| x.std(), x6.clone(), s6.clone()),
        (
            "std axis 0",
            |x| weighted(qb::std(&x).axis(0).eval()),
            x6.clone(),
            m23.clone(),
        ),
        (
            "cumsum",
            |x| weighted(qb::cumsum(&x).reverse(true).eval()?.tanh()),
            x6.clone(),
            m23.clone(),
        ),
        (
            "cumsum axis",
            |x| weighted(x.cumsum(1)?.sin()),
            x6.clone(),
            m23.clone(),
        ),
        (
            "split",
            |x| {
                let p = x.split_at([1, 4], 0)?;
                (p[0].sum()? * p[1].sin()?.sum()?)? + p[2].exp()?.sum()?
            },
            x6.clone(),
            s6.clone(),
        ),
        (
            "meshgrid",
            |x| {
                let g = qb::meshgrid(&[x.index(qb::s![..2])?, x.index(qb::s![2..])?]).eval()?;
                weighted(&g[0] * &g[1].sin()?)
            },
            x6.clone(),
            s6.clone(),
        ),
        (
            "flip",
            |x| weighted(x.flip_all()?.sin()),
            x6.clone(),
            m23.clone(),
        ),
        (
            "roll",
            |x| weighted(qb::roll(&x, [1, -1]).axis([0, 1]).eval()?.mul(&x)),
            x6.clone(),
            m23.clone(),
        ),
        (
            "pad",
            |x| {
                let modes = [
                    PadMode::Constant,
                    PadMode::Edge,
                    PadMode::Reflect,
                    PadMode::Symmetric,
                    PadMode::Wrap,
                ];
                let mut total = qb::array(0.0)?;
                for mode in modes {
                    let p = qb::pad(&x, &[(1, 1), (2, 1)]).mode(mode).eval()?;
                    total = (total + weighted(p.square())?)?;
                }
                Ok(total)
            },
            x6.clone(),
            m23.clone(),
        ),
        (
            "tile",
            |x| weighted(x.tile([2, 1, 2])?.square()),
            x6.clone(),
            m23.clone(),
        ),
        (
            "repeat",
            |x| {
                let a = qb::repeat(&x, [1, 3]).axis(0).eval()?;
                let b = qb::repeat(&x, 2).eval()?;
                (weighted(a.square())? + weighted(b.sin())?)?.sum()
            },
            x6.clone(),
            m23.clone(),
        ),
        (
            "moveaxis swapaxes ravel",
            |x| {
                let t = x.reshape([1, 2, 3])?.moveaxis([0], [-1])?.swapaxes(0, 1)?;
                weighted(t.ravel()?.mul(&x.ravel()?.flip(0)?))
            },
            x6.clone(),
            m23.clone(),
        ),
        (
            "diag",
            |x| {
                let d = qb::diag(x.index(qb::s![..3])).k(-1).eval()?;
                weighted(d.matmul(d.t()))
            },
            x6.clone(),
            s6.clone(),
        ),
        (
            "diagonal trace tril triu",
            |x| {
                let m = x.reshape([3, 2])?.matmul(x.reshape([2, 3])?)?;
                let a = weighted(qb::diagonal(&m).offset(1).eval()?.exp())?;
                let b = qb::trace(&m).offset(-1).eval()?.square()?;
                (a + b + weighted(m.tril()?.sin())? + weighted(m.triu()?.square())?)?.sum()
            },
            x6.clone(),
            s6.clone(),
        ),
        (
            "dot outer tensordot kron",
            |x| {
                let a = x.index(qb::s![..3])?;
                let b = x.index(qb::s![3..])?;
                let m = x.reshape([2, 3])?;
                let p = qb::dot(&a, &b)?;
                let o = weighted(qb::outer(&a, &b)?.sin())?;
                let t = weighted(qb::tensordot(&m, m.t()?).axes(1).eval())?;
                let k = weighted(qb::kron(&m, &a)?.square())?;
                (p + o + t + k)?.sum()
            },
            x6.clone(),
            s6.clone(),
        ),
        (
            "cross einsum",
            |x| {
                let a = x.index(qb::s![..3])?;
                let b = x.index(qb::s![3..])?;
                let c = qb::cross(&a, b.sin()?).eval()?;
                let z = qb::cross(x.index(qb::s![..2]), x.index(qb::s![4..])).eval()?;
                let m = x.reshape([2, 3])?;
                let e = qb::einsum("ij,jk->ik", &[&m, &m.t()?])?;
                (weighted(c.square())? + z.square()? + weighted(Ok(e))?)?.sum()
            },
            x6.clone(),
            s6.clone(),
        ),
        (
            "diff",
            |x| weighted(qb::diff(x.exp()).n(2).prepend(1.0).eval()),
            x6.clone(),
            s6.clone(),
        ),
        (
            "trapezoid",
            |x| {
                let y = x.index(qb::s![..3])?.sin()?;
                let t = x.index(qb::s![3..])?.cumsum(0)?;
                (qb::trapezoid(&y).x(&t).eval()? + qb::trapezoid(x.square()).dx(0.3).eval()?)?.sum()
            },
            x6.clone(),
            s6.clone(),
        ),
        (
            "polyval",
            |x| weighted(qb::polyval(x.index(qb::s![..3]), x.index(qb::s![3..]))),
            x6.clone(),
            s6.clone(),
        ),
        (
            "interp",
            |x| {
                // Knots [-1, 0.5, 2] shifted by x[0..3], values x[3..6], at fixed points.
                let xp = (arr(&[-1.0, 0.5, 2.0]) + x.index(qb::s![..3]).mul(0.1))?;
                let fp = x.index(qb::s![3..])?;
                let at = arr(&[-1.5, -0.6, 0.2, 0.9, 1.7, 2.5]);
                let y = qb::interp(at.add(x.index(qb::s![..1])?.mul(0.05)), &xp, fp.sin())
                    .left(-3.0)
                    .eval()?;
                weighted(y.square())
            },
            x6.clone(),
            s6.clone(),
        ),
    ]
}

#[test]
fn derivatives_match_finite_differences() {
    for (name, f, x0, shape) in table() {
        check(name, f, &x0, &shape);
    }
}

fn g1(f: F, x: f64) -> f64 {
    qb::grad(f)
        .call::<Tensor, Tensor>(&qb::array(x).unwrap())
        .unwrap()
        .item()
        .unwrap()
}

fn g2(f: F, x: f64) -> f64 {
    let inner = move |y: Tensor| qb::grad(f).call::<Tensor, Tensor>(&y);
    qb::grad(inner)
        .call::<Tensor, Tensor>(&qb::array(x).unwrap())
        .unwrap()
        .item()
        .unwrap()
}

fn grad2(f: fn(Tensor, Tensor) -> qb::Result<Tensor>, a: f64, b: f64) -> (f64, f64) {
    let (da, db): (Tensor, Tensor) = qb::grad(move |(x, y): (Tensor, Tensor)| f(x, y))
        .argnums(&[0, 1])
        .call(&(a, b))
        .unwrap();
    (da.item().unwrap(), db.item().unwrap())
}

#[test]
fn conventions_at_special_points() {
    // sign: 0 at every point and order, including 0 and NaN-free at infinities.
    for x in [-2.0, -0.0, 0.0, 0.5, f64::INFINITY] {
        assert_eq!(g1(|x| x.sign(), x), 0.0, "sign'({x})");
        assert_eq!(g2(|x| x.sign(), x), 0.0, "sign''({x})");
    }
    assert_eq!(g1(|x| x.isinf()?.astype(qb::F64)?.add(&x), 3.0), 1.0);
    // softplus'(0) = sigmoid(0) = 0.5; softplus'' = sigmoid' = 0.25.
    assert_eq!(g1(|x| x.softplus(), 0.0), 0.5);
    assert_eq!(g2(|x| x.softplus(), 0.0), 0.25);
    assert_eq!(g1(|x| x.softplus(), -1000.0), 0.0);
    assert_eq!(g1(|x| x.softplus(), 1000.0), 1.0);
    // clip at a bound: x receives 0, the bound receives the derivative.
    assert_eq!(g1(|x| x.clip(0.0, 1.0), 1.0), 0.0);
    assert_eq!(g1(|x| x.clip(0.0, 1.0), 0.0), 0.0);
    assert_eq!(g1(|x| x.clip(0.0, 1.0), 0.5), 1.0);
    assert_eq!(
        grad2(|x, hi| qb::clip(&x).lo(0.0).hi(&hi).eval(), 1.0, 1.0),
        (0.0, 1.0)
    );
    assert_eq!(
        grad2(|x, lo| qb::clip(&x).lo(&lo).eval(), 2.0, 2.0),
        (0.0, 1.0)
    );
    // hypot: 0 at the origin (also second order), (a, b)/hypot elsewhere.
    assert_eq!(grad2(|a, b| qb::hypot(&a, &b), 0.0, 0.0), (0.0, 0.0));
    let (a, b) = grad2(|a, b| qb::hypot(&a, &b), 3.0, -4.0);
    assert!(close(a, 0.6, 1e-15) && close(b, -0.8, 1e-15), "({a}, {b})");
    assert_eq!(g2(|x| qb::hypot(&x, 0.0), 0.0), 0.0);
    let (a, b) = grad2(|a, b| qb::hypot(&a, &b), 3e200, 4e200);
    assert!(close(a, 0.6, 1e-15) && close(b, 0.8, 1e-15), "({a}, {b})");
    // logaddexp: exactly (0.5, 0.5) at ties.
    assert_eq!(grad2(|a, b| qb::logaddexp(&a, &b), 1.0, 1.0), (0.5, 0.5));
    assert_eq!(grad2(|a, b| qb::logaddexp(&a, &b), 0.5, 0.5), (0.5, 0.5));
    assert_eq!(
        grad2(|a, b| qb::logaddexp(&a, &b), -800.0, -800.0),
        (0.5, 0.5)
    );
    let (a, b) = grad2(|a, b| qb::logaddexp(&a, &b), 1.0, 2.0);
    let l = (1f64.exp() + 2f64.exp()).ln();
    assert!(close(a, (1.0 - l).exp(), 1e-15) && close(b, (2.0 - l).exp(), 1e-15));
    // mod: d/dx1 = 1, d/dx2 = -floor(x1 / x2), also at zero remainders.
    assert_eq!(grad2(|a, b| qb::mod_(&a, &b), 7.0, 3.0), (1.0, -2.0));
    assert_eq!(grad2(|a, b| qb::mod_(&a, &b), -7.0, 3.0), (1.0, 3.0));
    assert_eq!(grad2(|a, b| qb::mod_(&a, &b), 7.0, -3.0), (1.0, 3.0));
    assert_eq!(grad2(|a, b| qb::mod_(&a, &b), 6.0, -3.0), (1.0, 2.0));
    assert_eq!(grad2(|a, b| qb::remainder(&a, &b), -6.0, 3.0), (1.0, 2.0));
    // norm: 0 at the zero vector; x / norm elsewhere.
    let zero = qb::zeros([3]).unwrap();
    let g = qb::grad(|x: Tensor| x.norm())
        .call::<Tensor, Tensor>(&zero)
        .unwrap();
    assert_eq!(v(&g), vec![0.0; 3]);
    let g = qb::grad(|x: Tensor| x.norm())
        .call::<Tensor, Tensor>(&arr(&[3.0, 0.0, -4.0]))
        .unwrap();
    for (got, want) in v(&g).iter().zip([0.6, 0.0, -0.8]) {
        assert!(close(*got, want, 1e-15), "{got} vs {want}");
    }
    // std: 0 at zero variance (every order through the sqrt rule).
    let flat = arr(&[2.0, 2.0, 2.0]);
    let g = qb::grad(|x: Tensor| x.std())
        .call::<Tensor, Tensor>(&flat)
        .unwrap();
    assert_eq!(v(&g), vec![0.0; 3]);
    let g = qb::grad(|x: Tensor| qb::std(&x).ddof(1).eval())
        .call::<Tensor, Tensor>(&flat)
        .unwrap();
    assert_eq!(v(&g), vec![0.0; 3]);
    let grad_std = |x: Tensor| qb::grad(|y: Tensor| y.std()).call::<Tensor, Tensor>(&x);
    let (_, hv) = qb::jvp(grad_std, &flat, &arr(&[1.0, -1.0, 0.5])).unwrap();
    assert_eq!(v(&hv), vec![0.0; 3]);
    // var: 2 (x - mu) / (n - ddof).
    let g = qb::grad(|x: Tensor| qb::var(&x).ddof(1).eval())
        .call::<Tensor, Tensor>(&arr(&[1.0, 2.0, 3.0, 6.0]))
        .unwrap();
    for (got, want) in v(&g).iter().zip([-4.0 / 3.0, -2.0 / 3.0, 0.0, 2.0]) {
        assert!(close(*got, want, 1e-15), "{got} vs {want}");
    }
    // logsumexp: the gradient is the softmax, and stays finite with -inf entries.
    let x = arr(&[1.0, -f64::INFINITY, 3.0]);
    let g = qb::grad(|x: Tensor| x.logsumexp())
        .call::<Tensor, Tensor>(&x)
        .unwrap();
    let s = v(&x.softmax(0).unwrap());
    assert_eq!(v(&g)[1], 0.0);
    assert!(close(v(&g)[0], s[0], 1e-15) && close(v(&g)[2], s[2], 1e-15));
    // interp: slope to the right of a knot, the last slope at xp[-1], 0 outside.
    let f: F = |x| qb::interp(&x, arr(&[0.0, 1.0, 3.0]), arr(&[0.0, 2.0, 3.0])).eval();
    assert_eq!(g1(f, 0.0), 2.0);
    assert_eq!(g1(f, 1.0), 0.5);
    assert_eq!(g1(f, 3.0), 0.5);
    assert_eq!(g1(f, -0.5), 0.0);
    assert_eq!(g1(f, 3.5), 0.0);
    // polyval: derivative of Horner's form.
    let p: F = |x| qb::polyval(arr(&[2.0, -1.0, 0.5, 3.0]), &x);
    assert_eq!(g1(p, 1.5), 6.0 * 2.25 - 2.0 * 1.5 + 0.5);
    assert_eq!(g2(p, 1.5), 12.0 * 1.5 - 2.0);
}

#[test]
fn e10_max_shifted_softmax() -> qb::Result<()> {
    assert_eq!(v(&qb::softmax(arr(&[1000.0, 0.0]), -1)?), vec![1.0, 0.0]);
    let s = qb::softmax(qb::F32.array([1000.0, 0.0])?, -1)?;
    assert_eq!(s.dtype(), qb::F32);
    assert_eq!(s.to_vec::<f32>()?, vec![1.0, 0.0]);
    Ok(())
}

#[test]
fn e15_scaled_norm_does_not_overflow_in_float32() -> qb::Result<()> {
    let x = qb::F32.array([1e20, 1e20])?;
    let n = qb::norm(&x)?;
    assert_eq!(n.dtype(), qb::F32);
    assert_eq!(n.to_vec::<f32>()?, vec![1.4142136e20]);
    assert_eq!(n.to_string(), "Tensor(1.4142136e+20, dtype=float32)");
    let g: Tensor = qb::grad(|x: Tensor| x.norm()).call(&x)?;
    assert_eq!(g.dtype(), qb::F32);
    for gi in v(&g) {
        assert!(close(gi, 0.70710677, 1e-6), "{gi}");
    }
    Ok(())
}

#[test]
fn e16_overflow_free_softplus_under_jit() -> qb::Result<()> {
    let r = qb::jit(|x: Tensor| qb::softplus(&x)).call(&qb::array(-20.0)?)?;
    assert_eq!(r.to_string(), "Tensor(2.06115362e-09, dtype=float64)");
    assert_eq!(r.item()?, qb::softplus(qb::array(-20.0)?)?.item()?);
    Ok(())
}

#[test]
fn e22_exact_product_derivatives() -> qb::Result<()> {
    let g: Tensor = qb::grad(|x: Tensor| x.prod()).call(&arr(&[2.0, 0.0, 3.0]))?;
    assert_eq!(v(&g), vec![0.0, 6.0, 0.0]);
    let g: Tensor = qb::grad(|x: Tensor| x.prod()).call(&arr(&[0.0, 0.0, 3.0]))?;
    assert_eq!(v(&g), vec![0.0, 0.0, 0.0]);
    // Higher orders are products of the remaining entries: d2/dx0 dx1 of x0 x1 x2 is x2.
    let grad_prod = |x: Tensor| qb::grad(|y: Tensor| y.prod()).call::<Tensor, Tensor>(&x);
    let (_, hv) = qb::jvp(grad_prod, &arr(&[2.0, 0.0, 3.0]), &arr(&[1.0, 0.0, 0.0]))?;
    assert_eq!(v(&hv), vec![0.0, 3.0, 0.0]);
    Ok(())
}

#[test]
fn e23_finite_derivatives_at_the_origin_and_at_ties() -> qb::Result<()> {
    assert_eq!(grad2(|a, b| qb::hypot(&a, &b), 0.0, 0.0), (0.0, 0.0));
    assert_eq!(grad2(|a, b| qb::atan2(&a, &b), 0.0, 0.0), (0.0, 0.0));
    assert_eq!(grad2(|a, b| qb::logaddexp(&a, &b), 1.0, 1.0), (0.5, 0.5));
    let ninf = f64::NEG_INFINITY;
    assert_eq!(qb::logaddexp(qb::array(ninf)?, ninf)?.item()?, ninf);
    assert_eq!(arr(&[ninf, ninf]).logsumexp()?.item()?, ninf);
    Ok(())
}

#[test]
fn e24_std_at_zero_variance_and_var_with_ddof() -> qb::Result<()> {
    let g: Tensor = qb::grad(|x: Tensor| qb::std(&x).eval()).call(&arr(&[2.0, 2.0, 2.0]))?;
    assert_eq!(v(&g), vec![0.0, 0.0, 0.0]);
    let var = qb::var(arr(&[1.0, 2.0, 3.0, 4.0])).ddof(1).eval()?;
    assert_eq!(var.to_string(), "Tensor(1.66666667, dtype=float64)");
    Ok(())
}

#[test]
fn e25_overflow_free_inverse_hyperbolic_derivative() {
    assert!((g1(|x| x.arcsinh(), 1e200) - 1e-200).abs() <= 1e-12 * 1e-200);
    assert_eq!(g1(|x| x.arcsinh(), f64::INFINITY), 0.0);
}

#[test]
fn e26_remainders_and_rounding() -> qb::Result<()> {
    assert_eq!(qb::fmod(qb::array(-7.0)?, 3.0)?.item()?, -1.0);
    assert_eq!(qb::mod_(qb::array(-7.0)?, 3.0)?.item()?, 2.0);
    assert_eq!(qb::mod_(qb::array(7.0)?, -3.0)?.item()?, -2.0);
    assert_eq!(grad2(|a, b| qb::fmod(&a, &b), 7.0, 3.0), (1.0, -2.0));
    let r = arr(&[0.5, 1.5, 2.5, -0.5]).round()?;
    let got = v(&r);
    assert_eq!(got, vec![0.0, 2.0, 2.0, -0.0]);
    assert!(got[3].is_sign_negative(), "round(-0.5) is -0.0");
    Ok(())
}

#[test]
fn derivatives_compose_with_jit() -> qb::Result<()> {
    let f = |x: Tensor| -> qb::Result<Tensor> {
        let y = (x.softplus()? + x.logsumexp()?)?;
        (qb::hypot(&y, x.flip(0)?)? + qb::var(&x).ddof(1).eval()?)?.sum()
    };
    let x = arr(&[0.4, -1.1, 2.0]);
    let eager: Tensor = qb::grad(f).call(&x)?;
    let jitted = qb::jit(|x: Tensor| qb::grad(f).call::<Tensor, Tensor>(&x)).call(&x)?;
    let bits = |t: &Tensor| v(t).iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&eager), bits(&jitted));
    Ok(())
}
