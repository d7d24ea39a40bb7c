//! Fitting an ODE model to data by gradient descent through an adaptive solve.
//!
//! Noisy observations of a Lotka-Volterra predator-prey system are made with known
//! parameters; the parameters are then recovered from a wrong guess by minimizing the squared
//! error of a `Dopri5` solve read at the observation times (`saveat`), with gradients from
//! `qb::value_and_grad` through the solve, in one jitted step. The data and the fitted
//! trajectories are drawn to `target/ode_fit.png`.
//!
//! ```sh
//! cargo run --release --example ode_fit
//! ```

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use plotters::prelude::*;
use qb::ode::{odeint, Method};
use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

#[path = "support/pixel_text.rs"]
mod pixel_text;
use pixel_text::{pixel_text, text_width};

/// The parameters the observations are made with: `[a, b, c, d]` of
/// `x' = a x - b x y`, `y' = c x y - d y`.
pub const TRUE_THETA: [f64; 4] = [1.5, 1.0, 1.0, 3.0];
/// Where the fit starts.
pub const INITIAL_THETA: [f64; 4] = [1.2, 0.8, 1.25, 2.5];
const Y0: [f64; 2] = [1.0, 1.0];
const T1: f64 = 8.0;
const OBSERVATIONS: usize = 40;
const NOISE: f64 = 0.1;

/// The Lotka-Volterra right-hand side with the parameters in `args[0]`.
pub fn lotka_volterra(y: &Tensor, _t: &Tensor, args: &[Tensor]) -> qb::Result<Tensor> {
    let th = &args[0];
    let (prey, predator) = (y.index(qb::s![0])?, y.index(qb::s![1])?);
    let meet = (&prey * &predator)?;
    let dprey = (th.index(qb::s![0])? * &prey)? - th.index(qb::s![1])? * &meet;
    let dpredator = (th.index(qb::s![2])? * &meet)? - th.index(qb::s![3])? * &predator;
    qb::stack(&[dprey?, dpredator?], 0)
}

/// The states at the times `ts` for the parameters `theta`.
pub fn trajectory(theta: &Tensor, ts: &Tensor) -> qb::Result<Tensor> {
    odeint(lotka_volterra, &qb::array(Y0)?, (0.0, T1))
        .method(Method::Dopri5)
        .args(&[theta])
        .saveat(ts)
        .max_steps(256)
        .eval()
}

/// The observation times and the noisy observations `[OBSERVATIONS, 2]`.
pub fn observations(seed: u64) -> qb::Result<(Tensor, Tensor)> {
    let ts = qb::linspace(T1 / OBSERVATIONS as f64, T1, OBSERVATIONS)?;
    let clean = trajectory(&qb::array(TRUE_THETA)?, &ts)?;
    let noise = match quabla_random::normal(&quabla_random::key(seed), &[OBSERVATIONS, 2], qb::F64)
    {
        Ok(quabla_random::Samples::F64(v)) => Tensor::from_vec([OBSERVATIONS, 2], v)?,
        other => {
            return Err(qb::Error::InvalidArgument {
                message: format!("drawing the noise failed: {other:?}"),
            })
        }
    };
    Ok((ts, (clean + noise.mul(NOISE))?))
}

/// Mean squared error of the trajectory of `exp(log_theta)` against the data. The parameters
/// are optimized in log space: they stay positive and share one scale.
pub fn loss(log_theta: &Tensor, ts: &Tensor, data: &Tensor) -> qb::Result<Tensor> {
    let pred = trajectory(&log_theta.exp()?, ts)?;
    (pred - data).powi(2).mean()
}

/// Adam on the log-parameters for `iterations` steps; returns the parameters and the loss of
/// each step.
pub fn fit(
    ts: &Tensor,
    data: &Tensor,
    iterations: usize,
    progress: &ProgressBar,
) -> qb::Result<(Tensor, Vec<f64>)> {
    let step = qb::jit(|log_theta: Tensor| {
        qb::value_and_grad(|p: Tensor| loss(&p, ts, data))
            .call::<Tensor, (Tensor, Tensor)>(&log_theta)
    });
    let (lr, b1, b2, eps) = (0.05, 0.9, 0.999, 1e-8);
    let mut p = qb::array(INITIAL_THETA)?.log()?;
    let mut m = qb::zeros_like(&p)?;
    let mut v = qb::zeros_like(&p)?;
    let mut losses = Vec::with_capacity(iterations);
    for k in 1..=iterations {
        let (value, grad) = step.call(&p)?;
        losses.push(value.item()?);

        m = (m.mul(b1)? + grad.mul(1.0 - b1)?)?;
        v = (v.mul(b2)? + grad.square()?.mul(1.0 - b2)?)?;
        let m_hat = m.div(1.0 - b1.powi(k as i32))?;
        let v_hat = v.div(1.0 - b2.powi(k as i32))?;
        p = (&p - m_hat.mul(lr)? / v_hat.sqrt()?.add(eps)?)?;
        progress.set_message(format!("loss {:.5}", value.item()?));
        progress.inc(1);
    }
    Ok((p.exp()?, losses))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (ts, data) = observations(7)?;
    let iterations = 150;
    let progress = if std::io::stdout().is_terminal() {
        ProgressBar::with_draw_target(Some(iterations as u64), ProgressDrawTarget::stdout())
    } else {
        ProgressBar::hidden()
    };
    progress.set_style(
        ProgressStyle::with_template("fitting {bar:40} {pos}/{len} {msg}")?.progress_chars("=> "),
    );
    let (theta, losses) = fit(&ts, &data, iterations, &progress)?;
    progress.finish_and_clear();
    let fitted = theta.to_vec::<f64>()?;
    println!(
        "loss: {:.5} at the start, {:.5} after {iterations} steps (noise variance {:.5})",
        losses[0],
        losses[losses.len() - 1],
        NOISE * NOISE
    );
    println!("parameter   true   fitted   error");
    for (k, name) in ["a", "b", "c", "d"].iter().enumerate() {
        let rel = (fitted[k] - TRUE_THETA[k]) / TRUE_THETA[k];
        println!(
            "{name:>9}  {:5.3}  {:7.4}  {:+6.2}%",
            TRUE_THETA[k],
            fitted[k],
            100.0 * rel
        );
    }
    let path = output_path();
    plot(&path, &ts, &data, &theta)?;
    println!("wrote {}", path.display());
    Ok(())
}

