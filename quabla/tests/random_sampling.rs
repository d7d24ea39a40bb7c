//! Samplers with parameters per element (`uniform`'s bounds, `randint`'s bounds, `bernoulli`'s
//! `p`: tensors, traced or not, broadcast to the shape as in JAX) and the samplers over a
//! population (`choice`, `permutation` of an array): element by element the host formula of a
//! number, the same bits eagerly, jitted and per example under `vmap`, derivatives where the
//! samples depend smoothly on an input, and chi-square tests of the distributions.

use quabla as qb;
use quabla::prelude::*;
use quabla::random::{self, Key};
use quabla::{Error, Tensor};
use quabla_random::testing::TestRng;

fn bits(t: &Tensor) -> Vec<u64> {
    match t.dtype() {
        qb::BOOL => t.to_vec_bool().unwrap().iter().map(|&b| b as u64).collect(),
        d if d.is_integer() => t
            .to_vec::<i64>()
            .unwrap()
            .iter()
            .map(|&v| v as u64)
            .collect(),
        _ => t
            .astype(qb::F64)
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
    }
}

fn same(a: &Tensor, b: &Tensor, what: &str) {
    assert_eq!((a.shape(), a.dtype()), (b.shape(), b.dtype()), "{what}");
    assert_eq!(bits(a), bits(b), "{what}");
}

/// Pairs of bounds that exercise every branch of the uniform formula: ordinary intervals,
/// spans that overflow float64, intervals a few ulps wide (where rounding reaches `maxval`
/// and the replacement values are used), subnormal bounds, and float32 intervals around
/// values that are not float32.
fn bound_pairs() -> Vec<(f64, f64)> {
    let mut pairs = vec![
        (0.0, 1.0),
        (-3.5, 2.25),
        (-f64::MAX, f64::MAX),
        (-1e308, 1.5e308),
        (1.0, 1.0f64.next_up()),
        (1.0, 1.0f64.next_up().next_up().next_up()),
        (-2.0f64.next_down(), -1.0),
        (0.0, 5e-324),
        (-5e-324, 1e-323),
        (2.0f64.powi(-1010), 2.0f64.powi(-1009)),
        (-(2.0f64.powi(-1015)), 2.0f64.powi(-1030)),
        (0.1, 0.1f64.next_up()),
        (0.1, 0.10000001),
        (-0.7, 0.3),
        (1e30, 1e300),
        (-1e300, -1e30),
        (f64::from(f32::MAX), 1e300),
        (1.0, f64::from(1.0f32.next_up())),
    ];
    let mut rng = TestRng::new(5);
    for _ in 0..20 {
        let a = rng.between(-100.0, 100.0);
        let w = rng.between(1e-10, 10.0);
        pairs.push((a, a + w));
    }
    pairs
}

#[test]
fn uniform_with_tensor_bounds_is_the_host_formula_per_element() -> qb::Result<()> {
    let k = random::key(3);
    for dtype in [qb::F64, qb::F32] {
        let pairs: Vec<(f64, f64)> = bound_pairs()
            .into_iter()
            .filter(|&(lo, hi)| {
                random::uniform(&k, [1])
                    .dtype(dtype)
                    .minval(lo)
                    .maxval(hi)
                    .eval()
                    .is_ok()
            })
            .collect();
        let n = pairs.len();
        let lo = qb::array(pairs.iter().map(|p| p.0).collect::<Vec<_>>())?;
        let hi = qb::array(pairs.iter().map(|p| p.1).collect::<Vec<_>>())?;
        let got = random::uniform(&k, [n])
            .dtype(dtype)
            .minval(&lo)
            .maxval(&hi)
            .eval()?;
        // Element e is element e of the host sampler with the numbers (lo_e, hi_e).
        for (e, &(l, h)) in pairs.iter().enumerate() {
            let host = random::uniform(&k, [n])
                .dtype(dtype)
                .minval(l)
                .maxval(h)
                .eval()?;
            let (g, w) = (got.index(qb::s![e])?, host.index(qb::s![e])?);
            same(&g, &w, &format!("{dtype:?} [{l:e}, {h:e})"));
        }
        // Traced bounds under jit, and a key tensor: the same bits.
        let jitted: Tensor = qb::jit(move |(key, lo, hi): (Tensor, Tensor, Tensor)| {
            random::uniform(&key, [n])
                .dtype(dtype)
                .minval(&lo)
                .maxval(&hi)
                .eval()
        })
        .call(&(random::key_data(&k), lo.clone(), hi.clone()))?;
        same(&jitted, &got, "jitted");
    }
    Ok(())
}

