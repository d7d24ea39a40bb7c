//! The counted loops: [`fori_loop`], [`scan`] (the indexed form) and [`scan_over`] (JAX's
//! `scan` over data). All three are one engine, [`Counted::run`]: `length` steps at indices
//! `start + k`, each reading slice `k` of the scanned arrays and writing slice `k` of the
//! stacked outputs, run as a Rust loop eagerly (or unrolled into the trace) and recorded as one
//! `scan` region under a transform.

use super::carry::Carry;
use super::{freeze, operand_inputs, owned, record, run_body, strong, LoopIndex};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace;
use crate::tree::{Leaf, Tree, TreeDef};
use quabla_ir::{Region, RegionForm, RegionKind, ScanBody, Shape, TensorType};
use std::cell::RefCell;

/// One step of a counted loop: `(carry, index, slices of xs, operands) -> (carry, leaves of
/// y, structure of y)`.
type Step<'s, C> =
    dyn Fn(C, LoopIndex, Vec<Tensor>, &[Tensor]) -> Result<(C, Vec<Tensor>, TreeDef)> + 's;

/// What a counted loop runs: `length >= 1` steps; step `k` has index `start + k` and reads
/// slice `k` of each of `xs` (leading axis); steps run from the last `k` when `reverse`.
struct Counted<'a> {
    primitive: &'static str,
    form: RegionForm,
    length: usize,
    start: usize,
    reverse: bool,
    unroll: bool,
    operands: &'a [Tensor],
    xs: &'a [Tensor],
}

