//! The CUDA backend: NVRTC-generated fused kernels, cuBLAS and cuSOLVER through `cudarc` with
//! dynamic loading, so that it builds on machines without CUDA.
//!
//! Not yet built: no CUDA target is available in this build.
