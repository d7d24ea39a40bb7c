//! The MPI transport (cargo feature `mpi`): the processes of an `mpirun`/`srun` launch, on one
//! machine or many, through the system's MPI library (Open MPI or MPICH) and the `mpi` crate's
//! bindings.
//!
//! Every operation is non-blocking MPI polled against a [`Deadline`] and a heartbeat monitor,
//! because MPI's own blocking calls wait forever for a dead peer:
//!
//! - Reductions are point-to-point: each rank receives its chunk of the array from every
//!   other rank, folds the chunks in rank order ([`fold`]), and sends the result back to all
//!   (a reduce-scatter and an all-gather, each moving `(size - 1) / size` of the array per
//!   rank, as bandwidth-optimal as MPI's ring). Small arrays skip the second round: every rank
//!   receives every array and folds all of it. Either way element `i` is the same fold on every
//!   rank, so, unlike `MPI_Allreduce`, whose order the standard leaves open, the result cannot
//!   depend on the algorithm MPI picks for a message size or on timing.
//! - Broadcasts and gathers move data without arithmetic, so they use MPI's own non-blocking
//!   collectives (`MPI_Ibcast`, `MPI_Iallgather`).
//! - A heartbeat thread (MPI initialized with `MPI_THREAD_MULTIPLE`) sends a small message to
//!   every peer every tenth of the heartbeat timeout on a communicator of its own; a peer
//!   silent for the whole timeout is lost, and every wait fails with [`Fault::Lost`]. A peer
//!   that finalizes says so first, so its leaving is told apart from a death. A busy rank
//!   keeps beating (the thread is independent of the computation), so only death, a frozen
//!   process or a broken network is reported.
//! - Communicators use `MPI_ERRORS_RETURN`: an MPI error is a [`Fault::Transport`], never an
//!   abort.
//!
//! After a fault, operations in flight can never be cancelled (a collective has no cancel);
//! their buffers are kept alive for the rest of the process ([`Mpi::bury`]) so that a late
//! message can never write into freed memory. The group refuses further collectives.
//!
//! Under Open MPI, `mpirun` ends the whole job when a process dies, unless it is started with
//! `--enable-recovery`; then the survivors see the typed error (docs/distributed.md).

use super::communicator::{fold_raw, Communicator, Deadline, Fault, Real, ReduceOp};
use super::group::Options;
use crate::error::{Error, Result};
use mpi::ffi;
use quabla_ir::HostData;
use std::any::Any;
use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Message tags of the data communicator.
const TAG_EXCHANGE: c_int = 11;
const TAG_SCATTER: c_int = 12;
const TAG_GATHER: c_int = 13;
/// The tag of heartbeats (on the heartbeat communicator).
const TAG_BEAT: c_int = 21;
/// Heartbeat payloads (low byte); a goodbye carries `1 + ` the first rank its sender saw die
/// in the bytes above.
const ALIVE: u64 = 1;
const LEAVING: u64 = 2;
/// Reductions of at most this many bytes per rank take one round (see the module docs): up
/// to the size Open MPI sends eagerly over shared memory, one round of eager messages is
/// fastest; beyond it every message needs a rendezvous, and halving the bytes per rank with a
/// second round wins.
const ONE_ROUND_BYTES: usize = 4096;

/// An MPI handle moved between threads: MPI runs with `MPI_THREAD_MULTIPLE`, so its handles
/// may be used from any thread.
#[derive(Clone, Copy, Debug)]
struct Handle<T>(T);
// SAFETY: see the type's docs; the handles are opaque pointers owned by the MPI library.
unsafe impl<T> Send for Handle<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Handle<T> {}

/// The text of an MPI error code.
fn error_text(code: c_int) -> String {
    let mut buf = vec![0 as std::ffi::c_char; 512];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_ERROR_STRING (at most 512 in Open MPI and MPICH)
    // characters.
    let rc = unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr(), &mut len) };
    if rc != 0 || len <= 0 {
        return format!("MPI error {code}");
    }
    let bytes: Vec<u8> = buf[..len as usize].iter().map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `Ok` for `MPI_SUCCESS`, else the error naming `call`.
fn check(call: &str, rc: c_int) -> Result<(), Fault> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Fault::Transport {
            message: format!("{call} failed: {}", error_text(rc)),
        })
    }
}

/// An element type MPI sends.
trait MpiType: Copy + Send + Sync + 'static {
    fn datatype() -> ffi::MPI_Datatype;
}

impl MpiType for f64 {
    fn datatype() -> ffi::MPI_Datatype {
        // SAFETY: a constant of the MPI library.
        unsafe { ffi::RSMPI_DOUBLE }
    }
}

