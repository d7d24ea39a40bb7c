//! The programs behind the benchmark rows that are written as users write them: fitting an ODE
//! to observations, a recurrent network through `scan_over`, Newton's method for logistic
//! regression with a dense Hessian and with Hessian-vector products and `cg`, an Adam step of a
//! small classifier, and the marginal likelihood of a Gaussian process.
//!
//! `bench_workloads` times them at the sizes of their rows against their JAX twins
//! (`xtask/src/jax_bench.py`, which computes the same functions of the same numbers), and
//! `tests/user_programs.rs` checks their derivatives against central differences at small
//! sizes, so a wrong program cannot hide behind a fast time. Every input comes from
//! [`uniform`], a splitmix64 stream turned into floats with plain float64 arithmetic, which
//! the JAX script reproduces bit for bit.

use qb::linalg::SolverInfo;
use qb::ode::{odeint, Method, OdeInfo};
use qb::prelude::*;
use qb::Tensor;
use quabla as qb;

/// The first `count` outputs of splitmix64 started at `seed`.
pub fn splitmix64(seed: u64, count: usize) -> Vec<u64> {
    let mut state = seed;
    (0..count)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        })
        .collect()
}

/// `count` numbers in `[lo, hi)`: `lo + (hi - lo) * u` for the uniform `u = (z >> 11) / 2^53`
/// of each output `z` of [`splitmix64`].
pub fn uniform(seed: u64, count: usize, lo: f64, hi: f64) -> Vec<f64> {
    let scale = 1.0 / (1u64 << 53) as f64;
    splitmix64(seed, count)
        .into_iter()
        .map(|z| lo + (hi - lo) * ((z >> 11) as f64 * scale))
        .collect()
}

/// [`uniform`] as a float64 tensor of `shape`.
pub fn uniform_tensor(seed: u64, shape: &[usize], lo: f64, hi: f64) -> qb::Result<Tensor> {
    Tensor::from_vec(shape, uniform(seed, shape.iter().product(), lo, hi))
}

// ---------------------------------------------------------------------------------------------
// Fitting Lotka-Volterra to observations

/// The end of the observed interval `[0, LV_T1]`.
pub const LV_T1: f64 = 10.0;
/// The parameters the observations are made with: `[a, b, c, d]` of `x' = a x - b x y`,
/// `y' = c x y - d y`.
pub const LV_TRUE: [f64; 4] = [1.5, 1.0, 1.0, 3.0];
/// Where the loss and its gradient are evaluated.
pub const LV_GUESS: [f64; 4] = [1.2, 0.8, 1.25, 2.5];
/// The solver's tolerances, the same on the JAX side.
pub const LV_RTOL: f64 = 1e-6;
pub const LV_ATOL: f64 = 1e-9;

/// The Lotka-Volterra right-hand side with the parameters in `args[0]`.
pub fn lotka_volterra(y: &Tensor, _t: &Tensor, args: &[Tensor]) -> qb::Result<Tensor> {
    let th = &args[0];
    let (prey, predator) = (y.index(qb::s![0])?, y.index(qb::s![1])?);
    let meet = (&prey * &predator)?;
    let dprey = (th.index(qb::s![0])? * &prey)? - th.index(qb::s![1])? * &meet;
    let dpredator = (th.index(qb::s![2])? * &meet)? - th.index(qb::s![3])? * &predator;
    qb::stack(&[dprey?, dpredator?], 0)
}

/// The states `[len(ts), 2]` at the times `ts` from `y0 = [1, 1]`: dopri5 with `saveat`.
pub fn lv_trajectory(theta: &Tensor, ts: &Tensor) -> qb::Result<(Tensor, OdeInfo)> {
    odeint(lotka_volterra, &qb::array([1.0, 1.0])?, (0.0, LV_T1))
        .method(Method::Dopri5)
        .args(&[theta])
        .saveat(ts)
        .rtol(LV_RTOL)
        .atol(LV_ATOL)
        .eval_with_info()
}

