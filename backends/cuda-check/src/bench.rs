//! The CUDA benchmarks of `docs/cuda.md`, each against a baseline measured in the same run:
//!
//! - a fused elementwise chain over 2^28 float32 values, against the device's copy bandwidth
//!   (a device-to-device copy of the same bytes); target ≥ 85%;
//! - `sum` over the same values, against the copy bandwidth;
//! - SGEMM and DGEMM 8192³ through a plan's `matmul`, against one cuBLAS call on the same
//!   buffers; target ≥ 90%;
//! - NVRTC compile and module load time per plan (every conformance plan), and the first call
//!   of a jitted function against its later calls;
//! - the cost of one `while_loop` trip driven by the host (one predicate readback each),
//!   against a loop fused into one kernel;
//! - a trip of a scan whose body (a GEMM and a kernel) is replayed as a CUDA graph, against
//!   the same trips launched call by call;
//! - a `Trainer` step of the PINN (acceptance §13) in float32, against the machine's JAX on the
//!   GPU (`jax_pinn.py`, matmul precision "highest"); target ≤ 1.0×.
//!
//! Times are medians over repetitions, each ended by waiting for the device.

use crate::{err, Options};
use quabla_backend::{Backend, Bound, Executable, HostTensor, Memory, Precision};
use quabla_cuda::lower::lower;
use quabla_cuda::program::{Elem, Gemm};
use quabla_cuda::runtime::{CudaMemory, Device};
use quabla_cuda::CudaBackend;
use quabla_ir::{
    Comparison, DType, GraphBuilder, HostData, Plan, Region, RegionForm, RegionKind, Shape,
    TensorType, UnaryOp,
};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

/// One line of the benchmark table.
struct Row {
    name: String,
    result: String,
    baseline: String,
    ratio: Option<f64>,
    /// `(text, met)`: the target and whether the ratio meets it.
    target: Option<(String, bool)>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median seconds of `reps` runs of `f`, each waited for, after one warm-up run.
fn time(
    device: &Device,
    reps: usize,
    mut f: impl FnMut() -> Result<(), String>,
) -> Result<f64, String> {
    f()?;
    device.synchronize().map_err(err)?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let started = Instant::now();
        f()?;
        device.synchronize().map_err(err)?;
        times.push(started.elapsed().as_secs_f64());
    }
    Ok(median(times))
}

fn shape(dims: &[usize]) -> Shape {
    Shape::new(dims.to_vec()).expect("benchmark shapes are nonzero")
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> impl Iterator<Item = f64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n).map(move |_| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    })
}

fn upload(
    backend: &CudaBackend,
    dtype: DType,
    dims: &[usize],
    seed: u64,
) -> Result<Memory, String> {
    let n = dims.iter().product();
    let t = HostTensor::new(shape(dims), HostData::from_f64(dtype, values(n, seed)));
    backend.upload(&t).map_err(err)
}

fn cuda(m: &Memory) -> Result<&CudaMemory, String> {
    m.backend::<CudaMemory>()
        .ok_or_else(|| "not CUDA memory".to_string())
}

/// Runs `exe` on `inputs` (lent), dropping the outputs.
fn run(exe: &Arc<dyn Executable>, inputs: &[Memory]) -> Result<(), String> {
    let bound = inputs
        .iter()
        .map(|m| Bound {
            memory: m.clone(),
            donated: false,
        })
        .collect();
    exe.run_resident(bound)
        .map(drop)
        .map_err(|f| f.error.to_string())
}

fn gb_per_s(bytes: f64, seconds: f64) -> String {
    format!("{:.0} GB/s", bytes / seconds / 1e9)
}

