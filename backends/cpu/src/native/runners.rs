//! The entry points of the machine code: a scan ([`NativeScan`]), a while loop
//! ([`NativeWhile`]) and a whole plan ([`NativePlan`]), each compiled into one function and
//! run on the caller's arrays with fresh scratch memory, checking every length and dtype
//! before the code touches them.

use super::*;

/// A scan in machine code: its carries in registers, slice `k` of each scanned operand read
/// and slice `k` of each stacked output written in place at iteration `k`.
#[derive(Clone, Debug)]
pub(crate) struct NativeScan {
    code: Arc<Code>,
    carry_elements: usize,
    const_elements: usize,
    /// The dtype and slice length of each scanned operand and each stacked output.
    xs: Vec<(DType, usize)>,
    ys: Vec<(DType, usize)>,
}

/// `(carries, loop constants, first position, position step, iterations, index of position 0,
/// scanned operands, stacked outputs)`: iteration `i` is at position `k = first + i * step`
/// of the scanned operands and stacked outputs, and its index value is `k + index of 0`.
/// `scratch` is the run's scratch memory (`Code::scratch` float64 elements).
pub(super) type ScanFn = unsafe extern "C" fn(
    *mut u64,
    *const u64,
    i64,
    i64,
    u64,
    i64,
    *const u8,
    *mut u8,
    *mut f64,
) -> u64;

/// What a loop's code returns when a kernel it calls failed (a singular `solve`): the caller
/// reruns the loop in the interpreter, which raises the kernel's error as it always does.
pub(super) const FAILED: u64 = u64::MAX;

/// The scan to compile: the elements of each carry and loop constant, the dtype of the index,
/// the dtype and slice length of each scanned operand, and, for each stacked output, the body
/// output that fills it, its dtype and its slice length.
#[derive(Clone, Debug)]
pub(crate) struct ScanShape {
    pub carries: Vec<usize>,
    pub consts: Vec<usize>,
    pub index: DType,
    pub xs: Vec<(DType, usize)>,
    pub ys: Vec<(usize, DType, usize)>,
}

impl NativeScan {
    /// The native form of a scan whose body (inputs: index, carries, constants, slices;
    /// outputs: the carries, then what the stacked outputs take) is `body`, or why there is
    /// none.
    pub(crate) fn compile(body: LoopBody<'_>, scan: &ScanShape) -> Result<NativeScan, String> {
        let (nc, nk) = (scan.carries.len(), scan.consts.len());
        let words = body.input_words(1 + nc + nk);
        let typed = |lens: &[usize], tys: &[Type]| -> Vec<(Type, usize)> {
            tys.iter().copied().zip(lens.iter().copied()).collect()
        };
        let carry_words = typed(&scan.carries, &words[1..1 + nc]);
        let const_words = typed(&scan.consts, &words[1 + nc..]);
        let code = Code::build(&[types::I64; 9], Some(types::I64), |e, params| {
            e.note_own_code(body);
            let (carries_at, consts_at) = (params[0], params[1]);
            let (first, step, count, index0) = (params[2], params[3], params[4], params[5]);
            let (xs_at, ys_at) = (params[6], params[7]);
            let constants = e.given_flat(consts_at, &const_words);
            let xs: Vec<Value> = (0..scan.xs.len())
                .map(|x| e.load_pointer(xs_at, x))
                .collect();
            let ys: Vec<Value> = (0..scan.ys.len())
                .map(|y| e.load_pointer(ys_at, y))
                .collect();
            let carries = e.carries(carries_at, &carry_words);
            let (trip, header, exit) = e.counted_loop(count);
            let i = e.b.use_var(trip);
            let offset = e.b.ins().imul(i, step);
            let k = e.b.ins().iadd(first, offset);
            let index = e.b.ins().iadd(k, index0);
            let mut inputs = vec![Val::Regs(vec![e.index_value(scan.index, index)])];
            inputs.extend(e.use_carries(&carries));
            inputs.extend(constants.iter().cloned());
            for (&base, &(dtype, len)) in xs.iter().zip(&scan.xs) {
                inputs.push(e.given_slice(base, k, dtype, len)?);
            }
            let outs = e.loop_body(body, &inputs)?;
            for (&base, &(output, dtype, len)) in ys.iter().zip(&scan.ys) {
                let value = outs.get(output)?;
                if value.len() != len {
                    return None;
                }
                e.put_slice(base, k, dtype, value)?;
            }
            e.set_carries(&carries, &outs)?;
            e.next_trip(trip, header);

            e.b.switch_to_block(exit);
            e.store_carries(carries_at, &carries);
            let ok = e.b.ins().iconst(types::I64, 0);
            e.b.ins().return_(&[ok]);
            Some(())
        })?;
        Ok(NativeScan {
            code: Arc::new(code),
            carry_elements: scan.carries.iter().sum(),
            const_elements: scan.consts.iter().sum(),
            xs: scan.xs.clone(),
            ys: scan.ys.iter().map(|y| (y.1, y.2)).collect(),
        })
    }

