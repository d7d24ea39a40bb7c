//! A compiled function ([`Code`]): the Cranelift instruction set it targets, the module that
//! owns its memory, the scratch memory and tables it needs, and how one is built from an
//! emitting closure (a panic in the code generator leaves no code, never a crash).

use super::*;

/// A finalized function and the module that owns its memory.
pub(super) struct Code {
    pub(super) module: Option<JITModule>,
    pub(super) entry: *const u8,
    /// The 8-byte words of scratch memory a run needs (its values held in memory).
    pub(super) scratch: usize,
    /// The tables of element positions and shapes the code reads.
    pub(super) _tables: Tables,
}

// SAFETY: the module is written once, while it is built, and only executed afterwards; the
// code reads and writes nothing but its arguments, so it may run on any thread, concurrently.
unsafe impl Send for Code {}
// SAFETY: see `Send`.
unsafe impl Sync for Code {}

impl fmt::Debug for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Code({:p})", self.entry)
    }
}

impl Drop for Code {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: `entry`, the only pointer into the module's memory, dies with `self`.
            unsafe { module.free_memory() };
        }
    }
}

/// The most instructions of a function whose registers the backtracking allocator assigns.
/// Its time per instruction grows with the values live at once, and a loop body's reverse
/// pass keeps its whole forward pass live: at 2,000 instructions it took 4 µs an instruction,
/// at 22,000 24 µs (half a second for one function). Longer functions get the single-pass
/// allocator, whose time stays about 1 µs an instruction at every size; its code spills more,
/// which a body that long (its values spilled anyway) hardly notices, but the trips of a loop
/// nested in it do ([`SPILLED_PASSES`]). Registers change nothing in the arithmetic, so both
/// give the same bits.
pub(super) const BACKTRACKING_INSTRUCTIONS: usize = 4096;

/// The element passes in memory on which the single-pass allocator's code loses as much as
/// one element operation of `STEP_ELEMENTS`'s balance (0.65 ns) to the backtracking
/// allocator's: it keeps loop counters and addresses in memory. Measured with a `fori_loop`
/// whose body is an elementwise chain and a sum over a vector (seven element passes a trip):
/// 14.4 and 57.9 µs a trip at 4,096 and 16,384 elements with the backtracking allocator, 23.4
/// and 91.6 µs with the single-pass one, 0.3 ns more a pass. A function that grows past
/// [`BACKTRACKING_INSTRUCTIONS`] by holding loops that would run as shorter code of their own
/// is weighed with it (`OwnCode`).
pub(super) const SPILLED_PASSES: usize = 2;

/// The host's instruction set, built once (`None` where Cranelift does not support it): with
/// the backtracking register allocator, or with the single-pass one for long functions (see
/// [`BACKTRACKING_INSTRUCTIONS`]).
pub(super) fn isa(single_pass: bool) -> Option<OwnedTargetIsa> {
    static ISA: OnceLock<Option<OwnedTargetIsa>> = OnceLock::new();
    static SINGLE_PASS: OnceLock<Option<OwnedTargetIsa>> = OnceLock::new();
    let cell = if single_pass { &SINGLE_PASS } else { &ISA };
    cell.get_or_init(|| {
        let mut flags = settings::builder();
        flags.set("opt_level", "speed").ok()?;
        if single_pass {
            flags.set("regalloc_algorithm", "single_pass").ok()?;
        }
        // The IR verifier checks the code generator's own output: on in test (debug) builds,
        // off in release builds, where it was a tenth of compile time.
        let verify = if cfg!(debug_assertions) {
            "true"
        } else {
            "false"
        };
        flags.set("enable_verifier", verify).ok()?;
        flags.set("use_colocated_libcalls", "false").ok()?;
        flags.set("is_pic", "false").ok()?;
        cranelift_native::builder()
            .ok()?
            .finish(settings::Flags::new(flags))
            .ok()
    })
    .clone()
}

impl Code {
    /// Fresh scratch memory for one run (no allocation for code that needs none); `None` when
    /// the allocation is refused, which leaves the run to the interpreter.
    pub(super) fn scratch_memory(&self) -> Option<Vec<f64>> {
        quabla_ir::alloc::try_zeroed_vec(self.scratch).ok()
    }

