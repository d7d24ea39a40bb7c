//! Control flow (api.md §11, transforms.md §10): [`cond`], [`switch`], [`fori_loop`], [`scan`],
//! [`scan_over`] and [`while_loop`].
//!
//! Outside any transform they run as plain Rust branches and loops on eager tensors. Under a
//! transform (whenever a trace is active) each call records one region node whose bodies are
//! traced once, in frames that reject captured outer tracers (TR3): traced values enter through
//! the operands, and eager tensors a body closes over become constants of the body. With
//! `unroll(true)` a loop body is instead traced once per iteration into the enclosing trace,
//! with a static index.
//!
//! The contracts are checked before anything runs or is recorded: a loop's carry is a pytree
//! of floating or integer arrays that the body gives back with the same structure, shapes and
//! dtypes (SH13; `carry.rs`), `cond` branches return floating results of one shape (a weakly
//! typed branch result adopts the other branch's dtype), predicates are rank 0. The counted
//! loops share one engine (`counted.rs`); `while_loop` is in `while_loop.rs`.

mod carry;
mod counted;
mod while_loop;

pub use counted::{fori_loop, scan, scan_over, ForiLoop, Scan, ScanOver};
pub use while_loop::{while_loop, WhileInfo, WhileLoop};

use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::tensor::Tensor;
use crate::trace;
use crate::tree::Leaf;
use quabla_ir::{DType, Graph, Region, RegionForm, RegionKind, Shape, TensorType};
use std::ops::Deref;
use std::sync::Arc;

/// The index a counted loop's body receives (`fori_loop`, `scan`): as in JAX, an integer. It
/// dereferences to a weak int64 rank-0 tensor, which adopts the dtype of the array it meets as
/// a Python or Rust integer does, so it indexes (`x.index_with(qb::ix![&*i])`, `take`,
/// `dynamic_slice`, `fold_in`) and computes (`&*i + 1`, `&c * &*i` with a float32 `c` stays
/// float32) without a cast; [`LoopIndex::static_value`] is the index as a `usize` when it is
/// static (eagerly, or in an unrolled loop). [`LoopIndex::as_float`] is the index as a float
/// of the loop's float dtype (that of the first floating carry, float64 without one), which is
/// what the region's index parameter is: arithmetic on it stays in float operations.
#[derive(Clone, Debug)]
pub struct LoopIndex {
    tensor: Tensor,
    /// The float parameter, in a traced region; computed from `value` when static.
    float: Option<Tensor>,
    float_dtype: DType,
    value: Option<usize>,
}

impl LoopIndex {
    /// The static index `i` of an eager or unrolled iteration.
    fn eager(i: usize, float_dtype: DType) -> LoopIndex {
        LoopIndex {
            tensor: Tensor::weak_int(i as i64),
            float: None,
            float_dtype,
            value: Some(i),
        }
    }

    /// The index of a traced region from its float parameter.
    fn traced(parameter: Tensor, float_dtype: DType) -> Result<LoopIndex> {
        let tensor = crate::dispatch::apply(vec![(&parameter).into()], |b, x| {
            b.push(
                quabla_ir::Op::Cast {
                    to: DType::I64,
                    weak: true,
                },
                &[x[0]],
            )
        })?;
        let float = if parameter.dtype() == float_dtype {
            parameter
        } else {
            parameter.astype(float_dtype)?
        };
        Ok(LoopIndex {
            tensor,
            float: Some(float),
            float_dtype,
            value: None,
        })
    }

    /// The dtype of the index parameter of a region whose float dtype is `float` and whose
    /// largest index is `last`: `float`, or float64 when a float32 parameter could not hold
    /// every index exactly (past 2^24), so that the integer index is always exact.
    fn parameter_dtype(float: DType, last: usize) -> DType {
        if float == DType::F32 && last > (1usize << 24) {
            DType::F64
        } else {
            float
        }
    }

    /// The index as an integer when it is static; `None` inside a traced region.
    pub fn static_value(&self) -> Option<usize> {
        self.value
    }

