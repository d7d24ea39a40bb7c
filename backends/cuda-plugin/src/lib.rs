//! The CUDA backend built as a loadable plugin (`libquabla_cuda_plugin.so`).
//!
//! It is the same [`quabla_cuda::CudaBackend`] a program can link, exported through the plugin
//! ABI of `quabla-backend`. Opening it finds the CUDA libraries (see `quabla_cuda::discovery`)
//! and initializes the driver; on a host without them the plugin still loads and is listed as
//! unavailable with the reason (`required library libcuda could not be loaded (no CUDA driver:
//! ...)`). Every call through the ABI catches panics, so none crosses the boundary.

use quabla_backend::Unavailable;
use quabla_cuda::CudaBackend;

quabla_backend::export_plugin! {
    name: "cuda",
    open: || -> Result<CudaBackend, Unavailable> { CudaBackend::open() },
}
