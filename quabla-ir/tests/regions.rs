//! Region nodes in the text format, the wire format and the passes: golden texts of every
//! region kind (`tests/text/*.txt`), round trips that keep sibling groups sharing one region,
//! parse and decode errors, and random region-bearing graphs through the printer, the parser,
//! the wire format and every pass (values checked by a reference evaluator of the bodies).

mod common;

use common::{body, call, random_region, region, region_of, run, same_structure, ty, Golden};
use proptest::prelude::*;
use quabla_ir::text::{parse_graph, print_graph, OutputStyle};
use quabla_ir::wire::{decode_graph, encode_graph, MAX_REGION_DEPTH, WIRE_VERSION};
use quabla_ir::{
    passes, region_groups, BinaryOp, Comparison, DType, Graph, GraphBuilder, HostData, NodeId, Op,
    RegionForm, RegionKind, ScanBody, Shape, TensorType, UnaryOp, WireError,
};
use std::fs;
use std::path::Path;
use std::sync::Arc;

fn scalar(dtype: DType) -> TensorType {
    TensorType::new(dtype, Shape::scalar())
}

// ---------------------------------------------------------------------------------------------
// Sample graphs, one per region feature

/// `cond(p, x)`: sin on the true branch, neg on the false one.
fn cond_graph() -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", ty(DType::F64, &[3]));
    let p = b.input("p", scalar(DType::Bool));
    let ins = [("operand0", ty(DType::F64, &[3]))];
    let then_branch = body(&ins, |g, p| vec![g.unary(UnaryOp::Sin, p[0]).unwrap()]);
    let else_branch = body(&ins, |g, p| vec![g.unary(UnaryOp::Neg, p[0]).unwrap()]);
    let r = region(
        RegionKind::Cond {
            then_branch,
            else_branch,
        },
        RegionForm::Cond,
        0,
    );
    let y = call(&mut b, &r, &[p, x], &[0]);
    b.finish(y).unwrap()
}

/// `fori_loop(2, 7, lambda i, c, w: c * w + i, x, operands=(w,))`.
fn fori_graph() -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", ty(DType::F64, &[3]));
    let w = b.input("w", ty(DType::F64, &[3]));
    let ins = [
        ("i", scalar(DType::F64)),
        ("carry", ty(DType::F64, &[3])),
        ("operand0", ty(DType::F64, &[3])),
    ];
    let body = body(&ins, |g, p| {
        let c = g.mul(p[1], p[2]).unwrap();
        vec![g.add(c, p[0]).unwrap()]
    });
    let r = region(
        RegionKind::Scan(ScanBody {
            length: 5,
            start: 2,
            reverse: false,
            n_carry: 1,
            n_const: 1,
            n_xs: 0,
            body,
        }),
        RegionForm::Fori,
        0,
    );
    let y = call(&mut b, &r, &[x, w], &[0]);
    b.finish(y).unwrap()
}

/// A float32 scan over the rows of `xs` with a running sum as carry and two stacked outputs.
fn scan_graph() -> Graph {
    let mut b = GraphBuilder::new();
    let s = b.input("s", scalar(DType::F32));
    let xs = b.input("xs", ty(DType::F32, &[4, 3]));
    let ins = [
        ("i", scalar(DType::F32)),
        ("carry", scalar(DType::F32)),
        ("x", ty(DType::F32, &[3])),
    ];
    let body = body(&ins, |g, p| {
        let total = g.sum(p[2], None, false).unwrap();
        let c = g.add(p[1], total).unwrap();
        let y = g.mul(p[2], p[1]).unwrap();
        let at = g.mul(p[0], p[1]).unwrap();
        vec![c, y, at]
    });
    let r = region(
        RegionKind::Scan(ScanBody {
            length: 4,
            start: 0,
            reverse: false,
            n_carry: 1,
            n_const: 0,
            n_xs: 1,
            body,
        }),
        RegionForm::Scan,
        0,
    );
    let outs = call(&mut b, &r, &[s, xs], &[0, 1, 2]);
    let last = b.sum(outs[1], None, false).unwrap();
    b.finish(vec![outs[0], last, outs[2]]).unwrap()
}

/// A reverse scan starting at index 2, with a constant and `xs`, as the reverse pass of a
/// derivative writes one (`scan_vjp`, one derivative level).
fn reverse_scan_graph() -> Graph {
    let mut b = GraphBuilder::new();
    let c0 = b.input("c", ty(DType::F64, &[2]));
    let k = b.input("k", ty(DType::F64, &[2]));
    let xs = b.input("xs", ty(DType::F64, &[3, 2]));
    let ins = [
        ("i", scalar(DType::F64)),
        ("carry", ty(DType::F64, &[2])),
        ("operand0", ty(DType::F64, &[2])),
        ("x", ty(DType::F64, &[2])),
    ];
    let body = body(&ins, |g, p| {
        let c = g.mul(p[1], p[2]).unwrap();
        let c = g.add(c, p[3]).unwrap();
        vec![c, c]
    });
    let r = region(
        RegionKind::Scan(ScanBody {
            length: 3,
            start: 2,
            reverse: true,
            n_carry: 1,
            n_const: 1,
            n_xs: 1,
            body,
        }),
        RegionForm::ScanVjp,
        1,
    );
    let outs = call(&mut b, &r, &[c0, k, xs], &[0, 1]);
    b.finish(outs).unwrap()
}

