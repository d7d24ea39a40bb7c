//! `qb::random`, `qb::save`, `qb::load` and `qb::load_as` through the facade: acceptance
//! E64–E67 in their Rust spelling, the tracing rules of numerics.md §9.5, and the errors of
//! saving and loading.

use quabla as qb;
use quabla::prelude::*;
use quabla::random::{self, Key};
use quabla::tree::{DictKey, Value};
use quabla::{Tensor, Tree};
use std::path::PathBuf;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quabla-io-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec::<f64>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

/// Within `ulps` units in the last place of float64.
fn close_ulps(got: &[f64], want: &[f64], ulps: u64) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        let d = (g.to_bits() as i64 - w.to_bits() as i64).unsigned_abs();
        assert!(d <= ulps, "{g} vs {w}: {d} ulp");
    }
}

#[test]
fn e64_generator_bits() -> qb::Result<()> {
    let keys: Vec<u64> = random::split(&random::key(0), 3)?
        .iter()
        .map(|k| k.value())
        .collect();
    assert_eq!(
        keys,
        [
            12141488642634205887,
            11746937539006808163,
            1638637292813414338
        ]
    );
    assert_eq!(
        random::fold_in(&random::key(0), 1).value(),
        15916886550466581944
    );
    let u = random::uniform(&random::key(42), [4]).eval()?;
    assert_eq!(
        u.to_vec::<f64>()?,
        [
            0.7415648787718233,
            0.1599103928769201,
            0.27860113025513866,
            0.34419071652363753
        ]
    );
    let u32 = random::uniform(&random::key(42), [4])
        .dtype(qb::F32)
        .eval()?;
    assert_eq!(u32.dtype(), qb::F32);
    assert_eq!(
        u32.astype(qb::F64)?.to_vec::<f64>()?,
        [
            0.7415648698806763,
            0.1599103957414627,
            0.27860113978385925,
            0.34419071674346924
        ]
    );
    let u = random::uniform(&random::key(42), [2])
        .minval(-2.0)
        .maxval(2.0)
        .eval()?;
    assert_eq!(
        u.to_vec::<f64>()?,
        [0.9662595150872932, -1.3603584284923196]
    );
    let z = random::normal(&random::key(0), [3]).eval()?;
    close_ulps(
        &z.to_vec::<f64>()?,
        &[-0.452757740217458, 0.20776603893419193, 2.650605812079669],
        2,
    );
    let b = random::bernoulli(&random::key(7))
        .p(0.5)
        .shape([8])
        .eval()?;
    assert_eq!(
        b.to_vec::<bool>()?,
        [true, true, false, false, true, true, true, true]
    );
    let g = random::glorot_normal(&random::key(1), [2, 3]).eval()?;
    assert_eq!(g.shape(), [2, 3]);
    close_ulps(
        &g.to_vec::<f64>()?,
        &[
            -0.01786670819687004,
            -0.6739557767723572,
            -0.14414896309611147,
            0.052553366529539,
            0.06520044269626249,
            -0.8030047815540733,
        ],
        2,
    );
    Ok(())
}

