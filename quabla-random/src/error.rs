//! The errors of key derivation and sampling, with the messages of `spec/errors.md`.

use quabla_ir::DType;
use thiserror::Error;

/// An invalid argument, shape or dtype given to a key function or sampler, or a request for
/// more memory than can be had.
///
/// `Display` is the message of `spec/errors.md`. [`RandomError::kind`] says which error of the
/// facade each variant becomes; the list below says the same per variant.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum RandomError {
    /// AR10, facade `InvalidArgument` (Python `ValueError`).
    #[error("split num must be >= 1, got {num}")]
    SplitNum { num: usize },
    /// AR11 (NaN included), facade `InvalidArgument` (Python `ValueError`).
    #[error("bernoulli p must be in [0, 1], got {}", py_float(*.p))]
    BernoulliP { p: f64 },
    /// AR12 for `uniform`: a bound that is not finite, or `minval >= maxval`. Facade
    /// `InvalidArgument` (Python `ValueError`).
    #[error("uniform requires finite minval < maxval")]
    UniformBounds { minval: f64, maxval: f64 },
    /// `[minval, maxval)` holds no value of the requested dtype (a float32 request for an
    /// interval narrower than the float32 spacing, or beyond the float32 range), so no sample
    /// can satisfy the contract. Facade `InvalidArgument` (Python `ValueError`).
    #[error(
        "uniform requires an interval [minval, maxval) that contains a {} value, got [{}, {})",
        .dtype.name(), py_float(*.minval), py_float(*.maxval)
    )]
    UniformEmpty {
        dtype: DType,
        minval: f64,
        maxval: f64,
    },
    /// AR12 for the initializers, facade `InvalidArgument` (Python `ValueError`).
    #[error("{initializer} requires a shape of rank >= 2, got {}", shape_text(.shape))]
    Rank {
        initializer: &'static str,
        shape: Vec<usize>,
    },
    /// TY11: a sampler asked for a dtype other than float32 or float64. Facade `Type`
    /// (Python `TypeError`).
    #[error("dtype must be float32 or float64, got {}", .dtype.name())]
    Dtype { dtype: DType },
    /// `randint` asked for a dtype other than int32 or int64. Facade `Type` (Python
    /// `TypeError`).
    #[error("randint dtype must be int32 or int64, got {}", .dtype.name())]
    IntDtype { dtype: DType },
    /// AR12 for `randint`: `minval >= maxval`, or a bound outside the dtype's range. Facade
    /// `InvalidArgument` (Python `ValueError`).
    #[error(
        "randint requires minval < maxval within the {} range, got [{minval}, {maxval})",
        .dtype.name()
    )]
    IntBounds {
        dtype: DType,
        minval: i64,
        maxval: i64,
    },
    /// SH6: a shape with a zero extent; the message is the one `quabla_ir::Shape::new` gives.
    /// Facade `Shape` (Python `ValueError`).
    #[error("{message}")]
    EmptyShape { shape: Vec<usize>, message: String },
    /// A shape whose element count or byte size does not fit in a machine word. Facade
    /// `InvalidArgument` (Python `ValueError`, as NumPy's "array is too big").
    #[error("shape {} has too many elements to sample", shape_text(.shape))]
    TooLarge { shape: Vec<usize> },
    /// The allocator could not provide the output buffer. Facade: its out-of-memory error
    /// (Python `MemoryError`); a facade without one reports `InvalidArgument`.
    #[error(
        "cannot allocate {bytes} bytes for random values of shape {}",
        shape_text(.shape)
    )]
    OutOfMemory { bytes: usize, shape: Vec<usize> },
}

/// The kind of facade error a [`RandomError`] becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// `Error::InvalidArgument` (Python `ValueError`).
    InvalidArgument,
    /// `Error::Type` (Python `TypeError`).
    Type,
    /// `Error::Shape` (Python `ValueError`).
    Shape,
    /// An out-of-memory error (Python `MemoryError`).
    OutOfMemory,
}

impl RandomError {
    /// The facade error kind this error maps to.
    pub fn kind(&self) -> ErrorKind {
        match self {
            RandomError::SplitNum { .. }
            | RandomError::BernoulliP { .. }
            | RandomError::UniformBounds { .. }
            | RandomError::UniformEmpty { .. }
            | RandomError::Rank { .. }
            | RandomError::IntBounds { .. }
            | RandomError::TooLarge { .. } => ErrorKind::InvalidArgument,
            RandomError::Dtype { .. } | RandomError::IntDtype { .. } => ErrorKind::Type,
            RandomError::EmptyShape { .. } => ErrorKind::Shape,
            RandomError::OutOfMemory { .. } => ErrorKind::OutOfMemory,
        }
    }
}

/// A shape as the spec prints it: `[2, 3]`, `[3]`, `[]`.
pub(crate) fn shape_text(shape: &[usize]) -> String {
    let mut out = String::from("[");
    for (i, d) in shape.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&d.to_string());
    }
    out.push(']');
    out
}

/// A float as Python's `repr` prints it (`0.5`, `2.0`, `nan`, `-inf`, `1e+300`, `1e-05`), so
/// that messages read the same from both bindings.
pub(crate) fn py_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    // Rust's `Debug` already picks the shortest round-trip digits and switches to scientific
    // notation at the same magnitudes as Python (below 1e-4, from 1e16); only the exponent is
    // spelled differently (`1e16` / `1e-5` against `1e+16` / `1e-05`).
    let text = format!("{x:?}");
    match text.split_once('e') {
        Some((mantissa, exponent)) => {
            let (sign, digits) = match exponent.strip_prefix('-') {
                Some(digits) => ('-', digits),
                None => ('+', exponent),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_float_text() {
        assert_eq!(py_float(0.5), "0.5");
        assert_eq!(py_float(2.0), "2.0");
        assert_eq!(py_float(-1.5), "-1.5");
        assert_eq!(py_float(f64::NAN), "nan");
        assert_eq!(py_float(f64::NEG_INFINITY), "-inf");
        assert_eq!(py_float(1e300), "1e+300");
        assert_eq!(py_float(1e-5), "1e-05");
        assert_eq!(py_float(1.5e16), "1.5e+16");
        assert_eq!(py_float(1e15), "1000000000000000.0");
        assert_eq!(py_float(0.0001), "0.0001");
    }

    #[test]
    fn shapes_print_like_the_spec() {
        assert_eq!(shape_text(&[]), "[]");
        assert_eq!(shape_text(&[3]), "[3]");
        assert_eq!(shape_text(&[2, 3]), "[2, 3]");
    }
}