#[test]
fn parameters_broadcast_to_the_shape_and_batch_under_vmap() -> qb::Result<()> {
    let k = random::key(9);
    // minval per column, maxval a number; p per row.
    let lo = qb::array([0.0, 10.0, -5.0])?;
    let u = random::uniform(&k, [2, 3])
        .minval(&lo)
        .maxval(20.0)
        .eval()?;
    for r in 0..2 {
        for c in 0..3 {
            let host = random::uniform(&k, [2, 3])
                .minval([0.0, 10.0, -5.0][c])
                .maxval(20.0)
                .eval()?;
            same(
                &u.index(qb::s![r, c])?,
                &host.index(qb::s![r, c])?,
                "broadcast",
            );
        }
    }
    let err = random::uniform(&k, [2, 3])
        .minval(&qb::zeros([4])?)
        .eval()
        .unwrap_err();
    assert!(
        matches!(&err, Error::Shape { message, .. } if message.contains("does not broadcast to the sample shape [2, 3]")),
        "{err:?}"
    );
    // bernoulli: the shape defaults to p's.
    let p = qb::array([[0.0], [1.0]])?;
    let b = random::bernoulli(&k).p(&p).eval()?;
    assert_eq!(
        (b.shape(), b.to_vec_bool()?),
        (&[2usize, 1][..], vec![false, true])
    );
    let b = random::bernoulli(&k).p(&p).shape([2, 4]).eval()?;
    assert_eq!(b.to_vec_bool()?, [vec![false; 4], vec![true; 4]].concat());
    // vmap over the bounds: each example draws with its own, from the same key.
    let lows = qb::array([[0.0, 1.0], [2.0, 3.0], [-1.0, -2.0]])?;
    let batched: Tensor =
        qb::vmap(move |lo: Tensor| random::uniform(&k, [2]).minval(&lo).maxval(4.0).eval())
            .call(&lows)?;
    for e in 0..3 {
        let one = random::uniform(&k, [2])
            .minval(&lows.index(qb::s![e])?)
            .maxval(4.0)
            .eval()?;
        same(&batched.index(qb::s![e])?, &one, "vmap of uniform");
    }
    // And per example keys with per example probabilities.
    let keys = random::keys_data(&[random::key(1), random::key(2)])?;
    let ps = qb::array([0.25, 0.75])?;
    let draws: Tensor =
        qb::vmap(|(k, p): (Tensor, Tensor)| random::bernoulli(&k).p(&p).shape([5]).eval())
            .call(&(keys, ps))?;
    for (e, (key, p)) in [(random::key(1), 0.25), (random::key(2), 0.75)]
        .into_iter()
        .enumerate()
    {
        same(
            &draws.index(qb::s![e])?,
            &random::bernoulli(&key).p(p).shape([5]).eval()?,
            "vmap of bernoulli",
        );
    }
    Ok(())
}

#[test]
fn concrete_bounds_are_checked_and_traced_ones_mark_their_elements() -> qb::Result<()> {
    let k = random::key(0);
    let bad = qb::array([0.0, 2.0])?;
    let hi = qb::array([1.0, 1.0])?;
    let err = random::uniform(&k, [2])
        .minval(&bad)
        .maxval(&hi)
        .eval()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    let err = random::bernoulli(&k)
        .p(&qb::array([0.5, 1.5])?)
        .eval()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    let err = random::randint(&k, [2], &qb::array([0i64, 5])?, &qb::array([3i64, 5])?)
        .eval()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    let err = random::randint(&k, [2], &qb::array([0.0, 1.0])?, 4)
        .eval()
        .unwrap_err();
    assert!(
        matches!(&err, Error::Type { message } if message.contains("astype(int64)")),
        "{err:?}"
    );
    // Traced, an empty interval gives NaN (uniform) or its minval (randint, as in JAX).
    let f = qb::jit(move |(lo, hi): (Tensor, Tensor)| {
        let u = random::uniform(&k, [2]).minval(&lo).maxval(&hi).eval()?;
        let r = random::randint(&k, [2], &lo.astype(qb::I64)?, &hi.astype(qb::I64)?).eval()?;
        Ok((u, r))
    });
    let (u, r): (Tensor, Tensor) = f.call(&(bad, hi))?;
    let u = u.to_vec::<f64>()?;
    assert!((0.0..1.0).contains(&u[0]) && u[1].is_nan(), "{u:?}");
    assert_eq!(r.to_vec::<i64>()?[1], 2);
    Ok(())
}

