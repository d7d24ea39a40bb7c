//! Lowering: the frozen plan of `f(x) = sum(sin(x) * x)` for a `[16]` float64 argument, as
//! text, and its line count. Run with `cargo run --release --example lower`.

use qb::prelude::*;
use qb::{ShapeDtype, Tensor};
use quabla as qb;
use std::io::Write;

fn main() -> qb::Result<()> {
    run(&mut std::io::stdout().lock())
}

/// Writes the plan text and `lines=<n>` to `out`.
pub fn run(out: &mut impl Write) -> qb::Result<()> {
    let f = qb::jit(|x: Tensor| x.sin().mul(&x).sum()).arg_names(&["x"]);
    let text = f.lower(&ShapeDtype::new([16], qb::F64))?.as_text();
    let _ = write!(out, "{text}");
    let _ = writeln!(out, "lines={}", text.lines().count());
    Ok(())
}
