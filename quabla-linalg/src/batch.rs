//! Leading batch axes: length checks, per-matrix slicing and faer conversions.

use faer::reborrow::{Reborrow, ReborrowMut};
use faer::{ColRef, Mat, MatMut, MatRef};

use crate::LinalgError;

/// The number of matrices in an `[..., m, n]` array with the given leading axes (the product of
/// `leading_axes`, 1 for none), or [`LinalgError::Shape`] if the product overflows `usize`.
pub fn batch_size(leading_axes: &[usize]) -> Result<usize, LinalgError> {
    leading_axes
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| LinalgError::Shape {
            message: format!("batch axes {leading_axes:?} have more elements than fit in usize"),
        })
}

/// Checks that `len == batch * rows * cols` and returns the size of one matrix (`rows * cols`).
pub(crate) fn matrix_len(
    op: &str,
    operand: &str,
    len: usize,
    batch: usize,
    rows: usize,
    cols: usize,
) -> Result<usize, LinalgError> {
    let size = rows.checked_mul(cols);
    let total = size.and_then(|s| s.checked_mul(batch));
    match (size, total) {
        (Some(size), Some(total)) if total == len => Ok(size),
        (_, Some(total)) => Err(LinalgError::Shape {
            message: format!(
                "{op}: {operand} has {len} elements, expected {batch} matrices of {rows}x{cols} \
                 ({total} elements)"
            ),
        }),
        _ => Err(LinalgError::Shape {
            message: format!(
                "{op}: {batch} matrices of {rows}x{cols} have more elements than fit in usize"
            ),
        }),
    }
}

/// The `index`-th matrix of `size` elements of a checked batch (`size` may be 0).
pub(crate) fn matrix(data: &[f64], index: usize, size: usize) -> &[f64] {
    &data[index * size..(index + 1) * size]
}

/// A column-major faer copy of a row-major `rows x cols` matrix.
pub(crate) fn to_mat(data: &[f64], rows: usize, cols: usize) -> Mat<f64> {
    MatRef::from_row_major_slice(data, rows, cols).to_owned()
}

/// Appends `m` to `out` in row-major order (faer's strided copy: faer's factors are
/// column-major, and an element-by-element walk along their rows misses the cache).
pub(crate) fn push_row_major(m: MatRef<'_, f64>, out: &mut Vec<f64>) {
    let start = out.len();
    out.resize(start + m.nrows() * m.ncols(), 0.0);
    MatMut::from_row_major_slice_mut(&mut out[start..], m.nrows(), m.ncols()).copy_from(m);
}

/// Appends `count` NaNs to `out`.
pub(crate) fn push_nan(out: &mut Vec<f64>, count: usize) {
    out.extend(std::iter::repeat_n(f64::NAN, count));
}

/// Whether every element is finite.
pub(crate) fn all_finite(data: &[f64]) -> bool {
    data.iter().all(|x| x.is_finite())
}

/// Writes faer's eigenvalues or singular values sorted (ascending, or descending) into `out`
/// and returns the order that sorts them: `order[j]` is the position of the `j`-th value.
/// `None`, writing nothing, when a value is not finite (a failed decomposition). faer returns
/// them sorted already; they are sorted here too in case a version does not.
pub(crate) fn sorted_spectrum(
    values: ColRef<'_, f64>,
    descending: bool,
    out: &mut [f64],
) -> Option<Vec<usize>> {
    if !values.iter().all(|x| x.is_finite()) {
        return None;
    }
    let mut order: Vec<usize> = (0..values.nrows()).collect();
    if descending {
        order.sort_by(|&i, &j| values[j].total_cmp(&values[i]));
    } else {
        order.sort_by(|&i, &j| values[i].total_cmp(&values[j]));
    }
    for (o, &i) in out.iter_mut().zip(&order) {
        *o = values[i];
    }
    Some(order)
}

/// Whether `order` leaves every position where it is.
pub(crate) fn is_identity(order: &[usize]) -> bool {
    order.iter().enumerate().all(|(i, &o)| i == o)
}

/// A workspace for a faer kernel.
pub(crate) fn with_stack<R>(
    req: faer::dyn_stack::StackReq,
    f: impl FnOnce(&mut faer::dyn_stack::MemStack) -> R,
) -> R {
    let mut buf = faer::dyn_stack::MemBuffer::new(req);
    f(faer::dyn_stack::MemStack::new(&mut buf))
}

/// Column `j < order.len()` of `m` becomes its column `order[j]`.
pub(crate) fn permute_leading_columns(mut m: MatMut<'_, f64>, order: &[usize]) {
    let old = m.rb().to_owned();
    for (j, &from) in order.iter().enumerate() {
        m.rb_mut().col_mut(j).copy_from(old.col(from));
    }
}