/// `while_loop(lambda x, n, limit: n < limit, lambda x, n, limit: (x * 0.5, n + 1), (x, 0))`.
fn while_graph() -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", ty(DType::F64, &[2]));
    let limit = b.input("limit", scalar(DType::F64));
    let zero = b.scalar(0.0, DType::F64, false);
    let ins = [
        ("carry0", ty(DType::F64, &[2])),
        ("carry1", scalar(DType::F64)),
        ("operand0", scalar(DType::F64)),
    ];
    let cond = body(&ins, |g, p| {
        vec![g.compare(Comparison::Less, p[1], p[2]).unwrap()]
    });
    let body = body(&ins, |g, p| {
        let half = g.scalar(0.5, DType::F64, false);
        let one = g.scalar(1.0, DType::F64, false);
        vec![g.mul(p[0], half).unwrap(), g.add(p[1], one).unwrap()]
    });
    let r = region(
        RegionKind::While {
            n_carry: 2,
            cond,
            body,
            max_trips: None,
        },
        RegionForm::While,
        0,
    );
    let outs = call(&mut b, &r, &[x, zero, limit], &[0, 1]);
    b.finish(outs).unwrap()
}

/// A `fori` whose body holds a `cond` whose true branch holds a reverse `scan`.
fn nested_graph() -> Graph {
    let t = ty(DType::F64, &[2]);
    let inner_scan = |g: &mut GraphBuilder, v: NodeId| {
        let ins = [("i", scalar(DType::F64)), ("carry", t.clone())];
        let body = body(&ins, |h, p| {
            let s = h.unary(UnaryOp::Sin, p[1]).unwrap();
            vec![h.add(s, p[0]).unwrap()]
        });
        let r = region(
            RegionKind::Scan(ScanBody {
                length: 2,
                start: 0,
                reverse: true,
                n_carry: 1,
                n_const: 0,
                n_xs: 0,
                body,
            }),
            RegionForm::Scan,
            0,
        );
        call(g, &r, &[v], &[0])[0]
    };
    let ins = [("operand0", t.clone())];
    let then_branch = body(&ins, |g, p| vec![inner_scan(g, p[0])]);
    let else_branch = body(&ins, |g, p| vec![g.unary(UnaryOp::Neg, p[0]).unwrap()]);
    let cond = region(
        RegionKind::Cond {
            then_branch,
            else_branch,
        },
        RegionForm::Cond,
        0,
    );
    let ins = [("i", scalar(DType::F64)), ("carry", t.clone())];
    let fori_body = body(&ins, |g, p| {
        let total = g.sum(p[1], None, false).unwrap();
        let zero = g.scalar(0.0, DType::F64, false);
        let pred = g.compare(Comparison::Greater, total, zero).unwrap();
        let c = call(g, &cond, &[pred, p[1]], &[0])[0];
        vec![g.add(c, p[0]).unwrap()]
    });
    let fori = region(
        RegionKind::Scan(ScanBody {
            length: 4,
            start: 0,
            reverse: false,
            n_carry: 1,
            n_const: 0,
            n_xs: 0,
            body: fori_body,
        }),
        RegionForm::Fori,
        0,
    );
    let mut b = GraphBuilder::new();
    let x = b.input("x", t.clone());
    let y = call(&mut b, &fori, &[x], &[0]);
    b.finish(y).unwrap()
}

/// Sibling groups: a three-carry `fori_vjp_jvp` at level 2 with one output unused (no node)
/// and one output used twice, then a second call of the same region on other operands.
fn multi_output_graph() -> Graph {
    let mut b = GraphBuilder::new();
    let a = b.input("a", scalar(DType::F64));
    let v = b.input("v", ty(DType::F64, &[2]));
    let ins = [
        ("i", scalar(DType::F64)),
        ("carry0", scalar(DType::F64)),
        ("carry1", ty(DType::F64, &[2])),
        ("carry2", scalar(DType::F64)),
    ];
    let body = body(&ins, |g, p| {
        let a2 = g.mul(p[1], p[0]).unwrap();
        let v2 = g.mul(p[2], p[1]).unwrap();
        let s = g.sum(v2, None, false).unwrap();
        vec![a2, v2, s]
    });
    let r = region(
        RegionKind::Scan(ScanBody {
            length: 3,
            start: 1,
            reverse: false,
            n_carry: 3,
            n_const: 0,
            n_xs: 0,
            body,
        }),
        RegionForm::ForiVjpJvp,
        2,
    );
    let first = call(&mut b, &r, &[a, v, a], &[2, 0, 2]);
    let twice = b.add(first[0], first[1]).unwrap();
    let again = call(&mut b, &r, &[twice, v, twice], &[1]);
    b.finish(vec![first[1], first[2], again[0]]).unwrap()
}

fn samples() -> Vec<(&'static str, Graph)> {
    vec![
        ("cond", cond_graph()),
        ("fori", fori_graph()),
        ("scan_xs_ys", scan_graph()),
        ("scan_reverse", reverse_scan_graph()),
        ("while", while_graph()),
        ("nested", nested_graph()),
        ("multi_output", multi_output_graph()),
    ]
}

/// Input values for a sample, in input order.
fn sample_inputs(g: &Graph) -> Vec<HostData> {
    g.inputs()
        .map(|(_, name, t)| {
            let n = t.shape.size();
            let value = |i: usize| match name {
                "p" => 1.0,
                "limit" => 3.0,
                _ => 0.25 * i as f64 - 0.3,
            };
            HostData::from_f64(t.dtype, (0..n).map(value))
        })
        .collect()
}

