//! Calculus helpers of api.md §9: `diff`, `trapezoid`, `polyval` and `interp`, built from
//! slices, elementwise arithmetic and `where` (numerics.md §4.3 for `polyval` and `interp`,
//! §5 for the derivative of `interp`).

use super::compare::build_and;
use super::composite::build_isinf;
use super::elementwise::{build_isnan, float_only};
use super::{dims, operand_tensor, scalar_like, slice_axis, take};
use crate::dispatch::apply;
use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{
    broadcast_shapes, normalize_axis, Comparison, GraphBuilder, IrError, NodeId, Shape,
};

type Built = quabla_ir::Result<NodeId>;

/// `x[1:] - x[:-1]` along `axis`.
#[track_caller]
fn first_difference(b: &mut GraphBuilder, x: NodeId, axis: usize) -> Built {
    let n = dims(b, x)[axis];
    let hi = slice_axis(b, x, axis, 1, n - 1)?;
    let lo = slice_axis(b, x, axis, 0, n - 1)?;
    b.sub(hi, lo)
}

/// A `diff` call; finish with [`Diff::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Diff {
    x: Operand,
    n: usize,
    axis: isize,
    prepend: Option<Operand>,
    append: Option<Operand>,
}

/// The `n`-th forward difference along `axis` (default 1 and -1):
/// `qb::diff(&x).n(2).axis(0).eval()`.
#[track_caller]
pub fn diff(x: impl Into<Operand>) -> Diff {
    Diff {
        x: x.into(),
        n: 1,
        axis: -1,
        prepend: None,
        append: None,
    }
}

impl Diff {
    /// The order (0 returns `x`).
    #[track_caller]
    pub fn n(mut self, n: usize) -> Diff {
        self.n = n;
        self
    }

    /// The axis (default -1).
    #[track_caller]
    pub fn axis(mut self, axis: isize) -> Diff {
        self.axis = axis;
        self
    }

    /// Values concatenated before `x` along the axis; a rank-0 value is one slice.
    #[track_caller]
    pub fn prepend(mut self, values: impl Into<Operand>) -> Diff {
        self.prepend = Some(values.into());
        self
    }

    /// Values concatenated after `x` along the axis; a rank-0 value is one slice.
    #[track_caller]
    pub fn append(mut self, values: impl Into<Operand>) -> Diff {
        self.append = Some(values.into());
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let Diff {
            x,
            n,
            axis,
            prepend,
            append,
        } = self;
        if n == 0 {
            return operand_tensor(x);
        }
        let has_pre = prepend.is_some();
        let has_app = append.is_some();
        let mut operands = vec![x];
        operands.extend(prepend);
        operands.extend(append);
        apply(operands, |b, x| {
            float_only(b, x[0], "diff")?;
            let mut shape = dims(b, x[0]);
            let axis = normalize_axis(axis, shape.len())?;
            shape[axis] = 1;
            let slice = |b: &mut GraphBuilder, v: NodeId| {
                if b.ty(v).shape.rank() == 0 {
                    b.broadcast_to(v, Shape::new(shape.clone())?)
                } else {
                    Ok(v)
                }
            };
            let mut parts = Vec::with_capacity(3);
            let mut next = 1;
            if has_pre {
                parts.push(slice(b, x[next])?);
                next += 1;
            }
            parts.push(x[0]);
            if has_app {
                parts.push(slice(b, x[next])?);
            }
            let mut cur = b.concat(&parts, axis as isize)?;
            let len = dims(b, cur)[axis];
            if len <= n {
                return Err(IrError::Shape {
                    op: "diff".into(),
                    message: format!(
                        "empty slices are not supported: diff of order {n} along an axis of length {len} selects no elements"
                    ),
                });
            }
            for _ in 0..n {
                cur = first_difference(b, cur, axis)?;
            }
            Ok(cur)
        })
    }
}

/// A `trapezoid` call; finish with [`Trapezoid::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Trapezoid {
    y: Operand,
    x: Option<Operand>,
    dx: f64,
    axis: isize,
}

/// The trapezoid rule along `axis` (default -1), `sum(d * (y[1:] + y[:-1]) / 2)`, with sample
/// points `x` (1-D along the axis, or the shape of `y`) or uniform spacing `dx` (default 1):
/// `qb::trapezoid(&y).x(&x).eval()`.
#[track_caller]
pub fn trapezoid(y: impl Into<Operand>) -> Trapezoid {
    Trapezoid {
        y: y.into(),
        x: None,
        dx: 1.0,
        axis: -1,
    }
}

impl Trapezoid {
    /// The sample points.
    #[track_caller]
    pub fn x(mut self, x: impl Into<Operand>) -> Trapezoid {
        self.x = Some(x.into());
        self
    }

