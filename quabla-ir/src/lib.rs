//! The Quabla tensor IR: dtypes, static shapes, the closed set of primitive ops, immutable
//! graphs with a checked builder (shape and dtype inference, weak scalars, typed errors), the
//! plan compilation passes, frozen plans and the text format.
//!
//! Every transform of Quabla is a graph-to-graph rewrite on this IR. This crate depends on no
//! backend and on nothing of the facade.
//!
//! ```
//! use quabla_ir::{DType, GraphBuilder, Plan, Shape, TensorType, UnaryOp};
//!
//! let mut b = GraphBuilder::new();
//! let x = b.input("x", TensorType::new(DType::F32, Shape::new(vec![3]).unwrap()));
//! let half = b.weak_scalar(0.5);
//! let y = b.mul(half, x).unwrap(); // the weak scalar adopts float32
//! let y = b.unary(UnaryOp::Sin, y).unwrap();
//! let s = b.sum(y, None, false).unwrap();
//! let plan = Plan::compile(&b.finish(vec![s]).unwrap());
//! assert_eq!(
//!     plan.as_text(),
//!     "%0 = input[name=x] : tensor<3xf32>\n\
//!      %1 = constant(0.5) : tensor<f32>\n\
//!      %2 = mul(%1, %0) : tensor<3xf32>\n\
//!      %3 = sin(%2) : tensor<3xf32>\n\
//!      %4 = sum(%3) : tensor<f32>\n\
//!      outputs: [[]]\n"
//! );
//! ```

mod table;

pub mod alloc;
mod builder;
mod dtype;
mod error;
pub mod eval;
mod graph;
mod host;
pub mod indexed;
mod infer;
pub mod interp;
mod op;
pub mod passes;
mod plan;
pub mod recycle;
mod region;
mod shape;
pub mod text;
pub mod wire;

pub use builder::resolve_indices;
pub use dtype::DType;
pub use error::{IrError, Result};
pub use graph::{Graph, GraphBuilder, Node, NodeId, Origin, TensorType};
pub use host::HostData;
pub use infer::infer_type;
pub use op::{
    Arity, BinaryOp, Comparison, CustomCall, CustomRule, LinalgKind, Op, OpKind, ReduceKind,
    Reducer, ScatterMode, UnaryOp,
};
pub use plan::Plan;
pub use region::{region_groups, Region, RegionCall, RegionForm, RegionKind, ScanBody};
pub use shape::{broadcast_shapes, broadcasts_to, normalize_axis, Shape};
pub use wire::WireError;
