//! Batched matrix products `[..., m, k] x [..., k, n]` with broadcast batch axes, through
//! faer's GEMM in float64.
//!
//! float32 operands are widened to float64, multiplied, and the result rounded to float32 once
//! (numerics.md §1.5); a plan compiled at `Precision::Float32` multiplies them natively in
//! float32 instead. Batches are independent faer calls; large batched products split over
//! threads by batch, and a single large product runs faer's parallel GEMM, whose threads share
//! the packed operands. Neither changes the order in which an element accumulates, so a
//! product has the same bits whatever the thread count (tested against the sequential GEMM).

use crate::buffer::{Buffer, Pool, Storage, View, ViewMut};
use crate::kernels::layout::broadcast_strides;
use crate::kernels::{internal, par_for_each, scratch_oom, split_ranges, PAR_MIN_ELEMENTS};
use faer::{Accum, MatMut, MatRef, Par};
use quabla_backend::{BackendError, Result};
use quabla_ir::alloc::{self, AllocError};
use quabla_ir::DType;

/// Products of at least this many multiply-adds use more than one thread. Measured with
/// `cargo xtask bench --scaling` on two cores: a 64x64 product (2^18) takes 10 us on one thread
/// and 18-30 us split, a 128x128 one (2^21) 76 us on one and 63 us split.
const PAR_MIN_FLOPS: usize = 1 << 21;

/// The element types faer multiplies for us: float64 (the reference) and float32 (native, at
/// `Precision::Float32`).
pub(crate) trait GemmElem: faer::traits::ComplexField + Copy + Send + Sync {
    const ONE: Self;
}

impl GemmElem for f64 {
    const ONE: f64 = 1.0;
}

impl GemmElem for f32 {
    const ONE: f32 = 1.0;
}

/// One row-major `m x k` times `k x n` product into `c` (`m x n`), sequential.
pub(crate) fn gemm<T: GemmElem>(a: &[T], b: &[T], c: &mut [T], m: usize, k: usize, n: usize) {
    gemm_on(a, b, c, m, k, n, Par::Seq);
}

/// [`gemm`] with faer's parallelism `par`: faer splits blocks of the result over its threads
/// and shares the packed operands between them; every element accumulates in the order of
/// the sequential product.
fn gemm_on<T: GemmElem>(a: &[T], b: &[T], c: &mut [T], m: usize, k: usize, n: usize, par: Par) {
    let a = MatRef::from_row_major_slice(a, m, k);
    let b = MatRef::from_row_major_slice(b, k, n);
    let c = MatMut::from_row_major_slice_mut(c, m, n);
    faer::linalg::matmul::matmul(c, Accum::Replace, a, b, T::ONE, par);
    clear_upper_vector_state();
}

/// `(m, k, n)` and the batch index pairs of a `matmul` of operands of shapes `a_dims` and
/// `b_dims` into a result of shape `out_dims`.
type Geometry = (usize, usize, usize, Vec<(usize, usize)>);

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
}

/// `matmul` of operands `a` and `b` (values and shapes) into a result of shape `out_dims`.
/// With `native_f32` the product is faer's float32 GEMM with float32 accumulation; otherwise
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
    let mut scratch: Vec<Buffer> = Vec::with_capacity(3);
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
) -> std::result::Result<Vec<(usize, usize)>, AllocError> {
    let sa = broadcast_strides(a_batch, out_batch);
    let sb = broadcast_strides(b_batch, out_batch);
    let count: usize = out_batch.iter().product();
    let mut idx = vec![0usize; out_batch.len()];
    // As many pairs as result matrices, so as large as the result when they are 1x1.
    let mut out = alloc::try_vec_with_capacity(count)?;
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
    Ok(out)
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
        if large && threads > 1 {
            gemm_on(a, b, c, m, k, n, Par::rayon(threads));
        } else {
            gemm(a, b, c, m, k, n);
        }
    }
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

    #[test]
    fn broadcast_batch_pairs() {
        // a: [2, 1], b: [3] batch axes, result batch [2, 3].
        let p = batch_pairs(&[2, 1], &[3], &[2, 3]).unwrap();
        assert_eq!(p, vec![(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]);
        assert_eq!(batch_pairs(&[], &[], &[]).unwrap(), vec![(0, 0)]);
    }
}
