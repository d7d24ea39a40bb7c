//! Cancellation of running computations: tokens, the process-wide interrupt, and the checks
//! executors make between the units of work they run.
//!
//! A computation is cancelled through one of two flags:
//!
//! - a [`CancelToken`], made current for the work a thread runs with [`with_token`] (or
//!   [`CancelToken::enter`]) and cancelled from any thread with [`CancelToken::cancel`]. A
//!   cancelled token stays cancelled: every later check under it fails, so one token stops one
//!   piece of work and a new token is made for the next;
//! - the process-wide interrupt, set by [`interrupt`] (what a Python binding calls on Ctrl-C;
//!   it only stores an atomic flag, so a signal handler may call it). It is consumed: the first
//!   check in any thread that observes it fails with [`BackendError::Cancelled`] and clears it,
//!   so one Ctrl-C stops one computation (the one running, or the next to start).
//!
//! A check fails with [`BackendError::Cancelled`]. Executors take a [`Watch`] once per run
//! ([`watch`]: one thread-local read) and call [`Watch::check`] between plan nodes and between
//! loop iterations; a check is two relaxed atomic loads of flags nobody writes until a
//! cancellation, so it costs nothing measurable. Code that checks rarely (an eager loop of the
//! facade, once per iteration) calls [`check`] directly. A token is current only on the thread
//! that entered it: work a computation hands to other threads is not watched there, and the
//! kernels of one node are not interrupted (a check runs before the next node).
//!
//! # Plugins
//!
//! A plugin library has its own copy of this module, whose flags the host never sets. So the
//! host passes its flags along when it runs a plugin's plan ([`crate::abi::AbiCancel`]: a
//! reference to the host's interrupt flag and a shared handle on the current token's flag), and
//! the plugin-side adapter makes them current for the duration of the run ([`with_abi`]): the
//! plugin's executor then watches the host's flags through its own [`watch`]. Cancellation
//! reaches a plugin's runs exactly as it reaches linked backends (within the same checks the
//! plugin's executor makes), for plugins built against interface version 2 or later.
//!
//! This module owns the flags and the thread's current context; it must not block, allocate
//! on the checking path, or run user code.

use crate::abi::AbiCancel;
use crate::BackendError;
use abi_stable::std_types::{RArc, ROption};
use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The process-wide interrupt flag of this copy of the module (see [`interrupt`]).
static INTERRUPT: AtomicBool = AtomicBool::new(false);

/// A cancellation flag shared by everyone holding a clone; see the module documentation.
#[derive(Clone, Default)]
pub struct CancelToken {
    flag: Arc<AtomicBool>,
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Cancels the token: work running under it (on any thread) stops at its next check, and
    /// every later check under it fails.
    pub fn cancel(&self) {
        self.flag.store(true, Ordering::Relaxed);
    }

