//! The host samplers of numerics.md §9.3.
//!
//! Every sampler validates, in this order, the dtype, its own arguments, the rank (for the
//! initializers) and the shape (no zero extent, an element count and byte size that fit in a
//! `usize`), then allocates the output with `try_reserve_exact` and fills it in row-major
//! order. Values are computed in float64 and rounded once to the requested dtype.

use crate::error::{shape_text, RandomError};
use crate::key::{word, Key};
use quabla_ir::{DType, HostData, Shape};
use std::f64::consts::PI;
use std::sync::Arc;

/// 2^-53: the weight of the lowest of the 53 bits kept from a word.
const TWO_POW_M53: f64 = 1.0 / (1u64 << 53) as f64;

/// Host values drawn by a sampler, in row-major order, in the dtype that was asked for.
#[derive(Clone, Debug, PartialEq)]
pub enum Samples {
    F64(Vec<f64>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

impl Samples {
    /// The dtype of the values.
    pub fn dtype(&self) -> DType {
        match self {
            Samples::F64(_) => DType::F64,
            Samples::F32(_) => DType::F32,
            Samples::Bool(_) => DType::Bool,
            Samples::I32(_) => DType::I32,
            Samples::I64(_) => DType::I64,
        }
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        match self {
            Samples::F64(v) => v.len(),
            Samples::F32(v) => v.len(),
            Samples::Bool(v) => v.len(),
            Samples::I32(v) => v.len(),
            Samples::I64(v) => v.len(),
        }
    }

    /// Whether there are no values (never the case for a sampler's result: shapes have no
    /// zero extents, and a rank-0 shape holds one value).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values widened to float64 (exact; bool as 0 or 1).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self {
            Samples::F64(v) => v.clone(),
            Samples::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Samples::Bool(v) => v.iter().map(|&b| if b { 1.0 } else { 0.0 }).collect(),
            Samples::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Samples::I64(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }

    /// The values as shared typed host storage, the form tensors keep.
    ///
    /// This copies the values into a reference-counted buffer, an allocation that, like any
    /// `Arc`, aborts if the allocator fails; the sampler itself already reported a request it
    /// could not satisfy.
    pub fn into_host_data(self) -> HostData {
        match self {
            Samples::F64(v) => HostData::F64(Arc::from(v)),
            Samples::F32(v) => HostData::F32(Arc::from(v)),
            Samples::Bool(v) => HostData::Bool(Arc::from(v)),
            Samples::I32(v) => HostData::I32(Arc::from(v)),
            Samples::I64(v) => HostData::I64(Arc::from(v)),
        }
    }
}

impl From<Samples> for HostData {
    fn from(samples: Samples) -> HostData {
        samples.into_host_data()
    }
}

/// Samples on `[minval, maxval)`: element `e` is `minval + (maxval - minval) * u_e` with
/// `u_e = (word(k, e) >> 11) * 2^-53`, rounded to `dtype`; a rounded value `>= maxval`
/// becomes the largest dtype value below `maxval`, and one `< minval` the smallest dtype value
/// `>= minval`, so even float32 samples never reach `maxval`.
///
/// `dtype` must be float32 or float64 (TY11); `minval < maxval`, both finite (AR12). When
/// `maxval - minval` overflows float64 (bounds of opposite signs near the float64 limits), the
/// spec's formula would give infinities; the value is then computed as
/// `minval + h * u + h * u` with `h = maxval / 2 - minval / 2`, which stays finite. A float32
/// request for an interval that contains no float32 value is [`RandomError::UniformEmpty`].
pub fn uniform(
    key: &Key,
    shape: &[usize],
    dtype: DType,
    minval: f64,
    maxval: f64,
) -> Result<Samples, RandomError> {
    check_float_dtype(dtype)?;
    if !(minval.is_finite() && maxval.is_finite() && minval < maxval) {
        return Err(RandomError::UniformBounds { minval, maxval });
    }
    let bounds = UniformBounds::new(dtype, minval, maxval)?;
    let n = element_count(shape, dtype)?;
    uniform_values(key.value(), n, shape, &bounds)
}

/// Standard normal samples by the Box–Muller transform of numerics.md §9.3: pair `m` uses
/// `w1 = word(k, 2m)`, `w2 = word(k, 2m + 1)`, `u1 = ((w1 >> 11) + 1) * 2^-53` in `(0, 1]`,
/// `u2 = (w2 >> 11) * 2^-53`, `r = sqrt(-2 ln u1)`, `theta = 2 pi u2`; element `2m` is
/// `r cos theta` and element `2m + 1` is `r sin theta`, dropped when the count is odd.
/// Magnitudes are at most `sqrt(106 ln 2) ≈ 8.5717`.
///
/// `dtype` must be float32 or float64 (TY11). The transcendental functions are `libm`'s, so
/// the bits are the same on every platform.
pub fn normal(key: &Key, shape: &[usize], dtype: DType) -> Result<Samples, RandomError> {
    check_float_dtype(dtype)?;
    let n = element_count(shape, dtype)?;
    normal_values(key.value(), n, shape, dtype, 1.0)
}

/// Boolean samples, element `e` true iff `u_e < p` with `u_e` as for [`uniform`]: `p = 0`
/// gives all false and `p = 1` all true.
///
/// `p` must lie in `[0, 1]` (AR11; NaN is rejected too).
pub fn bernoulli(key: &Key, p: f64, shape: &[usize]) -> Result<Samples, RandomError> {
    check_probability(p)?;
    let n = element_count(shape, DType::Bool)?;
    let k = key.value();
    let mut out = allocate::<bool>(n, shape)?;
    out.extend((0..n as u64).map(|e| unit(word(k, e)) < p));
    Ok(Samples::Bool(out))
}

/// Integer samples on `[minval, maxval)`: with `span = maxval - minval` (at most 2^64 - 1),
/// element `e` is `minval + floor(word(k, e) * span / 2^64)`, the high word of the 128-bit
/// product, so every value is within `span / 2^64` of equally likely (the stream's amendment
/// of numerics.md §9.3, see the facade's docs).
///
/// `dtype` must be int32 or int64 (TY11); `minval < maxval`, and for int32 both within the
/// int32 range (`maxval` up to 2^31, being exclusive): AR12 otherwise.
pub fn randint(
    key: &Key,
    shape: &[usize],
    dtype: DType,
    minval: i64,
    maxval: i64,
) -> Result<Samples, RandomError> {
    let span = randint_span(dtype, minval, maxval)?;
    let n = element_count(shape, dtype)?;
    let k = key.value();
    let value = |e: u64| minval.wrapping_add(mul_high(word(k, e), span) as i64);
    Ok(match dtype {
        DType::I32 => {
            let mut out = allocate::<i32>(n, shape)?;
            // In range by the check of the bounds.
            out.extend((0..n as u64).map(|e| value(e) as i32));
            Samples::I32(out)
        }
        _ => {
            let mut out = allocate::<i64>(n, shape)?;
            out.extend((0..n as u64).map(value));
            Samples::I64(out)
        }
    })
}

/// The span `maxval - minval` of a [`randint`] request, after its checks (TY11 for a dtype
/// other than int32 and int64, AR12 for the bounds).
pub fn randint_span(dtype: DType, minval: i64, maxval: i64) -> Result<u64, RandomError> {
    let (lo, hi) = match dtype {
        DType::I32 => (i64::from(i32::MIN), i64::from(i32::MAX) + 1),
        DType::I64 => (i64::MIN, i64::MAX),
        _ => return Err(RandomError::IntDtype { dtype }),
    };
    if minval >= maxval || minval < lo || maxval > hi {
        return Err(RandomError::IntBounds {
            dtype,
            minval,
            maxval,
        });
    }
    // At most 2^64 - 1: the difference of two i64 values.
    Ok(maxval.wrapping_sub(minval) as u64)
}

/// The high 64 bits of the 128-bit product `a * b`.
pub const fn mul_high(a: u64, b: u64) -> u64 {
    ((a as u128 * b as u128) >> 64) as u64
}

/// Glorot (Xavier) normal initialization: standard normal samples (as [`normal`]) times
/// `sqrt(2 / (fan_in + fan_out))` in float64, then rounded; not truncated.
///
/// With `r = prod(shape[..rank - 2])`, `fan_in = shape[rank - 2] * r` and
/// `fan_out = shape[rank - 1] * r`. The shape must have rank >= 2 (AR12).
pub fn glorot_normal(key: &Key, shape: &[usize], dtype: DType) -> Result<Samples, RandomError> {
    check_float_dtype(dtype)?;
    let fans = Fans::of("glorot_normal", shape)?;
    let n = element_count(shape, dtype)?;
    let scale = (2.0 / (fans.fan_in + fans.fan_out)).sqrt();
    normal_values(key.value(), n, shape, dtype, scale)
}

/// Glorot (Xavier) uniform initialization: [`uniform`] on `[-l, l)` with
/// `l = sqrt(6 / (fan_in + fan_out))` (fans as for [`glorot_normal`]; rank >= 2, AR12).
pub fn glorot_uniform(key: &Key, shape: &[usize], dtype: DType) -> Result<Samples, RandomError> {
    check_float_dtype(dtype)?;
    let fans = Fans::of("glorot_uniform", shape)?;
    let n = element_count(shape, dtype)?;
    let limit = (6.0 / (fans.fan_in + fans.fan_out)).sqrt();
    let bounds = UniformBounds::new(dtype, -limit, limit)?;
    uniform_values(key.value(), n, shape, &bounds)
}

/// He (Kaiming) normal initialization: standard normal samples times `sqrt(2 / fan_in)` in
/// float64, then rounded; not truncated (fans as for [`glorot_normal`]; rank >= 2, AR12).
pub fn he_normal(key: &Key, shape: &[usize], dtype: DType) -> Result<Samples, RandomError> {
    check_float_dtype(dtype)?;
    let fans = Fans::of("he_normal", shape)?;
    let n = element_count(shape, dtype)?;
    let scale = (2.0 / fans.fan_in).sqrt();
    normal_values(key.value(), n, shape, dtype, scale)
}

/// The scale of a normal initializer for `shape` (rank >= 2, AR12): `sqrt(2 / (fan_in +
/// fan_out))` for `glorot_normal`, `sqrt(2 / fan_in)` for `he_normal` (`initializer` names
/// which), as [`glorot_normal`] and [`he_normal`] multiply their normal samples by.
pub fn initializer_scale(initializer: &'static str, shape: &[usize]) -> Result<f64, RandomError> {
    let fans = Fans::of(initializer, shape)?;
    Ok(if initializer == "he_normal" {
        (2.0 / fans.fan_in).sqrt()
    } else {
        (2.0 / (fans.fan_in + fans.fan_out)).sqrt()
    })
}

/// AR11: a Bernoulli probability in `[0, 1]` (NaN refused).
pub fn check_probability(p: f64) -> Result<(), RandomError> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(RandomError::BernoulliP { p })
    }
}

