//! Derivative rules of the `linalg` kinds: the outputs of `slogdet`, `eigh`, `qr` and `svd`
//! (numerics.md §6.5), one rule per kind.
//!
//! Each kind is its own node on the factorized operand, so each rule differentiates its own
//! output; a rule that needs the other factors adds nodes of the sibling kinds on the same
//! operand (the CPU backend computes one factorization for all of them). In reverse mode the
//! cotangents of sibling outputs arrive at separate nodes; since the rules are linear in the
//! cotangent, their sum is the cotangent of the whole factorization.
//!
//! Conventions (numerics.md §6.5, errors.md TF11):
//!
//! - `det_sign`: zero derivative (a structural zero). `log_abs_det`: tangent
//!   `trace(solve(a, da))`, cotangent `solve(aᵀ, g I)`, both solved with the LU factors of `a`
//!   (`solve` with `transpose_a`), which the CPU backend shares with the forward `slogdet`.
//! - `eigh` (of `sym(a) = (a + aᵀ)/2`): `dw_i = v_iᵀ sym(da) v_i`;
//!   `dV = V (F ∘ (Vᵀ sym(da) V))` with `F_ij = 1/(w_j - w_i)` off the diagonal and 0 on it.
//!   Repeated eigenvalues give infinite or NaN vector derivatives (no masking); the eigenvalue
//!   derivatives stay finite.
//! - `svd` (reduced, `k = min(m, n)`): with `P = Uᵀ da V`, `ds = diag(P)`,
//!   `dU = U (F ∘ (P S + S Pᵀ)) + (I - U Uᵀ) da V S⁻¹`,
//!   `dV = V (F ∘ (S P + Pᵀ S)) + (I - V Vᵀ) daᵀ U S⁻¹`, `F_ij = 1/(s_j² - s_i²)` set to 0
//!   where the squares coincide (diagonal included). The projection terms vanish for the factor
//!   that is square; a zero singular value of a non-square matrix makes them infinite or NaN.
//! - `qr` (`diag(R) >= 0`, full column rank): for `X = Q R` with `R` square,
//!   `C = Qᵀ dX R⁻¹`, `Ω = tril(C, -1) - tril(C, -1)ᵀ`, `dR = (C - Ω) R`,
//!   `dQ = dX R⁻¹ - Q (C - Ω)`. A wide `a = [X | Y]` factors its leading square block `X`, and
//!   `R = [R_X | Qᵀ Y]`.
//! - The complete `Q` and the full `U` of a tall matrix, and the full `Vh` of a wide one, have
//!   `k = min(m, n)` leading columns (rows) equal to the reduced factor, and extra columns
//!   (rows) that are any orthonormal completion: those have no derivative (TF11). Reverse mode
//!   differentiates the leading part with the reduced rule when the cotangent is zero by
//!   construction on the extra part (it comes from slices or indices of the leading columns, and
//!   sums, negations, products and selections of such cotangents); any other cotangent is
//!   `InvalidArgument` (TF11), whatever its values. Forward mode cannot see which columns its
//!   consumers read, so the tangent of the extra part is NaN (a result that does not depend on
//!   it, or a factor never used, differentiates normally).
//!   Without extra columns they equal the reduced factors and use their rules, with the other
//!   factor derived from them (`Vh = S⁻¹ Uᵀ a`, `U = a Vhᵀ S⁻¹`) unless the matrix is square, so
//!   that no rule differentiates the extra columns of a sibling.

use super::{lu_solve, matmul, mt, size, sym, tri_solve, triangle};
use quabla_ir::{Comparison, GraphBuilder, IrError, LinalgKind, NodeId, Op, Result, Shape};

