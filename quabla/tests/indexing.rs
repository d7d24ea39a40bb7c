//! Indexing by tensors (traced or not): `index_with`/`ix!`, `take`, `take_along_axis`,
//! `dynamic_slice`, `dynamic_update_slice` and the functional updates of `at`. Values against
//! loops over plain vectors that apply the documented rules (negative indices wrap once, reads
//! clamp, updates drop, repeated updates combine in order), the same bits eagerly and under
//! `jit`, `vmap` against a loop, derivatives with `check_grads` to third order, and the
//! eager-only boolean mask.

use qb::prelude::*;
use qb::testing::{check_grads, Modes};
use qb::{ix, Tensor};
use quabla as qb;

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

/// `0, 1, 2, ...` as float64 of `shape`, scaled so every element differs.
fn ramp(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| 0.5 + i as f64 * 1.25).collect();
    Tensor::from_vec(shape, v).unwrap()
}

/// The read rule: wrap a negative index once, then clamp.
fn read_at(i: i64, n: usize) -> usize {
    let w = if i < 0 { i + n as i64 } else { i };
    w.clamp(0, n as i64 - 1) as usize
}

/// The update rule: wrap a negative index once; `None` (dropped) when still out of range.
fn write_at(i: i64, n: usize) -> Option<usize> {
    let w = if i < 0 { i + n as i64 } else { i };
    (0..n as i64).contains(&w).then_some(w as usize)
}

#[test]
fn index_arrays_follow_numpy_placement_and_clamp() -> qb::Result<()> {
    let x = ramp(&[4, 3, 5]);
    let xv = f64s(&x);
    let at = |i: usize, j: usize, k: usize| xv[(i * 3 + j) * 5 + k];
    let raw = [[2i64, -1], [7, -9]];
    let idx = qb::array(raw)?;
    // One array on axis 0: its shape replaces the axis.
    let y = x.index_with(ix![&idx])?;
    assert_eq!(y.shape(), [2, 2, 3, 5]);
    let mut want = Vec::new();
    for r in raw.iter().flatten() {
        for j in 0..3 {
            for k in 0..5 {
                want.push(at(read_at(*r, 4), j, k));
            }
        }
    }
    assert_eq!(f64s(&y), want);
    // On a middle axis, after a slice: in place.
    let idx1 = qb::array([2i64, 0, 2, -1])?;
    let y = x.index_with(ix![1..3, &idx1])?;
    assert_eq!(y.shape(), [2, 4, 5]);
    let mut want = Vec::new();
    for i in 1..3 {
        for r in [2, 0, 2, -1] {
            for k in 0..5 {
                want.push(at(i, read_at(r, 3), k));
            }
        }
    }
    assert_eq!(f64s(&y), want);
    // Two adjacent arrays broadcast together and stay in place; an integer among arrays is
    // a 0-d array, and separated advanced indices move the broadcast shape to the front.
    let i = qb::array([[0i64], [3]])?;
    let j = qb::array([1i64, -1, 4])?;
    let y = x.index_with(ix![&i, &j])?;
    assert_eq!(y.shape(), [2, 3, 5]);
    let mut want = Vec::new();
    for a in [0, 3] {
        for b in [1, -1, 4] {
            for k in 0..5 {
                want.push(at(a, read_at(b, 3), k));
            }
        }
    }
    assert_eq!(f64s(&y), want);
    let k = qb::array([4i64, 0, -2])?;
    let y = x.index_with(ix![1, .., &k])?;
    assert_eq!(y.shape(), [3, 3]);
    let mut want = Vec::new();
    for c in [4, 0, -2] {
        for b in 0..3 {
            want.push(at(1, b, read_at(c, 5)));
        }
    }
    assert_eq!(f64s(&y), want);
    // A rank-0 index removes its axis, like an integer.
    let s = qb::array(2i64)?;
    assert_eq!(
        f64s(&x.index_with(ix![.., &s])?),
        f64s(&x.index(qb::s![.., 2])?)
    );
    // Integer dtypes of data keep their values exactly.
    let n = qb::array([i64::MAX, -5, 7])?;
    let picked = n.index_with(ix![&qb::array([0i32, 2, 0])?])?;
    assert_eq!(picked.to_vec::<i64>()?, [i64::MAX, 7, i64::MAX]);
    // Float index arrays are a type error naming the fix.
    let err = x.index_with(ix![&qb::array([0.0])?]).unwrap_err();
    assert!(matches!(err, qb::Error::Type { .. }), "{err:?}");
    Ok(())
}

