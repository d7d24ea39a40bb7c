//! Plans whose buffers the machine cannot hold fail with `BackendError::OutOfMemory`, in this
//! process and without aborting it: plan outputs, intermediate buffers, a scan's stacked
//! output (the tape of a reverse-mode loop), and allocations inside a branch. Afterwards the
//! inputs are intact and the same executable runs again.
//!
//! The sizes are chosen to fail on every machine: 2^50 bytes (1 PiB) is more than any x86-64
//! or aarch64 address space, so the allocator refuses it even where the kernel overcommits
//! memory (a smaller request, say 8 TiB, fails only where overcommit is heuristic or strict
//! and RAM plus swap is smaller, which is the common case but not a guarantee).

mod common;

use common::graph;

use common::shape;
use quabla_backend::{Backend, BackendError, HostTensor};
use quabla_cpu::CpuBackend;
use quabla_ir::{DType, HostData, Plan, Region, RegionForm, RegionKind, ScanBody, TensorType};
use std::sync::Arc;

/// Elements of float64 in 2^50 bytes.
const HUGE: usize = 1 << 47;

fn tt(dtype: DType, dims: &[usize]) -> TensorType {
    TensorType::new(dtype, shape(dims))
}

fn x3() -> HostTensor {
    HostTensor::new(shape(&[3]), HostData::F64(vec![1.0, 2.0, 3.0].into()))
}

fn expected(dims: &[usize]) -> BackendError {
    BackendError::OutOfMemory {
        bytes: 1 << 50,
        what: format!("a tensor of shape {dims:?} float64"),
    }
}

#[test]
fn an_output_the_machine_cannot_hold_is_an_error_and_the_executable_runs_again() {
    // `broadcast_to([1])` of a scalar input to 2^47 elements, as the plan's output.
    let g = graph(&[tt(DType::F64, &[])], |b, p| {
        vec![b.broadcast_to(p[0], shape(&[HUGE])).unwrap()]
    });
    let exe = CpuBackend::default().compile(&Plan::compile(&g)).unwrap();
    let x = HostTensor::new(shape(&[]), HostData::F64(vec![2.0].into()));
    let err = exe.run(std::slice::from_ref(&x)).unwrap_err();
    assert_eq!(err, expected(&[HUGE]));
    assert_eq!(
        err.to_string(),
        "cannot allocate 1125899906842624 bytes for a tensor of shape [140737488355328] \
         float64; the machine does not have that much memory"
    );
    // Again: the same typed error, not a poisoned workspace.
    assert_eq!(exe.run(std::slice::from_ref(&x)).unwrap_err(), err);
    assert_eq!(x.data, HostData::F64(vec![2.0].into()));
}

#[test]
fn an_intermediate_the_machine_cannot_hold_is_an_error() {
    // sum(broadcast(x, [2^47, 3])): the broadcast is a pooled buffer, the output a scalar.
    let g = graph(&[tt(DType::F64, &[3])], |b, p| {
        let big = b.broadcast_to(p[0], shape(&[HUGE / 4, 4, 3])).unwrap();
        vec![b.sum(big, None, false).unwrap()]
    });
    let exe = CpuBackend::default().compile(&Plan::compile(&g)).unwrap();
    let err = exe.run(&[x3()]).unwrap_err();
    match &err {
        BackendError::OutOfMemory { bytes, what } => {
            assert_eq!(*bytes, 3 << 50, "{err}");
            assert!(what.contains("[35184372088832, 4, 3] float64"), "{err}");
        }
        other => panic!("expected OutOfMemory, got {other}"),
    }
    assert_eq!(exe.run(&[x3()]).unwrap_err(), err);
}

/// A branch region: `then` sums a huge broadcast of `x`, `else` returns `sum(x)`.
fn branching() -> Plan {
    let ins = [tt(DType::F64, &[3])];
    let huge = graph(&ins, |b, p| {
        let big = b.broadcast_to(p[0], shape(&[HUGE, 3])).unwrap();
        vec![b.sum(big, None, false).unwrap()]
    });
    let small = graph(&ins, |b, p| vec![b.sum(p[0], None, false).unwrap()]);
    let region = Arc::new(
        Region::new(
            RegionKind::Cond {
                then_branch: Arc::new(huge),
                else_branch: Arc::new(small),
            },
            RegionForm::Cond,
            0,
        )
        .unwrap(),
    );
    let g = graph(region.operand_types(), |b, p| {
        b.push_region_calls(region.clone(), 0..1, p).unwrap()
    });
    Plan::compile(&g)
}

