//! Transcendental functions over slices, bit-identical to the portable `libm` routines
//! (numerics.md §1.5), several elements per instruction.
//!
//! The scalar musl routines branch per argument (on its magnitude, its sign, the quadrant of
//! its reduction). Each function here is written as a branch-free *lane*: every branch the
//! scalar routine could take for an ordinary argument is evaluated and the argument's own
//! result selected, with the scalar routine's operations, in its order and with its rounding
//! (Rust never contracts `a * b + c` into a fused multiply-add). The compiler then vectorizes
//! the loop over a block, and each lane produces exactly the bits of the scalar call.
//!
//! A lane also says when its argument needs a path the branch-free form leaves out (huge or
//! non-finite arguments, subnormal results, the cancellation cases of the trigonometric
//! reduction). The block is still written in full; the flagged elements are then recomputed
//! with the scalar routine.
//!
//! On x86-64 the loop has AVX-512 and AVX2 builds (both with FMA) chosen at run time;
//! elsewhere the baseline build runs (the compiler still vectorizes it to the baseline SIMD
//! width). The bit-exact lanes never fuse a multiply-add (Rust does not contract `a * b + c`),
//! so FMA changes none of their results; the [`narrow`] lanes, which are exact only after
//! rounding, use `mul_add` (on a baseline x86-64 build, the C library's `fma`).
//!
//! Modules: [`trig`] (`sin`, `cos`, and both at once), [`exp`] (`exp`, `expm1`, `tanh`,
//! written over groups of lanes, [`wide`]), [`log`] (`log`, `log1p`), and [`narrow`] (float32
//! results from a cheaper approximation, exact after rounding: `tanh`).

pub(crate) mod exp;
pub(crate) mod log;
pub(crate) mod narrow;
pub(crate) mod trig;
pub(crate) mod wide;

use wide::{F64s, WIDTH};

use quabla_ir::UnaryOp;

/// ln 2 split into a head exact in 32 bits and its tail (the musl `exp` and `log` families
/// share them).
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
/// 1/ln 2 (the `exp` family's reduction multiple).
const INV_LN2: f64 = f64::from_bits(0x3ff7_1547_652b_82fe);

/// Elements whose lane flags are checked together before the fix-up.
const BLOCK: usize = 256;

/// A function with a branch-free lane form.
pub(crate) trait LaneFn {
    /// Results per element: 1, or 2 for a pair computed together.
    const RESULTS: usize;
    /// Whether the function is written over groups of lanes ([`wide`]): the loop then runs
    /// [`LaneFn::lanes`] on [`WIDTH`] elements at a time (one result each).
    const WIDE: bool = false;
    /// The results for one element, and whether the lane form cannot produce them.
    fn lane(x: f64) -> ([f64; 2], bool);
    /// The first results of [`WIDTH`] elements and their flags, as [`LaneFn::lane`] gives
    /// them one by one (a wide function's own group form).
    #[inline(always)]
    fn lanes(x: F64s<WIDTH>) -> (F64s<WIDTH>, [bool; WIDTH]) {
        let each: [([f64; 2], bool); WIDTH] = std::array::from_fn(|i| Self::lane(x.0[i]));
        (
            F64s(std::array::from_fn(|i| each[i].0[0])),
            std::array::from_fn(|i| each[i].1),
        )
    }
    /// The scalar routine, for flagged elements.
    fn exact(x: f64) -> [f64; 2];
}

