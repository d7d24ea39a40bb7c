//! A host model of the device, for running lowered programs without a GPU: the generated
//! kernels compiled by the host C++ compiler (`QB_HOST`, each kernel a loop over its work
//! items), host memory for device memory, and straightforward column-major implementations
//! of the cuBLAS and cuSOLVER calls with the libraries' documented semantics (LAPACK's
//! conventions). The symmetric eigensolver and the SVD take their factors from
//! `quabla-linalg` and then give each vector a deterministic arbitrary sign, as a vendor
//! library may: the sign rules of the lowering must make the result unique.
//!
//! It runs through the crate's own executor (`quabla_cuda::exec`), so a program that passes
//! here has had its buffers, regions, releases and library arguments exercised as on a
//! device.

// Matrix code reads best indexed by row and column.
#![allow(clippy::needless_range_loop)]

use quabla_backend::{BackendError, HostTensor};
use quabla_cuda::exec::{self, Machine, OutputValue};
use quabla_cuda::program::{
    storage_of, ConstData, Elem, Gemm, Kernel, Program, Role, Solver, SolverCall, Trsm,
};
use quabla_ir::{DType, HostData, Shape};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

type Thunk = unsafe extern "C" fn(i64, *const i64);

/// Kernels compiled for the host.
pub struct HostKernels {
    _lib: libloading::Library,
    thunks: HashMap<String, Thunk>,
    _dir: PathBuf,
}

impl HostKernels {
    /// Compiles `kernels` (with the prelude) with the host C++ compiler and loads them.
    pub fn compile<'k>(kernels: impl IntoIterator<Item = &'k Kernel>) -> HostKernels {
        let kernels: Vec<&Kernel> = kernels.into_iter().collect();
        let source = quabla_cuda::codegen::source_of(kernels.iter().copied());
        let dir = std::env::temp_dir().join(format!(
            "quabla-cuda-host-{}-{:016x}",
            std::process::id(),
            quabla_cuda::codegen::fnv64(&[source.as_bytes()])
        ));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let src = dir.join("kernels.cpp");
        let lib = dir.join("kernels.so");
        std::fs::write(&src, &source).expect("writing the kernels");
        let cxx = host_compiler();
        let out = Command::new(&cxx)
            .args([
                "-std=c++17",
                "-O1",
                "-DQB_HOST",
                "-ffp-contract=off",
                "-fPIC",
                "-shared",
                "-w",
                "-o",
            ])
            .arg(&lib)
            .arg(&src)
            .output()
            .unwrap_or_else(|e| panic!("the host C++ compiler {cxx} does not run: {e}"));
        assert!(
            out.status.success(),
            "{cxx} rejects the generated kernels:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // SAFETY: the library is the kernels just compiled; loading runs no initializers of
        // note.
        let library = unsafe { libloading::Library::new(&lib) }.expect("loading the host kernels");
        let mut thunks = HashMap::new();
        for k in kernels {
            let name = format!("{}__host", k.name);
            // SAFETY: every kernel has a host entry point of this signature.
            let f: Thunk = unsafe {
                *library
                    .get::<Thunk>(name.as_bytes())
                    .expect("a host entry point")
            };
            thunks.insert(k.name.clone(), f);
        }
        HostKernels {
            _lib: library,
            thunks,
            _dir: dir,
        }
    }
}

/// The host C++ compiler: `$CXX`, else the first of `c++`, `g++`, `clang++` that runs.
fn host_compiler() -> String {
    if let Ok(cxx) = std::env::var("CXX") {
        return cxx;
    }
    for candidate in ["c++", "g++", "clang++"] {
        let runs = Command::new(candidate)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if runs {
            return candidate.into();
        }
    }
    panic!(
        "the host model of the CUDA device compiles the generated kernels with a C++ compiler, \
         and none was found (tried $CXX, c++, g++, clang++): install one (Debian/Ubuntu: \
         apt-get install g++) or set CXX"
    )
}

/// Host memory standing for a device allocation (8-byte aligned, zeroed).
pub struct HostBuffer(Box<[u64]>);

