//! cuSOLVER: the dense factorizations, one call per matrix of a batch (numerics.md §6.2), on
//! the device's stream. Each call's workspace is asked of cuSOLVER and allocated on the stream
//! (freed, stream-ordered, after the call). The arguments come from the lowering
//! ([`crate::program::Solver`]) in cuSOLVER's column-major terms; the status of each matrix
//! goes to the call's `info` buffer on the device, where the lowering's kernels read it.

use super::{Device, DeviceInner};
use crate::program::{Elem, Solver as Call, SolverCall};
use cudarc::cusolver::sys;
use quabla_backend::BackendError;
use std::ffi::c_int;
use std::sync::Arc;

/// A cuSOLVER dense handle bound to the device's stream, and the Jacobi SVD's parameters.
#[derive(Debug)]
pub struct Solver {
    handle: sys::cusolverDnHandle_t,
    gesvdj: sys::gesvdjInfo_t,
}

// SAFETY: the handles are used only under the device's mutex, with the context current.
unsafe impl Send for Solver {}

fn check(status: sys::cusolverStatus_t, call: &str) -> Result<(), BackendError> {
    if status == sys::cusolverStatus_t::CUSOLVER_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(BackendError::Device {
            device: crate::NAME.into(),
            message: format!("{call} failed: {status:?}"),
        })
    }
}

impl Solver {
    pub(super) fn new(device: &Arc<DeviceInner>) -> Result<Solver, String> {
        let mut handle = std::ptr::null_mut();
        // SAFETY: cuSOLVER writes the handle.
        check(
            unsafe { sys::cusolverDnCreate(&mut handle) },
            "cusolverDnCreate",
        )
        .map_err(|e| e.to_string())?;
        let mut solver = Solver {
            handle,
            gesvdj: std::ptr::null_mut(),
        };
        // SAFETY: a live handle and the device's live stream; cuSOLVER writes the parameters'
        // handle. On an error `solver` is dropped, destroying what was made.
        unsafe {
            check(
                sys::cusolverDnSetStream(handle, device.stream.cu_stream() as _),
                "cusolverDnSetStream",
            )
            .map_err(|e| e.to_string())?;
            check(
                sys::cusolverDnCreateGesvdjInfo(&mut solver.gesvdj),
                "cusolverDnCreateGesvdjInfo",
            )
            .map_err(|e| e.to_string())?;
        }
        Ok(solver)
    }

    /// Runs `call` on every matrix of its batch; `ptr(buf)` is the device address of a buffer.
    ///
    /// # Safety
    ///
    /// Every buffer `call` names is bound to a device allocation of the size the lowering
    /// declared.
    pub unsafe fn run(
        &self,
        device: &Device,
        call: &SolverCall,
        ptr: &dyn Fn(usize) -> u64,
    ) -> Result<(), BackendError> {
        // SAFETY: the caller's contract.
        unsafe {
            match call.elem {
                Elem::F64 => self.run_typed::<f64>(device, call, ptr),
                _ => self.run_typed::<f32>(device, call, ptr),
            }
        }
    }

