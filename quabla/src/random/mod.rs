//! `qb::random` (api.md §14): explicit keys and samplers that return tensors.
//!
//! The generator itself — keys, `split`, `fold_in` and the bit-exact sampling formulas of
//! numerics.md §9 — lives in `quabla-random`, whose host functions are its definition. This
//! module owns the facade's spelling of it (builders finished with `eval()`, bounds given as
//! numbers or concrete rank-0 tensors) and the two forms of a key (numerics.md §9.5 as
//! amended, docs/random-and-io.md):
//!
//! - a host [`Key`]: sampling runs on the host (`quabla-random`); inside a traced function
//!   the samples of a captured `Key` are constants of the trace;
//! - a key tensor, an int64 tensor of shape `[]` holding the key's 64 bits ([`key_data`]):
//!   `split`, `fold_in` and every sampler record operations (`stream.rs`), so keys can be
//!   arguments of `jit`, carries of loops and batched under `vmap`. The samples are the host
//!   generator's bits, eagerly, jitted and batched alike.
//!
//! Sampler parameters (`minval`, `maxval`, `p`) are numbers or tensors (traced or not) that
//! broadcast to the sample's shape, as in JAX: element `e` draws with the parameters at `e`, by
//! the formula a number gives (`stream.rs`), so a parameter's form never changes the bits.
//! Concrete parameters are checked like numbers; traced ones cannot be, and an element with
//! invalid ones is NaN (`uniform`) or its `minval` (`randint`, JAX's convention).
//!
//! ```
//! use quabla as qb;
//! let k = qb::random::key(42);
//! let [init, noise] = <[qb::random::Key; 2]>::try_from(qb::random::split(&k, 2)?).unwrap();
//! let w = qb::random::glorot_normal(&init, [2, 16]).eval()?;
//! let u = qb::random::uniform(&noise, [4]).dtype(qb::F32).minval(-1.0).eval()?;
//! assert_eq!((w.shape(), u.dtype()), (&[2usize, 16][..], qb::F32));
//! // The same samples from the key tensor, inside jit.
//! let f = qb::jit(|k: qb::Tensor| qb::random::uniform(&k, [4]).dtype(qb::F32).minval(-1.0).eval());
//! assert_eq!(f.call(&qb::random::key_data(&noise))?.to_vec::<f32>()?, u.to_vec::<f32>()?);
//! # Ok::<(), qb::Error>(())
//! ```

mod choice;
mod stream;

pub use choice::{choice, permutation, Choice, Population};

use crate::{DType, Error, Result, Tensor};
use quabla_ir::{HostData, Shape};
use quabla_random::{Samples, UniformBounds};

pub use quabla_random::{key, Key, KeyData};

/// The key tensor of `key`: an int64 scalar holding its 64-bit state (as two's complement,
/// so `Key(2^64 - 1)` is `-1`). Every function of this module takes it in place of the key
/// and gives the same numbers, and unlike a `Key` it can be traced.
pub fn key_data(key: &Key) -> Tensor {
    Tensor::from_parts(
        Shape::scalar(),
        HostData::I64(vec![key.value() as i64].into()),
        false,
    )
}

/// The key tensors of `keys` stacked: an int64 tensor of shape `[keys.len()]`, the form
/// `vmap` maps over to give each example its own key.
pub fn keys_data(keys: &[Key]) -> Result<Tensor> {
    let data: Vec<i64> = keys.iter().map(|k| k.value() as i64).collect();
    Ok(Tensor::from_parts(
        Shape::new(vec![keys.len()])?,
        HostData::I64(data.into()),
        false,
    ))
}

/// The host [`Key`] of a concrete int64 key tensor of shape `[]` (TR2 for a tracer).
pub fn wrap_key_data(data: &Tensor) -> Result<Key> {
    stream::check_key(data, "wrap_key_data")?;
    let host = data.host_for("wrap_key_data")?;
    Ok(Key::from_value(host.data.get_i64(0) as u64))
}