/// `target/ode_fit.png` (under `CARGO_TARGET_DIR` when it is set).
pub fn output_path() -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    dir.join("ode_fit.png")
}

const PREY: RGBColor = RGBColor(31, 119, 180);
const PREDATOR: RGBColor = RGBColor(214, 39, 40);

/// Draws the observations and the trajectories of the fitted and the true parameters.
pub fn plot(
    path: &Path,
    ts: &Tensor,
    data: &Tensor,
    theta: &Tensor,
) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let fine = qb::linspace(0.0, T1, 400)?;
    let fitted = trajectory(theta, &fine)?.to_vec::<f64>()?;
    let truth = trajectory(&qb::array(TRUE_THETA)?, &fine)?.to_vec::<f64>()?;
    let times = fine.to_vec::<f64>()?;
    let obs_t = ts.to_vec::<f64>()?;
    let obs = data.to_vec::<f64>()?;
    let y_max = obs.iter().chain(&fitted).fold(0.0f64, |a, &b| a.max(b)) * 1.08;

    let (width, height) = (1000, 640);
    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, bottom, top, right) = (60, 40, 100, 50);
    let mut chart = ChartBuilder::on(&root)
        .margin_top(top)
        .margin_right(right)
        .x_label_area_size(bottom)
        .y_label_area_size(left)
        .build_cartesian_2d(0.0..T1, 0.0..y_max)?;
    // No text through plotters (its text needs system fonts or a TrueType file): the mesh
    // draws the axes, and the labels are drawn with an 8x8 bitmap font below.
    chart
        .configure_mesh()
        .x_labels(0)
        .y_labels(0)
        .axis_style(BLACK)
        .draw()?;
    let grey = RGBColor(160, 160, 160);
    for (component, color) in [(0, PREY), (1, PREDATOR)] {
        let series = |values: &[f64]| {
            times
                .iter()
                .enumerate()
                .map(|(i, &t)| (t, values[2 * i + component]))
                .collect::<Vec<_>>()
        };
        chart.draw_series(LineSeries::new(series(&truth), grey.stroke_width(1)))?;
        chart.draw_series(LineSeries::new(series(&fitted), color.stroke_width(2)))?;
        chart.draw_series(
            obs_t
                .iter()
                .enumerate()
                .map(|(i, &t)| Circle::new((t, obs[2 * i + component]), 3, color.filled())),
        )?;
    }
    // Ticks and their labels.
    let scale = 2;
    for k in 0..=T1 as usize {
        let (x, y) = chart.backend_coord(&(k as f64, 0.0));
        root.draw(&PathElement::new(vec![(x, y), (x, y + 5)], BLACK))?;
        let label = k.to_string();
        pixel_text(
            &root,
            &label,
            (x - text_width(&label, scale) / 2, y + 12),
            scale,
            BLACK,
        )?;
    }
    let step = if y_max > 10.0 { 2 } else { 1 };
    for k in (0..=y_max.floor() as usize).step_by(step) {
        let (x, y) = chart.backend_coord(&(0.0, k as f64));
        root.draw(&PathElement::new(vec![(x - 5, y), (x, y)], BLACK))?;
        let label = k.to_string();
        pixel_text(
            &root,
            &label,
            (x - 12 - text_width(&label, scale), y - 8),
            scale,
            BLACK,
        )?;
    }
    let (x_end, y_axis) = chart.backend_coord(&(T1, 0.0));
    pixel_text(&root, "t", (x_end + 14, y_axis - 8), scale, BLACK)?;
    let values = theta.to_vec::<f64>()?;
    pixel_text(
        &root,
        "Lotka-Volterra: data (points), fitted trajectories (lines)",
        (left, 10),
        scale,
        BLACK,
    )?;
    let fitted_line = format!(
        "fitted a={:.3} b={:.3} c={:.3} d={:.3}",
        values[0], values[1], values[2], values[3]
    );
    pixel_text(&root, &fitted_line, (left, 36), scale, BLACK)?;
    // Legend, one row under the title.
    let mut x = left;
    for (label, color) in [
        ("prey", PREY),
        ("predator", PREDATOR),
        ("true a=1.5 b=1 c=1 d=3", grey),
    ] {
        let y = 66;
        root.draw(&Rectangle::new([(x, y), (x + 14, y + 14)], color.filled()))?;
        pixel_text(&root, label, (x + 22, y), scale, BLACK)?;
        x += 22 + text_width(label, scale) + 32;
    }
    root.present()?;
    Ok(())
}
