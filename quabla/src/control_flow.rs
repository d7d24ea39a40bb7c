//! Control flow (api.md §11, transforms.md §10): [`cond`], [`fori_loop`], [`scan`] and
//! [`while_loop`].
//!
//! Outside any transform they run as plain Rust branches and loops on eager tensors. Under a
//! transform (whenever a trace is active) each call records one region node whose bodies are
//! traced once, in frames that reject captured outer tracers (TR3): traced values enter through
//! the operands, and eager tensors a body closes over become constants of the body. With
//! `unroll(true)` a loop body is instead traced once per iteration into the enclosing trace,
//! with a static index.
//!
//! The contracts are checked before anything runs or is recorded: carries are one floating
//! array that the body preserves (SH13), `cond` branches return floating results of one shape
//! (a weakly typed branch result adopts the other branch's dtype), predicates are rank 0.

use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::tensor::Tensor;
use crate::trace;
use crate::tree::{Leaf, Tree, TreeDef};
use quabla_ir::{DType, Graph, Region, RegionForm, RegionKind, ScanBody, Shape, TensorType};
use std::ops::Deref;
use std::sync::Arc;

/// The index a loop body receives: a rank-0 tensor of the carry's dtype, and the index as a
/// `usize` when it is known statically (eagerly, or in an unrolled loop).
#[derive(Clone, Debug)]
pub struct LoopIndex {
    tensor: Tensor,
    value: Option<usize>,
}

impl LoopIndex {
    /// The index as an integer when it is static; `None` inside a traced region.
    pub fn static_value(&self) -> Option<usize> {
        self.value
    }

    /// The index as a tensor.
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
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

fn describe(t: &TensorType) -> String {
    format!("{}{:?}", t.dtype.name(), t.shape.dims())
}

fn strong(t: &Tensor) -> TensorType {
    let ty = t.ir_type();
    TensorType::new(ty.dtype, ty.shape)
}

/// The carry contract: one floating array.
fn check_carry(primitive: &str, init: &Tensor) -> Result<()> {
    if init.dtype().is_float() {
        Ok(())
    } else {
        Err(Error::Type {
            message: format!(
                "{primitive}: the carry must be a floating array, got {}; pack state as float arrays (bool flags as 0.0/1.0)",
                init.dtype().name()
            ),
        })
    }
}

/// SH13 for a carry the body returned: same shape, same dtype (a weak result adopts the
/// carry's dtype).
fn conform_carry(primitive: &str, carry: &TensorType, out: Tensor) -> Result<Tensor> {
    let ty = out.ir_type();
    if ty.shape == carry.shape && ty.dtype == carry.dtype {
        return Ok(out);
    }
    if ty.shape == carry.shape && ty.weak && ty.dtype.is_float() {
        return out.astype(carry.dtype);
    }
    Err(Error::shape(
        primitive,
        format!(
            "{primitive}: body changed the carry from {} to {}",
            describe(carry),
            describe(&TensorType::new(ty.dtype, ty.shape))
        ),
    ))
}

fn index_tensor(i: usize, dtype: DType) -> Result<Tensor> {
    crate::array(i as f64)?.astype(dtype)
}

/// Operands given as tensors or references to them.
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

/// The parameters of a loop body: the index (a scalar of the carry's dtype), the carry and
/// the operands.
fn loop_body_inputs(carry_ty: &TensorType, operands: &[Tensor]) -> Vec<(String, TensorType)> {
    let index = TensorType::new(carry_ty.dtype, quabla_ir::Shape::scalar());
    let mut inputs = vec![
        ("i".to_string(), index),
        ("carry".to_string(), carry_ty.clone()),
    ];
    inputs.extend(operand_inputs(operands));
    inputs
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

// ---------------------------------------------------------------------------------------------
// fori_loop

/// `fori_loop(lower, upper, body, init)`: `carry = body(i, carry, operands)` for `i` in
/// `lower..upper`; `upper <= lower` returns `init`. Finish with [`ForiLoop::eval`].
pub fn fori_loop<B>(lower: usize, upper: usize, body: B, init: &Tensor) -> ForiLoop<B>
where
    B: Fn(LoopIndex, Tensor, &[Tensor]) -> Result<Tensor>,
{
    ForiLoop {
        lower,
        upper,
        body,
        init: init.clone(),
        operands: Vec::new(),
        unroll: false,
    }
}

/// A `fori_loop` being configured.
pub struct ForiLoop<B> {
    lower: usize,
    upper: usize,
    body: B,
    init: Tensor,
    operands: Vec<Tensor>,
    unroll: bool,
}

impl<B> std::fmt::Debug for ForiLoop<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fori_loop({}..{})", self.lower, self.upper)
    }
}

