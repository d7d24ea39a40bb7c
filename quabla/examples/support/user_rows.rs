//! The rows of `bench_workloads` for the programs of `user_programs.rs`, at the sizes their
//! names give: each jitted as a user jits it, run once (that result is printed on a `check=`
//! line, which xtask compares with the JAX side's), then timed in the steady state.

use super::user_programs::*;
use super::{median_seconds, Only};
use qb::Tensor;
use quabla as qb;
use std::time::Instant;

/// Prints `check=<row> tol=<tol> <key>=<value>...`, which xtask compares with the JAX line of
/// the same row (relative differences up to `tol`). A tensor of at most 8 elements gives
/// `<key>` (one element) or `<key>0`, `<key>1`, ...; a larger one `<key>_sum` and `<key>_sq`,
/// its sum and its sum of squares. The JAX script writes its line by the same rule.
fn check(row: &str, tol: f64, values: &[(&str, &Tensor)]) -> qb::Result<()> {
    let mut line = format!("check={row} tol={tol:e}");
    for (key, tensor) in values {
        let v = tensor.astype(qb::F64)?.to_vec::<f64>()?;
        match v.len() {
            1 => line.push_str(&format!(" {key}={:e}", v[0])),
            2..=8 => {
                for (i, x) in v.iter().enumerate() {
                    line.push_str(&format!(" {key}{i}={x:e}"));
                }
            }
            _ => {
                let sum: f64 = v.iter().sum();
                let sq: f64 = v.iter().map(|x| x * x).sum();
                line.push_str(&format!(" {key}_sum={sum:e} {key}_sq={sq:e}"));
            }
        }
    }
    println!("{line}");
    Ok(())
}

pub fn run(only: &Only) -> qb::Result<()> {
    ode_fit(only)?;
    rnn(only)?;
    newton(only)?;
    classifier(only)?;
    gp(only)
}

/// `ode_fit_lv_obs40`, `ode_fit_lv_obs200`: `jit(value_and_grad(loss))` of the Lotka-Volterra
/// fit, the gradient with respect to the 4 parameters.
fn ode_fit(only: &Only) -> qb::Result<()> {
    for observations in [40usize, 200] {
        let name = format!("ode_fit_lv_obs{observations}");
        if !only.wants(&name) {
            continue;
        }
        let (ts, data) = ode_fit_data(observations)?;
        let args = (qb::array(LV_GUESS)?, ts, data);
        let step = qb::jit(|args: (Tensor, Tensor, Tensor)| {
            qb::value_and_grad(ode_fit_loss).call::<Tensor, (Tensor, Tensor)>(&args)
        });
        let (value, grad) = step.call(&args)?;
        // Two solvers with the same tolerances but their own step-size controllers.
        check(&name, 1e-4, &[("value", &value), ("grad", &grad)])?;
        let t = median_seconds(15, || Ok(step.call(&args)?.0))?;
        println!("workload={name} seconds={t:e}");
        let solve = qb::jit(|(th, ts): (Tensor, Tensor)| Ok(lv_trajectory(&th, &ts)?.1));
        let info = solve.call(&(args.0.clone(), args.1.clone()))?;
        println!(
            "note: {name} takes {} accepted and {} rejected steps (dopri5, rtol {LV_RTOL:e}, atol {LV_ATOL:e}, saveat {observations} times; the traced solve is a loop of max_steps = 512 trips)",
            info.accepted_steps.item()?,
            info.rejected_steps.item()?
        );
    }
    Ok(())
}

/// `rnn_scan_h64_t100`: value and gradient in every weight of the tanh RNN through
/// `scan_over`, hidden 64, input 8, 100 steps, batch 16.
fn rnn(only: &Only) -> qb::Result<()> {
    let name = "rnn_scan_h64_t100";
    if !only.wants(name) {
        return Ok(());
    }
    let (xs, targets) = rnn_data(100, 16, 8)?;
    let args = (rnn_params(64, 8)?, xs, targets);
    let step = qb::jit(|args: (RnnParams, Tensor, Tensor)| {
        qb::value_and_grad(rnn_loss).call::<Tensor, (Tensor, RnnParams)>(&args)
    });
    let (value, g) = step.call(&args)?;
    check(
        name,
        1e-9,
        &[
            ("value", &value),
            ("grad_wx", &g.0),
            ("grad_wh", &g.1),
            ("grad_b", &g.2),
            ("grad_wo", &g.3),
        ],
    )?;
    let t = median_seconds(15, || Ok(step.call(&args)?.0))?;
    println!("workload={name} seconds={t:e}");
    Ok(())
}

