//! The SplitMix64 primitives and keys (numerics.md §9.1, §9.2).

use crate::error::RandomError;
use std::fmt;

/// The SplitMix64 increment (the golden-ratio constant).
pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The constant mixed into every child of [`split`], so that a child's state is not a word of
/// its parent's own sample stream.
pub const SPLIT_TAG: u64 = 0x5EED_5EED_5EED_5EED;

/// The SplitMix64 finalizer: a bijection of 64-bit words that mixes every input bit into
/// every output bit.
///
/// ```
/// // word(0, 0) = mix64(GAMMA), the first golden value of numerics.md §9.4.
/// assert_eq!(quabla_random::mix64(quabla_random::GAMMA), 0xe220a8397b1dcdaf);
/// ```
pub const fn mix64(z: u64) -> u64 {
    let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Word `i` of the SplitMix64 stream started at state `k`: `mix64(k + (i + 1) * GAMMA)`, all
/// modulo 2^64.
///
/// A key's sample stream is `word(key.value(), 0), word(key.value(), 1), ...`; element `e` of
/// `uniform` and `bernoulli` uses word `e`, and `normal` uses words `2m` and `2m + 1` for its
/// pair `m`.
///
/// ```
/// assert_eq!(quabla_random::word(0, 1), 0x6e789e6aa1b965f4);
/// ```
pub const fn word(k: u64, i: u64) -> u64 {
    mix64(k.wrapping_add(i.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// A random key: an immutable 64-bit generator state.
///
/// Keys are cheap values (`Copy`), compare and hash by their state, and print as
/// `Key(value=N)` with both `Display` and `Debug`. Every sampler restarts the key's stream at
/// its first word, so one key always yields the same numbers; derive fresh keys with
/// [`split`] or [`fold_in`] rather than reusing one key for two samplers.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(u64);

impl Key {
    /// The key whose state is `value`.
    pub const fn from_value(value: u64) -> Key {
        Key(value)
    }

    /// The 64-bit state (Python's `key.value`).
    pub const fn value(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key(value={})", self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// An integer that seeds a key or is folded into one, reduced modulo 2^64.
///
/// Implemented for every primitive integer type by a truncating two's-complement cast, which
/// is exactly the reduction modulo 2^64 of the mathematical value: `-1` becomes `2^64 - 1`
/// and `2^64 + 5` becomes `5`. A binding with arbitrary-precision integers implements it by
/// taking the low 64 bits of the two's-complement representation.
pub trait KeyData {
    /// The value modulo 2^64.
    fn to_key_word(self) -> u64;
}

macro_rules! key_data {
    ($($t:ty),*) => {
        $(
            impl KeyData for $t {
                #[inline]
                fn to_key_word(self) -> u64 {
                    // Sign-extending or truncating: both are the reduction modulo 2^64.
                    self as u64
                }
            }
        )*
    };
}

key_data!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);

/// `Key(seed mod 2^64)`.
///
/// ```
/// use quabla_random::key;
/// assert_eq!(key(-1i64).value(), u64::MAX);
/// assert_eq!(key((1u128 << 64) + 5).value(), 5);
/// ```
pub fn key(seed: impl KeyData) -> Key {
    Key(seed.to_key_word())
}

/// `num` new keys derived from `key`: child `j` is `Key(mix64(word(k, j) ^ SPLIT_TAG))`, so
/// `split(k, n)[j]` does not depend on `n`.
///
/// `num` must be at least 1 (AR10). A count whose vector the allocator cannot provide is
/// [`RandomError::OutOfMemory`].
pub fn split(key: &Key, num: usize) -> Result<Vec<Key>, RandomError> {
    if num == 0 {
        return Err(RandomError::SplitNum { num });
    }
    let mut keys = crate::samplers::allocate::<Key>(num, &[num])?;
    let k = key.0;
    // `usize` is at most 64 bits wide on every supported target, so `j` converts exactly.
    keys.extend((0..num as u64).map(|j| Key(mix64(word(k, j) ^ SPLIT_TAG))));
    Ok(keys)
}

/// A new key from `key` and an integer (reduced modulo 2^64):
/// `Key(mix64(k ^ word(data mod 2^64, 0)))`.
///
/// The intended use is `fold_in(&base, step)` outside a traced function, passing the samples
/// in as arguments.
///
/// ```
/// use quabla_random::{fold_in, key};
/// assert_eq!(fold_in(&key(7), -1).value(), 18102033877536474386);
/// ```
pub fn fold_in(key: &Key, data: impl KeyData) -> Key {
    Key(mix64(key.0 ^ word(data.to_key_word(), 0)))
}
