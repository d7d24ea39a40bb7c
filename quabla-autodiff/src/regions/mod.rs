//! Derivatives of control-flow regions (transforms.md §12–§13): the entry points the sweeps
//! call for a region group (the sibling nodes of one region call, rewritten once, at its first
//! node), dispatching on the region's kind.
//!
//! - **Forward mode** of every kind is a region of the same kind whose bodies are the JVPs of
//!   the original bodies (`cond.rs`, `scan.rs`, `while_loop.rs`).
//! - **Reverse mode** of `cond` is a `cond` of the branch VJPs (`cond.rs`). Reverse mode of a
//!   `scan` (and so of `fori_loop`) is built from scans only, with √T carry checkpointing
//!   (`scan.rs` for the pieces, `blocks.rs` for their layout). Reverse mode of a `while` with
//!   a trip bound (`max_trips`) follows the trips taken (`while_loop.rs`); without a bound
//!   the trip count has no limit to lay checkpoints out for: TF2.
//! - Every derived body is assembled with the one body builder of `body.rs`; every derived
//!   region records its [`quabla_ir::RegionForm`] and one more derivative level (`forms.rs`);
//!   forward-mode derivatives are shared within one outermost `jvp_graph` (`memo.rs`).
//!
//! Every derivative of a loop is a loop region whose bodies are derivatives of the original
//! bodies, so the rules apply to their own results and every order and mode composes. The
//! region rules never import the sweeps: bodies are differentiated through the handles of
//! `sweep.rs`, which carry the caller's options ([`crate::VjpOptions`]) to every depth.

mod blocks;
mod body;
mod cond;
mod forms;
mod memo;
mod scan;
mod while_loop;

pub use blocks::block_length;
pub(crate) use memo::JvpScope;

use crate::sweep::{Forward, Reverse};
use blocks::{Blocks, ScanTape};
use quabla_ir::{GraphBuilder, NodeId, Region, RegionKind, Result};
use scan::ScanVjp;
use std::sync::Arc;
use while_loop::{WhileParts, WhileTape};

/// Forward mode of one region group.
///
/// `x` are the (remapped) operands, `t` their tangents. Returns the primal and tangent node of
/// each output of the region, in output order.
pub(crate) fn jvp_region(
    b: &mut GraphBuilder,
    fwd: Forward,
    region: &Arc<Region>,
    x: &[NodeId],
    t: &[Option<NodeId>],
) -> Result<Vec<(NodeId, Option<NodeId>)>> {
    match region.kind() {
        RegionKind::Cond {
            then_branch,
            else_branch,
        } => cond::jvp(b, fwd, region, (then_branch, else_branch), x, t),
        RegionKind::Scan(s) => scan::jvp(b, fwd, region, s, x, t),
        RegionKind::While {
            n_carry,
            cond,
            body,
            max_trips,
        } => {
            let parts = WhileParts {
                n_carry: *n_carry,
                cond,
                body,
                max_trips: *max_trips,
            };
            while_loop::jvp(b, fwd, region, parts, x, t)
        }
    }
}

/// What the forward pass of a loop VJP keeps for its backward pass.
#[derive(Clone, Debug)]
pub(crate) enum LoopSave {
    Scan(ScanTape),
    While(WhileTape),
}

/// Reverse mode of one region group.
///
/// `x` are the (remapped) operands, `wrt` flags the operands that need cotangents, `cts` holds
/// the cotangent of each output (`None`: zero), `saved` what [`loop_forward`] kept of a loop's
/// forward pass (built here when absent). Returns one cotangent per operand.
pub(crate) fn vjp_region(
    b: &mut GraphBuilder,
    rev: Reverse,
    region: &Region,
    (x, wrt): (&[NodeId], &[bool]),
    cts: &[Option<NodeId>],
    saved: Option<LoopSave>,
) -> Result<Vec<Option<NodeId>>> {
    match region.kind() {
        RegionKind::Cond {
            then_branch,
            else_branch,
        } => cond::vjp(b, rev, region, (then_branch, else_branch), x, wrt, cts),
        RegionKind::While {
            max_trips: Some(_), ..
        } => {
            let saved = match saved {
                Some(LoopSave::While(tape)) => Some(tape),
                _ => None,
            };
            while_loop::backward(b, rev, region, (x, wrt), cts, saved)
        }
        RegionKind::While { .. } => Err(forms::tf2()),
        RegionKind::Scan(s) => {
            let vjp = ScanVjp::new(region, s, rev, x, wrt, cts)?;
            let blocks = Blocks::new(&vjp);
            let saved = match saved {
                Some(LoopSave::Scan(saved)) => saved,
                _ => blocks.forward(b)?.1,
            };
            blocks.backward(b, &saved)
        }
    }
}

/// The forward pass of a loop that reverse mode will differentiate: the region's outputs
/// computed by the loop forms its VJP starts from (the checkpointing block loops of a scan,
/// the counted loop of a bounded `while`) and what the backward pass keeps, so that the
/// primal values and the tape come from one forward evaluation. `None` for regions whose
/// reverse mode needs nothing of the kind (`cond`, an unbounded `while`): those keep their
/// primal node.
pub(crate) fn loop_forward(
    b: &mut GraphBuilder,
    rev: Reverse,
    region: &Region,
    x: &[NodeId],
) -> Result<Option<(Vec<NodeId>, LoopSave)>> {
    match region.kind() {
        RegionKind::While { .. } => {
            let forward = while_loop::forward(b, region, x)?;
            Ok(forward.map(|(outs, tape)| (outs, LoopSave::While(tape))))
        }
        RegionKind::Scan(s) => {
            let wrt = vec![false; x.len()];
            let cts = vec![None; region.output_types().len()];
            let fwd = ScanVjp::new(region, s, rev, x, &wrt, &cts)?;
            let (outs, tape) = Blocks::new(&fwd).forward(b)?;
            Ok(Some((outs, LoopSave::Scan(tape))))
        }
        RegionKind::Cond { .. } => Ok(None),
    }
}
