//! The instructions of loops and graph bodies: slices and carries of the caller's arrays,
//! a graph body node by node (register form here, memory form in `memory.rs`), the regions
//! nested in it, and `solve`.

use super::code::BACKTRACKING_INSTRUCTIONS;
use super::*;
use quabla_ir::indexed::IndexLayout;

impl Emitter<'_, '_> {
    pub(super) fn flags() -> MemFlagsData {
        MemFlagsData::trusted()
    }

    /// Element `j` of an array of pointers at `at`.
    pub(super) fn load_pointer(&mut self, at: Value, j: usize) -> Value {
        self.b.ins().load(types::I64, Self::flags(), at, offset(j))
    }

    /// The address of element `j` of slice `k` (of `len` elements) of an array of `dtype` at
    /// `base`.
    pub(super) fn element(
        &mut self,
        base: Value,
        k: Value,
        dtype: DType,
        len: usize,
        j: usize,
    ) -> Value {
        let size = match dtype {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::Bool => 1,
        };
        let slice = self.b.ins().imul_imm_s(k, (size * len) as i64);
        let at = self.b.ins().iadd(base, slice);
        self.b.ins().iadd_imm_s(at, (size * j) as i64)
    }

    /// Slice `k` of `len` elements of an array of `dtype`, as the code holds them
    /// ([`super::word`]): floats and bools widened to float64 as `View::get_f64` reads them,
    /// integers as int64.
    pub(super) fn load_slice(
        &mut self,
        base: Value,
        k: Value,
        dtype: DType,
        len: usize,
    ) -> Vec<Value> {
        (0..len)
            .map(|j| {
                let at = self.element(base, k, dtype, len, j);
                let flags = Self::flags();
                match dtype {
                    DType::F64 => self.b.ins().load(types::F64, flags, at, 0),
                    DType::F32 => {
                        let v = self.b.ins().load(types::F32, flags, at, 0);
                        self.b.ins().fpromote(types::F64, v)
                    }
                    DType::Bool => {
                        let v = self.b.ins().load(types::I8, flags, at, 0);
                        let holds = self.b.ins().icmp_imm_u(IntCC::NotEqual, v, 0);
                        self.select_one_zero(holds)
                    }
                    DType::I32 => self.b.ins().sload32(flags, at, 0),
                    DType::I64 => self.b.ins().load(types::I64, flags, at, 0),
                }
            })
            .collect()
    }

    /// Stores `values` (of `dtype`, as the code holds them) as slice `k` of an array of
    /// `dtype`, as `ViewMut::store_f64` stores floats and an integer array holds integers.
    pub(super) fn store_slice(&mut self, base: Value, k: Value, dtype: DType, values: &[Value]) {
        for (j, &v) in values.iter().enumerate() {
            let at = self.element(base, k, dtype, values.len(), j);
            let stored = match dtype {
                DType::F64 => v,
                DType::F32 => self.b.ins().fdemote(types::F32, v),
                DType::Bool => {
                    let zero = self.b.ins().f64const(0.0);
                    let holds = self.b.ins().fcmp(FloatCC::NotEqual, v, zero);
                    let one = self.b.ins().iconst(types::I8, 1);
                    let none = self.b.ins().iconst(types::I8, 0);
                    self.b.ins().select(holds, one, none)
                }
                DType::I64 => self.round(dtype, v),
                DType::I32 => {
                    let v = self.round(dtype, v);
                    self.b.ins().istore32(Self::flags(), v, at, 0);
                    continue;
                }
            };
            self.b.ins().store(Self::flags(), stored, at, 0);
        }
    }

