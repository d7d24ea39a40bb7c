//! The cost of a cached `jit` call on a tiny input: signature, lookup, bind, run and result
//! rebuild, with no work worth the name in the plan. Prints nanoseconds per call (best of
//! several batches). `cargo run --release -p quabla --example jit_call_overhead [calls]`.

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::time::Instant;

fn main() -> qb::Result<()> {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let tiny = qb::jit(|x: Tensor| (&x * 2.0).add(1.0));
    let x8 = qb::F32.ones([8])?;
    let mut out = tiny.call(&x8)?;
    let mut best = f64::INFINITY;
    for _ in 0..7 {
        let start = Instant::now();
        for _ in 0..calls {
            out = tiny.call(&x8)?;
        }
        best = best.min(start.elapsed().as_secs_f64() / calls as f64);
    }
    std::hint::black_box(&out);
    println!("jit_call_tiny {:.1} ns per call", best * 1e9);
    Ok(())
}
