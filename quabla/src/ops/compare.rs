//! Comparisons, logic and selection (api.md §4). Comparisons follow IEEE (NaN compares false
//! except under `not_equal`) and yield bool; logic accepts bool operands only.

use crate::dispatch::apply;
use crate::error::Result;
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{Comparison, DType, GraphBuilder, IrError, NodeId};

macro_rules! comparisons {
    ($($(#[$doc:meta])* $name:ident => $c:ident;)*) => {
        super::tensor_methods! {
            #[doc = "The comparisons on `Result<Tensor>`."]
            pub trait CompareExt;
            $(
                $(#[$doc])*
                pub fn $name(&self, other: impl Into<Operand>) -> Result<Tensor> {
                    $name(self, other)
                }
            )*
        }
        $(
            $(#[$doc])*
            #[track_caller]
            pub fn $name(a: impl Into<Operand>, c: impl Into<Operand>) -> Result<Tensor> {
                apply(vec![a.into(), c.into()], |b, x| b.compare(Comparison::$c, x[0], x[1]))
            }
        )*
    };
}

comparisons! {
    /// `a > c`.
    greater => Greater;
    /// `a >= c`.
    greater_equal => GreaterEqual;
    /// `a < c`.
    less => Less;
    /// `a <= c`.
    less_equal => LessEqual;
    /// `a == c` (elementwise; `Tensor` itself has identity semantics).
    equal => Equal;
    /// `a != c`; true wherever either side is NaN.
    not_equal => NotEqual;
}

#[track_caller]
fn require_bool(b: &GraphBuilder, x: NodeId, op: &str) -> quabla_ir::Result<()> {
    if b.ty(x).dtype != DType::Bool {
        return Err(IrError::RequiresBool { op: op.into() });
    }
    Ok(())
}

/// `a & c` on bool tensors: `where(a, c, false)`.
#[track_caller]
pub(crate) fn build_and(b: &mut GraphBuilder, a: NodeId, c: NodeId) -> quabla_ir::Result<NodeId> {
    require_bool(b, a, "logical_and")?;
    require_bool(b, c, "logical_and")?;
    let f = super::bool_const(b, false)?;
    b.select(a, c, f)
}

/// `a | c` on bool tensors: `where(a, true, c)`.
#[track_caller]
pub(crate) fn build_or(b: &mut GraphBuilder, a: NodeId, c: NodeId) -> quabla_ir::Result<NodeId> {
    require_bool(b, a, "logical_or")?;
    require_bool(b, c, "logical_or")?;
    let t = super::bool_const(b, true)?;
    b.select(a, t, c)
}

/// `!a` on a bool tensor: `equal(a, false)`.
#[track_caller]
pub(crate) fn build_not(b: &mut GraphBuilder, a: NodeId) -> quabla_ir::Result<NodeId> {
    require_bool(b, a, "logical_not")?;
    let f = super::bool_const(b, false)?;
    b.compare(Comparison::Equal, a, f)
}

/// Elementwise logical and of bool tensors.
#[track_caller]
pub fn logical_and(a: impl Into<Operand>, c: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into(), c.into()], |b, x| build_and(b, x[0], x[1]))
}

/// Elementwise logical or of bool tensors.
#[track_caller]
pub fn logical_or(a: impl Into<Operand>, c: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into(), c.into()], |b, x| build_or(b, x[0], x[1]))
}

/// Elementwise negation of a bool tensor.
#[track_caller]
pub fn logical_not(a: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into()], |b, x| build_not(b, x[0]))
}

super::tensor_methods! {
    /// Logic on `Result<Tensor>`.
    pub trait LogicExt;
    /// Elementwise logical and.
    pub fn logical_and(&self, other: impl Into<Operand>) -> Result<Tensor> {
        logical_and(self, other)
    }

    /// Elementwise logical or.
    pub fn logical_or(&self, other: impl Into<Operand>) -> Result<Tensor> {
        logical_or(self, other)
    }

    /// Elementwise logical not.
    pub fn logical_not(&self) -> Result<Tensor> {
        logical_not(self)
    }
}

/// `where(mask, on_true, on_false)` with broadcasting of all three. A float mask counts its
/// nonzero entries, NaN included, as true. Both branches are evaluated; the unselected value
/// is dropped, never combined arithmetically.
#[track_caller]
pub fn where_(
    mask: impl Into<Operand>,
    on_true: impl Into<Operand>,
    on_false: impl Into<Operand>,
) -> Result<Tensor> {
    apply(
        vec![mask.into(), on_true.into(), on_false.into()],
        |b, x| {
            let mask = if b.ty(x[0]).dtype == DType::Bool {
                x[0]
            } else {
                b.astype(x[0], DType::Bool)?
            };
            b.select(mask, x[1], x[2])
        },
    )
}
