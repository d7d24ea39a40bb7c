//! Derivative rules of `custom` nodes (transforms.md §14), following the graph conventions
//! documented on [`quabla_ir::CustomRule`]:
//!
//! - forward mode uses the `jvp` graph; a `custom_vjp` (only `fwd`/`bwd`) has no forward mode
//!   (TF4); a node without any rule (`checkpoint`) differentiates its primal graph.
//! - reverse mode inlines `fwd` (for the residuals) and `bwd`; a `custom_jvp` is transposed
//!   (the VJP of its `jvp` graph with respect to the tangents at zero tangents, exact for rules
//!   linear in the tangents, numerics.md §5); a `checkpoint` recomputes its primal graph in
//!   the backward pass and differentiates it there.
//!
//! Rule graphs are ordinary graphs inlined into the derivative, so derivatives of derivatives
//! differentiate the rules themselves.

use crate::helpers::zeros_like;
use crate::sweep::{Forward, Reverse, Seed};
use quabla_ir::{CustomCall, Graph, GraphBuilder, IrError, NodeId, Result};

/// Copies `g` into `b` with its inputs bound to `inputs` (in order); returns its outputs.
pub(crate) fn inline(b: &mut GraphBuilder, g: &Graph, inputs: &[NodeId]) -> Result<Vec<NodeId>> {
    b.inline_graph(g, inputs)
}

fn differentiable(b: &GraphBuilder, x: NodeId) -> bool {
    b.ty(x).dtype.is_float()
}

/// The tangent of one output of a custom call (`t`: the operands' tangents).
pub(crate) fn tangent(
    b: &mut GraphBuilder,
    fwd: Forward,
    call: &CustomCall,
    x: &[NodeId],
    t: &[Option<NodeId>],
) -> Result<Option<NodeId>> {
    let rule = &call.rule;
    let tangents: Vec<NodeId> = t
        .iter()
        .zip(x)
        .map(|(tv, &xv)| match tv {
            Some(tv) => Ok(*tv),
            None => zeros_like(b, xv),
        })
        .collect::<Result<_>>()?;
    if let Some(jvp) = &rule.jvp {
        let mut inputs = x.to_vec();
        inputs.extend(&tangents);
        let outs = inline(b, jvp, &inputs)?;
        return Ok(Some(outs[call.output]));
    }
    if rule.fwd.is_some() || rule.bwd.is_some() {
        return Err(IrError::Unsupported {
            op: "custom_vjp".into(),
            message: format!(
                "forward-mode differentiation (jvp) of custom_vjp({}) is not supported",
                rule.name
            ),
        });
    }
    // checkpoint (or a bare custom node): differentiate through the primal.
    let wrt: Vec<bool> = x.iter().map(|&v| differentiable(b, v)).collect();
    let jg = fwd.jvp(&rule.primal, &wrt)?;
    let mut inputs = x.to_vec();
    inputs.extend(
        tangents
            .iter()
            .zip(&wrt)
            .filter(|(_, &w)| w)
            .map(|(tv, _)| *tv),
    );
    let outs = inline(b, &jg, &inputs)?;
    let n_out = rule.primal.outputs().len();
    Ok(Some(outs[n_out + call.output]))
}

/// The tag of nodes that recompute a checkpointed function in the backward pass.
const REMAT_TAG: u32 = 1;

