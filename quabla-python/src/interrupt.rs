//! Ctrl-C while Python waits on the library: every call into the facade that can run long goes
//! through [`guarded`], so that SIGINT (a real signal or `_thread.interrupt_main()`) stops the
//! computation within the facade's next cancellation check and raises `KeyboardInterrupt`.
//!
//! # How
//!
//! Python's own C-level signal handler only sets a flag that the interpreter reads between
//! bytecodes, which never come while the main thread is inside a facade call. But the handler
//! also writes the signal number to the interpreter's *wakeup fd* (`signal.set_wakeup_fd`),
//! from whatever thread the signal lands on, GIL or not. So while a guarded call runs on the
//! main thread:
//!
//! 1. our socket is the wakeup fd (the previous one is put back afterwards, and every byte we
//!    receive meanwhile is forwarded to it, so an event loop that owns it, such as asyncio's,
//!    still sees its signals);
//! 2. a watcher thread, blocked reading the other end of the socket, cancels the
//!    [`qb::CancelToken`] the call runs under when a SIGINT byte arrives: executors check it
//!    between plan nodes and loop iterations, eager loops once per iteration;
//! 3. when the call returns, the main thread runs Python's signal handlers
//!    (`PyErr_CheckSignals`), so the handler's own exception (`KeyboardInterrupt` by default)
//!    is what the caller sees; a cancelled call whose handler raised nothing still raises
//!    `KeyboardInterrupt`.
//!
//! Only the main thread receives Python signals, so calls from other threads run unguarded.
//! The GIL may be released for the call ([`run`]) or held ([`run_holding_gil`], for calls whose
//! closures hold Python objects): the watcher needs neither the GIL nor the main thread.
//!
//! This module owns the wakeup fd while a guarded call runs and nothing else of the signal
//! machinery: it installs no signal handler and never calls user code.

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
    let Some(installed) = unix::install(py) else {
        // Not the main thread (or the wakeup fd is unavailable): nothing to watch for.
        return call(&token).or_raise();
    };
    let id = unix::activate(&token);
    let result = call(&token);
    unix::deactivate(id);
    let restored = unix::uninstall(py, installed);
    let interrupted = token.is_cancelled();
    let signalled = py.check_signals();
    if !interrupted {
        restored?;
        signalled?;
        return result.or_raise();
    }
    // Bytes of this signal still unread by the watcher must not cancel a later call.
    unix::settle();
    restored?;
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
    use pyo3::sync::PyOnceLock;
    use pyo3::types::PyDict;
    use quabla as qb;
    use std::io::{Read, Write};
    use std::os::fd::{AsRawFd, FromRawFd, RawFd};
    use std::os::unix::net::UnixStream;
    use std::sync::{Condvar, Mutex};
    use std::time::Duration;

    /// SIGINT's number, as the wakeup fd carries it (POSIX fixes it at 2).
    const SIGINT: u8 = 2;
    /// A byte no signal writes (signal numbers start at 1): the settle marker.
    const MARKER: u8 = 0;

    /// The socket whose one end is the wakeup fd during guarded calls and whose other end
    /// the watcher thread reads; one per process (a forked child starts its own).
    struct Watcher {
        pid: u32,
        wakeup: UnixStream,
    }

    static WATCHER: Mutex<Option<Watcher>> = Mutex::new(None);
    /// The tokens of the guarded calls running on the main thread (nested calls stack up).
    static ACTIVE: Mutex<Vec<(u64, qb::CancelToken)>> = Mutex::new(Vec::new());
    static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    /// The wakeup fd that was installed before the outermost guarded call, if any: bytes the
    /// watcher receives are forwarded to it while the call runs.
    static FORWARD: Mutex<Option<RawFd>> = Mutex::new(None);
    /// How many settle markers the watcher has read.
    static SETTLED: (Mutex<u64>, Condvar) = (Mutex::new(0), Condvar::new());

    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The Python callables used on every guarded call, looked up once.
    struct Hooks {
        set_wakeup_fd: Py<PyAny>,
        no_warning: Py<PyDict>,
        get_ident: Py<PyAny>,
        main_ident: u64,
    }

    fn python(py: Python<'_>) -> PyResult<&Hooks> {
        static CACHE: PyOnceLock<Hooks> = PyOnceLock::new();
        CACHE.get_or_try_init(py, || {
            let no_warning = PyDict::new(py);
            no_warning.set_item("warn_on_full_buffer", false)?;
            Ok(Hooks {
                set_wakeup_fd: py.import("signal")?.getattr("set_wakeup_fd")?.unbind(),
                no_warning: no_warning.unbind(),
                get_ident: py.import("_thread")?.getattr("get_ident")?.unbind(),
                main_ident: py
                    .import("threading")?
                    .call_method0("main_thread")?
                    .getattr("ident")?
                    .extract()?,
            })
        })
    }

    /// What [`install`] replaced: the previous wakeup fd, or `None` when a guarded call
    /// further out already installed ours.
    pub struct Installed(Option<RawFd>);

    /// Makes the watcher's socket the wakeup fd, when on the main thread.
    pub fn install(py: Python<'_>) -> Option<Installed> {
        let p = python(py).ok()?;
        let ident: u64 = p.get_ident.bind(py).call0().ok()?.extract().ok()?;
        if ident != p.main_ident {
            return None;
        }
        let ours = watcher_fd()?;
        let previous: RawFd = p
            .set_wakeup_fd
            .bind(py)
            .call((ours,), Some(p.no_warning.bind(py)))
            .ok()?
            .extract()
            .ok()?;
        if previous == ours {
            return Some(Installed(None));
        }
        *lock(&FORWARD) = (previous >= 0).then_some(previous);
        Some(Installed(Some(previous)))
    }

    /// Puts the previous wakeup fd back (outermost call only); no byte is forwarded to it
    /// once this returns, so its owner may close it.
    pub fn uninstall(py: Python<'_>, installed: Installed) -> PyResult<()> {
        let Installed(Some(previous)) = installed else {
            return Ok(());
        };
        let p = python(py)?;
        let restored = p
            .set_wakeup_fd
            .bind(py)
            .call((previous,), Some(p.no_warning.bind(py)))
            .map(|_| ());
        *lock(&FORWARD) = None;
        restored
    }

    /// Registers `token` as a guarded call's; returns its id for [`deactivate`].
    pub fn activate(token: &qb::CancelToken) -> u64 {
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&ACTIVE).push((id, token.clone()));
        id
    }

    pub fn deactivate(id: u64) {
        lock(&ACTIVE).retain(|(i, _)| *i != id);
    }

    /// Waits until the watcher has read every byte written to the socket so far (a marker
    /// round trip), so that a signal of a call that has ended cannot cancel the next one.
    /// Only after an interrupt, so the common path never waits.
    pub fn settle() {
        let Some(mut wakeup) = lock(&WATCHER)
            .as_ref()
            .and_then(|w| w.wakeup.try_clone().ok())
        else {
            return;
        };
        let (count, changed) = &SETTLED;
        let target = *lock(count) + 1;
        if wakeup.write_all(&[MARKER]).is_err() {
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

    /// The fd of this process's watcher socket, starting the watcher if needed.
    fn watcher_fd() -> Option<RawFd> {
        let mut watcher = lock(&WATCHER);
        let pid = std::process::id();
        if let Some(w) = watcher.as_ref().filter(|w| w.pid == pid) {
            return Some(w.wakeup.as_raw_fd());
        }
        let (wakeup, read) = UnixStream::pair().ok()?;
        // Python requires a non-blocking wakeup fd (its signal handler must never block).
        wakeup.set_nonblocking(true).ok()?;
        std::thread::Builder::new()
            .name("quabla-sigint".into())
            .spawn(move || watch(read))
            .ok()?;
        let fd = wakeup.as_raw_fd();
        *watcher = Some(Watcher { pid, wakeup });
        Some(fd)
    }

    /// The watcher thread: reads the signal numbers Python's handler writes.
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
                match byte {
                    MARKER => {
                        let (count, changed) = &SETTLED;
                        *lock(count) += 1;
                        changed.notify_all();
                    }
                    signal => {
                        if signal == SIGINT {
                            for (_, token) in lock(&ACTIVE).iter() {
                                token.cancel();
                            }
                        }
                        forward(signal);
                    }
                }
            }
        }
    }

    /// Passes a signal byte on to the wakeup fd our socket stands in for.
    fn forward(signal: u8) {
        let target = lock(&FORWARD);
        if let Some(fd) = *target {
            // SAFETY: `fd` is the wakeup fd that was installed before the guarded call now
            // running; its owner cannot close it while the call runs (the main thread is in
            // the call), and `uninstall` clears `FORWARD` under this lock before the call
            // returns, so the fd is open for this write. `ManuallyDrop` leaves it open.
            let mut file = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
            // A wakeup fd is non-blocking: a full buffer drops the byte, as Python does.
            let _ = file.write(&[signal]);
        }
    }
}
