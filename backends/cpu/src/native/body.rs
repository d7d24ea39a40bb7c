//! What the code is made from: a body graph translated node by node ([`GraphBody`]), the
//! regions nested in it ([`Nested`]), the limits on both, and the cost model that weighs the
//! code against the interpreter ([`GraphBody::pays_off`]). Nothing here emits code.

use super::*;

/// The most elements of a value of a [`GraphBody`]: the code makes one pass over a value's
/// elements per node, one element at a time, where the interpreter's kernels run fused groups
/// of nodes in vector lanes on both cores; past this size they are faster
/// (`docs/performance.md`, the loop-state sweep).
pub const NATIVE_ELEMENTS: usize = 1 << 16;

/// A body translated from its plan graph, node by node: every value has at most
/// [`NATIVE_ELEMENTS`] elements and every op is one this module translates (elementwise
/// arithmetic with broadcasting, reductions, reshapes, broadcasts, transposes, slices,
/// concatenations, gathers, `index_gather` and `index_scatter` with traced indices, float64
/// `matmul`, `solve`), on values of every dtype. Each node computes exactly what
/// `quabla_ir::eval::evaluate` computes for it: the float64 op per element, rounded to the
/// node's dtype, sums in the blocked order of numerics.md §1.5, integer nodes in wrapping
/// int64 arithmetic wrapped to their dtype (`integers.rs`); the element moves of the
/// layout ops are taken from `evaluate` itself, run on element numbers; `matmul` and `solve`
/// call the CPU kernels' functions. Values of at most [`REGISTER_ELEMENTS`] elements are
/// machine values, larger ones arrays in memory (`memory.rs`). Control-flow regions inside
/// such a body are translated too, a `cond` as a branch and loops bounded by at most
/// [`NESTED_TRIPS`] trips as loops, when their carries and results fit in registers.
#[derive(Clone, Debug)]
pub(crate) struct GraphBody {
    pub(super) graph: Graph,
    /// The translated form of each region the graph calls, by the region's address.
    pub(super) nested: HashMap<usize, Arc<Nested>>,
    /// The elements of the values held in memory that the code makes a pass over.
    pub(super) memory_elements: usize,
    /// The loops nested in the body that the interpreter would run as machine code of their
    /// own, with their element passes, and the margin by which the body's code paid off
    /// (both found when it is weighed, [`GraphBody::weigh`]; empty and 0 when it is not).
    pub(super) own_code: OwnCode,
    pub(super) margin: usize,
}

/// The loops nested in a body (at any depth, by address) that the interpreter would run as
/// machine code of their own were the loops around them interpreted, each with the element
/// passes in memory it makes in one run of the body (its trips and those of the scans around
/// it counted). Inlined into the body's code, such a loop's trips run with the body's register
/// allocator: past [`BACKTRACKING_INSTRUCTIONS`](super::code::BACKTRACKING_INSTRUCTIONS)
/// instructions the single-pass one, whose element passes are dearer
/// ([`SPILLED_PASSES`](super::code::SPILLED_PASSES)). `Code::build` weighs that, for the loops
/// whose own code would stay under the limit, against the margin by which the body's code paid
/// off, and leaves the body to the interpreter (and those loops to their own code) when it
/// loses: the gradient of a Lotka–Volterra fit with 200 save times took 9.0 ms with its
/// reverse pass as one function of 5,677 instructions, 7.0 ms with the inner loops as
/// functions of their own.
pub(crate) type OwnCode = HashMap<usize, usize>;

/// The element operations in memory that cost the machine code as much as one step costs
/// the interpreter, measured with the loop-state sweep of `cargo xtask bench --scaling`
/// (`docs/performance.md`): an interpreted step costs about 150 ns over its kernel's work,
/// and the machine code's pass over an element in memory about 0.65 ns more than the fused
/// kernel's. A step of a region nested in the body counts as much as a step of the body
/// itself ([`Interpreted`]).
pub(super) const STEP_ELEMENTS: usize = 230;

/// What one run of a loop body costs the interpreter, against which its machine code is
/// weighed ([`GraphBody::pays_off`]). A region nested in the body costs what the interpreter
/// would spend on it: a `cond` the steps of its costlier branch; a loop its own machine code,
/// where that pays off on its own (the enclosing body's code then does the same element
/// passes, so they weigh on neither side), else its bodies' costs once per trip of a scan
/// and once for a while loop, whose trips are not known before it runs (the count of
/// [`Nested::memory_elements`], so both sides count the same work).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Interpreted {
    /// The steps the interpreter dispatches: the body's own and those of the regions nested
    /// in it that it interprets.
    pub steps: usize,
    /// The element passes in memory of the loops nested in the body that run as their own
    /// machine code.
    pub native_elements: usize,
}

