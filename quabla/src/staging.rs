//! Staging: the machinery every transform shares to turn a call into a traced, rewritten,
//! compiled and cached plan, and to run it.
//!
//! A transformed function (`jit`, `grad`, `jvp`, `vmap`, ...) is a thin shell in
//! [`crate::transforms`]: it says which arguments it differentiates ([`Wrt`]) and how to
//! *stage* a call, that is how to trace the function and which graph rewrite of
//! `quabla-autodiff` or `quabla-vmap` to apply. This module owns the rest:
//!
//! - the printable trace-cache key ([`Signature`], transforms.md §2.1);
//! - the LRU of compiled traces with `max_traces` and `RetraceWarning` ([`TraceCache`],
//!   transforms.md §2.2);
//! - the allocation-free hit path: a call flattens its arguments into a per-thread vector that
//!   is reused ([`CallScratch`]), its signature is compared field by field with the most
//!   recently used entry (hashed from the leaves only when that entry differs), the tensors'
//!   host buffers are lent to the backend by reference, and the outputs land in a reused
//!   vector from which the result tree is rebuilt; the printable [`Signature`], the leaf names
//!   and the [`Prepared`] arguments are built only on a miss;
//! - [`execute`]: inside another trace, stage and inline the rewritten graph into it (which is
//!   how transforms nest to any order); otherwise look the signature up, staging and compiling
//!   on a miss, and run.
//!
//! It must not know any particular transform: everything transform-specific arrives through
//! the `stage` closure.

use crate::error::{Error, Result};
use crate::operand::Operand;
use crate::runtime::{with_host_refs, Runnable};
use crate::tensor::Tensor;
use crate::trace::{self, InputLeaf, OutSlot, TracedFunction};
use crate::tree::{self, Leaf, Tree, TreeDef};
use crate::warnings::{self, Warning};
use quabla_backend::HostTensor;
use quabla_ir::{DType, HostData, Plan, Shape, TensorType};
use std::cell::RefCell;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

// ---------------------------------------------------------------------------------------------
// Configuration shared by every transformed function

/// What every transformed function is configured with: its name in warnings and the capacity
/// of its trace cache.
#[derive(Clone, Debug)]
pub(crate) struct TransformConfig {
    pub name: String,
    pub max_traces: usize,
}

impl Default for TransformConfig {
    fn default() -> TransformConfig {
        TransformConfig {
            name: "<closure>".into(),
            max_traces: 8,
        }
    }
}

impl TransformConfig {
    /// AR3.
    pub fn validate(&self) -> Result<()> {
        if self.max_traces == 0 {
            return Err(Error::invalid("max_traces must be at least 1"));
        }
        Ok(())
    }

    /// The owner of a cache for `RetraceWarning`.
    pub fn owner<'a>(&'a self, transform: &'static str, arg_names: &'a [String]) -> CacheOwner<'a> {
        CacheOwner {
            transform,
            function: &self.name,
            max_traces: self.max_traces,
            arg_names,
        }
    }
}

/// What every transformed function object holds: the transform's name, the function, its
/// configuration, its target and its trace cache (`A` is the function's argument type).
pub(crate) struct Shell<F, A, C = TraceCache> {
    pub transform: &'static str,
    pub f: F,
    pub config: TransformConfig,
    pub target: Target,
    pub cache: C,
    _args: PhantomData<fn(A)>,
}

impl<F, A, C: Default> Shell<F, A, C> {
    pub fn new(transform: &'static str, f: F) -> Self {
        Shell {
            transform,
            f,
            config: TransformConfig::default(),
            target: Target::cpu(),
            cache: C::default(),
            _args: PhantomData,
        }
    }
}

impl<F, A, C> Shell<F, A, C> {
    /// The owner of the cache for `RetraceWarning`.
    pub fn owner<'a>(&'a self, arg_names: &'a [String]) -> CacheOwner<'a> {
        self.config.owner(self.transform, arg_names)
    }
}

impl<F, A, C> fmt::Debug for Shell<F, A, C> {
    /// `transform(name)`, how every transformed function prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.transform, self.config.name)
    }
}

/// `Debug` for a transform object with a `shell` field: it prints as its shell.
macro_rules! debug_as_shell {
    ($($ty:ident),*) => {$(
        impl<F, A> std::fmt::Debug for $ty<F, A> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(&self.shell, f)
            }
        }
    )*};
}

