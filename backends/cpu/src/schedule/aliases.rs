//! Phase 3, aliases and storage: which values get a slot of their own. `reshape` shares its
//! operand's slot (row-major data is unchanged); a `broadcast` whose consumers are all fused
//! elementwise nodes is never materialized (they read its operand with broadcast strides); a
//! matrix `transpose` whose consumers are all products taking it as their left operand is never
//! copied (they read its operand transposed, `matmul::lhs_transpose_folds`, with the bits of
//! the copy's product); a group member read only inside its group lives in registers. Every
//! other needed value gets a slot.

use super::draft::Draft;
use quabla_ir::{Node, Op};

/// Fills `virtual_broadcast`, `folded_transpose`, `slot_of` and `slots`.
pub(super) fn assign(draft: &mut Draft<'_>) {
    let nodes = draft.nodes();
    for i in draft.live().collect::<Vec<_>>() {
        let read_by_some = draft.fuse() && !draft.is_output[i] && !draft.consumers[i].is_empty();
        draft.virtual_broadcast[i] = read_by_some
            && matches!(nodes[i].op, Op::Broadcast { .. })
            && draft.consumers[i]
                .iter()
                .all(|&c| draft.elementwise[c].is_some());
        draft.folded_transpose[i] = read_by_some
            && matches!(&nodes[i].op, Op::Transpose { perm } if perm[..] == [1, 0])
            && draft.consumers[i].iter().all(|&c| folds_into(nodes, i, c));
    }
    for i in draft.live().collect::<Vec<_>>() {
        draft.slot_of[i] = match &nodes[i].op {
            Op::Reshape { .. } => draft.slot_of[nodes[i].operands[0].index()],
            _ if draft.virtual_broadcast[i] || draft.folded_transpose[i] => None,
            _ if draft.group_of[i].is_some() && !draft.group_output(i) => None,
            _ => {
                draft.slots += 1;
                Some(draft.slots - 1)
            }
        };
    }
}

/// Whether the matrix `transpose` node `t` folds into its consumer `c`: an unbatched `matmul`
/// taking it as its left operand only, of a shape whose product reads a transposed view with
/// the bits of the copy (`matmul::lhs_transpose_folds`).
fn folds_into(nodes: &[Node], t: usize, c: usize) -> bool {
    let product = &nodes[c];
    if !matches!(product.op, Op::Matmul) || product.operands.len() != 2 {
        return false;
    }
    let (lhs, rhs) = (product.operands[0].index(), product.operands[1].index());
    let (&[m, k], &[kb, n]) = (nodes[t].ty.shape.dims(), nodes[rhs].ty.shape.dims()) else {
        return false;
    };
    lhs == t && rhs != t && k == kb && crate::kernels::matmul::lhs_transpose_folds(m, k, n)
}
