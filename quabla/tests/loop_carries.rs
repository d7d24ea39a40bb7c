//! Loop carries that are pytrees of floating and integer arrays (a random key tensor next to
//! float state, a step counter) in `fori_loop`, `scan`, `scan_over` and `while_loop`, and the
//! integer loop index (docs/loops.md): values against the same loop written in Rust, eager,
//! jitted and unrolled with the same bits, per example under `vmap`, derivatives through the
//! float leaves, and the typed errors of the carry contract.

use quabla as qb;
use quabla::prelude::*;
use quabla::random::{self, Key};
use quabla::testing::{check_grads, Modes};
use quabla::{Error, LoopIndex, Tensor};

fn bits(t: &Tensor) -> Vec<u64> {
    if t.dtype().is_integer() {
        t.to_vec::<i64>()
            .unwrap()
            .iter()
            .map(|&v| v as u64)
            .collect()
    } else {
        t.astype(qb::F64)
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    }
}

fn same(a: &Tensor, b: &Tensor, what: &str) {
    assert_eq!((a.shape(), a.dtype()), (b.shape(), b.dtype()), "{what}");
    assert_eq!(bits(a), bits(b), "{what}");
}

/// One step of a noisy walk: split the carried key, move `x` by `scale` times normal noise
/// from one half, keep the other half as the next key, count the step.
fn walk_step(
    (key, x, count): (Tensor, Tensor, Tensor),
    scale: &Tensor,
) -> qb::Result<(Tensor, Tensor, Tensor)> {
    let keys = random::split(&key, 2)?;
    let noise = random::normal(&keys.index(qb::s![1])?, [3]).eval()?;
    let x = (&x + &(scale * &noise)?)?;
    Ok((keys.index(qb::s![0])?, x, (&count + 1i64)?))
}

/// The walk on host keys: the reference of every carried form.
fn walk_reference(key: Key, x: &[f64], scale: f64, steps: usize) -> (Key, Vec<f64>) {
    let (mut key, mut x) = (key, x.to_vec());
    for _ in 0..steps {
        let keys = random::split(&key, 2).unwrap();
        let noise = random::normal(&keys[1], [3]).eval().unwrap();
        for (xi, n) in x.iter_mut().zip(noise.to_vec::<f64>().unwrap()) {
            *xi += scale * n;
        }
        key = keys[0];
    }
    (key, x)
}

