//! Symbolic forward (JVP) and reverse (transpose / VJP) rules for every op of the Quabla IR,
//! written as graph-to-graph rewrites, with symbolic zeros.
//!
//! Not yet built: this crate will own the derivative rules. It must never execute kernels.
