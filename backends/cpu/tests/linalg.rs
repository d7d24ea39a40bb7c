//! `matmul` against a naive triple loop, and the linear-algebra ops against direct calls of
//! `quabla-linalg`.

mod common;

use common::{data, shape, Rng};
use quabla_backend::{BackendError, HostTensor};
use quabla_cpu::{run_plan, CpuBackend};
use quabla_ir::{DType, GraphBuilder, HostData, LinalgKind, NodeId, Op, Plan, TensorType};

fn run1(
    inputs: &[(DType, &[usize], Vec<f64>)],
    body: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> NodeId,
) -> Result<HostTensor, BackendError> {
    let mut b = GraphBuilder::new();
    let ids: Vec<NodeId> = inputs
        .iter()
        .enumerate()
        .map(|(i, (dt, dims, _))| b.input(format!("x{i}"), TensorType::new(*dt, shape(dims))))
        .collect();
    let out = body(&mut b, &ids);
    let plan = Plan::from_graph_unoptimized(b.finish(vec![out]).unwrap());
    let host: Vec<HostTensor> = inputs
        .iter()
        .map(|(dt, dims, v)| HostTensor::new(shape(dims), data(*dt, v)))
        .collect();
    run_plan(&plan, &host).map(|mut v| v.remove(0))
}

fn values(rng: &mut Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.finite()).collect()
}

/// Naive batched product with NumPy broadcasting of the batch axes; also returns
/// `sum |a_ik| |b_kj|` per element for the error bound.
fn naive_matmul(
    a: &[f64],
    ad: &[usize],
    b: &[f64],
    bd: &[usize],
) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
    let (ra, rb) = (ad.len(), bd.len());
    let (m, k, n) = (ad[ra - 2], ad[ra - 1], bd[rb - 1]);
    let (ab, bb) = (&ad[..ra - 2], &bd[..rb - 2]);
    let rank = ab.len().max(bb.len());
    let dim = |s: &[usize], i: usize| {
        if i + s.len() >= rank {
            s[i + s.len() - rank]
        } else {
            1
        }
    };
    let batch: Vec<usize> = (0..rank).map(|i| dim(ab, i).max(dim(bb, i))).collect();
    let count: usize = batch.iter().product();
    let mut out = vec![0.0; count * m * n];
    let mut bound = vec![0.0; count * m * n];
    for bi in 0..count {
        // Multi-index of the batch, then the operands' matrix indices.
        let mut rem = bi;
        let mut idx = vec![0; rank];
        for i in (0..rank).rev() {
            idx[i] = rem % batch[i];
            rem /= batch[i];
        }
        let flat = |s: &[usize]| -> usize {
            let mut f = 0;
            for (i, &ix) in idx.iter().enumerate() {
                let d = dim(s, i);
                f = f * d + if d == 1 { 0 } else { ix };
            }
            f
        };
        let (ia, ib) = (flat(ab), flat(bb));
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut t) = (0.0, 0.0);
                for p in 0..k {
                    let x = a[ia * m * k + i * k + p] * b[ib * k * n + p * n + j];
                    s += x;
                    t += x.abs();
                }
                out[bi * m * n + i * n + j] = s;
                bound[bi * m * n + i * n + j] = t;
            }
        }
    }
    let mut dims = batch;
    dims.extend([m, n]);
    (dims, out, bound)
}

