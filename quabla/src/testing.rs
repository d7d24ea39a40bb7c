//! `qb::testing::check_grads` (JAX's `check_grads`): the derivatives of a function checked
//! against central differences in float64, in forward and reverse mode, recursively to any
//! order, through the facade's own [`crate::jvp`] and [`crate::vjp`] — so what is checked is
//! exactly what a user composes.
//!
//! The algorithm is `quabla_autodiff::check::check_grads`, which every crate's derivative
//! tests share; this module only adapts a closure over tensors to it.

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use quabla_autodiff::check::{self, Array, Differentiable};

pub use quabla_autodiff::check::{Modes, Tolerance};

/// A function of float64 tensors, as the checker sees it.
struct Closure<'a> {
    f: Box<dyn Fn(Vec<Tensor>) -> Result<Vec<Tensor>> + 'a>,
}

fn tensors(arrays: &[Array]) -> std::result::Result<Vec<Tensor>, String> {
    arrays
        .iter()
        .map(|a| Tensor::from_vec(&a.shape, a.values.clone()).map_err(|e| e.to_string()))
        .collect()
}

impl Differentiable for Closure<'_> {
    fn eval(&self, inputs: &[Array]) -> std::result::Result<Vec<Array>, String> {
        let outs = (self.f)(tensors(inputs)?).map_err(|e| e.to_string())?;
        outs.iter()
            .map(|t| {
                let values = t.astype(crate::F64)?.to_vec::<f64>()?;
                Ok(Array::new(t.shape().to_vec(), values))
            })
            .collect::<Result<_>>()
            .map_err(|e: Error| e.to_string())
    }

    fn jvp(&self, n: usize) -> std::result::Result<Box<dyn Differentiable + '_>, String> {
        Ok(Box::new(Closure {
            f: Box::new(move |mut args: Vec<Tensor>| {
                let tangents = args.split_off(n);
                let (mut y, t) = crate::jvp(|x: Vec<Tensor>| (self.f)(x), &args, &tangents)?;
                y.extend(t);
                Ok(y)
            }),
        }))
    }

    fn vjp(&self, n: usize) -> std::result::Result<Box<dyn Differentiable + '_>, String> {
        Ok(Box::new(Closure {
            f: Box::new(move |mut args: Vec<Tensor>| {
                let cotangent = args.split_off(n);
                let (mut y, pullback) = crate::vjp(|x: Vec<Tensor>| (self.f)(x), &args)?;
                let ct: Vec<Tensor> = pullback.call(&cotangent)?;
                y.extend(ct);
                Ok(y)
            }),
        }))
    }
}

/// Checks the derivatives of `f` at `args` to `order` in `modes` against central differences
/// (see the module docs); `f` takes and returns float64 tensors. Directions come from `seed`.
///
/// ```
/// use quabla as qb;
/// use qb::prelude::*;
/// use qb::testing::{check_grads, Modes};
///
/// # fn main() -> qb::Result<()> {
/// let f = |x: Vec<qb::Tensor>| Ok(vec![x[0].sin().mul(&x[0])?]);
/// check_grads(f, &[qb::array([0.5, -1.0])?], 2, Modes::BOTH)?;
/// # Ok(())
/// # }
/// ```
pub fn check_grads<F>(f: F, args: &[Tensor], order: usize, modes: Modes) -> Result<()>
where
    F: Fn(Vec<Tensor>) -> Result<Vec<Tensor>>,
{
    check_grads_with(f, args, order, modes, Tolerance::default(), 0)
}

/// [`check_grads`] with a tolerance and a seed of its own.
pub fn check_grads_with<F>(
    f: F,
    args: &[Tensor],
    order: usize,
    modes: Modes,
    tolerance: Tolerance,
    seed: u64,
) -> Result<()>
where
    F: Fn(Vec<Tensor>) -> Result<Vec<Tensor>>,
{
    let x = args
        .iter()
        .map(|t| Ok(Array::new(t.shape().to_vec(), t.to_vec::<f64>()?)))
        .collect::<Result<Vec<_>>>()?;
    let closure = Closure { f: Box::new(f) };
    check::check_grads(&closure, &x, order, modes, tolerance, seed).map_err(|message| {
        Error::InvalidArgument {
            message: format!("check_grads: {message}"),
        }
    })
}
