//! `qb::linalg::norm` (api.md §17, numerics.md §6.7): vector norms along one axis and matrix
//! norms over a pair of axes, every order computed with scaling so that neither overflow nor
//! underflow occurs before the result itself does. Scales are behind `stop_gradient`, so the
//! derivatives are those of the unscaled formulas (numerics.md §6.5); the spectral orders go
//! through `svd`. The messages of the invalid orders are documented in `docs/linalg.md`.

use super::dense::{dims, floating, shape_error, take_trailing, Built};
use crate::dispatch::apply;
use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{
    normalize_axis, BinaryOp, Comparison, GraphBuilder, IrError, LinalgKind, NodeId, Op, Shape,
    UnaryOp,
};
use std::fmt;

/// The order of a norm (numerics.md §6.7): `None` in the spec is [`Norm`] without `ord`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ord {
    /// Frobenius (matrices only).
    Fro,
    /// Nuclear: the sum of singular values (matrices only).
    Nuc,
    /// A number: `inf`, `-inf`, `0`, `1`, `-1`, `2`, `-2` or (vectors only) any other real `p`.
    P(f64),
}

impl Ord {
    /// `inf`.
    pub const INF: Ord = Ord::P(f64::INFINITY);
    /// `-inf`.
    pub const NEG_INF: Ord = Ord::P(f64::NEG_INFINITY);
}

impl fmt::Display for Ord {
    #[track_caller]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ord::Fro => write!(f, "\"fro\""),
            Ord::Nuc => write!(f, "\"nuc\""),
            Ord::P(p) if p.is_infinite() => write!(f, "{}", if *p > 0.0 { "inf" } else { "-inf" }),
            Ord::P(p) => write!(f, "{p}"),
        }
    }
}

/// A value `norm`'s `ord` accepts: an [`Ord`], a number, or `"fro"`/`"nuc"`; any other name is
/// AR13 when the call is finished.
pub trait IntoOrd {
    fn into_ord(self) -> Result<Ord>;
}

impl IntoOrd for Ord {
    #[track_caller]
    fn into_ord(self) -> Result<Ord> {
        Ok(self)
    }
}

impl IntoOrd for f64 {
    #[track_caller]
    fn into_ord(self) -> Result<Ord> {
        Ok(Ord::P(self))
    }
}

impl IntoOrd for i32 {
    #[track_caller]
    fn into_ord(self) -> Result<Ord> {
        Ok(Ord::P(self as f64))
    }
}

impl IntoOrd for &str {
    #[track_caller]
    fn into_ord(self) -> Result<Ord> {
        match self {
            "fro" => Ok(Ord::Fro),
            "nuc" => Ok(Ord::Nuc),
            other => Err(Error::invalid(format!(
                "unknown ord {other:?} for a vector or matrix norm; ord is a number, inf, -inf, \"fro\" or \"nuc\""
            ))),
        }
    }
}

/// The axes of a norm: one axis (a vector norm) or a pair (a matrix norm, rows then
/// columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormAxis {
    One(isize),
    Two(isize, isize),
}

impl From<isize> for NormAxis {
    #[track_caller]
    fn from(a: isize) -> NormAxis {
        NormAxis::One(a)
    }
}

impl From<[isize; 2]> for NormAxis {
    #[track_caller]
    fn from(a: [isize; 2]) -> NormAxis {
        NormAxis::Two(a[0], a[1])
    }
}

impl From<(isize, isize)> for NormAxis {
    #[track_caller]
    fn from(a: (isize, isize)) -> NormAxis {
        NormAxis::Two(a.0, a.1)
    }
}

/// `norm(x)`: the 2-norm of a vector, the Frobenius norm of a matrix, or (for another rank,
/// without `ord`) the 2-norm of the flattened array; finish with [`Norm::eval`].
///
/// ```
/// use quabla as qb;
/// use qb::linalg::Ord;
/// # fn main() -> qb::Result<()> {
/// let a = qb::array([[4.0, 1.0], [1.0, 3.0]])?;
/// let fro = qb::linalg::norm(&a).ord(Ord::Fro).eval()?;
/// assert!((fro.item()? - 27f64.sqrt()).abs() < 1e-15);
/// assert_eq!(qb::linalg::norm(qb::array([1.0, 2.0])?).ord(1).eval()?.item()?, 3.0);
/// # Ok(())
/// # }
/// ```
#[track_caller]
pub fn norm(x: impl Into<Operand>) -> Norm {
    Norm {
        x: x.into(),
        ord: None,
        axis: None,
        keepdims: false,
    }
}

/// A `norm` call being configured.
#[derive(Debug)]
#[must_use = "finish the call with .eval()"]
pub struct Norm {
    x: Operand,
    ord: Option<Result<Ord>>,
    axis: Option<NormAxis>,
    keepdims: bool,
}

impl Norm {
    /// The order (numerics.md §6.7).
    #[track_caller]
    pub fn ord(mut self, ord: impl IntoOrd) -> Self {
        self.ord = Some(ord.into_ord());
        self
    }

