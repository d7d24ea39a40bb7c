//! Loops fused into one kernel: a `fori`/`scan` whose body is elementwise over carries of one
//! shape (each work item runs the whole loop for its element), and a `while_loop` over rank-0
//! carries with elementwise `cond` and `body` (one work item runs the whole loop on the
//! device: no predicate readback at all). The body's nodes are the expressions of
//! [`super::elementwise`], so a fused loop computes what the same body computes unfused.
//! Each carry keeps its own type (the program's floating type, or its integer type).

use super::elementwise::{member_statements, External, Member, Source, Value};
use super::{broadcast_index, convert, kernel};
use crate::program::{Elem, Kernel, Param};

/// An elementwise body graph: its members and, per output, where it comes from. Its inputs
/// are numbered as [`Source::External`]: for a counted loop `0` is the index, then the
/// carries, then the consts; for a `while_loop`, the carries then the consts.
#[derive(Clone, Debug, PartialEq)]
pub struct Body {
    pub members: Vec<Member>,
    pub outputs: Vec<Source>,
}

/// The C expression of body output `src` as a value of type `to`, in a program of floating
/// type `t`.
fn output_expr(
    body: &Body,
    src: &Source,
    to: Elem,
    t: Elem,
    input: &dyn Fn(usize) -> Value,
) -> String {
    let v = match src {
        Source::Member(j) => Value::new(format!("v{j}"), body.members[*j].elem(t)),
        Source::External(k) => input(*k),
        Source::Literal(x) => {
            let (text, elem) = x.literal(to);
            Value::new(text, elem)
        }
    };
    convert(&v.expr, v.elem, to)
}

/// The statements of one trip of `body`: its members, then the new carries (of types
/// `carry_types`) computed before any is assigned (the first outputs, into `c0, c1, ...`).
fn trip(
    body: &Body,
    carry_types: &[Elem],
    t: Elem,
    input: &dyn Fn(usize) -> Value,
    indent: &str,
) -> String {
    let mut s = member_statements(&body.members, t, input, indent);
    for (j, (src, &e)) in body.outputs.iter().zip(carry_types).enumerate() {
        s.push_str(&format!(
            "{indent}const {} n{j} = {};\n",
            e.c_name(),
            output_expr(body, src, e, t, input)
        ));
    }
    for j in 0..carry_types.len() {
        s.push_str(&format!("{indent}c{j} = n{j};\n"));
    }
    s
}

/// The shape of a fused counted loop: `length` trips with index `start + k` (`k` decreasing
/// when `reverse`), held in a variable of type `index` (the index parameter's floating type:
/// float64 when the index is float64, so that every index is exact).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trips {
    pub length: usize,
    pub start: usize,
    pub reverse: bool,
    pub index: Elem,
}

