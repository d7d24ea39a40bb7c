//! The runtime: one CUDA device, its stream, its memory, and the execution of programs on it.
//!
//! - [`Device`]: the context (the device's primary context), one stream that orders every
//!   copy, kernel and library call of the backend, the cuBLAS and cuSOLVER handles, the
//!   transfer counts, and the kernel cache. Every entry point makes the context current on the
//!   calling thread first.
//! - [`memory`]: allocations and the tensors handed out ([`CudaMemory`]).
//! - [`exec`]: a program loaded on the device ([`Loaded`]) and its executor; [`regions`] runs
//!   control flow, [`blas`] and [`solver`] call the libraries.
//!
//! This is the only part of the backend that needs a GPU. It is kept small and direct: the
//! decisions (what runs, in which buffers, with which library arguments) are all made by the
//! lowering, which is tested without a device; the executor passes them through.

pub mod blas;
mod exec;
mod memory;
pub mod solver;

pub use exec::Loaded;
pub use memory::{CudaMemory, DeviceBuffer};

use crate::cache::KernelCache;
use crate::nvrtc::{Nvrtc, Target};
use cudarc::driver::{CudaContext, CudaStream};
use quabla_backend::{BackendError, HostTensor, TransferCounter, Transfers, Unavailable};
use quabla_ir::{DType, HostData, Shape};
use std::fmt;
use std::sync::{Arc, Mutex};

/// A driver error as a backend error, saying what was being done.
pub(crate) fn driver_error(what: &str, e: cudarc::driver::DriverError) -> BackendError {
    BackendError::Device {
        device: crate::NAME.into(),
        message: format!("{what}: {e:?}"),
    }
}

/// The parts of a device every buffer keeps alive.
pub struct DeviceInner {
    pub(crate) ordinal: usize,
    pub(crate) context: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    /// Whether the device has memory pools (stream-ordered allocation).
    pub(crate) async_alloc: bool,
}

impl fmt::Debug for DeviceInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cuda:{}", self.ordinal)
    }
}

/// One CUDA device (see the module docs).
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
    name: String,
    /// Compute capability as `major * 10 + minor` (`90` for an H100).
    arch: u32,
    multiprocessors: u32,
    nvrtc: Nvrtc,
    pub(crate) blas: Mutex<blas::Blas>,
    pub(crate) solver: Mutex<solver::Solver>,
    transfers: TransferCounter,
    cache: KernelCache,
    /// Whether loop bodies are replayed as CUDA graphs (`QUABLA_CUDA_GRAPHS=0` turns it off).
    graphs: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Device(cuda:{} {}, sm_{})",
            self.inner.ordinal, self.name, self.arch
        )
    }
}

impl Device {
    /// Opens device `ordinal`: its primary context, a stream, the library handles. Finds the
    /// libraries first (`crate::probe`), so without them this is `Unavailable`, not a panic
    /// of the bindings.
    pub fn open(ordinal: usize) -> Result<Arc<Device>, Unavailable> {
        let count = crate::probe()?;
        if ordinal >= count {
            return Err(Unavailable::new(format!(
                "cuda:{ordinal} does not exist: the driver lists {count} device(s)"
            )));
        }
        let why = |what: &str, e: &dyn fmt::Debug| {
            Unavailable::new(format!("cuda:{ordinal}: {what}: {e:?}"))
        };
        let context = CudaContext::new(ordinal).map_err(|e| why("creating the context", &e))?;
        let stream = context
            .new_stream()
            .map_err(|e| why("creating a stream", &e))?;
        let (major, minor) = context
            .compute_capability()
            .map_err(|e| why("reading the compute capability", &e))?;
        let multiprocessors = context
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(|e| why("reading the multiprocessor count", &e))?;
        let name = context.name().unwrap_or_else(|_| "unknown device".into());
        let nvrtc = Nvrtc::open_default()?;
        let async_alloc = context.has_async_alloc();
        let inner = Arc::new(DeviceInner {
            ordinal,
            context,
            stream,
            async_alloc,
        });
        let blas =
            blas::Blas::new(&inner).map_err(|e| Unavailable::missing_library("libcublas", e))?;
        let solver = solver::Solver::new(&inner)
            .map_err(|e| Unavailable::missing_library("libcusolver", e))?;
        Ok(Arc::new(Device {
            inner,
            name,
            arch: (major * 10 + minor) as u32,
            multiprocessors: multiprocessors.max(1) as u32,
            nvrtc,
            blas: Mutex::new(blas),
            solver: Mutex::new(solver),
            transfers: TransferCounter::default(),
            cache: KernelCache::from_env(),
            graphs: std::sync::atomic::AtomicBool::new(
                std::env::var_os("QUABLA_CUDA_GRAPHS").is_none_or(|v| v != "0"),
            ),
        }))
    }

