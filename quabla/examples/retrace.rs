//! Retracing: a jitted function called with 9 distinct shapes under the default
//! `max_traces=8` evicts its least recently used trace and raises `RetraceWarning`; with the
//! policy set to error, the call returns the warning as an `Err`.
//! Run with `cargo run --release --example retrace`.

use qb::warnings::{self, Action, WarningKind};
use qb::Tensor;
use quabla as qb;
use std::io::Write;

fn main() -> qb::Result<()> {
    run(&mut std::io::stdout().lock())
}

/// Writes the tour to `out` (the tests run it and check its lines).
pub fn run(out: &mut impl Write) -> qb::Result<()> {
    let collected = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = collected.clone();
    warnings::set_handler(move |w| {
        sink.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(w.to_string())
    });
    warnings::set_action(WarningKind::Retrace, Action::Always);

    let double = qb::jit(|x: Tensor| &x * 2.0).name("double");
    for n in 1..=9 {
        double.call(&qb::zeros([n])?)?;
    }
    for w in collected.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let _ = writeln!(out, "RetraceWarning: {w}");
    }

    warnings::set_action(WarningKind::Retrace, Action::Error);
    let result = double.call(&qb::zeros([10])?);
    let _ = writeln!(out, "error policy: {:?}", result.map_err(|e| e.to_string()));
    warnings::set_action(WarningKind::Retrace, Action::Always);
    Ok(())
}
