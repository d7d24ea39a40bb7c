//! An MLP classifier trained with shuffled minibatches, one jitted call per epoch.
//!
//! Three Gaussian blobs in the plane, labelled 0, 1, 2 (int64). A one-hidden-layer network
//! gives logits; the loss picks each example's log-probability with `take_along_axis` at its
//! label, and accuracy compares `argmax` of the logits with the labels. Each epoch draws a
//! permutation of the examples on the host (`argsort` of uniform samples), reshapes it into
//! `[batches, batch]`, and runs the whole minibatch loop inside `jit`: `scan_over` hands each
//! step one row of indices, which gather the batch from the data with a traced index
//! (`x[idx]`), and the step applies one gradient-descent update to the flat weight vector.
//! Prints `initial_loss=<l> initial_accuracy=<a>`, one `epoch=<k> loss=<l> accuracy=<a>` line
//! per epoch and `final_accuracy=<a>`; `quabla/tests/mlp_classifier_example.rs` checks that
//! the jitted epoch equals the same epoch run eagerly and that training separates the classes.
//!
//! ```sh
//! cargo run --release --example mlp_classifier
//! ```

use qb::prelude::*;
use qb::{ix, Tensor};
use quabla as qb;
use std::io::Write;

/// Examples per class, classes, hidden units, minibatch size, epochs, learning rate.
pub const PER_CLASS: usize = 40;
pub const CLASSES: usize = 3;
pub const HIDDEN: usize = 16;
pub const BATCH: usize = 20;
pub const EPOCHS: usize = 8;
const RATE: f64 = 0.3;

/// The number of examples.
pub const EXAMPLES: usize = PER_CLASS * CLASSES;

/// The lengths of `W1 [2, H]`, `b1 [H]`, `W2 [H, C]`, `b2 [C]` in the flat weight vector.
const SIZES: [usize; 4] = [2 * HIDDEN, HIDDEN, HIDDEN * CLASSES, CLASSES];

/// The data: points `[N, 2]` (float64) and labels `[N]` (int64).
pub fn data() -> qb::Result<(Tensor, Tensor)> {
    let noise = qb::random::normal(&qb::random::key(3), [EXAMPLES, 2])
        .eval()?
        .mul(0.6)?;
    let mut centers = Vec::with_capacity(EXAMPLES * 2);
    let mut labels = Vec::with_capacity(EXAMPLES);
    for class in 0..CLASSES {
        let angle = 2.0 * std::f64::consts::PI * class as f64 / CLASSES as f64;
        for _ in 0..PER_CLASS {
            centers.extend([2.0 * angle.cos(), 2.0 * angle.sin()]);
            labels.push(class as i64);
        }
    }
    let points = (Tensor::from_vec([EXAMPLES, 2], centers)? + noise)?;
    Ok((points, qb::array(labels)?))
}

/// Small random weights, flattened into one vector (the carry of the minibatch loop).
pub fn init() -> qb::Result<Tensor> {
    let n: usize = SIZES.iter().sum();
    qb::random::normal(&qb::random::key(0), [n])
        .eval()?
        .mul(0.5)
}

/// The logits `[batch, C]` of points `[batch, 2]`.
pub fn logits(w: &Tensor, x: &Tensor) -> qb::Result<Tensor> {
    let mut parts = Vec::new();
    let mut at = 0;
    for size in SIZES {
        parts.push(w.index(qb::s![at..at + size])?);
        at += size;
    }
    let w1 = parts[0].reshape([2, HIDDEN as isize])?;
    let w2 = parts[2].reshape([HIDDEN as isize, CLASSES as isize])?;
    let hidden = (x.matmul(&w1)? + &parts[1]).tanh()?;
    hidden.matmul(&w2)? + &parts[3]
}

/// The mean cross-entropy: each example's log-probability picked at its label.
pub fn loss(w: &Tensor, x: &Tensor, y: &Tensor) -> qb::Result<Tensor> {
    let logp = qb::log_softmax(logits(w, x)?, 1)?;
    let picked = qb::take_along_axis(&logp, &y.reshape([-1, 1])?, 1)?;
    picked.mean()?.neg()
}

/// The fraction of examples whose largest logit is at their label.
pub fn accuracy(w: &Tensor, x: &Tensor, y: &Tensor) -> qb::Result<Tensor> {
    let guess = qb::argmax(logits(w, x)?).axis(1).eval()?;
    qb::equal(&guess, y)?.astype(qb::F64)?.mean()
}

/// One epoch: a gradient-descent step per row of `batches` (`[steps, BATCH]` indices into the
/// data). Returns the new weights and the mean minibatch loss.
pub fn epoch((w, batches, x, y): (Tensor, Tensor, Tensor, Tensor)) -> qb::Result<(Tensor, Tensor)> {
    let step = |w: Tensor, idx: Tensor, data: &[Tensor]| -> qb::Result<(Tensor, Tensor)> {
        let xb = data[0].index_with(ix![&idx])?;
        let yb = data[1].index_with(ix![&idx])?;
        let (value, grad): (Tensor, Tensor) =
            qb::value_and_grad(|w: Tensor| loss(&w, &xb, &yb)).call(&w)?;
        Ok(((&w - grad.mul(RATE)?)?, value))
    };
    let (w, losses): (Tensor, Tensor) =
        qb::scan_over(step, &w, &batches).operands(&[x, y]).eval()?;
    Ok((w, losses.mean()?))
}

/// A shuffled split of the examples into minibatches: `[EXAMPLES / BATCH, BATCH]` indices.
pub fn shuffled_batches(key: &qb::random::Key) -> qb::Result<Tensor> {
    let order = qb::argsort(qb::random::uniform(key, [EXAMPLES]).eval()?).eval()?;
    order.reshape([(EXAMPLES / BATCH) as isize, BATCH as isize])
}

/// Trains from [`init`] and prints the losses and accuracies; returns the trained weights.
pub fn run(out: &mut impl Write) -> qb::Result<Tensor> {
    let (x, y) = data()?;
    let mut w = init()?;
    let _ = writeln!(
        out,
        "initial_loss={} initial_accuracy={}",
        loss(&w, &x, &y)?.item()?,
        accuracy(&w, &x, &y)?.item()?
    );
    let jitted = qb::jit(epoch);
    let keys = qb::random::split(&qb::random::key(1), EPOCHS)?;
    for (k, key) in keys.iter().enumerate() {
        let batches = shuffled_batches(key)?;
        let (next, mean_loss) = jitted.call(&(w, batches, x.clone(), y.clone()))?;
        w = next;
        let _ = writeln!(
            out,
            "epoch={} loss={} accuracy={}",
            k + 1,
            mean_loss.item()?,
            accuracy(&w, &x, &y)?.item()?
        );
    }
    let _ = writeln!(out, "final_accuracy={}", accuracy(&w, &x, &y)?.item()?);
    Ok(w)
}

pub fn main() -> qb::Result<()> {
    run(&mut std::io::stdout())?;
    Ok(())
}
