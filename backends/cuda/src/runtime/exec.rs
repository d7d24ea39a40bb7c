//! A program loaded on the device: its kernels compiled (for the device's architecture,
//! through the kernel cache) and loaded, its constants uploaded, and the device as the
//! executor's [`Machine`] (`crate::exec`): allocations on the stream, kernel launches, cuBLAS
//! and cuSOLVER calls, readbacks.
//!
//! Donation (docs/devices.md): after a run that succeeded, each donated input that nobody else
//! holds gives its storage to the executable's pool, and the next run's outputs of that size
//! are written there — so a training step alternates between two sets of buffers and
//! allocates nothing once warm. A failed run gives its inputs back untouched: nothing is ever
//! written into an input during a run.

use super::{driver_error, CudaMemory, Device, DeviceBuffer};
use crate::exec::{self, Machine, OutputValue};
use crate::program::{BufId, Gemm, Program, Role, SolverCall, Trsm};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaStream};
use quabla_backend::{BackendError, Bound, Memory};
use quabla_ir::{DType, Shape};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::fmt;
use std::sync::{Arc, Mutex};

/// The loaded module and its kernels.
struct Module {
    module: cudarc::driver::sys::CUmodule,
    functions: Vec<cudarc::driver::sys::CUfunction>,
    context: Arc<cudarc::driver::CudaContext>,
}

// SAFETY: module and function handles are plain driver handles, used with the device's
// context current and its stream.
unsafe impl Send for Module {}
// SAFETY: as above; launching only reads the handles.
unsafe impl Sync for Module {}

impl Drop for Module {
    fn drop(&mut self) {
        let _ = self.context.bind_to_thread();
        // SAFETY: the module is live and unloaded once.
        let _ = unsafe { cudarc::driver::result::module::unload(self.module) };
    }
}

/// A program ready to run on its device.
pub struct Loaded {
    device: Arc<Device>,
    program: Program,
    module: Module,
    constants: HashMap<BufId, DeviceBuffer>,
    pool: Mutex<Vec<DeviceBuffer>>,
    compile_note: String,
}

impl fmt::Debug for Loaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Loaded({} kernels on {:?})",
            self.program.kernels.len(),
            self.device
        )
    }
}

