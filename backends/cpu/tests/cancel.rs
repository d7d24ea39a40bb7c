//! Cancellation of running plans through a `CancelToken`: loops that never end on their own
//! (a `while` whose predicate stays true, a scan of 2^40 steps), in every form the executor
//! runs them (scalar, swapping, moving, large bodies), run on one thread and cancelled from
//! another. Each returns `BackendError::Cancelled` soon after the cancellation, and the same
//! executable runs normally afterwards. (The process-wide interrupt is tested in
//! `interrupt.rs`, alone in its process.)

mod common;

use common::graph;

use common::shape;
use quabla_backend::cancel::{self, CancelToken};
use quabla_backend::{Backend, BackendError, Executable, HostTensor};
use quabla_cpu::CpuBackend;
use quabla_ir::{
    Comparison, DType, HostData, Plan, Region, RegionForm, RegionKind, ScanBody, TensorType,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the run goes before it is cancelled.
const RUN_FOR: Duration = Duration::from_millis(50);

/// The longest a cancelled run may take to return: not a performance bound (a check runs
/// between every two steps and iterations, microseconds apart) but the point where a run that
/// ignores its token counts as hung, generous for a loaded machine.
const HUNG: Duration = Duration::from_secs(20);

fn tt(dtype: DType, dims: &[usize]) -> TensorType {
    TensorType::new(dtype, shape(dims))
}

/// A plan calling `region` on its inputs and returning every output.
fn calling(region: Region) -> Plan {
    let region = Arc::new(region);
    let g = graph(region.operand_types(), |b, p| {
        let n = region.output_types().len();
        b.push_region_calls(region.clone(), 0..n, p).unwrap()
    });
    Plan::compile(&g)
}

/// `while i < limit: i += 1; x = x * 1 + 0` over a carry of `dims`, with `limit` an input:
/// a limit of infinity never ends. With `dims = []` the bodies run in scalar form; a
/// reduction in the predicate keeps them out of it.
fn counting_while(dims: &[usize]) -> Plan {
    let ins = [
        tt(DType::F64, &[]),
        tt(DType::F64, dims),
        tt(DType::F64, &[]),
    ];
    let cond = graph(&ins, |b, p| {
        let (i, x, limit) = (p[0], p[1], p[2]);
        if dims.is_empty() {
            return vec![b.compare(Comparison::Less, i, limit).unwrap()];
        }
        // `i + 0 * sum(x) < limit`: the same predicate for finite x, through a reduction, so
        // the predicate is not in scalar form.
        let s = b.sum(x, None, false).unwrap();
        let zero = b.scalar(0.0, DType::F64, false);
        let none = b.mul(s, zero).unwrap();
        let t = b.add(i, none).unwrap();
        vec![b.compare(Comparison::Less, t, limit).unwrap()]
    });
    let body = graph(&ins, |b, p| {
        let (i, x) = (p[0], p[1]);
        let one = b.scalar(1.0, DType::F64, false);
        let half = b.scalar(0.5, DType::F64, false);
        let i1 = b.add(i, one).unwrap();
        // x * 0.5 + x * 0.5 == x: the carry keeps its value and the loop its shape.
        let h = b.mul(x, half).unwrap();
        let x1 = b.add(h, h).unwrap();
        vec![i1, x1]
    });
    calling(
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
    )
}

fn scalar(v: f64) -> HostTensor {
    HostTensor::new(shape(&[]), HostData::F64(vec![v].into()))
}

fn filled(dims: &[usize], v: f64) -> HostTensor {
    let s = shape(dims);
    let n = s.size();
    HostTensor::new(s, HostData::filled(DType::F64, v, n))
}

/// Runs `exe` on `inputs` under a fresh token that another thread cancels after
/// [`RUN_FOR`]; returns the result and how long after the cancellation the run returned.
fn run_cancelled(exe: &dyn Executable, inputs: &[HostTensor]) -> (BackendError, Duration) {
    let token = CancelToken::new();
    let remote = token.clone();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(RUN_FOR);
        remote.cancel();
        Instant::now()
    });
    let result = cancel::with_token(&token, || exe.run(inputs));
    let returned = Instant::now();
    let cancelled_at = canceller.join().unwrap();
    let err = result.expect_err("a loop that never ends returned a value");
    (err, returned.saturating_duration_since(cancelled_at))
}

fn check_cancelled(what: &str, exe: &dyn Executable, inputs: &[HostTensor]) {
    let (err, latency) = run_cancelled(exe, inputs);
    assert_eq!(err, BackendError::Cancelled, "{what}");
    assert!(
        latency < HUNG,
        "{what}: returned {latency:?} after cancel()"
    );
    println!("{what}: returned {latency:?} after cancel()");
}