    /// The index as a weak int64 rank-0 tensor.
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }

    /// The index as a rank-0 float of the loop's float dtype (the dtype of the first floating
    /// carry, float64 without one): the region's own parameter under a trace, so that loops
    /// whose bodies compute with the index (`t0 + i * dt`) stay free of integer operations
    /// (which the CPU's machine-code loops do not translate).
    pub fn as_float(&self) -> Result<Tensor> {
        match (&self.float, self.value) {
            (Some(t), _) => Ok(t.clone()),
            (None, Some(i)) => crate::array(i as f64)?.astype(self.float_dtype),
            (None, None) => unreachable!("a traced index has its parameter"),
        }
    }
}

impl Deref for LoopIndex {
    type Target = Tensor;
    fn deref(&self) -> &Tensor {
        &self.tensor
    }
}

impl AsRef<Tensor> for LoopIndex {
    fn as_ref(&self) -> &Tensor {
        &self.tensor
    }
}

fn strong(t: &Tensor) -> TensorType {
    let ty = t.ir_type();
    TensorType::new(ty.dtype, ty.shape)
}

/// Runs one iteration of an eager (or unrolled) loop body. A loop that is not unrolled is a
/// region also eagerly: its body refuses solvers and custom rules (TF5) as its traced form
/// does. An unrolled loop is plain code in both forms, so it refuses nothing.
fn run_body<R>(primitive: &'static str, unrolled: bool, body: impl FnOnce() -> R) -> R {
    if unrolled {
        body()
    } else {
        trace::eager_region_body(primitive, body)
    }
}

fn owned<O: AsRef<Tensor>>(operands: &[O]) -> Vec<Tensor> {
    operands.iter().map(|o| o.as_ref().clone()).collect()
}

fn operand_inputs(operands: &[Tensor]) -> Vec<(String, TensorType)> {
    operands
        .iter()
        .enumerate()
        .map(|(k, t)| (format!("operand{k}"), strong(t)))
        .collect()
}

/// A body graph as frozen for a region: the plan passes applied (inputs stay).
fn freeze(g: Graph) -> Arc<Graph> {
    Arc::new(quabla_ir::passes::run_all(&g))
}

#[track_caller]
fn record(region: Region, operands: Vec<Tensor>) -> Result<Vec<Tensor>> {
    trace::record_region(
        Arc::new(region),
        operands.into_iter().map(Operand::Tensor).collect(),
    )
}

/// The predicate as a rank-0 bool: floats are tested `!= 0`.
fn predicate(pred: &Tensor) -> Result<Tensor> {
    if !pred.shape().is_empty() {
        return Err(Error::shape(
            "cond",
            format!(
                "cond: the predicate must be rank 0, got shape {:?}",
                pred.shape()
            ),
        ));
    }
    if pred.dtype() == DType::Bool {
        Ok(pred.clone())
    } else {
        pred.not_equal(0.0)
    }
}

// ---------------------------------------------------------------------------------------------
// cond