/// A key argument: a host [`Key`] (sampled on the host) or an int64 key tensor of shape `[]`
/// (sampled by recorded operations; may be traced). Samplers take `&Key` or `&Tensor` (or a
/// `KeyArg`), so both forms are passed by reference.
#[derive(Clone, Debug)]
pub enum KeyArg {
    Host(Key),
    Tensor(Tensor),
}

impl From<&Key> for KeyArg {
    fn from(k: &Key) -> KeyArg {
        KeyArg::Host(*k)
    }
}

impl From<&Tensor> for KeyArg {
    fn from(t: &Tensor) -> KeyArg {
        KeyArg::Tensor(t.clone())
    }
}

impl KeyArg {
    /// The key tensor (a host key's [`key_data`]), checked to be one int64 key.
    fn tensor(&self, function: &str) -> Result<Tensor> {
        match self {
            KeyArg::Host(k) => Ok(key_data(k)),
            KeyArg::Tensor(t) => {
                stream::check_key(t, function)?;
                Ok(t.clone())
            }
        }
    }
}

/// A key that [`split`] accepts: `&Key` gives a `Vec<Key>`, `&Tensor` (an int64 key tensor)
/// the int64 tensor of shape `[num]` of the children.
pub trait SplitKey {
    type Keys;
    fn split_key(self, num: usize) -> Result<Self::Keys>;
}

impl SplitKey for &Key {
    type Keys = Vec<Key>;
    fn split_key(self, num: usize) -> Result<Vec<Key>> {
        Ok(quabla_random::split(self, num)?)
    }
}

impl SplitKey for &Tensor {
    type Keys = Tensor;
    fn split_key(self, num: usize) -> Result<Tensor> {
        stream::check_key(self, "split")?;
        if num == 0 {
            return Err(quabla_random::RandomError::SplitNum { num }.into());
        }
        stream::split(self, num)
    }
}

/// `num` new keys derived from `key` (AR10 for `num == 0`); `split(k, n)[j]` does not depend
/// on `n`. A host key gives host keys; a key tensor gives the int64 tensor of shape `[num]`
/// holding the same keys.
pub fn split<K: SplitKey>(key: K, num: usize) -> Result<K::Keys> {
    key.split_key(num)
}

/// A key and the data [`fold_in`] folds into it: a host key with a Rust integer gives a host
/// key; a key tensor, or integer data given as a tensor (traced or not), gives a key tensor.
pub trait FoldIn<D> {
    type Output;
    fn fold_in(self, data: D) -> Self::Output;
}

impl<D: KeyData> FoldIn<D> for &Key {
    type Output = Key;
    fn fold_in(self, data: D) -> Key {
        quabla_random::fold_in(self, data)
    }
}

impl FoldIn<&Tensor> for &Key {
    type Output = Result<Tensor>;
    fn fold_in(self, data: &Tensor) -> Result<Tensor> {
        stream::fold_in(&key_data(self), &fold_data(data)?)
    }
}

impl<D: KeyData> FoldIn<D> for &Tensor {
    type Output = Result<Tensor>;
    fn fold_in(self, data: D) -> Result<Tensor> {
        stream::check_key(self, "fold_in")?;
        let data = Tensor::from_parts(
            Shape::scalar(),
            HostData::I64(vec![data.to_key_word() as i64].into()),
            false,
        );
        stream::fold_in(self, &data)
    }
}

impl FoldIn<&Tensor> for &Tensor {
    type Output = Result<Tensor>;
    fn fold_in(self, data: &Tensor) -> Result<Tensor> {
        stream::check_key(self, "fold_in")?;
        stream::fold_in(self, &fold_data(data)?)
    }
}

/// Integer data for `fold_in` as an int64 scalar (int32 sign-extends: the value modulo 2^64).
fn fold_data(data: &Tensor) -> Result<Tensor> {
    if !data.dtype().is_integer() {
        return Err(Error::Type {
            message: format!(
                "fold_in data must be an integer, got a {} tensor; convert it with astype(int64)",
                data.dtype().name()
            ),
        });
    }
    if data.ndim() != 0 {
        return Err(Error::shape(
            "random",
            format!(
                "fold_in data must be a scalar, got an array of shape {:?}",
                data.shape()
            ),
        ));
    }
    data.astype(DType::I64)
}

