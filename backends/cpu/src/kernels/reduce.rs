//! Reductions (`sum`, `mean`, `sum_axis`, `mean_axis`, `max_axis`, `min_axis`) and `cumsum`.
//!
//! Every reduction accumulates in float64, sequentially in row-major order of the reduced
//! elements of each output position, starting from the same initial value as the reference
//! evaluator, and rounds once at the end (numerics.md §1.5). `cumsum` accumulates each line in
//! float64 and rounds every output once. Large reductions split over independent output
//! positions (outer indices or trailing columns), never inside one accumulation, so the split
//! does not change a value.

use crate::buffer::{Elem, View, ViewMut};
use crate::kernels::{internal, par_for_each, scratch, split_ranges, PAR_MIN_ELEMENTS};
use quabla_backend::Result;
use quabla_ir::eval::{maximum_ieee, minimum_ieee, SUM_START};
use quabla_ir::Reducer;

/// Expands `$body` with `$v` bound to the typed slice of a view.
macro_rules! with_elems {
    ($x:expr, $v:ident => $body:expr) => {
        match $x {
            View::F32($v) => $body,
            View::F64($v) => $body,
            View::Bool($v) => $body,
        }
    };
}

/// A reduction over all elements (`sum`, `mean`): one sequential float64 accumulation that
/// starts from `quabla_ir::eval::SUM_START` (`-0.0`), as the reference does.
pub(crate) fn reduce_all(kind: Reducer, x: View<'_>, mut out: ViewMut<'_>) -> Result<()> {
    let s = with_elems!(x, v => sum_seq(v));
    let value = match kind {
        Reducer::Sum => s,
        Reducer::Mean => s / x.len() as f64,
        _ => return Err(internal("a full reduction of max/min")),
    };
    out.store_f64(0, &[value]);
    Ok(())
}

fn sum_seq<T: Elem>(x: &[T]) -> f64 {
    let mut acc = SUM_START;
    for &v in x {
        acc += v.to_f64();
    }
    acc
}

#[inline(always)]
fn add(a: f64, b: f64) -> f64 {
    a + b
}

/// A reduction over `axes` (sorted, distinct) of an operand of shape `dims`.
pub(crate) fn reduce_axes(
    kind: Reducer,
    x: View<'_>,
    dims: &[usize],
    axes: &[usize],
    out: ViewMut<'_>,
    threads: usize,
) -> Result<()> {
    let blocks = blocks(dims, axes);
    let count: usize = axes.iter().map(|&a| dims[a]).product();
    let run = |acc: &mut [f64]| {
        match kind {
            Reducer::Sum | Reducer::Mean => {
                with_elems!(x, v => reduce_blocks(v, &blocks, SUM_START, add, acc, threads))
            }
            Reducer::Max => with_elems!(x, v => {
                reduce_blocks(v, &blocks, f64::NEG_INFINITY, maximum_ieee, acc, threads)
            }),
            Reducer::Min => with_elems!(x, v => {
                reduce_blocks(v, &blocks, f64::INFINITY, minimum_ieee, acc, threads)
            }),
        }
        if kind == Reducer::Mean {
            let n = count as f64;
            for a in acc.iter_mut() {
                *a /= n;
            }
        }
    };
    match out {
        ViewMut::F64(o) => run(o),
        mut other => {
            let mut acc = scratch(other.len())?;
            run(&mut acc);
            other.store_f64(0, &acc);
        }
    }
    Ok(())
}

/// Merges adjacent axes of the same kind (kept or reduced) and drops unit axes: `(extent,
/// reduced)` blocks, outermost first.
fn blocks(dims: &[usize], axes: &[usize]) -> Vec<(usize, bool)> {
    let mut out: Vec<(usize, bool)> = Vec::new();
    for (a, &d) in dims.iter().enumerate() {
        if d == 1 {
            continue;
        }
        let reduced = axes.contains(&a);
        match out.last_mut() {
            Some((e, r)) if *r == reduced => *e *= d,
            _ => out.push((d, reduced)),
        }
    }
    out
}

/// Reduces `x` (laid out as `blocks`) into `acc` (the kept positions, row-major).
fn reduce_blocks<T: Elem, F: Fn(f64, f64) -> f64 + Sync>(
    x: &[T],
    blocks: &[(usize, bool)],
    init: f64,
    f: F,
    acc: &mut [f64],
    threads: usize,
) {
    acc.fill(init);
    let parallel = threads > 1 && x.len() >= PAR_MIN_ELEMENTS;
    match blocks {
        // A leading kept block: independent slabs, one per outer index.
        [(outer, false), rest @ ..] => {
            let outer = *outer;
            let slab_in = x.len() / outer;
            let slab_out = acc.len() / outer;
            let parts = if parallel { threads } else { 1 };
            let mut items = Vec::new();
            let mut acc_rest = acc;
            for (start, end) in split_ranges(outer, parts, 1) {
                let (mine, next) = acc_rest.split_at_mut((end - start) * slab_out);
                acc_rest = next;
                items.push((start, end, mine));
            }
            par_for_each(items, threads, |(start, end, acc)| {
                for o in start..end {
                    let xs = &x[o * slab_in..(o + 1) * slab_in];
                    let acc = &mut acc[(o - start) * slab_out..(o - start + 1) * slab_out];
                    reduce_slab(xs, rest, &f, acc, 0, 0);
                }
            });
        }
        // Reduced rows of kept columns: split the columns.
        [(rows, true), (cols, false)] if parallel => {
            let (rows, cols) = (*rows, *cols);
            let mut items = Vec::new();
            let mut acc_rest = acc;
            for (start, end) in split_ranges(cols, threads, 64) {
                let (mine, next) = acc_rest.split_at_mut(end - start);
                acc_rest = next;
                items.push((start, end, mine));
            }
            par_for_each(items, threads, |(start, end, acc)| {
                for r in 0..rows {
                    let row = &x[r * cols + start..r * cols + end];
                    for (a, &v) in acc.iter_mut().zip(row) {
                        *a = f(*a, v.to_f64());
                    }
                }
            });
        }
        _ => reduce_slab(x, blocks, &f, acc, 0, 0),
    }
}

