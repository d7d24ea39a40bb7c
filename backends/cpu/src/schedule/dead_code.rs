//! Phase 1, dead code: a node runs when it reaches a plan output or is an effect (a debug
//! print runs whether or not its result is used). A custom rule that survived to here is
//! refused, since a backend runs only primitive ops.

use super::draft::Draft;
use quabla_backend::{BackendError, Result};
use quabla_ir::Op;

/// Fills `needed`, `is_output` and `consumers`.
pub(super) fn mark(draft: &mut Draft<'_>) -> Result<()> {
    let nodes = draft.nodes();
    for &o in draft.graph.outputs() {
        draft.needed[o.index()] = true;
        draft.is_output[o.index()] = true;
    }
    for (i, node) in nodes.iter().enumerate() {
        if node.op.is_effect() {
            draft.needed[i] = true;
        }
    }
    for i in (0..nodes.len()).rev() {
        if draft.needed[i] {
            for o in &nodes[i].operands {
                draft.needed[o.index()] = true;
            }
        }
    }
    if let Some(Op::Custom(custom)) = draft
        .live()
        .map(|i| &nodes[i].op)
        .find(|op| matches!(op, Op::Custom(_)))
    {
        return Err(BackendError::Unsupported {
            op: "custom".into(),
            device: "cpu".into(),
            reason: format!(
                "the custom rule {} must be inlined before a plan reaches a backend",
                custom.rule.name
            ),
        });
    }
    let live: Vec<usize> = draft.live().collect();
    for i in live {
        for o in &nodes[i].operands {
            draft.consumers[o.index()].push(i);
        }
    }
    Ok(())
}
