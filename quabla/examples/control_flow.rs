//! Differentiable control flow: a `cond` on the sign of x, a `fori_loop`, a `scan` of
//! cumulative products and a `while_loop` of Newton iterations, each jitted (one region node
//! each) and differentiated. Prints `name=<case> value=<v> grad=<g>`; every value and
//! gradient matches its closed form (asserted by `quabla/tests/control_flow.rs` too). The
//! `while_loop` derivative is forward mode (`jvp`), the mode a data-dependent loop supports.

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;

/// `x^2` for `x > 0`, `-x^3` otherwise.
pub fn sign_cond(x: Tensor) -> qb::Result<Tensor> {
    qb::cond(
        &x.greater(0.0)?,
        |o| o[0].powi(2),
        |o| o[0].powi(3)?.neg(),
        &[&x],
    )
}

/// `x * 1.01^100` by 100 multiplications.
pub fn compound(x: Tensor) -> qb::Result<Tensor> {
    qb::fori_loop(0, 100, |_, c, _| &c * 1.01, &x).eval()
}

/// The sum of the cumulative products of `[x, x + 1, x + 2, x + 3]`, whose elements the scan
/// reads with a one-hot weighting of its traced index.
pub fn cumulative_products(x: Tensor) -> qb::Result<Tensor> {
    let sequence = (&x + qb::arange(4.0)?)?;
    let (_, ys) = qb::scan(
        |c, i, ops| {
            let hot = qb::arange(4.0)?.equal(i.tensor())?;
            let factor = qb::where_(&hot, &ops[0], 0.0)?.sum()?;
            let c = (&c * &factor)?;
            Ok((c.clone(), c))
        },
        &qb::array(1.0)?,
        4,
    )
    .operands(&[sequence])
    .eval()?;
    ys.sum()
}

/// `sqrt(a)` by Newton iterations until `|x^2 - a| <= 1e-12 a`.
pub fn newton_sqrt(a: Tensor) -> qb::Result<Tensor> {
    qb::while_loop(
        |x, ops| (x * x - &ops[0]).abs().greater(1e-12 * &ops[0]),
        |x, ops| (&x + &ops[0] / &x).mul(0.5),
        &a,
    )
    .operands(&[&a])
    .eval()
}

/// A function of one tensor, as the cases are.
type Case = fn(Tensor) -> qb::Result<Tensor>;

pub fn main() -> qb::Result<()> {
    let cases: [(&str, Case, f64); 3] = [
        ("cond_sign", sign_cond, -1.5),
        ("fori_compound", compound, 2.0),
        ("scan_cumprod", cumulative_products, 0.5),
    ];
    for (name, f, x) in cases {
        let value: Tensor = qb::jit(f).call(&qb::array(x)?)?;
        let grad: Tensor = qb::grad(f).call(&x)?;
        println!("name={name} value={} grad={}", value.item()?, grad.item()?);
    }
    let value: Tensor = qb::jit(newton_sqrt).call(&qb::array(2.0)?)?;
    let (_, tangent) = qb::jvp(newton_sqrt, &qb::array(2.0)?, &qb::array(1.0)?)?;
    println!(
        "name=while_newton_sqrt2 value={} grad={}",
        value.item()?,
        tangent.item()?
    );
    Ok(())
}