/// The ids of the nodes of `g` that hold a region, grouped by region identity.
fn sharing(g: &Graph) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, node) in g.nodes().iter().enumerate() {
        if let Op::Region(call) = &node.op {
            match groups
                .iter_mut()
                .find(|m| Arc::ptr_eq(region_of(g, NodeId(m[0] as u32)), &call.region))
            {
                Some(m) => m.push(i),
                None => groups.push(vec![i]),
            }
        }
    }
    groups
}

// ---------------------------------------------------------------------------------------------
// The text format

#[test]
fn the_printer_follows_the_body_syntax_of_the_spec() {
    let text = print_graph(&while_graph(), OutputStyle::Refs);
    assert_eq!(
        text,
        "\
%0 = input[name=x] : tensor<2xf64>
%1 = input[name=limit] : tensor<f64>
%2 = constant(0.0) : tensor<f64>
%3 = while(%0, %2, %1, carries=2, output=0) : tensor<2xf64> {
  ^cond:
    %0 = input[name=carry0] : tensor<2xf64>
    %1 = input[name=carry1] : tensor<f64>
    %2 = input[name=operand0] : tensor<f64>
    %3 = less(%1, %2) : tensor<i1>
    yield %3
  ^body:
    %0 = input[name=carry0] : tensor<2xf64>
    %1 = input[name=carry1] : tensor<f64>
    %2 = input[name=operand0] : tensor<f64>
    %3 = constant(0.5) : tensor<f64>
    %4 = constant(1.0) : tensor<f64>
    %5 = mul(%0, %3) : tensor<2xf64>
    %6 = add(%1, %4) : tensor<f64>
    yield %5, %6
}
%4 = while(%0, %2, %1, carries=2, output=1, same=%3) : tensor<f64>
outputs: [%3, %4]
"
    );
}

/// Each sample prints as its golden file, and each golden file parses back to a graph that
/// prints the same and encodes canonically. `BLESS=1` rewrites the files from the samples.
#[test]
fn golden_texts() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/text");
    let mut golden = Golden::new();
    for (name, g) in samples() {
        let file = dir.join(format!("{name}.txt"));
        let got = print_graph(&g, OutputStyle::Refs);
        let want = fs::read_to_string(&file).unwrap_or_default();
        golden.check(&file, &want, &got, || got.clone());
    }
    golden.finish();
    let mut count = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let file = entry.unwrap().path();
        let text = fs::read_to_string(&file).unwrap();
        let g = parse_graph(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert_eq!(
            print_graph(&g, OutputStyle::Refs),
            text,
            "{}",
            file.display()
        );
        let bytes = encode_graph(&g).unwrap();
        assert_eq!(encode_graph(&decode_graph(&bytes).unwrap()).unwrap(), bytes);
        count += 1;
    }
    assert!(count >= 7, "expected the golden files of every sample");
}

