//! [`permutation`] and [`choice`]: samplers over the indices of a population (`0..n`, or the
//! slices of an array along an axis), defined through the samplers of `stream.rs` and the
//! order functions, so that they run eagerly, inside `jit`, per example under `vmap` and in
//! loops with the same bits (docs/random-and-io.md defines their streams). An array population
//! is read with `take`, so the samples differentiate with respect to it (gather's rules).

use super::{stream, KeyArg};
use crate::{DType, Error, Result, Tensor};
use quabla_ir::{HostData, Shape};

/// What [`permutation`] and [`choice`] draw from: the integers `0..n`, or the slices of an array
/// along an axis.
#[derive(Clone, Debug)]
pub enum Population {
    Range(usize),
    Array(Tensor),
}

impl From<usize> for Population {
    fn from(n: usize) -> Population {
        Population::Range(n)
    }
}

impl From<Tensor> for Population {
    fn from(t: Tensor) -> Population {
        Population::Array(t)
    }
}

impl From<&Tensor> for Population {
    fn from(t: &Tensor) -> Population {
        Population::Array(t.clone())
    }
}

/// The random order of `0..n` (int64 `[n]`): the stable argsort of the key's words `0..n` read
/// as int64. A host key sorts on the host (`O(n log n)`); a key tensor records `argsort`,
/// whose cost is quadratic in `n` (see `qb::argsort`).
fn order(key: KeyArg, n: usize) -> Result<Tensor> {
    quabla_random::sample_count(&[n], DType::I64)?;
    match key {
        KeyArg::Host(k) => {
            let mut order: Vec<(i64, i64)> = Vec::new();
            order
                .try_reserve_exact(n)
                .map_err(|_| Error::out_of_memory(n as u128 * 16, "a random permutation"))?;
            order.extend(
                (0..n as u64).map(|e| (quabla_random::word(k.value(), e) as i64, e as i64)),
            );
            // Distinct positions make the order total: this is the stable argsort.
            order.sort_unstable();
            let indices: Vec<i64> = order.into_iter().map(|(_, e)| e).collect();
            Ok(Tensor::from_parts(
                Shape::new(vec![n])?,
                HostData::I64(indices.into()),
                false,
            ))
        }
        arg @ KeyArg::Tensor(_) => stream::permutation(&arg.tensor("permutation")?, n),
    }
}

/// A random permutation: of `0..n` for `Population::Range(n)` (int64 `[n]`), or of the slices
/// of an array along axis 0 (`x` taken at the permutation of `0..x.shape[0]`, so the samples
/// differentiate with respect to `x`). The order is the stable argsort of the key's words
/// `0..n` read as int64 (docs/random-and-io.md): a host key sorts on the host in
/// `O(n log n)`, a key tensor records `argsort`, whose cost is quadratic in `n` (fine for the
/// permutations of a few thousand elements, a minibatch order, that a traced function draws).
///
/// ```
/// use quabla as qb;
/// let k = qb::random::key(0);
/// let x = qb::array([10.0, 20.0, 30.0])?;
/// let shuffled = qb::random::permutation(&k, &x)?;
/// let order = qb::random::permutation(&k, 3)?;
/// assert_eq!(shuffled.to_vec::<f64>()?, qb::take(&x, &order, Some(0))?.to_vec::<f64>()?);
/// # Ok::<(), qb::Error>(())
/// ```
pub fn permutation(key: impl Into<KeyArg>, population: impl Into<Population>) -> Result<Tensor> {
    match population.into() {
        Population::Range(n) => order(key.into(), n),
        Population::Array(x) => {
            if x.ndim() == 0 {
                return Err(Error::shape(
                    "random",
                    "permutation of an array needs rank >= 1, got a rank-0 tensor; permute the integers 0..n with permutation(key, n)",
                ));
            }
            let indices = order(key.into(), x.shape()[0])?;
            crate::take(&x, &indices, Some(0))
        }
    }
}

/// A [`choice`] being configured.
#[derive(Clone, Debug)]
#[must_use = "a sampler draws nothing until eval()"]
pub struct Choice {
    key: KeyArg,
    population: Population,
    shape: Vec<usize>,
    replace: bool,
    p: Option<Tensor>,
    axis: isize,
}

/// Random elements of a population (JAX's `random.choice`): indices into `0..n`
/// (`Population::Range(n)`, int64) or slices of an array along [`Choice::axis`] (the result
/// replaces that axis with [`Choice::shape`]). Options: `.shape()` (default a scalar draw),
/// `.replace(false)` (distinct elements; `prod(shape) <= n`), `.p(&probabilities)` (a rank-1
/// tensor of `n` non-negative weights, which need not sum to 1, traced or not). The streams
/// are those of `randint`, `permutation`, `uniform` and the Gumbel noise of `categorical`
/// (docs/random-and-io.md), so the draws are the same eagerly, jitted and batched.
///
/// ```
/// use quabla as qb;
/// let k = qb::random::key(1);
/// let idx = qb::random::choice(&k, 5).shape([3]).replace(false).eval()?;
/// let mut v = idx.to_vec::<i64>()?;
/// v.sort();
/// v.dedup();
/// assert_eq!(v.len(), 3);
/// let p = qb::array([0.0, 1.0, 0.0])?;
/// let picked = qb::random::choice(&k, &qb::array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])?)
///     .shape([2])
///     .p(&p)
///     .eval()?;
/// assert_eq!(picked.to_vec::<f64>()?, [3.0, 4.0, 3.0, 4.0]);
/// # Ok::<(), qb::Error>(())
/// ```
pub fn choice(key: impl Into<KeyArg>, population: impl Into<Population>) -> Choice {
    Choice {
        key: key.into(),
        population: population.into(),
        shape: Vec::new(),
        replace: true,
        p: None,
        axis: 0,
    }
}