#[test]
fn matmul_matches_a_naive_product() {
    let mut rng = Rng::new(21);
    let cases: [(&[usize], &[usize]); 10] = [
        (&[1, 1], &[1, 1]),
        (&[3, 4], &[4, 5]),
        (&[17, 33], &[33, 9]),
        (&[64, 64], &[64, 64]),
        (&[130, 70], &[70, 90]),
        (&[2, 3, 4], &[2, 4, 5]),
        (&[2, 1, 3, 4], &[5, 4, 2]),
        (&[6, 40, 50], &[50, 30]),
        (&[1, 7], &[3, 7, 2]),
        (&[300, 2], &[2, 500]),
    ];
    for (ad, bd) in cases {
        let a = values(&mut rng, ad.iter().product());
        let b = values(&mut rng, bd.iter().product());
        let (dims, want, bound) = naive_matmul(&a, ad, &b, bd);
        for dt in [DType::F64, DType::F32] {
            let a_dt = data(dt, &a).to_f64_vec();
            let b_dt = data(dt, &b).to_f64_vec();
            let (_, want_dt, _) = naive_matmul(&a_dt, ad, &b_dt, bd);
            let got = run1(&[(dt, ad, a.clone()), (dt, bd, b.clone())], |g, x| {
                g.matmul(x[0], x[1]).unwrap()
            })
            .unwrap();
            assert_eq!(got.shape.dims(), dims.as_slice(), "{ad:?} x {bd:?}");
            assert_eq!(got.dtype(), dt);
            let tol = if dt == DType::F64 { 1e-12 } else { 1e-6 };
            for i in 0..want.len() {
                let g = got.data.get_f64(i);
                assert!(
                    (g - want_dt[i]).abs() <= tol * bound[i] + 1e-300,
                    "{ad:?} x {bd:?} {dt}: element {i}: {g} vs {}",
                    want_dt[i]
                );
            }
            let _ = &want;
        }
    }
}

#[test]
fn matmul_vector_forms() {
    // Rank-1 operands go through the builder's reshapes.
    let a = vec![1.0, 2.0, 3.0];
    let m = vec![1.0, 0.0, 0.0, 1.0, 2.0, 2.0];
    let got = run1(
        &[
            (DType::F64, &[3], a.clone()),
            (DType::F64, &[3, 2], m.clone()),
        ],
        |g, x| g.matmul(x[0], x[1]).unwrap(),
    )
    .unwrap();
    assert_eq!(got.shape.dims(), &[2]);
    assert_eq!(got.data, data(DType::F64, &[7.0, 8.0]));
    let got = run1(
        &[(DType::F32, &[3], a.clone()), (DType::F32, &[3], a)],
        |g, x| g.matmul(x[0], x[1]).unwrap(),
    )
    .unwrap();
    assert_eq!(got.shape.dims(), &[] as &[usize]);
    assert_eq!(got.data, data(DType::F32, &[14.0]));
}

/// A well-conditioned `[batch, n, n]` matrix: random plus `n` on the diagonal.
fn well_conditioned(rng: &mut Rng, batch: usize, n: usize) -> Vec<f64> {
    let mut a = values(rng, batch * n * n);
    for bi in 0..batch {
        for i in 0..n {
            a[bi * n * n + i * n + i] += n as f64 + 1.0;
        }
    }
    a
}

/// Symmetric positive definite: `A A^T + n I`.
fn spd(rng: &mut Rng, batch: usize, n: usize) -> Vec<f64> {
    let a = values(rng, batch * n * n);
    let mut out = vec![0.0; batch * n * n];
    for bi in 0..batch {
        let m = &a[bi * n * n..(bi + 1) * n * n];
        for i in 0..n {
            for j in 0..n {
                let mut s = 0.0;
                for p in 0..n {
                    s += m[i * n + p] * m[j * n + p];
                }
                out[bi * n * n + i * n + j] = s + if i == j { n as f64 } else { 0.0 };
            }
        }
    }
    out
}

/// The f64 result of a direct kernel call, rounded to `dt` like the backend rounds.
fn rounded(dt: DType, v: &[f64]) -> HostData {
    data(dt, v)
}

