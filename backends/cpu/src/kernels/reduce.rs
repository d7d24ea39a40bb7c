//! Reductions (`sum`, `mean`, `sum_axis`, `mean_axis`, `max_axis`, `min_axis`) and `cumsum`.
//!
//! Sums and means accumulate in float64 in the blocked order of numerics.md §1.5 over the
//! reduced elements of each output position in row-major order (blocks of
//! [`SUM_BLOCK`] elements, eight accumulators per block, block sums combined by the pairwise
//! tree), exactly as `quabla_ir::eval::blocked_sum` defines it, and round once at the end.
//! Inside a block the eight accumulators are independent, so they fill vector lanes; the blocks
//! of one sum are independent too and split over threads, and only their combination is
//! sequential, so neither the instruction set nor the thread count changes a bit. `max`/`min`
//! are exact in any order. `cumsum` accumulates each line sequentially in float64 and rounds
//! every output once.

use crate::buffer::{Elem, View, ViewMut};
use crate::kernels::{
    internal, par_for_each, scratch, scratch_oom, split_ranges, PAR_MIN_ELEMENTS,
};
use quabla_backend::Result;
use quabla_ir::alloc::{self, AllocError, Zeroable};
use quabla_ir::eval::{
    combine_lanes, maximum_ieee, minimum_ieee, pairwise_sum, SUM_BLOCK, SUM_LANES, SUM_START,
};
use quabla_ir::Reducer;
use std::sync::Mutex;

/// Expands `$body` with `$v` bound to the typed slice of a view.
macro_rules! with_elems {
    ($x:expr, $v:ident => $body:expr) => {
        match $x {
            View::F32($v) => $body,
            View::F64($v) => $body,
            View::Bool($v) => $body,
            View::I32($v) => $body,
            View::I64($v) => $body,
        }
    };
}

/// A float accumulator of the blocked order: float64, the reference, or float32, what a
/// float32 `sum`/`mean` compiled at `Precision::Float32` accumulates in (numerics.md §1.5).
trait Acc: Copy + Default + Send + Sync + std::ops::Add<Output = Self> + Zeroable {
    fn of<T: Elem>(v: T) -> Self;
    fn div_count(self, n: usize) -> Self;
}

impl Acc for f64 {
    #[inline(always)]
    fn of<T: Elem>(v: T) -> f64 {
        v.to_f64()
    }
    fn div_count(self, n: usize) -> f64 {
        self / n as f64
    }
}

impl Acc for f32 {
    /// Exact for float32 elements, the only ones a native float32 sum reads.
    #[inline(always)]
    fn of<T: Elem>(v: T) -> f32 {
        v.to_f64() as f32
    }
    fn div_count(self, n: usize) -> f32 {
        self / n as f32
    }
}

/// A working vector of `n` accumulators, allocated fallibly.
fn accumulators<A: Acc>(n: usize) -> Result<Vec<A>> {
    alloc::try_zeroed_vec(n).map_err(scratch_oom)
}

/// A reduction over all elements (`sum`, `mean`): one blocked sum, in float32 accumulators
/// when `native_f32`.
pub(crate) fn reduce_all(
    kind: Reducer,
    x: View<'_>,
    mut out: ViewMut<'_>,
    threads: usize,
    native_f32: bool,
) -> Result<()> {
    if !matches!(kind, Reducer::Sum | Reducer::Mean) {
        return Err(internal("a full reduction of max/min"));
    }
    let mean = kind == Reducer::Mean;
    if native_f32 {
        let (View::F32(v), ViewMut::F32(o)) = (x, &mut out) else {
            return Err(internal(
                "a native float32 sum of values that are not float32",
            ));
        };
        let s: f32 = contiguous_sum(v, threads)?;
        o[0] = if mean { s.div_count(v.len()) } else { s };
        return Ok(());
    }
    let s: f64 = with_elems!(x, v => contiguous_sum(v, threads))?;
    out.store_f64(0, &[if mean { s.div_count(x.len()) } else { s }]);
    Ok(())
}

