//! `index_gather` and `index_scatter` with traced indices in machine code: gathers and
//! scatters of every dtype by int32 and int64 indices (in range, negative, past the end, at the
//! integer extremes, repeated), along leading, middle and trailing axes with and without batch
//! axes, combining by every scatter mode, give the interpreter's bits in loops and whole plans,
//! with results and updates held in registers and in memory. The loop index reading and writing
//! rows of a loop constant and a carry (`x[i]`, `out.at[i].set(..)`) runs as machine code too.
//! Every check first asserts from the report that the machine code ran.

mod common;

use common::{calling, check_both_ways, check_plan_both_ways, graph, special_values, Rng};
use quabla_backend::HostTensor;
use quabla_ir::{
    BinaryOp, DType, Graph, GraphBuilder, HostData, NodeId, Region, RegionForm, RegionKind,
    ScanBody, ScatterMode, Shape, TensorType,
};
use std::sync::Arc;

const DTYPES: [DType; 5] = [DType::I32, DType::I64, DType::F32, DType::F64, DType::Bool];
const MODES: [ScatterMode; 5] = [
    ScatterMode::Set,
    ScatterMode::Add,
    ScatterMode::Mul,
    ScatterMode::Min,
    ScatterMode::Max,
];

fn ty(dt: DType, dims: &[usize]) -> TensorType {
    TensorType::new(dt, Shape::new(dims.to_vec()).unwrap())
}

/// `values` repeated (or cut) to `n` elements, from position `from`.
fn cycled<T: Copy>(values: &[T], from: usize, n: usize) -> Vec<T> {
    (0..n).map(|i| values[(from + i) % values.len()]).collect()
}

/// Data of `dtype` and `dims`: integers at their edges, floats with special values (NaN,
/// infinities, signed zeros, for the IEEE `minimum` and `maximum`), bools of both values.
fn data(dt: DType, dims: &[usize], shift: usize) -> HostTensor {
    let n: usize = dims.iter().product();
    let values = match dt {
        DType::I32 | DType::I64 => {
            let (min, max) = (dt.int_min(), dt.int_max());
            let edges = [min, -1, 3, max, 0, 7, -2, max - 1, min + 1, 2, -9, 1 << 20];
            HostData::from_i64(dt, cycled(&edges, shift, n))
        }
        DType::Bool => HostData::Bool((0..n).map(|i| (i + shift).is_multiple_of(3)).collect()),
        _ => {
            let mut rng = Rng::new(41);
            HostData::from_f64(dt, cycled(&special_values(&mut rng), shift, n))
        }
    };
    HostTensor::new(Shape::new(dims.to_vec()).unwrap(), values)
}

/// Indices of `dt` and `dims` into an axis of `n`: in range (several of them repeated, so that
/// a scatter combines updates at one place), negative, at and past the end, and the extremes
/// of the dtype.
fn indices(dt: DType, dims: &[usize], n: usize, shift: usize) -> HostTensor {
    let n = n as i64;
    let pattern = [
        0,
        n - 1,
        1,
        -1,
        n,
        1,
        n + 3,
        -n,
        n / 2,
        dt.int_min(),
        n / 2,
        dt.int_max(),
        0,
        2 % n,
    ];
    let count: usize = dims.iter().product();
    HostTensor::new(
        Shape::new(dims.to_vec()).unwrap(),
        HostData::from_i64(dt, cycled(&pattern, shift, count)),
    )
}

/// Data and index extents, axis and batch axes of the gathers and scatters under test: small
/// ones whose every value fits in registers, and large ones held in memory (a large result of a
/// small gather, small updates of a large base).
const LAYOUTS: [(&[usize], &[usize], usize, usize); 9] = [
    (&[4, 5], &[6], 1, 0),
    (&[4, 5], &[3], 0, 0),
    (&[4, 5], &[4, 3], 1, 1),
    (&[3, 4, 2], &[5], 1, 0),
    (&[30, 7], &[20], 0, 0),
    (&[30, 7], &[12], 1, 0),
    (&[30, 7], &[2], 1, 0),
    (&[30, 7], &[30, 5], 1, 1),
    (&[2, 40, 3], &[2, 30], 1, 1),
];

/// A loop passing its carries `ins` through, with one more carry becoming `apply(ins..)`, and
/// the plan `apply(ins..)`.
fn loop_and_plan(
    ins: &[TensorType],
    apply: impl Fn(&mut GraphBuilder, &[NodeId]) -> NodeId,
) -> (Graph, Graph, TensorType) {
    let plan = graph(ins, |b, p| vec![apply(b, p)]);
    let out = plan.node(plan.outputs()[0]).ty.clone();
    let mut inputs = vec![ty(DType::F64, &[])];
    inputs.extend(ins.iter().cloned());
    inputs.push(out.clone());
    let body = graph(&inputs, |b, p| {
        let mut outs = p[1..=ins.len()].to_vec();
        outs.push(apply(b, &p[1..=ins.len()]));
        outs
    });
    let scan = ScanBody {
        length: 2,
        start: 0,
        reverse: false,
        n_carry: ins.len() + 1,
        n_const: 0,
        n_xs: 0,
        body: Arc::new(body),
    };
    let region = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0).unwrap());
    (calling(&region), plan, out)
}

