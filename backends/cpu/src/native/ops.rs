//! The instructions of one element: the scalar form's fused programs, each elementwise op on
//! floats as `quabla_ir::eval` computes it (integer nodes in `integers.rs`), conversion to a
//! dtype, and calls of the symbols of `symbols.rs`.

use super::*;

impl Emitter<'_, '_> {
    /// One run of `body` on `inputs` (one per body input; `None` where it is not given): the
    /// value of each body output, or `None` when the body reads a value it has no source for
    /// or runs an instruction this module does not translate.
    pub(super) fn body(
        &mut self,
        body: &ScalarBody,
        inputs: &[Option<Value>],
    ) -> Option<Vec<Value>> {
        let mut slots: Vec<Option<Value>> = vec![None; body.nslots()];
        for &(s, v) in body.constants() {
            *slots.get_mut(s)? = Some(self.b.ins().f64const(v));
        }
        for (j, slot) in body.inputs.iter().enumerate() {
            if let Some(s) = *slot {
                *slots.get_mut(s)? = Some((*inputs.get(j)?)?);
            }
        }
        for program in body.steps() {
            self.program(program, &mut slots)?;
        }
        body.outputs
            .iter()
            .map(|&(s, _)| slots.get(s).copied().flatten())
            .collect()
    }

    /// The instructions of a one-element program whose externals are slot positions (see
    /// `Program::with_externals_at`), as `Program::run_one` runs them, and its outputs
    /// stored rounded to their dtypes as `ScalarBody::run` stores them.
    pub(super) fn program(&mut self, program: &Program, slots: &mut [Option<Value>]) -> Option<()> {
        let mut regs: Vec<Option<Value>> = vec![None; program.nregs];
        let mut results: Vec<Option<Value>> = vec![None; program.outs.len()];
        let read = |regs: &[Option<Value>], slots: &[Option<Value>], s: Src| match s {
            Src::Reg(r) => regs.get(r).copied().flatten(),
            Src::Direct(e) | Src::Scalar(e) => slots.get(e).copied().flatten(),
        };
        for instr in &program.instrs {
            match *instr {
                Instr::Load { ext, dst } => {
                    *regs.get_mut(dst)? = Some(slots.get(ext).copied().flatten()?);
                }
                Instr::Compute {
                    op,
                    dst,
                    args,
                    round_f32,
                } => {
                    let mut operands = [None; 3];
                    for (k, a) in args.iter().enumerate().take(op.arity()) {
                        operands[k] = Some(read(&regs, slots, *a)?);
                    }
                    let v = self.op(op, operands)?;
                    let v = if round_f32 {
                        self.round(DType::F32, v)
                    } else {
                        v
                    };
                    *regs.get_mut(dst)? = Some(v);
                }
                Instr::SinCos {
                    arg,
                    sin,
                    cos,
                    round_f32,
                } => {
                    let x = read(&regs, slots, arg)?;
                    for (op, dst) in [(UnaryOp::Sin, sin), (UnaryOp::Cos, cos)] {
                        let v = self.call(unary_symbol(op), &[x])?;
                        let v = if round_f32 {
                            self.round(DType::F32, v)
                        } else {
                            v
                        };
                        *regs.get_mut(dst)? = Some(v);
                    }
                }
                Instr::Store { src, out, .. } => {
                    *results.get_mut(out)? = Some(regs.get(src).copied().flatten()?);
                }
            }
        }
        for (&(s, dtype), v) in program.outs.iter().zip(results) {
            let v = self.round(dtype, v?);
            *slots.get_mut(s)? = Some(v);
        }
        Some(())
    }

    /// One element of the elementwise node `ew` from its operands' elements (as the code holds
    /// them, [`super::word`]), as `quabla_ir::eval::evaluate` computes it: a cast converts as
    /// `HostData::cast` does, an integer node computes in int64 ([`Emitter::int_op`]), any
    /// other in float64, and the result is converted to the node's dtype.
    pub(super) fn elementwise(&mut self, ew: Elementwise, a: [Option<Value>; 3]) -> Option<Value> {
        if let EwOp::Cast(to) = ew.op {
            return Some(self.round(to, a[0]?));
        }
        if ew.integer {
            if let EwOp::Compare(c) = ew.op {
                let (x, y) = (self.int_of(a[0]?), self.int_of(a[1]?));
                let holds = self.b.ins().icmp(int_cc(c), x, y);
                return Some(self.select_one_zero(holds));
            }
            let mut ints = [None; 3];
            for (k, v) in a.iter().enumerate() {
                ints[k] = v.map(|v| self.int_of(v));
            }
            let v = self.int_op(ew.op, ints, ew.first)?;
            return Some(self.round(ew.out, v));
        }
        let v = self.op(ew.op, a)?;
        Some(self.round(ew.out, v))
    }

