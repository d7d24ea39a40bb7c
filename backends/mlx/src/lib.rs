//! The MLX backend (macOS): lowering of plans to MLX.
//!
//! Not yet built: no MLX target is available in this build.