    /// The uniform spacing when no sample points are given (default 1).
    #[track_caller]
    pub fn dx(mut self, dx: f64) -> Trapezoid {
        self.dx = dx;
        self
    }

    /// The axis (default -1).
    #[track_caller]
    pub fn axis(mut self, axis: isize) -> Trapezoid {
        self.axis = axis;
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let Trapezoid { y, x, dx, axis } = self;
        let has_x = x.is_some();
        let mut operands = vec![y];
        operands.extend(x);
        apply(operands, |b, v| {
            let y = v[0];
            float_only(b, y, "trapezoid")?;
            let yd = dims(b, y);
            let axis = normalize_axis(axis, yd.len())?;
            let n = yd[axis];
            if n == 1 {
                let mut out = yd.clone();
                out.remove(axis);
                let z = scalar_like(b, 0.0, y);
                return b.broadcast_to(z, Shape::new(out)?);
            }
            let d = if has_x {
                let x = v[1];
                let xd = dims(b, x);
                if xd.len() == 1 && xd[0] == n {
                    let dxs = first_difference(b, x, 0)?;
                    let mut s = vec![1; yd.len()];
                    s[axis] = n - 1;
                    b.reshape_to(dxs, Shape::new(s)?)?
                } else if xd.len() == yd.len() {
                    first_difference(b, x, axis)?
                } else {
                    return Err(IrError::Shape {
                        op: "trapezoid".into(),
                        message: format!(
                            "trapezoid: x of shape {:?} must be 1-D of length {n} or match y of shape {yd:?}",
                            xd
                        ),
                    });
                }
            } else {
                b.weak_scalar(dx)
            };
            let hi = slice_axis(b, y, axis, 1, n - 1)?;
            let lo = slice_axis(b, y, axis, 0, n - 1)?;
            let s = b.add(hi, lo)?;
            let t = b.mul(d, s)?;
            let two = b.weak_scalar(2.0);
            let t = b.div(t, two)?;
            b.sum(t, Some(&[axis as isize]), false)
        })
    }
}

/// Horner evaluation of the polynomial `p` (`p[0]` the highest-degree coefficient) at `x`;
/// at infinite `x` the polynomial's limit: the first nonzero coefficient times `x^degree`
/// (a constant polynomial gives its value).
#[track_caller]
pub fn polyval(p: impl Into<Operand>, x: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![p.into(), x.into()], |b, v| {
        float_only(b, v[0], "polyval")?;
        float_only(b, v[1], "polyval")?;
        let x = v[1];
        let pd = dims(b, v[0]);
        let p = match pd.len() {
            0 => b.reshape_to(v[0], Shape::new(vec![1])?)?,
            1 => v[0],
            _ => {
                return Err(IrError::Shape {
                    op: "polyval".into(),
                    message: format!("polyval: p must be 1-D, got shape {pd:?}"),
                })
            }
        };
        let n = dims(b, p)[0];
        let coef = (0..n)
            .map(|k| take(b, p, 0, k))
            .collect::<quabla_ir::Result<Vec<NodeId>>>()?;
        let mut y = coef[0];
        for &c in &coef[1..] {
            let t = b.mul(y, x)?;
            y = b.add(t, c)?;
        }
        // The limit at infinite x, behind stop_gradient (no derivative flows from it).
        let xs = b.stop_gradient(x)?;
        let mut lim = b.stop_gradient(coef[n - 1])?;
        for j in (0..n - 1).rev() {
            let pj = b.stop_gradient(coef[j])?;
            let power = b.powi(xs, (n - 1 - j) as i32)?;
            let term = b.mul(pj, power)?;
            let zero = b.weak_scalar(0.0);
            let nonzero = b.compare(Comparison::NotEqual, pj, zero)?;
            lim = b.select(nonzero, term, lim)?;
        }
        let inf = build_isinf(b, x)?;
        let r = b.select(inf, lim, y)?;
        let shape = broadcast_shapes(&b.ty(r).shape, &b.ty(x).shape)?;
        b.broadcast_to(r, shape)
    })
}

/// An `interp` call; finish with [`Interp::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Interp {
    x: Operand,
    xp: Operand,
    fp: Operand,
    left: Option<Operand>,
    right: Option<Operand>,
}