#[test]
fn randint_with_tensor_bounds_is_the_host_formula_per_element() -> qb::Result<()> {
    let k = random::key(12);
    let pairs: [(i64, i64); 6] = [
        (0, 10),
        (-5, 7),
        (i64::MIN, i64::MAX),
        (i64::MAX - 3, i64::MAX),
        (-1, 0),
        (1 << 40, (1 << 40) + 1_000_003),
    ];
    let lo = qb::array(pairs.iter().map(|p| p.0).collect::<Vec<_>>())?;
    let hi = qb::array(pairs.iter().map(|p| p.1).collect::<Vec<_>>())?;
    let got = random::randint(&k, [6], &lo, &hi).eval()?;
    for (e, &(l, h)) in pairs.iter().enumerate() {
        let host = random::randint(&k, [6], l, h).eval()?;
        same(&got.index(qb::s![e])?, &host.index(qb::s![e])?, "randint");
    }
    let jitted: Tensor = qb::jit(move |(key, lo, hi): (Tensor, Tensor, Tensor)| {
        random::randint(&key, [6], &lo, &hi).eval()
    })
    .call(&(random::key_data(&k), lo, hi))?;
    same(&jitted, &got, "jitted randint");
    // int32 bounds per column, as int32 samples.
    let lo32 = qb::I32.array([-3, 0])?;
    let r = random::randint(&k, [3, 2], &lo32, 5)
        .dtype(qb::I32)
        .eval()?;
    assert_eq!(r.dtype(), qb::I32);
    for (c, l) in [-3i64, 0].into_iter().enumerate() {
        let host = random::randint(&k, [3, 2], l, 5).dtype(qb::I32).eval()?;
        for row in 0..3 {
            same(
                &r.index(qb::s![row, c])?,
                &host.index(qb::s![row, c])?,
                "int32",
            );
        }
    }
    Ok(())
}

#[test]
fn uniform_differentiates_with_respect_to_its_bounds() -> qb::Result<()> {
    // x = lo + u (hi - lo): d sum(x) / d lo = sum(1 - u), d / d hi = sum(u), with u read back
    // from the samples.
    let k = random::key(4);
    let (lo, hi) = (qb::array([-1.0, 0.5, 2.0])?, qb::array([1.0, 3.0, 2.5])?);
    let draw = move |(lo, hi): (Tensor, Tensor)| {
        random::uniform(&k, [4, 3])
            .minval(&lo)
            .maxval(&hi)
            .eval()?
            .sum()
    };
    let (glo, ghi): (Tensor, Tensor) = qb::grad(draw)
        .argnums(&[0, 1])
        .call(&(lo.clone(), hi.clone()))?;
    let x = random::uniform(&k, [4, 3]).minval(&lo).maxval(&hi).eval()?;
    let u = x.sub(&lo)?.div(&hi.sub(&lo)?)?;
    let want_hi = u.sum_axes([0])?.to_vec::<f64>()?;
    for (c, (g, w)) in ghi.to_vec::<f64>()?.iter().zip(&want_hi).enumerate() {
        assert!((g - w).abs() < 1e-12, "d/dhi[{c}]: {g} vs {w}");
    }
    for (c, (g, w)) in glo.to_vec::<f64>()?.iter().zip(&want_hi).enumerate() {
        assert!(
            (g - (4.0 - w)).abs() < 1e-12,
            "d/dlo[{c}]: {g} vs {}",
            4.0 - w
        );
    }
    Ok(())
}

