//! A physics-informed neural network for the Poisson problem `-u'' = pi^2 sin(pi x)` on
//! `[0, 1]` with `u(0) = u(1) = 0` (exact solution `sin(pi x)`), acceptance §13.
//!
//! A 1-16-16-1 tanh network `u(params, x)` is initialised with `glorot_normal`; its loss is the
//! mean squared residual `u'' + pi^2 sin(pi x)` at 32 interior points — `u''` by
//! `vmap(grad(grad(u)))` — plus the mean squared boundary values. It is trained with 2000 Adam
//! steps under an exponential-decay schedule through `qb::optim::Trainer` (loss, gradient and
//! update in one compiled plan), then refined with L-BFGS, and compared with `sin(pi x)` on 201
//! points. The solution and the loss curve are drawn to `target/pinn.png`.
//!
//! ```sh
//! cargo run --release --example pinn
//! ```

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use plotters::prelude::*;
use qb::optim::{self, Lbfgs, LbfgsInfo, Trainer};
use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::collections::BTreeMap;
use std::f64::consts::PI;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

#[path = "support/pixel_text.rs"]
mod pixel_text;
use pixel_text::{pixel_text, text_width};

/// The network: one `{"w", "b"}` dict per layer.
pub type Params = Vec<BTreeMap<String, Tensor>>;
/// The interior collocation points and the two boundary points.
pub type Data = (Tensor, Tensor);

/// Layer widths.
pub const SIZES: [usize; 4] = [1, 16, 16, 1];

/// Glorot-normal weights from `split(key, 3)` and zero biases.
pub fn init(key: &qb::random::Key) -> qb::Result<Params> {
    let keys = qb::random::split(key, SIZES.len() - 1)?;
    keys.iter()
        .zip(SIZES.windows(2))
        .map(|(k, mn)| {
            Ok(BTreeMap::from([
                (
                    "w".to_string(),
                    qb::random::glorot_normal(k, [mn[0], mn[1]]).eval()?,
                ),
                ("b".to_string(), qb::zeros([mn[1]])?),
            ]))
        })
        .collect()
}

/// The network at one rank-0 point.
pub fn u(params: &Params, x: &Tensor) -> qb::Result<Tensor> {
    let mut h = x.reshape([1, 1])?;
    for (i, layer) in params.iter().enumerate() {
        h = (h.matmul(&layer["w"])? + &layer["b"])?;
        if i + 1 < params.len() {
            h = h.tanh()?;
        }
    }
    h.reshape([] as [isize; 0])
}

/// The network at every point of a rank-1 tensor.
pub fn u_at(params: &Params, xs: &Tensor) -> qb::Result<Tensor> {
    qb::vmap(|t: Tensor| u(params, &t)).call(xs)
}

/// Mean squared residual of `-u'' = pi^2 sin(pi x)` at the interior points plus the mean
/// squared boundary values.
pub fn loss(params: &Params, data: &Data) -> qb::Result<Tensor> {
    let (xi, xb) = data;
    let u_xx: Tensor = qb::vmap(|t: Tensor| {
        qb::grad(|s: Tensor| qb::grad(|r: Tensor| u(params, &r)).call::<Tensor, Tensor>(&s))
            .call::<Tensor, Tensor>(&t)
    })
    .call(xi)?;
    let residual = (u_xx + xi.mul(PI)?.sin()?.mul(PI * PI)?)?;
    residual.powi(2).mean()? + u_at(params, xb)?.powi(2).mean()?
}

/// 32 interior points of `linspace(0, 1, 34)` and the boundary.
pub fn collocation() -> qb::Result<Data> {
    Ok((
        qb::linspace(0.0, 1.0, 34)?.index(qb::s![1..33])?,
        qb::array([0.0, 1.0])?,
    ))
}

/// What a run produced.
#[derive(Debug)]
pub struct Report {
    /// The loss before each Adam step.
    pub losses: Vec<f64>,
    /// The loss after the Adam steps.
    pub adam_loss: f64,
    pub lbfgs: LbfgsInfo,
    pub params: Params,
    /// `max |u(x) - sin(pi x)|` on 201 points of `[0, 1]`.
    pub max_error: f64,
}

