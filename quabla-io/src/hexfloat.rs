//! Float text of the file format: Python's `float.hex()` spelling, written exactly and read in
//! every form `float.fromhex()` accepts, with correct rounding, so that every float64 bit
//! pattern except NaN payloads round-trips.

/// Python's `float.hex()` text of `x`: `0x1.8000000000000p+0` for 1.5, `0x0.0p+0` and
/// `-0x0.0p+0` for zeros, `0x0.0000000000001p-1022` for the smallest subnormal, `inf`,
/// `-inf` and `nan` (for every NaN).
pub fn to_hex(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    let sign = if x.is_sign_negative() { "-" } else { "" };
    if x.is_infinite() {
        return format!("{sign}inf");
    }
    if x == 0.0 {
        return format!("{sign}0x0.0p+0");
    }
    let bits = x.to_bits();
    let exponent_field = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1u64 << 52) - 1);
    // Subnormals print with a leading 0 and the minimum exponent, as Python does.
    let (lead, exponent) = if exponent_field == 0 {
        (0, -1022)
    } else {
        (1, exponent_field - 1023)
    };
    format!("{sign}0x{lead}.{fraction:013x}p{exponent:+}")
}

/// Why a float text was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HexFloatError {
    /// Not of the form `[sign] ['0x'] hexdigits ['.' hexdigits] ['p' [sign] digits]`,
    /// `[sign] inf`, `[sign] infinity` or `[sign] nan`.
    Syntax,
    /// A finite value too large for float64 (after rounding).
    Overflow,
}

