//! The byte layout of the writer and every rejection of the reader (acceptance E67, errors.md
//! IO1-IO4). Each malformed file is read both from memory and as a stream, which must agree.

use quabla_io::*;
use quabla_ir::HostData;
use std::sync::Arc;

/// A file assembled by hand from a header text and data bytes, without any padding.
fn file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// A header around a tree's JSON.
fn with_tree(tree: &str) -> String {
    format!(r#"{{"format":"quabla","version":1,"tree":{tree}}}"#)
}

/// The error of loading `bytes`, checking that both readers give the same one.
fn error(bytes: &[u8]) -> IoError {
    let from_slice = read_bytes(bytes).expect_err("the file must be rejected");
    let from_stream = read(&mut &bytes[..]).expect_err("the stream must be rejected");
    assert_eq!(from_slice.to_string(), from_stream.to_string());
    assert_eq!(from_slice.format_kind(), from_stream.format_kind());
    from_slice
}

fn malformed(bytes: &[u8]) -> String {
    let e = error(bytes);
    assert_eq!(e.format_kind(), Some(FormatErrorKind::Malformed), "{e}");
    assert_eq!(e.kind(), ErrorKind::Format);
    e.to_string()
}

fn saved(tree: &Node) -> Vec<u8> {
    let mut bytes = Vec::new();
    write(tree, &mut bytes).unwrap();
    bytes
}

fn sample_tree() -> Node {
    Node::Dict(vec![
        (
            Key::from("w"),
            Node::Array(Array::new(vec![1, 2], HostData::F64(Arc::from([1.0, -0.0]))).unwrap()),
        ),
        (
            Key::from("m"),
            Node::Array(
                Array::new(vec![3], HostData::Bool(Arc::from([true, false, true]))).unwrap(),
            ),
        ),
        (Key::from("step"), Node::Int(1200)),
    ])
}

#[test]
fn byte_exact_layout() {
    let tree = Node::Dict(vec![
        (
            Key::from("x"),
            Node::Array(
                Array::new(vec![3], HostData::Bool(Arc::from([true, false, true]))).unwrap(),
            ),
        ),
        (
            Key::Int(-7),
            Node::Array(Array::new(vec![], HostData::F32(Arc::from([1.5f32]))).unwrap()),
        ),
    ]);
    let json = concat!(
        r#"{"format":"quabla","version":1,"tree":{"type":"dict","items":["#,
        r#"[{"type":"str","value":"x"},{"type":"array","dtype":"bool","shape":[3],"offset":0,"nbytes":3}],"#,
        r#"[{"type":"int","value":"-7"},{"type":"array","dtype":"float32","shape":[],"offset":8,"nbytes":4}]"#,
        r#"]}}"#
    );
    // 257 bytes of JSON and 7 spaces: 16 + 264 is a multiple of 8.
    assert_eq!(json.len(), 257);
    let mut expected: Vec<u8> = vec![0x93, 0x51, 0x55, 0x41, 0x42, 0x4C, 0x41, 0x0A];
    expected.extend_from_slice(&[0x08, 0x01, 0, 0, 0, 0, 0, 0]); // 264
    expected.extend_from_slice(json.as_bytes());
    expected.extend_from_slice(b"       ");
    expected.extend_from_slice(&[0x01, 0x00, 0x01, 0, 0, 0, 0, 0]); // bools, then padding
    expected.extend_from_slice(&[0x00, 0x00, 0xC0, 0x3F]); // 1.5f32, little-endian
    assert_eq!(saved(&tree), expected);
    assert_eq!(read_bytes(&expected).unwrap(), tree);
}

#[test]
fn scalars_are_written_as_the_spec_shows() {
    let tree = Node::List(vec![
        Node::None,
        Node::Bool(true),
        Node::Int(-42),
        Node::Float(1.5),
        Node::Float(-0.0),
        Node::Float(f64::NEG_INFINITY),
        Node::from("a\"b"),
        Node::Tuple(vec![]),
    ]);
    let bytes = saved(&tree);
    let n = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[16..16 + n]).unwrap();
    assert_eq!(
        header.trim_end(),
        with_tree(concat!(
            r#"{"type":"list","items":[{"type":"none"},{"type":"bool","value":true},"#,
            r#"{"type":"int","value":"-42"},{"type":"float","value":"0x1.8000000000000p+0"},"#,
            r#"{"type":"float","value":"-0x0.0p+0"},{"type":"float","value":"-inf"},"#,
            r#"{"type":"str","value":"a\"b"},{"type":"tuple","items":[]}]}"#
        ))
    );
    // No array: nothing follows the header.
    assert_eq!(bytes.len(), 16 + n);
}

