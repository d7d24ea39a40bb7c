//! Elementwise code: the C expression of every elementwise op, and the kernel of a fused group.
//!
//! Precision (numerics.md §1.6, `docs/cuda.md`): a node is computed natively in the program's
//! floating type `T`, each node rounding once, with contraction into fused multiply-adds off
//! (`--fmad=false`), so `+ - * / sqrt` give the reference's bits; transcendental functions
//! come from CUDA's math library (a few ulp from the reference). `powi` is computed in float64
//! by the reference's multiplication sequence and rounded once, which gives the reference's
//! bits. Booleans are `T` values 0 and 1. A value loaded from a buffer keeps its stored type
//! until an op needs `T`: a node of a float32 program whose operands are all float64 values
//! read from memory (a float64 input, say) is computed in float64 and rounded once, so the
//! first operation on a float64 input sees its exact value (`fmod(0.1, 0.001)` and
//! `float64 -> bool` of `1e-310` are the reference's, not those of the inputs rounded to
//! float32); every later node computes in float32.
//!
//! Integer nodes compute in their own type (`int` for int32, `long long` for int64), never
//! through a floating type, with the functions of the prelude (`codegen::INT_PRELUDE`):
//! wrapping `+ - *`, NumPy's floor division and remainder, the shift rules and the float to
//! integer conversion of numerics.md §12, exactly `quabla_ir::eval`'s. Comparisons of
//! integers compare the integers; an integer converts to a float by C's conversion (the
//! nearest value, one rounding), as `HostData::cast` does. Bitwise functions of bools are the
//! logical ones on their 0/1 values.

use super::{broadcast_index, convert, int_literal, kernel, literal, Scalar};
use crate::program::{value_elem, Elem, Kernel, Param};
use quabla_ir::{BinaryOp, Comparison, DType, Op, UnaryOp};

/// A value an expression reads: a C expression and its type.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub expr: String,
    pub elem: Elem,
}

impl Value {
    pub fn new(expr: impl Into<String>, elem: Elem) -> Value {
        Value {
            expr: expr.into(),
            elem,
        }
    }

    /// The value as `t`.
    fn as_t(&self, t: Elem) -> String {
        convert(&self.expr, self.elem, t)
    }
}

/// The C math function of a unary op for `t` (`sinf` for float, `sin` for double), or `None`
/// for the ops written as operators.
fn unary_function(op: UnaryOp) -> Option<&'static str> {
    Some(match op {
        // `bitwise_not` has no expression at all (see `expression`).
        UnaryOp::Neg | UnaryOp::BitNot => return None,
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
        UnaryOp::Arcsin => "asin",
        UnaryOp::Arccos => "acos",
        UnaryOp::Arctan => "atan",
        UnaryOp::Sinh => "sinh",
        UnaryOp::Cosh => "cosh",
        UnaryOp::Arcsinh => "asinh",
        UnaryOp::Arccosh => "acosh",
        UnaryOp::Arctanh => "atanh",
        UnaryOp::Log2 => "log2",
        UnaryOp::Log10 => "log10",
        UnaryOp::Cbrt => "cbrt",
        UnaryOp::Floor => "floor",
        UnaryOp::Ceil => "ceil",
        // Ties to even in the default rounding mode.
        UnaryOp::Round => "rint",
    })
}

/// The C function name of `base` for `t`.
fn math(base: &str, t: Elem) -> String {
    match t {
        Elem::F32 => format!("{base}f"),
        _ => base.to_string(),
    }
}

fn bool_to_t(cond: &str, t: Elem) -> String {
    format!("(({cond}) ? {} : {})", literal(1.0, t), literal(0.0, t))
}

/// The C operator of a comparison.
fn comparison(c: Comparison) -> &'static str {
    match c {
        Comparison::Greater => ">",
        Comparison::GreaterEqual => ">=",
        Comparison::Less => "<",
        Comparison::LessEqual => "<=",
        Comparison::Equal => "==",
        Comparison::NotEqual => "!=",
    }
}