    /// One axis (a vector norm) or a pair of axes (a matrix norm).
    #[track_caller]
    pub fn axis(mut self, axis: impl Into<NormAxis>) -> Self {
        self.axis = Some(axis.into());
        self
    }

    /// Keep the reduced axes with extent 1.
    #[track_caller]
    pub fn keepdims(mut self, keepdims: bool) -> Self {
        self.keepdims = keepdims;
        self
    }

    /// Computes the norm.
    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let ord = self.ord.transpose()?;
        let (axis, keep) = (self.axis, self.keepdims);
        apply(vec![self.x], |g, x| build_norm(g, x[0], ord, axis, keep))
    }
}

#[track_caller]
fn invalid(message: String) -> IrError {
    IrError::InvalidArgument { message }
}

#[track_caller]
fn build_norm(
    g: &mut GraphBuilder,
    x: NodeId,
    ord: Option<Ord>,
    axis: Option<NormAxis>,
    keep: bool,
) -> Built {
    floating(g, x, "norm")?;
    let rank = g.ty(x).shape.rank();
    let axis = match axis {
        Some(a) => a,
        None => match rank {
            1 => NormAxis::One(0),
            2 => NormAxis::Two(0, 1),
            _ => {
                if let Some(ord) = ord {
                    return Err(invalid(format!(
                        "norm: ord {ord} needs a vector or a matrix norm, but the array has rank {rank} and no axis was given; pass axis (an int or a pair of axes), or omit ord for the 2-norm of the flattened array"
                    )));
                }
                let all: Vec<isize> = (0..rank as isize).collect();
                return two_norm(g, x, &all, keep);
            }
        },
    };
    match axis {
        NormAxis::One(a) => {
            let a = normalize_axis(a, rank)? as isize;
            vector_norm(g, x, ord.unwrap_or(Ord::P(2.0)), a, keep)
        }
        NormAxis::Two(a0, a1) => {
            let (r0, r1) = (normalize_axis(a0, rank)?, normalize_axis(a1, rank)?);
            if r0 == r1 {
                return Err(shape_error(
                    "norm",
                    format!("repeated axis in norm: [{a0}, {a1}]"),
                ));
            }
            matrix_norm(g, x, ord.unwrap_or(Ord::Fro), r0, r1, keep)
        }
    }
}

/// `|x|` (the derivative convention of numerics.md §5: `-1` at `0`).
#[track_caller]
fn abs(g: &mut GraphBuilder, x: NodeId) -> Built {
    crate::ops::elementwise::build_abs(g, x)
}

/// A stop-gradient scale: the reduction of `|x|` over `axes` (kept), replaced by 1 where it
/// is 0 or not finite. Returns `(scale, raw)`.
#[track_caller]
fn scale(
    g: &mut GraphBuilder,
    x: NodeId,
    axes: &[isize],
    smallest: bool,
) -> quabla_ir::Result<(NodeId, NodeId)> {
    let a = abs(g, x)?;
    let m = if smallest {
        g.min(a, Some(axes), true)?
    } else {
        g.max(a, Some(axes), true)?
    };
    let m = g.stop_gradient(m)?;
    let zero = g.weak_scalar(0.0);
    let is_zero = g.compare(Comparison::Equal, m, zero)?;
    let finite = crate::ops::elementwise::build_isfinite(g, m)?;
    let one = g.weak_scalar(1.0);
    let ms = g.select(is_zero, one, m)?;
    let ms = g.select(finite, ms, one)?;
    Ok((ms, m))
}

/// Drops the kept unit axes of a keepdims reduction unless `keep`.
#[track_caller]
fn finish(g: &mut GraphBuilder, r: NodeId, x: NodeId, axes: &[usize], keep: bool) -> Built {
    if keep {
        return Ok(r);
    }
    let d: Vec<usize> = dims(g, x)
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, e)| e)
        .collect();
    g.reshape_to(r, Shape::new(d)?)
}

#[track_caller]
fn normalized(g: &GraphBuilder, x: NodeId, axes: &[isize]) -> quabla_ir::Result<Vec<usize>> {
    let rank = g.ty(x).shape.rank();
    axes.iter().map(|&a| normalize_axis(a, rank)).collect()
}

/// The scaled 2-norm over `axes`: `m * sqrt(sum((x/m)^2))`, `inf` when `m` is infinite.
#[track_caller]
fn two_norm(g: &mut GraphBuilder, x: NodeId, axes: &[isize], keep: bool) -> Built {
    let (ms, m) = scale(g, x, axes, false)?;
    let q = g.div(x, ms)?;
    let q2 = g.mul(q, q)?;
    let s = g.sum(q2, Some(axes), true)?;
    let r = g.unary(UnaryOp::Sqrt, s)?;
    let regular = g.mul(ms, r)?;
    let inf = g.weak_scalar(f64::INFINITY);
    let m_inf = g.compare(Comparison::Equal, m, inf)?;
    let out = g.select(m_inf, inf, regular)?;
    let axes = normalized(g, x, axes)?;
    finish(g, out, x, &axes, keep)
}

