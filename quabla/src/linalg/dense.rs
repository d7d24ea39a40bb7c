//! The dense functions of `qb::linalg` (api.md §17, numerics.md §6): each builds its graph of
//! IR ops in one go (one plan eagerly, several results of one factorization from one kernel
//! call) after checking shapes and dtypes in the caller's terms (SH7, SH8, DT1, DT2, AR13).
//! Derivatives, batching and kernels belong to the ops (`quabla-linalg`'s rules, the CPU
//! backend); nothing here differentiates or batches by hand.

use crate::dispatch::apply;
use crate::dispatch::apply_many;
use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{
    Comparison, DType, GraphBuilder, HostData, IrError, LinalgKind, NodeId, Op, Shape,
};
use std::fmt;

pub(super) type Built = quabla_ir::Result<NodeId>;

// ---------------------------------------------------------------------------------------------
// Checks and small graph helpers

#[track_caller]
pub(super) fn dims(b: &GraphBuilder, x: NodeId) -> Vec<usize> {
    b.ty(x).shape.dims().to_vec()
}

#[track_caller]
pub(super) fn shape_error(name: &str, message: String) -> IrError {
    IrError::Shape {
        op: name.into(),
        message,
    }
}

/// DT2: linear algebra needs floating arrays.
#[track_caller]
pub(super) fn floating(b: &GraphBuilder, x: NodeId, name: &str) -> quabla_ir::Result<()> {
    if b.ty(x).dtype == DType::Bool {
        return Err(IrError::BoolOperand { op: name.into() });
    }
    Ok(())
}

/// `(m, n)` of an `[..., m, n]` floating operand.
#[track_caller]
pub(super) fn matrix_dims(
    b: &GraphBuilder,
    x: NodeId,
    name: &str,
) -> quabla_ir::Result<(usize, usize)> {
    floating(b, x, name)?;
    let shape = &b.ty(x).shape;
    let d = shape.dims();
    if d.len() < 2 {
        return Err(shape_error(
            name,
            format!("{name} expects matrices of shape [..., m, n], got {shape}"),
        ));
    }
    Ok((d[d.len() - 2], d[d.len() - 1]))
}

/// SH7: the size `n` of an `[..., n, n]` floating operand.
#[track_caller]
pub(super) fn square(b: &GraphBuilder, x: NodeId, name: &str) -> quabla_ir::Result<usize> {
    floating(b, x, name)?;
    let shape = &b.ty(x).shape;
    let d = shape.dims();
    if d.len() < 2 || d[d.len() - 1] != d[d.len() - 2] {
        return Err(shape_error(
            name,
            format!("{name} expects square matrices of shape [..., n, n], got {shape}"),
        ));
    }
    Ok(d[d.len() - 1])
}

/// A right-hand side for a matrix with `rows` rows: a vector `[rows]` or a stack `[..., rows,
/// k]` of the matrix's dtype (SH8, DT1).
#[track_caller]
pub(super) fn check_rhs(
    b: &GraphBuilder,
    a: NodeId,
    rows: usize,
    rhs: NodeId,
    name: &str,
) -> quabla_ir::Result<()> {
    floating(b, rhs, name)?;
    let (ta, tr) = (b.ty(a).dtype, b.ty(rhs).dtype);
    if ta != tr {
        return Err(IrError::DtypeMismatch {
            op: name.into(),
            lhs: ta,
            rhs: tr,
        });
    }
    let d = dims(b, rhs);
    let got = match d.len() {
        0 => {
            return Err(shape_error(
                name,
                format!("{name}: the right-hand side must be a vector [n] or a stack of columns [..., n, k], got a rank-0 array"),
            ))
        }
        1 => d[0],
        r => d[r - 2],
    };
    if got != rows {
        return Err(shape_error(
            name,
            format!("{name}: matrix has {rows} rows but the right-hand side has {got}"),
        ));
    }
    Ok(())
}

/// Swaps the last two axes.
#[track_caller]
pub(super) fn mt(b: &mut GraphBuilder, x: NodeId) -> Built {
    let r = b.ty(x).shape.rank() as isize;
    let mut perm: Vec<isize> = (0..r).collect();
    perm.swap((r - 1) as usize, (r - 2) as usize);
    b.transpose(x, Some(&perm))
}

