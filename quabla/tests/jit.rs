//! `jit`: caching per signature, LRU eviction and `RetraceWarning`, static values, closure
//! capture, tracer errors, lowering, and the §3/§12 acceptance examples that need only `jit`.

use qb::prelude::*;
use qb::warnings::{self, Action, Warning, WarningKind};
use qb::{Error, ShapeDtype, Static, Tensor, TracerErrorKind};
use quabla as qb;
use std::cell::Cell;
use std::sync::{Arc, Mutex};

/// Warning policy and handler are process-wide: tests that touch them take this lock.
static WARNINGS: Mutex<()> = Mutex::new(());

fn capture_warnings() -> Arc<Mutex<Vec<Warning>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    warnings::set_handler(move |w| sink.lock().unwrap().push(w.clone()));
    seen
}

#[test]
fn e17_constant_folding_rounds_to_the_node_dtype() -> qb::Result<()> {
    let f = qb::jit(|x: Tensor| &x + 0.1);
    let r = f.call(&qb::F32.zeros([])?)?;
    assert_eq!(r.dtype(), qb::F32);
    assert_eq!(r.item()?, 0.10000000149011612);
    Ok(())
}

#[test]
fn e35_static_arguments() -> qb::Result<()> {
    let power_sum = qb::jit(|(x, n): (Tensor, Static<i32>)| x.powi(n.0).sum());
    let x = qb::array([1.0, 2.0])?;
    assert_eq!(power_sum.call(&(x.clone(), Static(3)))?.item()?, 9.0);
    assert_eq!(power_sum.call(&(x, Static(2)))?.item()?, 5.0);
    assert_eq!(power_sum.cache_size(), 2);
    Ok(())
}

#[test]
fn e36_lru_eviction_warning() -> qb::Result<()> {
    let _lock = WARNINGS.lock().unwrap_or_else(|e| e.into_inner());
    let seen = capture_warnings();
    warnings::set_action(WarningKind::Retrace, Action::Always);
    let f = qb::jit(|x: Tensor| &x * 2.0).name("<lambda>").max_traces(2);
    f.call(&qb::zeros([1])?)?;
    f.call(&qb::zeros([2])?)?;
    assert!(seen.lock().unwrap().is_empty());
    f.call(&qb::zeros([3])?)?;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let text = seen[0].to_string();
    assert_eq!(
        text,
        "jit(<lambda>) exceeded max_traces=2; evicted the least recently used trace:\n  (float64[1],)\nnew signature:\n  (float64[3],)\nchanged: arg 0 leaf arg0: shape [1] -> [3]\nto stop retracing, pass changing scalars as quabla.array(value, dtype=...) or raise max_traces"
    );
    Ok(())
}

#[test]
fn lru_order_hits_refresh_recency() -> qb::Result<()> {
    let _lock = WARNINGS.lock().unwrap_or_else(|e| e.into_inner());
    let seen = capture_warnings();
    warnings::set_action(WarningKind::Retrace, Action::Always);
    let traces = Cell::new(0);
    let f = qb::jit(|x: Tensor| {
        traces.set(traces.get() + 1);
        x.sin()
    })
    .max_traces(2);
    f.call(&qb::zeros([1])?)?; // trace [1]
    f.call(&qb::zeros([2])?)?; // trace [2]
    f.call(&qb::zeros([1])?)?; // hit: [1] becomes most recent
    f.call(&qb::zeros([3])?)?; // evicts [2]
    f.call(&qb::zeros([1])?)?; // still cached
    assert_eq!(traces.get(), 3);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert!(seen[0]
        .to_string()
        .contains("evicted the least recently used trace:\n  (float64[2],)"));
    Ok(())
}

