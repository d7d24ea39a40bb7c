//! `TensorView` (api.md §2.4) and `x.slice(axis, start, length)`: zero-copy, read-only strided
//! views of a tensor's storage.
//!
//! A view of a concrete tensor shares the tensor's host storage and records an offset, a shape
//! and strides in elements (possibly negative); slicing a view composes the strides and copies
//! nothing. Reading it (`to_vec`, `to_tensor`, or using it as an operand, which gives a fresh
//! contiguous tensor) walks the strides in row-major order. Under a trace the same selection is
//! a traced value (a `gather` along the axis), so one signature serves both states.
//!
//! This module owns the view arithmetic and its checks; it must not write to shared storage.

use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{normalize_axis, HostData, Shape};

/// A read-only strided view of a tensor, from [`Tensor::slice`] or [`TensorView::slice`].
#[derive(Clone, Debug)]
pub struct TensorView {
    repr: Repr,
}

#[derive(Clone, Debug)]
enum Repr {
    /// A view of a concrete tensor's storage.
    Strided {
        base: Tensor,
        offset: usize,
        shape: Vec<usize>,
        strides: Vec<isize>,
    },
    /// The selection as a traced value (contiguous).
    Traced(Tensor),
}

fn row_major_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![1isize; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * shape[k + 1] as isize;
    }
    strides
}

impl TensorView {
    /// The whole of `x` as a view.
    fn of(x: &Tensor) -> TensorView {
        let repr = if x.is_traced() {
            Repr::Traced(x.clone())
        } else {
            Repr::Strided {
                base: x.clone(),
                offset: 0,
                shape: x.shape().to_vec(),
                strides: row_major_strides(x.shape()),
            }
        };
        TensorView { repr }
    }

    pub fn shape(&self) -> &[usize] {
        match &self.repr {
            Repr::Strided { shape, .. } => shape,
            Repr::Traced(t) => t.shape(),
        }
    }

    pub fn ndim(&self) -> usize {
        self.shape().len()
    }

    /// Strides in elements, possibly negative (row-major strides for a traced selection).
    pub fn strides(&self) -> Vec<isize> {
        match &self.repr {
            Repr::Strided { strides, .. } => strides.clone(),
            Repr::Traced(t) => row_major_strides(t.shape()),
        }
    }

    /// Offset of the first element in the shared storage, in elements (0 when traced).
    pub fn offset(&self) -> usize {
        match &self.repr {
            Repr::Strided { offset, .. } => *offset,
            Repr::Traced(_) => 0,
        }
    }

    pub fn dtype(&self) -> quabla_ir::DType {
        match &self.repr {
            Repr::Strided { base, .. } => base.dtype(),
            Repr::Traced(t) => t.dtype(),
        }
    }

    /// A further slice of this view; finish with [`Slice::eval`]. Nothing is copied.
    pub fn slice(&self, axis: isize, start: isize, length: usize) -> Slice {
        Slice {
            source: self.clone(),
            axis,
            start,
            length,
            step: 1,
        }
    }

    /// A contiguous copy (a traced selection is returned as it is).
    pub fn to_tensor(&self) -> Result<Tensor> {
        match &self.repr {
            Repr::Traced(t) => Ok(t.clone()),
            Repr::Strided {
                base,
                offset,
                shape,
                strides,
            } => {
                let host = base.host_for("to_tensor")?;
                let positions = || StridedPositions::new(*offset, shape, strides);
                let data = match &host.data {
                    HostData::F64(v) => HostData::F64(gather(v, positions(), shape)?),
                    HostData::F32(v) => HostData::F32(gather(v, positions(), shape)?),
                    HostData::Bool(v) => HostData::Bool(gather(v, positions(), shape)?),
                    HostData::I32(v) => HostData::I32(gather(v, positions(), shape)?),
                    HostData::I64(v) => HostData::I64(gather(v, positions(), shape)?),
                };
                Ok(Tensor::from_parts(
                    Shape::new(shape.clone())?,
                    data,
                    base.is_weak(),
                ))
            }
        }
    }

    /// Row-major values of the view converted to `T`.
    pub fn to_vec<T: crate::Element>(&self) -> Result<Vec<T>> {
        self.to_tensor()?.to_vec::<T>()
    }
}

/// The elements of `storage` at `positions`, in fresh shared storage of the view's size.
fn gather<T: Copy>(
    storage: &[T],
    positions: StridedPositions<'_>,
    shape: &[usize],
) -> Result<std::sync::Arc<[T]>> {
    let n: usize = shape.iter().product();
    quabla_ir::alloc::try_shared_from_iter(positions.map(|p| storage[p]), n)
        .map_err(|e| Error::OutOfMemory {
            bytes: e.bytes,
            what: format!("a contiguous copy of a view of shape {shape:?}"),
        })?
        .ok_or_else(|| Error::Internal {
            message: "a view yielded another number of elements than its shape holds".into(),
        })
}

