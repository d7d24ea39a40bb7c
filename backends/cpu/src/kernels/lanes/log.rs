//! The natural logarithm: the musl `log` and `log1p` as lanes.
//!
//! The scalar routines write `x` (for `log1p`, `1 + x` with a correction term for its
//! rounding) as `2^k·(1 + f)` with `1 + f` in [√2/2, √2) by integer arithmetic on the high
//! word, and evaluate a polynomial in `s = f/(2 + f)`. The lanes do the same in 64-bit integer
//! lanes and convert `k` to float64 through its bits. Flagged for the scalar routine: `log` of
//! zero, negative, subnormal, infinite and NaN arguments; `log1p` of arguments of -1 or below,
//! infinities and NaN.

use super::{choose, one_result_lane, LN2_HI, LN2_LO};

// Coefficients of the polynomial in s².
const LG1: f64 = f64::from_bits(0x3fe5_5555_5555_5593);
const LG2: f64 = f64::from_bits(0x3fd9_9999_9997_fa04);
const LG3: f64 = f64::from_bits(0x3fd2_4924_9422_9359);
const LG4: f64 = f64::from_bits(0x3fcc_71c5_1d8e_78af);
const LG5: f64 = f64::from_bits(0x3fc7_4664_96cb_03de);
const LG6: f64 = f64::from_bits(0x3fc3_9a09_d078_c69f);
const LG7: f64 = f64::from_bits(0x3fc2_f112_df3e_5244);

/// The high word of √2/2, where the reduced mantissa range starts.
const SQRT_HALF_HI: i64 = 0x3fe6_a09e;
/// 2^52: adding an integer below it to this puts the integer in the low mantissa bits.
const TWO_52: f64 = 4_503_599_627_370_496.0;

one_result_lane!(
    /// `log`.
    Log,
    log_lane,
    libm::log
);
one_result_lane!(
    /// `log1p`.
    Log1p,
    log1p_lane,
    libm::log1p
);

/// `k` as float64 without an integer conversion (`k + 2048` is positive and below 2^52).
#[inline(always)]
fn int_to_f64(k: i64) -> f64 {
    f64::from_bits(TWO_52.to_bits() | (k + 2048) as u64) - (TWO_52 + 2048.0)
}

/// The polynomial part shared by `log` and `log1p`: `(hfsq, s, r)` for the reduced `f`.
#[inline(always)]
fn log_kernel(f: f64) -> (f64, f64, f64) {
    let hfsq = 0.5 * f * f;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LG2 + w * (LG4 + w * LG6));
    let t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
    (hfsq, s, t2 + t1)
}

#[inline(always)]
fn log_lane(x: f64) -> (f64, bool) {
    let bits = x.to_bits();
    // The high word with its sign bit: negative arguments compare above every positive one.
    let hx = (bits >> 32) as i64;
    let flagged = !(0x0010_0000..0x7ff0_0000).contains(&hx);
    let shifted = hx + (0x3ff0_0000 - SQRT_HALF_HI);
    let k = (shifted >> 20) - 0x3ff;
    let high = (shifted & 0x000f_ffff) + SQRT_HALF_HI;
    let reduced = f64::from_bits(((high as u64) << 32) | (bits & 0xffff_ffff));
    let f = reduced - 1.0;
    let (hfsq, s, r) = log_kernel(f);
    let dk = int_to_f64(k);
    let value = s * (hfsq + r) + dk * LN2_LO - hfsq + f + dk * LN2_HI;
    (choose(bits == 1f64.to_bits(), 0.0, value), flagged)
}

