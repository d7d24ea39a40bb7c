//! Property tests over many keys: the sampler contracts and statistics of acceptance E65, and
//! the range guarantee of uniform samples (including intervals where rounding to float32 would
//! reach `maxval` or fall below `minval`).

use proptest::prelude::*;
use quabla_ir::DType;
use quabla_random::*;

/// Few cases for the statistical properties: each draws 10^5 values.
fn stats_config() -> ProptestConfig {
    ProptestConfig {
        cases: 6,
        ..ProptestConfig::default()
    }
}

fn mean_and_std(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

fn floats(samples: Samples) -> Vec<f64> {
    samples.to_f64_vec()
}

proptest! {
    #![proptest_config(stats_config())]

    #[test]
    fn normal_statistics(seed in any::<u64>()) {
        let z = floats(normal(&Key::from_value(seed), &[100_000], DType::F64).unwrap());
        let (mean, std) = mean_and_std(&z);
        prop_assert!(mean.abs() < 0.02, "mean {mean}");
        prop_assert!((std - 1.0).abs() < 0.02, "std {std}");
        let max = z.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        prop_assert!(max <= 8.5718, "max |z| {max}");
    }

    #[test]
    fn glorot_normal_statistics(seed in any::<u64>()) {
        let w = floats(glorot_normal(&Key::from_value(seed), &[200, 300], DType::F64).unwrap());
        let (_, std) = mean_and_std(&w);
        let expected = (2.0f64 / 500.0).sqrt();
        prop_assert!((std / expected - 1.0).abs() < 0.02, "std {std}, expected {expected}");
    }

    #[test]
    fn uniform_statistics(seed in any::<u64>()) {
        let u = floats(uniform(&Key::from_value(seed), &[100_000], DType::F64, 0.0, 1.0).unwrap());
        let (mean, std) = mean_and_std(&u);
        prop_assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
        prop_assert!((std - (1.0f64 / 12.0).sqrt()).abs() < 0.01, "std {std}");
        prop_assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
    }

    #[test]
    fn uniform_float32_stays_in_the_interval(seed in any::<u64>()) {
        let u = floats(uniform(&Key::from_value(seed), &[100_000], DType::F32, -1.0, 1.0).unwrap());
        prop_assert!(u.iter().all(|&x| (-1.0..1.0).contains(&x)));
    }

    #[test]
    fn bernoulli_frequency(seed in any::<u64>(), p in 0.0f64..=1.0) {
        let b = floats(bernoulli(&Key::from_value(seed), p, &[100_000]).unwrap());
        let freq = b.iter().sum::<f64>() / b.len() as f64;
        // Six standard deviations of the frequency at p = 1/2.
        prop_assert!((freq - p).abs() < 0.01, "frequency {freq} for p {p}");
    }
}

proptest! {
    #[test]
    fn split_children_do_not_depend_on_the_count(
        seed in any::<u64>(),
        n in 1usize..40,
        m in 1usize..40,
    ) {
        let k = Key::from_value(seed);
        let a = split(&k, n).unwrap();
        let b = split(&k, m).unwrap();
        let common = n.min(m);
        prop_assert_eq!(&a[..common], &b[..common]);
    }

    #[test]
    fn the_same_key_gives_the_same_numbers(seed in any::<u64>(), n in 1usize..64) {
        let k = Key::from_value(seed);
        prop_assert_eq!(
            normal(&k, &[n], DType::F64).unwrap(),
            normal(&k, &[n], DType::F64).unwrap()
        );
        prop_assert_eq!(
            uniform(&k, &[n], DType::F32, 0.0, 1.0).unwrap(),
            uniform(&k, &[n], DType::F32, 0.0, 1.0).unwrap()
        );
    }

    #[test]
    fn normal_prefixes_agree(seed in any::<u64>(), n in 1usize..64) {
        // Element e of a sample does not depend on the shape it was drawn for, except that
        // an odd count drops the last sine.
        let k = Key::from_value(seed);
        let long = floats(normal(&k, &[n + 1], DType::F64).unwrap());
        let short = floats(normal(&k, &[n], DType::F64).unwrap());
        prop_assert_eq!(&long[..n], &short[..]);
    }

    #[test]
    fn uniform_samples_lie_in_any_interval(
        seed in any::<u64>(),
        a in -1e6f64..1e6,
        width_exp in -60i32..20,
        dtype in prop_oneof![Just(DType::F32), Just(DType::F64)],
    ) {
        let b = a + 2f64.powi(width_exp);
        prop_assume!(a < b);
        match uniform(&Key::from_value(seed), &[256], dtype, a, b) {
            Ok(u) => {
                for x in floats(u) {
                    prop_assert!(a <= x && x < b, "{x} outside [{a}, {b})");
                }
            }
            // Only float32 intervals narrower than the float32 spacing may hold no value.
            Err(RandomError::UniformEmpty { .. }) => prop_assert_eq!(dtype, DType::F32),
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }

    #[test]
    fn no_sampler_panics_on_any_shape(
        seed in any::<u64>(),
        shape in prop::collection::vec(prop_oneof![Just(0usize), 1usize..4, Just(usize::MAX)], 0..4),
    ) {
        let k = Key::from_value(seed);
        let _ = uniform(&k, &shape, DType::F32, 0.0, 1.0);
        let _ = normal(&k, &shape, DType::F64);
        let _ = bernoulli(&k, 0.5, &shape);
        let _ = glorot_normal(&k, &shape, DType::F64);
        let _ = glorot_uniform(&k, &shape, DType::F32);
        let _ = he_normal(&k, &shape, DType::F64);
    }
}

#[test]
fn float32_rounding_onto_maxval_is_replaced() {
    // Values in [1, 1 + 2^-23) round to 1 or to maxval = 1 + 2^-23 (a float32): those that
    // round up to maxval become the largest float32 below it, which is 1.
    let hi = 1.0 + 2f64.powi(-23);
    for seed in 0..8u64 {
        let u = floats(uniform(&Key::from_value(seed), &[1000], DType::F32, 1.0, hi).unwrap());
        assert!(u.iter().all(|&x| x == 1.0), "{u:?}");
    }
}

#[test]
fn float32_rounding_below_minval_is_replaced() {
    // minval = 1 + 2^-25 is not a float32: values that round down to 1 become the smallest
    // float32 >= minval, 1 + 2^-23.
    let lo = 1.0 + 2f64.powi(-25);
    let hi = 1.0 + 2f64.powi(-22);
    let smallest = 1.0 + 2f64.powi(-23);
    let u = floats(uniform(&key(9), &[4000], DType::F32, lo, hi).unwrap());
    assert!(u.iter().all(|&x| lo <= x && x < hi));
    assert!(u.contains(&smallest));
}

#[test]
fn float64_rounding_onto_maxval_is_replaced() {
    // A one-ulp interval: every value rounds to 1 or to maxval, and maxval is never returned.
    let hi = 1.0f64.next_up();
    let u = floats(uniform(&key(4), &[1000], DType::F64, 1.0, hi).unwrap());
    assert!(u.iter().all(|&x| x == 1.0));
}

#[test]
fn float32_interval_ending_at_one() {
    // On [1 - 2^-23, 1) the top quarter of the float64 values rounds to 1.0f32, which must be
    // replaced by the largest float32 below 1.
    let lo = 1.0 - 2f64.powi(-23);
    let below_one = f64::from(1.0f32.next_down());
    let u = floats(uniform(&key(11), &[1000], DType::F32, lo, 1.0).unwrap());
    assert!(u.iter().all(|&x| lo <= x && x < 1.0), "{u:?}");
    let at_top = u.iter().filter(|&&x| x == below_one).count();
    assert!(
        at_top > 250,
        "{at_top} samples at the largest float32 below 1"
    );
}

#[test]
fn spans_that_overflow_stay_finite() {
    for dtype in [DType::F64, DType::F32] {
        let u = floats(uniform(&key(2), &[10_000], dtype, -f64::MAX, f64::MAX).unwrap());
        assert!(u.iter().all(|&x| (-f64::MAX..f64::MAX).contains(&x)));
        let (mean, _) = mean_and_std(&u.iter().map(|x| x / f64::MAX).collect::<Vec<_>>());
        assert!(mean.abs() < 0.05, "mean {mean}");
    }
}
