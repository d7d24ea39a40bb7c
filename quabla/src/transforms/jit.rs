//! `jit`: trace a function once per signature, compile the plan, and run it on every later call
//! with the same signature; `lower` stages without running.
//!
//! The shell over [`crate::staging`]: `jit` differentiates nothing ([`Wrt::Nothing`]: scalar
//! leaves are static), adds its device and precision to the signature, and checks its
//! configuration and `static_argnums` before a lookup. Inside another trace, a jitted function
//! is inlined: its operations record into the enclosing trace.

use crate::error::{Error, Result};
use crate::staging::{
    config_methods, leaf_signature, CallScratch, Entry, Prepared, Shell, Signature, Target, Wrt,
};
use crate::trace;
use crate::tree::{self, Leaf, Tree, TreeDef};
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

/// The validated target of a transformed function.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Device {
    /// A name the registry resolves: a known backend (`cpu`, `cuda`, `cuda:N`, `mlx`), or the
    /// name a plugin registered (optionally with `:N`).
    Named,
    Invalid(String),
}

fn parse_device(name: &str) -> Device {
    let (target, ordinal) = match name.split_once(':') {
        Some((t, n)) => (t, Some(n)),
        None => (name, None),
    };
    let ordinal_ok = ordinal.is_none_or(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    let known = matches!(target, "cpu" | "mlx") && ordinal.is_none()
        || target == "cuda"
        || crate::devices::is_registered(target);
    if known && ordinal_ok {
        Device::Named
    } else {
        Device::Invalid(name.to_string())
    }
}

/// A function compiled by `jit`. Build it with [`jit`], configure it with the builder
/// methods, call it with [`Jit::call`].
pub struct Jit<F, A, R> {
    shell: Shell<F, A>,
    static_argnums: Vec<usize>,
    donate_argnums: Vec<usize>,
    arg_names: Vec<String>,
    /// Set once the configuration has been validated and the target resolved, so cached calls
    /// skip both.
    configured: std::sync::OnceLock<()>,
    _types: PhantomData<fn(A) -> R>,
}

impl<F, A, R> fmt::Debug for Jit<F, A, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jit")
            .field("name", &self.shell.config.name)
            .field("max_traces", &self.shell.config.max_traces)
            .field("device", &self.shell.target.device)
            .finish_non_exhaustive()
    }
}

/// Compiles `f` with its own trace cache: `qb::jit(|x: Tensor| x.sin()).call(&x)`.
/// Arguments are any [`Tree`]; a tuple stands for several positional arguments.
pub fn jit<A: Tree, R: Tree, F: Fn(A) -> Result<R>>(f: F) -> Jit<F, A, R> {
    Jit {
        shell: Shell::new("jit", f),
        static_argnums: Vec::new(),
        donate_argnums: Vec::new(),
        arg_names: Vec::new(),
        configured: std::sync::OnceLock::new(),
        _types: PhantomData,
    }
}

impl<A: Tree, R: Tree, F: Fn(A) -> Result<R>> Jit<F, A, R> {
    config_methods!();

    /// Positional arguments whose values are static: only scalars and static values may
    /// appear in them (a tensor there is TY4).
    pub fn static_argnums(mut self, argnums: &[usize]) -> Self {
        self.static_argnums = argnums.to_vec();
        self
    }

    /// Positional arguments whose tensors a call gives to the run (JAX's `donate_argnums`):
    /// the run may reuse their storage for its outputs, so a loop `x = f(x)` stops allocating
    /// a new `x` each time. Donating needs ownership: [`Jit::call_donated`] takes the
    /// arguments by value, and a tensor the caller still holds a clone of is lent, never
    /// written; [`Jit::call`] borrows and donates nothing (`docs/devices.md`).
    pub fn donate_argnums(mut self, argnums: &[usize]) -> Self {
        self.donate_argnums = argnums.to_vec();
        self
    }