/// The element count of a sample of `shape` in `dtype`: SH6 for a zero extent, `TooLarge`
/// when the count or its byte size does not fit in a `usize`.
pub fn sample_count(shape: &[usize], dtype: DType) -> Result<usize, RandomError> {
    element_count(shape, dtype)
}

/// TY11: samplers produce float32 or float64 only.
pub fn check_float_dtype(dtype: DType) -> Result<(), RandomError> {
    match dtype {
        DType::F32 | DType::F64 => Ok(()),
        DType::Bool | DType::I32 | DType::I64 => Err(RandomError::Dtype { dtype }),
    }
}

/// The number of elements of `shape`, checking that no extent is zero and that the count and
/// its size in bytes of `dtype` fit in a `usize`.
fn element_count(shape: &[usize], dtype: DType) -> Result<usize, RandomError> {
    if shape.contains(&0) {
        // Reuse the IR's wording for zero extents (SH6), so every constructor says the same.
        let message = match Shape::new(shape.to_vec()) {
            Err(e) => e.to_string(),
            Ok(_) => format!(
                "empty slices are not supported: shape {} has a zero extent",
                shape_text(shape)
            ),
        };
        return Err(RandomError::EmptyShape {
            shape: shape.to_vec(),
            message,
        });
    }
    let too_large = || RandomError::TooLarge {
        shape: shape.to_vec(),
    };
    let n = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(too_large)?;
    n.checked_mul(dtype.itemsize()).ok_or_else(too_large)?;
    Ok(n)
}

