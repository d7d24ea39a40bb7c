//! The carry contract of the loops (`fori_loop`, `scan`, `scan_over`, `while_loop`): a pytree
//! whose leaves are floating or integer arrays (a random key tensor among float state, a step
//! counter), with the structure, shapes and dtypes the body must give back (SH13).
//!
//! A loop region carries one IR value per leaf; [`Carry`] flattens the user's carry into those
//! leaves, checks what the body returns against them, and rebuilds the user's type. It owns no
//! loop logic.

use super::strong;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::tree::{Leaf, Tree, TreeDef};
use quabla_ir::{DType, TensorType};

/// The flattened carry of one loop: its structure and the strong type of every leaf.
pub(super) struct Carry {
    def: TreeDef,
    types: Vec<TensorType>,
}

fn describe(t: &TensorType) -> String {
    format!("{}{:?}", t.dtype.name(), t.shape.dims())
}

impl Carry {
    /// The contract of `init` and its leaves. Every leaf must be a floating or integer array:
    /// a bool array, a number or a host `Key` is a type error naming the fix.
    pub fn of<C: Tree>(primitive: &str, init: &C) -> Result<(Carry, Vec<Tensor>)> {
        let (leaves, def) = crate::tree::flatten(init);
        def.check()?;
        let mut tensors = Vec::with_capacity(leaves.len());
        for leaf in leaves {
            tensors.push(carry_leaf(primitive, leaf)?);
        }
        if tensors.is_empty() {
            return Err(Error::Type {
                message: format!("{primitive}: the carry holds no arrays; carry at least one"),
            });
        }
        let types = tensors.iter().map(strong).collect();
        Ok((Carry { def, types }, tensors))
    }

    /// How many IR values the carry is.
    pub fn len(&self) -> usize {
        self.types.len()
    }

    /// The body parameters of the carry: `carry` for a single array (the IR text of one-array
    /// loops keeps its name), `carry0`, `carry1`, ... for several leaves.
    pub fn inputs(&self) -> Vec<(String, TensorType)> {
        if self.types.len() == 1 {
            return vec![("carry".to_string(), self.types[0].clone())];
        }
        self.types
            .iter()
            .enumerate()
            .map(|(k, t)| (format!("carry{k}"), t.clone()))
            .collect()
    }

    /// The float dtype of the loop: the dtype of the first floating leaf, float64 without one.
    /// The index parameter of a counted loop is a float of this dtype (see `LoopIndex`).
    pub fn float_dtype(&self) -> DType {
        self.types
            .iter()
            .map(|t| t.dtype)
            .find(|d| d.is_float())
            .unwrap_or(DType::F64)
    }

    /// The user's carry rebuilt from its leaves.
    pub fn rebuild<C: Tree>(&self, leaves: Vec<Tensor>) -> Result<C> {
        self.def
            .unflatten(leaves.into_iter().map(Leaf::Tensor).collect())
    }

    /// The leaves of the carry a body returned, conformed to the contract (SH13): the same
    /// structure, and per leaf the same shape and dtype; a weak floating result (born from
    /// Rust or Python numbers) adopts the leaf's dtype.
    pub fn conform<C: Tree>(&self, primitive: &str, out: &C) -> Result<Vec<Tensor>> {
        let (leaves, def) = crate::tree::flatten(out);
        def.check()?;
        if def != self.def {
            return Err(Error::shape(
                primitive,
                format!(
                    "{primitive}: body changed the carry's structure from {} to {def}",
                    self.def
                ),
            ));
        }
        leaves
            .into_iter()
            .zip(&self.types)
            .map(|(leaf, ty)| {
                let t = carry_leaf(primitive, leaf)?;
                conform_leaf(primitive, ty, t)
            })
            .collect()
    }
}

/// A leaf of a carry as an array, or the type error naming the fix.
fn carry_leaf(primitive: &str, leaf: Leaf) -> Result<Tensor> {
    let what = match leaf {
        Leaf::Tensor(t) if t.dtype().is_float() || t.dtype().is_integer() => return Ok(t),
        Leaf::Tensor(t) => {
            return Err(Error::Type {
                message: format!(
                    "{primitive}: carry arrays must be floating or integer, got {}; carry flags as int32 (astype(int32)) or as 0.0/1.0",
                    t.dtype().name()
                ),
            })
        }
        Leaf::Key(_) => {
            return Err(Error::Type {
                message: format!(
                    "{primitive}: a carry leaf is a host Key; carry its key tensor random::key_data(&key), which split, fold_in and the samplers take"
                ),
            })
        }
        Leaf::F64(v) => format!("the number {v}"),
        Leaf::Int(v) => format!("the integer {v}"),
        Leaf::Bool(v) => format!("the bool {v}"),
        Leaf::Abstract(_) => "a ShapeDtype".to_string(),
    };
    Err(Error::Type {
        message: format!(
            "{primitive}: carry leaves must be arrays, got {what}; make it an array with qb::array"
        ),
    })
}

/// SH13 for one leaf the body returned: same shape, same dtype (a weak result adopts the
/// leaf's dtype when both are floating or both integer).
fn conform_leaf(primitive: &str, carry: &TensorType, out: Tensor) -> Result<Tensor> {
    let ty = out.ir_type();
    if ty.shape == carry.shape && ty.dtype == carry.dtype {
        return Ok(out);
    }
    let same_kind = (ty.dtype.is_float() && carry.dtype.is_float())
        || (ty.dtype.is_integer() && carry.dtype.is_integer());
    if ty.shape == carry.shape && ty.weak && same_kind {
        return out.astype(carry.dtype);
    }
    Err(Error::shape(
        primitive,
        format!(
            "{primitive}: body changed the carry from {} to {}",
            describe(carry),
            describe(&TensorType::new(ty.dtype, ty.shape))
        ),
    ))
}
