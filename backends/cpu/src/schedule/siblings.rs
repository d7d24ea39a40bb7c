//! Phase 5, region calls: the needed sibling nodes of one control-flow region call (same
//! region, same operands; one node per region output) run as one step, at the first of them,
//! which fills every sibling's slot. They share their operands, so all of them are available
//! there, and every consumer of a sibling comes after it. The region's bodies are compiled when
//! the steps are made, by the callback the scheduler is given ([`super::CompileRegion`]).

use super::draft::Draft;
use quabla_ir::region_groups;

/// Fills `siblings` and marks the later siblings `absorbed`.
pub(super) fn gather(draft: &mut Draft<'_>) {
    for (first, members) in region_groups(draft.graph) {
        let live: Vec<usize> = members.into_iter().filter(|&m| draft.needed[m]).collect();
        if live.first() == Some(&first) {
            for &m in &live[1..] {
                draft.absorbed[m] = true;
            }
            draft.siblings[first] = live;
        }
    }
}