/// A counted loop of `trips`, one work item per element of the carries' shape `dims`.
/// Parameters: the carries' initial values (`carry_elems`), the consts (`consts`, read
/// broadcast to `dims`), then the final carries (`out_elems`). The carries are variables of
/// `carry_types` (their values' types in a program of floating type `t`).
#[allow(clippy::too_many_arguments)]
pub fn counted(
    dims: &[usize],
    trips: Trips,
    carry_elems: &[Elem],
    carry_types: &[Elem],
    consts: &[External],
    out_elems: &[Elem],
    body: &Body,
    t: Elem,
) -> Kernel {
    let Trips {
        length,
        start,
        reverse,
        index,
    } = trips;
    let nc = carry_elems.len();
    let mut params: Vec<Param> = carry_elems.iter().map(|&e| Param::In(e)).collect();
    params.extend(consts.iter().map(|c| Param::In(c.elem)));
    params.extend(out_elems.iter().map(|&e| Param::Out(e)));
    let mut s = String::from("    const long long i = qb_i;\n");
    for (j, (&e, &c)) in carry_elems.iter().zip(carry_types).enumerate() {
        s.push_str(&format!(
            "    {} c{j} = {};\n",
            c.c_name(),
            convert(&format!("p{j}[i]"), e, c)
        ));
    }
    for (j, c) in consts.iter().enumerate() {
        s.push_str(&format!(
            "    const {} k{j} = p{}[{}];\n",
            c.elem.c_name(),
            nc + j,
            broadcast_index("i", &c.dims, dims)
        ));
    }
    let consts_elems: Vec<Elem> = consts.iter().map(|c| c.elem).collect();
    let types = carry_types.to_vec();
    let input = move |k: usize| -> Value {
        if k == 0 {
            Value::new("idx", index)
        } else if k <= nc {
            Value::new(format!("c{}", k - 1), types[k - 1])
        } else {
            Value::new(format!("k{}", k - 1 - nc), consts_elems[k - 1 - nc])
        }
    };
    let position = if reverse {
        format!("({}LL - it)", length - 1)
    } else {
        "it".to_string()
    };
    s.push_str(&format!(
        "    for (long long it = 0; it < {length}LL; ++it) {{\n\
         \x20     const {tc} idx = {};\n{}\
         \x20   }}\n",
        convert(
            &format!("(double)({start}LL + {position})"),
            Elem::F64,
            index
        ),
        trip(body, carry_types, t, &input, "      "),
        tc = index.c_name(),
    ));
    let base = nc + consts.len();
    for (j, (&e, &c)) in out_elems.iter().zip(carry_types).enumerate() {
        s.push_str(&format!(
            "    p{}[i] = {};\n",
            base + j,
            convert(&format!("c{j}"), c, e)
        ));
    }
    kernel(params, &s)
}

/// A `while_loop` over rank-0 carries run by one work item: `cond` returns the predicate
/// (output 0), `body` the new carries; at most `max_trips` trips when bounded. Parameters as
/// [`counted`]'s (every value has one element).
#[allow(clippy::too_many_arguments)]
pub fn scalar_while(
    carry_elems: &[Elem],
    carry_types: &[Elem],
    const_elems: &[Elem],
    out_elems: &[Elem],
    cond: &Body,
    body: &Body,
    max_trips: Option<usize>,
    t: Elem,
) -> Kernel {
    let nc = carry_elems.len();
    let mut params: Vec<Param> = carry_elems.iter().map(|&e| Param::In(e)).collect();
    params.extend(const_elems.iter().map(|&e| Param::In(e)));
    params.extend(out_elems.iter().map(|&e| Param::Out(e)));
    let mut s = String::new();
    for (j, (&e, &c)) in carry_elems.iter().zip(carry_types).enumerate() {
        s.push_str(&format!(
            "    {} c{j} = {};\n",
            c.c_name(),
            convert(&format!("p{j}[0]"), e, c)
        ));
    }
    for (j, &e) in const_elems.iter().enumerate() {
        s.push_str(&format!(
            "    const {} k{j} = p{}[0];\n",
            e.c_name(),
            nc + j
        ));
    }
    let consts = const_elems.to_vec();
    let types = carry_types.to_vec();
    let input = move |k: usize| -> Value {
        if k < nc {
            Value::new(format!("c{k}"), types[k])
        } else {
            Value::new(format!("k{}", k - nc), consts[k - nc])
        }
    };
    let bound = match max_trips {
        Some(m) => format!("      if (trip >= {m}LL) break;\n"),
        None => String::new(),
    };
    let pred_stmts = member_statements(&cond.members, t, &input, "        ");
    let pred = output_expr(cond, &cond.outputs[0], t, t, &input);
    s.push_str(&format!(
        "    for (long long trip = 0;; ++trip) {{\n{bound}\
         \x20     {{\n{pred_stmts}\
         \x20       if (!({pred} != 0)) break;\n\
         \x20     }}\n\
         \x20     {{\n{}\
         \x20     }}\n\
         \x20   }}\n",
        trip(body, carry_types, t, &input, "        "),
    ));
    let base = nc + const_elems.len();
    for (j, (&e, &c)) in out_elems.iter().zip(carry_types).enumerate() {
        s.push_str(&format!(
            "    p{}[0] = {};\n",
            base + j,
            convert(&format!("c{j}"), c, e)
        ));
    }
    kernel(params, &s)
}
