//! The process group: a [`Communicator`] with the protocol that makes collectives safe to
//! call from user code, and the tensor collectives built on it.
//!
//! Every collective starts with a *header exchange*: each rank sends the sequence number of
//! the call, whether it failed locally (a rank whose loss raised still takes part, to tell the
//! others), and a digest of what it is about to do (`all_reduce(sum) of float64[3]`, a
//! trainer step with its signature). When the headers agree, the data collective runs; when
//! they do not, a second exchange gathers each rank's description or error, and every rank
//! returns the same [`Error::Distributed`] naming them — the group stays usable, because all
//! ranks took the same decision. A [`Fault`] of the transport (a rank lost, a timeout) leaves
//! operations that can never complete, so it makes the group refuse every later collective.
//!
//! The group is also where the current group lives: the process's world (set by
//! [`super::init`]) and a per-thread override ([`with_group`]) that the in-process groups of
//! tests use.
//!
//! This module must not know transforms, pytrees or optimizers.

use super::communicator::{ranks_phrase, Communicator, Deadline, Fault, ReduceOp};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use quabla_backend::HostTensor;
use quabla_ir::{DType, HostData, Shape};
use std::cell::RefCell;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How long collectives wait, and how fast a lost rank is noticed.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    timeout: Option<Duration>,
    heartbeat_timeout: Duration,
}

/// The default [`Options::timeout`]: 300 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// The default [`Options::heartbeat_timeout`]: 5 s.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for Options {
    fn default() -> Options {
        Options {
            timeout: Some(DEFAULT_TIMEOUT),
            heartbeat_timeout: DEFAULT_HEARTBEAT_TIMEOUT,
        }
    }
}

impl Options {
    /// The defaults, overridden by the environment variables `QUABLA_DISTRIBUTED_TIMEOUT`
    /// and `QUABLA_DISTRIBUTED_HEARTBEAT_TIMEOUT` (seconds; `0` or `none` for no collective
    /// timeout).
    pub fn from_env() -> Result<Options> {
        let mut options = Options::default();
        if let Some(t) = seconds_var("QUABLA_DISTRIBUTED_TIMEOUT")? {
            options.timeout = t;
        }
        if let Some(t) = seconds_var("QUABLA_DISTRIBUTED_HEARTBEAT_TIMEOUT")? {
            options.heartbeat_timeout = t.ok_or_else(|| {
                Error::invalid(
                    "QUABLA_DISTRIBUTED_HEARTBEAT_TIMEOUT must be a positive number of seconds",
                )
            })?;
        }
        Ok(options)
    }

    /// How long a collective waits for the other ranks to arrive (`None`: as long as they
    /// are alive). A rank that is still alive but never calls the collective (a hang, or
    /// different control flow) is reported after this long.
    pub fn timeout(mut self, timeout: Option<Duration>) -> Options {
        self.timeout = timeout;
        self
    }

    /// How long a rank may stay silent before the others consider it dead (MPI only: each
    /// process sends a heartbeat every tenth of this, from a thread of its own, so a busy
    /// rank is never mistaken for a dead one).
    pub fn heartbeat_timeout(mut self, timeout: Duration) -> Options {
        self.heartbeat_timeout = timeout;
        self
    }

    pub fn get_timeout(&self) -> Option<Duration> {
        self.timeout
    }

    pub fn get_heartbeat_timeout(&self) -> Duration {
        self.heartbeat_timeout
    }

    /// Checks the values (a zero heartbeat timeout is not one).
    pub(crate) fn validate(&self) -> Result<()> {
        if self.heartbeat_timeout.is_zero() {
            return Err(Error::invalid(
                "distributed.init: heartbeat_timeout must be positive",
            ));
        }
        Ok(())
    }
}

/// A number of seconds from the environment: `None` when unset, `Some(None)` for `0`/`none`.
fn seconds_var(name: &str) -> Result<Option<Option<Duration>>> {
    let Ok(text) = std::env::var(name) else {
        return Ok(None);
    };
    let text = text.trim();
    if text.eq_ignore_ascii_case("none") {
        return Ok(Some(None));
    }
    match text.parse::<f64>() {
        Ok(0.0) => Ok(Some(None)),
        Ok(s) if s.is_finite() && s > 0.0 => Ok(Some(Some(Duration::from_secs_f64(s)))),
        _ => Err(Error::invalid(format!(
            "{name} must be a number of seconds (or 0 or none for no limit), got {text:?}"
        ))),
    }
}

