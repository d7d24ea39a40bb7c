//! Data parallelism over the devices of a process, `value_and_grad(..).devices(&["cuda:0",
//! "cuda:1"])`, as it runs on GPUs with NCCL, checked without a GPU: a backend of two simulated
//! devices (`simdev`, the CPU reference under another name) whose collectives between devices
//! are an in-process rendezvous. Everything above the library is the real path — each
//! device's part of the shard compiled for and run on that device, one communicator per device
//! joined from a unique id shared over the process group, the reduction on one thread per
//! device — and the results must equal the full-batch gradient (1e-12), alone and inside a
//! process group of two ranks (four shards).

use qb::distributed::{self, Options, Reduction};
use qb::{Error, Tensor};
use quabla as qb;
use quabla_backend::collectives::{CollectiveError, Collectives, DeviceCommunicator, Fold};
use quabla_backend::{Backend, Capabilities, Executable, Precision};
use quabla_ir::{HostData, Plan};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Compilations per simulated device, and communicators joined.
static COMPILES: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
static JOINS: AtomicUsize = AtomicUsize::new(0);
/// Held by every test that joins communicators, so that one test's count of `JOINS` is not
/// mixed with another's running at the same time.
static JOINING: Mutex<()> = Mutex::new(());

/// A device of the simulated backend: the CPU reference, named `simdev` or `simdev:1`.
#[derive(Debug)]
struct SimDevice {
    name: String,
    ordinal: usize,
    cpu: quabla_cpu::CpuBackend,
}

impl SimDevice {
    fn new(ordinal: usize) -> SimDevice {
        SimDevice {
            name: match ordinal {
                0 => "simdev".into(),
                n => format!("simdev:{n}"),
            },
            ordinal,
            cpu: quabla_cpu::CpuBackend::default(),
        }
    }
}

impl Backend for SimDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            float64: true,
            device_count: 2,
        }
    }

    fn compile(&self, plan: &Plan) -> quabla_backend::Result<Arc<dyn Executable>> {
        self.compile_with(plan, Precision::Reference)
    }

    fn compile_with(
        &self,
        plan: &Plan,
        precision: Precision,
    ) -> quabla_backend::Result<Arc<dyn Executable>> {
        COMPILES[self.ordinal].fetch_add(1, Ordering::SeqCst);
        self.cpu.compile_with(plan, precision)
    }

    fn open_device(&self, ordinal: usize) -> quabla_backend::Result<Arc<dyn Backend>> {
        Ok(Arc::new(SimDevice::new(ordinal)))
    }

    fn collectives(&self) -> Option<Arc<dyn Collectives>> {
        Some(Arc::new(SimCollectives))
    }
}

quabla_backend::register_backend!("simdev", || Ok(Arc::new(SimDevice::new(0))));

/// Communicators that meet in this process, by unique id.
#[derive(Debug)]
struct SimCollectives;

/// The ranks of one communicator: each collective is a numbered round in which every rank
/// leaves its bytes and takes everyone's.
#[derive(Debug, Default)]
struct Room {
    rounds: Mutex<HashMap<u64, Round>>,
    arrived: Condvar,
}

/// Each rank's bytes once it has left them, and how many ranks have read them all.
type Round = (Vec<Option<Vec<u8>>>, usize);

fn rooms() -> &'static Mutex<HashMap<Vec<u8>, Arc<Room>>> {
    static ROOMS: OnceLock<Mutex<HashMap<Vec<u8>, Arc<Room>>>> = OnceLock::new();
    ROOMS.get_or_init(Default::default)
}

impl Collectives for SimCollectives {
    fn library(&self) -> &'static str {
        "simulated"
    }

    fn unique_id(&self) -> Result<Vec<u8>, CollectiveError> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let mut id = vec![0u8; 128];
        id[..8].copy_from_slice(&NEXT.fetch_add(1, Ordering::SeqCst).to_le_bytes());
        Ok(id)
    }

    fn join(
        &self,
        id: &[u8],
        rank: usize,
        size: usize,
    ) -> Result<Box<dyn DeviceCommunicator>, CollectiveError> {
        JOINS.fetch_add(1, Ordering::SeqCst);
        let room = rooms()
            .lock()
            .unwrap()
            .entry(id.to_vec())
            .or_default()
            .clone();
        Ok(Box::new(SimComm {
            room,
            rank,
            size,
            round: AtomicU64::new(0),
        }))
    }
}

#[derive(Debug)]
struct SimComm {
    room: Arc<Room>,
    rank: usize,
    size: usize,
    round: AtomicU64,
}