/// A constant of `dtype` and shape `dims` holding `values` (row-major).
#[track_caller]
pub(super) fn constant(
    b: &mut GraphBuilder,
    dims: Vec<usize>,
    values: Vec<f64>,
    dtype: DType,
) -> Built {
    let data = match dtype {
        DType::F32 => HostData::F32(values.iter().map(|&v| v as f32).collect()),
        _ => HostData::F64(values.into()),
    };
    b.constant(data, Shape::new(dims)?, false)
}

/// The `[n, n]` identity.
#[track_caller]
pub(super) fn identity(b: &mut GraphBuilder, n: usize, dtype: DType) -> Built {
    let mut v = vec![0.0; n * n];
    for i in 0..n {
        v[i * n + i] = 1.0;
    }
    constant(b, vec![n, n], v, dtype)
}

/// `len` entries of the axis `rank - from_end` of `x`, from `start`.
#[track_caller]
pub(super) fn take_trailing(
    b: &mut GraphBuilder,
    x: NodeId,
    from_end: usize,
    start: usize,
    len: usize,
) -> Built {
    let mut sizes = dims(b, x);
    let axis = sizes.len() - from_end;
    let mut starts = vec![0; sizes.len()];
    starts[axis] = start;
    sizes[axis] = len;
    b.slice(x, starts, sizes)
}

/// `x` with its last axis removed (it has extent 1).
#[track_caller]
fn drop_last(b: &mut GraphBuilder, x: NodeId) -> Built {
    let mut d = dims(b, x);
    d.pop();
    b.reshape_to(x, Shape::new(d)?)
}

/// `a` and `rhs` (a matrix right-hand side) with their batch axes broadcast together.
#[track_caller]
pub(super) fn broadcast_batch(
    b: &mut GraphBuilder,
    a: NodeId,
    rhs: NodeId,
) -> quabla_ir::Result<(NodeId, NodeId)> {
    let (da, dr) = (dims(b, a), dims(b, rhs));
    let batch = quabla_ir::broadcast_shapes(
        &Shape::new(da[..da.len() - 2].to_vec())?,
        &Shape::new(dr[..dr.len() - 2].to_vec())?,
    )?;
    let full = |b: &mut GraphBuilder, x: NodeId, d: &[usize]| {
        let mut s = batch.dims().to_vec();
        s.extend(&d[d.len() - 2..]);
        b.broadcast_to(x, Shape::new(s)?)
    };
    Ok((full(b, a, &da)?, full(b, rhs, &dr)?))
}

#[track_caller]
fn linalg(b: &mut GraphBuilder, kind: LinalgKind, a: NodeId) -> Built {
    b.push(Op::Linalg(kind), &[a])
}

/// One finished call of several results.
#[track_caller]
pub(super) fn results<const N: usize>(tensors: Vec<Tensor>) -> Result<[Tensor; N]> {
    tensors
        .try_into()
        .map_err(|v: Vec<Tensor>| Error::Internal {
            message: format!("a factorization returned {} results, expected {N}", v.len()),
        })
}

// ---------------------------------------------------------------------------------------------
// Result types

/// `slogdet(a)`: `det(a) = sign * exp(logabsdet)` (api.md §17). A pytree: it flows through
/// `jit`, `vmap` and `grad` of a function of one field.
#[derive(Clone, Debug, crate::Tree)]
pub struct SlogdetResult {
    /// `+1` or `-1`, `0` for an exactly singular matrix, NaN for a non-finite one.
    pub sign: Tensor,
    /// `log |det(a)|`: `-inf` for an exactly singular matrix, NaN for a non-finite one.
    pub logabsdet: Tensor,
}

/// `eigh(a)`: the spec's `(eigenvalues, eigenvectors)` (api.md §17). A pytree.
#[derive(Clone, Debug, crate::Tree)]
pub struct EighResult {
    /// Ascending eigenvalues `[..., n]` of the symmetric part `(a + aᵀ)/2`.
    pub eigenvalues: Tensor,
    /// Unit eigenvectors as the columns of `[..., n, n]`, each with its largest-magnitude
    /// component positive (numerics.md §6.3).
    pub eigenvectors: Tensor,
}