    /// Names of the positional arguments, used as the roots of input names (`params/w`).
    pub fn arg_names(mut self, names: &[&str]) -> Self {
        self.arg_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// The target: `"cpu"` (default), `"cuda"`, `"cuda:N"` or `"mlx"`.
    pub fn device(mut self, device: impl Into<String>) -> Self {
        self.shell.target.device = Arc::from(device.into());
        self
    }

    /// `None` (the reference rules of numerics.md §1.5), `"float32"` (native float32
    /// contractions and float32 `sum`/`mean` accumulators on the CPU; a no-op on devices) or
    /// `"float64"` (CUDA only; ignored on the CPU). Part of the signature, so one function
    /// jitted at two precisions keeps two plans.
    pub fn precision(mut self, precision: Option<&str>) -> Self {
        self.shell.target.precision = precision.map(Arc::from);
        self
    }

    /// Compiles the plan with the non-finite check: every node runs as its own step, and a
    /// run stops with [`crate::Error::NonFinite`] at the first node that makes a NaN or an
    /// infinity from finite operands, in the forward or the backward pass, naming the node's
    /// text line, its operands' ranges and the source line of the user code it came from (for
    /// a derivative node, the rule and the primal line). A debugging mode on the CPU: slower
    /// (no fusion), the same values when nothing is caught; off, it costs nothing. Part of the
    /// signature, like the precision. [`crate::debug_nans`] turns it on process-wide.
    pub fn check_nans(mut self, check: bool) -> Self {
        self.shell.target.check_nans = check;
        self
    }

    fn check_config(&self) -> Result<()> {
        if self.configured.get().is_some() {
            return Ok(());
        }
        self.validate_config()?;
        let _ = self.configured.set(());
        Ok(())
    }

    fn validate_config(&self) -> Result<()> {
        self.shell.config.validate()?;
        if let Some(p) = &self.shell.target.precision {
            if !matches!(&**p, "float32" | "float64") {
                return Err(Error::invalid(format!(
                    "precision must be None, \"float32\" or \"float64\", got {p:?}"
                )));
            }
        }
        match parse_device(&self.shell.target.device) {
            Device::Named => crate::devices::backend_for(&self.shell.target.device).map(|_| ()),
            Device::Invalid(d) => Err(Error::invalid(format!(
                "invalid device {d:?}; expected \"cpu\", \"cuda\", \"cuda:N\" or \"mlx\", or the \
                 name of a loaded backend plugin{}",
                crate::devices::plugin_names_hint()
            ))),
        }
    }

    /// TY4 for an array leaf in a static positional argument (the first in leaf order).
    fn check_static(&self, def: &TreeDef, leaves: &[Leaf]) -> Result<()> {
        if self.static_argnums.is_empty() {
            return Ok(());
        }
        let n_args = def.positional_args().len();
        if let Some(&arg) = self.static_argnums.iter().find(|&&a| a >= n_args) {
            return Err(Error::invalid(format!(
                "static_argnums names argument {arg}, but the function was called with {n_args} argument{}",
                if n_args == 1 { "" } else { "s" }
            )));
        }
        let array = |l: &Leaf| matches!(l, Leaf::Tensor(_) | Leaf::Abstract(_));
        match leaves
            .iter()
            .zip(def.leaf_args())
            .find(|(l, arg)| array(l) && self.static_argnums.contains(arg))
        {
            Some((_, arg)) => Err(Error::Type {
                message: format!(
                    "static argument {arg} is not hashable (Tensor); static values must support hash()"
                ),
            }),
            None => Ok(()),
        }
    }

    /// TR6 for a random key outside the static arguments (checked on a miss only: a call with
    /// a key elsewhere never has a cached signature).
    fn check_keys(&self, def: &TreeDef, leaves: &[Leaf]) -> Result<()> {
        match leaves
            .iter()
            .zip(def.leaf_args())
            .find(|(l, arg)| matches!(l, Leaf::Key(_)) && !self.static_argnums.contains(arg))
        {
            Some((_, arg)) => Err(crate::staging::traced_key(arg)),
            None => Ok(()),
        }
    }

    /// Traces `f` for a prepared call and compiles the plan.
    fn trace_and_compile(&self, signature: Signature, prepared: &Prepared) -> Result<Entry> {
        Entry::compile(signature, prepared.trace::<A, R>(&|a| (self.shell.f)(a))?)
    }

    /// Calls the compiled function.
    pub fn call(&self, args: &A) -> Result<R> {
        self.check_config()?;
        if trace::active() {
            // Inside another trace the function is inlined into it.
            let (leaves, def) = tree::flatten(args);
            return (self.shell.f)(def.unflatten(leaves)?);
        }
        CallScratch::with(|scratch| {
            let def = args.flatten(&mut scratch.leaves);
            let leaves = &scratch.leaves;
            let entry = self.entry_for(&def, leaves)?;
            entry.call(&def, leaves, Wrt::Nothing, &[], &mut scratch.outputs)
        })
    }

    /// Calls the compiled function, giving it the arguments: the tensors of the
    /// `donate_argnums` arguments that nobody else holds are donated to the run (see
    /// [`Jit::donate_argnums`]); the others are lent as by [`Jit::call`]. The values are
    /// those of [`Jit::call`].
    pub fn call_donated(&self, args: A) -> Result<R> {
        self.check_config()?;
        if self.donate_argnums.is_empty() || trace::active() {
            return self.call(&args);
        }
        let (mut leaves, def) = tree::flatten(&args);
        // The arguments' own handles go now, so the leaves are the last holders of tensors the
        // caller gave up.
        drop(args);
        let n_args = def.positional_args().len();
        if let Some(&arg) = self.donate_argnums.iter().find(|&&a| a >= n_args) {
            return Err(Error::invalid(format!(
                "donate_argnums names argument {arg}, but the function was called with {n_args} argument{}",
                if n_args == 1 { "" } else { "s" }
            )));
        }
        if let Some(&arg) = self
            .donate_argnums
            .iter()
            .find(|a| self.static_argnums.contains(a))
        {
            return Err(Error::invalid(format!(
                "argument {arg} is both static and donated; a static argument has no buffers to donate"
            )));
        }
        let entry = self.entry_for(&def, &leaves)?;
        let donated: Vec<bool> = def
            .leaf_args()
            .map(|arg| self.donate_argnums.contains(&arg))
            .collect();
        let mut outputs = Vec::new();
        entry.call_donating(&mut leaves, &donated, &mut outputs)
    }

    /// The compiled plan for the signature of `args`, from the cache or traced now, for a
    /// caller that runs its plan many times on flat inputs (through `Entry::runnable`: the
    /// tensor leaves of the arguments in flatten order) instead of
    /// calling with a tree each time. A concretization error inside another trace, where a
    /// jitted function has no plan of its own and the caller's host loop cannot run.
    pub(crate) fn compiled(&self, args: &A) -> Result<Arc<Entry>> {
        self.check_config()?;
        if trace::active() {
            return Err(Error::Tracer {
                kind: crate::error::TracerErrorKind::Concretization,
                message: format!(
                    "{} runs on the host with concrete values and cannot be called inside a \
                     traced function; call it outside jit/grad/vmap",
                    self.shell.config.name
                ),
            });
        }
        let (leaves, def) = tree::flatten(args);
        self.entry_for(&def, &leaves)
    }

    /// The cached entry for a call's leaves, or a new one traced and compiled.
    fn entry_for(&self, def: &TreeDef, leaves: &[Leaf]) -> Result<Arc<Entry>> {
        self.check_static(def, leaves)?;
        let target = &self.shell.target;
        if let Some(entry) = self.shell.cache.lookup(def, leaves, Wrt::Nothing, target) {
            return Ok(entry);
        }
        self.check_keys(def, leaves)?;
        let signature = Signature::of(def, leaves, Wrt::Nothing, target);
        let owner = self.shell.owner(&self.arg_names);
        self.shell.cache.get_or_build(&owner, signature, |sig| {
            let prepared = Prepared::new(def, leaves, Wrt::Nothing, &self.arg_names, false)?;
            self.trace_and_compile(sig, &prepared)
        })
    }

    /// Traces and compiles for the given arguments (tensors, [`crate::ShapeDtype`]s or
    /// scalars) without running.
    pub fn lower<L: Tree>(&self, args: &L) -> Result<Lowered<A, R>> {
        self.check_config()?;
        let (leaves, def) = tree::flatten(args);
        self.check_static(&def, &leaves)?;
        self.check_keys(&def, &leaves)?;
        let signature = Signature::of(&def, &leaves, Wrt::Nothing, &self.shell.target);
        let prepared = Prepared::new(&def, &leaves, Wrt::Nothing, &self.arg_names, true)?;
        let entry = self.trace_and_compile(signature, &prepared)?;
        Ok(Lowered {
            program: crate::Program::new(entry.plan.clone()),
            entry: Arc::new(entry),
            _types: PhantomData,
        })
    }
}

/// A staged function for one signature: its plan text, and a callable for exactly that
/// signature.
pub struct Lowered<A, R> {
    entry: Arc<Entry>,
    program: crate::Program,
    _types: PhantomData<fn(A) -> R>,
}

impl<A, R> fmt::Debug for Lowered<A, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lowered({})", self.entry.signature)
    }
}

