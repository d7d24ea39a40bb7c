//! The table of issue 19: every function of `qb::linalg` × {values against an independent
//! reference (closed forms, or an f64 reconstruction such as `Q R = A`, `U S Vh = A`,
//! `A v = λ v`, computed here with plain loops), first to third derivatives in both modes
//! against central differences (`qb::testing::check_grads`), `vmap` against a loop}.

use qb::linalg::{EighResult, Ord, QRResult, SVDResult, SlogdetResult};
use qb::testing::{check_grads, check_grads_with, Modes, Tolerance};
use qb::Tensor;
use quabla as qb;

// ---------------------------------------------------------------------------------------------
// Plain f64 matrices: the independent reference arithmetic.

#[derive(Clone, Debug)]
struct M {
    r: usize,
    c: usize,
    v: Vec<f64>,
}

impl M {
    fn of(t: &Tensor) -> M {
        let s = t.shape();
        let (r, c) = match s.len() {
            1 => (s[0], 1),
            2 => (s[0], s[1]),
            _ => panic!("rank {s:?}"),
        };
        M {
            r,
            c,
            v: t.to_vec::<f64>().unwrap(),
        }
    }
    fn at(&self, i: usize, j: usize) -> f64 {
        self.v[i * self.c + j]
    }
    fn mul(&self, o: &M) -> M {
        assert_eq!(self.c, o.r);
        let mut v = vec![0.0; self.r * o.c];
        for i in 0..self.r {
            for j in 0..o.c {
                v[i * o.c + j] = (0..self.c).map(|k| self.at(i, k) * o.at(k, j)).sum();
            }
        }
        M {
            r: self.r,
            c: o.c,
            v,
        }
    }
    fn t(&self) -> M {
        let mut v = vec![0.0; self.r * self.c];
        for i in 0..self.r {
            for j in 0..self.c {
                v[j * self.r + i] = self.at(i, j);
            }
        }
        M {
            r: self.c,
            c: self.r,
            v,
        }
    }
    fn eye(n: usize) -> M {
        let mut v = vec![0.0; n * n];
        for i in 0..n {
            v[i * n + i] = 1.0;
        }
        M { r: n, c: n, v }
    }
    fn diff(&self, o: &M) -> f64 {
        assert_eq!((self.r, self.c), (o.r, o.c));
        self.v
            .iter()
            .zip(&o.v)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max)
    }
}

/// The determinant by cofactor expansion (small matrices only).
fn det_ref(m: &M) -> f64 {
    let n = m.r;
    if n == 1 {
        return m.v[0];
    }
    (0..n)
        .map(|j| {
            let minor: Vec<f64> = (1..n)
                .flat_map(|i| (0..n).filter(move |&k| k != j).map(move |k| (i, k)))
                .map(|(i, k)| m.at(i, k))
                .collect();
            let sign = if j % 2 == 0 { 1.0 } else { -1.0 };
            sign * m.at(0, j)
                * det_ref(&M {
                    r: n - 1,
                    c: n - 1,
                    v: minor,
                })
        })
        .sum()
}

fn t(dims: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_vec(dims, v.to_vec()).unwrap()
}

/// A well-conditioned non-symmetric 3x3 matrix.
fn a3() -> Tensor {
    t(&[3, 3], &[4.0, 1.0, -0.5, 0.7, 3.0, 0.2, -0.3, 0.4, 2.5])
}

/// A symmetric positive-definite 3x3 matrix with well-separated eigenvalues.
fn spd3() -> Tensor {
    t(&[3, 3], &[5.0, 1.0, 0.3, 1.0, 3.0, -0.4, 0.3, -0.4, 1.2])
}

/// A tall 4x3 matrix of full column rank with distinct singular values.
fn tall() -> Tensor {
    t(
        &[4, 3],
        &[
            2.0, 0.5, -1.0, 0.3, 1.5, 0.2, -0.7, 0.1, 1.1, 0.4, -0.6, 0.3,
        ],
    )
}

fn lower3() -> Tensor {
    t(&[3, 3], &[2.0, 0.0, 0.0, 0.5, 1.5, 0.0, -0.3, 0.8, 1.2])
}

fn rhs3() -> Tensor {
    t(&[3], &[1.0, -2.0, 0.5])
}

