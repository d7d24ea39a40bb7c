//! The exponential family: the musl `exp`, `expm1` and `tanh` (which calls `expm1`) as lanes.
//!
//! `exp` and `expm1` reduce `x = k·ln2 + r` with `k` chosen by thresholds on the high word
//! (`0`, `±1`, or `x/ln2` rounded half away from zero and truncated), evaluate a rational
//! approximation on `r`, and scale by `2^k`; `expm1` picks one of several reconstructions by
//! `k`. The lanes compute every reconstruction and select by `k`. `tanh` selects `expm1(2|x|)`
//! or `expm1(-2|x|)` by the magnitude of `x` and combines it as the scalar routine does.
//!
//! Flagged for the scalar routine: `exp` of |x| ≥ 708.39 (overflow, subnormal results,
//! infinities, NaN); `expm1` of NaN and of x ≥ 700 (overflow, and the `k = 1024` scaling).

use super::wide::{select, select_const, F64s, Masks, Words};
use super::{wide_lane, INV_LN2, LN2_HI, LN2_LO};

// Coefficients of the `exp` rational approximation.
const P1: f64 = f64::from_bits(0x3fc5_5555_5555_553e);
const P2: f64 = f64::from_bits(0xbf66_c16c_16be_bd93);
const P3: f64 = f64::from_bits(0x3f11_566a_af25_de2c);
const P4: f64 = f64::from_bits(0xbebb_bd41_c5d2_6bf1);
const P5: f64 = f64::from_bits(0x3e66_3769_72be_a4d0);

// Coefficients of the `expm1` rational approximation.
const Q1: f64 = f64::from_bits(0xbfa1_1111_1111_10f4);
const Q2: f64 = f64::from_bits(0x3f5a_01a0_19fe_5585);
const Q3: f64 = f64::from_bits(0xbf14_ce19_9eaa_dbb7);
const Q4: f64 = f64::from_bits(0x3ed0_cfca_86e6_5239);
const Q5: f64 = f64::from_bits(0xbe8a_fdb7_6e09_c32d);

// High-word thresholds of |x|.
/// ln2/2: below it no reduction.
const HALF_LN2: i64 = 0x3fd6_2e42;
/// 1.5·ln2: from it `k` is `x/ln2` rounded.
const THREE_HALVES_LN2: i64 = 0x3ff0_a2b2;
/// `exp`: |x| ≥ 708.39 (results overflow or turn subnormal).
const EXP_EDGE: i64 = 0x4086_232b;
/// `exp`: |x| ≤ 2^-28 gives `1 + x`.
const EXP_TINY: i64 = 0x3e30_0000;
/// `expm1`: |x| ≥ 56·ln2 (`-1` for negative x).
const EXPM1_HUGE: i64 = 0x4043_687a;
/// `expm1`: |x| < 2^-54 gives `x`.
const EXPM1_TINY: i64 = 0x3c90_0000;
/// `tanh`: above 20 the result is ±1.
const TANH_ONE: i64 = 0x4034_0000;
/// `tanh`: above log(3)/2, `1 - 2/(expm1(2|x|) + 2)`.
const TANH_UPPER: i64 = 0x3fe1_93ea;
/// `tanh`: above log(5/3)/2, `expm1(2|x|)/(expm1(2|x|) + 2)`; below, `expm1(-2|x|)`.
const TANH_MIDDLE: i64 = 0x3fd0_58ae;
/// `tanh`: below the smallest normal, `x`.
const TANH_SUBNORMAL: i64 = 0x0010_0000;

wide_lane!(
    /// `exp`.
    Exp,
    exp_lane,
    libm::exp
);
wide_lane!(
    /// `expm1`.
    Expm1,
    expm1_lane,
    libm::expm1
);
wide_lane!(
    /// `tanh`.
    Tanh,
    tanh_lane,
    libm::tanh
);

