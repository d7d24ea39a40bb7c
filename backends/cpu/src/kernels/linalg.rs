//! The linear-algebra ops: `solve`, `cholesky`, `cholesky_ad`, `triangular_solve` and the
//! `linalg` kinds, on the float64 batched kernels of `quabla-linalg`.
//!
//! Operands are widened to float64 (numerics.md §1.5: decompositions run in float64 and round
//! their outputs for float32 inputs); each result is rounded once to the node dtype. An exactly
//! singular `solve` is [`BackendError::Singular`]; every other outcome is a value (NaN
//! factorizations for non-finite or indefinite input, as `quabla-linalg` documents).

use crate::buffer::{View, ViewMut};
use crate::kernels::matmul::gemm;
use crate::kernels::{internal, par_for_each, scratch, scratch_oom};
use quabla_backend::{BackendError, Result};
use quabla_ir::LinalgKind;
use quabla_linalg::{LinalgError, LuFactors};

fn map_err(e: LinalgError) -> BackendError {
    match e {
        LinalgError::Singular { op } => BackendError::Singular { op: op.to_string() },
        LinalgError::Shape { message } => internal(message),
    }
}

/// `(batch, rows, cols)` of an `[..., rows, cols]` shape.
fn matrices(dims: &[usize]) -> (usize, usize, usize) {
    let r = dims.len();
    (dims[..r - 2].iter().product(), dims[r - 2], dims[r - 1])
}

/// Writes a float64 result, rounding it to the output dtype.
fn store(mut out: ViewMut<'_>, values: &[f64]) -> Result<()> {
    if values.len() != out.len() {
        return Err(internal(format!(
            "a linear-algebra kernel returned {} values for a result of {}",
            values.len(),
            out.len()
        )));
    }
    out.store_f64(0, values);
    Ok(())
}

/// Where a step finds the LU factors of its matrix operand: it factors the matrix itself, or
/// it takes part in factors shared between the steps of one run (`cell` holds them between
/// those steps; the first user fills it and the `last` empties it).
pub(crate) enum Lu<'c> {
    Own,
    Shared {
        cell: &'c mut Option<LuFactors>,
        last: bool,
    },
}

impl Lu<'_> {
    /// Runs `f` on the factors of `a` (`[..., n, n]`), factoring it unless a shared cell
    /// already holds them.
    fn with<R>(
        self,
        a: View<'_>,
        dims: &[usize],
        f: impl FnOnce(&LuFactors) -> Result<R>,
    ) -> Result<R> {
        let factor = || -> Result<LuFactors> {
            let (batch, n, _) = matrices(dims);
            let a = a.as_f64().map_err(scratch_oom)?;
            quabla_linalg::lu_factor(&a, batch, n).map_err(map_err)
        };
        match self {
            Lu::Own => f(&factor()?),
            Lu::Shared { cell, last } => {
                let result = match cell {
                    Some(lu) => f(lu),
                    None => f(cell.insert(factor()?)),
                };
                if last {
                    *cell = None;
                }
                result
            }
        }
    }
}

/// The executor's threads ([`par_for_each`]) for a linear-algebra kernel that splits its work.
struct TeamThreads(usize);

impl quabla_linalg::Threads for TeamThreads {
    fn count(&self) -> usize {
        self.0
    }

    fn run(&self, parts: usize, part: &(dyn Fn(usize) + Sync)) {
        par_for_each((0..parts).collect(), self.0, part);
    }
}

/// `solve(a, b)`, or `solve(aᵀ, b)` when `transpose_a`, with the LU factors of `a`:
/// `a [..., n, n]`, `b [..., n, k]`. Panels of many right-hand sides split over `threads`
/// (the same bits for every thread count, see `LuFactors::solve_on`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn solve(
    a: View<'_>,
    a_dims: &[usize],
    b: View<'_>,
    b_dims: &[usize],
    transpose_a: bool,
    lu: Lu<'_>,
    out: ViewMut<'_>,
    threads: usize,
) -> Result<()> {
    let k = b_dims[b_dims.len() - 1];
    let b = b.as_f64().map_err(scratch_oom)?;
    let x = lu.with(a, a_dims, |f| {
        f.solve_with(&b, k, transpose_a, &TeamThreads(threads))
            .map_err(map_err)
    })?;
    store(out, &x)
}

