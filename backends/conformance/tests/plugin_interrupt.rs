//! The host's process-wide interrupt reaches a plan running inside a plugin (the CPU backend
//! loaded as a library with its own copy of `quabla-backend`), alone in this test process:
//! any run in any thread could observe it.

use quabla_backend::registry::Plugin;
use quabla_backend::{cancel, Backend, BackendError, HostTensor};
use quabla_conformance::plugins::build;
use quabla_ir::{
    Comparison, DType, Graph, GraphBuilder, HostData, NodeId, Plan, Region, RegionForm, RegionKind,
    Shape, TensorType,
};
use std::sync::Arc;
use std::time::Duration;

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

fn scalar(v: f64) -> HostTensor {
    HostTensor::new(Shape::scalar(), HostData::F64(vec![v].into()))
}

#[test]
fn the_hosts_interrupt_stops_a_loop_inside_the_plugin_and_is_consumed_there() {
    let built = build().unwrap_or_else(|e| panic!("{e}"));
    let backend = Plugin::load(&built.cpu_plugin()).unwrap().open().unwrap();
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
    let exe = backend.compile(&Plan::compile(&g)).unwrap();

    let interrupter = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(50));
        cancel::interrupt();
    });
    let result = exe.run(&[scalar(0.0), scalar(f64::INFINITY)]);
    interrupter.join().unwrap();
    assert_eq!(result.unwrap_err(), BackendError::Cancelled);
    // The plugin's check consumed the host's flag.
    assert!(!cancel::interrupt_pending());
    assert_eq!(
        exe.run(&[scalar(0.0), scalar(3.0)]).unwrap(),
        vec![scalar(3.0)]
    );
}
