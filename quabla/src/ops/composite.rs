//! Composite elementwise functions of numerics.md §4.3 that are not single IR ops: `sign`,
//! `exp2`, `isinf`, `nan_to_num`, `clip`, the activations `softplus`, `silu`, `gelu`, and the
//! binary `logaddexp`, `hypot` and `mod` (`remainder`). Each is built from existing ops with
//! exactly the formula of the table, and inherits its derivatives from them; where numerics.md
//! §5 fixes a value at a special point (`sign` 0, `softplus'(0) = 0.5`, `logaddexp` ties
//! `(0.5, 0.5)`, `hypot` 0 at the origin, `clip` bounds) the construction below yields it.

use super::compare::{build_and, build_not, build_or};
use super::elementwise::{
    build_abs, build_isfinite, build_isnan, build_maximum, build_minimum, build_sigmoid, float_only,
};
use crate::dispatch::apply;
use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{BinaryOp, Comparison, DType, GraphBuilder, NodeId, UnaryOp};

type Built = quabla_ir::Result<NodeId>;

/// `-1` for `x < 0`, `+1` for `x > 0`, `x` itself for `±0` and NaN. The pass-through branch
/// is behind `stop_gradient`, so every derivative is a structural zero.
#[track_caller]
pub(crate) fn build_sign(b: &mut GraphBuilder, x: NodeId) -> Built {
    // Weak integer literals adopt the operand's dtype, integer or float.
    let zero = b.weak_int(0);
    let neg = b.compare(Comparison::Less, x, zero)?;
    let pos = b.compare(Comparison::Greater, x, zero)?;
    let keep = b.stop_gradient(x)?;
    let one = b.weak_int(1);
    let inner = b.select(pos, one, keep)?;
    let minus_one = b.weak_int(-1);
    b.select(neg, minus_one, inner)
}

/// `pow(2, x)`: exact for integral `x` in range.
#[track_caller]
fn build_exp2(b: &mut GraphBuilder, x: NodeId) -> Built {
    let two = b.weak_scalar(2.0);
    b.binary(BinaryOp::Pow, two, x)
}

/// `!isnan(x) & !isfinite(x)`.
#[track_caller]
pub(crate) fn build_isinf(b: &mut GraphBuilder, x: NodeId) -> Built {
    let nan = build_isnan(b, x)?;
    let fin = build_isfinite(b, x)?;
    let not_nan = build_not(b, nan)?;
    let not_fin = build_not(b, fin)?;
    build_and(b, not_nan, not_fin)
}

/// `maximum(x, 0) + log1p(exp(-abs(x)))`.
#[track_caller]
fn build_softplus(b: &mut GraphBuilder, x: NodeId) -> Built {
    let zero = b.weak_scalar(0.0);
    let relu = build_maximum(b, x, zero)?;
    let a = build_abs(b, x)?;
    let na = b.unary(UnaryOp::Neg, a)?;
    let e = b.unary(UnaryOp::Exp, na)?;
    let l = b.unary(UnaryOp::Log1p, e)?;
    b.add(relu, l)
}

/// `x * sigmoid(x)`.
#[track_caller]
fn build_silu(b: &mut GraphBuilder, x: NodeId) -> Built {
    let s = build_sigmoid(b, x)?;
    b.mul(x, s)
}

/// `x * sigmoid(2u)`, `u = sqrt(2/pi) * (x + 0.044715 x^3)`.
#[track_caller]
fn build_gelu_tanh(b: &mut GraphBuilder, x: NodeId) -> Built {
    let x3 = b.powi(x, 3)?;
    let c = b.weak_scalar(0.044715);
    let t = b.mul(c, x3)?;
    let inner = b.add(x, t)?;
    let k = b.weak_scalar((2.0 / std::f64::consts::PI).sqrt());
    let u = b.mul(k, inner)?;
    let two = b.weak_scalar(2.0);
    let u2 = b.mul(two, u)?;
    let s = build_sigmoid(b, u2)?;
    b.mul(x, s)
}

