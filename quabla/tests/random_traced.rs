//! Random numbers inside transforms (numerics.md §9.5 as amended): key tensors give the host
//! generator's samples bit for bit eagerly, under `jit`, per example under `vmap` and inside
//! `fori_loop`; the samplers' distributions on 10^6 draws; typed errors for bad keys.

use quabla as qb;
use quabla::prelude::*;
use quabla::random::{self, Key};
use quabla::Tensor;

/// The exact bits of every element, whatever the dtype.
fn raw(t: &Tensor) -> Vec<u64> {
    match t.dtype() {
        qb::F64 => t
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect(),
        qb::F32 => t
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|x| u64::from(x.to_bits()))
            .collect(),
        qb::BOOL => t
            .to_vec::<bool>()
            .unwrap()
            .iter()
            .map(|&b| b as u64)
            .collect(),
        _ => t
            .to_vec::<i64>()
            .unwrap()
            .iter()
            .map(|&x| x as u64)
            .collect(),
    }
}

fn same(a: &Tensor, b: &Tensor) {
    assert_eq!((a.shape(), a.dtype()), (b.shape(), b.dtype()));
    assert_eq!(raw(a), raw(b));
}

/// One sampler call, given the key in either form.
type Draw = fn(random::KeyArg) -> qb::Result<Tensor>;

/// Every sampler in the forms the tests compare, each drawing from the key it is given.
fn draws() -> Vec<(&'static str, Draw)> {
    vec![
        ("uniform f64", |k| random::uniform(k, [5]).eval()),
        ("uniform f32 [-1, 1)", |k| {
            random::uniform(k, [2, 3])
                .dtype(qb::F32)
                .minval(-1.0)
                .maxval(1.0)
                .eval()
        }),
        ("uniform with an overflowing span", |k| {
            random::uniform(k, [4])
                .minval(-1.7e308)
                .maxval(1.7e308)
                .eval()
        }),
        ("uniform f32 narrow", |k| {
            random::uniform(k, [6])
                .dtype(qb::F32)
                .minval(1.0)
                .maxval(1.0 + 1e-7)
                .eval()
        }),
        ("uniform scalar", |k| random::uniform(k, []).eval()),
        ("normal odd count", |k| random::normal(k, [7]).eval()),
        ("normal f32", |k| {
            random::normal(k, [2, 2]).dtype(qb::F32).eval()
        }),
        ("bernoulli", |k| {
            random::bernoulli(k).p(0.3).shape([9]).eval()
        }),
        ("bernoulli p=0", |k| {
            random::bernoulli(k).p(0.0).shape([3]).eval()
        }),
        ("bernoulli p=1", |k| {
            random::bernoulli(k).p(1.0).shape([3]).eval()
        }),
        ("glorot_normal", |k| {
            random::glorot_normal(k, [2, 3, 4]).eval()
        }),
        ("glorot_uniform", |k| {
            random::glorot_uniform(k, [3, 5]).dtype(qb::F32).eval()
        }),
        ("he_normal", |k| random::he_normal(k, [4, 3]).eval()),
        ("randint", |k| random::randint(k, [8], -5, 7).eval()),
        ("randint int32 full range", |k| {
            random::randint(k, [8], i64::from(i32::MIN), i64::from(i32::MAX) + 1)
                .dtype(qb::I32)
                .eval()
        }),
        ("truncated_normal", |k| {
            random::truncated_normal(k, -1.0, 2.0, [6]).eval()
        }),
        ("truncated_normal upper tail f32", |k| {
            random::truncated_normal(k, 3.0, f64::INFINITY, [5])
                .dtype(qb::F32)
                .eval()
        }),
        ("permutation", |k| random::permutation(k, 7)),
        ("randint int64 full range", |k| {
            random::randint(k, [8], i64::MIN, i64::MAX).eval()
        }),
    ]
}

