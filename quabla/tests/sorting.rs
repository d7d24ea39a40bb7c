//! The order and counting functions (`argmax`, `argmin`, `sort`, `argsort`, `top_k`,
//! `searchsorted`, `one_hot`, `bincount`, `cumprod`) against references written here with
//! Rust's own stable sort and loops: NaN, signed zeros, ties, infinities and the integer
//! extremes; eagerly and under `jit` with the same bits; under `vmap` against a loop; and
//! their derivatives (the permutation of the tangent) against finite differences to third
//! order.

use qb::prelude::*;
use qb::testing::{check_grads, Modes};
use qb::Tensor;
use quabla as qb;
use std::cmp::Ordering;

/// NumPy's total order: NaN last, all NaNs equal, `-0.0 == 0.0`.
fn total(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap(),
    }
}

/// The stable argsort of `v` in the total order (descending keeps ties in index order).
fn ref_argsort(v: &[f64], descending: bool) -> Vec<i64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&i, &j| {
        let o = total(v[i], v[j]);
        if descending {
            o.reverse()
        } else {
            o
        }
    });
    idx.into_iter().map(|i| i as i64).collect()
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

const AWKWARD: [f64; 10] = [
    3.0,
    f64::NAN,
    -0.0,
    1.5,
    f64::NEG_INFINITY,
    0.0,
    1.5,
    f64::INFINITY,
    -2.0,
    f64::NAN,
];

#[test]
fn sort_and_argsort_follow_the_stable_total_order() -> qb::Result<()> {
    let x = qb::array(AWKWARD)?;
    for descending in [false, true] {
        let want = ref_argsort(&AWKWARD, descending);
        let got = qb::argsort(&x).descending(descending).eval()?;
        assert_eq!(got.dtype(), qb::I64);
        assert_eq!(got.to_vec::<i64>()?, want, "descending={descending}");
        let sorted: Vec<f64> = want.iter().map(|&i| AWKWARD[i as usize]).collect();
        let values = qb::sort(&x).descending(descending).eval()?;
        // Bit for bit: NaNs in place, -0.0 kept before 0.0 (stable).
        assert_eq!(
            bits(&values.to_vec::<f64>()?),
            bits(&sorted),
            "descending={descending}"
        );
    }
    // Along either axis of a matrix, and flattened.
    let m: Vec<f64> = (0..12)
        .map(|k| ((k * 7) % 5) as f64 - (k % 3) as f64)
        .collect();
    let mt = Tensor::from_vec([3, 4], m.clone())?;
    let rows = qb::sort(&mt).eval()?.to_vec::<f64>()?;
    let cols = qb::argsort(&mt).axis(0).eval()?;
    assert_eq!(cols.shape(), &[3, 4]);
    for r in 0..3 {
        let row = &m[4 * r..4 * r + 4];
        let mut s = row.to_vec();
        s.sort_by(|a, b| total(*a, *b));
        assert_eq!(&rows[4 * r..4 * r + 4], &s[..]);
    }
    for c in 0..4 {
        let col: Vec<f64> = (0..3).map(|r| m[4 * r + c]).collect();
        let want = ref_argsort(&col, false);
        let got: Vec<i64> = (0..3)
            .map(|r| cols.to_vec::<i64>().unwrap()[4 * r + c])
            .collect();
        assert_eq!(got, want, "column {c}");
    }
    let flat = qb::sort(&mt).flattened().eval()?;
    let mut all = m.clone();
    all.sort_by(|a, b| total(*a, *b));
    assert_eq!(flat.to_vec::<f64>()?, all);
    // Integers at their extremes, float32, bools.
    let ints = [i64::MAX, -1, i64::MIN, 0, -1, 7];
    let got = qb::sort(&qb::array(ints)?).eval()?.to_vec::<i64>()?;
    let mut want = ints.to_vec();
    want.sort();
    assert_eq!(got, want);
    let i32s = qb::array([i32::MIN, i32::MAX, 3, -3])?;
    let s = qb::sort(&i32s).descending(true).eval()?;
    assert_eq!(
        (s.dtype(), s.to_vec::<i32>()?),
        (qb::I32, vec![i32::MAX, 3, -3, i32::MIN])
    );
    let f32s = qb::F32.array([2.5, -1.0, 0.25])?;
    assert_eq!(qb::sort(&f32s).eval()?.dtype(), qb::F32);
    let b = qb::sort(&qb::array([true, false, true])?).eval()?;
    assert_eq!(b.to_vec_bool()?, [false, true, true]);
    // A rank-0 tensor has no axis to sort.
    assert!(qb::sort(&qb::array(1.0)?).eval().is_err());
    Ok(())
}

