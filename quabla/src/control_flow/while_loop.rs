//! [`while_loop`]: a loop with a data-dependent trip count, optionally bounded
//! ([`WhileLoop::max_trips`]), which gives it a reverse mode (docs/loops.md).

use super::carry::Carry;
use super::{freeze, operand_inputs, owned, record, run_body};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace;
use crate::tree::{Leaf, Tree, TreeDef};
use quabla_ir::{DType, Region, RegionForm, RegionKind, TensorType};

/// `while_loop(cond_fn, body_fn, init)`: `carry = body_fn(carry, operands)` while
/// `cond_fn(carry, operands)` (a rank-0 bool) holds. The carry is a pytree of floating or
/// integer arrays, as for [`crate::fori_loop`]. Forward-mode differentiable; with
/// [`WhileLoop::max_trips`] reverse-mode differentiable too. Finish with [`WhileLoop::eval`]
/// or [`WhileLoop::eval_with_info`].
pub fn while_loop<T, C, B>(cond_fn: C, body_fn: B, init: &T) -> WhileLoop<T, C, B>
where
    T: Tree,
    C: Fn(&T, &[Tensor]) -> Result<Tensor>,
    B: Fn(T, &[Tensor]) -> Result<T>,
{
    WhileLoop {
        cond_fn,
        body_fn,
        init: crate::tree::flatten(init),
        operands: Vec::new(),
        max_trips: None,
        _carry: std::marker::PhantomData,
    }
}

/// A `while_loop` being configured.
pub struct WhileLoop<T, C, B> {
    cond_fn: C,
    body_fn: B,
    init: (Vec<Leaf>, TreeDef),
    operands: Vec<Tensor>,
    max_trips: Option<usize>,
    _carry: std::marker::PhantomData<fn() -> T>,
}

/// What a bounded `while_loop` did: the trips it took (a rank-0 float64, like the solvers'
/// iteration counts) and whether its predicate failed within `max_trips` (a rank-0 bool).
/// Tensors, so they can be read under a trace, like the solvers' `info`.
#[derive(Clone, Debug)]
pub struct WhileInfo {
    pub trips: Tensor,
    pub success: Tensor,
}

impl<T, C, B> std::fmt::Debug for WhileLoop<T, C, B> {
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

impl<T, C, B> WhileLoop<T, C, B>
where
    T: Tree,
    C: Fn(&T, &[Tensor]) -> Result<Tensor>,
    B: Fn(T, &[Tensor]) -> Result<T>,
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
    pub fn eval(self) -> Result<T> {
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
    pub fn eval_with_info(self) -> Result<(T, WhileInfo)> {
        if self.max_trips.is_none() {
            return Err(Error::invalid(
                "while_loop: eval_with_info needs a trip bound; set it with max_trips(n)",
            ));
        }
        let (carry, info) = self.run()?;
        Ok((carry, info.expect("a bounded loop reports its trips")))
    }

    #[track_caller]
    fn run(self) -> Result<(T, Option<WhileInfo>)> {
        let (leaves, def) = self.init;
        def.check()?;
        let init: T = def.unflatten(leaves)?;
        let (carry, leaves) = Carry::of("while_loop", &init)?;
        if self.max_trips == Some(0) {
            return Err(Error::invalid("while_loop: max_trips must be at least 1"));
        }
        if !trace::active() {
            let mut state = init;
            let mut trips = 0usize;
            let success = loop {
                quabla_backend::cancel::check()?;
                let p = run_body("while_loop", false, || {
                    (self.cond_fn)(&state, &self.operands)
                })?;
                check_predicate(&p)?;
                if !p.item_bool()? {
                    break true;
                }
                if Some(trips) == self.max_trips {
                    break false;
                }
                let out = run_body("while_loop", false, || {
                    (self.body_fn)(state, &self.operands)
                })?;
                state = carry.rebuild(carry.conform("while_loop", &out)?)?;
                trips += 1;
            };
            let info = match self.max_trips {
                Some(_) => Some(WhileInfo {
                    trips: crate::creation::array(trips as f64)?,
                    success: crate::creation::array(success)?,
                }),
                None => None,
            };
            return Ok((state, info));
        }
        // A bounded loop counts its trips in one more carry.
        let counted = self.max_trips.is_some();
        let counter_ty = TensorType::new(DType::F64, quabla_ir::Shape::scalar());
        let mut inputs = carry.inputs();
        if counted {
            inputs.push(("trips".to_string(), counter_ty));
        }
        let n_leaves = carry.len();
        let n_carry = inputs.len();
        inputs.extend(operand_inputs(&self.operands));
        let cond = trace::trace_region_body("while_loop", &inputs, |mut params| {
            let rest = params.split_off(n_carry);
            params.truncate(n_leaves);
            let state: T = carry.rebuild(params)?;
            let p = (self.cond_fn)(&state, &rest)?;
            check_predicate(&p)?;
            Ok(vec![p])
        })?;
        let body = trace::trace_region_body("while_loop", &inputs, |mut params| {
            let rest = params.split_off(n_carry);
            let trips = params.split_off(n_leaves).pop();
            let out = (self.body_fn)(carry.rebuild(params)?, &rest)?;
            let mut outs = carry.conform("while_loop", &out)?;
            if let Some(trips) = trips {
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
        let mut ops = leaves;
        if counted {
            ops.push(crate::creation::array(0.0)?);
        }
        ops.extend(self.operands.iter().cloned());
        let mut outs = record(region, ops)?;
        let trips = outs.split_off(n_leaves).pop();
        let state: T = carry.rebuild(outs)?;
        let Some(trips) = trips else {
            return Ok((state, None));
        };
        // Stopped by the bound: the predicate still holds after `max_trips` trips.
        let n = self.max_trips.expect("a counted loop is bounded") as f64;
        let at_bound = trips.equal(&crate::creation::array(n)?)?;
        let still = (self.cond_fn)(&state, &self.operands)?;
        let success = at_bound.logical_and(&still)?.logical_not()?;
        Ok((state, Some(WhileInfo { trips, success })))
    }
}
