//! The derivative rules of the linear-algebra primitives, through `quabla-autodiff`'s graph
//! transforms and run on the CPU backend, against central finite differences (`EPS = 1e-6`,
//! float64): first and second order in every combination of forward and reverse mode for each
//! `linalg` kind, third order through `cholesky` (which differentiates `cholesky_ad`), batched
//! operands, `vmap` of derivative graphs, the identities and conventions of numerics.md §6.5,
//! and TF11 for the extra columns of complete/full factors.
//!
//! Eigenvector and singular-vector signs are conventions (numerics.md §6.3), so the losses of
//! those outputs are invariant under flipping a vector (weighted squares, projectors, or
//! `U diag(c) Vh`, where the signs of `U` and `Vh` cancel).

use quabla_autodiff::check::{check_grads, Array, GraphFunction, Modes, Tolerance};
use quabla_autodiff::{jvp_graph, vjp_graph, Seed};
use quabla_backend::HostTensor;
use quabla_ir::{
    DType, Graph, GraphBuilder, HostData, IrError, LinalgKind, NodeId, Op, Plan, Shape, TensorType,
};

const EPS: f64 = 1e-6;

/// Inputs in `[-1, 1)` from the project's deterministic test generator.
struct Rng(quabla_random::testing::TestRng);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(quabla_random::testing::TestRng::new(
            seed.wrapping_mul(quabla_random::GAMMA).wrapping_add(7),
        ))
    }

    fn vec(&mut self, len: usize) -> Vec<f64> {
        self.0.vec(len, -1.0, 1.0)
    }
}

fn shape(dims: &[usize]) -> Shape {
    Shape::new(dims.to_vec()).unwrap()
}

fn size(dims: &[usize]) -> usize {
    dims.iter().product()
}

fn constant(b: &mut GraphBuilder, dims: &[usize], v: &[f64]) -> NodeId {
    b.constant(HostData::F64(v.to_vec().into()), shape(dims), false)
        .unwrap()
}

/// Runs `g` (after the plan passes) on the CPU backend.
fn run(g: &Graph, x: &[Vec<f64>]) -> Vec<HostTensor> {
    let inputs: Vec<HostTensor> = g
        .inputs()
        .zip(x)
        .map(|((_, _, ty), v)| HostTensor::new(ty.shape.clone(), HostData::F64(v.clone().into())))
        .collect();
    quabla_cpu::run_plan(&Plan::compile(g), &inputs).unwrap()
}

/// A scalar function of float64 arrays, as a graph with one input per argument.
#[derive(Clone)]
struct Fun {
    graph: Graph,
    dims: Vec<Vec<usize>>,
}

impl Fun {
    fn new(dims: &[&[usize]], body: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> NodeId) -> Fun {
        let mut b = GraphBuilder::new();
        let xs: Vec<NodeId> = dims
            .iter()
            .enumerate()
            .map(|(i, d)| b.input(format!("x{i}"), TensorType::new(DType::F64, shape(d))))
            .collect();
        let out = body(&mut b, &xs);
        Fun {
            graph: b.finish(vec![out]).unwrap(),
            dims: dims.iter().map(|d| d.to_vec()).collect(),
        }
    }

    fn inputs(&self, b: &mut GraphBuilder) -> Vec<NodeId> {
        self.dims
            .iter()
            .enumerate()
            .map(|(i, d)| b.input(format!("x{i}"), TensorType::new(DType::F64, shape(d))))
            .collect()
    }

    fn eval(&self, x: &[Vec<f64>]) -> f64 {
        run(&self.graph, x)[0].data.get_f64(0)
    }

    /// `x ↦ Df(x)[d]` by forward mode.
    fn jvp(&self, d: &[Vec<f64>]) -> Fun {
        let j = jvp_graph(&self.graph, &vec![true; self.dims.len()]).unwrap();
        let mut b = GraphBuilder::new();
        let mut operands = self.inputs(&mut b);
        for (dims, v) in self.dims.iter().zip(d) {
            operands.push(constant(&mut b, dims, v));
        }
        let outs = b.inline_graph(&j, &operands).unwrap();
        Fun {
            graph: b.finish(vec![outs[1]]).unwrap(),
            dims: self.dims.clone(),
        }
    }

