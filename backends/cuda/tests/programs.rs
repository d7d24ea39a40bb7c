//! User programs with integers, traced by the facade (`jit(f).lower(..)`) and run on the host
//! model of the device (see `emulated.rs`) against the CPU reference (integers exactly):
//! a `fori_loop` whose body reads `xs[i]` and `dynamic_slice`s at its int64 index; `take`,
//! `take_along_axis`, `dynamic_update_slice` and every `.at[]` update with traced indices;
//! `sort`, `argsort`, `argmax`, `top_k`, `searchsorted`, `one_hot`, `bincount` and
//! `cumprod`; random keys split, folded in and sampled inside `jit` and inside a loop; and a
//! `scan_over` integer slices. Each runs in a float32 program and, when it holds no float32
//! value, at `precision="float64"`.

mod common;

use common::plans::check_all;
use qb::random;
use qb::{ix, Tensor};
use quabla as qb;
use quabla_backend::{HostTensor, Precision};
use quabla_ir::{DType, HostData, Plan, Shape};

/// A facade tensor as the host tensor a plan input takes.
fn host(t: &Tensor) -> HostTensor {
    let shape = Shape::new(t.shape().to_vec()).unwrap();
    let data = match t.dtype() {
        DType::F64 => HostData::F64(t.to_vec::<f64>().unwrap().into()),
        DType::F32 => HostData::F32(t.to_vec::<f32>().unwrap().into()),
        DType::Bool => HostData::Bool(t.to_vec::<bool>().unwrap().into()),
        DType::I32 => HostData::I32(t.to_vec::<i32>().unwrap().into()),
        DType::I64 => HostData::I64(t.to_vec::<i64>().unwrap().into()),
    };
    HostTensor::new(shape, data)
}

/// The cases of one traced function: its plan with `args` as inputs, at the precisions it
/// runs at.
type Cases = Vec<(String, Plan, Precision, Vec<HostTensor>)>;

fn traced<A, R>(
    label: &str,
    f: impl Fn(A) -> qb::Result<R> + Send + Sync + 'static,
    args: &A,
) -> Cases
where
    A: qb::Tree + 'static,
    R: qb::Tree + 'static,
{
    let lowered = qb::jit(f).lower(args).unwrap();
    let plan = lowered.program().plan().clone();
    let (leaves, _) = qb::tree::flatten(args);
    let inputs: Vec<HostTensor> = leaves
        .iter()
        .map(|leaf| match leaf {
            qb::tree::Leaf::Tensor(t) => host(t),
            other => panic!("{label}: the arguments are tensors, not {other:?}"),
        })
        .collect();
    let has_float32 = plan
        .graph()
        .nodes()
        .iter()
        .any(|n| n.ty.dtype == DType::F32);
    let mut precisions = vec![Precision::Reference];
    if !has_float32 {
        precisions.push(Precision::Float64);
    }
    precisions
        .into_iter()
        .map(|p| (label.to_string(), plan.clone(), p, inputs.clone()))
        .collect()
}