#[test]
fn e65_sampler_contracts() -> qb::Result<()> {
    let k = random::key(3);
    assert_eq!(random::split(&k, 5)?.len(), 5);
    assert_eq!(
        random::bernoulli(&k).p(0.3).shape([4]).eval()?.dtype(),
        qb::BOOL
    );
    let u = random::uniform(&k, [100000])
        .dtype(qb::F32)
        .minval(-1.0)
        .maxval(1.0)
        .eval()?;
    assert!(u.max()?.item()? < 1.0);
    assert!(u.min()?.item()? >= -1.0);
    let z = random::normal(&k, [100000]).eval()?;
    assert!(z.abs().max()?.item()? <= 8.5718);
    let mean = z.mean()?.item()?;
    let std = z.sub(mean).powi(2).mean().sqrt()?.item()?;
    assert!(
        mean.abs() < 0.02 && (std - 1.0).abs() < 0.02,
        "{mean} {std}"
    );
    assert_eq!(
        bits(&random::normal(&k, [3]).eval()?),
        bits(&random::normal(&k, [3]).eval()?)
    );
    let g = random::glorot_normal(&k, [200, 300]).eval()?;
    let g_std = g.powi(2).mean().sqrt()?.item()?;
    let want = (2.0f64 / 500.0).sqrt();
    assert!((g_std / want - 1.0).abs() < 0.02, "{g_std} vs {want}");

    // A host Key as a traced argument is TR6 naming key_data; its key tensor is traced and
    // draws the same numbers (numerics.md §9.5 as amended); as a static argument the Key is
    // accepted and part of the signature.
    let f = qb::jit(|k: Key| random::normal(&k, [2]).eval());
    match f.call(&k) {
        Err(qb::Error::Tracer { kind, message }) => {
            assert_eq!(kind, qb::TracerErrorKind::RandomTraced);
            assert!(message.contains("random.key_data(key)"), "{message}");
        }
        other => panic!("expected a tracer error, got {other:?}"),
    }
    let traced = qb::jit(|k: Tensor| random::normal(&k, [2]).eval());
    assert_eq!(
        bits(&traced.call(&random::key_data(&k))?),
        bits(&random::normal(&k, [2]).eval()?)
    );
    let g =
        qb::jit(|(k, x): (Key, Tensor)| random::normal(&k, [2]).eval()? + &x).static_argnums(&[0]);
    let x = qb::zeros([2])?;
    let a = g.call(&(k, x.clone()))?;
    assert_eq!(bits(&a), bits(&random::normal(&k, [2]).eval()?));
    let b = g.call(&(random::key(4), x))?;
    assert_ne!(bits(&a), bits(&b), "another static key is another trace");

    assert!(matches!(
        random::split(&k, 0),
        Err(qb::Error::InvalidArgument { .. })
    ));
    let err = random::glorot_normal(&k, [3]).eval().unwrap_err();
    assert!(
        err.to_string().contains("requires a shape of rank >= 2"),
        "{err}"
    );
    Ok(())
}

#[test]
fn a_captured_key_gives_constants_of_the_trace() -> qb::Result<()> {
    let k = random::key(11);
    let f = qb::jit(move |x: Tensor| random::uniform(&k, [3]).eval()? + &x);
    let x = qb::zeros([3])?;
    let (a, b) = (f.call(&x)?, f.call(&x)?);
    assert_eq!(bits(&a), bits(&b));
    assert_eq!(bits(&a), bits(&random::uniform(&k, [3]).eval()?));
    Ok(())
}

#[test]
fn sampler_parameters_are_numbers_or_tensors() -> qb::Result<()> {
    let k = random::key(5);
    let lo = qb::array(-3.0)?;
    let a = random::uniform(&k, [4]).minval(&lo).maxval(3.0).eval()?;
    let b = random::uniform(&k, [4]).minval(-3.0).maxval(3.0).eval()?;
    assert_eq!(bits(&a), bits(&b));
    // A traced parameter draws what its number draws (docs/random-and-io.md).
    let f = qb::jit(move |p: Tensor| random::bernoulli(&k).p(&p).shape([2]).eval());
    let traced = f.call(&qb::array(0.5)?)?;
    let eager = random::bernoulli(&k).p(0.5).shape([2]).eval()?;
    assert_eq!(traced.to_vec_bool()?, eager.to_vec_bool()?);
    // A parameter that does not broadcast to the shape is a shape error.
    let err = random::uniform(&k, [2])
        .minval(qb::zeros([3])?)
        .eval()
        .unwrap_err();
    assert!(matches!(err, qb::Error::Shape { .. }), "{err:?}");
    Ok(())
}

