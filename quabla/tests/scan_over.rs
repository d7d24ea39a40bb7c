//! `scan_over` (JAX's `scan(f, init, xs)`) and `switch` (JAX's `lax.switch`): values against
//! plain Rust loops and branches, eagerly, under `jit` (the same bits), under `vmap` against a
//! loop, and derivatives against finite differences (second order).

use qb::testing::{check_grads, Modes};
use qb::Tensor;
use quabla as qb;
use std::collections::BTreeMap;

/// A step reading a pytree of slices: `c = c * a_t + b_t` with a dict `{"a": .., "b": ..}` of
/// `[T]` float arrays and an int array `n` of `[T, 2]`; `y` is a pair of the new carry and
/// the row sum of `n` as float.
fn step(
    c: Tensor,
    x: BTreeMap<String, Tensor>,
    ops: &[Tensor],
) -> qb::Result<(Tensor, (Tensor, Tensor))> {
    let c = ((&c * &x["a"])? + &x["b"])?.mul(&ops[0])?;
    let counted = x["n"].sum()?.astype(qb::F64)?;
    Ok((c.clone(), (c, counted)))
}

fn data() -> qb::Result<BTreeMap<String, Tensor>> {
    let mut xs = BTreeMap::new();
    xs.insert("a".to_string(), qb::array([0.5, -1.5, 2.0, 0.25])?);
    xs.insert("b".to_string(), qb::array([1.0, 0.0, -2.0, 3.0])?);
    xs.insert(
        "n".to_string(),
        qb::array([[1i64, 2], [3, 4], [-5, 6], [7, i64::MAX]])?,
    );
    Ok(xs)
}

/// The same recurrence by a Rust loop on host numbers, in `order`.
fn reference(init: f64, scale: f64, order: &[usize]) -> (f64, Vec<f64>) {
    let (a, b) = ([0.5, -1.5, 2.0, 0.25], [1.0, 0.0, -2.0, 3.0]);
    let mut c = init;
    let mut ys = vec![0.0; 4];
    for &t in order {
        c = (c * a[t] + b[t]) * scale;
        ys[t] = c;
    }
    (c, ys)
}

fn run(
    init: &Tensor,
    scale: &Tensor,
    xs: &BTreeMap<String, Tensor>,
    reverse: bool,
) -> qb::Result<(Tensor, (Tensor, Tensor))> {
    qb::scan_over(step, init, xs)
        .operands(&[scale])
        .reverse(reverse)
        .eval()
}

#[test]
fn scan_over_slices_a_pytree_of_xs() -> qb::Result<()> {
    let xs = data()?;
    let (init, scale) = (qb::array(0.5)?, qb::array(1.25)?);
    for reverse in [false, true] {
        let order: Vec<usize> = if reverse {
            vec![3, 2, 1, 0]
        } else {
            vec![0, 1, 2, 3]
        };
        let (want_c, want_ys) = reference(0.5, 1.25, &order);
        let (c, (ys, counts)) = run(&init, &scale, &xs, reverse)?;
        assert_eq!(c.item()?, want_c, "reverse={reverse}");
        assert_eq!(ys.to_vec::<f64>()?, want_ys, "reverse={reverse}");
        // The int64 slices arrive exactly (i64::MAX + 7 wraps).
        assert_eq!(
            counts.to_vec::<f64>()?,
            [3.0, 7.0, 1.0, 7i64.wrapping_add(i64::MAX) as f64]
        );
        // jit: one region, the same bits.
        let jitted = qb::jit(
            move |(i, s, x): (Tensor, Tensor, BTreeMap<String, Tensor>)| run(&i, &s, &x, reverse),
        );
        let (jc, (jys, jcounts)): (Tensor, (Tensor, Tensor)) =
            jitted.call(&(init.clone(), scale.clone(), xs.clone()))?;
        assert_eq!(jc.item()?.to_bits(), c.item()?.to_bits());
        assert_eq!(jys.to_vec::<f64>()?, ys.to_vec::<f64>()?);
        assert_eq!(jcounts.to_vec::<f64>()?, counts.to_vec::<f64>()?);
    }
    Ok(())
}

#[test]
fn scan_over_differentiates_and_batches() -> qb::Result<()> {
    // Derivatives with respect to the carry, an operand and the xs, to third order.
    let f = |v: Vec<Tensor>| -> qb::Result<Vec<Tensor>> {
        let step = |c: Tensor, (a, b): (Tensor, Tensor), ops: &[Tensor]| {
            let c = ((&c * &a)?.sin()? + &b)?.mul(&ops[0])?;
            Ok((c.clone(), c.square()?))
        };
        let (c, ys): (Tensor, Tensor) = qb::scan_over(step, &v[0], &(v[2].clone(), v[3].clone()))
            .operands(&[&v[1]])
            .eval()?;
        Ok(vec![(c + ys.sum()?)?])
    };
    let args = [
        qb::array([0.3, -0.2])?,
        qb::array(0.9)?,
        qb::array([[0.5, 1.0], [-0.7, 0.2]])?,
        qb::array([0.1, -0.4])?,
    ];
    // xs with a trailing axis of 2 broadcast against the carry's [2]. Second order in both
    // modes (the loop rules' third order is covered by the region tests; through a scan it
    // costs minutes here).
    check_grads(f, &args, 2, Modes::BOTH)?;
    // vmap over the init and the xs against a loop over the batch.
    let g = |(c0, a): (Tensor, Tensor)| -> qb::Result<Tensor> {
        let step = |c: Tensor, a: Tensor, _: &[Tensor]| {
            let c = ((&c * &a)? + 1.0)?;
            Ok((c.clone(), c))
        };
        let (_, ys): (Tensor, Tensor) = qb::scan_over(step, &c0, &a).eval()?;
        Ok(ys)
    };
    let c0 = qb::array([1.0, -2.0, 0.5])?;
    let a = qb::array([
        [0.5, 2.0, -1.0, 3.0],
        [1.5, 1.0, 0.0, -2.0],
        [0.1, 0.2, 0.3, 0.4],
    ])?;
    let batched: Tensor = qb::vmap(g).call(&(c0.clone(), a.clone()))?;
    for i in 0..3 {
        let one = g((c0.index(qb::s![i])?, a.index(qb::s![i])?))?;
        assert_eq!(
            batched.index(qb::s![i])?.to_vec::<f64>()?,
            one.to_vec::<f64>()?
        );
    }
    Ok(())
}

