//! Devices: the backends this build can run on, where each comes from (linked in, or the
//! plugin library it was loaded from) and why an unavailable one is unavailable. Run with
//! `cargo run --release --example devices`; plugins are looked for in the folders of
//! `QUABLA_PLUGIN_PATH` and beside the executable, and a file there that fails to load is
//! listed with its error.

use quabla as qb;
use std::io::Write;

fn main() -> qb::Result<()> {
    run(&mut std::io::stdout().lock())
}

/// Writes one line per backend to `out`.
pub fn run(out: &mut impl Write) -> qb::Result<()> {
    for device in qb::devices() {
        let _ = writeln!(out, "{device}");
    }
    Ok(())
}
