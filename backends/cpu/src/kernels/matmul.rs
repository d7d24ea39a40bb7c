//! Batched matrix products `[..., m, k] x [..., k, n]` with broadcast batch axes, through
//! faer's GEMM in float64.
//!
//! float32 operands are widened to float64, multiplied, and the result rounded to float32 once
//! (numerics.md §1.5); a large product on a machine with AVX-512 does that in one GEMM
//! that widens while it packs ([`widening`], with faer's bits); a plan compiled at
//! `Precision::Float32` multiplies them natively in float32 instead. Batches are
//! independent faer calls; large batched products split over threads by batch (the widening
//! GEMM's batches too), a single large product of many rows splits into bands of rows (one
//! sequential GEMM each), and a short one runs faer's parallel GEMM. None changes the order
//! in which an element accumulates, so a product has the same bits whatever the thread count
//! (tested against the sequential GEMM). Small products run our own kernel ([`small_gemm`]),
//! products of one column our own order at every size ([`matvec`]), and the outer products
//! faer would multiply one pass with its bits ([`outer`]). A left operand that is a
//! transposed matrix is read in place, with the bits of its copy's product
//! ([`lhs_transpose_folds`]). Products that go through the rows of an operand written split
//! over the threads, in an order that cannot split, relay over those rows
//! ([`matvec_transposed_relayed`], [`row_product_relayed`]).

use crate::buffer::{Buffer, Elem, Pool, Storage, View, ViewMut};
use crate::kernels::layout::broadcast_strides;
use crate::kernels::{
    internal, par_for_each, scratch, scratch_oom, split_ranges, PAR_MIN_ELEMENTS,
};
use faer::{Accum, MatMut, MatRef, Par};
use quabla_backend::{BackendError, Result};
use quabla_ir::alloc::{self, AllocError};
use quabla_ir::eval::{combine_lanes, SUM_LANES};
use quabla_ir::DType;
use smallvec::{smallvec, SmallVec};
use std::ops::{Add, AddAssign, Mul};

mod widening;
use widening::Lhs;

/// Products of at least this many multiply-adds use more than one thread. Measured with
/// `cargo xtask bench --scaling` on two cores: a 64x64 product (2^18) takes 10 us on one thread
/// and 18-30 us split, a 128x128 one (2^21) 76 us on one and 63 us split.
const PAR_MIN_FLOPS: usize = 1 << 21;
/// One-column products of at least this many multiply-adds split into bands of rows. They
/// read their matrix once at memory speed, and handing a band to the executor's helpers
/// (`team`) costs well under a microsecond: `1024x64 · 64x1` took 12.8 µs on one thread and
/// 7.2 µs split, its transposed-operand form 14.7 and 8.3 µs (in the MLP step).
const PAR_MIN_MATVEC_FLOPS: usize = 1 << 16;
/// Outer products ([`outer`]) of at least this many elements split into bands of rows: they
/// write their result at memory speed, and the step that reads it (the MLP step's `g W₃ᵀ`,
/// 1024×64) splits the same way, so each core writes what it reads next.
const PAR_MIN_OUTER: usize = 1 << 15;
/// A large product with at least this many rows per thread splits into bands of rows, each
/// a multiple of [`SPLIT_ALIGN_ROWS`] rows (the last takes the rest); a shorter one is left
/// to faer's parallel product, which splits columns too.
const SPLIT_MIN_ROWS: usize = 16;
const SPLIT_ALIGN_ROWS: usize = 8;

/// `c`, the rows of a `rows x width` matrix, cut into bands of rows for `threads` threads
/// (boundaries at multiples of `align` rows): `(first row, end row, the band)` each.
fn row_bands<T>(
    c: &mut [T],
    rows: usize,
    width: usize,
    threads: usize,
    align: usize,
) -> Vec<(usize, usize, &mut [T])> {
    let mut bands = Vec::with_capacity(threads);
    let mut rest = c;
    for (start, end) in split_ranges(rows, threads, align) {
        let (band, next) = std::mem::take(&mut rest).split_at_mut((end - start) * width);
        rest = next;
        bands.push((start, end, band));
    }
    bands
}

/// Whether one `m x k` by `k x n` product splits into bands of rows when it has two threads:
/// its result is then written in contiguous parts, one per thread. (With more threads a
/// product needs more rows for bands, so this is what the schedule assumes of the machine's
/// split, not a promise.)
pub(crate) fn splits_rows_when_threaded(m: usize, k: usize, n: usize) -> bool {
    in_bands(m, k, n, 2)
}

/// Whether one large `m x k` by `k x n` product splits into bands of rows over `threads`. A
/// one-column product needs only one aligned block of rows per thread: it never takes faer's
/// parallel product (see [`matvec`]), so a short and wide one splits here. An outer product
/// ([`outer`]) splits from [`PAR_MIN_OUTER`] elements.
fn in_bands(m: usize, k: usize, n: usize, threads: usize) -> bool {
    if k == 1 && outer_is_faers(m, n) {
        return threads > 1 && m * n >= PAR_MIN_OUTER && m >= SPLIT_ALIGN_ROWS * threads;
    }
    let (min_rows, min_flops) = if n == 1 {
        (SPLIT_ALIGN_ROWS, PAR_MIN_MATVEC_FLOPS)
    } else {
        (SPLIT_MIN_ROWS, PAR_MIN_FLOPS)
    };
    threads > 1 && m * k * n >= min_flops && m >= min_rows * threads
}

/// The element types faer multiplies for us: float64 (the reference) and float32 (native, at
/// `Precision::Float32`).
pub(crate) trait GemmElem:
    faer::traits::ComplexField
    + Copy
    + Send
    + Sync
    + Add<Output = Self>
    + AddAssign
    + Mul<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
    /// `self * a + b` with one rounding.
    fn mul_add(self, a: Self, b: Self) -> Self;
}

impl GemmElem for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    #[inline(always)]
    fn mul_add(self, a: f64, b: f64) -> f64 {
        f64::mul_add(self, a, b)
    }
}

impl GemmElem for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    #[inline(always)]
    fn mul_add(self, a: f32, b: f32) -> f32 {
        f32::mul_add(self, a, b)
    }
}

