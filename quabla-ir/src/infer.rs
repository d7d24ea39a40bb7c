//! Type rules: the dtype, shape and weak flag of every op's result, or the typed error that
//! explains why the operands do not fit (one exhaustive match over [`Op`]).
//!
//! These rules are strict: operands of arithmetic already share one float dtype. Promotion
//! (weak scalars adopting a dtype, bool as 0/1) is the builder's job, which records it as
//! explicit casts (numerics.md §2.1 rule 2).

use crate::error::{IrError, Result};
use crate::graph::TensorType;
use crate::op::{Arity, LinalgKind, Op, Reducer, UnaryOp};
use crate::shape::{broadcast_shapes, broadcasts_to};
use crate::{DType, Shape};

/// Infers the result type of `op` applied to operands of the given types.
pub fn infer_type(op: &Op, operands: &[&TensorType]) -> Result<TensorType> {
    check_arity(op, operands.len())?;
    let name = op.name();
    match op {
        Op::Input { ty, .. } => Ok(ty.clone()),
        Op::Constant { data, shape, weak } => {
            if data.len() != shape.size() {
                return Err(IrError::verify(format!(
                    "constant of shape {shape} holds {} values",
                    data.len()
                )));
            }
            Ok(TensorType {
                dtype: data.dtype(),
                shape: shape.clone(),
                weak: *weak,
            })
        }
        Op::Cast { to, weak } => Ok(TensorType {
            dtype: *to,
            shape: operands[0].shape.clone(),
            weak: *weak,
        }),
        Op::StopGradient | Op::DebugPrint { .. } => Ok(operands[0].clone()),
        Op::Unary(u) => {
            let x = operands[0];
            match u {
                UnaryOp::Neg => require_numeric(name, x)?,
                UnaryOp::BitNot => require_integer_or_bool(name, x)?,
                _ => require_float(name, x)?,
            }
            Ok(x.clone())
        }
        Op::Powi(_) => {
            let x = operands[0];
            require_numeric(name, x)?;
            Ok(x.clone())
        }
        Op::Binary(op) => {
            let (a, b) = (operands[0], operands[1]);
            for t in [a, b] {
                if op.is_bitwise() {
                    require_integer_or_bool(name, t)?;
                } else if op.is_integer_only() {
                    require_integer(name, t)?;
                } else if op.is_float_only() {
                    require_float(name, t)?;
                } else {
                    require_numeric(name, t)?;
                }
            }
            let dtype = same_dtype(name, a, b)?;
            Ok(TensorType {
                dtype,
                shape: broadcast_shapes(&a.shape, &b.shape)?,
                weak: a.weak && b.weak,
            })
        }
        Op::Compare(c) => {
            let (a, b) = (operands[0], operands[1]);
            if c.is_ordering() && (a.dtype == DType::Bool || b.dtype == DType::Bool) {
                return Err(IrError::BoolOperand { op: name.into() });
            }
            same_dtype(name, a, b)?;
            Ok(TensorType::new(
                DType::Bool,
                broadcast_shapes(&a.shape, &b.shape)?,
            ))
        }
        Op::Where => {
            let (p, a, b) = (operands[0], operands[1], operands[2]);
            if p.dtype != DType::Bool {
                return Err(IrError::RequiresBool {
                    op: "where predicate".into(),
                });
            }
            let dtype = same_dtype(name, a, b)?;
            let shape = broadcast_shapes(&broadcast_shapes(&p.shape, &a.shape)?, &b.shape)?;
            Ok(TensorType {
                dtype,
                shape,
                weak: a.weak && b.weak,
            })
        }
        Op::Reduce { kind, axes } => {
            let x = operands[0];
            if kind.reducer() == Reducer::Mean {
                require_float(name, x)?;
            } else {
                require_numeric(name, x)?;
            }
            check_axes(name, axes, x.shape.rank())?;
            if kind.is_whole() && axes.len() != x.shape.rank() {
                return Err(IrError::verify(format!(
                    "{name} reduces every axis of its operand, but lists {axes:?} of rank {}",
                    x.shape.rank()
                )));
            }
            let dims: Vec<usize> = x
                .shape
                .dims()
                .iter()
                .enumerate()
                .filter(|(i, _)| !axes.contains(i))
                .map(|(_, &d)| d)
                .collect();
            Ok(TensorType::new(x.dtype, Shape::new(dims)?))
        }
        Op::Cumsum { axis, .. } => {
            let x = operands[0];
            require_numeric(name, x)?;
            check_axes(name, &[*axis], x.shape.rank())?;
            Ok(TensorType::new(x.dtype, x.shape.clone()))
        }
        Op::Reshape { shape } => {
            let x = operands[0];
            if x.shape.size() != shape.size() {
                return Err(IrError::shape(
                    name,
                    format!(
                        "cannot reshape a tensor of {} elements into shape {shape}",
                        x.shape.size()
                    ),
                ));
            }
            Ok(TensorType {
                shape: shape.clone(),
                ..x.clone()
            })
        }
        Op::Transpose { perm } => {
            let x = operands[0];
            let rank = x.shape.rank();
            let mut seen = vec![false; rank];
            if perm.len() != rank
                || perm
                    .iter()
                    .any(|&p| p >= rank || std::mem::replace(&mut seen[p], true))
            {
                return Err(IrError::shape(
                    name,
                    format!("transpose permutation {perm:?} is not a permutation of {rank} axes"),
                ));
            }
            let dims: Vec<usize> = perm.iter().map(|&p| x.shape.dims()[p]).collect();
            Ok(TensorType {
                shape: Shape::new(dims)?,
                ..x.clone()
            })
        }
        Op::Broadcast { shape } => {
            let x = operands[0];
            if !broadcasts_to(&x.shape, shape) {
                return Err(IrError::shape(
                    name,
                    format!(
                        "operands could not be broadcast together with shapes {} and {shape}",
                        x.shape
                    ),
                ));
            }
            Ok(TensorType {
                shape: shape.clone(),
                ..x.clone()
            })
        }
        Op::Concat { axis } => {
            let first = operands[0];
            let rank = first.shape.rank();
            check_axes(name, &[*axis], rank)?;
            let mut extent: usize = 0;
            let mut weak = true;
            for t in operands {
                same_dtype(name, first, t)?;
                let same_elsewhere = t.shape.rank() == rank
                    && (0..rank).all(|i| i == *axis || t.shape.dims()[i] == first.shape.dims()[i]);
                if !same_elsewhere {
                    return Err(IrError::shape(
                        name,
                        format!(
                            "concat: shapes differ along non-concatenated axes: {} and {}",
                            first.shape, t.shape
                        ),
                    ));
                }
                // Checked: traced operands hold no memory, so their extents can sum past
                // `usize`; such a result could never be addressed.
                extent = match extent.checked_add(t.shape.dims()[*axis]) {
                    Some(e) => e,
                    None => {
                        return Err(IrError::shape(
                            name,
                            format!(
                                "concat: the result along axis {axis} has more elements than \
                                 this machine can address"
                            ),
                        ))
                    }
                };
                weak &= t.weak;
            }
            let mut dims = first.shape.dims().to_vec();
            dims[*axis] = extent;
            Ok(TensorType {
                dtype: first.dtype,
                shape: Shape::new(dims)?,
                weak,
            })
        }
        Op::Slice { starts, sizes } => {
            let x = operands[0];
            check_box(name, starts, sizes, x.shape.dims())?;
            Ok(TensorType {
                shape: Shape::new(sizes.clone())?,
                ..x.clone()
            })
        }
        Op::PadSlice { starts, shape } => {
            let x = operands[0];
            require_numeric(name, x)?;
            check_box(name, starts, x.shape.dims(), shape.dims())?;
            Ok(TensorType {
                shape: shape.clone(),
                ..x.clone()
            })
        }
        Op::Gather { axis, indices } => {
            let x = operands[0];
            check_axes(name, &[*axis], x.shape.rank())?;
            check_indices(indices, *axis, x.shape.dims()[*axis])?;
            let mut dims = x.shape.dims().to_vec();
            dims[*axis] = indices.len();
            Ok(TensorType {
                shape: Shape::new(dims)?,
                ..x.clone()
            })
        }
        Op::IndexGather { .. } | Op::IndexScatter { .. } => crate::indexed::infer(op, operands),
        Op::ScatterAdd { axis, indices } => {
            let (base, upd) = (operands[0], operands[1]);
            require_numeric(name, base)?;
            let dtype = same_dtype(name, base, upd)?;
            check_axes(name, &[*axis], base.shape.rank())?;
            check_indices(indices, *axis, base.shape.dims()[*axis])?;
            let mut expected = base.shape.dims().to_vec();
            expected[*axis] = indices.len();
            if upd.shape.dims() != expected.as_slice() {
                return Err(IrError::shape(
                    name,
                    format!(
                        "scatter_add: updates of shape {} do not match the {} selected slices of shape {}",
                        upd.shape,
                        indices.len(),
                        base.shape
                    ),
                ));
            }
            Ok(TensorType {
                dtype,
                shape: base.shape.clone(),
                weak: base.weak && upd.weak,
            })
        }
        Op::Matmul => {
            let (a, b) = (operands[0], operands[1]);
            require_float(name, a)?;
            require_float(name, b)?;
            let dtype = same_dtype(name, a, b)?;
            let (ad, bd) = (a.shape.dims(), b.shape.dims());
            if ad.len() < 2 || bd.len() < 2 {
                return Err(IrError::shape(
                    name,
                    "the matmul op requires operands of rank >= 2",
                ));
            }
            let (m, k1) = (ad[ad.len() - 2], ad[ad.len() - 1]);
            let (k2, n) = (bd[bd.len() - 2], bd[bd.len() - 1]);
            if k1 != k2 {
                return Err(IrError::shape(
                    name,
                    format!(
                        "matmul: inner dimensions differ ({k1} vs {k2}) for shapes {} and {}",
                        a.shape, b.shape
                    ),
                ));
            }
            let batch = broadcast_shapes(
                &Shape::new(ad[..ad.len() - 2].to_vec())?,
                &Shape::new(bd[..bd.len() - 2].to_vec())?,
            )?;
            let mut dims = batch.dims().to_vec();
            dims.extend([m, n]);
            Ok(TensorType::new(dtype, Shape::new(dims)?))
        }
        Op::Solve { .. } | Op::TriangularSolve { .. } => {
            let (a, b) = (operands[0], operands[1]);
            // DT2 before the dtype match: a bool matrix is not a dtype mix.
            if a.dtype == DType::Bool || b.dtype == DType::Bool {
                return Err(IrError::BoolOperand { op: name.into() });
            }
            let dtype = same_dtype(name, a, b)?;
            let n = square(name, a)?;
            let bd = b.shape.dims();
            if bd.len() != a.shape.rank() || bd[..bd.len() - 2] != a.shape.dims()[..bd.len() - 2] {
                return Err(IrError::shape(
                    name,
                    format!(
                        "{name}: right-hand side of shape {} must be [..., n, k] with the batch axes of {}",
                        b.shape, a.shape
                    ),
                ));
            }
            if bd[bd.len() - 2] != n {
                return Err(IrError::shape(
                    name,
                    format!(
                        "{name}: matrix has {n} rows but the right-hand side has {}",
                        bd[bd.len() - 2]
                    ),
                ));
            }
            Ok(TensorType::new(dtype, b.shape.clone()))
        }
        Op::Cholesky => {
            square(name, operands[0])?;
            Ok(TensorType::new(
                operands[0].dtype,
                operands[0].shape.clone(),
            ))
        }
        Op::CholeskyAd => {
            let (l, da) = (operands[0], operands[1]);
            square(name, l)?;
            let dtype = same_dtype(name, l, da)?;
            if l.shape != da.shape {
                return Err(IrError::shape(
                    name,
                    format!(
                        "cholesky_ad: tangent of shape {} for a factor of shape {}",
                        da.shape, l.shape
                    ),
                ));
            }
            Ok(TensorType::new(dtype, l.shape.clone()))
        }
        Op::Linalg(kind) => {
            let x = operands[0];
            require_float(name, x)?;
            let d = x.shape.dims();
            if d.len() < 2 {
                return Err(IrError::shape(
                    name,
                    format!(
                        "{} expects matrices of shape [..., m, n], got {}",
                        kind.name(),
                        x.shape
                    ),
                ));
            }
            let batch = &d[..d.len() - 2];
            let (m, n) = (d[d.len() - 2], d[d.len() - 1]);
            let k = m.min(n);
            let square_only = matches!(
                kind,
                LinalgKind::DetSign
                    | LinalgKind::LogAbsDet
                    | LinalgKind::EighValues
                    | LinalgKind::EighVectors
            );
            if square_only {
                square(kind.name(), x)?;
            }
            let tail: Vec<usize> = match kind {
                LinalgKind::DetSign | LinalgKind::LogAbsDet => vec![],
                LinalgKind::EighValues => vec![n],
                LinalgKind::EighVectors => vec![n, n],
                LinalgKind::QrR => vec![k, n],
                LinalgKind::QrQ => vec![m, k],
                LinalgKind::QrQComplete => vec![m, m],
                LinalgKind::SvdS => vec![k],
                LinalgKind::SvdU => vec![m, k],
                LinalgKind::SvdUFull => vec![m, m],
                LinalgKind::SvdVh => vec![k, n],
                LinalgKind::SvdVhFull => vec![n, n],
            };
            let mut dims = batch.to_vec();
            dims.extend(tail);
            Ok(TensorType::new(x.dtype, Shape::new(dims)?))
        }
        Op::Custom(call) => {
            let primal = &call.rule.primal;
            let inputs: Vec<_> = primal.inputs().collect();
            if inputs.len() != operands.len() {
                return Err(IrError::verify(format!(
                    "custom rule {} takes {} operands, got {}",
                    call.rule.name,
                    inputs.len(),
                    operands.len()
                )));
            }
            for ((_, input_name, ty), given) in inputs.iter().zip(operands) {
                if ty.dtype != given.dtype || ty.shape != given.shape {
                    return Err(IrError::verify(format!(
                        "custom rule {} input {input_name} is {ty} but the operand is {given}",
                        call.rule.name
                    )));
                }
            }
            let out = primal.outputs().get(call.output).ok_or_else(|| {
                IrError::verify(format!(
                    "custom rule {} has no output {}",
                    call.rule.name, call.output
                ))
            })?;
            let ty = &primal.node(*out).ty;
            Ok(TensorType::new(ty.dtype, ty.shape.clone()))
        }
        Op::Region(call) => {
            let region = &call.region;
            for (k, (want, given)) in region.operand_types().iter().zip(operands).enumerate() {
                if want.dtype != given.dtype || want.shape != given.shape {
                    return Err(IrError::verify(format!(
                        "{} operand {k} must be {want}, got {given}",
                        region.form().name()
                    )));
                }
            }
            region
                .output_types()
                .get(call.output)
                .cloned()
                .ok_or_else(|| {
                    IrError::verify(format!(
                        "{} region has no output {}",
                        region.form().name(),
                        call.output
                    ))
                })
        }
    }
}

