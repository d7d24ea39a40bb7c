//! The MLX backend (macOS, Apple silicon): lowering of plans to MLX through `mlx-rs`.
//!
//! `mlx-rs` builds only on Apple platforms, so elsewhere this crate is a stub: linking it
//! registers the `"mlx"` target, which reports itself unavailable with the reason, and the
//! Linux build never touches MLX. The MLX lowering itself is still to come, so for now the
//! target is unavailable on every platform.

use quabla_backend::{Backend, Unavailable};
use std::sync::Arc;

quabla_backend::register_backend!("mlx", open);

fn open() -> Result<Arc<dyn Backend>, Unavailable> {
    Err(reason())
}

/// Why MLX cannot run in this build.
pub fn reason() -> Unavailable {
    if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
        Unavailable::new("the MLX lowering is not part of this build yet")
    } else {
        Unavailable::new(format!(
            "MLX runs only on macOS with Apple silicon; this is {}-{}",
            std::env::consts::OS,
            std::env::consts::ARCH
        ))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_stub_says_why_mlx_is_unavailable() {
        let why = super::reason();
        assert_eq!(why.library, None);
        if !cfg!(target_os = "macos") {
            assert!(why.reason.starts_with("MLX runs only on macOS"), "{why}");
        }
        assert!(super::open().is_err());
    }
}
