//! `while_loop` in each form: machine code, scalar, swapping and moving, with the predicate
//! body run before every trip.

use super::*;

impl RegionStep {
    pub(super) fn run_while(
        &self,
        (n_carry, max_trips): (usize, Option<usize>),
        (cond, body, native): (&Body, &Body, Option<&NativeWhile>),
        swaps: Option<&[Swap]>,
        operands: &[View<'_>],
        ws: &mut Workspace,
        threads: usize,
    ) -> Result<Vec<Storage<'static>>> {
        if let Some(native) = native {
            if let Some(values) =
                self.run_native_while((n_carry, max_trips), native, operands, ws)?
            {
                return Ok(values);
            }
        }
        if let (Some(c), Some(b)) = (&cond.scalar, &body.scalar) {
            return self.run_scalar_while((n_carry, max_trips), (c, b), operands, ws);
        }
        let mut cond_frame = Frame::new(&cond.schedule);
        let mut body_frame = Frame::new(&body.schedule);
        for (c, v) in operands.iter().enumerate().skip(n_carry) {
            cond_frame.bind(c, Storage::Borrowed(*v));
            body_frame.bind(c, Storage::Borrowed(*v));
        }
        let mut carries: Vec<Option<Storage<'_>>> = operands[..n_carry]
            .iter()
            .map(|v| Some(Storage::Borrowed(*v)))
            .collect();
        let looped = self.while_loop(
            (cond, &mut cond_frame),
            (body, &mut body_frame),
            (swaps, max_trips),
            &mut carries,
            ws,
            threads,
        );
        cond_frame.finish(&mut ws.pool);
        body_frame.finish(&mut ws.pool);
        if let Err(e) = looped {
            for v in carries.into_iter().flatten() {
                ws.pool.recycle(v);
            }
            return Err(e);
        }
        let positions: Vec<usize> = (0..n_carry).collect();
        self.collect(carries, &positions, ws)
    }

    /// A while loop in machine code: the carries' and constants' elements as arrays of words,
    /// run in chunks of at most `SCALAR_CHECK_EVERY` trips (each one predicate check and body
    /// run) with a cancellation check before each chunk, as the scalar form checks. `None`
    /// when a kernel the code calls failed: the caller reruns the loop in the interpreter.
    pub(super) fn run_native_while(
        &self,
        (n_carry, max_trips): (usize, Option<usize>),
        native: &NativeWhile,
        operands: &[View<'_>],
        ws: &mut Workspace,
    ) -> Result<Option<Vec<Storage<'static>>>> {
        let mut carries = native::words(&operands[..n_carry]);
        let consts = native::words(&operands[n_carry..]);
        let mut trips: usize = 0;
        while Some(trips) != max_trips {
            ws.cancel.check()?;
            let most =
                max_trips.map_or(SCALAR_CHECK_EVERY, |m| (m - trips).min(SCALAR_CHECK_EVERY));
            let Some(chunk) = native.run(&mut carries, &consts, most) else {
                return Ok(None);
            };
            trips += chunk.runs;
            if chunk.stopped {
                break;
            }
        }
        let values = unflatten(&carries, &operands[..n_carry], ws)?;
        let values: Vec<Option<Storage<'_>>> = values.into_iter().map(Some).collect();
        let positions: Vec<usize> = (0..n_carry).collect();
        self.collect(values, &positions, ws).map(Some)
    }

