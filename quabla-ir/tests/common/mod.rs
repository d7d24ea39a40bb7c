//! Helpers shared by the integration tests that meet regions: building region groups (by hand
//! and at random), comparing graphs whose regions were rebuilt (by the parser or the wire
//! decoder, so that their identities differ), and a reference evaluator that runs region bodies
//! with the scalar semantics of `quabla_ir::eval`.

// Each test crate uses a part of this module.
#![allow(dead_code)]

use quabla_ir::{
    Comparison, DType, Graph, GraphBuilder, HostData, NodeId, Op, Region, RegionForm, RegionKind,
    ScanBody, Shape, TensorType, UnaryOp,
};
use std::path::Path;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// Golden files

/// Golden-file checks: each file's expected text is compared with what the code produces now,
/// and with `BLESS=1` in the environment the files are rewritten instead (review the diff:
/// the files are the specification).
pub struct Golden {
    bless: bool,
    failures: Vec<String>,
}

impl Golden {
    pub fn new() -> Golden {
        Golden {
            bless: std::env::var_os("BLESS").is_some(),
            failures: Vec::new(),
        }
    }

    /// Compares `got` with `expected` for `file`; when blessing, writes `blessed` (the whole
    /// new content of the file) instead.
    pub fn check(
        &mut self,
        file: &Path,
        expected: &str,
        got: &str,
        blessed: impl FnOnce() -> String,
    ) {
        if self.bless {
            std::fs::write(file, blessed()).unwrap();
        } else if got != expected {
            self.failures.push(format!(
                "{}:\n--- expected\n{expected}\n--- got\n{got}",
                file.display()
            ));
        }
    }

    /// Fails with every mismatch found.
    pub fn finish(self) {
        assert!(
            self.failures.is_empty(),
            "{} golden file(s) differ (BLESS=1 rewrites them):\n{}",
            self.failures.len(),
            self.failures.join("\n")
        );
    }
}

pub fn shape(dims: &[usize]) -> Shape {
    Shape::new(dims.to_vec()).unwrap()
}

pub fn ty(dtype: DType, dims: &[usize]) -> TensorType {
    TensorType::new(dtype, shape(dims))
}

/// A body graph with the given inputs; `f` builds the rest and returns the results.
pub fn body(
    inputs: &[(&str, TensorType)],
    f: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> Vec<NodeId>,
) -> Arc<Graph> {
    let mut b = GraphBuilder::new();
    let ins: Vec<NodeId> = inputs
        .iter()
        .map(|(name, t)| b.input(*name, t.clone()))
        .collect();
    let outs = f(&mut b, &ins);
    Arc::new(b.finish(outs).unwrap())
}

pub fn region(kind: RegionKind, form: RegionForm, level: u8) -> Arc<Region> {
    Arc::new(Region::new(kind, form, level).unwrap())
}

/// Pushes the nodes of `outputs` (one node each, repeats allowed) of one call of `region`.
pub fn call(
    b: &mut GraphBuilder,
    region: &Arc<Region>,
    operands: &[NodeId],
    outputs: &[usize],
) -> Vec<NodeId> {
    b.push_region_calls(region.clone(), outputs.iter().copied(), operands)
        .unwrap()
}

/// The region of a node, if it is one.
pub fn region_of(g: &Graph, id: NodeId) -> &Arc<Region> {
    match &g.node(id).op {
        Op::Region(call) => &call.region,
        other => panic!("{id} is a {} node", other.name()),
    }
}

// ---------------------------------------------------------------------------------------------
// Structural comparison

/// Whether two graphs are equal with regions compared by content: the same nodes, the same
/// region contents, and the same sharing of one region among the nodes of each graph.
pub fn same_structure(a: &Graph, b: &Graph) -> bool {
    if a.len() != b.len() || a.outputs() != b.outputs() {
        return false;
    }
    for (i, (x, y)) in a.nodes().iter().zip(b.nodes()).enumerate() {
        if x.operands != y.operands || x.ty != y.ty {
            return false;
        }
        match (&x.op, &y.op) {
            (Op::Region(p), Op::Region(q)) => {
                if p.output != q.output || !same_region(&p.region, &q.region) {
                    return false;
                }
                for (u, v) in a.nodes()[..i].iter().zip(&b.nodes()[..i]) {
                    if let (Op::Region(pu), Op::Region(qv)) = (&u.op, &v.op) {
                        if Arc::ptr_eq(&p.region, &pu.region) != Arc::ptr_eq(&q.region, &qv.region)
                        {
                            return false;
                        }
                    }
                }
            }
            (p, q) => {
                if p != q {
                    return false;
                }
            }
        }
    }
    true
}

