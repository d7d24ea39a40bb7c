//! Phase 2, fusion: elementwise nodes (`Op::is_elementwise`) are grouped greedily in
//! topological order, and each group is later compiled into one tiled register program
//! ([`program`]).
//!
//! A node joins an open group of one of its operands when it has that group's shape; failing
//! that, the latest open group of its shape (so `sin(x)` and `cos(x)` of one input share a
//! loop, and the kernels can compute them together); otherwise it starts a group. A group is
//! sealed as soon as a node outside it consumes one of its members, so nothing can join it
//! afterwards: this keeps the graph of groups acyclic (every edge out of a group seals it, so
//! no other group depends on an open one, and a later member can never depend on a group that
//! depends on it), and a group runs at the position of its last member. Integer nodes are never
//! fused: they run one by one with the integer semantics of `quabla_ir::eval`
//! (`exec::run_integer_node`), since the fused kernels compute in float64, which int64 does not
//! fit. Without [`Draft::fuse`] every elementwise node is a group of its own.

use super::draft::{Draft, Group};
use super::integer_node;
use crate::kernels::elementwise::{Access, EwOp, ExtSpec, Member, Operand, Program};
use crate::kernels::layout::{broadcast_strides, strides};
use quabla_backend::Result;
use quabla_ir::Shape;
use std::collections::HashMap;

/// Fills `elementwise`, `groups` and `group_of`.
pub(super) fn group(draft: &mut Draft<'_>) {
    let nodes = draft.nodes();
    for i in draft.live().collect::<Vec<_>>() {
        if !integer_node(draft.graph, &nodes[i]) {
            draft.elementwise[i] = EwOp::from_op(&nodes[i].op);
        }
    }
    // The latest group started for each shape (it may have been sealed since).
    let mut latest_of_shape: HashMap<Shape, usize> = HashMap::new();
    for i in draft.live().collect::<Vec<_>>() {
        let node = &nodes[i];
        if draft.elementwise[i].is_some() {
            let (groups, group_of) = (&draft.groups, &draft.group_of);
            let joined = if draft.fuse() {
                node.operands
                    .iter()
                    .filter_map(|o| group_of[o.index()])
                    .find(|&g| !groups[g].sealed && groups[g].shape == node.ty.shape)
                    .or_else(|| {
                        latest_of_shape
                            .get(&node.ty.shape)
                            .copied()
                            .filter(|&g| !groups[g].sealed)
                    })
            } else {
                None
            };
            let g = joined.unwrap_or_else(|| {
                draft.groups.push(Group {
                    members: Vec::new(),
                    shape: node.ty.shape.clone(),
                    sealed: false,
                });
                latest_of_shape.insert(node.ty.shape.clone(), draft.groups.len() - 1);
                draft.groups.len() - 1
            });
            draft.groups[g].members.push(i);
            draft.group_of[i] = Some(g);
        }
        for o in &node.operands {
            if let Some(g) = draft.group_of[o.index()] {
                if draft.group_of[i] != Some(g) {
                    draft.groups[g].sealed = true;
                }
            }
        }
    }
}

/// Compiles group `g` into a register program, reading its externals from their slots (a
/// virtual broadcast's operand with the broadcast's strides) and writing the members read
/// outside the group.
pub(super) fn program(draft: &Draft<'_>, g: usize) -> Result<Program> {
    let nodes = draft.nodes();
    let group = &draft.groups[g];
    let gdims = group.shape.dims().to_vec();
    let index: HashMap<usize, usize> = group
        .members
        .iter()
        .enumerate()
        .map(|(k, &m)| (m, k))
        .collect();
    let mut exts: Vec<ExtSpec> = Vec::new();
    // The index of each distinct (slot, access) in `exts`: a group may read thousands of
    // externals (one scalar constant per node of a long chain), so no linear search.
    let mut ext_index: HashMap<(usize, Access), usize> = HashMap::new();
    let mut outs = Vec::new();
    let mut members = Vec::with_capacity(group.members.len());
    for &m in &group.members {
        let node = &nodes[m];
        let mut args = Vec::with_capacity(node.operands.len());
        for o in &node.operands {
            let o = o.index();
            if draft.group_of[o] == Some(g) {
                args.push(Operand::Member(index[&o]));
                continue;
            }
            // Resolve the storage the external is read from, and its strides over the group.
            let (src, strides_in_group) = if draft.virtual_broadcast[o] {
                let s = nodes[o].operands[0].index();
                let sb = nodes[o].ty.shape.dims();
                let inner = broadcast_strides(nodes[s].ty.shape.dims(), sb);
                let outer = broadcast_strides(sb, &gdims);
                let lead = gdims.len() - sb.len();
                let st: Vec<usize> = (0..gdims.len())
                    .map(|a| {
                        if a < lead || outer[a] == 0 {
                            0
                        } else {
                            inner[a - lead]
                        }
                    })
                    .collect();
                (s, st)
            } else {
                (
                    o,
                    broadcast_strides(nodes[o].ty.shape.dims(), &gdims).to_vec(),
                )
            };
            let slot = draft.slot_of[src].ok_or_else(|| {
                crate::kernels::internal(format!("external %{src} has no storage"))
            })?;
            let access = if nodes[src].ty.shape.size() == 1 {
                Access::Scalar
            } else {
                let rm = strides(&gdims);
                let full = (0..gdims.len()).all(|a| gdims[a] == 1 || strides_in_group[a] == rm[a]);
                if full {
                    Access::Full
                } else {
                    Access::Strided(strides_in_group)
                }
            };
            let e = *ext_index.entry((slot, access.clone())).or_insert_with(|| {
                exts.push(ExtSpec {
                    slot,
                    dtype: nodes[src].ty.dtype,
                    access,
                });
                exts.len() - 1
            });
            args.push(Operand::Ext(e));
        }
        let output = if draft.group_output(m) {
            let s = draft.slot_of[m]
                .ok_or_else(|| crate::kernels::internal("a group output has no storage"))?;
            outs.push((s, node.ty.dtype));
            Some(outs.len() - 1)
        } else {
            None
        };
        let op = EwOp::from_op(&node.op)
            .ok_or_else(|| crate::kernels::internal("a non-elementwise group member"))?;
        members.push(Member {
            op,
            args,
            dtype: node.ty.dtype,
            output,
        });
    }
    Ok(Program::build(gdims, exts, &members, outs))
}
