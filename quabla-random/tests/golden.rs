//! The golden values of numerics.md §9.4 (acceptance E64): exact for keys, uniform and
//! bernoulli; within 2 ulp for normal-based samples.

use quabla_ir::DType;
use quabla_random::*;

/// The distance in units in the last place between two finite floats of the same sign.
fn ulps(a: f64, b: f64) -> u64 {
    // Ordered integer images of the floats: adjacent floats differ by one.
    let ordered = |x: f64| {
        let bits = x.to_bits() as i64;
        if bits < 0 {
            i64::MIN - bits
        } else {
            bits
        }
    };
    ordered(a).abs_diff(ordered(b))
}

fn assert_within_2_ulp(got: &[f64], expected: &[f64]) {
    assert_eq!(got.len(), expected.len());
    for (g, e) in got.iter().zip(expected) {
        assert!(ulps(*g, *e) <= 2, "got {g:?}, expected {e:?}");
    }
}

#[test]
fn words_of_key_zero() {
    let expected = [
        0xe220a8397b1dcdaf,
        0x6e789e6aa1b965f4,
        0x06c45d188009454f,
        0xf88bb8a8724c81ec,
    ];
    for (i, e) in expected.iter().enumerate() {
        assert_eq!(word(0, i as u64), *e, "word(0, {i})");
    }
}

#[test]
fn split_of_key_zero() {
    let values: Vec<u64> = split(&key(0), 3)
        .unwrap()
        .iter()
        .map(|k| k.value())
        .collect();
    assert_eq!(
        values,
        [
            12141488642634205887,
            11746937539006808163,
            1638637292813414338
        ]
    );
}

#[test]
fn fold_in_values() {
    assert_eq!(fold_in(&key(0), 0).value(), 5197578548964807871);
    assert_eq!(fold_in(&key(0), 1).value(), 15916886550466581944);
    assert_eq!(fold_in(&key(7), -1).value(), 18102033877536474386);
    // The same data in any integer type folds the same way.
    assert_eq!(fold_in(&key(7), -1i8), fold_in(&key(7), u64::MAX));
    assert_eq!(fold_in(&key(7), -1i128), fold_in(&key(7), u64::MAX));
}

#[test]
fn seeds_reduce_modulo_2_pow_64() {
    assert_eq!(key((1u128 << 64) + 5).value(), 5);
    assert_eq!(key((1i128 << 64) + 5).value(), 5);
    assert_eq!(key(-1i64).value(), u64::MAX);
    assert_eq!(key(-1i8).value(), u64::MAX);
    assert_eq!(key(-2isize).value(), u64::MAX - 1);
    assert_eq!(key(i128::MIN).value(), 0);
    assert_eq!(key(u128::MAX).value(), u64::MAX);
    assert_eq!(key(200u8).value(), 200);
    assert_eq!(key(usize::MAX).value(), usize::MAX as u64);
    assert_eq!(Key::from_value(17).value(), 17);
    assert_eq!(key(17), Key::from_value(17));
}

#[test]
fn keys_print_their_value() {
    let k = key(-1);
    assert_eq!(k.to_string(), "Key(value=18446744073709551615)");
    assert_eq!(format!("{k:?}"), "Key(value=18446744073709551615)");
    assert_eq!(format!("{:?}", vec![key(1)]), "[Key(value=1)]");
}

#[test]
fn uniform_float64() {
    assert_eq!(
        uniform(&key(42), &[4], DType::F64, 0.0, 1.0).unwrap(),
        Samples::F64(vec![
            0.7415648787718233,
            0.1599103928769201,
            0.27860113025513866,
            0.34419071652363753
        ])
    );
}

#[test]
fn uniform_float32() {
    let u = uniform(&key(42), &[4], DType::F32, 0.0, 1.0).unwrap();
    assert_eq!(u.dtype(), DType::F32);
    assert_eq!(
        u.to_f64_vec(),
        [
            0.7415648698806763,
            0.1599103957414627,
            0.27860113978385925,
            0.34419071674346924
        ]
    );
}

#[test]
fn uniform_with_bounds() {
    assert_eq!(
        uniform(&key(42), &[2], DType::F64, -2.0, 2.0).unwrap(),
        Samples::F64(vec![0.9662595150872932, -1.3603584284923196])
    );
}

#[test]
fn normal_float64() {
    let Samples::F64(z) = normal(&key(0), &[3], DType::F64).unwrap() else {
        panic!("float64 samples expected");
    };
    assert_within_2_ulp(
        &z,
        &[-0.452757740217458, 0.20776603893419193, 2.650605812079669],
    );
}

#[test]
fn normal_float32_is_the_float64_value_rounded_once() {
    let z64 = normal(&key(0), &[5], DType::F64).unwrap().to_f64_vec();
    let Samples::F32(z32) = normal(&key(0), &[5], DType::F32).unwrap() else {
        panic!("float32 samples expected");
    };
    let rounded: Vec<f32> = z64.iter().map(|&x| x as f32).collect();
    assert_eq!(z32, rounded);
}

#[test]
fn bernoulli_half() {
    assert_eq!(
        bernoulli(&key(7), 0.5, &[8]).unwrap(),
        Samples::Bool(vec![true, true, false, false, true, true, true, true])
    );
}

