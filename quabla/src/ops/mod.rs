//! The array library, one module per op family. Every function builds its graph with the
//! checked builder of `quabla-ir` and runs it through [`crate::dispatch::apply`]; composite
//! functions (`maximum`, `abs`, `sigmoid`, `prod`, ...) are several IR nodes built in one go,
//! so they run as one plan.

pub mod compare;
pub mod elementwise;
pub mod index;
pub mod products;
pub mod reduce;
pub mod shape;

use quabla_ir::{GraphBuilder, HostData, NodeId, Shape};

/// A rank-0 bool constant.
pub(crate) fn bool_const(b: &mut GraphBuilder, value: bool) -> quabla_ir::Result<NodeId> {
    b.constant(HostData::Bool([value].into()), Shape::scalar(), false)
}
