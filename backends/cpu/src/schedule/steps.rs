//! Phase 6, steps and parts over threads: the steps in order of each unit's last node (a fused
//! group at its last member, a region call at its first sibling, every other stored node on
//! its own). A value written by a step that splits its rows over the threads (a product in
//! bands of rows, a split group) makes the elementwise groups reading it, element for element,
//! split the same way (`Program::spread_input`), so each thread reads what its own cache holds;
//! a kernel reading it in order of rows relays from band to band (`NodeStep::rows_split`).

use super::draft::Draft;
use super::{
    fusion, integer_node, Build, CompileRegion, NanCheck, NodeStep, RegionSlots, Step, StepKind,
};
use crate::kernels::elementwise::Access;
use quabla_backend::{Precision, Result};
use quabla_ir::{DType, Graph, Op, Reducer};

/// Fills `steps`, compiling each region call with `compile_region`.
pub(super) fn make(draft: &mut Draft<'_>, compile_region: CompileRegion<'_>) -> Result<()> {
    let nodes = draft.nodes();
    let build = draft.build;
    // `spread[s]`: slot `s` is written by a step that splits its rows over the threads (when
    // there are several).
    let mut spread = vec![false; draft.slots];
    let mut steps: Vec<Step> = Vec::new();
    for i in draft.live().filter(|&i| !draft.absorbed[i]) {
        let node = &nodes[i];
        if let Some(g) = draft.group_of[i] {
            if draft.groups[g].members.last() == Some(&i) {
                let mut program = fusion::program(draft, g)?;
                program.spread_input = program
                    .exts
                    .iter()
                    .any(|e| e.access == Access::Full && spread[e.slot]);
                if program.splits_when_threaded() {
                    for &(s, _) in &program.outs {
                        spread[s] = true;
                    }
                }
                steps.push(Step {
                    kind: StepKind::Fused(program),
                    free: Vec::new(),
                    check: nan_check(build, draft.graph, i, &draft.slot_of),
                });
            }
            continue;
        }
        let unstored = draft.virtual_broadcast[i] || draft.folded_transpose[i];
        if node.op.is_leaf() || unstored || matches!(node.op, Op::Reshape { .. }) {
            continue;
        }
        if let Op::Region(call) = &node.op {
            let args = node
                .operands
                .iter()
                .map(|o| draft.slot(o.index()))
                .collect::<Result<Vec<_>>>()?;
            let outs = draft.siblings[i]
                .iter()
                .map(|&m| match &nodes[m].op {
                    Op::Region(c) => Ok((c.output, draft.slot(m)?)),
                    _ => Err(crate::kernels::internal(
                        "a non-region node in a region group",
                    )),
                })
                .collect::<Result<Vec<_>>>()?;
            let step = compile_region(&call.region, RegionSlots { args, outs }, build)?;
            // A region's body steps check themselves.
            steps.push(Step {
                kind: StepKind::Region(step),
                free: Vec::new(),
                check: None,
            });
            continue;
        }
        if let (Op::Matmul, [_, rhs]) = (&node.op, &node.operands[..]) {
            if let (&[rows, cols], &[inner, _]) =
                (node.ty.shape.dims(), nodes[rhs.index()].ty.shape.dims())
            {
                if crate::kernels::matmul::splits_rows_when_threaded(rows, inner, cols) {
                    spread[draft.slot(i)?] = true;
                }
            }
        }
        let step = node_step(draft, i, &spread)?;
        steps.push(Step {
            kind: StepKind::Node(step),
            free: Vec::new(),
            check: nan_check(build, draft.graph, i, &draft.slot_of),
        });
    }
    draft.steps = steps;
    Ok(())
}

/// The kernel step of node `i`, reading a folded transpose as its own operand.
fn node_step(draft: &Draft<'_>, i: usize, spread: &[bool]) -> Result<NodeStep> {
    let nodes = draft.nodes();
    let node = &nodes[i];
    let lhs_transposed =
        matches!(node.op, Op::Matmul) && draft.folded_transpose[node.operands[0].index()];
    let args = node
        .operands
        .iter()
        .enumerate()
        .map(|(position, o)| {
            let o = if position == 0 && lhs_transposed {
                nodes[o.index()].operands[0]
            } else {
                *o
            };
            Ok((
                draft.slot(o.index())?,
                nodes[o.index()].ty.shape.dims().to_vec(),
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let rows_split = [0, 1].map(|a| args.get(a).is_some_and(|&(s, _)| spread[s]));
    Ok(NodeStep {
        op: node.op.clone(),
        args,
        out: draft.slot(i)?,
        ty: node.ty.clone(),
        also: draft.also[i]
            .iter()
            .map(|&j| match nodes[j].op {
                Op::Linalg(kind) => Ok((kind, draft.slot(j)?, nodes[j].ty.clone())),
                _ => Err(crate::kernels::internal(
                    "a non-linalg node shares a factorization",
                )),
            })
            .collect::<Result<Vec<_>>>()?,
        lu: draft.lu_share[i],
        native_f32: draft.build.precision == Precision::Float32
            && node.ty.dtype == DType::F32
            && match &node.op {
                Op::Matmul => true,
                Op::Reduce { kind, .. } => matches!(kind.reducer(), Reducer::Sum | Reducer::Mean),
                _ => false,
            },
        lhs_transposed,
        rows_split,
        integer: integer_node(draft.graph, node),
    })
}

/// The check of the step computing node `i`, under [`Build::check_nans`].
fn nan_check(
    build: Build,
    graph: &Graph,
    i: usize,
    slot_of: &[Option<usize>],
) -> Option<Box<NanCheck>> {
    if !build.check_nans {
        return None;
    }
    let id = quabla_ir::NodeId(i as u32);
    let node = graph.node(id);
    Some(Box::new(NanCheck {
        line: quabla_ir::text::node_line(graph, id),
        origin: node.origin,
        out: slot_of[i]?,
        operands: node
            .operands
            .iter()
            .filter_map(|o| Some((o.to_string(), slot_of[o.index()]?)))
            .collect(),
    }))
}