/// The storage positions of a strided view in row-major order.
struct StridedPositions<'a> {
    shape: &'a [usize],
    strides: &'a [isize],
    index: Vec<usize>,
    position: isize,
    done: bool,
}

impl<'a> StridedPositions<'a> {
    fn new(offset: usize, shape: &'a [usize], strides: &'a [isize]) -> Self {
        StridedPositions {
            shape,
            strides,
            index: vec![0; shape.len()],
            position: offset as isize,
            done: shape.contains(&0),
        }
    }
}

impl Iterator for StridedPositions<'_> {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        if self.done {
            return None;
        }
        // Every position of a checked view lies inside the base storage.
        let current = self.position as usize;
        // Advance the multi-index like an odometer, last axis fastest.
        let mut k = self.shape.len();
        loop {
            if k == 0 {
                self.done = true;
                break;
            }
            k -= 1;
            self.index[k] += 1;
            self.position += self.strides[k];
            if self.index[k] < self.shape[k] {
                break;
            }
            self.position -= self.strides[k] * self.shape[k] as isize;
            self.index[k] = 0;
        }
        Some(current)
    }
}

/// A `slice(axis, start, length)` call: `.step(s)` (default 1, negative allowed, not 0), then
/// `.eval()`.
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Slice {
    source: TensorView,
    axis: isize,
    start: isize,
    length: usize,
    step: isize,
}

impl Slice {
    pub fn step(mut self, step: isize) -> Slice {
        self.step = step;
        self
    }

    /// The view (zero-copy eagerly; the selection as a traced value under a trace).
    pub fn eval(self) -> Result<TensorView> {
        let Slice {
            source,
            axis,
            start,
            length,
            step,
        } = self;
        let shape = source.shape().to_vec();
        let a = normalize_axis(axis, shape.len())?;
        let n = shape[a];
        if step == 0 {
            return Err(Error::invalid("slice: step must not be zero"));
        }
        if length == 0 {
            return Err(Error::shape(
                "slice",
                format!("empty slices are not supported: slice(axis={axis}, start={start}, length=0) selects no elements"),
            ));
        }
        let first = if start < 0 { start + n as isize } else { start };
        let last = (length as i128 - 1)
            .checked_mul(step as i128)
            .map(|d| first as i128 + d);
        for (what, i) in [
            ("start", Some(first as i128)),
            ("last selected index", last),
        ] {
            match i {
                Some(i) if (0..n as i128).contains(&i) => {}
                _ => {
                    let shown =
                        i.map_or_else(|| "beyond any extent".to_string(), |i| i.to_string());
                    return Err(Error::Index {
                        message: format!(
                            "index {shown} is out of range for axis {a} with extent {n} (slice {what})"
                        ),
                    });
                }
            }
        }
        let repr = match source.repr {
            Repr::Traced(t) => {
                let indices: Vec<isize> = (0..length as isize).map(|k| first + k * step).collect();
                Repr::Traced(t.gather(indices, a as isize)?)
            }
            Repr::Strided {
                base,
                offset,
                mut shape,
                mut strides,
            } => {
                let offset = (offset as isize + first * strides[a]) as usize;
                strides[a] *= step;
                shape[a] = length;
                Repr::Strided {
                    base,
                    offset,
                    shape,
                    strides,
                }
            }
        };
        Ok(TensorView { repr })
    }
}

impl Tensor {
    /// `length` elements `start, start + step, ...` along `axis` as a [`TensorView`]: a
    /// zero-copy view eagerly, the same selection as a traced value under a trace. `start` may
    /// be negative (from the end); every selected index must be in range (IX1); `length >= 1`.
    ///
    /// ```
    /// use quabla as qb;
    /// let x = qb::arange(10.0)?;
    /// let v = x.slice(0, 8, 4).step(-2).eval()?;
    /// assert_eq!(v.to_vec::<f64>()?, [8.0, 6.0, 4.0, 2.0]);
    /// assert_eq!((v.offset(), v.strides()), (8, vec![-2]));
    /// # Ok::<(), qb::Error>(())
    /// ```
    pub fn slice(&self, axis: isize, start: isize, length: usize) -> Slice {
        TensorView::of(self).slice(axis, start, length)
    }
}

impl From<&TensorView> for Operand {
    /// A view as an operand is its contiguous copy (arithmetic on a view gives a fresh tensor).
    fn from(v: &TensorView) -> Operand {
        Operand::from(v.to_tensor())
    }
}

impl From<TensorView> for Operand {
    fn from(v: TensorView) -> Operand {
        Operand::from(&v)
    }
}
