//! The generator of numerics.md §9 on key tensors: `split`, `fold_in` and every sampler as a
//! composition of int64 and float64 operations, so that they record into a trace like any
//! other operation (inside `jit`, per example under `vmap`, in loop bodies) and run eagerly
//! through the same kernels.
//!
//! A key tensor is an int64 tensor whose bits are the 64-bit state of a key (two's
//! complement: `Key(2^64 - 1)` is `-1`). The SplitMix64 arithmetic modulo 2^64 is int64
//! arithmetic, which wraps (numerics.md §12): `+` and `*` give the same bits as on unsigned
//! words, and the unsigned right shifts of `mix64` are `right_shift_logical`. Word `i` of a
//! key is `mix64(k + (i + 1) * GAMMA)` with the offsets `(i + 1) * GAMMA` computed on the host
//! as a constant, so each sampler is elementwise over its output shape: a batched key (under
//! `vmap`) broadcasts against the constant offsets and gives every example its own stream.
//!
//! Every function here reproduces its host counterpart of `quabla-random` bit for bit
//! (`quabla/tests/random_traced.rs` compares them): the float formulas apply the same IEEE
//! operations to the same operands, and the CPU backend's transcendental functions are the
//! `libm` ones. This module validates nothing about the request beyond the key: its callers
//! in `random/mod.rs` check dtypes, bounds and shapes with `quabla-random`'s own checks first.

use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::ops::compare::{greater_equal, less, where_};
use crate::ops::elementwise::{
    add, bitwise_and, bitwise_xor, cos, log, mul, right_shift_logical, sin, sqrt,
};
use crate::tensor::Tensor;
use quabla_ir::{DType, HostData, Shape};
use quabla_random::{UniformBounds, GAMMA, SPLIT_TAG};
use std::f64::consts::PI;

/// The multipliers of the SplitMix64 finalizer, as int64 bit patterns.
const MIX1: i64 = 0xBF58_476D_1CE4_E5B9_u64 as i64;
const MIX2: i64 = 0x94D0_49BB_1331_11EB_u64 as i64;
/// 2^-53: the weight of the lowest of the 53 bits kept from a word.
const TWO_POW_M53: f64 = 1.0 / (1u64 << 53) as f64;
/// The low 32 bits of a word.
const LOW32: i64 = 0xFFFF_FFFF;

/// TY (not int64) or SH (not a single key) for a key tensor given to `function`.
pub(crate) fn check_key(key: &Tensor, function: &str) -> Result<()> {
    if key.dtype() != DType::I64 {
        return Err(Error::Type {
            message: format!(
                "{function} takes a Key or an int64 key tensor, got a {} tensor; make key tensors with random.key_data(key)",
                key.dtype().name()
            ),
        });
    }
    if key.ndim() != 0 {
        return Err(Error::shape(
            "random",
            format!(
                "{function} takes a single key (shape []), got a key array of shape {:?}; map over an array of keys with vmap",
                key.shape()
            ),
        ));
    }
    Ok(())
}

/// The SplitMix64 finalizer on int64 words.
fn mix64(z: Tensor) -> Result<Tensor> {
    let z = mul(bitwise_xor(&z, right_shift_logical(&z, 30))?, MIX1)?;
    let z = mul(bitwise_xor(&z, right_shift_logical(&z, 27))?, MIX2)?;
    bitwise_xor(&z, right_shift_logical(&z, 31))
}

/// The int64 constant of `shape` whose element `e` (row-major) is `value(e)`.
fn counters(shape: &[usize], value: impl Fn(u64) -> u64) -> Result<Tensor> {
    let shape = Shape::new(shape.to_vec())?;
    let n = shape.size();
    let mut data: Vec<i64> = Vec::new();
    data.try_reserve_exact(n)
        .map_err(|_| Error::out_of_memory(n as u128 * 8, "the counters of random samples"))?;
    data.extend((0..n as u64).map(|e| value(e) as i64));
    Ok(Tensor::from_parts(shape, HostData::I64(data.into()), false))
}