/// Tangent of `out = linalg[kind](a)` along `da`; `None` when it is zero by construction.
pub fn linalg_jvp(
    b: &mut GraphBuilder,
    kind: LinalgKind,
    a: NodeId,
    out: NodeId,
    da: NodeId,
) -> Result<Option<NodeId>> {
    let (m, n) = matrix_dims(b, a);
    Ok(Some(match kind {
        LinalgKind::DetSign => return Ok(None),
        LinalgKind::LogAbsDet => {
            let x = lu_solve(b, a, da, false)?;
            trace(b, x)?
        }
        LinalgKind::EighValues => {
            let v = sibling(b, LinalgKind::EighVectors, a)?;
            let s = sym(b, da)?;
            // dw_j = Σ_i V_ij (S V)_ij: the diagonal of Vᵀ S V without forming it.
            let sv = matmul(b, s, v)?;
            let p = b.mul(v, sv)?;
            b.sum(p, Some(&[-2]), false)?
        }
        LinalgKind::EighVectors => {
            let w = sibling(b, LinalgKind::EighValues, a)?;
            let f = eigen_gaps(b, w)?;
            let s = sym(b, da)?;
            let vt = mt(b, out)?;
            let sv = matmul(b, s, out)?;
            let p = matmul(b, vt, sv)?;
            let fp = b.mul(f, p)?;
            matmul(b, out, fp)?
        }
        LinalgKind::QrQ => {
            let r = sibling(b, LinalgKind::QrR, a)?;
            qr_jvp(b, a, out, r, da)?.0
        }
        LinalgKind::QrR => {
            let q = sibling(b, LinalgKind::QrQ, a)?;
            qr_jvp(b, a, q, out, da)?.1
        }
        LinalgKind::QrQComplete => {
            if m > n {
                let q = sibling(b, LinalgKind::QrQ, a)?;
                let r = sibling(b, LinalgKind::QrR, a)?;
                let dq = qr_jvp(b, a, q, r, da)?.0;
                return Ok(Some(nan_extra(b, dq, out, 1)?));
            }
            let r = sibling(b, LinalgKind::QrR, a)?;
            qr_jvp(b, a, out, r, da)?.0
        }
        LinalgKind::SvdS => {
            let f = Svd::reduced(b, a)?;
            f.ds(b, da)?
        }
        LinalgKind::SvdU => {
            let f = Svd::reduced(b, a)?;
            f.du(b, da)?
        }
        LinalgKind::SvdVh => {
            let f = Svd::reduced(b, a)?;
            f.dvh(b, da)?
        }
        LinalgKind::SvdUFull => {
            if m > n {
                let du = Svd::reduced(b, a)?.du(b, da)?;
                return Ok(Some(nan_extra(b, du, out, 1)?));
            }
            let f = Svd::full_u(b, a, out)?;
            f.du(b, da)?
        }
        LinalgKind::SvdVhFull => {
            if n > m {
                let dvh = Svd::reduced(b, a)?.dvh(b, da)?;
                return Ok(Some(nan_extra(b, dvh, out, 2)?));
            }
            let f = Svd::full_vh(b, a, out)?;
            f.dvh(b, da)?
        }
    }))
}