    /// Runs `count` iterations at positions `first`, `first + step`, ... (index values those
    /// plus `index0`) on the carries' elements (one after the other, as [`words`]) in place,
    /// with the loop constants' elements in `consts`, reading slice `k` of each scanned
    /// operand in `xs` and writing slice `k` of each stacked output in `ys`. Returns `false`
    /// when an array does not have the dtype or length the code needs (running nothing) or
    /// when a kernel the code calls failed (the loop is then to be rerun in the interpreter).
    pub(crate) fn run(
        &self,
        (carries, consts): (&mut [u64], &[u64]),
        (first, step, count): (usize, isize, usize),
        index0: usize,
        xs: &[View<'_>],
        ys: &mut [ViewMut<'_>],
    ) -> bool {
        if count == 0 {
            return true;
        }
        let last = first as isize + step * (count as isize - 1);
        let end = first.max(last.max(0) as usize) + 1;
        let holds = |len: usize, slice: usize| last >= 0 && end.saturating_mul(slice) <= len;
        let xs_fit = xs.len() == self.xs.len()
            && xs
                .iter()
                .zip(&self.xs)
                .all(|(v, &(d, n))| v.dtype() == d && holds(v.len(), n));
        let ys_fit = ys.len() == self.ys.len()
            && ys
                .iter()
                .zip(&self.ys)
                .all(|(v, &(d, n))| v.dtype() == d && holds(v.len(), n));
        if carries.len() != self.carry_elements
            || consts.len() != self.const_elements
            || !xs_fit
            || !ys_fit
        {
            return false;
        }
        let xs_at: Vec<*const u8> = xs.iter().map(View::as_ptr).collect();
        let mut ys_at: Vec<*mut u8> = ys.iter_mut().map(ViewMut::as_mut_ptr).collect();
        // SAFETY: the entry was compiled with `ScanFn`'s signature. It reads and writes the
        // `carry_elements` values of `carries`, reads the `const_elements` values of `consts`,
        // and reads or writes slice `k` of each array of `xs` and `ys` (with the dtypes and
        // slice lengths it was compiled for) for the positions `k` of this call only: every
        // length and dtype is checked above. It calls only the pure functions of `SYMBOLS`.
        let Some(mut scratch) = self.code.scratch_memory() else {
            return false;
        };
        let status = unsafe {
            let f: ScanFn = std::mem::transmute(self.code.entry);
            f(
                carries.as_mut_ptr(),
                consts.as_ptr(),
                first as i64,
                step as i64,
                count as u64,
                index0 as i64,
                xs_at.as_ptr().cast(),
                ys_at.as_mut_ptr().cast(),
                scratch.as_mut_ptr(),
            )
        };
        status != FAILED
    }
}

/// A while loop in machine code: its predicate and body run alternately.
#[derive(Clone, Debug)]
pub(crate) struct NativeWhile {
    code: Arc<Code>,
    /// Elements of all carries, and of all loop constants, one after the other.
    carry_elements: usize,
    const_elements: usize,
}

/// `(carries, loop constants, most body runs, scratch memory) -> 2 * body runs + stopped`.
pub(super) type WhileFn = unsafe extern "C" fn(*mut u64, *const u64, u64, *mut f64) -> u64;

/// How a chunk of a native while loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WhileChunk {
    /// Bodies run.
    pub runs: usize,
    /// Whether the predicate came out false (after `runs` bodies).
    pub stopped: bool,
}

impl NativeWhile {
    /// The native form of a while loop with predicate `cond` and body `body`, both taking
    /// `(carries.., constants..)`, whose carries and constants have `carries` and `consts`
    /// elements each, or why there is none.
    pub(crate) fn compile(
        cond: LoopBody<'_>,
        body: LoopBody<'_>,
        carries: &[usize],
        consts: &[usize],
    ) -> Result<NativeWhile, String> {
        let words = body.input_words(carries.len() + consts.len());
        // Both bodies read the same carries and constants, from the same words.
        if cond.input_words(words.len()) != words {
            return Err("a predicate and a body that hold the carries differently".into());
        }
        let typed = |lens: &[usize], tys: &[Type]| -> Vec<(Type, usize)> {
            tys.iter().copied().zip(lens.iter().copied()).collect()
        };
        let carry_words = typed(carries, &words[..carries.len()]);
        let const_words = typed(consts, &words[carries.len()..]);
        let code = Code::build(
            &[types::I64, types::I64, types::I64, types::I64],
            Some(types::I64),
            |e, params| {
                e.note_own_code(cond);
                e.note_own_code(body);
                let (carries_at, consts_at, count) = (params[0], params[1], params[2]);
                let constants = e.given_flat(consts_at, &const_words);
                let vars = e.carries(carries_at, &carry_words);
                let inputs = |e: &mut Emitter<'_, '_>| {
                    let mut inputs = e.use_carries(&vars);
                    inputs.extend(constants.iter().cloned());
                    inputs
                };
                // The bodies run so far; `full` after `count` of them.
                let (runs, header, full) = e.counted_loop(count);
                let (run, stop) = (e.b.create_block(), e.b.create_block());
                let given = inputs(e);
                let predicate = e.loop_body(cond, &given)?;
                let p = e.element_at(predicate.first()?, 0)?;
                // The interpreter stops on a predicate equal to 0.0.
                let holds = e.truth(p);
                e.b.ins().brif(holds, run, &[], stop, &[]);

                e.b.switch_to_block(run);
                let given = inputs(e);
                let outs = e.loop_body(body, &given)?;
                if outs.len() != vars.len() {
                    return None;
                }
                e.set_carries(&vars, &outs)?;
                e.next_trip(runs, header);

                for (block, stopped) in [(full, 0), (stop, 1)] {
                    e.b.switch_to_block(block);
                    e.store_carries(carries_at, &vars);
                    let r = e.b.use_var(runs);
                    let twice = e.b.ins().ishl_imm_u(r, 1);
                    let code = e.b.ins().iadd_imm_s(twice, stopped);
                    e.b.ins().return_(&[code]);
                }
                Some(())
            },
        )?;
        Ok(NativeWhile {
            code: Arc::new(code),
            carry_elements: carries.iter().sum(),
            const_elements: consts.iter().sum(),
        })
    }

