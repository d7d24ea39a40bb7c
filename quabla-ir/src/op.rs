//! The closed set of IR primitives (transforms.md §16) and their text names.
//!
//! Every variant has, each in one exhaustive `match`: a type rule (`infer`), a folding rule
//! (`eval`), a text form (`text`), and later a JVP/transpose rule (`quabla-autodiff`), a
//! batching rule (`quabla-vmap`) and a CPU kernel (`quabla-cpu`). Adding a variant makes the
//! compiler list every place that needs a rule.
//!
//! Ops are kept few: `maximum`, `relu`, `abs`, `softplus`, `stack`, `norm`, ... are
//! compositions built by the facade. Control-flow regions (`cond`, `fori`, `scan`, `while` and
//! their derivative forms) are [`Op::Region`] nodes that own frozen body graphs (`region.rs`),
//! printed with the body syntax of transforms.md §15.3.

use crate::graph::{Graph, TensorType};
use crate::region::RegionCall;
use crate::{DType, HostData, Shape};
use std::sync::Arc;

/// Elementwise unary functions of one float operand (same dtype and shape out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnaryOp {
    /// Flips the sign bit, including of zeros and NaN (api.md §2.2). Not expressible exactly as
    /// `0 - x` (which loses `-0.0`), hence its own op.
    Neg,
    Tanh,
    Exp,
    Log,
    Log1p,
    Expm1,
    Sqrt,
    Sin,
    Cos,
    Erf,
    Erfc,
    Tan,
    Arcsin,
    Arccos,
    Arctan,
    Sinh,
    Cosh,
    Arcsinh,
    Arccosh,
    Arctanh,
    Log2,
    Log10,
    Cbrt,
    Floor,
    Ceil,
    Round,
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 26] = [
        UnaryOp::Neg,
        UnaryOp::Tanh,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Log1p,
        UnaryOp::Expm1,
        UnaryOp::Sqrt,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Erf,
        UnaryOp::Erfc,
        UnaryOp::Tan,
        UnaryOp::Arcsin,
        UnaryOp::Arccos,
        UnaryOp::Arctan,
        UnaryOp::Sinh,
        UnaryOp::Cosh,
        UnaryOp::Arcsinh,
        UnaryOp::Arccosh,
        UnaryOp::Arctanh,
        UnaryOp::Log2,
        UnaryOp::Log10,
        UnaryOp::Cbrt,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
    ];

    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Log1p => "log1p",
            UnaryOp::Expm1 => "expm1",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Erf => "erf",
            UnaryOp::Erfc => "erfc",
            UnaryOp::Tan => "tan",
            UnaryOp::Arcsin => "arcsin",
            UnaryOp::Arccos => "arccos",
            UnaryOp::Arctan => "arctan",
            UnaryOp::Sinh => "sinh",
            UnaryOp::Cosh => "cosh",
            UnaryOp::Arcsinh => "arcsinh",
            UnaryOp::Arccosh => "arccosh",
            UnaryOp::Arctanh => "arctanh",
            UnaryOp::Log2 => "log2",
            UnaryOp::Log10 => "log10",
            UnaryOp::Cbrt => "cbrt",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Round => "round",
        }
    }
}

/// Elementwise binary arithmetic of two float operands of one dtype (broadcasting).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    /// `pow(x, y)` with real exponents (numerics.md §4.2).
    Pow,
    Atan2,
    /// C `fmod`: the remainder has the sign of the dividend.
    Fmod,
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 7] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Atan2,
        BinaryOp::Fmod,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Atan2 => "atan2",
            BinaryOp::Fmod => "fmod",
        }
    }
}

/// Comparison predicates; the `compare` op prints by predicate and yields `i1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Comparison {
    Greater,
    GreaterEqual,
    Less,
    LessEqual,
    Equal,
    NotEqual,
}

impl Comparison {
    pub const ALL: [Comparison; 6] = [
        Comparison::Greater,
        Comparison::GreaterEqual,
        Comparison::Less,
        Comparison::LessEqual,
        Comparison::Equal,
        Comparison::NotEqual,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Comparison::Greater => "greater",
            Comparison::GreaterEqual => "greater_equal",
            Comparison::Less => "less",
            Comparison::LessEqual => "less_equal",
            Comparison::Equal => "equal",
            Comparison::NotEqual => "not_equal",
        }
    }

    /// Ordering predicates are not defined for bool operands (numerics.md §2.1 rule 5).
    pub fn is_ordering(self) -> bool {
        !matches!(self, Comparison::Equal | Comparison::NotEqual)
    }
}