/// A new key from `key` and integer `data` (reduced modulo 2^64):
/// `Key(mix64(k ^ word(data, 0)))`. `fold_in(&key, step)` with a host key and a Rust integer
/// is a host key; with a key tensor, or with the data as an integer tensor (a loop index,
/// traced), it is a key tensor.
pub fn fold_in<K: FoldIn<D>, D>(key: K, data: D) -> K::Output {
    key.fold_in(data)
}

/// A parameter of a sampler (`minval`, `maxval`, `p`): a number, or a tensor (traced or not)
/// that broadcasts to the sample's shape.
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
    /// The number of a number or a concrete rank-0 tensor (the form the samplers have always
    /// taken), or `None` for a tensor that must be sampled with elementwise parameters.
    fn number(&self) -> Result<Option<f64>> {
        match self {
            Param::Value(v) => Ok(Some(*v)),
            Param::Tensor(t) if !t.is_traced() && t.ndim() == 0 && t.dtype() != DType::Bool => {
                Ok(Some(t.item()?))
            }
            Param::Tensor(_) => Ok(None),
        }
    }

    /// The parameter as a float64 tensor broadcast to `shape` (SH for a shape that does not
    /// broadcast to it, TY for a bool tensor).
    fn float_tensor(&self, sampler: &str, name: &str, shape: &[usize]) -> Result<Tensor> {
        let t = match self {
            Param::Value(v) => crate::array(*v)?,
            Param::Tensor(t) => t.clone(),
        };
        if t.dtype() == DType::Bool {
            return Err(Error::Type {
                message: format!(
                    "{sampler}: {name} must be a number or a numeric array, got a bool array"
                ),
            });
        }
        broadcast_param(sampler, name, &t.astype(DType::F64)?, shape)
    }
}

/// `t` broadcast to the sample shape `shape`: JAX's rule that parameters broadcast to the
/// shape (never the other way).
fn broadcast_param(sampler: &str, name: &str, t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let (from, to) = (Shape::new(t.shape().to_vec())?, Shape::new(shape.to_vec())?);
    if !quabla_ir::broadcasts_to(&from, &to) {
        return Err(Error::shape(
            "random",
            format!(
                "{sampler}: {name} of shape {:?} does not broadcast to the sample shape {shape:?}",
                t.shape()
            ),
        ));
    }
    t.broadcast_to(shape)
}

/// The elements of concrete parameters (`None` when any is traced): the values the host
/// checks see.
fn concrete_values(params: &[&Tensor]) -> Result<Option<Vec<Vec<f64>>>> {
    if params.iter().any(|t| t.is_traced()) {
        return Ok(None);
    }
    params
        .iter()
        .map(|t| t.astype(DType::F64)?.to_vec::<f64>())
        .collect::<Result<Vec<_>>>()
        .map(Some)
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
    key: KeyArg,
    shape: Vec<usize>,
    dtype: DType,
    minval: Param,
    maxval: Param,
}

/// Uniform samples of `shape`; never `maxval`, also after rounding to float32. Finish with
/// `.eval()`; options `.dtype()`, `.minval()`, `.maxval()`. `key` is a [`Key`] or an int64
/// key tensor.
pub fn uniform(key: impl Into<KeyArg>, shape: impl AsRef<[usize]>) -> Uniform {
    Uniform {
        key: key.into(),
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
        let (Some(lo), Some(hi)) = (self.minval.number()?, self.maxval.number()?) else {
            return self.eval_elementwise();
        };
        match &self.key {
            KeyArg::Host(k) => {
                let samples = quabla_random::uniform(k, &self.shape, self.dtype, lo, hi)?;
                tensor(&self.shape, samples)
            }
            KeyArg::Tensor(_) => {
                let key = self.key.tensor("uniform")?;
                let bounds = UniformBounds::checked(self.dtype, lo, hi)?;
                quabla_random::sample_count(&self.shape, self.dtype)?;
                stream::uniform(&key, &self.shape, &bounds)
            }
        }
    }
}