impl MpiType for f32 {
    fn datatype() -> ffi::MPI_Datatype {
        // SAFETY: a constant of the MPI library.
        unsafe { ffi::RSMPI_FLOAT }
    }
}

impl MpiType for i32 {
    fn datatype() -> ffi::MPI_Datatype {
        // SAFETY: a constant of the MPI library.
        unsafe { ffi::RSMPI_INT32_T }
    }
}

impl MpiType for i64 {
    fn datatype() -> ffi::MPI_Datatype {
        // SAFETY: a constant of the MPI library.
        unsafe { ffi::RSMPI_INT64_T }
    }
}

impl MpiType for u8 {
    fn datatype() -> ffi::MPI_Datatype {
        // SAFETY: a constant of the MPI library.
        unsafe { ffi::RSMPI_UINT8_T }
    }
}

/// An element count as MPI's `int`.
fn count(n: usize) -> Result<c_int, Fault> {
    c_int::try_from(n).map_err(|_| Fault::Transport {
        message: format!(
            "a message of {n} elements exceeds MPI's limit of 2^31 - 1; reduce smaller arrays"
        ),
    })
}

/// What the heartbeat thread has seen of each peer.
#[derive(Clone, Debug, PartialEq)]
enum Peer {
    Alive,
    /// It said goodbye (it finalized or exited).
    Left,
    /// It went silent; how, for the message.
    Died(String),
}

/// What the heartbeat thread has seen.
#[derive(Debug, Default)]
struct Monitor {
    /// Set once a peer is not [`Peer::Alive`].
    any_lost: AtomicBool,
    /// By rank (this rank's own entry stays `Alive`).
    peers: Mutex<Vec<Peer>>,
    stop: AtomicBool,
}

impl Monitor {
    fn new(size: usize) -> Monitor {
        Monitor {
            any_lost: AtomicBool::new(false),
            peers: Mutex::new(vec![Peer::Alive; size]),
            stop: AtomicBool::new(false),
        }
    }

    fn peers(&self) -> std::sync::MutexGuard<'_, Vec<Peer>> {
        self.peers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records what became of `rank`; a death is never downgraded to leaving.
    fn record(&self, rank: usize, state: Peer) {
        let mut peers = self.peers();
        if let Some(slot) = peers.get_mut(rank) {
            if !matches!(slot, Peer::Died(_)) {
                *slot = state;
            }
        }
        self.any_lost.store(true, Ordering::Release);
    }

    /// The lowest rank that died, if any.
    fn first_death(&self) -> Option<usize> {
        self.peers().iter().position(|p| matches!(p, Peer::Died(_)))
    }

    /// The fault a collective reports: the first death, else the first peer that left (a
    /// peer that left after seeing a death passes the death on, so the cause is named).
    fn fault(&self) -> Option<Fault> {
        if !self.any_lost.load(Ordering::Acquire) {
            return None;
        }
        let peers = self.peers();
        let died = peers.iter().enumerate().find_map(|(rank, p)| match p {
            Peer::Died(how) => Some(Fault::Lost {
                rank,
                how: how.clone(),
            }),
            _ => None,
        });
        died.or_else(|| {
            peers
                .iter()
                .position(|p| *p == Peer::Left)
                .map(|rank| Fault::Lost {
                    rank,
                    how: "left the process group (it finalized or exited)".into(),
                })
        })
    }

    fn any_death(&self) -> bool {
        self.first_death().is_some()
    }
}

/// The MPI communicator of this process (see the module docs).
#[derive(Debug)]
pub(crate) struct Mpi {
    rank: usize,
    size: usize,
    comm: Handle<ffi::MPI_Comm>,
    monitor: Arc<Monitor>,
    /// Buffers of operations a fault left in flight (never freed).
    graveyard: Mutex<Vec<Box<dyn Any + Send + Sync>>>,
    /// The receive buffer of reductions, kept between calls (8-byte words: it holds float32
    /// or float64 parts): large arrays would otherwise pay for fresh pages every time.
    scratch: Mutex<Vec<u64>>,
    /// The last result a reduction wrote into memory of its own (its input was shared), kept
    /// so that the next reduction of the same dtype and length writes into it again once every
    /// other handle on it is gone (a loop that drops each result before the next call): fresh
    /// memory costs a page fault per 4 KiB on first write, which for large arrays takes longer
    /// than the reduction itself. Holds at most one array.
    recycled: Mutex<Option<HostData>>,
    heartbeat: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Whether this process initialized MPI (and so finalizes it).
    owns_mpi: bool,
    finalized: AtomicBool,
    /// Set when a fault left operations in flight (MPI cannot be finalized cleanly then).
    wrecked: AtomicBool,
}

