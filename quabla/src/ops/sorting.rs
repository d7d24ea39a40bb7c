//! Order and counting functions with integer results (numerics.md §12): `argmax`, `argmin`,
//! `sort`, `argsort`, `top_k`, `searchsorted`, `one_hot` and `bincount`.
//!
//! Every function here is a composite of comparisons, `where`, sums and the indexed ops
//! (`index_gather`, `index_scatter`), so it runs eagerly, under `jit` with the same bits,
//! batches under `vmap` and differentiates through the ordinary rules; no backend needs a
//! sorting kernel. The stable rank of each element is counted from an `n x n` comparison per
//! slice; `argsort` is the inverse of the ranks (one scatter), and `sort` and `top_k` gather
//! their values at those positions, so their derivative is gather's (the tangent permuted the
//! same way, the cotangent scattered back), to every order. The price is work and memory
//! quadratic in the length of the sorted axis (`top_k` with a small `k` makes `k` passes of
//! `n` comparisons instead), which suits the axes of a few thousand elements these functions
//! see in models (logits, rankings, small batches); a longer axis should be sorted eagerly
//! outside the differentiated function. Ranks and counts are float64 (exact for any axis
//! length), converted to int64 at the end, so that the quadratic work runs in the fused float
//! kernels rather than one integer node at a time.
//!
//! Order: NumPy's. Floats are ordered with NaN after `+inf` (all NaNs equal), `-0.0` equal to
//! `0.0`; ties keep their index order (every sort here is stable). Descending orders reverse
//! the comparison but keep ties in index order, so NaN comes first. Bools order as `0 < 1`.
//! Integer results are `int64`.
//!
//! This module must not read values on the host: every function is one graph, so the same
//! code serves eager tensors and tracers.

use super::compare::{build_and, build_not, build_or};
use crate::dispatch::{apply, apply_many};
use crate::error::Result;
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{BinaryOp, Comparison, DType, GraphBuilder, HostData, IrError, NodeId, Shape};

type Built = quabla_ir::Result<NodeId>;

// ---------------------------------------------------------------------------------------------
// Graph helpers

/// `0, 1, ..., n - 1` as int64, shaped `[n]` followed by `trailing` extents of 1 (so that it
/// broadcasts along one axis of a tensor whose later axes number `trailing`).
fn iota(b: &mut GraphBuilder, n: usize, trailing: usize) -> Built {
    let mut dims = vec![n];
    dims.extend(std::iter::repeat_n(1, trailing));
    let data = HostData::I64((0..n as i64).collect::<Vec<_>>().into());
    b.constant(data, Shape::new(dims)?, false)
}

/// `0.0, 1.0, ..., n - 1` as float64, shaped like [`iota`]: positions and ranks are counted in
/// float64 (exact far beyond any axis length), which keeps the quadratic work of the sorting
/// functions in the fused float kernels; integer nodes run one at a time.
fn position(b: &mut GraphBuilder, n: usize, trailing: usize) -> Built {
    let mut dims = vec![n];
    dims.extend(std::iter::repeat_n(1, trailing));
    let data = HostData::F64((0..n).map(|k| k as f64).collect::<Vec<_>>().into());
    b.constant(data, Shape::new(dims)?, false)
}

/// Whether each element is NaN (false for integers).
fn is_nan(b: &mut GraphBuilder, x: NodeId) -> Built {
    b.compare(Comparison::NotEqual, x, x)
}

/// `a < c` in NumPy's total order: NaN after everything else.
fn total_less(b: &mut GraphBuilder, a: NodeId, c: NodeId) -> Built {
    let less = b.compare(Comparison::Less, a, c)?;
    if !b.ty(a).dtype.is_float() && !b.ty(c).dtype.is_float() {
        return Ok(less);
    }
    let a_nan = is_nan(b, a)?;
    let c_nan = is_nan(b, c)?;
    let a_num = build_not(b, a_nan)?;
    let below_nan = build_and(b, c_nan, a_num)?;
    build_or(b, less, below_nan)
}

