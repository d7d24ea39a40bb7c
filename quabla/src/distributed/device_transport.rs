//! The device transport: a [`Communicator`] over a backend's collectives between devices
//! (NCCL on CUDA: `quabla_backend::collectives`), and the groups made of it — one per process
//! ([`device_group`]), or one per local device of a process for data parallelism over several
//! GPUs ([`local_device_groups`]).
//!
//! The backend moves the data: each collective sends host data to the device, through the
//! library, and back, bounded by the group's deadline, and its reduction is the rank-order fold
//! every transport gives (`communicator::fold`). This module adapts it to the group protocol
//! (`group.rs`) and makes the communicators: rank 0's unique id is shared over an existing
//! group (`bootstrap::share_unique_id`), and the ranks of this process join on threads of their
//! own (joining waits for every rank).
//!
//! It must not name a backend crate's types: devices are reached through the registry
//! (`crate::devices`) and [`quabla_backend::Backend::collectives`].

use super::bootstrap::share_unique_id;
use super::communicator::{Communicator, Deadline, Fault, ReduceOp};
use super::group::Group;
use crate::error::{Error, Result};
use quabla_backend::collectives::{CollectiveError, Collectives, DeviceCommunicator, Fold};
use quabla_ir::HostData;
use std::fmt;
use std::sync::Arc;

/// One rank of a device communicator as a process group's transport.
pub(crate) struct DeviceTransport {
    comm: Box<dyn DeviceCommunicator>,
}

impl fmt::Debug for DeviceTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceTransport({:?})", self.comm)
    }
}

fn fault(e: CollectiveError) -> Fault {
    match e {
        CollectiveError::Timeout => Fault::Transport {
            message: "a device collective did not end before the deadline (a rank did not take \
                      part); the communicator was aborted"
                .into(),
        },
        CollectiveError::Failed(message) => Fault::Transport { message },
    }
}

/// The bytes of `data` as they lie in memory (little-endian; bools as 0 or 1).
fn to_bytes(data: &HostData) -> Vec<u8> {
    match data {
        HostData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::Bool(v) => v.iter().map(|&b| u8::from(b)).collect(),
    }
}

/// [`to_bytes`] back into data of `like`'s dtype.
fn from_bytes(like: &HostData, bytes: &[u8]) -> HostData {
    fn read<const N: usize, T>(bytes: &[u8], f: impl Fn([u8; N]) -> T) -> Arc<[T]> {
        bytes
            .chunks_exact(N)
            .map(|c| f(c.try_into().expect("chunks of N bytes")))
            .collect()
    }
    match like {
        HostData::F32(_) => HostData::F32(read(bytes, f32::from_le_bytes)),
        HostData::F64(_) => HostData::F64(read(bytes, f64::from_le_bytes)),
        HostData::I32(_) => HostData::I32(read(bytes, i32::from_le_bytes)),
        HostData::I64(_) => HostData::I64(read(bytes, i64::from_le_bytes)),
        HostData::Bool(_) => HostData::Bool(bytes.iter().map(|&b| b != 0).collect()),
    }
}

impl Communicator for DeviceTransport {
    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn size(&self) -> usize {
        self.comm.size()
    }

    fn transport(&self) -> &'static str {
        "device"
    }

    fn exchange(&self, mine: Vec<u8>, deadline: Deadline) -> Result<Vec<Vec<u8>>, Fault> {
        let n = mine.len();
        let all = self.comm.all_gather(&mine, deadline.at).map_err(fault)?;
        if all.len() != n * self.size() {
            return Err(Fault::Transport {
                message: "a gather returned the wrong number of bytes".into(),
            });
        }
        Ok((0..self.size())
            .map(|r| all[r * n..(r + 1) * n].to_vec())
            .collect())
    }

    fn all_reduce(
        &self,
        data: HostData,
        op: ReduceOp,
        deadline: Deadline,
    ) -> Result<HostData, Fault> {
        let fold = match op {
            ReduceOp::Sum => Fold::Sum,
            ReduceOp::Mean => Fold::Mean,
            ReduceOp::Max => Fold::Max,
            ReduceOp::Min => Fold::Min,
        };
        self.comm
            .all_reduce(&data, fold, deadline.at)
            .map_err(fault)
    }

    fn broadcast(
        &self,
        data: HostData,
        root: usize,
        deadline: Deadline,
    ) -> Result<HostData, Fault> {
        let back = self
            .comm
            .broadcast(&to_bytes(&data), root, deadline.at)
            .map_err(fault)?;
        Ok(from_bytes(&data, &back))
    }

    fn all_gather(&self, mine: HostData, deadline: Deadline) -> Result<HostData, Fault> {
        let all = self
            .comm
            .all_gather(&to_bytes(&mine), deadline.at)
            .map_err(fault)?;
        Ok(from_bytes(&mine, &all))
    }
}

