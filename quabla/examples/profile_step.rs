//! Where the time of a training step goes on the CPU: the cached `jit(value_and_grad(loss))`
//! step of the 1-64-64-1 tanh MLP of the `mlp_value_and_grad_1024x64` bench row, in float64
//! and in float32 at `precision("float32")`, and the loss-and-gradient step of the Poisson
//! PINN of `examples/pinn.rs` (32 collocation points, second derivatives by `vmap` of
//! `grad(grad(u))`), each lowered to its plan and run through the CPU
//! executor's per-step timing (`CpuExecutable::profile`). It prints the time per step kind
//! (GEMM, fused elementwise, reductions, layout copies, ...), the run's total, what is left
//! outside the steps (binding, dispatch, outputs), and the step's memory: the schedule's largest
//! live set, what the executor keeps pooled between runs, and what keeping every value would
//! take. docs/performance.md reads its output.
//! Run with `cargo run --release --example profile_step`; `-- --steps` also lists every step
//! of the two MLP steps with its time.

use qb::Tensor;
use quabla as qb;
use quabla_backend::{HostTensor, Precision};
use quabla_cpu::CpuBackend;
use std::collections::BTreeMap;
use std::io::Write;

#[path = "support/mlp.rs"]
mod mlp;
use mlp::{mlp_loss, mlp_params};

#[path = "pinn.rs"]
#[allow(dead_code)]
mod pinn;

fn main() -> qb::Result<()> {
    run(&mut std::io::stdout().lock(), 500)
}

/// Profiles both steps over `runs` runs each and writes one table per step.
pub fn run(out: &mut impl Write, runs: usize) -> qb::Result<()> {
    let xs = qb::linspace(-1.0, 1.0, 1024)?.reshape([1024, 1])?;
    let ys = xs.sin()?;
    let params = mlp_params(64, 0.125)?;
    let cast = |ts: &[Tensor]| {
        ts.iter()
            .map(|t| t.astype(qb::F32))
            .collect::<qb::Result<Vec<_>>>()
    };
    let f64_args = (params.clone(), xs.clone(), ys.clone());
    let f32_args = (cast(&params)?, xs.astype(qb::F32)?, ys.astype(qb::F32)?);
    for (name, args, precision) in [
        ("float64", f64_args, Precision::Reference),
        (
            "float32 at precision(\"float32\")",
            f32_args,
            Precision::Float32,
        ),
    ] {
        let step = qb::jit(|(p, x, y): (Vec<Tensor>, Tensor, Tensor)| {
            qb::value_and_grad(mlp_loss).call::<Tensor, (Tensor, Vec<Tensor>)>(&(p, x, y))
        });
        let lowered = step.lower(&args)?;
        let plan = lowered.program().plan().clone();
        let exe = CpuBackend::default()
            .compile_plan_with(&plan, precision)
            .map_err(qb::Error::from)?;
        let (p, x, y) = &args;
        let inputs: Vec<HostTensor> = p
            .iter()
            .chain([x, y])
            .map(host)
            .collect::<qb::Result<_>>()?;
        // Warm the workspace (buffer pool, scratch) as a cached call finds it.
        exe.profile(&inputs, 10).map_err(qb::Error::from)?;
        let profile = exe.profile(&inputs, runs).map_err(qb::Error::from)?;
        write_table(out, name, exe.stats().steps, &profile)?;
        if std::env::args().any(|a| a == "--steps") {
            write_steps(out, &profile)?;
        }
        write_memory(out, &exe, &plan)?;
    }
    run_pinn(out, runs)
}

/// Profiles the loss-and-gradient step of the Poisson PINN (`examples/pinn.rs`, what its
/// `Trainer` compiles besides the Adam update) over `runs` runs.
fn run_pinn(out: &mut impl Write, runs: usize) -> qb::Result<()> {
    let data = pinn::collocation()?;
    let params = pinn::init(&qb::random::key(0))?;
    let step = qb::jit(|(p, d): (pinn::Params, pinn::Data)| {
        qb::value_and_grad(|(p, d): (pinn::Params, pinn::Data)| pinn::loss(&p, &d)).call::<_, (
            Tensor,
            pinn::Params,
        )>(&(
            p, d,
        ))
    });
    let args = (params, data);
    let lowered = step.lower(&args)?;
    let plan = lowered.program().plan().clone();
    let exe = CpuBackend::default()
        .compile_plan(&plan)
        .map_err(qb::Error::from)?;
    let (params, (xi, xb)) = &args;
    let inputs: Vec<HostTensor> = params
        .iter()
        .flat_map(|layer| layer.values())
        .chain([xi, xb])
        .map(host)
        .collect::<qb::Result<_>>()?;
    exe.profile(&inputs, 10).map_err(qb::Error::from)?;
    let profile = exe.profile(&inputs, runs).map_err(qb::Error::from)?;
    write_table(out, "PINN float64", exe.stats().steps, &profile)?;
    write_memory(out, &exe, &plan)
}

