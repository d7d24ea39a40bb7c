//! The coverage table: for every op of the IR and every dtype, whether the CUDA backend lowers
//! it and how, or refuses it and why — computed by lowering one small plan per cell (no GPU
//! needed). `backends/cuda/coverage.md` is this table checked in; a test compares the two, so
//! the file always says what the code does (`BLESS=1` rewrites it).

use crate::lower::lower;
use crate::program::{Program, RegionExec, Step};
use quabla_backend::{BackendError, Precision};
use quabla_ir::{
    BinaryOp, Comparison, CustomCall, CustomRule, DType, Graph, GraphBuilder, HostData, LinalgKind,
    NodeId, Op, Plan, Region, RegionForm, RegionKind, ScanBody, ScatterMode, Shape, TensorType,
    UnaryOp,
};
use std::sync::Arc;

/// The columns: a dtype, at a precision.
pub const COLUMNS: [(&str, DType, Precision); 6] = [
    ("float32", DType::F32, Precision::Reference),
    ("float64", DType::F64, Precision::Reference),
    ("bool", DType::Bool, Precision::Reference),
    ("int32", DType::I32, Precision::Reference),
    ("int64", DType::I64, Precision::Reference),
    (
        "float64, precision=\"float64\"",
        DType::F64,
        Precision::Float64,
    ),
];

/// The column of each dtype at the reference precision. The match has no wildcard: a dtype
/// added to the IR does not compile until the table has a column for it (and a test checks
/// that [`COLUMNS`] agrees).
pub fn column_of(dtype: DType) -> usize {
    match dtype {
        DType::F32 => 0,
        DType::F64 => 1,
        DType::Bool => 2,
        DType::I32 => 3,
        DType::I64 => 4,
    }
}

/// One cell: how a plan of one op at one dtype lowers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cell {
    /// Lowered; the text says into what.
    Lowered(String),
    /// Refused at compile time with UN2/UN3; the text is the reason.
    Refused(String),
    /// Not an op of the IR at this dtype (the builder rejects it).
    NotApplicable,
}

impl Cell {
    fn text(&self) -> String {
        match self {
            Cell::Lowered(how) => how.clone(),
            Cell::Refused(why) => format!("**refused**: {why}"),
            Cell::NotApplicable => "n/a".into(),
        }
    }
}

/// What a program is made of, in a few words.
fn how(program: &Program) -> String {
    let steps = program.all_steps();
    let any = |f: &dyn Fn(&Step) -> bool| steps.iter().any(|s| f(s));
    let mut parts = Vec::new();
    if any(&|s| matches!(s, Step::Region(r) if matches!(r.exec, RegionExec::Fused(_)))) {
        parts.push("one fused loop kernel");
    } else if any(&|s| matches!(s, Step::Region(r) if r.replays_body())) {
        parts.push("host-driven region replayed as a CUDA graph");
    } else if any(&|s| matches!(s, Step::Region(_))) {
        parts.push("host-driven region");
    }
    if any(&|s| matches!(s, Step::Solver(_))) {
        parts.push("cuSOLVER");
    }
    if any(&|s| matches!(s, Step::Gemm(_))) {
        parts.push("cuBLAS GEMM");
    }
    if any(&|s| matches!(s, Step::Trsm(_))) {
        parts.push("cuBLAS trsm");
    }
    if any(&|s| matches!(s, Step::Print(_))) {
        parts.push("readback and print");
    }
    let launches = steps
        .iter()
        .filter(|s| matches!(s, Step::Launch(_)))
        .count();
    if parts.is_empty() {
        return match launches {
            0 => "no step (shares its operand)".into(),
            1 => "kernel".into(),
            n => format!("{n} kernels"),
        };
    }
    if launches > 0 {
        parts.push("kernels");
    }
    parts.join(" + ")
}

fn cell(build: &dyn Fn(DType) -> Option<Graph>, dtype: DType, precision: Precision) -> Cell {
    let Some(graph) = build(dtype) else {
        return Cell::NotApplicable;
    };
    let plan = Plan::from_graph_unoptimized(graph);
    match lower(&plan, precision) {
        Ok(program) => Cell::Lowered(how(&program)),
        Err(BackendError::Unsupported { reason, .. }) => Cell::Refused(reason),
        Err(other) => Cell::Refused(format!("error: {other}")),
    }
}

