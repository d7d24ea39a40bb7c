//! `expm`: the matrix exponential by scaling and squaring with the degree-13 Padé approximant
//! (Higham, 2005), as a composition of IR ops: `matmul`, `solve` and `where`. It therefore
//! runs on every backend, batches over leading axes, and has derivatives of every order in
//! every mode (those of the algorithm, which approximate the Fréchet derivative to the same
//! accuracy as the value).
//!
//! The number of squarings `s = max(0, ceil(log2(|a|₁ / θ₁₃)))` depends on the data, so the
//! graph holds [`MAX_SQUARINGS`] conditional squarings, `r = where(k < s, r @ r, r)`, each
//! example keeping its own `s`. An eager call on a concrete matrix knows `s` and stops after
//! the last squaring any example needs (the values are the same bits). Inputs with
//! `|a|₁ > θ₁₃ · 2^MAX_SQUARINGS` (about 5.9e12) are scaled by `2^-MAX_SQUARINGS` only and
//! lose accuracy. A float32 input is computed in float64 and rounded once.

use super::dense::{dims, identity, square, Built};
use crate::dispatch::apply;
use crate::error::Result;
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{BinaryOp, Comparison, DType, GraphBuilder, NodeId, Op, Shape, UnaryOp};

/// The most squarings the graph holds (the bound on `s`).
pub const MAX_SQUARINGS: usize = 40;

/// θ₁₃: the largest 1-norm for which the degree-13 Padé approximant is accurate to double
/// precision (Higham, 2005, Table 2.3).
const THETA_13: f64 = 5.371_920_351_148_152;

/// The coefficients `b₀ .. b₁₃` of the degree-13 Padé approximant of `exp`.
const PADE_13: [f64; 14] = [
    64_764_752_532_480_000.0,
    32_382_376_266_240_000.0,
    7_771_770_303_897_600.0,
    1_187_353_796_428_800.0,
    129_060_195_264_000.0,
    10_559_470_521_600.0,
    670_442_572_800.0,
    33_522_128_640.0,
    1_323_241_920.0,
    40_840_800.0,
    960_960.0,
    16_380.0,
    182.0,
    1.0,
];

/// `expm(a)`: the matrix exponential of each `[..., n, n]` matrix (see the module docs).
///
/// ```
/// use quabla as qb;
/// # fn main() -> qb::Result<()> {
/// // The generator of rotations: expm(θ [[0, -1], [1, 0]]) rotates by θ.
/// let e = qb::linalg::expm(qb::array([[0.0, -0.5], [0.5, 0.0]])?)?;
/// let v = e.to_vec::<f64>()?;
/// assert!((v[0] - 0.5f64.cos()).abs() < 1e-15 && (v[2] - 0.5f64.sin()).abs() < 1e-15);
/// # Ok(())
/// # }
/// ```
#[track_caller]
pub fn expm(a: impl Into<Operand>) -> Result<Tensor> {
    let a = crate::ops::operand_tensor(a.into())?;
    // Eagerly the squarings can stop at the largest s of the batch (plus one for a rounding
    // difference between this host estimate and the graph's own s, which decides).
    let squarings = if a.is_traced() || a.ndim() < 2 {
        MAX_SQUARINGS
    } else {
        host_squarings(&a)?.map_or(MAX_SQUARINGS, |s| (s + 1).min(MAX_SQUARINGS))
    };
    apply(vec![Operand::Tensor(a)], move |g, x| {
        let n = square(g, x[0], "expm")?;
        let dtype = g.ty(x[0]).dtype;
        let wide = if dtype == DType::F64 {
            x[0]
        } else {
            g.push(
                Op::Cast {
                    to: DType::F64,
                    weak: false,
                },
                &[x[0]],
            )?
        };
        let r = build_expm(g, wide, n, squarings)?;
        if dtype == DType::F64 {
            Ok(r)
        } else {
            g.push(
                Op::Cast {
                    to: dtype,
                    weak: false,
                },
                &[r],
            )
        }
    })
}

