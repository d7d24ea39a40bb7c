//! `Program` and `Executable` (api.md §19, transforms.md §15.4): a lowered plan with named
//! inputs, compiled for any registered target and run with inputs given by name.
//!
//! This module owns the by-name calling convention: matching names to plan inputs, converting
//! host data to each input's dtype, and the errors for a missing, extra or mis-shaped input.
//! Compilation and execution are the backend's ([`crate::devices::backend_for`] resolves the
//! target exactly as `jit(f).device(..)` does); this module builds or rewrites no graph.

use crate::error::{Error, Result};
use crate::runtime::Runnable;
use crate::tensor::Tensor;
use quabla_backend::HostTensor;
use quabla_ir::{Plan, TensorType};
use std::fmt;

/// A frozen plan with named inputs (pytree paths, in plan order) and ordered outputs, from
/// [`crate::Lowered::program`].
#[derive(Clone)]
pub struct Program {
    plan: Plan,
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Program")
            .field("inputs", &self.input_names())
            .field("output_shapes", &self.output_shapes())
            .finish()
    }
}

impl Program {
    pub(crate) fn new(plan: Plan) -> Program {
        Program { plan }
    }

    /// The input names in plan order: the pytree paths of the lowered arguments (`x`,
    /// `params['w']`, ...).
    pub fn input_names(&self) -> Vec<String> {
        self.plan
            .input_names()
            .into_iter()
            .map(String::from)
            .collect()
    }

    /// The shapes of the flattened outputs, in order.
    pub fn output_shapes(&self) -> Vec<Vec<usize>> {
        self.plan
            .output_types()
            .iter()
            .map(|t| t.shape.dims().to_vec())
            .collect()
    }

    /// The plan itself.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The plan as text (transforms.md §15).
    pub fn as_text(&self) -> String {
        self.plan.as_text()
    }

    /// Compiles the program for `target` (`"cpu"`, `"cuda"`, `"mlx"` or a registered plugin's
    /// name); finish with [`CompileProgram::eval`].
    pub fn compile(&self, target: &str) -> CompileProgram<'_> {
        CompileProgram {
            program: self,
            target: target.to_string(),
            ordinal: None,
        }
    }
}

/// A `program.compile(target)` call: `.device_ordinal(n)`, then `.eval()`.
#[must_use = "finish the call with .eval()"]
#[derive(Debug)]
pub struct CompileProgram<'p> {
    program: &'p Program,
    target: String,
    ordinal: Option<usize>,
}

impl CompileProgram<'_> {
    /// Which device of the target (default 0; an ordinal beyond the target's devices is an
    /// `InvalidArgument` error).
    pub fn device_ordinal(mut self, ordinal: usize) -> Self {
        self.ordinal = Some(ordinal);
        self
    }

    pub fn eval(self) -> Result<Executable> {
        if self.target.contains(':') {
            return Err(Error::invalid(format!(
                "program.compile takes a target name without an ordinal, got {:?}; pass the ordinal with device_ordinal",
                self.target
            )));
        }
        let device = match self.ordinal {
            Some(n) => format!("{}:{n}", self.target),
            None => self.target.clone(),
        };
        let backend = crate::devices::backend_for(&device)?;
        let runnable = Runnable::compile(
            backend,
            &self.program.plan,
            quabla_backend::Precision::Reference,
            false,
        )?;
        let inputs = self
            .program
            .plan
            .inputs()
            .into_iter()
            .map(|(_, name, ty)| (name.to_string(), ty.clone()))
            .collect();
        Ok(Executable {
            device,
            inputs,
            runnable,
        })
    }
}

/// A program compiled for one device; [`Executable::call`] runs it with inputs by name.
pub struct Executable {
    device: String,
    inputs: Vec<(String, TensorType)>,
    runnable: Runnable,
}

impl fmt::Debug for Executable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.inputs.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Executable")
            .field("device", &self.device)
            .field("inputs", &names)
            .finish()
    }
}

impl Executable {
    /// The device it runs on (`"cpu"`, `"cuda:1"`, ...).
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Runs with one tensor per input name (any order). Host data is converted to each
    /// input's dtype (a float64 array bound to a float32 input is rounded to float32). Errors
    /// name the input: a missing or unknown name, a name given twice, a wrong shape, a bool
    /// array for a float input or the reverse, a tracer.
    pub fn call<'a, I, K>(&self, inputs: I) -> Result<Vec<Tensor>>
    where
        I: IntoIterator<Item = (K, &'a Tensor)>,
        K: AsRef<str>,
    {
        let mut bound: Vec<Option<HostTensor>> = vec![None; self.inputs.len()];
        for (name, tensor) in inputs {
            let name = name.as_ref();
            let Some(i) = self.inputs.iter().position(|(n, _)| n == name) else {
                return Err(Error::invalid(format!(
                    "executable has no input named {name:?}; its inputs are {:?}",
                    self.input_names()
                )));
            };
            if bound[i].is_some() {
                return Err(Error::invalid(format!("input {name:?} was given twice")));
            }
            let ty = &self.inputs[i].1;
            if tensor.shape() != ty.shape.dims() {
                return Err(Error::shape(
                    "executable",
                    format!(
                        "input {name:?} expects shape {:?}, got {:?}",
                        ty.shape.dims(),
                        tensor.shape()
                    ),
                ));
            }
            if (tensor.dtype() == quabla_ir::DType::Bool) != (ty.dtype == quabla_ir::DType::Bool) {
                return Err(Error::Type {
                    message: format!(
                        "input {name:?} expects {}, got {}",
                        ty.dtype.name(),
                        tensor.dtype().name()
                    ),
                });
            }
            let converted = if tensor.dtype() == ty.dtype {
                tensor.clone()
            } else {
                tensor.astype(ty.dtype)?
            };
            bound[i] = Some(converted.host_for("executable input")?.clone());
        }
        let host: Vec<HostTensor> = bound
            .into_iter()
            .zip(&self.inputs)
            .map(|(b, (name, _))| {
                b.ok_or_else(|| Error::invalid(format!("input {name:?} is missing")))
            })
            .collect::<Result<_>>()?;
        let refs: Vec<&HostTensor> = host.iter().collect();
        let mut outputs = Vec::with_capacity(self.runnable.outputs());
        self.runnable.run(&refs, &mut outputs)?;
        Ok(self.runnable.tensors(outputs))
    }

    /// The input names, in plan order.
    pub fn input_names(&self) -> Vec<String> {
        self.inputs.iter().map(|(n, _)| n.clone()).collect()
    }
}