#[test]
fn retrace_policies() -> qb::Result<()> {
    let _lock = WARNINGS.lock().unwrap_or_else(|e| e.into_inner());
    let seen = capture_warnings();
    let f = qb::jit(|x: Tensor| x.exp()).max_traces(1);
    warnings::set_action(WarningKind::Retrace, Action::Ignore);
    f.call(&qb::zeros([1])?)?;
    f.call(&qb::zeros([2])?)?;
    assert!(seen.lock().unwrap().is_empty());
    warnings::set_action(WarningKind::Retrace, Action::Once);
    f.call(&qb::zeros([3])?)?;
    f.call(&qb::zeros([4])?)?;
    assert_eq!(seen.lock().unwrap().len(), 1);
    warnings::set_action(WarningKind::Retrace, Action::Error);
    let err = f.call(&qb::zeros([5])?).unwrap_err();
    assert!(matches!(err, Error::Warning(ref w) if matches!(**w, Warning::Retrace { .. })));
    assert!(err
        .to_string()
        .starts_with("jit(<closure>) exceeded max_traces=1"));
    warnings::set_action(WarningKind::Retrace, Action::Always);
    Ok(())
}

#[test]
fn e38_tracing_happens_once_per_signature() -> qb::Result<()> {
    let printed = std::cell::RefCell::new(Vec::new());
    let f = qb::jit(|x: Tensor| {
        printed.borrow_mut().push(format!("tracing with {x}"));
        &x * 2.0
    });
    f.call(&qb::array([1.0, 2.0])?)?;
    let r = f.call(&qb::array([3.0, 4.0])?)?;
    assert_eq!(r.to_vec::<f64>()?, vec![6.0, 8.0]);
    f.call(&qb::array([1.0, 2.0, 3.0])?)?;
    assert_eq!(
        *printed.borrow(),
        vec![
            "tracing with TraceTensor(node_id=0, shape=[2], dtype=float64)",
            "tracing with TraceTensor(node_id=0, shape=[3], dtype=float64)"
        ]
    );
    Ok(())
}

#[test]
fn e39_weak_scalars_retrace_arrays_do_not() -> qb::Result<()> {
    let count = Cell::new(0);
    let h = qb::jit(|(x, s): (Tensor, qb::tree::Leaf)| {
        count.set(count.get() + 1);
        match s {
            qb::tree::Leaf::F64(v) => &x * v,
            qb::tree::Leaf::Tensor(t) => &x * &t,
            _ => unreachable!(),
        }
    });
    let x32 = qb::F32.zeros([2])?;
    let f = |v: f64| qb::tree::Leaf::F64(v);
    h.call(&(x32.clone(), f(0.5)))?;
    h.call(&(x32.clone(), f(0.5)))?;
    h.call(&(x32.clone(), f(0.25)))?;
    assert_eq!(count.get(), 2);
    assert_eq!(h.call(&(x32.clone(), f(0.5)))?.dtype(), qb::F32);
    let t = |v: f64| qb::tree::Leaf::Tensor(qb::F32.array(v).unwrap());
    h.call(&(x32.clone(), t(0.3)))?;
    h.call(&(x32, t(0.7)))?;
    assert_eq!(count.get(), 3);
    Ok(())
}

#[test]
fn f64_arguments_are_static_weak_scalars() -> qb::Result<()> {
    let count = Cell::new(0);
    let h = qb::jit(|(x, s): (Tensor, f64)| {
        count.set(count.get() + 1);
        &x * s
    });
    let x32 = qb::F32.ones([2])?;
    assert_eq!(
        h.call(&(x32.clone(), 0.5))?.to_vec::<f32>()?,
        vec![0.5, 0.5]
    );
    h.call(&(x32.clone(), 0.5))?;
    h.call(&(x32.clone(), -0.0))?;
    h.call(&(x32, 0.0))?;
    assert_eq!(count.get(), 3, "0.0 and -0.0 are different static values");
    Ok(())
}

#[test]
fn e37_tracer_control_flow_and_concretization_errors() -> qb::Result<()> {
    let f = qb::jit(|x: Tensor| {
        if x.greater(0.0)?.item_bool()? {
            Ok(x)
        } else {
            -&x
        }
    });
    let err = f.call(&qb::array(1.0)?).unwrap_err();
    assert!(matches!(
        err,
        Error::Tracer {
            kind: TracerErrorKind::ControlFlow,
            ..
        }
    ));
    assert!(err
        .to_string()
        .starts_with("TraceTensor cannot drive Python control flow:"));
    let g = qb::jit(|x: Tensor| qb::array(x.item()?));
    let err = g.call(&qb::array(1.0)?).unwrap_err();
    assert!(matches!(
        err,
        Error::Tracer {
            kind: TracerErrorKind::Concretization,
            ..
        }
    ));
    assert!(err
        .to_string()
        .contains("its value is not known while tracing"));
    Ok(())
}