/// The accumulators of one block of at most [`SUM_BLOCK`] contiguous elements, combined.
/// Lane `l` adds elements `l, l + 8, ...` in order; the lanes are independent, which lets the
/// compiler keep them in vector registers.
#[inline]
fn block_sum<T: Elem, A: Acc>(block: &[T]) -> A {
    let mut acc = [A::default(); SUM_LANES];
    let mut chunks = block.chunks_exact(SUM_LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = *a + A::of(v);
        }
    }
    for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
        *a = *a + A::of(v);
    }
    combine_lanes(&acc)
}

/// The blocked sum of a contiguous run, its blocks split over up to `threads` threads.
fn contiguous_sum<T: Elem, A: Acc>(x: &[T], threads: usize) -> Result<A> {
    let nblocks = x.len().div_ceil(SUM_BLOCK);
    if nblocks <= 1 {
        return Ok(block_sum(x));
    }
    let mut sums = accumulators::<A>(nblocks)?;
    let parts = if threads > 1 && x.len() >= PAR_MIN_ELEMENTS {
        threads
    } else {
        1
    };
    let mut items = Vec::new();
    let mut rest = &mut sums[..];
    for (start, end) in split_ranges(nblocks, parts, 1) {
        let (mine, next) = rest.split_at_mut(end - start);
        rest = next;
        items.push((start, mine));
    }
    par_for_each(items, threads, |(start, mine)| {
        for (b, s) in (start..).zip(mine.iter_mut()) {
            let end = ((b + 1) * SUM_BLOCK).min(x.len());
            *s = block_sum(&x[b * SUM_BLOCK..end]);
        }
    });
    Ok(pairwise_sum(&mut sums))
}

/// A reduction over `axes` (sorted, distinct) of an operand of shape `dims`; sums and means
/// in float32 accumulators when `native_f32`. `rows_split`: the operand was written split
/// by rows over the threads (`NodeStep::rows_split`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce_axes(
    kind: Reducer,
    x: View<'_>,
    dims: &[usize],
    axes: &[usize],
    mut out: ViewMut<'_>,
    threads: usize,
    native_f32: bool,
    rows_split: bool,
) -> Result<()> {
    let blocks = blocks(dims, axes);
    let count: usize = axes.iter().map(|&a| dims[a]).product();
    let mean = kind == Reducer::Mean;
    if native_f32 {
        let (View::F32(v), ViewMut::F32(o)) = (x, &mut out) else {
            return Err(internal(
                "a native float32 sum of values that are not float32",
            ));
        };
        sum_blocks(v, &blocks, o, threads, rows_split)?;
        if mean {
            o.iter_mut().for_each(|a| *a = a.div_count(count));
        }
        return Ok(());
    }
    let run = |acc: &mut [f64]| -> Result<()> {
        match kind {
            Reducer::Sum | Reducer::Mean => {
                with_elems!(x, v => sum_blocks(v, &blocks, acc, threads, rows_split))?
            }
            Reducer::Max => with_elems!(x, v => {
                reduce_blocks(v, &blocks, f64::NEG_INFINITY, maximum_ieee, acc, threads)
            }),
            Reducer::Min => with_elems!(x, v => {
                reduce_blocks(v, &blocks, f64::INFINITY, minimum_ieee, acc, threads)
            }),
        }
        if mean {
            acc.iter_mut().for_each(|a| *a = a.div_count(count));
        }
        Ok(())
    };
    match out {
        ViewMut::F64(o) => run(o),
        mut other => {
            let mut acc = scratch(other.len())?;
            run(&mut acc)?;
            other.store_f64(0, &acc);
            Ok(())
        }
    }
}

