//! The checked builder: NumPy-style graph construction on top of [`GraphBuilder`], with dtype
//! promotion and weak scalars (numerics.md §2), axis normalization and typed errors.
//!
//! Promotion is recorded explicitly: a weak scalar meeting a float32 array is cast to float32
//! (`0.5 * x32` stays float32), a bool meeting a float array is cast to 0/1 in that dtype, and
//! strong float32 and float64 never mix (DT1 names `astype`). Integers follow the chain
//! `bool < int32 < int64 < float32 < float64` (numerics.md §12): a weak int adopts the array's
//! dtype, a weak float meeting an integer array gives float64, and float-only functions
//! (transcendentals, `/`, `mean`, linear algebra) convert integer operands to float64 first,
//! while the rounding functions are the identity on integers. The strict type rules of
//! [`crate::infer`] then see operands of one dtype.

use crate::error::{IrError, Result};
use crate::graph::{GraphBuilder, NodeId, TensorType};
use crate::op::{BinaryOp, Comparison, Op, Reducer, UnaryOp};
use crate::shape::{broadcast_shapes, normalize_axis};
use crate::{DType, HostData, Shape};

/// The name an operator is reported under in dtype errors (`tensor + operands ...`).
fn display_name(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        BinaryOp::Mul => "*",
        BinaryOp::Div => "/",
        other => other.name(),
    }
}

/// The dtype and weak flag of a weak operand of `weak` meeting a strong one of `strong`
/// (numerics.md §2.1, §12).
fn adopt(weak: DType, strong: DType) -> (DType, bool) {
    if strong == DType::Bool {
        // A bool array meeting a weak scalar: a weak result that still adopts a later array.
        (weak, true)
    } else if weak.is_float() && strong.is_integer() {
        // A weak float meeting an integer array: the default float dtype.
        (DType::F64, false)
    } else {
        (strong, false)
    }
}

impl GraphBuilder {
    /// A named input of the given type.
    pub fn input(&mut self, name: impl Into<String>, ty: TensorType) -> NodeId {
        let op = Op::Input {
            name: name.into(),
            ty: ty.clone(),
        };
        self.push_typed(op, Vec::new(), ty)
    }

    /// A constant array; `data.len()` must equal the shape's size.
    pub fn constant(&mut self, data: HostData, shape: Shape, weak: bool) -> Result<NodeId> {
        self.push(Op::Constant { data, shape, weak }, &[])
    }

    /// A rank-0 constant of `dtype` holding `value` rounded to that dtype.
    pub fn scalar(&mut self, value: f64, dtype: DType, weak: bool) -> NodeId {
        let ty = TensorType {
            dtype,
            shape: Shape::scalar(),
            weak,
        };
        let op = Op::Constant {
            data: HostData::filled(dtype, value, 1),
            shape: Shape::scalar(),
            weak,
        };
        self.push_typed(op, Vec::new(), ty)
    }

    /// A weak float64 scalar: the IR form of a Rust `f64` operand.
    pub fn weak_scalar(&mut self, value: f64) -> NodeId {
        self.scalar(value, DType::F64, true)
    }

    /// A weak int64 scalar: the IR form of a Python `int` (Rust `i64`) operand, which adopts
    /// the dtype of the array it meets (numerics.md §12).
    pub fn weak_int(&mut self, value: i64) -> NodeId {
        let ty = TensorType {
            dtype: DType::I64,
            shape: Shape::scalar(),
            weak: true,
        };
        let op = Op::Constant {
            data: HostData::I64(vec![value].into()),
            shape: Shape::scalar(),
            weak: true,
        };
        self.push_typed(op, Vec::new(), ty)
    }

    /// `x` converted to float64 when it is an integer (keeping its weak flag), for the
    /// float-only functions (numerics.md §12); `x` itself otherwise.
    pub fn float_if_integer(&mut self, x: NodeId) -> Result<NodeId> {
        let ty = self.ty(x).clone();
        if ty.dtype.is_integer() {
            self.cast_to(x, DType::F64, ty.weak)
        } else {
            Ok(x)
        }
    }

