//! NCCL collectives on device memory: the device transport of data parallelism
//! (`docs/distributed.md`, "Devices: NCCL").
//!
//! A [`NcclComm`] is one rank of an NCCL communicator, on one device of this backend: made
//! from a unique id that rank 0 creates ([`unique_id`]) and every rank receives by another
//! channel (the process group, or a file: the facade's `bootstrap.rs`). Its collectives run on
//! the device's stream, in order with the device's other work, and wait for their end with a
//! deadline: while waiting they poll the stream and NCCL's asynchronous error, and when the
//! deadline passes or NCCL reports an error they abort the communicator, so a rank that died
//! makes the others fail instead of hang ([`CollectiveError`]). An aborted communicator refuses
//! every later call.
//!
//! Determinism: NCCL's own `ncclAllReduce` adds in an order of its ring or tree, which depends
//! on the topology. [`NcclComm::all_reduce_buffer`] instead gathers every rank's values
//! (`ncclAllGather`) and folds them in rank order with a kernel of this crate
//! ([`fold_program`]): element `i` is `((x_0 ∘ x_1) ∘ x_2) ∘ ...` in float64, divided by the
//! number of ranks for a mean, and rounded once — the reduction every transport of the facade
//! produces bit for bit. Every rank folds the same gathered bytes, so every rank gets the same
//! bits.
//!
//! The library is found and opened by the facade (`quabla::distributed::nccl_library`, which
//! searches the same places as this crate's `discovery`) before anything here is called;
//! [`available`] checks that the bindings then see it. Data moves as bytes: the collectives
//! on device memory take and return [`DeviceBuffer`]s, and the caller knows what they hold;
//! [`NcclCollectives`] offers them to the facade through the backend interface
//! ([`quabla_backend::collectives`]), on host data.
//!
//! This module must not know tensors, plans or process groups.

use crate::codegen;
use crate::program::{Arg, BufferDecl, Elem, Launch, Output, Param, Program, Role, Step};
use crate::runtime::{Device, DeviceBuffer, Loaded};
use cudarc::nccl::sys;
pub use quabla_backend::collectives::{CollectiveError, Fold};
use quabla_backend::collectives::{Collectives, DeviceCommunicator};
use quabla_backend::Unavailable;
use quabla_ir::HostData;
use quabla_ir::{DType, Shape};
use std::collections::HashMap;
use std::fmt;
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The bytes of an NCCL unique id.
pub const UNIQUE_ID_BYTES: usize = 128;

/// Whether the NCCL bindings find the library (opened by full path beforehand).
pub fn available() -> Result<(), Unavailable> {
    // SAFETY: only tries to open the library by its names.
    let present = catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
    if present {
        Ok(())
    } else {
        Err(Unavailable::missing_library(
            "libnccl",
            "the NCCL bindings do not find libnccl.so.2 under its name (open it first: \
             quabla.distributed finds it)",
        ))
    }
}

/// The text of an NCCL status.
fn nccl_text(status: sys::ncclResult_t) -> String {
    // SAFETY: `ncclGetErrorString` returns a static string for every status.
    let text = catch_unwind(|| unsafe {
        let p = sys::ncclGetErrorString(status);
        (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
    });
    match text {
        Ok(Some(t)) => format!("{status:?} ({t})"),
        _ => format!("{status:?}"),
    }
}

/// Runs an NCCL call (a panic of the bindings, a missing symbol say, becomes an error).
fn call(what: &str, f: impl FnOnce() -> sys::ncclResult_t) -> Result<(), CollectiveError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(sys::ncclResult_t::ncclSuccess) => Ok(()),
        Ok(status) => Err(CollectiveError::Failed(format!(
            "{what}: {}",
            nccl_text(status)
        ))),
        Err(payload) => Err(CollectiveError::Failed(format!(
            "{what} panicked: {}",
            quabla_backend::abi::panic_message(payload.as_ref())
        ))),
    }
}

/// A new unique id (`ncclGetUniqueId`), made by rank 0.
pub fn unique_id() -> Result<Vec<u8>, CollectiveError> {
    let mut id = MaybeUninit::<sys::ncclUniqueId>::uninit();
    // SAFETY: NCCL writes the whole id.
    call("ncclGetUniqueId", || unsafe {
        sys::ncclGetUniqueId(id.as_mut_ptr())
    })?;
    // SAFETY: initialized by the successful call.
    let id = unsafe { id.assume_init() };
    Ok(id.internal.iter().map(|&c| c as u8).collect())
}