/// Piecewise-linear interpolation of the points `(xp, fp)` at `x`; `xp` must be strictly
/// increasing (checked when eager); below `xp[0]` gives `left` (default `fp[0]`), above
/// `xp[-1]` gives `right` (default `fp[-1]`): `qb::interp(&x, &xp, &fp).left(0.0).eval()`.
/// Evaluates every interval (cost `O(x.size * len(xp))`); differentiable in all three.
#[track_caller]
pub fn interp(x: impl Into<Operand>, xp: impl Into<Operand>, fp: impl Into<Operand>) -> Interp {
    Interp {
        x: x.into(),
        xp: xp.into(),
        fp: fp.into(),
        left: None,
        right: None,
    }
}

impl Interp {
    /// The value below `xp[0]`.
    #[track_caller]
    pub fn left(mut self, v: impl Into<Operand>) -> Interp {
        self.left = Some(v.into());
        self
    }

    /// The value above `xp[-1]`.
    #[track_caller]
    pub fn right(mut self, v: impl Into<Operand>) -> Interp {
        self.right = Some(v.into());
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let Interp {
            x,
            xp,
            fp,
            left,
            right,
        } = self;
        let xp = operand_tensor(xp)?;
        let fp = operand_tensor(fp)?;
        if xp.ndim() != 1 || fp.ndim() != 1 || xp.shape() != fp.shape() {
            return Err(Error::shape(
                "interp",
                format!(
                    "interp: xp and fp must be 1-D of the same length, got shapes {:?} and {:?}",
                    xp.shape(),
                    fp.shape()
                ),
            ));
        }
        if !xp.is_traced() {
            let v = xp.to_vec::<f64>()?;
            // Anything but `Less` (including NaN knots) is rejected.
            if v.windows(2)
                .any(|w| w[0].partial_cmp(&w[1]) != Some(std::cmp::Ordering::Less))
            {
                return Err(Error::invalid("interp requires strictly increasing xp"));
            }
        }
        let has_left = left.is_some();
        let has_right = right.is_some();
        let mut operands = vec![x, Operand::Tensor(xp), Operand::Tensor(fp)];
        operands.extend(left);
        operands.extend(right);
        apply(operands, |b, v| {
            let (x, xp, fp) = (v[0], v[1], v[2]);
            for &t in &v[..3] {
                float_only(b, t, "interp")?;
            }
            let k = dims(b, xp)[0];
            let knot = |b: &mut GraphBuilder, i: usize| take(b, xp, 0, i);
            let value = |b: &mut GraphBuilder, i: usize| take(b, fp, 0, i);
            let slope = |b: &mut GraphBuilder, i: usize| -> Built {
                let (x0, x1) = (knot(b, i)?, knot(b, i + 1)?);
                let (f0, f1) = (value(b, i)?, value(b, i + 1)?);
                let df = b.sub(f1, f0)?;
                let dx = b.sub(x1, x0)?;
                b.div(df, dx)
            };
            // fp[i] + (x - xp[i]) * s: exactly fp[i] at x == xp[i]. Each interval reads `x`
            // only where it selects it (elsewhere its own knot), so an infinite or far query
            // point, whose result comes from another branch, puts no `0 * inf` into the
            // derivatives with respect to `xp` and `fp`.
            let line = |b: &mut GraphBuilder, i: usize, s: NodeId, x: NodeId| -> Built {
                let (xi, fi) = (knot(b, i)?, value(b, i)?);
                let dx = b.sub(x, xi)?;
                let t = b.mul(dx, s)?;
                b.add(fi, t)
            };
            let mut next = 3;
            let left_v = if has_left {
                next += 1;
                v[next - 1]
            } else {
                value(b, 0)?
            };
            let right_v = if has_right { v[next] } else { value(b, k - 1)? };
            let last = knot(b, k - 1)?;
            let mut res = right_v;
            let at_last = b.compare(Comparison::Equal, x, last)?;
            let last_v = if k >= 2 {
                let s = slope(b, k - 2)?;
                let x_here = b.select(at_last, x, last)?;
                line(b, k - 1, s, x_here)?
            } else {
                value(b, 0)?
            };
            res = b.select(at_last, last_v, res)?;
            for i in (0..k.saturating_sub(1)).rev() {
                let (x0, x1) = (knot(b, i)?, knot(b, i + 1)?);
                let ge = b.compare(Comparison::GreaterEqual, x, x0)?;
                let lt = b.compare(Comparison::Less, x, x1)?;
                let inside = build_and(b, ge, lt)?;
                let s = slope(b, i)?;
                let x_here = b.select(inside, x, x0)?;
                let val = line(b, i, s, x_here)?;
                res = b.select(inside, val, res)?;
            }
            let first = knot(b, 0)?;
            let below = b.compare(Comparison::Less, x, first)?;
            res = b.select(below, left_v, res)?;
            let nan = build_isnan(b, x)?;
            b.select(nan, x, res)
        })
    }
}