/// `newton_logreg_d50` (gradient, dense `hessian`, `solve`) and `newton_cg_logreg_d200`
/// (gradient, Hessian-vector products by `jvp` of the gradient, `cg`): one jitted Newton step
/// of logistic regression on 1000 examples.
fn newton(only: &Only) -> qb::Result<()> {
    if only.wants("newton_logreg_d50") {
        let (x, y, w) = logreg_data(1000, 50)?;
        let args = (w, x, y);
        let step = qb::jit(newton_step);
        let w1 = step.call(&args)?;
        check("newton_logreg_d50", 1e-9, &[("w", &w1)])?;
        let t = median_seconds(15, || step.call(&args))?;
        println!("workload=newton_logreg_d50 seconds={t:e}");
    }
    if only.wants("newton_cg_logreg_d200") {
        let (x, y, w) = logreg_data(1000, 200)?;
        let args = (w, x, y);
        let step = qb::jit(newton_cg_step);
        let (w1, info) = step.call(&args)?;
        check("newton_cg_logreg_d200", 1e-9, &[("w", &w1)])?;
        let t = median_seconds(15, || Ok(step.call(&args)?.0))?;
        println!("workload=newton_cg_logreg_d200 seconds={t:e}");
        println!(
            "note: newton_cg_logreg_d200 runs {} cg iterations (maxiter {CG_ITERATIONS}, tol {CG_TOL:e}, on both sides), final residual norm {:e}",
            info.iterations.item()?,
            info.residual_norm.item()?
        );
    }
    Ok(())
}

/// `mlp_classifier_b64`: a `Trainer` step (Adam) of the 2-32-32-2 classifier on a new
/// minibatch of 64 each step (`step_with`), per step over 200 steps through 8 minibatches.
fn classifier(only: &Only) -> qb::Result<()> {
    use qb::optim::{Adam, Trainer};
    let name = "mlp_classifier_b64";
    if !only.wants(name) {
        return Ok(());
    }
    let batches = classifier_batches(8, 64)?;
    let build = || {
        Trainer::new(
            classifier_loss,
            classifier_params()?,
            Adam::new(CLASSIFIER_RATE),
            batches[0].clone(),
        )
        .batch_argnums(&[0, 1])
        .build()
    };
    // The check: one pass over the 8 minibatches from the initial weights.
    let mut trainer = build()?;
    let mut first = None;
    for batch in &batches {
        trainer.step_with(batch)?;
        first = first.or(trainer.last_loss()?);
    }
    let first = first.expect("a step has a loss");
    let last = trainer.last_loss()?.expect("a step has a loss");
    let params = trainer.params()?;
    check(
        name,
        1e-9,
        &[
            ("first_loss", &first),
            ("last_loss", &last),
            ("w1", &params[0]),
            ("w3", &params[4]),
        ],
    )?;
    let mut trainer = build()?;
    trainer.step_with(&batches[0])?;
    let mut runs = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        for k in 0..200 {
            trainer.step_with(&batches[k % batches.len()])?;
        }
        std::hint::black_box(trainer.last_loss()?);
        runs.push(start.elapsed().as_secs_f64() / 200.0);
    }
    runs.sort_by(f64::total_cmp);
    println!("workload={name} seconds={:e}", runs[runs.len() / 2]);
    Ok(())
}

/// `gp_mll_grad_n200`: value and gradient of the Gaussian-process log marginal likelihood in
/// its two log-hyperparameters, 200 points, float64.
fn gp(only: &Only) -> qb::Result<()> {
    let name = "gp_mll_grad_n200";
    if !only.wants(name) {
        return Ok(());
    }
    let (x, y) = gp_data(200)?;
    let args = (qb::array(GP_GUESS)?, x, y);
    let step = qb::jit(|args: (Tensor, Tensor, Tensor)| {
        qb::value_and_grad(gp_log_marginal_likelihood).call::<Tensor, (Tensor, Tensor)>(&args)
    });
    let (value, grad) = step.call(&args)?;
    check(name, 1e-8, &[("value", &value), ("grad", &grad)])?;
    let t = median_seconds(15, || Ok(step.call(&args)?.0))?;
    println!("workload={name} seconds={t:e}");
    Ok(())
}
