//! Float32 results of transcendental functions from a cheaper float64 approximation, with the
//! reference bits.
//!
//! A float32 node's result is the float64 routine's result rounded to float32 once
//! (numerics.md §1.5). Those bits need the float64 routine only where its result lies close
//! to a float32 rounding boundary (the midpoint between two float32 values): anywhere else
//! any float64 value close enough to it rounds the same way. A lane here computes an
//! approximation accurate to a few float64 ulps, and flags it when it lies within
//! [`MIDPOINT_MARGIN`] float64 ulps of a midpoint (about one element in 2^18 of evenly spread
//! results), or when its argument is not a float32 value (the values it was checked on); the flagged elements get
//! the float64 routine, like every lane's flagged elements. The results are then the reference bits
//! after rounding, never only close to them, and the unrounded values are not the routine's:
//! these lanes are used only for float32 nodes.
//!
//! The argument of a float32 node is a float32 value, so the claim is checked on every one:
//! `tanh_f32_every_float32` (ignored in the default run; `cargo test --release -p quabla-cpu
//! tanh_f32_every_float32 -- --ignored`, a minute and a half on two cores) compares the rounded
//! lane with the rounded routine for every float32 argument; the default run checks a
//! stride through all of them.

use super::{choose, one_result_lane, pow2, INV_LN2, LN2_HI, LN2_LO};

/// Float64 ulps from a float32 rounding boundary within which the routine decides.
///
/// The `tanh` approximation differs from the routine by at most 4 ulps over every float32
/// argument (the exhaustive check measures it and requires at most 16), so a margin of 2^10
/// ulps leaves a factor of 256 to spare. It flags 2^11 of every 2^29 evenly spread results;
/// over every float32 argument of `tanh` it flagged 992 of 4.3 billion (most results there
/// are ±1 or the argument itself, never near a boundary).
const MIDPOINT_MARGIN: u64 = 1 << 10;
/// The float64 bits below a float32 significand, and their value at the midpoint.
const BELOW_F32: u64 = (1 << 29) - 1;
const F32_MIDPOINT: u64 = 1 << 28;

/// Whether a float64 value in the float32 normal range lies within [`MIDPOINT_MARGIN`] ulps of
/// a float32 rounding boundary (below or above it).
#[inline(always)]
fn near_midpoint(v: f64) -> bool {
    let low = v.to_bits() & BELOW_F32;
    // As signed lanes, which compare in one instruction: `low` is below 2^29.
    let from = low as i64 - (F32_MIDPOINT - MIDPOINT_MARGIN) as i64;
    (from >= 0) & (from < 2 * MIDPOINT_MARGIN as i64)
}

/// Whether `x` is a float32 value (false for NaN).
#[inline(always)]
fn is_f32_value(x: f64) -> bool {
    f64::from(x as f32) == x
}

/// `tanh` of a float32 argument below this magnitude rounds to the argument itself: there
/// `tanh x = x (1 - x²/3 + …)`, and `x²/3 < 2^-27.5` is under a quarter of a float32 ulp,
/// even for a power of two (whose ulp below is half the one above).
const TANH_TINY: f64 = f64::from_bits(0x3f20_0000_0000_0000); // 2^-13
/// Above this magnitude the routine returns ±1 exactly, and so does the lane.
const TANH_LIMIT: f64 = 20.0;

/// Taylor coefficients `1/n!` for `n = 2..=13`: `expm1` on `|r| ≤ ln2/2` to a relative
/// truncation error below 2^-55.
const EXPM1_TAYLOR: [f64; 12] = [
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5040.0,
    1.0 / 40320.0,
    1.0 / 362880.0,
    1.0 / 3628800.0,
    1.0 / 39916800.0,
    1.0 / 479001600.0,
    1.0 / 6227020800.0,
];

one_result_lane!(
    /// `tanh` of float32 arguments, exact after rounding to float32.
    TanhF32,
    tanh_f32_lane,
    libm::tanh
);

/// `tanh |x| = e / (e + 2)` with `e = expm1(2|x|)`; `expm1(u) = 2^k (1 + expm1 r) - 1` for
/// `u = k ln2 + r`, which loses no accuracy for `u ≥ 0` (`2^k - 1` is exact up to `k = 53`,
/// and for `k ≥ 1` the sum stays above 0.4).
#[inline(always)]
fn tanh_f32_lane(x: f64) -> (f64, bool) {
    let a = x.abs();
    let u = a + a;
    let k = (u * INV_LN2 + 0.5).trunc();
    let r = (u - k * LN2_HI) - k * LN2_LO;
    // Fused multiply-adds: one rounding each, and half the instructions of the loop's
    // polynomial (the result only has to be close to the routine's, see the module docs).
    let q = EXPM1_TAYLOR.iter().rev().fold(0.0, |q, &c| r.mul_add(q, c));
    let p = (r * r).mul_add(q, r);
    let two_k = pow2(k);
    let e = two_k.mul_add(p, two_k - 1.0);
    // Beyond the limit (infinity included) the routine gives exactly 1, as the lane does; in
    // the approximation `2^k` would overflow there.
    let t = choose(a > TANH_LIMIT, 1.0, e / (e + 2.0));
    let tiny = a < TANH_TINY;
    let value = choose(tiny, x, choose(x.is_sign_negative(), -t, t));
    // A NaN is not a float32 value by `is_f32_value`'s comparison, so it is flagged.
    (value, !is_f32_value(x) | (!tiny & near_midpoint(t)))
}