/// `triangular_solve(a, b)` with the op's flags.
#[allow(clippy::too_many_arguments)]
pub(crate) fn triangular_solve(
    a: View<'_>,
    a_dims: &[usize],
    b: View<'_>,
    b_dims: &[usize],
    lower: bool,
    transpose_a: bool,
    unit_diagonal: bool,
    out: ViewMut<'_>,
) -> Result<()> {
    let (batch, n, _) = matrices(a_dims);
    let k = b_dims[b_dims.len() - 1];
    let (a, b) = (
        a.as_f64().map_err(scratch_oom)?,
        b.as_f64().map_err(scratch_oom)?,
    );
    let x = quabla_linalg::triangular_solve(&a, &b, batch, n, k, lower, transpose_a, unit_diagonal)
        .map_err(map_err)?;
    store(out, &x)
}

/// The lower Cholesky factor.
pub(crate) fn cholesky(a: View<'_>, dims: &[usize], out: ViewMut<'_>) -> Result<()> {
    let (batch, n, _) = matrices(dims);
    let a = a.as_f64().map_err(scratch_oom)?;
    let l = quabla_linalg::cholesky(&a, batch, n).map_err(map_err)?;
    store(out, &l)
}

/// `cholesky_ad(l, da)`: the tangent `dL = L Φ(L⁻¹ dA L⁻ᵀ)` of the Cholesky factor, where `Φ`
/// keeps the lower triangle and halves the diagonal. Only the lower triangle of `l` is read.
pub(crate) fn cholesky_ad(
    l: View<'_>,
    da: View<'_>,
    dims: &[usize],
    out: ViewMut<'_>,
) -> Result<()> {
    let (batch, n, _) = matrices(dims);
    let l = l.as_f64().map_err(scratch_oom)?;
    let nn = n * n;
    // The factor with exact zeros above the diagonal.
    let mut lower = scratch(l.len())?;
    lower.copy_from_slice(&l);
    for m in lower.chunks_mut(nn) {
        for i in 0..n {
            for j in i + 1..n {
                m[i * n + j] = 0.0;
            }
        }
    }
    // X = L⁻¹ dA, then Z = L⁻¹ Xᵀ = (L⁻¹ dA L⁻ᵀ)ᵀ.
    let da = da.as_f64().map_err(scratch_oom)?;
    let x = quabla_linalg::triangular_solve(&lower, &da, batch, n, n, true, false, false)
        .map_err(map_err)?;
    let xt = transpose_each(&x, batch, n)?;
    let z = quabla_linalg::triangular_solve(&lower, &xt, batch, n, n, true, false, false)
        .map_err(map_err)?;
    // Φ(Y) with Y = Zᵀ: Φ[i, j] = Y[i, j] = Z[j, i] for i > j, Y[i, i] / 2 on the diagonal.
    let mut phi = scratch(batch * nn)?;
    for (p, zm) in phi.chunks_mut(nn).zip(z.chunks(nn)) {
        for i in 0..n {
            for j in 0..i {
                p[i * n + j] = zm[j * n + i];
            }
            p[i * n + i] = zm[i * n + i] / 2.0;
        }
    }
    let mut dl = scratch(batch * nn)?;
    for ((c, lm), pm) in dl.chunks_mut(nn).zip(lower.chunks(nn)).zip(phi.chunks(nn)) {
        gemm(lm, pm, c, n, n, n);
    }
    store(out, &dl)
}

