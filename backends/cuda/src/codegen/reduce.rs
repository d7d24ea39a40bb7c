//! Reduction kernels: `sum`/`mean` in the blocked order of numerics.md §1.5, `max`/`min`, and
//! `cumsum`.
//!
//! Sums accumulate in float64 whatever the program's type, in exactly the reference's order:
//! the reduced elements of each output, in row-major order, cut into blocks of 1024; inside a
//! block element `k` goes to accumulator `k mod 8` (each starting at `+0.0` and adding in
//! order), the eight combined as `((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))`; the block
//! sums combined by the pairwise tree of §4.4. So a float32 or float64 sum is the reference's
//! bits whenever the inputs are. (numerics.md §1.6 would allow float32 accumulation; the
//! blocked order costs little on a device, and bit-identical sums make device results easy
//! to trust.) Two ways to run it, with the same bits:
//!
//! - **row**: one work item per output walks its elements; past one block it keeps the block
//!   sums on a small stack, merging equal-sized neighbours as they appear (a binary counter),
//!   which is the pairwise tree: the tree over `n` values padded with `+0.0` to a power of two
//!   has exactly these partial sums, and adding `+0.0` changes no sum that started at `+0.0`.
//! - **split** (few outputs, long rows): work item `(o, b, j)` adds accumulator `j` of block
//!   `b` (128 elements, strided by 8, so neighbouring items read neighbouring elements); the
//!   `8 * blocks` accumulators of each output then go through passes of the same tree, 32
//!   values per item and pass, padded with `+0.0`. The first three levels of that tree are the
//!   eight-accumulator combination, the rest is the tree over the blocks.
//!
//! `max`/`min` are exact in any order (IEEE 754-2019 maximum/minimum in float64, converted
//! once): per output, or per block of 1024 and then passes of a tree padded with `-inf`/`+inf`.
//! `cumsum` walks each line sequentially in float64 from `-0.0` and rounds each output once.
//!
//! Integer reductions accumulate in the operand's own integer type (numerics.md §12: `sum`
//! and `cumsum` wrap; `max`/`min` are exact), where the order changes nothing, so their split
//! form takes one partial per block and the same passes of the tree over integers.

use super::{coord, int_literal, kernel, literal, strides};
use crate::program::{Elem, Kernel, Param};
use quabla_ir::Reducer;

/// Elements per block of the blocked order.
pub const BLOCK: usize = quabla_ir::eval::SUM_BLOCK;

/// Values each work item of a tree pass combines.
pub const TREE_CHUNK: usize = 32;

/// The shape of a reduction: the operand's dims and the reduced axes (sorted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reduction {
    pub dims: Vec<usize>,
    pub axes: Vec<usize>,
}

impl Reduction {
    /// Outputs (kept positions).
    pub fn outputs(&self) -> usize {
        (0..self.dims.len())
            .filter(|a| !self.axes.contains(a))
            .map(|a| self.dims[a])
            .product()
    }

    /// Elements reduced into each output.
    pub fn count(&self) -> usize {
        self.axes.iter().map(|&a| self.dims[a]).product()
    }

    /// Blocks of [`BLOCK`] elements per output.
    pub fn blocks(&self) -> usize {
        self.count().div_ceil(BLOCK)
    }

    /// The C expression of the operand index of reduced element `r` of output `o`.
    fn address(&self, o: &str, r: &str) -> String {
        let st = strides(&self.dims);
        let kept: Vec<usize> = (0..self.dims.len())
            .filter(|a| !self.axes.contains(a))
            .collect();
        let kept_dims: Vec<usize> = kept.iter().map(|&a| self.dims[a]).collect();
        let red_dims: Vec<usize> = self.axes.iter().map(|&a| self.dims[a]).collect();
        let mut terms = Vec::new();
        for (i, &a) in kept.iter().enumerate() {
            if kept_dims[i] != 1 {
                terms.push(format!("{} * {}LL", coord(o, &kept_dims, i), st[a]));
            }
        }
        for (i, &a) in self.axes.iter().enumerate() {
            if red_dims[i] != 1 {
                terms.push(format!("{} * {}LL", coord(r, &red_dims, i), st[a]));
            }
        }
        if terms.is_empty() {
            "0LL".into()
        } else {
            terms.join(" + ")
        }
    }

