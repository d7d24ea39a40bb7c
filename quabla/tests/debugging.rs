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
    let text = qb::jit(f).lower(&qb::array([1.0, 2.0])?)?.as_text_with_locations();
    let sin_line = text.lines().find(|l| l.contains("= sin(")).expect("a sin node");
    assert!(
        sin_line.contains(&format!("  # {}:{line_a}:", this_file())),
        "{text}"
    );
    // The plain text has no comments.
    assert!(!qb::jit(f).lower(&qb::array([1.0, 2.0])?)?.as_text().contains('#'));
    // The gradient's cos node is the jvp/vjp rule of that sin, on the same line.
    let g = |x: Tensor| qb::grad(f).call::<Tensor, Tensor>(&x);
    let text = qb::jit(g).lower(&qb::array([1.0, 2.0])?)?.as_text_with_locations();
    let cos_line = text.lines().find(|l| l.contains("= cos(")).expect("a cos node");
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
