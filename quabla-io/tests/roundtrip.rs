//! Round trips of every node kind (acceptance E66) and the float text against Python's
//! `float.hex()`.

use quabla_io::hexfloat::{from_hex, to_hex};
use quabla_io::*;
use quabla_ir::{DType, HostData};
use std::sync::Arc;

fn array(shape: &[usize], data: HostData) -> Node {
    Node::Array(Array::new(shape.to_vec(), data).unwrap())
}

fn f64s(values: &[f64]) -> HostData {
    HostData::F64(Arc::from(values))
}

fn roundtrip(tree: &Node) -> Node {
    let mut bytes = Vec::new();
    write(tree, &mut bytes).unwrap();
    let back = read_bytes(&bytes).unwrap();
    // The stream reader gives the same tree.
    assert_eq!(read(&mut bytes.as_slice()).unwrap(), back);
    back
}

/// The tree of acceptance E66.
fn e66_tree() -> Node {
    Node::Dict(vec![
        (
            Key::from("params"),
            Node::Dict(vec![
                (Key::from("w"), array(&[1, 2], f64s(&[1.0, -0.0]))),
                (
                    Key::from("mask"),
                    array(&[2], HostData::Bool(Arc::from([true, false]))),
                ),
                (
                    Key::from("h"),
                    array(&[1], HostData::F32(Arc::from([0.1f32]))),
                ),
            ]),
        ),
        (Key::from("step"), Node::Int(1200)),
        (
            Key::from("t"),
            Node::Tuple(vec![
                Node::Float(1.5),
                Node::from("s"),
                Node::None,
                Node::Bool(true),
            ]),
        ),
    ])
}

#[test]
fn e66_tree_round_trips() {
    let tree = e66_tree();
    let back = roundtrip(&tree);
    assert_eq!(back, tree);
    let Node::Dict(entries) = &back else {
        panic!("a dict expected, got {back:?}");
    };
    let keys: Vec<&Key> = entries.iter().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        [&Key::from("params"), &Key::from("step"), &Key::from("t")]
    );
    let Node::Dict(params) = &entries[0].1 else {
        panic!("params must be a dict");
    };
    let names: Vec<&Key> = params.iter().map(|(k, _)| k).collect();
    assert_eq!(
        names,
        [&Key::from("w"), &Key::from("mask"), &Key::from("h")]
    );
    let Node::Array(w) = &params[0].1 else {
        panic!("w must be an array");
    };
    assert_eq!(w.dtype(), DType::F64);
    assert_eq!(w.shape(), [1, 2]);
    let HostData::F64(values) = w.data() else {
        panic!("float64 data expected");
    };
    assert_eq!(values[1].to_bits(), (-0.0f64).to_bits());
    let Node::Array(h) = &params[2].1 else {
        panic!("h must be an array");
    };
    assert_eq!(h.dtype(), DType::F32);
    assert!(matches!(&entries[1].1, Node::Int(1200)));
    assert!(matches!(&entries[2].1, Node::Tuple(items) if items.len() == 4));
}

#[test]
fn every_scalar_kind_round_trips() {
    let leaves = vec![
        Node::None,
        Node::Bool(false),
        Node::Bool(true),
        Node::Int(0),
        Node::Int(-42),
        Node::Int(i64::MIN),
        Node::Int(i64::MAX),
        Node::Float(0.0),
        Node::Float(-0.0),
        Node::Float(0.1),
        Node::Float(5e-324),
        Node::Float(-2.5e-310),
        Node::Float(f64::MAX),
        Node::Float(f64::INFINITY),
        Node::Float(f64::NEG_INFINITY),
        Node::Float(f64::NAN),
        Node::from(""),
        Node::from("quotes \" backslash \\ newline \n tab \t nul \u{0} é 😀"),
    ];
    for leaf in leaves {
        let back = roundtrip(&leaf);
        assert_eq!(back, leaf);
        if let (Node::Float(a), Node::Float(b)) = (&leaf, &back) {
            if !a.is_nan() {
                assert_eq!(a.to_bits(), b.to_bits());
            }
        }
    }
}

