//! [`TestRng`]: the deterministic generator the project's tests and fuzzers draw their inputs
//! from, so that every run sees the same values. It reads the SplitMix64 stream of one state
//! (`word(state, 0)`, `word(state, 1)`, ..., numerics.md §9.1) and shapes the words into the
//! values tests need. It is not the user-facing generator: samplers take a [`crate::Key`].

use crate::key::word;

/// Values that elementwise tests mix in: NaN, infinities, signed zeros, integers, halves
/// (rounding ties), a subnormal and huge magnitudes.
pub const SPECIAL_VALUES: [f64; 16] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -2.5,
    2.0,
    1e-310,
    -1e300,
    1e300,
    3.0,
    0.1,
    -0.75,
];

/// A deterministic stream of test values.
#[derive(Clone, Debug)]
pub struct TestRng {
    state: u64,
    next: u64,
}

impl TestRng {
    /// The stream of SplitMix64 started at `state`: its first word is `mix64(state + GAMMA)`.
    pub fn new(state: u64) -> TestRng {
        TestRng { state, next: 0 }
    }

    /// The next 64-bit word.
    pub fn next_u64(&mut self) -> u64 {
        let w = word(self.state, self.next);
        self.next = self.next.wrapping_add(1);
        w
    }

    /// Uniform in `[0, 1)` (the top 53 bits of a word).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)`.
    pub fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// Finite values in `[-4, 4)`.
    pub fn finite(&mut self) -> f64 {
        (self.uniform() - 0.5) * 8.0
    }

    /// Mostly moderate values of both signs (as [`TestRng::finite`]), with one of
    /// [`SPECIAL_VALUES`] a fifth of the time.
    pub fn value(&mut self) -> f64 {
        let r = self.next_u64();
        if r.is_multiple_of(5) {
            SPECIAL_VALUES[(r >> 8) as usize % SPECIAL_VALUES.len()]
        } else {
            self.finite()
        }
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in `lo..=hi`.
    pub fn signed(&mut self, lo: isize, hi: isize) -> isize {
        lo + self.below((hi - lo + 1) as usize) as isize
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.uniform() < p
    }

    /// `n` values uniform in `[lo, hi)`.
    pub fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.between(lo, hi)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_splitmix64_stream() {
        let mut rng = TestRng::new(0);
        assert_eq!(rng.next_u64(), 0xe220a8397b1dcdaf);
        assert_eq!(rng.next_u64(), 0x6e789e6aa1b965f4);
        let u = TestRng::new(7).uniform();
        assert!((0.0..1.0).contains(&u));
        assert!((3..=5).contains(&TestRng::new(9).range(3, 5)));
    }
}
