//! Layout kernels: one work item per output element, reading the element it copies from
//! (`transpose`, materialized `broadcast`, `slice`, `pad_slice`, `concat`, `gather`), plus
//! `scatter_add`, copies and fills, and the indexed ops whose indices are a tensor
//! (`index_gather`, `index_scatter`). Values are copied exactly (a `-0.0` and NaN payloads
//! survive, numerics.md §1.2), converting between stored types where the operand's and the
//! output's differ; integers keep their own type (the lowering never asks to convert one to
//! a float here).

use super::{broadcast_index, convert, coord, kernel, literal, strides, weighted_index};
use crate::program::{Elem, Kernel, Param};
use quabla_ir::indexed::IndexLayout;

/// `out = x` read through `index` (a C expression of the output position `i`); parameters:
/// the operand, the output.
fn gather_kernel(index: &str, x: Elem, out: Elem) -> Kernel {
    let body = format!(
        "    const long long i = qb_i;\n    p1[i] = {};\n",
        convert(&format!("p0[{index}]"), x, out)
    );
    kernel(vec![Param::In(x), Param::Out(out)], &body)
}

/// `transpose`: output axis `d` is operand axis `perm[d]`.
pub fn transpose(dims: &[usize], perm: &[usize], x: Elem, out: Elem) -> Kernel {
    let own = strides(dims);
    let out_dims: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
    let weights: Vec<usize> = perm.iter().map(|&p| own[p]).collect();
    gather_kernel(&weighted_index("i", &out_dims, &weights), x, out)
}

/// A batch of `rows x cols` matrices transposed (`[..., r, c]` to `[..., c, r]`).
pub fn transpose_matrices(batch: usize, rows: usize, cols: usize, x: Elem, out: Elem) -> Kernel {
    transpose(&[batch, rows, cols], &[0, 2, 1], x, out)
}

/// `broadcast` of an operand of `from` to `to`, materialized.
pub fn broadcast(from: &[usize], to: &[usize], x: Elem, out: Elem) -> Kernel {
    gather_kernel(&broadcast_index("i", from, to), x, out)
}

/// `slice`: the box at `starts` with the output's extents `sizes`.
pub fn slice(dims: &[usize], starts: &[usize], sizes: &[usize], x: Elem, out: Elem) -> Kernel {
    let own = strides(dims);
    let offset: usize = starts.iter().zip(&own).map(|(s, st)| s * st).sum();
    let index = weighted_index("i", sizes, &own);
    gather_kernel(&format!("{offset}LL + {index}"), x, out)
}

/// `pad_slice`: the operand (`dims`) placed at `starts` in zeros of `shape`.
pub fn pad_slice(dims: &[usize], starts: &[usize], shape: &[usize], x: Elem, out: Elem) -> Kernel {
    let own = strides(dims);
    let mut inside = Vec::new();
    let mut terms = Vec::new();
    for d in 0..shape.len() {
        let c = coord("i", shape, d);
        let (lo, hi) = (starts[d], starts[d] + dims[d]);
        if lo > 0 {
            inside.push(format!("{c} >= {lo}LL"));
        }
        if hi < shape[d] {
            inside.push(format!("{c} < {hi}LL"));
        }
        if dims[d] != 1 {
            terms.push(format!("({c} - {lo}LL) * {}LL", own[d]));
        }
    }
    let index = if terms.is_empty() {
        "0LL".to_string()
    } else {
        terms.join(" + ")
    };
    let value = convert(&format!("p0[{index}]"), x, out);
    let body = if inside.is_empty() {
        format!("    const long long i = qb_i;\n    p1[i] = {value};\n")
    } else {
        format!(
            "    const long long i = qb_i;\n    p1[i] = ({}) ? {value} : {};\n",
            inside.join(" && "),
            literal(0.0, out)
        )
    };
    kernel(vec![Param::In(x), Param::Out(out)], &body)
}