#[test]
fn text_round_trips_keep_regions_and_groups() {
    for (name, g) in samples() {
        let text = print_graph(&g, OutputStyle::Refs);
        let back = parse_graph(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
        assert_eq!(print_graph(&back, OutputStyle::Refs), text, "{name}");
        if name == "multi_output" {
            // Two calls of one region print as two regions: the text keeps the values, not
            // the sharing between calls.
            assert_eq!(sharing(&g), vec![vec![2, 3, 4, 6]]);
            assert_eq!(sharing(&back), vec![vec![2, 3, 4], vec![6]]);
        } else {
            assert!(same_structure(&back, &g), "{name}\n{text}");
        }
        assert_eq!(run(&back, &sample_inputs(&g)), run(&g, &sample_inputs(&g)));
    }
    // The plan text (output shapes) reads back where the outputs are the unused nodes in order.
    for g in [cond_graph(), fori_graph(), while_graph(), nested_graph()] {
        let plan_text = print_graph(&g, OutputStyle::Shapes);
        let plan = parse_graph(&plan_text).unwrap_or_else(|e| panic!("{e}\n{plan_text}"));
        assert_eq!(print_graph(&plan, OutputStyle::Shapes), plan_text);
    }
}

#[test]
fn siblings_share_one_region_after_parsing() {
    let g = parse_graph(&print_graph(&scan_graph(), OutputStyle::Refs)).unwrap();
    let (a, b, c) = (
        region_of(&g, NodeId(2)),
        region_of(&g, NodeId(3)),
        region_of(&g, NodeId(4)),
    );
    assert!(Arc::ptr_eq(a, b) && Arc::ptr_eq(a, c));
    let groups = region_groups(&g);
    assert_eq!(groups[&2], vec![2, 3, 4]);
    let RegionKind::Scan(s) = a.kind() else {
        panic!("a scan")
    };
    assert_eq!((s.n_carry, s.n_const, s.n_xs, s.n_ys()), (1, 0, 1, 2));
}

/// Builds region text from the pieces of one `fori` node, for the error cases.
fn fori_text(attrs: &str, tail: &str) -> String {
    format!(
        "%0 = input[name=x] : tensor<f64>
%1 = fori(%0, {attrs}) : tensor<f64> {{
  ^body:
    %0 = input[name=i] : tensor<f64>
    %1 = input[name=carry] : tensor<f64>
    %2 = add(%1, %0) : tensor<f64>
    yield %2
}}
{tail}outputs: [%1]
"
    )
}

fn parse_err(text: &str) -> String {
    parse_graph(text).unwrap_err().to_string()
}

#[test]
fn region_text_errors() {
    assert!(parse_graph(&fori_text("lower=0, upper=3, carries=1", "")).is_ok());
    assert_eq!(
        parse_err(&fori_text("lower=3, upper=1, carries=1", "")),
        "IR text line 2: upper=1 is below lower=3"
    );
    assert_eq!(
        parse_err(&fori_text("lower=2, upper=2, carries=1", "")),
        "IR text line 2: invalid graph: fori region: length is 0"
    );
    assert_eq!(
        parse_err(&fori_text("length=3, carries=1", "")),
        "IR text line 2: unknown attribute length of a fori region"
    );
    assert_eq!(
        parse_err(&fori_text("lower=0, upper=3, carries=1, backwards", "")),
        "IR text line 2: unknown attribute backwards of a fori region"
    );
    assert_eq!(
        parse_err(&fori_text("lower=0, upper=3", "")),
        "IR text line 2: missing attribute carries"
    );
    assert_eq!(
        parse_err(&fori_text("lower=0, upper=3, carries=1, xs=1", "")),
        "IR text line 2: the body takes 2 inputs, fewer than the index, 1 carries and 1 xs"
    );
    assert_eq!(
        parse_err(&fori_text("lower=0, upper=3, carries=1, level=300", "")),
        "IR text line 2: level must be an integer below 256, got 300"
    );
    // Siblings must repeat the operands and attributes of the node they name.
    let sibling = |line: &str| fori_text("lower=0, upper=3, carries=1", &format!("{line}\n"));
    assert!(parse_graph(&sibling(
        "%2 = fori(%0, lower=0, upper=3, carries=1, same=%1) : tensor<f64>"
    ))
    .is_ok());
    assert_eq!(
        parse_err(&sibling(
            "%2 = fori(%0, lower=0, upper=4, carries=1, same=%1) : tensor<f64>"
        )),
        "IR text line 9: the attributes differ from those of the region of %1"
    );
    assert_eq!(
        parse_err(&sibling(
            "%2 = fori(%1, lower=0, upper=3, carries=1, same=%1) : tensor<f64>"
        )),
        "IR text line 9: a sibling of %1 must take the same operands"
    );
    assert_eq!(
        parse_err(&sibling(
            "%2 = scan(%0, length=3, carries=1, same=%1) : tensor<f64>"
        )),
        "IR text line 9: a scan node cannot share the fori region of %1"
    );
    assert_eq!(
        parse_err(&sibling(
            "%2 = fori(%0, lower=0, upper=3, carries=1, same=%0) : tensor<f64>"
        )),
        "IR text line 9: same=%0 is not a region node (input)"
    );
    assert_eq!(
        parse_err(&sibling(
            "%2 = fori(%0, lower=0, upper=3, carries=1, same=%9) : tensor<f64>"
        )),
        "IR text line 9: same=%9 names no earlier node"
    );
    assert_eq!(
        parse_err(&sibling(
            "%2 = fori(%0, lower=0, upper=3, carries=1, output=1, same=%1) : tensor<f64>"
        )),
        "IR text line 9: invalid graph: fori region has no output 1"
    );
    assert_eq!(
        parse_err(&sibling(
            "%2 = fori(%0, lower=0, upper=3, carries=1) : tensor<f64>"
        )),
        "IR text line 9: fori needs its bodies (a line ending in `{`) or same=%k"
    );
    assert_eq!(
        parse_err(&sibling(
            "%2 = fori(%0, lower=0, upper=3, carries=1, same=%1) : tensor<f64> {"
        )),
        "IR text line 9: a sibling (same=%k) shares the bodies of %k and has none of its own"
    );
    assert_eq!(
        parse_err(&sibling("%2 = sin(%0) : tensor<f64> {")),
        "IR text line 9: sin has no bodies; only region nodes end with `{`"
    );
}

#[test]
fn nodes_of_multi_output_regions_name_their_output() {
    let text = print_graph(&while_graph(), OutputStyle::Refs);
    let without = text.replacen(", output=0)", ")", 1);
    assert_eq!(
        parse_err(&without),
        "IR text line 4: the while region has 2 outputs; name this node's with output=k"
    );
}

#[test]
fn region_structure_errors() {
    let good = fori_text("lower=0, upper=3, carries=1", "");
    let lines: Vec<&str> = good.lines().collect();
    let edit = |i: usize, with: Option<&str>| {
        let mut l = lines.clone();
        match with {
            Some(w) => l[i] = w,
            None => {
                l.remove(i);
            }
        }
        l.join("\n")
    };
    assert_eq!(
        parse_err(&edit(2, Some("  ^then:"))),
        "IR text line 8: expected ^else:, got }"
    );
    assert_eq!(
        parse_err(&edit(2, Some("  ^loop:"))),
        "IR text line 3: unknown body label ^loop: (a region starts with ^then:, ^cond: or ^body:)"
    );
    assert_eq!(
        parse_err(&edit(6, None)),
        "IR text line 7: a closing brace before the yield of the body labelled on line 3"
    );
    assert_eq!(
        parse_err(&edit(6, Some("    yield %7"))),
        "IR text line 7: yield of unknown node %7"
    );
    assert_eq!(
        parse_err(&edit(7, None)),
        "IR text line 8: expected `}` closing the region of line 2, got outputs: [%1]"
    );
    assert_eq!(
        parse_err(&edit(6, Some("    outputs: [%2]"))),
        "IR text line 7: an outputs line before the yield of the body labelled on line 3"
    );
    assert_eq!(
        parse_err("%0 = input[name=x] : tensor<f64>\n}\noutputs: [%0]\n"),
        "IR text line 2: a closing brace outside a region"
    );
    assert_eq!(
        parse_err("%0 = input[name=x] : tensor<f64>\nyield %0\noutputs: [%0]\n"),
        "IR text line 2: a yield outside a region"
    );
    let unclosed: String = lines[..7].join("\n");
    assert_eq!(
        parse_err(&unclosed),
        "IR text line 2: the region is never closed with `}`"
    );
    let unyielded: String = lines[..6].join("\n");
    assert_eq!(
        parse_err(&unyielded),
        "IR text line 3: the body never yields"
    );
}

/// `depth` regions nested in one another: each a `fori` whose body is the next.
fn nested_foris(depth: usize) -> Graph {
    let t = scalar(DType::F64);
    let mut inner: Option<Arc<quabla_ir::Region>> = None;
    for _ in 0..depth {
        let ins = [("i", t.clone()), ("carry", t.clone())];
        let body = body(&ins, |g, p| match &inner {
            Some(r) => call(g, r, &[p[1]], &[0]),
            None => vec![g.add(p[1], p[0]).unwrap()],
        });
        inner = Some(region(
            RegionKind::Scan(ScanBody {
                length: 1,
                start: 0,
                reverse: false,
                n_carry: 1,
                n_const: 0,
                n_xs: 0,
                body,
            }),
            RegionForm::Fori,
            0,
        ));
    }
    let mut b = GraphBuilder::new();
    let x = b.input("x", t);
    let y = call(&mut b, inner.as_ref().unwrap(), &[x], &[0]);
    b.finish(y).unwrap()
}

#[test]
fn nesting_is_bounded() {
    let deepest = nested_foris(MAX_REGION_DEPTH);
    let text = print_graph(&deepest, OutputStyle::Refs);
    assert_eq!(
        print_graph(&parse_graph(&text).unwrap(), OutputStyle::Refs),
        text
    );
    let bytes = encode_graph(&deepest).unwrap();
    assert!(same_structure(&decode_graph(&bytes).unwrap(), &deepest));

    let too_deep = nested_foris(MAX_REGION_DEPTH + 1);
    let text = print_graph(&too_deep, OutputStyle::Refs);
    let err = parse_err(&text);
    assert!(
        err.ends_with(&format!(
            "regions nest deeper than {MAX_REGION_DEPTH} levels"
        )),
        "{err}"
    );
    assert_eq!(
        encode_graph(&too_deep).unwrap_err().to_string(),
        format!("cannot encode the graph: regions nest deeper than {MAX_REGION_DEPTH} levels")
    );
}

/// Bytes the encoder would refuse: a `fori` whose body holds `inner` nested regions.
fn wrapped_in_one_more_fori(inner: usize) -> Vec<u8> {
    let chain = nested_foris(inner);
    let chain = region_of(&chain, NodeId(1)).clone();
    let t = scalar(DType::F64);
    let body = body(&[("i", t.clone()), ("carry", t)], |g, p| {
        call(g, &chain, &[p[1]], &[0])
    });
    let u32le = |w: &mut Vec<u8>, v: u32| w.extend_from_slice(&v.to_le_bytes());
    let mut w = b"QBLAPLAN".to_vec();
    u32le(&mut w, WIRE_VERSION);
    u32le(&mut w, 2); // nodes
    w.extend([
        0, 1, 0, 0, 0, b'x', 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0,
    ]);
    w.push(30);
    w.extend(0u64.to_le_bytes()); // output
    w.extend([0, 1, 0, 1]); // defined here: fori, level 0, scan kind
    w.extend(1u64.to_le_bytes()); // length
    w.extend(0u64.to_le_bytes()); // start
    w.push(0); // forward
    for count in [1, 0, 0] {
        u32le(&mut w, count);
    }
    w.extend(graph_item(&body));
    u32le(&mut w, 1);
    u32le(&mut w, 0);
    w.extend([1, 0, 0, 0, 0, 0]); // tensor<f64>
    u32le(&mut w, 1);
    u32le(&mut w, 1);
    w
}

#[test]
fn the_decoder_bounds_nesting() {
    let deepest = decode_graph(&wrapped_in_one_more_fori(MAX_REGION_DEPTH - 1)).unwrap();
    assert_eq!(
        print_graph(&deepest, OutputStyle::Refs),
        print_graph(&nested_foris(MAX_REGION_DEPTH), OutputStyle::Refs)
    );
    let err = decode_err(&wrapped_in_one_more_fori(MAX_REGION_DEPTH)).to_string();
    assert!(
        err.starts_with("plan wire data: in ^body of node %1: in ^body of node %2: in ^body"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "regions nest deeper than {MAX_REGION_DEPTH} levels at byte"
        )),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// The wire format

#[test]
fn wire_round_trips_keep_regions_and_groups() {
    for (name, g) in samples() {
        let bytes = encode_graph(&g).unwrap();
        let back = decode_graph(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(same_structure(&back, &g), "{name}\n{back}\n{g}");
        assert_eq!(sharing(&back), sharing(&g), "{name}");
        assert_eq!(
            print_graph(&back, OutputStyle::Refs),
            print_graph(&g, OutputStyle::Refs)
        );
        assert_eq!(encode_graph(&back).unwrap(), bytes, "{name}: canonical");
    }
    // The second call of the region in `multi_output` refers to its first node.
    let back = decode_graph(&encode_graph(&multi_output_graph()).unwrap()).unwrap();
    assert!(Arc::ptr_eq(
        region_of(&back, NodeId(2)),
        region_of(&back, NodeId(6))
    ));
}

/// The documented bytes of a small cond with two sibling nodes.
#[test]
fn region_golden_bytes() {
    let mut b = GraphBuilder::new();
    let p = b.input("p", scalar(DType::Bool));
    let ins = [("a", scalar(DType::F32))];
    let then_branch = body(&ins, |_, p| vec![p[0], p[0]]);
    let else_branch = body(&ins, |g, p| {
        let n = g.unary(UnaryOp::Neg, p[0]).unwrap();
        vec![n, p[0]]
    });
    let r = region(
        RegionKind::Cond {
            then_branch,
            else_branch,
        },
        RegionForm::Cond,
        1,
    );
    let x = b
        .push(
            Op::Cast {
                to: DType::F32,
                weak: false,
            },
            &[p],
        )
        .unwrap();
    let outs = call(&mut b, &r, &[p, x], &[1, 0]);
    let g = b.finish(outs).unwrap();

    let mut want: Vec<u8> = b"QBLAPLAN".to_vec();
    let u32le = |w: &mut Vec<u8>, v: u32| w.extend_from_slice(&v.to_le_bytes());
    let u64le = |w: &mut Vec<u8>, v: u64| w.extend_from_slice(&v.to_le_bytes());
    let scalar_f32 = |w: &mut Vec<u8>| {
        w.extend([0, 0]);
        u32le(w, 0);
    };
    let input = |w: &mut Vec<u8>, name: u8, dtype: u8| {
        w.push(0);
        u32le(w, 1);
        w.push(name);
        w.extend([dtype, 0]);
        u32le(w, 0);
        u32le(w, 0);
        w.extend([dtype, 0]);
        u32le(w, 0);
    };
    u32le(&mut want, WIRE_VERSION); // version
    u32le(&mut want, 4); // nodes
    input(&mut want, b'p', 2);
    want.extend([2, 0, 0]); // cast to f32, strong
    u32le(&mut want, 1);
    u32le(&mut want, 0);
    scalar_f32(&mut want);
    // %2: output 1, defined here: cond form, level 1, cond kind
    want.push(30);
    u64le(&mut want, 1);
    want.extend([0, 0, 1, 0]);
    // ^then: %0 = input a; yield %0, %0
    u32le(&mut want, 1);
    input(&mut want, b'a', 0);
    u32le(&mut want, 2);
    u32le(&mut want, 0);
    u32le(&mut want, 0);
    // ^else: %0 = input a; %1 = neg(%0); yield %1, %0
    u32le(&mut want, 2);
    input(&mut want, b'a', 0);
    want.extend([3, 0]);
    u32le(&mut want, 1);
    u32le(&mut want, 0);
    scalar_f32(&mut want);
    u32le(&mut want, 2);
    u32le(&mut want, 1);
    u32le(&mut want, 0);
    // operands and type of %2
    u32le(&mut want, 2);
    u32le(&mut want, 0);
    u32le(&mut want, 1);
    scalar_f32(&mut want);
    // %3: output 0, the region of %2
    want.push(30);
    u64le(&mut want, 0);
    want.push(1);
    u32le(&mut want, 2);
    u32le(&mut want, 2);
    u32le(&mut want, 0);
    u32le(&mut want, 1);
    scalar_f32(&mut want);
    // outputs: [%2, %3]
    u32le(&mut want, 2);
    u32le(&mut want, 2);
    u32le(&mut want, 3);

    assert_eq!(encode_graph(&g).unwrap(), want);
    let back = decode_graph(&want).unwrap();
    assert!(same_structure(&back, &g));
    assert!(Arc::ptr_eq(
        region_of(&back, NodeId(2)),
        region_of(&back, NodeId(3))
    ));
}

/// Where `part` (the bytes of a body graph, encoded alone) lies in `bytes`.
fn find(bytes: &[u8], part: &[u8]) -> usize {
    bytes
        .windows(part.len())
        .position(|w| w == part)
        .expect("the part is in the bytes")
}

/// The bytes of a graph encoded alone, without magic and version: a `graph` item.
fn graph_item(g: &Graph) -> Vec<u8> {
    encode_graph(g).unwrap()[12..].to_vec()
}

fn decode_err(bytes: &[u8]) -> WireError {
    decode_graph(bytes).unwrap_err()
}

#[test]
fn region_decode_errors() {
    let g = cond_graph();
    let bytes = encode_graph(&g).unwrap();
    let RegionKind::Cond { then_branch, .. } = region_of(&g, NodeId(2)).kind() else {
        panic!("a cond")
    };
    let then_bytes = graph_item(then_branch);
    let then_at = find(&bytes, &then_bytes);
    // tag, output, source, form, level, kind, then the then-branch.
    let tag_at = then_at - 13;
    assert_eq!(bytes[tag_at], 30);
    let source = tag_at + 9;
    let mut bad = bytes.clone();
    bad[source] = 7;
    assert_eq!(
        decode_err(&bad).to_string(),
        format!("plan wire data: a region source at byte {source} has the invalid value 7")
    );
    let mut bad = bytes.clone();
    bad[source + 1] = 11;
    assert_eq!(
        decode_err(&bad).to_string(),
        format!(
            "plan wire data: a region form at byte {} has the invalid value 11",
            source + 1
        )
    );
    let mut bad = bytes.clone();
    bad[source + 3] = 3;
    assert_eq!(
        decode_err(&bad).to_string(),
        format!(
            "plan wire data: a region kind at byte {} has the invalid value 3",
            source + 3
        )
    );
    // The then-branch yields its node 1; make it yield node 9.
    let mut bad = bytes.clone();
    let yielded = then_at + then_bytes.len() - 4;
    bad[yielded] = 9;
    assert_eq!(
        decode_err(&bad),
        WireError::InBody {
            node: NodeId(2),
            body: "then",
            error: Box::new(WireError::UnknownOutput {
                output: NodeId(9),
                nodes: 2
            }),
        }
    );
    assert_eq!(
        decode_err(&bad).to_string(),
        "plan wire data: in ^then of node %2: output %9 is not a node (the plan has 2 nodes)"
    );
    // Cut anywhere inside the region: a typed error, never a panic.
    for n in tag_at..bytes.len() {
        assert!(decode_graph(&bytes[..n]).is_err(), "cut at {n}");
    }
}

/// The offset of the definition of the region of node 2 in the encoding of `g`: its tag.
fn definition_at(g: &Graph, bytes: &[u8]) -> usize {
    let RegionKind::Scan(s) = region_of(g, NodeId(2)).kind() else {
        panic!("a scan")
    };
    // tag, output, source, form, level, kind, length, start, reverse, three counts, body.
    let at = find(bytes, &graph_item(&s.body)) - 42;
    assert_eq!(bytes[at], 30);
    at
}

#[test]
fn body_contracts_are_checked_when_decoding() {
    let g = fori_graph();
    let bytes = encode_graph(&g).unwrap();
    let at = definition_at(&g, &bytes);
    assert_eq!(bytes[at + 13..at + 21], 5u64.to_le_bytes(), "the length");
    let mut bad = bytes.clone();
    bad[at + 13] = 0;
    assert_eq!(
        decode_err(&bad).to_string(),
        "plan wire data: invalid graph: node %2: fori region: length is 0"
    );
    // Counts that disagree with the body's inputs (1 + 1 carry + 1 constant).
    assert_eq!(
        bytes[at + 30..at + 34],
        1u32.to_le_bytes(),
        "the carry count"
    );
    let mut bad = bytes.clone();
    bad[at + 30] = 2;
    assert_eq!(
        decode_err(&bad).to_string(),
        "plan wire data: invalid graph: node %2: the fori body takes 3 inputs, not 1 + 2 + 1 + 0"
    );
    let mut bad = bytes.clone();
    bad[at + 30..at + 34].copy_from_slice(&u32::MAX.to_le_bytes());
    bad[at + 34..at + 38].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(decode_err(&bad)
        .to_string()
        .ends_with("takes 3 inputs, not 1 + 4294967295 + 4294967295 + 0"));
    // A reverse flag other than 0 or 1.
    let mut bad = bytes.clone();
    bad[at + 29] = 2;
    assert_eq!(
        decode_err(&bad).to_string(),
        format!(
            "plan wire data: a reverse flag at byte {} has the invalid value 2",
            at + 29
        )
    );
    // A region output the region does not have.
    let mut bad = bytes;
    bad[at + 1] = 1;
    assert_eq!(
        decode_err(&bad).to_string(),
        "plan wire data: invalid graph: node %2 (fori): fori region has no output 1"
    );
}

#[test]
fn shared_references_must_name_a_defining_node() {
    // %2 and %3 share the region of %2; make %3 name %1 (a cast) or itself.
    let g = scan_graph();
    let bytes = encode_graph(&g).unwrap();
    let shared: Vec<usize> = bytes
        .windows(10)
        .enumerate()
        .filter(|(_, w)| w[0] == 30 && w[9] == 1)
        .map(|(i, _)| i + 10)
        .collect();
    assert_eq!(shared.len(), 2, "two siblings refer to the first node");
    assert_eq!(bytes[shared[0]..shared[0] + 4], [2, 0, 0, 0]);
    for target in [0u32, 3, 4, 200] {
        let mut bad = bytes.clone();
        bad[shared[1]..shared[1] + 4].copy_from_slice(&target.to_le_bytes());
        assert_eq!(
            decode_err(&bad).to_string(),
            format!(
                "plan wire data: node %4 shares the region of %{target}, which is not an earlier node defining a region at byte {}",
                shared[1]
            )
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Passes

#[test]
fn passes_keep_region_groups() {
    for (name, g) in samples() {
        let want = run(&g, &sample_inputs(&g));
        for pass_name in ["dce", "canonicalize", "fold", "dedup", "cse", "pipeline"] {
            let pass = passes::by_name(pass_name).unwrap();
            let out = pass(&g);
            out.verify().unwrap();
            assert_eq!(
                run(&out, &sample_inputs(&g)),
                want,
                "{pass_name} changed {name}"
            );
            // Every group still shares one region and one operand list.
            for (i, members) in region_groups(&out) {
                let r = region_of(&out, NodeId(i as u32));
                for m in members {
                    let id = NodeId(m as u32);
                    assert!(Arc::ptr_eq(region_of(&out, id), r));
                    assert_eq!(out.node(id).operands, out.node(NodeId(i as u32)).operands);
                }
            }
        }
    }
}

/// Two calls of regions with the same text and a repeated sibling.
const TWO_CONDS: &str = "\
%0 = input[name=x] : tensor<3xf64>
%1 = input[name=p] : tensor<i1>
%2 = cond(%1, %0) : tensor<3xf64> {
  ^then:
    %0 = input[name=operand0] : tensor<3xf64>
    %1 = sin(%0) : tensor<3xf64>
    yield %1
  ^else:
    %0 = input[name=operand0] : tensor<3xf64>
    yield %0
}
%3 = cond(%1, %0) : tensor<3xf64> {
  ^then:
    %0 = input[name=operand0] : tensor<3xf64>
    %1 = sin(%0) : tensor<3xf64>
    yield %1
  ^else:
    %0 = input[name=operand0] : tensor<3xf64>
    yield %0
}
%4 = cond(%1, %0, same=%2) : tensor<3xf64>
%5 = add(%2, %3) : tensor<3xf64>
%6 = add(%2, %4) : tensor<3xf64>
outputs: [%5, %6]
";

#[test]
fn cse_merges_only_nodes_of_one_region() {
    let out = passes::cse(&parse_graph(TWO_CONDS).unwrap());
    let regions: Vec<usize> = out
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| matches!(n.op, Op::Region(_)))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(regions, vec![2, 3], "%4 merges into %2, %3 stays\n{out}");
    assert!(!Arc::ptr_eq(
        region_of(&out, NodeId(2)),
        region_of(&out, NodeId(3))
    ));
    assert_eq!(out.node(NodeId(4)).operands, vec![NodeId(2), NodeId(3)]);
    assert_eq!(out.node(NodeId(5)).operands, vec![NodeId(2), NodeId(2)]);
}

#[test]
fn dce_drops_unused_siblings() {
    let g = scan_graph();
    let mut b = GraphBuilder::new();
    let mut remap = Vec::new();
    for node in g.nodes() {
        let ops: Vec<NodeId> = node.operands.iter().map(|o| remap[o.index()]).collect();
        remap.push(b.push(node.op.clone(), &ops).unwrap());
    }
    // Keep only the stacked ys (output 1): the carry node and output 2 go.
    let g = b.finish(vec![remap[3]]).unwrap();
    let out = passes::dce(&g);
    assert_eq!(out.len(), 3, "{out}");
    let Op::Region(call) = &out.node(NodeId(2)).op else {
        panic!("{out}")
    };
    assert_eq!(call.output, 1);
    assert!(Arc::ptr_eq(&call.region, region_of(&g, NodeId(2))));
    // The survivor now prints the bodies itself and reads back.
    let text = print_graph(&out, OutputStyle::Refs);
    assert!(
        text.contains("%2 = scan(%0, %1, length=4, carries=1, xs=1, output=1) : tensor<4x3xf32> {"),
        "{text}"
    );
    assert_eq!(
        print_graph(&parse_graph(&text).unwrap(), OutputStyle::Refs),
        text
    );
}

// ---------------------------------------------------------------------------------------------
// Random region-bearing graphs

/// Inputs, a few elementwise nodes, and random region groups among them.
fn random_graph(steps: &[(u8, usize, usize, u32)], n_out: usize) -> Graph {
    let mut b = GraphBuilder::new();
    let mut nodes = vec![
        b.input("x", ty(DType::F64, &[2, 3])),
        b.input("y", ty(DType::F64, &[3])),
        b.input("z", ty(DType::F32, &[2, 1])),
        b.input("p", ty(DType::Bool, &[3])),
    ];
    let pick = |nodes: &[NodeId], i: usize| nodes[i % nodes.len()];
    for &(what, a, c, k) in steps {
        let (x, y) = (pick(&nodes, a), pick(&nodes, c));
        match what % 3 {
            0 => {
                if let Ok(n) = b.unary(UnaryOp::Sin, x) {
                    nodes.push(n);
                }
            }
            1 => {
                if let Ok(n) = b.binary(BinaryOp::Mul, x, y) {
                    nodes.push(n);
                }
            }
            _ => {
                if let Some(ns) = random_region(&mut b, x, y, k, 0) {
                    nodes.extend(ns);
                }
            }
        }
    }
    let outputs = nodes.iter().rev().take(n_out).copied().collect();
    b.finish(outputs).unwrap()
}

fn random_inputs() -> Vec<HostData> {
    vec![
        HostData::F64(vec![0.5, -1.25, 2.0, 0.0, -0.0, 3.5].into()),
        HostData::F64(vec![1.5, -0.75, -2.0].into()),
        HostData::F32(vec![0.1f32, -7.0].into()),
        HostData::Bool(vec![true, false, true].into()),
    ]
}

fn same_bits(a: &[HostData], b: &[HostData]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.dtype() == y.dtype()
                && x.len() == y.len()
                && (0..x.len()).all(|i| {
                    let (p, q) = (x.get_f64(i), y.get_f64(i));
                    p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan())
                })
        })
}

fn random_steps() -> impl Strategy<Value = Vec<(u8, usize, usize, u32)>> {
    prop::collection::vec((any::<u8>(), 0usize..64, 0usize..64, any::<u32>()), 0..12)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn random_region_graphs_round_trip(steps in random_steps(), n_out in 1usize..4) {
        let g = random_graph(&steps, n_out);
        let text = print_graph(&g, OutputStyle::Refs);
        let parsed = parse_graph(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&print_graph(&parsed, OutputStyle::Refs), &text);
        prop_assert!(same_bits(&run(&parsed, &random_inputs()), &run(&g, &random_inputs())));

        let bytes = encode_graph(&g).unwrap();
        let back = decode_graph(&bytes).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert!(same_structure(&back, &g), "{}", text);
        prop_assert_eq!(encode_graph(&back).unwrap(), bytes);
    }

    #[test]
    fn passes_preserve_region_values(steps in random_steps(), n_out in 1usize..4) {
        let g = random_graph(&steps, n_out);
        let want = run(&g, &random_inputs());
        for name in ["dce", "canonicalize", "fold", "dedup", "cse", "pipeline"] {
            let out = passes::by_name(name).unwrap()(&g);
            prop_assert!(out.verify().is_ok());
            prop_assert!(
                same_bits(&run(&out, &random_inputs()), &want),
                "pass {} changed a value\n{}\n{}", name, g, out
            );
        }
    }
}
