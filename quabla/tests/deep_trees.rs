//! Deep pytrees (`qb::tree::MAX_DEPTH`): every API that walks a user's structure accepts
//! trees nested up to the limit and refuses deeper ones with the typed nesting error, at every
//! depth from 10^2 to 10^6, eagerly and inside each transform: nothing overflows the stack.
//!
//! The sweep runs in a child process (this binary re-run on one test), so that a regression,
//! which would abort the process, fails the parent test with the child's output instead of
//! taking the test binary down.

use qb::tree::{DictKey, Value, MAX_DEPTH};
use qb::{Error, Tensor};
use quabla as qb;

/// `depth` nested containers (lists, tuples, dicts and structs in turn) around `leaf`.
fn nest(depth: usize, leaf: Value) -> Value {
    let mut v = leaf;
    for level in 0..depth {
        v = match level % 4 {
            0 => Value::List(vec![v]),
            1 => Value::Tuple(vec![Value::None, v]),
            2 => Value::Dict(vec![(DictKey::from("k"), v)]),
            _ => Value::Node {
                name: "Wrapper",
                fields: vec![("inner", v)],
                meta: vec![],
            },
        };
    }
    v
}

/// Takes a deep value apart one level at a time: `Value` is a plain recursive enum, so its
/// own drop would recurse once per level.
fn dismantle(mut v: Value) {
    loop {
        v = match v {
            Value::List(mut items) | Value::Tuple(mut items) => match items.pop() {
                Some(inner) => inner,
                None => return,
            },
            Value::Dict(mut entries) => match entries.pop() {
                Some((_, inner)) => inner,
                None => return,
            },
            Value::Node { mut fields, .. } => match fields.pop() {
                Some((_, inner)) => inner,
                None => return,
            },
            _ => return,
        };
    }
}

/// The one tensor leaf of a nested value (found without recursion).
fn leaf_of(v: &Value) -> Tensor {
    let mut v = v;
    loop {
        v = match v {
            Value::Array(t) => return t.clone(),
            Value::List(items) | Value::Tuple(items) => items.last().unwrap(),
            Value::Dict(entries) => &entries[0].1,
            Value::Node { fields, .. } => &fields[0].1,
            other => panic!("no tensor leaf: {}", other.type_name()),
        };
    }
}

fn x() -> Tensor {
    qb::array([1.0, 2.0]).unwrap()
}

/// `f(x) = sum(sin(leaf))`, the function every transform is applied to.
fn loss(v: Value) -> qb::Result<Tensor> {
    leaf_of(&v).sin()?.sum()
}

/// A recursive `#[derive(Tree)]` struct: a chain of `depth` links.
#[derive(Clone, Debug, qb::Tree)]
struct Link {
    next: Vec<Link>,
    x: Option<Tensor>,
}

fn chain(depth: usize) -> Link {
    let mut link = Link {
        next: vec![],
        x: Some(x()),
    };
    for _ in 1..depth {
        link = Link {
            next: vec![link],
            x: None,
        };
    }
    link
}

fn drop_chain(mut link: Link) {
    while let Some(next) = link.next.pop() {
        link = next;
    }
}

