//! The executor: runs the steps of a compiled schedule over a frame of slots.
//!
//! A [`Frame`] holds the values of one schedule's slots while it runs. A plan's frame lives for
//! one call; a region body's frame lives for one execution of its region and is rerun once per
//! iteration, its inputs rebound in between (see `region/`). The [`Workspace`]
//! (`workspace.rs`) is what runs share: the buffer pool, the scratch of fused programs and the plan's slot table, whose
//! constants stay bound from one run to the next. A step's own bookkeeping (operand views,
//! output buffers, registers) needs no heap allocation once the workspace is warm.
//!
//! A frame runs in one of three [`Mode`]s. A plan writes its outputs into fresh shared host data;
//! a body writes them into pooled buffers; and a small loop body *keeps* every buffer in its
//! slot between iterations (no liveness releases), so each step writes straight into the
//! buffer it wrote the iteration before and an iteration touches neither the pool nor the
//! allocator.
//!
//! Two rules keep a run from bringing the process down or running forever. Every buffer is
//! allocated fallibly: a refused allocation is `BackendError::OutOfMemory` naming the tensor,
//! the step's other buffers go back to the pool, and the run unwinds like any failed run (the
//! caller's inputs, the executable and the workspace stay usable). And before every step the
//! run checks the cancellation flags it watches ([`Workspace::cancel`], taken once per run), so
//! a cancelled run stops with `BackendError::Cancelled` at the next step; loops check once more
//! per iteration (`region/`).

use crate::buffer::{self, Buffer, Pool, Storage, View, ViewMut};
use crate::kernels::elementwise::{Program, Scratch};
use crate::kernels::linalg::Lu;
use crate::kernels::{indexed, internal, layout, linalg, matmul, reduce};
use crate::schedule::{NanCheck, NodeStep, Schedule, StepKind};
use crate::workspace::{out_of_memory, Workspace};
use quabla_backend::{BackendError, Result};
use quabla_ir::alloc::AllocError;
use quabla_ir::eval::{evaluate, HostValue};
use quabla_ir::{DType, Op};
use quabla_linalg::LuFactors;

/// Externals a fused step binds without allocating; more use a heap vector.
const INLINE_EXTS: usize = 8;
/// Outputs a fused step binds without allocating; more use a heap vector.
const INLINE_OUTS: usize = 4;

/// How a run allocates the buffers its steps write and releases dead values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A plan: outputs in fresh shared host data, dead values back to the pool.
    Plan,
    /// A body: every buffer from the pool, dead values back to it.
    Body,
    /// A small loop body rerun many times: a step reuses the buffer its slot still holds from
    /// the previous run, and nothing is released until the frame finishes.
    Reuse,
}

/// The slots of one schedule being run; `'a` bounds the values of enclosing frames it
/// borrows.
pub(crate) struct Frame<'s, 'a> {
    sched: &'s Schedule,
    slots: Vec<Option<Storage<'a>>>,
}

impl<'s, 'a> Frame<'s, 'a> {
    /// A frame with the schedule's constants bound (they stay bound for the frame's life).
    pub(crate) fn new(sched: &'s Schedule) -> Frame<'s, 'a> {
        let mut slots: Vec<Option<Storage<'a>>> = (0..sched.nslots).map(|_| None).collect();
        for (s, data) in &sched.constants {
            slots[*s] = Some(Storage::Host(data.clone()));
        }
        Frame { sched, slots }
    }

    /// A plan's frame in the slot table the previous run of the same schedule handed back
    /// ([`Frame::finish_plan`]), its constants still bound; a fresh frame when `slots` is
    /// empty.
    pub(crate) fn for_plan(sched: &'s Schedule, slots: Vec<Option<Storage<'a>>>) -> Frame<'s, 'a> {
        if !slots.is_empty() && slots.len() == sched.nslots {
            Frame { sched, slots }
        } else {
            Frame::new(sched)
        }
    }

