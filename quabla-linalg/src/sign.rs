//! The sign rule of numerics.md §6.3 for eigenvectors and singular vectors.

use faer::reborrow::{Reborrow, ReborrowMut};
use faer::{ColMut, MatMut};

/// The rule, as worded in numerics.md §6.3 (for documentation and error messages).
pub const SIGN_RULE: &str = "each vector is scaled by +-1 so that its largest-magnitude component \
                             is positive (the first such component on ties)";

/// `-1.0` if the first largest-magnitude component of `v` is negative, else `1.0`.
///
/// Multiplying `v` by the result applies the sign rule of numerics.md §6.3 ("scaled by `+-1` so
/// that its largest-magnitude component is positive (the first such component on ties)").
/// Magnitudes are compared exactly, as computed: components whose exact values tie but whose
/// computed values differ in the last bit are not ties. NaN components are never the largest;
/// an empty, all-zero or all-NaN vector gives `1.0` (left unchanged).
pub fn largest_magnitude_sign(v: impl IntoIterator<Item = f64>) -> f64 {
    let mut best = 0.0f64;
    let mut best_abs = 0.0f64;
    for x in v {
        if x.abs() > best_abs {
            best_abs = x.abs();
            best = x;
        }
    }
    if best < 0.0 {
        -1.0
    } else {
        1.0
    }
}

/// Negates `col` in place.
pub(crate) fn negate(col: ColMut<'_, f64>) {
    for x in col.iter_mut() {
        *x = -*x;
    }
}

/// Applies the sign rule to each column of `m` in `cols`, negating the matching column of
/// `partner` (if any) with it.
pub(crate) fn apply_to_columns(
    mut m: MatMut<'_, f64>,
    mut partner: Option<MatMut<'_, f64>>,
    cols: core::ops::Range<usize>,
) {
    for j in cols {
        if largest_magnitude_sign(m.rb().col(j).iter().copied()) < 0.0 {
            negate(m.rb_mut().col_mut(j));
            if let Some(p) = partner.as_mut() {
                negate(p.rb_mut().col_mut(j));
            }
        }
    }
}
