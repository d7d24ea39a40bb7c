//! Sine and cosine over slices, bit-identical to the portable `libm::sin` and `libm::cos`
//! (numerics.md §1.5), several elements per instruction.
//!
//! The scalar musl routines branch on the magnitude of each argument: a small argument goes
//! straight to the polynomial kernels, an argument up to 9π/4 is reduced by a fixed multiple of
//! π/2 chosen by thresholds on its high word, a medium one (below 2^20·π/2) by the rounded
//! quotient `x·2/π` in one Cody–Waite step with a cancellation check, and a huge one by the
//! Payne–Hanek reduction. Here every element takes one branch-free path that covers all but
//! the rare cases: the multiple of π/2 is selected per lane with the same thresholds, both
//! polynomial kernels are evaluated, and the quadrant picks the result. The operations are the
//! scalar routine's, in its order and with its rounding (Rust never contracts `a * b + c` into
//! a fused multiply-add), so each lane produces exactly the bits of the scalar call.
//!
//! A lane the branch-free path does not cover (an argument of 2^20·π/2 or more, an infinity or
//! NaN, or a medium argument whose first reduction step cancels) is flagged, and the flagged
//! elements are recomputed with the scalar routine afterwards.
//!
//! On x86-64 the loop is compiled a second time for AVX2 and chosen at run time; elsewhere the
//! baseline build runs (the compiler still vectorizes it to the baseline SIMD width).

/// Tile of elements whose lane flags are checked together before fix-up.
const BLOCK: usize = 256;

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

/// Which results a loop writes.
const SIN: u8 = 1;
const COS: u8 = 2;
const BOTH: u8 = SIN | COS;

/// `out[i] = sin(x[i])`, rounded to float32 when `round_f32`.
pub(crate) fn sin_slice(x: &[f64], out: &mut [f64], round_f32: bool) {
    run::<SIN>(x, out, &mut [], round_f32);
}

/// `out[i] = cos(x[i])`, rounded to float32 when `round_f32`.
pub(crate) fn cos_slice(x: &[f64], out: &mut [f64], round_f32: bool) {
    run::<COS>(x, &mut [], out, round_f32);
}

/// Both `sin` and `cos` of every element in one pass: the reduction and both polynomial
/// kernels are shared, so this costs about as much as one of them.
pub(crate) fn sin_cos_slice(x: &[f64], sin: &mut [f64], cos: &mut [f64], round_f32: bool) {
    run::<BOTH>(x, sin, cos, round_f32);
}

/// The outputs of a block: only those `WHICH` names have elements.
struct Outs<'a> {
    sin: &'a mut [f64],
    cos: &'a mut [f64],
}

fn run<const WHICH: u8>(x: &[f64], sin: &mut [f64], cos: &mut [f64], round_f32: bool) {
    let mut at = 0;
    while at < x.len() {
        let end = (at + BLOCK).min(x.len());
        let xs = &x[at..end];
        let mut outs = Outs {
            sin: if WHICH & SIN != 0 {
                &mut sin[at..end]
            } else {
                &mut []
            },
            cos: if WHICH & COS != 0 {
                &mut cos[at..end]
            } else {
                &mut []
            },
        };
        if lanes_dispatch::<WHICH>(xs, &mut outs) {
            fix_up::<WHICH>(xs, &mut outs);
        }
        if round_f32 {
            round_to_f32(outs.sin);
            round_to_f32(outs.cos);
        }
        at = end;
    }
}

fn round_to_f32(values: &mut [f64]) {
    for v in values {
        *v = *v as f32 as f64;
    }
}

/// Recomputes the flagged elements of a block with the scalar routines.
#[cold]
fn fix_up<const WHICH: u8>(x: &[f64], outs: &mut Outs<'_>) {
    for (i, &v) in x.iter().enumerate() {
        if lane(v).2 {
            if WHICH & SIN != 0 {
                outs.sin[i] = libm::sin(v);
            }
            if WHICH & COS != 0 {
                outs.cos[i] = libm::cos(v);
            }
        }
    }
}

