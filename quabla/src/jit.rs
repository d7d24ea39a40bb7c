//! `jit`: trace a function once per signature, compile the plan, and run it on every later call
//! with the same signature; `lower` stages without running.
//!
//! The cached call does only this: flatten the arguments, compute the signature, look it up in
//! a small LRU, bind buffers and run. On that path nothing is built that a hit would throw
//! away: the leaves are flattened into a per-thread vector that is reused, the signature is
//! hashed straight from the leaves and compared field by field with the cached
//! [`Signature`]s, the tensors' host buffers are lent to the backend by reference, and the
//! outputs land in a reused vector from which the result tree is rebuilt. The printable
//! [`Signature`] is only built on a miss. A miss with a full cache evicts the least recently
//! used entry and raises `RetraceWarning` (errors.md WR1) before tracing the new signature.
//! Inside another trace, a jitted function is inlined: its operations record into the
//! enclosing trace.

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{self, InputLeaf, OutSlot, TracedFunction};
use crate::tree::{self, Leaf, PathEntry, Tree, TreeDef};
use crate::warnings::{self, Warning};
use quabla_backend::{Executable, HostTensor};
use quabla_ir::{DType, Plan, Shape, TensorType};
use std::cell::RefCell;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

/// The signature of one leaf: an array's dtype, shape and weak flag, or a static value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LeafSignature {
    Array {
        dtype: DType,
        shape: Shape,
        weak: bool,
    },
    /// A static `f64`, compared by bit pattern (`0.0` and `-0.0` differ; equal NaNs hit).
    F64(u64),
    Bool(bool),
    Int(i64),
}

impl fmt::Display for LeafSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeafSignature::Array { dtype, shape, .. } => {
                let dims: Vec<String> = shape.dims().iter().map(|d| d.to_string()).collect();
                write!(f, "{}[{}]", dtype.name(), dims.join(","))
            }
            LeafSignature::F64(bits) => {
                f.write_str(&quabla_ir::text::format_f64(f64::from_bits(*bits)))
            }
            LeafSignature::Bool(b) => f.write_str(if *b { "True" } else { "False" }),
            LeafSignature::Int(i) => write!(f, "{i}"),
        }
    }
}

/// The trace-cache key of a call (transforms.md §2.1): the argument structure (with static
/// meta values), each leaf's signature, the device and the precision. Printable.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Signature {
    pub def: TreeDef,
    pub leaves: Vec<LeafSignature>,
    pub device: Arc<str>,
    pub precision: Option<Arc<str>>,
}

impl fmt::Display for Signature {
    /// The argument list as a Python tuple: `(float64[1],)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let body = self.def.fmt_with(&mut |i| self.leaves[i].to_string());
        match self.def {
            TreeDef::Tuple(_) => f.write_str(&body),
            _ => write!(f, "({body},)"),
        }
    }
}

impl Signature {
    /// The first part in which `new` differs from `self`, for the `changed:` line of WR1.
    pub fn difference(&self, new: &Signature, arg_names: &[String]) -> String {
        if self.def != new.def {
            return format!("structure {self} -> {new}");
        }
        let names = trace::leaf_names(&self.def, arg_names);
        let positions = arg_positions(&self.def);
        for (i, (a, b)) in self.leaves.iter().zip(&new.leaves).enumerate() {
            if a == b {
                continue;
            }
            let arg = positions[i];
            return match (a, b) {
                (
                    LeafSignature::Array {
                        dtype: da,
                        shape: sa,
                        weak: wa,
                    },
                    LeafSignature::Array {
                        dtype: db,
                        shape: sb,
                        weak: wb,
                    },
                ) => {
                    let what = if sa != sb {
                        format!("shape {sa} -> {sb}")
                    } else if da != db {
                        format!("dtype {} -> {}", da.name(), db.name())
                    } else {
                        format!("weak {wa} -> {wb}")
                    };
                    format!("arg {arg} leaf {}: {what}", names[i])
                }
                (LeafSignature::Array { .. }, _) | (_, LeafSignature::Array { .. }) => {
                    format!("arg {arg} leaf {}: {a} -> {b}", names[i])
                }
                _ => format!("static arg {arg}: {a} -> {b}"),
            };
        }
        if self.device != new.device {
            return format!("device {} -> {}", self.device, new.device);
        }
        format!("precision {:?} -> {:?}", self.precision, new.precision)
    }
}

