//! Derivative rules of the linear-algebra primitives, written as IR builders (numerics.md
//! §6.5); `quabla-autodiff` delegates its `solve`, `triangular_solve`, `cholesky`,
//! `cholesky_ad` and `linalg` arms here. Tangents and cotangents are `Option<NodeId>`: `None` is
//! a structural zero. Every rule is built from IR ops (products, triangular solves, `where`,
//! slices and the factorizations themselves), so the rules differentiate again to any order and
//! batch like any other graph.
//!
//! - `solve`: `dx = solve(a, db - da x)`; reverse `b_bar = solve(a^T, x_bar)`,
//!   `a_bar = -b_bar x^T`.
//! - `triangular_solve`: the same with `op(a)`, and only the read triangle (without a unit
//!   diagonal) receives a derivative.
//! - `cholesky`: the kernel reads only the lower triangle of `a`, so it computes
//!   `chol(low(a))` with `low(m) = tril(m) + tril(m, -1)ᵀ`, the symmetric matrix of that
//!   triangle, and the rules differentiate exactly that function: `dl = cholesky_ad(l, low(da))`
//!   with `cholesky_ad(l, s) = l Φ(l⁻¹ s l⁻ᵀ)` (Φ: lower triangle, diagonal halved); reverse
//!   `a_bar = low*(l⁻ᵀ Φ(lᵀ l_bar) l⁻¹)` with the adjoint `low*(g) = tril(g) + tril(gᵀ, -1)`.
//!   The upper triangle receives exactly zero; for a symmetric perturbation `da` the tangent is
//!   the standard symmetric rule, since `low(da) = da` then.
//! - `cholesky_ad(l, s)` itself (the third and higher orders through `cholesky`): linear in `s`;
//!   in `l` (of which only the lower triangle `L` is read) with `X = L⁻¹ s L⁻ᵀ`,
//!   `d out = dL Φ(X) + cholesky_ad(l, -(dL L⁻¹ s + s L⁻ᵀ dLᵀ))`, so the rule is again a
//!   `cholesky_ad` plus triangular solves and products.
//! - The `linalg` kinds (`slogdet`, `eigh`, `qr`, `svd` outputs): [`linalg_jvp`] and
//!   [`linalg_vjp`], in the `decompositions` submodule.

use quabla_ir::{Comparison, GraphBuilder, HostData, NodeId, Op, Result, Shape, UnaryOp};

mod decompositions;

pub use decompositions::{linalg_jvp, linalg_vjp};

/// Swaps the last two axes.
fn mt(b: &mut GraphBuilder, x: NodeId) -> Result<NodeId> {
    let r = b.ty(x).shape.rank() as isize;
    let mut perm: Vec<isize> = (0..r).collect();
    perm.swap((r - 1) as usize, (r - 2) as usize);
    b.transpose(x, Some(&perm))
}

fn matmul(b: &mut GraphBuilder, x: NodeId, y: NodeId) -> Result<NodeId> {
    b.push(Op::Matmul, &[x, y])
}

/// `(m + mᵀ) / 2`.
fn sym(b: &mut GraphBuilder, m: NodeId) -> Result<NodeId> {
    let t = mt(b, m)?;
    let s = b.add(m, t)?;
    let half = b.weak_scalar(0.5);
    b.mul(s, half)
}

/// An `[n, n]` mask of the positions `row <cmp> col` (broadcast over batch axes by `where`).
fn triangle(b: &mut GraphBuilder, n: usize, cmp: Comparison) -> Result<NodeId> {
    let idx: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let rows = b.constant(
        HostData::F64(idx.clone().into()),
        Shape::new(vec![n, 1])?,
        false,
    )?;
    let cols = b.constant(HostData::F64(idx.into()), Shape::new(vec![1, n])?, false)?;
    b.compare(cmp, rows, cols)
}

fn size(b: &GraphBuilder, x: NodeId) -> usize {
    let d = b.ty(x).shape.dims();
    d[d.len() - 1]
}

