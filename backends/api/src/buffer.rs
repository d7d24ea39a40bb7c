//! Buffers owned by a backend: where a tensor lives between runs, so that a plan's inputs and
//! outputs can stay in a device's memory and only the values a user reads cross to the host.
//!
//! # Why it is shaped this way
//!
//! There are two layers, one for each side of the interface:
//!
//! - [`Memory`] is what a backend hands out and takes back: the storage of one tensor, either
//!   host memory ([`Memory::Host`], which the CPU and every backend whose memory is the host's
//!   use, so their buffers cost nothing to make or read) or an object of the backend's own
//!   ([`Memory::Backend`], device memory or a plugin's buffer object), which only that backend
//!   understands. Both are reference-counted handles: lending one to a run clones a handle, and
//!   a run may reuse a *donated* input's storage for an output only when its handle is the last
//!   one ([`Bound::donated`]), so storage that anybody still reads is never written.
//! - [`Buffer`] is the caller's handle on one [`Memory`] and its type, with the two ways a
//!   buffer ends: [`Buffer::free`], and donation to a run ([`BufferArg::Donated`]). Using a
//!   buffer after either is the typed error [`BackendError::InvalidBuffer`], never a crash or
//!   a read of reused storage. A buffer is cheap to clone (clones are handles on the same
//!   buffer: freeing or donating one ends them all).
//!
//! A run on resident buffers ([`Executable::run_resident`](crate::Executable::run_resident))
//! leaves its outputs where they are; uploading and downloading are separate, counted calls
//! ([`Transfers`]), so every copy between host and device is one the caller asked for.
//!
//! This module owns the handle types and their states; it must not know any backend.

use crate::{BackendError, Executable, HostTensor, Result, RunFailure};
use quabla_ir::{DType, Shape};
use std::any::Any;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Storage a backend keeps in memory of its own (a device pointer, a plugin's buffer object).
/// Any `Send + Sync + Debug` type is one; the backend that made it downcasts it back with
/// [`Memory::backend`].
pub trait BackendMemory: Any + Send + Sync + fmt::Debug {}

impl<T: Any + Send + Sync + fmt::Debug> BackendMemory for T {}

/// The storage of one tensor, as a backend hands it out and takes it back.
#[derive(Clone, Debug)]
pub enum Memory {
    /// Host memory (shared, read-only while shared).
    Host(HostTensor),
    /// Memory the backend owns elsewhere; only the backend that made it can use it.
    Backend(Arc<dyn BackendMemory>),
}

impl Memory {
    /// The host tensor of host memory (`None` for a backend's own memory).
    pub fn host(&self) -> Option<&HostTensor> {
        match self {
            Memory::Host(t) => Some(t),
            Memory::Backend(_) => None,
        }
    }

    /// The backend's own storage as `T`, when it is one.
    pub fn backend<T: BackendMemory>(&self) -> Option<&T> {
        match self {
            Memory::Backend(m) => (m.as_ref() as &dyn Any).downcast_ref::<T>(),
            Memory::Host(_) => None,
        }
    }

    /// The backend's own storage as a shared `T`, when it is one (for a backend that keeps the
    /// handle, or checks with [`Arc::strong_count`] that nobody else holds it).
    pub fn backend_arc<T: BackendMemory>(&self) -> Option<Arc<T>> {
        match self {
            Memory::Backend(m) => {
                let any: Arc<dyn Any + Send + Sync> = m.clone();
                any.downcast::<T>().ok()
            }
            Memory::Host(_) => None,
        }
    }
}

/// One input of a run on resident memory: the storage, and whether the caller donated it. A
/// backend may write a donated input's storage (reuse it for an output) once the run no longer
/// reads it, and only when nobody else holds a handle on it; every other input is read only.
#[derive(Clone, Debug)]
pub struct Bound {
    pub memory: Memory,
    pub donated: bool,
}

/// Counts of the copies between the host and a backend's memory since the backend was opened.
/// A backend whose memory is the host's moves nothing and reports zeros.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    pub uploads: u64,
    pub downloads: u64,
    pub bytes_uploaded: u64,
    pub bytes_downloaded: u64,
}

impl fmt::Display for Transfers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} uploads ({} bytes), {} downloads ({} bytes)",
            self.uploads, self.bytes_uploaded, self.downloads, self.bytes_downloaded
        )
    }
}

/// The counters a backend that copies keeps (atomics, so any thread may count).
#[derive(Debug, Default)]
pub struct TransferCounter {
    uploads: AtomicU64,
    downloads: AtomicU64,
    bytes_uploaded: AtomicU64,
    bytes_downloaded: AtomicU64,
}

