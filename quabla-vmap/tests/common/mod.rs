//! The vmap-versus-loop harness shared by the integration tests: random data, slicing and
//! stacking of host arrays, running graphs on the CPU reference backend, and a reference
//! interpreter for graphs with control-flow regions (`interp`).

#![allow(dead_code)]

pub mod interp;

use quabla_backend::{Executable, HostTensor};
use quabla_cpu::CpuBackend;
use quabla_ir::{normalize_axis, DType, Graph, GraphBuilder, HostData, NodeId, Op, Plan, Shape};
use quabla_ir::{Node, TensorType};
use quabla_vmap::batch_graph;

/// The project's deterministic test generator, with the shapes these tests draw.
pub struct Rng(quabla_random::testing::TestRng);

impl std::ops::Deref for Rng {
    type Target = quabla_random::testing::TestRng;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Rng {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(quabla_random::testing::TestRng::new(
            seed.wrapping_mul(quabla_random::GAMMA).wrapping_add(1),
        ))
    }

    /// Extents in `1..=3` of a rank in `lo..=hi`.
    pub fn dims(&mut self, lo: usize, hi: usize) -> Vec<usize> {
        let rank = self.range(lo, hi);
        (0..rank).map(|_| self.range(1, 3)).collect()
    }

    /// A shape that broadcasts to `target`: a random suffix of it with some extents set to 1.
    pub fn partner(&mut self, target: &[usize]) -> Vec<usize> {
        let keep = self.range(0, target.len());
        target[target.len() - keep..]
            .iter()
            .map(|&d| if self.chance(0.3) { 1 } else { d })
            .collect()
    }

    /// A random permutation of `0..n`.
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            p.swap(i, self.below(i + 1));
        }
        p
    }

    /// A sorted random subset of `0..n`.
    pub fn subset(&mut self, n: usize) -> Vec<usize> {
        (0..n).filter(|_| self.chance(0.5)).collect()
    }
}

/// How input values are drawn.
#[derive(Debug, Clone, Copy)]
pub enum Domain {
    Uniform(f64, f64),
    /// One of a few values, so that ties and signed zeros occur.
    Discrete(&'static [f64]),
}

impl Domain {
    pub fn sample(self, rng: &mut Rng) -> f64 {
        match self {
            Domain::Uniform(lo, hi) => rng.between(lo, hi),
            Domain::Discrete(values) => values[rng.below(values.len())],
        }
    }
}

pub fn shape(dims: &[usize]) -> Shape {
    Shape::new(dims.to_vec()).unwrap()
}

pub fn input(b: &mut GraphBuilder, name: &str, dtype: DType, dims: &[usize]) -> NodeId {
    b.input(name, TensorType::new(dtype, shape(dims)))
}

/// Runs a graph as it is (no passes) on the CPU reference backend.
pub fn run(g: &Graph, inputs: &[HostTensor]) -> Vec<HostTensor> {
    run_plan(&Plan::from_graph_unoptimized(g.clone()), inputs)
}

/// Runs a graph after the plan passes on the CPU reference backend.
pub fn run_compiled(g: &Graph, inputs: &[HostTensor]) -> Vec<HostTensor> {
    run_plan(&Plan::compile(g), inputs)
}

fn run_plan(plan: &Plan, inputs: &[HostTensor]) -> Vec<HostTensor> {
    CpuBackend::new()
        .compile_plan(plan)
        .unwrap_or_else(|e| panic!("compile failed: {e}\n{}", plan.as_text()))
        .run(inputs)
        .unwrap_or_else(|e| panic!("run failed: {e}\n{}", plan.as_text()))
}

/// Random data of a type.
pub fn random_tensor(rng: &mut Rng, ty: &TensorType, domain: Domain) -> HostTensor {
    let n = ty.shape.size();
    let values: Vec<f64> = match ty.dtype {
        DType::Bool => (0..n).map(|_| rng.below(2) as f64).collect(),
        _ => (0..n).map(|_| domain.sample(rng)).collect(),
    };
    HostTensor::new(ty.shape.clone(), HostData::from_f64(ty.dtype, values))
}

/// Index `i` of `axis` of `x`, with that axis removed.
pub fn take(x: &HostTensor, axis: usize, i: usize) -> HostTensor {
    let dims = x.shape.dims();
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    // Element positions, so that every dtype (int64 included) moves exactly.
    let mut picked = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        let start = (o * dims[axis] + i) * inner;
        picked.extend(start..start + inner);
    }
    let mut rest = dims.to_vec();
    rest.remove(axis);
    HostTensor::new(shape(&rest), gather(&[&x.data], &picked))
}

/// Stacks equally shaped tensors along a new axis at `axis`.
pub fn stack(parts: &[HostTensor], axis: usize) -> HostTensor {
    let dims = parts[0].shape.dims();
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis..].iter().product();
    let mut picked = Vec::with_capacity(outer * inner * parts.len());
    for o in 0..outer {
        for p in 0..parts.len() {
            picked.extend((o * inner..(o + 1) * inner).map(|k| p * outer * inner + k));
        }
    }
    let mut stacked = dims.to_vec();
    stacked.insert(axis, parts.len());
    let datas: Vec<&HostData> = parts.iter().map(|p| &p.data).collect();
    HostTensor::new(shape(&stacked), gather(&datas, &picked))
}

