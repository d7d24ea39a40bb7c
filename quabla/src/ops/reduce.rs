//! Reductions (api.md §5): `sum`, `mean`, `max`, `min`, `prod`, `any`, `all`, each over all
//! axes (`x.sum()`), listed axes (`x.sum_axes([0])`) or listed axes kept as extent 1
//! (`x.sum_keepdims([0])`). Sums accumulate in float64 in row-major order; `prod` is the fixed
//! pairwise tree of numerics.md §4.4; `max`/`min` are IEEE 754-2019 (NaN propagates).

use crate::dispatch::apply;
use crate::error::Result;
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{Comparison, DType, GraphBuilder, IrError, NodeId, Op, Shape};

/// Which axes a reduction runs over. Converts from `isize`, `[isize; N]`, `&[isize]` and
/// `Vec<isize>`; [`Axes::All`] reduces everything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Axes {
    All,
    List(Vec<isize>),
}

impl Axes {
    #[track_caller]
    fn as_option(&self) -> Option<&[isize]> {
        match self {
            Axes::All => None,
            Axes::List(v) => Some(v),
        }
    }
}

impl From<isize> for Axes {
    #[track_caller]
    fn from(a: isize) -> Axes {
        Axes::List(vec![a])
    }
}

impl From<i32> for Axes {
    #[track_caller]
    fn from(a: i32) -> Axes {
        Axes::List(vec![a as isize])
    }
}

impl<const N: usize> From<[isize; N]> for Axes {
    #[track_caller]
    fn from(a: [isize; N]) -> Axes {
        Axes::List(a.to_vec())
    }
}

impl<const N: usize> From<[i32; N]> for Axes {
    #[track_caller]
    fn from(a: [i32; N]) -> Axes {
        Axes::List(a.iter().map(|&x| x as isize).collect())
    }
}

impl From<&[isize]> for Axes {
    #[track_caller]
    fn from(a: &[isize]) -> Axes {
        Axes::List(a.to_vec())
    }
}

impl From<Vec<isize>> for Axes {
    #[track_caller]
    fn from(a: Vec<isize>) -> Axes {
        Axes::List(a)
    }
}

#[derive(Clone, Copy, Debug)]
enum Reduction {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    Any,
    All,
}

#[track_caller]
fn build(
    b: &mut GraphBuilder,
    kind: Reduction,
    x: NodeId,
    axes: Option<&[isize]>,
    keep: bool,
) -> quabla_ir::Result<NodeId> {
    match kind {
        Reduction::Sum => b.sum(x, axes, keep),
        Reduction::Mean => b.mean(x, axes, keep),
        Reduction::Max => b.max(x, axes, keep),
        Reduction::Min => b.min(x, axes, keep),
        Reduction::Prod => build_prod(b, x, axes, keep),
        Reduction::Any | Reduction::All => {
            // Logical reductions count true entries in float64 (exact below 2^53).
            let truth = b.astype(x, DType::Bool)?;
            let ones = b.astype(truth, DType::F64)?;
            let n: usize = {
                let shape = &b.ty(x).shape;
                match axes {
                    None => shape.size(),
                    Some(a) => shape
                        .axes("any", a)?
                        .iter()
                        .map(|&i| shape.dims()[i])
                        .product(),
                }
            };
            let count = b.sum(ones, axes, keep)?;
            match kind {
                Reduction::Any => {
                    let zero = b.weak_scalar(0.0);
                    b.compare(Comparison::Greater, count, zero)
                }
                _ => {
                    let all = b.weak_scalar(n as f64);
                    b.compare(Comparison::Equal, count, all)
                }
            }
        }
    }
}

/// The pairwise product tree: neighbours `(0,1), (2,3), ...` multiply, an odd last element is
/// carried unchanged, until one value remains (numerics.md §4.4).
///
/// A float32 product is one reduction to the user, so it follows the float32 rule of
/// numerics.md §1.5 for a node: the tree runs in float64 and the result is rounded once
/// (`[1e30, 1e30, 1e-30, 1e-30]` is `1`, where float32 partial products would overflow).
#[track_caller]
fn build_prod(
    b: &mut GraphBuilder,
    x: NodeId,
    axes: Option<&[isize]>,
    keep: bool,
) -> quabla_ir::Result<NodeId> {
    let ty = b.ty(x).clone();
    if ty.dtype == DType::Bool {
        return Err(IrError::BoolOperand { op: "prod".into() });
    }
    if ty.dtype == DType::F32 {
        let wide = b.push(
            Op::Cast {
                to: DType::F64,
                weak: false,
            },
            &[x],
        )?;
        let p = build_prod_tree(b, wide, axes, keep)?;
        return b.push(
            Op::Cast {
                to: DType::F32,
                weak: ty.weak,
            },
            &[p],
        );
    }
    build_prod_tree(b, x, axes, keep)
}