fn sym(m: &Tensor) -> qb::Result<Tensor> {
    (m + m.t()?)?.mul(0.5)
}

/// Fixed weights that make a factor into a scalar without symmetry that could hide an error.
fn weights(dims: &[usize]) -> Tensor {
    let n: usize = dims.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| 0.3 + 0.17 * i as f64 - 0.05 * (i * i) as f64 / n as f64)
        .collect();
    t(dims, &v)
}

fn wsum(x: &Tensor) -> qb::Result<Tensor> {
    (x * weights(x.shape()))?.sum()
}

const TOL3: Tolerance = Tolerance {
    rtol: 1e-5,
    atol: 1e-5,
    eps: 1e-5,
    growth: 10.0,
};

/// Third-order check in both modes.
fn third<F>(f: F, args: &[Tensor]) -> qb::Result<()>
where
    F: Fn(Vec<Tensor>) -> qb::Result<Vec<Tensor>>,
{
    check_grads_with(f, args, 3, Modes::BOTH, TOL3, 7)
}

// ---------------------------------------------------------------------------------------------
// Values against the references

#[test]
fn values_of_the_solves() -> qb::Result<()> {
    let (a, b) = (M::of(&a3()), M::of(&rhs3()));
    let x = M::of(&qb::linalg::solve(a3(), rhs3())?);
    assert!(a.mul(&x).diff(&b) < 1e-14);
    let l = M::of(&lower3());
    let x = M::of(
        &qb::linalg::solve_triangular(lower3(), rhs3())
            .lower(true)
            .eval()?,
    );
    assert!(l.mul(&x).diff(&b) < 1e-14);
    let x = M::of(
        &qb::linalg::solve_triangular(lower3(), rhs3())
            .lower(true)
            .trans("T")
            .eval()?,
    );
    assert!(l.t().mul(&x).diff(&b) < 1e-14);
    // The upper triangle of a full matrix is all that is read by default.
    let x = M::of(&qb::linalg::solve_triangular(a3(), rhs3()).eval()?);
    let mut up = a.clone();
    for i in 0..3 {
        for j in 0..i {
            up.v[i * 3 + j] = 0.0;
        }
    }
    assert!(up.mul(&x).diff(&b) < 1e-14);
    let x = M::of(&qb::linalg::cho_solve(lower3(), rhs3()).eval()?);
    assert!(l.mul(&l.t()).mul(&x).diff(&b) < 1e-13);
    let x = M::of(
        &qb::linalg::cho_solve(lower3().t()?, rhs3())
            .lower(false)
            .eval()?,
    );
    assert!(l.mul(&l.t()).mul(&x).diff(&b) < 1e-13);
    Ok(())
}

#[test]
fn values_of_cholesky_det_inv_and_powers() -> qb::Result<()> {
    let s = M::of(&spd3());
    let l = M::of(&qb::linalg::cholesky(spd3())?);
    assert!(l.mul(&l.t()).diff(&s) < 1e-14);
    assert!((0..3).all(|i| l.at(i, i) > 0.0 && (i + 1..3).all(|j| l.at(i, j) == 0.0)));
    let a = M::of(&a3());
    let d = det_ref(&a);
    assert!((qb::linalg::det(a3())?.item()? - d).abs() < 1e-13 * d.abs());
    let SlogdetResult { sign, logabsdet } = qb::linalg::slogdet(a3().neg()?)?;
    assert_eq!(sign.item()?, -d.signum());
    assert!((logabsdet.item()? - d.abs().ln()).abs() < 1e-14);
    let inv = M::of(&qb::linalg::inv(a3())?);
    assert!(a.mul(&inv).diff(&M::eye(3)) < 1e-14);
    let p3 = M::of(&qb::linalg::matrix_power(a3(), 3)?);
    assert!(p3.diff(&a.mul(&a).mul(&a)) < 1e-12);
    let p0 = M::of(&qb::linalg::matrix_power(a3(), 0)?);
    assert_eq!(p0.v, M::eye(3).v);
    let pm2 = M::of(&qb::linalg::matrix_power(a3(), -2)?);
    assert!(pm2.mul(&a).mul(&a).diff(&M::eye(3)) < 1e-13);
    Ok(())
}

