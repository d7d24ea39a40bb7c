//! The process-wide interrupt (`cancel::interrupt`, what a Python binding calls on Ctrl-C)
//! stops a running plan, alone in this test process: any run in any thread could observe it.

mod common;

use common::graph;

use common::shape;
use quabla_backend::cancel;
use quabla_backend::{Backend, BackendError, HostTensor};
use quabla_cpu::CpuBackend;
use quabla_ir::{Comparison, DType, HostData, Plan, Region, RegionForm, RegionKind, TensorType};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `while i < limit: i += 1` over a rank-0 carry (the scalar form) or, with `wide`, a carry
/// of 64 values next to it (the swapping form).
fn counting_while(wide: bool) -> Plan {
    let s = TensorType::new(DType::F64, shape(&[]));
    let x = TensorType::new(DType::F64, shape(if wide { &[64] } else { &[] }));
    let ins = [s.clone(), x, s];
    let cond = graph(&ins, |b, p| {
        vec![b.compare(Comparison::Less, p[0], p[2]).unwrap()]
    });
    let body = graph(&ins, |b, p| {
        let one = b.scalar(1.0, DType::F64, false);
        let x1 = b.add(p[1], one).unwrap();
        vec![b.add(p[0], one).unwrap(), x1]
    });
    let region = Arc::new(
        Region::new(
            RegionKind::While {
                n_carry: 2,
                cond: Arc::new(cond),
                body: Arc::new(body),
                max_trips: None,
            },
            RegionForm::While,
            0,
        )
        .unwrap(),
    );
    let g = graph(region.operand_types(), |b, p| {
        b.push_region_calls(region.clone(), 0..2, p).unwrap()
    });
    Plan::compile(&g)
}

fn tensor(dims: &[usize], v: f64) -> HostTensor {
    let s = shape(dims);
    let n = s.size();
    HostTensor::new(s, HostData::filled(DType::F64, v, n))
}

#[test]
fn an_interrupt_stops_the_running_plan_and_the_next_run_goes_on() {
    for wide in [false, true] {
        let dims: &[usize] = if wide { &[64] } else { &[] };
        let exe = CpuBackend::default()
            .compile(&counting_while(wide))
            .unwrap();
        let forever = [
            tensor(&[], 0.0),
            tensor(dims, 0.0),
            tensor(&[], f64::INFINITY),
        ];
        let interrupter = std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            cancel::interrupt();
            Instant::now()
        });
        let result = exe.run(&forever);
        let returned = Instant::now();
        let at = interrupter.join().unwrap();
        assert_eq!(result.unwrap_err(), BackendError::Cancelled);
        println!(
            "wide={wide}: returned {:?} after interrupt()",
            returned.saturating_duration_since(at)
        );
        // Observed once, then cleared: the next run completes.
        assert!(!cancel::interrupt_pending());
        let ten = [tensor(&[], 0.0), tensor(dims, 0.0), tensor(&[], 10.0)];
        let out = exe.run(&ten).unwrap();
        assert_eq!(out[0], tensor(&[], 10.0));
        assert_eq!(out[1], tensor(dims, 10.0));
    }

    // An interrupt raised while nothing runs cancels the next run (a Ctrl-C between two
    // calls stops the second), and only that one.
    let exe = CpuBackend::default()
        .compile(&counting_while(false))
        .unwrap();
    let ten = [tensor(&[], 0.0), tensor(&[], 0.0), tensor(&[], 10.0)];
    cancel::interrupt();
    assert_eq!(exe.run(&ten).unwrap_err(), BackendError::Cancelled);
    assert!(exe.run(&ten).is_ok());
}