impl Uniform {
    /// The samples with bounds that vary per element (or are traced): the host formula per
    /// element, after the host checks on concrete bounds.
    fn eval_elementwise(&self) -> Result<Tensor> {
        let key = self.key.tensor("uniform")?;
        quabla_random::check_float_dtype(self.dtype)?;
        quabla_random::sample_count(&self.shape, self.dtype)?;
        let lo = self.minval.float_tensor("uniform", "minval", &self.shape)?;
        let hi = self.maxval.float_tensor("uniform", "maxval", &self.shape)?;
        if let Some(values) = concrete_values(&[&lo, &hi])? {
            for (&l, &h) in values[0].iter().zip(&values[1]) {
                UniformBounds::checked(self.dtype, l, h)?;
            }
        }
        stream::uniform_between(&key, &self.shape, self.dtype, &lo, &hi)
    }
}

/// Boolean samples, true with probability `p` (default 0.5, shape `()`): [`bernoulli`].
#[derive(Clone, Debug)]
#[must_use = "a sampler draws nothing until eval()"]
pub struct Bernoulli {
    key: KeyArg,
    shape: Option<Vec<usize>>,
    p: Param,
}

/// Bool samples, each true with probability `p`; options `.p()` (in `[0, 1]`, AR11; a number or
/// a tensor that broadcasts to the shape) and `.shape()` (default `p`'s shape: a scalar for a
/// number).
pub fn bernoulli(key: impl Into<KeyArg>) -> Bernoulli {
    Bernoulli {
        key: key.into(),
        shape: None,
        p: Param::Value(0.5),
    }
}

impl Bernoulli {
    pub fn p(mut self, p: impl Into<Param>) -> Self {
        self.p = p.into();
        self
    }
    pub fn shape(mut self, shape: impl AsRef<[usize]>) -> Self {
        self.shape = Some(shape.as_ref().to_vec());
        self
    }
    pub fn eval(self) -> Result<Tensor> {
        let Some(p) = self.p.number()? else {
            return self.eval_elementwise();
        };
        let shape = self.shape.clone().unwrap_or_default();
        match &self.key {
            KeyArg::Host(k) => {
                let samples = quabla_random::bernoulli(k, p, &shape)?;
                tensor(&shape, samples)
            }
            KeyArg::Tensor(_) => {
                let key = self.key.tensor("bernoulli")?;
                quabla_random::check_probability(p)?;
                quabla_random::sample_count(&shape, DType::Bool)?;
                stream::bernoulli(&key, p, &shape)
            }
        }
    }

    /// The samples with a probability per element (or traced): `u_e < p_e`, after the host
    /// check on concrete probabilities.
    fn eval_elementwise(&self) -> Result<Tensor> {
        let key = self.key.tensor("bernoulli")?;
        let shape = match (&self.shape, &self.p) {
            (Some(s), _) => s.clone(),
            (None, Param::Tensor(t)) => t.shape().to_vec(),
            (None, Param::Value(_)) => Vec::new(),
        };
        quabla_random::sample_count(&shape, DType::Bool)?;
        let p = self.p.float_tensor("bernoulli", "p", &shape)?;
        if let Some(values) = concrete_values(&[&p])? {
            for &v in &values[0] {
                quabla_random::check_probability(v)?;
            }
        }
        stream::bernoulli_between(&key, &shape, &p)
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
    key: KeyArg,
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
        let (s, d) = (self.shape.as_slice(), self.dtype);
        let k = match &self.key {
            KeyArg::Host(k) => k,
            KeyArg::Tensor(_) => return self.eval_stream(),
        };
        let samples = match self.family {
            Family::Normal => quabla_random::normal(k, s, d),
            Family::GlorotNormal => quabla_random::glorot_normal(k, s, d),
            Family::GlorotUniform => quabla_random::glorot_uniform(k, s, d),
            Family::HeNormal => quabla_random::he_normal(k, s, d),
        }?;
        tensor(s, samples)
    }

