//! The conformance cases: one per op family (and, as they land, per transform), each a few
//! plans with deterministic inputs that include the special values (NaN, infinities, signed
//! zeros, rounding ties) where an op's contract covers them.
//!
//! A case only builds plans and inputs; running them on a backend and comparing with the CPU
//! reference is the harness's job (`crate::run_case`), so adding a case is adding one
//! function and one line in [`CASES`].

use crate::{integers, Case, Program};
use quabla_backend::HostTensor;
use quabla_ir::{
    BinaryOp, Comparison, DType, GraphBuilder, HostData, IrError, LinalgKind, NodeId, Op, Plan,
    Shape, TensorType, UnaryOp,
};

/// Every case, in the order of the matrix.
pub const CASES: &[Case] = &[
    Case::new("cast", cast),
    Case::new("unary_f64", unary_f64),
    Case::new("unary_f32", unary_f32),
    Case::new("powi", powi),
    Case::new("binary_f64", binary_f64),
    Case::new("binary_f32", binary_f32),
    Case::new("binary_broadcast", binary_broadcast),
    Case::new("compare", compare),
    Case::new("where_", select),
    Case::new("stop_gradient", stop_gradient),
    Case::new("sum_mean", sum_mean),
    Case::new("axis_reductions", axis_reductions),
    Case::new("cumsum", cumsum),
    Case::new("reshape_transpose", reshape_transpose),
    Case::new("broadcast", broadcast),
    Case::new("concat", concat),
    Case::new("slice_pad_slice", slice_pad_slice),
    Case::new("gather_scatter_add", gather_scatter_add),
    Case::new("matmul", matmul),
    Case::new("solve", solve),
    Case::new("triangular_solve", triangular_solve),
    Case::new("cholesky", cholesky),
    Case::new("decompositions", decompositions),
    Case::new("fused_chain", fused_chain),
    Case::new("large_reduction", large_reduction),
    Case::new("non_finite_constants", non_finite_constants),
    Case::new("outputs_and_passthrough", outputs_and_passthrough),
    Case::new("integer_arithmetic", integers::integer_arithmetic),
    Case::new("integer_casts", integers::integer_casts),
    Case::new("integer_reductions", integers::integer_reductions),
    Case::new("integer_layout", integers::integer_layout),
    Case::new("indexed", integers::indexed),
];

/// The project's deterministic test generator, so every run sees the same inputs.
pub use quabla_random::testing::TestRng as Rng;

/// Values every elementwise case starts with: the special values, then moderate ones.
const SPECIAL: [f64; 14] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -2.5,
    2.0,
    3.0,
    0.1,
    -0.75,
    1e-3,
];

fn shape(dims: &[usize]) -> Shape {
    Shape::new(dims.to_vec()).expect("conformance shapes have no zero extents")
}

/// A tensor of `dims` holding `values` (rounded to `dtype`; bool: nonzero is true).
pub fn tensor(dtype: DType, dims: &[usize], values: &[f64]) -> HostTensor {
    HostTensor::new(
        shape(dims),
        HostData::from_f64(dtype, values.iter().copied()),
    )
}

/// The special values followed by finite pseudo-random ones, `n` in all.
fn mixed(seed: u64, n: usize) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    SPECIAL
        .iter()
        .copied()
        .chain(std::iter::repeat_with(move || rng.finite()))
        .take(n)
        .collect()
}

fn finite(seed: u64, n: usize) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.finite()).collect()
}

/// One plan: inputs named `x0`, `x1`, ... of the tensors' types, and the outputs `body`
/// returns.
pub(crate) fn program(
    label: impl Into<String>,
    inputs: Vec<HostTensor>,
    body: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> Result<Vec<NodeId>, IrError>,
) -> Program {
    let label = label.into();
    let mut b = GraphBuilder::new();
    let ids: Vec<NodeId> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| b.input(format!("x{i}"), TensorType::new(t.dtype(), t.shape.clone())))
        .collect();
    let outputs = body(&mut b, &ids)
        .unwrap_or_else(|e| panic!("conformance case {label} builds an invalid graph: {e}"));
    let graph = b
        .finish(outputs)
        .unwrap_or_else(|e| panic!("conformance case {label} builds an invalid graph: {e}"));
    Program {
        label,
        plan: Plan::compile(&graph),
        inputs,
    }
}

