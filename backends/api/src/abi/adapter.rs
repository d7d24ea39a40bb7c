//! The plugin side of the boundary: the adapter that turns a plain [`Backend`] into the
//! objects of [`crate::abi`] ([`open_backend`], used by [`crate::export_plugin!`]), and the
//! guard that keeps every panic of the backend's code on this side ([`guard`]).

use super::*;

/// Runs `f`, turning a panic into [`PluginError::Panic`]. Every adapter entry point goes
/// through it, so no panic reaches `abi_stable`'s extern shims (which would abort).
pub fn guard<T>(f: impl FnOnce() -> Result<T, PluginError>) -> RResult<T, PluginError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.into(),
        Err(payload) => RResult::RErr(PluginError::Panic {
            message: panic_message(payload.as_ref()).into(),
        }),
    }
}

/// The text of a panic payload (`panic!` with a message gives a `&str` or a `String`).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-text payload".to_string()
    }
}

/// Opens a plain [`Backend`] behind the plugin ABI. A panic in `open` becomes
/// [`PluginError::Panic`]. Prefer [`open_named_backend`], which also checks the backend's name.
pub fn open_backend<B, F>(open: F) -> RResult<BackendBox, PluginError>
where
    B: Backend + 'static,
    F: FnOnce() -> Result<B, Unavailable>,
{
    guard(|| open_inner(None, open))
}

/// Opens a plain [`Backend`] behind the plugin ABI, refusing it unless [`Backend::name`] is
/// `declared`, the name of the plugin's root module (which the registry lists and resolves):
/// what the `open` entry point of [`crate::export_plugin!`] calls, so a plugin has one name.
/// The refusal is [`PluginError::Unavailable`] with a reason saying both names.
pub fn open_named_backend<B, F>(declared: &str, open: F) -> RResult<BackendBox, PluginError>
where
    B: Backend + 'static,
    F: FnOnce() -> Result<B, Unavailable>,
{
    guard(|| open_inner(Some(declared), open))
}

fn open_inner<B, F>(declared: Option<&str>, open: F) -> Result<BackendBox, PluginError>
where
    B: Backend + 'static,
    F: FnOnce() -> Result<B, Unavailable>,
{
    let backend = open().map_err(PluginError::from)?;
    if let Some(declared) = declared {
        if backend.name() != declared {
            return Err(PluginError::from(Unavailable::new(format!(
                "the plugin is exported as {declared:?} but its backend's Backend::name() \
                 returns {:?}; the two must be the same name",
                backend.name()
            ))));
        }
    }
    Ok(HostBackend::boxed(Arc::new(backend)))
}

/// Holds a value whose destructor must not unwind into an `extern "C"` shim: a panic while
/// dropping it is caught and reported on stderr.
struct NoUnwindDrop<T>(ManuallyDrop<T>);

impl<T> NoUnwindDrop<T> {
    fn new(value: T) -> NoUnwindDrop<T> {
        NoUnwindDrop(ManuallyDrop::new(value))
    }
}

impl<T> std::ops::Deref for NoUnwindDrop<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> Drop for NoUnwindDrop<T> {
    fn drop(&mut self) {
        let inner = &mut self.0;
        // SAFETY: `inner` is dropped exactly once, here, and never used afterwards.
        let dropped = catch_unwind(AssertUnwindSafe(|| unsafe { ManuallyDrop::drop(inner) }));
        if let Err(payload) = dropped {
            eprintln!(
                "quabla plugin: a destructor panicked (caught at the plugin boundary): {}",
                panic_message(payload.as_ref())
            );
        }
    }
}

/// A plain backend seen through the ABI; its buffers hold the backend's own [`Memory`].
struct HostBackend {
    name: String,
    backend: NoUnwindDrop<Arc<dyn Backend>>,
}

