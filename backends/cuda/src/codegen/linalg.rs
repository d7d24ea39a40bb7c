//! The kernels around the cuBLAS and cuSOLVER calls: preparing their inputs (symmetric parts,
//! copies of reflectors), detecting non-finite matrices, and finishing their outputs into the
//! reference's conventions — row-major layout, exact zeros in the unused triangle, the sign
//! rules of numerics.md §6.3, and all-NaN results for non-finite input or a failed
//! factorization (numerics.md §6.4, as the CPU reference gives them).
//!
//! Matrices are batches of contiguous matrices; "col-major" buffers are what the libraries
//! read and write (element `(r, c)` at `r + c * rows`). Work items are noted per kernel.
//! Flags are `int` buffers with one entry per matrix (nonzero: give NaN).

use super::{convert, kernel, literal};
use crate::program::{Elem, Kernel, Param};

fn nan(elem: Elem) -> String {
    literal(f64::NAN, elem)
}

/// `out[b][i][j]` (row-major `n x n`): the lower (or upper) triangle of `x`, zeros elsewhere;
/// one item per element.
pub fn triangle(n: usize, lower: bool, x: Elem, out: Elem) -> Kernel {
    let keep = if lower { "j <= r" } else { "j >= r" };
    let body = format!(
        "    const long long i = qb_i;\n\
         \x20   const long long r = (i / {n}LL) % {n}LL;\n\
         \x20   const long long j = i % {n}LL;\n\
         \x20   p1[i] = ({keep}) ? {} : {};\n",
        convert("p0[i]", x, out),
        literal(0.0, out)
    );
    kernel(vec![Param::In(x), Param::Out(out)], &body)
}

/// The symmetric part `(a + a^T) / 2` of row-major `n x n` matrices, taking an entry as is
/// where it equals its mirror (so a symmetric matrix is read exactly); one item per element.
pub fn symmetrize(n: usize, x: Elem, out: Elem) -> Kernel {
    let body = format!(
        "    const long long i = qb_i;\n\
         \x20   const long long base = i - i % {nn}LL;\n\
         \x20   const long long r = (i / {n}LL) % {n}LL;\n\
         \x20   const long long c = i % {n}LL;\n\
         \x20   const double x = (double)p0[i];\n\
         \x20   const double y = (double)p0[base + c * {n}LL + r];\n\
         \x20   p1[i] = {};\n",
        convert("(x == y ? x : 0.5 * x + 0.5 * y)", Elem::F64, out),
        nn = n * n
    );
    kernel(vec![Param::In(x), Param::Out(out)], &body)
}

/// Whether each row-major `rows x cols` matrix has a non-finite entry (in its lower triangle
/// only, when `lower_only`); one item per matrix, writing 1 or 0.
pub fn nonfinite_flags(rows: usize, cols: usize, lower_only: bool, x: Elem) -> Kernel {
    let last_col = if lower_only {
        "r + 1"
    } else {
        &format!("{cols}LL")
    };
    let body = format!(
        "    const long long base = qb_i * {size}LL;\n\
         \x20   int bad = 0;\n\
         \x20   for (long long r = 0; r < {rows}LL; ++r)\n\
         \x20     for (long long c = 0; c < {last_col} && c < {cols}LL; ++c) {{\n\
         \x20       const double v = (double)p0[base + r * {cols}LL + c];\n\
         \x20       if (!(v - v == 0.0)) bad = 1;\n\
         \x20     }}\n\
         \x20   p1[qb_i] = bad;\n",
        size = rows * cols
    );
    kernel(vec![Param::In(x), Param::Out(Elem::I32)], &body)
}

/// The lower Cholesky factor from `potrf` on the col-major view of row-major `a` (its upper
/// triangle there is the lower one here): zeros above the diagonal, all NaN where `info` (p1)
/// or the non-finite flag (p2) is set; one item per element. Parameters: work, info, flags,
/// output.
pub fn cholesky_finish(n: usize, work: Elem, out: Elem) -> Kernel {
    let body = format!(
        "    const long long i = qb_i;\n\
         \x20   const long long b = i / {nn}LL;\n\
         \x20   const long long r = (i / {n}LL) % {n}LL;\n\
         \x20   const long long c = i % {n}LL;\n\
         \x20   p3[i] = (p1[b] != 0 || p2[b] != 0) ? {} : (c <= r ? {} : {});\n",
        nan(out),
        convert("p0[i]", work, out),
        literal(0.0, out),
        nn = n * n
    );
    kernel(
        vec![
            Param::In(work),
            Param::In(Elem::I32),
            Param::In(Elem::I32),
            Param::Out(out),
        ],
        &body,
    )
}