/// `qr(a)`: the spec's `(Q, R)` as the fields `q` and `r` (api.md §17). A pytree.
#[derive(Clone, Debug, crate::Tree)]
pub struct QRResult {
    /// The spec's `Q`: orthonormal columns, `[..., m, k]` (reduced) or `[..., m, m]`
    /// (complete).
    pub q: Tensor,
    /// The spec's `R`: upper triangular with `diag(R) >= 0`, `[..., k, n]` (reduced) or
    /// `[..., m, n]` (complete).
    pub r: Tensor,
}

/// `svd(a)`: the spec's `(U, S, Vh)` as the fields `u`, `s` and `vh` (api.md §17). A pytree.
#[derive(Clone, Debug, crate::Tree)]
pub struct SVDResult {
    /// The spec's `U`: `[..., m, k]`, or `[..., m, m]` with `full_matrices`.
    pub u: Tensor,
    /// The spec's `S`: descending singular values `[..., k]`.
    pub s: Tensor,
    /// The spec's `Vh`: `[..., k, n]`, or `[..., n, n]` with `full_matrices`.
    pub vh: Tensor,
}

/// `lstsq(a, b)` with residuals: the spec's `(solution, residuals)` (api.md §17). A pytree.
#[derive(Clone, Debug, crate::Tree)]
pub struct LstsqResult {
    /// The least-squares (tall `a`) or minimum-norm (wide `a`) solution.
    pub solution: Tensor,
    /// Squared 2-norm of `b - a x` per right-hand side, `[..., k]` (`[...]` for a vector `b`);
    /// zeros for wide systems.
    pub residuals: Tensor,
}

macro_rules! display_fields {
    ($($ty:ident { $($field:ident),* })*) => {
        $(
            impl fmt::Display for $ty {
                #[track_caller]
                fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    write!(f, "{}(", stringify!($ty))?;
                    let mut first = true;
                    $(
                        if !first {
                            write!(f, ", ")?;
                        }
                        first = false;
                        write!(f, "{}={}", stringify!($field), self.$field)?;
                    )*
                    let _ = first;
                    write!(f, ")")
                }
            }
        )*
    };
}

display_fields! {
    SlogdetResult { sign, logabsdet }
    EighResult { eigenvalues, eigenvectors }
    QRResult { q, r }
    SVDResult { u, s, vh }
    LstsqResult { solution, residuals }
}

// ---------------------------------------------------------------------------------------------
// Options with spelled values

/// Which system `solve_triangular` solves: `a x = b` ([`Trans::N`], the spec's `0`/`"N"`) or
/// `aᵀ x = b` ([`Trans::T`], `1`/`"T"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Trans {
    #[default]
    N,
    T,
}

/// A value `solve_triangular`'s `trans` accepts: a [`Trans`], `0`/`1`, or `"N"`/`"T"`; any other
/// value is AR13 when the call is finished.
pub trait IntoTrans {
    fn into_trans(self) -> Result<Trans>;
}

#[track_caller]
fn bad_trans(value: impl fmt::Debug) -> Error {
    Error::invalid(format!(
        "solve_triangular trans must be 0, 1, \"N\" or \"T\", got {value:?}"
    ))
}

impl IntoTrans for Trans {
    #[track_caller]
    fn into_trans(self) -> Result<Trans> {
        Ok(self)
    }
}

impl IntoTrans for i64 {
    #[track_caller]
    fn into_trans(self) -> Result<Trans> {
        match self {
            0 => Ok(Trans::N),
            1 => Ok(Trans::T),
            other => Err(bad_trans(other)),
        }
    }
}

impl IntoTrans for i32 {
    #[track_caller]
    fn into_trans(self) -> Result<Trans> {
        i64::from(self).into_trans().map_err(|_| bad_trans(self))
    }
}

impl IntoTrans for &str {
    #[track_caller]
    fn into_trans(self) -> Result<Trans> {
        match self {
            "N" => Ok(Trans::N),
            "T" => Ok(Trans::T),
            other => Err(bad_trans(other)),
        }
    }
}

/// The mode of [`qr`]: `"reduced"` (the default), `"complete"` or `"r"` (the `R` array alone,
/// finished with [`Qr::eval_r`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QrMode {
    #[default]
    Reduced,
    Complete,
    R,
}

/// A value `qr`'s `mode` accepts: a [`QrMode`] or its name; any other name is AR13 when the call
/// is finished.
pub trait IntoQrMode {
    fn into_qr_mode(self) -> Result<QrMode>;
}

