//! Graph-building helpers shared by the forward and reverse rules: zeros, masked ("safe")
//! operands, reductions back to an operand's shape, and the derivative of each unary function.

use quabla_ir::{BinaryOp, Comparison, DType, GraphBuilder, NodeId, Result, Shape, UnaryOp};

/// A weak scalar constant (adopts the dtype of what it meets).
pub(crate) fn lit(b: &mut GraphBuilder, v: f64) -> NodeId {
    b.weak_scalar(v)
}

/// Zeros with the type of `like`.
pub(crate) fn zeros_like(b: &mut GraphBuilder, like: NodeId) -> Result<NodeId> {
    let ty = b.ty(like).clone();
    let z = b.scalar(0.0, ty.dtype, false);
    b.broadcast_to(z, ty.shape)
}

/// `where(mask, a, b)` with `a` a literal.
pub(crate) fn select_lit(
    b: &mut GraphBuilder,
    mask: NodeId,
    a: f64,
    other: NodeId,
) -> Result<NodeId> {
    let a = lit(b, a);
    b.select(mask, a, other)
}

/// `x == v`.
pub(crate) fn eq_lit(b: &mut GraphBuilder, x: NodeId, v: f64) -> Result<NodeId> {
    let v = lit(b, v);
    b.compare(Comparison::Equal, x, v)
}

/// `|x|` as `where(x > 0, x, -x)` (derivative -1 at 0, numerics.md §5).
pub(crate) fn abs(b: &mut GraphBuilder, x: NodeId) -> Result<NodeId> {
    let zero = lit(b, 0.0);
    let pos = b.compare(Comparison::Greater, x, zero)?;
    let neg = b.unary(UnaryOp::Neg, x)?;
    b.select(pos, x, neg)
}

pub(crate) fn logical_or(b: &mut GraphBuilder, p: NodeId, q: NodeId) -> Result<NodeId> {
    let t = b.constant(
        quabla_ir::HostData::Bool([true].into()),
        Shape::scalar(),
        false,
    )?;
    b.select(p, t, q)
}

/// Sums `ct` down to `shape` (the reverse of trailing-axis broadcasting).
pub(crate) fn unbroadcast(b: &mut GraphBuilder, ct: NodeId, shape: &Shape) -> Result<NodeId> {
    let from = b.ty(ct).shape.clone();
    if &from == shape {
        return Ok(ct);
    }
    let lead = from.rank() - shape.rank();
    let mut axes: Vec<isize> = (0..lead as isize).collect();
    for (i, &d) in shape.dims().iter().enumerate() {
        if d == 1 && from.dims()[lead + i] != 1 {
            axes.push((lead + i) as isize);
        }
    }
    let summed = if axes.is_empty() {
        ct
    } else {
        b.sum(ct, Some(&axes), false)?
    };
    b.reshape_to(summed, shape.clone())
}

