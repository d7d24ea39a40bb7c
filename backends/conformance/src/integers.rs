//! The conformance cases of integer values (numerics.md §12) and of the indexed ops whose
//! indices are a tensor: every integer function at int32 and int64 over every pair of edge
//! values (zero, ±1, the extremes and their neighbours, shift counts around the width,
//! values whose products overflow), the casts between integers, floats and bools at the
//! values where they round, saturate or wrap, integer reductions and layout ops on values no
//! float holds exactly, and `index_gather`/`index_scatter` with indices in range, negative,
//! past the end and repeated. Integers must agree exactly on every backend.

use crate::cases::{program, tensor};
use crate::Program;
use quabla_backend::HostTensor;
use quabla_ir::{BinaryOp, Comparison, DType, HostData, Op, ScatterMode, Shape, UnaryOp};

/// Edge values of `dtype` (int32 or int64): the extremes and their neighbours, small values
/// of both signs, shift counts around 32 and 64, and values whose products overflow.
fn edges(dtype: DType) -> Vec<i64> {
    let mut v = vec![
        0, 1, -1, 2, -2, 3, -3, 7, -7, 31, 32, 33, 63, 64, 65, -32, 100, -100, 46341, -46341,
    ];
    let (min, max) = (dtype.int_min(), dtype.int_max());
    v.extend([min, min + 1, max, max - 1]);
    if dtype == DType::I64 {
        v.extend([
            i64::from(i32::MIN),
            i64::from(i32::MAX) + 1,
            (1 << 53) + 1,
            -(1 << 53) - 1,
            0x5555_5555_5555_5555,
            3_037_000_500,
        ]);
    }
    v
}

/// A tensor of `dtype` (int32 or int64) and `dims` holding `values` (wrapped to the dtype).
fn ints(dtype: DType, dims: &[usize], values: &[i64]) -> HostTensor {
    HostTensor::new(
        Shape::new(dims.to_vec()).expect("conformance shapes have no zero extents"),
        HostData::from_i64(dtype, values.iter().copied()),
    )
}

/// Deterministic integers spread over the whole range of `dtype`, with small ones mixed in.
fn spread(dtype: DType, seed: u64, n: usize) -> Vec<i64> {
    let mut rng = crate::Rng::new(seed);
    (0..n)
        .map(|k| {
            let bits = rng.next_u64() as i64;
            if k % 3 == 0 {
                bits % 10
            } else {
                dtype.wrap_int(bits)
            }
        })
        .collect()
}