    /// Whether loop bodies are replayed as recorded CUDA graphs (on unless the environment
    /// variable `QUABLA_CUDA_GRAPHS` is `0`); off, every trip launches its kernels.
    pub fn graphs(&self) -> bool {
        self.graphs.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Turns graph replay of loop bodies on or off for later runs (the benchmarks compare
    /// both).
    pub fn set_graphs(&self, on: bool) {
        self.graphs.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// The device's name (`NVIDIA H100 80GB HBM3`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Compute capability as `major * 10 + minor`.
    pub fn arch(&self) -> u32 {
        self.arch
    }

    pub fn multiprocessors(&self) -> u32 {
        self.multiprocessors
    }

    pub fn nvrtc(&self) -> &Nvrtc {
        &self.nvrtc
    }

    pub fn cache(&self) -> &KernelCache {
        &self.cache
    }

    /// What the kernels are compiled to: the device's own machine code when NVRTC knows its
    /// architecture, else PTX for the newest architecture NVRTC knows below it.
    pub fn target(&self) -> Target {
        let archs = self.nvrtc.architectures();
        if archs.contains(&self.arch) || archs.is_empty() {
            Target::Cubin(self.arch)
        } else {
            let best = archs.iter().copied().filter(|&a| a <= self.arch).max();
            Target::Ptx(best.unwrap_or(self.arch))
        }
    }

    /// Makes the context current on this thread.
    pub(crate) fn bind(&self) -> Result<(), BackendError> {
        self.inner
            .context
            .bind_to_thread()
            .map_err(|e| driver_error("making the CUDA context current", e))
    }

    /// Waits for everything queued on the stream.
    pub(crate) fn sync(&self) -> Result<(), BackendError> {
        self.inner
            .stream
            .synchronize()
            .map_err(|e| driver_error("waiting for the device", e))
    }

    /// Allocates `bytes` on the device's stream (`OutOfMemory` naming `what` when refused).
    pub fn alloc(&self, bytes: usize, what: &str) -> Result<DeviceBuffer, BackendError> {
        DeviceBuffer::alloc(&self.inner, bytes, what)
    }

    /// The device's stream, for libraries that queue work on it (NCCL).
    pub(crate) fn stream_handle(&self) -> cudarc::driver::sys::CUstream {
        self.inner.stream.cu_stream()
    }

    /// Whether everything queued on the stream has finished, without waiting.
    pub(crate) fn stream_done(&self) -> Result<bool, BackendError> {
        // SAFETY: the stream is live.
        let status = unsafe { cudarc::driver::sys::cuStreamQuery(self.inner.stream.cu_stream()) };
        match status {
            cudarc::driver::sys::CUresult::CUDA_SUCCESS => Ok(true),
            cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => Err(driver_error(
                "waiting for the device",
                cudarc::driver::DriverError(other),
            )),
        }
    }

    /// Copies host bytes into a new buffer (waits for the copy).
    pub fn upload_bytes(&self, bytes: &[u8], what: &str) -> Result<DeviceBuffer, BackendError> {
        self.bind()?;
        let buffer = self.upload_values(bytes, what)?;
        self.transfers.upload(bytes.len());
        Ok(buffer)
    }

    /// Reads the first `len` bytes of `buffer` back (waits for the stream first).
    pub fn download_bytes(
        &self,
        buffer: &DeviceBuffer,
        len: usize,
    ) -> Result<Vec<u8>, BackendError> {
        self.bind()?;
        let out = self.read_values::<u8>(buffer.ptr(), len.min(buffer.bytes()))?;
        self.transfers.download(out.len());
        Ok(out)
    }

    /// Copies `values` into a new buffer (stream-ordered; waits for the copy, so the host
    /// slice may go).
    pub(crate) fn upload_values<T: Copy>(
        &self,
        values: &[T],
        what: &str,
    ) -> Result<DeviceBuffer, BackendError> {
        let buffer = self.alloc(std::mem::size_of_val(values), what)?;
        if !values.is_empty() {
            // SAFETY: the buffer holds `size_of_val(values)` bytes; the copy is finished
            // before `values` can go (the sync below).
            unsafe {
                cudarc::driver::result::memcpy_htod_async(
                    buffer.ptr(),
                    values,
                    self.inner.stream.cu_stream(),
                )
            }
            .map_err(|e| driver_error("copying to the device", e))?;
        }
        self.sync()?;
        Ok(buffer)
    }

    /// Reads `len` elements of `T` at `ptr` (waits for the stream first).
    pub(crate) fn read_values<T: Copy + Default>(
        &self,
        ptr: u64,
        len: usize,
    ) -> Result<Vec<T>, BackendError> {
        let mut out = vec![T::default(); len];
        // SAFETY: `ptr` addresses at least `len` elements of `T` written by this stream; the
        // sync below finishes the copy before `out` is read.
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(&mut out, ptr, self.inner.stream.cu_stream())
        }
        .map_err(|e| driver_error("copying from the device", e))?;
        self.sync()?;
        Ok(out)
    }

    /// Uploads a host tensor (one counted upload).
    pub fn upload(&self, tensor: &HostTensor) -> Result<CudaMemory, BackendError> {
        self.bind()?;
        let what = format!(
            "a tensor of shape {} {}",
            tensor.shape,
            tensor.dtype().name()
        );
        let buffer = match &tensor.data {
            HostData::F32(v) => self.upload_values::<f32>(v, &what)?,
            HostData::F64(v) => self.upload_values::<f64>(v, &what)?,
            HostData::Bool(v) => {
                let f: Vec<f32> = v.iter().map(|&b| if b { 1.0 } else { 0.0 }).collect();
                self.upload_values::<f32>(&f, &what)?
            }
            HostData::I32(v) => self.upload_values::<i32>(v, &what)?,
            HostData::I64(v) => self.upload_values::<i64>(v, &what)?,
        };
        self.transfers.upload(tensor.shape.nbytes(tensor.dtype()));
        Ok(CudaMemory {
            dtype: tensor.dtype(),
            shape: tensor.shape.clone(),
            buffer,
        })
    }

    /// Downloads a tensor (one counted download).
    pub fn download(&self, memory: &CudaMemory) -> Result<HostTensor, BackendError> {
        if !memory.is_on(&self.inner) {
            return Err(memory.elsewhere(&self.inner));
        }
        self.bind()?;
        let n = memory.shape.size();
        let data = match memory.dtype {
            DType::F64 => HostData::F64(self.read_values::<f64>(memory.ptr(), n)?.into()),
            DType::F32 => HostData::F32(self.read_values::<f32>(memory.ptr(), n)?.into()),
            DType::Bool => {
                let f = self.read_values::<f32>(memory.ptr(), n)?;
                HostData::Bool(f.iter().map(|&x| x != 0.0).collect())
            }
            DType::I32 => HostData::I32(self.read_values::<i32>(memory.ptr(), n)?.into()),
            DType::I64 => HostData::I64(self.read_values::<i64>(memory.ptr(), n)?.into()),
        };
        self.transfers.download(memory.shape.nbytes(memory.dtype));
        Ok(HostTensor::new(memory.shape.clone(), data))
    }

    /// Counts a readback the backend makes itself (a predicate, a print, a status check).
    pub(crate) fn count_readback(&self, bytes: usize) {
        self.transfers.download(bytes);
    }

    /// A tensor of zeros.
    pub fn allocate(&self, dtype: DType, shape: &Shape) -> Result<CudaMemory, BackendError> {
        self.bind()?;
        let elem = crate::program::storage_of(dtype);
        let bytes = shape.size() * elem.size();
        let what = format!("a tensor of shape {shape} {}", dtype.name());
        let buffer = self.alloc(bytes, &what)?;
        // SAFETY: the buffer holds `bytes` bytes, written on this stream.
        unsafe {
            cudarc::driver::result::memset_d8_async(
                buffer.ptr(),
                0,
                bytes,
                self.inner.stream.cu_stream(),
            )
        }
        .map_err(|e| driver_error("clearing device memory", e))?;
        Ok(CudaMemory {
            dtype,
            shape: shape.clone(),
            buffer,
        })
    }

    pub fn transfers(&self) -> Transfers {
        self.transfers.read()
    }

    /// Loads a program: its kernels compiled (or taken from the cache) and loaded, its
    /// constants uploaded.
    pub fn load(
        self: &Arc<Self>,
        program: crate::program::Program,
    ) -> Result<Loaded, BackendError> {
        self.bind()?;
        Loaded::new(self.clone(), program)
    }

    // -----------------------------------------------------------------------------------------
    // Direct calls, for the device check's benchmarks (the baselines our plans are measured
    // against) and diagnostics.

    /// Waits for everything queued on the device's stream.
    pub fn synchronize(&self) -> Result<(), BackendError> {
        self.bind()?;
        self.sync()
    }

    /// One cuBLAS strided-batched GEMM with `g`'s arguments on `a`, `b` into `c`, as a plan's
    /// `matmul` would call it, but without a plan (the baseline of the GEMM benchmark).
    pub fn gemm_direct(
        &self,
        g: &crate::program::Gemm,
        a: &CudaMemory,
        b: &CudaMemory,
        c: &CudaMemory,
    ) -> Result<(), BackendError> {
        self.bind()?;
        let size = g.elem.size();
        let need = |m: &CudaMemory, elems: usize, what: &str| {
            if m.shape().size() * m.elem().size() < elems * size || m.elem() != g.elem {
                Err(BackendError::InvalidBuffer {
                    message: format!("gemm_direct: {what} is too small or of another type"),
                })
            } else {
                Ok(())
            }
        };
        let last = |stride: usize, rows: usize, cols: usize| stride * (g.batch - 1) + rows * cols;
        need(
            a,
            last(g.stride_a, g.lda, if g.trans_a { g.m } else { g.k }),
            "a",
        )?;
        need(
            b,
            last(g.stride_b, g.ldb, if g.trans_b { g.k } else { g.n }),
            "b",
        )?;
        need(c, last(g.stride_c, g.ldc, g.n), "c")?;
        let blas = self.blas.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the sizes were checked above.
        unsafe { blas.gemm(g, a.ptr(), b.ptr(), c.ptr()) }
    }

    /// Copies `src` over `dst` (same size) on the device (the baseline of the bandwidth
    /// benchmarks).
    pub fn copy_direct(&self, dst: &CudaMemory, src: &CudaMemory) -> Result<(), BackendError> {
        self.bind()?;
        let bytes = src.shape().size() * src.elem().size();
        if dst.shape().size() * dst.elem().size() != bytes {
            return Err(BackendError::InvalidBuffer {
                message: "copy_direct: the buffers differ in size".into(),
            });
        }
        // SAFETY: both buffers hold `bytes` bytes; stream-ordered.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(
                dst.ptr(),
                src.ptr(),
                bytes,
                self.inner.stream.cu_stream(),
            )
        }
        .map_err(|e| driver_error("copying on the device", e))
    }