    /// The samples of a key tensor, after the host sampler's checks in its order (dtype,
    /// rank, shape).
    fn eval_stream(&self) -> Result<Tensor> {
        let (s, d) = (self.shape.as_slice(), self.dtype);
        let name = match self.family {
            Family::Normal => "normal",
            Family::GlorotNormal => "glorot_normal",
            Family::GlorotUniform => "glorot_uniform",
            Family::HeNormal => "he_normal",
        };
        let key = self.key.tensor(name)?;
        quabla_random::check_float_dtype(d)?;
        match self.family {
            Family::GlorotUniform => {
                let bounds = UniformBounds::glorot(d, s)?;
                quabla_random::sample_count(s, d)?;
                stream::uniform(&key, s, &bounds)
            }
            Family::Normal => {
                quabla_random::sample_count(s, d)?;
                stream::normal(&key, s, d, 1.0)
            }
            Family::GlorotNormal | Family::HeNormal => {
                let scale = quabla_random::initializer_scale(name, s)?;
                quabla_random::sample_count(s, d)?;
                stream::normal(&key, s, d, scale)
            }
        }
    }
}

fn sampler(key: impl Into<KeyArg>, shape: impl AsRef<[usize]>, family: Family) -> Sampler {
    Sampler {
        key: key.into(),
        shape: shape.as_ref().to_vec(),
        dtype: DType::F64,
        family,
    }
}

/// Standard normal samples by Box–Muller (magnitudes at most about 8.57).
pub fn normal(key: impl Into<KeyArg>, shape: impl AsRef<[usize]>) -> Sampler {
    sampler(key, shape, Family::Normal)
}

/// Glorot (Xavier) normal: standard deviation `sqrt(2 / (fan_in + fan_out))`, untruncated;
/// rank >= 2 (AR12), fans as numerics.md §9.3 defines them.
pub fn glorot_normal(key: impl Into<KeyArg>, shape: impl AsRef<[usize]>) -> Sampler {
    sampler(key, shape, Family::GlorotNormal)
}

/// Glorot (Xavier) uniform on `[-l, l)`, `l = sqrt(6 / (fan_in + fan_out))`; rank >= 2.
pub fn glorot_uniform(key: impl Into<KeyArg>, shape: impl AsRef<[usize]>) -> Sampler {
    sampler(key, shape, Family::GlorotUniform)
}

/// He (Kaiming) normal: standard deviation `sqrt(2 / fan_in)`, untruncated; rank >= 2.
pub fn he_normal(key: impl Into<KeyArg>, shape: impl AsRef<[usize]>) -> Sampler {
    sampler(key, shape, Family::HeNormal)
}

/// Integers on `[minval, maxval)` (int64 unless `.dtype()` says otherwise): [`randint`].
#[derive(Clone, Debug)]
#[must_use = "a sampler draws nothing until eval()"]
pub struct RandInt {
    key: KeyArg,
    shape: Vec<usize>,
    dtype: DType,
    minval: IntParam,
    maxval: IntParam,
}

/// A bound of [`randint`]: an `i64`, or an integer tensor (traced or not) that broadcasts to
/// the sample's shape.
#[derive(Clone, Debug)]
pub enum IntParam {
    Value(i64),
    Tensor(Tensor),
}

impl From<i64> for IntParam {
    fn from(v: i64) -> IntParam {
        IntParam::Value(v)
    }
}

impl From<Tensor> for IntParam {
    fn from(t: Tensor) -> IntParam {
        IntParam::Tensor(t)
    }
}

impl From<&Tensor> for IntParam {
    fn from(t: &Tensor) -> IntParam {
        IntParam::Tensor(t.clone())
    }
}

impl IntParam {
    /// The value of an `i64` or a concrete rank-0 integer tensor; `None` for a tensor that
    /// must be sampled with elementwise bounds.
    fn number(&self) -> Result<Option<i64>> {
        match self {
            IntParam::Value(v) => Ok(Some(*v)),
            IntParam::Tensor(t) if !t.is_traced() && t.ndim() == 0 && t.dtype().is_integer() => {
                Ok(Some(t.item_i64()?))
            }
            IntParam::Tensor(_) => Ok(None),
        }
    }

