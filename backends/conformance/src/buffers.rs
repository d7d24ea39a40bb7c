//! The buffer cases of the conformance suite: what every backend's memory interface must do,
//! checked through the [`Backend`] trait alone (so a plugin is checked across its ABI).
//!
//! Each case is a function of the backend under test that returns `Ok` or why it failed; a
//! backend that rejects the case's plan at compile time (UN2) is reported as unsupported. The
//! cases: host data survives a round trip bit for bit; `allocate` gives zeros and refuses an
//! impossible size with `OutOfMemory` (the backend staying usable); a run on resident buffers
//! gives the reference values and leaves its inputs as they were; a donated input is ended, a
//! donated input that another handle still holds is never clobbered, and a loop of donating
//! runs gives the reference iterates; a freed buffer used again is a typed error; a run that
//! fails gives back what was donated to it; transfers are counted.

use crate::{compare_outputs, reference_backend, tensor, Agreement, Outcome};
use quabla_backend::buffer::run_buffers;
use quabla_backend::{Backend, BackendError, Buffer, BufferArg, HostTensor};
use quabla_ir::{BinaryOp, DType, GraphBuilder, HostData, Plan, Shape, TensorType, UnaryOp};

/// One buffer case: a name and its check.
#[derive(Clone, Copy)]
pub struct BufferCase {
    pub name: &'static str,
    check: fn(&dyn Backend, Agreement) -> Result<(), Why>,
}

impl std::fmt::Debug for BufferCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferCase")
            .field("name", &self.name)
            .finish()
    }
}

/// Why a case did not pass.
pub(crate) enum Why {
    Fail(String),
    Unsupported(String),
}

impl From<String> for Why {
    fn from(s: String) -> Why {
        Why::Fail(s)
    }
}

/// A backend error where none was expected: UN2 makes the case unsupported.
fn unexpected(what: &str, e: BackendError) -> Why {
    match e {
        BackendError::Unsupported { op, device, reason } => {
            Why::Unsupported(format!("{device} cannot lower {op}: {reason}"))
        }
        other => Why::Fail(format!("{what}: {other}")),
    }
}

/// Every buffer case, in the order the matrix prints them.
pub const BUFFER_CASES: &[BufferCase] = &[
    BufferCase {
        name: "buffer_round_trip",
        check: round_trip,
    },
    BufferCase {
        name: "buffer_allocate",
        check: allocate,
    },
    BufferCase {
        name: "buffer_resident_run",
        check: resident_run,
    },
    BufferCase {
        name: "buffer_donation",
        check: donation,
    },
    BufferCase {
        name: "buffer_freed_use",
        check: freed_use,
    },
    BufferCase {
        name: "buffer_failed_run_keeps_donated",
        check: failed_run_keeps_donated,
    },
    BufferCase {
        name: "buffer_transfers_counted",
        check: transfers_counted,
    },
];

/// The buffer case named `name`.
pub fn buffer_case(name: &str) -> Option<&'static BufferCase> {
    BUFFER_CASES.iter().find(|c| c.name == name)
}

/// Runs one buffer case on a backend.
pub fn run_buffer_case(case: &BufferCase, backend: &dyn Backend, agreement: Agreement) -> Outcome {
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        (case.check)(backend, agreement)
    }));
    match checked {
        Ok(Ok(())) => Outcome::Pass,
        Ok(Err(Why::Fail(why))) => Outcome::Fail(why),
        Ok(Err(Why::Unsupported(why))) => Outcome::Unsupported(why),
        Err(payload) => Outcome::Fail(format!(
            "the backend panicked: {}",
            quabla_backend::abi::panic_message(payload.as_ref())
        )),
    }
}

fn upload(backend: &dyn Backend, t: &HostTensor) -> Result<Buffer, Why> {
    let memory = backend.upload(t).map_err(|e| unexpected("upload", e))?;
    Ok(Buffer::new(
        backend.name(),
        t.dtype(),
        t.shape.clone(),
        memory,
    ))
}

