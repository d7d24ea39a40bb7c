//! The functional update API of [`Tensor::at`] (JAX's `x.at[idx]`): `set`, `add`,
//! `subtract`, `mul`, `divide`, `power`, `min`, `max`, `apply` and `get`. Every update is a
//! scatter of values at the flat positions the index selects (`ops/indexed.rs`, where an
//! out-of-range position is dropped), plus elementwise arithmetic around it, so it runs
//! eagerly and traced with the same bits, batches, and differentiates with respect to `x` and
//! the values (docs/indexing.md). `x` itself never changes.

use super::indexed::{index_by, scatter_positions, update_positions, IndexEntry, OutOfRange};
use crate::dispatch::apply as apply_graph;
use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{DType, ScatterMode};

/// The functional update API of [`Tensor::at`]: `x.at(ix![&i]).set(v)` returns a copy of `x`
/// with the selected elements replaced; `x` itself never changes.
#[derive(Clone, Debug)]
pub struct At {
    x: Tensor,
    items: Vec<IndexEntry>,
}

impl Tensor {
    /// The functional update view: `x.at(qb::ix![&i]).add(1.0)`.
    pub fn at(&self, items: impl AsRef<[IndexEntry]>) -> At {
        At {
            x: self.clone(),
            items: items.as_ref().to_vec(),
        }
    }
}

impl At {
    fn update(&self, values: Operand, mode: ScatterMode) -> Result<Tensor> {
        if mode != ScatterMode::Set && self.x.dtype() == DType::Bool {
            return Err(Error::BoolOperand {
                op: format!("at[].{}", mode.name()),
            });
        }
        let positions = update_positions(self.x.shape(), &self.items)?;
        scatter_positions(&self.x, &positions, values, mode)
    }

    /// The selected elements replaced by `values` (broadcast to the selection); of repeated
    /// positions the last one wins.
    #[track_caller]
    pub fn set(&self, values: impl Into<Operand>) -> Result<Tensor> {
        self.update(values.into(), ScatterMode::Set)
    }

    /// `values` added at the selection; repeated positions accumulate in order.
    #[track_caller]
    pub fn add(&self, values: impl Into<Operand>) -> Result<Tensor> {
        self.update(values.into(), ScatterMode::Add)
    }

    /// The selection multiplied by `values` (its derivative assumes unique positions).
    #[track_caller]
    pub fn mul(&self, values: impl Into<Operand>) -> Result<Tensor> {
        self.update(values.into(), ScatterMode::Mul)
    }

    /// The elementwise minimum of the selection and `values`.
    #[track_caller]
    pub fn min(&self, values: impl Into<Operand>) -> Result<Tensor> {
        self.update(values.into(), ScatterMode::Min)
    }

    /// The elementwise maximum of the selection and `values`.
    #[track_caller]
    pub fn max(&self, values: impl Into<Operand>) -> Result<Tensor> {
        self.update(values.into(), ScatterMode::Max)
    }

    /// `values` subtracted at the selection (`add` of `-values`); repeated positions
    /// accumulate.
    #[track_caller]
    pub fn subtract(&self, values: impl Into<Operand>) -> Result<Tensor> {
        let values: Operand = values.into();
        let negated = apply_graph(vec![values], |b, v| b.unary(quabla_ir::UnaryOp::Neg, v[0]));
        self.update(negated.into(), ScatterMode::Add)
    }

    /// The selection divided by `values`: `x / d` where `d` is 1 off the selection and the
    /// product of the values sent to each selected element (so repeated positions divide by
    /// every value, as JAX's `x[idx] /= v` applies all updates). Needs a floating `x` (an
    /// integer one would change dtype: `TypeError` naming `astype`).
    #[track_caller]
    pub fn divide(&self, values: impl Into<Operand>) -> Result<Tensor> {
        self.need_float("divide")?;
        let divisor = self.ones_times(values.into())?;
        self.x.div(&divisor)
    }

    /// The selection raised to `values`: `x ** e` where `e` is the product of the values sent
    /// to each selected element (`(x ** v1) ** v2` for a repeated position); elements off the
    /// selection are `x` itself, and take no part in the derivative with respect to the
    /// exponents (they are raised as `1 ** 1`, whose logarithm is 0, so no NaN reaches any
    /// derivative from a negative or zero `x` there).
    #[track_caller]
    pub fn power(&self, values: impl Into<Operand>) -> Result<Tensor> {
        if self.x.dtype() == DType::Bool {
            return Err(Error::BoolOperand {
                op: "at[].power".into(),
            });
        }
        let exponent = self.ones_times(values.into())?;
        let selected = self.selected()?;
        let base = crate::where_(&selected, &self.x, 1i64)?;
        let raised = crate::pow(&base, &exponent)?;
        crate::where_(&selected, &raised, &self.x)
    }

