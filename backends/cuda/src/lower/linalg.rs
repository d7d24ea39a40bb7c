//! `matmul`, `solve`, `triangular_solve`, `cholesky`, `cholesky_ad` and the `linalg` kinds as
//! cuBLAS and cuSOLVER calls with the kernels around them (`codegen::linalg`).
//!
//! The libraries are column-major; our matrices are row-major. A row-major `r x c` buffer is
//! the column-major `c x r` matrix holding its transpose, which most calls use as is:
//!
//! - `matmul` `C = A B` is `C^T = B^T A^T`: one strided-batched GEMM with the operands swapped
//!   (a batch operand that broadcasts is read with stride 0, or materialized when it
//!   broadcasts only in some batch axes);
//! - `triangular_solve` `op(A) X = B` is `X^T op(A)^T = B^T`, a right-side `trsm` on the
//!   column-major `A^T` (the lower triangle of `A` is the upper one of `A^T`);
//! - `solve` factors the column-major `A^T` (`det(A^T) = det(A)`, and `A x = b` is
//!   `(A^T)^T x = b`, a transposed `getrs`); the right-hand sides are transposed in and out;
//! - `cholesky` factors the column-major `A^T`, reading its upper triangle (the lower one of
//!   `A`, as the reference reads); the factor comes out row-major lower;
//! - `eigh` works on the symmetric part, whose layout is its own transpose;
//! - `svd` factors the column-major `A^T = U_M S V_M^T`: `U = V_M` and `Vh = U_M^T`, whose
//!   row-major layout is `U_M`'s column-major one;
//! - `qr` transposes `A` into a column-major copy for `geqrf`/`orgqr`.
//!
//! The `linalg` kinds of one factorization on one operand (`svd_u`, `svd_s`, `svd_vh`, or the
//! two of `slogdet`) share one call. Every result is made in the program's type.

use super::{internal, Ctx};
use crate::codegen::{layout, linalg as kernels};
use crate::program::{Arg, BufId, Elem, Gemm, Solver, SolverCall, Step, Trsm};
use quabla_backend::BackendError;
use quabla_ir::{LinalgKind, NodeId, Op};

/// `(batch, rows, cols)` of `[..., rows, cols]`.
fn matrices(dims: &[usize]) -> (usize, usize, usize) {
    let r = dims.len();
    (dims[..r - 2].iter().product(), dims[r - 2], dims[r - 1])
}

/// The factorization a `linalg` kind reads (kinds of one family share it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Slogdet,
    Eigh,
    Qr { complete: bool },
    Svd { full: bool },
}

impl Family {
    fn of(kind: LinalgKind) -> Family {
        match kind {
            LinalgKind::DetSign | LinalgKind::LogAbsDet => Family::Slogdet,
            LinalgKind::EighValues | LinalgKind::EighVectors => Family::Eigh,
            LinalgKind::QrR | LinalgKind::QrQ => Family::Qr { complete: false },
            LinalgKind::QrQComplete => Family::Qr { complete: true },
            LinalgKind::SvdS | LinalgKind::SvdU | LinalgKind::SvdVh => Family::Svd { full: false },
            LinalgKind::SvdUFull | LinalgKind::SvdVhFull => Family::Svd { full: true },
        }
    }

    /// Which of the family's outputs a kind is.
    fn part(kind: LinalgKind) -> usize {
        match kind {
            LinalgKind::DetSign | LinalgKind::EighValues | LinalgKind::QrR => 0,
            LinalgKind::LogAbsDet | LinalgKind::EighVectors | LinalgKind::QrQ => 1,
            LinalgKind::QrQComplete => 1,
            LinalgKind::SvdU | LinalgKind::SvdUFull => 0,
            LinalgKind::SvdS => 1,
            LinalgKind::SvdVh | LinalgKind::SvdVhFull => 2,
        }
    }
}