#[test]
fn a_key_tensor_is_carried_next_to_float_state() -> qb::Result<()> {
    let k = random::key(21);
    let x0 = [0.5, -1.0, 2.0];
    let scale = 0.3;
    let (want_key, want_x) = walk_reference(k, &x0, scale, 4);
    let init = (random::key_data(&k), qb::array(x0)?, qb::array(0i64)?);
    let by_fori = |init: &(Tensor, Tensor, Tensor), s: &Tensor| {
        qb::fori_loop(0, 4, |_, c, ops: &[Tensor]| walk_step(c, &ops[0]), init)
            .operands(&[s])
            .eval()
    };
    let by_scan = |init: &(Tensor, Tensor, Tensor), s: &Tensor| {
        qb::scan(
            |c, _, ops: &[Tensor]| {
                let c = walk_step(c, &ops[0])?;
                let y = c.1.clone();
                Ok((c, y))
            },
            init,
            4,
        )
        .operands(&[s])
        .eval::<Tensor>()
        .map(|(c, _)| c)
    };
    let by_while = |init: &(Tensor, Tensor, Tensor), s: &Tensor| {
        qb::while_loop(
            |c: &(Tensor, Tensor, Tensor), _| c.2.less(4i64),
            |c, ops| walk_step(c, &ops[0]),
            init,
        )
        .operands(&[s])
        .max_trips(10)
        .eval()
    };
    type Run = fn(&(Tensor, Tensor, Tensor), &Tensor) -> qb::Result<(Tensor, Tensor, Tensor)>;
    let runs: [(&str, Run); 3] = [
        ("fori_loop", by_fori),
        ("scan", by_scan),
        ("while_loop", by_while),
    ];
    let s = qb::array(scale)?;
    for (name, run) in runs {
        let (key, x, count) = run(&init, &s)?;
        assert_eq!(random::wrap_key_data(&key)?, want_key, "{name}");
        assert_eq!(x.to_vec::<f64>()?, want_x, "{name}");
        assert_eq!((count.dtype(), count.item_i64()?), (qb::I64, 4), "{name}");
        // Under jit the carried key gives the same bits.
        let jitted: (Tensor, Tensor, Tensor) =
            qb::jit(move |(init, s): ((Tensor, Tensor, Tensor), Tensor)| run(&init, &s))
                .call(&(init.clone(), s.clone()))?;
        same(&jitted.0, &key, name);
        same(&jitted.1, &x, name);
        same(&jitted.2, &count, name);
        // Per example under vmap: each example walks from its own key.
        let keys = [random::key(1), random::key(2), random::key(3)];
        let batch = (
            random::keys_data(&keys)?,
            qb::stack(&[qb::array(x0)?, qb::array(x0)?, qb::array(x0)?], 0)?,
            qb::array([0i64, 0, 0])?,
        );
        let batched: (Tensor, Tensor, Tensor) =
            qb::vmap(move |c: (Tensor, Tensor, Tensor)| run(&c, &qb::array(scale)?))
                .call(&batch)?;
        for (e, key) in keys.iter().enumerate() {
            let (want_key, want_x) = walk_reference(*key, &x0, scale, 4);
            let got_key = random::wrap_key_data(&batched.0.index(qb::s![e])?)?;
            assert_eq!(got_key, want_key, "{name} example {e}");
            assert_eq!(
                batched.1.index(qb::s![e])?.to_vec::<f64>()?,
                want_x,
                "{name} example {e}"
            );
        }
        // The float leaves differentiate; the key and the counter do not: d x / d scale is
        // the sum of the noise, checked against central differences to third order.
        let k0 = init.0.clone();
        check_grads(
            move |v: Vec<Tensor>| {
                let init = (k0.clone(), v[0].clone(), qb::array(0i64)?);
                let (_, x, _) = run(&init, &v[1])?;
                Ok(vec![x.tanh()?])
            },
            &[qb::array(x0)?, qb::array(scale)?],
            3,
            Modes::BOTH,
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    Ok(())
}

#[test]
fn scan_over_carries_a_key_and_stacks_the_draws() -> qb::Result<()> {
    let k = random::key(5);
    let xs = qb::array([1.0, 2.0, 3.0, 4.0])?;
    let run = |key: &Tensor, xs: &Tensor| {
        qb::scan_over(
            |(key, total): (Tensor, Tensor), x: Tensor, _: &[Tensor]| {
                let keys = random::split(&key, 2)?;
                let u = random::uniform(&keys.index(qb::s![1])?, []).eval()?;
                let draw = (&x * &u)?;
                Ok(((keys.index(qb::s![0])?, (&total + &draw)?), draw))
            },
            &(key.clone(), qb::array(0.0)?),
            xs,
        )
        .eval::<Tensor>()
    };
    let key = random::key_data(&k);
    let ((last, total), draws) = run(&key, &xs)?;
    let (mut host, mut want, mut want_total) = (k, Vec::new(), 0.0);
    for x in [1.0, 2.0, 3.0, 4.0] {
        let keys = random::split(&host, 2)?;
        let u = random::uniform(&keys[1], []).eval()?.item()?;
        want.push(x * u);
        want_total += x * u;
        host = keys[0];
    }
    assert_eq!(draws.to_vec::<f64>()?, want);
    assert_eq!(total.item()?, want_total);
    assert_eq!(random::wrap_key_data(&last)?, host);
    let jitted: ((Tensor, Tensor), Tensor) =
        qb::jit(move |(key, xs): (Tensor, Tensor)| run(&key, &xs)).call(&(key.clone(), xs))?;
    same(&jitted.1, &draws, "scan_over draws");
    same(&jitted.0 .0, &last, "scan_over key");
    Ok(())
}

#[test]
fn int_and_float_leaves_keep_their_dtypes_in_every_order() -> qb::Result<()> {
    // A dict carry with an int32 counter, an int64 accumulator and a float32 state; the
    // reverse derivative of the float state through the loop to second order.
    use std::collections::BTreeMap;
    let body = |i: LoopIndex, mut c: BTreeMap<String, Tensor>, ops: &[Tensor]| {
        let n = (&c["n"] + 1i64)?;
        let acc = (&c["acc"] + &*i)?;
        let x = (&c["x"] * &ops[0])?.sin()?;
        c.insert("n".into(), n);
        c.insert("acc".into(), acc);
        c.insert("x".into(), x);
        Ok(c)
    };
    let init = |x: &Tensor| -> qb::Result<BTreeMap<String, Tensor>> {
        Ok(BTreeMap::from([
            ("n".to_string(), qb::I32.array(0)?),
            ("acc".to_string(), qb::array(0i64)?),
            ("x".to_string(), x.clone()),
        ]))
    };
    let x = qb::F32.array([0.25, -0.5])?;
    let a = qb::F32.array(1.5)?;
    let out = qb::fori_loop(2, 7, body, &init(&x)?)
        .operands(&[&a])
        .eval()?;
    assert_eq!(
        (out["n"].dtype(), out["n"].to_vec::<i32>()?),
        (qb::I32, vec![5])
    );
    assert_eq!(out["acc"].item_i64()?, 2 + 3 + 4 + 5 + 6);
    let mut want = x.to_vec::<f32>()?;
    for _ in 0..5 {
        for v in want.iter_mut() {
            *v = (*v * 1.5).sin();
        }
    }
    assert_eq!(out["x"].dtype(), qb::F32);
    for (g, w) in out["x"].to_vec::<f32>()?.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-6, "{g} vs {w}");
    }
    let jitted: BTreeMap<String, Tensor> = qb::jit(move |(x, a): (Tensor, Tensor)| {
        qb::fori_loop(2, 7, body, &init(&x)?).operands(&[&a]).eval()
    })
    .call(&(x.clone(), a.clone()))?;
    for key in ["n", "acc", "x"] {
        same(&jitted[key], &out[key], key);
    }
    check_grads(
        move |v: Vec<Tensor>| {
            let c = qb::fori_loop(2, 7, body, &init(&v[0])?)
                .operands(&[&v[1]])
                .eval()?;
            Ok(vec![c["x"].clone()])
        },
        &[qb::array([0.25, -0.5])?, qb::array(1.5)?],
        2,
        Modes::BOTH,
    )?;
    Ok(())
}

