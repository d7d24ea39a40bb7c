//! Normalizations and statistics of numerics.md §4.4: `norm`, `logsumexp`, `softmax`,
//! `log_softmax`, `var`, `std`, and the prefix sum `cumsum` (the native `cumsum` op).
//!
//! Every shift or scale (`max` in `norm`, `logsumexp`, `softmax`) is behind `stop_gradient`,
//! so derivatives are those of the unshifted formulas; a scale that is 0 or not finite is
//! replaced by 1 before dividing, so the special values (`norm` 0 with zero gradient, `-inf`
//! of an all `-inf` `logsumexp`) come out of the same formula without NaN.

use super::compare::{build_not, build_or};
use super::elementwise::{build_abs, build_isfinite, float_only};
use super::reduce::Axes;
use super::reduced_dims;
use crate::dispatch::apply;
use crate::error::Result;
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{Comparison, GraphBuilder, NodeId, Shape, UnaryOp};

type Built = quabla_ir::Result<NodeId>;

#[track_caller]
fn axes_option(axes: &Axes) -> Option<&[isize]> {
    match axes {
        Axes::All => None,
        Axes::List(v) => Some(v),
    }
}

/// Drops the kept unit axes of a keepdims reduction result unless `keep`.
#[track_caller]
fn finish_keep(
    b: &mut GraphBuilder,
    r: NodeId,
    shape: &Shape,
    axes: Option<&[isize]>,
    keep: bool,
    op: &str,
) -> Built {
    if keep {
        return Ok(r);
    }
    let (_, out) = reduced_dims(shape, axes, op)?;
    b.reshape_to(r, Shape::new(out)?)
}

/// `m * sqrt(sum((x/m)^2))` with `m = stop_gradient(max(abs(x)))`; `inf` when `m` is
/// infinite; `m` replaced by 1 where it is 0 or not finite.
#[track_caller]
fn build_norm(b: &mut GraphBuilder, x: NodeId, axes: Option<&[isize]>, keep: bool) -> Built {
    float_only(b, x, "norm")?;
    let shape = b.ty(x).shape.clone();
    // Axis errors name the function called, not the `max` inside it.
    reduced_dims(&shape, axes, "norm")?;
    let a = build_abs(b, x)?;
    let m = b.max(a, axes, true)?;
    let m = b.stop_gradient(m)?;
    let zero = b.weak_scalar(0.0);
    let is_zero = b.compare(Comparison::Equal, m, zero)?;
    let fin = build_isfinite(b, m)?;
    let not_fin = build_not(b, fin)?;
    let unsafe_m = build_or(b, is_zero, not_fin)?;
    let one = b.weak_scalar(1.0);
    let ms = b.select(unsafe_m, one, m)?;
    let q = b.div(x, ms)?;
    let q2 = b.mul(q, q)?;
    let s = b.sum(q2, axes, true)?;
    let r = b.unary(UnaryOp::Sqrt, s)?;
    let regular = b.mul(ms, r)?;
    let inf = b.weak_scalar(f64::INFINITY);
    let m_inf = b.compare(Comparison::Equal, m, inf)?;
    let out = b.select(m_inf, inf, regular)?;
    finish_keep(b, out, &shape, axes, keep, "norm")
}

/// `s + log(sum(exp(x - s)))`, `s = where(isfinite(m), m, 0)`, `m = stop_gradient(max(x))`.
#[track_caller]
fn build_logsumexp(b: &mut GraphBuilder, x: NodeId, axes: Option<&[isize]>, keep: bool) -> Built {
    float_only(b, x, "logsumexp")?;
    let shape = b.ty(x).shape.clone();
    reduced_dims(&shape, axes, "logsumexp")?;
    let m = b.max(x, axes, true)?;
    let m = b.stop_gradient(m)?;
    let fin = build_isfinite(b, m)?;
    let zero = b.weak_scalar(0.0);
    let s = b.select(fin, m, zero)?;
    let d = b.sub(x, s)?;
    let e = b.unary(UnaryOp::Exp, d)?;
    let t = b.sum(e, axes, true)?;
    let l = b.unary(UnaryOp::Log, t)?;
    let out = b.add(s, l)?;
    finish_keep(b, out, &shape, axes, keep, "logsumexp")
}