/// The positional argument each leaf belongs to.
pub(crate) fn arg_positions(def: &TreeDef) -> Vec<usize> {
    match def {
        TreeDef::Tuple(_) => def
            .leaf_paths()
            .iter()
            .map(|p| match p.first() {
                Some(PathEntry::Index(i)) => *i,
                _ => 0,
            })
            .collect(),
        _ => vec![0; def.num_leaves()],
    }
}

/// A leaf's signature borrowed from where it lives (a call's leaves or a cached
/// [`Signature`]): what a lookup hashes and compares, so a hit builds nothing. Both sources
/// give equal keys exactly when their [`LeafSignature`]s are equal.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum LeafKey<'a> {
    Array {
        dtype: DType,
        dims: &'a [usize],
        weak: bool,
    },
    F64(u64),
    Bool(bool),
    Int(i64),
}

impl LeafKey<'_> {
    fn of_leaf(leaf: &Leaf) -> LeafKey<'_> {
        match leaf {
            Leaf::Tensor(t) => LeafKey::Array {
                dtype: t.dtype(),
                dims: t.shape(),
                weak: t.is_weak(),
            },
            // `leaf_signature` turns an invalid shape (a zero extent) into the rank-0 shape.
            Leaf::Abstract(s) => LeafKey::Array {
                dtype: s.dtype,
                dims: if s.shape.contains(&0) { &[] } else { &s.shape },
                weak: false,
            },
            Leaf::F64(v) => LeafKey::F64(v.to_bits()),
            Leaf::Bool(b) => LeafKey::Bool(*b),
            Leaf::Int(i) => LeafKey::Int(*i),
        }
    }

    fn of_signature(sig: &LeafSignature) -> LeafKey<'_> {
        match sig {
            LeafSignature::Array { dtype, shape, weak } => LeafKey::Array {
                dtype: *dtype,
                dims: shape.dims(),
                weak: *weak,
            },
            LeafSignature::F64(bits) => LeafKey::F64(*bits),
            LeafSignature::Bool(b) => LeafKey::Bool(*b),
            LeafSignature::Int(i) => LeafKey::Int(*i),
        }
    }
}

/// The cache hash of a structure and its leaves (the device and precision are compared, not
/// hashed: they rarely tell entries apart).
fn key_hash<'a>(def: &TreeDef, leaves: impl Iterator<Item = LeafKey<'a>>) -> u64 {
    let mut h = FxHasher(0);
    def.hash(&mut h);
    for leaf in leaves {
        leaf.hash(&mut h);
    }
    h.finish()
}

impl Signature {
    /// Whether a call with structure `def` and `leaves` on `device` at `precision` has this
    /// signature, compared without building one.
    fn matches(
        &self,
        def: &TreeDef,
        leaves: &[Leaf],
        device: &Arc<str>,
        precision: &Option<Arc<str>>,
    ) -> bool {
        (Arc::ptr_eq(&self.device, device) || self.device == *device)
            && self.precision == *precision
            && self.leaves.len() == leaves.len()
            && self
                .leaves
                .iter()
                .zip(leaves)
                .all(|(s, l)| LeafKey::of_signature(s) == LeafKey::of_leaf(l))
            && self.def == *def
    }
}

pub(crate) fn leaf_signature(leaf: &Leaf) -> LeafSignature {
    match leaf {
        Leaf::Tensor(t) => LeafSignature::Array {
            dtype: t.dtype(),
            shape: Shape::new(t.shape().to_vec()).expect("tensor shapes are valid"),
            weak: t.is_weak(),
        },
        Leaf::Abstract(s) => LeafSignature::Array {
            dtype: s.dtype,
            shape: Shape::new(s.shape.clone()).unwrap_or_default(),
            weak: false,
        },
        Leaf::F64(v) => LeafSignature::F64(v.to_bits()),
        Leaf::Bool(b) => LeafSignature::Bool(*b),
        Leaf::Int(i) => LeafSignature::Int(*i),
    }
}

