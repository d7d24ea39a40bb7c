//! A first look at Quabla: eager arrays, weak scalars, strict dtypes, masks, indexing and
//! reductions. Run with `cargo run --release --example quickstart`.

use qb::prelude::*;
use qb::s;
use quabla as qb;
use std::io::Write;

fn main() -> qb::Result<()> {
    run(&mut std::io::stdout().lock())
}

/// Writes the tour to `out` (the tests run it and check every line).
pub fn run(out: &mut impl Write) -> qb::Result<()> {
    let mut say = |line: String| {
        let _ = writeln!(out, "{line}");
    };
    // Elementwise chains and reductions run eagerly on the CPU reference backend.
    let x = qb::array([0.0, 0.5, 1.0])?;
    say(format!("sum(sin(x)**2)      = {}", x.sin().powi(2).sum()?));

    // Rust f64 operands are weak scalars: they adopt the dtype of the array they meet.
    let r = qb::F32.array([1.0, 2.0, 3.0])?;
    say(format!("0.5 * r (float32)   = {}", (0.5 * &r)?));

    // float32 and float64 never mix implicitly.
    match &qb::array([1.0, 2.0, 3.0])? + &r {
        Err(e) => say(format!("f64 + f32           -> error: {e}")),
        Ok(t) => say(format!("unexpected: {t}")),
    }

    // Masks, selection and the NaN rules of masking.
    let m = (r.greater(1.0)? & r.less(3.0)?)?;
    say(format!("mask                = {m}"));
    say(format!(
        "where(mask, r, 0)   = {}",
        qb::where_(&m, &r, 0.0)?
    ));

    // Static indexing, gather and scatter_add.
    let x23 = qb::array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])?;
    say(format!("x23                 = {x23}"));
    say(format!(
        "x23[::-1, 0]        = {}",
        x23.index(s![..;-1, 0])?
    ));
    say(format!("x23.gather([2, 0])  = {}", x23.gather([2, 0], 1)?));
    let scattered = qb::zeros([3])?.scatter_add([0, 2, 0], qb::array([1.0, 2.0, 3.0])?, 0)?;
    say(format!("scatter_add         = {scattered}"));

    // Reductions with axes and keepdims; matmul with NumPy rules.
    say(format!("sum over axis 0     = {}", x23.sum_axes(0)?));
    say(format!("max, keepdims       = {}", x23.max_keepdims(1)?));
    say(format!("x23 @ x23.T         = {}", x23.matmul(x23.t()?)?));

    // IEEE results instead of exceptions.
    say(format!(
        "log10(0), sqrt(-1)  = {} {}",
        qb::log10(qb::array(0.0)?)?,
        qb::sqrt(qb::array(-1.0)?)?
    ));
    Ok(())
}