impl HostBackend {
    fn boxed(backend: Arc<dyn Backend>) -> BackendBox {
        let adapter = HostBackend {
            name: backend.name().to_string(),
            backend: NoUnwindDrop::new(backend),
        };
        BackendBox::from_value(adapter, TD_Opaque)
    }

    fn compile_at(
        &self,
        plan: RSlice<'_, u8>,
        precision: Precision,
    ) -> RResult<ExecutableBox, PluginError> {
        guard(|| {
            let plan = quabla_ir::wire::decode_plan(plan.as_slice()).map_err(|e| {
                PluginError::InvalidPlan {
                    message: e.to_string().into(),
                }
            })?;
            let exe = self
                .backend
                .compile_with(&plan, precision)
                .map_err(|e| PluginError::from_backend(&e))?;
            let outputs = plan
                .output_types()
                .iter()
                .map(|ty| AbiTensorType {
                    dtype: ty.dtype.into(),
                    shape: abi_shape(&ty.shape),
                })
                .collect();
            let adapter = HostExecutable {
                name: self.name.clone(),
                exe: NoUnwindDrop::new(exe),
                outputs,
                backend: NoUnwindDrop::new(Arc::clone(&*self.backend)),
            };
            Ok(ExecutableBox::from_value(adapter, TD_Opaque))
        })
    }
}

impl BackendObject for HostBackend {
    fn capabilities(&self) -> RResult<AbiCapabilities, PluginError> {
        guard(|| Ok(AbiCapabilities::from(&self.backend.capabilities())))
    }

    fn compile(&self, plan: RSlice<'_, u8>) -> RResult<ExecutableBox, PluginError> {
        self.compile_at(plan, Precision::Reference)
    }

    fn upload(&self, tensor: &AbiHostTensor) -> RResult<BufferBox, PluginError> {
        guard(|| {
            let host = tensor.try_to_host()?;
            let memory = self
                .backend
                .upload(&host)
                .map_err(|e| PluginError::from_backend(&e))?;
            Ok(HostBuffer::boxed(
                tensor.tensor_type(),
                memory,
                Arc::clone(&*self.backend),
            ))
        })
    }

    fn allocate(&self, ty: &AbiTensorType) -> RResult<BufferBox, PluginError> {
        guard(|| {
            let shape =
                shape_from_abi(&ty.shape).map_err(|message| PluginError::InvalidArgument {
                    message: message.into(),
                })?;
            let memory = self
                .backend
                .allocate(ty.dtype.into(), &shape)
                .map_err(|e| PluginError::from_backend(&e))?;
            Ok(HostBuffer::boxed(
                ty.clone(),
                memory,
                Arc::clone(&*self.backend),
            ))
        })
    }

    fn compile_with(
        &self,
        plan: RSlice<'_, u8>,
        precision: AbiPrecision,
    ) -> RResult<ExecutableBox, PluginError> {
        self.compile_at(plan, precision.into())
    }

    fn open_device(&self, ordinal: u64) -> RResult<BackendBox, PluginError> {
        guard(|| {
            let ordinal = usize::try_from(ordinal).map_err(|_| ordinal_refused(ordinal))?;
            let backend = self
                .backend
                .open_device(ordinal)
                .map_err(|e| PluginError::from_backend(&e))?;
            Ok(HostBackend::boxed(backend))
        })
    }
}

struct HostExecutable {
    name: String,
    exe: NoUnwindDrop<Arc<dyn Executable>>,
    /// The type of each plan output (what the output buffers report).
    outputs: Vec<AbiTensorType>,
    /// The backend, which reads the output buffers back.
    backend: NoUnwindDrop<Arc<dyn Backend>>,
}

