//! `#[derive(Tree)]`: declaration-order data fields, `#[tree(static)]` meta fields, tuple, unit
//! and generic structs, structure checks on unflatten (acceptance example E62 and api.md §13).

use proptest::prelude::*;
use qb::tree::{Leaf, PathEntry, StaticBox, Tree, TreeDef};
use qb::Tensor;
use quabla as qb;
use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

#[derive(Clone, Debug, qb::Tree)]
struct Layer {
    w: Tensor,
    b: Tensor,
}

#[derive(Clone, Debug, qb::Tree)]
struct Mlp {
    layers: Vec<Layer>,
    #[tree(static)]
    activation: String,
}

#[derive(Clone, Debug, qb::Tree)]
struct Pair(Tensor, #[tree(static)] usize, f64);

#[derive(Clone, Debug, PartialEq, qb::Tree)]
struct Unit;

#[derive(Clone, Debug, qb::Tree)]
struct Wrapper<T, S> {
    value: T,
    #[tree(static)]
    tag: S,
    extra: Option<T>,
}

#[derive(Clone, Debug, qb::Tree)]
struct Bounded<'a, T: Clone, const N: usize>
where
    T: std::fmt::Debug,
{
    items: [T; N],
    #[tree(static)]
    label: &'a str,
}

#[derive(Clone, Debug, qb::Tree)]
struct Raw {
    r#type: f64,
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

fn assert_same(a: &Tensor, b: &Tensor) {
    assert_eq!(a.shape(), b.shape());
    assert_eq!(a.dtype(), b.dtype());
    assert_eq!(values(a), values(b));
}

fn model(activation: &str) -> Mlp {
    Mlp {
        layers: vec![
            Layer {
                w: qb::ones([2, 2]).unwrap(),
                b: qb::zeros([2]).unwrap(),
            },
            Layer {
                w: qb::array([[1.5], [-2.0]]).unwrap(),
                b: qb::array([0.25]).unwrap(),
            },
        ],
        activation: activation.to_string(),
    }
}

fn path_string(path: &[PathEntry]) -> String {
    path.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("/")
}

fn hash_of(def: &TreeDef) -> u64 {
    let mut h = DefaultHasher::new();
    def.hash(&mut h);
    h.finish()
}

#[test]
fn e62_paths_in_declaration_order() {
    let (leaves, def) = qb::tree::flatten_with_path(&model("tanh"));
    let paths: Vec<String> = leaves.iter().map(|(p, _)| path_string(p)).collect();
    assert_eq!(
        paths,
        ["layers/0/w", "layers/0/b", "layers/1/w", "layers/1/b"]
    );
    assert_eq!(
        leaves[0].0,
        [
            PathEntry::Key("layers".into()),
            PathEntry::Index(0),
            PathEntry::Key("w".into())
        ]
    );
    assert_eq!(def.num_leaves(), 4);
    assert!(leaves.iter().all(|(_, l)| l.as_tensor().is_some()));
}

#[test]
fn e62_treedef_display_and_shape() {
    let def = qb::tree::structure(&model("tanh"));
    assert_eq!(
        def.to_string(),
        r#"TreeDef(Mlp(layers=[Layer(w=*, b=*), Layer(w=*, b=*)], activation="tanh"))"#
    );
    match &def {
        TreeDef::Node { name, fields, meta } => {
            assert_eq!(*name, "Mlp");
            assert_eq!(fields.len(), 1);
            assert_eq!(fields[0].0, "layers");
            assert_eq!(meta.len(), 1);
            assert_eq!(meta[0].0, "activation");
            assert_eq!(meta[0].1.get::<String>().as_deref(), Some("tanh"));
        }
        other => panic!("expected a node, got {other:?}"),
    }
}

#[test]
fn e62_round_trip() -> qb::Result<()> {
    let m = model("tanh");
    let (leaves, def) = qb::tree::flatten(&m);
    let back: Mlp = qb::tree::unflatten(&def, leaves)?;
    assert_eq!(back.activation, "tanh");
    assert_eq!(back.layers.len(), 2);
    for (a, b) in m.layers.iter().zip(&back.layers) {
        assert_same(&a.w, &b.w);
        assert_same(&a.b, &b.b);
    }
    // map keeps the type, the static field and the order of the leaves.
    let doubled = qb::tree::map(&m, |t| t * 2.0)?;
    assert_eq!(doubled.activation, "tanh");
    assert_eq!(values(&doubled.layers[1].w), [3.0, -4.0]);
    assert_eq!(values(&doubled.layers[1].b), [0.5]);
    Ok(())
}

#[test]
fn e62_static_field_is_part_of_the_structure() {
    let tanh = qb::tree::structure(&model("tanh"));
    let tanh2 = qb::tree::structure(&model("tanh"));
    let relu = qb::tree::structure(&model("relu"));
    assert_eq!(tanh, tanh2);
    assert_eq!(hash_of(&tanh), hash_of(&tanh2));
    assert_ne!(tanh, relu);
    assert_ne!(hash_of(&tanh), hash_of(&relu));
    assert!(relu.to_string().contains(r#"activation="relu""#));
    // Same static field, different leaf structure.
    let mut shorter = model("tanh");
    shorter.layers.pop();
    assert_ne!(qb::tree::structure(&shorter), tanh);
}

fn expect_structure_error<T: Tree + std::fmt::Debug>(def: &TreeDef, leaves: Vec<Leaf>) {
    let err = qb::tree::unflatten::<T>(def, leaves).expect_err("structure should not fit");
    assert!(
        err.to_string().contains("pytree structures differ"),
        "unexpected message: {err}"
    );
}

#[test]
fn unflatten_rejects_other_structures() {
    let m = model("tanh");
    let (leaves, def) = qb::tree::flatten(&m);

    // Another struct's node, a plain container, a leaf.
    let (layer_leaves, layer_def) = qb::tree::flatten(&m.layers[0]);
    expect_structure_error::<Mlp>(&layer_def, layer_leaves.clone());
    expect_structure_error::<Layer>(&def, leaves.clone());
    let (list_leaves, list_def) = qb::tree::flatten(&m.layers);
    expect_structure_error::<Mlp>(&list_def, list_leaves);
    expect_structure_error::<Layer>(&TreeDef::Leaf, vec![layer_leaves[0].clone()]);

    let node =
        |name: &'static str,
         fields: Vec<(&'static str, TreeDef)>,
         meta: Vec<(&'static str, StaticBox)>| TreeDef::Node { name, fields, meta };
    let layer_fields = || vec![("w", TreeDef::Leaf), ("b", TreeDef::Leaf)];
    let two = layer_leaves.clone();

    // The same fields under another name, swapped, missing or extra.
    expect_structure_error::<Layer>(&node("Other", layer_fields(), vec![]), two.clone());
    let swapped = vec![("b", TreeDef::Leaf), ("w", TreeDef::Leaf)];
    expect_structure_error::<Layer>(&node("Layer", swapped, vec![]), two.clone());
    let missing = vec![("w", TreeDef::Leaf)];
    expect_structure_error::<Layer>(&node("Layer", missing, vec![]), vec![two[0].clone()]);
    let mut extra = layer_fields();
    extra.push(("c", TreeDef::Leaf));
    let mut three = two.clone();
    three.push(two[0].clone());
    expect_structure_error::<Layer>(&node("Layer", extra, vec![]), three);

    // Meta fields: unexpected, missing, renamed, or of another type.
    let meta = vec![("activation", StaticBox::new("tanh".to_string()))];
    expect_structure_error::<Layer>(&node("Layer", layer_fields(), meta), two.clone());
    let mlp_fields = || vec![("layers", qb::tree::structure(&m.layers))];
    expect_structure_error::<Mlp>(&node("Mlp", mlp_fields(), vec![]), leaves.clone());
    let renamed = vec![("act", StaticBox::new("tanh".to_string()))];
    expect_structure_error::<Mlp>(&node("Mlp", mlp_fields(), renamed), leaves.clone());
    let wrong_type = vec![("activation", StaticBox::new(3usize))];
    expect_structure_error::<Mlp>(&node("Mlp", mlp_fields(), wrong_type), leaves.clone());

    // A nested mismatch is reported too.
    let nested = node(
        "Mlp",
        vec![("layers", TreeDef::List(vec![TreeDef::Leaf; 4]))],
        vec![("activation", StaticBox::new("tanh".to_string()))],
    );
    expect_structure_error::<Mlp>(&nested, leaves.clone());

    // The matching hand-built structure works.
    let good = node(
        "Mlp",
        mlp_fields(),
        vec![("activation", StaticBox::new("tanh".to_string()))],
    );
    assert_eq!(good, def);
    let back: Mlp = qb::tree::unflatten(&good, leaves).unwrap();
    assert_eq!(back.activation, "tanh");
}

#[test]
fn tuple_struct_fields_are_positions() -> qb::Result<()> {
    let p = Pair(qb::array([1.0, 2.0])?, 7, 0.5);
    let (leaves, def) = qb::tree::flatten_with_path(&p);
    let paths: Vec<String> = leaves.iter().map(|(p, _)| path_string(p)).collect();
    assert_eq!(paths, ["0", "2"]);
    assert_eq!(def.to_string(), "TreeDef(Pair(0=*, 2=*, 1=7))");
    let (leaves, def) = qb::tree::flatten(&p);
    assert!(matches!(leaves[1], Leaf::F64(v) if v == 0.5));
    let back: Pair = def.unflatten(leaves)?;
    assert_same(&back.0, &p.0);
    assert_eq!(back.1, 7);
    assert_eq!(back.2, 0.5);
    assert_ne!(def, qb::tree::structure(&Pair(p.0.clone(), 8, 0.5)));
    Ok(())
}

#[test]
fn unit_struct_has_no_leaves() -> qb::Result<()> {
    let (leaves, def) = qb::tree::flatten(&Unit);
    assert!(leaves.is_empty());
    assert_eq!(def.to_string(), "TreeDef(Unit())");
    assert_eq!(qb::tree::unflatten::<Unit>(&def, vec![])?, Unit);
    expect_structure_error::<Unit>(&TreeDef::None, vec![]);
    Ok(())
}

#[test]
fn generic_structs() -> qb::Result<()> {
    let w = Wrapper {
        value: (1.5, qb::array([3.0])?),
        tag: 4u32,
        extra: None,
    };
    let (leaves, def) = qb::tree::flatten_with_path(&w);
    let paths: Vec<String> = leaves.iter().map(|(p, _)| path_string(p)).collect();
    assert_eq!(paths, ["value/0", "value/1"]);
    assert_eq!(
        def.to_string(),
        "TreeDef(Wrapper(value=(*, *), extra=None, tag=4))"
    );
    let back: Wrapper<(f64, Tensor), u32> =
        def.unflatten(leaves.into_iter().map(|(_, l)| l).collect())?;
    assert_eq!(back.value.0, 1.5);
    assert_same(&back.value.1, &w.value.1);
    assert_eq!(back.tag, 4);
    assert!(back.extra.is_none());

    // Another instantiation of the same struct.
    let t = Wrapper {
        value: qb::zeros([3])?,
        tag: "tag",
        extra: Some(qb::ones([1])?),
    };
    let (leaves, def) = qb::tree::flatten(&t);
    assert_eq!(
        def.to_string(),
        r#"TreeDef(Wrapper(value=*, extra=*, tag="tag"))"#
    );
    let back: Wrapper<Tensor, &'static str> = def.unflatten(leaves.clone())?;
    assert_eq!(back.tag, "tag");
    assert_same(back.extra.as_ref().unwrap(), t.extra.as_ref().unwrap());
    // The static value must have the field's type.
    expect_structure_error::<Wrapper<Tensor, String>>(&def, leaves);

    // Lifetimes, const parameters, inline bounds and where clauses are kept.
    let b = Bounded {
        items: [1.0, 2.0, 3.0],
        label: "three",
    };
    let (leaves, def) = qb::tree::flatten(&b);
    assert_eq!(
        def.to_string(),
        r#"TreeDef(Bounded(items=[*, *, *], label="three"))"#
    );
    let back: Bounded<'static, f64, 3> = def.unflatten(leaves)?;
    assert_eq!(back.items, [1.0, 2.0, 3.0]);
    assert_eq!(back.label, "three");
    Ok(())
}

#[test]
fn raw_identifiers_lose_their_prefix() -> qb::Result<()> {
    let (leaves, def) = qb::tree::flatten(&Raw { r#type: 2.0 });
    assert_eq!(def.to_string(), "TreeDef(Raw(type=*))");
    assert_eq!(def.unflatten::<Raw>(leaves)?.r#type, 2.0);
    Ok(())
}

#[derive(Clone, Debug, qb::Tree)]
struct Batch {
    items: Vec<BTreeMap<String, (Tensor, f64)>>,
    #[tree(static)]
    label: String,
    scale: Option<f64>,
}

type Entry = (Vec<f64>, f64);

fn batch_strategy() -> impl Strategy<Value = (Vec<BTreeMap<String, Entry>>, String, Option<f64>)> {
    let entry = (prop::collection::vec(-1e3f64..1e3, 1..4), -1e3f64..1e3);
    let dict = prop::collection::btree_map("[a-c]{1,2}", entry, 0..3);
    (
        prop::collection::vec(dict, 0..4),
        "[a-z]{0,4}",
        prop::option::of(-10.0f64..10.0),
    )
}

fn build(items: &[BTreeMap<String, Entry>], label: &str, scale: Option<f64>) -> Batch {
    Batch {
        items: items
            .iter()
            .map(|d| {
                d.iter()
                    .map(|(k, (v, s))| (k.clone(), (qb::array(v.clone()).unwrap(), *s)))
                    .collect()
            })
            .collect(),
        label: label.to_string(),
        scale,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn flatten_unflatten_round_trip((items, label, scale) in batch_strategy()) {
        let batch = build(&items, &label, scale);
        let (leaves, def) = qb::tree::flatten(&batch);
        let expected: usize =
            items.iter().map(|d| 2 * d.len()).sum::<usize>() + usize::from(scale.is_some());
        prop_assert_eq!(leaves.len(), expected);
        prop_assert_eq!(def.num_leaves(), expected);
        prop_assert_eq!(&def, &qb::tree::structure(&build(&items, &label, scale)));

        let back: Batch = qb::tree::unflatten(&def, leaves).unwrap();
        prop_assert_eq!(&back.label, &label);
        prop_assert_eq!(back.scale, scale);
        prop_assert_eq!(back.items.len(), items.len());
        for (got, want) in back.items.iter().zip(&items) {
            prop_assert_eq!(got.len(), want.len());
            for ((gk, (gt, gs)), (wk, (wv, ws))) in got.iter().zip(want) {
                prop_assert_eq!(gk, wk);
                prop_assert_eq!(&gt.to_vec::<f64>().unwrap(), wv);
                prop_assert_eq!(gt.shape(), &[wv.len()][..]);
                prop_assert_eq!(gs, ws);
            }
        }

        // Another label is another structure.
        let other = qb::tree::structure(&build(&items, &format!("{label}!"), scale));
        prop_assert_ne!(&def, &other);
    }
}