/// Parses float text as Python's `float.fromhex()` does: surrounding ASCII whitespace, an
/// optional sign, `inf`/`infinity`/`nan` in any case, or a hexadecimal significand with an
/// optional `0x` prefix, any number of digits in either case, an optional point and an
/// optional binary exponent. The result is correctly rounded (to nearest, ties to even);
/// values below the subnormal range round to zero and values beyond float64 are
/// [`HexFloatError::Overflow`].
pub fn from_hex(text: &str) -> Result<f64, HexFloatError> {
    let s = text.trim_ascii();
    let (negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let signed = |x: f64| if negative { -x } else { x };
    if s.eq_ignore_ascii_case("inf") || s.eq_ignore_ascii_case("infinity") {
        return Ok(signed(f64::INFINITY));
    }
    if s.eq_ignore_ascii_case("nan") {
        return Ok(f64::NAN);
    }
    let s = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    let bytes = s.as_bytes();

    // The value is (mantissa + a sticky fraction) * 2^exp2, keeping the first 16 significant
    // hex digits (64 bits) exactly and remembering only whether any later digit is nonzero.
    let mut mantissa: u64 = 0;
    let mut kept = 0u32;
    let mut sticky = false;
    let mut exp2: i64 = 0;
    let mut digits = 0usize;
    let mut seen_point = false;
    let mut i = 0;
    while let Some(&c) = bytes.get(i) {
        if c == b'.' {
            if seen_point {
                return Err(HexFloatError::Syntax);
            }
            seen_point = true;
            i += 1;
            continue;
        }
        let Some(d) = hex_digit(c) else { break };
        digits += 1;
        i += 1;
        if mantissa == 0 && d == 0 {
            // A leading zero: it shifts the value only after the point.
            if seen_point {
                exp2 -= 4;
            }
            continue;
        }
        if kept < 16 {
            mantissa = (mantissa << 4) | u64::from(d);
            kept += 1;
            if seen_point {
                exp2 -= 4;
            }
        } else {
            sticky |= d != 0;
            if !seen_point {
                exp2 += 4;
            }
        }
    }
    if digits == 0 {
        return Err(HexFloatError::Syntax);
    }
    let rest = &bytes[i..];
    if let Some((&p, exponent)) = rest.split_first() {
        if p != b'p' && p != b'P' {
            return Err(HexFloatError::Syntax);
        }
        exp2 = exp2.saturating_add(parse_exponent(exponent)?);
    }
    if mantissa == 0 {
        return Ok(signed(0.0));
    }
    let bits = round_to_f64(mantissa, exp2, sticky)?;
    Ok(signed(f64::from_bits(bits)))
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// A decimal exponent with an optional sign, saturated far beyond any float64 exponent so
/// that absurd exponents still round to zero or overflow rather than wrap.
fn parse_exponent(text: &[u8]) -> Result<i64, HexFloatError> {
    let (negative, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() {
        return Err(HexFloatError::Syntax);
    }
    let mut value: i64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return Err(HexFloatError::Syntax);
        }
        value = (value * 10 + i64::from(c - b'0')).min(1 << 40);
    }
    Ok(if negative { -value } else { value })
}

/// The bits of the positive float64 nearest to `(mantissa + s) * 2^exp2`, where `mantissa > 0`
/// and `s` is a fraction in `(0, 1)` when `sticky`, else 0.
fn round_to_f64(mantissa: u64, exp2: i64, sticky: bool) -> Result<u64, HexFloatError> {
    // Normalize so that the top bit is set: value = m * 2^e with m in [2^63, 2^64), that is
    // 1.xxx * 2^(e + 63).
    let lz = mantissa.leading_zeros();
    let m = mantissa << lz;
    let unbiased = exp2.saturating_sub(i64::from(lz)).saturating_add(63);
    if unbiased > 1023 {
        return Err(HexFloatError::Overflow);
    }
    // Keep 53 bits for a normal result; fewer, in units of 2^-1074, for a subnormal one.
    let shift = if unbiased >= -1022 {
        11
    } else {
        (-1011i64).saturating_sub(unbiased)
    };
    if shift > 64 {
        // Below half the smallest subnormal: rounds to zero.
        return Ok(0);
    }
    let m = u128::from(m);
    let q = m >> shift;
    let rem = m & ((1u128 << shift) - 1);
    let half = 1u128 << (shift - 1);
    let round_up = rem > half || (rem == half && (sticky || q & 1 == 1));
    // q fits in 53 bits, plus one after rounding up.
    let mut q = (q as u64) + u64::from(round_up);
    if unbiased >= -1022 {
        let mut unbiased = unbiased;
        if q == 1 << 53 {
            q >>= 1;
            unbiased += 1;
        }
        if unbiased > 1023 {
            return Err(HexFloatError::Overflow);
        }
        // 1 <= unbiased + 1023 <= 2046 here.
        Ok(((unbiased + 1023) as u64) << 52 | (q & ((1 << 52) - 1)))
    } else {
        // A subnormal in units of 2^-1074; rounding up to 2^52 gives the smallest normal,
        // whose bits are exactly 2^52.
        Ok(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_spellings() {
        assert_eq!(to_hex(0.1), "0x1.999999999999ap-4");
        assert_eq!(to_hex(1.5), "0x1.8000000000000p+0");
        assert_eq!(to_hex(1.0), "0x1.0000000000000p+0");
        assert_eq!(to_hex(-2.0), "-0x1.0000000000000p+1");
        assert_eq!(to_hex(5e-324), "0x0.0000000000001p-1022");
        assert_eq!(to_hex(2.2250738585072014e-308), "0x1.0000000000000p-1022");
        assert_eq!(to_hex(2.225073858507201e-308), "0x0.fffffffffffffp-1022");
        assert_eq!(to_hex(f64::MAX), "0x1.fffffffffffffp+1023");
        assert_eq!(to_hex(0.0), "0x0.0p+0");
        assert_eq!(to_hex(-0.0), "-0x0.0p+0");
        assert_eq!(to_hex(f64::INFINITY), "inf");
        assert_eq!(to_hex(f64::NEG_INFINITY), "-inf");
        assert_eq!(to_hex(f64::NAN), "nan");
        assert_eq!(to_hex(-f64::NAN), "nan");
        assert_eq!(to_hex(1200.0), "0x1.2c00000000000p+10");
    }

    #[test]
    fn accepted_forms() {
        let cases: &[(&str, f64)] = &[
            ("0x1.8p0", 1.5),
            ("0X1.8P+0", 1.5),
            ("1.8p0", 1.5),
            ("0x1.8", 1.5),
            ("0x.8p1", 1.0),
            ("0x1.", 1.0),
            ("  0x1p0 \n", 1.0),
            ("+0x1p0", 1.0),
            ("-0x1p-1", -0.5),
            ("0xAbCp0", 2748.0),
            ("0x0.0p+0", 0.0),
            ("0x0000.0000p-99999999999999999999", 0.0),
            ("0x1p-1074", 5e-324),
            ("0x0.0000000000001p-1022", 5e-324),
            ("0x1.fffffffffffffp+1023", f64::MAX),
            ("0x10p0", 16.0),
            ("0x0.01p8", 1.0),
            ("0x00000000000000000000001p0", 1.0),
            ("Infinity", f64::INFINITY),
            ("-INF", f64::NEG_INFINITY),
            ("0x1p-99999999999999999999999", 0.0),
            ("1e5", 485.0),
        ];
        for &(text, expected) in cases {
            let got = from_hex(text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
            assert_eq!(got.to_bits(), expected.to_bits(), "{text}");
        }
        assert!(from_hex("nan").unwrap().is_nan());
        assert!(from_hex("-NaN").unwrap().is_nan());
        assert_eq!(from_hex("-0x0p0").unwrap().to_bits(), (-0.0f64).to_bits());
    }

    #[test]
    fn rounding_is_to_nearest_even() {
        let one_up = 1.0f64.next_up();
        // Exactly half an ulp above 1: ties to even (1.0).
        assert_eq!(from_hex("0x1.00000000000008p0").unwrap(), 1.0);
        // Half an ulp above 1 + ulp: ties to even (1 + 2 ulp).
        assert_eq!(from_hex("0x1.00000000000018p0").unwrap(), one_up.next_up());
        // Just above half an ulp, the excess seen only beyond 16 digits.
        assert_eq!(from_hex("0x1.000000000000080000000001p0").unwrap(), one_up);
        // Just below half an ulp.
        assert_eq!(from_hex("0x1.00000000000007ffffffffp0").unwrap(), 1.0);
        // Subnormal ties: half the smallest subnormal rounds to 0, a hair more to it.
        assert_eq!(from_hex("0x1p-1075").unwrap(), 0.0);
        assert_eq!(from_hex("0x1.0000000000000001p-1075").unwrap(), 5e-324);
        assert_eq!(from_hex("0x1.8p-1074").unwrap(), 1e-323);
        // Rounding up into the normal range.
        assert_eq!(
            from_hex("0x0.fffffffffffff8p-1022").unwrap(),
            2.2250738585072014e-308
        );
        // Rounding up to the next binade.
        assert_eq!(from_hex("0x1.fffffffffffff8p0").unwrap(), 2.0);
    }

    #[test]
    fn rejected_forms() {
        for text in [
            "", "0x", "0x.", "p0", "0x1p", "0x1p+", "0x1q0", "0x1.2.3", "0x1p0x", "--1", "0xg",
            "in", "nanx", "0x1 p0",
        ] {
            assert_eq!(from_hex(text), Err(HexFloatError::Syntax), "{text:?}");
        }
        for text in [
            "0x1p1024",
            "0x1.fffffffffffff8p+1023",
            "0x2p1023",
            "0x1p99999999999",
        ] {
            assert_eq!(from_hex(text), Err(HexFloatError::Overflow), "{text:?}");
        }
    }

    #[test]
    fn every_written_text_reads_back() {
        let specials = [
            0.0,
            -0.0,
            5e-324,
            -5e-324,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::MIN,
            1.0 / 3.0,
            std::f64::consts::PI,
        ];
        for x in specials {
            assert_eq!(from_hex(&to_hex(x)).unwrap().to_bits(), x.to_bits());
        }
    }
}