impl IntoQrMode for QrMode {
    #[track_caller]
    fn into_qr_mode(self) -> Result<QrMode> {
        Ok(self)
    }
}

impl IntoQrMode for &str {
    #[track_caller]
    fn into_qr_mode(self) -> Result<QrMode> {
        match self {
            "reduced" => Ok(QrMode::Reduced),
            "complete" => Ok(QrMode::Complete),
            "r" => Ok(QrMode::R),
            other => Err(Error::invalid(format!(
                "qr mode must be \"reduced\", \"complete\" or \"r\", got {other:?}"
            ))),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// solve, solve_triangular, cholesky, cho_solve

/// Solves `a x = b` by LU with partial pivoting. `a` is `[..., n, n]`; a rank-1 `b` is one
/// vector `[n]`, any other `b` a stack of right-hand sides `[..., n, k]`; batch axes broadcast.
/// An exactly singular `a` is [`Error::Singular`] when the call (or the plan holding it) runs.
///
/// ```
/// use quabla as qb;
/// # fn main() -> qb::Result<()> {
/// let a = qb::array([[4.0, 1.0], [1.0, 3.0]])?;
/// let x = qb::linalg::solve(&a, qb::array([1.0, 2.0])?)?;
/// assert!((x.to_vec::<f64>()?[1] - 7.0 / 11.0).abs() < 1e-15);
/// # Ok(())
/// # }
/// ```
#[track_caller]
pub fn solve(a: impl Into<Operand>, b: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into(), b.into()], |g, x| {
        let n = square(g, x[0], "solve")?;
        check_rhs(g, x[0], n, x[1], "solve")?;
        g.solve(x[0], x[1])
    })
}

/// `solve_triangular(a, b)`: forward or back substitution reading only one triangle of `a`
/// (the upper by default); finish with [`SolveTriangular::eval`].
#[track_caller]
pub fn solve_triangular(a: impl Into<Operand>, b: impl Into<Operand>) -> SolveTriangular {
    SolveTriangular {
        a: a.into(),
        b: b.into(),
        lower: false,
        trans: Ok(Trans::N),
    }
}

/// A `solve_triangular` call being configured.
#[derive(Debug)]
#[must_use = "finish the call with .eval()"]
pub struct SolveTriangular {
    a: Operand,
    b: Operand,
    lower: bool,
    trans: Result<Trans>,
}

impl SolveTriangular {
    /// Read the lower triangle of `a` (default: the upper).
    #[track_caller]
    pub fn lower(mut self, lower: bool) -> Self {
        self.lower = lower;
        self
    }

    /// Solve `aᵀ x = b` for [`Trans::T`] (`1`, `"T"`); the triangle read is still the one
    /// [`SolveTriangular::lower`] names, of `a` itself.
    #[track_caller]
    pub fn trans(mut self, trans: impl IntoTrans) -> Self {
        self.trans = trans.into_trans();
        self
    }

    /// Solves; `b` follows [`solve`]'s conventions.
    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let transpose = self.trans? == Trans::T;
        let lower = self.lower;
        apply(vec![self.a, self.b], |g, x| {
            let name = "solve_triangular";
            let n = square(g, x[0], name)?;
            check_rhs(g, x[0], n, x[1], name)?;
            g.triangular_solve(x[0], x[1], lower, transpose, false)
        })
    }
}

/// The lower Cholesky factor `l` (`a = l lᵀ`) of a symmetric positive-definite `[..., n, n]`
/// matrix. Only the lower triangle of `a` is read, and derivatives are those of that function
/// (the strict upper triangle receives zero); a matrix whose lower triangle is not positive
/// definite gives an all-NaN factor, as does a non-finite entry (docs/linalg.md).
#[track_caller]
pub fn cholesky(a: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into()], |g, x| {
        square(g, x[0], "cholesky")?;
        g.push(Op::Cholesky, &[x[0]])
    })
}

/// `cho_solve(c, b)`: solves `a x = b` from the Cholesky factor `c` of `a` (lower by default,
/// `a = c cᵀ`; upper, `a = cᵀ c`) with two triangular solves; finish with
/// [`ChoSolve::eval`].
#[track_caller]
pub fn cho_solve(c: impl Into<Operand>, b: impl Into<Operand>) -> ChoSolve {
    ChoSolve {
        c: c.into(),
        b: b.into(),
        lower: true,
    }
}