#[test]
fn argmax_and_argmin_give_the_first_extremum() -> qb::Result<()> {
    let x = qb::array([[1.0, 5.0, 5.0, -2.0], [f64::NAN, 0.0, f64::NAN, -7.0]])?;
    assert_eq!(qb::argmax(&x).axis(1).eval()?.to_vec::<i64>()?, [1, 0]);
    assert_eq!(qb::argmin(&x).axis(1).eval()?.to_vec::<i64>()?, [3, 0]);
    assert_eq!(
        qb::argmax(&x).axis(0).eval()?.to_vec::<i64>()?,
        [1, 0, 1, 0]
    );
    // Flattened: the first NaN wins both.
    assert_eq!(qb::argmax(&x).eval()?.item_i64()?, 4);
    assert_eq!(qb::argmin(&x).eval()?.item_i64()?, 4);
    let k = qb::argmax(&x).axis(-1).keepdims(true).eval()?;
    assert_eq!((k.dtype(), k.shape()), (qb::I64, &[2usize, 1][..]));
    assert_eq!(qb::argmax(&x).keepdims(true).eval()?.shape(), &[1, 1]);
    let ints = qb::array([i64::MIN, i64::MAX, i64::MAX, i64::MIN])?;
    assert_eq!(qb::argmax(&ints).eval()?.item_i64()?, 1);
    assert_eq!(qb::argmin(&ints).eval()?.item_i64()?, 0);
    assert_eq!(
        qb::argmax(&qb::array([false, true, true])?)
            .eval()?
            .item_i64()?,
        1
    );
    assert!(qb::argmax(&x).axis(2).eval().is_err());
    Ok(())
}

#[test]
fn top_k_is_the_head_of_the_descending_sort() -> qb::Result<()> {
    let x = qb::array(AWKWARD)?;
    let order = ref_argsort(&AWKWARD, true);
    for k in [1, 4, AWKWARD.len()] {
        let (values, indices) = qb::top_k(&x, k)?;
        assert_eq!(indices.to_vec::<i64>()?, order[..k]);
        let want: Vec<f64> = order[..k].iter().map(|&i| AWKWARD[i as usize]).collect();
        assert_eq!(bits(&values.to_vec::<f64>()?), bits(&want));
    }
    // Batched over leading axes; integers.
    let m = qb::array([[3i64, 9, 9, -1], [i64::MIN, 0, i64::MAX, 5]])?;
    let (v, i) = qb::top_k(&m, 2)?;
    assert_eq!(v.to_vec::<i64>()?, [9, 9, i64::MAX, 5]);
    assert_eq!(i.to_vec::<i64>()?, [1, 2, 2, 3]);
    // Both ways of finding the top (k passes up to k = 16, a full ranking beyond) on a long
    // row with repeated values, NaNs and several -inf.
    let long: Vec<f64> = (0..40)
        .map(|k| match k % 9 {
            0 => f64::NEG_INFINITY,
            4 => f64::NAN,
            r => ((r * 5) % 7) as f64 - 3.0,
        })
        .collect();
    let order = ref_argsort(&long, true);
    let lt = qb::array(long.clone())?;
    for k in [15, 16, 17, 33, 40] {
        let (values, indices) = qb::top_k(&lt, k)?;
        assert_eq!(indices.to_vec::<i64>()?, order[..k], "k={k}");
        let want: Vec<f64> = order[..k].iter().map(|&i| long[i as usize]).collect();
        assert_eq!(bits(&values.to_vec::<f64>()?), bits(&want), "k={k}");
    }
    assert!(qb::top_k(&x, 0).is_err());
    assert!(qb::top_k(&x, 11).is_err());
    Ok(())
}

