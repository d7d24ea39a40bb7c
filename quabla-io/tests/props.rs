//! Property tests of the format over random trees: round trips, and fuzzing of valid files
//! (every truncation, bit flips and byte overwrites, forged header lengths, forged array
//! fields, forged JSON). Each load runs with both readers, which must agree, never panics,
//! and never makes an allocation larger than `fuzz::alloc_limit` of the input length, as
//! measured by the counting allocator installed for this test binary.

use proptest::prelude::*;
use proptest::sample::Index;
use quabla_io::fuzz::{alloc_limit, AllocProbe, CountingAlloc};
use quabla_io::*;
use quabla_ir::HostData;
use std::sync::Arc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn leaf() -> impl Strategy<Value = Node> {
    prop_oneof![
        Just(Node::None),
        any::<bool>().prop_map(Node::Bool),
        any::<i64>().prop_map(Node::Int),
        any::<u64>().prop_map(|b| Node::Float(f64::from_bits(b))),
        prop_oneof![Just(-0.0), Just(5e-324), Just(f64::NEG_INFINITY)].prop_map(Node::Float),
        "\\PC{0,12}".prop_map(Node::Str),
        array(),
    ]
}

fn array() -> impl Strategy<Value = Node> {
    (prop::collection::vec(1usize..4, 0..4), 0u8..3, any::<u64>()).prop_map(
        |(shape, dtype, seed)| {
            let n: usize = shape.iter().product();
            let mut state = seed;
            let mut next = move || {
                state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                (state ^ (state >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9)
            };
            let data = match dtype {
                0 => HostData::F64((0..n).map(|_| f64::from_bits(next())).collect()),
                1 => HostData::F32((0..n).map(|_| f32::from_bits(next() as u32)).collect()),
                _ => HostData::Bool((0..n).map(|_| next() % 2 == 0).collect()),
            };
            Node::Array(Array::new(shape, data).unwrap())
        },
    )
}

fn tree() -> impl Strategy<Value = Node> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Node::List),
            prop::collection::vec(inner.clone(), 0..6).prop_map(Node::Tuple),
            prop::collection::vec((any::<bool>(), "[a-z]{0,3}", inner), 0..6).prop_map(|entries| {
                // Distinct keys: the entry index makes each one unique.
                Node::Dict(
                    entries
                        .into_iter()
                        .enumerate()
                        .map(|(i, (int_key, s, node))| {
                            let key = if int_key {
                                Key::Int(i as i64 - 3)
                            } else {
                                Key::Str(format!("{s}{i}"))
                            };
                            (key, node)
                        })
                        .collect(),
                )
            }),
        ]
    })
}

fn saved(tree: &Node) -> Vec<u8> {
    let mut bytes = Vec::new();
    write(tree, &mut bytes).unwrap();
    bytes
}

/// A reader that returns at most `step` bytes per call.
struct Trickle<'a> {
    data: &'a [u8],
    step: usize,
}

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.data.len()).min(self.step);
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// Loads `bytes` with both readers, checking that they agree and that no allocation exceeds
/// the limit for the input length.
fn load(bytes: &[u8]) -> Result<Node, IoError> {
    ALLOC.start();
    let from_slice = read_bytes(bytes);
    let slice_alloc = ALLOC.stop();
    ALLOC.start();
    let from_stream = read(&mut Trickle {
        data: bytes,
        step: 1 + bytes.len() % 61,
    });
    let stream_alloc = ALLOC.stop();
    let limit = alloc_limit(bytes.len());
    assert!(
        slice_alloc <= limit && stream_alloc <= limit,
        "allocations {slice_alloc} / {stream_alloc} for {} input bytes",
        bytes.len()
    );
    match (&from_slice, &from_stream) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("the readers disagree: {from_slice:?} vs {from_stream:?}"),
    }
    from_slice
}

/// The file with its header replaced by `edit` of it, and the length field fixed.
fn with_header(bytes: &[u8], edit: impl FnOnce(&str) -> String) -> Vec<u8> {
    let n = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[16..16 + n]).unwrap();
    let new_header = edit(header);
    let mut out = bytes[..8].to_vec();
    out.extend_from_slice(&(new_header.len() as u64).to_le_bytes());
    out.extend_from_slice(new_header.as_bytes());
    out.extend_from_slice(&bytes[16 + n..]);
    out
}

fn huge_number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|v| v.to_string()),
        Just("4611686018427387904".to_owned()),
        Just("18446744073709551615".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("-1".to_owned()),
        Just("1e300".to_owned()),
        (0u64..64).prop_map(|v| v.to_string()),
    ]
}

