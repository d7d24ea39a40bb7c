//! The graph-size table of the performance chapter: the line count of the lowered text of a
//! per-point second derivative, stacked from a Rust loop versus batched with `vmap`, for 4, 8,
//! 16 and 64 points. The loop grows affinely with the points; `vmap` stays constant.
//! Run with `cargo run --release --example seed_graph_size`.

use qb::prelude::*;
use qb::{ShapeDtype, Tensor};
use quabla as qb;
use std::io::Write;

/// `grad(grad(|t| sin(t)**2))` at one point.
fn d2(t: Tensor) -> qb::Result<Tensor> {
    let d1 = |u: Tensor| qb::grad(|v: Tensor| v.sin().powi(2)).call::<Tensor, Tensor>(&u);
    qb::grad(d1).call::<Tensor, Tensor>(&t)
}

fn per_point_loop(xs: Tensor) -> qb::Result<Tensor> {
    let parts = (0..xs.shape()[0])
        .map(|i| d2(xs.index(qb::s![i as isize])?))
        .collect::<qb::Result<Vec<_>>>()?;
    qb::stack(&parts, 0)
}

fn per_point_vmap(xs: Tensor) -> qb::Result<Tensor> {
    qb::vmap(d2).call::<Tensor>(&xs)
}

fn lines(f: fn(Tensor) -> qb::Result<Tensor>, n: usize) -> qb::Result<usize> {
    Ok(qb::jit(f)
        .lower(&ShapeDtype::new([n], qb::F64))?
        .as_text()
        .lines()
        .count())
}

fn main() -> qb::Result<()> {
    run(&mut std::io::stdout().lock())
}

/// Writes one line per point count to `out`.
pub fn run(out: &mut impl Write) -> qb::Result<()> {
    for n in [4, 8, 16, 64] {
        let _ = writeln!(
            out,
            "points={n} loop_lines={} vmap_lines={}",
            lines(per_point_loop, n)?,
            lines(per_point_vmap, n)?
        );
    }
    Ok(())
}
