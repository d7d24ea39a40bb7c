//! The instructions of one element: the scalar form's fused programs, each elementwise op as
//! `quabla_ir::eval` computes it, rounding to a dtype, and calls of the symbols of
//! `symbols.rs`.

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
                    // Integer functions: graphs holding them are not translated.
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
                let zero = self.b.ins().f64const(0.0);
                let holds = self.b.ins().fcmp(FloatCC::NotEqual, x, zero);
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

    /// `dtype.round(v)`: float32 through float32, bool as 0 or 1.
    pub(super) fn round(&mut self, dtype: DType, v: Value) -> Value {
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
            // Never reached: graphs with integer values are not translated (module docs).
            DType::I32 | DType::I64 => v,
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
