//! Ctrl-C while Python waits on the library: every call into the facade that can run long goes
//! through [`guarded`], so that SIGINT stops the computation within the facade's next
//! cancellation check and raises `KeyboardInterrupt`.
//!
//! # How
//!
//! Python's own C-level signal handler only sets a flag that the interpreter reads between
//! bytecodes, which never come while the main thread is inside a facade call. So while a
//! guarded call runs on the main thread:
//!
//! 1. our process-level SIGINT handler stands in front of Python's: it writes the signal
//!    number to a socket and then runs Python's handler, which does what it always does (its
//!    flag, its wakeup fd). `signal.signal` replaces the process's handler with Python's, so
//!    each guarded call checks with one `sigaction` query that ours is still in front and
//!    puts it back if not; SIGINT ignored or at its default action (which ends the process)
//!    is left alone;
//! 2. a watcher thread, blocked reading the other end of the socket, cancels the
//!    [`qb::CancelToken`] the call runs under when a SIGINT byte arrives: executors check it
//!    between plan nodes and loop iterations, eager loops once per iteration;
//! 3. when the call returns, the main thread runs Python's signal handlers
//!    (`PyErr_CheckSignals`), so the handler's own exception (`KeyboardInterrupt` by default)
//!    is what the caller sees; a cancelled call whose handler raised nothing still raises
//!    `KeyboardInterrupt`.
//!
//! A signal Python only simulates (`_thread.interrupt_main()`) never reaches a process-level
//! handler: it is raised when the call returns. (Making our socket Python's wakeup fd around
//! each call would see it too, but `signal.set_wakeup_fd` costs two system calls per swap,
//! more than a whole cached `jit` call.)
//!
//! Only the main thread runs Python's signal handlers, so calls from other threads run
//! unguarded. The GIL may be released for the call ([`run`]) or held ([`run_holding_gil`],
//! for calls whose closures hold Python objects): the watcher needs neither the GIL nor the
//! main thread.
//!
//! This module owns its SIGINT handler (always chained to the one it found) and nothing else
//! of the signal machinery; it never calls user code.

use crate::errors::OrRaise;
use pyo3::prelude::*;
use quabla as qb;

/// Runs a facade call with the GIL released, interruptible by Ctrl-C (module docs).
pub fn run<T: Send>(py: Python<'_>, f: impl FnOnce() -> qb::Result<T> + Send) -> PyResult<T> {
    guarded(py, |token| {
        py.detach(|| {
            let _current = token.enter();
            f()
        })
    })
}

/// Runs a facade call with the GIL held (its closures call back into Python), interruptible
/// by Ctrl-C (module docs).
pub fn run_holding_gil<T>(py: Python<'_>, f: impl FnOnce() -> qb::Result<T>) -> PyResult<T> {
    guarded(py, |token| {
        let _current = token.enter();
        f()
    })
}

#[cfg(unix)]
fn guarded<T>(py: Python<'_>, call: impl FnOnce(&qb::CancelToken) -> qb::Result<T>) -> PyResult<T> {
    let token = qb::CancelToken::new();
    if !unix::watching(py) {
        // Not the main thread, or SIGINT is ignored or left to its default (which ends the
        // process): nothing to watch for.
        return call(&token).or_raise();
    }
    let id = unix::activate(&token);
    let result = call(&token);
    unix::deactivate(id);
    let interrupted = token.is_cancelled();
    let signalled = py.check_signals();
    if !interrupted {
        signalled?;
        return result.or_raise();
    }
    // Bytes of this signal still unread by the watcher must not cancel a later call.
    unix::settle();
    // SIGINT came during the call: the caller sees the handler's exception, raised now or
    // earlier inside the call (in a callback, or by the cancelled operation that ran it); a
    // result that arrived anyway is dropped, as Python drops it on Ctrl-C.
    signalled?;
    let err = match result {
        Ok(_) => None,
        Err(e) => Some(crate::errors::to_py(e)),
    };
    Err(match err {
        Some(e) if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) => e,
        _ => pyo3::exceptions::PyKeyboardInterrupt::new_err("interrupted"),
    })
}

#[cfg(not(unix))]
fn guarded<T>(
    _py: Python<'_>,
    call: impl FnOnce(&qb::CancelToken) -> qb::Result<T>,
) -> PyResult<T> {
    call(&qb::CancelToken::new()).or_raise()
}

#[cfg(unix)]
mod unix {
    use pyo3::prelude::*;
    use quabla as qb;
    use std::cell::{Cell, UnsafeCell};
    use std::io::Read;
    use std::os::fd::{IntoRawFd, RawFd};
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
    use std::sync::{Condvar, Mutex, Once};
    use std::time::Duration;