pub fn same_region(a: &Region, b: &Region) -> bool {
    if a.form() != b.form() || a.level() != b.level() {
        return false;
    }
    match (a.kind(), b.kind()) {
        (
            RegionKind::Cond {
                then_branch: t1,
                else_branch: e1,
            },
            RegionKind::Cond {
                then_branch: t2,
                else_branch: e2,
            },
        ) => same_structure(t1, t2) && same_structure(e1, e2),
        (RegionKind::Scan(s), RegionKind::Scan(t)) => {
            (s.length, s.start, s.reverse, s.n_carry, s.n_const, s.n_xs)
                == (t.length, t.start, t.reverse, t.n_carry, t.n_const, t.n_xs)
                && same_structure(&s.body, &t.body)
        }
        (
            RegionKind::While {
                n_carry: n1,
                cond: c1,
                body: b1,
                max_trips: m1,
            },
            RegionKind::While {
                n_carry: n2,
                cond: c2,
                body: b2,
                max_trips: m2,
            },
        ) => (n1, m1) == (n2, m2) && same_structure(c1, c2) && same_structure(b1, b2),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Random region groups

const SCAN_FORMS: [RegionForm; 9] = [
    RegionForm::Fori,
    RegionForm::ForiJvp,
    RegionForm::ForiVjp,
    RegionForm::ForiVjpJvp,
    RegionForm::ForiVjpVjp,
    RegionForm::Scan,
    RegionForm::ScanVjp,
    RegionForm::ScanVjpJvp,
    RegionForm::ScanVjpVjp,
];

/// Functions that stay finite or saturate when a loop applies them repeatedly.
const LOOP_UNARY: [UnaryOp; 6] = [
    UnaryOp::Sin,
    UnaryOp::Tanh,
    UnaryOp::Cos,
    UnaryOp::Neg,
    UnaryOp::Arctan,
    UnaryOp::Floor,
];

fn strong(t: &TensorType) -> TensorType {
    TensorType::new(t.dtype, t.shape.clone())
}

/// Appends a random region group over `x` (a float value; the first output always has its
/// type) and `y` (a constant operand, or the `xs` of a scan), with bodies of foldable ops only,
/// and nested regions up to two levels deep. The bits of `k` choose the kind (cond, `fori`-style
/// scan, scan with `xs` and `ys`, while), the form, the attributes, the nesting and which
/// sibling nodes are pushed (output 0 always, the others by bit, output 0 possibly twice).
/// Returns the pushed nodes, or `None` where the operands do not fit.
pub fn random_region(
    b: &mut GraphBuilder,
    x: NodeId,
    y: NodeId,
    k: u32,
    depth: usize,
) -> Option<Vec<NodeId>> {
    let xt = strong(b.ty(x));
    let yt = strong(b.ty(y));
    if xt.dtype == DType::Bool {
        return None;
    }
    let f = LOOP_UNARY[(k >> 2) as usize % LOOP_UNARY.len()];
    let reverse = k >> 5 & 1 == 1;
    let start = (k >> 6) as usize % 3;
    let level = (k >> 8) as u8 % 3;
    let length = (k >> 10) as usize % 4 + 1;
    let nested = depth < 2 && k >> 12 & 1 == 1;
    let form = SCAN_FORMS[(k >> 16) as usize % SCAN_FORMS.len()];
    // Output 0 of a nested region has the type of its `x`, so it can stand in for that value.
    let inner = |g: &mut GraphBuilder, v: NodeId, w: NodeId| -> NodeId {
        if nested {
            if let Some(nodes) = random_region(g, v, w, k.rotate_right(7), depth + 1) {
                return nodes[0];
            }
        }
        v
    };
    let scalar = |d: DType| TensorType::new(d, Shape::scalar());
    let xs_fit = yt.dtype != DType::Bool && yt.shape.rank() >= 1;
    let (region, operands) = match k % 4 {
        0 => {
            let zero = b.scalar(0.0, xt.dtype, false);
            let s = b.sum(x, None, false).ok()?;
            let pred = b.compare(Comparison::Greater, s, zero).ok()?;
            let ins = [("operand0", xt.clone()), ("operand1", yt.clone())];
            let then_branch = body(&ins, |g, p| {
                let r = g.unary(f, p[0]).unwrap();
                vec![inner(g, r, p[1]), p[0]]
            });
            let else_branch = body(&ins, |g, p| {
                let r = g.unary(UnaryOp::Neg, p[0]).unwrap();
                vec![r, r]
            });
            let kind = RegionKind::Cond {
                then_branch,
                else_branch,
            };
            (region(kind, RegionForm::Cond, level), vec![pred, x, y])
        }
        2 if xs_fit => {
            let slice = TensorType::new(yt.dtype, shape(&yt.shape.dims()[1..]));
            let ins = [
                ("i", scalar(DType::F64)),
                ("carry", xt.clone()),
                ("x", slice),
            ];
            let body = body(&ins, |g, p| {
                let s = g.sum(p[2], None, false).unwrap();
                let s = g.astype(s, xt.dtype).unwrap();
                let c = g.add(p[1], s).unwrap();
                let y = g.unary(f, p[2]).unwrap();
                vec![inner(g, c, p[2]), y, p[1]]
            });
            let kind = RegionKind::Scan(ScanBody {
                length: yt.shape.dims()[0],
                start,
                reverse,
                n_carry: 1,
                n_const: 0,
                n_xs: 1,
                body,
            });
            (region(kind, form, level), vec![x, y])
        }
        1 | 2 => {
            let ins = [
                ("i", scalar(xt.dtype)),
                ("carry", xt.clone()),
                ("operand0", yt.clone()),
            ];
            let body = body(&ins, |g, p| {
                let half = g.scalar(0.5, xt.dtype, false);
                let c = g.mul(p[1], half).unwrap();
                let c = g.add(c, p[0]).unwrap();
                vec![inner(g, c, p[2])]
            });
            let kind = RegionKind::Scan(ScanBody {
                length,
                start,
                reverse,
                n_carry: 1,
                n_const: 1,
                n_xs: 0,
                body,
            });
            (region(kind, form, level), vec![x, y])
        }
        _ => {
            let counter = b.scalar(0.0, DType::F64, false);
            let limit = b.scalar(length as f64, DType::F64, false);
            let ins = [
                ("carry0", xt.clone()),
                ("carry1", scalar(DType::F64)),
                ("operand0", scalar(DType::F64)),
            ];
            let cond = body(&ins, |g, p| {
                vec![g.compare(Comparison::Less, p[1], p[2]).unwrap()]
            });
            let body = body(&ins, |g, p| {
                let one = g.scalar(1.0, DType::F64, false);
                let r = g.unary(f, p[0]).unwrap();
                vec![inner(g, r, p[1]), g.add(p[1], one).unwrap()]
            });
            let kind = RegionKind::While {
                n_carry: 2,
                cond,
                body,
                // Bounded at odd levels, so the bound round-trips through text and wire.
                max_trips: (level % 2 == 1).then_some(3),
            };
            (
                region(kind, RegionForm::While, level),
                vec![x, counter, limit],
            )
        }
    };
    let n = region.output_types().len();
    let mut outputs = vec![0];
    outputs.extend((1..n).filter(|j| k >> (12 + j) & 1 == 1));
    if k >> 15 & 1 == 1 {
        outputs.push(0);
    }
    Some(call(b, &region, &operands, &outputs))
}

// ---------------------------------------------------------------------------------------------
// Reference evaluation

/// Evaluates a graph with the reference interpreter (the test graphs use foldable ops only).
pub fn run(g: &Graph, inputs: &[HostData]) -> Vec<HostData> {
    quabla_ir::interp::run_graph(g, inputs).unwrap_or_else(|e| panic!("{e}\n{g}"))
}