/// Φ(m): the lower triangle of `m` with its diagonal halved.
fn phi(b: &mut GraphBuilder, m: NodeId) -> Result<NodeId> {
    let n = size(b, m);
    let below = triangle(b, n, Comparison::Greater)?;
    let diag = triangle(b, n, Comparison::Equal)?;
    let zero = b.weak_scalar(0.0);
    let half = b.weak_scalar(0.5);
    let halved = b.mul(m, half)?;
    let d = b.select(diag, halved, zero)?;
    b.select(below, m, d)
}

/// Keeps the triangle a triangular solve reads (`lower` or upper, without the diagonal when
/// `unit_diagonal`).
fn read_triangle(
    b: &mut GraphBuilder,
    m: NodeId,
    lower: bool,
    unit_diagonal: bool,
) -> Result<NodeId> {
    let n = size(b, m);
    let cmp = match (lower, unit_diagonal) {
        (true, false) => Comparison::GreaterEqual,
        (true, true) => Comparison::Greater,
        (false, false) => Comparison::LessEqual,
        (false, true) => Comparison::Less,
    };
    let mask = triangle(b, n, cmp)?;
    let zero = b.weak_scalar(0.0);
    b.select(mask, m, zero)
}

/// `op(a)⁻¹ rhs` reading one triangle of `a` (`op` transposes when `transpose_a`).
fn tri_solve(
    b: &mut GraphBuilder,
    a: NodeId,
    rhs: NodeId,
    lower: bool,
    transpose_a: bool,
) -> Result<NodeId> {
    b.push(
        Op::TriangularSolve {
            lower,
            transpose_a,
            unit_diagonal: false,
        },
        &[a, rhs],
    )
}

fn sub_opt(b: &mut GraphBuilder, x: Option<NodeId>, y: Option<NodeId>) -> Result<Option<NodeId>> {
    Ok(match (x, y) {
        (None, None) => None,
        (Some(x), None) => Some(x),
        (None, Some(y)) => Some(b.unary(UnaryOp::Neg, y)?),
        (Some(x), Some(y)) => Some(b.sub(x, y)?),
    })
}

/// `op(a)⁻¹ rhs` by the LU factors of `a` (`op` transposes when `transpose_a`). Every solve
/// a rule adds reads the factors of the same `a` as the primal, so a backend that shares
/// factorizations (the CPU backend does) factors `a` once for all of them.
pub fn lu_solve(b: &mut GraphBuilder, a: NodeId, rhs: NodeId, transpose_a: bool) -> Result<NodeId> {
    b.push(Op::Solve { transpose_a }, &[a, rhs])
}

/// Tangent of `x = solve(op(a), rhs)`: `solve(op(a), drhs - op(da) x)`.
pub fn solve_jvp(
    b: &mut GraphBuilder,
    a: NodeId,
    x: NodeId,
    da: Option<NodeId>,
    drhs: Option<NodeId>,
    transpose_a: bool,
) -> Result<Option<NodeId>> {
    let dax = match da {
        None => None,
        Some(d) => {
            let d = if transpose_a { mt(b, d)? } else { d };
            Some(matmul(b, d, x)?)
        }
    };
    match sub_opt(b, drhs, dax)? {
        None => Ok(None),
        Some(r) => Ok(Some(lu_solve(b, a, r, transpose_a)?)),
    }
}

/// Cotangents `(a_bar, rhs_bar)` of `x = solve(op(a), rhs)`: `rhs_bar = solve(op(a)ᵀ, x_bar)`
/// (the other orientation, with the same factors), and `a_bar = -rhs_bar xᵀ`, transposed when
/// `op` is.
pub fn solve_vjp(
    b: &mut GraphBuilder,
    a: NodeId,
    x: NodeId,
    x_bar: NodeId,
    transpose_a: bool,
) -> Result<(NodeId, NodeId)> {
    let rhs_bar = lu_solve(b, a, x_bar, !transpose_a)?;
    let p = if transpose_a {
        let rt = mt(b, rhs_bar)?;
        matmul(b, x, rt)?
    } else {
        let xt = mt(b, x)?;
        matmul(b, rhs_bar, xt)?
    };
    let a_bar = b.unary(UnaryOp::Neg, p)?;
    Ok((a_bar, rhs_bar))
}