fn ty(dtype: DType, dims: &[usize]) -> TensorType {
    TensorType::new(dtype, Shape::new(dims.to_vec()).expect("nonzero extents"))
}

/// A graph of one input of `dims` and the nodes `body` adds (`None` when the IR refuses it).
fn unary_graph(
    dtype: DType,
    dims: &[usize],
    body: impl Fn(&mut GraphBuilder, NodeId) -> Option<NodeId>,
) -> Option<Graph> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", ty(dtype, dims));
    let y = body(&mut b, x)?;
    b.finish(vec![y]).ok()
}

fn binary_graph(
    dtype: DType,
    a: &[usize],
    c: &[usize],
    body: impl Fn(&mut GraphBuilder, NodeId, NodeId) -> Option<NodeId>,
) -> Option<Graph> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", ty(dtype, a));
    let y = b.input("y", ty(dtype, c));
    let z = body(&mut b, x, y)?;
    b.finish(vec![z]).ok()
}

type Build = Box<dyn Fn(DType) -> Option<Graph>>;

fn push1(op: Op, dims: &'static [usize]) -> Build {
    Box::new(move |d| unary_graph(d, dims, |b, x| b.push(op.clone(), &[x]).ok()))
}

fn push2(op: Op, a: &'static [usize], c: &'static [usize]) -> Build {
    Box::new(move |d| binary_graph(d, a, c, |b, x, y| b.push(op.clone(), &[x, y]).ok()))
}

/// A region call over an input of `dtype` and `[3]`, with bodies made by `kind`.
fn region_graph(
    dtype: DType,
    form: RegionForm,
    kind: impl Fn(DType) -> Option<RegionKind>,
) -> Option<Graph> {
    if dtype == DType::Bool {
        return None;
    }
    let region = Arc::new(Region::new(kind(dtype)?, form, 0).ok()?);
    let mut b = GraphBuilder::new();
    let mut operands = Vec::new();
    for (i, t) in region.operand_types().iter().enumerate() {
        operands.push(b.input(format!("x{i}"), t.clone()));
    }
    let n = region.output_types().len();
    let outs = b.push_region_calls(region, 0..n, &operands).ok()?;
    b.finish(outs).ok()
}

/// A body graph: inputs of `types`, outputs made by `f`.
fn body(
    types: &[TensorType],
    f: impl Fn(&mut GraphBuilder, &[NodeId]) -> Option<Vec<NodeId>>,
) -> Option<Arc<Graph>> {
    let mut b = GraphBuilder::new();
    let ids: Vec<NodeId> = types
        .iter()
        .enumerate()
        .map(|(i, t)| b.input(format!("b{i}"), t.clone()))
        .collect();
    let outs = f(&mut b, &ids)?;
    Some(Arc::new(b.finish(outs).ok()?))
}

/// The dtype of a counted loop's index parameter for carries of `d`: a float (integer loops
/// cast it, as the facade's loop index does).
fn index_dtype(d: DType) -> DType {
    if d.is_float() {
        d
    } else {
        DType::F64
    }
}

fn scan(form: RegionForm, xs: bool, elementwise: bool) -> Build {
    Box::new(move |d| {
        region_graph(d, form, |d| {
            let mut types = vec![ty(index_dtype(d), &[]), ty(d, &[3])];
            if xs {
                types.push(ty(d, &[3]));
            }
            let body = body(&types, |b, v| {
                let index = if d.is_float() {
                    v[0]
                } else {
                    b.astype(v[0], d).ok()?
                };
                let scaled = b.mul(v[1], index).ok()?;
                let next = if elementwise {
                    b.add(scaled, v[1]).ok()?
                } else {
                    let s = b.sum(v[1], None, true).ok()?;
                    b.add(scaled, s).ok()?
                };
                let mut outs = vec![next];
                if xs {
                    outs.push(b.mul(v[2], next).ok()?);
                }
                Some(outs)
            })?;
            Some(RegionKind::Scan(ScanBody {
                length: 4,
                start: 0,
                reverse: false,
                n_carry: 1,
                n_const: 0,
                n_xs: usize::from(xs),
                body,
            }))
        })
    })
}