/// The reduction multiple `x/ln2` rounded half away from zero, then truncated (the scalar
/// routines' `(int)(x/ln2 ± 0.5)`), as a float64 integer.
///
/// Truncating in float64 equals the conversion to `i32` wherever the lane is not flagged
/// (|k| < 1100), and unlike the saturating conversion it is one vector instruction.
#[inline(always)]
fn rounded_multiple<const W: usize>(x: F64s<W>, negative: Masks<W>) -> F64s<W> {
    (INV_LN2 * x + select_const(negative, -0.5, 0.5)).trunc()
}

#[inline(always)]
fn exp_lane<const W: usize>(x: F64s<W>) -> (F64s<W>, Masks<W>) {
    let hx = x.high_words();
    let negative = x.is_sign_negative();
    let reduce = hx.gt(HALF_LN2);
    let k = select(
        reduce,
        select(
            hx.ge(THREE_HALVES_LN2),
            rounded_multiple(x, negative),
            select_const(negative, -1.0, 1.0),
        ),
        F64s::splat(0.0),
    );
    // With k = 0 these are hi = x, lo = 0, r = x, as the unreduced branch has them.
    let hi = x - k * LN2_HI;
    let lo = k * LN2_LO;
    let r = hi - lo;
    let xx = r * r;
    let c = r - xx * (P1 + xx * (P2 + xx * (P3 + xx * (P4 + xx * P5))));
    let y = 1.0 + (r * c / (2.0 - c) - lo + hi);
    // `scalbn(y, k)` is one multiplication by 2^k for |k| ≤ 1022; y·1 = y for k = 0.
    let value = select(hx.le(EXP_TINY), 1.0 + x, y * k.pow2());
    (value, hx.ge(EXP_EDGE))
}

/// What the musl `expm1` computes for an argument before choosing its result: the reduction
/// `x = k·ln2 + r` (thresholds on the high word `hx`), the rational approximation, and every
/// reconstruction it may pick by `k`, each as the scalar routine computes it. The choice is
/// left to [`expm1_lane`] and to [`expm1_for_tanh`], which needs fewer of them.
struct Expm1Parts<const W: usize> {
    hx: Words<W>,
    k: F64s<W>,
    xr: F64s<W>,
    e: F64s<W>,
    two_k: F64s<W>,
    at_zero: F64s<W>,
    at_minus_one: F64s<W>,
    /// The `k = 1` results for `xr ≥ -0.25` and for `xr < -0.25` (which `tanh` never
    /// reaches, [`expm1_for_tanh`]).
    at_one: F64s<W>,
    at_one_below: F64s<W>,
    below_20: F64s<W>,
    from_20: F64s<W>,
}

#[inline(always)]
fn expm1_parts<const W: usize>(x: F64s<W>) -> Expm1Parts<W> {
    let hx = x.high_words();
    let negative = x.is_sign_negative();
    let reduce = hx.gt(HALF_LN2);
    let k = select(
        reduce,
        select(
            hx.lt(THREE_HALVES_LN2),
            select_const(negative, -1.0, 1.0),
            rounded_multiple(x, negative),
        ),
        F64s::splat(0.0),
    );
    let hi = x - k * LN2_HI;
    let lo = k * LN2_LO;
    let xr = select(reduce, hi - lo, x);
    let c = select(reduce, (hi - xr) - lo, F64s::splat(0.0));

    let hfx = 0.5 * xr;
    let hxs = xr * hfx;
    let r1 = 1.0 + hxs * (Q1 + hxs * (Q2 + hxs * (Q3 + hxs * (Q4 + hxs * Q5))));
    let t = 3.0 - r1 * hfx;
    let e0 = hxs * ((r1 - t) / (6.0 - xr * t));
    let at_zero = xr - (xr * e0 - hxs);
    let e = xr * (e0 - c) - c;
    let e = e - hxs;
    let at_minus_one = 0.5 * (xr - e) - 0.5;
    let at_one = 1.0 + 2.0 * (xr - e);
    let at_one_below = -2.0 * (e - (xr + 0.5));
    // Here -56 ≤ k ≤ 1010, so 2^k and 2^-k are normal.
    let two_k = k.pow2();
    let two_minus_k = (-k).pow2();
    Expm1Parts {
        hx,
        k,
        xr,
        e,
        two_k,
        at_zero,
        at_minus_one,
        at_one,
        at_one_below,
        below_20: (xr - e + (1.0 - two_minus_k)) * two_k,
        from_20: (xr - (e + two_minus_k) + 1.0) * two_k,
    }
}

