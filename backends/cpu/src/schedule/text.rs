//! The text form of a draft after each phase and of a finished schedule, one fact per line:
//! what the file tests of the phases compare (`tests/schedule_files.rs`). Text only; no
//! decisions are made here.

use super::draft::Draft;
use super::{Phase, Schedule, Step, StepKind};
use std::fmt::Write;

/// `%3 %5 %6`, or `-` for none.
fn nodes(list: impl IntoIterator<Item = usize>) -> String {
    let names: Vec<String> = list.into_iter().map(|i| format!("%{i}")).collect();
    if names.is_empty() {
        return "-".into();
    }
    names.join(" ")
}

/// `s0 s4`, or `-` for none.
fn slots(list: &[usize]) -> String {
    if list.is_empty() {
        return "-".into();
    }
    list.iter()
        .map(|s| format!("s{s}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What `phase` decided.
pub(super) fn draft(draft: &Draft<'_>, phase: Phase) -> String {
    let mut out = String::new();
    let live: Vec<usize> = draft.live().collect();
    match phase {
        Phase::DeadCode => {
            let dead = (0..draft.needed.len()).filter(|&i| !draft.needed[i]);
            let _ = writeln!(out, "runs: {}", nodes(live.iter().copied()));
            let _ = writeln!(out, "dead: {}", nodes(dead));
        }
        Phase::Fusion => {
            for (g, group) in draft.groups.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "group {g} {:?}: {}",
                    group.shape.dims(),
                    nodes(group.members.iter().copied())
                );
            }
            let alone = live
                .iter()
                .copied()
                .filter(|&i| draft.group_of[i].is_none() && draft.nodes()[i].op.is_elementwise());
            let _ = writeln!(out, "elementwise, not fused: {}", nodes(alone));
        }
        Phase::Aliases => {
            for &i in &live {
                let node = &draft.nodes()[i];
                let how = if draft.virtual_broadcast[i] {
                    format!("virtual broadcast of %{}", node.operands[0].index())
                } else if draft.folded_transpose[i] {
                    "transpose folded into its products".to_string()
                } else {
                    match (draft.slot_of[i], draft.group_of[i]) {
                        (Some(s), _) if matches!(node.op, quabla_ir::Op::Reshape { .. }) => {
                            format!("s{s}, shared with %{}", node.operands[0].index())
                        }
                        (Some(s), _) => format!("s{s}"),
                        (None, Some(g)) => format!("in group {g}'s registers"),
                        (None, None) => "no storage".into(),
                    }
                };
                let _ = writeln!(out, "%{i}: {how}");
            }
        }
        Phase::Factorizations => {
            for &i in &live {
                if !draft.also[i].is_empty() {
                    let _ = writeln!(
                        out,
                        "%{i} also writes {}",
                        nodes(draft.also[i].iter().copied())
                    );
                }
            }
            for (id, users) in draft.shared_lu_users.iter().enumerate() {
                let _ = writeln!(out, "lu {id}: {}", nodes(users.iter().copied()));
            }
            if out.is_empty() {
                out.push_str("nothing shared\n");
            }
        }
        Phase::Siblings => {
            for &i in &live {
                if !draft.siblings[i].is_empty() {
                    let _ = writeln!(
                        out,
                        "%{i} runs {}",
                        nodes(draft.siblings[i].iter().copied())
                    );
                }
            }
            if out.is_empty() {
                out.push_str("no region calls\n");
            }
        }
        Phase::Steps | Phase::Liveness => {
            for (k, step) in draft.steps.iter().enumerate() {
                let _ = writeln!(out, "{}", step_line(k, step));
            }
        }
    }
    out
}

/// One step: what it runs, the slots it reads and writes, and how it splits over threads.
fn step_line(k: usize, step: &Step) -> String {
    let mut line = format!(
        "step {k}: {} reads {} writes {}",
        step.label(),
        slots(&step.reads()),
        slots(&step.writes())
    );
    match &step.kind {
        StepKind::Fused(p) => {
            if p.splits_when_threaded() {
                line.push_str(", split over threads");
            }
            if p.spread_input {
                line.push_str(", reads a split value");
            }
        }
        StepKind::Node(n) => {
            if n.lhs_transposed {
                line.push_str(", lhs read transposed");
            }
            if n.rows_split.iter().any(|&r| r) {
                line.push_str(", relays over split rows");
            }
            if let Some(lu) = n.lu {
                let _ = write!(
                    line,
                    ", lu {}{}",
                    lu.id,
                    if lu.last { " (last)" } else { "" }
                );
            }
        }
        StepKind::Region(_) => {}
    }
    line
}

/// The finished schedule: its steps with the slots each frees, its leaves and outputs.
pub(super) fn schedule(schedule: &Schedule) -> String {
    let mut out = String::new();
    for (k, step) in schedule.steps.iter().enumerate() {
        let _ = writeln!(out, "{}, frees {}", step_line(k, step), slots(&step.free));
    }
    let inputs: Vec<String> = schedule
        .input_slots
        .iter()
        .map(|s| s.map_or("unused".into(), |s| format!("s{s}")))
        .collect();
    let constants: Vec<usize> = schedule.constants.iter().map(|c| c.0).collect();
    let outputs: Vec<usize> = schedule.outputs.iter().map(|o| o.0).collect();
    let _ = writeln!(out, "inputs: {}", inputs.join(" "));
    let _ = writeln!(out, "constants: {}", slots(&constants));
    let _ = writeln!(out, "outputs: {}", slots(&outputs));
    let s = &schedule.stats;
    let _ = writeln!(
        out,
        "peak: {} buffers, {} bytes",
        s.peak_live_buffers, s.peak_live_bytes
    );
    out
}