#[test]
fn bad_sampler_input_is_a_typed_error() {
    let k = random::key(0);
    let cases: Vec<(qb::Result<Tensor>, &str)> = vec![
        (random::bernoulli(&k).p(1.5).eval(), "p must be in [0, 1]"),
        (
            random::bernoulli(&k).p(f64::NAN).eval(),
            "p must be in [0, 1]",
        ),
        (
            random::uniform(&k, [2]).minval(1.0).maxval(1.0).eval(),
            "finite minval < maxval",
        ),
        (
            random::uniform(&k, [2]).maxval(f64::INFINITY).eval(),
            "finite minval < maxval",
        ),
        (
            random::normal(&k, [2]).dtype(qb::BOOL).eval(),
            "dtype must be float32 or float64",
        ),
        (random::he_normal(&k, [4]).eval(), "rank >= 2"),
        (random::glorot_uniform(&k, []).eval(), "rank >= 2"),
    ];
    for (result, want) in cases {
        let err = result.unwrap_err();
        assert!(err.to_string().contains(want), "{err} lacks {want}");
    }
    // An element count that overflows is an error, never an attempt to allocate it.
    let err = random::normal(&k, [usize::MAX, 4]).eval().unwrap_err();
    assert!(
        matches!(
            err,
            qb::Error::InvalidArgument { .. } | qb::Error::Shape { .. }
        ),
        "{err:?}"
    );
    let err = random::uniform(&k, [1 << 30, 1 << 30]).eval().unwrap_err();
    assert!(matches!(err, qb::Error::OutOfMemory { .. }), "{err:?}");
}

/// The tree of E66, in written order.
fn e66_tree() -> qb::Result<Value> {
    let params = Value::Dict(vec![
        ("w".into(), Value::Array(qb::array([[1.0, -0.0]])?)),
        ("mask".into(), Value::Array(qb::array([true, false])?)),
        ("h".into(), Value::Array(qb::F32.array([0.1])?)),
    ]);
    Ok(Value::Dict(vec![
        ("params".into(), params),
        ("step".into(), Value::Int(1200)),
        (
            "t".into(),
            Value::Tuple(vec![
                Value::Float(1.5),
                Value::Str("s".into()),
                Value::None,
                Value::Bool(true),
            ]),
        ),
    ]))
}

fn keys(v: &Value) -> Vec<String> {
    match v {
        Value::Dict(entries) => entries.iter().map(|(k, _)| k.to_string()).collect(),
        other => panic!("not a dict: {other:?}"),
    }
}

