//! Cancellation and allocation failures across the plugin boundary, with the CPU backend
//! loaded as a plugin: a library with its own copy of `quabla-backend`, whose cancellation
//! flags the host never sets. The host passes its flags with every run, so a loop that never
//! ends inside the plugin stops when the host's token is cancelled (or the host is
//! interrupted), and a buffer the plugin cannot allocate comes back as a typed
//! `OutOfMemory`, not an abort.

use quabla_backend::cancel::{self, CancelToken};
use quabla_backend::registry::Plugin;
use quabla_backend::{Backend, BackendError, HostTensor};
use quabla_conformance::plugins::build;
use quabla_ir::{
    Comparison, DType, Graph, GraphBuilder, HostData, NodeId, Plan, Region, RegionForm, RegionKind,
    Shape, TensorType,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn cpu_plugin() -> Arc<dyn Backend> {
    let built = build().unwrap_or_else(|e| panic!("{e}"));
    Arc::new(Plugin::load(&built.cpu_plugin()).unwrap().open().unwrap())
}

fn scalar(v: f64) -> HostTensor {
    HostTensor::new(Shape::scalar(), HostData::F64(vec![v].into()))
}

fn graph(
    inputs: &[TensorType],
    f: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> Vec<NodeId>,
) -> Graph {
    let mut b = GraphBuilder::new();
    let ins: Vec<NodeId> = inputs
        .iter()
        .enumerate()
        .map(|(k, t)| b.input(format!("in{k}"), t.clone()))
        .collect();
    let outs = f(&mut b, &ins);
    b.finish(outs).unwrap()
}

/// `while i < limit: i += 1`, with `limit` an input (infinity: never ends).
fn counting_while() -> Plan {
    let s = TensorType::new(DType::F64, Shape::scalar());
    let ins = [s.clone(), s];
    let cond = graph(&ins, |b, p| {
        vec![b.compare(Comparison::Less, p[0], p[1]).unwrap()]
    });
    let body = graph(&ins, |b, p| {
        let one = b.scalar(1.0, DType::F64, false);
        vec![b.add(p[0], one).unwrap()]
    });
    let region = Arc::new(
        Region::new(
            RegionKind::While {
                n_carry: 1,
                cond: Arc::new(cond),
                body: Arc::new(body),
                max_trips: None,
            },
            RegionForm::While,
            0,
        )
        .unwrap(),
    );
    let g = graph(region.operand_types(), |b, p| {
        b.push_region_calls(region.clone(), 0..1, p).unwrap()
    });
    Plan::compile(&g)
}

#[test]
fn a_loop_inside_the_plugin_stops_when_the_hosts_token_is_cancelled() {
    let exe = cpu_plugin().compile(&counting_while()).unwrap();
    let token = CancelToken::new();
    let remote = token.clone();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        remote.cancel();
        Instant::now()
    });
    let result = cancel::with_token(&token, || exe.run(&[scalar(0.0), scalar(f64::INFINITY)]));
    let returned = Instant::now();
    let at = canceller.join().unwrap();
    assert_eq!(result.unwrap_err(), BackendError::Cancelled);
    println!(
        "plugin: returned {:?} after cancel()",
        returned.saturating_duration_since(at)
    );
    // The plugin keeps nothing of the token: the next run completes.
    let out = exe.run(&[scalar(0.0), scalar(5.0)]).unwrap();
    assert_eq!(out, vec![scalar(5.0)]);
}

#[test]
fn a_buffer_the_plugin_cannot_allocate_comes_back_typed() {
    // A scalar broadcast to 2^47 float64 values (2^50 bytes, more than any address space).
    let g = graph(&[TensorType::new(DType::F64, Shape::scalar())], |b, p| {
        let big = b
            .broadcast_to(p[0], Shape::new(vec![1 << 47]).unwrap())
            .unwrap();
        vec![b.sum(big, None, false).unwrap()]
    });
    let exe = cpu_plugin().compile(&Plan::compile(&g)).unwrap();
    for _ in 0..2 {
        assert_eq!(
            exe.run(&[scalar(1.0)]).unwrap_err(),
            BackendError::OutOfMemory {
                bytes: 1 << 50,
                what: "a tensor of shape [140737488355328] float64".into()
            }
        );
    }
}
