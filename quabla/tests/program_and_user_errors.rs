//! `Program` and `Executable` (inputs by name, on the linked CPU and through the CPU plugin),
//! the caller's own errors out of every transform, and `to_nested`.

use qb::prelude::*;
use qb::tree::Value;
use qb::{Error, Tensor};
use quabla as qb;
use std::collections::BTreeMap;

type Params = BTreeMap<String, Tensor>;

fn loss((p, x): (Params, Tensor)) -> qb::Result<Tensor> {
    x.matmul(&p["w"])?.add(&p["b"])?.tanh()?.sum()
}

fn params() -> Params {
    BTreeMap::from([
        ("b".to_string(), qb::array([0.1, -0.2]).unwrap()),
        (
            "w".to_string(),
            qb::array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.25]]).unwrap(),
        ),
    ])
}

#[test]
fn a_program_runs_by_name_and_matches_the_jitted_function() -> qb::Result<()> {
    let x = qb::linspace(-1.0, 1.0, 12)?.reshape([4, 3])?;
    let f = qb::jit(|(p, x): (Params, Tensor)| {
        let g: Params = qb::grad(|p: Params| loss((p, x.clone()))).call(&p)?;
        Ok((loss((p, x.clone()))?, g))
    });
    let args = (params(), x.clone());
    let lowered = f.lower(&args)?;
    let program = lowered.program();
    let names = program.input_names();
    assert_eq!(names, ["arg0/b", "arg0/w", "arg1"]);
    assert_eq!(program.output_shapes(), vec![vec![], vec![2], vec![3, 2]]);
    let (value, grads): (Tensor, Params) = f.call(&args)?;
    let p = params();
    // The names are the pytree paths of the arguments, in plan order.
    let by_name: Vec<(String, &Tensor)> = names
        .iter()
        .map(|n| {
            let t = if n.ends_with("/w") {
                &p["w"]
            } else if n.ends_with("/b") {
                &p["b"]
            } else {
                &x
            };
            (n.clone(), t)
        })
        .collect();
    let exe = program.compile("cpu").device_ordinal(0).eval()?;
    assert_eq!(exe.device(), "cpu:0");
    // Any order of the inputs.
    let outs = exe.call(by_name.iter().rev().map(|(n, t)| (n.as_str(), *t)))?;
    assert_eq!(outs.len(), 3);
    assert_eq!(outs[0].to_vec::<f64>()?, value.to_vec::<f64>()?);
    assert_eq!(outs[1].to_vec::<f64>()?, grads["b"].to_vec::<f64>()?);
    assert_eq!(outs[2].to_vec::<f64>()?, grads["w"].to_vec::<f64>()?);
    Ok(())
}

/// A program compiled by name for a loaded plugin's device: the example `toy` plugin (the CPU
/// plugin registers as `cpu`, where the linked CPU backend comes first).
#[test]
fn a_program_runs_through_a_loaded_plugin_by_its_name() -> qb::Result<()> {
    let path = quabla_conformance::plugins::build()
        .unwrap_or_else(|e| panic!("{e}"))
        .toy_plugin();
    assert_eq!(qb::load_plugin(&path)?.name, "toy");
    let f = qb::jit(|x: Tensor| x.sin().mul(&x));
    let x = qb::array([0.5, -1.0, 2.0])?;
    let lowered = f.lower(&x)?;
    let exe = lowered.program().compile("toy").eval()?;
    assert_eq!(exe.device(), "toy");
    let name = lowered.program().input_names()[0].clone();
    let on_toy = exe.call([(name.as_str(), &x)])?;
    assert_eq!(on_toy[0].to_vec::<f64>()?, f.call(&x)?.to_vec::<f64>()?);
    Ok(())
}

#[test]
fn executable_inputs_are_checked_by_name() -> qb::Result<()> {
    let f = qb::jit(|(a, b): (Tensor, Tensor)| a.mul(&b));
    let lowered = f.lower(&(qb::F32.ones([2])?, qb::F32.ones([2])?))?;
    let names = lowered.program().input_names();
    let exe = lowered.program().compile("cpu").eval()?;
    let (a, b) = (names[0].as_str(), names[1].as_str());
    let x = qb::array([1.1, 2.0])?;
    // Host data bound to a float32 input is rounded to float32.
    let out = exe.call([(a, &x), (b, &x)])?;
    let x32 = x.astype(qb::F32)?;
    assert_eq!(out[0].dtype(), qb::F32);
    assert_eq!(out[0].to_vec::<f32>()?, x32.mul(&x32)?.to_vec::<f32>()?);
    assert_ne!(out[0].to_vec::<f32>()?[0] as f64, 1.1 * 1.1);

    let missing = exe.call([(a, &x)]).unwrap_err();
    assert!(missing.to_string().contains("is missing"), "{missing}");
    assert!(missing.to_string().contains(b), "{missing}");
    let extra = exe.call([(a, &x), (b, &x), ("nope", &x)]).unwrap_err();
    assert!(
        extra.to_string().contains("no input named \"nope\""),
        "{extra}"
    );
    let twice = exe.call([(a, &x), (a, &x)]).unwrap_err();
    assert!(twice.to_string().contains("given twice"), "{twice}");
    let shape = exe.call([(a, &qb::ones([3])?), (b, &x)]).unwrap_err();
    assert!(matches!(shape, Error::Shape { .. }), "{shape:?}");
    assert!(shape.to_string().contains(a), "{shape}");
    let bools = qb::array([true, false])?;
    let kind = exe.call([(a, &x), (b, &bools)]).unwrap_err();
    assert!(matches!(kind, Error::Type { .. }), "{kind:?}");
    // Targets resolve as jit's devices do.
    assert!(matches!(
        lowered.program().compile("cuda").eval(),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        lowered.program().compile("cpu").device_ordinal(4).eval(),
        Err(Error::InvalidArgument { .. })
    ));
    Ok(())
}