/// The kinds of the multi-purpose `linalg` op: one output of a decomposition each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinalgKind {
    DetSign,
    LogAbsDet,
    EighValues,
    EighVectors,
    QrR,
    QrQ,
    QrQComplete,
    SvdS,
    SvdU,
    SvdUFull,
    SvdVh,
    SvdVhFull,
}

impl LinalgKind {
    pub const ALL: [LinalgKind; 12] = [
        LinalgKind::DetSign,
        LinalgKind::LogAbsDet,
        LinalgKind::EighValues,
        LinalgKind::EighVectors,
        LinalgKind::QrR,
        LinalgKind::QrQ,
        LinalgKind::QrQComplete,
        LinalgKind::SvdS,
        LinalgKind::SvdU,
        LinalgKind::SvdUFull,
        LinalgKind::SvdVh,
        LinalgKind::SvdVhFull,
    ];

    pub fn name(self) -> &'static str {
        match self {
            LinalgKind::DetSign => "det_sign",
            LinalgKind::LogAbsDet => "log_abs_det",
            LinalgKind::EighValues => "eigh_values",
            LinalgKind::EighVectors => "eigh_vectors",
            LinalgKind::QrR => "qr_r",
            LinalgKind::QrQ => "qr_q",
            LinalgKind::QrQComplete => "qr_q_complete",
            LinalgKind::SvdS => "svd_s",
            LinalgKind::SvdU => "svd_u",
            LinalgKind::SvdUFull => "svd_u_full",
            LinalgKind::SvdVh => "svd_vh",
            LinalgKind::SvdVhFull => "svd_vh_full",
        }
    }
}

/// A user-defined derivative rule (`custom_vjp`, `custom_jvp`, `checkpoint`). The symbolic
/// transforms read its rule graphs; canonicalization replaces the node by its primal graph
/// before a plan reaches a backend.
///
/// Graph conventions, for a node with operands `x_1..x_n` (the primal's inputs) and primal
/// outputs `y_1..y_m`:
///
/// - `primal`: inputs `x_1..x_n`, outputs `y_1..y_m`.
/// - `fwd` (with `bwd`): inputs `x_1..x_n`, outputs `y_1..y_m` then the residuals `r_1..r_k`.
/// - `bwd`: inputs `r_1..r_k` then one cotangent per primal output (`g_1..g_m`, the types of
///   `y`), outputs one cotangent per operand (`x`'s types; ignored for bool operands). It must
///   be linear in `g`.
/// - `jvp`: inputs `x_1..x_n` then one tangent per operand (`x`'s types; bool tangents are
///   `false`), outputs one tangent per primal output. It must be linear in the tangents:
///   reverse mode transposes it.
/// - `rematerialize` with no other rule: both modes differentiate `primal`; reverse mode
///   recomputes it in the backward pass, and the recomputed nodes carry the
///   rematerialization tag of [`crate::Node::remat`], so CSE never merges them with the
///   forward computation.
///
/// A node without `jvp` but with `fwd`/`bwd` has no forward mode (TF4).
#[derive(Debug)]
pub struct CustomRule {
    /// The name shown in text and errors (the wrapped function's name).
    pub name: String,
    /// The primal computation: one input per operand of the node, any number of outputs.
    pub primal: Arc<Graph>,
    /// Forward graph of a `custom_vjp` (outputs then residuals).
    pub fwd: Option<Arc<Graph>>,
    /// Backward graph of a `custom_vjp` (residuals and cotangents in, cotangents out).
    pub bwd: Option<Arc<Graph>>,
    /// Tangent graph of a `custom_jvp` (primals and tangents in, tangents out).
    pub jvp: Option<Arc<Graph>>,
    /// `checkpoint`: the backward pass recomputes the primal instead of storing it.
    pub rematerialize: bool,
}

/// One output of a custom-rule call. Nodes have one result each, so a rule with several
/// outputs appears as several `custom` nodes sharing the rule and operands.
#[derive(Clone, Debug)]
pub struct CustomCall {
    pub rule: Arc<CustomRule>,
    pub output: usize,
}

impl PartialEq for CustomCall {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.rule, &other.rule) && self.output == other.output
    }
}

impl Eq for CustomCall {}

impl std::hash::Hash for CustomCall {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.rule) as usize).hash(state);
        self.output.hash(state);
    }
}

