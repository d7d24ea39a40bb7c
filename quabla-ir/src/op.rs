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
use crate::table::code_table;
use crate::{DType, HostData, Shape};
use std::sync::Arc;

code_table! {
    /// Elementwise unary functions (same dtype and shape out): of one float operand, except
    /// `neg` (floats and integers, wrapping) and `bitwise_not` (integers and bool).
    pub enum UnaryOp {
        /// Flips the sign bit, including of zeros and NaN (api.md §2.2). Not expressible exactly
        /// as `0 - x` (which loses `-0.0`), hence its own op.
        Neg = 0 => "neg",
        Tanh = 1 => "tanh",
        Exp = 2 => "exp",
        Log = 3 => "log",
        Log1p = 4 => "log1p",
        Expm1 = 5 => "expm1",
        Sqrt = 6 => "sqrt",
        Sin = 7 => "sin",
        Cos = 8 => "cos",
        Erf = 9 => "erf",
        Erfc = 10 => "erfc",
        Tan = 11 => "tan",
        Arcsin = 12 => "arcsin",
        Arccos = 13 => "arccos",
        Arctan = 14 => "arctan",
        Sinh = 15 => "sinh",
        Cosh = 16 => "cosh",
        Arcsinh = 17 => "arcsinh",
        Arccosh = 18 => "arccosh",
        Arctanh = 19 => "arctanh",
        Log2 = 20 => "log2",
        Log10 = 21 => "log10",
        Cbrt = 22 => "cbrt",
        Floor = 23 => "floor",
        Ceil = 24 => "ceil",
        Round = 25 => "round",
        /// `~x`: every bit flipped on integers, logical not on bool.
        BitNot = 26 => "bitwise_not",
    }
}

code_table! {
    /// Elementwise binary arithmetic of two operands of one dtype (broadcasting). The first
    /// seven are float functions (`add`, `sub`, `mul` and `pow` also take integers); the rest
    /// are integer functions (the bitwise ones also take bool). Integer values are two's
    /// complement and wrap; nothing traps (numerics.md §12).
    pub enum BinaryOp {
        Add = 0 => "add",
        Sub = 1 => "sub",
        Mul = 2 => "mul",
        Div = 3 => "div",
        /// `pow(x, y)` with real exponents (numerics.md §4.2).
        Pow = 4 => "pow",
        Atan2 = 5 => "atan2",
        /// C `fmod`: the remainder has the sign of the dividend.
        Fmod = 6 => "fmod",
        /// Integer floor division (NumPy `//`); 0 for a zero divisor, `MIN // -1` wraps to
        /// `MIN`.
        FloorDiv = 7 => "floor_divide",
        /// Integer remainder with the divisor's sign (NumPy `%`); 0 for a zero divisor.
        Rem = 8 => "remainder",
        BitAnd = 9 => "bitwise_and",
        BitOr = 10 => "bitwise_or",
        BitXor = 11 => "bitwise_xor",
        /// `a << b`; 0 for a count outside `[0, bits)`.
        ShiftLeft = 12 => "shift_left",
        /// `a >> b` copying the sign bit; a count outside `[0, bits)` gives 0, or -1 for
        /// negative `a`.
        ShiftRightArithmetic = 13 => "shift_right_arithmetic",
        /// `a >> b` filling with zeros (the bits read as unsigned); 0 for a count outside
        /// `[0, bits)`.
        ShiftRightLogical = 14 => "shift_right_logical",
    }
}

code_table! {
    /// Comparison predicates; the `compare` op prints by predicate and yields `i1`.
    pub enum Comparison {
        Greater = 0 => "greater",
        GreaterEqual = 1 => "greater_equal",
        Less = 2 => "less",
        LessEqual = 3 => "less_equal",
        Equal = 4 => "equal",
        NotEqual = 5 => "not_equal",
    }
}

impl BinaryOp {
    /// Functions defined on integers only (and bool, for the bitwise ones).
    pub fn is_integer_only(self) -> bool {
        matches!(
            self,
            BinaryOp::FloorDiv
                | BinaryOp::Rem
                | BinaryOp::BitAnd
                | BinaryOp::BitOr
                | BinaryOp::BitXor
                | BinaryOp::ShiftLeft
                | BinaryOp::ShiftRightArithmetic
                | BinaryOp::ShiftRightLogical
        )
    }