/// Every step of a profile with its time per run, in plan order.
fn write_steps(out: &mut impl Write, profile: &[(String, f64)]) -> qb::Result<()> {
    for (label, seconds) in &profile[..profile.len().saturating_sub(1)] {
        writeln!(out, "    {:>8.1} us  {label}", seconds * 1e6)
            .map_err(|e| qb::Error::user(e.to_string()))?;
    }
    Ok(())
}

/// The memory line of a profiled plan.
fn write_memory(
    out: &mut impl Write,
    exe: &quabla_cpu::CpuExecutable,
    plan: &quabla_ir::Plan,
) -> qb::Result<()> {
    let stats = exe.stats();
    writeln!(
        out,
        "  memory: largest live set {} KiB (outputs included), pooled between runs {} KiB, every value kept {} KiB",
        stats.peak_live_bytes / 1024,
        exe.pooled_bytes() / 1024,
        plan_bytes(plan) / 1024
    )
    .map_err(|e| qb::Error::user(e.to_string()))
}

/// Bytes of every value the plan computes, if none were freed or reused.
fn plan_bytes(plan: &quabla_ir::Plan) -> usize {
    plan.graph()
        .nodes()
        .iter()
        .filter(|n| !n.op.is_leaf())
        .map(|n| n.ty.shape.nbytes(n.ty.dtype))
        .sum()
}

/// A tensor's values as the executor's input buffer.
fn host(t: &Tensor) -> qb::Result<HostTensor> {
    let shape = quabla_ir::Shape::new(t.shape().to_vec()).map_err(qb::Error::from)?;
    let data = quabla_ir::HostData::from_f64(t.dtype(), t.to_vec::<f64>()?);
    Ok(HostTensor::new(shape, data))
}

/// The kind of step a label names, for the breakdown.
fn kind(label: &str) -> &'static str {
    // A node step's label is its op's name and its operands' shapes.
    match label.split(' ').next().unwrap_or_default() {
        "matmul" => "GEMM (matmul)",
        l if l.starts_with("fused") => "fused elementwise",
        "sum" | "sum_axis" | "mean" | "mean_axis" | "max_axis" | "min_axis" | "cumsum" => {
            "reductions"
        }
        "transpose" | "broadcast" | "reshape" | "concat" | "slice" | "pad_slice" | "gather"
        | "scatter_add" | "stop_gradient" => "layout copies",
        _ => "other",
    }
}

fn write_table(
    out: &mut impl Write,
    name: &str,
    steps: usize,
    profile: &[(String, f64)],
) -> qb::Result<()> {
    let io = |e: std::io::Error| qb::Error::user(e.to_string());
    let (run_label, run) = profile.last().cloned().unwrap_or(("run".into(), 0.0));
    debug_assert_eq!(run_label, "run");
    let mut by_kind: BTreeMap<&str, (usize, f64)> = BTreeMap::new();
    for (label, seconds) in &profile[..profile.len().saturating_sub(1)] {
        let e = by_kind.entry(kind(label)).or_default();
        e.0 += 1;
        e.1 += seconds;
    }
    let in_steps: f64 = by_kind.values().map(|v| v.1).sum();
    writeln!(
        out,
        "step {name}: {steps} steps, {:.1} us per run",
        run * 1e6
    )
    .map_err(io)?;
    for (k, (count, seconds)) in &by_kind {
        writeln!(
            out,
            "  {k:<18} {count:>3} steps {:>8.1} us {:>5.1}%",
            seconds * 1e6,
            100.0 * seconds / run
        )
        .map_err(io)?;
    }
    let rest = run - in_steps;
    writeln!(
        out,
        "  {:<18} {:>9} {:>8.1} us {:>5.1}%",
        "outside the steps",
        "",
        rest * 1e6,
        100.0 * rest / run
    )
    .map_err(io)?;
    Ok(())
}
