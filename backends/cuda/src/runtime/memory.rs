//! Device memory: raw allocations on the device's stream, and the tensors the backend hands
//! out ([`CudaMemory`], behind `quabla_backend::Memory::Backend`).
//!
//! Allocations are stream-ordered (`cuMemAllocAsync`/`cuMemFreeAsync` on the device's one
//! stream), so freeing a buffer whose last kernel is still queued is safe, and the driver's
//! pool serves the next allocation of a size without a system call. A tensor's storage follows
//! its dtype (`program::storage_of`): float32 and bool as `float`, float64 as `double`.

use super::DeviceInner;
use crate::program::{storage_of, Elem};
use cudarc::driver::sys::CUdeviceptr;
use quabla_backend::BackendError;
use quabla_ir::{DType, Shape};
use std::fmt;
use std::sync::Arc;

/// One allocation of device memory, freed (stream-ordered) when dropped.
pub struct DeviceBuffer {
    ptr: CUdeviceptr,
    bytes: usize,
    device: Arc<DeviceInner>,
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceBuffer({} bytes at {:#x})", self.bytes, self.ptr)
    }
}

// SAFETY: the buffer is a device address and a size; every use goes through the device's
// stream, which orders all access, from whichever thread.
unsafe impl Send for DeviceBuffer {}
// SAFETY: as above; shared references only read the address.
unsafe impl Sync for DeviceBuffer {}

impl DeviceBuffer {
    /// Allocates `bytes` (at least one) on the device's stream (`OutOfMemory` when refused).
    pub(super) fn alloc(
        device: &Arc<DeviceInner>,
        bytes: usize,
        what: &str,
    ) -> Result<DeviceBuffer, BackendError> {
        let size = bytes.max(1);
        // SAFETY: the stream is the device's live stream; the memory is only used on it. A
        // device without memory pools allocates synchronously (a `cuMemAlloc` completes before
        // any later work of the stream).
        let allocated = unsafe {
            if device.async_alloc {
                cudarc::driver::result::malloc_async(device.stream.cu_stream(), size)
            } else {
                cudarc::driver::result::malloc_sync(size)
            }
        };
        let ptr = allocated.map_err(|e| match e.0 {
            cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => BackendError::out_of_memory(
                size as u128,
                format!("{what} on cuda:{}", device.ordinal),
            ),
            _ => super::driver_error("allocating device memory", e),
        })?;
        Ok(DeviceBuffer {
            ptr,
            bytes: size,
            device: device.clone(),
        })
    }

    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // The last handle may go on any thread: make the context current first. A failure
        // leaves the memory to the context's teardown; there is nobody to report it to.
        let _ = self.device.context.bind_to_thread();
        // SAFETY: the pointer came from the matching allocation on this stream and is freed
        // once; a synchronous free waits for the work queued on the device first.
        let _ = unsafe {
            if self.device.async_alloc {
                cudarc::driver::result::free_async(self.ptr, self.device.stream.cu_stream())
            } else {
                let _ = self.device.stream.synchronize();
                cudarc::driver::result::free_sync(self.ptr)
            }
        };
    }
}

/// A tensor in device memory: what `Memory::Backend` holds for this backend.
pub struct CudaMemory {
    pub(super) dtype: DType,
    pub(super) shape: Shape,
    pub(super) buffer: DeviceBuffer,
}

impl fmt::Debug for CudaMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CudaMemory({}{} on cuda:{})",
            self.dtype.name(),
            self.shape,
            self.buffer.device.ordinal
        )
    }
}

impl CudaMemory {
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// How the elements are stored.
    pub fn elem(&self) -> Elem {
        storage_of(self.dtype)
    }

    pub fn ptr(&self) -> CUdeviceptr {
        self.buffer.ptr
    }

    /// Whether the tensor lives on `device` (memory of another device of the host is refused
    /// rather than read through an address that means nothing there).
    pub(crate) fn is_on(&self, device: &Arc<DeviceInner>) -> bool {
        Arc::ptr_eq(&self.buffer.device, device)
    }

    /// The error for a tensor of another device given to `device`.
    pub(crate) fn elsewhere(&self, device: &DeviceInner) -> BackendError {
        BackendError::InvalidBuffer {
            message: format!(
                "a buffer on cuda:{} was given to cuda:{}; buffers do not move between devices \
                 (download it and upload it to cuda:{})",
                self.buffer.device.ordinal, device.ordinal, device.ordinal
            ),
        }
    }

    /// The allocation, given up (for reuse by a later run).
    pub(super) fn into_buffer(self) -> DeviceBuffer {
        self.buffer
    }
}
