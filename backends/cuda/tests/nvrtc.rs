//! Every generated kernel compiles with NVRTC — to PTX and to `sm_80` and `sm_90` machine code
//! — without a GPU. NVRTC comes from the `nvidia-cuda-nvrtc-cu12` wheel in the project's test
//! virtualenv (`target/py-venv`), installed there when missing; the tests skip, saying why,
//! only when the package registry cannot be reached.
//!
//! The kernels of every conformance plan and every coverage-table plan are compiled as one
//! program (equal kernels share a name, so the union is the set of distinct kernels): the
//! same source text each plan's own program holds, compiled once per target.

mod common;

use quabla_cuda::codegen::source_of;
use quabla_cuda::coverage;
use quabla_cuda::lower::lower;
use quabla_cuda::nvrtc::{Nvrtc, Target};
use quabla_cuda::program::Kernel;
use std::time::Instant;

fn nvrtc_or_skip(test: &str) -> Option<Nvrtc> {
    match common::nvrtc() {
        Ok(n) => Some(n),
        Err(why) => {
            eprintln!("{test}: skipped: {why}");
            None
        }
    }
}

/// The distinct kernels of every conformance and coverage plan, and of the collectives.
fn all_kernels() -> Vec<Kernel> {
    let mut kernels: Vec<Kernel> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut add = |ks: &[Kernel]| {
        for k in ks {
            if seen.insert(k.name.clone()) {
                kernels.push(k.clone());
            }
        }
    };
    for l in common::conformance_programs() {
        let program = l
            .outcome
            .unwrap_or_else(|e| panic!("{} does not lower: {e}", l.label));
        add(&program.kernels);
    }
    for (label, plan, precision) in coverage::plans() {
        if let Ok(program) = lower(&plan, precision) {
            add(&program.kernels);
        } else {
            eprintln!("coverage plan {label} is refused (see coverage.md)");
        }
    }
    // The rank-order folds of the NCCL all-reduce.
    use quabla_cuda::collective::{fold_program, Fold};
    use quabla_cuda::program::Elem;
    for elem in [Elem::F32, Elem::F64] {
        for fold in [Fold::Sum, Fold::Mean, Fold::Max, Fold::Min] {
            add(&fold_program(elem, fold, 2, 8).kernels);
        }
    }
    kernels
}

#[test]
fn every_generated_kernel_compiles_to_ptx_sm80_and_sm90() {
    let Some(nvrtc) = nvrtc_or_skip("every_generated_kernel_compiles_to_ptx_sm80_and_sm90") else {
        return;
    };
    let kernels = all_kernels();
    assert!(kernels.len() > 100, "only {} kernels", kernels.len());
    let source = source_of(&kernels);
    let mut timings = Vec::new();
    for target in [Target::Ptx(80), Target::Cubin(80), Target::Cubin(90)] {
        let started = Instant::now();
        let image = nvrtc
            .compile(&source, target)
            .unwrap_or_else(|e| panic!("{e}"));
        timings.push(format!(
            "{target}: {:.2} s",
            started.elapsed().as_secs_f64()
        ));
        match target {
            Target::Ptx(_) => {
                let ptx = String::from_utf8_lossy(&image);
                for k in &kernels {
                    assert!(
                        ptx.contains(&format!(".entry {}(", k.name)),
                        "the PTX has no entry {}",
                        k.name
                    );
                }
            }
            Target::Cubin(_) => {
                assert_eq!(&image[..4], b"\x7fELF", "a cubin is an ELF image");
                for k in &kernels {
                    let name = k.name.as_bytes();
                    assert!(
                        image.windows(name.len()).any(|w| w == name),
                        "the cubin has no symbol {}",
                        k.name
                    );
                }
            }
        }
    }
    eprintln!(
        "NVRTC {}.{} compiled {} distinct kernels ({} bytes of source): {}",
        nvrtc.version().0,
        nvrtc.version().1,
        kernels.len(),
        source.len(),
        timings.join(", ")
    );
}

#[test]
fn nvrtc_knows_the_architectures_the_backend_targets() {
    let Some(nvrtc) = nvrtc_or_skip("nvrtc_knows_the_architectures_the_backend_targets") else {
        return;
    };
    let archs = nvrtc.architectures();
    for arch in [80, 90] {
        assert!(archs.contains(&arch), "NVRTC compiles for {archs:?}");
    }
}

#[test]
fn a_kernel_nvrtc_rejects_is_a_typed_error_with_the_log() {
    let Some(nvrtc) = nvrtc_or_skip("a_kernel_nvrtc_rejects_is_a_typed_error_with_the_log") else {
        return;
    };
    let err = nvrtc
        .compile(
            "extern \"C\" __global__ void broken() { undeclared(); }",
            Target::Ptx(80),
        )
        .unwrap_err();
    assert_eq!(err.target, Target::Ptx(80));
    assert!(err.log.contains("undeclared"), "{err}");
    assert!(err.to_string().contains("NVRTC could not compile"), "{err}");
}