#[test]
fn take_and_take_along_axis() -> qb::Result<()> {
    // The clip mode (the fill mode, the default, is in indexing_modes.rs).
    let clip = qb::TakeMode::Clip;
    let x = ramp(&[3, 4]);
    let xv = f64s(&x);
    let idx = qb::array([3i64, -1, 9, 0])?;
    let flat = qb::take_with(&x, &idx, None, clip.clone())?;
    let want: Vec<f64> = [3i64, -1, 9, 0]
        .iter()
        .map(|&i| xv[read_at(i, 12)])
        .collect();
    assert_eq!(f64s(&flat), want);
    let cols = qb::take_with(&x, &idx, Some(-1), clip.clone())?;
    assert_eq!(cols.shape(), [3, 4]);
    let mut want = Vec::new();
    for r in 0..3 {
        for &c in &[3i64, -1, 9, 0] {
            want.push(xv[r * 4 + read_at(c, 4)]);
        }
    }
    assert_eq!(f64s(&cols), want);
    // take_along_axis along 1 with per-row indices, and along 0 with a broadcast row.
    let per_row = qb::array([[1i64, 0], [3, 3], [-1, 2]])?;
    let y = qb::take_along_axis_with(&x, &per_row, 1, clip.clone())?;
    let want: Vec<f64> = [[1i64, 0], [3, 3], [-1, 2]]
        .iter()
        .enumerate()
        .flat_map(|(r, row)| row.iter().map(move |&c| (r, c)))
        .map(|(r, c)| xv[r * 4 + read_at(c, 4)])
        .collect();
    assert_eq!(f64s(&y), want);
    let row = qb::array([[2i64, 0, 5, -3]])?;
    let y = qb::take_along_axis_with(&x, &row, 0, clip)?;
    assert_eq!(y.shape(), [1, 4]);
    let want: Vec<f64> = [2i64, 0, 5, -3]
        .iter()
        .enumerate()
        .map(|(c, &r)| xv[read_at(r, 3) * 4 + c])
        .collect();
    assert_eq!(f64s(&y), want);
    assert!(qb::take_along_axis(&x, &qb::array([1i64])?, 0).is_err());
    Ok(())
}

#[test]
fn dynamic_slices_clamp_their_starts() -> qb::Result<()> {
    let x = ramp(&[5, 4]);
    let xv = f64s(&x);
    for (r, c) in [(1i64, 2i64), (4, 3), (-1, 0), (-9, 7), (0, -2)] {
        let y = qb::dynamic_slice(&x, vec![r.into(), qb::array(c)?.into()], &[2, 2])?;
        let (r0, c0) = (read_at(r, 5).min(3), read_at(c, 4).min(2));
        let want = vec![
            xv[r0 * 4 + c0],
            xv[r0 * 4 + c0 + 1],
            xv[(r0 + 1) * 4 + c0],
            xv[(r0 + 1) * 4 + c0 + 1],
        ];
        assert_eq!(f64s(&y), want, "start ({r}, {c})");
        let u = qb::array([[-1.0, -2.0], [-3.0, -4.0]])?;
        let z = qb::dynamic_update_slice(&x, &u, vec![r.into(), c.into()])?;
        let mut want = xv.clone();
        for (k, v) in [-1.0, -2.0, -3.0, -4.0].into_iter().enumerate() {
            want[(r0 + k / 2) * 4 + c0 + k % 2] = v;
        }
        assert_eq!(f64s(&z), want, "update at ({r}, {c})");
    }
    // Wrong argument counts and sizes are shape errors; float starts type errors.
    assert!(qb::dynamic_slice(&x, vec![0.into()], &[1]).is_err());
    assert!(qb::dynamic_slice(&x, vec![0.into(), 0.into()], &[6, 1]).is_err());
    assert!(matches!(
        qb::dynamic_slice(&x, vec![0.5.into(), 0.into()], &[1, 1]),
        Err(qb::Error::Type { .. })
    ));
    Ok(())
}

