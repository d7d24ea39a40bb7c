//! Indexing by tensors, traced or not (api.md §23 as amended): NumPy advanced indexing
//! ([`Tensor::index_with`], Python `x[idx]`), [`take`], [`take_along_axis`],
//! [`dynamic_slice`], [`dynamic_update_slice`], and the positions behind the functional
//! updates of [`Tensor::at`] (`ops/at.rs`).
//!
//! Everything lowers to the two indexed IR ops, `index_gather` and `index_scatter`, plus integer
//! arithmetic on the indices. Index conventions (JAX's, documented in docs/indexing.md):
//!
//! - A negative index counts from the end once (`-1` is the last element).
//! - Reads clamp: an index still outside `[0, n)` reads the nearest end.
//! - Updates drop: an update whose index is outside `[0, n)` changes nothing.
//! - `dynamic_slice` and `dynamic_update_slice` clamp each start so the box fits.
//! - Repeated destinations of an update combine in row-major order of the selection (for
//!   `set`, the last one wins; for `add`, all accumulate).
//!
//! Boolean masks select a value-dependent number of elements, so they are eager only: under a
//! transform they raise the concretization error naming `where`.
//!
//! This module builds graphs through `dispatch::apply` only; it owns no state.

use super::index::IndexItem;
use crate::dispatch::apply;
use crate::error::{Error, Result, TracerErrorKind};
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{
    broadcast_shapes, normalize_axis, resolve_indices, BinaryOp, Comparison, DType, GraphBuilder,
    NodeId, ScatterMode, Shape,
};

type Built = quabla_ir::Result<NodeId>;

/// One item of an index that may hold tensors: a basic item (integer, slice, `NEW`,
/// `ELLIPSIS`) or an index array (integer: traced or not; bool: a mask, eager only).
#[derive(Clone, Debug)]
pub enum IndexEntry {
    Basic(IndexItem),
    Array(Tensor),
}

impl From<IndexItem> for IndexEntry {
    fn from(item: IndexItem) -> IndexEntry {
        IndexEntry::Basic(item)
    }
}

impl From<Tensor> for IndexEntry {
    fn from(t: Tensor) -> IndexEntry {
        IndexEntry::Array(t)
    }
}

impl From<&Tensor> for IndexEntry {
    fn from(t: &Tensor) -> IndexEntry {
        IndexEntry::Array(t.clone())
    }
}

/// Builds a mixed index: `qb::ix![&i, .., 0]` (tensors by reference, ranges, integers, `NEW`,
/// `ELLIPSIS`; a `;step` after a range as in [`crate::s!`]).
#[macro_export]
macro_rules! ix {
    ($($item:expr $(; $step:expr)?),* $(,)?) => {
        vec![$( $crate::ix!(@item $item $(; $step)?) ),*]
    };
    (@item $item:expr ; $step:expr) => {
        $crate::IndexEntry::Basic($crate::IndexItem::from($item).with_step($step as isize))
    };
    (@item $item:expr) => {
        $crate::IntoIndex::into_index($item)
    };
}

/// Conversion of one `ix!` item.
pub trait IntoIndex {
    fn into_index(self) -> IndexEntry;
}

impl IntoIndex for &Tensor {
    fn into_index(self) -> IndexEntry {
        IndexEntry::Array(self.clone())
    }
}

impl IntoIndex for Tensor {
    fn into_index(self) -> IndexEntry {
        IndexEntry::Array(self)
    }
}

impl<T: Into<IndexItem>> IntoIndex for T {
    fn into_index(self) -> IndexEntry {
        IndexEntry::Basic(self.into())
    }
}

/// What happens to an index outside its axis after the negative wrap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OutOfRange {
    /// Reads the nearest end.
    Clamp,
    /// Marks the position invalid (the selection reads 0 there; see [`update_positions`]).
    Drop,
}

/// The source of one advanced index: a tensor operand or a static integer (an `Int` item
/// among index arrays, which NumPy treats as a 0-d index array).
#[derive(Clone, Debug)]
enum Source {
    Tensor(usize),
    Static(usize),
}

/// An index split into the basic part (applied first, with every advanced item replaced by a
/// full slice) and the advanced part: `(axis of the basic result, source)` in order.
struct Split {
    basic: Vec<IndexItem>,
    advanced: Vec<(usize, Source)>,
    arrays: Vec<Tensor>,
}