    /// Where a loop keeps each carry (of the given word type and elements, stored one after the
    /// other in the array of words at `at`): one variable per element holding its value, or,
    /// for a carry too large for registers, its storage in that array.
    pub(super) fn carries(&mut self, at: Value, carries: &[(Type, usize)]) -> Vec<Carry> {
        let mut first = 0;
        carries
            .iter()
            .map(|&(ty, len)| {
                let carry = if len <= REGISTER_ELEMENTS {
                    let values: Vec<Value> = (first..first + len)
                        .map(|i| self.b.ins().load(ty, Self::flags(), at, offset(i)))
                        .collect();
                    self.variables(&[values]).remove(0)
                } else {
                    let start = self.b.ins().iadd_imm_s(at, (first * 8) as i64);
                    Carry::Stored(self.carry_storage(Mem {
                        at: start,
                        len,
                        home: Home::Given,
                        ty,
                    }))
                };
                first += len;
                carry
            })
            .collect()
    }

    /// The current values of the carries.
    pub(super) fn use_carries(&mut self, carries: &[Carry]) -> Vec<Val> {
        carries
            .iter()
            .map(|c| match c {
                Carry::Vars(vars) => Val::Regs(vars.iter().map(|&v| self.b.use_var(v)).collect()),
                Carry::Stored(m) => Val::Mem(*m),
            })
            .collect()
    }

    /// Sets the carries to the first outputs of a body run (`None` when an output does not
    /// have its carry's length). Every output is read before any carry is written: an output
    /// may be another carry's storage (carries that swap places).
    pub(super) fn set_carries(&mut self, carries: &[Carry], outs: &[Val]) -> Option<()> {
        let mut ready: Vec<Val> = Vec::with_capacity(carries.len());
        for (c, v) in carries.iter().zip(outs) {
            ready.push(match (c, v) {
                (Carry::Vars(vars), v) => {
                    if vars.len() != v.len() {
                        return None;
                    }
                    Val::Regs(self.registers(v)?)
                }
                (Carry::Stored(own), Val::Mem(m))
                    if matches!(m.home, Home::Carry(_)) && m.home != own.home =>
                {
                    let copy = self.scratch_array(m.len, m.ty)?;
                    self.copy(*m, copy)?;
                    Val::Mem(copy)
                }
                (Carry::Stored(_), v) => v.clone(),
            });
        }
        for (c, v) in carries.iter().zip(&ready) {
            match (c, v) {
                (Carry::Vars(vars), Val::Regs(values)) => {
                    for (&var, &value) in vars.iter().zip(values) {
                        self.b.def_var(var, value);
                    }
                }
                (Carry::Stored(m), Val::Mem(from)) if from.at == m.at => {}
                (Carry::Stored(m), v) => self.write(v, *m)?,
                (Carry::Vars(_), Val::Mem(_)) => return None,
            }
        }
        Some(())
    }

    /// The elements of values (of the given word type and elements) stored one after the other
    /// in the array of words at `at`, which the caller gave and the code only reads: machine
    /// values for small values, the array itself for large ones.
    pub(super) fn given_flat(&mut self, at: Value, values: &[(Type, usize)]) -> Vec<Val> {
        let mut first = 0;
        values
            .iter()
            .map(|&(ty, len)| {
                let value = if len <= REGISTER_ELEMENTS {
                    Val::Regs(
                        (first..first + len)
                            .map(|j| self.b.ins().load(ty, Self::flags(), at, offset(j)))
                            .collect(),
                    )
                } else {
                    Val::Mem(Mem {
                        at: self.b.ins().iadd_imm_s(at, (first * 8) as i64),
                        len,
                        home: Home::Given,
                        ty,
                    })
                };
                first += len;
                value
            })
            .collect()
    }

    /// Slice `k` of `len` elements of an array of `dtype` the caller gave: machine values when
    /// small, else the slice itself (float64 and int64, whose elements are the code's words) or
    /// a copy of it in words in scratch memory.
    pub(super) fn given_slice(
        &mut self,
        base: Value,
        k: Value,
        dtype: DType,
        len: usize,
    ) -> Option<Val> {
        if len <= REGISTER_ELEMENTS {
            return Some(Val::Regs(self.load_slice(base, k, dtype, len)));
        }
        let first = self.element(base, k, dtype, len, 0);
        if matches!(dtype, DType::F64 | DType::I64) {
            return Some(Val::Mem(Mem {
                at: first,
                len,
                home: Home::Given,
                ty: word(dtype),
            }));
        }
        let copy = self.scratch_array(len, word(dtype))?;
        self.for_each(len, |e, i| {
            let v = e.load_converted(first, i, dtype)?;
            e.store_indexed(v, copy.at, i);
            Some(())
        })?;
        Some(Val::Mem(copy))
    }