fn cast() -> Vec<Program> {
    let mut out = Vec::new();
    for (from, to) in [
        (DType::F64, DType::F32),
        (DType::F32, DType::F64),
        (DType::F64, DType::Bool),
        (DType::Bool, DType::F64),
        (DType::Bool, DType::F32),
    ] {
        let values = match from {
            DType::Bool => vec![1.0, 0.0, 1.0, 1.0, 0.0],
            _ => [mixed(1, 20), vec![1e300, -1e300, 1e-310, 0.1, 3.4e38]].concat(),
        };
        let n = values.len();
        out.push(program(
            format!("{} -> {}", from.name(), to.name()),
            vec![tensor(from, &[n], &values)],
            |b, x| Ok(vec![b.push(Op::Cast { to, weak: false }, &[x[0]])?]),
        ));
    }
    out
}

fn unary(dtype: DType) -> Vec<Program> {
    UnaryOp::ALL
        .iter()
        .filter(|op| op.takes_floats())
        .map(|&op| {
            let values = [mixed(2, 40), vec![0.999, -0.999, 1.5, -1.5, 0.5, -0.5]].concat();
            let n = values.len();
            program(op.name(), vec![tensor(dtype, &[n], &values)], |b, x| {
                Ok(vec![b.unary(op, x[0])?])
            })
        })
        .collect()
}

fn unary_f64() -> Vec<Program> {
    unary(DType::F64)
}

fn unary_f32() -> Vec<Program> {
    unary(DType::F32)
}

fn powi() -> Vec<Program> {
    [0, 1, 2, 3, 7, -1, -2]
        .iter()
        .flat_map(|&n| {
            [DType::F64, DType::F32].map(|dtype| {
                program(
                    format!("powi {n} {}", dtype.name()),
                    vec![tensor(dtype, &[30], &mixed(3, 30))],
                    move |b, x| Ok(vec![b.powi(x[0], n)?]),
                )
            })
        })
        .collect()
}

fn binary(dtype: DType) -> Vec<Program> {
    BinaryOp::ALL
        .iter()
        .filter(|op| op.takes_floats())
        .map(|&op| {
            // Every pair of special values, then random pairs.
            let special = mixed(4, SPECIAL.len());
            let mut a: Vec<f64> = Vec::new();
            let mut c: Vec<f64> = Vec::new();
            for &x in &special {
                for &y in &special {
                    a.push(x);
                    c.push(y);
                }
            }
            a.extend(finite(5, 32));
            c.extend(finite(6, 32));
            let n = a.len();
            program(
                op.name(),
                vec![tensor(dtype, &[n], &a), tensor(dtype, &[n], &c)],
                |b, x| Ok(vec![b.binary(op, x[0], x[1])?]),
            )
        })
        .collect()
}

fn binary_f64() -> Vec<Program> {
    binary(DType::F64)
}

fn binary_f32() -> Vec<Program> {
    binary(DType::F32)
}

fn binary_broadcast() -> Vec<Program> {
    vec![
        program(
            "[3,1] + [4]",
            vec![
                tensor(DType::F64, &[3, 1], &finite(7, 3)),
                tensor(DType::F64, &[4], &finite(8, 4)),
            ],
            |b, x| Ok(vec![b.add(x[0], x[1])?, b.mul(x[0], x[1])?]),
        ),
        program(
            "[2,1,3] / [] (f32)",
            vec![
                tensor(DType::F32, &[2, 1, 3], &finite(9, 6)),
                tensor(DType::F32, &[], &[0.3]),
            ],
            |b, x| Ok(vec![b.div(x[0], x[1])?, b.sub(x[1], x[0])?]),
        ),
    ]
}

fn compare() -> Vec<Program> {
    Comparison::ALL
        .iter()
        .flat_map(|&c| {
            [DType::F64, DType::F32].map(|dtype| {
                let special = mixed(10, SPECIAL.len());
                let mut a = Vec::new();
                let mut d = Vec::new();
                for &x in &special {
                    for &y in &special {
                        a.push(x);
                        d.push(y);
                    }
                }
                let n = a.len();
                program(
                    format!("{} {}", c.name(), dtype.name()),
                    vec![tensor(dtype, &[n], &a), tensor(dtype, &[n], &d)],
                    move |b, x| Ok(vec![b.compare(c, x[0], x[1])?]),
                )
            })
        })
        .collect()
}

