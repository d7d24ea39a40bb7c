//! Small, allocation-aware readers of JSON pieces, built on serde_json's borrowed raw values.
//!
//! The header is never turned into a generic JSON tree: a `serde_json::Value` takes tens of
//! bytes per element of text such as `[1,1,1]`, far more than the file. Instead each object is
//! read into borrowed slices of the header text (`&RawValue`, no copy) for the fields it may
//! have, and each field is then read with the exact type it must have. Containers are counted
//! before their element vector is allocated, and every reader below works on a fresh
//! deserializer over one value, so serde_json's own recursion stays one or two levels deep;
//! the tree's nesting is bounded by the reader's depth limit instead.

use serde::de::{
    self, DeserializeSeed, Deserializer as _, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde_json::value::RawValue;
use std::fmt;

/// A serde_json failure, with the byte offset in the parsed text where it happened.
pub(crate) struct JsonError {
    pub message: String,
    pub offset: usize,
    /// Whether the text is not JSON at all (rather than JSON of the wrong shape).
    pub syntax: bool,
}

impl JsonError {
    fn new(text: &str, error: serde_json::Error) -> JsonError {
        let full = error.to_string();
        // serde_json appends " at line L column C"; the caller reports a byte offset instead.
        let message = match full.rfind(" at line ") {
            Some(i) if error.line() > 0 => full[..i].to_owned(),
            _ => full,
        };
        JsonError {
            message,
            offset: byte_index(text, error.line(), error.column()),
            syntax: matches!(
                error.classify(),
                serde_json::error::Category::Syntax | serde_json::error::Category::Eof
            ),
        }
    }
}

/// The byte index of a serde_json (line, column) position in `text` (both 1-based; line 0
/// means no position).
fn byte_index(text: &str, line: usize, column: usize) -> usize {
    if line == 0 {
        return 0;
    }
    let mut start = 0;
    for _ in 1..line {
        match text.get(start..).and_then(|rest| rest.find('\n')) {
            Some(i) => start += i + 1,
            None => break,
        }
    }
    start
        .saturating_add(column.saturating_sub(1))
        .min(text.len())
}

/// Runs `f` on a deserializer over `text` and checks that nothing but whitespace follows the
/// value.
fn parse<'h, T>(
    text: &'h str,
    f: impl FnOnce(
        &mut serde_json::Deserializer<serde_json::de::StrRead<'h>>,
    ) -> Result<T, serde_json::Error>,
) -> Result<T, JsonError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = f(&mut de).map_err(|e| JsonError::new(text, e))?;
    de.end().map_err(|e| JsonError::new(text, e))?;
    Ok(value)
}

/// The fields of a JSON object among `names`, as borrowed raw values, plus the first field
/// name not among them (kept so that the caller can decide which error comes first).
pub(crate) struct Fields<'h, const N: usize> {
    pub values: [Option<&'h RawValue>; N],
    pub unknown: Option<String>,
}

/// Reads the object `text` into [`Fields`]; a repeated field is an error.
pub(crate) fn fields<'h, const N: usize>(
    text: &'h str,
    names: &'static [&'static str; N],
) -> Result<Fields<'h, N>, JsonError> {
    parse(text, |de| de.deserialize_map(FieldsVisitor { names }))
}

struct FieldsVisitor<const N: usize> {
    names: &'static [&'static str; N],
}

impl<'de, const N: usize> Visitor<'de> for FieldsVisitor<N> {
    type Value = Fields<'de, N>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Fields {
            values: [None; N],
            unknown: None,
        };
        while let Some(field) = map.next_key_seed(FieldName { names: self.names })? {
            match field {
                FieldKey::Known(i) => {
                    let slot = out
                        .values
                        .get_mut(i)
                        .ok_or_else(|| de::Error::custom("field index out of range"))?;
                    if slot.is_some() {
                        let name = self.names.get(i).copied().unwrap_or("?");
                        return Err(de::Error::custom(format_args!(
                            "duplicate field \"{name}\""
                        )));
                    }
                    *slot = Some(map.next_value::<&'de RawValue>()?);
                }
                FieldKey::Unknown(name) => {
                    map.next_value::<IgnoredAny>()?;
                    if out.unknown.is_none() {
                        out.unknown = Some(name);
                    }
                }
            }
        }
        Ok(out)
    }
}

enum FieldKey {
    Known(usize),
    Unknown(String),
}

/// Matches a field name against the known names without allocating for them.
struct FieldName<const N: usize> {
    names: &'static [&'static str; N],
}

