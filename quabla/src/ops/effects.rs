//! Operations with an effect: [`debug_print`], the one op that passes keep and never merge
//! (`quabla_ir::Op::is_effect`).

use crate::dispatch::apply;
use crate::error::Result;
use crate::operand::Operand;
use crate::tensor::Tensor;

/// Prints `format` with `{}` replaced by the value of `x`: immediately when `x` is concrete,
/// and each time the plan runs when `x` is traced (an effect node that `jit`'s passes keep and
/// never merge, so a print inside a jitted or differentiated function shows the run-time
/// value; under `vmap` each example prints on its own line, prefixed `[k]`). Derivatives pass
/// through it; values are printed as nested lists.
///
/// ```
/// use quabla as qb;
/// # fn main() -> qb::Result<()> {
/// let f = qb::jit(|x: qb::Tensor| {
///     let y = x.sin()?;
///     qb::debug_print("sin(x) = {}", &y)?;
///     y.sum()
/// });
/// let total: qb::Tensor = f.call(&qb::array([0.0, 1.0])?)?; // prints sin(x) = [0, 0.84...]
/// # let _ = total;
/// # Ok(())
/// # }
/// ```
#[track_caller]
pub fn debug_print(format: &str, x: &Tensor) -> Result<()> {
    let op = quabla_ir::Op::DebugPrint {
        format: format.to_string(),
        per_example: false,
    };
    apply(vec![Operand::from(x)], move |b, x| b.push(op, &[x[0]]))?;
    Ok(())
}
