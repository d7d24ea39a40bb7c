//! Data-parallel training across processes with `qb::distributed` (docs/distributed.md).
//!
//! Every rank builds the same 2-32-32-1 network and the same 1024-row regression batch; the
//! data-parallel `Trainer` gives each rank its shard of the rows, all-reduces the loss and the
//! gradients in rank order each step, and applies the same update everywhere. Rank 0 prints the
//! loss, then saves a checkpoint that any number of processes can load.
//!
//! ```sh
//! cargo build --release --features mpi --example data_parallel
//! mpirun -np 4 target/release/examples/data_parallel      # four processes, one machine
//! mpirun --hostfile hosts -np 8 target/release/examples/data_parallel
//! cargo run --release --example data_parallel             # one process (rank 0 of 1)
//! ```

use qb::distributed as dist;
use qb::optim::{self, Trainer};
use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::collections::BTreeMap;
use std::io::Write;

/// The network's weights and biases by name.
pub type Params = BTreeMap<String, Tensor>;

/// Glorot-normal weights and zero biases for layers 2-32-32-1.
pub fn init(key: &qb::random::Key) -> qb::Result<Params> {
    let sizes = [2usize, 32, 32, 1];
    let keys = qb::random::split(key, sizes.len() - 1)?;
    let mut params = Params::new();
    for (i, (k, mn)) in keys.iter().zip(sizes.windows(2)).enumerate() {
        params.insert(
            format!("w{i}"),
            qb::random::glorot_normal(k, [mn[0], mn[1]]).eval()?,
        );
        params.insert(format!("b{i}"), qb::zeros([mn[1]])?);
    }
    Ok(params)
}

/// The network on rows `x` (`[n, 2]` to `[n]`).
pub fn predict(p: &Params, x: &Tensor) -> qb::Result<Tensor> {
    let mut h = x.clone();
    for i in 0..3 {
        h = (h.matmul(&p[&format!("w{i}")])? + &p[&format!("b{i}")])?;
        if i < 2 {
            h = h.tanh()?;
        }
    }
    h.reshape([-1])
}

/// Mean squared error over the rows of the batch (on a rank: over its shard).
pub fn loss(p: &Params, batch: &(Tensor, Tensor)) -> qb::Result<Tensor> {
    (predict(p, &batch.0)? - &batch.1).powi(2).mean()
}

/// 1024 rows of `y = sin(3 x0) cos(2 x1)` at uniform points of `[-1, 1]^2`, the same on
/// every rank (one key).
pub fn batch() -> qb::Result<(Tensor, Tensor)> {
    let x = qb::random::uniform(&qb::random::key(1), [1024, 2])
        .minval(-1.0)
        .maxval(1.0)
        .eval()?;
    let y =
        (x.index(qb::s![.., 0])?.mul(3.0)?.sin()? * x.index(qb::s![.., 1])?.mul(2.0)?.cos()?)?;
    Ok((x, y))
}

/// Trains `steps` Adam steps, data-parallel over the current group when `distributed` (else
/// in this process alone), printing the loss every `every` steps on rank 0; returns the
/// final parameters and the last loss.
pub fn run(
    distributed: bool,
    steps: u64,
    every: u64,
    out: &mut impl Write,
) -> qb::Result<(Params, f64)> {
    let mut trainer = Trainer::new(
        loss,
        init(&qb::random::key(0))?,
        optim::Adam::new(optim::exponential_decay(1e-2, 200, 0.5)),
        batch()?,
    )
    .distributed(distributed)
    .build()?;
    let rank = dist::rank();
    let mut last = f64::NAN;
    for step in 0..steps {
        trainer.step()?;
        last = trainer.last_loss()?.map_or(Ok(f64::NAN), |l| l.item())?;
        if rank == 0 && (step % every == 0 || step + 1 == steps) {
            let _ = writeln!(out, "step {step:4}  loss {last:.6e}");
        }
    }
    Ok((trainer.params()?, last))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    dist::init()?;
    let (rank, size) = (dist::rank(), dist::size());
    if rank == 0 {
        println!("training on {size} process(es)");
    }
    let (params, last) = run(true, 400, 50, &mut std::io::stdout())?;
    // One checkpoint for the whole group: every rank holds the same parameters (checked),
    // rank 0 writes them.
    let path = std::env::temp_dir().join("quabla-data-parallel.qb");
    dist::save(&path, &params)?;
    if rank == 0 {
        println!("final loss {last:.3e}; checkpoint {}", path.display());
    }
    Ok(())
}