/// The number of operands each op takes, from the op table.
fn check_arity(op: &Op, n: usize) -> Result<()> {
    let expected = match op.kind().arity() {
        Arity::Exactly(e) => e,
        Arity::AtLeastOne if n >= 1 => return Ok(()),
        Arity::AtLeastOne => {
            return Err(IrError::verify(format!(
                "{} needs at least one operand",
                op.name()
            )))
        }
        // The rule's type check compares the operands with the primal's inputs.
        Arity::OfRule => return Ok(()),
        Arity::OfRegion => match op {
            Op::Region(call) => call.region.operand_types().len(),
            _ => 0,
        },
    };
    if expected != n {
        return Err(IrError::verify(format!(
            "{} takes {expected} operands, got {n}",
            op.name()
        )));
    }
    Ok(())
}

/// A float operand (bool: DT2; integers: the integer form of DT2).
fn require_float(op: &str, t: &TensorType) -> Result<()> {
    require_numeric(op, t)?;
    if t.dtype.is_integer() {
        return Err(IrError::WrongDtypeKind {
            op: op.into(),
            dtype: t.dtype,
            fix: "convert with astype(quabla.float64) first".into(),
        });
    }
    Ok(())
}

/// A float or integer operand (not bool: DT2).
fn require_numeric(op: &str, t: &TensorType) -> Result<()> {
    if t.dtype == DType::Bool {
        return Err(IrError::BoolOperand { op: op.into() });
    }
    Ok(())
}