fn select() -> Vec<Program> {
    vec![
        program(
            "where f64",
            vec![
                tensor(DType::Bool, &[8], &[1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]),
                tensor(DType::F64, &[8], &mixed(11, 8)),
                tensor(DType::F64, &[8], &finite(12, 8)),
            ],
            |b, x| Ok(vec![b.select(x[0], x[1], x[2])?]),
        ),
        program(
            "where broadcast f32",
            vec![
                tensor(DType::Bool, &[2, 1], &[1.0, 0.0]),
                tensor(DType::F32, &[3], &finite(13, 3)),
                tensor(DType::F32, &[2, 3], &finite(14, 6)),
            ],
            |b, x| Ok(vec![b.select(x[0], x[1], x[2])?]),
        ),
    ]
}

fn stop_gradient() -> Vec<Program> {
    vec![program(
        "stop_gradient",
        vec![tensor(DType::F64, &[16], &mixed(15, 16))],
        |b, x| Ok(vec![b.stop_gradient(x[0])?]),
    )]
}

fn sum_mean() -> Vec<Program> {
    [DType::F64, DType::F32]
        .into_iter()
        .flat_map(|dtype| {
            [
                program(
                    format!("sum {}", dtype.name()),
                    vec![tensor(dtype, &[5, 7], &finite(16, 35))],
                    |b, x| Ok(vec![b.sum(x[0], None, false)?]),
                ),
                program(
                    format!("mean {}", dtype.name()),
                    vec![tensor(dtype, &[5, 7], &finite(17, 35))],
                    |b, x| Ok(vec![b.mean(x[0], None, false)?]),
                ),
                program(
                    format!("sum with NaN and infinities {}", dtype.name()),
                    vec![tensor(dtype, &[14], &mixed(18, 14))],
                    |b, x| Ok(vec![b.sum(x[0], None, false)?]),
                ),
            ]
        })
        .collect()
}

fn axis_reductions() -> Vec<Program> {
    let mut out = Vec::new();
    for dtype in [DType::F64, DType::F32] {
        for axes in [&[0isize][..], &[1], &[2], &[0, 2], &[-1, 0, 1]] {
            let values = [mixed(19, 14), finite(20, 60 - 14)].concat();
            out.push(program(
                format!("axes {axes:?} {}", dtype.name()),
                vec![tensor(dtype, &[3, 4, 5], &values)],
                |b, x| {
                    Ok(vec![
                        b.sum(x[0], Some(axes), false)?,
                        b.mean(x[0], Some(axes), true)?,
                        b.max(x[0], Some(axes), false)?,
                        b.min(x[0], Some(axes), false)?,
                    ])
                },
            ));
        }
    }
    out
}

fn cumsum() -> Vec<Program> {
    let mut out = Vec::new();
    for dtype in [DType::F64, DType::F32] {
        for axis in [0isize, 1] {
            for reverse in [false, true] {
                out.push(program(
                    format!("axis {axis} reverse {reverse} {}", dtype.name()),
                    vec![tensor(dtype, &[4, 6], &finite(21, 24))],
                    |b, x| Ok(vec![b.cumsum(x[0], axis, reverse)?]),
                ));
            }
        }
    }
    out
}

fn reshape_transpose() -> Vec<Program> {
    vec![
        program(
            "reshape then transpose",
            vec![tensor(DType::F64, &[2, 3, 4], &finite(22, 24))],
            |b, x| {
                let r = b.reshape(x[0], &[4, 6])?;
                let t = b.transpose(r, None)?;
                let u = b.transpose(x[0], Some(&[2, 0, 1]))?;
                Ok(vec![r, t, u])
            },
        ),
        program(
            "transpose then elementwise (f32)",
            vec![tensor(DType::F32, &[3, 5], &finite(23, 15))],
            |b, x| {
                let t = b.transpose(x[0], None)?;
                Ok(vec![b.unary(UnaryOp::Exp, t)?])
            },
        ),
    ]
}

