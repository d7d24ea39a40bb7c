//! Loops fused into one kernel: a `fori`/`scan` whose body is elementwise over carries of one
//! shape (each work item runs the whole loop for its element), and a `while_loop` over rank-0
//! carries with elementwise `cond` and `body` (one work item runs the whole loop on the
//! device: no predicate readback at all). The body's nodes are the expressions of
//! [`super::elementwise`], so a fused loop computes what the same body computes unfused.

use super::elementwise::{member_statements, External, Member, Source, Value};
use super::{broadcast_index, convert, kernel, literal};
use crate::program::{Elem, Kernel, Param};

/// An elementwise body graph: its members and, per output, where it comes from. Its inputs
/// are numbered as [`Source::External`]: for a counted loop `0` is the index, then the
/// carries, then the consts; for a `while_loop`, the carries then the consts.
#[derive(Clone, Debug, PartialEq)]
pub struct Body {
    pub members: Vec<Member>,
    pub outputs: Vec<Source>,
}

fn output_expr(src: &Source, t: Elem, input: &dyn Fn(usize) -> Value) -> String {
    match src {
        Source::Member(j) => format!("v{j}"),
        Source::External(k) => {
            let v = input(*k);
            convert(&v.expr, v.elem, t)
        }
        Source::Literal(x) => literal(*x, t),
    }
}

/// The statements of one trip of `body`: its members, then the new carries computed before
/// any is assigned (the first `carries` outputs, into `c0, c1, ...`).
fn trip(
    body: &Body,
    carries: usize,
    t: Elem,
    input: &dyn Fn(usize) -> Value,
    indent: &str,
) -> String {
    let mut s = member_statements(&body.members, t, input, indent);
    for (j, src) in body.outputs.iter().take(carries).enumerate() {
        s.push_str(&format!(
            "{indent}const {} n{j} = {};\n",
            t.c_name(),
            output_expr(src, t, input)
        ));
    }
    for j in 0..carries {
        s.push_str(&format!("{indent}c{j} = n{j};\n"));
    }
    s
}

/// A counted loop of `length` trips (index `start + k`, `k` decreasing when `reverse`), one
/// work item per element of the carries' shape `dims`. Parameters: the carries' initial
/// values (`carry_elems`), the consts (`consts`, read broadcast to `dims`), then the final
/// carries (`out_elems`).
#[allow(clippy::too_many_arguments)]
pub fn counted(
    dims: &[usize],
    length: usize,
    start: usize,
    reverse: bool,
    carry_elems: &[Elem],
    consts: &[External],
    out_elems: &[Elem],
    body: &Body,
    t: Elem,
) -> Kernel {
    let nc = carry_elems.len();
    let mut params: Vec<Param> = carry_elems.iter().map(|&e| Param::In(e)).collect();
    params.extend(consts.iter().map(|c| Param::In(c.elem)));
    params.extend(out_elems.iter().map(|&e| Param::Out(e)));
    let mut s = String::from("    const long long i = qb_i;\n");
    for (j, &e) in carry_elems.iter().enumerate() {
        s.push_str(&format!(
            "    {} c{j} = {};\n",
            t.c_name(),
            convert(&format!("p{j}[i]"), e, t)
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
    let input = move |k: usize| -> Value {
        if k == 0 {
            Value::new("idx", t)
        } else if k <= nc {
            Value::new(format!("c{}", k - 1), t)
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
        convert(&format!("(double)({start}LL + {position})"), Elem::F64, t),
        trip(body, nc, t, &input, "      "),
        tc = t.c_name(),
    ));
    let base = nc + consts.len();
    for (j, &e) in out_elems.iter().enumerate() {
        s.push_str(&format!(
            "    p{}[i] = {};\n",
            base + j,
            convert(&format!("c{j}"), t, e)
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
    for (j, &e) in carry_elems.iter().enumerate() {
        s.push_str(&format!(
            "    {} c{j} = {};\n",
            t.c_name(),
            convert(&format!("p{j}[0]"), e, t)
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
    let input = move |k: usize| -> Value {
        if k < nc {
            Value::new(format!("c{k}"), t)
        } else {
            Value::new(format!("k{}", k - nc), consts[k - nc])
        }
    };
    let bound = match max_trips {
        Some(m) => format!("      if (trip >= {m}LL) break;\n"),
        None => String::new(),
    };
    let pred_stmts = member_statements(&cond.members, t, &input, "        ");
    let pred = output_expr(&cond.outputs[0], t, &input);
    s.push_str(&format!(
        "    for (long long trip = 0;; ++trip) {{\n{bound}\
         \x20     {{\n{pred_stmts}\
         \x20       if (!({pred} != 0)) break;\n\
         \x20     }}\n\
         \x20     {{\n{}\
         \x20     }}\n\
         \x20   }}\n",
        trip(body, nc, t, &input, "        "),
    ));
    let base = nc + const_elems.len();
    for (j, &e) in out_elems.iter().enumerate() {
        s.push_str(&format!(
            "    p{}[0] = {};\n",
            base + j,
            convert(&format!("c{j}"), t, e)
        ));
    }
    kernel(params, &s)
}
