//! Second derivatives by nesting `grad`: `grad(grad(sin(x)**2))` at a few points (the closed
//! form is `2 cos(2x)`). Run with `cargo run --release --example derivatives`.

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::io::Write;

/// `d²/dx² sin(x)²` at `x`.
pub fn second_derivative(x: f64) -> qb::Result<f64> {
    let d1 = |t: Tensor| qb::grad(|u: Tensor| u.sin().powi(2)).call::<Tensor, Tensor>(&t);
    let d2: Tensor = qb::grad(d1).call(&x)?;
    d2.item()
}

fn main() -> qb::Result<()> {
    run(&mut std::io::stdout().lock())
}

/// Writes `x=<x> d2=<value>` for x = 0, 0.5, 1, 2.
pub fn run(out: &mut impl Write) -> qb::Result<()> {
    for x in [0.0, 0.5, 1.0, 2.0] {
        let _ = writeln!(out, "x={x} d2={}", second_derivative(x)?);
    }
    Ok(())
}
