//! Reference semantics of every op on host values, in float64 with one rounding to the node
//! dtype — exactly the CPU backend's rules (numerics.md §1.5, §4). Integer nodes compute in
//! i64 two's complement and wrap to the node dtype (numerics.md §12): `+ - *`, sums and running
//! sums wrap (modular arithmetic, so wrapping once at the end of a node equals wrapping after
//! every step), `floor_divide` and `remainder` follow NumPy's signs with 0 for a zero divisor,
//! shifts by a count outside `[0, bits)` give 0 (or -1 for an arithmetic right shift of a
//! negative value), and a negative integer power is 0.
//!
//! The scalar functions here are the single source of truth for elementwise values: the CPU
//! backend's kernels call them, and constant folding evaluates whole nodes with
//! [`evaluate`], so folding never changes a CPU result. Transcendentals come from the `libm`
//! crate (a port of musl) so results are identical on every platform.

use crate::graph::TensorType;
use crate::op::{BinaryOp, Comparison, Op, Reducer, UnaryOp};
use crate::{DType, HostData, Shape};

/// The float64 value of a unary function (numerics.md §4.1: no domain errors, IEEE results).
#[inline]
pub fn unary_f64(op: UnaryOp, x: f64) -> f64 {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Tanh => libm::tanh(x),
        UnaryOp::Exp => libm::exp(x),
        UnaryOp::Log => libm::log(x),
        UnaryOp::Log1p => libm::log1p(x),
        UnaryOp::Expm1 => libm::expm1(x),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Sin => libm::sin(x),
        UnaryOp::Cos => libm::cos(x),
        UnaryOp::Erf => libm::erf(x),
        UnaryOp::Erfc => libm::erfc(x),
        UnaryOp::Tan => libm::tan(x),
        UnaryOp::Arcsin => libm::asin(x),
        UnaryOp::Arccos => libm::acos(x),
        UnaryOp::Arctan => libm::atan(x),
        UnaryOp::Sinh => libm::sinh(x),
        UnaryOp::Cosh => libm::cosh(x),
        UnaryOp::Arcsinh => libm::asinh(x),
        UnaryOp::Arccosh => libm::acosh(x),
        UnaryOp::Arctanh => libm::atanh(x),
        UnaryOp::Log2 => libm::log2(x),
        UnaryOp::Log10 => libm::log10(x),
        UnaryOp::Cbrt => libm::cbrt(x),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Round => x.round_ties_even(),
        // On bool's 0/1 (integers take `unary_int`).
        UnaryOp::BitNot => (x == 0.0) as u8 as f64,
    }
}

/// The float64 value of a binary function.
#[inline]
pub fn binary_f64(op: BinaryOp, a: f64, b: f64) -> f64 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Pow => libm::pow(a, b),
        BinaryOp::Atan2 => libm::atan2(a, b),
        BinaryOp::Fmod => libm::fmod(a, b),
        // Integer functions on values that are exact integers (bool's 0/1 for the bitwise
        // ones); integer nodes take `binary_int`.
        BinaryOp::FloorDiv
        | BinaryOp::Rem
        | BinaryOp::BitAnd
        | BinaryOp::BitOr
        | BinaryOp::BitXor
        | BinaryOp::ShiftLeft
        | BinaryOp::ShiftRightArithmetic
        | BinaryOp::ShiftRightLogical => binary_int(op, a as i64, b as i64, DType::I64) as f64,
    }
}

/// Comparison with IEEE semantics: NaN compares false except under `not_equal`.
#[inline]
pub fn compare_f64(op: Comparison, a: f64, b: f64) -> bool {
    match op {
        Comparison::Greater => a > b,
        Comparison::GreaterEqual => a >= b,
        Comparison::Less => a < b,
        Comparison::LessEqual => a <= b,
        Comparison::Equal => a == b,
        Comparison::NotEqual => a != b,
    }
}

/// `powi`: square-and-multiply from the least significant bit in float64; `powi(x, 0) = 1`
/// for every `x`; a negative exponent gives `1 / powi(x, -n)` (numerics.md §4.2).
#[inline]
pub fn powi_f64(x: f64, n: i32) -> f64 {
    let mut e = n.unsigned_abs();
    let mut base = x;
    let mut acc = 1.0;
    while e > 0 {
        if e & 1 == 1 {
            acc *= base;
        }
        e >>= 1;
        if e > 0 {
            base *= base;
        }
    }
    if n < 0 {
        1.0 / acc
    } else {
        acc
    }
}

/// IEEE 754-2019 `maximum`: NaN if either is NaN; `-0.0 < +0.0`.
#[inline]
pub fn maximum_ieee(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a > b || (a == b && b.is_sign_negative()) {
        a
    } else {
        b
    }
}

/// IEEE 754-2019 `minimum`: NaN if either is NaN; `-0.0 < +0.0`.
#[inline]
pub fn minimum_ieee(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a < b || (a == b && a.is_sign_negative()) {
        a
    } else {
        b
    }
}