#[test]
fn arrays_keep_their_bits() {
    let nan_payloads = [
        f64::from_bits(0x7ff8_0000_0000_0001),
        f64::from_bits(0xfff4_dead_beef_cafe),
        -0.0,
        5e-324,
        f64::INFINITY,
    ];
    let f32_bits = [
        f32::from_bits(0x7fc0_0001),
        f32::from_bits(0xff80_0001),
        -0.0f32,
        f32::from_bits(1),
    ];
    let tree = Node::List(vec![
        array(&[5], f64s(&nan_payloads)),
        array(&[2, 2], HostData::F32(Arc::from(f32_bits))),
        array(&[], f64s(&[3.25])),
        array(&[], HostData::Bool(Arc::from([true]))),
        array(&[1, 1, 3], HostData::Bool(Arc::from([false, true, false]))),
    ]);
    let back = roundtrip(&tree);
    // Node equality compares array data bit for bit.
    assert_eq!(back, tree);
    let Node::List(items) = &back else {
        panic!("a list expected");
    };
    let Node::Array(a) = &items[0] else {
        panic!("an array expected");
    };
    let HostData::F64(values) = a.data() else {
        panic!("float64 data expected");
    };
    let bits: Vec<u64> = values.iter().map(|x| x.to_bits()).collect();
    let expected: Vec<u64> = nan_payloads.iter().map(|x| x.to_bits()).collect();
    assert_eq!(bits, expected);
    let Node::Array(scalar) = &items[2] else {
        panic!("an array expected");
    };
    assert_eq!(scalar.shape(), [] as [usize; 0]);
}

#[test]
fn containers_keep_their_kind_and_order() {
    let tree = Node::Tuple(vec![
        Node::List(vec![]),
        Node::Tuple(vec![]),
        Node::Dict(vec![]),
        Node::List(vec![Node::Int(1), Node::Tuple(vec![Node::Int(2)])]),
        Node::Dict(vec![
            (Key::Int(3), Node::from("three")),
            (Key::Int(-1), Node::from("minus one")),
            (Key::from("3"), Node::from("string three")),
            (Key::Int(i64::MIN), Node::None),
        ]),
    ]);
    assert_eq!(roundtrip(&tree), tree);
    // Lists and tuples differ.
    assert_ne!(Node::List(vec![]), Node::Tuple(vec![]));
}

#[test]
fn the_deepest_allowed_nesting_round_trips() {
    let mut tree = Node::Int(1);
    for level in 0..MAX_DEPTH {
        tree = match level % 3 {
            0 => Node::List(vec![tree]),
            1 => Node::Tuple(vec![tree]),
            _ => Node::Dict(vec![(Key::from("k"), tree)]),
        };
    }
    assert_eq!(roundtrip(&tree), tree);
    let deeper = Node::List(vec![tree]);
    let err = write(&deeper, &mut Vec::new()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(
        err.to_string()
            .contains("containers nest more than 128 deep"),
        "{err}"
    );
}

#[test]
fn writer_errors() {
    let dup = Node::Dict(vec![
        (Key::from("a"), Node::None),
        (Key::from("a"), Node::Int(1)),
    ]);
    let err = write(&dup, &mut Vec::new()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        err.to_string(),
        "cannot save tree: dict key \"a\" appears twice (entry 1)"
    );
    let nested = Node::List(vec![Node::Dict(vec![
        (Key::Int(1), Node::None),
        (Key::Int(1), Node::None),
    ])]);
    let err = write(&nested, &mut Vec::new()).unwrap_err();
    assert!(
        err.to_string().starts_with("cannot save tree.items[0]:"),
        "{err}"
    );

    let err = Array::new(vec![2, 3], f64s(&[1.0; 5])).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        err.to_string(),
        "array data holds 5 elements but shape [2, 3] needs 6"
    );
    let err = Array::new(vec![2, 0], f64s(&[])).unwrap_err();
    assert_eq!(err.to_string(), "array shape [2, 0] has a zero extent");
    let err = Array::new(vec![1; 65], f64s(&[1.0])).unwrap_err();
    assert_eq!(err.to_string(), "array of rank 65 has more than 64 axes");
    let err = Array::new(vec![usize::MAX, 2], f64s(&[1.0])).unwrap_err();
    assert!(err.to_string().contains("more than fit in memory"), "{err}");
    assert!(Array::new(vec![1; 64], f64s(&[1.0])).is_ok());

    // The facade's own conversion errors (TY9, AR19).
    let err = IoError::unsupported_leaf("numpy.ndarray");
    assert_eq!(err.kind(), ErrorKind::Type);
    assert_eq!(
        err.to_string(),
        "cannot save numpy.ndarray: allowed leaves are quabla arrays, None, bool, int, float and str"
    );
    let err = Node::int(1i128 << 63).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        err.to_string(),
        "9223372036854775808 is outside the signed 64-bit range"
    );
    assert_eq!(Node::int(-5i32).unwrap(), Node::Int(-5));
    assert_eq!(Node::int(u64::MAX >> 1).unwrap(), Node::Int(i64::MAX));
}