/// Tangent of `x = triangular_solve(a, rhs)` (solving `op(a) x = rhs`).
pub fn triangular_solve_jvp(
    b: &mut GraphBuilder,
    a: NodeId,
    x: NodeId,
    da: Option<NodeId>,
    drhs: Option<NodeId>,
    flags: (bool, bool, bool),
) -> Result<Option<NodeId>> {
    let (lower, transpose_a, unit_diagonal) = flags;
    let dax = match da {
        None => None,
        Some(d) => {
            let d = read_triangle(b, d, lower, unit_diagonal)?;
            let d = if transpose_a { mt(b, d)? } else { d };
            Some(matmul(b, d, x)?)
        }
    };
    match sub_opt(b, drhs, dax)? {
        None => Ok(None),
        Some(r) => Ok(Some(b.push(
            Op::TriangularSolve {
                lower,
                transpose_a,
                unit_diagonal,
            },
            &[a, r],
        )?)),
    }
}

/// Cotangents `(a_bar, rhs_bar)` of `x = triangular_solve(a, rhs)`.
pub fn triangular_solve_vjp(
    b: &mut GraphBuilder,
    a: NodeId,
    x: NodeId,
    x_bar: NodeId,
    flags: (bool, bool, bool),
) -> Result<(NodeId, NodeId)> {
    let (lower, transpose_a, unit_diagonal) = flags;
    let rhs_bar = b.push(
        Op::TriangularSolve {
            lower,
            transpose_a: !transpose_a,
            unit_diagonal,
        },
        &[a, x_bar],
    )?;
    // op(a)_bar = -rhs_bar xᵀ; a_bar is its transpose when op transposes.
    let xt = mt(b, x)?;
    let p = matmul(b, rhs_bar, xt)?;
    let p = b.unary(UnaryOp::Neg, p)?;
    let p = if transpose_a { mt(b, p)? } else { p };
    Ok((read_triangle(b, p, lower, unit_diagonal)?, rhs_bar))
}

/// `low(m) = tril(m) + tril(m, -1)ᵀ`: the symmetric matrix the lower triangle of `m` stands
/// for.
fn low(b: &mut GraphBuilder, m: NodeId) -> Result<NodeId> {
    let n = size(b, m);
    let lower = read_triangle(b, m, true, false)?;
    let below = triangle(b, n, Comparison::Greater)?;
    let zero = b.weak_scalar(0.0);
    let strict = b.select(below, m, zero)?;
    let strict_t = mt(b, strict)?;
    b.add(lower, strict_t)
}

/// The adjoint of [`low`]: `tril(g) + tril(gᵀ, -1)`.
fn low_adjoint(b: &mut GraphBuilder, g: NodeId) -> Result<NodeId> {
    let n = size(b, g);
    let lower = read_triangle(b, g, true, false)?;
    let gt = mt(b, g)?;
    let below = triangle(b, n, Comparison::Greater)?;
    let zero = b.weak_scalar(0.0);
    let strict = b.select(below, gt, zero)?;
    b.add(lower, strict)
}

/// Tangent of `l = cholesky(a)` (of the lower triangle of `a`, which is all the kernel reads).
pub fn cholesky_jvp(b: &mut GraphBuilder, l: NodeId, da: NodeId) -> Result<NodeId> {
    let s = low(b, da)?;
    b.push(Op::CholeskyAd, &[l, s])
}

/// Cotangent of `a` for `l = cholesky(a)`; the strict upper triangle receives zero.
pub fn cholesky_vjp(b: &mut GraphBuilder, l: NodeId, l_bar: NodeId) -> Result<NodeId> {
    let lt = mt(b, l)?;
    let m = matmul(b, lt, l_bar)?;
    let p = phi(b, m)?;
    let s = congruence_inverse(b, l, p)?;
    low_adjoint(b, s)
}

/// `l⁻ᵀ p l⁻¹`, as `(l⁻ᵀ (l⁻ᵀ p)ᵀ)ᵀ` with two triangular solves.
fn congruence_inverse(b: &mut GraphBuilder, l: NodeId, p: NodeId) -> Result<NodeId> {
    let y = tri_solve(b, l, p, true, true)?;
    let yt = mt(b, y)?;
    let z = tri_solve(b, l, yt, true, true)?;
    mt(b, z)
}