#[test]
fn e67_header() {
    let raw = saved(&sample_tree());
    assert_eq!(&raw[..8], b"\x93QUABLA\n");
    let n = u64::from_le_bytes(raw[8..16].try_into().unwrap()) as usize;
    assert_eq!((16 + n) % 8, 0);
    let header: serde_json::Value = serde_json::from_slice(&raw[16..16 + n]).unwrap();
    assert_eq!(header["version"], 1);
    assert_eq!(header["format"], "quabla");
    // Arrays start at multiples of 8, and the file ends with the last one.
    assert_eq!(header["tree"]["items"][0][1]["offset"], 0);
    assert_eq!(header["tree"]["items"][1][1]["offset"], 16);
    assert_eq!(raw.len(), 16 + n + 16 + 3);
}

#[test]
fn e67_truncated_file() {
    let raw = saved(&sample_tree());
    let e = error(&raw[..raw.len() - 1]);
    assert_eq!(e.format_kind(), Some(FormatErrorKind::Truncated));
    assert_eq!(e.kind(), ErrorKind::Format);
    assert_eq!(
        e.to_string(),
        "truncated quabla file: tree.items[1][1] needs bytes 16..19 of the data section, \
         which starts at byte 344 and holds only 18 bytes"
    );
}

#[test]
fn every_truncation_is_reported_as_truncated() {
    for tree in [
        sample_tree(),
        Node::None,
        Node::List(vec![sample_tree(), Node::Float(0.5)]),
    ] {
        let raw = saved(&tree);
        for cut in 0..raw.len() {
            let e = error(&raw[..cut]);
            assert_eq!(
                e.format_kind(),
                Some(FormatErrorKind::Truncated),
                "cut at {cut}: {e}"
            );
            assert!(e.to_string().starts_with("truncated quabla file: "), "{e}");
        }
    }
}

#[test]
fn truncation_messages() {
    let raw = saved(&sample_tree());
    assert_eq!(
        error(&[]).to_string(),
        "truncated quabla file: the file is empty"
    );
    assert_eq!(
        error(&raw[..5]).to_string(),
        "truncated quabla file: the file ends after 5 bytes, inside the magic bytes"
    );
    assert_eq!(
        error(&raw[..12]).to_string(),
        "truncated quabla file: the file ends after 12 bytes, inside the header length (bytes 8 to 16)"
    );
    assert_eq!(
        error(&raw[..100]).to_string(),
        "truncated quabla file: the header length field says 328 bytes, but only 84 bytes follow it"
    );
}

#[test]
fn e67_bad_magic() {
    let e = error(b"not a file at all");
    assert_eq!(e.format_kind(), Some(FormatErrorKind::BadMagic));
    assert_eq!(e.to_string(), "not a quabla file (bad magic bytes)");
    // A short file that is not a prefix of the magic bytes is not a quabla file either.
    assert_eq!(error(b"PK").format_kind(), Some(FormatErrorKind::BadMagic));
    let mut raw = saved(&Node::None);
    raw[1] = b'q';
    assert_eq!(error(&raw).format_kind(), Some(FormatErrorKind::BadMagic));
}