impl HostBuffer {
    fn new(bytes: usize) -> HostBuffer {
        HostBuffer(vec![0u64; bytes.div_ceil(8).max(1)].into_boxed_slice())
    }

    fn address(&self) -> u64 {
        self.0.as_ptr() as u64
    }
}

/// The host machine running one program.
pub struct HostMachine<'k> {
    kernels: &'k HostKernels,
    program: &'k Program,
    /// Counts solver calls, to vary the arbitrary signs.
    calls: Cell<u64>,
    /// The calls recorded since `begin_capture`, while recording. As on a device, a recorded
    /// call does not run, and an allocation or a readback while recording is an error.
    recording: RefCell<Option<Vec<Recorded>>>,
    /// Recordings made, and replays run.
    recordings: Cell<usize>,
    replays: Cell<usize>,
}

/// A call recorded for replay, with the arguments it was made with.
#[derive(Clone)]
pub enum Recorded {
    Launch(usize, u64, Vec<u64>),
    Gemm(Gemm, u64, u64, u64),
    Trsm(Trsm, u64, u64),
    Copy(u64, u64, usize),
}

/// The element at `i` of `elem` values at `address`, as float64.
///
/// # Safety
///
/// `address` holds at least `i + 1` values of `elem`.
unsafe fn load(address: u64, elem: Elem, i: usize) -> f64 {
    // SAFETY: the caller's contract.
    unsafe {
        match elem {
            Elem::F64 => *(address as *const f64).add(i),
            Elem::F32 => f64::from(*(address as *const f32).add(i)),
            Elem::I32 => f64::from(*(address as *const i32).add(i)),
            Elem::I64 => *(address as *const i64).add(i) as f64,
        }
    }
}

/// Stores `v` (rounded to `elem`) at element `i`.
///
/// # Safety
///
/// As [`load`].
unsafe fn store(address: u64, elem: Elem, i: usize, v: f64) {
    // SAFETY: the caller's contract.
    unsafe {
        match elem {
            Elem::F64 => *(address as *mut f64).add(i) = v,
            Elem::F32 => *(address as *mut f32).add(i) = v as f32,
            Elem::I32 => *(address as *mut i32).add(i) = v as i32,
            Elem::I64 => *(address as *mut i64).add(i) = v as i64,
        }
    }
}

/// Copies `values` into a new buffer as they are (integers keep every bit).
fn raw<T: Copy>(values: &[T]) -> HostBuffer {
    let bytes = std::mem::size_of_val(values);
    let buffer = HostBuffer::new(bytes);
    // SAFETY: the buffer holds `bytes` bytes; the two do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            values.as_ptr() as *const u8,
            buffer.address() as *mut u8,
            bytes,
        )
    };
    buffer
}

/// `n` values of `T` at `address`.
///
/// # Safety
///
/// `address` holds at least `n` values of `T`.
unsafe fn read_raw<T: Copy>(address: u64, n: usize) -> Vec<T> {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(address as *const T, n).to_vec() }
}

/// A tensor of `dtype` and `shape` read from its device storage (`storage_of(dtype)`) at
/// `address`, as `runtime::CudaBackend::download` reads one.
fn download(address: u64, dtype: DType, shape: &Shape) -> HostTensor {
    let n = shape.size();
    // SAFETY (every arm): an output buffer holds the output's values, stored by its dtype.
    let data = match dtype {
        DType::F32 => HostData::F32(unsafe { read_raw::<f32>(address, n) }.into()),
        DType::F64 => HostData::F64(unsafe { read_raw::<f64>(address, n) }.into()),
        DType::I32 => HostData::I32(unsafe { read_raw::<i32>(address, n) }.into()),
        DType::I64 => HostData::I64(unsafe { read_raw::<i64>(address, n) }.into()),
        DType::Bool => HostData::Bool(
            unsafe { read_raw::<f32>(address, n) }
                .iter()
                .map(|&v| v != 0.0)
                .collect(),
        ),
    };
    HostTensor::new(shape.clone(), data)
}

