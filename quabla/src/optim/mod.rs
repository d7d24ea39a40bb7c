//! `qb::optim` (api.md §16, numerics.md §8): first-order optimizers, learning-rate schedules,
//! gradient clipping, L-BFGS and the [`Trainer`].
//!
//! What this module owns:
//! - [`schedules`]: the rate as a function of the completed update count, evaluated on the
//!   host;
//! - [`clip`]: `clip_by_global_norm` with the non-finite and zero-norm rules;
//! - [`rules`]: [`Adam`], [`AdamW`], [`Sgd`] — builders, validation, the functional
//!   `init`/`update` over any pytree of floating tensors, and the one per-leaf update formula
//!   that both the functional loop and the trainer's compiled plan record;
//! - [`lbfgs`]: the host L-BFGS minimizer with a strong-Wolfe line search;
//! - [`trainer`]: loss, gradient and update as one compiled plan, reused step after step.
//!
//! Every optimizer computes in float64 and rounds each updated parameter to its own dtype.
//! The update formula is written once over tensors ([`rules::apply`]): run eagerly it is the
//! functional `update`; recorded under `jit` it is the trainer's update, with the same nodes in
//! the same order, so the two give the same bits (E69). It must not build graphs by hand or
//! know a backend.

pub mod clip;
pub mod lbfgs;
pub mod rules;
pub mod schedules;
pub mod trainer;

pub use clip::clip_by_global_norm;
pub use lbfgs::{Lbfgs, LbfgsInfo, LbfgsMinimizer, StopReason};
pub use rules::{Adam, AdamW, Optimizer, Sgd, State};
pub use schedules::{
    constant, cosine_decay, exponential_decay, piecewise_constant, warmup_cosine_decay, Constant,
    CosineDecay, ExponentialDecay, LearningRate, PiecewiseConstant, Schedule, WarmupCosineDecay,
};
pub use trainer::{Trainer, TrainerBuilder};

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::tree::{Leaf, PathEntry, Tree, TreeDef};
use quabla_ir::DType;

/// A leaf path as Python prints it: `['layers'][0]['w']` (empty for a bare leaf).
pub(crate) fn path_text(path: &[PathEntry]) -> String {
    path.iter()
        .map(|p| match p {
            PathEntry::Key(k) => format!("[{}]", quote_key(k)),
            PathEntry::Index(i) => format!("[{i}]"),
        })
        .collect()
}

fn quote_key(k: &crate::tree::DictKey) -> String {
    match k {
        crate::tree::DictKey::Str(s) => format!("'{s}'"),
        crate::tree::DictKey::Int(i) => i.to_string(),
    }
}

/// TY12: `what` stands where `who`'s parameters and gradients must be floating tensors, at the
/// leaf path `path` (empty for the root).
fn not_floating(who: &str, what: &str, path: String) -> Error {
    let at = if path.is_empty() {
        "the root".to_string()
    } else {
        path
    };
    Error::Type {
        message: format!("{who} parameters and gradients must be floating; got {what} at {at}"),
    }
}

/// The floating tensor leaves of `tree` and its structure; TY12 naming `who` and the path of
/// the first leaf that is not a floating tensor.
pub(crate) fn float_leaves<T: Tree>(who: &str, tree: &T) -> Result<(Vec<Tensor>, TreeDef)> {
    let (leaves, def) = crate::tree::flatten(tree);
    def.check()?;
    // A string (or another static value) where a parameter is expected is no parameter: an
    // optimizer would leave it alone and a loss would receive it as it is.
    if let Some((path, what)) = first_static(&def, &mut Vec::new()) {
        return Err(not_floating(who, &what, path));
    }
    let mut out = Vec::with_capacity(leaves.len());
    for (k, leaf) in leaves.into_iter().enumerate() {
        let kind = match &leaf {
            Leaf::Tensor(t) if t.dtype() != DType::Bool => {
                out.push(t.clone());
                continue;
            }
            Leaf::Tensor(_) | Leaf::Bool(_) => "bool".to_string(),
            Leaf::F64(_) => "float (a Python scalar)".to_string(),
            Leaf::Int(_) => "int".to_string(),
            Leaf::Abstract(s) => format!("{:?} (abstract)", s.dtype),
            Leaf::Key(_) => "Key".to_string(),
        };
        let path = def
            .leaf_paths()
            .get(k)
            .map(|p| path_text(p))
            .unwrap_or_default();
        return Err(not_floating(who, &kind, path));
    }
    Ok((out, def))
}

/// The path and kind of the first static entry of `def` (a string or a `qb::Static` value
/// standing where a tree has leaves); `#[tree(static)]` fields are the struct's, not entries.
fn first_static(def: &TreeDef, prefix: &mut Vec<PathEntry>) -> Option<(String, String)> {
    let child = |entry: PathEntry, d: &TreeDef, prefix: &mut Vec<PathEntry>| {
        prefix.push(entry);
        let found = first_static(d, prefix);
        prefix.pop();
        found
    };
    match def {
        TreeDef::Static(b) => {
            let what = match b.get::<String>() {
                Some(_) => "str".to_string(),
                None => format!("the static value {b:?}"),
            };
            Some((path_text(prefix), what))
        }
        TreeDef::Leaf | TreeDef::None => None,
        TreeDef::Tuple(c) | TreeDef::List(c) => c
            .iter()
            .enumerate()
            .find_map(|(i, d)| child(PathEntry::Index(i), d, prefix)),
        TreeDef::Dict(c) => c
            .iter()
            .find_map(|(k, d)| child(PathEntry::Key(k.clone()), d, prefix)),
        TreeDef::Node { fields, .. } => fields
            .iter()
            .find_map(|(k, d)| child(PathEntry::from(*k), d, prefix)),
    }
}

/// TF8 unless `b` has the structure `a`, then the same check of every leaf's shape.
pub(crate) fn same_layout(
    what: &str,
    def_a: &TreeDef,
    a: &[Tensor],
    def_b: &TreeDef,
    b: &[Tensor],
) -> Result<()> {
    if def_a != def_b {
        return Err(Error::Structure {
            message: format!("pytree structures differ: {def_a} vs {def_b} ({what})"),
        });
    }
    let paths = def_a.leaf_paths();
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        if x.shape() != y.shape() {
            let at = paths.get(k).map(|p| path_text(p)).unwrap_or_default();
            return Err(Error::shape(
                what,
                format!("shapes differ at {at}: {:?} vs {:?}", x.shape(), y.shape()),
            ));
        }
    }
    Ok(())
}

/// Rebuilds a tree of type `T` from a structure and tensor leaves.
pub(crate) fn rebuild<T: Tree>(def: &TreeDef, leaves: Vec<Tensor>) -> Result<T> {
    def.unflatten(leaves.into_iter().map(Leaf::Tensor).collect())
}
