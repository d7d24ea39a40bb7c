//! vmap-versus-loop equality over the array library: every function, batched over axis 0 of a
//! `[4, ...]` input, equals stacking its per-example results (bit for bit: batching changes the
//! shape of each node, never the arithmetic), plus value and gradient checks of the functions
//! not covered elsewhere.

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;

type Function = fn(Tensor) -> qb::Result<Tensor>;

/// Functions of one `[3]` (or `[3, 3]` for the matrix ones) example.
fn vector_table() -> Vec<(&'static str, Function)> {
    vec![
        ("tan", |x| x.mul(0.3).tan()),
        ("sinh", |x| x.sinh()),
        ("cosh", |x| x.cosh()),
        ("arcsin", |x| x.mul(0.2).arcsin()),
        ("arccos", |x| x.mul(0.2).arccos()),
        ("arctan", |x| x.arctan()),
        ("arcsinh", |x| x.arcsinh()),
        ("arccosh", |x| x.abs().add(1.5).arccosh()),
        ("arctanh", |x| x.mul(0.2).arctanh()),
        ("expm1", |x| x.expm1()),
        ("exp2", |x| qb::exp2(&x)),
        ("log", |x| x.abs().add(0.5).log()),
        ("log1p", |x| x.abs().log1p()),
        ("log2", |x| x.abs().add(0.5).log2()),
        ("log10", |x| x.abs().add(0.5).log10()),
        ("erf", |x| x.erf()),
        ("erfc", |x| x.erfc()),
        ("sqrt", |x| x.abs().sqrt()),
        ("cbrt", |x| x.cbrt()),
        ("floor", |x| x.floor()),
        ("ceil", |x| x.ceil()),
        ("round", |x| x.round()),
        ("abs", |x| x.abs()),
        ("relu", |x| x.relu()),
        ("sigmoid", |x| x.sigmoid()),
        ("silu", |x| qb::silu(&x)),
        ("square", |x| x.square()),
        ("reciprocal", |x| x.add(5.0).reciprocal()),
        ("isnan", |x| x.isnan()),
        ("isfinite", |x| x.isfinite()),
        ("isinf", |x| qb::isinf(&x)),
        ("nan_to_num", |x| qb::nan_to_num(x.log()?).eval()),
        ("clip", |x| qb::clip(&x).lo(-0.5).hi(0.5).eval()),
        ("maximum", |x| qb::maximum(&x, x.cos()?)),
        ("minimum", |x| qb::minimum(&x, x.cos()?)),
        ("power", |x| qb::power(x.abs()?, 1.5)),
        ("atan2", |x| qb::atan2(&x, x.cos()?)),
        ("fmod", |x| qb::fmod(&x, 0.7)),
        ("remainder", |x| qb::remainder(&x, 0.7)),
        ("where", |x| qb::where_(x.greater(0.0)?, &x, x.cos()?)),
        ("greater", |x| x.greater(0.1)),
        ("greater_equal", |x| x.greater_equal(0.1)),
        ("less", |x| x.less(0.1)),
        ("less_equal", |x| x.less_equal(0.1)),
        ("equal", |x| x.equal(x.round()?)),
        ("not_equal", |x| x.not_equal(x.round()?)),
        ("logical_and", |x| {
            qb::logical_and(x.greater(0.0)?, x.less(0.5)?)
        }),
        ("logical_or", |x| {
            qb::logical_or(x.greater(0.5)?, x.less(-0.5)?)
        }),
        ("logical_not", |x| qb::logical_not(x.greater(0.0)?)),
        ("stop_gradient", |x| x.stop_gradient()),
        ("mean", |x| x.mean()),
        ("prod", |x| x.prod()),
        ("max", |x| x.max()),
        ("min", |x| x.min()),
        ("any", |x| x.greater(0.5)?.any()),
        ("all", |x| x.greater(-2.0)?.all()),
        ("var", |x| qb::var(&x).ddof(1).eval()),
        ("log_softmax", |x| x.log_softmax(-1)),
        ("broadcast_to", |x| x.broadcast_to([2, 3])),
        ("astype", |x| x.astype(qb::F32)),
        ("split", |x| qb::concat(&qb::split(&x, 3, 0)?[1..], 0)),
        ("meshgrid", |x| {
            qb::meshgrid(&[&x, &x]).eval()?[1].sum_axes(0)
        }),
        ("moveaxis", |x| x.reshape([1, 3])?.moveaxis([0], [1])),
        ("swapaxes", |x| x.reshape([1, 3])?.swapaxes(0, 1)),
        ("transpose", |x| x.reshape([1, 3])?.transpose()),
        ("squeeze", |x| x.reshape([1, 3, 1])?.squeeze()),
        ("expand_dims", |x| x.expand_dims([0])),
        ("gather", |x| x.gather([2, 0, 2], 0)),
        ("scatter_add", |x| {
            x.scatter_add([0, 0], x.index(qb::s![1..])?, 0)
        }),
        ("matmul", |x| x.matmul(x.reshape([3, 1])?)),
        ("dot", |x| qb::dot(&x, x.sin()?)),
        ("outer", |x| qb::outer(&x, x.cos()?)),
        ("tensordot", |x| {
            qb::tensordot(qb::outer(&x, &x)?, qb::outer(&x, x.sin()?)?)
                .axes(2)
                .eval()
        }),
        ("cross", |x| qb::cross(&x, x.cos()?).eval()),
        ("einsum", |x| {
            qb::einsum("ij,jk->ik", &[qb::outer(&x, &x)?, qb::outer(&x, x.sin()?)?])
        }),
        ("diagonal", |x| qb::outer(&x, x.cos()?)?.diagonal()),
        ("trace", |x| qb::outer(&x, x.cos()?)?.trace()),
        ("triu", |x| qb::outer(&x, x.cos()?)?.triu()),
    ]
}