/// A compiled trace: the plan, its executable, and how results are rebuilt.
pub(crate) struct Entry {
    hash: u64,
    pub signature: Signature,
    pub plan: Plan,
    exe: Arc<dyn Executable>,
    pub out_def: TreeDef,
    pub out_slots: Vec<OutSlot>,
    /// The weak flag of each plan output.
    out_weak: Vec<bool>,
    /// Whether the result's leaves are exactly the plan outputs in order (no static leaves,
    /// none repeated), so the result is rebuilt straight from the outputs.
    outputs_in_order: bool,
}

fn signature_hash(signature: &Signature) -> u64 {
    key_hash(
        &signature.def,
        signature.leaves.iter().map(LeafKey::of_signature),
    )
}

/// A small multiplicative hasher for cache keys (not for untrusted input: a collision only
/// costs a full signature comparison, which always follows).
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    fn write_i64(&mut self, v: i64) {
        self.write_u64(v as u64);
    }

    fn write_isize(&mut self, v: isize) {
        self.write_u64(v as u64);
    }
}

impl Entry {
    /// Compiles a traced (and possibly transformed) graph for the CPU.
    pub(crate) fn compile(
        signature: Signature,
        graph: &quabla_ir::Graph,
        out_def: TreeDef,
        out_slots: Vec<OutSlot>,
    ) -> Result<Entry> {
        let plan = Plan::compile(graph);
        let exe = crate::devices::backend_for(&signature.device)?.compile(&plan)?;
        let out_weak: Vec<bool> = plan.output_types().iter().map(|ty| ty.weak).collect();
        let outputs_in_order = out_slots.len() == out_weak.len()
            && out_def.num_leaves() == out_slots.len()
            && out_slots
                .iter()
                .enumerate()
                .all(|(i, slot)| matches!(slot, OutSlot::Plan(j) if *j == i));
        Ok(Entry {
            hash: signature_hash(&signature),
            signature,
            plan,
            exe,
            out_def,
            out_slots,
            out_weak,
            outputs_in_order,
        })
    }

    /// Runs the plan on concrete inputs (in plan input order) and returns its outputs.
    pub(crate) fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut outs = Vec::with_capacity(self.out_weak.len());
        crate::tensor::with_host_refs(inputs.iter(), |host| {
            Ok(self.exe.run_borrowed(host, &mut outs)?)
        })?;
        Ok(outs
            .into_iter()
            .zip(&self.out_weak)
            .map(|(h, &weak)| Tensor::from_host(h, weak))
            .collect())
    }

    /// Runs the plan on the tensor leaves of a call (in order, the plan's inputs) and rebuilds
    /// the result tree; `outputs` is an empty vector to receive the plan outputs in, left
    /// empty again.
    fn call<R: Tree>(&self, leaves: &[Leaf], outputs: &mut Vec<HostTensor>) -> Result<R> {
        let tensors = leaves.iter().filter_map(Leaf::as_tensor);
        let ran = crate::tensor::with_host_refs(tensors, |host| {
            Ok(self.exe.run_borrowed(host, outputs)?)
        });
        if let Err(e) = ran {
            outputs.clear();
            return Err(e);
        }
        if self.outputs_in_order && outputs.len() == self.out_weak.len() {
            let mut results = outputs
                .drain(..)
                .zip(&self.out_weak)
                .map(|(h, &weak)| Leaf::Tensor(Tensor::from_host(h, weak)));
            // The structure holds exactly one leaf per output (checked at compile).
            return R::unflatten(&self.out_def, &mut results);
        }
        let outs = outputs
            .drain(..)
            .zip(&self.out_weak)
            .map(|(h, &weak)| Tensor::from_host(h, weak))
            .collect();
        rebuild(&self.out_def, &self.out_slots, outs)
    }
}

/// The vectors a cached call flattens its arguments into and receives its outputs in, kept per
/// thread so that a call allocates neither. They are empty between calls (a call clears them
/// on the way out, and again on the way in after a panic); a call made while they are in use
/// (from a `Tree` implementation, say) uses vectors of its own, which is merely slower.
#[derive(Default)]
struct CallScratch {
    leaves: Vec<Leaf>,
    outputs: Vec<HostTensor>,
}

thread_local! {
    static CALL_SCRATCH: RefCell<CallScratch> = const {
        RefCell::new(CallScratch {
            leaves: Vec::new(),
            outputs: Vec::new(),
        })
    };
}

