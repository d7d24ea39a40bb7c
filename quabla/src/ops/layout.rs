//! Layout functions of api.md §6 built from `reshape`, `transpose`, `broadcast`, `slice`,
//! `concat`, `gather` and `where`: `split`, `meshgrid`, `flip`, `roll`, `pad`, `tile`,
//! `repeat`, `moveaxis`, `swapaxes`, `ravel`, `diag`, `diagonal`, `trace`, `tril`, `triu`.
//!
//! Every shift, width, count and axis is static. Reorderings (`flip`, `roll`, the non-constant
//! `pad` modes, per-entry `repeat`, `diagonal`) are one `gather` per axis, whose derivative is
//! `scatter_add`; repetitions are broadcasts, whose derivative sums.

use super::reduce::Axes;
use super::{bool_mask, dims, operand_tensor, scalar_like, slice_axis};
use crate::dispatch::apply;
use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{normalize_axis, GraphBuilder, IrError, NodeId, Shape};
use std::str::FromStr;

type Built = quabla_ir::Result<NodeId>;

/// A static integer or list of integers (shifts, counts, axes). Converts from `isize`, `i32`,
/// `usize`, arrays, slices and vectors of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ints(pub Vec<isize>);

macro_rules! ints_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Ints {
            #[track_caller]
            fn from(v: $t) -> Ints {
                Ints(vec![v as isize])
            }
        }
        impl<const N: usize> From<[$t; N]> for Ints {
            #[track_caller]
            fn from(v: [$t; N]) -> Ints {
                Ints(v.iter().map(|&x| x as isize).collect())
            }
        }
        impl From<&[$t]> for Ints {
            #[track_caller]
            fn from(v: &[$t]) -> Ints {
                Ints(v.iter().map(|&x| x as isize).collect())
            }
        }
        impl From<Vec<$t>> for Ints {
            #[track_caller]
            fn from(v: Vec<$t>) -> Ints {
                Ints(v.iter().map(|&x| x as isize).collect())
            }
        }
    )*};
}

ints_from!(isize, i32, usize);

#[track_caller]
fn shape_err(op: &str, message: impl Into<String>) -> IrError {
    IrError::Shape {
        op: op.into(),
        message: message.into(),
    }
}

#[track_caller]
fn invalid(message: impl Into<String>) -> IrError {
    IrError::InvalidArgument {
        message: message.into(),
    }
}

/// Gathers `indices` along `axis` unless they are the identity.
#[track_caller]
fn gather_positions(b: &mut GraphBuilder, x: NodeId, axis: usize, indices: &[usize]) -> Built {
    let n = dims(b, x)[axis];
    if indices.len() == n && indices.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(x);
    }
    let idx: Vec<isize> = indices.iter().map(|&i| i as isize).collect();
    b.gather(x, &idx, axis as isize)
}

#[track_caller]
fn ravel_node(b: &mut GraphBuilder, x: NodeId) -> Built {
    let n = b.ty(x).shape.size();
    b.reshape_to(x, Shape::new(vec![n])?)
}

// ---------------------------------------------------------------------------------------------
// split, meshgrid

impl Tensor {
    /// Splits into `sections` equal pieces along `axis` (the extent must be divisible).
    #[track_caller]
    pub fn split(&self, sections: usize, axis: isize) -> Result<Vec<Tensor>> {
        split(self, sections, axis)
    }

    /// Splits at the cut points `indices` along `axis` (negative counts from the end); a piece
    /// of length 0 is an error.
    #[track_caller]
    pub fn split_at(&self, indices: impl AsRef<[isize]>, axis: isize) -> Result<Vec<Tensor>> {
        split_at(self, indices, axis)
    }
}

#[track_caller]
fn pieces(x: &Tensor, axis: usize, bounds: &[(usize, usize)]) -> Result<Vec<Tensor>> {
    bounds
        .iter()
        .map(|&(lo, hi)| {
            apply(vec![x.into()], |b, t| {
                slice_axis(b, t[0], axis, lo, hi - lo)
            })
        })
        .collect()
}

/// `sections` equal pieces of `x` along `axis`.
#[track_caller]
pub fn split(x: &Tensor, sections: usize, axis: isize) -> Result<Vec<Tensor>> {
    let axis = normalize_axis(axis, x.ndim())?;
    let n = x.shape()[axis];
    if sections == 0 {
        return Err(Error::invalid("split sections must be >= 1, got 0"));
    }
    if !n.is_multiple_of(sections) {
        return Err(Error::shape(
            "split",
            format!(
                "split: shapes differ: axis {axis} of extent {n} does not divide into {sections} equal sections"
            ),
        ));
    }
    let len = n / sections;
    let bounds: Vec<(usize, usize)> = (0..sections).map(|i| (i * len, (i + 1) * len)).collect();
    pieces(x, axis, &bounds)
}