fn batch() -> Tensor {
    qb::array([
        [0.3, -0.7, 1.1],
        [0.05, -1.6, 0.9],
        [2.5, 0.0, -0.25],
        [-0.4, 0.6, 1.7],
    ])
    .unwrap()
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.astype(qb::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
        .iter()
        .map(|v| if v.is_nan() { u64::MAX } else { v.to_bits() })
        .collect()
}

#[test]
fn every_function_batches_like_a_loop() {
    let xs = batch();
    for (name, f) in vector_table() {
        let batched: Tensor = qb::vmap(f)
            .call(&xs)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let rows: Vec<Tensor> = (0..4)
            .map(|i| f(xs.index(qb::s![i as isize]).unwrap()).unwrap())
            .collect();
        let looped = qb::stack(&rows, 0).unwrap();
        assert_eq!(batched.shape(), looped.shape(), "{name}");
        assert_eq!(batched.dtype(), looped.dtype(), "{name}");
        assert_eq!(bits(&batched), bits(&looped), "{name}");
    }
}

#[test]
fn layout_functions_have_gradients() -> qb::Result<()> {
    // d/dx sum(w * f(x)) for the layout functions is w rearranged back.
    let x = qb::array([1.0, 2.0, 3.0])?;
    let w = qb::array([[0.5], [-1.0], [2.0]])?;
    let g: Tensor = qb::grad(|x: Tensor| x.reshape([1, 3])?.transpose()?.mul(&w).sum()).call(&x)?;
    assert_eq!(g.to_vec::<f64>()?, vec![0.5, -1.0, 2.0]);
    let g: Tensor =
        qb::grad(|x: Tensor| x.reshape([1, 3, 1])?.squeeze()?.mul(x.cos()?).sum()).call(&x)?;
    let want: Vec<f64> = [1.0f64, 2.0, 3.0]
        .iter()
        .map(|v| v.cos() - v * v.sin())
        .collect();
    assert!(g
        .to_vec::<f64>()?
        .iter()
        .zip(&want)
        .all(|(a, b)| (a - b).abs() < 1e-15));
    let g: Tensor = qb::grad(|x: Tensor| x.expand_dims([0])?.matmul(&w)?.sum()).call(&x)?;
    assert_eq!(g.to_vec::<f64>()?, vec![0.5, -1.0, 2.0]);
    Ok(())
}

#[test]
fn stop_gradient_and_logic_values() -> qb::Result<()> {
    let x = qb::array([1.0, -2.0])?;
    let g: Tensor = qb::grad(|x: Tensor| x.stop_gradient()?.mul(&x).sum()).call(&x)?;
    assert_eq!(
        g.to_vec::<f64>()?,
        vec![1.0, -2.0],
        "only the unstopped factor is differentiated"
    );
    assert_eq!(qb::stop_gradient(&x)?.to_vec::<f64>()?, vec![1.0, -2.0]);
    let p = qb::array([true, false, true, false])?;
    let q = qb::array([true, true, false, false])?;
    assert_eq!(
        qb::logical_or(&p, &q)?.to_vec_bool()?,
        vec![true, true, true, false]
    );
    assert_eq!(
        qb::logical_not(&p)?.to_vec_bool()?,
        vec![false, true, false, true]
    );
    assert_eq!(
        qb::logical_and(&p, &q)?.to_vec_bool()?,
        vec![true, false, false, false]
    );
    Ok(())
}