/// An IR primitive with its attributes. Equality and hashing cover every distinguishing
/// attribute, so `(op, operands)` is the common-subexpression key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// A plan input, named by its pytree path. `weak` marks a weakly typed argument.
    Input {
        name: String,
        ty: TensorType,
    },
    /// A literal; its shape is the node's shape. Weak constants come from `f64` operands.
    Constant {
        data: HostData,
        shape: Shape,
        weak: bool,
    },
    /// Conversion (numerics.md §1.4). `weak` is the weak flag of the result: a weak scalar
    /// keeps it when a bool operand adopts it (numerics.md §2.1 rule 4).
    Cast {
        to: DType,
        weak: bool,
    },
    Unary(UnaryOp),
    /// Integer power by exact repeated multiplication (numerics.md §4.2).
    Powi(i32),
    Binary(BinaryOp),
    Compare(Comparison),
    /// `where(pred, on_true, on_false)` with broadcasting of all three.
    Where,
    /// Identity whose derivatives are zero in every mode.
    StopGradient,
    /// Sum over all elements (rank-0 result).
    Sum,
    /// Sum over the listed axes, which are removed (sorted, distinct).
    SumAxis {
        axes: Vec<usize>,
    },
    /// Mean over all elements (rank-0 result).
    Mean,
    MeanAxis {
        axes: Vec<usize>,
    },
    /// IEEE 754-2019 maximum over the listed axes (NaN propagates).
    MaxAxis {
        axes: Vec<usize>,
    },
    MinAxis {
        axes: Vec<usize>,
    },
    /// Running sum along `axis`, from the end when `reverse`.
    Cumsum {
        axis: usize,
        reverse: bool,
    },
    Reshape {
        shape: Shape,
    },
    /// Result axis `i` is operand axis `perm[i]`.
    Transpose {
        perm: Vec<usize>,
    },
    /// Trailing-axis broadcast to `shape`.
    Broadcast {
        shape: Shape,
    },
    Concat {
        axis: usize,
    },
    /// The contiguous box starting at `starts` with extents `sizes`.
    Slice {
        starts: Vec<usize>,
        sizes: Vec<usize>,
    },
    /// The transpose of `slice`: the operand placed at `starts` in zeros of `shape`.
    PadSlice {
        starts: Vec<usize>,
        shape: Shape,
    },
    /// Static gather along `axis`: result index `j` on that axis reads `indices[j]`.
    Gather {
        axis: usize,
        indices: Vec<usize>,
    },
    /// `scatter_add(base, updates)`: update slice `j` is added at `indices[j]` of `axis`.
    ScatterAdd {
        axis: usize,
        indices: Vec<usize>,
    },
    /// Batched matrix product `[..., m, k] x [..., k, n]` with broadcast batch axes.
    Matmul,
    /// `solve(a, b)`: `a [..., n, n]`, `b [..., n, k]` by LU.
    Solve,
    /// Lower Cholesky factor.
    Cholesky,
    /// `cholesky_ad(l, da)`: the tangent of the Cholesky factor `l` along `da`.
    CholeskyAd,
    /// Solves `op(a) x = b` on the left with triangular `a`.
    TriangularSolve {
        lower: bool,
        transpose_a: bool,
        unit_diagonal: bool,
    },
    Linalg(LinalgKind),
    Custom(CustomCall),
    /// One output of a control-flow region; the text name is the region's form.
    Region(RegionCall),
}

impl Op {
    /// The text name of the op (transforms.md §16).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::Constant { .. } => "constant",
            Op::Cast { .. } => "cast",
            Op::Unary(u) => u.name(),
            Op::Powi(_) => "powi",
            Op::Binary(b) => b.name(),
            Op::Compare(c) => c.name(),
            Op::Where => "where",
            Op::StopGradient => "stop_gradient",
            Op::Sum => "sum",
            Op::SumAxis { .. } => "sum_axis",
            Op::Mean => "mean",
            Op::MeanAxis { .. } => "mean_axis",
            Op::MaxAxis { .. } => "max_axis",
            Op::MinAxis { .. } => "min_axis",
            Op::Cumsum { .. } => "cumsum",
            Op::Reshape { .. } => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::Broadcast { .. } => "broadcast",
            Op::Concat { .. } => "concat",
            Op::Slice { .. } => "slice",
            Op::PadSlice { .. } => "pad_slice",
            Op::Gather { .. } => "gather",
            Op::ScatterAdd { .. } => "scatter_add",
            Op::Matmul => "matmul",
            Op::Solve => "solve",
            Op::Cholesky => "cholesky",
            Op::CholeskyAd => "cholesky_ad",
            Op::TriangularSolve { .. } => "triangular_solve",
            Op::Linalg(_) => "linalg",
            Op::Custom(_) => "custom",
            Op::Region(call) => call.region.form().name(),
        }
    }

    /// Ops computed independently per element (after broadcasting), the family that backends
    /// fuse into one pass.
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Cast { .. }
                | Op::Unary(_)
                | Op::Powi(_)
                | Op::Binary(_)
                | Op::Compare(_)
                | Op::Where
                | Op::StopGradient
        )
    }

    pub fn is_leaf(&self) -> bool {
        matches!(self, Op::Input { .. } | Op::Constant { .. })
    }
}