impl<A: Tree, R: Tree> Lowered<A, R> {
    /// The frozen plan as text (transforms.md §15.3).
    pub fn as_text(&self) -> String {
        self.entry.plan.as_text()
    }

    /// [`Lowered::as_text`] with the source line of the user code that created each node as a
    /// trailing `# file:line:column` comment; a node made by a derivative rule names the rule
    /// and the primal line it differentiates (`# vjp of sqrt at src/main.rs:12:17`). Nodes whose
    /// origin is unknown (constants the passes made, nodes of the library's own composites
    /// reached through a closure) have no comment.
    pub fn as_text_with_locations(&self) -> String {
        self.entry.plan.as_text_with_origins()
    }

    /// How the backend runs the compiled plan, in lines for people. On the CPU: the number of
    /// steps and fused elementwise groups, then one line per control-flow region (nested ones
    /// indented) saying whether the loop runs machine code or which interpreted form it takes:
    ///
    /// ```text
    /// cpu: 1 step, 0 fused elementwise groups
    ///   fori (100000 iterations): native code
    /// ```
    ///
    /// Native code and the interpreter give the same bits; the report only says which runs.
    pub fn compile_report(&self) -> String {
        self.entry.report()
    }

    /// Number of node lines.
    pub fn node_count(&self) -> usize {
        self.entry.plan.graph().len()
    }

