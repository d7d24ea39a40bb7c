//! `vmap`, `jacobian` and `hessian`: the acceptance examples E31–E34 and E42, composition with
//! `grad`, `jvp` and `jit` in both orders, and vmap-versus-loop equality.

use qb::prelude::*;
use qb::{ShapeDtype, Tensor};
use quabla as qb;

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= tol * y.abs().max(1.0))
}

#[test]
fn e31_jacobian_layout() -> qb::Result<()> {
    let f = |x: Tensor| {
        qb::stack(
            &[
                x.index(qb::s![0]).mul(x.index(qb::s![1]))?,
                x.index(qb::s![0]).sin()?,
            ],
            0,
        )
    };
    let j: Tensor = qb::jacobian(f).call(&qb::array([1.0, 2.0])?)?;
    assert_eq!(j.shape(), &[2, 2]);
    assert!(close(&vals(&j), &[2.0, 1.0, 0.54030231, 0.0], 1e-8), "{j}");
    Ok(())
}

#[test]
fn jacobian_modes_agree_and_blocks_follow_the_layout() -> qb::Result<()> {
    // [3] -> [2, 2]: Q = 4 > P = 3 (forward); the sum gives Q = 1 < P (reverse).
    let f = |x: Tensor| {
        x.reshape([3, 1])?
            .matmul(x.index(qb::s![..2])?.reshape([1, 2])?)?
            .index(qb::s![..2, ..])
    };
    let x = qb::array([0.5, -1.0, 2.0])?;
    let j: Tensor = qb::jacobian(f).call(&x)?;
    assert_eq!(j.shape(), &[2, 2, 3]);
    // d(x_i x_j)/dx_k for i in 0..2, j in 0..2.
    let mut want = Vec::new();
    let xv = [0.5, -1.0, 2.0];
    for i in 0..2 {
        for jj in 0..2 {
            for k in 0..3 {
                let mut d = 0.0;
                if i == k {
                    d += xv[jj];
                }
                if jj == k {
                    d += xv[i];
                }
                want.push(d);
            }
        }
    }
    assert_eq!(vals(&j), want);
    let g: Tensor = qb::jacobian(|x: Tensor| f(x)?.sum()).call(&x)?;
    let r: Tensor = qb::grad(|x: Tensor| f(x)?.sum()).call(&x)?;
    assert_eq!(g.shape(), &[3]);
    assert_eq!(vals(&g), vals(&r));
    Ok(())
}

#[test]
fn e32_hessian() -> qb::Result<()> {
    let h: Tensor = qb::hessian(|x: Tensor| x.powi(3).sum()).call(&qb::array([1.0, 2.0])?)?;
    assert_eq!(h.shape(), &[2, 2]);
    assert_eq!(vals(&h), vec![6.0, 0.0, 0.0, 12.0]);
    Ok(())
}

#[test]
fn e33_vmap_with_an_unmapped_argument_and_per_example_gradients() -> qb::Result<()> {
    let per_example = |(w, x): (Tensor, Tensor)| x.mul(&w).tanh().sum();
    let w = qb::array([0.5, 1.0])?;
    let xs = qb::array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])?;
    let v: Tensor = qb::vmap(per_example)
        .in_axes(&[None, Some(0)])
        .call(&(w.clone(), xs.clone()))?;
    assert!(
        close(&vals(&v), &[1.42614474, 1.90447755, 1.98660201], 1e-8),
        "{v}"
    );
    let g = |(w, x): (Tensor, Tensor)| qb::grad(per_example).call::<Tensor, Tensor>(&(w, x));
    let gs: Tensor = qb::vmap(g).in_axes(&[None, Some(0)]).call(&(w, xs))?;
    assert_eq!(gs.shape(), &[3, 2]);
    Ok(())
}

