//! Data-parallel `value_and_grad` (api.md §20): every rank is called with the full batch,
//! differentiates the function on its shard (`shard_argnums`, split by rank along axis 0), and
//! the value and the gradients are all-reduced (`mean` or `sum`) in rank order, so that every
//! rank returns the same bits and a run does not depend on timing.
//!
//! The shell owns the sharding, the TF12 checks and the reduction; differentiation and the
//! trace cache are the ordinary `value_and_grad`'s, which it holds (8 signatures by default).
//! A rank whose shard fails (its loss raises, its shard is uneven) still takes part in the
//! reduction's header exchange, so every rank raises instead of one waiting forever.

use super::communicator::ReduceOp;
use super::group::{type_text, Group};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::transforms::grad::Grad;
use crate::tree::{Leaf, Tree, TreeDef};
use quabla_backend::HostTensor;
use quabla_ir::{DType, HostData, Shape};
use std::fmt;
use std::sync::Arc;

/// How per-rank values and gradients combine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// The mean over ranks: with a loss that is a mean over its shard's rows and equal
    /// shards, the full batch's mean and its gradient.
    #[default]
    Mean,
    /// The sum over ranks: with a loss that sums over rows, the full batch's sum.
    Sum,
}

impl Reduction {
    /// The Python spelling (`"mean"`, `"sum"`).
    pub fn name(self) -> &'static str {
        match self {
            Reduction::Mean => "mean",
            Reduction::Sum => "sum",
        }
    }

    /// Parses the Python spelling.
    pub fn parse(name: &str) -> Option<Reduction> {
        match name {
            "mean" => Some(Reduction::Mean),
            "sum" => Some(Reduction::Sum),
            _ => None,
        }
    }

    pub(crate) fn op(self) -> ReduceOp {
        match self {
            Reduction::Mean => ReduceOp::Mean,
            Reduction::Sum => ReduceOp::Sum,
        }
    }
}

/// Data-parallel `value_and_grad(f)`: build with [`value_and_grad`].
pub struct ValueAndGrad<F, A> {
    inner: Grad<F, A>,
    argnums: Vec<usize>,
    shard_argnums: Vec<usize>,
    reduction: Reduction,
    devices: Option<Vec<String>>,
    has_aux: bool,
    group: Option<Group>,
    /// The NCCL groups of the local CUDA devices, made on the first call over a process group
    /// and kept (communicators are created once per callable).
    device_groups: std::sync::Mutex<Option<(Group, Vec<Group>)>>,
}

impl<F, A> fmt::Debug for ValueAndGrad<F, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("distributed::ValueAndGrad")
            .field("argnums", &self.argnums)
            .field("shard_argnums", &self.shard_argnums)
            .field("reduction", &self.reduction)
            .field("devices", &self.devices)
            .finish_non_exhaustive()
    }
}

/// The data-parallel value and gradient of `f` across the ranks of the current group (see the
/// module docs): `qb::distributed::value_and_grad(loss).shard_argnums(&[1]).call(&(w, batch))?`
/// returns `(value, grads)`, the same on every rank.
pub fn value_and_grad<A: Tree, F>(f: F) -> ValueAndGrad<F, A> {
    ValueAndGrad {
        inner: crate::value_and_grad(f).transform_name("distributed.value_and_grad"),
        argnums: vec![0],
        shard_argnums: Vec::new(),
        reduction: Reduction::Mean,
        devices: None,
        has_aux: false,
        group: None,
        device_groups: std::sync::Mutex::new(None),
    }
}

/// TF12.
fn misuse(detail: impl fmt::Display) -> Error {
    Error::invalid(format!("distributed.value_and_grad: {detail}"))
}

impl<A: Tree, F> ValueAndGrad<F, A> {
    /// Differentiate with respect to positional argument `i` (default 0).
    pub fn argnum(mut self, i: usize) -> Self {
        self.inner = self.inner.argnum(i);
        self.argnums = vec![i];
        self
    }

    /// Differentiate with respect to several positional arguments; the gradients are a
    /// tuple of their trees.
    pub fn argnums(mut self, argnums: &[usize]) -> Self {
        self.inner = self.inner.argnums(argnums);
        self.argnums = argnums.to_vec();
        self
    }

    /// The positional arguments that hold full batches, split along axis 0 by rank; the others
    /// are replicated. Every array leaf of a sharded argument must have a leading extent that
    /// the number of ranks divides (TF12 otherwise).
    pub fn shard_argnums(mut self, argnums: &[usize]) -> Self {
        self.shard_argnums = argnums.to_vec();
        self
    }