/// Cotangent of `a` for `out = linalg[kind](a)` given the cotangent `ct` of `out`; `None` when
/// it is zero by construction.
pub fn linalg_vjp(
    b: &mut GraphBuilder,
    kind: LinalgKind,
    a: NodeId,
    out: NodeId,
    ct: NodeId,
) -> Result<Option<NodeId>> {
    let (m, n) = matrix_dims(b, a);
    Ok(Some(match kind {
        LinalgKind::DetSign => return Ok(None),
        LinalgKind::LogAbsDet => {
            // solve(aᵀ, g I), g (one scalar per matrix) on the diagonal, with the factors of
            // `a` that the forward pass computed.
            let g = trailing_unit_axes(b, ct, 2)?;
            let eye = triangle(b, n, Comparison::Equal)?;
            let zero = b.weak_scalar(0.0);
            let gi = b.select(eye, g, zero)?;
            lu_solve(b, a, gi, true)?
        }
        LinalgKind::EighValues => {
            // V diag(w_bar) Vᵀ, already symmetric.
            let v = sibling(b, LinalgKind::EighVectors, a)?;
            let wr = row(b, ct)?;
            let vw = b.mul(v, wr)?;
            let vt = mt(b, v)?;
            matmul(b, vw, vt)?
        }
        LinalgKind::EighVectors => {
            // sym(V (F ∘ (Vᵀ V_bar)) Vᵀ), the transpose of the tangent map.
            let w = sibling(b, LinalgKind::EighValues, a)?;
            let f = eigen_gaps(b, w)?;
            let vt = mt(b, out)?;
            let p = matmul(b, vt, ct)?;
            let fp = b.mul(f, p)?;
            let vfp = matmul(b, out, fp)?;
            let full = matmul(b, vfp, vt)?;
            sym(b, full)?
        }
        LinalgKind::QrQ => {
            let r = sibling(b, LinalgKind::QrR, a)?;
            qr_vjp(b, a, out, r, Some(ct), None)?
        }
        LinalgKind::QrR => {
            let q = sibling(b, LinalgKind::QrQ, a)?;
            qr_vjp(b, a, q, out, None, Some(ct))?
        }
        LinalgKind::QrQComplete => {
            if m > n {
                let lead = leading(b, ct, n, 1, "qr(mode=\"complete\")")?;
                let q = sibling(b, LinalgKind::QrQ, a)?;
                let r = sibling(b, LinalgKind::QrR, a)?;
                return Ok(Some(qr_vjp(b, a, q, r, Some(lead), None)?));
            }
            let r = sibling(b, LinalgKind::QrR, a)?;
            qr_vjp(b, a, out, r, Some(ct), None)?
        }
        LinalgKind::SvdS => {
            let f = Svd::reduced(b, a)?;
            f.s_bar(b, ct)?
        }
        LinalgKind::SvdU => {
            let f = Svd::reduced(b, a)?;
            f.u_bar(b, ct)?
        }
        LinalgKind::SvdVh => {
            let f = Svd::reduced(b, a)?;
            f.vh_bar(b, ct)?
        }
        LinalgKind::SvdUFull => {
            if m > n {
                let lead = leading(b, ct, n, 1, "svd(full_matrices=True)")?;
                return Ok(Some(Svd::reduced(b, a)?.u_bar(b, lead)?));
            }
            let f = Svd::full_u(b, a, out)?;
            f.u_bar(b, ct)?
        }
        LinalgKind::SvdVhFull => {
            if n > m {
                let lead = leading(b, ct, m, 2, "svd(full_matrices=True)")?;
                return Ok(Some(Svd::reduced(b, a)?.vh_bar(b, lead)?));
            }
            let f = Svd::full_vh(b, a, out)?;
            f.vh_bar(b, ct)?
        }
    }))
}

/// The leading `k` columns (`from_end == 1`) or rows (`from_end == 2`) of the cotangent `ct` of
/// a full factor, when it is zero on the others by construction; TF11 otherwise.
fn leading(
    b: &mut GraphBuilder,
    ct: NodeId,
    k: usize,
    from_end: usize,
    what: &str,
) -> Result<NodeId> {
    if !zero_beyond(b, ct, from_end, k, 0) {
        return Err(extra_columns(what));
    }
    let dims = b.ty(ct).shape.dims().to_vec();
    let axis = dims.len() - from_end;
    let mut sizes = dims;
    sizes[axis] = k;
    b.slice(ct, vec![0; sizes.len()], sizes)
}

/// Whether `x` is zero by construction at every index `>= k` of its axis `rank - from_end`:
/// a pad of a box that ends before `k`, an exact zero constant, or sums, negations, casts,
/// products and selections of such values. `depth` bounds the walk.
fn zero_beyond(b: &GraphBuilder, x: NodeId, from_end: usize, k: usize, depth: usize) -> bool {
    use quabla_ir::{BinaryOp, UnaryOp};
    if depth > 64 {
        return false;
    }
    let node = b.node(x);
    let rank = node.ty.shape.rank();
    if rank < from_end {
        return false;
    }
    let axis = rank - from_end;
    let recurse = |y: NodeId| zero_beyond(b, y, from_end, k, depth + 1);
    match &node.op {
        Op::PadSlice { starts, .. } => {
            let inner = b.ty(node.operands[0]).shape.dims();
            inner.len() == rank && starts[axis] + inner[axis] <= k
        }
        Op::Constant { data, .. } => (0..node.ty.shape.size()).all(|i| data.get_f64(i) == 0.0),
        Op::Broadcast { .. } => {
            let y = node.operands[0];
            let inner = b.node(y);
            matches!(&inner.op, Op::Constant { data, .. }
                if (0..inner.ty.shape.size()).all(|i| data.get_f64(i) == 0.0))
                || (inner.ty.shape.rank() == rank
                    && inner.ty.shape.dims()[axis] == node.ty.shape.dims()[axis]
                    && recurse(y))
        }
        Op::Binary(BinaryOp::Add | BinaryOp::Sub) => node.operands.iter().all(|&y| recurse(y)),
        Op::Binary(BinaryOp::Mul) => node.operands.iter().any(|&y| recurse(y)),
        Op::Unary(UnaryOp::Neg) | Op::Cast { .. } => recurse(node.operands[0]),
        Op::Where => node.operands[1..].iter().all(|&y| recurse(y)),
        _ => false,
    }
}