#[test]
fn values_of_the_decompositions() -> qb::Result<()> {
    let s = M::of(&spd3());
    let EighResult {
        eigenvalues,
        eigenvectors,
    } = qb::linalg::eigh(spd3())?;
    let (w, v) = (M::of(&eigenvalues), M::of(&eigenvectors));
    assert!(w.v.windows(2).all(|p| p[0] < p[1]));
    let mut vw = v.clone();
    for i in 0..3 {
        for j in 0..3 {
            vw.v[i * 3 + j] *= w.v[j];
        }
    }
    assert!(s.mul(&v).diff(&vw) < 1e-13, "A v = λ v");
    assert!(v.t().mul(&v).diff(&M::eye(3)) < 1e-14);
    // The trace and determinant are the sum and product of the eigenvalues.
    assert!((w.v.iter().sum::<f64>() - 9.2).abs() < 1e-13);
    assert!((w.v.iter().product::<f64>() - det_ref(&s)).abs() < 1e-12);

    let a = M::of(&tall());
    for mode in ["reduced", "complete"] {
        let QRResult { q, r } = qb::linalg::qr(tall()).mode(mode).eval()?;
        let (q, r) = (M::of(&q), M::of(&r));
        assert!(q.mul(&r).diff(&a) < 1e-14, "{mode}");
        assert!(q.t().mul(&q).diff(&M::eye(q.c)) < 1e-14, "{mode}");
        assert!((0..r.r).all(|i| (0..i.min(r.c)).all(|j| r.at(i, j) == 0.0)));
        assert!((0..3).all(|i| r.at(i, i) >= 0.0));
    }
    assert_eq!(
        qb::linalg::qr(tall()).mode("r").eval_r()?.to_vec::<f64>()?,
        qb::linalg::qr(tall()).eval()?.r.to_vec::<f64>()?
    );
    for full in [false, true] {
        let SVDResult { u, s, vh } = qb::linalg::svd(tall()).full_matrices(full).eval()?;
        let (u, s, vh) = (M::of(&u), M::of(&s), M::of(&vh));
        let mut us = M {
            r: 4,
            c: 3,
            v: vec![0.0; 12],
        };
        for i in 0..4 {
            for j in 0..3 {
                us.v[i * 3 + j] = u.at(i, j) * s.v[j];
            }
        }
        assert!(us.mul(&vh).diff(&a) < 1e-14, "full {full}");
        assert!(u.t().mul(&u).diff(&M::eye(u.c)) < 1e-14);
        assert!(vh.mul(&vh.t()).diff(&M::eye(3)) < 1e-14);
        assert!(s.v.windows(2).all(|p| p[0] > p[1]));
        // The squared singular values are the eigenvalues of aᵀ a.
        let ata = a.t().mul(&a);
        let w = M::of(&qb::linalg::eigh(Tensor::from_vec([3, 3], ata.v.clone())?)?.eigenvalues);
        for k in 0..3 {
            assert!((s.v[k] * s.v[k] - w.v[2 - k]).abs() < 1e-13);
        }
    }
    Ok(())
}