#[test]
fn functional_updates_combine_repeated_indices_in_order() -> qb::Result<()> {
    let x = qb::array([1.0, -2.0, 3.0, 4.0, -5.0])?;
    let raw = [1i64, -1, 1, 7, -9, 0];
    let idx = qb::array(raw)?;
    let u = [10.0, 20.0, -30.0, 40.0, 50.0, 0.5];
    let uv = qb::array(u)?;
    let reference = |combine: fn(f64, f64) -> f64| {
        let mut v = vec![1.0, -2.0, 3.0, 4.0, -5.0];
        for (&i, &w) in raw.iter().zip(&u) {
            if let Some(p) = write_at(i, 5) {
                v[p] = combine(v[p], w);
            }
        }
        v
    };
    let at = x.at(ix![&idx]);
    assert_eq!(f64s(&at.set(&uv)?), reference(|_, w| w));
    assert_eq!(f64s(&at.add(&uv)?), reference(|a, w| a + w));
    assert_eq!(f64s(&at.mul(&uv)?), reference(|a, w| a * w));
    assert_eq!(f64s(&at.min(&uv)?), reference(f64::min));
    assert_eq!(f64s(&at.max(&uv)?), reference(f64::max));
    // `get` reads with clamping; a scalar broadcasts over the selection.
    let got = f64s(&at.get()?);
    let xv = f64s(&x);
    assert_eq!(
        got,
        raw.iter().map(|&i| xv[read_at(i, 5)]).collect::<Vec<_>>()
    );
    assert_eq!(
        f64s(&at.set(0.0)?),
        reference(|_, _| 0.0),
        "a scalar value broadcasts"
    );
    // Rows of a matrix, a basic index, and an integer tensor.
    let m = qb::array([[1i64, 2], [3, 4], [5, 6]])?;
    let rows = qb::array([2i64, 2, 0])?;
    let added = m
        .at(ix![&rows])
        .add(qb::array([[1i64, 1], [10, 10], [100, 100]])?)?;
    assert_eq!(added.to_vec::<i64>()?, [101, 102, 3, 4, 16, 17]);
    let set = m.at(ix![1.., 0]).set(-1)?;
    assert_eq!(set.to_vec::<i64>()?, [1, 2, -1, 4, -1, 6]);
    // Values that do not broadcast to the selection are a shape error.
    assert!(x.at(ix![&idx]).set(qb::array([1.0, 2.0])?).is_err());
    Ok(())
}

/// Every op on traced indices: eagerly and under `jit`, with the same bits.
#[test]
fn eager_and_jit_agree_bit_for_bit() -> qb::Result<()> {
    let f = |(x, i): (Tensor, Tensor)| -> qb::Result<Vec<Tensor>> {
        let s = i.index(qb::s![0])?;
        Ok(vec![
            x.index_with(ix![&i])?,
            x.index_with(ix![.., &s])?,
            qb::take(&x, &i, Some(1))?,
            qb::take_along_axis(&x, &i.reshape([1, -1])?, 0)?,
            qb::dynamic_slice(&x, vec![s.clone().into(), 1.into()], &[2, 2])?,
            qb::dynamic_update_slice(&x, &qb::ones([2, 1])?, vec![s.clone().into(), s.into()])?,
            x.at(ix![&i]).add(0.1)?,
            x.at(ix![&i, 0]).set(-7.0)?,
            x.at(ix![&i]).mul(1.5)?,
            x.at(ix![&i]).min(2.0)?,
            x.at(ix![&i]).max(2.0)?,
        ])
    };
    let x = qb::F32.array([[0.1, 0.2, 0.3], [1.1, 1.2, 1.3], [2.1, 2.2, 2.3]])?;
    let i = qb::array([2i64, -1, 0])?;
    let eager = f((x.clone(), i.clone()))?;
    let jitted: Vec<Tensor> = qb::jit(f).call(&(x, i))?;
    for (k, (e, j)) in eager.iter().zip(&jitted).enumerate() {
        assert_eq!(e.dtype(), j.dtype(), "output {k}");
        assert_eq!(e.shape(), j.shape(), "output {k}");
        let (ev, jv) = (e.to_vec::<f32>()?, j.to_vec::<f32>()?);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&ev), bits(&jv), "output {k}");
    }
    Ok(())
}

