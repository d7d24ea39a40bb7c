//! `std::ops` operators. Arithmetic works between `Tensor`, `&Tensor`, `f64` (a weak scalar)
//! and `Result<Tensor>` (an `Err` passes through), and returns `Result<Tensor>`, so a whole
//! expression needs one `?`: `(&x * 2.0 + &y)?`.
//!
//! Rust's orphan rules forbid operators whose operands are only `Result<Tensor>` and `f64`
//! (`x.sin() * 2.0`): there, use the named method of the prelude's extension traits
//! (`x.sin().mul(2.0)`). `!`, `&` and `|` are the logical operators on bool tensors.

use crate::error::Result;
use crate::ops::{compare, elementwise};
use crate::tensor::Tensor;
use std::ops::{Add, BitAnd, BitOr, Div, Mul, Neg, Not, Sub};

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
            (Result<Tensor>, Tensor), (Result<Tensor>, &Tensor)
        );
    )*};
}

all_arith! {
    Add, add, elementwise::add;
    Sub, sub, elementwise::sub;
    Mul, mul, elementwise::mul;
    Div, div, elementwise::div;
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

logic!(BitAnd, bitand, compare::logical_and;
    (Tensor, Tensor), (Tensor, &Tensor), (&Tensor, Tensor), (&Tensor, &Tensor),
    (Tensor, Result<Tensor>), (&Tensor, Result<Tensor>), (Result<Tensor>, Tensor), (Result<Tensor>, &Tensor));
logic!(BitOr, bitor, compare::logical_or;
    (Tensor, Tensor), (Tensor, &Tensor), (&Tensor, Tensor), (&Tensor, &Tensor),
    (Tensor, Result<Tensor>), (&Tensor, Result<Tensor>), (Result<Tensor>, Tensor), (Result<Tensor>, &Tensor));

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
        compare::logical_not(self)
    }
}

impl Not for &Tensor {
    type Output = Result<Tensor>;
    #[track_caller]
    fn not(self) -> Result<Tensor> {
        compare::logical_not(self)
    }
}
