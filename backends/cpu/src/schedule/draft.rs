//! The draft schedule: what the phases of [`Schedule::build`](super::Schedule::build) have
//! decided about a plan so far, one entry per node of its graph. Each phase fills its own
//! fields from those of the phases before it; the last one turns the draft into the
//! [`Schedule`](super::Schedule). The draft holds no behaviour beyond its text form, which the
//! file tests compare phase by phase (`tests/schedule_files.rs`).

use super::{Build, LuShare, Step};
use crate::kernels::elementwise::EwOp;
use quabla_ir::{Graph, Node, Shape};

/// An elementwise group being formed by the fusion phase.
pub(super) struct Group {
    /// Its nodes, in topological order; the group runs at the last.
    pub members: Vec<usize>,
    /// The shape every member has.
    pub shape: Shape,
    /// Whether a node outside the group has consumed a member, so that nothing joins it any
    /// more.
    pub sealed: bool,
}

/// What is known of a plan between the phases, indexed by node.
pub(super) struct Draft<'g> {
    pub graph: &'g Graph,
    pub build: Build,
    // Dead code.
    /// The node runs: it reaches an output or is an effect.
    pub needed: Vec<bool>,
    pub is_output: Vec<bool>,
    /// The needed nodes reading each node.
    pub consumers: Vec<Vec<usize>>,
    // Fusion.
    /// The fused kernel op of each needed elementwise node that may be fused.
    pub elementwise: Vec<Option<EwOp>>,
    pub groups: Vec<Group>,
    pub group_of: Vec<Option<usize>>,
    // Aliases and storage.
    /// A `broadcast` never materialized: its consumers read its operand with broadcast strides.
    pub virtual_broadcast: Vec<bool>,
    /// A matrix `transpose` never copied: its products read its operand transposed.
    pub folded_transpose: Vec<bool>,
    /// The slot holding each node's value, if it is stored.
    pub slot_of: Vec<Option<usize>>,
    pub slots: usize,
    // Shared factorizations and region siblings.
    /// The node runs as part of another node's step.
    pub absorbed: Vec<bool>,
    /// The `linalg` nodes whose values a node's step also writes (one factorization).
    pub also: Vec<Vec<usize>>,
    pub lu_share: Vec<Option<LuShare>>,
    /// The steps sharing each set of LU factors, in order.
    pub shared_lu_users: Vec<Vec<usize>>,
    /// For the first needed node of a region call, every needed sibling (itself included).
    pub siblings: Vec<Vec<usize>>,
    // Steps.
    pub steps: Vec<Step>,
}

impl<'g> Draft<'g> {
    /// The draft before any phase: nothing decided.
    pub fn new(graph: &'g Graph, build: Build) -> Draft<'g> {
        let n = graph.nodes().len();
        Draft {
            graph,
            build,
            needed: vec![false; n],
            is_output: vec![false; n],
            consumers: vec![Vec::new(); n],
            elementwise: vec![None; n],
            groups: Vec::new(),
            group_of: vec![None; n],
            virtual_broadcast: vec![false; n],
            folded_transpose: vec![false; n],
            slot_of: vec![None; n],
            slots: 0,
            absorbed: vec![false; n],
            also: vec![Vec::new(); n],
            lu_share: vec![None; n],
            shared_lu_users: Vec::new(),
            siblings: vec![Vec::new(); n],
            steps: Vec::new(),
        }
    }

    /// Fusion and the storage aliases are on (`Build::fuse`, never under `Build::check_nans`).
    pub fn fuse(&self) -> bool {
        self.build.fuse && !self.build.check_nans
    }

    pub fn nodes(&self) -> &'g [Node] {
        self.graph.nodes()
    }

    /// The needed nodes, in topological order.
    pub fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.needed.len()).filter(|&i| self.needed[i])
    }

    /// Whether group member `m` is read outside its group (or is a plan output), so that its
    /// value is written to memory.
    pub fn group_output(&self, m: usize) -> bool {
        self.is_output[m]
            || self.consumers[m]
                .iter()
                .any(|&c| self.group_of[c] != self.group_of[m])
    }

    /// The slot of node `i`, which must be stored.
    pub fn slot(&self, i: usize) -> quabla_backend::Result<usize> {
        self.slot_of[i].ok_or_else(|| crate::kernels::internal(format!("node %{i} has no storage")))
    }
}
