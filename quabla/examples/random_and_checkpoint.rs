//! Keyed random numbers and a checkpoint: the generator bits of acceptance E64, then a small
//! network initialised from split keys, saved to a file and loaded back bit for bit.
//! Run with `cargo run --release --example random_and_checkpoint`.

use qb::random::{self, Key};
use qb::{Tensor, Tree};
use quabla as qb;
use std::io::Write;

/// One dense layer.
#[derive(Tree, Clone, Debug)]
pub struct Dense {
    pub w: Tensor,
    pub b: Tensor,
}

/// A checkpoint: the layers, the step count and a static label.
#[derive(Tree, Clone, Debug)]
pub struct Checkpoint {
    pub layers: Vec<Dense>,
    pub step: i64,
    #[tree(static)]
    pub activation: String,
}

/// Glorot-normal weights and zero biases for layer widths `sizes`, one split key per layer.
pub fn init(key: &Key, sizes: &[usize]) -> qb::Result<Vec<Dense>> {
    let keys = random::split(key, sizes.len() - 1)?;
    sizes
        .windows(2)
        .zip(&keys)
        .map(|(io, k)| {
            Ok(Dense {
                w: random::glorot_normal(k, [io[0], io[1]]).eval()?,
                b: qb::zeros([io[1]])?,
            })
        })
        .collect()
}

/// Whether every tensor of two layer lists has the same shape, dtype and bits.
fn identical(a: &[Dense], b: &[Dense]) -> qb::Result<bool> {
    let bits = |t: &Tensor| -> qb::Result<(Vec<usize>, qb::DType, Vec<u64>)> {
        let v = t.to_vec::<f64>()?.iter().map(|x| x.to_bits()).collect();
        Ok((t.shape().to_vec(), t.dtype(), v))
    };
    for (x, y) in a.iter().zip(b) {
        if bits(&x.w)? != bits(&y.w)? || bits(&x.b)? != bits(&y.b)? {
            return Ok(false);
        }
    }
    Ok(a.len() == b.len())
}

pub fn run(out: &mut dyn Write, path: &std::path::Path) -> qb::Result<()> {
    let keys: Vec<u64> = random::split(&random::key(0), 3)?
        .iter()
        .map(|k| k.value())
        .collect();
    let io = |e: std::io::Error| qb::Error::Internal {
        message: e.to_string(),
    };
    writeln!(out, "split(key(0), 3) = {keys:?}").map_err(io)?;
    let u = random::uniform(&random::key(42), [4]).eval()?;
    writeln!(out, "uniform(key(42), (4,)) = {:?}", u.to_vec::<f64>()?).map_err(io)?;
    let z = random::normal(&random::key(0), [3]).eval()?;
    writeln!(out, "normal(key(0), (3,)) = {:?}", z.to_vec::<f64>()?).map_err(io)?;

    let checkpoint = Checkpoint {
        layers: init(&random::key(2026), &[2, 16, 16, 1])?,
        step: 1200,
        activation: "tanh".into(),
    };
    qb::save(path, &checkpoint)?;
    let back: Checkpoint = qb::load_as(path)?;
    let same = identical(&checkpoint.layers, &back.layers)?
        && back.step == checkpoint.step
        && back.activation == checkpoint.activation;
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    writeln!(
        out,
        "checkpoint {} ({bytes} bytes): {} layers, step={}, activation={}, identical={same}",
        path.display(),
        back.layers.len(),
        back.step,
        back.activation
    )
    .map_err(io)?;
    Ok(())
}

#[allow(dead_code)]
fn main() -> qb::Result<()> {
    let path = std::env::temp_dir().join("quabla-checkpoint.qb");
    run(&mut std::io::stdout(), &path)
}
