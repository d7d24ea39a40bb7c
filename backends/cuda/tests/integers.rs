//! Integers in control flow on the host model of the device (see `emulated.rs`), against the
//! CPU reference (integers exactly): a counted loop whose body reads `xs[i]` with its index
//! cast to int64 (the facade's loop index) and counts in an int64 carry; a scan over int64
//! keys mixed by the SplitMix64 finalizer (wrapping products, logical shifts, constants past
//! 2^53), with stacked integer and float outputs; the same mixing fused into one kernel;
//! `while_loop`s with integer counters, fused and host-driven; `cond` on an integer
//! comparison with integer branches; and loop indices past 2^24 in a float32 program. Loops
//! long enough are replayed as recorded graphs, with their integer carries.

mod common;

use common::plans::{body, check_all, inputs_for, region_plan, ty};
use quabla_backend::{HostTensor, Precision};
use quabla_conformance::tensor;
use quabla_cuda::lower::lower;
use quabla_cuda::program::{RegionExec, Step};
use quabla_ir::{
    BinaryOp, Comparison, DType, GraphBuilder, HostData, NodeId, Op, Plan, RegionForm, RegionKind,
    ScanBody, Shape,
};

/// The SplitMix64 constants (`quabla_random`'s generator), as int64 bit patterns.
const GAMMA: i64 = 0x9E37_79B9_7F4A_7C15_u64 as i64;
const MIX1: i64 = 0xBF58_476D_1CE4_E5B9_u64 as i64;
const MIX2: i64 = 0x94D0_49BB_1331_11EB_u64 as i64;

fn int(b: &mut GraphBuilder, dtype: DType, v: i64) -> NodeId {
    b.constant(HostData::from_i64(dtype, [v]), Shape::scalar(), false)
        .unwrap()
}

fn ints(dtype: DType, dims: &[usize], values: impl IntoIterator<Item = i64>) -> HostTensor {
    HostTensor::new(
        Shape::new(dims.to_vec()).unwrap(),
        HostData::from_i64(dtype, values),
    )
}

fn bin(b: &mut GraphBuilder, op: BinaryOp, x: NodeId, y: NodeId) -> NodeId {
    b.binary(op, x, y).unwrap()
}

fn cast(b: &mut GraphBuilder, x: NodeId, to: DType) -> NodeId {
    b.push(Op::Cast { to, weak: false }, &[x]).unwrap()
}

/// The SplitMix64 finalizer on int64 words.
fn mix64(b: &mut GraphBuilder, z: NodeId) -> NodeId {
    let mut z = z;
    for (shift, mult) in [(30, Some(MIX1)), (27, Some(MIX2)), (31, None)] {
        let s = int(b, DType::I64, shift);
        let shifted = bin(b, BinaryOp::ShiftRightLogical, z, s);
        z = bin(b, BinaryOp::BitXor, z, shifted);
        if let Some(m) = mult {
            let m = int(b, DType::I64, m);
            z = bin(b, BinaryOp::Mul, z, m);
        }
    }
    z
}

/// The region of the plan's first region step, lowered at `precision`.
fn region_exec(plan: &Plan, precision: Precision) -> (RegionExec, bool) {
    let program = lower(plan, precision).unwrap();
    program
        .all_steps()
        .into_iter()
        .find_map(|s| match s {
            Step::Region(r) => Some((r.exec.clone(), r.replays_body())),
            _ => None,
        })
        .expect("a region")
}

/// The float dtypes and precisions every loop runs at: a float32 program, a float64 one
/// computed in float32, and a float64 program.
const PROGRAMS: [(DType, Precision); 3] = [
    (DType::F32, Precision::Reference),
    (DType::F64, Precision::Reference),
    (DType::F64, Precision::Float64),
];