#[track_caller]
fn build_prod_tree(
    b: &mut GraphBuilder,
    x: NodeId,
    axes: Option<&[isize]>,
    keep: bool,
) -> quabla_ir::Result<NodeId> {
    let shape = b.ty(x).shape.clone();
    let mut reduced = match axes {
        None => (0..shape.rank()).collect(),
        Some(a) => shape.axes("prod", a)?,
    };
    reduced.sort_unstable();
    let kept: Vec<usize> = (0..shape.rank()).filter(|a| !reduced.contains(a)).collect();
    let kept_dims: Vec<usize> = kept.iter().map(|&a| shape.dims()[a]).collect();
    let n: usize = reduced.iter().map(|&a| shape.dims()[a]).product();
    // Move the reduced axes last and flatten them into one axis of length n.
    let perm: Vec<isize> = kept.iter().chain(&reduced).map(|&a| a as isize).collect();
    let moved = b.transpose(x, Some(&perm))?;
    let mut flat_dims = kept_dims.clone();
    flat_dims.push(n);
    let mut cur = b.reshape_to(moved, Shape::new(flat_dims)?)?;
    let mut len = n;
    let lead = kept_dims.len();
    while len > 1 {
        let half = len / 2;
        let mut starts = vec![0; lead + 1];
        let mut sizes = kept_dims.clone();
        sizes.push(2 * half);
        let even_part = b.slice(cur, starts.clone(), sizes)?;
        let mut pair_dims = kept_dims.clone();
        pair_dims.extend([half, 2]);
        let pairs = b.reshape_to(even_part, Shape::new(pair_dims.clone())?)?;
        let mut first_sizes = pair_dims.clone();
        first_sizes[lead + 1] = 1;
        let mut second_starts = vec![0; lead + 2];
        second_starts[lead + 1] = 1;
        let left = b.slice(pairs, vec![0; lead + 2], first_sizes.clone())?;
        let right = b.slice(pairs, second_starts, first_sizes)?;
        let product = b.mul(left, right)?;
        let mut half_dims = kept_dims.clone();
        half_dims.push(half);
        let mut next = b.reshape_to(product, Shape::new(half_dims)?)?;
        if len % 2 == 1 {
            starts[lead] = len - 1;
            let mut last_sizes = kept_dims.clone();
            last_sizes.push(1);
            let last = b.slice(cur, starts, last_sizes)?;
            next = b.concat(&[next, last], lead as isize)?;
        }
        cur = next;
        len = len.div_ceil(2);
    }
    let out_dims: Vec<usize> = if keep {
        (0..shape.rank())
            .map(|a| {
                if reduced.contains(&a) {
                    1
                } else {
                    shape.dims()[a]
                }
            })
            .collect()
    } else {
        kept_dims
    };
    b.reshape_to(cur, Shape::new(out_dims)?)
}

#[track_caller]
fn reduce(x: impl Into<Operand>, kind: Reduction, axes: Axes, keep: bool) -> Result<Tensor> {
    apply(vec![x.into()], |b, x| {
        build(b, kind, x[0], axes.as_option(), keep)
    })
}

macro_rules! reductions {
    ($($(#[$doc:meta])* $name:ident, $axes:ident, $keep:ident => $kind:ident;)*) => {
        super::tensor_methods! {
            #[doc = "The reductions on `Result<Tensor>`."]
            pub trait ReduceExt;
            $(
                $(#[$doc])*
                pub fn $name(&self) -> Result<Tensor> {
                    reduce(self, Reduction::$kind, Axes::All, false)
                }

                #[doc = concat!("`", stringify!($name), "` over the given axes, which are removed.")]
                pub fn $axes(&self, axes: impl Into<Axes>) -> Result<Tensor> {
                    reduce(self, Reduction::$kind, axes.into(), false)
                }

                #[doc = concat!("`", stringify!($name), "` over the given axes, kept with extent 1.")]
                pub fn $keep(&self, axes: impl Into<Axes>) -> Result<Tensor> {
                    reduce(self, Reduction::$kind, axes.into(), true)
                }
            )*
        }
        $(
            $(#[$doc])*
            #[track_caller]
            pub fn $name(x: impl Into<Operand>) -> Result<Tensor> {
                reduce(x, Reduction::$kind, Axes::All, false)
            }
        )*
    };
}

reductions! {
    /// Sum of all elements, accumulated in float64.
    sum, sum_axes, sum_keepdims => Sum;
    /// Arithmetic mean.
    mean, mean_axes, mean_keepdims => Mean;
    /// Maximum; NaN anywhere in the reduced slice gives NaN.
    max, max_axes, max_keepdims => Max;
    /// Minimum; NaN anywhere in the reduced slice gives NaN.
    min, min_axes, min_keepdims => Min;
    /// Product by the fixed pairwise tree (no division).
    prod, prod_axes, prod_keepdims => Prod;
    /// Whether any element is true (floats: nonzero or NaN).
    any, any_axes, any_keepdims => Any;
    /// Whether every element is true (floats: nonzero or NaN).
    all, all_axes, all_keepdims => All;
}