    /// Functions defined on floats (the first seven).
    pub fn takes_floats(self) -> bool {
        !self.is_integer_only()
    }

    /// The bitwise functions, which also take bool operands (logical and/or/xor).
    pub fn is_bitwise(self) -> bool {
        matches!(self, BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor)
    }

    /// Functions on floats only: `div`, `atan2`, `fmod` (integers promote to float64 in the
    /// builder, numerics.md §12).
    pub fn is_float_only(self) -> bool {
        matches!(self, BinaryOp::Div | BinaryOp::Atan2 | BinaryOp::Fmod)
    }
}

impl UnaryOp {
    /// Functions that take integer operands: `neg` (wrapping) and `bitwise_not`. Every other
    /// unary function is defined on floats only.
    pub fn takes_integers(self) -> bool {
        matches!(self, UnaryOp::Neg | UnaryOp::BitNot)
    }

    /// Functions defined on floats (every one but `bitwise_not`).
    pub fn takes_floats(self) -> bool {
        self != UnaryOp::BitNot
    }

    /// The rounding functions, the identity on integers (the builder drops them).
    pub fn is_rounding(self) -> bool {
        matches!(self, UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round)
    }
}

impl Comparison {
    /// Ordering predicates are not defined for bool operands (numerics.md §2.1 rule 5).
    pub fn is_ordering(self) -> bool {
        !matches!(self, Comparison::Equal | Comparison::NotEqual)
    }
}

code_table! {
    /// The text forms of the reduction op ([`Op::Reduce`]), which are also its wire tags. The
    /// whole-tensor forms `sum` and `mean` have a rank-0 result and print no axes; their axes
    /// are every axis of the operand, so every rule reads [`Op::Reduce`]'s `axes` alike.
    pub enum ReduceKind {
        Sum = 9 => "sum",
        SumAxis = 10 => "sum_axis",
        Mean = 11 => "mean",
        MeanAxis = 12 => "mean_axis",
        /// IEEE 754-2019 maximum (NaN propagates).
        MaxAxis = 13 => "max_axis",
        MinAxis = 14 => "min_axis",
    }
}

/// What a reduction computes, whatever its text form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reducer {
    /// Accumulated in float64 (numerics.md §1.5).
    Sum,
    Mean,
    Max,
    Min,
}

impl Reducer {
    /// The user-facing name (`sum`, `mean`, `max`, `min`).
    pub fn name(self) -> &'static str {
        match self {
            Reducer::Sum => "sum",
            Reducer::Mean => "mean",
            Reducer::Max => "max",
            Reducer::Min => "min",
        }
    }
}

impl ReduceKind {
    pub fn reducer(self) -> Reducer {
        match self {
            ReduceKind::Sum | ReduceKind::SumAxis => Reducer::Sum,
            ReduceKind::Mean | ReduceKind::MeanAxis => Reducer::Mean,
            ReduceKind::MaxAxis => Reducer::Max,
            ReduceKind::MinAxis => Reducer::Min,
        }
    }

    /// Whether this is a whole-tensor form (`sum`, `mean`: no axes attribute).
    pub fn is_whole(self) -> bool {
        matches!(self, ReduceKind::Sum | ReduceKind::Mean)
    }

    /// The form of `reducer` over `axes` of a rank-`rank` operand: the whole-tensor form when
    /// every axis is reduced and the reducer has one.
    pub fn of(reducer: Reducer, n_axes: usize, rank: usize) -> ReduceKind {
        let whole = n_axes == rank;
        match (reducer, whole) {
            (Reducer::Sum, true) => ReduceKind::Sum,
            (Reducer::Sum, false) => ReduceKind::SumAxis,
            (Reducer::Mean, true) => ReduceKind::Mean,
            (Reducer::Mean, false) => ReduceKind::MeanAxis,
            (Reducer::Max, _) => ReduceKind::MaxAxis,
            (Reducer::Min, _) => ReduceKind::MinAxis,
        }
    }

