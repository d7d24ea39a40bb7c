//! Scans (`fori_loop` and `scan`, and the loops of their derivatives) in each form: machine
//! code, scalar, swapping and moving.

use super::*;

impl RegionStep {
    pub(super) fn run_scan(
        &self,
        scan: &Scan,
        operands: &[View<'_>],
        shared: &[bool],
        ws: &mut Workspace,
        threads: usize,
    ) -> Result<Vec<Storage<'static>>> {
        let (nc, nk) = (scan.n_carry, scan.n_const);
        if let Some(native) = scan.native() {
            if let Some(values) = self.run_native_scan(scan, native, operands, shared, ws)? {
                return Ok(values);
            }
        }
        if let Some(sb) = &scan.body.scalar {
            return self.run_scalar_scan(scan, sb, operands, shared, ws);
        }
        let mut frame = Frame::new(&scan.body.schedule);
        for (c, v) in operands[nc..nc + nk].iter().enumerate() {
            frame.bind(1 + nc + c, Storage::Borrowed(*v));
        }
        let mut stacked = match self.stacked_buffers(scan, shared, ws) {
            Ok(stacked) => stacked,
            Err(e) => {
                frame.finish(&mut ws.pool);
                return Err(e);
            }
        };
        let mut carries: Vec<Option<Storage<'_>>> = operands[..nc]
            .iter()
            .map(|v| Some(Storage::Borrowed(*v)))
            .collect();
        let looped = self.scan_loop(
            scan,
            operands,
            &mut frame,
            &mut carries,
            &mut stacked,
            ws,
            threads,
        );
        frame.finish(&mut ws.pool);
        if let Err(e) = looped {
            for v in carries.into_iter().flatten() {
                ws.pool.recycle(v);
            }
            for b in stacked {
                ws.pool.recycle(Storage::Owned(b));
            }
            return Err(e);
        }
        let mut by_output: Vec<Option<Storage<'_>>> = carries;
        by_output.extend(stacked.into_iter().map(|b| Some(Storage::Owned(b))));
        let mut positions: Vec<usize> = (0..nc).collect();
        positions.extend(scan.ys.iter().map(|y| y.output));
        self.collect(by_output, &positions, ws)
    }

    /// A buffer for every stacked output of a scan: shared host data when a sibling of it is
    /// a plan output. These are the loop's largest allocations (a reverse-mode tape is one), so
    /// a refusal is an error naming the stacked shape, with the buffers made so far back in the
    /// pool.
    pub(super) fn stacked_buffers(
        &self,
        scan: &Scan,
        shared: &[bool],
        ws: &mut Workspace,
    ) -> Result<Vec<Buffer>> {
        let mut stacked = Vec::with_capacity(scan.ys.len());
        for y in &scan.ys {
            let plan_output = self
                .outs
                .iter()
                .zip(shared)
                .any(|(o, &sh)| sh && o.0 == y.output);
            // The size of the region output `[length, *slice]`, a checked shape.
            let len = y.len * scan.length;
            let buffer = if plan_output {
                ws.pool.alloc_shared(y.dtype, len)
            } else {
                ws.pool.alloc(y.dtype, len)
            };
            match buffer {
                Ok(b) => stacked.push(b),
                Err(e) => {
                    for b in stacked {
                        ws.pool.recycle(Storage::Owned(b));
                    }
                    return Err(out_of_memory(y.dtype, &y.dims, e));
                }
            }
        }
        Ok(stacked)
    }

