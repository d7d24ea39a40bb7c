//! The host side of a loaded plugin: [`PluginBackend`], [`PluginExecutable`] and
//! [`PluginMemory`], which make a plugin's objects an ordinary [`Backend`], [`Executable`] and
//! [`Memory`], encoding plans in the wire format, counting transfers and turning every
//! [`crate::abi::PluginError`] into a [`crate::BackendError`].

use super::*;

pub(super) struct PluginInner {
    pub(super) name: String,
    pub(super) path: &'static Path,
    pub(super) capabilities: Capabilities,
    pub(super) backend: BackendBox,
    /// Every copy between the host and the plugin's buffers, counted here on the host's side.
    pub(super) transfers: TransferCounter,
}

/// A backend opened from a plugin, usable like any linked [`Backend`]: plans are encoded in
/// the wire format, and the plugin's buffers are the backend's [`Memory`]
/// ([`Memory::Backend`] holding a [`PluginMemory`]). Uploads and downloads are counted
/// ([`Backend::transfers`]), including those of [`Executable::run`], which uploads every input
/// and downloads every output.
#[derive(Clone)]
pub struct PluginBackend {
    pub(super) inner: Arc<PluginInner>,
}

impl fmt::Debug for PluginBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginBackend")
            .field("name", &self.inner.name)
            .field("path", &self.inner.path)
            .finish()
    }
}

impl PluginBackend {
    pub fn path(&self) -> &Path {
        self.inner.path
    }

    /// Compiles a plan into the plugin's executable type.
    pub fn compile_plan(&self, plan: &Plan) -> Result<PluginExecutable> {
        self.compile_plan_with(plan, Precision::Reference)
    }

    /// Compiles a plan at a precision into the plugin's executable type (a plugin built
    /// before the ABI carried the precision compiles it as [`PluginBackend::compile_plan`]
    /// does and refuses `Float64` without float64 execution).
    pub fn compile_plan_with(&self, plan: &Plan, precision: Precision) -> Result<PluginExecutable> {
        let bytes = quabla_ir::wire::encode_plan(plan).map_err(|e| BackendError::Device {
            device: self.inner.name.clone(),
            message: format!("the plan cannot be sent to the plugin: {e}"),
        })?;
        let exe = self
            .inner
            .backend
            .compile_with(RSlice::from_slice(&bytes), precision.into())
            .into_result()
            .map_err(|e| e.into_backend(&self.inner.name))?;
        Ok(PluginExecutable {
            backend: self.inner.clone(),
            plan: plan.clone(),
            exe,
        })
    }
}

impl PluginInner {
    fn upload(self: &Arc<Self>, tensor: &HostTensor) -> Result<Memory> {
        let abi = crate::abi::AbiHostTensor::try_from_host(tensor)
            .map_err(|e| e.into_backend(&self.name))?;
        let buffer = self
            .backend
            .upload(&abi)
            .into_result()
            .map_err(|e| e.into_backend(&self.name))?;
        self.transfers.upload(tensor.shape.nbytes(tensor.dtype()));
        Ok(self.memory(buffer))
    }

    fn memory(self: &Arc<Self>, buffer: BufferBox) -> Memory {
        Memory::Backend(Arc::new(PluginMemory {
            plugin: self.clone(),
            buffer,
        }))
    }

    /// The plugin buffer behind `memory` (`InvalidBuffer` for another backend's memory).
    fn buffer<'m>(&self, memory: &'m Memory) -> Result<&'m PluginMemory> {
        match memory.backend::<PluginMemory>() {
            Some(m) if std::ptr::eq(Arc::as_ptr(&m.plugin), self) => Ok(m),
            _ => Err(crate::foreign_memory(&self.name)),
        }
    }

    fn download(&self, memory: &Memory) -> Result<HostTensor> {
        let host = self.buffer(memory)?.read()?;
        self.transfers.download(host.shape.nbytes(host.dtype()));
        Ok(host)
    }
}