impl<B> ForiLoop<B>
where
    B: Fn(LoopIndex, Tensor, &[Tensor]) -> Result<Tensor>,
{
    /// Values the body reads, passed as its third argument (traced values must come this way).
    pub fn operands<O: AsRef<Tensor>>(mut self, operands: &[O]) -> Self {
        self.operands = owned(operands);
        self
    }

    /// Trace the body once per iteration into straight-line code with a static index.
    pub fn unroll(mut self, unroll: bool) -> Self {
        self.unroll = unroll;
        self
    }

    /// Runs (eagerly) or records (traced) the loop and returns the final carry.
    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        check_carry("fori_loop", &self.init)?;
        let carry_ty = strong(&self.init);
        if self.upper <= self.lower {
            return Ok(self.init);
        }
        if !trace::active() || self.unroll {
            let mut carry = self.init;
            for i in self.lower..self.upper {
                // An eager loop is the facade's own: it watches the cancellation flags once
                // per iteration, as executors do between plan nodes.
                quabla_backend::cancel::check()?;
                let index = LoopIndex {
                    tensor: index_tensor(i, carry_ty.dtype)?,
                    value: Some(i),
                };
                let out = run_body("fori_loop", self.unroll, || {
                    (self.body)(index, carry, &self.operands)
                })?;
                carry = conform_carry("fori_loop", &carry_ty, out)?;
            }
            return Ok(carry);
        }
        let inputs = loop_body_inputs(&carry_ty, &self.operands);
        let body = trace::trace_region_body("fori_loop", &inputs, |mut params| {
            let rest = params.split_off(2);
            let carry = params.pop().expect("two parameters");
            let index = LoopIndex {
                tensor: params.pop().expect("two parameters"),
                value: None,
            };
            let out = (self.body)(index, carry, &rest)?;
            Ok(vec![conform_carry("fori_loop", &carry_ty, out)?])
        })?;
        let kind = RegionKind::Scan(ScanBody {
            length: self.upper - self.lower,
            start: self.lower,
            reverse: false,
            n_carry: 1,
            n_const: self.operands.len(),
            n_xs: 0,
            body: freeze(body),
        });
        let region = Region::new(kind, RegionForm::Fori, 0)?;
        let mut ops = vec![self.init];
        ops.extend(self.operands);
        Ok(record(region, ops)?.remove(0))
    }
}

// ---------------------------------------------------------------------------------------------
// scan

/// `scan(f, init, length)`: `(carry, y) = f(carry, i, operands)` for `i` in `0..length`;
/// returns the final carry and the `y`s stacked on a new leading axis. Finish with
/// [`Scan::eval`].
pub fn scan<F>(f: F, init: &Tensor, length: usize) -> Scan<F>
where
    F: Fn(Tensor, LoopIndex, &[Tensor]) -> Result<(Tensor, Tensor)>,
{
    Scan {
        f,
        init: init.clone(),
        length,
        operands: Vec::new(),
        unroll: false,
    }
}

/// A `scan` being configured.
pub struct Scan<F> {
    f: F,
    init: Tensor,
    length: usize,
    operands: Vec<Tensor>,
    unroll: bool,
}

impl<F> std::fmt::Debug for Scan<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "scan(length={})", self.length)
    }
}