    /// Compiles `program`'s source with NVRTC for this device (no cache) and loads the module:
    /// `(compile seconds, load seconds, image bytes)`.
    pub fn compile_timed(
        &self,
        program: &crate::program::Program,
    ) -> Result<(f64, f64, usize), BackendError> {
        self.bind()?;
        let source = crate::codegen::source_of(&program.kernels);
        let target = self.target();
        let started = std::time::Instant::now();
        let image = self
            .nvrtc
            .compile(&source, target)
            .map_err(|e| BackendError::Device {
                device: crate::NAME.into(),
                message: e.to_string(),
            })?;
        let compiled = started.elapsed().as_secs_f64();
        let started = std::time::Instant::now();
        // SAFETY: a complete image, alive during the call; the module is unloaded below.
        let module = unsafe {
            cudarc::driver::result::module::load_data(image.as_ptr() as *const std::ffi::c_void)
        }
        .map_err(|e| driver_error("loading a module", e))?;
        let loaded = started.elapsed().as_secs_f64();
        // SAFETY: loaded just above, unloaded once.
        let _ = unsafe { cudarc::driver::result::module::unload(module) };
        Ok((compiled, loaded, image.len()))
    }

    /// The driver's CUDA version (`12040` for 12.4), when it answers.
    pub fn driver_version(&self) -> Option<i32> {
        let mut version = 0;
        // SAFETY: the driver writes one integer; a `Device` exists, so the driver is loaded.
        let status = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
        (status == cudarc::driver::sys::CUresult::CUDA_SUCCESS).then_some(version)
    }
}