fn host_keys() -> Vec<Key> {
    // key(-1) has every bit set: the int64 key is -1.
    vec![
        random::key(0),
        random::key(42),
        random::key(-1),
        random::key(1u64 << 63),
    ]
}

#[test]
fn key_tensors_give_the_host_samples_eagerly() -> qb::Result<()> {
    for k in host_keys() {
        let t = random::key_data(&k);
        assert_eq!((t.dtype(), t.shape()), (qb::I64, &[][..]));
        assert_eq!(random::wrap_key_data(&t)?, k);
        for (name, draw) in draws() {
            let host = draw((&k).into())?;
            let traced = draw((&t).into())?;
            assert_eq!(raw(&host), raw(&traced), "{name} with {k}");
            same(&host, &traced);
        }
    }
    Ok(())
}

#[test]
fn split_and_fold_in_of_key_tensors_match_the_host() -> qb::Result<()> {
    // E64's golden keys, from a key tensor.
    let children = random::split(&random::key_data(&random::key(0)), 3)?;
    assert_eq!(children.shape(), [3]);
    assert_eq!(
        children
            .to_vec::<i64>()?
            .iter()
            .map(|&v| v as u64)
            .collect::<Vec<_>>(),
        [
            12141488642634205887,
            11746937539006808163,
            1638637292813414338
        ]
    );
    for k in host_keys() {
        let t = random::key_data(&k);
        same(
            &random::split(&t, 5)?,
            &random::keys_data(&random::split(&k, 5)?)?,
        );
        for data in [0i64, 1, -1, i64::MIN, 12345] {
            let want = random::key_data(&random::fold_in(&k, data));
            same(&random::fold_in(&t, data)?, &want);
            same(&random::fold_in(&t, &qb::array(data)?)?, &want);
            same(&random::fold_in(&k, &qb::array(data)?)?, &want);
        }
        // int32 data sign-extends, as the value modulo 2^64.
        let minus_one = qb::array(-1i32)?;
        assert_eq!(minus_one.dtype(), qb::I32);
        same(
            &random::fold_in(&t, &minus_one)?,
            &random::key_data(&random::fold_in(&k, -1)),
        );
    }
    assert_eq!(
        random::fold_in(&random::key_data(&random::key(7)), -1)?.to_vec::<i64>()?[0] as u64,
        18102033877536474386
    );
    Ok(())
}

#[test]
fn jit_gives_the_host_bits() -> qb::Result<()> {
    for (name, draw) in draws() {
        let f = qb::jit(move |k: Tensor| draw((&k).into()));
        for k in host_keys() {
            let jitted = f.call(&random::key_data(&k))?;
            same(&jitted, &draw((&k).into())?);
            let _ = name;
        }
    }
    // Keys derived inside the trace: split and fold_in of a traced key.
    let derive = qb::jit(|k: Tensor| {
        let children = random::split(&k, 3)?;
        let second = children.index(qb::s![1])?;
        let folded = random::fold_in(&second, 9)?;
        Ok((children, random::normal(&folded, [3]).eval()?))
    });
    let k = random::key(5);
    let (children, z): (Tensor, Tensor) = derive.call(&random::key_data(&k))?;
    let host_children = random::split(&k, 3)?;
    same(&children, &random::keys_data(&host_children)?);
    same(
        &z,
        &random::normal(&random::fold_in(&host_children[1], 9), [3]).eval()?,
    );
    Ok(())
}