const FULL: IndexItem = IndexItem::Slice {
    start: None,
    stop: None,
    step: 1,
};

/// The error of a boolean mask under a transform.
fn traced_mask() -> Error {
    Error::Tracer {
        kind: TracerErrorKind::Concretization,
        message: "boolean-mask indexing needs a concrete mask, but the mask is traced: its value is not known while tracing and the result's shape would depend on it; select elementwise with where(mask, x, fill) instead".into(),
    }
}

/// Replaces each boolean mask by the integer index arrays of its `true` positions (NumPy's
/// `mask.nonzero()`), one per mask axis.
fn expand_masks(items: &[IndexEntry]) -> Result<Vec<IndexEntry>> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match item {
            IndexEntry::Array(t) if t.dtype() == DType::Bool => {
                if t.is_traced() {
                    return Err(traced_mask());
                }
                let values: Vec<bool> = t.to_vec()?;
                let dims = t.shape().to_vec();
                let strides: Vec<usize> = (0..dims.len())
                    .map(|a| dims[a + 1..].iter().product())
                    .collect();
                let hits: Vec<usize> = (0..values.len()).filter(|&i| values[i]).collect();
                if hits.is_empty() {
                    return Err(Error::shape(
                        "index",
                        "empty slices are not supported: the boolean mask selects no elements",
                    ));
                }
                if dims.is_empty() {
                    // A 0-d true mask adds an axis of extent 1 (NumPy).
                    out.push(IndexEntry::Basic(IndexItem::NewAxis));
                    continue;
                }
                for (a, &stride) in strides.iter().enumerate() {
                    let coords: Vec<i64> = hits
                        .iter()
                        .map(|&h| ((h / stride) % dims[a]) as i64)
                        .collect();
                    out.push(IndexEntry::Array(crate::array(coords)?));
                }
            }
            other => out.push(other.clone()),
        }
    }
    Ok(out)
}

/// Splits `items` (masks already expanded) for a tensor of `shape`.
fn split(shape: &[usize], items: &[IndexEntry]) -> Result<Split> {
    let rank = shape.len();
    let has_arrays = items.iter().any(|i| matches!(i, IndexEntry::Array(_)));
    let ellipses = items
        .iter()
        .filter(|i| matches!(i, IndexEntry::Basic(IndexItem::Ellipsis)))
        .count();
    if ellipses > 1 {
        return Err(Error::Index {
            message: "an index can contain at most one Ellipsis".into(),
        });
    }
    let consuming = items
        .iter()
        .filter(|i| {
            matches!(
                i,
                IndexEntry::Array(_)
                    | IndexEntry::Basic(IndexItem::Int(_) | IndexItem::Slice { .. })
            )
        })
        .count();
    if consuming > rank {
        return Err(Error::Index {
            message: format!("too many indices: tensor of rank {rank} indexed with {consuming}"),
        });
    }
    let mut basic = Vec::new();
    let mut advanced = Vec::new();
    let mut arrays = Vec::new();
    let (mut axis, mut out_axis) = (0usize, 0usize);
    let mut seen_ellipsis = false;
    for item in items {
        match item {
            IndexEntry::Basic(IndexItem::Ellipsis) => {
                seen_ellipsis = true;
                let filled = rank - consuming;
                basic.extend(std::iter::repeat_n(FULL, filled));
                axis += filled;
                out_axis += filled;
            }
            IndexEntry::Basic(IndexItem::NewAxis) => {
                basic.push(IndexItem::NewAxis);
                out_axis += 1;
            }
            IndexEntry::Basic(IndexItem::Int(i)) if has_arrays => {
                let p = resolve_indices(&[*i], axis, shape[axis])?[0];
                basic.push(FULL);
                advanced.push((out_axis, Source::Static(p)));
                axis += 1;
                out_axis += 1;
            }
            IndexEntry::Basic(IndexItem::Int(i)) => {
                basic.push(IndexItem::Int(*i));
                axis += 1;
            }
            IndexEntry::Basic(slice) => {
                basic.push(slice.clone());
                axis += 1;
                out_axis += 1;
            }
            IndexEntry::Array(t) => {
                if !t.dtype().is_integer() {
                    return Err(Error::Type {
                        message: format!(
                            "index arrays must be integer or boolean tensors, got {}; convert with astype(int64)",
                            t.dtype().name()
                        ),
                    });
                }
                basic.push(FULL);
                advanced.push((out_axis, Source::Tensor(arrays.len())));
                arrays.push(t.clone());
                axis += 1;
                out_axis += 1;
            }
        }
    }
    if !seen_ellipsis {
        basic.extend(std::iter::repeat_n(FULL, rank - consuming));
    }
    Ok(Split {
        basic,
        advanced,
        arrays,
    })
}