/// The process's MPI communicator, for [`finalize`].
static STARTED: OnceLock<Arc<Mpi>> = OnceLock::new();

impl Mpi {
    /// Initializes MPI (or joins an MPI that the program initialized, as mpi4py does), makes
    /// this transport's communicators, and starts the heartbeat.
    pub(crate) fn start(options: &Options) -> Result<Arc<Mpi>> {
        if let Some(mpi) = STARTED.get() {
            return Ok(mpi.clone());
        }
        let fail = |what: &str, rc: c_int| Error::Distributed {
            ranks: Vec::new(),
            message: format!("distributed.init: {what} failed: {}", error_text(rc)),
        };
        let mut initialized: c_int = 0;
        let mut finalized: c_int = 0;
        // SAFETY: the query functions may be called at any time.
        unsafe {
            ffi::MPI_Initialized(&mut initialized);
            ffi::MPI_Finalized(&mut finalized);
        }
        if finalized != 0 {
            return Err(Error::Distributed {
                ranks: Vec::new(),
                message: "distributed.init: MPI was already finalized in this process; a process can join the group only once".into(),
            });
        }
        let mut provided: c_int = 0;
        let owns_mpi = initialized == 0;
        // SAFETY: MPI is initialized once (checked above); null argc/argv are allowed.
        let rc = unsafe {
            if owns_mpi {
                ffi::MPI_Init_thread(
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    ffi::RSMPI_THREAD_MULTIPLE,
                    &mut provided,
                )
            } else {
                ffi::MPI_Query_thread(&mut provided)
            }
        };
        if rc != 0 {
            return Err(fail("MPI_Init_thread", rc));
        }
        let dup = |what: &str| -> Result<ffi::MPI_Comm> {
            let mut comm: ffi::MPI_Comm = unsafe { ffi::RSMPI_COMM_NULL };
            // SAFETY: MPI is initialized; the world communicator is valid.
            let rc = unsafe { ffi::MPI_Comm_dup(ffi::RSMPI_COMM_WORLD, &mut comm) };
            if rc != 0 {
                return Err(fail(what, rc));
            }
            // SAFETY: `comm` was just created.
            let rc = unsafe { ffi::MPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN) };
            if rc != 0 {
                return Err(fail("MPI_Comm_set_errhandler", rc));
            }
            Ok(comm)
        };
        let comm = dup("MPI_Comm_dup")?;
        let (mut rank, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: `comm` is valid.
        unsafe {
            ffi::MPI_Comm_rank(comm, &mut rank);
            ffi::MPI_Comm_size(comm, &mut size);
        }
        let mpi = Arc::new(Mpi {
            rank: rank as usize,
            size: size as usize,
            comm: Handle(comm),
            monitor: Arc::new(Monitor::new(size as usize)),
            graveyard: Mutex::new(Vec::new()),
            scratch: Mutex::new(Vec::new()),
            recycled: Mutex::new(None),
            heartbeat: Mutex::new(None),
            owns_mpi,
            finalized: AtomicBool::new(false),
            wrecked: AtomicBool::new(false),
        });
        // SAFETY: a constant of the MPI library.
        if provided >= unsafe { ffi::RSMPI_THREAD_MULTIPLE } && size > 1 {
            let beat_comm = Handle(dup("MPI_Comm_dup")?);
            let monitor = mpi.monitor.clone();
            let timeout = options.get_heartbeat_timeout();
            let (rank, size) = (mpi.rank, mpi.size);
            let thread = std::thread::Builder::new()
                .name("quabla-heartbeat".into())
                .spawn(move || heartbeat(beat_comm, rank, size, timeout, &monitor))
                .map_err(|e| Error::Distributed {
                    ranks: Vec::new(),
                    message: format!("distributed.init: cannot start the heartbeat thread: {e}"),
                })?;
            *mpi.heartbeat.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread);
        }
        let _ = STARTED.set(mpi.clone());
        if owns_mpi {
            // SAFETY: registering a plain function.
            unsafe { libc::atexit(finalize_at_exit) };
        }
        Ok(mpi)
    }

    /// Keeps `buffers` alive for the rest of the process: an operation on them may still be
    /// in flight.
    fn bury(&self, buffers: Box<dyn Any + Send + Sync>) {
        self.wrecked.store(true, Ordering::Release);
        self.graveyard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(buffers);
    }

    /// Polls `requests` (those of `peers[i]`, or of every peer for a collective's one
    /// request) until all complete, a peer is lost, or the deadline passes.
    fn wait(
        &self,
        requests: &mut [ffi::MPI_Request],
        peers: &[usize],
        deadline: Deadline,
    ) -> Result<(), Fault> {
        if self.finalized.load(Ordering::Acquire) {
            return Err(Fault::Transport {
                message: "MPI was finalized in this process (distributed.finalize)".into(),
            });
        }
        let n = count(requests.len())?;
        let mut idle: u32 = 0;
        loop {
            let mut done: c_int = 0;
            // SAFETY: the requests are valid or null; statuses are ignored.
            let rc = unsafe {
                ffi::MPI_Testall(
                    n,
                    requests.as_mut_ptr(),
                    &mut done,
                    ffi::RSMPI_STATUSES_IGNORE,
                )
            };
            check("MPI_Testall", rc)?;
            if done != 0 {
                return Ok(());
            }
            if let Some(fault) = self.monitor.fault() {
                return Err(fault);
            }
            if deadline.passed() {
                return Err(self.missing(requests, peers));
            }
            // Spin briefly (messages between processes of one machine arrive within
            // microseconds), then yield, then sleep: oversubscribed ranks must not starve the
            // ones they wait for.
            idle = idle.saturating_add(1);
            if idle < 2_000 {
                std::hint::spin_loop();
            } else if idle < 4_000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// The timeout fault of `requests`: the peers of those still pending.
    fn missing(&self, requests: &mut [ffi::MPI_Request], peers: &[usize]) -> Fault {
        let mut missing: Vec<usize> = Vec::new();
        for (i, req) in requests.iter_mut().enumerate() {
            let mut done: c_int = 0;
            // SAFETY: as in `wait`.
            unsafe { ffi::MPI_Test(req, &mut done, ffi::RSMPI_STATUS_IGNORE) };
            if done == 0 {
                match peers.get(i) {
                    Some(&p) => missing.push(p),
                    None => missing.extend((0..self.size).filter(|&p| p != self.rank)),
                }
            }
        }
        missing.sort_unstable();
        missing.dedup();
        Fault::Timeout { missing }
    }

    /// The other ranks, in rank order.
    fn peers(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.size).filter(move |&p| p != self.rank)
    }

    /// Posts a receive of `len` elements into `buf` from `peer`.
    fn irecv<T: MpiType>(
        &self,
        buf: *mut T,
        len: usize,
        peer: usize,
        tag: c_int,
        requests: &mut Vec<ffi::MPI_Request>,
    ) -> Result<(), Fault> {
        let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: `buf` holds `len` elements and stays alive until the request completes or
        // is buried.
        let rc = unsafe {
            ffi::MPI_Irecv(
                buf as *mut c_void,
                count(len)?,
                T::datatype(),
                peer as c_int,
                tag,
                self.comm.0,
                &mut req,
            )
        };
        check("MPI_Irecv", rc)?;
        requests.push(req);
        Ok(())
    }

    /// Posts a send of `len` elements from `buf` to `peer`.
    fn isend<T: MpiType>(
        &self,
        buf: *const T,
        len: usize,
        peer: usize,
        tag: c_int,
        requests: &mut Vec<ffi::MPI_Request>,
    ) -> Result<(), Fault> {
        let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: `buf` holds `len` elements and stays alive until the request completes or
        // is buried.
        let rc = unsafe {
            ffi::MPI_Isend(
                buf as *const c_void,
                count(len)?,
                T::datatype(),
                peer as c_int,
                tag,
                self.comm.0,
                &mut req,
            )
        };
        check("MPI_Isend", rc)?;
        requests.push(req);
        Ok(())
    }

    /// The reduction of `input` (see the module docs): in place when this is the array's only
    /// handle (as the packed gradients of a data-parallel step are), else into a new array.
    ///
    /// The result is written over `input` when this is its only handle, else into `reuse` when
    /// that is an array of the same length with no other handle, else into fresh memory.
    fn reduce<T: Real + MpiType>(
        &self,
        mut input: Arc<[T]>,
        op: ReduceOp,
        deadline: Deadline,
        mut reuse: Option<Arc<[T]>>,
    ) -> Result<Arc<[T]>, Fault> {
        let (n, r, len) = (self.size, self.rank, input.len());
        let mut fresh: Option<Arc<[MaybeUninit<T>]>> = None;
        let in_ptr: *const T = input.as_ptr();
        let reusable = reuse
            .as_mut()
            .is_some_and(|a| a.len() == len && Arc::get_mut(a).is_some());
        let out_ptr: *mut T = match Arc::get_mut(&mut input) {
            Some(own) => {
                reuse = None;
                own.as_mut_ptr()
            }
            None if reusable => match reuse.as_mut().and_then(Arc::get_mut) {
                Some(slots) => slots.as_mut_ptr(),
                None => unreachable!("checked to be the only handle"),
            },
            None => {
                reuse = None;
                let out = fresh.insert(Arc::<[T]>::new_uninit_slice(len));
                match Arc::get_mut(out) {
                    Some(slots) => slots.as_mut_ptr() as *mut T,
                    None => unreachable!("a new allocation has one handle"),
                }
            }
        };
        let one_round = len * std::mem::size_of::<T>() <= ONE_ROUND_BYTES || len < n;
        // The part of the array this rank folds: all of it in one round, else its chunk.
        let chunk = |c: usize| -> std::ops::Range<usize> {
            if one_round {
                0..len
            } else {
                let (q, rem) = (len / n, len % n);
                let start = c * q + c.min(rem);
                start..start + q + usize::from(c < rem)
            }
        };
        let mine = chunk(r);
        // The other ranks' parts of this rank's chunk, in the scratch kept between calls.
        let mut scratch =
            std::mem::take(&mut *self.scratch.lock().unwrap_or_else(|e| e.into_inner()));
        let words = (mine.len() * (n - 1) * std::mem::size_of::<T>()).div_ceil(8);
        if scratch.len() < words {
            scratch.resize(words, 0);
        }
        let scratch_ptr = scratch.as_mut_ptr() as *mut T;
        let mut requests = Vec::with_capacity(2 * (n - 1));
        let mut peers = Vec::with_capacity(2 * (n - 1));
        let mut round = |recv: &dyn Fn(usize) -> (*mut T, usize),
                         send: &dyn Fn(usize) -> (*const T, usize),
                         tag: c_int|
         -> Result<(), Fault> {
            requests.clear();
            peers.clear();
            for (k, p) in self.peers().enumerate() {
                let (at, count) = recv(k);
                self.irecv(at, count, p, tag, &mut requests)?;
                peers.push(p);
            }
            for p in self.peers() {
                let (from, count) = send(p);
                self.isend(from, count, p, tag, &mut requests)?;
                peers.push(p);
            }
            self.wait(&mut requests, &peers, deadline)
        };
        // Round 1: every rank's part of this rank's chunk.
        // SAFETY (both closures): the ranges lie within the scratch and the input.
        let scattered = round(
            &|k| (unsafe { scratch_ptr.add(k * mine.len()) }, mine.len()),
            &|p| {
                let part = chunk(p);
                (unsafe { in_ptr.add(part.start) }, part.len())
            },
            TAG_SCATTER,
        );
        let gathered = scattered.and_then(|()| {
            let mut parts: Vec<*const T> = Vec::with_capacity(n);
            let mut k = 0;
            for q in 0..n {
                if q == r {
                    // SAFETY: within the input.
                    parts.push(unsafe { in_ptr.add(mine.start) });
                } else {
                    // SAFETY: slot `k` of the scratch, filled by round 1.
                    parts.push(unsafe { scratch_ptr.add(k * mine.len()) as *const T });
                    k += 1;
                }
            }
            // SAFETY: every receive completed; the parts and the output chunk hold
            // `mine.len()` elements, no reference to them is alive, and the output chunk is
            // either a fresh allocation or exactly this rank's part of the input.
            unsafe { fold_raw(op, &parts, out_ptr.add(mine.start), mine.len()) };
            if one_round {
                return Ok(());
            }
            // Round 2: this rank's reduced chunk to all, theirs from each (round 1's sends
            // of those chunks have completed, so in place they may be overwritten).
            round(
                &|k| {
                    let p = if k < r { k } else { k + 1 };
                    let part = chunk(p);
                    (unsafe { out_ptr.add(part.start) }, part.len())
                },
                &|_| (unsafe { out_ptr.add(mine.start) as *const T }, mine.len()),
                TAG_GATHER,
            )
        });
        if let Err(fault) = gathered {
            self.bury(Box::new((input, fresh, reuse, scratch)));
            return Err(fault);
        }
        *self.scratch.lock().unwrap_or_else(|e| e.into_inner()) = scratch;
        Ok(match (fresh, reuse) {
            // SAFETY: the fold wrote this rank's chunk and round 2 every other chunk (in one
            // round the fold wrote all of it).
            (Some(out), _) => unsafe { out.assume_init() },
            (None, Some(out)) => out,
            (None, None) => input,
        })
    }

    /// `MPI_Ibcast` of `data` from `root`.
    fn broadcast_typed<T: MpiType>(
        &self,
        data: Arc<[T]>,
        root: usize,
        deadline: Deadline,
    ) -> Result<Arc<[T]>, Fault> {
        let len = data.len();
        let mut out = Arc::<[T]>::new_uninit_slice(if self.rank == root { 0 } else { len });
        let buf: *mut c_void = if self.rank == root {
            // MPI only reads the root's buffer.
            data.as_ptr() as *mut c_void
        } else {
            match Arc::get_mut(&mut out) {
                Some(slots) => slots.as_mut_ptr() as *mut c_void,
                None => unreachable!("a new allocation has one handle"),
            }
        };
        let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: `buf` holds `len` elements and outlives the request (buried on a fault).
        let rc = unsafe {
            ffi::MPI_Ibcast(
                buf,
                count(len)?,
                T::datatype(),
                root as c_int,
                self.comm.0,
                &mut req,
            )
        };
        check("MPI_Ibcast", rc)?;
        if let Err(fault) = self.wait(std::slice::from_mut(&mut req), &[], deadline) {
            self.bury(Box::new((data, out)));
            return Err(fault);
        }
        if self.rank == root {
            return Ok(data);
        }
        // SAFETY: the broadcast filled it.
        Ok(unsafe { out.assume_init() })
    }

    /// `MPI_Iallgather` of `mine`.
    fn all_gather_typed<T: MpiType>(
        &self,
        mine: Arc<[T]>,
        deadline: Deadline,
    ) -> Result<Arc<[T]>, Fault> {
        let len = mine.len();
        let mut out = Arc::<[T]>::new_uninit_slice(len * self.size);
        let out_ptr = match Arc::get_mut(&mut out) {
            Some(slots) => slots.as_mut_ptr() as *mut c_void,
            None => unreachable!("a new allocation has one handle"),
        };
        let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
        let n = count(len)?;
        // SAFETY: the buffers hold `len` and `size * len` elements and outlive the request.
        let rc = unsafe {
            ffi::MPI_Iallgather(
                mine.as_ptr() as *const c_void,
                n,
                T::datatype(),
                out_ptr,
                n,
                T::datatype(),
                self.comm.0,
                &mut req,
            )
        };
        check("MPI_Iallgather", rc)?;
        if let Err(fault) = self.wait(std::slice::from_mut(&mut req), &[], deadline) {
            self.bury(Box::new((mine, out)));
            return Err(fault);
        }
        // SAFETY: the gather filled it.
        Ok(unsafe { out.assume_init() })
    }

    /// Stops the heartbeat and finalizes MPI (when this process initialized it, no fault left
    /// operations in flight and no peer died: `MPI_Finalize` could wait for those forever).
    fn finalize(&self) {
        if self.finalized.swap(true, Ordering::AcqRel) {
            return;
        }
        self.monitor.stop.store(true, Ordering::Release);
        if let Some(thread) = self
            .heartbeat
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = thread.join();
        }
        // A dead peer may leave our heartbeat sends to it pending, which MPI_Finalize would
        // wait for.
        let clean = !self.wrecked.load(Ordering::Acquire) && !self.monitor.any_death();
        if self.owns_mpi && clean {
            // SAFETY: MPI is initialized and not finalized; no operation of ours is pending.
            unsafe { ffi::MPI_Finalize() };
        }
    }
}

