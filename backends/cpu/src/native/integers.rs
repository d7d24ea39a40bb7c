//! Integer values in the code. An int32 or int64 value is held as an int64 machine value (an
//! int32 sign-extended; [`super::word`]) and every integer node computes what
//! `quabla_ir::eval` computes for it: wrapping two's-complement arithmetic wrapped to the
//! node's dtype (`unary_int`, `binary_int`), floor division and remainder with NumPy's signs
//! and 0 for a zero divisor (`MIN // -1` wraps to `MIN`), shifts by a count outside
//! `[0, bits)` giving 0 (or -1 for an arithmetic shift of a negative value), `pow` by
//! square-and-multiply (0 for a negative exponent), exact comparisons, and the conversions of
//! numerics.md §12 both ways (`DType::float_to_int`: truncation, NaN and out of range giving
//! the minimum; `HostData::from_i64`: the nearest float, one rounding for float32). No
//! instruction here traps: a division never sees a zero or `-1` divisor, and a float converts
//! only after its range is checked.

use super::symbols::POW_INT;
use super::*;

/// The signed integer condition of a comparison.
pub(super) fn int_cc(c: Comparison) -> IntCC {
    match c {
        Comparison::Greater => IntCC::SignedGreaterThan,
        Comparison::GreaterEqual => IntCC::SignedGreaterThanOrEqual,
        Comparison::Less => IntCC::SignedLessThan,
        Comparison::LessEqual => IntCC::SignedLessThanOrEqual,
        Comparison::Equal => IntCC::Equal,
        Comparison::NotEqual => IntCC::NotEqual,
    }
}

impl Emitter<'_, '_> {
    /// `v` as an int64, as `HostData::to_i64_vec` reads an operand of an integer node: an
    /// int64 as it is, a float64 (a bool's 0.0 or 1.0) by [`Emitter::float_to_int`].
    pub(super) fn int_of(&mut self, v: Value) -> Value {
        if self.b.func.dfg.value_type(v) == types::I64 {
            v
        } else {
            self.float_to_int(DType::I64, v)
        }
    }

    /// `dtype.float_to_int(v)` of a float64 `v`, as an int64: truncated toward zero, and the
    /// dtype's minimum for NaN and values outside its range.
    pub(super) fn float_to_int(&mut self, dtype: DType, v: Value) -> Value {
        let end = if dtype == DType::I32 {
            2f64.powi(31)
        } else {
            2f64.powi(63)
        };
        let t = self.b.ins().trunc(v);
        let (low, high) = (self.b.ins().f64const(-end), self.b.ins().f64const(end));
        let above = self.b.ins().fcmp(FloatCC::GreaterThanOrEqual, t, low);
        let below = self.b.ins().fcmp(FloatCC::LessThan, t, high);
        let inside = self.b.ins().band(above, below);
        // Saturating, so that no value traps; the ones it saturates are replaced below.
        let converted = self.b.ins().fcvt_to_sint_sat(types::I64, t);
        let min = self.b.ins().iconst(types::I64, dtype.int_min());
        self.b.ins().select(inside, converted, min)
    }

    /// The int64 `v` as a value of `dtype` (`HostData::from_i64`): an integer wrapped to it,
    /// a bool `v != 0` (as 0.0 or 1.0), a float the nearest value, rounded once.
    pub(super) fn int_to(&mut self, dtype: DType, v: Value) -> Value {
        match dtype {
            DType::I64 => v,
            DType::I32 => {
                let low = self.b.ins().ireduce(types::I32, v);
                self.b.ins().sextend(types::I64, low)
            }
            DType::Bool => {
                let holds = self.b.ins().icmp_imm_s(IntCC::NotEqual, v, 0);
                self.select_one_zero(holds)
            }
            DType::F64 => self.b.ins().fcvt_from_sint(types::F64, v),
            DType::F32 => {
                let narrow = self.b.ins().fcvt_from_sint(types::F32, v);
                self.b.ins().fpromote(types::F64, narrow)
            }
        }
    }