#[test]
fn values_of_lstsq_pinv_and_norms() -> qb::Result<()> {
    let a = M::of(&tall());
    let b = t(&[4], &[1.0, -1.0, 0.5, 2.0]);
    let r = qb::linalg::lstsq(tall(), &b).eval_with_residuals()?;
    let x = M::of(&r.solution);
    // Normal equations: aᵀ (a x - b) = 0.
    let mut res = a.mul(&x);
    let bm = M::of(&b);
    for (ri, bi) in res.v.iter_mut().zip(&bm.v) {
        *ri -= bi;
    }
    assert!(a.t().mul(&res).v.iter().all(|v| v.abs() < 1e-14));
    let rr: f64 = res.v.iter().map(|v| v * v).sum();
    assert!((r.residuals.item()? - rr).abs() < 1e-14);
    // Wide: the minimum-norm solution lies in the row space and solves exactly.
    let wide = tall().t()?;
    let bw = rhs3();
    let xw = M::of(&qb::linalg::lstsq(&wide, &bw).eval()?);
    let aw = M::of(&wide);
    assert!(aw.mul(&xw).diff(&M::of(&bw)) < 1e-14);
    let pinv = M::of(&qb::linalg::pinv(tall()).eval()?);
    // Moore-Penrose: a p a = a, p a p = p, (a p)ᵀ = a p, (p a)ᵀ = p a.
    assert!(a.mul(&pinv).mul(&a).diff(&a) < 1e-14);
    assert!(pinv.mul(&a).mul(&pinv).diff(&pinv) < 1e-14);
    assert!(a.mul(&pinv).diff(&a.mul(&pinv).t()) < 1e-14);
    assert!(pinv.mul(&a).diff(&M::eye(3)) < 1e-14);
    // pinv drops the singular values at or below rtol * max(s).
    let rank1 = t(&[2, 2], &[1.0, 2.0, 2.0, 4.0 + 1e-13]);
    let p = M::of(&qb::linalg::pinv(&rank1).rtol(1e-10).eval()?);
    let want = M::of(&rank1)
        .t()
        .v
        .iter()
        .map(|v| v / 25.0)
        .collect::<Vec<_>>();
    assert!(p.v.iter().zip(&want).all(|(g, w)| (g - w).abs() < 1e-10));

    let v = t(&[4], &[3.0, -4.0, 0.0, 12.0]);
    let n = |o: Ord| qb::linalg::norm(&v).ord(o).eval().unwrap().item().unwrap();
    assert_eq!(n(Ord::P(2.0)), 13.0);
    assert_eq!(n(Ord::P(1.0)), 19.0);
    assert_eq!(n(Ord::INF), 12.0);
    assert_eq!(n(Ord::NEG_INF), 0.0);
    assert_eq!(n(Ord::P(0.0)), 3.0);
    assert!((n(Ord::P(3.0)) - (27.0f64 + 64.0 + 1728.0).powf(1.0 / 3.0)).abs() < 1e-13);
    let nz = t(&[2], &[2.0, 4.0]);
    let h = qb::linalg::norm(&nz).ord(-1).eval()?.item()?;
    assert!((h - 1.0 / (0.5 + 0.25)).abs() < 1e-15);
    let h2 = qb::linalg::norm(&nz).ord(-2).eval()?.item()?;
    assert!((h2 - (0.25f64 + 0.0625).powf(-0.5)).abs() < 1e-15);
    // Matrix orders on a3.
    let m = M::of(&a3());
    let mn = |o: Ord| {
        qb::linalg::norm(a3())
            .ord(o)
            .eval()
            .unwrap()
            .item()
            .unwrap()
    };
    let row = |i: usize| (0..3).map(|j| m.at(i, j).abs()).sum::<f64>();
    let col = |j: usize| (0..3).map(|i| m.at(i, j).abs()).sum::<f64>();
    assert!((mn(Ord::INF) - (0..3).map(row).fold(0.0, f64::max)).abs() < 1e-14);
    assert!((mn(Ord::NEG_INF) - (0..3).map(row).fold(f64::MAX, f64::min)).abs() < 1e-14);
    assert!((mn(Ord::P(1.0)) - (0..3).map(col).fold(0.0, f64::max)).abs() < 1e-14);
    assert!((mn(Ord::P(-1.0)) - (0..3).map(col).fold(f64::MAX, f64::min)).abs() < 1e-14);
    let fro: f64 = m.v.iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!((mn(Ord::Fro) - fro).abs() < 1e-14);
    let s = M::of(&qb::linalg::svd(a3()).eval_s()?);
    assert!((mn(Ord::P(2.0)) - s.v[0]).abs() < 1e-14);
    assert!((mn(Ord::P(-2.0)) - s.v[2]).abs() < 1e-14);
    assert!((mn(Ord::Nuc) - s.v.iter().sum::<f64>()).abs() < 1e-13);
    // Scaling: neither overflow nor underflow before the result does.
    let big = t(&[2], &[3e200, 4e200]);
    assert!((qb::linalg::norm(&big).eval()?.item()? / 5e200 - 1.0).abs() < 1e-15);
    assert!((qb::linalg::norm(&big).ord(1).eval()?.item()? / 7e200 - 1.0).abs() < 1e-15);
    let tiny = t(&[2], &[3e-200, 4e-200]);
    assert!(
        (qb::linalg::norm(&tiny).ord(3).eval()?.item()? / 4.49794144527541e-200 - 1.0).abs()
            < 1e-12
    );
    // axis and keepdims.
    let cols = qb::linalg::norm(a3()).axis(0).keepdims(true).eval()?;
    assert_eq!(cols.shape(), &[1, 3]);
    let want: Vec<f64> = (0..3)
        .map(|j| (0..3).map(|i| m.at(i, j).powi(2)).sum::<f64>().sqrt())
        .collect();
    assert!(cols
        .to_vec::<f64>()?
        .iter()
        .zip(&want)
        .all(|(g, w)| (g - w).abs() < 1e-14));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Derivatives to third order, both modes, against central differences

#[test]
fn derivatives_of_solve_and_triangular_solves() -> qb::Result<()> {
    third(
        |v| Ok(vec![qb::linalg::solve(&v[0], &v[1])?]),
        &[a3(), rhs3()],
    )?;
    third(
        |v| {
            Ok(vec![qb::linalg::solve_triangular(&v[0], &v[1])
                .lower(true)
                .trans(1)
                .eval()?])
        },
        &[lower3(), rhs3()],
    )?;
    third(
        |v| Ok(vec![qb::linalg::cho_solve(&v[0], &v[1]).eval()?]),
        &[lower3(), rhs3()],
    )
}

#[test]
fn derivatives_of_cholesky_slogdet_det_inv_and_powers() -> qb::Result<()> {
    third(
        |v| Ok(vec![wsum(&qb::linalg::cholesky(sym(&v[0])?)?)?]),
        &[spd3()],
    )?;
    third(|v| Ok(vec![qb::linalg::slogdet(&v[0])?.logabsdet]), &[a3()])?;
    third(|v| Ok(vec![qb::linalg::det(&v[0])?]), &[a3()])?;
    third(|v| Ok(vec![wsum(&qb::linalg::inv(&v[0])?)?]), &[a3()])?;
    third(
        |v| Ok(vec![wsum(&qb::linalg::matrix_power(&v[0], 3)?)?]),
        &[a3()],
    )?;
    third(
        |v| Ok(vec![wsum(&qb::linalg::matrix_power(&v[0], -2)?)?]),
        &[a3()],
    )
}

#[test]
fn derivatives_of_eigh() -> qb::Result<()> {
    third(
        |v| {
            let e = qb::linalg::eigh(&v[0])?;
            Ok(vec![e.eigenvalues, wsum(&e.eigenvectors)?])
        },
        &[spd3()],
    )
}

#[test]
fn derivatives_of_qr() -> qb::Result<()> {
    third(
        |v| {
            let f = qb::linalg::qr(&v[0]).eval()?;
            Ok(vec![wsum(&f.q)?, wsum(&f.r)?])
        },
        &[tall()],
    )?;
    // Wide: the leading square block is of full rank.
    third(
        |v| {
            let f = qb::linalg::qr(&v[0]).eval()?;
            Ok(vec![wsum(&f.q)?, wsum(&f.r)?])
        },
        &[tall().t()?],
    )?;
    // TF11: R and the leading columns of a complete Q still differentiate.
    check_grads(
        |v| {
            let f = qb::linalg::qr(&v[0]).mode("complete").eval()?;
            let lead = f.q.index(qb::s![.., 0..3])?;
            Ok(vec![wsum(&lead)?, wsum(&f.r)?])
        },
        &[tall()],
        2,
        Modes::REVERSE,
    )
}

#[test]
fn derivatives_of_svd() -> qb::Result<()> {
    third(
        |v| {
            let f = qb::linalg::svd(&v[0]).eval()?;
            Ok(vec![f.s, wsum(&f.u)?, wsum(&f.vh)?])
        },
        &[tall()],
    )?;
    third(
        |v| Ok(vec![qb::linalg::svd(&v[0]).eval_s()?]),
        &[tall().t()?],
    )?;
    check_grads(
        |v| {
            let f = qb::linalg::svd(&v[0]).full_matrices(true).eval()?;
            let lead = f.u.index(qb::s![.., 0..3])?;
            Ok(vec![wsum(&lead)?, f.s, wsum(&f.vh)?])
        },
        &[tall()],
        2,
        Modes::REVERSE,
    )
}

#[test]
fn derivatives_of_lstsq_and_pinv() -> qb::Result<()> {
    let b = t(&[4], &[1.0, -1.0, 0.5, 2.0]);
    third(
        |v| {
            let r = qb::linalg::lstsq(&v[0], &v[1]).eval_with_residuals()?;
            Ok(vec![r.solution, r.residuals])
        },
        &[tall(), b],
    )?;
    third(
        |v| Ok(vec![qb::linalg::lstsq(&v[0], &v[1]).eval()?]),
        &[tall().t()?, rhs3()],
    )?;
    third(
        |v| Ok(vec![wsum(&qb::linalg::pinv(&v[0]).eval()?)?]),
        &[tall()],
    )
}

#[test]
fn derivatives_of_norms() -> qb::Result<()> {
    let v = t(&[4], &[3.0, -4.0, 0.5, 12.0]);
    for o in [
        Ord::P(2.0),
        Ord::P(1.0),
        Ord::INF,
        Ord::NEG_INF,
        Ord::P(3.0),
        Ord::P(-1.0),
        Ord::P(-2.0),
    ] {
        third(
            |x| Ok(vec![qb::linalg::norm(&x[0]).ord(o).eval()?]),
            std::slice::from_ref(&v),
        )?;
    }
    for o in [
        Ord::Fro,
        Ord::Nuc,
        Ord::P(2.0),
        Ord::P(-2.0),
        Ord::P(1.0),
        Ord::INF,
    ] {
        third(
            |x| Ok(vec![qb::linalg::norm(&x[0]).ord(o).eval()?]),
            &[a3()],
        )?;
    }
    third(
        |x| Ok(vec![qb::linalg::norm(&x[0]).axis(1).eval()?]),
        &[a3()],
    )?;
    // ord=0 counts nonzeros: a zero derivative.
    let g: Tensor = qb::grad(|x: Tensor| qb::linalg::norm(&x).ord(0).eval()).call(&v)?;
    assert_eq!(g.to_vec::<f64>()?, [0.0; 4]);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// vmap against a loop

fn batch(ms: &[Tensor]) -> Tensor {
    qb::stack(ms, 0).unwrap()
}

fn looped<R>(
    xs: &Tensor,
    f: impl Fn(&Tensor) -> qb::Result<R>,
    leaves: impl Fn(R) -> Vec<Tensor>,
) -> Vec<Tensor> {
    let n = xs.shape()[0];
    let per: Vec<Vec<Tensor>> = (0..n)
        .map(|i| leaves(f(&xs.index(qb::s![i as isize]).unwrap()).unwrap()))
        .collect();
    (0..per[0].len())
        .map(|k| qb::stack(&per.iter().map(|p| p[k].clone()).collect::<Vec<_>>(), 0).unwrap())
        .collect()
}

fn same(got: &[Tensor], want: &[Tensor], what: &str) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.shape(), w.shape(), "{what}");
        let (g, w) = (g.to_vec::<f64>().unwrap(), w.to_vec::<f64>().unwrap());
        assert!(
            g.iter()
                .zip(&w)
                .all(|(p, q)| (p - q).abs() <= 1e-12 * (1.0 + q.abs())),
            "{what}: {g:?} vs {w:?}"
        );
    }
}