/// Declares a one-result [`LaneFn`] from its lane function (`fn(f64) -> (f64, bool)`) and its
/// scalar routine.
macro_rules! one_result_lane {
    ($(#[$doc:meta])* $name:ident, $lane:path, $exact:path) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub(crate) struct $name;

        impl $crate::kernels::lanes::LaneFn for $name {
            const RESULTS: usize = 1;
            #[inline(always)]
            fn lane(x: f64) -> ([f64; 2], bool) {
                let (value, flagged) = $lane(x);
                ([value, 0.0], flagged)
            }
            fn exact(x: f64) -> [f64; 2] {
                [$exact(x), 0.0]
            }
        }
    };
}
use one_result_lane;

/// Declares a one-result [`LaneFn`] written over groups of lanes, from its group function
/// (`fn<const W: usize>(F64s<W>) -> (F64s<W>, Masks<W>)`) and its scalar routine: the group
/// of [`WIDTH`] runs in the loop, the group of one for single elements.
macro_rules! wide_lane {
    ($(#[$doc:meta])* $name:ident, $lanes:ident, $exact:path) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub(crate) struct $name;

        impl $crate::kernels::lanes::LaneFn for $name {
            const RESULTS: usize = 1;
            const WIDE: bool = true;
            #[inline(always)]
            fn lane(x: f64) -> ([f64; 2], bool) {
                let (value, flagged) = $lanes($crate::kernels::lanes::wide::F64s([x]));
                ([value.0[0], 0.0], flagged.0[0])
            }
            #[inline(always)]
            fn lanes(
                x: $crate::kernels::lanes::wide::F64s<{ $crate::kernels::lanes::wide::WIDTH }>,
            ) -> (
                $crate::kernels::lanes::wide::F64s<{ $crate::kernels::lanes::wide::WIDTH }>,
                [bool; $crate::kernels::lanes::wide::WIDTH],
            ) {
                let (value, flagged) = $lanes(x);
                (value, flagged.0)
            }
            fn exact(x: f64) -> [f64; 2] {
                [$exact(x), 0.0]
            }
        }
    };
}
use wide_lane;

/// Whether `op` has a lane form.
pub(crate) fn has_lanes(op: UnaryOp) -> bool {
    matches!(
        op,
        UnaryOp::Sin
            | UnaryOp::Cos
            | UnaryOp::Exp
            | UnaryOp::Expm1
            | UnaryOp::Tanh
            | UnaryOp::Log
            | UnaryOp::Log1p
    )
}

/// `out[i] = op(x[i])` for an `op` with a lane form (see [`has_lanes`]; any other op leaves
/// `out` alone), each result rounded to float32 when `round_f32`.
pub(crate) fn unary(op: UnaryOp, x: &[f64], out: &mut [f64], round_f32: bool) {
    match op {
        UnaryOp::Sin => run::<trig::Sin>(x, out, &mut [], round_f32),
        UnaryOp::Cos => run::<trig::Cos>(x, out, &mut [], round_f32),
        UnaryOp::Exp => run::<exp::Exp>(x, out, &mut [], round_f32),
        UnaryOp::Expm1 => run::<exp::Expm1>(x, out, &mut [], round_f32),
        // A float32 `tanh` (the argument a float32 value) needs only the rounded bits.
        UnaryOp::Tanh if round_f32 => run::<narrow::TanhF32>(x, out, &mut [], true),
        UnaryOp::Tanh => run::<exp::Tanh>(x, out, &mut [], false),
        UnaryOp::Log => run::<log::Log>(x, out, &mut [], round_f32),
        UnaryOp::Log1p => run::<log::Log1p>(x, out, &mut [], round_f32),
        _ => {}
    }
}

/// Both `sin` and `cos` of every element in one pass: the reduction and both polynomial
/// kernels are shared, so this costs about as much as one of them.
pub(crate) fn sin_cos(x: &[f64], sin: &mut [f64], cos: &mut [f64], round_f32: bool) {
    run::<trig::SinCos>(x, sin, cos, round_f32);
}

/// [`unary`] of float32 operands into float32 results (a float32 node: the float64 result
/// rounded once), widening and rounding block by block.
pub(crate) fn unary_f32(op: UnaryOp, x: &[f32], out: &mut [f32]) {
    match op {
        UnaryOp::Sin => run_f32::<trig::Sin>(x, out, &mut []),
        UnaryOp::Cos => run_f32::<trig::Cos>(x, out, &mut []),
        UnaryOp::Exp => run_f32::<exp::Exp>(x, out, &mut []),
        UnaryOp::Expm1 => run_f32::<exp::Expm1>(x, out, &mut []),
        UnaryOp::Tanh => run_f32::<narrow::TanhF32>(x, out, &mut []),
        UnaryOp::Log => run_f32::<log::Log>(x, out, &mut []),
        UnaryOp::Log1p => run_f32::<log::Log1p>(x, out, &mut []),
        _ => {}
    }
}

/// [`sin_cos`] of float32 operands into float32 results.
pub(crate) fn sin_cos_f32(x: &[f32], sin: &mut [f32], cos: &mut [f32]) {
    run_f32::<trig::SinCos>(x, sin, cos);
}

/// [`run`] with float32 operands and results: each block is widened, computed (and fixed
/// up) in float64 and rounded as it is written out.
fn run_f32<F: LaneFn>(x: &[f32], first: &mut [f32], second: &mut [f32]) {
    let mut wide = [0.0f64; BLOCK];
    let (mut a, mut b) = ([0.0f64; BLOCK], [0.0f64; BLOCK]);
    let mut at = 0;
    while at < x.len() {
        let end = (at + BLOCK).min(x.len());
        let n = end - at;
        for (w, &v) in wide.iter_mut().zip(&x[at..end]) {
            *w = f64::from(v);
        }
        let (xs, a) = (&wide[..n], &mut a[..n]);
        let b: &mut [f64] = if F::RESULTS == 2 {
            &mut b[..n]
        } else {
            &mut []
        };
        if dispatch::<F>(xs, a, b) {
            fix_up::<F>(xs, a, b);
        }
        for (o, &v) in first[at..end].iter_mut().zip(a.iter()) {
            *o = v as f32;
        }
        if F::RESULTS == 2 {
            for (o, &v) in second[at..end].iter_mut().zip(b.iter()) {
                *o = v as f32;
            }
        }
        at = end;
    }
}

/// Runs `F` over `x` into `first` (and `second` for a pair), block by block.
fn run<F: LaneFn>(x: &[f64], first: &mut [f64], second: &mut [f64], round_f32: bool) {
    let mut at = 0;
    while at < x.len() {
        let end = (at + BLOCK).min(x.len());
        let xs = &x[at..end];
        let a = &mut first[at..end];
        let b: &mut [f64] = if F::RESULTS == 2 {
            &mut second[at..end]
        } else {
            &mut []
        };
        if dispatch::<F>(xs, a, b) {
            fix_up::<F>(xs, a, b);
        }
        if round_f32 {
            round_to_f32(a);
            round_to_f32(b);
        }
        at = end;
    }
}

fn round_to_f32(values: &mut [f64]) {
    for v in values {
        *v = *v as f32 as f64;
    }
}

/// Recomputes the flagged elements of a block with the scalar routine.
#[cold]
fn fix_up<F: LaneFn>(x: &[f64], first: &mut [f64], second: &mut [f64]) {
    for (i, &v) in x.iter().enumerate() {
        if F::lane(v).1 {
            let r = F::exact(v);
            first[i] = r[0];
            if F::RESULTS == 2 {
                second[i] = r[1];
            }
        }
    }
}

fn dispatch<F: LaneFn>(x: &[f64], first: &mut [f64], second: &mut [f64]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let fma = std::arch::is_x86_feature_detected!("fma");
        if fma && std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: this build of the loop only requires AVX-512F and FMA, detected just
            // above.
            return unsafe { lanes_avx512::<F>(x, first, second) };
        }
        if fma && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: this build of the loop only requires AVX2 and FMA, detected just above.
            return unsafe { lanes_avx2::<F>(x, first, second) };
        }
    }
    lanes::<F>(x, first, second)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn lanes_avx512<F: LaneFn>(x: &[f64], first: &mut [f64], second: &mut [f64]) -> bool {
    lanes::<F>(x, first, second)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn lanes_avx2<F: LaneFn>(x: &[f64], first: &mut [f64], second: &mut [f64]) -> bool {
    lanes::<F>(x, first, second)
}

/// The branch-free loop: writes every lane and returns whether any lane was flagged.
///
/// Flags are combined as integers and every selection is between values both of which are
/// computed, so the loop has no control flow and vectorizes.
#[inline(always)]
fn lanes<F: LaneFn>(x: &[f64], first: &mut [f64], second: &mut [f64]) -> bool {
    let n = x.len();
    let mut flagged = 0u64;
    // The group form gives one result per element.
    const { assert!(!F::WIDE || F::RESULTS == 1) };
    if F::WIDE {
        let (x_groups, x_rest) = x.as_chunks::<WIDTH>();
        let (out_groups, out_rest) = first[..n].as_chunks_mut::<WIDTH>();
        for (&group, out) in x_groups.iter().zip(out_groups) {
            let (values, flags) = F::lanes(F64s(group));
            *out = values.0;
            for flag in flags {
                flagged |= flag as u64;
            }
        }
        for (&v, a) in x_rest.iter().zip(out_rest) {
            let (r, flag) = F::lane(v);
            *a = r[0];
            flagged |= flag as u64;
        }
    } else if F::RESULTS == 2 {
        for ((&v, a), b) in x.iter().zip(&mut first[..n]).zip(&mut second[..n]) {
            let (r, flag) = F::lane(v);
            *a = r[0];
            *b = r[1];
            flagged |= flag as u64;
        }
    } else {
        for (&v, a) in x.iter().zip(&mut first[..n]) {
            let (r, flag) = F::lane(v);
            *a = r[0];
            flagged |= flag as u64;
        }
    }
    flagged != 0
}

/// `a` where `pick` holds, else `b` (a select once vectorized).
#[inline(always)]
fn choose(pick: bool, a: f64, b: f64) -> f64 {
    if pick {
        a
    } else {
        b
    }
}

/// The high 32 bits of |x| (the musl routines' `hx`), as a signed 64-bit lane: signed 64-bit
/// lanes compare in one instruction where unsigned ones do not.
#[inline(always)]
fn high_word_abs(x: f64) -> i64 {
    ((x.to_bits() >> 32) & 0x7fff_ffff) as i64
}

/// `2^k` for an integral `k` in `-1022..=1023`, built from its exponent bits without an
/// integer conversion: adding `2^52 + 1023` leaves `k + 1023` in the low mantissa bits.
#[inline(always)]
fn pow2(k: f64) -> f64 {
    f64::from_bits((k + (1023.0 + 4_503_599_627_370_496.0)).to_bits() << 52)
}

#[cfg(test)]
pub(crate) mod testing {
    //! Checks every build of a lane loop, with the fix-up, against the scalar routine.

    use super::*;

    type Build = fn(&[f64], &mut [f64], &mut [f64]) -> bool;

    /// The builds of `F`'s loop this machine can run, by name.
    fn builds<F: LaneFn>() -> Vec<(&'static str, Build)> {
        let out: Vec<(&'static str, Build)> = vec![("baseline", lanes::<F>)];
        #[cfg(target_arch = "x86_64")]
        let out = {
            let mut out = out;
            let fma = std::arch::is_x86_feature_detected!("fma");
            if fma && std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 and FMA were detected.
                out.push(("avx2", |x, a, b| unsafe { lanes_avx2::<F>(x, a, b) }));
            }
            if fma && std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: AVX-512F and FMA were detected.
                out.push(("avx512", |x, a, b| unsafe { lanes_avx512::<F>(x, a, b) }));
            }
            out
        };
        out
    }

    fn same(got: f64, want: f64) -> bool {
        got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan())
    }

    /// Every build of `F` (block by block, with the fix-up) and [`run`] give the scalar
    /// routine's bits for every element of `xs`, with and without float32 rounding.
    pub(crate) fn check<F: LaneFn>(name: &str, xs: &[f64]) {
        let want: Vec<[f64; 2]> = xs.iter().map(|&x| F::exact(x)).collect();
        let compare = |what: &str, r: usize, got: &[f64], round: bool| {
            for ((&x, &g), w) in xs.iter().zip(got).zip(&want) {
                let w = if round { w[r] as f32 as f64 } else { w[r] };
                assert!(
                    same(g, w),
                    "{name} {what} result {r} at {x:e} ({:#018x}): {g:e}, libm gives {w:e}",
                    x.to_bits()
                );
            }
        };
        for (build, looped) in builds::<F>() {
            let (mut a, mut b) = (vec![0.0; xs.len()], vec![0.0; xs.len()]);
            for ((xc, ac), bc) in xs
                .chunks(BLOCK)
                .zip(a.chunks_mut(BLOCK))
                .zip(b.chunks_mut(BLOCK))
            {
                let bc: &mut [f64] = if F::RESULTS == 2 { bc } else { &mut [] };
                if looped(xc, ac, bc) {
                    fix_up::<F>(xc, ac, bc);
                }
            }
            compare(build, 0, &a, false);
            if F::RESULTS == 2 {
                compare(build, 1, &b, false);
            }
        }
        for round in [false, true] {
            let (mut a, mut b) = (vec![0.0; xs.len()], vec![0.0; xs.len()]);
            run::<F>(xs, &mut a, &mut b, round);
            compare("run", 0, &a, round);
            if F::RESULTS == 2 {
                compare("run", 1, &b, round);
            }
        }
    }

    /// Arguments around every given high word: a few low words, both signs.
    pub(crate) fn around_high_words(words: &[i64]) -> Vec<f64> {
        let mut xs = Vec::new();
        for &hi in words {
            for h in [hi - 1, hi, hi + 1] {
                for lo in [0u64, 1, 0x5444_2d18, 0x8000_0000, 0xffff_ffff] {
                    for sign in [0u64, 1] {
                        xs.push(f64::from_bits(sign << 63 | (h as u64) << 32 | lo));
                    }
                }
            }
        }
        xs
    }

    /// Special values every function is checked on.
    pub(crate) fn specials() -> Vec<f64> {
        vec![
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE / 3.0,
            5e-324,
            -5e-324,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
            f64::MAX,
            -f64::MAX,
            1.0,
            -1.0,
            0.5,
            2.0,
            1e-300,
            1e300,
        ]
    }

    #[test]
    fn powers_of_two_from_their_exponent() {
        for k in -1022..=1023 {
            assert_eq!(pow2(k as f64), 2f64.powi(k), "2^{k}");
        }
    }
}
