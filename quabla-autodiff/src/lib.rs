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
//! - Ops without a rule yet (the linear-algebra primitives) return
//!   [`quabla_ir::IrError::Unsupported`] naming the op.

mod custom;
mod helpers;
mod jvp;
mod vjp;

pub use jvp::jvp_graph;
pub use vjp::{vjp_graph, Seed};
