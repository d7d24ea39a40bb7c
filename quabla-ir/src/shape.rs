//! Static shapes, axis normalization and NumPy broadcasting.
//!
//! Every shape is made by [`Shape::new`], the one checked path: every extent is at least 1
//! (zero-size arrays are rejected, api.md §0.1, errors.md SH6), and the element count and the
//! byte size of the shape at the largest item size (8 bytes) are computed with checked
//! arithmetic and must not exceed `isize::MAX`, the most any allocation can hold. So the
//! element count of a shape never wraps, nor does any product of some of its extents (each
//! extent is at least 1), nor its size in bytes at any dtype: kernels and allocators can
//! multiply extents freely. The count is computed once and cached.

use crate::dtype::DType;
use crate::error::{IrError, Result};
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

/// The largest item size of any dtype: shapes are checked at it, so a valid shape is valid for
/// every dtype (a cast never makes a shape too large).
const MAX_ITEMSIZE: usize = 8;

/// A static shape: the extents of each axis, outermost first. Rank 0 is `[]`.
///
/// Equality, ordering and hashing are those of the extents (the cached element count is a
/// function of them).
#[derive(Clone)]
pub struct Shape {
    dims: Vec<usize>,
    /// The product of `dims` (1 for rank 0), at most [`Shape::MAX_ELEMENTS`].
    size: usize,
}

impl Shape {
    /// The most elements a shape may have: at the largest item size (8 bytes), no more than
    /// `isize::MAX` bytes (2^60 - 1 on 64-bit platforms).
    pub const MAX_ELEMENTS: usize = isize::MAX as usize / MAX_ITEMSIZE;

    /// Builds a shape, rejecting zero extents (SH6) and shapes with more elements than this
    /// machine can address (more than [`Shape::MAX_ELEMENTS`]).
    pub fn new(dims: impl Into<Vec<usize>>) -> Result<Shape> {
        let dims = dims.into();
        if dims.contains(&0) {
            return Err(IrError::shape(
                "shape",
                format!(
                    "empty slices are not supported: shape {} has a zero extent",
                    DimsDisplay(&dims)
                ),
            ));
        }
        match element_count(&dims) {
            Some(size) => Ok(Shape { dims, size }),
            None => Err(too_large(&dims)),
        }
    }

    /// The rank-0 shape.
    pub fn scalar() -> Shape {
        Shape {
            dims: Vec::new(),
            size: 1,
        }
    }

    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Number of elements (1 for rank 0); at most [`Shape::MAX_ELEMENTS`].
    pub fn size(&self) -> usize {
        self.size
    }

    /// Bytes of a tensor of this shape and `dtype` (never more than `isize::MAX`).
    pub fn nbytes(&self, dtype: DType) -> usize {
        // Cannot overflow: `size <= isize::MAX / 8` and no item is larger than 8 bytes.
        self.size * dtype.itemsize()
    }

