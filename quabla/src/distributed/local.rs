//! The in-process transport: the ranks of a group are threads of one process, and a
//! collective is a rendezvous in shared memory. It exists so that everything built on
//! [`Communicator`] — the checks between ranks, data-parallel gradients, the data-parallel
//! `Trainer`, checkpoints, faults — runs in ordinary tests without MPI, with the same results
//! bit for bit (every reduction is [`fold`] in rank order).
//!
//! A rank that ends (its thread returns, fails or panics, or drops its communicator) *leaves*
//! the group; a collective that still needs it fails at once with [`Fault::Lost`], which is
//! how the tests simulate a killed process.
//!
//! This module owns the rendezvous; it must not know tensors or the group protocol.

use super::communicator::{filled, fold, Communicator, Deadline, Fault, Real, ReduceOp};
use quabla_ir::HostData;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// One collective's contributions, by rank.
struct Round {
    parts: Vec<Option<Contribution>>,
    /// Ranks that have taken the result.
    taken: usize,
}

#[derive(Clone)]
enum Contribution {
    Bytes(Arc<Vec<u8>>),
    Data(HostData),
}

#[derive(Default)]
struct State {
    /// Open rounds by sequence number.
    rounds: HashMap<u64, Round>,
    /// Why each rank left, once it has.
    left: Vec<Option<String>>,
}

/// What the ranks of one in-process group share.
struct Shared {
    size: usize,
    state: Mutex<State>,
    arrived: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A rank that panicked while holding the lock left the state consistent (every update
        // is a single insertion or removal).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One rank's end of an in-process group (see the module docs).
pub(crate) struct Local {
    rank: usize,
    shared: Arc<Shared>,
    /// The sequence number of this rank's next collective.
    next: AtomicU64,
}

impl fmt::Debug for Local {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Local")
            .field("rank", &self.rank)
            .field("size", &self.shared.size)
            .finish()
    }
}

/// The communicators of a new in-process group of `size` ranks, in rank order.
pub(crate) fn group(size: usize) -> Vec<Local> {
    let shared = Arc::new(Shared {
        size,
        state: Mutex::new(State {
            rounds: HashMap::new(),
            left: vec![None; size],
        }),
        arrived: Condvar::new(),
    });
    (0..size)
        .map(|rank| Local {
            rank,
            shared: shared.clone(),
            next: AtomicU64::new(0),
        })
        .collect()
}

impl Local {
    /// Marks this rank as gone, with the reason the others will read ("finished", "failed:
    /// ..."); the first reason given stays.
    pub(crate) fn leave(&self, how: impl Into<String>) {
        let mut state = self.shared.lock();
        if state.left[self.rank].is_none() {
            state.left[self.rank] = Some(how.into());
        }
        drop(state);
        self.shared.arrived.notify_all();
    }

