//! Per-iteration cost of a `fori_loop` region on the CPU backend: a scalar body
//! `c * 0.999999 + 1e-6`, 100 000 iterations, compiled once and run several times; prints the
//! best time per iteration for float64 and float32.
//!
//! `cargo run --release -p quabla-cpu --example fori_timing`

use quabla_backend::HostTensor;
use quabla_cpu::CpuBackend;
use quabla_ir::{
    DType, GraphBuilder, HostData, Op, Plan, Region, RegionCall, RegionForm, RegionKind, ScanBody,
    Shape, TensorType,
};
use std::sync::Arc;
use std::time::Instant;

const ITERATIONS: usize = 100_000;

fn fori_plan(dt: DType) -> Result<Plan, Box<dyn std::error::Error>> {
    let scalar = TensorType::new(dt, Shape::scalar());
    let mut b = GraphBuilder::new();
    let _i = b.input("i", scalar.clone());
    let c = b.input("c", scalar.clone());
    let k = b.scalar(0.999999, dt, false);
    let e = b.scalar(1e-6, dt, false);
    let ck = b.mul(c, k)?;
    let out = b.add(ck, e)?;
    let body = b.finish(vec![out])?;
    let scan = ScanBody {
        length: ITERATIONS,
        start: 0,
        reverse: false,
        n_carry: 1,
        n_const: 0,
        n_xs: 0,
        body: Arc::new(body),
    };
    let region = Arc::new(Region::new(RegionKind::Scan(scan), RegionForm::Fori, 0)?);
    let mut g = GraphBuilder::new();
    let c0 = g.input("c0", scalar);
    let r = g.push(Op::Region(RegionCall { region, output: 0 }), &[c0])?;
    Ok(Plan::compile(&g.finish(vec![r])?))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for dt in [DType::F64, DType::F32] {
        let exe = CpuBackend::default().compile_plan(&fori_plan(dt)?)?;
        let input = [HostTensor::new(
            Shape::scalar(),
            HostData::from_f64(dt, [0.5]),
        )];
        let mut best = f64::INFINITY;
        let mut last = None;
        for _ in 0..20 {
            let t = Instant::now();
            let out = quabla_backend::Executable::run(&exe, &input)?;
            best = best.min(t.elapsed().as_secs_f64());
            last = Some(out);
        }
        let value = last.map(|o| o[0].data.get_f64(0)).unwrap_or(f64::NAN);
        println!(
            "{dt:?}: {:.1} ns/iteration (best of 20 runs of {ITERATIONS}; result {value})",
            best / ITERATIONS as f64 * 1e9
        );
    }
    Ok(())
}
