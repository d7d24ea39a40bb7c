//! The executor of programs, over any [`Machine`]: the CUDA device (`runtime`), or the host
//! model the test suite runs programs on without a GPU (`tests/common/host.rs`), so the
//! executor's logic — buffer bindings, allocation and release, regions, outputs — is tested
//! without a device and runs unchanged on one.
//!
//! A run binds each buffer of the program to memory as the steps need it: the inputs and
//! constants to the caller's addresses (views), a step's outputs to new allocations (for the
//! plan's outputs, first from storage donated to an earlier run), bodies' inputs as the region
//! executor decides ([`regions`]); a `Release` step drops an allocation after its last use.
//! Each step is passed to the machine as the lowering wrote it. Nothing is ever written into
//! an input or a constant.
//!
//! This module must not know CUDA; the machines own the device calls.

mod regions;

use crate::program::{
    Arg, BufId, Elem, Gemm, Launch, Param, Program, Role, SolverCall, Step, Trsm,
};
use quabla_backend::{cancel, BackendError};
use quabla_ir::DType;
use std::collections::HashMap;

/// What runs the steps: memory, kernels and library calls. Addresses are `u64` (device
/// pointers, or host pointers in the host model); arguments are 8 bytes each.
pub trait Machine {
    /// An owned allocation, freed when dropped.
    type Buffer;

    /// Allocates `bytes` (`OutOfMemory` naming `what` when refused).
    fn alloc(&self, bytes: usize, what: &str) -> Result<Self::Buffer, BackendError>;

    /// The address of an allocation.
    fn address(&self, buffer: &Self::Buffer) -> u64;

    /// Launches kernel `kernel` of the program over `items` work items.
    fn launch(&self, kernel: usize, items: u64, args: &[u64]) -> Result<(), BackendError>;

    fn gemm(&self, g: &Gemm, a: u64, b: u64, c: u64) -> Result<(), BackendError>;

    fn trsm(&self, t: &Trsm, a: u64, b: u64) -> Result<(), BackendError>;

    /// A cuSOLVER call; `address(buf)` is each buffer's address (all bound).
    fn solver(&self, call: &SolverCall, address: &dyn Fn(BufId) -> u64)
        -> Result<(), BackendError>;

    /// Reads `bytes` at `address` back to the host once everything queued is done (a counted
    /// readback).
    fn read(&self, address: u64, bytes: usize) -> Result<Vec<u8>, BackendError>;

    /// Copies `bytes` from `src` to `dst`.
    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<(), BackendError>;

    /// Launches, cuBLAS calls and copies recorded once and replayed as one submission (a CUDA
    /// graph on the device).
    type Graph;

    /// Whether this machine records loop bodies to replay them (see [`regions`]); when not,
    /// every trip runs as launches.
    fn records(&self) -> bool;

    /// Starts recording: until [`Machine::end_capture`], launches, cuBLAS calls and copies are
    /// recorded and not run; an allocation or a readback is an error.
    fn begin_capture(&self) -> Result<(), BackendError>;

    /// Ends the recording begun by [`Machine::begin_capture`] (also after a recorded call
    /// failed, so that the machine stops recording) and makes it replayable.
    fn end_capture(&self) -> Result<Self::Graph, BackendError>;

    /// Runs the recorded work again, with the addresses and arguments it was recorded with.
    fn replay(&self, graph: &Self::Graph) -> Result<(), BackendError>;
}

/// What a buffer is bound to during a run.
pub(crate) enum Binding<B> {
    None,
    /// Memory owned elsewhere (an input, a constant, an operand a body reads).
    View(u64),
    Owned(B),
}

/// Where a plan output's value is after a run.
#[derive(Debug)]
pub enum OutputValue<B> {
    /// Plan input `k` (returned as the caller's own memory).
    Input(usize),
    /// A new allocation.
    Owned(B),
    /// The same value as output `j` before it.
    Same(usize),
}

/// The state of one run (see the module docs).
pub(crate) struct Run<'a, M: Machine> {
    machine: &'a M,
    program: &'a Program,
    bind: Vec<Binding<M::Buffer>>,
    /// Storage donated to earlier runs, for the plan's outputs: an allocation of the asked
    /// size, if any.
    pooled: &'a mut dyn FnMut(usize) -> Option<M::Buffer>,
    /// `solve`'s status buffers, checked once the top-level steps are done.
    deferred: Vec<(BufId, usize)>,
    watch: cancel::Watch,
    /// Region nesting: 0 at the plan's top level.
    depth: usize,
    /// Inside a loop whose body is replayed as a graph, a body's `Release` steps are held
    /// until the loop ends, so that every trip finds the body's buffers where the recording
    /// saw them.
    hold_releases: usize,
    is_output: Vec<bool>,
}

fn internal(message: &str) -> BackendError {
    BackendError::Device {
        device: crate::NAME.into(),
        message: format!("internal error while running a plan: {message}"),
    }
}