/// `i64` literal.
fn int(b: &mut GraphBuilder, v: i64) -> NodeId {
    b.scalar(v as f64, DType::I64, false)
}

/// `where(p, a, c)`.
fn pick(b: &mut GraphBuilder, p: NodeId, a: NodeId, c: NodeId) -> Built {
    b.select(p, a, c)
}

/// Wraps a negative index once (`i + n`), as int64.
fn wrap(b: &mut GraphBuilder, i: NodeId, n: usize) -> Built {
    let i = b.astype(i, DType::I64)?;
    let zero = int(b, 0);
    let negative = b.compare(Comparison::Less, i, zero)?;
    let extent = int(b, n as i64);
    let shifted = b.add(i, extent)?;
    pick(b, negative, shifted, i)
}

/// Clamps an int64 index into `[lo, hi]`.
fn clamp(b: &mut GraphBuilder, i: NodeId, lo: i64, hi: i64) -> Built {
    let low = int(b, lo);
    let below = b.compare(Comparison::Less, i, low)?;
    let i = pick(b, below, low, i)?;
    let high = int(b, hi);
    let above = b.compare(Comparison::Greater, i, high)?;
    pick(b, above, high, i)
}

/// Whether an int64 index is inside `[0, n)`.
fn inside(b: &mut GraphBuilder, i: NodeId, n: usize) -> Built {
    let zero = int(b, 0);
    let low = b.compare(Comparison::GreaterEqual, i, zero)?;
    let extent = int(b, n as i64);
    let high = b.compare(Comparison::Less, i, extent)?;
    b.binary(BinaryOp::BitAnd, low, high)
}

/// The advanced step on `y` (the basic part already applied): NumPy's placement (the
/// broadcast index shape replaces the indexed axes when they are adjacent, else goes first).
/// `nodes[k]` is the node of `arrays[k]`.
fn advanced(
    b: &mut GraphBuilder,
    y: NodeId,
    adv: &[(usize, Source)],
    nodes: &[NodeId],
    mode: OutOfRange,
) -> Built {
    let dims = b.ty(y).shape.dims().to_vec();
    let mut idx: Vec<NodeId> = Vec::with_capacity(adv.len());
    for (_, src) in adv {
        idx.push(match src {
            Source::Tensor(k) => nodes[*k],
            Source::Static(p) => int(b, *p as i64),
        });
    }
    let mut common = Shape::scalar();
    for &i in &idx {
        common = broadcast_shapes(&common, &b.ty(i).shape)?;
    }
    let mut valid: Option<NodeId> = None;
    let mut lin: Option<NodeId> = None;
    for (k, (&i, (axis, _))) in idx.iter().zip(adv).enumerate() {
        let n = dims[*axis];
        let i = b.broadcast_to(i, common.clone())?;
        let w = wrap(b, i, n)?;
        let w = match mode {
            OutOfRange::Clamp => clamp(b, w, 0, n as i64 - 1)?,
            OutOfRange::Drop => {
                let ok = inside(b, w, n)?;
                valid = Some(match valid {
                    None => ok,
                    Some(v) => b.binary(BinaryOp::BitAnd, v, ok)?,
                });
                w
            }
        };
        // Row-major linear index over the indexed axes.
        let stride: usize = adv[k + 1..].iter().map(|(a, _)| dims[*a]).product();
        let term = if stride == 1 {
            w
        } else {
            let s = int(b, stride as i64);
            b.mul(w, s)?
        };
        lin = Some(match lin {
            None => term,
            Some(l) => b.add(l, term)?,
        });
    }
    let mut lin = lin.expect("at least one advanced index");
    if let Some(valid) = valid {
        let minus_one = int(b, -1);
        lin = pick(b, valid, lin, minus_one)?;
    }
    let axes: Vec<usize> = adv.iter().map(|(a, _)| *a).collect();
    let adjacent = axes.windows(2).all(|w| w[1] == w[0] + 1);
    let (data, at) = if adjacent {
        (y, axes[0])
    } else {
        let mut perm = axes.clone();
        perm.extend((0..dims.len()).filter(|a| !axes.contains(a)));
        let perm: Vec<isize> = perm.iter().map(|&p| p as isize).collect();
        (b.transpose(y, Some(&perm))?, 0)
    };
    let data = if axes.len() > 1 {
        let d = b.ty(data).shape.dims().to_vec();
        let merged: usize = d[at..at + axes.len()].iter().product();
        let mut m = d[..at].to_vec();
        m.push(merged);
        m.extend_from_slice(&d[at + axes.len()..]);
        b.reshape_to(data, Shape::new(m)?)?
    } else {
        data
    };
    b.index_gather(data, lin, at, 0)
}