    /// `dtype.wrap_int(v)` of an int64: int32 keeps the low 32 bits sign-extended, bool is
    /// `v != 0` (0 or 1).
    fn wrap(&mut self, dtype: DType, v: Value) -> Value {
        match dtype {
            DType::I32 => self.int_to(DType::I32, v),
            DType::Bool => {
                let holds = self.b.ins().icmp_imm_s(IntCC::NotEqual, v, 0);
                self.b.ins().uextend(types::I64, holds)
            }
            _ => v,
        }
    }

    /// An elementwise op of an integer node on int64 operands (`dtype`: the first operand's,
    /// bool's as 0 or 1), as `quabla_ir::eval`'s integer evaluation computes it before the
    /// result is converted to the node's dtype.
    pub(super) fn int_op(
        &mut self,
        op: EwOp,
        a: [Option<Value>; 3],
        dtype: DType,
    ) -> Option<Value> {
        let x = a[0]?;
        Some(match op {
            EwOp::Unary(UnaryOp::Neg) => {
                let v = self.b.ins().ineg(x);
                self.wrap(dtype, v)
            }
            EwOp::Unary(UnaryOp::BitNot) if dtype == DType::Bool => {
                let holds = self.b.ins().icmp_imm_s(IntCC::Equal, x, 0);
                self.b.ins().uextend(types::I64, holds)
            }
            EwOp::Unary(UnaryOp::BitNot) => {
                let v = self.b.ins().bnot(x);
                self.wrap(dtype, v)
            }
            // The type rules let no float function reach an integer; `unary_int` is the
            // identity on them.
            EwOp::Unary(_) => x,
            EwOp::Powi(n) => self.powi_int(x, n),
            EwOp::Binary(op) => {
                let v = self.binary_int(op, x, a[1]?, dtype)?;
                self.wrap(dtype, v)
            }
            EwOp::Compare(c) => {
                let holds = self.b.ins().icmp(int_cc(c), x, a[1]?);
                self.b.ins().uextend(types::I64, holds)
            }
            EwOp::Where => {
                let holds = self.b.ins().icmp_imm_s(IntCC::NotEqual, x, 0);
                self.b.ins().select(holds, a[1]?, a[2]?)
            }
            EwOp::Cast(_) | EwOp::Copy => x,
        })
    }

    /// `pow_int(x, n)` for an exponent known now: square-and-multiply from the least
    /// significant bit with wrapping products, 0 for a negative exponent.
    fn powi_int(&mut self, x: Value, n: i32) -> Value {
        if n < 0 {
            return self.b.ins().iconst(types::I64, 0);
        }
        let mut e = n as u32;
        let mut base = x;
        let mut acc = self.b.ins().iconst(types::I64, 1);
        while e > 0 {
            if e & 1 == 1 {
                acc = self.b.ins().imul(acc, base);
            }
            e >>= 1;
            if e > 0 {
                base = self.b.ins().imul(base, base);
            }
        }
        acc
    }