/// The pieces of `x` between the cut points `indices` along `axis`.
#[track_caller]
pub fn split_at(x: &Tensor, indices: impl AsRef<[isize]>, axis: isize) -> Result<Vec<Tensor>> {
    let axis = normalize_axis(axis, x.ndim())?;
    let n = x.shape()[axis] as isize;
    let cuts = indices.as_ref();
    let mut bounds = Vec::with_capacity(cuts.len() + 1);
    let mut lo = 0isize;
    for hi in cuts
        .iter()
        .map(|&c| if c < 0 { c + n } else { c }.clamp(0, n))
        .chain([n])
    {
        if hi <= lo {
            return Err(Error::shape(
                "split",
                format!(
                    "empty slices are not supported: split at {cuts:?} selects no elements for piece {}",
                    bounds.len()
                ),
            ));
        }
        bounds.push((lo as usize, hi as usize));
        lo = hi;
    }
    pieces(x, axis, &bounds)
}

/// The `indexing` of [`meshgrid`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Indexing {
    /// Cartesian: the first two output axes are swapped (the default).
    #[default]
    Xy,
    /// Matrix: output axes in input order.
    Ij,
}

impl FromStr for Indexing {
    type Err = Error;

    /// `"xy"` or `"ij"`; anything else is SH12.
    #[track_caller]
    fn from_str(s: &str) -> Result<Indexing> {
        match s {
            "xy" => Ok(Indexing::Xy),
            "ij" => Ok(Indexing::Ij),
            other => Err(Error::shape(
                "meshgrid",
                format!("meshgrid indexing must be \"xy\" or \"ij\", got '{other}'"),
            )),
        }
    }
}

/// A `meshgrid` call; finish with [`Meshgrid::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Meshgrid {
    xs: Vec<Operand>,
    indexing: Indexing,
}

/// Coordinate arrays from 1-D inputs (other inputs are flattened):
/// `qb::meshgrid(&[&x, &y]).indexing(Indexing::Ij).eval()`.
#[track_caller]
pub fn meshgrid<T: Into<Operand> + Clone>(xs: &[T]) -> Meshgrid {
    Meshgrid {
        xs: xs.iter().cloned().map(Into::into).collect(),
        indexing: Indexing::Xy,
    }
}

