//! Static shapes, axis normalization and NumPy broadcasting.
//!
//! Every extent is at least 1: zero-size arrays are rejected when a shape is built
//! (api.md §0.1, errors.md SH6).

use crate::error::{IrError, Result};
use std::fmt;

/// A static shape: the extents of each axis, outermost first. Rank 0 is `[]`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Shape(Vec<usize>);

impl Shape {
    /// Builds a shape, rejecting zero extents.
    pub fn new(dims: impl Into<Vec<usize>>) -> Result<Shape> {
        let dims = dims.into();
        if dims.contains(&0) {
            return Err(IrError::shape(
                "shape",
                format!(
                    "empty slices are not supported: shape {} has a zero extent",
                    Shape(dims)
                ),
            ));
        }
        Ok(Shape(dims))
    }

    /// The rank-0 shape.
    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }

    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// Number of elements (1 for rank 0).
    pub fn size(&self) -> usize {
        self.0.iter().product()
    }

    /// Row-major strides in elements.
    pub fn strides(&self) -> Vec<usize> {
        let mut strides = vec![1; self.0.len()];
        for i in (0..self.0.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * self.0[i + 1];
        }
        strides
    }

    /// Resolves a possibly negative axis against this shape's rank (SH1).
    pub fn axis(&self, axis: isize) -> Result<usize> {
        normalize_axis(axis, self.rank())
    }

    /// Resolves a list of axes, rejecting out-of-range and repeated axes (SH1, SH2).
    pub fn axes(&self, op: &str, axes: &[isize]) -> Result<Vec<usize>> {
        let mut out = Vec::with_capacity(axes.len());
        for &a in axes {
            let n = self.axis(a)?;
            if out.contains(&n) {
                return Err(IrError::shape(
                    op,
                    format!("repeated axis in {op}: {axes:?}"),
                ));
            }
            out.push(n);
        }
        Ok(out)
    }
}

/// Resolves a possibly negative axis for a tensor of rank `rank` (SH1).
pub fn normalize_axis(axis: isize, rank: usize) -> Result<usize> {
    let r = rank as isize;
    if axis < -r || axis >= r {
        return Err(IrError::axis_out_of_range(axis, rank));
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

/// The NumPy broadcast of two shapes (numerics.md §3), or SH4 naming both shapes.
pub fn broadcast_shapes(a: &Shape, b: &Shape) -> Result<Shape> {
    let rank = a.rank().max(b.rank());
    let mut dims = vec![0; rank];
    for (i, d) in dims.iter_mut().enumerate() {
        let da = dim_from_end(a, rank - 1 - i);
        let db = dim_from_end(b, rank - 1 - i);
        *d = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(IrError::shape(
                    "broadcast",
                    format!("operands could not be broadcast together with shapes {a} and {b}"),
                ))
            }
        };
    }
    Ok(Shape(dims))
}

/// Whether `from` broadcasts to exactly `to` under trailing-axis rules.
pub fn broadcasts_to(from: &Shape, to: &Shape) -> bool {
    from.rank() <= to.rank()
        && from
            .dims()
            .iter()
            .rev()
            .zip(to.dims().iter().rev())
            .all(|(&f, &t)| f == t || f == 1)
}

fn dim_from_end(s: &Shape, k: usize) -> usize {
    if k < s.rank() {
        s.0[s.rank() - 1 - k]
    } else {
        1
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "]")
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl TryFrom<&[usize]> for Shape {
    type Error = IrError;
    fn try_from(dims: &[usize]) -> Result<Shape> {
        Shape::new(dims.to_vec())
    }
}

impl<const N: usize> TryFrom<[usize; N]> for Shape {
    type Error = IrError;
    fn try_from(dims: [usize; N]) -> Result<Shape> {
        Shape::new(dims.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(d: &[usize]) -> Shape {
        Shape::new(d.to_vec()).unwrap()
    }

    #[test]
    fn zero_extent_is_rejected() {
        let err = Shape::new(vec![2, 0]).unwrap_err();
        assert!(err.to_string().contains("empty slices are not supported"));
    }

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast_shapes(&s(&[2, 1]), &s(&[3])).unwrap(), s(&[2, 3]));
        assert_eq!(broadcast_shapes(&s(&[]), &s(&[4])).unwrap(), s(&[4]));
        let err = broadcast_shapes(&s(&[2]), &s(&[3])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "operands could not be broadcast together with shapes [2] and [3]"
        );
    }

    #[test]
    fn axes() {
        assert_eq!(s(&[2, 3]).axis(-1).unwrap(), 1);
        assert_eq!(
            s(&[2, 3]).axis(2).unwrap_err().to_string(),
            "axis 2 is out of range for a tensor of rank 2"
        );
        assert!(s(&[2, 3])
            .axes("sum", &[0, -2])
            .unwrap_err()
            .to_string()
            .contains("repeated axis"));
        assert_eq!(s(&[2, 3, 4]).strides(), vec![12, 4, 1]);
    }
}
