//! Phase 4, shared factorizations: `linalg` nodes of one decomposition (`svd_u`, `svd_s`,
//! `svd_vh`, ...) on the same operand run as one step, at the first, that factorizes once.
//! Steps that use the LU factors of one matrix (every `solve` with it as the matrix, either way
//! round, and its `slogdet`) share them: the first factors it, the last drops the factors (a
//! gradient of `slogdet` or of `solve` factors once, not twice). The factors are those each
//! step would compute alone, so sharing never changes a bit.

use super::draft::Draft;
use super::LuShare;
use crate::kernels::linalg::Family;
use quabla_ir::Op;
use std::collections::HashMap;

/// Fills `absorbed` and `also` for decompositions, `lu_share` and `shared_lu_users`.
pub(super) fn share(draft: &mut Draft<'_>) {
    let nodes = draft.nodes();
    let mut first_of: HashMap<(usize, Family), usize> = HashMap::new();
    for i in draft.live().collect::<Vec<_>>() {
        if let Op::Linalg(kind) = nodes[i].op {
            let key = (nodes[i].operands[0].index(), Family::of(kind));
            match first_of.get(&key) {
                Some(&f) => {
                    draft.absorbed[i] = true;
                    draft.also[f].push(i);
                }
                None => {
                    first_of.insert(key, i);
                }
            }
        }
    }
    // `first_of` holds one `slogdet` step per operand, so a matrix contributes each of its
    // steps once.
    let lu_user = |i: usize| -> bool {
        matches!(nodes[i].op, Op::Solve { .. })
            || matches!(nodes[i].op, Op::Linalg(k) if Family::of(k) == Family::Slogdet)
    };
    let mut lu_users: HashMap<usize, Vec<usize>> = HashMap::new();
    for i in draft.live().filter(|&i| !draft.absorbed[i] && lu_user(i)) {
        lu_users
            .entry(nodes[i].operands[0].index())
            .or_default()
            .push(i);
    }
    let mut shared: Vec<Vec<usize>> = lu_users
        .into_values()
        .filter(|users| users.len() > 1)
        .collect();
    shared.sort_unstable();
    for (id, users) in shared.iter().enumerate() {
        for (k, &i) in users.iter().enumerate() {
            draft.lu_share[i] = Some(LuShare {
                id,
                last: k + 1 == users.len(),
            });
        }
    }
    draft.shared_lu_users = shared;
}