/// `lead` (the tangent of the leading `k` columns or rows of `full`) completed to `full`'s
/// shape with NaN: the extra part of a full factor has no tangent (TF11).
fn nan_extra(b: &mut GraphBuilder, lead: NodeId, full: NodeId, from_end: usize) -> Result<NodeId> {
    let dims = b.ty(full).shape.dims().to_vec();
    let axis = dims.len() - from_end;
    let k = b.ty(lead).shape.dims()[axis];
    let mut extra = dims;
    extra[axis] -= k;
    let dtype = b.ty(full).dtype;
    let nan = b.scalar(f64::NAN, dtype, false);
    let nan = b.broadcast_to(nan, Shape::new(extra)?)?;
    b.concat(&[lead, nan], axis as isize)
}

/// TF11: the extra columns of a complete `Q` or full `U`/`Vh` are any orthonormal completion,
/// so they have no derivative.
fn extra_columns(what: &str) -> IrError {
    IrError::InvalidArgument {
        message: format!("derivatives of the extra columns of {what} are not unique"),
    }
}

/// `(m, n)` of an `[..., m, n]` operand.
fn matrix_dims(b: &GraphBuilder, a: NodeId) -> (usize, usize) {
    let d = b.ty(a).shape.dims();
    (d[d.len() - 2], d[d.len() - 1])
}

/// Another output of the factorization of `a`.
fn sibling(b: &mut GraphBuilder, kind: LinalgKind, a: NodeId) -> Result<NodeId> {
    b.push(Op::Linalg(kind), &[a])
}

/// `x` with `count` unit axes appended.
fn trailing_unit_axes(b: &mut GraphBuilder, x: NodeId, count: usize) -> Result<NodeId> {
    let mut dims = b.ty(x).shape.dims().to_vec();
    dims.extend(std::iter::repeat_n(1, count));
    b.reshape_to(x, Shape::new(dims)?)
}

/// A `[..., k]` vector as a row `[..., 1, k]`: `m * row(v)` is `m diag(v)`.
fn row(b: &mut GraphBuilder, v: NodeId) -> Result<NodeId> {
    let mut dims = b.ty(v).shape.dims().to_vec();
    let k = dims.pop().expect("a vector has an axis");
    dims.extend([1, k]);
    b.reshape_to(v, Shape::new(dims)?)
}

/// A `[..., k]` vector as a column `[..., k, 1]`: `col(v) * m` is `diag(v) m`.
fn col(b: &mut GraphBuilder, v: NodeId) -> Result<NodeId> {
    trailing_unit_axes(b, v, 1)
}

/// The trace of each `[..., n, n]` matrix.
fn trace(b: &mut GraphBuilder, x: NodeId) -> Result<NodeId> {
    let (n, _) = matrix_dims(b, x);
    let eye = triangle(b, n, Comparison::Equal)?;
    let zero = b.weak_scalar(0.0);
    let d = b.select(eye, x, zero)?;
    b.sum(d, Some(&[-2, -1]), false)
}

/// `1 / d` where `zero` is false and 0 where it is true, with the division itself never
/// seeing the masked entries, so every derivative of the masked entries is exactly 0 rather
/// than `0 * inf`.
fn masked_reciprocal(b: &mut GraphBuilder, zero: NodeId, d: NodeId) -> Result<NodeId> {
    let one = b.weak_scalar(1.0);
    let safe = b.select(zero, one, d)?;
    let inv = b.div(one, safe)?;
    let z = b.weak_scalar(0.0);
    b.select(zero, z, inv)
}