#[derive(Debug)]
struct BadData(&'static str);

impl std::fmt::Display for BadData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad data: {}", self.0)
    }
}

impl std::error::Error for BadData {}

fn checked(x: Tensor) -> qb::Result<Tensor> {
    if x.shape() != [3] {
        let e: Box<dyn std::error::Error + Send + Sync> = Box::new(BadData("need 3 values"));
        return Err(e.into());
    }
    x.powi(2).sum()
}

#[test]
fn the_callers_errors_leave_every_transform_unchanged() -> qb::Result<()> {
    let x = qb::ones([2])?;
    let results: Vec<(&str, qb::Result<()>)> = vec![
        ("eager", checked(x.clone()).map(|_| ())),
        ("jit", qb::jit(checked).call(&x).map(|_| ())),
        ("grad", qb::grad(checked).call(&x).map(|_: Tensor| ())),
        (
            "value_and_grad",
            qb::value_and_grad(checked)
                .call(&x)
                .map(|_: (Tensor, Tensor)| ()),
        ),
        ("jvp", qb::jvp(checked, &x, &x).map(|_| ())),
        ("vjp", qb::vjp(checked, &x).map(|_| ())),
        (
            "jacobian",
            qb::jacobian(checked).call(&x).map(|_: Tensor| ()),
        ),
        ("hessian", qb::hessian(checked).call(&x).map(|_: Tensor| ())),
        (
            "vmap",
            qb::vmap(|r: Tensor| checked(qb::concat(&[r.clone(), r], 0)?))
                .call(&qb::ones([4, 1])?)
                .map(|_: Tensor| ()),
        ),
    ];
    for (name, r) in results {
        match r {
            Err(Error::User { message, source }) => {
                assert_eq!(message, "bad data: need 3 values", "{name}");
                let source = source.expect("the original error is kept");
                assert!(source.downcast_ref::<BadData>().is_some(), "{name}");
            }
            other => panic!("{name}: expected the user's error, got {other:?}"),
        }
    }
    let plain = qb::jit(|x: Tensor| -> qb::Result<Tensor> {
        Err(Error::user(format!("rank {}", x.ndim())))
    })
    .call(&x)
    .unwrap_err();
    assert_eq!(plain.to_string(), "rank 1");
    let copy = plain.clone();
    assert_eq!(copy.to_string(), plain.to_string());
    Ok(())
}

#[test]
fn to_nested_keeps_the_rank() -> qb::Result<()> {
    let floats = |v: &Value| -> Vec<f64> {
        match v {
            Value::List(items) => items
                .iter()
                .map(|i| match i {
                    Value::Float(x) => *x,
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("{other:?}"),
        }
    };
    let m = qb::arange(6.0)?.reshape([2, 3])?;
    match m.to_nested()? {
        Value::List(rows) => {
            assert_eq!(rows.len(), 2);
            assert_eq!(floats(&rows[0]), [0.0, 1.0, 2.0]);
            assert_eq!(floats(&rows[1]), [3.0, 4.0, 5.0]);
        }
        other => panic!("{other:?}"),
    }
    let t = qb::arange(8.0)?.reshape([2, 2, 2])?.to_nested()?;
    let Value::List(outer) = &t else { panic!() };
    let Value::List(inner) = &outer[1] else {
        panic!()
    };
    assert_eq!(floats(&inner[1]), [6.0, 7.0]);
    assert!(matches!(qb::array(2.5)?.to_nested()?, Value::Float(x) if x == 2.5));
    assert!(matches!(
        qb::array([true, false])?.to_nested()?,
        Value::List(ref b) if matches!(b.as_slice(), [Value::Bool(true), Value::Bool(false)])
    ));
    let f32v = qb::F32.array([0.1])?.to_nested()?;
    assert_eq!(floats(&f32v), [0.1f32 as f64]);
    let err = qb::jit(|x: Tensor| {
        x.to_nested()?;
        Ok(x)
    })
    .call(&m)
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("to_nested() needs a concrete value"),
        "{err}"
    );
    Ok(())
}