    /// Stores `value` (of `dtype`) as slice `k` of an array of `dtype` ([`Emitter::store_slice`]).
    pub(super) fn put_slice(
        &mut self,
        base: Value,
        k: Value,
        dtype: DType,
        value: &Val,
    ) -> Option<()> {
        match value {
            Val::Regs(values) => {
                self.store_slice(base, k, dtype, values);
                Some(())
            }
            Val::Mem(m) => {
                let first = self.element(base, k, dtype, m.len, 0);
                let (from, ty) = (m.at, m.ty);
                self.for_each(m.len, |e, i| {
                    let v = e.load_indexed(ty, from, i);
                    e.store_converted(v, first, i, dtype)
                })
            }
        }
    }

    /// Takes note of the loops nested in `body` that would run as code of their own, and of
    /// the margin by which its code paid off ([`OwnCode`]).
    pub(super) fn note_own_code(&mut self, body: LoopBody<'_>) {
        if let LoopBody::Graph(body) = body {
            for (&region, &passes) in &body.own_code {
                let sum = self.own_code.entry(region).or_default();
                *sum = sum.saturating_add(passes);
            }
            self.margin = self.margin.saturating_add(body.margin);
        }
    }

    /// One run of a loop body on `inputs`: its outputs.
    pub(super) fn loop_body(&mut self, body: LoopBody<'_>, inputs: &[Val]) -> Option<Vec<Val>> {
        match body {
            LoopBody::Scalar(body) => {
                // An input of several elements is one the scalar form does not read.
                let mut scalars: Vec<Option<Value>> = Vec::with_capacity(inputs.len());
                for v in inputs {
                    scalars.push(if v.len() == 1 {
                        Some(self.element_at(v, 0)?)
                    } else {
                        None
                    });
                }
                Some(
                    self.body(body, &scalars)?
                        .into_iter()
                        .map(|v| Val::Regs(vec![v]))
                        .collect(),
                )
            }
            LoopBody::Graph(body) => self.graph_body(body, inputs),
        }
    }