/// A `cho_solve` call being configured.
#[derive(Debug)]
#[must_use = "finish the call with .eval()"]
pub struct ChoSolve {
    c: Operand,
    b: Operand,
    lower: bool,
}

impl ChoSolve {
    /// Whether `c` is the lower factor (default `true`); only that triangle of `c` is read.
    #[track_caller]
    pub fn lower(mut self, lower: bool) -> Self {
        self.lower = lower;
        self
    }

    /// Solves; `b` follows [`solve`]'s conventions.
    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let lower = self.lower;
        apply(vec![self.c, self.b], |g, x| {
            let name = "cho_solve";
            let n = square(g, x[0], name)?;
            check_rhs(g, x[0], n, x[1], name)?;
            // lower: c y = b, cᵀ x = y; upper: cᵀ y = b, c x = y.
            let y = g.triangular_solve(x[0], x[1], lower, !lower, false)?;
            g.triangular_solve(x[0], y, lower, lower, false)
        })
    }
}

// ---------------------------------------------------------------------------------------------
// slogdet, det, inv, matrix_power

/// Sign and log absolute determinant from LU with partial pivoting: `(0, -inf)` for an exactly
/// singular matrix (no error; its derivative raises), `(NaN, NaN)` for a non-finite one.
#[track_caller]
pub fn slogdet(a: impl Into<Operand>) -> Result<SlogdetResult> {
    let [sign, logabsdet] = results(apply_many(vec![a.into()], |g, x| {
        square(g, x[0], "slogdet")?;
        Ok(vec![
            linalg(g, LinalgKind::DetSign, x[0])?,
            linalg(g, LinalgKind::LogAbsDet, x[0])?,
        ])
    })?)?;
    Ok(SlogdetResult { sign, logabsdet })
}

/// `sign * exp(logabsdet)` of [`slogdet`]: exactly 0 for a singular matrix. Its derivative
/// `det * trace(solve(a, da))` raises [`Error::Singular`] at a singular matrix (LA1).
#[track_caller]
pub fn det(a: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into()], |g, x| {
        square(g, x[0], "det")?;
        let sign = linalg(g, LinalgKind::DetSign, x[0])?;
        let log = linalg(g, LinalgKind::LogAbsDet, x[0])?;
        let magnitude = g.unary(quabla_ir::UnaryOp::Exp, log)?;
        g.mul(sign, magnitude)
    })
}

/// `solve(a, I)`: [`Error::Singular`] for an exactly singular matrix.
#[track_caller]
pub fn inv(a: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into()], |g, x| build_inv(g, x[0], "inv"))
}

#[track_caller]
fn build_inv(g: &mut GraphBuilder, a: NodeId, name: &str) -> Built {
    let n = square(g, a, name)?;
    let eye = identity(g, n, g.ty(a).dtype)?;
    g.solve(a, eye)
}

/// `a` to the integer power `n` by repeated squaring: the identity for `n == 0`, powers of
/// `inv(a)` for negative `n`.
#[track_caller]
pub fn matrix_power(a: impl Into<Operand>, n: i64) -> Result<Tensor> {
    apply(vec![a.into()], |g, x| {
        let name = "matrix_power";
        let size = square(g, x[0], name)?;
        let dtype = g.ty(x[0]).dtype;
        if n == 0 {
            let eye = identity(g, size, dtype)?;
            let shape = g.ty(x[0]).shape.clone();
            return g.broadcast_to(eye, shape);
        }
        let mut base = if n < 0 {
            build_inv(g, x[0], name)?
        } else {
            x[0]
        };
        let mut k = n.unsigned_abs();
        let mut acc: Option<NodeId> = None;
        loop {
            if k & 1 == 1 {
                acc = Some(match acc {
                    None => base,
                    Some(p) => g.push(Op::Matmul, &[p, base])?,
                });
            }
            k >>= 1;
            if k == 0 {
                break;
            }
            base = g.push(Op::Matmul, &[base, base])?;
        }
        Ok(acc.expect("n != 0 sets a factor"))
    })
}

// ---------------------------------------------------------------------------------------------
// eigh, qr, svd