#[test]
fn searchsorted_counts_the_elements_before() -> qb::Result<()> {
    let edges = [-1.0, 0.0, 0.0, 2.5, f64::INFINITY, f64::NAN];
    let values = [
        -5.0,
        -1.0,
        0.0,
        -0.0,
        1.0,
        2.5,
        9.0,
        f64::INFINITY,
        f64::NAN,
    ];
    let a = qb::array(edges)?;
    let v = qb::array(values)?;
    let left = qb::searchsorted(&a, &v).eval()?.to_vec::<i64>()?;
    let right = qb::searchsorted(&a, &v)
        .side(qb::Side::Right)
        .eval()?
        .to_vec::<i64>()?;
    for (k, &x) in values.iter().enumerate() {
        let l = edges.partition_point(|&e| total(e, x) == Ordering::Less);
        let r = edges.partition_point(|&e| total(e, x) != Ordering::Greater);
        assert_eq!((left[k], right[k]), (l as i64, r as i64), "value {x}");
    }
    // The values' shape is kept; integers search integers.
    let grid = qb::array([[1i64, 4], [6, 10]])?;
    let at = qb::searchsorted(&qb::array([0i64, 2, 4, 6, 8])?, &grid).eval()?;
    assert_eq!(
        (at.shape(), at.to_vec::<i64>()?),
        (&[2usize, 2][..], vec![1, 2, 3, 5])
    );
    assert!(qb::searchsorted(&qb::zeros([2, 2])?, &v).eval().is_err());
    Ok(())
}

#[test]
fn one_hot_and_bincount() -> qb::Result<()> {
    let labels = qb::array([2i64, 0, -1, 3, 2])?;
    let h = qb::one_hot(&labels, 3).eval()?;
    assert_eq!((h.dtype(), h.shape()), (qb::F64, &[5usize, 3][..]));
    assert_eq!(
        h.to_vec::<f64>()?,
        [0., 0., 1., 1., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 1.]
    );
    let h32 = qb::one_hot(&qb::array([[1i32]])?, 2)
        .dtype(qb::F32)
        .eval()?;
    assert_eq!((h32.dtype(), h32.shape()), (qb::F32, &[1usize, 1, 2][..]));
    // Negative values count as 0, values past the length are dropped (JAX).
    let c = qb::bincount(&labels, 3).eval()?;
    assert_eq!((c.dtype(), c.to_vec::<i64>()?), (qb::I64, vec![2, 0, 2]));
    let w = qb::array([0.5, 1.0, 2.0, 4.0, 8.0])?;
    let s = qb::bincount(&labels, 4).weights(&w).eval()?;
    assert_eq!(s.to_vec::<f64>()?, [3.0, 0.0, 8.5, 4.0]);
    // Float values are refused with the fix; so are matrices.
    let e = qb::bincount(&qb::array([1.0])?, 2).eval().unwrap_err();
    assert!(e.to_string().contains("astype"), "{e}");
    assert!(qb::bincount(&qb::array([[1i64]])?, 2).eval().is_err());
    Ok(())
}

#[test]
fn cumprod_wraps_integers_and_rounds_floats_closely() -> qb::Result<()> {
    let ints = [3i64, -7, i64::MAX, 2, 0, 5, -1];
    let mut acc = 1i64;
    let want: Vec<i64> = ints
        .iter()
        .map(|&v| {
            acc = acc.wrapping_mul(v);
            acc
        })
        .collect();
    assert_eq!(
        qb::cumprod(&qb::array(ints)?).eval()?.to_vec::<i64>()?,
        want
    );
    let i32s = [i32::MAX, 3, -2];
    let got = qb::cumprod(&qb::array(i32s)?).eval()?;
    assert_eq!(got.dtype(), qb::I32);
    assert_eq!(
        got.to_vec::<i32>()?,
        [
            i32::MAX,
            i32::MAX.wrapping_mul(3),
            i32::MAX.wrapping_mul(3).wrapping_mul(-2)
        ]
    );
    // Floats along an axis, forwards and reversed, against the sequential product.
    let m: Vec<f64> = (1..=15).map(|k| 1.0 + 0.1 * k as f64).collect();
    let t = Tensor::from_vec([3, 5], m.clone())?;
    for reverse in [false, true] {
        let got = qb::cumprod(&t)
            .axis(1)
            .reverse(reverse)
            .eval()?
            .to_vec::<f64>()?;
        for r in 0..3 {
            let row = &m[5 * r..5 * r + 5];
            for c in 0..5 {
                let range: Vec<f64> = if reverse {
                    row[c..].to_vec()
                } else {
                    row[..=c].to_vec()
                };
                let seq: f64 = range.iter().product();
                let g = got[5 * r + c];
                assert!(
                    (g - seq).abs() <= 4.0 * f64::EPSILON * seq.abs(),
                    "{g} {seq}"
                );
            }
        }
    }
    assert_eq!(
        qb::cumprod(&qb::array([2.0, 0.0, f64::INFINITY])?)
            .eval()?
            .to_vec::<f64>()?[..2],
        [2.0, 0.0]
    );
    assert!(qb::cumprod(&qb::array([true])?).eval().is_err());
    Ok(())
}