/// A process group: the ranks that take part in collectives together (see the module docs).
/// Cheap to clone; clones are the same group.
#[derive(Clone)]
pub struct Group {
    inner: Arc<Inner>,
}

struct Inner {
    comm: Arc<dyn Communicator>,
    options: Options,
    /// Serializes this process's collectives on the group, and counts them.
    calls: Mutex<u64>,
    /// Set by the first fault of the transport; every later collective refuses.
    broken: Mutex<Option<String>>,
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("transport", &self.inner.comm.transport())
            .field("rank", &self.rank())
            .field("size", &self.size())
            .finish()
    }
}

/// Header status byte: this rank is ready, or failed before the collective.
const READY: u8 = 0;
const FAILED: u8 = 1;
/// The longest description or error text the ranks exchange.
const MAX_DETAIL: usize = 4096;

/// The FNV-1a digest of a description: the same on every rank and every build.
fn digest(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[derive(Debug, PartialEq, Eq)]
struct Header {
    call: u64,
    status: u8,
    digest: u64,
}

impl Header {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24);
        out.extend(self.call.to_le_bytes());
        out.push(self.status);
        out.extend([0u8; 7]);
        out.extend(self.digest.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Header> {
        let word = |at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
        Some(Header {
            call: word(0)?,
            status: *bytes.get(8)?,
            digest: word(16)?,
        })
    }
}

impl Group {
    /// A group over `comm`.
    pub fn new(comm: Arc<dyn Communicator>, options: Options) -> Group {
        Group {
            inner: Arc::new(Inner {
                comm,
                options,
                calls: Mutex::new(0),
                broken: Mutex::new(None),
            }),
        }
    }

    /// The single process: rank 0 of 1.
    pub fn single() -> Group {
        Group::new(
            Arc::new(super::communicator::SingleProcess),
            Options::default(),
        )
    }

    /// A new in-process group of `size` ranks (threads of this process), in rank order: hand
    /// one to each thread and make it that thread's group with [`with_group`]. A rank whose
    /// group handles are all dropped has left the group; the others' collectives then fail
    /// (see [`super::run_local`], which does all of this).
    pub fn in_process(size: usize, options: Options) -> Result<Vec<Group>> {
        if size == 0 {
            return Err(Error::invalid(
                "an in-process group needs at least one rank",
            ));
        }
        options.validate()?;
        Ok(super::local::group(size)
            .into_iter()
            .map(|c| Group::new(Arc::new(c), options.clone()))
            .collect())
    }

    /// This process's rank in the group.
    pub fn rank(&self) -> usize {
        self.inner.comm.rank()
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.inner.comm.size()
    }

    /// The transport's name (`"mpi"`, `"in-process"`, `"single process"`).
    pub fn transport(&self) -> &'static str {
        self.inner.comm.transport()
    }

    /// The options the group was made with.
    pub fn options(&self) -> &Options {
        &self.inner.options
    }

    /// Whether two handles are the same group.
    pub fn same(a: &Group, b: &Group) -> bool {
        Arc::ptr_eq(&a.inner, &b.inner)
    }

    /// The communicator (for transports that build on another, such as NCCL's unique-id
    /// exchange).
    pub fn communicator(&self) -> &Arc<dyn Communicator> {
        &self.inner.comm
    }

    fn broken(&self) -> MutexGuard<'_, Option<String>> {
        self.inner.broken.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The error of a fault in `op`, after which the group is unusable.
    fn fault(&self, op: &str, fault: Fault) -> Error {
        let ranks = match &fault {
            Fault::Timeout { missing } => missing.clone(),
            Fault::Lost { rank, .. } => vec![*rank],
            Fault::Transport { .. } => Vec::new(),
        };
        let cause = match &fault {
            Fault::Timeout { missing } => format!(
                "{} did not reach it within {}; every rank must make the same distributed calls in the same order (raise the limit with QUABLA_DISTRIBUTED_TIMEOUT or Options::timeout if a rank is legitimately slower)",
                ranks_phrase(missing),
                match self.inner.options.timeout {
                    Some(t) => format!("{:.1} s", t.as_secs_f64()),
                    None => "the time limit".into(),
                }
            ),
            other => other.to_string(),
        };
        let message = format!(
            "distributed {op} on rank {} of {} ({}): {cause}; the process group is unusable now: end every process and restart from the last checkpoint",
            self.rank(),
            self.size(),
            self.transport()
        );
        *self.broken() = Some(message.clone());
        Error::Distributed { ranks, message }
    }

    /// Runs one collective: the header exchange (see the module docs) with this rank's
    /// `description` and `local` status, then `body` when every rank is ready and agrees.
    ///
    /// A rank whose `local` is an error gets that error back unchanged; the others get an
    /// [`Error::Distributed`] naming it. Ranks that disagree all get an error naming each
    /// rank's description. Either way no rank runs `body`, and the group stays usable.
    pub(crate) fn collective<T>(
        &self,
        op: &str,
        description: &str,
        local: Result<()>,
        body: impl FnOnce(&dyn Communicator, Deadline) -> Result<T, Fault>,
    ) -> Result<T> {
        let mut calls = self.inner.calls.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(message) = self.broken().clone() {
            local?;
            return Err(Error::Distributed {
                ranks: Vec::new(),
                message: format!(
                    "distributed {op}: the process group failed earlier and cannot be used: {message}"
                ),
            });
        }
        let call = *calls;
        *calls += 1;
        let comm = self.inner.comm.as_ref();
        let deadline = || Deadline::after(self.inner.options.timeout);
        let header = Header {
            call,
            status: if local.is_ok() { READY } else { FAILED },
            digest: digest(description),
        };
        let headers = comm
            .exchange(header.encode(), deadline())
            .map_err(|f| self.fault(op, f))?;
        let headers: Vec<Header> = headers
            .iter()
            .map(|h| Header::decode(h))
            .collect::<Option<_>>()
            .ok_or_else(|| {
                self.fault(
                    op,
                    Fault::Transport {
                        message: "a rank sent a malformed header".into(),
                    },
                )
            })?;
        let agree = headers
            .iter()
            .all(|h| h.status == READY && h.call == call && h.digest == header.digest);
        if agree {
            return body(comm, deadline()).map_err(|f| self.fault(op, f));
        }
        // Tell each other why: this rank's error or description.
        let detail = match &local {
            Err(e) => e.to_string(),
            Ok(()) => format!("{description} (distributed call {call})"),
        };
        let details = self
            .exchange_text(comm, &detail, deadline())
            .map_err(|f| self.fault(op, f))?;
        local?;
        let failed: Vec<usize> = (0..headers.len())
            .filter(|&r| headers[r].status == FAILED)
            .collect();
        if !failed.is_empty() {
            let reasons: Vec<String> = failed
                .iter()
                .map(|&r| format!("rank {r} failed: {}", details[r]))
                .collect();
            return Err(Error::Distributed {
                message: format!(
                    "distributed {op}: {}; no rank completed this call",
                    reasons.join("; ")
                ),
                ranks: failed,
            });
        }
        // Group the ranks by what they said, in rank order of first appearance.
        let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
        for (r, d) in details.iter().enumerate() {
            match groups.iter_mut().find(|(text, _)| *text == d.as_str()) {
                Some((_, ranks)) => ranks.push(r),
                None => groups.push((d, vec![r])),
            }
        }
        let odd: Vec<usize> = groups.iter().skip(1).flat_map(|(_, r)| r.clone()).collect();
        let listed: Vec<String> = groups
            .iter()
            .map(|(text, ranks)| format!("{} called {text}", ranks_phrase(ranks)))
            .collect();
        Err(Error::Distributed {
            ranks: odd,
            message: format!(
                "distributed {op}: the ranks disagree: {}; every rank must make the same distributed calls, in the same order, on the same shapes and dtypes",
                listed.join("; ")
            ),
        })
    }

    /// Every rank's `text` (cut at [`MAX_DETAIL`] bytes), in rank order: their lengths, then
    /// the texts padded to the longest.
    fn exchange_text(
        &self,
        comm: &dyn Communicator,
        text: &str,
        deadline: Deadline,
    ) -> Result<Vec<String>, Fault> {
        let mut end = text.len().min(MAX_DETAIL);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let bytes = &text.as_bytes()[..end];
        let lengths = comm.exchange((bytes.len() as u64).to_le_bytes().to_vec(), deadline)?;
        let lengths: Vec<usize> = lengths
            .iter()
            .map(|l| {
                l.as_slice()
                    .try_into()
                    .map(|b| (u64::from_le_bytes(b) as usize).min(MAX_DETAIL))
                    .unwrap_or(0)
            })
            .collect();
        let longest = lengths.iter().copied().max().unwrap_or(0);
        let mut padded = bytes.to_vec();
        padded.resize(longest, 0);
        let texts = comm.exchange(padded, deadline)?;
        Ok(texts
            .iter()
            .zip(&lengths)
            .map(|(t, &n)| String::from_utf8_lossy(&t[..n.min(t.len())]).into_owned())
            .collect())
    }

    /// Waits until every rank has called `barrier`.
    pub fn barrier(&self) -> Result<()> {
        self.collective("barrier", "barrier()", Ok(()), |_, _| Ok(()))
    }

    /// The reduction of `x` over the ranks (see [`super::all_reduce`]).
    pub fn all_reduce(&self, x: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let name = "all_reduce";
        let description = format!("all_reduce({op}) of {}", type_text(x));
        let host = concrete(name, x).and_then(|h| {
            if h.dtype() == DType::Bool && matches!(op, ReduceOp::Sum | ReduceOp::Mean) {
                return Err(Error::BoolOperand {
                    op: format!("distributed.all_reduce(op=\"{op}\")"),
                });
            }
            Ok(h)
        });
        let (shape, data) = match &host {
            Ok(h) => (h.shape.clone(), Some(h.data.clone())),
            Err(_) => (Shape::scalar(), None),
        };
        let local = host.map(|_| ());
        let reduced = self.collective(name, &description, local, |comm, deadline| {
            let data = data.ok_or_else(|| Fault::Transport {
                message: "missing data".into(),
            })?;
            match data {
                // max/min of bools: of their 0/1 values, as float64.
                HostData::Bool(b) => {
                    let wide: Arc<[f64]> = b.iter().map(|&v| f64::from(u8::from(v))).collect();
                    let out = comm.all_reduce(HostData::F64(wide), op, deadline)?;
                    Ok(match out {
                        HostData::F64(v) => HostData::Bool(v.iter().map(|&x| x != 0.0).collect()),
                        other => other,
                    })
                }
                data => comm.all_reduce(data, op, deadline),
            }
        })?;
        Ok(Tensor::from_host(
            HostTensor::new(shape, reduced),
            x.is_weak(),
        ))
    }

    /// `root`'s `x` on every rank (see [`super::broadcast`]).
    pub fn broadcast(&self, x: &Tensor, root: usize) -> Result<Tensor> {
        let name = "broadcast";
        let description = format!("broadcast(root={root}) of {}", type_text(x));
        let size = self.size();
        let host = concrete(name, x).and_then(|h| {
            if root >= size {
                return Err(Error::invalid(format!(
                    "distributed.broadcast: root {root} is not a rank of this group of {size}"
                )));
            }
            Ok(h)
        });
        let (shape, data) = match &host {
            Ok(h) => (h.shape.clone(), Some(h.data.clone())),
            Err(_) => (Shape::scalar(), None),
        };
        let out = self.collective(name, &description, host.map(|_| ()), |comm, deadline| {
            let data = data.ok_or_else(|| Fault::Transport {
                message: "missing data".into(),
            })?;
            comm.broadcast(data, root, deadline)
        })?;
        Ok(Tensor::from_host(HostTensor::new(shape, out), x.is_weak()))
    }

    /// Every rank's `x`, stacked along a new leading axis in rank order (see
    /// [`super::all_gather`]).
    pub fn all_gather(&self, x: &Tensor) -> Result<Tensor> {
        let name = "all_gather";
        let description = format!("all_gather() of {}", type_text(x));
        let size = self.size();
        let host = concrete(name, x).and_then(|h| {
            let mut dims = vec![size];
            dims.extend_from_slice(h.shape.dims());
            Ok((Shape::new(dims)?, h.data.clone()))
        });
        let (shape, data) = match &host {
            Ok((shape, data)) => (shape.clone(), Some(data.clone())),
            Err(_) => (Shape::scalar(), None),
        };
        let out = self.collective(name, &description, host.map(|_| ()), |comm, deadline| {
            let data = data.ok_or_else(|| Fault::Transport {
                message: "missing data".into(),
            })?;
            comm.all_gather(data, deadline)
        })?;
        Ok(Tensor::from_host(HostTensor::new(shape, out), false))
    }

    /// Reduces `data` (float32 or float64, the same layout on every rank) under the header
    /// protocol: the building block of data-parallel gradients and trainer steps, whose
    /// `description` names the call's signature and `local` carries a rank's own failure.
    pub(crate) fn reduce_data(
        &self,
        op: &str,
        description: &str,
        local: Result<HostData>,
        reduction: ReduceOp,
    ) -> Result<HostData> {
        let (status, data) = match local {
            Ok(d) => (Ok(()), Some(d)),
            Err(e) => (Err(e), None),
        };
        self.collective(op, description, status, |comm, deadline| {
            let data = data.ok_or_else(|| Fault::Transport {
                message: "missing data".into(),
            })?;
            comm.all_reduce(data, reduction, deadline)
        })
    }

    /// Agrees on a step under the header protocol without moving data: every rank learns
    /// whether all are ready with the same `description`.
    pub(crate) fn agree(&self, op: &str, description: &str, local: Result<()>) -> Result<()> {
        self.collective(op, description, local, |_, _| Ok(()))
    }
}