    /// Whether the split form runs this reduction (few outputs, rows longer than a block).
    pub fn splits(&self) -> bool {
        self.count() > BLOCK && self.outputs() < 2048
    }
}

/// The type a reduction of an operand stored as `x` accumulates in: float64 for floats, the
/// integer type itself for integers.
pub fn accumulator(x: Elem) -> Elem {
    if x.is_int() {
        x
    } else {
        Elem::F64
    }
}

/// The C of combining `a` and `b` in accumulator type `acc`.
fn combine(reducer: Reducer, acc: Elem, a: &str, b: &str) -> String {
    let s = acc.tag();
    match (reducer, acc.is_int()) {
        (Reducer::Sum | Reducer::Mean, false) => format!("({a} + {b})"),
        (Reducer::Max, false) => format!("qb_max({a}, {b})"),
        (Reducer::Min, false) => format!("qb_min({a}, {b})"),
        (Reducer::Sum | Reducer::Mean, true) => format!("qb_add_{s}({a}, {b})"),
        (Reducer::Max, true) => format!("qb_max_{s}({a}, {b})"),
        (Reducer::Min, true) => format!("qb_min_{s}({a}, {b})"),
    }
}

/// The identity a tree pads with, in accumulator type `acc`.
fn identity(reducer: Reducer, acc: Elem) -> String {
    match (reducer, acc.is_int()) {
        (Reducer::Sum | Reducer::Mean, _) => literal(0.0, acc),
        (Reducer::Max, false) => literal(f64::NEG_INFINITY, acc),
        (Reducer::Min, false) => literal(f64::INFINITY, acc),
        (Reducer::Max, true) => int_literal(
            if acc == Elem::I32 {
                i32::MIN.into()
            } else {
                i64::MIN
            },
            acc,
        ),
        (Reducer::Min, true) => int_literal(
            if acc == Elem::I32 {
                i32::MAX.into()
            } else {
                i64::MAX
            },
            acc,
        ),
    }
}

/// The final value written for an accumulated `acc` of type `acc_elem`: a mean divides by
/// the count.
fn finish(reducer: Reducer, acc: &str, acc_elem: Elem, count: usize, out: Elem) -> String {
    let v = match reducer {
        Reducer::Mean => format!("({acc} / {})", literal(count as f64, Elem::F64)),
        _ => acc.to_string(),
    };
    super::convert(&v, acc_elem, out)
}

/// The sum of one block's eight accumulators `acc[0..8]`.
const COMBINE_LANES: &str =
    "((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))";

/// The row form: one work item per output (`outputs()` items); parameters: the operand, the
/// output.
pub fn row_kernel(red: &Reduction, reducer: Reducer, x: Elem, out: Elem) -> Kernel {
    let count = red.count();
    let addr = red.address("o", "r");
    let acc = accumulator(x);
    let mut body = String::from("    const long long o = qb_i;\n");
    match reducer {
        _ if acc.is_int() => {
            body.push_str(&format!(
                "    {ty} total = {};\n    for (long long r = 0; r < {count}LL; ++r) total = {};\n",
                identity(reducer, acc),
                combine(reducer, acc, "total", &format!("p0[{addr}]")),
                ty = acc.c_name(),
            ));
        }
        Reducer::Sum | Reducer::Mean => {
            body.push_str(&format!(
                "    double stack[64];\n    int level[64];\n    int top = 0;\n\
                 \x20   for (long long b = 0; b < {blocks}LL; ++b) {{\n\
                 \x20     double acc[8] = {{0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}};\n\
                 \x20     const long long end = (b + 1) * {BLOCK}LL < {count}LL ? (b + 1) * {BLOCK}LL : {count}LL;\n\
                 \x20     for (long long r = b * {BLOCK}LL; r < end; ++r) acc[r & 7] += (double)p0[{addr}];\n\
                 \x20     double s = {COMBINE_LANES};\n\
                 \x20     int l = 0;\n\
                 \x20     while (top > 0 && level[top - 1] == l) {{ s = stack[top - 1] + s; --top; ++l; }}\n\
                 \x20     stack[top] = s; level[top] = l; ++top;\n\
                 \x20   }}\n\
                 \x20   double total = stack[top - 1];\n\
                 \x20   for (int k = top - 2; k >= 0; --k) total = stack[k] + total;\n",
                blocks = red.blocks(),
            ));
        }
        Reducer::Max | Reducer::Min => {
            body.push_str(&format!(
                "    double total = {};\n    for (long long r = 0; r < {count}LL; ++r) total = {};\n",
                identity(reducer, acc),
                combine(reducer, acc, "total", &format!("(double)p0[{addr}]"))
            ));
        }
    }
    body.push_str(&format!(
        "    p1[o] = {};\n",
        finish(reducer, "total", acc, count, out)
    ));
    kernel(vec![Param::In(x), Param::Out(out)], &body)
}