#[test]
fn after_a_refused_allocation_the_same_executable_computes_normally() {
    let exe = CpuBackend::default().compile(&branching()).unwrap();
    let pred = |v| HostTensor::new(shape(&[]), HostData::Bool(vec![v].into()));
    for _ in 0..3 {
        let err = exe.run(&[pred(true), x3()]).unwrap_err();
        assert!(matches!(err, BackendError::OutOfMemory { .. }), "{err}");
        let out = exe.run(&[pred(false), x3()]).unwrap();
        assert_eq!(out[0].data, HostData::F64(vec![6.0].into()));
    }
    // Concurrent runs share nothing that a failure could leave half-done.
    let exe = Arc::new(exe);
    let handles: Vec<_> = (0..4)
        .map(|k| {
            let exe = exe.clone();
            std::thread::spawn(move || exe.run(&[pred(k % 2 == 0), x3()]))
        })
        .collect();
    for (k, h) in handles.into_iter().enumerate() {
        let r = h.join().unwrap();
        assert_eq!(r.is_err(), k % 2 == 0, "{r:?}");
    }
}

/// A `fori` of `length` steps stacking a `[3]` slice per step: the stacked output, `[length,
/// 3]`, is what a reverse-mode tape of that loop holds.
fn stacking_scan(length: usize) -> Plan {
    stacking_scan_then(length, false)
}

/// [`stacking_scan`], whose stacked output is summed (so it is an intermediate buffer, from
/// the pool) when `summed`.
fn stacking_scan_then(length: usize, summed: bool) -> Plan {
    let ins = [tt(DType::F64, &[]), tt(DType::F64, &[3])];
    let body = graph(&ins, |_, p| vec![p[1], p[1]]);
    let region = Arc::new(
        Region::new(
            RegionKind::Scan(ScanBody {
                length,
                start: 0,
                reverse: false,
                n_carry: 1,
                n_const: 0,
                n_xs: 0,
                body: Arc::new(body),
            }),
            RegionForm::Scan,
            0,
        )
        .unwrap(),
    );
    let g = graph(region.operand_types(), |b, p| {
        let outs = b.push_region_calls(region.clone(), 0..2, p).unwrap();
        if summed {
            vec![outs[0], b.sum(outs[1], None, false).unwrap()]
        } else {
            outs
        }
    });
    Plan::compile(&g)
}

#[test]
fn a_stacked_output_the_machine_cannot_hold_is_an_error_before_the_loop_runs() {
    // 2^46 steps of 3 float64 values: 1.5 PiB.
    let exe = CpuBackend::default()
        .compile(&stacking_scan(1 << 46))
        .unwrap();
    let err = exe.run(&[x3()]).unwrap_err();
    match &err {
        BackendError::OutOfMemory { bytes, what } => {
            assert_eq!(*bytes, 3 << 49);
            assert!(what.contains("[70368744177664, 3] float64"), "{err}");
        }
        other => panic!("expected OutOfMemory, got {other}"),
    }
    // As an intermediate, from the pool.
    let exe = CpuBackend::default()
        .compile(&stacking_scan_then(1 << 46, true))
        .unwrap();
    assert_eq!(exe.run(&[x3()]).unwrap_err(), err);
    let short = CpuBackend::default().compile(&stacking_scan(4)).unwrap();
    let out = short.run(&[x3()]).unwrap();
    assert_eq!(out[0], x3());
    assert_eq!(out[1].shape, shape(&[4, 3]));
}

#[test]
fn an_eye_sized_constant_output_fails_cleanly() {
    // eye(2^24) as float64 is 2^51 bytes: a plan producing it fails with the shape named.
    let n = 1 << 24;
    let g = graph(&[tt(DType::F64, &[])], |b, p| {
        vec![b.broadcast_to(p[0], shape(&[n, n])).unwrap()]
    });
    let exe = CpuBackend::default().compile(&Plan::compile(&g)).unwrap();
    let x = HostTensor::new(shape(&[]), HostData::F64(vec![0.0].into()));
    let err = exe.run(&[x]).unwrap_err();
    assert_eq!(
        err,
        BackendError::OutOfMemory {
            bytes: 1 << 51,
            what: "a tensor of shape [16777216, 16777216] float64".into()
        }
    );
}