/// `d f(x) / dx` for a unary function, given the primal `x` and output `y`; `None` when the
/// derivative is zero everywhere.
pub(crate) fn unary_derivative(
    b: &mut GraphBuilder,
    op: UnaryOp,
    x: NodeId,
    y: NodeId,
) -> Result<Option<NodeId>> {
    use UnaryOp::*;
    let one = lit(b, 1.0);
    let d = match op {
        Neg => lit(b, -1.0),
        // `bitwise_not` takes integers and bools only, which carry no derivative.
        Floor | Ceil | Round | BitNot => return Ok(None),
        Tanh => {
            let y2 = b.mul(y, y)?;
            b.sub(one, y2)?
        }
        Exp => y,
        Expm1 => b.add(y, one)?,
        Log => b.div(one, x)?,
        Log1p => {
            let d = b.add(one, x)?;
            b.div(one, d)?
        }
        Sqrt => {
            // 0.5 / sqrt(x), and 0 at x == 0 for every order: the base is masked too.
            let at_zero = eq_lit(b, x, 0.0)?;
            let safe = select_lit(b, at_zero, 1.0, x)?;
            let s = b.unary(Sqrt, safe)?;
            let half = lit(b, 0.5);
            let d = b.div(half, s)?;
            select_lit(b, at_zero, 0.0, d)?
        }
        Sin => b.unary(Cos, x)?,
        Cos => {
            let s = b.unary(Sin, x)?;
            b.unary(Neg, s)?
        }
        Tan => {
            let y2 = b.mul(y, y)?;
            b.add(one, y2)?
        }
        Erf | Erfc => {
            let x2 = b.mul(x, x)?;
            let nx2 = b.unary(Neg, x2)?;
            let e = b.unary(Exp, nx2)?;
            let c = lit(
                b,
                if op == Erf { 2.0 } else { -2.0 } / std::f64::consts::PI.sqrt(),
            );
            b.mul(c, e)?
        }
        Arcsin | Arccos => {
            let a = b.sub(one, x)?;
            let c = b.add(one, x)?;
            let p = b.mul(a, c)?;
            let s = b.unary(Sqrt, p)?;
            let num = lit(b, if op == Arcsin { 1.0 } else { -1.0 });
            b.div(num, s)?
        }
        Arctan => {
            let x2 = b.mul(x, x)?;
            let d = b.add(one, x2)?;
            b.div(one, d)?
        }
        Sinh => b.unary(Cosh, x)?,
        Cosh => b.unary(Sinh, x)?,
        Arcsinh => {
            // Overflow-free: 1/sqrt(1+x^2) for |x| <= 1, (1/|x|)/sqrt(1+(1/x)^2) otherwise;
            // each branch sees a masked operand so neither produces inf * 0 in higher orders.
            let ax = abs(b, x)?;
            let small = b.compare(Comparison::LessEqual, ax, one)?;
            let zero = lit(b, 0.0);
            let xs = b.select(small, x, zero)?;
            let xs2 = b.mul(xs, xs)?;
            let s1 = b.add(one, xs2)?;
            let r1 = b.unary(Sqrt, s1)?;
            let d_small = b.div(one, r1)?;
            let two = lit(b, 2.0);
            let xl = b.select(small, two, x)?;
            let axl = abs(b, xl)?;
            let inv = b.div(one, xl)?;
            let inv2 = b.mul(inv, inv)?;
            let s2 = b.add(one, inv2)?;
            let r2 = b.unary(Sqrt, s2)?;
            let inv_abs = b.div(one, axl)?;
            let d_large = b.div(inv_abs, r2)?;
            b.select(small, d_small, d_large)?
        }
        Arccosh => {
            let a = b.sub(x, one)?;
            let c = b.add(x, one)?;
            let sa = b.unary(Sqrt, a)?;
            let sc = b.unary(Sqrt, c)?;
            let p = b.mul(sa, sc)?;
            b.div(one, p)?
        }
        Arctanh => {
            let a = b.sub(one, x)?;
            let c = b.add(one, x)?;
            let p = b.mul(a, c)?;
            b.div(one, p)?
        }
        Log2 | Log10 => {
            let ln = lit(
                b,
                if op == Log2 {
                    std::f64::consts::LN_2
                } else {
                    std::f64::consts::LN_10
                },
            );
            let p = b.mul(x, ln)?;
            b.div(one, p)?
        }
        Cbrt => {
            let y2 = b.mul(y, y)?;
            let three = lit(b, 3.0);
            let p = b.mul(three, y2)?;
            b.div(one, p)?
        }
    };
    Ok(Some(d))
}