/// `a == c` in NumPy's total order: all NaNs are equal.
fn total_equal(b: &mut GraphBuilder, a: NodeId, c: NodeId) -> Built {
    let equal = b.compare(Comparison::Equal, a, c)?;
    if !b.ty(a).dtype.is_float() && !b.ty(c).dtype.is_float() {
        return Ok(equal);
    }
    let a_nan = is_nan(b, a)?;
    let c_nan = is_nan(b, c)?;
    let both = build_and(b, a_nan, c_nan)?;
    build_or(b, equal, both)
}

/// The comparison key of `x`: bools compare as int32 (`false < true`).
fn key(b: &mut GraphBuilder, x: NodeId) -> Built {
    if b.ty(x).dtype == DType::Bool {
        b.astype(x, DType::I32)
    } else {
        Ok(x)
    }
}

/// Counts the true entries of a bool tensor over `axis`, in float64 (see [`position`]).
fn count(b: &mut GraphBuilder, mask: NodeId, axis: isize) -> Built {
    let ones = b.astype(mask, DType::F64)?;
    b.sum(ones, Some(&[axis]), false)
}

/// `x` with `axis` moved last, and the permutation that moves it back.
fn axis_last(
    b: &mut GraphBuilder,
    x: NodeId,
    axis: usize,
) -> quabla_ir::Result<(NodeId, Vec<isize>)> {
    let rank = b.ty(x).shape.rank();
    if axis + 1 == rank {
        return Ok((x, Vec::new()));
    }
    let mut perm: Vec<isize> = (0..rank as isize).filter(|&a| a != axis as isize).collect();
    perm.push(axis as isize);
    let moved = b.transpose(x, Some(&perm))?;
    let mut back = vec![0isize; rank];
    for (i, &p) in perm.iter().enumerate() {
        back[p as usize] = i as isize;
    }
    Ok((moved, back))
}

/// Undoes [`axis_last`].
fn axis_back(b: &mut GraphBuilder, x: NodeId, back: &[isize]) -> Built {
    if back.is_empty() {
        Ok(x)
    } else {
        b.transpose(x, Some(back))
    }
}

/// `x` with an extent-1 axis inserted at `at` (counted from the end when negative).
fn expand(b: &mut GraphBuilder, x: NodeId, at: isize) -> Built {
    let mut dims: Vec<usize> = b.ty(x).shape.dims().to_vec();
    let at = if at < 0 {
        (dims.len() as isize + 1 + at) as usize
    } else {
        at as usize
    };
    dims.insert(at, 1);
    b.reshape_to(x, Shape::new(dims)?)
}

/// The rank of each element of the last axis of `key` in the stable order (ascending, or
/// descending with ties still in index order): float64 of `key`'s shape.
fn stable_ranks(b: &mut GraphBuilder, key: NodeId, descending: bool) -> Built {
    let n = *b.ty(key).shape.dims().last().expect("rank >= 1");
    // `[.., i, j]` compares element `j` (the other) with element `i` (the one ranked).
    let ranked = expand(b, key, -1)?;
    let other = expand(b, key, -2)?;
    let before = if descending {
        total_less(b, ranked, other)?
    } else {
        total_less(b, other, ranked)?
    };
    let equal = total_equal(b, other, ranked)?;
    let i = position(b, n, 1)?;
    let j = position(b, n, 0)?;
    let earlier = b.compare(Comparison::Less, j, i)?;
    let tie_before = build_and(b, equal, earlier)?;
    let precedes = build_or(b, before, tie_before)?;
    count(b, precedes, -1)
}