    /// Binds input `j`; hands the value back when the schedule never reads that input.
    pub(crate) fn bind(&mut self, j: usize, value: Storage<'a>) -> Option<Storage<'a>> {
        match self.sched.input_slots.get(j).copied().flatten() {
            Some(s) => {
                self.slots[s] = Some(value);
                None
            }
            None => Some(value),
        }
    }

    /// Whether the schedule reads input `j`.
    pub(crate) fn reads_input(&self, j: usize) -> bool {
        matches!(self.sched.input_slots.get(j), Some(Some(_)))
    }

    /// Writes `value` as the rank-0 input `j` of `dtype`, reusing the buffer already bound
    /// there when there is one.
    pub(crate) fn set_scalar(
        &mut self,
        j: usize,
        dtype: DType,
        value: f64,
        pool: &mut Pool,
    ) -> Result<()> {
        let Some(s) = self.sched.input_slots.get(j).copied().flatten() else {
            return Ok(());
        };
        let slot = &mut self.slots[s];
        if !matches!(slot, Some(Storage::Owned(b)) if b.holds(dtype, 1)) {
            if let Some(old) = slot.take() {
                pool.recycle(old);
            }
            let b = pool
                .alloc(dtype, 1)
                .map_err(|e| out_of_memory(dtype, &[], e))?;
            *slot = Some(Storage::Owned(b));
        }
        if let Some(Storage::Owned(b)) = slot {
            b.view_mut().store_f64(0, &[value]);
        }
        Ok(())
    }

    /// Takes back the value bound to input `j`, if it is still there.
    pub(crate) fn take_input(&mut self, j: usize) -> Option<Storage<'a>> {
        let s = self.sched.input_slots.get(j).copied().flatten()?;
        self.slots[s].take()
    }

    /// Runs every step; the outputs stay in their slots (in pooled buffers) for the caller to
    /// read or take. In [`Mode::Reuse`] every other value stays too.
    pub(crate) fn run(&mut self, mode: Mode, ws: &mut Workspace, threads: usize) -> Result<()> {
        run_steps(self.sched, &mut self.slots, ws, threads, mode)
    }

    /// Exchanges the values of two slots (a loop's carry and the body result that replaces
    /// it, whose slot keeps the old carry's buffer for the next iteration to write).
    pub(crate) fn swap(&mut self, a: usize, b: usize) {
        self.slots.swap(a, b);
    }

    /// Takes the value of slot `s`.
    pub(crate) fn take_slot(&mut self, s: usize) -> Option<Storage<'a>> {
        self.slots.get_mut(s).and_then(Option::take)
    }

    /// Output `j` of the last run.
    pub(crate) fn output(&self, j: usize) -> Result<View<'_>> {
        let (s, _) = self
            .sched
            .outputs
            .get(j)
            .ok_or_else(|| internal(format!("a body has no output {j}")))?;
        view(&self.slots, *s)
    }

    /// Output `j` of the last run: moved out of its slot when `take` (the caller compiled
    /// that as safe: the slot is rebound or rewritten before the next run and no later
    /// output reads it), else a second handle on it (see [`Storage::share`]).
    pub(crate) fn take_output(
        &mut self,
        j: usize,
        take: bool,
        pool: &mut Pool,
    ) -> Result<Storage<'a>> {
        let (s, _) = *self
            .sched
            .outputs
            .get(j)
            .ok_or_else(|| internal(format!("a body has no output {j}")))?;
        let slot = &mut self.slots[s];
        let value = if take {
            slot.take()
        } else {
            slot.as_ref().map(|v| v.share(pool)).transpose()?
        };
        value.ok_or_else(|| internal(format!("body output {j} was not computed")))
    }

    /// Returns the step-produced outputs still held to the pool, ready for the next run.
    pub(crate) fn clear_results(&mut self, pool: &mut Pool) {
        for &s in &self.sched.result_slots {
            if let Some(v) = self.slots[s].take() {
                pool.recycle(v);
            }
        }
    }

    /// Returns every value still held to the pool.
    pub(crate) fn finish(self, pool: &mut Pool) {
        for v in self.slots.into_iter().flatten() {
            pool.recycle(v);
        }
    }

    /// Ends a plan's run: step results go back to the pool and the inputs are dropped, while
    /// the constants stay bound in the slot table handed back for the next run of the same
    /// schedule ([`Frame::for_plan`]).
    pub(crate) fn finish_plan(mut self, pool: &mut Pool) -> Vec<Option<Storage<'a>>> {
        for (slot, &produced) in self.slots.iter_mut().zip(&self.sched.produced) {
            if produced {
                if let Some(v) = slot.take() {
                    pool.recycle(v);
                }
            }
        }
        for &s in self.sched.input_slots.iter().flatten() {
            self.slots[s] = None;
        }
        self.slots
    }

    /// The values of every slot (how a plan's outputs are read after its run).
    pub(crate) fn slots(&self) -> &[Option<Storage<'a>>] {
        &self.slots
    }
}