fn download(backend: &dyn Backend, b: &Buffer) -> Result<HostTensor, Why> {
    let memory = b.memory().map_err(|e| Why::Fail(format!("memory: {e}")))?;
    backend
        .download(&memory)
        .map_err(|e| unexpected("download", e))
}

/// Bit-for-bit equality (any NaN matching any NaN).
fn same(a: &HostTensor, b: &HostTensor) -> Result<(), String> {
    compare_outputs(
        std::slice::from_ref(a),
        std::slice::from_ref(b),
        Agreement::BitIdentical,
    )
}

fn round_trip(backend: &dyn Backend, _: Agreement) -> Result<(), Why> {
    let cases = [
        tensor(DType::F64, &[3], &[f64::MIN_POSITIVE / 4.0, -0.0, 1e300]),
        tensor(DType::F32, &[2, 2], &[f64::INFINITY, -1.5, 0.1, -0.0]),
        HostTensor::new(
            Shape::new(vec![3]).unwrap(),
            HostData::Bool(vec![true, false, true].into()),
        ),
        tensor(DType::F64, &[], &[f64::NAN]),
    ];
    for t in &cases {
        let b = upload(backend, t)?;
        if b.dtype() != t.dtype() || *b.shape() != t.shape {
            return Err(Why::Fail(format!("the buffer of {t:?} reports {b:?}")));
        }
        let back = download(backend, &b)?;
        same(t, &back).map_err(|e| format!("round trip of {:?}{}: {e}", t.dtype(), t.shape))?;
        // A second download reads the same values: downloading consumes nothing.
        same(t, &download(backend, &b)?).map_err(|e| format!("second download: {e}"))?;
    }
    Ok(())
}

fn allocate(backend: &dyn Backend, _: Agreement) -> Result<(), Why> {
    for dtype in [DType::F32, DType::F64, DType::Bool] {
        let shape = Shape::new(vec![2, 3]).unwrap();
        let memory = backend
            .allocate(dtype, &shape)
            .map_err(|e| unexpected("allocate", e))?;
        let got = backend
            .download(&memory)
            .map_err(|e| unexpected("download", e))?;
        let zeros = HostTensor::new(shape.clone(), HostData::try_zeroed(dtype, 6).unwrap());
        same(&zeros, &got).map_err(|e| format!("allocate({}): {e}", dtype.name()))?;
    }
    // More memory than any machine has: OutOfMemory, and the backend goes on working.
    let huge = Shape::new(vec![1 << 40, 1 << 10]).unwrap();
    match backend.allocate(DType::F64, &huge) {
        Err(BackendError::OutOfMemory { bytes, .. }) if bytes > 0 => {}
        Err(other) => {
            return Err(Why::Fail(format!(
                "allocating 8 PiB gave {other}, not OutOfMemory"
            )))
        }
        Ok(_) => return Err(Why::Fail("allocating 8 PiB succeeded".into())),
    }
    let small = backend
        .allocate(DType::F64, &Shape::new(vec![4]).unwrap())
        .map_err(|e| unexpected("allocate after OutOfMemory", e))?;
    backend
        .download(&small)
        .map_err(|e| unexpected("download after OutOfMemory", e))?;
    Ok(())
}

/// `sin(x) * y + x` over `[4]` of `dtype`.
fn chain_plan(dtype: DType) -> Plan {
    let mut b = GraphBuilder::new();
    let ty = TensorType::new(dtype, Shape::new(vec![4]).unwrap());
    let x = b.input("x", ty.clone());
    let y = b.input("y", ty);
    let s = b.unary(UnaryOp::Sin, x).unwrap();
    let p = b.binary(BinaryOp::Mul, s, y).unwrap();
    let z = b.binary(BinaryOp::Add, p, x).unwrap();
    Plan::compile(&b.finish(vec![z]).unwrap())
}