fn broadcast() -> Vec<Program> {
    vec![program(
        "broadcast_to",
        vec![
            tensor(DType::F64, &[3, 1], &finite(24, 3)),
            tensor(DType::Bool, &[], &[1.0]),
        ],
        |b, x| {
            Ok(vec![
                b.broadcast_to(x[0], shape(&[2, 3, 4]))?,
                b.broadcast_to(x[1], shape(&[5]))?,
            ])
        },
    )]
}

fn concat() -> Vec<Program> {
    vec![
        program(
            "axis 0",
            vec![
                tensor(DType::F64, &[2, 3], &finite(25, 6)),
                tensor(DType::F64, &[1, 3], &finite(26, 3)),
                tensor(DType::F64, &[3, 3], &finite(27, 9)),
            ],
            |b, x| Ok(vec![b.concat(&[x[0], x[1], x[2]], 0)?]),
        ),
        program(
            "axis 1 f32",
            vec![
                tensor(DType::F32, &[2, 3], &finite(28, 6)),
                tensor(DType::F32, &[2, 2], &finite(29, 4)),
            ],
            |b, x| Ok(vec![b.concat(&[x[0], x[1]], -1)?]),
        ),
    ]
}

fn slice_pad_slice() -> Vec<Program> {
    vec![program(
        "slice and pad_slice",
        vec![tensor(DType::F64, &[4, 5], &finite(30, 20))],
        |b, x| {
            let s = b.slice(x[0], vec![1, 2], vec![2, 3])?;
            let p = b.push(
                Op::PadSlice {
                    starts: vec![0, 1],
                    shape: shape(&[3, 5]),
                },
                &[s],
            )?;
            Ok(vec![s, p])
        },
    )]
}

fn gather_scatter_add() -> Vec<Program> {
    vec![
        program(
            "gather",
            vec![tensor(DType::F64, &[4, 3], &finite(31, 12))],
            |b, x| {
                Ok(vec![
                    b.gather(x[0], &[3, 0, 0, -1], 0)?,
                    b.gather(x[0], &[2, 1], 1)?,
                ])
            },
        ),
        program(
            "scatter_add with repeated indices",
            vec![
                tensor(DType::F32, &[4, 3], &finite(32, 12)),
                tensor(DType::F32, &[3, 3], &finite(33, 9)),
            ],
            |b, x| Ok(vec![b.scatter_add(x[0], &[1, 1, 3], x[1], 0)?]),
        ),
    ]
}

fn matmul() -> Vec<Program> {
    let mut out = Vec::new();
    for dtype in [DType::F64, DType::F32] {
        out.push(program(
            format!("[5,7] @ [7,3] {}", dtype.name()),
            vec![
                tensor(dtype, &[5, 7], &finite(34, 35)),
                tensor(dtype, &[7, 3], &finite(35, 21)),
            ],
            |b, x| Ok(vec![b.matmul(x[0], x[1])?]),
        ));
        out.push(program(
            format!("batched [2,3,4] @ [4,2] {}", dtype.name()),
            vec![
                tensor(dtype, &[2, 3, 4], &finite(36, 24)),
                tensor(dtype, &[4, 2], &finite(37, 8)),
            ],
            |b, x| Ok(vec![b.matmul(x[0], x[1])?]),
        ));
        out.push(program(
            format!("vector forms {}", dtype.name()),
            vec![
                tensor(dtype, &[4], &finite(38, 4)),
                tensor(dtype, &[4, 4], &finite(39, 16)),
            ],
            |b, x| Ok(vec![b.matmul(x[0], x[1])?, b.matmul(x[1], x[0])?]),
        ));
    }
    out.push(program(
        "[64,48] @ [48,40]",
        vec![
            tensor(DType::F64, &[64, 48], &finite(40, 64 * 48)),
            tensor(DType::F64, &[48, 40], &finite(41, 48 * 40)),
        ],
        |b, x| Ok(vec![b.matmul(x[0], x[1])?]),
    ));
    out
}

