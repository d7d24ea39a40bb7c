//! cuBLAS: the strided-batched GEMM of `matmul` (and `cholesky_ad`) and the triangular
//! solves, on the device's stream. TF32 stays off: the handle's math mode is
//! `CUBLAS_DEFAULT_MATH`, which computes float32 products in float32 (numerics.md §1.6).
//! The arguments come from the lowering ([`crate::program::Gemm`], [`crate::program::Trsm`]),
//! already in cuBLAS's column-major terms.

use super::DeviceInner;
use crate::program::{Elem, Gemm, Trsm};
use cudarc::cublas::sys;
use quabla_backend::BackendError;
use std::ffi::c_int;
use std::sync::Arc;

/// A cuBLAS handle bound to the device's stream.
#[derive(Debug)]
pub struct Blas {
    handle: sys::cublasHandle_t,
    /// The device's stream, which the handle is bound to between calls.
    stream: cudarc::driver::sys::CUstream,
}

// SAFETY: the handle is used only under the device's mutex, from any thread, with the
// device's context current.
unsafe impl Send for Blas {}

impl Blas {
    pub(super) fn new(device: &Arc<DeviceInner>) -> Result<Blas, String> {
        let handle =
            cudarc::cublas::result::create_handle().map_err(|e| format!("cublasCreate: {e:?}"))?;
        let blas = Blas {
            handle,
            stream: device.stream.cu_stream(),
        };
        // SAFETY: a live handle and the device's live stream.
        unsafe {
            cudarc::cublas::result::set_stream(handle, device.stream.cu_stream() as _)
                .map_err(|e| format!("cublasSetStream: {e:?}"))?;
            sys::cublasSetMathMode(handle, sys::cublasMath_t::CUBLAS_DEFAULT_MATH)
                .result()
                .map_err(|e| format!("cublasSetMathMode: {e:?}"))?;
        }
        Ok(blas)
    }

    /// Runs `f` with the handle's calls queued on `stream`, then sets the handle back to the
    /// device's stream (a loop body is recorded on a stream of its own).
    ///
    /// # Safety
    ///
    /// `stream` is a live stream of the handle's context.
    pub unsafe fn on_stream<T>(
        &self,
        stream: cudarc::driver::sys::CUstream,
        f: impl FnOnce(&Blas) -> Result<T, BackendError>,
    ) -> Result<T, BackendError> {
        if stream == self.stream {
            return f(self);
        }
        let set = |s: cudarc::driver::sys::CUstream| {
            // SAFETY: the caller's contract; the handle is live.
            unsafe { cudarc::cublas::result::set_stream(self.handle, s as _) }.map_err(|e| {
                BackendError::Device {
                    device: crate::NAME.into(),
                    message: format!("cublasSetStream: {e:?}"),
                }
            })
        };
        set(stream)?;
        let result = f(self);
        set(self.stream)?;
        result
    }

    /// `C = op(A) op(B)` for every matrix of the batch.
    ///
    /// # Safety
    ///
    /// `a`, `b` and `c` are device addresses of buffers of the sizes `g` implies, of `g.elem`.
    pub unsafe fn gemm(&self, g: &Gemm, a: u64, b: u64, c: u64) -> Result<(), BackendError> {
        let op = |t: bool| {
            if t {
                sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let i = |v: usize| v as c_int;
        let l = |v: usize| v as i64;
        // SAFETY: the caller's contract; alpha and beta are host scalars (the default pointer
        // mode).
        let status = unsafe {
            match g.elem {
                Elem::F64 => {
                    let (alpha, beta) = (1.0f64, 0.0f64);
                    sys::cublasDgemmStridedBatched(
                        self.handle,
                        op(g.trans_a),
                        op(g.trans_b),
                        i(g.m),
                        i(g.n),
                        i(g.k),
                        &alpha,
                        a as *const f64,
                        i(g.lda),
                        l(g.stride_a),
                        b as *const f64,
                        i(g.ldb),
                        l(g.stride_b),
                        &beta,
                        c as *mut f64,
                        i(g.ldc),
                        l(g.stride_c),
                        i(g.batch),
                    )
                }
                _ => {
                    let (alpha, beta) = (1.0f32, 0.0f32);
                    sys::cublasSgemmStridedBatched(
                        self.handle,
                        op(g.trans_a),
                        op(g.trans_b),
                        i(g.m),
                        i(g.n),
                        i(g.k),
                        &alpha,
                        a as *const f32,
                        i(g.lda),
                        l(g.stride_a),
                        b as *const f32,
                        i(g.ldb),
                        l(g.stride_b),
                        &beta,
                        c as *mut f32,
                        i(g.ldc),
                        l(g.stride_c),
                        i(g.batch),
                    )
                }
            }
        };
        check(status, "cublasGemmStridedBatched")
    }

    /// `op(A) X = B` (or `X op(A) = B`) over `b`, once per matrix of the batch.
    ///
    /// # Safety
    ///
    /// As [`Blas::gemm`], for the sizes `t` implies.
    pub unsafe fn trsm(&self, t: &Trsm, a: u64, b: u64) -> Result<(), BackendError> {
        let side = if t.left {
            sys::cublasSideMode_t::CUBLAS_SIDE_LEFT
        } else {
            sys::cublasSideMode_t::CUBLAS_SIDE_RIGHT
        };
        let uplo = if t.upper {
            sys::cublasFillMode_t::CUBLAS_FILL_MODE_UPPER
        } else {
            sys::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER
        };
        let trans = if t.trans {
            sys::cublasOperation_t::CUBLAS_OP_T
        } else {
            sys::cublasOperation_t::CUBLAS_OP_N
        };
        let diag = if t.unit {
            sys::cublasDiagType_t::CUBLAS_DIAG_UNIT
        } else {
            sys::cublasDiagType_t::CUBLAS_DIAG_NON_UNIT
        };
        let size = t.elem.size() as u64;
        for k in 0..t.batch as u64 {
            let (ak, bk) = (
                a + k * t.stride_a as u64 * size,
                b + k * t.stride_b as u64 * size,
            );
            // SAFETY: the caller's contract.
            let status = unsafe {
                match t.elem {
                    Elem::F64 => {
                        let alpha = 1.0f64;
                        sys::cublasDtrsm_v2(
                            self.handle,
                            side,
                            uplo,
                            trans,
                            diag,
                            t.m as c_int,
                            t.n as c_int,
                            &alpha,
                            ak as *const f64,
                            t.lda as c_int,
                            bk as *mut f64,
                            t.ldb as c_int,
                        )
                    }
                    _ => {
                        let alpha = 1.0f32;
                        sys::cublasStrsm_v2(
                            self.handle,
                            side,
                            uplo,
                            trans,
                            diag,
                            t.m as c_int,
                            t.n as c_int,
                            &alpha,
                            ak as *const f32,
                            t.lda as c_int,
                            bk as *mut f32,
                            t.ldb as c_int,
                        )
                    }
                }
            };
            check(status, "cublasTrsm")?;
        }
        Ok(())
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: the handle is live and destroyed once.
        let _ = unsafe { cudarc::cublas::result::destroy_handle(self.handle) };
    }
}

fn check(status: sys::cublasStatus_t, call: &str) -> Result<(), BackendError> {
    if status == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(BackendError::Device {
            device: crate::NAME.into(),
            message: format!("{call} failed: {status:?}"),
        })
    }
}