    /// `x ↦ <∇f(x), d>` by reverse mode.
    fn vjp(&self, d: &[Vec<f64>]) -> Fun {
        let g = vjp_graph(&self.graph, &vec![true; self.dims.len()], &[Seed::Ones]).unwrap();
        let mut b = GraphBuilder::new();
        let xs = self.inputs(&mut b);
        let outs = b.inline_graph(&g, &xs).unwrap();
        let mut total = None;
        for (k, (dims, v)) in self.dims.iter().zip(d).enumerate() {
            let c = constant(&mut b, dims, v);
            let p = b.mul(outs[1 + k], c).unwrap();
            let s = b.sum(p, None, false).unwrap();
            total = Some(match total {
                None => s,
                Some(t) => b.add(t, s).unwrap(),
            });
        }
        Fun {
            graph: b.finish(vec![total.unwrap()]).unwrap(),
            dims: self.dims.clone(),
        }
    }
}

/// Checks the derivatives of `f` at `x` up to `order`, in every combination of forward and
/// reverse mode, with the project's `check_grads` (the graphs run on the CPU backend).
/// Finite differences of a graph computed to rounding lose about `1e-16 / EPS`; deeper
/// derivative graphs round a little more, hence the tolerance growing tenfold per level.
fn check_orders(f: &Fun, x: &[Vec<f64>], order: usize, seed: u64, what: &str) {
    let evaluate = |g: &Graph, inputs: &[HostData]| -> Result<Vec<HostData>, String> {
        let values: Vec<Vec<f64>> = inputs.iter().map(HostData::to_f64_vec).collect();
        Ok(run(g, &values).into_iter().map(|t| t.data).collect())
    };
    let function = GraphFunction::new(f.graph.clone(), &evaluate).unwrap();
    let x: Vec<Array> = x
        .iter()
        .zip(&f.dims)
        .map(|(v, d)| Array::new(d.clone(), v.clone()))
        .collect();
    let tolerance = Tolerance {
        rtol: 1e-7,
        atol: 1e-7,
        eps: EPS,
        growth: 10.0,
    };
    check_grads(&function, &x, order, Modes::BOTH, tolerance, seed)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// Fixed, non-symmetric weights of a shape.
fn weights(dims: &[usize], seed: f64) -> Vec<f64> {
    (0..size(dims))
        .map(|i| 0.4 + (1.3 * i as f64 + seed).sin())
        .collect()
}

/// `sum(W ∘ x)`.
fn wsum(b: &mut GraphBuilder, x: NodeId, seed: f64) -> NodeId {
    let dims = b.ty(x).shape.dims().to_vec();
    let w = constant(b, &dims, &weights(&dims, seed));
    let p = b.mul(x, w).unwrap();
    b.sum(p, None, false).unwrap()
}

/// `sum(W ∘ x ∘ x)`: invariant under flipping the sign of any column or row of `x`.
fn wsum_sq(b: &mut GraphBuilder, x: NodeId, seed: f64) -> NodeId {
    let sq = b.mul(x, x).unwrap();
    wsum(b, sq, seed)
}

fn add(b: &mut GraphBuilder, x: NodeId, y: NodeId) -> NodeId {
    b.add(x, y).unwrap()
}

fn linalg(b: &mut GraphBuilder, kind: LinalgKind, a: NodeId) -> NodeId {
    b.push(Op::Linalg(kind), &[a]).unwrap()
}

fn swap_last(b: &mut GraphBuilder, x: NodeId) -> NodeId {
    let r = b.ty(x).shape.rank() as isize;
    let mut perm: Vec<isize> = (0..r).collect();
    perm.swap((r - 1) as usize, (r - 2) as usize);
    b.transpose(x, Some(&perm)).unwrap()
}

/// `[batch..., m, n]` matrices: small random entries plus a dominant, well-separated diagonal
/// `2 (k - i) + 1`, so they have full rank and well-separated singular values.
fn separated(rng: &mut Rng, dims: &[usize]) -> Vec<f64> {
    let r = dims.len();
    let (m, n) = (dims[r - 2], dims[r - 1]);
    let k = m.min(n);
    let mut a: Vec<f64> = rng.vec(size(dims)).iter().map(|v| 0.25 * v).collect();
    for mat in a.chunks_mut(m * n) {
        for i in 0..k {
            mat[i * n + i] += 2.0 * (k - i) as f64 + 1.0;
        }
    }
    a
}

/// Non-symmetric `[batch..., n, n]` matrices whose symmetric part has eigenvalues near
/// `1, 3, 5, ...` (separated by about 2), with an antisymmetric part that `eigh` ignores.
fn eigh_input(rng: &mut Rng, dims: &[usize]) -> Vec<f64> {
    let n = dims[dims.len() - 1];
    let mut a = rng.vec(size(dims));
    for mat in a.chunks_mut(n * n) {
        let noise = mat.to_vec();
        for i in 0..n {
            for j in 0..n {
                let s = 0.25 * (noise[i * n + j] + noise[j * n + i]) / 2.0;
                let anti = 0.5 * (noise[i * n + j] - noise[j * n + i]);
                mat[i * n + j] = s + anti + if i == j { 2.0 * i as f64 + 1.0 } else { 0.0 };
            }
        }
    }
    a
}

/// Symmetric positive-definite `[batch..., n, n]` matrices `0.3 B Bᵀ + n I`.
fn spd(rng: &mut Rng, dims: &[usize]) -> Vec<f64> {
    let n = dims[dims.len() - 1];
    let raw = rng.vec(size(dims));
    let mut out = vec![0.0; raw.len()];
    for (o, m) in out.chunks_mut(n * n).zip(raw.chunks(n * n)) {
        for i in 0..n {
            for j in 0..n {
                let s: f64 = (0..n).map(|p| m[i * n + p] * m[j * n + p]).sum();
                o[i * n + j] = 0.3 * s + if i == j { n as f64 } else { 0.0 };
            }
        }
    }
    out
}

fn check_kind(
    seed: u64,
    dims: &[usize],
    input: Input,
    order: usize,
    what: &str,
    loss: impl FnOnce(&mut GraphBuilder, NodeId) -> NodeId,
) {
    let mut rng = Rng::new(seed);
    let x = vec![input(&mut rng, dims)];
    let f = Fun::new(&[dims], |b, xs| loss(b, xs[0]));
    check_orders(&f, &x, order, seed + 1, &format!("{what} {dims:?}"));
}

#[test]
fn log_abs_det_and_det_match_finite_differences() {
    // A negative determinant in the batch as well: flip a row of the second matrix.
    let flip_row = |rng: &mut Rng, dims: &[usize]| {
        let mut a = separated(rng, dims);
        let n = dims[dims.len() - 1];
        if a.len() > n * n {
            for v in &mut a[n * n..n * n + n] {
                *v = -*v;
            }
        }
        a
    };
    for dims in [&[3usize, 3][..], &[2, 4, 4], &[2, 1, 3, 3]] {
        check_kind(11, dims, flip_row, 2, "log_abs_det", |b, a| {
            let l = linalg(b, LinalgKind::LogAbsDet, a);
            wsum(b, l, 0.3)
        });
        // det = sign * exp(logabsdet): the sign contributes nothing.
        check_kind(12, dims, flip_row, 2, "det", |b, a| {
            let s = linalg(b, LinalgKind::DetSign, a);
            let l = linalg(b, LinalgKind::LogAbsDet, a);
            let e = b.unary(quabla_ir::UnaryOp::Exp, l).unwrap();
            let d = b.mul(s, e).unwrap();
            wsum(b, d, 0.7)
        });
    }
}

/// `solve(op(a), b)` in both orientations, differentiated in `a` and `b` to third order.
#[test]
fn solve_in_both_orientations_matches_finite_differences() {
    for transpose_a in [false, true] {
        let (ad, bd) = ([2usize, 3, 3], [2usize, 3, 2]);
        let f = Fun::new(&[&ad, &bd], |b, xs| {
            let x = b.push(Op::Solve { transpose_a }, &[xs[0], xs[1]]).unwrap();
            wsum_sq(b, x, 0.4)
        });
        let mut rng = Rng::new(17);
        let x = vec![separated(&mut rng, &ad), rng.vec(size(&bd))];
        check_orders(&f, &x, 3, 23, &format!("solve transpose_a={transpose_a}"));
    }
}

/// The gradient of a loss of `solve(a, b)` factors `a` once: the reverse pass solves with the
/// forward pass's factors, and gets the bits of a transposed solve with factors of its own.
#[test]
fn grad_of_solve_factors_the_matrix_once() {
    let (n, k) = (3usize, 2usize);
    let f = Fun::new(&[&[n, n], &[n, k]], |b, xs| {
        let x = b
            .push(Op::Solve { transpose_a: false }, &[xs[0], xs[1]])
            .unwrap();
        wsum(b, x, 0.2)
    });
    let g = vjp_graph(&f.graph, &[true, true], &[Seed::Ones]).unwrap();
    let exe = quabla_cpu::CpuBackend::default()
        .compile_plan(&Plan::compile(&g))
        .unwrap();
    assert_eq!(exe.stats().shared_factorizations, 1, "{:?}", exe.stats());
    let mut rng = Rng::new(19);
    let x = vec![separated(&mut rng, &[n, n]), rng.vec(n * k)];
    let got = run(&g, &x);
    // The cotangent of `solve(a, b)` for the loss `sum(W ∘ x)` is `W` exactly.
    let lu = quabla_linalg::lu_factor(&x[0], 1, n).unwrap();
    let b_bar = lu.solve(&weights(&[n, k], 0.2), k, true).unwrap();
    assert_eq!(got[2].data.to_f64_vec(), b_bar);
    // a_bar = -b_bar xᵀ.
    let solved = lu.solve(&x[1], k, false).unwrap();
    let a_bar = got[1].data.to_f64_vec();
    for i in 0..n {
        for j in 0..n {
            let want: f64 = -(0..k)
                .map(|c| b_bar[i * k + c] * solved[j * k + c])
                .sum::<f64>();
            assert!((a_bar[i * n + j] - want).abs() < 1e-14, "{i} {j}");
        }
    }
}

#[test]
fn det_sign_has_a_structural_zero_derivative() {
    let dims = [2usize, 3, 3];
    let f = Fun::new(&[&dims], |b, xs| {
        let s = linalg(b, LinalgKind::DetSign, xs[0]);
        wsum(b, s, 0.1)
    });
    let x = vec![separated(&mut Rng::new(3), &dims)];
    let d = vec![Rng::new(4).vec(size(&dims))];
    // The sign is locally constant: equal on both sides of `x` along `d`.
    let shifted = |sign: f64| -> Vec<Vec<f64>> {
        vec![x[0]
            .iter()
            .zip(&d[0])
            .map(|(a, b)| a + sign * EPS * b)
            .collect()]
    };
    assert_eq!(f.eval(&shifted(1.0)), f.eval(&shifted(-1.0)));
    assert_eq!(f.jvp(&d).eval(&x), 0.0);
    assert_eq!(f.vjp(&d).eval(&x), 0.0);
    // No derivative node at all: the tangent is the zeros filled in at the boundary.
    let j = jvp_graph(&f.graph, &[true]).unwrap();
    assert!(!j
        .nodes()
        .iter()
        .any(|n| matches!(n.op, Op::Solve { .. } | Op::Linalg(LinalgKind::LogAbsDet))));
}

#[test]
fn grad_of_log_abs_det_is_the_inverse_transpose() {
    let dims = [2usize, 3, 3];
    let a = separated(&mut Rng::new(5), &dims);
    let f = Fun::new(&[&dims], |b, xs| {
        let l = linalg(b, LinalgKind::LogAbsDet, xs[0]);
        b.sum(l, None, false).unwrap()
    });
    let g = vjp_graph(&f.graph, &[true], &[Seed::Ones]).unwrap();
    let got = run(&g, std::slice::from_ref(&a))[1].data.to_f64_vec();
    let eye: Vec<f64> = (0..2)
        .flat_map(|_| (0..9).map(|i| if i % 4 == 0 { 1.0 } else { 0.0 }))
        .collect();
    let inv = quabla_linalg::solve(&a, &eye, 2, 3, 3).unwrap();
    // The reverse pass solves with the factors of the forward slogdet: one LU, not two.
    let exe = quabla_cpu::CpuBackend::default()
        .compile_plan(&Plan::compile(&g))
        .unwrap();
    assert_eq!(exe.stats().shared_factorizations, 1, "{:?}", exe.stats());
    for bi in 0..2 {
        for i in 0..3 {
            for j in 0..3 {
                let (x, y) = (got[bi * 9 + i * 3 + j], inv[bi * 9 + j * 3 + i]);
                assert!((x - y).abs() < 1e-12, "{x} vs {y}");
            }
        }
    }
}

#[test]
fn eigh_values_match_finite_differences() {
    for dims in [&[4usize, 4][..], &[2, 3, 3]] {
        check_kind(21, dims, eigh_input, 2, "eigh_values", |b, a| {
            let w = linalg(b, LinalgKind::EighValues, a);
            wsum(b, w, 0.2)
        });
    }
}

#[test]
fn eigh_vectors_match_finite_differences() {
    for dims in [&[4usize, 4][..], &[2, 3, 3]] {
        check_kind(22, dims, eigh_input, 2, "eigh_vectors", |b, a| {
            let v = linalg(b, LinalgKind::EighVectors, a);
            let sq = wsum_sq(b, v, 0.5);
            // A weighted projector V diag(c) Vᵀ.
            let n = dims[dims.len() - 1];
            let c = constant(b, &[1, n], &weights(&[n], 1.1));
            let vc = b.mul(v, c).unwrap();
            let vt = swap_last(b, v);
            let p = b.matmul(vc, vt).unwrap();
            let proj = wsum(b, p, 0.9);
            add(b, sq, proj)
        });
    }
}

#[test]
fn grad_of_sum_of_squared_eigenvalues_is_twice_the_matrix() {
    let n = 4;
    let mut a = eigh_input(&mut Rng::new(6), &[n, n]);
    for i in 0..n {
        for j in 0..i {
            a[i * n + j] = a[j * n + i];
        }
    }
    let f = Fun::new(&[&[n, n]], |b, xs| {
        let w = linalg(b, LinalgKind::EighValues, xs[0]);
        let sq = b.mul(w, w).unwrap();
        b.sum(sq, None, false).unwrap()
    });
    let g = vjp_graph(&f.graph, &[true], &[Seed::Ones]).unwrap();
    let got = run(&g, std::slice::from_ref(&a))[1].data.to_f64_vec();
    for (x, y) in got.iter().zip(&a) {
        assert!((x - 2.0 * y).abs() < 1e-12, "{x} vs {}", 2.0 * y);
    }
}

#[test]
fn eigh_derivatives_at_a_repeated_eigenvalue() {
    // numerics.md §6.5: eigenvalue derivatives stay finite, vector derivatives do not.
    let dims = [3usize, 3];
    let eye = vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
    let d = Rng::new(8).vec(9);
    let tangent = |kind: LinalgKind| {
        let mut b = GraphBuilder::new();
        let a = b.input("a", TensorType::new(DType::F64, shape(&dims)));
        let out = linalg(&mut b, kind, a);
        let g = jvp_graph(&b.finish(vec![out]).unwrap(), &[true]).unwrap();
        run(&g, &[eye.clone(), d.clone()])[1].data.to_f64_vec()
    };
    let dw = tangent(LinalgKind::EighValues);
    assert!(dw.iter().all(|v| v.is_finite()), "{dw:?}");
    let dv = tangent(LinalgKind::EighVectors);
    assert!(dv.iter().any(|v| !v.is_finite()), "{dv:?}");
}

const SHAPES: [&[usize]; 6] = [
    &[4, 3],
    &[3, 3],
    &[3, 5],
    &[2, 4, 3],
    &[2, 3, 5],
    &[2, 3, 3],
];

#[test]
fn qr_q_and_r_match_finite_differences() {
    for dims in SHAPES {
        check_kind(31, dims, separated, 2, "qr_q", |b, a| {
            let q = linalg(b, LinalgKind::QrQ, a);
            wsum(b, q, 0.4)
        });
        check_kind(32, dims, separated, 2, "qr_r", |b, a| {
            let r = linalg(b, LinalgKind::QrR, a);
            wsum(b, r, 0.8)
        });
        // Both outputs: the cotangents of the two nodes add up.
        check_kind(33, dims, separated, 1, "qr_q+qr_r", |b, a| {
            let q = linalg(b, LinalgKind::QrQ, a);
            let r = linalg(b, LinalgKind::QrR, a);
            let x = wsum(b, q, 0.1);
            let y = wsum_sq(b, r, 0.2);
            add(b, x, y)
        });
    }
}

#[test]
fn complete_q_without_extra_columns_matches_finite_differences() {
    for dims in [&[3usize, 3][..], &[3, 5], &[2, 2, 4]] {
        check_kind(34, dims, separated, 2, "qr_q_complete", |b, a| {
            let q = linalg(b, LinalgKind::QrQComplete, a);
            wsum(b, q, 0.6)
        });
    }
}

#[test]
fn svd_s_matches_finite_differences() {
    for dims in SHAPES {
        check_kind(41, dims, separated, 2, "svd_s", |b, a| {
            let s = linalg(b, LinalgKind::SvdS, a);
            wsum(b, s, 0.3)
        });
    }
}

#[test]
fn svd_vectors_match_finite_differences() {
    for dims in SHAPES {
        check_kind(42, dims, separated, 2, "svd_u", |b, a| {
            let u = linalg(b, LinalgKind::SvdU, a);
            wsum_sq(b, u, 0.5)
        });
        check_kind(43, dims, separated, 2, "svd_vh", |b, a| {
            let vh = linalg(b, LinalgKind::SvdVh, a);
            wsum_sq(b, vh, 0.9)
        });
        // U diag(c) Vh: the signs of U and Vh cancel.
        check_kind(44, dims, separated, 1, "svd_u+svd_vh", |b, a| {
            let u = linalg(b, LinalgKind::SvdU, a);
            let vh = linalg(b, LinalgKind::SvdVh, a);
            let k = dims[dims.len() - 2].min(dims[dims.len() - 1]);
            let c = constant(b, &[1, k], &weights(&[k], 0.2));
            let uc = b.mul(u, c).unwrap();
            let p = b.matmul(uc, vh).unwrap();
            wsum(b, p, 1.7)
        });
    }
}

#[test]
fn full_svd_factors_without_extra_columns_match_finite_differences() {
    // A full U has no extra columns when m <= n; a full Vh none when n <= m.
    for dims in [&[3usize, 3][..], &[3, 5], &[2, 2, 4]] {
        check_kind(45, dims, separated, 2, "svd_u_full", |b, a| {
            let u = linalg(b, LinalgKind::SvdUFull, a);
            wsum_sq(b, u, 0.5)
        });
    }
    for dims in [&[3usize, 3][..], &[5, 3], &[2, 4, 2]] {
        check_kind(46, dims, separated, 2, "svd_vh_full", |b, a| {
            let vh = linalg(b, LinalgKind::SvdVhFull, a);
            wsum_sq(b, vh, 0.9)
        });
    }
}

#[test]
fn extra_columns_are_a_targeted_error() {
    // TF11: a cotangent that reaches the extra columns (rows) of a complete Q / full U / full Vh
    // is an error in reverse mode; forward mode gives them a NaN tangent.
    for (kind, dims) in [
        (LinalgKind::QrQComplete, [4usize, 3]),
        (LinalgKind::SvdUFull, [4, 3]),
        (LinalgKind::SvdVhFull, [3, 4]),
    ] {
        let mut b = GraphBuilder::new();
        let a = b.input("a", TensorType::new(DType::F64, shape(&dims)));
        let out = linalg(&mut b, kind, a);
        let g = b.finish(vec![out]).unwrap();
        match vjp_graph(&g, &[true], &[Seed::Input]).unwrap_err() {
            IrError::InvalidArgument { message } => {
                assert!(
                    message.starts_with("derivatives of the extra columns of")
                        && message.ends_with("are not unique"),
                    "{message}"
                );
                let call = if kind == LinalgKind::QrQComplete {
                    "qr(mode=\"complete\")"
                } else {
                    "svd(full_matrices=True)"
                };
                assert!(message.contains(call), "{message}");
            }
            other => panic!("{kind:?}: {other:?}"),
        }
        let j = jvp_graph(&g, &[true]).unwrap();
        let mut rng = Rng::new(3);
        let t = run(&j, &[rng.vec(12), rng.vec(12)])[1].data.to_f64_vec();
        // Every full factor here is 4 x 4 with k = 3.
        let cols = 4;
        for i in 0..4 {
            for j in 0..cols {
                let extra = if kind == LinalgKind::SvdVhFull {
                    i >= 3
                } else {
                    j >= 3
                };
                assert_eq!(
                    t[i * cols + j].is_nan(),
                    extra,
                    "{kind:?} [{i}, {j}]: {t:?}"
                );
            }
        }
        // Not differentiating the output is fine.
        assert!(jvp_graph(&g, &[false]).is_ok());
    }
}

#[test]
fn leading_columns_of_full_factors_differentiate() {
    // A function of the leading k columns (rows) of a complete Q / full U / full Vh is a
    // function of the reduced factor: both modes, to second order.
    let mut rng = Rng::new(17);
    for (kind, dims) in [
        (LinalgKind::QrQComplete, [4usize, 3]),
        (LinalgKind::SvdUFull, [4, 3]),
        (LinalgKind::SvdVhFull, [3, 4]),
    ] {
        let x = separated(&mut rng, &dims);
        let f = Fun::new(&[&dims], |b, xs| {
            let full = linalg(b, kind, xs[0]);
            let (starts, sizes) = if kind == LinalgKind::SvdVhFull {
                (vec![0, 0], vec![3, 4])
            } else {
                (vec![0, 0], vec![4, 3])
            };
            let lead = b.slice(full, starts, sizes).unwrap();
            // Two uses of the leading part: the cotangents add up before reaching the factor.
            let first = wsum_sq(b, lead, 0.3);
            let col = b.slice(full, vec![0, 0], vec![2, 2]).unwrap();
            let second = wsum(b, col, 1.1);
            add(b, first, second)
        });
        check_orders(&f, &[x], 2, 71, &format!("{kind:?} leading part"));
    }
}

#[test]
fn svd_vector_derivatives_at_coinciding_singular_values() {
    // numerics.md §6.5: F is 0 where singular values coincide, so the tangent of U at the
    // identity (all singular values 1) is finite, and exactly zero; a zero singular value of a
    // non-square matrix gives non-finite vector derivatives.
    let tangent = |dims: &[usize], a: &[f64], kind: LinalgKind| {
        let mut b = GraphBuilder::new();
        let x = b.input("a", TensorType::new(DType::F64, shape(dims)));
        let out = linalg(&mut b, kind, x);
        let g = jvp_graph(&b.finish(vec![out]).unwrap(), &[true]).unwrap();
        let d = Rng::new(9).vec(size(dims));
        run(&g, &[a.to_vec(), d])[1].data.to_f64_vec()
    };
    let eye = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
    for kind in [LinalgKind::SvdU, LinalgKind::SvdVh] {
        let t = tangent(&[3, 3], &eye, kind);
        assert!(t.iter().all(|v| *v == 0.0), "{kind:?}: {t:?}");
    }
    // 3 x 2 with a zero column: singular values (s, 0).
    let rank_one = [1.0, 0.0, 2.0, 0.0, 3.0, 0.0];
    let t = tangent(&[3, 2], &rank_one, LinalgKind::SvdU);
    assert!(t.iter().any(|v| !v.is_finite()), "{t:?}");
}

#[test]
fn cholesky_to_third_order_matches_finite_differences() {
    for dims in [&[3usize, 3][..], &[2, 3, 3]] {
        let mut rng = Rng::new(51);
        let x = vec![spd(&mut rng, dims)];
        // The factor of the symmetric part: perturbations of `x` in any direction then stay
        // symmetric, which the Cholesky rules assume (they read one triangle).
        let f = Fun::new(&[dims], |b, xs| {
            let t = swap_last(b, xs[0]);
            let s = add(b, xs[0], t);
            let half = b.scalar(0.5, DType::F64, false);
            let sym = b.mul(s, half).unwrap();
            let l = b.push(Op::Cholesky, &[sym]).unwrap();
            wsum(b, l, 0.4)
        });
        check_orders(&f, &x, 3, 52, &format!("cholesky {dims:?}"));
    }
}

#[test]
fn cholesky_ad_matches_finite_differences() {
    // cholesky_ad(l, s) on its own: a lower-triangular l (its upper triangle is never read, so
    // it holds noise) and any s, differentiated in both arguments.
    let lower = |rng: &mut Rng, dims: &[usize]| {
        let n = dims[dims.len() - 1];
        let mut l: Vec<f64> = rng.vec(size(dims)).iter().map(|v| 0.3 * v).collect();
        for m in l.chunks_mut(n * n) {
            for i in 0..n {
                m[i * n + i] += 2.0;
            }
        }
        l
    };
    for dims in [&[3usize, 3][..], &[2, 3, 3]] {
        let mut rng = Rng::new(61);
        let x = vec![lower(&mut rng, dims), rng.vec(size(dims))];
        let f = Fun::new(&[dims, dims], |b, xs| {
            let c = b.push(Op::CholeskyAd, &[xs[0], xs[1]]).unwrap();
            wsum_sq(b, c, 0.6)
        });
        check_orders(&f, &x, 2, 62, &format!("cholesky_ad {dims:?}"));
    }
}

/// How a test draws its input matrices of a shape.
type Input = fn(&mut Rng, &[usize]) -> Vec<f64>;

/// `vmap` of a derivative graph equals the derivative of each example.
#[test]
fn derivative_graphs_batch_under_vmap() {
    let cases: [(&str, [usize; 2], Input, LinalgKind); 4] = [
        ("log_abs_det", [3, 3], separated, LinalgKind::LogAbsDet),
        ("eigh_vectors", [3, 3], eigh_input, LinalgKind::EighVectors),
        ("qr_r", [3, 4], separated, LinalgKind::QrR),
        ("svd_u", [4, 3], separated, LinalgKind::SvdU),
    ];
    for (what, dims, input, kind) in cases {
        let f = Fun::new(&[&dims], |b, xs| {
            let y = linalg(b, kind, xs[0]);
            wsum_sq(b, y, 0.3)
        });
        // The gradient of a directional derivative: a Hessian-vector product.
        let d = Rng::new(71).vec(size(&dims));
        let hvp = f.jvp(&[d]);
        let g = vjp_graph(&hvp.graph, &[true], &[Seed::Ones]).unwrap();
        let batched = quabla_vmap::batch_graph(&g, &[Some(0)], 3, &[Some(0), Some(0)]).unwrap();
        let mut rng = Rng::new(72);
        let examples: Vec<Vec<f64>> = (0..3).map(|_| input(&mut rng, &dims)).collect();
        let got = run(&batched, &[examples.concat()])[1].data.to_f64_vec();
        for (i, e) in examples.iter().enumerate() {
            let want = run(&g, std::slice::from_ref(e))[1].data.to_f64_vec();
            let part = &got[i * want.len()..(i + 1) * want.len()];
            for (x, y) in part.iter().zip(&want) {
                assert!(
                    (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
                    "{what}: {x} vs {y}"
                );
            }
        }
    }
}

/// Every kind differentiates float32 graphs too (weak scalars and masks adopt the dtype), with
/// the float64 values to float32 accuracy.
#[test]
fn every_kind_differentiates_in_float32() {
    let dims = [2usize, 3, 3];
    let mut rng = Rng::new(81);
    let a = eigh_input(&mut rng, &dims);
    let d = rng.vec(size(&dims));
    for kind in LinalgKind::ALL {
        let derivatives = |dt: DType| {
            let mut b = GraphBuilder::new();
            let x = b.input("a", TensorType::new(dt, shape(&dims)));
            let y = linalg(&mut b, kind, x);
            let sq = b.mul(y, y).unwrap();
            let ydims = b.ty(y).shape.dims().to_vec();
            let w = constant(&mut b, &ydims, &weights(&ydims, 0.5));
            let w = b.astype(w, dt).unwrap();
            let p = b.mul(sq, w).unwrap();
            let loss = b.sum(p, None, false).unwrap();
            let g = b.finish(vec![loss]).unwrap();
            let j = jvp_graph(&g, &[true]).unwrap();
            let v = vjp_graph(&g, &[true], &[Seed::Ones]).unwrap();
            let host = |v: &[f64]| match dt {
                DType::F32 => HostData::F32(v.iter().map(|&x| x as f32).collect()),
                _ => HostData::F64(v.to_vec().into()),
            };
            let run_dt = |g: &Graph, x: &[&[f64]]| {
                let inputs: Vec<HostTensor> = x
                    .iter()
                    .map(|v| HostTensor::new(shape(&dims), host(v)))
                    .collect();
                quabla_cpu::run_plan(&Plan::compile(g), &inputs).unwrap()
            };
            let t = run_dt(&j, &[&a, &d])[1].data.to_f64_vec();
            let gr = run_dt(&v, &[&a])[1].data.to_f64_vec();
            (t, gr)
        };
        let (t64, g64) = derivatives(DType::F64);
        let (t32, g32) = derivatives(DType::F32);
        for (x, y) in t32.iter().chain(&g32).zip(t64.iter().chain(&g64)) {
            assert!(
                (x - y).abs() <= 1e-3 * (1.0 + y.abs()),
                "{kind:?}: {x} vs {y}"
            );
        }
    }
}