#[test]
fn a_while_loop_that_never_ends_is_cancelled_in_every_form() {
    let backend = CpuBackend::default();
    // Scalar form; swapping form (small body, distinct results); moving form over a large
    // body (2^18 float64 values: 2 MiB, past the swapping limit).
    for dims in [vec![], vec![4], vec![1 << 18]] {
        let exe = backend.compile(&counting_while(&dims)).unwrap();
        let forever = [scalar(0.0), filled(&dims, 1.0), scalar(f64::INFINITY)];
        check_cancelled(&format!("while over {dims:?}"), exe.as_ref(), &forever);

        // The same executable runs to completion afterwards, under no token or a new one.
        let ten = [scalar(0.0), filled(&dims, 1.0), scalar(10.0)];
        let out = exe.run(&ten).unwrap();
        assert_eq!(out[0].data, HostData::F64(vec![10.0].into()), "{dims:?}");
        assert_eq!(out[1], filled(&dims, 1.0), "{dims:?}");
        let token = CancelToken::new();
        let again = cancel::with_token(&token, || exe.run(&ten)).unwrap();
        assert_eq!(again, out);
    }
}

#[test]
fn a_run_under_a_cancelled_token_stops_at_once_and_others_do_not() {
    let exe = CpuBackend::default()
        .compile(&counting_while(&[2]))
        .unwrap();
    let ten = [scalar(0.0), filled(&[2], 1.0), scalar(10.0)];
    let token = CancelToken::new();
    token.cancel();
    assert_eq!(
        cancel::with_token(&token, || exe.run(&ten)),
        Err(BackendError::Cancelled)
    );
    // Another thread running the same executable at the same time is not cancelled.
    let exe: Arc<dyn Executable> = exe;
    let other = {
        let exe = exe.clone();
        let ten = ten.clone();
        std::thread::spawn(move || exe.run(&ten))
    };
    assert!(other.join().unwrap().is_ok());
    assert!(exe.run(&ten).is_ok());
}

/// A scan of `length` steps whose body adds its index to a carry of `dims` and stacks nothing
/// (a `fori_loop`), or stacks the carry's first element when `stack`.
fn long_scan(dims: &[usize], length: usize, stack: bool) -> Plan {
    let ins = [tt(DType::F64, &[]), tt(DType::F64, dims)];
    let body = graph(&ins, |b, p| {
        let (i, c) = (p[0], p[1]);
        let zero = b.scalar(0.0, DType::F64, false);
        let step = b.mul(i, zero).unwrap();
        let c1 = b.add(c, step).unwrap();
        let mut outs = vec![c1];
        if stack {
            outs.push(b.mul(i, zero).unwrap());
        }
        outs
    });
    calling(
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
            RegionForm::Fori,
            0,
        )
        .unwrap(),
    )
}

#[test]
fn a_scan_of_two_to_the_forty_steps_is_cancelled() {
    let backend = CpuBackend::default();
    for dims in [vec![], vec![4], vec![1 << 18]] {
        let exe = backend.compile(&long_scan(&dims, 1 << 40, false)).unwrap();
        check_cancelled(
            &format!("fori over {dims:?}"),
            exe.as_ref(),
            &[filled(&dims, 2.0)],
        );
        let short = backend.compile(&long_scan(&dims, 3, false)).unwrap();
        assert_eq!(
            short.run(&[filled(&dims, 2.0)]).unwrap(),
            vec![filled(&dims, 2.0)]
        );
    }
    // With a stacked output of 2^24 float64 values (128 MiB, which fits), cancelled while
    // the loop fills it.
    let dims = [1 << 18];
    let exe = backend.compile(&long_scan(&dims, 1 << 24, true)).unwrap();
    check_cancelled("stacking fori", exe.as_ref(), &[filled(&dims, 1.0)]);
}

#[test]
fn nested_loops_are_cancelled_from_the_inner_loop() {
    // An outer fori of 2^40 steps whose body is an inner while that never ends.
    let inner = counting_while(&[]);
    let inner_region = inner
        .graph()
        .nodes()
        .iter()
        .find_map(|n| match &n.op {
            quabla_ir::Op::Region(call) => Some(call.region.clone()),
            _ => None,
        })
        .expect("the plan calls its while region");
    let ins = [tt(DType::F64, &[]), tt(DType::F64, &[])];
    let body = graph(&ins, |b, p| {
        let zero = b.scalar(0.0, DType::F64, false);
        let inf = b.scalar(f64::INFINITY, DType::F64, false);
        let outs = b
            .push_region_calls(inner_region.clone(), 0..2, &[zero, p[1], inf])
            .unwrap();
        vec![outs[1]]
    });
    let plan = calling(
        Region::new(
            RegionKind::Scan(ScanBody {
                length: 1 << 40,
                start: 0,
                reverse: false,
                n_carry: 1,
                n_const: 0,
                n_xs: 0,
                body: Arc::new(body),
            }),
            RegionForm::Fori,
            0,
        )
        .unwrap(),
    );
    let exe = CpuBackend::default().compile(&plan).unwrap();
    check_cancelled("nested while in fori", exe.as_ref(), &[scalar(1.0)]);
}