    unsafe fn run_typed<T: Real>(
        &self,
        device: &Device,
        call: &SolverCall,
        ptr: &dyn Fn(usize) -> u64,
    ) -> Result<(), BackendError> {
        let size = std::mem::size_of::<T>() as u64;
        let int = 4u64;
        let h = self.handle;
        let i = |v: usize| v as c_int;
        let lower = sys::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER;
        let upper = sys::cublasFillMode_t::CUBLAS_FILL_MODE_UPPER;
        let fill = |up: bool| if up { upper } else { lower };
        let vectors = sys::cusolverEigMode_t::CUSOLVER_EIG_MODE_VECTOR;
        let work = |lwork: c_int| {
            device.alloc(
                lwork.max(1) as usize * size as usize,
                "a cuSOLVER workspace",
            )
        };
        for k in 0..call.batch as u64 {
            // SAFETY (every call below): the caller's contract gives buffers of the declared
            // sizes; matrix `k` of each starts `k` matrices in.
            unsafe {
                match &call.call {
                    Call::Getrf { n, a, ipiv, info } => {
                        let a = (ptr(*a) + k * (n * n) as u64 * size) as *mut T;
                        let mut lwork = 0;
                        check(
                            T::getrf_buffer(h, i(*n), i(*n), a, i(*n), &mut lwork),
                            "getrf_bufferSize",
                        )?;
                        let w = work(lwork)?;
                        check(
                            T::getrf(
                                h,
                                i(*n),
                                i(*n),
                                a,
                                i(*n),
                                w.ptr() as *mut T,
                                (ptr(*ipiv) + k * *n as u64 * int) as *mut c_int,
                                (ptr(*info) + k * int) as *mut c_int,
                            ),
                            "getrf",
                        )?;
                    }
                    Call::Getrs {
                        trans,
                        n,
                        nrhs,
                        a,
                        ipiv,
                        b,
                        info,
                    } => {
                        let op = if *trans {
                            sys::cublasOperation_t::CUBLAS_OP_T
                        } else {
                            sys::cublasOperation_t::CUBLAS_OP_N
                        };
                        check(
                            T::getrs(
                                h,
                                op,
                                i(*n),
                                i(*nrhs),
                                (ptr(*a) + k * (n * n) as u64 * size) as *const T,
                                i(*n),
                                (ptr(*ipiv) + k * *n as u64 * int) as *const c_int,
                                (ptr(*b) + k * (n * nrhs) as u64 * size) as *mut T,
                                i(*n),
                                (ptr(*info) + k * int) as *mut c_int,
                            ),
                            "getrs",
                        )?;
                    }
                    Call::Potrf {
                        upper: up,
                        n,
                        a,
                        info,
                    } => {
                        let a = (ptr(*a) + k * (n * n) as u64 * size) as *mut T;
                        let mut lwork = 0;
                        check(
                            T::potrf_buffer(h, fill(*up), i(*n), a, i(*n), &mut lwork),
                            "potrf_bufferSize",
                        )?;
                        let w = work(lwork)?;
                        check(
                            T::potrf(
                                h,
                                fill(*up),
                                i(*n),
                                a,
                                i(*n),
                                w.ptr() as *mut T,
                                lwork,
                                (ptr(*info) + k * int) as *mut c_int,
                            ),
                            "potrf",
                        )?;
                    }
                    Call::Syevd {
                        upper: up,
                        n,
                        a,
                        w,
                        info,
                    } => {
                        let a = (ptr(*a) + k * (n * n) as u64 * size) as *mut T;
                        let wv = (ptr(*w) + k * *n as u64 * size) as *mut T;
                        let mut lwork = 0;
                        check(
                            T::syevd_buffer(h, vectors, fill(*up), i(*n), a, i(*n), wv, &mut lwork),
                            "syevd_bufferSize",
                        )?;
                        let ws = work(lwork)?;
                        check(
                            T::syevd(
                                h,
                                vectors,
                                fill(*up),
                                i(*n),
                                a,
                                i(*n),
                                wv,
                                ws.ptr() as *mut T,
                                lwork,
                                (ptr(*info) + k * int) as *mut c_int,
                            ),
                            "syevd",
                        )?;
                    }
                    Call::Gesvdj {
                        econ,
                        m,
                        n,
                        a,
                        s,
                        u,
                        v,
                        info,
                    } => {
                        let c = (*m).min(*n);
                        let (ucols, vcols) = if *econ { (c, c) } else { (*m, *n) };
                        let a = (ptr(*a) + k * (m * n) as u64 * size) as *mut T;
                        let sv = (ptr(*s) + k * c as u64 * size) as *mut T;
                        let uv = (ptr(*u) + k * (m * ucols) as u64 * size) as *mut T;
                        let vv = (ptr(*v) + k * (n * vcols) as u64 * size) as *mut T;
                        let mut lwork = 0;
                        check(
                            T::gesvdj_buffer(
                                h,
                                vectors,
                                i(*econ as usize),
                                i(*m),
                                i(*n),
                                a,
                                i(*m),
                                sv,
                                uv,
                                i(*m),
                                vv,
                                i(*n),
                                &mut lwork,
                                self.gesvdj,
                            ),
                            "gesvdj_bufferSize",
                        )?;
                        let ws = work(lwork)?;
                        check(
                            T::gesvdj(
                                h,
                                vectors,
                                i(*econ as usize),
                                i(*m),
                                i(*n),
                                a,
                                i(*m),
                                sv,
                                uv,
                                i(*m),
                                vv,
                                i(*n),
                                ws.ptr() as *mut T,
                                lwork,
                                (ptr(*info) + k * int) as *mut c_int,
                                self.gesvdj,
                            ),
                            "gesvdj",
                        )?;
                    }
                    Call::Geqrf { m, n, a, tau, info } => {
                        let a = (ptr(*a) + k * (m * n) as u64 * size) as *mut T;
                        let tau = (ptr(*tau) + k * (*m).min(*n) as u64 * size) as *mut T;
                        let mut lwork = 0;
                        check(
                            T::geqrf_buffer(h, i(*m), i(*n), a, i(*m), &mut lwork),
                            "geqrf_bufferSize",
                        )?;
                        let w = work(lwork)?;
                        check(
                            T::geqrf(
                                h,
                                i(*m),
                                i(*n),
                                a,
                                i(*m),
                                tau,
                                w.ptr() as *mut T,
                                lwork,
                                (ptr(*info) + k * int) as *mut c_int,
                            ),
                            "geqrf",
                        )?;
                    }
                    Call::Orgqr {
                        m,
                        n,
                        k: refl,
                        a,
                        tau,
                        info,
                    } => {
                        let a = (ptr(*a) + k * (m * n) as u64 * size) as *mut T;
                        let tau = (ptr(*tau) + k * *refl as u64 * size) as *const T;
                        let mut lwork = 0;
                        check(
                            T::orgqr_buffer(h, i(*m), i(*n), i(*refl), a, i(*m), tau, &mut lwork),
                            "orgqr_bufferSize",
                        )?;
                        let w = work(lwork)?;
                        check(
                            T::orgqr(
                                h,
                                i(*m),
                                i(*n),
                                i(*refl),
                                a,
                                i(*m),
                                tau,
                                w.ptr() as *mut T,
                                lwork,
                                (ptr(*info) + k * int) as *mut c_int,
                            ),
                            "orgqr",
                        )?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl Drop for Solver {
    fn drop(&mut self) {
        // SAFETY: live handles, destroyed once.
        unsafe {
            if !self.gesvdj.is_null() {
                let _ = sys::cusolverDnDestroyGesvdjInfo(self.gesvdj);
            }
            let _ = sys::cusolverDnDestroy(self.handle);
        }
    }
}

type H = sys::cusolverDnHandle_t;
type Fill = sys::cublasFillMode_t;
type Op = sys::cublasOperation_t;
type Eig = sys::cusolverEigMode_t;
type S = sys::cusolverStatus_t;

/// The float32 and float64 entry points of the calls, by element type.
#[allow(clippy::too_many_arguments)]
trait Real: Copy {
    unsafe fn getrf_buffer(
        h: H,
        m: c_int,
        n: c_int,
        a: *mut Self,
        lda: c_int,
        lwork: *mut c_int,
    ) -> S;
    unsafe fn getrf(
        h: H,
        m: c_int,
        n: c_int,
        a: *mut Self,
        lda: c_int,
        w: *mut Self,
        ipiv: *mut c_int,
        info: *mut c_int,
    ) -> S;
    unsafe fn getrs(
        h: H,
        op: Op,
        n: c_int,
        nrhs: c_int,
        a: *const Self,
        lda: c_int,
        ipiv: *const c_int,
        b: *mut Self,
        ldb: c_int,
        info: *mut c_int,
    ) -> S;
    unsafe fn potrf_buffer(
        h: H,
        f: Fill,
        n: c_int,
        a: *mut Self,
        lda: c_int,
        lwork: *mut c_int,
    ) -> S;
    unsafe fn potrf(
        h: H,
        f: Fill,
        n: c_int,
        a: *mut Self,
        lda: c_int,
        w: *mut Self,
        lwork: c_int,
        info: *mut c_int,
    ) -> S;
    unsafe fn syevd_buffer(
        h: H,
        j: Eig,
        f: Fill,
        n: c_int,
        a: *const Self,
        lda: c_int,
        w: *const Self,
        lwork: *mut c_int,
    ) -> S;
    unsafe fn syevd(
        h: H,
        j: Eig,
        f: Fill,
        n: c_int,
        a: *mut Self,
        lda: c_int,
        w: *mut Self,
        ws: *mut Self,
        lwork: c_int,
        info: *mut c_int,
    ) -> S;
    unsafe fn gesvdj_buffer(
        h: H,
        j: Eig,
        econ: c_int,
        m: c_int,
        n: c_int,
        a: *const Self,
        lda: c_int,
        s: *const Self,
        u: *const Self,
        ldu: c_int,
        v: *const Self,
        ldv: c_int,
        lwork: *mut c_int,
        p: sys::gesvdjInfo_t,
    ) -> S;
    unsafe fn gesvdj(
        h: H,
        j: Eig,
        econ: c_int,
        m: c_int,
        n: c_int,
        a: *mut Self,
        lda: c_int,
        s: *mut Self,
        u: *mut Self,
        ldu: c_int,
        v: *mut Self,
        ldv: c_int,
        w: *mut Self,
        lwork: c_int,
        info: *mut c_int,
        p: sys::gesvdjInfo_t,
    ) -> S;
    unsafe fn geqrf_buffer(
        h: H,
        m: c_int,
        n: c_int,
        a: *mut Self,
        lda: c_int,
        lwork: *mut c_int,
    ) -> S;
    unsafe fn geqrf(
        h: H,
        m: c_int,
        n: c_int,
        a: *mut Self,
        lda: c_int,
        tau: *mut Self,
        w: *mut Self,
        lwork: c_int,
        info: *mut c_int,
    ) -> S;
    unsafe fn orgqr_buffer(
        h: H,
        m: c_int,
        n: c_int,
        k: c_int,
        a: *const Self,
        lda: c_int,
        tau: *const Self,
        lwork: *mut c_int,
    ) -> S;
    unsafe fn orgqr(
        h: H,
        m: c_int,
        n: c_int,
        k: c_int,
        a: *mut Self,
        lda: c_int,
        tau: *const Self,
        w: *mut Self,
        lwork: c_int,
        info: *mut c_int,
    ) -> S;
}

macro_rules! real {
    ($t:ty, $getrf_b:ident, $getrf:ident, $getrs:ident, $potrf_b:ident, $potrf:ident,
     $syevd_b:ident, $syevd:ident, $gesvdj_b:ident, $gesvdj:ident, $geqrf_b:ident, $geqrf:ident,
     $orgqr_b:ident, $orgqr:ident) => {
        impl Real for $t {
            unsafe fn getrf_buffer(
                h: H,
                m: c_int,
                n: c_int,
                a: *mut Self,
                lda: c_int,
                lwork: *mut c_int,
            ) -> S {
                unsafe { sys::$getrf_b(h, m, n, a, lda, lwork) }
            }
            unsafe fn getrf(
                h: H,
                m: c_int,
                n: c_int,
                a: *mut Self,
                lda: c_int,
                w: *mut Self,
                ipiv: *mut c_int,
                info: *mut c_int,
            ) -> S {
                unsafe { sys::$getrf(h, m, n, a, lda, w, ipiv, info) }
            }
            unsafe fn getrs(
                h: H,
                op: Op,
                n: c_int,
                nrhs: c_int,
                a: *const Self,
                lda: c_int,
                ipiv: *const c_int,
                b: *mut Self,
                ldb: c_int,
                info: *mut c_int,
            ) -> S {
                unsafe { sys::$getrs(h, op, n, nrhs, a, lda, ipiv, b, ldb, info) }
            }
            unsafe fn potrf_buffer(
                h: H,
                f: Fill,
                n: c_int,
                a: *mut Self,
                lda: c_int,
                lwork: *mut c_int,
            ) -> S {
                unsafe { sys::$potrf_b(h, f, n, a, lda, lwork) }
            }
            unsafe fn potrf(
                h: H,
                f: Fill,
                n: c_int,
                a: *mut Self,
                lda: c_int,
                w: *mut Self,
                lwork: c_int,
                info: *mut c_int,
            ) -> S {
                unsafe { sys::$potrf(h, f, n, a, lda, w, lwork, info) }
            }
            unsafe fn syevd_buffer(
                h: H,
                j: Eig,
                f: Fill,
                n: c_int,
                a: *const Self,
                lda: c_int,
                w: *const Self,
                lwork: *mut c_int,
            ) -> S {
                unsafe { sys::$syevd_b(h, j, f, n, a, lda, w, lwork) }
            }
            unsafe fn syevd(
                h: H,
                j: Eig,
                f: Fill,
                n: c_int,
                a: *mut Self,
                lda: c_int,
                w: *mut Self,
                ws: *mut Self,
                lwork: c_int,
                info: *mut c_int,
            ) -> S {
                unsafe { sys::$syevd(h, j, f, n, a, lda, w, ws, lwork, info) }
            }
            unsafe fn gesvdj_buffer(
                h: H,
                j: Eig,
                econ: c_int,
                m: c_int,
                n: c_int,
                a: *const Self,
                lda: c_int,
                s: *const Self,
                u: *const Self,
                ldu: c_int,
                v: *const Self,
                ldv: c_int,
                lwork: *mut c_int,
                p: sys::gesvdjInfo_t,
            ) -> S {
                unsafe { sys::$gesvdj_b(h, j, econ, m, n, a, lda, s, u, ldu, v, ldv, lwork, p) }
            }
            unsafe fn gesvdj(
                h: H,
                j: Eig,
                econ: c_int,
                m: c_int,
                n: c_int,
                a: *mut Self,
                lda: c_int,
                s: *mut Self,
                u: *mut Self,
                ldu: c_int,
                v: *mut Self,
                ldv: c_int,
                w: *mut Self,
                lwork: c_int,
                info: *mut c_int,
                p: sys::gesvdjInfo_t,
            ) -> S {
                unsafe {
                    sys::$gesvdj(
                        h, j, econ, m, n, a, lda, s, u, ldu, v, ldv, w, lwork, info, p,
                    )
                }
            }
            unsafe fn geqrf_buffer(
                h: H,
                m: c_int,
                n: c_int,
                a: *mut Self,
                lda: c_int,
                lwork: *mut c_int,
            ) -> S {
                unsafe { sys::$geqrf_b(h, m, n, a, lda, lwork) }
            }
            unsafe fn geqrf(
                h: H,
                m: c_int,
                n: c_int,
                a: *mut Self,
                lda: c_int,
                tau: *mut Self,
                w: *mut Self,
                lwork: c_int,
                info: *mut c_int,
            ) -> S {
                unsafe { sys::$geqrf(h, m, n, a, lda, tau, w, lwork, info) }
            }
            unsafe fn orgqr_buffer(
                h: H,
                m: c_int,
                n: c_int,
                k: c_int,
                a: *const Self,
                lda: c_int,
                tau: *const Self,
                lwork: *mut c_int,
            ) -> S {
                unsafe { sys::$orgqr_b(h, m, n, k, a, lda, tau, lwork) }
            }
            unsafe fn orgqr(
                h: H,
                m: c_int,
                n: c_int,
                k: c_int,
                a: *mut Self,
                lda: c_int,
                tau: *const Self,
                w: *mut Self,
                lwork: c_int,
                info: *mut c_int,
            ) -> S {
                unsafe { sys::$orgqr(h, m, n, k, a, lda, tau, w, lwork, info) }
            }
        }
    };
}

real!(
    f32,
    cusolverDnSgetrf_bufferSize,
    cusolverDnSgetrf,
    cusolverDnSgetrs,
    cusolverDnSpotrf_bufferSize,
    cusolverDnSpotrf,
    cusolverDnSsyevd_bufferSize,
    cusolverDnSsyevd,
    cusolverDnSgesvdj_bufferSize,
    cusolverDnSgesvdj,
    cusolverDnSgeqrf_bufferSize,
    cusolverDnSgeqrf,
    cusolverDnSorgqr_bufferSize,
    cusolverDnSorgqr
);
real!(
    f64,
    cusolverDnDgetrf_bufferSize,
    cusolverDnDgetrf,
    cusolverDnDgetrs,
    cusolverDnDpotrf_bufferSize,
    cusolverDnDpotrf,
    cusolverDnDsyevd_bufferSize,
    cusolverDnDsyevd,
    cusolverDnDgesvdj_bufferSize,
    cusolverDnDgesvdj,
    cusolverDnDgeqrf_bufferSize,
    cusolverDnDgeqrf,
    cusolverDnDorgqr_bufferSize,
    cusolverDnDorgqr
);