/// The program that folds `ranks` gathered parts of `len` values of `elem` (part `r` at
/// offset `r * len`) into one part, in rank order (see the module docs). Plain data: the
/// tests run it on the host model of the device.
pub fn fold_program(elem: Elem, fold: Fold, ranks: usize, len: usize) -> Program {
    let t = elem.c_name();
    let combine = match fold {
        Fold::Sum | Fold::Mean => "acc = acc + x;",
        // `maximum(a, b) = where(isnan(a) | (a > b), a, b)`.
        Fold::Max => "acc = (acc != acc || acc > x) ? acc : x;",
        Fold::Min => "acc = (acc != acc || acc < x) ? acc : x;",
    };
    let divide = if fold == Fold::Mean {
        "    acc = acc / (double)p2;\n"
    } else {
        ""
    };
    let body = format!(
        "    const long long i = qb_i;\n\
         \x20   double acc = (double)p0[i];\n\
         \x20   for (long long r = 1; r < p2; ++r) {{\n\
         \x20     const double x = (double)p0[r * p3 + i];\n\
         \x20     {combine}\n\
         \x20   }}\n\
         {divide}\
         \x20   p1[i] = ({t})acc;\n"
    );
    let kernel = codegen::kernel(
        vec![Param::In(elem), Param::Out(elem), Param::Int, Param::Int],
        &body,
    );
    let dtype = match elem {
        Elem::F64 => DType::F64,
        _ => DType::F32,
    };
    Program {
        compute: Elem::F64,
        kernels: vec![kernel],
        buffers: vec![
            BufferDecl {
                elem,
                len: ranks * len,
                role: Role::Input(0),
            },
            BufferDecl {
                elem,
                len,
                role: Role::Temp,
            },
        ],
        inputs: vec![0],
        steps: vec![Step::Launch(Launch {
            kernel: 0,
            items: len as u64,
            args: vec![
                Arg::Buf(0),
                Arg::Buf(1),
                Arg::Int(ranks as i64),
                Arg::Int(len as i64),
            ],
        })],
        outputs: vec![Output {
            buf: 1,
            dtype,
            shape: Shape::new(vec![len]).unwrap_or_else(|_| Shape::scalar()),
        }],
    }
}

/// One rank of an NCCL communicator, on one device (see the module docs).
pub struct NcclComm {
    comm: sys::ncclComm_t,
    device: Arc<Device>,
    rank: usize,
    size: usize,
    /// Set once a collective failed or timed out: the communicator was aborted.
    aborted: Mutex<bool>,
    /// The fold programs loaded so far, by element type, reduction and length.
    folds: Mutex<HashMap<(Elem, Fold, usize), Arc<Loaded>>>,
}

// SAFETY: the communicator handle is used under `aborted`'s lock (one call at a time), with the
// device's context current; NCCL allows a communicator to be used from any thread.
unsafe impl Send for NcclComm {}
// SAFETY: as above.
unsafe impl Sync for NcclComm {}

impl fmt::Debug for NcclComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "NcclComm(rank {} of {} on {:?})",
            self.rank, self.size, self.device
        )
    }
}