#[test]
fn solve_and_triangular_solve_match_quabla_linalg() {
    let mut rng = Rng::new(31);
    let (batch, n, k) = (2, 5, 3);
    let a = well_conditioned(&mut rng, batch, n);
    let b = values(&mut rng, batch * n * k);
    for dt in [DType::F64, DType::F32] {
        let (a_dt, b_dt) = (data(dt, &a).to_f64_vec(), data(dt, &b).to_f64_vec());
        let got = run1(
            &[
                (dt, &[batch, n, n], a.clone()),
                (dt, &[batch, n, k], b.clone()),
            ],
            |g, x| {
                g.push(Op::Solve { transpose_a: false }, &[x[0], x[1]])
                    .unwrap()
            },
        )
        .unwrap();
        let want = quabla_linalg::solve(&a_dt, &b_dt, batch, n, k).unwrap();
        assert_eq!(got.data, rounded(dt, &want), "solve {dt}");
        for lower in [false, true] {
            for transpose_a in [false, true] {
                for unit_diagonal in [false, true] {
                    let op = Op::TriangularSolve {
                        lower,
                        transpose_a,
                        unit_diagonal,
                    };
                    let got = run1(
                        &[
                            (dt, &[batch, n, n], a.clone()),
                            (dt, &[batch, n, k], b.clone()),
                        ],
                        |g, x| g.push(op, &[x[0], x[1]]).unwrap(),
                    )
                    .unwrap();
                    let want = quabla_linalg::triangular_solve(
                        &a_dt,
                        &b_dt,
                        batch,
                        n,
                        k,
                        lower,
                        transpose_a,
                        unit_diagonal,
                    )
                    .unwrap();
                    assert_eq!(
                        got.data,
                        rounded(dt, &want),
                        "triangular_solve {lower} {transpose_a} {unit_diagonal} {dt}"
                    );
                }
            }
        }
    }
}

#[test]
fn singular_solve_is_a_typed_error() {
    let a = vec![1.0, 2.0, 2.0, 4.0];
    let b = vec![1.0, 1.0];
    let err = run1(
        &[(DType::F64, &[2, 2], a), (DType::F64, &[2, 1], b)],
        |g, x| {
            g.push(Op::Solve { transpose_a: false }, &[x[0], x[1]])
                .unwrap()
        },
    )
    .unwrap_err();
    assert_eq!(err, BackendError::Singular { op: "solve".into() });
}

#[test]
fn decompositions_match_quabla_linalg() {
    let mut rng = Rng::new(41);
    let (batch, n) = (3, 4);
    let sq = spd(&mut rng, batch, n);
    let general = values(&mut rng, batch * n * n);
    for dt in [DType::F64, DType::F32] {
        let sq_dt = data(dt, &sq).to_f64_vec();
        let got = run1(&[(dt, &[batch, n, n], sq.clone())], |g, x| {
            g.push(Op::Cholesky, &[x[0]]).unwrap()
        })
        .unwrap();
        assert_eq!(
            got.data,
            rounded(dt, &quabla_linalg::cholesky(&sq_dt, batch, n).unwrap()),
            "cholesky {dt}"
        );
        // Square kinds on a general and a symmetric matrix.
        for (label, a) in [("general", &general), ("spd", &sq)] {
            let a_dt = data(dt, a).to_f64_vec();
            let (sign, logdet) = quabla_linalg::slogdet(&a_dt, batch, n).unwrap();
            let (w, v) = quabla_linalg::eigh(&a_dt, batch, n).unwrap();
            let expect = [
                (LinalgKind::DetSign, sign, vec![batch]),
                (LinalgKind::LogAbsDet, logdet, vec![batch]),
                (LinalgKind::EighValues, w, vec![batch, n]),
                (LinalgKind::EighVectors, v, vec![batch, n, n]),
            ];
            for (kind, want, dims) in expect {
                let got = run1(&[(dt, &[batch, n, n], a.clone())], |g, x| {
                    g.push(Op::Linalg(kind), &[x[0]]).unwrap()
                })
                .unwrap();
                assert_eq!(got.shape.dims(), dims.as_slice());
                assert_eq!(got.data, rounded(dt, &want), "{} {label} {dt}", kind.name());
            }
        }
        // QR and SVD on square, tall and wide matrices.
        for (m, c) in [(4usize, 4usize), (5, 3), (2, 6)] {
            let a = values(&mut rng, 2 * m * c);
            let a_dt = data(dt, &a).to_f64_vec();
            let (q, r) = quabla_linalg::qr(&a_dt, 2, m, c, false).unwrap();
            let (qc, _) = quabla_linalg::qr(&a_dt, 2, m, c, true).unwrap();
            let (u, s, vh) = quabla_linalg::svd(&a_dt, 2, m, c, false).unwrap();
            let (uf, _, vhf) = quabla_linalg::svd(&a_dt, 2, m, c, true).unwrap();
            let expect = [
                (LinalgKind::QrQ, q),
                (LinalgKind::QrR, r),
                (LinalgKind::QrQComplete, qc),
                (LinalgKind::SvdU, u),
                (LinalgKind::SvdS, s),
                (LinalgKind::SvdVh, vh),
                (LinalgKind::SvdUFull, uf),
                (LinalgKind::SvdVhFull, vhf),
            ];
            for (kind, want) in expect {
                let got = run1(&[(dt, &[2, m, c], a.clone())], |g, x| {
                    g.push(Op::Linalg(kind), &[x[0]]).unwrap()
                })
                .unwrap();
                assert_eq!(got.data, rounded(dt, &want), "{} {m}x{c} {dt}", kind.name());
            }
        }
    }
}