/// Every binary function integers take, the unary ones, `powi`, the comparisons and `where`,
/// over every pair of edge values (operands `[n, 1]` and `[n]` broadcast to `[n, n]`), one
/// plan per dtype; and a chain of integer nodes with a float conversion in the middle.
pub(crate) fn integer_arithmetic() -> Vec<Program> {
    let mut out = Vec::new();
    for dtype in [DType::I32, DType::I64] {
        let e = edges(dtype);
        let n = e.len();
        let inputs = vec![ints(dtype, &[n, 1], &e), ints(dtype, &[n], &e)];
        out.push(program(
            format!("binary functions of every edge pair {}", dtype.name()),
            inputs.clone(),
            |b, x| {
                BinaryOp::ALL
                    .iter()
                    .filter(|op| !op.is_float_only())
                    .map(|&op| b.binary(op, x[0], x[1]))
                    .collect()
            },
        ));
        out.push(program(
            format!("comparisons and where {}", dtype.name()),
            inputs.clone(),
            |b, x| {
                let mut outs = Vec::new();
                for c in Comparison::ALL {
                    outs.push(b.compare(c, x[0], x[1])?);
                }
                let less = b.compare(Comparison::Less, x[0], x[1])?;
                outs.push(b.select(less, x[0], x[1])?);
                Ok(outs)
            },
        ));
        out.push(program(
            format!("unary functions and powi {}", dtype.name()),
            vec![ints(dtype, &[n], &e)],
            |b, x| {
                let mut outs = vec![
                    b.unary(UnaryOp::Neg, x[0])?,
                    b.unary(UnaryOp::BitNot, x[0])?,
                    b.stop_gradient(x[0])?,
                ];
                for k in [0, 1, 2, 3, 5, 31, 64, -1] {
                    outs.push(b.powi(x[0], k)?);
                }
                Ok(outs)
            },
        ));
        out.push(program(
            format!("a fused chain with literals {}", dtype.name()),
            vec![
                ints(dtype, &[n], &e),
                ints(dtype, &[n], &spread(dtype, 60, n)),
            ],
            move |b, x| {
                // ((x * y + MAX) >> 3) ^ (x // 7), then (x % -5) compared with a literal
                // through a float conversion.
                let max = b.constant(
                    HostData::from_i64(dtype, [dtype.int_max()]),
                    Shape::scalar(),
                    false,
                )?;
                let seven = b.scalar(7.0, dtype, false);
                let three = b.scalar(3.0, dtype, false);
                let minus_five = b.scalar(-5.0, dtype, false);
                let p = b.mul(x[0], x[1])?;
                let p = b.add(p, max)?;
                let p = b.binary(BinaryOp::ShiftRightArithmetic, p, three)?;
                let q = b.binary(BinaryOp::FloorDiv, x[0], seven)?;
                let chain = b.binary(BinaryOp::BitXor, p, q)?;
                let r = b.binary(BinaryOp::Rem, x[0], minus_five)?;
                let f = b.astype(r, DType::F64)?;
                let half = b.scalar(0.5, DType::F64, false);
                let f = b.mul(f, half)?;
                let back = b.astype(f, dtype)?;
                let neg = b.compare(Comparison::Less, back, r)?;
                Ok(vec![chain, back, neg])
            },
        ));
    }
    out.push(program(
        "bitwise functions of bools",
        vec![
            tensor(DType::Bool, &[4, 1], &[0.0, 1.0, 0.0, 1.0]),
            tensor(DType::Bool, &[4], &[0.0, 0.0, 1.0, 1.0]),
        ],
        |b, x| {
            Ok(vec![
                b.binary(BinaryOp::BitAnd, x[0], x[1])?,
                b.binary(BinaryOp::BitOr, x[0], x[1])?,
                b.binary(BinaryOp::BitXor, x[0], x[1])?,
                b.unary(UnaryOp::BitNot, x[1])?,
            ])
        },
    ));
    out
}

/// Float values where a conversion to an integer truncates, saturates or meets NaN.
fn float_edges() -> Vec<f64> {
    let two31 = 2f64.powi(31);
    let two63 = 2f64.powi(63);
    vec![
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        0.5,
        -0.5,
        0.9999,
        -0.9999,
        2.7,
        -2.7,
        two31 - 0.5,
        two31,
        -two31,
        -two31 - 0.5,
        -two31 - 1.0,
        2f64.powi(53) + 2.0,
        9.2e18,
        9.3e18,
        -two63,
        two63,
        1e300,
        -1e300,
        4294967301.0,
        f64::MIN_POSITIVE,
    ]
}

/// Integer values where a conversion to a float rounds (ties to even past 2^24 and 2^53) or
/// to a narrower integer wraps.
fn rounding_ints() -> Vec<i64> {
    vec![
        0,
        1,
        -1,
        (1 << 24) + 1,
        (1 << 24) + 3,
        -(1 << 24) - 1,
        (1 << 53) + 1,
        (1 << 53) + 3,
        -(1 << 53) - 1,
        i64::MAX,
        i64::MIN,
        i64::MAX - 1,
        (1 << 62) + (1 << 38) + 1,
        i64::from(i32::MAX) + 1,
        i64::from(i32::MIN) - 1,
        0x1_2345_6789,
        -0x1_2345_6789,
    ]
}

