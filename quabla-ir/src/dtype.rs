//! The element types of Quabla, their names and the promotion lattice between them.

use std::fmt;

/// Element type of a tensor: two floats, bool, and two signed integers (numerics.md §1.1,
/// §12). There are no half, complex or unsigned dtypes.
///
/// Integer values are two's complement: `+ - *` wrap on overflow, never trap. Random bits are
/// 64-bit words held in `I64` (their arithmetic is the same modulo 2^64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F64,
    Bool,
    I32,
    I64,
}

impl DType {
    /// Bytes per element in host storage (bool is one byte, 0 or 1).
    pub fn itemsize(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 => 8,
            DType::Bool => 1,
            DType::I32 => 4,
            DType::I64 => 8,
        }
    }

    /// The long name (`float64`, `float32`, `bool`, `int32`, `int64`) used by `repr` and
    /// signatures.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::Bool => "bool",
            DType::I32 => "int32",
            DType::I64 => "int64",
        }
    }

    /// The spelling in IR text (`f32`, `f64`, `i1`, `i32`, `i64`).
    pub fn ir_name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::Bool => "i1",
            DType::I32 => "i32",
            DType::I64 => "i64",
        }
    }

    /// Parses the IR text spelling.
    pub fn from_ir_name(name: &str) -> Option<DType> {
        match name {
            "f32" => Some(DType::F32),
            "f64" => Some(DType::F64),
            "i1" => Some(DType::Bool),
            "i32" => Some(DType::I32),
            "i64" => Some(DType::I64),
            _ => None,
        }
    }

    /// The long name's inverse (`float64`, `int32`, ...), for file headers and user input.
    pub fn from_name(name: &str) -> Option<DType> {
        [DType::F64, DType::F32, DType::Bool, DType::I32, DType::I64]
            .into_iter()
            .find(|d| d.name() == name)
    }

    /// float32 or float64: the dtypes that carry derivatives.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }

    /// int32 or int64.
    pub fn is_integer(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// Bits of an integer dtype (32 or 64); `None` for the others.
    pub fn int_bits(self) -> Option<u32> {
        match self {
            DType::I32 => Some(32),
            DType::I64 => Some(64),
            _ => None,
        }
    }

    /// The position on the promotion chain `bool < int32 < int64 < float32 < float64`
    /// (numerics.md §12: JAX's lattice restricted to our dtypes).
    fn rank_in_lattice(self) -> u8 {
        match self {
            DType::Bool => 0,
            DType::I32 => 1,
            DType::I64 => 2,
            DType::F32 => 3,
            DType::F64 => 4,
        }
    }

    /// The join of two strong dtypes on the promotion chain, or `None` for float32 with
    /// float64, which never mix implicitly (numerics.md §2.1 rule 1).
    pub fn join(self, other: DType) -> Option<DType> {
        if self.is_float() && other.is_float() && self != other {
            return None;
        }
        Some(if self.rank_in_lattice() >= other.rank_in_lattice() {
            self
        } else {
            other
        })
    }

    /// Rounds an f64 value to this dtype, returning it as f64 again: the rounding applied after
    /// every float node on the CPU (numerics.md §1.4, §1.5). NaN is true for bool; integer
    /// dtypes convert as [`DType::float_to_int`] does (exact for the results of int32 nodes;
    /// int64 values beyond 2^53 are not exact as f64 and are never computed through here).
    pub fn round(self, v: f64) -> f64 {
        match self {
            DType::F64 => v,
            DType::F32 => v as f32 as f64,
            DType::Bool => {
                if v != 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
            DType::I32 | DType::I64 => self.float_to_int(v) as f64,
        }
    }

    /// Float to integer conversion (numerics.md §12): truncation toward zero; NaN and values
    /// outside the dtype's range give the dtype's minimum (our choice: one rule on every
    /// platform). For non-integer dtypes the value is truncated as for int64.
    pub fn float_to_int(self, v: f64) -> i64 {
        // The dtype's range is `[-2^(b-1), 2^(b-1))`; both bounds are exact in f64.
        let end = match self {
            DType::I32 => 2f64.powi(31),
            _ => 2f64.powi(63),
        };
        let t = v.trunc();
        if t >= -end && t < end {
            t as i64
        } else {
            // NaN fails both comparisons and lands here too.
            self.int_min()
        }
    }

    /// The smallest value of an integer dtype (`i64::MIN` for the other dtypes).
    pub fn int_min(self) -> i64 {
        match self {
            DType::I32 => i32::MIN as i64,
            _ => i64::MIN,
        }
    }

    /// The largest value of an integer dtype (`i64::MAX` for the other dtypes).
    pub fn int_max(self) -> i64 {
        match self {
            DType::I32 => i32::MAX as i64,
            _ => i64::MAX,
        }
    }

    /// Wraps an i64 value into this integer dtype (two's complement: int32 keeps the low 32
    /// bits, sign-extended); bool is `v != 0`; floats convert to nearest.
    pub fn wrap_int(self, v: i64) -> i64 {
        match self {
            DType::I32 => v as i32 as i64,
            DType::Bool => (v != 0) as i64,
            _ => v,
        }
    }
}

/// `str(dtype)`: `f64`, `f32`, `bool`.
impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::Bool => "bool",
            DType::I32 => "i32",
            DType::I64 => "i64",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_follows_ieee_casts() {
        assert_eq!(DType::F32.round(0.1), 0.10000000149011612);
        assert_eq!(DType::F32.round(1e300), f64::INFINITY);
        assert!(DType::F32.round(f64::NAN).is_nan());
        assert_eq!(DType::Bool.round(f64::NAN), 1.0);
        assert_eq!(DType::Bool.round(-0.0), 0.0);
    }

    #[test]
    fn names() {
        assert_eq!(DType::Bool.ir_name(), "i1");
        assert_eq!(DType::from_ir_name("i1"), Some(DType::Bool));
        assert_eq!(DType::F32.to_string(), "f32");
        assert_eq!(DType::F64.name(), "float64");
        for d in [DType::F64, DType::F32, DType::Bool, DType::I32, DType::I64] {
            assert_eq!(DType::from_ir_name(d.ir_name()), Some(d));
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
    }

    #[test]
    fn promotion_chain() {
        use DType::*;
        assert_eq!(Bool.join(I32), Some(I32));
        assert_eq!(I32.join(I64), Some(I64));
        // int64 with float32 is float32, as in JAX (not NumPy's float64).
        assert_eq!(I64.join(F32), Some(F32));
        assert_eq!(I32.join(F64), Some(F64));
        assert_eq!(F32.join(F64), None);
        assert_eq!(F64.join(F64), Some(F64));
    }

    #[test]
    fn float_to_int_truncates_and_saturates_to_the_minimum() {
        assert_eq!(DType::I32.float_to_int(-2.7), -2);
        assert_eq!(DType::I32.float_to_int(2.7), 2);
        assert_eq!(DType::I32.float_to_int(f64::NAN), i32::MIN as i64);
        assert_eq!(DType::I32.float_to_int(2147483647.9), i32::MAX as i64);
        assert_eq!(DType::I32.float_to_int(2147483648.0), i32::MIN as i64);
        assert_eq!(DType::I32.float_to_int(-2147483648.5), i32::MIN as i64);
        assert_eq!(DType::I32.float_to_int(-2147483649.0), i32::MIN as i64);
        assert_eq!(DType::I64.float_to_int(9.3e18), i64::MIN);
        assert_eq!(DType::I64.float_to_int(f64::INFINITY), i64::MIN);
        assert_eq!(DType::I64.float_to_int(-(2f64.powi(63))), i64::MIN);
        assert_eq!(DType::I64.float_to_int(9.2e18), 9_200_000_000_000_000_000);
        assert_eq!(DType::I32.wrap_int(1 << 31), i32::MIN as i64);
    }
}