    /// How the ranks' values and gradients combine (default [`Reduction::Mean`]).
    pub fn reduction(mut self, reduction: Reduction) -> Self {
        self.reduction = reduction;
        self
    }

    /// The devices of this process that share its shard: `"cpu"` (the default), or CUDA
    /// devices (`&["cuda:0", "cuda:1"]`), each computing its part of the shard, with the
    /// gradients reduced over NCCL (the `cuda` feature; docs/distributed.md). A call naming a
    /// device that cannot run fails with what is missing first (UN1 for the backend, UN5 for
    /// `libnccl`).
    pub fn devices(mut self, devices: &[&str]) -> Self {
        self.devices = Some(devices.iter().map(|d| d.to_string()).collect());
        self
    }

    /// Refused with TF12 when `true`: an auxiliary output has no reduction.
    pub fn has_aux(mut self, has_aux: bool) -> Self {
        self.has_aux = has_aux;
        self
    }

    /// The name in warnings and errors.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.inner = self.inner.name(name);
        self
    }

    /// The LRU capacity of the trace cache (default 8).
    pub fn max_traces(mut self, n: usize) -> Self {
        self.inner = self.inner.max_traces(n);
        self
    }

    /// Runs on `group` instead of the current group.
    pub fn group(mut self, group: Group) -> Self {
        self.group = Some(group);
        self
    }

    /// Number of traces currently cached.
    pub fn cache_size(&self) -> usize {
        self.inner.cache_size()
    }

    /// The configuration checks of TF12 and the devices (AR1, UN1).
    fn validate(&self) -> Result<()> {
        if self.has_aux {
            return Err(misuse("has_aux is not supported"));
        }
        if let Some(&i) = self.argnums.iter().find(|i| self.shard_argnums.contains(i)) {
            return Err(misuse(format!(
                "cannot differentiate with respect to sharded argument {i}"
            )));
        }
        if crate::trace::active() {
            return Err(misuse("cannot be called inside another transform"));
        }
        for d in self.devices.iter().flatten() {
            if d == "cpu" {
                continue;
            }
            let (target, ordinal) = match d.split_once(':') {
                Some((t, n)) => (t, Some(n)),
                None => (d.as_str(), None),
            };
            let known = (target == "cuda" || crate::devices::is_registered(target))
                && ordinal.is_none_or(|n| n.parse::<usize>().is_ok())
                || d == "mlx";
            if !known {
                return Err(Error::invalid(format!(
                    "invalid device {d:?}; expected \"cpu\", \"cuda\", \"cuda:N\" or \"mlx\""
                )));
            }
            if d == "mlx" {
                return Err(device_unavailable(d));
            }
            // CUDA (or a backend of several devices) with collectives between its devices.
            super::device_transport::collectives_of(d)?;
        }
        let devices = self.devices.iter().flatten();
        if devices.clone().any(|d| d == "cpu") && devices.clone().any(|d| d != "cpu") {
            return Err(misuse(
                "devices mixes the CPU and other devices; name CUDA devices only, or none",
            ));
        }
        Ok(())
    }

    /// The devices named by `devices` when they are not the CPU (CUDA devices), if any.
    fn device_list(&self) -> Option<&[String]> {
        self.devices
            .as_deref()
            .filter(|d| d.iter().any(|d| d != "cpu"))
    }

    /// The NCCL groups of `devices` over `process`, made on the first call and kept.
    fn device_groups(&self, process: &Group, devices: &[String]) -> Result<Vec<Group>> {
        let mut kept = self.device_groups.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((over, groups)) = &*kept {
            if Group::same(over, process) {
                return Ok(groups.clone());
            }
        }
        let groups = super::device_transport::local_device_groups(process, devices)?;
        *kept = Some((process.clone(), groups.clone()));
        Ok(groups)
    }

    /// The data-parallel value and gradients over this process's CUDA devices: device `k`
    /// differentiates on its part of the process's shard (rank `rank * G + k` of
    /// `size * G`), one device after the other, and the results are reduced over NCCL on one
    /// thread per device (every rank of the communicator must take part at once).
    fn call_on_devices<R: Tree, G: Tree>(
        &self,
        process: &Group,
        devices: &[String],
        args: &impl Tree,
    ) -> Result<G>
    where
        F: Fn(A) -> Result<R>,
    {
        self.validate()?;
        let groups = self.device_groups(process, devices)?;
        let (leaves, def) = crate::tree::flatten(args);
        if leaves
            .iter()
            .any(|l| l.as_tensor().is_some_and(Tensor::is_traced))
        {
            return Err(misuse("cannot be called inside another transform"));
        }
        def.check()?;
        let signature: Vec<String> = leaves.iter().map(leaf_text).collect();
        let mut parts = Vec::with_capacity(groups.len());
        for (group, device) in groups.iter().zip(devices) {
            let local = shard_args(
                "distributed.value_and_grad",
                leaves.clone(),
                &def,
                &self.shard_argnums,
                group,
            )
            .and_then(|leaves| {
                let flat = Flat {
                    leaves,
                    def: def.clone(),
                };
                self.inner.call_on::<R, FlatTree>(&flat, device)
            });
            let mut description = self.describe(&signature);
            let out = match local {
                Ok(out) => {
                    push_outputs(&mut description, &out.leaves);
                    Ok(out)
                }
                Err(e) => Err(e),
            };
            parts.push((description, out));
        }
        let out_def = parts
            .iter()
            .find_map(|(_, out)| out.as_ref().ok().map(|o| o.def.clone()))
            .unwrap_or(TreeDef::None);
        let op = self.reduction.op();
        let reduced: Vec<Result<Vec<Leaf>>> = std::thread::scope(|s| {
            let handles: Vec<_> = groups
                .iter()
                .zip(parts)
                .map(|(group, (description, out))| {
                    s.spawn(move || {
                        reduce_leaves(
                            group,
                            "value_and_grad",
                            &description,
                            out.map(|o| o.leaves),
                            op,
                        )
                    })
                })
                .collect();
            super::join_all(handles, "a device's reduction thread panicked")
        });
        // Every device's reduction gives the same bits; the first is returned.
        let first = reduced.into_iter().next().unwrap_or_else(|| {
            Err(Error::Internal {
                message: "no device to reduce on".into(),
            })
        })?;
        out_def.unflatten(first)
    }

    /// The start of the text every rank compares before a reduction.
    fn describe(&self, signature: &[String]) -> String {
        format!(
            "distributed.value_and_grad({}) on [{}], reduction {}",
            self.argnums
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            signature.join(", "),
            self.reduction.name()
        )
    }

    /// The data-parallel value and gradients: `(value, grads)` as [`crate::value_and_grad`]
    /// lays them out, reduced over the ranks.
    pub fn call<R: Tree, G: Tree>(&self, args: &impl Tree) -> Result<G>
    where
        F: Fn(A) -> Result<R>,
    {
        let group = match &self.group {
            Some(g) => g.clone(),
            None => super::current()?,
        };
        if let Some(devices) = self.device_list() {
            return self.call_on_devices::<R, G>(&group, devices, args);
        }
        let (leaves, def) = crate::tree::flatten(args);
        let signature: Vec<String> = leaves.iter().map(leaf_text).collect();
        let local = self.local(&group, leaves, &def);
        let mut description = self.describe(&signature);
        let (out_leaves, out_def) = match local {
            Ok(out) => {
                push_outputs(&mut description, &out.leaves);
                (Ok(out.leaves), out.def)
            }
            Err(e) => (Err(e), TreeDef::None),
        };
        let reduced = reduce_leaves(
            &group,
            "value_and_grad",
            &description,
            out_leaves,
            self.reduction.op(),
        )?;
        out_def.unflatten(reduced)
    }

    /// This rank's part: checks, shards and differentiates.
    fn local<R: Tree>(&self, group: &Group, leaves: Vec<Leaf>, def: &TreeDef) -> Result<FlatTree>
    where
        F: Fn(A) -> Result<R>,
    {
        self.validate()?;
        def.check()?;
        if leaves
            .iter()
            .any(|l| l.as_tensor().is_some_and(Tensor::is_traced))
        {
            return Err(misuse("cannot be called inside another transform"));
        }
        let leaves = shard_args(
            "distributed.value_and_grad",
            leaves,
            def,
            &self.shard_argnums,
            group,
        )?;
        let flat = Flat {
            leaves,
            def: def.clone(),
        };
        self.inner.call::<R, FlatTree>(&flat)
    }
}