#[inline(always)]
fn log1p_lane(x: f64) -> (f64, bool) {
    let bits = x.to_bits();
    // The high word with its sign bit, as the scalar routine's unsigned comparisons see it.
    let hx = (bits >> 32) as i64;
    // Below 1 + x ≈ √2 (and every negative x): a small or unreduced argument.
    let low = !(0x3fda_827a..0x8000_0000).contains(&hx);
    let flagged = (low & (hx >= 0xbff0_0000)) | (!low & (hx >= 0x7ff0_0000));
    // |x| < 2^-53 gives x.
    let tiny = low & (((hx << 1) & 0xffff_ffff) < 0x3ca0_0000 << 1);
    // √2/2 ≤ 1 + x < √2: no reduction, f = x.
    let unreduced = low & (hx <= 0xbfd2_bec4);

    let u = 1.0 + x;
    let ubits = u.to_bits();
    let hu = ((ubits >> 32) as i64) + (0x3ff0_0000 - SQRT_HALF_HI);
    let k = (hu >> 20) - 0x3ff;
    // The rounding error of 1 + x, relative to it (zero once it is below the last bit).
    let c = choose(
        k < 54,
        choose(k >= 2, 1.0 - (u - x), x - (u - 1.0)) / u,
        0.0,
    );
    let high = (hu & 0x000f_ffff) + SQRT_HALF_HI;
    let reduced = f64::from_bits(((high as u64) << 32) | (ubits & 0xffff_ffff)) - 1.0;

    let f = choose(unreduced, x, reduced);
    let c = choose(unreduced, 0.0, c);
    let dk = choose(unreduced, 0.0, int_to_f64(k));
    let (hfsq, s, r) = log_kernel(f);
    let value = s * (hfsq + r) + (dk * LN2_LO + c) - hfsq + f + dk * LN2_HI;
    (choose(tiny, x, value), flagged)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{around_high_words, check, specials};
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn special_values() {
        let mut xs = specials();
        xs.extend([
            std::f64::consts::SQRT_2,
            std::f64::consts::FRAC_1_SQRT_2,
            std::f64::consts::E,
            1.0 + f64::EPSILON,
            1.0 - f64::EPSILON / 2.0,
        ]);
        check::<Log>("log", &xs);
    }

    #[test]
    fn every_threshold() {
        check::<Log>(
            "log",
            &around_high_words(&[
                0x0010_0000,
                0x7ff0_0000,
                0x3ff0_0000,
                SQRT_HALF_HI,
                0x3ff6_a09e,
            ]),
        );
    }

    #[test]
    fn log1p_special_values_and_thresholds() {
        let mut xs = specials();
        xs.extend([
            -1.0,
            -1.0 + f64::EPSILON / 2.0,
            -0.2929,
            -0.2928,
            0.4142,
            0.4143,
            1e-16,
            -1e-16,
            2f64.powi(53),
            2f64.powi(54),
            2f64.powi(55),
        ]);
        xs.extend(around_high_words(&[
            0x3fda_827a,
            0xbff0_0000,
            0x3ca0_0000,
            0xbca0_0000,
            0xbfd2_bec4,
            0x7ff0_0000,
            0x4340_0000,
            0x4350_0000,
        ]));
        check::<Log1p>("log1p", &xs);
    }

    #[test]
    fn log1p_every_binade() {
        let xs: Vec<f64> = (-1074..=1023)
            .flat_map(|e| [1.0, 1.3, 1.7, -0.3, -0.9].map(|m| m * 2f64.powi(e)))
            .collect();
        check::<Log1p>("log1p", &xs);
    }

    #[test]
    fn every_binade() {
        let xs: Vec<f64> = (-1022..=1023)
            .flat_map(|e| [1.0, 1.2, 1.41, 1.42, 1.5, 1.99].map(|m| m * 2f64.powi(e)))
            .collect();
        check::<Log>("log", &xs);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn random_bit_patterns(words in proptest::collection::vec(any::<u64>(), 1..600)) {
            let xs: Vec<f64> = words.iter().map(|&w| f64::from_bits(w)).collect();
            check::<Log>("log", &xs);
        }

        #[test]
        fn random_arguments(xs in proptest::collection::vec(0.0f64..10.0, 1..600)) {
            check::<Log>("log", &xs);
            check::<Log1p>("log1p", &xs);
        }

        #[test]
        fn random_log1p_arguments(xs in proptest::collection::vec(-1.0f64..1.0, 1..600)) {
            check::<Log1p>("log1p", &xs);
        }

        #[test]
        fn random_log1p_bit_patterns(words in proptest::collection::vec(any::<u64>(), 1..600)) {
            let xs: Vec<f64> = words.iter().map(|&w| f64::from_bits(w)).collect();
            check::<Log1p>("log1p", &xs);
        }
    }
}