impl Meshgrid {
    /// `Indexing::Xy` (default) or `Indexing::Ij`.
    #[track_caller]
    pub fn indexing(mut self, indexing: Indexing) -> Meshgrid {
        self.indexing = indexing;
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Vec<Tensor>> {
        let xs: Vec<Tensor> = self
            .xs
            .into_iter()
            .map(operand_tensor)
            .collect::<Result<_>>()?;
        let k = xs.len();
        let sizes: Vec<usize> = xs.iter().map(Tensor::size).collect();
        // Output axis of each input.
        let position = |i: usize| match (self.indexing, i) {
            (Indexing::Xy, 0) if k >= 2 => 1,
            (Indexing::Xy, 1) => 0,
            _ => i,
        };
        let mut out_dims = vec![0; k];
        for (i, &n) in sizes.iter().enumerate() {
            out_dims[position(i)] = n;
        }
        xs.iter()
            .enumerate()
            .map(|(i, x)| {
                let mut d = vec![1; k];
                d[position(i)] = sizes[i];
                let full = out_dims.clone();
                apply(vec![x.into()], |b, t| {
                    let r = b.reshape_to(t[0], Shape::new(d)?)?;
                    b.broadcast_to(r, Shape::new(full)?)
                })
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// flip, roll

#[track_caller]
fn build_flip(b: &mut GraphBuilder, x: NodeId, axes: &Axes) -> Built {
    let shape = b.ty(x).shape.clone();
    let list: Vec<usize> = match axes {
        Axes::All => (0..shape.rank()).collect(),
        Axes::List(a) => shape.axes("flip", a)?,
    };
    let mut cur = x;
    for a in list {
        let n = shape.dims()[a];
        let rev: Vec<usize> = (0..n).rev().collect();
        cur = gather_positions(b, cur, a, &rev)?;
    }
    Ok(cur)
}

/// Reverses the order along `axes` (`Axes::All`: every axis).
#[track_caller]
pub fn flip(x: impl Into<Operand>, axes: impl Into<Axes>) -> Result<Tensor> {
    let axes = axes.into();
    apply(vec![x.into()], |b, x| build_flip(b, x[0], &axes))
}

#[track_caller]
fn roll_axis(b: &mut GraphBuilder, x: NodeId, axis: usize, shift: isize) -> Built {
    let n = dims(b, x)[axis] as isize;
    let k = shift.rem_euclid(n);
    let idx: Vec<usize> = (0..n).map(|i| (i - k).rem_euclid(n) as usize).collect();
    gather_positions(b, x, axis, &idx)
}

/// A `roll` call; finish with [`Roll::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Roll {
    x: Operand,
    shift: Vec<isize>,
    axis: Option<Vec<isize>>,
}

/// Cyclic shift: `qb::roll(&x, 2).axis(0).eval()`; without an axis the flattened array is
/// rolled and the shape restored; `shift` and `axis` may be matching lists.
#[track_caller]
pub fn roll(x: impl Into<Operand>, shift: impl Into<Ints>) -> Roll {
    Roll {
        x: x.into(),
        shift: shift.into().0,
        axis: None,
    }
}

impl Roll {
    /// The axis or axes to roll along.
    #[track_caller]
    pub fn axis(mut self, axis: impl Into<Ints>) -> Roll {
        self.axis = Some(axis.into().0);
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let Roll { x, shift, axis } = self;
        apply(vec![x], |b, x| match &axis {
            None => {
                let shape = b.ty(x[0]).shape.clone();
                let flat = ravel_node(b, x[0])?;
                let rolled = roll_axis(b, flat, 0, shift.iter().sum())?;
                b.reshape_to(rolled, shape)
            }
            Some(axes) => {
                let pairs: Vec<(isize, isize)> = match (shift.len(), axes.len()) {
                    (s, a) if s == a => shift.iter().copied().zip(axes.iter().copied()).collect(),
                    (1, _) => axes.iter().map(|&a| (shift[0], a)).collect(),
                    (_, 1) => shift.iter().map(|&s| (s, axes[0])).collect(),
                    (s, a) => {
                        return Err(invalid(format!(
                            "roll: shift and axis must have matching lengths, got {s} and {a}"
                        )))
                    }
                };
                let rank = b.ty(x[0]).shape.rank();
                let mut cur = x[0];
                for (s, a) in pairs {
                    let a = normalize_axis(a, rank)?;
                    cur = roll_axis(b, cur, a, s)?;
                }
                Ok(cur)
            }
        })
    }
}

// ---------------------------------------------------------------------------------------------
// pad

/// The mode of [`pad`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PadMode {
    /// A constant (`constant_values`, default 0).
    #[default]
    Constant,
    /// The edge value repeated.
    Edge,
    /// Mirrored without repeating the edge (`[1, 2, 3]` padded by 2: `3 2 | 1 2 3 | 2 1`).
    Reflect,
    /// Mirrored with the edge repeated (`2 1 | 1 2 3 | 3 2`).
    Symmetric,
    /// Periodic continuation.
    Wrap,
}

impl FromStr for PadMode {
    type Err = Error;

    /// One of `"constant"`, `"edge"`, `"reflect"`, `"symmetric"`, `"wrap"` (else AR13).
    #[track_caller]
    fn from_str(s: &str) -> Result<PadMode> {
        match s {
            "constant" => Ok(PadMode::Constant),
            "edge" => Ok(PadMode::Edge),
            "reflect" => Ok(PadMode::Reflect),
            "symmetric" => Ok(PadMode::Symmetric),
            "wrap" => Ok(PadMode::Wrap),
            other => Err(Error::invalid(format!(
                "pad mode must be one of \"constant\", \"edge\", \"reflect\", \"symmetric\", \"wrap\", got '{other}'"
            ))),
        }
    }
}

/// The `pad_width` of [`pad`]: one width for every side, one `(before, after)` pair for every
/// axis, or one pair per axis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PadWidth(Vec<(usize, usize)>);

impl From<usize> for PadWidth {
    #[track_caller]
    fn from(p: usize) -> PadWidth {
        PadWidth(vec![(p, p)])
    }
}

impl From<(usize, usize)> for PadWidth {
    #[track_caller]
    fn from(p: (usize, usize)) -> PadWidth {
        PadWidth(vec![p])
    }
}

impl From<&[(usize, usize)]> for PadWidth {
    #[track_caller]
    fn from(p: &[(usize, usize)]) -> PadWidth {
        PadWidth(p.to_vec())
    }
}

impl<const N: usize> From<&[(usize, usize); N]> for PadWidth {
    #[track_caller]
    fn from(p: &[(usize, usize); N]) -> PadWidth {
        PadWidth(p.to_vec())
    }
}

impl From<Vec<(usize, usize)>> for PadWidth {
    #[track_caller]
    fn from(p: Vec<(usize, usize)>) -> PadWidth {
        PadWidth(p)
    }
}

/// A `pad` call; finish with [`Pad::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Pad {
    x: Operand,
    width: PadWidth,
    mode: PadMode,
    constant: f64,
}

/// NumPy-style padding: `qb::pad(&x, &[(1, 2)]).mode(PadMode::Reflect).eval()`.
#[track_caller]
pub fn pad(x: impl Into<Operand>, pad_width: impl Into<PadWidth>) -> Pad {
    Pad {
        x: x.into(),
        width: pad_width.into(),
        mode: PadMode::Constant,
        constant: 0.0,
    }
}

/// The source position of output position `j` of an axis of extent `n` padded by `before`.
#[track_caller]
fn pad_source(mode: PadMode, j: usize, before: usize, n: usize) -> usize {
    let i = j as isize - before as isize;
    let n = n as isize;
    let p = match mode {
        PadMode::Constant | PadMode::Edge => i.clamp(0, n - 1),
        PadMode::Wrap => i.rem_euclid(n),
        PadMode::Reflect => {
            if n == 1 {
                0
            } else {
                let period = 2 * (n - 1);
                let t = i.rem_euclid(period);
                if t >= n {
                    period - t
                } else {
                    t
                }
            }
        }
        PadMode::Symmetric => {
            let t = i.rem_euclid(2 * n);
            if t >= n {
                2 * n - 1 - t
            } else {
                t
            }
        }
    };
    p as usize
}

impl Pad {
    /// `PadMode::Constant` (default), `Edge`, `Reflect`, `Symmetric` or `Wrap`.
    #[track_caller]
    pub fn mode(mut self, mode: PadMode) -> Pad {
        self.mode = mode;
        self
    }

    /// The fill value of `PadMode::Constant` (default 0).
    #[track_caller]
    pub fn constant_values(mut self, value: f64) -> Pad {
        self.constant = value;
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let Pad {
            x,
            width,
            mode,
            constant,
        } = self;
        apply(vec![x], |b, x| {
            let shape = dims(b, x[0]);
            let rank = shape.len();
            let widths: Vec<(usize, usize)> = match width.0.len() {
                1 => vec![width.0[0]; rank],
                n if n == rank => width.0.clone(),
                n => {
                    return Err(invalid(format!(
                        "pad: pad_width has {n} pairs for a tensor of rank {rank}"
                    )))
                }
            };
            let mut cur = x[0];
            for (axis, &(before, after)) in widths.iter().enumerate() {
                if before == 0 && after == 0 {
                    continue;
                }
                let n = shape[axis];
                if mode == PadMode::Constant {
                    let c = scalar_like(b, constant, cur);
                    let mut parts = Vec::with_capacity(3);
                    for (w, first) in [(before, true), (after, false)] {
                        if w > 0 {
                            let mut d = dims(b, cur);
                            d[axis] = w;
                            let block = b.broadcast_to(c, Shape::new(d)?)?;
                            parts.push((first, block));
                        }
                    }
                    let mut list: Vec<NodeId> = parts.iter().filter(|p| p.0).map(|p| p.1).collect();
                    list.push(cur);
                    list.extend(parts.iter().filter(|p| !p.0).map(|p| p.1));
                    cur = b.concat(&list, axis as isize)?;
                    continue;
                }
                if mode == PadMode::Reflect && (before >= n || after >= n) {
                    return Err(invalid(format!(
                        "pad: reflect padding ({before}, {after}) must be smaller than the extent {n} of axis {axis}"
                    )));
                }
                // The padded extent is checked (a shape error when it overflows) and its
                // index list allocated fallibly before anything is computed.
                let total = n
                    .checked_add(before)
                    .and_then(|t| t.checked_add(after))
                    .unwrap_or(usize::MAX);
                let mut padded = dims(b, cur);
                padded[axis] = total;
                Shape::new(padded)?;
                let mut idx: Vec<usize> =
                    quabla_ir::alloc::try_vec_with_capacity(total).map_err(|e| {
                        IrError::out_of_memory(
                            e.bytes,
                            format!("the {total} source positions of a pad"),
                        )
                    })?;
                idx.extend((0..total).map(|j| pad_source(mode, j, before, n)));
                cur = gather_positions(b, cur, axis, &idx)?;
            }
            Ok(cur)
        })
    }
}

// ---------------------------------------------------------------------------------------------
// tile, repeat

#[track_caller]
fn build_tile(b: &mut GraphBuilder, x: NodeId, reps: &[usize]) -> Built {
    if reps.contains(&0) {
        return Err(invalid(format!(
            "tile: repetitions must be >= 1 (zero extents are not supported), got {reps:?}"
        )));
    }
    let xd = dims(b, x);
    let d = xd.len().max(reps.len());
    let mut xs = vec![1; d - xd.len()];
    xs.extend(&xd);
    let mut rs = vec![1; d - reps.len()];
    rs.extend(reps);
    let inter: Vec<usize> = xs.iter().flat_map(|&n| [1, n]).collect();
    let spread: Vec<usize> = xs.iter().zip(&rs).flat_map(|(&n, &r)| [r, n]).collect();
    let out: Vec<usize> = xs
        .iter()
        .zip(&rs)
        .map(|(&n, &r)| n.checked_mul(r))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            shape_err(
                "tile",
                format!("tile of shape {xd:?} by {reps:?} has more elements than this machine can address"),
            )
        })?;
    let r = b.reshape_to(x, Shape::new(inter)?)?;
    let r = b.broadcast_to(r, Shape::new(spread)?)?;
    b.reshape_to(r, Shape::new(out)?)
}

