//! Every conformance plan, lowered for CUDA, run on the host model of the device
//! (`common/host.rs`: the generated kernels compiled by the host C++ compiler, the library
//! calls modelled with their documented semantics, the crate's own executor) and compared with
//! the CPU reference within the device tolerances of numerics.md §1.6. This is how the
//! lowering and the generated code are checked on machines without a GPU.

mod common;

use common::host::{self, HostKernels};
use quabla_backend::{Backend, Precision};
use quabla_conformance::{compare_outputs, reference_backend, Agreement};

#[test]
fn every_conformance_plan_agrees_with_the_cpu_on_the_host_model() {
    let programs = common::conformance_programs();
    let kernels = HostKernels::compile(
        programs
            .iter()
            .filter_map(|l| l.outcome.as_ref().ok())
            .flat_map(|p| &p.kernels),
    );
    let reference = reference_backend();
    let mut failures = Vec::new();
    let mut checked = 0;
    for l in &programs {
        let program = match &l.outcome {
            Ok(p) => p,
            Err(e) => {
                failures.push(format!(
                    "{} ({:?}): does not lower: {e}",
                    l.label, l.precision
                ));
                continue;
            }
        };
        let expected = reference
            .compile(&l.plan)
            .and_then(|exe| exe.run(&l.inputs));
        let got = host::run(&kernels, program, &l.inputs);
        let agreement = Agreement::Tolerance {
            float64: l.precision == Precision::Float64,
        };
        let verdict = match (expected, got) {
            (Ok(e), Ok(g)) => compare_outputs(&e, &g, agreement),
            (Err(e), Err(g)) if std::mem::discriminant(&e) == std::mem::discriminant(&g) => Ok(()),
            (Err(e), Err(g)) => Err(format!(
                "the reference fails with `{e}`, the program with `{g}`"
            )),
            (Err(e), Ok(_)) => Err(format!(
                "the reference fails with `{e}`, the program returns values"
            )),
            (Ok(_), Err(g)) => Err(format!("the program fails: {g}")),
        };
        checked += 1;
        if let Err(why) = verdict {
            failures.push(format!("{} ({:?}): {why}", l.label, l.precision));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} plans disagree:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked > 100, "only {checked} plans were checked");
}
