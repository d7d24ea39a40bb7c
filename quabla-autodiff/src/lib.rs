//! Symbolic differentiation of Quabla IR graphs: forward mode ([`jvp_graph`]) and reverse mode
//! ([`vjp_graph`]) as graph-to-graph rewrites. Derivatives are ordinary graphs of the same
//! primitives, so they can be differentiated again to any order, batched, and compiled for any
//! backend. This crate never executes kernels.
//!
//! - Symbolic zeros: a tangent or cotangent that is zero by construction (from a comparison, a
//!   `stop_gradient`, an unused input) is `None` and never materialized inside the graph; only
//!   requested outputs are filled with zeros at the boundary.
//! - Every rule follows the conventions of `spec/numerics.md` §5, written so that their own
//!   derivatives stay finite where the spec says so (the masked, "double where" forms).
//! - `custom` nodes use their rule graphs (`custom.rs`): the `jvp` graph forward and its
//!   transpose in reverse, `fwd`/`bwd` in reverse only, and the primal graph for `checkpoint`.
//! - Dense Jacobians (`jacobian.rs`) batch a JVP or VJP with `quabla-vmap` over basis
//!   vectors generated inside the graph.
//! - [`check::check_grads`] checks derivatives against central differences, recursively to
//!   any order; every crate's derivative tests use it.
//! - The linear-algebra rules (`solve`, `triangular_solve`, `cholesky`, `cholesky_ad`, the
//!   `linalg` kinds) live in `quabla_linalg::rules` and are delegated to.

pub mod check;
mod custom;
mod helpers;
mod indexed;
mod jacobian;
mod jvp;
mod regions;
mod sweep;
mod vjp;

pub use jacobian::{has_custom_vjp, jacobian_graph, jacobian_graph_with_mode, JacobianMode};
pub use jvp::jvp_graph;
pub use regions::block_length;
pub use sweep::{LoopTape, Seed, VjpOptions};
pub use vjp::{vjp_graph, vjp_graph_with};
