//! `lu_factor` and `lu_solve` (SciPy's spelling, for ports): LU with partial pivoting as a
//! composition of IR ops, so it runs on every backend, batches over leading axes, and has
//! derivatives of every order without a rule of its own; `lu_solve` applies the row
//! interchanges and the two triangular solves of the `solve` family.
//!
//! The factorization is straight-line code of `n` steps: at step `k` the pivot row is the first
//! row at or below `k` of largest magnitude in column `k` (a one-hot mask from comparisons, so
//! the choice carries no derivative), rows `k` and `p` are exchanged with `where` (exactly, no
//! arithmetic on the other rows), and the rows below are eliminated. Its cost is `O(n³)` flops
//! in `O(n)` graph nodes per step; for a one-off solve `solve` (one LU kernel) is faster. A
//! float32 input is factored in float64 and rounded once (numerics.md §1.5).

use super::dense::{broadcast_batch, check_rhs, dims, results, square, Built};
use crate::dispatch::apply;
use crate::dispatch::apply_many;
use crate::error::Result;
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{Comparison, DType, GraphBuilder, HostData, NodeId, Op, Shape};

/// The result of [`lu_factor`]: `lu` holds `U` on and above the diagonal and the multipliers
/// of the unit lower `L` below it; row `k` was exchanged with row `piv[k]` at step `k`
/// (LAPACK's convention, 0-based), so that `P a = L U`. `piv` is a float array of integral
/// values in `a`'s dtype (there are no integer dtypes).
#[derive(Clone, Debug)]
pub struct LuFactor {
    pub lu: Tensor,
    pub piv: Tensor,
}

/// `lu_factor(a)`: the pivoted LU factorization of each `[..., n, n]` matrix. An exactly
/// singular matrix gives a zero on the diagonal of `U` and non-finite multipliers below it
/// (no error, as in SciPy, which only warns); `lu_solve` with it is non-finite.
#[track_caller]
pub fn lu_factor(a: impl Into<Operand>) -> Result<LuFactor> {
    let [lu, piv] = results(apply_many(vec![a.into()], |g, x| {
        let n = square(g, x[0], "lu_factor")?;
        let dtype = g.ty(x[0]).dtype;
        let wide = to_dtype(g, x[0], DType::F64)?;
        let (lu, piv) = factor(g, wide, n)?;
        Ok(vec![to_dtype(g, lu, dtype)?, to_dtype(g, piv, dtype)?])
    })?)?;
    Ok(LuFactor { lu, piv })
}

/// `lu_solve((lu, piv), b)`: solves `a x = b` (`aᵀ x = b` with `trans`) from [`lu_factor`]'s
/// result; `b` is a vector `[n]` or a stack of columns `[..., n, k]`, as for `solve`.
#[track_caller]
pub fn lu_solve(factor: &LuFactor, b: impl Into<Operand>, trans: bool) -> Result<Tensor> {
    let ops = vec![
        Operand::Tensor(factor.lu.clone()),
        Operand::Tensor(factor.piv.clone()),
        b.into(),
    ];
    apply(ops, |g, x| {
        let (lu, piv, rhs) = (x[0], x[1], x[2]);
        let n = square(g, lu, "lu_solve")?;
        check_rhs(g, lu, n, rhs, "lu_solve")?;
        let pd = dims(g, piv);
        if pd.last() != Some(&n) {
            return Err(super::dense::shape_error(
                "lu_solve",
                format!("lu_solve: piv must have shape [..., {n}], got {pd:?}"),
            ));
        }
        let vector = g.ty(rhs).shape.rank() == 1;
        let rhs = if vector {
            g.reshape_to(rhs, Shape::new(vec![n, 1])?)?
        } else {
            rhs
        };
        let (lu, rhs) = broadcast_batch(g, lu, rhs)?;
        let x = if trans {
            // aᵀ = Uᵀ Lᵀ P: solve Uᵀ z = b, Lᵀ y = z, then undo the interchanges backwards.
            let z = g.triangular_solve(lu, rhs, false, true, false)?;
            let y = g.triangular_solve(lu, z, true, true, true)?;
            interchange(g, y, piv, n, true)?
        } else {
            let pb = interchange(g, rhs, piv, n, false)?;
            let y = g.triangular_solve(lu, pb, true, false, true)?;
            g.triangular_solve(lu, y, false, false, false)?
        };
        if vector {
            let mut d = dims(g, x);
            d.pop();
            g.reshape_to(x, Shape::new(d)?)
        } else {
            Ok(x)
        }
    })
}