/// An empty vector with room for exactly `n` values, or `OutOfMemory` when the allocator
/// cannot provide it (never an abort).
pub(crate) fn allocate<T>(n: usize, shape: &[usize]) -> Result<Vec<T>, RandomError> {
    let bytes = n.saturating_mul(std::mem::size_of::<T>());
    let mut out = Vec::new();
    out.try_reserve_exact(n)
        .map_err(|_| RandomError::OutOfMemory {
            bytes,
            shape: shape.to_vec(),
        })?;
    Ok(out)
}

/// The top 53 bits of a word as a float in `[0, 1)` (exact).
#[inline]
fn unit(w: u64) -> f64 {
    (w >> 11) as f64 * TWO_POW_M53
}

/// The fans of an initializer's shape, in float64 (numerics.md §9.3).
struct Fans {
    fan_in: f64,
    fan_out: f64,
}

impl Fans {
    fn of(initializer: &'static str, shape: &[usize]) -> Result<Fans, RandomError> {
        let rank_error = || RandomError::Rank {
            initializer,
            shape: shape.to_vec(),
        };
        let (&fan_out_extent, rest) = shape.split_last().ok_or_else(rank_error)?;
        let (&fan_in_extent, batch) = rest.split_last().ok_or_else(rank_error)?;
        // Float64 products cannot overflow for shapes whose element count fits a usize.
        let r: f64 = batch.iter().map(|&d| d as f64).product();
        Ok(Fans {
            fan_in: fan_in_extent as f64 * r,
            fan_out: fan_out_extent as f64 * r,
        })
    }
}

