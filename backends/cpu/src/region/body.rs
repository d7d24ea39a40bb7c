//! A compiled region body: its schedule, which outputs a driver may move out, its scalar
//! form, and its translated form for machine code, built on first use.

use super::*;

/// A compiled body, per output whether collecting it moves it out of its slot, and its
/// scalar form when it has one.
#[derive(Clone, Debug)]
pub(super) struct Body {
    pub(super) schedule: Schedule,
    pub(super) take: Vec<bool>,
    pub(super) scalar: Option<ScalarBody>,
    /// For a body without a scalar form (when machine code is on): its plan graph, from which
    /// the graph form of `native` is built when a loop's code is first needed.
    pub(super) graph: Option<GraphSource>,
}

impl GraphSource {
    /// The translated form of the body whose schedule is `schedule`, built on first use, or
    /// why there is none.
    pub(super) fn form(&self, schedule: &Schedule) -> &std::result::Result<GraphBody, String> {
        self.form.get_or_init(|| {
            let mut body = GraphBody::new(&self.graph, self.inputs)?;
            if self.weigh {
                let mut own_code = OwnCode::new();
                let interpreted = cost::interpreted(schedule, &body, &mut own_code);
                body.weigh(interpreted, own_code)?;
            }
            Ok(body)
        })
    }
}

/// A body's plan graph and, once built, its translated form (`None` inside when it has none).
#[derive(Clone, Debug)]
pub(super) struct GraphSource {
    pub(super) graph: Graph,
    pub(super) inputs: usize,
    /// Whether the machine code is weighed against the interpreter (`GraphBody::pays_off`)
    /// or taken unweighed.
    pub(super) weigh: bool,
    pub(super) form: OnceLock<std::result::Result<GraphBody, String>>,
}

impl Body {
    /// Compiles `graph` restricted to the outputs `outputs` (indices into its outputs), of
    /// which the first `collected` are moved or copied out after a run and the rest only read.
    /// `rebound[j]`: input `j` is bound afresh before every run, so an output that is that
    /// input may be moved out.
    pub(super) fn compile(
        graph: &Graph,
        outputs: &[usize],
        collected: usize,
        rebound: &[bool],
        build: Build,
    ) -> Result<Body> {
        let selected = outputs
            .iter()
            .map(|&o| {
                graph
                    .outputs()
                    .get(o)
                    .copied()
                    .ok_or_else(|| internal(format!("a region body has no output {o}")))
            })
            .collect::<Result<Vec<NodeId>>>()?;
        let plan = if selected == graph.outputs() {
            Plan::compile(graph)
        } else {
            let pruned = Graph::from_parts(graph.nodes().to_vec(), selected)
                .map_err(|e| internal(format!("a region body: {e}")))?;
            Plan::compile(&pruned)
        };
        let schedule = compile_schedule(plan.graph(), build)?;
        let take = take_plan(&schedule, collected, rebound);
        let output_types: Vec<TensorType> = plan.output_types().into_iter().cloned().collect();
        // The scalar form runs no steps, so it has no non-finite check. It holds every value
        // as a float64, so a body with an integer value has none (int64 is not exact there):
        // its machine code is made from the graph form, which holds integers as int64.
        let scalar = if build.check_nans || quabla_ir::eval::has_integers(plan.graph()) {
            None
        } else {
            ScalarBody::new(&schedule, &output_types)
        };
        let graph_form = match (
            build.native && build.precision == Precision::Reference,
            &scalar,
        ) {
            (true, None) => Some(GraphSource {
                graph: plan.graph().clone(),
                inputs: graph.inputs().count(),
                weigh: !build.native_always,
                form: OnceLock::new(),
            }),
            _ => None,
        };
        Ok(Body {
            schedule,
            take,
            scalar,
            graph: graph_form,
        })
    }