#[test]
fn vmap_gives_each_example_its_own_key() -> qb::Result<()> {
    let k = random::key(3);
    let keys = random::split(&k, 4)?;
    let batch = random::keys_data(&keys)?;
    for (name, draw) in draws() {
        let f = qb::vmap(move |k: Tensor| draw((&k).into()));
        let batched: Tensor = f.call(&batch)?;
        let rows: Vec<Tensor> = keys
            .iter()
            .map(|k| draw(k.into()))
            .collect::<qb::Result<_>>()?;
        same(&batched, &qb::stack(&rows, 0)?);
        // jit of vmap, and vmap of split: the same bits again.
        let jv = qb::jit(move |ks: Tensor| qb::vmap(move |k: Tensor| draw((&k).into())).call(&ks));
        let jitted: Tensor = jv.call(&batch)?;
        assert_eq!(raw(&jitted), raw(&batched), "{name}");
    }
    let split_each: Tensor = qb::vmap(|k: Tensor| random::split(&k, 2)).call(&batch)?;
    let want: Vec<Tensor> = keys
        .iter()
        .map(|k| random::keys_data(&random::split(k, 2)?))
        .collect::<qb::Result<_>>()?;
    same(&split_each, &qb::stack(&want, 0)?);
    Ok(())
}

#[test]
fn fori_loop_folds_in_the_loop_index() -> qb::Result<()> {
    let k = random::key(8);
    let body = |i: qb::LoopIndex, acc: Tensor, ops: &[Tensor]| {
        let step_key = random::fold_in(&ops[0], &i.astype(qb::I64)?)?;
        qb::add(&acc, random::uniform(&step_key, [3]).eval()?)
    };
    let run = |key: &Tensor| {
        qb::fori_loop(0, 5, body, &qb::zeros([3])?)
            .operands(std::slice::from_ref(key))
            .eval()
    };
    let mut want = qb::zeros([3])?;
    for i in 0..5i64 {
        want = (&want + random::uniform(&random::fold_in(&k, i), [3]).eval()?)?;
    }
    let key = random::key_data(&k);
    same(&run(&key)?, &want);
    let jitted = qb::jit(move |key: Tensor| run(&key));
    same(&jitted.call(&key)?, &want);
    // The index is an integer: it folds in without a cast, and gives the same keys.
    let direct = |key: &Tensor| {
        qb::fori_loop(
            0,
            5,
            |i: qb::LoopIndex, acc: Tensor, ops: &[Tensor]| {
                let step_key = random::fold_in(&ops[0], &*i)?;
                qb::add(&acc, random::uniform(&step_key, [3]).eval()?)
            },
            &qb::zeros([3])?,
        )
        .operands(std::slice::from_ref(key))
        .eval()
    };
    same(&direct(&key)?, &want);
    same(&qb::jit(move |key: Tensor| direct(&key)).call(&key)?, &want);
    Ok(())
}

/// The Kolmogorov–Smirnov distance of `samples` from the distribution with CDF `cdf`
/// (evaluated on the sorted samples as a tensor).
fn ks_distance(samples: &Tensor, cdf: impl Fn(&Tensor) -> qb::Result<Tensor>) -> f64 {
    let mut xs = samples.astype(qb::F64).unwrap().to_vec::<f64>().unwrap();
    xs.sort_by(f64::total_cmp);
    let n = xs.len() as f64;
    let sorted = Tensor::from_vec([xs.len()], xs).unwrap();
    let f = cdf(&sorted).unwrap().to_vec::<f64>().unwrap();
    f.iter()
        .enumerate()
        .map(|(i, &fi)| {
            (fi - i as f64 / n)
                .abs()
                .max(((i + 1) as f64 / n - fi).abs())
        })
        .fold(0.0, f64::max)
}

/// The chi-square statistic of `counts` against `probabilities` (summing to 1).
fn chi_square(counts: &[u64], probabilities: &[f64]) -> f64 {
    let n: u64 = counts.iter().sum();
    counts
        .iter()
        .zip(probabilities)
        .map(|(&c, &p)| {
            let e = p * n as f64;
            (c as f64 - e).powi(2) / e
        })
        .sum()
}