impl<const W: usize> Expm1Parts<W> {
    /// The result for `k = 0`, `-1` or `1` (`at_one` the `k = 1` one), else `general`; the
    /// argument itself below 2^-54.
    #[inline(always)]
    fn choose_result(&self, x: F64s<W>, at_one: F64s<W>, general: F64s<W>) -> F64s<W> {
        let k = self.k;
        let value = select(
            k.eq(0.0),
            self.at_zero,
            select(
                k.eq(-1.0),
                self.at_minus_one,
                select(k.eq(1.0), at_one, general),
            ),
        );
        select(self.hx.lt(EXPM1_TINY), x, value)
    }
}

#[inline(always)]
fn expm1_lane<const W: usize>(x: F64s<W>) -> (F64s<W>, Masks<W>) {
    let p = expm1_parts(x);
    let negative = x.is_sign_negative();
    let huge = p.hx.ge(EXPM1_HUGE);
    let nan = x.is_nan();
    let flagged = huge & (nan | (!negative & x.ge(700.0)));
    let beyond = (p.xr - p.e + 1.0) * p.two_k - 1.0;
    let general = select(
        !(p.k.ge(0.0) & p.k.le(56.0)),
        beyond,
        select(p.k.lt(20.0), p.below_20, p.from_20),
    );
    let at_one = select(p.xr.lt(-0.25), p.at_one_below, p.at_one);
    let value = p.choose_result(x, at_one, general);
    let value = select(huge & negative & !nan, F64s::splat(-1.0), value);
    (value, flagged)
}

/// `expm1(u)` bit for bit for the arguments `tanh` gives it below its ±1 threshold: `u = 2|x|`
/// above log(5/3) (so `k ≥ 1`, and `k ≤ 58` up to `|x| = 20`), or `u = -2|x|` down to
/// -log(5/3) (`k` is 0 or -1). [`expm1_lane`] less what those never reach: the flags (no
/// overflow, no NaN: `tanh` takes its own branch for those), the `-1` of large negative
/// arguments, the `k = 1` reconstruction for `xr < -0.25` (`k = 1` comes from `u` in
/// (0.51, 1.04) here, so `xr` lies in (-0.19, 0.35)), and the reconstruction for `k > 56`,
/// which the `k ≥ 20` one replaces: those `k` come from `|x| > 19.58`, where either result
/// exceeds 2^55 and `tanh` rounds `1 - 2/(t + 2)` to exactly 1 (its quotient is below
/// 2^-54, half an ulp under 1).
#[inline(always)]
fn expm1_for_tanh<const W: usize>(u: F64s<W>) -> F64s<W> {
    let p = expm1_parts(u);
    p.choose_result(u, p.at_one, select(p.k.lt(20.0), p.below_20, p.from_20))
}