/// The int64 positions along the last axis (`n` of them, rows shaped like `like`) in the order
/// the mask gives (`[.., r, i]`: element `i` has rank `r`): the sum of the positions the mask
/// selects (one term per row).
fn positions_by_mask(b: &mut GraphBuilder, n: usize, like: NodeId, mask: NodeId) -> Built {
    let positions = position(b, n, 0)?;
    let rows = b.broadcast_to(positions, b.ty(like).shape.clone())?;
    let row = expand(b, rows, -2)?;
    let zero = b.scalar(0.0, DType::F64, false);
    let picked = b.select(mask, row, zero)?;
    let summed = b.sum(picked, Some(&[-1]), false)?;
    b.astype(summed, DType::I64)
}

/// The stable sorting permutation of the last axis from the float64 `ranks` of its elements:
/// `perm[.., r] = i` where element `i` has rank `r`, one scatter (the ranks are a permutation
/// of `0..n`, so every position is written once).
fn inverse_ranks(b: &mut GraphBuilder, ranks: NodeId) -> Built {
    let shape = b.ty(ranks).shape.clone();
    let rank = shape.rank();
    let n = *shape.dims().last().expect("rank >= 1");
    let at = b.astype(ranks, DType::I64)?;
    let positions = iota(b, n, 0)?;
    let positions = b.broadcast_to(positions, shape.clone())?;
    let zero = b.scalar(0.0, DType::I64, false);
    let base = b.broadcast_to(zero, shape)?;
    b.index_scatter(
        base,
        at,
        positions,
        (rank - 1, rank - 1),
        quabla_ir::ScatterMode::Set,
    )
}

/// The elements of the last axis of `x` at the int64 `positions` (`[.., k]`, in range) of the
/// same leading shape: a gather, so the derivative is the tangent gathered the same way.
fn gather_last(b: &mut GraphBuilder, x: NodeId, positions: NodeId) -> Built {
    let last = b.ty(x).shape.rank() - 1;
    b.index_gather(x, positions, last, last)
}

/// Refuses a rank-0 operand of an axis function.
fn need_axis(b: &GraphBuilder, x: NodeId, op: &str) -> quabla_ir::Result<()> {
    if b.ty(x).shape.rank() == 0 {
        return Err(IrError::Shape {
            op: op.into(),
            message: format!("{op} needs an array of rank >= 1, got a rank-0 tensor"),
        });
    }
    Ok(())
}