fn bandwidth(backend: &CudaBackend, o: &Options) -> Result<(Vec<Row>, f64), String> {
    let device = backend.device();
    let n: usize = if o.quick { 1 << 24 } else { 1 << 28 };
    let reps = if o.quick { 5 } else { 20 };
    let x = upload(backend, DType::F32, &[n], 1)?;
    let copy = backend.allocate(DType::F32, &shape(&[n])).map_err(err)?;
    let bytes = (n * 4) as f64;
    let t_copy = time(device, reps, || {
        device.copy_direct(cuda(&copy)?, cuda(&x)?).map_err(err)
    })?;
    let copy_bw = 2.0 * bytes / t_copy;
    let mut rows = vec![Row {
        name: format!("device copy, 2^{} float32", n.trailing_zeros()),
        result: format!("{:.3} ms, {}", t_copy * 1e3, gb_per_s(2.0 * bytes, t_copy)),
        baseline: "(baseline)".into(),
        ratio: None,
        target: None,
    }];
    // tanh(x) * 0.5 + x * x: one fused kernel reading x once and writing y once.
    let mut b = GraphBuilder::new();
    let xi = b.input("x", TensorType::new(DType::F32, shape(&[n])));
    let t = b.unary(UnaryOp::Tanh, xi).map_err(|e| e.to_string())?;
    let half = b.scalar(0.5, DType::F32, false);
    let h = b.mul(t, half).map_err(|e| e.to_string())?;
    let sq = b.mul(xi, xi).map_err(|e| e.to_string())?;
    let y = b.add(h, sq).map_err(|e| e.to_string())?;
    let chain = Plan::compile(&b.finish(vec![y]).map_err(|e| e.to_string())?);
    let exe = backend.compile(&chain).map_err(err)?;
    let t_chain = time(device, reps, || run(&exe, std::slice::from_ref(&x)))?;
    let chain_bw = 2.0 * bytes / t_chain;
    let ratio = chain_bw / copy_bw;
    rows.push(Row {
        name: "fused elementwise chain `tanh(x)*0.5 + x*x`".into(),
        result: format!(
            "{:.3} ms, {}",
            t_chain * 1e3,
            gb_per_s(2.0 * bytes, t_chain)
        ),
        baseline: "device copy".into(),
        ratio: Some(ratio),
        target: Some(("≥ 0.85".into(), ratio >= 0.85)),
    });
    let mut b = GraphBuilder::new();
    let xi = b.input("x", TensorType::new(DType::F32, shape(&[n])));
    let s = b.sum(xi, None, false).map_err(|e| e.to_string())?;
    let sum = Plan::compile(&b.finish(vec![s]).map_err(|e| e.to_string())?);
    let exe = backend.compile(&sum).map_err(err)?;
    let t_sum = time(device, reps, || run(&exe, std::slice::from_ref(&x)))?;
    let sum_bw = bytes / t_sum;
    rows.push(Row {
        name: "`sum` (blocked order, float64 accumulation)".into(),
        result: format!("{:.3} ms, {}", t_sum * 1e3, gb_per_s(bytes, t_sum)),
        baseline: "device copy".into(),
        ratio: Some(sum_bw / copy_bw),
        target: None,
    });
    Ok((rows, copy_bw))
}

fn gemm(backend: &CudaBackend, o: &Options, dtype: DType) -> Result<Row, String> {
    let device = backend.device();
    let n: usize = if o.quick { 2048 } else { 8192 };
    let reps = if o.quick { 3 } else { 10 };
    let a = upload(backend, dtype, &[n, n], 2)?;
    let bm = upload(backend, dtype, &[n, n], 3)?;
    let c = backend.allocate(dtype, &shape(&[n, n])).map_err(err)?;
    let precision = if dtype == DType::F64 {
        Precision::Float64
    } else {
        Precision::Reference
    };
    let mut g = GraphBuilder::new();
    let ai = g.input("a", TensorType::new(dtype, shape(&[n, n])));
    let bi = g.input("b", TensorType::new(dtype, shape(&[n, n])));
    let p = g.matmul(ai, bi).map_err(|e| e.to_string())?;
    let plan = Plan::compile(&g.finish(vec![p]).map_err(|e| e.to_string())?);
    let exe = backend.compile_with(&plan, precision).map_err(err)?;
    let t_plan = time(device, reps, || run(&exe, &[a.clone(), bm.clone()]))?;
    // The call the lowering makes for a row-major product, on the same buffers.
    let elem = if dtype == DType::F64 {
        Elem::F64
    } else {
        Elem::F32
    };
    let direct = Gemm {
        elem,
        trans_a: false,
        trans_b: false,
        m: n,
        n,
        k: n,
        a: 0,
        lda: n,
        stride_a: 0,
        b: 0,
        ldb: n,
        stride_b: 0,
        c: 0,
        ldc: n,
        stride_c: 0,
        batch: 1,
    };
    let t_direct = time(device, reps, || {
        device
            .gemm_direct(&direct, cuda(&bm)?, cuda(&a)?, cuda(&c)?)
            .map_err(err)
    })?;
    let flops = 2.0 * (n as f64).powi(3);
    let ratio = t_direct / t_plan;
    Ok(Row {
        name: format!(
            "{} {n}³ (`matmul` plan{})",
            if dtype == DType::F64 {
                "DGEMM"
            } else {
                "SGEMM"
            },
            if dtype == DType::F64 {
                ", precision=\"float64\""
            } else {
                ""
            }
        ),
        result: format!(
            "{:.2} ms, {:.1} TFLOP/s",
            t_plan * 1e3,
            flops / t_plan / 1e12
        ),
        baseline: format!("cuBLAS direct: {:.1} TFLOP/s", flops / t_direct / 1e12),
        ratio: Some(ratio),
        target: Some(("≥ 0.90".into(), ratio >= 0.90)),
    })
}

