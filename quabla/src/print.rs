//! Text form of tensors and tracers (numerics.md §11).
//!
//! This module owns `repr(tensor)`: `Tensor(<body>, dtype=<name>)`, where the body follows
//! NumPy's default array printing (precision 8 in `maxprec` mode, `suppress=False`, line width
//! 75, threshold 1000, 3 edge items) and the dtype name is always appended. It also owns the
//! text of a tracer, `TraceTensor(node_id=<n>, shape=[..], dtype=<name>)`.
//!
//! The rules, in brief:
//!
//! * Each float is printed with the fewest digits that identify it in its own dtype, cut to at
//!   most 8 fractional digits (correctly rounded, ties to even); integral values print as `1.`.
//! * The whole array switches to scientific notation when its largest finite nonzero magnitude is
//!   `>= 1e8`, its smallest is `< 1e-4`, or their ratio exceeds `1e3` (compared in the element
//!   dtype). Mantissas then all show as many fractional digits as the longest one needs (the
//!   extra digits are the value's own, rounded) and exponents share a width of at least two.
//! * Columns are padded so decimal points align; `nan`, `inf` and `-inf` are right-aligned to
//!   the same width. Booleans print `True`/`False`, right-aligned to width 5.
//! * Rows of rank >= 2 bodies go on their own lines, indented under the first element after
//!   `Tensor(`, with one blank line more between blocks of each higher axis; elements of the last
//!   axis wrap at 75 columns.
//! * With more than 1000 elements, every axis longer than 6 shows its first 3 and last 3 entries
//!   around `...`. Only the displayed elements are read, and only they decide the layout.

use quabla_ir::{DType, HostData};

/// Prefix of every tensor repr.
const PREFIX: &str = "Tensor(";
/// Maximum line width of the whole repr.
const LINE_WIDTH: usize = 75;
/// Arrays with more elements than this are summarized.
const THRESHOLD: usize = 1000;
/// Entries shown at each end of a summarized axis.
const EDGE_ITEMS: usize = 3;
/// Maximum number of fractional digits (of the mantissa, in scientific notation).
const PRECISION: usize = 8;
/// Separator between elements of one row.
const SEPARATOR: &str = ", ";
/// Stands for the elements left out of a summarized axis.
const SUMMARY: &str = "...";

/// The full repr of a concrete tensor: `Tensor(<body>, dtype=<name>)`.
///
/// `shape` is row-major and `data` holds exactly `shape.iter().product()` elements (one for a
/// rank-0 tensor). Only the elements that appear in the output are read.
pub(crate) fn format_tensor(shape: &[usize], data: &HostData) -> String {
    let size: usize = shape.iter().product();
    debug_assert_eq!(
        size,
        data.len(),
        "shape {shape:?} does not match the data length"
    );

    let mut extras = Vec::new();
    let body = if size == 0 {
        if shape != [0] {
            extras.push(format!("shape={}", format_shape(shape)));
        }
        "[]".to_string()
    } else {
        let layout = Layout::new(shape);
        let offsets = layout.shown_offsets();
        let words = format_elements(data, &offsets);
        // One column is kept free for the closing parenthesis (NumPy's `suffix=")"`).
        let width = LINE_WIDTH - 1;
        // Continuation lines start under the first element: past `Tensor(` and the `[`.
        let hanging = " ".repeat(PREFIX.len() + 1);
        layout.render(&words, 0, 0, &hanging, width)
    };
    extras.push(format!("dtype={}", data.dtype().name()));

    let arr_str = format!("{PREFIX}{body},");
    let extra_str = format!("{})", extras.join(", "));
    // Put the extras on a new line when they would run the last line past the line width.
    let last_line_len = arr_str.len() - arr_str.rfind('\n').map_or(0, |p| p + 1);
    let spacer = if last_line_len + extra_str.len() + 1 > LINE_WIDTH {
        format!("\n{}", " ".repeat(PREFIX.len()))
    } else {
        " ".to_string()
    };
    format!("{arr_str}{spacer}{extra_str}")
}

/// The repr of a tracer: `TraceTensor(node_id=3, shape=[2], dtype=float32)`.
pub(crate) fn format_tracer(node_id: u32, shape: &[usize], dtype: DType) -> String {
    format!(
        "TraceTensor(node_id={node_id}, shape={}, dtype={})",
        format_shape(shape),
        dtype.name()
    )
}

/// A shape as a list: `[]`, `[2]`, `[2, 3]`.
fn format_shape(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    format!("[{}]", dims.join(", "))
}

/// Which entries of a (nonempty) tensor are displayed, and where summaries go.
#[derive(Debug)]
struct Layout<'a> {
    shape: &'a [usize],
    /// Whether the tensor is summarized at all (more than `THRESHOLD` elements).
    summarize: bool,
    /// Number of displayed entries along each axis.
    shown: Vec<usize>,
    /// Row-major strides of the displayed sub-array.
    shown_strides: Vec<usize>,
}