/// The elements at `positions` of the concatenation of `parts` (all of one dtype), exactly.
fn gather(parts: &[&HostData], positions: &[usize]) -> HostData {
    let dtype = parts[0].dtype();
    if dtype.is_integer() {
        let all: Vec<i64> = parts.iter().flat_map(|p| p.to_i64_vec()).collect();
        HostData::from_i64(dtype, positions.iter().map(|&k| all[k]))
    } else {
        let all: Vec<f64> = parts.iter().flat_map(|p| p.to_f64_vec()).collect();
        HostData::from_f64(dtype, positions.iter().map(|&k| all[k]))
    }
}

/// Bitwise equality of dtype, shape and every element, except that all NaNs are equal (IEEE
/// leaves NaN payloads unspecified).
pub fn same_values(a: &HostTensor, b: &HostTensor) -> bool {
    a.dtype() == b.dtype()
        && a.shape == b.shape
        && a.data
            .to_f64_vec()
            .iter()
            .zip(b.data.to_f64_vec())
            .all(|(x, y)| (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits())
}

/// Which outputs of `g` depend on a mapped input (computed independently of the crate).
pub fn depends_on_mapped(g: &Graph, in_axes: &[Option<usize>]) -> Vec<bool> {
    let mut dep = vec![false; g.len()];
    let mut k = 0;
    for (i, node) in g.nodes().iter().enumerate() {
        if let Op::Input { .. } = node.op {
            dep[i] = in_axes[k].is_some();
            k += 1;
        } else {
            dep[i] = node.operands.iter().any(|o| dep[o.index()]);
        }
    }
    g.outputs().iter().map(|o| dep[o.index()]).collect()
}

/// One vmap-versus-loop trial: batches `g` with `in_axes`, `size` and `out_axes`, runs it on
/// random batched inputs, and compares every output with running `g` on each example's
/// slices and stacking the results at the output's axis (bitwise, NaNs aside).
pub fn check_trial(
    g: &Graph,
    in_axes: &[Option<usize>],
    size: usize,
    out_axes: &[Option<usize>],
    rng: &mut Rng,
    domain: Domain,
    context: &str,
) -> Graph {
    let bg = batch_graph(g, in_axes, size, out_axes)
        .unwrap_or_else(|e| panic!("{context}: batch_graph failed: {e}\n{g}"));
    bg.verify().unwrap();
    let batched_inputs: Vec<HostTensor> = bg
        .inputs()
        .map(|(_, _, ty)| random_tensor(rng, ty, domain))
        .collect();
    let got = run(&bg, &batched_inputs);
    let per_example: Vec<Vec<HostTensor>> = (0..size)
        .map(|i| {
            let slices: Vec<HostTensor> = batched_inputs
                .iter()
                .zip(in_axes)
                .map(|(x, axis)| match axis {
                    Some(a) => take(x, *a, i),
                    None => x.clone(),
                })
                .collect();
            run(g, &slices)
        })
        .collect();
    for (k, axis) in out_axes.iter().enumerate() {
        let expected = match axis {
            Some(a) => {
                let parts: Vec<HostTensor> = per_example.iter().map(|r| r[k].clone()).collect();
                stack(&parts, *a)
            }
            None => per_example[0][k].clone(),
        };
        assert!(
            same_values(&got[k], &expected),
            "{context}: output {k} differs (in_axes {in_axes:?}, size {size}, out_axes {out_axes:?})\n\
             batched: {:?}\nloop:    {:?}\ngraph:\n{g}\nbatched graph:\n{bg}",
            got[k],
            expected
        );
    }
    bg
}

/// Random `in_axes` (about a third unmapped), drawn as possibly negative axes and normalized.
pub fn random_in_axes(rng: &mut Rng, g: &Graph) -> Vec<Option<usize>> {
    g.inputs()
        .map(|(_, _, ty)| {
            if rng.chance(0.3) {
                None
            } else {
                let r = ty.shape.rank() + 1;
                let a = rng.signed(-(r as isize), r as isize - 1);
                Some(normalize_axis(a, r).unwrap())
            }
        })
        .collect()
}

/// Random `out_axes`: `None` for some outputs that do not depend on a mapped input, otherwise
/// a possibly negative axis, normalized.
pub fn random_out_axes(rng: &mut Rng, g: &Graph, in_axes: &[Option<usize>]) -> Vec<Option<usize>> {
    let deps = depends_on_mapped(g, in_axes);
    g.outputs()
        .iter()
        .zip(deps)
        .map(|(&o, dep)| {
            if !dep && rng.chance(0.5) {
                None
            } else {
                let r = g.node(o).ty.shape.rank() + 1;
                let a = rng.signed(-(r as isize), r as isize - 1);
                Some(normalize_axis(a, r).unwrap())
            }
        })
        .collect()
}

/// The nodes of a graph with a given op name.
pub fn nodes_named<'a>(g: &'a Graph, name: &str) -> Vec<&'a Node> {
    g.nodes().iter().filter(|n| n.op.name() == name).collect()
}