#[test]
fn the_carry_contract_names_the_fix() -> qb::Result<()> {
    let x = qb::array([1.0, 2.0])?;
    let message = |r: qb::Result<(Tensor, Tensor)>| match r {
        Err(Error::Type { message }) => message,
        Err(Error::Shape { message, .. }) => message,
        other => panic!("expected a type or shape error, got {other:?}"),
    };
    // A bool leaf, and a host Key.
    let flags = x.greater(1.0)?;
    let m = message(qb::fori_loop(0, 2, |_, c, _| Ok(c), &(x.clone(), flags)).eval());
    assert!(
        m.contains("carry arrays must be floating or integer, got bool"),
        "{m}"
    );
    let keyed = qb::fori_loop(0, 1, |_, c, _| Ok(c), &(x.clone(), random::key(0))).eval();
    let m = match keyed {
        Err(Error::Type { message }) => message,
        other => panic!("{other:?}"),
    };
    assert!(m.contains("host Key") && m.contains("key_data"), "{m}");
    // The body changes an integer leaf's dtype, or the structure.
    let count = qb::array(0i64)?;
    let m = message(
        qb::fori_loop(
            0,
            2,
            |_, (x, n): (Tensor, Tensor), _| Ok((x, n.astype(qb::I32)?)),
            &(x.clone(), count.clone()),
        )
        .eval(),
    );
    assert_eq!(
        m,
        "fori_loop: body changed the carry from int64[] to int32[]"
    );
    let r: qb::Result<Vec<Tensor>> = qb::fori_loop(
        0,
        2,
        |_, mut c: Vec<Tensor>, _| {
            c.push(c[0].clone());
            Ok(c)
        },
        &vec![x.clone()],
    )
    .eval();
    assert!(
        matches!(&r, Err(Error::Shape { message, .. }) if message.contains("body changed the carry's structure")),
        "{r:?}"
    );
    // The same errors under jit.
    let r: qb::Result<(Tensor, Tensor)> = qb::jit(|(x, n): (Tensor, Tensor)| {
        qb::scan(
            |(x, n): (Tensor, Tensor), _, _| Ok(((x, n.astype(qb::F64)?), qb::array(0.0)?)),
            &(x, n),
            2,
        )
        .eval::<Tensor>()
        .map(|(c, _)| c)
    })
    .call(&(x.clone(), count));
    assert_eq!(
        message(r),
        "scan: body changed the carry from int64[] to float64[]"
    );
    Ok(())
}

/// The body of the index tests: reads `xs` at `i` and at `i + 1` (integer arithmetic on the
/// index), updates a one-hot record with `at`, slices with `dynamic_slice` and scales by the
/// index (a weak integer meeting float32 stays float32).
fn index_body(
    i: LoopIndex,
    (acc, seen): (Tensor, Tensor),
    ops: &[Tensor],
) -> qb::Result<(Tensor, Tensor)> {
    let xs = &ops[0];
    let here = xs.index_with(qb::ix![&*i])?;
    let next = xs.index_with(qb::ix![&(&*i + 1i64)?])?;
    let window = qb::dynamic_slice(xs, vec![(&*i).into()], &[2])?.sum()?;
    let scaled = (&here * &*i)?;
    let acc = (&acc + &(&(&(&scaled + &next)? + &window)? * 0.5)?)?;
    let seen = seen.at(qb::ix![&*i]).set(1.0)?;
    Ok((acc, seen))
}