    /// A byte no signal writes (signal numbers start at 1): the settle marker.
    const MARKER: u8 = 0;

    /// The write end of the watcher's socket, which the signal handler writes to (-1: none).
    static WAKEUP: AtomicI32 = AtomicI32::new(-1);
    /// Set in a forked child (its copy has no watcher thread): the next call starts one.
    static FORKED: AtomicBool = AtomicBool::new(false);
    /// The tokens of the guarded calls running on the main thread (nested calls stack up).
    static ACTIVE: Mutex<Vec<(u64, qb::CancelToken)>> = Mutex::new(Vec::new());
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);
    /// How many guarded calls are running: the handler tells the watcher only then, so a
    /// Ctrl-C between calls (which Python raises at its next bytecode) cancels no later call.
    static GUARDING: AtomicUsize = AtomicUsize::new(0);
    /// How many settle markers the watcher has read.
    static SETTLED: (Mutex<u64>, Condvar) = (Mutex::new(0), Condvar::new());
    /// Serialises starting the watcher and chaining the handler (main thread, GIL held).
    static SETUP: Mutex<()> = Mutex::new(());

    /// The SIGINT disposition ours chains to, written before ours is installed and only then.
    struct Previous(UnsafeCell<std::mem::MaybeUninit<libc::sigaction>>);
    // SAFETY: written only by `chain` (under `SETUP`) while our handler is not installed, so
    // no handler reads it concurrently; read only by the handler afterwards.
    unsafe impl Sync for Previous {}
    static PREVIOUS: Previous = Previous(UnsafeCell::new(std::mem::MaybeUninit::uninit()));

    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    thread_local! {
        /// Whether this thread is Python's main thread (the only one Python's signal
        /// handlers run on), asked of Python once per thread.
        static ON_MAIN_THREAD: Cell<Option<bool>> = const { Cell::new(None) };
    }

    fn on_main_thread(py: Python<'_>) -> bool {
        if let Some(known) = ON_MAIN_THREAD.with(Cell::get) {
            return known;
        }
        let ask = || -> PyResult<bool> {
            let ident: u64 = py.import("_thread")?.call_method0("get_ident")?.extract()?;
            let main: u64 = py
                .import("threading")?
                .call_method0("main_thread")?
                .getattr("ident")?
                .extract()?;
            Ok(ident == main)
        };
        let known = ask().unwrap_or(false);
        ON_MAIN_THREAD.with(|c| c.set(Some(known)));
        known
    }

    /// Whether a SIGINT during a call made now reaches the watcher: on the main thread, with
    /// the watcher running and our handler in front of Python's. One `sigaction` query per
    /// call (Python replaces the process's handler whenever `signal.signal` is called, and
    /// ours is chained in front again here).
    pub fn watching(py: Python<'_>) -> bool {
        if !on_main_thread(py) {
            return false;
        }
        let _setup = lock(&SETUP);
        start_watcher() && chain()
    }

    /// Our handler: tells the watcher, then runs the handler it stands in front of (Python's,
    /// which sets its flag and writes its own wakeup fd). Async-signal-safe: an atomic load
    /// and `write` on a non-blocking socket.
    extern "C" fn on_signal(
        signal: libc::c_int,
        info: *mut libc::siginfo_t,
        context: *mut libc::c_void,
    ) {
        // SAFETY: errno is thread-local; the interrupted code's value is put back below.
        let errno = unsafe { *libc::__errno_location() };
        let fd = WAKEUP.load(Ordering::Relaxed);
        if fd >= 0 && GUARDING.load(Ordering::SeqCst) > 0 {
            let byte = signal as u8;
            // SAFETY: `write` is async-signal-safe; a full socket drops the byte (the watcher
            // has one unread already).
            unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
        }
        // SAFETY: `PREVIOUS` was written before this handler was installed (`chain`).
        let previous = unsafe { (*PREVIOUS.0.get()).assume_init_ref() };
        let handler = previous.sa_sigaction;
        if previous.sa_flags & libc::SA_SIGINFO != 0 {
            // SAFETY: with SA_SIGINFO the field holds a three-argument handler.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(handler) };
            f(signal, info, context);
        } else {
            // SAFETY: `chain` never stands in front of SIG_DFL or SIG_IGN, so this is a
            // one-argument handler.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
            f(signal);
        }
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
    }

    /// The process-level SIGINT handler found the first time (Python's): the only one ours
    /// is ever put in front of, so that a handler another library chained in front of ours
    /// (and which calls ours) never becomes the one ours calls: no cycle.
    static FIRST_FOUND: AtomicUsize = AtomicUsize::new(0);

    /// Puts [`on_signal`] in front of Python's SIGINT handler unless it is there already;
    /// false when SIGINT is ignored, has its default action (nothing to chain to) or is
    /// handled by some other process-level handler (left alone).
    fn chain() -> bool {
        // SAFETY: plain `sigaction` queries and installs with valid pointers.
        unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGINT, std::ptr::null(), &mut current) != 0 {
                return false;
            }
            let ours = on_signal as *const () as usize;
            if current.sa_sigaction == ours {
                return true;
            }
            if current.sa_sigaction == libc::SIG_DFL || current.sa_sigaction == libc::SIG_IGN {
                return false;
            }
            let first = FIRST_FOUND.load(Ordering::Relaxed);
            if first == 0 {
                FIRST_FOUND.store(current.sa_sigaction, Ordering::Relaxed);
            } else if current.sa_sigaction != first {
                return false;
            }
            (*PREVIOUS.0.get()).write(current);
            let mut chained = current;
            chained.sa_sigaction = ours;
            chained.sa_flags = current.sa_flags | libc::SA_SIGINFO;
            libc::sigaction(libc::SIGINT, &chained, std::ptr::null_mut()) == 0
        }
    }

    extern "C" fn after_fork_in_child() {
        FORKED.store(true, Ordering::Relaxed);
    }

    /// Starts the watcher thread and its socket, once per process (a forked child starts its
    /// own).
    fn start_watcher() -> bool {
        static AT_FORK: Once = Once::new();
        AT_FORK.call_once(|| {
            // SAFETY: registers a child handler that only stores an atomic.
            unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        });
        if FORKED.swap(false, Ordering::Relaxed) {
            // The parent's watcher thread did not come along; its socket is of no use here.
            let old = WAKEUP.swap(-1, Ordering::Relaxed);
            if old >= 0 {
                // SAFETY: the fd is ours (the write end made below in the parent).
                unsafe { libc::close(old) };
            }
            lock(&ACTIVE).clear();
            GUARDING.store(0, Ordering::SeqCst);
        }
        if WAKEUP.load(Ordering::Relaxed) >= 0 {
            return true;
        }
        let Ok((wakeup, read)) = UnixStream::pair() else {
            return false;
        };
        // The handler must never block.
        if wakeup.set_nonblocking(true).is_err() {
            return false;
        }
        if std::thread::Builder::new()
            .name("quabla-sigint".into())
            .spawn(move || watch(read))
            .is_err()
        {
            return false;
        }
        WAKEUP.store(wakeup.into_raw_fd(), Ordering::Relaxed);
        true
    }

    /// Registers `token` as a guarded call's; returns its id for [`deactivate`].
    pub fn activate(token: &qb::CancelToken) -> u64 {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        lock(&ACTIVE).push((id, token.clone()));
        GUARDING.fetch_add(1, Ordering::SeqCst);
        id
    }

    pub fn deactivate(id: u64) {
        GUARDING.fetch_sub(1, Ordering::SeqCst);
        lock(&ACTIVE).retain(|(i, _)| *i != id);
    }

    /// Waits until the watcher has read every byte written to the socket so far (a marker
    /// round trip), so that a signal of a call that has ended cannot cancel the next one.
    /// Only after an interrupt, so the common path never waits.
    pub fn settle() {
        let fd: RawFd = WAKEUP.load(Ordering::Relaxed);
        if fd < 0 {
            return;
        }
        let (count, changed) = &SETTLED;
        let target = *lock(count) + 1;
        // SAFETY: writing one byte to our own open socket.
        if unsafe { libc::write(fd, (&MARKER as *const u8).cast(), 1) } != 1 {
            return;
        }
        let mut seen = lock(count);
        while *seen < target {
            let (next, timeout) = changed
                .wait_timeout(seen, Duration::from_secs(1))
                .unwrap_or_else(|e| e.into_inner());
            seen = next;
            if timeout.timed_out() {
                return;
            }
        }
    }

    /// The watcher thread: reads the signal numbers our handler writes.
    fn watch(mut read: UnixStream) {
        let mut buf = [0u8; 64];
        loop {
            let n = match read.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            for &byte in &buf[..n] {
                if byte == MARKER {
                    let (count, changed) = &SETTLED;
                    *lock(count) += 1;
                    changed.notify_all();
                } else if i32::from(byte) == libc::SIGINT {
                    for (_, token) in lock(&ACTIVE).iter() {
                        token.cancel();
                    }
                }
            }
        }
    }
}
