//! Shape and layout (api.md §6): reshape, transpose, broadcast, squeeze, expand_dims, concat
//! and stack.

use crate::dispatch::apply;
use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{normalize_axis, IrError, Shape};

super::tensor_methods! {
    /// The shape functions on `Result<Tensor>`.
    pub trait ShapeExt;
    /// New shape with the same number of elements; one extent may be `-1` (inferred).
    pub fn reshape(&self, shape: impl AsRef<[isize]>) -> Result<Tensor> {
        let dims = shape.as_ref().to_vec();
        apply(vec![self.into()], |b, x| b.reshape(x[0], &dims))
    }

    /// Reverses the axes.
    pub fn transpose(&self) -> Result<Tensor> {
        apply(vec![self.into()], |b, x| b.transpose(x[0], None))
    }

    /// Reverses the axes (`x.T`).
    pub fn t(&self) -> Result<Tensor> {
        self.transpose()
    }

    /// Permutes the axes: result axis `i` is axis `axes[i]` of `self`.
    pub fn permute(&self, axes: impl AsRef<[isize]>) -> Result<Tensor> {
        let axes = axes.as_ref().to_vec();
        apply(vec![self.into()], |b, x| b.transpose(x[0], Some(&axes)))
    }

    /// Broadcasts to `shape` by the trailing-axis rules; the result is materialized.
    pub fn broadcast_to(&self, shape: impl AsRef<[usize]>) -> Result<Tensor> {
        let shape = Shape::new(shape.as_ref().to_vec())?;
        apply(vec![self.into()], |b, x| b.broadcast_to(x[0], shape))
    }

    /// Removes every axis of extent 1.
    pub fn squeeze(&self) -> Result<Tensor> {
        let dims: Vec<isize> = self
            .shape()
            .iter()
            .filter(|&&d| d != 1)
            .map(|&d| d as isize)
            .collect();
        self.reshape(dims)
    }

    /// Removes the named axes, each of which must have extent 1 (SH3).
    pub fn squeeze_axes(&self, axes: impl AsRef<[isize]>) -> Result<Tensor> {
        let rank = self.ndim();
        let mut drop = Vec::new();
        for &a in axes.as_ref() {
            let axis = normalize_axis(a, rank)?;
            if self.shape()[axis] != 1 {
                return Err(Error::shape(
                    "squeeze",
                    format!("cannot squeeze axis {a}: its extent is not 1"),
                ));
            }
            if drop.contains(&axis) {
                return Err(Error::shape(
                    "squeeze",
                    format!("repeated axis in squeeze: {:?}", axes.as_ref()),
                ));
            }
            drop.push(axis);
        }
        let dims: Vec<isize> = (0..rank)
            .filter(|i| !drop.contains(i))
            .map(|i| self.shape()[i] as isize)
            .collect();
        self.reshape(dims)
    }

    /// Inserts extent-1 axes at the given positions of the result.
    pub fn expand_dims(&self, axes: impl AsRef<[isize]>) -> Result<Tensor> {
        let out_rank = self.ndim() + axes.as_ref().len();
        let mut positions = Vec::new();
        for &a in axes.as_ref() {
            let p = normalize_axis(a, out_rank)?;
            if positions.contains(&p) {
                return Err(Error::shape(
                    "expand_dims",
                    format!("repeated axis in expand_dims: {:?}", axes.as_ref()),
                ));
            }
            positions.push(p);
        }
        let mut src = self.shape().iter();
        let dims: Vec<isize> = (0..out_rank)
            .map(|i| {
                if positions.contains(&i) {
                    1
                } else {
                    *src.next().expect("rank arithmetic") as isize
                }
            })
            .collect();
        self.reshape(dims)
    }
}

/// Concatenates along an existing axis; other extents and dtypes must agree.
#[track_caller]
pub fn concat<T: Into<Operand> + Clone>(tensors: &[T], axis: isize) -> Result<Tensor> {
    if tensors.is_empty() {
        return Err(Error::invalid("concat needs at least one tensor"));
    }
    let operands: Vec<Operand> = tensors.iter().cloned().map(Into::into).collect();
    apply(operands, |b, x| b.concat(x, axis))
}

/// Joins equal-shaped tensors along a new axis.
#[track_caller]
pub fn stack<T: Into<Operand> + Clone>(tensors: &[T], axis: isize) -> Result<Tensor> {
    if tensors.is_empty() {
        return Err(Error::invalid("stack needs at least one tensor"));
    }
    let operands: Vec<Operand> = tensors.iter().cloned().map(Into::into).collect();
    apply(operands, |b, x| {
        let first = b.ty(x[0]).shape.clone();
        let axis = normalize_axis(axis, first.rank() + 1)?;
        let mut expanded = Vec::with_capacity(x.len());
        for &t in x {
            let s = b.ty(t).shape.clone();
            if s != first {
                return Err(IrError::Shape {
                    op: "stack".into(),
                    message: format!(
                        "stack: shapes differ along non-concatenated axes: {first} and {s}"
                    ),
                });
            }
            let mut dims = s.dims().to_vec();
            dims.insert(axis, 1);
            expanded.push(b.reshape_to(t, Shape::new(dims)?)?);
        }
        b.concat(&expanded, axis as isize)
    })
}
