//! Elementwise functions: the native unary ops of the IR, powers, and the composite
//! functions whose exact definitions are in numerics.md §4.3.

use crate::dispatch::apply;
use crate::error::Result;
use crate::operand::Operand;
use crate::tensor::Tensor;
use quabla_ir::{BinaryOp, Comparison, DType, GraphBuilder, IrError, NodeId, UnaryOp};

macro_rules! native_unary {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        super::tensor_methods! {
            #[doc = "The native unary functions on `Result<Tensor>`."]
            pub trait UnaryExt;
            $(
                $(#[$doc])*
                pub fn $name(&self) -> Result<Tensor> {
                    apply(vec![self.into()], |b, x| b.unary(UnaryOp::$op, x[0]))
                }
            )*
        }
        $(
            $(#[$doc])*
            #[track_caller]
            pub fn $name(x: impl Into<Operand>) -> Result<Tensor> {
                apply(vec![x.into()], |b, x| b.unary(UnaryOp::$op, x[0]))
            }
        )*

        /// The function of each native unary op. The match is exhaustive, so a new
        /// [`UnaryOp`] does not compile until it has a row in the table below (or joins the
        /// two spelled otherwise: `neg` is the `-` operator and `Tensor::neg`, `bitwise_not`
        /// the integer function `bitwise_not` below).
        // Compiled in every build (that is the check); called by the tests.
        #[cfg_attr(not(test), allow(dead_code))]
        pub(crate) fn native_unary_function(op: UnaryOp) -> Option<fn(Operand) -> Result<Tensor>> {
            match op {
                $(UnaryOp::$op => Some(|x| $name(x)),)*
                UnaryOp::Neg | UnaryOp::BitNot => None,
            }
        }
    };
}

native_unary! {
    /// Sine.
    sin => Sin;
    /// Cosine.
    cos => Cos;
    /// Hyperbolic tangent.
    tanh => Tanh;
    /// Exponential.
    exp => Exp;
    /// `exp(x) - 1`, accurate near 0.
    expm1 => Expm1;
    /// Natural logarithm: `log(0) = -inf`, NaN for negative input.
    log => Log;
    /// `log(1 + x)`: `-inf` at -1, NaN below.
    log1p => Log1p;
    /// Square root: NaN for negative input.
    sqrt => Sqrt;
    /// Tangent.
    tan => Tan;
    /// Inverse sine (NaN outside [-1, 1]).
    arcsin => Arcsin;
    /// Inverse cosine (NaN outside [-1, 1]).
    arccos => Arccos;
    /// Inverse tangent.
    arctan => Arctan;
    /// Hyperbolic sine.
    sinh => Sinh;
    /// Hyperbolic cosine.
    cosh => Cosh;
    /// Inverse hyperbolic sine.
    arcsinh => Arcsinh;
    /// Inverse hyperbolic cosine (NaN below 1).
    arccosh => Arccosh;
    /// Inverse hyperbolic tangent (±inf at ±1).
    arctanh => Arctanh;
    /// Base-2 logarithm.
    log2 => Log2;
    /// Base-10 logarithm.
    log10 => Log10;
    /// Cube root.
    cbrt => Cbrt;
    /// Largest integer not above `x`.
    floor => Floor;
    /// Smallest integer not below `x`.
    ceil => Ceil;
    /// Nearest integer, ties to even.
    round => Round;
    /// Error function.
    erf => Erf;
    /// Complementary error function.
    erfc => Erfc;
}

/// Rejects bool operands of float-only composites under the user-facing name (DT2).
#[track_caller]
pub(crate) fn float_only(b: &GraphBuilder, x: NodeId, name: &str) -> quabla_ir::Result<()> {
    if b.ty(x).dtype == DType::Bool {
        return Err(IrError::BoolOperand { op: name.into() });
    }
    Ok(())
}

macro_rules! composite_unary {
    ($($(#[$doc:meta])* $name:ident => $build:ident, float_only = $float:expr;)*) => {
        super::tensor_methods! {
            #[doc = "The composite unary functions on `Result<Tensor>`."]
            pub trait UnaryCompositeExt;
            $(
                $(#[$doc])*
                pub fn $name(&self) -> Result<Tensor> {
                    $name(self)
                }
            )*
        }
        $(
            $(#[$doc])*
            #[track_caller]
            pub fn $name(x: impl Into<Operand>) -> Result<Tensor> {
                apply(vec![x.into()], |b, x| {
                    if $float {
                        float_only(b, x[0], stringify!($name))?;
                    }
                    $build(b, x[0])
                })
            }
        )*
    };
}

composite_unary! {
    /// Magnitude: clears the sign bit (`abs(-0.0) = 0.0`); NaN stays NaN. Built as
    /// `where(x > 0, x, -x) + 0.0`, whose derivative at 0 is -1 (numerics.md §5).
    abs => build_abs, float_only = true;
    /// `maximum(x, 0)`; NaN propagates.
    relu => build_relu, float_only = true;
    /// The logistic function in the overflow-free two-branch form of numerics.md §4.3.
    sigmoid => build_sigmoid, float_only = true;
    /// `x * x`.
    square => build_square, float_only = true;
    /// `1 / x`.
    reciprocal => build_reciprocal, float_only = true;
    /// Identity in value; zero derivative in every mode and order. Accepts bool.
    stop_gradient => build_stop_gradient, float_only = false;
    /// `x != x`, as bool; false everywhere for bool input.
    isnan => build_isnan, float_only = false;
    /// `(x - x) == 0`, as bool.
    isfinite => build_isfinite, float_only = true;
    /// Negation (the sign bit flips, including for zeros and NaN; integers wrap).
    neg => build_neg, float_only = true;
}

#[track_caller]
fn build_neg(b: &mut GraphBuilder, x: NodeId) -> quabla_ir::Result<NodeId> {
    b.unary(UnaryOp::Neg, x)
}

#[track_caller]
pub(crate) fn build_abs(b: &mut GraphBuilder, x: NodeId) -> quabla_ir::Result<NodeId> {
    // A weak integer zero adopts any dtype, so integers stay integers (`abs(MIN)` wraps).
    let zero = b.weak_int(0);
    let pos = b.compare(Comparison::Greater, x, zero)?;
    let neg = b.unary(UnaryOp::Neg, x)?;
    let mag = b.select(pos, x, neg)?;
    b.add(mag, zero)
}

#[track_caller]
fn build_relu(b: &mut GraphBuilder, x: NodeId) -> quabla_ir::Result<NodeId> {
    let zero = b.weak_int(0);
    build_maximum(b, x, zero)
}

#[track_caller]
pub(crate) fn build_sigmoid(b: &mut GraphBuilder, x: NodeId) -> quabla_ir::Result<NodeId> {
    let a = build_abs(b, x)?;
    let na = b.unary(UnaryOp::Neg, a)?;
    let z = b.unary(UnaryOp::Exp, na)?;
    let one = b.weak_scalar(1.0);
    let denom = b.add(one, z)?;
    let pos = b.div(one, denom)?;
    let neg = b.div(z, denom)?;
    let zero = b.weak_scalar(0.0);
    let positive = b.compare(Comparison::Greater, x, zero)?;
    b.select(positive, pos, neg)
}

#[track_caller]
fn build_square(b: &mut GraphBuilder, x: NodeId) -> quabla_ir::Result<NodeId> {
    b.mul(x, x)
}

#[track_caller]
fn build_reciprocal(b: &mut GraphBuilder, x: NodeId) -> quabla_ir::Result<NodeId> {
    let one = b.weak_scalar(1.0);
    b.div(one, x)
}

#[track_caller]
fn build_stop_gradient(b: &mut GraphBuilder, x: NodeId) -> quabla_ir::Result<NodeId> {
    b.stop_gradient(x)
}

#[track_caller]
pub(crate) fn build_isnan(b: &mut GraphBuilder, x: NodeId) -> quabla_ir::Result<NodeId> {
    b.compare(Comparison::NotEqual, x, x)
}

#[track_caller]
pub(crate) fn build_isfinite(b: &mut GraphBuilder, x: NodeId) -> quabla_ir::Result<NodeId> {
    let d = b.sub(x, x)?;
    let zero = b.weak_int(0);
    b.compare(Comparison::Equal, d, zero)
}

/// `where(isnan(a) | (a > c), a, c)`: NaN from either side propagates; ties go to `c`.
#[track_caller]
pub(crate) fn build_maximum(
    b: &mut GraphBuilder,
    a: NodeId,
    c: NodeId,
) -> quabla_ir::Result<NodeId> {
    build_extremum(b, a, c, Comparison::Greater)
}

/// `where(isnan(a) | (a < c), a, c)`.
#[track_caller]
pub(crate) fn build_minimum(
    b: &mut GraphBuilder,
    a: NodeId,
    c: NodeId,
) -> quabla_ir::Result<NodeId> {
    build_extremum(b, a, c, Comparison::Less)
}

#[track_caller]
fn build_extremum(
    b: &mut GraphBuilder,
    a: NodeId,
    c: NodeId,
    pick: Comparison,
) -> quabla_ir::Result<NodeId> {
    let nan = b.compare(Comparison::NotEqual, a, a)?;
    let wins = b.compare(pick, a, c)?;
    let t = super::bool_const(b, true)?;
    let take_a = b.select(nan, t, wins)?;
    b.select(take_a, a, c)
}

macro_rules! binary_fns {
    ($($(#[$doc:meta])* $name:ident => $build:expr;)*) => {
        super::tensor_methods! {
            #[doc = "The binary functions on `Result<Tensor>`."]
            pub trait BinaryExt;
            $(
                $(#[$doc])*
                pub fn $name(&self, other: impl Into<Operand>) -> Result<Tensor> {
                    apply(vec![self.into(), other.into()], |b, x| ($build)(b, x[0], x[1]))
                }
            )*
        }
        $(
            $(#[$doc])*
            #[track_caller]
            pub fn $name(a: impl Into<Operand>, c: impl Into<Operand>) -> Result<Tensor> {
                apply(vec![a.into(), c.into()], |b, x| ($build)(b, x[0], x[1]))
            }
        )*
    };
}

#[track_caller]
fn bin(op: BinaryOp) -> impl Fn(&mut GraphBuilder, NodeId, NodeId) -> quabla_ir::Result<NodeId> {
    move |b, x, y| b.binary(op, x, y)
}

binary_fns! {
    /// Broadcasting addition.
    add => bin(BinaryOp::Add);
    /// Broadcasting subtraction.
    sub => bin(BinaryOp::Sub);
    /// Broadcasting multiplication.
    mul => bin(BinaryOp::Mul);
    /// Broadcasting division (IEEE: `1/0 = inf`).
    div => bin(BinaryOp::Div);
    /// `x ** y` with real exponents (C `pow` values, numerics.md §4.2).
    pow => bin(BinaryOp::Pow);
    /// Angle of the point `(other, self)`, C `atan2`.
    atan2 => bin(BinaryOp::Atan2);
    /// C `fmod`: the remainder has the sign of the dividend.
    fmod => bin(BinaryOp::Fmod);
    /// Elementwise maximum; NaN from either side propagates; ties go to the right operand.
    maximum => build_maximum;
    /// Elementwise minimum; NaN from either side propagates; ties go to the right operand.
    minimum => build_minimum;
    /// `x // y`: floor division. Integers exactly, with NumPy's signs and 0 for a zero
    /// divisor (numerics.md §12); floats `floor(x / y)`.
    floor_divide => build_floor_divide;
    /// `x & y`: bitwise and of integers, logical and of bools.
    bitwise_and => bitwise(BinaryOp::BitAnd);
    /// `x | y`: bitwise or of integers, logical or of bools.
    bitwise_or => bitwise(BinaryOp::BitOr);
    /// `x ^ y`: bitwise exclusive or of integers, logical exclusive or of bools.
    bitwise_xor => bitwise(BinaryOp::BitXor);
    /// `x << y` on integers; a shift count outside `[0, bits)` gives 0.
    left_shift => bin(BinaryOp::ShiftLeft);
    /// `x >> y` on integers, copying the sign bit (arithmetic shift, as NumPy and JAX for
    /// signed types); a count outside `[0, bits)` gives 0, or -1 for negative `x`.
    right_shift => bin(BinaryOp::ShiftRightArithmetic);
    /// `x >> y` filling with zeros (the bits read as unsigned, JAX's
    /// `shift_right_logical`).
    right_shift_logical => bin(BinaryOp::ShiftRightLogical);
}

/// A bitwise function: integers take the bitwise op; `&` and `|` of other operands keep the
/// logical forms (`where`-based, as `logical_and` builds them).
fn bitwise(
    op: BinaryOp,
) -> impl Fn(&mut GraphBuilder, NodeId, NodeId) -> quabla_ir::Result<NodeId> {
    move |b, x, y| {
        // Without an integer operand `&` and `|` are the logical functions (bools; floats
        // are DT3 there, as before integers existed).
        let integers = b.ty(x).dtype.is_integer() || b.ty(y).dtype.is_integer();
        match op {
            BinaryOp::BitAnd if !integers => super::compare::build_and(b, x, y),
            BinaryOp::BitOr if !integers => super::compare::build_or(b, x, y),
            _ => b.binary(op, x, y),
        }
    }
}

#[track_caller]
fn build_floor_divide(b: &mut GraphBuilder, x: NodeId, y: NodeId) -> quabla_ir::Result<NodeId> {
    let integer = |t: DType| t.is_integer() || t == DType::Bool;
    let (dx, dy) = (b.ty(x).dtype, b.ty(y).dtype);
    if integer(dx) && integer(dy) && (dx.is_integer() || dy.is_integer()) {
        return b.binary(BinaryOp::FloorDiv, x, y);
    }
    let q = b.div(x, y)?;
    b.unary(UnaryOp::Floor, q)
}

/// `~x`: every bit flipped on integers, logical not on bools.
#[track_caller]
pub fn bitwise_not(x: impl Into<Operand>) -> Result<Tensor> {
    apply(vec![x.into()], |b, x| b.unary(UnaryOp::BitNot, x[0]))
}

/// The exponent of [`power`]: a non-negative integer (`i32`, `u32`) lowers to the exact
/// `powi`; every other exponent (an `f64` such as `2.0`, a negative integer, an array) lowers
/// to the differentiable `pow` op (api.md §4).
#[derive(Debug)]
pub enum Exponent {
    /// A non-negative integer: exact repeated multiplication.
    Int(i32),
    /// Any other exponent.
    Operand(Operand),
}

impl From<i32> for Exponent {
    #[track_caller]
    fn from(n: i32) -> Exponent {
        if n >= 0 {
            Exponent::Int(n)
        } else {
            Exponent::Operand(Operand::Scalar(n as f64))
        }
    }
}

impl From<u32> for Exponent {
    #[track_caller]
    fn from(n: u32) -> Exponent {
        match i32::try_from(n) {
            Ok(n) => Exponent::Int(n),
            Err(_) => Exponent::Operand(Operand::Scalar(n as f64)),
        }
    }
}

impl From<i64> for Exponent {
    #[track_caller]
    fn from(n: i64) -> Exponent {
        match i32::try_from(n) {
            Ok(n) => Exponent::from(n),
            Err(_) => Exponent::Operand(Operand::Scalar(n as f64)),
        }
    }
}

macro_rules! operand_exponent {
    ($($t:ty),*) => {$(
        impl From<$t> for Exponent {
            #[track_caller]
            fn from(o: $t) -> Exponent {
                Exponent::Operand(o.into())
            }
        }
    )*};
}
operand_exponent!(f64, Tensor, &Tensor, Result<Tensor>, Operand);

/// `power(x, y)`: `x ** y`. A non-negative integer exponent (`qb::power(&x, 3)`) is the exact
/// `powi`; an `f64` or array exponent (`qb::power(&x, 3.0)`) is `pow`, like `x.pow(y)`.
#[track_caller]
pub fn power(x: impl Into<Operand>, y: impl Into<Exponent>) -> Result<Tensor> {
    match y.into() {
        Exponent::Int(n) => powi(x, n),
        Exponent::Operand(y) => pow(x, y),
    }
}

super::tensor_methods! {
    /// `powi` and `astype` on `Result<Tensor>`.
    pub trait PowerCastExt;
    /// Integer power by exact repeated multiplication; a negative exponent gives
    /// `1 / powi(x, -n)` (numerics.md §4.2).
    pub fn powi(&self, exponent: i32) -> Result<Tensor> {
        apply(vec![self.into()], |b, x| b.powi(x[0], exponent))
    }

    /// Conversion to `dtype` (numerics.md §1.4); returns `self` when the dtype already matches.
    pub fn astype(&self, dtype: DType) -> Result<Tensor> {
        if self.dtype() == dtype && !self.is_weak() {
            return Ok(self.clone());
        }
        apply(vec![self.into()], |b, x| b.astype(x[0], dtype))
    }
}

/// Free-function form of [`Tensor::powi`].
#[track_caller]
pub fn powi(x: impl Into<Operand>, exponent: i32) -> Result<Tensor> {
    apply(vec![x.into()], |b, x| b.powi(x[0], exponent))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row of the native unary table calls its own op: the facade function of every
    /// native unary op agrees with the IR's evaluation of that op on float64 values.
    #[test]
    fn every_native_unary_function_computes_its_op() {
        let xs = [-0.75, -0.3, 0.0, 0.2, 0.6, 1.5, 3.0];
        for op in UnaryOp::ALL {
            let Some(f) = native_unary_function(op) else {
                assert!(matches!(op, UnaryOp::Neg | UnaryOp::BitNot), "{op:?}");
                continue;
            };
            let got = f(crate::array(xs).unwrap().into())
                .unwrap()
                .to_vec::<f64>()
                .unwrap();
            for (x, g) in xs.iter().zip(got) {
                let want = quabla_ir::eval::unary_f64(op, *x);
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "{}({x}) = {g}, expected {want}",
                    op.name()
                );
            }
        }
    }
}
