//! Data movement: `transpose`, `broadcast`, `concat`, `slice`, `pad_slice`, `gather` and
//! `scatter_add` (`reshape` is an alias in the schedule and never copies; [`copy`] serves the
//! single-kernel form of an identity).
//!
//! These kernels move typed elements without converting them, except `scatter_add`, which
//! adds in float64 and rounds each result once (like the reference evaluator). Strided copies
//! first merge axes that are contiguous in both source and destination, then copy contiguous
//! runs (`copy_from_slice`), fill broadcast runs, or, for transposes whose innermost source axis
//! is not innermost in the result, copy in 32x32 blocks so that both sides stay in cache.

use crate::buffer::{Elem, View, ViewMut};
use crate::kernels::{internal, par_for_each, scratch, scratch_oom, split_ranges};
use quabla_backend::Result;
use smallvec::SmallVec;

/// Extents, strides or an index over the axes of one value, kept inline up to rank 8: the
/// kernels of a small plan run in well under a microsecond, and building these as heap
/// vectors (several per call) cost a fifth of a small transpose.
pub(crate) type Extents = SmallVec<[usize; 8]>;

/// Expands `$body` with `$s` and `$d` bound to same-typed source and destination slices.
macro_rules! same_type {
    ($x:expr, $out:expr => $s:ident, $d:ident, $body:expr) => {
        match ($x, $out) {
            (View::F32($s), ViewMut::F32($d)) => $body,
            (View::F64($s), ViewMut::F64($d)) => $body,
            (View::Bool($s), ViewMut::Bool($d)) => $body,
            _ => return Err(internal("operand and result dtypes differ")),
        }
    };
}