/// The cotangents of a custom call's operands given the cotangent `ct` of its output `out`.
pub(crate) fn cotangents(
    b: &mut GraphBuilder,
    rev: Reverse,
    call: &CustomCall,
    x: &[NodeId],
    ct: NodeId,
) -> Result<Vec<Option<NodeId>>> {
    let rule = &call.rule;
    let n_out = rule.primal.outputs().len();
    // Cotangents of every output of the rule: `ct` for this one, zeros for the others (the
    // rules are linear in them, so the per-output contributions add up).
    let output_cts = |b: &mut GraphBuilder, outs: &[NodeId]| -> Result<Vec<NodeId>> {
        outs.iter()
            .enumerate()
            .map(|(k, &o)| {
                if k == call.output {
                    Ok(ct)
                } else {
                    zeros_like(b, o)
                }
            })
            .collect()
    };
    if let (Some(fwd), Some(bwd)) = (&rule.fwd, &rule.bwd) {
        let outs = inline(b, fwd, x)?;
        let (primal_outs, residuals) = outs.split_at(n_out.min(outs.len()));
        let mut inputs = residuals.to_vec();
        inputs.extend(output_cts(b, primal_outs)?);
        let cts = inline(b, bwd, &inputs)?;
        if cts.len() != x.len() {
            return Err(IrError::Verify {
                message: format!(
                    "the bwd rule of custom_vjp({}) returns {} cotangents for {} operands",
                    rule.name,
                    cts.len(),
                    x.len()
                ),
            });
        }
        return Ok(cts
            .into_iter()
            .zip(x)
            .map(|(c, &xv)| differentiable(b, xv).then_some(c))
            .collect());
    }
    let wrt: Vec<bool> = x.iter().map(|&v| differentiable(b, v)).collect();
    let seeds: Vec<Seed> = (0..n_out)
        .map(|k| {
            if k == call.output {
                Seed::Input
            } else {
                Seed::None
            }
        })
        .collect();
    let (graph, inputs) = if let Some(jvp) = &rule.jvp {
        // Transpose the tangent rule: its VJP with respect to the tangent inputs, at zero
        // tangents, seeded with `ct`.
        let mut jvp_wrt = vec![false; x.len()];
        jvp_wrt.extend(&wrt);
        let vg = rev.vjp(jvp, &jvp_wrt, &seeds)?;
        let mut inputs = x.to_vec();
        for &xv in x {
            inputs.push(zeros_like(b, xv)?);
        }
        inputs.push(ct);
        (vg, inputs)
    } else {
        // checkpoint: recompute the primal in the backward pass and differentiate it there.
        let vg = rev.vjp(&rule.primal, &wrt, &seeds)?;
        let mut inputs = x.to_vec();
        inputs.push(ct);
        (vg, inputs)
    };
    // The recomputation of a checkpoint carries the rematerialization tag, so CSE keeps it
    // apart from the forward values it repeats and the forward intermediates die early.
    let tag = if rule.jvp.is_none() { REMAT_TAG } else { 0 };
    let previous = b.set_remat(tag);
    let outs = inline(b, &graph, &inputs);
    b.set_remat(previous);
    let outs = outs?;
    let mut flagged = outs[n_out..].iter();
    Ok(wrt
        .iter()
        .map(|&w| if w { flagged.next().copied() } else { None })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{jvp_graph, vjp_graph};
    use quabla_ir::{CustomRule, DType, Op, Shape, TensorType, UnaryOp};
    use std::sync::Arc;

    fn vector() -> TensorType {
        TensorType::new(DType::F64, Shape::new(vec![3]).unwrap())
    }

    /// `sin` as a custom rule; `fwd`/`bwd` or `jvp` as asked.
    fn sin_rule(vjp: bool, jvp: bool, rematerialize: bool) -> Arc<CustomRule> {
        let mut p = GraphBuilder::new();
        let x = p.input("x", vector());
        let y = p.unary(UnaryOp::Sin, x).unwrap();
        let primal = Arc::new(p.finish(vec![y]).unwrap());
        let (fwd, bwd) = if vjp {
            let mut f = GraphBuilder::new();
            let x = f.input("x", vector());
            let y = f.unary(UnaryOp::Sin, x).unwrap();
            let c = f.unary(UnaryOp::Cos, x).unwrap();
            let fwd = f.finish(vec![y, c]).unwrap();
            let mut b = GraphBuilder::new();
            let c = b.input("residual0", vector());
            let g = b.input("cotangent0", vector());
            let ct = b.mul(g, c).unwrap();
            (
                Some(Arc::new(fwd)),
                Some(Arc::new(b.finish(vec![ct]).unwrap())),
            )
        } else {
            (None, None)
        };
        let jvp = jvp.then(|| {
            let mut j = GraphBuilder::new();
            let x = j.input("x", vector());
            let t = j.input("tangent/x", vector());
            let c = j.unary(UnaryOp::Cos, x).unwrap();
            let tc = j.mul(t, c).unwrap();
            Arc::new(j.finish(vec![tc]).unwrap())
        });
        Arc::new(CustomRule {
            name: "mysin".into(),
            primal,
            fwd,
            bwd,
            jvp,
            rematerialize,
        })
    }

    fn calling(rule: Arc<CustomRule>) -> Graph {
        let mut b = GraphBuilder::new();
        let x = b.input("x", vector());
        let y = b
            .push(Op::Custom(CustomCall { rule, output: 0 }), &[x])
            .unwrap();
        let s = b.sum(y, None, false).unwrap();
        b.finish(vec![s]).unwrap()
    }

    fn has_custom(g: &Graph, nodes: &[NodeId]) -> bool {
        // Whether a custom node feeds one of `nodes`.
        let mut live = vec![false; g.len()];
        for n in nodes {
            live[n.index()] = true;
        }
        for i in (0..g.len()).rev() {
            if live[i] {
                for o in &g.nodes()[i].operands {
                    live[o.index()] = true;
                }
            }
        }
        g.nodes()
            .iter()
            .enumerate()
            .any(|(i, n)| live[i] && matches!(n.op, Op::Custom(_)))
    }

    #[test]
    fn reverse_mode_inlines_the_rules() {
        for (vjp, jvp, remat) in [
            (true, false, false),
            (false, true, false),
            (false, false, true),
        ] {
            let g = calling(sin_rule(vjp, jvp, remat));
            let vg = vjp_graph(&g, &[true], &[Seed::Ones]).unwrap();
            assert_eq!(vg.outputs().len(), 2);
            assert!(!has_custom(&vg, &vg.outputs()[1..]), "{vg}");
            // The value keeps the rule for later transforms.
            assert!(has_custom(&vg, &vg.outputs()[..1]));
        }
    }

    #[test]
    fn forward_mode_of_a_custom_vjp_is_tf4() {
        let g = calling(sin_rule(true, false, false));
        let err = jvp_graph(&g, &[true]).unwrap_err();
        match &err {
            IrError::Unsupported { op, message } => {
                assert_eq!(op, "custom_vjp");
                assert_eq!(
                    message,
                    "forward-mode differentiation (jvp) of custom_vjp(mysin) is not supported"
                );
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
        for (jvp, remat) in [(true, false), (false, true)] {
            let g = calling(sin_rule(false, jvp, remat));
            let jg = jvp_graph(&g, &[true]).unwrap();
            assert!(!has_custom(&jg, &jg.outputs()[1..]), "{jg}");
        }
    }
}