impl Choice {
    /// The shape of the draws (default `[]`, one draw).
    pub fn shape(mut self, shape: impl AsRef<[usize]>) -> Self {
        self.shape = shape.as_ref().to_vec();
        self
    }

    /// With replacement (default) or distinct elements.
    pub fn replace(mut self, replace: bool) -> Self {
        self.replace = replace;
        self
    }

    /// The probabilities of the `n` elements (weights; normalized by their sum).
    pub fn p(mut self, p: &Tensor) -> Self {
        self.p = Some(p.clone());
        self
    }

    /// The axis of an array population to draw slices along (default 0).
    pub fn axis(mut self, axis: isize) -> Self {
        self.axis = axis;
        self
    }

    pub fn eval(self) -> Result<Tensor> {
        let (n, array) = match &self.population {
            Population::Range(n) => (*n, None),
            Population::Array(a) => {
                let axis = quabla_ir::normalize_axis(self.axis, a.ndim()).map_err(|_| {
                    Error::shape(
                        "random",
                        format!(
                            "choice: axis {} is out of bounds for a population of shape {:?}",
                            self.axis,
                            a.shape()
                        ),
                    )
                })?;
                (a.shape()[axis], Some((a, axis)))
            }
        };
        if n == 0 {
            return Err(Error::invalid(
                "choice: the population is empty; give n >= 1 or an array with elements along the axis",
            ));
        }
        let count = quabla_random::sample_count(&self.shape, DType::I64)?;
        if !self.replace && count > n {
            return Err(Error::invalid(format!(
                "choice: cannot take {count} distinct elements from a population of {n}; use replace=true or a smaller shape"
            )));
        }
        let indices = self.indices(n, count)?;
        match array {
            None => Ok(indices),
            Some((a, axis)) => crate::take(a, &indices, Some(axis as isize)),
        }
    }

    /// The drawn indices, int64 of `self.shape`.
    fn indices(&self, n: usize, count: usize) -> Result<Tensor> {
        let dims: Vec<isize> = self.shape.iter().map(|&d| d as isize).collect();
        let Some(p) = &self.p else {
            return if self.replace {
                super::randint(self.key.clone(), &self.shape, 0, n as i64).eval()
            } else {
                order(self.key.clone(), n)?
                    .index(crate::s![0..count])?
                    .reshape(&dims)
            };
        };
        let p = self.probabilities(p, n)?;
        let key = self.key.tensor("choice")?;
        if self.replace {
            // Inverse-CDF sampling: the first index whose cumulative weight reaches
            // `total * (1 - u)`, a point of `(0, total]`.
            let cdf = crate::cumsum(&p).eval()?;
            let total = cdf.index(crate::s![n - 1])?;
            let u = stream::uniform(
                &key,
                &self.shape,
                &quabla_random::UniformBounds::checked(DType::F64, 0.0, 1.0)?,
            )?;
            let r = (&total * &(1.0 - u)?)?;
            let at = crate::searchsorted(&cdf, &r).eval()?;
            at.clip(0i64, n as i64 - 1)
        } else {
            // Gumbel top-k: the k largest of `log p + g` are distinct draws without
            // replacement with probabilities proportional to p.
            let g = stream::gumbel(&key, &[n])?;
            let keys = crate::add(p.log()?, g)?;
            let (_, top) = crate::top_k(&keys, count)?;
            top.reshape(&dims)
        }
    }

    /// `p` as float64 `[n]`, checked when concrete: non-negative, finite, a positive sum.
    fn probabilities(&self, p: &Tensor, n: usize) -> Result<Tensor> {
        if p.shape() != [n] {
            return Err(Error::shape(
                "random",
                format!(
                    "choice: p must have shape [{n}], one weight per element of the population, got {:?}",
                    p.shape()
                ),
            ));
        }
        if p.dtype() == DType::Bool {
            return Err(Error::Type {
                message: "choice: p must be a numeric array, got bool".into(),
            });
        }
        let p = p.astype(DType::F64)?;
        if !p.is_traced() {
            let v = p.to_vec::<f64>()?;
            let ok = v.iter().all(|w| w.is_finite() && *w >= 0.0) && v.iter().sum::<f64>() > 0.0;
            if !ok {
                return Err(Error::invalid(format!(
                    "choice: p must be finite and non-negative with a positive sum, got {v:?}"
                )));
            }
        }
        p.stop_gradient()
    }
}