type Case = (&'static str, fn(&Value, usize) -> qb::Result<()>);

/// Each API that walks a user's tree, given the deep value (and its depth, for the cases that
/// build their own).
fn cases() -> Vec<Case> {
    vec![
        ("tree::flatten", |v, _| qb::tree::structure(v).check()),
        ("tree::map", |v, _| {
            let out = qb::tree::map(v, |t| t.mul(2.0))?;
            dismantle(out);
            Ok(())
        }),
        ("tree::map_n", |v, _| {
            let out = qb::tree::map_n(&[v, v], |l| Ok(l[0].clone()))?;
            dismantle(out);
            Ok(())
        }),
        ("tree::unflatten", |v, _| {
            let (leaves, def) = qb::tree::flatten(v);
            let back: Value = qb::tree::unflatten(&def, leaves)?;
            dismantle(back);
            Ok(())
        }),
        ("save", |v, _| qb::save(&mut Vec::new(), v)),
        ("jit", |v, _| {
            let out: Value = qb::jit(|v: Value| Ok(v)).call(v)?;
            dismantle(out);
            Ok(())
        }),
        ("jit lower", |v, _| qb::jit(loss).lower(v).map(|_| ())),
        ("grad", |v, _| {
            let g: Value = qb::grad(loss).call(v)?;
            dismantle(g);
            Ok(())
        }),
        ("vmap", |v, _| {
            let y: Tensor = qb::vmap(|v: Value| leaf_of(&v).sin()).call(v)?;
            assert_eq!(y.shape(), [2]);
            Ok(())
        }),
        ("jvp", |v, _| qb::jvp(loss, v, v).map(|_| ())),
        ("vjp", |v, _| qb::vjp(loss, v).map(|_| ())),
        ("custom_vjp", |v, _| {
            let f = qb::custom_vjp(loss).defvjp(
                |v: Value| Ok((loss(v.clone())?, leaf_of(&v))),
                |(x, g): (Tensor, Tensor)| Ok(nest_like(x.cos()?.mul(&g)?)),
            );
            let g: Value = qb::grad(|v: Value| f.call(&v)).call(v)?;
            dismantle(g);
            Ok(())
        }),
        ("checkpoint", |v, _| {
            let f = qb::checkpoint(loss);
            let g: Value = qb::grad(|v: Value| f.call(&v)).call(v)?;
            dismantle(g);
            Ok(())
        }),
        ("optimizer update", |v, _| {
            use qb::optim::Optimizer;
            let sgd = qb::optim::Sgd::new(0.1);
            let state = sgd.init(v)?;
            let (p, _) = sgd.update(v, v, &state)?;
            dismantle(p);
            Ok(())
        }),
        // The deep tree is built inside a transform, from its tracer.
        ("inside jit", |_, depth| {
            let inner = qb::jit(loss);
            let y = qb::jit(|x: Tensor| {
                let deep = nest(depth, Value::Array(x));
                let out = inner.call(&deep);
                dismantle(deep);
                out
            })
            .call(&x())?;
            close(y, 2.0f64.sin() + 1.0f64.sin());
            Ok(())
        }),
        ("inside grad", |_, depth| {
            let g: Tensor = qb::grad(|x: Tensor| {
                let deep = nest(depth, Value::Array(x));
                let out: qb::Result<Tensor> = qb::jit(loss).call(&deep);
                dismantle(deep);
                out
            })
            .call(&x())?;
            assert_eq!(g.to_vec::<f64>()?, [1.0f64.cos(), 2.0f64.cos()]);
            Ok(())
        }),
        ("inside vmap", |_, depth| {
            let y: Tensor = qb::vmap(|x: Tensor| {
                let deep = nest(depth, Value::Array(x));
                let out = qb::tree::map(&deep, |t| t.sin());
                dismantle(deep);
                Ok(leaf_of(&out?))
            })
            .call(&x())?;
            assert_eq!(y.to_vec::<f64>()?, [1.0f64.sin(), 2.0f64.sin()]);
            Ok(())
        }),
        ("a jitted function returning a deep tree", |_, depth| {
            let out: Value = qb::jit(|x: Tensor| Ok(nest(depth, Value::Array(x)))).call(&x())?;
            dismantle(out);
            Ok(())
        }),
        ("a recursive derived struct", |_, depth| {
            // Each link is two containers (the struct and its `next` list).
            let c = chain(depth.div_ceil(2));
            let result = qb::jit(|c: Link| {
                let mut link = &c;
                while let Some(next) = link.next.first() {
                    link = next;
                }
                link.x.clone().unwrap().sum()
            })
            .call(&c);
            let saved = qb::save(&mut Vec::new(), &c);
            drop_chain(c);
            result?;
            saved
        }),
    ]
}

/// A cotangent with the structure `custom_vjp`'s `bwd` must return: the argument tree (one
/// tensor leaf) built around `g`.
fn nest_like(g: Tensor) -> Value {
    DEPTH.with(|d| nest(d.get(), Value::Array(g)))
}

thread_local! {
    static DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn close(y: Tensor, expected: f64) {
    let v = y.item().unwrap();
    assert!((v - expected).abs() < 1e-12, "{v} vs {expected}");
}

#[test]
fn deep_trees_child() {
    if std::env::var_os("QB_DEEP_TREES_CHILD").is_none() {
        return;
    }
    let depths = [
        1,
        100,
        MAX_DEPTH,
        MAX_DEPTH + 1,
        1_000,
        10_000,
        100_000,
        1_000_000,
    ];
    let mut failures = Vec::new();
    for depth in depths {
        DEPTH.with(|d| d.set(depth));
        let deep = nest(depth, Value::Array(x()));
        for (name, case) in cases() {
            eprintln!("{name} at depth {depth}");
            let result = case(&deep, depth);
            let ok = match (&result, depth <= MAX_DEPTH) {
                (Ok(()), true) => true,
                (Err(Error::Structure { message }), false) => {
                    message.contains(&format!("more than {MAX_DEPTH} deep"))
                }
                _ => false,
            };
            if !ok {
                failures.push(format!("{name} at depth {depth}: {result:?}"));
            }
        }
        dismantle(deep);
        println!("depth {depth} done");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn deep_trees_are_refused_at_every_depth_by_every_api() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "deep_trees_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("QB_DEEP_TREES_CHILD", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the child failed ({}):\n{text}",
        out.status
    );
    assert!(text.contains("depth 1000000 done"), "{text}");
}

#[test]
fn the_limit_is_the_file_formats_and_the_refusal_prints_in_the_structure() {
    assert_eq!(MAX_DEPTH, 128);
    // The deepest tree saves and loads back; one level more is refused before writing.
    let lists = |depth: usize| (0..depth).fold(Value::Int(7), |v, _| Value::List(vec![v]));
    let deepest = lists(MAX_DEPTH);
    let mut bytes = Vec::new();
    qb::save(&mut bytes, &deepest).unwrap();
    let back = qb::load(&mut bytes.as_slice()).unwrap();
    assert_eq!(
        qb::tree::structure(&back),
        qb::tree::structure(&deepest),
        "round trip"
    );
    let deeper = lists(MAX_DEPTH + 1);
    let mut bytes = Vec::new();
    let err = qb::save(&mut bytes, &deeper).unwrap_err();
    assert!(matches!(err, Error::Structure { .. }), "{err:?}");
    assert!(bytes.is_empty());
    // `structure` cannot fail: the part past the limit prints as a refusal.
    let text = qb::tree::structure(&deeper).to_string();
    assert!(
        text.contains("<refused: pytree nests containers more than 128 deep"),
        "{text}"
    );
    assert_eq!(qb::tree::leaves(&deeper).len(), 0);
}