#[test]
fn e67_unsupported_version() {
    let e = error(&file(
        r#"{"format":"quabla","version":2,"tree":{"type":"none"}}"#,
        &[],
    ));
    assert_eq!(e.format_kind(), Some(FormatErrorKind::UnsupportedVersion));
    assert_eq!(e.to_string(), "unsupported quabla file version 2");
    // The version is checked before the tree, whose schema may differ in other versions.
    let e = error(&file(
        r#"{"tree":{"type":"set"},"version":3,"format":"quabla","extra":1}"#,
        &[],
    ));
    assert_eq!(e.to_string(), "unsupported quabla file version 3");
    let e = error(&file(
        r#"{"format":"quabla","version":1.0,"tree":{"type":"none"}}"#,
        &[],
    ));
    assert_eq!(e.to_string(), "unsupported quabla file version 1.0");
    let e = error(&file(
        r#"{"format":"numpy","version":1,"tree":{"type":"none"}}"#,
        &[],
    ));
    assert_eq!(e.format_kind(), Some(FormatErrorKind::UnsupportedVersion));
    assert_eq!(
        e.to_string(),
        "unsupported quabla file version (format \"numpy\" is not \"quabla\")"
    );
}

#[test]
fn readers_accept_any_header_length_and_field_order() {
    // No padding, fields in another order, whitespace and escapes.
    let header = "{ \"tree\" : {\"items\":[{\"value\":\"0x1P-1\",\"type\":\"float\"},\
                  {\"type\":\"str\",\"value\":\"\\u00e9\\n\"}],\"type\":\"tuple\"},\n\
                  \"version\": 1, \"format\": \"qu\\u0061bla\" }";
    let tree = read_bytes(&file(header, &[])).unwrap();
    assert_eq!(tree, Node::Tuple(vec![Node::Float(0.5), Node::from("é\n")]));
    // Arrays anywhere in the data section, in any order, with gaps.
    let header = with_tree(concat!(
        r#"{"type":"list","items":["#,
        r#"{"type":"array","dtype":"float32","shape":[1],"offset":5,"nbytes":4},"#,
        r#"{"type":"array","dtype":"bool","shape":[],"offset":1,"nbytes":1}]}"#
    ));
    let data = [0xAA, 0x01, 0xBB, 0xCC, 0xDD, 0x00, 0x00, 0x80, 0x3F];
    let tree = read_bytes(&file(&header, &data)).unwrap();
    assert_eq!(read(&mut &file(&header, &data)[..]).unwrap(), tree);
    assert_eq!(
        tree,
        Node::List(vec![
            Node::Array(Array::new(vec![1], HostData::F32(Arc::from([1.0f32]))).unwrap()),
            Node::Array(Array::new(vec![], HostData::Bool(Arc::from([true]))).unwrap()),
        ])
    );
}

#[test]
fn io4_invalid_json() {
    assert_eq!(
        malformed(&file("{", &[])),
        "malformed quabla header: invalid JSON: EOF while parsing an object (at byte 16)"
    );
    assert_eq!(
        malformed(&file(
            r#"{"format":"quabla","version":1,"tree":{"type":"none"}} x"#,
            &[]
        )),
        "malformed quabla header: invalid JSON: trailing characters (at byte 71)"
    );
    assert_eq!(
        malformed(&file("[1]", &[])),
        "malformed quabla header: header: invalid type: sequence, expected a JSON object (at byte 16)"
    );
    assert_eq!(
        malformed(&file("\u{feff}{}", &[])),
        "malformed quabla header: invalid JSON: expected value (at byte 16)"
    );
    let mut bad_utf8 = file(
        r#"{"format":"quabla","version":1,"tree":{"type":"str","value":"??"}}"#,
        &[],
    );
    let at = bad_utf8.iter().position(|&b| b == b'?').unwrap();
    bad_utf8[at] = 0xC3;
    bad_utf8[at + 1] = 0x28;
    assert_eq!(
        malformed(&bad_utf8),
        format!("malformed quabla header: the header is not valid UTF-8 (at byte {at})")
    );
}