    /// One elementwise op on float64 operands, as `Program::run_one` computes it.
    pub(super) fn op(&mut self, op: EwOp, a: [Option<Value>; 3]) -> Option<Value> {
        let x = a[0]?;
        Some(match op {
            EwOp::Unary(UnaryOp::Neg) => self.b.ins().fneg(x),
            EwOp::Unary(UnaryOp::Sqrt) => self.b.ins().sqrt(x),
            EwOp::Unary(UnaryOp::Floor) => self.b.ins().floor(x),
            EwOp::Unary(UnaryOp::Ceil) => self.b.ins().ceil(x),
            // Ties to even, as `f64::round_ties_even`.
            EwOp::Unary(UnaryOp::Round) => self.b.ins().nearest(x),
            EwOp::Unary(u) => self.call(unary_symbol(u), &[x])?,
            EwOp::Powi(n) => {
                let n = self.b.ins().iconst(types::I32, i64::from(n));
                self.call(POWI, &[x, n])?
            }
            EwOp::Binary(op) => {
                let y = a[1]?;
                match op {
                    BinaryOp::Add => self.b.ins().fadd(x, y),
                    BinaryOp::Sub => self.b.ins().fsub(x, y),
                    BinaryOp::Mul => self.b.ins().fmul(x, y),
                    BinaryOp::Div => self.b.ins().fdiv(x, y),
                    BinaryOp::Pow | BinaryOp::Atan2 | BinaryOp::Fmod => {
                        self.call(binary_symbol(op)?, &[x, y])?
                    }
                    // Integer-only functions make integer nodes ([`Elementwise::of`]), which
                    // `int_op` computes; none reaches here.
                    _ => return None,
                }
            }
            EwOp::Compare(c) => {
                let y = a[1]?;
                let cc = match c {
                    Comparison::Greater => FloatCC::GreaterThan,
                    Comparison::GreaterEqual => FloatCC::GreaterThanOrEqual,
                    Comparison::Less => FloatCC::LessThan,
                    Comparison::LessEqual => FloatCC::LessThanOrEqual,
                    Comparison::Equal => FloatCC::Equal,
                    // C's `!=`: true when either operand is NaN.
                    Comparison::NotEqual => FloatCC::NotEqual,
                };
                let holds = self.b.ins().fcmp(cc, x, y);
                self.select_one_zero(holds)
            }
            EwOp::Where => {
                let (t, f) = (a[1]?, a[2]?);
                let holds = self.truth(x);
                self.b.ins().select(holds, t, f)
            }
            EwOp::Cast(to) => self.round(to, x),
            EwOp::Copy => x,
        })
    }

    /// 1.0 where `holds`, else 0.0.
    pub(super) fn select_one_zero(&mut self, holds: Value) -> Value {
        let one = self.b.ins().f64const(1.0);
        let zero = self.b.ins().f64const(0.0);
        self.b.ins().select(holds, one, zero)
    }

    /// `v` (a float64, or an int64 for an integer) converted to `dtype` as the code holds it
    /// ([`super::word`]), as `HostData::cast` converts: a float as `dtype.round(v)` does
    /// (float32 through float32, bool as 0 or 1, an integer by [`Emitter::float_to_int`]), an
    /// integer as `HostData::from_i64` does ([`Emitter::int_to`]).
    pub(super) fn round(&mut self, dtype: DType, v: Value) -> Value {
        if self.b.func.dfg.value_type(v) == types::I64 {
            return self.int_to(dtype, v);
        }
        match dtype {
            DType::F64 => v,
            DType::F32 => {
                let narrow = self.b.ins().fdemote(types::F32, v);
                self.b.ins().fpromote(types::F64, narrow)
            }
            DType::Bool => {
                let zero = self.b.ins().f64const(0.0);
                let holds = self.b.ins().fcmp(FloatCC::NotEqual, v, zero);
                self.select_one_zero(holds)
            }
            DType::I32 | DType::I64 => self.float_to_int(dtype, v),
        }
    }