    /// Whether machine code may be made from the body (it is then built on first use).
    pub(super) fn may_translate(&self) -> bool {
        self.scalar.is_some() || self.graph.is_some()
    }

    /// The form of the body the machine code of a loop is made from, if any (the graph form
    /// is built here, on first use).
    pub(super) fn translatable(&self) -> Option<LoopBody<'_>> {
        match (&self.scalar, &self.graph) {
            (Some(scalar), _) => Some(LoopBody::Scalar(scalar)),
            (None, Some(source)) => source
                .form(&self.schedule)
                .as_ref()
                .ok()
                .map(LoopBody::Graph),
            (None, None) => None,
        }
    }

    /// Why the loop's machine code was not made from this body, when the body was weighed
    /// for it (for the report).
    pub(super) fn why_interpreted(&self) -> Option<&str> {
        match (&self.scalar, &self.graph) {
            (None, Some(source)) => source
                .form(&self.schedule)
                .as_ref()
                .err()
                .map(String::as_str),
            _ => None,
        }
    }

    /// How the interpreter runs the body in a loop (see the module documentation).
    pub(super) fn form(&self, swapping: bool) -> &'static str {
        if self.scalar.is_some() {
            "interpreted, scalar form"
        } else if swapping {
            "interpreted, swapping form"
        } else {
            "interpreted, moving form"
        }
    }

    /// Whether the body is small enough to keep all its buffers between iterations.
    pub(super) fn reusable(&self) -> bool {
        self.schedule.produced_bytes <= REUSE_BYTES
    }

    /// The swapping form of a loop body whose carry `j` is input `first_carry + j` and output
    /// `j`: available when the body is small and every carry is replaced by a result of its own
    /// (not an input, a constant, or a result that replaces another carry too).
    pub(super) fn swaps(&self, first_carry: usize, n_carry: usize) -> Option<Vec<Swap>> {
        if !self.reusable() {
            return None;
        }
        let sched = &self.schedule;
        let mut swaps: Vec<Swap> = Vec::with_capacity(n_carry);
        for j in 0..n_carry {
            let result = sched.outputs.get(j)?.0;
            if !sched.produced[result] || swaps.iter().any(|s| s.result == result) {
                return None;
            }
            let input = sched.input_slots.get(first_carry + j).copied().flatten();
            swaps.push(Swap { input, result });
        }
        Some(swaps)
    }

    /// How the body runs: keeping its buffers when it is small.
    pub(super) fn mode(&self) -> Mode {
        if self.reusable() {
            Mode::Reuse
        } else {
            Mode::Body
        }
    }
}

/// An interpreted form for the report, with the first reason a body gave for not running
/// machine code: ``interpreted, swapping form (`cumsum`, which machine code does not cover)``.
pub(super) fn interpreted<'a>(
    form: &str,
    reasons: impl IntoIterator<Item = Option<&'a str>>,
) -> String {
    match reasons.into_iter().flatten().next() {
        Some(why) => format!("{form} ({why})"),
        None => form.to_string(),
    }
}

/// Which of the first `collected` outputs of a body a driver may move out of their slots
/// after a run, collecting them in order (the other outputs are read before): an output held
/// by a step-produced slot or by an input that is rebound before every run, and only at the
/// last collected output of that slot (earlier ones take a second handle first). Constants and
/// inputs bound once per region execution stay in place.
pub(super) fn take_plan(schedule: &Schedule, collected: usize, rebound: &[bool]) -> Vec<bool> {
    let movable = |s: usize| {
        schedule.produced[s]
            || schedule
                .input_slots
                .iter()
                .zip(rebound)
                .any(|(slot, &r)| r && *slot == Some(s))
    };
    let outs = &schedule.outputs[..collected.min(schedule.outputs.len())];
    (0..outs.len())
        .map(|j| {
            let s = outs[j].0;
            movable(s) && outs[j + 1..].iter().all(|o| o.0 != s)
        })
        .collect()
}