#[test]
fn escaped_tracers_are_detected() -> qb::Result<()> {
    let stash = std::cell::RefCell::new(None);
    let f = qb::jit(|x: Tensor| {
        *stash.borrow_mut() = Some(x.clone());
        x.sin()
    });
    f.call(&qb::zeros([2])?)?;
    let leaked = stash.borrow().clone().unwrap();
    let err = (&leaked + 1.0).unwrap_err();
    assert!(matches!(
        err,
        Error::Tracer {
            kind: TracerErrorKind::Leaked,
            ..
        }
    ));
    assert!(err.to_string().contains("was used after its trace ended"));
    // A later, unrelated trace does not accept it either.
    let g = qb::jit(|x: Tensor| &x + &leaked);
    assert!(g.call(&qb::zeros([2])?).is_err());
    Ok(())
}

#[test]
fn captured_eager_tensors_become_constants() -> qb::Result<()> {
    let w = qb::array([1.0, 2.0, 3.0])?;
    let f = qb::jit(|x: Tensor| (&x * &w).sum());
    assert_eq!(f.call(&qb::ones([3])?)?.item()?, 6.0);
    let lo = f.lower(&ShapeDtype::new([3], qb::F64))?;
    assert!(
        lo.as_text().contains("constant(dense<[1.0, 2.0, 3.0]>)"),
        "{}",
        lo.as_text()
    );
    Ok(())
}

#[test]
fn nested_jit_inlines_and_closes_over_outer_tracers() -> qb::Result<()> {
    let outer = qb::jit(|(x, y): (Tensor, Tensor)| {
        let inner = qb::jit(|z: Tensor| &z * &y); // closes over the outer tracer y
        inner.call(&x.sin()?)?.sum()
    });
    let r = outer.call(&(qb::array([0.5, 1.0])?, qb::array([2.0, 3.0])?))?;
    let want = 0.5f64.sin() * 2.0 + 1.0f64.sin() * 3.0;
    assert!((r.item()? - want).abs() < 1e-15);
    let lo = outer.lower(&(ShapeDtype::new([2], qb::F64), ShapeDtype::new([2], qb::F64)))?;
    assert_eq!(lo.node_count(), 5, "{}", lo.as_text());
    Ok(())
}

#[test]
fn trees_in_and_out() -> qb::Result<()> {
    use std::collections::BTreeMap;
    let f = qb::jit(|(p, x): (BTreeMap<String, Tensor>, Tensor)| {
        let y = (x.matmul(&p["w"])? + &p["b"])?;
        Ok((y.tanh()?, vec![y.sum()?, 1.5.into_tensor()?]))
    });
    let mut p = BTreeMap::new();
    p.insert("w".to_string(), qb::array([[0.5], [-0.3]])?);
    p.insert("b".to_string(), qb::array([0.1])?);
    let x = qb::array([[1.0, 2.0], [3.0, 4.0]])?;
    let (t, v) = f.call(&(p, x))?;
    assert_eq!(t.shape(), &[2, 1]);
    assert!((v[0].item()? - (0.5 - 0.6 + 0.1 + 1.5 - 1.2 + 0.1)).abs() < 1e-12);
    assert_eq!(v[1].item()?, 1.5);
    Ok(())
}

trait IntoTensor {
    fn into_tensor(self) -> qb::Result<Tensor>;
}

impl IntoTensor for f64 {
    fn into_tensor(self) -> qb::Result<Tensor> {
        qb::array(self)
    }
}