/// The tutorial: `adam_steps` Adam steps through the trainer, then L-BFGS for at most
/// `lbfgs_iterations` iterations.
pub fn run(
    adam_steps: usize,
    lbfgs_iterations: usize,
    progress: &ProgressBar,
) -> qb::Result<Report> {
    let data = collocation()?;
    let params = init(&qb::random::key(0))?;
    let opt = optim::Adam::new(optim::exponential_decay(1e-2, 1000, 0.5));
    let mut trainer = Trainer::new(loss, params, opt, data.clone()).build()?;
    let mut losses = Vec::with_capacity(adam_steps);
    let started = std::time::Instant::now();
    for i in 0..adam_steps {
        trainer.step()?;
        let value = trainer.last_loss()?.map_or(Ok(f64::NAN), |l| l.item())?;
        losses.push(value);
        if i % 20 == 0 {
            let rate = (i + 1) as f64 / started.elapsed().as_secs_f64();
            progress.set_message(format!("loss {value:.3e}, {rate:.0} steps/s"));
        }
        progress.inc(1);
    }
    let adam_loss = trainer.loss()?.item()?;
    let (params, lbfgs) =
        Lbfgs::new()
            .max_iterations(lbfgs_iterations)
            .minimize(loss, &trainer.params()?, &data)?;
    let xt = qb::linspace(0.0, 1.0, 201)?;
    let error = (u_at(&params, &xt)? - xt.mul(PI)?.sin()?).abs().max()?;
    Ok(Report {
        losses,
        adam_loss,
        lbfgs,
        params,
        max_error: error.item()?,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let steps = 2000;
    let progress = if std::io::stdout().is_terminal() {
        ProgressBar::with_draw_target(Some(steps as u64), ProgressDrawTarget::stdout())
    } else {
        ProgressBar::hidden()
    };
    progress.set_style(
        ProgressStyle::with_template("Adam {bar:40} {pos}/{len} {msg}")?.progress_chars("=> "),
    );
    let started = std::time::Instant::now();
    let report = run(steps, 500, &progress)?;
    progress.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    println!("loss at step 0:           {:.13}", report.losses[0]);
    for k in [500, 1000, 1500] {
        println!("loss at step {k}:        {:.4e}", report.losses[k]);
    }
    println!("loss after {steps} Adam steps: {:.4e}", report.adam_loss);
    println!(
        "loss after L-BFGS:        {:.4e} ({} iterations, {} evaluations, {})",
        report.lbfgs.loss, report.lbfgs.iterations, report.lbfgs.evaluations, report.lbfgs.reason
    );
    println!("max |u - sin(pi x)|:      {:.3e}", report.max_error);
    println!("total time:               {seconds:.2} s");
    let path = output_path();
    plot(&path, &report)?;
    println!("wrote {}", path.display());
    Ok(())
}

/// `target/pinn.png` (under `CARGO_TARGET_DIR` when it is set).
pub fn output_path() -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    dir.join("pinn.png")
}

const LEARNED: RGBColor = RGBColor(214, 39, 40);
const EXACT: RGBColor = RGBColor(120, 120, 120);
const CURVE: RGBColor = RGBColor(31, 119, 180);

/// Left: the learned `u(x)` over `sin(pi x)`; right: `log10` of the Adam loss per step.
pub fn plot(path: &Path, report: &Report) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let xs = qb::linspace(0.0, 1.0, 201)?;
    let learned = u_at(&report.params, &xs)?.to_vec::<f64>()?;
    let xs = xs.to_vec::<f64>()?;
    let root = BitMapBackend::new(path, (1200, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left_area, right_area) = root.split_horizontally(600);
    let scale = 2;

    let mut chart = ChartBuilder::on(&left_area)
        .margin_top(70)
        .margin_right(30)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..1.0, -0.05..1.1)?;
    chart
        .configure_mesh()
        .x_labels(0)
        .y_labels(0)
        .axis_style(BLACK)
        .draw()?;
    let exact: Vec<(f64, f64)> = xs.iter().map(|&x| (x, (PI * x).sin())).collect();
    chart.draw_series(LineSeries::new(exact, EXACT.stroke_width(6)))?;
    let fitted: Vec<(f64, f64)> = xs.iter().zip(&learned).map(|(&x, &u)| (x, u)).collect();
    chart.draw_series(LineSeries::new(fitted, LEARNED.stroke_width(2)))?;
    for k in 0..=4 {
        let x = k as f64 / 4.0;
        let (px, py) = chart.backend_coord(&(x, -0.05));
        left_area.draw(&PathElement::new(vec![(px, py), (px, py + 5)], BLACK))?;
        let label = format!("{x}");
        pixel_text(
            &left_area,
            &label,
            (px - text_width(&label, scale) / 2, py + 12),
            scale,
            BLACK,
        )?;
    }
    for k in 0..=2 {
        let y = k as f64 * 0.5;
        let (px, py) = chart.backend_coord(&(0.0, y));
        left_area.draw(&PathElement::new(vec![(px - 5, py), (px, py)], BLACK))?;
        let label = format!("{y}");
        pixel_text(
            &left_area,
            &label,
            (px - 12 - text_width(&label, scale), py - 8),
            scale,
            BLACK,
        )?;
    }
    pixel_text(
        &left_area,
        "u(x) red, exact sin(pi x) grey",
        (20, 12),
        scale,
        BLACK,
    )?;
    let error = format!("max error {:.2e}", report.max_error);
    pixel_text(&left_area, &error, (20, 38), scale, BLACK)?;

    let logs: Vec<f64> = report
        .losses
        .iter()
        .map(|l| l.max(1e-300).log10())
        .collect();
    let lo = logs.iter().cloned().fold(f64::INFINITY, f64::min).floor();
    let hi = logs
        .iter()
        .cloned()
        .fold(f64::NEG_INFINITY, f64::max)
        .ceil();
    let (lo, hi) = if lo.is_finite() && hi.is_finite() && hi > lo {
        (lo, hi)
    } else {
        (-8.0, 2.0)
    };
    let n = logs.len().max(2) as f64;
    let mut chart = ChartBuilder::on(&right_area)
        .margin_top(70)
        .margin_right(30)
        .x_label_area_size(40)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..n, lo..hi)?;
    chart
        .configure_mesh()
        .x_labels(0)
        .y_labels(0)
        .axis_style(BLACK)
        .draw()?;
    chart.draw_series(LineSeries::new(
        logs.iter().enumerate().map(|(i, &l)| (i as f64, l)),
        CURVE.stroke_width(2),
    ))?;
    for e in (lo as i64..=hi as i64).step_by(((hi - lo) as usize / 5).max(1)) {
        let (px, py) = chart.backend_coord(&(0.0, e as f64));
        root.draw(&PathElement::new(vec![(px - 5, py), (px, py)], BLACK))?;
        let label = format!("1e{e}");
        pixel_text(
            &root,
            &label,
            (px - 12 - text_width(&label, scale), py - 8),
            scale,
            BLACK,
        )?;
    }
    for k in 0..=4 {
        let step = (k as f64 * (n / 4.0)).round();
        let (px, py) = chart.backend_coord(&(step, lo));
        root.draw(&PathElement::new(vec![(px, py), (px, py + 5)], BLACK))?;
        let label = format!("{step}");
        pixel_text(
            &root,
            &label,
            (px - text_width(&label, scale) / 2, py + 12),
            scale,
            BLACK,
        )?;
    }
    pixel_text(&right_area, "Adam loss (log scale)", (20, 12), scale, BLACK)?;
    let after = format!(
        "then L-BFGS: {:.2e}, {} its",
        report.lbfgs.loss, report.lbfgs.iterations
    );
    pixel_text(&right_area, &after, (20, 38), scale, BLACK)?;
    root.present()?;
    Ok(())
}