/// `x` flattened to rank 1 when `axis` is `None`, with the axis to work along.
fn along(
    b: &mut GraphBuilder,
    x: NodeId,
    axis: Option<isize>,
    op: &str,
) -> quabla_ir::Result<(NodeId, usize)> {
    match axis {
        None => {
            let n = b.ty(x).shape.size();
            Ok((b.reshape_to(x, Shape::new(vec![n])?)?, 0))
        }
        Some(a) => {
            need_axis(b, x, op)?;
            Ok((x, b.ty(x).shape.axis(a)?))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// argmax, argmin

/// An `argmax` or `argmin` call; finish with [`ArgExtremum::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct ArgExtremum {
    x: Operand,
    axis: Option<isize>,
    keepdims: bool,
    max: bool,
}

/// The index (int64) of the first maximum: `qb::argmax(&x).axis(1).eval()`. Without an axis
/// the input is flattened. A NaN counts as the maximum (the first NaN's index), as in NumPy.
#[track_caller]
pub fn argmax(x: impl Into<Operand>) -> ArgExtremum {
    ArgExtremum {
        x: x.into(),
        axis: None,
        keepdims: false,
        max: true,
    }
}

/// The index (int64) of the first minimum: `qb::argmin(&x).axis(1).eval()`. Without an axis
/// the input is flattened. A NaN counts as the minimum (the first NaN's index), as in NumPy.
#[track_caller]
pub fn argmin(x: impl Into<Operand>) -> ArgExtremum {
    ArgExtremum {
        max: false,
        ..argmax(x)
    }
}

impl ArgExtremum {
    /// The axis to search along (default: the flattened input).
    pub fn axis(mut self, axis: isize) -> ArgExtremum {
        self.axis = Some(axis);
        self
    }

    /// Keeps the searched axis with extent 1.
    pub fn keepdims(mut self, keepdims: bool) -> ArgExtremum {
        self.keepdims = keepdims;
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let ArgExtremum {
            x,
            axis,
            keepdims,
            max,
        } = self;
        let op = if max { "argmax" } else { "argmin" };
        apply(vec![x], |b, x| {
            let original_rank = b.ty(x[0]).shape.rank();
            let (x, axis) = along(b, x[0], axis, op)?;
            let x = key(b, x)?;
            let shape = b.ty(x).shape.clone();
            let n = shape.dims()[axis];
            let ax = [axis as isize];
            let extremum = if max {
                b.max(x, Some(&ax), true)?
            } else {
                b.min(x, Some(&ax), true)?
            };
            // A NaN anywhere makes the extremum NaN, which equals nothing: the NaNs are hit.
            let at_extremum = b.compare(Comparison::Equal, x, extremum)?;
            let nan = is_nan(b, x)?;
            let hit = build_or(b, at_extremum, nan)?;
            let index = position(b, n, shape.rank() - 1 - axis)?;
            let past = b.weak_scalar(n as f64);
            let candidates = b.select(hit, index, past)?;
            let nearest = b.min(candidates, Some(&ax), keepdims)?;
            let first = b.astype(nearest, DType::I64)?;
            if keepdims && b.ty(first).shape.rank() != original_rank {
                // Flattened input: keep one extent-1 axis per input axis, as NumPy does.
                return b.reshape_to(first, Shape::new(vec![1; original_rank])?);
            }
            Ok(first)
        })
    }
}

// ---------------------------------------------------------------------------------------------
// sort, argsort

/// A `sort` or `argsort` call; finish with [`Sort::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Sort {
    x: Operand,
    axis: Option<isize>,
    descending: bool,
    indices: bool,
}

/// The elements in ascending order along an axis (default the last):
/// `qb::sort(&x).axis(0).descending(true).eval()`. NaNs sort last (first when descending).
/// The derivative is the tangent permuted the same way. See the module docs for the cost.
#[track_caller]
pub fn sort(x: impl Into<Operand>) -> Sort {
    Sort {
        x: x.into(),
        axis: Some(-1),
        descending: false,
        indices: false,
    }
}

/// The stable sorting permutation (int64 indices) along an axis (default the last):
/// `x` gathered at `argsort(x)` is `sort(x)`; equal elements keep their index order, also when
/// descending.
#[track_caller]
pub fn argsort(x: impl Into<Operand>) -> Sort {
    Sort {
        indices: true,
        ..sort(x)
    }
}

impl Sort {
    /// The axis to sort along (default the last).
    pub fn axis(mut self, axis: isize) -> Sort {
        self.axis = Some(axis);
        self
    }

    /// Sorts the flattened input.
    pub fn flattened(mut self) -> Sort {
        self.axis = None;
        self
    }

    /// Largest first (ties still in index order).
    pub fn descending(mut self, descending: bool) -> Sort {
        self.descending = descending;
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let Sort {
            x,
            axis,
            descending,
            indices,
        } = self;
        let op = if indices { "argsort" } else { "sort" };
        apply(vec![x], |b, x| {
            let (x, axis) = along(b, x[0], axis, op)?;
            let (moved, back) = axis_last(b, x, axis)?;
            let k = key(b, moved)?;
            let ranks = stable_ranks(b, k, descending)?;
            let perm = inverse_ranks(b, ranks)?;
            let out = if indices {
                perm
            } else {
                gather_last(b, moved, perm)?
            };
            axis_back(b, out, &back)
        })
    }
}

/// The `k` largest elements along the last axis and their int64 indices, largest first; equal
/// elements in index order, NaN above `+inf` (JAX's `lax.top_k`). Differentiable in the
/// values like [`sort`]. `1 <= k <= n` (ValueError otherwise).
#[track_caller]
pub fn top_k(x: impl Into<Operand>, k: usize) -> Result<(Tensor, Tensor)> {
    let mut out = apply_many(vec![x.into()], |b, x| {
        need_axis(b, x[0], "top_k")?;
        let n = *b.ty(x[0]).shape.dims().last().expect("rank >= 1");
        if k == 0 || k > n {
            return Err(IrError::InvalidArgument {
                message: format!(
                    "top_k: k must be between 1 and the last axis's extent {n}, got {k}"
                ),
            });
        }
        let kx = key(b, x[0])?;
        let indices = if k <= SELECTED_TOP_K {
            let mask = top_by_selection(b, kx, k)?;
            positions_by_mask(b, n, x[0], mask)?
        } else {
            let ranks = stable_ranks(b, kx, true)?;
            let perm = inverse_ranks(b, ranks)?;
            let shape = b.ty(perm).shape.dims().to_vec();
            let mut sizes = shape.clone();
            *sizes.last_mut().expect("rank >= 1") = k;
            b.slice(perm, vec![0; shape.len()], sizes)?
        };
        let values = gather_last(b, x[0], indices)?;
        Ok(vec![values, indices])
    })?;
    let indices = out.pop().expect("two outputs");
    let values = out.pop().expect("two outputs");
    Ok((values, indices))
}

/// Up to this `k`, `top_k` finds its elements one at a time (`k` passes of `n` comparisons)
/// instead of ranking the whole axis (`n x n`); both give the same mask.
const SELECTED_TOP_K: usize = 16;

/// `[.., r, i]`: whether element `i` of the last axis is the `r`-th largest, `r < k`, found by
/// `k` argmax passes over the elements not yet taken (the first of equal maxima, NaN first).
fn top_by_selection(b: &mut GraphBuilder, key: NodeId, k: usize) -> Built {
    let ty = b.ty(key).clone();
    let n = *ty.shape.dims().last().expect("rank >= 1");
    let positions = position(b, n, 0)?;
    // The dtype's lowest value (-inf, or the integer minimum) stands in for taken elements.
    let lowest = b.scalar(f64::NEG_INFINITY, ty.dtype, false);
    let past = b.weak_scalar(n as f64);
    let nothing = super::bool_const(b, false)?;
    let mut taken = b.broadcast_to(nothing, ty.shape.clone())?;
    let nan = is_nan(b, key)?;
    let mut rows = Vec::with_capacity(k);
    for _ in 0..k {
        let available = b.select(taken, lowest, key)?;
        let largest = b.max(available, Some(&[-1]), true)?;
        let at_largest = b.compare(Comparison::Equal, key, largest)?;
        let candidate = build_or(b, at_largest, nan)?;
        let free = build_not(b, taken)?;
        let hit = build_and(b, candidate, free)?;
        let at = b.select(hit, positions, past)?;
        let first = b.min(at, Some(&[-1]), true)?;
        let chosen = b.compare(Comparison::Equal, positions, first)?;
        taken = build_or(b, taken, chosen)?;
        rows.push(expand(b, chosen, -2)?);
    }
    if rows.len() == 1 {
        return Ok(rows[0]);
    }
    b.concat(&rows, -2)
}

// ---------------------------------------------------------------------------------------------
// searchsorted

/// Which end of a run of equal elements [`searchsorted`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Side {
    /// The first position where the value could be inserted (`a[i-1] < v <= a[i]`).
    #[default]
    Left,
    /// The last position (`a[i-1] <= v < a[i]`).
    Right,
}

