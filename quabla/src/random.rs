//! `qb::random` (api.md §14): explicit keys and eager samplers that return tensors.
//!
//! The generator itself — keys, `split`, `fold_in` and the bit-exact sampling formulas of
//! numerics.md §9 — lives in `quabla-random`; this module owns the facade's spelling of it
//! (builders finished with `eval()`, bounds given as numbers or concrete rank-0 tensors) and
//! the tracing rule of numerics.md §9.5: sampling happens on the host, so a traced bound is TR6
//! and samples drawn inside a traced function from a captured key are constants of the trace.
//! (A key passed as a traced argument is refused by the staging layer, also TR6.)
//!
//! ```
//! use quabla as qb;
//! let k = qb::random::key(42);
//! let [init, noise] = <[qb::random::Key; 2]>::try_from(qb::random::split(&k, 2)?).unwrap();
//! let w = qb::random::glorot_normal(&init, [2, 16]).eval()?;
//! let u = qb::random::uniform(&noise, [4]).dtype(qb::F32).minval(-1.0).eval()?;
//! assert_eq!((w.shape(), u.dtype()), (&[2usize, 16][..], qb::F32));
//! # Ok::<(), qb::Error>(())
//! ```

use crate::error::TracerErrorKind;
use crate::{DType, Error, Result, Tensor};
use quabla_ir::Shape;
use quabla_random::Samples;

pub use quabla_random::{fold_in, key, Key, KeyData};

/// `num` new keys derived from `key` (AR10 for `num == 0`); `split(k, n)[j]` does not depend
/// on `n`.
pub fn split(key: &Key, num: usize) -> Result<Vec<Key>> {
    Ok(quabla_random::split(key, num)?)
}

/// A scalar parameter of a sampler (`minval`, `maxval`, `p`): a number, or a concrete rank-0
/// tensor (a tracer is TR6: the samples are drawn on the host, before any trace runs).
#[derive(Clone, Debug)]
pub enum Param {
    Value(f64),
    Tensor(Tensor),
}

impl From<f64> for Param {
    fn from(v: f64) -> Param {
        Param::Value(v)
    }
}

impl From<Tensor> for Param {
    fn from(t: Tensor) -> Param {
        Param::Tensor(t)
    }
}

impl From<&Tensor> for Param {
    fn from(t: &Tensor) -> Param {
        Param::Tensor(t.clone())
    }
}

impl Param {
    /// The number, for the parameter called `name`.
    fn resolve(&self, name: &str) -> Result<f64> {
        match self {
            Param::Value(v) => Ok(*v),
            Param::Tensor(t) if t.is_traced() => Err(Error::Tracer {
                kind: TracerErrorKind::RandomTraced,
                message: format!(
                    "{name} is a tracer: quabla.random samples on the host and keys are not traced; draw samples outside the transform and pass them in"
                ),
            }),
            Param::Tensor(t) if t.ndim() != 0 => Err(Error::shape(
                "random",
                format!("{name} must be a scalar, got an array of shape {:?}", t.shape()),
            )),
            Param::Tensor(t) => t.item(),
        }
    }
}

/// The tensor of drawn samples.
fn tensor(shape: &[usize], samples: Samples) -> Result<Tensor> {
    let shape = Shape::new(shape.to_vec())?;
    Ok(Tensor::from_parts(shape, samples.into_host_data(), false))
}

/// Samples on `[minval, maxval)` (defaults 0 and 1, float64): [`uniform`].
#[derive(Clone, Debug)]
#[must_use = "a sampler draws nothing until eval()"]
pub struct Uniform {
    key: Key,
    shape: Vec<usize>,
    dtype: DType,
    minval: Param,
    maxval: Param,
}

/// Uniform samples of `shape`; never `maxval`, also after rounding to float32. Finish with
/// `.eval()`; options `.dtype()`, `.minval()`, `.maxval()`.
pub fn uniform(key: &Key, shape: impl AsRef<[usize]>) -> Uniform {
    Uniform {
        key: *key,
        shape: shape.as_ref().to_vec(),
        dtype: DType::F64,
        minval: Param::Value(0.0),
        maxval: Param::Value(1.0),
    }
}