impl<F> Scan<F>
where
    F: Fn(Tensor, LoopIndex, &[Tensor]) -> Result<(Tensor, Tensor)>,
{
    /// Values the step reads, passed as its third argument.
    pub fn operands<O: AsRef<Tensor>>(mut self, operands: &[O]) -> Self {
        self.operands = owned(operands);
        self
    }

    /// Trace the step once per iteration with a static index.
    pub fn unroll(mut self, unroll: bool) -> Self {
        self.unroll = unroll;
        self
    }

    /// Runs or records the scan: `(final carry, ys)` with `ys` of shape `[length, *y.shape]`.
    #[track_caller]
    pub fn eval(self) -> Result<(Tensor, Tensor)> {
        check_carry("scan", &self.init)?;
        if self.length == 0 {
            return Err(Error::invalid("scan: length must be >= 1"));
        }
        let carry_ty = strong(&self.init);
        if !trace::active() || self.unroll {
            let mut carry = self.init;
            let mut ys: Vec<Tensor> = quabla_ir::alloc::try_vec_with_capacity(self.length)
                .map_err(|e| {
                    Error::out_of_memory(
                        e.bytes,
                        format!("the per-step outputs of a scan of length {}", self.length),
                    )
                })?;
            for i in 0..self.length {
                quabla_backend::cancel::check()?;
                let index = LoopIndex {
                    tensor: index_tensor(i, carry_ty.dtype)?,
                    value: Some(i),
                };
                let (c, y) = run_body("scan", self.unroll, || {
                    (self.f)(carry, index, &self.operands)
                })?;
                carry = conform_carry("scan", &carry_ty, c)?;
                if let Some(first) = ys.first() {
                    if first.shape() != y.shape() || first.dtype() != y.dtype() {
                        return Err(Error::shape(
                            "scan",
                            format!(
                                "scan: per-step outputs must keep one shape and dtype, got {}{:?} then {}{:?}",
                                first.dtype().name(),
                                first.shape(),
                                y.dtype().name(),
                                y.shape()
                            ),
                        ));
                    }
                }
                ys.push(y);
            }
            let ys = crate::stack(&ys, 0)?;
            return Ok((carry, ys));
        }
        let inputs = loop_body_inputs(&carry_ty, &self.operands);
        let body = trace::trace_region_body("scan", &inputs, |mut params| {
            let rest = params.split_off(2);
            let index = LoopIndex {
                tensor: params[0].clone(),
                value: None,
            };
            let carry = params.pop().expect("two parameters");
            let (c, y) = (self.f)(carry, index, &rest)?;
            Ok(vec![conform_carry("scan", &carry_ty, c)?, y])
        })?;
        let kind = RegionKind::Scan(ScanBody {
            length: self.length,
            start: 0,
            reverse: false,
            n_carry: 1,
            n_const: self.operands.len(),
            n_xs: 0,
            body: freeze(body),
        });
        let region = Region::new(kind, RegionForm::Scan, 0)?;
        let mut ops = vec![self.init];
        ops.extend(self.operands);
        let mut outs = record(region, ops)?;
        let ys = outs.pop().expect("two outputs");
        let carry = outs.pop().expect("two outputs");
        Ok((carry, ys))
    }
}

// ---------------------------------------------------------------------------------------------
// scan over data

/// `scan_over(f, init, xs)`: JAX's `scan(f, init, xs)`. `(carry, y) = f(carry, x, operands)`
/// where `x` is slice `k` along the leading axis of every array of the pytree `xs`, for `k` in
/// `0..length` (the common leading extent); returns the final carry and the pytree of `y`s,
/// each leaf stacked on a new leading axis. The carry is one floating array, as in [`scan`];
/// `xs` and `y` are pytrees of arrays of any dtype. Finish with [`ScanOver::eval`].
///
/// ```
/// use quabla as qb;
/// # fn main() -> qb::Result<()> {
/// let xs = qb::array([1.0, 2.0, 3.0])?;
/// let step = |c: qb::Tensor, x: qb::Tensor, _: &[qb::Tensor]| {
///     let c = (&c + &x)?;
///     Ok((c.clone(), c))
/// };
/// let (total, running): (qb::Tensor, qb::Tensor) =
///     qb::scan_over(step, &qb::array(0.0)?, &xs).eval()?;
/// assert_eq!((total.item()?, running.to_vec::<f64>()?), (6.0, vec![1.0, 3.0, 6.0]));
/// # Ok(())
/// # }
/// ```
pub fn scan_over<X, F, Y>(f: F, init: &Tensor, xs: &X) -> ScanOver<X, F>
where
    X: Tree,
    Y: Tree,
    F: Fn(Tensor, X, &[Tensor]) -> Result<(Tensor, Y)>,
{
    ScanOver {
        f,
        init: init.clone(),
        xs: crate::tree::flatten(xs),
        operands: Vec::new(),
        reverse: false,
        unroll: false,
        _x: std::marker::PhantomData,
    }
}

/// A `scan_over` being configured.
pub struct ScanOver<X, F> {
    f: F,
    init: Tensor,
    xs: (Vec<Leaf>, TreeDef),
    operands: Vec<Tensor>,
    reverse: bool,
    unroll: bool,
    _x: std::marker::PhantomData<fn() -> X>,
}

impl<X, F> std::fmt::Debug for ScanOver<X, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "scan_over(xs={})", self.xs.1)
    }
}

