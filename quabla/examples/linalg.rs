//! Acceptance E73-E82 (spec acceptance.md §10): `qb::linalg` and `qb::newton`, one line per
//! case, then the plan sizes of the first and third derivatives of `logdet(cholesky(A))`
//! (docs/linalg.md). Run with `cargo run --release --example linalg`.

use qb::prelude::*;
use qb::{ShapeDtype, Tensor};
use quabla as qb;
use std::io::Write;

fn main() -> qb::Result<()> {
    run(&mut std::io::stdout().lock())?;
    plan_sizes(&mut std::io::stdout().lock(), &[4, 16, 64])
}

fn laplacian(x: &Tensor, args: &[Tensor]) -> qb::Result<Tensor> {
    let n = x.shape()[0] as isize;
    let zero = qb::zeros([1])?;
    let left = qb::concat(&[&zero, &x.index(qb::s![0..n - 1])?], 0)?;
    let right = qb::concat(&[&x.index(qb::s![1..n])?, &zero], 0)?;
    &args[0] * ((x.mul(2.0)? - left)? - right)?
}

fn total(k: &Tensor) -> qb::Result<Tensor> {
    qb::linalg::cg(laplacian, &qb::ones([8])?)
        .args(&[k])
        .tol(1e-10)
        .eval()?
        .sum()
}

fn root(p: &Tensor) -> qb::Result<Tensor> {
    let cube = |x: &Tensor, args: &[Tensor]| x.powi(3)? - &args[0];
    qb::newton(cube, &qb::array([1.0, 1.0])?).args(&[p]).eval()
}

/// Writes E73-E82, one line each, to `out`.
pub fn run(out: &mut impl Write) -> qb::Result<()> {
    let a = qb::array([[4.0, 1.0], [1.0, 3.0]])?;
    let b = qb::array([1.0, 2.0])?;
    let m32 = qb::array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])?;
    let sd = qb::linalg::slogdet(&a)?;
    let _ = writeln!(
        out,
        "E73 solve={} det={} slogdet={} eigenvalues={}",
        qb::linalg::solve(&a, &b)?,
        qb::linalg::det(&a)?,
        sd,
        qb::linalg::eigh(&a)?.eigenvalues
    );
    let qr = qb::linalg::qr(&m32).eval()?;
    let svd = qb::linalg::svd(&m32).eval()?;
    let _ = writeln!(
        out,
        "E74 Q={:?} R={:?} U={:?} S={:?} Vh={:?} complete_Q={:?} r={:?} s_only={:?}",
        qr.q.shape(),
        qr.r.shape(),
        svd.u.shape(),
        svd.s.shape(),
        svd.vh.shape(),
        qb::linalg::qr(&m32).mode("complete").eval()?.q.shape(),
        qb::linalg::qr(&m32).mode("r").eval_r()?.shape(),
        qb::linalg::svd(&m32).eval_s()?.shape()
    );
    let _ = writeln!(
        out,
        "E75 lstsq={}",
        qb::linalg::lstsq(
            qb::array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])?,
            qb::array([1.0, 2.0, 2.0])?
        )
        .eval()?
    );
    let stack = qb::stack(&[a.clone(), a.mul(2.0)?], 0)?;
    let _ = writeln!(
        out,
        "E76 {:?} {:?}",
        qb::linalg::solve(&stack, &b)?.shape(),
        qb::linalg::solve(&stack, qb::ones([2, 2, 3])?)?.shape()
    );
    let g1: Tensor = qb::grad(|m: Tensor| Ok(qb::linalg::slogdet(&m)?.logabsdet)).call(&a)?;
    let g2: Tensor =
        qb::grad(|m: Tensor| qb::linalg::eigh(&m)?.eigenvalues.powi(2).sum()).call(&a)?;
    // Flattened, so that each case stays on one line.
    let _ = writeln!(
        out,
        "E77 grad_logabsdet={} grad_sum_eigenvalues_sq={}",
        g1.reshape([-1])?,
        g2.reshape([-1])?
    );
    let _ = writeln!(
        out,
        "E78 fro={} l1={}",
        qb::linalg::norm(&a).ord("fro").eval()?,
        qb::linalg::norm(&b).ord(1).eval()?
    );
    let s = qb::array([[1.0, 2.0], [2.0, 4.0]])?;
    let solve_err = qb::linalg::solve(&s, &b).unwrap_err();
    let grad_err = qb::grad(|m: Tensor| Ok(qb::linalg::slogdet(&m)?.logabsdet))
        .call::<Tensor, Tensor>(&s)
        .unwrap_err();
    let _ = writeln!(
        out,
        "E79 solve: {solve_err}; slogdet={}; det={}; grad: {grad_err}",
        qb::linalg::slogdet(&s)?,
        qb::linalg::det(&s)?
    );
    let (x, info) = qb::linalg::cg(laplacian, &qb::ones([8])?)
        .args(&[qb::array(1.0)?])
        .eval_with_info()?;
    let _ = writeln!(out, "E80 x={x} info={info}");
    let k = qb::array(2.0)?;
    let g: Tensor = qb::grad(|k: Tensor| total(&k)).call(&k)?;
    let jg: Tensor =
        qb::jit(|k: Tensor| qb::grad(|k: Tensor| total(&k)).call::<Tensor, Tensor>(&k)).call(&k)?;
    let v: Tensor = qb::vmap(|k: Tensor| total(&k)).call(&qb::array([1.0, 2.0])?)?;
    let jvp_err = qb::jvp(|k: Tensor| total(&k), &k, &qb::array(1.0)?).unwrap_err();
    let _ = writeln!(out, "E81 grad={g} jit_grad={jg} vmap={v} jvp: {jvp_err}");
    let p = qb::array([8.0, 27.0])?;
    let gp: Tensor = qb::grad(|p: Tensor| root(&p)?.sum()).call(&p)?;
    let _ = writeln!(out, "E82 root={} grad={gp}", root(&p)?);
    Ok(())
}