impl ExecutableObject for HostExecutable {
    fn run<'a, 'b>(
        &self,
        inputs: RSlice<'a, AbiInput<'b>>,
        cancel: &AbiCancel,
    ) -> RResult<RVec<BufferBox>, PluginError> {
        guard(|| {
            let mut buffers = Vec::with_capacity(inputs.len());
            for (i, input) in inputs.iter().enumerate() {
                let Ok(buffer) = input.buffer.obj.downcast_as::<HostBuffer>() else {
                    return Err(PluginError::InvalidBuffer {
                        message: format!(
                            "input {i} is not a buffer of the {} plugin (buffers cannot move \
                             between backends)",
                            self.name
                        )
                        .into(),
                    });
                };
                // Every input is checked before any donated storage is taken.
                if let Err(message) = buffer.memory() {
                    return Err(PluginError::InvalidBuffer {
                        message: format!("input {i}: {message}").into(),
                    });
                }
                buffers.push((buffer, input.donated));
            }
            let bound = buffers
                .iter()
                .map(|&(buffer, donated)| {
                    let memory = if donated {
                        buffer.take()
                    } else {
                        buffer.memory()
                    };
                    memory.map(|memory| Bound { memory, donated })
                })
                .collect::<Result<Vec<_>, String>>()
                .map_err(|message| PluginError::InvalidBuffer {
                    message: message.into(),
                })?;
            let outputs = match crate::cancel::with_abi(cancel, || self.exe.run_resident(bound)) {
                Ok(outputs) => outputs,
                Err(failure) => {
                    // The backend gave the inputs back: donated storage returns to its buffer,
                    // so the host still holds everything it donated to the failed run.
                    if failure.inputs.len() == buffers.len() {
                        for ((buffer, donated), bound) in buffers.iter().zip(failure.inputs) {
                            if *donated {
                                *buffer.lock() = Some(bound.memory);
                            }
                        }
                    }
                    return Err(PluginError::from_backend(&failure.error));
                }
            };
            if outputs.len() != self.outputs.len() {
                return Err(PluginError::Device {
                    device: self.name.as_str().into(),
                    message: format!(
                        "the backend returned {} outputs for a plan with {}",
                        outputs.len(),
                        self.outputs.len()
                    )
                    .into(),
                });
            }
            Ok(outputs
                .into_iter()
                .zip(&self.outputs)
                .map(|(memory, ty)| {
                    HostBuffer::boxed(ty.clone(), memory, Arc::clone(&self.backend))
                })
                .collect())
        })
    }
}

/// A buffer of the adapter: the backend's memory for one tensor, until a donation takes it.
/// Its parts are dropped under `catch_unwind` (a device's free may panic).
struct HostBuffer {
    ty: AbiTensorType,
    memory: NoUnwindDrop<std::sync::Mutex<Option<Memory>>>,
    backend: NoUnwindDrop<Arc<dyn Backend>>,
}

impl HostBuffer {
    fn boxed(ty: AbiTensorType, memory: Memory, backend: Arc<dyn Backend>) -> BufferBox {
        BufferBox::from_value(
            HostBuffer {
                ty,
                memory: NoUnwindDrop::new(std::sync::Mutex::new(Some(memory))),
                backend: NoUnwindDrop::new(backend),
            },
            TD_CanDowncast,
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Memory>> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A handle on the memory, or why there is none.
    fn memory(&self) -> Result<Memory, String> {
        self.lock().clone().ok_or_else(taken)
    }

    /// The memory itself, for a run it is donated to.
    fn take(&self) -> Result<Memory, String> {
        self.lock().take().ok_or_else(taken)
    }
}

fn taken() -> String {
    "the buffer's storage was taken by a run it was donated to".into()
}

impl BufferObject for HostBuffer {
    fn tensor_type(&self) -> AbiTensorType {
        self.ty.clone()
    }

    fn download(&self) -> RResult<AbiHostTensor, PluginError> {
        guard(|| {
            let memory = self
                .memory()
                .map_err(|message| PluginError::InvalidBuffer {
                    message: message.into(),
                })?;
            let host = self
                .backend
                .download(&memory)
                .map_err(|e| PluginError::from_backend(&e))?;
            AbiHostTensor::try_from_host(&host)
        })
    }
}