/// Applies an index with tensors (masks expanded) to `x`.
pub(super) fn index_by(x: &Tensor, items: &[IndexEntry], mode: OutOfRange) -> Result<Tensor> {
    let items = expand_masks(items)?;
    let split = split(x.shape(), &items)?;
    let y = x.index(&split.basic)?;
    if split.advanced.is_empty() {
        return Ok(y);
    }
    let mut operands: Vec<Operand> = vec![y.into()];
    operands.extend(split.arrays.iter().map(|t| Operand::from(t.clone())));
    let adv = split.advanced;
    apply(operands, move |b, n| advanced(b, n[0], &adv, &n[1..], mode))
}

/// The flat positions (in `0..x.size`) an index selects in a tensor of `shape`, `-1` where an
/// index is out of range (updates there are dropped).
pub(super) fn update_positions(shape: &[usize], items: &[IndexEntry]) -> Result<Tensor> {
    let size: usize = shape.iter().product();
    let dims: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
    // Numbered from 1, so that a dropped position (which reads 0) becomes -1.
    let numbers = crate::arange_from(1i64, size as i64 + 1, 1)?.reshape(&dims)?;
    let picked = index_by(&numbers, items, OutOfRange::Drop)?;
    apply(vec![picked.into()], |b, p| {
        let one = int(b, 1);
        b.binary(BinaryOp::Sub, p[0], one)
    })
}

/// Combines `values` into `x` at flat `positions` (`-1`: dropped) by `mode`.
pub(super) fn scatter_positions(
    x: &Tensor,
    positions: &Tensor,
    values: Operand,
    mode: ScatterMode,
) -> Result<Tensor> {
    let shape = x.shape().to_vec();
    let size: usize = shape.iter().product();
    let name = format!("at[].{}", mode.name());
    apply(vec![x.into(), positions.into(), values], move |b, n| {
        let dtype = b.ty(n[0]).dtype;
        let picked = b.ty(n[1]).shape.clone();
        let v = b.astype(n[2], dtype)?;
        let vshape = b.ty(v).shape.clone();
        if !quabla_ir::broadcasts_to(&vshape, &picked) {
            return Err(quabla_ir::IrError::Shape {
                op: name.clone(),
                message: format!(
                    "{name}: values of shape {vshape} do not broadcast to the selected shape {picked}"
                ),
            });
        }
        let v = b.broadcast_to(v, picked)?;
        let flat = b.reshape_to(n[0], Shape::new(vec![size])?)?;
        let out = b.index_scatter(flat, n[1], v, (0, 0), mode)?;
        b.reshape_to(out, Shape::new(shape.clone())?)
    })
}

impl Tensor {
    /// NumPy indexing with index arrays (traced integer tensors included): `x.index_with(
    /// qb::ix![&i, ..])`. Integer arrays broadcast together; negative indices count from the end
    /// and out-of-range ones clamp (JAX's rule). Boolean masks are eager only.
    #[track_caller]
    pub fn index_with(&self, items: impl AsRef<[IndexEntry]>) -> Result<Tensor> {
        index_by(self, items.as_ref(), OutOfRange::Clamp)
    }