    /// A scan in machine code: the carries' and constants' elements as arrays of words, the
    /// scanned operands read and the stacked outputs written in place, in chunks of at most
    /// `SCALAR_CHECK_EVERY` iterations with a cancellation check before each. `None` when a
    /// kernel the code calls failed: the caller reruns the loop in the interpreter, which
    /// raises that kernel's error as it always does.
    pub(super) fn run_native_scan(
        &self,
        scan: &Scan,
        native: &NativeScan,
        operands: &[View<'_>],
        shared: &[bool],
        ws: &mut Workspace,
    ) -> Result<Option<Vec<Storage<'static>>>> {
        let (nc, nk) = (scan.n_carry, scan.n_const);
        let mut carries = native::words(&operands[..nc]);
        let consts = native::words(&operands[nc..nc + nk]);
        let mut stacked = self.stacked_buffers(scan, shared, ws)?;
        let looped = (|| -> Result<bool> {
            let xs = &operands[nc + nk..];
            let mut ys: Vec<ViewMut<'_>> = stacked.iter_mut().map(|b| b.view_mut()).collect();
            let mut done = 0;
            while done < scan.length {
                ws.cancel.check()?;
                let count = (scan.length - done).min(SCALAR_CHECK_EVERY);
                let chunk = if scan.reverse {
                    (scan.length - 1 - done, -1, count)
                } else {
                    (done, 1, count)
                };
                if !native.run((&mut carries, &consts), chunk, scan.start, xs, &mut ys) {
                    return Ok(false);
                }
                done += count;
            }
            Ok(true)
        })();
        let carried = looped.and_then(|finished| {
            finished
                .then(|| unflatten(&carries, &operands[..nc], ws))
                .transpose()
        });
        let carried = match carried {
            Ok(Some(c)) => c,
            other => {
                for b in stacked {
                    ws.pool.recycle(Storage::Owned(b));
                }
                return other.map(|_| None);
            }
        };
        let mut by_output: Vec<Option<Storage<'_>>> = carried.into_iter().map(Some).collect();
        by_output.extend(stacked.into_iter().map(|b| Some(Storage::Owned(b))));
        let mut positions: Vec<usize> = (0..nc).collect();
        positions.extend(scan.ys.iter().map(|y| y.output));
        self.collect(by_output, &positions, ws).map(Some)
    }

    /// A scan whose body has a scalar form: every carry, constant, slice and stacked element
    /// is one number.
    pub(super) fn run_scalar_scan(
        &self,
        scan: &Scan,
        body: &ScalarBody,
        operands: &[View<'_>],
        shared: &[bool],
        ws: &mut Workspace,
    ) -> Result<Vec<Storage<'static>>> {
        let (nc, nk) = (scan.n_carry, scan.n_const);
        let mut values = body.values();
        for c in 0..nk {
            if body.reads(1 + nc + c) {
                body.set_input(&mut values, 1 + nc + c, first(&operands[nc + c])?);
            }
        }
        let mut carries = operands[..nc]
            .iter()
            .map(first)
            .collect::<Result<Vec<f64>>>()?;
        let mut stacked = self.stacked_buffers(scan, shared, ws)?;
        let looped = self.scalar_scan_loop(
            scan,
            body,
            operands,
            &mut values,
            &mut carries,
            &mut stacked,
            ws,
        );
        if let Err(e) = looped {
            for b in stacked {
                ws.pool.recycle(Storage::Owned(b));
            }
            return Err(e);
        }
        let mut by_output: Vec<Option<Storage<'_>>> = Vec::with_capacity(nc + stacked.len());
        for (j, &c) in carries.iter().enumerate() {
            match scalar_storage(body, j, c, ws) {
                Ok(v) => by_output.push(Some(v)),
                Err(e) => {
                    for v in by_output.into_iter().flatten() {
                        ws.pool.recycle(v);
                    }
                    for b in stacked {
                        ws.pool.recycle(Storage::Owned(b));
                    }
                    return Err(e);
                }
            }
        }
        by_output.extend(stacked.into_iter().map(|b| Some(Storage::Owned(b))));
        let mut positions: Vec<usize> = (0..nc).collect();
        positions.extend(scan.ys.iter().map(|y| y.output));
        self.collect(by_output, &positions, ws)
    }