    /// Builds one function taking `params` (the last is the address of the run's scratch
    /// memory) and returning `ret`, whose body `emit` writes (returning `None` when it meets
    /// something it cannot translate); `Err` says why there is no function.
    pub(super) fn build(
        params: &[Type],
        ret: Option<Type>,
        emit: impl FnOnce(&mut Emitter<'_, '_>, &[Value]) -> Option<()>,
    ) -> Result<Code, String> {
        let unsupported = || "Cranelift does not support this host".to_string();
        let isa = isa(false).ok_or_else(unsupported)?;
        if isa.pointer_type() != types::I64 {
            return Err(unsupported());
        }
        let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
        for &(name, ptr) in SYMBOLS.iter() {
            builder.symbol(name, ptr);
        }
        let mut module = JITModule::new(builder);
        // A panic in the code generator (a bug, never an input's fault) must not take the run
        // down: the loop then stays in the interpreter. The module is dropped without freeing
        // its memory in that case, which leaks it rather than risk freeing code in use.
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Code::define(&mut module, params, ret, emit)
        }))
        .map_err(|_| "the code generator failed".to_string())?;
        match built {
            Ok((entry, scratch, tables)) => Ok(Code {
                module: Some(module),
                entry,
                scratch,
                _tables: tables,
            }),
            Err(why) => {
                // SAFETY: nothing points into the module's memory.
                unsafe { module.free_memory() };
                Err(why)
            }
        }
    }

    pub(super) fn define(
        module: &mut JITModule,
        params: &[Type],
        ret: Option<Type>,
        emit: impl FnOnce(&mut Emitter<'_, '_>, &[Value]) -> Option<()>,
    ) -> Result<(*const u8, usize, Tables), String> {
        let failed = || "the code generator failed".to_string();
        let mut ctx = module.make_context();
        let mut fctx = FunctionBuilderContext::new();
        let (scratch, tables): (usize, Tables);
        ctx.func.signature.params = params.iter().map(|&t| AbiParam::new(t)).collect();
        ctx.func.signature.returns = ret.into_iter().map(AbiParam::new).collect();
        let id = module
            .declare_function("loop", Linkage::Local, &ctx.func.signature)
            .map_err(|_| failed())?;
        {
            let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
            let entry = b.create_block();
            b.append_block_params_for_function_params(entry);
            b.switch_to_block(entry);
            let args = b.block_params(entry).to_vec();
            let mut e = Emitter {
                b,
                module: &mut *module,
                imports: HashMap::new(),
                failed: None,
                scratch: args.last().copied(),
                scratch_len: 0,
                tables: Tables::default(),
                carry_ids: 0,
                own_code: OwnCode::new(),
                margin: 0,
                short_own_code: 0,
            };
            emit(&mut e, &args)
                .ok_or_else(|| "the code generator does not cover one of its nodes".to_string())?;
            // Past the backtracking allocator's length, the nested loops that would have code
            // of their own under it may lose more than the function saves (`OwnCode`).
            let length = e.b.func.dfg.num_insts();
            if length > BACKTRACKING_INSTRUCTIONS && e.short_own_code / SPILLED_PASSES > e.margin {
                return Err(format!(
                    "its code of {length} instructions would slow the {} element passes of \
                     nested loops that run as shorter code of their own",
                    e.short_own_code
                ));
            }
            (scratch, tables) = (e.scratch_len, std::mem::take(&mut e.tables));
            if let Some(block) = e.failed {
                e.b.switch_to_block(block);
                let failed = e.b.ins().iconst(types::I64, FAILED as i64);
                e.b.ins().return_(&[failed]);
            }
            e.b.seal_all_blocks();
            let config = e.module.target_config();
            e.b.finalize(config);
        }
        if ctx.func.dfg.num_insts() <= BACKTRACKING_INSTRUCTIONS {
            module.define_function(id, &mut ctx).map_err(|_| failed())?;
        } else {
            // The module's own compile would use its (backtracking) instruction set: compile
            // with the single-pass one here and hand the module the bytes and relocations.
            let fast = isa(true).ok_or_else(failed)?;
            let alignment = ctx
                .compile(&*fast, &mut Default::default())
                .map_err(|_| failed())?
                .buffer
                .alignment;
            let code = ctx.compiled_code().ok_or_else(failed)?;
            let relocs: Vec<ModuleReloc> = code
                .buffer
                .relocs()
                .iter()
                .map(|r| ModuleReloc::from_mach_reloc(r, &ctx.func, id))
                .collect();
            module
                .define_function_bytes(id, u64::from(alignment), code.code_buffer(), &relocs)
                .map_err(|_| failed())?;
        }
        module.clear_context(&mut ctx);
        module.finalize_definitions().map_err(|_| failed())?;
        Ok((module.get_finalized_function(id), scratch, tables))
    }
}
