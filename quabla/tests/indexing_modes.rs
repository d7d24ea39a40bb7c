//! `take` and `take_along_axis` with JAX's modes (`fill`, the default, with its fill values,
//! `clip` and `wrap`), and the functional updates `at[].subtract`, `divide`, `power` and
//! `apply`: values against loops over plain vectors, the same bits eagerly and under `jit`
//! (with traced indices), per example under `vmap`, and derivatives against central
//! differences (`check_grads`) and closed forms.

use qb::testing::{check_grads, Modes};
use qb::{ix, TakeMode, Tensor};
use quabla as qb;

fn f64s(t: &Tensor) -> Vec<f64> {
    t.astype(qb::F64).unwrap().to_vec::<f64>().unwrap()
}

fn bits(t: &Tensor) -> Vec<u64> {
    if t.dtype().is_integer() {
        t.to_vec::<i64>()
            .unwrap()
            .iter()
            .map(|&v| v as u64)
            .collect()
    } else if t.dtype() == qb::BOOL {
        t.to_vec_bool().unwrap().iter().map(|&v| v as u64).collect()
    } else {
        f64s(t).iter().map(|v| v.to_bits()).collect()
    }
}

fn same(a: &Tensor, b: &Tensor, what: &str) {
    assert_eq!((a.shape(), a.dtype()), (b.shape(), b.dtype()), "{what}");
    assert_eq!(bits(a), bits(b), "{what}");
}

const INDICES: [i64; 8] = [0, 4, -1, -5, 5, -6, 100, 2];

/// The reference of one index of an axis of `n`: `Some(position)` inside (after one negative
/// wrap) or `None`.
fn inside(i: i64, n: usize) -> Option<usize> {
    let w = if i < 0 { i + n as i64 } else { i };
    (0..n as i64).contains(&w).then_some(w as usize)
}