    /// One run of a graph body: each node as `quabla_ir::eval::evaluate` computes it, element
    /// by element (a loop over the elements of a value held in memory).
    pub(super) fn graph_body(&mut self, body: &GraphBody, inputs: &[Val]) -> Option<Vec<Val>> {
        let graph = &body.graph;
        let mut values: Vec<Val> = Vec::with_capacity(graph.len());
        let mut next_input = 0;
        // The outputs of each region call, by region and operands (its sibling nodes share
        // one run).
        let mut calls: HashMap<(usize, Vec<usize>), Vec<Val>> = HashMap::new();
        // Uses of each node by other nodes and the outputs: an elementwise result in memory
        // used once by an elementwise node of its shape is computed inside that node's loop
        // (`Fused`), never stored.
        let mut uses = vec![0usize; graph.len()];
        for node in graph.nodes() {
            for o in &node.operands {
                uses[o.index()] += 1;
            }
        }
        for o in graph.outputs() {
            uses[o.index()] += 2;
        }
        let mut pending: HashMap<usize, Fused> = HashMap::new();
        for (index, node) in graph.nodes().iter().enumerate() {
            let fusing = self.fusable(graph, node);
            for (k, o) in node.operands.iter().enumerate() {
                let same_shape = graph.node(*o).ty.shape == node.ty.shape;
                if pending.contains_key(&o.index()) && !(fusing && same_shape && k < 3) {
                    let fused = pending.remove(&o.index())?;
                    *values.get_mut(o.index())? = self.materialize(&fused)?;
                }
            }
            if fusing {
                let fused = self.fuse(graph, node, &values, &mut pending)?;
                if uses[index] == 1 {
                    pending.insert(index, fused);
                    values.push(Val::Regs(Vec::new()));
                } else {
                    let value = self.materialize(&fused)?;
                    values.push(value);
                }
                continue;
            }
            if let Op::Region(call) = &node.op {
                let key = (
                    Arc::as_ptr(&call.region) as usize,
                    node.operands.iter().map(|o| o.index()).collect::<Vec<_>>(),
                );
                if !calls.contains_key(&key) {
                    let nested = body.nested.get(&key.0)?.clone();
                    let operands: Vec<Val> = key
                        .1
                        .iter()
                        .map(|&o| values.get(o).cloned())
                        .collect::<Option<_>>()?;
                    let (before, counted) = (self.b.func.dfg.num_insts(), self.short_own_code);
                    let outs = self.nested(&nested, &operands)?;
                    // A loop's own function is about as long as its code here; its passes
                    // stand for those of the loops in it, and count once, however often it
                    // is called.
                    if self.b.func.dfg.num_insts() - before <= BACKTRACKING_INSTRUCTIONS {
                        if let Some(passes) = self.own_code.remove(&key.0) {
                            self.short_own_code = counted.saturating_add(passes);
                        }
                    }
                    calls.insert(key.clone(), outs);
                }
                let result = calls.get(&key)?.get(call.output)?.clone();
                if result.len() != node.ty.shape.size() {
                    return None;
                }
                values.push(result);
                continue;
            }
            let out = &node.ty;
            let n = out.shape.size();
            let shapes: Vec<&Shape> = node
                .operands
                .iter()
                .map(|o| &graph.node(*o).ty.shape)
                .collect();
            let operands: Vec<&Val> = node
                .operands
                .iter()
                .map(|o| values.get(o.index()))
                .collect::<Option<_>>()?;
            let in_memory =
                n > REGISTER_ELEMENTS || operands.iter().any(|v| matches!(v, Val::Mem(_)));
            let result: Val = match &node.op {
                Op::Input { .. } => {
                    let given = inputs.get(next_input)?.clone();
                    next_input += 1;
                    given
                }
                Op::Constant { data, .. } => {
                    if data.len() != n {
                        return None;
                    }
                    let integer = data.dtype().is_integer();
                    if n <= REGISTER_ELEMENTS {
                        Val::Regs(
                            (0..n)
                                .map(|i| match integer {
                                    true => self.b.ins().iconst(types::I64, data.get_i64(i)),
                                    false => self.b.ins().f64const(data.get_f64(i)),
                                })
                                .collect(),
                        )
                    } else {
                        let words: Vec<u64> = (0..n)
                            .map(|i| match integer {
                                true => data.get_i64(i) as u64,
                                false => data.get_f64(i).to_bits(),
                            })
                            .collect();
                        self.constant_array(words, word(data.dtype()))?
                    }
                }
                Op::IndexGather { axis, batch } => {
                    let layout = IndexLayout::new(
                        shapes.first()?.dims(),
                        shapes.get(1)?.dims(),
                        *axis,
                        *batch,
                    );
                    self.index_gather(layout, operands.first()?, operands.get(1)?, out)?
                }
                Op::IndexScatter { axis, batch, mode } => {
                    let layout = IndexLayout::new(
                        shapes.first()?.dims(),
                        shapes.get(1)?.dims(),
                        *axis,
                        *batch,
                    );
                    let (x, idx, updates) = (operands.first()?, operands.get(1)?, operands.get(2)?);
                    self.index_scatter(layout, *mode, (x, idx, updates), out)?
                }
                Op::Solve { transpose_a } => {
                    let geometry = solve_geometry(graph, node)?;
                    let (a, b) = (operands.first()?, operands.get(1)?);
                    self.solve(a, b, geometry, *transpose_a, out.dtype)?
                }
                Op::Matmul => {
                    let dims = |k: usize| shapes.get(k).map(|s| s.dims());
                    let product = self.matmul(
                        (operands.first()?, operands.get(1)?),
                        (dims(0)?, dims(1)?),
                        out.shape.dims(),
                    )?;
                    self.held(product)?
                }
                Op::Reduce { kind, axes } if in_memory => {
                    let x = operands.first()?;
                    let reduced =
                        self.reduce_in_memory(kind.reducer(), x, (shapes.first()?, axes), out)?;
                    self.held(reduced)?
                }
                Op::Reduce { kind, axes } => {
                    let x = self.registers(operands.first()?)?;
                    let groups = reduced_groups(shapes.first()?, axes, n)?;
                    let mut result = Vec::with_capacity(n);
                    for group in groups {
                        let elements: Vec<Value> = group
                            .iter()
                            .map(|&i| x.get(i).copied())
                            .collect::<Option<_>>()?;
                        let v = match kind.reducer() {
                            reducer if out.dtype.is_integer() => {
                                let start = Self::int_fold(reducer);
                                let mut acc = self.b.ins().iconst(types::I64, start);
                                for &v in &elements {
                                    acc = self.int_fold_step(reducer, acc, v);
                                }
                                acc
                            }
                            Reducer::Sum => self.blocked_sum(&elements)?,
                            Reducer::Mean => {
                                let sum = self.blocked_sum(&elements)?;
                                let count = self.b.ins().f64const(elements.len() as f64);
                                self.b.ins().fdiv(sum, count)
                            }
                            Reducer::Max => self.fold(f64::NEG_INFINITY, MAXIMUM, &elements)?,
                            Reducer::Min => self.fold(f64::INFINITY, MINIMUM, &elements)?,
                        };
                        result.push(self.round(out.dtype, v));
                    }
                    Val::Regs(result)
                }
                op => match EwOp::from_op(op) {
                    // The others in memory are fused ([`Emitter::fuse`]).
                    Some(EwOp::Unary(u)) if n > REGISTER_ELEMENTS => {
                        self.unary_lanes_in_memory(u, operands.first()?, out)?
                    }
                    Some(_) => {
                        let ew = Elementwise::of(graph, node)?;
                        // Each operand's element that each result element reads.
                        let reads: Vec<Vec<usize>> = shapes
                            .iter()
                            .map(|shape| {
                                let numbers =
                                    HostData::F64((0..shape.size()).map(|i| i as f64).collect());
                                broadcast_values(
                                    HostValue {
                                        data: &numbers,
                                        shape,
                                    },
                                    &out.shape,
                                )
                                .into_iter()
                                .map(|v| v as usize)
                                .collect()
                            })
                            .collect();
                        let mut result = Vec::with_capacity(n);
                        for i in 0..n {
                            let mut args = [None; 3];
                            for (k, read) in reads.iter().enumerate().take(3) {
                                args[k] = Some(self.element_at(operands.get(k)?, *read.get(i)?)?);
                            }
                            result.push(self.elementwise(ew, args)?);
                        }
                        Val::Regs(result)
                    }
                    None if in_memory => self.layout_in_memory(op, &operands, &shapes, out)?,
                    None => {
                        let sources = element_sources(op, &shapes, &out.shape)?;
                        let mut result = Vec::with_capacity(n);
                        for source in sources {
                            result.push(match source {
                                Some((k, i)) => self.element_at(operands.get(k)?, i)?,
                                None => self.zero(word(out.dtype)),
                            });
                        }
                        Val::Regs(result)
                    }
                },
            };
            if result.len() != n {
                return None;
            }
            values.push(result);
        }
        graph
            .outputs()
            .iter()
            .map(|o| values.get(o.index()).cloned())
            .collect()
    }

