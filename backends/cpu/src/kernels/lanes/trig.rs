//! Sine and cosine: the musl `sin`, `cos` and their shared kernels as one lane.
//!
//! The scalar routines branch on the magnitude of each argument: a small argument goes
//! straight to the polynomial kernels, an argument up to 9π/4 is reduced by a fixed multiple of
//! π/2 chosen by thresholds on its high word, a medium one (below 2^20·π/2) by the rounded
//! quotient `x·2/π` in one Cody–Waite step with a cancellation check, and a huge one by the
//! Payne–Hanek reduction. The lane selects the multiple of π/2 with the same thresholds,
//! evaluates both polynomial kernels, and lets the quadrant pick each result. It flags an
//! argument of 2^20·π/2 or more, an infinity or NaN, and a medium argument whose first
//! reduction step cancels (the scalar routine then takes further steps).

use super::{choose, high_word_abs, one_result_lane, LaneFn};

// Coefficients of the musl `__sin` and `__cos` polynomial kernels on [-π/4, π/4], by bit
// pattern.
const S1: f64 = f64::from_bits(0xbfc5_5555_5555_5549);
const S2: f64 = f64::from_bits(0x3f81_1111_1110_f8a6);
const S3: f64 = f64::from_bits(0xbf2a_01a0_19c1_61d5);
const S4: f64 = f64::from_bits(0x3ec7_1de3_57b1_fe7d);
const S5: f64 = f64::from_bits(0xbe5a_e5e6_8a2b_9ceb);
const S6: f64 = f64::from_bits(0x3de5_d93a_5acf_d57c);
const C1: f64 = f64::from_bits(0x3fa5_5555_5555_554c);
const C2: f64 = f64::from_bits(0xbf56_c16c_16c1_5177);
const C3: f64 = f64::from_bits(0x3efa_01a0_19cb_1590);
const C4: f64 = f64::from_bits(0xbe92_7e4f_809c_52ad);
const C5: f64 = f64::from_bits(0x3e21_ee9e_bdb4_b1c4);
const C6: f64 = f64::from_bits(0xbda8_fae9_be88_38d4);

// The musl reduction constants: 2/π, and π/2 split into a 33-bit head and its tail.
const INV_PIO2: f64 = f64::from_bits(0x3fe4_5f30_6dc9_c883);
const PIO2_1: f64 = f64::from_bits(0x3ff9_21fb_5440_0000);
const PIO2_1T: f64 = f64::from_bits(0x3dd0_b461_1a62_6331);
/// `1.5 · 2^52`: adding it rounds to an integer held in the low mantissa bits.
const TO_INT: f64 = 1.5 / f64::EPSILON;

// High-word thresholds of |x| (the high 32 bits of the float64, sign cleared).
/// |x| below 2^-26: `sin(x) = x`.
const SIN_TINY: i64 = 0x3e50_0000;
/// |x| below 2^-27·√2: `cos(x) = 1`.
const COS_TINY: i64 = 0x3e46_a09e;
/// |x| up to about π/4: no reduction.
const PIO4_HI: i64 = 0x3fe9_21fb;
/// |x| up to about 3π/4: reduce by π/2.
const PIO2_3_4: i64 = 0x4002_d97c;
/// |x| up to about 5π/4: reduce by 2·π/2.
const PIO2_5_4: i64 = 0x400f_6a7a;
/// |x| up to about 7π/4: reduce by 3·π/2.
const PIO2_7_4: i64 = 0x4015_fdbc;
/// |x| up to about 9π/4: reduce by 4·π/2.
const PIO2_9_4: i64 = 0x401c_463b;
/// |x| from about 2^20·π/2 on (and infinities, NaN): the scalar routine.
const MEDIUM_END: i64 = 0x4139_21fb;

one_result_lane!(
    /// `sin`.
    Sin,
    sin_lane,
    libm::sin
);
one_result_lane!(
    /// `cos`.
    Cos,
    cos_lane,
    libm::cos
);

/// `sin` and `cos` of the same argument.
#[derive(Debug)]
pub(crate) struct SinCos;

impl LaneFn for SinCos {
    const RESULTS: usize = 2;
    #[inline(always)]
    fn lane(x: f64) -> ([f64; 2], bool) {
        let (s, c, flag) = lane(x);
        ([s, c], flag)
    }
    fn exact(x: f64) -> [f64; 2] {
        [libm::sin(x), libm::cos(x)]
    }
}

#[inline(always)]
fn sin_lane(x: f64) -> (f64, bool) {
    let (sin, _, flagged) = lane(x);
    (sin, flagged)
}

#[inline(always)]
fn cos_lane(x: f64) -> (f64, bool) {
    let (_, cos, flagged) = lane(x);
    (cos, flagged)
}