/// `leaves` (of an argument tree `def`) with every array of the positional arguments
/// `shard_argnums` cut to this rank's rows; TF12-style errors name `who`: a leading extent the
/// group's size does not divide, a leaf of a sharded argument that is not an array, an
/// argument number past the arguments.
pub(crate) fn shard_args(
    who: &str,
    leaves: Vec<Leaf>,
    def: &TreeDef,
    shard_argnums: &[usize],
    group: &Group,
) -> Result<Vec<Leaf>> {
    let args = def.positional_args();
    if let Some(&i) = shard_argnums.iter().find(|&&i| i >= args.len()) {
        return Err(Error::invalid(format!(
            "{who}: shard_argnums names argument {i}, but there are {} argument(s)",
            args.len()
        )));
    }
    let (rank, size) = (group.rank(), group.size());
    let paths = def.leaf_paths();
    leaves
        .into_iter()
        .zip(def.leaf_args())
        .zip(&paths)
        .map(|((leaf, arg), path)| {
            if !shard_argnums.contains(&arg) {
                return Ok(leaf);
            }
            let at = path_text(path);
            match leaf {
                Leaf::Tensor(t) => shard_rows(&t, rank, size, |n| {
                    Error::invalid(format!(
                        "{who}: batch extent {n} is not divisible by {size} processes (sharded argument {arg}, leaf {at})"
                    ))
                })
                .map(Leaf::Tensor),
                _ => Err(Error::invalid(format!(
                    "{who}: sharded argument {arg} has a leaf that is not an array ({at}); per-example data must be arrays with a leading batch axis"
                ))),
            }
        })
        .collect()
}

