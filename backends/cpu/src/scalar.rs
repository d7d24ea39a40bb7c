//! Scalar loop bodies: a body whose every value has one element (a `fori_loop` over scalars, a
//! scalar Newton iteration, a counter-driven `while`) compiled into a flat program over an
//! array of float64 values, one per slot of its schedule.
//!
//! Such a body's schedule is nothing but one-element fused programs; here each program reads
//! its externals in place from the value array and its results are written back rounded to
//! their dtype (float32 through float32, bool as 0 or 1), which is exactly the value a buffer
//! of that dtype would hold and give back. An iteration is then a few float64 moves and the
//! programs' instructions: no buffers, no views, no pool.

use crate::kernels::elementwise::{Program, Scratch};
use crate::schedule::{Schedule, StepKind};
use quabla_ir::{DType, HostData, TensorType};

/// A body in scalar form.
#[derive(Clone, Debug)]
pub(crate) struct ScalarBody {
    nslots: usize,
    /// Constant slots and their values.
    constants: Vec<(usize, f64)>,
    /// The slot of each input (`None` when the body never reads it).
    pub inputs: Vec<Option<usize>>,
    /// The slot and dtype of each output.
    pub outputs: Vec<(usize, DType)>,
    /// The fused programs, reading their externals at slot positions, with the slot and dtype
    /// of each of their outputs.
    steps: Vec<Program>,
}

impl ScalarBody {
    /// The scalar form of a compiled body with the given output types, when every step is a
    /// one-element fused program and every output has one element.
    pub(crate) fn new(schedule: &Schedule, output_types: &[TensorType]) -> Option<ScalarBody> {
        if output_types.len() != schedule.outputs.len()
            || schedule
                .outputs
                .iter()
                .any(|(s, _)| schedule.slot_len.get(*s) != Some(&1))
        {
            return None;
        }
        let mut steps = Vec::with_capacity(schedule.steps.len());
        for step in &schedule.steps {
            let StepKind::Fused(program) = &step.kind else {
                return None;
            };
            if program.size != 1 {
                return None;
            }
            let at: Vec<usize> = program.exts.iter().map(|e| e.slot).collect();
            steps.push(program.with_externals_at(&at)?);
        }
        let constants = schedule
            .constants
            .iter()
            .map(|(s, data)| first(data).map(|v| (*s, v)))
            .collect::<Option<Vec<_>>>()?;
        Some(ScalarBody {
            nslots: schedule.nslots,
            constants,
            inputs: schedule.input_slots.clone(),
            outputs: schedule
                .outputs
                .iter()
                .zip(output_types)
                .map(|((s, _), t)| (*s, t.dtype))
                .collect(),
            steps,
        })
    }

    /// Length of the value array.
    pub(crate) fn nslots(&self) -> usize {
        self.nslots
    }

    /// Constant slots and their values.
    pub(crate) fn constants(&self) -> &[(usize, f64)] {
        &self.constants
    }

    /// The programs, in order.
    pub(crate) fn steps(&self) -> &[Program] {
        &self.steps
    }

    /// A value array with the constants in place.
    pub(crate) fn values(&self) -> Vec<f64> {
        let mut values = vec![0.0; self.nslots];
        for &(s, v) in &self.constants {
            values[s] = v;
        }
        values
    }

    /// Whether the body reads input `j`.
    pub(crate) fn reads(&self, j: usize) -> bool {
        matches!(self.inputs.get(j), Some(Some(_)))
    }

    /// Sets input `j` (when the body reads it).
    #[inline]
    pub(crate) fn set_input(&self, values: &mut [f64], j: usize, v: f64) {
        if let Some(Some(s)) = self.inputs.get(j) {
            values[*s] = v;
        }
    }

    /// Output `j` of the last run (0 when there is none, which a compiled body never lacks).
    #[inline]
    pub(crate) fn output(&self, values: &[f64], j: usize) -> f64 {
        self.outputs.get(j).map_or(0.0, |&(s, _)| values[s])
    }

    /// Runs every program, writing each result rounded to its dtype.
    #[inline]
    pub(crate) fn run(&self, values: &mut [f64], scratch: &mut Scratch) {
        for program in &self.steps {
            let (_, regs, results) = scratch.one_element(program);
            program.run_one(values, regs, results);
            for (&(s, dtype), &v) in program.outs.iter().zip(results.iter()) {
                values[s] = dtype.round(v);
            }
        }
    }
}

fn first(data: &HostData) -> Option<f64> {
    (!data.is_empty()).then(|| data.get_f64(0))
}