impl TransferCounter {
    /// Counts one upload of `bytes`.
    pub fn upload(&self, bytes: usize) {
        self.uploads.fetch_add(1, Ordering::Relaxed);
        self.bytes_uploaded
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Counts one download of `bytes`.
    pub fn download(&self, bytes: usize) {
        self.downloads.fetch_add(1, Ordering::Relaxed);
        self.bytes_downloaded
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn read(&self) -> Transfers {
        Transfers {
            uploads: self.uploads.load(Ordering::Relaxed),
            downloads: self.downloads.load(Ordering::Relaxed),
            bytes_uploaded: self.bytes_uploaded.load(Ordering::Relaxed),
            bytes_downloaded: self.bytes_downloaded.load(Ordering::Relaxed),
        }
    }
}

/// How a buffer stopped being usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    Freed,
    Donated,
}

#[derive(Debug)]
enum State {
    Live(Memory),
    Ended(Ended),
}

#[derive(Debug)]
struct Inner {
    backend: Arc<str>,
    dtype: DType,
    shape: Shape,
    state: Mutex<State>,
}

/// A handle on one tensor's storage in the memory of one backend (see the module docs).
#[derive(Clone)]
pub struct Buffer {
    inner: Arc<Inner>,
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Buffer({}{} on {}",
            self.inner.dtype.name(),
            self.inner.shape,
            self.inner.backend
        )?;
        match self.ended() {
            Some(Ended::Freed) => f.write_str(", freed)"),
            Some(Ended::Donated) => f.write_str(", donated)"),
            None => f.write_str(")"),
        }
    }
}

impl Buffer {
    /// A handle on `memory` of backend `backend`, holding a tensor of `dtype` and `shape`.
    pub fn new(backend: &str, dtype: DType, shape: Shape, memory: Memory) -> Buffer {
        Buffer::named(Arc::from(backend), dtype, shape, memory)
    }

    /// [`Buffer::new`] with the backend's name shared (no allocation for it).
    pub fn named(backend: Arc<str>, dtype: DType, shape: Shape, memory: Memory) -> Buffer {
        Buffer {
            inner: Arc::new(Inner {
                backend,
                dtype,
                shape,
                state: Mutex::new(State::Live(memory)),
            }),
        }
    }

    /// A handle on host memory of backend `backend` (the CPU's buffers).
    pub fn host(backend: &str, tensor: HostTensor) -> Buffer {
        let (dtype, shape) = (tensor.dtype(), tensor.shape.clone());
        Buffer::new(backend, dtype, shape, Memory::Host(tensor))
    }

    /// The backend whose memory holds the buffer.
    pub fn backend(&self) -> &str {
        &self.inner.backend
    }

    pub fn dtype(&self) -> DType {
        self.inner.dtype
    }

    pub fn shape(&self) -> &Shape {
        &self.inner.shape
    }

    /// Size of the elements in bytes.
    pub fn nbytes(&self) -> usize {
        self.inner.shape.nbytes(self.inner.dtype)
    }

    /// Whether the buffer can still be used (neither freed nor donated).
    pub fn is_live(&self) -> bool {
        self.ended().is_none()
    }