#[track_caller]
fn vector_norm(g: &mut GraphBuilder, x: NodeId, ord: Ord, axis: isize, keep: bool) -> Built {
    let axes = [axis];
    let p = match ord {
        Ord::P(p) if !p.is_nan() => p,
        other => {
            return Err(invalid(format!(
                "norm: unknown ord {other} for a vector norm (an int axis, or a rank-1 array without axis); vector norms take a real number, inf or -inf"
            )))
        }
    };
    let kept = [axis as usize];
    if p == 2.0 {
        return two_norm(g, x, &axes, keep);
    }
    let a = abs(g, x)?;
    let out = if p == f64::INFINITY {
        g.max(a, Some(&axes), true)?
    } else if p == f64::NEG_INFINITY {
        g.min(a, Some(&axes), true)?
    } else if p == 1.0 {
        g.sum(a, Some(&axes), true)?
    } else if p == 0.0 {
        // The number of nonzeros: a comparison, so its derivative is zero.
        let zero = g.weak_scalar(0.0);
        let nz = g.compare(Comparison::NotEqual, x, zero)?;
        let nz = g.astype(nz, g.ty(x).dtype)?;
        g.sum(nz, Some(&axes), true)?
    } else {
        // (sum |x|^p)^(1/p) = m (sum (|x|/m)^p)^(1/p), m the largest magnitude for p > 0 and
        // the smallest for p < 0 (the entries that dominate the sum), so the powers stay
        // within [0, 1].
        let (ms, _) = scale(g, x, &axes, p < 0.0)?;
        let q = g.div(a, ms)?;
        let pw = g.weak_scalar(p);
        let qp = g.binary(BinaryOp::Pow, q, pw)?;
        let s = g.sum(qp, Some(&axes), true)?;
        let inv = g.weak_scalar(1.0 / p);
        let root = g.binary(BinaryOp::Pow, s, inv)?;
        g.mul(ms, root)?
    };
    finish(g, out, x, &kept, keep)
}

#[track_caller]
fn matrix_norm(
    g: &mut GraphBuilder,
    x: NodeId,
    ord: Ord,
    row: usize,
    col: usize,
    keep: bool,
) -> Built {
    let both = [row as isize, col as isize];
    let kept = [row, col];
    let out = match ord {
        Ord::Fro => return two_norm(g, x, &both, keep),
        Ord::Nuc => spectral(g, x, row, col, Spectral::Sum)?,
        Ord::P(2.0) => spectral(g, x, row, col, Spectral::Largest)?,
        Ord::P(-2.0) => spectral(g, x, row, col, Spectral::Smallest)?,
        Ord::P(p) if p.is_infinite() || p == 1.0 || p == -1.0 => {
            // inf: max over rows of the row sums (sums along the column axis); 1: max over
            // columns of the column sums; the negative orders take the minimum.
            let (sum_axis, over) = if p.is_infinite() { (col, row) } else { (row, col) };
            let a = abs(g, x)?;
            let sums = g.sum(a, Some(&[sum_axis as isize]), true)?;
            if p > 0.0 {
                g.max(sums, Some(&[over as isize]), true)?
            } else {
                g.min(sums, Some(&[over as isize]), true)?
            }
        }
        other => {
            return Err(invalid(format!(
                "norm: unknown ord {other} for a matrix norm (a pair of axes, or a rank-2 array without axis); matrix norms take \"fro\", \"nuc\", 1, -1, 2, -2, inf or -inf"
            )))
        }
    };
    finish(g, out, x, &kept, keep)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Spectral {
    Sum,
    Largest,
    Smallest,
}

/// A norm of the singular values of the matrices on axes `(row, col)`, kept as unit axes:
/// `m * f(svd(x / m))` with a stop-gradient scale `m`.
#[track_caller]
fn spectral(g: &mut GraphBuilder, x: NodeId, row: usize, col: usize, what: Spectral) -> Built {
    let rank = g.ty(x).shape.rank();
    let (ms, _) = scale(g, x, &[row as isize, col as isize], false)?;
    let q = g.div(x, ms)?;
    // Move the two axes last, rows before columns.
    let mut perm: Vec<isize> = (0..rank)
        .filter(|&a| a != row && a != col)
        .map(|a| a as isize)
        .collect();
    perm.extend([row as isize, col as isize]);
    let moved = g.transpose(q, Some(&perm))?;
    let s = g.push(Op::Linalg(LinalgKind::SvdS), &[moved])?;
    let k = *dims(g, s).last().expect("s has an axis");
    let v = match what {
        Spectral::Sum => g.sum(s, Some(&[-1]), false)?,
        Spectral::Largest => {
            let first = take_trailing(g, s, 1, 0, 1)?;
            g.sum(first, Some(&[-1]), false)?
        }
        Spectral::Smallest => {
            let last = take_trailing(g, s, 1, k - 1, 1)?;
            g.sum(last, Some(&[-1]), false)?
        }
    };
    // Back to x's rank with unit axes at (row, col), then the scale.
    let mut kept = dims(g, x);
    kept[row] = 1;
    kept[col] = 1;
    let v = g.reshape_to(v, Shape::new(kept)?)?;
    g.mul(v, ms)
}
