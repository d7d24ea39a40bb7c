//! The float32 reference product of large matrices (numerics.md §1.5: computed in float64,
//! rounded once) as one GEMM that widens its float32 operands while it packs them, on x86-64
//! with AVX-512.
//!
//! The general path widens both operands into float64 copies, multiplies the copies with
//! faer and rounds a float64 result: three more passes over memory than a float64 product,
//! which kept a 512×512 float32 product 11–17% slower than the float64 one on an Intel
//! Xeon whose float64 GEMM outruns its memory. Here each thread widens its own band of
//! `a` into a packed block, widens each panel of `b` columns as the first tile that uses it
//! reads it, keeps every element's sums in registers and rounds them as it stores them.
//!
//! The order of summation is faer's (the bits of [`super::gemm`] on the widened operands,
//! rounded): each element sums its depth in blocks of [`DEPTH_BLOCK`] terms from the first,
//! each block from `+0.0` by one fused multiply-add per term in order, and the blocks are
//! added to the first in order. A test compares the two bit for bit over many shapes and
//! special values, so the general path stays a valid fallback: which of the two runs may
//! depend on the machine and the thread count ([`runs`]), the bits do not. (Except in one
//! respect no path promises: where two different NaNs meet in one sum, which payload
//! survives depends on the operand order the compiler picks for an addition.)
//!
//! This module owns the packing, the register kernel and the split into bands of rows; it
//! must not decide anything about float64 or native float32 products.

// Off x86-64 `runs` is false and only the portable helpers below are compiled, unused.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use super::{in_bands, row_bands, DEPTH_BLOCK, SMALL_MAX_FLOPS};
use crate::buffer::{Pool, Storage, ViewMut};
use crate::kernels::split_ranges;
use crate::kernels::{internal, par_for_each, scratch_oom};
use quabla_backend::Result;
use quabla_ir::DType;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m512d, _mm256_loadu_ps, _mm256_storeu_ps, _mm512_add_pd, _mm512_cvtpd_ps, _mm512_cvtps_pd,
    _mm512_fmadd_pd, _mm512_loadu_pd, _mm512_set1_pd, _mm512_setzero_pd, _mm512_storeu_pd,
};

/// Rows of a register tile: each term broadcasts one element of `a` per row.
const MR: usize = 8;
/// Vectors of eight float64 lanes across a tile's columns.
const NV: usize = 3;
/// Columns of a register tile: `MR x NR` accumulators are 24 of the 32 vector registers
/// (8 x 24 measured faster than 12 x 16 and 6 x 32 on a 512×512 product).
const NR: usize = 8 * NV;
/// Depth of a packed block: faer's depth block, so that every block of an element's sum is
/// one run of the register kernel.
const KC: usize = DEPTH_BLOCK;
/// Distance between the packed rows of `a`: a little more than [`KC`], so that the eight rows
/// a tile reads do not map to the same cache sets.
const KC_STRIDE: usize = KC + 8;