#[test]
fn samplers_have_their_distributions_on_a_million_draws() -> qb::Result<()> {
    const N: usize = 1_000_000;
    // KS: the 0.1% critical distance is 1.95 / sqrt(N).
    let ks_limit = 1.95 / (N as f64).sqrt();
    let k = random::split(&random::key(2026), 8)?;

    let u = random::uniform(&k[0], [N])
        .minval(-2.0)
        .maxval(3.0)
        .eval()?;
    let d = ks_distance(&u, |x| (x + 2.0).div(5.0));
    assert!(d < ks_limit, "uniform KS distance {d}");

    let z = random::normal(&k[1], [N]).eval()?;
    let d = ks_distance(&z, |x| {
        x.mul(-std::f64::consts::FRAC_1_SQRT_2).erfc().mul(0.5)
    });
    assert!(d < ks_limit, "normal KS distance {d}");

    // Initializers: their scale, on the normal and uniform streams checked above.
    let g = random::he_normal(&k[2], [1000, 1000]).eval()?;
    let want = (2.0f64 / 1000.0).sqrt();
    let d = ks_distance(&g.reshape([-1])?, |x| {
        x.mul(-std::f64::consts::FRAC_1_SQRT_2 / want)
            .erfc()
            .mul(0.5)
    });
    assert!(d < ks_limit, "he_normal KS distance {d}");
    let l = (6.0f64 / 2000.0).sqrt();
    let gu = random::glorot_uniform(&k[3], [1000, 1000]).eval()?;
    let d = ks_distance(&gu.reshape([-1])?, |x| (x + l).div(2.0 * l));
    assert!(d < ks_limit, "glorot_uniform KS distance {d}");

    // truncated_normal: the normal CDF renormalized to the interval, in the middle and far
    // in a tail (mirrored into the lower tail by the sampler), from key tensors.
    let phi = |x: &Tensor| x.mul(-std::f64::consts::FRAC_1_SQRT_2).erfc().mul(0.5);
    let phi_at = |x: f64| phi(&qb::array(x).unwrap()).unwrap().item().unwrap();
    for (lower, upper) in [(-1.0, 2.0), (4.0, f64::INFINITY)] {
        let t = random::truncated_normal(&random::key_data(&k[7]), lower, upper, [N / 2]).eval()?;
        let (lo, hi) = (t.min()?.item()?, t.max()?.item()?);
        assert!(lo >= lower && hi <= upper, "[{lo}, {hi}]");
        let (c_lo, c_hi) = (phi_at(lower), phi_at(upper));
        let d = ks_distance(&t, |x| phi(x).sub(c_lo).div(c_hi - c_lo));
        let limit = 1.95 / ((N / 2) as f64).sqrt();
        assert!(
            d < limit,
            "truncated_normal [{lower}, {upper}] KS distance {d}"
        );
    }

    // permutation: every order of 3 elements equally likely (chi-square over 6 orders, 5
    // degrees of freedom, 0.1% critical 20.52), and a long one is a permutation.
    let mut counts = [0u64; 6];
    for key in random::split(&k[0], 60_000)? {
        let p = random::permutation(&key, 3)?.to_vec::<i64>()?;
        let rank = match p.as_slice() {
            [0, 1, 2] => 0,
            [0, 2, 1] => 1,
            [1, 0, 2] => 2,
            [1, 2, 0] => 3,
            [2, 0, 1] => 4,
            _ => 5,
        };
        counts[rank] += 1;
    }
    let stat = chi_square(&counts, &[1.0 / 6.0; 6]);
    assert!(stat < 20.52, "permutation chi-square {stat}: {counts:?}");
    let mut long = random::permutation(&k[1], 100_000)?.to_vec::<i64>()?;
    long.sort_unstable();
    assert!(long.iter().enumerate().all(|(i, &v)| v == i as i64));

    // Bernoulli: the count is within 4.5 standard deviations of N p.
    let p = 0.3;
    let b = random::bernoulli(&k[4]).p(p).shape([N]).eval()?;
    let ones = b.to_vec::<bool>()?.iter().filter(|&&x| x).count() as f64;
    let sd = (N as f64 * p * (1.0 - p)).sqrt();
    assert!((ones - N as f64 * p).abs() < 4.5 * sd, "{ones} ones");

    // randint: chi-square over its 10 values (9 degrees of freedom; 0.1% critical 27.9).
    let r = random::randint(&k[5], [N], -3, 7).dtype(qb::I32).eval()?;
    let mut counts = [0u64; 10];
    for v in r.to_vec::<i32>()? {
        counts[(v + 3) as usize] += 1;
    }
    let stat = chi_square(&counts, &[0.1; 10]);
    assert!(stat < 27.9, "randint chi-square {stat}: {counts:?}");

    // categorical: 250000 draws of 4 categories (10^6 noise draws), chi-square against the
    // softmax (3 degrees of freedom; 0.1% critical 16.27), from a key tensor.
    let logits = qb::array([0.0, 1.0, -1.0, 2.0])?;
    let rows = logits.broadcast_to([N / 4, 4])?;
    let c = random::categorical(&random::key_data(&k[6]), &rows).eval()?;
    assert_eq!((c.shape(), c.dtype()), (&[N / 4][..], qb::I64));
    let mut counts = [0u64; 4];
    for v in c.to_vec::<i64>()? {
        counts[v as usize] += 1;
    }
    let e: Vec<f64> = [0.0f64, 1.0, -1.0, 2.0].iter().map(|x| x.exp()).collect();
    let total: f64 = e.iter().sum();
    let probabilities: Vec<f64> = e.iter().map(|x| x / total).collect();
    let stat = chi_square(&counts, &probabilities);
    assert!(stat < 16.27, "categorical chi-square {stat}: {counts:?}");
    Ok(())
}

