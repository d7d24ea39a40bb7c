//! A test fixture: a plugin built with `panic = "abort"` (the tests build it with
//! `cargo rustc ... -- -C panic=abort`), whose backend panics as soon as it is opened. The
//! loader must refuse it from what its root module records, before calling `open`: if it
//! called `open`, the panic would abort the test process.

use quabla_backend::{Backend, Capabilities, Executable, Result, Unavailable};
use quabla_ir::Plan;
use std::sync::Arc;

#[derive(Debug)]
pub struct AbortingBackend;

impl Backend for AbortingBackend {
    fn name(&self) -> &str {
        "aborting"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            float64: true,
            device_count: 1,
        }
    }

    fn compile(&self, _plan: &Plan) -> Result<Arc<dyn Executable>> {
        panic!("compile of an aborting plugin");
    }
}

quabla_backend::export_plugin! {
    name: "aborting",
    open: || -> std::result::Result<AbortingBackend, Unavailable> {
        panic!("open of an aborting plugin")
    },
}