/// The chi-square statistic of `counts` against `expected`.
fn chi_square(counts: &[f64], expected: &[f64]) -> f64 {
    counts
        .iter()
        .zip(expected)
        .map(|(c, e)| (c - e) * (c - e) / e)
        .sum()
}

fn counts_of(indices: &Tensor, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; n];
    for i in indices.to_vec::<i64>().unwrap() {
        c[i as usize] += 1.0;
    }
    c
}

#[test]
fn choice_has_its_distribution_with_and_without_replacement() -> qb::Result<()> {
    // 0.1% critical values: 4 degrees of freedom 18.47, 3 degrees 16.27.
    let draws = 40_000;
    let key = random::key(17);
    let keys = random::split(&key, 4)?;
    let uniform = random::choice(&keys[0], 5).shape([draws]).eval()?;
    assert_eq!(uniform.dtype(), qb::I64);
    let chi = chi_square(&counts_of(&uniform, 5), &[draws as f64 / 5.0; 5]);
    assert!(chi < 18.47, "uniform choice: {chi}");
    let p = [0.1, 0.4, 0.0, 0.2, 0.3];
    let weighted = random::choice(&keys[1], 5)
        .shape([draws])
        .p(&qb::array(p.map(|w| w * 2.0))?)
        .eval()?;
    let counts = counts_of(&weighted, 5);
    assert_eq!(counts[2], 0.0, "a zero weight is never drawn");
    let expected: Vec<f64> = p.iter().map(|w| w * draws as f64).collect();
    let chi = chi_square(
        &[counts[0], counts[1], counts[3], counts[4]],
        &[expected[0], expected[1], expected[3], expected[4]],
    );
    assert!(chi < 16.27, "weighted choice: {chi} {counts:?}");
    // Without replacement: distinct; the first draw of a weighted sample has distribution p
    // (Gumbel top-k), checked over many keys at once under vmap.
    let many = random::split(&keys[2], 4000)?;
    let firsts: Tensor = qb::vmap(|k: Tensor| {
        random::choice(&k, 5)
            .shape([3])
            .replace(false)
            .p(&qb::array([0.1, 0.4, 0.0, 0.2, 0.3])?)
            .eval()?
            .index(qb::s![0])
    })
    .call(&random::keys_data(&many)?)?;
    let counts = counts_of(&firsts, 5);
    assert_eq!(counts[2], 0.0);
    let e: Vec<f64> = p.iter().map(|w| w * 4000.0).collect();
    let chi = chi_square(
        &[counts[0], counts[1], counts[3], counts[4]],
        &[e[0], e[1], e[3], e[4]],
    );
    assert!(
        chi < 16.27,
        "first draw without replacement: {chi} {counts:?}"
    );
    for k in many.iter().take(50) {
        for weights in [None, Some([0.1, 0.4, 0.0, 0.2, 0.3])] {
            let mut c = random::choice(k, 5).shape([2, 2]).replace(false);
            if let Some(w) = weights {
                c = c.p(&qb::array(w)?);
            }
            let mut v = c.eval()?.to_vec::<i64>()?;
            v.sort();
            v.dedup();
            assert_eq!(v.len(), 4);
        }
    }
    // Without replacement and weights: every index drawn once.
    let all = random::choice(&keys[3], 6)
        .shape([6])
        .replace(false)
        .eval()?;
    let mut v = all.to_vec::<i64>()?;
    v.sort();
    assert_eq!(v, (0..6).collect::<Vec<i64>>());
    Ok(())
}