fn while_loop(dims: &'static [usize]) -> Build {
    Box::new(move |d| {
        region_graph(d, RegionForm::While, |d| {
            let types = [ty(d, dims)];
            let cond = body(&types, |b, v| {
                let s = if dims.is_empty() {
                    v[0]
                } else {
                    b.sum(v[0], None, false).ok()?
                };
                let limit = b.scalar(10.0, d, false);
                Some(vec![b.compare(Comparison::Less, s, limit).ok()?])
            })?;
            let step = body(&types, |b, v| {
                let one = b.scalar(1.0, d, false);
                Some(vec![b.add(v[0], one).ok()?])
            })?;
            Some(RegionKind::While {
                n_carry: 1,
                cond,
                body: step,
                max_trips: None,
            })
        })
    })
}

fn cond() -> Build {
    Box::new(|d| {
        region_graph(d, RegionForm::Cond, |d| {
            let types = [ty(d, &[3])];
            // Integers take the functions defined on them.
            let (then_op, else_op) = if d.is_float() {
                (UnaryOp::Sin, UnaryOp::Cos)
            } else {
                (UnaryOp::Neg, UnaryOp::BitNot)
            };
            let then_branch = body(&types, |b, v| Some(vec![b.unary(then_op, v[0]).ok()?]))?;
            let else_branch = body(&types, |b, v| Some(vec![b.unary(else_op, v[0]).ok()?]))?;
            Some(RegionKind::Cond {
                then_branch,
                else_branch,
            })
        })
    })
}

fn custom() -> Build {
    Box::new(|d| {
        let primal = body(&[ty(d, &[3])], |b, v| {
            Some(vec![b.unary(UnaryOp::Neg, v[0]).ok()?])
        })?;
        let rule = Arc::new(CustomRule {
            name: "f".into(),
            primal,
            fwd: None,
            bwd: None,
            jvp: None,
            rematerialize: false,
        });
        unary_graph(d, &[3], |b, x| {
            b.push(
                Op::Custom(CustomCall {
                    rule: rule.clone(),
                    output: 0,
                }),
                &[x],
            )
            .ok()
        })
    })
}

/// `index_gather` (`mode` `None`) or `index_scatter` in `mode` of data `[2, 4, 3]` along axis
/// 1 with one batch axis, by indices `[2, 5]` of `idx` (updates `[2, 5, 3]`).
fn indexed(mode: Option<ScatterMode>, idx: DType) -> Build {
    Box::new(move |d| {
        let mut b = GraphBuilder::new();
        let x = b.input("x", ty(d, &[2, 4, 3]));
        let i = b.input("i", ty(idx, &[2, 5]));
        let y = match mode {
            None => b.push(Op::IndexGather { axis: 1, batch: 1 }, &[x, i]),
            Some(mode) => {
                let u = b.input("u", ty(d, &[2, 5, 3]));
                b.push(
                    Op::IndexScatter {
                        axis: 1,
                        batch: 1,
                        mode,
                    },
                    &[x, i, u],
                )
            }
        };
        b.finish(vec![y.ok()?]).ok()
    })
}