/// Blocked sums of `x` (laid out as `blocks`) into `acc` (the kept positions, row-major).
/// Sums down the columns of a matrix written split by rows over the threads (`rows_split`)
/// relay over those rows ([`column_sums_relayed`]).
fn sum_blocks<T: Elem, A: Acc>(
    x: &[T],
    blocks: &[(usize, bool)],
    acc: &mut [A],
    threads: usize,
    rows_split: bool,
) -> Result<()> {
    let parallel = threads > 1 && x.len() >= PAR_MIN_ELEMENTS;
    match blocks {
        // A leading kept block: independent slabs, one per outer index.
        [(outer, false), rest @ ..] => {
            let parts = if parallel { threads } else { 1 };
            per_slab(x, *outer, acc, parts, threads, |xs, acc| {
                slab_sums(xs, rest, acc, 1)
            })
        }
        &[(rows, true), (cols, false)]
            if rows_split
                && rows >= SUM_LANES * threads
                && super::team::relays(threads, std::mem::size_of_val(x)) =>
        {
            column_sums_relayed(x, cols, acc, threads)
        }
        _ => slab_sums(x, blocks, acc, threads),
    }
}

/// Runs `work` on each of the `outer` equal slabs of `x` with its part of `acc`, the slabs
/// split over `parts` threads; the first error any slab returns is the result.
fn per_slab<T: Elem, A: Acc>(
    x: &[T],
    outer: usize,
    acc: &mut [A],
    parts: usize,
    threads: usize,
    work: impl Fn(&[T], &mut [A]) -> Result<()> + Sync,
) -> Result<()> {
    let slab_in = x.len() / outer;
    let slab_out = acc.len() / outer;
    let mut items = Vec::new();
    let mut acc_rest = acc;
    for (start, end) in split_ranges(outer, parts, 1) {
        let (mine, next) = acc_rest.split_at_mut((end - start) * slab_out);
        acc_rest = next;
        items.push((start, end, mine));
    }
    let failed = Mutex::new(None);
    par_for_each(items, threads, |(start, end, acc)| {
        for o in start..end {
            let xs = &x[o * slab_in..(o + 1) * slab_in];
            let acc = &mut acc[(o - start) * slab_out..(o - start + 1) * slab_out];
            if let Err(e) = work(xs, acc) {
                if let Ok(mut f) = failed.lock() {
                    f.get_or_insert(e);
                }
                return;
            }
        }
    });
    match failed.into_inner() {
        Ok(None) => Ok(()),
        Ok(Some(e)) => Err(e),
        Err(_) => Err(internal("a reduction thread panicked")),
    }
}

/// Blocked sums of one slab whose blocks start with a reduced block (or are empty).
fn slab_sums<T: Elem, A: Acc>(
    x: &[T],
    blocks: &[(usize, bool)],
    acc: &mut [A],
    threads: usize,
) -> Result<()> {
    match blocks {
        // Every axis has extent 1, or one contiguous run per position.
        [] | [(_, true)] => {
            acc[0] = contiguous_sum(x, threads)?;
            Ok(())
        }
        // Reduced rows of kept columns: the columns split over threads.
        [(rows, true), (cols, false)] => {
            let (rows, cols) = (*rows, *cols);
            let parts = if threads > 1 && x.len() >= PAR_MIN_ELEMENTS {
                threads
            } else {
                1
            };
            let mut items = Vec::new();
            let mut acc_rest = acc;
            for (start, end) in split_ranges(cols, parts, 8) {
                let (mine, next) = acc_rest.split_at_mut(end - start);
                acc_rest = next;
                // Each part's lanes and block sums, allocated here where a refusal is reported.
                let lanes = accumulators::<A>(SUM_LANES * (end - start))?;
                let sums = accumulators::<A>(rows.div_ceil(SUM_BLOCK) * (end - start))?;
                items.push((start, mine, lanes, sums));
            }
            par_for_each(items, threads, |(start, acc, mut lanes, mut sums)| {
                column_sums(x, cols, start, acc, &mut lanes, &mut sums);
            });
            Ok(())
        }
        _ => strided_sums(x, blocks, acc),
    }
}

