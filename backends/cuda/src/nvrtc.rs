//! NVRTC: compiling a program's CUDA C to PTX or to a GPU architecture's machine code (a
//! cubin). Runs without a GPU (only `libnvrtc` is needed).
//!
//! Every compile uses `--fmad=false` (no contraction of a multiply and an add into one
//! rounding, so a chain of elementwise nodes rounds after each node as the reference does) and
//! keeps IEEE division and square root (NVRTC's defaults). The runtime compiles for the
//! device's own `sm_XX` and falls back to PTX only when NVRTC does not know that architecture:
//! PTX from a newer NVRTC is refused by an older driver, machine code is not.
//!
//! This module owns the calls into NVRTC; it must not touch the driver.

use crate::discovery::{self, Library, Search};
use quabla_backend::Unavailable;
use std::ffi::{c_char, CString};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What to compile to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// PTX for the virtual architecture `compute_XX` (`XX` = major * 10 + minor).
    Ptx(u32),
    /// Machine code for `sm_XX`.
    Cubin(u32),
}

impl Target {
    /// The `--gpu-architecture` option.
    pub fn option(self) -> String {
        match self {
            Target::Ptx(a) => format!("--gpu-architecture=compute_{a}"),
            Target::Cubin(a) => format!("--gpu-architecture=sm_{a}"),
        }
    }

    /// `ptx-90`, `sm-90`: a tag for cache file names.
    pub fn tag(self) -> String {
        match self {
            Target::Ptx(a) => format!("ptx-{a}"),
            Target::Cubin(a) => format!("sm-{a}"),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Ptx(a) => write!(f, "PTX (compute_{a})"),
            Target::Cubin(a) => write!(f, "sm_{a} machine code"),
        }
    }
}

/// The options every compile uses, after the architecture.
pub const OPTIONS: [&str; 2] = ["--fmad=false", "--std=c++17"];

/// A compile that failed: NVRTC's error and its log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileError {
    pub target: Target,
    pub message: String,
    pub log: String,
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "NVRTC could not compile the generated kernels to {}: {}\n{}",
            self.target, self.message, self.log
        )
    }
}

impl std::error::Error for CompileError {}

/// NVRTC, loaded (see [`Nvrtc::open`]).
#[derive(Clone, Copy, Debug)]
pub struct Nvrtc {
    version: (i32, i32),
}

impl Nvrtc {
    /// Opens `libnvrtc` from `search` (by full path, see `discovery`), and checks that
    /// `cudarc` finds the same library; `Unavailable` names what was searched.
    pub fn open(search: &Search) -> Result<Nvrtc, Unavailable> {
        discovery::open(Library::Nvrtc, search)?;
        Nvrtc::after_open()
    }

    /// [`Nvrtc::open`] with the process's search ([`Search::from_env`]), once per process.
    pub fn open_default() -> Result<Nvrtc, Unavailable> {
        discovery::ensure(Library::Nvrtc)?;
        Nvrtc::after_open()
    }