/// NVRTC compile and module load time of every conformance plan's program.
fn compile_times(backend: &CudaBackend) -> Result<Vec<Row>, String> {
    let device = backend.device();
    let (mut compile, mut load, mut kernels) = (Vec::new(), Vec::new(), Vec::new());
    for case in quabla_conformance::CASES {
        for p in case.programs() {
            let program = lower(&p.plan, Precision::Reference).map_err(err)?;
            let (c, l, _) = device.compile_timed(&program).map_err(err)?;
            compile.push(c);
            load.push(l);
            kernels.push(program.kernels.len() as f64);
        }
    }
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    Ok(vec![
        Row {
            name: format!(
                "NVRTC compile per plan ({} plans, median {:.0} kernels)",
                compile.len(),
                median(kernels.clone())
            ),
            result: format!(
                "median {:.0} ms, max {:.0} ms",
                median(compile.clone()) * 1e3,
                max(&compile) * 1e3
            ),
            baseline: String::new(),
            ratio: None,
            target: None,
        },
        Row {
            name: "module load per plan".into(),
            result: format!(
                "median {:.2} ms, max {:.2} ms",
                median(load.clone()) * 1e3,
                max(&load) * 1e3
            ),
            baseline: String::new(),
            ratio: None,
            target: None,
        },
    ])
}

/// The first call of a jitted function (trace, lower, compile, load, run) against later calls.
fn first_call() -> Result<Row, String> {
    use quabla as qb;
    let x = qb::linspace(0.0, 1.0, 1024)
        .map_err(|e| e.to_string())?
        .astype(qb::F32)
        .map_err(|e| e.to_string())?;
    let f = qb::jit(|x: qb::Tensor| (x.sin()? * 2.0)? + x.exp()?).device("cuda");
    let started = Instant::now();
    f.call(&x).map_err(|e| e.to_string())?;
    let first = started.elapsed().as_secs_f64();
    let mut later = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        f.call(&x).map_err(|e| e.to_string())?;
        later.push(started.elapsed().as_secs_f64());
    }
    let later = median(later);
    Ok(Row {
        name: "first call of `jit(f).device(\"cuda\")` (cold kernel cache)".into(),
        result: format!("{:.1} ms", first * 1e3),
        baseline: format!("later calls: {:.3} ms (upload, run, download)", later * 1e3),
        ratio: Some(first / later),
        target: None,
    })
}

/// A `while_loop` plan: a host-driven loop over a tensor carry (`n` trips), or one fused into
/// a kernel over a single value.
fn while_plan(fused: bool, trips: usize) -> Result<Plan, String> {
    let e = |e: quabla_ir::IrError| e.to_string();
    let dims: &[usize] = if fused { &[] } else { &[1024] };
    let carry = TensorType::new(DType::F32, shape(dims));
    let per_trip = dims.iter().product::<usize>() as f64;
    let limit = per_trip * trips as f64;
    let mut cb = GraphBuilder::new();
    let c = cb.input("c", carry.clone());
    let s = if fused {
        c
    } else {
        cb.sum(c, None, false).map_err(e)?
    };
    let l = cb.scalar(limit - 0.5, DType::F32, false);
    let p = cb.compare(Comparison::Less, s, l).map_err(e)?;
    let cond = Arc::new(cb.finish(vec![p]).map_err(e)?);
    let mut bb = GraphBuilder::new();
    let c = bb.input("c", carry.clone());
    let one = bb.scalar(1.0, DType::F32, false);
    let n = bb.add(c, one).map_err(e)?;
    let body = Arc::new(bb.finish(vec![n]).map_err(e)?);
    let region = Arc::new(
        Region::new(
            RegionKind::While {
                n_carry: 1,
                cond,
                body,
                max_trips: None,
            },
            RegionForm::While,
            0,
        )
        .map_err(e)?,
    );
    let mut g = GraphBuilder::new();
    let x = g.input("x", carry);
    let out = g.push_region_calls(region, [0], &[x]).map_err(e)?;
    Ok(Plan::compile(&g.finish(out).map_err(e)?))
}