/// A `searchsorted` call; finish with [`SearchSorted::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct SearchSorted {
    sorted: Operand,
    values: Operand,
    side: Side,
}

/// Insertion indices (int64, the shape of `values`) that keep the rank-1 ascending `sorted`
/// sorted: `qb::searchsorted(&edges, &v).side(qb::Side::Right).eval()`. NaN sorts last, as in
/// [`sort`]. The result is counted, not searched: `n` comparisons per value.
#[track_caller]
pub fn searchsorted(sorted: impl Into<Operand>, values: impl Into<Operand>) -> SearchSorted {
    SearchSorted {
        sorted: sorted.into(),
        values: values.into(),
        side: Side::Left,
    }
}

impl SearchSorted {
    pub fn side(mut self, side: Side) -> SearchSorted {
        self.side = side;
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let side = self.side;
        apply(vec![self.sorted, self.values], |b, x| {
            let rank = b.ty(x[0]).shape.rank();
            if rank != 1 {
                return Err(IrError::Shape {
                    op: "searchsorted".into(),
                    message: format!("searchsorted needs a rank-1 sorted array, got rank {rank}"),
                });
            }
            let (a, v) = (key(b, x[0])?, key(b, x[1])?);
            let v = expand(b, v, -1)?;
            let before = match side {
                Side::Left => total_less(b, a, v)?,
                Side::Right => {
                    let after = total_less(b, v, a)?;
                    build_not(b, after)?
                }
            };
            let counted = count(b, before, -1)?;
            b.astype(counted, DType::I64)
        })
    }
}

