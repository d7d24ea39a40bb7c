//! How the memory of loop derivatives grows with the trip count: the first, second and third
//! derivative (reverse over reverse, and forward over reverse over reverse) of a `fori_loop`
//! with a 64-element carry, for T = 1e2, 1e3 and 1e4 trips, each lowered, compiled for the CPU
//! and run once. The figure is the bytes the executor's buffer pool holds after the run: every
//! buffer the run ever needed at once (region bodies included), less the outputs. A full carry
//! tape would grow linearly in T; the checkpointed loop derivatives grow as √T.
//! docs/loops.md reads its output. Run with `cargo run --release --example loop_memory`.

use qb::Tensor;
use quabla as qb;
use quabla_backend::{Executable, HostTensor};
use quabla_cpu::CpuBackend;
use std::io::Write;

/// The carry's length.
pub const WIDTH: usize = 64;

fn looped(a: &Tensor, trips: usize) -> qb::Result<Tensor> {
    let x0 = qb::linspace(0.1, 0.9, WIDTH)?;
    qb::fori_loop(
        0,
        trips,
        |_, x, ops| (&x * &ops[0])?.sin()?.add(&x.mul(0.5)?),
        &x0,
    )
    .operands(&[a])
    .eval()?
    .sum()
}

/// The derivative orders measured, by name.
pub const ORDERS: [&str; 4] = ["value", "grad", "grad∘grad", "jvp∘grad∘grad"];

fn derivative(order: usize, a: Tensor, trips: usize) -> qb::Result<Tensor> {
    let f = move |a: Tensor| looped(&a, trips);
    let g = move |a: Tensor| qb::grad(f).call::<Tensor, Tensor>(&a);
    let gg = move |a: Tensor| qb::grad(g).call::<Tensor, Tensor>(&a);
    match order {
        0 => f(a),
        1 => g(a),
        2 => gg(a),
        _ => Ok(qb::jvp(gg, &a, &qb::ones_like(&a)?)?.1),
    }
}

/// Bytes the CPU executor pools after one run of the jitted derivative of `order`.
pub fn pooled_bytes(order: usize, trips: usize) -> qb::Result<usize> {
    let a = qb::array(0.9)?;
    let lowered = qb::jit(move |a: Tensor| derivative(order, a, trips)).lower(&a)?;
    let exe = CpuBackend::default()
        .compile_plan(lowered.program().plan())
        .map_err(qb::Error::from)?;
    let input = HostTensor::new(
        quabla_ir::Shape::scalar(),
        quabla_ir::HostData::from_f64(qb::F64, vec![0.9]),
    );
    exe.run(&[input]).map_err(qb::Error::from)?;
    Ok(exe.pooled_bytes())
}

/// Writes one row per order: the pooled bytes at each trip count.
pub fn run(out: &mut impl Write, trip_counts: &[usize]) -> qb::Result<Vec<Vec<usize>>> {
    let io = |e: std::io::Error| qb::Error::user(e.to_string());
    write!(out, "{:<16}", "derivative").map_err(io)?;
    for t in trip_counts {
        write!(out, "{:>14}", format!("T={t}")).map_err(io)?;
    }
    writeln!(out).map_err(io)?;
    let mut table = Vec::new();
    for (order, name) in ORDERS.iter().enumerate() {
        write!(out, "{name:<16}").map_err(io)?;
        let mut row = Vec::new();
        for &t in trip_counts {
            let bytes = pooled_bytes(order, t)?;
            write!(out, "{:>14}", format!("{:.1} KiB", bytes as f64 / 1024.0)).map_err(io)?;
            row.push(bytes);
        }
        writeln!(out).map_err(io)?;
        table.push(row);
    }
    writeln!(
        out,
        "(a carry is {} bytes; a full tape of T carries is T times that)",
        WIDTH * 8
    )
    .map_err(io)?;
    Ok(table)
}

fn main() -> qb::Result<()> {
    run(&mut std::io::stdout().lock(), &[100, 1_000, 10_000]).map(|_| ())
}