/// A batch of well-conditioned `n x n` matrices (diagonally dominant).
fn well_conditioned(seed: u64, batch: usize, n: usize) -> Vec<f64> {
    let mut v = finite(seed, batch * n * n);
    for k in 0..batch {
        for i in 0..n {
            v[k * n * n + i * n + i] += 4.0 * n as f64;
        }
    }
    v
}

/// A batch of symmetric positive definite `n x n` matrices.
fn spd(seed: u64, batch: usize, n: usize) -> Vec<f64> {
    let a = finite(seed, batch * n * n);
    let mut out = vec![0.0; batch * n * n];
    for k in 0..batch {
        let m = &a[k * n * n..(k + 1) * n * n];
        for i in 0..n {
            for j in 0..n {
                let dot: f64 = (0..n).map(|l| m[i * n + l] * m[j * n + l]).sum();
                out[k * n * n + i * n + j] = dot + if i == j { n as f64 } else { 0.0 };
            }
        }
    }
    out
}

fn solve() -> Vec<Program> {
    let mut out = Vec::new();
    for dtype in [DType::F64, DType::F32] {
        out.push(program(
            format!("batched {}", dtype.name()),
            vec![
                tensor(dtype, &[2, 4, 4], &well_conditioned(42, 2, 4)),
                tensor(dtype, &[2, 4, 3], &finite(43, 24)),
            ],
            |b, x| {
                Ok(vec![
                    b.push(Op::Solve { transpose_a: false }, &[x[0], x[1]])?
                ])
            },
        ));
    }
    // Both orientations and the determinant of one matrix: a backend may share the factors.
    out.push(program(
        "transposed, with slogdet of the same matrix",
        vec![
            tensor(DType::F64, &[2, 4, 4], &well_conditioned(44, 2, 4)),
            tensor(DType::F64, &[2, 4, 3], &finite(45, 24)),
        ],
        |b, x| {
            let back = b.push(Op::Solve { transpose_a: true }, &[x[0], x[1]])?;
            let there = b.push(Op::Solve { transpose_a: false }, &[x[0], back])?;
            let log = b.push(Op::Linalg(LinalgKind::LogAbsDet), &[x[0]])?;
            Ok(vec![back, there, log])
        },
    ));
    // An exactly singular matrix: the reference reports LA1, and so must the backend.
    out.push(program(
        "singular",
        vec![
            tensor(DType::F64, &[2, 2], &[1.0, 2.0, 2.0, 4.0]),
            tensor(DType::F64, &[2, 1], &[1.0, 1.0]),
        ],
        |b, x| {
            Ok(vec![
                b.push(Op::Solve { transpose_a: false }, &[x[0], x[1]])?
            ])
        },
    ));
    out
}

fn triangular_solve() -> Vec<Program> {
    let mut out = Vec::new();
    for lower in [true, false] {
        for transpose_a in [false, true] {
            for unit_diagonal in [false, true] {
                out.push(program(
                    format!("lower {lower} transpose {transpose_a} unit {unit_diagonal}"),
                    vec![
                        tensor(DType::F64, &[4, 4], &well_conditioned(44, 1, 4)),
                        tensor(DType::F64, &[4, 2], &finite(45, 8)),
                    ],
                    |b, x| {
                        Ok(vec![b.push(
                            Op::TriangularSolve {
                                lower,
                                transpose_a,
                                unit_diagonal,
                            },
                            &[x[0], x[1]],
                        )?])
                    },
                ));
            }
        }
    }
    out
}

fn cholesky() -> Vec<Program> {
    vec![
        program(
            "cholesky f64",
            vec![tensor(DType::F64, &[3, 5, 5], &spd(46, 3, 5))],
            |b, x| Ok(vec![b.push(Op::Cholesky, &[x[0]])?]),
        ),
        program(
            "cholesky f32",
            vec![tensor(DType::F32, &[4, 4], &spd(47, 1, 4))],
            |b, x| Ok(vec![b.push(Op::Cholesky, &[x[0]])?]),
        ),
        program(
            "cholesky_ad",
            vec![
                tensor(DType::F64, &[4, 4], &spd(48, 1, 4)),
                tensor(DType::F64, &[4, 4], &spd(49, 1, 4)),
            ],
            |b, x| {
                let l = b.push(Op::Cholesky, &[x[0]])?;
                Ok(vec![b.push(Op::CholeskyAd, &[l, x[1]])?])
            },
        ),
    ]
}