fn to_dtype(g: &mut GraphBuilder, x: NodeId, dtype: DType) -> Built {
    if g.ty(x).dtype == dtype {
        return Ok(x);
    }
    g.push(
        Op::Cast {
            to: dtype,
            weak: false,
        },
        &[x],
    )
}

/// `0, 1, ..., n-1` as a float64 constant of shape `[n]`.
fn positions(g: &mut GraphBuilder, n: usize) -> Built {
    let v: Vec<f64> = (0..n).map(|i| i as f64).collect();
    g.constant(HostData::F64(v.into()), Shape::new(vec![n])?, false)
}

/// The row mask `[n, 1]` (bool) of the rows equal to `index`, as a constant.
fn row_is(g: &mut GraphBuilder, n: usize, index: usize) -> Built {
    let v: Vec<bool> = (0..n).map(|i| i == index).collect();
    g.constant(HostData::Bool(v.into()), Shape::new(vec![n, 1])?, false)
}

/// Slice of the last two axes: rows `r0..r0 + nr`, columns `c0..c0 + nc`.
fn block(
    g: &mut GraphBuilder,
    m: NodeId,
    (r0, nr): (usize, usize),
    (c0, nc): (usize, usize),
) -> Built {
    let mut sizes = dims(g, m);
    let rank = sizes.len();
    let mut starts = vec![0; rank];
    starts[rank - 2] = r0;
    starts[rank - 1] = c0;
    sizes[rank - 2] = nr;
    sizes[rank - 1] = nc;
    g.slice(m, starts, sizes)
}

/// Exchanges rows `k` and the rows flagged by `is_p` (`[..., n, 1]` bool, one row) of `m`,
/// with `where`, so no other entry changes.
fn swap_rows(g: &mut GraphBuilder, m: NodeId, k: usize, is_p: NodeId) -> Built {
    let d = dims(g, m);
    let (n, cols) = (d[d.len() - 2], d[d.len() - 1]);
    let zero = g.weak_scalar(0.0);
    let picked = g.select(is_p, m, zero)?;
    let row_p = g.sum(picked, Some(&[-2]), true)?;
    let row_k = block(g, m, (k, 1), (0, cols))?;
    let is_k = row_is(g, n, k)?;
    let moved = g.select(is_p, row_k, m)?;
    g.select(is_k, row_p, moved)
}