/// The left operand of a product: an `m x k` row-major matrix, or the `k x m` row-major
/// matrix whose transpose it is (a `transpose` folded into the product).
#[derive(Clone, Copy)]
pub(super) enum Lhs<'a> {
    Rows(&'a [f32]),
    Transposed(&'a [f32]),
}

/// Whether the float32 reference product of an `m x k` by `k x n` pair on `threads` threads
/// runs here. The machine needs AVX-512; the product must be too large for `small_gemm`,
/// have rows for a few tiles and columns for a full one, and on several threads be one that
/// the general path would split into bands of rows (the one split of a single product done
/// here) rather than over faer's threads. Everything else stays on the general path, which
/// gives the same bits. (A batch of products splits over its pairs: see [`products`].)
pub(super) fn runs(m: usize, k: usize, n: usize, threads: usize) -> bool {
    let large = m * k * n > SMALL_MAX_FLOPS && m >= 2 * MR && n >= NR && k >= 2;
    let split_here = threads <= 1 || m * k * n < super::PAR_MIN_FLOPS || in_bands(m, k, n, threads);
    large && split_here && has_avx512()
}

#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

#[cfg(not(target_arch = "x86_64"))]
fn has_avx512() -> bool {
    false
}

/// `c = round(a_i · b_j)` for each batch pair `(i, j)` of `pairs` (`a` a stack of `m x k`
/// matrices, `b` of `k x n`, `c` of `m x n`, row-major): one pair as [`product`]; several
/// split over the threads by pairs, as the general path splits a batch, each pair one band.
/// For products that [`runs`] takes on one thread.
pub(super) fn products(
    a: &[f32],
    b: &[f32],
    pairs: &[(usize, usize)],
    c: &mut [f32],
    (m, k, n): (usize, usize, usize),
    threads: usize,
    pool: &mut Pool,
) -> Result<()> {
    let (sa, sb, sc) = (m * k, k * n, m * n);
    if let [(ia, ib)] = *pairs {
        let lhs = Lhs::Rows(&a[ia * sa..(ia + 1) * sa]);
        return product(lhs, &b[ib * sb..(ib + 1) * sb], c, (m, k, n), threads, pool);
    }
    if !runs(m, k, n, 1) {
        return Err(internal(format!(
            "a batch of {m}x{k} by {k}x{n} float32 products is not one for the widening GEMM"
        )));
    }
    let large = pairs.len() * sa * n >= super::PAR_MIN_FLOPS;
    let mut rest = c;
    let mut parts = Vec::new();
    for (first, end) in split_ranges(pairs.len(), if large { threads } else { 1 }, 1) {
        let (mine, next) = std::mem::take(&mut rest).split_at_mut((end - first) * sc);
        rest = next;
        let bands = pairs[first..end].iter().zip(mine.chunks_mut(sc));
        let part = bands.map(|(&(ia, ib), c)| {
            let band = Band {
                lhs: Lhs::Rows(&a[ia * sa..(ia + 1) * sa]),
                rows: 0..m,
                b: &b[ib * sb..(ib + 1) * sb],
                shape: (m, k, n),
            };
            (band, c)
        });
        parts.push(part.collect());
    }
    run_parts(parts, threads, pool)
}

/// Multiplies each part's bands in order on one thread, the parts over `threads`: each part
/// with its own scratch from `pool` (for its tallest band), given back afterwards. Only for
/// products that [`runs`] takes.
fn run_parts(
    parts: Vec<Vec<(Band<'_>, &mut [f32])>>,
    threads: usize,
    pool: &mut Pool,
) -> Result<()> {
    let mut scratch = Vec::with_capacity(3 * parts.len());
    let ran = (|| -> Result<()> {
        for part in &parts {
            let Some((band, _)) = part.first() else {
                continue;
            };
            let (_, k, n) = band.shape;
            let rows = part
                .iter()
                .map(|(band, _)| band.rows.len())
                .max()
                .unwrap_or(0);
            for len in scratch_lens(rows, k, n) {
                scratch.push(pool.alloc(DType::F64, len).map_err(scratch_oom)?);
            }
        }
        let mut items = Vec::with_capacity(parts.len());
        let mut buffers = scratch.iter_mut();
        for part in parts.into_iter().filter(|part| !part.is_empty()) {
            let (packed_a, panel, sums) = (
                f64_view(buffers.next())?,
                f64_view(buffers.next())?,
                f64_view(buffers.next())?,
            );
            items.push((part, packed_a, panel, sums));
        }
        par_for_each(items, threads, |(part, packed_a, panel, sums)| {
            for (band, c) in part {
                // SAFETY: `runs` checked that the CPU has AVX-512.
                unsafe { band.multiply(c, packed_a, panel, sums) };
            }
            super::clear_upper_vector_state();
        });
        Ok(())
    })();
    for buffer in scratch {
        pool.recycle(Storage::Owned(buffer));
    }
    ran
}

/// The scratch of a band of `rows` rows: its packed rows of `a`, one packed panel of `b`, and
/// its running float64 sums when the depth has more than one block.
fn scratch_lens(rows: usize, k: usize, n: usize) -> [usize; 3] {
    [
        rows.div_ceil(MR) * MR * KC_STRIDE,
        KC * NR,
        if k > KC { rows * n } else { 1 },
    ]
}

/// The float64 elements of a scratch buffer.
fn f64_view(buffer: Option<&mut crate::buffer::Buffer>) -> Result<&mut [f64]> {
    match buffer.map(|b| b.view_mut()) {
        Some(ViewMut::F64(v)) => Ok(v),
        _ => Err(internal("a float64 scratch buffer is not float64")),
    }
}

/// `c = round(lhs · b)` for a product that [`runs`] here: `b` is `k x n`, `c` is `m x n`,
/// both row-major. Bands of rows over the threads where the general path has them.
pub(super) fn product(
    lhs: Lhs<'_>,
    b: &[f32],
    c: &mut [f32],
    (m, k, n): (usize, usize, usize),
    threads: usize,
    pool: &mut Pool,
) -> Result<()> {
    if !runs(m, k, n, threads) {
        return Err(internal(format!(
            "a {m}x{k} by {k}x{n} float32 product is not one for the widening GEMM"
        )));
    }
    let bands = if threads > 1 && in_bands(m, k, n, threads) {
        row_bands(c, m, n, threads, super::SPLIT_ALIGN_ROWS)
    } else {
        vec![(0, m, c)]
    };
    let parts = bands.into_iter().map(|(start, end, c)| {
        let band = Band {
            lhs,
            rows: start..end,
            b,
            shape: (m, k, n),
        };
        vec![(band, c)]
    });
    run_parts(parts.collect(), threads, pool)
}

/// One band of rows of a product: what a thread multiplies.
struct Band<'a> {
    lhs: Lhs<'a>,
    rows: std::ops::Range<usize>,
    b: &'a [f32],
    shape: (usize, usize, usize),
}

/// What a tile does with its block sums once its depth block is done.
#[derive(Clone, Copy, PartialEq)]
enum Block {
    /// The only block: round the sums into `c`.
    Only,
    /// The first of several: store the sums as the running sums.
    First,
    /// A middle block: add the sums to the running sums.
    Middle,
    /// The last of several: round running sums plus block sums into `c`.
    Last,
}

impl Band<'_> {
    /// `c` (this band's rows of the result) = the band's rows of the product, rounded.
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn multiply(
        &self,
        c: &mut [f32],
        packed_a: &mut [f64],
        panel: &mut [f64],
        sums: &mut [f64],
    ) {
        let (_, k, n) = self.shape;
        let rows = self.rows.len();
        let blocks = k.div_ceil(KC);
        for block in 0..blocks {
            let first = block * KC;
            let depth = (k - first).min(KC);
            let role = match (block, blocks) {
                (_, 1) => Block::Only,
                (0, _) => Block::First,
                (b, all) if b + 1 == all => Block::Last,
                _ => Block::Middle,
            };
            self.pack_a(first, depth, packed_a);
            for j0 in (0..n).step_by(NR) {
                let width = (n - j0).min(NR);
                // The first tile of a full panel widens the panel as it reads it; a partial
                // panel (the last columns) is packed with zeros first.
                let mut widened = false;
                if width < NR {
                    pack_panel(self.b, n, (first, depth), (j0, width), panel);
                    widened = true;
                }
                for i0 in (0..rows).step_by(MR) {
                    let height = (rows - i0).min(MR);
                    let a = &packed_a[i0 * KC_STRIDE..(i0 + MR) * KC_STRIDE];
                    let source = if widened {
                        Panel::Packed(&*panel)
                    } else {
                        widened = true;
                        Panel::Widen {
                            b: &self.b[first * n + j0..],
                            ld: n,
                            into: &mut *panel,
                        }
                    };
                    let at = i0 * n + j0;
                    // The running sums (none for a single block).
                    let sums_at = at.min(sums.len());
                    if height == MR && width == NR {
                        // SAFETY: AVX-512F (this function's contract); the kernel checks its
                        // slices' lengths.
                        unsafe {
                            tile(
                                a,
                                source,
                                depth,
                                Out {
                                    c: &mut c[at..],
                                    sums: &mut sums[sums_at..],
                                    ld: n,
                                    role,
                                },
                            )
                        };
                    } else {
                        let mut acc = [0.0; MR * NR];
                        let out = Out {
                            c: &mut [],
                            sums: &mut acc,
                            ld: NR,
                            role: Block::First,
                        };
                        // SAFETY: as above.
                        unsafe { tile(a, source, depth, out) };
                        finish_edge(
                            &acc,
                            (height, width),
                            &mut c[at..],
                            &mut sums[sums_at..],
                            n,
                            role,
                        );
                    }
                }
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn multiply(&self, _: &mut [f32], _: &mut [f64], _: &mut [f64], _: &mut [f64]) {
        unreachable!("`runs` is false off x86-64")
    }

    /// Packs columns `first..first + depth` of the band's rows of `a`, widened, into
    /// `packed`: row `i` of the band at `i * KC_STRIDE`, rows past the band zero up to a
    /// multiple of [`MR`]. (Inlined into the AVX-512 caller, whose vector width it then uses.)
    #[inline(always)]
    fn pack_a(&self, first: usize, depth: usize, packed: &mut [f64]) {
        let (m, k, _) = self.shape;
        let rows = self.rows.len();
        match self.lhs {
            Lhs::Rows(a) => {
                for (i, row) in self.rows.clone().enumerate() {
                    let src = &a[row * k + first..row * k + first + depth];
                    widen(src, &mut packed[i * KC_STRIDE..i * KC_STRIDE + depth]);
                }
            }
            Lhs::Transposed(x) => {
                // `a[i][p] = x[p][i]`: each row of `x` gives one column of the packed rows.
                for p in 0..depth {
                    let src =
                        &x[(first + p) * m + self.rows.start..(first + p) * m + self.rows.end];
                    for (i, &v) in src.iter().enumerate() {
                        packed[i * KC_STRIDE + p] = f64::from(v);
                    }
                }
            }
        }
        for i in rows..rows.div_ceil(MR) * MR {
            packed[i * KC_STRIDE..i * KC_STRIDE + depth].fill(0.0);
        }
    }
}

/// Where a tile reads its panel of `b` (`depth x NR`, packed row after row).
enum Panel<'a> {
    /// Packed already.
    Packed(&'a [f64]),
    /// To be read from the float32 matrix (`b` from the panel's first element, rows `ld`
    /// apart), widened and stored into `into` for the tiles after this one.
    Widen {
        b: &'a [f32],
        ld: usize,
        into: &'a mut [f64],
    },
}

/// Where a full tile's sums go: `c` and `sums` from the tile's first element, rows `ld`
/// apart; `role` says which (see [`Block`]).
struct Out<'a> {
    c: &'a mut [f32],
    sums: &'a mut [f64],
    ld: usize,
    role: Block,
}

/// The register kernel: one `MR x NR` tile of one depth block, every sum from `+0.0` by one
/// fused multiply-add per term in order, then stored as `out.role` says.
///
/// # Safety
/// The CPU has AVX-512F. (Slice lengths are checked here.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile(a: &[f64], panel: Panel<'_>, depth: usize, out: Out<'_>) {
    assert!(a.len() >= (MR - 1) * KC_STRIDE + depth);
    let mut acc: [[__m512d; NV]; MR] = [[_mm512_setzero_pd(); NV]; MR];
    let a = a.as_ptr();
    match panel {
        Panel::Packed(b) => {
            assert!(b.len() >= depth * NR);
            let b = b.as_ptr();
            for p in 0..depth {
                // SAFETY: `p * NR + NR <= depth * NR <= b.len()`.
                let bv: [__m512d; NV] =
                    std::array::from_fn(|v| unsafe { _mm512_loadu_pd(b.add(p * NR + v * 8)) });
                // SAFETY: `r * KC_STRIDE + p < (MR - 1) * KC_STRIDE + depth <= a.len()`.
                unsafe { terms(&mut acc, a.add(p), &bv) };
            }
        }
        Panel::Widen { b, ld, into } => {
            assert!(depth >= 1 && b.len() >= (depth - 1) * ld + NR && into.len() >= depth * NR);
            let (b, into) = (b.as_ptr(), into.as_mut_ptr());
            for p in 0..depth {
                let bv: [__m512d; NV] = std::array::from_fn(|v| {
                    // SAFETY: `p * ld + v * 8 + 8 <= (depth - 1) * ld + NR <= b.len()`, and
                    // `p * NR + v * 8 + 8 <= depth * NR <= into.len()`.
                    unsafe {
                        let wide = _mm512_cvtps_pd(_mm256_loadu_ps(b.add(p * ld + v * 8)));
                        _mm512_storeu_pd(into.add(p * NR + v * 8), wide);
                        wide
                    }
                });
                // SAFETY: as in the packed case.
                unsafe { terms(&mut acc, a.add(p), &bv) };
            }
        }
    }
    store(&acc, out);
}

/// One term of every sum of a tile: `acc[r][v] = fma(a[r * KC_STRIDE], b[v], acc[r][v])`.
///
/// # Safety
/// AVX-512F, and `a.add(r * KC_STRIDE)` readable for every row `r < MR`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn terms(acc: &mut [[__m512d; NV]; MR], a: *const f64, b: &[__m512d; NV]) {
    for (r, acc_r) in acc.iter_mut().enumerate() {
        // SAFETY: the caller's contract.
        let x = _mm512_set1_pd(unsafe { *a.add(r * KC_STRIDE) });
        for (acc_rv, &bv) in acc_r.iter_mut().zip(b) {
            *acc_rv = _mm512_fmadd_pd(x, bv, *acc_rv);
        }
    }
}