#[test]
fn vmap_matches_a_loop_for_every_function() -> qb::Result<()> {
    let squares = batch(&[a3(), a3().mul(0.5)?.add(qb::eye(3)?)?, a3().t()?]);
    let spds = batch(&[spd3(), spd3().add(qb::eye(3)?)?, spd3().mul(2.0)?]);
    let talls = batch(&[tall(), tall().mul(-1.5)?, tall().add(0.1)?]);
    let lowers = batch(&[lower3(), lower3().mul(2.0)?, lower3().add(qb::eye(3)?)?]);
    type F = fn(&Tensor) -> qb::Result<Vec<Tensor>>;
    let one = |t: Tensor| vec![t];
    let square_fns: Vec<(&str, F)> = vec![
        ("solve", |m| Ok(vec![qb::linalg::solve(m, rhs3())?])),
        ("solve_triangular", |m| {
            Ok(vec![qb::linalg::solve_triangular(m, rhs3())
                .trans("T")
                .eval()?])
        }),
        ("slogdet", |m| {
            let r = qb::linalg::slogdet(m)?;
            Ok(vec![r.sign, r.logabsdet])
        }),
        ("det", |m| Ok(vec![qb::linalg::det(m)?])),
        ("inv", |m| Ok(vec![qb::linalg::inv(m)?])),
        ("matrix_power", |m| {
            Ok(vec![qb::linalg::matrix_power(m, -3)?])
        }),
        ("norm", |m| {
            Ok(vec![
                qb::linalg::norm(m).ord(Ord::Nuc).eval()?,
                qb::linalg::norm(m).ord(Ord::INF).eval()?,
                qb::linalg::norm(m).ord(3).axis(0).eval()?,
            ])
        }),
    ];
    for (name, f) in square_fns {
        let got: Vec<Tensor> = qb::vmap(|m: Tensor| f(&m)).call(&squares)?;
        same(&got, &looped(&squares, f, |v| v), name);
    }
    let got: Vec<Tensor> = qb::vmap(|m: Tensor| Ok(vec![qb::linalg::cholesky(&m)?])).call(&spds)?;
    same(
        &got,
        &looped(&spds, |m| qb::linalg::cholesky(m), one),
        "cholesky",
    );
    let got: EighResult = qb::vmap(|m: Tensor| qb::linalg::eigh(&m)).call(&spds)?;
    let want = looped(
        &spds,
        |m| qb::linalg::eigh(m),
        |r| vec![r.eigenvalues, r.eigenvectors],
    );
    same(&[got.eigenvalues, got.eigenvectors], &want, "eigh");
    let got: Tensor =
        qb::vmap(|m: Tensor| qb::linalg::cho_solve(&m, rhs3()).eval()).call(&lowers)?;
    same(
        &[got],
        &looped(&lowers, |m| qb::linalg::cho_solve(m, rhs3()).eval(), one),
        "cho_solve",
    );
    for mode in ["reduced", "complete"] {
        let got: QRResult =
            qb::vmap(|m: Tensor| qb::linalg::qr(&m).mode(mode).eval()).call(&talls)?;
        let want = looped(
            &talls,
            |m| qb::linalg::qr(m).mode(mode).eval(),
            |r| vec![r.q, r.r],
        );
        same(&[got.q, got.r], &want, mode);
    }
    for full in [false, true] {
        let got: SVDResult =
            qb::vmap(|m: Tensor| qb::linalg::svd(&m).full_matrices(full).eval()).call(&talls)?;
        let want = looped(
            &talls,
            |m| qb::linalg::svd(m).full_matrices(full).eval(),
            |r| vec![r.u, r.s, r.vh],
        );
        same(&[got.u, got.s, got.vh], &want, "svd");
    }
    let b = t(&[4], &[1.0, -1.0, 0.5, 2.0]);
    let lst = |m: &Tensor| {
        let r = qb::linalg::lstsq(m, &b).eval_with_residuals()?;
        Ok(vec![r.solution, r.residuals])
    };
    let got: Vec<Tensor> = qb::vmap(|m: Tensor| lst(&m)).call(&talls)?;
    same(&got, &looped(&talls, lst, |v| v), "lstsq");
    let got: Tensor = qb::vmap(|m: Tensor| qb::linalg::pinv(&m).eval()).call(&talls)?;
    same(
        &[got],
        &looped(&talls, |m| qb::linalg::pinv(m).eval(), one),
        "pinv",
    );
    // The result structs also flow through jit and grad of a function of one field.
    let j: SlogdetResult = qb::jit(|m: Tensor| qb::linalg::slogdet(&m)).call(&a3())?;
    let e = qb::linalg::slogdet(a3())?;
    assert_eq!(j.logabsdet.item()?, e.logabsdet.item()?);
    Ok(())
}

