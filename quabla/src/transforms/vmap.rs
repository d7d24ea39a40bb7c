//! `vmap` (transforms.md §9): trace the function on one example, batch the graph with
//! `quabla-vmap`, and run it on the whole batch (cached per signature) or inline it into an
//! enclosing trace. Values that do not depend on a mapped argument are never replicated.
//!
//! The shell over [`crate::staging`]: the axes are fixed per [`Vmap`] object (which owns the
//! cache), so they are not part of the signature; on a miss the stage resolves them against the
//! arguments, checks the batch size and traces the function on one example.

use crate::error::{Error, Result};
use crate::staging::{self, config_methods, debug_as_shell, Call, Prepared, Shell, Wrt};
use crate::trace::{self, InputLeaf, OutSlot, TracedFunction};
use crate::tree::{self, Tree};
use quabla_ir::{normalize_axis, Shape, TensorType};

/// A pytree prefix of mapped axes (transforms.md §9): an axis (or `None`) applies to every
/// leaf below it; tuples, lists, dicts and class nodes (NamedTuples, registered dataclasses,
/// `#[derive(Tree)]` structs) follow the argument's structure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InAxes {
    Axis(Option<isize>),
    Tuple(Vec<InAxes>),
    List(Vec<InAxes>),
    Dict(Vec<(tree::DictKey, InAxes)>),
    /// An instance of a class node: the class name and one prefix per data field, in field
    /// order (`in_axes=(Point(0, None),)`). Meta fields are not mapped and are not listed.
    Node {
        name: String,
        fields: Vec<(String, InAxes)>,
    },
}

impl From<Option<isize>> for InAxes {
    fn from(a: Option<isize>) -> InAxes {
        InAxes::Axis(a)
    }
}

impl From<isize> for InAxes {
    fn from(a: isize) -> InAxes {
        InAxes::Axis(Some(a))
    }
}

impl std::fmt::Display for InAxes {
    /// In the spelling of the argument it mirrors: `(0, None)`, `[0]`, `{'w': None}`,
    /// `Point(x=0, y=None)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let join = |items: &mut dyn Iterator<Item = String>| items.collect::<Vec<_>>().join(", ");
        match self {
            InAxes::Axis(Some(a)) => write!(f, "{a}"),
            InAxes::Axis(None) => f.write_str("None"),
            InAxes::Tuple(items) if items.len() == 1 => write!(f, "({},)", items[0]),
            InAxes::Tuple(items) => {
                write!(f, "({})", join(&mut items.iter().map(|i| i.to_string())))
            }
            InAxes::List(items) => {
                write!(f, "[{}]", join(&mut items.iter().map(|i| i.to_string())))
            }
            InAxes::Dict(entries) => write!(
                f,
                "{{{}}}",
                join(&mut entries.iter().map(|(k, v)| match k {
                    tree::DictKey::Str(s) => format!("'{s}': {v}"),
                    tree::DictKey::Int(i) => format!("{i}: {v}"),
                }))
            ),
            InAxes::Node { name, fields } => write!(
                f,
                "{name}({})",
                join(&mut fields.iter().map(|(k, v)| format!("{k}={v}")))
            ),
        }
    }
}

impl InAxes {
    /// The axis of every leaf of `def`, in flatten order (TF8 when the prefix does not fit).
    fn resolve(&self, def: &tree::TreeDef, out: &mut Vec<Option<isize>>) -> Result<()> {
        use tree::TreeDef as D;
        let mismatch = || Error::Structure {
            message: format!("pytree structures differ: in_axes {self} vs {def}"),
        };
        match (self, def) {
            (InAxes::Axis(a), d) => out.extend(std::iter::repeat_n(*a, d.num_leaves())),
            (InAxes::Tuple(s), D::Tuple(c)) | (InAxes::List(s), D::List(c))
                if s.len() == c.len() =>
            {
                for (spec, d) in s.iter().zip(c) {
                    spec.resolve(d, out)?;
                }
            }
            (InAxes::Dict(s), D::Dict(c)) if s.len() == c.len() => {
                for ((k, d), (sk, spec)) in c.iter().zip(s) {
                    if k != sk {
                        return Err(mismatch());
                    }
                    spec.resolve(d, out)?;
                }
            }
            (
                InAxes::Node { name, fields },
                D::Node {
                    name: n, fields: c, ..
                },
            ) if name == n && fields.len() == c.len() => {
                for ((k, d), (sk, spec)) in c.iter().zip(fields) {
                    if k != sk {
                        return Err(mismatch());
                    }
                    spec.resolve(d, out)?;
                }
            }
            _ => return Err(mismatch()),
        }
        Ok(())
    }
}

