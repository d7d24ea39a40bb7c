//! Running control-flow regions on the device, as the lowering describes them
//! ([`crate::program::RegionExec`]): one predicate readback per `cond` and per `while_loop`
//! trip, carries swapped between two allocations rather than copied, loop slices read as
//! views. The host checks for cancellation once per trip.
//!
//! A loop body runs step by step, or, when the region replays it
//! ([`RegionStep::replays_body`]), as a recorded graph: the first two trips run as launches
//! with the body's releases held, which binds every buffer the body writes; the carries then
//! alternate between two allocations, so the third and fourth trips are recorded, one graph
//! per alternation, and every later trip replays the graph of its parity. What changes from
//! trip to trip stays outside the graphs: the loop index is filled by its own launch, the
//! slices of scanned operands are copied into fixed buffers before the replay, and the slices
//! of stacked outputs are copied out after it. A recording that fails (a machine that cannot
//! record a call) leaves that loop to its launches; nothing recorded has run, so the trip is
//! run again as launches.

use super::{internal, Binding, Machine, Run};
use crate::program::{Block, BufId, RegionExec, RegionStep};
use quabla_backend::BackendError;

/// The graphs of one loop whose body is replayed (see the module docs).
struct Replay<G> {
    /// The graph of even trips and of odd trips, once recorded.
    by_parity: [Option<G>; 2],
    /// A recording failed: the rest of the loop runs as launches.
    failed: bool,
}

impl<G> Replay<G> {
    fn new() -> Replay<G> {
        Replay {
            by_parity: [None, None],
            failed: false,
        }
    }
}

