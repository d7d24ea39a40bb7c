//! Hunting a NaN that only the gradient shows. The loss below takes `sqrt` of a quantity that
//! is negative for some samples and drops those with `where`: the loss is finite, but its
//! gradient is NaN, because the backward pass of `sqrt` evaluates `0.5 / sqrt(v)` at the
//! dropped samples too and `0 * NaN` is NaN. `jit(..).check_nans(true)` stops at the first
//! non-finite value made from finite operands and names the line of this file, the derivative
//! rule and the operands' ranges; the fix is the guide's: guard the input of `sqrt` as well.
//! Run with `cargo run --release --example nan_hunt`.

use qb::Tensor;
use quabla as qb;
use std::io::Write;

/// Mean "energy" `sqrt(w * x - 1)` over the samples where it is defined.
fn loss(w: Tensor, xs: &Tensor) -> qb::Result<Tensor> {
    let v = (xs * &w)?.sub(1.0)?;
    let defined = v.greater(0.0)?;
    qb::where_(&defined, &v.sqrt()?, 0.0)?.mean()
}

/// The same loss with the input of `sqrt` guarded (numerics of the guide, "Hunting NaN").
fn loss_fixed(w: Tensor, xs: &Tensor) -> qb::Result<Tensor> {
    let v = (xs * &w)?.sub(1.0)?;
    let defined = v.greater(0.0)?;
    let safe = qb::where_(&defined, &v, 1.0)?;
    qb::where_(&defined, &safe.sqrt()?, 0.0)?.mean()
}

fn main() -> qb::Result<()> {
    run(&mut std::io::stdout().lock())
}

/// The hunt, written to `out`.
pub fn run(out: &mut impl Write) -> qb::Result<()> {
    let io = |e: std::io::Error| qb::Error::user(e.to_string());
    let xs = qb::linspace(0.0, 2.0, 5)?;
    let w = qb::array(1.5)?;
    let value = loss(w.clone(), &xs)?.item()?;
    let gradient = |w: Tensor| qb::grad(|w: Tensor| loss(w, &xs)).call::<Tensor, Tensor>(&w);
    let g: Tensor = qb::jit(gradient).call(&w)?;
    writeln!(
        out,
        "loss = {value:.6} (finite), gradient = {:?}",
        g.item()?
    )
    .map_err(io)?;

    writeln!(out, "\nthe same gradient with check_nans(true):").map_err(io)?;
    match qb::jit(gradient).check_nans(true).call(&w) {
        Err(qb::Error::NonFinite { message }) => writeln!(out, "{message}").map_err(io)?,
        Err(other) => return Err(other),
        Ok(g) => writeln!(out, "no non-finite value (gradient {:?})", g.item()?).map_err(io)?,
    }

    let fixed = |w: Tensor| qb::grad(|w: Tensor| loss_fixed(w, &xs)).call::<Tensor, Tensor>(&w);
    let g: Tensor = qb::jit(fixed).check_nans(true).call(&w)?;
    let value = loss_fixed(w, &xs)?.item()?;
    writeln!(
        out,
        "\nwith the input of sqrt guarded: loss = {value:.6}, gradient = {:.6}",
        g.item()?
    )
    .map_err(io)
}