/// `observations` times `LV_T1 (k + 1) / observations` and the observations there: the
/// trajectory of [`LV_TRUE`] plus a perturbation uniform in `[-0.05, 0.05)`.
pub fn ode_fit_data(observations: usize) -> qb::Result<(Tensor, Tensor)> {
    let times: Vec<f64> = (0..observations)
        .map(|k| LV_T1 * (k + 1) as f64 / observations as f64)
        .collect();
    let ts = Tensor::from_vec([observations], times)?;
    let (clean, _) = lv_trajectory(&qb::array(LV_TRUE)?, &ts)?;
    let data = (clean + uniform_tensor(1, &[observations, 2], -0.05, 0.05)?)?;
    Ok((ts, data))
}

/// The mean squared error of the trajectory of `theta` against the observations.
pub fn ode_fit_loss((theta, ts, data): (Tensor, Tensor, Tensor)) -> qb::Result<Tensor> {
    let (pred, _) = lv_trajectory(&theta, &ts)?;
    (pred - data).square()?.mean()
}

// ---------------------------------------------------------------------------------------------
// A tanh RNN through scan_over

/// The weights `(W_x [I, H], W_h [H, H], b [H], W_o [H, 1])`.
pub type RnnParams = (Tensor, Tensor, Tensor, Tensor);

/// Weights uniform in `±1/sqrt(fan_in)`, the bias in `±0.1`.
pub fn rnn_params(hidden: usize, input: usize) -> qb::Result<RnnParams> {
    let sx = 1.0 / (input as f64).sqrt();
    let sh = 1.0 / (hidden as f64).sqrt();
    Ok((
        uniform_tensor(11, &[input, hidden], -sx, sx)?,
        uniform_tensor(12, &[hidden, hidden], -sh, sh)?,
        uniform_tensor(13, &[hidden], -0.1, 0.1)?,
        uniform_tensor(14, &[hidden, 1], -sh, sh)?,
    ))
}

/// The inputs `[steps, batch, input]` and the targets `[batch, 1]`, uniform in `[-1, 1)`.
pub fn rnn_data(steps: usize, batch: usize, input: usize) -> qb::Result<(Tensor, Tensor)> {
    Ok((
        uniform_tensor(15, &[steps, batch, input], -1.0, 1.0)?,
        uniform_tensor(16, &[batch, 1], -1.0, 1.0)?,
    ))
}

/// `h_t = tanh(x_t W_x + h_{t-1} W_h + b)` from `h_0 = 0` over the steps of `xs`, then the
/// mean squared error of the readout `h_T W_o` against the targets.
pub fn rnn_loss((params, xs, targets): (RnnParams, Tensor, Tensor)) -> qb::Result<Tensor> {
    let (wx, wh, b, wo) = params;
    let (batch, hidden) = (xs.shape()[1], wh.shape()[0]);
    let step = |h: Tensor, x: Tensor, w: &[Tensor]| -> qb::Result<(Tensor, ())> {
        let h = (x.matmul(&w[0])? + h.matmul(&w[1])? + &w[2]).tanh()?;
        Ok((h, ()))
    };
    let (last, ()) = qb::scan_over(step, &qb::zeros([batch, hidden])?, &xs)
        .operands(&[wx, wh, b])
        .eval()?;
    (last.matmul(&wo)? - targets).square()?.mean()
}

// ---------------------------------------------------------------------------------------------
// Newton's method for L2-regularized logistic regression

/// The weight of the L2 term `0.5 LOGREG_L2 |w|^2`.
pub const LOGREG_L2: f64 = 1e-2;
/// The `cg` of a Newton-CG step runs this many iterations: its tolerance is below what they
/// reach, on both sides.
pub const CG_ITERATIONS: usize = 20;
pub const CG_TOL: f64 = 1e-14;