/// Which positional arguments a derivative transform differentiates, and whether its result
/// is a tuple over them (`argnums(&[..])`) or the one argument's tree (`argnum(i)`).
#[derive(Clone, Debug)]
pub(crate) struct Selection {
    pub argnums: Vec<usize>,
    pub as_tuple: bool,
}

impl Default for Selection {
    fn default() -> Selection {
        Selection {
            argnums: vec![0],
            as_tuple: false,
        }
    }
}

impl Selection {
    /// AR-style checks: distinct and not empty.
    pub fn validate(&self) -> Result<()> {
        let argnums = &self.argnums;
        for (i, a) in argnums.iter().enumerate() {
            if argnums[..i].contains(a) {
                return Err(Error::invalid(format!(
                    "argnums must be distinct, got {argnums:?}"
                )));
            }
        }
        if argnums.is_empty() {
            return Err(Error::invalid("argnums must not be empty"));
        }
        Ok(())
    }
}

/// The builder methods every transformed function has (`name`, `max_traces`, `cache_size`),
/// written once: expanded inside each transform's `impl` block, whose type has a `shell:
/// Shell<..>` field.
macro_rules! config_methods {
    () => {
        /// The name used in warnings (`<transform>(<name>)`).
        pub fn name(mut self, name: impl Into<String>) -> Self {
            self.shell.config.name = name.into();
            self
        }

        /// The LRU capacity of the trace cache (default 8, at least 1: `0` is an error at the
        /// first call).
        pub fn max_traces(mut self, n: usize) -> Self {
            self.shell.config.max_traces = n;
            self
        }

        /// Number of traces currently cached.
        pub fn cache_size(&self) -> usize {
            self.shell.cache.len()
        }
    };
}

/// `argnum` and `argnums`, for the transforms whose type has a `selection: Selection` field.
macro_rules! selection_methods {
    () => {
        /// Differentiate with respect to positional argument `i`; the result is its tree.
        pub fn argnum(mut self, i: usize) -> Self {
            self.selection = $crate::staging::Selection {
                argnums: vec![i],
                as_tuple: false,
            };
            self
        }

        /// Differentiate with respect to several positional arguments; the result is a tuple
        /// of their trees.
        pub fn argnums(mut self, argnums: &[usize]) -> Self {
            self.selection = $crate::staging::Selection {
                argnums: argnums.to_vec(),
                as_tuple: true,
            };
            self
        }
    };
}

pub(crate) use {config_methods, debug_as_shell, selection_methods};

// ---------------------------------------------------------------------------------------------
// Signatures

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
    /// A static random key, by its state.
    Key(u64),
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
            LeafSignature::Key(k) => write!(f, "Key(value={k})"),
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
    /// Whether the plan is compiled with the non-finite check.
    pub check_nans: bool,
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

/// Which positional arguments a transform differentiates: their float tensor leaves become
/// differentiated inputs, and so do their `f64` leaves, which are promoted to float64 rank-0
/// arrays (numerics.md §2.2). Every other scalar leaf is static.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wrt<'a> {
    /// None (`jit`, `vmap`): every scalar leaf is static.
    Nothing,
    /// All of them (`jvp`, `vjp`).
    All,
    /// The listed ones (`grad`, `jacobian`, `hessian`).
    Args(&'a [usize]),
}

impl<'a> Wrt<'a> {
    /// Whether each leaf of a call with structure `def` lies in a differentiated argument.
    /// Only a selection of arguments walks the structure; the usual `jit` and `vmap` calls
    /// (nothing differentiated) and `jvp`/`vjp` (everything) do not.
    fn leaf_flags<'s>(self, def: &'s TreeDef) -> LeafFlags<'s, impl Iterator<Item = usize> + 's>
    where
        'a: 's,
    {
        let leaf_args = def.leaf_args();
        match self {
            Wrt::Nothing => LeafFlags::Every(false),
            Wrt::All => LeafFlags::Every(true),
            Wrt::Args(args) => LeafFlags::Args(args, leaf_args),
        }
    }
}

/// The iterator of [`Wrt::leaf_flags`]: the same flag for every leaf (endless; callers zip it
/// with the leaves), or membership of each leaf's argument in a selection.
enum LeafFlags<'s, I> {
    Every(bool),
    Args(&'s [usize], I),
}