/// The value of an integer (or bool, for `bitwise_not`) unary function on an operand of
/// `dtype`, wrapped to that dtype. Float-only functions are the identity here (the type rules
/// never let them reach an integer operand; the rounding functions are the identity on
/// integers).
#[inline]
pub fn unary_int(op: UnaryOp, x: i64, dtype: DType) -> i64 {
    match op {
        UnaryOp::Neg => dtype.wrap_int(x.wrapping_neg()),
        UnaryOp::BitNot if dtype == DType::Bool => (x == 0) as i64,
        UnaryOp::BitNot => dtype.wrap_int(!x),
        _ => x,
    }
}

/// The value of an integer binary function on operands of `dtype` (already wrapped to it),
/// wrapped to that dtype. Bool operands (the bitwise functions) are 0/1.
#[inline]
pub fn binary_int(op: BinaryOp, a: i64, b: i64, dtype: DType) -> i64 {
    let bits = dtype.int_bits().unwrap_or(64) as i64;
    let v = match op {
        BinaryOp::Add => a.wrapping_add(b),
        BinaryOp::Sub => a.wrapping_sub(b),
        BinaryOp::Mul => a.wrapping_mul(b),
        BinaryOp::Pow => pow_int(a, b),
        BinaryOp::FloorDiv => floor_div_int(a, b),
        BinaryOp::Rem => rem_int(a, b),
        BinaryOp::BitAnd => a & b,
        BinaryOp::BitOr => a | b,
        BinaryOp::BitXor => a ^ b,
        BinaryOp::ShiftLeft => {
            if (0..bits).contains(&b) {
                a.wrapping_shl(b as u32)
            } else {
                0
            }
        }
        BinaryOp::ShiftRightArithmetic => {
            // `a` is sign-extended from its dtype, so shifting the i64 copies its sign bit.
            if (0..bits).contains(&b) {
                a >> b
            } else if a < 0 {
                -1
            } else {
                0
            }
        }
        BinaryOp::ShiftRightLogical => {
            if (0..bits).contains(&b) {
                let unsigned = if bits == 32 {
                    a as u32 as u64
                } else {
                    a as u64
                };
                (unsigned >> b) as i64
            } else {
                0
            }
        }
        // Float-only functions never reach integer operands (the type rules refuse them).
        BinaryOp::Div | BinaryOp::Atan2 | BinaryOp::Fmod => 0,
    };
    dtype.wrap_int(v)
}

/// Floor division (NumPy `//`): the quotient rounded toward negative infinity; 0 for a zero
/// divisor (JAX's convention), and `MIN // -1` wraps to `MIN`.
#[inline]
pub fn floor_div_int(a: i64, b: i64) -> i64 {
    if b == 0 {
        return 0;
    }
    let q = a.wrapping_div(b);
    if a.wrapping_rem(b) != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    }
}

/// Remainder with the divisor's sign (NumPy `%`): `a - b * (a // b)`; 0 for a zero divisor.
#[inline]
pub fn rem_int(a: i64, b: i64) -> i64 {
    if b == 0 {
        return 0;
    }
    let r = a.wrapping_rem(b);
    if r != 0 && ((r < 0) != (b < 0)) {
        r + b
    } else {
        r
    }
}

/// Integer power by square-and-multiply with wrapping products; a negative exponent gives 0
/// (numerics.md §12: the traced rule; eager `**` with a negative integer exponent is refused
/// by the facade before it gets here).
#[inline]
pub fn pow_int(x: i64, n: i64) -> i64 {
    if n < 0 {
        return 0;
    }
    let mut e = n as u64;
    let mut base = x;
    let mut acc: i64 = 1;
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        e >>= 1;
        if e > 0 {
            base = base.wrapping_mul(base);
        }
    }
    acc
}

/// Comparison of integers (exact).
#[inline]
pub fn compare_int(op: Comparison, a: i64, b: i64) -> bool {
    match op {
        Comparison::Greater => a > b,
        Comparison::GreaterEqual => a >= b,
        Comparison::Less => a < b,
        Comparison::LessEqual => a <= b,
        Comparison::Equal => a == b,
        Comparison::NotEqual => a != b,
    }
}

/// Whether a node computes with integer semantics: an integer operand or result, or an
/// integer function (`bitwise_*`, shifts) on bool. Casts are neither (they convert).
pub fn is_integer_node(op: &Op, operands: &[&TensorType], out: &TensorType) -> bool {
    match op {
        Op::Cast { .. } => false,
        // The integer indices of these do not make the node an integer function.
        Op::IndexGather { .. } | Op::IndexScatter { .. } => out.dtype.is_integer(),
        Op::Unary(UnaryOp::BitNot) => true,
        Op::Binary(b) if b.is_integer_only() => true,
        _ => out.dtype.is_integer() || operands.iter().any(|t| t.dtype.is_integer()),
    }
}

