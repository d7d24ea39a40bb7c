//! Dropout inside a jitted training step: the dropout mask is drawn inside the `Trainer`'s
//! compiled step from a key tensor passed in with the batch, a fresh key per step
//! (`fold_in(base, step)`), so the step never leaves the device for random numbers and the
//! masks are those an eager call with the same key draws.
//! Run with `cargo run --release --example dropout`.

use qb::optim::{self, Trainer};
use qb::prelude::*;
use qb::random::{self, Key};
use qb::{Tensor, Tree};
use quabla as qb;
use std::io::Write;

/// The probability of keeping a hidden unit.
pub const KEEP: f64 = 0.8;
pub const STEPS: u64 = 500;

/// A one-hidden-layer perceptron.
#[derive(Tree, Clone, Debug)]
pub struct Mlp {
    pub w1: Tensor,
    pub b1: Tensor,
    pub w2: Tensor,
    pub b2: Tensor,
}

/// The batch: inputs, targets and the key of this step's dropout mask.
pub type Batch = (Tensor, Tensor, Tensor);

/// The network's output, with inverted dropout on the hidden layer when a key is given.
pub fn predict(p: &Mlp, x: &Tensor, dropout_key: Option<&Tensor>) -> qb::Result<Tensor> {
    let h = (x.matmul(&p.w1)? + &p.b1).tanh()?;
    let h = match dropout_key {
        Some(key) => {
            let keep = random::bernoulli(key).p(KEEP).shape(h.shape()).eval()?;
            qb::where_(&keep, h.div(KEEP)?, 0.0)?
        }
        None => h,
    };
    h.matmul(&p.w2)? + &p.b2
}

/// The training loss: mean squared error with dropout.
pub fn loss(p: &Mlp, (x, y, key): &Batch) -> qb::Result<Tensor> {
    (predict(p, x, Some(key))? - y).powi(2).mean()
}

/// The loss without dropout (evaluation).
pub fn eval_loss(p: &Mlp, x: &Tensor, y: &Tensor) -> qb::Result<Tensor> {
    (predict(p, x, None)? - y).powi(2).mean()
}

/// What a run reports.
#[derive(Debug)]
pub struct Report {
    pub initial: f64,
    pub trained: f64,
    /// The trainer's loss on its last batch and the eager loss of the same parameters and key.
    pub step_loss: Tensor,
    pub eager_loss: Tensor,
}

/// Glorot-normal weights, zero biases.
pub fn init(key: &Key, hidden: usize) -> qb::Result<Mlp> {
    let k = random::split(key, 2)?;
    Ok(Mlp {
        w1: random::glorot_normal(&k[0], [1, hidden]).eval()?,
        b1: qb::zeros([hidden])?,
        w2: random::glorot_normal(&k[1], [hidden, 1]).eval()?,
        b2: qb::zeros([1])?,
    })
}

/// Fits `sin(3x)` on `[-1, 1]` with a 32-unit hidden layer and dropout.
pub fn run(out: &mut impl Write) -> qb::Result<Report> {
    let x = qb::linspace(-1.0, 1.0, 64)?.reshape([64, 1])?;
    let y = x.mul(3.0)?.sin()?;
    let [init_key, dropout_base] =
        <[Key; 2]>::try_from(random::split(&random::key(0), 2)?).expect("split gives two keys");
    let params = init(&init_key, 32)?;
    let initial = eval_loss(&params, &x, &y)?.item()?;
    let step_key = |step: u64| random::key_data(&random::fold_in(&dropout_base, step));
    let mut trainer = Trainer::new(
        loss,
        params,
        optim::Adam::new(0.05),
        (x.clone(), y.clone(), step_key(0)),
    )
    .batch_argnums(&[2])
    .build()?;
    for step in 0..STEPS {
        trainer.step_with(&step_key(step))?;
    }
    let params = trainer.params()?;
    let trained = eval_loss(&params, &x, &y)?.item()?;
    let step_loss = trainer.loss()?;
    let eager_loss = loss(&params, &(x, y, step_key(STEPS - 1)))?;
    writeln!(
        out,
        "loss without dropout: {initial:.4} before, {trained:.4} after {STEPS} steps"
    )
    .map_err(|e| qb::Error::user(e.to_string()))?;
    Ok(Report {
        initial,
        trained,
        step_loss,
        eager_loss,
    })
}

#[allow(dead_code)]
fn main() -> qb::Result<()> {
    run(&mut std::io::stdout())?;
    Ok(())
}