impl<I: Iterator<Item = usize>> Iterator for LeafFlags<'_, I> {
    type Item = bool;

    fn next(&mut self) -> Option<bool> {
        match self {
            LeafFlags::Every(flag) => Some(*flag),
            LeafFlags::Args(args, leaf_args) => leaf_args.next().map(|arg| args.contains(&arg)),
        }
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
    Key(u64),
}

impl LeafKey<'_> {
    /// The key of a call's leaf; `promoted` when it lies in a differentiated argument.
    fn of_leaf(leaf: &Leaf, promoted: bool) -> LeafKey<'_> {
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
            Leaf::F64(_) if promoted => LeafKey::Array {
                dtype: DType::F64,
                dims: &[],
                weak: false,
            },
            Leaf::F64(v) => LeafKey::F64(v.to_bits()),
            Leaf::Bool(b) => LeafKey::Bool(*b),
            Leaf::Int(i) => LeafKey::Int(*i),
            Leaf::Key(k) => LeafKey::Key(k.value()),
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
            LeafSignature::Key(k) => LeafKey::Key(*k),
        }
    }
}

/// The signature of one leaf of a call; `promoted` as for [`LeafKey::of_leaf`].
pub(crate) fn leaf_signature(leaf: &Leaf, promoted: bool) -> LeafSignature {
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
        Leaf::F64(_) if promoted => LeafSignature::Array {
            dtype: DType::F64,
            shape: Shape::scalar(),
            weak: false,
        },
        Leaf::F64(v) => LeafSignature::F64(v.to_bits()),
        Leaf::Bool(b) => LeafSignature::Bool(*b),
        Leaf::Int(i) => LeafSignature::Int(*i),
        Leaf::Key(k) => LeafSignature::Key(k.value()),
    }
}