#[test]
fn a_failing_writer_is_an_io_error() {
    struct Broken;
    impl std::io::Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("broken pipe"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let err = write(&e66_tree(), &mut Broken).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert_eq!(err.to_string(), "broken pipe");
}

#[test]
fn float_text_matches_python() {
    // Outputs of Python's float.hex() for these bit patterns.
    let cases: &[(u64, &str)] = &[
        (0x3fb999999999999a, "0x1.999999999999ap-4"),
        (0x3ff8000000000000, "0x1.8000000000000p+0"),
        (0x3ff0000000000000, "0x1.0000000000000p+0"),
        (0x0000000000000001, "0x0.0000000000001p-1022"),
        (0x8000000000000000, "-0x0.0p+0"),
        (0x0000000000000000, "0x0.0p+0"),
        (0x7ff0000000000000, "inf"),
        (0xfff0000000000000, "-inf"),
        (0x3ff0000000000001, "0x1.0000000000001p+0"),
        (0x000fffffffffffff, "0x0.fffffffffffffp-1022"),
        (0x8000000000000001, "-0x0.0000000000001p-1022"),
        (0x7fefffffffffffff, "0x1.fffffffffffffp+1023"),
        (0x0010000000000000, "0x1.0000000000000p-1022"),
        (0xc00921fb54442d18, "-0x1.921fb54442d18p+1"),
        (0x4164d8399f767c45, "0x1.4d8399f767c45p+23"),
        (0x5bc8fbbcbde5c099, "0x1.8fbbcbde5c099p+445"),
        (0xb0c11fdecb91ce37, "-0x1.11fdecb91ce37p-243"),
        (0xd76d4330f1446bea, "-0x1.d4330f1446beap+375"),
        (0xa6eb8c9ebd69fe29, "-0x1.b8c9ebd69fe29p-401"),
        (0x87b0b125ec1d7da0, "-0x1.0b125ec1d7da0p-900"),
    ];
    for &(bits, text) in cases {
        let x = f64::from_bits(bits);
        assert_eq!(to_hex(x), text, "{x:e}");
        assert_eq!(from_hex(text).unwrap().to_bits(), bits, "{text}");
    }
    // Python's float.fromhex() reads these to the same values.
    assert_eq!(from_hex("1.8").unwrap(), 1.5);
    assert_eq!(from_hex("0X1.FP+1").unwrap(), 3.875);
    assert_eq!(from_hex(" 0x.8p1 ").unwrap(), 1.0);
}

/// Integer arrays keep dtype and bits, both extremes included.
#[test]
fn integer_arrays_round_trip() {
    let tree = Node::List(vec![
        array(&[3], HostData::I32(Arc::from([i32::MIN, -1, i32::MAX]))),
        array(&[2, 1], HostData::I64(Arc::from([i64::MIN, (1 << 53) + 1]))),
    ]);
    let back = roundtrip(&tree);
    assert_eq!(back, tree);
    let Node::List(items) = back else {
        panic!("a list")
    };
    let Node::Array(a) = &items[0] else {
        panic!("an array")
    };
    assert_eq!(a.dtype(), DType::I32);
}

/// A file written before the integer dtypes existed (by an independent script following
/// numerics.md §10, checked in) still loads with every value.
#[test]
fn files_written_before_the_integer_dtypes_still_load() {
    let bytes = include_bytes!("files/before_integers.qbl");
    let tree = read_bytes(bytes).unwrap();
    let want = Node::Dict(vec![
        (
            Key::from("w"),
            array(&[2, 2], f64s(&[1.5, -0.0, f64::from_bits(1), -3.25])),
        ),
        (
            Key::from("b"),
            array(&[3], HostData::F32(Arc::from([0.1f32, -2.0, 1e30]))),
        ),
        (
            Key::from("mask"),
            array(&[3], HostData::Bool(Arc::from([true, false, true]))),
        ),
        (Key::from("step"), Node::Int(-42)),
        (Key::from("lr"), Node::Float(0.001)),
        (Key::Int(7), Node::Tuple(vec![Node::None, Node::Bool(true)])),
    ]);
    assert_eq!(tree, want);
}