/// Partial derivatives of a binary function with respect to each operand (unbroadcast
/// shapes: the broadcast result shape), `None` where zero.
pub(crate) fn binary_partials(
    b: &mut GraphBuilder,
    op: BinaryOp,
    x: NodeId,
    y: NodeId,
    out: NodeId,
) -> Result<(Option<NodeId>, Option<NodeId>)> {
    let one = lit(b, 1.0);
    Ok(match op {
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div => {
            unreachable!("linear and bilinear ops have dedicated rules")
        }
        // Integer functions: their values carry no derivative (numerics.md §12).
        BinaryOp::FloorDiv
        | BinaryOp::Rem
        | BinaryOp::BitAnd
        | BinaryOp::BitOr
        | BinaryOp::BitXor
        | BinaryOp::ShiftLeft
        | BinaryOp::ShiftRightArithmetic
        | BinaryOp::ShiftRightLogical => (None, None),
        BinaryOp::Pow => {
            // d/dx: y x^(y-1), 0 where x == 0 and y < 1 (masked base inside the power).
            let x0 = eq_lit(b, x, 0.0)?;
            let y_lt_1 = b.compare(Comparison::Less, y, one)?;
            let f = b.constant(
                quabla_ir::HostData::Bool([false].into()),
                Shape::scalar(),
                false,
            )?;
            let mask = b.select(x0, y_lt_1, f)?;
            let xs = select_lit(b, mask, 1.0, x)?;
            let ym1 = b.sub(y, one)?;
            let p = b.binary(BinaryOp::Pow, xs, ym1)?;
            let dx = b.mul(y, p)?;
            let dx = select_lit(b, mask, 0.0, dx)?;
            // d/dy: x^y log x, 0 for x <= 0 (same masking).
            let zero = lit(b, 0.0);
            let nonpos = b.compare(Comparison::LessEqual, x, zero)?;
            let xs2 = select_lit(b, nonpos, 1.0, x)?;
            let p2 = b.binary(BinaryOp::Pow, xs2, y)?;
            let l = b.unary(UnaryOp::Log, xs2)?;
            let dy = b.mul(p2, l)?;
            let dy = select_lit(b, nonpos, 0.0, dy)?;
            let _ = out;
            (Some(dx), Some(dy))
        }
        BinaryOp::Atan2 => {
            // s = |x| + |y|, u = x/s, v = y/s; 0 where s == 0 or s is infinite.
            let ax = abs(b, x)?;
            let ay = abs(b, y)?;
            let s = b.add(ax, ay)?;
            let s0 = eq_lit(b, s, 0.0)?;
            let sinf = eq_lit(b, s, f64::INFINITY)?;
            let bad = logical_or(b, s0, sinf)?;
            let xs = select_lit(b, bad, 1.0, x)?;
            let ys = select_lit(b, bad, 1.0, y)?;
            let axs = abs(b, xs)?;
            let ays = abs(b, ys)?;
            let ss = b.add(axs, ays)?;
            let u = b.div(xs, ss)?;
            let v = b.div(ys, ss)?;
            let u2 = b.mul(u, u)?;
            let v2 = b.mul(v, v)?;
            let r = b.add(u2, v2)?;
            let dxn = b.div(v, r)?;
            let dx = b.div(dxn, ss)?;
            let nu = b.unary(UnaryOp::Neg, u)?;
            let dyn_ = b.div(nu, r)?;
            let dy = b.div(dyn_, ss)?;
            let dx = select_lit(b, bad, 0.0, dx)?;
            let dy = select_lit(b, bad, 0.0, dy)?;
            (Some(dx), Some(dy))
        }
        BinaryOp::Fmod => {
            // d/dx = 1, d/dy = -round((x - fmod(x, y)) / y).
            let diff = b.sub(x, out)?;
            let q = b.div(diff, y)?;
            let q = b.unary(UnaryOp::Round, q)?;
            let nq = b.unary(UnaryOp::Neg, q)?;
            let shape = b.ty(out).shape.clone();
            let dtype = b.ty(out).dtype;
            let c = b.scalar(1.0, dtype, false);
            let dx = b.broadcast_to(c, shape)?;
            (Some(dx), Some(nq))
        }
    })
}

/// The positions that receive the derivative of a max/min reduction over `axes`: where the
/// element equals the result (or is NaN), the last such position in row-major order of the
/// reduced elements (numerics.md §5). Returns a bool mask of `x`'s shape.
pub(crate) fn extremum_mask(
    b: &mut GraphBuilder,
    x: NodeId,
    y: NodeId,
    axes: &[usize],
) -> Result<NodeId> {
    let shape = b.ty(x).shape.clone();
    let rank = shape.rank();
    let kept: Vec<usize> = (0..rank).filter(|a| !axes.contains(a)).collect();
    let keep_dims: Vec<usize> = (0..rank)
        .map(|a| {
            if axes.contains(&a) {
                1
            } else {
                shape.dims()[a]
            }
        })
        .collect();
    let yk = b.reshape_to(y, Shape::new(keep_dims)?)?;
    let hit = b.compare(Comparison::Equal, x, yk)?;
    let nan = b.compare(Comparison::NotEqual, x, x)?;
    let hit = logical_or(b, hit, nan)?;
    // Move reduced axes last, flatten them, and keep only the last hit of each slice: a
    // reverse running count of hits equals 1 exactly there.
    let perm: Vec<isize> = kept.iter().chain(axes).map(|&a| a as isize).collect();
    let moved = b.transpose(hit, Some(&perm))?;
    let n: usize = axes.iter().map(|&a| shape.dims()[a]).product();
    let mut flat: Vec<usize> = kept.iter().map(|&a| shape.dims()[a]).collect();
    flat.push(n);
    let flat_hit = b.reshape_to(moved, Shape::new(flat.clone())?)?;
    let as_f = b.astype(flat_hit, DType::F64)?;
    let count = b.cumsum(as_f, -1, true)?;
    let first_from_end = eq_lit(b, count, 1.0)?;
    let f = b.constant(
        quabla_ir::HostData::Bool([false].into()),
        Shape::scalar(),
        false,
    )?;
    let last = b.select(flat_hit, first_from_end, f)?;
    let moved_dims: Vec<usize> = perm.iter().map(|&a| shape.dims()[a as usize]).collect();
    let unflat = b.reshape_to(last, Shape::new(moved_dims)?)?;
    let mut inverse = vec![0isize; rank];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p as usize] = i as isize;
    }
    b.transpose(unflat, Some(&inverse))
}