    /// One run of a region nested in a graph body on `operands`: its outputs, as the CPU's
    /// region steps compute them. Carries are machine values ([`Nested::new`]); a scan's
    /// scanned operands and stacked outputs are arrays in memory.
    pub(super) fn nested(&mut self, nested: &Nested, operands: &[Val]) -> Option<Vec<Val>> {
        match nested {
            Nested::Cond {
                then_branch,
                else_branch,
                outputs,
            } => {
                let pred = self.element_at(operands.first()?, 0)?;
                let mut vars: Vec<Carry> = Vec::with_capacity(outputs.len());
                for &(dtype, n) in outputs {
                    let ty = word(dtype);
                    vars.push(if n <= REGISTER_ELEMENTS {
                        Carry::Vars((0..n).map(|_| self.b.declare_var(ty)).collect())
                    } else {
                        let m = self.scratch_array(n, ty)?;
                        Carry::Stored(self.carry_storage(m))
                    });
                }
                let (then_block, else_block, merge) = (
                    self.b.create_block(),
                    self.b.create_block(),
                    self.b.create_block(),
                );
                let holds = self.truth(pred);
                self.b.ins().brif(holds, then_block, &[], else_block, &[]);
                for (block, branch) in [(then_block, then_branch), (else_block, else_branch)] {
                    self.b.switch_to_block(block);
                    let outs = self.graph_body(branch, &operands[1..])?;
                    if outs.len() != vars.len() {
                        return None;
                    }
                    self.set_carries(&vars, &outs)?;
                    self.b.ins().jump(merge, &[]);
                }
                self.b.switch_to_block(merge);
                Some(self.use_carries(&vars))
            }
            Nested::Scan {
                body,
                length,
                start,
                reverse,
                n_carry,
                n_const,
                index,
                ys,
            } => {
                let (nc, nk) = (*n_carry, *n_const);
                let vars = self.loop_carries(operands.get(..nc)?)?;
                // Scanned operands and stacked outputs are arrays in memory, indexed by the
                // iteration.
                let mut xs: Vec<(Value, DType, usize)> = Vec::new();
                for x in operands.get(nc + nk..)? {
                    let m = self.in_memory(x)?;
                    xs.push((m.at, word_dtype(m.ty), m.len / (*length).max(1)));
                }
                let mut stacked: Vec<(Mem, usize)> = Vec::new();
                for &(dtype, len) in ys {
                    stacked.push((self.scratch_array(len * length, word(dtype))?, len));
                }
                let bound = self.b.ins().iconst(types::I64, *length as i64);
                let (trip, header, exit) = self.counted_loop(bound);
                let i = self.b.use_var(trip);
                let k = if *reverse {
                    let last = self.b.ins().iconst(types::I64, *length as i64 - 1);
                    self.b.ins().isub(last, i)
                } else {
                    i
                };
                let at = self.b.ins().iadd_imm_s(k, *start as i64);
                let mut inputs = vec![Val::Regs(vec![self.index_value(*index, at)])];
                inputs.extend(self.use_carries(&vars));
                inputs.extend(operands.get(nc..nc + nk)?.iter().cloned());
                for &(base, dtype, len) in &xs {
                    inputs.push(self.given_slice(base, k, dtype, len)?);
                }
                let outs = self.graph_body(body, &inputs)?;
                for (&(m, len), out) in stacked.iter().zip(outs.get(nc..)?) {
                    if out.len() != len {
                        return None;
                    }
                    self.put_slice(m.at, k, word_dtype(m.ty), out)?;
                }
                self.set_carries(&vars, &outs)?;
                self.next_trip(trip, header);

                self.b.switch_to_block(exit);
                let mut results = self.use_carries(&vars);
                for &(m, _) in &stacked {
                    results.push(self.held(Val::Mem(m))?);
                }
                Some(results)
            }
            Nested::While {
                cond,
                body,
                n_carry,
                max_trips,
            } => {
                let vars = self.loop_carries(operands.get(..*n_carry)?)?;
                let consts = operands.get(*n_carry..)?;
                // As the interpreter: stop at the bound before testing the predicate.
                let bound = self.b.ins().iconst(types::I64, *max_trips as i64);
                let (trips, header, exit) = self.counted_loop(bound);
                let run = self.b.create_block();
                let mut inputs = self.use_carries(&vars);
                inputs.extend(consts.iter().cloned());
                let predicate = self.graph_body(cond, &inputs)?;
                let p = self.element_at(predicate.first()?, 0)?;
                let holds = self.truth(p);
                self.b.ins().brif(holds, run, &[], exit, &[]);

                self.b.switch_to_block(run);
                let mut inputs = self.use_carries(&vars);
                inputs.extend(consts.iter().cloned());
                let outs = self.graph_body(body, &inputs)?;
                self.set_carries(&vars, &outs)?;
                self.next_trip(trips, header);

                self.b.switch_to_block(exit);
                Some(self.use_carries(&vars))
            }
        }
    }