    /// [`take`] as a method.
    #[track_caller]
    pub fn take(&self, indices: &Tensor, axis: Option<isize>) -> Result<Tensor> {
        take(self, indices, axis)
    }
}

/// How [`take_with`] and [`take_along_axis_with`] treat an index outside the axis (after a
/// negative index counts from the end once).
#[derive(Clone, Debug, Default)]
pub enum TakeMode {
    /// JAX's default: the result there is the fill value, or, without one, NaN for floats,
    /// the minimum for signed integers and `true` for bools. The fill value is a rank-0
    /// tensor cast to `x`'s dtype (and differentiable: it receives the cotangent of the
    /// positions it fills).
    Fill(Option<Tensor>),
    /// The nearest end of the axis (the rule of `index_with`).
    #[default]
    Clip,
    /// The index modulo the axis extent.
    Wrap,
}

impl TakeMode {
    /// [`TakeMode::Fill`] without a fill value: JAX's default mode.
    pub fn fill() -> TakeMode {
        TakeMode::Fill(None)
    }
}

/// The fill value of `mode` for a result of `dtype`: the given one cast to it, or the default.
fn fill_value(fill: &Option<Tensor>, dtype: DType) -> Result<Tensor> {
    match fill {
        Some(v) if v.ndim() != 0 => Err(Error::shape(
            "take",
            format!(
                "take: fill_value must be a scalar, got an array of shape {:?}",
                v.shape()
            ),
        )),
        Some(v) => v.astype(dtype),
        None => match dtype {
            DType::F32 | DType::F64 => crate::array(f64::NAN)?.astype(dtype),
            DType::I32 => crate::array(i32::MIN),
            DType::I64 => crate::array(i64::MIN),
            DType::Bool => crate::array(true),
        },
    }
}

/// The indices counted from the end once when negative, and whether each is inside the axis
/// of `n` elements then; with the invalid ones replaced by 0 (so that they read in range).
fn fill_positions(indices: &Tensor, n: usize) -> Result<(Tensor, Tensor)> {
    let i = indices.astype(DType::I64)?;
    let wrapped = crate::where_(&i.less(0i64)?, (&i + n as i64)?, &i)?;
    let valid = wrapped
        .greater_equal(0i64)?
        .logical_and(wrapped.less(n as i64)?)?;
    let safe = crate::where_(&valid, &wrapped, 0i64)?;
    Ok((safe, valid))
}

fn check_take_indices(op: &str, indices: &Tensor) -> Result<()> {
    if !indices.dtype().is_integer() {
        return Err(Error::Type {
            message: format!(
                "{op} needs integer indices, got {}; convert with astype(int64){}",
                indices.dtype().name(),
                if indices.dtype() == DType::Bool {
                    " or index with the boolean mask"
                } else {
                    ""
                }
            ),
        });
    }
    Ok(())
}

/// `take(x, indices, axis)`: the entries at `indices` along `axis` (the flattened `x` for
/// `None`); the result replaces that axis with the shape of `indices`. An index outside the
/// axis (after a negative one counts from the end once) gives NaN, the integer minimum or
/// `true` (JAX's default `mode="fill"`); [`take_with`] chooses the mode.
#[track_caller]
pub fn take(x: &Tensor, indices: &Tensor, axis: Option<isize>) -> Result<Tensor> {
    take_with(x, indices, axis, TakeMode::fill())
}

/// [`take`] with the treatment of out-of-range indices chosen by `mode`.
#[track_caller]
pub fn take_with(
    x: &Tensor,
    indices: &Tensor,
    axis: Option<isize>,
    mode: TakeMode,
) -> Result<Tensor> {
    let (x, axis) = match axis {
        None => (x.reshape([-1])?, 0),
        Some(a) => (x.clone(), normalize_axis(a, x.ndim())?),
    };
    check_take_indices("take", indices)?;
    let n = x.shape()[axis];
    let gather = |indices: &Tensor| {
        let mut items: Vec<IndexEntry> = vec![IndexEntry::Basic(FULL); axis];
        items.push(IndexEntry::Array(indices.clone()));
        index_by(&x, &items, OutOfRange::Clamp)
    };
    match mode {
        TakeMode::Clip => gather(indices),
        TakeMode::Wrap => gather(&crate::remainder(indices, n as i64)?),
        TakeMode::Fill(fill) => {
            let (safe, valid) = fill_positions(indices, n)?;
            let picked = gather(&safe)?;
            // The mask of the index shape, placed where `take` put the index axes.
            let mut dims: Vec<isize> = vec![1; axis];
            dims.extend(indices.shape().iter().map(|&d| d as isize));
            dims.extend(std::iter::repeat_n(1, x.ndim() - axis - 1));
            let valid = valid.reshape(&dims)?;
            crate::where_(&valid, &picked, fill_value(&fill, x.dtype())?)
        }
    }
}

