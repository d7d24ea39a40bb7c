//! The programs of the benchmark rows written as users write them
//! (`examples/support/user_programs.rs`), at small sizes and, where it is cheap, at the rows'
//! own: every derivative a row times is checked against central differences in float64, each
//! Newton step against the Newton equation with a Hessian from differences of the gradient,
//! the first Adam step of the classifier against its closed form, and the Gaussian-process
//! likelihood against a Cholesky factorization written out here. A wrong benchmark program
//! fails here before it is timed.

#[path = "../examples/support/user_programs.rs"]
#[allow(dead_code)]
mod user_programs;

use qb::Tensor;
use quabla as qb;
use user_programs::*;

/// The central-difference gradient of `f` at `x` with steps `h (1 + |x_i|)`.
fn central(f: &dyn Fn(&[f64]) -> qb::Result<f64>, x: &[f64], h: f64) -> qb::Result<Vec<f64>> {
    let mut g = Vec::with_capacity(x.len());
    for i in 0..x.len() {
        let step = h * (1.0 + x[i].abs());
        let mut up = x.to_vec();
        let mut down = x.to_vec();
        up[i] += step;
        down[i] -= step;
        g.push((f(&up)? - f(&down)?) / (2.0 * step));
    }
    Ok(g)
}

/// `|a_i - b_i| <= rtol * (|b_i| + max |b|)` for every `i`: relative to each entry, with a
/// floor at the scale of the whole vector for entries near zero.
fn assert_close(what: &str, a: &[f64], b: &[f64], rtol: f64) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            x.is_finite() && (x - y).abs() <= rtol * (y.abs() + scale),
            "{what}[{i}]: {x} against {y} (rtol {rtol})"
        );
    }
}

fn values(t: &Tensor) -> qb::Result<Vec<f64>> {
    t.to_vec::<f64>()
}

#[test]
fn the_data_stream_is_splitmix64() {
    // The published start of splitmix64 from seed 1234567.
    assert_eq!(
        splitmix64(1234567, 5),
        [
            6457827717110365317,
            3203168211198807973,
            9817491932198370423,
            4593380528125082431,
            16408922859458223821,
        ]
    );
    let u = uniform(3, 1000, -2.0, 5.0);
    assert!(u.iter().all(|v| (-2.0..5.0).contains(v)));
    let mean = u.iter().sum::<f64>() / 1000.0;
    assert!((mean - 1.5).abs() < 0.3, "{mean}");
    assert_ne!(uniform(3, 4, 0.0, 1.0), uniform(4, 4, 0.0, 1.0));
}

#[test]
fn ode_fit_gradient_matches_central_differences() -> qb::Result<()> {
    let step = qb::jit(|args: (Tensor, Tensor, Tensor)| {
        qb::value_and_grad(ode_fit_loss).call::<Tensor, (Tensor, Tensor)>(&args)
    });
    let loss = qb::jit(ode_fit_loss);
    // 40 observations is the row's own size.
    for observations in [7usize, 40] {
        let (ts, data) = ode_fit_data(observations)?;
        let (value, grad) = step.call(&(qb::array(LV_GUESS)?, ts.clone(), data.clone()))?;
        let at = |th: &[f64]| -> qb::Result<f64> {
            loss.call(&(qb::array(th.to_vec())?, ts.clone(), data.clone()))?
                .item()
        };
        assert_close("loss", &[value.item()?], &[at(&LV_GUESS)?], 1e-12);
        // The step-size controller makes the solve only piecewise smooth in the parameters:
        // differences see it at the level of the tolerances.
        let fd = central(&at, &LV_GUESS, 1e-6)?;
        assert_close(
            &format!("ode fit gradient, {observations} observations"),
            &values(&grad)?,
            &fd,
            1e-4,
        );
    }
    Ok(())
}

#[test]
fn rnn_gradient_matches_central_differences() -> qb::Result<()> {
    let (hidden, input) = (5, 3);
    let (xs, targets) = rnn_data(6, 2, input)?;
    let params = rnn_params(hidden, input)?;
    let step = qb::jit(|args: (RnnParams, Tensor, Tensor)| {
        qb::value_and_grad(rnn_loss).call::<Tensor, (Tensor, RnnParams)>(&args)
    });
    let (_, g) = step.call(&(params.clone(), xs.clone(), targets.clone()))?;
    let loss = qb::jit(rnn_loss);
    let leaves = [&params.0, &params.1, &params.2, &params.3];
    let grads = [&g.0, &g.1, &g.2, &g.3];
    for (k, (leaf, grad)) in leaves.iter().zip(grads).enumerate() {
        let at = |v: &[f64]| -> qb::Result<f64> {
            let mut p = params.clone();
            let t = Tensor::from_vec(leaf.shape(), v.to_vec())?;
            match k {
                0 => p.0 = t,
                1 => p.1 = t,
                2 => p.2 = t,
                _ => p.3 = t,
            }
            loss.call(&(p, xs.clone(), targets.clone()))?.item()
        };
        let fd = central(&at, &values(leaf)?, 1e-6)?;
        assert_close(&format!("rnn gradient {k}"), &values(grad)?, &fd, 1e-6);
    }
    Ok(())
}