// ---------------------------------------------------------------------------------------------
// one_hot, bincount

/// A `one_hot` call; finish with [`OneHot::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct OneHot {
    x: Operand,
    num_classes: usize,
    dtype: DType,
}

/// `x[..., None] == arange(num_classes)` as float64 (or [`OneHot::dtype`]): shape
/// `[*x.shape, num_classes]`. An index outside `0..num_classes` (negative included) gives a
/// row of zeros, as in JAX.
#[track_caller]
pub fn one_hot(x: impl Into<Operand>, num_classes: usize) -> OneHot {
    OneHot {
        x: x.into(),
        num_classes,
        dtype: DType::F64,
    }
}

impl OneHot {
    pub fn dtype(mut self, dtype: DType) -> OneHot {
        self.dtype = dtype;
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let OneHot {
            x,
            num_classes,
            dtype,
        } = self;
        apply(vec![x], |b, x| {
            if num_classes == 0 {
                return Err(IrError::InvalidArgument {
                    message: "one_hot: num_classes must be >= 1".into(),
                });
            }
            let x = key(b, x[0])?;
            let column = expand(b, x, -1)?;
            let classes = iota(b, num_classes, 0)?;
            let hit = b.compare(Comparison::Equal, column, classes)?;
            b.astype(hit, dtype)
        })
    }
}

/// A `bincount` call; finish with [`BinCount::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct BinCount {
    x: Operand,
    length: usize,
    weights: Option<Operand>,
}

/// Occurrences of each value `0..length` in the rank-1 integer `x` (int64), or the sums of
/// [`BinCount::weights`] per value: `qb::bincount(&labels, 10).eval()`. The length is static
/// (JAX's `length=`); negative values count as 0 and values `>= length` are dropped, as in
/// JAX.
#[track_caller]
pub fn bincount(x: impl Into<Operand>, length: usize) -> BinCount {
    BinCount {
        x: x.into(),
        length,
        weights: None,
    }
}

impl BinCount {
    /// Sums these (the shape of `x`) instead of counting.
    pub fn weights(mut self, weights: impl Into<Operand>) -> BinCount {
        self.weights = Some(weights.into());
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let BinCount { x, length, weights } = self;
        let weighted = weights.is_some();
        let mut operands = vec![x];
        operands.extend(weights);
        apply(operands, |b, x| {
            let ty = b.ty(x[0]).clone();
            if !ty.dtype.is_integer() {
                return Err(IrError::WrongDtypeKind {
                    op: "bincount".into(),
                    dtype: ty.dtype,
                    fix: "it counts integer values; convert with astype(quabla.int64)".into(),
                });
            }
            if ty.shape.rank() != 1 {
                return Err(IrError::Shape {
                    op: "bincount".into(),
                    message: format!("bincount needs a rank-1 array, got shape {}", ty.shape),
                });
            }
            if length == 0 {
                return Err(IrError::InvalidArgument {
                    message: "bincount: length must be >= 1".into(),
                });
            }
            let zero = b.weak_int(0);
            let negative = b.compare(Comparison::Less, x[0], zero)?;
            let clipped = b.select(negative, zero, x[0])?;
            let row = expand(b, clipped, 0)?;
            let bins = iota(b, length, 1)?;
            let hit = b.compare(Comparison::Equal, row, bins)?;
            if !weighted {
                let counted = count(b, hit, -1)?;
                return b.astype(counted, DType::I64);
            }
            let w = b.ty(x[1]).clone();
            if w.shape != ty.shape {
                return Err(IrError::Shape {
                    op: "bincount".into(),
                    message: format!(
                        "bincount weights must have the shape of x {}, got {}",
                        ty.shape, w.shape
                    ),
                });
            }
            let weights = expand(b, x[1], 0)?;
            let wzero = b.scalar(0.0, w.dtype, true);
            let picked = b.select(hit, weights, wzero)?;
            b.sum(picked, Some(&[-1]), false)
        })
    }
}