#[inline(always)]
fn tanh_lane<const W: usize>(x: F64s<W>) -> (F64s<W>, Masks<W>) {
    let a = x.abs();
    let w = x.high_words();
    let one = w.gt(TANH_ONE);
    let upper = w.gt(TANH_UPPER);
    let middle = w.gt(TANH_MIDDLE);
    let em = expm1_for_tanh(select(middle, 2.0 * a, -2.0 * a));
    // musl's `1 - 0/|x|` is 1 for every |x| above the threshold, and NaN (the operand's,
    // quieted) for a NaN, as `a + a` gives it: no division needed. Its `-t/(t + 2)` is the
    // exact negation of `t/(t + 2)`, and its `2/(t + 2)` has the same divisor, so every
    // branch takes its quotient from one division whose numerator is chosen first: one
    // division per lane instead of four (every branch is computed in every lane, and the
    // divider is what bounds this loop).
    let d = em + 2.0;
    let q = select(upper, F64s::splat(2.0), em) / d;
    let t = select(
        one,
        select(a.is_nan(), a + a, F64s::splat(1.0)),
        select(
            upper,
            1.0 - q,
            select(middle, q, select(w.ge(TANH_SUBNORMAL), -q, a)),
        ),
    );
    // Every argument has its result here: `expm1` is never flagged below the threshold.
    (select(x.is_sign_negative(), -t, t), Masks([false; W]))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{around_high_words, check, specials};
    use super::*;
    use proptest::prelude::*;

    fn check_all(xs: &[f64]) {
        check::<Exp>("exp", xs);
        check::<Expm1>("expm1", xs);
        check::<Tanh>("tanh", xs);
    }

    #[test]
    fn special_values() {
        let mut xs = specials();
        xs.extend([
            709.78, 709.79, -708.39, -708.4, -745.1, -745.2, 700.0, 699.99, -38.8, 38.8, 20.0,
            19.99, 40.0, -40.0, 0.25, -0.25, -0.2499, 1e-17, -1e-17, 3e-9,
        ]);
        check_all(&xs);
    }

    #[test]
    fn every_threshold() {
        check_all(&around_high_words(&[
            HALF_LN2,
            THREE_HALVES_LN2,
            EXP_EDGE,
            EXP_TINY,
            EXPM1_HUGE,
            EXPM1_TINY,
            TANH_ONE,
            TANH_UPPER,
            TANH_MIDDLE,
            TANH_SUBNORMAL,
        ]));
    }

    #[test]
    fn tanh_where_expm1_reconstructs_beyond_k_56() {
        // From 19 to 20.5, where `tanh`'s `expm1` takes its k > 56 reconstruction in the
        // scalar routine and the k ≥ 20 one in the lane; densely, and around 19.58.
        let mut xs: Vec<f64> = (0..20_000).map(|i| 19.0 + i as f64 * 7.5e-5).collect();
        xs.extend((0..2000).map(|i| -(19.0 + i as f64 * 7.5e-4)));
        // k turns 57 where 2|x|/ln2 reaches 56.5.
        let edge = 56.5 * std::f64::consts::LN_2 / 2.0;
        xs.extend((-500i64..500).map(|i| f64::from_bits((edge.to_bits() as i64 + i) as u64)));
        check::<Tanh>("tanh", &xs);
    }

    #[test]
    fn every_reduction_multiple() {
        // Arguments reducing to each k from -1100 to 1100, with the reconstructions of
        // `expm1` that change at k = -1, 0, 1, 20 and 56.
        let mut xs = Vec::new();
        for k in -1100..=1100 {
            for frac in [-0.49, -0.2, 0.0, 0.3, 0.5, 0.51] {
                xs.push((k as f64 + frac) * std::f64::consts::LN_2);
            }
        }
        check_all(&xs);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn random_bit_patterns(words in proptest::collection::vec(any::<u64>(), 1..600)) {
            let xs: Vec<f64> = words.iter().map(|&w| f64::from_bits(w)).collect();
            check_all(&xs);
        }

        #[test]
        fn random_arguments(xs in proptest::collection::vec(-50.0f64..50.0, 1..600)) {
            check_all(&xs);
        }

        #[test]
        fn random_magnitudes(
            parts in proptest::collection::vec((-70i32..11, 1.0f64..2.0, any::<bool>()), 1..600)
        ) {
            let xs: Vec<f64> = parts
                .iter()
                .map(|&(e, m, neg)| {
                    let v = m * 2f64.powi(e);
                    if neg { -v } else { v }
                })
                .collect();
            check_all(&xs);
        }
    }
}