impl NcclComm {
    /// Joins the communicator of `id` as `rank` of `size`, on `device`
    /// (`ncclCommInitRank`, which waits for every rank to join).
    pub fn join(
        device: &Arc<Device>,
        id: &[u8],
        rank: usize,
        size: usize,
    ) -> Result<NcclComm, CollectiveError> {
        if id.len() != UNIQUE_ID_BYTES {
            return Err(CollectiveError::Failed(format!(
                "an NCCL unique id has {UNIQUE_ID_BYTES} bytes, not {}",
                id.len()
            )));
        }
        if rank >= size || size > i32::MAX as usize {
            return Err(CollectiveError::Failed(format!(
                "rank {rank} of {size} cannot join an NCCL communicator"
            )));
        }
        available().map_err(|u| CollectiveError::Failed(u.to_string()))?;
        device.bind()?;
        let mut unique = sys::ncclUniqueId {
            internal: [0; UNIQUE_ID_BYTES],
        };
        for (dst, &src) in unique.internal.iter_mut().zip(id) {
            *dst = src as _;
        }
        let mut comm = MaybeUninit::<sys::ncclComm_t>::uninit();
        // SAFETY: NCCL writes the handle on success; the device's context is current.
        call("ncclCommInitRank", || unsafe {
            sys::ncclCommInitRank(comm.as_mut_ptr(), size as i32, unique, rank as i32)
        })?;
        Ok(NcclComm {
            // SAFETY: written by the successful call.
            comm: unsafe { comm.assume_init() },
            device: device.clone(),
            rank,
            size,
            aborted: Mutex::new(false),
            folds: Mutex::new(HashMap::new()),
        })
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Runs `enqueue` (which queues NCCL calls on the device's stream) and waits for the stream
    /// until `deadline`, aborting the communicator on an error or a timeout.
    fn collective(
        &self,
        what: &str,
        deadline: Option<Instant>,
        enqueue: impl FnOnce(sys::ncclComm_t, sys::cudaStream_t) -> Result<(), CollectiveError>,
    ) -> Result<(), CollectiveError> {
        let mut aborted = self.aborted.lock().unwrap_or_else(|e| e.into_inner());
        if *aborted {
            return Err(CollectiveError::Failed(format!(
                "{what}: the NCCL communicator was aborted by an earlier failure"
            )));
        }
        self.device.bind()?;
        let stream = self.device.stream_handle() as sys::cudaStream_t;
        let result = enqueue(self.comm, stream).and_then(|()| self.wait(what, deadline));
        if result.is_err() {
            // SAFETY: the handle is live; aborting ends every operation it has in flight.
            let _ = catch_unwind(|| unsafe { sys::ncclCommAbort(self.comm) });
            *aborted = true;
        }
        result
    }

    /// Polls the stream and NCCL's asynchronous error until the queued work ends.
    fn wait(&self, what: &str, deadline: Option<Instant>) -> Result<(), CollectiveError> {
        let mut pause = Duration::from_micros(20);
        loop {
            if self.device.stream_done()? {
                return Ok(());
            }
            let mut status = sys::ncclResult_t::ncclSuccess;
            // SAFETY: the handle is live; NCCL writes the status.
            call("ncclCommGetAsyncError", || unsafe {
                sys::ncclCommGetAsyncError(self.comm, &mut status)
            })?;
            if !matches!(
                status,
                sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress
            ) {
                return Err(CollectiveError::Failed(format!(
                    "{what}: {}",
                    nccl_text(status)
                )));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(CollectiveError::Timeout);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }

    /// Every rank's `bytes` bytes at `send`, concatenated in rank order, on this device.
    pub fn all_gather_buffer(
        &self,
        send: &DeviceBuffer,
        bytes: usize,
        deadline: Option<Instant>,
    ) -> Result<DeviceBuffer, CollectiveError> {
        let recv = self
            .device
            .alloc(bytes * self.size, "an all_gather's result")?;
        let (sendp, recvp) = (send.ptr(), recv.ptr());
        self.collective("ncclAllGather", deadline, |comm, stream| {
            // SAFETY: `send` holds `bytes` bytes and `recv` `bytes * size`, both on this device.
            call("ncclAllGather", || unsafe {
                sys::ncclAllGather(
                    sendp as *const _,
                    recvp as *mut _,
                    bytes,
                    sys::ncclDataType_t::ncclUint8,
                    comm,
                    stream,
                )
            })
        })?;
        Ok(recv)
    }

    /// `root`'s `bytes` bytes at `buffer` into `buffer` on every rank.
    pub fn broadcast_buffer(
        &self,
        buffer: &DeviceBuffer,
        bytes: usize,
        root: usize,
        deadline: Option<Instant>,
    ) -> Result<(), CollectiveError> {
        if root >= self.size {
            return Err(CollectiveError::Failed(format!(
                "broadcast from rank {root} of {}",
                self.size
            )));
        }
        let p = buffer.ptr();
        self.collective("ncclBroadcast", deadline, |comm, stream| {
            // SAFETY: `buffer` holds `bytes` bytes on this device; in place is allowed.
            call("ncclBroadcast", || unsafe {
                sys::ncclBroadcast(
                    p as *const _,
                    p as *mut _,
                    bytes,
                    sys::ncclDataType_t::ncclUint8,
                    root as i32,
                    comm,
                    stream,
                )
            })
        })
    }

    /// The rank-order fold of every rank's `len` values of `elem` (float32 or float64) at
    /// `send`: a new buffer, the same bits on every rank.
    pub fn all_reduce_buffer(
        &self,
        send: &DeviceBuffer,
        elem: Elem,
        len: usize,
        fold: Fold,
        deadline: Option<Instant>,
    ) -> Result<DeviceBuffer, CollectiveError> {
        if !matches!(elem, Elem::F32 | Elem::F64) {
            return Err(CollectiveError::Failed(format!(
                "all_reduce of {elem} values: only float32 and float64 are reduced"
            )));
        }
        let gathered = self.all_gather_buffer(send, len * elem.size(), deadline)?;
        if len == 0 {
            return Ok(self.device.alloc(0, "an all_reduce's result")?);
        }
        let program = {
            let mut folds = self.folds.lock().unwrap_or_else(|e| e.into_inner());
            match folds.get(&(elem, fold, len)) {
                Some(p) => p.clone(),
                None => {
                    let loaded =
                        Arc::new(self.device.load(fold_program(elem, fold, self.size, len))?);
                    folds.insert((elem, fold, len), loaded.clone());
                    loaded
                }
            }
        };
        Ok(program.run_on_buffer(&gathered)?)
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        let aborted = *self.aborted.lock().unwrap_or_else(|e| e.into_inner());
        if !aborted {
            let _ = self.device.bind();
            // SAFETY: the handle is live and destroyed once; nothing is in flight (every
            // collective waited for its end).
            let _ = catch_unwind(|| unsafe { sys::ncclCommDestroy(self.comm) });
        }
    }
}

/// The collectives of one device of the CUDA backend ([`quabla_backend::Backend::collectives`]).
#[derive(Debug)]
pub struct NcclCollectives {
    device: Arc<Device>,
}

impl NcclCollectives {
    pub fn new(device: Arc<Device>) -> NcclCollectives {
        NcclCollectives { device }
    }
}

impl Collectives for NcclCollectives {
    fn library(&self) -> &'static str {
        "nccl"
    }

    fn unique_id(&self) -> Result<Vec<u8>, CollectiveError> {
        available().map_err(|u| CollectiveError::Failed(u.to_string()))?;
        unique_id()
    }

    fn join(
        &self,
        id: &[u8],
        rank: usize,
        size: usize,
    ) -> Result<Box<dyn DeviceCommunicator>, CollectiveError> {
        Ok(Box::new(NcclComm::join(&self.device, id, rank, size)?))
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

/// Host data crosses to the device and back around each collective: one upload, the NCCL
/// calls (and the fold kernel of a reduction), one download.
impl DeviceCommunicator for NcclComm {
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
        let send = self.device.upload_bytes(mine, "a collective's data")?;
        let all = self.all_gather_buffer(&send, mine.len(), deadline)?;
        Ok(self.device.download_bytes(&all, mine.len() * self.size)?)
    }

    fn broadcast(
        &self,
        data: &[u8],
        root: usize,
        deadline: Option<Instant>,
    ) -> Result<Vec<u8>, CollectiveError> {
        let buffer = self.device.upload_bytes(data, "a collective's data")?;
        self.broadcast_buffer(&buffer, data.len(), root, deadline)?;
        Ok(self.device.download_bytes(&buffer, data.len())?)
    }

    fn all_reduce(
        &self,
        data: &HostData,
        fold: Fold,
        deadline: Option<Instant>,
    ) -> Result<HostData, CollectiveError> {
        let elem = match data {
            HostData::F32(_) => Elem::F32,
            HostData::F64(_) => Elem::F64,
            other => {
                return Err(CollectiveError::Failed(format!(
                    "all_reduce of {} data: only float32 and float64 are reduced",
                    other.dtype().name()
                )))
            }
        };
        let len = data.len();
        let send = self
            .device
            .upload_bytes(&to_bytes(data), "a collective's data")?;
        let reduced = self.all_reduce_buffer(&send, elem, len, fold, deadline)?;
        let bytes = self.device.download_bytes(&reduced, len * elem.size())?;
        Ok(match elem {
            Elem::F32 => HostData::F32(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .collect(),
            ),
            _ => HostData::F64(
                bytes
                    .chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect(),
            ),
        })
    }
}