    /// The iterations of a scan in scalar form.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scalar_scan_loop(
        &self,
        scan: &Scan,
        body: &ScalarBody,
        operands: &[View<'_>],
        values: &mut [f64],
        carries: &mut [f64],
        stacked: &mut [Buffer],
        ws: &mut Workspace,
    ) -> Result<()> {
        let (nc, nk) = (scan.n_carry, scan.n_const);
        let xs = &operands[nc + nk..];
        let first_x = 1 + nc + nk;
        for step in 0..scan.length {
            if step.is_multiple_of(SCALAR_CHECK_EVERY) {
                ws.cancel.check()?;
            }
            let k = if scan.reverse {
                scan.length - 1 - step
            } else {
                step
            };
            let index = scan.index_dtype.round((scan.start + k) as f64);
            body.set_input(values, 0, index);
            for (j, &c) in carries.iter().enumerate() {
                body.set_input(values, 1 + j, c);
            }
            for (x, v) in xs.iter().enumerate() {
                if body.reads(first_x + x) {
                    if scan.xs_len.get(x) != Some(&1) || k >= v.len() {
                        return Err(internal("a scanned operand does not match its slices"));
                    }
                    body.set_input(values, first_x + x, v.get_f64(k));
                }
            }
            body.run(values, &mut ws.scratch);
            for (y, buf) in scan.ys.iter().zip(stacked.iter_mut()) {
                let mut out = buf.view_mut();
                if k >= out.len() {
                    return Err(internal("a stacked output is too short"));
                }
                out.store_f64(k, &[body.output(values, y.body_output)]);
            }
            for (j, c) in carries.iter_mut().enumerate() {
                *c = body.output(values, j);
            }
        }
        Ok(())
    }

    /// The iterations of a scan: the hot loop, which only moves values between `carries` and
    /// the frame (or swaps slots) and copies stacked slices.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scan_loop<'a>(
        &self,
        scan: &Scan,
        operands: &[View<'a>],
        frame: &mut Frame<'_, 'a>,
        carries: &mut [Option<Storage<'a>>],
        stacked: &mut [Buffer],
        ws: &mut Workspace,
        threads: usize,
    ) -> Result<()> {
        let (nc, nk) = (scan.n_carry, scan.n_const);
        let xs = &operands[nc + nk..];
        let first_x = 1 + nc + nk;
        let mode = scan.body.mode();
        let swaps = scan.swaps.as_deref();
        if swaps.is_some() {
            // The carries live in the frame from here on.
            bind_carries(frame, 1, carries, ws)?;
        }
        for step in 0..scan.length {
            ws.cancel.check()?;
            let k = if scan.reverse {
                scan.length - 1 - step
            } else {
                step
            };
            frame.set_scalar(0, scan.index_dtype, (scan.start + k) as f64, &mut ws.pool)?;
            if swaps.is_none() {
                bind_carries(frame, 1, carries, ws)?;
            }
            for (x, (v, &len)) in xs.iter().zip(&scan.xs_len).enumerate() {
                if frame.reads_input(first_x + x) {
                    let slice = v
                        .slice(k * len, len)
                        .ok_or_else(|| internal("a scanned operand is too short"))?;
                    frame.bind(first_x + x, Storage::Borrowed(slice));
                }
            }
            frame.run(mode, ws, threads)?;
            for (y, buf) in scan.ys.iter().zip(stacked.iter_mut()) {
                let value = frame.output(y.body_output)?;
                if !buf.view_mut().copy_from(k * y.len, value) {
                    return Err(internal(format!(
                        "{}: a stacked output does not match its slice",
                        self.form
                    )));
                }
            }
            match swaps {
                Some(swaps) => {
                    for s in swaps {
                        if let Some(input) = s.input {
                            frame.swap(input, s.result);
                        }
                    }
                }
                None => collect_carries(frame, 1, &scan.body.take, carries, ws)?,
            }
        }
        if let Some(swaps) = swaps {
            for (carry, s) in carries.iter_mut().zip(swaps) {
                *carry = frame.take_slot(s.input.unwrap_or(s.result));
            }
        }
        Ok(())
    }
}