/// The buffer a step writes for `slot`: fresh shared host data for a plan output, the slot's
/// own previous buffer in [`Mode::Reuse`] when it fits, else one from the pool.
fn alloc(
    sched: &Schedule,
    slots: &mut [Option<Storage<'_>>],
    pool: &mut Pool,
    mode: Mode,
    slot: usize,
    dtype: DType,
    len: usize,
) -> std::result::Result<Buffer, AllocError> {
    match mode {
        Mode::Plan if sched.output_slot[slot] => pool.alloc_shared(dtype, len),
        Mode::Reuse => match slots[slot].take() {
            Some(Storage::Owned(b)) => match b.refit(dtype, len) {
                Ok(b) => Ok(b),
                Err(b) => {
                    pool.recycle(Storage::Owned(b));
                    pool.alloc(dtype, len)
                }
            },
            other => {
                if let Some(v) = other {
                    pool.recycle(v);
                }
                pool.alloc(dtype, len)
            }
        },
        _ => pool.alloc(dtype, len),
    }
}

/// Runs the steps of `sched` in order; outside [`Mode::Reuse`], dead slots go back to the
/// pool after each step.
fn run_steps(
    sched: &Schedule,
    slots: &mut [Option<Storage<'_>>],
    ws: &mut Workspace,
    threads: usize,
    mode: Mode,
) -> Result<()> {
    // LU factors shared between steps (empty, and never allocated, for most schedules).
    let mut factors: Vec<Option<LuFactors>> = Vec::new();
    let profiling = mode == Mode::Plan && ws.step_seconds.is_some();
    for (k, step) in sched.steps.iter().enumerate() {
        ws.cancel.check()?;
        let started = profiling.then(std::time::Instant::now);
        match &step.kind {
            StepKind::Fused(program) if program.size == 1 => {
                run_one_element(sched, program, slots, ws, mode)?;
            }
            StepKind::Fused(program) => {
                debug_assert!(ws.bufs.is_empty());
                let mut ran = Ok(());
                for &(s, dt) in &program.outs {
                    match alloc(sched, slots, &mut ws.pool, mode, s, dt, program.size) {
                        Ok(b) => ws.bufs.push(b),
                        Err(e) => {
                            ran = Err(out_of_memory(dt, &program.dims, e));
                            break;
                        }
                    }
                }
                let ran = ran.and_then(|()| {
                    run_fused(program, slots, &mut ws.bufs, &mut ws.scratch, threads)
                });
                if let Err(e) = ran {
                    for b in ws.bufs.drain(..) {
                        ws.pool.recycle(Storage::Owned(b));
                    }
                    return Err(e);
                }
                for (&(s, _), b) in program.outs.iter().zip(ws.bufs.drain(..)) {
                    slots[s] = Some(Storage::Owned(b));
                }
            }
            StepKind::Node(node) => {
                let pool = &mut ws.pool;
                let (dtype, len) = (node.ty.dtype, node.ty.shape.size());
                let mut buf = alloc(sched, slots, pool, mode, node.out, dtype, len)
                    .map_err(|e| out_of_memory(dtype, node.ty.shape.dims(), e))?;
                let mut extra: Vec<Buffer> = Vec::with_capacity(node.also.len());
                for (_, s, ty) in &node.also {
                    match alloc(sched, slots, pool, mode, *s, ty.dtype, ty.shape.size()) {
                        Ok(b) => extra.push(b),
                        Err(e) => {
                            pool.recycle(Storage::Owned(buf));
                            for b in extra {
                                pool.recycle(Storage::Owned(b));
                            }
                            return Err(out_of_memory(ty.dtype, ty.shape.dims(), e));
                        }
                    }
                }
                let lu = match node.lu {
                    None => Lu::Own,
                    Some(share) => {
                        if factors.is_empty() {
                            factors.resize_with(sched.lu_shares, || None);
                        }
                        match factors.get_mut(share.id) {
                            Some(cell) => Lu::Shared {
                                cell,
                                last: share.last,
                            },
                            None => return Err(internal("a shared factorization out of range")),
                        }
                    }
                };
                if let Err(e) = run_node(node, slots, (&mut buf, &mut extra), lu, threads, pool) {
                    pool.recycle(Storage::Owned(buf));
                    for b in extra {
                        pool.recycle(Storage::Owned(b));
                    }
                    return Err(e);
                }
                slots[node.out] = Some(Storage::Owned(buf));
                for ((_, s, _), b) in node.also.iter().zip(extra) {
                    slots[*s] = Some(Storage::Owned(b));
                }
            }
            StepKind::Region(region) => {
                let results = {
                    let operands = region
                        .args()
                        .iter()
                        .map(|&s| view(slots, s))
                        .collect::<Result<Vec<_>>>()?;
                    let shared: Vec<bool> = region
                        .outs()
                        .iter()
                        .map(|&(_, s)| mode == Mode::Plan && sched.output_slot[s])
                        .collect();
                    region.run(&operands, &shared, ws, threads)?
                };
                for (&(_, s), value) in region.outs().iter().zip(results) {
                    // In Mode::Reuse the slot still holds the previous run's value.
                    if let Some(old) = slots[s].replace(value) {
                        ws.pool.recycle(old);
                    }
                }
            }
        }
        if let Some(check) = &step.check {
            check_finite(check, slots)?;
        }
        if mode != Mode::Reuse {
            for &s in &step.free {
                if let Some(st) = slots[s].take() {
                    ws.pool.recycle(st);
                }
            }
        }
        if let (Some(started), Some(times)) = (started, ws.step_seconds.as_mut()) {
            if let Some(t) = times.get_mut(k) {
                *t += started.elapsed().as_secs_f64();
            }
        }
    }
    Ok(())
}

/// Prints `format` with `{}` replaced by the value (one line per leading index when
/// `per_example`) on standard output; a closed output is not an error of the plan.
fn debug_print(format: &str, per_example: bool, x: &View<'_>, dims: &[usize]) {
    use std::io::Write;
    let values: Vec<f64> = (0..x.len()).map(|i| x.get_f64(i)).collect();
    let is_bool = matches!(x, View::Bool(_));
    let mut lines = Vec::new();
    match dims.split_first() {
        Some((&n, inner)) if per_example => {
            let size: usize = inner.iter().product();
            for k in 0..n {
                let text = nested(&values[k * size..(k + 1) * size], inner, is_bool);
                lines.push(format!("[{k}] {}", format.replace("{}", &text)));
            }
        }
        _ => lines.push(format.replace("{}", &nested(&values, dims, is_bool))),
    }
    let mut out = std::io::stdout().lock();
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
}

/// `values` of shape `dims` as nested lists: `1.5`, `[1, 2]`, `[[1, 2], [3, 4]]`.
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

/// The non-finite check of one step: an error when the value it wrote holds a NaN or an
/// infinity while every operand is finite (a non-finite operand only passes one on).
fn check_finite(check: &NanCheck, slots: &[Option<Storage<'_>>]) -> Result<()> {
    let out = view(slots, check.out)?;
    let Some((index, bad)) = first_non_finite(&out) else {
        return Ok(());
    };
    let mut ranges = Vec::with_capacity(check.operands.len());
    for (name, s) in &check.operands {
        let v = view(slots, *s)?;
        if first_non_finite(&v).is_some() {
            return Ok(());
        }
        ranges.push(format!("{name} in {}", range(&v)));
    }
    let mut message = format!(
        "non-finite value {bad} at element {index} of a node whose operands are finite:\n  {}",
        check.line
    );
    if !ranges.is_empty() {
        message.push_str(&format!("\n  operands: {}", ranges.join(", ")));
    }
    let at = check
        .origin
        .loc
        .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
    match (check.origin.rule, at) {
        (Some((mode, of)), at) => {
            let pass = if mode == "vjp" {
                "the backward pass"
            } else {
                "a forward-mode derivative"
            };
            let primal = at.map_or(String::new(), |at| {
                format!(", differentiating the {of} at {at}")
            });
            message.push_str(&format!(
                "\n  in {pass}: made by the {mode} rule of {of}{primal}"
            ));
        }
        (None, Some(at)) => message.push_str(&format!("\n  created at {at}")),
        (None, None) => message.push_str("\n  (no source line recorded for this node)"),
    }
    Err(BackendError::NonFinite { message })
}

fn first_non_finite(v: &View<'_>) -> Option<(usize, f64)> {
    let find = |xs: &mut dyn Iterator<Item = f64>| xs.enumerate().find(|(_, x)| !x.is_finite());
    match v {
        View::F32(xs) => find(&mut xs.iter().map(|&x| x as f64)),
        View::F64(xs) => find(&mut xs.iter().copied()),
        View::Bool(_) | View::I32(_) | View::I64(_) => None,
    }
}

/// `[min, max]` of a finite view (`[false, true]` for bools), `[]` when empty.
fn range(v: &View<'_>) -> String {
    let values: Vec<f64> = match v {
        View::F32(xs) => xs.iter().map(|&x| x as f64).collect(),
        View::F64(xs) => xs.to_vec(),
        View::Bool(xs) => xs.iter().map(|&b| f64::from(u8::from(b))).collect(),
        View::I32(xs) => xs.iter().map(|&x| x as f64).collect(),
        View::I64(xs) => xs.iter().map(|&x| x as f64).collect(),
    };
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if values.is_empty() {
        "[]".into()
    } else {
        format!("[{lo}, {hi}]")
    }
}

/// Runs a one-element fused program (scalar loop arithmetic) on plain values: the externals
/// are read as numbers and each result is written into the buffer its slot already holds when
/// the mode keeps buffers, so a steady-state iteration moves no buffer at all.
fn run_one_element(
    sched: &Schedule,
    program: &Program,
    slots: &mut [Option<Storage<'_>>],
    ws: &mut Workspace,
    mode: Mode,
) -> Result<()> {
    let (values, regs, results) = ws.scratch.one_element(program);
    for e in &program.exts {
        values.push(view(slots, e.slot)?.get_f64(0));
    }
    program.run_one(values, regs, results);
    for (&(s, dtype), &v) in program.outs.iter().zip(results.iter()) {
        if mode == Mode::Reuse {
            if let Some(Storage::Owned(b)) = &mut slots[s] {
                if b.holds(dtype, 1) {
                    b.view_mut().store_f64(0, &[v]);
                    continue;
                }
            }
        }
        let mut b = alloc(sched, slots, &mut ws.pool, mode, s, dtype, 1)
            .map_err(|e| out_of_memory(dtype, &program.dims, e))?;
        b.view_mut().store_f64(0, &[v]);
        if let Some(old) = slots[s].replace(Storage::Owned(b)) {
            ws.pool.recycle(old);
        }
    }
    Ok(())
}

/// Runs one fused program into `bufs` (one buffer per output). Operand views and output
/// views live on the stack for the common sizes, so the step allocates nothing.
fn run_fused(
    program: &Program,
    slots: &[Option<Storage<'_>>],
    bufs: &mut [Buffer],
    scratch: &mut Scratch,
    threads: usize,
) -> Result<()> {
    let n = program.exts.len();
    let mut inline = [View::F64(&[]); INLINE_EXTS];
    let heap: Vec<View<'_>>;
    let exts: &[View<'_>] = if n <= INLINE_EXTS {
        for (d, e) in inline.iter_mut().zip(&program.exts) {
            *d = view(slots, e.slot)?;
        }
        &inline[..n]
    } else {
        heap = program
            .exts
            .iter()
            .map(|e| view(slots, e.slot))
            .collect::<Result<_>>()?;
        &heap
    };
    let nout = bufs.len();
    if nout <= INLINE_OUTS {
        let mut outs: [ViewMut<'_>; INLINE_OUTS] = std::array::from_fn(|_| ViewMut::F64(&mut []));
        for (o, b) in outs.iter_mut().zip(bufs.iter_mut()) {
            *o = b.view_mut();
        }
        program.run(exts, &mut outs[..nout], threads, scratch);
    } else {
        let mut outs: Vec<ViewMut<'_>> = bufs.iter_mut().map(Buffer::view_mut).collect();
        program.run(exts, &mut outs, threads, scratch);
    }
    Ok(())
}

/// Runs one node into `buf` (and the extra outputs of a multi-output node into `extra`); a
/// kernel that needs working memory of its own takes it from `pool` and gives it back.
fn run_node(
    node: &NodeStep,
    slots: &[Option<Storage<'_>>],
    (buf, extra): (&mut buffer::Buffer, &mut [buffer::Buffer]),
    lu: Lu<'_>,
    threads: usize,
    pool: &mut Pool,
) -> Result<()> {
    // The kernels index their operands by the extents they are given; a value whose length
    // disagreed would be an out-of-bounds index, so it is an error here instead.
    let arg = |i: usize| -> Result<(View<'_>, &[usize])> {
        let (s, dims) = node
            .args
            .get(i)
            .ok_or_else(|| internal("missing operand"))?;
        let v = view(slots, *s)?;
        if Some(v.len()) != dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) {
            return Err(internal(format!(
                "operand {i} of {} holds {} elements for extents {dims:?}",
                node.op.name(),
                v.len()
            )));
        }
        Ok((v, dims.as_slice()))
    };
    let out = buf.view_mut();
    if out.len() != node.ty.shape.size() {
        return Err(internal(format!(
            "the result of {} holds {} elements for shape {}",
            node.op.name(),
            out.len(),
            node.ty.shape
        )));
    }
    let out_dims = node.ty.shape.dims();
    if node.integer {
        return run_integer_node(node, (0..node.args.len()).map(arg), out);
    }
    match &node.op {
        Op::Reduce { kind, axes } => {
            let (x, dims) = arg(0)?;
            let native = node.native_f32;
            if kind.is_whole() {
                reduce::reduce_all(kind.reducer(), x, out, threads, native)
            } else {
                reduce::reduce_axes(
                    kind.reducer(),
                    x,
                    dims,
                    axes,
                    out,
                    threads,
                    native,
                    node.rows_split[0],
                )
            }
        }
        Op::Cumsum { axis, reverse } => {
            let (x, dims) = arg(0)?;
            reduce::cumsum(x, dims, *axis, *reverse, out, threads)
        }
        Op::Reshape { .. } | Op::StopGradient => layout::copy(arg(0)?.0, out),
        Op::DebugPrint {
            format,
            per_example,
        } => {
            let (x, dims) = arg(0)?;
            debug_print(format, *per_example, &x, dims);
            layout::copy(x, out)
        }
        Op::Transpose { perm } => {
            let (x, dims) = arg(0)?;
            layout::transpose(x, dims, perm, out, threads)
        }
        Op::Broadcast { shape } => {
            let (x, dims) = arg(0)?;
            layout::broadcast(x, dims, shape.dims(), out)
        }
        Op::Concat { axis } => {
            let parts = (0..node.args.len()).map(arg).collect::<Result<Vec<_>>>()?;
            layout::concat(&parts, *axis, out_dims, out)
        }
        Op::Slice { starts, sizes } => {
            let (x, dims) = arg(0)?;
            layout::slice(x, dims, starts, sizes, out)
        }
        Op::PadSlice { starts, shape } => {
            let (x, dims) = arg(0)?;
            layout::pad_slice(x, dims, starts, shape.dims(), out)
        }
        Op::Gather { axis, indices } => {
            let (x, dims) = arg(0)?;
            layout::gather(x, dims, *axis, indices, out)
        }
        Op::ScatterAdd { axis, indices } => {
            let ((base, dims), (upd, _)) = (arg(0)?, arg(1)?);
            layout::scatter_add(base, upd, dims, *axis, indices, out)
        }
        Op::IndexGather { axis, batch } => {
            indexed::index_gather(arg(0)?, arg(1)?, (*axis, *batch), out)
        }
        Op::IndexScatter { axis, batch, mode } => {
            let (base, idx, (upd, _)) = (arg(0)?, arg(1)?, arg(2)?);
            indexed::index_scatter(base, idx, upd, (*axis, *batch, *mode), out)
        }
        Op::Matmul => {
            let ((a, ad), (b, bd)) = (arg(0)?, arg(1)?);
            let product = matmul::Product {
                threads,
                native_f32: node.native_f32,
                lhs_transposed: node.lhs_transposed,
                rows_split: node.rows_split,
            };
            matmul::matmul((a, ad), (b, bd), out_dims, out, product, pool)
        }
        Op::Solve { transpose_a } => {
            let ((a, ad), (b, bd)) = (arg(0)?, arg(1)?);
            let r = linalg::solve(a, ad, b, bd, *transpose_a, lu, out, threads);
            // faer's AVX kernels leave the upper vector state dirty (see matmul.rs).
            matmul::clear_upper_vector_state();
            r
        }
        Op::TriangularSolve {
            lower,
            transpose_a,
            unit_diagonal,
        } => {
            let ((a, ad), (b, bd)) = (arg(0)?, arg(1)?);
            let r =
                linalg::triangular_solve(a, ad, b, bd, *lower, *transpose_a, *unit_diagonal, out);
            // faer's AVX kernels leave the upper vector state dirty (see matmul.rs).
            matmul::clear_upper_vector_state();
            r
        }
        Op::Cholesky => {
            let (a, ad) = arg(0)?;
            let r = linalg::cholesky(a, ad, out);
            // faer's AVX kernels leave the upper vector state dirty (see matmul.rs).
            matmul::clear_upper_vector_state();
            r
        }
        Op::CholeskyAd => {
            let ((l, ld), (da, _)) = (arg(0)?, arg(1)?);
            let r = linalg::cholesky_ad(l, da, ld, out);
            // faer's AVX kernels leave the upper vector state dirty (see matmul.rs).
            matmul::clear_upper_vector_state();
            r
        }
        Op::Linalg(kind) => {
            let (a, ad) = arg(0)?;
            let kinds: Vec<_> = std::iter::once(*kind)
                .chain(node.also.iter().map(|a| a.0))
                .collect();
            let outs = std::iter::once(out)
                .chain(extra.iter_mut().map(|b| b.view_mut()))
                .collect();
            let r = linalg::linalg(&kinds, a, ad, lu, outs);
            // faer's AVX kernels leave the upper vector state dirty (see matmul.rs).
            matmul::clear_upper_vector_state();
            r
        }
        Op::Custom(_) => Err(BackendError::Unsupported {
            op: "custom".into(),
            device: "cpu".into(),
            reason: "custom rules must be inlined before a plan reaches a backend".into(),
        }),
        Op::Input { .. }
        | Op::Constant { .. }
        | Op::Cast { .. }
        | Op::Unary(_)
        | Op::Powi(_)
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Where
        | Op::Region(_) => Err(internal(format!(
            "{} scheduled as a single kernel",
            node.op.name()
        ))),
    }
}

/// An integer node (`NodeStep::integer`): evaluated by the reference semantics of
/// `quabla_ir::eval::evaluate` on copies of its operands, then copied into `out`. Integer
/// values are exact there (int64 never passes through a float64), and the values are the
/// folding rule's, so a folded integer constant and a computed one agree bit for bit.
fn run_integer_node<'v>(
    node: &NodeStep,
    args: impl Iterator<Item = Result<(View<'v>, &'v [usize])>>,
    mut out: ViewMut<'_>,
) -> Result<()> {
    let mut data = Vec::with_capacity(node.args.len());
    let mut shapes = Vec::with_capacity(node.args.len());
    for a in args {
        let (v, dims) = a?;
        let host = v.to_host().map_err(|e| out_of_memory(v.dtype(), dims, e))?;
        data.push(host);
        shapes.push(quabla_ir::Shape::new(dims.to_vec()).map_err(|e| internal(e.to_string()))?);
    }
    let operands: Vec<HostValue<'_>> = data
        .iter()
        .zip(&shapes)
        .map(|(data, shape)| HostValue { data, shape })
        .collect();
    let value =
        evaluate(&node.op, &operands, &node.ty).ok_or_else(|| BackendError::Unsupported {
            op: node.op.name().into(),
            device: "cpu".into(),
            reason: format!("{} has no integer kernel", node.op.name()),
        })?;
    if !out.copy_from(0, View::from(&value)) {
        return Err(internal(format!(
            "the integer kernel of {} wrote a value of another type",
            node.op.name()
        )));
    }
    Ok(())
}

/// The value in slot `s`.
pub(crate) fn view<'v>(slots: &'v [Option<Storage<'_>>], s: usize) -> Result<View<'v>> {
    slots
        .get(s)
        .and_then(|x| x.as_ref())
        .map(Storage::view)
        .ok_or_else(|| internal(format!("slot {s} is empty when read")))
}