/// Blocked sums down the `rows` of a row-major matrix with `cols` columns, for the columns
/// `start..start + acc.len()`: row `r` of a block goes to lane `r % 8` of every column, so a
/// row is added to one contiguous lane of accumulators at a time. `lanes` holds
/// `SUM_LANES * width` accumulators, all `+0.0` on entry, and `sums` the `nblocks * width`
/// block sums.
fn column_sums<T: Elem, A: Acc>(
    x: &[T],
    cols: usize,
    start: usize,
    acc: &mut [A],
    lanes: &mut [A],
    sums: &mut [A],
) {
    let rows = x.len() / cols;
    let columns = Columns {
        cols,
        start,
        width: acc.len(),
        rows,
    };
    column_rows(x, columns, 0..rows, lanes, sums);
    finish_columns(columns, sums, acc);
}

/// [`column_sums`] of all the columns with the rows gone through in order by a relay of the
/// threads (`team::relay`), each taking (about) the band of rows its own core wrote (a split
/// step's bands), the lanes and block sums handed from one to the next. Split by columns, each
/// thread reads every row, half of them from the other core's cache: the MLP step's bias
/// gradients (1024 x 64 float64) took 27 µs each that way.
fn column_sums_relayed<T: Elem, A: Acc>(
    x: &[T],
    cols: usize,
    acc: &mut [A],
    threads: usize,
) -> Result<()> {
    let rows = x.len() / cols;
    let columns = Columns {
        cols,
        start: 0,
        width: cols,
        rows,
    };
    let mut lanes = accumulators::<A>(SUM_LANES * cols)?;
    let mut sums = accumulators::<A>(rows.div_ceil(SUM_BLOCK) * cols)?;
    let mut state = (&mut lanes[..], &mut sums[..]);
    super::team::relay_rows(
        rows,
        (threads, SUM_LANES),
        &mut state,
        |(lanes, sums), band| {
            column_rows(x, columns, band, lanes, sums);
        },
    );
    finish_columns(columns, &mut sums, acc);
    Ok(())
}

/// The columns `start..start + width` of a row-major matrix of `rows x cols`, summed down.
#[derive(Clone, Copy)]
struct Columns {
    cols: usize,
    start: usize,
    width: usize,
    rows: usize,
}

// A block starts at a multiple of the lanes, so row `r` of the matrix is row `r % 8` of its
// block's lanes.
const _: () = assert!(SUM_BLOCK.is_multiple_of(SUM_LANES));

/// Adds the rows `rows` (a run of the matrix's rows, in order after those added before) to
/// the columns' lanes, writing a block's sums into `sums` once its last row is in.
fn column_rows<T: Elem, A: Acc>(
    x: &[T],
    columns: Columns,
    rows: std::ops::Range<usize>,
    lanes: &mut [A],
    sums: &mut [A],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512<T: Elem, A: Acc>(
            x: &[T],
            columns: Columns,
            rows: std::ops::Range<usize>,
            lanes: &mut [A],
            sums: &mut [A],
        ) {
            column_rows_body(x, columns, rows, lanes, sums);
        }
        // SAFETY: AVX-512F was just detected at run time; the body is safe code (IEEE
        // additions, whose bits no instruction set changes).
        unsafe { avx512(x, columns, rows, lanes, sums) };
        return;
    }
    column_rows_body(x, columns, rows, lanes, sums);
}

#[inline(always)]
fn column_rows_body<T: Elem, A: Acc>(
    x: &[T],
    columns: Columns,
    rows: std::ops::Range<usize>,
    lanes: &mut [A],
    sums: &mut [A],
) {
    let (cols, start, width) = (columns.cols, columns.start, columns.width);
    for r in rows {
        let l = r % SUM_LANES;
        let lane = &mut lanes[l * width..(l + 1) * width];
        let row = &x[r * cols + start..r * cols + start + width];
        for (a, &v) in lane.iter_mut().zip(row) {
            *a = *a + A::of(v);
        }
        if (r + 1) % SUM_BLOCK == 0 || r + 1 == columns.rows {
            let b = r / SUM_BLOCK;
            for c in 0..width {
                let a: [A; SUM_LANES] = std::array::from_fn(|l| lanes[l * width + c]);
                sums[b * width + c] = combine_lanes(&a);
            }
            lanes.fill(A::default());
        }
    }
}