impl Interpreted {
    /// The cost of `steps` steps.
    pub(crate) fn steps(steps: usize) -> Interpreted {
        Interpreted {
            steps,
            native_elements: 0,
        }
    }

    /// The cost in element passes in memory of the machine code (the unit of
    /// [`GraphBody::pays_off`]).
    fn elements(self) -> usize {
        self.steps
            .saturating_mul(STEP_ELEMENTS)
            .saturating_add(self.native_elements)
    }

    /// Both costs, one after the other.
    pub(crate) fn plus(self, other: Interpreted) -> Interpreted {
        Interpreted {
            steps: self.steps.saturating_add(other.steps),
            native_elements: self.native_elements.saturating_add(other.native_elements),
        }
    }

    /// The cost of `trips` runs.
    pub(crate) fn times(self, trips: usize) -> Interpreted {
        Interpreted {
            steps: self.steps.saturating_mul(trips),
            native_elements: self.native_elements.saturating_mul(trips),
        }
    }

    /// The costlier of the two (a `cond`'s branches: either may run).
    pub(crate) fn costlier(self, other: Interpreted) -> Interpreted {
        if other.elements() > self.elements() {
            other
        } else {
            self
        }
    }
}

/// The multiply-adds of a `matmul` that weigh as one element pass in [`STEP_ELEMENTS`]'s
/// balance.
pub(super) const MATMUL_WEIGHT: usize = 8;

/// The most trips of a loop nested in a loop body: the code of a body runs between two
/// cancellation checks, so a nested loop must end soon.
pub(super) const NESTED_TRIPS: usize = 4096;

/// The most regions nested in one another inside one function. Every variable that a nested
/// loop reads or writes is threaded through each enclosing loop's header, so the code
/// generator's time grows with the depth times the code: reverse-mode derivatives of loops
/// nested 40 deep spent 0.1 s in that alone. A body with deeper regions gets no machine code;
/// its inner loops get their own when they run.
pub(super) const NESTED_DEPTH: usize = 8;

/// A region inside a graph body, with its bodies translated.
#[derive(Debug)]
pub(super) enum Nested {
    Cond {
        then_branch: GraphBody,
        else_branch: GraphBody,
        /// Dtype and elements of each output.
        outputs: Vec<(DType, usize)>,
    },
    Scan {
        body: GraphBody,
        length: usize,
        start: usize,
        reverse: bool,
        n_carry: usize,
        n_const: usize,
        index: DType,
        /// Dtype and elements of one slice of each stacked output.
        ys: Vec<(DType, usize)>,
    },
    While {
        cond: GraphBody,
        body: GraphBody,
        n_carry: usize,
        max_trips: usize,
    },
}

impl Nested {
    /// The elements in memory its bodies make passes over in one run (a scan's once per trip;
    /// a while loop's trips are not known before it runs, and count once).
    pub(super) fn memory_elements(&self) -> usize {
        match self {
            Nested::Cond {
                then_branch,
                else_branch,
                ..
            } => then_branch.memory_elements.max(else_branch.memory_elements),
            Nested::Scan { body, length, .. } => body.memory_elements.saturating_mul(*length),
            Nested::While { cond, body, .. } => {
                cond.memory_elements.saturating_add(body.memory_elements)
            }
        }
    }

    /// The translated form of `region`, when its bodies translate and its loops have a bound of
    /// at most [`NESTED_TRIPS`] trips.
    pub(super) fn new(region: &Region, depth: usize) -> Result<Nested, String> {
        if depth > NESTED_DEPTH {
            return Err(format!("regions nested more than {NESTED_DEPTH} deep"));
        }

        let small = |graph: &Graph| {
            let plan = Plan::compile(graph);
            GraphBody::at_depth(plan.graph(), graph.inputs().count(), depth)
        };
        Ok(match region.kind() {
            RegionKind::Cond {
                then_branch,
                else_branch,
            } => Nested::Cond {
                then_branch: small(then_branch)?,
                else_branch: small(else_branch)?,
                outputs: region
                    .output_types()
                    .iter()
                    .map(|t| (t.dtype, t.shape.size()))
                    .collect(),
            },
            RegionKind::Scan(s) if s.length <= NESTED_TRIPS => Nested::Scan {
                body: small(&s.body)?,
                length: s.length,
                start: s.start,
                reverse: s.reverse,
                n_carry: s.n_carry,
                n_const: s.n_const,
                index: s.index_dtype(),
                ys: region.output_types()[s.n_carry..]
                    .iter()
                    .map(|t| (t.dtype, t.shape.dims().iter().skip(1).product()))
                    .collect(),
            },
            RegionKind::While {
                n_carry,
                cond,
                body,
                max_trips: Some(max_trips),
            } if *max_trips <= NESTED_TRIPS => Nested::While {
                cond: small(cond)?,
                body: small(body)?,
                n_carry: *n_carry,
                max_trips: *max_trips,
            },
            RegionKind::While {
                max_trips: None, ..
            } => return Err("a nested while loop without a bound".into()),
            _ => return Err(format!("a nested loop of more than {NESTED_TRIPS} trips")),
        })
    }
}