/// One element: the sine and cosine the scalar routines give, and whether this path cannot
/// produce them.
#[inline(always)]
fn lane(x: f64) -> (f64, f64, bool) {
    let negative = x.is_sign_negative();
    let ix = high_word_abs(x);

    // The multiple of π/2 of the threshold cases (0 below π/4), and whether the argument sits
    // so close to a multiple of π/2 that the scalar routine switches to the medium reduction.
    // The multiple is built in float64 directly: there is no vector int64-to-float64
    // conversion before AVX-512.
    let small = ix <= PIO4_HI;
    let fixed = choose(small, 0.0, 1.0)
        + choose(ix > PIO2_3_4, 1.0, 0.0)
        + choose(ix > PIO2_5_4, 1.0, 0.0)
        + choose(ix > PIO2_7_4, 1.0, 0.0);
    let fixed = choose(negative, -fixed, fixed);
    let near_multiple = (!small & (ix <= PIO2_5_4) & (ix & 0xf_ffff == 0x9_21fb))
        | (ix == 0x4012_d97c)
        | (ix == 0x4019_21fb);
    let medium = (ix > PIO2_9_4) | near_multiple;

    // The medium reduction's quotient, rounded to nearest by the `TO_INT` addition. Its low
    // mantissa bits hold the quotient in two's complement; adding `TO_INT` to a threshold
    // multiple puts that one's bits in the same place, so one read gives the quadrant.
    let shifted = x * INV_PIO2 + TO_INT;
    let rounded = shifted - TO_INT;
    let n = choose(medium, rounded, fixed);
    let quadrant = (choose(medium, shifted, fixed + TO_INT).to_bits() & 3) as i64;

    // One Cody–Waite step: y0 + y1 = x - n·π/2 (exact for n = 0).
    let r = x - n * PIO2_1;
    let w = n * PIO2_1T;
    let y0 = r - w;
    let y1 = (r - y0) - w;
    let ex = ix >> 20;
    let ey = ((y0.to_bits() >> 52) & 0x7ff) as i64;
    let flagged = (ix >= MEDIUM_END) | (medium & (ex - ey > 16));

    // Both kernels on (y0, y1).
    let z = y0 * y0;
    let w2 = z * z;
    let rs = S2 + z * (S3 + z * S4) + z * w2 * (S5 + z * S6);
    let v = z * y0;
    let sin_k = y0 - ((z * (0.5 * y1 - v * rs) - y1) - v * S1);
    let rc = z * (C1 + z * (C2 + z * C3)) + w2 * w2 * (C4 + z * (C5 + z * C6));
    let hz = 0.5 * z;
    let wc = 1.0 - hz;
    let cos_k = wc + (((1.0 - wc) - hz) + (z * rc - y0 * y1));

    // Odd quadrants swap the kernels; the sign flips in quadrants 2 and 3 for the sine and
    // 1 and 2 for the cosine.
    let odd = quadrant & 1 != 0;
    let flip = |v: f64, f: i64| f64::from_bits(v.to_bits() ^ (((f & 1) as u64) << 63));
    // Below π/4 the scalar sine calls its kernel without a tail.
    let sin_small = y0 + v * (S1 + z * rs);
    let sin_base = choose(odd, cos_k, choose(small, sin_small, sin_k));
    let sin = choose(ix < SIN_TINY, x, flip(sin_base, quadrant >> 1));
    let cos_base = choose(odd, sin_k, cos_k);
    let cos = choose(
        ix < COS_TINY,
        1.0,
        flip(cos_base, quadrant ^ (quadrant >> 1)),
    );
    (sin, cos, flagged)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{around_high_words, check, specials};
    use super::*;
    use proptest::prelude::*;

    fn check_all(xs: &[f64]) {
        check::<Sin>("sin", xs);
        check::<Cos>("cos", xs);
        check::<SinCos>("sin_cos", xs);
    }

    #[test]
    fn special_values() {
        let mut xs = specials();
        xs.extend([
            std::f64::consts::FRAC_PI_4,
            std::f64::consts::FRAC_PI_2,
            std::f64::consts::PI,
            -std::f64::consts::PI,
            1e6,
            1e7,
            1e22,
        ]);
        check_all(&xs);
    }

    #[test]
    fn every_threshold_of_the_reduction() {
        check_all(&around_high_words(&[
            SIN_TINY,
            COS_TINY,
            PIO4_HI,
            PIO2_3_4,
            PIO2_5_4,
            PIO2_7_4,
            PIO2_9_4,
            MEDIUM_END,
            0x3ff9_21fb,
            0x4009_21fb,
            0x4012_d97c,
            0x4019_21fb,
        ]));
    }

    #[test]
    fn arguments_next_to_multiples_of_half_pi() {
        // The neighbours of k·π/2 cancel in the first reduction step: the fix-up must take
        // them, and their sines and cosines are the tiny values the second step recovers.
        let mut xs = Vec::new();
        for k in (1..2000).chain([6_000, 102_944, 1_000_000, 660_000]) {
            let c = k as f64 * std::f64::consts::FRAC_PI_2;
            let b = c.to_bits();
            for d in 0..6u64 {
                xs.push(f64::from_bits(b + d));
                xs.push(f64::from_bits(b - d));
                xs.push(-f64::from_bits(b + d));
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
        fn random_magnitudes(
            parts in proptest::collection::vec((-60i32..40, 1.0f64..2.0, any::<bool>()), 1..600)
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