/// The LU factorization of a float64 `[..., n, n]` matrix: `(lu, piv)`.
fn factor(g: &mut GraphBuilder, a: NodeId, n: usize) -> quabla_ir::Result<(NodeId, NodeId)> {
    let d = dims(g, a);
    let batch = d[..d.len() - 2].to_vec();
    let idx = positions(g, n)?;
    let mut m = a;
    let mut pivots = Vec::with_capacity(n);
    for k in 0..n {
        // The pivot: the first row >= k of largest |m[:, k]| (NaN never wins; with no
        // candidate, row k itself).
        let col = block(g, m, (0, n), (k, 1))?;
        let col = g.stop_gradient(col)?;
        let neg = g.unary(quabla_ir::UnaryOp::Neg, col)?;
        let zero = g.weak_scalar(0.0);
        let negative = g.compare(Comparison::Less, col, zero)?;
        let mag = g.select(negative, neg, col)?;
        let below: Vec<bool> = (0..n).map(|i| i >= k).collect();
        let below = g.constant(HostData::Bool(below.into()), Shape::new(vec![n, 1])?, false)?;
        let minus = g.weak_scalar(-1.0);
        let cand = g.select(below, mag, minus)?;
        let top = g.max(cand, Some(&[-2]), true)?;
        let is_max = g.compare(Comparison::Equal, cand, top)?;
        let counted = g.astype(is_max, DType::F64)?;
        let running = g.cumsum(counted, -2, false)?;
        let one = g.weak_scalar(1.0);
        let first = g.compare(Comparison::Equal, running, one)?;
        let is_p = {
            let no = f_bool(g)?;
            let both = g.select(is_max, first, no)?;
            let any = g.astype(both, DType::F64)?;
            let found = g.sum(any, Some(&[-2]), true)?;
            let zero = g.weak_scalar(0.0);
            let none = g.compare(Comparison::Equal, found, zero)?;
            let is_k = row_is(g, n, k)?;
            g.select(none, is_k, both)?
        };
        // piv[k] = the index of the pivot row.
        let flag = g.astype(is_p, DType::F64)?;
        let col_idx = g.reshape_to(idx, Shape::new(vec![n, 1])?)?;
        let weighted = g.mul(flag, col_idx)?;
        pivots.push(g.sum(weighted, Some(&[-2]), false)?);
        m = swap_rows(g, m, k, is_p)?;
        if k + 1 == n {
            break;
        }
        // Eliminate below the pivot.
        let r = n - k - 1;
        let pivot = block(g, m, (k, 1), (k, 1))?;
        let below_col = block(g, m, (k + 1, r), (k, 1))?;
        let l = g.div(below_col, pivot)?;
        let pivot_row = block(g, m, (k, 1), (k + 1, r))?;
        let update = g.mul(l, pivot_row)?;
        let trailing = block(g, m, (k + 1, r), (k + 1, r))?;
        let trailing = g.sub(trailing, update)?;
        let lower_rows = if k == 0 {
            g.concat(&[l, trailing], -1)?
        } else {
            let left = block(g, m, (k + 1, r), (0, k))?;
            g.concat(&[left, l, trailing], -1)?
        };
        let upper_rows = block(g, m, (0, k + 1), (0, n))?;
        m = g.concat(&[upper_rows, lower_rows], -2)?;
    }
    let piv = g.concat(&pivots, -1)?;
    let mut piv_dims = batch;
    piv_dims.push(n);
    let piv = g.reshape_to(piv, Shape::new(piv_dims)?)?;
    Ok((m, piv))
}

fn f_bool(g: &mut GraphBuilder) -> Built {
    g.constant(HostData::Bool(vec![false].into()), Shape::scalar(), false)
}

/// Applies the row interchanges `piv` (`[..., n]`) to `m` (`[..., n, k]`): in order, row `j`
/// with row `piv[j]`; `inverse` undoes them (in reverse order).
fn interchange(g: &mut GraphBuilder, m: NodeId, piv: NodeId, n: usize, inverse: bool) -> Built {
    let piv = to_dtype(g, piv, DType::F64)?;
    let idx = positions(g, n)?;
    let col_idx = g.reshape_to(idx, Shape::new(vec![n, 1])?)?;
    let pd = dims(g, piv);
    let mut m = m;
    let steps: Vec<usize> = if inverse {
        (0..n).rev().collect()
    } else {
        (0..n).collect()
    };
    for j in steps {
        // piv[..., j] as [..., 1, 1], compared with the row positions: the one-hot row mask.
        let mut starts = vec![0; pd.len()];
        let mut sizes = pd.clone();
        starts[pd.len() - 1] = j;
        sizes[pd.len() - 1] = 1;
        let pj = g.slice(piv, starts, sizes)?;
        let mut shape = pd[..pd.len() - 1].to_vec();
        shape.extend([1, 1]);
        let pj = g.reshape_to(pj, Shape::new(shape)?)?;
        let is_p = g.compare(Comparison::Equal, col_idx, pj)?;
        m = swap_rows(g, m, j, is_p)?;
    }
    Ok(m)
}