/// Features `[n, d]` uniform in `[-1, 1)`, labels `[n]` (0 or 1) drawn from the logistic model
/// of a hidden weight vector, and the weights `[d]` a step starts from.
pub fn logreg_data(n: usize, d: usize) -> qb::Result<(Tensor, Tensor, Tensor)> {
    let x = uniform(21, n * d, -1.0, 1.0);
    let hidden = uniform(22, d, -1.0, 1.0);
    let draws = uniform(23, n, 0.0, 1.0);
    let labels: Vec<f64> = (0..n)
        .map(|i| {
            let z = (0..d).fold(0.0, |acc, j| acc + x[i * d + j] * hidden[j]);
            let p = 1.0 / (1.0 + (-z).exp());
            if draws[i] < p {
                1.0
            } else {
                0.0
            }
        })
        .collect();
    Ok((
        Tensor::from_vec([n, d], x)?,
        Tensor::from_vec([n], labels)?,
        uniform_tensor(24, &[d], -0.1, 0.1)?,
    ))
}

/// `mean(softplus(z) - y z) + 0.5 LOGREG_L2 |w|^2` with `z = x w`, the softplus in its
/// overflow-free form `max(z, 0) + log1p(exp(-|z|))`.
pub fn logreg_loss((w, x, y): (Tensor, Tensor, Tensor)) -> qb::Result<Tensor> {
    let z = x.matmul(&w)?;
    let softplus = (z.relu()? + z.abs()?.neg()?.exp()?.log1p()?)?;
    let data = (softplus - (&y * &z)?)?.mean()?;
    data + w.square()?.sum()?.mul(0.5 * LOGREG_L2)?
}

/// One Newton step `w - solve(H, g)` with the gradient and the dense Hessian of the loss.
pub fn newton_step((w, x, y): (Tensor, Tensor, Tensor)) -> qb::Result<Tensor> {
    let args = (w.clone(), x, y);
    let g: Tensor = qb::grad(logreg_loss).call(&args)?;
    let h: Tensor = qb::hessian(logreg_loss).call::<Tensor, Tensor>(&args)?;
    w - qb::linalg::solve(&h, &g)?
}

/// The Hessian-vector product `H(w) v` as the forward derivative of the gradient along `v`.
pub fn logreg_hvp(w: &Tensor, v: &Tensor, x: &Tensor, y: &Tensor) -> qb::Result<Tensor> {
    let gradient = |w: Tensor| -> qb::Result<Tensor> {
        qb::grad(logreg_loss).call(&(w, x.clone(), y.clone()))
    };
    let (_, hv): (Tensor, Tensor) = qb::jvp(gradient, w, v)?;
    Ok(hv)
}

/// One Newton-CG step: `w - p` where `cg` solves `H p = g` with [`logreg_hvp`] in
/// [`CG_ITERATIONS`] iterations; with the solver's report.
pub fn newton_cg_step((w, x, y): (Tensor, Tensor, Tensor)) -> qb::Result<(Tensor, SolverInfo)> {
    let g: Tensor = qb::grad(logreg_loss).call(&(w.clone(), x.clone(), y.clone()))?;
    let hvp = |v: &Tensor, a: &[Tensor]| logreg_hvp(&a[0], v, &a[1], &a[2]);
    let (p, info) = qb::linalg::cg(hvp, &g)
        .args(&[&w, &x, &y])
        .tol(CG_TOL)
        .maxiter(CG_ITERATIONS)
        .eval_with_info()?;
    Ok(((w - p)?, info))
}

// ---------------------------------------------------------------------------------------------
// A 2-32-32-2 classifier trained with Adam on minibatches

/// The layer widths.
pub const CLASSIFIER_SIZES: [usize; 4] = [2, 32, 32, 2];
/// Adam's learning rate (b1, b2 and eps are the defaults, 0.9, 0.999, 1e-8).
pub const CLASSIFIER_RATE: f64 = 1e-3;

/// `[W1, b1, W2, b2, W3, b3]`: weights uniform in `±sqrt(6 / (fan_in + fan_out))`, biases 0.
pub fn classifier_params() -> qb::Result<Vec<Tensor>> {
    let mut params = Vec::new();
    for (k, pair) in CLASSIFIER_SIZES.windows(2).enumerate() {
        let (fan_in, fan_out) = (pair[0], pair[1]);
        let s = (6.0 / (fan_in + fan_out) as f64).sqrt();
        params.push(uniform_tensor(31 + k as u64, &[fan_in, fan_out], -s, s)?);
        params.push(qb::zeros([fan_out])?);
    }
    Ok(params)
}