impl Counted<'_> {
    /// Runs (eagerly or unrolled) or records the loop: the final carry and the stacked leaves
    /// of `y` with their structure.
    #[track_caller]
    fn run<C: Tree>(&self, init: &C, step: &Step<'_, C>) -> Result<(C, Vec<Tensor>, TreeDef)> {
        let (carry, leaves) = Carry::of(self.primitive, init)?;
        if !trace::active() || self.unroll {
            return self.run_eagerly(&carry, leaves, step);
        }
        let float = carry.float_dtype();
        let index_ty = TensorType::new(
            LoopIndex::parameter_dtype(float, self.start + self.length - 1),
            Shape::scalar(),
        );
        let mut inputs = vec![("i".to_string(), index_ty)];
        inputs.extend(carry.inputs());
        inputs.extend(operand_inputs(self.operands));
        for (k, t) in self.xs.iter().enumerate() {
            let ty = strong(t);
            let slice = TensorType::new(ty.dtype, Shape::new(t.shape()[1..].to_vec())?);
            inputs.push((format!("x{k}"), slice));
        }
        let (n_carry, n_const) = (carry.len(), self.operands.len());
        let y_def = RefCell::new(None);
        let body = trace::trace_region_body(self.primitive, &inputs, |mut params| {
            let x_leaves = params.split_off(1 + n_carry + n_const);
            let consts = params.split_off(1 + n_carry);
            let carries = params.split_off(1);
            let index = LoopIndex::traced(params.pop().expect("the index"), float)?;
            let (c, ys, def) = step(carry.rebuild(carries)?, index, x_leaves, &consts)?;
            *y_def.borrow_mut() = Some(def);
            let mut outs = carry.conform(self.primitive, &c)?;
            outs.extend(ys);
            Ok(outs)
        })?;
        let y_def = y_def.into_inner().expect("the body was traced");
        let kind = RegionKind::Scan(ScanBody {
            length: self.length,
            start: self.start,
            reverse: self.reverse,
            n_carry,
            n_const,
            n_xs: self.xs.len(),
            body: freeze(body),
        });
        let region = Region::new(kind, self.form, 0)?;
        let mut ops = leaves;
        ops.extend(self.operands.iter().cloned());
        ops.extend(self.xs.iter().cloned());
        let mut outs = record(region, ops)?;
        let ys = outs.split_off(n_carry);
        Ok((carry.rebuild(outs)?, ys, y_def))
    }

    /// The loop as Rust code: each step on the previous carry, the `y`s stacked at the end.
    fn run_eagerly<C: Tree>(
        &self,
        carry: &Carry,
        leaves: Vec<Tensor>,
        step: &Step<'_, C>,
    ) -> Result<(C, Vec<Tensor>, TreeDef)> {
        let float = carry.float_dtype();
        let mut state: C = carry.rebuild(leaves)?;
        // The per-step outputs, reserved once the first step shows there are some (a
        // `fori_loop` has none, and may run far more steps than memory holds outputs).
        let mut steps: Vec<Vec<Tensor>> = Vec::new();
        let mut y_def: Option<TreeDef> = None;
        for n in 0..self.length {
            // An eager loop is the facade's own: it watches the cancellation flags once per
            // iteration, as executors do between plan nodes.
            quabla_backend::cancel::check()?;
            let k = if self.reverse { self.length - 1 - n } else { n };
            let index = LoopIndex::eager(self.start + k, float);
            let x_leaves = self
                .xs
                .iter()
                .map(|t| t.index([crate::ops::index::IndexItem::Int(k as isize)]))
                .collect::<Result<Vec<_>>>()?;
            let (c, ys, def) = run_body(self.primitive, self.unroll, || {
                step(state, index, x_leaves, self.operands)
            })?;
            state = carry.rebuild(carry.conform(self.primitive, &c)?)?;
            match &y_def {
                Some(first) => {
                    let same = *first == def
                        && steps.first().is_none_or(|s0| {
                            s0.iter()
                                .zip(&ys)
                                .all(|(a, b)| a.shape() == b.shape() && a.dtype() == b.dtype())
                        });
                    if !same {
                        return Err(Error::shape(
                            self.primitive,
                            format!(
                                "{}: per-step outputs must keep one structure, shape and dtype, got {} then {}",
                                self.primitive,
                                describe_step(first, steps.first().map_or(&[], |s| s)),
                                describe_step(&def, &ys)
                            ),
                        ));
                    }
                }
                None => {
                    if def.num_leaves() > 0 {
                        steps =
                            quabla_ir::alloc::try_vec_with_capacity(self.length).map_err(|e| {
                                Error::out_of_memory(
                                    e.bytes,
                                    format!(
                                        "the per-step outputs of a {} of length {}",
                                        self.primitive, self.length
                                    ),
                                )
                            })?;
                    }
                    y_def = Some(def);
                }
            }
            if !ys.is_empty() {
                steps.push(ys);
            }
        }
        if self.reverse {
            steps.reverse();
        }
        let y_def = y_def.expect("length >= 1");
        let stacked = (0..y_def.num_leaves())
            .map(|j| {
                let column: Vec<&Tensor> = steps.iter().map(|s| &s[j]).collect();
                crate::stack(&column, 0)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((state, stacked, y_def))
    }
}

/// A step's outputs for messages: `float64[3]`, or the structure and the leaves' types.
fn describe_step(def: &TreeDef, ys: &[Tensor]) -> String {
    let types: Vec<String> = ys
        .iter()
        .map(|t| format!("{}{:?}", t.dtype().name(), t.shape()))
        .collect();
    if *def == TreeDef::Leaf {
        types.join(", ")
    } else {
        format!("{def} of [{}]", types.join(", "))
    }
}

/// The leaves of a per-step output `y`: arrays (TY otherwise).
fn y_leaves<Y: Tree>(primitive: &str, y: &Y) -> Result<(Vec<Tensor>, TreeDef)> {
    let (leaves, def) = crate::tree::flatten(y);
    def.check()?;
    let ys = leaves
        .into_iter()
        .map(|l| match l {
            Leaf::Tensor(t) => Ok(t),
            other => Err(Error::Type {
                message: format!(
                    "{primitive}: every leaf of the per-step output y must be an array, got {}",
                    super::describe_leaf(&other)
                ),
            }),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((ys, def))
}

// ---------------------------------------------------------------------------------------------
// fori_loop

/// `fori_loop(lower, upper, body, init)`: `carry = body(i, carry, operands)` for `i` in
/// `lower..upper`; `upper <= lower` returns `init`. The carry is a pytree of floating or
/// integer arrays (one array, or a tuple with a key tensor, say) that the body gives back with
/// the same structure, shapes and dtypes; `i` is a [`LoopIndex`]. Finish with
/// [`ForiLoop::eval`].
///
/// ```
/// use quabla as qb;
/// # fn main() -> qb::Result<()> {
/// // A key tensor carried next to float state: each step splits it and draws from one half.
/// let key = qb::random::key_data(&qb::random::key(0));
/// let body = |_: qb::LoopIndex, (k, x): (qb::Tensor, qb::Tensor), _: &[qb::Tensor]| {
///     let ks = qb::random::split(&k, 2)?;
///     let noise = qb::random::normal(&ks.index(qb::s![1])?, [2]).eval()?;
///     Ok((ks.index(qb::s![0])?, (&x + &noise)?))
/// };
/// let (k, x) = qb::fori_loop(0, 3, body, &(key, qb::zeros([2])?)).eval()?;
/// assert_eq!((k.dtype(), x.shape()), (qb::I64, &[2usize][..]));
/// # Ok(())
/// # }
/// ```
pub fn fori_loop<C, B>(lower: usize, upper: usize, body: B, init: &C) -> ForiLoop<C, B>
where
    C: Tree,
    B: Fn(LoopIndex, C, &[Tensor]) -> Result<C>,
{
    ForiLoop {
        lower,
        upper,
        body,
        init: crate::tree::flatten(init),
        operands: Vec::new(),
        unroll: false,
        _carry: std::marker::PhantomData,
    }
}

/// A `fori_loop` being configured.
pub struct ForiLoop<C, B> {
    lower: usize,
    upper: usize,
    body: B,
    init: (Vec<Leaf>, TreeDef),
    operands: Vec<Tensor>,
    unroll: bool,
    _carry: std::marker::PhantomData<fn() -> C>,
}

impl<C, B> std::fmt::Debug for ForiLoop<C, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fori_loop({}..{})", self.lower, self.upper)
    }
}

impl<C, B> ForiLoop<C, B>
where
    C: Tree,
    B: Fn(LoopIndex, C, &[Tensor]) -> Result<C>,
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
    pub fn eval(self) -> Result<C> {
        let (leaves, def) = self.init;
        def.check()?;
        let init: C = def.unflatten(leaves)?;
        if self.upper <= self.lower {
            // The carry contract still holds for a loop that never runs.
            Carry::of("fori_loop", &init)?;
            return Ok(init);
        }
        let body = &self.body;
        let step = |c: C,
                    i: LoopIndex,
                    _: Vec<Tensor>,
                    ops: &[Tensor]|
         -> Result<(C, Vec<Tensor>, TreeDef)> {
            Ok((body(i, c, ops)?, Vec::new(), TreeDef::None))
        };
        let counted = Counted {
            primitive: "fori_loop",
            form: RegionForm::Fori,
            length: self.upper - self.lower,
            start: self.lower,
            reverse: false,
            unroll: self.unroll,
            operands: &self.operands,
            xs: &[],
        };
        Ok(counted.run(&init, &step)?.0)
    }
}