/// `cast` between integers, floats and bools, each plan over values of one source dtype
/// (float32 values in their own plans, so the float64 ones also run at
/// `precision="float64"`).
pub(crate) fn integer_casts() -> Vec<Program> {
    let mut out = Vec::new();
    let floats = float_edges();
    let cast = |to: DType| Op::Cast { to, weak: false };
    for from in [DType::F64, DType::F32] {
        let n = floats.len();
        out.push(program(
            format!("{} -> int32, int64", from.name()),
            vec![tensor(from, &[n], &floats)],
            move |b, x| {
                Ok(vec![
                    b.push(cast(DType::I32), &[x[0]])?,
                    b.push(cast(DType::I64), &[x[0]])?,
                ])
            },
        ));
    }
    for from in [DType::I32, DType::I64] {
        let values: Vec<i64> = [rounding_ints(), edges(from)].concat();
        let n = values.len();
        out.push(program(
            format!("{} -> int32, int64, float64, bool", from.name()),
            vec![ints(from, &[n], &values)],
            move |b, x| {
                [DType::I32, DType::I64, DType::F64, DType::Bool]
                    .into_iter()
                    .map(|to| b.push(cast(to), &[x[0]]))
                    .collect()
            },
        ));
        out.push(program(
            format!("{} -> float32", from.name()),
            vec![ints(from, &[n], &values)],
            move |b, x| Ok(vec![b.push(cast(DType::F32), &[x[0]])?]),
        ));
    }
    out.push(program(
        "bool -> int32, int64",
        vec![tensor(DType::Bool, &[3], &[1.0, 0.0, 1.0])],
        move |b, x| {
            Ok(vec![
                b.push(cast(DType::I32), &[x[0]])?,
                b.push(cast(DType::I64), &[x[0]])?,
            ])
        },
    ));
    out
}

/// Sums (which wrap), extrema and running sums of integers, per axis and whole, short rows
/// and rows long enough to split into blocks.
pub(crate) fn integer_reductions() -> Vec<Program> {
    let mut out = Vec::new();
    for dtype in [DType::I32, DType::I64] {
        let e = edges(dtype);
        let n = e.len();
        out.push(program(
            format!("reductions of edge values {}", dtype.name()),
            vec![ints(
                dtype,
                &[2, n],
                &[e.clone(), e.iter().rev().copied().collect()].concat(),
            )],
            |b, x| {
                Ok(vec![
                    b.sum(x[0], None, false)?,
                    b.sum(x[0], Some(&[1]), false)?,
                    b.sum(x[0], Some(&[0]), false)?,
                    b.max(x[0], Some(&[1]), false)?,
                    b.min(x[0], Some(&[0]), false)?,
                    b.max(x[0], None, false)?,
                    b.cumsum(x[0], 1, false)?,
                    b.cumsum(x[0], 0, true)?,
                ])
            },
        ));
        // Long rows: the split form (a partial per block, then a tree), values that wrap.
        let long = spread(dtype, 61, 2 * 5000);
        out.push(program(
            format!("long rows {}", dtype.name()),
            vec![ints(dtype, &[2, 5000], &long)],
            |b, x| {
                Ok(vec![
                    b.sum(x[0], None, false)?,
                    b.sum(x[0], Some(&[1]), false)?,
                    b.max(x[0], Some(&[1]), false)?,
                    b.min(x[0], None, false)?,
                ])
            },
        ));
    }
    out
}

/// The layout ops on int64 values that no float holds exactly (so a detour through a float
/// would show), with multi-element and single constants of such values.
pub(crate) fn integer_layout() -> Vec<Program> {
    let big = |k: i64| (1i64 << 60) + 2 * k + 1;
    let values: Vec<i64> = (0..12)
        .map(|k| if k % 2 == 0 { big(k) } else { -big(k) })
        .collect();
    let updates: Vec<i64> = (0..9).map(|k| i64::MAX - k).collect();
    vec![
        program(
            "layout ops int64",
            vec![ints(DType::I64, &[4, 3], &values)],
            |b, x| {
                let constant = b.constant(
                    HostData::I64((0..3).map(|k| big(100 + k)).collect::<Vec<_>>().into()),
                    Shape::new(vec![3])?,
                    false,
                )?;
                let single =
                    b.constant(HostData::I64(vec![big(7)].into()), Shape::scalar(), false)?;
                let wide = b.broadcast_to(single, Shape::new(vec![2, 3])?)?;
                let t = b.transpose(x[0], None)?;
                let s = b.slice(x[0], vec![1, 1], vec![2, 2])?;
                let padded = b.push(
                    Op::PadSlice {
                        starts: vec![1, 0],
                        shape: Shape::new(vec![4, 2])?,
                    },
                    &[s],
                )?;
                let row = b.reshape(constant, &[1, 3])?;
                let joined = b.concat(&[x[0], row], 0)?;
                let picked = b.gather(x[0], &[3, 0, 0], 0)?;
                let plus = b.add(x[0], constant)?;
                let shifted = b.binary(BinaryOp::BitXor, x[0], single)?;
                Ok(vec![t, padded, joined, picked, wide, plus, shifted])
            },
        ),
        program(
            "scatter_add wraps int64",
            vec![
                ints(DType::I64, &[4, 3], &values),
                ints(DType::I64, &[3, 3], &updates),
            ],
            |b, x| Ok(vec![b.scatter_add(x[0], &[1, 1, 3], x[1], 0)?]),
        ),
        program(
            "scatter_add int32",
            vec![
                ints(DType::I32, &[4, 3], &spread(DType::I32, 62, 12)),
                ints(DType::I32, &[3, 3], &spread(DType::I32, 63, 9)),
            ],
            |b, x| Ok(vec![b.scatter_add(x[0], &[2, 0, 2], x[1], 0)?]),
        ),
    ]
}

