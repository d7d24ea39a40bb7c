//! Products (api.md §8): `matmul` with NumPy's rules (rank-1 operands are promoted to a row or
//! column vector and the unit axis removed again; batch axes broadcast), and `dot`, `outer`,
//! `tensordot`, `kron`, `cross` and the matrix-product spellings of `einsum`, all lowered to
//! `matmul`, broadcasts and elementwise products.

use super::{dims, operand_tensor, take};
use crate::dispatch::apply;
use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{normalize_axis, GraphBuilder, IrError, NodeId, Shape};

type Built = quabla_ir::Result<NodeId>;

/// Matrix product with NumPy rules.
#[track_caller]
pub fn matmul(a: impl Into<Operand>, c: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into(), c.into()], |b, x| b.matmul(x[0], x[1]))
}

super::tensor_methods! {
    /// `matmul` and `dot` on `Result<Tensor>`.
    pub trait ProductExt;
    /// Matrix product with NumPy rules (rank-1 operands allowed).
    pub fn matmul(&self, other: impl Into<Operand>) -> Result<Tensor> {
        matmul(self, other)
    }

    /// NumPy `dot` (see [`dot`]).
    pub fn dot(&self, other: impl Into<Operand>) -> Result<Tensor> {
        dot(self, other)
    }
}

/// Contracts axes `ca` of `a` with axes `cc` of `c` (pairwise); the result has the free axes
/// of `a`, then those of `c`.
#[track_caller]
fn build_tensordot(
    b: &mut GraphBuilder,
    a: NodeId,
    c: NodeId,
    ca: &[usize],
    cc: &[usize],
    op: &str,
) -> Built {
    let (da, dc) = (dims(b, a), dims(b, c));
    let (sa, sc) = (b.ty(a).shape.clone(), b.ty(c).shape.clone());
    if ca.len() != cc.len() {
        return Err(IrError::Shape {
            op: op.into(),
            message: format!(
                "{op}: the axis lists have different lengths ({} and {})",
                ca.len(),
                cc.len()
            ),
        });
    }
    for (&i, &j) in ca.iter().zip(cc) {
        if da[i] != dc[j] {
            return Err(IrError::Shape {
                op: op.into(),
                message: format!(
                    "{op}: inner dimensions differ ({} vs {}) for shapes {sa} and {sc}",
                    da[i], dc[j]
                ),
            });
        }
    }
    let free_a: Vec<usize> = (0..da.len()).filter(|i| !ca.contains(i)).collect();
    let free_c: Vec<usize> = (0..dc.len()).filter(|j| !cc.contains(j)).collect();
    let k: usize = ca.iter().map(|&i| da[i]).product();
    let fa: usize = free_a.iter().map(|&i| da[i]).product();
    let fc: usize = free_c.iter().map(|&j| dc[j]).product();
    let perm_a: Vec<isize> = free_a.iter().chain(ca).map(|&i| i as isize).collect();
    let perm_c: Vec<isize> = cc.iter().chain(&free_c).map(|&j| j as isize).collect();
    let ta = b.transpose(a, Some(&perm_a))?;
    let ta = b.reshape_to(ta, Shape::new(vec![fa, k])?)?;
    let tc = b.transpose(c, Some(&perm_c))?;
    let tc = b.reshape_to(tc, Shape::new(vec![k, fc])?)?;
    let m = b.matmul(ta, tc)?;
    let out: Vec<usize> = free_a
        .iter()
        .map(|&i| da[i])
        .chain(free_c.iter().map(|&j| dc[j]))
        .collect();
    b.reshape_to(m, Shape::new(out)?)
}

/// NumPy `dot`: a rank-0 operand multiplies; vector with vector is the inner product;
/// otherwise the last axis of `a` is contracted with the second-to-last of `b` (the last if
/// `b` is 1-D).
#[track_caller]
pub fn dot(a: impl Into<Operand>, c: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into(), c.into()], |b, x| {
        let (ra, rc) = (b.ty(x[0]).shape.rank(), b.ty(x[1]).shape.rank());
        if ra == 0 || rc == 0 {
            return b.mul(x[0], x[1]);
        }
        let cc = if rc == 1 { 0 } else { rc - 2 };
        build_tensordot(b, x[0], x[1], &[ra - 1], &[cc], "dot")
    })
}

/// The `[a.size, b.size]` outer product of the flattened inputs.
#[track_caller]
pub fn outer(a: impl Into<Operand>, c: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into(), c.into()], |b, x| {
        let (na, nc) = (b.ty(x[0]).shape.size(), b.ty(x[1]).shape.size());
        let col = b.reshape_to(x[0], Shape::new(vec![na, 1])?)?;
        let row = b.reshape_to(x[1], Shape::new(vec![1, nc])?)?;
        b.mul(col, row)
    })
}

/// The contraction of [`tensordot`]: an axis count or explicit axis lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TensordotAxes {
    /// The last `n` axes of `a` with the first `n` of `b`.
    Count(usize),
    /// Axes of `a` paired with axes of `b`.
    Pairs(Vec<isize>, Vec<isize>),
}

