//! The process-wide interrupt, alone in its own test process: it is observed by any check in
//! any thread, so it cannot share a process with tests that run work in parallel.

use quabla_backend::cancel::{self, CancelToken};
use quabla_backend::BackendError;

#[test]
fn an_interrupt_cancels_the_first_check_that_sees_it_and_is_cleared() {
    assert!(!cancel::interrupt_pending());
    assert_eq!(cancel::check(), Ok(()));

    cancel::interrupt();
    assert!(cancel::interrupt_pending());
    let w = cancel::watch();
    assert_eq!(w.check(), Err(BackendError::Cancelled));
    // Consumed: the next check (and the next run) goes on.
    assert!(!cancel::interrupt_pending());
    assert_eq!(w.check(), Ok(()));
    assert_eq!(cancel::check(), Ok(()));

    // Seen under a token too, and by a check on another thread.
    cancel::interrupt();
    let token = CancelToken::new();
    cancel::with_token(&token, || {
        assert_eq!(cancel::check(), Err(BackendError::Cancelled));
        assert_eq!(cancel::check(), Ok(()));
    });
    assert!(!token.is_cancelled());
    cancel::interrupt();
    let other = std::thread::spawn(cancel::check).join().unwrap();
    assert_eq!(other, Err(BackendError::Cancelled));
    assert_eq!(cancel::check(), Ok(()));

    // A pending interrupt can be dropped without cancelling anything.
    cancel::interrupt();
    assert!(cancel::clear_interrupt());
    assert!(!cancel::clear_interrupt());
    assert_eq!(cancel::check(), Ok(()));

    // The flags that cross the plugin boundary carry the interrupt: a check on the other side
    // consumes the host's flag.
    let abi = cancel::watch().to_abi();
    cancel::interrupt();
    cancel::with_abi(&abi, || {
        assert_eq!(cancel::check(), Err(BackendError::Cancelled))
    });
    assert!(!cancel::interrupt_pending());
}