/// Eigenvalues (ascending) and eigenvectors (columns, sign rule of numerics.md §6.3) of the
/// symmetric part `(a + aᵀ)/2` of each `[..., n, n]` matrix.
#[track_caller]
pub fn eigh(a: impl Into<Operand>) -> Result<EighResult> {
    let [eigenvalues, eigenvectors] = results(apply_many(vec![a.into()], |g, x| {
        square(g, x[0], "eigh")?;
        Ok(vec![
            linalg(g, LinalgKind::EighValues, x[0])?,
            linalg(g, LinalgKind::EighVectors, x[0])?,
        ])
    })?)?;
    Ok(EighResult {
        eigenvalues,
        eigenvectors,
    })
}

/// The eigenvalues (ascending) of the symmetric part of each `[..., n, n]` matrix: the
/// `eigenvalues` of [`eigh`] without computing the eigenvectors' outputs.
#[track_caller]
pub fn eigvalsh(a: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into()], |g, x| {
        square(g, x[0], "eigvalsh")?;
        linalg(g, LinalgKind::EighValues, x[0])
    })
}

/// `qr(a)`: Householder QR of `[..., m, n]` with `diag(R) >= 0`; finish with [`Qr::eval`] (the
/// factors) or [`Qr::eval_r`] (`R` alone, the spec's `mode="r"`).
#[track_caller]
pub fn qr(a: impl Into<Operand>) -> Qr {
    Qr {
        a: a.into(),
        mode: Ok(QrMode::Reduced),
    }
}

/// A `qr` call being configured.
#[derive(Debug)]
#[must_use = "finish the call with .eval() or .eval_r()"]
pub struct Qr {
    a: Operand,
    mode: Result<QrMode>,
}

impl Qr {
    /// [`QrMode::Reduced`] (default, `Q [m, k]`, `R [k, n]`), [`QrMode::Complete`] (`Q [m, m]`,
    /// `R [m, n]`) or [`QrMode::R`]; also by name (`"reduced"`, `"complete"`, `"r"`).
    #[track_caller]
    pub fn mode(mut self, mode: impl IntoQrMode) -> Self {
        self.mode = mode.into_qr_mode();
        self
    }

    /// The factors of the reduced or complete mode. A complete `Q` of a tall matrix has extra
    /// columns (any orthonormal completion of the first `k`): docs/linalg.md says what their
    /// derivatives do (TF11).
    #[track_caller]
    pub fn eval(self) -> Result<QRResult> {
        let mode = self.mode?;
        if mode == QrMode::R {
            return Err(Error::invalid(
                "qr(mode=\"r\") returns the R array alone: finish the call with .eval_r()",
            ));
        }
        let [q, r] = results(apply_many(vec![self.a], |g, x| {
            let (m, n) = matrix_dims(g, x[0], "qr")?;
            let r = build_r(g, x[0], mode, m, n)?;
            let q = if mode == QrMode::Complete && m > n {
                linalg(g, LinalgKind::QrQComplete, x[0])?
            } else {
                // Without extra columns the complete Q is the reduced one.
                linalg(g, LinalgKind::QrQ, x[0])?
            };
            Ok(vec![q, r])
        })?)?;
        Ok(QRResult { q, r })
    }

    /// `R` alone: `[..., k, n]` for the modes `"r"` and `"reduced"`, `[..., m, n]` for
    /// `"complete"`.
    #[track_caller]
    pub fn eval_r(self) -> Result<Tensor> {
        let mode = self.mode?;
        apply(vec![self.a], |g, x| {
            let (m, n) = matrix_dims(g, x[0], "qr")?;
            build_r(g, x[0], mode, m, n)
        })
    }
}

/// `R` of `mode`: the reduced factor, padded with zero rows to `[..., m, n]` in complete mode
/// (rows `k..m` of a complete `R` are exactly zero, whatever the input).
#[track_caller]
fn build_r(g: &mut GraphBuilder, a: NodeId, mode: QrMode, m: usize, n: usize) -> Built {
    let r = linalg(g, LinalgKind::QrR, a)?;
    if mode != QrMode::Complete || m <= n {
        return Ok(r);
    }
    let shape = g.ty(a).shape.clone();
    let starts = vec![0; shape.rank()];
    g.push(Op::PadSlice { starts, shape }, &[r])
}