#[test]
fn categorical_draws_along_an_axis_and_under_transforms() -> qb::Result<()> {
    let k = random::key_data(&random::key(1));
    // A category with all the mass is always drawn; -inf logits never are.
    let logits = qb::array([
        [0.0, f64::NEG_INFINITY],
        [f64::NEG_INFINITY, 0.0],
        [0.0, 0.0],
    ])?;
    let c = random::categorical(&k, &logits).eval()?;
    let v = c.to_vec::<i64>()?;
    assert_eq!(&v[..2], [0, 1]);
    let along_0 = random::categorical(&k, &logits.transpose()?)
        .axis(0)
        .eval()?;
    assert_eq!(&along_0.to_vec::<i64>()?[..2], [0, 1]);
    // Host key, key tensor, jit and vmap agree.
    let host = random::categorical(&random::key(1), &logits).eval()?;
    same(&host, &c);
    let f = qb::jit(|(k, l): (Tensor, Tensor)| random::categorical(&k, &l).eval());
    same(&f.call(&(k.clone(), logits.clone()))?, &c);
    let keys = random::split(&k, 3)?;
    let per_row: Tensor = qb::vmap(|(k, l): (Tensor, Tensor)| random::categorical(&k, &l).eval())
        .call(&(keys.clone(), logits.clone()))?;
    for i in 0..3 {
        let one = random::categorical(&keys.index(qb::s![i])?, &logits.index(qb::s![i])?).eval()?;
        assert_eq!(
            per_row.to_vec::<i64>()?[i as usize],
            one.to_vec::<i64>()?[0]
        );
    }
    Ok(())
}