fn run(cases: Cases) {
    assert!(!cases.is_empty());
    let failures = check_all(cases);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn loops_index_their_operands_with_the_loop_index() {
    let mut cases = Vec::new();
    for dtype in [qb::F32, qb::F64] {
        let xs = qb::arange(18.0)
            .unwrap()
            .reshape([6, 3])
            .unwrap()
            .astype(dtype)
            .unwrap();
        let init = qb::zeros([3]).unwrap().astype(dtype).unwrap();
        // acc += xs[i] + sum(dynamic_slice(xs, (i - 1, 0), (2, 3))), count += i * i.
        let f = |(xs, init): (Tensor, Tensor)| {
            let body = |i: qb::LoopIndex, (acc, count): (Tensor, Tensor), ops: &[Tensor]| {
                let row = ops[0].index_with(ix![&*i])?;
                let start = (&*i - 1)?;
                let window = qb::dynamic_slice(&ops[0], vec![start.into(), 0.into()], &[2, 3])?;
                let acc = ((&acc + &row)? + window.sum()?)?;
                let count = (&count + (&*i * &*i)?)?;
                Ok((acc, count))
            };
            let count = qb::array(0i64)?;
            qb::fori_loop(0, 6, body, &(init, count))
                .operands(std::slice::from_ref(&xs))
                .eval()
        };
        cases.extend(traced(
            &format!("fori xs[i] {dtype}"),
            f,
            &(xs.clone(), init.clone()),
        ));
        // A scan over integer slices counting into an int64 carry.
        let ns = qb::array([[1i64, 2], [3, i64::MAX], [-5, 6], [7, i64::MIN]]).unwrap();
        let g = move |(ns, init): (Tensor, Tensor)| {
            let step = |(c, total): (Tensor, Tensor), n: Tensor, _: &[Tensor]| {
                let s = n.sum()?;
                let total = (&total + &s)?;
                let c = (&c + s.astype(c.dtype())?)?;
                Ok(((c.clone(), total.clone()), (c, total)))
            };
            qb::scan_over(step, &(init.sum()?, qb::array(0i64)?), &ns).eval()
        };
        cases.extend(traced(
            &format!("scan_over int64 slices {dtype}"),
            g,
            &(ns, init),
        ));
    }
    run(cases);
}

#[test]
fn traced_indices_gather_and_update() {
    let mut cases = Vec::new();
    for (dtype, index) in [(qb::F32, qb::I64), (qb::F64, qb::I32), (qb::I64, qb::I64)] {
        let x = qb::array([[0.1, 0.2, 0.3], [1.1, 1.2, 1.3], [2.1, 2.2, 2.3]])
            .unwrap()
            .mul(10.0)
            .unwrap()
            .astype(dtype)
            .unwrap();
        let i = qb::array([2i64, -1, 0, 5, -7])
            .unwrap()
            .astype(index)
            .unwrap();
        let f = |(x, i): (Tensor, Tensor)| -> qb::Result<Vec<Tensor>> {
            let s = i.index(qb::s![0])?;
            let one = qb::ones([2, 1])?.astype(x.dtype())?;
            let u = qb::full([5, 3], 3)?.astype(x.dtype())?;
            Ok(vec![
                x.index_with(ix![&i])?,
                x.index_with(ix![.., &s])?,
                qb::take(&x, &i, Some(1))?,
                qb::take_along_axis(&x, &i.index(qb::s![..3])?.reshape([1, -1])?, 0)?,
                qb::dynamic_slice(&x, vec![s.clone().into(), 1.into()], &[2, 2])?,
                qb::dynamic_update_slice(&x, &one, vec![s.clone().into(), s.into()])?,
                x.at(ix![&i]).add(&u)?,
                x.at(ix![&i, 0]).set(-7)?,
                x.at(ix![&i]).mul(&u)?,
                x.at(ix![&i]).min(&u)?,
                x.at(ix![&i]).max(&u)?,
            ])
        };
        cases.extend(traced(&format!("indexing {dtype} by {index}"), f, &(x, i)));
    }
    run(cases);
}

#[test]
fn order_and_counting_functions() {
    let x = qb::array([
        [3.0, f64::NAN, -0.0, 0.0, 1.5, -2.0, 1.5, f64::NEG_INFINITY],
        [0.5, 0.25, 0.5, f64::INFINITY, -1.0, 7.0, -1.0, 2.0],
    ])
    .unwrap();
    let ints = qb::array([[5i64, -3, 5, i64::MIN, 9, 0], [1, 1, 2, -1, i64::MAX, 3]]).unwrap();
    let mut cases = Vec::new();
    for dtype in [qb::F32, qb::F64] {
        let f = |(x, n): (Tensor, Tensor)| -> qb::Result<Vec<Tensor>> {
            let (values, indices) = qb::top_k(&x, 3)?;
            let sorted = qb::array([-1.0, 0.0, 0.5, 2.0])?.astype(x.dtype())?;
            let classes = qb::argmax(&n).axis(1).eval()?;
            Ok(vec![
                qb::sort(&x).eval()?,
                qb::argsort(&x).eval()?,
                qb::argsort(&x).descending(true).eval()?,
                qb::sort(&x).axis(0).eval()?,
                qb::argmax(&x).axis(1).eval()?,
                qb::argmin(&x).axis(0).eval()?,
                values,
                indices,
                qb::searchsorted(&sorted, &x).eval()?,
                qb::one_hot(&classes, 6).eval()?,
                qb::bincount(&qb::remainder(&n, 4)?.reshape([-1])?, 4).eval()?,
                qb::sort(&n).eval()?,
                qb::argsort(&n).eval()?,
                qb::cumprod(&n).axis(1).eval()?,
            ])
        };
        cases.extend(traced(
            &format!("sorting and counting {dtype}"),
            f,
            &(x.astype(dtype).unwrap(), ints.clone()),
        ));
    }
    run(cases);
}

#[test]
fn random_keys_inside_jit_and_loops() {
    let keys = [random::key(0), random::key(42), random::key(-1)];
    let mut cases = Vec::new();
    for k in &keys {
        let data = random::key_data(k);
        let f = |k: Tensor| -> qb::Result<Vec<Tensor>> {
            let children = random::split(&k, 3)?;
            let c0 = children.index(qb::s![0])?;
            let folded = random::fold_in(&k, 7i64)?;
            let logits = qb::array([0.1, 2.0, -1.0, 0.5])?;
            Ok(vec![
                children.clone(),
                folded.clone(),
                random::uniform(&k, [5]).eval()?,
                random::normal(&c0, [2, 3]).eval()?,
                random::randint(&folded, [6], -5, 1_000_000_007).eval()?,
                random::randint(&c0, [4], i64::from(i32::MIN), i64::from(i32::MAX))
                    .dtype(qb::I32)
                    .eval()?,
                random::permutation(&k, 10)?,
                random::bernoulli(&c0).p(0.3).shape([6]).eval()?,
                random::categorical(&folded, &logits).eval()?,
            ])
        };
        cases.extend(traced(&format!("samplers {k:?}"), f, &data));
        // A key folded with the loop index and sampled in a loop.
        let g = |k: Tensor| {
            let body = |i: qb::LoopIndex, acc: Tensor, ops: &[Tensor]| {
                let step = random::fold_in(&ops[0], &*i)?;
                let bits = random::randint(&step, [3], 0, 1 << 40).eval()?;
                &acc + &bits
            };
            qb::fori_loop(0, 9, body, &qb::zeros([3])?.astype(qb::I64)?)
                .operands(std::slice::from_ref(&k))
                .eval()
        };
        cases.extend(traced(&format!("keys in a loop {k:?}"), g, &data));
    }
    run(cases);
}