/// Sequential reduction of one slab whose blocks start with a reduced block (or are empty):
/// walks the input in row-major order, one contiguous run of the innermost block at a time.
fn reduce_slab<T: Elem, F: Fn(f64, f64) -> f64>(
    x: &[T],
    blocks: &[(usize, bool)],
    f: &F,
    acc: &mut [f64],
    mut i: usize,
    mut pos: usize,
) {
    let Some(&(inner, inner_reduced)) = blocks.last() else {
        // Every axis has extent 1: one element.
        acc[0] = f(acc[0], x[0].to_f64());
        return;
    };
    let outer = &blocks[..blocks.len() - 1];
    // Position strides of the kept outer blocks in `acc` (0 for reduced blocks).
    let mut kstride = vec![0usize; outer.len()];
    let mut s = if inner_reduced { 1 } else { inner };
    for b in (0..outer.len()).rev() {
        if !outer[b].1 {
            kstride[b] = s;
            s *= outer[b].0;
        }
    }
    let mut idx = vec![0usize; outer.len()];
    loop {
        let row = &x[i..i + inner];
        if inner_reduced {
            let mut a = acc[pos];
            for &v in row {
                a = f(a, v.to_f64());
            }
            acc[pos] = a;
        } else {
            for (a, &v) in acc[pos..pos + inner].iter_mut().zip(row) {
                *a = f(*a, v.to_f64());
            }
        }
        i += inner;
        let mut b = outer.len();
        loop {
            if b == 0 {
                return;
            }
            b -= 1;
            idx[b] += 1;
            pos += kstride[b];
            if idx[b] < outer[b].0 {
                break;
            }
            pos -= kstride[b] * outer[b].0;
            idx[b] = 0;
        }
    }
}

/// `cumsum` along `axis` of an operand of shape `dims`, from the end when `reverse`.
pub(crate) fn cumsum(
    x: View<'_>,
    dims: &[usize],
    axis: usize,
    reverse: bool,
    out: ViewMut<'_>,
    threads: usize,
) -> Result<()> {
    let outer: usize = dims[..axis].iter().product();
    let extent = dims[axis];
    let inner: usize = dims[axis + 1..].iter().product();
    let geometry = Lines {
        outer,
        extent,
        inner,
        reverse,
    };
    match (x, out) {
        (View::F32(x), ViewMut::F32(o)) => cumsum_typed(x, o, geometry, threads),
        (View::F64(x), ViewMut::F64(o)) => cumsum_typed(x, o, geometry, threads),
        _ => Err(internal("cumsum operand and result dtypes differ")),
    }
}

#[derive(Clone, Copy)]
struct Lines {
    outer: usize,
    extent: usize,
    inner: usize,
    reverse: bool,
}

fn cumsum_typed<T: Elem>(x: &[T], out: &mut [T], g: Lines, threads: usize) -> Result<()> {
    let slab = g.extent * g.inner;
    let parts = if threads > 1 && x.len() >= PAR_MIN_ELEMENTS && g.outer > 1 {
        threads
    } else {
        1
    };
    let mut items = Vec::new();
    let mut rest = out;
    for (start, end) in split_ranges(g.outer, parts, 1) {
        let (mine, next) = rest.split_at_mut((end - start) * slab);
        rest = next;
        // Each part's running sums, allocated here where a refusal can be reported.
        items.push((start, end, mine, scratch(g.inner)?));
    }
    par_for_each(items, threads, |(start, end, out, mut acc)| {
        for o in start..end {
            let xs = &x[o * slab..(o + 1) * slab];
            let os = &mut out[(o - start) * slab..(o - start + 1) * slab];
            acc.fill(SUM_START);
            for step in 0..g.extent {
                let k = if g.reverse { g.extent - 1 - step } else { step };
                let row = &xs[k * g.inner..(k + 1) * g.inner];
                let orow = &mut os[k * g.inner..(k + 1) * g.inner];
                for ((a, &v), o) in acc.iter_mut().zip(row).zip(orow.iter_mut()) {
                    *a += v.to_f64();
                    *o = T::from_f64(*a);
                }
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_merge_and_drop_unit_axes() {
        assert_eq!(
            blocks(&[2, 3, 1, 4], &[1, 2]),
            vec![(2, false), (3, true), (4, false)]
        );
        assert_eq!(blocks(&[2, 3, 4], &[0, 1]), vec![(6, true), (4, false)]);
        assert_eq!(blocks(&[1, 1], &[0]), vec![]);
    }

    #[test]
    fn interleaved_blocks_reduce_in_row_major_order() {
        // [2, 3, 2] reducing axes 0 and 2: out[j] = sum over i, k of x[i, j, k].
        let x: Vec<f64> = (0..12).map(|v| v as f64).collect();
        let mut acc = vec![0.0; 3];
        reduce_blocks(&x, &blocks(&[2, 3, 2], &[0, 2]), 0.0, add, &mut acc, 1);
        assert_eq!(
            acc,
            vec![
                0.0 + 1.0 + 6.0 + 7.0,
                2.0 + 3.0 + 8.0 + 9.0,
                4.0 + 5.0 + 10.0 + 11.0
            ]
        );
    }
}