fn while_trips(backend: &CudaBackend, o: &Options) -> Result<Row, String> {
    let device = backend.device();
    let trips = if o.quick { 100 } else { 1000 };
    let mut per_trip = Vec::new();
    for fused in [false, true] {
        let plan = while_plan(fused, trips)?;
        let program = lower(&plan, Precision::Reference).map_err(err)?;
        let is_fused = program.report().contains("fused into one kernel");
        if is_fused != fused {
            return Err(format!(
                "the while plan lowered {}fused",
                if is_fused { "" } else { "un" }
            ));
        }
        let exe = backend.compile(&plan).map_err(err)?;
        let dims: &[usize] = if fused { &[] } else { &[1024] };
        let x = backend
            .upload(&HostTensor::new(
                shape(dims),
                HostData::from_f64(DType::F32, vec![0.0; dims.iter().product()]),
            ))
            .map_err(err)?;
        let t = time(device, 3, || run(&exe, std::slice::from_ref(&x)))?;
        per_trip.push(t / trips as f64);
    }
    Ok(Row {
        name: format!("`while_loop` trip driven by the host ({trips} trips, one readback each)"),
        result: format!("{:.1} µs per trip", per_trip[0] * 1e6),
        baseline: format!(
            "fused into one kernel: {:.3} µs per trip",
            per_trip[1] * 1e6
        ),
        ratio: Some(per_trip[0] / per_trip[1]),
        target: None,
    })
}

/// A recurrent scan, `h = tanh(h @ W + x_t)` over `trips` rows of `xs` (`[1, 256]` carry,
/// `[256, 256]` weights): a body of a GEMM and a fused kernel, replayed as a graph.
fn rnn_scan_plan(trips: usize) -> Result<Plan, String> {
    let e = |e: quabla_ir::IrError| e.to_string();
    let n = 256;
    let row = TensorType::new(DType::F32, shape(&[1, n]));
    let mut bb = GraphBuilder::new();
    let _index = bb.input("i", TensorType::new(DType::F32, shape(&[])));
    let h = bb.input("h", row.clone());
    let w = bb.input("w", TensorType::new(DType::F32, shape(&[n, n])));
    let x = bb.input("x", row.clone());
    let hw = bb.matmul(h, w).map_err(e)?;
    let pre = bb.add(hw, x).map_err(e)?;
    let next = bb.unary(UnaryOp::Tanh, pre).map_err(e)?;
    let body = Arc::new(bb.finish(vec![next]).map_err(e)?);
    let region = Arc::new(
        Region::new(
            RegionKind::Scan(quabla_ir::ScanBody {
                length: trips,
                start: 0,
                reverse: false,
                n_carry: 1,
                n_const: 1,
                n_xs: 1,
                body,
            }),
            RegionForm::Scan,
            0,
        )
        .map_err(e)?,
    );
    let mut g = GraphBuilder::new();
    let h0 = g.input("h0", row);
    let w = g.input("w", TensorType::new(DType::F32, shape(&[n, n])));
    let xs = g.input("xs", TensorType::new(DType::F32, shape(&[trips, 1, n])));
    let out = g.push_region_calls(region, [0], &[h0, w, xs]).map_err(e)?;
    Ok(Plan::compile(&g.finish(out).map_err(e)?))
}