    /// `solve` of the systems `a x = b` (`aᵀ x = b` when `transpose`) of the given geometry
    /// (batch, unknowns, right-hand sides) by the CPU kernel's own function (through
    /// [`SOLVE`]), on arrays in memory, rounded to `dtype`; a singular matrix leaves the code
    /// through the failure exit.
    pub(super) fn solve(
        &mut self,
        a: &Val,
        b: &Val,
        (batch, n, k): (usize, usize, usize),
        transpose: bool,
        dtype: DType,
    ) -> Option<Val> {
        if a.len() != batch * n * n || b.len() != batch * n * k {
            return None;
        }
        let (a, b) = (self.in_memory(a)?, self.in_memory(b)?);
        let x = self.scratch_array(b.len, types::F64)?;
        let mut args = vec![a.at, b.at, x.at];
        for v in [batch, n, k, transpose as usize] {
            args.push(self.b.ins().iconst(types::I64, v as i64));
        }
        let status = self.call_returning(SOLVE, &args, types::I32)?;
        self.exit_on_failure(status);
        if dtype != DType::F64 {
            let from = x.at;
            self.for_each(x.len, |e, i| {
                let v = e.load_indexed(types::F64, from, i);
                let v = e.round(dtype, v);
                e.store_indexed(v, from, i);
                Some(())
            })?;
        }
        self.held(Val::Mem(x))
    }

