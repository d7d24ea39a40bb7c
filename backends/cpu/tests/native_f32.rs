//! Plans compiled at `Precision::Float32` (`jit(f).precision("float32")`, numerics.md §1.5):
//! float32 `matmul` as native float32 GEMM and float32 `sum`/`mean` in float32 accumulators
//! in the blocked order, checked against independent float32 references written here; every
//! other node, and every float64 node, keeps the reference bits.

mod common;

use common::{data, shape, Rng};
use quabla_backend::{Executable, HostTensor, Precision};
use quabla_cpu::{CpuBackend, CpuOptions};
use quabla_ir::{DType, Graph, GraphBuilder, Plan, TensorType, UnaryOp};

fn run(
    graph: &Graph,
    inputs: &[HostTensor],
    precision: Precision,
    threads: usize,
) -> Vec<HostTensor> {
    let options = CpuOptions {
        threads,
        ..CpuOptions::default()
    };
    let plan = Plan::from_graph_unoptimized(graph.clone());
    let exe = CpuBackend::with_options(options)
        .compile_plan_with(&plan, precision)
        .unwrap();
    exe.run(inputs).unwrap()
}

fn bits(t: &HostTensor) -> Vec<u64> {
    t.data.to_f64_vec().iter().map(|v| v.to_bits()).collect()
}

/// The blocked order of numerics.md §1.5 with float32 accumulators.
fn blocked_f32(values: &[f32]) -> f32 {
    let mut level: Vec<f32> = values
        .chunks(1024)
        .map(|block| {
            let mut a = [0.0f32; 8];
            for (k, &v) in block.iter().enumerate() {
                a[k % 8] += v;
            }
            ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
        })
        .collect();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|p| if p.len() == 2 { p[0] + p[1] } else { p[0] })
            .collect();
    }
    level[0]
}

#[test]
fn float32_matmul_is_native_and_thread_independent() {
    // Large enough to split over threads (in bands of rows).
    let (m, k, n) = (70, 300, 110);
    let mut rng = Rng::new(5);
    let a: Vec<f64> = (0..m * k).map(|_| rng.finite()).collect();
    let b: Vec<f64> = (0..k * n).map(|_| rng.finite()).collect();
    let mut g = GraphBuilder::new();
    let x = g.input("a", TensorType::new(DType::F32, shape(&[m, k])));
    let y = g.input("b", TensorType::new(DType::F32, shape(&[k, n])));
    let p = g.matmul(x, y).unwrap();
    let graph = g.finish(vec![p]).unwrap();
    let inputs = [
        HostTensor::new(shape(&[m, k]), data(DType::F32, &a)),
        HostTensor::new(shape(&[k, n]), data(DType::F32, &b)),
    ];
    let reference = run(&graph, &inputs, Precision::Reference, 1).remove(0);
    let native = run(&graph, &inputs, Precision::Float32, 1).remove(0);
    for threads in [2, 3] {
        let again = run(&graph, &inputs, Precision::Float32, threads).remove(0);
        assert_eq!(bits(&again), bits(&native), "threads={threads}");
    }
    // Against a float32 triple loop and the float64-computed reference: within the conformance
    // tolerance of numerics.md §1.6 scaled by the length of the dot products.
    let (a32, b32) = (
        data(DType::F32, &a).to_f64_vec(),
        data(DType::F32, &b).to_f64_vec(),
    );
    let (ref64, nat) = (reference.data.to_f64_vec(), native.data.to_f64_vec());
    let mut differs = false;
    for i in 0..m {
        for j in 0..n {
            let naive: f32 = (0..k).fold(0.0f32, |s, l| {
                s + a32[i * k + l] as f32 * b32[l * n + j] as f32
            });
            let scale: f64 = (0..k)
                .map(|l| (a32[i * k + l] * b32[l * n + j]).abs())
                .sum();
            let got = nat[i * n + j];
            let tol = 1e-5 + 1e-6 * scale;
            assert!(
                (got - naive as f64).abs() <= tol,
                "{i} {j}: {got} vs {naive}"
            );
            assert!(
                (got - ref64[i * n + j]).abs() <= tol,
                "{i} {j}: {got} vs {}",
                ref64[i * n + j]
            );
            differs |= got.to_bits() != ref64[i * n + j].to_bits();
        }
    }
    // Native float32 accumulation rounds differently from the reference somewhere.
    assert!(differs);
}