    /// Runs predicate and body alternately, at most `most` bodies, on the carries' elements
    /// (one after the other, as [`words`]) in place, with the loop constants' elements in
    /// `consts`; `None` when the arrays do not have the lengths the code was built for
    /// (running nothing) or when a kernel the code calls failed (the loop is then to be rerun
    /// in the interpreter).
    pub(crate) fn run(
        &self,
        carries: &mut [u64],
        consts: &[u64],
        most: usize,
    ) -> Option<WhileChunk> {
        if carries.len() != self.carry_elements || consts.len() != self.const_elements {
            return None;
        }
        // SAFETY: the entry was compiled with `WhileFn`'s signature; it reads and writes the
        // `carry_elements` values of `carries` and reads the `const_elements` values of
        // `consts`, both checked above, and calls only the pure functions of `SYMBOLS`.
        let mut scratch = self.code.scratch_memory()?;
        let code = unsafe {
            let f: WhileFn = std::mem::transmute(self.code.entry);
            f(
                carries.as_mut_ptr(),
                consts.as_ptr(),
                most as u64,
                scratch.as_mut_ptr(),
            )
        };
        if code == FAILED {
            return None;
        }
        Some(WhileChunk {
            runs: (code >> 1) as usize,
            stopped: code & 1 == 1,
        })
    }
}

/// A whole plan in machine code: a plan without control flow whose values are all small (a
/// [`GraphBody`]: a scalar model, the loss and gradient of a few parameters) runs as one
/// native function from its inputs to its outputs, with no steps, slots or buffers in between.
#[derive(Clone, Debug)]
pub(crate) struct NativePlan {
    code: Arc<Code>,
    /// Dtype and element count of each input and each output.
    inputs: Vec<(DType, usize)>,
    outputs: Vec<(DType, usize)>,
}

/// `(input pointers, output pointers, scratch memory) -> 0, or FAILED`.
pub(super) type PlanFn = unsafe extern "C" fn(*const *const u8, *const *mut u8, *mut f64) -> u64;

/// The most element operations of values held in registers (the elements of every such node,
/// added up) of a plan compiled whole: every element is a machine instruction or more, and
/// Cranelift's time grows with them, so a long scalar plan stays in the interpreter rather
/// than make one call pay tens of milliseconds of code generation.
pub(crate) const PLAN_ELEMENTS: usize = 4096;

/// The most element operations of values held in memory in a plan compiled whole: past it the
/// interpreter's fused kernels (vector lanes, both cores) outweigh the dispatch the machine
/// code saves (`docs/performance.md`).
pub(crate) const PLAN_MEMORY_ELEMENTS: usize = 16384;

impl NativePlan {
    /// Whether `graph` can be compiled whole: its translated form, or `None`. A plan that
    /// calls a control-flow region is not: its loops keep their own code, which runs in
    /// chunks with the run's cancellation checked between them, where one call of a whole
    /// plan could run nested loops of thousands of trips each without a check.
    pub(crate) fn small_form(graph: &Graph) -> Option<GraphBody> {
        let (mut in_registers, mut in_memory) = (0usize, 0usize);
        for node in graph.nodes() {
            if matches!(node.op, Op::Region(_)) {
                return None;
            }
            let size = node.ty.shape.size();
            if size <= REGISTER_ELEMENTS {
                in_registers += size;
            } else {
                in_memory += size;
            }
            if in_registers > PLAN_ELEMENTS || in_memory > PLAN_MEMORY_ELEMENTS {
                return None;
            }
        }
        GraphBody::new(graph, graph.inputs().count()).ok()
    }

