//! Every error of the key functions and samplers: message (errors.md AR10-AR12, TY11, SH6),
//! facade kind, and the order in which arguments are checked.

use quabla_ir::DType;
use quabla_random::*;

fn message(e: RandomError) -> String {
    e.to_string()
}

#[test]
fn split_needs_at_least_one_key() {
    let e = split(&key(3), 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(message(e), "split num must be >= 1, got 0");
    assert_eq!(split(&key(3), 5).unwrap().len(), 5);
}

#[test]
fn split_reports_a_count_it_cannot_allocate() {
    let e = split(&key(3), usize::MAX).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);
    assert!(matches!(e, RandomError::OutOfMemory { .. }), "{e:?}");
}

#[test]
fn bernoulli_p_outside_the_unit_interval() {
    for (p, text) in [
        (-0.1, "-0.1"),
        (1.5, "1.5"),
        (2.0, "2.0"),
        (f64::NAN, "nan"),
        (f64::INFINITY, "inf"),
    ] {
        let e = bernoulli(&key(0), p, &[2]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert_eq!(
            message(e),
            format!("bernoulli p must be in [0, 1], got {text}")
        );
    }
    assert_eq!(
        bernoulli(&key(0), 0.0, &[4]).unwrap(),
        Samples::Bool(vec![false; 4])
    );
    assert_eq!(
        bernoulli(&key(0), 1.0, &[4]).unwrap(),
        Samples::Bool(vec![true; 4])
    );
}

#[test]
fn uniform_bounds_must_be_finite_and_ordered() {
    let cases = [
        (1.0, 1.0),
        (2.0, 1.0),
        (f64::NAN, 1.0),
        (0.0, f64::NAN),
        (0.0, f64::INFINITY),
        (f64::NEG_INFINITY, 0.0),
    ];
    for (lo, hi) in cases {
        for dtype in [DType::F64, DType::F32] {
            let e = uniform(&key(0), &[2], dtype, lo, hi).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert_eq!(message(e), "uniform requires finite minval < maxval");
        }
    }
}

#[test]
fn uniform_float32_needs_a_float32_value_in_the_interval() {
    let lo = 1.0 + 2f64.powi(-40);
    let hi = 1.0 + 2f64.powi(-39);
    let e = uniform(&key(0), &[2], DType::F32, lo, hi).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        message(e),
        "uniform requires an interval [minval, maxval) that contains a float32 value, \
         got [1.0000000000009095, 1.000000000001819)"
    );
    // Beyond the float32 range.
    assert!(matches!(
        uniform(&key(0), &[2], DType::F32, 1e39, 2e39),
        Err(RandomError::UniformEmpty { .. })
    ));
    // The same intervals are fine in float64.
    assert!(uniform(&key(0), &[2], DType::F64, lo, hi).is_ok());
    assert!(uniform(&key(0), &[2], DType::F64, 1e39, 2e39).is_ok());
}

#[test]
fn initializers_need_rank_two() {
    type Init = fn(&Key, &[usize], DType) -> Result<Samples, RandomError>;
    let inits: [(&str, Init); 3] = [
        ("glorot_normal", glorot_normal),
        ("glorot_uniform", glorot_uniform),
        ("he_normal", he_normal),
    ];
    for (name, init) in inits {
        let e = init(&key(3), &[3], DType::F64).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert_eq!(
            message(e),
            format!("{name} requires a shape of rank >= 2, got [3]")
        );
        let e = init(&key(3), &[], DType::F32).unwrap_err();
        assert_eq!(
            message(e),
            format!("{name} requires a shape of rank >= 2, got []")
        );
        assert_eq!(init(&key(3), &[2, 5], DType::F32).unwrap().len(), 10);
    }
}

#[test]
fn samplers_produce_floats_only() {
    let expected = "dtype must be float32 or float64, got bool";
    let results = [
        uniform(&key(0), &[2], DType::Bool, 0.0, 1.0),
        normal(&key(0), &[2], DType::Bool),
        glorot_normal(&key(0), &[2, 2], DType::Bool),
        glorot_uniform(&key(0), &[2, 2], DType::Bool),
        he_normal(&key(0), &[2, 2], DType::Bool),
    ];
    for result in results {
        let e = result.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Type);
        assert_eq!(message(e), expected);
    }
}

#[test]
fn zero_extents_are_rejected_with_the_ir_wording() {
    let e = uniform(&key(0), &[2, 0], DType::F64, 0.0, 1.0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Shape);
    assert_eq!(
        message(e),
        "empty slices are not supported: shape [2, 0] has a zero extent"
    );
    let ir = quabla_ir::Shape::new(vec![2, 0]).unwrap_err().to_string();
    for result in [
        normal(&key(0), &[2, 0], DType::F64),
        bernoulli(&key(0), 0.5, &[2, 0]),
        glorot_normal(&key(0), &[2, 0], DType::F64),
        glorot_uniform(&key(0), &[2, 0], DType::F64),
        he_normal(&key(0), &[2, 0], DType::F64),
    ] {
        assert_eq!(message(result.unwrap_err()), ir);
    }
}

#[test]
fn overflowing_sizes_name_the_shape() {
    let e = uniform(&key(0), &[usize::MAX, 2], DType::F64, 0.0, 1.0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        message(e),
        format!("shape [{}, 2] has too many elements to sample", usize::MAX)
    );
    // The count fits but its size in bytes does not.
    let e = normal(&key(0), &[1 << 61], DType::F64).unwrap_err();
    assert!(matches!(e, RandomError::TooLarge { .. }), "{e:?}");
    // A fan product of huge extents overflows before any float arithmetic.
    let e = he_normal(&key(0), &[1 << 40, 1 << 40, 1 << 40], DType::F64).unwrap_err();
    assert!(matches!(e, RandomError::TooLarge { .. }), "{e:?}");
}

#[test]
fn requests_the_allocator_cannot_satisfy_are_errors() {
    // 2^63 bytes: more than any allocation may be.
    let e = normal(&key(0), &[1 << 60], DType::F64).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);
    assert_eq!(
        message(e),
        format!(
            "cannot allocate {} bytes for random values of shape [{}]",
            1u64 << 63,
            1u64 << 60
        )
    );
    // 2^62 bytes: a size the allocator is asked for, and refuses.
    let e = bernoulli(&key(0), 0.5, &[1 << 31, 1 << 31]).unwrap_err();
    assert!(
        matches!(e, RandomError::OutOfMemory { bytes, .. } if bytes == 1 << 62),
        "{e:?}"
    );
    let e = uniform(&key(0), &[1 << 30, 1 << 30], DType::F32, 0.0, 1.0).unwrap_err();
    assert!(matches!(e, RandomError::OutOfMemory { .. }), "{e:?}");
}

#[test]
fn arguments_are_checked_before_the_shape() {
    // dtype, then bounds or p, then rank, then extents.
    assert!(matches!(
        uniform(&key(0), &[0], DType::Bool, 1.0, 0.0),
        Err(RandomError::Dtype { .. })
    ));
    assert!(matches!(
        uniform(&key(0), &[0], DType::F64, 1.0, 0.0),
        Err(RandomError::UniformBounds { .. })
    ));
    assert!(matches!(
        bernoulli(&key(0), 2.0, &[usize::MAX, 2]),
        Err(RandomError::BernoulliP { .. })
    ));
    assert!(matches!(
        glorot_normal(&key(0), &[0], DType::F64),
        Err(RandomError::Rank { .. })
    ));
}