/// `cholesky_ad` is the derivative of the Cholesky factor: central differences of
/// `quabla_linalg::cholesky` along a symmetric direction.
#[test]
fn cholesky_ad_is_the_tangent_of_cholesky() {
    let mut rng = Rng::new(51);
    let (batch, n) = (2, 5);
    let a = spd(&mut rng, batch, n);
    let mut da = values(&mut rng, batch * n * n);
    for bi in 0..batch {
        for i in 0..n {
            for j in 0..i {
                let (p, q) = (bi * n * n + i * n + j, bi * n * n + j * n + i);
                da[q] = da[p];
            }
        }
    }
    let l = quabla_linalg::cholesky(&a, batch, n).unwrap();
    let got = run1(
        &[
            (DType::F64, &[batch, n, n], l.clone()),
            (DType::F64, &[batch, n, n], da.clone()),
        ],
        |g, x| g.push(Op::CholeskyAd, &[x[0], x[1]]).unwrap(),
    )
    .unwrap();
    let h = 1e-6;
    let plus: Vec<f64> = a.iter().zip(&da).map(|(x, d)| x + h * d).collect();
    let minus: Vec<f64> = a.iter().zip(&da).map(|(x, d)| x - h * d).collect();
    let lp = quabla_linalg::cholesky(&plus, batch, n).unwrap();
    let lm = quabla_linalg::cholesky(&minus, batch, n).unwrap();
    for i in 0..l.len() {
        let fd = (lp[i] - lm[i]) / (2.0 * h);
        let g = got.data.get_f64(i);
        assert!(
            (g - fd).abs() <= 1e-6 * (1.0 + fd.abs()),
            "element {i}: {g} vs {fd}"
        );
    }
    // Exactly lower triangular, and the f32 form agrees with the f64 one after rounding.
    for bi in 0..batch {
        for i in 0..n {
            for j in i + 1..n {
                assert_eq!(got.data.get_f64(bi * n * n + i * n + j), 0.0);
            }
        }
    }
    let got32 = run1(
        &[
            (DType::F32, &[batch, n, n], l),
            (DType::F32, &[batch, n, n], da),
        ],
        |g, x| g.push(Op::CholeskyAd, &[x[0], x[1]]).unwrap(),
    )
    .unwrap();
    for i in 0..batch * n * n {
        let (a32, a64) = (got32.data.get_f64(i), got.data.get_f64(i));
        assert!(
            (a32 - a64).abs() <= 1e-5 * (1.0 + a64.abs()),
            "f32 element {i}: {a32} vs {a64}"
        );
    }
}

#[test]
fn non_finite_matrices_give_values_not_panics() {
    let a = vec![f64::NAN, 1.0, 1.0, 2.0];
    let b = vec![1.0, 1.0];
    let x = run1(
        &[(DType::F64, &[2, 2], a.clone()), (DType::F64, &[2, 1], b)],
        |g, x| {
            g.push(Op::Solve { transpose_a: false }, &[x[0], x[1]])
                .unwrap()
        },
    )
    .unwrap();
    assert!(x.data.to_f64_vec().iter().all(|v| v.is_nan()));
    let c = run1(&[(DType::F32, &[2, 2], a)], |g, x| {
        g.push(Op::Cholesky, &[x[0]]).unwrap()
    })
    .unwrap();
    assert!(c.data.to_f64_vec().iter().all(|v| v.is_nan()));
}