/// A column-major matrix view: element `(r, c)` at `base + r + c * ld`.
#[derive(Clone, Copy)]
struct Mat {
    address: u64,
    elem: Elem,
    base: usize,
    ld: usize,
}

impl Mat {
    fn get(&self, r: usize, c: usize) -> f64 {
        // SAFETY: the calls' sizes come from the lowering, which sized every buffer.
        unsafe { load(self.address, self.elem, self.base + r + c * self.ld) }
    }

    fn set(&self, r: usize, c: usize, v: f64) {
        // SAFETY: as above.
        unsafe { store(self.address, self.elem, self.base + r + c * self.ld, v) }
    }
}

fn int_at(address: u64, i: usize) -> i32 {
    // SAFETY: status and pivot buffers hold one `int` per entry the lowering sized.
    unsafe { *(address as *const i32).add(i) }
}

fn set_int(address: u64, i: usize, v: i32) {
    // SAFETY: as above.
    unsafe { *(address as *mut i32).add(i) = v }
}

impl<'k> HostMachine<'k> {
    pub fn new(kernels: &'k HostKernels, program: &'k Program) -> HostMachine<'k> {
        HostMachine {
            kernels,
            program,
            calls: Cell::new(0),
            recording: RefCell::new(None),
            recordings: Cell::new(0),
            replays: Cell::new(0),
        }
    }

    /// How many loop bodies were recorded, and how many replays ran.
    pub fn graphs(&self) -> (usize, usize) {
        (self.recordings.get(), self.replays.get())
    }

    /// Records `call` instead of running it, when recording.
    fn recorded(&self, call: impl FnOnce() -> Recorded) -> bool {
        match self.recording.borrow_mut().as_mut() {
            Some(calls) => {
                calls.push(call());
                true
            }
            None => false,
        }
    }

    fn refused_while_recording(&self, what: &str) -> Result<(), BackendError> {
        if self.recording.borrow().is_some() {
            return Err(BackendError::Device {
                device: "cuda".into(),
                message: format!("{what} while a loop body is recorded"),
            });
        }
        Ok(())
    }

    /// A deterministic arbitrary sign for vector `j` of the current call.
    fn sign(&self, j: usize) -> f64 {
        let c = self.calls.get();
        if (c.wrapping_mul(31).wrapping_add(j as u64 * 7)).is_multiple_of(3) {
            -1.0
        } else {
            1.0
        }
    }
}

