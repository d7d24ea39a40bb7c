//! Running control-flow regions on the device, as the lowering describes them
//! ([`crate::program::RegionExec`]): one predicate readback per `cond` and per `while_loop`
//! trip, bodies replayed step by step, carries swapped between two allocations rather than
//! copied, loop slices read as views. The host checks for cancellation once per trip.

use super::{internal, Binding, Machine, Run};
use crate::program::{Block, BufId, RegionExec, RegionStep};
use quabla_backend::BackendError;

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
                        let p = self.ptr(operand)? + (pos * slice * elem) as u64;
                        self.bind[body.inputs[1 + n_carry + n_const + x]] = Binding::View(p);
                    }
                    self.steps(&body.steps)?;
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
                    self.steps(&body.steps)?;
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
