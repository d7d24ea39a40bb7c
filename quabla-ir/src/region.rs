//! Control-flow regions (transforms.md §10–§13): nodes that own frozen body graphs.
//!
//! Three region kinds cover every control-flow form and every derivative of one:
//!
//! - [`RegionKind::Cond`]: operands `[pred, x_1..x_n]` (`pred` a rank-0 `i1`); both branches
//!   take `x_1..x_n` and return the region's outputs. Only the selected branch runs.
//! - [`RegionKind::Scan`]: operands `[carries.., consts.., xs..]`; the body takes
//!   `(i, carries.., consts.., x slices..)` and returns `(carries.., y slices..)`. Iteration `k`
//!   (`0 <= k < length`) runs with index `i = start + k`, reads slice `k` of each `xs` operand
//!   (leading axis) and writes slice `k` of each stacked output; iterations run in increasing
//!   `k`, or decreasing `k` when `reverse`. Outputs: the final carries, then the stacked `ys`
//!   (`[length, *y.shape]`). `fori_loop` is a scan without `xs` and `ys`; the reverse and
//!   checkpointed derivative passes are scans too (nested ones for √T checkpointing), so one
//!   executor and one set of rules serve every loop form.
//! - [`RegionKind::While`]: operands `[carries.., consts..]`; `cond(carries.., consts..)`
//!   returns a rank-0 `i1`, `body(carries.., consts..)` returns the carries. Outputs: the final
//!   carries. With `max_trips: Some(n)` the loop also stops after `n` trips while `cond` still
//!   holds (the bound that gives it a reverse mode); the facade reads whether it did from a
//!   trip counter among the carries.
//!
//! Nodes have one result each, so a region with several outputs appears as several `region`
//! nodes (one per output) that share the [`Region`] and the operands, pushed next to each
//! other; executors run the region once for all of them and transforms rewrite the group once.
//!
//! The [`RegionForm`] is the region's text name (`fori`, `fori_vjp`, `scan_vjp_jvp`, ...): it
//! records which user primitive the region came from and which derivatives it carries, which is
//! what the derivative support matrix of transforms.md §12 is stated in.

use crate::error::{IrError, Result};
use crate::graph::{Graph, TensorType};
use crate::table::code_table;
use crate::DType;
use std::sync::Arc;

code_table! {
    /// The user primitive and derivative forms of a region; its text name.
    pub enum RegionForm {
        Cond = 0 => "cond",
        Fori = 1 => "fori",
        /// Forward mode of a `fori`; it has no forward rule itself (TF3).
        ForiJvp = 2 => "fori_jvp",
        ForiVjp = 3 => "fori_vjp",
        ForiVjpJvp = 4 => "fori_vjp_jvp",
        ForiVjpVjp = 5 => "fori_vjp_vjp",
        While = 6 => "while",
        Scan = 7 => "scan",
        ScanVjp = 8 => "scan_vjp",
        ScanVjpJvp = 9 => "scan_vjp_jvp",
        ScanVjpVjp = 10 => "scan_vjp_vjp",
    }
}

impl RegionForm {
    /// The user-facing primitive (the `op` of errors.md TF2/TF3).
    pub fn primitive(self) -> &'static str {
        match self {
            RegionForm::Cond => "cond",
            RegionForm::Fori
            | RegionForm::ForiJvp
            | RegionForm::ForiVjp
            | RegionForm::ForiVjpJvp
            | RegionForm::ForiVjpVjp => "fori_loop",
            RegionForm::While => "while_loop",
            RegionForm::Scan
            | RegionForm::ScanVjp
            | RegionForm::ScanVjpJvp
            | RegionForm::ScanVjpVjp => "scan",
        }
    }
}

/// The bodies and contract of a region.
#[derive(Clone, Debug)]
pub enum RegionKind {
    Cond {
        then_branch: Arc<Graph>,
        else_branch: Arc<Graph>,
    },
    Scan(ScanBody),
    While {
        n_carry: usize,
        cond: Arc<Graph>,
        body: Arc<Graph>,
        /// At most this many trips (at least 1), or unbounded.
        max_trips: Option<usize>,
    },
}