// ---------------------------------------------------------------------------------------------
// scan

/// `scan(f, init, length)`: `(carry, y) = f(carry, i, operands)` for `i` in `0..length`;
/// returns the final carry and the `y`s stacked on a new leading axis (each leaf of a pytree
/// `y`). The carry is a pytree of floating or integer arrays, as for [`fori_loop`]. Finish
/// with [`Scan::eval`].
pub fn scan<C, F, Y>(f: F, init: &C, length: usize) -> Scan<C, F>
where
    C: Tree,
    Y: Tree,
    F: Fn(C, LoopIndex, &[Tensor]) -> Result<(C, Y)>,
{
    Scan {
        f,
        init: crate::tree::flatten(init),
        length,
        operands: Vec::new(),
        unroll: false,
        _carry: std::marker::PhantomData,
    }
}

/// A `scan` being configured.
pub struct Scan<C, F> {
    f: F,
    init: (Vec<Leaf>, TreeDef),
    length: usize,
    operands: Vec<Tensor>,
    unroll: bool,
    _carry: std::marker::PhantomData<fn() -> C>,
}

impl<C, F> std::fmt::Debug for Scan<C, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "scan(length={})", self.length)
    }
}

impl<C: Tree, F> Scan<C, F> {
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

    /// Runs or records the scan: `(final carry, ys)` with each leaf of `ys` of shape
    /// `[length, *y.shape]`.
    #[track_caller]
    pub fn eval<Y: Tree>(self) -> Result<(C, Y)>
    where
        F: Fn(C, LoopIndex, &[Tensor]) -> Result<(C, Y)>,
    {
        let (leaves, def) = self.init;
        def.check()?;
        let init: C = def.unflatten(leaves)?;
        if self.length == 0 {
            return Err(Error::invalid("scan: length must be >= 1"));
        }
        let f = &self.f;
        let step = |c: C,
                    i: LoopIndex,
                    _: Vec<Tensor>,
                    ops: &[Tensor]|
         -> Result<(C, Vec<Tensor>, TreeDef)> {
            let (c, y) = f(c, i, ops)?;
            let (ys, def) = y_leaves("scan", &y)?;
            Ok((c, ys, def))
        };
        let counted = Counted {
            primitive: "scan",
            form: RegionForm::Scan,
            length: self.length,
            start: 0,
            reverse: false,
            unroll: self.unroll,
            operands: &self.operands,
            xs: &[],
        };
        let (carry, ys, y_def) = counted.run(&init, &step)?;
        Ok((
            carry,
            y_def.unflatten(ys.into_iter().map(Leaf::Tensor).collect())?,
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// scan over data

/// `scan_over(f, init, xs)`: JAX's `scan(f, init, xs)`. `(carry, y) = f(carry, x, operands)`
/// where `x` is slice `k` along the leading axis of every array of the pytree `xs`, for `k` in
/// `0..length` (the common leading extent); returns the final carry and the pytree of `y`s,
/// each leaf stacked on a new leading axis. The carry is a pytree of floating or integer
/// arrays, as for [`fori_loop`]; `xs` and `y` are pytrees of arrays of any dtype. Finish with
/// [`ScanOver::eval`].
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
pub fn scan_over<C, X, F, Y>(f: F, init: &C, xs: &X) -> ScanOver<C, X, F>
where
    C: Tree,
    X: Tree,
    Y: Tree,
    F: Fn(C, X, &[Tensor]) -> Result<(C, Y)>,
{
    ScanOver {
        f,
        init: crate::tree::flatten(init),
        xs: crate::tree::flatten(xs),
        operands: Vec::new(),
        reverse: false,
        unroll: false,
        _types: std::marker::PhantomData,
    }
}

/// A `scan_over` being configured.
pub struct ScanOver<C, X, F> {
    f: F,
    init: (Vec<Leaf>, TreeDef),
    xs: (Vec<Leaf>, TreeDef),
    operands: Vec<Tensor>,
    reverse: bool,
    unroll: bool,
    _types: std::marker::PhantomData<fn() -> (C, X)>,
}

impl<C, X, F> std::fmt::Debug for ScanOver<C, X, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "scan_over(xs={})", self.xs.1)
    }
}

impl<C: Tree, X: Tree, F> ScanOver<C, X, F> {
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
    pub fn eval<Y: Tree>(self) -> Result<(C, Y)>
    where
        F: Fn(C, X, &[Tensor]) -> Result<(C, Y)>,
    {
        let (leaves, def) = self.init;
        def.check()?;
        let init: C = def.unflatten(leaves)?;
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
                        super::describe_leaf(other)
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
        let f = &self.f;
        let step = |c: C,
                    _: LoopIndex,
                    x_leaves: Vec<Tensor>,
                    ops: &[Tensor]|
         -> Result<(C, Vec<Tensor>, TreeDef)> {
            let x: X = xs_def.unflatten(x_leaves.into_iter().map(Leaf::Tensor).collect())?;
            let (c, y) = f(c, x, ops)?;
            let (ys, def) = y_leaves("scan", &y)?;
            Ok((c, ys, def))
        };
        let counted = Counted {
            primitive: "scan",
            form: RegionForm::Scan,
            length,
            start: 0,
            reverse: self.reverse,
            unroll: self.unroll,
            operands: &self.operands,
            xs: &xs,
        };
        let (carry, ys, y_def) = counted.run(&init, &step)?;
        Ok((
            carry,
            y_def.unflatten(ys.into_iter().map(Leaf::Tensor).collect())?,
        ))
    }
}