/// Products split over threads have the same bits whatever the thread count.
#[test]
fn matmul_bits_do_not_depend_on_threads() {
    use quabla_backend::Backend;
    use quabla_cpu::CpuOptions;
    let mut rng = Rng::new(61);
    let cases: [(&[usize], &[usize]); 3] = [
        (&[130, 70], &[70, 90]),
        (&[6, 40, 50], &[50, 30]),
        (&[3, 2, 64, 64], &[2, 64, 64]),
    ];
    for (ad, bd) in cases {
        let mut b = GraphBuilder::new();
        let x = b.input("a", TensorType::new(DType::F64, shape(ad)));
        let y = b.input("b", TensorType::new(DType::F64, shape(bd)));
        let z = b.matmul(x, y).unwrap();
        let plan = Plan::from_graph_unoptimized(b.finish(vec![z]).unwrap());
        let inputs = vec![
            HostTensor::new(
                shape(ad),
                data(DType::F64, &values(&mut rng, ad.iter().product())),
            ),
            HostTensor::new(
                shape(bd),
                data(DType::F64, &values(&mut rng, bd.iter().product())),
            ),
        ];
        let results: Vec<HostData> = [1, 2, 3]
            .iter()
            .map(|&threads| {
                let options = CpuOptions {
                    threads,
                    ..CpuOptions::default()
                };
                let exe = CpuBackend::with_options(options).compile(&plan).unwrap();
                exe.run(&inputs).unwrap().remove(0).data
            })
            .collect();
        assert_eq!(results[0], results[1], "{ad:?} x {bd:?}");
        assert_eq!(results[0], results[2], "{ad:?} x {bd:?}");
    }
}

/// `linalg` nodes of one factorization on one operand share a single decomposition step.
#[test]
fn outputs_of_one_factorization_share_a_step() {
    let mut rng = Rng::new(71);
    let (m, c) = (5, 3);
    let a = values(&mut rng, m * c);
    let sq = well_conditioned(&mut rng, 1, 4);
    let mut b = GraphBuilder::new();
    let x = b.input("a", TensorType::new(DType::F64, shape(&[m, c])));
    let y = b.input("sq", TensorType::new(DType::F64, shape(&[4, 4])));
    let kinds = [
        LinalgKind::SvdU,
        LinalgKind::SvdS,
        LinalgKind::SvdVh,
        LinalgKind::QrR,
        LinalgKind::QrQ,
    ];
    let mut outs: Vec<NodeId> = kinds
        .iter()
        .map(|&k| b.push(Op::Linalg(k), &[x]).unwrap())
        .collect();
    let sign = b.push(Op::Linalg(LinalgKind::DetSign), &[y]).unwrap();
    let log = b.push(Op::Linalg(LinalgKind::LogAbsDet), &[y]).unwrap();
    outs.extend([sign, log]);
    let plan = Plan::from_graph_unoptimized(b.finish(outs).unwrap());
    let exe = CpuBackend::default().compile_plan(&plan).unwrap();
    // svd, qr and slogdet: three steps for seven nodes.
    assert_eq!(exe.stats().steps, 3, "{:?}", exe.stats());
    let got = quabla_backend::Executable::run(
        &exe,
        &[
            HostTensor::new(shape(&[m, c]), data(DType::F64, &a)),
            HostTensor::new(shape(&[4, 4]), data(DType::F64, &sq)),
        ],
    )
    .unwrap();
    let (u, s, vh) = quabla_linalg::svd(&a, 1, m, c, false).unwrap();
    let (q, r) = quabla_linalg::qr(&a, 1, m, c, false).unwrap();
    let (sg, lg) = quabla_linalg::slogdet(&sq, 1, 4).unwrap();
    for (k, want) in [u, s, vh, r, q, sg, lg].iter().enumerate() {
        assert_eq!(got[k].data, data(DType::F64, want), "output {k}");
    }
    assert_eq!(got[0].shape.dims(), &[5, 3]);
    assert_eq!(got[3].shape.dims(), &[3, 3]);
}

