//! Static indexing (api.md §7): NumPy basic indexing through [`crate::s!`], and `gather` /
//! `scatter_add` with static index lists.
//!
//! An index expression lowers to one contiguous `slice`, a `gather` per axis with a step other
//! than 1, and a final `reshape` that drops integer-indexed axes and inserts new ones.

use crate::dispatch::apply;
use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{resolve_indices, Shape};
use std::ops::{Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};

/// One item of an index expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexItem {
    /// A single position; negative counts from the end. Removes the axis.
    Int(isize),
    /// `start..stop` with a step (Python slice semantics, negative steps allowed).
    Slice {
        start: Option<isize>,
        stop: Option<isize>,
        step: isize,
    },
    /// Inserts an axis of extent 1 (`None` in Python).
    NewAxis,
    /// Stands for as many full slices as needed (`...`).
    Ellipsis,
}

/// `None` in an index: a new axis of extent 1.
pub const NEW: IndexItem = IndexItem::NewAxis;
/// `...` in an index.
pub const ELLIPSIS: IndexItem = IndexItem::Ellipsis;

impl IndexItem {
    /// Sets the step of a slice item (`s![0..4;2]`); an integer item becomes the slice
    /// starting there.
    #[track_caller]
    pub fn with_step(self, step: isize) -> IndexItem {
        match self {
            IndexItem::Slice { start, stop, .. } => IndexItem::Slice { start, stop, step },
            other => other,
        }
    }
}

/// An index as an `isize`; one beyond `isize::MAX` saturates, which is out of range for every
/// axis (IX1), instead of wrapping to a negative index that counts from the end.
#[track_caller]
fn saturating_index<T: TryInto<isize> + PartialOrd + Default>(i: T) -> isize {
    let negative = i < T::default();
    i.try_into()
        .unwrap_or(if negative { isize::MIN } else { isize::MAX })
}

macro_rules! int_items {
    ($($t:ty),*) => {$(
        impl From<$t> for IndexItem {
            #[track_caller]
            fn from(i: $t) -> IndexItem {
                IndexItem::Int(saturating_index(i))
            }
        }
        impl From<Range<$t>> for IndexItem {
            #[track_caller]
            fn from(r: Range<$t>) -> IndexItem {
                IndexItem::Slice { start: Some(saturating_index(r.start)), stop: Some(saturating_index(r.end)), step: 1 }
            }
        }
        impl From<RangeFrom<$t>> for IndexItem {
            #[track_caller]
            fn from(r: RangeFrom<$t>) -> IndexItem {
                IndexItem::Slice { start: Some(saturating_index(r.start)), stop: None, step: 1 }
            }
        }
        impl From<RangeTo<$t>> for IndexItem {
            #[track_caller]
            fn from(r: RangeTo<$t>) -> IndexItem {
                IndexItem::Slice { start: None, stop: Some(saturating_index(r.end)), step: 1 }
            }
        }
        impl From<RangeInclusive<$t>> for IndexItem {
            #[track_caller]
            fn from(r: RangeInclusive<$t>) -> IndexItem {
                let end = saturating_index(*r.end());
                IndexItem::Slice { start: Some(saturating_index(*r.start())), stop: if end == -1 { None } else { Some(end.saturating_add(1)) }, step: 1 }
            }
        }
        impl From<RangeToInclusive<$t>> for IndexItem {
            #[track_caller]
            fn from(r: RangeToInclusive<$t>) -> IndexItem {
                let end = saturating_index(r.end);
                IndexItem::Slice { start: None, stop: if end == -1 { None } else { Some(end.saturating_add(1)) }, step: 1 }
            }
        }
    )*};
}

int_items!(i32, i64, isize, usize);

impl From<RangeFull> for IndexItem {
    #[track_caller]
    fn from(_: RangeFull) -> IndexItem {
        IndexItem::Slice {
            start: None,
            stop: None,
            step: 1,
        }
    }
}

/// Builds an index expression: `s![1, .., -1]`, `s![0..4;2, NEW, ELLIPSIS]`, `s![..;-1]`.
/// Items are integers, ranges (optionally followed by `;step`), [`NEW`] and [`ELLIPSIS`].
#[macro_export]
macro_rules! s {
    ($($item:expr $(; $step:expr)?),* $(,)?) => {
        vec![$( $crate::s!(@item $item $(; $step)?) ),*]
    };
    (@item $item:expr ; $step:expr) => {
        $crate::IndexItem::from($item).with_step($step as isize)
    };
    (@item $item:expr) => {
        $crate::IndexItem::from($item)
    };
}

/// Python slice arithmetic: the selected positions of `start:stop:step` on an axis of `n`.
#[track_caller]
fn slice_positions(start: Option<isize>, stop: Option<isize>, step: isize, n: usize) -> Vec<usize> {
    let n = n as isize;
    let (lo, hi) = if step > 0 { (0, n) } else { (-1, n - 1) };
    let clamp = |v: isize| {
        let v = if v < 0 { v + n } else { v };
        v.clamp(lo, hi)
    };
    let start = start.map(clamp).unwrap_or(if step > 0 { 0 } else { n - 1 });
    let stop = stop.map(clamp).unwrap_or(if step > 0 { n } else { -1 });
    let mut out = Vec::new();
    let mut i = start;
    while (step > 0 && i < stop) || (step < 0 && i > stop) {
        out.push(i as usize);
        i += step;
    }
    out
}