proptest! {
    #[test]
    fn trees_round_trip(tree in tree()) {
        let bytes = saved(&tree);
        prop_assert_eq!((16 + u64::from_le_bytes(bytes[8..16].try_into().unwrap())) % 8, 0);
        let back = load(&bytes).unwrap();
        prop_assert_eq!(&back, &tree);
        // Writing what was read gives the same bytes.
        prop_assert_eq!(saved(&back), bytes);
    }

    #[test]
    fn every_truncation_is_an_error(tree in tree(), cuts in prop::collection::vec(any::<Index>(), 24)) {
        let bytes = saved(&tree);
        let mut lengths: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len())).collect();
        lengths.extend([0, 7, 8, 15, 16, bytes.len() - 1]);
        for len in lengths.into_iter().filter(|&l| l < bytes.len()) {
            let e = load(&bytes[..len]).unwrap_err();
            prop_assert_eq!(e.format_kind(), Some(FormatErrorKind::Truncated), "{}", e);
        }
    }

    #[test]
    fn bit_flips_and_overwrites_never_panic(
        tree in tree(),
        edits in prop::collection::vec((any::<Index>(), any::<u8>(), any::<bool>()), 1..6),
    ) {
        let mut bytes = saved(&tree);
        for (at, value, flip) in edits {
            let i = at.index(bytes.len());
            if flip {
                bytes[i] ^= 1 << (value % 8);
            } else {
                bytes[i] = value;
            }
        }
        if let Err(e) = load(&bytes) {
            prop_assert!(e.format_kind().is_some(), "{}", e);
        }
    }

    #[test]
    fn forged_header_lengths_are_errors(tree in tree(), forged in any::<u64>(), near in -64i64..64) {
        let bytes = saved(&tree);
        let actual = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
        for value in [forged, actual.wrapping_add(near as u64), 1 << 62, u64::MAX] {
            let mut forged_bytes = bytes.clone();
            forged_bytes[8..16].copy_from_slice(&value.to_le_bytes());
            match load(&forged_bytes) {
                Ok(back) => prop_assert!(value == actual && back == tree),
                Err(e) => prop_assert!(e.format_kind().is_some(), "{}", e),
            }
        }
    }

    #[test]
    fn forged_array_fields_are_bounded(
        tree in tree(),
        field in prop_oneof![Just("\"nbytes\":"), Just("\"offset\":"), Just("\"shape\":[")],
        which in any::<Index>(),
        number in huge_number(),
    ) {
        let bytes = saved(&tree);
        let forged = with_header(&bytes, |header| {
            let spots: Vec<usize> = header.match_indices(field).map(|(i, _)| i + field.len()).collect();
            if spots.is_empty() {
                return header.to_owned();
            }
            let at = spots[which.index(spots.len())];
            let end = header[at..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(header.len(), |i| at + i);
            format!("{}{number}{}", &header[..at], &header[end..])
        });
        if let Err(e) = load(&forged) {
            prop_assert!(e.format_kind().is_some(), "{}", e);
        }
    }

    #[test]
    fn forged_json_never_panics(
        tree in tree(),
        start in any::<Index>(),
        len in 0usize..40,
        tokens in prop::collection::vec(
            prop_oneof![
                Just("{".to_owned()), Just("}".to_owned()), Just("[".to_owned()),
                Just("]".to_owned()), Just(",".to_owned()), Just(":".to_owned()),
                Just("\"type\"".to_owned()), Just("\"items\"".to_owned()),
                Just("\"array\"".to_owned()), Just("\"dict\"".to_owned()),
                Just("\"nbytes\"".to_owned()), Just("\"shape\"".to_owned()),
                Just("null".to_owned()), Just("\"\\ud800\"".to_owned()),
                huge_number(),
            ],
            0..12,
        ),
    ) {
        let bytes = saved(&tree);
        let forged = with_header(&bytes, |header| {
            let mut at = start.index(header.len() + 1).min(header.len());
            while !header.is_char_boundary(at) {
                at -= 1;
            }
            let mut end = (at + len).min(header.len());
            while !header.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}{}{}", &header[..at], tokens.concat(), &header[end.max(at)..])
        });
        if let Err(e) = load(&forged) {
            prop_assert!(e.format_kind().is_some(), "{}", e);
        }
    }
}

#[test]
fn a_node_is_four_words() {
    // The allocation bound relies on nodes being at most twice as large as the shortest
    // node text (16 bytes with its comma).
    assert!(std::mem::size_of::<Node>() <= 32);
}

#[test]
fn a_large_array_allocates_about_its_size() {
    let n = 1 << 16;
    let data: Arc<[f64]> = (0..n).map(|i| i as f64).collect();
    let tree = Node::Array(Array::new(vec![n], HostData::F64(data)).unwrap());
    let bytes = saved(&tree);
    ALLOC.start();
    let back = read_bytes(&bytes).unwrap();
    let largest = ALLOC.stop();
    assert_eq!(back, tree);
    // The decoded data (8 * n bytes plus the shared header) is the largest allocation.
    assert!(largest <= 8 * n + 64, "{largest}");
    assert!(largest >= 8 * n, "{largest}: the probe must see the array");
}
