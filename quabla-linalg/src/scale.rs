//! Scaling by a power of two before a factorization, where its intermediate values could
//! overflow or underflow (numerics.md §6; docs/linalg.md).
//!
//! The factorizations square entries and sum squares (Householder norms, Jacobi rotations,
//! pivots of pivots): at `1e300` those overflow to infinity and the SVD of `1e300 * ones` was
//! all NaN; at `1e-300` they underflow to zero and the SVD was silently wrong; on subnormal
//! entries a solve met spurious zero pivots. A matrix whose largest magnitude lies outside
//! `[2^-256, 2^256]` is therefore factored as `2^-e A`, with `2^e` near its largest magnitude,
//! and the factors scaled back (singular values, eigenvalues and `R` by `2^e`, the Cholesky
//! factor by `2^(e/2)`, a solution by `2^-e`, `log|det|` by `n e ln 2`). Multiplying by a power
//! of two is exact unless it leaves the range of normal numbers, so a factorization that was
//! right stays right; a matrix inside the range is factored as it is, to the same bits as
//! without this module.

use std::borrow::Cow;

/// Largest magnitudes beyond `2^LIMIT` (or below `2^-LIMIT`) are scaled: their squares, and
/// sums of a few of them, stay far inside the float64 range after scaling, and the matrices
/// people factor (entries between about `1e-77` and `1e77`) are never touched.
const LIMIT: i32 = 256;

/// The exponent `e` to factor `a` as `2^-e a`, or `None` at ordinary scales (or for a zero or
/// non-finite matrix, which the kernels handle as they are). With `even`, `e` is even (for a
/// factor that scales as the square root).
pub(crate) fn exponent(a: &[f64], even: bool) -> Option<i32> {
    exponent_of_parts([a], even)
}

/// [`exponent`] of the values of all of `parts` together (the rows of the triangle a
/// factorization reads, say), without copying them.
pub(crate) fn exponent_of_parts<'a>(
    parts: impl IntoIterator<Item = &'a [f64]>,
    even: bool,
) -> Option<i32> {
    let mut largest = 0.0f64;
    for part in parts {
        largest = largest.max(largest_magnitude(part)?);
    }
    exponent_for(largest, even)
}

/// [`exponent`] of a finite matrix whose largest magnitude is `largest`
/// ([`largest_magnitude`]).
pub(crate) fn exponent_for(largest: f64, even: bool) -> Option<i32> {
    if largest == 0.0 {
        return None;
    }
    let e = largest.log2().floor() as i32;
    if (-LIMIT..=LIMIT).contains(&e) {
        return None;
    }
    Some(if even { e & !1 } else { e })
}

/// The largest `|x|` of `a` (0 when empty), or `None` when one is not finite. Every
/// factorization pays this pass, so it is written for the vector units: eight lanes of plain
/// comparisons, which the compiler turns into vector instructions (`f64::max`'s NaN rule, and
/// an early exit, would keep it scalar: a 256 x 256 Cholesky factor took half again as long).
pub(crate) fn largest_magnitude(a: &[f64]) -> Option<f64> {
    const LANES: usize = 8;
    let mut top = [0.0f64; LANES];
    // `|x| < inf` is false for infinities and NaN alike.
    let mut finite = [true; LANES];
    let chunks = a.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for l in 0..LANES {
            let m = chunk[l].abs();
            finite[l] &= m < f64::INFINITY;
            top[l] = if m > top[l] { m } else { top[l] };
        }
    }
    for &x in tail {
        let m = x.abs();
        finite[0] &= m < f64::INFINITY;
        top[0] = if m > top[0] { m } else { top[0] };
    }
    finite
        .iter()
        .all(|&f| f)
        .then(|| top.iter().fold(0.0f64, |a, &b| a.max(b)))
}

/// `x * 2^k`, exact whenever the result is a normal number (the constant is applied in steps
/// that keep it normal).
pub(crate) fn ldexp(mut x: f64, mut k: i32) -> f64 {
    const STEP: i32 = 960;
    while k > STEP {
        x *= 2f64.powi(STEP);
        k -= STEP;
    }
    while k < -STEP {
        x *= 2f64.powi(-STEP);
        k += STEP;
    }
    x * 2f64.powi(k)
}

/// `a` as it is when `e` is `None`, else `2^-e a`.
pub(crate) fn scaled(a: &[f64], e: Option<i32>) -> Cow<'_, [f64]> {
    match e {
        None => Cow::Borrowed(a),
        Some(e) => Cow::Owned(a.iter().map(|&x| ldexp(x, -e)).collect()),
    }
}

/// Multiplies each of `values` by `2^k` (nothing for `None`).
pub(crate) fn rescale(values: &mut [f64], k: Option<i32>) {
    if let Some(k) = k {
        for v in values {
            *v = ldexp(*v, k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_extreme_matrices_are_scaled_and_scaling_is_exact() {
        // Ordinary scales, zero and non-finite matrices are left alone.
        for a in [[1.0, -3.0], [1e-70, 2e70], [0.0, 0.0], [f64::NAN, 1e300]] {
            assert_eq!(exponent(&a, false), None, "{a:?}");
        }
        for (a, even) in [
            ([1e300, -3.0], false),
            ([4e-320, 0.0], false),
            ([1e-100, 1e-90], true),
        ] {
            let e = exponent(&a, even).unwrap_or_else(|| panic!("{a:?} not scaled"));
            assert!(!even || e % 2 == 0, "{a:?}: {e}");
            let s = scaled(&a, Some(e));
            let top = s.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            assert!(
                (0.25..4.0).contains(&top),
                "{a:?}: largest {top} after scaling by 2^-{e}"
            );
            // Back again, exactly.
            let mut back = s.into_owned();
            rescale(&mut back, Some(e));
            assert_eq!(back, a.to_vec(), "{a:?}");
        }
        assert_eq!(ldexp(1.5, -1060), 1.5 * 2f64.powi(-530) * 2f64.powi(-530));
        // The lanes see every element, the tail included; a non-finite one anywhere stops it.
        for len in [0, 1, 7, 8, 9, 17, 64, 65] {
            for at in 0..len {
                let mut v: Vec<f64> = (0..len).map(|i| (i as f64) - 30.0).collect();
                v[at] = -1e305;
                assert_eq!(largest_magnitude(&v), Some(1e305), "{len} {at}");
                assert_eq!(
                    exponent_of_parts([&v[..at], &v[at..]], false),
                    exponent(&v, false)
                );
                for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
                    v[at] = bad;
                    assert_eq!(largest_magnitude(&v), None, "{len} {at} {bad}");
                }
            }
        }
        assert_eq!(largest_magnitude(&[]), Some(0.0));
        assert_eq!(ldexp(ldexp(3.0, 1020), -1020), 3.0);
    }
}