#[test]
fn e90_lowered_text_of_a_small_loss() -> qb::Result<()> {
    use std::collections::BTreeMap;
    let loss = qb::jit(|(params, x): (BTreeMap<String, Tensor>, Tensor)| {
        (x.matmul(&params["w"])? + &params["b"])
            .tanh()
            .powi(2)
            .mean()
    })
    .arg_names(&["params", "x"]);
    let mut p = BTreeMap::new();
    p.insert("w".to_string(), ShapeDtype::new([2, 1], qb::F32));
    p.insert("b".to_string(), ShapeDtype::new([1], qb::F32));
    let lowered = loss.lower(&(p, ShapeDtype::new([2, 2], qb::F32)))?;
    assert_eq!(
        lowered.as_text(),
        "%0 = input[name=params/b] : tensor<1xf32>\n\
         %1 = input[name=params/w] : tensor<2x1xf32>\n\
         %2 = input[name=x] : tensor<2x2xf32>\n\
         %3 = matmul(%2, %1) : tensor<2x1xf32>\n\
         %4 = add(%3, %0) : tensor<2x1xf32>\n\
         %5 = tanh(%4) : tensor<2x1xf32>\n\
         %6 = powi(%5, 2) : tensor<2x1xf32>\n\
         %7 = mean(%6) : tensor<f32>\n\
         outputs: [[]]\n"
    );
    // E91: compiling it, and a signature mismatch.
    let f = lowered.compile();
    let mut params = BTreeMap::new();
    params.insert("w".to_string(), qb::F32.array([[0.5], [-0.3]])?);
    params.insert("b".to_string(), qb::F32.array([0.1])?);
    let x = qb::F32.array([[1.0, 2.0], [3.0, 4.0]])?;
    let v = f.call(&(params.clone(), x.clone()))?;
    assert_eq!(v.dtype(), qb::F32);
    assert!((v.item()? - 0.07218059).abs() < 1e-6 * 0.07218059);
    let err = f.call(&(params, x.astype(qb::F64)?)).unwrap_err();
    assert!(matches!(err, Error::Structure { .. }));
    assert!(err.to_string().starts_with(
        "compiled function expects ({'b': float32[1], 'w': float32[2,1]}, float32[2,2]), got"
    ));
    Ok(())
}

#[test]
fn e92_five_node_program() -> qb::Result<()> {
    let g = qb::jit(|(x, w): (Tensor, Tensor)| (&x * &w).sin().sum()).arg_names(&["x", "w"]);
    let lo = g.lower(&(ShapeDtype::new([2], qb::F64), ShapeDtype::new([2], qb::F64)))?;
    let text = lo.as_text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        vec![
            "%0 = input[name=x] : tensor<2xf64>",
            "%1 = input[name=w] : tensor<2xf64>",
            "%2 = mul(%0, %1) : tensor<2xf64>",
            "%3 = sin(%2) : tensor<2xf64>",
            "%4 = sum(%3) : tensor<f64>",
            "outputs: [[]]",
        ]
    );
    let v = lo
        .compile()
        .call(&(qb::array([1.0, 2.0])?, qb::array([0.5, 0.25])?))?;
    assert!((v.item()? - 0.95885108).abs() < 1e-8);
    Ok(())
}

#[test]
fn e94_device_selection_errors() -> qb::Result<()> {
    let bad = qb::jit(|x: Tensor| Ok(x)).device("gpu");
    let err = bad.call(&qb::ones([2])?).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }));
    assert!(err.to_string().contains("invalid device \"gpu\""));
    let cuda = qb::jit(|x: Tensor| Ok(x)).device("cuda");
    match cuda.call(&qb::ones([2])?).unwrap_err() {
        Error::Unsupported {
            op,
            device,
            message,
        } => {
            assert_eq!(op, "target");
            assert_eq!(device.as_deref(), Some("cuda"));
            assert!(message.contains("cuda target is unavailable in this build"));
        }
        other => panic!("{other}"),
    }
    let mlx = qb::jit(|x: Tensor| Ok(x)).device("mlx");
    assert!(mlx
        .call(&qb::ones([2])?)
        .unwrap_err()
        .to_string()
        .contains("mlx target is unavailable in this build"));
    assert!(qb::jit(|x: Tensor| Ok(x))
        .max_traces(0)
        .call(&qb::ones([1])?)
        .is_err());
    assert!(qb::jit(|x: Tensor| Ok(x))
        .precision(Some("float16"))
        .call(&qb::ones([1])?)
        .is_err());
    Ok(())
}