/// An integer operand.
fn require_integer(op: &str, t: &TensorType) -> Result<()> {
    if !t.dtype.is_integer() {
        return Err(IrError::WrongDtypeKind {
            op: op.into(),
            dtype: t.dtype,
            fix: "it takes int32 or int64 operands; convert with astype(quabla.int64) first".into(),
        });
    }
    Ok(())
}

/// An integer or bool operand (bitwise functions).
fn require_integer_or_bool(op: &str, t: &TensorType) -> Result<()> {
    if t.dtype.is_float() {
        return Err(IrError::WrongDtypeKind {
            op: op.into(),
            dtype: t.dtype,
            fix: "it takes integer or bool operands; convert with astype(quabla.int64) first"
                .into(),
        });
    }
    Ok(())
}

fn same_dtype(op: &str, a: &TensorType, b: &TensorType) -> Result<DType> {
    if a.dtype != b.dtype {
        return Err(IrError::DtypeMismatch {
            op: op.into(),
            lhs: a.dtype,
            rhs: b.dtype,
        });
    }
    Ok(a.dtype)
}

/// SH7: a float matrix `[..., n, n]`; returns `n`.
fn square(name: &str, t: &TensorType) -> Result<usize> {
    require_float(name, t)?;
    let d = t.shape.dims();
    if d.len() < 2 || d[d.len() - 1] != d[d.len() - 2] {
        return Err(IrError::shape(
            name,
            format!(
                "{name} expects square matrices of shape [..., n, n], got {}",
                t.shape
            ),
        ));
    }
    Ok(d[d.len() - 1])
}