/// `(sign, log|det|)` of each matrix from its LU factors (col-major, 1-based pivots): `(0,
/// -inf)` for an exactly zero pivot, `(NaN, NaN)` for a non-finite matrix (flag p2); one item
/// per matrix. Parameters: factors, pivots, flags, sign, log.
pub fn slogdet(n: usize, lu: Elem, sign: Elem, log: Elem) -> Kernel {
    let body = format!(
        "    const long long b = qb_i;\n\
         \x20   double s = 1.0, l = 0.0;\n\
         \x20   int zero = 0;\n\
         \x20   for (long long i = 0; i < {n}LL; ++i) {{\n\
         \x20     if (p1[b * {n}LL + i] != (int)(i + 1)) s = -s;\n\
         \x20     const double u = (double)p0[b * {nn}LL + i * {n1}LL];\n\
         \x20     if (u == 0.0) zero = 1;\n\
         \x20     if (u < 0.0) s = -s;\n\
         \x20     l += log(fabs(u));\n\
         \x20   }}\n\
         \x20   if (p2[b] != 0) {{ s = {nan}; l = {nan}; }}\n\
         \x20   else if (zero) {{ s = 0.0; l = {ninf}; }}\n\
         \x20   p3[b] = {};\n\
         \x20   p4[b] = {};\n",
        convert("s", Elem::F64, sign),
        convert("l", Elem::F64, log),
        nn = n * n,
        n1 = n + 1,
        nan = nan(Elem::F64),
        ninf = literal(f64::NEG_INFINITY, Elem::F64),
    );
    kernel(
        vec![
            Param::In(lu),
            Param::In(Elem::I32),
            Param::In(Elem::I32),
            Param::Out(sign),
            Param::Out(log),
        ],
        &body,
    )
}

/// The C of the sign rule over `count` components `get(t)`: `s` is -1 when the first
/// largest-magnitude component is negative, else 1 (NaN is never the largest).
fn sign_rule(count: &str, get: &str) -> String {
    format!(
        "      double best = 0.0, best_abs = 0.0;\n\
         \x20     for (long long t = 0; t < {count}; ++t) {{\n\
         \x20       const double x = (double)({get});\n\
         \x20       if (fabs(x) > best_abs) {{ best_abs = fabs(x); best = x; }}\n\
         \x20     }}\n\
         \x20     const int flip = best < 0.0;\n"
    )
}

/// `eigh`'s outputs from `syevd` (eigenvectors as the columns of col-major `vec`, ascending
/// values `w`): row-major eigenvectors with the sign rule, and the values; all NaN where the
/// info (p2) or non-finite flag (p3) is set. One item per (matrix, column `j`). Parameters:
/// vectors, values, info, flags, values out, vectors out.
pub fn eigh_finish(n: usize, t: Elem, values: Elem, vectors: Elem) -> Kernel {
    let body = format!(
        "    const long long b = qb_i / {n}LL;\n\
         \x20   const long long j = qb_i % {n}LL;\n\
         \x20   const int bad = p2[b] != 0 || p3[b] != 0;\n\
         \x20   const long long base = b * {nn}LL;\n\
         \x20   {{\n{rule}\
         \x20     for (long long t = 0; t < {n}LL; ++t) {{\n\
         \x20       const {tc} x = p0[base + j * {n}LL + t];\n\
         \x20       p5[base + t * {n}LL + j] = bad ? {nanv} : (flip ? {neg} : {pos});\n\
         \x20     }}\n\
         \x20   }}\n\
         \x20   p4[b * {n}LL + j] = bad ? {nanw} : {w};\n",
        rule = sign_rule(&format!("{n}LL"), &format!("p0[base + j * {n}LL + t]")),
        tc = t.c_name(),
        nanv = nan(vectors),
        neg = convert("(-x)", t, vectors),
        pos = convert("x", t, vectors),
        nanw = nan(values),
        w = convert(&format!("p1[b * {n}LL + j]"), t, values),
        nn = n * n,
    );
    kernel(
        vec![
            Param::In(t),
            Param::In(t),
            Param::In(Elem::I32),
            Param::In(Elem::I32),
            Param::Out(values),
            Param::Out(vectors),
        ],
        &body,
    )
}

