//! `check_grads`: derivatives checked against central differences in float64, in forward and
//! reverse mode, recursively to any order — the one derivative checker of the project's tests.
//!
//! A [`Differentiable`] is a function of float64 arrays that can give its JVP function
//! `(x, v) -> (f(x), J(x) v)` and its VJP function `(x, u) -> (f(x), J(x)^T u)`, each again a
//! [`Differentiable`]. [`GraphFunction`] is one for an IR graph (its derivatives are
//! [`crate::jvp_graph`] and [`crate::vjp_graph`]); the facade has one for closures, built on its
//! `jvp` and `vjp`, so transform compositions are checked through the public API.
//!
//! At order 1, [`check_grads`] draws a direction `v` (and a cotangent `u`) and compares
//! `J v` with `(f(x + εv) − f(x − εv)) / 2ε`, and `<u, J v>` computed as `<J^T u, v>` with the
//! same difference. At order `k` it then checks the JVP function (and the VJP function) at
//! order `k − 1`, as JAX's `check_grads` does: every level is one difference away from an
//! exact derivative, so the error does not compound with the order.

use crate::{jvp_graph, vjp_graph, Seed};
use quabla_ir::{DType, Graph, HostData, Shape};
use quabla_random::testing::TestRng;
use std::fmt;

/// A float64 array: extents and row-major values.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    pub shape: Vec<usize>,
    pub values: Vec<f64>,
}

impl Array {
    pub fn new(shape: Vec<usize>, values: Vec<f64>) -> Array {
        Array { shape, values }
    }

    fn like(&self, values: Vec<f64>) -> Array {
        Array {
            shape: self.shape.clone(),
            values,
        }
    }
}

/// Which modes to check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Modes {
    pub forward: bool,
    pub reverse: bool,
}

impl Modes {
    pub const FORWARD: Modes = Modes {
        forward: true,
        reverse: false,
    };
    pub const REVERSE: Modes = Modes {
        forward: false,
        reverse: true,
    };
    pub const BOTH: Modes = Modes {
        forward: true,
        reverse: true,
    };
}

/// How close a derivative must be to its difference: `|got - want| <= atol + rtol * |want|`
/// per element.
#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
    /// The step of the central difference, relative to the largest magnitude of `x`
    /// (at least 1).
    pub eps: f64,
    /// The factor by which `rtol` and `atol` grow per derivative level (deeper derivative
    /// graphs round a little more).
    pub growth: f64,
}

impl Default for Tolerance {
    fn default() -> Tolerance {
        Tolerance {
            rtol: 1e-6,
            atol: 1e-6,
            eps: 1e-5,
            growth: 1.0,
        }
    }
}

/// A function of float64 arrays with derivatives of its own.
pub trait Differentiable {
    /// The outputs at `inputs`.
    fn eval(&self, inputs: &[Array]) -> Result<Vec<Array>, String>;
    /// `(x, v) -> (f(x), J(x) v)`: the `n_inputs` inputs then one tangent per input; the
    /// outputs then one tangent per output.
    fn jvp(&self, n_inputs: usize) -> Result<Box<dyn Differentiable + '_>, String>;
    /// `(x, u) -> (f(x), J(x)^T u)`: the `n_inputs` inputs then one cotangent per output; the
    /// outputs then one cotangent per input.
    fn vjp(&self, n_inputs: usize) -> Result<Box<dyn Differentiable + '_>, String>;
}

/// Checks the derivatives of `f` at `x` to `order` in `modes` (see the module docs); the
/// directions come from `seed`. The error names the order, the mode and the worst element.
pub fn check_grads(
    f: &dyn Differentiable,
    x: &[Array],
    order: usize,
    modes: Modes,
    tolerance: Tolerance,
    seed: u64,
) -> Result<(), String> {
    check_at(f, x, order, modes, tolerance, &mut TestRng::new(seed), 1)
}