impl GraphBody {
    /// The translated form of a body graph with `inputs` inputs, or why it has none.
    pub(crate) fn new(graph: &Graph, inputs: usize) -> Result<GraphBody, String> {
        GraphBody::at_depth(graph, inputs, 0)
    }

    /// Whether the machine code pays off against an interpreter that runs the body at the
    /// cost `interpreted`: it saves every step's dispatch, the steps of the regions nested in
    /// the body included, and loses, per element of a value held in memory, to the
    /// interpreter's fused kernels (vector lanes, both cores); `Err` says why the interpreter
    /// is chosen.
    pub(crate) fn pays_off(&self, interpreted: Interpreted) -> Result<(), String> {
        if self.memory_elements <= interpreted.elements() {
            return Ok(());
        }
        let steps = interpreted.steps;
        let mut why = format!(
            "its kernels are faster on {} elements per iteration in {steps} steps",
            self.memory_elements
        );
        if interpreted.native_elements > 0 {
            why += &format!(
                " and {} in the machine code of nested loops",
                interpreted.native_elements
            );
        }
        Err(why)
    }

    /// Weighs the body's machine code against an interpreter that runs the body at the cost
    /// `interpreted` ([`GraphBody::pays_off`]), keeping the loops nested in it that the
    /// interpreter would run as code of their own and the margin for `Code::build`.
    pub(crate) fn weigh(
        &mut self,
        interpreted: Interpreted,
        own_code: OwnCode,
    ) -> Result<(), String> {
        self.pays_off(interpreted)?;
        self.own_code = own_code;
        self.margin = interpreted.elements() - self.memory_elements;
        Ok(())
    }

    /// What the interpreter spends on a loop whose bodies are `bodies`, each translated and
    /// with what it costs interpreted, and whether it runs the loop as machine code of its
    /// own: it does where the code pays off for every body, and then spends the code's
    /// element passes, else the bodies' steps.
    pub(crate) fn loop_cost(bodies: &[(&GraphBody, Interpreted)]) -> (Interpreted, bool) {
        if bodies
            .iter()
            .all(|(body, cost)| body.pays_off(*cost).is_ok())
        {
            let native_elements = bodies.iter().fold(0usize, |sum, (body, _)| {
                sum.saturating_add(body.memory_elements)
            });
            (
                Interpreted {
                    steps: 0,
                    native_elements,
                },
                true,
            )
        } else {
            let steps = bodies
                .iter()
                .fold(Interpreted::default(), |sum, (_, cost)| sum.plus(*cost));
            (steps, false)
        }
    }

    /// The translated bodies of the region nested in this body at address `region` (the
    /// region's identity while the graph holds it): a `cond`'s then and else branches, a
    /// scan's body, a while loop's predicate and body.
    pub(crate) fn nested_bodies(&self, region: usize) -> Option<Vec<&GraphBody>> {
        Some(match &**self.nested.get(&region)? {
            Nested::Cond {
                then_branch,
                else_branch,
                ..
            } => vec![then_branch, else_branch],
            Nested::Scan { body, .. } => vec![body],
            Nested::While { cond, body, .. } => vec![cond, body],
        })
    }