/// Stores a full tile's sums as `out.role` says.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn store(acc: &[[__m512d; NV]; MR], out: Out<'_>) {
    let Out { c, sums, ld, role } = out;
    let span = (MR - 1) * ld + NR;
    let needs_c = matches!(role, Block::Only | Block::Last);
    assert!((!needs_c || c.len() >= span) && (role == Block::Only || sums.len() >= span));
    let (c, sums) = (c.as_mut_ptr(), sums.as_mut_ptr());
    for (r, acc_r) in acc.iter().enumerate() {
        for (v, &value) in acc_r.iter().enumerate() {
            let at = r * ld + v * 8;
            // SAFETY: `at + 8 <= span`, within the slices checked above.
            unsafe {
                match role {
                    Block::Only => _mm256_storeu_ps(c.add(at), _mm512_cvtpd_ps(value)),
                    Block::First => _mm512_storeu_pd(sums.add(at), value),
                    Block::Middle => {
                        let total = _mm512_add_pd(_mm512_loadu_pd(sums.add(at)), value);
                        _mm512_storeu_pd(sums.add(at), total);
                    }
                    Block::Last => {
                        let total = _mm512_add_pd(_mm512_loadu_pd(sums.add(at)), value);
                        _mm256_storeu_ps(c.add(at), _mm512_cvtpd_ps(total));
                    }
                }
            }
        }
    }
}