/// `concat` along `axis` of operands of `parts` dims (stored as `elems`) into `out_dims`;
/// parameters: the operands in order, then the output.
pub fn concat(
    parts: &[Vec<usize>],
    elems: &[Elem],
    axis: usize,
    out_dims: &[usize],
    out: Elem,
) -> Kernel {
    let c = coord("i", out_dims, axis);
    let mut body = format!("    const long long i = qb_i;\n    const long long c = {c};\n");
    let mut start = 0;
    for (k, dims) in parts.iter().enumerate() {
        let own = strides(dims);
        // The operand's index: every other coordinate as is, the axis shifted by `start`.
        let mut terms = Vec::new();
        for d in 0..out_dims.len() {
            if dims[d] == 1 {
                continue;
            }
            let cd = if d == axis {
                format!("(c - {start}LL)")
            } else {
                coord("i", out_dims, d)
            };
            terms.push(format!("{cd} * {}LL", own[d]));
        }
        let index = if terms.is_empty() {
            "0LL".to_string()
        } else {
            terms.join(" + ")
        };
        let value = convert(&format!("p{k}[{index}]"), elems[k], out);
        let end = start + dims[axis];
        let last = k + 1 == parts.len();
        if last {
            body.push_str(&format!("    {{ p{}[i] = {value}; }}\n", parts.len()));
        } else {
            body.push_str(&format!(
                "    if (c < {end}LL) {{ p{}[i] = {value}; }} else\n",
                parts.len()
            ));
        }
        start = end;
    }
    let mut params: Vec<Param> = elems.iter().map(|&e| Param::In(e)).collect();
    params.push(Param::Out(out));
    kernel(params, &body)
}

/// `gather` along `axis` with a static index table (an `int` buffer, parameter 1): output
/// position `j` on that axis reads position `table[j]`; parameters: the operand, the table,
/// the output.
pub fn gather(dims: &[usize], axis: usize, out_dims: &[usize], x: Elem, out: Elem) -> Kernel {
    let own = strides(dims);
    let mut terms = Vec::new();
    for d in 0..out_dims.len() {
        if d == axis {
            terms.push(format!(
                "(long long)p1[{}] * {}LL",
                coord("i", out_dims, d),
                own[d]
            ));
        } else if dims[d] != 1 {
            terms.push(format!("{} * {}LL", coord("i", out_dims, d), own[d]));
        }
    }
    let body = format!(
        "    const long long i = qb_i;\n    p2[i] = {};\n",
        convert(&format!("p0[{}]", terms.join(" + ")), x, out)
    );
    kernel(
        vec![Param::In(x), Param::In(Elem::I32), Param::Out(out)],
        &body,
    )
}

/// `scatter_add(base, updates)` along `axis`: each output element is its base value plus, in
/// increasing update order, every update slice scattered onto it, accumulated in float64 and
/// rounded once (the reference's order), or wrapping in the integer type of an integer
/// output. The update positions onto each index of the axis
/// are a static table in compressed form: `offsets` (parameter 2, `dims[axis] + 1` entries)
/// into `sources` (parameter 3). Parameters: base, updates, offsets, sources, output.
pub fn scatter_add(
    dims: &[usize],
    axis: usize,
    update_dims: &[usize],
    base: Elem,
    updates: Elem,
    out: Elem,
) -> Kernel {
    let ust = strides(update_dims);
    let c = coord("i", dims, axis);
    let mut others = Vec::new();
    for d in 0..dims.len() {
        if d != axis && update_dims[d] != 1 {
            others.push(format!("{} * {}LL", coord("i", dims, d), ust[d]));
        }
    }
    let rest = if others.is_empty() {
        "0LL".to_string()
    } else {
        others.join(" + ")
    };
    let acc = super::reduce::accumulator(out);
    let update = format!("p1[rest + (long long)p3[s] * {}LL]", ust[axis]);
    let add = if acc.is_int() {
        format!("acc = qb_add_{}(acc, {update});", acc.tag())
    } else {
        format!("acc += (double){update};")
    };
    let body = format!(
        "    const long long i = qb_i;\n\
         \x20   const long long c = {c};\n\
         \x20   const long long rest = {rest};\n\
         \x20   {ty} acc = {};\n\
         \x20   for (int s = p2[c]; s < p2[c + 1]; ++s) {add}\n\
         \x20   p4[i] = {};\n",
        convert("p0[i]", base, acc),
        convert("acc", acc, out),
        ty = acc.c_name(),
    );
    kernel(
        vec![
            Param::In(base),
            Param::In(updates),
            Param::In(Elem::I32),
            Param::In(Elem::I32),
            Param::Out(out),
        ],
        &body,
    )
}