/// The largest `s` over the batch of a concrete input, or `None` for a non-finite norm.
fn host_squarings(a: &Tensor) -> Result<Option<usize>> {
    let d = a.shape().to_vec();
    let n = d[d.len() - 1];
    if n == 0 || d[d.len() - 2] != n {
        return Ok(Some(0));
    }
    let v = a.to_vec::<f64>()?;
    let mut most = 0usize;
    for m in v.chunks(n * n) {
        let norm = (0..n)
            .map(|j| (0..n).map(|i| m[i * n + j].abs()).sum::<f64>())
            .fold(0.0f64, f64::max);
        if !norm.is_finite() {
            return Ok(None);
        }
        let s = (norm / THETA_13).log2().ceil();
        if s > 0.0 {
            most = most.max(s.min(MAX_SQUARINGS as f64) as usize);
        }
    }
    Ok(Some(most))
}

fn scalar(g: &mut GraphBuilder, v: f64) -> NodeId {
    g.weak_scalar(v)
}

/// `a` scaled, the Padé approximant, and `squarings` conditional squarings.
fn build_expm(g: &mut GraphBuilder, a: NodeId, n: usize, squarings: usize) -> Built {
    // s per matrix, as [..., 1, 1], from the 1-norm (no derivative flows through the choice).
    let frozen = g.stop_gradient(a)?;
    let neg = g.unary(UnaryOp::Neg, frozen)?;
    let zero = scalar(g, 0.0);
    let negative = g.compare(Comparison::Less, frozen, zero)?;
    let abs = g.select(negative, neg, frozen)?;
    let col_sums = g.sum(abs, Some(&[-2]), true)?;
    let norm = g.max(col_sums, Some(&[-1]), true)?;
    let theta = scalar(g, THETA_13);
    let ratio = g.div(norm, theta)?;
    let l = g.unary(UnaryOp::Log2, ratio)?;
    let s = g.unary(UnaryOp::Ceil, l)?;
    // Clamp to [0, MAX_SQUARINGS]; a NaN norm counts as 0 (the result is NaN anyway).
    let low = g.compare(Comparison::Greater, s, zero)?;
    let s = g.select(low, s, zero)?;
    let cap = scalar(g, MAX_SQUARINGS as f64);
    let high = g.compare(Comparison::Less, s, cap)?;
    let s = g.select(high, s, cap)?;
    let two = scalar(g, 2.0);
    let minus_s = g.unary(UnaryOp::Neg, s)?;
    let scale = g.binary(BinaryOp::Pow, two, minus_s)?;
    let x = g.mul(a, scale)?;

    let eye = identity(g, n, DType::F64)?;
    let x2 = g.matmul(x, x)?;
    let x4 = g.matmul(x2, x2)?;
    let x6 = g.matmul(x4, x2)?;
    let b = PADE_13;
    let combo = |g: &mut GraphBuilder, terms: &[(f64, NodeId)]| -> Built {
        let mut acc: Option<NodeId> = None;
        for &(c, m) in terms {
            let k = scalar(g, c);
            let t = g.mul(k, m)?;
            acc = Some(match acc {
                None => t,
                Some(a) => g.add(a, t)?,
            });
        }
        Ok(acc.expect("terms are given"))
    };
    let u_inner = combo(g, &[(b[13], x6), (b[11], x4), (b[9], x2)])?;
    let u_inner = g.matmul(x6, u_inner)?;
    let u_rest = combo(g, &[(b[7], x6), (b[5], x4), (b[3], x2), (b[1], eye)])?;
    let u_sum = g.add(u_inner, u_rest)?;
    let u = g.matmul(x, u_sum)?;
    let v_inner = combo(g, &[(b[12], x6), (b[10], x4), (b[8], x2)])?;
    let v_inner = g.matmul(x6, v_inner)?;
    let v_rest = combo(g, &[(b[6], x6), (b[4], x4), (b[2], x2), (b[0], eye)])?;
    let v = g.add(v_inner, v_rest)?;
    let p = g.sub(v, u)?;
    let q = g.add(v, u)?;
    let mut r = g.solve(p, q)?;
    // The leading shape may have grown by the identity's broadcast: keep the input's.
    let shape = Shape::new(dims(g, a))?;
    if dims(g, r) != shape.dims() {
        r = g.broadcast_to(r, shape)?;
    }
    for k in 0..squarings {
        let kth = scalar(g, k as f64);
        let more = g.compare(Comparison::Greater, s, kth)?;
        let sq = g.matmul(r, r)?;
        r = g.select(more, sq, r)?;
    }
    Ok(r)
}