fn transpose_each(x: &[f64], batch: usize, n: usize) -> Result<Vec<f64>> {
    let nn = n * n;
    let mut t = scratch(batch * nn)?;
    for (tm, xm) in t.chunks_mut(nn).zip(x.chunks(nn)) {
        for i in 0..n {
            for j in 0..n {
                tm[j * n + i] = xm[i * n + j];
            }
        }
    }
    Ok(t)
}

/// Which decomposition a `linalg` kind reads its output from; kinds of one family on one
/// operand share a single factorization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Family {
    Slogdet,
    Eigh,
    Qr { complete: bool },
    Svd { full: bool },
}

impl Family {
    pub(crate) fn of(kind: LinalgKind) -> Family {
        match kind {
            LinalgKind::DetSign | LinalgKind::LogAbsDet => Family::Slogdet,
            LinalgKind::EighValues | LinalgKind::EighVectors => Family::Eigh,
            LinalgKind::QrR | LinalgKind::QrQ => Family::Qr { complete: false },
            LinalgKind::QrQComplete => Family::Qr { complete: true },
            LinalgKind::SvdS | LinalgKind::SvdU | LinalgKind::SvdVh => Family::Svd { full: false },
            LinalgKind::SvdUFull | LinalgKind::SvdVhFull => Family::Svd { full: true },
        }
    }
}

/// Outputs of `linalg[kind]` for several kinds of one [`Family`] on the same `[..., m, n]`
/// matrices, from one factorization: `outs[i]` receives `kinds[i]`. `lu` is where the
/// `slogdet` family finds its LU factors.
pub(crate) fn linalg(
    kinds: &[LinalgKind],
    a: View<'_>,
    dims: &[usize],
    lu: Lu<'_>,
    outs: Vec<ViewMut<'_>>,
) -> Result<()> {
    let Some(&first) = kinds.first() else {
        return Ok(());
    };
    if Family::of(first) == Family::Slogdet {
        let (sign, log) = lu.with(a, dims, |f| Ok(f.slogdet()))?;
        return store_parts(kinds, first, &[sign, log], outs);
    }
    let (batch, m, n) = matrices(dims);
    let a = a.as_f64().map_err(scratch_oom)?;
    // The factorization's outputs, and which one each kind reads.
    let parts: Vec<Vec<f64>> = match Family::of(first) {
        Family::Slogdet => return Err(internal("slogdet is factored by LU above")),
        Family::Eigh => {
            let (w, v) = quabla_linalg::eigh(&a, batch, n).map_err(map_err)?;
            vec![w, v]
        }
        Family::Qr { complete } => {
            let (q, r) = quabla_linalg::qr(&a, batch, m, n, complete).map_err(map_err)?;
            vec![q, r]
        }
        Family::Svd { full } => {
            let (u, s, vh) = quabla_linalg::svd(&a, batch, m, n, full).map_err(map_err)?;
            vec![u, s, vh]
        }
    };
    store_parts(kinds, first, &parts, outs)
}

/// Writes the part of a factorization each kind reads into its output.
fn store_parts(
    kinds: &[LinalgKind],
    first: LinalgKind,
    parts: &[Vec<f64>],
    outs: Vec<ViewMut<'_>>,
) -> Result<()> {
    for (&kind, out) in kinds.iter().zip(outs) {
        if Family::of(kind) != Family::of(first) {
            return Err(internal(
                "linalg kinds of different factorizations share a step",
            ));
        }
        let part = match kind {
            LinalgKind::DetSign
            | LinalgKind::EighValues
            | LinalgKind::QrQ
            | LinalgKind::QrQComplete => 0,
            LinalgKind::LogAbsDet | LinalgKind::EighVectors | LinalgKind::QrR => 1,
            LinalgKind::SvdU | LinalgKind::SvdUFull => 0,
            LinalgKind::SvdS => 1,
            LinalgKind::SvdVh | LinalgKind::SvdVhFull => 2,
        };
        store(out, &parts[part])?;
    }
    Ok(())
}