/// TR6 for a random key in a position a transform traces.
pub(crate) fn traced_key(arg: usize) -> Error {
    Error::Tracer {
        kind: crate::error::TracerErrorKind::RandomTraced,
        message: format!(
            "argument {arg} (a Key) is a tracer: quabla.random samples on the host and keys are not traced; draw samples outside the transform and pass them in, or make the key a static argument of jit (static_argnums)"
        ),
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

/// Where a call runs: the device and precision parts of its signature.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub device: Arc<str>,
    pub precision: Option<Arc<str>>,
    /// `jit(f).check_nans(true)`; [`crate::debug_nans`] turns it on for every target.
    pub check_nans: bool,
}

impl Target {
    /// The CPU at the reference precision, where every transform but `jit` runs.
    pub fn cpu() -> Target {
        thread_local! {
            static CPU: Arc<str> = Arc::from("cpu");
        }
        Target {
            device: CPU.with(Arc::clone),
            precision: None,
            check_nans: false,
        }
    }

    /// Whether plans for this target check for non-finite values: its own flag or the
    /// process-wide [`crate::debug_nans`].
    pub fn checks_nans(&self) -> bool {
        self.check_nans || crate::debug::nans_checked()
    }
}

impl Signature {
    /// The signature of a call with structure `def` and `leaves` on `target`.
    pub(crate) fn of(def: &TreeDef, leaves: &[Leaf], wrt: Wrt<'_>, target: &Target) -> Signature {
        Signature {
            def: def.clone(),
            leaves: leaves
                .iter()
                .zip(wrt.leaf_flags(def))
                .map(|(leaf, promoted)| leaf_signature(leaf, promoted))
                .collect(),
            device: target.device.clone(),
            precision: target.precision.clone(),
            check_nans: target.checks_nans(),
        }
    }

    /// Whether a call with structure `def` and `leaves` on `target` has this signature,
    /// compared without building one.
    pub(crate) fn matches(
        &self,
        def: &TreeDef,
        leaves: &[Leaf],
        wrt: Wrt<'_>,
        target: &Target,
    ) -> bool {
        (Arc::ptr_eq(&self.device, &target.device) || self.device == target.device)
            && self.precision == target.precision
            && self.check_nans == target.checks_nans()
            && self.leaves.len() == leaves.len()
            && self
                .leaves
                .iter()
                .zip(leaves.iter().zip(wrt.leaf_flags(def)))
                .all(|(s, (l, promoted))| LeafKey::of_signature(s) == LeafKey::of_leaf(l, promoted))
            && self.def == *def
    }

    /// The first part in which `new` differs from `self`, for the `changed:` line of WR1.
    pub fn difference(&self, new: &Signature, arg_names: &[String]) -> String {
        if self.def != new.def {
            return format!("structure {self} -> {new}");
        }
        let names = self.def.leaf_names(arg_names);
        for (i, ((a, b), arg)) in self
            .leaves
            .iter()
            .zip(&new.leaves)
            .zip(self.def.leaf_args())
            .enumerate()
        {
            if a == b {
                continue;
            }
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
        if self.check_nans != new.check_nans {
            return format!("check_nans {} -> {}", self.check_nans, new.check_nans);
        }
        format!("precision {:?} -> {:?}", self.precision, new.precision)
    }
}

// ---------------------------------------------------------------------------------------------
// Prepared arguments (built on a miss, and inside traces)

/// A call's arguments prepared for tracing: which leaves become plan inputs and of what type,
/// the values bound to them, which are differentiated, and the leaf names.
pub(crate) struct Prepared {
    pub def: TreeDef,
    /// Per leaf: a plan input of this type, or a static leaf passed through.
    pub inputs: Vec<InputLeaf>,
    /// The values bound to the array inputs, in order (promoted `f64` leaves as float64 rank-0
    /// tensors).
    pub operands: Vec<Tensor>,
    /// Per array input: whether it is differentiated (a selected float input).
    pub wrt: Vec<bool>,
    /// Per leaf: whether it is differentiated.
    pub leaf_wrt: Vec<bool>,
    /// Per leaf: its name (its pytree path).
    pub names: Vec<String>,
}

impl Prepared {
    /// Prepares the leaves of a call with structure `def`; `ShapeDtype` placeholders are
    /// accepted only when `abstract_ok` (`jit(f).lower(..)`). A random key is a static leaf
    /// here: `jit` checks beforehand that keys stand only in static arguments, and the other
    /// transforms refuse them with TR6 ([`Call`] does).
    pub fn new(
        def: &TreeDef,
        leaves: &[Leaf],
        wrt: Wrt<'_>,
        arg_names: &[String],
        abstract_ok: bool,
    ) -> Result<Prepared> {
        // A part of the arguments with no pytree form (too deep, ...) is refused first.
        def.check()?;
        let mut inputs = Vec::with_capacity(leaves.len());
        let mut operands = Vec::new();
        let mut wrt_inputs = Vec::new();
        let mut leaf_wrt = Vec::with_capacity(leaves.len());
        let by_argnums = matches!(wrt, Wrt::Args(_));
        for (leaf, selected) in leaves.iter().zip(wrt.leaf_flags(def)) {
            match leaf {
                // `grad` and friends differentiate the arguments they are pointed at: an
                // integer there is a type error in the user's terms, not a structure mismatch
                // of the gradient (as in JAX, which asks for inexact inputs).
                Leaf::Int(v) if selected && by_argnums => {
                    return Err(Error::Type {
                        message: format!(
                            "cannot differentiate with respect to the integer {v}; pass a float ({v}.0) or a float tensor, or leave the argument out of argnums"
                        ),
                    })
                }
                Leaf::Bool(_) if selected && by_argnums => {
                    return Err(Error::invalid(
                        "cannot differentiate with respect to a bool input; leave the argument out of argnums",
                    ))
                }
                // TY: integer tensors carry no derivative (numerics.md §12); JAX too asks for
                // inexact inputs of `grad`.
                Leaf::Tensor(t) if selected && by_argnums && t.dtype().is_integer() => {
                    return Err(Error::Type {
                        message: format!(
                            "cannot differentiate with respect to an {} tensor: integer values have no derivative; convert it to a float dtype with astype (float64), or leave the argument out of argnums",
                            t.dtype().name()
                        ),
                    })
                }
                Leaf::Tensor(t) => {
                    let ty = t.ir_type();
                    // Bool and integer leaves of `jvp`/`vjp` get no derivative (`None`).
                    let d = selected && ty.dtype.is_float();
                    inputs.push(InputLeaf::Array(ty));
                    operands.push(t.clone());
                    wrt_inputs.push(d);
                    leaf_wrt.push(d);
                }
                Leaf::F64(v) if selected => {
                    inputs.push(InputLeaf::Array(TensorType::new(
                        DType::F64,
                        Shape::scalar(),
                    )));
                    operands.push(Tensor::scalar_f64(*v));
                    wrt_inputs.push(true);
                    leaf_wrt.push(true);
                }
                Leaf::Abstract(s) if abstract_ok => {
                    let shape = Shape::new(s.shape.clone())?;
                    inputs.push(InputLeaf::Array(TensorType::new(s.dtype, shape)));
                    wrt_inputs.push(false);
                    leaf_wrt.push(false);
                }
                Leaf::Abstract(_) => {
                    return Err(Error::invalid(
                        "ShapeDtype placeholders are only accepted by jit(f).lower(..)",
                    ))
                }
                other => {
                    inputs.push(InputLeaf::Static(other.clone()));
                    leaf_wrt.push(false);
                }
            }
        }
        let names = def.leaf_names(arg_names);
        tree::check_distinct_names(&names, |k| matches!(inputs[k], InputLeaf::Array(_)))?;
        Ok(Prepared {
            names,
            def: def.clone(),
            inputs,
            operands,
            wrt: wrt_inputs,
            leaf_wrt,
        })
    }

    /// Traces `f` on tracers of the array inputs (static leaves pass through unchanged).
    pub fn trace<A: Tree, R: Tree>(&self, f: &dyn Fn(A) -> Result<R>) -> Result<TracedFunction> {
        trace::trace_function::<A, R>(f, &self.def, &self.inputs, &self.names)
    }

    /// The structure of the gradients of positional arguments `argnums` (a tuple of their
    /// trees when `as_tuple`), with `None` for undifferentiated leaves, and for each of its
    /// leaves the index of the differentiated input it belongs to.
    pub fn gradient_def(&self, argnums: &[usize], as_tuple: bool) -> Result<(TreeDef, Vec<usize>)> {
        let args = self.def.positional_args();
        let leaf_args: Vec<usize> = self.def.leaf_args().collect();
        // Index among the differentiated inputs of every differentiated leaf.
        let mut wrt_index = vec![usize::MAX; self.leaf_wrt.len()];
        let mut k = 0;
        for (i, &d) in self.leaf_wrt.iter().enumerate() {
            if d {
                wrt_index[i] = k;
                k += 1;
            }
        }
        let mut defs = Vec::with_capacity(argnums.len());
        let mut order = Vec::new();
        for &a in argnums {
            let sub = args.get(a).ok_or_else(|| {
                Error::invalid(format!("argnums names argument {a}, which does not exist"))
            })?;
            let leaf_ids: Vec<usize> = (0..leaf_args.len())
                .filter(|&i| leaf_args[i] == a)
                .collect();
            let keep: Vec<bool> = leaf_ids.iter().map(|&i| self.leaf_wrt[i]).collect();
            defs.push(sub.keep_leaves(&keep));
            order.extend(
                leaf_ids
                    .iter()
                    .filter(|&&i| self.leaf_wrt[i])
                    .map(|&i| wrt_index[i]),
            );
        }
        let def = if as_tuple {
            TreeDef::Tuple(defs)
        } else {
            defs.pop()
                .ok_or_else(|| Error::invalid("argnums must not be empty"))?
        };
        Ok((def, order))
    }

    /// The differentiation flags of the traced graph's inputs: the array inputs' flags, then
    /// `false` for each of `captures` closure-converted inputs.
    pub fn wrt_with_captures(&self, captures: usize) -> Vec<bool> {
        let mut wrt = self.wrt.clone();
        wrt.extend(std::iter::repeat_n(false, captures));
        wrt
    }
}

// ---------------------------------------------------------------------------------------------
// Compiled traces

/// A compiled trace: the plan, the [`Runnable`] it compiled to, and how results are rebuilt.
pub(crate) struct Entry {
    hash: u64,
    pub signature: Signature,
    pub plan: Plan,
    runnable: Runnable,
    pub out_def: TreeDef,
    pub out_slots: Vec<OutSlot>,
    /// Whether the result's leaves are exactly the plan outputs in order (no static leaves,
    /// none repeated), so the result is rebuilt straight from the outputs.
    outputs_in_order: bool,
}

impl Entry {
    /// How the backend runs the compiled plan ([`quabla_backend::Executable::report`]).
    pub(crate) fn report(&self) -> String {
        self.runnable.report()
    }

    /// The compiled plan, for callers that run it themselves on flat inputs (VJP pullbacks,
    /// L-BFGS, the `Trainer`).
    pub(crate) fn runnable(&self) -> &Runnable {
        &self.runnable
    }

    /// Whether the result's leaves are the plan's outputs in order (no static leaf), so a
    /// caller that runs the plan itself can read the result from the outputs directly.
    pub(crate) fn outputs_in_order(&self) -> bool {
        self.outputs_in_order
    }

    /// Compiles a traced (and possibly transformed) graph for the signature's device.
    pub(crate) fn compile(signature: Signature, staged: TracedFunction) -> Result<Entry> {
        if !staged.captures.is_empty() {
            return Err(Error::Internal {
                message: "a top-level trace captured tracers of an enclosing trace".into(),
            });
        }
        let plan = Plan::compile(&staged.graph);
        let precision = match signature.precision.as_deref() {
            Some("float32") => quabla_backend::Precision::Float32,
            Some("float64") => quabla_backend::Precision::Float64,
            _ => quabla_backend::Precision::Reference,
        };
        let backend = crate::devices::backend_for(&signature.device)?;
        let runnable = Runnable::compile(backend, &plan, precision, signature.check_nans)?;
        let out_slots = staged.out_slots;
        let out_def = staged.out_def;
        let outputs_in_order = out_slots.len() == runnable.outputs()
            && out_def.num_leaves() == out_slots.len()
            && out_slots
                .iter()
                .enumerate()
                .all(|(i, slot)| matches!(slot, OutSlot::Plan(j) if *j == i));
        Ok(Entry {
            hash: signature_hash(&signature),
            signature,
            plan,
            runnable,
            out_def,
            out_slots,
            outputs_in_order,
        })
    }

    /// Runs the plan on a call's leaves and rebuilds the result tree. The plan's inputs are
    /// the tensor leaves and the promoted `f64` leaves (see [`Wrt`]) in order, then `extra`;
    /// `outputs` is an empty vector to receive the plan outputs in, left empty again.
    pub(crate) fn call<R: Tree>(
        &self,
        def: &TreeDef,
        leaves: &[Leaf],
        wrt: Wrt<'_>,
        extra: &[Tensor],
        outputs: &mut Vec<HostTensor>,
    ) -> Result<R> {
        // Promoted scalars need buffers of their own; the usual call has none, and an empty
        // vector does not allocate.
        let promoted: Vec<HostTensor> = leaves
            .iter()
            .zip(wrt.leaf_flags(def))
            .filter_map(|(leaf, promoted)| match leaf {
                Leaf::F64(v) if promoted => Some(HostTensor {
                    shape: Shape::scalar(),
                    data: HostData::F64([*v].into()),
                }),
                _ => None,
            })
            .collect();
        let mut scalars = promoted.iter();
        let mut flags = wrt.leaf_flags(def);
        let inputs = leaves
            .iter()
            .filter_map(|leaf| {
                let promoted = flags.next().unwrap_or(false);
                match leaf {
                    Leaf::Tensor(t) => Some(t.host()),
                    Leaf::F64(_) if promoted => scalars.next().map(Ok),
                    _ => None,
                }
            })
            .chain(extra.iter().map(Tensor::host));
        let ran = with_host_refs(inputs, |host| self.runnable.run(host, outputs));
        if let Err(e) = ran {
            outputs.clear();
            return Err(e);
        }
        self.rebuild(outputs)
    }

    /// Runs the plan on a `jit` call's leaves (every tensor leaf a plan input, in order),
    /// donating the tensor leaves flagged in `donated` that nobody else holds: their storage is
    /// given to the run, which may reuse it for outputs (on the CPU, for the outputs of the
    /// next call). A flagged leaf that is shared is lent, never written. The leaves are
    /// consumed; `outputs` is left empty.
    pub(crate) fn call_donating<R: Tree>(
        &self,
        leaves: &mut Vec<Leaf>,
        donated: &[bool],
        outputs: &mut Vec<HostTensor>,
    ) -> Result<R> {
        let backend = self.runnable.backend().clone();
        let mut buffers = Vec::with_capacity(leaves.len());
        for (leaf, &donate) in leaves.drain(..).zip(donated) {
            let Leaf::Tensor(t) = leaf else { continue };
            let (host, donate) = match t.into_host() {
                Ok(host) => (host, donate),
                Err(shared) => (shared.host()?.clone(), false),
            };
            let memory = backend.upload(&host)?;
            let buffer = quabla_backend::Buffer::new(
                backend.name(),
                host.dtype(),
                host.shape.clone(),
                memory,
            );
            drop(host);
            buffers.push((buffer, donate));
        }
        let args = buffers
            .iter()
            .map(|(b, donate)| {
                if *donate {
                    quabla_backend::BufferArg::Donated(b.clone())
                } else {
                    quabla_backend::BufferArg::Lent(b)
                }
            })
            .collect();
        let outs = self.runnable.run_buffers(args)?;
        drop(buffers);
        for b in &outs {
            outputs.push(backend.download(&b.memory()?)?);
        }
        self.rebuild(outputs)
    }

    /// The result tree from the plan outputs in `outputs`, which is left empty.
    pub(crate) fn rebuild<R: Tree>(&self, outputs: &mut Vec<HostTensor>) -> Result<R> {
        if self.outputs_in_order && outputs.len() == self.runnable.outputs() {
            let mut results = outputs
                .drain(..)
                .zip(self.runnable.out_weak())
                .map(|(h, &weak)| Leaf::Tensor(Tensor::from_host(h, weak)));
            // The structure holds exactly one leaf per output (checked at compile).
            return R::unflatten(&self.out_def, &mut results);
        }
        let outs = self.runnable.tensors(std::mem::take(outputs));
        rebuild(&self.out_def, &self.out_slots, outs)
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

// ---------------------------------------------------------------------------------------------
// The per-thread call scratch

/// The vectors a cached call flattens its arguments into and receives its outputs in, kept per
/// thread so that a call allocates neither. They are empty between calls (a call clears them
/// on the way out, and again on the way in after a panic); a call made while they are in use
/// (from a `Tree` implementation, say) uses vectors of its own, which is merely slower.
#[derive(Default)]
pub(crate) struct CallScratch {
    pub leaves: Vec<Leaf>,
    pub outputs: Vec<HostTensor>,
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
    pub(crate) fn with<T>(f: impl FnOnce(&mut CallScratch) -> T) -> T {
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

// ---------------------------------------------------------------------------------------------
// The trace cache

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
    /// The cached entry for a call with structure `def` and `leaves` on `target`, made the
    /// most recently used; nothing is built on the way.
    pub(crate) fn lookup(
        &self,
        def: &TreeDef,
        leaves: &[Leaf],
        wrt: Wrt<'_>,
        target: &Target,
    ) -> Option<Arc<Entry>> {
        let mut cache = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let last = cache.len().checked_sub(1)?;
        // A function called again with what it was called with last needs no hash.
        if cache[last].signature.matches(def, leaves, wrt, target) {
            return Some(cache[last].clone());
        }
        let hash = key_hash(
            def,
            leaves
                .iter()
                .zip(wrt.leaf_flags(def))
                .map(|(l, promoted)| LeafKey::of_leaf(l, promoted)),
        );
        let pos = cache[..last]
            .iter()
            .rposition(|e| e.hash == hash && e.signature.matches(def, leaves, wrt, target))?;
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
        let evicted = {
            let mut cache = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(pos) = cache
                .iter()
                .rposition(|e| e.hash == hash && e.signature == signature)
            {
                let hit = cache.remove(pos);
                cache.push(hit.clone());
                return Ok(hit);
            }
            (cache.len() >= owner.max_traces).then(|| cache.remove(0))
        };
        // The warning runs the user's handler, which may call this very function: never with
        // the cache locked.
        if let Some(evicted) = evicted {
            warnings::warn(Warning::Retrace {
                transform: owner.transform,
                function: owner.function.to_string(),
                max_traces: owner.max_traces,
                evicted: evicted.signature.to_string(),
                new: signature.to_string(),
                changed: evicted.signature.difference(&signature, owner.arg_names),
            })?;
        }
        let entry = Arc::new(build(signature)?);
        let mut cache = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        // A call made meanwhile (by the handler, or another thread) may have built the same
        // signature: keep one entry per signature, within the capacity.
        if let Some(pos) = cache
            .iter()
            .rposition(|e| e.hash == entry.hash && e.signature == entry.signature)
        {
            cache.remove(pos);
        }
        while cache.len() >= owner.max_traces.max(1) {
            cache.remove(0);
        }
        cache.push(entry.clone());
        Ok(entry)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

// ---------------------------------------------------------------------------------------------
// Executing a call

/// One call of a transformed function, as [`execute`] needs it.
pub(crate) struct Call<'a> {
    pub cache: &'a TraceCache,
    pub owner: CacheOwner<'a>,
    pub wrt: Wrt<'a>,
    pub target: &'a Target,
    /// Extra plan inputs after the prepared operands and the captures (the tangents of
    /// `jvp`), computed from the call's flattened arguments and checked against them.
    pub extra: Option<&'a ExtraInputs<'a>>,
}

/// How a transform derives its extra plan inputs from a call's structure and leaves.
pub(crate) type ExtraInputs<'a> = dyn Fn(&TreeDef, &[Leaf]) -> Result<Vec<Tensor>> + 'a;

impl Call<'_> {
    fn extra_inputs(&self, def: &TreeDef, leaves: &[Leaf]) -> Result<Vec<Tensor>> {
        match self.extra {
            Some(extra) => extra(def, leaves),
            None => Ok(Vec::new()),
        }
    }
}

/// The values bound to the array inputs of a call (tensor leaves, and promoted `f64` leaves
/// as float64 rank-0 tensors), as [`Prepared::operands`] holds them, without preparing.
pub(crate) fn input_tensors(def: &TreeDef, leaves: &[Leaf], wrt: Wrt<'_>) -> Result<Vec<Tensor>> {
    leaves
        .iter()
        .zip(wrt.leaf_flags(def))
        .filter_map(|(leaf, promoted)| match leaf {
            Leaf::Tensor(t) => Some(Ok(t.clone())),
            Leaf::F64(v) if promoted => Some(Ok(Tensor::scalar_f64(*v))),
            _ => None,
        })
        .collect()
}

/// Runs one call of a transformed function on `args`: inside another trace, stages it and
/// inlines the staged graph into the enclosing trace; otherwise looks its signature up in the
/// cache (staging and compiling on a miss) and runs the plan. `stage` traces the function on
/// the prepared arguments and applies the transform's rewrite: its result's graph takes the
/// prepared operands, then the trace's captures, then [`Call::extra`].
pub(crate) fn execute<A: Tree, R: Tree>(
    call: &Call<'_>,
    args: &A,
    stage: impl FnOnce(&Prepared) -> Result<TracedFunction>,
) -> Result<R> {
    if trace::active() {
        let (leaves, def) = tree::flatten(args);
        refuse_keys(&def, &leaves)?;
        let extra = call.extra_inputs(&def, &leaves)?;
        let prepared = Prepared::new(&def, &leaves, call.wrt, call.owner.arg_names, false)?;
        let staged = stage(&prepared)?;
        let operands: Vec<Operand> = prepared
            .operands
            .iter()
            .chain(&staged.captures)
            .chain(&extra)
            .map(Operand::from)
            .collect();
        let outs = trace::inline(&staged.graph, operands)?;
        return rebuild(&staged.out_def, &staged.out_slots, outs);
    }
    CallScratch::with(|scratch| {
        let def = args.flatten(&mut scratch.leaves);
        let leaves = &scratch.leaves;
        let extra = call.extra_inputs(&def, leaves)?;
        let entry = cached_entry(call, &def, leaves, stage)?;
        entry.call(&def, leaves, call.wrt, &extra, &mut scratch.outputs)
    })
}

/// TR6 for the first random key among the leaves (no transform but `jit`'s static arguments
/// takes one).
pub(crate) fn refuse_keys(def: &TreeDef, leaves: &[Leaf]) -> Result<()> {
    match leaves
        .iter()
        .zip(def.leaf_args())
        .find(|(l, _)| matches!(l, Leaf::Key(_)))
    {
        Some((_, arg)) => Err(traced_key(arg)),
        None => Ok(()),
    }
}

/// The compiled entry of a call with structure `def` and `leaves`: found in the cache, or
/// prepared, staged and compiled on a miss.
pub(crate) fn cached_entry(
    call: &Call<'_>,
    def: &TreeDef,
    leaves: &[Leaf],
    stage: impl FnOnce(&Prepared) -> Result<TracedFunction>,
) -> Result<Arc<Entry>> {
    if let Some(entry) = call.cache.lookup(def, leaves, call.wrt, call.target) {
        return Ok(entry);
    }
    // A key never reaches the cache (this refuses it on every call, as a miss).
    refuse_keys(def, leaves)?;
    let signature = Signature::of(def, leaves, call.wrt, call.target);
    call.cache.get_or_build(&call.owner, signature, |sig| {
        let prepared = Prepared::new(def, leaves, call.wrt, call.owner.arg_names, false)?;
        Entry::compile(sig, stage(&prepared)?)
    })
}