impl SimComm {
    /// Every rank's bytes of this round, in rank order.
    fn meet(
        &self,
        mine: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Vec<Vec<u8>>, CollectiveError> {
        let round = self.round.fetch_add(1, Ordering::SeqCst);
        let mut rounds = self.room.rounds.lock().unwrap();
        rounds
            .entry(round)
            .or_insert_with(|| (vec![None; self.size], 0))
            .0[self.rank] = Some(mine.to_vec());
        self.room.arrived.notify_all();
        loop {
            let entry = rounds
                .get_mut(&round)
                .expect("the round is kept until all read it");
            if entry.0.iter().all(Option::is_some) {
                let parts: Vec<Vec<u8>> = entry.0.iter().flatten().cloned().collect();
                entry.1 += 1;
                if entry.1 == self.size {
                    rounds.remove(&round);
                }
                return Ok(parts);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(CollectiveError::Timeout);
            }
            rounds = self
                .room
                .arrived
                .wait_timeout(rounds, Duration::from_millis(10))
                .unwrap()
                .0;
        }
    }
}

impl DeviceCommunicator for SimComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_gather(
        &self,
        mine: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Vec<u8>, CollectiveError> {
        Ok(self.meet(mine, deadline)?.concat())
    }

    fn broadcast(
        &self,
        data: &[u8],
        root: usize,
        deadline: Option<Instant>,
    ) -> Result<Vec<u8>, CollectiveError> {
        Ok(self.meet(data, deadline)?.swap_remove(root))
    }

    fn all_reduce(
        &self,
        data: &HostData,
        fold: Fold,
        deadline: Option<Instant>,
    ) -> Result<HostData, CollectiveError> {
        let values: Vec<f64> = data.to_f64_vec();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let parts: Vec<Vec<f64>> = self
            .meet(&bytes, deadline)?
            .iter()
            .map(|p| {
                p.chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                    .collect()
            })
            .collect();
        let folded = (0..values.len()).map(|i| {
            let mut acc = parts[0][i];
            for part in &parts[1..] {
                acc = match fold {
                    Fold::Sum | Fold::Mean => acc + part[i],
                    Fold::Max => acc.max(part[i]),
                    Fold::Min => acc.min(part[i]),
                };
            }
            if fold == Fold::Mean {
                acc /= parts.len() as f64;
            }
            acc
        });
        Ok(HostData::from_f64(data.dtype(), folded))
    }
}

type Batch = (Tensor, Tensor);

/// A linear model's mean squared error on a batch, and its data (`rows` rows).
fn problem(rows: usize) -> qb::Result<(Tensor, Batch)> {
    let x: Vec<f64> = (0..rows * 3)
        .map(|i| ((i * 7 % 11) as f64 - 5.0) / 4.0)
        .collect();
    let y: Vec<f64> = (0..rows).map(|i| (i as f64 * 0.3).sin()).collect();
    Ok((
        qb::array([0.5, -0.25, 1.5])?,
        (
            qb::Tensor::from_vec([rows, 3], x)?,
            qb::Tensor::from_vec([rows], y)?,
        ),
    ))
}

fn mse(args: (Tensor, Batch)) -> qb::Result<Tensor> {
    let (w, (x, y)) = args;
    let r = (x.matmul(&w)? - y)?;
    (&r * &r)?.mean()
}

fn sse(args: (Tensor, Batch)) -> qb::Result<Tensor> {
    let (w, (x, y)) = args;
    let r = (x.matmul(&w)? - y)?;
    (&r * &r)?.sum()
}

fn close(a: &Tensor, b: &Tensor) -> qb::Result<()> {
    for (p, q) in a.to_vec::<f64>()?.iter().zip(b.to_vec::<f64>()?) {
        assert!((p - q).abs() <= 1e-12 * q.abs().max(1.0), "{p} vs {q}");
    }
    Ok(())
}

/// The data-parallel value and gradient over the two simulated devices equal the full batch's.
fn devices_match_the_full_batch() -> qb::Result<()> {
    let size = distributed::size();
    let (w, batch) = problem(8 * size)?;
    for (loss, reduction) in [
        (
            mse as fn((Tensor, Batch)) -> qb::Result<Tensor>,
            Reduction::Mean,
        ),
        (sse, Reduction::Sum),
    ] {
        let step = distributed::value_and_grad(loss)
            .shard_argnums(&[1])
            .reduction(reduction)
            .devices(&["simdev:0", "simdev:1"]);
        let full: (Tensor, Tensor) = qb::value_and_grad(loss).call(&(w.clone(), batch.clone()))?;
        for _ in 0..2 {
            let (value, grad): (Tensor, Tensor) = step.call(&(w.clone(), batch.clone()))?;
            close(&value, &full.0)?;
            close(&grad, &full.1)?;
        }
    }
    Ok(())
}

#[test]
fn gradients_over_two_devices_equal_the_full_batch_and_reuse_their_communicators() {
    let _alone = JOINING.lock().unwrap_or_else(|e| e.into_inner());
    let joins_before = JOINS.load(Ordering::SeqCst);
    devices_match_the_full_batch().unwrap();
    // Both devices compiled (once per loss: the second call of each reuses its trace), and one
    // communicator per device per callable.
    assert!(COMPILES[0].load(Ordering::SeqCst) >= 2);
    assert!(COMPILES[1].load(Ordering::SeqCst) >= 2);
    assert_eq!((JOINS.load(Ordering::SeqCst) - joins_before) % 2, 0);
}

#[test]
fn two_ranks_of_two_devices_each_equal_the_full_batch() {
    let _alone = JOINING.lock().unwrap_or_else(|e| e.into_inner());
    let results =
        distributed::run_local(2, Options::default(), devices_match_the_full_batch).unwrap();
    for (rank, r) in results.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    }
}

#[test]
fn misuse_of_devices_is_refused_with_what_to_change() {
    let _alone = JOINING.lock().unwrap_or_else(|e| e.into_inner());
    let (w, batch) = problem(7).unwrap();
    let err = distributed::value_and_grad(mse)
        .shard_argnums(&[1])
        .devices(&["simdev:0", "simdev:1"])
        .call::<_, (Tensor, Tensor)>(&(w.clone(), batch.clone()))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    assert!(err.to_string().contains("not divisible by 2"), "{err}");
    let err = distributed::value_and_grad(mse)
        .shard_argnums(&[1])
        .devices(&["cpu", "simdev:1"])
        .call::<_, (Tensor, Tensor)>(&(w.clone(), batch.clone()))
        .unwrap_err();
    assert!(err.to_string().contains("mixes the CPU"), "{err}");
    // The CPU offers no collectives between devices.
    let err = distributed::device_group(&distributed::Group::single(), "cpu").unwrap_err();
    assert!(
        matches!(&err, Error::Unsupported { op, .. } if op == "collectives"),
        "{err:?}"
    );
}