/// Repeats the whole array `reps` times per axis (shorter `reps` padded with leading 1s,
/// a shorter rank padded with leading unit axes).
#[track_caller]
pub fn tile(x: impl Into<Operand>, reps: impl AsRef<[usize]>) -> Result<Tensor> {
    let reps = reps.as_ref().to_vec();
    apply(vec![x.into()], |b, x| build_tile(b, x[0], &reps))
}

/// A `repeat` call; finish with [`Repeat::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Repeat {
    x: Operand,
    repeats: Vec<isize>,
    axis: Option<isize>,
}

/// Repeats each element: `qb::repeat(&x, 2).axis(0).eval()`; `repeats` is one count or one
/// count (>= 1) per entry along the axis; without an axis the input is flattened first.
#[track_caller]
pub fn repeat(x: impl Into<Operand>, repeats: impl Into<Ints>) -> Repeat {
    Repeat {
        x: x.into(),
        repeats: repeats.into().0,
        axis: None,
    }
}

impl Repeat {
    /// The axis to repeat along.
    #[track_caller]
    pub fn axis(mut self, axis: isize) -> Repeat {
        self.axis = Some(axis);
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let Repeat { x, repeats, axis } = self;
        if let Some(&r) = repeats.iter().find(|&&r| r < 1) {
            return Err(Error::invalid(format!(
                "repeat counts must be >= 1, got {r}"
            )));
        }
        apply(vec![x], |b, x| {
            let (src, axis) = match axis {
                Some(a) => {
                    let a = normalize_axis(a, b.ty(x[0]).shape.rank())?;
                    (x[0], a)
                }
                None => (ravel_node(b, x[0])?, 0),
            };
            let d = dims(b, src);
            let n = d[axis];
            match repeats.len() {
                1 => {
                    let r = repeats[0] as usize;
                    if r == 1 {
                        return Ok(src);
                    }
                    let mut inserted = d.clone();
                    inserted.insert(axis + 1, 1);
                    let mut spread = d.clone();
                    spread.insert(axis + 1, r);
                    let mut out = d.clone();
                    out[axis] = n * r;
                    let t = b.reshape_to(src, Shape::new(inserted)?)?;
                    let t = b.broadcast_to(t, Shape::new(spread)?)?;
                    b.reshape_to(t, Shape::new(out)?)
                }
                k if k == n => {
                    let idx: Vec<usize> = repeats
                        .iter()
                        .enumerate()
                        .flat_map(|(i, &r)| std::iter::repeat_n(i, r as usize))
                        .collect();
                    gather_positions(b, src, axis, &idx)
                }
                k => Err(invalid(format!(
                    "repeat: {k} counts for an axis of extent {n}; give one count or one per entry"
                ))),
            }
        })
    }
}

