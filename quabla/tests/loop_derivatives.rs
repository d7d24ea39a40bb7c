//! Loop derivatives of every order and mode (docs/loops.md): a derivative of a loop region is a
//! loop region, so every composition of `jvp` and `grad` up to third order goes through
//! `fori_loop`, `scan` and `while_loop` (reverse mode of `while_loop` with `max_trips`). Each
//! entry of the table is checked against the same composition on the loop unrolled in Rust and
//! against central differences in float64 of the unrolled second derivative.

use qb::Tensor;
use quabla as qb;
use std::rc::Rc;

type Scalar = Rc<dyn Fn(Tensor) -> qb::Result<Tensor>>;

const TRIPS: usize = 12;

fn step(x: &Tensor, a: &Tensor) -> qb::Result<Tensor> {
    (x * a)?.sin()?.add(&x.mul(0.5)?)
}

fn x0() -> qb::Result<Tensor> {
    qb::array([0.3, 0.7])
}

/// `sum(x^2)` after `TRIPS` steps of a `while_loop` whose carry is `[k, x0, x1]` (the trip
/// count depends on the carry only), bounded by `max_trips` when given.
fn counted_while(a: Tensor, max_trips: Option<usize>) -> qb::Result<Tensor> {
    let init = qb::array([0.0, 0.3, 0.7])?;
    let looped = qb::while_loop(
        |c, _| c.index(qb::s![0])?.less(TRIPS as f64),
        |c, ops| {
            let k = c.index(qb::s![0..1])?.add(1.0)?;
            let x = step(&c.index(qb::s![1..3])?, &ops[0])?;
            qb::concat(&[&k, &x], 0)
        },
        &init,
    )
    .operands(&[&a]);
    let out = match max_trips {
        Some(n) => looped.max_trips(n).eval()?,
        None => looped.eval()?,
    };
    out.index(qb::s![1..3])?.powi(2)?.sum()
}

/// The loops of the table, each a function of the scalar `a`, with its unrolled twin.
fn loops() -> Vec<(&'static str, Scalar, Scalar)> {
    let fori: Scalar = Rc::new(|a: Tensor| {
        qb::fori_loop(0, TRIPS, |_, x, ops| step(&x, &ops[0]), &x0()?)
            .operands(&[&a])
            .eval()?
            .powi(2)?
            .sum()
    });
    let scan: Scalar = Rc::new(|a: Tensor| {
        let (c, ys) = qb::scan(
            |c, _, ops| {
                let c = step(&c, &ops[0])?;
                let y = c.cos()?;
                Ok((c, y))
            },
            &x0()?,
            TRIPS,
        )
        .operands(&[&a])
        .eval()?;
        c.sum()?.add(&ys.powi(2)?.sum()?)
    });
    let while_: Scalar = Rc::new(|a: Tensor| counted_while(a, Some(2 * TRIPS)));
    let unrolled_sq: Scalar = Rc::new(|a: Tensor| {
        let mut x = x0()?;
        for _ in 0..TRIPS {
            x = step(&x, &a)?;
        }
        x.powi(2)?.sum()
    });
    let unrolled_scan: Scalar = Rc::new(|a: Tensor| {
        let mut x = x0()?;
        let mut ys = qb::array(0.0)?;
        for _ in 0..TRIPS {
            x = step(&x, &a)?;
            ys = ys.add(&x.cos()?.powi(2)?.sum()?)?;
        }
        x.sum()?.add(&ys)
    });
    vec![
        ("fori_loop", fori, unrolled_sq.clone()),
        ("scan", scan, unrolled_scan),
        ("while_loop", while_, unrolled_sq),
    ]
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Forward,
    Reverse,
}

fn derivative(f: Scalar, mode: Mode) -> Scalar {
    Rc::new(move |a: Tensor| match mode {
        Mode::Forward => Ok(qb::jvp(|a: Tensor| f(a), &a, &qb::ones_like(&a)?)?.1),
        Mode::Reverse => qb::grad(|a: Tensor| f(a)).call(&a),
    })
}

fn compose(f: Scalar, modes: &[Mode]) -> Scalar {
    // The innermost derivative is the last mode, as in `jvp∘grad∘grad`.
    modes.iter().rev().fold(f, |f, m| derivative(f, *m))
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + b.abs())
}

fn value(f: &Scalar, a: f64) -> qb::Result<f64> {
    f(qb::array(a)?)?.item()
}