/// The validated bounds of a uniform request and the replacement values of §9.3: what a
/// traced sampler needs to reproduce [`uniform`] with tensor operations.
#[derive(Clone, Debug, PartialEq)]
pub struct UniformBounds {
    dtype: DType,
    minval: f64,
    maxval: f64,
    /// `maxval - minval`, or half the span when the span overflows (see [`uniform`]).
    span: f64,
    span_overflows: bool,
    /// The largest float32 value below `maxval` and the smallest float32 value `>= minval`
    /// (used for float32 requests only).
    f32_below_max: f32,
    f32_at_least_min: f32,
}

impl UniformBounds {
    /// Checks the dtype (TY11) and the bounds (AR12, and an interval without a value of the
    /// dtype) exactly as [`uniform`] does.
    pub fn checked(dtype: DType, minval: f64, maxval: f64) -> Result<UniformBounds, RandomError> {
        check_float_dtype(dtype)?;
        if !(minval.is_finite() && maxval.is_finite() && minval < maxval) {
            return Err(RandomError::UniformBounds { minval, maxval });
        }
        UniformBounds::new(dtype, minval, maxval)
    }

    /// The bounds of [`glorot_uniform`] for `shape` (rank >= 2, AR12).
    pub fn glorot(dtype: DType, shape: &[usize]) -> Result<UniformBounds, RandomError> {
        check_float_dtype(dtype)?;
        let fans = Fans::of("glorot_uniform", shape)?;
        let limit = (6.0 / (fans.fan_in + fans.fan_out)).sqrt();
        UniformBounds::new(dtype, -limit, limit)
    }

    /// The dtype of the samples.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The inclusive lower bound.
    pub fn minval(&self) -> f64 {
        self.minval
    }
    /// The exclusive upper bound.
    pub fn maxval(&self) -> f64 {
        self.maxval
    }
    /// `maxval - minval`, or, when that overflows, `maxval / 2 - minval / 2`; the value is
    /// then `minval + span * u + span * u`.
    pub fn span(&self) -> (f64, bool) {
        (self.span, self.span_overflows)
    }
    /// The replacement of a float64 value `>= maxval`: the largest float64 below `maxval`.
    pub fn f64_below_max(&self) -> f64 {
        self.maxval.next_down()
    }
    /// The replacements of a float32 value `>= maxval` and `< minval`.
    pub fn f32_replacements(&self) -> (f32, f32) {
        (self.f32_below_max, self.f32_at_least_min)
    }

    /// `minval < maxval`, both finite, must have been checked.
    fn new(dtype: DType, minval: f64, maxval: f64) -> Result<UniformBounds, RandomError> {
        let span = maxval - minval;
        let span_overflows = !span.is_finite();
        let span = if span_overflows {
            maxval / 2.0 - minval / 2.0
        } else {
            span
        };
        let f32_below_max = f32_below(maxval);
        let f32_at_least_min = f32_at_least(minval);
        if dtype == DType::F32 && f64::from(f32_at_least_min) > f64::from(f32_below_max) {
            return Err(RandomError::UniformEmpty {
                dtype,
                minval,
                maxval,
            });
        }
        Ok(UniformBounds {
            dtype,
            minval,
            maxval,
            span,
            span_overflows,
            f32_below_max,
            f32_at_least_min,
        })
    }

    /// The float64 value of §9.3 for `u` in `[0, 1)`, before rounding and replacement.
    #[inline]
    fn value(&self, u: f64) -> f64 {
        if self.span_overflows {
            self.minval + self.span * u + self.span * u
        } else {
            self.minval + self.span * u
        }
    }

