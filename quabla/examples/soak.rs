//! The soak run of `cargo xtask soak`: 10^6 cached `jit` calls and 10^5 eager operations,
//! printing the resident memory (RSS) after 10^4 and 10^6 calls, so a leak per call shows as
//! growth between the two. Run with `cargo run --release --example soak [-- --calls N]`.
//!
//! Memory is read from `/proc/self/statm` (Linux); elsewhere it prints `rss=unknown`.

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;

/// Resident memory in KiB, where the platform tells it.
fn rss_kib() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4)
}

fn rss_text() -> String {
    rss_kib().map_or("unknown".into(), |k| format!("{k} KiB"))
}

fn main() -> qb::Result<()> {
    let mut calls: u64 = 1_000_000;
    let mut eager_ops: u64 = 100_000;
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).and_then(|v| v.parse().ok());
        match (pair[0].as_str(), value) {
            ("--calls", Some(n)) => calls = n,
            ("--eager-ops", Some(n)) => eager_ops = n,
            _ => {
                return Err(qb::Error::InvalidArgument {
                    message: format!("usage: soak [--calls N] [--eager-ops N], got {args:?}"),
                })
            }
        }
    }
    let f = qb::jit(|x: Tensor| x.sin().mul(&x).add(1.0));
    let x = qb::linspace(0.0, 1.0, 16)?;
    let checkpoints = [10_000u64.min(calls), calls];
    let mut at_checkpoint = Vec::new();
    let start = std::time::Instant::now();
    let mut sink = 0.0;
    for i in 1..=calls {
        let y = f.call(&x)?;
        if i.is_multiple_of(1000) {
            sink += y.to_vec::<f64>()?[1];
        }
        if checkpoints.contains(&i) && at_checkpoint.len() < 2 {
            let rss = rss_kib();
            println!("jit calls={i} rss={}", rss_text());
            at_checkpoint.push(rss);
        }
    }
    let per_call = start.elapsed().as_secs_f64() / calls.max(1) as f64;
    let mut t = x.clone();
    for _ in 0..eager_ops {
        t = t.mul(0.5)?.add(&x)?;
    }
    println!("eager ops={eager_ops} rss={}", rss_text());
    if let [Some(a), Some(b)] = at_checkpoint[..] {
        println!(
            "growth {} KiB between {} and {} calls ({:.0} ns per cached call; checksum {:.3})",
            b as i64 - a as i64,
            checkpoints[0],
            checkpoints[1],
            per_call * 1e9,
            sink + t.sum()?.item()?
        );
    }
    Ok(())
}
