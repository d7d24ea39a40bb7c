//! What passes between the two sweeps (`jvp.rs`, `vjp.rs`) and the rules of ops that hold
//! graphs of their own (control-flow regions, `custom` rules): the seeds and options of a
//! reverse sweep, and the handles through which such a rule differentiates its graphs.
//!
//! A region's derivative is built from derivatives of its bodies, so the sweeps and those
//! rules call each other. The rules receive the sweep as a handle ([`Forward`], [`Reverse`])
//! instead of importing it, which keeps the modules of the crate free of import cycles and
//! carries the caller's options down to every body at every depth. This module holds no
//! derivative rule and imports no other module of the crate.

use quabla_ir::{Graph, Result};

/// Where the cotangent of one output comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seed {
    /// The output is not differentiated (an auxiliary output, or a bool output).
    None,
    /// A cotangent input named `cotangent{k}` (for `vjp`).
    Input,
    /// A cotangent of ones (for `grad` of a scalar).
    Ones,
}

/// What the reverse mode of a loop keeps of its forward pass for the backward pass
/// (transforms.md §13, docs/loops.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LoopTape {
    /// Checkpoints: a `scan` or `fori_loop` of `T` iterations stores the carry at
    /// `ceil(sqrt(T))` block boundaries and recomputes each block once; a bounded `while`
    /// stores a few nested levels of slots. Memory grows like the square root of the trips.
    #[default]
    Checkpointed,
    /// The carry entering every iteration (one block of `T` iterations; one level of
    /// `max_trips` slots for a bounded `while`): no recomputation, memory for every trip.
    /// The gradient has the same bits as with checkpoints.
    Full,
}

/// The options of the reverse-mode builder ([`crate::vjp_graph_with`]). They apply to the
/// whole derivative: every loop, however deeply nested, and every rule graph differentiated
/// on the way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VjpOptions {
    pub loop_tape: LoopTape,
}

/// The forward sweep, as a rule of an op with graphs of its own uses it: the JVP of a whole
/// graph (see [`crate::jvp_graph`]).
#[derive(Clone, Copy)]
pub(crate) struct Forward {
    sweep: fn(&Graph, &[bool]) -> Result<Graph>,
}

impl Forward {
    pub(crate) const fn new(sweep: fn(&Graph, &[bool]) -> Result<Graph>) -> Forward {
        Forward { sweep }
    }

    /// The JVP of `g` with respect to the inputs flagged in `wrt`.
    pub(crate) fn jvp(&self, g: &Graph, wrt: &[bool]) -> Result<Graph> {
        (self.sweep)(g, wrt)
    }
}

/// The signature of the reverse sweep under options.
pub(crate) type ReverseSweep = fn(&Graph, &[bool], &[Seed], VjpOptions) -> Result<Graph>;

/// The reverse sweep, as a rule of an op with graphs of its own uses it: the VJP of a whole
/// graph (see [`crate::vjp_graph_with`]) under the options of the derivative being built.
#[derive(Clone, Copy)]
pub(crate) struct Reverse {
    sweep: ReverseSweep,
    options: VjpOptions,
}

impl Reverse {
    pub(crate) const fn new(sweep: ReverseSweep, options: VjpOptions) -> Reverse {
        Reverse { sweep, options }
    }

    /// The VJP of `g` with respect to the inputs flagged in `wrt`, seeded by `seeds`.
    pub(crate) fn vjp(&self, g: &Graph, wrt: &[bool], seeds: &[Seed]) -> Result<Graph> {
        (self.sweep)(g, wrt, seeds, self.options)
    }

    pub(crate) fn loop_tape(&self) -> LoopTape {
        self.options.loop_tape
    }
}
