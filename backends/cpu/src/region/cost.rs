//! What one run of a loop body costs the interpreter, for the cost model that weighs the body's
//! machine code against it (`GraphBody::pays_off`): the steps of the body's schedule, and for
//! each region nested in it the work the interpreter would do on that region, counted from the
//! region's own compiled bodies. The machine code of a body counts the element passes of the
//! regions nested in it (a scan's once per trip), so the interpreter's side counts their steps
//! the same way: with the enclosing body's steps alone, a loop of a few steps around nested
//! scans (the reverse pass of an adaptive ODE solve) was always left to the interpreter. This
//! module only counts; the weighing is `native`'s.

use super::{Exec, RegionStep};
use crate::native::{GraphBody, Interpreted, OwnCode};
use crate::schedule::{Schedule, StepKind};

/// What one run of the body with schedule `schedule` and translated form `translated` costs
/// the interpreter: each step once, and each region step what its region costs
/// ([`RegionStep::interpreted`]). The loops nested in the body (at any depth) that the
/// interpreter would run as machine code of their own, were the loops around them
/// interpreted, are added to `own_code` with their element passes.
pub(super) fn interpreted(
    schedule: &Schedule,
    translated: &GraphBody,
    own_code: &mut OwnCode,
) -> Interpreted {
    let mut cost = Interpreted::steps(schedule.steps.len());
    for step in &schedule.steps {
        // Every region call of a schedule this runner compiled is one of its `RegionStep`s.
        let region = match &step.kind {
            StepKind::Region(call) => call.as_any().downcast_ref::<RegionStep>(),
            _ => None,
        };
        if let Some(region) = region {
            cost = cost.plus(region.interpreted(translated, own_code));
        }
    }
    cost
}

/// Adds `passes` element passes of the loop at address `region` to `own_code`.
fn add(own_code: &mut OwnCode, region: usize, passes: usize) {
    let sum = own_code.entry(region).or_default();
    *sum = sum.saturating_add(passes);
}

impl RegionStep {
    /// What the interpreter spends on one run of this region, nested in a body whose
    /// translated form is `enclosing`, beyond the region step itself: a `cond` its costlier
    /// branch; a loop its own machine code where that pays off (the loop then goes into
    /// `own_code`), else its bodies' costs, a scan's once per trip and a while loop's once
    /// (the counts of the machine code's side). A region the
    /// enclosing form does not hold (none: both are made from the same plan graph) costs
    /// nothing more.
    fn interpreted(&self, enclosing: &GraphBody, own_code: &mut OwnCode) -> Interpreted {
        let Some(translated) = enclosing.nested_bodies(self.region) else {
            return Interpreted::default();
        };
        let mut inner = OwnCode::new();
        let ((cost, native), trips) = match (&*self.exec, &translated[..]) {
            (
                Exec::Cond {
                    then_branch,
                    else_branch,
                },
                [then_form, else_form],
            ) => {
                let then_cost = interpreted(&then_branch.schedule, then_form, own_code);
                let else_cost = interpreted(&else_branch.schedule, else_form, own_code);
                return then_cost.costlier(else_cost);
            }
            (Exec::Scan(scan), [body_form]) => {
                let body = interpreted(&scan.body.schedule, body_form, &mut inner);
                (GraphBody::loop_cost(&[(body_form, body)]), scan.length)
            }
            (Exec::While { cond, body, .. }, [cond_form, body_form]) => {
                let cond = interpreted(&cond.schedule, cond_form, &mut inner);
                let body = interpreted(&body.schedule, body_form, &mut inner);
                (
                    GraphBody::loop_cost(&[(cond_form, cond), (body_form, body)]),
                    1,
                )
            }
            _ => return Interpreted::default(),
        };
        let cost = cost.times(trips);
        if native {
            add(own_code, self.region, cost.native_elements);
        }
        for (region, passes) in inner {
            add(own_code, region, passes.saturating_mul(trips));
        }
        cost
    }
}