/// Partial values per output of the split form's first pass over an operand stored as `x`.
pub fn partials(red: &Reduction, reducer: Reducer, x: Elem) -> usize {
    match reducer {
        Reducer::Sum | Reducer::Mean if !x.is_int() => 8 * red.blocks(),
        _ => red.blocks(),
    }
}

/// The split form's first pass: `outputs() * partials()` work items, writing partials of the
/// accumulator type (float64 accumulators for float sums, block sums for integer sums, block
/// extrema for max/min); parameters: the operand, the partials.
pub fn partial_kernel(red: &Reduction, reducer: Reducer, x: Elem) -> Kernel {
    let count = red.count();
    let per = partials(red, reducer, x);
    let addr = red.address("o", "r");
    let acc = accumulator(x);
    let load = if acc.is_int() {
        format!("p0[{addr}]")
    } else {
        format!("(double)p0[{addr}]")
    };
    let body = match reducer {
        Reducer::Sum | Reducer::Mean if !acc.is_int() => format!(
            "    const long long o = qb_i / {per}LL;\n\
             \x20   const long long p = qb_i % {per}LL;\n\
             \x20   const long long b = p / 8LL;\n\
             \x20   const long long end = (b + 1) * {BLOCK}LL < {count}LL ? (b + 1) * {BLOCK}LL : {count}LL;\n\
             \x20   double acc = 0.0;\n\
             \x20   for (long long r = b * {BLOCK}LL + (p % 8LL); r < end; r += 8LL) acc += (double)p0[{addr}];\n\
             \x20   p1[qb_i] = acc;\n"
        ),
        _ => format!(
            "    const long long o = qb_i / {per}LL;\n\
             \x20   const long long b = qb_i % {per}LL;\n\
             \x20   const long long end = (b + 1) * {BLOCK}LL < {count}LL ? (b + 1) * {BLOCK}LL : {count}LL;\n\
             \x20   {ty} acc = {id};\n\
             \x20   for (long long r = b * {BLOCK}LL; r < end; ++r) acc = {step};\n\
             \x20   p1[qb_i] = acc;\n",
            ty = acc.c_name(),
            id = identity(reducer, acc),
            step = combine(reducer, acc, "acc", &load),
        ),
    };
    kernel(vec![Param::In(x), Param::Out(acc)], &body)
}

/// The body of a tree pass over chunks of [`TREE_CHUNK`] values of type `acc`: item `qb_i` is
/// chunk `c` of output `o`, with `p2` values per output in `p0` and `p3` chunks per output.
fn tree_body(reducer: Reducer, acc: Elem) -> String {
    let mut levels = String::new();
    let mut w = TREE_CHUNK / 2;
    while w >= 1 {
        levels.push_str(&format!(
            "    for (int t = 0; t < {w}; ++t) v[t] = {};\n",
            combine(reducer, acc, "v[2 * t]", "v[2 * t + 1]")
        ));
        w /= 2;
    }
    format!(
        "    const long long o = qb_i / p3;\n\
         \x20   const long long c = qb_i % p3;\n\
         \x20   {ty} v[{TREE_CHUNK}];\n\
         \x20   for (int t = 0; t < {TREE_CHUNK}; ++t) {{\n\
         \x20     const long long q = c * {TREE_CHUNK}LL + t;\n\
         \x20     v[t] = q < p2 ? p0[o * p2 + q] : {id};\n\
         \x20   }}\n{levels}",
        ty = acc.c_name(),
        id = identity(reducer, acc)
    )
}