/// `take_along_axis(x, indices, axis)`: `out[..., j, ...] = x[..., indices[..., j, ...], ...]`
/// along `axis`; `indices` has the rank of `x` and the other axes broadcast. An index outside
/// the axis gives the fill value of [`take`] (JAX's default); [`take_along_axis_with`]
/// chooses the mode.
#[track_caller]
pub fn take_along_axis(x: &Tensor, indices: &Tensor, axis: isize) -> Result<Tensor> {
    take_along_axis_with(x, indices, axis, TakeMode::fill())
}

/// [`take_along_axis`] with the treatment of out-of-range indices chosen by `mode`.
#[track_caller]
pub fn take_along_axis_with(
    x: &Tensor,
    indices: &Tensor,
    axis: isize,
    mode: TakeMode,
) -> Result<Tensor> {
    if indices.ndim() == x.ndim() && indices.dtype().is_integer() {
        let a = normalize_axis(axis, x.ndim())?;
        let n = x.shape()[a];
        match mode {
            TakeMode::Clip => {}
            TakeMode::Wrap => {
                let wrapped = crate::remainder(indices, n as i64)?;
                return gather_along_axis(x, &wrapped, axis);
            }
            TakeMode::Fill(fill) => {
                let (safe, valid) = fill_positions(indices, n)?;
                let picked = gather_along_axis(x, &safe, axis)?;
                return crate::where_(&valid, &picked, fill_value(&fill, x.dtype())?);
            }
        }
    }
    gather_along_axis(x, indices, axis)
}

/// The gather of [`take_along_axis`], with indices that clamp.
fn gather_along_axis(x: &Tensor, indices: &Tensor, axis: isize) -> Result<Tensor> {
    let rank = x.ndim();
    if indices.ndim() != rank {
        return Err(Error::shape(
            "take_along_axis",
            format!(
                "take_along_axis: indices of rank {} for a tensor of rank {rank}; they must have the same rank",
                indices.ndim()
            ),
        ));
    }
    if !indices.dtype().is_integer() {
        return Err(Error::Type {
            message: format!(
                "take_along_axis needs integer indices, got {}",
                indices.dtype().name()
            ),
        });
    }
    let axis = normalize_axis(axis, rank)?;
    apply(vec![x.into(), indices.into()], move |b, n| {
        let last = rank - 1;
        let mut perm: Vec<isize> = (0..rank as isize).filter(|&a| a != axis as isize).collect();
        perm.push(axis as isize);
        let xt = b.transpose(n[0], Some(&perm))?;
        let it = b.transpose(n[1], Some(&perm))?;
        let (xd, id) = (
            b.ty(xt).shape.dims().to_vec(),
            b.ty(it).shape.dims().to_vec(),
        );
        let lead = broadcast_shapes(&Shape::new(xd[..last].to_vec())?, &Shape::new(id[..last].to_vec())?)
            .map_err(|_| quabla_ir::IrError::Shape {
                op: "take_along_axis".into(),
                message: format!(
                    "take_along_axis: indices of shape {:?} do not broadcast against a tensor of shape {:?} outside axis {axis}",
                    id, xd
                ),
            })?;
        let with = |last_extent: usize| {
            let mut d = lead.dims().to_vec();
            d.push(last_extent);
            Shape::new(d)
        };
        let xb = b.broadcast_to(xt, with(xd[last])?)?;
        let ib = b.broadcast_to(it, with(id[last])?)?;
        let w = wrap(b, ib, xd[last])?;
        let w = clamp(b, w, 0, xd[last] as i64 - 1)?;
        let picked = b.index_gather(xb, w, last, last)?;
        let mut inverse = vec![0isize; rank];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p as usize] = i as isize;
        }
        b.transpose(picked, Some(&inverse))
    })
}