/// The C expression, of type `t`, of elementwise op `op` on `operands`: `t` is the program's
/// floating type (or float64, see the module docs) for a floating or bool result, the
/// integer type itself for an integer result. `None` for an op that is not elementwise, or
/// not defined at these types (the IR's type rules never build one).
pub fn expression(op: &Op, operands: &[Value], t: Elem) -> Option<String> {
    if t.is_int() {
        return integer_expression(op, operands, t);
    }
    let a = |i: usize| operands[i].as_t(t);
    // A bool operand as a C condition (bools are 0 or 1 of a floating type).
    let truth = |i: usize| format!("({} != 0)", operands[i].expr);
    let integers = operands.first().is_some_and(|v| v.elem.is_int());
    Some(match op {
        // On bools, the only operands these take besides integers: logical functions.
        Op::Unary(UnaryOp::BitNot) => bool_to_t(&format!("!{}", truth(0)), t),
        Op::Binary(BinaryOp::BitAnd) => bool_to_t(&format!("{} && {}", truth(0), truth(1)), t),
        Op::Binary(BinaryOp::BitOr) => bool_to_t(&format!("{} || {}", truth(0), truth(1)), t),
        Op::Binary(BinaryOp::BitXor) => bool_to_t(&format!("{} != {}", truth(0), truth(1)), t),
        Op::Unary(u) => match unary_function(*u) {
            Some(f) => format!("{}({})", math(f, t), a(0)),
            None => format!("(-{})", a(0)),
        },
        Op::Powi(n) => convert(&format!("qb_powi((double)({}), {n})", a(0)), Elem::F64, t),
        Op::Binary(b) => match b {
            BinaryOp::Add => format!("({} + {})", a(0), a(1)),
            BinaryOp::Sub => format!("({} - {})", a(0), a(1)),
            BinaryOp::Mul => format!("({} * {})", a(0), a(1)),
            BinaryOp::Div => format!("({} / {})", a(0), a(1)),
            BinaryOp::Pow => format!("{}({}, {})", math("pow", t), a(0), a(1)),
            BinaryOp::Atan2 => format!("{}({}, {})", math("atan2", t), a(0), a(1)),
            BinaryOp::Fmod => format!("{}({}, {})", math("fmod", t), a(0), a(1)),
            // Integer functions have integer results (bool ones are above).
            BinaryOp::FloorDiv
            | BinaryOp::Rem
            | BinaryOp::BitAnd
            | BinaryOp::BitOr
            | BinaryOp::BitXor
            | BinaryOp::ShiftLeft
            | BinaryOp::ShiftRightArithmetic
            | BinaryOp::ShiftRightLogical => return None,
        },
        // Integers compare exactly in their own type.
        Op::Compare(c) if integers => bool_to_t(
            &format!(
                "{} {} {}",
                operands[0].expr,
                comparison(*c),
                operands[1].expr
            ),
            t,
        ),
        Op::Compare(c) => bool_to_t(&format!("{} {} {}", a(0), comparison(*c), a(1)), t),
        // The predicate is tested as stored (0 or 1 of any floating type).
        Op::Where => format!("(({} != 0) ? {} : {})", operands[0].expr, a(1), a(2)),
        Op::Cast { to, .. } => match to {
            // Nonzero is true, NaN is true (numerics.md §1.4), tested on the stored value.
            DType::Bool => {
                let x = &operands[0].expr;
                if integers {
                    bool_to_t(&format!("{x} != 0"), t)
                } else {
                    bool_to_t(&format!("{x} != 0 || {x} != {x}"), t)
                }
            }
            // From an integer: the nearest value, one rounding (C's conversion).
            DType::F32 | DType::F64 => a(0),
            DType::I32 | DType::I64 => return None,
        },
        Op::StopGradient => a(0),
        _ => return None,
    })
}

/// [`expression`] for an integer result of type `t` (`int` or `long long`): the functions of
/// the prelude, which give `quabla_ir::eval`'s values (see `codegen::INT_PRELUDE`).
fn integer_expression(op: &Op, operands: &[Value], t: Elem) -> Option<String> {
    let s = t.tag();
    let a = |i: usize| operands[i].as_t(t);
    let call = |f: &str, args: &[String]| format!("qb_{f}_{s}({})", args.join(", "));
    Some(match op {
        Op::Cast { .. } => {
            let x = &operands[0];
            if x.elem.is_int() {
                // Wraps to the narrower type, sign-extends to the wider.
                convert(&x.expr, x.elem, t)
            } else {
                // Floats and bools (0 or 1) truncate exactly from their stored value.
                call("f2i", &[format!("(double)({})", x.expr)])
            }
        }
        Op::Unary(UnaryOp::Neg) => call("neg", &[a(0)]),
        Op::Unary(UnaryOp::BitNot) => format!("((~{}))", a(0)),
        Op::Unary(_) => return None,
        Op::Powi(n) => call("pow", &[a(0), int_literal(i64::from(*n), t)]),
        Op::Binary(b) => {
            let f = match b {
                BinaryOp::Add => "add",
                BinaryOp::Sub => "sub",
                BinaryOp::Mul => "mul",
                BinaryOp::Pow => "pow",
                BinaryOp::FloorDiv => "floordiv",
                BinaryOp::Rem => "rem",
                BinaryOp::ShiftLeft => "shl",
                BinaryOp::ShiftRightArithmetic => "sar",
                BinaryOp::ShiftRightLogical => "shr",
                BinaryOp::BitAnd => return Some(format!("({} & {})", a(0), a(1))),
                BinaryOp::BitOr => return Some(format!("({} | {})", a(0), a(1))),
                BinaryOp::BitXor => return Some(format!("({} ^ {})", a(0), a(1))),
                // Float-only functions.
                BinaryOp::Div | BinaryOp::Atan2 | BinaryOp::Fmod => return None,
            };
            call(f, &[a(0), a(1)])
        }
        Op::Where => format!("(({} != 0) ? {} : {})", operands[0].expr, a(1), a(2)),
        Op::StopGradient => a(0),
        _ => return None,
    })
}