impl<X: Tree, F> ScanOver<X, F> {
    /// Values the step reads, passed as its third argument (traced values must enter here:
    /// a region body does not capture them).
    pub fn operands<O: AsRef<Tensor>>(mut self, operands: &[O]) -> Self {
        self.operands = owned(operands);
        self
    }

    /// Runs the steps from the last slice to the first (the `y`s are still stacked in the
    /// order of `xs`), as JAX's `reverse=True`.
    pub fn reverse(mut self, reverse: bool) -> Self {
        self.reverse = reverse;
        self
    }

    /// Trace the step once per iteration with static slices.
    pub fn unroll(mut self, unroll: bool) -> Self {
        self.unroll = unroll;
        self
    }

    /// Runs or records the scan: `(final carry, ys)`.
    #[track_caller]
    pub fn eval<Y: Tree>(self) -> Result<(Tensor, Y)>
    where
        F: Fn(Tensor, X, &[Tensor]) -> Result<(Tensor, Y)>,
    {
        check_carry("scan", &self.init)?;
        let (leaves, xs_def) = &self.xs;
        xs_def.check()?;
        let xs = leaves
            .iter()
            .map(|l| match l {
                Leaf::Tensor(t) if !t.shape().is_empty() => Ok(t.clone()),
                other => Err(Error::Type {
                    message: format!(
                        "scan: every leaf of xs must be an array with a leading axis to scan \
                         over, got {}",
                        describe_leaf(other)
                    ),
                }),
            })
            .collect::<Result<Vec<Tensor>>>()?;
        let Some(length) = xs.first().map(|t| t.shape()[0]) else {
            return Err(Error::invalid(
                "scan: xs holds no arrays; give the number of steps with scan(f, init, length)",
            ));
        };
        if let Some(t) = xs.iter().find(|t| t.shape()[0] != length) {
            return Err(Error::shape(
                "scan",
                format!(
                    "scan: the arrays of xs must share their leading extent, got {length} and {}",
                    t.shape()[0]
                ),
            ));
        }
        let carry_ty = strong(&self.init);
        let call = |carry: Tensor,
                    x_leaves: Vec<Tensor>,
                    operands: &[Tensor]|
         -> Result<(Tensor, Vec<Tensor>, TreeDef)> {
            let x: X = xs_def.unflatten(x_leaves.into_iter().map(Leaf::Tensor).collect())?;
            let (c, y) = (self.f)(carry, x, operands)?;
            let c = conform_carry("scan", &carry_ty, c)?;
            let (y_leaves, y_def) = crate::tree::flatten(&y);
            y_def.check()?;
            let ys = y_leaves
                .into_iter()
                .map(|l| match l {
                    Leaf::Tensor(t) => Ok(t),
                    other => Err(Error::Type {
                        message: format!(
                            "scan: every leaf of the per-step output y must be an array, got {}",
                            describe_leaf(&other)
                        ),
                    }),
                })
                .collect::<Result<Vec<_>>>()?;
            Ok((c, ys, y_def))
        };
        if !trace::active() || self.unroll {
            let mut carry = self.init.clone();
            let mut steps: Vec<Vec<Tensor>> = Vec::new();
            let mut y_def: Option<TreeDef> = None;
            let order: Box<dyn Iterator<Item = usize>> = if self.reverse {
                Box::new((0..length).rev())
            } else {
                Box::new(0..length)
            };
            for k in order {
                quabla_backend::cancel::check()?;
                let x_leaves = xs
                    .iter()
                    .map(|t| t.index([crate::ops::index::IndexItem::Int(k as isize)]))
                    .collect::<Result<Vec<_>>>()?;
                let (c, ys, def) = run_body("scan", self.unroll, || {
                    call(carry, x_leaves, &self.operands)
                })?;
                carry = c;
                if let Some(first) = &y_def {
                    let same = *first == def
                        && steps[0]
                            .iter()
                            .zip(&ys)
                            .all(|(a, b)| a.shape() == b.shape() && a.dtype() == b.dtype());
                    if !same {
                        return Err(Error::shape(
                            "scan",
                            "scan: per-step outputs must keep one structure, shape and dtype",
                        ));
                    }
                } else {
                    y_def = Some(def);
                }
                steps.push(ys);
            }
            if self.reverse {
                steps.reverse();
            }
            let y_def = y_def.expect("length >= 1");
            let stacked = (0..y_def.num_leaves())
                .map(|j| {
                    let column: Vec<&Tensor> = steps.iter().map(|s| &s[j]).collect();
                    crate::stack(&column, 0).map(Leaf::Tensor)
                })
                .collect::<Result<Vec<_>>>()?;
            return Ok((carry, y_def.unflatten(stacked)?));
        }
        let mut inputs = loop_body_inputs(&carry_ty, &self.operands);
        for (k, t) in xs.iter().enumerate() {
            let ty = strong(t);
            let slice = TensorType::new(ty.dtype, Shape::new(t.shape()[1..].to_vec())?);
            inputs.push((format!("x{k}"), slice));
        }
        let n_const = self.operands.len();
        let y_def = std::cell::RefCell::new(None);
        let body = trace::trace_region_body("scan", &inputs, |mut params| {
            let x_leaves = params.split_off(2 + n_const);
            let consts = params.split_off(2);
            let carry = params.pop().expect("two parameters");
            let (c, ys, def) = call(carry, x_leaves, &consts)?;
            *y_def.borrow_mut() = Some(def);
            let mut outs = vec![c];
            outs.extend(ys);
            Ok(outs)
        })?;
        let y_def = y_def.into_inner().expect("the body was traced");
        let kind = RegionKind::Scan(ScanBody {
            length,
            start: 0,
            reverse: self.reverse,
            n_carry: 1,
            n_const,
            n_xs: xs.len(),
            body: freeze(body),
        });
        let region = Region::new(kind, RegionForm::Scan, 0)?;
        let mut ops = vec![self.init.clone()];
        ops.extend(self.operands.iter().cloned());
        ops.extend(xs);
        let mut outs = record(region, ops)?;
        let ys = outs.split_off(1);
        let carry = outs.pop().expect("the carry");
        Ok((
            carry,
            y_def.unflatten(ys.into_iter().map(Leaf::Tensor).collect())?,
        ))
    }
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

// ---------------------------------------------------------------------------------------------
// while_loop

/// `while_loop(cond_fn, body_fn, init)`: `carry = body_fn(carry, operands)` while
/// `cond_fn(carry, operands)` (a rank-0 bool) holds. Forward-mode differentiable; with
/// [`WhileLoop::max_trips`] reverse-mode differentiable too. Finish with [`WhileLoop::eval`]
/// or [`WhileLoop::eval_with_info`].
pub fn while_loop<C, B>(cond_fn: C, body_fn: B, init: &Tensor) -> WhileLoop<C, B>
where
    C: Fn(&Tensor, &[Tensor]) -> Result<Tensor>,
    B: Fn(Tensor, &[Tensor]) -> Result<Tensor>,
{
    WhileLoop {
        cond_fn,
        body_fn,
        init: init.clone(),
        operands: Vec::new(),
        max_trips: None,
    }
}

/// A `while_loop` being configured.
pub struct WhileLoop<C, B> {
    cond_fn: C,
    body_fn: B,
    init: Tensor,
    operands: Vec<Tensor>,
    max_trips: Option<usize>,
}

/// What a bounded `while_loop` did: the trips it took (a rank-0 float64, like the solvers' iteration counts) and whether its
/// predicate failed within `max_trips` (a rank-0 bool). Tensors, so they can be read under a
/// trace, like the solvers' `info`.
#[derive(Clone, Debug)]
pub struct WhileInfo {
    pub trips: Tensor,
    pub success: Tensor,
}

impl<C, B> std::fmt::Debug for WhileLoop<C, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "while_loop")
    }
}

