//! The performance chapter's `fd_check`: reverse-mode gradients against central finite
//! differences in float64, along a fixed direction, for three functions.
//! Run with `cargo run --release --example fd_check`.

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::io::Write;

type Function = fn(Tensor) -> qb::Result<Tensor>;

/// The functions checked: name and definition.
pub fn functions() -> Vec<(&'static str, Function)> {
    vec![
        ("sum(sin(x)**2*exp(x))", |x| {
            x.sin().powi(2).mul(x.exp()).sum()
        }),
        ("sum(sqrt(1+x**2)*cos(x))", |x| {
            x.powi(2).add(1.0).sqrt().mul(x.cos()).sum()
        }),
        ("sum(sigmoid(x)*x**3)", |x| x.sigmoid().mul(x.powi(3)).sum()),
    ]
}

/// `(analytic, numeric)`: `sum(grad(f)(x) * v)` and `(f(x + eps v) - f(x - eps v)) / (2 eps)`.
pub fn fd_check(f: Function, x: &Tensor, v: &Tensor, eps: f64) -> qb::Result<(f64, f64)> {
    let g: Tensor = qb::grad(f).call(x)?;
    let analytic = g.mul(v).sum()?.item()?;
    let up = f((x + v.mul(eps)?)?)?.item()?;
    let down = f((x - v.mul(eps)?)?)?.item()?;
    Ok((analytic, (up - down) / (2.0 * eps)))
}

fn main() -> qb::Result<()> {
    run(&mut std::io::stdout().lock())
}

/// Writes one line per function to `out`.
pub fn run(out: &mut impl Write) -> qb::Result<()> {
    let x = qb::array([0.3, -0.7, 1.1, 0.05, -1.6])?;
    let v = qb::array([0.5, 0.1, -0.8, 0.3, 0.6])?;
    for (name, f) in functions() {
        let (a, n) = fd_check(f, &x, &v, 1e-6)?;
        let _ = writeln!(out, "f={name} analytic={a} numeric={n}");
    }
    Ok(())
}