#[test]
fn choice_and_permutation_of_arrays_are_jitted_batched_and_differentiable() -> qb::Result<()> {
    let k = random::key(30);
    let a = Tensor::from_vec([4, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])?;
    let p = qb::array([0.5, 0.0, 0.25, 0.25])?;
    type Draw = fn(random::KeyArg, &Tensor, &Tensor) -> qb::Result<Tensor>;
    let draws: [(&str, Draw); 6] = [
        ("choice n", |k, _, _| random::choice(k, 4).shape([3]).eval()),
        ("choice a", |k, a, _| {
            random::choice(k, a).shape([2, 3]).eval()
        }),
        ("choice a axis 1", |k, a, _| {
            random::choice(k, a).shape([3]).axis(1).eval()
        }),
        ("choice a p", |k, a, p| {
            random::choice(k, a).shape([5]).p(p).eval()
        }),
        ("choice a p no replace", |k, a, p| {
            random::choice(k, a).shape([3]).p(p).replace(false).eval()
        }),
        ("permutation", |k, a, _| random::permutation(k, a)),
    ];
    for (name, draw) in draws {
        let host = draw((&k).into(), &a, &p)?;
        let by_tensor = draw((&random::key_data(&k)).into(), &a, &p)?;
        same(&by_tensor, &host, name);
        // Jitted with the key, the array and p traced.
        let jitted: Tensor =
            qb::jit(move |(key, a, p): (Tensor, Tensor, Tensor)| draw((&key).into(), &a, &p))
                .call(&(random::key_data(&k), a.clone(), p.clone()))?;
        same(&jitted, &host, name);
        // Per example keys under vmap.
        let keys = [random::key(1), random::key(2), random::key(3)];
        let batched: Tensor = qb::vmap(move |key: Tensor| {
            let a = Tensor::from_vec([4, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])?;
            draw((&key).into(), &a, &qb::array([0.5, 0.0, 0.25, 0.25])?)
        })
        .call(&random::keys_data(&keys)?)?;
        for (e, key) in keys.iter().enumerate() {
            same(&batched.index(qb::s![e])?, &draw(key.into(), &a, &p)?, name);
        }
        // The derivative with respect to the array is gather's: each element of `a` gets the
        // sum of the weights of the places it was drawn to.
        let w = qb::arange(host.size() as i64)?
            .astype(qb::F64)?
            .reshape(host.shape().iter().map(|&d| d as isize).collect::<Vec<_>>())?;
        let (w2, p2) = (w.clone(), p.clone());
        let g: Tensor =
            qb::grad(move |a: Tensor| draw((&k).into(), &a, &p2)?.mul(&w2)?.sum()).call(&a)?;
        // Reference: perturb each element of `a` by 1 (the samples are linear in a).
        let base = draw((&k).into(), &a, &p)?.mul(&w)?.sum()?.item()?;
        let av = a.to_vec::<f64>()?;
        for j in 0..av.len() {
            let mut bumped = av.clone();
            bumped[j] += 1.0;
            let b = Tensor::from_vec([4, 2], bumped)?;
            let d = draw((&k).into(), &b, &p)?.mul(&w)?.sum()?.item()? - base;
            assert_eq!(g.to_vec::<f64>()?[j], d, "{name} element {j}");
        }
    }
    // A permutation permutes: the rows come back sorted.
    let shuffled = random::permutation(&k, &a)?;
    let mut rows: Vec<Vec<f64>> = (0..4)
        .map(|r| shuffled.index(qb::s![r]).unwrap().to_vec::<f64>().unwrap())
        .collect();
    rows.sort_by(|x, y| x[0].total_cmp(&y[0]));
    assert_eq!(rows.concat(), a.to_vec::<f64>()?);
    Ok(())
}

#[test]
fn choice_refuses_what_it_cannot_draw() -> qb::Result<()> {
    let k: Key = random::key(0);
    let msg = |r: qb::Result<Tensor>| match r {
        Err(e) => e.to_string(),
        Ok(t) => panic!("expected an error, got {t:?}"),
    };
    assert!(msg(random::choice(&k, 3).shape([4]).replace(false).eval())
        .contains("cannot take 4 distinct elements from a population of 3"));
    assert!(msg(random::choice(&k, 3).p(&qb::array([0.5, 0.5])?).eval())
        .contains("p must have shape [3]"));
    assert!(msg(random::choice(&k, 2).p(&qb::array([-0.5, 1.5])?).eval()).contains("non-negative"));
    assert!(msg(random::choice(&k, 0).eval()).contains("population is empty"));
    assert!(msg(random::choice(&k, &qb::zeros([2, 3])?).axis(2).eval()).contains("axis 2"));
    assert!(msg(random::permutation(&k, &qb::array(1.0)?)).contains("rank >= 1"));
    Ok(())
}