#[test]
fn take_fills_out_of_range_indices_by_default() -> qb::Result<()> {
    let v = [0.5, -1.0, 2.0, 3.5, -4.25];
    let idx = qb::array(INDICES)?;
    for dtype in [qb::F64, qb::F32, qb::I32, qb::I64, qb::BOOL] {
        let x = qb::array(v)?.astype(dtype)?;
        let got = qb::take(&x, &idx, None)?;
        let fill = match dtype {
            qb::F64 | qb::F32 => qb::array(f64::NAN)?.astype(dtype)?,
            qb::I32 => qb::array(i32::MIN)?,
            qb::I64 => qb::array(i64::MIN)?,
            _ => qb::array(true)?,
        };
        for (k, &i) in INDICES.iter().enumerate() {
            let want = match inside(i, 5) {
                Some(p) => x.index(qb::s![p])?,
                None => fill.clone(),
            };
            same(
                &got.index(qb::s![k])?,
                &want,
                &format!("{dtype:?} index {i}"),
            );
        }
        // A given fill value, cast to the dtype; clip and wrap.
        let with = qb::take_with(&x, &idx, None, TakeMode::Fill(Some(qb::array(7i64)?)))?;
        let clip = qb::take_with(&x, &idx, None, TakeMode::Clip)?;
        let wrap = qb::take_with(&x, &idx, None, TakeMode::Wrap)?;
        for (k, &i) in INDICES.iter().enumerate() {
            let w = if i < 0 { i + 5 } else { i };
            let want_with = match inside(i, 5) {
                Some(p) => x.index(qb::s![p])?,
                None => qb::array(7i64)?.astype(dtype)?,
            };
            same(&with.index(qb::s![k])?, &want_with, "fill_value");
            same(
                &clip.index(qb::s![k])?,
                &x.index(qb::s![w.clamp(0, 4) as usize])?,
                "clip",
            );
            same(
                &wrap.index(qb::s![k])?,
                &x.index(qb::s![i.rem_euclid(5) as usize])?,
                "wrap",
            );
        }
    }
    // Along an axis of a matrix: whole slices are filled.
    let m = Tensor::from_vec([2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
    let cols = qb::take(&m, &qb::array([[2i64, 3], [-3, -4]])?, Some(1))?;
    assert_eq!(cols.shape(), &[2, 2, 2]);
    let got = f64s(&cols);
    let want = [3.0, f64::NAN, 1.0, f64::NAN, 6.0, f64::NAN, 4.0, f64::NAN];
    assert_eq!(
        bits(&qb::array(got.clone())?),
        bits(&qb::array(want)?),
        "{got:?}"
    );
    // take_along_axis: the same modes.
    let per_row = qb::array([[0i64, 3], [-1, -4]])?;
    let along = qb::take_along_axis(&m, &per_row, 1)?;
    let want = [1.0, f64::NAN, 6.0, f64::NAN];
    assert_eq!(bits(&along), bits(&qb::array(want)?));
    let clipped = qb::take_along_axis_with(&m, &per_row, 1, TakeMode::Clip)?;
    assert_eq!(f64s(&clipped), [1.0, 3.0, 6.0, 4.0]);
    let wrapped = qb::take_along_axis_with(&m, &per_row, 1, TakeMode::Wrap)?;
    assert_eq!(f64s(&wrapped), [1.0, 1.0, 6.0, 6.0]);
    let filled = qb::take_along_axis_with(&m, &per_row, 1, TakeMode::Fill(Some(qb::array(-1.0)?)))?;
    assert_eq!(f64s(&filled), [1.0, -1.0, 6.0, -1.0]);
    assert!(qb::take_with(&m, &idx, None, TakeMode::Fill(Some(qb::zeros([2])?))).is_err());
    Ok(())
}

#[test]
fn take_modes_are_traced_batched_and_differentiable() -> qb::Result<()> {
    let x = qb::array([0.5, -1.0, 2.0, 3.5, -4.25])?;
    let idx = qb::array(INDICES)?;
    for mode in [TakeMode::fill(), TakeMode::Clip, TakeMode::Wrap] {
        let m2 = mode.clone();
        let eager = qb::take_with(&x, &idx, None, mode.clone())?;
        let jitted: Tensor =
            qb::jit(move |(x, i): (Tensor, Tensor)| qb::take_with(&x, &i, None, m2.clone()))
                .call(&(x.clone(), idx.clone()))?;
        same(&jitted, &eager, &format!("{mode:?}"));
        // Per example indices.
        let rows = qb::array([[0i64, 9], [-1, 2]])?;
        let (m3, xb) = (mode.clone(), x.clone());
        let batched: Tensor =
            qb::vmap(move |i: Tensor| qb::take_with(&xb, &i, None, m3.clone())).call(&rows)?;
        for e in 0..2 {
            let one = qb::take_with(&x, &rows.index(qb::s![e])?, None, mode.clone())?;
            same(&batched.index(qb::s![e])?, &one, "vmap");
        }
    }
    // The derivative with respect to x is a scatter of the cotangent to the positions read;
    // with respect to the fill value, the sum of the cotangents of the filled positions.
    let w = qb::arange_from(1.0, 9.0, 1.0)?;
    let loss = |(x, fill): (Tensor, Tensor)| {
        let t = qb::take_with(&x, &qb::array(INDICES)?, None, TakeMode::Fill(Some(fill)))?;
        t.mul(&qb::arange_from(1.0, 9.0, 1.0)?)?.sum()
    };
    let (gx, gf): (Tensor, Tensor) = qb::grad(loss)
        .argnums(&[0, 1])
        .call(&(x.clone(), qb::array(0.0)?))?;
    let wv = f64s(&w);
    let mut want = [0.0; 5];
    let mut want_fill = 0.0;
    for (k, &i) in INDICES.iter().enumerate() {
        match inside(i, 5) {
            Some(p) => want[p] += wv[k],
            None => want_fill += wv[k],
        }
    }
    assert_eq!(f64s(&gx), want);
    assert_eq!(gf.item()?, want_fill);
    let ii = qb::array([[1i64, -2], [7, 0]])?;
    check_grads(
        move |a: Vec<Tensor>| {
            Ok(vec![qb::take_along_axis_with(
                &a[0],
                &ii,
                1,
                TakeMode::Fill(Some(a[1].clone())),
            )?
            .sin()?])
        },
        &[
            Tensor::from_vec([2, 3], vec![0.3, -0.7, 1.1, 0.4, 2.0, -1.3])?,
            qb::array(0.25)?,
        ],
        3,
        Modes::BOTH,
    )?;
    Ok(())
}

/// The reference of an update on a vector: each in-range index in order, `op(current, v)`.
fn updated(x: &[f64], idx: &[i64], vals: &[f64], op: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    let mut out = x.to_vec();
    for (&i, &v) in idx.iter().zip(vals) {
        if let Some(p) = inside(i, x.len()) {
            out[p] = op(out[p], v);
        }
    }
    out
}

#[test]
fn subtract_divide_power_and_apply_combine_every_update() -> qb::Result<()> {
    let xv = [1.5, -2.0, 0.5, 3.0, 0.75];
    let x = qb::array(xv)?;
    // Repeated (1 twice, -1 is 4), out of range (9) and negative indices.
    let iv = [1i64, 4, 1, 9, -1];
    let vv = [0.5, 2.0, -3.0, 4.0, 1.5];
    let (i, v) = (qb::array(iv)?, qb::array(vv)?);
    let close = |a: &[f64], b: &[f64]| {
        a.iter()
            .zip(b)
            .all(|(p, q)| (p - q).abs() <= 1e-14 * q.abs().max(1.0))
    };
    let sub = x.at(ix![&i]).subtract(&v)?;
    assert_eq!(f64s(&sub), updated(&xv, &iv, &vv, |a, b| a - b));
    let div = x.at(ix![&i]).divide(&v)?;
    assert!(
        close(&f64s(&div), &updated(&xv, &iv, &vv, |a, b| a / b)),
        "{div:?}"
    );
    let pw = qb::array([1.5, 2.0, 0.5, 3.0, 0.75])?
        .at(ix![&i])
        .power(&v)?;
    assert!(
        close(
            &f64s(&pw),
            &updated(&[1.5, 2.0, 0.5, 3.0, 0.75], &iv, &vv, f64::powf)
        ),
        "{pw:?}"
    );
    // Negative elements off the selection stay as they are under `power`.
    let neg = qb::array([-1.0, 4.0, -0.0])?.at(ix![1]).power(0.5)?;
    assert_eq!(bits(&neg), bits(&qb::array([-1.0, 2.0, -0.0])?));
    // apply: once per occurrence (a repeated position twice).
    let applied = x.at(ix![&i]).apply(|s| s.mul(2.0)?.add(1.0))?;
    assert_eq!(f64s(&applied), updated(&xv, &iv, &vv, |a, _| 2.0 * a + 1.0));
    // Static indices, a slice, integers and bools.
    let ints = qb::array([5i64, 7, 9])?;
    assert_eq!(
        ints.at(ix![0..2]).subtract(2i64)?.to_vec::<i64>()?,
        [3, 5, 9]
    );
    assert_eq!(ints.at(ix![2]).power(2i64)?.to_vec::<i64>()?, [5, 7, 81]);
    assert_eq!(
        ints.at(ix![&qb::array([0i64, 0])?])
            .apply(|s| s.mul(3i64))?
            .to_vec::<i64>()?,
        [45, 7, 9]
    );
    let flags = qb::array([true, false, true])?;
    assert_eq!(
        flags
            .at(ix![1..])
            .apply(|s| s.logical_not())?
            .to_vec_bool()?,
        [true, true, false]
    );
    assert!(matches!(
        ints.at(ix![0]).divide(2i64),
        Err(qb::Error::Type { .. })
    ));
    assert!(flags.at(ix![0]).power(2.0).is_err());
    let wrong = x.at(ix![&i]).apply(|s| s.sum());
    assert!(matches!(wrong, Err(qb::Error::Shape { .. })), "{wrong:?}");
    Ok(())
}

#[test]
fn updates_are_traced_batched_and_differentiable() -> qb::Result<()> {
    let x = qb::array([1.5, -2.0, 0.5, 3.0, 0.75])?;
    let i = qb::array([1i64, 4, 1, 9, -1])?;
    let v = qb::array([0.5, 2.0, -3.0, 4.0, 1.5])?;
    type Update = fn(&Tensor, &Tensor, &Tensor) -> qb::Result<Tensor>;
    let updates: [(&str, Update); 4] = [
        ("subtract", |x, i, v| x.at(ix![i]).subtract(v)),
        ("divide", |x, i, v| x.at(ix![i]).divide(v)),
        ("power", |x, i, v| x.abs()?.at(ix![i]).power(v)),
        ("apply", |x, i, _| x.at(ix![i]).apply(|s| s.sin()?.mul(2.0))),
    ];
    for (name, update) in updates {
        let eager = update(&x, &i, &v)?;
        // Traced indices (apply runs its layers in a while_loop then), traced values.
        let jitted: Tensor = qb::jit(move |(x, i, v): (Tensor, Tensor, Tensor)| update(&x, &i, &v))
            .call(&(x.clone(), i.clone(), v.clone()))?;
        same(&jitted, &eager, name);
        // Per example indices under vmap.
        let rows = qb::array([[0i64, 0, 2], [4, -1, 3]])?;
        let vals = qb::array([2.0, 0.5, -1.0])?;
        let (xb, vb) = (x.clone(), vals.clone());
        let batched: Tensor = qb::vmap(move |i: Tensor| update(&xb, &i, &vb)).call(&rows)?;
        for e in 0..2 {
            let one = update(&x, &rows.index(qb::s![e])?, &vals)?;
            same(&batched.index(qb::s![e])?, &one, &format!("vmap {name}"));
        }
        // Derivatives with respect to x and the values, third order, with unique indices
        // (the derivative of a product of repeated updates assumes unique ones, as JAX's).
        let unique = qb::array([3i64, 0, -4])?;
        check_grads(
            move |a: Vec<Tensor>| Ok(vec![update(&a[0], &unique, &a[1])?.tanh()?]),
            &[
                qb::array([1.5, 2.0, 0.5, 3.0, 0.75])?,
                qb::array([0.5, 1.25, -0.75])?,
            ],
            3,
            Modes::BOTH,
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // apply with repeated traced indices, differentiated through its while_loop: f applied
    // twice at a repeated position, so d/dx = f'(f(x)) f'(x) there.
    let g: Tensor = qb::grad(|x: Tensor| {
        x.at(ix![&qb::array([1i64, 1, 2])?])
            .apply(|s| s.sin())?
            .sum()
    })
    .call(&qb::array([0.3, 0.7, -0.4])?)?;
    let traced: Tensor = qb::jit(|(x, i): (Tensor, Tensor)| {
        qb::grad(|x: Tensor| x.at(ix![&i]).apply(|s| s.sin())?.sum()).call(&x)
    })
    .call(&(qb::array([0.3, 0.7, -0.4])?, qb::array([1i64, 1, 2])?))?;
    let want = [1.0, 0.7f64.sin().cos() * 0.7f64.cos(), (-0.4f64).cos()];
    for (a, b) in f64s(&g).iter().zip(want) {
        assert!((a - b).abs() < 1e-15, "{a} vs {b}");
    }
    same(&traced, &g, "grad of apply, traced indices");
    Ok(())
}