/// The SVD's outputs for row-major `m x n` `a` = `V_M diag(s) U_M^T`, the SVD of its col-major
/// view `M = a^T` by `gesvdj`: `U = V_M` (col-major `m x ucols`: its columns are contiguous)
/// and `Vh = U_M^T`, whose row-major layout is `U_M`'s col-major one (`vrows x n`). Writes
/// row-major `U` (`m x ucols`), `s` (`c` values) and `Vh` (`vrows x n`) with the sign rule:
/// column `j < c` of `U` decides, row `j` of `Vh` follows; extra columns and rows (full
/// matrices) each decide for themselves. All NaN where the info (p3) or non-finite flag (p4)
/// is set. One item per (matrix, `t`), `t < ucols + vrows - c`: `t < ucols` is column `t` of
/// `U` (and row `t` of `Vh` and `s[t]` when `t < c`), the rest are the extra rows of `Vh`.
/// Parameters: v_m, s, u_m, info, flags, u out, s out, vh out.
#[allow(clippy::too_many_arguments)]
pub fn svd_finish(
    m: usize,
    n: usize,
    ucols: usize,
    vrows: usize,
    t: Elem,
    u_out: Elem,
    s_out: Elem,
    vh_out: Elem,
) -> Kernel {
    let c = m.min(n);
    let items = ucols + vrows - c;
    let body = format!(
        "    const long long b = qb_i / {items}LL;\n\
         \x20   const long long q = qb_i % {items}LL;\n\
         \x20   const int bad = p3[b] != 0 || p4[b] != 0;\n\
         \x20   const long long ub = b * {usize}LL, vb = b * {vsize}LL;\n\
         \x20   if (q < {ucols}LL) {{\n\
         \x20     const long long j = q;\n{urule}\
         \x20     for (long long t = 0; t < {m}LL; ++t) {{\n\
         \x20       const {tc} x = p0[ub + j * {m}LL + t];\n\
         \x20       p5[ub + t * {ucols}LL + j] = bad ? {nan_u} : (flip ? {neg_u} : {pos_u});\n\
         \x20     }}\n\
         \x20     if (j < {c}LL) {{\n\
         \x20       for (long long t = 0; t < {n}LL; ++t) {{\n\
         \x20         const {tc} x = p2[vb + j * {n}LL + t];\n\
         \x20         p7[vb + j * {n}LL + t] = bad ? {nan_v} : (flip ? {neg_v} : {pos_v});\n\
         \x20       }}\n\
         \x20       p6[b * {c}LL + j] = bad ? {nan_s} : {sv};\n\
         \x20     }}\n\
         \x20   }} else {{\n\
         \x20     const long long j = q - {ucols}LL + {c}LL;\n{vrule}\
         \x20     for (long long t = 0; t < {n}LL; ++t) {{\n\
         \x20       const {tc} x = p2[vb + j * {n}LL + t];\n\
         \x20       p7[vb + j * {n}LL + t] = bad ? {nan_v} : (flip ? {neg_v} : {pos_v});\n\
         \x20     }}\n\
         \x20   }}\n",
        usize = m * ucols,
        vsize = vrows * n,
        urule = sign_rule(&format!("{m}LL"), &format!("p0[ub + j * {m}LL + t]")),
        vrule = sign_rule(&format!("{n}LL"), &format!("p2[vb + j * {n}LL + t]")),
        tc = t.c_name(),
        nan_u = nan(u_out),
        neg_u = convert("(-x)", t, u_out),
        pos_u = convert("x", t, u_out),
        nan_v = nan(vh_out),
        neg_v = convert("(-x)", t, vh_out),
        pos_v = convert("x", t, vh_out),
        nan_s = nan(s_out),
        sv = convert(&format!("p1[b * {c}LL + j]"), t, s_out),
    );
    kernel(
        vec![
            Param::In(t),
            Param::In(t),
            Param::In(t),
            Param::In(Elem::I32),
            Param::In(Elem::I32),
            Param::Out(u_out),
            Param::Out(s_out),
            Param::Out(vh_out),
        ],
        &body,
    )
}

