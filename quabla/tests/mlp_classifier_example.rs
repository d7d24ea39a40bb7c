//! The MLP classifier example (`examples/mlp_classifier.rs`) runs: one jitted epoch (the
//! shuffled minibatch loop with traced gathers inside `jit`) equals the same epoch run eagerly,
//! and training separates the three classes.

#[path = "../examples/mlp_classifier.rs"]
#[allow(dead_code)]
mod mlp_classifier;

use qb::Tensor;
use quabla as qb;

#[test]
fn a_jitted_epoch_equals_the_eager_epoch() -> qb::Result<()> {
    let (x, y) = mlp_classifier::data()?;
    let w = mlp_classifier::init()?;
    let batches = mlp_classifier::shuffled_batches(&qb::random::key(5))?;
    let args = (w, batches, x, y);
    let (we, le) = mlp_classifier::epoch(args.clone())?;
    let (wj, lj): (Tensor, Tensor) = qb::jit(mlp_classifier::epoch).call(&args)?;
    let close = |a: &Tensor, b: &Tensor| -> qb::Result<()> {
        for (p, q) in a.to_vec::<f64>()?.iter().zip(b.to_vec::<f64>()?) {
            assert!((p - q).abs() <= 1e-12 * (1.0 + q.abs()), "{p} vs {q}");
        }
        Ok(())
    };
    close(&we, &wj)?;
    close(&le, &lj)?;
    // The batches are a permutation of the examples.
    let mut seen = args.1.reshape([-1])?.to_vec::<i64>()?;
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..mlp_classifier::EXAMPLES as i64).collect::<Vec<_>>()
    );
    Ok(())
}

#[test]
fn training_separates_the_classes() -> qb::Result<()> {
    let mut out = Vec::new();
    mlp_classifier::run(&mut out)?;
    let text = String::from_utf8(out).unwrap();
    let value = |key: &str| -> f64 {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {text}"))
            .parse()
            .unwrap()
    };
    let (first, last) = (value("initial_accuracy="), value("final_accuracy="));
    assert!(last >= 0.9 && last > first, "{text}");
    assert_eq!(text.lines().count(), 2 + mlp_classifier::EPOCHS, "{text}");
    Ok(())
}