// ---------------------------------------------------------------------------------------------
// cumprod

/// A `cumprod` call; finish with [`Cumprod::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Cumprod {
    x: Operand,
    axis: Option<isize>,
    reverse: bool,
}

/// Inclusive running product: `qb::cumprod(&x).axis(0).eval()`; without an axis the input is
/// flattened. Integers multiply in their dtype and wrap (exact, whatever the order); floats
/// multiply in the fixed log-depth order of a prefix tree (step `d` multiplies each element by
/// the one `d` before it, `d = 1, 2, 4, ...`), float32 in float64 rounded once, like `prod`'s
/// tree (numerics.md §4.4). Differentiable, zeros included (no division).
#[track_caller]
pub fn cumprod(x: impl Into<Operand>) -> Cumprod {
    Cumprod {
        x: x.into(),
        axis: None,
        reverse: false,
    }
}

impl Cumprod {
    /// The axis to accumulate along (default: the flattened input).
    pub fn axis(mut self, axis: isize) -> Cumprod {
        self.axis = Some(axis);
        self
    }

    /// Accumulates from the last element.
    pub fn reverse(mut self, reverse: bool) -> Cumprod {
        self.reverse = reverse;
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let Cumprod { x, axis, reverse } = self;
        apply(vec![x], |b, x| {
            let dtype = b.ty(x[0]).dtype;
            if dtype == DType::Bool {
                return Err(IrError::BoolOperand {
                    op: "cumprod".into(),
                });
            }
            let (x, axis) = along(b, x[0], axis, "cumprod")?;
            let wide = if dtype == DType::F32 {
                b.astype(x, DType::F64)?
            } else {
                x
            };
            let out = prefix_products(b, wide, axis, reverse)?;
            if dtype == DType::F32 {
                b.astype(out, DType::F32)
            } else {
                Ok(out)
            }
        })
    }
}

/// The prefix-tree running product of `x` along `axis`.
fn prefix_products(b: &mut GraphBuilder, x: NodeId, axis: usize, reverse: bool) -> Built {
    let ty = b.ty(x).clone();
    let dims = ty.shape.dims().to_vec();
    let n = dims[axis];
    let mut acc = x;
    let mut d = 1;
    while d < n {
        // Shift by `d` along the axis, filling with ones.
        let mut fill_dims = dims.clone();
        fill_dims[axis] = d;
        let one = b.scalar(1.0, ty.dtype, false);
        let fill = b.broadcast_to(one, Shape::new(fill_dims)?)?;
        let mut sizes = dims.clone();
        sizes[axis] = n - d;
        let mut starts = vec![0; dims.len()];
        if reverse {
            starts[axis] = d;
        }
        let kept = b.slice(acc, starts, sizes)?;
        let parts = if reverse { [kept, fill] } else { [fill, kept] };
        let shifted = b.concat(&parts, axis as isize)?;
        acc = b.binary(BinaryOp::Mul, acc, shifted)?;
        d *= 2;
    }
    Ok(acc)
}