#[test]
fn vmap_matches_a_loop() -> qb::Result<()> {
    let xs = ramp(&[3, 4, 2]);
    let is = qb::array([[1i64, -1], [3, 0], [2, 2]])?;
    let us = ramp(&[3, 2, 2]);
    type F = fn((Tensor, Tensor, Tensor)) -> qb::Result<Tensor>;
    let cases: [(&str, F); 5] = [
        ("gather", |(x, i, _)| x.index_with(ix![&i])),
        ("add", |(x, i, u)| x.at(ix![&i]).add(&u)),
        ("set", |(x, i, u)| x.at(ix![&i]).set(&u)),
        ("max", |(x, i, u)| x.at(ix![&i]).max(&u)),
        ("dynamic_slice", |(x, i, _)| {
            qb::dynamic_slice(&x, vec![i.index(qb::s![0])?.into(), 0.into()], &[2, 2])
        }),
    ];
    for (name, f) in cases {
        // Everything batched; then only the indices (data shared); then only the data.
        let all: Tensor = qb::vmap(f).call(&(xs.clone(), is.clone(), us.clone()))?;
        let x0 = xs.index(qb::s![0])?;
        let i0 = is.index(qb::s![0])?;
        let idx_only: Tensor = qb::vmap(move |(i, u): (Tensor, Tensor)| f((x0.clone(), i, u)))
            .call(&(is.clone(), us.clone()))?;
        let x_only: Tensor = qb::vmap(move |(x, u): (Tensor, Tensor)| f((x, i0.clone(), u)))
            .call(&(xs.clone(), us.clone()))?;
        for b in 0..3 {
            let (x, i, u) = (
                xs.index(qb::s![b])?,
                is.index(qb::s![b])?,
                us.index(qb::s![b])?,
            );
            let want = f((x.clone(), i.clone(), u.clone()))?;
            assert_eq!(f64s(&all.index(qb::s![b])?), f64s(&want), "{name} {b}");
            let want = f((xs.index(qb::s![0])?, i, u.clone()))?;
            assert_eq!(f64s(&idx_only.index(qb::s![b])?), f64s(&want), "{name} {b}");
            let want = f((x, is.index(qb::s![0])?, u))?;
            assert_eq!(f64s(&x_only.index(qb::s![b])?), f64s(&want), "{name} {b}");
        }
    }
    Ok(())
}

/// A function checked by `check_grads`.
type Case = Box<dyn Fn(Vec<Tensor>) -> qb::Result<Vec<Tensor>>>;

#[test]
fn derivatives_to_third_order() -> qb::Result<()> {
    let x = qb::array([[0.3, -1.2, 0.7], [1.5, 0.4, -0.9], [-0.6, 0.8, 1.1]])?;
    let u = qb::array([[0.25, -0.5, 1.75], [0.9, -1.3, 0.6]])?;
    let idx = qb::array([2i64, -3])?;
    let dup = qb::array([1i64, 1])?;
    // Each case feeds a nonlinear function so that every order has something to check.
    let cases: Vec<(&str, Case)> = vec![
        ("gather", {
            let idx = idx.clone();
            Box::new(move |a| {
                Ok(vec![a[0]
                    .index_with(ix![&idx])?
                    .sin()?
                    .mul(&a[0].index_with(ix![.., &idx])?.sum()?)?])
            })
        }),
        ("take_along_axis", {
            let ii = qb::array([[2i64, 0], [1, 1], [0, 2]])?;
            Box::new(move |a| Ok(vec![qb::take_along_axis(&a[0], &ii, 1)?.sin()?]))
        }),
        (
            "dynamic_slice",
            Box::new(|a| {
                let s = qb::array(1i64)?;
                Ok(vec![qb::dynamic_slice(
                    &a[0],
                    vec![s.into(), 0.into()],
                    &[2, 2],
                )?
                .tanh()?])
            }),
        ),
        ("set with repeats", {
            let dup = dup.clone();
            Box::new(move |a| Ok(vec![a[0].at(ix![&dup]).set(a[1].sin()?)?.exp()?]))
        }),
        ("add with repeats", {
            let dup = dup.clone();
            Box::new(move |a| Ok(vec![a[0].at(ix![&dup]).add(&a[1])?.sin()?]))
        }),
        ("mul", {
            let idx = idx.clone();
            Box::new(move |a| Ok(vec![a[0].at(ix![&idx]).mul(&a[1])?.sin()?]))
        }),
        ("min", {
            let idx = idx.clone();
            Box::new(move |a| Ok(vec![a[0].at(ix![&idx]).min(&a[1])?.sin()?]))
        }),
        ("max", {
            let idx = idx.clone();
            Box::new(move |a| Ok(vec![a[0].at(ix![&idx]).max(&a[1])?.sin()?]))
        }),
        (
            "dynamic_update_slice",
            Box::new(|a| {
                let s = qb::array(-1i64)?;
                let upd = a[1].index(qb::s![0..1, 0..2])?;
                Ok(vec![qb::dynamic_update_slice(
                    &a[0],
                    &upd,
                    vec![s.into(), 1.into()],
                )?
                .sin()?])
            }),
        ),
    ];
    for (name, f) in cases {
        if let Err(e) = check_grads(f, &[x.clone(), u.clone()], 3, Modes::BOTH) {
            panic!("{name}: {e}");
        }
    }
    Ok(())
}