impl From<usize> for TensordotAxes {
    #[track_caller]
    fn from(n: usize) -> TensordotAxes {
        TensordotAxes::Count(n)
    }
}

impl From<i32> for TensordotAxes {
    #[track_caller]
    fn from(n: i32) -> TensordotAxes {
        TensordotAxes::Count(n.max(0) as usize)
    }
}

impl<const N: usize> From<([isize; N], [isize; N])> for TensordotAxes {
    #[track_caller]
    fn from((a, c): ([isize; N], [isize; N])) -> TensordotAxes {
        TensordotAxes::Pairs(a.to_vec(), c.to_vec())
    }
}

impl From<(Vec<isize>, Vec<isize>)> for TensordotAxes {
    #[track_caller]
    fn from((a, c): (Vec<isize>, Vec<isize>)) -> TensordotAxes {
        TensordotAxes::Pairs(a, c)
    }
}

impl From<(&[isize], &[isize])> for TensordotAxes {
    #[track_caller]
    fn from((a, c): (&[isize], &[isize])) -> TensordotAxes {
        TensordotAxes::Pairs(a.to_vec(), c.to_vec())
    }
}

/// A `tensordot` call; finish with [`Tensordot::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Tensordot {
    a: Operand,
    c: Operand,
    axes: TensordotAxes,
}

/// Tensor contraction: `qb::tensordot(&a, &b).axes(2).eval()` pairs the last two axes of `a`
/// with the first two of `b` (the default); `.axes(([1], [0]))` names them.
#[track_caller]
pub fn tensordot(a: impl Into<Operand>, c: impl Into<Operand>) -> Tensordot {
    Tensordot {
        a: a.into(),
        c: c.into(),
        axes: TensordotAxes::Count(2),
    }
}

impl Tensordot {
    /// An axis count or a pair of axis lists.
    #[track_caller]
    pub fn axes(mut self, axes: impl Into<TensordotAxes>) -> Tensordot {
        self.axes = axes.into();
        self
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let Tensordot { a, c, axes } = self;
        apply(vec![a, c], |b, x| {
            let (sa, sc) = (b.ty(x[0]).shape.clone(), b.ty(x[1]).shape.clone());
            let (ca, cc) = match &axes {
                TensordotAxes::Count(n) => {
                    let n = *n;
                    if n > sa.rank() || n > sc.rank() {
                        return Err(IrError::Shape {
                            op: "tensordot".into(),
                            message: format!(
                                "tensordot: cannot contract {n} axes of shapes {sa} and {sc}"
                            ),
                        });
                    }
                    (
                        (sa.rank() - n..sa.rank()).collect(),
                        (0..n).collect::<Vec<usize>>(),
                    )
                }
                TensordotAxes::Pairs(pa, pc) => {
                    (sa.axes("tensordot", pa)?, sc.axes("tensordot", pc)?)
                }
            };
            build_tensordot(b, x[0], x[1], &ca, &cc, "tensordot")
        })
    }
}

/// The Kronecker product; the lower-rank operand is padded with leading unit axes.
#[track_caller]
pub fn kron(a: impl Into<Operand>, c: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![a.into(), c.into()], |b, x| {
        let (da, dc) = (dims(b, x[0]), dims(b, x[1]));
        let r = da.len().max(dc.len());
        let pad = |d: &[usize]| {
            let mut p = vec![1; r - d.len()];
            p.extend(d);
            p
        };
        let (pa, pc) = (pad(&da), pad(&dc));
        let ia: Vec<usize> = pa.iter().flat_map(|&n| [n, 1]).collect();
        let ic: Vec<usize> = pc.iter().flat_map(|&n| [1, n]).collect();
        let out: Vec<usize> = pa.iter().zip(&pc).map(|(&p, &q)| p * q).collect();
        let ta = b.reshape_to(x[0], Shape::new(ia)?)?;
        let tc = b.reshape_to(x[1], Shape::new(ic)?)?;
        let m = b.mul(ta, tc)?;
        b.reshape_to(m, Shape::new(out)?)
    })
}

/// A `cross` call; finish with [`Cross::eval`].
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct Cross {
    a: Operand,
    c: Operand,
    axisa: isize,
    axisb: isize,
    axisc: isize,
}

/// Cross product of 3-vectors (a 3-vector) and of 2-vectors (the scalar z component); a 2-vector
/// meeting a 3-vector has z = 0. `qb::cross(&a, &b).axis(0).eval()`.
#[track_caller]
pub fn cross(a: impl Into<Operand>, c: impl Into<Operand>) -> Cross {
    Cross {
        a: a.into(),
        c: c.into(),
        axisa: -1,
        axisb: -1,
        axisc: -1,
    }
}

#[track_caller]
fn opt_mul(
    b: &mut GraphBuilder,
    p: Option<NodeId>,
    q: Option<NodeId>,
) -> quabla_ir::Result<Option<NodeId>> {
    match (p, q) {
        (Some(p), Some(q)) => Ok(Some(b.mul(p, q)?)),
        _ => Ok(None),
    }
}