impl<'a> Layout<'a> {
    fn new(shape: &'a [usize]) -> Self {
        let summarize = shape.iter().product::<usize>() > THRESHOLD;
        let shown: Vec<usize> = shape
            .iter()
            .map(|&n| {
                if summarize && n > 2 * EDGE_ITEMS {
                    2 * EDGE_ITEMS
                } else {
                    n
                }
            })
            .collect();
        let mut shown_strides = vec![1; shape.len()];
        for axis in (0..shape.len().saturating_sub(1)).rev() {
            shown_strides[axis] = shown_strides[axis + 1] * shown[axis + 1];
        }
        Layout {
            shape,
            summarize,
            shown,
            shown_strides,
        }
    }

    /// Whether `axis` is cut short with `...`.
    fn is_summarized(&self, axis: usize) -> bool {
        self.summarize && self.shape[axis] > 2 * EDGE_ITEMS
    }

    /// The indices into `axis` of the full tensor that are displayed, in order.
    fn shown_indices(&self, axis: usize) -> Vec<usize> {
        let n = self.shape[axis];
        if self.is_summarized(axis) {
            (0..EDGE_ITEMS).chain(n - EDGE_ITEMS..n).collect()
        } else {
            (0..n).collect()
        }
    }

    /// Row-major storage offsets of the displayed elements, in display order.
    fn shown_offsets(&self) -> Vec<usize> {
        // Built from the last axis outwards: the offsets of the displayed sub-array of axes
        // `axis..`, each combined with every displayed index of `axis`.
        let mut offsets = vec![0usize];
        let mut stride = 1usize;
        for axis in (0..self.shape.len()).rev() {
            offsets = self
                .shown_indices(axis)
                .into_iter()
                .flat_map(|i| offsets.iter().map(move |&t| i * stride + t))
                .collect();
            stride *= self.shape[axis];
        }
        offsets
    }

    /// The bracketed text of the displayed sub-array that starts at `base` (a position in
    /// `words`) along axes `axis..`, following NumPy's `_formatArray` (non-legacy mode).
    /// `hanging` is the indentation of continuation lines and `width` the usable line width.
    fn render(
        &self,
        words: &[String],
        axis: usize,
        base: usize,
        hanging: &str,
        width: usize,
    ) -> String {
        let rank = self.shape.len();
        if axis == rank {
            return words[base].clone();
        }
        let axes_left = rank - axis;
        let next_hanging = format!("{hanging} ");
        let next_width = width.saturating_sub(1); // room for this axis' closing `]`
        let n = self.shown[axis];
        let stride = self.shown_strides[axis];

        // The items of this axis: positions in the displayed sub-array, with `None` for `...`.
        let mut items: Vec<Option<usize>> = Vec::with_capacity(n + 1);
        if self.is_summarized(axis) {
            items.extend((0..EDGE_ITEMS).map(Some));
            items.push(None);
            items.extend((n - EDGE_ITEMS..n).map(Some));
        } else {
            items.extend((0..n).map(Some));
        }
        let last = items.len() - 1;

        let mut s = String::new();
        if axes_left == 1 {
            // Last axis: wrap elements that would not fit before the separator or bracket.
            let elem_width = width.saturating_sub(1);
            let mut line = hanging.to_string();
            for (k, item) in items.iter().enumerate() {
                let word = match item {
                    Some(i) => self.render(
                        words,
                        axis + 1,
                        base + i * stride,
                        &next_hanging,
                        next_width,
                    ),
                    None => SUMMARY.to_string(),
                };
                extend_line(&mut s, &mut line, &word, elem_width, hanging);
                if k != last {
                    line.push_str(SEPARATOR);
                }
            }
            s.push_str(&line);
        } else {
            // Other axes: one row per line, with a blank line more per extra axis.
            let line_sep = format!("{}{}", SEPARATOR.trim_end(), "\n".repeat(axes_left - 1));
            for (k, item) in items.iter().enumerate() {
                s.push_str(hanging);
                match item {
                    Some(i) => s.push_str(&self.render(
                        words,
                        axis + 1,
                        base + i * stride,
                        &next_hanging,
                        next_width,
                    )),
                    None => s.push_str(SUMMARY),
                }
                if k != last {
                    s.push_str(&line_sep);
                }
            }
        }
        format!("[{}]", &s[hanging.len()..])
    }
}

/// Appends `word` to `line`, first moving `line` into `s` and starting a new one when the word
/// would pass `width` (unless the line holds no word yet, where wrapping would not help).
fn extend_line(s: &mut String, line: &mut String, word: &str, width: usize, hanging: &str) {
    if line.len() + word.len() > width && line.len() > hanging.len() {
        s.push_str(line.trim_end());
        s.push('\n');
        line.clear();
        line.push_str(hanging);
    }
    line.push_str(word);
}

/// The padded text of each displayed element (storage `offsets`, in display order).
fn format_elements(data: &HostData, offsets: &[usize]) -> Vec<String> {
    match data {
        HostData::F64(v) => format_floats(&offsets.iter().map(|&o| v[o]).collect::<Vec<_>>()),
        HostData::F32(v) => format_floats(&offsets.iter().map(|&o| v[o]).collect::<Vec<_>>()),
        HostData::Bool(v) => offsets
            .iter()
            .map(|&o| if v[o] { " True" } else { "False" }.to_string())
            .collect(),
        HostData::I32(v) => format_ints(offsets.iter().map(|&o| v[o] as i64)),
        HostData::I64(v) => format_ints(offsets.iter().map(|&o| v[o])),
    }
}