/// A batched function: build with [`vmap`], choose axes with [`Vmap::in_axes`] and
/// [`Vmap::out_axes`], call with [`Vmap::call`].
pub struct Vmap<F, A> {
    shell: Shell<F, A>,
    in_axes: Option<InAxes>,
    out_axes: InAxes,
}

debug_as_shell!(Vmap);

/// Maps `f` over axis 0 of every argument (see [`Vmap::in_axes`]).
pub fn vmap<A: Tree, F>(f: F) -> Vmap<F, A> {
    Vmap {
        shell: Shell::new("vmap", f),
        in_axes: None,
        out_axes: InAxes::Axis(Some(0)),
    }
}

impl<A: Tree, F> Vmap<F, A> {
    config_methods!();

    /// One entry per positional argument: the mapped axis of every array leaf of that argument
    /// (negative counts from the end), or `None` for an unmapped argument.
    pub fn in_axes(mut self, axes: &[Option<isize>]) -> Self {
        self.in_axes = Some(InAxes::Tuple(
            axes.iter().map(|&a| InAxes::Axis(a)).collect(),
        ));
        self
    }

    /// A pytree prefix of the arguments (a tuple over the positional arguments when the
    /// function takes several): `InAxes::Tuple(vec![InAxes::Dict(vec![("w".into(),
    /// None.into()), ("x".into(), 0.into())]), None.into()])`.
    pub fn in_axes_tree(mut self, axes: InAxes) -> Self {
        self.in_axes = Some(axes);
        self
    }

    /// Where the batch axis goes in every output (`None`: the outputs must not depend on a
    /// mapped argument).
    pub fn out_axes(mut self, axis: Option<isize>) -> Self {
        self.out_axes = InAxes::Axis(axis);
        self
    }

    /// Output axes as a pytree prefix of the result (`None` leaves must not depend on a mapped
    /// argument).
    pub fn out_axes_tree(mut self, axes: InAxes) -> Self {
        self.out_axes = axes;
        self
    }

    /// Calls the batched function.
    pub fn call<R: Tree>(&self, args: &impl Tree) -> Result<R>
    where
        F: Fn(A) -> Result<R>,
    {
        self.shell.config.validate()?;
        let call = Call {
            cache: &self.shell.cache,
            owner: self.shell.config.owner("vmap", &[]),
            wrt: Wrt::Nothing,
            target: &self.shell.target,
            extra: None,
        };
        staging::execute(&call, args, |prepared| self.stage::<R>(prepared))
    }

    /// The mapped axis of every leaf of a call, per the `in_axes` prefix.
    fn leaf_axes(&self, def: &tree::TreeDef, n_leaves: usize) -> Result<Vec<Option<isize>>> {
        Ok(match &self.in_axes {
            None => vec![Some(0); n_leaves],
            Some(InAxes::Tuple(per_arg)) if !matches!(def, tree::TreeDef::Tuple(_)) => {
                // One positional argument that is not itself a tuple.
                if per_arg.len() != 1 {
                    return Err(Error::invalid(format!(
                        "vmap in_axes has {} entries for 1 positional argument",
                        per_arg.len()
                    )));
                }
                let mut out = Vec::new();
                per_arg[0].resolve(def, &mut out)?;
                out
            }
            Some(spec) => {
                let mut out = Vec::new();
                spec.resolve(def, &mut out)?;
                out
            }
        })
    }