impl CallScratch {
    fn with<T>(f: impl FnOnce(&mut CallScratch) -> T) -> T {
        let run = |scratch: &mut CallScratch| {
            scratch.clear();
            let out = f(scratch);
            scratch.clear();
            out
        };
        CALL_SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => run(&mut scratch),
            Err(_) => run(&mut CallScratch::default()),
        })
    }

    fn clear(&mut self) {
        self.leaves.clear();
        self.outputs.clear();
    }
}

/// The LRU trace cache every transformed function owns (transforms.md §2.2).
#[derive(Default)]
pub(crate) struct TraceCache {
    entries: Mutex<Vec<Arc<Entry>>>,
}

/// Who owns a cache, for the text of `RetraceWarning`.
pub(crate) struct CacheOwner<'a> {
    pub transform: &'static str,
    pub function: &'a str,
    pub max_traces: usize,
    pub arg_names: &'a [String],
}

impl TraceCache {
    /// The cached entry for a call with structure `def` and `leaves` on `device` at
    /// `precision`, made the most recently used; nothing is built on the way.
    pub(crate) fn lookup(
        &self,
        def: &TreeDef,
        leaves: &[Leaf],
        device: &Arc<str>,
        precision: &Option<Arc<str>>,
    ) -> Option<Arc<Entry>> {
        let mut cache = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let last = cache.len().checked_sub(1)?;
        // A function called again with what it was called with last needs no hash.
        if cache[last]
            .signature
            .matches(def, leaves, device, precision)
        {
            return Some(cache[last].clone());
        }
        let hash = key_hash(def, leaves.iter().map(LeafKey::of_leaf));
        let pos = cache[..last]
            .iter()
            .rposition(|e| e.hash == hash && e.signature.matches(def, leaves, device, precision))?;
        let hit = cache.remove(pos);
        cache.push(hit.clone());
        Some(hit)
    }