/// `e / sum(e)` with `e = exp(x - stop_gradient(max(x)))` along `axis`.
#[track_caller]
fn build_softmax(b: &mut GraphBuilder, x: NodeId, axis: isize) -> Built {
    float_only(b, x, "softmax")?;
    let axes = [axis];
    reduced_dims(&b.ty(x).shape.clone(), Some(&axes), "softmax")?;
    let m = b.max(x, Some(&axes), true)?;
    let m = b.stop_gradient(m)?;
    let d = b.sub(x, m)?;
    let e = b.unary(UnaryOp::Exp, d)?;
    let t = b.sum(e, Some(&axes), true)?;
    b.div(e, t)
}

/// `(x - s) - log(sum(exp(x - s)))`, `s = stop_gradient(max(x))` along `axis`.
#[track_caller]
fn build_log_softmax(b: &mut GraphBuilder, x: NodeId, axis: isize) -> Built {
    float_only(b, x, "log_softmax")?;
    let axes = [axis];
    reduced_dims(&b.ty(x).shape.clone(), Some(&axes), "log_softmax")?;
    let m = b.max(x, Some(&axes), true)?;
    let s = b.stop_gradient(m)?;
    let d = b.sub(x, s)?;
    let e = b.unary(UnaryOp::Exp, d)?;
    let t = b.sum(e, Some(&axes), true)?;
    let l = b.unary(UnaryOp::Log, t)?;
    b.sub(d, l)
}

/// Two-pass variance: `sum((x - mean(x))^2) / (n - ddof)`, then `sqrt` for `std`.
#[track_caller]
fn build_variance(
    b: &mut GraphBuilder,
    x: NodeId,
    axes: Option<&[isize]>,
    keep: bool,
    ddof: usize,
    root: bool,
) -> Built {
    let name = if root { "std" } else { "var" };
    float_only(b, x, name)?;
    let shape = b.ty(x).shape.clone();
    let (reduced, _) = reduced_dims(&shape, axes, name)?;
    let n: usize = reduced.iter().map(|&a| shape.dims()[a]).product();
    let mu = b.mean(x, axes, true)?;
    let d = b.sub(x, mu)?;
    let sq = b.mul(d, d)?;
    let ss = b.sum(sq, axes, keep)?;
    let count = b.weak_scalar(n as f64 - ddof as f64);
    let v = b.div(ss, count)?;
    if root {
        b.unary(UnaryOp::Sqrt, v)
    } else {
        Ok(v)
    }
}