/// `float64[3, 2]`, the type of a tensor in descriptions.
pub(crate) fn type_text(x: &Tensor) -> String {
    format!("{}{:?}", x.dtype().name(), x.shape())
}

/// The host data of `x`, or the error of calling distributed `name` on a tracer or inside a
/// transform.
fn concrete<'a>(name: &str, x: &'a Tensor) -> Result<&'a HostTensor> {
    if crate::trace::active() || x.is_traced() {
        return Err(Error::invalid(format!(
            "distributed.{name}: cannot be called inside another transform"
        )));
    }
    x.host_for(&format!("distributed.{name}"))
}

// ---------------------------------------------------------------------------------------------
// The current group

thread_local! {
    /// This thread's group, when it has one of its own (in-process groups).
    static THREAD_GROUP: RefCell<Option<Group>> = const { RefCell::new(None) };
}

/// The process's group, once [`super::init`] made it.
static WORLD: Mutex<Option<Group>> = Mutex::new(None);

pub(crate) fn world() -> MutexGuard<'static, Option<Group>> {
    WORLD.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` with `group` as this thread's current group (what [`super::rank`], the
/// collectives, data-parallel gradients and trainers use), then restores the previous one.
pub fn with_group<T>(group: &Group, f: impl FnOnce() -> T) -> T {
    /// Restores the previous group when `f` returns or unwinds.
    struct Restore(Option<Group>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            let _ = THREAD_GROUP.try_with(|g| *g.borrow_mut() = previous);
        }
    }
    let previous = THREAD_GROUP.with(|g| g.borrow_mut().replace(group.clone()));
    let _restore = Restore(previous);
    f()
}

/// This thread's group if it has one, else the world if it was initialized.
pub(crate) fn current_if_any() -> Option<Group> {
    THREAD_GROUP
        .with(|g| g.borrow().clone())
        .or_else(|| world().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_digests_are_stable() {
        let h = Header {
            call: 7,
            status: FAILED,
            digest: digest("all_reduce(sum) of float64[3]"),
        };
        assert_eq!(Header::decode(&h.encode()), Some(h));
        // FNV-1a of "a" (a published test vector).
        assert_eq!(digest("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