    /// A while loop whose predicate and body have scalar forms.
    pub(super) fn run_scalar_while(
        &self,
        (n_carry, max_trips): (usize, Option<usize>),
        (cond, body): (&ScalarBody, &ScalarBody),
        operands: &[View<'_>],
        ws: &mut Workspace,
    ) -> Result<Vec<Storage<'static>>> {
        let (mut cond_values, mut body_values) = (cond.values(), body.values());
        for (c, v) in operands.iter().enumerate().skip(n_carry) {
            // A constant neither reads may have any shape.
            if cond.reads(c) || body.reads(c) {
                let v = first(v)?;
                cond.set_input(&mut cond_values, c, v);
                body.set_input(&mut body_values, c, v);
            }
        }
        let mut carries = operands[..n_carry]
            .iter()
            .map(first)
            .collect::<Result<Vec<f64>>>()?;
        let mut trips: usize = 0;
        loop {
            if Some(trips) == max_trips {
                break;
            }
            if trips.is_multiple_of(SCALAR_CHECK_EVERY) {
                ws.cancel.check()?;
            }
            trips = trips.wrapping_add(1);
            for (j, &c) in carries.iter().enumerate() {
                cond.set_input(&mut cond_values, j, c);
            }
            cond.run(&mut cond_values, &mut ws.scratch);
            // A bool value is 0 or 1.
            if cond.output(&cond_values, 0) == 0.0 {
                break;
            }
            for (j, &c) in carries.iter().enumerate() {
                body.set_input(&mut body_values, j, c);
            }
            body.run(&mut body_values, &mut ws.scratch);
            for (j, c) in carries.iter_mut().enumerate() {
                *c = body.output(&body_values, j);
            }
        }
        let mut values: Vec<Option<Storage<'_>>> = Vec::with_capacity(n_carry);
        for (j, &c) in carries.iter().enumerate() {
            match scalar_storage(body, j, c, ws) {
                Ok(v) => values.push(Some(v)),
                Err(e) => {
                    for v in values.into_iter().flatten() {
                        ws.pool.recycle(v);
                    }
                    return Err(e);
                }
            }
        }
        let positions: Vec<usize> = (0..n_carry).collect();
        self.collect(values, &positions, ws)
    }

    /// The iterations of a while loop. The carries move into the predicate's frame, back, and
    /// into the body's frame; the body's results become the next carries (swapped with the old
    /// carries' slots in the swapping form, so the body's result buffers are reused).
    pub(super) fn while_loop<'a>(
        &self,
        (cond, cond_frame): (&Body, &mut Frame<'_, 'a>),
        (body, body_frame): (&Body, &mut Frame<'_, 'a>),
        (swaps, max_trips): (Option<&[Swap]>, Option<usize>),
        carries: &mut [Option<Storage<'a>>],
        ws: &mut Workspace,
        threads: usize,
    ) -> Result<()> {
        let (cond_mode, body_mode) = (cond.mode(), body.mode());
        for trip in 0usize.. {
            if Some(trip) == max_trips {
                return Ok(());
            }
            ws.cancel.check()?;
            for (j, carry) in carries.iter_mut().enumerate() {
                if cond_frame.reads_input(j) {
                    let value = carry.take().ok_or_else(missing_carry)?;
                    cond_frame.bind(j, value);
                }
            }
            let ran = cond_frame.run(cond_mode, ws, threads);
            let pred = ran.and_then(|()| match cond_frame.output(0)? {
                View::Bool(p) if p.len() == 1 => Ok(p[0]),
                _ => Err(internal("a while predicate is not a rank-0 bool")),
            });
            if cond_mode != Mode::Reuse {
                cond_frame.clear_results(&mut ws.pool);
            }
            for (j, carry) in carries.iter_mut().enumerate() {
                if let Some(value) = cond_frame.take_input(j) {
                    *carry = Some(value);
                }
            }
            if !pred? {
                return Ok(());
            }
            bind_carries(body_frame, 0, carries, ws)?;
            body_frame.run(body_mode, ws, threads)?;
            match swaps {
                Some(swaps) => {
                    for (carry, s) in carries.iter_mut().zip(swaps) {
                        *carry = match s.input {
                            Some(input) => {
                                body_frame.swap(input, s.result);
                                body_frame.take_slot(input)
                            }
                            None => body_frame.take_slot(s.result),
                        };
                    }
                }
                None => collect_carries(body_frame, 0, &body.take, carries, ws)?,
            }
        }
        Ok(())
    }
}