type Case = fn(&Tensor) -> qb::Result<Tensor>;

/// The functions of this file on one array, each giving one tensor.
fn cases() -> Vec<(&'static str, Case)> {
    vec![
        ("sort", |x| qb::sort(x).eval()),
        ("sort_desc_axis0", |x| {
            qb::sort(x).axis(0).descending(true).eval()
        }),
        ("argsort", |x| qb::argsort(x).eval()),
        ("argmax", |x| qb::argmax(x).axis(1).eval()),
        ("argmin", |x| qb::argmin(x).eval()),
        ("top_k_values", |x| Ok(qb::top_k(x, 2)?.0)),
        ("top_k_indices", |x| Ok(qb::top_k(x, 2)?.1)),
        ("searchsorted", |x| {
            qb::searchsorted(&qb::array([-1.0, 0.5, 2.0])?, x).eval()
        }),
        ("cumprod", |x| qb::cumprod(x).axis(1).eval()),
        ("one_hot", |x| qb::one_hot(&x.astype(qb::I64)?, 3).eval()),
        ("bincount", |x| {
            qb::bincount(&x.astype(qb::I64)?.ravel()?, 4).eval()
        }),
    ]
}

fn same_bits(a: &Tensor, b: &Tensor, what: &str) -> qb::Result<()> {
    assert_eq!((a.dtype(), a.shape()), (b.dtype(), b.shape()), "{what}");
    if a.dtype().is_integer() {
        assert_eq!(a.to_vec::<i64>()?, b.to_vec::<i64>()?, "{what}");
    } else {
        assert_eq!(
            bits(&a.astype(qb::F64)?.to_vec::<f64>()?),
            bits(&b.astype(qb::F64)?.to_vec::<f64>()?),
            "{what}"
        );
    }
    Ok(())
}

#[test]
fn jit_gives_the_eager_bits_and_vmap_matches_a_loop() -> qb::Result<()> {
    let x = qb::array([[2.5, -0.0, f64::NAN], [1.0, 1.0, -3.0]])?;
    for (name, f) in cases() {
        let eager = f(&x)?;
        let jitted: Tensor = qb::jit(move |t: Tensor| f(&t)).call(&x)?;
        same_bits(&eager, &jitted, name)?;
    }
    // vmap over a leading batch axis against the same function per example.
    let batch = Tensor::from_vec(
        [3, 2, 3],
        vec![
            0.5, 2.0, -1.0, 1.0, 1.0, 0.0, //
            3.0, -2.0, 2.0, 0.5, -0.5, 2.0, //
            1.0, 1.0, 1.0, -1.0, 2.0, 0.0,
        ],
    )?;
    for (name, f) in cases() {
        let batched: Tensor = qb::vmap(move |t: Tensor| f(&t)).call(&batch)?;
        for i in 0..3 {
            let one = f(&batch.index(qb::s![i])?)?;
            same_bits(&batched.index(qb::s![i])?, &one, name)?;
        }
    }
    Ok(())
}