/// The gradient of the logistic loss in `w`, and the Hessian from its central differences.
fn logreg_gradient_and_hessian(
    w: &[f64],
    x: &Tensor,
    y: &Tensor,
) -> qb::Result<(Vec<f64>, Vec<Vec<f64>>)> {
    let grad = qb::jit(|args: (Tensor, Tensor, Tensor)| {
        qb::grad(logreg_loss).call::<Tensor, Tensor>(&args)
    });
    let g = |w: &[f64]| -> qb::Result<Vec<f64>> {
        values(&grad.call(&(qb::array(w.to_vec())?, x.clone(), y.clone()))?)
    };
    let d = w.len();
    let mut h = vec![vec![0.0; d]; d];
    for j in 0..d {
        let step = 1e-5;
        let (mut up, mut down) = (w.to_vec(), w.to_vec());
        up[j] += step;
        down[j] -= step;
        let (gu, gd) = (g(&up)?, g(&down)?);
        for i in 0..d {
            h[i][j] = (gu[i] - gd[i]) / (2.0 * step);
        }
    }
    Ok((g(w)?, h))
}

fn mat_vec(h: &[Vec<f64>], v: &[f64]) -> Vec<f64> {
    h.iter()
        .map(|row| row.iter().zip(v).map(|(a, b)| a * b).sum())
        .collect()
}

#[test]
fn logistic_loss_gradient_and_hessian_match_differences() -> qb::Result<()> {
    let (x, y, w) = logreg_data(40, 4)?;
    let w0 = values(&w)?;
    // The loss written out on the host.
    let (xv, yv) = (values(&x)?, values(&y)?);
    let host = |w: &[f64]| -> f64 {
        let data: f64 = (0..40)
            .map(|i| {
                let z: f64 = (0..4).map(|j| xv[i * 4 + j] * w[j]).sum();
                (1.0 + z.exp()).ln() - yv[i] * z
            })
            .sum::<f64>()
            / 40.0;
        data + 0.5 * LOGREG_L2 * w.iter().map(|v| v * v).sum::<f64>()
    };
    let value = logreg_loss((w.clone(), x.clone(), y.clone()))?.item()?;
    assert_close("logistic loss", &[value], &[host(&w0)], 1e-13);
    let (g, h_fd) = logreg_gradient_and_hessian(&w0, &x, &y)?;
    let fd = central(&|w: &[f64]| Ok(host(w)), &w0, 1e-6)?;
    assert_close("logistic gradient", &g, &fd, 1e-7);
    let h: Tensor = qb::jit(|args: (Tensor, Tensor, Tensor)| {
        qb::hessian(logreg_loss).call::<Tensor, Tensor>(&args)
    })
    .call(&(w.clone(), x.clone(), y.clone()))?;
    assert_eq!(h.shape(), [4, 4]);
    assert_close("logistic hessian", &values(&h)?, &h_fd.concat(), 1e-7);
    let v = uniform(7, 4, -1.0, 1.0);
    let hv = logreg_hvp(&w, &qb::array(v.clone())?, &x, &y)?;
    assert_close(
        "hessian-vector product",
        &values(&hv)?,
        &mat_vec(&h_fd, &v),
        1e-7,
    );
    Ok(())
}

#[test]
fn newton_steps_solve_the_newton_equation() -> qb::Result<()> {
    let (x, y, w) = logreg_data(40, 4)?;
    let w0 = values(&w)?;
    let (g, h_fd) = logreg_gradient_and_hessian(&w0, &x, &y)?;
    let args = (w.clone(), x.clone(), y.clone());
    let loss = |w: &Tensor| logreg_loss((w.clone(), x.clone(), y.clone()))?.item();
    let dense = qb::jit(newton_step).call(&args)?;
    let (krylov, info) = qb::jit(newton_cg_step).call(&args)?;
    assert!(info.success.item_bool()?, "{info}");
    for (what, w1) in [("newton", &dense), ("newton-cg", &krylov)] {
        // H (w - w1) = g, with H from differences of the gradient.
        let p: Vec<f64> = w0.iter().zip(values(w1)?).map(|(a, b)| a - b).collect();
        assert_close(what, &mat_vec(&h_fd, &p), &g, 1e-6);
        assert!(loss(w1)? < loss(&w)?, "{what} raised the loss");
    }
    Ok(())
}

