//! The benchmark workloads of `cargo xtask bench`: each prints one line
//! `workload=<name> seconds=<median seconds>`. Run in release mode through the xtask, which
//! times the same workloads in JAX with `--vs-jax`.

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::time::Instant;

/// Median wall time of `runs` calls after one warm-up call.
fn median_seconds(runs: usize, mut f: impl FnMut() -> qb::Result<qb::Tensor>) -> qb::Result<f64> {
    f()?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let out = f()?;
        std::hint::black_box(&out);
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[runs / 2])
}

fn main() -> qb::Result<()> {
    let x = qb::F32.linspace(-3.0, 3.0, 1_000_000)?;
    let t = median_seconds(15, || x.sin().powi(2).add(x.cos()))?;
    println!("workload=chain_f32_1e6 seconds={t:e}");

    for (name, dtype) in [("matmul_f32_512", qb::F32), ("matmul_f64_512", qb::F64)] {
        let a = dtype.linspace(-1.0, 1.0, 512 * 512)?.reshape([512, 512])?;
        let b = a.t()?.sin()?;
        let t = median_seconds(15, || a.matmul(&b))?;
        println!("workload={name} seconds={t:e}");
    }

    let big = qb::linspace(0.0, 1.0, 10_000_000)?;
    let t = median_seconds(15, || big.sum())?;
    println!("workload=sum_f64_1e7 seconds={t:e}");

    let chain = qb::jit(|x: Tensor| x.sin().powi(2).add(x.cos()));
    let t = median_seconds(15, || chain.call(&x))?;
    println!("workload=jit_elementwise_1e6_f32 seconds={t:e}");

    // A cached call: signature, lookup, bind, run. Timed over batches of calls.
    let tiny = qb::jit(|x: Tensor| (&x * 2.0).add(1.0));
    let x8 = qb::F32.ones([8])?;
    const CALLS: usize = 20_000;
    let per_call = median_seconds(15, || {
        let mut out = tiny.call(&x8)?;
        for _ in 1..CALLS {
            out = tiny.call(&x8)?;
        }
        Ok(out)
    })? / CALLS as f64;
    println!("workload=jit_call_tiny seconds={per_call:e}");

    // Trace, compile and run a fresh 200-node function.
    let x64 = qb::ones([64])?;
    let t = median_seconds(5, || {
        let f = qb::jit(|x: Tensor| {
            let mut x = x;
            for i in 0..100 {
                x = (x.sin()? * (1.0 + i as f64 * 1e-3))?;
            }
            Ok(x)
        });
        f.call(&x64)
    })?;
    println!("workload=first_call_200_nodes seconds={t:e}");
    Ok(())
}