/// `svd(a)`: `a = U diag(S) Vh` with descending `S` and the sign rule of numerics.md §6.3;
/// finish with [`Svd::eval`] (the factors) or [`Svd::eval_s`] (`S` alone, the spec's
/// `compute_uv=False`).
#[track_caller]
pub fn svd(a: impl Into<Operand>) -> Svd {
    Svd {
        a: a.into(),
        full_matrices: false,
    }
}

/// An `svd` call being configured.
#[derive(Debug)]
#[must_use = "finish the call with .eval() or .eval_s()"]
pub struct Svd {
    a: Operand,
    full_matrices: bool,
}

impl Svd {
    /// Square `U [m, m]` and `Vh [n, n]` instead of the reduced `[m, k]`, `[k, n]` (default
    /// `false`). The extra columns (rows) are any orthonormal completion; docs/linalg.md says
    /// what their derivatives do (TF11).
    #[track_caller]
    pub fn full_matrices(mut self, full: bool) -> Self {
        self.full_matrices = full;
        self
    }

    /// The factors `(U, S, Vh)`.
    #[track_caller]
    pub fn eval(self) -> Result<SVDResult> {
        let full = self.full_matrices;
        let [u, s, vh] = results(apply_many(vec![self.a], |g, x| {
            matrix_dims(g, x[0], "svd")?;
            let (ku, kvh) = if full {
                (LinalgKind::SvdUFull, LinalgKind::SvdVhFull)
            } else {
                (LinalgKind::SvdU, LinalgKind::SvdVh)
            };
            Ok(vec![
                linalg(g, ku, x[0])?,
                linalg(g, LinalgKind::SvdS, x[0])?,
                linalg(g, kvh, x[0])?,
            ])
        })?)?;
        Ok(SVDResult { u, s, vh })
    }

    /// The singular values alone, `[..., k]` descending.
    #[track_caller]
    pub fn eval_s(self) -> Result<Tensor> {
        apply(vec![self.a], |g, x| {
            matrix_dims(g, x[0], "svd")?;
            linalg(g, LinalgKind::SvdS, x[0])
        })
    }
}

// ---------------------------------------------------------------------------------------------
// lstsq, pinv

/// `lstsq(a, b)` via QR (numerics.md §6.6): least squares for a tall full-column-rank `a`,
/// the minimum-norm solution for a wide full-row-rank `a` (rank-deficient input gives
/// meaningless results, as the spec says). `b` is `[m]` or `[..., m, k]`; batch axes
/// broadcast. Finish with [`Lstsq::eval`] or [`Lstsq::eval_with_residuals`] (the spec's
/// `return_residuals=True`).
#[track_caller]
pub fn lstsq(a: impl Into<Operand>, b: impl Into<Operand>) -> Lstsq {
    Lstsq {
        a: a.into(),
        b: b.into(),
    }
}

/// A `lstsq` call being configured.
#[derive(Debug)]
#[must_use = "finish the call with .eval() or .eval_with_residuals()"]
pub struct Lstsq {
    a: Operand,
    b: Operand,
}

impl Lstsq {
    /// The solution.
    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let [x] = results(apply_many(vec![self.a, self.b], |g, x| {
            Ok(vec![build_lstsq(g, x[0], x[1], false)?.0])
        })?)?;
        Ok(x)
    }

    /// The solution with the squared residual norms.
    #[track_caller]
    pub fn eval_with_residuals(self) -> Result<LstsqResult> {
        let [solution, residuals] = results(apply_many(vec![self.a, self.b], |g, x| {
            let (x, r) = build_lstsq(g, x[0], x[1], true)?;
            Ok(vec![x, r.expect("residuals were asked for")])
        })?)?;
        Ok(LstsqResult {
            solution,
            residuals,
        })
    }
}