/// `F_ij = 1/(w_j - w_i)` off the diagonal, 0 on it (numerics.md §6.5: equal eigenvalues off the
/// diagonal are not masked).
fn eigen_gaps(b: &mut GraphBuilder, w: NodeId) -> Result<NodeId> {
    let n = size(b, w);
    let (wr, wc) = (row(b, w)?, col(b, w)?);
    let d = b.sub(wr, wc)?;
    let eye = triangle(b, n, Comparison::Equal)?;
    masked_reciprocal(b, eye, d)
}

/// Columns `start..start + len` of each matrix of `x`.
fn columns(b: &mut GraphBuilder, x: NodeId, start: usize, len: usize) -> Result<NodeId> {
    let dims = b.ty(x).shape.dims().to_vec();
    let r = dims.len();
    let mut starts = vec![0; r];
    starts[r - 1] = start;
    let mut sizes = dims;
    sizes[r - 1] = len;
    b.slice(x, starts, sizes)
}

/// The strict lower triangle of each square matrix.
fn strict_lower(b: &mut GraphBuilder, x: NodeId) -> Result<NodeId> {
    let (k, _) = matrix_dims(b, x);
    let mask = triangle(b, k, Comparison::Greater)?;
    let zero = b.weak_scalar(0.0);
    b.select(mask, x, zero)
}

/// `(dQ, dR)` of the reduced QR `a = Q R` (numerics.md §6.5), `q` `[..., m, k]`, `r`
/// `[..., k, n]`.
fn qr_jvp(
    b: &mut GraphBuilder,
    a: NodeId,
    q: NodeId,
    r: NodeId,
    da: NodeId,
) -> Result<(NodeId, NodeId)> {
    let (m, n) = matrix_dims(b, a);
    if m >= n {
        return qr_square_jvp(b, q, r, da);
    }
    // a = [X | Y] with X = Q R_X square: R = [R_X | Qᵀ Y], so dR_Y = dQᵀ Y + Qᵀ dY.
    let r_x = columns(b, r, 0, m)?;
    let dx = columns(b, da, 0, m)?;
    let (dq, dr_x) = qr_square_jvp(b, q, r_x, dx)?;
    let y = columns(b, a, m, n - m)?;
    let dy = columns(b, da, m, n - m)?;
    let dqt = mt(b, dq)?;
    let qt = mt(b, q)?;
    let p1 = matmul(b, dqt, y)?;
    let p2 = matmul(b, qt, dy)?;
    let dr_y = b.add(p1, p2)?;
    let dr = b.concat(&[dr_x, dr_y], -1)?;
    Ok((dq, dr))
}

/// `(dQ, dR)` of `x = Q R` with `R` square upper triangular of full rank: `Qᵀ dQ` is
/// antisymmetric and `dR R⁻¹` upper triangular, and `C = Qᵀ dx R⁻¹` is their sum, so the strict
/// lower triangle of `C` fixes the antisymmetric part.
fn qr_square_jvp(
    b: &mut GraphBuilder,
    q: NodeId,
    r: NodeId,
    dx: NodeId,
) -> Result<(NodeId, NodeId)> {
    // Y = dx R⁻¹ = (R⁻ᵀ dxᵀ)ᵀ.
    let dxt = mt(b, dx)?;
    let yt = tri_solve(b, r, dxt, false, true)?;
    let y = mt(b, yt)?;
    let qt = mt(b, q)?;
    let c = matmul(b, qt, y)?;
    let lo = strict_lower(b, c)?;
    let lot = mt(b, lo)?;
    let omega = b.sub(lo, lot)?;
    // T = C - Ω, upper triangular: dR = T R, dQ = Y - Q T.
    let t = b.sub(c, omega)?;
    let dr = matmul(b, t, r)?;
    let qt_ = matmul(b, q, t)?;
    let dq = b.sub(y, qt_)?;
    Ok((dq, dr))
}

