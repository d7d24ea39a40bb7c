//! The function transforms (transforms.md §5–§9, §14): one module per transform, each a thin
//! shell over [`crate::staging`].
//!
//! A shell owns its user-facing object and options and does three things: it says which
//! arguments it differentiates, it stages a call (traces the function on the prepared
//! arguments and asks a transform crate — `quabla-autodiff` for derivatives and Jacobians,
//! `quabla-vmap` for batching — for the rewritten graph), and it lays out the result tree.
//! Caching, signatures, inlining inside other traces and running belong to the staging layer;
//! graph rewrites belong to the transform crates and `quabla-ir`. No module here builds or
//! edits a graph by hand.
//!
//! `custom` is the exception that proves the rule: custom rules are not cached transforms but
//! staged calls that record `custom` nodes into the enclosing trace.

pub(crate) mod custom;
pub(crate) mod grad;
pub(crate) mod jacobian;
pub(crate) mod jit;
pub(crate) mod jvp;
mod stateless;
pub(crate) mod vjp;
pub(crate) mod vmap;