    #[inline]
    fn f64_sample(&self, u: f64) -> f64 {
        let v = self.value(u);
        if v >= self.maxval {
            self.maxval.next_down()
        } else if v < self.minval {
            self.minval
        } else {
            v
        }
    }

    #[inline]
    fn f32_sample(&self, u: f64) -> f32 {
        let v = self.value(u) as f32;
        if f64::from(v) >= self.maxval {
            self.f32_below_max
        } else if f64::from(v) < self.minval {
            self.f32_at_least_min
        } else {
            v
        }
    }
}

/// The largest float32 value strictly below `x` (`-inf` when there is none).
fn f32_below(x: f64) -> f32 {
    let r = x as f32;
    if f64::from(r) >= x {
        r.next_down()
    } else {
        r
    }
}

/// The smallest float32 value `>= x` (`+inf` when there is none).
fn f32_at_least(x: f64) -> f32 {
    let r = x as f32;
    if f64::from(r) < x {
        r.next_up()
    } else {
        r
    }
}

fn uniform_values(
    k: u64,
    n: usize,
    shape: &[usize],
    bounds: &UniformBounds,
) -> Result<Samples, RandomError> {
    let words = (0..n as u64).map(|e| unit(word(k, e)));
    Ok(match bounds.dtype {
        DType::F32 => {
            let mut out = allocate::<f32>(n, shape)?;
            out.extend(words.map(|u| bounds.f32_sample(u)));
            Samples::F32(out)
        }
        _ => {
            let mut out = allocate::<f64>(n, shape)?;
            out.extend(words.map(|u| bounds.f64_sample(u)));
            Samples::F64(out)
        }
    })
}

/// Pair `m` of the Box–Muller transform, each value multiplied by `scale` in float64.
#[inline]
fn normal_pair(k: u64, m: u64, scale: f64) -> (f64, f64) {
    let w1 = word(k, 2 * m);
    let w2 = word(k, 2 * m + 1);
    let u1 = ((w1 >> 11) + 1) as f64 * TWO_POW_M53;
    let u2 = unit(w2);
    let r = libm::sqrt(-2.0 * libm::log(u1));
    let theta = 2.0 * PI * u2;
    (r * libm::cos(theta) * scale, r * libm::sin(theta) * scale)
}

fn normal_values(
    k: u64,
    n: usize,
    shape: &[usize],
    dtype: DType,
    scale: f64,
) -> Result<Samples, RandomError> {
    match dtype {
        DType::F32 => {
            let mut out = allocate::<f32>(n, shape)?;
            fill_normal(k, n, scale, |v| out.push(v as f32));
            Ok(Samples::F32(out))
        }
        _ => {
            let mut out = allocate::<f64>(n, shape)?;
            fill_normal(k, n, scale, |v| out.push(v));
            Ok(Samples::F64(out))
        }
    }
}

/// Feeds the first `n` values of the normal stream of `k` to `push`, in order.
fn fill_normal(k: u64, n: usize, scale: f64, mut push: impl FnMut(f64)) {
    let pairs = n / 2;
    for m in 0..pairs as u64 {
        let (a, b) = normal_pair(k, m, scale);
        push(a);
        push(b);
    }
    if n % 2 == 1 {
        // The last pair's sine is dropped.
        push(normal_pair(k, pairs as u64, scale).0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float32_neighbours() {
        assert_eq!(f32_below(1.0), 1.0f32.next_down());
        assert_eq!(f32_at_least(1.0), 1.0);
        // 0.1 is not a float32: its neighbours bracket it.
        assert!(f64::from(f32_below(0.1)) < 0.1);
        assert!(f64::from(f32_below(0.1).next_up()) >= 0.1);
        assert!(f64::from(f32_at_least(0.1)) >= 0.1);
        assert!(f64::from(f32_at_least(0.1).next_down()) < 0.1);
        assert_eq!(f32_below(1e300), f32::MAX);
        assert_eq!(f32_at_least(-1e300), -f32::MAX);
        assert_eq!(f32_at_least(1e300), f32::INFINITY);
    }

    #[test]
    fn the_first_pair_is_the_normal_golden_value() {
        let (a, b) = normal_pair(0, 0, 1.0);
        assert!((a - -0.452757740217458).abs() < 1e-15);
        assert!((b - 0.20776603893419193).abs() < 1e-15);
    }
}
