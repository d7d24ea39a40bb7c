//! What every derived region records and how it is called: the [`RegionForm`] and level of a
//! derivative of a region (so that printed programs name the derivative they hold), the call
//! of a derived region, and the error of a loop reverse mode cannot differentiate (TF2).
//!
//! Nothing here depends on a region's kind beyond its form; no rule is built here.

use quabla_ir::{GraphBuilder, IrError, NodeId, Region, RegionForm, Result};
use std::sync::Arc;

/// TF2: reverse mode through a `while` without a trip bound.
pub(super) fn tf2() -> IrError {
    IrError::Unsupported {
        op: "while_loop".into(),
        message: "reverse-mode differentiation through while_loop is not supported: the trip count depends on the data; bound it with while_loop(..).max_trips(n), or differentiate in forward mode (jvp)".into(),
    }
}

/// The form of the forward-mode derivative of a region. Forms name the primitive and the
/// kinds of its first two derivatives; deeper derivatives keep the form and count in the
/// region's level. Every order composes: a derivative of a loop is a loop.
pub(super) fn jvp_form(region: &Region) -> RegionForm {
    match region.form() {
        RegionForm::Fori if region.level() == 0 => RegionForm::ForiJvp,
        RegionForm::ForiVjp if region.level() == 1 => RegionForm::ForiVjpJvp,
        RegionForm::ScanVjp if region.level() == 1 => RegionForm::ScanVjpJvp,
        other => other,
    }
}

/// The form of the reverse-mode derivative of a region; see [`jvp_form`].
pub(super) fn vjp_form(region: &Region) -> RegionForm {
    let form = region.form();
    match form {
        RegionForm::Cond | RegionForm::While => form,
        RegionForm::Fori | RegionForm::ForiJvp if region.level() <= 1 => RegionForm::ForiVjp,
        RegionForm::ForiVjp | RegionForm::ForiJvp if region.level() == 1 => RegionForm::ForiVjpVjp,
        RegionForm::Scan if region.level() == 0 => RegionForm::ScanVjp,
        RegionForm::Scan | RegionForm::ScanVjp if region.level() == 1 => RegionForm::ScanVjpVjp,
        other => other,
    }
}

/// The derivative level of a derivative of `region`: one more for a loop; a `cond`'s
/// derivative is a `cond` of the same level.
pub(super) fn level_up(region: &Region) -> u8 {
    if region.form() == RegionForm::Cond {
        region.level()
    } else {
        region.level().saturating_add(1)
    }
}

/// Pushes one node per output of `region` applied to `operands`, next to each other.
pub(super) fn call(
    b: &mut GraphBuilder,
    region: Region,
    operands: &[NodeId],
) -> Result<Vec<NodeId>> {
    call_shared(b, Arc::new(region), operands)
}

/// [`call`] for a region that may be called elsewhere too.
pub(super) fn call_shared(
    b: &mut GraphBuilder,
    region: Arc<Region>,
    operands: &[NodeId],
) -> Result<Vec<NodeId>> {
    let n = region.output_types().len();
    b.push_region_calls(region, 0..n, operands)
}