    /// [`GraphBody::new`] for a body nested in `depth` regions of the function being built.
    pub(super) fn at_depth(
        graph: &Graph,
        inputs: usize,
        depth: usize,
    ) -> Result<GraphBody, String> {
        if graph.inputs().count() != inputs {
            return Err("a body whose inputs do not match".into());
        }
        let mut nested = HashMap::new();
        let mut memory_elements = 0usize;
        for node in graph.nodes() {
            let size = node.ty.shape.size();
            if let Op::Region(call) = &node.op {
                let key = Arc::as_ptr(&call.region) as usize;
                if let std::collections::hash_map::Entry::Vacant(slot) = nested.entry(key) {
                    let region = Nested::new(&call.region, depth + 1)?;
                    // A nested region's work counts once per call (its sibling output nodes
                    // share one run), a scan's once per trip.
                    memory_elements = memory_elements.saturating_add(region.memory_elements());
                    slot.insert(Arc::new(region));
                }
                if size > NATIVE_ELEMENTS {
                    return Err(format!("a value of more than {NATIVE_ELEMENTS} elements"));
                }
                continue;
            }
            let translated = match &node.op {
                Op::Input { .. }
                | Op::Constant { .. }
                | Op::Reshape { .. }
                | Op::Broadcast { .. }
                | Op::Transpose { .. }
                | Op::Concat { .. }
                | Op::Slice { .. }
                | Op::PadSlice { .. }
                | Op::Gather { .. }
                | Op::IndexGather { .. }
                | Op::IndexScatter { .. }
                | Op::Reduce { .. } => true,
                Op::Solve { .. } => solve_geometry(graph, node).is_some(),
                // The kernel's float64 product; a float32 one may run in float32 lanes
                // (numerics.md §1.5, `precision="float32"`), which this code does not model.
                Op::Matmul => {
                    node.ty.dtype == DType::F64
                        && node.operands.iter().all(|&o| {
                            let t = &graph.node(o).ty;
                            t.dtype == DType::F64 && t.shape.rank() >= 2
                        })
                }
                op => EwOp::from_op(op).is_some(),
            };
            if !translated {
                return Err(format!(
                    "`{}`, which machine code does not cover",
                    node.op.name()
                ));
            }
            if size > NATIVE_ELEMENTS {
                return Err(format!("a value of more than {NATIVE_ELEMENTS} elements"));
            }
            // Inputs, constants and reshapes of arrays in memory cost no pass over elements.
            let pass = !matches!(
                node.op,
                Op::Input { .. } | Op::Constant { .. } | Op::Reshape { .. }
            );
            if pass && size > REGISTER_ELEMENTS {
                memory_elements += size;
            }
            // A product runs on one core here, where the interpreter splits a large one over
            // both: its multiply-adds weigh against the machine code.
            if let (Op::Matmul, Some(&a)) = (&node.op, node.operands.first()) {
                let k = graph.node(a).ty.shape.dims().last().copied().unwrap_or(1);
                memory_elements =
                    memory_elements.saturating_add(size.saturating_mul(k) / MATMUL_WEIGHT);
            }
        }
        Ok(GraphBody {
            graph: graph.clone(),
            nested,
            memory_elements,
            own_code: OwnCode::new(),
            margin: 0,
        })
    }
}

/// For each element of a layout op's result, the operand and element it is (`None`: a zero
/// of `pad_slice`), found by evaluating the op on element numbers.
pub(super) fn element_sources(
    op: &Op,
    operands: &[&Shape],
    out: &Shape,
) -> Option<Vec<Option<(usize, usize)>>> {
    let mut starts = Vec::with_capacity(operands.len());
    let mut numbered = Vec::with_capacity(operands.len());
    let mut next = 1usize;
    for shape in operands {
        starts.push(next);
        let n = shape.size();
        // Numbers from 1, so that the zeros `pad_slice` fills in stand out.
        numbered.push(HostData::F64((next..next + n).map(|i| i as f64).collect()));
        next += n;
    }
    let values: Vec<HostValue<'_>> = numbered
        .iter()
        .zip(operands)
        .map(|(data, shape)| HostValue { data, shape })
        .collect();
    let result = evaluate(op, &values, &TensorType::new(DType::F64, out.clone()))?;
    (0..result.len())
        .map(|i| {
            let v = result.get_f64(i);
            if v == 0.0 {
                return Some(None);
            }
            let number = v as usize;
            let k = starts.iter().rposition(|&s| s <= number)?;
            Some(Some((k, number - starts[k])))
        })
        .collect()
}

/// For each element of the result of a reduction of `shape` over `axes`, the operand's
/// elements it reduces, in row-major order (the grouping of `quabla_ir::eval`).
pub(super) fn reduced_groups(
    shape: &Shape,
    axes: &[usize],
    out_size: usize,
) -> Option<Vec<Vec<usize>>> {
    let (count, positions) = kept_positions(shape, axes);
    if count != out_size {
        return None;
    }
    let mut groups = vec![Vec::new(); count];
    for (flat, position) in positions.enumerate() {
        groups.get_mut(position)?.push(flat);
    }
    Some(groups)
}

/// The batch, unknowns and right-hand sides of a `solve` node whose matrix is `[..., n, n]` and
/// right-hand side `[..., n, k]` with the same batch extents (what the code generator takes).
pub(super) fn solve_geometry(
    graph: &Graph,
    node: &quabla_ir::Node,
) -> Option<(usize, usize, usize)> {
    let a = graph.node(*node.operands.first()?).ty.shape.dims();
    let b = graph.node(*node.operands.get(1)?).ty.shape.dims();
    let (ra, rb) = (a.len(), b.len());
    if ra < 2
        || ra != rb
        || a[..ra - 2] != b[..rb - 2]
        || a[ra - 1] != a[ra - 2]
        || b[rb - 2] != a[ra - 1]
    {
        return None;
    }
    Some((a[..ra - 2].iter().product(), a[ra - 1], b[rb - 1]))
}