/// `cond(pred, true_fn, false_fn, operands)`: `true_fn(operands)` when `pred` holds, else
/// `false_fn(operands)`. Only the selected branch runs (traced, only its branch executes), so
/// the other branch cannot inject NaN into values or gradients. `pred` is a rank-0 bool, or a
/// float tested `!= 0`.
///
/// Eagerly, each branch function is called once: the selected one on the operands (it runs,
/// as a region body: solvers and custom rules are TF5 there too), the other on tracers (it is
/// only traced, so that `cond` checks eagerly what it checks under `jit`: one floating shape
/// and dtype, SH13). Under a transform both are traced once.
///
/// ```
/// use quabla as qb;
/// # fn main() -> qb::Result<()> {
/// let safe_log = |x: &qb::Tensor| {
///     qb::cond(&x.greater(0.0)?, |o| o[0].log(), |o| qb::zeros_like(&o[0]), &[x])
/// };
/// assert!((safe_log(&qb::array(2.0)?)?.item()? - 2f64.ln()).abs() < 1e-15);
/// let g: qb::Tensor = qb::grad(|x: qb::Tensor| safe_log(&x)).call(&2.0)?;
/// assert_eq!(g.item()?, 0.5);
/// # Ok(())
/// # }
/// ```
#[track_caller]
pub fn cond<T, F, O>(pred: &Tensor, true_fn: T, false_fn: F, operands: &[O]) -> Result<Tensor>
where
    T: Fn(&[Tensor]) -> Result<Tensor>,
    F: Fn(&[Tensor]) -> Result<Tensor>,
    O: AsRef<Tensor>,
{
    let operands = owned(operands);
    let operands = &operands[..];
    let pred = predicate(pred)?;
    let inputs = operand_inputs(operands);
    let trace_branch = |f: &dyn Fn(&[Tensor]) -> Result<Tensor>| {
        trace::trace_region_body("cond", &inputs, |params| Ok(vec![f(&params)?]))
    };
    if !trace::active() {
        let taken = pred.item_bool()?;
        // The selected branch runs as a region body (TF5 for solvers and custom rules, as
        // in the traced branch).
        let out = trace::eager_region_body("cond", || {
            if taken {
                true_fn(operands)
            } else {
                false_fn(operands)
            }
        })?;
        let other = trace_branch(if taken { &false_fn } else { &true_fn })?;
        let out_ty = TensorType {
            dtype: out.dtype(),
            shape: Shape::new(out.shape().to_vec())?,
            weak: out.is_weak(),
        };
        let other_ty = other.node(other.outputs()[0]).ty.clone();
        let unified = if taken {
            unified_dtype(&out_ty, &other_ty)?
        } else {
            unified_dtype(&other_ty, &out_ty)?
        };
        return if out.dtype() == unified && !out.is_weak() {
            Ok(out)
        } else {
            out.astype(unified)
        };
    }
    let then_g = trace_branch(&true_fn)?;
    let else_g = trace_branch(&false_fn)?;
    let (then_g, else_g) = unify_branches(then_g, else_g)?;
    let kind = RegionKind::Cond {
        then_branch: freeze(then_g),
        else_branch: freeze(else_g),
    };
    let region = Region::new(kind, RegionForm::Cond, 0)?;
    let mut ops = vec![pred];
    ops.extend(operands.iter().cloned());
    Ok(record(region, ops)?.remove(0))
}

fn branch_not_float(dtype: DType) -> Error {
    Error::Type {
        message: format!(
            "cond branches must return floating results, got {}; cast with astype",
            dtype.name()
        ),
    }
}

/// SH13 and the weak-result rule: both branches end with one floating output of one shape and
/// dtype.
fn unify_branches(a: Graph, b: Graph) -> Result<(Graph, Graph)> {
    let ta = a.node(a.outputs()[0]).ty.clone();
    let tb = b.node(b.outputs()[0]).ty.clone();
    let dtype = unified_dtype(&ta, &tb)?;
    let a = if ta.dtype == dtype {
        a
    } else {
        cast_output(&a, dtype)?
    };
    let b = if tb.dtype == dtype {
        b
    } else {
        cast_output(&b, dtype)?
    };
    Ok((a, b))
}

/// The dtype of a `cond` whose branches return `ta` (then) and `tb` (else): SH13 for
/// different shapes, a weak result adopting the other branch's dtype.
fn unified_dtype(ta: &TensorType, tb: &TensorType) -> Result<DType> {
    for t in [ta, tb] {
        if !t.dtype.is_float() {
            return Err(branch_not_float(t.dtype));
        }
    }
    if ta.shape != tb.shape {
        return Err(Error::shape(
            "cond",
            format!(
                "cond branches return different shapes {:?} and {:?}",
                ta.shape.dims(),
                tb.shape.dims()
            ),
        ));
    }
    if ta.dtype == tb.dtype {
        return Ok(ta.dtype);
    }
    match (ta.weak, tb.weak) {
        (true, false) => Ok(tb.dtype),
        (false, true) => Ok(ta.dtype),
        _ => Err(Error::DtypeMismatch {
            op: "cond".into(),
            lhs: ta.dtype,
            rhs: tb.dtype,
        }),
    }
}