/// `m l⁻ᵀ`, as `(l⁻¹ mᵀ)ᵀ`.
fn right_solve_lt(b: &mut GraphBuilder, l: NodeId, m: NodeId) -> Result<NodeId> {
    let m_t = mt(b, m)?;
    let y = tri_solve(b, l, m_t, true, false)?;
    mt(b, y)
}

/// Tangent of `out = cholesky_ad(l, s) = L Φ(L⁻¹ s L⁻ᵀ)` (`L` the lower triangle of `l`).
///
/// With `X = L⁻¹ s L⁻ᵀ`, a change `dL` moves `X` by `L⁻¹ (-R) L⁻ᵀ` with
/// `R = dL L⁻¹ s + s L⁻ᵀ dLᵀ`, and `L Φ(L⁻¹ m L⁻ᵀ)` is `cholesky_ad(l, m)`, so
/// `d out = dL Φ(X) + cholesky_ad(l, ds - R)`, where `Φ(X) = L⁻¹ out`.
pub fn cholesky_ad_jvp(
    b: &mut GraphBuilder,
    l: NodeId,
    s: NodeId,
    out: NodeId,
    dl: Option<NodeId>,
    ds: Option<NodeId>,
) -> Result<Option<NodeId>> {
    let (first, r) = match dl {
        None => (None, None),
        Some(dl) => {
            let dl = read_triangle(b, dl, true, false)?;
            let phi_x = tri_solve(b, l, out, true, false)?;
            let first = matmul(b, dl, phi_x)?;
            // dL L⁻¹ s + (dL L⁻¹ sᵀ)ᵀ.
            let z1 = tri_solve(b, l, s, true, false)?;
            let st = mt(b, s)?;
            let z2 = tri_solve(b, l, st, true, false)?;
            let r1 = matmul(b, dl, z1)?;
            let r2 = matmul(b, dl, z2)?;
            let r2 = mt(b, r2)?;
            (Some(first), Some(b.add(r1, r2)?))
        }
    };
    let m = sub_opt(b, ds, r)?;
    let second = m.map(|m| b.push(Op::CholeskyAd, &[l, m])).transpose()?;
    Ok(match (first, second) {
        (None, None) => None,
        (Some(x), None) | (None, Some(x)) => Some(x),
        (Some(x), Some(y)) => Some(b.add(x, y)?),
    })
}

/// Cotangents `(l_bar, s_bar)` of `out = cholesky_ad(l, s)`.
///
/// `Φ` is a mask, so it is its own adjoint: with `G = Φ(Lᵀ out_bar)`,
/// `s_bar = L⁻ᵀ G L⁻¹`; transposing the `l` tangent above gives
/// `l_bar = tril(out_bar Φ(X)ᵀ - (s_bar sᵀ + s_barᵀ s) L⁻ᵀ)`.
pub fn cholesky_ad_vjp(
    b: &mut GraphBuilder,
    l: NodeId,
    s: NodeId,
    out: NodeId,
    out_bar: NodeId,
) -> Result<(NodeId, NodeId)> {
    let lower = read_triangle(b, l, true, false)?;
    let lt = mt(b, lower)?;
    let m = matmul(b, lt, out_bar)?;
    let g = phi(b, m)?;
    let s_bar = congruence_inverse(b, l, g)?;
    let phi_x = tri_solve(b, l, out, true, false)?;
    let phi_xt = mt(b, phi_x)?;
    let first = matmul(b, out_bar, phi_xt)?;
    let st = mt(b, s)?;
    let s_bart = mt(b, s_bar)?;
    let p1 = matmul(b, s_bar, st)?;
    let p2 = matmul(b, s_bart, s)?;
    let p = b.add(p1, p2)?;
    let second = right_solve_lt(b, l, p)?;
    let d = b.sub(first, second)?;
    let l_bar = read_triangle(b, d, true, false)?;
    Ok((l_bar, s_bar))
}