/// `dst[p2 + i] = src[i]` for `n` items, converting; parameters: the source, the destination,
/// the destination offset (elements).
pub fn copy_to_offset(src: Elem, dst: Elem) -> Kernel {
    let body = format!("    p1[p2 + qb_i] = {};\n", convert("p0[qb_i]", src, dst));
    kernel(vec![Param::In(src), Param::Out(dst), Param::Int], &body)
}

/// `dst[i] = src[i]`, converting.
pub fn copy(src: Elem, dst: Elem) -> Kernel {
    gather_kernel("i", src, dst)
}

/// `dst[i] = v` for the integer value `v` of parameter 1 (wrapped to an `int` `dst`).
pub fn fill_int(dst: Elem) -> Kernel {
    let body = format!("    p0[qb_i] = {};\n", convert("p1", Elem::I64, dst));
    kernel(vec![Param::Out(dst), Param::Int], &body)
}

/// `dst[i] = v` for the float64 value whose bits are parameter 1, converted to `dst` (a
/// floating type).
pub fn fill(dst: Elem) -> Kernel {
    let body = format!(
        "    p0[qb_i] = {};\n",
        convert("qb_f64((unsigned long long)p1)", Elem::F64, dst)
    );
    kernel(vec![Param::Out(dst), Param::Int], &body)
}

/// `index_gather(x, idx)` over the extents `l` (data `[B.., P.., n, Q..]` and indices
/// `[B.., J..]`, each group flattened): one work item per element of the result
/// `[B.., P.., J.., Q..]`,
/// reading `x[b, p, idx[b, j], q]`, or zero where the index is outside `[0, n)` (the node's
/// semantics: the facade clamps or wraps before it). Parameters: the data, the indices (`int`
/// or `long long`), the result.
pub fn index_gather(l: &IndexLayout, x: Elem, idx: Elem, out: Elem) -> Kernel {
    let IndexLayout {
        pre,
        n,
        picks,
        inner,
        ..
    } = *l;
    let body = format!(
        "    const long long i = qb_i;\n\
         \x20   const long long q = i % {inner}LL;\n\
         \x20   const long long j = (i / {inner}LL) % {picks}LL;\n\
         \x20   const long long p = (i / {run}LL) % {pre}LL;\n\
         \x20   const long long b = i / {block}LL;\n\
         \x20   const long long k = (long long)p1[b * {picks}LL + j];\n\
         \x20   p2[i] = (k >= 0 && k < {n}LL) ? {} : {};\n",
        convert(
            &format!("p0[((b * {pre}LL + p) * {n}LL + k) * {inner}LL + q]"),
            x,
            out
        ),
        literal(0.0, out),
        run = inner * picks,
        block = inner * picks * pre,
    );
    kernel(vec![Param::In(x), Param::In(idx), Param::Out(out)], &body)
}