    /// The form over listed axes (`sum` becomes `sum_axis`), for rewrites such as batching
    /// that reduce fewer axes than the operand has.
    pub fn over_axes(self) -> ReduceKind {
        match self {
            ReduceKind::Sum => ReduceKind::SumAxis,
            ReduceKind::Mean => ReduceKind::MeanAxis,
            other => other,
        }
    }
}

code_table! {
    /// The kinds of the multi-purpose `linalg` op: one output of a decomposition each.
    pub enum LinalgKind {
        DetSign = 0 => "det_sign",
        LogAbsDet = 1 => "log_abs_det",
        EighValues = 2 => "eigh_values",
        EighVectors = 3 => "eigh_vectors",
        QrR = 4 => "qr_r",
        QrQ = 5 => "qr_q",
        QrQComplete = 6 => "qr_q_complete",
        SvdS = 7 => "svd_s",
        SvdU = 8 => "svd_u",
        SvdUFull = 9 => "svd_u_full",
        SvdVh = 10 => "svd_vh",
        SvdVhFull = 11 => "svd_vh_full",
    }
}

code_table! {
    /// How [`Op::IndexScatter`] combines an update with the element it lands on. Repeated
    /// destinations combine in row-major order of the updates (for `set`, the last one wins).
    pub enum ScatterMode {
        Set = 0 => "set",
        Add = 1 => "add",
        Mul = 2 => "mul",
        /// IEEE 754-2019 minimum (NaN propagates), like `min_axis`.
        Min = 3 => "min",
        Max = 4 => "max",
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
    /// An effect: prints its operand each time the plan runs (`format` with `{}` standing for
    /// the value; each example on its own line when `per_example`, the batched form under
    /// `vmap`) and returns it unchanged. Passes keep it whether or not its result is used and
    /// never merge two of them; derivatives pass through it.
    DebugPrint {
        format: String,
        per_example: bool,
    },
    /// A reduction over `axes` (sorted, distinct), which are removed from the shape. The
    /// whole-tensor kinds (`sum`, `mean`) list every axis of the operand.
    Reduce {
        kind: ReduceKind,
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
    /// `index_gather(x, idx)`: gather along `axis` by a tensor of integer indices. The first
    /// `batch` axes of `x` and `idx` are batch axes matched one to one (`batch <= axis`); with
    /// `x: [B.., P.., n, Q..]` and `idx: [B.., J..]` the result is `[B.., P.., J.., Q..]` and
    /// reads `x[b, p, idx[b, j], q]`. An index outside `[0, n)` reads zero (the facade clamps
    /// or wraps before; this keeps the op and [`Op::IndexScatter`] exact transposes).
    IndexGather {
        axis: usize,
        batch: usize,
    },
    /// `index_scatter(base, idx, updates)`: the transpose layout of [`Op::IndexGather`];
    /// `updates: [B.., P.., J.., Q..]` is combined by `mode` into a copy of `base` at
    /// `idx[b, j]` of `axis`. Indices outside `[0, n)` are dropped.
    IndexScatter {
        axis: usize,
        batch: usize,
        mode: ScatterMode,
    },
    /// Batched matrix product `[..., m, k] x [..., k, n]` with broadcast batch axes.
    Matmul,
    /// `solve(a, b)`: `a [..., n, n]`, `b [..., n, k]` by the LU factorization (partial
    /// pivoting) of `a`; with `transpose_a` it solves `aᵀ x = b` with the factors of `a` itself
    /// (never of `aᵀ`), so every solve with one matrix, either way round, and its `slogdet` can
    /// share one factorization and give the bits each would alone.
    Solve {
        transpose_a: bool,
    },
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

code_table! {
    /// The kind of an [`Op`], without its attributes: the op table of the IR. Its code is the
    /// op's tag in the plan wire format; its name is the op's text name, except for the
    /// families (`unary`, `binary`, `compare`, the reductions' and regions' forms), which print
    /// by function, predicate or form. `custom` nodes are never encoded (its tag is refused).
    pub enum OpKind {
        Input = 0 => "input",
        Constant = 1 => "constant",
        Cast = 2 => "cast",
        Unary = 3 => "unary",
        Powi = 4 => "powi",
        Binary = 5 => "binary",
        Compare = 6 => "compare",
        Where = 7 => "where",
        StopGradient = 8 => "stop_gradient",
        Sum = 9 => "sum",
        SumAxis = 10 => "sum_axis",
        Mean = 11 => "mean",
        MeanAxis = 12 => "mean_axis",
        MaxAxis = 13 => "max_axis",
        MinAxis = 14 => "min_axis",
        Cumsum = 15 => "cumsum",
        Reshape = 16 => "reshape",
        Transpose = 17 => "transpose",
        Broadcast = 18 => "broadcast",
        Concat = 19 => "concat",
        Slice = 20 => "slice",
        PadSlice = 21 => "pad_slice",
        Gather = 22 => "gather",
        ScatterAdd = 23 => "scatter_add",
        Matmul = 24 => "matmul",
        Solve = 25 => "solve",
        Cholesky = 26 => "cholesky",
        CholeskyAd = 27 => "cholesky_ad",
        TriangularSolve = 28 => "triangular_solve",
        Linalg = 29 => "linalg",
        Region = 30 => "region",
        Custom = 31 => "custom",
        DebugPrint = 32 => "debug_print",
        IndexGather = 33 => "index_gather",
        IndexScatter = 34 => "index_scatter",
    }
}

/// How many operands an op takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    Exactly(usize),
    /// `concat`: one or more.
    AtLeastOne,
    /// `custom`: one per input of the rule's primal graph.
    OfRule,
    /// Region calls: the region's operands.
    OfRegion,
}

impl OpKind {
    /// The number of operands.
    pub fn arity(self) -> Arity {
        use Arity::Exactly;
        match self {
            OpKind::Input | OpKind::Constant => Exactly(0),
            OpKind::Cast
            | OpKind::Unary
            | OpKind::Powi
            | OpKind::StopGradient
            | OpKind::Sum
            | OpKind::SumAxis
            | OpKind::Mean
            | OpKind::MeanAxis
            | OpKind::MaxAxis
            | OpKind::MinAxis
            | OpKind::Cumsum
            | OpKind::Reshape
            | OpKind::Transpose
            | OpKind::Broadcast
            | OpKind::Slice
            | OpKind::PadSlice
            | OpKind::Gather
            | OpKind::Cholesky
            | OpKind::DebugPrint
            | OpKind::Linalg => Exactly(1),
            OpKind::Binary
            | OpKind::Compare
            | OpKind::ScatterAdd
            | OpKind::IndexGather
            | OpKind::Matmul
            | OpKind::Solve
            | OpKind::CholeskyAd
            | OpKind::TriangularSolve => Exactly(2),
            OpKind::Where | OpKind::IndexScatter => Exactly(3),
            OpKind::Concat => Arity::AtLeastOne,
            OpKind::Custom => Arity::OfRule,
            OpKind::Region => Arity::OfRegion,
        }
    }

    /// The names of the `key=value` attributes of the op's text form, in printing order.
    /// Bare attributes (a constant's literal, a cast's dtype, `weak`, a `powi` exponent) and the
    /// families' names are not listed.
    pub fn attribute_names(self) -> &'static [&'static str] {
        match self {
            OpKind::Input => &["name"],
            OpKind::SumAxis | OpKind::MeanAxis | OpKind::MaxAxis | OpKind::MinAxis => &["axes"],
            OpKind::Cumsum => &["axis", "reverse"],
            OpKind::Reshape | OpKind::Broadcast => &["shape"],
            OpKind::Transpose => &["perm"],
            OpKind::Concat => &["axis"],
            OpKind::Slice => &["starts", "sizes"],
            OpKind::PadSlice => &["starts", "shape"],
            OpKind::Gather | OpKind::ScatterAdd => &["axis", "indices"],
            OpKind::IndexGather => &["axis", "batch"],
            OpKind::IndexScatter => &["axis", "batch", "mode"],
            OpKind::Solve => &["transpose_a"],
            OpKind::TriangularSolve => &["lower", "transpose_a", "unit_diagonal"],
            OpKind::Linalg => &["kind"],
            OpKind::Custom => &["name", "output"],
            OpKind::DebugPrint => &["format", "per_example"],
            OpKind::Region => &["lower", "upper", "length", "start", "carries", "xs", "same"],
            OpKind::Constant
            | OpKind::Cast
            | OpKind::Unary
            | OpKind::Powi
            | OpKind::Binary
            | OpKind::Compare
            | OpKind::Where
            | OpKind::StopGradient
            | OpKind::Sum
            | OpKind::Mean
            | OpKind::Matmul
            | OpKind::Cholesky
            | OpKind::CholeskyAd => &[],
        }
    }
}

impl From<ReduceKind> for OpKind {
    fn from(kind: ReduceKind) -> OpKind {
        match kind {
            ReduceKind::Sum => OpKind::Sum,
            ReduceKind::SumAxis => OpKind::SumAxis,
            ReduceKind::Mean => OpKind::Mean,
            ReduceKind::MeanAxis => OpKind::MeanAxis,
            ReduceKind::MaxAxis => OpKind::MaxAxis,
            ReduceKind::MinAxis => OpKind::MinAxis,
        }
    }
}

impl OpKind {
    /// The kind of the op a text name names: a function, predicate or region form of a
    /// family, or the name of an op of the table (the families' own names, `unary`,
    /// `binary`, `compare` and `region`, are not text names).
    pub fn from_text_name(name: &str) -> Option<OpKind> {
        if UnaryOp::from_name(name).is_some() {
            return Some(OpKind::Unary);
        }
        if BinaryOp::from_name(name).is_some() {
            return Some(OpKind::Binary);
        }
        if Comparison::from_name(name).is_some() {
            return Some(OpKind::Compare);
        }
        if crate::region::RegionForm::from_name(name).is_some() {
            return Some(OpKind::Region);
        }
        match OpKind::from_name(name)? {
            OpKind::Unary | OpKind::Binary | OpKind::Compare | OpKind::Region => None,
            kind => Some(kind),
        }
    }

    /// The reduction form of a reduction kind.
    pub fn reduce_kind(self) -> Option<ReduceKind> {
        ReduceKind::ALL
            .into_iter()
            .find(|&k| OpKind::from(k) == self)
    }
}

impl Op {
    /// The op's entry in the op table.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Input { .. } => OpKind::Input,
            Op::Constant { .. } => OpKind::Constant,
            Op::Cast { .. } => OpKind::Cast,
            Op::Unary(_) => OpKind::Unary,
            Op::Powi(_) => OpKind::Powi,
            Op::Binary(_) => OpKind::Binary,
            Op::Compare(_) => OpKind::Compare,
            Op::Where => OpKind::Where,
            Op::StopGradient => OpKind::StopGradient,
            Op::DebugPrint { .. } => OpKind::DebugPrint,
            Op::Reduce { kind, .. } => OpKind::from(*kind),
            Op::Cumsum { .. } => OpKind::Cumsum,
            Op::Reshape { .. } => OpKind::Reshape,
            Op::Transpose { .. } => OpKind::Transpose,
            Op::Broadcast { .. } => OpKind::Broadcast,
            Op::Concat { .. } => OpKind::Concat,
            Op::Slice { .. } => OpKind::Slice,
            Op::PadSlice { .. } => OpKind::PadSlice,
            Op::Gather { .. } => OpKind::Gather,
            Op::ScatterAdd { .. } => OpKind::ScatterAdd,
            Op::IndexGather { .. } => OpKind::IndexGather,
            Op::IndexScatter { .. } => OpKind::IndexScatter,
            Op::Matmul => OpKind::Matmul,
            Op::Solve { .. } => OpKind::Solve,
            Op::Cholesky => OpKind::Cholesky,
            Op::CholeskyAd => OpKind::CholeskyAd,
            Op::TriangularSolve { .. } => OpKind::TriangularSolve,
            Op::Linalg(_) => OpKind::Linalg,
            Op::Custom(_) => OpKind::Custom,
            Op::Region(_) => OpKind::Region,
        }
    }

    /// The text name of the op (transforms.md §16): the table's name, or the function,
    /// predicate or form of a family.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Compare(c) => c.name(),
            Op::Region(call) => call.region.form().name(),
            other => other.kind().name(),
        }
    }

    /// The op of a whole-tensor or per-axis reduction of `reducer` over `axes` (sorted,
    /// distinct) of a rank-`rank` operand.
    pub fn reduce(reducer: Reducer, axes: Vec<usize>, rank: usize) -> Op {
        Op::Reduce {
            kind: ReduceKind::of(reducer, axes.len(), rank),
            axes,
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

    /// Ops with an effect ([`Op::DebugPrint`]): live whether or not their result is used, and
    /// never merged with an equal node.
    pub fn is_effect(&self) -> bool {
        matches!(self, Op::DebugPrint { .. })
    }

    pub fn is_leaf(&self) -> bool {
        matches!(self, Op::Input { .. } | Op::Constant { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::RegionForm;

    /// Every kind of every table round-trips through its name and its code, and `ALL` lists
    /// each kind once (the tables generate `ALL` from the same rows, so a kind cannot be
    /// missing; this checks that the rows are distinct and the lookups agree).
    macro_rules! check_table {
        ($($ty:ty),*) => {$(
            let all = <$ty>::ALL;
            for (i, k) in all.iter().enumerate() {
                assert_eq!(<$ty>::from_name(k.name()), Some(*k), "{k:?}");
                assert_eq!(<$ty>::from_code(k.code()), Some(*k), "{k:?}");
                assert!(!all[..i].contains(k), "{k:?} listed twice");
            }
        )*};
    }

    #[test]
    fn tables_round_trip_names_and_codes() {
        check_table!(
            OpKind,
            UnaryOp,
            BinaryOp,
            Comparison,
            ReduceKind,
            LinalgKind,
            RegionForm,
            ScatterMode
        );
    }

    #[test]
    fn every_text_name_finds_its_kind() {
        for u in UnaryOp::ALL {
            assert_eq!(OpKind::from_text_name(u.name()), Some(OpKind::Unary));
        }
        for b in BinaryOp::ALL {
            assert_eq!(OpKind::from_text_name(b.name()), Some(OpKind::Binary));
        }
        for c in Comparison::ALL {
            assert_eq!(OpKind::from_text_name(c.name()), Some(OpKind::Compare));
        }
        for f in RegionForm::ALL {
            assert_eq!(OpKind::from_text_name(f.name()), Some(OpKind::Region));
        }
        for r in ReduceKind::ALL {
            let kind = OpKind::from(r);
            assert_eq!(OpKind::from_text_name(r.name()), Some(kind));
            assert_eq!(kind.name(), r.name());
            assert_eq!(kind.code(), r.code(), "a reduction's form is its wire tag");
            assert_eq!(kind.reduce_kind(), Some(r));
        }
        // The families' own names are not text names.
        for family in ["unary", "binary", "compare", "region"] {
            assert_eq!(OpKind::from_text_name(family), None, "{family}");
        }
        for kind in OpKind::ALL {
            let families = [
                OpKind::Unary,
                OpKind::Binary,
                OpKind::Compare,
                OpKind::Region,
            ];
            if !families.contains(&kind) {
                assert_eq!(OpKind::from_text_name(kind.name()), Some(kind));
            }
        }
    }

    #[test]
    fn arity_and_attributes_come_from_the_table() {
        assert_eq!(OpKind::Where.arity(), Arity::Exactly(3));
        assert_eq!(OpKind::Concat.arity(), Arity::AtLeastOne);
        assert_eq!(OpKind::Cumsum.attribute_names(), ["axis", "reverse"]);
        let sum = Op::reduce(Reducer::Sum, vec![0, 1], 2);
        assert_eq!((sum.kind(), sum.name()), (OpKind::Sum, "sum"));
        let max = Op::reduce(Reducer::Max, vec![0, 1], 2);
        assert_eq!(max.name(), "max_axis");
        assert_eq!(Op::reduce(Reducer::Mean, vec![1], 2).name(), "mean_axis");
    }
}
