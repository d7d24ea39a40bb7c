//! The PINN of acceptance §13 (the network and loss of `quabla/examples/pinn.rs`) trained by a
//! `Trainer` on CUDA in float32, and the same step in JAX on the GPU (`jax_pinn.py`, run with
//! the machine's Python): time per Adam step with the parameters, moments and data resident.

use crate::bench::PinnResult;
use crate::Options;
use qb::optim::{self, Trainer};
use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::collections::BTreeMap;
use std::f64::consts::PI;
use std::process::Command;
use std::time::Instant;

type Params = Vec<BTreeMap<String, Tensor>>;
type Data = (Tensor, Tensor);

const SIZES: [usize; 4] = [1, 16, 16, 1];

fn init() -> qb::Result<Params> {
    let keys = qb::random::split(&qb::random::key(0), SIZES.len() - 1)?;
    keys.iter()
        .zip(SIZES.windows(2))
        .map(|(k, mn)| {
            Ok(BTreeMap::from([
                (
                    "w".to_string(),
                    qb::random::glorot_normal(k, [mn[0], mn[1]])
                        .eval()?
                        .astype(qb::F32)?,
                ),
                ("b".to_string(), qb::zeros([mn[1]])?.astype(qb::F32)?),
            ]))
        })
        .collect()
}

fn u(params: &Params, x: &Tensor) -> qb::Result<Tensor> {
    let mut h = x.reshape([1, 1])?;
    for (i, layer) in params.iter().enumerate() {
        h = (h.matmul(&layer["w"])? + &layer["b"])?;
        if i + 1 < params.len() {
            h = h.tanh()?;
        }
    }
    h.reshape([] as [isize; 0])
}

fn loss(params: &Params, data: &Data) -> qb::Result<Tensor> {
    let (xi, xb) = data;
    let u_xx: Tensor = qb::vmap(|t: Tensor| {
        qb::grad(|s: Tensor| qb::grad(|r: Tensor| u(params, &r)).call::<Tensor, Tensor>(&s))
            .call::<Tensor, Tensor>(&t)
    })
    .call(xi)?;
    let residual = (u_xx + xi.mul(PI)?.sin()?.mul(PI * PI)?)?;
    let boundary: Tensor = qb::vmap(|t: Tensor| u(params, &t)).call(xb)?;
    residual.powi(2).mean()? + boundary.powi(2).mean()?
}

fn data() -> qb::Result<Data> {
    Ok((
        qb::linspace(0.0, 1.0, 34)?
            .index(qb::s![1..33])?
            .astype(qb::F32)?,
        qb::array([0.0, 1.0])?.astype(qb::F32)?,
    ))
}

/// Seconds per step of our Trainer on CUDA.
fn ours(steps: usize) -> Result<f64, String> {
    ours_steps(steps)
        .map_err(|e| e.to_string())
        .and_then(|(seconds, value)| {
            if value.is_finite() {
                Ok(seconds)
            } else {
                Err(format!("the PINN loss is {value}"))
            }
        })
}

/// Seconds per step and the final loss.
fn ours_steps(steps: usize) -> qb::Result<(f64, f64)> {
    let opt = optim::Adam::new(optim::exponential_decay(1e-2, 1000, 0.5));
    let mut trainer = Trainer::new(loss, init()?, opt, data()?)
        .device("cuda")
        .build()?;
    for _ in 0..10 {
        trainer.step()?;
    }
    trainer.loss()?;
    let started = Instant::now();
    for _ in 0..steps {
        trainer.step()?;
    }
    // Reading the loss waits for every queued step.
    let value = trainer.loss()?.item()?;
    Ok((started.elapsed().as_secs_f64() / steps as f64, value))
}

/// Runs `jax_pinn.py`: `(seconds per step, note)`.
fn jax(o: &Options, steps: usize) -> Result<(f64, String), String> {
    let script = o.jax_script.as_ref().ok_or("no JAX script")?;
    let python = std::env::var("QUABLA_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .arg(script)
        .args(["--steps", &steps.to_string()])
        .output()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or("no JSON line")?;
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let step = v["step_seconds"].as_f64().ok_or("no step_seconds")?;
    let note = format!(
        "JAX {} on {}",
        v["jax_version"].as_str().unwrap_or("?"),
        v["device"].as_str().unwrap_or("?")
    );
    Ok((step, note))
}

pub fn compare(o: &Options) -> Result<PinnResult, String> {
    let steps = if o.quick { 200 } else { 2000 };
    let ours_step_s = ours(steps)?;
    let (jax_step_s, jax_note) = match jax(o, steps) {
        Ok((s, note)) => (Some(s), note),
        Err(e) => (None, e),
    };
    Ok(PinnResult {
        ours_step_s,
        jax_step_s,
        jax_note,
    })
}