/// The bool constant of `shape` that is true at odd row-major positions.
fn odd_positions(shape: &[usize]) -> Result<Tensor> {
    let shape = Shape::new(shape.to_vec())?;
    let n = shape.size();
    let mut data: Vec<bool> = Vec::new();
    data.try_reserve_exact(n)
        .map_err(|_| Error::out_of_memory(n as u128, "the positions of random samples"))?;
    data.extend((0..n).map(|e| e % 2 == 1));
    Ok(Tensor::from_parts(
        shape,
        HostData::Bool(data.into()),
        false,
    ))
}

/// Words `index(e)` of `key`'s stream for every element `e` of `shape`.
fn words(key: &Tensor, shape: &[usize], index: impl Fn(u64) -> u64) -> Result<Tensor> {
    let offsets = counters(shape, |e| index(e).wrapping_add(1).wrapping_mul(GAMMA))?;
    mix64(add(key, offsets)?)
}

/// The top 53 bits of each word as a float64 in `[0, 1)` (exact).
fn unit(words: &Tensor) -> Result<Tensor> {
    mul(
        right_shift_logical(words, 11)?.astype(DType::F64)?,
        TWO_POW_M53,
    )
}

/// The top 52 bits of each word as the float64 `(2 m + 1) 2^-53`, the midpoint of one of
/// 2^52 equal bins: strictly inside `(0, 1)`, so logarithms and quantiles stay finite.
fn open_unit(words: &Tensor) -> Result<Tensor> {
    let odd = add(mul(right_shift_logical(words, 12)?, 2)?, 1)?;
    mul(odd.astype(DType::F64)?, TWO_POW_M53)
}

/// `split(key, num)` of a key tensor: the int64 keys of shape `[num]`, child `j` being
/// `mix64(word(k, j) ^ SPLIT_TAG)`. `num >= 1` must have been checked.
pub(crate) fn split(key: &Tensor, num: usize) -> Result<Tensor> {
    let w = words(key, &[num], |j| j)?;
    mix64(bitwise_xor(w, SPLIT_TAG as i64)?)
}

/// `fold_in(key, data)`: `mix64(k ^ word(data, 0))` with `data` an int64 scalar tensor.
pub(crate) fn fold_in(key: &Tensor, data: &Tensor) -> Result<Tensor> {
    let word0 = mix64(add(data, GAMMA as i64)?)?;
    mix64(bitwise_xor(key, word0)?)
}

