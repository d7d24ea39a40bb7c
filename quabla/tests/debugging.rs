//! Reading traces and hunting non-finite values: source locations on IR nodes (carried through
//! transforms), the non-finite check of `jit(f).check_nans(true)` and `qb::debug_nans`, and
//! `qb::debug_print`.

use qb::Tensor;
use quabla as qb;

fn this_file() -> &'static str {
    file!()
}

#[test]
fn nodes_carry_the_user_source_line_through_transforms() -> qb::Result<()> {
    let line_a = line!() + 2;
    let f = |x: Tensor| {
        let y = x.sin()?;
        (&y * &x)?.sum()
    };
    let text = qb::jit(f)
        .lower(&qb::array([1.0, 2.0])?)?
        .as_text_with_locations();
    let sin_line = text
        .lines()
        .find(|l| l.contains("= sin("))
        .expect("a sin node");
    assert!(
        sin_line.contains(&format!("  # {}:{line_a}:", this_file())),
        "{text}"
    );
    // The plain text has no comments.
    assert!(!qb::jit(f)
        .lower(&qb::array([1.0, 2.0])?)?
        .as_text()
        .contains('#'));
    // The gradient's cos node is the jvp/vjp rule of that sin, on the same line.
    let g = |x: Tensor| qb::grad(f).call::<Tensor, Tensor>(&x);
    let text = qb::jit(g)
        .lower(&qb::array([1.0, 2.0])?)?
        .as_text_with_locations();
    let cos_line = text
        .lines()
        .find(|l| l.contains("= cos("))
        .expect("a cos node");
    assert!(
        cos_line.contains(&format!("  # vjp of sin at {}:{line_a}:", this_file())),
        "{text}"
    );
    // Forward mode and vmap keep the line too.
    let t = |x: Tensor| Ok(qb::jvp(f, &x, &qb::ones_like(&x)?)?.1);
    let batched = |x: Tensor| qb::vmap(t).call::<Tensor>(&x);
    let text = qb::jit(batched)
        .lower(&qb::array([[1.0, 2.0]])?)?
        .as_text_with_locations();
    assert!(
        text.lines()
            .any(|l| l.contains("= cos(") && l.contains("# jvp of sin at")),
        "{text}"
    );
    Ok(())
}

fn nan_message(e: &qb::Error) -> &str {
    match e {
        qb::Error::NonFinite { message } => message,
        other => panic!("not a non-finite error: {other:?}"),
    }
}

#[test]
fn check_nans_names_a_backward_node_its_rule_and_the_primal_line() -> qb::Result<()> {
    let line = line!() + 1;
    let loss = |x: Tensor| x.cbrt()?.sum();
    let g = |x: Tensor| qb::grad(loss).call::<Tensor, Tensor>(&x);
    let x = qb::array([0.0, 8.0])?;
    // Unchecked, the gradient is silently infinite (cbrt' is infinite at 0, numerics.md).
    let plain: Tensor = qb::jit(g).call(&x)?;
    assert!(plain.to_vec::<f64>()?[0].is_infinite());
    let err = qb::jit(g).check_nans(true).call(&x).unwrap_err();
    let message = nan_message(&err);
    assert!(
        message.starts_with("non-finite value inf at element 0"),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "in the backward pass: made by the vjp rule of cbrt, differentiating the cbrt at {}:{line}:",
            this_file()
        )),
        "{message}"
    );
    assert!(message.contains("operands: %"), "{message}");
    // Where nothing is caught, the checked plan gives the unchecked plan's bits.
    let x = qb::array([1.0, 8.0])?;
    let checked: Tensor = qb::jit(g).check_nans(true).call(&x)?;
    let plain: Tensor = qb::jit(g).call(&x)?;
    assert_eq!(checked.to_vec::<f64>()?, plain.to_vec::<f64>()?);
    Ok(())
}

#[test]
fn check_nans_finds_a_nan_that_only_the_gradient_shows() -> qb::Result<()> {
    // The guide's trap: `where` drops the NaN of sqrt(-1) from the loss, not from the
    // gradient: the backward pass of sqrt computes it again (0 * NaN is NaN).
    let line = line!() + 1;
    let loss = |x: Tensor| qb::where_(&x.greater(0.0)?, &x.sqrt()?, 0.0)?.sum();
    let x = qb::array([4.0, -1.0])?;
    assert!(loss(x.clone())?.item()?.is_finite());
    let g = |x: Tensor| qb::grad(loss).call::<Tensor, Tensor>(&x);
    let grad: Tensor = qb::jit(g).call(&x)?;
    assert!(grad.to_vec::<f64>()?[1].is_nan());
    let err = qb::jit(g).check_nans(true).call(&x).unwrap_err();
    let message = nan_message(&err);
    assert!(message.contains("= sqrt(%"), "{message}");
    assert!(message.contains("in [-1, 4]"), "{message}");
    assert!(
        message.contains(&format!(
            "in the backward pass: made by the vjp rule of sqrt, differentiating the sqrt at {}:{line}:",
            this_file()
        )),
        "{message}"
    );
    // Guarding the input, as the guide says, makes the gradient finite.
    let fixed = |x: Tensor| {
        let positive = x.greater(0.0)?;
        let safe = qb::where_(&positive, &x, 1.0)?;
        qb::where_(&positive, &safe.sqrt()?, 0.0)?.sum()
    };
    let g = |x: Tensor| qb::grad(fixed).call::<Tensor, Tensor>(&x);
    let grad: Tensor = qb::jit(g).check_nans(true).call(&x)?;
    assert_eq!(grad.to_vec::<f64>()?, [0.25, 0.0]);
    Ok(())
}

