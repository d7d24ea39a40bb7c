//! Control flow and the coverage plans on the host model of the device (see `emulated.rs`),
//! against the CPU reference: every coverage-table plan that lowers, on deterministic inputs,
//! and regions of every kind — host-driven and fused, nested, with consts, stacked inputs and
//! outputs, reverse order, bounded trips, outputs that pass an input through or repeat a
//! value — at both program precisions.

mod common;

use common::host::{self, HostKernels};
use common::plans::{body, check_all, inputs_for, region_plan, ty};
use quabla_backend::{Backend, Precision};
use quabla_conformance::{compare_outputs, reference_backend, tensor, Agreement};
use quabla_cuda::coverage;
use quabla_cuda::lower::lower;
use quabla_ir::{
    Comparison, DType, GraphBuilder, Op, Plan, Region, RegionForm, RegionKind, ScanBody, UnaryOp,
};
use std::sync::Arc;

#[test]
fn every_coverage_plan_agrees_with_the_cpu_on_the_host_model() {
    let cases: Vec<_> = coverage::plans()
        .into_iter()
        .filter(|(_, plan, precision)| lower(plan, *precision).is_ok())
        .enumerate()
        .map(|(i, (label, plan, precision))| {
            let inputs = inputs_for(&plan, 100 + i as u64);
            (label, plan, precision, inputs)
        })
        .collect();
    assert!(cases.len() > 250, "{} coverage plans", cases.len());
    let failures = check_all(cases);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn regions(d: DType) -> Vec<(String, Plan)> {
    let scalar = ty(d, &[]);
    let vec3 = ty(d, &[3]);
    let mat = ty(d, &[2, 3]);
    let mut out = Vec::new();
    // cond: one branch passes its input through, the other computes; an output repeated.
    for pred_first in [true, false] {
        let types = [vec3.clone(), mat.clone()];
        let then_branch = body(&types, |b, v| {
            vec![v[0], b.unary(UnaryOp::Exp, v[1]).unwrap()]
        });
        let else_branch = body(&types, |b, v| {
            let s = b.sum(v[1], Some(&[0]), false).unwrap();
            vec![b.mul(s, v[0]).unwrap(), v[1]]
        });
        let plan = region_plan(
            RegionKind::Cond {
                then_branch,
                else_branch,
            },
            RegionForm::Cond,
            true,
        );
        out.push((
            format!("cond, {} branch", if pred_first { "then" } else { "else" }),
            plan,
        ));
    }
    // fori, host-driven: carries of two shapes, a const, a reduction and a matmul in the body,
    // a nested cond.
    let nested_then = body(std::slice::from_ref(&vec3), |b, v| {
        vec![b.unary(UnaryOp::Sin, v[0]).unwrap()]
    });
    let nested_else = body(std::slice::from_ref(&vec3), |b, v| {
        vec![b.unary(UnaryOp::Cos, v[0]).unwrap()]
    });
    let nested = Arc::new(
        Region::new(
            RegionKind::Cond {
                then_branch: nested_then,
                else_branch: nested_else,
            },
            RegionForm::Cond,
            0,
        )
        .unwrap(),
    );
    let fori_body = body(
        &[scalar.clone(), vec3.clone(), mat.clone(), ty(d, &[3, 3])],
        |b, v| {
            let prod = b.matmul(v[2], v[3]).unwrap();
            let scaled = b.mul(prod, v[0]).unwrap();
            let small = b.unary(UnaryOp::Tanh, scaled).unwrap();
            let total = b.sum(v[1], None, false).unwrap();
            let zero = b.scalar(0.0, d, false);
            let pred = b.compare(Comparison::Greater, total, zero).unwrap();
            let branch = b
                .push_region_calls(nested.clone(), [0], &[pred, v[1]])
                .unwrap()[0];
            let row = b.sum(small, Some(&[0]), false).unwrap();
            vec![b.add(branch, row).unwrap(), small]
        },
    );
    out.push((
        "fori with a nested cond, matmul and reductions".into(),
        region_plan(
            RegionKind::Scan(ScanBody {
                length: 5,
                start: 2,
                reverse: false,
                n_carry: 2,
                n_const: 1,
                n_xs: 0,
                body: fori_body,
            }),
            RegionForm::Fori,
            false,
        ),
    ));
    // scan, reverse, with a const, two stacked inputs and two stacked outputs.
    let scan_body = body(
        &[
            scalar.clone(),
            vec3.clone(),
            vec3.clone(),
            vec3.clone(),
            mat.clone(),
        ],
        |b, v| {
            let s = b.mul(v[3], v[2]).unwrap();
            let next = b.add(v[1], s).unwrap();
            let idx = b.mul(next, v[0]).unwrap();
            let y2 = b.sum(v[4], Some(&[1]), false).unwrap();
            vec![next, idx, y2]
        },
    );
    out.push((
        "scan, reverse, consts and stacked values".into(),
        region_plan(
            RegionKind::Scan(ScanBody {
                length: 4,
                start: 1,
                reverse: true,
                n_carry: 1,
                n_const: 1,
                n_xs: 2,
                body: scan_body,
            }),
            RegionForm::Scan,
            false,
        ),
    ));
    // while over tensors (host-driven), unbounded and bounded.
    for max_trips in [None, Some(3)] {
        let types = [vec3.clone(), scalar.clone()];
        let cond = body(&types, |b, v| {
            let s = b.sum(v[0], None, false).unwrap();
            let limit = b.scalar(40.0, d, false);
            vec![b.compare(Comparison::Less, s, limit).unwrap()]
        });
        let step = body(&types, |b, v| {
            let two = b.scalar(2.0, d, false);
            let sq = b.mul(v[0], v[0]).unwrap();
            let t = b.add(sq, v[1]).unwrap();
            vec![b.add(t, two).unwrap()]
        });
        out.push((
            format!("while over tensors, max_trips {max_trips:?}"),
            region_plan(
                RegionKind::While {
                    n_carry: 1,
                    cond,
                    body: step,
                    max_trips,
                },
                RegionForm::While,
                false,
            ),
        ));
    }
    // fori fused into one kernel: the index, a const broadcast, reverse order.
    let fused = body(
        &[scalar.clone(), mat.clone(), mat.clone(), vec3.clone()],
        |b, v| {
            // Contracting in the carry (so float32 rounding of float64 inputs does not grow).
            let half = b.scalar(0.5, d, false);
            let t = b.mul(v[1], half).unwrap();
            let k = b.mul(v[3], v[0]).unwrap();
            let u = b.add(t, k).unwrap();
            let s = b.unary(UnaryOp::Sin, u).unwrap();
            let w = b.mul(v[2], half).unwrap();
            vec![s, w]
        },
    );
    out.push((
        "fori fused, reverse, broadcast const".into(),
        region_plan(
            RegionKind::Scan(ScanBody {
                length: 6,
                start: 3,
                reverse: true,
                n_carry: 2,
                n_const: 1,
                n_xs: 0,
                body: fused,
            }),
            RegionForm::Fori,
            false,
        ),
    ));
    // while over single values, fused, bounded.
    let types = [scalar.clone(), scalar.clone(), scalar.clone()];
    let cond = body(&types, |b, v| {
        vec![b.compare(Comparison::Less, v[0], v[2]).unwrap()]
    });
    let step = body(&types, |b, v| {
        let one = b.scalar(1.0, d, false);
        let n = b.add(v[0], one).unwrap();
        let p = b.mul(v[1], v[0]).unwrap();
        vec![n, b.add(p, one).unwrap()]
    });
    out.push((
        "while over single values, fused".into(),
        region_plan(
            RegionKind::While {
                n_carry: 2,
                cond,
                body: step,
                max_trips: Some(50),
            },
            RegionForm::While,
            false,
        ),
    ));
    out
}

#[test]
fn regions_agree_with_the_cpu_on_the_host_model_at_both_precisions() {
    let mut cases = Vec::new();
    for (d, precision) in [
        (DType::F32, Precision::Reference),
        (DType::F64, Precision::Reference),
        (DType::F64, Precision::Float64),
    ] {
        for (i, (label, plan)) in regions(d).into_iter().enumerate() {
            let mut inputs = inputs_for(&plan, 7 + i as u64);
            if label.starts_with("cond") {
                let pred = if label.contains("then") { 1.0 } else { 0.0 };
                inputs[0] = tensor(DType::Bool, &[], &[pred]);
            }
            if label.contains("single values") {
                inputs[0] = tensor(d, &[], &[0.0]);
                inputs[2] = tensor(d, &[], &[7.0]);
            }
            cases.push((format!("{label} {}", d.name()), plan, precision, inputs));
        }
    }
    // The fused forms are the ones asked for.
    for (label, plan, precision, _) in &cases {
        let program = lower(plan, *precision).unwrap();
        let fused = program
            .all_steps()
            .iter()
            .any(|s| matches!(s, quabla_cuda::program::Step::Region(r) if matches!(r.exec, quabla_cuda::program::RegionExec::Fused(_))));
        assert_eq!(fused, label.contains("fused"), "{label}");
    }
    let failures = check_all(cases);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_float32_value_in_a_float64_program_is_refused_naming_float32() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", ty(DType::F32, &[3]));
    let y = b.unary(UnaryOp::Exp, x).unwrap();
    let plan = Plan::from_graph_unoptimized(b.finish(vec![y]).unwrap());
    let err = lower(&plan, Precision::Float64).unwrap_err();
    match err {
        quabla_backend::BackendError::Unsupported { op, device, reason } => {
            assert_eq!((op.as_str(), device.as_str()), ("float32", "cuda"));
            assert!(reason.contains("cannot contain float32 values"), "{reason}");
            assert!(reason.contains("astype(quabla.float64)"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // A float32 value inside a body is found too.
    let inner = body(&[ty(DType::F64, &[3])], |b, v| {
        let c = b
            .push(
                Op::Cast {
                    to: DType::F32,
                    weak: false,
                },
                &[v[0]],
            )
            .unwrap();
        vec![b
            .push(
                Op::Cast {
                    to: DType::F64,
                    weak: false,
                },
                &[c],
            )
            .unwrap()]
    });
    let plan = region_plan(
        RegionKind::Cond {
            then_branch: inner.clone(),
            else_branch: inner,
        },
        RegionForm::Cond,
        false,
    );
    assert!(lower(&plan, Precision::Float64).is_err());
    assert!(lower(&plan, Precision::Reference).is_ok());
}

/// Loops whose bodies are not elementwise and run enough trips to be replayed as recorded
/// graphs: a scan (forward and reverse) with a matmul, a reduction, a const, two scanned
/// inputs and two stacked outputs (one of them a carry's old value), and a while loop over a
/// matmul with a counter.
fn replayed_loops(d: DType, length: usize) -> Vec<(String, Plan)> {
    let (scalar, row, w) = (ty(d, &[]), ty(d, &[1, 3]), ty(d, &[3, 3]));
    let mut out = Vec::new();
    for reverse in [false, true] {
        let scan_body = body(
            &[
                scalar.clone(),
                row.clone(),
                scalar.clone(),
                w.clone(),
                row.clone(),
                scalar.clone(),
            ],
            |b, v| {
                // h' = tanh(h @ W + x) * 0.9 + i * 0.01; s' = s + sum(h') * xs2
                let hw = b.matmul(v[1], v[3]).unwrap();
                let pre = b.add(hw, v[4]).unwrap();
                let t = b.unary(UnaryOp::Tanh, pre).unwrap();
                let decay = b.scalar(0.9, d, false);
                let hd = b.mul(t, decay).unwrap();
                let step = b.scalar(0.01, d, false);
                let di = b.mul(v[0], step).unwrap();
                let h = b.add(hd, di).unwrap();
                let total = b.sum(h, None, false).unwrap();
                let weighted = b.mul(total, v[5]).unwrap();
                let s = b.add(v[2], weighted).unwrap();
                vec![h, s, v[1], weighted]
            },
        );
        out.push((
            format!("replayed scan, reverse {reverse}"),
            region_plan(
                RegionKind::Scan(ScanBody {
                    length,
                    start: 1,
                    reverse,
                    n_carry: 2,
                    n_const: 1,
                    n_xs: 2,
                    body: scan_body,
                }),
                RegionForm::Scan,
                false,
            ),
        ));
    }
    let types = [row.clone(), scalar.clone(), w.clone(), scalar.clone()];
    let cond = body(&types, |b, v| {
        vec![b.compare(Comparison::Less, v[1], v[3]).unwrap()]
    });
    let step = body(&types, |b, v| {
        let hw = b.matmul(v[0], v[2]).unwrap();
        let h = b.unary(UnaryOp::Tanh, hw).unwrap();
        let one = b.scalar(1.0, d, false);
        vec![h, b.add(v[1], one).unwrap()]
    });
    out.push((
        "replayed while".into(),
        region_plan(
            RegionKind::While {
                n_carry: 2,
                cond,
                body: step,
                max_trips: None,
            },
            RegionForm::While,
            false,
        ),
    ));
    out
}

#[test]
fn loop_bodies_replayed_as_recorded_graphs_agree_with_the_cpu() {
    let length = 13;
    let mut cases = Vec::new();
    for (d, precision) in [
        (DType::F32, Precision::Reference),
        (DType::F64, Precision::Float64),
    ] {
        for (i, (label, plan)) in replayed_loops(d, length).into_iter().enumerate() {
            let mut inputs = inputs_for(&plan, 31 + i as u64);
            if label.contains("while") {
                // From 0 to `length` in steps of one.
                inputs[1] = tensor(d, &[], &[0.0]);
                inputs[3] = tensor(d, &[], &[length as f64]);
            }
            let program = lower(&plan, precision).unwrap();
            let region = program
                .all_steps()
                .into_iter()
                .find_map(|s| match s {
                    quabla_cuda::program::Step::Region(r) => Some(r.clone()),
                    _ => None,
                })
                .expect("a region");
            assert!(region.replays_body(), "{label}: {:?}", region.exec);
            cases.push((
                format!("{label} {}", d.name()),
                plan,
                precision,
                inputs,
                program,
            ));
        }
    }
    let kernels = HostKernels::compile(cases.iter().flat_map(|c| &c.4.kernels));
    let reference = reference_backend();
    for (label, plan, precision, inputs, program) in &cases {
        let expected = reference.compile(plan).and_then(|e| e.run(inputs)).unwrap();
        let (got, (recorded, replays)) =
            host::run_counting_graphs(&kernels, program, inputs).unwrap();
        // Two trips as launches, two recorded (and run by replaying them), the rest replayed.
        assert_eq!((recorded, replays), (2, length - 2), "{label}");
        let agreement = Agreement::Tolerance {
            float64: *precision == Precision::Float64,
        };
        compare_outputs(&expected, &got, agreement).unwrap_or_else(|e| panic!("{label}: {e}"));
    }
    // Too short a scan keeps its launches.
    let (label, plan) = replayed_loops(DType::F64, 5).remove(0);
    let program = lower(&plan, Precision::Float64).unwrap();
    assert!(
        !program
            .all_steps()
            .iter()
            .any(|s| matches!(s, quabla_cuda::program::Step::Region(r) if r.replays_body())),
        "{label}"
    );
}