    /// The plan as a [`crate::Program`] with named inputs and ordered outputs, which compiles
    /// for any target and runs with inputs by name.
    pub fn program(&self) -> &crate::Program {
        &self.program
    }

    /// The signature this was lowered for.
    pub fn signature(&self) -> &Signature {
        &self.entry.signature
    }

    /// A callable for exactly this signature.
    pub fn compile(&self) -> Compiled<A, R> {
        Compiled {
            entry: self.entry.clone(),
            _types: PhantomData,
        }
    }
}

/// A function compiled for one signature (from [`Lowered::compile`]).
pub struct Compiled<A, R> {
    entry: Arc<Entry>,
    _types: PhantomData<fn(A) -> R>,
}

impl<A, R> fmt::Debug for Compiled<A, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Compiled({})", self.entry.signature)
    }
}

impl<A, R> Compiled<A, R> {
    /// The compiled trace, for callers that run it on flat inputs (`Trainer`).
    pub(crate) fn entry(&self) -> &Arc<Entry> {
        &self.entry
    }
}

impl<A: Tree, R: Tree> Compiled<A, R> {
    /// Runs the plan; arguments of another signature are TF10.
    pub fn call(&self, args: &A) -> Result<R> {
        CallScratch::with(|scratch| {
            let def = args.flatten(&mut scratch.leaves);
            let leaves = &scratch.leaves;
            let expected = &self.entry.signature;
            let target = Target {
                device: expected.device.clone(),
                precision: expected.precision.clone(),
                check_nans: expected.check_nans,
            };
            if !expected.matches(&def, leaves, Wrt::Nothing, &target) {
                let signature = Signature {
                    def,
                    leaves: leaves.iter().map(|l| leaf_signature(l, false)).collect(),
                    device: expected.device.clone(),
                    precision: expected.precision.clone(),
                    check_nans: expected.check_nans,
                };
                return Err(Error::Structure {
                    message: format!("compiled function expects {expected}, got {signature}"),
                });
            }
            self.entry
                .call(&def, leaves, Wrt::Nothing, &[], &mut scratch.outputs)
        })
    }
}