/// Whether a graph (with the bodies of its regions) holds an integer value or computes an
/// integer function: what backends whose generated code holds every value as a float64 refuse
/// to translate.
pub fn has_integers(graph: &crate::Graph) -> bool {
    // Region bodies are shared (`Arc`): a derivative's checkpoint layouts nest the same body
    // under many regions, so each distinct body is visited once, or the walk is exponential
    // in the nesting depth.
    let mut seen: std::collections::HashSet<*const crate::Graph> = Default::default();
    let mut pending: Vec<&crate::Graph> = vec![graph];
    let mut operands: Vec<&TensorType> = Vec::new();
    while let Some(graph) = pending.pop() {
        if !seen.insert(graph as *const crate::Graph) {
            continue;
        }
        for node in graph.nodes() {
            operands.clear();
            operands.extend(node.operands.iter().map(|o| &graph.nodes()[o.index()].ty));
            if is_integer_node(&node.op, &operands, &node.ty)
                || matches!(&node.op, Op::Cast { to, .. } if to.is_integer())
                || operands.iter().any(|t| t.dtype.is_integer())
            {
                return true;
            }
            if let Op::Region(call) = &node.op {
                pending.extend(call.region.bodies().into_iter().map(|(_, g)| g.as_ref()));
            }
        }
    }
    false
}

/// A host value with its shape, as [`evaluate`] takes it.
#[derive(Debug, Clone, Copy)]
pub struct HostValue<'a> {
    pub data: &'a HostData,
    pub shape: &'a Shape,
}

/// Evaluates one node on concrete operands; `None` for ops without a folding rule:
/// leaves, `matmul` and the linear-algebra ops (their CPU kernels live in `quabla-linalg` and
/// `faer`, whose accumulation order this reference does not reproduce, so folding them could
/// change a CPU result), `custom` (inlined before folding runs) and control-flow regions.
pub fn evaluate(op: &Op, operands: &[HostValue<'_>], out: &TensorType) -> Option<HostData> {
    if let Op::Cast { .. } = op {
        return Some(operands[0].data.cast(out.dtype));
    }
    if let Some(value) = crate::indexed::evaluate(op, operands, out) {
        return Some(value);
    }
    let integer = matches!(op, Op::Unary(UnaryOp::BitNot))
        || matches!(op, Op::Binary(b) if b.is_integer_only())
        || out.dtype.is_integer()
        || operands.iter().any(|o| o.data.dtype().is_integer());
    if integer {
        return evaluate_int(op, operands, out);
    }
    let out_shape = &out.shape;
    let n = out_shape.size();
    if is_layout(op) {
        let values: Vec<(Vec<f64>, &Shape)> = operands
            .iter()
            .map(|o| (o.data.to_f64_vec(), o.shape))
            .collect();
        return layout(op, &values, out_shape).map(|v| HostData::from_f64(out.dtype, v));
    }
    let values: Vec<f64> = match op {
        Op::Input { .. }
        | Op::Constant { .. }
        | Op::Matmul
        | Op::Solve { .. }
        | Op::Cholesky
        | Op::CholeskyAd
        | Op::TriangularSolve { .. }
        | Op::Linalg(_)
        | Op::Custom(_)
        | Op::Region(_) => return None,
        Op::Cast { .. } | Op::StopGradient | Op::DebugPrint { .. } => operands[0].data.to_f64_vec(),
        Op::Unary(u) => map1(operands[0], |x| unary_f64(*u, x)),
        Op::Powi(e) => map1(operands[0], |x| powi_f64(x, *e)),
        Op::Binary(b) => map2(operands[0], operands[1], out_shape, |x, y| {
            binary_f64(*b, x, y)
        }),
        Op::Compare(c) => map2(operands[0], operands[1], out_shape, |x, y| {
            compare_f64(*c, x, y) as u8 as f64
        }),
        Op::Where => {
            let p = broadcast_values(operands[0], out_shape);
            let a = broadcast_values(operands[1], out_shape);
            let b = broadcast_values(operands[2], out_shape);
            (0..n)
                .map(|i| if p[i] != 0.0 { a[i] } else { b[i] })
                .collect()
        }
        Op::Reduce { kind, axes } => {
            let x = operands[0];
            // Sums follow the blocked order of numerics.md §1.5 over each position's reduced
            // elements in row-major order; `max`/`min` are exact in any order.
            let whole = axes.len() == x.shape.rank();
            let sum = |x: HostValue<'_>| {
                if whole {
                    vec![blocked_sum(x.data.to_f64_vec())]
                } else {
                    sum_axes(x, axes)
                }
            };
            match kind.reducer() {
                Reducer::Sum => sum(x),
                Reducer::Mean => {
                    let count: usize = axes.iter().map(|&a| x.shape.dims()[a]).product();
                    sum(x).into_iter().map(|s| s / count as f64).collect()
                }
                Reducer::Max => reduce(x, axes, f64::NEG_INFINITY, maximum_ieee),
                Reducer::Min => reduce(x, axes, f64::INFINITY, minimum_ieee),
            }
        }
        Op::Cumsum { axis, reverse } => cumsum(operands[0], *axis, *reverse),
        Op::Reshape { .. }
        | Op::Broadcast { .. }
        | Op::Transpose { .. }
        | Op::Concat { .. }
        | Op::Slice { .. }
        | Op::PadSlice { .. }
        | Op::Gather { .. } => unreachable!("layout ops are evaluated by `layout`"),
        Op::IndexGather { .. } | Op::IndexScatter { .. } => {
            unreachable!("indexed ops are evaluated by `indexed::evaluate`")
        }
        Op::ScatterAdd { axis, indices } => {
            let mut v = operands[0].data.to_f64_vec();
            let u = operands[1].data.to_f64_vec();
            let strides = operands[0].shape.strides();
            for (i, mut idx) in MultiIndex::new(operands[1].shape).enumerate() {
                idx[*axis] = indices[idx[*axis]];
                v[dot(&idx, &strides)] += u[i];
            }
            v
        }
    };
    debug_assert_eq!(values.len(), n);
    Some(HostData::from_f64(out.dtype, values))
}