#[test]
fn e66_round_trip() -> qb::Result<()> {
    let dir = scratch("e66");
    let path = dir.join("ckpt.qb");
    qb::save(&path, &e66_tree()?)?;
    let back = qb::load(&path)?;
    assert_eq!(keys(&back), ["params", "step", "t"]);
    let params = back.get("params").unwrap();
    assert_eq!(keys(params), ["w", "mask", "h"]);
    let w = params.get("w").unwrap().as_tensor().unwrap();
    assert_eq!((w.shape(), w.dtype()), (&[1usize, 2][..], qb::F64));
    assert_eq!(bits(w), [1.0f64.to_bits(), (-0.0f64).to_bits()]);
    let mask = params.get("mask").unwrap().as_tensor().unwrap();
    assert_eq!(mask.to_vec::<bool>()?, [true, false]);
    let h = params.get("h").unwrap().as_tensor().unwrap();
    assert_eq!(h.dtype(), qb::F32);
    assert_eq!(h.to_vec::<f32>()?, [0.1f32]);
    assert!(matches!(back.get("step"), Some(Value::Int(1200))));
    match back.get("t") {
        Some(Value::Tuple(t)) => {
            assert!(matches!(
                t.as_slice(),
                [Value::Float(x), Value::Str(s), Value::None, Value::Bool(true)] if *x == 1.5 && s == "s"
            ));
        }
        other => panic!("t is not a tuple: {other:?}"),
    }
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[test]
fn e67_header_and_malformed_files() -> qb::Result<()> {
    let mut raw = Vec::new();
    qb::save(&mut raw, &e66_tree()?)?;
    assert_eq!(&raw[..8], b"\x93QUABLA\n");
    let n = u64::from_le_bytes(raw[8..16].try_into().unwrap()) as usize;
    assert_eq!((16 + n) % 8, 0);
    let header = std::str::from_utf8(&raw[16..16 + n]).unwrap();
    assert!(header.contains("\"version\":1"), "{header}");

    let truncated = qb::load(&mut &raw[..raw.len() - 1]).unwrap_err();
    assert!(
        matches!(truncated, qb::Error::Format { .. }),
        "{truncated:?}"
    );
    assert!(
        truncated.to_string().contains("truncated quabla file"),
        "{truncated}"
    );
    let bad = qb::load(&mut &b"not a file at all"[..]).unwrap_err();
    assert!(bad.to_string().contains("not a quabla file"), "{bad}");
    let v2 = String::from_utf8(raw.clone())
        .ok()
        .map(|s| s.replacen("\"version\":1", "\"version\":2", 1));
    if let Some(v2) = v2 {
        let err = qb::load(&mut v2.as_bytes()).unwrap_err();
        assert!(
            err.to_string()
                .contains("unsupported quabla file version 2"),
            "{err}"
        );
    } else {
        // The data section is not UTF-8: patch the header bytes in place.
        let mut v2 = raw.clone();
        let at = header.find("\"version\":1").unwrap() + 16 + "\"version\":".len();
        v2[at] = b'2';
        let err = qb::load(&mut v2.as_slice()).unwrap_err();
        assert!(
            err.to_string()
                .contains("unsupported quabla file version 2"),
            "{err}"
        );
    }
    // A leaf that is not a quabla array (here a random key) is TY9.
    let err = qb::save(&mut Vec::new(), &(qb::zeros([2])?, random::key(1))).unwrap_err();
    assert!(matches!(err, qb::Error::Type { .. }), "{err:?}");
    assert!(err.to_string().contains("cannot save"), "{err}");
    Ok(())
}

#[derive(Tree, Clone, Debug)]
struct Layer {
    w: Tensor,
    b: Tensor,
}

#[derive(Tree, Clone, Debug)]
struct Checkpoint {
    layers: Vec<Layer>,
    step: i64,
    #[tree(static)]
    name: String,
    #[tree(static)]
    width: usize,
}

fn checkpoint() -> qb::Result<Checkpoint> {
    let k = random::split(&random::key(0), 2)?;
    Ok(Checkpoint {
        layers: vec![
            Layer {
                w: random::glorot_normal(&k[0], [2, 3]).eval()?,
                b: qb::zeros([3])?,
            },
            Layer {
                w: random::glorot_normal(&k[1], [3, 1]).eval()?,
                b: qb::array([f64::NAN])?,
            },
        ],
        step: 42,
        name: "mlp".into(),
        width: 3,
    })
}

#[test]
fn load_as_rebuilds_derived_structs_and_containers() -> qb::Result<()> {
    let ck = checkpoint()?;
    let mut bytes = Vec::new();
    qb::save(&mut bytes, &ck)?;
    // Untyped, a struct is the dict of its fields in declaration order.
    let v = qb::load(&mut bytes.as_slice())?;
    assert_eq!(keys(&v), ["layers", "step", "name", "width"]);
    let back: Checkpoint = qb::load_as(&mut bytes.as_slice())?;
    assert_eq!((back.step, back.name.as_str(), back.width), (42, "mlp", 3));
    for (a, b) in ck.layers.iter().zip(&back.layers) {
        assert_eq!(bits(&a.w), bits(&b.w));
        assert_eq!(bits(&a.b), bits(&b.b), "NaN payloads survive");
    }
    // Typed containers.
    let mut bytes = Vec::new();
    let m: std::collections::BTreeMap<i64, Vec<f64>> =
        [(2, vec![0.5]), (1, vec![1.5, -2.0])].into();
    qb::save(&mut bytes, &m)?;
    let back: std::collections::BTreeMap<i64, Vec<f64>> = qb::load_as(&mut bytes.as_slice())?;
    assert_eq!(back, m);
    Ok(())
}

#[test]
fn load_as_names_the_first_path_that_differs() -> qb::Result<()> {
    let tree = Value::Dict(vec![(
        "params".into(),
        Value::Dict(vec![("w".into(), Value::None)]),
    )]);
    let mut bytes = Vec::new();
    qb::save(&mut bytes, &tree)?;
    type Params = std::collections::BTreeMap<String, std::collections::BTreeMap<String, Tensor>>;
    let err = qb::load_as::<Params>(&mut bytes.as_slice()).unwrap_err();
    assert!(matches!(err, qb::Error::Structure { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("pytree structures differ at ['params']['w']: expected a tensor leaf"),
        "{err}"
    );
    let mut bytes = Vec::new();
    qb::save(&mut bytes, &(1.0, vec![qb::zeros([1])?, qb::zeros([2])?]))?;
    let err = qb::load_as::<(f64, Vec<(Tensor, Tensor)>)>(&mut bytes.as_slice()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("pytree structures differ at [1][0]"),
        "{err}"
    );
    Ok(())
}

#[test]
fn saving_refuses_what_a_file_cannot_hold_and_keeps_the_old_file() -> qb::Result<()> {
    let dir = scratch("refuse");
    let path = dir.join("ckpt.qb");
    qb::save(&path, &vec![qb::ones([2])?])?;
    let before = std::fs::read(&path).unwrap();

    let mixed = Value::Dict(vec![
        (DictKey::Str("a".into()), Value::Int(1)),
        (DictKey::Int(2), Value::Int(2)),
    ]);
    let err = qb::save(&path, &mixed).unwrap_err();
    assert!(
        err.to_string().contains("must all be str or all be int"),
        "{err}"
    );
    assert!(matches!(err, qb::Error::Type { .. }));

    let err = qb::save(&path, &qb::ShapeDtype::new([2], qb::F64)).unwrap_err();
    assert!(matches!(err, qb::Error::Type { .. }), "{err:?}");

    // A tracer leaf is TR2 (here: saving from inside a traced function).
    let p2 = path.clone();
    let f = qb::jit(move |x: Tensor| {
        qb::save(&p2, &x)?;
        Ok(x)
    });
    match f.call(&qb::zeros([2])?) {
        Err(qb::Error::Tracer { kind, message }) => {
            assert_eq!(kind, qb::TracerErrorKind::Concretization);
            assert!(
                message.starts_with("save() needs a concrete value"),
                "{message}"
            );
        }
        other => panic!("expected TR2, got {other:?}"),
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the old file is intact"
    );
    let back: Vec<Tensor> = qb::load_as(&path)?;
    assert_eq!(back[0].to_vec::<f64>()?, [1.0, 1.0]);

    // Operating-system errors are Error::Io naming the path.
    let missing = dir.join("no-such-dir").join("x.qb");
    match qb::save(&missing, &1.0) {
        Err(qb::Error::Io {
            path: Some(p),
            kind,
            ..
        }) => {
            assert_eq!(p, missing);
            assert_eq!(kind, std::io::ErrorKind::NotFound);
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
    let err = qb::load(dir.join("absent.qb")).unwrap_err();
    assert!(err.to_string().contains("absent.qb"), "{err}");
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[derive(Tree, Clone, Debug)]
struct Sized3 {
    x: Tensor,
    #[tree(static)]
    wide: usize,
    #[tree(static)]
    small: u8,
}

#[test]
fn static_integers_of_any_width_are_restored() -> qb::Result<()> {
    // 300 does not fit the narrower integer types tried before `usize`.
    let v = Sized3 {
        x: qb::ones([1])?,
        wide: 300,
        small: 7,
    };
    let mut bytes = Vec::new();
    qb::save(&mut bytes, &v)?;
    let back: Sized3 = qb::load_as(&mut bytes.as_slice())?;
    assert_eq!((back.wide, back.small), (300, 7));
    Ok(())
}

#[derive(Clone, Debug, qb::Tree)]
struct Counted {
    x: Tensor,
    #[tree(static)]
    count: u64,
}

/// The integer edges in every place a tree holds an integer: leaves of `save` (also inside
/// containers and as a static field or `qb::Static`), and static leaves of transforms. Every
/// value in the signed 64-bit range round-trips exactly; every value past it is AR19, never a
/// wrapped negative number (`u64::MAX` used to be saved as -1, and `jit` said "integer -1 out
/// of range").
#[test]
fn integer_edges_round_trip_or_are_ar19() -> qb::Result<()> {
    fn is_ar19<T: std::fmt::Debug>(r: qb::Result<T>, value: &str, what: &str) {
        match r {
            Err(qb::Error::InvalidArgument { message }) => assert_eq!(
                message,
                format!("{value} is outside the signed 64-bit range of pytree and file integers"),
                "{what}"
            ),
            other => panic!("{what}: {other:?}"),
        }
    }
    fn round_trip<T: Tree + PartialEq + std::fmt::Debug>(v: T) -> qb::Result<()> {
        let mut bytes = Vec::new();
        qb::save(&mut bytes, &v)?;
        assert_eq!(qb::load_as::<T>(&mut bytes.as_slice())?, v);
        Ok(())
    }
    // In range: exact, whatever the Rust type.
    round_trip(i64::MIN)?;
    round_trip(i64::MAX)?;
    round_trip(i64::MAX as u64)?;
    round_trip(i64::MAX as usize)?;
    round_trip(u32::MAX)?;
    round_trip(vec![i64::MIN, -1, 0, i64::MAX])?;
    assert_eq!(
        qb::load(
            &mut {
                let mut b = Vec::new();
                qb::save(&mut b, &Value::Int(i64::MIN))?;
                b
            }
            .as_slice()
        )?
        .into_typed::<i64>()?,
        i64::MIN
    );
    // Past it: AR19 from save, with nothing written.
    let past = (i64::MAX as u64 + 1).to_string();
    let max = u64::MAX.to_string();
    let usize_max = usize::MAX.to_string();
    for (r, value, what) in [
        (qb::save(&mut Vec::new(), &u64::MAX), &max, "u64::MAX"),
        (
            qb::save(&mut Vec::new(), &usize::MAX),
            &usize_max,
            "usize::MAX",
        ),
        (
            qb::save(&mut Vec::new(), &(i64::MAX as u64 + 1)),
            &past,
            "i64::MAX + 1",
        ),
        (
            qb::save(&mut Vec::new(), &vec![1u64, u64::MAX]),
            &max,
            "in a list",
        ),
        (
            qb::save(&mut Vec::new(), &(qb::ones([1])?, u64::MAX)),
            &max,
            "in a tuple",
        ),
        (
            qb::save(&mut Vec::new(), &qb::Static(u64::MAX)),
            &max,
            "qb::Static",
        ),
        (
            qb::save(
                &mut Vec::new(),
                &Counted {
                    x: qb::ones([1])?,
                    count: u64::MAX,
                },
            ),
            &max,
            "a static field",
        ),
    ] {
        is_ar19(r, value, what);
    }
    let mut bytes = Vec::new();
    assert!(qb::save(&mut bytes, &u64::MAX).is_err() && bytes.is_empty());
    // Transforms: an integer leaf is static; in range it reaches the function exactly.
    let echo = |n: i64| qb::jit(move |(x, m): (Tensor, i64)| Ok((x, m))).call(&(qb::ones([1])?, n));
    for n in [i64::MIN, -1, 0, i64::MAX] {
        assert_eq!(echo(n)?.1, n);
    }
    let jit_u = qb::jit(|(x, n): (Tensor, u64)| x.mul(n as f64));
    assert_eq!(
        jit_u.call(&(qb::ones([1])?, i64::MAX as u64))?.item()?,
        i64::MAX as f64
    );
    is_ar19(
        jit_u.call(&(qb::ones([1])?, u64::MAX)),
        &max,
        "jit u64::MAX",
    );
    let jit_usize = qb::jit(|(x, n): (Tensor, usize)| x.mul(n as f64));
    is_ar19(
        jit_usize.call(&(qb::ones([1])?, usize::MAX)),
        &usize_max,
        "jit usize::MAX",
    );
    let grad_usize = qb::grad(|(x, n): (Tensor, usize)| x.mul(n as f64)?.sum());
    is_ar19(
        grad_usize
            .call(&(qb::ones([1])?, usize::MAX))
            .map(|g: Tensor| g),
        &usize_max,
        "grad usize::MAX",
    );
    let vmap_u = qb::vmap(|(x, n): (Tensor, u64)| x.mul(n as f64)).in_axes(&[Some(0), None]);
    is_ar19(
        vmap_u.call(&(qb::ones([2])?, u64::MAX)).map(|y: Tensor| y),
        &max,
        "vmap u64::MAX",
    );
    // A result the function returns.
    is_ar19(
        qb::jit(|x: Tensor| Ok((x, u64::MAX)))
            .call(&qb::ones([1])?)
            .map(|r: (Tensor, u64)| r.1),
        &max,
        "a jitted result",
    );
    Ok(())
}

/// `load` of a path that is not a regular file is `Error::Io` naming what it is, at once: a
/// FIFO used to block forever in `open` (waiting for a writer), a character device could
/// stream forever. Each load runs on its own thread with a deadline, so a regression fails
/// this test instead of hanging the suite.
#[cfg(unix)]
#[test]
fn load_refuses_what_is_not_a_regular_file() {
    use std::time::Duration;
    let dir = scratch(&format!("special-{}", std::process::id()));
    let fifo = dir.join("pipe");
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let socket = dir.join("socket");
    let _ = std::fs::remove_file(&socket);
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    for (path, what) in [
        (fifo.clone(), "a FIFO"),
        (socket.clone(), "a socket"),
        (PathBuf::from("/dev/zero"), "a character device"),
        (dir.clone(), "a directory"),
    ] {
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || tx.send(qb::load(p.as_path()).map(|_| ())));
        let result = rx.recv_timeout(Duration::from_secs(20));
        if result.is_err() {
            // Release a blocked reader before failing.
            let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
            panic!("load({}) did not return", path.display());
        }
        match result.unwrap() {
            Err(qb::Error::Io { .. }) => {}
            other => panic!("{}: {other:?}", path.display()),
        }
        let message = qb::load(path.as_path()).unwrap_err().to_string();
        assert!(
            message.contains(&format!("{what}, not a regular file"))
                && message.contains(&*path.to_string_lossy()),
            "{message}"
        );
    }
    // A regular file still loads, and a reader of the FIFO can be passed explicitly.
    let file = dir.join("ok.qb");
    qb::save(file.as_path(), &1.5f64).unwrap();
    assert_eq!(qb::load_as::<f64>(file.as_path()).unwrap(), 1.5);
    let writer = {
        let fifo = fifo.clone();
        let bytes = std::fs::read(&file).unwrap();
        std::thread::spawn(move || {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .write(true)
                .open(&fifo)
                .unwrap()
                .write_all(&bytes)
                .unwrap();
        })
    };
    let mut reader = std::fs::File::open(&fifo).unwrap();
    assert_eq!(qb::load_as::<f64>(&mut reader).unwrap(), 1.5);
    writer.join().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