/// Row-major strides of `dims`.
pub(crate) fn strides(dims: &[usize]) -> Extents {
    let mut s: Extents = smallvec::smallvec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// A plain copy (`reshape` of a value that is still needed elsewhere, `stop_gradient`).
pub(crate) fn copy(x: View<'_>, out: ViewMut<'_>) -> Result<()> {
    same_type!(x, out => s, d, d.copy_from_slice(s));
    Ok(())
}

/// `transpose`: result axis `i` is operand axis `perm[i]`. A large matrix transpose splits
/// over `threads`.
pub(crate) fn transpose(
    x: View<'_>,
    dims: &[usize],
    perm: &[usize],
    out: ViewMut<'_>,
    threads: usize,
) -> Result<()> {
    let in_strides = strides(dims);
    let out_dims: Extents = perm.iter().map(|&p| dims[p]).collect();
    let src_strides: Extents = perm.iter().map(|&p| in_strides[p]).collect();
    same_type!(x, out => s, d, strided_copy(s, 0, &src_strides, &out_dims, d, threads));
    Ok(())
}

/// `slice`: the box at `starts` with extents `sizes`.
pub(crate) fn slice(
    x: View<'_>,
    dims: &[usize],
    starts: &[usize],
    sizes: &[usize],
    out: ViewMut<'_>,
) -> Result<()> {
    let st = strides(dims);
    let offset = starts.iter().zip(&st).map(|(a, b)| a * b).sum();
    same_type!(x, out => s, d, strided_copy(s, offset, &st, sizes, d, 1));
    Ok(())
}

/// `broadcast` (trailing-axis rules) of an operand of shape `dims` to `out_dims`.
pub(crate) fn broadcast(
    x: View<'_>,
    dims: &[usize],
    out_dims: &[usize],
    out: ViewMut<'_>,
) -> Result<()> {
    let src_strides = broadcast_strides(dims, out_dims);
    same_type!(x, out => s, d, strided_copy(s, 0, &src_strides, out_dims, d, 1));
    Ok(())
}

/// Strides that read an operand of shape `from` as if it had shape `to` (0 on broadcast axes).
pub(crate) fn broadcast_strides(from: &[usize], to: &[usize]) -> Extents {
    let own = strides(from);
    let lead = to.len() - from.len();
    (0..to.len())
        .map(|i| {
            if i < lead || from[i - lead] == 1 {
                0
            } else {
                own[i - lead]
            }
        })
        .collect()
}

/// Copies the `dims`-shaped iteration reading `src` at `offset + idx . src_strides` into the
/// contiguous `dst`.
pub(crate) fn strided_copy<E: Copy + Send + Sync>(
    src: &[E],
    offset: usize,
    src_strides: &[usize],
    dims: &[usize],
    dst: &mut [E],
    threads: usize,
) {
    // Merge axes that are contiguous in the source (the destination is always contiguous) and
    // drop unit axes.
    let mut d = Extents::new();
    let mut s = Extents::new();
    for (&e, &st) in dims.iter().zip(src_strides) {
        if e == 1 {
            continue;
        }
        if let (Some(pe), Some(ps)) = (d.last_mut(), s.last_mut()) {
            if *ps == st * e {
                *pe *= e;
                *ps = st;
                continue;
            }
        }
        d.push(e);
        s.push(st);
    }
    let rank = d.len();
    if rank == 0 {
        dst[0] = src[offset];
        return;
    }
    let last = rank - 1;
    if s[last] != 1 {
        if let Some(q) = s.iter().position(|&x| x == 1) {
            return blocked_transpose(src, offset, &s, &d, q, dst, threads);
        }
    }
    let (extent, stride) = (d[last], s[last]);
    let mut idx: Extents = smallvec::smallvec![0; last];
    let mut base = offset;
    let mut o = 0;
    loop {
        let out = &mut dst[o..o + extent];
        match stride {
            1 => out.copy_from_slice(&src[base..base + extent]),
            0 => out.fill(src[base]),
            _ => {
                for (j, v) in out.iter_mut().enumerate() {
                    *v = src[base + j * stride];
                }
            }
        }
        o += extent;
        if !advance(&mut idx, &d[..last], &s[..last], &mut base) {
            return;
        }
    }
}

/// Advances an odometer over `dims`, keeping `base` at `idx . strides` (plus its offset).
/// Returns false after the last index.
fn advance(idx: &mut [usize], dims: &[usize], strides: &[usize], base: &mut usize) -> bool {
    let mut a = idx.len();
    loop {
        if a == 0 {
            return false;
        }
        a -= 1;
        idx[a] += 1;
        *base += strides[a];
        if idx[a] < dims[a] {
            return true;
        }
        *base -= strides[a] * dims[a];
        idx[a] = 0;
    }
}

/// A strided copy whose source-contiguous axis `q` is not the innermost result axis: copies
/// 32x32 blocks of the (`q`, innermost) plane for every index of the other axes. A copy of one
/// plane (a matrix transpose) splits over `threads`: from [`PAR_MIN_COPY`] elements by rows of
/// blocks, from [`PAR_MIN_COLUMN_COPY`] by runs of result columns (source rows).
fn blocked_transpose<E: Copy + Send + Sync>(
    src: &[E],
    offset: usize,
    s: &[usize],
    d: &[usize],
    q: usize,
    dst: &mut [E],
    threads: usize,
) {
    let rank = d.len();
    let last = rank - 1;
    let ds = strides(d);
    let others: Extents = (0..rank).filter(|&a| a != q && a != last).collect();
    let plane = Plane {
        nq: d[q],
        nl: d[last],
        sl: s[last],
        dq: ds[q],
    };
    let size = plane.nq * plane.nl;
    if others.is_empty()
        && threads > 1
        && plane.nl >= 2 * BLOCK
        && plane.sl != 0
        && (PAR_MIN_COLUMN_COPY..PAR_MIN_COPY).contains(&size)
    {
        // Each thread copies a run of result columns, that is a run of source rows: the rows
        // an elementwise group or a product split the same way has just written from the
        // same thread, so each reads what its own cache holds. `dst` is the plane; each part
        // takes its segment of every result row.
        let bands = split_ranges(plane.nl.div_ceil(BLOCK), threads, 1);
        let mut parts: Vec<(usize, usize, Vec<&mut [E]>)> = bands
            .iter()
            .map(|&(first, end)| {
                let columns = (first * BLOCK, (end * BLOCK).min(plane.nl));
                (columns.0, columns.1, Vec::with_capacity(plane.nq))
            })
            .collect();
        for row in dst.chunks_mut(plane.dq).take(plane.nq) {
            let mut rest = row;
            for (start, end, segments) in parts.iter_mut() {
                let (segment, tail) = std::mem::take(&mut rest).split_at_mut(*end - *start);
                segments.push(segment);
                rest = tail;
            }
        }
        par_for_each(parts, threads, |(start, end, mut segments)| {
            plane.column_run(src, offset, (start, end), &mut segments);
        });
        return;
    }
    if others.is_empty() && threads > 1 && plane.nq > BLOCK && size >= PAR_MIN_COPY {
        // `dst` is the plane itself: consecutive rows of blocks are disjoint chunks of it, one
        // run of them per thread.
        let bands = split_ranges(plane.nq.div_ceil(BLOCK), threads, 1);
        let mut parts = Vec::with_capacity(bands.len());
        let mut rest = dst;
        for &(first, end) in &bands {
            let rows = ((end - first) * BLOCK).min(plane.nq - first * BLOCK);
            let (part, tail) = rest.split_at_mut((rows * plane.dq).min(rest.len()));
            parts.push((first * BLOCK, end * BLOCK, part));
            rest = tail;
        }
        par_for_each(parts, threads, |(start, end, part)| {
            for qb in (start..end.min(plane.nq)).step_by(BLOCK) {
                plane.block_row(src, offset, qb, &mut part[(qb - start) * plane.dq..]);
            }
        });
        return;
    }
    let odims: Extents = others.iter().map(|&a| d[a]).collect();
    let osrc: Extents = others.iter().map(|&a| s[a]).collect();
    let odst: Extents = others.iter().map(|&a| ds[a]).collect();
    let mut idx: Extents = smallvec::smallvec![0; others.len()];
    let (mut sbase, mut dbase) = (offset, 0usize);
    loop {
        for qb in (0..plane.nq).step_by(BLOCK) {
            plane.block_row(src, sbase, qb, &mut dst[dbase + qb * plane.dq..]);
        }
        // Advance the other axes in both bases at once.
        let mut a = others.len();
        loop {
            if a == 0 {
                return;
            }
            a -= 1;
            idx[a] += 1;
            sbase += osrc[a];
            dbase += odst[a];
            if idx[a] < odims[a] {
                break;
            }
            sbase -= osrc[a] * odims[a];
            dbase -= odst[a] * odims[a];
            idx[a] = 0;
        }
    }
}

/// Side of the cache blocks of [`blocked_transpose`]. (Copying a block as 8x8 tiles through
/// vector registers was faster on a value already in cache but slower inside a plan, where a
/// transpose reads what an earlier step wrote: the MLP step's transposes took 129–139 µs
/// that way against 97–99 µs row by row.)
const BLOCK: usize = 32;
/// Elements from which one plane's copy is split over threads by rows of blocks, each thread
/// reading every source row. Below it that split cost more than it saved on the 1024x64
/// transposes of an MLP step (inside a plan a transpose mostly reads a value another step has
/// just written, in the cache of whichever core wrote it); from 2 MiB of float64 it pays: a
/// 2048x2048 transpose takes 6.7 ms on one thread and 3.2 ms on two.
const PAR_MIN_COPY: usize = 1 << 18;

/// Elements from which a plane of fewer than [`PAR_MIN_COPY`] elements splits its result
/// columns over the threads (see [`blocked_transpose`]): each thread reads the source rows
/// a step split the same way wrote from that thread (the MLP step's 1024x64 transposes went
/// from 55 and 45 to 42 and 37 µs). A broadcast innermost axis (no source rows to follow)
/// is not split that way.
const PAR_MIN_COLUMN_COPY: usize = 1 << 15;

/// One (`q`, innermost) plane of a blocked transpose: `nq x nl` result elements, the source
/// element of result `(iq, il)` at `iq + il * sl` from the plane's source base, the result's
/// rows `dq` apart.
#[derive(Clone, Copy)]
struct Plane {
    nq: usize,
    nl: usize,
    sl: usize,
    dq: usize,
}

impl Plane {
    /// Copies result rows `qb .. qb + BLOCK` (fewer at the end) into `rows`, which starts at row
    /// `qb` of the plane.
    fn block_row<E: Copy>(&self, src: &[E], sbase: usize, qb: usize, rows: &mut [E]) {
        let Plane { nq, nl, sl, dq } = *self;
        let qe = (qb + BLOCK).min(nq);
        for lb in (0..nl).step_by(BLOCK) {
            let le = (lb + BLOCK).min(nl);
            for iq in qb..qe {
                let drow = (iq - qb) * dq;
                copy_block_row(
                    src,
                    sbase + iq + lb * sl,
                    sl,
                    &mut rows[drow + lb..drow + le],
                );
            }
        }
    }

    /// Copies result columns `start..end` of every result row into `segments` (result row
    /// `iq`'s columns `start..end` are `segments[iq]`), block by block.
    fn column_run<E: Copy>(
        &self,
        src: &[E],
        sbase: usize,
        (start, end): (usize, usize),
        segments: &mut [&mut [E]],
    ) {
        let Plane { nq, sl, .. } = *self;
        for qb in (0..nq).step_by(BLOCK) {
            let qe = (qb + BLOCK).min(nq);
            for lb in (start..end).step_by(BLOCK) {
                let le = (lb + BLOCK).min(end);
                for (iq, segment) in (qb..qe).zip(&mut segments[qb..qe]) {
                    let row = &mut segment[lb - start..le - start];
                    copy_block_row(src, sbase + iq + lb * sl, sl, row);
                }
            }
        }
    }
}

/// One row of a block: `row.len()` elements of `src` from `at`, `sl` apart (one element
/// repeated when `sl` is 0, a broadcast innermost axis). Slices and iterators rather than
/// indices: no bounds check per element.
#[inline(always)]
fn copy_block_row<E: Copy>(src: &[E], at: usize, sl: usize, row: &mut [E]) {
    if sl == 0 {
        row.fill(src[at]);
        return;
    }
    for (o, &v) in row.iter_mut().zip(src[at..].iter().step_by(sl)) {
        *o = v;
    }
}

/// `concat` along `axis` of operands `(view, dims)` into a result of shape `out_dims`.
pub(crate) fn concat(
    parts: &[(View<'_>, &[usize])],
    axis: usize,
    out_dims: &[usize],
    out: ViewMut<'_>,
) -> Result<()> {
    let outer: usize = out_dims[..axis].iter().product();
    let inner: usize = out_dims[axis + 1..].iter().product();
    fn run<T: Copy>(parts: &[(&[T], usize)], outer: usize, dst: &mut [T]) {
        let mut o = 0;
        for i in 0..outer {
            for &(src, chunk) in parts {
                dst[o..o + chunk].copy_from_slice(&src[i * chunk..(i + 1) * chunk]);
                o += chunk;
            }
        }
    }
    macro_rules! typed {
        ($variant:ident, $d:expr) => {{
            let mut typed = Vec::with_capacity(parts.len());
            for (v, dims) in parts {
                match v {
                    View::$variant(s) => typed.push((*s, dims[axis] * inner)),
                    _ => return Err(internal("concat operands differ in dtype")),
                }
            }
            run(&typed, outer, $d)
        }};
    }
    match out {
        ViewMut::F32(d) => typed!(F32, d),
        ViewMut::F64(d) => typed!(F64, d),
        ViewMut::Bool(d) => typed!(Bool, d),
        ViewMut::I32(d) => typed!(I32, d),
        ViewMut::I64(d) => typed!(I64, d),
    }
    Ok(())
}

/// `pad_slice`: the operand placed at `starts` in zeros of shape `out_dims`.
pub(crate) fn pad_slice(
    x: View<'_>,
    dims: &[usize],
    starts: &[usize],
    out_dims: &[usize],
    out: ViewMut<'_>,
) -> Result<()> {
    let ds = strides(out_dims);
    let offset: usize = starts.iter().zip(&ds).map(|(a, b)| a * b).sum();
    fn run<T: Elem>(src: &[T], dims: &[usize], ds: &[usize], offset: usize, dst: &mut [T]) {
        dst.fill(T::ZERO);
        let rank = dims.len();
        if rank == 0 {
            dst[offset] = src[0];
            return;
        }
        let last = rank - 1;
        let row = dims[last];
        let mut idx: Extents = smallvec::smallvec![0; last];
        let mut base = offset;
        let mut i = 0;
        loop {
            dst[base..base + row].copy_from_slice(&src[i..i + row]);
            i += row;
            if !advance(&mut idx, &dims[..last], &ds[..last], &mut base) {
                return;
            }
        }
    }
    same_type!(x, out => s, d, run(s, dims, &ds, offset, d));
    Ok(())
}

/// `gather` along `axis`: result index `j` on that axis reads `indices[j]`.
pub(crate) fn gather(
    x: View<'_>,
    dims: &[usize],
    axis: usize,
    indices: &[usize],
    out: ViewMut<'_>,
) -> Result<()> {
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    let extent = dims[axis];
    fn run<T: Copy>(
        src: &[T],
        dst: &mut [T],
        outer: usize,
        extent: usize,
        inner: usize,
        indices: &[usize],
    ) {
        let mut o = 0;
        for i in 0..outer {
            for &j in indices {
                let from = (i * extent + j) * inner;
                dst[o..o + inner].copy_from_slice(&src[from..from + inner]);
                o += inner;
            }
        }
    }
    same_type!(x, out => s, d, run(s, d, outer, extent, inner, indices));
    Ok(())
}

/// `scatter_add(base, updates)`: update slice `j` is added at `indices[j]` of `axis`, in
/// float64, in row-major order of the updates, each result rounded once.
pub(crate) fn scatter_add(
    base: View<'_>,
    updates: View<'_>,
    dims: &[usize],
    axis: usize,
    indices: &[usize],
    out: ViewMut<'_>,
) -> Result<()> {
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    let extent = dims[axis];
    let run = |acc: &mut [f64], u: &[f64]| {
        let mut k = 0;
        for i in 0..outer {
            for &j in indices {
                let to = (i * extent + j) * inner;
                for (a, &v) in acc[to..to + inner].iter_mut().zip(&u[k..k + inner]) {
                    *a += v;
                }
                k += inner;
            }
        }
    };
    let u = updates.as_f64().map_err(scratch_oom)?;
    match out {
        ViewMut::F64(d) => {
            base.load_f64(0, d);
            run(d, &u);
        }
        mut other => {
            let mut acc = scratch(other.len())?;
            base.load_f64(0, &mut acc);
            run(&mut acc, &u);
            other.store_f64(0, &acc);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_copy_of_a_broadcast_innermost_axis_repeats_the_element() {
        // Source-contiguous axis 0, innermost result axis a broadcast (stride 0).
        let x: Vec<f64> = (0..40).map(|v| v as f64).collect();
        let mut out = vec![f64::NAN; 40 * 35];
        strided_copy(&x, 0, &[1, 0], &[40, 35], &mut out, 1);
        for i in 0..40 {
            assert!(
                out[i * 35..(i + 1) * 35].iter().all(|&v| v == x[i]),
                "row {i}"
            );
        }
    }

    #[test]
    fn large_transposes_split_over_threads_copy_every_element() {
        // Full 32x32 blocks, ragged edges and fewer rows than a block, on 1, 2 and 3 threads;
        // the last shape is over `PAR_MIN_COPY`, so its rows of blocks split over them.
        for (r, c) in [
            (300, 130),
            (1024, 64),
            (64, 1024),
            (33, 1100),
            (2000, 17),
            (600, 450),
        ] {
            let x: Vec<f64> = (0..r * c).map(|v| v as f64).collect();
            let narrow: Vec<f32> = x.iter().map(|&v| v as f32).collect();
            for threads in [1, 2, 3] {
                let mut out = vec![f64::NAN; r * c];
                transpose(
                    View::F64(&x),
                    &[r, c],
                    &[1, 0],
                    ViewMut::F64(&mut out),
                    threads,
                )
                .unwrap();
                let mut out32 = vec![f32::NAN; r * c];
                let (x32, o32) = (View::F32(&narrow), ViewMut::F32(&mut out32));
                transpose(x32, &[r, c], &[1, 0], o32, threads).unwrap();
                for i in 0..r {
                    for j in 0..c {
                        assert_eq!(out[j * r + i], x[i * c + j], "{r}x{c} on {threads}");
                        assert_eq!(out32[j * r + i], narrow[i * c + j], "{r}x{c} on {threads}");
                    }
                }
            }
        }
    }

    #[test]
    fn split_transposes_match_naive() {
        // Shapes split by result columns (below PAR_MIN_COPY), by rows of blocks (from it),
        // and not at all, over one to three threads; ragged edges included.
        for (r, c) in [
            (1024, 64),
            (64, 1024),
            (1000, 37),
            (33, 1500),
            (600, 600),
            (200, 100),
        ] {
            let x: Vec<f64> = (0..r * c).map(|v| v as f64).collect();
            for threads in 1..=3 {
                let mut out = vec![-1.0; r * c];
                let dims = [r, c];
                transpose(
                    View::F64(&x),
                    &dims,
                    &[1, 0],
                    ViewMut::F64(&mut out),
                    threads,
                )
                .unwrap();
                for i in 0..r {
                    for j in 0..c {
                        assert_eq!(out[j * r + i], x[i * c + j], "{r}x{c}, {threads} threads");
                    }
                }
            }
        }
    }

    #[test]
    fn blocked_transpose_matches_naive() {
        let (r, c) = (37, 70);
        let x: Vec<f64> = (0..r * c).map(|v| v as f64).collect();
        let mut out = vec![0.0; r * c];
        transpose(View::F64(&x), &[r, c], &[1, 0], ViewMut::F64(&mut out), 1).unwrap();
        for i in 0..r {
            for j in 0..c {
                assert_eq!(out[j * r + i], x[i * c + j]);
            }
        }
        // Rank 3 with a batch axis in the middle of the result.
        let dims = [3, 4, 5];
        let x: Vec<f32> = (0..60).map(|v| v as f32).collect();
        let mut out = vec![0.0f32; 60];
        transpose(View::F32(&x), &dims, &[2, 0, 1], ViewMut::F32(&mut out), 1).unwrap();
        for a in 0..5 {
            for b in 0..3 {
                for c in 0..4 {
                    assert_eq!(out[(a * 3 + b) * 4 + c], x[(b * 4 + c) * 5 + a]);
                }
            }
        }
    }
}