/// Steps that solve with one matrix (either way round) and take its `slogdet` share one LU
/// factorization, and each result is the bits it has alone.
#[test]
fn solves_and_slogdet_of_one_matrix_share_its_lu_factors() {
    let mut rng = Rng::new(83);
    let (batch, n, k) = (2, 5, 3);
    let a = well_conditioned(&mut rng, batch, n);
    let rhs = values(&mut rng, batch * n * k);
    let mut b = GraphBuilder::new();
    let x = b.input("a", TensorType::new(DType::F64, shape(&[batch, n, n])));
    let y = b.input("b", TensorType::new(DType::F64, shape(&[batch, n, k])));
    let log = b.push(Op::Linalg(LinalgKind::LogAbsDet), &[x]).unwrap();
    let sign = b.push(Op::Linalg(LinalgKind::DetSign), &[x]).unwrap();
    let solved = b.push(Op::Solve { transpose_a: false }, &[x, y]).unwrap();
    // Depends on the first solve, so it is a later step reading the same factors.
    let back = b
        .push(Op::Solve { transpose_a: true }, &[x, solved])
        .unwrap();
    let plan = Plan::from_graph_unoptimized(b.finish(vec![log, sign, solved, back]).unwrap());
    let exe = CpuBackend::default().compile_plan(&plan).unwrap();
    // slogdet (sign and log in one step), then two solves on its factors.
    assert_eq!(exe.stats().steps, 3, "{:?}", exe.stats());
    assert_eq!(exe.stats().shared_factorizations, 2, "{:?}", exe.stats());
    let inputs = [
        HostTensor::new(shape(&[batch, n, n]), data(DType::F64, &a)),
        HostTensor::new(shape(&[batch, n, k]), data(DType::F64, &rhs)),
    ];
    // Twice: the factors of one run never leak into the next.
    for _ in 0..2 {
        let got = quabla_backend::Executable::run(&exe, &inputs).unwrap();
        let (sg, lg) = quabla_linalg::slogdet(&a, batch, n).unwrap();
        let x1 = quabla_linalg::solve(&a, &rhs, batch, n, k).unwrap();
        let x2 = quabla_linalg::lu_factor(&a, batch, n)
            .unwrap()
            .solve(&x1, k, true)
            .unwrap();
        assert_eq!(got[0].data, data(DType::F64, &lg));
        assert_eq!(got[1].data, data(DType::F64, &sg));
        assert_eq!(got[2].data, data(DType::F64, &x1));
        assert_eq!(got[3].data, data(DType::F64, &x2));
        // The transposed solve solves aᵀ x2 = x1.
        for bi in 0..batch {
            for i in 0..n {
                for j in 0..k {
                    let lhs: f64 = (0..n)
                        .map(|r| a[bi * n * n + r * n + i] * x2[bi * n * k + r * k + j])
                        .sum();
                    let want = x1[bi * n * k + i * k + j];
                    assert!(
                        (lhs - want).abs() < 1e-12 * (1.0 + want.abs()),
                        "{lhs} {want}"
                    );
                }
            }
        }
    }
}

/// A transposed solve of a singular matrix is the same typed error, shared factors or not; a
/// non-finite matrix solves to NaN.
#[test]
fn transposed_solve_of_singular_and_non_finite_matrices() {
    let singular = vec![1.0, 2.0, 2.0, 4.0];
    let err = run1(
        &[
            (DType::F64, &[2, 2], singular),
            (DType::F64, &[2, 1], vec![1.0, 1.0]),
        ],
        |g, x| {
            g.push(Op::Solve { transpose_a: true }, &[x[0], x[1]])
                .unwrap()
        },
    )
    .unwrap_err();
    assert_eq!(err, BackendError::Singular { op: "solve".into() });
    let got = run1(
        &[
            (DType::F64, &[2, 2], vec![1.0, f64::NAN, 0.0, 1.0]),
            (DType::F64, &[2, 1], vec![1.0, 1.0]),
        ],
        |g, x| {
            g.push(Op::Solve { transpose_a: true }, &[x[0], x[1]])
                .unwrap()
        },
    )
    .unwrap();
    assert!(got.data.to_f64_vec().iter().all(|v| v.is_nan()));
}