/// An operand of a fused group read from memory: its type and the shape it is read with
/// (broadcast to the group's shape).
#[derive(Clone, Debug, PartialEq)]
pub struct External {
    pub elem: Elem,
    pub dims: Vec<usize>,
}

/// Where a member's operand comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// An earlier member of the group.
    Member(usize),
    /// External operand `k` (a kernel parameter).
    External(usize),
    /// A literal: a floating one in the type of the expression that reads it, an integer in
    /// its own type.
    Literal(Scalar),
}

/// One node of a fused group, with the dtype of its result.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    pub op: Op,
    pub operands: Vec<Source>,
    pub dtype: DType,
}

impl Member {
    /// The type of the member's variable in a program of floating type `t`.
    pub fn elem(&self, t: Elem) -> Elem {
        value_elem(self.dtype, t)
    }
}

/// A fused elementwise group: every member has the group's shape; `outputs` are the members
/// written to memory, each with its stored type.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub dims: Vec<usize>,
    pub externals: Vec<External>,
    pub members: Vec<Member>,
    pub outputs: Vec<(usize, Elem)>,
}

/// The statements that evaluate `members` into variables `v{i}` (of the type
/// [`Member::elem`] gives in a program of type `t`), reading externals through `external(k)`
/// and member values through `v{i}`.
pub fn member_statements(
    members: &[Member],
    t: Elem,
    external: &dyn Fn(usize) -> Value,
    indent: &str,
) -> String {
    let mut body = String::new();
    for (i, m) in members.iter().enumerate() {
        let elem = m.elem(t);
        // A floating node reading only float64 values from memory (and literals) is computed
        // in float64 and rounded once, so a float32 program keeps the exact values of its
        // float64 inputs through their first operation (see the module docs). An integer
        // node computes in its own type.
        let loaded: Vec<Elem> = m
            .operands
            .iter()
            .filter_map(|s| match s {
                Source::Member(j) => Some(members[*j].elem(t)),
                Source::External(k) => Some(external(*k).elem),
                Source::Literal(_) => None,
            })
            .collect();
        let compute = if elem.is_int() {
            elem
        } else if t == Elem::F32 && !loaded.is_empty() && loaded.iter().all(|&e| e == Elem::F64) {
            Elem::F64
        } else {
            t
        };
        let operands: Vec<Value> = m
            .operands
            .iter()
            .map(|s| match s {
                Source::Member(j) => Value::new(format!("v{j}"), members[*j].elem(t)),
                Source::External(k) => external(*k),
                Source::Literal(x) => {
                    // A floating literal read by an integer node (a cast's operand) keeps
                    // float64.
                    let (text, elem) =
                        x.literal(if compute.is_int() { Elem::F64 } else { compute });
                    Value::new(text, elem)
                }
            })
            .collect();
        let e = expression(&m.op, &operands, compute)
            .unwrap_or_else(|| panic!("{} is not an elementwise op", m.op.name()));
        body.push_str(&format!(
            "{indent}const {} v{i} = {};\n",
            elem.c_name(),
            convert(&e, compute, elem)
        ));
    }
    body
}