/// Integers as NumPy prints them: decimal, right-aligned to the widest (`[ 1, -2, 10]`).
fn format_ints(values: impl Iterator<Item = i64>) -> Vec<String> {
    let texts: Vec<String> = values.map(|v| v.to_string()).collect();
    let width = texts.iter().map(String::len).max().unwrap_or(0);
    texts.into_iter().map(|t| format!("{t:>width$}")).collect()
}

/// The float dtypes, with their shortest round-trip digits and native-precision comparisons.
trait Float: Copy + PartialOrd + std::fmt::Display + std::fmt::LowerExp + std::str::FromStr {
    const ZERO: Self;
    /// Magnitude from which scientific notation is used.
    const EXP_MAX: Self;
    /// Magnitude below which scientific notation is used.
    const EXP_MIN: Self;
    /// Ratio of largest to smallest magnitude above which scientific notation is used.
    const EXP_RATIO: Self;
    /// More fractional mantissa digits than any finite value's exact decimal expansion has.
    const EXACT_DIGITS: usize;
    fn is_finite(self) -> bool;
    fn is_nan(self) -> bool;
    fn abs(self) -> Self;
    fn div(self, other: Self) -> Self;
    fn same_bits(self, other: Self) -> bool;
}

macro_rules! impl_float {
    ($t:ty, $exact:expr) => {
        impl Float for $t {
            const ZERO: Self = 0.0;
            const EXP_MAX: Self = 1e8;
            const EXP_MIN: Self = 1e-4;
            const EXP_RATIO: Self = 1e3;
            const EXACT_DIGITS: usize = $exact;
            fn is_finite(self) -> bool {
                <$t>::is_finite(self)
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            fn div(self, other: Self) -> Self {
                self / other
            }
            fn same_bits(self, other: Self) -> bool {
                self.to_bits() == other.to_bits()
            }
        }
    };
}

// A binary float has at most 112 (f32) or 767 (f64) significant decimal digits.
impl_float!(f32, 120);
impl_float!(f64, 780);

/// A finite value split for printing: integer part (with sign), fractional digits and, in
/// scientific notation, the decimal exponent.
#[derive(Debug)]
struct Parts {
    int: String,
    frac: String,
    exp: i32,
}

/// Splits `LowerExp` output (`-1.25e-7`) into sign and integer digit, fraction and exponent.
fn split_scientific(s: &str) -> Parts {
    let (mantissa, exp) = s.split_once('e').expect("LowerExp output has an exponent");
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    Parts {
        int: int.to_string(),
        frac: frac.to_string(),
        exp: exp.parse().expect("LowerExp exponent is an integer"),
    }
}

/// Removes trailing zeros of a fractional digit string.
fn trim_zeros(frac: &str) -> String {
    frac.trim_end_matches('0').to_string()
}

/// The shortest significant digits (no trailing zeros) and decimal exponent that identify the
/// magnitude of finite `x` in its own dtype: `(digits, exp)` stands for `d.ddd × 10^exp`.
///
/// When two candidates of that length are equally close to `x`, the one with an even last digit
/// is taken (as NumPy's Dragon4 does: float32 `1.36328125` prints `1.3632812`).
fn shortest_digits<T: Float>(x: T) -> (String, i32) {
    let x = x.abs();
    let s = split_scientific(&format!("{x:e}"));
    let digits = format!("{}{}", s.int, s.frac);
    let k = s.frac.len();
    // A tie needs `x` to be exactly halfway between two k-fraction-digit mantissas.
    let half = split_scientific(&format!("{x:.prec$e}", prec = k + 1));
    if half.exp != s.exp || !half.frac.ends_with('5') {
        return (digits, s.exp);
    }
    let exact = split_scientific(&format!("{x:.prec$e}", prec = T::EXACT_DIGITS));
    if exact.exp != s.exp || exact.frac[k + 1..].bytes().any(|b| b != b'0') {
        return (digits, s.exp);
    }
    // The candidates are the truncation and its successor; take the even one if it round-trips.
    let below = format!("{}{}", half.int, &half.frac[..k]);
    let (above, above_exp) = increment(&below, s.exp);
    let (even, even_exp) = if below.ends_with(['0', '2', '4', '6', '8']) {
        (below, s.exp)
    } else {
        (above, above_exp)
    };
    let text = format!("{}.{}e{even_exp}", &even[..1], &even[1..]);
    match text.parse::<T>() {
        Ok(back) if back.same_bits(x) => {
            let trimmed = even.trim_end_matches('0');
            let trimmed = if trimmed.is_empty() { "0" } else { trimmed };
            (trimmed.to_string(), even_exp)
        }
        _ => (digits, s.exp),
    }
}

/// Adds one unit in the last place to a significant-digit string, carrying into the exponent.
fn increment(digits: &str, exp: i32) -> (String, i32) {
    let mut bytes = digits.as_bytes().to_vec();
    for b in bytes.iter_mut().rev() {
        if *b == b'9' {
            *b = b'0';
        } else {
            *b += 1;
            return (String::from_utf8(bytes).expect("ASCII digits"), exp);
        }
    }
    // All nines: 99 + 1 = 100, i.e. "10" one decade up.
    bytes.insert(0, b'1');
    bytes.pop();
    (String::from_utf8(bytes).expect("ASCII digits"), exp + 1)
}

/// `-` for values with the sign bit set (including `-0.0`), nothing otherwise.
fn sign_of<T: Float>(x: T) -> &'static str {
    if format!("{x:e}").starts_with('-') {
        "-"
    } else {
        ""
    }
}