/// Cotangent of `a` for the reduced QR `a = Q R` given the cotangents of `Q` and `R` (at least
/// one present).
fn qr_vjp(
    b: &mut GraphBuilder,
    a: NodeId,
    q: NodeId,
    r: NodeId,
    q_bar: Option<NodeId>,
    r_bar: Option<NodeId>,
) -> Result<NodeId> {
    let (m, n) = matrix_dims(b, a);
    if m >= n {
        return qr_square_vjp(b, q, r, q_bar, r_bar);
    }
    // a = [X | Y], R = [R_X | Qᵀ Y]: the cotangent of R_Y = Qᵀ Y sends Y R_Y_barᵀ to Q and
    // Q R_Y_bar to Y.
    let r_x = columns(b, r, 0, m)?;
    let (rx_bar, q_bar, y_bar) = match r_bar {
        None => (None, q_bar, None),
        Some(r_bar) => {
            let rx_bar = columns(b, r_bar, 0, m)?;
            let ry_bar = columns(b, r_bar, m, n - m)?;
            let y = columns(b, a, m, n - m)?;
            let ry_bart = mt(b, ry_bar)?;
            let via_q = matmul(b, y, ry_bart)?;
            let q_bar = match q_bar {
                None => via_q,
                Some(g) => b.add(g, via_q)?,
            };
            let y_bar = matmul(b, q, ry_bar)?;
            (Some(rx_bar), Some(q_bar), Some(y_bar))
        }
    };
    let x_bar = qr_square_vjp(b, q, r_x, q_bar, rx_bar)?;
    match y_bar {
        Some(y_bar) => b.concat(&[x_bar, y_bar], -1),
        None => {
            let shape = b.ty(a).shape.clone();
            let starts = vec![0; shape.rank()];
            b.push(Op::PadSlice { starts, shape }, &[x_bar])
        }
    }
}

/// The transpose of [`qr_square_jvp`]: with `M = R_bar Rᵀ - Qᵀ Q_bar`, the cotangent of `C` is
/// the symmetric matrix built from the upper triangle of `M` (the adjoint of
/// `C ↦ C - Ω`), and `x_bar = (Q_bar + Q C_bar) R⁻ᵀ`.
fn qr_square_vjp(
    b: &mut GraphBuilder,
    q: NodeId,
    r: NodeId,
    q_bar: Option<NodeId>,
    r_bar: Option<NodeId>,
) -> Result<NodeId> {
    let from_r = match r_bar {
        None => None,
        Some(g) => {
            let rt = mt(b, r)?;
            Some(matmul(b, g, rt)?)
        }
    };
    let from_q = match q_bar {
        None => None,
        Some(g) => {
            let qt = mt(b, q)?;
            Some(matmul(b, qt, g)?)
        }
    };
    let mm = match (from_r, from_q) {
        (Some(x), Some(y)) => b.sub(x, y)?,
        (Some(x), None) => x,
        (None, Some(y)) => b.unary(quabla_ir::UnaryOp::Neg, y)?,
        (None, None) => {
            return Err(IrError::Verify {
                message: "a QR cotangent rule called without cotangents".into(),
            });
        }
    };
    // C_bar_ij = M_ij on and above the diagonal, M_ji below it.
    let mmt = mt(b, mm)?;
    let lower_of_t = strict_lower(b, mmt)?;
    let lo = strict_lower(b, mm)?;
    let upper = b.sub(mm, lo)?;
    let c_bar = b.add(upper, lower_of_t)?;
    let qc = matmul(b, q, c_bar)?;
    let z = match q_bar {
        Some(g) => b.add(g, qc)?,
        None => qc,
    };
    // z R⁻ᵀ = (R⁻¹ zᵀ)ᵀ.
    let zt = mt(b, z)?;
    let y = tri_solve(b, r, zt, false, false)?;
    mt(b, y)
}

/// The reduced singular factors of `a` used by the rules: `u` `[..., m, k]`, `s` `[..., k]`,
/// `vh` `[..., k, n]`, with `F_ij = 1/(s_j² - s_i²)` (0 where the squares coincide).
#[derive(Debug)]
struct Svd {
    u: NodeId,
    s: NodeId,
    vh: NodeId,
    f: NodeId,
    m: usize,
    n: usize,
}

