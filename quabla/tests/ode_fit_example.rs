//! The `ode_fit` example as a test: its data are reproducible, a few of its gradient steps
//! reduce the loss, and its plot is written as a PNG.

#[path = "../examples/ode_fit.rs"]
#[allow(dead_code)]
mod ode_fit;

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;

#[test]
fn the_fit_descends_and_the_plot_is_a_png() -> Result<(), Box<dyn std::error::Error>> {
    let (ts, data) = ode_fit::observations(7)?;
    assert_eq!(data.shape(), &[40, 2]);
    let (_, again) = ode_fit::observations(7)?;
    assert_eq!(data.to_vec::<f64>()?, again.to_vec::<f64>()?);
    // The noise-free trajectory is within a few noise deviations of the data.
    let clean = ode_fit::trajectory(&qb::array(ode_fit::TRUE_THETA)?, &ts)?;
    let residual: Tensor = (clean - &data)?.powi(2).mean()?;
    assert!(residual.item()? < 0.02, "{}", residual.item()?);
    let (theta, losses) = ode_fit::fit(&ts, &data, 12, &indicatif::ProgressBar::hidden())?;
    assert_eq!(losses.len(), 12);
    assert!(losses[11] < 0.7 * losses[0], "{losses:?}");
    let dir = std::env::temp_dir().join(format!("quabla-ode-fit-{}", std::process::id()));
    let path = dir.join("ode_fit.png");
    ode_fit::plot(&path, &ts, &data, &theta)?;
    let bytes = std::fs::read(&path)?;
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