#[test]
fn jit_matches_eager_bit_for_bit() -> qb::Result<()> {
    let f = |x: Tensor| x.sin().powi(2).add(x.cos()).mul(0.1).exp().sum_axes(0);
    let x = qb::F32.linspace(-3.0, 3.0, 1000)?.reshape([10, 100])?;
    let eager = f(x.clone())?.to_vec::<f32>()?;
    let jitted = qb::jit(f).call(&x)?.to_vec::<f32>()?;
    assert_eq!(
        eager.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        jitted.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    Ok(())
}

#[test]
fn static_argnums_reject_tensors() -> qb::Result<()> {
    let f = qb::jit(|(x, y): (Tensor, Tensor)| &x + &y).static_argnums(&[1]);
    let err = f.call(&(qb::ones([1])?, qb::ones([1])?)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "static argument 1 is not hashable (Tensor); static values must support hash()"
    );
    Ok(())
}

/// Cached calls hand out fresh results: what an earlier call returned is never overwritten by a
/// later one, and results mixing plan outputs, a repeated output and static leaves are rebuilt
/// the same on every hit.
#[test]
fn cached_calls_return_independent_results() -> qb::Result<()> {
    let traces = Cell::new(0);
    let f = qb::jit(|(x, k): (Tensor, f64)| {
        traces.set(traces.get() + 1);
        let y = (&x * k).add(1.0)?;
        Ok((y.clone(), k, y, x.sum()?))
    });
    let mut kept = Vec::new();
    for i in 0..5 {
        let x = qb::F32.full([4], i as f64)?;
        kept.push((i, f.call(&(x, 3.0))?));
    }
    assert_eq!(traces.get(), 1);
    for (i, (a, k, b, s)) in kept {
        let want = (i as f32) * 3.0 + 1.0;
        assert_eq!(a.to_vec::<f32>()?, vec![want; 4]);
        assert_eq!(b.to_vec::<f32>()?, vec![want; 4]);
        assert_eq!(k, 3.0);
        assert_eq!(s.item()?, 4.0 * i as f64);
        assert_eq!(a.dtype(), qb::F32);
    }
    Ok(())
}

/// An argument whose flattening itself calls a jitted function (the inner call runs while the
/// outer call is flattening its arguments).
#[test]
fn jit_calls_made_while_flattening_arguments() -> qb::Result<()> {
    use qb::tree::{Leaf, Tree, TreeDef};

    struct Doubled(Tensor);

    impl Tree for Doubled {
        fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
            let double = qb::jit(|x: Tensor| &x * 2.0);
            let doubled = double.call(&self.0).expect("doubling runs");
            leaves.push(Leaf::Tensor(doubled));
            TreeDef::Leaf
        }

        fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> qb::Result<Self> {
            Tensor::unflatten(def, leaves).map(Doubled)
        }
    }

    let f = qb::jit(|d: Doubled| d.0.add(1.0));
    for i in 0..3 {
        let y = f.call(&Doubled(qb::array([i as f64, 10.0])?))?;
        assert_eq!(y.to_vec::<f64>()?, vec![2.0 * i as f64 + 1.0, 21.0]);
    }
    assert_eq!(f.cache_size(), 1);
    Ok(())
}

/// A cached call with an escaped tracer as argument is TR2, as on the first call.
#[test]
fn cached_calls_reject_escaped_tracers() -> qb::Result<()> {
    let f = qb::jit(|x: Tensor| x.sin());
    let x = qb::zeros([2])?;
    f.call(&x)?;
    let leaked = std::cell::RefCell::new(None);
    qb::jit(|x: Tensor| {
        *leaked.borrow_mut() = Some(x.clone());
        Ok(x)
    })
    .call(&x)?;
    let tracer = leaked.borrow_mut().take().expect("a tracer was kept");
    let err = f.call(&tracer).unwrap_err();
    assert!(matches!(err, Error::Tracer { .. }), "{err}");
    Ok(())
}

