//! Custom derivative rules and checkpointing: a `custom_vjp` and a `custom_jvp` of the stable
//! `log1pexp`, and a checkpointed 4-layer tanh net. Prints the value and the gradient of each,
//! which equal those of the plain functions. Run with
//! `cargo run --release --example custom_rules`.

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::io::Write;

/// One case: its name, value and flattened gradient.
#[derive(Debug)]
pub struct Case {
    pub name: &'static str,
    pub value: f64,
    pub grad: Vec<f64>,
}

fn log1pexp(x: &Tensor) -> qb::Result<Tensor> {
    x.exp().log1p()
}

fn layer((x, w, b): (Tensor, Tensor, Tensor)) -> qb::Result<Tensor> {
    x.matmul(&w).add(&b).tanh()
}

fn net(
    w: &Tensor,
    apply: &dyn Fn((Tensor, Tensor, Tensor)) -> qb::Result<Tensor>,
) -> qb::Result<Tensor> {
    let b = qb::array([0.1, 0.0])?;
    let mut x = qb::ones([3, 2])?;
    for _ in 0..4 {
        x = apply((x, w.clone(), b.clone()))?;
    }
    x.sum()
}

fn case(
    name: &'static str,
    f: &dyn Fn(Tensor) -> qb::Result<Tensor>,
    x: &Tensor,
) -> qb::Result<Case> {
    let (value, grad): (Tensor, Tensor) = qb::value_and_grad(f).call(x)?;
    Ok(Case {
        name,
        value: value.item()?,
        grad: grad.to_vec::<f64>()?,
    })
}

fn point() -> qb::Result<Tensor> {
    qb::array([-1.0, 0.5, 2.0])
}

fn weights() -> qb::Result<Tensor> {
    qb::array([[0.5, -0.2], [0.1, 0.3]])
}

/// The three cases computed with the custom rules.
pub fn custom_cases() -> qb::Result<Vec<Case>> {
    let vjp = qb::custom_vjp(|x: Tensor| log1pexp(&x))
        .name("log1pexp")
        .defvjp(
            |x: Tensor| Ok((log1pexp(&x)?, x)),
            |(x, g): (Tensor, Tensor)| &g * x.sigmoid()?,
        );
    let jvp = qb::custom_jvp(|x: Tensor| log1pexp(&x))
        .name("log1pexp")
        .defjvp(|(x, t): (Tensor, Tensor)| Ok((log1pexp(&x)?, (&t * x.sigmoid()?)?)));
    let layer_remat = qb::checkpoint(layer).name("layer");
    Ok(vec![
        case("custom_vjp", &|x| vjp.call(&x)?.sum(), &point()?)?,
        case("custom_jvp", &|x| jvp.call(&x)?.sum(), &point()?)?,
        case(
            "checkpoint",
            &|w| net(&w, &|args| layer_remat.call(&args)),
            &weights()?,
        )?,
    ])
}

/// The same three cases computed with the plain functions.
pub fn plain_cases() -> qb::Result<Vec<Case>> {
    Ok(vec![
        case("custom_vjp", &|x| log1pexp(&x)?.sum(), &point()?)?,
        case("custom_jvp", &|x| log1pexp(&x)?.sum(), &point()?)?,
        case("checkpoint", &|w| net(&w, &layer), &weights()?)?,
    ])
}

fn main() -> qb::Result<()> {
    run(&mut std::io::stdout().lock())
}

/// Writes one line per case to `out`: `name=<case> value=<v> grad=<g0>,<g1>,...`.
pub fn run(out: &mut impl Write) -> qb::Result<()> {
    for c in custom_cases()? {
        let grad: Vec<String> = c.grad.iter().map(f64::to_string).collect();
        let _ = writeln!(
            out,
            "name={} value={} grad={}",
            c.name,
            c.value,
            grad.join(",")
        );
    }
    Ok(())
}
