//! Resident runs and donation on the host model of the device (see `emulated.rs`): a training
//! step run again and again on its own outputs, its donated state giving its storage to the
//! next run's outputs as the device's executable does (`runtime::Loaded::recycle`). Every step
//! agrees with the CPU reference, no output is ever written into an input of its own run, and
//! from the second step on the outputs live in the storage donated the step before.

mod common;

use common::host::{self, HostKernels, Resident};
use quabla_backend::{Backend, HostTensor, Precision};
use quabla_conformance::{compare_outputs, reference_backend, tensor, Agreement, Rng};
use quabla_cuda::lower::lower;
use quabla_ir::{DType, GraphBuilder, Plan, Shape, TensorType};

/// One step of gradient descent with momentum on a least-squares fit `x @ w ≈ y`:
/// inputs `(w, m, x, y)`, outputs `(w', m', loss)`. A GEMM, a transposed GEMM, fused
/// elementwise groups and a reduction, like a real step.
fn step_plan(dtype: DType) -> Plan {
    let ty = |dims: &[usize]| TensorType::new(dtype, Shape::new(dims.to_vec()).unwrap());
    let mut b = GraphBuilder::new();
    let w = b.input("w", ty(&[8, 4]));
    let m = b.input("m", ty(&[8, 4]));
    let x = b.input("x", ty(&[16, 8]));
    let y = b.input("y", ty(&[16, 4]));
    let pred = b.matmul(x, w).unwrap();
    let r = b.sub(pred, y).unwrap();
    let sq = b.mul(r, r).unwrap();
    let loss = b.mean(sq, None, false).unwrap();
    let xt = b.transpose(x, None).unwrap();
    let g = b.matmul(xt, r).unwrap();
    let scale = b.scalar(2.0 / 64.0, dtype, false);
    let g = b.mul(g, scale).unwrap();
    let beta = b.scalar(0.9, dtype, false);
    let m_next = b.mul(m, beta).unwrap();
    let m_next = b.add(m_next, g).unwrap();
    let rate = b.scalar(0.05, dtype, false);
    let delta = b.mul(m_next, rate).unwrap();
    let w_next = b.sub(w, delta).unwrap();
    Plan::from_graph_unoptimized(b.finish(vec![w_next, m_next, loss]).unwrap())
}

fn random(rng: &mut Rng, dtype: DType, dims: &[usize]) -> HostTensor {
    let values: Vec<f64> = (0..dims.iter().product::<usize>())
        .map(|_| rng.finite())
        .collect();
    tensor(dtype, dims, &values)
}

#[test]
fn donated_state_serves_the_next_steps_outputs_and_every_step_agrees_with_the_cpu() {
    for (dtype, precision) in [
        (DType::F32, Precision::Reference),
        (DType::F64, Precision::Float64),
    ] {
        let plan = step_plan(dtype);
        let program = lower(&plan, precision).unwrap();
        let kernels = HostKernels::compile(&program.kernels);
        let reference = reference_backend().compile(&plan).unwrap();
        let mut rng = Rng::new(7);
        let (x, y) = (
            random(&mut rng, dtype, &[16, 8]),
            random(&mut rng, dtype, &[16, 4]),
        );
        let mut expected_state = vec![
            random(&mut rng, dtype, &[8, 4]),
            tensor(dtype, &[8, 4], &[0.0; 32]),
        ];
        let (x_dev, y_dev) = (Resident::upload(&x), Resident::upload(&y));
        let mut state: Vec<Resident> = expected_state.iter().map(Resident::upload).collect();
        let mut pool: Vec<Resident> = Vec::new();
        let agreement = Agreement::Tolerance {
            float64: precision == Precision::Float64,
        };
        for step in 0..4 {
            let expected = reference
                .run(&[
                    expected_state[0].clone(),
                    expected_state[1].clone(),
                    x.clone(),
                    y.clone(),
                ])
                .unwrap();
            let donated: Vec<u64> = state.iter().map(Resident::address).collect();
            let pooled: Vec<u64> = pool.iter().map(Resident::address).collect();
            let outputs = host::run_resident(
                &kernels,
                &program,
                &[&state[0], &state[1], &x_dev, &y_dev],
                &mut pool,
            )
            .unwrap();
            let got: Vec<HostTensor> = outputs.iter().map(Resident::download).collect();
            compare_outputs(&expected, &got, agreement)
                .unwrap_or_else(|why| panic!("{dtype:?} step {step}: {why}"));
            let written: Vec<u64> = outputs.iter().map(Resident::address).collect();
            for a in &written {
                assert!(
                    !donated.contains(a) && *a != x_dev.address() && *a != y_dev.address(),
                    "{dtype:?} step {step}: an output was written into an input of its run"
                );
            }
            if step > 0 {
                // The two state outputs took the two allocations donated the step before.
                assert!(
                    pool.is_empty(),
                    "{dtype:?} step {step}: the pool was not used"
                );
                assert!(
                    pooled.contains(&written[0]) && pooled.contains(&written[1]),
                    "{dtype:?} step {step}: outputs at {written:x?}, pool held {pooled:x?}"
                );
            }
            // After the run succeeded, the donated state goes to the pool (at most one
            // allocation per output, as the device keeps it) and the outputs become the state.
            let mut outputs = outputs.into_iter();
            let next = vec![outputs.next().unwrap(), outputs.next().unwrap()];
            for old in std::mem::replace(&mut state, next) {
                if pool.len() < program.outputs.len() {
                    pool.push(old);
                }
            }
            expected_state = expected[..2].to_vec();
        }
    }
}