macro_rules! axis_reductions {
    ($($(#[$doc:meta])* $name:ident, $axes:ident, $keep:ident => $build:ident;)*) => {
        super::tensor_methods! {
            #[doc = "`norm` and `logsumexp` on `Result<Tensor>`."]
            pub trait NormExt;
            $(
                $(#[$doc])*
                pub fn $name(&self) -> Result<Tensor> {
                    $name(self)
                }

                #[doc = concat!("`", stringify!($name), "` over the given axes, which are removed.")]
                pub fn $axes(&self, axes: impl Into<Axes>) -> Result<Tensor> {
                    let axes = axes.into();
                    apply(vec![self.into()], |b, x| $build(b, x[0], axes_option(&axes), false))
                }

                #[doc = concat!("`", stringify!($name), "` over the given axes, kept with extent 1.")]
                pub fn $keep(&self, axes: impl Into<Axes>) -> Result<Tensor> {
                    let axes = axes.into();
                    apply(vec![self.into()], |b, x| $build(b, x[0], axes_option(&axes), true))
                }
            )*
        }
        $(
            $(#[$doc])*
            #[track_caller]
            pub fn $name(x: impl Into<Operand>) -> Result<Tensor> {
                apply(vec![x.into()], |b, x| $build(b, x[0], None, false))
            }
        )*
    };
}

axis_reductions! {
    /// Euclidean norm, scaled by the largest magnitude so that float32 neither overflows nor
    /// underflows (`[1e20, 1e20]` gives `1.4142136e20`); gradient `x / norm`, 0 at norm 0.
    norm, norm_axes, norm_keepdims => build_norm;
    /// `log(sum(exp(x)))` with a max shift: all `-inf` gives `-inf`, any `+inf` gives
    /// `+inf`; gradient `softmax(x)`.
    logsumexp, logsumexp_axes, logsumexp_keepdims => build_logsumexp;
}

/// Max-shifted softmax along `axis`: `softmax([1000, 0]) = [1, 0]` in float32 too.
#[track_caller]
pub fn softmax(x: impl Into<Operand>, axis: isize) -> Result<Tensor> {
    apply(vec![x.into()], |b, x| build_softmax(b, x[0], axis))
}

/// Max-shifted log-softmax along `axis`.
#[track_caller]
pub fn log_softmax(x: impl Into<Operand>, axis: isize) -> Result<Tensor> {
    apply(vec![x.into()], |b, x| build_log_softmax(b, x[0], axis))
}

super::tensor_methods! {
    /// The normalizations on `Result<Tensor>`.
    pub trait NormalizeExt;
    /// Max-shifted softmax along `axis` (`-1`: the last).
    pub fn softmax(&self, axis: isize) -> Result<Tensor> {
        softmax(self, axis)
    }

    /// Max-shifted log-softmax along `axis`.
    pub fn log_softmax(&self, axis: isize) -> Result<Tensor> {
        log_softmax(self, axis)
    }

    /// Variance over all elements (`ddof = 0`); see [`var`] for axes and `ddof`.
    pub fn var(&self) -> Result<Tensor> {
        var(self).eval()
    }

    /// Standard deviation over all elements (`ddof = 0`); see [`std`] for axes and `ddof`.
    pub fn std(&self) -> Result<Tensor> {
        std(self).eval()
    }

    /// Inclusive prefix sum along `axis`; see [`cumsum`] for `reverse` and the flattened form.
    pub fn cumsum(&self, axis: isize) -> Result<Tensor> {
        cumsum(self).axis(axis).eval()
    }
}

/// A `var` or `std` call; finish with [`Variance::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Variance {
    x: Operand,
    axes: Axes,
    keepdims: bool,
    ddof: usize,
    root: bool,
}

/// Two-pass variance `sum((x - mean)^2) / (n - ddof)`:
/// `qb::var(&x).axis(0).ddof(1).eval()`. `n <= ddof` divides by zero or a negative count.
#[track_caller]
pub fn var(x: impl Into<Operand>) -> Variance {
    Variance {
        x: x.into(),
        axes: Axes::All,
        keepdims: false,
        ddof: 0,
        root: false,
    }
}

/// `sqrt(var(...))`: `qb::std(&x).ddof(1).eval()`; its derivative is 0 at zero variance.
#[track_caller]
pub fn std(x: impl Into<Operand>) -> Variance {
    Variance {
        root: true,
        ..var(x)
    }
}

impl Variance {
    /// Reduces over one axis.
    #[track_caller]
    pub fn axis(mut self, axis: isize) -> Variance {
        self.axes = Axes::List(vec![axis]);
        self
    }

    /// Reduces over the given axes (`Axes::All`: every axis, the default).
    #[track_caller]
    pub fn axes(mut self, axes: impl Into<Axes>) -> Variance {
        self.axes = axes.into();
        self
    }

    /// Keeps reduced axes with extent 1.
    #[track_caller]
    pub fn keepdims(mut self, keepdims: bool) -> Variance {
        self.keepdims = keepdims;
        self
    }

    /// Delta degrees of freedom: the divisor is `n - ddof`.
    #[track_caller]
    pub fn ddof(mut self, ddof: usize) -> Variance {
        self.ddof = ddof;
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let Variance {
            x,
            axes,
            keepdims,
            ddof,
            root,
        } = self;
        apply(vec![x], |b, x| {
            build_variance(b, x[0], axes_option(&axes), keepdims, ddof, root)
        })
    }
}

/// A `cumsum` call; finish with [`Cumsum::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Cumsum {
    x: Operand,
    axis: Option<isize>,
    reverse: bool,
}

/// Inclusive prefix sum accumulated in float64 (each output rounded once):
/// `qb::cumsum(&x).axis(0).reverse(true).eval()`. Without an axis the input is flattened.
#[track_caller]
pub fn cumsum(x: impl Into<Operand>) -> Cumsum {
    Cumsum {
        x: x.into(),
        axis: None,
        reverse: false,
    }
}

impl Cumsum {
    /// The axis to accumulate along (default: the flattened input).
    #[track_caller]
    pub fn axis(mut self, axis: isize) -> Cumsum {
        self.axis = Some(axis);
        self
    }

    /// Accumulates from the last element.
    #[track_caller]
    pub fn reverse(mut self, reverse: bool) -> Cumsum {
        self.reverse = reverse;
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let Cumsum { x, axis, reverse } = self;
        apply(vec![x], |b, x| {
            float_only(b, x[0], "cumsum")?;
            let (src, axis) = match axis {
                Some(a) => (x[0], a),
                None => {
                    let n = b.ty(x[0]).shape.size();
                    (b.reshape_to(x[0], Shape::new(vec![n])?)?, 0)
                }
            };
            b.cumsum(src, axis, reverse)
        })
    }
}
