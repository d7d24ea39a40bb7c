//! Fixed-width groups of float64 lanes for lane functions written one operation at a time
//! over [`WIDTH`] elements.
//!
//! A lane function written for one `f64` is vectorized by the compiler's loop vectorizer,
//! which on the float64 `tanh` gave code a quarter slower than the same operations written
//! over an explicit group of eight: each operation on an [`F64s`] is an array operation the
//! compiler turns into one vector instruction, in the order written, and the selections of a
//! branch-free lane become masked blends. The operations are IEEE ones, element by element,
//! so a group's results are those of the one-element form (`F64s<1>`), which is what the
//! scalar fix-up and the loop's remainder run. This module owns the group types and their
//! element-wise operations only; the functions live with their families (`exp.rs`).

use std::ops::{Add, Div, Mul, Neg, Sub};
use std::ops::{BitAnd, BitOr, Not};

/// Elements a wide lane loop computes per step (one AVX-512 vector of float64).
pub(crate) const WIDTH: usize = 8;

/// `W` float64 lanes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct F64s<const W: usize>(pub [f64; W]);

/// `W` conditions, one per lane.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Masks<const W: usize>(pub [bool; W]);

/// The high 32 bits of the magnitudes of `W` lanes (the musl routines' `hx`), as signed
/// 64-bit lanes, which compare in one instruction where unsigned ones do not.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Words<const W: usize>([i64; W]);

/// `W` lanes of `f(lane)`.
#[inline(always)]
fn map<T: Copy, U, const W: usize>(a: [T; W], f: impl Fn(T) -> U) -> [U; W] {
    std::array::from_fn(|i| f(a[i]))
}

/// `W` lanes of `f(a lane, b lane)`.
#[inline(always)]
fn zip<T: Copy, U, const W: usize>(a: [T; W], b: [T; W], f: impl Fn(T, T) -> U) -> [U; W] {
    std::array::from_fn(|i| f(a[i], b[i]))
}

macro_rules! arithmetic {
    ($trait:ident, $method:ident, $op:tt) => {
        impl<const W: usize> $trait for F64s<W> {
            type Output = F64s<W>;
            #[inline(always)]
            fn $method(self, other: F64s<W>) -> F64s<W> {
                F64s(zip(self.0, other.0, |a, b| a $op b))
            }
        }
        impl<const W: usize> $trait<f64> for F64s<W> {
            type Output = F64s<W>;
            #[inline(always)]
            fn $method(self, other: f64) -> F64s<W> {
                F64s(map(self.0, |a| a $op other))
            }
        }
        impl<const W: usize> $trait<F64s<W>> for f64 {
            type Output = F64s<W>;
            #[inline(always)]
            fn $method(self, other: F64s<W>) -> F64s<W> {
                F64s(map(other.0, |b| self $op b))
            }
        }
    };
}
arithmetic!(Add, add, +);
arithmetic!(Sub, sub, -);
arithmetic!(Mul, mul, *);
arithmetic!(Div, div, /);

impl<const W: usize> Neg for F64s<W> {
    type Output = F64s<W>;
    #[inline(always)]
    fn neg(self) -> F64s<W> {
        F64s(map(self.0, |a| -a))
    }
}

impl<const W: usize> F64s<W> {
    /// Every lane `value`.
    #[inline(always)]
    pub(crate) fn splat(value: f64) -> F64s<W> {
        F64s([value; W])
    }

    #[inline(always)]
    pub(crate) fn abs(self) -> F64s<W> {
        F64s(map(self.0, f64::abs))
    }

    #[inline(always)]
    pub(crate) fn trunc(self) -> F64s<W> {
        F64s(map(self.0, f64::trunc))
    }

    /// `super::high_word_abs` of every lane.
    #[inline(always)]
    pub(crate) fn high_words(self) -> Words<W> {
        Words(map(self.0, super::high_word_abs))
    }

    /// `super::pow2` of every lane.
    #[inline(always)]
    pub(crate) fn pow2(self) -> F64s<W> {
        F64s(map(self.0, super::pow2))
    }

    #[inline(always)]
    pub(crate) fn is_sign_negative(self) -> Masks<W> {
        Masks(map(self.0, f64::is_sign_negative))
    }

    #[inline(always)]
    pub(crate) fn is_nan(self) -> Masks<W> {
        Masks(map(self.0, f64::is_nan))
    }

    #[inline(always)]
    pub(crate) fn lt(self, bound: f64) -> Masks<W> {
        Masks(map(self.0, |a| a < bound))
    }

    #[inline(always)]
    pub(crate) fn ge(self, bound: f64) -> Masks<W> {
        Masks(map(self.0, |a| a >= bound))
    }

    #[inline(always)]
    pub(crate) fn le(self, bound: f64) -> Masks<W> {
        Masks(map(self.0, |a| a <= bound))
    }

    #[inline(always)]
    pub(crate) fn eq(self, value: f64) -> Masks<W> {
        Masks(map(self.0, |a| a == value))
    }
}

impl<const W: usize> Words<W> {
    #[inline(always)]
    pub(crate) fn gt(self, bound: i64) -> Masks<W> {
        Masks(map(self.0, |a| a > bound))
    }

    #[inline(always)]
    pub(crate) fn ge(self, bound: i64) -> Masks<W> {
        Masks(map(self.0, |a| a >= bound))
    }

    #[inline(always)]
    pub(crate) fn lt(self, bound: i64) -> Masks<W> {
        Masks(map(self.0, |a| a < bound))
    }

    #[inline(always)]
    pub(crate) fn le(self, bound: i64) -> Masks<W> {
        Masks(map(self.0, |a| a <= bound))
    }
}

impl<const W: usize> BitAnd for Masks<W> {
    type Output = Masks<W>;
    #[inline(always)]
    fn bitand(self, other: Masks<W>) -> Masks<W> {
        Masks(zip(self.0, other.0, |a, b| a & b))
    }
}

impl<const W: usize> BitOr for Masks<W> {
    type Output = Masks<W>;
    #[inline(always)]
    fn bitor(self, other: Masks<W>) -> Masks<W> {
        Masks(zip(self.0, other.0, |a, b| a | b))
    }
}

impl<const W: usize> Not for Masks<W> {
    type Output = Masks<W>;
    #[inline(always)]
    fn not(self) -> Masks<W> {
        Masks(map(self.0, |a| !a))
    }
}

/// `a` in the lanes where `pick` holds, else `b`.
#[inline(always)]
pub(crate) fn select<const W: usize>(pick: Masks<W>, a: F64s<W>, b: F64s<W>) -> F64s<W> {
    F64s(std::array::from_fn(
        |i| if pick.0[i] { a.0[i] } else { b.0[i] },
    ))
}

/// [`select`] between two constants.
#[inline(always)]
pub(crate) fn select_const<const W: usize>(pick: Masks<W>, a: f64, b: f64) -> F64s<W> {
    select(pick, F64s::splat(a), F64s::splat(b))
}
