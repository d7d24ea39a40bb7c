//! The natural logarithm: the musl `log` as a lane.
//!
//! The scalar routine writes `x = 2^k·(1 + f)` with `1 + f` in [√2/2, √2) by integer
//! arithmetic on the high word, and evaluates a polynomial in `s = f/(2 + f)`. The lane does
//! the same in 64-bit integer lanes and converts `k` to float64 through its bits. Flagged for
//! the scalar routine: zero, negative, subnormal, infinite and NaN arguments.

use super::{choose, LaneFn};

/// ln 2 split into a head exact in 32 bits and its tail.
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);

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

/// `log`.
#[derive(Debug)]
pub(crate) struct Log;

impl LaneFn for Log {
    const RESULTS: usize = 1;
    #[inline(always)]
    fn lane(x: f64) -> ([f64; 2], bool) {
        let (v, flag) = log_lane(x);
        ([v, 0.0], flag)
    }
    fn exact(x: f64) -> [f64; 2] {
        [libm::log(x), 0.0]
    }
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
    let hfsq = 0.5 * f * f;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LG2 + w * (LG4 + w * LG6));
    let t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
    let r = t2 + t1;
    // k as float64 without an integer conversion (k + 2048 is positive and below 2^52).
    let dk = f64::from_bits(TWO_52.to_bits() | (k + 2048) as u64) - (TWO_52 + 2048.0);
    let value = s * (hfsq + r) + dk * LN2_LO - hfsq + f + dk * LN2_HI;
    (choose(bits == 1f64.to_bits(), 0.0, value), flagged)
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
        }
    }
}