/// Runs `program` on `machine`: the plan's inputs at `inputs`, the constant buffers at
/// `constants`. Returns where each output is.
pub fn execute<M: Machine>(
    machine: &M,
    program: &Program,
    inputs: &[u64],
    constants: &HashMap<BufId, u64>,
    pooled: &mut dyn FnMut(usize) -> Option<M::Buffer>,
) -> Result<Vec<OutputValue<M::Buffer>>, BackendError> {
    if inputs.len() != program.inputs.len() {
        return Err(internal("the run was given the wrong number of inputs"));
    }
    let mut is_output = vec![false; program.buffers.len()];
    for o in &program.outputs {
        is_output[o.buf] = true;
    }
    let mut run = Run {
        machine,
        program,
        bind: Vec::with_capacity(program.buffers.len()),
        pooled,
        deferred: Vec::new(),
        watch: cancel::watch(),
        depth: 0,
        hold_releases: 0,
        is_output,
    };
    run.bind
        .resize_with(program.buffers.len(), || Binding::None);
    for (&buf, &address) in program.inputs.iter().zip(inputs) {
        run.bind[buf] = Binding::View(address);
    }
    for (&buf, &address) in constants {
        run.bind[buf] = Binding::View(address);
    }
    run.steps(&program.steps)?;
    for (info, count) in std::mem::take(&mut run.deferred) {
        run.check_singular(info, count)?;
    }
    run.outputs()
}

impl<'a, M: Machine> Run<'a, M> {
    fn outputs(mut self) -> Result<Vec<OutputValue<M::Buffer>>, BackendError> {
        let mut first: HashMap<BufId, usize> = HashMap::new();
        let mut out = Vec::with_capacity(self.program.outputs.len());
        for (j, o) in self.program.outputs.iter().enumerate() {
            if let Some(&i) = first.get(&o.buf) {
                out.push(OutputValue::Same(i));
                continue;
            }
            first.insert(o.buf, j);
            let value = match (
                &self.program.buffers[o.buf].role,
                std::mem::replace(&mut self.bind[o.buf], Binding::None),
            ) {
                (Role::Input(k), _) => OutputValue::Input(*k),
                (_, Binding::Owned(buffer)) => OutputValue::Owned(buffer),
                // A constant (or any view) is copied: outputs are the caller's to keep.
                (_, Binding::View(address)) => {
                    let decl = &self.program.buffers[o.buf];
                    let bytes = decl.len * decl.elem.size();
                    let buffer = self.machine.alloc(bytes, "an output")?;
                    self.machine
                        .copy(self.machine.address(&buffer), address, bytes)?;
                    OutputValue::Owned(buffer)
                }
                (_, Binding::None) => return Err(internal("an output was never computed")),
            };
            out.push(value);
        }
        Ok(out)
    }

    fn address_of(&self, b: BufId) -> Option<u64> {
        match &self.bind[b] {
            Binding::None => None,
            Binding::View(a) => Some(*a),
            Binding::Owned(buffer) => Some(self.machine.address(buffer)),
        }
    }

    /// The address of a bound buffer.
    fn ptr(&self, b: BufId) -> Result<u64, BackendError> {
        self.address_of(b)
            .ok_or_else(|| internal(&format!("buffer {b} is read before it is written")))
    }

    /// The address of a buffer a step writes, allocating it when unbound.
    fn ensure(&mut self, b: BufId) -> Result<u64, BackendError> {
        if let Some(a) = self.address_of(b) {
            return Ok(a);
        }
        let decl = &self.program.buffers[b];
        let bytes = decl.len * decl.elem.size();
        let pooled = if self.is_output[b] {
            (self.pooled)(bytes)
        } else {
            None
        };
        let buffer = match pooled {
            Some(buffer) => buffer,
            None => self
                .machine
                .alloc(bytes, &format!("{} values of {}", decl.len, decl.elem))?,
        };
        let a = self.machine.address(&buffer);
        self.bind[b] = Binding::Owned(buffer);
        Ok(a)
    }

    fn steps(&mut self, steps: &[Step]) -> Result<(), BackendError> {
        for step in steps {
            if self.depth == 0 {
                self.watch.check()?;
            }
            self.step(step)?;
        }
        Ok(())
    }

    fn step(&mut self, step: &Step) -> Result<(), BackendError> {
        match step {
            Step::Launch(l) => self.launch(l),
            Step::Gemm(g) => {
                let (a, b) = (self.ptr(g.a)?, self.ptr(g.b)?);
                let c = self.ensure(g.c)?;
                self.machine.gemm(g, a, b, c)
            }
            Step::Trsm(t) => {
                let (a, b) = (self.ptr(t.a)?, self.ptr(t.b)?);
                self.machine.trsm(t, a, b)
            }
            Step::Solver(call) => {
                for b in crate::lower::step_buffers(step) {
                    self.ensure(b)?;
                }
                let addresses: Vec<u64> = (0..self.bind.len())
                    .map(|b| self.address_of(b).unwrap_or(0))
                    .collect();
                self.machine.solver(call, &|b| addresses[b])
            }
            Step::Region(r) => {
                self.depth += 1;
                let result = self.region(r);
                self.depth -= 1;
                result
            }
            Step::Print(p) => self.print(p),
            Step::CheckSingular { info, count } => {
                if self.depth == 0 {
                    self.deferred.push((*info, *count));
                    Ok(())
                } else {
                    self.check_singular(*info, *count)
                }
            }
            Step::Release(b) => {
                if self.hold_releases == 0 {
                    self.bind[*b] = Binding::None;
                }
                Ok(())
            }
        }
    }