/// The rows `[rank * n / size, (rank + 1) * n / size)` of `x` along axis 0, or `uneven(n)`
/// when `size` does not divide the leading extent `n` (a rank-0 `x` has none).
pub(crate) fn shard_rows(
    x: &Tensor,
    rank: usize,
    size: usize,
    uneven: impl FnOnce(usize) -> Error,
) -> Result<Tensor> {
    let host = x.host_for("distributed sharding")?;
    let dims = host.shape.dims();
    let Some(&n) = dims.first() else {
        return Err(Error::invalid(format!(
            "a sharded argument has a rank-0 array ({}), which has no batch axis to split",
            type_text(x)
        )));
    };
    if n % size != 0 {
        return Err(uneven(n));
    }
    if size == 1 {
        return Ok(x.clone());
    }
    let rows = n / size;
    let row = dims[1..].iter().product::<usize>();
    let range = rank * rows * row..(rank + 1) * rows * row;
    let data = match &host.data {
        HostData::F64(v) => HostData::F64(Arc::from(&v[range])),
        HostData::F32(v) => HostData::F32(Arc::from(&v[range])),
        HostData::Bool(v) => HostData::Bool(Arc::from(&v[range])),
        HostData::I32(v) => HostData::I32(Arc::from(&v[range])),
        HostData::I64(v) => HostData::I64(Arc::from(&v[range])),
    };
    let mut shape = dims.to_vec();
    shape[0] = rows;
    Ok(Tensor::from_host(
        HostTensor::new(Shape::new(shape)?, data),
        x.is_weak(),
    ))
}

/// Reduces the tensor leaves of `leaves` (a rank's own error in their place is sent as its
/// failure) over `group` with `op`, one collective per dtype present: float64 leaves packed
/// into one array, then float32 ones. Other leaves are kept.
pub(crate) fn reduce_leaves(
    group: &Group,
    op_name: &str,
    description: &str,
    leaves: Result<Vec<Leaf>>,
    op: ReduceOp,
) -> Result<Vec<Leaf>> {
    let mut leaves = match leaves {
        Ok(l) => l,
        Err(e) => {
            // The first collective of the others carries the failure; they stop there.
            group.reduce_data(op_name, description, Err(e), op)?;
            return Err(Error::Internal {
                message: "a failed rank's reduction succeeded".into(),
            });
        }
    };
    for dtype in [DType::F64, DType::F32] {
        let positions: Vec<usize> = (0..leaves.len())
            .filter(|&i| leaves[i].as_tensor().is_some_and(|t| t.dtype() == dtype))
            .collect();
        if positions.is_empty() {
            continue;
        }
        let hosts: Vec<&HostTensor> = positions
            .iter()
            .filter_map(|&i| leaves[i].as_tensor())
            .map(|t| t.host_for("distributed reduction"))
            .collect::<Result<_>>()?;
        let packed = pack(&hosts);
        let what = format!("{description} ({} part)", dtype.name());
        let reduced = group.reduce_data(op_name, &what, Ok(packed), op)?;
        let shapes: Vec<(Shape, bool)> = positions
            .iter()
            .filter_map(|&i| leaves[i].as_tensor())
            .map(|t| (Shape::new(t.shape().to_vec()), t.is_weak()))
            .map(|(s, w)| s.map(|s| (s, w)))
            .collect::<std::result::Result<_, _>>()?;
        for (&i, tensor) in positions.iter().zip(unpack(&reduced, &shapes)) {
            leaves[i] = Leaf::Tensor(tensor);
        }
    }
    Ok(leaves)
}