fn decompositions() -> Vec<Program> {
    let mut out = Vec::new();
    for kind in [
        LinalgKind::DetSign,
        LinalgKind::LogAbsDet,
        LinalgKind::QrR,
        LinalgKind::QrQ,
        LinalgKind::SvdS,
        LinalgKind::SvdU,
        LinalgKind::SvdVh,
    ] {
        out.push(program(
            format!("{kind:?} [2,4,4]"),
            vec![tensor(DType::F64, &[2, 4, 4], &well_conditioned(50, 2, 4))],
            move |b, x| Ok(vec![b.push(Op::Linalg(kind), &[x[0]])?]),
        ));
    }
    for kind in [
        LinalgKind::QrQComplete,
        LinalgKind::SvdUFull,
        LinalgKind::SvdVhFull,
    ] {
        out.push(program(
            format!("{kind:?} [5,3]"),
            vec![tensor(DType::F64, &[5, 3], &finite(51, 15))],
            move |b, x| Ok(vec![b.push(Op::Linalg(kind), &[x[0]])?]),
        ));
    }
    for kind in [LinalgKind::EighValues, LinalgKind::EighVectors] {
        out.push(program(
            format!("{kind:?} [5,5]"),
            vec![tensor(DType::F64, &[5, 5], &spd(52, 1, 5))],
            move |b, x| Ok(vec![b.push(Op::Linalg(kind), &[x[0]])?]),
        ));
    }
    out
}

fn fused_chain() -> Vec<Program> {
    [DType::F64, DType::F32]
        .map(|dtype| {
            program(
                format!("sin(x)^2 * exp(-y) + where(x > y, x, y) {}", dtype.name()),
                vec![
                    tensor(dtype, &[6, 50], &finite(53, 300)),
                    tensor(dtype, &[50], &finite(54, 50)),
                ],
                |b, x| {
                    let s = b.unary(UnaryOp::Sin, x[0])?;
                    let s2 = b.powi(s, 2)?;
                    let ny = b.unary(UnaryOp::Neg, x[1])?;
                    let e = b.unary(UnaryOp::Exp, ny)?;
                    let m = b.mul(s2, e)?;
                    let gt = b.compare(Comparison::Greater, x[0], x[1])?;
                    let w = b.select(gt, x[0], x[1])?;
                    let r = b.add(m, w)?;
                    let half = b.weak_scalar(0.5);
                    let h = b.mul(r, half)?;
                    Ok(vec![h, b.sum(h, Some(&[1]), false)?])
                },
            )
        })
        .into_iter()
        .collect()
}

fn large_reduction() -> Vec<Program> {
    // Large enough for the CPU to split the work over threads (which must not change a bit).
    let n = 300_000;
    vec![program(
        "sum and max over 300000 elements",
        vec![tensor(DType::F64, &[n], &finite(55, n))],
        |b, x| {
            let y = b.unary(UnaryOp::Tanh, x[0])?;
            Ok(vec![b.sum(y, None, false)?, b.max(y, None, false)?])
        },
    )]
}

fn non_finite_constants() -> Vec<Program> {
    vec![program(
        "NaN and infinite constants",
        vec![tensor(DType::F32, &[3], &[1.0, -2.0, 0.5])],
        |b, x| {
            let c = b.constant(
                HostData::from_f64(DType::F32, [f64::NAN, f64::INFINITY, f64::NEG_INFINITY]),
                shape(&[3]),
                false,
            )?;
            let m = b.mul(x[0], c)?;
            let finite = b.compare(Comparison::Equal, m, m)?;
            Ok(vec![m, finite])
        },
    )]
}

fn outputs_and_passthrough() -> Vec<Program> {
    vec![program(
        "an input as output, one node twice",
        vec![
            tensor(DType::F64, &[2, 2], &finite(56, 4)),
            tensor(DType::Bool, &[3], &[1.0, 0.0, 1.0]),
        ],
        |b, x| {
            let y = b.unary(UnaryOp::Cos, x[0])?;
            Ok(vec![x[0], y, y, x[1]])
        },
    )]
}