    /// Whether [`CancelToken::cancel`] was called on this token or a clone of it.
    pub fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }

    /// Makes this token current for the work the calling thread runs until the guard is
    /// dropped (the previous token, if any, is current again afterwards). [`with_token`] is
    /// the closure form.
    pub fn enter(&self) -> TokenGuard {
        // `try_with`: in a thread-local destructor the slot may be gone; the token is then
        // simply not current (there is no work left to watch on that thread).
        let previous = CURRENT
            .try_with(|c| {
                let mut c = c.borrow_mut();
                let interrupt = c.as_ref().map_or(&INTERRUPT, |ctx| ctx.interrupt);
                c.replace(Context {
                    interrupt,
                    token: Some(Flag::Local(self.flag.clone())),
                })
            })
            .ok();
        TokenGuard {
            previous,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// Keeps a token current on this thread (from [`CancelToken::enter`]); dropping it restores
/// the previous context. Not `Send`: it belongs to the thread that entered.
#[must_use = "the token is current only while the guard lives"]
pub struct TokenGuard {
    /// The context to restore (`Some(None)`: there was none).
    previous: Option<Option<Context>>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl fmt::Debug for TokenGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenGuard").finish_non_exhaustive()
    }
}

impl Drop for TokenGuard {
    fn drop(&mut self) {
        if let Some(previous) = self.previous.take() {
            // `try_with`: during thread teardown the slot may already be gone, and then there
            // is nothing left to restore.
            let _ = CURRENT.try_with(|c| *c.borrow_mut() = previous);
        }
    }
}

/// Runs `f` with `token` current on this thread (see [`CancelToken::enter`]).
pub fn with_token<R>(token: &CancelToken, f: impl FnOnce() -> R) -> R {
    let _guard = token.enter();
    f()
}

/// Sets the process-wide interrupt: the first check that observes it (in any thread) fails
/// with [`BackendError::Cancelled`] and clears it. Only an atomic store, so it is safe to call
/// from a signal handler.
pub fn interrupt() {
    INTERRUPT.store(true, Ordering::Relaxed);
}

/// Whether an interrupt is pending (set and not yet observed by a check).
pub fn interrupt_pending() -> bool {
    INTERRUPT.load(Ordering::Relaxed)
}

/// Clears a pending interrupt without cancelling anything; returns whether one was pending.
pub fn clear_interrupt() -> bool {
    INTERRUPT.swap(false, Ordering::Relaxed)
}

/// A token's flag: this copy's own, or the host's seen through the plugin boundary.
#[derive(Clone)]
enum Flag {
    Local(Arc<AtomicBool>),
    Remote(RArc<AtomicBool>),
}

impl Flag {
    #[inline]
    fn is_set(&self) -> bool {
        let flag: &AtomicBool = match self {
            Flag::Local(f) => f,
            Flag::Remote(f) => f,
        };
        flag.load(Ordering::Relaxed)
    }
}

/// What the work of a thread watches: an interrupt flag (this copy's, or the host's when a
/// plugin runs a plan for it) and the current token's flag, if any.
#[derive(Clone)]
struct Context {
    interrupt: &'static AtomicBool,
    token: Option<Flag>,
}

thread_local! {
    /// The thread's context; `None` watches this copy's interrupt flag and no token.
    static CURRENT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

/// The flags a run watches, taken once at its start with [`watch`], so that each check is two
/// relaxed loads and no thread-local lookup. It holds the token's flag alive for the run.
#[derive(Clone)]
pub struct Watch {
    interrupt: &'static AtomicBool,
    token: Option<Flag>,
}

impl Default for Watch {
    /// Watches this copy's interrupt flag and no token (what a thread without a context
    /// watches).
    fn default() -> Watch {
        Watch {
            interrupt: &INTERRUPT,
            token: None,
        }
    }
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("token", &self.token.is_some())
            .finish_non_exhaustive()
    }
}

impl Watch {
    /// [`BackendError::Cancelled`] when the current token is cancelled or an interrupt is
    /// pending (which this check then consumes).
    #[inline]
    pub fn check(&self) -> Result<(), BackendError> {
        check_flags(
            self.interrupt,
            self.token.as_ref().is_some_and(Flag::is_set),
        )
    }

    /// The flags as they cross the plugin boundary ([`with_abi`] on the other side).
    pub fn to_abi(&self) -> AbiCancel {
        AbiCancel {
            interrupt: self.interrupt,
            token: match &self.token {
                Some(Flag::Local(f)) => ROption::RSome(RArc::from(f.clone())),
                Some(Flag::Remote(f)) => ROption::RSome(f.clone()),
                None => ROption::RNone,
            },
        }
    }
}

/// The flags the calling thread's work watches now: what an executor takes once per run.
pub fn watch() -> Watch {
    CURRENT
        .try_with(|c| match &*c.borrow() {
            Some(ctx) => Watch {
                interrupt: ctx.interrupt,
                token: ctx.token.clone(),
            },
            None => Watch::default(),
        })
        .unwrap_or_default()
}

/// [`BackendError::Cancelled`] when the calling thread's current token is cancelled or an
/// interrupt is pending (which this check then consumes): the check for code that runs
/// rarely enough not to keep a [`Watch`] (an eager loop, once per iteration).
pub fn check() -> Result<(), BackendError> {
    let (interrupt, token) = CURRENT
        .try_with(|c| match &*c.borrow() {
            Some(ctx) => (ctx.interrupt, ctx.token.as_ref().is_some_and(Flag::is_set)),
            None => (&INTERRUPT, false),
        })
        .unwrap_or((&INTERRUPT, false));
    check_flags(interrupt, token)
}

/// The check itself, with the token's flag already read.
#[inline]
fn check_flags(interrupt: &AtomicBool, token: bool) -> Result<(), BackendError> {
    if token || interrupt.load(Ordering::Relaxed) {
        return cancelled(interrupt, token);
    }
    Ok(())
}

/// The rare path of a check: a set interrupt is consumed (another thread may take it first,
/// and then only a cancelled token cancels this run).
#[cold]
#[inline(never)]
fn cancelled(interrupt: &AtomicBool, token: bool) -> Result<(), BackendError> {
    let interrupted = interrupt.swap(false, Ordering::Relaxed);
    if interrupted || token {
        Err(BackendError::Cancelled)
    } else {
        Ok(())
    }
}

/// Runs `f` watching the flags a host passed across the plugin boundary: what the plugin side
/// of [`crate::abi`] does around every run, so that the plugin's executor, watching its own
/// copy of this module, sees the host's token and interrupt.
pub fn with_abi<R>(flags: &AbiCancel, f: impl FnOnce() -> R) -> R {
    let context = Context {
        interrupt: flags.interrupt,
        token: match &flags.token {
            ROption::RSome(f) => Some(Flag::Remote(f.clone())),
            ROption::RNone => None,
        },
    };
    let previous = CURRENT.try_with(|c| c.borrow_mut().replace(context)).ok();
    let _guard = TokenGuard {
        previous,
        _not_send: std::marker::PhantomData,
    };
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    // The process-wide interrupt is not touched here: other tests of this crate run in
    // parallel in the same process. `tests/cancel.rs` tests it alone in its own process.

    #[test]
    fn a_token_cancels_work_under_it_on_its_thread() {
        let token = CancelToken::new();
        assert!(!token.is_cancelled());
        assert_eq!(check(), Ok(()));
        with_token(&token, || {
            assert_eq!(check(), Ok(()));
            let w = watch();
            assert_eq!(w.check(), Ok(()));
            token.clone().cancel();
            assert!(token.is_cancelled());
            assert_eq!(w.check(), Err(BackendError::Cancelled));
            assert_eq!(check(), Err(BackendError::Cancelled));
            // A cancelled token stays cancelled.
            assert_eq!(check(), Err(BackendError::Cancelled));
        });
        // Outside its scope the token is not watched.
        assert_eq!(check(), Ok(()));
        assert_eq!(watch().check(), Ok(()));
    }

    #[test]
    fn tokens_nest_and_the_previous_one_comes_back() {
        let outer = CancelToken::new();
        let inner = CancelToken::new();
        outer.cancel();
        with_token(&outer, || {
            assert_eq!(check(), Err(BackendError::Cancelled));
            with_token(&inner, || assert_eq!(check(), Ok(())));
            assert_eq!(check(), Err(BackendError::Cancelled));
        });
        let guard = inner.enter();
        inner.cancel();
        assert_eq!(check(), Err(BackendError::Cancelled));
        drop(guard);
        assert_eq!(check(), Ok(()));
    }

    #[test]
    fn a_token_is_current_only_on_the_thread_that_entered_it() {
        let token = CancelToken::new();
        token.cancel();
        with_token(&token, || {
            let other = std::thread::spawn(check).join().unwrap();
            assert_eq!(other, Ok(()));
        });
    }

    #[test]
    fn a_token_cancelled_from_another_thread_is_seen() {
        let token = CancelToken::new();
        let remote = token.clone();
        with_token(&token, || {
            let w = watch();
            std::thread::spawn(move || remote.cancel()).join().unwrap();
            assert_eq!(w.check(), Err(BackendError::Cancelled));
        });
    }

    #[test]
    fn flags_cross_the_boundary_as_the_same_flags() {
        let token = CancelToken::new();
        let abi = with_token(&token, || watch().to_abi());
        // The other side of the boundary (here the same copy of the module).
        with_abi(&abi, || {
            assert_eq!(check(), Ok(()));
            token.cancel();
            assert_eq!(watch().check(), Err(BackendError::Cancelled));
            assert_eq!(check(), Err(BackendError::Cancelled));
        });
        assert_eq!(check(), Ok(()));
        let none = watch().to_abi();
        assert!(none.token.is_none());
        assert!(std::ptr::eq(none.interrupt, &INTERRUPT));
    }

    #[test]
    fn the_message_says_it_was_interrupted() {
        assert_eq!(
            BackendError::Cancelled.to_string(),
            "cancelled: the computation was interrupted"
        );
    }
}