    fn after_open() -> Result<Nvrtc, Unavailable> {
        // SAFETY: `is_culib_present` only tries to open the library by its names.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(Unavailable::missing_library(
                Library::Nvrtc.name(),
                "a libnvrtc was opened but not under a name the CUDA bindings look for",
            ));
        }
        let version = catch_unwind(|| {
            let (mut major, mut minor) = (0, 0);
            // SAFETY: NVRTC writes two integers.
            let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
            (status, major, minor)
        })
        .map_err(|_| {
            Unavailable::missing_library(Library::Nvrtc.name(), "nvrtcVersion is missing")
        })?;
        if version.0 != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(Unavailable::missing_library(
                Library::Nvrtc.name(),
                format!("nvrtcVersion failed: {:?}", version.0),
            ));
        }
        Ok(Nvrtc {
            version: (version.1, version.2),
        })
    }

    /// NVRTC's `(major, minor)` version.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The architectures this NVRTC compiles machine code for (`[75, 80, 86, 89, 90, ...]`).
    pub fn architectures(&self) -> Vec<u32> {
        let result = catch_unwind(|| {
            let mut count = 0;
            // SAFETY: NVRTC writes one integer, then `count` integers.
            unsafe {
                if cudarc::nvrtc::sys::nvrtcGetNumSupportedArchs(&mut count)
                    != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS
                {
                    return Vec::new();
                }
                let mut archs = vec![0; count.max(0) as usize];
                if cudarc::nvrtc::sys::nvrtcGetSupportedArchs(archs.as_mut_ptr())
                    != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS
                {
                    return Vec::new();
                }
                archs.into_iter().map(|a| a as u32).collect()
            }
        });
        result.unwrap_or_default()
    }

    /// Compiles `source` to `target`: PTX text (NUL-terminated, as the driver loads it) or a
    /// cubin.
    pub fn compile(&self, source: &str, target: Target) -> Result<Vec<u8>, CompileError> {
        let fail = |message: String, log: String| CompileError {
            target,
            message,
            log,
        };
        let src = CString::new(source)
            .map_err(|_| fail("the source contains a NUL byte".into(), String::new()))?;
        let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<Vec<u8>, CompileError> {
            let prog = cudarc::nvrtc::result::create_program(&src, Some(c"quabla.cu"))
                .map_err(|e| fail(format!("{e:?}"), String::new()))?;
            let mut options = vec![target.option()];
            options.extend(OPTIONS.iter().map(|o| o.to_string()));
            // SAFETY: `prog` was just created and is destroyed below, once.
            let compiled = unsafe { cudarc::nvrtc::result::compile_program(prog, &options) };
            let result = match compiled {
                Err(e) => {
                    // SAFETY: as above.
                    let log = unsafe { cudarc::nvrtc::result::get_program_log(prog) }
                        .map(|l| c_text(&l))
                        .unwrap_or_default();
                    Err(fail(format!("{e:?}"), log))
                }
                // SAFETY: as above; the program compiled.
                Ok(()) => unsafe { output(prog, target) }.map_err(|e| fail(e, String::new())),
            };
            // SAFETY: as above.
            let _ = unsafe { cudarc::nvrtc::result::destroy_program(prog) };
            result
        }));
        outcome.unwrap_or_else(|payload| {
            Err(fail(
                format!(
                    "NVRTC panicked: {}",
                    quabla_backend::abi::panic_message(payload.as_ref())
                ),
                String::new(),
            ))
        })
    }
}

/// The compiled output of `prog`.
///
/// # Safety
///
/// `prog` must be a live, compiled NVRTC program.
unsafe fn output(
    prog: cudarc::nvrtc::sys::nvrtcProgram,
    target: Target,
) -> Result<Vec<u8>, String> {
    use cudarc::nvrtc::sys;
    match target {
        Target::Ptx(_) => {
            // SAFETY: the caller's contract.
            let ptx =
                unsafe { cudarc::nvrtc::result::get_ptx(prog) }.map_err(|e| format!("{e:?}"))?;
            Ok(ptx.into_iter().map(|c| c as u8).collect())
        }
        Target::Cubin(_) => {
            let mut size = 0usize;
            // SAFETY: the caller's contract; NVRTC writes the size, then `size` bytes.
            unsafe {
                let status = sys::nvrtcGetCUBINSize(prog, &mut size);
                if status != sys::nvrtcResult::NVRTC_SUCCESS {
                    return Err(format!("nvrtcGetCUBINSize: {status:?}"));
                }
                let mut cubin = vec![0u8; size];
                let status = sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut c_char);
                if status != sys::nvrtcResult::NVRTC_SUCCESS {
                    return Err(format!("nvrtcGetCUBIN: {status:?}"));
                }
                Ok(cubin)
            }
        }
    }
}

fn c_text(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