    /// Deposits `mine` for this rank's next collective and waits for every rank's.
    fn rendezvous(
        &self,
        mine: Contribution,
        deadline: Deadline,
    ) -> Result<Vec<Contribution>, Fault> {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let size = self.shared.size;
        let mut state = self.shared.lock();
        let round = state.rounds.entry(seq).or_insert_with(|| Round {
            parts: vec![None; size],
            taken: 0,
        });
        round.parts[self.rank] = Some(mine);
        self.shared.arrived.notify_all();
        loop {
            let round = &state.rounds[&seq];
            let missing: Vec<usize> = (0..size).filter(|&r| round.parts[r].is_none()).collect();
            if missing.is_empty() {
                break;
            }
            if let Some(&gone) = missing.iter().find(|&&r| state.left[r].is_some()) {
                let how = state.left[gone].clone().unwrap_or_default();
                return Err(Fault::Lost {
                    rank: gone,
                    how: format!("left the process group ({how})"),
                });
            }
            state = match deadline.at {
                None => self
                    .shared
                    .arrived
                    .wait(state)
                    .unwrap_or_else(|e| e.into_inner()),
                Some(at) => {
                    let now = Instant::now();
                    if now >= at {
                        return Err(Fault::Timeout { missing });
                    }
                    self.shared
                        .arrived
                        .wait_timeout(state, at - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
        let round = state.rounds.get_mut(&seq).ok_or_else(|| Fault::Transport {
            message: "an in-process round vanished".into(),
        })?;
        let parts: Vec<Contribution> = round.parts.iter().flatten().cloned().collect();
        round.taken += 1;
        if round.taken == size {
            state.rounds.remove(&seq);
        }
        Ok(parts)
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        self.leave("its communicator was dropped");
    }
}

/// The parts as arrays of one float type (the group has checked dtypes and lengths).
fn floats<T>(
    parts: &[Contribution],
    get: impl Fn(&HostData) -> Option<&Arc<[T]>>,
) -> Result<Vec<&[T]>, Fault> {
    parts
        .iter()
        .map(|p| match p {
            Contribution::Data(d) => get(d).map(|a| &a[..]),
            Contribution::Bytes(_) => None,
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Fault::Transport {
            message: "ranks passed different dtypes to an in-process collective".into(),
        })
}

fn reduce<T: Real>(op: ReduceOp, parts: &[&[T]]) -> Result<Arc<[T]>, Fault> {
    let len = parts.first().map_or(0, |p| p.len());
    if parts.iter().any(|p| p.len() != len) {
        return Err(Fault::Transport {
            message: "ranks passed different lengths to an in-process reduction".into(),
        });
    }
    Ok(filled(len, |out| fold(op, parts, out)))
}

fn data(parts: Vec<Contribution>) -> Vec<HostData> {
    parts
        .into_iter()
        .filter_map(|p| match p {
            Contribution::Data(d) => Some(d),
            Contribution::Bytes(_) => None,
        })
        .collect()
}

impl Communicator for Local {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.size
    }

    fn transport(&self) -> &'static str {
        "in-process"
    }

    fn exchange(&self, mine: Vec<u8>, deadline: Deadline) -> Result<Vec<Vec<u8>>, Fault> {
        let parts = self.rendezvous(Contribution::Bytes(Arc::new(mine)), deadline)?;
        Ok(parts
            .into_iter()
            .map(|p| match p {
                Contribution::Bytes(b) => b.as_ref().clone(),
                Contribution::Data(_) => Vec::new(),
            })
            .collect())
    }

    fn all_reduce(
        &self,
        mine: HostData,
        op: ReduceOp,
        deadline: Deadline,
    ) -> Result<HostData, Fault> {
        let parts = self.rendezvous(Contribution::Data(mine.clone()), deadline)?;
        match mine {
            HostData::F64(_) => {
                let parts = floats(&parts, |d| match d {
                    HostData::F64(a) => Some(a),
                    _ => None,
                })?;
                Ok(HostData::F64(reduce(op, &parts)?))
            }
            HostData::F32(_) => {
                let parts = floats(&parts, |d| match d {
                    HostData::F32(a) => Some(a),
                    _ => None,
                })?;
                Ok(HostData::F32(reduce(op, &parts)?))
            }
            HostData::Bool(_) | HostData::I32(_) | HostData::I64(_) => Err(Fault::Transport {
                message: "reductions take float32 or float64 data".into(),
            }),
        }
    }

    fn broadcast(
        &self,
        mine: HostData,
        root: usize,
        deadline: Deadline,
    ) -> Result<HostData, Fault> {
        let mut parts = data(self.rendezvous(Contribution::Data(mine), deadline)?);
        if root >= parts.len() {
            return Err(Fault::Transport {
                message: format!("broadcast root {root} is not a rank"),
            });
        }
        Ok(parts.swap_remove(root))
    }

    fn all_gather(&self, mine: HostData, deadline: Deadline) -> Result<HostData, Fault> {
        let parts = data(self.rendezvous(Contribution::Data(mine), deadline)?);
        fn cat<T: Copy>(parts: &[&Arc<[T]>]) -> Arc<[T]> {
            parts.iter().flat_map(|p| p.iter().copied()).collect()
        }
        let mismatch = || Fault::Transport {
            message: "ranks passed different dtypes to an in-process all_gather".into(),
        };
        Ok(match parts.first() {
            Some(HostData::F64(_)) => HostData::F64(cat(&parts
                .iter()
                .map(|p| match p {
                    HostData::F64(a) => Some(a),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(mismatch)?)),
            Some(HostData::F32(_)) => HostData::F32(cat(&parts
                .iter()
                .map(|p| match p {
                    HostData::F32(a) => Some(a),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(mismatch)?)),
            Some(HostData::Bool(_)) => HostData::Bool(cat(&parts
                .iter()
                .map(|p| match p {
                    HostData::Bool(a) => Some(a),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(mismatch)?)),
            Some(HostData::I32(_)) => HostData::I32(cat(&parts
                .iter()
                .map(|p| match p {
                    HostData::I32(a) => Some(a),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(mismatch)?)),
            Some(HostData::I64(_)) => HostData::I64(cat(&parts
                .iter()
                .map(|p| match p {
                    HostData::I64(a) => Some(a),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(mismatch)?)),
            None => return Err(mismatch()),
        })
    }
}
