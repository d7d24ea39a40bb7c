//! Batching rules for every op and region of the Quabla IR.
//!
//! Not yet built: this crate will own `vmap`'s graph rewrite. It must never execute kernels.