/// `g` with its single output cast to `dtype`.
fn cast_output(g: &Graph, dtype: DType) -> Result<Graph> {
    Ok(g.map_outputs(|b, outs| Ok(vec![b.astype(outs[0], dtype)?]))?)
}

// ---------------------------------------------------------------------------------------------
// switch

/// A branch of [`switch`]: called with the operands, returns one floating array.
pub type Branch<'a> = &'a dyn Fn(&[Tensor]) -> Result<Tensor>;

/// `switch(index, branches, operands)`: `branches[index](operands)`, JAX's `lax.switch`. The
/// index is a rank-0 integer tensor, clamped into `0..branches.len()`; only the selected
/// branch runs. The branches follow [`cond`]'s contract (one floating result of one shape),
/// and the call is a binary tree of `cond`s, so it differentiates and batches as they do.
///
/// ```
/// use quabla as qb;
/// # fn main() -> qb::Result<()> {
/// let x = qb::array(2.0)?;
/// let (sq, neg): (qb::Branch, qb::Branch) = (&|o| o[0].square(), &|o| -&o[0]);
/// assert_eq!(qb::switch(&qb::array(1i64)?, &[sq, neg], &[&x])?.item()?, -2.0);
/// assert_eq!(qb::switch(&qb::array(-5i64)?, &[sq, neg], &[&x])?.item()?, 4.0);
/// # Ok(())
/// # }
/// ```
#[track_caller]
pub fn switch<O: AsRef<Tensor>>(
    index: &Tensor,
    branches: &[Branch<'_>],
    operands: &[O],
) -> Result<Tensor> {
    let n = branches.len();
    if n == 0 {
        return Err(Error::invalid("switch: give at least one branch"));
    }
    if !index.shape().is_empty() {
        return Err(Error::shape(
            "switch",
            format!(
                "switch: the index must be rank 0, got shape {:?}",
                index.shape()
            ),
        ));
    }
    if !index.dtype().is_integer() {
        return Err(Error::Type {
            message: format!(
                "switch: the index must be an integer, got {}; convert it with astype(int64)",
                index.dtype().name()
            ),
        });
    }
    let operands = owned(operands);
    if n == 1 {
        return branches[0](&operands);
    }
    let clamped = crate::minimum(crate::maximum(index, 0i64)?, (n - 1) as i64)?;
    pick_branch(&clamped, branches, 0, n, &operands)
}

/// `branches[lo..hi]` selected by `index` (already clamped into that range), as nested
/// `cond`s: the index travels as the first operand, since a region body may not capture it.
fn pick_branch(
    index: &Tensor,
    branches: &[Branch<'_>],
    lo: usize,
    hi: usize,
    operands: &[Tensor],
) -> Result<Tensor> {
    if hi - lo == 1 {
        return branches[lo](operands);
    }
    let mid = lo + (hi - lo) / 2;
    let lower = index.less(mid as i64)?;
    let mut with_index = vec![index.clone()];
    with_index.extend(operands.iter().cloned());
    cond(
        &lower,
        |o| pick_branch(&o[0], branches, lo, mid, &o[1..]),
        |o| pick_branch(&o[0], branches, mid, hi, &o[1..]),
        &with_index,
    )
}

/// What a leaf is, for messages.
fn describe_leaf(leaf: &Leaf) -> String {
    match leaf {
        Leaf::Tensor(t) => format!("a rank-0 {} array", t.dtype().name()),
        Leaf::F64(v) => format!("the number {v}"),
        Leaf::Int(v) => format!("the integer {v}"),
        Leaf::Bool(v) => format!("the bool {v}"),
        Leaf::Abstract(_) => "a ShapeDtype".into(),
        Leaf::Key(_) => "a random key".into(),
    }
}