#[test]
fn a_counted_loop_reads_xs_at_its_integer_index() {
    let mut cases = Vec::new();
    for (d, precision) in PROGRAMS {
        for (length, start, reverse) in [(10, 0, false), (10, 3, true), (5, 1, false)] {
            // Body: i = int64(index); acc += xs[i] + xs[clamp(i - 2)]; count += i * i.
            let rows = start + length;
            let types = [
                ty(d, &[]),
                ty(d, &[3]),
                ty(DType::I64, &[]),
                ty(d, &[rows, 3]),
            ];
            let fori = body(&types, |b, v| {
                let i = cast(b, v[0], DType::I64);
                let at = b.reshape(i, &[1]).unwrap();
                let row = b.index_gather(v[3], at, 0, 0).unwrap();
                let row = b.reshape(row, &[3]).unwrap();
                // A dynamic slice's clamped start: max(i - 2, 0).
                let two = int(b, DType::I64, 2);
                let zero = int(b, DType::I64, 0);
                let back = bin(b, BinaryOp::Sub, i, two);
                let negative = b.compare(Comparison::Less, back, zero).unwrap();
                let clamped = b.select(negative, zero, back).unwrap();
                let at = b.reshape(clamped, &[1]).unwrap();
                let earlier = b.index_gather(v[3], at, 0, 0).unwrap();
                let earlier = b.reshape(earlier, &[3]).unwrap();
                let step = b.add(row, earlier).unwrap();
                let acc = b.add(v[1], step).unwrap();
                let sq = bin(b, BinaryOp::Mul, i, i);
                let count = bin(b, BinaryOp::Add, v[2], sq);
                vec![acc, count]
            });
            let plan = region_plan(
                RegionKind::Scan(ScanBody {
                    length,
                    start,
                    reverse,
                    n_carry: 2,
                    n_const: 1,
                    n_xs: 0,
                    body: fori,
                }),
                RegionForm::Fori,
                false,
            );
            let (_, replayed) = region_exec(&plan, precision);
            assert_eq!(replayed, length >= 8);
            let inputs = inputs_for(&plan, length as u64);
            cases.push((
                format!("fori xs[i], {length} trips from {start}, reverse {reverse}, {d}"),
                plan,
                precision,
                inputs,
            ));
        }
    }
    let failures = check_all(cases);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn keys_mixed_in_loops_give_the_cpu_bits() {
    let mut cases = Vec::new();
    for (d, precision) in PROGRAMS {
        // A scan whose carry is a key: key' = mix64(key + GAMMA); stacked: the key, its low
        // 32 bits as int32, and its top 53 bits as a float in [0, 1) (numerics.md §9).
        for (length, reverse) in [(12, false), (12, true), (3, false)] {
            let scan = body(&[ty(d, &[]), ty(DType::I64, &[2])], |b, v| {
                let gamma = int(b, DType::I64, GAMMA);
                let w = bin(b, BinaryOp::Add, v[1], gamma);
                let key = mix64(b, w);
                let low = cast(b, key, DType::I32);
                let eleven = int(b, DType::I64, 11);
                let top = bin(b, BinaryOp::ShiftRightLogical, key, eleven);
                let top = cast(b, top, d);
                let scale = b.scalar(2f64.powi(-53), d, false);
                let unit = b.mul(top, scale).unwrap();
                vec![key, key, low, unit]
            });
            let plan = region_plan(
                RegionKind::Scan(ScanBody {
                    length,
                    start: 0,
                    reverse,
                    n_carry: 1,
                    n_const: 0,
                    n_xs: 0,
                    body: scan,
                }),
                RegionForm::Scan,
                false,
            );
            let inputs = vec![ints(DType::I64, &[2], [0, -1])];
            cases.push((
                format!("key scan, {length} trips, reverse {reverse}, {d}"),
                plan,
                precision,
                inputs,
            ));
        }
        // The same mixing fused into one kernel: int64 and int32 carries of one shape, a
        // float carry, and the index added in.
        let fused = body(
            &[
                ty(d, &[]),
                ty(DType::I64, &[4]),
                ty(DType::I32, &[4]),
                ty(d, &[4]),
            ],
            |b, v| {
                let i = cast(b, v[0], DType::I64);
                let w = bin(b, BinaryOp::Add, v[1], i);
                let key = mix64(b, w);
                // An int32 linear congruential step that wraps, xor-shifted.
                let a = int(b, DType::I32, 1_664_525);
                let c = int(b, DType::I32, 1_013_904_223);
                let m = bin(b, BinaryOp::Mul, v[2], a);
                let m = bin(b, BinaryOp::Add, m, c);
                let thirteen = int(b, DType::I32, 13);
                let s = bin(b, BinaryOp::ShiftLeft, m, thirteen);
                let lcg = bin(b, BinaryOp::BitXor, m, s);
                let f = cast(b, lcg, d);
                let scale = b.scalar(1e-9, d, false);
                let f = b.mul(f, scale).unwrap();
                let x = b.add(v[3], f).unwrap();
                vec![key, lcg, x]
            },
        );
        let plan = region_plan(
            RegionKind::Scan(ScanBody {
                length: 9,
                start: 2,
                reverse: false,
                n_carry: 3,
                n_const: 0,
                n_xs: 0,
                body: fused,
            }),
            RegionForm::Fori,
            false,
        );
        assert!(matches!(
            region_exec(&plan, precision).0,
            RegionExec::Fused(_)
        ));
        let inputs = vec![
            ints(DType::I64, &[4], [0, -1, i64::MAX, 12345]),
            ints(DType::I32, &[4], [0, -1, i32::MIN.into(), 7]),
            tensor(d, &[4], &[0.0, 1.0, -1.0, 0.5]),
        ];
        cases.push((format!("fused key fori {d}"), plan, precision, inputs));
    }
    let failures = check_all(cases);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn while_loops_count_in_integers() {
    let mut cases = Vec::new();
    for (d, precision) in PROGRAMS {
        // Fused: n (int32) counts to a limit; acc (int64) = acc * 3 + n wraps past 2^63; x
        // (float) follows.
        let types = [
            ty(DType::I32, &[]),
            ty(DType::I64, &[]),
            ty(d, &[]),
            ty(DType::I32, &[]),
        ];
        let cond = body(&types, |b, v| {
            vec![b.compare(Comparison::Less, v[0], v[3]).unwrap()]
        });
        let step = body(&types, |b, v| {
            let one = int(b, DType::I32, 1);
            let three = int(b, DType::I64, 3);
            let n = bin(b, BinaryOp::Add, v[0], one);
            let wide = cast(b, v[0], DType::I64);
            let acc = bin(b, BinaryOp::Mul, v[1], three);
            let acc = bin(b, BinaryOp::Add, acc, wide);
            let half = b.scalar(0.5, d, false);
            let x = b.add(v[2], half).unwrap();
            vec![n, acc, x]
        });
        let plan = region_plan(
            RegionKind::While {
                n_carry: 3,
                cond,
                body: step,
                max_trips: None,
            },
            RegionForm::While,
            false,
        );
        assert!(matches!(
            region_exec(&plan, precision).0,
            RegionExec::Fused(_)
        ));
        let inputs = vec![
            ints(DType::I32, &[], [0]),
            ints(DType::I64, &[], [1]),
            tensor(d, &[], &[0.25]),
            ints(DType::I32, &[], [50]),
        ];
        cases.push((format!("fused counter while {d}"), plan, precision, inputs));
        // Host-driven: int64 tensor carries grow until their sum passes a bound; an int32
        // count of trips.
        let types = [ty(DType::I64, &[3]), ty(DType::I32, &[])];
        let cond = body(&types, |b, v| {
            let s = b.sum(v[0], None, false).unwrap();
            let bound = int(b, DType::I64, 1 << 50);
            vec![b.compare(Comparison::Less, s, bound).unwrap()]
        });
        let step = body(&types, |b, v| {
            let seven = int(b, DType::I64, 7);
            let one64 = int(b, DType::I64, 1);
            let one = int(b, DType::I32, 1);
            let x = bin(b, BinaryOp::Mul, v[0], seven);
            let x = bin(b, BinaryOp::Add, x, one64);
            vec![x, bin(b, BinaryOp::Add, v[1], one)]
        });
        let plan = region_plan(
            RegionKind::While {
                n_carry: 2,
                cond,
                body: step,
                max_trips: None,
            },
            RegionForm::While,
            false,
        );
        let (exec, replayed) = region_exec(&plan, precision);
        assert!(matches!(exec, RegionExec::While { .. }) && replayed);
        let inputs = vec![
            ints(DType::I64, &[3], [1, 2, 3]),
            ints(DType::I32, &[], [0]),
        ];
        cases.push((format!("tensor counter while {d}"), plan, precision, inputs));
    }
    let failures = check_all(cases);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn cond_on_an_integer_comparison_with_integer_branches() {
    let mut cases = Vec::new();
    for (d, precision) in PROGRAMS {
        let types = [ty(DType::I64, &[4]), ty(DType::I32, &[4]), ty(d, &[4])];
        let then_branch = body(&types, |b, v| {
            let seven = int(b, DType::I64, -7);
            let q = bin(b, BinaryOp::FloorDiv, v[0], seven);
            let r = bin(b, BinaryOp::Rem, v[1], v[1]);
            vec![q, r, v[2]]
        });
        let else_branch = body(&types, |b, v| {
            let k = int(b, DType::I32, 3);
            let s = bin(b, BinaryOp::ShiftRightArithmetic, v[1], k);
            let f = cast(b, v[0], d);
            let x = b.add(v[2], f).unwrap();
            vec![v[0], s, x]
        });
        for (a, c) in [(5, 3), (3, 5)] {
            let mut g = GraphBuilder::new();
            let x = g.input("a", ty(DType::I64, &[]));
            let y = g.input("c", ty(DType::I64, &[]));
            let ops: Vec<NodeId> = types
                .iter()
                .enumerate()
                .map(|(k, t)| g.input(format!("v{k}"), t.clone()))
                .collect();
            let pred = g.compare(Comparison::Greater, x, y).unwrap();
            let region = std::sync::Arc::new(
                quabla_ir::Region::new(
                    RegionKind::Cond {
                        then_branch: then_branch.clone(),
                        else_branch: else_branch.clone(),
                    },
                    RegionForm::Cond,
                    0,
                )
                .unwrap(),
            );
            let mut operands = vec![pred];
            operands.extend(&ops);
            let outs = g.push_region_calls(region, 0..3, &operands).unwrap();
            let plan = Plan::from_graph_unoptimized(g.finish(outs).unwrap());
            let inputs = vec![
                ints(DType::I64, &[], [a]),
                ints(DType::I64, &[], [c]),
                ints(DType::I64, &[4], [i64::MIN, -8, 8, (1 << 60) + 1]),
                ints(DType::I32, &[4], [i32::MIN.into(), -1, 0, 9]),
                tensor(d, &[4], &[0.5, -0.5, 2.0, 1e-3]),
            ];
            cases.push((format!("cond {a} > {c} {d}"), plan, precision, inputs));
        }
    }
    let failures = check_all(cases);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn loop_indices_past_2_24_stay_exact_in_a_float32_program() {
    // A float32 program whose loop index is float64 (as the facade makes it past 2^24): the
    // index is held in float64, so its int64 cast is exact, fused or not.
    let start = (1 << 24) + 1;
    let mut cases = Vec::new();
    for fused in [true, false] {
        let types = [ty(DType::F64, &[]), ty(DType::I64, &[2])];
        let scan = body(&types, |b, v| {
            let i = cast(b, v[0], DType::I64);
            let acc = bin(b, BinaryOp::Add, v[1], i);
            if fused {
                vec![acc]
            } else {
                vec![acc, i]
            }
        });
        let plan = region_plan(
            RegionKind::Scan(ScanBody {
                length: 9,
                start,
                reverse: false,
                n_carry: 1,
                n_const: 0,
                n_xs: 0,
                body: scan,
            }),
            RegionForm::Scan,
            false,
        );
        let exec = region_exec(&plan, Precision::Reference).0;
        assert_eq!(matches!(exec, RegionExec::Fused(_)), fused);
        let inputs = vec![ints(DType::I64, &[2], [0, 1 << 40])];
        cases.push((
            format!("index from 2^24 + 1, fused {fused}"),
            plan,
            Precision::Reference,
            inputs,
        ));
    }
    let failures = check_all(cases);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