#[test]
fn float32_sums_and_means_accumulate_in_float32_in_the_blocked_order() {
    let mut rng = Rng::new(9);
    for (dims, axes) in [
        (vec![5000usize], vec![0isize]),
        (vec![150_001], vec![0]),
        (vec![3, 2100], vec![1]),
        (vec![2100, 3], vec![0]),
        (vec![40, 3, 30], vec![0, 2]),
    ] {
        let count: usize = dims.iter().product();
        let x: Vec<f64> = (0..count)
            .map(|i| rng.finite() * 10f64.powi((i % 9) as i32 - 4))
            .collect();
        let mut g = GraphBuilder::new();
        let input = g.input("x", TensorType::new(DType::F32, shape(&dims)));
        let whole = axes.len() == dims.len();
        let ax = if whole { None } else { Some(&axes[..]) };
        let s = g.sum(input, ax, false).unwrap();
        let m = g.mean(input, ax, false).unwrap();
        // A node that is neither a contraction nor a reduction keeps the reference rule.
        let e = g.unary(UnaryOp::Exp, input).unwrap();
        let graph = g.finish(vec![s, m, e]).unwrap();
        let inputs = [HostTensor::new(shape(&dims), data(DType::F32, &x))];
        let x32: Vec<f32> = data(DType::F32, &x)
            .to_f64_vec()
            .iter()
            .map(|&v| v as f32)
            .collect();
        // The reduced elements of each kept position, in row-major order.
        let kept: Vec<usize> = (0..dims.len())
            .filter(|a| !axes.contains(&(*a as isize)))
            .collect();
        let positions: usize = kept.iter().map(|&a| dims[a]).product();
        let mut groups: Vec<Vec<f32>> = vec![Vec::new(); positions];
        for (i, &v) in x32.iter().enumerate() {
            let (mut rem, mut idx) = (i, vec![0; dims.len()]);
            for a in (0..dims.len()).rev() {
                idx[a] = rem % dims[a];
                rem /= dims[a];
            }
            groups[kept.iter().fold(0, |p, &a| p * dims[a] + idx[a])].push(v);
        }
        let n = (count / positions) as f32;
        let want_sum: Vec<u64> = groups
            .iter()
            .map(|g| (blocked_f32(g) as f64).to_bits())
            .collect();
        let want_mean: Vec<u64> = groups
            .iter()
            .map(|g| ((blocked_f32(g) / n) as f64).to_bits())
            .collect();
        let reference = run(&graph, &inputs, Precision::Reference, 1);
        for threads in [1, 2, 3] {
            let out = run(&graph, &inputs, Precision::Float32, threads);
            assert_eq!(
                bits(&out[0]),
                want_sum,
                "sum {dims:?} {axes:?} threads={threads}"
            );
            assert_eq!(
                bits(&out[1]),
                want_mean,
                "mean {dims:?} {axes:?} threads={threads}"
            );
            assert_eq!(bits(&out[2]), bits(&reference[2]), "exp {dims:?}");
        }
    }
}

#[test]
fn float64_nodes_keep_the_reference_bits() {
    let mut rng = Rng::new(13);
    let a: Vec<f64> = (0..40 * 30).map(|_| rng.finite()).collect();
    let mut g = GraphBuilder::new();
    let x = g.input("a", TensorType::new(DType::F64, shape(&[40, 30])));
    let t = g.transpose(x, None).unwrap();
    let p = g.matmul(x, t).unwrap();
    let s = g.sum(p, Some(&[1]), false).unwrap();
    let graph = g.finish(vec![p, s]).unwrap();
    let inputs = [HostTensor::new(shape(&[40, 30]), data(DType::F64, &a))];
    let reference = run(&graph, &inputs, Precision::Reference, 2);
    let float32 = run(&graph, &inputs, Precision::Float32, 2);
    for (r, f) in reference.iter().zip(&float32) {
        assert_eq!(bits(r), bits(f));
    }
}