/// [`evaluate`] for integer nodes ([`is_integer_node`]): every value as i64 (bool as 0/1),
/// wrapped to the node dtype at the end.
fn evaluate_int(op: &Op, operands: &[HostValue<'_>], out: &TensorType) -> Option<HostData> {
    let out_shape = &out.shape;
    let ints: Vec<(Vec<i64>, &Shape)> = operands
        .iter()
        .map(|o| (o.data.to_i64_vec(), o.shape))
        .collect();
    if is_layout(op) {
        return layout(op, &ints, out_shape).map(|v| HostData::from_i64(out.dtype, v));
    }
    let dtype = operands.first().map_or(out.dtype, |o| o.data.dtype());
    let bcast = |i: usize| broadcast_vec(&ints[i].0, ints[i].1, out_shape);
    let values: Vec<i64> = match op {
        Op::Input { .. }
        | Op::Constant { .. }
        | Op::Matmul
        | Op::Solve { .. }
        | Op::Cholesky
        | Op::CholeskyAd
        | Op::TriangularSolve { .. }
        | Op::Linalg(_)
        | Op::Custom(_)
        | Op::Region(_) => return None,
        Op::Cast { .. } => return Some(operands[0].data.cast(out.dtype)),
        Op::StopGradient | Op::DebugPrint { .. } => ints[0].0.clone(),
        Op::Unary(u) => ints[0].0.iter().map(|&x| unary_int(*u, x, dtype)).collect(),
        Op::Powi(e) => ints[0].0.iter().map(|&x| pow_int(x, *e as i64)).collect(),
        Op::Binary(b) => {
            let (x, y) = (bcast(0), bcast(1));
            x.iter()
                .zip(&y)
                .map(|(&a, &c)| binary_int(*b, a, c, dtype))
                .collect()
        }
        Op::Compare(c) => {
            let (x, y) = (bcast(0), bcast(1));
            x.iter()
                .zip(&y)
                .map(|(&a, &b)| compare_int(*c, a, b) as i64)
                .collect()
        }
        Op::Where => {
            let (p, a, b) = (bcast(0), bcast(1), bcast(2));
            (0..out_shape.size())
                .map(|i| if p[i] != 0 { a[i] } else { b[i] })
                .collect()
        }
        Op::Reduce { kind, axes } => {
            let (count, positions) = kept_positions(ints[0].1, axes);
            let (init, f): (i64, fn(i64, i64) -> i64) = match kind.reducer() {
                Reducer::Sum | Reducer::Mean => (0, i64::wrapping_add),
                Reducer::Max => (i64::MIN, i64::max),
                Reducer::Min => (i64::MAX, i64::min),
            };
            let mut acc = vec![init; count];
            for (pos, &v) in positions.zip(&ints[0].0) {
                acc[pos] = f(acc[pos], v);
            }
            acc
        }
        Op::Cumsum { axis, reverse } => {
            running(&ints[0].0, ints[0].1, *axis, *reverse, 0, i64::wrapping_add)
        }
        Op::ScatterAdd { axis, indices } => {
            let mut v = ints[0].0.clone();
            let strides = operands[0].shape.strides();
            for (i, mut idx) in MultiIndex::new(operands[1].shape).enumerate() {
                idx[*axis] = indices[idx[*axis]];
                let at = dot(&idx, &strides);
                v[at] = v[at].wrapping_add(ints[1].0[i]);
            }
            v
        }
        Op::Reshape { .. }
        | Op::Broadcast { .. }
        | Op::Transpose { .. }
        | Op::Concat { .. }
        | Op::Slice { .. }
        | Op::PadSlice { .. }
        | Op::Gather { .. } => unreachable!("layout ops are evaluated by `layout`"),
        Op::IndexGather { .. } | Op::IndexScatter { .. } => {
            unreachable!("indexed ops are evaluated by `indexed::evaluate`")
        }
    };
    Some(HostData::from_i64(out.dtype, values))
}

/// The data-movement ops, whose values do not depend on the element type.
fn is_layout(op: &Op) -> bool {
    matches!(
        op,
        Op::Reshape { .. }
            | Op::Broadcast { .. }
            | Op::Transpose { .. }
            | Op::Concat { .. }
            | Op::Slice { .. }
            | Op::PadSlice { .. }
            | Op::Gather { .. }
    )
}

/// The data-movement ops ([`is_layout`]), on values of any element type: `None` for every
/// other op.
fn layout<T: Copy + Default>(
    op: &Op,
    operands: &[(Vec<T>, &Shape)],
    out_shape: &Shape,
) -> Option<Vec<T>> {
    Some(match op {
        Op::Reshape { .. } => operands[0].0.clone(),
        Op::Broadcast { shape } => broadcast_vec(&operands[0].0, operands[0].1, shape),
        Op::Transpose { perm } => {
            let x = &operands[0].0;
            let in_strides = operands[0].1.strides();
            let strides: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
            gather_strided(x, out_shape, &strides, 0)
        }
        Op::Concat { axis } => concat(operands, *axis, out_shape),
        Op::Slice { starts, .. } => {
            let x = &operands[0].0;
            let strides = operands[0].1.strides();
            let offset = starts.iter().zip(&strides).map(|(s, st)| s * st).sum();
            gather_strided(x, out_shape, &strides, offset)
        }
        Op::PadSlice { starts, shape } => {
            let mut v = vec![T::default(); shape.size()];
            let x = &operands[0].0;
            let strides = shape.strides();
            for (i, idx) in MultiIndex::new(operands[0].1).enumerate() {
                let pos: usize = idx
                    .iter()
                    .zip(starts)
                    .zip(&strides)
                    .map(|((i, s), st)| (i + s) * st)
                    .sum();
                v[pos] = x[i];
            }
            v
        }
        Op::Gather { axis, indices } => {
            let x = &operands[0].0;
            let strides = operands[0].1.strides();
            MultiIndex::new(out_shape)
                .map(|mut idx| {
                    idx[*axis] = indices[idx[*axis]];
                    x[dot(&idx, &strides)]
                })
                .collect()
        }
        _ => return None,
    })
}

/// The start of `cumsum`'s sequential float64 accumulation: `-0.0`, the additive identity that
/// keeps signed zeros, so a running sum of only `-0.0` is `-0.0` like the elementwise
/// `-0.0 + -0.0` (our choice; any other element makes the sign irrelevant). Sums and means
/// start their accumulators at `+0.0`, as the blocked order of numerics.md §1.5 says.
pub const SUM_START: f64 = -0.0;

/// Elements per block of the blocked summation order (numerics.md §1.5).
pub const SUM_BLOCK: usize = 1024;

/// Accumulators of a block: element `k` of a block goes to accumulator `k % SUM_LANES`.
pub const SUM_LANES: usize = 8;

/// The sum of one block's accumulators: `((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))`
/// (float64 accumulators, or float32 ones at `precision("float32")`).
#[inline]
pub fn combine_lanes<A: Copy + std::ops::Add<Output = A>>(a: &[A; SUM_LANES]) -> A {
    ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
}

/// The pairwise tree of numerics.md §4.4 with addition, over `values` in place: add neighbours
/// `(0, 1), (2, 3), ...`, carry an odd last value unchanged, repeat until one value remains.
/// `+0.0` (the type's default) for no values.
pub fn pairwise_sum<A: Copy + Default + std::ops::Add<Output = A>>(values: &mut [A]) -> A {
    let mut n = values.len();
    while n > 1 {
        let half = n / 2;
        for i in 0..half {
            values[i] = values[2 * i] + values[2 * i + 1];
        }
        if n % 2 == 1 {
            values[half] = values[n - 1];
            n = half + 1;
        } else {
            n = half;
        }
    }
    values.first().copied().unwrap_or_default()
}

/// The float64 sum of `values`, taken in order, in the blocked order of numerics.md §1.5:
/// consecutive blocks of [`SUM_BLOCK`] elements (the last may be shorter); inside a block,
/// element `k` is added to accumulator `k % SUM_LANES` (each starting at `+0.0` and adding its
/// elements in order) and the accumulators are combined by [`combine_lanes`]; the block sums
/// are combined by [`pairwise_sum`].
///
/// This is the definition, written for clarity; backends' faster kernels are tested against
/// it bit for bit.
pub fn blocked_sum(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut blocks = Vec::new();
    let mut acc = [0.0; SUM_LANES];
    let mut k = 0;
    for v in values {
        acc[k % SUM_LANES] += v;
        k += 1;
        if k == SUM_BLOCK {
            blocks.push(combine_lanes(&acc));
            acc = [0.0; SUM_LANES];
            k = 0;
        }
    }
    if k > 0 || blocks.is_empty() {
        blocks.push(combine_lanes(&acc));
    }
    pairwise_sum(&mut blocks)
}

fn map1(x: HostValue<'_>, f: impl Fn(f64) -> f64) -> Vec<f64> {
    x.data.to_f64_vec().into_iter().map(f).collect()
}

fn map2(a: HostValue<'_>, b: HostValue<'_>, out: &Shape, f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    let a = broadcast_values(a, out);
    let b = broadcast_values(b, out);
    a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect()
}

/// Values of `x` broadcast (trailing-axis rules) to `shape`, row-major.
pub fn broadcast_values(x: HostValue<'_>, shape: &Shape) -> Vec<f64> {
    broadcast_vec(&x.data.to_f64_vec(), x.shape, shape)
}

/// Row-major values `data` of shape `from` broadcast to `shape`.
fn broadcast_vec<T: Copy>(data: &[T], from: &Shape, shape: &Shape) -> Vec<T> {
    let strides = broadcast_strides(from, shape);
    gather_strided(data, shape, &strides, 0)
}

/// Strides that read an operand of shape `from` as if it had shape `to` (0 on broadcast axes).
pub fn broadcast_strides(from: &Shape, to: &Shape) -> Vec<usize> {
    let own = from.strides();
    let lead = to.rank() - from.rank();
    (0..to.rank())
        .map(|i| {
            if i < lead || from.dims()[i - lead] == 1 {
                0
            } else {
                own[i - lead]
            }
        })
        .collect()
}

fn gather_strided<T: Copy>(x: &[T], shape: &Shape, strides: &[usize], offset: usize) -> Vec<T> {
    MultiIndex::new(shape)
        .map(|idx| x[offset + dot(&idx, strides)])
        .collect()
}

fn dot(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}

/// The kept position (row-major over the axes not in `axes`) of every element of `shape`, in
/// row-major order, and the number of positions: the grouping every reduction over `axes`
/// follows (backends that reduce element by element use it too).
pub fn kept_positions(shape: &Shape, axes: &[usize]) -> (usize, impl Iterator<Item = usize>) {
    let dims = shape.dims();
    let kept: Vec<usize> = (0..dims.len()).filter(|a| !axes.contains(a)).collect();
    let kept_shape = Shape::new(kept.iter().map(|&a| dims[a]).collect::<Vec<_>>())
        .expect("extents of a valid shape are nonzero");
    let kept_strides = kept_shape.strides();
    let positions = MultiIndex::new(shape).map(move |idx| {
        kept.iter()
            .zip(&kept_strides)
            .map(|(&a, s)| idx[a] * s)
            .sum()
    });
    (kept_shape.size(), positions)
}

/// The blocked sum ([`blocked_sum`]) of the reduced elements of each kept position, taken in
/// row-major order.
fn sum_axes(x: HostValue<'_>, axes: &[usize]) -> Vec<f64> {
    let (count, positions) = kept_positions(x.shape, axes);
    let mut elements: Vec<Vec<f64>> = vec![Vec::new(); count];
    for (pos, v) in positions.zip(x.data.to_f64_vec()) {
        elements[pos].push(v);
    }
    elements.into_iter().map(blocked_sum).collect()
}

/// Row-major accumulation of the reduced elements for each kept position (for `max`/`min`,
/// which are exact in any order).
fn reduce(x: HostValue<'_>, axes: &[usize], init: f64, f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    let (count, positions) = kept_positions(x.shape, axes);
    let mut acc = vec![init; count];
    for (pos, v) in positions.zip(x.data.to_f64_vec()) {
        acc[pos] = f(acc[pos], v);
    }
    acc
}

fn cumsum(x: HostValue<'_>, axis: usize, reverse: bool) -> Vec<f64> {
    running(
        &x.data.to_f64_vec(),
        x.shape,
        axis,
        reverse,
        SUM_START,
        |a, b| a + b,
    )
}

/// Running accumulation of `data` (shape `shape`) along `axis` from `start` with `f`, from the
/// end when `reverse`.
fn running<T: Copy>(
    data: &[T],
    shape: &Shape,
    axis: usize,
    reverse: bool,
    start: T,
    f: impl Fn(T, T) -> T,
) -> Vec<T> {
    let dims = shape.dims();
    let stride = shape.strides()[axis];
    let extent = dims[axis];
    let mut out = data.to_vec();
    let outer: usize = dims[..axis].iter().product();
    for o in 0..outer {
        for inner in 0..stride {
            let base = o * extent * stride + inner;
            let mut acc = start;
            for k in 0..extent {
                let k = if reverse { extent - 1 - k } else { k };
                acc = f(acc, data[base + k * stride]);
                out[base + k * stride] = acc;
            }
        }
    }
    out
}

fn concat<T: Copy>(operands: &[(Vec<T>, &Shape)], axis: usize, out: &Shape) -> Vec<T> {
    let outer: usize = out.dims()[..axis].iter().product();
    let inner: usize = out.dims()[axis + 1..].iter().product();
    let mut v = Vec::with_capacity(out.size());
    for o in 0..outer {
        for (part, shape) in operands {
            let chunk = shape.dims()[axis] * inner;
            v.extend_from_slice(&part[o * chunk..(o + 1) * chunk]);
        }
    }
    v
}

/// Row-major iteration over every multi-index of a shape.
#[derive(Debug, Clone)]
pub struct MultiIndex {
    dims: Vec<usize>,
    next: Option<Vec<usize>>,
}

impl MultiIndex {
    pub fn new(shape: &Shape) -> MultiIndex {
        MultiIndex {
            dims: shape.dims().to_vec(),
            next: Some(vec![0; shape.rank()]),
        }
    }
}

impl Iterator for MultiIndex {
    type Item = Vec<usize>;

    fn next(&mut self) -> Option<Vec<usize>> {
        let current = self.next.take()?;
        let mut succ = current.clone();
        let mut axis = self.dims.len();
        loop {
            if axis == 0 {
                break;
            }
            axis -= 1;
            succ[axis] += 1;
            if succ[axis] < self.dims[axis] {
                self.next = Some(succ);
                break;
            }
            succ[axis] = 0;
        }
        Some(current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powi_is_exact_square_and_multiply() {
        assert_eq!(powi_f64(f64::NAN, 0), 1.0);
        assert_eq!(powi_f64(3.0, 5), 243.0);
        assert_eq!(powi_f64(2.0, -2), 0.25);
        assert_eq!(powi_f64(-2.0, 3), -8.0);
    }

    #[test]
    fn ieee_extrema() {
        assert!(maximum_ieee(f64::NAN, 1.0).is_nan());
        assert!(minimum_ieee(1.0, f64::NAN).is_nan());
        assert!(maximum_ieee(-0.0, 0.0).is_sign_positive());
        assert!(maximum_ieee(0.0, -0.0).is_sign_positive());
        assert!(minimum_ieee(0.0, -0.0).is_sign_negative());
        assert!(minimum_ieee(-0.0, 0.0).is_sign_negative());
    }

    #[test]
    fn multi_index_of_rank_zero_yields_once() {
        assert_eq!(MultiIndex::new(&Shape::scalar()).count(), 1);
        let s = Shape::new(vec![2, 3]).unwrap();
        let all: Vec<_> = MultiIndex::new(&s).collect();
        assert_eq!(all.len(), 6);
        assert_eq!(all[4], vec![1, 1]);
    }

    #[test]
    fn sums_of_negative_zeros_are_positive_and_running_sums_negative() {
        let data = HostData::F64(vec![-0.0, -0.0].into());
        let shape = Shape::new(vec![2, 1]).unwrap();
        let x = HostValue {
            data: &data,
            shape: &shape,
        };
        let scalar = TensorType::new(crate::DType::F64, Shape::scalar());
        let per_row = TensorType::new(crate::DType::F64, Shape::new(vec![1]).unwrap());
        for (op, ty) in [
            (Op::reduce(Reducer::Sum, vec![0, 1], 2), &scalar),
            (Op::reduce(Reducer::Mean, vec![0, 1], 2), &scalar),
            (Op::reduce(Reducer::Sum, vec![0], 2), &per_row),
            (Op::reduce(Reducer::Mean, vec![0], 2), &per_row),
        ] {
            // The blocked order's accumulators start at +0.0 (numerics.md §1.5).
            let r = evaluate(&op, &[x], ty).unwrap().get_f64(0);
            assert!(r == 0.0 && r.is_sign_positive(), "{op:?}");
        }
        let c = evaluate(
            &Op::Cumsum {
                axis: 0,
                reverse: false,
            },
            &[x],
            &TensorType::new(crate::DType::F64, shape.clone()),
        )
        .unwrap();
        assert!(c.get_f64(1).is_sign_negative());
    }

    /// Values checked against NumPy (`np.floor_divide`, `np.remainder`, `np.left_shift`, ...
    /// on int32/int64 arrays), and JAX's zero-divisor and shift-count conventions.
    #[test]
    fn integer_functions_follow_numpy_signs_and_wrap() {
        use BinaryOp::*;
        let i32_ = DType::I32;
        let cases: [(BinaryOp, i64, i64, DType, i64); 24] = [
            (FloorDiv, 7, 2, i32_, 3),
            (FloorDiv, -7, 2, i32_, -4),
            (FloorDiv, 7, -2, i32_, -4),
            (FloorDiv, -7, -2, i32_, 3),
            (FloorDiv, 5, 0, i32_, 0),
            (FloorDiv, i32::MIN as i64, -1, i32_, i32::MIN as i64),
            (FloorDiv, i64::MIN, -1, DType::I64, i64::MIN),
            (Rem, 7, 3, i32_, 1),
            (Rem, -7, 3, i32_, 2),
            (Rem, 7, -3, i32_, -2),
            (Rem, -7, -3, i32_, -1),
            (Rem, 7, 0, i32_, 0),
            (Rem, i64::MIN, -1, DType::I64, 0),
            (Add, i32::MAX as i64, 1, i32_, i32::MIN as i64),
            (Mul, 1 << 20, 1 << 12, i32_, 0),
            (Sub, i64::MIN, 1, DType::I64, i64::MAX),
            (ShiftLeft, 1, 31, i32_, i32::MIN as i64),
            (ShiftLeft, 1, 32, i32_, 0),
            (ShiftLeft, 1, -1, i32_, 0),
            (ShiftRightArithmetic, -8, 1, i32_, -4),
            (ShiftRightArithmetic, -8, 40, i32_, -1),
            (ShiftRightLogical, -1, 28, i32_, 15),
            (ShiftRightLogical, -1, 60, DType::I64, 15),
            (Pow, 3, -1, i32_, 0),
        ];
        for (op, a, b, dtype, want) in cases {
            assert_eq!(
                binary_int(op, a, b, dtype),
                want,
                "{op:?}({a}, {b}) in {dtype}"
            );
        }
        assert_eq!(
            binary_int(Pow, 3, 40, DType::I32),
            3i32.wrapping_pow(40) as i64
        );
        assert_eq!(binary_int(Pow, -2, 63, DType::I64), i64::MIN);
        assert_eq!(
            unary_int(UnaryOp::Neg, i32::MIN as i64, i32_),
            i32::MIN as i64
        );
        assert_eq!(unary_int(UnaryOp::BitNot, 0, i32_), -1);
        assert_eq!(unary_int(UnaryOp::BitNot, 1, DType::Bool), 0);
        assert_eq!(unary_int(UnaryOp::BitNot, 0, DType::Bool), 1);
    }

    #[test]
    fn integer_nodes_evaluate_in_their_dtype() {
        let data = HostData::I32(vec![i32::MAX, 1, -3, 4].into());
        let shape = Shape::new(vec![2, 2]).unwrap();
        let x = HostValue {
            data: &data,
            shape: &shape,
        };
        let ty = |d: DType, dims: Vec<usize>| TensorType::new(d, Shape::new(dims).unwrap());
        // The int32 sum wraps; the per-axis max and the running sum are exact or wrap alike.
        let sum = evaluate(
            &Op::reduce(Reducer::Sum, vec![0, 1], 2),
            &[x],
            &ty(DType::I32, vec![]),
        );
        assert_eq!(sum.unwrap(), HostData::I32(vec![i32::MIN + 1].into()));
        let max = evaluate(
            &Op::reduce(Reducer::Max, vec![1], 2),
            &[x],
            &ty(DType::I32, vec![2]),
        );
        assert_eq!(max.unwrap(), HostData::I32(vec![i32::MAX, 4].into()));
        let cumsum = Op::Cumsum {
            axis: 0,
            reverse: false,
        };
        let c = evaluate(&cumsum, &[x], &ty(DType::I32, vec![2, 2])).unwrap();
        assert_eq!(c, HostData::I32(vec![i32::MAX, 1, i32::MAX - 3, 5].into()));
        let t = evaluate(
            &Op::Transpose { perm: vec![1, 0] },
            &[x],
            &ty(DType::I32, vec![2, 2]),
        );
        assert_eq!(t.unwrap(), HostData::I32(vec![i32::MAX, -3, 1, 4].into()));
        let cast = Op::Cast {
            to: DType::F32,
            weak: false,
        };
        let f = evaluate(&cast, &[x], &ty(DType::F32, vec![2, 2])).unwrap();
        assert_eq!(f, HostData::F32(vec![2147483648.0, 1.0, -3.0, 4.0].into()));
        let lt = evaluate(
            &Op::Compare(Comparison::Less),
            &[x, x],
            &ty(DType::Bool, vec![2, 2]),
        );
        assert_eq!(lt.unwrap(), HostData::Bool(vec![false; 4].into()));
    }

    #[test]
    fn round_ties_to_even_and_fmod_sign() {
        assert_eq!(unary_f64(UnaryOp::Round, 2.5), 2.0);
        assert_eq!(unary_f64(UnaryOp::Round, -0.5), -0.0);
        assert_eq!(binary_f64(BinaryOp::Fmod, -7.0, 3.0), -1.0);
        assert!(binary_f64(BinaryOp::Fmod, 1.0, 0.0).is_nan());
    }
}
