//! Warnings (errors.md §3): a process-wide handler and a per-kind policy mirroring Python's
//! `warnings.simplefilter`. The default handler prints every warning to standard error; the
//! default action is [`Action::Always`]. [`Action::Error`] turns the warning into
//! `Err(Error::Warning(..))` of the operation that raised it.
//!
//! This module owns the policy and the handler; the [`Warning`] values are defined beside the
//! errors they can become (`error.rs`), so that the two modules do not import each other.

use crate::error::{Error, Result};
pub use crate::error::{Warning, WarningKind, RETRACE_ADVICE};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

/// What happens to a warning of one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Deliver every warning to the handler (the default).
    Always,
    /// Deliver only the first warning of this kind in the process.
    Once,
    /// Drop it.
    Ignore,
    /// Make the operation return `Err(Error::Warning(w))`.
    Error,
}

type Handler = Arc<dyn Fn(&Warning) + Send + Sync>;

struct State {
    handler: Handler,
    retrace: Action,
    float64: Action,
    seen: HashSet<WarningKind>,
}

fn state() -> &'static Mutex<State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    STATE.get_or_init(|| {
        Mutex::new(State {
            handler: Arc::new(|w: &Warning| eprintln!("{}: {w}", kind_name(w.kind()))),
            retrace: Action::Always,
            float64: Action::Always,
            seen: HashSet::new(),
        })
    })
}

fn kind_name(kind: WarningKind) -> &'static str {
    match kind {
        WarningKind::Retrace => "RetraceWarning",
        WarningKind::Float64AsFloat32 => "UserWarning",
    }
}

fn lock() -> std::sync::MutexGuard<'static, State> {
    state().lock().unwrap_or_else(|e| e.into_inner())
}

/// Replaces the process-wide handler.
pub fn set_handler(handler: impl Fn(&Warning) + Send + Sync + 'static) {
    lock().handler = Arc::new(handler);
}

/// Sets the policy for one kind of warning.
pub fn set_action(kind: WarningKind, action: Action) {
    let mut s = lock();
    match kind {
        WarningKind::Retrace => s.retrace = action,
        WarningKind::Float64AsFloat32 => s.float64 = action,
    }
    s.seen.remove(&kind);
}

/// The policy of one kind.
pub fn action(kind: WarningKind) -> Action {
    let s = lock();
    match kind {
        WarningKind::Retrace => s.retrace,
        WarningKind::Float64AsFloat32 => s.float64,
    }
}

/// Raises a warning under the current policy.
pub(crate) fn warn(w: Warning) -> Result<()> {
    let handler = {
        let mut s = lock();
        let action = match w.kind() {
            WarningKind::Retrace => s.retrace,
            WarningKind::Float64AsFloat32 => s.float64,
        };
        match action {
            Action::Ignore => return Ok(()),
            Action::Error => return Err(Error::Warning(Box::new(w))),
            Action::Once if !s.seen.insert(w.kind()) => return Ok(()),
            Action::Once | Action::Always => s.handler.clone(),
        }
    };
    handler(&w);
    Ok(())
}