    /// The native form of the plan whose graph has the small form `small`, or why there is
    /// none (a node the code generator declined after all).
    pub(crate) fn compile(small: &GraphBody) -> Result<NativePlan, String> {
        let graph = &small.graph;
        let inputs: Vec<(DType, usize)> = graph
            .inputs()
            .map(|(_, _, ty)| (ty.dtype, ty.shape.size()))
            .collect();
        let outputs: Vec<(DType, usize)> = graph
            .outputs()
            .iter()
            .map(|&id| {
                let ty = &graph.node(id).ty;
                (ty.dtype, ty.shape.size())
            })
            .collect();
        let code = Code::build(&[types::I64; 3], Some(types::I64), |e, params| {
            let (inputs_at, outputs_at) = (params[0], params[1]);
            let zero = e.b.ins().iconst(types::I64, 0);
            let mut given: Vec<Val> = Vec::with_capacity(inputs.len());
            for (x, &(dtype, len)) in inputs.iter().enumerate() {
                let base = e.load_pointer(inputs_at, x);
                given.push(e.given_slice(base, zero, dtype, len)?);
            }
            let outs = e.graph_body(small, &given)?;
            if outs.len() != outputs.len() {
                return None;
            }
            for (y, (value, &(dtype, len))) in outs.iter().zip(&outputs).enumerate() {
                if value.len() != len {
                    return None;
                }
                let base = e.load_pointer(outputs_at, y);
                e.put_slice(base, zero, dtype, value)?;
            }
            let ok = e.b.ins().iconst(types::I64, 0);
            e.b.ins().return_(&[ok]);
            Some(())
        })?;
        Ok(NativePlan {
            code: Arc::new(code),
            inputs,
            outputs,
        })
    }

    /// The outputs of the plan on `inputs`; `None` when an input does not have the dtype or
    /// length the code was built for (running nothing) or when a kernel the code calls failed
    /// (a singular `solve`: the interpreter then runs the plan and raises the kernel's error).
    pub(crate) fn run(&self, inputs: &[&HostData]) -> Option<Vec<HostData>> {
        let fits = inputs.len() == self.inputs.len()
            && inputs
                .iter()
                .zip(&self.inputs)
                .all(|(x, &(dtype, len))| x.dtype() == dtype && x.len() == len);
        if !fits {
            return None;
        }
        let inputs_at: SmallVec<[*const u8; 8]> =
            inputs.iter().map(|&x| View::from(x).as_ptr()).collect();
        // Fresh host data the caller receives as it is; a refused allocation (a few bytes)
        // leaves the run to the interpreter, which reports it.
        let mut outputs: SmallVec<[HostData; 4]> = self
            .outputs
            .iter()
            .map(|&(dtype, len)| HostData::try_zeroed(dtype, len).ok())
            .collect::<Option<_>>()?;
        let outputs_at: SmallVec<[*mut u8; 4]> = outputs
            .iter_mut()
            .map(|y| ViewMut::of_host(y).as_mut_ptr())
            .collect();
        // SAFETY: the entry was compiled with `PlanFn`'s signature. It reads the elements of
        // each input and writes those of each output with the dtypes and lengths it was
        // compiled for (the inputs' checked above, the outputs' allocated above, each held
        // only here), and calls only the pure functions of `SYMBOLS`.
        let mut scratch = self.code.scratch_memory()?;
        let status = unsafe {
            let f: PlanFn = std::mem::transmute(self.code.entry);
            f(
                inputs_at.as_ptr(),
                outputs_at.as_ptr(),
                scratch.as_mut_ptr(),
            )
        };
        (status != FAILED).then(|| outputs.into_vec())
    }
}
