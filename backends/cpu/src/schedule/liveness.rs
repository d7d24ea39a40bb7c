//! Phase 7, liveness, and the finished schedule: each slot a step writes is released after
//! the last step that reads it (plan outputs are kept), so its buffer returns to the pool and
//! is reused by later steps. Input and constant slots are never released by steps: whoever runs
//! the schedule binds them and takes them back, which lets a loop keep its constants bound
//! across iterations. The schedule is then checked by simulation and its figures counted.

use super::draft::Draft;
use super::{Schedule, ScheduleStats, Step, StepKind};
use quabla_backend::Result;
use quabla_ir::{HostData, Op};

/// Fills each step's `free` and makes the schedule.
pub(super) fn finish(draft: Draft<'_>) -> Result<Schedule> {
    let nodes = draft.nodes();
    let nslots = draft.slots;
    let mut keep = vec![false; nslots];
    let mut outputs = Vec::new();
    for &o in draft.graph.outputs() {
        let s = draft.slot(o.index())?;
        keep[s] = true;
        outputs.push((s, nodes[o.index()].ty.shape.clone()));
    }
    let mut steps = draft.steps;
    let mut last: Vec<Option<usize>> = vec![None; nslots];
    let mut produced_by: Vec<Option<usize>> = vec![None; nslots];
    for (k, step) in steps.iter().enumerate() {
        for s in step.reads() {
            last[s] = Some(k);
        }
        for s in step.writes() {
            produced_by[s] = Some(k);
        }
    }
    for s in 0..nslots {
        if keep[s] || produced_by[s].is_none() {
            continue;
        }
        if let Some(k) = last[s].or(produced_by[s]) {
            if !steps[k].free.contains(&s) {
                steps[k].free.push(s);
            }
        }
    }

    // Leaves.
    let mut input_slots = Vec::new();
    let mut constants = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        match &node.op {
            Op::Input { .. } => input_slots.push(draft.slot_of[i]),
            Op::Constant { data, .. } => {
                if let Some(s) = draft.slot_of[i] {
                    constants.push((s, data.clone()));
                }
            }
            _ => {}
        }
    }

    validate(&steps, nslots, &input_slots, &constants, &keep)?;
    let produced: Vec<bool> = produced_by.iter().map(Option::is_some).collect();
    let mut slot_len = vec![0usize; nslots];
    let mut slot_bytes = vec![0usize; nslots];
    let mut produced_bytes: usize = 0;
    for (i, node) in nodes.iter().enumerate() {
        if let Some(s) = draft.slot_of[i] {
            // A reshape shares its operand's slot (and element count): count a slot once.
            // Each term fits (a checked shape); their sum saturates, since many large values
            // of a traced graph may together exceed any address space.
            let bytes = node.ty.shape.nbytes(node.ty.dtype);
            if slot_len[s] == 0 && produced[s] {
                produced_bytes = produced_bytes.saturating_add(bytes);
            }
            slot_len[s] = node.ty.shape.size();
            slot_bytes[s] = bytes;
        }
    }
    let mut result_slots: Vec<usize> = Vec::new();
    for (s, _) in &outputs {
        if produced[*s] && !result_slots.contains(s) {
            result_slots.push(*s);
        }
    }
    let stats = stats(&draft.shared_lu_users, &steps, &slot_bytes, &produced);
    Ok(Schedule {
        steps,
        nslots,
        input_slots,
        constants,
        outputs,
        output_slot: keep,
        produced,
        result_slots,
        produced_bytes,
        lu_shares: draft.shared_lu_users.len(),
        slot_len,
        stats,
    })
}

/// The figures of the finished steps.
fn stats(
    shared_lu_users: &[Vec<usize>],
    steps: &[Step],
    slot_bytes: &[usize],
    produced: &[bool],
) -> ScheduleStats {
    let mut stats = ScheduleStats {
        steps: steps.len(),
        shared_factorizations: shared_lu_users.iter().map(|u| u.len() - 1).sum(),
        ..ScheduleStats::default()
    };
    let mut live = 0usize;
    let mut live_bytes = 0usize;
    for step in steps {
        let writes = step.writes();
        stats.buffers += writes.len();
        live += writes.len();
        live_bytes = writes
            .iter()
            .fold(live_bytes, |b, &s| b.saturating_add(slot_bytes[s]));
        stats.peak_live_buffers = stats.peak_live_buffers.max(live);
        stats.peak_live_bytes = stats.peak_live_bytes.max(live_bytes);
        for &s in step.free.iter().filter(|&&s| produced[s]) {
            live -= 1;
            live_bytes = live_bytes.saturating_sub(slot_bytes[s]);
        }
        if let StepKind::Fused(p) = &step.kind {
            stats.split_groups += usize::from(p.splits_when_threaded());
            if p.nodes > 1 {
                stats.fused_groups += 1;
                stats.fused_nodes += p.nodes;
            }
        }
    }
    stats
}

/// Checks the schedule by simulation: every step reads only slots that hold a value, writes
/// only empty slots, and every output is present at the end.
fn validate(
    steps: &[Step],
    nslots: usize,
    input_slots: &[Option<usize>],
    constants: &[(usize, HostData)],
    keep: &[bool],
) -> Result<()> {
    let mut present = vec![false; nslots];
    for &s in input_slots.iter().flatten() {
        present[s] = true;
    }
    for (s, _) in constants {
        present[*s] = true;
    }
    for (k, step) in steps.iter().enumerate() {
        if let Some(s) = step.reads().into_iter().find(|&s| !present[s]) {
            return Err(crate::kernels::internal(format!(
                "step {k} reads slot {s} before it is written"
            )));
        }
        for s in step.writes() {
            if present[s] {
                return Err(crate::kernels::internal(format!(
                    "step {k} overwrites slot {s}"
                )));
            }
            present[s] = true;
        }
        for &s in &step.free {
            present[s] = false;
        }
    }
    match (0..nslots).find(|&s| keep[s] && !present[s]) {
        Some(s) => Err(crate::kernels::internal(format!(
            "output slot {s} is not computed"
        ))),
        None => Ok(()),
    }
}