/// `precision("float32")` (numerics.md §1.5): float32 contractions and sums run natively, within
/// the conformance tolerance of the reference; float64 work keeps the reference bits; the two
/// precisions are separate plans.
#[test]
fn precision_float32_runs_native_float32_contractions() -> qb::Result<()> {
    let f = |(a, b): (Tensor, Tensor)| a.matmul(&b)?.sum_axes(1);
    let a = qb::F32
        .linspace(-1.0, 1.0, 64 * 200)?
        .reshape([64, 200])?
        .sin()?;
    let b = qb::F32
        .linspace(-2.0, 3.0, 200 * 32)?
        .reshape([200, 32])?
        .cos()?;
    let reference = qb::jit(f).call(&(a.clone(), b.clone()))?.to_vec::<f32>()?;
    let native_jit = qb::jit(f).precision(Some("float32"));
    let native = native_jit.call(&(a.clone(), b.clone()))?.to_vec::<f32>()?;
    assert_eq!(native.len(), reference.len());
    let mut differs = false;
    for (n, r) in native.iter().zip(&reference) {
        // Each output sums 32 dot products of 200 terms of magnitude <= 1.
        assert!(
            (n - r).abs() <= 1e-5 + 1e-5 * r.abs() + 32.0 * 200.0 * 1e-7,
            "{n} vs {r}"
        );
        differs |= n.to_bits() != r.to_bits();
    }
    assert!(differs, "float32 accumulation rounds differently somewhere");
    // float64 arguments: the same bits as the reference.
    let (a64, b64) = (a.astype(qb::F64)?, b.astype(qb::F64)?);
    assert_eq!(
        native_jit
            .call(&(a64.clone(), b64.clone()))?
            .to_vec::<f64>()?,
        qb::jit(f).call(&(a64, b64))?.to_vec::<f64>()?
    );
    assert!(qb::jit(f)
        .precision(Some("float16"))
        .call(&(a, b))
        .unwrap_err()
        .to_string()
        .contains("precision must be None, \"float32\" or \"float64\""));
    Ok(())
}

/// `x * 0.5 + 1`, one output of its input's shape and dtype.
fn halve_and_add_one(x: Tensor) -> qb::Result<Tensor> {
    x.mul(0.5).add(1.0)
}

#[test]
fn donated_arguments_lend_their_storage_to_the_next_calls_outputs() -> qb::Result<()> {
    let f = qb::jit(halve_and_add_one).donate_argnums(&[0]);
    let plain = qb::jit(halve_and_add_one);
    let x0 = qb::arange(64.0)?;
    let expected = plain
        .call(&plain.call(&plain.call(&x0)?)?)?
        .to_vec::<f64>()?;
    let x = qb::arange(64.0)?;
    let storage = x.as_slice::<f64>()?.as_ptr() as usize;
    // Each call donates its argument; the CPU writes the next call's output into it.
    let y1 = f.call_donated(x)?;
    let y2 = f.call_donated(y1)?;
    assert_eq!(y2.as_slice::<f64>()?.as_ptr() as usize, storage);
    let y3 = f.call_donated(y2)?;
    assert_eq!(y3.to_vec::<f64>()?, expected);
    Ok(())
}

#[test]
fn a_donated_tensor_that_the_caller_still_holds_is_never_written() -> qb::Result<()> {
    let f = qb::jit(halve_and_add_one).donate_argnums(&[0]);
    let x = qb::arange(16.0)?;
    let kept = x.clone();
    let before = kept.to_vec::<f64>()?;
    let mut y = f.call_donated(x)?;
    for _ in 0..4 {
        // Each call's argument is shared with a clone kept here: lent, not donated.
        let clone = y.clone();
        y = f.call_donated(y)?;
        assert_eq!(clone.to_vec::<f64>()?.len(), 16);
        let _ = f.call(&clone)?;
    }
    assert_eq!(kept.to_vec::<f64>()?, before);
    // `call` borrows: donating nothing, it gives the same values.
    assert_eq!(
        f.call(&kept)?.to_vec::<f64>()?,
        qb::jit(halve_and_add_one).call(&kept)?.to_vec::<f64>()?
    );
    Ok(())
}

#[test]
fn donate_argnums_is_checked_against_the_call() {
    let f = qb::jit(|(x, _): (Tensor, Tensor)| x.mul(2.0)).donate_argnums(&[2]);
    let err = f
        .call_donated((qb::ones([2]).unwrap(), qb::ones([2]).unwrap()))
        .unwrap_err();
    assert!(
        err.to_string().contains(
            "donate_argnums names argument 2, but the function was called with 2 arguments"
        ),
        "{err}"
    );
    let g = qb::jit(|(x, n): (Tensor, f64)| x.mul(n))
        .static_argnums(&[1])
        .donate_argnums(&[1]);
    let err = g.call_donated((qb::ones([2]).unwrap(), 3.0)).unwrap_err();
    assert!(err.to_string().contains("both static and donated"), "{err}");
}