    /// `binary_int` before its final wrap: the function on int64 operands of `dtype`.
    fn binary_int(&mut self, op: BinaryOp, x: Value, y: Value, dtype: DType) -> Option<Value> {
        let bits = i64::from(dtype.int_bits().unwrap_or(64));
        let zero = self.b.ins().iconst(types::I64, 0);
        Some(match op {
            BinaryOp::Add => self.b.ins().iadd(x, y),
            BinaryOp::Sub => self.b.ins().isub(x, y),
            BinaryOp::Mul => self.b.ins().imul(x, y),
            BinaryOp::Pow => self.call_returning(POW_INT, &[x, y], types::I64)?,
            BinaryOp::FloorDiv | BinaryOp::Rem => self.floor_div_rem(op, x, y),
            BinaryOp::BitAnd => self.b.ins().band(x, y),
            BinaryOp::BitOr => self.b.ins().bor(x, y),
            BinaryOp::BitXor => self.b.ins().bxor(x, y),
            // The machine shifts take the count modulo 64: a count outside `[0, bits)`
            // (negative ones are huge unsigned) selects the out-of-range value instead.
            BinaryOp::ShiftLeft => {
                let inside = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, y, bits);
                let shifted = self.b.ins().ishl(x, y);
                self.b.ins().select(inside, shifted, zero)
            }
            BinaryOp::ShiftRightArithmetic => {
                let inside = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, y, bits);
                let shifted = self.b.ins().sshr(x, y);
                // `x` is sign-extended from its dtype: its sign, spread over every bit.
                let sign = self.b.ins().sshr_imm_u(x, 63);
                self.b.ins().select(inside, shifted, sign)
            }
            BinaryOp::ShiftRightLogical => {
                let inside = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, y, bits);
                let unsigned = if bits == 32 {
                    self.b.ins().band_imm_u(x, 0xFFFF_FFFF)
                } else {
                    x
                };
                let shifted = self.b.ins().ushr(unsigned, y);
                self.b.ins().select(inside, shifted, zero)
            }
            // Float-only functions never reach integer operands (the type rules refuse them).
            BinaryOp::Div | BinaryOp::Atan2 | BinaryOp::Fmod => zero,
        })
    }

    /// `floor_div_int` or `rem_int`: the quotient rounded toward negative infinity, or the
    /// remainder with the divisor's sign, 0 for a zero divisor. The machine division traps on a
    /// zero divisor and on `MIN / -1`, so it divides by 1 for both and the result is selected:
    /// `x // -1` is `-x` wrapping, `x % -1` is 0.
    fn floor_div_rem(&mut self, op: BinaryOp, x: Value, y: Value) -> Value {
        let by_zero = self.b.ins().icmp_imm_s(IntCC::Equal, y, 0);
        let by_minus_one = self.b.ins().icmp_imm_s(IntCC::Equal, y, -1);
        let special = self.b.ins().bor(by_zero, by_minus_one);
        let one = self.b.ins().iconst(types::I64, 1);
        let divisor = self.b.ins().select(special, one, y);
        let r = self.b.ins().srem(x, divisor);
        // A nonzero remainder has the dividend's sign; it is off by one divisor when that
        // differs from the divisor's.
        let inexact = self.b.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
        let signs = self.b.ins().bxor(r, y);
        let differ = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, signs, 0);
        let off = self.b.ins().band(inexact, differ);
        let v = if op == BinaryOp::FloorDiv {
            let q = self.b.ins().sdiv(x, divisor);
            let off = self.b.ins().uextend(types::I64, off);
            let q = self.b.ins().isub(q, off);
            let negated = self.b.ins().ineg(x);
            self.b.ins().select(by_minus_one, negated, q)
        } else {
            let shifted = self.b.ins().iadd(r, y);
            self.b.ins().select(off, shifted, r)
        };
        let zero = self.b.ins().iconst(types::I64, 0);
        self.b.ins().select(by_zero, zero, v)
    }

    /// Where an integer reduction by `reducer` starts (`quabla_ir::eval`: sums from 0, `max`
    /// from the int64 minimum, `min` from its maximum).
    pub(super) fn int_fold(reducer: Reducer) -> i64 {
        match reducer {
            Reducer::Sum | Reducer::Mean => 0,
            Reducer::Max => i64::MIN,
            Reducer::Min => i64::MAX,
        }
    }

    /// One step of an integer reduction: `acc + v` wrapping, or the larger or smaller.
    pub(super) fn int_fold_step(&mut self, reducer: Reducer, acc: Value, v: Value) -> Value {
        let cc = match reducer {
            Reducer::Sum | Reducer::Mean => return self.b.ins().iadd(acc, v),
            Reducer::Max => IntCC::SignedGreaterThan,
            Reducer::Min => IntCC::SignedLessThan,
        };
        let keep = self.b.ins().icmp(cc, acc, v);
        self.b.ins().select(keep, acc, v)
    }
}