#[track_caller]
fn build_lstsq(
    g: &mut GraphBuilder,
    a: NodeId,
    rhs: NodeId,
    residuals: bool,
) -> quabla_ir::Result<(NodeId, Option<NodeId>)> {
    let name = "lstsq";
    let (m, n) = matrix_dims(g, a, name)?;
    check_rhs(g, a, m, rhs, name)?;
    let vector = g.ty(rhs).shape.rank() == 1;
    let rhs = if vector {
        g.reshape_to(rhs, Shape::new(vec![m, 1])?)?
    } else {
        rhs
    };
    let (a, rhs) = broadcast_batch(g, a, rhs)?;
    let x = if m >= n {
        // x = R⁻¹ Qᵀ b from the reduced QR of a.
        let q = linalg(g, LinalgKind::QrQ, a)?;
        let r = linalg(g, LinalgKind::QrR, a)?;
        let qt = mt(g, q)?;
        let qtb = g.push(Op::Matmul, &[qt, rhs])?;
        g.triangular_solve(r, qtb, false, false, false)?
    } else {
        // aᵀ = Q R: the minimum-norm solution is Q R⁻ᵀ b.
        let at = mt(g, a)?;
        let q = linalg(g, LinalgKind::QrQ, at)?;
        let r = linalg(g, LinalgKind::QrR, at)?;
        let y = g.triangular_solve(r, rhs, false, true, false)?;
        g.push(Op::Matmul, &[q, y])?
    };
    let res = if !residuals {
        None
    } else if m >= n {
        let ax = g.push(Op::Matmul, &[a, x])?;
        let d = g.sub(rhs, ax)?;
        let d2 = g.mul(d, d)?;
        Some(g.sum(d2, Some(&[-2]), false)?)
    } else {
        let mut d = dims(g, rhs);
        d.remove(d.len() - 2);
        let zero = g.scalar(0.0, g.ty(a).dtype, false);
        Some(g.broadcast_to(zero, Shape::new(d)?)?)
    };
    if vector {
        let x = drop_last(g, x)?;
        let res = res.map(|r| drop_last(g, r)).transpose()?;
        Ok((x, res))
    } else {
        Ok((x, res))
    }
}

/// `pinv(a)`: the pseudo-inverse `V diag(1/s) Uᵀ` from the reduced SVD over the singular
/// values `s > rtol * max(s)` (the others dropped); finish with [`Pinv::eval`].
#[track_caller]
pub fn pinv(a: impl Into<Operand>) -> Pinv {
    Pinv {
        a: a.into(),
        rtol: None,
    }
}

/// A `pinv` call being configured.
#[derive(Debug)]
#[must_use = "finish the call with .eval()"]
pub struct Pinv {
    a: Operand,
    rtol: Option<f64>,
}

impl Pinv {
    /// The relative cutoff (default `max(m, n) * eps(dtype)`).
    #[track_caller]
    pub fn rtol(mut self, rtol: f64) -> Self {
        self.rtol = Some(rtol);
        self
    }

    /// The pseudo-inverse `[..., n, m]`.
    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        if let Some(r) = self.rtol {
            if !(r.is_finite() && r >= 0.0) {
                return Err(Error::invalid(format!(
                    "pinv: rtol must be a finite non-negative number, got {r}"
                )));
            }
        }
        let rtol = self.rtol;
        apply(vec![self.a], |g, x| {
            let (m, n) = matrix_dims(g, x[0], "pinv")?;
            let dtype = g.ty(x[0]).dtype;
            let eps = if dtype == DType::F32 {
                f32::EPSILON as f64
            } else {
                f64::EPSILON
            };
            let rtol = rtol.unwrap_or(m.max(n) as f64 * eps);
            let u = linalg(g, LinalgKind::SvdU, x[0])?;
            let s = linalg(g, LinalgKind::SvdS, x[0])?;
            let vh = linalg(g, LinalgKind::SvdVh, x[0])?;
            // s is descending: its first entry is max(s).
            let smax = take_trailing(g, s, 1, 0, 1)?;
            let r = g.scalar(rtol, dtype, false);
            let cutoff = g.mul(smax, r)?;
            let keep = g.compare(Comparison::Greater, s, cutoff)?;
            let one = g.scalar(1.0, dtype, false);
            let safe = g.select(keep, s, one)?;
            let inv = g.div(one, safe)?;
            let zero = g.scalar(0.0, dtype, false);
            let inv = g.select(keep, inv, zero)?;
            // V diag(1/s) Uᵀ as (Vhᵀ * row(1/s)) @ Uᵀ.
            let mut row = dims(g, inv);
            let k = row.pop().expect("s has an axis");
            row.extend([1, k]);
            let inv_row = g.reshape_to(inv, Shape::new(row)?)?;
            let v = mt(g, vh)?;
            let scaled = g.mul(v, inv_row)?;
            let ut = mt(g, u)?;
            g.push(Op::Matmul, &[scaled, ut])
        })
    }
}
