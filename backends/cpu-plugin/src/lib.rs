//! The CPU reference backend built as a loadable plugin (`libquabla_cpu_plugin.so` and its
//! macOS and Windows equivalents).
//!
//! It is the same [`quabla_cpu::CpuBackend`] that every program links in, exported through the
//! plugin ABI of `quabla-backend` ([`quabla_backend::abi`]). It exists so that the dynamic path
//! (loading, version and layout checks, the plan wire format, buffers crossing the boundary)
//! runs on every machine, and it is the plugin the conformance suite checks bit for bit against
//! the linked CPU backend.

use quabla_backend::Unavailable;
use quabla_cpu::CpuBackend;

quabla_backend::export_plugin! {
    name: "cpu",
    open: || -> Result<CpuBackend, Unavailable> { Ok(CpuBackend::default()) },
}