/// `x * 0.5 + 1` over `[4]` float64: one input, one output of its type (what a donated input
/// can become).
fn step_plan() -> Plan {
    let mut b = GraphBuilder::new();
    let x = b.input(
        "x",
        TensorType::new(DType::F64, Shape::new(vec![4]).unwrap()),
    );
    let half = b.scalar(0.5, DType::F64, false);
    let one = b.scalar(1.0, DType::F64, false);
    let h = b.mul(x, half).unwrap();
    let z = b.add(h, one).unwrap();
    Plan::compile(&b.finish(vec![z]).unwrap())
}

fn output_types(plan: &Plan) -> Vec<(DType, Shape)> {
    plan.output_types()
        .iter()
        .map(|t| (t.dtype, t.shape.clone()))
        .collect()
}

fn reference(plan: &Plan, inputs: &[HostTensor]) -> Vec<HostTensor> {
    reference_backend()
        .compile_plan(plan)
        .and_then(|e| quabla_backend::Executable::run(&e, inputs))
        .expect("the reference runs the case's plans")
}

fn resident_run(backend: &dyn Backend, agreement: Agreement) -> Result<(), Why> {
    for dtype in [DType::F64, DType::F32] {
        let plan = chain_plan(dtype);
        let x = tensor(dtype, &[4], &[0.5, -1.0, 2.0, 0.0]);
        let y = tensor(dtype, &[4], &[3.0, 0.25, -2.0, 1.0]);
        let exe = backend
            .compile(&plan)
            .map_err(|e| unexpected("compile", e))?;
        let (bx, by) = (upload(backend, &x)?, upload(backend, &y)?);
        let outs = run_buffers(
            exe.as_ref(),
            backend.name(),
            &output_types(&plan),
            vec![BufferArg::Lent(&bx), BufferArg::Lent(&by)],
        )
        .map_err(|e| unexpected("run on buffers", e))?;
        if outs.len() != 1 || outs[0].backend() != backend.name() {
            return Err(Why::Fail(format!("the run returned {outs:?}")));
        }
        let got = download(backend, &outs[0])?;
        compare_outputs(
            &reference(&plan, &[x.clone(), y.clone()]),
            &[got],
            agreement,
        )?;
        // Lent inputs are unchanged and still usable.
        same(&x, &download(backend, &bx)?).map_err(|e| format!("a lent input changed: {e}"))?;
        same(&y, &download(backend, &by)?).map_err(|e| format!("a lent input changed: {e}"))?;
    }
    Ok(())
}

fn donation(backend: &dyn Backend, agreement: Agreement) -> Result<(), Why> {
    let plan = step_plan();
    let exe = backend
        .compile(&plan)
        .map_err(|e| unexpected("compile", e))?;
    let types = output_types(&plan);
    let run = |arg: BufferArg<'_>| {
        run_buffers(exe.as_ref(), backend.name(), &types, vec![arg])
            .map_err(|e| unexpected("run with a donated input", e))
    };
    let x0 = tensor(DType::F64, &[4], &[8.0, -4.0, 0.5, 1e10]);

    // A donated buffer is ended; every handle on it refuses further use.
    let b = upload(backend, &x0)?;
    let handle = b.clone();
    let out = run(BufferArg::Donated(b))?;
    compare_outputs(
        &reference(&plan, std::slice::from_ref(&x0)),
        &[download(backend, &out[0])?],
        agreement,
    )?;
    match handle.memory() {
        Err(BackendError::InvalidBuffer { .. }) => {}
        other => {
            return Err(Why::Fail(format!(
                "a donated buffer is still usable: {other:?}"
            )))
        }
    }

    // Storage that another buffer still holds is never clobbered by a donation.
    let b = upload(backend, &x0)?;
    let other = Buffer::new(
        backend.name(),
        b.dtype(),
        b.shape().clone(),
        b.memory().map_err(|e| Why::Fail(e.to_string()))?,
    );
    let out = run(BufferArg::Donated(b))?;
    same(&x0, &download(backend, &other)?)
        .map_err(|e| format!("a donation clobbered storage another buffer holds: {e}"))?;
    compare_outputs(
        &reference(&plan, std::slice::from_ref(&x0)),
        &[download(backend, &out[0])?],
        agreement,
    )?;

    // A loop of runs, each donating the previous output, gives the reference iterates.
    let mut state = upload(backend, &x0)?;
    let mut expected = x0.clone();
    for _ in 0..6 {
        state = run(BufferArg::Donated(state))?.remove(0);
        expected = reference(&plan, &[expected]).remove(0);
    }
    compare_outputs(&[expected], &[download(backend, &state)?], agreement)?;
    Ok(())
}