/// The kernel of a fused group: parameters are the externals (in order), then the outputs.
pub fn group_kernel(group: &Group, t: Elem) -> Kernel {
    let mut params: Vec<Param> = group.externals.iter().map(|e| Param::In(e.elem)).collect();
    params.extend(group.outputs.iter().map(|&(_, e)| Param::Out(e)));
    let mut body = String::from("    const long long i = qb_i;\n");
    for (k, ext) in group.externals.iter().enumerate() {
        let index = broadcast_index("i", &ext.dims, &group.dims);
        body.push_str(&format!(
            "    const {} x{k} = p{k}[{index}];\n",
            ext.elem.c_name()
        ));
    }
    let externals = group.externals.clone();
    body.push_str(&member_statements(
        &group.members,
        t,
        &|k| Value::new(format!("x{k}"), externals[k].elem),
        "    ",
    ));
    let base = group.externals.len();
    for (o, &(member, elem)) in group.outputs.iter().enumerate() {
        body.push_str(&format!(
            "    p{}[i] = {};\n",
            base + o,
            convert(&format!("v{member}"), group.members[member].elem(t), elem)
        ));
    }
    kernel(params, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_elementwise_op_has_an_expression_of_each_type_it_takes() {
        let x = Value::new("x", Elem::F64);
        let y = Value::new("y", Elem::F32);
        let mut ops: Vec<Op> = UnaryOp::ALL.iter().map(|&u| Op::Unary(u)).collect();
        ops.extend(BinaryOp::ALL.iter().map(|&b| Op::Binary(b)));
        ops.extend(Comparison::ALL.iter().map(|&c| Op::Compare(c)));
        ops.extend([
            Op::Powi(3),
            Op::Where,
            Op::StopGradient,
            Op::Cast {
                to: DType::Bool,
                weak: false,
            },
            Op::Cast {
                to: DType::F32,
                weak: false,
            },
        ]);
        // Functions with integer results only have no floating expression.
        let integer_only =
            |op: &Op| matches!(op, Op::Binary(b) if b.is_integer_only() && !b.is_bitwise());
        for op in &ops {
            assert!(op.is_elementwise(), "{op:?}");
            for t in [Elem::F32, Elem::F64] {
                let operands = [x.clone(), y.clone(), x.clone()];
                let e = expression(op, &operands, t);
                assert_eq!(e.is_none(), integer_only(op), "{op:?}");
                assert!(e.is_none_or(|e| !e.is_empty()));
            }
        }
        // Every function integers take has an expression of each integer type; the
        // float-only ones have none.
        let ints = |e: Elem| [Value::new("a", e), Value::new("b", e), Value::new("c", e)];
        for op in &ops {
            let takes_integers = match op {
                Op::Unary(u) => u.takes_integers(),
                Op::Binary(b) => !b.is_float_only(),
                Op::Compare(_) => false,
                _ => true,
            };
            for t in [Elem::I32, Elem::I64] {
                let e = expression(op, &ints(t), t);
                assert_eq!(e.is_some(), takes_integers, "{op:?} {t}");
            }
        }
        assert_eq!(
            expression(&Op::Binary(BinaryOp::FloorDiv), &ints(Elem::I64), Elem::I64).unwrap(),
            "qb_floordiv_i64(a, b)"
        );
        // Integers compare exactly, whatever the program's floating type.
        let lt = expression(&Op::Compare(Comparison::Less), &ints(Elem::I64), Elem::F32);
        assert_eq!(
            lt.unwrap(),
            "((a < b) ? qb_f32(0x3f800000u) : qb_f32(0x00000000u))"
        );
        // A float converts to an integer through the range-checked helper, from its stored
        // value.
        let to_int = Op::Cast {
            to: DType::I32,
            weak: false,
        };
        assert_eq!(
            expression(&to_int, std::slice::from_ref(&x), Elem::I32).unwrap(),
            "qb_f2i_i32((double)(x))"
        );
        assert_eq!(
            expression(&to_int, &ints(Elem::I64), Elem::I32).unwrap(),
            "((int)(a))"
        );
        assert_eq!(
            expression(
                &Op::Unary(UnaryOp::Sin),
                std::slice::from_ref(&y),
                Elem::F32
            )
            .unwrap(),
            "sinf(y)"
        );
        assert_eq!(
            expression(
                &Op::Unary(UnaryOp::Sin),
                std::slice::from_ref(&x),
                Elem::F32
            )
            .unwrap(),
            "sinf(((float)(x)))"
        );
        // A cast to bool tests the stored float64 value, not its float32 rounding.
        let cast = Op::Cast {
            to: DType::Bool,
            weak: false,
        };
        let e = expression(&cast, &[x], Elem::F32).unwrap();
        assert!(e.starts_with("((x != 0 || x != x)"), "{e}");
    }
}