/// `0.5 * x * erfc(-x / sqrt(2))`.
#[track_caller]
fn build_gelu_exact(b: &mut GraphBuilder, x: NodeId) -> Built {
    let nx = b.unary(UnaryOp::Neg, x)?;
    let r2 = b.weak_scalar(std::f64::consts::SQRT_2);
    let q = b.div(nx, r2)?;
    let e = b.unary(UnaryOp::Erfc, q)?;
    let half = b.weak_scalar(0.5);
    let h = b.mul(half, x)?;
    b.mul(h, e)
}

macro_rules! unary_composites {
    ($($(#[$doc:meta])* $name:ident => $build:ident;)*) => {
        super::tensor_methods! {
            #[doc = "The composite functions on `Result<Tensor>`."]
            pub trait CompositeExt;
            $(
                $(#[$doc])*
                pub fn $name(&self) -> Result<Tensor> {
                    $name(self)
                }
            )*
        }
        $(
            $(#[$doc])*
            #[track_caller]
            pub fn $name(x: impl Into<Operand>) -> Result<Tensor> {
                apply(vec![x.into()], |b, x| {
                    float_only(b, x[0], stringify!($name))?;
                    $build(b, x[0])
                })
            }
        )*
    };
}

unary_composites! {
    /// `-1`, `0` or `+1`; NaN for NaN; a zero input is returned unchanged (keeps its sign
    /// bit). Zero derivative of every order.
    sign => build_sign;
    /// `2 ** x` (`pow(2, x)`), exact for integral `x` in range.
    exp2 => build_exp2;
    /// Whether `x` is `±inf`: neither NaN nor finite.
    isinf => build_isinf;
    /// `log(1 + exp(x))` without overflow: `maximum(x, 0) + log1p(exp(-abs(x)))`
    /// (`softplus(-20) = 2.0611536e-9`); derivative `sigmoid(x)`, 0.5 at 0.
    softplus => build_softplus;
    /// `x * sigmoid(x)`.
    silu => build_silu;
}

super::tensor_methods! {
    /// `gelu`, `nan_to_num` and `clip` with their defaults on `Result<Tensor>`.
    pub trait CompositeDefaultsExt;
    /// The tanh approximation of GELU, `x * sigmoid(2u)` with
    /// `u = sqrt(2/pi) * (x + 0.044715 x^3)`; for the exact form use
    /// `qb::gelu(&x).approximate(false).eval()`.
    pub fn gelu(&self) -> Result<Tensor> {
        gelu(self).eval()
    }

    /// [`nan_to_num`] with the defaults: NaN to 0, `±inf` to the dtype's largest finite
    /// magnitude with the matching sign.
    pub fn nan_to_num(&self) -> Result<Tensor> {
        nan_to_num(self).eval()
    }

    /// `minimum(maximum(x, lo), hi)`; for a single bound use `qb::clip(&x).lo(v).eval()`.
    pub fn clip(&self, lo: impl Into<Operand>, hi: impl Into<Operand>) -> Result<Tensor> {
        clip(self).lo(lo).hi(hi).eval()
    }
}

/// A `gelu` call; finish with [`Gelu::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Gelu {
    x: Operand,
    approximate: bool,
}

/// GELU: `qb::gelu(&x).eval()` is the tanh approximation (`x.gelu()`),
/// `.approximate(false)` the exact form `0.5 * x * erfc(-x / sqrt(2))`.
#[track_caller]
pub fn gelu(x: impl Into<Operand>) -> Gelu {
    Gelu {
        x: x.into(),
        approximate: true,
    }
}

impl Gelu {
    /// `true` (the default): tanh approximation; `false`: the exact `erfc` form.
    #[track_caller]
    pub fn approximate(mut self, approximate: bool) -> Gelu {
        self.approximate = approximate;
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let approximate = self.approximate;
        apply(vec![self.x], |b, x| {
            float_only(b, x[0], "gelu")?;
            if approximate {
                build_gelu_tanh(b, x[0])
            } else {
                build_gelu_exact(b, x[0])
            }
        })
    }
}

/// A `nan_to_num` call; finish with [`NanToNum::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct NanToNum {
    x: Operand,
    nan: f64,
    posinf: Option<f64>,
    neginf: Option<f64>,
}

/// Replaces NaN (default 0), `+inf` (default the dtype's largest finite value) and `-inf`
/// (default its negative): `qb::nan_to_num(&x).nan(0.0).posinf(1e9).eval()`.
#[track_caller]
pub fn nan_to_num(x: impl Into<Operand>) -> NanToNum {
    NanToNum {
        x: x.into(),
        nan: 0.0,
        posinf: None,
        neginf: None,
    }
}

impl NanToNum {
    /// The replacement of NaN.
    #[track_caller]
    pub fn nan(mut self, v: f64) -> NanToNum {
        self.nan = v;
        self
    }

    /// The replacement of `+inf`.
    #[track_caller]
    pub fn posinf(mut self, v: f64) -> NanToNum {
        self.posinf = Some(v);
        self
    }

    /// The replacement of `-inf`.
    #[track_caller]
    pub fn neginf(mut self, v: f64) -> NanToNum {
        self.neginf = Some(v);
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let NanToNum {
            x,
            nan,
            posinf,
            neginf,
        } = self;
        apply(vec![x], |b, x| {
            let x = x[0];
            float_only(b, x, "nan_to_num")?;
            let big = match b.ty(x).dtype {
                DType::F32 => f32::MAX as f64,
                _ => f64::MAX,
            };
            let inf = b.weak_scalar(f64::INFINITY);
            let ninf = b.weak_scalar(f64::NEG_INFINITY);
            let is_nan = build_isnan(b, x)?;
            let is_pos = b.compare(Comparison::Equal, x, inf)?;
            let is_neg = b.compare(Comparison::Equal, x, ninf)?;
            let nan_v = b.weak_scalar(nan);
            let pos_v = b.weak_scalar(posinf.unwrap_or(big));
            let neg_v = b.weak_scalar(neginf.unwrap_or(-big));
            let r = b.select(is_neg, neg_v, x)?;
            let r = b.select(is_pos, pos_v, r)?;
            b.select(is_nan, nan_v, r)
        })
    }
}

/// A `clip` call; finish with [`Clip::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Clip {
    x: Operand,
    lo: Option<Operand>,
    hi: Option<Operand>,
}

/// `minimum(maximum(x, lo), hi)` with an omitted bound skipped:
/// `qb::clip(&x).lo(0.0).hi(1.0).eval()`. Bounds may be arrays and broadcast; at a bound the
/// derivative goes to the bound. Both bounds omitted is an error (AR15).
#[track_caller]
pub fn clip(x: impl Into<Operand>) -> Clip {
    Clip {
        x: x.into(),
        lo: None,
        hi: None,
    }
}

impl Clip {
    /// The lower bound.
    #[track_caller]
    pub fn lo(mut self, lo: impl Into<Operand>) -> Clip {
        self.lo = Some(lo.into());
        self
    }

    /// The upper bound.
    #[track_caller]
    pub fn hi(mut self, hi: impl Into<Operand>) -> Clip {
        self.hi = Some(hi.into());
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let has_lo = self.lo.is_some();
        let has_hi = self.hi.is_some();
        if !has_lo && !has_hi {
            return Err(Error::invalid("clip requires lo or hi"));
        }
        let mut operands = vec![self.x];
        operands.extend(self.lo);
        operands.extend(self.hi);
        apply(operands, |b, x| {
            float_only(b, x[0], "clip")?;
            let mut r = x[0];
            let mut next = 1;
            if has_lo {
                r = build_maximum(b, r, x[next])?;
                next += 1;
            }
            if has_hi {
                r = build_minimum(b, r, x[next])?;
            }
            Ok(r)
        })
    }
}

/// `hi + log1p(exp(lo - hi))` with `hi = maximum(a, c)`, `lo = where(a > c, c, a)`; `a + c`
/// when both are the same infinity.
#[track_caller]
fn build_logaddexp(b: &mut GraphBuilder, a: NodeId, c: NodeId) -> Built {
    let hi = build_maximum(b, a, c)?;
    let gt = b.compare(Comparison::Greater, a, c)?;
    let lo = b.select(gt, c, a)?;
    let d = b.sub(lo, hi)?;
    let e = b.unary(UnaryOp::Exp, d)?;
    let l = b.unary(UnaryOp::Log1p, e)?;
    let regular = b.add(hi, l)?;
    let eq = b.compare(Comparison::Equal, a, c)?;
    let fin = build_isfinite(b, a)?;
    let not_fin = build_not(b, fin)?;
    let same_inf = build_and(b, eq, not_fin)?;
    let sum = b.add(a, c)?;
    b.select(same_inf, sum, regular)
}

/// `m * sqrt((a/m)^2 + (c/m)^2)` with `m = stop_gradient(maximum(abs(a), abs(c)))`, replaced
/// by 1 where it is 0 or not finite (so the origin gives exactly 0 with zero derivatives, and
/// NaN propagates); `+inf` where either operand is infinite.
#[track_caller]
fn build_hypot(b: &mut GraphBuilder, a: NodeId, c: NodeId) -> Built {
    let aa = build_abs(b, a)?;
    let ac = build_abs(b, c)?;
    let m = build_maximum(b, aa, ac)?;
    let m = b.stop_gradient(m)?;
    let zero = b.weak_scalar(0.0);
    let is_zero = b.compare(Comparison::Equal, m, zero)?;
    let fin = build_isfinite(b, m)?;
    let not_fin = build_not(b, fin)?;
    let unsafe_m = build_or(b, is_zero, not_fin)?;
    let one = b.weak_scalar(1.0);
    let ms = b.select(unsafe_m, one, m)?;
    let qa = b.div(a, ms)?;
    let qc = b.div(c, ms)?;
    let qa2 = b.mul(qa, qa)?;
    let qc2 = b.mul(qc, qc)?;
    let s = b.add(qa2, qc2)?;
    let r = b.unary(UnaryOp::Sqrt, s)?;
    let regular = b.mul(ms, r)?;
    let inf = b.weak_scalar(f64::INFINITY);
    let a_inf = b.compare(Comparison::Equal, aa, inf)?;
    let c_inf = b.compare(Comparison::Equal, ac, inf)?;
    let any_inf = build_or(b, a_inf, c_inf)?;
    b.select(any_inf, inf, regular)
}

/// Floor remainder: `r = fmod(a, c)`; `r + c` where `r != 0` and the signs of `r` and `c`
/// differ; a zero result takes the sign of `c` (keeping the derivative of `r`).
#[track_caller]
fn build_mod(b: &mut GraphBuilder, a: NodeId, c: NodeId) -> Built {
    // Integers: NumPy's remainder, exact (0 for a zero divisor, numerics.md §12).
    let (ta, tc) = (b.ty(a).clone(), b.ty(c).clone());
    let integer = |t: &quabla_ir::TensorType| t.dtype.is_integer() || t.dtype == DType::Bool;
    if integer(&ta) && integer(&tc) && (ta.dtype.is_integer() || tc.dtype.is_integer()) {
        return b.binary(BinaryOp::Rem, a, c);
    }
    let r = b.binary(BinaryOp::Fmod, a, c)?;
    let zero = b.weak_scalar(0.0);
    let r_nonzero = b.compare(Comparison::NotEqual, r, zero)?;
    let r_neg = b.compare(Comparison::Less, r, zero)?;
    let c_neg = b.compare(Comparison::Less, c, zero)?;
    let differ = b.compare(Comparison::NotEqual, r_neg, c_neg)?;
    let adjust = build_and(b, r_nonzero, differ)?;
    let shifted = b.add(r, c)?;
    // A zero remainder: `z - (stop_gradient(r) - r)` is `z` (the difference is +0) with the
    // derivative of `r`.
    let r_zero = b.compare(Comparison::Equal, r, zero)?;
    let neg_zero = b.weak_scalar(-0.0);
    let signed_zero = b.select(c_neg, neg_zero, zero)?;
    let frozen = b.stop_gradient(r)?;
    let nothing = b.sub(frozen, r)?;
    let zero_result = b.sub(signed_zero, nothing)?;
    let res = b.select(r_zero, zero_result, r)?;
    b.select(adjust, shifted, res)
}

macro_rules! binary_composites {
    ($($(#[$doc:meta])* $name:ident => $build:ident;)*) => {
        super::tensor_methods! {
            #[doc = "The binary composite functions on `Result<Tensor>`."]
            pub trait BinaryCompositeExt;
            $(
                $(#[$doc])*
                pub fn $name(&self, other: impl Into<Operand>) -> Result<Tensor> {
                    $name(self, other)
                }
            )*
        }
        $(
            $(#[$doc])*
            #[track_caller]
            pub fn $name(a: impl Into<Operand>, c: impl Into<Operand>) -> Result<Tensor> {
                apply(vec![a.into(), c.into()], |b, x| {
                    let name = stringify!($name).trim_end_matches('_');
                    float_only(b, x[0], name)?;
                    float_only(b, x[1], name)?;
                    $build(b, x[0], x[1])
                })
            }
        )*
    };
}

binary_composites! {
    /// `log(exp(a) + exp(b))` without overflow; derivative `(0.5, 0.5)` at ties.
    logaddexp => build_logaddexp;
    /// `sqrt(a^2 + b^2)` without intermediate overflow or underflow; derivative
    /// `(a, b) / hypot(a, b)`, 0 at the origin.
    hypot => build_hypot;
    /// Floor remainder (Python `%`): the result has the sign of the divisor
    /// (`mod(-7, 3) = 2`, `mod(7, -3) = -2`); built from `fmod`.
    mod_ => build_mod;
    /// Alias of [`mod_`].
    remainder => build_mod;
}

/// `isclose(a, c)`: elementwise `|a - c| <= atol + rtol * |c|` (NumPy's asymmetric test,
/// `rtol = 1e-5`, `atol = 1e-8` by default) for finite values; infinities are close only to an
/// equal infinity and NaN to nothing (to NaN with [`IsClose::equal_nan`]). Finish with
/// [`IsClose::eval`]; [`allclose`] reduces with `all`.
#[track_caller]
pub fn isclose(a: impl Into<Operand>, c: impl Into<Operand>) -> IsClose {
    IsClose {
        a: a.into(),
        c: c.into(),
        rtol: 1e-5,
        atol: 1e-8,
        equal_nan: false,
        all: false,
    }
}

/// `allclose(a, c)`: whether every element [`isclose`], as a rank-0 bool tensor (so it can be
/// used under a transform; `item_bool` reads it eagerly).
#[track_caller]
pub fn allclose(a: impl Into<Operand>, c: impl Into<Operand>) -> IsClose {
    IsClose {
        all: true,
        ..isclose(a, c)
    }
}

/// An `isclose` or `allclose` call being configured.
#[derive(Debug)]
#[must_use = "finish the call with .eval()"]
pub struct IsClose {
    a: Operand,
    c: Operand,
    rtol: f64,
    atol: f64,
    equal_nan: bool,
    all: bool,
}

impl IsClose {
    /// The relative tolerance (default `1e-5`), relative to `|c|`.
    pub fn rtol(mut self, rtol: f64) -> Self {
        self.rtol = rtol;
        self
    }

    /// The absolute tolerance (default `1e-8`).
    pub fn atol(mut self, atol: f64) -> Self {
        self.atol = atol;
        self
    }

    /// Whether two NaNs are close (default `false`).
    pub fn equal_nan(mut self, equal_nan: bool) -> Self {
        self.equal_nan = equal_nan;
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let IsClose {
            a,
            c,
            rtol,
            atol,
            equal_nan,
            all,
        } = self;
        apply(vec![a, c], |b, x| {
            let (a, c) = (x[0], x[1]);
            let d = b.sub(a, c)?;
            let diff = build_abs(b, d)?;
            let mag = build_abs(b, c)?;
            let r = b.weak_scalar(rtol);
            let scaled = b.mul(r, mag)?;
            let t = b.weak_scalar(atol);
            let bound = b.add(t, scaled)?;
            let within = b.compare(Comparison::LessEqual, diff, bound)?;
            let fa = build_isfinite(b, a)?;
            let fc = build_isfinite(b, c)?;
            let finite = build_and(b, fa, fc)?;
            let same = b.compare(Comparison::Equal, a, c)?;
            let mut close = b.select(finite, within, same)?;
            if equal_nan {
                let na = build_isnan(b, a)?;
                let nc = build_isnan(b, c)?;
                let both = build_and(b, na, nc)?;
                close = build_or(b, close, both)?;
            }
            if !all {
                return Ok(close);
            }
            // all: no element is false (counted in float64, exact below 2^53).
            let not = build_not(b, close)?;
            let count = b.astype(not, DType::F64)?;
            let n = b.sum(count, None, false)?;
            let zero = b.weak_scalar(0.0);
            b.compare(Comparison::Equal, n, zero)
        })
    }
}