/// `count` minibatches of `batch` points uniform in `[-1, 1)^2`, labelled 1 where both
/// coordinates have the same sign (int64).
pub fn classifier_batches(count: usize, batch: usize) -> qb::Result<Vec<(Tensor, Tensor)>> {
    let points = uniform(41, count * batch * 2, -1.0, 1.0);
    points
        .chunks(batch * 2)
        .map(|chunk| {
            let labels: Vec<i64> = chunk
                .chunks(2)
                .map(|p| i64::from(p[0] * p[1] > 0.0))
                .collect();
            Ok((
                Tensor::from_vec([batch, 2], chunk.to_vec())?,
                qb::array(labels)?,
            ))
        })
        .collect()
}

/// The mean softmax cross-entropy of the relu network's logits at the integer labels.
// `&Vec`: a `Trainer` of `Vec<Tensor>` parameters calls its loss with `&Vec<Tensor>`.
#[allow(clippy::ptr_arg)]
pub fn classifier_loss(params: &Vec<Tensor>, (x, labels): &(Tensor, Tensor)) -> qb::Result<Tensor> {
    let mut h = x.clone();
    for (k, layer) in params.chunks(2).enumerate() {
        h = (h.matmul(&layer[0])? + &layer[1])?;
        if 2 * (k + 1) < params.len() {
            h = h.relu()?;
        }
    }
    let logp = qb::log_softmax(h, 1)?;
    qb::take_along_axis(&logp, &labels.reshape([-1, 1])?, 1)?
        .mean()?
        .neg()
}

// ---------------------------------------------------------------------------------------------
// The log marginal likelihood of a Gaussian process

/// Where the likelihood and its gradient are evaluated: `[log lengthscale, log noise]` =
/// `[ln 1, ln 0.1]`.
pub const GP_GUESS: [f64; 2] = [0.0, -2.3025850929940455];

/// Inputs `[n]` uniform in `[0, 10)` and targets `sin(x)` plus noise uniform in `±0.1`.
pub fn gp_data(n: usize) -> qb::Result<(Tensor, Tensor)> {
    let x = uniform(51, n, 0.0, 10.0);
    let noise = uniform(52, n, -0.1, 0.1);
    let y: Vec<f64> = x.iter().zip(&noise).map(|(x, e)| x.sin() + e).collect();
    Ok((Tensor::from_vec([n], x)?, Tensor::from_vec([n], y)?))
}

/// `log p(y | x) = -yᵀ K⁻¹ y / 2 - log det K / 2 - n log(2π) / 2` for the RBF kernel
/// `K = exp(-(x_i - x_j)² / (2 l²)) + σ² I` with `[log l, log σ]` = `log_hyper`, through the
/// Cholesky factor: `cho_solve` for `K⁻¹ y`, the sum of the logs of its diagonal for half the
/// log-determinant.
pub fn gp_log_marginal_likelihood(
    (log_hyper, x, y): (Tensor, Tensor, Tensor),
) -> qb::Result<Tensor> {
    let n = x.shape()[0];
    let lengthscale = log_hyper.index(qb::s![0])?.exp()?;
    let noise = log_hyper.index(qb::s![1])?.exp()?;
    let diff = (x.reshape([-1, 1])? - x.reshape([1, -1])?)?;
    let scaled = (diff.square()? / lengthscale.square()?.mul(-2.0)?)?;
    let k = (scaled.exp()? + qb::eye(n)?.mul(&noise.square()?)?)?;
    let l = qb::linalg::cholesky(&k)?;
    let alpha = qb::linalg::cho_solve(&l, &y).eval()?;
    let fit = (&y * &alpha)?.sum()?.mul(-0.5)?;
    let log_det = l.diagonal()?.log()?.sum()?;
    let constant = 0.5 * n as f64 * (2.0 * std::f64::consts::PI).ln();
    (fit - log_det)?.sub(constant)
}