impl<M: Machine> Run<'_, M> {
    pub(super) fn region(&mut self, r: &RegionStep) -> Result<(), BackendError> {
        match &r.exec {
            RegionExec::Fused(l) => self.launch(l),
            RegionExec::Cond { branches } => {
                let pred = self.read_values(r.operands[0], 1)?[0];
                let block = &branches[if pred != 0.0 { 0 } else { 1 }];
                for (&input, &operand) in block.inputs.iter().zip(&r.operands[1..]) {
                    self.bind[input] = Binding::View(self.ptr(operand)?);
                }
                self.steps(&block.steps)?;
                for (&out, &target) in block.outputs.iter().zip(&r.outputs) {
                    let buffer = self.take_owned(out)?;
                    self.bind[target] = Binding::Owned(buffer);
                }
                self.end_block(block);
                Ok(())
            }
            RegionExec::Scan {
                length,
                start,
                reverse,
                n_carry,
                n_const,
                x_slices,
                y_slices,
                carry_init,
                y_copy,
                index_fill,
                body,
            } => {
                let mut carries = self.init_carries(r, body, 1, *n_carry, carry_init)?;
                let index = body.inputs[0];
                self.ensure(index)?;
                let mut replay = (r.replays_body() && self.machine.records()).then(Replay::new);
                // A replayed body reads each scanned slice from a fixed buffer.
                let mut staged = Vec::new();
                if replay.is_some() {
                    for (x, &slice) in x_slices.iter().enumerate() {
                        let operand = r.operands[n_carry + n_const + x];
                        let bytes = slice * self.program.buffers[operand].elem.size();
                        staged.push(self.machine.alloc(bytes, "a loop slice")?);
                    }
                }
                for k in 0..*length {
                    self.watch.check()?;
                    let pos = if *reverse { length - 1 - k } else { k };
                    let value = (start + pos) as f64;
                    self.machine
                        .launch(*index_fill, 1, &[self.ptr(index)?, value.to_bits()])?;
                    for (j, c) in carries.iter().enumerate() {
                        self.bind[body.inputs[1 + j]] = Binding::View(self.machine.address(c));
                    }
                    for c in 0..*n_const {
                        let p = self.ptr(r.operands[n_carry + c])?;
                        self.bind[body.inputs[1 + n_carry + c]] = Binding::View(p);
                    }
                    for (x, &slice) in x_slices.iter().enumerate() {
                        let operand = r.operands[n_carry + n_const + x];
                        let elem = self.program.buffers[operand].elem.size();
                        let mut p = self.ptr(operand)? + (pos * slice * elem) as u64;
                        if let Some(buffer) = staged.get(x) {
                            let fixed = self.machine.address(buffer);
                            self.machine.copy(fixed, p, slice * elem)?;
                            p = fixed;
                        }
                        self.bind[body.inputs[1 + n_carry + n_const + x]] = Binding::View(p);
                    }
                    self.body_trip(body, k, &mut replay)?;
                    for (y, (&kernel, &slice)) in y_copy.iter().zip(y_slices).enumerate() {
                        let src = self.ptr(body.outputs[n_carry + y])?;
                        let dst = self.ensure(r.outputs[n_carry + y])?;
                        self.machine.launch(
                            kernel,
                            slice as u64,
                            &[src, dst, (pos * slice) as u64],
                        )?;
                    }
                    self.swap_carries(body, &mut carries)?;
                }
                self.finish_carries(r, carries);
                self.end_block(body);
                drop(staged);
                Ok(())
            }
            RegionExec::While {
                n_carry,
                max_trips,
                carry_init,
                cond,
                body,
            } => {
                let mut carries = self.init_carries(r, body, 0, *n_carry, carry_init)?;
                let mut replay = (r.replays_body() && self.machine.records()).then(Replay::new);
                let mut trips = 0usize;
                loop {
                    if max_trips.is_some_and(|m| trips >= m) {
                        break;
                    }
                    self.watch.check()?;
                    for block in [cond, body] {
                        for (j, c) in carries.iter().enumerate() {
                            self.bind[block.inputs[j]] = Binding::View(self.machine.address(c));
                        }
                        for (c, &operand) in r.operands[*n_carry..].iter().enumerate() {
                            self.bind[block.inputs[n_carry + c]] =
                                Binding::View(self.ptr(operand)?);
                        }
                    }
                    self.steps(&cond.steps)?;
                    if self.read_values(cond.outputs[0], 1)?[0] == 0.0 {
                        break;
                    }
                    self.body_trip(body, trips, &mut replay)?;
                    self.swap_carries(body, &mut carries)?;
                    trips += 1;
                }
                self.finish_carries(r, carries);
                self.end_block(cond);
                self.end_block(body);
                Ok(())
            }
        }
    }

    /// Runs trip `trip` of a loop body: as launches, or from the graph of the trip's parity
    /// when the body is replayed (see the module docs).
    fn body_trip(
        &mut self,
        body: &Block,
        trip: usize,
        replay: &mut Option<Replay<M::Graph>>,
    ) -> Result<(), BackendError> {
        let Some(replay) = replay else {
            return self.steps(&body.steps);
        };
        self.hold_releases += 1;
        let ran = self.replayed_trip(body, trip, replay);
        self.hold_releases -= 1;
        ran
    }

    fn replayed_trip(
        &mut self,
        body: &Block,
        trip: usize,
        replay: &mut Replay<M::Graph>,
    ) -> Result<(), BackendError> {
        if trip < 2 || replay.failed {
            return self.steps(&body.steps);
        }
        let parity = trip % 2;
        if let Some(graph) = &replay.by_parity[parity] {
            return self.machine.replay(graph);
        }
        self.machine.begin_capture()?;
        let recorded = self.steps(&body.steps);
        let ended = self.machine.end_capture();
        match (recorded, ended) {
            (Ok(()), Ok(graph)) => {
                self.machine.replay(&graph)?;
                replay.by_parity[parity] = Some(graph);
                Ok(())
            }
            // Nothing recorded has run: this trip and the rest run as launches.
            _ => {
                replay.failed = true;
                self.steps(&body.steps)
            }
        }
    }

    /// The loop's carry buffers, initialized from the operands by the copy kernels.
    fn init_carries(
        &mut self,
        r: &RegionStep,
        body: &Block,
        first_input: usize,
        n_carry: usize,
        kernels: &[usize],
    ) -> Result<Vec<M::Buffer>, BackendError> {
        let mut carries = Vec::with_capacity(n_carry);
        for (j, &kernel) in kernels.iter().enumerate().take(n_carry) {
            let decl = &self.program.buffers[body.inputs[first_input + j]];
            let (len, bytes) = (decl.len, decl.len * decl.elem.size());
            let buffer = self.machine.alloc(bytes, "a loop carry")?;
            let address = self.machine.address(&buffer);
            self.machine
                .launch(kernel, len as u64, &[self.ptr(r.operands[j])?, address])?;
            carries.push(buffer);
        }
        Ok(carries)
    }

    /// After a trip: each carry's new value (a temp of the body) becomes the carry, and the
    /// old carry's allocation becomes that temp's, for the next trip to write.
    fn swap_carries(
        &mut self,
        body: &Block,
        carries: &mut [M::Buffer],
    ) -> Result<(), BackendError> {
        for (j, carry) in carries.iter_mut().enumerate() {
            let out = body.outputs[j];
            let mut fresh = self.take_owned(out)?;
            std::mem::swap(&mut fresh, carry);
            self.bind[out] = Binding::Owned(fresh);
        }
        Ok(())
    }

    fn finish_carries(&mut self, r: &RegionStep, carries: Vec<M::Buffer>) {
        for (buffer, &target) in carries.into_iter().zip(&r.outputs) {
            self.bind[target] = Binding::Owned(buffer);
        }
    }

    /// Takes the allocation a block output owns (the lowering makes moved outputs temps).
    fn take_owned(&mut self, b: BufId) -> Result<M::Buffer, BackendError> {
        match std::mem::replace(&mut self.bind[b], Binding::None) {
            Binding::Owned(buffer) => Ok(buffer),
            other => {
                self.bind[b] = other;
                Err(internal("a region moves a block output it does not own"))
            }
        }
    }

    /// Unbinds a finished block's inputs and temps (freeing the temps).
    fn end_block(&mut self, block: &Block) {
        for &b in block.inputs.iter().chain(&block.temps) {
            self.bind[b] = Binding::None;
        }
    }
}