/// Indices along an axis of `n`: in range, negative, at and past the end, repeated.
fn indices(n: i64, count: usize, seed: u64) -> Vec<i64> {
    let mut rng = crate::Rng::new(seed);
    let fixed = [0, n - 1, -1, n, n + 3, 1, 1, -n, i64::MIN, i64::MAX];
    (0..count)
        .map(|k| match fixed.get(k) {
            Some(&v) => v,
            None => (rng.next_u64() % (n as u64 + 2)) as i64 - 1,
        })
        .collect()
}

/// Data of `dtype` and `dims` for the indexed cases.
fn data(dtype: DType, dims: &[usize], seed: u64) -> HostTensor {
    let n: usize = dims.iter().product();
    match dtype {
        DType::I32 | DType::I64 => ints(dtype, dims, &spread(dtype, seed, n)),
        DType::Bool => tensor(
            dtype,
            dims,
            &(0..n)
                .map(|k| (k % 3 == 0) as u8 as f64)
                .collect::<Vec<_>>(),
        ),
        _ => {
            let mut rng = crate::Rng::new(seed);
            let mut v: Vec<f64> = (0..n).map(|_| rng.finite()).collect();
            // Special values where min/max and the float64 accumulation show.
            v[0] = f64::NAN;
            v[1] = -0.0;
            tensor(dtype, dims, &v)
        }
    }
}

/// `index_gather` and `index_scatter` (every mode) of float, integer and bool data by int32
/// and int64 indices, without and with a batch axis, along the first, a middle and the last
/// axis.
pub(crate) fn indexed() -> Vec<Program> {
    let mut out = Vec::new();
    // (data dims, index dims, axis, batch)
    let layouts: [(&[usize], &[usize], usize, usize); 4] = [
        (&[5, 3], &[12], 0, 0),
        (&[2, 5, 3], &[2, 12], 1, 1),
        (&[3, 2, 5], &[4, 3], 2, 0),
        (&[2, 3, 5], &[2, 7], 2, 1),
    ];
    for (k, &(dims, idx_dims, axis, batch)) in layouts.iter().enumerate() {
        for dtype in [DType::F64, DType::F32, DType::I64, DType::I32, DType::Bool] {
            let idx_dtype = if k % 2 == 0 { DType::I64 } else { DType::I32 };
            let count: usize = idx_dims.iter().product();
            let idx = ints(
                idx_dtype,
                idx_dims,
                &indices(dims[axis] as i64, count, 70 + k as u64),
            );
            let picked: Vec<usize> = dims[..axis]
                .iter()
                .chain(&idx_dims[batch..])
                .chain(&dims[axis + 1..])
                .copied()
                .collect();
            let inputs = vec![
                data(dtype, dims, 80 + k as u64),
                idx,
                data(dtype, &picked, 90 + k as u64),
            ];
            let modes: Vec<ScatterMode> = if dtype == DType::Bool {
                vec![ScatterMode::Set]
            } else {
                ScatterMode::ALL.to_vec()
            };
            out.push(program(
                format!(
                    "{} data {dims:?} by {} indices {idx_dims:?} along {axis} (batch {batch})",
                    dtype.name(),
                    idx_dtype.name()
                ),
                inputs,
                move |b, x| {
                    let mut outs = vec![b.index_gather(x[0], x[1], axis, batch)?];
                    for &mode in &modes {
                        outs.push(b.index_scatter(x[0], x[1], x[2], (axis, batch), mode)?);
                    }
                    Ok(outs)
                },
            ));
        }
    }
    out
}