impl Uniform {
    /// float32 or float64 (TY11 otherwise).
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }
    /// The inclusive lower bound (finite, below `maxval`: AR12).
    pub fn minval(mut self, minval: impl Into<Param>) -> Self {
        self.minval = minval.into();
        self
    }
    /// The exclusive upper bound.
    pub fn maxval(mut self, maxval: impl Into<Param>) -> Self {
        self.maxval = maxval.into();
        self
    }
    pub fn eval(self) -> Result<Tensor> {
        let (lo, hi) = (
            self.minval.resolve("minval")?,
            self.maxval.resolve("maxval")?,
        );
        let samples = quabla_random::uniform(&self.key, &self.shape, self.dtype, lo, hi)?;
        tensor(&self.shape, samples)
    }
}

/// Boolean samples, true with probability `p` (default 0.5, shape `()`): [`bernoulli`].
#[derive(Clone, Debug)]
#[must_use = "a sampler draws nothing until eval()"]
pub struct Bernoulli {
    key: Key,
    shape: Vec<usize>,
    p: Param,
}

/// Bool samples, each true with probability `p`; options `.p()` (in `[0, 1]`, AR11) and
/// `.shape()` (default a scalar).
pub fn bernoulli(key: &Key) -> Bernoulli {
    Bernoulli {
        key: *key,
        shape: Vec::new(),
        p: Param::Value(0.5),
    }
}

impl Bernoulli {
    pub fn p(mut self, p: impl Into<Param>) -> Self {
        self.p = p.into();
        self
    }
    pub fn shape(mut self, shape: impl AsRef<[usize]>) -> Self {
        self.shape = shape.as_ref().to_vec();
        self
    }
    pub fn eval(self) -> Result<Tensor> {
        let p = self.p.resolve("p")?;
        let samples = quabla_random::bernoulli(&self.key, p, &self.shape)?;
        tensor(&self.shape, samples)
    }
}

/// Which sampler a [`Sampler`] draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Normal,
    GlorotNormal,
    GlorotUniform,
    HeNormal,
}

/// Standard normal samples and the initializers (float64 unless `.dtype()` says otherwise):
/// [`normal`], [`glorot_normal`], [`glorot_uniform`], [`he_normal`].
#[derive(Clone, Debug)]
#[must_use = "a sampler draws nothing until eval()"]
pub struct Sampler {
    key: Key,
    shape: Vec<usize>,
    dtype: DType,
    family: Family,
}

impl Sampler {
    /// float32 or float64 (TY11 otherwise).
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }
    pub fn eval(self) -> Result<Tensor> {
        let (k, s, d) = (&self.key, self.shape.as_slice(), self.dtype);
        let samples = match self.family {
            Family::Normal => quabla_random::normal(k, s, d),
            Family::GlorotNormal => quabla_random::glorot_normal(k, s, d),
            Family::GlorotUniform => quabla_random::glorot_uniform(k, s, d),
            Family::HeNormal => quabla_random::he_normal(k, s, d),
        }?;
        tensor(s, samples)
    }
}

fn sampler(key: &Key, shape: impl AsRef<[usize]>, family: Family) -> Sampler {
    Sampler {
        key: *key,
        shape: shape.as_ref().to_vec(),
        dtype: DType::F64,
        family,
    }
}

/// Standard normal samples by Box–Muller (magnitudes at most about 8.57).
pub fn normal(key: &Key, shape: impl AsRef<[usize]>) -> Sampler {
    sampler(key, shape, Family::Normal)
}

/// Glorot (Xavier) normal: standard deviation `sqrt(2 / (fan_in + fan_out))`, untruncated;
/// rank >= 2 (AR12), fans as numerics.md §9.3 defines them.
pub fn glorot_normal(key: &Key, shape: impl AsRef<[usize]>) -> Sampler {
    sampler(key, shape, Family::GlorotNormal)
}

/// Glorot (Xavier) uniform on `[-l, l)`, `l = sqrt(6 / (fan_in + fan_out))`; rank >= 2.
pub fn glorot_uniform(key: &Key, shape: impl AsRef<[usize]>) -> Sampler {
    sampler(key, shape, Family::GlorotUniform)
}

/// He (Kaiming) normal: standard deviation `sqrt(2 / fan_in)`, untruncated; rank >= 2.
pub fn he_normal(key: &Key, shape: impl AsRef<[usize]>) -> Sampler {
    sampler(key, shape, Family::HeNormal)
}