fn check_predicate(p: &Tensor) -> Result<()> {
    if p.dtype() == DType::Bool && p.shape().is_empty() {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "while_loop: cond_fun must return a rank-0 bool, got {}{:?}",
            p.dtype().name(),
            p.shape()
        )))
    }
}

impl<C, B> WhileLoop<C, B>
where
    C: Fn(&Tensor, &[Tensor]) -> Result<Tensor>,
    B: Fn(Tensor, &[Tensor]) -> Result<Tensor>,
{
    /// Values both functions read, passed as their second argument.
    pub fn operands<O: AsRef<Tensor>>(mut self, operands: &[O]) -> Self {
        self.operands = owned(operands);
        self
    }

    /// Bounds the loop to at most `n` trips (`n >= 1`). Its forward pass still stops as soon
    /// as the predicate fails; the bound is what gives the loop a reverse mode (transforms.md
    /// §12 as amended in docs/loops.md), which walks back over the trips taken. Eagerly, a
    /// predicate that still holds after `n` trips is [`Error::LoopMaxTrips`]; under a trace the
    /// loop stops there and [`WhileInfo::success`] is false.
    pub fn max_trips(mut self, n: usize) -> Self {
        self.max_trips = Some(n);
        self
    }

    /// Runs or records the loop and returns the final carry.
    #[track_caller]
    pub fn eval(self) -> Result<Tensor> {
        let max_trips = self.max_trips;
        let (carry, info) = self.run()?;
        if let (Some(n), Some(info)) = (max_trips, info) {
            if !trace::active() && !info.success.item_bool()? {
                return Err(Error::LoopMaxTrips {
                    max_trips: n as u64,
                });
            }
        }
        Ok(carry)
    }

    /// Runs or records the loop and returns the final carry with its [`WhileInfo`]; a loop
    /// stopped by its bound is not an error here. Needs [`WhileLoop::max_trips`].
    #[track_caller]
    pub fn eval_with_info(self) -> Result<(Tensor, WhileInfo)> {
        if self.max_trips.is_none() {
            return Err(Error::invalid(
                "while_loop: eval_with_info needs a trip bound; set it with max_trips(n)",
            ));
        }
        let (carry, info) = self.run()?;
        Ok((carry, info.expect("a bounded loop reports its trips")))
    }

    #[track_caller]
    fn run(self) -> Result<(Tensor, Option<WhileInfo>)> {
        check_carry("while_loop", &self.init)?;
        if self.max_trips == Some(0) {
            return Err(Error::invalid("while_loop: max_trips must be at least 1"));
        }
        let carry_ty = strong(&self.init);
        if !trace::active() {
            let mut carry = self.init;
            let mut trips = 0usize;
            let success = loop {
                quabla_backend::cancel::check()?;
                let p = run_body("while_loop", false, || {
                    (self.cond_fn)(&carry, &self.operands)
                })?;
                check_predicate(&p)?;
                if !p.item_bool()? {
                    break true;
                }
                if Some(trips) == self.max_trips {
                    break false;
                }
                let out = run_body("while_loop", false, || {
                    (self.body_fn)(carry, &self.operands)
                })?;
                carry = conform_carry("while_loop", &carry_ty, out)?;
                trips += 1;
            };
            let info = match self.max_trips {
                Some(_) => Some(WhileInfo {
                    trips: crate::creation::array(trips as f64)?,
                    success: crate::creation::array(success)?,
                }),
                None => None,
            };
            return Ok((carry, info));
        }
        // A bounded loop counts its trips in a second carry.
        let counted = self.max_trips.is_some();
        let counter_ty = TensorType::new(DType::F64, quabla_ir::Shape::scalar());
        let mut inputs = vec![("carry".to_string(), carry_ty.clone())];
        if counted {
            inputs.push(("trips".to_string(), counter_ty));
        }
        let n_carry = inputs.len();
        inputs.extend(operand_inputs(&self.operands));
        let cond = trace::trace_region_body("while_loop", &inputs, |mut params| {
            let rest = params.split_off(n_carry);
            let p = (self.cond_fn)(&params[0], &rest)?;
            check_predicate(&p)?;
            Ok(vec![p])
        })?;
        let body = trace::trace_region_body("while_loop", &inputs, |mut params| {
            let rest = params.split_off(n_carry);
            let mut carries = params.into_iter();
            let carry = carries.next().expect("the carry");
            let out = (self.body_fn)(carry, &rest)?;
            let mut outs = vec![conform_carry("while_loop", &carry_ty, out)?];
            if let Some(trips) = carries.next() {
                outs.push(trips.add(&crate::creation::array(1.0)?)?);
            }
            Ok(outs)
        })?;
        let kind = RegionKind::While {
            n_carry,
            cond: freeze(cond),
            body: freeze(body),
            max_trips: self.max_trips,
        };
        let region = Region::new(kind, RegionForm::While, 0)?;
        let mut ops = vec![self.init];
        if counted {
            ops.push(crate::creation::array(0.0)?);
        }
        ops.extend(self.operands.iter().cloned());
        let mut outs = record(region, ops)?.into_iter();
        let carry = outs.next().expect("the carry");
        let Some(trips) = outs.next() else {
            return Ok((carry, None));
        };
        // Stopped by the bound: the predicate still holds after `max_trips` trips.
        let n = self.max_trips.expect("a counted loop is bounded") as f64;
        let at_bound = trips.equal(&crate::creation::array(n)?)?;
        let still = (self.cond_fn)(&carry, &self.operands)?;
        let success = at_bound.logical_and(&still)?.logical_not()?;
        Ok((carry, Some(WhileInfo { trips, success })))
    }
}