    /// Launches `l`, allocating the buffers it writes.
    fn launch(&mut self, l: &Launch) -> Result<(), BackendError> {
        let params = &self.program.kernels[l.kernel].params;
        let mut values = Vec::with_capacity(l.args.len());
        for (arg, param) in l.args.iter().zip(params) {
            values.push(match (arg, param) {
                (Arg::Buf(b), Param::Out(_)) => self.ensure(*b)?,
                (Arg::Buf(b), _) => self.ptr(*b)?,
                (Arg::Int(v), _) => *v as u64,
            });
        }
        if l.items == 0 {
            return Ok(());
        }
        self.machine.launch(l.kernel, l.items, &values)
    }

    /// Reads `len` elements of buffer `b` as float64 (one readback).
    fn read_values(&self, b: BufId, len: usize) -> Result<Vec<f64>, BackendError> {
        let elem = self.program.buffers[b].elem;
        let bytes = self.machine.read(self.ptr(b)?, len * elem.size())?;
        Ok(decode(&bytes, elem))
    }

    fn check_singular(&self, info: BufId, count: usize) -> Result<(), BackendError> {
        let status = self.read_values(info, count)?;
        if status.iter().any(|&s| s > 0.0) {
            return Err(BackendError::Singular { op: "solve".into() });
        }
        Ok(())
    }

    fn print(&self, p: &crate::program::Print) -> Result<(), BackendError> {
        use std::io::Write;
        let values = self.read_values(p.buf, p.shape.size())?;
        let lines = print_lines(&p.format, p.per_example, &values, p.shape.dims(), p.dtype);
        let mut out = std::io::stdout().lock();
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
        Ok(())
    }
}

/// Little-endian bytes of `elem` values as float64.
pub fn decode(bytes: &[u8], elem: Elem) -> Vec<f64> {
    match elem {
        Elem::F64 => bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect(),
        Elem::F32 => bytes
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().expect("4 bytes"))))
            .collect(),
        Elem::I32 => bytes
            .chunks_exact(4)
            .map(|c| f64::from(i32::from_le_bytes(c.try_into().expect("4 bytes"))))
            .collect(),
        // Nearest for magnitudes past 2^53, as the CPU prints int64 values.
        Elem::I64 => bytes
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")) as f64)
            .collect(),
    }
}

/// The lines `debug_print` writes: `format` with `{}` standing for the value as nested lists
/// (one line per example, prefixed `[k]`, when `per_example`), as the CPU prints them.
pub fn print_lines(
    format: &str,
    per_example: bool,
    values: &[f64],
    dims: &[usize],
    dtype: DType,
) -> Vec<String> {
    fn nested(values: &[f64], dims: &[usize], is_bool: bool) -> String {
        match dims.split_first() {
            None => match values.first() {
                Some(&v) if is_bool => (v != 0.0).to_string(),
                Some(v) => v.to_string(),
                None => String::new(),
            },
            Some((&n, inner)) => {
                let size: usize = inner.iter().product();
                let items: Vec<String> = (0..n)
                    .map(|k| nested(&values[k * size..(k + 1) * size], inner, is_bool))
                    .collect();
                format!("[{}]", items.join(", "))
            }
        }
    }
    let is_bool = dtype == DType::Bool;
    match dims.split_first() {
        Some((&n, inner)) if per_example => {
            let size: usize = inner.iter().product();
            (0..n)
                .map(|k| {
                    let text = nested(&values[k * size..(k + 1) * size], inner, is_bool);
                    format!("[{k}] {}", format.replace("{}", &text))
                })
                .collect()
        }
        _ => vec![format.replace("{}", &nested(values, dims, is_bool))],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_nest_like_the_cpu() {
        let lines = print_lines("x = {}", false, &[1.0, 2.5, 0.0, -1.0], &[2, 2], DType::F64);
        assert_eq!(lines, ["x = [[1, 2.5], [0, -1]]"]);
        let lines = print_lines("{}", true, &[1.0, 0.0], &[2], DType::Bool);
        assert_eq!(lines, ["[0] true", "[1] false"]);
        assert_eq!(
            print_lines("v {}", false, &[0.5], &[], DType::F32),
            ["v 0.5"]
        );
    }

    #[test]
    fn decoding_reads_each_element_type() {
        assert_eq!(decode(&1.5f64.to_le_bytes(), Elem::F64), [1.5]);
        assert_eq!(decode(&(-2.0f32).to_le_bytes(), Elem::F32), [-2.0]);
        assert_eq!(decode(&7i32.to_le_bytes(), Elem::I32), [7.0]);
        assert_eq!(decode(&(-9i64).to_le_bytes(), Elem::I64), [-9.0]);
    }
}