/// A tree pass: parameters are the values, the next values (both of accumulator type `acc`),
/// the values per output and the chunks per output; one work item per chunk.
pub fn tree_kernel(reducer: Reducer, acc: Elem) -> Kernel {
    let body = format!("{}    p1[qb_i] = v[0];\n", tree_body(reducer, acc));
    kernel(
        vec![Param::In(acc), Param::Out(acc), Param::Int, Param::Int],
        &body,
    )
}

/// The last tree pass (one chunk per output), writing the output: parameters as
/// [`tree_kernel`]'s, with the output in place of the next values.
pub fn tree_final_kernel(reducer: Reducer, acc: Elem, count: usize, out: Elem) -> Kernel {
    let body = format!(
        "{}    p1[qb_i] = {};\n",
        tree_body(reducer, acc),
        finish(reducer, "v[0]", acc, count, out)
    );
    kernel(
        vec![Param::In(acc), Param::Out(out), Param::Int, Param::Int],
        &body,
    )
}

/// `cumsum` along `axis`: one work item per line (`size / dims[axis]` items); integers wrap in
/// their own type.
pub fn cumsum_kernel(dims: &[usize], axis: usize, reverse: bool, x: Elem, out: Elem) -> Kernel {
    let extent = dims[axis];
    let stride: usize = dims[axis + 1..].iter().product();
    let acc = accumulator(x);
    let start = if acc.is_int() {
        literal(0.0, acc)
    } else {
        literal(quabla_ir::eval::SUM_START, Elem::F64)
    };
    let add = if acc.is_int() {
        format!("acc = qb_add_{}(acc, p0[at]);", acc.tag())
    } else {
        "acc += (double)p0[at];".to_string()
    };
    let k = if reverse {
        format!("({} - j)", extent - 1)
    } else {
        "j".to_string()
    };
    let body = format!(
        "    const long long outer = qb_i / {stride}LL;\n\
         \x20   const long long inner = qb_i % {stride}LL;\n\
         \x20   const long long base = outer * {line}LL + inner;\n\
         \x20   {ty} acc = {start};\n\
         \x20   for (long long j = 0; j < {extent}LL; ++j) {{\n\
         \x20     const long long at = base + {k} * {stride}LL;\n\
         \x20     {add}\n\
         \x20     p1[at] = {};\n\
         \x20   }}\n",
        super::convert("acc", acc, out),
        ty = acc.c_name(),
        line = extent * stride,
    );
    kernel(vec![Param::In(x), Param::Out(out)], &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_take_reduced_elements_in_row_major_order() {
        let red = Reduction {
            dims: vec![3, 4, 5],
            axes: vec![0, 2],
        };
        assert_eq!(red.outputs(), 4);
        assert_eq!(red.count(), 15);
        // Output o is axis 1; element r runs over (axis 0, axis 2) in row-major order.
        assert_eq!(
            red.address("o", "r"),
            "o * 5LL + (r / 5LL) * 20LL + (r % 5LL) * 1LL"
        );
    }

    #[test]
    fn the_split_form_is_for_few_long_rows() {
        let whole = Reduction {
            dims: vec![300_000],
            axes: vec![0],
        };
        assert!(whole.splits());
        assert_eq!(partials(&whole, Reducer::Sum, Elem::F32), 8 * 293);
        assert_eq!(partials(&whole, Reducer::Sum, Elem::I64), 293);
        let short = Reduction {
            dims: vec![3, 4, 5],
            axes: vec![1],
        };
        assert!(!short.splits());
    }
}