fn check_at(
    f: &dyn Differentiable,
    x: &[Array],
    order: usize,
    modes: Modes,
    tol: Tolerance,
    rng: &mut TestRng,
    level: usize,
) -> Result<(), String> {
    if order == 0 {
        return Ok(());
    }
    let y = f.eval(x)?;
    let v: Vec<Array> = x
        .iter()
        .map(|a| a.like(direction(rng, a.values.len())))
        .collect();
    let u: Vec<Array> = y
        .iter()
        .map(|a| a.like(direction(rng, a.values.len())))
        .collect();
    let scale = x
        .iter()
        .flat_map(|a| &a.values)
        .fold(1.0f64, |m, v| m.max(v.abs()));
    let eps = tol.eps * scale;
    let shifted = |sign: f64| -> Vec<Array> {
        x.iter()
            .zip(&v)
            .map(|(a, d)| {
                a.like(
                    a.values
                        .iter()
                        .zip(&d.values)
                        .map(|(p, t)| p + sign * eps * t)
                        .collect(),
                )
            })
            .collect()
    };
    let plus = f.eval(&shifted(1.0))?;
    let minus = f.eval(&shifted(-1.0))?;
    let fd: Vec<Vec<f64>> = plus
        .iter()
        .zip(&minus)
        .map(|(p, m)| {
            p.values
                .iter()
                .zip(&m.values)
                .map(|(a, b)| (a - b) / (2.0 * eps))
                .collect()
        })
        .collect();
    let n_out = y.len();
    let widen = tol.growth.powi(level as i32 - 1);
    let level_tol = Tolerance {
        rtol: tol.rtol * widen,
        atol: tol.atol * widen,
        ..tol
    };
    if modes.forward {
        let jvp = f.jvp(x.len())?;
        let mut args = x.to_vec();
        args.extend(v.iter().cloned());
        let outs = jvp.eval(&args)?;
        for (k, want) in fd.iter().enumerate() {
            let got = &outs
                .get(n_out + k)
                .ok_or_else(|| format!("order {level}: the JVP has no tangent for output {k}"))?
                .values;
            compare(
                &format!("order {level} forward, output {k}"),
                got,
                want,
                tol,
            )?;
        }
        check_at(&*jvp, &args, order - 1, modes, tol, rng, level + 1)?;
    }
    if modes.reverse {
        let vjp = f.vjp(x.len())?;
        let mut args = x.to_vec();
        args.extend(u.iter().cloned());
        let outs = vjp.eval(&args)?;
        let got: f64 = outs[n_out..]
            .iter()
            .zip(&v)
            .map(|(ct, d)| dot(&ct.values, &d.values))
            .sum();
        let want: f64 = u.iter().zip(&fd).map(|(c, d)| dot(&c.values, d)).sum();
        compare(
            &format!("order {level} reverse, <J^T u, v>"),
            &[got],
            &[want],
            level_tol,
        )?;
        check_at(&*vjp, &args, order - 1, modes, tol, rng, level + 1)?;
    }
    Ok(())
}

/// A random direction with entries in `[-1, 1)`, away from zero so every entry matters.
fn direction(rng: &mut TestRng, n: usize) -> Vec<f64> {
    (0..n)
        .map(|_| {
            let m = rng.between(0.25, 1.0);
            if rng.chance(0.5) {
                m
            } else {
                -m
            }
        })
        .collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn compare(what: &str, got: &[f64], want: &[f64], tol: Tolerance) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} derivative values for {} differences",
            got.len(),
            want.len()
        ));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let bound = tol.atol + tol.rtol * w.abs();
        // A NaN on either side fails too.
        let within = (g - w).abs() <= bound;
        if !within {
            return Err(format!(
                "{what}, element {i}: derivative {g:e} but central difference {w:e} (|diff| {:e} > {bound:e})",
                (g - w).abs()
            ));
        }
    }
    Ok(())
}

/// How a [`GraphFunction`] evaluates graphs: the reference interpreter or a backend.
pub type Evaluate<'e> = dyn Fn(&Graph, &[HostData]) -> Result<Vec<HostData>, String> + 'e;

/// An IR graph of float64 inputs and outputs as a [`Differentiable`]: its derivatives are its
/// JVP and VJP graphs, evaluated with `evaluate`.
pub struct GraphFunction<'e> {
    graph: Graph,
    evaluate: &'e Evaluate<'e>,
}

impl fmt::Debug for GraphFunction<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GraphFunction({} nodes)", self.graph.len())
    }
}

impl<'e> GraphFunction<'e> {
    /// `graph`, whose inputs and outputs must all be float64.
    pub fn new(graph: Graph, evaluate: &'e Evaluate<'e>) -> Result<GraphFunction<'e>, String> {
        let float64 = |dtype: DType| dtype == DType::F64;
        if !graph.inputs().all(|(_, _, t)| float64(t.dtype))
            || !graph
                .outputs()
                .iter()
                .all(|o| float64(graph.node(*o).ty.dtype))
        {
            return Err("check_grads needs a graph of float64 inputs and outputs".into());
        }
        Ok(GraphFunction { graph, evaluate })
    }
}

impl Differentiable for GraphFunction<'_> {
    fn eval(&self, inputs: &[Array]) -> Result<Vec<Array>, String> {
        let data: Vec<HostData> = inputs
            .iter()
            .map(|a| HostData::F64(a.values.clone().into()))
            .collect();
        let outs = (self.evaluate)(&self.graph, &data)?;
        Ok(outs
            .iter()
            .zip(self.graph.outputs())
            .map(|(d, o)| {
                let shape: &Shape = &self.graph.node(*o).ty.shape;
                Array::new(shape.dims().to_vec(), d.to_f64_vec())
            })
            .collect())
    }

    fn jvp(&self, _: usize) -> Result<Box<dyn Differentiable + '_>, String> {
        let wrt = vec![true; self.graph.inputs().count()];
        let g = jvp_graph(&self.graph, &wrt).map_err(|e| e.to_string())?;
        Ok(Box::new(GraphFunction::new(g, self.evaluate)?))
    }

    fn vjp(&self, _: usize) -> Result<Box<dyn Differentiable + '_>, String> {
        let wrt = vec![true; self.graph.inputs().count()];
        let seeds = vec![Seed::Input; self.graph.outputs().len()];
        let g = vjp_graph(&self.graph, &wrt, &seeds).map_err(|e| e.to_string())?;
        Ok(Box::new(GraphFunction::new(g, self.evaluate)?))
    }
}
