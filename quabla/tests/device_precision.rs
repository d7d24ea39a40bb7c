//! Float64 on devices that compute in float32 (numerics.md §1.6, errors.md WR2): a plan
//! holding float64 values compiled for such a backend warns `<backend> runs float64 programs in
//! float32` once per compiled function, unless it is compiled at `precision("float64")`, which
//! reaches the backend as `Precision::Float64`. The backend here is the CPU's computation under
//! another name claiming no float64 execution, so the facade's side is checked without a GPU.

use qb::prelude::*;
use quabla as qb;
use quabla_backend::{Backend, Capabilities, Executable, Precision};
use quabla_ir::Plan;
use std::sync::{Arc, Mutex};

/// The precisions the backend was asked to compile at, in order.
static COMPILED_AT: Mutex<Vec<Precision>> = Mutex::new(Vec::new());

#[derive(Debug, Default)]
struct Float32Device(quabla_cpu::CpuBackend);

impl Backend for Float32Device {
    fn name(&self) -> &str {
        "f32dev"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            float64: false,
            device_count: 1,
        }
    }

    fn compile(&self, plan: &Plan) -> quabla_backend::Result<Arc<dyn Executable>> {
        self.compile_with(plan, Precision::Reference)
    }

    fn compile_with(
        &self,
        plan: &Plan,
        precision: Precision,
    ) -> quabla_backend::Result<Arc<dyn Executable>> {
        COMPILED_AT.lock().unwrap().push(precision);
        self.0.compile(plan)
    }
}

quabla_backend::register_backend!("f32dev", || Ok(Arc::new(Float32Device::default())));

/// Runs `f` and returns the warnings it raised.
fn warnings_of(f: impl FnOnce()) -> Vec<String> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    qb::warnings::set_handler(move |w| sink.lock().unwrap().push(w.to_string()));
    f();
    qb::warnings::set_handler(|w| eprintln!("{w}"));
    let out = seen.lock().unwrap().clone();
    out
}

// One test function: the warning handler and the policy are process-wide.
#[test]
fn float64_plans_on_a_float32_device_warn_unless_compiled_at_float64() {
    let x64 = qb::array([1.0, 2.0, 3.0]).unwrap();
    let x32 = x64.astype(qb::F32).unwrap();
    let f = |x: qb::Tensor| x.sin();

    // A float64 plan warns once per compiled function, on the first call only.
    let jitted = qb::jit(f).device("f32dev");
    let seen = warnings_of(|| {
        jitted.call(&x64).unwrap();
        jitted.call(&x64).unwrap();
    });
    assert_eq!(seen, ["f32dev runs float64 programs in float32"]);
    assert_eq!(
        COMPILED_AT.lock().unwrap().last(),
        Some(&Precision::Reference)
    );

    // A float32 plan does not warn.
    let seen = warnings_of(|| {
        qb::jit(f).device("f32dev").call(&x32).unwrap();
    });
    assert!(seen.is_empty(), "{seen:?}");

    // precision("float64") asks the backend for float64 and does not warn.
    let seen = warnings_of(|| {
        qb::jit(f)
            .device("f32dev")
            .precision(Some("float64"))
            .call(&x64)
            .unwrap();
    });
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(
        COMPILED_AT.lock().unwrap().last(),
        Some(&Precision::Float64)
    );

    // The CPU computes float64 in float64: no warning there.
    let seen = warnings_of(|| {
        qb::jit(f).device("cpu").call(&x64).unwrap();
    });
    assert!(seen.is_empty(), "{seen:?}");

    // Under the "error" policy the warning is the call's error.
    qb::warnings::set_action(
        qb::warnings::WarningKind::Float64AsFloat32,
        qb::warnings::Action::Error,
    );
    let err = qb::jit(f).device("f32dev").call(&x64).unwrap_err();
    assert!(
        err.to_string()
            .contains("f32dev runs float64 programs in float32"),
        "{err}"
    );
    qb::warnings::set_action(
        qb::warnings::WarningKind::Float64AsFloat32,
        qb::warnings::Action::Always,
    );

    // Program::compile warns the same way.
    let lowered = qb::jit(f).lower(&x64).unwrap();
    let seen = warnings_of(|| {
        lowered.program().compile("f32dev").eval().unwrap();
    });
    assert_eq!(seen, ["f32dev runs float64 programs in float32"]);

    // The Trainer: float64 parameters on the device warn when its step is built, and its
    // `precision("float64")` reaches the backend for the step and for the loss.
    let loss = |p: &qb::Tensor, x: &qb::Tensor| (x.clone() - p).powi(2).sum();
    let trainer = |precision: Option<&str>| {
        let mut t = qb::optim::Trainer::new(
            loss,
            qb::array([0.0, 0.0, 0.0]).unwrap(),
            qb::optim::Sgd::new(0.25),
            x64.clone(),
        )
        .device("f32dev")
        .precision(precision)
        .build()
        .unwrap();
        t.step().unwrap();
        let after = t.loss().unwrap().item().unwrap();
        // One step of SGD from 0 with rate 1/4 moves p halfway to x: loss = sum((x/2)^2).
        assert_eq!(after, 0.25 + 1.0 + 2.25);
    };
    let seen = warnings_of(|| trainer(None));
    assert!(
        !seen.is_empty()
            && seen
                .iter()
                .all(|w| w == "f32dev runs float64 programs in float32"),
        "{seen:?}"
    );
    COMPILED_AT.lock().unwrap().clear();
    let seen = warnings_of(|| trainer(Some("float64")));
    assert!(seen.is_empty(), "{seen:?}");
    let compiled = COMPILED_AT.lock().unwrap().clone();
    assert!(
        !compiled.is_empty() && compiled.iter().all(|p| *p == Precision::Float64),
        "{compiled:?}"
    );
}