#[test]
fn check_nans_looks_inside_loop_bodies() -> qb::Result<()> {
    let line = line!() + 1;
    let f = |x: Tensor| qb::fori_loop(0, 3, |_, c, _| (&c - 1.0)?.log(), &x).eval();
    let err = qb::jit(f)
        .check_nans(true)
        .call(&qb::array(2.5)?)
        .unwrap_err();
    let message = nan_message(&err);
    assert!(message.contains("= log(%"), "{message}");
    assert!(
        message.contains(&format!("{}:{line}:", this_file())),
        "{message}"
    );
    Ok(())
}

#[test]
fn debug_nans_checks_eager_operations_and_every_plan() -> qb::Result<()> {
    qb::debug_nans(true);
    let line = line!() + 1;
    let eager = qb::array([1.0, -1.0])?.sqrt();
    let jitted = qb::jit(|x: Tensor| x.log()).call(&qb::array([-2.0])?);
    qb::debug_nans(false);
    let message = nan_message(eager.as_ref().unwrap_err()).to_string();
    assert!(message.contains("eager sqrt"), "{message}");
    assert!(
        message.contains(&format!("{}:{line}:", this_file())),
        "{message}"
    );
    let message = nan_message(jitted.as_ref().unwrap_err()).to_string();
    assert!(message.contains("= log(%"), "{message}");
    // Off again: no check, and the cached plan of the unchecked signature.
    assert!(qb::array([-1.0])?.sqrt()?.item()?.is_nan());
    Ok(())
}

/// The scenarios of `debug_print_prints_at_run_time_per_example_and_eagerly`, run in a child
/// process whose standard output the parent reads (a no-op as an ordinary test).
#[test]
fn debug_print_child() -> qb::Result<()> {
    if std::env::var_os("QB_DEBUG_PRINT_CHILD").is_none() {
        return Ok(());
    }
    qb::debug_print("eager {}", &qb::array([1.0, 2.5])?)?;
    let f = qb::jit(|x: Tensor| {
        let y = x.mul(2.0)?;
        qb::debug_print("y = {}", &y)?;
        qb::debug_print("y = {}", &y)?;
        // Printed although nothing else reads it.
        qb::debug_print("unused {}", &x.sum()?)?;
        y.sum()
    });
    let _: Tensor = f.call(&qb::array([1.0, 2.0])?)?;
    let _: Tensor = f.call(&qb::array([3.0, 4.0])?)?;
    let per_example = |x: Tensor| {
        qb::debug_print("ex {}", &x)?;
        Ok(x)
    };
    let _: Tensor = qb::vmap(per_example).call(&qb::array([[1.0, 2.0], [3.0, 4.0]])?)?;
    let loss = |w: Tensor| {
        let l = w.powi(2)?.sum()?;
        qb::debug_print("loss {}", &l)?;
        Ok(l)
    };
    let g: Tensor =
        qb::jit(|w: Tensor| qb::grad(loss).call::<Tensor, Tensor>(&w)).call(&qb::array([3.0])?)?;
    qb::debug_print("grad {}", &g)?;
    Ok(())
}

#[test]
fn debug_print_prints_at_run_time_per_example_and_eagerly() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "debug_print_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("QB_DEBUG_PRINT_CHILD", "1")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    // The harness writes `test debug_print_child ... ` before the first line.
    let printed: Vec<&str> = text
        .lines()
        .map(|l| l.rsplit(" ... ").next().unwrap_or(l))
        .filter(|l| {
            ["eager", "y =", "unused", "[0]", "[1]", "loss", "grad"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect();
    assert_eq!(
        printed,
        [
            "eager [1, 2.5]",
            "y = [2, 4]",
            "y = [2, 4]",
            "unused 3",
            "y = [6, 8]",
            "y = [6, 8]",
            "unused 7",
            "[0] ex [1, 2]",
            "[1] ex [3, 4]",
            "loss 9",
            "grad [6]",
        ],
        "{text}"
    );
}