    /// `astype`: explicit conversion; returns `x` itself when the dtype already matches and
    /// `x` is strong (numerics.md §1.4). The result is strong.
    pub fn astype(&mut self, x: NodeId, to: DType) -> Result<NodeId> {
        let ty = self.ty(x);
        if ty.dtype == to && !ty.weak {
            return Ok(x);
        }
        self.push(Op::Cast { to, weak: false }, &[x])
    }

    fn cast_to(&mut self, x: NodeId, to: DType, weak: bool) -> Result<NodeId> {
        let ty = self.ty(x);
        if ty.dtype == to && ty.weak == weak {
            return Ok(x);
        }
        self.push(Op::Cast { to, weak }, &[x])
    }

    /// Brings two operands to one dtype under the table of numerics.md §2.1 and the integer
    /// chain of §12. `arith` is false for `equal`/`not_equal`/`where` and the bitwise
    /// functions, where two bools are fine.
    fn promote(
        &mut self,
        name: &str,
        a: NodeId,
        b: NodeId,
        arith: bool,
    ) -> Result<(NodeId, NodeId)> {
        let (ta, tb) = (self.ty(a).clone(), self.ty(b).clone());
        let (da, db) = (ta.dtype, tb.dtype);
        if da == DType::Bool && db == DType::Bool {
            return if arith {
                Err(IrError::BoolOperand { op: name.into() })
            } else {
                Ok((a, b))
            };
        }
        if da == db {
            // Same dtype: nothing to convert (the result is weak only when both are, which
            // type inference decides); a cast that only drops the weak flag would be a node.
            return Ok((a, b));
        }
        let (dtype, weak) = match (ta.weak, tb.weak) {
            (false, false) => match da.join(db) {
                Some(d) => (d, false),
                None => {
                    return Err(IrError::DtypeMismatch {
                        op: name.into(),
                        lhs: da,
                        rhs: db,
                    })
                }
            },
            (true, false) => adopt(da, db),
            (false, true) => adopt(db, da),
            // Two weak values of different float dtypes: float32 wins, like a float32 array
            // meeting a weak scalar; a weak int meeting a weak float becomes that float.
            (true, true) if da.is_float() && db.is_float() => (DType::F32, true),
            (true, true) => (da.join(db).unwrap_or(DType::F64), true),
        };
        Ok((self.cast_to(a, dtype, weak)?, self.cast_to(b, dtype, weak)?))
    }