    /// Whether `other` is a handle on the same buffer.
    pub fn same(&self, other: &Buffer) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn ended(&self) -> Option<Ended> {
        match &*self.lock() {
            State::Live(_) => None,
            State::Ended(e) => Some(*e),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is a plain value that no panic leaves half-written.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The error for using this buffer after it ended.
    fn ended_error(&self, ended: Ended, action: &str) -> BackendError {
        let why = match ended {
            Ended::Freed => "it was freed",
            Ended::Donated => {
                "it was donated to an earlier run, which may have reused its storage; use that \
                 run's outputs instead"
            }
        };
        BackendError::InvalidBuffer {
            message: format!(
                "cannot {action} a {}{} buffer of {}: {why}",
                self.inner.dtype.name(),
                self.inner.shape,
                self.inner.backend
            ),
        }
    }

    /// A handle on the storage, to lend to a run or a download (`InvalidBuffer` once freed or
    /// donated).
    pub fn memory(&self) -> Result<Memory> {
        match &*self.lock() {
            State::Live(m) => Ok(m.clone()),
            State::Ended(e) => Err(self.ended_error(*e, "use")),
        }
    }

    /// Takes the storage out for a run it is donated to; the buffer (and every clone of this
    /// handle) is then ended (`InvalidBuffer` on any later use).
    pub fn donate(&self) -> Result<Memory> {
        let mut state = self.lock();
        match std::mem::replace(&mut *state, State::Ended(Ended::Donated)) {
            State::Live(m) => Ok(m),
            State::Ended(e) => {
                *state = State::Ended(e);
                drop(state);
                Err(self.ended_error(e, "donate"))
            }
        }
    }

    /// Gives a donated buffer its storage back, after a run that failed returned it
    /// ([`crate::RunFailure`]): the buffer is live again, as if it had never been donated. For
    /// code that runs plans on buffers; a buffer that is live or freed is left as it is.
    pub fn restore(&self, memory: Memory) {
        let mut state = self.lock();
        if matches!(*state, State::Ended(Ended::Donated)) {
            *state = State::Live(memory);
        }
    }

    /// Makes a donated buffer live again on new `memory` of its type: the output of the run it
    /// was donated to that takes its place (a training step's new state, kept in the same
    /// handles step after step). `InvalidBuffer` for a buffer that is live or freed.
    pub fn refill(&self, memory: Memory) -> Result<()> {
        let mut state = self.lock();
        match &*state {
            State::Ended(Ended::Donated) => {
                *state = State::Live(memory);
                Ok(())
            }
            State::Live(_) => Err(BackendError::InvalidBuffer {
                message: "only a donated buffer can be refilled".into(),
            }),
            State::Ended(e) => {
                let e = *e;
                drop(state);
                Err(self.ended_error(e, "refill"))
            }
        }
    }

    /// Releases the storage now (it is freed when the last run that borrowed it ends). Freeing
    /// a buffer twice, or a donated one, is `InvalidBuffer`.
    pub fn free(&self) -> Result<()> {
        let mut state = self.lock();
        match std::mem::replace(&mut *state, State::Ended(Ended::Freed)) {
            State::Live(memory) => {
                drop(state);
                drop(memory);
                Ok(())
            }
            State::Ended(e) => {
                *state = State::Ended(e);
                drop(state);
                Err(self.ended_error(e, "free"))
            }
        }
    }

    /// `InvalidBuffer` unless the buffer belongs to `backend`.
    pub fn check_backend(&self, backend: &str) -> Result<()> {
        if *self.inner.backend == *backend {
            Ok(())
        } else {
            Err(BackendError::InvalidBuffer {
                message: format!(
                    "a buffer of {} cannot be used by {backend}; buffers do not move between \
                     backends (download it and upload it to {backend})",
                    self.inner.backend
                ),
            })
        }
    }
}

/// One input of a run on buffers: lent for the run, or donated to it (the caller gives the
/// buffer up, and the run may reuse its storage for an output).
#[derive(Debug)]
pub enum BufferArg<'a> {
    Lent(&'a Buffer),
    Donated(Buffer),
}

impl BufferArg<'_> {
    /// The buffer this argument names.
    pub fn buffer(&self) -> &Buffer {
        match self {
            BufferArg::Lent(b) => b,
            BufferArg::Donated(b) => b,
        }
    }
}

/// Runs `exe`, a plan compiled by the backend named `backend` whose outputs have the types
/// `outputs`, on buffers of that backend, lent or donated, and returns the outputs as buffers of
/// that backend (nothing crosses to the host). Every buffer is checked (its backend, that it is
/// neither freed nor donated) before any is donated; a donated buffer ends only when the run
/// succeeds, so after a failed run the caller still holds everything it gave.
pub fn run_buffers(
    exe: &dyn Executable,
    backend: &str,
    outputs: &[(DType, Shape)],
    inputs: Vec<BufferArg<'_>>,
) -> Result<Vec<Buffer>> {
    let memories = run_memories(exe, backend, inputs)?;
    if memories.len() != outputs.len() {
        return Err(BackendError::Device {
            device: backend.to_string(),
            message: format!(
                "a run returned {} outputs for a plan with {}",
                memories.len(),
                outputs.len()
            ),
        });
    }
    let name: Arc<str> = Arc::from(backend);
    Ok(memories
        .into_iter()
        .zip(outputs)
        .map(|(memory, (dtype, shape))| Buffer::named(name.clone(), *dtype, shape.clone(), memory))
        .collect())
}

/// [`run_buffers`] returning the outputs' memory without wrapping it in new buffers: for a
/// caller that keeps its buffers across runs and [`Buffer::refill`]s them (a training loop, whose
/// state buffers take the outputs of the step they were donated to).
pub fn run_memories(
    exe: &dyn Executable,
    backend: &str,
    inputs: Vec<BufferArg<'_>>,
) -> Result<Vec<Memory>> {
    for arg in &inputs {
        let buffer = arg.buffer();
        buffer.check_backend(backend)?;
        buffer.memory()?;
    }
    let mut donated = Vec::new();
    let mut bound = Vec::with_capacity(inputs.len());
    for arg in &inputs {
        let bind = match arg {
            BufferArg::Lent(b) => b.memory().map(|memory| Bound {
                memory,
                donated: false,
            }),
            BufferArg::Donated(b) => b.donate().map(|memory| {
                donated.push(bound.len());
                Bound {
                    memory,
                    donated: true,
                }
            }),
        };
        match bind {
            Ok(b) => bound.push(b),
            // Another thread freed or donated it after the check: put back what was taken.
            Err(e) => {
                restore(&inputs, &donated, bound);
                return Err(e);
            }
        }
    }
    match exe.run_resident(bound) {
        Ok(memories) => Ok(memories),
        Err(RunFailure {
            error,
            inputs: back,
        }) => {
            restore(&inputs, &donated, back);
            Err(error)
        }
    }
}

/// Gives the donated buffers among `inputs` (positions `donated`) their memory back from
/// `bound`, after a run that did not happen or failed.
fn restore(inputs: &[BufferArg<'_>], donated: &[usize], bound: Vec<Bound>) {
    let mut bound: Vec<Option<Bound>> = bound.into_iter().map(Some).collect();
    for &i in donated {
        if let (Some(arg), Some(Some(b))) = (inputs.get(i), bound.get_mut(i).map(Option::take)) {
            arg.buffer().restore(b.memory);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quabla_ir::HostData;

    fn host(values: &[f64]) -> HostTensor {
        HostTensor::new(
            Shape::new(vec![values.len()]).unwrap(),
            HostData::F64(values.into()),
        )
    }

    #[test]
    fn a_freed_or_donated_buffer_is_a_typed_error_for_every_handle() {
        let b = Buffer::host("cpu", host(&[1.0, 2.0]));
        let clone = b.clone();
        assert!(b.memory().is_ok());
        b.free().unwrap();
        for err in [
            clone.memory().unwrap_err(),
            clone.free().unwrap_err(),
            clone.donate().unwrap_err(),
        ] {
            assert!(
                matches!(&err, BackendError::InvalidBuffer { message } if message.contains("it was freed")),
                "{err}"
            );
        }
        let d = Buffer::host("cpu", host(&[3.0]));
        let memory = d.donate().unwrap();
        assert_eq!(memory.host().unwrap(), &host(&[3.0]));
        let err = d.memory().unwrap_err();
        assert!(err.to_string().contains("donated"), "{err}");
        assert!(d.free().is_err());
        assert!(!d.is_live());
        assert_eq!(format!("{d:?}"), "Buffer(float64[1] on cpu, donated)");
        // A failed run gives the storage back.
        d.restore(memory);
        assert_eq!(d.memory().unwrap().host().unwrap(), &host(&[3.0]));
        // A freed buffer stays freed.
        b.restore(Memory::Host(host(&[9.0])));
        assert!(b.memory().is_err());
    }

    #[test]
    fn buffers_refuse_other_backends() {
        let b = Buffer::host("toy", host(&[1.0]));
        assert!(b.check_backend("toy").is_ok());
        let err = b.check_backend("cpu").unwrap_err();
        assert!(err
            .to_string()
            .contains("buffer of toy cannot be used by cpu"));
    }

    #[derive(Debug)]
    struct Device(u32);

    #[test]
    fn backend_memory_downcasts_to_its_own_type_only() {
        let m = Memory::Backend(Arc::new(Device(7)));
        assert_eq!(m.backend::<Device>().map(|d| d.0), Some(7));
        assert!(m.backend::<String>().is_none());
        let arc = m.backend_arc::<Device>().unwrap();
        assert_eq!(Arc::strong_count(&arc), 2);
        assert!(Memory::Host(host(&[1.0])).backend::<Device>().is_none());
    }

    #[test]
    fn transfers_count_calls_and_bytes() {
        let c = TransferCounter::default();
        c.upload(16);
        c.upload(8);
        c.download(4);
        assert_eq!(
            c.read(),
            Transfers {
                uploads: 2,
                downloads: 1,
                bytes_uploaded: 24,
                bytes_downloaded: 4
            }
        );
        assert_eq!(
            c.read().to_string(),
            "2 uploads (24 bytes), 1 downloads (4 bytes)"
        );
    }
}