/// The collectives of `device`'s backend, or why there are none: the backend's own error (UN1,
/// UN5), NCCL missing (UN5 naming `libnccl`), or a backend that offers no collectives.
pub(crate) fn collectives_of(device: &str) -> Result<Arc<dyn Collectives>> {
    let backend = crate::devices::backend_for(device)?;
    let Some(collectives) = backend.collectives() else {
        return Err(Error::Unsupported {
            op: "collectives".into(),
            device: Some(device.to_string()),
            message: format!(
                "{device}: this backend offers no collectives between devices (a backend \
                 loaded as a plugin does not: link the CUDA backend with the `cuda` feature)"
            ),
        });
    };
    if collectives.library() == "nccl" {
        super::nccl_library(device)?;
    }
    Ok(collectives)
}

/// A communicator error as the user sees it (`Error::Distributed` naming the device).
fn join_error(device: &str, e: impl fmt::Display) -> Error {
    Error::Distributed {
        ranks: Vec::new(),
        message: format!("joining the device communicator on {device}: {e}"),
    }
}

/// A group with the ranks of `over` whose collectives run between devices (NCCL), each
/// process on its `device` (`"cuda:{local_rank}"`, one GPU per process). Every rank of `over`
/// must call it; rank 0's unique id travels over `over`.
pub fn device_group(over: &Group, device: &str) -> Result<Group> {
    let groups = local_device_groups(over, &[device.to_string()])?;
    Ok(groups.into_iter().next().expect("one device, one group"))
}

/// One group per device of `devices` (this process's GPUs), over every device of every
/// process of `over`: device `k` of process `p` is rank `p * devices.len() + k` of
/// `over.size() * devices.len()`.
pub(crate) fn local_device_groups(over: &Group, devices: &[String]) -> Result<Vec<Group>> {
    if devices.is_empty() {
        return Err(Error::invalid("a device group needs at least one device"));
    }
    let opened: Vec<Arc<dyn Collectives>> = devices
        .iter()
        .map(|d| collectives_of(d))
        .collect::<Result<_>>()?;
    let id = share_unique_id(over, UNIQUE_ID_BYTES, || {
        opened[0]
            .unique_id()
            .map_err(|e| join_error(&devices[0], e))
    })?;
    let per = devices.len();
    let size = over.size() * per;
    let joined: Vec<Result<Box<dyn DeviceCommunicator>>> = std::thread::scope(|s| {
        let handles: Vec<_> = opened
            .iter()
            .enumerate()
            .map(|(k, collectives)| {
                let (id, name) = (&id, &devices[k]);
                let rank = over.rank() * per + k;
                s.spawn(move || {
                    collectives
                        .join(id, rank, size)
                        .map_err(|e| join_error(name, e))
                })
            })
            .collect();
        super::join_all(handles, "a thread joining a device communicator panicked")
    });
    joined
        .into_iter()
        .map(|comm| {
            Ok(Group::new(
                Arc::new(DeviceTransport { comm: comm? }),
                over.options().clone(),
            ))
        })
        .collect()
}

/// The bytes of an NCCL unique id (the one device library with collectives today).
const UNIQUE_ID_BYTES: usize = 128;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_crosses_as_its_bytes_and_back() {
        let cases = [
            HostData::F32(Arc::from([1.5f32, -0.0, f32::NAN, f32::MAX].as_slice())),
            HostData::F64(Arc::from([1e-300, -2.5, f64::INFINITY].as_slice())),
            HostData::I32(Arc::from([i32::MIN, -1, 7].as_slice())),
            HostData::I64(Arc::from([i64::MAX, 0, -9].as_slice())),
            HostData::Bool(Arc::from([true, false, true].as_slice())),
        ];
        for data in cases {
            let bytes = to_bytes(&data);
            assert_eq!(bytes.len(), data.len() * data.dtype().itemsize());
            let back = from_bytes(&data, &bytes);
            assert_eq!(to_bytes(&back), bytes, "{data:?}");
            assert_eq!(back.dtype(), data.dtype());
        }
    }

    #[test]
    fn a_device_without_collectives_or_backend_says_what_is_missing() {
        // The CPU offers no collectives between devices.
        let err = device_group(&Group::single(), "cpu").unwrap_err();
        assert!(
            matches!(&err, Error::Unsupported { op, device: Some(d), .. }
                if op == "collectives" && d == "cpu"),
            "{err:?}"
        );
        // Without a GPU (or without the backend), CUDA is UN1/UN5.
        if crate::devices::backend_for("cuda").is_err() {
            let err = device_group(&Group::single(), "cuda:0").unwrap_err();
            assert!(matches!(&err, Error::Unsupported { .. }), "{err:?}");
        }
    }
}