/// Axes attributes are sorted, distinct and in range (the builder normalizes them).
fn check_axes(op: &str, axes: &[usize], rank: usize) -> Result<()> {
    for (i, &a) in axes.iter().enumerate() {
        if a >= rank {
            return Err(IrError::axis_out_of_range(a as isize, rank));
        }
        if i > 0 && axes[i - 1] >= a {
            return Err(IrError::shape(
                op,
                format!("repeated axis in {op}: {axes:?}"),
            ));
        }
    }
    Ok(())
}

fn check_box(op: &str, starts: &[usize], sizes: &[usize], full: &[usize]) -> Result<()> {
    if starts.len() != full.len() || sizes.len() != full.len() {
        return Err(IrError::shape(
            op,
            format!(
                "{op}: starts {starts:?} and sizes {sizes:?} must have one entry per axis of {full:?}"
            ),
        ));
    }
    for axis in 0..full.len() {
        if sizes[axis] == 0 {
            return Err(IrError::shape(
                op,
                format!("empty slices are not supported: {op} of {sizes:?} selects no elements"),
            ));
        }
        // In u128: a start and a size from the caller may sum past `usize`.
        let last = starts[axis] as u128 + sizes[axis] as u128 - 1;
        if last >= full[axis] as u128 {
            return Err(IrError::Index {
                message: format!(
                    "index {last} is out of range for axis {axis} with extent {}",
                    full[axis]
                ),
            });
        }
    }
    Ok(())
}

fn check_indices(indices: &[usize], axis: usize, extent: usize) -> Result<()> {
    if indices.is_empty() {
        return Err(IrError::shape(
            "gather",
            "empty slices are not supported: an empty index list selects no elements",
        ));
    }
    if let Some(&i) = indices.iter().find(|&&i| i >= extent) {
        return Err(IrError::Index {
            message: format!("index {i} is out of range for axis {axis} with extent {extent}"),
        });
    }
    Ok(())
}