fn freed_use(backend: &dyn Backend, _: Agreement) -> Result<(), Why> {
    let plan = step_plan();
    let exe = backend
        .compile(&plan)
        .map_err(|e| unexpected("compile", e))?;
    let b = upload(backend, &tensor(DType::F64, &[4], &[1.0, 2.0, 3.0, 4.0]))?;
    b.free().map_err(|e| Why::Fail(format!("free: {e}")))?;
    let attempts = [
        ("download", b.memory().map(|_| ())),
        ("free", b.free()),
        (
            "run",
            run_buffers(
                exe.as_ref(),
                backend.name(),
                &output_types(&plan),
                vec![BufferArg::Lent(&b)],
            )
            .map(|_| ()),
        ),
    ];
    for (what, result) in attempts {
        match result {
            Err(BackendError::InvalidBuffer { message }) if message.contains("freed") => {}
            other => {
                return Err(Why::Fail(format!(
                    "{what} of a freed buffer gave {other:?}, not InvalidBuffer"
                )))
            }
        }
    }
    Ok(())
}

fn failed_run_keeps_donated(backend: &dyn Backend, _: Agreement) -> Result<(), Why> {
    let plan = chain_plan(DType::F64);
    let exe = backend
        .compile(&plan)
        .map_err(|e| unexpected("compile", e))?;
    let x = tensor(DType::F64, &[4], &[1.0, 2.0, 3.0, 4.0]);
    let bx = upload(backend, &x)?;
    // The second input has the wrong shape: the run fails before it starts.
    let wrong = upload(backend, &tensor(DType::F64, &[2], &[1.0, 2.0]))?;
    let result = run_buffers(
        exe.as_ref(),
        backend.name(),
        &output_types(&plan),
        vec![BufferArg::Donated(bx.clone()), BufferArg::Lent(&wrong)],
    );
    match result {
        Err(BackendError::InputMismatch { .. }) => {}
        other => {
            return Err(Why::Fail(format!(
                "a run with a mis-shaped input gave {other:?}, not InputMismatch"
            )))
        }
    }
    same(&x, &download(backend, &bx)?)
        .map_err(|e| format!("a failed run did not give back its donated input: {e}"))?;
    Ok(())
}

fn transfers_counted(backend: &dyn Backend, _: Agreement) -> Result<(), Why> {
    let x = tensor(DType::F64, &[4], &[1.0, 2.0, 3.0, 4.0]);
    let before = backend.transfers();
    let b = upload(backend, &x)?;
    let mid = backend.transfers();
    download(backend, &b)?;
    let after = backend.transfers();
    // A backend whose memory is the host's moves nothing; one with memory of its own counts
    // each copy and its bytes (at least these: other tests may use the backend meanwhile).
    let host_memory = matches!(b.memory(), Ok(quabla_backend::Memory::Host(_)));
    let ok = if host_memory {
        before == mid && mid == after
    } else {
        mid.uploads > before.uploads
            && mid.bytes_uploaded >= before.bytes_uploaded + 32
            && after.downloads > mid.downloads
            && after.bytes_downloaded >= mid.bytes_downloaded + 32
    };
    if ok {
        Ok(())
    } else {
        Err(Why::Fail(format!(
            "one upload and one download of 32 bytes counted as {before} -> {mid} -> {after}"
        )))
    }
}
