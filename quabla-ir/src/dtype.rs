//! The three element types of Quabla and their names.

use std::fmt;

/// Element type of a tensor. There are no integer, half or complex dtypes (numerics.md §1.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F64,
    Bool,
}

impl DType {
    /// Bytes per element in host storage (bool is one byte, 0 or 1).
    pub fn itemsize(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 => 8,
            DType::Bool => 1,
        }
    }

    /// The long name (`float64`, `float32`, `bool`) used by `repr` and signatures.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::Bool => "bool",
        }
    }

    /// The spelling in IR text (`f32`, `f64`, `i1`).
    pub fn ir_name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::Bool => "i1",
        }
    }

    /// Parses the IR text spelling.
    pub fn from_ir_name(name: &str) -> Option<DType> {
        match name {
            "f32" => Some(DType::F32),
            "f64" => Some(DType::F64),
            "i1" => Some(DType::Bool),
            _ => None,
        }
    }

    pub fn is_float(self) -> bool {
        !matches!(self, DType::Bool)
    }

    /// Rounds an f64 value to this dtype, returning it as f64 again: the rounding applied after
    /// every node on the CPU (numerics.md §1.4, §1.5). NaN is true for bool.
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
    }
}