    /// The bound as an int64 tensor broadcast to `shape` (TY for a non-integer tensor).
    fn int_tensor(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let t = match self {
            IntParam::Value(v) => crate::array(*v)?,
            IntParam::Tensor(t) => t.clone(),
        };
        if !t.dtype().is_integer() {
            return Err(Error::Type {
                message: format!(
                    "randint: {name} must be an integer or an integer array, got a {} array; convert it with astype(int64)",
                    t.dtype().name()
                ),
            });
        }
        broadcast_param("randint", name, &t.astype(DType::I64)?, shape)
    }
}

/// Integer samples of `shape` on `[minval, maxval)`, each value equally likely to within
/// `(maxval - minval) / 2^64`; option `.dtype()` (int64 or int32). The bounds are `i64`s or
/// integer tensors that broadcast to `shape` (traced ones too: an element whose bounds are
/// empty is its `minval`, and int32 bounds are clamped into the int32 range, as in JAX).
pub fn randint(
    key: impl Into<KeyArg>,
    shape: impl AsRef<[usize]>,
    minval: impl Into<IntParam>,
    maxval: impl Into<IntParam>,
) -> RandInt {
    RandInt {
        key: key.into(),
        shape: shape.as_ref().to_vec(),
        dtype: DType::I64,
        minval: minval.into(),
        maxval: maxval.into(),
    }
}

impl RandInt {
    /// int32 or int64 (TY otherwise).
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }
    pub fn eval(self) -> Result<Tensor> {
        let (s, d) = (self.shape.as_slice(), self.dtype);
        let (Some(minval), Some(maxval)) = (self.minval.number()?, self.maxval.number()?) else {
            return self.eval_elementwise();
        };
        match &self.key {
            KeyArg::Host(k) => {
                let samples = quabla_random::randint(k, s, d, minval, maxval)?;
                tensor(s, samples)
            }
            KeyArg::Tensor(_) => {
                let key = self.key.tensor("randint")?;
                let span = quabla_random::randint_span(d, minval, maxval)?;
                quabla_random::sample_count(s, d)?;
                stream::randint(&key, s, d, minval, span)
            }
        }
    }

    /// The samples with bounds per element (or traced), after the host checks on concrete
    /// bounds.
    fn eval_elementwise(&self) -> Result<Tensor> {
        let (s, d) = (self.shape.as_slice(), self.dtype);
        let key = self.key.tensor("randint")?;
        // The dtype check first, as the host sampler does.
        quabla_random::randint_span(d, 0, 1)?;
        quabla_random::sample_count(s, d)?;
        let mut lo = self.minval.int_tensor("minval", s)?;
        let mut hi = self.maxval.int_tensor("maxval", s)?;
        if let (false, false) = (lo.is_traced(), hi.is_traced()) {
            for (&l, &h) in lo.to_vec::<i64>()?.iter().zip(&hi.to_vec::<i64>()?) {
                quabla_random::randint_span(d, l, h)?;
            }
        } else if d == DType::I32 {
            let (min, max) = (i64::from(i32::MIN), i64::from(i32::MAX));
            lo = lo.clip(min, max)?;
            hi = hi.clip(min, max + 1)?;
        }
        stream::randint_between(&key, s, d, &lo, &hi)
    }
}

/// Samples of a categorical distribution given by unnormalized log-probabilities:
/// [`categorical`].
#[derive(Clone, Debug)]
#[must_use = "a sampler draws nothing until eval()"]
pub struct Categorical {
    key: KeyArg,
    logits: Tensor,
    axis: isize,
}

/// Indices (int64) drawn with probabilities `softmax(logits)` along `axis` (default -1), one
/// per slice: the result has the shape of `logits` without `axis`. The Gumbel-max trick:
/// `argmax(logits + g)` with Gumbel noise `g` of the logits' shape, drawn from the key's
/// stream (docs/random-and-io.md). `logits` may be traced and take derivatives of nothing
/// (the indices are integers).
pub fn categorical(key: impl Into<KeyArg>, logits: &Tensor) -> Categorical {
    Categorical {
        key: key.into(),
        logits: logits.clone(),
        axis: -1,
    }
}