#[track_caller]
fn opt_sub(b: &mut GraphBuilder, p: Option<NodeId>, q: Option<NodeId>) -> Built {
    match (p, q) {
        (Some(p), Some(q)) => b.sub(p, q),
        (Some(p), None) => Ok(p),
        (None, Some(q)) => b.unary(quabla_ir::UnaryOp::Neg, q),
        (None, None) => Err(IrError::InvalidArgument {
            message: "cross: a component has no terms".into(),
        }),
    }
}

impl Cross {
    /// The vector axis of `a` (default -1).
    #[track_caller]
    pub fn axisa(mut self, axis: isize) -> Cross {
        self.axisa = axis;
        self
    }

    /// The vector axis of `b` (default -1).
    #[track_caller]
    pub fn axisb(mut self, axis: isize) -> Cross {
        self.axisb = axis;
        self
    }

    /// The vector axis of the result (default -1).
    #[track_caller]
    pub fn axisc(mut self, axis: isize) -> Cross {
        self.axisc = axis;
        self
    }

    /// Sets all three axes.
    #[track_caller]
    pub fn axis(self, axis: isize) -> Cross {
        self.axisa(axis).axisb(axis).axisc(axis)
    }

    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let Cross {
            a,
            c,
            axisa,
            axisb,
            axisc,
        } = self;
        apply(vec![a, c], |b, x| {
            let (sa, sc) = (b.ty(x[0]).shape.clone(), b.ty(x[1]).shape.clone());
            if sa.rank() == 0 || sc.rank() == 0 {
                return Err(IrError::Shape {
                    op: "cross".into(),
                    message: "cross: operands must have rank >= 1".into(),
                });
            }
            let ia = normalize_axis(axisa, sa.rank())?;
            let ic = normalize_axis(axisb, sc.rank())?;
            let (na, nc) = (sa.dims()[ia], sc.dims()[ic]);
            if !matches!(na, 2 | 3) || !matches!(nc, 2 | 3) {
                return Err(IrError::Shape {
                    op: "cross".into(),
                    message: format!(
                        "incompatible dimensions for cross product (dimension must be 2 or 3), got {na} and {nc}"
                    ),
                });
            }
            let comps = |b: &mut GraphBuilder, t: NodeId, axis: usize, n: usize| {
                (0..3)
                    .map(|i| {
                        if i < n {
                            take(b, t, axis, i).map(Some)
                        } else {
                            Ok(None)
                        }
                    })
                    .collect::<quabla_ir::Result<Vec<Option<NodeId>>>>()
            };
            let u = comps(b, x[0], ia, na)?;
            let v = comps(b, x[1], ic, nc)?;
            let t01 = opt_mul(b, u[0], v[1])?;
            let t10 = opt_mul(b, u[1], v[0])?;
            let z = opt_sub(b, t01, t10)?;
            if na == 2 && nc == 2 {
                return Ok(z);
            }
            let t12 = opt_mul(b, u[1], v[2])?;
            let t21 = opt_mul(b, u[2], v[1])?;
            let cx = opt_sub(b, t12, t21)?;
            let t20 = opt_mul(b, u[2], v[0])?;
            let t02 = opt_mul(b, u[0], v[2])?;
            let cy = opt_sub(b, t20, t02)?;
            let mut parts = Vec::with_capacity(3);
            for comp in [cx, cy, z] {
                let mut d = dims(b, comp);
                d.push(1);
                parts.push(b.reshape_to(comp, Shape::new(d)?)?);
            }
            let r = b.concat(&parts, -1)?;
            let rank = b.ty(r).shape.rank();
            let out = normalize_axis(axisc, rank)?;
            let mut perm: Vec<isize> = (0..rank as isize - 1).collect();
            perm.insert(out, rank as isize - 1);
            b.transpose(r, Some(&perm))
        })
    }
}

/// `einsum` for the matrix-product spellings `"ij,jk->ik"` and `"...ij,...jk->...ik"` (spaces
/// ignored); any other equation is UN6.
#[track_caller]
pub fn einsum<T: Into<Operand> + Clone>(equation: &str, operands: &[T]) -> Result<Tensor> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let batched = match eq.as_str() {
        "ij,jk->ik" => false,
        "...ij,...jk->...ik" => true,
        _ => {
            return Err(Error::Unsupported {
                op: "einsum".into(),
                device: None,
                message: format!(
                    "einsum supports only matrix products (\"ij,jk->ik\", \"...ij,...jk->...ik\"), got '{equation}'"
                ),
            })
        }
    };
    if operands.len() != 2 {
        return Err(Error::invalid(format!(
            "einsum: equation '{equation}' needs 2 operands, got {}",
            operands.len()
        )));
    }
    let ts: Vec<Tensor> = operands
        .iter()
        .cloned()
        .map(|o| operand_tensor(o.into()))
        .collect::<Result<_>>()?;
    for t in &ts {
        let ok = if batched {
            t.ndim() >= 2
        } else {
            t.ndim() == 2
        };
        if !ok {
            return Err(Error::shape(
                "einsum",
                format!(
                    "einsum: operand of shape {:?} does not match the equation '{equation}'",
                    t.shape()
                ),
            ));
        }
    }
    matmul(&ts[0], &ts[1])
}
