//! The sign rule of numerics.md §6.3 for eigenvectors and singular vectors.

use faer::reborrow::{Reborrow, ReborrowMut};
use faer::{ColMut, MatMut, MatRef};

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

/// Applies the sign rule to each column of `m` in `cols`, negating the matching column of
/// `partner` (if any) with it. Either matrix may be stored by rows or by columns; each is read
/// and written in its memory order (a row-major matrix row by row, every column's search
/// advancing together), so a factor written straight into a row-major output costs no more
/// than a column-major one.
pub(crate) fn apply_to_columns(
    m: MatMut<'_, f64>,
    partner: Option<MatMut<'_, f64>>,
    cols: core::ops::Range<usize>,
) {
    let (start, count) = (cols.start, cols.len());
    let signs = column_signs(m.rb().subcols(start, count));
    if signs.iter().all(|&s| s > 0.0) {
        return;
    }
    flip_columns(m.subcols_mut(start, count), &signs);
    if let Some(p) = partner {
        flip_columns(p.subcols_mut(start, count), &signs);
    }
}

/// [`largest_magnitude_sign`] of each column of `m`.
fn column_signs(m: MatRef<'_, f64>) -> Vec<f64> {
    if m.row_stride() == 1 || m.nrows() <= 1 {
        return (0..m.ncols())
            .map(|j| largest_magnitude_sign(m.col(j).iter().copied()))
            .collect();
    }
    // Rows in order, with a strict comparison: the first largest component of each column
    // wins ties, exactly as in `largest_magnitude_sign`.
    let mut best = vec![0.0f64; m.ncols()];
    let mut best_abs = vec![0.0f64; m.ncols()];
    for i in 0..m.nrows() {
        for ((x, b), b_abs) in m.row(i).iter().zip(&mut best).zip(&mut best_abs) {
            if x.abs() > *b_abs {
                *b_abs = x.abs();
                *b = *x;
            }
        }
    }
    best.iter()
        .map(|&b| if b < 0.0 { -1.0 } else { 1.0 })
        .collect()
}

/// Negates the columns `j` of `m` whose `signs[j]` is negative.
fn flip_columns(mut m: MatMut<'_, f64>, signs: &[f64]) {
    if m.row_stride() == 1 || m.nrows() <= 1 {
        for (j, &s) in signs.iter().enumerate() {
            if s < 0.0 {
                negate(m.rb_mut().col_mut(j));
            }
        }
        return;
    }
    // An exact negation (the sign bit flipped, as `-x` does) that vectorizes along a row.
    let masks: Vec<u64> = signs
        .iter()
        .map(|&s| if s < 0.0 { 1 << 63 } else { 0 })
        .collect();
    for i in 0..m.nrows() {
        for (x, &mask) in m.rb_mut().row_mut(i).iter_mut().zip(&masks) {
            *x = f64::from_bits(x.to_bits() ^ mask);
        }
    }
}

/// Negates `col` in place.
pub(crate) fn negate(col: ColMut<'_, f64>) {
    for x in col.iter_mut() {
        *x = -*x;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faer::Mat;

    /// Columns with ties, zeros, NaNs and one row, stored by rows and by columns: both walks
    /// give `largest_magnitude_sign` of each column, and flip exactly those columns.
    #[test]
    fn both_layouts_follow_the_rule_of_one_vector() {
        let columns: [[f64; 4]; 6] = [
            [0.1, -0.9, 0.5, 0.2],
            [-0.5, 0.5, 0.0, 0.1],
            [0.5, -0.5, -0.5, 0.0],
            [0.0, -0.0, 0.0, 0.0],
            [f64::NAN, -1.0, 0.5, f64::NAN],
            [-0.0, 2.0, -3.0, 3.0],
        ];
        let (rows, cols) = (4, columns.len());
        let expected: Vec<f64> = columns.iter().map(|c| largest_magnitude_sign(*c)).collect();
        assert_eq!(expected, [-1.0, -1.0, 1.0, 1.0, -1.0, -1.0]);
        let mut by_rows = vec![0.0; rows * cols];
        let mut by_cols = vec![0.0; rows * cols];
        for (j, c) in columns.iter().enumerate() {
            for (i, &x) in c.iter().enumerate() {
                by_rows[i * cols + j] = x;
                by_cols[j * rows + i] = x;
            }
        }
        let reference = Mat::from_fn(rows, cols, |i, j| {
            let x = columns[j][i];
            if expected[j] < 0.0 {
                -x
            } else {
                x
            }
        });
        let mut r = MatMut::from_row_major_slice_mut(&mut by_rows, rows, cols);
        let mut c = MatMut::from_column_major_slice_mut(&mut by_cols, rows, cols);
        assert_eq!(column_signs(r.rb()), expected);
        assert_eq!(column_signs(c.rb()), expected);
        apply_to_columns(r.rb_mut(), Some(c.rb_mut()), 0..cols);
        for i in 0..rows {
            for j in 0..cols {
                // Bits, so that NaN and the sign of zero are compared too.
                assert_eq!(
                    r[(i, j)].to_bits(),
                    reference[(i, j)].to_bits(),
                    "({i}, {j})"
                );
                assert_eq!(
                    c[(i, j)].to_bits(),
                    reference[(i, j)].to_bits(),
                    "({i}, {j})"
                );
            }
        }
    }
}