/// The first pass of `index_scatter`: for each batch row `b` (one work item each, `outer`
/// items), the updates landing on each index of the axis, in increasing order, as a compressed
/// table: `offsets[b * (n + 1) + k] .. offsets[b * (n + 1) + k + 1]` are the positions in
/// `sources[b * picks ..]` of the picks `j` whose index is `k`; out-of-range indices are left
/// out. A counting sort: count, prefix sums, place each pick at its index's cursor, then shift
/// the cursors back into starts. Parameters: the indices, the offsets (`long long`, written),
/// the sources (`long long`, written).
pub fn index_scatter_table(l: &IndexLayout, idx: Elem) -> Kernel {
    let IndexLayout { n, picks, .. } = *l;
    let body = format!(
        "    const long long b = qb_i;\n\
         \x20   const {ix}* __restrict__ at = p0 + b * {picks}LL;\n\
         \x20   long long* __restrict__ off = p1 + b * {row}LL;\n\
         \x20   long long* __restrict__ src = p2 + b * {picks}LL;\n\
         \x20   for (long long k = 0; k <= {n}LL; ++k) off[k] = 0;\n\
         \x20   for (long long j = 0; j < {picks}LL; ++j) {{\n\
         \x20     const long long k = (long long)at[j];\n\
         \x20     if (k >= 0 && k < {n}LL) off[k + 1] += 1;\n\
         \x20   }}\n\
         \x20   for (long long k = 0; k < {n}LL; ++k) off[k + 1] += off[k];\n\
         \x20   for (long long j = 0; j < {picks}LL; ++j) {{\n\
         \x20     const long long k = (long long)at[j];\n\
         \x20     if (k >= 0 && k < {n}LL) {{ src[off[k]] = j; off[k] += 1; }}\n\
         \x20   }}\n\
         \x20   for (long long k = {n}LL; k > 0; --k) off[k] = off[k - 1];\n\
         \x20   off[0] = 0;\n",
        ix = idx.c_name(),
        row = n + 1,
    );
    kernel(
        vec![Param::In(idx), Param::Out(Elem::I64), Param::Out(Elem::I64)],
        &body,
    )
}

/// The second pass of `index_scatter(base, idx, updates)` in `mode`: one work item per element
/// of the result (the base's shape), which combines into its base value, in increasing order,
/// every update landing on it (the table of [`index_scatter_table`]): in float64 rounded once
/// for floats (`quabla_ir::indexed::combine_f64`), wrapping in the integer type for integers,
/// the last update for `set`. Parameters: the base, the updates, the offsets, the sources, the
/// result.
pub fn index_scatter(
    l: &IndexLayout,
    mode: quabla_ir::ScatterMode,
    base: Elem,
    updates: Elem,
    out: Elem,
) -> Kernel {
    use quabla_ir::ScatterMode;
    let IndexLayout {
        pre,
        n,
        picks,
        inner,
        ..
    } = *l;
    let acc = super::reduce::accumulator(out);
    let u = convert(
        &format!("p1[((b * {pre}LL + p) * {picks}LL + p3[b * {picks}LL + s]) * {inner}LL + q]"),
        updates,
        acc,
    );
    let step = match (mode, acc.is_int()) {
        (ScatterMode::Set, _) => u,
        (ScatterMode::Add, false) => format!("acc + {u}"),
        (ScatterMode::Mul, false) => format!("acc * {u}"),
        (ScatterMode::Min, false) => format!("qb_min(acc, {u})"),
        (ScatterMode::Max, false) => format!("qb_max(acc, {u})"),
        (ScatterMode::Add, true) => format!("qb_add_{}(acc, {u})", acc.tag()),
        (ScatterMode::Mul, true) => format!("qb_mul_{}(acc, {u})", acc.tag()),
        (ScatterMode::Min, true) => format!("qb_min_{}(acc, {u})", acc.tag()),
        (ScatterMode::Max, true) => format!("qb_max_{}(acc, {u})", acc.tag()),
    };
    let body = format!(
        "    const long long i = qb_i;\n\
         \x20   const long long q = i % {inner}LL;\n\
         \x20   const long long k = (i / {inner}LL) % {n}LL;\n\
         \x20   const long long p = (i / {run}LL) % {pre}LL;\n\
         \x20   const long long b = i / {block}LL;\n\
         \x20   const long long* __restrict__ off = p2 + b * {row}LL + k;\n\
         \x20   {ty} acc = {};\n\
         \x20   for (long long s = off[0]; s < off[1]; ++s) acc = {step};\n\
         \x20   p4[i] = {};\n",
        convert("p0[i]", base, acc),
        convert("acc", acc, out),
        ty = acc.c_name(),
        run = inner * n,
        block = inner * n * pre,
        row = n + 1,
    );
    kernel(
        vec![
            Param::In(base),
            Param::In(updates),
            Param::In(Elem::I64),
            Param::In(Elem::I64),
            Param::Out(out),
        ],
        &body,
    )
}