/// The data of `hosts` (all of one float dtype) concatenated.
fn pack(hosts: &[&HostTensor]) -> HostData {
    match hosts.first().map(|h| h.dtype()) {
        Some(DType::F32) => HostData::F32(
            hosts
                .iter()
                .flat_map(|h| match &h.data {
                    HostData::F32(v) => v.iter().copied(),
                    _ => [].iter().copied(),
                })
                .collect(),
        ),
        _ => HostData::F64(
            hosts
                .iter()
                .flat_map(|h| match &h.data {
                    HostData::F64(v) => v.iter().copied(),
                    _ => [].iter().copied(),
                })
                .collect(),
        ),
    }
}

/// `data` cut into tensors of `shapes` (with their weak flags), in order.
fn unpack(data: &HostData, shapes: &[(Shape, bool)]) -> Vec<Tensor> {
    let mut at = 0;
    shapes
        .iter()
        .map(|(shape, weak)| {
            let range = at..at + shape.size();
            at += shape.size();
            let part = match data {
                HostData::F64(v) => HostData::F64(Arc::from(&v[range])),
                HostData::F32(v) => HostData::F32(Arc::from(&v[range])),
                HostData::Bool(v) => HostData::Bool(Arc::from(&v[range])),
                HostData::I32(v) => HostData::I32(Arc::from(&v[range])),
                HostData::I64(v) => HostData::I64(Arc::from(&v[range])),
            };
            Tensor::from_host(HostTensor::new(shape.clone(), part), *weak)
        })
        .collect()
}

/// A leaf in descriptions: a tensor's type, a scalar's kind and value.
fn leaf_text(leaf: &Leaf) -> String {
    match leaf {
        Leaf::Tensor(t) => type_text(t),
        other => format!("{other:?}"),
    }
}

fn path_text(path: &[crate::tree::PathEntry]) -> String {
    if path.is_empty() {
        return "the argument itself".into();
    }
    path.iter()
        .map(|p| format!("[{p}]"))
        .collect::<Vec<_>>()
        .join("")
}

/// A tree given as its leaves and structure (arguments after sharding); it flattens to them
/// and is never rebuilt.
pub(crate) struct Flat {
    pub leaves: Vec<Leaf>,
    pub def: TreeDef,
}

impl Tree for Flat {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        leaves.extend(self.leaves.iter().cloned());
        self.def.clone()
    }

    fn unflatten(_: &TreeDef, _: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        Err(Error::Internal {
            message: "flat arguments are never rebuilt".into(),
        })
    }
}

/// A result kept as leaves and a structure, to be reduced and then rebuilt as the caller's
/// type.
struct FlatTree {
    leaves: Vec<Leaf>,
    def: TreeDef,
}

impl Tree for FlatTree {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        leaves.extend(self.leaves.iter().cloned());
        self.def.clone()
    }

    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        let n = def.num_leaves();
        let taken: Vec<Leaf> = leaves.take(n).collect();
        if taken.len() != n {
            return Err(Error::Structure {
                message: format!("unflatten expected {n} leaves, got {}", taken.len()),
            });
        }
        Ok(FlatTree {
            leaves: taken,
            def: def.clone(),
        })
    }
}

/// Why `value_and_grad(..).devices(["mlx"])` cannot run: the backend's own error (UN1, UN5), or
/// that data parallelism over MLX devices is not supported.
fn device_unavailable(device: &str) -> Error {
    if let Err(e) = crate::devices::backend_for(device) {
        return e;
    }
    Error::Unsupported {
        op: "distributed".into(),
        device: Some(device.to_string()),
        message: format!(
            "distributed.value_and_grad on {device}: data parallelism over mlx devices is not \
             supported; use devices=None on CPUs"
        ),
    }
}

/// Appends what a call gave to its description: ` giving [float64[3], ...]`.
fn push_outputs(description: &mut String, leaves: &[Leaf]) {
    let texts: Vec<String> = leaves.iter().map(leaf_text).collect();
    description.push_str(&format!(" giving [{}]", texts.join(", ")));
}