    /// Row-major strides in elements.
    pub fn strides(&self) -> Vec<usize> {
        let mut strides = vec![1; self.dims.len()];
        for i in (0..self.dims.len().saturating_sub(1)).rev() {
            // A partial product of the extents, so at most `size`.
            strides[i] = strides[i + 1] * self.dims[i + 1];
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

/// The element count of `dims` when it is at most [`Shape::MAX_ELEMENTS`].
fn element_count(dims: &[usize]) -> Option<usize> {
    let mut n: usize = 1;
    for &d in dims {
        n = n.checked_mul(d)?;
    }
    (n <= Shape::MAX_ELEMENTS).then_some(n)
}

/// The error for a shape with more elements than this machine can address, naming the
/// shape and its true element count (exact up to 2^128).
fn too_large(dims: &[usize]) -> IrError {
    let count = dims
        .iter()
        .try_fold(1u128, |n, &d| n.checked_mul(d as u128));
    let count = match count {
        Some(n) => n.to_string(),
        None => "more than 2^128".to_string(),
    };
    IrError::shape(
        "shape",
        format!(
            "shape {} has {count} elements, more than this machine can address",
            DimsDisplay(dims)
        ),
    )
}

impl Default for Shape {
    /// The rank-0 shape.
    fn default() -> Shape {
        Shape::scalar()
    }
}

impl PartialEq for Shape {
    fn eq(&self, other: &Shape) -> bool {
        // The cached sizes first, then the extents one by one: shapes are short, and slice
        // equality calls `memcmp`, which cost more than the comparison itself in the input
        // checks of a small plan's call (an eighth of an L-BFGS evaluation, most of them of
        // scalars, whose empty extents `memcmp` still took a slow path for).
        self.size == other.size
            && self.dims.len() == other.dims.len()
            && self.dims.iter().zip(&other.dims).all(|(a, b)| a == b)
    }
}

impl Eq for Shape {}

impl Hash for Shape {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.dims.hash(state);
    }
}

impl PartialOrd for Shape {
    fn partial_cmp(&self, other: &Shape) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Shape {
    fn cmp(&self, other: &Shape) -> Ordering {
        self.dims.cmp(&other.dims)
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
    Shape::new(dims)
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
        s.dims[s.rank() - 1 - k]
    } else {
        1
    }
}

/// Extents printed as a shape (`[2, 3]`), for shapes that could not be built.
struct DimsDisplay<'a>(&'a [usize]);

impl fmt::Display for DimsDisplay<'_> {
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

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&DimsDisplay(&self.dims), f)
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

    #[test]
    fn the_element_count_is_cached_and_checked() {
        assert_eq!(s(&[]).size(), 1);
        assert_eq!(Shape::default(), Shape::scalar());
        assert_eq!(Shape::default().size(), 1);
        assert_eq!(s(&[2, 3, 4]).size(), 24);
        assert_eq!(s(&[2, 3]).nbytes(DType::F32), 24);
        let largest = s(&[Shape::MAX_ELEMENTS]);
        assert_eq!(largest.size(), (1 << 60) - 1);
        assert_eq!(largest.nbytes(DType::F64), isize::MAX as usize - 7);
    }

    #[test]
    fn shapes_too_large_to_address_are_refused_with_their_true_count() {
        let err = Shape::new(vec![1 << 32, 1 << 32]).unwrap_err();
        assert!(matches!(err, IrError::Shape { .. }));
        assert_eq!(
            err.to_string(),
            "shape [4294967296, 4294967296] has 18446744073709551616 elements, more than \
             this machine can address"
        );
        // The count fits a usize but not at 8 bytes per element.
        assert_eq!(
            Shape::new(vec![1 << 60]).unwrap_err().to_string(),
            "shape [1152921504606846976] has 1152921504606846976 elements, more than this \
             machine can address"
        );
        assert!(Shape::new(vec![usize::MAX]).is_err());
        assert!(Shape::new(vec![usize::MAX; 3])
            .unwrap_err()
            .to_string()
            .contains("has more than 2^128 elements"));
        // A zero extent is still SH6, even next to huge extents.
        assert!(Shape::new(vec![usize::MAX, 0])
            .unwrap_err()
            .to_string()
            .contains("empty slices are not supported"));
    }

    #[test]
    fn broadcasting_cannot_make_a_shape_too_large() {
        let err = broadcast_shapes(&s(&[1 << 32, 1]), &s(&[1, 1 << 32])).unwrap_err();
        assert!(err
            .to_string()
            .contains("more than this machine can address"));
    }

    #[test]
    fn equality_and_hashing_follow_the_extents() {
        use std::collections::HashSet;
        let a = s(&[2, 3]);
        let b = Shape::try_from([2, 3]).unwrap();
        assert_eq!(a, b);
        assert!(s(&[2, 2]) < a && a < s(&[3]));
        let set: HashSet<Shape> = [a, b, s(&[6])].into_iter().collect();
        assert_eq!(set.len(), 2);
    }
}