impl Loaded {
    pub(super) fn new(device: Arc<Device>, program: Program) -> Result<Loaded, BackendError> {
        let source = crate::codegen::source_of(&program.kernels);
        let target = device.target();
        let (image, compile_note) =
            device
                .cache()
                .get_or_compile(&source, target, device.nvrtc())?;
        // SAFETY: `image` is a complete cubin or NUL-terminated PTX, alive during the call.
        let module = unsafe {
            cudarc::driver::result::module::load_data(image.as_ptr() as *const c_void)
        }
        .map_err(|e| driver_error(&format!("loading the kernels compiled to {target}"), e))?;
        let mut loaded_module = Module {
            module,
            functions: Vec::with_capacity(program.kernels.len()),
            context: device.inner.context.clone(),
        };
        for k in &program.kernels {
            let name = CString::new(k.name.clone())
                .map_err(|_| internal("a kernel name holds a NUL byte"))?;
            // SAFETY: the module is live.
            let f = unsafe { cudarc::driver::result::module::get_function(module, name) }
                .map_err(|e| driver_error(&format!("finding kernel {}", k.name), e))?;
            loaded_module.functions.push(f);
        }
        let mut constants = HashMap::new();
        for (id, decl) in program.buffers.iter().enumerate() {
            if let Role::Constant(data) = &decl.role {
                let buffer = match data {
                    crate::program::ConstData::F32(v) => device.upload_values(v, "a constant")?,
                    crate::program::ConstData::F64(v) => device.upload_values(v, "a constant")?,
                    crate::program::ConstData::I32(v) => {
                        device.upload_values(v, "an index table")?
                    }
                    crate::program::ConstData::I64(v) => device.upload_values(v, "a constant")?,
                };
                constants.insert(id, buffer);
            }
        }
        Ok(Loaded {
            device,
            program,
            module: loaded_module,
            constants,
            pool: Mutex::new(Vec::new()),
            compile_note,
        })
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    pub fn program(&self) -> &Program {
        &self.program
    }

    /// How the plan runs ([`Program::report`]) and how its kernels were compiled.
    pub fn report(&self) -> String {
        format!(
            "{}  kernels: {}\n",
            self.program.report(),
            self.compile_note
        )
    }

    /// Runs a program of one input and one computed output on the bytes of `input` (the
    /// collectives' fold, `collective.rs`), returning the output's allocation.
    pub(crate) fn run_on_buffer(&self, input: &DeviceBuffer) -> Result<DeviceBuffer, BackendError> {
        self.device.bind()?;
        let machine = DeviceRun {
            loaded: self,
            recording: RefCell::new(None),
        };
        let values = exec::execute(
            &machine,
            &self.program,
            &[input.ptr()],
            &HashMap::new(),
            &mut |_| None,
        )?;
        match values.into_iter().next() {
            Some(OutputValue::Owned(buffer)) => Ok(buffer),
            _ => Err(internal("a fold program's output is not a new buffer")),
        }
    }

    /// Runs the program on `inputs` (device memory of this backend, in plan input order); the
    /// outputs stay on the device. The inputs are only read.
    pub fn run(&self, inputs: &[Bound]) -> Result<Vec<Memory>, BackendError> {
        self.device.bind()?;
        let addresses = self.input_addresses(inputs)?;
        let constants: HashMap<BufId, u64> = self
            .constants
            .iter()
            .map(|(&id, buffer)| (id, buffer.ptr()))
            .collect();
        let mut pooled = |bytes: usize| self.take_pooled(bytes);
        let machine = DeviceRun {
            loaded: self,
            recording: RefCell::new(None),
        };
        let values = exec::execute(&machine, &self.program, &addresses, &constants, &mut pooled)?;
        let mut out: Vec<Memory> = Vec::with_capacity(values.len());
        for (value, o) in values.into_iter().zip(&self.program.outputs) {
            let memory = match value {
                OutputValue::Input(k) => inputs[k].memory.clone(),
                OutputValue::Owned(buffer) => self.memory(o.dtype, &o.shape, buffer),
                OutputValue::Same(j) => out[j].clone(),
            };
            out.push(memory);
        }
        Ok(out)
    }

    /// The device addresses of the inputs, checked against the plan's inputs.
    fn input_addresses(&self, inputs: &[Bound]) -> Result<Vec<u64>, BackendError> {
        if inputs.len() != self.program.inputs.len() {
            return Err(BackendError::InputMismatch {
                index: inputs.len().min(self.program.inputs.len()),
                name: "<count>".into(),
                expected: format!("{} inputs", self.program.inputs.len()),
                got: format!("{} inputs", inputs.len()),
            });
        }
        let mut out = Vec::with_capacity(inputs.len());
        for (k, (bound, &buf)) in inputs.iter().zip(&self.program.inputs).enumerate() {
            let m = bound
                .memory
                .backend::<CudaMemory>()
                .ok_or_else(|| quabla_backend::foreign_memory(crate::NAME))?;
            if !m.is_on(&self.device.inner) {
                return Err(m.elsewhere(&self.device.inner));
            }
            let decl = &self.program.buffers[buf];
            if m.elem() != decl.elem || m.shape().size() != decl.len {
                return Err(BackendError::InputMismatch {
                    index: k,
                    name: format!("input {k}"),
                    expected: format!("{} values stored as {}", decl.len, decl.elem),
                    got: format!("{}{}", m.dtype().name(), m.shape()),
                });
            }
            out.push(m.ptr());
        }
        Ok(out)
    }

    fn memory(&self, dtype: DType, shape: &Shape, buffer: DeviceBuffer) -> Memory {
        Memory::Backend(Arc::new(CudaMemory {
            dtype,
            shape: shape.clone(),
            buffer,
        }))
    }

    /// After a run that succeeded: the donated inputs nobody else holds give their storage to
    /// the pool the next run's outputs are taken from.
    pub fn recycle(&self, inputs: Vec<Bound>) {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        for bound in inputs {
            if !bound.donated || pool.len() >= self.program.outputs.len() {
                continue;
            }
            if let Memory::Backend(m) = bound.memory {
                let any: Arc<dyn std::any::Any + Send + Sync> = m;
                if let Ok(cuda) = any.downcast::<CudaMemory>() {
                    if let Ok(memory) = Arc::try_unwrap(cuda) {
                        pool.push(memory.into_buffer());
                    }
                }
            }
        }
    }

    fn take_pooled(&self, bytes: usize) -> Option<DeviceBuffer> {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        let i = pool.iter().position(|b| b.bytes() == bytes)?;
        Some(pool.swap_remove(i))
    }
}

fn internal(message: &str) -> BackendError {
    BackendError::Device {
        device: crate::NAME.into(),
        message: format!("internal error while loading a plan: {message}"),
    }
}

/// One run of a loaded program: the device as the executor's machine, with the program's
/// kernels.
struct DeviceRun<'a> {
    loaded: &'a Loaded,
    /// While a loop body is recorded: the stream it is recorded on, a stream of its own, so
    /// that work other threads queue on the device's stream meanwhile is never recorded. The
    /// graph is replayed on the device's stream, in order with everything else.
    recording: RefCell<Option<Arc<CudaStream>>>,
}

impl DeviceRun<'_> {
    /// The stream this run's work goes to now.
    fn stream(&self) -> cudarc::driver::sys::CUstream {
        match &*self.recording.borrow() {
            Some(stream) => stream.cu_stream(),
            None => self.loaded.device.inner.stream.cu_stream(),
        }
    }

    /// Refuses what cannot be recorded (an allocation, a readback) while recording.
    fn not_recording(&self, what: &str) -> Result<(), BackendError> {
        if self.recording.borrow().is_some() {
            return Err(internal(&format!("{what} while a loop body is recorded")));
        }
        Ok(())
    }
}