/// Every row: the op's text name (with a note where a row shows one way of lowering it) and
/// how to build its plan at a dtype.
fn rows() -> Vec<(String, Build)> {
    let mut rows: Vec<(String, Build)> = Vec::new();
    rows.push((
        "input".into(),
        Box::new(|d| unary_graph(d, &[3], |_, x| Some(x))),
    ));
    rows.push((
        "constant".into(),
        Box::new(|d| {
            let mut b = GraphBuilder::new();
            let c = b
                .constant(
                    HostData::from_f64(d, [1.0, 0.0, 2.0]),
                    Shape::new(vec![3]).ok()?,
                    false,
                )
                .ok()?;
            b.finish(vec![c]).ok()
        }),
    ));
    for to in [DType::F32, DType::F64, DType::Bool, DType::I32, DType::I64] {
        rows.push((
            format!("cast to {}", to.ir_name()),
            push1(Op::Cast { to, weak: false }, &[3]),
        ));
    }
    for u in UnaryOp::ALL {
        rows.push((u.name().into(), push1(Op::Unary(u), &[3])));
    }
    rows.push(("powi".into(), push1(Op::Powi(3), &[3])));
    for op in BinaryOp::ALL {
        rows.push((op.name().into(), push2(Op::Binary(op), &[2, 3], &[3])));
    }
    for c in Comparison::ALL {
        rows.push((c.name().into(), push2(Op::Compare(c), &[3], &[3])));
    }
    rows.push((
        "where".into(),
        Box::new(|d| {
            let mut b = GraphBuilder::new();
            let p = b.input("p", ty(DType::Bool, &[3]));
            let x = b.input("x", ty(d, &[3]));
            let y = b.input("y", ty(d, &[2, 3]));
            let z = b.push(Op::Where, &[p, x, y]).ok()?;
            b.finish(vec![z]).ok()
        }),
    ));
    rows.push(("stop_gradient".into(), push1(Op::StopGradient, &[3])));
    rows.push((
        "debug_print".into(),
        push1(
            Op::DebugPrint {
                format: "x = {}".into(),
                per_example: false,
            },
            &[3],
        ),
    ));
    let reductions: [(&str, Op); 6] = [
        ("sum", Op::reduce(quabla_ir::Reducer::Sum, vec![0, 1], 2)),
        ("sum_axis", Op::reduce(quabla_ir::Reducer::Sum, vec![1], 2)),
        ("mean", Op::reduce(quabla_ir::Reducer::Mean, vec![0, 1], 2)),
        (
            "mean_axis",
            Op::reduce(quabla_ir::Reducer::Mean, vec![0], 2),
        ),
        ("max_axis", Op::reduce(quabla_ir::Reducer::Max, vec![1], 2)),
        (
            "min_axis",
            Op::reduce(quabla_ir::Reducer::Min, vec![0, 1], 2),
        ),
    ];
    for (name, op) in reductions {
        rows.push((name.into(), push1(op, &[4, 5])));
    }
    rows.push((
        "cumsum".into(),
        push1(
            Op::Cumsum {
                axis: 1,
                reverse: true,
            },
            &[4, 5],
        ),
    ));
    rows.push((
        "reshape".into(),
        push1(
            Op::Reshape {
                shape: Shape::new(vec![5, 4]).expect("shape"),
            },
            &[4, 5],
        ),
    ));
    rows.push((
        "transpose".into(),
        push1(Op::Transpose { perm: vec![1, 0] }, &[4, 5]),
    ));
    rows.push((
        "broadcast (read by elementwise ops)".into(),
        Box::new(|d| {
            unary_graph(d, &[3], |b, x| {
                let y = b.broadcast_to(x, Shape::new(vec![2, 3]).ok()?).ok()?;
                b.push(Op::StopGradient, &[y]).ok()
            })
        }),
    ));
    rows.push((
        "broadcast (materialized)".into(),
        push1(
            Op::Broadcast {
                shape: Shape::new(vec![2, 3]).expect("shape"),
            },
            &[3],
        ),
    ));
    rows.push((
        "concat".into(),
        push2(Op::Concat { axis: 0 }, &[2, 3], &[1, 3]),
    ));
    rows.push((
        "slice".into(),
        push1(
            Op::Slice {
                starts: vec![1, 1],
                sizes: vec![2, 3],
            },
            &[4, 5],
        ),
    ));
    rows.push((
        "pad_slice".into(),
        push1(
            Op::PadSlice {
                starts: vec![1, 0],
                shape: Shape::new(vec![4, 5]).expect("shape"),
            },
            &[2, 5],
        ),
    ));
    rows.push((
        "gather".into(),
        push1(
            Op::Gather {
                axis: 0,
                indices: vec![3, 0, 0],
            },
            &[4, 5],
        ),
    ));
    rows.push((
        "scatter_add".into(),
        push2(
            Op::ScatterAdd {
                axis: 0,
                indices: vec![1, 1, 3],
            },
            &[4, 5],
            &[3, 5],
        ),
    ));
    rows.push((
        "index_gather (int64 indices)".into(),
        indexed(None, DType::I64),
    ));
    rows.push((
        "index_gather (int32 indices)".into(),
        indexed(None, DType::I32),
    ));
    for mode in ScatterMode::ALL {
        rows.push((
            format!("index_scatter[{}]", mode.name()),
            indexed(Some(mode), DType::I64),
        ));
    }
    rows.push(("matmul".into(), push2(Op::Matmul, &[2, 3, 4], &[4, 5])));
    rows.push((
        "solve".into(),
        push2(Op::Solve { transpose_a: false }, &[2, 3, 3], &[2, 3, 2]),
    ));
    rows.push(("cholesky".into(), push1(Op::Cholesky, &[3, 3])));
    rows.push((
        "cholesky_ad".into(),
        push2(Op::CholeskyAd, &[3, 3], &[3, 3]),
    ));
    rows.push((
        "triangular_solve".into(),
        push2(
            Op::TriangularSolve {
                lower: true,
                transpose_a: false,
                unit_diagonal: false,
            },
            &[3, 3],
            &[3, 2],
        ),
    ));
    for kind in LinalgKind::ALL {
        let square = matches!(
            kind,
            LinalgKind::DetSign
                | LinalgKind::LogAbsDet
                | LinalgKind::EighValues
                | LinalgKind::EighVectors
        );
        let dims: &'static [usize] = if square { &[2, 3, 3] } else { &[2, 4, 3] };
        rows.push((
            format!("linalg[{}]", kind.name()),
            push1(Op::Linalg(kind), dims),
        ));
    }
    rows.push(("cond".into(), cond()));
    rows.push((
        "fori (elementwise body)".into(),
        scan(RegionForm::Fori, false, true),
    ));
    rows.push((
        "fori (other body)".into(),
        scan(RegionForm::Fori, false, false),
    ));
    for form in [
        RegionForm::ForiJvp,
        RegionForm::ForiVjp,
        RegionForm::ForiVjpJvp,
        RegionForm::ForiVjpVjp,
        RegionForm::Scan,
        RegionForm::ScanVjp,
        RegionForm::ScanVjpJvp,
        RegionForm::ScanVjpVjp,
    ] {
        rows.push((form.name().into(), scan(form, true, false)));
    }
    rows.push(("while (single-value carries)".into(), while_loop(&[])));
    rows.push(("while (tensor carries)".into(), while_loop(&[3])));
    rows.push(("custom".into(), custom()));
    rows
}