#[test]
fn glorot_normal_2x3() {
    let Samples::F64(w) = glorot_normal(&key(1), &[2, 3], DType::F64).unwrap() else {
        panic!("float64 samples expected");
    };
    assert_within_2_ulp(
        &w,
        &[
            -0.01786670819687004,
            -0.6739557767723572,
            -0.14414896309611147,
            0.052553366529539,
            0.06520044269626249,
            -0.8030047815540733,
        ],
    );
}

#[test]
fn initializers_scale_the_same_stream() {
    // glorot_normal and he_normal are the normal stream times a float64 scale.
    let z = normal(&key(5), &[3, 4], DType::F64).unwrap().to_f64_vec();
    let g = glorot_normal(&key(5), &[3, 4], DType::F64)
        .unwrap()
        .to_f64_vec();
    let h = he_normal(&key(5), &[3, 4], DType::F64)
        .unwrap()
        .to_f64_vec();
    let gs = (2.0f64 / 7.0).sqrt();
    let hs = (2.0f64 / 3.0).sqrt();
    for i in 0..12 {
        assert_eq!(g[i], z[i] * gs);
        assert_eq!(h[i], z[i] * hs);
    }
    // Batch axes multiply both fans: (2, 3, 4) has fan_in 6 and fan_out 8.
    let z = normal(&key(5), &[2, 3, 4], DType::F64)
        .unwrap()
        .to_f64_vec();
    let h = he_normal(&key(5), &[2, 3, 4], DType::F64)
        .unwrap()
        .to_f64_vec();
    let g = glorot_normal(&key(5), &[2, 3, 4], DType::F64)
        .unwrap()
        .to_f64_vec();
    for i in 0..24 {
        assert_eq!(h[i], z[i] * (2.0f64 / 6.0).sqrt());
        assert_eq!(g[i], z[i] * (2.0f64 / 14.0).sqrt());
    }
    // glorot_uniform is uniform on [-l, l).
    let l = (6.0f64 / 14.0).sqrt();
    assert_eq!(
        glorot_uniform(&key(5), &[2, 3, 4], DType::F32).unwrap(),
        uniform(&key(5), &[2, 3, 4], DType::F32, -l, l).unwrap()
    );
}

#[test]
fn rank_zero_shapes_hold_one_value() {
    let u = uniform(&key(42), &[], DType::F64, 0.0, 1.0).unwrap();
    assert_eq!(u, Samples::F64(vec![0.7415648787718233]));
    assert_eq!(normal(&key(0), &[], DType::F64).unwrap().len(), 1);
    assert_eq!(bernoulli(&key(0), 0.5, &[]).unwrap().len(), 1);
}

#[test]
fn samples_become_host_data() {
    let u = uniform(&key(42), &[2], DType::F32, 0.0, 1.0).unwrap();
    let data = u.clone().into_host_data();
    assert_eq!(data.dtype(), DType::F32);
    assert_eq!(data.to_f64_vec(), u.to_f64_vec());
    let b: quabla_ir::HostData = bernoulli(&key(0), 1.0, &[3]).unwrap().into();
    assert_eq!(b.to_f64_vec(), [1.0, 1.0, 1.0]);
}

/// `randint` (the stream's amendment): the high word of `word * span`, checked here against
/// the long multiplication of the words' decimal digits in 32-bit limbs, and its bounds.
#[test]
fn randint_is_the_high_word_of_the_scaled_word() {
    let k = key(9);
    // span 10 on [-3, 7): floor(w * 10 / 2^64) is the leading decimal digit of w / 2^64.
    let Samples::I64(v) = randint(&k, &[6], DType::I64, -3, 7).unwrap() else {
        panic!("int64 samples expected");
    };
    for (e, &x) in v.iter().enumerate() {
        let w = word(k.value(), e as u64);
        let digit = (w / (u64::MAX / 10 + 1)) as i64;
        assert_eq!(x, -3 + digit, "element {e}");
    }
    // The full int64 range is the word itself, shifted by i64::MIN (span 2^64 - 1).
    let Samples::I64(full) = randint(&k, &[3], DType::I64, i64::MIN, i64::MAX).unwrap() else {
        panic!("int64 samples expected");
    };
    for (e, &x) in full.iter().enumerate() {
        let w = word(k.value(), e as u64);
        let high = w - u64::from(w != 0); // floor(w (2^64 - 1) / 2^64)
        assert_eq!(x, i64::MIN.wrapping_add(high as i64));
    }
    let Samples::I32(small) = randint(&k, &[100], DType::I32, i32::MIN.into(), 1i64 << 31).unwrap()
    else {
        panic!("int32 samples expected");
    };
    assert_eq!(small.len(), 100);
    assert!(randint(&k, &[1], DType::I32, 0, (1i64 << 31) + 1).is_err());
    assert!(randint(&k, &[1], DType::I64, 5, 5).is_err());
    assert_eq!(
        randint(&k, &[1], DType::F64, 0, 5).unwrap_err().to_string(),
        "randint dtype must be int32 or int64, got float64"
    );
    assert_eq!(mul_high(u64::MAX, u64::MAX), u64::MAX - 1);
}