impl Ctx<'_> {
    /// Lowers linear-algebra node `i` and returns its buffer (in the program's type).
    pub(super) fn linear_algebra(&mut self, i: usize) -> Result<BufId, BackendError> {
        let node = &self.g.nodes()[i];
        let op = node.op.clone();
        let operands = node.operands.clone();
        match op {
            Op::Matmul => self.matmul(i, operands[0], operands[1]),
            Op::TriangularSolve {
                lower,
                transpose_a,
                unit_diagonal,
            } => {
                let a = self.buf_as(operands[0], self.t())?;
                let out = self.copy_of(operands[1])?;
                let (batch, n, k) = matrices(&self.dims(operands[1]));
                self.trsm(a, out, batch, n, k, lower, transpose_a, unit_diagonal);
                Ok(out)
            }
            Op::Solve { transpose_a } => self.solve(operands[0], operands[1], transpose_a),
            Op::Cholesky => self.cholesky(operands[0]),
            Op::CholeskyAd => self.cholesky_ad(operands[0], operands[1]),
            Op::Linalg(kind) => {
                let family = Family::of(kind);
                let key = (operands[0].index(), family);
                let parts = match self.factorizations.get(&key) {
                    Some(parts) => parts.clone(),
                    None => {
                        let parts = self.factorize(operands[0], family)?;
                        self.factorizations.insert(key, parts.clone());
                        parts
                    }
                };
                Ok(parts[Family::part(kind)])
            }
            other => Err(internal(format!(
                "{} is not a linear-algebra op",
                other.name()
            ))),
        }
    }

    /// A new buffer of the program's type holding a copy of `id`'s value (for calls that work
    /// in place).
    fn copy_of(&mut self, id: NodeId) -> Result<BufId, BackendError> {
        let src = self.buf_of(id)?;
        let (from, t) = (self.b.elem(src), self.t());
        let len = self.size(id);
        let out = self.temp(t, len);
        self.launch(
            layout::copy(from, t),
            len,
            vec![Arg::Buf(src), Arg::Buf(out)],
        );
        Ok(out)
    }

    /// A batch of row-major `rows x cols` matrices transposed into a new buffer of the
    /// program's type (the column-major layout of the same matrices).
    fn transposed(&mut self, src: BufId, batch: usize, rows: usize, cols: usize) -> BufId {
        let (from, t) = (self.b.elem(src), self.t());
        let len = batch * rows * cols;
        let out = self.temp(t, len);
        self.launch(
            layout::transpose_matrices(batch, rows, cols, from, t),
            len,
            vec![Arg::Buf(src), Arg::Buf(out)],
        );
        out
    }

    /// Row-major `C = A B` for `batch` matrices (`A` `m x k`, `B` `k x n`, contiguous), with
    /// per-operand batch strides.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &mut self,
        a: BufId,
        stride_a: usize,
        b: BufId,
        stride_b: usize,
        c: BufId,
        (batch, m, k, n): (usize, usize, usize, usize),
    ) {
        let elem = self.t();
        self.steps.push(Step::Gemm(Gemm {
            elem,
            trans_a: false,
            trans_b: false,
            m: n,
            n: m,
            k,
            a: b,
            lda: n,
            stride_a: stride_b,
            b: a,
            ldb: k,
            stride_b: stride_a,
            c,
            ldc: n,
            stride_c: m * n,
            batch,
        }));
    }

    /// Row-major `op(A) X = B` in place over `b` (`A` `n x n`, `B` `n x k`, `batch` pairs).
    #[allow(clippy::too_many_arguments)]
    fn trsm(
        &mut self,
        a: BufId,
        b: BufId,
        batch: usize,
        n: usize,
        k: usize,
        lower: bool,
        transpose_a: bool,
        unit: bool,
    ) {
        let elem = self.t();
        self.steps.push(Step::Trsm(Trsm {
            elem,
            left: false,
            upper: lower,
            trans: transpose_a,
            unit,
            m: k,
            n,
            a,
            lda: n,
            stride_a: n * n,
            b,
            ldb: k,
            stride_b: n * k,
            batch,
        }));
    }

    fn matmul(&mut self, i: usize, a: NodeId, b: NodeId) -> Result<BufId, BackendError> {
        let out_dims = self.g.nodes()[i].ty.shape.dims().to_vec();
        let (batch, m, n) = matrices(&out_dims);
        let ad = self.dims(a);
        let k = ad[ad.len() - 1];
        let t = self.t();
        // An operand whose batch axes are the output's (or absent) is read with its own
        // stride (or 0); one broadcast along only some batch axes is materialized first.
        let operand = |ctx: &mut Self, id: NodeId, rows: usize, cols: usize| {
            let dims = ctx.dims(id);
            let own: usize = dims[..dims.len() - 2].iter().product();
            let buf = ctx.buf_as(id, t)?;
            if own == batch {
                Ok::<_, BackendError>((buf, rows * cols))
            } else if own == 1 {
                Ok((buf, 0))
            } else {
                let mut to = out_dims[..out_dims.len() - 2].to_vec();
                to.extend([rows, cols]);
                let full = ctx.temp(t, to.iter().product());
                ctx.launch(
                    layout::broadcast(&dims, &to, t, t),
                    to.iter().product(),
                    vec![Arg::Buf(buf), Arg::Buf(full)],
                );
                Ok((full, rows * cols))
            }
        };
        let (abuf, sa) = operand(self, a, m, k)?;
        let (bbuf, sb) = operand(self, b, k, n)?;
        let c = self.temp(t, batch * m * n);
        self.gemm(abuf, sa, bbuf, sb, c, (batch, m, k, n));
        Ok(c)
    }

    fn solve(&mut self, a: NodeId, b: NodeId, transpose_a: bool) -> Result<BufId, BackendError> {
        let t = self.t();
        let (batch, n, _) = matrices(&self.dims(a));
        let (_, _, k) = matrices(&self.dims(b));
        let lu = self.copy_of(a)?;
        let ipiv = self.temp(Elem::I32, batch * n);
        let info = self.temp(Elem::I32, batch);
        self.solver(
            batch,
            Solver::Getrf {
                n,
                a: lu,
                ipiv,
                info,
            },
        );
        let bsrc = self.buf_of(b)?;
        let x = self.transposed(bsrc, batch, n, k);
        let info2 = self.temp(Elem::I32, batch);
        self.solver(
            batch,
            Solver::Getrs {
                trans: !transpose_a,
                n,
                nrhs: k,
                a: lu,
                ipiv,
                b: x,
                info: info2,
            },
        );
        let out = self.temp(t, batch * n * k);
        self.launch(
            layout::transpose_matrices(batch, k, n, t, t),
            batch * n * k,
            vec![Arg::Buf(x), Arg::Buf(out)],
        );
        self.steps.push(Step::CheckSingular { info, count: batch });
        Ok(out)
    }

    fn solver(&mut self, batch: usize, call: Solver) {
        let elem = self.t();
        self.steps
            .push(Step::Solver(SolverCall { elem, batch, call }));
    }

    /// Per-matrix flags: whether each `rows x cols` matrix of `src` has a non-finite entry.
    fn nonfinite(
        &mut self,
        src: BufId,
        batch: usize,
        rows: usize,
        cols: usize,
        lower: bool,
    ) -> BufId {
        let flags = self.temp(Elem::I32, batch);
        let elem = self.b.elem(src);
        self.launch(
            kernels::nonfinite_flags(rows, cols, lower, elem),
            batch,
            vec![Arg::Buf(src), Arg::Buf(flags)],
        );
        flags
    }

    fn cholesky(&mut self, a: NodeId) -> Result<BufId, BackendError> {
        let t = self.t();
        let (batch, n, _) = matrices(&self.dims(a));
        let src = self.buf_of(a)?;
        let flags = self.nonfinite(src, batch, n, n, true);
        let work = self.copy_of(a)?;
        let info = self.temp(Elem::I32, batch);
        self.solver(
            batch,
            Solver::Potrf {
                upper: true,
                n,
                a: work,
                info,
            },
        );
        let out = self.temp(t, batch * n * n);
        self.launch(
            kernels::cholesky_finish(n, t, t),
            batch * n * n,
            vec![
                Arg::Buf(work),
                Arg::Buf(info),
                Arg::Buf(flags),
                Arg::Buf(out),
            ],
        );
        Ok(out)
    }

    /// `dL = L Φ(L⁻¹ dA L⁻ᵀ)`, reading only the lower triangle of `l`.
    fn cholesky_ad(&mut self, l: NodeId, da: NodeId) -> Result<BufId, BackendError> {
        let t = self.t();
        let (batch, n, _) = matrices(&self.dims(l));
        let len = batch * n * n;
        let lsrc = self.buf_of(l)?;
        let lower = self.temp(t, len);
        let l_elem = self.b.elem(lsrc);
        self.launch(
            kernels::triangle(n, true, l_elem, t),
            len,
            vec![Arg::Buf(lsrc), Arg::Buf(lower)],
        );
        // X = L⁻¹ dA, then Z = L⁻¹ Xᵀ = (L⁻¹ dA L⁻ᵀ)ᵀ.
        let x = self.copy_of(da)?;
        self.trsm(lower, x, batch, n, n, true, false, false);
        let z = self.transposed(x, batch, n, n);
        self.trsm(lower, z, batch, n, n, true, false, false);
        let phi = self.temp(t, len);
        self.launch(
            kernels::cholesky_ad_phi(n, t),
            len,
            vec![Arg::Buf(z), Arg::Buf(phi)],
        );
        let out = self.temp(t, len);
        self.gemm(lower, n * n, phi, n * n, out, (batch, n, n, n));
        Ok(out)
    }

    /// The outputs of one factorization of `a` (see [`Family::part`] for their order).
    fn factorize(&mut self, a: NodeId, family: Family) -> Result<Vec<BufId>, BackendError> {
        let t = self.t();
        let (batch, m, n) = matrices(&self.dims(a));
        let src = self.buf_of(a)?;
        match family {
            Family::Slogdet => {
                let flags = self.nonfinite(src, batch, n, n, false);
                let lu = self.copy_of(a)?;
                let ipiv = self.temp(Elem::I32, batch * n);
                let info = self.temp(Elem::I32, batch);
                self.solver(
                    batch,
                    Solver::Getrf {
                        n,
                        a: lu,
                        ipiv,
                        info,
                    },
                );
                let sign = self.temp(t, batch);
                let log = self.temp(t, batch);
                self.launch(
                    kernels::slogdet(n, t, t, t),
                    batch,
                    vec![
                        Arg::Buf(lu),
                        Arg::Buf(ipiv),
                        Arg::Buf(flags),
                        Arg::Buf(sign),
                        Arg::Buf(log),
                    ],
                );
                Ok(vec![sign, log])
            }
            Family::Eigh => {
                let flags = self.nonfinite(src, batch, n, n, false);
                let sym = self.temp(t, batch * n * n);
                let x = self.b.elem(src);
                self.launch(
                    kernels::symmetrize(n, x, t),
                    batch * n * n,
                    vec![Arg::Buf(src), Arg::Buf(sym)],
                );
                let w = self.temp(t, batch * n);
                let info = self.temp(Elem::I32, batch);
                self.solver(
                    batch,
                    Solver::Syevd {
                        upper: false,
                        n,
                        a: sym,
                        w,
                        info,
                    },
                );
                let values = self.temp(t, batch * n);
                let vectors = self.temp(t, batch * n * n);
                self.launch(
                    kernels::eigh_finish(n, t, t, t),
                    batch * n,
                    vec![
                        Arg::Buf(sym),
                        Arg::Buf(w),
                        Arg::Buf(info),
                        Arg::Buf(flags),
                        Arg::Buf(values),
                        Arg::Buf(vectors),
                    ],
                );
                Ok(vec![values, vectors])
            }
            Family::Qr { complete } => {
                let k = m.min(n);
                let qcols = if complete { m } else { k };
                let flags = self.nonfinite(src, batch, m, n, false);
                let work = self.transposed(src, batch, m, n);
                let tau = self.temp(t, batch * k);
                let info = self.temp(Elem::I32, batch);
                self.solver(
                    batch,
                    Solver::Geqrf {
                        m,
                        n,
                        a: work,
                        tau,
                        info,
                    },
                );
                let q = self.temp(t, batch * m * qcols);
                self.launch(
                    kernels::qr_reflectors(m, n, k, qcols, t),
                    batch * m * qcols,
                    vec![Arg::Buf(work), Arg::Buf(q)],
                );
                let info2 = self.temp(Elem::I32, batch);
                self.solver(
                    batch,
                    Solver::Orgqr {
                        m,
                        n: qcols,
                        k,
                        a: q,
                        tau,
                        info: info2,
                    },
                );
                let r_out = self.temp(t, batch * k * n);
                let q_out = self.temp(t, batch * m * qcols);
                self.launch(
                    kernels::qr_finish(m, n, qcols, t, t, t),
                    batch * k.max(qcols),
                    vec![
                        Arg::Buf(work),
                        Arg::Buf(q),
                        Arg::Buf(info),
                        Arg::Buf(info2),
                        Arg::Buf(flags),
                        Arg::Buf(r_out),
                        Arg::Buf(q_out),
                    ],
                );
                Ok(vec![r_out, q_out])
            }
            Family::Svd { full } => {
                let k = m.min(n);
                let (ucols, vrows) = if full { (m, n) } else { (k, k) };
                let flags = self.nonfinite(src, batch, m, n, false);
                // The column-major view of `a` is `M = a^T`, `n x m`.
                let work = self.copy_of(a)?;
                let s = self.temp(t, batch * k);
                let um = self.temp(t, batch * n * vrows);
                let vm = self.temp(t, batch * m * ucols);
                let info = self.temp(Elem::I32, batch);
                self.solver(
                    batch,
                    Solver::Gesvdj {
                        econ: !full,
                        m: n,
                        n: m,
                        a: work,
                        s,
                        u: um,
                        v: vm,
                        info,
                    },
                );
                let u_out = self.temp(t, batch * m * ucols);
                let s_out = self.temp(t, batch * k);
                let vh_out = self.temp(t, batch * vrows * n);
                self.launch(
                    kernels::svd_finish(m, n, ucols, vrows, t, t, t, t),
                    batch * (ucols + vrows - k),
                    vec![
                        Arg::Buf(vm),
                        Arg::Buf(s),
                        Arg::Buf(um),
                        Arg::Buf(info),
                        Arg::Buf(flags),
                        Arg::Buf(u_out),
                        Arg::Buf(s_out),
                        Arg::Buf(vh_out),
                    ],
                );
                Ok(vec![u_out, s_out, vh_out])
            }
        }
    }
}