impl Machine for HostMachine<'_> {
    type Buffer = HostBuffer;
    type Graph = Vec<Recorded>;

    fn alloc(&self, bytes: usize, _what: &str) -> Result<HostBuffer, BackendError> {
        self.refused_while_recording("an allocation")?;
        Ok(HostBuffer::new(bytes))
    }

    fn address(&self, buffer: &HostBuffer) -> u64 {
        buffer.address()
    }

    fn records(&self) -> bool {
        true
    }

    fn begin_capture(&self) -> Result<(), BackendError> {
        self.refused_while_recording("a recording")?;
        *self.recording.borrow_mut() = Some(Vec::new());
        Ok(())
    }

    fn end_capture(&self) -> Result<Vec<Recorded>, BackendError> {
        self.recordings.set(self.recordings.get() + 1);
        self.recording
            .borrow_mut()
            .take()
            .ok_or_else(|| BackendError::Device {
                device: "cuda".into(),
                message: "a recording ended that never began".into(),
            })
    }

    fn replay(&self, graph: &Vec<Recorded>) -> Result<(), BackendError> {
        self.refused_while_recording("a replay")?;
        self.replays.set(self.replays.get() + 1);
        for call in graph {
            match call {
                Recorded::Launch(kernel, items, args) => self.launch(*kernel, *items, args)?,
                Recorded::Gemm(g, a, b, c) => self.gemm(g, *a, *b, *c)?,
                Recorded::Trsm(t, a, b) => self.trsm(t, *a, *b)?,
                Recorded::Copy(dst, src, bytes) => self.copy(*dst, *src, *bytes)?,
            }
        }
        Ok(())
    }

    fn launch(&self, kernel: usize, items: u64, args: &[u64]) -> Result<(), BackendError> {
        if self.recorded(|| Recorded::Launch(kernel, items, args.to_vec())) {
            return Ok(());
        }
        let name = &self.program.kernels[kernel].name;
        let thunk = self.kernels.thunks[name];
        let args: Vec<i64> = args.iter().map(|&a| a as i64).collect();
        // SAFETY: the thunk's arguments are the kernel's, as the executor bound them.
        unsafe { thunk(items as i64, args.as_ptr()) };
        Ok(())
    }

    fn gemm(&self, g: &Gemm, a: u64, b: u64, c: u64) -> Result<(), BackendError> {
        if self.recorded(|| Recorded::Gemm(g.clone(), a, b, c)) {
            return Ok(());
        }
        for k in 0..g.batch {
            let am = Mat {
                address: a,
                elem: g.elem,
                base: k * g.stride_a,
                ld: g.lda,
            };
            let bm = Mat {
                address: b,
                elem: g.elem,
                base: k * g.stride_b,
                ld: g.ldb,
            };
            let cm = Mat {
                address: c,
                elem: g.elem,
                base: k * g.stride_c,
                ld: g.ldc,
            };
            for i in 0..g.m {
                for j in 0..g.n {
                    let mut s = 0.0;
                    for l in 0..g.k {
                        let x = if g.trans_a {
                            am.get(l, i)
                        } else {
                            am.get(i, l)
                        };
                        let y = if g.trans_b {
                            bm.get(j, l)
                        } else {
                            bm.get(l, j)
                        };
                        s += x * y;
                    }
                    cm.set(i, j, s);
                }
            }
        }
        Ok(())
    }

    fn trsm(&self, t: &Trsm, a: u64, b: u64) -> Result<(), BackendError> {
        if self.recorded(|| Recorded::Trsm(t.clone(), a, b)) {
            return Ok(());
        }
        let order = if t.left { t.m } else { t.n };
        for k in 0..t.batch {
            let am = Mat {
                address: a,
                elem: t.elem,
                base: k * t.stride_a,
                ld: t.lda,
            };
            let bm = Mat {
                address: b,
                elem: t.elem,
                base: k * t.stride_b,
                ld: t.ldb,
            };
            // op(A), dense, reading only the named triangle.
            let mut op = vec![vec![0.0; order]; order];
            for r in 0..order {
                for c in 0..order {
                    let stored = if t.upper { r <= c } else { r >= c };
                    let v = if r == c && t.unit {
                        1.0
                    } else if stored {
                        am.get(r, c)
                    } else {
                        0.0
                    };
                    if t.trans {
                        op[c][r] = v;
                    } else {
                        op[r][c] = v;
                    }
                }
            }
            let lower = t.upper == t.trans;
            if t.left {
                for c in 0..t.n {
                    let rhs: Vec<f64> = (0..t.m).map(|r| bm.get(r, c)).collect();
                    let x = substitute(&op, &rhs, lower);
                    for (r, v) in x.into_iter().enumerate() {
                        bm.set(r, c, v);
                    }
                }
            } else {
                // X op(A) = B row by row: op(A)^T x^T = b^T.
                let opt: Vec<Vec<f64>> = (0..order)
                    .map(|r| (0..order).map(|c| op[c][r]).collect())
                    .collect();
                for r in 0..t.m {
                    let rhs: Vec<f64> = (0..t.n).map(|c| bm.get(r, c)).collect();
                    let x = substitute(&opt, &rhs, !lower);
                    for (c, v) in x.into_iter().enumerate() {
                        bm.set(r, c, v);
                    }
                }
            }
        }
        Ok(())
    }

    fn solver(
        &self,
        call: &SolverCall,
        address: &dyn Fn(usize) -> u64,
    ) -> Result<(), BackendError> {
        self.refused_while_recording("a cuSOLVER call")?;
        let e = call.elem;
        for k in 0..call.batch {
            self.calls.set(self.calls.get() + 1);
            match &call.call {
                Solver::Getrf { n, a, ipiv, info } => {
                    let n = *n;
                    let m = Mat {
                        address: address(*a),
                        elem: e,
                        base: k * n * n,
                        ld: n,
                    };
                    let (piv, inf) = (address(*ipiv), address(*info));
                    let mut status = 0;
                    for j in 0..n {
                        let mut p = j;
                        for i in j + 1..n {
                            if m.get(i, j).abs() > m.get(p, j).abs() {
                                p = i;
                            }
                        }
                        set_int(piv, k * n + j, (p + 1) as i32);
                        if m.get(p, j) != 0.0 {
                            if p != j {
                                for c in 0..n {
                                    let (x, y) = (m.get(j, c), m.get(p, c));
                                    m.set(j, c, y);
                                    m.set(p, c, x);
                                }
                            }
                            let d = m.get(j, j);
                            for i in j + 1..n {
                                m.set(i, j, m.get(i, j) / d);
                            }
                        } else if status == 0 {
                            status = (j + 1) as i32;
                        }
                        for c in j + 1..n {
                            for i in j + 1..n {
                                m.set(i, c, m.get(i, c) - m.get(i, j) * m.get(j, c));
                            }
                        }
                    }
                    set_int(inf, k, status);
                }
                Solver::Getrs {
                    trans,
                    n,
                    nrhs,
                    a,
                    ipiv,
                    b,
                    info,
                } => {
                    let (n, nrhs) = (*n, *nrhs);
                    let lu = Mat {
                        address: address(*a),
                        elem: e,
                        base: k * n * n,
                        ld: n,
                    };
                    let bm = Mat {
                        address: address(*b),
                        elem: e,
                        base: k * n * nrhs,
                        ld: n,
                    };
                    let piv = |i: usize| (int_at(address(*ipiv), k * n + i) - 1) as usize;
                    for c in 0..nrhs {
                        let mut x: Vec<f64> = (0..n).map(|r| bm.get(r, c)).collect();
                        if !*trans {
                            for i in 0..n {
                                x.swap(i, piv(i));
                            }
                            for i in 0..n {
                                for j in 0..i {
                                    x[i] -= lu.get(i, j) * x[j];
                                }
                            }
                            for i in (0..n).rev() {
                                for j in i + 1..n {
                                    x[i] -= lu.get(i, j) * x[j];
                                }
                                x[i] /= lu.get(i, i);
                            }
                        } else {
                            for i in 0..n {
                                for j in 0..i {
                                    x[i] -= lu.get(j, i) * x[j];
                                }
                                x[i] /= lu.get(i, i);
                            }
                            for i in (0..n).rev() {
                                for j in i + 1..n {
                                    x[i] -= lu.get(j, i) * x[j];
                                }
                            }
                            for i in (0..n).rev() {
                                x.swap(i, piv(i));
                            }
                        }
                        for (r, v) in x.into_iter().enumerate() {
                            bm.set(r, c, v);
                        }
                    }
                    set_int(address(*info), k, 0);
                }
                Solver::Potrf { upper, n, a, info } => {
                    let n = *n;
                    let m = Mat {
                        address: address(*a),
                        elem: e,
                        base: k * n * n,
                        ld: n,
                    };
                    // The factor U (A = U^T U) in the upper triangle, or L in the lower.
                    let at = |r: usize, c: usize| if *upper { m.get(r, c) } else { m.get(c, r) };
                    let put = |r: usize, c: usize, v: f64| {
                        if *upper {
                            m.set(r, c, v)
                        } else {
                            m.set(c, r, v)
                        }
                    };
                    let mut status = 0;
                    'factor: for j in 0..n {
                        let mut d = at(j, j);
                        for l in 0..j {
                            d -= at(l, j) * at(l, j);
                        }
                        if d.is_nan() || d <= 0.0 {
                            status = (j + 1) as i32;
                            break 'factor;
                        }
                        let d = d.sqrt();
                        put(j, j, d);
                        for c in j + 1..n {
                            let mut s = at(j, c);
                            for l in 0..j {
                                s -= at(l, j) * at(l, c);
                            }
                            put(j, c, s / d);
                        }
                    }
                    set_int(address(*info), k, status);
                }
                Solver::Syevd {
                    upper,
                    n,
                    a,
                    w,
                    info,
                } => {
                    let n = *n;
                    let m = Mat {
                        address: address(*a),
                        elem: e,
                        base: k * n * n,
                        ld: n,
                    };
                    let mut sym = vec![0.0; n * n];
                    for r in 0..n {
                        for c in 0..n {
                            let v = if (r <= c) == *upper {
                                m.get(r, c)
                            } else {
                                m.get(c, r)
                            };
                            sym[r * n + c] = v;
                        }
                    }
                    let (values, vectors) = quabla_linalg::eigh(&sym, 1, n).expect("eigh");
                    for j in 0..n {
                        // SAFETY: `w` holds `n` values per matrix.
                        unsafe { store(address(*w), e, k * n + j, values[j]) };
                        let s = self.sign(j);
                        for r in 0..n {
                            m.set(r, j, s * vectors[r * n + j]);
                        }
                    }
                    set_int(address(*info), k, 0);
                }
                Solver::Gesvdj {
                    econ,
                    m,
                    n,
                    a,
                    s,
                    u,
                    v,
                    info,
                } => {
                    let (m, n) = (*m, *n);
                    let c = m.min(n);
                    let (ucols, vcols) = if *econ { (c, c) } else { (m, n) };
                    let am = Mat {
                        address: address(*a),
                        elem: e,
                        base: k * m * n,
                        ld: m,
                    };
                    let mut row_major = vec![0.0; m * n];
                    for r in 0..m {
                        for col in 0..n {
                            row_major[r * n + col] = am.get(r, col);
                        }
                    }
                    let (uu, ss, vh) =
                        quabla_linalg::svd(&row_major, 1, m, n, !*econ).expect("svd");
                    let um = Mat {
                        address: address(*u),
                        elem: e,
                        base: k * m * ucols,
                        ld: m,
                    };
                    let vm = Mat {
                        address: address(*v),
                        elem: e,
                        base: k * n * vcols,
                        ld: n,
                    };
                    for j in 0..ucols {
                        let sg = self.sign(j);
                        for r in 0..m {
                            um.set(r, j, sg * uu[r * ucols + j]);
                        }
                    }
                    for j in 0..vcols {
                        // A pair (u_j, v_j) keeps its product: the same sign for j < c.
                        let sg = if j < c {
                            self.sign(j)
                        } else {
                            self.sign(j + 1)
                        };
                        for r in 0..n {
                            vm.set(r, j, sg * vh[j * n + r]);
                        }
                    }
                    for (j, &sv) in ss.iter().enumerate() {
                        // SAFETY: `s` holds `c` values per matrix.
                        unsafe { store(address(*s), e, k * c + j, sv) };
                    }
                    set_int(address(*info), k, 0);
                }
                Solver::Geqrf { m, n, a, tau, info } => {
                    let (m, n) = (*m, *n);
                    let kk = m.min(n);
                    let am = Mat {
                        address: address(*a),
                        elem: e,
                        base: k * m * n,
                        ld: m,
                    };
                    for j in 0..kk {
                        let alpha = am.get(j, j);
                        let xnorm = (j + 1..m).map(|i| am.get(i, j).powi(2)).sum::<f64>().sqrt();
                        let t = if xnorm == 0.0 {
                            0.0
                        } else {
                            let beta = -alpha.signum() * alpha.hypot(xnorm);
                            let scale = 1.0 / (alpha - beta);
                            for i in j + 1..m {
                                am.set(i, j, am.get(i, j) * scale);
                            }
                            am.set(j, j, beta);
                            (beta - alpha) / beta
                        };
                        // SAFETY: `tau` holds `min(m, n)` values per matrix.
                        unsafe { store(address(*tau), e, k * kk + j, t) };
                        let v = |i: usize| if i == j { 1.0 } else { am.get(i, j) };
                        for col in j + 1..n {
                            let wsum: f64 = (j..m).map(|i| v(i) * am.get(i, col)).sum();
                            for i in j..m {
                                am.set(i, col, am.get(i, col) - t * wsum * v(i));
                            }
                        }
                    }
                    set_int(address(*info), k, 0);
                }
                Solver::Orgqr {
                    m,
                    n,
                    k: refl,
                    a,
                    tau,
                    info,
                } => {
                    let (m, n, refl) = (*m, *n, *refl);
                    let am = Mat {
                        address: address(*a),
                        elem: e,
                        base: k * m * n,
                        ld: m,
                    };
                    let reflectors: Vec<Vec<f64>> = (0..refl)
                        .map(|j| {
                            (0..m)
                                .map(|i| {
                                    if i < j {
                                        0.0
                                    } else if i == j {
                                        1.0
                                    } else {
                                        am.get(i, j)
                                    }
                                })
                                .collect()
                        })
                        .collect();
                    // SAFETY: `tau` holds `refl` values per matrix.
                    let taus: Vec<f64> = (0..refl)
                        .map(|j| unsafe { load(address(*tau), e, k * refl + j) })
                        .collect();
                    let mut q: Vec<Vec<f64>> = (0..n)
                        .map(|c| (0..m).map(|r| f64::from(u8::from(r == c))).collect())
                        .collect();
                    for j in (0..refl).rev() {
                        for col in q.iter_mut() {
                            let wsum: f64 = (j..m).map(|i| reflectors[j][i] * col[i]).sum();
                            for i in j..m {
                                col[i] -= taus[j] * wsum * reflectors[j][i];
                            }
                        }
                    }
                    for (c, col) in q.iter().enumerate() {
                        for (r, &val) in col.iter().enumerate() {
                            am.set(r, c, val);
                        }
                    }
                    set_int(address(*info), k, 0);
                }
            }
        }
        Ok(())
    }

    fn read(&self, address: u64, bytes: usize) -> Result<Vec<u8>, BackendError> {
        self.refused_while_recording("a readback")?;
        // SAFETY: the executor reads within a buffer it bound.
        Ok(unsafe { std::slice::from_raw_parts(address as *const u8, bytes) }.to_vec())
    }

    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<(), BackendError> {
        if self.recorded(|| Recorded::Copy(dst, src, bytes)) {
            return Ok(());
        }
        // SAFETY: both are buffers of at least `bytes` bytes, distinct allocations.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, bytes) };
        Ok(())
    }
}