/// The clamped start of each axis of a box of `sizes` in `dims` (JAX's rule: negative starts
/// wrap once, then each start clamps to `[0, n - size]`), as int64 nodes.
fn box_starts(
    b: &mut GraphBuilder,
    starts: &[NodeId],
    dims: &[usize],
    sizes: &[usize],
) -> quabla_ir::Result<Vec<NodeId>> {
    starts
        .iter()
        .zip(dims.iter().zip(sizes))
        .map(|(&s, (&n, &size))| {
            let w = wrap(b, s, n)?;
            clamp(b, w, 0, (n - size) as i64)
        })
        .collect()
}

/// Checks the arguments of the dynamic box functions.
fn check_box(op: &str, x: &Tensor, starts: &[Operand], sizes: &[usize]) -> Result<()> {
    let rank = x.ndim();
    if starts.len() != rank || sizes.len() != rank {
        return Err(Error::shape(
            op,
            format!(
                "{op}: {} start indices and {} sizes for a tensor of rank {rank}; give one per axis",
                starts.len(),
                sizes.len()
            ),
        ));
    }
    for (a, (&size, &n)) in sizes.iter().zip(x.shape()).enumerate() {
        if size == 0 || size > n {
            return Err(Error::shape(
                op,
                format!("{op}: size {size} of axis {a} must be in 1..={n}, the axis extent"),
            ));
        }
    }
    for s in starts {
        match s {
            Operand::Tensor(t) if !t.dtype().is_integer() || t.ndim() != 0 => {
                return Err(Error::Type {
                    message: format!(
                        "{op}: start indices must be integer scalars, got a {} tensor of shape {:?}",
                        t.dtype().name(),
                        t.shape()
                    ),
                })
            }
            Operand::Scalar(v) => {
                return Err(Error::Type {
                    message: format!("{op}: start indices must be integers, got {v}"),
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// `dynamic_slice(x, starts, sizes)`: the box of extents `sizes` starting at `starts` (one
/// integer scalar per axis, traced or not). Starts clamp so the box fits (JAX's rule).
#[track_caller]
pub fn dynamic_slice(x: &Tensor, starts: Vec<Operand>, sizes: &[usize]) -> Result<Tensor> {
    check_box("dynamic_slice", x, &starts, sizes)?;
    let dims = x.shape().to_vec();
    let sizes = sizes.to_vec();
    let mut operands: Vec<Operand> = vec![x.into()];
    operands.extend(starts);
    apply(operands, move |b, n| {
        let starts = box_starts(b, &n[1..], &dims, &sizes)?;
        let mut cur = n[0];
        for (axis, (&s, &size)) in starts.iter().zip(&sizes).enumerate() {
            if size == dims[axis] {
                continue; // the clamped start is 0
            }
            let offsets = b.constant(
                quabla_ir::HostData::from_i64(DType::I64, (0..size as i64).collect::<Vec<_>>()),
                Shape::new(vec![size])?,
                false,
            )?;
            let idx = b.add(offsets, s)?;
            cur = b.index_gather(cur, idx, axis, 0)?;
        }
        Ok(cur)
    })
}

/// `dynamic_update_slice(x, update, starts)`: `x` with the box at `starts` (clamped so that
/// `update` fits, JAX's rule) replaced by `update`.
#[track_caller]
pub fn dynamic_update_slice(x: &Tensor, update: &Tensor, starts: Vec<Operand>) -> Result<Tensor> {
    if update.ndim() != x.ndim() {
        return Err(Error::shape(
            "dynamic_update_slice",
            format!(
                "dynamic_update_slice: an update of rank {} for a tensor of rank {}; they must have the same rank",
                update.ndim(),
                x.ndim()
            ),
        ));
    }
    let sizes = update.shape().to_vec();
    check_box("dynamic_update_slice", x, &starts, &sizes)?;
    let size: usize = x.shape().iter().product();
    let dims: Vec<isize> = x.shape().iter().map(|&d| d as isize).collect();
    let numbers = crate::arange(size as i64)?.reshape(&dims)?;
    let positions = dynamic_slice(&numbers, starts, &sizes)?;
    scatter_positions(x, &positions, update.into(), ScatterMode::Set)
}