/// The input of `orgqr`: the first `min(k, qcols)` columns of `geqrf`'s col-major `m x n`
/// output, zero columns after them, as a col-major `m x qcols` matrix; one item per element.
pub fn qr_reflectors(m: usize, n: usize, k: usize, qcols: usize, t: Elem) -> Kernel {
    let body = format!(
        "    const long long b = qb_i / {qsize}LL;\n\
         \x20   const long long e = qb_i % {qsize}LL;\n\
         \x20   const long long j = e / {m}LL;\n\
         \x20   p1[qb_i] = j < {k}LL ? p0[b * {asize}LL + e] : {};\n",
        literal(0.0, t),
        qsize = m * qcols,
        asize = m * n,
    );
    kernel(vec![Param::In(t), Param::Out(t)], &body)
}

/// QR's outputs: row-major `R` (`k x n`, the upper triangle of `geqrf`'s col-major `m x n`
/// output) and `Q` (`m x qcols`, from `orgqr`'s col-major output), with row `i < k` of `R` and
/// column `i` of `Q` negated where `R[i][i] < 0`; all NaN where the info (p2, p3: geqrf's and
/// orgqr's) or non-finite flag (p4) is set. One item per (matrix, `i`), `i < max(k, qcols)`.
/// Parameters: factors, q, geqrf info, orgqr info, flags, r out, q out.
pub fn qr_finish(m: usize, n: usize, qcols: usize, t: Elem, r_out: Elem, q_out: Elem) -> Kernel {
    let k = m.min(n);
    let items = k.max(qcols);
    let body = format!(
        "    const long long b = qb_i / {items}LL;\n\
         \x20   const long long i = qb_i % {items}LL;\n\
         \x20   const int bad = p2[b] != 0 || p3[b] != 0 || p4[b] != 0;\n\
         \x20   const long long ab = b * {asize}LL;\n\
         \x20   const int flip = i < {k}LL && (double)p0[ab + i * {m1}LL] < 0.0;\n\
         \x20   if (i < {k}LL) {{\n\
         \x20     for (long long j = 0; j < {n}LL; ++j) {{\n\
         \x20       const {tc} x = j >= i ? p0[ab + i + j * {m}LL] : {zero};\n\
         \x20       p5[b * {rsize}LL + i * {n}LL + j] = bad ? {nan_r} : (flip ? {neg_r} : {pos_r});\n\
         \x20     }}\n\
         \x20   }}\n\
         \x20   if (i < {qcols}LL) {{\n\
         \x20     for (long long r = 0; r < {m}LL; ++r) {{\n\
         \x20       const {tc} x = p1[b * {qsize}LL + r + i * {m}LL];\n\
         \x20       p6[b * {qsize}LL + r * {qcols}LL + i] = bad ? {nan_q} : (flip ? {neg_q} : {pos_q});\n\
         \x20     }}\n\
         \x20   }}\n",
        asize = m * n,
        rsize = k * n,
        qsize = m * qcols,
        m1 = m + 1,
        tc = t.c_name(),
        zero = literal(0.0, t),
        nan_r = nan(r_out),
        neg_r = convert("(-x)", t, r_out),
        pos_r = convert("x", t, r_out),
        nan_q = nan(q_out),
        neg_q = convert("(-x)", t, q_out),
        pos_q = convert("x", t, q_out),
    );
    kernel(
        vec![
            Param::In(t),
            Param::In(t),
            Param::In(Elem::I32),
            Param::In(Elem::I32),
            Param::In(Elem::I32),
            Param::Out(r_out),
            Param::Out(q_out),
        ],
        &body,
    )
}

/// `cholesky_ad`'s `Φ(Zᵀ)`: `Z[j][i]` below the diagonal, `Z[i][i] / 2` on it, zeros above
/// (row-major `n x n`); one item per element.
pub fn cholesky_ad_phi(n: usize, t: Elem) -> Kernel {
    let body = format!(
        "    const long long i = qb_i;\n\
         \x20   const long long base = i - i % {nn}LL;\n\
         \x20   const long long r = (i / {n}LL) % {n}LL;\n\
         \x20   const long long c = i % {n}LL;\n\
         \x20   p1[i] = r > c ? p0[base + c * {n}LL + r] : (r == c ? p0[i] / {two} : {zero});\n",
        two = literal(2.0, t),
        zero = literal(0.0, t),
        nn = n * n
    );
    kernel(vec![Param::In(t), Param::Out(t)], &body)
}
