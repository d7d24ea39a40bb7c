//! `sum` and `mean` in the blocked order of numerics.md §1.5, checked bit for bit against a
//! scalar implementation of the definition written here from the spec's text (independent of
//! `quabla_ir::eval::blocked_sum`, which is checked against it too), over whole and axis
//! reductions, sizes around the block and lane boundaries, float32 and float64, and thread
//! counts.

mod common;

use common::{data, run, shape, Rng};
use quabla_backend::HostTensor;
use quabla_cpu::CpuOptions;
use quabla_ir::{DType, GraphBuilder, TensorType};

/// The definition: the elements in order, cut into consecutive blocks of 1024 (the last may be
/// shorter); in a block element `k` goes to accumulator `k mod 8` (eight accumulators from
/// `+0.0`, each adding in order); the eight combine as `((a0 + a1) + (a2 + a3)) + ((a4 + a5) +
/// (a6 + a7))`; the block sums combine by the pairwise tree (neighbours `(0, 1), (2, 3), ...`,
/// an odd last one carried, repeated until one remains).
fn definition(values: &[f64]) -> f64 {
    let block_sums: Vec<f64> = values
        .chunks(1024)
        .map(|block| {
            let mut a = [0.0f64; 8];
            for (k, &v) in block.iter().enumerate() {
                a[k % 8] += v;
            }
            ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
        })
        .collect();
    tree(block_sums)
}

fn tree(level: Vec<f64>) -> f64 {
    if level.len() == 1 {
        return level[0];
    }
    let next = level
        .chunks(2)
        .map(|pair| {
            if pair.len() == 2 {
                pair[0] + pair[1]
            } else {
                pair[0]
            }
        })
        .collect();
    tree(next)
}

/// Values of wildly different magnitudes, so that any other order of additions rounds
/// differently.
fn values(rng: &mut Rng, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| rng.finite() * 10f64.powi((i % 23) as i32 - 11))
        .collect()
}

/// The reduced elements of each kept position of a row-major array, in row-major order.
fn per_position(x: &[f64], dims: &[usize], axes: &[usize]) -> Vec<Vec<f64>> {
    let kept: Vec<usize> = (0..dims.len()).filter(|a| !axes.contains(a)).collect();
    let positions: usize = kept.iter().map(|&a| dims[a]).product();
    let mut out = vec![Vec::new(); positions];
    for (i, &v) in x.iter().enumerate() {
        // The multi-index of element i, then its kept position.
        let mut rem = i;
        let mut idx = vec![0; dims.len()];
        for a in (0..dims.len()).rev() {
            idx[a] = rem % dims[a];
            rem /= dims[a];
        }
        let pos = kept.iter().fold(0, |p, &a| p * dims[a] + idx[a]);
        out[pos].push(v);
    }
    out
}

/// Runs `sum` and `mean` of `x` over `axes` (all of them for `None`) on the CPU backend.
fn run_sums(
    dtype: DType,
    dims: &[usize],
    x: &[f64],
    axes: Option<&[isize]>,
    threads: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut b = GraphBuilder::new();
    let input = b.input("x", TensorType::new(dtype, shape(dims)));
    let sum = b.sum(input, axes, false).unwrap();
    let mean = b.mean(input, axes, false).unwrap();
    let graph = b.finish(vec![sum, mean]).unwrap();
    let options = CpuOptions {
        threads,
        ..CpuOptions::default()
    };
    let out = run(
        &graph,
        &[HostTensor::new(shape(dims), data(dtype, x))],
        options,
    );
    (out[0].data.to_f64_vec(), out[1].data.to_f64_vec())
}

