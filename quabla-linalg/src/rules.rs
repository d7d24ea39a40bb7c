//! Derivative rules of the linear-algebra primitives, written as IR builders (numerics.md
//! §6.5); `quabla-autodiff` delegates its `solve`, `cholesky` and `triangular_solve` arms here.
//! Tangents and cotangents are `Option<NodeId>`: `None` is a structural zero.
//!
//! - `solve`: `dx = solve(a, db - da x)`; reverse `b_bar = solve(a^T, x_bar)`,
//!   `a_bar = -b_bar x^T`.
//! - `triangular_solve`: the same with `op(a)`, and only the read triangle (without a unit
//!   diagonal) receives a derivative.
//! - `cholesky` of a symmetric `a`: `dl = cholesky_ad(l, sym(da))` with
//!   `cholesky_ad(l, s) = l Φ(l⁻¹ s l⁻ᵀ)` (Φ: lower triangle, diagonal halved); reverse
//!   `a_bar = sym(l⁻ᵀ Φ(lᵀ l_bar) l⁻¹)`, with `sym(m) = (m + mᵀ) / 2`.
//! - Derivatives of `cholesky_ad` itself (third order through `cholesky`) are not provided.

use quabla_ir::{Comparison, GraphBuilder, HostData, IrError, NodeId, Op, Result, Shape};

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

fn sub_opt(b: &mut GraphBuilder, x: Option<NodeId>, y: Option<NodeId>) -> Result<Option<NodeId>> {
    Ok(match (x, y) {
        (None, None) => None,
        (Some(x), None) => Some(x),
        (None, Some(y)) => Some(b.unary(quabla_ir::UnaryOp::Neg, y)?),
        (Some(x), Some(y)) => Some(b.sub(x, y)?),
    })
}

/// Tangent of `x = solve(a, rhs)`.
pub fn solve_jvp(
    b: &mut GraphBuilder,
    a: NodeId,
    x: NodeId,
    da: Option<NodeId>,
    drhs: Option<NodeId>,
) -> Result<Option<NodeId>> {
    let dax = da.map(|d| matmul(b, d, x)).transpose()?;
    match sub_opt(b, drhs, dax)? {
        None => Ok(None),
        Some(r) => Ok(Some(b.push(Op::Solve, &[a, r])?)),
    }
}

/// Cotangents `(a_bar, rhs_bar)` of `x = solve(a, rhs)`.
pub fn solve_vjp(
    b: &mut GraphBuilder,
    a: NodeId,
    x: NodeId,
    x_bar: NodeId,
) -> Result<(NodeId, NodeId)> {
    let at = mt(b, a)?;
    let rhs_bar = b.push(Op::Solve, &[at, x_bar])?;
    let xt = mt(b, x)?;
    let p = matmul(b, rhs_bar, xt)?;
    let a_bar = b.unary(quabla_ir::UnaryOp::Neg, p)?;
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
    let p = b.unary(quabla_ir::UnaryOp::Neg, p)?;
    let p = if transpose_a { mt(b, p)? } else { p };
    Ok((read_triangle(b, p, lower, unit_diagonal)?, rhs_bar))
}

/// Tangent of `l = cholesky(a)`.
pub fn cholesky_jvp(b: &mut GraphBuilder, l: NodeId, da: NodeId) -> Result<NodeId> {
    let s = sym(b, da)?;
    b.push(Op::CholeskyAd, &[l, s])
}

/// Cotangent of `a` for `l = cholesky(a)`.
pub fn cholesky_vjp(b: &mut GraphBuilder, l: NodeId, l_bar: NodeId) -> Result<NodeId> {
    let lt = mt(b, l)?;
    let m = matmul(b, lt, l_bar)?;
    let p = phi(b, m)?;
    // s = l⁻ᵀ p l⁻¹ = (l⁻ᵀ (l⁻ᵀ p)ᵀ)ᵀ.
    let solve_t = |b: &mut GraphBuilder, rhs: NodeId| {
        b.push(
            Op::TriangularSolve {
                lower: true,
                transpose_a: true,
                unit_diagonal: false,
            },
            &[l, rhs],
        )
    };
    let y = solve_t(b, p)?;
    let yt = mt(b, y)?;
    let z = solve_t(b, yt)?;
    let s = mt(b, z)?;
    sym(b, s)
}

/// The targeted error for derivatives of `cholesky_ad` (third order through `cholesky`).
pub fn cholesky_ad_unsupported() -> IrError {
    IrError::Unsupported {
        op: "cholesky_ad".into(),
        message: "third-order differentiation through cholesky is not supported yet".into(),
    }
}