/// Positional digits: the shortest digits (but always every integer digit) when they need at
/// most `PRECISION` fractional digits, otherwise the value correctly rounded (ties to even) to
/// `PRECISION` fractional digits; trailing zeros removed either way.
fn positional_parts<T: Float>(x: T) -> Parts {
    let (digits, exp) = shortest_digits(x);
    let (int, frac) = if exp >= 0 {
        let e = exp as usize;
        if digits.len() > e + 1 {
            (digits[..=e].to_string(), digits[e + 1..].to_string())
        } else {
            // The digits stop before the units digit, so the value is an integer (its spacing
            // is at least 2). NumPy prints every integer digit of it exactly:
            // float32 40239872 is `40239872.`, not `40239870.`.
            (format!("{:.0}", x.abs()), String::new())
        }
    } else {
        let zeros = "0".repeat(exp.unsigned_abs() as usize - 1);
        ("0".to_string(), format!("{zeros}{digits}"))
    };
    if frac.len() <= PRECISION {
        return Parts {
            int: format!("{}{int}", sign_of(x)),
            frac,
            exp: 0,
        };
    }
    let rounded = format!("{x:.PRECISION$}");
    let (int, frac) = rounded.split_once('.').unwrap_or((&rounded, ""));
    Parts {
        int: int.to_string(),
        frac: trim_zeros(frac),
        exp: 0,
    }
}

/// Scientific digits, chosen like [`positional_parts`] but for the mantissa.
fn scientific_parts<T: Float>(x: T) -> Parts {
    let (digits, exp) = shortest_digits(x);
    if digits.len() - 1 <= PRECISION {
        return Parts {
            int: format!("{}{}", sign_of(x), &digits[..1]),
            frac: digits[1..].to_string(),
            exp,
        };
    }
    let mut rounded = split_scientific(&format!("{x:.PRECISION$e}"));
    rounded.frac = trim_zeros(&rounded.frac);
    rounded
}