/// A plan input name split back into its parts (`/` separates, `~1` and `~0` stand for `/`
/// and `~` inside a part): names are a faithful encoding of leaf paths.
fn decode_name(name: &str) -> Vec<String> {
    name.split('/')
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// Plan input names never collide: a dict key holding `/` (or `~`) is escaped, so every leaf
/// name decodes back to its own path, for every tree of a family built from keys that look
/// like paths; the tree lowers to a program callable by name; repeated argument names
/// are refused.
#[test]
fn plan_input_names_never_collide() -> qb::Result<()> {
    use qb::tree::{DictKey, Value};
    let keys = [
        "a", "b", "0", "a/0", "a/0/b", "0/b", "/", "//", "~", "~1", "~0", "a~1b", "", "a/",
    ];
    let leaf = || Value::Array(qb::ones([1]).unwrap());
    let dict = |entries: Vec<(&str, Value)>| {
        Value::Dict(
            entries
                .into_iter()
                .map(|(k, v)| (DictKey::from(k), v))
                .collect(),
        )
    };
    // Values a key can hold: a leaf, a list, a list of dicts, a dict keyed by any key.
    let mut shapes: Vec<Value> = vec![
        leaf(),
        Value::List(vec![leaf(), leaf()]),
        Value::List(vec![dict(vec![("b", leaf())])]),
    ];
    shapes.extend(keys.iter().map(|k| dict(vec![(k, leaf())])));
    let mut trees = 0;
    for (i, k1) in keys.iter().enumerate() {
        for k2 in &keys[i + 1..] {
            for s1 in &shapes {
                for s2 in [&shapes[0], &shapes[2], &shapes[3 + i]] {
                    let tree = Value::Tuple(vec![dict(vec![(k1, s1.clone()), (k2, s2.clone())])]);
                    let def = qb::tree::structure(&tree);
                    let names = def.leaf_names(&["p".to_string()]);
                    let paths = def.leaf_paths();
                    assert_eq!(names.len(), paths.len());
                    let distinct: std::collections::HashSet<&String> = names.iter().collect();
                    assert_eq!(distinct.len(), names.len(), "{def}: {names:?}");
                    for (name, path) in names.iter().zip(&paths) {
                        let mut want = vec!["p".to_string()];
                        want.extend(path[1..].iter().map(|e| e.to_string()));
                        assert_eq!(decode_name(name), want, "{def}");
                    }
                    trees += 1;
                }
            }
        }
    }
    assert_eq!(trees, 91 * 17 * 3);

    // The tree: two inputs, callable by name, each bound to its own leaf.
    let f = qb::jit(|v: Value| {
        let Value::Dict(entries) = &v else {
            unreachable!()
        };
        let a = qb::tree::leaves(&entries[0].1)[0]
            .as_tensor()
            .unwrap()
            .clone();
        let b = qb::tree::leaves(&entries[1].1)[0]
            .as_tensor()
            .unwrap()
            .clone();
        a.mul(10.0)?.add(&b)
    });
    let tree = dict(vec![
        ("a", Value::List(vec![dict(vec![("b", leaf())])])),
        ("a/0/b", leaf()),
    ]);
    let lowered = f.lower(&tree)?;
    let names = lowered.program().input_names();
    assert_eq!(names, ["arg0/a/0/b", "arg0/a~10~1b"]);
    let exe = lowered.program().compile("cpu").eval()?;
    let (x, y) = (qb::array([2.0])?, qb::array([3.0])?);
    let out = exe.call([(names[0].as_str(), &x), (names[1].as_str(), &y)])?;
    assert_eq!(out[0].to_vec::<f64>()?, [23.0]);
    // Ordinary names are unchanged (transforms.md §15.2).
    let plain = qb::jit(|(p, _x): (Value, Tensor)| Ok(qb::tree::leaves(&p).len() as f64))
        .arg_names(&["params", "x"]);
    let lowered = plain.lower(&(dict(vec![("w", leaf()), ("b", leaf())]), qb::ones([1])?))?;
    assert_eq!(
        lowered.program().input_names(),
        ["params/b", "params/w", "x"]
    );
    // Argument names are escaped too, and may not repeat.
    let slash = qb::jit(|(a, b): (Tensor, Tensor)| a.add(&b)).arg_names(&["a/0", "a"]);
    let two = (qb::ones([1])?, qb::ones([1])?);
    assert_eq!(slash.lower(&two)?.program().input_names(), ["a~10", "a"]);
    let twice = qb::jit(|(a, b): (Tensor, Tensor)| a.add(&b)).arg_names(&["x", "x"]);
    let err = twice.call(&two).unwrap_err();
    assert!(
        err.to_string().starts_with("two inputs are both named x"),
        "{err}"
    );
    let default_clash = qb::jit(|(a, b): (Tensor, Tensor)| a.add(&b)).arg_names(&["arg1"]);
    assert!(default_clash.call(&two).is_err());
    Ok(())
}

/// A `Value::Dict` mixing string and integer keys is TY8 wherever a tree is walked: every
/// transform's arguments and results, the tree functions and `save` (it used to be accepted
/// by `jit`, with the integer keys sorted first).
#[test]
fn dict_keys_mixing_kinds_are_ty8_everywhere() -> qb::Result<()> {
    use qb::tree::{DictKey, Value};
    let x = || Value::Array(qb::ones([2]).unwrap());
    let mixed = || Value::Dict(vec![(DictKey::Int(1), x()), (DictKey::from("a"), x())]);
    let sum = |v: Value| -> qb::Result<Tensor> {
        let mut total = qb::zeros([])?;
        for l in qb::tree::leaves(&v) {
            total = total.add(l.as_tensor().unwrap().sum()?)?;
        }
        Ok(total)
    };
    let trees = [
        ("a dict", mixed()),
        ("inside a list", Value::List(vec![x(), mixed()])),
        (
            "inside a str-keyed dict",
            Value::Dict(vec![(DictKey::from("p"), mixed())]),
        ),
    ];
    for (where_, tree) in trees {
        let results: Vec<(&str, qb::Result<()>)> = vec![
            (
                "jit",
                qb::jit(|v: Value| Ok(v)).call(&tree).map(|_: Value| ()),
            ),
            ("grad", qb::grad(sum).call(&tree).map(|_: Value| ())),
            (
                "vmap",
                qb::vmap(|v: Value| Ok(v)).call(&tree).map(|_: Value| ()),
            ),
            ("jvp", qb::jvp(sum, &tree, &tree).map(|_| ())),
            ("vjp", qb::vjp(sum, &tree).map(|_| ())),
            ("tree::map", qb::tree::map(&tree, |t| t.sin()).map(|_| ())),
            ("unflatten", {
                let (leaves, def) = qb::tree::flatten(&tree);
                qb::tree::unflatten::<Value>(&def, leaves).map(|_| ())
            }),
            ("save", qb::save(&mut Vec::new(), &tree)),
            (
                "a jitted result",
                qb::jit(|v: Tensor| {
                    Ok(Value::Dict(vec![
                        (DictKey::Int(0), Value::Array(v.clone())),
                        (DictKey::from("a"), Value::Array(v)),
                    ]))
                })
                .call(&qb::ones([2])?)
                .map(|_: Value| ()),
            ),
        ];
        for (what, r) in results {
            match r {
                Err(Error::Type { message }) => assert_eq!(
                    message, "dict keys in a pytree must all be str or all be int",
                    "{what} of {where_}"
                ),
                other => panic!("{what} of {where_}: {other:?}"),
            }
        }
    }
    // Each kind alone is fine, integer keys in numeric order.
    let ints = Value::Dict(vec![(DictKey::Int(10), x()), (DictKey::Int(2), x())]);
    let back: Value = qb::jit(|v: Value| Ok(v)).call(&ints)?;
    let Value::Dict(entries) = back else { panic!() };
    assert_eq!(entries[0].0, DictKey::Int(2));
    Ok(())
}
