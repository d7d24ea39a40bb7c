//! A recurrent network over a sequence with `scan_over` (JAX's `scan(f, init, xs)`).
//!
//! An Elman RNN `h_t = tanh(W_h h_{t-1} + W_x x_t + b)` reads a noisy sine wave one sample
//! at a time and predicts the next sample with `w_o . h_t`. The step function receives each
//! time step's slice of the pytree `xs = (inputs, targets)` directly: no one-hot masks and no
//! traced indexing. The loss (the mean squared prediction error) and its gradient come from
//! one jitted `value_and_grad` through the scan, and plain gradient descent trains the weights.
//! Prints `initial_loss=<l>`, one `step=<k> loss=<l>` line every 100 steps and
//! `final_loss=<l>`; `quabla/tests/rnn_scan_example.rs` checks the gradient against the same
//! network written as a Rust loop and the loss's decrease.
//!
//! ```sh
//! cargo run --release --example rnn_scan
//! ```

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::io::Write;

/// Hidden units.
pub const HIDDEN: usize = 8;
/// Time steps of the sequence.
pub const STEPS: usize = 40;
/// Gradient-descent steps and rate.
pub const TRAIN_STEPS: usize = 300;
const RATE: f64 = 0.1;

/// The weights `(W_h [H, H], W_x [H, 1], b [H], w_o [H])`.
pub type Params = (Tensor, Tensor, Tensor, Tensor);

/// The sequence `(inputs [T, 1], targets [T])`: a sine wave with a little noise, and the
/// next sample of the clean wave.
pub fn sequence() -> qb::Result<(Tensor, Tensor)> {
    let t = qb::linspace(0.0, 4.0 * std::f64::consts::PI, STEPS + 1)?;
    let wave = t.sin()?;
    let noise = qb::random::normal(&qb::random::key(7), [STEPS]).eval()?;
    let inputs = (wave.index(qb::s![..STEPS])? + noise.mul(0.05)?)?.reshape([STEPS as isize, 1])?;
    let targets = wave.index(qb::s![1..])?;
    Ok((inputs, targets))
}

/// Small random weights.
pub fn init() -> qb::Result<Params> {
    let keys = qb::random::split(&qb::random::key(0), 4)?;
    let scaled =
        |k: &qb::random::Key, shape: &[usize], s: f64| qb::random::normal(k, shape).eval()?.mul(s);
    Ok((
        scaled(&keys[0], &[HIDDEN, HIDDEN], 0.3)?,
        scaled(&keys[1], &[HIDDEN, 1], 0.5)?,
        scaled(&keys[2], &[HIDDEN], 0.1)?,
        scaled(&keys[3], &[HIDDEN], 0.5)?,
    ))
}

/// One time step: the new hidden state and the squared error of its prediction.
pub fn cell(h: &Tensor, x: &Tensor, target: &Tensor, w: &[Tensor]) -> qb::Result<(Tensor, Tensor)> {
    let (wh, wx, b, wo) = (&w[0], &w[1], &w[2], &w[3]);
    let h = (wh.matmul(h)? + wx.matmul(x)? + b).tanh()?;
    let error = (wo.dot(&h)? - target)?;
    Ok((h, error.square()?))
}

/// The mean squared error over the sequence, by `scan_over`: the step gets `(x_t, target_t)`.
pub fn loss((params, inputs, targets): (Params, Tensor, Tensor)) -> qb::Result<Tensor> {
    let (wh, wx, b, wo) = params;
    let step = |h: Tensor, (x, target): (Tensor, Tensor), w: &[Tensor]| cell(&h, &x, &target, w);
    let (_, errors): (Tensor, Tensor) =
        qb::scan_over(step, &qb::zeros([HIDDEN])?, &(inputs, targets))
            .operands(&[wh, wx, b, wo])
            .eval()?;
    errors.mean()
}

/// The same loss as a Rust loop over the steps (the reference the test compares with).
pub fn loss_unrolled((params, inputs, targets): (Params, Tensor, Tensor)) -> qb::Result<Tensor> {
    let (wh, wx, b, wo) = params;
    let w = [wh, wx, b, wo];
    let mut h = qb::zeros([HIDDEN])?;
    let mut total = qb::array(0.0)?;
    for t in 0..STEPS {
        let (next, e) = cell(
            &h,
            &inputs.index(qb::s![t])?,
            &targets.index(qb::s![t])?,
            &w,
        )?;
        h = next;
        total = (total + e)?;
    }
    total.div(STEPS as f64)
}

/// Trains from [`init`] and prints the losses; returns the trained weights.
pub fn run(out: &mut impl Write) -> qb::Result<Params> {
    let (inputs, targets) = sequence()?;
    let mut params = init()?;
    // The gradient with respect to the first argument, the weights.
    let step = qb::jit(|args: (Params, Tensor, Tensor)| {
        qb::value_and_grad(loss).call::<Tensor, (Tensor, Params)>(&args)
    });
    let mut last = f64::NAN;
    for k in 0..=TRAIN_STEPS {
        let (value, grads) = step.call(&(params.clone(), inputs.clone(), targets.clone()))?;
        last = value.item()?;
        if k == 0 {
            let _ = writeln!(out, "initial_loss={last}");
        } else if k % 100 == 0 {
            let _ = writeln!(out, "step={k} loss={last}");
        }
        if k == TRAIN_STEPS {
            break;
        }
        params = (
            (&params.0 - grads.0.mul(RATE)?)?,
            (&params.1 - grads.1.mul(RATE)?)?,
            (&params.2 - grads.2.mul(RATE)?)?,
            (&params.3 - grads.3.mul(RATE)?)?,
        );
    }
    let _ = writeln!(out, "final_loss={last}");
    Ok(params)
}

pub fn main() -> qb::Result<()> {
    run(&mut std::io::stdout())?;
    Ok(())
}