#[test]
fn classifier_gradient_and_first_adam_step() -> qb::Result<()> {
    use qb::optim::{Adam, Trainer};
    let batches = classifier_batches(2, 8)?;
    let params = classifier_params()?;
    let batch = batches[1].clone();
    let grad = qb::jit(|(p, x, y): (Vec<Tensor>, Tensor, Tensor)| {
        qb::value_and_grad(|p: Vec<Tensor>| classifier_loss(&p, &(x.clone(), y.clone())))
            .call::<Tensor, (Tensor, Vec<Tensor>)>(&p)
    });
    let (value, g) = grad.call(&(params.clone(), batch.0.clone(), batch.1.clone()))?;
    // Directional derivatives along three directions through all 1218 weights.
    let flat: Vec<f64> = params
        .iter()
        .map(values)
        .collect::<qb::Result<Vec<_>>>()?
        .concat();
    let g_flat: Vec<f64> = g
        .iter()
        .map(values)
        .collect::<qb::Result<Vec<_>>>()?
        .concat();
    let at = |v: &[f64]| -> qb::Result<f64> {
        let mut offset = 0;
        let mut leaves = Vec::new();
        for t in &params {
            leaves.push(Tensor::from_vec(
                t.shape(),
                v[offset..offset + t.size()].to_vec(),
            )?);
            offset += t.size();
        }
        classifier_loss(&leaves, &batch)?.item()
    };
    assert_close("classifier loss", &[value.item()?], &[at(&flat)?], 1e-13);
    for seed in 60..63 {
        let dir = uniform(seed, flat.len(), -1.0, 1.0);
        let along = |s: &[f64]| -> qb::Result<f64> {
            let moved: Vec<f64> = flat.iter().zip(&dir).map(|(p, d)| p + s[0] * d).collect();
            at(&moved)
        };
        let fd = central(&along, &[0.0], 1e-6)?;
        let exact: f64 = g_flat.iter().zip(&dir).map(|(a, b)| a * b).sum();
        assert_close("classifier directional derivative", &[exact], &fd, 1e-6);
    }
    // Adam's first step moves each weight by rate * g / (|g| + eps).
    let mut trainer = Trainer::new(
        classifier_loss,
        params.clone(),
        Adam::new(CLASSIFIER_RATE),
        batches[0].clone(),
    )
    .batch_argnums(&[0, 1])
    .build()?;
    trainer.step_with(&batch)?;
    let stepped: Vec<f64> = trainer
        .params()?
        .iter()
        .map(values)
        .collect::<qb::Result<Vec<_>>>()?
        .concat();
    let expected: Vec<f64> = flat
        .iter()
        .zip(&g_flat)
        .map(|(p, g)| p - CLASSIFIER_RATE * g / (g.abs() + 1e-8))
        .collect();
    assert_close("first Adam step", &stepped, &expected, 1e-12);
    Ok(())
}

/// The log marginal likelihood on the host: the kernel, its Cholesky factor by the textbook
/// recurrence, two triangular solves.
fn host_log_marginal_likelihood(hyper: &[f64], x: &[f64], y: &[f64]) -> f64 {
    let n = x.len();
    let (l2, s2) = ((2.0 * hyper[0]).exp(), (2.0 * hyper[1]).exp());
    let mut k = vec![vec![0.0; n]; n];
    for i in 0..n {
        for j in 0..n {
            let d = x[i] - x[j];
            k[i][j] = (-d * d / (2.0 * l2)).exp() + if i == j { s2 } else { 0.0 };
        }
    }
    let mut l = vec![vec![0.0; n]; n];
    for j in 0..n {
        let diag = k[j][j] - (0..j).map(|m| l[j][m] * l[j][m]).sum::<f64>();
        l[j][j] = diag.sqrt();
        for i in j + 1..n {
            let off = k[i][j] - (0..j).map(|m| l[i][m] * l[j][m]).sum::<f64>();
            l[i][j] = off / l[j][j];
        }
    }
    let mut z = vec![0.0; n];
    for i in 0..n {
        z[i] = (y[i] - (0..i).map(|m| l[i][m] * z[m]).sum::<f64>()) / l[i][i];
    }
    // yᵀ K⁻¹ y = |L⁻¹ y|².
    let fit: f64 = z.iter().map(|v| v * v).sum();
    let log_det: f64 = (0..n).map(|i| l[i][i].ln()).sum();
    -0.5 * fit - log_det - 0.5 * n as f64 * (2.0 * std::f64::consts::PI).ln()
}

#[test]
fn gp_likelihood_and_gradient_match_the_host() -> qb::Result<()> {
    let (x, y) = gp_data(12)?;
    let (xv, yv) = (values(&x)?, values(&y)?);
    let step = qb::jit(|args: (Tensor, Tensor, Tensor)| {
        qb::value_and_grad(gp_log_marginal_likelihood).call::<Tensor, (Tensor, Tensor)>(&args)
    });
    for hyper in [GP_GUESS, [0.5, -1.0]] {
        let (value, grad) = step.call(&(qb::array(hyper)?, x.clone(), y.clone()))?;
        let host = |h: &[f64]| Ok(host_log_marginal_likelihood(h, &xv, &yv));
        assert_close("gp likelihood", &[value.item()?], &[host(&hyper)?], 1e-10);
        let fd = central(&host, &hyper, 1e-6)?;
        assert_close("gp gradient", &values(&grad)?, &fd, 1e-6);
    }
    Ok(())
}
