//! The measurements of `cargo xtask bench --distributed`, run under `mpirun -np 1`, `2` and
//! `4` (feature `mpi`):
//!
//! - all-reduce of 1e3 … 1e7 float64: `MPI_Allreduce` called directly (distinct send and
//!   receive buffers, reused), the MPI transport's rank-ordered reduction
//!   (`Communicator::all_reduce`) on an array it may reduce in place (as the data-parallel
//!   trainer's packed gradients), and `qb::distributed::all_reduce` on a tensor (a new result
//!   array each call, and the header exchange that checks the ranks agree). Each is timed
//!   after a barrier; the median over repetitions of the slowest rank's time is reported, with
//!   the ratio of MPI's time to ours (1.0 = MPI's bandwidth);
//! - one data-parallel training step of a 2-256-256-1 MLP on a global batch of 4096 rows
//!   (strong scaling: each rank steps on 4096 / size rows), with the time of an all-reduce of
//!   the step's gradient size on its own (the communication share), and on one process the
//!   ordinary fused trainer's step (what splitting the step around the reduction costs).
//!
//! Rank 0 prints one `key=value` line per measurement.
//!
//! ```sh
//! cargo build --release --features mpi -p quabla --example distributed_bench
//! mpirun -np 2 target/release/examples/distributed_bench
//! ```

use mpi::ffi;
use qb::distributed::{self as dist, Deadline, ReduceOp};
use qb::optim::{self, Trainer};
use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::collections::BTreeMap;
use std::error::Error;
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Instant;

fn barrier() {
    // SAFETY: MPI is initialized by `dist::init`.
    unsafe { ffi::MPI_Barrier(ffi::RSMPI_COMM_WORLD) };
}

/// The largest of the ranks' values.
fn slowest(x: f64) -> f64 {
    let mut out = 0.0;
    // SAFETY: one double in, one out.
    unsafe {
        ffi::MPI_Allreduce(
            &x as *const f64 as *const c_void,
            &mut out as *mut f64 as *mut c_void,
            1,
            ffi::RSMPI_DOUBLE,
            ffi::RSMPI_MAX,
            ffi::RSMPI_COMM_WORLD,
        )
    };
    out
}

/// The median over `reps` runs of `op` (after a barrier each), in seconds, of the slowest rank.
fn time(
    reps: usize,
    mut op: impl FnMut() -> Result<(), Box<dyn Error>>,
) -> Result<f64, Box<dyn Error>> {
    op()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        barrier();
        let t0 = Instant::now();
        op()?;
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(slowest(times[reps / 2]))
}

type Params = BTreeMap<String, Tensor>;

fn mlp_loss(p: &Params, batch: &(Tensor, Tensor)) -> qb::Result<Tensor> {
    let (x, y) = batch;
    let h = (x.matmul(&p["w1"])? + &p["b1"]).tanh()?;
    let h = (h.matmul(&p["w2"])? + &p["b2"]).tanh()?;
    (h.matmul(&p["w3"])?.reshape([-1])? - y).powi(2).mean()
}

fn main() -> Result<(), Box<dyn Error>> {
    dist::init()?;
    let group = dist::current()?;
    let (rank, size) = (group.rank(), group.size());
    let comm = group.communicator().clone();
    let say = |line: String| {
        if rank == 0 {
            println!("{line}");
        }
    };
    say(format!("processes={size} transport={}", group.transport()));

    for (n, reps) in [
        (1_000usize, 400),
        (10_000, 200),
        (100_000, 60),
        (1_000_000, 15),
        (10_000_000, 5),
    ] {
        let data: Arc<[f64]> = (0..n).map(|i| (i % 13) as f64 + rank as f64).collect();
        let mut out = vec![0.0f64; n];
        let mpi = time(reps, || {
            // SAFETY: both buffers hold `n` doubles.
            unsafe {
                ffi::MPI_Allreduce(
                    data.as_ptr() as *const c_void,
                    out.as_mut_ptr() as *mut c_void,
                    n as i32,
                    ffi::RSMPI_DOUBLE,
                    ffi::RSMPI_SUM,
                    ffi::RSMPI_COMM_WORLD,
                )
            };
            Ok(())
        })?;
        // The transport in place, as the data-parallel trainer uses it: each result, the only
        // handle on its array, is the next input (the sums overflow to infinity after some
        // hundred rounds, which costs an addition nothing).
        let mut own = dist::HostData::F64(data.iter().copied().collect());
        let transport = time(reps, || {
            let input = std::mem::replace(&mut own, dist::HostData::F64(Arc::from([])));
            own = comm
                .all_reduce(input, ReduceOp::Sum, Deadline::after(None))
                .map_err(|f| f.to_string())?;
            Ok(())
        })?;
        let tensor = Tensor::from_vec([n], data.to_vec())?;
        let checked = time(reps, || {
            dist::all_reduce(&tensor, ReduceOp::Sum)?;
            Ok(())
        })?;
        say(format!(
            "allreduce n={n} mpi_us={:.1} transport_us={:.1} transport_ratio={:.2} tensor_us={:.1} tensor_ratio={:.2} mpi_gbs={:.2}",
            mpi * 1e6,
            transport * 1e6,
            mpi / transport,
            checked * 1e6,
            mpi / checked,
            8.0 * n as f64 / mpi / 1e9,
        ));
    }

    let keys = qb::random::split(&qb::random::key(1), 5)?;
    let sizes = [2usize, 256, 256, 1];
    let mut params = Params::new();
    for (i, mn) in sizes.windows(2).enumerate() {
        params.insert(
            format!("w{}", i + 1),
            qb::random::glorot_normal(&keys[i], [mn[0], mn[1]]).eval()?,
        );
        params.insert(format!("b{}", i + 1), qb::zeros([mn[1]])?);
    }
    let n_params: usize = params.values().map(Tensor::size).sum();
    let rows = 4096;
    let x = qb::random::normal(&keys[3], [rows, 2]).eval()?;
    let y = qb::random::normal(&keys[4], [rows]).eval()?;
    let mut trainer = Trainer::new(
        mlp_loss,
        params.clone(),
        optim::Adam::new(1e-3),
        (x.clone(), y.clone()),
    )
    .distributed(true)
    .build()?;
    let steps = 30;
    let step = time(steps, || {
        trainer.step()?;
        Ok(())
    })?;
    let grads = Tensor::from_vec([n_params + 1], vec![0.5f64; n_params + 1])?;
    let reduce = time(steps, || {
        dist::all_reduce(&grads, ReduceOp::Mean)?;
        Ok(())
    })?;
    let mut line = format!(
        "mlp_step processes={size} params={n_params} rows_per_rank={} step_ms={:.3} allreduce_ms={:.3} comm_share={:.3}",
        rows / size,
        step * 1e3,
        reduce * 1e3,
        reduce / step
    );
    if size == 1 {
        let mut fused = Trainer::new(mlp_loss, params, optim::Adam::new(1e-3), (x, y)).build()?;
        let fused_step = time(steps, || {
            fused.step()?;
            Ok(())
        })?;
        line.push_str(&format!(
            " fused_step_ms={:.3} split_overhead={:.3}",
            fused_step * 1e3,
            step / fused_step - 1.0
        ));
    }
    say(line);
    dist::finalize();
    Ok(())
}