/// A trip of a scan whose body is a GEMM and a kernel, replayed as a recorded graph, against
/// the same trips launched one call at a time.
fn scan_replay(backend: &CudaBackend, o: &Options) -> Result<Row, String> {
    let device = backend.device();
    let trips = if o.quick { 100 } else { 1000 };
    let plan = rnn_scan_plan(trips)?;
    let program = lower(&plan, Precision::Reference).map_err(err)?;
    if !program.report().contains("replayed as a CUDA graph") {
        return Err("the scan's body is not replayed as a graph".into());
    }
    let exe = backend.compile(&plan).map_err(err)?;
    let upload = |dims: &[usize], seed: u64| {
        let n: usize = dims.iter().product();
        let scale = if seed == 2 { 1.0 / 16.0 } else { 1.0 };
        backend
            .upload(&HostTensor::new(
                shape(dims),
                HostData::from_f64(DType::F32, values(n, seed).map(|v| v * scale)),
            ))
            .map_err(err)
    };
    let inputs = [
        upload(&[1, 256], 1)?,
        upload(&[256, 256], 2)?,
        upload(&[trips, 1, 256], 3)?,
    ];
    let mut per_trip = Vec::new();
    for graphs in [true, false] {
        device.set_graphs(graphs);
        let t = time(device, 3, || run(&exe, &inputs));
        device.set_graphs(true);
        per_trip.push(t? / trips as f64);
    }
    Ok(Row {
        name: format!(
            "`scan` trip of `tanh(h @ W + x)`, [1, 256] @ [256, 256] float32 ({trips} trips), \
             replayed as a CUDA graph"
        ),
        result: format!("{:.2} µs per trip", per_trip[0] * 1e6),
        baseline: format!(
            "launched call by call (QUABLA_CUDA_GRAPHS=0): {:.2} µs per trip",
            per_trip[1] * 1e6
        ),
        ratio: Some(per_trip[1] / per_trip[0]),
        target: None,
    })
}

/// Runs every benchmark and returns the report's section.
pub fn run_all(backend: &Arc<CudaBackend>, o: &Options) -> String {
    let mut rows: Vec<Row> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    let mut note = |what: &str, r: Result<Vec<Row>, String>, rows: &mut Vec<Row>| match r {
        Ok(mut r) => rows.append(&mut r),
        Err(e) => problems.push(format!("{what}: {e}")),
    };
    note(
        "bandwidth",
        bandwidth(backend, o).map(|(r, _)| r),
        &mut rows,
    );
    for dtype in [DType::F32, DType::F64] {
        note("GEMM", gemm(backend, o, dtype).map(|r| vec![r]), &mut rows);
    }
    note("compile times", compile_times(backend), &mut rows);
    note("first call", first_call().map(|r| vec![r]), &mut rows);
    note(
        "while_loop",
        while_trips(backend, o).map(|r| vec![r]),
        &mut rows,
    );
    note(
        "scan replay",
        scan_replay(backend, o).map(|r| vec![r]),
        &mut rows,
    );
    note(
        "PINN",
        crate::pinn::compare(o).map(|r| vec![r.into_row()]),
        &mut rows,
    );
    let mut out = String::from(
        "## Benchmarks\n\n| benchmark | result | baseline | ratio | target |\n| --- | --- | --- | --- | --- |\n",
    );
    for r in &rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            r.name,
            r.result,
            r.baseline,
            r.ratio.map_or(String::new(), |x| format!("{x:.2}")),
            r.target.as_ref().map_or(String::new(), |(t, met)| {
                format!("{t}: {}", if *met { "met" } else { "**not met**" })
            })
        );
    }
    for p in problems {
        let _ = writeln!(out, "\n**{p}**");
    }
    out.push('\n');
    print!("{out}");
    out
}

/// The PINN comparison's result, made a row.
pub struct PinnResult {
    pub ours_step_s: f64,
    pub jax_step_s: Option<f64>,
    pub jax_note: String,
}

impl PinnResult {
    fn into_row(self) -> Row {
        let ratio = self.jax_step_s.map(|j| self.ours_step_s / j);
        Row {
            name: "PINN `Trainer` step, float32 (acceptance §13)".into(),
            result: format!("{:.1} µs per step", self.ours_step_s * 1e6),
            baseline: match self.jax_step_s {
                Some(j) => format!("JAX on this GPU: {:.1} µs ({})", j * 1e6, self.jax_note),
                None => format!("JAX: {}", self.jax_note),
            },
            ratio,
            target: ratio.map(|r| ("≤ 1.0".into(), r <= 1.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The benchmarks' plans lower here in the forms their rows name (nothing else of them
    /// runs without a GPU).
    #[test]
    fn the_loop_plans_lower_in_the_forms_their_rows_name() {
        let scan = lower(&rnn_scan_plan(16).unwrap(), Precision::Reference).unwrap();
        assert!(scan
            .report()
            .contains("1 loops whose body is replayed as a CUDA graph"));
        assert!(scan.report().contains("cuBLAS GEMM"));
        let fused = lower(&while_plan(true, 10).unwrap(), Precision::Reference).unwrap();
        assert!(fused.report().contains("fused into one kernel"));
        let driven = lower(&while_plan(false, 10).unwrap(), Precision::Reference).unwrap();
        assert!(!driven.report().contains("fused into one kernel"));
    }
}