#[cfg(test)]
mod tests {
    use super::super::testing::specials;
    use super::super::{run, LaneFn};
    use super::*;

    /// The lanes (every build through [`run`], float32 rounding on) give the rounded routine's
    /// bits for every argument of `xs`.
    fn check_rounded(xs: &[f64]) {
        let mut got = vec![0.0; xs.len()];
        run::<TanhF32>(xs, &mut got, &mut [], true);
        for (&x, &g) in xs.iter().zip(&got) {
            let want = f64::from(libm::tanh(x) as f32);
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "tanh at {x:e} ({:#010x}): {g:e}, the rounded routine gives {want:e}",
                (x as f32).to_bits()
            );
        }
    }

    /// Every float32 value whose bit pattern is `start + i * stride` up to `end`, both signs.
    fn float32_stride(start: u32, end: u32, stride: u32) -> Vec<f64> {
        (start..=end)
            .step_by(stride as usize)
            .flat_map(|bits| {
                let x = f64::from(f32::from_bits(bits));
                [x, -x]
            })
            .collect()
    }

    #[test]
    fn tanh_f32_special_values() {
        let mut xs = specials();
        xs.extend([
            TANH_TINY,
            -TANH_TINY,
            f64::from(f32::from_bits(0x3900_0000 - 1)),
            TANH_LIMIT,
            -TANH_LIMIT,
            f64::from(20.000002f32),
            9.0,
            9.01,
            8.5,
            0.1, // not a float32 value: flagged
            f64::from(0.1f32),
            f64::from(f32::MIN_POSITIVE),
            f64::from(f32::from_bits(1)),
        ]);
        check_rounded(&xs);
    }

    #[test]
    fn tanh_f32_stride_through_every_float32() {
        // About a million arguments of each sign, from the subnormals to NaN.
        check_rounded(&float32_stride(0, 0x7fc0_0000, 2039));
        // Densely where the approximation is used.
        check_rounded(&float32_stride(0x3900_0000, 0x41a0_0000, 331));
    }

    #[test]
    fn tanh_f32_flags_results_near_a_midpoint() {
        // Walk float32 arguments until a lane flags one for its result, then check a block
        // holding it: the flag must hand it to the routine.
        let flagged: Vec<f64> = (0x3e00_0000u32..0x3f80_0000)
            .map(|bits| f64::from(f32::from_bits(bits)))
            .filter(|&x| TanhF32::lane(x).1)
            .take(8)
            .collect();
        assert_eq!(flagged.len(), 8, "some results lie near a float32 midpoint");
        check_rounded(&flagged);
    }

    #[test]
    #[ignore = "every float32 argument: a minute and a half on two cores in a release build"]
    fn tanh_f32_every_float32() {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        // Every float32 bit pattern from zero to infinity, with both signs; then NaN.
        let end = 0x7f80_0001u32;
        let (flagged, farthest) = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    s.spawn(move || {
                        let (mut flagged, mut farthest) = (0u64, 0u64);
                        let mut xs = Vec::with_capacity(4096);
                        let mut got = vec![0.0; 2 * 4096];
                        let mut bits = t * 4096;
                        while bits < end {
                            xs.clear();
                            let last = (bits + 4096).min(end);
                            for b in bits..last {
                                let x = f64::from(f32::from_bits(b));
                                xs.push(x);
                                xs.push(-x);
                            }
                            let got = &mut got[..xs.len()];
                            got.fill(0.0);
                            for (chunk, out) in xs.chunks(4096).zip(got.chunks_mut(4096)) {
                                run::<TanhF32>(chunk, out, &mut [], true);
                            }
                            for (&x, &g) in xs.iter().zip(got.iter()) {
                                let ([approx, _], flag) = TanhF32::lane(x);
                                let exact = libm::tanh(x);
                                flagged += flag as u64;
                                if x.abs() >= TANH_TINY {
                                    let ulps = approx.to_bits().abs_diff(exact.to_bits());
                                    farthest = farthest.max(ulps);
                                }
                                let want = f64::from(exact as f32);
                                assert_eq!(g.to_bits(), want.to_bits(), "tanh at {x:e}");
                            }
                            bits += threads * 4096;
                        }
                        (flagged, farthest)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a checking thread"))
                .fold((0, 0), |(n, d), (m, e)| (n + m, d.max(e)))
        });
        check_rounded(&[f64::INFINITY, f64::NEG_INFINITY, f64::NAN]);
        // Fewer than 2^-14 of the arguments (in fact about 2^-22) are left to the routine, and
        // the approximation stays far inside the margin.
        assert!(flagged < (2 * u64::from(end)) >> 14, "{flagged} flagged");
        assert!(
            farthest <= MIDPOINT_MARGIN / 64,
            "{farthest} ulps from the routine"
        );
        println!("{flagged} flagged; at most {farthest} ulps from the routine");
    }
}