    /// `f` applied to the selected elements, once per occurrence of a position (a repeated
    /// position gets `f(f(x))`), as JAX's `apply` and NumPy's `ufunc.at`. `f` maps a rank-1
    /// array of selected values to the array of their new values (an elementwise function, as
    /// the unary ufuncs JAX takes); it is differentiated like any other code. With concrete
    /// indices the occurrences are counted on the host and `f` runs once per layer of
    /// repetitions; with traced ones the layers run in a bounded `while_loop`, whose body
    /// cannot close over traced values (TR3): `f` may use constants and eager arrays only.
    #[track_caller]
    pub fn apply(&self, f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
        let positions = update_positions(self.x.shape(), &self.items)?.reshape([-1])?;
        let dims: Vec<isize> = self.x.shape().iter().map(|&d| d as isize).collect();
        let dtype = self.x.dtype();
        // Bools travel as int32 (a loop carries floating or integer arrays).
        let carried = if dtype == DType::Bool {
            self.x.reshape([-1])?.astype(DType::I32)?
        } else {
            self.x.reshape([-1])?
        };
        let carried_dtype = carried.dtype();
        let layer = |flat: &Tensor, at: &Tensor| -> Result<Tensor> {
            let picked = apply_graph(vec![flat.into(), at.into()], |b, n| {
                b.index_gather(n[0], n[1], 0, 0)
            })?;
            let picked = if dtype == DType::Bool {
                picked.astype(DType::Bool)?
            } else {
                picked
            };
            let out = f(&picked)?;
            if out.shape() != picked.shape() {
                return Err(Error::shape(
                    "at[].apply",
                    format!(
                        "at[].apply: the function must keep the shape {:?} of the selected values, returned {:?}",
                        picked.shape(),
                        out.shape()
                    ),
                ));
            }
            let out = out.astype(carried_dtype)?;
            apply_graph(vec![flat.into(), at.into(), (&out).into()], |b, n| {
                b.index_scatter(n[0], n[1], n[2], (0, 0), ScatterMode::Set)
            })
        };
        let result = if positions.is_traced() {
            apply_traced(&carried, &positions, &layer)?
        } else {
            let mut flat = carried;
            for at in occurrence_layers(&positions)? {
                flat = layer(&flat, &at)?;
            }
            flat
        };
        let result = if dtype == DType::Bool {
            result.astype(DType::Bool)?
        } else {
            result
        };
        result.reshape(&dims)
    }

    /// The selection itself, as `x.index_with(...)` (out-of-range reads clamp).
    #[track_caller]
    pub fn get(&self) -> Result<Tensor> {
        index_by(&self.x, &self.items, OutOfRange::Clamp)
    }
}

impl At {
    fn need_float(&self, op: &str) -> Result<()> {
        if self.x.dtype().is_float() {
            Ok(())
        } else {
            Err(Error::Type {
                message: format!(
                    "at[].{op} needs a floating array, got {}; convert it with astype(float64) first",
                    self.x.dtype().name()
                ),
            })
        }
    }

    /// Ones of `x`'s shape and dtype times the values at the selection (`mul` scatter).
    fn ones_times(&self, values: Operand) -> Result<Tensor> {
        let ones = crate::ones_like(&self.x)?;
        At {
            x: ones,
            items: self.items.clone(),
        }
        .update(values, ScatterMode::Mul)
    }

    /// Whether each element of `x` is selected (a position out of range selects nothing).
    fn selected(&self) -> Result<Tensor> {
        let positions = update_positions(self.x.shape(), &self.items)?;
        let none = crate::zeros_like(&self.x)?.astype(DType::Bool)?;
        scatter_positions(
            &none,
            &positions,
            crate::array(true)?.into(),
            ScatterMode::Set,
        )
    }
}

/// The concrete flat positions split into layers of occurrences: layer `j` holds the `j`-th
/// occurrence of each position (in row-major order of the selection) and -1 elsewhere, so
/// that every layer writes each position at most once.
fn occurrence_layers(positions: &Tensor) -> Result<Vec<Tensor>> {
    let p = positions.to_vec::<i64>()?;
    let mut seen: std::collections::HashMap<i64, usize> = std::collections::HashMap::new();
    let mut rank = Vec::with_capacity(p.len());
    for &q in &p {
        if q < 0 {
            rank.push(usize::MAX);
            continue;
        }
        let r = seen.entry(q).or_insert(0);
        rank.push(*r);
        *r += 1;
    }
    let layers = seen.values().copied().max().unwrap_or(0);
    (0..layers)
        .map(|j| {
            let at: Vec<i64> = p
                .iter()
                .zip(&rank)
                .map(|(&q, &r)| if r == j { q } else { -1 })
                .collect();
            crate::array(at)
        })
        .collect()
}

/// [`At::apply`] with traced positions: the occurrence rank of each position counted in the
/// graph (how many earlier entries hold it), and a bounded `while_loop` over the layers, as
/// many as the most repeated position needs.
fn apply_traced(
    flat: &Tensor,
    positions: &Tensor,
    layer: &dyn Fn(&Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let m = positions.size();
    let later = positions.reshape([-1, 1])?;
    let earlier = positions.reshape([1, -1])?;
    let same = later.equal(&earlier)?;
    let k = crate::arange(m as i64)?;
    let before = k.reshape([1, -1])?.less(&k.reshape([-1, 1])?)?;
    let rank = same
        .logical_and(&before)?
        .astype(DType::I64)?
        .sum_axes([1])?;
    let valid = positions.greater_equal(0i64)?;
    let rank = crate::where_(&valid, &rank, -1i64)?;
    let layers = (&rank.max()? + 1i64)?;
    let (out, _) = crate::while_loop(
        |(_, j): &(Tensor, Tensor), ops: &[Tensor]| j.less(&ops[2]),
        |(flat, j): (Tensor, Tensor), ops: &[Tensor]| {
            let at = crate::where_(&ops[1].equal(&j)?, &ops[0], -1i64)?;
            Ok((layer(&flat, &at)?, (&j + 1i64)?))
        },
        &(flat.clone(), crate::array(0i64)?),
    )
    .operands(&[positions, &rank, &layers])
    .max_trips(m)
    .eval()?;
    Ok(out)
}
