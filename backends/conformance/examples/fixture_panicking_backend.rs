//! A test fixture: a plugin whose backend panics, in `compile` when the plan's first input is
//! named `panic_in_compile` and in every `run` otherwise. The panics must come back as typed
//! errors, never unwind into the loader.

use quabla_backend::{Backend, Capabilities, Executable, HostTensor, Result, Unavailable};
use quabla_ir::Plan;
use std::sync::Arc;

#[derive(Debug)]
pub struct PanickingBackend;

#[derive(Debug)]
pub struct PanickingExecutable;

impl Backend for PanickingBackend {
    fn name(&self) -> &str {
        "panicking"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            float64: true,
            device_count: 1,
        }
    }

    fn compile(&self, plan: &Plan) -> Result<Arc<dyn Executable>> {
        if plan.input_names().first() == Some(&"panic_in_compile") {
            panic!("compile exploded");
        }
        Ok(Arc::new(PanickingExecutable))
    }
}

impl Executable for PanickingExecutable {
    fn run(&self, _inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        panic!("run exploded");
    }
}

quabla_backend::export_plugin! {
    name: "panicking",
    open: || -> std::result::Result<PanickingBackend, Unavailable> { Ok(PanickingBackend) },
}