    /// Leaves the code through the failure exit when `status` is not zero.
    pub(super) fn exit_on_failure(&mut self, status: Value) {
        let next = self.b.create_block();
        let failed = *self.failed.get_or_insert_with(|| self.b.create_block());
        self.b.ins().brif(status, failed, &[], next, &[]);
        self.b.switch_to_block(next);
    }

    /// A value made in memory, as machine values when it is small enough.
    pub(super) fn held(&mut self, v: Val) -> Option<Val> {
        match &v {
            Val::Mem(m) if m.len <= REGISTER_ELEMENTS => Some(Val::Regs(self.registers(&v)?)),
            _ => Some(v),
        }
    }

    /// The carries of a loop nested in a body, holding `initial`: variables for small values,
    /// arrays in scratch memory for large ones.
    pub(super) fn loop_carries(&mut self, initial: &[Val]) -> Option<Vec<Carry>> {
        let mut carries = Vec::with_capacity(initial.len());
        for v in initial {
            carries.push(if v.len() <= REGISTER_ELEMENTS {
                let values = self.registers(v)?;
                self.variables(&[values]).remove(0)
            } else {
                let ty = self.in_memory(v)?.ty;
                let m = self.scratch_array(v.len(), ty)?;
                self.write(v, m)?;
                Carry::Stored(self.carry_storage(m))
            });
        }
        Some(carries)
    }

    /// `m` as the storage of a carry, with an identity of its own.
    pub(super) fn carry_storage(&mut self, m: Mem) -> Mem {
        self.carry_ids += 1;
        Mem {
            home: Home::Carry(self.carry_ids),
            ..m
        }
    }