/// `uniform` of numerics.md §9.3 for a validated request.
pub(crate) fn uniform(key: &Tensor, shape: &[usize], bounds: &UniformBounds) -> Result<Tensor> {
    let u = unit(&words(key, shape, |e| e)?)?;
    let (lo, hi) = (bounds.minval(), bounds.maxval());
    let value = match bounds.span() {
        (h, true) => {
            let hu = mul(&u, h)?;
            add(add(&hu, lo)?, &hu)?
        }
        (span, false) => add(mul(&u, span)?, lo)?,
    };
    match bounds.dtype() {
        DType::F32 => {
            let (below_max, at_least_min) = bounds.f32_replacements();
            let v32 = value.astype(DType::F32)?;
            let wide = v32.astype(DType::F64)?;
            let low = where_(less(&wide, lo)?, f32_scalar(at_least_min), &v32)?;
            where_(greater_equal(&wide, hi)?, f32_scalar(below_max), low)
        }
        _ => {
            let low = where_(less(&value, lo)?, lo, &value)?;
            where_(greater_equal(&value, hi)?, bounds.f64_below_max(), low)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Bounds given as tensors
//
// The formulas of `uniform`, `randint` and `bernoulli` with bounds that vary per element (or are
// traced): the same IEEE operations as the host formulas, element by element, so a tensor bound
// gives the bits a number does. The neighbours of a float (`next_down`, the float32 values
// around a float64) are computed with arithmetic whose result rounds to the neighbour: the IR
// has no bit casts.

/// 2^-53 (1 + 2^-10): `x - |x| c` lies strictly between half an ulp and one and a half ulps
/// below a normal `x` of magnitude at least 2^-1000, so it rounds to the next float below.
const NEXT_DOWN_F64: f64 = (1.0 + 1.0 / 1024.0) / 9_007_199_254_740_992.0;
/// The same for float32 values, evaluated in float64 and rounded to float32.
const NEXT_DOWN_F32: f64 = (1.0 + 1.0 / 1024.0) / 16_777_216.0;
/// Below 2^-1021 every float64 is a multiple of 2^-1074 and so are its neighbours.
const TINY_F64: f64 = f64::from_bits(2 << 52); // 2^-1021
/// Between 2^-1021 and 2^-1000 the product `|x| c` would be subnormal: scale by 2^100 first.
const SMALL_F64: f64 = f64::from_bits(23 << 52); // 2^-1000
/// Below 2^-125 every float32 is a multiple of 2^-149 and so are its neighbours.
const TINY_F32: f64 = f64::from_bits(898 << 52); // 2^-125

/// The largest float64 below each element of the finite float64 `x` (`f64::next_down`).
pub(crate) fn next_down_f64(x: &Tensor) -> Result<Tensor> {
    let magnitude = x.abs()?;
    let down = |v: &Tensor| -> Result<Tensor> {
        let step = mul(v.abs()?, NEXT_DOWN_F64)?;
        v.sub(&step)
    };
    let normal = down(x)?;
    let scale = 2f64.powi(100);
    let small = mul(down(&mul(x, scale)?)?, 1.0 / scale)?;
    let tiny = add(x, -f64::from_bits(1))?;
    let out = where_(less(&magnitude, SMALL_F64)?, small, normal)?;
    where_(less(&magnitude, TINY_F64)?, tiny, out)
}

/// The largest float32 below each element of the float32 `r` (`f32::next_down`; the largest
/// float32 below `+inf` is `f32::MAX`), as float32.
fn next_down_f32(r: &Tensor) -> Result<Tensor> {
    let wide = r.astype(DType::F64)?;
    let magnitude = wide.abs()?;
    let normal = wide.sub(&mul(&magnitude, NEXT_DOWN_F32)?)?;
    let tiny = add(&wide, -f64::from(f32::from_bits(1)))?;
    let out = where_(less(&magnitude, TINY_F32)?, tiny, normal)?;
    let out = where_(
        crate::ops::compare::equal(&wide, f64::INFINITY)?,
        f64::from(f32::MAX),
        out,
    )?;
    out.astype(DType::F32)
}

/// The largest float32 strictly below each element of the float64 `x` (`-inf` when there is
/// none), as float32.
pub(crate) fn f32_below(x: &Tensor) -> Result<Tensor> {
    let r = x.astype(DType::F32)?;
    let at_or_above = greater_equal(r.astype(DType::F64)?, x)?;
    where_(at_or_above, next_down_f32(&r)?, &r)
}

/// The smallest float32 at least each element of the float64 `x` (`+inf` when there is none),
/// as float32.
pub(crate) fn f32_at_least(x: &Tensor) -> Result<Tensor> {
    let r = x.astype(DType::F32)?;
    let below = less(r.astype(DType::F64)?, x)?;
    let up = next_down_f32(&r.neg()?)?.neg()?;
    where_(below, up, &r)
}

/// `uniform` with float64 bounds `lo`, `hi` of the sample's shape: element `e` is the host
/// formula with the bounds `(lo_e, hi_e)` (numerics.md §9.3 and its overflow form). An element
/// whose bounds are not finite with `lo < hi` (or, for float32, hold no float32 value) is NaN:
/// traced bounds cannot be checked before the samples exist.
pub(crate) fn uniform_between(
    key: &Tensor,
    shape: &[usize],
    dtype: DType,
    lo: &Tensor,
    hi: &Tensor,
) -> Result<Tensor> {
    let u = unit(&words(key, shape, |e| e)?)?;
    let span = hi.sub(lo)?;
    let overflows = span.isfinite()?.logical_not()?;
    let half = mul(hi, 0.5)?.sub(&mul(lo, 0.5)?)?;
    let h = where_(&overflows, &half, &span)?;
    let hu = mul(&h, &u)?;
    let plain = add(lo, &hu)?;
    let value = where_(&overflows, add(&plain, &hu)?, &plain)?;
    let mut valid = lo
        .isfinite()?
        .logical_and(hi.isfinite()?)?
        .logical_and(less(lo, hi)?)?;
    let out = match dtype {
        DType::F32 => {
            let (below_max, at_least_min) = (f32_below(hi)?, f32_at_least(lo)?);
            valid = valid.logical_and(crate::ops::compare::less_equal(
                at_least_min.astype(DType::F64)?,
                below_max.astype(DType::F64)?,
            )?)?;
            let v32 = value.astype(DType::F32)?;
            let wide = v32.astype(DType::F64)?;
            let low = where_(less(&wide, lo)?, at_least_min, &v32)?;
            where_(greater_equal(&wide, hi)?, below_max, low)?
        }
        _ => {
            let low = where_(less(&value, lo)?, lo, &value)?;
            where_(greater_equal(&value, hi)?, next_down_f64(hi)?, low)?
        }
    };
    where_(valid, out, f64::NAN)
}

/// `randint` with int64 bounds `lo`, `hi` of the sample's shape: element `e` is
/// `lo_e + mul_high(word(k, e), hi_e - lo_e)` (the span as an unsigned 64-bit word), as for
/// constant bounds. An element with `hi_e <= lo_e` is `lo_e` (JAX's convention: traced bounds
/// cannot be checked).
pub(crate) fn randint_between(
    key: &Tensor,
    shape: &[usize],
    dtype: DType,
    lo: &Tensor,
    hi: &Tensor,
) -> Result<Tensor> {
    let w = words(key, shape, |e| e)?;
    let span = where_(crate::ops::compare::less_equal(hi, lo)?, 1i64, hi.sub(lo)?)?;
    let span_low = bitwise_and(&span, LOW32)?;
    let span_high = right_shift_logical(&span, 32)?;
    let high = mul_high_parts(&w, span_low, span_high)?;
    add(high, lo)?.astype(dtype)
}

/// `bernoulli` with a float64 probability `p` of the sample's shape: `u_e < p_e`.
pub(crate) fn bernoulli_between(key: &Tensor, shape: &[usize], p: &Tensor) -> Result<Tensor> {
    less(unit(&words(key, shape, |e| e)?)?, p)
}

/// A float32 scalar constant (exact, and never promoting the other operand of `where`).
fn f32_scalar(value: f32) -> Tensor {
    Tensor::from_parts(Shape::scalar(), HostData::F32(vec![value].into()), false)
}

/// `bernoulli`: element `e` is `u_e < p`.
pub(crate) fn bernoulli(key: &Tensor, p: f64, shape: &[usize]) -> Result<Tensor> {
    less(unit(&words(key, shape, |e| e)?)?, p)
}

/// Standard normal samples times `scale` (Box–Muller of numerics.md §9.3), rounded to
/// `dtype`: element `e` uses the words `2m` and `2m + 1` of its pair `m = e / 2` and takes
/// the cosine (even `e`) or the sine (odd `e`), so each element is computed on its own.
pub(crate) fn normal(key: &Tensor, shape: &[usize], dtype: DType, scale: f64) -> Result<Tensor> {
    let w1 = words(key, shape, |e| e & !1)?;
    let w2 = words(key, shape, |e| e | 1)?;
    let u1 = mul(
        add(right_shift_logical(&w1, 11)?, 1)?.astype(DType::F64)?,
        TWO_POW_M53,
    )?;
    let u2 = unit(&w2)?;
    let r = sqrt(mul(log(&u1)?, -2.0)?)?;
    let theta = mul(&u2, 2.0 * PI)?;
    let z = where_(
        odd_positions(shape)?,
        mul(&r, sin(&theta)?)?,
        mul(&r, cos(&theta)?)?,
    )?;
    // Multiplying by 1 is exact: the standard normal skips it.
    let z = if scale == 1.0 { z } else { mul(z, scale)? };
    z.astype(dtype)
}

/// The high word of the 128-bit product of each word with the constant `span`.
fn mul_high(w: &Tensor, span: u64) -> Result<Tensor> {
    let (span_low, span_high) = ((span & 0xFFFF_FFFF) as i64, (span >> 32) as i64);
    mul_high_parts(w, span_low, span_high)
}

/// The high word of the 128-bit product of each word with the 64-bit span given by its low and
/// high 32-bit halves, from the products of 32-bit halves (each fits in 64 bits, and no
/// partial sum carries out).
fn mul_high_parts<S: Into<Operand> + Clone>(
    w: &Tensor,
    span_low: S,
    span_high: S,
) -> Result<Tensor> {
    let w_low = bitwise_and(w, LOW32)?;
    let w_high = right_shift_logical(w, 32)?;
    let t = mul(&w_low, span_low.clone())?;
    let u = add(mul(&w_high, span_low)?, right_shift_logical(&t, 32)?)?;
    let v = add(mul(&w_low, span_high.clone())?, bitwise_and(&u, LOW32)?)?;
    add(
        add(mul(&w_high, span_high)?, right_shift_logical(&u, 32)?)?,
        right_shift_logical(&v, 32)?,
    )
}

/// `randint` for a validated request: `minval + mul_high(word(k, e), span)` in `dtype`.
pub(crate) fn randint(
    key: &Tensor,
    shape: &[usize],
    dtype: DType,
    minval: i64,
    span: u64,
) -> Result<Tensor> {
    let w = words(key, shape, |e| e)?;
    add(mul_high(&w, span)?, minval)?.astype(dtype)
}

/// Gumbel noise `-log(-log(u))` of `shape` in float64, `u` the open unit value of each word.
pub(crate) fn gumbel(key: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let u = open_unit(&words(key, shape, |e| e)?)?;
    log(log(u)?.neg()?)?.neg()
}

/// `permutation(key, n)`: the stable argsort of the words `0..n` read as int64.
pub(crate) fn permutation(key: &Tensor, n: usize) -> Result<Tensor> {
    crate::ops::sorting::argsort(words(key, &[n], |e| e)?).eval()
}

/// Wichura's AS241 (PPND16) coefficients of the inverse normal CDF, highest degree first:
/// the central rational function (|p - 1/2| <= 0.425) and the two tail ones.
const CENTRAL_NUM: [f64; 8] = [
    2509.0809287301227,
    33430.57558358813,
    67265.7709270087,
    45921.95393154987,
    13731.69376550946,
    1971.5909503065513,
    133.14166789178438,
    3.3871328727963665,
];
const CENTRAL_DEN: [f64; 8] = [
    5226.495278852854,
    28729.085735721943,
    39307.89580009271,
    21213.794301586597,
    5394.196021424751,
    687.1870074920579,
    42.31333070160091,
    1.0,
];
const NEAR_NUM: [f64; 8] = [
    0.0007745450142783414,
    0.022723844989269184,
    0.2417807251774506,
    1.2704582524523684,
    3.6478483247632045,
    5.769497221460691,
    4.630337846156546,
    1.4234371107496835,
];
const NEAR_DEN: [f64; 8] = [
    1.0507500716444169e-09,
    0.0005475938084995345,
    0.015198666563616457,
    0.14810397642748008,
    0.6897673349851,
    1.6763848301838038,
    2.053191626637759,
    1.0,
];
const FAR_NUM: [f64; 8] = [
    2.0103343992922881e-07,
    2.7115555687434876e-05,
    0.0012426609473880784,
    0.026532189526576124,
    0.29656057182850487,
    1.7848265399172913,
    5.463784911164114,
    6.657904643501103,
];
const FAR_DEN: [f64; 8] = [
    2.0442631033899397e-15,
    1.421511758316446e-07,
    1.8463183175100548e-05,
    0.0007868691311456133,
    0.014875361290850615,
    0.1369298809227358,
    0.599832206555888,
    1.0,
];

/// Horner's evaluation of `coefficients` (highest degree first) at `r`.
fn polynomial(coefficients: &[f64; 8], r: &Tensor) -> Result<Tensor> {
    let mut acc = mul(r, coefficients[0])?;
    for (i, &c) in coefficients[1..].iter().enumerate() {
        acc = add(acc, c)?;
        if i + 2 < coefficients.len() {
            acc = mul(acc, r)?;
        }
    }
    Ok(acc)
}

/// The inverse of the standard normal CDF at float64 `p` in `(0, 1)` (AS241: about 1e-16
/// relative), each branch computed for every element and the right one selected.
fn normal_quantile(p: &Tensor) -> Result<Tensor> {
    let q = add(p, -0.5)?;
    let r_central = add(mul(&q, &q)?.neg()?, 0.180625)?;
    let central = mul(
        &q,
        polynomial(&CENTRAL_NUM, &r_central)?.div(polynomial(&CENTRAL_DEN, &r_central)?)?,
    )?;
    let smaller = crate::ops::elementwise::minimum(p, add(p.neg()?, 1.0)?)?;
    let r = sqrt(log(smaller)?.neg()?)?;
    let near_r = add(&r, -1.6)?;
    let near = polynomial(&NEAR_NUM, &near_r)?.div(polynomial(&NEAR_DEN, &near_r)?)?;
    let far_r = add(&r, -5.0)?;
    let far = polynomial(&FAR_NUM, &far_r)?.div(polynomial(&FAR_DEN, &far_r)?)?;
    let tail = where_(crate::ops::compare::less_equal(&r, 5.0)?, near, far)?;
    let tail = where_(less(&q, 0.0)?, tail.neg()?, tail)?;
    where_(
        crate::ops::compare::less_equal(q.abs()?, 0.425)?,
        central,
        tail,
    )
}

/// `truncated_normal` for a validated request: `x = quantile(cdf_lo + (cdf_hi - cdf_lo) u)`
/// with `u = (2 (w >> 12) + 1) 2^-53` strictly inside `(0, 1)`, negated when `flip` (the
/// bounds were mirrored into the lower tail, where the CDF keeps its relative precision),
/// then clamped to `[lower, upper]` and rounded to `dtype`.
pub(crate) fn truncated_normal(
    key: &Tensor,
    shape: &[usize],
    dtype: DType,
    plan: &TruncatedPlan,
) -> Result<Tensor> {
    let u = open_unit(&words(key, shape, |e| e)?)?;
    let p = add(mul(&u, plan.cdf_span)?, plan.cdf_lo)?;
    let x = normal_quantile(&p)?;
    let x = if plan.flip { x.neg()? } else { x };
    let x = where_(less(&x, plan.lower)?, plan.lower, &x)?;
    let x = where_(greater_equal(&x, plan.upper)?, plan.upper, &x)?;
    x.astype(dtype)
}

/// The host constants of a `truncated_normal` request.
#[derive(Debug)]
pub(crate) struct TruncatedPlan {
    pub lower: f64,
    pub upper: f64,
    pub flip: bool,
    pub cdf_lo: f64,
    pub cdf_span: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values around every boundary of the neighbour formulas: zeros, subnormals, the normal
    /// range's ends, powers of two and their neighbours of both signs, the float32 range, and
    /// a spread of ordinary values.
    fn awkward() -> Vec<f64> {
        let mut v = vec![
            0.0,
            -0.0,
            f64::MAX,
            -f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
            1e-323,
        ];
        for e in [
            -1074, -1073, -1050, -1023, -1022, -1021, -1020, -1001, -1000, -999, -149, -148, -127,
            -126, -125, -124, -1, 0, 1, 52, 53, 127, 128, 1000, 1023,
        ] {
            let x = 2f64.powi(e);
            v.extend([x, x.next_up(), x.next_down(), 1.5 * x, 1.75 * x]);
        }
        v.extend([
            0.1,
            1.0 / 3.0,
            123.456,
            1e-300,
            1e300,
            f64::from(f32::MAX),
            3.4e38,
            3.5e38,
        ]);
        let mut rng = quabla_random::testing::TestRng::new(11);
        v.extend((0..200).map(|_| rng.value()));
        let negated: Vec<f64> = v.iter().map(|x| -x).collect();
        v.extend(negated);
        v.retain(|x| x.is_finite());
        v
    }

    #[test]
    fn neighbours_are_the_standard_librarys() {
        let xs = awkward();
        let t = Tensor::from_parts(
            Shape::new(vec![xs.len()]).unwrap(),
            HostData::F64(xs.clone().into()),
            false,
        );
        let down = next_down_f64(&t).unwrap().to_vec::<f64>().unwrap();
        let below = f32_below(&t).unwrap().to_vec::<f32>().unwrap();
        let at_least = f32_at_least(&t).unwrap().to_vec::<f32>().unwrap();
        for (k, &x) in xs.iter().enumerate() {
            assert_eq!(
                down[k].to_bits(),
                x.next_down().to_bits(),
                "next_down({x:e})"
            );
            let r = x as f32;
            let want_below = if f64::from(r) >= x { r.next_down() } else { r };
            let want_at_least = if f64::from(r) < x { r.next_up() } else { r };
            assert_eq!(below[k].to_bits(), want_below.to_bits(), "f32_below({x:e})");
            assert_eq!(
                at_least[k].to_bits(),
                want_at_least.to_bits(),
                "f32_at_least({x:e})"
            );
        }
    }
}