/// Stores the `height x width` corner of an edge tile's block sums `acc` (rows [`NR`] apart)
/// as `role` says, into `c` and `sums` (rows `ld` apart).
fn finish_edge(
    acc: &[f64],
    (height, width): (usize, usize),
    c: &mut [f32],
    sums: &mut [f64],
    ld: usize,
    role: Block,
) {
    for r in 0..height {
        for j in 0..width {
            let (value, at) = (acc[r * NR + j], r * ld + j);
            match role {
                Block::Only => c[at] = value as f32,
                Block::First => sums[at] = value,
                Block::Middle => sums[at] += value,
                Block::Last => c[at] = (sums[at] + value) as f32,
            }
        }
    }
}

/// Packs the `depth x width` panel of `b` (`k x n`) at rows `first..` and columns `j0..`,
/// widened, into `panel` (`NR` per row, columns past `width` zero).
#[inline(always)]
fn pack_panel(
    b: &[f32],
    n: usize,
    (first, depth): (usize, usize),
    (j0, width): (usize, usize),
    panel: &mut [f64],
) {
    for p in 0..depth {
        let src = &b[(first + p) * n + j0..(first + p) * n + j0 + width];
        let dst = &mut panel[p * NR..(p + 1) * NR];
        widen(src, &mut dst[..width]);
        dst[width..].fill(0.0);
    }
}