    /// Resolves the axes, checks the batch size, traces the function on one example and
    /// batches the graph.
    fn stage<R: Tree>(&self, prepared: &Prepared) -> Result<TracedFunction>
    where
        F: Fn(A) -> Result<R>,
    {
        let def = &prepared.def;
        let names = &prepared.names;
        let leaf_axes = self.leaf_axes(def, prepared.inputs.len())?;
        // Per leaf: the example type (the batch axis removed) and the mapped axis.
        let mut inputs = Vec::with_capacity(prepared.inputs.len());
        let mut mapped: Vec<Option<usize>> = Vec::new();
        let mut sized: Vec<(String, Shape)> = Vec::new();
        for (i, input) in prepared.inputs.iter().enumerate() {
            let axis = leaf_axes[i];
            match input {
                InputLeaf::Array(ty) => {
                    let (example, ax) = match axis {
                        None => (ty.clone(), None),
                        Some(a) => {
                            let a = normalize_axis(a, ty.shape.rank()).map_err(|_| {
                                Error::shape(
                                    "vmap",
                                    format!("vmap in_axes: axis {a} of {} is out of range for a tensor of rank {}", names[i], ty.shape.rank()),
                                )
                            })?;
                            let mut dims = ty.shape.dims().to_vec();
                            dims.remove(a);
                            sized.push((names[i].clone(), ty.shape.clone()));
                            (
                                TensorType {
                                    dtype: ty.dtype,
                                    shape: Shape::new(dims)?,
                                    weak: ty.weak,
                                },
                                Some(a),
                            )
                        }
                    };
                    inputs.push(InputLeaf::Array(example));
                    mapped.push(ax);
                }
                InputLeaf::Static(leaf) => {
                    // AR22, also under the default in_axes (0 for every argument): a scalar
                    // has no axis to map, as in JAX.
                    if axis.is_some() {
                        return Err(Error::invalid(
                            "vmap: a Python scalar argument must have in_axes None",
                        ));
                    }
                    inputs.push(InputLeaf::Static(leaf.clone()));
                }
            }
        }
        let shapes: Vec<(&str, &Shape)> = sized.iter().map(|(n, s)| (n.as_str(), s)).collect();
        let axes_mapped: Vec<Option<usize>> =
            mapped.iter().filter(|a| a.is_some()).copied().collect();
        // TF6 is a structure error (ValueError) of the facade.
        let size = quabla_vmap::batch_size(&shapes, &axes_mapped).map_err(|e| match e {
            quabla_ir::IrError::Shape { message, .. }
                if message.starts_with("vmap got inconsistent sizes") =>
            {
                Error::Structure { message }
            }
            other => Error::from(other),
        })?;
        let TracedFunction {
            graph,
            captures,
            out_def,
            out_slots,
        } = trace::trace_function::<A, R>(&|a| (self.shell.f)(a), def, &inputs, names)?;
        let mut in_axes = mapped;
        in_axes.extend(std::iter::repeat_n(None, captures.len()));
        // The axis of each result leaf, then of each plan output (static leaves have none).
        let mut leaf_out_axes = Vec::new();
        self.out_axes.resolve(&out_def, &mut leaf_out_axes)?;
        let mut per_output: Vec<Option<isize>> = vec![None; graph.outputs().len()];
        for (slot, axis) in out_slots.iter().zip(&leaf_out_axes) {
            if let OutSlot::Plan(k) = slot {
                per_output[*k] = *axis;
            }
        }
        let out_axes: Vec<Option<usize>> = graph
            .outputs()
            .iter()
            .zip(&per_output)
            .map(|(o, axis)| {
                axis.map(|a| normalize_axis(a, graph.node(*o).ty.shape.rank() + 1))
                    .transpose()
            })
            .collect::<quabla_ir::Result<_>>()?;
        let batched = quabla_vmap::batch_graph(&graph, &in_axes, size, &out_axes)?;
        Ok(TracedFunction {
            graph: batched,
            captures,
            out_def,
            out_slots,
        })
    }
}