#[test]
fn every_mode_composition_to_third_order_matches_the_unrolled_loop_and_differences(
) -> qb::Result<()> {
    use Mode::{Forward as F, Reverse as R};
    let a = 0.8;
    for (name, looped, unrolled) in loops() {
        for order in 1..=3usize {
            for bits in 0..(1u32 << order) {
                let modes: Vec<Mode> = (0..order)
                    .map(|k| if bits >> k & 1 == 1 { R } else { F })
                    .collect();
                let got = value(&compose(looped.clone(), &modes), a)?;
                let want = value(&compose(unrolled.clone(), &modes), a)?;
                assert!(
                    close(got, want, 1e-11),
                    "{name} {modes:?}: loop {got} vs unrolled {want}"
                );
                // Central differences of the derivative one order lower, in float64.
                let lower = compose(unrolled.clone(), &modes[1..]);
                let h = 1e-5;
                let fd = (value(&lower, a + h)? - value(&lower, a - h)?) / (2.0 * h);
                assert!(
                    close(got, fd, 1e-6),
                    "{name} {modes:?}: {got} vs differences {fd}"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn an_unbounded_while_loop_has_every_forward_mode_order() -> qb::Result<()> {
    use Mode::Forward as F;
    // Without `max_trips` a while loop has forward mode only; to third order it is a loop.
    let while_: Scalar = Rc::new(|a: Tensor| counted_while(a, None));
    let unrolled = loops().remove(0).2;
    for order in 1..=3 {
        let modes = vec![F; order];
        let got = value(&compose(while_.clone(), &modes), 0.8)?;
        let want = value(&compose(unrolled.clone(), &modes), 0.8)?;
        assert!(close(got, want, 1e-11), "order {order}: {got} vs {want}");
    }
    // Reverse mode still names the bound that would allow it.
    let err = value(&compose(while_, &[Mode::Reverse]), 0.8).unwrap_err();
    assert!(err.to_string().contains("max_trips(n)"), "{err}");
    Ok(())
}

#[test]
fn jitted_third_derivatives_equal_the_eager_ones() -> qb::Result<()> {
    use Mode::{Forward as F, Reverse as R};
    for (name, looped, _) in loops() {
        for modes in [[F, F, F], [R, R, R], [F, R, R]] {
            let d = compose(looped.clone(), &modes);
            let eager = value(&d, 0.6)?;
            let jitted: Tensor = qb::jit(|a: Tensor| d(a)).call(&qb::array(0.6)?)?;
            assert_eq!(
                jitted.item()?.to_bits(),
                eager.to_bits(),
                "{name} {modes:?}"
            );
        }
    }
    Ok(())
}

/// `g(x) = sum(loop(x)^2)` for a vector start `x`, looped and unrolled.
fn vector_loop(x: &Tensor, unrolled: bool) -> qb::Result<Tensor> {
    let a = qb::array(0.9)?;
    let out = if unrolled {
        let mut x = x.clone();
        for _ in 0..TRIPS {
            x = step(&x, &a)?;
        }
        x
    } else {
        qb::fori_loop(0, TRIPS, |_, x, ops| step(&x, &ops[0]), x)
            .operands(&[&a])
            .eval()?
    };
    out.powi(2)?.sum()
}

#[test]
fn hessian_of_a_loop_inside_vmap_matches_the_unrolled_hessians() -> qb::Result<()> {
    let batch = qb::array([[0.3, 0.7], [-0.2, 0.4], [1.1, -0.5]])?;
    let hs: Tensor = qb::vmap(|x: Tensor| {
        qb::hessian(|x: Tensor| vector_loop(&x, false)).call::<Tensor, Tensor>(&x)
    })
    .call(&batch)?;
    assert_eq!(hs.shape(), &[3, 2, 2]);
    for k in 0..3 {
        let x = batch.index(qb::s![k])?;
        let want: Tensor =
            qb::hessian(|x: Tensor| vector_loop(&x, true)).call::<Tensor, Tensor>(&x)?;
        let got = hs.index(qb::s![k])?.to_vec::<f64>()?;
        for (g, w) in got.iter().zip(want.to_vec::<f64>()?) {
            assert!(close(*g, w, 1e-11), "example {k}: {got:?} vs {w}");
        }
    }
    // A third derivative under vmap: the directional derivative of the hessian.
    let t: Tensor = qb::vmap(|x: Tensor| {
        let h = |x: Tensor| qb::hessian(|x: Tensor| vector_loop(&x, false)).call(&x);
        Ok(qb::jvp(h, &x, &qb::ones_like(&x)?)?.1)
    })
    .call(&batch)?;
    let x = batch.index(qb::s![1])?;
    let h = |x: Tensor| qb::hessian(|x: Tensor| vector_loop(&x, true)).call(&x);
    let want: Tensor = qb::jvp(h, &x, &qb::ones_like(&x)?)?.1;
    for (g, w) in t
        .index(qb::s![1])?
        .to_vec::<f64>()?
        .iter()
        .zip(want.to_vec::<f64>()?)
    {
        assert!(close(*g, w, 1e-10), "{g} vs {w}");
    }
    Ok(())
}

/// `sum(x^2)` after `stop` steps (a float operand, so it can be mapped) of a `while_loop`
/// bounded by `max_trips`, whose carry is `[k, x0, x1]`.
fn stopped_while(a: &Tensor, stop: &Tensor, max_trips: usize) -> qb::Result<Tensor> {
    let init = qb::array([0.0, 0.3, 0.7])?;
    qb::while_loop(
        |c, ops| c.index(qb::s![0])?.less(&ops[1]),
        |c, ops| {
            let k = c.index(qb::s![0..1])?.add(1.0)?;
            let x = step(&c.index(qb::s![1..3])?, &ops[0])?;
            qb::concat(&[&k, &x], 0)
        },
        &init,
    )
    .operands(&[a, stop])
    .max_trips(max_trips)
    .eval()?
    .index(qb::s![1..3])?
    .powi(2)?
    .sum()
}

/// `sum(x^2)` after `trips` steps, unrolled.
fn unrolled_steps(a: &Tensor, trips: usize) -> qb::Result<Tensor> {
    let mut x = x0()?;
    for _ in 0..trips {
        x = step(&x, a)?;
    }
    x.powi(2)?.sum()
}

#[test]
fn a_bounded_while_loop_has_one_gradient_for_every_bound() -> qb::Result<()> {
    // Reverse mode walks back over the trips taken with a layout chosen from them at run
    // time: the bound changes neither the bits nor (up to a constant) the cost, and
    // `usize::MAX` is a bound like any other.
    let a = qb::array(0.8)?;
    for trips in [0usize, 1, 5, TRIPS] {
        let stop = qb::array(trips as f64)?;
        let want: Tensor = qb::grad(|a: Tensor| unrolled_steps(&a, trips)).call(&a)?;
        let want = want.item()?;
        let h = 1e-6;
        let fd = (unrolled_steps(&qb::array(0.8 + h)?, trips)?.item()?
            - unrolled_steps(&qb::array(0.8 - h)?, trips)?.item()?)
            / (2.0 * h);
        let mut seen: Vec<(usize, u64)> = Vec::new();
        for bound in [trips.max(1), 1 << 20, 1 << 44, usize::MAX] {
            let g = |a: Tensor| stopped_while(&a, &stop, bound);
            let eager: Tensor = qb::grad(g).call(&a)?;
            let jitted: Tensor =
                qb::jit(|a: Tensor| qb::grad(g).call::<Tensor, Tensor>(&a)).call(&a)?;
            let (e, j) = (eager.item()?, jitted.item()?);
            assert_eq!(
                e.to_bits(),
                j.to_bits(),
                "{trips} trips, bound {bound}: jit"
            );
            assert!(
                close(e, want, 1e-12),
                "{trips} trips, bound {bound}: {e} vs {want}"
            );
            assert!(
                close(e, fd, 1e-7),
                "{trips} trips, bound {bound}: {e} vs {fd}"
            );
            seen.push((bound, e.to_bits()));
        }
        assert!(
            seen.iter().all(|s| s.1 == seen[0].1),
            "{trips} trips: the gradient depends on the bound: {seen:?}"
        );
    }
    Ok(())
}

#[test]
fn second_derivatives_and_vmap_through_the_widest_bound() -> qb::Result<()> {
    use Mode::{Forward as F, Reverse as R};
    let stop = qb::array(TRIPS as f64)?;
    let looped: Scalar = {
        let stop = stop.clone();
        Rc::new(move |a: Tensor| stopped_while(&a, &stop, usize::MAX))
    };
    let unrolled: Scalar = Rc::new(|a: Tensor| unrolled_steps(&a, TRIPS));
    for modes in [[R, R], [F, R], [R, F]] {
        let got = value(&compose(looped.clone(), &modes), 0.8)?;
        let want = value(&compose(unrolled.clone(), &modes), 0.8)?;
        assert!(close(got, want, 1e-11), "{modes:?}: {got} vs {want}");
    }
    // Per-example trip counts under vmap: each example's gradient is its own loop's.
    let stops = qb::array([3.0, 0.0, 7.0, 12.0])?;
    let a = qb::array(0.8)?;
    let grads: Tensor = qb::vmap(|stop: Tensor| {
        qb::grad(|a: Tensor| stopped_while(&a, &stop, usize::MAX)).call::<Tensor, Tensor>(&a)
    })
    .call(&stops)?;
    for (k, trips) in [3usize, 0, 7, 12].into_iter().enumerate() {
        let want: Tensor = qb::grad(|a: Tensor| unrolled_steps(&a, trips)).call(&a)?;
        let got = grads.index(qb::s![k])?.item()?;
        assert!(close(got, want.item()?, 1e-12), "example {k}: {got}");
    }
    Ok(())
}
