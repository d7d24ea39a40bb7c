//! `std::ops` operators. Arithmetic works between `Tensor`, `&Tensor`, `f64` (a weak scalar)
//! and `Result<Tensor>` (an `Err` passes through), and returns `Result<Tensor>`, so a whole
//! expression needs one `?`: `(&x * 2.0 + &y)?`.
//!
//! Rust's orphan rules forbid operators whose operands are only `Result<Tensor>` and `f64`
//! (`x.sin() * 2.0`): there, use the named method of the prelude's extension traits
//! (`x.sin().mul(2.0)`). `!`, `&` and `|` are the logical operators on bool tensors and the
//! bitwise ones on integer tensors, with `^`, `<<` and `>>`; `%` is `remainder` (NumPy's
//! signs). An `i64` operand is a weak integer: it adopts the other operand's dtype.

use crate::error::Result;
use crate::ops::{compare, elementwise};
use crate::tensor::Tensor;
use std::ops::{Add, BitAnd, BitOr, BitXor, Div, Mul, Neg, Not, Rem, Shl, Shr, Sub};

macro_rules! arith {
    ($trait:ident, $method:ident, $func:path; $(($lhs:ty, $rhs:ty)),*) => {$(
        impl $trait<$rhs> for $lhs {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: $rhs) -> Result<Tensor> {
                $func(self, rhs)
            }
        }
    )*};
}

macro_rules! all_arith {
    ($($trait:ident, $method:ident, $func:path;)*) => {$(
        arith!($trait, $method, $func;
            (Tensor, Tensor), (Tensor, &Tensor), (Tensor, f64), (Tensor, Result<Tensor>),
            (&Tensor, Tensor), (&Tensor, &Tensor), (&Tensor, f64), (&Tensor, Result<Tensor>),
            (f64, Tensor), (f64, &Tensor),
            (Tensor, i64), (&Tensor, i64), (i64, Tensor), (i64, &Tensor),
            (Result<Tensor>, Tensor), (Result<Tensor>, &Tensor)
        );
    )*};
}

all_arith! {
    Add, add, elementwise::add;
    Sub, sub, elementwise::sub;
    Mul, mul, elementwise::mul;
    Div, div, elementwise::div;
    Rem, rem, crate::ops::composite::remainder;
}

macro_rules! integer_ops {
    ($($trait:ident, $method:ident, $func:path;)*) => {$(
        arith!($trait, $method, $func;
            (Tensor, Tensor), (Tensor, &Tensor), (&Tensor, Tensor), (&Tensor, &Tensor),
            (Tensor, i64), (&Tensor, i64), (Tensor, Result<Tensor>), (&Tensor, Result<Tensor>),
            (Result<Tensor>, Tensor), (Result<Tensor>, &Tensor)
        );
    )*};
}

integer_ops! {
    BitXor, bitxor, elementwise::bitwise_xor;
    Shl, shl, elementwise::left_shift;
    Shr, shr, elementwise::right_shift;
}

macro_rules! logic {
    ($trait:ident, $method:ident, $func:path; $(($lhs:ty, $rhs:ty)),*) => {$(
        impl $trait<$rhs> for $lhs {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: $rhs) -> Result<Tensor> {
                $func(self, rhs)
            }
        }
    )*};
}

logic!(BitAnd, bitand, elementwise::bitwise_and;
    (Tensor, Tensor), (Tensor, &Tensor), (&Tensor, Tensor), (&Tensor, &Tensor),
    (Tensor, Result<Tensor>), (&Tensor, Result<Tensor>), (Result<Tensor>, Tensor), (Result<Tensor>, &Tensor),
    (Tensor, i64), (&Tensor, i64));
logic!(BitOr, bitor, elementwise::bitwise_or;
    (Tensor, Tensor), (Tensor, &Tensor), (&Tensor, Tensor), (&Tensor, &Tensor),
    (Tensor, Result<Tensor>), (&Tensor, Result<Tensor>), (Result<Tensor>, Tensor), (Result<Tensor>, &Tensor),
    (Tensor, i64), (&Tensor, i64));

impl Neg for Tensor {
    type Output = Result<Tensor>;
    #[track_caller]
    fn neg(self) -> Result<Tensor> {
        elementwise::neg(self)
    }
}

impl Neg for &Tensor {
    type Output = Result<Tensor>;
    #[track_caller]
    fn neg(self) -> Result<Tensor> {
        elementwise::neg(self)
    }
}

impl Not for Tensor {
    type Output = Result<Tensor>;
    #[track_caller]
    fn not(self) -> Result<Tensor> {
        (&self).not()
    }
}

/// `!x`: logical not of a bool tensor, bitwise not of an integer one (Rust's `!` on `i64`).
impl Not for &Tensor {
    type Output = Result<Tensor>;
    #[track_caller]
    fn not(self) -> Result<Tensor> {
        if self.dtype().is_integer() {
            elementwise::bitwise_not(self)
        } else {
            compare::logical_not(self)
        }
    }
}