/// `dst = src` widened (exact).
#[inline(always)]
fn widen(src: &[f32], dst: &mut [f64]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f64::from(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::matmul::{faer_sums_depth_in_blocks, gemm};

    /// The order this kernel promises, written out: each element's depth in blocks of
    /// `DEPTH_BLOCK` terms from the first, each block from `+0.0` by fused multiply-adds in
    /// order, the blocks added to the first in order, the total rounded once.
    fn definition(a: &[f32], b: &[f32], (m, k, n): (usize, usize, usize)) -> Vec<u32> {
        let mut c = Vec::with_capacity(m * n);
        for i in 0..m {
            for j in 0..n {
                let mut total: Option<f64> = None;
                for first in (0..k).step_by(DEPTH_BLOCK) {
                    let mut sum = 0.0f64;
                    for p in first..(first + DEPTH_BLOCK).min(k) {
                        sum = f64::from(a[i * k + p]).mul_add(f64::from(b[p * n + j]), sum);
                    }
                    total = Some(total.map_or(sum, |t| t + sum));
                }
                c.push((total.unwrap_or(0.0) as f32).to_bits());
            }
        }
        c
    }

    /// faer's float64 product of the widened operands, rounded: what the general path gives.
    fn general_path(a: &[f32], b: &[f32], (m, k, n): (usize, usize, usize)) -> Vec<u32> {
        let a64: Vec<f64> = a.iter().map(|&x| f64::from(x)).collect();
        let b64: Vec<f64> = b.iter().map(|&x| f64::from(x)).collect();
        let mut c = vec![0.0; m * n];
        gemm(&a64, &b64, &mut c, m, k, n);
        c.iter().map(|&x| (x as f32).to_bits()).collect()
    }

    /// Ordinary values of several magnitudes, with special rows and columns: row 0 of `a`
    /// all `-0.0` (every product a signed zero), row 1 one infinity, row 2 one NaN, row 3
    /// subnormal (its sums are float32 subnormals); column 0 of `b` near float32's largest
    /// (sums round to infinity), column 1 tiny (sums of products near 1e-30), column 2 all
    /// `-0.0`.
    fn operands(m: usize, k: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
        let mut a: Vec<f32> = (0..m * k)
            .map(|i| (i as f32 * 0.37).sin() * [1.0, 1e-3, 7.5][i % 3])
            .collect();
        let mut b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos() * 3.0).collect();
        a[..k].fill(-0.0);
        a[k + k / 2] = f32::INFINITY;
        a[2 * k + k / 3] = f32::NAN;
        for p in 0..k {
            a[3 * k + p] = 1e-40 * (p % 5) as f32;
            b[p * n] = 3.0e38 * if p % 7 == 0 { -1.0 } else { 1.0 };
            b[p * n + 1] = 1e-30;
            b[p * n + 2] = -0.0;
        }
        (a, b)
    }

    /// A NaN no element of a result has (its payload is not the one a NaN sum produces), so
    /// an element left unwritten shows.
    const UNWRITTEN: u32 = 0x7fc0_1234;

    fn run(lhs: Lhs<'_>, b: &[f32], (m, k, n): (usize, usize, usize), threads: usize) -> Vec<u32> {
        let mut c = vec![f32::from_bits(UNWRITTEN); m * n];
        product(lhs, b, &mut c, (m, k, n), threads, &mut Pool::default()).unwrap();
        c.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn widening_products_follow_their_order_and_have_the_general_paths_bits() {
        if !has_avx512() {
            eprintln!("no AVX-512 here: the widening GEMM never runs, nothing to compare");
            return;
        }
        // Near the smallest shape taken, partial tiles in both directions, one to three depth
        // blocks (a last block of one term), bands over 2 and 3 threads.
        let shapes = [
            (16, 22, 24),
            (17, 21, 25),
            (64, 512, 64),
            (70, 513, 110),
            (33, 1100, 47),
            (200, 300, 97),
        ];
        for (m, k, n) in shapes {
            assert!(runs(m, k, n, 1), "{m}x{k}x{n} is not taken");
            let (a, b) = operands(m, k, n);
            let want = definition(&a, &b, (m, k, n));
            if faer_sums_depth_in_blocks() {
                assert!(
                    general_path(&a, &b, (m, k, n)) == want,
                    "faer's order changed: {m}x{k}x{n}"
                );
            }
            // The transposed operand: `x` is `a`'s transpose, stored.
            let x: Vec<f32> = (0..k * m).map(|q| a[(q % m) * k + q / m]).collect();
            for threads in [1, 2, 3] {
                if !runs(m, k, n, threads) {
                    continue;
                }
                let got = run(Lhs::Rows(&a), &b, (m, k, n), threads);
                let bad = got.iter().zip(&want).position(|(g, w)| g != w);
                assert!(
                    bad.is_none(),
                    "{m}x{k}x{n} on {threads} threads: element {bad:?}"
                );
                let got = run(Lhs::Transposed(&x), &b, (m, k, n), threads);
                assert!(got == want, "transposed {m}x{k}x{n} on {threads} threads");
            }
        }
    }

    #[test]
    fn widening_runs_only_where_it_may() {
        // Too small for a tile, one column short of a panel, one term deep (an outer
        // product, whose zero signs are faer's), or small enough for `small_gemm`.
        for (m, k, n) in [(15, 512, 512), (512, 512, 23), (512, 1, 512), (16, 16, 24)] {
            assert!(!runs(m, k, n, 1), "{m}x{k}x{n}");
        }
        assert_eq!(runs(512, 512, 512, 1), has_avx512());
        assert_eq!(runs(512, 512, 512, 2), has_avx512());
    }
}