    /// Broadcasting arithmetic with promotion; integer operands of a float-only function
    /// (`div`, `atan2`, `fmod`) are converted to float64.
    pub fn binary(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> Result<NodeId> {
        let (mut a, mut b) = self.promote(display_name(op), a, b, !op.is_bitwise())?;
        if op.is_float_only() {
            a = self.float_if_integer(a)?;
            b = self.float_if_integer(b)?;
        }
        self.push(Op::Binary(op), &[a, b])
    }

    pub fn add(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.binary(BinaryOp::Add, a, b)
    }

    pub fn sub(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.binary(BinaryOp::Sub, a, b)
    }

    pub fn mul(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.binary(BinaryOp::Mul, a, b)
    }

    pub fn div(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.binary(BinaryOp::Div, a, b)
    }

    /// Elementwise comparison producing bool. Ordering predicates reject bool operands.
    pub fn compare(&mut self, c: Comparison, a: NodeId, b: NodeId) -> Result<NodeId> {
        if c.is_ordering() && (self.ty(a).dtype == DType::Bool || self.ty(b).dtype == DType::Bool) {
            return Err(IrError::BoolOperand {
                op: c.name().into(),
            });
        }
        let (a, b) = self.promote(c.name(), a, b, false)?;
        self.push(Op::Compare(c), &[a, b])
    }

    /// `where(pred, a, b)`: `pred` must be bool; `a` and `b` promote as in arithmetic, except
    /// that two bools give bool.
    pub fn select(&mut self, pred: NodeId, a: NodeId, b: NodeId) -> Result<NodeId> {
        if self.ty(pred).dtype != DType::Bool {
            return Err(IrError::RequiresBool {
                op: "where condition".into(),
            });
        }
        let (a, b) = self.promote("where", a, b, false)?;
        self.push(Op::Where, &[pred, a, b])
    }

    /// A unary function; integer operands of a float-only function are converted to float64,
    /// and the rounding functions return an integer operand unchanged.
    pub fn unary(&mut self, op: UnaryOp, x: NodeId) -> Result<NodeId> {
        if self.ty(x).dtype.is_integer() && !op.takes_integers() {
            if op.is_rounding() {
                return Ok(x);
            }
            let x = self.float_if_integer(x)?;
            return self.push(Op::Unary(op), &[x]);
        }
        self.push(Op::Unary(op), &[x])
    }

    pub fn powi(&mut self, x: NodeId, exponent: i32) -> Result<NodeId> {
        self.push(Op::Powi(exponent), &[x])
    }

    pub fn stop_gradient(&mut self, x: NodeId) -> Result<NodeId> {
        self.push(Op::StopGradient, &[x])
    }

    /// Normalized, sorted axes; `None` means every axis.
    fn reduction_axes(&self, op: &str, x: NodeId, axes: Option<&[isize]>) -> Result<Vec<usize>> {
        let shape = &self.ty(x).shape;
        let mut axes = match axes {
            None => (0..shape.rank()).collect(),
            Some(a) => shape.axes(op, a)?,
        };
        axes.sort_unstable();
        Ok(axes)
    }

    /// Re-inserts unit axes at `axes` (sorted) after a reduction, for `keepdims`.
    fn keep_dims(
        &mut self,
        reduced: NodeId,
        input_shape: &Shape,
        axes: &[usize],
    ) -> Result<NodeId> {
        let dims: Vec<usize> = input_shape
            .dims()
            .iter()
            .enumerate()
            .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
            .collect();
        self.reshape_to(reduced, Shape::new(dims)?)
    }

    fn reduce(
        &mut self,
        kind: Reducer,
        x: NodeId,
        axes: Option<&[isize]>,
        keepdims: bool,
    ) -> Result<NodeId> {
        let name = kind.name();
        if self.ty(x).dtype == DType::Bool {
            return Err(IrError::BoolOperand { op: name.into() });
        }
        let x = if kind == Reducer::Mean {
            self.float_if_integer(x)?
        } else {
            x
        };
        let shape = self.ty(x).shape.clone();
        let axes = self.reduction_axes(name, x, axes)?;
        let op = Op::reduce(kind, axes.clone(), shape.rank());
        let r = self.push(op, &[x])?;
        if keepdims {
            self.keep_dims(r, &shape, &axes)
        } else {
            Ok(r)
        }
    }

    /// `sum` over `axes` (`None`: all), accumulated in float64.
    pub fn sum(&mut self, x: NodeId, axes: Option<&[isize]>, keepdims: bool) -> Result<NodeId> {
        self.reduce(Reducer::Sum, x, axes, keepdims)
    }

    pub fn mean(&mut self, x: NodeId, axes: Option<&[isize]>, keepdims: bool) -> Result<NodeId> {
        self.reduce(Reducer::Mean, x, axes, keepdims)
    }

    pub fn max(&mut self, x: NodeId, axes: Option<&[isize]>, keepdims: bool) -> Result<NodeId> {
        self.reduce(Reducer::Max, x, axes, keepdims)
    }

    pub fn min(&mut self, x: NodeId, axes: Option<&[isize]>, keepdims: bool) -> Result<NodeId> {
        self.reduce(Reducer::Min, x, axes, keepdims)
    }

    pub fn cumsum(&mut self, x: NodeId, axis: isize, reverse: bool) -> Result<NodeId> {
        let axis = self.ty(x).shape.axis(axis)?;
        self.push(Op::Cumsum { axis, reverse }, &[x])
    }

    /// `reshape` with at most one `-1` (SH5).
    pub fn reshape(&mut self, x: NodeId, dims: &[isize]) -> Result<NodeId> {
        let size = self.ty(x).shape.size();
        let fail = || {
            IrError::shape(
                "reshape",
                format!("cannot reshape a tensor of {size} elements into shape {dims:?}"),
            )
        };
        let unknown: Vec<usize> = (0..dims.len()).filter(|&i| dims[i] == -1).collect();
        if unknown.len() > 1 || dims.iter().any(|&d| d < -1 || d == 0) {
            return Err(fail());
        }
        // Checked: extents from the caller may multiply past `usize` (no such shape can hold
        // `size` elements, so that is SH5 too).
        fn product(ds: impl IntoIterator<Item = usize>) -> Option<usize> {
            ds.into_iter().try_fold(1usize, |n, d| n.checked_mul(d))
        }
        let known =
            product(dims.iter().filter(|&&d| d > 0).map(|&d| d as usize)).ok_or_else(fail)?;
        let mut out: Vec<usize> = dims.iter().map(|&d| d.max(0) as usize).collect();
        if let Some(&u) = unknown.first() {
            if !size.is_multiple_of(known) {
                return Err(fail());
            }
            out[u] = size / known;
        }
        if product(out.iter().copied()) != Some(size) {
            return Err(fail());
        }
        self.reshape_to(x, Shape::new(out)?)
    }

    /// Reshape to a known shape; a no-op when the shape already matches.
    pub fn reshape_to(&mut self, x: NodeId, shape: Shape) -> Result<NodeId> {
        if self.ty(x).shape == shape {
            return Ok(x);
        }
        self.push(Op::Reshape { shape }, &[x])
    }

    /// `transpose`: reversal when `perm` is `None`.
    pub fn transpose(&mut self, x: NodeId, perm: Option<&[isize]>) -> Result<NodeId> {
        let rank = self.ty(x).shape.rank();
        let perm: Vec<usize> = match perm {
            None => (0..rank).rev().collect(),
            Some(p) => {
                if p.len() != rank {
                    return Err(IrError::shape(
                        "transpose",
                        format!("transpose axes {p:?} do not match a tensor of rank {rank}"),
                    ));
                }
                self.ty(x).shape.axes("transpose", p)?
            }
        };
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x);
        }
        self.push(Op::Transpose { perm }, &[x])
    }

    /// `broadcast_to` under trailing-axis rules (SH4).
    pub fn broadcast_to(&mut self, x: NodeId, shape: Shape) -> Result<NodeId> {
        if self.ty(x).shape == shape {
            return Ok(x);
        }
        self.push(Op::Broadcast { shape }, &[x])
    }

    /// Broadcasts several operands to their common shape.
    pub fn broadcast_all(&mut self, xs: &[NodeId]) -> Result<Vec<NodeId>> {
        let mut shape = Shape::scalar();
        for &x in xs {
            shape = broadcast_shapes(&shape, &self.ty(x).shape)?;
        }
        xs.iter()
            .map(|&x| self.broadcast_to(x, shape.clone()))
            .collect()
    }

    /// `concat` along `axis`; operands promote to one dtype first (DT1 on f32/f64 mixes).
    pub fn concat(&mut self, xs: &[NodeId], axis: isize) -> Result<NodeId> {
        let first = *xs.first().ok_or_else(|| IrError::InvalidArgument {
            message: "concat needs at least one tensor".into(),
        })?;
        let axis = normalize_axis(axis, self.ty(first).shape.rank())?;
        let mut operands = vec![first];
        for &x in &xs[1..] {
            let (a, b) = self.promote("concat", operands[0], x, false)?;
            operands[0] = a;
            operands.push(b);
        }
        // Re-promote earlier operands if the first one changed dtype on the way.
        let dtype = self.ty(operands[0]).dtype;
        for o in operands.iter_mut() {
            if self.ty(*o).dtype != dtype {
                *o = self.cast_to(*o, dtype, false)?;
            }
        }
        if operands.len() == 1 {
            return Ok(operands[0]);
        }
        self.push(Op::Concat { axis }, &operands)
    }

    /// The contiguous box `starts .. starts + sizes`.
    pub fn slice(&mut self, x: NodeId, starts: Vec<usize>, sizes: Vec<usize>) -> Result<NodeId> {
        if self.ty(x).shape.dims() == sizes.as_slice() {
            return Ok(x);
        }
        self.push(Op::Slice { starts, sizes }, &[x])
    }

    /// Static gather along `axis`; negative indices count from the end (IX1 when out of range).
    pub fn gather(&mut self, x: NodeId, indices: &[isize], axis: isize) -> Result<NodeId> {
        let shape = self.ty(x).shape.clone();
        let axis = shape.axis(axis)?;
        let indices = resolve_indices(indices, axis, shape.dims()[axis])?;
        self.push(Op::Gather { axis, indices }, &[x])
    }

    /// `scatter_add(base, indices, updates, axis)`.
    pub fn scatter_add(
        &mut self,
        base: NodeId,
        indices: &[isize],
        updates: NodeId,
        axis: isize,
    ) -> Result<NodeId> {
        let shape = self.ty(base).shape.clone();
        let axis = shape.axis(axis)?;
        let indices = resolve_indices(indices, axis, shape.dims()[axis])?;
        let (base, updates) = self.promote("scatter_add", base, updates, true)?;
        self.push(Op::ScatterAdd { axis, indices }, &[base, updates])
    }

    /// `index_gather(x, idx)` along `axis` with `batch` leading batch axes shared by `x` and
    /// `idx` (see [`Op::IndexGather`]); an index outside the axis reads zero.
    pub fn index_gather(
        &mut self,
        x: NodeId,
        idx: NodeId,
        axis: usize,
        batch: usize,
    ) -> Result<NodeId> {
        self.push(Op::IndexGather { axis, batch }, &[x, idx])
    }

    /// `index_scatter(base, idx, updates)` combining by `mode` (see [`Op::IndexScatter`]);
    /// `updates` is cast to the dtype of `base` first, and indices outside the axis are
    /// dropped.
    pub fn index_scatter(
        &mut self,
        base: NodeId,
        idx: NodeId,
        updates: NodeId,
        (axis, batch): (usize, usize),
        mode: crate::ScatterMode,
    ) -> Result<NodeId> {
        let dtype = self.ty(base).dtype;
        let updates = if self.ty(updates).dtype == dtype {
            updates
        } else {
            self.cast_to(updates, dtype, false)?
        };
        self.push(
            Op::IndexScatter { axis, batch, mode },
            &[base, idx, updates],
        )
    }

    /// `solve(a, b)` with the conventions of api.md §17 and numerics.md §6.1: `a` is
    /// `[..., n, n]`; a rank-1 `b` is one vector `[n]`, any other `b` a stack of right-hand sides
    /// `[..., n, k]`; the batch axes of `a` and `b` broadcast (`a [2, 2, 2]` with `b [2]` gives
    /// `[2, 2]`, with `b [2, 2, 3]` gives `[2, 2, 3]`).
    pub fn solve(&mut self, a: NodeId, rhs: NodeId) -> Result<NodeId> {
        self.batched_solve(Op::Solve { transpose_a: false }, a, rhs)
    }

    /// `triangular_solve(a, b)` (solving `op(a) x = b` reading one triangle of `a`) with the
    /// right-hand side and batch conventions of [`GraphBuilder::solve`].
    pub fn triangular_solve(
        &mut self,
        a: NodeId,
        rhs: NodeId,
        lower: bool,
        transpose_a: bool,
        unit_diagonal: bool,
    ) -> Result<NodeId> {
        let op = Op::TriangularSolve {
            lower,
            transpose_a,
            unit_diagonal,
        };
        self.batched_solve(op, a, rhs)
    }

    /// `op(a, b)` for an op of the `solve` family, whose node wants equal batch axes and a
    /// matrix right-hand side: a vector `b` becomes one column and the batch axes broadcast.
    fn batched_solve(&mut self, op: Op, a: NodeId, rhs: NodeId) -> Result<NodeId> {
        let name = op.name();
        let a = self.float_if_integer(a)?;
        let rhs = self.float_if_integer(rhs)?;
        let (sa, sb) = (self.ty(a).shape.clone(), self.ty(rhs).shape.clone());
        if sa.rank() < 2 {
            // The node's own check gives the square-matrix message.
            return self.push(op, &[a, rhs]);
        }
        let vector = sb.rank() == 1;
        let rhs = if vector {
            let n = sb.dims()[0];
            self.reshape_to(rhs, Shape::new(vec![n, 1])?)?
        } else if sb.rank() == 0 {
            return Err(IrError::shape(
                name,
                format!("{name}: the right-hand side must be a vector [n] or a stack of columns [..., n, k], got a rank-0 array"),
            ));
        } else {
            rhs
        };
        let sr = self.ty(rhs).shape.clone();
        let (ra, rr) = (sa.rank(), sr.rank());
        let batch = broadcast_shapes(
            &Shape::new(sa.dims()[..ra - 2].to_vec())?,
            &Shape::new(sr.dims()[..rr - 2].to_vec())?,
        )?;
        let full = |b: &mut GraphBuilder, n: NodeId, dims: &[usize]| {
            let mut full = batch.dims().to_vec();
            full.extend(&dims[dims.len() - 2..]);
            b.broadcast_to(n, Shape::new(full)?)
        };
        let a2 = full(self, a, sa.dims())?;
        let r2 = full(self, rhs, sr.dims())?;
        let x = self.push(op, &[a2, r2])?;
        if vector {
            let mut dims = self.ty(x).shape.dims().to_vec();
            dims.pop();
            self.reshape_to(x, Shape::new(dims)?)
        } else {
            Ok(x)
        }
    }

    /// `matmul` with NumPy rules: a rank-1 left operand is a row vector and a rank-1 right
    /// operand a column vector, their unit axes removed from the result; batch axes broadcast.
    pub fn matmul(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        let (a, b) = self.promote("matmul", a, b, true)?;
        let a = self.float_if_integer(a)?;
        let b = self.float_if_integer(b)?;
        let (ra, rb) = (self.ty(a).shape.rank(), self.ty(b).shape.rank());
        if ra == 0 || rb == 0 {
            return Err(IrError::shape(
                "matmul",
                "matmul: operands must have rank >= 1; use * for scalars",
            ));
        }
        let a2 = if ra == 1 {
            let n = self.ty(a).shape.dims()[0];
            self.reshape_to(a, Shape::new(vec![1, n])?)?
        } else {
            a
        };
        let b2 = if rb == 1 {
            let n = self.ty(b).shape.dims()[0];
            self.reshape_to(b, Shape::new(vec![n, 1])?)?
        } else {
            b
        };
        let (sa, sb) = (self.ty(a).shape.clone(), self.ty(b).shape.clone());
        let r = self.push(Op::Matmul, &[a2, b2]).map_err(|e| match e {
            IrError::Shape { op, message } if message.contains("inner dimensions") => {
                let k1 = sa.dims()[sa.rank() - 1];
                let k2 = sb.dims()[if rb == 1 { 0 } else { rb - 2 }];
                IrError::Shape {
                    op,
                    message: format!(
                        "matmul: inner dimensions differ ({k1} vs {k2}) for shapes {sa} and {sb}"
                    ),
                }
            }
            other => other,
        })?;
        if ra > 1 && rb > 1 {
            return Ok(r);
        }
        let mut dims = self.ty(r).shape.dims().to_vec();
        let rank = dims.len();
        if rb == 1 {
            dims.remove(rank - 1);
        }
        if ra == 1 {
            dims.remove(rank - 2);
        }
        self.reshape_to(r, Shape::new(dims)?)
    }
}

/// Resolves possibly negative static indices against an extent (IX1).
pub fn resolve_indices(indices: &[isize], axis: usize, extent: usize) -> Result<Vec<usize>> {
    indices
        .iter()
        .map(|&i| {
            let r = if i < 0 { i + extent as isize } else { i };
            if r < 0 || r >= extent as isize {
                Err(IrError::Index {
                    message: format!(
                        "index {i} is out of range for axis {axis} with extent {extent}"
                    ),
                })
            } else {
                Ok(r as usize)
            }
        })
        .collect()
}