#[test]
fn the_loop_index_is_an_integer_that_indexes_directly() -> qb::Result<()> {
    let xs = qb::F32.array([0.5, -1.0, 2.0, 0.25, 3.0, -0.75])?;
    let v = xs.to_vec::<f32>()?;
    let init = (qb::F32.array(0.0)?, qb::F32.zeros([6])?);
    let run = |init: &(Tensor, Tensor), xs: &Tensor, unroll: bool| {
        qb::fori_loop(1, 4, index_body, init)
            .operands(&[xs])
            .unroll(unroll)
            .eval()
    };
    let (acc, seen) = run(&init, &xs, false)?;
    let mut want = 0.0f32;
    for i in 1..4 {
        let term = v[i] * i as f32 + v[i + 1] + (v[i] + v[i + 1]);
        want += term * 0.5;
    }
    assert_eq!(acc.dtype(), qb::F32);
    assert_eq!(acc.item()?, want as f64);
    assert_eq!(seen.to_vec::<f32>()?, [0.0, 1.0, 1.0, 1.0, 0.0, 0.0]);
    // Jitted and unrolled: the same bits.
    for unroll in [false, true] {
        let jitted: (Tensor, Tensor) =
            qb::jit(move |(init, xs): ((Tensor, Tensor), Tensor)| run(&init, &xs, unroll))
                .call(&(init.clone(), xs.clone()))?;
        same(&jitted.0, &acc, "acc");
        same(&jitted.1, &seen, "seen");
    }
    // The index's dtype, eager and traced: a weak int64; its float form has the loop's dtype.
    let kinds = |c: Tensor, i: LoopIndex, _: &[Tensor]| {
        let t = i.tensor();
        let f = i.as_float()?;
        assert_eq!(
            (t.dtype(), t.is_weak(), f.dtype()),
            (qb::I64, true, qb::F32)
        );
        Ok((c, qb::array(0.0)?))
    };
    qb::scan(kinds, &qb::F32.array(0.0)?, 2).eval::<Tensor>()?;
    let _: (Tensor, Tensor) =
        qb::jit(move |c: Tensor| qb::scan(kinds, &c, 2).eval()).call(&qb::F32.array(0.0)?)?;
    // Derivatives through the reads at the traced index (gather's rules), third order.
    check_grads(
        move |v: Vec<Tensor>| {
            let init = (qb::array(0.0)?, qb::zeros([6])?);
            let (acc, _) = qb::fori_loop(1, 4, index_body, &init)
                .operands(&[&v[0]])
                .eval()?;
            Ok(vec![acc.sin()?])
        },
        &[xs.astype(qb::F64)?],
        3,
        Modes::BOTH,
    )?;
    // vmap over the data: each example reads its own row at the index.
    let rows = qb::stack(&[xs.clone(), (&xs * 2.0)?], 0)?;
    let batched: (Tensor, Tensor) = qb::vmap(move |xs: Tensor| {
        let init = (qb::F32.array(0.0)?, qb::F32.zeros([6])?);
        run(&init, &xs, false)
    })
    .call(&rows)?;
    for e in 0..2 {
        let one = run(&init, &rows.index(qb::s![e])?, false)?;
        same(&batched.0.index(qb::s![e])?, &one.0, "vmap acc");
    }
    Ok(())
}

#[test]
fn a_float32_loop_past_two_to_the_24_keeps_exact_indices() -> qb::Result<()> {
    // A float32 parameter cannot hold 2^24 + 1: the region's index parameter is float64
    // then, so the integer index stays exact; `as_float` still has the carry's dtype.
    let start = (1usize << 24) - 2;
    let body = |i: LoopIndex, (x, n): (Tensor, Tensor), _: &[Tensor]| {
        assert_eq!(i.as_float()?.dtype(), qb::F32);
        Ok((x, (&n + &(&*i - start as i64)?)?))
    };
    let f = qb::jit(move |x: Tensor| {
        qb::fori_loop(start, start + 4, body, &(x, qb::array(0i64)?)).eval()
    });
    let (_, n): (Tensor, Tensor) = f.call(&qb::F32.array(1.0)?)?;
    assert_eq!(n.item_i64()?, 1 + 2 + 3);
    Ok(())
}