impl Machine for DeviceRun<'_> {
    type Buffer = DeviceBuffer;
    type Graph = CudaGraph;

    fn alloc(&self, bytes: usize, what: &str) -> Result<DeviceBuffer, BackendError> {
        self.not_recording("an allocation")?;
        self.loaded.device.alloc(bytes, what)
    }

    fn address(&self, buffer: &DeviceBuffer) -> u64 {
        buffer.ptr()
    }

    fn launch(&self, kernel: usize, items: u64, args: &[u64]) -> Result<(), BackendError> {
        let block: u64 = if items < 256 {
            items.div_ceil(32) * 32
        } else {
            256
        };
        let grid = items.div_ceil(block).min(1 << 20);
        let mut values: Vec<u64> = Vec::with_capacity(args.len() + 1);
        values.push(items);
        values.extend_from_slice(args);
        let mut params: Vec<*mut c_void> = values
            .iter_mut()
            .map(|v| v as *mut u64 as *mut c_void)
            .collect();
        let f = self.loaded.module.functions[kernel];
        // SAFETY: `f` is a kernel of the loaded module whose parameters are `long long n`
        // then 8-byte addresses and integers, as `values` holds; every address is a live
        // allocation of the lowering's size, ordered on the device's stream.
        unsafe {
            cudarc::driver::result::launch_kernel(
                f,
                (grid as u32, 1, 1),
                (block as u32, 1, 1),
                0,
                self.stream(),
                &mut params,
            )
        }
        .map_err(|e| {
            driver_error(
                &format!("launching {}", self.loaded.program.kernels[kernel].name),
                e,
            )
        })
    }

    fn gemm(&self, g: &Gemm, a: u64, b: u64, c: u64) -> Result<(), BackendError> {
        let blas = self
            .loaded
            .device
            .blas
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // SAFETY: the executor binds every buffer to an allocation of the lowering's size;
        // the stream is the device's or this run's recording stream, both live.
        unsafe { blas.on_stream(self.stream(), |blas| blas.gemm(g, a, b, c)) }
    }

    fn trsm(&self, t: &Trsm, a: u64, b: u64) -> Result<(), BackendError> {
        let blas = self
            .loaded
            .device
            .blas
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // SAFETY: as above.
        unsafe { blas.on_stream(self.stream(), |blas| blas.trsm(t, a, b)) }
    }

    fn solver(
        &self,
        call: &SolverCall,
        address: &dyn Fn(BufId) -> u64,
    ) -> Result<(), BackendError> {
        // Bodies with cuSOLVER calls are never recorded (`Block::replayable`).
        self.not_recording("a cuSOLVER call")?;
        let solver = self
            .loaded
            .device
            .solver
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // SAFETY: as above.
        unsafe { solver.run(&self.loaded.device, call, address) }
    }

    fn read(&self, address: u64, bytes: usize) -> Result<Vec<u8>, BackendError> {
        self.not_recording("a readback")?;
        let out = self.loaded.device.read_values::<u8>(address, bytes)?;
        self.loaded.device.count_readback(bytes);
        Ok(out)
    }

    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<(), BackendError> {
        // SAFETY: both addresses hold `bytes` bytes; stream-ordered.
        unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, self.stream()) }
            .map_err(|e| driver_error("copying on the device", e))
    }

    fn records(&self) -> bool {
        self.loaded.device.graphs()
    }

    fn begin_capture(&self) -> Result<(), BackendError> {
        let device = &self.loaded.device.inner;
        let stream = device
            .context
            .new_stream()
            .map_err(|e| driver_error("making a stream to record a loop body on", e))?;
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| driver_error("recording a loop body", e))?;
        *self.recording.borrow_mut() = Some(stream);
        Ok(())
    }

    fn end_capture(&self) -> Result<CudaGraph, BackendError> {
        let stream = self
            .recording
            .borrow_mut()
            .take()
            .ok_or_else(|| internal("a recording ended that never began"))?;
        match stream.end_capture(CUgraphInstantiate_flags(0)) {
            Ok(Some(graph)) => Ok(graph),
            Ok(None) => Err(internal("a loop body recorded nothing")),
            Err(e) => Err(driver_error("recording a loop body", e)),
        }
    }

    // A graph dropped while its last replay is still queued is freed by the driver when that
    // replay completes (`cuGraphExecDestroy`), so the executor drops finished loops' graphs
    // without waiting for the device.
    fn replay(&self, graph: &CudaGraph) -> Result<(), BackendError> {
        // On the device's stream (not the recording stream `CudaGraph::launch` would use), in
        // order with the launches before and after it.
        // SAFETY: the graph is instantiated and alive; every address it holds is a buffer the
        // executor keeps bound for the whole loop.
        unsafe {
            cudarc::driver::result::graph::launch(
                graph.cu_graph_exec(),
                self.loaded.device.inner.stream.cu_stream(),
            )
        }
        .map_err(|e| driver_error("replaying a loop body", e))
    }
}