#[track_caller]
fn describe(items: &[IndexItem]) -> String {
    let parts: Vec<String> = items
        .iter()
        .map(|i| match i {
            IndexItem::Int(v) => v.to_string(),
            IndexItem::NewAxis => "None".into(),
            IndexItem::Ellipsis => "...".into(),
            IndexItem::Slice { start, stop, step } => {
                let f = |v: &Option<isize>| v.map(|x| x.to_string()).unwrap_or_default();
                if *step == 1 {
                    format!("{}:{}", f(start), f(stop))
                } else {
                    format!("{}:{}:{step}", f(start), f(stop))
                }
            }
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

super::tensor_methods! {
    /// Indexing on `Result<Tensor>`.
    pub trait IndexExt;
    /// NumPy basic indexing: `x.index(qb::s![1, ..;-1, qb::NEW])`.
    pub fn index(&self, items: impl AsRef<[IndexItem]>) -> Result<Tensor> {
        let items = items.as_ref();
        let shape = self.shape().to_vec();
        let rank = shape.len();
        let ellipses = items.iter().filter(|i| **i == IndexItem::Ellipsis).count();
        if ellipses > 1 {
            return Err(Error::Index {
                message: "an index can contain at most one Ellipsis".into(),
            });
        }
        let consuming = items
            .iter()
            .filter(|i| matches!(i, IndexItem::Int(_) | IndexItem::Slice { .. }))
            .count();
        if consuming > rank {
            return Err(Error::Index {
                message: format!(
                    "too many indices: tensor of rank {rank} indexed with {consuming}"
                ),
            });
        }
        // Expand the ellipsis (or pad at the end) with full slices.
        let full = IndexItem::Slice {
            start: None,
            stop: None,
            step: 1,
        };
        let mut expanded: Vec<IndexItem> = Vec::new();
        for item in items {
            if *item == IndexItem::Ellipsis {
                expanded.extend(std::iter::repeat_n(full.clone(), rank - consuming));
            } else {
                expanded.push(item.clone());
            }
        }
        if ellipses == 0 {
            expanded.extend(std::iter::repeat_n(full, rank - consuming));
        }
        // The selected positions of each consumed axis (strided or reversed allowed).
        let mut sels: Vec<Vec<usize>> = Vec::with_capacity(rank);
        let mut out_dims: Vec<usize> = Vec::new();
        let mut axis = 0;
        for item in &expanded {
            match item {
                IndexItem::NewAxis => out_dims.push(1),
                IndexItem::Int(i) => {
                    let p = resolve_indices(&[*i], axis, shape[axis])?[0];
                    sels.push(vec![p]);
                    axis += 1;
                }
                IndexItem::Slice { start, stop, step } => {
                    if *step == 0 {
                        return Err(Error::invalid("step must not be zero"));
                    }
                    let positions = slice_positions(*start, *stop, *step, shape[axis]);
                    if positions.is_empty() {
                        return Err(Error::shape(
                            "index",
                            format!(
                                "empty slices are not supported: {} selects no elements",
                                describe(items)
                            ),
                        ));
                    }
                    out_dims.push(positions.len());
                    sels.push(positions);
                    axis += 1;
                }
                IndexItem::Ellipsis => unreachable!("expanded above"),
            }
        }
        apply(vec![self.into()], |b, x| {
            // One contiguous slice covering every selection, then gathers for strided axes.
            let mut starts = Vec::with_capacity(rank);
            let mut sizes = Vec::with_capacity(rank);
            for positions in &sels {
                let lo = *positions.iter().min().expect("non-empty");
                let hi = *positions.iter().max().expect("non-empty");
                starts.push(lo);
                sizes.push(hi - lo + 1);
            }
            let mut cur = b.slice(x[0], starts.clone(), sizes.clone())?;
            for (a, positions) in sels.iter().enumerate() {
                let contiguous = positions.windows(2).all(|w| w[1] == w[0] + 1);
                if !contiguous {
                    let rel: Vec<isize> = positions
                        .iter()
                        .map(|&p| (p - starts[a]) as isize)
                        .collect();
                    cur = b.gather(cur, &rel, a as isize)?;
                }
            }
            b.reshape_to(cur, Shape::new(out_dims.clone())?)
        })
    }

    /// Picks `indices` (static, non-empty; negative, repeated and unordered allowed) along
    /// `axis`.
    pub fn gather(&self, indices: impl AsRef<[isize]>, axis: isize) -> Result<Tensor> {
        let indices = indices.as_ref().to_vec();
        if indices.is_empty() {
            return Err(Error::shape(
                "gather",
                "empty slices are not supported: gather of [] selects no elements",
            ));
        }
        apply(vec![self.into()], |b, x| b.gather(x[0], &indices, axis))
    }

    /// Returns `self` plus `updates` added at `indices` along `axis`; repeated destinations
    /// accumulate in index order.
    pub fn scatter_add(
        &self,
        indices: impl AsRef<[isize]>,
        updates: impl Into<Operand>,
        axis: isize,
    ) -> Result<Tensor> {
        let indices = indices.as_ref().to_vec();
        if indices.is_empty() {
            return Err(Error::shape(
                "scatter_add",
                "empty slices are not supported: scatter_add of [] selects no elements",
            ));
        }
        apply(vec![self.into(), updates.into()], |b, x| {
            b.scatter_add(x[0], &indices, x[1], axis)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::slice_positions;

    #[test]
    fn python_slice_semantics() {
        assert_eq!(slice_positions(None, None, -1, 3), vec![2, 1, 0]);
        assert_eq!(slice_positions(Some(1), None, 1, 3), vec![1, 2]);
        assert_eq!(slice_positions(Some(-2), None, 1, 3), vec![1, 2]);
        assert_eq!(slice_positions(Some(1), Some(1), 1, 3), Vec::<usize>::new());
        assert_eq!(slice_positions(None, None, 2, 5), vec![0, 2, 4]);
        assert_eq!(slice_positions(Some(10), Some(-10), -3, 5), vec![4, 1]);
    }
}