#[test]
fn bad_keys_and_arguments_are_typed_errors() -> qb::Result<()> {
    let k = random::key_data(&random::key(0));
    let float_key = qb::array(1.0)?;
    let err = random::uniform(&float_key, [2]).eval().unwrap_err();
    assert!(matches!(err, qb::Error::Type { .. }), "{err:?}");
    assert!(err.to_string().contains("int64 key tensor"), "{err}");
    let err = random::split(&qb::array(1i32)?, 2).unwrap_err();
    assert!(matches!(err, qb::Error::Type { .. }), "{err:?}");
    let many = random::split(&k, 3)?;
    let err = random::normal(&many, [2]).eval().unwrap_err();
    assert!(matches!(err, qb::Error::Shape { .. }), "{err:?}");
    assert!(err.to_string().contains("vmap"), "{err}");
    let err = random::fold_in(&k, &qb::array(1.5)?).unwrap_err();
    assert!(matches!(err, qb::Error::Type { .. }), "{err:?}");
    assert!(err.to_string().contains("astype"), "{err}");
    let err = random::fold_in(&k, &qb::array([1i64, 2])?).unwrap_err();
    assert!(matches!(err, qb::Error::Shape { .. }), "{err:?}");
    assert!(matches!(
        random::split(&k, 0),
        Err(qb::Error::InvalidArgument { .. })
    ));

    // Both key forms refuse a bad request with the same error.
    let host = random::key(0);
    let pairs: Vec<(qb::Result<Tensor>, qb::Result<Tensor>)> = vec![
        (
            random::uniform(&host, [2]).minval(1.0).maxval(1.0).eval(),
            random::uniform(&k, [2]).minval(1.0).maxval(1.0).eval(),
        ),
        (
            random::normal(&host, [2]).dtype(qb::I64).eval(),
            random::normal(&k, [2]).dtype(qb::I64).eval(),
        ),
        (
            random::bernoulli(&host).p(1.5).eval(),
            random::bernoulli(&k).p(1.5).eval(),
        ),
        (
            random::glorot_normal(&host, [3]).eval(),
            random::glorot_normal(&k, [3]).eval(),
        ),
        (
            random::uniform(&host, [2, 0]).eval(),
            random::uniform(&k, [2, 0]).eval(),
        ),
        (
            random::randint(&host, [2], 3, 3).eval(),
            random::randint(&k, [2], 3, 3).eval(),
        ),
        (
            random::randint(&host, [2], 0, 1 << 40)
                .dtype(qb::I32)
                .eval(),
            random::randint(&k, [2], 0, 1 << 40).dtype(qb::I32).eval(),
        ),
        (
            random::randint(&host, [2], 0, 4).dtype(qb::F64).eval(),
            random::randint(&k, [2], 0, 4).dtype(qb::F64).eval(),
        ),
    ];
    for (a, b) in pairs {
        let (a, b) = (a.unwrap_err(), b.unwrap_err());
        assert_eq!(a.to_string(), b.to_string());
        assert_eq!(
            std::mem::discriminant(&a),
            std::mem::discriminant(&b),
            "{a:?} vs {b:?}"
        );
    }
    let err = random::randint(&k, [2], 0, 4)
        .dtype(qb::F64)
        .eval()
        .unwrap_err();
    assert!(matches!(err, qb::Error::Type { .. }), "{err:?}");
    let err = random::categorical(&k, &qb::array([1i64, 2])?)
        .eval()
        .unwrap_err();
    assert!(matches!(err, qb::Error::Type { .. }), "{err:?}");
    let err = random::categorical(&k, &qb::zeros([3])?)
        .axis(1)
        .eval()
        .unwrap_err();
    assert!(matches!(err, qb::Error::Shape { .. }), "{err:?}");

    // A traced key cannot become a host Key; a host Key is not a traced argument in Rust.
    let f = qb::jit(|k: Tensor| random::wrap_key_data(&k).map(|_| k));
    let err = f.call(&k).unwrap_err();
    assert!(matches!(err, qb::Error::Tracer { .. }), "{err:?}");
    let g = qb::jit(|k: Key| random::normal(&k, [2]).eval());
    match g.call(&random::key(1)) {
        Err(qb::Error::Tracer { kind, message }) => {
            assert_eq!(kind, qb::TracerErrorKind::RandomTraced);
            assert!(message.contains("key_data"), "{message}");
        }
        other => panic!("expected TR6, got {other:?}"),
    }
    Ok(())
}