#[test]
fn io4_header_fields() {
    assert_eq!(
        malformed(&file(r#"{"version":1,"tree":{"type":"none"}}"#, &[])),
        "malformed quabla header: missing field \"format\""
    );
    assert_eq!(
        malformed(&file(r#"{"format":"quabla","tree":{"type":"none"}}"#, &[])),
        "malformed quabla header: missing field \"version\""
    );
    assert_eq!(
        malformed(&file(r#"{"format":"quabla","version":1}"#, &[])),
        "malformed quabla header: missing field \"tree\""
    );
    assert_eq!(
        malformed(&file(
            r#"{"format":"quabla","version":"1","tree":{"type":"none"}}"#,
            &[]
        )),
        "malformed quabla header: version: expected an integer, got \"1\" (at byte 45)"
    );
    assert_eq!(
        malformed(&file(
            r#"{"format":1,"version":1,"tree":{"type":"none"}}"#,
            &[]
        )),
        "malformed quabla header: format: expected a string, got 1 (at byte 26)"
    );
    assert_eq!(
        malformed(&file(
            r#"{"format":"quabla","version":1,"tree":{"type":"none"},"meta":{}}"#,
            &[]
        )),
        "malformed quabla header: unknown header field \"meta\""
    );
    assert_eq!(
        malformed(&file(
            r#"{"format":"quabla","version":1,"version":1,"tree":{"type":"none"}}"#,
            &[]
        )),
        "malformed quabla header: header: duplicate field \"version\" (at byte 55)"
    );
}

#[test]
fn io4_node_schema() {
    let cases: &[(&str, &str)] = &[
        (
            r#"{"type":"set"}"#,
            "tree.type: unknown node type \"set\" (at byte 62)",
        ),
        (r#"{"value":1}"#, "tree: missing field \"type\" (at byte 54)"),
        (r#"{"type":7}"#, "tree.type: expected a string, got 7 (at byte 62)"),
        (
            r#"{"type":"int"}"#,
            "tree: missing field \"value\" of an int node (at byte 54)",
        ),
        (
            r#"{"type":"none","value":1}"#,
            "tree: field \"value\" does not belong in a none node (at byte 77)",
        ),
        (
            r#"{"type":"none","colour":1}"#,
            "tree: unknown field \"colour\" (at byte 54)",
        ),
        (
            r#"{"type":"int","value":42}"#,
            "tree.value: expected a decimal string, got 42 (at byte 76)",
        ),
        (
            r#"{"type":"int","value":"+5"}"#,
            "tree.value: int text \"+5\" is not a decimal integer (at byte 76)",
        ),
        (
            r#"{"type":"int","value":"9223372036854775808"}"#,
            "tree.value: int text \"9223372036854775808\" is outside the signed 64-bit range (at byte 76)",
        ),
        (
            r#"{"type":"float","value":"1,5"}"#,
            "tree.value: \"1,5\" is not hexadecimal float text (at byte 78)",
        ),
        (
            r#"{"type":"float","value":"0x1p1024"}"#,
            "tree.value: float text \"0x1p1024\" is too large for float64 (at byte 78)",
        ),
        (
            r#"{"type":"bool","value":1}"#,
            "tree.value: expected true or false, got 1 (at byte 77)",
        ),
        (
            r#"{"type":"str","value":null}"#,
            "tree.value: expected a string, got null (at byte 76)",
        ),
        (
            r#"{"type":"list","items":{}}"#,
            "tree.items: invalid type: map, expected a JSON array (at byte 77)",
        ),
        (
            r#"{"type":"list","items":[1]}"#,
            "tree.items[0]: invalid type: integer `1`, expected a JSON object (at byte 78)",
        ),
        (
            r#"{"type":"dict","items":[[{"type":"str","value":"a"}]]}"#,
            "tree.items[0]: invalid length 1, expected a [key, node] pair (at byte 105)",
        ),
        (
            r#"{"type":"dict","items":[[{"type":"list","items":[]},{"type":"none"}]]}"#,
            "tree.items[0][0]: a dict key must be a str or int node, not list (at byte 79)",
        ),
        (
            r#"{"type":"dict","items":[[{"type":"float","value":"0x1p0"},{"type":"none"}]]}"#,
            "tree.items[0][0]: a dict key must be a str or int node, not float (at byte 79)",
        ),
        (
            concat!(
                r#"{"type":"dict","items":[[{"type":"str","value":"a"},{"type":"none"}],"#,
                r#"[{"type":"str","value":"a"},{"type":"none"}]]}"#
            ),
            "tree.items[1][0]: duplicate dict key \"a\" (at byte 123)",
        ),
        (
            r#"{"type":"tuple","items":[{"type":"list","items":[{"type":"oops"}]}]}"#,
            "tree.items[0].items[0].type: unknown node type \"oops\" (at byte 111)",
        ),
    ];
    for (tree, detail) in cases {
        let message = malformed(&file(&with_tree(tree), &[]));
        assert_eq!(
            message,
            format!("malformed quabla header: {detail}"),
            "{tree}"
        );
    }
}

#[test]
fn io4_arrays() {
    let array = |fields: &str| format!(r#"{{"type":"array",{fields}}}"#);
    let cases: &[(&str, &[u8], &str)] = &[
        (
            r#""dtype":"float16","shape":[1],"offset":0,"nbytes":2"#,
            &[0, 0],
            "tree.dtype: unknown dtype \"float16\"; expected \"float64\", \"float32\", \"bool\", \"int32\" or \"int64\" (at byte 78)",
        ),
        (
            r#""dtype":"float64","shape":[2],"offset":0,"nbytes":8"#,
            &[0; 8],
            "tree.nbytes: nbytes 8 does not match shape [2] of float64 (16 bytes) (at byte 120)",
        ),
        (
            r#""dtype":"float64","shape":[2,0],"offset":0,"nbytes":0"#,
            &[],
            "tree.shape: a zero extent (empty arrays are not supported) (at byte 96)",
        ),
        (
            r#""dtype":"bool","shape":[-1],"offset":0,"nbytes":1"#,
            &[0],
            "tree.shape: extent -1 is not a non-negative integer (at byte 96)",
        ),
        (
            r#""dtype":"bool","shape":3,"offset":0,"nbytes":3"#,
            &[0; 3],
            "tree.shape: invalid type: integer `3`, expected a list of at most 64 non-negative integers (at byte 93)",
        ),
        (
            r#""dtype":"float64","shape":[4611686018427387904,4],"offset":0,"nbytes":0"#,
            &[],
            "tree.shape: shape [4611686018427387904, 4] of float64 holds more bytes than a file can (at byte 96)",
        ),
        (
            r#""dtype":"bool","shape":[1],"offset":-8,"nbytes":1"#,
            &[0],
            "tree.offset: expected a non-negative integer, got -8 (at byte 106)",
        ),
        (
            r#""dtype":"bool","shape":[1],"offset":0,"nbytes":1.0"#,
            &[0],
            "tree.nbytes: expected a non-negative integer, got 1.0 (at byte 117)",
        ),
        (
            r#""dtype":"bool","shape":[1],"offset":0"#,
            &[0],
            "tree: missing field \"nbytes\" of an array node (at byte 54)",
        ),
        (
            r#""dtype":"bool","shape":[3],"offset":0,"nbytes":3"#,
            &[1, 2, 0],
            "tree: bool element 1 is the byte 0x02, not 0 or 1 (at byte 121)",
        ),
        (
            r#""dtype":"bool","shape":[1],"offset":0,"nbytes":1"#,
            &[1, 0],
            "trailing bytes after the last array, from byte 121",
        ),
    ];
    for (fields, data, detail) in cases {
        let message = malformed(&file(&with_tree(&array(fields)), data));
        assert_eq!(
            message,
            format!("malformed quabla header: {detail}"),
            "{fields}"
        );
    }
    let rank65 = format!(
        r#""dtype":"bool","shape":[{}],"offset":0,"nbytes":1"#,
        vec!["1"; 65].join(",")
    );
    let message = malformed(&file(&with_tree(&array(&rank65)), &[1]));
    assert!(
        message.contains("tree.shape: more than 64 axes"),
        "{message}"
    );
}

#[test]
fn io4_overlaps_and_trailing_bytes() {
    let two = |a: u64, b: u64| {
        with_tree(&format!(
            concat!(
                r#"{{"type":"list","items":["#,
                r#"{{"type":"array","dtype":"float64","shape":[1],"offset":{},"nbytes":8}},"#,
                r#"{{"type":"array","dtype":"float64","shape":[1],"offset":{},"nbytes":8}}]}}"#
            ),
            a, b
        ))
    };
    assert_eq!(
        malformed(&file(&two(0, 4), &[0; 12])),
        "malformed quabla header: the arrays at tree.items[0] (data bytes 0..8) and \
         tree.items[1] (data bytes 4..12) overlap"
    );
    assert!(read_bytes(&file(&two(8, 0), &[0; 16])).is_ok());
    assert_eq!(
        malformed(&file(&with_tree(r#"{"type":"none"}"#), &[0])),
        "malformed quabla header: trailing bytes after the header, from byte 70"
    );
}

#[test]
fn arrays_outside_the_data_section_are_truncated_files() {
    let header = with_tree(
        r#"{"type":"array","dtype":"float64","shape":[1],"offset":4611686018427387904,"nbytes":8}"#,
    );
    let e = error(&file(&header, &[0; 8]));
    assert_eq!(e.format_kind(), Some(FormatErrorKind::Truncated));
    assert_eq!(
        e.to_string(),
        "truncated quabla file: tree needs bytes 4611686018427387904..4611686018427387912 of \
         the data section, which starts at byte 141 and holds only 8 bytes"
    );
    let header = with_tree(
        r#"{"type":"array","dtype":"bool","shape":[1],"offset":18446744073709551615,"nbytes":1}"#,
    );
    let e = error(&file(&header, &[0; 8]));
    assert!(
        e.to_string().contains("18446744073709551615..beyond 2^64"),
        "{e}"
    );
}

#[test]
fn forged_header_lengths() {
    let raw = saved(&sample_tree());
    for forged in [0u64, 1, 7, 1 << 40, 1 << 62, u64::MAX] {
        let mut bytes = raw.clone();
        bytes[8..16].copy_from_slice(&forged.to_le_bytes());
        let e = error(&bytes);
        assert!(e.format_kind().is_some(), "{e}");
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    // 1000 nested lists: rejected once 128 containers are open.
    let depth = 1000;
    let tree = format!(
        "{}{{\"type\":\"none\"}}{}",
        r#"{"type":"list","items":["#.repeat(depth),
        "]}".repeat(depth)
    );
    let message = malformed(&file(&with_tree(&tree), &[]));
    assert!(
        message.contains("containers nest more than 128 deep"),
        "{}",
        &message[..200.min(message.len())]
    );
    // 200000 unbalanced brackets: a JSON error.
    let tree = "[".repeat(200_000);
    let message = malformed(&file(&with_tree(&tree), &[]));
    assert!(message.contains("invalid JSON"), "{message}");
    // 200000 balanced brackets inside one node: a schema error.
    let tree = format!(
        r#"{{"type":"list","items":[{}{}]}}"#,
        "[".repeat(200_000),
        "]".repeat(200_000)
    );
    let message = malformed(&file(&with_tree(&tree), &[]));
    assert!(message.contains("expected a JSON object"), "{message}");
}

#[test]
fn io_errors_pass_through() {
    struct Failing;
    impl std::io::Read for Failing {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "denied",
            ))
        }
    }
    let e = read(&mut Failing).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(
        matches!(&e, IoError::Io { path: None, source } if source.kind() == std::io::ErrorKind::PermissionDenied)
    );
}