/// The plan of every cell the IR has, with its column's precision and a label
/// (`matmul float32`).
pub fn plans() -> Vec<(String, Plan, Precision)> {
    let mut out = Vec::new();
    for (name, build) in rows() {
        for &(column, dtype, precision) in &COLUMNS {
            if let Some(graph) = build(dtype) {
                out.push((
                    format!("{name} {column}"),
                    Plan::from_graph_unoptimized(graph),
                    precision,
                ));
            }
        }
    }
    out
}

/// The table's rows: the op and one cell per [`COLUMNS`] entry.
pub fn table() -> Vec<(String, Vec<Cell>)> {
    rows()
        .into_iter()
        .map(|(name, build)| {
            let cells = COLUMNS
                .iter()
                .map(|&(_, dtype, precision)| cell(build.as_ref(), dtype, precision))
                .collect();
            (name, cells)
        })
        .collect()
}

/// The table as the markdown of `backends/cuda/coverage.md`.
pub fn markdown() -> String {
    let mut out = String::from(
        "# CUDA backend coverage\n\n\
         Generated by `quabla_cuda::coverage::markdown()` and checked by the test \
         `coverage_table_matches_the_lowering` (`BLESS=1` rewrites this file). Each cell \
         lowers a one-op plan for CUDA: what it becomes, or why it is refused at compile \
         time; `n/a` where the IR has no such op at that dtype. See `docs/cuda.md`.\n\n",
    );
    out.push_str("| op |");
    for (name, _, _) in COLUMNS {
        out.push_str(&format!(" {name} |"));
    }
    out.push_str("\n| --- |");
    for _ in COLUMNS {
        out.push_str(" --- |");
    }
    out.push('\n');
    let rows = table();
    let (mut lowered, mut refused) = (0, 0);
    for (name, cells) in &rows {
        out.push_str(&format!("| `{name}` |"));
        for c in cells {
            match c {
                Cell::Lowered(_) => lowered += 1,
                Cell::Refused(_) => refused += 1,
                Cell::NotApplicable => {}
            }
            out.push_str(&format!(" {} |", c.text().replace('|', "\\|")));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "\n{} rows; {lowered} cells lowered, {refused} refused.\n",
        rows.len()
    ));
    out
}