#[test]
fn e34_vjp_of_vmap_sums_the_unmapped_cotangent() -> qb::Result<()> {
    let f = |(x, w): (Tensor, Tensor)| {
        qb::vmap(|(x, w): (Tensor, Tensor)| x.mul(&w))
            .in_axes(&[Some(0), None])
            .call::<Tensor>(&(x, w))
    };
    let (out, pullback) = qb::vjp(f, &(qb::array([1.0, 2.0, 3.0])?, qb::array(2.0)?))?;
    assert_eq!(vals(&out), vec![2.0, 4.0, 6.0]);
    let (cx, cw): (Tensor, Tensor) = pullback.call(&qb::ones([3])?)?;
    assert_eq!(vals(&cx), vec![2.0, 2.0, 2.0]);
    assert_eq!(cw.item()?, 6.0);
    Ok(())
}

#[test]
fn vmap_matches_a_loop_and_composes_with_grad_and_jit() -> qb::Result<()> {
    let f = |x: Tensor| x.sin().powi(2).sum_axes(-1)?.exp();
    let xs = qb::linspace(-1.0, 1.0, 12)?.reshape([4, 3])?;
    let batched: Tensor = qb::vmap(f).call(&xs)?;
    let looped: Vec<f64> = (0..4)
        .map(|i| {
            f(xs.index(qb::s![i as isize]).unwrap())
                .unwrap()
                .item()
                .unwrap()
        })
        .collect();
    assert_eq!(vals(&batched), looped);
    // Mapping along axis 1 with the batch moved to the front of the output.
    let cols: Tensor = qb::vmap(|c: Tensor| c.sum())
        .in_axes(&[Some(1)])
        .call(&xs)?;
    assert_eq!(vals(&cols), vals(&xs.sum_axes(0)?));
    // grad of a vmapped sum equals the vmapped grad.
    let g1: Tensor = qb::grad(|x: Tensor| qb::vmap(f).call::<Tensor>(&x)?.sum()).call(&xs)?;
    let g2: Tensor = qb::vmap(|x: Tensor| qb::grad(f).call::<Tensor, Tensor>(&x)).call(&xs)?;
    assert!(close(&vals(&g1), &vals(&g2), 1e-15));
    // Second derivatives per point, jitted.
    let d2 = |t: Tensor| {
        qb::grad(|u: Tensor| qb::grad(|v: Tensor| v.sin().powi(2)).call::<Tensor, Tensor>(&u))
            .call::<Tensor, Tensor>(&t)
    };
    let pts = qb::array([0.1, 0.7, 1.3])?;
    let jitted = qb::jit(|x: Tensor| qb::vmap(d2).call::<Tensor>(&x)).call(&pts)?;
    let want: Vec<f64> = [0.1f64, 0.7, 1.3]
        .iter()
        .map(|t| 2.0 * (2.0 * t).cos())
        .collect();
    assert!(close(&vals(&jitted), &want, 1e-14));
    Ok(())
}

#[test]
fn vmap_errors() {
    let f = |(a, b): (Tensor, Tensor)| &a + &b;
    let err = qb::vmap(f)
        .call::<Tensor>(&(qb::ones([3]).unwrap(), qb::ones([4]).unwrap()))
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("inconsistent sizes for mapped axes"),
        "{err}"
    );
    let err = qb::vmap(|x: Tensor| x.sin())
        .in_axes(&[Some(2)])
        .call::<Tensor>(&qb::ones([3]).unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    let err = qb::vmap(|x: Tensor| x.sin())
        .out_axes(None)
        .call::<Tensor>(&qb::ones([3]).unwrap())
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("out_axes=None requires an unmapped result"),
        "{err}"
    );
}

/// `grad(grad(sin(t)^2))` per point: a Rust loop inlines one copy per point, `vmap` one copy.
fn d2(t: Tensor) -> qb::Result<Tensor> {
    qb::grad(|u: Tensor| qb::grad(|v: Tensor| v.sin().powi(2)).call::<Tensor, Tensor>(&u))
        .call::<Tensor, Tensor>(&t)
}

fn lines(f: impl Fn(Tensor) -> qb::Result<Tensor>, n: usize) -> usize {
    qb::jit(f)
        .lower(&ShapeDtype::new([n], qb::F64))
        .unwrap()
        .as_text()
        .lines()
        .count()
}