impl<'de, const N: usize> DeserializeSeed<'de> for FieldName<N> {
    type Value = FieldKey;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<FieldKey, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, const N: usize> Visitor<'de> for FieldName<N> {
    type Value = FieldKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<FieldKey, E> {
        Ok(match self.names.iter().position(|&n| n == s) {
            Some(i) => FieldKey::Known(i),
            None => FieldKey::Unknown(snippet(s)),
        })
    }
}

/// Calls `f` with the text of the JSON string `text` (unescaped; borrowed when it has no
/// escapes), or fails when `text` is not a string.
pub(crate) fn with_str<T>(text: &str, f: impl FnOnce(&str) -> T) -> Result<T, JsonError> {
    parse(text, |de| de.deserialize_str(StrVisitor(f)))
}

struct StrVisitor<F>(F);

impl<'de, T, F: FnOnce(&str) -> T> Visitor<'de> for StrVisitor<F> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
        Ok((self.0)(s))
    }
}

/// The JSON string `text` as an owned string of exactly its length.
pub(crate) fn string(text: &str) -> Result<String, JsonError> {
    with_str(text, str::to_owned)
}

/// The JSON boolean `text`.
pub(crate) fn boolean(text: &str) -> Result<bool, JsonError> {
    parse(text, |de| <bool as serde::Deserialize>::deserialize(de))
}

/// The non-negative JSON integer `text` (floats, negative numbers and numbers beyond u64 are
/// errors).
pub(crate) fn uint(text: &str) -> Result<u64, JsonError> {
    parse(text, |de| de.deserialize_u64(UintVisitor))
}

struct UintVisitor;

impl Visitor<'_> for UintVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a non-negative integer")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }
}

/// The elements of the JSON array `text` as borrowed raw values.
///
/// The vector grows by doubling; each element takes 16 bytes and has at least 16 bytes of
/// text (`{"type":"none"}` and a comma), so it never holds more than twice the text.
pub(crate) fn items(text: &str) -> Result<Vec<&RawValue>, JsonError> {
    parse(text, |de| de.deserialize_seq(ItemsVisitor))
}

struct ItemsVisitor;

impl<'de> Visitor<'de> for ItemsVisitor {
    type Value = Vec<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(item) = seq.next_element::<&'de RawValue>()? {
            out.try_reserve(1)
                .map_err(|_| de::Error::custom("out of memory for the items"))?;
            out.push(item);
        }
        Ok(out)
    }
}

/// The two elements of the JSON array `text`, which must have exactly two.
pub(crate) fn pair(text: &str) -> Result<(&RawValue, &RawValue), JsonError> {
    parse(text, |de| de.deserialize_seq(PairVisitor))
}

struct PairVisitor;

impl<'de> Visitor<'de> for PairVisitor {
    type Value = (&'de RawValue, &'de RawValue);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a [key, node] pair")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let key = seq
            .next_element::<&'de RawValue>()?
            .ok_or_else(|| de::Error::invalid_length(0, &self))?;
        let node = seq
            .next_element::<&'de RawValue>()?
            .ok_or_else(|| de::Error::invalid_length(1, &self))?;
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(de::Error::invalid_length(3, &self));
        }
        Ok((key, node))
    }
}

/// The elements of the JSON array `text` of at most `max` non-negative integers.
pub(crate) fn uint_list(text: &str, max: usize) -> Result<Vec<u64>, JsonError> {
    parse(text, |de| de.deserialize_seq(UintListVisitor { max }))
}

struct UintListVisitor {
    max: usize,
}

impl<'de> Visitor<'de> for UintListVisitor {
    type Value = Vec<u64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a list of at most {} non-negative integers", self.max)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u64>, A::Error> {
        let mut out = Vec::new();
        while let Some(raw) = seq.next_element::<&'de RawValue>()? {
            if out.len() == self.max {
                return Err(de::Error::custom(format_args!(
                    "more than {} axes",
                    self.max
                )));
            }
            let value = uint(raw.get()).map_err(|_| {
                de::Error::custom(format_args!(
                    "extent {} is not a non-negative integer",
                    snippet(raw.get())
                ))
            })?;
            out.push(value);
        }
        Ok(out)
    }
}

/// At most the first 40 characters of `text`, for messages.
pub(crate) fn snippet(text: &str) -> String {
    const MAX: usize = 40;
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

/// The byte offset of `inner` within `outer`, when `inner` is a slice of it.
pub(crate) fn offset_in(outer: &str, inner: &str) -> usize {
    let start = outer.as_ptr() as usize;
    let at = inner.as_ptr() as usize;
    at.checked_sub(start)
        .filter(|&d| d <= outer.len())
        .unwrap_or(0)
}