/// A counted loop; see the module docs for the operand and body layout.
#[derive(Clone, Debug)]
pub struct ScanBody {
    pub length: usize,
    /// The index of iteration 0 (the `lower` bound of a `fori_loop`).
    pub start: usize,
    pub reverse: bool,
    pub n_carry: usize,
    pub n_const: usize,
    pub n_xs: usize,
    pub body: Arc<Graph>,
}

impl ScanBody {
    /// The dtype of the index parameter.
    pub fn index_dtype(&self) -> DType {
        self.body
            .inputs()
            .next()
            .map(|(_, _, t)| t.dtype)
            .unwrap_or(DType::F64)
    }

    /// Number of stacked outputs.
    pub fn n_ys(&self) -> usize {
        self.body.outputs().len() - self.n_carry
    }
}

/// A region: its kind with the bodies, its form, the derivative levels it carries, and the type
/// of each output. Built only by [`Region::new`], which checks the body contracts.
#[derive(Debug)]
pub struct Region {
    kind: RegionKind,
    form: RegionForm,
    level: u8,
    operand_types: Vec<TensorType>,
    output_types: Vec<TensorType>,
}

fn strip(t: &TensorType) -> TensorType {
    TensorType::new(t.dtype, t.shape.clone())
}

fn input_types(g: &Graph) -> Vec<TensorType> {
    g.inputs().map(|(_, _, t)| strip(t)).collect()
}

fn output_types(g: &Graph) -> Vec<TensorType> {
    g.outputs().iter().map(|o| strip(&g.node(*o).ty)).collect()
}

fn mismatch(form: RegionForm, what: String) -> IrError {
    IrError::verify(format!("{} region: {what}", form.name()))
}

impl Region {
    /// Checks the bodies against each other and returns the region with its operand and
    /// output types. Violations are IR invariant errors: the facade checks the user-facing
    /// contracts (SH13) before it builds a region.
    pub fn new(kind: RegionKind, form: RegionForm, level: u8) -> Result<Region> {
        let (operand_types, output_types) = match &kind {
            RegionKind::Cond {
                then_branch,
                else_branch,
            } => {
                let ins = input_types(then_branch);
                if ins != input_types(else_branch) {
                    return Err(mismatch(form, "branches take different inputs".into()));
                }
                let outs = output_types(then_branch);
                if outs != output_types(else_branch) {
                    return Err(mismatch(form, "branches return different types".into()));
                }
                let mut operands = vec![TensorType::new(DType::Bool, crate::Shape::scalar())];
                operands.extend(ins);
                (operands, outs)
            }
            RegionKind::Scan(s) => {
                let ins = input_types(&s.body);
                let outs = output_types(&s.body);
                // Checked: the counts come from IR text or wire bytes too.
                let expected = s
                    .n_carry
                    .checked_add(s.n_const)
                    .and_then(|n| n.checked_add(s.n_xs))
                    .and_then(|n| n.checked_add(1));
                if expected != Some(ins.len()) {
                    return Err(mismatch(
                        form,
                        format!(
                            "body takes {} inputs, expected 1 + {} + {} + {}",
                            ins.len(),
                            s.n_carry,
                            s.n_const,
                            s.n_xs
                        ),
                    ));
                }
                if s.length == 0 {
                    return Err(mismatch(form, "length is 0".into()));
                }
                // Every index `start + k` (k < length) is a usize, so executors may add freely.
                if s.start.checked_add(s.length - 1).is_none() {
                    return Err(mismatch(
                        form,
                        format!(
                            "start {} + length {} overflows the index range",
                            s.start, s.length
                        ),
                    ));
                }
                let index = &ins[0];
                if !index.shape.dims().is_empty() || !index.dtype.is_float() {
                    return Err(mismatch(form, format!("index parameter is {index}")));
                }
                if outs.len() < s.n_carry || outs[..s.n_carry] != ins[1..1 + s.n_carry] {
                    return Err(mismatch(form, "body changes its carries".into()));
                }
                let mut operands: Vec<TensorType> = ins[1..1 + s.n_carry + s.n_const].to_vec();
                for x in &ins[1 + s.n_carry + s.n_const..] {
                    operands.push(stacked(x, s.length)?);
                }
                let mut results: Vec<TensorType> = outs[..s.n_carry].to_vec();
                for y in &outs[s.n_carry..] {
                    results.push(stacked(y, s.length)?);
                }
                (operands, results)
            }
            RegionKind::While {
                n_carry,
                cond,
                body,
                max_trips,
            } => {
                if *max_trips == Some(0) {
                    return Err(mismatch(form, "max_trips is 0".into()));
                }
                let ins = input_types(body);
                if input_types(cond) != ins {
                    return Err(mismatch(form, "cond and body take different inputs".into()));
                }
                let c = output_types(cond);
                if c.len() != 1 || c[0] != TensorType::new(DType::Bool, crate::Shape::scalar()) {
                    return Err(mismatch(form, "cond must return one rank-0 i1".into()));
                }
                let outs = output_types(body);
                if *n_carry > ins.len() || outs != ins[..*n_carry] {
                    return Err(mismatch(form, "body changes its carries".into()));
                }
                (ins, outs)
            }
        };
        Ok(Region {
            kind,
            form,
            level,
            operand_types,
            output_types,
        })
    }