// ---------------------------------------------------------------------------------------------
// moveaxis, swapaxes, ravel

#[track_caller]
fn moveaxis_perm(rank: usize, source: &[isize], destination: &[isize]) -> Result<Vec<isize>> {
    if source.len() != destination.len() {
        return Err(Error::invalid(format!(
            "moveaxis: source and destination must have the same number of elements, got {} and {}",
            source.len(),
            destination.len()
        )));
    }
    let shape = Shape::new(vec![1; rank])?;
    let src = shape.axes("moveaxis", source)?;
    let dst = shape.axes("moveaxis", destination)?;
    let mut order: Vec<usize> = (0..rank).filter(|a| !src.contains(a)).collect();
    let mut pairs: Vec<(usize, usize)> = dst.into_iter().zip(src).collect();
    pairs.sort_unstable();
    for (d, s) in pairs {
        order.insert(d, s);
    }
    Ok(order.into_iter().map(|a| a as isize).collect())
}

/// Moves axes `source` to positions `destination`, keeping the order of the others.
#[track_caller]
pub fn moveaxis(
    x: &Tensor,
    source: impl AsRef<[isize]>,
    destination: impl AsRef<[isize]>,
) -> Result<Tensor> {
    let perm = moveaxis_perm(x.ndim(), source.as_ref(), destination.as_ref())?;
    x.permute(perm)
}