impl Svd {
    fn new(b: &mut GraphBuilder, a: NodeId, u: NodeId, s: NodeId, vh: NodeId) -> Result<Svd> {
        let (m, n) = matrix_dims(b, a);
        let (sr, sc) = (row(b, s)?, col(b, s)?);
        let diff = b.sub(sr, sc)?;
        let total = b.add(sr, sc)?;
        let d = b.mul(diff, total)?;
        let zero = b.weak_scalar(0.0);
        let coincide = b.compare(Comparison::Equal, d, zero)?;
        let f = masked_reciprocal(b, coincide, d)?;
        Ok(Svd { u, s, vh, f, m, n })
    }

    fn reduced(b: &mut GraphBuilder, a: NodeId) -> Result<Svd> {
        let u = sibling(b, LinalgKind::SvdU, a)?;
        let s = sibling(b, LinalgKind::SvdS, a)?;
        let vh = sibling(b, LinalgKind::SvdVh, a)?;
        Svd::new(b, a, u, s, vh)
    }

    /// The factors for a full `U` (`u_full`, `[..., m, m]`), which without extra columns
    /// (`m <= n`) is the reduced `U`. It is paired with rows of `Vh` derived from it, never with
    /// a second full factorization, whose extra rows could not be differentiated again: the full
    /// `Vh` itself for a square matrix, else `S⁻¹ Uᵀ a` (from `a = U S Vh`).
    fn full_u(b: &mut GraphBuilder, a: NodeId, u_full: NodeId) -> Result<Svd> {
        let (m, n) = matrix_dims(b, a);
        if m > n {
            return Err(extra_columns("svd(full_matrices=True)"));
        }
        let s = sibling(b, LinalgKind::SvdS, a)?;
        let vh = if m == n {
            sibling(b, LinalgKind::SvdVhFull, a)?
        } else {
            let ut = mt(b, u_full)?;
            let uta = matmul(b, ut, a)?;
            let sc = col(b, s)?;
            b.div(uta, sc)?
        };
        Svd::new(b, a, u_full, s, vh)
    }

    /// The factors for a full `Vh` (`vh_full`, `[..., n, n]`), the mirror of [`Svd::full_u`]:
    /// without extra rows (`n <= m`) it is the reduced `Vh`, paired with the full `U` of a square
    /// matrix, else with `a Vhᵀ S⁻¹`.
    fn full_vh(b: &mut GraphBuilder, a: NodeId, vh_full: NodeId) -> Result<Svd> {
        let (m, n) = matrix_dims(b, a);
        if n > m {
            return Err(extra_columns("svd(full_matrices=True)"));
        }
        let s = sibling(b, LinalgKind::SvdS, a)?;
        let u = if m == n {
            sibling(b, LinalgKind::SvdUFull, a)?
        } else {
            let v = mt(b, vh_full)?;
            let av = matmul(b, a, v)?;
            let sr = row(b, s)?;
            b.div(av, sr)?
        };
        Svd::new(b, a, u, s, vh_full)
    }

    /// `P = Uᵀ da V`.
    fn p(&self, b: &mut GraphBuilder, da: NodeId) -> Result<NodeId> {
        let v = mt(b, self.vh)?;
        let ut = mt(b, self.u)?;
        let dav = matmul(b, da, v)?;
        matmul(b, ut, dav)
    }

    fn ds(&self, b: &mut GraphBuilder, da: NodeId) -> Result<NodeId> {
        // diag(Uᵀ da V)_j = Σ_i U_ij (da V)_ij.
        let v = mt(b, self.vh)?;
        let dav = matmul(b, da, v)?;
        let p = b.mul(self.u, dav)?;
        b.sum(p, Some(&[-2]), false)
    }

    fn du(&self, b: &mut GraphBuilder, da: NodeId) -> Result<NodeId> {
        let p = self.p(b, da)?;
        let (sr, sc) = (row(b, self.s)?, col(b, self.s)?);
        // (P S)_ij = P_ij s_j, (S Pᵀ)_ij = s_i P_ji.
        let ps = b.mul(p, sr)?;
        let pt = mt(b, p)?;
        let spt = b.mul(sc, pt)?;
        let sum = b.add(ps, spt)?;
        let inner = b.mul(self.f, sum)?;
        let du = matmul(b, self.u, inner)?;
        if self.m <= self.n {
            return Ok(du);
        }
        // (I - U Uᵀ) da V S⁻¹ = (da V - U P) S⁻¹.
        let v = mt(b, self.vh)?;
        let dav = matmul(b, da, v)?;
        let up = matmul(b, self.u, p)?;
        let perp = b.sub(dav, up)?;
        let scaled = b.div(perp, sr)?;
        b.add(du, scaled)
    }

