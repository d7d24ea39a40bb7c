//! The soak run of `cargo xtask soak`: 10^6 cached `jit` calls, 10^5 eager operations and
//! 10^6 `Trainer` steps of a small regression model, printing the resident memory (RSS) after
//! 10^4 and after 10^6 calls or steps, so a leak per call shows as growth between the two. Run
//! with `cargo run --release --example soak [-- --calls N --eager-ops N --steps N]`.
//!
//! Memory is read from `/proc/self/statm` (Linux); elsewhere it prints `rss=unknown`.

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::collections::BTreeMap;

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
    let mut steps: u64 = 1_000_000;
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).and_then(|v| v.parse().ok());
        match (pair[0].as_str(), value) {
            ("--calls", Some(n)) => calls = n,
            ("--eager-ops", Some(n)) => eager_ops = n,
            ("--steps", Some(n)) => steps = n,
            _ => {
                return Err(qb::Error::InvalidArgument {
                    message: format!(
                        "usage: soak [--calls N] [--eager-ops N] [--steps N], got {args:?}"
                    ),
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
    trainer_soak(steps)
}

/// `steps` Adam steps of a linear regression through one `Trainer`.
fn trainer_soak(steps: u64) -> qb::Result<()> {
    type Params = BTreeMap<String, Tensor>;
    let x = qb::linspace(-1.0, 1.0, 32)?.reshape([32, 1])?;
    let y = (x.mul(3.0)? - 0.5)?;
    let params: Params = BTreeMap::from([
        ("w".to_string(), qb::zeros([1, 1])?),
        ("b".to_string(), qb::zeros([1])?),
    ]);
    let loss =
        |p: &Params, d: &(Tensor, Tensor)| (d.0.matmul(&p["w"])? + &p["b"] - &d.1).powi(2).mean();
    let opt = qb::optim::Adam::new(qb::optim::exponential_decay(0.1, 100_000, 0.5));
    let mut trainer = qb::optim::Trainer::new(loss, params, opt, (x, y)).build()?;
    let checkpoints = [10_000u64.min(steps), steps];
    let mut at_checkpoint = Vec::new();
    let start = std::time::Instant::now();
    for i in 1..=steps {
        trainer.step()?;
        if checkpoints.contains(&i) && at_checkpoint.len() < 2 {
            let rss = rss_kib();
            println!("trainer steps={i} rss={}", rss_text());
            at_checkpoint.push(rss);
        }
    }
    let per_step = start.elapsed().as_secs_f64() / steps.max(1) as f64;
    if let [Some(a), Some(b)] = at_checkpoint[..] {
        println!(
            "growth {} KiB between {} and {} steps ({:.0} ns per step; final loss {:.3e})",
            b as i64 - a as i64,
            checkpoints[0],
            checkpoints[1],
            per_step * 1e9,
            trainer.loss()?.item()?
        );
    }
    Ok(())
}