impl Categorical {
    /// The axis of the categories (negative counts from the end).
    pub fn axis(mut self, axis: isize) -> Self {
        self.axis = axis;
        self
    }
    pub fn eval(self) -> Result<Tensor> {
        let key = self.key.tensor("categorical")?;
        let logits = &self.logits;
        if !logits.dtype().is_float() {
            return Err(Error::Type {
                message: format!(
                    "categorical logits must be float32 or float64, got {}",
                    logits.dtype().name()
                ),
            });
        }
        let rank = logits.ndim() as isize;
        let axis = if self.axis < 0 {
            self.axis + rank
        } else {
            self.axis
        };
        if !(0..rank).contains(&axis) {
            return Err(Error::shape(
                "categorical",
                format!(
                    "axis {} is out of bounds for logits of shape {:?}",
                    self.axis,
                    logits.shape()
                ),
            ));
        }
        let noise = stream::gumbel(&key, logits.shape())?.astype(logits.dtype())?;
        crate::ops::sorting::argmax(crate::add(logits, noise)?)
            .axis(axis)
            .eval()
    }
}

/// Standard normal samples truncated to `[lower, upper]`: [`truncated_normal`].
#[derive(Clone, Debug)]
#[must_use = "a sampler draws nothing until eval()"]
pub struct TruncatedNormal {
    key: KeyArg,
    lower: f64,
    upper: f64,
    shape: Vec<usize>,
    dtype: DType,
}

/// Standard normal samples of `shape` conditioned on lying in `[lower, upper]` (infinite
/// bounds allowed; float64 unless `.dtype()` says otherwise), by the inverse CDF: `u` uniform
/// between the CDF's values at the bounds, mapped through the normal quantile (AS241), so each
/// sample costs one draw (docs/random-and-io.md defines the stream).
pub fn truncated_normal(
    key: impl Into<KeyArg>,
    lower: f64,
    upper: f64,
    shape: impl AsRef<[usize]>,
) -> TruncatedNormal {
    TruncatedNormal {
        key: key.into(),
        lower,
        upper,
        shape: shape.as_ref().to_vec(),
        dtype: DType::F64,
    }
}

impl TruncatedNormal {
    /// float32 or float64 (TY11 otherwise).
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }
    pub fn eval(self) -> Result<Tensor> {
        let key = self.key.tensor("truncated_normal")?;
        quabla_random::check_float_dtype(self.dtype)?;
        let (lower, upper) = (self.lower, self.upper);
        let refuse = || {
            Error::invalid(format!(
                "truncated_normal requires lower < upper with probability between them, got [{lower}, {upper}]"
            ))
        };
        if lower.is_nan() || upper.is_nan() || lower >= upper {
            return Err(refuse());
        }
        // Mirror an interval that lies mostly above 0 into the lower tail, where the CDF keeps
        // its relative precision (the CDF near 1 would lose the tail's digits).
        let flip = lower + upper > 0.0;
        let (a, b) = if flip {
            (-upper, -lower)
        } else {
            (lower, upper)
        };
        let cdf = |x: f64| -> Result<f64> {
            crate::ops::elementwise::erfc(-x * std::f64::consts::FRAC_1_SQRT_2)?
                .mul(0.5)?
                .item()
        };
        let (cdf_lo, cdf_hi) = (cdf(a)?, cdf(b)?);
        let cdf_span = cdf_hi - cdf_lo;
        if cdf_span.is_nan() || cdf_span <= 0.0 {
            return Err(refuse());
        }
        quabla_random::sample_count(&self.shape, self.dtype)?;
        let plan = stream::TruncatedPlan {
            lower,
            upper,
            flip,
            cdf_lo,
            cdf_span,
        };
        stream::truncated_normal(&key, &self.shape, self.dtype, &plan)
    }
}