#[test]
fn derivatives_permute_the_tangent() -> qb::Result<()> {
    let x = qb::array([[0.3, -1.2, 0.7, 2.0], [1.1, 0.4, -0.5, 0.9]])?;
    type F = fn(&Tensor) -> qb::Result<Tensor>;
    let fs: [(&str, F); 4] = [
        ("sort", |x| {
            qb::sort(x)
                .eval()?
                .mul(&qb::array([1.0, 2.0, 3.0, 4.0])?)?
                .tanh()
        }),
        ("sort_axis0_desc", |x| {
            qb::sort(x).axis(0).descending(true).eval()?.sin()
        }),
        ("top_k", |x| qb::top_k(x, 3)?.0.powi(3)),
        ("cumprod", |x| qb::cumprod(x).axis(1).reverse(true).eval()),
    ];
    for (name, f) in fs {
        check_grads(
            |v: Vec<Tensor>| Ok(vec![f(&v[0])?]),
            std::slice::from_ref(&x),
            3,
            Modes::BOTH,
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // The gradient of the sum of the k largest is the indicator of their positions.
    let g: Tensor =
        qb::grad(|x: Tensor| qb::top_k(&x, 2)?.0.sum()).call(&qb::array([0.1, 3.0, -1.0, 2.0])?)?;
    assert_eq!(g.to_vec::<f64>()?, [0.0, 1.0, 0.0, 1.0]);
    // Integer results carry no derivative: argmax inside a loss contributes nothing.
    let h: Tensor = qb::grad(|x: Tensor| {
        let i = qb::argmax(&x).eval()?.astype(qb::F64)?;
        (&x * &i)?.sum()
    })
    .call(&qb::array([0.1, 3.0, -1.0])?)?;
    assert_eq!(h.to_vec::<f64>()?, [1.0, 1.0, 1.0]);
    Ok(())
}

#[test]
fn sort_is_argsort_then_a_gather() -> qb::Result<()> {
    // The values are the input's own elements moved, bit for bit: NaN payloads and the signs
    // of zeros survive (a gather moves bits, it computes nothing).
    let payload = f64::from_bits(0x7FF8_0000_0000_0123);
    let vals = [1.5, payload, -0.0, 0.0, -2.0, -0.0, f64::NEG_INFINITY];
    let x = qb::array(vals)?;
    for descending in [false, true] {
        let perm = qb::argsort(&x).descending(descending).eval()?;
        let gathered = qb::take_along_axis(&x, &perm, 0)?;
        let sorted = qb::sort(&x).descending(descending).eval()?;
        assert_eq!(
            bits(&sorted.to_vec::<f64>()?),
            bits(&gathered.to_vec::<f64>()?)
        );
        let want: Vec<f64> = ref_argsort(&vals, descending)
            .iter()
            .map(|&i| vals[i as usize])
            .collect();
        assert_eq!(bits(&sorted.to_vec::<f64>()?), bits(&want));
    }
    // The traced form is one scatter (the inverse of the ranks) and one gather; its reverse
    // derivative scatters the cotangent back.
    let text = qb::jit(|x: Tensor| qb::sort(&x).eval())
        .lower(&x)?
        .as_text();
    assert!(text.contains("index_gather"), "{text}");
    let grad_text = qb::jit(|x: Tensor| -> qb::Result<Tensor> {
        qb::grad(|x: Tensor| qb::sort(&x).eval()?.mul(&qb::arange(7)?)?.sum()).call(&x)
    })
    .lower(&x)?
    .as_text();
    assert!(grad_text.contains("index_scatter"), "{grad_text}");
    let g: Tensor = qb::grad(|x: Tensor| qb::sort(&x).eval()?.mul(&qb::arange(4)?)?.sum())
        .call(&qb::array([3.0, 1.0, 2.0, 0.5])?)?;
    // Element i lands at the rank of x_i: its gradient is that rank.
    assert_eq!(g.to_vec::<f64>()?, [3.0, 1.0, 2.0, 0.0]);
    // A long axis sorts in one graph (the ranks are the quadratic part).
    let n = 1500;
    let long: Vec<f64> = (0..n).map(|k| ((k * 7919) % 1013) as f64).collect();
    let s = qb::jit(|x: Tensor| qb::sort(&x).eval()).call(&qb::array(long.clone())?)?;
    let mut want = long;
    want.sort_by(|a, b| total(*a, *b));
    assert_eq!(s.to_vec::<f64>()?, want);
    Ok(())
}