/// The pairwise tree of each column's block sums, all columns at once (row `b` of `sums`
/// holds block `b` of every column): the same additions as `pairwise_sum` per column.
fn finish_columns<A: Acc>(columns: Columns, sums: &mut [A], acc: &mut [A]) {
    let width = columns.width;
    let mut n = columns.rows.div_ceil(SUM_BLOCK);
    while n > 1 {
        let half = n / 2;
        for i in 0..half {
            // Row `i` is written after rows `2i` and `2i + 1` are read (`i <= 2i`).
            for c in 0..width {
                sums[i * width + c] = sums[2 * i * width + c] + sums[(2 * i + 1) * width + c];
            }
        }
        if n % 2 == 1 {
            sums.copy_within((n - 1) * width..n * width, half * width);
            n = half + 1;
        } else {
            n = half;
        }
    }
    acc.copy_from_slice(&sums[..width]);
}

/// Blocked sums for any other layout: the offsets of one position's reduced elements, in
/// row-major order, are listed once and read from each position's base offset.
fn strided_sums<T: Elem, A: Acc>(x: &[T], blocks: &[(usize, bool)], acc: &mut [A]) -> Result<()> {
    // Row-major strides of the blocks.
    let mut strides = vec![0usize; blocks.len()];
    let mut s = 1;
    for (b, &(extent, _)) in blocks.iter().enumerate().rev() {
        strides[b] = s;
        s *= extent;
    }
    let parts = |reduced: bool| -> Vec<(usize, usize)> {
        blocks
            .iter()
            .zip(&strides)
            .filter(|((_, r), _)| *r == reduced)
            .map(|(&(e, _), &st)| (e, st))
            .collect()
    };
    let reduced = row_major_offsets(&parts(true)).map_err(scratch_oom)?;
    let kept = row_major_offsets(&parts(false)).map_err(scratch_oom)?;
    let mut sums = accumulators::<A>(reduced.len().div_ceil(SUM_BLOCK))?;
    for (a, &base) in acc.iter_mut().zip(&kept) {
        for (s, chunk) in sums.iter_mut().zip(reduced.chunks(SUM_BLOCK)) {
            let mut lanes = [A::default(); SUM_LANES];
            for (k, &o) in chunk.iter().enumerate() {
                lanes[k % SUM_LANES] = lanes[k % SUM_LANES] + A::of(x[base + o]);
            }
            *s = combine_lanes(&lanes);
        }
        *a = pairwise_sum(&mut sums);
    }
    Ok(())
}

