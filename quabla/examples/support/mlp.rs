//! The tanh MLP of the `mlp_value_and_grad_1024x64` bench row, shared by `bench_workloads` and
//! `profile_step`: deterministic parameters of a 1-`width`-`width`-1 network and its mean
//! squared error.

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;

/// Weights and biases of a 1-`width`-`width`-1 network, deterministic; the hidden and output
/// weights are scaled by `scale`.
pub fn mlp_params(width: usize, scale: f64) -> qb::Result<Vec<Tensor>> {
    let init = |rows: usize, cols: usize, seed: f64| -> qb::Result<Tensor> {
        qb::linspace(-1.0, 1.0, rows * cols)?
            .mul(seed)?
            .sin()?
            .reshape([rows as isize, cols as isize])
    };
    Ok(vec![
        init(1, width, 1.3)?,
        qb::zeros([width])?,
        init(width, width, 2.1)?.mul(scale)?,
        qb::zeros([width])?,
        init(width, 1, 0.7)?.mul(scale)?,
        qb::zeros([1])?,
    ])
}

/// Mean squared error of the MLP.
pub fn mlp_loss((p, x, y): (Vec<Tensor>, Tensor, Tensor)) -> qb::Result<Tensor> {
    let h = x.matmul(&p[0]).add(&p[1]).tanh()?;
    let h = h.matmul(&p[2]).add(&p[3]).tanh()?;
    let out = h.matmul(&p[4]).add(&p[5])?;
    (out - &y).powi(2).mean()
}
