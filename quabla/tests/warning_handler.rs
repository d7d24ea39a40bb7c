//! A retrace-warning handler may call the very function that warned: the trace cache never
//! runs the handler (user code) with its lock held. In a binary of its own, since the handler
//! is process-wide.

use qb::warnings::{self, Action, Warning, WarningKind};
use qb::Tensor;
use quabla as qb;
use std::sync::{Arc, Mutex};

#[test]
fn a_warning_handler_may_call_the_function_that_warned() -> qb::Result<()> {
    use std::sync::OnceLock;
    type Double = fn(Tensor) -> qb::Result<Tensor>;
    static F: OnceLock<qb::Jit<Double, Tensor, Tensor>> = OnceLock::new();
    fn double(x: Tensor) -> qb::Result<Tensor> {
        x.mul(2.0)
    }
    let f = F.get_or_init(|| qb::jit(double as Double).max_traces(1));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    warnings::set_handler(move |_w: &Warning| {
        let value = F.get().unwrap().call(&qb::array(1.0).unwrap()).unwrap();
        record.lock().unwrap().push(value.item().unwrap());
    });
    warnings::set_action(WarningKind::Retrace, Action::Always);
    let done = std::sync::mpsc::channel::<qb::Result<()>>();
    let tx = done.0.clone();
    std::thread::spawn(move || {
        let run = || -> qb::Result<()> {
            for n in 1..5 {
                f.call(&qb::ones([n])?)?;
            }
            Ok(())
        };
        let _ = tx.send(run());
    });
    // A deadlock fails here instead of hanging the suite.
    done.1
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the warning handler deadlocked")?;
    let seen = seen.lock().unwrap();
    assert!(
        !seen.is_empty() && seen.iter().all(|&v| v == 2.0),
        "{seen:?}"
    );
    Ok(())
}