/// `logdet(cholesky(a))` of a symmetric `a` (the symmetric part of the argument, so that every
/// direction of the argument is a symmetric perturbation).
fn logdet(a: &Tensor) -> qb::Result<Tensor> {
    let s = (a + a.t()?)?.mul(0.5)?;
    qb::linalg::cholesky(&s)?.diagonal()?.log()?.sum()?.mul(2.0)
}

/// The first derivative, reverse mode.
fn d1(a: Tensor) -> qb::Result<Tensor> {
    qb::grad(|a: Tensor| logdet(&a)).call(&a)
}

/// A fixed direction for the directional derivatives.
fn direction(n: usize) -> qb::Result<Tensor> {
    qb::eye(n)?.add(qb::ones([n, n])?.mul(0.01)?)
}

/// The third derivative, reverse over reverse over reverse: the gradient of
/// `<grad <grad logdet, V>, V>`.
fn d3(a: Tensor) -> qb::Result<Tensor> {
    let n = a.shape()[0];
    let d2 = move |a: Tensor| -> qb::Result<Tensor> {
        let inner = move |a: Tensor| (d1(a)? * direction(n)?)?.sum();
        qb::grad(inner).call::<Tensor, Tensor>(&a)
    };
    let outer = move |a: Tensor| (d2(a)? * direction(n)?)?.sum();
    qb::grad(outer).call(&a)
}

fn plan_lines(f: fn(Tensor) -> qb::Result<Tensor>, n: usize) -> qb::Result<usize> {
    Ok(qb::jit(f)
        .lower(&ShapeDtype::new([n, n], qb::F64))?
        .as_text()
        .lines()
        .count())
}

/// Writes the plan sizes (lines of the lowered text, one node per line) of the first and third
/// derivatives of `logdet(cholesky(a))` for each `n`.
pub fn plan_sizes(out: &mut impl Write, sizes: &[usize]) -> qb::Result<()> {
    for &n in sizes {
        let _ = writeln!(
            out,
            "plan n={n} first_order_nodes={} third_order_nodes={}",
            plan_lines(d1, n)?,
            plan_lines(d3, n)?
        );
    }
    Ok(())
}