/// Leaves the process group (see [`super::finalize`]).
pub(crate) fn finalize() {
    if let Some(mpi) = STARTED.get() {
        mpi.finalize();
    }
}

extern "C" fn finalize_at_exit() {
    // Nothing may unwind out of an exit handler.
    let _ = std::panic::catch_unwind(finalize);
}

/// The heartbeat thread (see the module docs): beats to every peer every `timeout / 10`,
/// records a peer silent for `timeout` (or leaving) in `monitor`, and on stop tells the peers
/// it leaves.
fn heartbeat(
    comm: Handle<ffi::MPI_Comm>,
    rank: usize,
    size: usize,
    timeout: Duration,
    monitor: &Monitor,
) {
    let interval = (timeout / 10).max(Duration::from_millis(1));
    let null = || unsafe { ffi::RSMPI_REQUEST_NULL };
    let peers: Vec<usize> = (0..size).filter(|&p| p != rank).collect();
    // Incoming beats land here; a buffer per peer, alive for the thread's life.
    let mut inbox: Vec<u64> = vec![0; size];
    let mut receives: Vec<ffi::MPI_Request> = vec![null(); size];
    let mut sends: Vec<ffi::MPI_Request> = vec![null(); size];
    let mut last_seen = vec![Instant::now(); size];
    let mut gone = vec![false; size];
    static BEAT: u64 = ALIVE;
    let post_receive = |p: usize, inbox: &mut Vec<u64>, receives: &mut Vec<ffi::MPI_Request>| {
        // SAFETY: `inbox[p]` lives as long as the thread, which cancels the receive before
        // it ends.
        unsafe {
            ffi::MPI_Irecv(
                &mut inbox[p] as *mut u64 as *mut c_void,
                1,
                ffi::RSMPI_UINT64_T,
                p as c_int,
                TAG_BEAT,
                comm.0,
                &mut receives[p],
            );
        }
    };
    for &p in &peers {
        post_receive(p, &mut inbox, &mut receives);
    }
    while !monitor.stop.load(Ordering::Acquire) {
        let now = Instant::now();
        for &p in &peers {
            if gone[p] {
                continue;
            }
            let mut done: c_int = 0;
            // SAFETY: a valid or null request.
            unsafe { ffi::MPI_Test(&mut sends[p], &mut done, ffi::RSMPI_STATUS_IGNORE) };
            if done != 0 {
                // SAFETY: `BEAT` is a static; the previous send to `p` completed.
                unsafe {
                    ffi::MPI_Isend(
                        &BEAT as *const u64 as *const c_void,
                        1,
                        ffi::RSMPI_UINT64_T,
                        p as c_int,
                        TAG_BEAT,
                        comm.0,
                        &mut sends[p],
                    );
                }
            }
            loop {
                let mut arrived: c_int = 0;
                // SAFETY: a valid request on `inbox[p]`.
                unsafe { ffi::MPI_Test(&mut receives[p], &mut arrived, ffi::RSMPI_STATUS_IGNORE) };
                if arrived == 0 {
                    break;
                }
                last_seen[p] = now;
                if inbox[p] & 0xff == LEAVING {
                    gone[p] = true;
                    monitor.record(p, Peer::Left);
                    // A goodbye names the first death its sender saw, if any.
                    if let Some(dead) = (inbox[p] >> 8).checked_sub(1) {
                        monitor.record(
                            dead as usize,
                            Peer::Died(format!(
                                "stopped answering heartbeats (rank {p} noticed before it left): it died, was killed or froze, or its machine is unreachable"
                            )),
                        );
                    }
                    break;
                }
                post_receive(p, &mut inbox, &mut receives);
            }
            if !gone[p] && now.duration_since(last_seen[p]) > timeout {
                gone[p] = true;
                monitor.record(
                    p,
                    Peer::Died(format!(
                        "stopped answering heartbeats for {:.1} s: it died, was killed or froze, or its machine is unreachable",
                        timeout.as_secs_f64()
                    )),
                );
            }
        }
        std::thread::sleep(interval);
    }
    // Say goodbye to the peers still there (naming a death seen, so that they report the
    // cause rather than this departure), and take back the pending receives.
    let bye: Box<u64> =
        Box::new(LEAVING | monitor.first_death().map_or(0, |d| (d as u64 + 1) << 8));
    let mut byes: Vec<ffi::MPI_Request> = Vec::new();
    for &p in &peers {
        if gone[p] {
            continue;
        }
        let mut req = null();
        // SAFETY: `bye` outlives the send (it is leaked below).
        unsafe {
            ffi::MPI_Isend(
                &*bye as *const u64 as *const c_void,
                1,
                ffi::RSMPI_UINT64_T,
                p as c_int,
                TAG_BEAT,
                comm.0,
                &mut req,
            );
        }
        byes.push(req);
    }
    let until = Instant::now() + Duration::from_millis(500);
    let mut pending: Vec<ffi::MPI_Request> = byes.into_iter().chain(sends).collect();
    while Instant::now() < until {
        let mut done: c_int = 0;
        // SAFETY: valid or null requests.
        unsafe {
            ffi::MPI_Testall(
                pending.len() as c_int,
                pending.as_mut_ptr(),
                &mut done,
                ffi::RSMPI_STATUSES_IGNORE,
            )
        };
        if done != 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    for &p in &peers {
        if receives[p] == null() {
            continue;
        }
        // SAFETY: cancelling and completing our own receive on `inbox[p]` (a cancelled
        // receive completes at once).
        unsafe {
            if ffi::MPI_Cancel(&mut receives[p]) == 0 {
                ffi::MPI_Wait(&mut receives[p], ffi::RSMPI_STATUS_IGNORE);
            }
        }
    }
    // The inbox must outlive any receive that could not be cancelled, and the goodbye any
    // send that did not complete.
    std::mem::forget(inbox);
    std::mem::forget(bye);
}

impl Communicator for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn transport(&self) -> &'static str {
        "mpi"
    }

    fn exchange(&self, mine: Vec<u8>, deadline: Deadline) -> Result<Vec<Vec<u8>>, Fault> {
        let len = mine.len();
        let mut inbox: Vec<Vec<u8>> = (0..self.size).map(|_| vec![0; len]).collect();
        let mut requests = Vec::with_capacity(2 * self.size);
        let mut peers = Vec::with_capacity(2 * self.size);
        let posted = (|| {
            for p in self.peers() {
                self.irecv(inbox[p].as_mut_ptr(), len, p, TAG_EXCHANGE, &mut requests)?;
                peers.push(p);
            }
            for p in self.peers() {
                self.isend(mine.as_ptr(), len, p, TAG_EXCHANGE, &mut requests)?;
                peers.push(p);
            }
            self.wait(&mut requests, &peers, deadline)
        })();
        if let Err(fault) = posted {
            self.bury(Box::new((mine, inbox)));
            return Err(fault);
        }
        inbox[self.rank] = mine;
        Ok(inbox)
    }

    fn all_reduce(
        &self,
        data: HostData,
        op: ReduceOp,
        deadline: Deadline,
    ) -> Result<HostData, Fault> {
        if self.size == 1 {
            return Ok(data);
        }
        // An input with other handles (a tensor's) needs memory for the result: the last
        // such result, when its other handles are gone (see `recycled`).
        let recycled = || self.recycled.lock().unwrap_or_else(|e| e.into_inner());
        let kept = recycled().take();
        let (shared, out) = match data {
            HostData::F64(mut v) => {
                let shared = Arc::get_mut(&mut v).is_none();
                let reuse = match kept {
                    Some(HostData::F64(a)) if shared => Some(a),
                    _ => None,
                };
                (shared, HostData::F64(self.reduce(v, op, deadline, reuse)?))
            }
            HostData::F32(mut v) => {
                let shared = Arc::get_mut(&mut v).is_none();
                let reuse = match kept {
                    Some(HostData::F32(a)) if shared => Some(a),
                    _ => None,
                };
                (shared, HostData::F32(self.reduce(v, op, deadline, reuse)?))
            }
            HostData::Bool(_) | HostData::I32(_) | HostData::I64(_) => {
                return Err(Fault::Transport {
                    message: "reductions take float32 or float64 data".into(),
                })
            }
        };
        if shared {
            *recycled() = Some(out.clone());
        }
        Ok(out)
    }

    fn broadcast(
        &self,
        data: HostData,
        root: usize,
        deadline: Deadline,
    ) -> Result<HostData, Fault> {
        if self.size == 1 {
            return Ok(data);
        }
        Ok(match data {
            HostData::F64(v) => HostData::F64(self.broadcast_typed(v, root, deadline)?),
            HostData::F32(v) => HostData::F32(self.broadcast_typed(v, root, deadline)?),
            HostData::I32(v) => HostData::I32(self.broadcast_typed(v, root, deadline)?),
            HostData::I64(v) => HostData::I64(self.broadcast_typed(v, root, deadline)?),
            HostData::Bool(v) => {
                HostData::Bool(bools(self.broadcast_typed(bytes(v), root, deadline)?))
            }
        })
    }

    fn all_gather(&self, mine: HostData, deadline: Deadline) -> Result<HostData, Fault> {
        if self.size == 1 {
            return Ok(mine);
        }
        Ok(match mine {
            HostData::F64(v) => HostData::F64(self.all_gather_typed(v, deadline)?),
            HostData::F32(v) => HostData::F32(self.all_gather_typed(v, deadline)?),
            HostData::I32(v) => HostData::I32(self.all_gather_typed(v, deadline)?),
            HostData::I64(v) => HostData::I64(self.all_gather_typed(v, deadline)?),
            HostData::Bool(v) => HostData::Bool(bools(self.all_gather_typed(bytes(v), deadline)?)),
        })
    }
}

/// Bools as bytes (0 or 1) for MPI.
fn bytes(v: Arc<[bool]>) -> Arc<[u8]> {
    v.iter().map(|&b| u8::from(b)).collect()
}

/// Bytes back as bools (nonzero is true).
fn bools(v: Arc<[u8]>) -> Arc<[bool]> {
    v.iter().map(|&b| b != 0).collect()
}