#[test]
fn vmap_of_the_iterative_solvers_matches_a_loop() -> qb::Result<()> {
    let mats = batch(&[spd3(), spd3().add(qb::eye(3)?)?, spd3().mul(2.0)?]);
    let mv = |x: &Tensor, args: &[Tensor]| args[0].matmul(x);
    let solve_cg = |m: &Tensor| -> qb::Result<Vec<Tensor>> {
        let (x, info) = qb::linalg::cg(mv, &rhs3())
            .args(&[m])
            .tol(1e-12)
            .eval_with_info()?;
        Ok(vec![x, info.iterations])
    };
    let got: Vec<Tensor> = qb::vmap(|m: Tensor| solve_cg(&m)).call(&mats)?;
    same(&got, &looped(&mats, solve_cg, |v| v), "cg");
    let solve_gm = |m: &Tensor| -> qb::Result<Vec<Tensor>> {
        Ok(vec![qb::linalg::gmres(mv, &rhs3())
            .args(&[m])
            .tol(1e-12)
            .restart(2)
            .eval()?])
    };
    let squares = batch(&[a3(), a3().add(qb::eye(3)?)?, a3().t()?]);
    let got: Vec<Tensor> = qb::vmap(|m: Tensor| solve_gm(&m)).call(&squares)?;
    let want = looped(&squares, solve_gm, |v| v);
    for (g, w) in got[0].to_vec::<f64>()?.iter().zip(want[0].to_vec::<f64>()?) {
        assert!((g - w).abs() < 1e-10);
    }
    // And the values solve the systems.
    for i in 0..3 {
        let x = M::of(&got[0].index(qb::s![i as isize])?);
        let a = M::of(&squares.index(qb::s![i as isize])?);
        assert!(a.mul(&x).diff(&M::of(&rhs3())) < 1e-10);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The iterative solvers: reverse mode to second order (forward mode is TF4 by the spec)

#[test]
fn derivatives_of_the_iterative_solvers() -> qb::Result<()> {
    let mv = |x: &Tensor, args: &[Tensor]| args[0].matmul(x);
    // cg on an SPD matrix, differentiated in the matrix and the right-hand side.
    check_grads(
        |v| {
            let m = sym(&v[0])?;
            Ok(vec![qb::linalg::cg(mv, &v[1])
                .args(&[&m])
                .tol(1e-13)
                .eval()?])
        },
        &[spd3(), rhs3()],
        2,
        Modes::REVERSE,
    )?;
    // gmres on a non-symmetric matrix: the adjoint solve uses the transposed operator.
    check_grads(
        |v| {
            Ok(vec![qb::linalg::gmres(mv, &v[1])
                .args(&[&v[0]])
                .tol(1e-13)
                .eval()?])
        },
        &[a3(), rhs3()],
        2,
        Modes::REVERSE,
    )?;
    // newton: x³ = p elementwise, against the closed forms of p^(1/3).
    let root = |p: &Tensor| {
        let cube = |x: &Tensor, args: &[Tensor]| x.powi(3)? - &args[0];
        qb::newton(cube, &qb::ones([2])?)
            .args(&[p])
            .tol(1e-12)
            .eval()
    };
    let p = t(&[2], &[8.0, 27.0]);
    let second: Tensor = qb::grad(|p: Tensor| {
        qb::grad(|q: Tensor| root(&q)?.sum())
            .call::<Tensor, Tensor>(&p)?
            .sum()
    })
    .call(&p)?;
    let want: Vec<f64> = [8.0f64, 27.0]
        .iter()
        .map(|p| -2.0 / 9.0 * p.powf(-5.0 / 3.0))
        .collect();
    for (g, w) in second.to_vec::<f64>()?.iter().zip(&want) {
        assert!((g - w).abs() < 1e-8 * w.abs(), "{g} vs {w}");
    }
    check_grads(|v| Ok(vec![root(&v[0])?]), &[p], 2, Modes::REVERSE)
}

#[test]
fn result_structs_save_and_load() -> qb::Result<()> {
    let svd = qb::linalg::svd(tall()).eval()?;
    let mut bytes = Vec::new();
    qb::save(&mut bytes, &svd)?;
    let back: SVDResult = qb::load_as(&mut bytes.as_slice())?;
    for (a, b) in [(&svd.u, &back.u), (&svd.s, &back.s), (&svd.vh, &back.vh)] {
        assert_eq!(a.shape(), b.shape());
        assert_eq!(a.to_vec::<f64>()?, b.to_vec::<f64>()?);
    }
    let sd = qb::linalg::slogdet(a3())?;
    let mut bytes = Vec::new();
    qb::save(&mut bytes, &sd)?;
    let back: SlogdetResult = qb::load_as(&mut bytes.as_slice())?;
    assert_eq!(back.logabsdet.item()?, sd.logabsdet.item()?);
    Ok(())
}
