//! `jit`: trace a function once per signature, compile the plan, and run it on every later call
//! with the same signature; `lower` stages without running.
//!
//! The cached call does only this: flatten the arguments, build the [`Signature`], look it up
//! in a small LRU, bind buffers and run. A miss with a full cache evicts the least recently used
//! entry and raises `RetraceWarning` (errors.md WR1) before tracing the new signature. Inside
//! another trace, a jitted function is inlined: its operations record into the enclosing trace.

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{self, InputLeaf, OutSlot, TracedFunction};
use crate::tree::{self, Leaf, PathEntry, Tree, TreeDef};
use crate::warnings::{self, Warning};
use quabla_backend::{Executable, HostTensor};
use quabla_ir::{DType, Plan, Shape, TensorType};
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
}

fn signature_hash(signature: &Signature) -> u64 {
    let mut h = FxHasher(0);
    signature.hash(&mut h);
    h.finish()
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

    fn write_usize(&mut self, v: usize) {
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
        Ok(Entry {
            hash: signature_hash(&signature),
            signature,
            plan,
            exe,
            out_def,
            out_slots,
        })
    }

    /// Runs the plan on concrete inputs (in plan input order) and returns its outputs.
    pub(crate) fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let host: Vec<HostTensor> = inputs.iter().map(Tensor::to_host).collect::<Result<_>>()?;
        let outs = self.exe.run(&host)?;
        let types = self.plan.output_types();
        Ok(outs
            .into_iter()
            .zip(types)
            .map(|(h, ty)| Tensor::from_host(h, ty.weak))
            .collect())
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
                .position(|e| e.hash == hash && e.signature == signature)
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

    fn signature(&self, def: &TreeDef, leaves: &[Leaf]) -> Result<Signature> {
        if !self.static_argnums.is_empty() {
            let positions = arg_positions(def);
            for (leaf, &arg) in leaves.iter().zip(&positions) {
                if self.static_argnums.contains(&arg)
                    && matches!(leaf, Leaf::Tensor(_) | Leaf::Abstract(_))
                {
                    return Err(Error::Type {
                        message: format!(
                            "static argument {arg} is not hashable (Tensor); static values must support hash()"
                        ),
                    });
                }
            }
        }
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
        let (leaves, def) = tree::flatten(args);
        if trace::active() {
            // Inside another trace the function is inlined into it.
            return (self.f)(def.unflatten(leaves)?);
        }
        let signature = self.signature(&def, &leaves)?;
        let entry = self.entry(signature, &leaves)?;
        run_entry(&entry, leaves)
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

/// Binds the array leaves to the plan inputs, runs the plan and rebuilds the result tree.
fn run_entry<R: Tree>(entry: &Entry, leaves: Vec<Leaf>) -> Result<R> {
    let inputs: Vec<Tensor> = leaves
        .into_iter()
        .filter_map(|l| match l {
            Leaf::Tensor(t) => Some(t),
            _ => None,
        })
        .collect();
    let outs = entry.run(&inputs)?;
    rebuild(&entry.out_def, &entry.out_slots, outs)
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
        let (leaves, def) = tree::flatten(args);
        let signature = Signature {
            def,
            leaves: leaves.iter().map(leaf_signature).collect(),
            device: self.entry.signature.device.clone(),
            precision: self.entry.signature.precision.clone(),
        };
        if signature != self.entry.signature {
            return Err(Error::Structure {
                message: format!(
                    "compiled function expects {}, got {signature}",
                    self.entry.signature
                ),
            });
        }
        run_entry(&self.entry, leaves)
    }
}
