//! Keyed random numbers for Quabla: keys (`key`, `split`, `fold_in`) and the host samplers
//! (`uniform`, `normal`, `bernoulli` and the initializers), bit for bit as `spec/numerics.md` §9
//! prescribes, so that every platform and both language bindings draw identical numbers.
//!
//! # What this crate owns
//!
//! - The SplitMix64 primitives [`mix64`] and [`word`] and the key derivations built on them.
//! - [`Key`], an immutable 64-bit state that is `Copy + Eq + Hash` (so the facade can use it as
//!   a static `jit` argument) and prints as `Key(value=N)`.
//! - The samplers (and [`randint`], whose stream amends numerics.md §9.3), which validate
//!   their arguments and the shape, then fill host vectors in
//!   row-major order: every value is computed in float64 and rounded once to the requested
//!   dtype ([`Samples`]).
//! - [`testing::TestRng`], the deterministic stream the project's tests draw inputs from.
//! - [`RandomError`], whose messages are those of `spec/errors.md` (see its docs for the error
//!   kind of the facade each variant maps to).
//!
//! # What it must not do
//!
//! Sampling here is eager and happens on the host: nothing here is ever traced, recorded into
//! a graph or run on a backend, and this crate does not depend on the `quabla` facade. It is
//! the definition of the stream: the facade's traced samplers (`qb::random` on key tensors)
//! reproduce these functions bit for bit with integer and float operations, and use the
//! checks exported here ([`UniformBounds::checked`], [`sample_count`], ...) so that both
//! refuse the same arguments with the same messages. There is no global state: the same key always gives the same numbers.
//! Nothing panics on any input: bad arguments, shapes whose size overflows and requests the
//! allocator cannot satisfy are all [`RandomError`]s.
//!
//! ```
//! use quabla_ir::DType;
//! use quabla_random::{key, split, uniform, Samples};
//!
//! let k = key(42);
//! let u = uniform(&k, &[4], DType::F64, 0.0, 1.0).unwrap();
//! assert_eq!(
//!     u,
//!     Samples::F64(vec![
//!         0.7415648787718233,
//!         0.1599103928769201,
//!         0.27860113025513866,
//!         0.34419071652363753,
//!     ])
//! );
//! let children = split(&k, 2).unwrap();
//! assert_ne!(children[0], children[1]);
//! ```

mod error;
mod key;
mod samplers;
pub mod testing;

pub use error::{ErrorKind, RandomError};
pub use key::{fold_in, key, mix64, split, word, Key, KeyData, GAMMA, SPLIT_TAG};
pub use samplers::{
    bernoulli, check_float_dtype, check_probability, glorot_normal, glorot_uniform, he_normal,
    initializer_scale, mul_high, normal, randint, randint_span, sample_count, uniform, Samples,
    UniformBounds,
};