    fn dvh(&self, b: &mut GraphBuilder, da: NodeId) -> Result<NodeId> {
        let p = self.p(b, da)?;
        let (sr, sc) = (row(b, self.s)?, col(b, self.s)?);
        // (S P)_ij = s_i P_ij, (Pᵀ S)_ij = P_ji s_j.
        let sp = b.mul(sc, p)?;
        let pt = mt(b, p)?;
        let pts = b.mul(pt, sr)?;
        let sum = b.add(sp, pts)?;
        let inner = b.mul(self.f, sum)?;
        let v = mt(b, self.vh)?;
        let dv = matmul(b, v, inner)?;
        let dv = if self.n <= self.m {
            dv
        } else {
            // (I - V Vᵀ) daᵀ U S⁻¹ = (daᵀ U - V Pᵀ) S⁻¹.
            let dat = mt(b, da)?;
            let datu = matmul(b, dat, self.u)?;
            let vpt = matmul(b, v, pt)?;
            let perp = b.sub(datu, vpt)?;
            let scaled = b.div(perp, sr)?;
            b.add(dv, scaled)?
        };
        mt(b, dv)
    }

    /// `U diag(s_bar) Vh`.
    fn s_bar(&self, b: &mut GraphBuilder, s_bar: NodeId) -> Result<NodeId> {
        let sr = row(b, s_bar)?;
        let us = b.mul(self.u, sr)?;
        matmul(b, us, self.vh)
    }

    /// The transpose of [`Svd::du`]: with `J = F ∘ (Uᵀ U_bar)`,
    /// `a_bar = U (J + Jᵀ) S Vh + (I - U Uᵀ) U_bar S⁻¹ Vh`.
    fn u_bar(&self, b: &mut GraphBuilder, u_bar: NodeId) -> Result<NodeId> {
        let ut = mt(b, self.u)?;
        let utg = matmul(b, ut, u_bar)?;
        let j = b.mul(self.f, utg)?;
        let jt = mt(b, j)?;
        let sym2 = b.add(j, jt)?;
        let sr = row(b, self.s)?;
        let inner = b.mul(sym2, sr)?;
        let left = if self.m <= self.n {
            matmul(b, self.u, inner)?
        } else {
            let uin = matmul(b, self.u, inner)?;
            let uutg = matmul(b, self.u, utg)?;
            let perp = b.sub(u_bar, uutg)?;
            let scaled = b.div(perp, sr)?;
            b.add(uin, scaled)?
        };
        matmul(b, left, self.vh)
    }

    /// The transpose of [`Svd::dvh`]: with `K = F ∘ (Vᵀ V_bar)` (`V_bar = Vh_barᵀ`),
    /// `a_bar = U S (K + Kᵀ) Vh + U S⁻¹ Vh_bar (I - V Vᵀ)`.
    fn vh_bar(&self, b: &mut GraphBuilder, vh_bar: NodeId) -> Result<NodeId> {
        // Vᵀ V_bar = (Vh_bar Vhᵀ)ᵀ.
        let v = mt(b, self.vh)?;
        let gv = matmul(b, vh_bar, v)?;
        let vtg = mt(b, gv)?;
        let k = b.mul(self.f, vtg)?;
        let kt = mt(b, k)?;
        let sym2 = b.add(k, kt)?;
        let sc = col(b, self.s)?;
        let inner = b.mul(sc, sym2)?;
        let right = if self.n <= self.m {
            matmul(b, inner, self.vh)?
        } else {
            let inv = matmul(b, inner, self.vh)?;
            let proj = matmul(b, gv, self.vh)?;
            let perp = b.sub(vh_bar, proj)?;
            let scaled = b.div(perp, sc)?;
            b.add(inv, scaled)?
        };
        matmul(b, self.u, right)
    }
}