/// Checks `apply` in a loop and as a whole plan, both ways, on each input set.
fn check(
    context: &str,
    ins: &[TensorType],
    apply: impl Fn(&mut GraphBuilder, &[NodeId]) -> NodeId,
    sets: &[Vec<HostTensor>],
) {
    let (looped, plan, out) = loop_and_plan(ins, apply);
    let zero = HostTensor::new(
        out.shape.clone(),
        HostData::from_i64(out.dtype, vec![0; out.shape.size()]),
    );
    let loop_sets: Vec<Vec<HostTensor>> = sets
        .iter()
        .map(|s| {
            let mut s = s.clone();
            s.push(zero.clone());
            s
        })
        .collect();
    check_both_ways(&format!("{context} in a loop"), &looped, &loop_sets);
    check_plan_both_ways(&format!("{context} as a plan"), &plan, sets);
}

#[test]
fn index_gathers_give_the_interpreters_bits() {
    for &(dims, idx, axis, batch) in &LAYOUTS {
        for dt in DTYPES {
            for index in [DType::I32, DType::I64] {
                let ins = [ty(dt, dims), ty(index, idx)];
                let sets: Vec<Vec<HostTensor>> = (0..2)
                    .map(|shift| {
                        vec![
                            data(dt, dims, shift * 5),
                            indices(index, idx, dims[axis], shift * 3),
                        ]
                    })
                    .collect();
                let context = format!("gather {dt} {dims:?} by {index} {idx:?} axis {axis}");
                let gather = |b: &mut GraphBuilder, p: &[NodeId]| {
                    b.index_gather(p[0], p[1], axis, batch).unwrap()
                };
                check(&context, &ins, gather, &sets);
            }
        }
    }
}

#[test]
fn index_scatters_by_every_mode_give_the_interpreters_bits() {
    for &(dims, idx, axis, batch) in &LAYOUTS {
        // The updates' extents: the data's with the indexed axis replaced by the indices'
        // (past the batch axes).
        let picked: Vec<usize> = dims[..axis]
            .iter()
            .chain(&idx[batch..])
            .chain(&dims[axis + 1..])
            .copied()
            .collect();
        for dt in DTYPES {
            for mode in MODES {
                if dt == DType::Bool && mode != ScatterMode::Set {
                    continue;
                }
                for index in [DType::I32, DType::I64] {
                    let ins = [ty(dt, dims), ty(index, idx), ty(dt, &picked)];
                    let sets: Vec<Vec<HostTensor>> = (0..2)
                        .map(|shift| {
                            vec![
                                data(dt, dims, shift * 5),
                                indices(index, idx, dims[axis], shift * 3),
                                data(dt, &picked, shift * 7 + 1),
                            ]
                        })
                        .collect();
                    let context = format!(
                        "scatter {} {dt} {dims:?} by {index} {idx:?} axis {axis}",
                        mode.name()
                    );
                    let scatter = |b: &mut GraphBuilder, p: &[NodeId]| {
                        b.index_scatter(p[0], p[1], p[2], (axis, batch), mode)
                            .unwrap()
                    };
                    check(&context, &ins, scatter, &sets);
                }
            }
        }
    }
}

/// `for i in range(n): acc += x[i]; out = out.at[i].set(2 * x[i] + acc)`, with `x` a loop
/// constant of small and large rows, read and written through `index_gather` and
/// `index_scatter` by the loop index converted to each integer dtype.
#[test]
fn rows_read_and_written_by_the_loop_index_give_the_interpreters_bits() {
    for index in [DType::I32, DType::I64] {
        for (rows, cols) in [(6, 3), (50, 3), (20, 40)] {
            let x = ty(DType::F64, &[rows, cols]);
            let row = ty(DType::F64, &[cols]);
            let body = graph(
                &[ty(DType::F64, &[]), row.clone(), x.clone(), x.clone()],
                |b, p| {
                    let (i, acc, out, x) = (p[0], p[1], p[2], p[3]);
                    let i = b.astype(i, index).unwrap();
                    let at = b.reshape_to(i, Shape::new(vec![1]).unwrap()).unwrap();
                    let picked = b.index_gather(x, at, 0, 0).unwrap();
                    let picked = b
                        .reshape_to(picked, Shape::new(vec![cols]).unwrap())
                        .unwrap();
                    let acc = b.binary(BinaryOp::Add, acc, picked).unwrap();
                    let two = b.scalar(2.0, DType::F64, false);
                    let twice = b.binary(BinaryOp::Mul, picked, two).unwrap();
                    let new = b.binary(BinaryOp::Add, twice, acc).unwrap();
                    let new = b
                        .reshape_to(new, Shape::new(vec![1, cols]).unwrap())
                        .unwrap();
                    let out = b
                        .index_scatter(out, at, new, (0, 0), ScatterMode::Set)
                        .unwrap();
                    vec![acc, out]
                },
            );
            let scan = ScanBody {
                length: rows,
                start: 0,
                reverse: false,
                n_carry: 2,
                n_const: 1,
                n_xs: 0,
                body: Arc::new(body),
            };
            let region =
                Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0).unwrap());
            let g = calling(&region);
            let n = rows * cols;
            let inputs = vec![
                HostTensor::new(row.shape.clone(), HostData::F64(vec![0.0; cols].into())),
                HostTensor::new(x.shape.clone(), HostData::F64(vec![0.0; n].into())),
                HostTensor::new(
                    x.shape.clone(),
                    HostData::F64((0..n).map(|k| (k as f64 * 0.37).sin()).collect()),
                ),
            ];
            let context = format!("rows of [{rows}, {cols}] by the {index} index");
            check_both_ways(&context, &g, std::slice::from_ref(&inputs));
        }
    }
}
