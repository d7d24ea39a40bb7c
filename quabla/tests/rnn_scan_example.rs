//! The RNN example (`examples/rnn_scan.rs`) runs: its `scan_over` loss and gradient equal
//! those of the same network written as a Rust loop, and training lowers the loss.

#[path = "../examples/rnn_scan.rs"]
#[allow(dead_code)]
mod rnn_scan;

use qb::Tensor;
use quabla as qb;
use rnn_scan::Params;

#[test]
fn scan_over_agrees_with_the_unrolled_loop() -> qb::Result<()> {
    let (inputs, targets) = rnn_scan::sequence()?;
    let params = rnn_scan::init()?;
    let args = (params, inputs, targets);
    let (v, g): (Tensor, Params) = qb::value_and_grad(rnn_scan::loss).call(&args)?;
    let (w, h): (Tensor, Params) = qb::value_and_grad(rnn_scan::loss_unrolled).call(&args)?;
    let close = |a: &Tensor, b: &Tensor| -> qb::Result<()> {
        for (x, y) in a.to_vec::<f64>()?.iter().zip(b.to_vec::<f64>()?) {
            assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{x} vs {y}");
        }
        Ok(())
    };
    close(&v, &w)?;
    close(&g.0, &h.0)?;
    close(&g.1, &h.1)?;
    close(&g.2, &h.2)?;
    close(&g.3, &h.3)?;
    Ok(())
}

#[test]
fn training_lowers_the_loss() -> qb::Result<()> {
    let mut out = Vec::new();
    rnn_scan::run(&mut out)?;
    let text = String::from_utf8(out).unwrap();
    let value = |key: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {text}"))
            .parse()
            .unwrap()
    };
    let (first, last) = (value("initial_loss="), value("final_loss="));
    assert!(last.is_finite() && last < 0.2 * first, "{text}");
    assert_eq!(
        text.lines().count(),
        2 + rnn_scan::TRAIN_STEPS / 100,
        "{text}"
    );
    Ok(())
}