/// The offsets `Σ index_b * stride_b` of every multi-index over `(extent, stride)` parts,
/// outermost first, in row-major order (one offset, 0, for no parts).
fn row_major_offsets(parts: &[(usize, usize)]) -> std::result::Result<Vec<usize>, AllocError> {
    let count: usize = parts.iter().map(|p| p.0).product();
    let mut out = quabla_ir::alloc::try_vec_with_capacity(count)?;
    let mut idx = vec![0usize; parts.len()];
    let mut offset = 0;
    loop {
        out.push(offset);
        let mut b = parts.len();
        loop {
            if b == 0 {
                return Ok(out);
            }
            b -= 1;
            idx[b] += 1;
            offset += parts[b].1;
            if idx[b] < parts[b].0 {
                break;
            }
            offset -= parts[b].1 * parts[b].0;
            idx[b] = 0;
        }
    }
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
            let parts = if parallel { threads } else { 1 };
            // Infallible per slab, so the splitter has no error to report.
            let _ = per_slab(x, *outer, acc, parts, threads, |xs, acc| {
                reduce_slab(xs, rest, &f, acc, 0, 0);
                Ok(())
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

    fn add(a: f64, b: f64) -> f64 {
        a + b
    }

    #[test]
    fn blocks_merge_and_drop_unit_axes() {
        assert_eq!(
            blocks(&[2, 3, 1, 4], &[1, 2]),
            vec![(2, false), (3, true), (4, false)]
        );
        assert_eq!(blocks(&[2, 3, 4], &[0, 1]), vec![(6, true), (4, false)]);
        assert_eq!(blocks(&[1, 1], &[0]), vec![]);
    }

    /// Sums down the columns, split by columns, relayed over bands of rows or on one thread,
    /// have the bits of the blocked order's definition for every column, over one block,
    /// several (a band boundary inside a block) and a short last one; float32 accumulators
    /// relay the same way.
    #[test]
    fn column_sums_relayed_over_rows_have_the_bits_of_the_definition() {
        // One block; several, a band boundary inside one; a band boundary on a block
        // boundary (2048 rows on two threads); a short last block.
        for (rows, cols) in [
            (1024, 64),
            (2 * 1024 + 37, 5),
            (2048, 3),
            (24, 1),
            (3001, 9),
        ] {
            let x: Vec<f64> = (0..rows * cols)
                .map(|i| (i as f64 * 0.731).sin() * 10f64.powi((i % 7) as i32 - 3))
                .collect();
            let want: Vec<u64> = (0..cols)
                .map(|c| quabla_ir::eval::blocked_sum((0..rows).map(|r| x[r * cols + c])))
                .map(f64::to_bits)
                .collect();
            let blocks = blocks(&[rows, cols], &[0]);
            for threads in [1, 2, 3] {
                for rows_split in [false, true] {
                    let mut acc = vec![f64::NAN; cols];
                    sum_blocks(&x, &blocks, &mut acc, threads, rows_split).unwrap();
                    let got: Vec<u64> = acc.iter().map(|v| v.to_bits()).collect();
                    assert_eq!(got, want, "{rows}x{cols}, {threads} threads, {rows_split}");
                }
            }
            let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
            let want32: Vec<u32> = (0..cols)
                .map(|c| blocked_sum_f32((0..rows).map(|r| x32[r * cols + c])).to_bits())
                .collect();
            let mut one = vec![f32::NAN; cols];
            sum_blocks(&x32, &blocks, &mut one, 1, false).unwrap();
            let one: Vec<u32> = one.iter().map(|v| v.to_bits()).collect();
            assert_eq!(one, want32, "float32 {rows}x{cols} on one thread");
            for threads in [2, 3] {
                let mut got32 = vec![f32::NAN; cols];
                column_sums_relayed(&x32, cols, &mut got32, threads).unwrap();
                let got32: Vec<u32> = got32.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got32, want32, "float32 {rows}x{cols} relayed on {threads}");
            }
        }
    }

    /// The blocked order of numerics.md §1.5 with float32 accumulators (what a plan at
    /// `Precision::Float32` sums with), written out: blocks of 1024, element `k` of a block
    /// into accumulator `k mod 8`, the eight combined pairwise, the block sums by the
    /// pairwise tree.
    fn blocked_sum_f32(values: impl Iterator<Item = f32>) -> f32 {
        let values: Vec<f32> = values.collect();
        let mut sums: Vec<f32> = values
            .chunks(1024)
            .map(|block| {
                let mut acc = [0.0f32; 8];
                for (k, &v) in block.iter().enumerate() {
                    acc[k % 8] += v;
                }
                ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
            })
            .collect();
        while sums.len() > 1 {
            sums = sums
                .chunks(2)
                .map(|pair| pair.iter().skip(1).fold(pair[0], |a, &b| a + b))
                .collect();
        }
        sums.first().copied().unwrap_or(0.0)
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
