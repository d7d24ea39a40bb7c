//! The `pinn` example (acceptance §13, E96) as a test.

#[path = "../examples/pinn.rs"]
#[allow(dead_code)]
mod pinn;

#[test]
fn e96_step_zero_loss_pins_the_generator_and_the_loss() -> qb::Result<()> {
    let params = pinn::init(&qb::random::key(0))?;
    let value = pinn::loss(&params, &pinn::collocation()?)?.item()?;
    let expect = 49.2723122821368;
    assert!((value - expect).abs() <= 1e-9 * expect, "{value:.16}");
    Ok(())
}

use quabla as qb;

#[test]
fn e96_adam_then_lbfgs_meets_the_bounds_and_the_plot_is_a_png(
) -> Result<(), Box<dyn std::error::Error>> {
    let started = std::time::Instant::now();
    let report = pinn::run(2000, 500, &indicatif::ProgressBar::hidden())?;
    eprintln!(
        "pinn run: {:.2} s, {:?}",
        started.elapsed().as_secs_f64(),
        report.lbfgs
    );
    let step0 = report.losses[0];
    assert!(
        (step0 - 49.2723122821368).abs() <= 1e-9 * 49.2723122821368,
        "{step0}"
    );
    assert!((30.0..80.0).contains(&step0));
    assert!(report.adam_loss < 1e-3, "{}", report.adam_loss);
    assert!(report.lbfgs.loss < 1e-4, "{:?}", report.lbfgs);
    assert!(report.max_error < 1e-3, "{}", report.max_error);
    let dir = std::env::temp_dir().join(format!("quabla-pinn-{}", std::process::id()));
    let path = dir.join("pinn.png");
    pinn::plot(&path, &report)?;
    let bytes = std::fs::read(&path)?;
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    if let Some(keep) = std::env::var_os("PINN_PNG") {
        std::fs::copy(&path, keep)?;
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