/// Exchanges two axes.
#[track_caller]
pub fn swapaxes(x: &Tensor, axis1: isize, axis2: isize) -> Result<Tensor> {
    let rank = x.ndim();
    let a = normalize_axis(axis1, rank)?;
    let c = normalize_axis(axis2, rank)?;
    let mut perm: Vec<isize> = (0..rank as isize).collect();
    perm.swap(a, c);
    x.permute(perm)
}

/// Row-major flatten to rank 1.
#[track_caller]
pub fn ravel(x: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![x.into()], |b, x| ravel_node(b, x[0]))
}

// ---------------------------------------------------------------------------------------------
// diag, diagonal, trace, tril, triu

/// The diagonal `offset` of the 2-D slices spanned by `axis1`, `axis2`, as the last axis.
#[track_caller]
fn build_diagonal(
    b: &mut GraphBuilder,
    x: NodeId,
    offset: isize,
    axis1: isize,
    axis2: isize,
) -> Built {
    let shape = b.ty(x).shape.clone();
    let rank = shape.rank();
    if rank < 2 {
        return Err(shape_err(
            "diagonal",
            format!("diagonal requires a tensor of rank >= 2, got shape {shape}"),
        ));
    }
    let a1 = normalize_axis(axis1, rank)?;
    let a2 = normalize_axis(axis2, rank)?;
    if a1 == a2 {
        return Err(shape_err(
            "diagonal",
            format!("diagonal: axis1 and axis2 cannot be the same axis ({a1})"),
        ));
    }
    let (n, m) = (shape.dims()[a1] as isize, shape.dims()[a2] as isize);
    let (row0, col0) = (offset.min(0).abs(), offset.max(0));
    let len = (n - row0).min(m - col0);
    if len <= 0 {
        return Err(shape_err(
            "diagonal",
            format!(
                "empty slices are not supported: diagonal {offset} of a {n}x{m} matrix selects no elements"
            ),
        ));
    }
    let mut perm: Vec<isize> = (0..rank)
        .filter(|&a| a != a1 && a != a2)
        .map(|a| a as isize)
        .collect();
    perm.extend([a1 as isize, a2 as isize]);
    let t = b.transpose(x, Some(&perm))?;
    let mut flat: Vec<usize> = perm[..rank - 2]
        .iter()
        .map(|&a| shape.dims()[a as usize])
        .collect();
    flat.push((n * m) as usize);
    let t = b.reshape_to(t, Shape::new(flat)?)?;
    let idx: Vec<usize> = (0..len)
        .map(|i| ((i + row0) * m + i + col0) as usize)
        .collect();
    gather_positions(b, t, rank - 2, &idx)
}