#[test]
fn boolean_masks_are_eager_only() -> qb::Result<()> {
    let x = qb::array([[1.0, -2.0], [3.0, -4.0]])?;
    let mask = qb::less(&x, 0.0)?;
    // Eagerly a mask selects its true positions in row-major order.
    assert_eq!(f64s(&x.index_with(ix![&mask])?), [-2.0, -4.0]);
    let rows = qb::array([false, true])?;
    assert_eq!(f64s(&x.index_with(ix![&rows])?), [3.0, -4.0]);
    assert_eq!(f64s(&x.at(ix![&mask]).set(0.0)?), [1.0, 0.0, 3.0, 0.0]);
    // Under a transform: the concretization error, naming `where`.
    let f = |x: Tensor| -> qb::Result<Tensor> {
        let m = qb::less(&x, 0.0)?;
        x.index_with(ix![&m])?.sum()
    };
    let err = qb::jit(f).call(&x).unwrap_err();
    assert!(
        matches!(
            err,
            qb::Error::Tracer {
                kind: qb::TracerErrorKind::Concretization,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("where("), "{err}");
    Ok(())
}

/// A loop body reading row `i` of its operand (the RNN pattern): eagerly, jitted, and its
/// gradient through the loop, against closed forms.
#[test]
fn traced_indices_inside_loops_with_derivatives() -> qb::Result<()> {
    let xs = ramp(&[5, 3]).mul(0.2)?;
    let f = |xs: Tensor| -> qb::Result<Tensor> {
        let total = qb::fori_loop(
            0,
            5,
            |i, c, ops| {
                let k = i.astype(qb::I64)?;
                let row = ops[0].index_with(ix![&k])?;
                let window = qb::dynamic_slice(&ops[0], vec![k.into(), 0.into()], &[1, 3])?;
                &c + row.sin()? + window.reshape([3])?.mul(0.5)?
            },
            &qb::zeros([3])?,
        )
        .operands(&[&xs])
        .eval()?;
        total.sum()
    };
    let xv = f64s(&xs);
    let rows = |k: usize| &xv[k * 3..k * 3 + 3];
    let mut want = 0.0;
    for k in 0..5 {
        // dynamic_slice clamps start k to 4 at most; every start is in range here.
        want += rows(k).iter().map(|v| v.sin() + 0.5 * v).sum::<f64>();
    }
    let eager = f(xs.clone())?.item()?;
    assert!((eager - want).abs() < 1e-12, "{eager} vs {want}");
    let jitted: Tensor = qb::jit(f).call(&xs)?;
    assert_eq!(jitted.item()?.to_bits(), eager.to_bits());
    let g: Tensor = qb::grad(f).call(&xs)?;
    let want: Vec<f64> = xv.iter().map(|v| v.cos() + 0.5).collect();
    for (a, b) in f64s(&g).iter().zip(&want) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }
    Ok(())
}

/// Per-example gradients: `vmap` of `grad` through each rule's batched form.
#[test]
fn vmap_of_grad_matches_a_loop() -> qb::Result<()> {
    let xs = ramp(&[3, 4]).mul(0.3)?;
    let idx = qb::array([[1i64, 1], [0, 3], [2, -1]])?;
    type F = fn((Tensor, Tensor)) -> qb::Result<Tensor>;
    let cases: [F; 4] = [
        |(x, i)| x.index_with(ix![&i])?.sin()?.sum(),
        |(x, i)| {
            x.at(ix![&i])
                .set(x.index_with(ix![&i])?.mul(2.0)?)?
                .exp()?
                .sum()
        },
        |(x, i)| x.at(ix![&i]).max(0.5)?.sin()?.sum(),
        |(x, i)| x.at(ix![&i]).mul(x.index_with(ix![&i])?)?.sum(),
    ];
    for (k, f) in cases.into_iter().enumerate() {
        let g = move |(x, i): (Tensor, Tensor)| -> qb::Result<Tensor> {
            qb::grad(move |x: Tensor| f((x, i.clone()))).call(&x)
        };
        let batched: Tensor = qb::vmap(g).call(&(xs.clone(), idx.clone()))?;
        for b in 0..3 {
            let want = g((xs.index(qb::s![b])?, idx.index(qb::s![b])?))?;
            assert_eq!(
                f64s(&batched.index(qb::s![b])?),
                f64s(&want),
                "case {k}, row {b}"
            );
        }
    }
    Ok(())
}