fn lanes_dispatch<const WHICH: u8>(x: &[f64], outs: &mut Outs<'_>) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: this build of the loop only requires AVX-512F, detected just above.
            return unsafe { lanes_avx512::<WHICH>(x, outs) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: this build of the loop only requires AVX2, detected just above.
            return unsafe { lanes_avx2::<WHICH>(x, outs) };
        }
    }
    lanes::<WHICH>(x, outs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn lanes_avx512<const WHICH: u8>(x: &[f64], outs: &mut Outs<'_>) -> bool {
    lanes::<WHICH>(x, outs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn lanes_avx2<const WHICH: u8>(x: &[f64], outs: &mut Outs<'_>) -> bool {
    lanes::<WHICH>(x, outs)
}

/// The branch-free loop: writes every lane and returns whether any lane was flagged.
///
/// Flags are combined as integers and selections are written as arithmetic on values both
/// sides of which are computed, so the loop has no control flow and vectorizes.
#[inline(always)]
fn lanes<const WHICH: u8>(x: &[f64], outs: &mut Outs<'_>) -> bool {
    let mut flagged = 0u64;
    let n = x.len();
    match WHICH {
        SIN => {
            for (&v, s) in x.iter().zip(&mut outs.sin[..n]) {
                let (sv, _, flag) = lane(v);
                *s = sv;
                flagged |= flag as u64;
            }
        }
        COS => {
            for (&v, c) in x.iter().zip(&mut outs.cos[..n]) {
                let (_, cv, flag) = lane(v);
                *c = cv;
                flagged |= flag as u64;
            }
        }
        _ => {
            for ((&v, s), c) in x.iter().zip(&mut outs.sin[..n]).zip(&mut outs.cos[..n]) {
                let (sv, cv, flag) = lane(v);
                *s = sv;
                *c = cv;
                flagged |= flag as u64;
            }
        }
    }
    flagged != 0
}

/// `a` where `pick` holds, else `b`.
#[inline(always)]
fn choose(pick: bool, a: f64, b: f64) -> f64 {
    if pick {
        a
    } else {
        b
    }
}

/// One element: the sine and cosine the scalar routines give, and whether this path cannot
/// produce them.
#[inline(always)]
fn lane(x: f64) -> (f64, f64, bool) {
    let bits = x.to_bits();
    let negative = (bits as i64) < 0;
    // Signed 64-bit lanes compare in one instruction where unsigned ones do not.
    let ix = ((bits >> 32) & 0x7fff_ffff) as i64;

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
    use super::*;
    use proptest::prelude::*;

    /// The builds of the loop this machine can run, by name.
    #[allow(clippy::type_complexity)]
    fn builds() -> Vec<(&'static str, fn(&[f64], &mut Outs<'_>) -> bool)> {
        let mut out: Vec<(&'static str, fn(&[f64], &mut Outs<'_>) -> bool)> =
            vec![("baseline", |x, o| lanes::<BOTH>(x, o))];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 was detected.
                out.push(("avx2", |x, o| unsafe { lanes_avx2::<BOTH>(x, o) }));
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: AVX-512F was detected.
                out.push(("avx512", |x, o| unsafe { lanes_avx512::<BOTH>(x, o) }));
            }
        }
        out
    }

    fn same(got: f64, want: f64) -> bool {
        got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan())
    }

    /// Every build of the loop (with the fix-up) and the three entry points against the
    /// scalar routines, bit for bit.
    fn check(xs: &[f64]) {
        let want_sin: Vec<f64> = xs.iter().map(|&x| libm::sin(x)).collect();
        let want_cos: Vec<f64> = xs.iter().map(|&x| libm::cos(x)).collect();
        let compare = |what: &str, got: &[f64], want: &[f64]| {
            for ((&x, &g), &w) in xs.iter().zip(got).zip(want) {
                assert!(
                    same(g, w),
                    "{what}({x:e} = {:#018x}) = {g:e}, libm gives {w:e}",
                    x.to_bits()
                );
            }
        };
        for (name, build) in builds() {
            let (mut sin, mut cos) = (vec![0.0; xs.len()], vec![0.0; xs.len()]);
            for ((xc, sc), cc) in xs
                .chunks(BLOCK)
                .zip(sin.chunks_mut(BLOCK))
                .zip(cos.chunks_mut(BLOCK))
            {
                let mut outs = Outs { sin: sc, cos: cc };
                if build(xc, &mut outs) {
                    fix_up::<BOTH>(xc, &mut outs);
                }
            }
            compare(&format!("{name} sin"), &sin, &want_sin);
            compare(&format!("{name} cos"), &cos, &want_cos);
        }
        let mut out = vec![0.0; xs.len()];
        sin_slice(xs, &mut out, false);
        compare("sin_slice", &out, &want_sin);
        cos_slice(xs, &mut out, false);
        compare("cos_slice", &out, &want_cos);
        let mut other = vec![0.0; xs.len()];
        sin_cos_slice(xs, &mut out, &mut other, false);
        compare("sin_cos_slice sin", &out, &want_sin);
        compare("sin_cos_slice cos", &other, &want_cos);
    }

    #[test]
    fn special_values() {
        check(&[
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE / 3.0,
            5e-324,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MAX,
            -f64::MAX,
            1.0,
            -1.0,
            std::f64::consts::FRAC_PI_4,
            std::f64::consts::FRAC_PI_2,
            std::f64::consts::PI,
            -std::f64::consts::PI,
            1e6,
            1e7,
            1e22,
        ]);
    }

    #[test]
    fn every_threshold_of_the_reduction() {
        let mut xs = Vec::new();
        for hi in [
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
        ] {
            for h in [hi - 1, hi, hi + 1] {
                for lo in [0u64, 1, 0x5444_2d18, 0x8000_0000, 0xffff_ffff] {
                    for sign in [0u64, 1] {
                        xs.push(f64::from_bits(sign << 63 | (h as u64) << 32 | lo));
                    }
                }
            }
        }
        check(&xs);
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
        check(&xs);
    }

    #[test]
    fn float32_rounding_after_the_value() {
        let xs: Vec<f64> = (0..1000).map(|i| (i as f32 * 0.731) as f64).collect();
        let mut out = vec![0.0; xs.len()];
        sin_slice(&xs, &mut out, true);
        for (&x, &o) in xs.iter().zip(&out) {
            assert_eq!(o.to_bits(), (libm::sin(x) as f32 as f64).to_bits());
        }
        cos_slice(&xs, &mut out, true);
        for (&x, &o) in xs.iter().zip(&out) {
            assert_eq!(o.to_bits(), (libm::cos(x) as f32 as f64).to_bits());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn random_bit_patterns(words in proptest::collection::vec(any::<u64>(), 1..600)) {
            let xs: Vec<f64> = words.iter().map(|&w| f64::from_bits(w)).collect();
            check(&xs);
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
            check(&xs);
        }
    }
}