#[test]
fn e42_graph_size_loop_versus_vmap() {
    let per_point_loop = |xs: Tensor| {
        let n = xs.shape()[0];
        let parts = (0..n)
            .map(|i| d2(xs.index(qb::s![i as isize])?))
            .collect::<qb::Result<Vec<_>>>()?;
        qb::stack(&parts, 0)
    };
    let per_point_vmap = |xs: Tensor| qb::vmap(d2).call::<Tensor>(&xs);
    let (l4, l8, l16) = (
        lines(per_point_loop, 4),
        lines(per_point_loop, 8),
        lines(per_point_loop, 16),
    );
    let (v4, v8, v16) = (
        lines(per_point_vmap, 4),
        lines(per_point_vmap, 8),
        lines(per_point_vmap, 16),
    );
    assert_eq!(v4, v8);
    assert_eq!(v8, v16);
    assert!(v4 <= 35, "vmap graph has {v4} lines");
    assert!(
        l16 - l8 == 2 * (l8 - l4) && l8 > l4,
        "loop grows affinely: {l4} {l8} {l16}"
    );
    assert!(l4 > v4);
}

#[test]
fn in_axes_with_none_inside_a_pytree() -> qb::Result<()> {
    use qb::InAxes;
    use std::collections::BTreeMap;
    // params = {"w": unmapped [2], "x": mapped along axis 0 of [3, 2]}, scale unmapped.
    let f = |(p, s): (BTreeMap<String, Tensor>, Tensor)| p["x"].mul(&p["w"])?.sum()?.mul(&s);
    let mut p = BTreeMap::new();
    p.insert("w".to_string(), qb::array([0.5, 2.0])?);
    p.insert(
        "x".to_string(),
        qb::array([[1.0, 1.0], [2.0, 0.0], [0.0, 3.0]])?,
    );
    let spec = InAxes::Tuple(vec![
        InAxes::Dict(vec![("w".into(), None.into()), ("x".into(), 0.into())]),
        None.into(),
    ]);
    let out: Tensor = qb::vmap(f)
        .in_axes_tree(spec)
        .call(&(p.clone(), qb::array(10.0)?))?;
    assert_eq!(vals(&out), vec![25.0, 10.0, 60.0]);
    // A prefix that does not fit the structure is TF8.
    let bad = InAxes::Tuple(vec![InAxes::List(vec![0.into()]), None.into()]);
    let err = qb::vmap(f)
        .in_axes_tree(bad)
        .call::<Tensor>(&(p, qb::array(10.0)?))
        .unwrap_err();
    assert!(
        err.to_string().contains("pytree structures differ"),
        "{err}"
    );
    Ok(())
}

#[test]
fn out_axes_as_a_pytree_prefix() -> qb::Result<()> {
    use qb::InAxes;
    // Two results: the first with the batch last, the second unmapped (it ignores x).
    let f = |(x, w): (Tensor, Tensor)| Ok((qb::outer(&x, &w)?, w.sum()?));
    let xs = qb::array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])?;
    let w = qb::array([1.0, 10.0])?;
    let (o, s): (Tensor, Tensor) = qb::vmap(f)
        .in_axes(&[Some(0), None])
        .out_axes_tree(InAxes::Tuple(vec![(-1).into(), None.into()]))
        .call(&(xs, w))?;
    assert_eq!(o.shape(), &[2, 2, 3]);
    assert_eq!(
        vals(&o.index(qb::s![.., .., 1])?),
        vec![3.0, 30.0, 4.0, 40.0]
    );
    assert_eq!(s.item()?, 11.0);
    Ok(())
}

#[test]
fn hessian_caches_its_traces() -> qb::Result<()> {
    let traces = std::cell::Cell::new(0);
    let h = qb::hessian(|x: Tensor| {
        traces.set(traces.get() + 1);
        x.powi(3).sum()
    });
    let a: Tensor = h.call(&qb::array([1.0, 2.0])?)?;
    let b: Tensor = h.call(&qb::array([3.0, 4.0])?)?;
    assert_eq!(vals(&a), vec![6.0, 0.0, 0.0, 12.0]);
    assert_eq!(vals(&b), vec![18.0, 0.0, 0.0, 24.0]);
    assert_eq!(
        traces.get(),
        1,
        "the second call of the same signature reuses the trace"
    );
    Ok(())
}
