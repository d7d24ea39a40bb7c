//! `clip_by_global_norm` (numerics.md §8.5): the global norm of a gradient tree, computed in
//! float64 with max-scaling, and the tree scaled by `min(1, max_norm / norm)`.
//!
//! The rules are written with elementwise selections over rank-0 tensors, not host branches,
//! so the same function runs eagerly (the functional optimizers) and inside the trainer's plan:
//! a NaN anywhere makes the norm NaN, an infinite entry makes it infinite, a non-finite norm
//! makes every clipped leaf all-NaN, and a zero norm returns the gradients unchanged.

use super::float_leaves;
use super::schedules::positive;
use crate::error::Result;
use crate::ops::compare::{equal, where_};
use crate::ops::elementwise::{isfinite, isnan, maximum, minimum};
use crate::tensor::Tensor;
use crate::tree::Tree;
use crate::DType;

/// The global norm (a float64 rank-0 tensor) of the leaves `grads` and each leaf scaled by
/// `min(1, max_norm / norm)` in float64 and rounded to its dtype.
pub(crate) fn clip_leaves(grads: &[Tensor], max_norm: f64) -> Result<(Vec<Tensor>, Tensor)> {
    let wide = grads
        .iter()
        .map(|g| g.astype(DType::F64))
        .collect::<Result<Vec<_>>>()?;
    if wide.is_empty() {
        return Ok((Vec::new(), crate::creation::array(0.0)?));
    }
    // m = max over all leaves of |g| (NaN anywhere gives NaN).
    let mut m = wide[0].abs()?.max()?;
    for g in &wide[1..] {
        m = maximum(&m, g.abs()?.max()?)?;
    }
    // The sum of squares of g / m, leaf by leaf in flatten order.
    let mut sum = (&wide[0] / &m)?.square()?.sum()?;
    for g in &wide[1..] {
        sum = (&sum + (g / &m)?.square()?.sum()?)?;
    }
    let scaled = (&m * sum.sqrt()?)?;
    let norm = where_(
        isnan(&m)?,
        f64::NAN,
        where_(
            equal(&m, f64::INFINITY)?,
            f64::INFINITY,
            where_(equal(&m, 0.0)?, 0.0, scaled)?,
        )?,
    )?;
    // A zero norm gives max_norm / 0 = inf and a factor of exactly 1.
    let factor = where_(
        isfinite(&norm)?,
        minimum(1.0, (max_norm / &norm)?)?,
        f64::NAN,
    )?;
    let clipped = grads
        .iter()
        .zip(&wide)
        .map(|(g, w)| (w * &factor)?.astype(g.dtype()))
        .collect::<Result<Vec<_>>>()?;
    Ok((clipped, norm))
}

/// Clips a gradient tree to a global norm: returns the clipped tree (each leaf in its own
/// dtype) and the norm over all leaves (float64, with max-scaling). A non-finite norm makes
/// every leaf all-NaN (test the norm with `is_finite` and skip the step); a zero norm returns
/// the gradients unchanged. AR4 for a `max_norm` that is not finite and positive, TY12 for a
/// leaf that is not a floating tensor.
///
/// ```
/// use quabla as qb;
/// use std::collections::BTreeMap;
/// let g = BTreeMap::from([("a".to_string(), qb::array([3.0])?), ("b".to_string(), qb::array([4.0])?)]);
/// let (clipped, norm) = qb::optim::clip_by_global_norm(&g, 1.0)?;
/// assert_eq!(norm, 5.0);
/// assert!((clipped["b"].to_vec::<f64>()?[0] - 0.8).abs() < 1e-15);
/// # Ok::<(), qb::Error>(())
/// ```
pub fn clip_by_global_norm<G: Tree>(grads: &G, max_norm: f64) -> Result<(G, f64)> {
    positive("max_norm", max_norm)?;
    let (leaves, def) = float_leaves("clip_by_global_norm", grads)?;
    let (clipped, norm) = clip_leaves(&leaves, max_norm)?;
    Ok((super::rebuild(&def, clipped)?, norm.item()?))
}