    /// One variable per element of each of `values`, holding it.
    pub(super) fn variables(&mut self, values: &[Vec<Value>]) -> Vec<Carry> {
        values
            .iter()
            .map(|c| {
                Carry::Vars(
                    c.iter()
                        .map(|&v| {
                            let var = self.b.declare_var(self.b.func.dfg.value_type(v));
                            self.b.def_var(var, v);
                            var
                        })
                        .collect(),
                )
            })
            .collect()
    }

    /// Starts a counted loop: a trip counter from 0 and a header block that goes on to a
    /// fresh block, where the builder is left, while the counter is below `bound`, and to the
    /// returned exit block after. Returns the counter, the header and the exit.
    pub(super) fn counted_loop(&mut self, bound: Value) -> (Variable, Block, Block) {
        let trips = self.b.declare_var(types::I64);
        let zero = self.b.ins().iconst(types::I64, 0);
        self.b.def_var(trips, zero);
        let (header, run, exit) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(header);
        let t = self.b.use_var(trips);
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, t, bound);
        self.b.ins().brif(more, run, &[], exit, &[]);
        self.b.switch_to_block(run);
        (trips, header, exit)
    }

    /// Ends an iteration of a counted loop: one more trip, back to its header.
    pub(super) fn next_trip(&mut self, trips: Variable, header: Block) {
        let t = self.b.use_var(trips);
        let next = self.b.ins().iadd_imm_s(t, 1);
        self.b.def_var(trips, next);
        self.b.ins().jump(header, &[]);
    }

    /// The address of a fresh float64 array of `len` elements in the function's stack frame.
    pub(super) fn stack_array(&mut self, len: usize) -> Value {
        let bytes = u32::try_from(len.max(1) * 8).unwrap_or(u32::MAX);
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            bytes,
            3,
        ));
        self.b.ins().stack_addr(types::I64, slot, 0)
    }

    /// The sum of `elements` in the blocked order of numerics.md §1.5 (one block: eight
    /// accumulators from `+0.0`, element `k` into accumulator `k % 8`, then
    /// `((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))`), as `quabla_ir::eval::blocked_sum`.
    pub(super) fn blocked_sum(&mut self, elements: &[Value]) -> Option<Value> {
        if elements.len() > SUM_BLOCK {
            return None;
        }
        let zero = self.b.ins().f64const(0.0);
        let mut acc = [zero; SUM_LANES];
        for (k, &v) in elements.iter().enumerate() {
            acc[k % SUM_LANES] = self.b.ins().fadd(acc[k % SUM_LANES], v);
        }
        let mut add = |a: Value, b: Value| self.b.ins().fadd(a, b);
        let (s01, s23) = (add(acc[0], acc[1]), add(acc[2], acc[3]));
        let (s45, s67) = (add(acc[4], acc[5]), add(acc[6], acc[7]));
        let (low, high) = (add(s01, s23), add(s45, s67));
        Some(add(low, high))
    }

    /// `f(...f(f(start, e0), e1)..., en)` with the symbol `f`.
    pub(super) fn fold(
        &mut self,
        start: f64,
        f: &'static str,
        elements: &[Value],
    ) -> Option<Value> {
        let mut acc = self.b.ins().f64const(start);
        for &v in elements {
            acc = self.call(f, &[acc, v])?;
        }
        Some(acc)
    }

    /// Stores the carries kept in variables into their places in the array of words at `at`
    /// (the others are there already).
    pub(super) fn store_carries(&mut self, at: Value, carries: &[Carry]) {
        let mut first = 0;
        for c in carries {
            match c {
                Carry::Vars(vars) => {
                    for (j, &var) in vars.iter().enumerate() {
                        let v = self.b.use_var(var);
                        self.b.ins().store(Self::flags(), v, at, offset(first + j));
                    }
                    first += vars.len();
                }
                Carry::Stored(m) => first += m.len,
            }
        }
    }
}