/// Defines the kernel `$name` (generic over [`GemmElem`]), which runs the
/// `#[inline(always)]` body `$body` compiled with AVX-512F and FMA where the CPU has them,
/// else with AVX2 and FMA, else for the baseline, and clears the upper vector state after a
/// vector build. The bodies use only `mul_add` and IEEE operations, and the baseline's
/// `mul_add` is the correctly rounded libm `fma`, so every build gives the same bits.
macro_rules! fma_builds {
    ($(#[$doc:meta])* fn $name:ident => $body:ident($($arg:ident: $ty:ty),* $(,)?)) => {
        $(#[$doc])*
        fn $name<T: GemmElem>($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,fma")]
                unsafe fn avx512<T: GemmElem>($($arg: $ty),*) {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2<T: GemmElem>($($arg: $ty),*) {
                    $body($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: AVX-512F and FMA were just detected at run time; the body is
                    // safe code.
                    unsafe { avx512($($arg),*) };
                    clear_upper_vector_state();
                    return;
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: AVX2 and FMA were just detected at run time; the body is safe
                    // code.
                    unsafe { avx2($($arg),*) };
                    clear_upper_vector_state();
                    return;
                }
            }
            $body($($arg),*)
        }
    };
}

/// One row-major `m x k` times `k x n` product into `c` (`m x n`), sequential: [`matvec`] for
/// one column, [`small_gemm`] up to [`SMALL_MAX_FLOPS`] multiply-adds, faer's GEMM above.
pub(crate) fn gemm<T: GemmElem>(a: &[T], b: &[T], c: &mut [T], m: usize, k: usize, n: usize) {
    if n == 1 {
        matvec(a, b, c, m, k);
    } else if k == 1 && outer_is_faers(m, n) {
        outer(a, b, c, m, n);
    } else if m * k * n <= SMALL_MAX_FLOPS {
        small_gemm(a, b, c, m, k, n);
    } else {
        gemm_on(a, b, c, m, k, n, Par::Seq);
    }
}

/// [`small_gemm`], or [`matvec`] for one column: the kernel [`gemm`] runs on a small product,
/// for any number of rows (a stack of small products runs as one).
fn small_or_matvec<T: GemmElem>(a: &[T], b: &[T], c: &mut [T], m: usize, k: usize, n: usize) {
    if n == 1 {
        matvec(a, b, c, m, k);
    } else {
        small_gemm(a, b, c, m, k, n);
    }
}

/// Accumulators of a one-column product's element (see [`matvec`]): those of a reduction's
/// block, combined by the same [`combine_lanes`] (numerics.md §1.5).
const MATVEC_LANES: usize = SUM_LANES;

fma_builds!(
    /// `c = a v` for a row-major `m x k` matrix `a` and a vector `v` of `k` elements (a product of
    /// one column), in our own order, whatever the size and layout: term `p` of an element goes to
    /// accumulator `p mod 8` by one fused multiply-add (each accumulator from `+0.0`, its terms in
    /// order), and the eight are combined by [`combine_lanes`]. The order reads a row (eight
    /// consecutive terms per vector) and a transposed matrix (eight accumulators per element of a
    /// row of `c`, [`matvec_transposed`]) at full vector speed, so a transposed operand is read in
    /// place with the same bits; faer's matrix-vector products change their order with the layout.
    fn matvec => matvec_body(a: &[T], v: &[T], c: &mut [T], m: usize, k: usize)
);

/// Rows of [`matvec`] computed together: their accumulator chains interleave, so the
/// multiply-adds are not waiting on each other.
const MATVEC_ROWS: usize = 4;

#[inline(always)]
fn matvec_body<T: GemmElem>(a: &[T], v: &[T], c: &mut [T], m: usize, k: usize) {
    let full = k - k % MATVEC_LANES;
    let mut i = 0;
    while i + MATVEC_ROWS <= m {
        let rows: [&[T]; MATVEC_ROWS] = std::array::from_fn(|r| &a[(i + r) * k..(i + r + 1) * k]);
        let mut acc = [[T::ZERO; MATVEC_LANES]; MATVEC_ROWS];
        for p in (0..full).step_by(MATVEC_LANES) {
            let vs: &[T; MATVEC_LANES] = v[p..p + MATVEC_LANES].try_into().expect("8 terms");
            for (acc, row) in acc.iter_mut().zip(&rows) {
                let xs: &[T; MATVEC_LANES] = row[p..p + MATVEC_LANES].try_into().expect("8 terms");
                for l in 0..MATVEC_LANES {
                    acc[l] = xs[l].mul_add(vs[l], acc[l]);
                }
            }
        }
        for (r, (acc, row)) in acc.iter_mut().zip(&rows).enumerate() {
            for p in full..k {
                acc[p - full] = row[p].mul_add(v[p], acc[p - full]);
            }
            c[i + r] = combine_lanes(acc);
        }
        i += MATVEC_ROWS;
    }
    for (i, ci) in c.iter_mut().enumerate().take(m).skip(i) {
        let row = &a[i * k..(i + 1) * k];
        let mut acc = [T::ZERO; MATVEC_LANES];
        for (p, (&x, &vp)) in row.iter().zip(v).enumerate() {
            acc[p % MATVEC_LANES] = x.mul_add(vp, acc[p % MATVEC_LANES]);
        }
        *ci = combine_lanes(&acc);
    }
}

/// Columns of `c` a [`matvec_transposed`] pass accumulates at once (their eight accumulators
/// each stay in the first-level cache).
const MATVEC_COLUMNS: usize = 256;

fma_builds!(
    /// `c = xᵀ v` for columns `first..first + c.len()` of the row-major `k x m` matrix `x`, with
    /// the bits of [`matvec`] on the copied transpose: element `i` accumulates `x[p][i] v[p]` into
    /// accumulator `p mod 8`, for `p` in order.
    fn matvec_transposed => matvec_transposed_body(
        x: &[T],
        v: &[T],
        c: &mut [T],
        shape: (usize, usize),
        first: usize,
    )
);

#[inline(always)]
fn matvec_transposed_body<T: GemmElem>(
    x: &[T],
    v: &[T],
    c: &mut [T],
    (k, m): (usize, usize),
    first: usize,
) {
    let mut acc = [[T::ZERO; MATVEC_COLUMNS]; MATVEC_LANES];
    for (chunk, c) in c.chunks_mut(MATVEC_COLUMNS).enumerate() {
        let start = first + chunk * MATVEC_COLUMNS;
        let width = c.len();
        for lane in acc.iter_mut() {
            lane[..width].fill(T::ZERO);
        }
        for (p, &vp) in v.iter().enumerate().take(k) {
            let row = &x[p * m + start..p * m + start + width];
            let lane = &mut acc[p % MATVEC_LANES][..width];
            for (a, &xp) in lane.iter_mut().zip(row) {
                *a = xp.mul_add(vp, *a);
            }
        }
        for (j, cj) in c.iter_mut().enumerate() {
            let lanes: [T; MATVEC_LANES] = std::array::from_fn(|l| acc[l][j]);
            *cj = combine_lanes(&lanes);
        }
    }
}

/// [`matvec_transposed`] of all of `c` with the rows of `x` gone through in order by a relay
/// of the threads (`team::relay`), each taking (about) the band of rows its own core wrote
/// (the bands of a split step), with the accumulators `acc` (`8 m`, zeroed) handed from one to
/// the next. Split by columns instead, each thread reads every row, half of them from the
/// other core's cache: the MLP step's `hᵀ g` took 28 µs that way, for 512 KiB.
fn matvec_transposed_relayed<T: GemmElem>(
    x: &[T],
    v: &[T],
    c: &mut [T],
    (k, m): (usize, usize),
    acc: &mut [T],
    threads: usize,
) {
    super::team::relay_rows(k, (threads, SPLIT_ALIGN_ROWS), acc, |acc, rows| {
        matvec_transposed_rows(x, v, acc, m, rows);
    });
    for (j, cj) in c.iter_mut().enumerate() {
        let lanes: [T; MATVEC_LANES] = std::array::from_fn(|l| acc[l * m + j]);
        *cj = combine_lanes(&lanes);
    }
}

/// `c = xᵀ b` for a vector `x` of `k` elements (the `k x 1` matrix whose transpose is one
/// row) and the `k x n` matrix `b`, the rows of `b` gone through in order by a relay of the
/// threads (`team::relay`), each taking (about) the band its own core wrote, `c` itself the
/// accumulators handed from one to the next. The order is faer's for a one-row product, the
/// same as [`small_gemm`]'s: element `j` accumulates `x[p] b[p][j]` from `+0.0` by one fused
/// multiply-add per term, `p` in order (checked against faer, signed zeros included, in
/// `one_row_products_relayed_have_faers_bits`). The MLP step's first-layer weight gradient
/// `xᵀ g` read half of `g` from the other core's cache in one faer call: 21 µs.
fn row_product_relayed<T: GemmElem>(
    x: &[T],
    b: &[T],
    c: &mut [T],
    (k, n): (usize, usize),
    threads: usize,
) {
    c.fill(T::ZERO);
    super::team::relay_rows(k, (threads, SPLIT_ALIGN_ROWS), c, |c, rows| {
        row_product_rows(x, b, c, n, rows);
    });
}

fma_builds!(
    /// Rows `rows` of `b` (`k x n`) into `c`, the running sums of `xᵀ b`
    /// ([`row_product_relayed`]'s order).
    fn row_product_rows => row_product_rows_body(
        x: &[T],
        b: &[T],
        c: &mut [T],
        n: usize,
        rows: std::ops::Range<usize>,
    )
);

#[inline(always)]
fn row_product_rows_body<T: GemmElem>(
    x: &[T],
    b: &[T],
    c: &mut [T],
    n: usize,
    rows: std::ops::Range<usize>,
) {
    for p in rows {
        let xp = x[p];
        for (cj, &bpj) in c.iter_mut().zip(&b[p * n..(p + 1) * n]) {
            *cj = xp.mul_add(bpj, *cj);
        }
    }
}

fma_builds!(
    /// Rows `rows` of `x` (`k x m`) into the accumulators of `xᵀ v` ([`matvec_transposed`]'s
    /// order: term `p` of column `i` into `acc[(p mod 8) m + i]` by one fused multiply-add).
    fn matvec_transposed_rows => matvec_transposed_rows_body(
        x: &[T],
        v: &[T],
        acc: &mut [T],
        m: usize,
        rows: std::ops::Range<usize>,
    )
);

#[inline(always)]
fn matvec_transposed_rows_body<T: GemmElem>(
    x: &[T],
    v: &[T],
    acc: &mut [T],
    m: usize,
    rows: std::ops::Range<usize>,
) {
    // In chunks of columns whose eight lanes stay in the first-level cache (a column's terms
    // keep their order; the chunks are independent).
    for first in (0..m).step_by(MATVEC_COLUMNS) {
        let end = (first + MATVEC_COLUMNS).min(m);
        for p in rows.clone() {
            let lane = p % MATVEC_LANES;
            let lane = &mut acc[lane * m + first..lane * m + end];
            let vp = v[p];
            for (a, &xp) in lane.iter_mut().zip(&x[p * m + first..p * m + end]) {
                *a = xp.mul_add(vp, *a);
            }
        }
    }
}

/// Whether faer's GEMM would multiply the outer product of an `m x 1` and a `1 x n` matrix
/// (two or more columns, more than [`SMALL_MAX_FLOPS`] terms): [`outer`] then gives its bits.
/// Smaller ones run [`small_gemm`], which adds the one term to `+0.0` (an exact zero product
/// of either sign is `+0.0` there), and one-column ones [`matvec`].
fn outer_is_faers(m: usize, n: usize) -> bool {
    n >= 2 && m * n > SMALL_MAX_FLOPS
}

fma_builds!(
    /// `c = a b` for `a` of `m x 1` and `b` of `1 x n`: every element the one IEEE product
    /// `a[i] * b[j]`, which is what faer's GEMM computes for a product of depth one of two
    /// or more rows (it takes the one term as it is, so an exact zero product keeps its sign;
    /// tested against faer on signed zeros, underflow, infinities and NaN).
    fn outer => outer_body(a: &[T], b: &[T], c: &mut [T], m: usize, n: usize)
);

#[inline(always)]
fn outer_body<T: GemmElem>(a: &[T], b: &[T], c: &mut [T], m: usize, n: usize) {
    for (row, &ai) in c.chunks_exact_mut(n).zip(&a[..m]) {
        for (cij, &bj) in row.iter_mut().zip(&b[..n]) {
            *cij = ai * bj;
        }
    }
}

/// Products of at most this many multiply-adds (and two or more columns) run [`small_gemm`]. faer's
/// GEMM costs about a microsecond per call before it multiplies anything (dispatch on shape and
/// instruction set, packing), which dominated the small products of a per-point derivative: a
/// `vmap` over 32 points of a 16-wide layer is 32 products of `1 x 16` by `16 x 16`, 1.6 us through
/// faer and 0.15 us here. Above it, faer's blocked kernels win.
const SMALL_MAX_FLOPS: usize = 1 << 13;

fma_builds!(
    /// `c = a b` for small row-major matrices. Every element is accumulated from `+0.0` over
    /// `p = 0..k` in order, each term added by one fused multiply-add (`acc = fma(a_ip, b_pj,
    /// acc)`, one rounding per term). The order does not depend on the shape around the element,
    /// so a row of a batched or stacked product has the bits of the same row multiplied alone,
    /// and the vector width (AVX-512, AVX2 or the scalar fallback, whose `mul_add` is the
    /// correctly rounded libm `fma`) changes nothing.
    fn small_gemm => small_gemm_body(a: &[T], b: &[T], c: &mut [T], m: usize, k: usize, n: usize)
);

#[inline(always)]
fn small_gemm_body<T: GemmElem>(a: &[T], b: &[T], c: &mut [T], m: usize, k: usize, n: usize) {
    let full_rows = m - m % SMALL_ROWS;
    let mut i = 0;
    while i < full_rows {
        small_rows::<T, SMALL_ROWS>(a, b, c, i, k, n);
        i += SMALL_ROWS;
    }
    while i < m {
        small_rows::<T, 1>(a, b, c, i, k, n);
        i += 1;
    }
}

/// Rows of `c` computed together by [`small_gemm`], and the columns of one block: their
/// `SMALL_ROWS x SMALL_COLS` accumulators stay in registers over the whole `p` loop.
const SMALL_ROWS: usize = 4;
const SMALL_COLS: usize = 8;

/// Rows `i..i + R` of `c = a b` ([`small_gemm`]'s order for every element).
#[inline(always)]
fn small_rows<T: GemmElem, const R: usize>(
    a: &[T],
    b: &[T],
    c: &mut [T],
    i: usize,
    k: usize,
    n: usize,
) {
    let a_rows: [&[T]; R] = std::array::from_fn(|r| &a[(i + r) * k..(i + r + 1) * k]);
    let full_cols = n - n % SMALL_COLS;
    let mut j = 0;
    while j < full_cols {
        let mut acc = [[T::ZERO; SMALL_COLS]; R];
        for p in 0..k {
            let b_p: &[T; SMALL_COLS] = b[p * n + j..p * n + j + SMALL_COLS]
                .try_into()
                .expect("a block of SMALL_COLS columns");
            for r in 0..R {
                let a_rp = a_rows[r][p];
                for w in 0..SMALL_COLS {
                    acc[r][w] = a_rp.mul_add(b_p[w], acc[r][w]);
                }
            }
        }
        for (r, acc_r) in acc.iter().enumerate() {
            c[(i + r) * n + j..(i + r) * n + j + SMALL_COLS].copy_from_slice(acc_r);
        }
        j += SMALL_COLS;
    }
    for j in full_cols..n {
        let mut acc = [T::ZERO; R];
        for p in 0..k {
            let b_pj = b[p * n + j];
            for r in 0..R {
                acc[r] = a_rows[r][p].mul_add(b_pj, acc[r]);
            }
        }
        for (r, &v) in acc.iter().enumerate() {
            c[(i + r) * n + j] = v;
        }
    }
}

/// [`gemm`] with faer's parallelism `par`: faer splits blocks of the result over its threads
/// and shares the packed operands between them; every element accumulates in the order of
/// the sequential product.
fn gemm_on<T: GemmElem>(a: &[T], b: &[T], c: &mut [T], m: usize, k: usize, n: usize, par: Par) {
    let a = MatRef::from_row_major_slice(a, m, k);
    let b = MatRef::from_row_major_slice(b, k, n);
    faer_product(MatMut::from_row_major_slice_mut(c, m, n), a, b, par);
}

/// `c = a b` by faer's product: every path that multiplies with faer calls it the same way,
/// which the bit-identity of bands, transposed views and depth parts relies on.
fn faer_product<T: GemmElem>(c: MatMut<'_, T>, a: MatRef<'_, T>, b: MatRef<'_, T>, par: Par) {
    faer::linalg::matmul::matmul(c, Accum::Replace, a, b, T::ONE, par);
    clear_upper_vector_state();
}

/// `(m, k, n)` and the batch index pairs of a `matmul` of operands of shapes `a_dims` and
/// `b_dims` into a result of shape `out_dims`.
/// One pair is kept inline: most products of a plan are unbatched, and a heap vector for
/// their single pair was an allocation per call.
type Geometry = (usize, usize, usize, Pairs);

/// Batch index pairs of a product.
type Pairs = SmallVec<[(usize, usize); 1]>;

fn geometry(a_dims: &[usize], b_dims: &[usize], out_dims: &[usize]) -> Result<Geometry> {
    let r = out_dims.len();
    let (m, n) = (out_dims[r - 2], out_dims[r - 1]);
    let k = a_dims[a_dims.len() - 1];
    let pairs = batch_pairs(
        &a_dims[..a_dims.len() - 2],
        &b_dims[..b_dims.len() - 2],
        &out_dims[..r - 2],
    )
    .map_err(|e| BackendError::out_of_memory(e.bytes, "the batch index pairs of a matmul"))?;
    Ok((m, k, n, pairs))
}

/// How a product runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Product {
    /// Threads it may use.
    pub threads: usize,
    /// float32 operands in a plan compiled at `Precision::Float32` (numerics.md §1.5).
    pub native_f32: bool,
    /// `a` is the `k x m` matrix whose transpose is the left operand (a `transpose` the
    /// schedule folded into the product, [`lhs_transpose_folds`]).
    pub lhs_transposed: bool,
    /// Whether the rows of `a` and of `b` were written split over the threads
    /// (`NodeStep::rows_split`).
    pub rows_split: [bool; 2],
}

/// Whether a product of the transpose of a `k x m` matrix by a `k x n` one reads the matrix
/// in place instead of a copy: for a product too large for [`small_gemm`] (a small one's copy
/// costs little). With two or more columns faer's GEMM reads it through a transposed view.
/// That gives the bits of the copy's product because faer's order of summation depends on
/// the shapes and on the other operand, not on this operand's strides (faer multiplies a
/// row-major result as its transpose, where this operand is the one read through strides;
/// with one row, its vector has unit stride either way). That is a property of faer's
/// internals, not a promise: `products_of_a_transposed_view_have_the_bits_of_the_copy` checks
/// it over many shapes, every path and thread count, and guards an upgrade. A one-column
/// product runs [`matvec_transposed`], whose order is [`matvec`]'s by construction (faer's
/// matrix-vector order depends on the layout: `64x1024 · 1024x1` differs).
pub(crate) fn lhs_transpose_folds(m: usize, k: usize, n: usize) -> bool {
    m * k * n > SMALL_MAX_FLOPS
}

/// `matmul` of operands `a` and `b` (values and shapes) into a result of shape `out_dims`.
/// With `native_f32` the product is computed in float32 with float32 accumulation; otherwise
/// it is the float64 product rounded once, whose float64 copies of float32 operands and
/// result live in buffers of `pool` (reused from one call to the next: fresh memory for them
/// cost page faults on every call). The batching and the split over threads are the same
/// either way, so neither result depends on the thread count.
pub(crate) fn matmul(
    (a, a_dims): (View<'_>, &[usize]),
    (b, b_dims): (View<'_>, &[usize]),
    out_dims: &[usize],
    out: ViewMut<'_>,
    how: Product,
    pool: &mut Pool,
) -> Result<()> {
    if how.lhs_transposed {
        return matmul_lhs_transposed((a, a_dims), (b, b_dims), out_dims, out, how, pool);
    }
    let (m, k, n, pairs) = geometry(a_dims, b_dims, out_dims)?;
    let threads = how.threads;
    if how.native_f32 {
        let (View::F32(a), View::F32(b), ViewMut::F32(c)) = (a, b, out) else {
            return Err(internal(
                "a native float32 matmul of values that are not float32",
            ));
        };
        product(a, b, &pairs, c, m, k, n, threads);
        return Ok(());
    }
    if let (View::F32(a32), View::F32(b32), ViewMut::F32(_)) = (&a, &b, &out) {
        let threads_per_product = if pairs.len() == 1 { threads } else { 1 };
        if widening::runs(m, k, n, threads_per_product) {
            let ViewMut::F32(c32) = out else {
                return Err(internal("a float32 matmul result is not float32"));
            };
            return widening::products(a32, b32, &pairs, c32, (m, k, n), threads, pool);
        }
    }
    if let ([(ia, ib)], View::F32(a32), View::F32(b32), ViewMut::F32(_)) =
        (pairs.as_slice(), &a, &b, &out)
    {
        if in_bands(m, k, n, threads) {
            let ViewMut::F32(c32) = out else {
                return Err(internal("a float32 matmul result is not float32"));
            };
            let a32 = &a32[ia * m * k..(ia + 1) * m * k];
            let b32 = &b32[ib * k * n..(ib + 1) * k * n];
            return reference_f32_in_bands(a32, b32, c32, (m, k, n), threads, pool);
        }
    }
    // Empty (no allocation) unless an operand is widened.
    let mut scratch: Vec<Buffer> = Vec::new();
    let ran = (|| -> Result<()> {
        let a64 = widened(a, (pool, threads), &mut scratch)?;
        let b64 = widened(b, (pool, threads), &mut scratch)?;
        let a64 = f64s(&scratch, a64, &a)?;
        let b64 = f64s(&scratch, b64, &b)?;
        match out {
            ViewMut::F64(c) => product(a64, b64, &pairs, c, m, k, n, threads),
            other => {
                let mut c = pool.alloc(DType::F64, other.len()).map_err(scratch_oom)?;
                if let ViewMut::F64(c) = c.view_mut() {
                    product(a64, b64, &pairs, c, m, k, n, threads);
                    // Rounded once, in parts over the threads like the product.
                    let parts = copy_parts(c.len(), threads);
                    let mut items = Vec::with_capacity(parts.len());
                    let mut rest = other;
                    for &(start, end) in &parts {
                        let (mine, next) = rest.split_at(end - start);
                        rest = next;
                        items.push((start, mine));
                    }
                    let c: &[f64] = c;
                    par_for_each(items, threads, |(start, mut mine)| {
                        mine.store_f64(0, &c[start..start + mine.len()]);
                    });
                }
                pool.recycle(Storage::Owned(c));
            }
        }
        Ok(())
    })();
    for b in scratch {
        pool.recycle(Storage::Owned(b));
    }
    ran
}

/// `matmul` of the transpose of the `k x m` matrix `x` by the `k x n` matrix `b` (both
/// unbatched): float64, and float32 at `Precision::Float32`, read `x` through a transposed
/// view, with the bits of the product of its copy in every path of [`product`] (bands, faer's
/// parallel product, one sequential GEMM); the float32 reference product copies the transpose
/// as it widens it. Shapes [`lhs_transpose_folds`] does not take are an internal error.
fn matmul_lhs_transposed(
    (x, x_dims): (View<'_>, &[usize]),
    (b, b_dims): (View<'_>, &[usize]),
    out_dims: &[usize],
    out: ViewMut<'_>,
    how: Product,
    pool: &mut Pool,
) -> Result<()> {
    let (&[k, m], &[kb, n], &[mo, no]) = (x_dims, b_dims, out_dims) else {
        return Err(internal("a folded transpose in a batched matmul"));
    };
    if kb != k || mo != m || no != n || !lhs_transpose_folds(m, k, n) {
        return Err(internal(format!(
            "a folded transpose in a matmul of shapes {x_dims:?}^T x {b_dims:?}"
        )));
    }
    let threads = how.threads;
    match (x, b, out) {
        (View::F64(x), View::F64(b), ViewMut::F64(c)) => {
            product_lhs_transposed(x, b, c, (m, k, n), threads, how.rows_split);
            Ok(())
        }
        (View::F32(x), View::F32(b), ViewMut::F32(c)) if how.native_f32 => {
            product_lhs_transposed(x, b, c, (m, k, n), threads, how.rows_split);
            Ok(())
        }
        (View::F32(x), View::F32(b), ViewMut::F32(c)) if widening::runs(m, k, n, threads) => {
            widening::product(Lhs::Transposed(x), b, c, (m, k, n), threads, pool)
        }
        (x, b, out) => {
            // The reference rule for float32 widens `x` anyway: widened as its transpose, the
            // product is the one of the copied transpose, bit for bit.
            let mut xt = pool.alloc(DType::F64, m * k).map_err(scratch_oom)?;
            let ran = match xt.view_mut() {
                ViewMut::F64(xt) => {
                    widen_transposed(x, (k, m), xt)?;
                    let plain = Product {
                        lhs_transposed: false,
                        ..how
                    };
                    matmul(
                        (View::F64(xt), &[m, k]),
                        (b, b_dims),
                        out_dims,
                        out,
                        plain,
                        pool,
                    )
                }
                _ => Err(internal("a float64 scratch buffer is not float64")),
            };
            pool.recycle(Storage::Owned(xt));
            ran
        }
    }
}

/// `xt` (`m x k`, row-major) = the transpose of the `k x m` matrix `x`, widened to float64.
fn widen_transposed(x: View<'_>, (k, m): (usize, usize), xt: &mut [f64]) -> Result<()> {
    let mut row = scratch(m)?;
    for p in 0..k {
        x.load_f64(p * m, &mut row);
        for (i, &v) in row.iter().enumerate() {
            xt[i * k + p] = v;
        }
    }
    Ok(())
}

/// `c = xᵀ b` for the row-major `k x m` matrix `x`, in the paths and bands of [`product`]
/// for one pair, each GEMM reading `x` through a transposed view. A product that goes
/// through the rows of an operand written split over the threads (`rows_split`, of `x` and
/// of `b`) relays over those rows instead: one column with `x` split
/// ([`matvec_transposed_relayed`]), one row with `b` split ([`row_product_relayed`]).
fn product_lhs_transposed<T: GemmElem>(
    x: &[T],
    b: &[T],
    c: &mut [T],
    (m, k, n): (usize, usize, usize),
    threads: usize,
    rows_split: [bool; 2],
) {
    if m == 1
        && n >= 2
        && rows_split[1]
        && k >= SPLIT_ALIGN_ROWS * threads
        && super::team::relays(threads, std::mem::size_of_val(b))
    {
        row_product_relayed(x, b, c, (k, n), threads);
        return;
    }
    if n == 1
        && rows_split[0]
        && super::team::relays(threads, std::mem::size_of_val(x))
        && k >= SPLIT_ALIGN_ROWS * threads
        && in_bands(m, k, n, threads)
    {
        // A refused allocation takes the split by columns, which needs none.
        if let Ok(mut acc) = alloc::try_vec_with_capacity(MATVEC_LANES * m) {
            acc.resize(MATVEC_LANES * m, T::ZERO);
            matvec_transposed_relayed(x, b, c, (k, m), &mut acc, threads);
            return;
        }
    }
    let xt = MatRef::from_row_major_slice(x, k, m).transpose();
    let b_mat = MatRef::from_row_major_slice(b, k, n);
    let multiply = |rows: std::ops::Range<usize>, c: &mut [T], par: Par| {
        let (first, h) = (rows.start, rows.len());
        if n == 1 {
            matvec_transposed(x, b, c, (k, m), first);
            return;
        }
        // What `gemm` would run on this band of the copy: a band small enough for
        // `small_gemm` (many threads) multiplies a copy of its rows, for that kernel's bits.
        if h * k * n <= SMALL_MAX_FLOPS {
            let copy: Vec<T> = rows
                .flat_map(|i| (0..k).map(move |p| x[p * m + i]))
                .collect();
            small_gemm(&copy, b, c, h, k, n);
            return;
        }
        let c = MatMut::from_row_major_slice_mut(c, h, n);
        faer_product(c, xt.subrows(first, h), b_mat, par);
    };
    if splits_depth(m, k, n, threads) && product_in_depth_parts(&xt, &b_mat, c, threads) {
        return;
    }
    if in_bands(m, k, n, threads) {
        let bands = row_bands(c, m, n, threads, SPLIT_ALIGN_ROWS);
        par_for_each(bands, threads, |(start, end, c)| {
            multiply(start..end, c, Par::Seq)
        });
    } else if m * k * n >= PAR_MIN_FLOPS && threads > 1 && n > 1 {
        super::team::rest();
        multiply(0..m, c, Par::rayon(threads));
    } else {
        multiply(0..m, c, Par::Seq);
    }
}

/// The depth of faer's x86 products (its AVX2 and AVX-512 kernels) goes in blocks of this
/// many terms from the first: each block summed from zero in the kernel, then added to the
/// result, in order.
const DEPTH_BLOCK: usize = 512;
/// faer multiplies products of at most this many multiply-adds with its small-product kernels
/// (`nano-gemm`), whose order of summation is their own.
const FAER_SMALL_MAX_FLOPS: usize = 16 * 16 * 16;

/// Whether `xᵀ b` (`m x k` by `k x n`) splits over its depth instead of its rows: a weight
/// gradient, whose depth (the batch) is much longer than the result's sides. Split by rows,
/// each thread reads the whole of `b`, half of it from the other core's cache when the step
/// that wrote `b` split its rows (in the MLP step's `hᵀ g`: 121 µs on two threads, where one
/// band alone takes 63 µs); split by depth, each reads the rows its own core wrote.
///
/// Only where faer's product sums the depth in [`DEPTH_BLOCK`]s (x86 with AVX2 and FMA, or
/// AVX-512), and only where every block is a GEMM of faer's (two rows and two columns at
/// least, more than [`FAER_SMALL_MAX_FLOPS`]), so that each part gives the block sums the
/// one-thread product adds.
fn splits_depth(m: usize, k: usize, n: usize, threads: usize) -> bool {
    let last_block = match k % DEPTH_BLOCK {
        0 => DEPTH_BLOCK,
        rest => rest,
    };
    threads > 1
        && m >= 2
        && n >= 2
        && k >= 2 * DEPTH_BLOCK
        && k >= 4 * m.max(n)
        && m * k * n >= PAR_MIN_FLOPS
        && m * n * last_block > FAER_SMALL_MAX_FLOPS
        && faer_sums_depth_in_blocks()
}

#[cfg(target_arch = "x86_64")]
fn faer_sums_depth_in_blocks() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        || (std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma"))
}

#[cfg(not(target_arch = "x86_64"))]
fn faer_sums_depth_in_blocks() -> bool {
    false
}

/// `c = xt b` split over the depth, with the bits of one sequential product: the first
/// thread multiplies its leading blocks as one product (the one-thread product's running sum
/// after them), every other block is multiplied alone into its own buffer, and the blocks are
/// then added to `c` in order. `false` (and `c` untouched) when those buffers cannot be had;
/// the caller then splits by rows.
fn product_in_depth_parts<T: GemmElem>(
    xt: &MatRef<'_, T>,
    b: &MatRef<'_, T>,
    c: &mut [T],
    threads: usize,
) -> bool {
    let (m, k, n) = (xt.nrows(), xt.ncols(), b.ncols());
    let blocks = k.div_ceil(DEPTH_BLOCK);
    let parts = split_ranges(blocks, threads, 1);
    let Some(&(_, lead_end)) = parts.first() else {
        return false;
    };
    let Ok(mut sums) = alloc::try_vec_with_capacity::<T>((blocks - lead_end) * m * n) else {
        return false;
    };
    sums.resize((blocks - lead_end) * m * n, T::ZERO);
    let depth = |first: usize, end: usize| first * DEPTH_BLOCK..(end * DEPTH_BLOCK).min(k);
    let multiply = |c: &mut [T], terms: std::ops::Range<usize>| {
        let c = MatMut::from_row_major_slice_mut(c, m, n);
        let (first, len) = (terms.start, terms.len());
        faer_product(c, xt.subcols(first, len), b.subrows(first, len), Par::Seq);
    };
    // Part 0 writes `c`; each later part its own blocks' sums.
    let mut items: Vec<(usize, usize, &mut [T])> = Vec::with_capacity(parts.len());
    items.push((0, lead_end, &mut *c));
    let mut rest = sums.as_mut_slice();
    for &(first, end) in &parts[1..] {
        let (mine, next) = std::mem::take(&mut rest).split_at_mut((end - first) * m * n);
        rest = next;
        items.push((first, end, mine));
    }
    par_for_each(items, threads, |(first, end, out)| {
        if first == 0 {
            multiply(out, depth(0, end));
        } else {
            for (block, out) in (first..end).zip(out.chunks_mut(m * n)) {
                multiply(out, depth(block, block + 1));
            }
        }
    });
    // Each block's sum added to the running sum in order, as the one-thread product does.
    for block in sums.chunks(m * n) {
        for (total, &sum) in c.iter_mut().zip(block) {
            *total += sum;
        }
    }
    true
}

/// The reference float32 product of one large `m x k` by `k x n` pair that splits into bands
/// of rows, where [`widening`] does not run (no AVX-512, or a shape it leaves): `b` is widened
/// once, then each thread widens its band of `a`, multiplies it in
/// float64 and rounds its band of the result, while the band is still in its cache. The bits
/// are those of the product in [`matmul`]'s general path (the same bands, each the
/// sequential product); two hand-offs to the threads instead of four (widening `b`, then the
/// bands), and no pass over the whole of `a` or of the result, keep it near the float64 rate.
fn reference_f32_in_bands(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    (m, k, n): (usize, usize, usize),
    threads: usize,
    pool: &mut Pool,
) -> Result<()> {
    let mut scratch: Vec<Buffer> = Vec::with_capacity(3);
    let ran = (|| -> Result<()> {
        let b_view = View::F32(b);
        let at = widened(b_view, (pool, threads), &mut scratch)?;
        let mut a64 = pool.alloc(DType::F64, m * k).map_err(scratch_oom)?;
        let mut c64 = pool.alloc(DType::F64, m * n).map_err(scratch_oom)?;
        let b64 = f64s(&scratch, at, &b_view)?;
        let (ViewMut::F64(a_wide), ViewMut::F64(c_wide)) = (a64.view_mut(), c64.view_mut()) else {
            return Err(internal("a float64 scratch buffer is not float64"));
        };
        let bands = |v, width| row_bands(v, m, width, threads, SPLIT_ALIGN_ROWS);
        let items = bands(a_wide, k)
            .into_iter()
            .zip(bands(c_wide, n))
            .zip(row_bands(c, m, n, threads, SPLIT_ALIGN_ROWS));
        let items: Vec<_> = items
            .map(|(((start, end, a64), (_, _, c64)), (_, _, c32))| (start, end, a64, c64, c32))
            .collect();
        par_for_each(items, threads, |(start, end, a64, c64, c32)| {
            for (wide, &x) in a64.iter_mut().zip(&a[start * k..end * k]) {
                *wide = f64::from(x);
            }
            gemm(a64, b64, c64, end - start, k, n);
            for (narrow, &x) in c32.iter_mut().zip(c64.iter()) {
                *narrow = f32::from_f64(x);
            }
        });
        scratch.push(a64);
        scratch.push(c64);
        Ok(())
    })();
    for b in scratch {
        pool.recycle(Storage::Owned(b));
    }
    ran
}

/// A float64 operand: its own elements (`None`), or a copy widened into a buffer of `pool`
/// pushed onto `scratch` (its index there).
fn widened(
    v: View<'_>,
    (pool, threads): (&mut Pool, usize),
    scratch: &mut Vec<Buffer>,
) -> Result<Option<usize>> {
    if let View::F64(_) = v {
        return Ok(None);
    }
    let mut buf = pool.alloc(DType::F64, v.len()).map_err(scratch_oom)?;
    if let ViewMut::F64(mut dst) = buf.view_mut() {
        // In parts over the threads: one thread alone made the widening of two 512x512
        // operands and the rounding of the result about a tenth of the product's time.
        let mut items = Vec::new();
        for (start, end) in copy_parts(v.len(), threads) {
            let (mine, rest) = dst.split_at_mut(end - start);
            dst = rest;
            items.push((start, mine));
        }
        par_for_each(items, threads, |(start, mine)| v.load_f64(start, mine));
    }
    scratch.push(buf);
    Ok(Some(scratch.len() - 1))
}

/// The parts a copy of `len` elements splits into over `threads` threads: one part below
/// [`PAR_MIN_ELEMENTS`].
fn copy_parts(len: usize, threads: usize) -> Vec<(usize, usize)> {
    let parts = if len >= PAR_MIN_ELEMENTS { threads } else { 1 };
    split_ranges(len, parts, 1)
}

/// The float64 elements of an operand after [`widened`].
fn f64s<'a>(scratch: &'a [Buffer], at: Option<usize>, v: &'a View<'a>) -> Result<&'a [f64]> {
    match (at, v) {
        (None, View::F64(v)) => Ok(v),
        (Some(i), _) => match scratch.get(i).map(Buffer::view) {
            Some(View::F64(w)) => Ok(w),
            _ => Err(internal("a widened matmul operand is not float64")),
        },
        _ => Err(internal("a matmul operand is neither float64 nor widened")),
    }
}

/// For each batch index of the result (row-major), the matrix indices of `a` and `b`.
fn batch_pairs(
    a_batch: &[usize],
    b_batch: &[usize],
    out_batch: &[usize],
) -> std::result::Result<Pairs, AllocError> {
    if out_batch.is_empty() {
        return Ok(smallvec![(0, 0)]);
    }
    let count: usize = out_batch.iter().product();
    // As many pairs as result matrices, so as large as the result when they are 1x1.
    let mut out = alloc::try_vec_with_capacity(count)?;
    // The layouts batching makes (a stack of matrices times one shared matrix, or two
    // stacks of the same shape) without the index arithmetic: each axis of an operand is
    // either the result's or 1, so equal counts mean equal shapes.
    let a_count: usize = a_batch.iter().product();
    let b_count: usize = b_batch.iter().product();
    match (a_count == count, b_count == count) {
        (true, true) => out.extend((0..count).map(|i| (i, i))),
        (true, false) if b_count == 1 => out.extend((0..count).map(|i| (i, 0))),
        (false, true) if a_count == 1 => out.extend((0..count).map(|i| (0, i))),
        _ => general_pairs(&mut out, (a_batch, b_batch), out_batch),
    }
    Ok(Pairs::from_vec(out))
}

/// The batch pairs of any broadcast of `a_batch` and `b_batch` to `out_batch`, appended to
/// `out`, which has room for them.
fn general_pairs(
    out: &mut Vec<(usize, usize)>,
    (a_batch, b_batch): (&[usize], &[usize]),
    out_batch: &[usize],
) {
    let sa = broadcast_strides(a_batch, out_batch);
    let sb = broadcast_strides(b_batch, out_batch);
    let count: usize = out_batch.iter().product();
    let mut idx = vec![0usize; out_batch.len()];
    for _ in 0..count {
        let ia = idx.iter().zip(&sa).map(|(i, s)| i * s).sum();
        let ib = idx.iter().zip(&sb).map(|(i, s)| i * s).sum();
        out.push((ia, ib));
        for ax in (0..idx.len()).rev() {
            idx[ax] += 1;
            if idx[ax] < out_batch[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn product<T: GemmElem>(
    a: &[T],
    b: &[T],
    pairs: &[(usize, usize)],
    c: &mut [T],
    m: usize,
    k: usize,
    n: usize,
    threads: usize,
) {
    let (sa, sb, sc) = (m * k, k * n, m * n);
    let flops = pairs.len() * m * n * k;
    let large = flops >= PAR_MIN_FLOPS;
    if pairs.len() > 1 && m * k * n <= SMALL_MAX_FLOPS && stacks(pairs) {
        // One taller product of the stacked `a` matrices by the shared `b`: the same bits
        // as the products one by one (small_gemm's order), in fewer and fuller blocks. The
        // rows split over threads when the whole product is large.
        let (ia, ib) = pairs[0];
        let rows = pairs.len() * m;
        let a = &a[ia * sa..ia * sa + rows * k];
        let b = &b[ib * sb..(ib + 1) * sb];
        if !large || threads <= 1 {
            small_or_matvec(a, b, c, rows, k, n);
            return;
        }
        par_for_each(
            row_bands(c, rows, n, threads, 1),
            threads,
            |(start, end, c)| {
                small_or_matvec(&a[start * k..end * k], b, c, end - start, k, n);
            },
        );
        return;
    }
    if pairs.len() > 1 {
        let parts = if large { threads } else { 1 };
        let mut items = Vec::new();
        let mut rest = c;
        for (start, end) in split_ranges(pairs.len(), parts, 1) {
            let (mine, next) = rest.split_at_mut((end - start) * sc);
            rest = next;
            items.push((start, end, mine));
        }
        par_for_each(items, threads, |(start, end, c)| {
            for (i, &(ia, ib)) in pairs[start..end].iter().enumerate() {
                gemm(
                    &a[ia * sa..(ia + 1) * sa],
                    &b[ib * sb..(ib + 1) * sb],
                    &mut c[i * sc..(i + 1) * sc],
                    m,
                    k,
                    n,
                );
            }
        });
    } else {
        let (ia, ib) = pairs[0];
        let a = &a[ia * sa..(ia + 1) * sa];
        let b = &b[ib * sb..(ib + 1) * sb];
        if in_bands(m, k, n, threads) {
            // Bands of rows over the threads, each one sequential product. A row's bits do
            // not depend on the rows beside it (faer accumulates every element over `k` in
            // the same blocks whatever the height of the product, from two rows on; a
            // one-row product takes another path), and where faer's own parallel product
            // leaves a thread idle (a 64x1024 by 1024x64 product: 143 µs on two threads
            // against 148 µs on one) the bands split it evenly (82 µs).
            let bands = row_bands(c, m, n, threads, SPLIT_ALIGN_ROWS);
            par_for_each(bands, threads, |(start, end, c)| {
                gemm(&a[start * k..end * k], b, c, end - start, k, n);
            });
        } else if large && threads > 1 && n > 1 {
            super::team::rest();
            gemm_on(a, b, c, m, k, n, Par::rayon(threads));
        } else {
            gemm(a, b, c, m, k, n);
        }
    }
}

/// Whether consecutive batch pairs multiply consecutive `a` matrices by one shared `b` (a
/// batched operand times a broadcast one, what `vmap` of a layer makes).
fn stacks(pairs: &[(usize, usize)]) -> bool {
    let (ia, ib) = pairs[0];
    pairs
        .iter()
        .enumerate()
        .all(|(i, &(pa, pb))| pa == ia + i && pb == ib)
}

/// Clears the upper halves of the AVX registers after a call into faer's vectorized kernels.
///
/// Why: the rest of the backend (and the portable `libm` it calls) is compiled for baseline
/// x86-64 and uses legacy SSE encodings. Leaving the upper YMM state dirty after AVX code makes
/// every later SSE instruction on this thread pay a transition penalty, which measured 2.3x
/// slower elementwise kernels for the rest of the process after one matmul.
#[inline]
pub(crate) fn clear_upper_vector_state() {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx") {
            // SAFETY: `vzeroupper` only requires AVX, which was just detected at run time; it
            // touches no memory and no register a caller relies on across this call.
            unsafe { zero_upper() }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn zero_upper() {
    std::arch::x86_64::_mm256_zeroupper();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order of a one-column product, written out: term `p` into accumulator `p mod 8`,
    /// the eight combined pairwise.
    fn matvec_definition(a: &[f64], v: &[f64], m: usize, k: usize) -> Vec<f64> {
        (0..m)
            .map(|i| {
                let mut acc = [0.0f64; 8];
                for p in 0..k {
                    acc[p % 8] = a[i * k + p].mul_add(v[p], acc[p % 8]);
                }
                ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
            })
            .collect()
    }

    /// One-column products follow their definition in every build and path (one call, stacks,
    /// batches, bands over threads), and a transposed operand read in place gives the same
    /// bits, from any first column.
    #[test]
    fn one_column_products_follow_their_order() {
        let value = |i: usize| (i as f64 * 0.613).sin() * (1.0 + (i % 7) as f64);
        for (m, k) in [
            (1, 1),
            (3, 7),
            (5, 8),
            (4, 9),
            (17, 333),
            (64, 1024),
            (1030, 3),
            (40, 4099),
            // Split into bands of rows on two threads.
            (20, 120_000),
            (600, 4000),
        ] {
            let a: Vec<f64> = (0..m * k).map(value).collect();
            let v: Vec<f64> = (0..k).map(|p| value(p * 3 + 1)).collect();
            let want = matvec_definition(&a, &v, m, k);
            let mut got = vec![f64::NAN; m];
            matvec_body(&a, &v, &mut got, m, k);
            assert_eq!(got, want, "baseline {m}x{k}");
            let mut got = vec![f64::NAN; m];
            matvec(&a, &v, &mut got, m, k);
            assert_eq!(got, want, "{m}x{k}");
            for threads in [1, 2, 3] {
                let mut got = vec![f64::NAN; m];
                product(&a, &v, &[(0, 0)], &mut got, m, k, 1, threads);
                assert_eq!(got, want, "{m}x{k} on {threads} threads");
            }
            // Two stacked copies of `a` times the shared `v`.
            let stacked: Vec<f64> = a.iter().chain(&a).copied().collect();
            let mut got = vec![f64::NAN; 2 * m];
            product(&stacked, &v, &[(0, 0), (1, 0)], &mut got, m, k, 1, 2);
            assert_eq!(&got[..m], &want[..], "stacked {m}x{k}");
            assert_eq!(&got[m..], &want[..], "stacked {m}x{k}");
            // The transpose read in place, whole and from a column on.
            let mut x = vec![0.0; k * m];
            for i in 0..m {
                for p in 0..k {
                    x[p * m + i] = a[i * k + p];
                }
            }
            let mut got = vec![f64::NAN; m];
            matvec_transposed(&x, &v, &mut got, (k, m), 0);
            assert_eq!(got, want, "transposed {m}x{k}");
            let first = m / 3;
            let mut got = vec![f64::NAN; m - first];
            matvec_transposed(&x, &v, &mut got, (k, m), first);
            assert_eq!(got, want[first..], "transposed {m}x{k} from column {first}");
        }
    }

    /// Outer products that faer would multiply have faer's bits through `outer`, in one
    /// piece and in bands over threads, in float64, native float32 and the float32 reference
    /// (widened, multiplied in float64, rounded): on ordinary values, exact zero products of
    /// both signs (which keep their sign in faer's kernels), products that underflow,
    /// `inf · 0` and NaN.
    #[test]
    fn outer_products_have_the_bits_of_faers_product() {
        let specials = [
            -1.0,
            1e-200,
            -1e-200,
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NAN,
            3.5,
            1e-30,
            -1e-30,
        ];
        let same = |x: f64, y: f64| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
        for (m, n) in [(1024, 64), (4097, 2), (2, 8192), (300, 29)] {
            assert!(outer_is_faers(m, n), "{m}x{n}");
            let value = |i: usize, salt: f64| {
                specials
                    .get(i)
                    .copied()
                    .unwrap_or_else(|| (i as f64 * salt).sin() * 1e3)
            };
            let a: Vec<f64> = (0..m).map(|i| value(i, 0.37)).collect();
            let b: Vec<f64> = (0..n).map(|j| value(j, 0.11)).collect();
            let mut want = vec![0.0; m * n];
            gemm_on(&a, &b, &mut want, m, 1, n, Par::Seq);
            let a32: Vec<f32> = a.iter().map(|&x| x as f32).collect();
            let b32: Vec<f32> = b.iter().map(|&x| x as f32).collect();
            let mut want32 = vec![0.0f32; m * n];
            gemm_on(&a32, &b32, &mut want32, m, 1, n, Par::Seq);
            // The float32 reference: faer's float64 product of the widened operands, rounded.
            let (a64, b64): (Vec<f64>, Vec<f64>) = (
                a32.iter().map(|&x| f64::from(x)).collect(),
                b32.iter().map(|&x| f64::from(x)).collect(),
            );
            let mut wide = vec![0.0; m * n];
            gemm_on(&a64, &b64, &mut wide, m, 1, n, Par::Seq);
            let reference32: Vec<f32> = wide.iter().map(|&x| x as f32).collect();
            let mut pool = Pool::default();
            for threads in [1, 2, 3] {
                let context = format!("{m}x1x{n} on {threads} threads");
                let mut got = vec![f64::NAN; m * n];
                product(&a, &b, &[(0, 0)], &mut got, m, 1, n, threads);
                assert!(
                    got.iter().zip(&want).all(|(&g, &w)| same(g, w)),
                    "{context}"
                );
                for native_f32 in [true, false] {
                    let mut got = vec![f32::NAN; m * n];
                    let how = Product {
                        threads,
                        native_f32,
                        lhs_transposed: false,
                        rows_split: [false, false],
                    };
                    matmul(
                        (View::F32(&a32), &[m, 1]),
                        (View::F32(&b32), &[1, n]),
                        &[m, n],
                        ViewMut::F32(&mut got),
                        how,
                        &mut pool,
                    )
                    .unwrap();
                    let want = if native_f32 { &want32 } else { &reference32 };
                    assert!(
                        got.iter()
                            .zip(want)
                            .all(|(&g, &w)| same(f64::from(g), f64::from(w))),
                        "float32 {context}, native: {native_f32}"
                    );
                }
            }
        }
    }

    /// A one-row product `xᵀ b` relayed over the rows of `b` has the bits of faer's product
    /// (whose one-row order is a fused multiply-add per term from `+0.0`, `p` in order), on
    /// ordinary values, products that are all `-0.0` (faer gives `+0.0`), infinities and
    /// NaN, in float64 and float32, on two and three threads.
    #[test]
    fn one_row_products_relayed_have_faers_bits() {
        fn check<T: GemmElem + std::fmt::Debug + Into<f64>>(k: usize, n: usize, x: &[T], b: &[T]) {
            let mut want = vec![T::ZERO; n];
            gemm_on(x, b, &mut want, 1, k, n, Par::Seq);
            for threads in [2, 3] {
                let mut got = vec![T::ZERO; n];
                row_product_relayed(x, b, &mut got, (k, n), threads);
                // Widening keeps every bit that tells two values apart.
                let same = got.iter().zip(&want).all(|(&g, &w)| {
                    let (g, w): (f64, f64) = (g.into(), w.into());
                    g.to_bits() == w.to_bits() || g.is_nan() && w.is_nan()
                });
                assert!(same, "1x{k}x{n} on {threads} threads: {got:?} vs {want:?}");
            }
        }
        for (k, n) in [(1024, 64), (2051, 33), (64, 600)] {
            let x: Vec<f64> = (0..k)
                .map(|p| (p as f64 * 0.37).sin() * 10f64.powi((p % 5) as i32 - 2))
                .collect();
            let mut b: Vec<f64> = (0..k * n).map(|i| (i as f64 * 0.11).cos()).collect();
            // Column 0 meets an infinity times zero (`x[0]` is 0), column 1 a NaN.
            b[0] = f64::INFINITY;
            b[n + 1] = f64::NAN;
            check(k, n, &x, &b);
            let (x32, b32): (Vec<f32>, Vec<f32>) = (
                x.iter().map(|&v| v as f32).collect(),
                b.iter().map(|&v| v as f32).collect(),
            );
            check(k, n, &x32, &b32);
            // Every product -0.0.
            check(k, n, &vec![-0.0f64; k], &vec![1.0f64; k * n]);
        }
    }

    /// `xᵀ b` read through a transposed view has the bits of the product of the copied
    /// transpose, for every shape the fold takes and every path (one GEMM, faer's parallel
    /// product, bands, bands small enough for `small_gemm`, parts of the depth), in float64
    /// and float32.
    #[test]
    fn products_of_a_transposed_view_have_the_bits_of_the_copy() {
        fn check<T: GemmElem + PartialEq + std::fmt::Debug>(
            (m, k, n): (usize, usize, usize),
            threads: usize,
            value: impl Fn(usize) -> T,
        ) {
            let x: Vec<T> = (0..k * m).map(&value).collect();
            let b: Vec<T> = (0..k * n).map(|i| value(i * 7 + 3)).collect();
            let mut xt = vec![T::ZERO; m * k];
            for p in 0..k {
                for i in 0..m {
                    xt[i * k + p] = x[p * m + i];
                }
            }
            let mut want = vec![T::ZERO; m * n];
            product(&xt, &b, &[(0, 0)], &mut want, m, k, n, threads);
            // With `x` written in bands of rows (a one-column product relays over them) and
            // without.
            for rows_split in [[false, false], [true, false], [false, true], [true, true]] {
                let mut got = vec![T::ZERO; m * n];
                product_lhs_transposed(&x, &b, &mut got, (m, k, n), threads, rows_split);
                assert_eq!(
                    got, want,
                    "{m}x{k}x{n} on {threads} threads, rows split: {rows_split:?}"
                );
            }
        }
        let mut shapes = vec![
            (64, 1024, 64),
            (1, 1024, 64),
            (64, 1024, 2),
            (33, 300, 17),
            (128, 512, 96),
            (17, 333, 9),
            (256, 64, 64),
            (2, 5000, 3),
            (100, 100, 100),
            (64, 1024, 1),
            (1000, 40, 1),
            (61, 2051, 1),
            (3, 5000, 1),
            (700, 700, 1),
            // A one-column product in bands, faer's parallel product, one long row.
            (256, 8192, 1),
            (24, 1024, 128),
            (1, 4096, 600),
            // Split over the depth (`splits_depth`): whole blocks, a short last block, many
            // blocks over three threads.
            (16, 4096, 16),
            (64, 1300, 64),
            (8, 2048, 24),
        ];
        // Random shapes the fold takes.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % bound) as usize + 1
        };
        while shapes.len() < 30 {
            let (m, k) = (next(150), next(1200));
            let n = if shapes.len() % 3 == 0 {
                1
            } else {
                next(150) + 1
            };
            if lhs_transpose_folds(m, k, n) {
                shapes.push((m, k, n));
            }
        }
        // Where faer sums the depth in blocks, the weight gradients above split over it.
        assert_eq!(splits_depth(64, 1024, 64, 2), faer_sums_depth_in_blocks());
        assert!(!splits_depth(64, 1024, 64, 1) && !splits_depth(64, 512, 64, 2));
        for &shape in &shapes {
            for threads in [1, 2, 3] {
                check::<f64>(shape, threads, |i| (i as f64 * 0.731).sin());
                check::<f32>(shape, threads, |i| (i as f32 * 0.311).cos());
            }
        }
        // Bands of so many threads that each is a `small_gemm` product.
        check::<f64>((4800, 16, 32), 300, |i| (i as f64 * 0.17).sin());
    }

    #[test]
    fn float32_reference_products_in_bands_have_the_bits_of_the_rounded_product() {
        // Over the band threshold for 2 and 3 threads. On a machine with AVX-512 `matmul`
        // runs the widening GEMM; the bands of the general path are called directly.
        for (m, k, n) in [(70, 300, 110), (512, 64, 64), (49, 1001, 47)] {
            let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos() * 3.0).collect();
            // The definition: the float64 product of the widened operands, rounded once.
            let a64: Vec<f64> = a.iter().map(|&x| f64::from(x)).collect();
            let b64: Vec<f64> = b.iter().map(|&x| f64::from(x)).collect();
            let mut c64 = vec![0.0; m * n];
            gemm(&a64, &b64, &mut c64, m, k, n);
            let want: Vec<u32> = c64.iter().map(|&x| (x as f32).to_bits()).collect();
            let mut pool = Pool::default();
            for threads in [1, 2, 3] {
                let mut c = vec![f32::NAN; m * n];
                let how = Product {
                    threads,
                    native_f32: false,
                    lhs_transposed: false,
                    rows_split: [false, false],
                };
                matmul(
                    (View::F32(&a), &[m, k]),
                    (View::F32(&b), &[k, n]),
                    &[m, n],
                    ViewMut::F32(&mut c),
                    how,
                    &mut pool,
                )
                .unwrap();
                let got: Vec<u32> = c.iter().map(|x| x.to_bits()).collect();
                assert!(got == want, "{m}x{k}x{n} on {threads} threads");
                if threads > 1 && in_bands(m, k, n, threads) {
                    let mut c = vec![f32::NAN; m * n];
                    reference_f32_in_bands(&a, &b, &mut c, (m, k, n), threads, &mut pool).unwrap();
                    let got: Vec<u32> = c.iter().map(|x| x.to_bits()).collect();
                    assert!(got == want, "bands of {m}x{k}x{n} on {threads} threads");
                }
            }
        }
    }

    #[test]
    fn float32_reference_batches_and_folded_transposes_have_the_bits_of_the_rounded_products() {
        // Shapes the widening GEMM takes on one thread (where the machine has AVX-512): a
        // batch against a shared and against a batched right operand, and a folded transpose.
        let (m, k, n, batch) = (40, 600, 50, 3);
        let a: Vec<f32> = (0..batch * m * k)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let b: Vec<f32> = (0..batch * k * n)
            .map(|i| (i as f32 * 0.11).cos())
            .collect();
        let rounded = |a: &[f32], b: &[f32], (m, k, n): (usize, usize, usize)| -> Vec<u32> {
            let a64: Vec<f64> = a.iter().map(|&x| f64::from(x)).collect();
            let b64: Vec<f64> = b.iter().map(|&x| f64::from(x)).collect();
            let mut c = vec![0.0; m * n];
            gemm(&a64, &b64, &mut c, m, k, n);
            c.iter().map(|&x| (x as f32).to_bits()).collect()
        };
        let mut pool = Pool::default();
        for threads in [1, 2, 3] {
            let how = Product {
                threads,
                native_f32: false,
                lhs_transposed: false,
                rows_split: [false, false],
            };
            for b_dims in [vec![k, n], vec![batch, k, n]] {
                let mut c = vec![f32::NAN; batch * m * n];
                matmul(
                    (View::F32(&a), &[batch, m, k]),
                    (View::F32(&b[..b_dims.iter().product()]), &b_dims),
                    &[batch, m, n],
                    ViewMut::F32(&mut c),
                    how,
                    &mut pool,
                )
                .unwrap();
                for i in 0..batch {
                    let bi = if b_dims.len() == 3 { i } else { 0 };
                    let want = rounded(
                        &a[i * m * k..(i + 1) * m * k],
                        &b[bi * k * n..(bi + 1) * k * n],
                        (m, k, n),
                    );
                    let got: Vec<u32> = c[i * m * n..(i + 1) * m * n]
                        .iter()
                        .map(|x| x.to_bits())
                        .collect();
                    assert!(got == want, "batch {i}, b {b_dims:?}, {threads} threads");
                }
            }
            // `xᵀ b` with `x` of `k x m` read as the left operand's transpose.
            let x = &a[..k * m];
            let copy: Vec<f32> = (0..m * k).map(|q| x[(q % k) * m + q / k]).collect();
            let want = rounded(&copy, &b[..k * n], (m, k, n));
            let mut c = vec![f32::NAN; m * n];
            let folded = Product {
                lhs_transposed: true,
                ..how
            };
            matmul(
                (View::F32(x), &[k, m]),
                (View::F32(&b[..k * n]), &[k, n]),
                &[m, n],
                ViewMut::F32(&mut c),
                folded,
                &mut pool,
            )
            .unwrap();
            let got: Vec<u32> = c.iter().map(|x| x.to_bits()).collect();
            assert!(got == want, "folded transpose on {threads} threads");
        }
    }

    #[test]
    fn parallel_products_have_the_bits_of_the_sequential_product() {
        // Shapes around faer's block sizes, odd and prime extents, thin and wide products.
        let shapes = [
            (512, 512, 512),
            (257, 311, 129),
            (1024, 64, 64),
            (64, 1024, 64),
            (97, 1000, 3),
            (3, 777, 501),
            (600, 1, 600),
            (129, 129, 129),
            // Bands of rows: just enough rows for two threads, uneven bands, one column.
            (33, 1024, 64),
            (48, 333, 65),
            (200, 1024, 7),
            (1001, 2048, 1),
        ];
        for &(m, k, n) in &shapes {
            let a: Vec<f64> = (0..m * k).map(|i| (i as f64 * 0.37).sin()).collect();
            let b: Vec<f64> = (0..k * n).map(|i| (i as f64 * 0.11).cos() * 1e3).collect();
            let mut seq = vec![0.0; m * n];
            gemm(&a, &b, &mut seq, m, k, n);
            for threads in [2, 3, 4] {
                let mut par = vec![f64::NAN; m * n];
                product(&a, &b, &[(0, 0)], &mut par, m, k, n, threads);
                let same = seq
                    .iter()
                    .zip(&par)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{m}x{k}x{n} on {threads} threads");
            }
        }
    }

    /// `small_gemm`'s definition, one element at a time.
    fn reference<T: GemmElem>(a: &[T], b: &[T], m: usize, k: usize, n: usize) -> Vec<T> {
        let mut c = vec![T::ZERO; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut acc = T::ZERO;
                for p in 0..k {
                    acc = a[i * k + p].mul_add(b[p * n + j], acc);
                }
                c[i * n + j] = acc;
            }
        }
        c
    }

    fn same_bits(x: &[f64], y: &[f64]) -> bool {
        x.len() == y.len() && x.iter().zip(y).all(|(u, v)| u.to_bits() == v.to_bits())
    }

    #[test]
    fn small_products_follow_their_definition_in_every_layout() {
        // Edges of the 4-row and 8-column register blocks, k = 0 and 1, and -0.0 products
        // (which sum to +0.0 from the +0.0 start).
        for &(m, k, n) in &[
            (1, 1, 1),
            (1, 16, 16),
            (16, 1, 16),
            (5, 7, 9),
            (4, 3, 8),
            (3, 0, 5),
            (13, 17, 11),
            (32, 16, 16),
        ] {
            let a: Vec<f64> = (0..m * k).map(|i| (i as f64 * 0.7).sin() * 1e3).collect();
            let mut b: Vec<f64> = (0..k * n).map(|i| (i as f64 * 0.3).cos()).collect();
            if let Some(first) = b.first_mut() {
                *first = -0.0;
            }
            let want = reference(&a, &b, m, k, n);
            let mut got = vec![f64::NAN; m * n];
            gemm(&a, &b, &mut got, m, k, n);
            assert!(same_bits(&want, &got), "{m}x{k}x{n}");
            let mut scalar = vec![f64::NAN; m * n];
            small_gemm_body(&a, &b, &mut scalar, m, k, n);
            assert!(
                same_bits(&want, &scalar),
                "{m}x{k}x{n} without vector lanes"
            );
        }
        let a = [-1.0f64];
        let mut c = [f64::NAN];
        gemm(&a, &[0.0], &mut c, 1, 1, 1);
        assert_eq!(c[0].to_bits(), 0.0f64.to_bits());
        // float32 accumulates in float32 by the same rule.
        let a32: Vec<f32> = (0..35).map(|i| (i as f32 * 0.7).sin()).collect();
        let b32: Vec<f32> = (0..63).map(|i| (i as f32 * 0.3).cos()).collect();
        let mut c32 = vec![f32::NAN; 45];
        gemm(&a32, &b32, &mut c32, 5, 7, 9);
        let want32 = reference(&a32, &b32, 5, 7, 9);
        assert!(c32
            .iter()
            .zip(&want32)
            .all(|(x, y)| x.to_bits() == y.to_bits()));
    }

    #[test]
    fn stacked_small_products_have_the_bits_of_the_products_one_by_one() {
        // A batch of 6000 `3 x 16` matrices times one shared `16 x 8`: stacked into one
        // product (split over threads, since the whole is large) and the same bits as each
        // product alone; a batch with distinct `b`s is not stacked.
        let (batch, m, k, n) = (6000, 3, 16, 8);
        assert!(batch * m * k * n >= PAR_MIN_FLOPS);
        let a: Vec<f64> = (0..batch * m * k)
            .map(|i| (i as f64 * 0.37).sin())
            .collect();
        let b: Vec<f64> = (0..k * n).map(|i| (i as f64 * 0.11).cos() * 1e3).collect();
        let pairs: Vec<(usize, usize)> = (0..batch).map(|i| (i, 0)).collect();
        assert!(stacks(&pairs));
        assert!(!stacks(&[(0, 0), (1, 1)]));
        assert!(!stacks(&[(0, 0), (0, 0)]));
        for threads in [1, 2, 3] {
            let mut c = vec![f64::NAN; batch * m * n];
            product(&a, &b, &pairs, &mut c, m, k, n, threads);
            for i in 0..batch {
                let want = reference(&a[i * m * k..(i + 1) * m * k], &b, m, k, n);
                assert!(
                    same_bits(&want, &c[i * m * n..(i + 1) * m * n]),
                    "{i} on {threads}"
                );
            }
        }
    }

    #[test]
    fn broadcast_batch_pairs() {
        // a: [2, 1], b: [3] batch axes, result batch [2, 3].
        let p = batch_pairs(&[2, 1], &[3], &[2, 3]).unwrap();
        assert_eq!(
            p.as_slice(),
            [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
        );
        assert_eq!(batch_pairs(&[], &[], &[]).unwrap().as_slice(), [(0, 0)]);
        // The shortcuts of stacked layouts agree with the general enumeration.
        for (a, b, out) in [
            (&[2, 3][..], &[1, 1][..], &[2, 3][..]),
            (&[3], &[], &[3]),
            (&[], &[2, 2], &[2, 2]),
            (&[1], &[4], &[4]),
            (&[2, 3], &[2, 3], &[2, 3]),
            (&[2, 0], &[1, 1], &[2, 0]),
        ] {
            let count: usize = out.iter().product();
            let mut general = Vec::with_capacity(count);
            general_pairs(&mut general, (a, b), out);
            assert_eq!(
                batch_pairs(a, b, out).unwrap().as_slice(),
                general,
                "{a:?} {b:?}"
            );
        }
    }
}