/// `v` (rank 1) on diagonal `k` of a square matrix, or diagonal `k` of a matrix (rank 2).
#[track_caller]
fn build_diag(b: &mut GraphBuilder, v: NodeId, k: isize) -> Built {
    let d = dims(b, v);
    match d.len() {
        1 => {
            let n = d[0];
            let size = n + k.unsigned_abs();
            let mut c = v;
            if size > n {
                let z = scalar_like(b, 0.0, v);
                let pad = b.broadcast_to(z, Shape::new(vec![size - n])?)?;
                c = b.concat(&[v, pad], 0)?;
            }
            // Row i holds v[i] at column i + k (k >= 0); column j holds v[j] at row j - k.
            let spread = if k >= 0 {
                b.reshape_to(c, Shape::new(vec![size, 1])?)?
            } else {
                b.reshape_to(c, Shape::new(vec![1, size])?)?
            };
            let mut mask = Vec::with_capacity(size * size);
            for i in 0..size as isize {
                for j in 0..size as isize {
                    mask.push(j - i == k);
                }
            }
            let mask = bool_mask(b, vec![size, size], mask)?;
            let zero = scalar_like(b, 0.0, v);
            b.select(mask, spread, zero)
        }
        2 => build_diagonal(b, v, k, 0, 1),
        r => Err(shape_err(
            "diag",
            format!("diag requires a tensor of rank 1 or 2, got rank {r}"),
        )),
    }
}

/// A `diag` call; finish with [`Diag::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Diag {
    v: Operand,
    k: isize,
}

/// Rank 1: the square matrix with `v` on diagonal `k`; rank 2: the 1-D diagonal `k`
/// (`qb::diag(&v).k(1).eval()`).
#[track_caller]
pub fn diag(v: impl Into<Operand>) -> Diag {
    Diag { v: v.into(), k: 0 }
}

impl Diag {
    /// The diagonal: 0 main, positive above, negative below.
    #[track_caller]
    pub fn k(mut self, k: isize) -> Diag {
        self.k = k;
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let k = self.k;
        apply(vec![self.v], |b, x| build_diag(b, x[0], k))
    }
}

/// A `diagonal` or `trace` call; finish with [`Diagonal::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Diagonal {
    x: Operand,
    offset: isize,
    axis1: isize,
    axis2: isize,
    sum: bool,
}

/// The diagonal of the 2-D slices spanned by `axis1`, `axis2` (default 0, 1), appended as the
/// last axis: `qb::diagonal(&x).offset(1).eval()`.
#[track_caller]
pub fn diagonal(x: impl Into<Operand>) -> Diagonal {
    Diagonal {
        x: x.into(),
        offset: 0,
        axis1: 0,
        axis2: 1,
        sum: false,
    }
}

/// The sum of [`diagonal`] along its last axis: `qb::trace(&a).offset(0).eval()`.
#[track_caller]
pub fn trace(x: impl Into<Operand>) -> Diagonal {
    Diagonal {
        sum: true,
        ..diagonal(x)
    }
}

impl Diagonal {
    /// The diagonal: 0 main, positive above, negative below.
    #[track_caller]
    pub fn offset(mut self, offset: isize) -> Diagonal {
        self.offset = offset;
        self
    }

    /// The row axis (default 0).
    #[track_caller]
    pub fn axis1(mut self, axis1: isize) -> Diagonal {
        self.axis1 = axis1;
        self
    }

    /// The column axis (default 1).
    #[track_caller]
    pub fn axis2(mut self, axis2: isize) -> Diagonal {
        self.axis2 = axis2;
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let Diagonal {
            x,
            offset,
            axis1,
            axis2,
            sum,
        } = self;
        apply(vec![x], |b, x| {
            let d = build_diagonal(b, x[0], offset, axis1, axis2)?;
            if sum {
                b.sum(d, Some(&[-1]), false)
            } else {
                Ok(d)
            }
        })
    }
}

#[track_caller]
fn build_triangle(b: &mut GraphBuilder, x: NodeId, lower: bool) -> Built {
    let d = dims(b, x);
    let name = if lower { "tril" } else { "triu" };
    if d.len() < 2 {
        return Err(shape_err(
            name,
            format!(
                "{name} requires a tensor of rank >= 2, got shape {}",
                b.ty(x).shape
            ),
        ));
    }
    let (n, m) = (d[d.len() - 2], d[d.len() - 1]);
    let mut mask = Vec::with_capacity(n * m);
    for i in 0..n {
        for j in 0..m {
            mask.push(if lower { j <= i } else { j >= i });
        }
    }
    let mask = bool_mask(b, vec![n, m], mask)?;
    let zero = scalar_like(b, 0.0, x);
    b.select(mask, x, zero)
}

/// Keeps the lower triangle (main diagonal included) of the last two axes, zeroing the rest.
#[track_caller]
pub fn tril(x: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![x.into()], |b, x| build_triangle(b, x[0], true))
}