#[test]
fn scan_over_refuses_bad_xs_with_the_fix() -> qb::Result<()> {
    let id = |c: Tensor, x: Vec<Tensor>, _: &[Tensor]| Ok((c, x[0].clone()));
    let init = qb::array(0.0)?;
    let ragged = vec![qb::zeros([3])?, qb::zeros([4])?];
    let e = qb::scan_over(id, &init, &ragged)
        .eval::<Tensor>()
        .unwrap_err();
    assert!(e.to_string().contains("leading extent"), "{e}");
    let empty: Vec<Tensor> = Vec::new();
    let e = qb::scan_over(id, &init, &empty)
        .eval::<Tensor>()
        .unwrap_err();
    assert!(e.to_string().contains("length"), "{e}");
    let scalar = vec![qb::array(1.0)?];
    let e = qb::scan_over(id, &init, &scalar)
        .eval::<Tensor>()
        .unwrap_err();
    assert!(e.to_string().contains("leading axis"), "{e}");
    // A bool carry (an integer one is fine, docs/loops.md).
    let e = qb::scan_over(id, &qb::array(true)?, &ragged[..1].to_vec())
        .eval::<Tensor>()
        .unwrap_err();
    assert!(matches!(e, qb::Error::Type { .. }), "{e}");
    let (count, _) =
        qb::scan_over(id, &qb::array(1i64)?, &ragged[..1].to_vec()).eval::<Tensor>()?;
    assert_eq!(count.item_i64()?, 1);
    Ok(())
}

#[test]
fn switch_selects_the_clamped_branch() -> qb::Result<()> {
    let branches: [qb::Branch; 4] = [
        &|o| o[0].square(),
        &|o| o[0].sin(),
        &|o| &o[0] * &o[1],
        &|o| o[0].neg(),
    ];
    let x = qb::array(0.75)?;
    let y = qb::array(-2.0)?;
    let want = |i: i64| -> f64 {
        match i.clamp(0, 3) {
            0 => 0.75f64 * 0.75,
            1 => 0.75f64.sin(),
            2 => -1.5,
            _ => -0.75,
        }
    };
    let jitted = qb::jit(|(i, x, y): (Tensor, Tensor, Tensor)| qb::switch(&i, &branches, &[x, y]));
    for i in [-3i64, 0, 1, 2, 3, 4, i64::MAX] {
        let index = qb::array(i)?;
        let eager = qb::switch(&index, &branches, &[&x, &y])?;
        assert_eq!(eager.item()?, want(i), "index {i}");
        let traced: Tensor = jitted.call(&(index, x.clone(), y.clone()))?;
        assert_eq!(
            traced.item()?.to_bits(),
            eager.item()?.to_bits(),
            "index {i}"
        );
        // int32 indices too.
        let small = qb::switch(&qb::array(i.clamp(-9, 9) as i32)?, &branches, &[&x, &y])?;
        assert_eq!(small.item()?, want(i.clamp(-9, 9)));
    }
    // Derivatives through the selected branch; vmap over the index against a loop.
    let g: Tensor =
        qb::grad(|x: Tensor| qb::switch(&qb::array(1i64)?, &branches, &[&x, &y])).call(&x)?;
    assert_eq!(g.item()?, 0.75f64.cos());
    check_grads(
        |v: Vec<Tensor>| {
            Ok(vec![qb::switch(
                &qb::array(2i64)?,
                &branches,
                &[&v[0], &v[1]],
            )?])
        },
        &[x.clone(), y.clone()],
        2,
        Modes::BOTH,
    )?;
    let indices = qb::array([3i64, 0, 2, 1])?;
    let batched: Tensor =
        qb::vmap(|i: Tensor| qb::switch(&i, &branches, &[&x, &y])).call(&indices)?;
    assert_eq!(
        batched.to_vec::<f64>()?,
        [want(3), want(0), want(2), want(1)]
    );
    // Typed errors: a float index names the fix; no branches; a non-scalar index.
    let e = qb::switch(&qb::array(1.0)?, &branches, &[&x, &y]).unwrap_err();
    assert!(
        matches!(e, qb::Error::Type { .. }) && e.to_string().contains("astype"),
        "{e}"
    );
    assert!(qb::switch(&qb::array(0i64)?, &[], &[&x]).is_err());
    assert!(qb::switch(&qb::array([0i64, 1])?, &branches, &[&x, &y]).is_err());
    Ok(())
}
