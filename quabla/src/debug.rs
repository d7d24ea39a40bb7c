//! Debugging aids: the process-wide non-finite check ([`debug_nans`]) and its eager form, and
//! the source directories hidden from node origins. The check of compiled plans lives in the
//! CPU backend, and `debug_print` with the array library (`ops/effects.rs`); this module owns
//! the switch and the eager check, and sits below the runtime (it must not import the layers
//! that record or run operations).

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use std::sync::atomic::{AtomicBool, Ordering};

static DEBUG_NANS: AtomicBool = AtomicBool::new(false);

/// Source directories of libraries that wrap this one; see [`hide_source_dir`].
static HIDDEN_DIRS: std::sync::RwLock<Vec<&'static str>> = std::sync::RwLock::new(Vec::new());

/// Marks the files under `dir` (spelled as `file!()` spells them) as library code: a traced
/// operation called from there records no source line, instead of the wrapper's own. For
/// bindings that wrap this library (the Python package calls it when it is imported).
pub fn hide_source_dir(dir: &'static str) {
    let mut dirs = HIDDEN_DIRS.write().unwrap_or_else(|e| e.into_inner());
    if !dirs.contains(&dir) {
        dirs.push(dir);
    }
}

/// Whether `file` is under a directory given to [`hide_source_dir`].
pub(crate) fn hidden_source(file: &str) -> bool {
    let dirs = HIDDEN_DIRS.read().unwrap_or_else(|e| e.into_inner());
    dirs.iter().any(|d| file.starts_with(d))
}

/// Turns the non-finite check on or off for the whole process: every eager operation, and
/// every plan compiled from now on (`jit`, `grad`, ... as if each had
/// [`crate::Jit::check_nans`]), stops with [`Error::NonFinite`] at the first value that is NaN
/// or infinite while its operands are finite, naming the operation and the user's source
/// line. Plans compiled with the check are cached apart from the others, so turning it off
/// goes back to the fast plans.
pub fn debug_nans(on: bool) {
    DEBUG_NANS.store(on, Ordering::Relaxed);
}

/// Whether [`debug_nans`] is on.
pub(crate) fn nans_checked() -> bool {
    DEBUG_NANS.load(Ordering::Relaxed)
}

/// The eager check of one operation `op` on `inputs` that gave `result`, called at `site`.
pub(crate) fn check_eager(
    op: &str,
    inputs: &[Tensor],
    result: &Tensor,
    site: &'static std::panic::Location<'static>,
) -> Result<()> {
    if result.dtype() == crate::DType::Bool {
        return Ok(());
    }
    let values = result.to_vec::<f64>()?;
    let Some((index, bad)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) else {
        return Ok(());
    };
    let mut ranges = Vec::with_capacity(inputs.len());
    for (k, t) in inputs.iter().enumerate() {
        let v = t.to_vec::<f64>()?;
        if v.iter().any(|x| !x.is_finite()) {
            return Ok(());
        }
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        ranges.push(format!("arg{k} in [{lo}, {hi}]"));
    }
    Err(Error::NonFinite {
        message: format!(
            "non-finite value {bad} at element {index} of an eager {op} whose operands are finite:\n  operands: {}\n  created at {}:{}:{}",
            ranges.join(", "),
            site.file(),
            site.line(),
            site.column()
        ),
    })
}