/// Solves `t y = b` by substitution, `t` dense lower (or upper) triangular.
fn substitute(t: &[Vec<f64>], b: &[f64], lower: bool) -> Vec<f64> {
    let n = b.len();
    let mut y = b.to_vec();
    if lower {
        for i in 0..n {
            for j in 0..i {
                y[i] -= t[i][j] * y[j];
            }
            y[i] /= t[i][i];
        }
    } else {
        for i in (0..n).rev() {
            for j in i + 1..n {
                y[i] -= t[i][j] * y[j];
            }
            y[i] /= t[i][i];
        }
    }
    y
}

/// Host memory holding a tensor as the device stores it (`runtime::CudaBackend::upload`).
fn upload(t: &HostTensor) -> HostBuffer {
    match &t.data {
        HostData::F32(v) => raw(v),
        HostData::F64(v) => raw(v),
        HostData::I32(v) => raw(v),
        HostData::I64(v) => raw(v),
        HostData::Bool(v) => raw(&v
            .iter()
            .map(|&b| f32::from(u8::from(b)))
            .collect::<Vec<_>>()),
    }
}

fn constant(data: &ConstData) -> HostBuffer {
    match data {
        ConstData::F32(v) => raw(v),
        ConstData::F64(v) => raw(v),
        ConstData::I32(v) => raw(v),
        ConstData::I64(v) => raw(v),
    }
}