    pub fn kind(&self) -> &RegionKind {
        &self.kind
    }

    pub fn form(&self) -> RegionForm {
        self.form
    }

    /// Derivative levels the region carries (0 for a user region).
    pub fn level(&self) -> u8 {
        self.level
    }

    pub fn operand_types(&self) -> &[TensorType] {
        &self.operand_types
    }

    pub fn output_types(&self) -> &[TensorType] {
        &self.output_types
    }

    /// The body graphs with their text labels (transforms.md §15.3).
    pub fn bodies(&self) -> Vec<(&'static str, &Arc<Graph>)> {
        match &self.kind {
            RegionKind::Cond {
                then_branch,
                else_branch,
            } => vec![("then", then_branch), ("else", else_branch)],
            RegionKind::Scan(s) => vec![("body", &s.body)],
            RegionKind::While { cond, body, .. } => vec![("cond", cond), ("body", body)],
        }
    }
}

fn stacked(t: &TensorType, length: usize) -> Result<TensorType> {
    let mut dims = vec![length];
    dims.extend_from_slice(t.shape.dims());
    Ok(TensorType::new(t.dtype, crate::Shape::new(dims)?))
}

/// One output of a region. Equality and hashing use the region's identity, so CSE merges only
/// nodes of the same region.
#[derive(Clone, Debug)]
pub struct RegionCall {
    pub region: Arc<Region>,
    pub output: usize,
}

impl PartialEq for RegionCall {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.region, &other.region) && self.output == other.output
    }
}

impl Eq for RegionCall {}

impl std::hash::Hash for RegionCall {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.region) as usize).hash(state);
        self.output.hash(state);
    }
}

/// The sibling groups of a graph's region nodes: for each node that is a region output, the
/// ids of every node of the same call (same region, same operands), in graph order. Transforms
/// rewrite a group once, at its first node.
pub fn region_groups(g: &Graph) -> std::collections::HashMap<usize, Vec<usize>> {
    use crate::op::Op;
    let mut by_call: std::collections::HashMap<(usize, Vec<crate::NodeId>), Vec<usize>> =
        std::collections::HashMap::new();
    for (i, node) in g.nodes().iter().enumerate() {
        if let Op::Region(call) = &node.op {
            let key = (Arc::as_ptr(&call.region) as usize, node.operands.clone());
            by_call.entry(key).or_default().push(i);
        }
    }
    let mut groups = std::collections::HashMap::new();
    for members in by_call.into_values() {
        for &m in &members {
            groups.insert(m, members.clone());
        }
    }
    groups
}
