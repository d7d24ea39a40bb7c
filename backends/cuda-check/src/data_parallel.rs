//! Data parallelism on the GPU: `qb::distributed::value_and_grad(..).devices(..)` with NCCL,
//! on `cuda:0` alone (NCCL with one rank) and, on a machine with several GPUs, on all of them
//! (up to 8), each against the CPU's full-batch value and gradient at the float32 tolerance
//! (`1e-5 + 1e-5·|cpu|`).

use qb::distributed;
use qb::Tensor;
use quabla as qb;
use std::fmt::Write as _;

type Batch = (Tensor, Tensor);

/// A linear model's mean squared error.
fn mse(args: (Tensor, Batch)) -> qb::Result<Tensor> {
    let (w, (x, y)) = args;
    let r = (x.matmul(&w)? - y)?;
    (&r * &r)?.mean()
}

/// `rows` rows of float32 data and float32 weights.
fn problem(rows: usize) -> qb::Result<(Tensor, Batch)> {
    let x: Vec<f32> = (0..rows * 16)
        .map(|i| ((i * 7 % 23) as f32 - 11.0) / 8.0)
        .collect();
    let y: Vec<f32> = (0..rows).map(|i| (i as f32 * 0.3).sin()).collect();
    let w: Vec<f32> = (0..16).map(|i| (i as f32 - 7.5) / 10.0).collect();
    Ok((
        Tensor::from_vec([16], w)?,
        (
            Tensor::from_vec([rows, 16], x)?,
            Tensor::from_vec([rows], y)?,
        ),
    ))
}

fn within(got: &Tensor, cpu: &Tensor) -> qb::Result<Option<String>> {
    for (i, (g, c)) in got
        .to_vec::<f32>()?
        .iter()
        .zip(cpu.to_vec::<f32>()?)
        .enumerate()
    {
        if (g - c).abs() > 1e-5 + 1e-5 * c.abs() || g.is_nan() != c.is_nan() {
            return Ok(Some(format!("element {i}: {g} vs the CPU's {c}")));
        }
    }
    Ok(None)
}

/// One check: the devices' value and gradient against the CPU's, as a report line, and whether
/// it passed.
fn check(devices: &[String]) -> (String, bool) {
    let names: Vec<&str> = devices.iter().map(String::as_str).collect();
    let outcome = (|| -> qb::Result<Option<String>> {
        let (w, batch) = problem(64 * devices.len())?;
        let (cv, cg): (Tensor, Tensor) =
            qb::value_and_grad(mse).call(&(w.clone(), batch.clone()))?;
        let step = distributed::value_and_grad(mse)
            .shard_argnums(&[1])
            .devices(&names);
        let (v, g): (Tensor, Tensor) = step.call(&(w, batch))?;
        Ok(within(&v, &cv)?.or(within(&g, &cg)?))
    })();
    let line = match &outcome {
        Ok(None) => "agrees with the CPU".to_string(),
        Ok(Some(why)) => format!("**differs**: {why}"),
        Err(e) => format!("**failed**: {e}"),
    };
    (
        format!("| `devices={names:?}` | {line} |"),
        matches!(outcome, Ok(None)),
    )
}

/// The report's section, and the number of failed checks.
pub fn run(device_count: usize) -> (String, usize) {
    let mut out = String::from(
        "## Data parallelism (NCCL)\n\n`distributed.value_and_grad(mse, devices=..., \
         shard_argnums=(1,))` against the CPU's full-batch `value_and_grad`, float32 \
         tolerance.\n\n| devices | result |\n| --- | --- |\n",
    );
    let mut failed = 0;
    let mut sets = vec![vec!["cuda:0".to_string()]];
    if device_count >= 2 {
        sets.push(
            (0..device_count.min(8))
                .map(|k| format!("cuda:{k}"))
                .collect(),
        );
    }
    for devices in sets {
        let (line, ok) = check(&devices);
        failed += usize::from(!ok);
        let _ = writeln!(out, "{line}");
    }
    out.push('\n');
    (out, failed)
}