/// Runs `program` on the host model and returns its outputs as host tensors.
pub fn run(
    kernels: &HostKernels,
    program: &Program,
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, BackendError> {
    run_counting_graphs(kernels, program, inputs).map(|(out, _)| out)
}

/// [`run`], also saying how many loop bodies were recorded and how many replays ran.
pub fn run_counting_graphs(
    kernels: &HostKernels,
    program: &Program,
    inputs: &[HostTensor],
) -> Result<(Vec<HostTensor>, (usize, usize)), BackendError> {
    let machine = HostMachine::new(kernels, program);
    let input_buffers: Vec<HostBuffer> = inputs.iter().map(upload).collect();
    let addresses: Vec<u64> = input_buffers.iter().map(HostBuffer::address).collect();
    let mut constant_buffers = Vec::new();
    let mut constants = HashMap::new();
    for (id, decl) in program.buffers.iter().enumerate() {
        if let Role::Constant(data) = &decl.role {
            let b = constant(data);
            constants.insert(id, b.address());
            constant_buffers.push(b);
        }
    }
    let values = exec::execute(&machine, program, &addresses, &constants, &mut |_| None)?;
    let mut out: Vec<HostTensor> = Vec::new();
    for (value, o) in values.into_iter().zip(&program.outputs) {
        let address = match &value {
            OutputValue::Input(k) => input_buffers[*k].address(),
            OutputValue::Owned(b) => b.address(),
            OutputValue::Same(j) => {
                out.push(out[*j].clone());
                continue;
            }
        };
        out.push(download(address, o.dtype, &o.shape));
    }
    Ok((out, machine.graphs()))
}

/// A tensor held in the host model's device memory, as `runtime::CudaMemory` holds one.
pub struct Resident {
    pub buffer: HostBuffer,
    pub dtype: DType,
    pub shape: Shape,
}

impl Resident {
    /// Uploads a host tensor.
    pub fn upload(t: &HostTensor) -> Resident {
        Resident {
            buffer: upload(t),
            dtype: t.dtype(),
            shape: t.shape.clone(),
        }
    }

    /// The address of its storage.
    pub fn address(&self) -> u64 {
        self.buffer.address()
    }

    /// Reads it back.
    pub fn download(&self) -> HostTensor {
        download(self.address(), self.dtype, &self.shape)
    }

    /// The size of its values in bytes (what the device allocates for it).
    pub fn bytes(&self) -> usize {
        self.shape.size() * storage_of(self.dtype).size()
    }
}

/// Runs `program` on resident inputs and leaves its outputs resident, taking the storage of
/// each output first from `pool` (tensors donated to earlier runs: one of the same size in
/// bytes), as `runtime::Loaded::run` does on the device. An output that is an input, or
/// repeats an earlier output, is copied here (the device shares the handle instead).
pub fn run_resident(
    kernels: &HostKernels,
    program: &Program,
    inputs: &[&Resident],
    pool: &mut Vec<Resident>,
) -> Result<Vec<Resident>, BackendError> {
    let machine = HostMachine::new(kernels, program);
    let addresses: Vec<u64> = inputs.iter().map(|r| r.address()).collect();
    let mut constant_buffers = Vec::new();
    let mut constants = HashMap::new();
    for (id, decl) in program.buffers.iter().enumerate() {
        if let Role::Constant(data) = &decl.role {
            let b = constant(data);
            constants.insert(id, b.address());
            constant_buffers.push(b);
        }
    }
    let mut pooled = |bytes: usize| {
        let i = pool.iter().position(|r| r.bytes() == bytes)?;
        Some(pool.swap_remove(i).buffer)
    };
    let values = exec::execute(&machine, program, &addresses, &constants, &mut pooled)?;
    let mut out: Vec<Resident> = Vec::new();
    for (value, o) in values.into_iter().zip(&program.outputs) {
        let copy_of = |address: u64, bytes: usize| {
            let b = HostBuffer::new(bytes);
            // SAFETY: both hold `bytes` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(address as *const u8, b.address() as *mut u8, bytes)
            };
            b
        };
        let bytes = o.shape.size() * storage_of(o.dtype).size();
        let buffer = match value {
            OutputValue::Owned(b) => b,
            OutputValue::Input(k) => copy_of(inputs[k].address(), bytes),
            OutputValue::Same(j) => copy_of(out[j].address(), bytes),
        };
        out.push(Resident {
            buffer,
            dtype: o.dtype,
            shape: o.shape.clone(),
        });
    }
    Ok(out)
}