    /// The entry of `signature`, built by `build` on a miss (evicting and warning first when
    /// the cache is full).
    pub(crate) fn get_or_build(
        &self,
        owner: &CacheOwner<'_>,
        signature: Signature,
        build: impl FnOnce(Signature) -> Result<Entry>,
    ) -> Result<Arc<Entry>> {
        let hash = signature_hash(&signature);
        {
            let mut cache = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(pos) = cache
                .iter()
                .rposition(|e| e.hash == hash && e.signature == signature)
            {
                let hit = cache.remove(pos);
                cache.push(hit.clone());
                return Ok(hit);
            }
            if cache.len() >= owner.max_traces {
                let evicted = cache.remove(0);
                warnings::warn(Warning::Retrace {
                    transform: owner.transform,
                    function: owner.function.to_string(),
                    max_traces: owner.max_traces,
                    evicted: evicted.signature.to_string(),
                    new: signature.to_string(),
                    changed: evicted.signature.difference(&signature, owner.arg_names),
                })?;
            }
        }
        let entry = Arc::new(build(signature)?);
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(entry.clone());
        Ok(entry)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The validated target of a transformed function.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Device {
    Cpu,
    Unavailable(String),
    Invalid(String),
}

fn parse_device(name: &str) -> Device {
    let cuda_ordinal = name
        .strip_prefix("cuda:")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    match name {
        "cpu" => Device::Cpu,
        "cuda" | "mlx" => Device::Unavailable(name.to_string()),
        _ if cuda_ordinal => Device::Unavailable(name.to_string()),
        _ => Device::Invalid(name.to_string()),
    }
}

/// A function compiled by `jit`. Build it with [`jit`], configure it with the builder
/// methods, call it with [`Jit::call`].
pub struct Jit<F, A, R> {
    f: F,
    name: String,
    max_traces: usize,
    static_argnums: Vec<usize>,
    arg_names: Vec<String>,
    device: Arc<str>,
    precision: Option<Arc<str>>,
    cache: TraceCache,
    /// Set once the configuration has been validated and the target resolved, so cached calls
    /// skip both.
    configured: std::sync::OnceLock<()>,
    _types: PhantomData<fn(A) -> R>,
}

impl<F, A, R> fmt::Debug for Jit<F, A, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jit")
            .field("name", &self.name)
            .field("max_traces", &self.max_traces)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

/// Compiles `f` with its own trace cache: `qb::jit(|x: Tensor| x.sin()).call(&x)`.
/// Arguments are any [`Tree`]; a tuple stands for several positional arguments.
pub fn jit<A: Tree, R: Tree, F: Fn(A) -> Result<R>>(f: F) -> Jit<F, A, R> {
    Jit {
        f,
        name: "<closure>".into(),
        max_traces: 8,
        static_argnums: Vec::new(),
        arg_names: Vec::new(),
        device: Arc::from("cpu"),
        precision: None,
        cache: TraceCache::default(),
        configured: std::sync::OnceLock::new(),
        _types: PhantomData,
    }
}

impl<A: Tree, R: Tree, F: Fn(A) -> Result<R>> Jit<F, A, R> {
    /// The name used in warnings (`jit(<name>)`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The LRU capacity of the trace cache (default 8, at least 1).
    pub fn max_traces(mut self, n: usize) -> Self {
        self.max_traces = n;
        self
    }

    /// Positional arguments whose values are static: only scalars and static values may
    /// appear in them (a tensor there is TY4).
    pub fn static_argnums(mut self, argnums: &[usize]) -> Self {
        self.static_argnums = argnums.to_vec();
        self
    }

    /// Names of the positional arguments, used as the roots of input names (`params/w`).
    pub fn arg_names(mut self, names: &[&str]) -> Self {
        self.arg_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// The target: `"cpu"` (default), `"cuda"`, `"cuda:N"` or `"mlx"`.
    pub fn device(mut self, device: impl Into<String>) -> Self {
        self.device = Arc::from(device.into());
        self
    }

    /// `None` or `"float64"` (CUDA only; ignored on the CPU; part of the signature).
    pub fn precision(mut self, precision: Option<&str>) -> Self {
        self.precision = precision.map(Arc::from);
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
        if self.max_traces == 0 {
            return Err(Error::invalid("max_traces must be at least 1"));
        }
        if let Some(p) = &self.precision {
            if &**p != "float64" {
                return Err(Error::invalid(format!(
                    "precision must be None or \"float64\", got {p:?}"
                )));
            }
        }
        match parse_device(&self.device) {
            Device::Cpu | Device::Unavailable(_) => {
                crate::devices::backend_for(&self.device).map(|_| ())
            }
            Device::Invalid(d) => Err(Error::invalid(format!(
                "invalid device {d:?}; expected \"cpu\", \"cuda\", \"cuda:N\" or \"mlx\""
            ))),
        }
    }

    /// TY4 for an array leaf in a static positional argument (the first in leaf order).
    fn check_static(&self, def: &TreeDef, leaves: &[Leaf]) -> Result<()> {
        if self.static_argnums.is_empty() {
            return Ok(());
        }
        let check = |arg: usize, leaves: &[Leaf]| -> Result<()> {
            let array = leaves
                .iter()
                .any(|l| matches!(l, Leaf::Tensor(_) | Leaf::Abstract(_)));
            if array && self.static_argnums.contains(&arg) {
                return Err(Error::Type {
                    message: format!(
                        "static argument {arg} is not hashable (Tensor); static values must support hash()"
                    ),
                });
            }
            Ok(())
        };
        // The leaves of each positional argument are contiguous (see `arg_positions`).
        match def {
            TreeDef::Tuple(args) => {
                let mut start = 0;
                for (arg, d) in args.iter().enumerate() {
                    let end = (start + d.num_leaves()).min(leaves.len());
                    check(arg, &leaves[start..end])?;
                    start = end;
                }
                Ok(())
            }
            _ => check(0, leaves),
        }
    }

    fn signature(&self, def: &TreeDef, leaves: &[Leaf]) -> Result<Signature> {
        self.check_static(def, leaves)?;
        Ok(Signature {
            def: def.clone(),
            leaves: leaves.iter().map(leaf_signature).collect(),
            device: self.device.clone(),
            precision: self.precision.clone(),
        })
    }

    fn trace_and_compile(&self, signature: Signature, leaves: &[Leaf]) -> Result<Entry> {
        let names = trace::leaf_names(&signature.def, &self.arg_names);
        let inputs: Vec<InputLeaf> = leaves
            .iter()
            .zip(&signature.leaves)
            .map(|(leaf, sig)| match sig {
                LeafSignature::Array { dtype, shape, weak } => InputLeaf::Array(TensorType {
                    dtype: *dtype,
                    shape: shape.clone(),
                    weak: *weak,
                }),
                _ => InputLeaf::Static(leaf.clone()),
            })
            .collect();
        let TracedFunction {
            graph,
            captures,
            out_def,
            out_slots,
        } = trace::trace_function::<A, R>(&|a| (self.f)(a), &signature.def, &inputs, &names)?;
        if !captures.is_empty() {
            return Err(Error::Internal {
                message: "a top-level trace captured tracers of an enclosing trace".into(),
            });
        }
        Entry::compile(signature, &graph, out_def, out_slots)
    }

    /// Looks the signature up, tracing and compiling on a miss.
    fn entry(&self, signature: Signature, leaves: &[Leaf]) -> Result<Arc<Entry>> {
        let owner = CacheOwner {
            transform: "jit",
            function: &self.name,
            max_traces: self.max_traces,
            arg_names: &self.arg_names,
        };
        self.cache
            .get_or_build(&owner, signature, |sig| self.trace_and_compile(sig, leaves))
    }

    /// Calls the compiled function.
    pub fn call(&self, args: &A) -> Result<R> {
        self.check_config()?;
        if trace::active() {
            // Inside another trace the function is inlined into it.
            let (leaves, def) = tree::flatten(args);
            return (self.f)(def.unflatten(leaves)?);
        }
        CallScratch::with(|scratch| {
            let def = args.flatten(&mut scratch.leaves);
            let leaves = &scratch.leaves;
            self.check_static(&def, leaves)?;
            let entry = match self
                .cache
                .lookup(&def, leaves, &self.device, &self.precision)
            {
                Some(entry) => entry,
                None => self.entry(self.signature(&def, leaves)?, leaves)?,
            };
            entry.call(leaves, &mut scratch.outputs)
        })
    }

    /// Number of traces currently cached.
    pub fn cache_size(&self) -> usize {
        self.cache.len()
    }

    /// Traces and compiles for the given arguments (tensors, [`crate::ShapeDtype`]s or
    /// scalars) without running.
    pub fn lower<L: Tree>(&self, args: &L) -> Result<Lowered<A, R>> {
        self.check_config()?;
        let (leaves, def) = tree::flatten(args);
        let signature = self.signature(&def, &leaves)?;
        let entry = self.trace_and_compile(signature, &leaves)?;
        Ok(Lowered {
            entry: Arc::new(entry),
            _types: PhantomData,
        })
    }
}

/// Rebuilds a result tree from plan outputs and static output leaves.
pub(crate) fn rebuild<R: Tree>(def: &TreeDef, slots: &[OutSlot], outs: Vec<Tensor>) -> Result<R> {
    let mut outs: Vec<Option<Tensor>> = outs.into_iter().map(Some).collect();
    let leaves: Vec<Leaf> = slots
        .iter()
        .map(|slot| match slot {
            OutSlot::Plan(i) => outs
                .get_mut(*i)
                .and_then(Option::take)
                .map(Leaf::Tensor)
                .ok_or_else(|| Error::Internal {
                    message: "a plan output was bound twice".into(),
                }),
            OutSlot::Static(l) => Ok(l.clone()),
        })
        .collect::<Result<_>>()?;
    def.unflatten(leaves)
}

/// A staged function for one signature: its plan text, and a callable for exactly that
/// signature.
pub struct Lowered<A, R> {
    entry: Arc<Entry>,
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

    /// Number of node lines.
    pub fn node_count(&self) -> usize {
        self.entry.plan.graph().len()
    }

    /// The plan with named inputs and ordered outputs.
    pub fn program(&self) -> &Plan {
        &self.entry.plan
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

impl<A: Tree, R: Tree> Compiled<A, R> {
    /// Runs the plan; arguments of another signature are TF10.
    pub fn call(&self, args: &A) -> Result<R> {
        CallScratch::with(|scratch| {
            let def = args.flatten(&mut scratch.leaves);
            let leaves = &scratch.leaves;
            let expected = &self.entry.signature;
            if !expected.matches(&def, leaves, &expected.device, &expected.precision) {
                let signature = Signature {
                    def,
                    leaves: leaves.iter().map(leaf_signature).collect(),
                    device: expected.device.clone(),
                    precision: expected.precision.clone(),
                };
                return Err(Error::Structure {
                    message: format!("compiled function expects {expected}, got {signature}"),
                });
            }
            self.entry.call(leaves, &mut scratch.outputs)
        })
    }
}