    /// Whether `v` (a float64 or an int64) is nonzero, as a condition: what a predicate, a
    /// `where` or a `cond` tests (the interpreter reads a float64 `!= 0.0`, NaN true).
    pub(super) fn truth(&mut self, v: Value) -> Value {
        if self.b.func.dfg.value_type(v) == types::I64 {
            self.b.ins().icmp_imm_s(IntCC::NotEqual, v, 0)
        } else {
            let zero = self.b.ins().f64const(0.0);
            self.b.ins().fcmp(FloatCC::NotEqual, v, zero)
        }
    }

    /// A zero of the machine type `ty`.
    pub(super) fn zero(&mut self, ty: Type) -> Value {
        if ty == types::I64 {
            self.b.ins().iconst(types::I64, 0)
        } else {
            self.b.ins().f64const(0.0)
        }
    }

    /// The index value of a loop at position `k` (an int64): `k` in the index's dtype, as the
    /// interpreter binds it (`dtype.round(k as f64)`, exact for every loop length).
    pub(super) fn index_value(&mut self, dtype: DType, k: Value) -> Value {
        if dtype.is_integer() {
            self.int_to(dtype, k)
        } else {
            let k = self.b.ins().fcvt_from_sint(types::F64, k);
            self.round(dtype, k)
        }
    }

    /// Calls the symbol `name` (float64 operands, except `powi`'s int32 exponent).
    pub(super) fn call(&mut self, name: &'static str, args: &[Value]) -> Option<Value> {
        self.call_returning(name, args, types::F64)
    }

    /// Calls the symbol `name`, which returns a `ret`.
    pub(super) fn call_returning(
        &mut self,
        name: &'static str,
        args: &[Value],
        ret: Type,
    ) -> Option<Value> {
        let call = self.call_inst(name, args, Some(ret))?;
        self.b.inst_results(call).first().copied()
    }

    /// Calls the symbol `name`, which returns nothing.
    pub(super) fn call_void(&mut self, name: &'static str, args: &[Value]) -> Option<()> {
        self.call_inst(name, args, None).map(|_| ())
    }

    /// The call instruction of the symbol `name`, declared on first use with the types of
    /// `args` and the return type `ret`.
    pub(super) fn call_inst(
        &mut self,
        name: &'static str,
        args: &[Value],
        ret: Option<Type>,
    ) -> Option<cranelift_codegen::ir::Inst> {
        let callee = match self.imports.get(name) {
            Some(&f) => f,
            None => {
                let mut sig = Signature::new(self.module.isa().default_call_conv());
                for &a in args {
                    sig.params
                        .push(AbiParam::new(self.b.func.dfg.value_type(a)));
                }
                sig.returns.extend(ret.map(AbiParam::new));
                let id = self
                    .module
                    .declare_function(name, Linkage::Import, &sig)
                    .ok()?;
                let f = self.module.declare_func_in_func(id, self.b.func);
                self.imports.insert(name, f);
                f
            }
        };
        Some(self.b.ins().call(callee, args))
    }
}

/// An elementwise node as the code computes it: its op, the dtype of its first operand (the
/// dtype an integer function wraps to, as `quabla_ir::eval::binary_int` takes it), its
/// result's dtype, and whether it computes in int64 ([`Elementwise::of`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Elementwise {
    pub op: EwOp,
    pub first: DType,
    pub out: DType,
    integer: bool,
}

impl Elementwise {
    /// The elementwise node `node` of `graph` (`None` for any other node). It computes in
    /// int64 where `quabla_ir::eval::evaluate` does: `bitwise_not`, an integer-only function
    /// (the bitwise ones on bools too), or an integer operand or result.
    pub(super) fn of(graph: &Graph, node: &quabla_ir::Node) -> Option<Elementwise> {
        let op = EwOp::from_op(&node.op)?;
        let integer = match op {
            // `HostData::cast` converts; it is not an integer function of its operand.
            EwOp::Cast(_) => false,
            EwOp::Unary(UnaryOp::BitNot) => true,
            EwOp::Binary(b) if b.is_integer_only() => true,
            _ => {
                node.ty.dtype.is_integer()
                    || node
                        .operands
                        .iter()
                        .any(|&o| graph.node(o).ty.dtype.is_integer())
            }
        };
        Some(Elementwise {
            op,
            first: graph.node(*node.operands.first()?).ty.dtype,
            out: node.ty.dtype,
            integer,
        })
    }
}