impl Backend for PluginBackend {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities.clone()
    }

    fn compile(&self, plan: &Plan) -> Result<Arc<dyn Executable>> {
        Ok(Arc::new(self.compile_plan(plan)?))
    }

    fn compile_with(&self, plan: &Plan, precision: Precision) -> Result<Arc<dyn Executable>> {
        Ok(Arc::new(self.compile_plan_with(plan, precision)?))
    }

    /// The plugin's backend of device `ordinal`, named `"<name>:<ordinal>"`, with transfers
    /// counted apart.
    fn open_device(&self, ordinal: usize) -> Result<Arc<dyn Backend>> {
        let name = format!("{}:{ordinal}", self.inner.name);
        let backend = self
            .inner
            .backend
            .open_device(ordinal as u64)
            .into_result()
            .map_err(|e| e.into_backend(&name))?;
        let capabilities = backend
            .capabilities()
            .into_result()
            .map_err(|e| e.into_backend(&name))?
            .into();
        Ok(Arc::new(PluginBackend {
            inner: Arc::new(PluginInner {
                name,
                path: self.inner.path,
                capabilities,
                backend,
                transfers: TransferCounter::default(),
            }),
        }))
    }

    fn upload(&self, tensor: &HostTensor) -> Result<Memory> {
        self.inner.upload(tensor)
    }

    fn download(&self, memory: &Memory) -> Result<HostTensor> {
        self.inner.download(memory)
    }

    fn allocate(&self, dtype: DType, shape: &Shape) -> Result<Memory> {
        let ty = AbiTensorType {
            dtype: dtype.into(),
            shape: shape.dims().iter().map(|&d| d as u64).collect(),
        };
        let buffer = self
            .inner
            .backend
            .allocate(&ty)
            .into_result()
            .map_err(|e| e.into_backend(&self.inner.name))?;
        Ok(self.inner.memory(buffer))
    }

    fn transfers(&self) -> Transfers {
        self.inner.transfers.read()
    }
}

/// A plan compiled by a plugin.
pub struct PluginExecutable {
    backend: Arc<PluginInner>,
    plan: Plan,
    exe: ExecutableBox,
}

impl fmt::Debug for PluginExecutable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginExecutable")
            .field("backend", &self.backend.name)
            .finish_non_exhaustive()
    }
}

impl PluginExecutable {
    /// Checks what the plugin returned against the plan's outputs (count, dtypes, shapes).
    fn check_outputs(&self, outputs: &[BufferBox]) -> Result<()> {
        let expected = self.plan.output_types();
        let device = || self.backend.name.clone();
        if outputs.len() != expected.len() {
            return Err(BackendError::Device {
                device: device(),
                message: format!(
                    "the plugin returned {} outputs for a plan with {}",
                    outputs.len(),
                    expected.len()
                ),
            });
        }
        for (i, (buffer, ty)) in outputs.iter().zip(expected).enumerate() {
            let got = buffer.tensor_type();
            let same = DType::from(got.dtype) == ty.dtype
                && got.shape.len() == ty.shape.rank()
                && got
                    .shape
                    .iter()
                    .zip(ty.shape.dims())
                    .all(|(&a, &b)| a == b as u64);
            if !same {
                return Err(BackendError::Device {
                    device: device(),
                    message: format!(
                        "the plugin returned {:?}{:?} for output {i}, which is {}{}",
                        got.dtype,
                        got.shape.as_slice(),
                        ty.dtype.name(),
                        ty.shape
                    ),
                });
            }
        }
        Ok(())
    }
}