/// Keeps the upper triangle (main diagonal included) of the last two axes, zeroing the rest.
#[track_caller]
pub fn triu(x: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![x.into()], |b, x| build_triangle(b, x[0], false))
}

#[cfg(test)]
mod tests {
    use super::{moveaxis_perm, pad_source, PadMode};

    #[test]
    fn pad_index_maps_match_numpy() {
        let map = |mode, before, after, n| {
            (0..n + before + after)
                .map(|j| pad_source(mode, j, before, n))
                .collect::<Vec<_>>()
        };
        assert_eq!(map(PadMode::Edge, 2, 1, 3), vec![0, 0, 0, 1, 2, 2]);
        assert_eq!(map(PadMode::Reflect, 2, 2, 3), vec![2, 1, 0, 1, 2, 1, 0]);
        assert_eq!(map(PadMode::Symmetric, 2, 2, 3), vec![1, 0, 0, 1, 2, 2, 1]);
        assert_eq!(map(PadMode::Wrap, 2, 4, 3), vec![1, 2, 0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(
            map(PadMode::Symmetric, 4, 0, 2),
            vec![0, 1, 1, 0, 0, 1],
            "widths beyond the extent keep mirroring"
        );
    }

    #[test]
    fn moveaxis_matches_numpy() {
        assert_eq!(moveaxis_perm(3, &[0], &[-1]).unwrap(), vec![1, 2, 0]);
        assert_eq!(moveaxis_perm(3, &[-1], &[0]).unwrap(), vec![2, 0, 1]);
        assert_eq!(
            moveaxis_perm(4, &[0, 1], &[-1, -2]).unwrap(),
            vec![2, 3, 1, 0]
        );
    }
}

super::tensor_methods! {
    /// The layout functions on `Result<Tensor>`.
    pub trait LayoutExt;

    /// Reverses the order along one axis.
    pub fn flip(&self, axis: isize) -> Result<Tensor> {
        flip(self, axis)
    }

    /// Reverses the order along the given axes.
    pub fn flip_axes(&self, axes: impl Into<Axes>) -> Result<Tensor> {
        flip(self, axes)
    }

    /// Reverses the order along every axis.
    pub fn flip_all(&self) -> Result<Tensor> {
        flip(self, Axes::All)
    }

    /// Cyclic shift by `shift` along `axis`; see [`roll`] for several axes and the
    /// flattened form.
    pub fn roll(&self, shift: isize, axis: isize) -> Result<Tensor> {
        roll(self, shift).axis(axis).eval()
    }

    /// [`tile`] as a method: `x.tile([2, 1])`.
    pub fn tile(&self, reps: impl AsRef<[usize]>) -> Result<Tensor> {
        tile(self, reps)
    }

    /// Repeats each entry `repeats` times along `axis`; see [`repeat`] for per-entry counts
    /// and the flattened form.
    pub fn repeat(&self, repeats: usize, axis: isize) -> Result<Tensor> {
        repeat(self, repeats).axis(axis).eval()
    }

    /// Moves axes to new positions: `x.moveaxis([0], [-1])`.
    pub fn moveaxis(
        &self,
        source: impl AsRef<[isize]>,
        destination: impl AsRef<[isize]>,
    ) -> Result<Tensor> {
        moveaxis(self, source, destination)
    }

    /// Exchanges two axes.
    pub fn swapaxes(&self, axis1: isize, axis2: isize) -> Result<Tensor> {
        swapaxes(self, axis1, axis2)
    }

    /// Row-major flatten to rank 1.
    pub fn ravel(&self) -> Result<Tensor> {
        ravel(self)
    }

    /// [`diag`] with `k = 0`.
    pub fn diag(&self) -> Result<Tensor> {
        diag(self).eval()
    }

    /// The main diagonal of axes 0 and 1 (see [`diagonal`] for the options).
    pub fn diagonal(&self) -> Result<Tensor> {
        diagonal(self).eval()
    }

    /// The sum of the main diagonal of axes 0 and 1 (see [`trace`] for the options).
    pub fn trace(&self) -> Result<Tensor> {
        trace(self).eval()
    }

    /// Lower triangle of the last two axes.
    pub fn tril(&self) -> Result<Tensor> {
        tril(self)
    }

    /// Upper triangle of the last two axes.
    pub fn triu(&self) -> Result<Tensor> {
        triu(self)
    }
}