fn check(dims: &[usize], axes: &[usize], seed: u64) {
    let n: usize = dims.iter().product();
    let x = values(&mut Rng::new(seed), n);
    let signed: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
    let whole = axes.len() == dims.len();
    for dtype in [DType::F64, DType::F32] {
        // The elements as the node sees them (float32 inputs are float32 values).
        let seen = data(dtype, &x).to_f64_vec();
        let groups = per_position(&seen, dims, axes);
        let count = (n / groups.len()) as f64;
        let round = |v: f64| data(dtype, &[v]).to_f64_vec()[0];
        let want_sum: Vec<f64> = groups.iter().map(|g| round(definition(g))).collect();
        let want_mean: Vec<f64> = groups
            .iter()
            .map(|g| round(definition(g) / count))
            .collect();
        // The reference evaluator follows the same definition.
        let reference: Vec<f64> = groups
            .iter()
            .map(|g| quabla_ir::eval::blocked_sum(g.iter().copied()))
            .collect();
        assert_eq!(
            reference.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            groups
                .iter()
                .map(|g| definition(g).to_bits())
                .collect::<Vec<_>>(),
            "reference {dims:?} {axes:?}"
        );
        for threads in [1, 2, 3] {
            let axes = if whole { None } else { Some(&signed[..]) };
            let (sum, mean) = run_sums(dtype, dims, &x, axes, threads);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&sum),
                bits(&want_sum),
                "sum {dtype} {dims:?} {axes:?} threads={threads}"
            );
            assert_eq!(
                bits(&mean),
                bits(&want_mean),
                "mean {dtype} {dims:?} {axes:?} threads={threads}"
            );
        }
    }
}

#[test]
fn whole_sums_follow_the_blocked_order() {
    // Around the lane (8) and block (1024) boundaries, and past the parallel threshold.
    for (k, n) in [
        1, 2, 7, 8, 9, 17, 1023, 1024, 1025, 2048, 3073, 5000, 150_001,
    ]
    .into_iter()
    .enumerate()
    {
        check(&[n], &[0], k as u64);
    }
    check(&[3, 700], &[0, 1], 40);
    check(&[2, 3, 400], &[0, 1, 2], 41);
}

#[test]
fn axis_sums_follow_the_blocked_order() {
    let cases: [(&[usize], &[usize]); 11] = [
        // Rows (contiguous runs per position).
        (&[5, 3000], &[1]),
        (&[70, 2100], &[1]),
        // Columns (a row at a time into eight lanes per column).
        (&[3000, 5], &[0]),
        (&[2100, 70], &[0]),
        (&[1025, 3], &[0]),
        // Interleaved kept and reduced axes.
        (&[600, 3, 4], &[0, 2]),
        (&[3, 1100, 2], &[1]),
        (&[2, 5, 300, 3], &[0, 2]),
        (&[4, 1, 1030], &[0, 2]),
        (&[2, 3, 4], &[1]),
        // Past the parallel threshold with a leading kept axis.
        (&[4, 30_000], &[1]),
    ];
    for (k, (dims, axes)) in cases.into_iter().enumerate() {
        check(dims, axes, 100 + k as u64);
    }
    check(&[60_000, 3], &[0], 120);
}

/// The blocked order is not the sequential one: a case where the two differ, so the tests above
/// could not pass with a sequential kernel.
#[test]
fn the_blocked_order_is_not_sequential() {
    let x = values(&mut Rng::new(7), 5000);
    let sequential = x.iter().fold(0.0, |a, &v| a + v);
    assert_ne!(definition(&x).to_bits(), sequential.to_bits());
    let (sum, _) = run_sums(DType::F64, &[5000], &x, None, 1);
    assert_eq!(sum[0].to_bits(), definition(&x).to_bits());
}

/// Accumulators start at `+0.0`: a sum of negative zeros is `+0.0` (a running `cumsum` keeps
/// `-0.0`, as its sequential accumulation from `-0.0` does).
#[test]
fn sums_of_negative_zeros_are_positive_zero() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", TensorType::new(DType::F64, shape(&[2, 2])));
    let all = b.sum(x, None, false).unwrap();
    let rows = b.sum(x, Some(&[1]), false).unwrap();
    let means = b.mean(x, Some(&[0]), false).unwrap();
    let running = b.cumsum(x, 0, false).unwrap();
    let graph = b.finish(vec![all, rows, means, running]).unwrap();
    let inputs = [HostTensor::new(
        shape(&[2, 2]),
        data(DType::F64, &[-0.0; 4]),
    )];
    let out = run(&graph, &inputs, CpuOptions::default());
    for sums in &out[..3] {
        for v in sums.data.to_f64_vec() {
            assert!(v == 0.0 && v.is_sign_positive(), "{sums:?}");
        }
    }
    for v in out[3].data.to_f64_vec() {
        assert!(v == 0.0 && v.is_sign_negative(), "{:?}", out[3]);
    }
}