/// Formats floats NumPy-style (`FloatingFormat` in `maxprec` mode): all strings share one width.
fn format_floats<T: Float>(values: &[T]) -> Vec<String> {
    let finite: Vec<T> = values.iter().copied().filter(|x| x.is_finite()).collect();

    // Choose scientific notation from the finite nonzero magnitudes, compared in the dtype.
    let mut range: Option<(T, T)> = None;
    for a in finite.iter().map(|x| x.abs()).filter(|&a| a != T::ZERO) {
        range = Some(match range {
            None => (a, a),
            Some((lo, hi)) => (if a < lo { a } else { lo }, if a > hi { a } else { hi }),
        });
    }
    let exp_format = range
        .is_some_and(|(lo, hi)| hi >= T::EXP_MAX || lo < T::EXP_MIN || hi.div(lo) > T::EXP_RATIO);

    let mut parts: Vec<Option<Parts>> = values
        .iter()
        .map(|&x| {
            if !x.is_finite() {
                None
            } else if exp_format {
                Some(scientific_parts(x))
            } else {
                Some(positional_parts(x))
            }
        })
        .collect();

    let frac_len = parts
        .iter()
        .flatten()
        .map(|p| p.frac.len())
        .max()
        .unwrap_or(0);
    if exp_format {
        // Every mantissa gets `frac_len` fractional digits. Shorter ones are extended with the
        // value's own further digits, correctly rounded (not with zeros: float32 `0.1` next to a
        // value needing 8 digits prints `1.00000001e-01`, and subnormals show their true digits).
        for (&x, p) in values.iter().zip(parts.iter_mut()) {
            if let Some(p) = p {
                if p.frac.len() < frac_len {
                    *p = split_scientific(&format!("{x:.frac_len$e}"));
                }
            }
        }
    }
    let finite_parts = || parts.iter().flatten();
    let mut pad_left = finite_parts().map(|p| p.int.len()).max().unwrap_or(0);
    // Exponent digits, at least two.
    let exp_size = finite_parts()
        .map(|p| p.exp.unsigned_abs().to_string().len().max(2))
        .max()
        .unwrap_or(2);
    let pad_right = if exp_format {
        exp_size + 2 + frac_len // `e`, sign, digits and the mantissa's fraction
    } else {
        frac_len
    };
    if finite.len() != values.len() {
        // Widen for `nan`, `inf` or `-inf` (one column is the decimal point).
        let neg_inf = values
            .iter()
            .any(|&x| !x.is_finite() && !x.is_nan() && x < T::ZERO);
        let offset = pad_right + 1;
        let widest: usize = if neg_inf { 4 } else { 3 };
        pad_left = pad_left.max(widest.saturating_sub(offset));
    }
    let total = pad_left + pad_right + 1;

    values
        .iter()
        .zip(&parts)
        .map(|(&x, p)| match p {
            None => {
                let text = if x.is_nan() {
                    "nan"
                } else if x > T::ZERO {
                    "inf"
                } else {
                    "-inf"
                };
                format!("{text:>total$}")
            }
            Some(p) if exp_format => {
                let sign = if p.exp < 0 { '-' } else { '+' };
                format!(
                    "{:>pad_left$}.{}e{sign}{:0>exp_size$}",
                    p.int,
                    p.frac,
                    p.exp.unsigned_abs()
                )
            }
            Some(p) => format!("{:>pad_left$}.{:<pad_right$}", p.int, p.frac),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! The expected strings follow NumPy's `repr` of the same arrays under its default print
    //! options (NumPy 2.x, with the `1e8` scientific cutoff for every float dtype), with `array(`
    //! spelled `Tensor(` (continuation lines sit one column further right), the dtype always
    //! appended and a rank-0 `True` padded like any other.

    use super::*;
    use std::sync::Arc;

    fn f64s(shape: &[usize], v: &[f64]) -> String {
        format_tensor(shape, &HostData::F64(Arc::from(v)))
    }

    fn f32s(shape: &[usize], v: &[f32]) -> String {
        format_tensor(shape, &HostData::F32(Arc::from(v)))
    }

    fn bools(shape: &[usize], v: &[bool]) -> String {
        format_tensor(shape, &HostData::Bool(Arc::from(v)))
    }

    fn arange(n: usize) -> Vec<f64> {
        (0..n).map(|i| i as f64).collect()
    }

    #[test]
    fn spec_examples() {
        assert_eq!(
            f64s(&[], &[0.9379222653395013]),
            "Tensor(0.93792227, dtype=float64)"
        );
        assert_eq!(
            f64s(&[3], &[0.0, 1f64.sin(), 2f64.sin()]),
            "Tensor([0.        , 0.84147098, 0.90929743], dtype=float64)"
        );
        assert_eq!(
            f64s(&[2, 3], &[1., 2., 3., 4., 5., 6.]),
            "Tensor([[1., 2., 3.],
        [4., 5., 6.]], dtype=float64)"
        );
        assert_eq!(
            f64s(&[], &[6.49246356e-14]),
            "Tensor(6.49246356e-14, dtype=float64)"
        );
        assert_eq!(
            f32s(&[3], &[1.0, 2.0, 3.0]),
            "Tensor([1., 2., 3.], dtype=float32)"
        );
        assert_eq!(f64s(&[], &[6.0]), "Tensor(6., dtype=float64)");
        assert_eq!(
            f64s(&[], &[2.1266666666666665]),
            "Tensor(2.12666667, dtype=float64)"
        );
        assert_eq!(
            f64s(&[2], &[0.0, 1.3817732906760363]),
            "Tensor([0.        , 1.38177329], dtype=float64)"
        );
        assert_eq!(
            f32s(&[], &[0.07218059]),
            "Tensor(0.07218059, dtype=float32)"
        );
        assert_eq!(
            f32s(&[], &[1.4142136e20]),
            "Tensor(1.4142136e+20, dtype=float32)"
        );
        assert_eq!(
            f32s(&[2], &[0.70710677, 0.70710677]),
            "Tensor([0.70710677, 0.70710677], dtype=float32)"
        );
    }

    #[test]
    fn booleans() {
        assert_eq!(
            bools(&[3], &[false, true, false]),
            "Tensor([False,  True, False], dtype=bool)"
        );
        assert_eq!(
            bools(&[3], &[true, false, true]),
            "Tensor([ True, False,  True], dtype=bool)"
        );
        // Unlike NumPy's `array(True)`, a rank-0 `True` keeps its padding (numerics.md §11).
        assert_eq!(bools(&[], &[true]), "Tensor( True, dtype=bool)");
        assert_eq!(bools(&[], &[false]), "Tensor(False, dtype=bool)");
        assert_eq!(
            bools(&[2, 2], &[true, true, false, true]),
            "Tensor([[ True,  True],
        [False,  True]], dtype=bool)"
        );
    }

    #[test]
    fn positional_digits_and_padding() {
        assert_eq!(f64s(&[2], &[1.0, 2.0]), "Tensor([1., 2.], dtype=float64)");
        assert_eq!(
            f64s(&[4], &[1.0, 1.25, 1.5, 1.75]),
            "Tensor([1.  , 1.25, 1.5 , 1.75], dtype=float64)"
        );
        assert_eq!(
            f64s(&[2], &[-1.0, 2.0]),
            "Tensor([-1.,  2.], dtype=float64)"
        );
        assert_eq!(f64s(&[], &[-0.0]), "Tensor(-0., dtype=float64)");
        assert_eq!(f64s(&[], &[0.0]), "Tensor(0., dtype=float64)");
        assert_eq!(f64s(&[], &[1e-4]), "Tensor(0.0001, dtype=float64)");
        assert_eq!(f64s(&[], &[99999999.0]), "Tensor(99999999., dtype=float64)");
        assert_eq!(
            f64s(&[], &[std::f64::consts::PI]),
            "Tensor(3.14159265, dtype=float64)"
        );
        // Rounding to 8 fractional digits carries into the integer part.
        assert_eq!(f64s(&[], &[0.999999999]), "Tensor(1., dtype=float64)");
        // The exact binary value is rounded, ties to even.
        assert_eq!(
            f64s(&[2], &[0.001953125, 0.5]),
            "Tensor([0.00195312, 0.5       ], dtype=float64)"
        );
    }

    #[test]
    fn float32_digits() {
        assert_eq!(f32s(&[], &[0.1]), "Tensor(0.1, dtype=float32)");
        assert_eq!(
            f32s(&[3], &[0.1, 0.2, 0.3]),
            "Tensor([0.1, 0.2, 0.3], dtype=float32)"
        );
        assert_eq!(f32s(&[], &[1234.5677]), "Tensor(1234.5677, dtype=float32)");
        assert_eq!(f32s(&[], &[1.0 / 3.0]), "Tensor(0.33333334, dtype=float32)");
        // The same values widened to float64, rounded to 8 fractional digits.
        assert_eq!(f64s(&[], &[0.1f32 as f64]), "Tensor(0.1, dtype=float64)");
        assert_eq!(
            f64s(&[], &[(1.0f32 / 3.0) as f64]),
            "Tensor(0.33333334, dtype=float64)"
        );
        // Two shortest candidates equally close: the even last digit wins (1.36328125).
        assert_eq!(
            f32s(&[3], &[-1.3632812, 3.6328125, 0.24414062]),
            "Tensor([-1.3632812 ,  3.6328125 ,  0.24414062], dtype=float32)"
        );
        // Nine significant digits, cut to eight fractional ones.
        assert_eq!(
            f32s(&[2], &[0.1, 0.102264374]),
            "Tensor([0.1       , 0.10226437], dtype=float32)"
        );
        // Scientific mantissas are extended with the value's own digits.
        assert_eq!(
            f32s(&[2], &[0.1, 120470.805]),
            "Tensor([1.00000001e-01, 1.20470805e+05], dtype=float32)"
        );
        // Every integer digit is printed, even past the shortest digits (`4.023987e7`).
        assert_eq!(
            f32s(&[2], &[40239872.0, 1.5e7]),
            "Tensor([40239872., 15000000.], dtype=float32)"
        );
        // The cutoffs compare in float32: float32 1e-4 is not below float32 1e-4.
        assert_eq!(f32s(&[], &[1e-4]), "Tensor(0.0001, dtype=float32)");
        assert_eq!(f32s(&[], &[1e7]), "Tensor(10000000., dtype=float32)");
        assert_eq!(f32s(&[], &[1e8]), "Tensor(1.e+08, dtype=float32)");
    }

    #[test]
    fn scientific() {
        assert_eq!(
            f64s(&[2], &[1e-5, 1.0]),
            "Tensor([1.e-05, 1.e+00], dtype=float64)"
        );
        assert_eq!(
            f64s(&[2], &[1e-5, 1.5]),
            "Tensor([1.0e-05, 1.5e+00], dtype=float64)"
        );
        assert_eq!(f64s(&[], &[1e8]), "Tensor(1.e+08, dtype=float64)");
        assert_eq!(f64s(&[], &[1e-5]), "Tensor(1.e-05, dtype=float64)");
        assert_eq!(
            f64s(&[2], &[1.0, 1001.0]),
            "Tensor([1.000e+00, 1.001e+03], dtype=float64)"
        );
        assert_eq!(
            f64s(&[2], &[1.0, 1000.0]),
            "Tensor([   1., 1000.], dtype=float64)"
        );
        assert_eq!(
            f64s(&[3], &[0.25, 22.5, -333.0]),
            "Tensor([ 2.50e-01,  2.25e+01, -3.33e+02], dtype=float64)"
        );
        assert_eq!(
            f64s(&[3], &[1e-300, 1e300, 0.0]),
            "Tensor([1.e-300, 1.e+300, 0.e+000], dtype=float64)"
        );
        assert_eq!(
            f64s(&[2], &[-1e-5, 2.0]),
            "Tensor([-1.e-05,  2.e+00], dtype=float64)"
        );
        assert_eq!(
            f64s(&[2], &[1e-5, -0.0]),
            "Tensor([ 1.e-05, -0.e+00], dtype=float64)"
        );
        assert_eq!(
            f64s(&[2], &[1.234567885e-10, 1.0]),
            "Tensor([1.23456789e-10, 1.00000000e+00], dtype=float64)"
        );
        // Mantissa rounding carries into the exponent.
        assert_eq!(
            f64s(&[], &[9.9999999999e9]),
            "Tensor(1.e+10, dtype=float64)"
        );
        // A subnormal shows its own digits, not zeros, when mantissas are extended.
        assert_eq!(
            f64s(&[2], &[5e-324, 1.5]),
            "Tensor([4.9e-324, 1.5e+000], dtype=float64)"
        );
    }

    #[test]
    fn non_finite() {
        assert_eq!(f64s(&[], &[f64::NAN]), "Tensor(nan, dtype=float64)");
        assert_eq!(
            f64s(&[], &[f64::NEG_INFINITY]),
            "Tensor(-inf, dtype=float64)"
        );
        assert_eq!(f32s(&[], &[f32::INFINITY]), "Tensor(inf, dtype=float32)");
        assert_eq!(
            f64s(&[2], &[1.0, f64::NAN]),
            "Tensor([ 1., nan], dtype=float64)"
        );
        assert_eq!(
            f64s(&[2], &[0.0, f64::NAN]),
            "Tensor([ 0., nan], dtype=float64)"
        );
        assert_eq!(
            f64s(&[3], &[f64::NAN, f64::INFINITY, f64::NEG_INFINITY]),
            "Tensor([ nan,  inf, -inf], dtype=float64)"
        );
        assert_eq!(
            f64s(&[2], &[f64::NAN, f64::INFINITY]),
            "Tensor([nan, inf], dtype=float64)"
        );
        assert_eq!(
            f64s(&[3], &[0.5, f64::NEG_INFINITY, 1e-5]),
            "Tensor([5.e-01,   -inf, 1.e-05], dtype=float64)"
        );
        assert_eq!(
            f64s(&[3], &[0.25, f64::INFINITY, -2.0]),
            "Tensor([ 0.25,   inf, -2.  ], dtype=float64)"
        );
        assert_eq!(
            f32s(&[2, 2], &[f32::NAN, 1.5, f32::NEG_INFINITY, 2e-3]),
            "Tensor([[  nan, 1.5  ],
        [ -inf, 0.002]], dtype=float32)"
        );
    }

    #[test]
    fn higher_rank() {
        assert_eq!(
            f64s(&[2, 1], &[3., 6.]),
            "Tensor([[3.],
        [6.]], dtype=float64)"
        );
        assert_eq!(
            f64s(&[2, 2, 2], &arange(8)),
            "Tensor([[[0., 1.],
         [2., 3.]],

        [[4., 5.],
         [6., 7.]]], dtype=float64)"
        );
        assert_eq!(
            f64s(&[2, 3, 4], &arange(24)),
            "Tensor([[[ 0.,  1.,  2.,  3.],
         [ 4.,  5.,  6.,  7.],
         [ 8.,  9., 10., 11.]],

        [[12., 13., 14., 15.],
         [16., 17., 18., 19.],
         [20., 21., 22., 23.]]], dtype=float64)"
        );
        assert_eq!(
            f64s(&[1, 1, 1, 1], &[1.5]),
            "Tensor([[[[1.5]]]], dtype=float64)"
        );
        assert_eq!(
            f64s(&[2, 1, 1, 2], &[1., 2., 3., 4.]),
            "Tensor([[[[1., 2.]]],


        [[[3., 4.]]]], dtype=float64)"
        );
    }

    #[test]
    fn wrapping() {
        assert_eq!(
            f64s(&[20], &arange(20)),
            "Tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12.,
        13., 14., 15., 16., 17., 18., 19.], dtype=float64)"
        );
        let v: Vec<f64> = (0..10).map(|i| (i as f64).sin()).collect();
        assert_eq!(
            f64s(&[10], &v),
            "Tensor([ 0.        ,  0.84147098,  0.90929743,  0.14112001, -0.7568025 ,
        -0.95892427, -0.2794155 ,  0.6569866 ,  0.98935825,  0.41211849],
       dtype=float64)"
        );
        let v: Vec<f64> = (0..24).map(|i| i as f64 * 0.5).collect();
        assert_eq!(
            f64s(&[2, 12], &v),
            "Tensor([[ 0. ,  0.5,  1. ,  1.5,  2. ,  2.5,  3. ,  3.5,  4. ,  4.5,
          5. ,  5.5],
        [ 6. ,  6.5,  7. ,  7.5,  8. ,  8.5,  9. ,  9.5, 10. , 10.5,
         11. , 11.5]], dtype=float64)"
        );
    }

    #[test]
    fn dtype_moves_to_a_new_line_when_it_does_not_fit() {
        assert_eq!(
            f64s(&[6], &[0.12345678, 0.2, 0.3, 0.4, 0.5, 0.6]),
            "Tensor([0.12345678, 0.2       , 0.3       , 0.4       , 0.5       ,
        0.6       ], dtype=float64)"
        );
        assert_eq!(
            f64s(&[5], &[0.12345678, 0.2, 0.3, 0.4, 0.5]),
            "Tensor([0.12345678, 0.2       , 0.3       , 0.4       , 0.5       ],
       dtype=float64)"
        );
    }

    #[test]
    fn summarized() {
        assert_eq!(
            f64s(&[2000], &arange(2000)),
            "Tensor([0.000e+00, 1.000e+00, 2.000e+00, ..., 1.997e+03, 1.998e+03,
        1.999e+03], dtype=float64)"
        );
        let v: Vec<f64> = (0..1001).map(|i| i as f64 * 0.5).collect();
        assert_eq!(
            f64s(&[1001], &v),
            "Tensor([  0. ,   0.5,   1. , ..., 499. , 499.5, 500. ], dtype=float64)"
        );
        // Exactly the threshold is printed in full.
        let full = f64s(&[1000], &arange(1000));
        assert!(!full.contains("..."));
        assert!(full.starts_with(
            "Tensor([  0.,   1.,   2.,   3.,   4.,   5.,   6.,   7.,   8.,   9.,  10.,
         11.,  12.,"
        ));
        assert!(full.ends_with(
            "
        990., 991., 992., 993., 994., 995., 996., 997., 998., 999.],
       dtype=float64)"
        ));
        assert_eq!(full.lines().count(), 92);

        assert_eq!(
            f64s(&[50, 50], &arange(2500)),
            "Tensor([[0.000e+00, 1.000e+00, 2.000e+00, ..., 4.700e+01, 4.800e+01,
         4.900e+01],
        [5.000e+01, 5.100e+01, 5.200e+01, ..., 9.700e+01, 9.800e+01,
         9.900e+01],
        [1.000e+02, 1.010e+02, 1.020e+02, ..., 1.470e+02, 1.480e+02,
         1.490e+02],
        ...,
        [2.350e+03, 2.351e+03, 2.352e+03, ..., 2.397e+03, 2.398e+03,
         2.399e+03],
        [2.400e+03, 2.401e+03, 2.402e+03, ..., 2.447e+03, 2.448e+03,
         2.449e+03],
        [2.450e+03, 2.451e+03, 2.452e+03, ..., 2.497e+03, 2.498e+03,
         2.499e+03]], dtype=float64)"
        );
        // Only the displayed entries decide the format: the hidden 1e300 does not force
        // scientific notation.
        let v: Vec<f64> = (0..1002)
            .map(|i| if i == 250 { 1e300 } else { 1.0 })
            .collect();
        assert_eq!(
            f64s(&[2, 501], &v),
            "Tensor([[1., 1., 1., ..., 1., 1., 1.],
        [1., 1., 1., ..., 1., 1., 1.]], dtype=float64)"
        );
        // Axes of at most 6 entries are shown whole.
        let v: Vec<f64> = (0..1200).map(|i| i as f64 * 0.25).collect();
        assert_eq!(
            f64s(&[2, 3, 200], &v),
            "Tensor([[[0.0000e+00, 2.5000e-01, 5.0000e-01, ..., 4.9250e+01,
          4.9500e+01, 4.9750e+01],
         [5.0000e+01, 5.0250e+01, 5.0500e+01, ..., 9.9250e+01,
          9.9500e+01, 9.9750e+01],
         [1.0000e+02, 1.0025e+02, 1.0050e+02, ..., 1.4925e+02,
          1.4950e+02, 1.4975e+02]],

        [[1.5000e+02, 1.5025e+02, 1.5050e+02, ..., 1.9925e+02,
          1.9950e+02, 1.9975e+02],
         [2.0000e+02, 2.0025e+02, 2.0050e+02, ..., 2.4925e+02,
          2.4950e+02, 2.4975e+02],
         [2.5000e+02, 2.5025e+02, 2.5050e+02, ..., 2.9925e+02,
          2.9950e+02, 2.9975e+02]]], dtype=float64)"
        );
        let v: Vec<bool> = (0..1120).map(|i| i % 4 == 0).collect();
        assert_eq!(
            bools(&[7, 2, 80], &v),
            "Tensor([[[ True, False, False, ..., False, False, False],
         [ True, False, False, ..., False, False, False]],

        [[ True, False, False, ..., False, False, False],
         [ True, False, False, ..., False, False, False]],

        [[ True, False, False, ..., False, False, False],
         [ True, False, False, ..., False, False, False]],

        ...,

        [[ True, False, False, ..., False, False, False],
         [ True, False, False, ..., False, False, False]],

        [[ True, False, False, ..., False, False, False],
         [ True, False, False, ..., False, False, False]],

        [[ True, False, False, ..., False, False, False],
         [ True, False, False, ..., False, False, False]]], dtype=bool)"
        );
    }

    #[test]
    fn summarized_reads_only_displayed_entries() {
        let layout = Layout::new(&[3, 400]);
        let offsets = layout.shown_offsets();
        assert_eq!(offsets.len(), 18);
        assert_eq!(&offsets[..6], &[0, 1, 2, 397, 398, 399]);
        assert_eq!(&offsets[12..], &[800, 801, 802, 1197, 1198, 1199]);
        assert_eq!(Layout::new(&[2, 3]).shown_offsets(), vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(Layout::new(&[]).shown_offsets(), vec![0]);
    }

    #[test]
    fn empty() {
        assert_eq!(f64s(&[0], &[]), "Tensor([], dtype=float64)");
        assert_eq!(
            f32s(&[0, 3], &[]),
            "Tensor([], shape=[0, 3], dtype=float32)"
        );
    }

    #[test]
    fn tracer() {
        assert_eq!(
            format_tracer(0, &[2], DType::F32),
            "TraceTensor(node_id=0, shape=[2], dtype=float32)"
        );
        assert_eq!(
            format_tracer(3, &[2, 3], DType::F64),
            "TraceTensor(node_id=3, shape=[2, 3], dtype=float64)"
        );
        assert_eq!(
            format_tracer(7, &[], DType::Bool),
            "TraceTensor(node_id=7, shape=[], dtype=bool)"
        );
    }
}