impl Executable for PluginExecutable {
    fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_inputs(&self.plan, inputs)?;
        let bound = inputs
            .iter()
            .map(|t| {
                Ok(Bound {
                    memory: self.backend.upload(t)?,
                    donated: true,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let outputs = self.run_resident(bound).map_err(|failure| failure.error)?;
        outputs.iter().map(|m| self.backend.download(m)).collect()
    }

    fn run_resident(&self, inputs: Vec<Bound>) -> std::result::Result<Vec<Memory>, RunFailure> {
        let name = &self.backend.name;
        let abi_inputs = self.abi_inputs(&inputs);
        if let Err(error) = &abi_inputs {
            let error = error.clone();
            drop(abi_inputs);
            return Err(RunFailure { error, inputs });
        }
        let abi_inputs = abi_inputs.unwrap_or_default();
        // The plugin watches this thread's token and the host's interrupt through its own copy
        // of the cancel module (see `crate::cancel`).
        let cancel = crate::cancel::watch().to_abi();
        let result = self
            .exe
            .run(RSlice::from_slice(&abi_inputs), &cancel)
            .into_result();
        drop(abi_inputs);
        let outputs = match result {
            Ok(outputs) => outputs,
            // The plugin restored what it took from donated buffers (interface version 3).
            Err(e) => {
                return Err(RunFailure {
                    error: e.into_backend(name),
                    inputs,
                })
            }
        };
        // The donated inputs are dropped now, after the run: the plugin has taken what it
        // reused.
        drop(inputs);
        if let Err(error) = self.check_outputs(&outputs) {
            return Err(RunFailure {
                error,
                inputs: Vec::new(),
            });
        }
        Ok(outputs
            .into_iter()
            .map(|buffer| self.backend.memory(buffer))
            .collect())
    }
}

impl PluginExecutable {
    /// The boundary form of a run's inputs, checked against the plan's inputs.
    fn abi_inputs<'i>(&self, inputs: &'i [Bound]) -> Result<Vec<AbiInput<'i>>> {
        let count = self.plan.graph().inputs().count();
        if inputs.len() != count {
            return Err(BackendError::InputMismatch {
                index: inputs.len().min(count),
                name: "<count>".into(),
                expected: format!("{count} inputs"),
                got: format!("{} inputs", inputs.len()),
            });
        }
        let mut abi_inputs = Vec::with_capacity(inputs.len());
        for (index, (bound, (_, input_name, ty))) in
            inputs.iter().zip(self.plan.graph().inputs()).enumerate()
        {
            let buffer = self.backend.buffer(&bound.memory)?;
            let got = buffer.buffer.tensor_type();
            let same = DType::from(got.dtype) == ty.dtype
                && got
                    .shape
                    .iter()
                    .map(|&d| d as usize)
                    .eq(ty.shape.dims().iter().copied());
            if !same {
                return Err(BackendError::InputMismatch {
                    index,
                    name: input_name.to_string(),
                    expected: format!("{}{}", ty.dtype.name(), ty.shape),
                    got: format!("{:?}{:?}", got.dtype, got.shape.as_slice()),
                });
            }
            // A donated input goes to the plugin as donated only when this handle is the last
            // one on it: otherwise someone else still reads it, and the plugin must not reuse
            // its storage.
            let donated = bound.donated
                && matches!(&bound.memory, Memory::Backend(m) if Arc::strong_count(m) == 1);
            abi_inputs.push(AbiInput {
                buffer: buffer.buffer.sabi_reborrow(),
                donated,
            });
        }
        Ok(abi_inputs)
    }
}

/// A plugin's buffer as the host holds it: the memory of a [`PluginBackend`].
pub struct PluginMemory {
    plugin: Arc<PluginInner>,
    buffer: BufferBox,
}

impl fmt::Debug for PluginMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginMemory")
            .field("backend", &self.plugin.name)
            .field("type", &self.buffer.tensor_type())
            .finish()
    }
}

impl PluginMemory {
    /// Copies the buffer to the host, checking what the plugin returns (uncounted: the
    /// backend's `download` counts).
    fn read(&self) -> Result<HostTensor> {
        let name = &self.plugin.name;
        let abi = self
            .buffer
            .download()
            .into_result()
            .map_err(|e| e.into_backend(name))?;
        abi.try_to_host().map_err(|e| match e {
            PluginError::InvalidArgument { message } => BackendError::Device {
                device: name.clone(),
                message: format!("the plugin returned invalid host data: {message}"),
            },
            other => other.into_backend(name),
        })
    }
}
