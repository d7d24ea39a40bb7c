//! The misuse table: calls a careless or hostile user makes, each with the outcome the spec
//! promises — a typed error whose message names what happened (and usually the fix), or the
//! IEEE value numerics.md gives. Every case runs in this process under `catch_unwind`, so a
//! panic fails the table and an abort would kill it: both are impossible by construction.
//!
//! A case is `kind, fragment, expression`: the expression evaluates to a `qb::Result<_>`; the
//! kind is the `qb::Error` variant expected (or `Ok`, with a fragment of the value's `Debug`
//! text), the fragment a piece of the message that must appear.

use qb::prelude::*;
use qb::random;
use qb::tree::{DictKey, Value};
use qb::{s, Error, Tensor};
use quabla as qb;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A rank-2 test tensor `[[1, 2, 3], [4, 5, 6]]`.
fn m23() -> Tensor {
    qb::array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).unwrap()
}

fn v3() -> Tensor {
    qb::array([1.0, 2.0, 3.0]).unwrap()
}

fn b2() -> Tensor {
    qb::array([true, false]).unwrap()
}

/// The variant name of an error, for the table's `kind` column.
fn kind(e: &Error) -> &'static str {
    match e {
        Error::Tracer { .. } => "Tracer",
        Error::DtypeMismatch { .. } => "DtypeMismatch",
        Error::BoolOperand { .. } => "BoolOperand",
        Error::RequiresBool { .. } => "RequiresBool",
        Error::Shape { .. } => "Shape",
        Error::Index { .. } => "Index",
        Error::InvalidArgument { .. } => "InvalidArgument",
        Error::Type { .. } => "Type",
        Error::NonScalarOutput { .. } => "NonScalarOutput",
        Error::Structure { .. } => "Structure",
        Error::Unsupported { .. } => "Unsupported",
        Error::Singular { .. } => "Singular",
        Error::OdeMaxSteps { .. } => "OdeMaxSteps",
        Error::Format { .. } => "Format",
        Error::Io { .. } => "Io",
        Error::OutOfMemory { .. } => "OutOfMemory",
        Error::Cancelled => "Cancelled",
        Error::Device { .. } => "Device",
        Error::Warning(_) => "Warning",
        Error::Internal { .. } => "Internal",
        _ => "Other",
    }
}

struct Case {
    name: &'static str,
    kind: &'static str,
    fragment: &'static str,
    run: Box<dyn Fn() -> Result<String, Error>>,
}

macro_rules! cases {
    ($($kind:ident $fragment:literal => $body:expr;)*) => {
        vec![$(Case {
            name: stringify!($body),
            kind: stringify!($kind),
            fragment: $fragment,
            run: Box::new(|| {
                #[allow(clippy::redundant_closure_call)]
                let value = (|| $body)()?;
                Ok(format!("{value:?}"))
            }),
        }),*]
    };
}

/// 2^40 elements: 8 TiB of float64, more than any machine this runs on has.
const HUGE: usize = 1 << 40;

fn table() -> Vec<Case> {
    cases! {
        // Sizes: overflowing counts are shape errors, counts the machine cannot hold are
        // OutOfMemory, never an abort.
        OutOfMemory "cannot allocate" => qb::zeros([HUGE]);
        OutOfMemory "cannot allocate" => qb::ones([HUGE]);
        OutOfMemory "cannot allocate" => qb::full([HUGE], 1.0);
        OutOfMemory "cannot allocate" => qb::F32.zeros([HUGE]);
        OutOfMemory "cannot allocate" => qb::eye(1 << 22);
        OutOfMemory "cannot allocate" => qb::linspace(0.0, 1.0, HUGE);
        OutOfMemory "cannot allocate" => qb::arange(1e15);
        OutOfMemory "cannot allocate" => qb::ones([1]).broadcast_to([HUGE]);
        OutOfMemory "cannot allocate" => qb::ones([2]).tile([HUGE]);
        OutOfMemory "cannot allocate" => qb::ones([2]).repeat(HUGE, 0);
        OutOfMemory "cannot allocate" => qb::pad(v3(), (HUGE, 1)).eval();
        Shape "more than this machine can address" => qb::ones([usize::MAX]);
        Shape "more than this machine can address" => qb::zeros([1 << 32, 1 << 32]);
        Shape "more than this machine can address" => qb::eye(1 << 32);
        Shape "more than this machine can address" => qb::eye_rect(usize::MAX, 2);
        Shape "more than this machine can address" => qb::ones([2]).broadcast_to([1 << 32, 1 << 32]);
        Shape "than this machine can address" => qb::ones([2]).tile([usize::MAX]);
        Shape "more than this machine can address" => qb::pad(v3(), (usize::MAX, 1)).eval();
        Shape "would have 1e300 elements" => qb::arange(1e300);
        OutOfMemory "source positions of a pad" => qb::pad(v3(), (HUGE, 1)).mode(qb::PadMode::Edge).eval();
        OutOfMemory "source positions of a pad" => qb::pad(v3(), (1, HUGE)).mode(qb::PadMode::Wrap).eval();
        Shape "more than this machine can address" => qb::pad(v3(), (usize::MAX, 1)).mode(qb::PadMode::Symmetric).eval();
        InvalidArgument "must be smaller than the extent" => qb::pad(v3(), (3, 0)).mode(qb::PadMode::Reflect).eval();
        Shape "" => Tensor::from_vec([1 << 32, 1 << 32], vec![1.0f64]);
        Shape "zero extent" => qb::zeros([2, 0]);
        Shape "zero extent" => qb::ones([0]);
        Shape "empty slices are not supported" => qb::arange(0.0);
        Shape "empty slices are not supported" => qb::linspace(0.0, 1.0, 0);
        Shape "cannot build a tensor of shape" => Tensor::from_vec([2, 2], vec![1.0f64; 3]);
        InvalidArgument "finite" => qb::arange_from(0.0, f64::INFINITY, 1.0);
        InvalidArgument "step" => qb::arange_from(0.0, 1.0, 0.0);
        // Dtypes (DT1..DT3).
        DtypeMismatch "float32 and float64 never mix implicitly" => qb::F32.ones([2]).add(qb::ones([2]));
        DtypeMismatch "mismatched dtypes" => qb::F32.ones([2, 2]).matmul(qb::ones([2, 2]));
        BoolOperand "not defined for bool tensors" => b2().add(b2());
        BoolOperand "not defined for bool tensors" => b2().mul(b2());
        BoolOperand "not defined for bool tensors" => b2().sin();
        BoolOperand "not defined for bool tensors" => b2().exp();
        RequiresBool "requires bool operands" => qb::logical_and(v3(), v3());
        RequiresBool "requires bool operands" => qb::logical_not(v3());
        // Shapes and axes (SH1..SH13).
        Shape "axis 2 is out of range for a tensor of rank 2" => m23().sum_axes(2);
        Shape "axis -3 is out of range" => m23().sum_axes(-3);
        Shape "out of range" => m23().mean_axes([5]);
        Shape "repeated axis" => m23().sum_axes([0, 0]);
        Shape "repeated axis" => m23().permute([0, 0]);
        Shape "cannot squeeze axis" => m23().squeeze_axes([0]);
        Shape "could not be broadcast" => m23().add(qb::ones([2]));
        Shape "could not be broadcast" => m23().mul(qb::ones([4, 3]));
        Shape "could not be broadcast" => qb::ones([3]).broadcast_to([2]);
        Shape "cannot reshape" => m23().reshape([4]);
        Shape "cannot reshape" => m23().reshape([-1, -1]);
        Shape "inner dimensions differ" => m23().matmul(m23());
        Shape "shapes differ" => qb::concat(&[m23(), qb::ones([2, 2]).unwrap()], 0);
        Shape "shapes differ" => qb::stack(&[v3(), qb::ones([2]).unwrap()], 0);
        Shape "" => v3().split(2, 0);
        Shape "square" => qb::linalg::cholesky(m23());
        Shape "square" => qb::linalg::solve(m23(), v3());
        Shape "" => qb::linalg::solve(qb::eye(3).unwrap(), qb::ones([2]).unwrap());
        Shape "out of range" => m23().softmax(3);
        Shape "out of range" => m23().flip(2);
        Shape "out of range" => m23().roll(1, 4);
        Shape "out of range" => m23().swapaxes(0, 3);
        Shape "out of range" => m23().expand_dims([4]);
        Shape "" => qb::trace(v3()).eval();
        Shape "" => qb::einsum("ij,jk->ik", &[m23(), m23()]);
        // Indexing (IX1..IX3, AR18).
        Index "index 3 is out of range for axis 0 with extent 3" => v3().index(s![3]);
        Index "out of range" => v3().index(s![-4]);
        Index "out of range" => v3().index(s![usize::MAX]);
        Index "too many indices" => v3().index(s![0, 0]);
        Index "out of range" => v3().gather([5], 0);
        Index "out of range" => v3().gather([-9], 0);
        InvalidArgument "step must not be zero" => v3().index(s![0..2; 0]);
        Shape "empty slices are not supported" => v3().index(s![2..std::hint::black_box(1usize)]);
        // Arguments.
        Shape "more than this machine can address" => qb::diag(v3()).k(isize::MAX).eval();
        Shape "more than this machine can address" => qb::diag(v3()).k(isize::MIN).eval();
        InvalidArgument "requires lo or hi" => qb::clip(v3()).eval();
        InvalidArgument "mode must be" => "bogus".parse::<qb::PadMode>().map(|_| ());
        Shape "indexing must be" => "zz".parse::<qb::Indexing>().map(|_| ());
        InvalidArgument "ambiguous" => qb::array([true, true]).and_then(|b| b.item_bool());
        InvalidArgument "exactly one element" => v3().item();
        Unsupported "supports only matrix products" => qb::einsum("ii->i", &[qb::eye(2).unwrap()]);
        // Linear algebra.
        Singular "matrix is singular" => qb::linalg::solve(qb::zeros([2, 2]).unwrap(), qb::ones([2]).unwrap());
        Ok "nan" => qb::linalg::cholesky(qb::array([[1.0, 2.0], [2.0, 1.0]]).unwrap());
        // Transforms (TF1, AR20, AR22, TY4, AR1..AR3).
        NonScalarOutput "grad requires a scalar output" => qb::grad(|x: Tensor| x.sin()).call(&v3()).map(|g: Tensor| g);
        NonScalarOutput "value_and_grad requires a scalar output" => qb::value_and_grad(|x: Tensor| x.sin()).call(&v3()).map(|(v, _): (Tensor, Tensor)| v);
        InvalidArgument "requires a floating output, got bool" => qb::grad(|x: Tensor| x.sum()?.greater(0.0)).call(&v3()).map(|g: Tensor| g);
        InvalidArgument "" => qb::grad(|x: Tensor| x.sum()).argnum(3).call(&v3()).map(|g: Tensor| g);
        InvalidArgument "" => qb::grad(|(x, _y): (Tensor, Tensor)| x.sum()).argnums(&[0, 0]).call(&(v3(), v3())).map(|g: Tensor| g);
        InvalidArgument "max_traces must be at least 1" => qb::jit(|x: Tensor| Ok(x)).max_traces(0).call(&v3());
        InvalidArgument "precision must be None, \"float32\" or \"float64\"" => qb::jit(|x: Tensor| Ok(x)).precision(Some("float16")).call(&v3());
        InvalidArgument "invalid device \"gpu\"" => qb::jit(|x: Tensor| Ok(x)).device("gpu").call(&v3());
        InvalidArgument "invalid device" => qb::jit(|x: Tensor| Ok(x)).device("cuda:x").call(&v3());
        InvalidArgument "invalid device" => qb::jit(|x: Tensor| Ok(x)).device("").call(&v3());
        InvalidArgument "invalid device" => qb::jit(|x: Tensor| Ok(x)).device("CPU").call(&v3());
        Unsupported "cuda target is unavailable in this build" => qb::jit(|x: Tensor| Ok(x)).device("cuda").call(&v3());
        Unsupported "mlx target is unavailable in this build" => qb::jit(|x: Tensor| Ok(x)).device("mlx").call(&v3());
        InvalidArgument "does not exist" => qb::jit(|x: Tensor| Ok(x)).device("cpu:3").call(&v3());
        InvalidArgument "static_argnums names argument 5" => qb::jit(|(x, _y): (Tensor, Tensor)| Ok(x)).static_argnums(&[5]).call(&(v3(), v3()));
        Type "is not hashable" => qb::jit(|(x, _y): (Tensor, Tensor)| Ok(x)).static_argnums(&[1]).call(&(v3(), v3()));
        Shape "zero extent" => qb::jit(|x: Tensor| Ok(x)).lower(&qb::ShapeDtype::new([0, 3], qb::F64)).map(|_| ());
        InvalidArgument "must have in_axes None" => qb::vmap(|(x, a): (Tensor, f64)| x.mul(a)).call(&(v3(), 2.0));
        InvalidArgument "at least one mapped argument" => qb::vmap(|x: Tensor| x.sin()).in_axes(&[None]).call(&v3());
        Structure "inconsistent sizes for mapped axes" => qb::vmap(|(a, b): (Tensor, Tensor)| a.add(b)).call(&(v3(), qb::ones([2]).unwrap()));
        Shape "out of range" => qb::vmap(|x: Tensor| x.sin()).in_axes(&[Some(3)]).call(&v3());
        InvalidArgument "jacobian requires a floating output, got bool" => qb::jacobian(|x: Tensor| x.greater(0.0)).call(&v3()).map(|g: Tensor| g);
        // Trees (TF8, TF9, TY8).
        Structure "unflatten expected 2 leaves, got 1" => qb::tree::structure(&(v3(), v3())).unflatten::<(Tensor, Tensor)>(vec![qb::tree::Leaf::Tensor(v3())]);
        Structure "pytree structures differ" => qb::tree::map_n::<Vec<Tensor>>(&[&vec![v3()], &vec![v3(), v3()]], |l| Ok(l[0].clone()));
        Structure "pytree structures differ" => Value::List(vec![Value::None]).into_typed::<Vec<Tensor>>();
        Type "must all be str or all be int" => qb::save(&mut Vec::new(), &Value::Dict(vec![(DictKey::Int(1), Value::None), (DictKey::Str("a".into()), Value::None)]));
        // Control flow (SH13, TR1..TR3).
        Shape "body changed the carry" => qb::fori_loop(0, 3, |_i, c: Tensor, _: &[Tensor]| c.reshape([1, 3]), &v3()).eval();
        Shape "body changed the carry" => qb::fori_loop(0, 3, |_i, c: Tensor, _: &[Tensor]| c.astype(qb::F32), &v3()).eval();
        Shape "body changed the carry" => qb::while_loop(|c: &Tensor, _: &[Tensor]| c.sum()?.less(10.0), |c: Tensor, _: &[Tensor]| qb::concat(&[c.clone(), c], 0), &v3()).eval();
        Shape "cond branches return different shapes" => qb::cond(&qb::array(true).unwrap(), |_: &[Tensor]| qb::ones([2]), |_: &[Tensor]| qb::ones([3]), &[] as &[Tensor]);
        DtypeMismatch "mismatched dtypes" => qb::cond(&qb::array(false).unwrap(), |_: &[Tensor]| qb::ones([2]), |_: &[Tensor]| qb::F32.ones([2]), &[] as &[Tensor]);
        Shape "" => qb::cond(&v3(), |_: &[Tensor]| qb::ones([2]), |_: &[Tensor]| qb::ones([2]), &[] as &[Tensor]);
        Shape "per-step outputs" => qb::scan(|c: Tensor, i: qb::LoopIndex, _: &[Tensor]| { let n = i.static_value().unwrap_or(0) + 1; Ok((c, qb::ones([n])?)) }, &v3(), 3).eval().map(|(c, _)| c);
        OutOfMemory "scan" => qb::scan(|c: Tensor, _i: qb::LoopIndex, _: &[Tensor]| Ok((c.clone(), c)), &v3(), usize::MAX).eval().map(|(c, _)| c);
        Tracer "cannot drive" => qb::jit(|x: Tensor| { if x.sum()?.item_bool()? { Ok(x) } else { x.neg() } }).call(&v3());
        Tracer "needs a concrete value" => qb::jit(|x: Tensor| { let v = x.sum()?.item()?; x.mul(v) }).call(&v3());
        Tracer "needs a concrete value" => qb::jit(|x: Tensor| { let v = x.to_vec::<f64>()?; x.mul(v[0]) }).call(&v3());
        Tracer "cannot close over an outer tracer" => qb::jit(|x: Tensor| { let y = x.clone(); qb::fori_loop(0, 2, move |_i, c: Tensor, _: &[Tensor]| c.add(&y), &x).eval() }).call(&v3());
        // Random numbers (AR10..AR12, TY11, TR6).
        InvalidArgument "num must be >= 1" => random::split(&random::key(0), 0);
        InvalidArgument "p must be in [0, 1]" => random::bernoulli(&random::key(0)).p(-0.1).eval();
        InvalidArgument "p must be in [0, 1]" => random::bernoulli(&random::key(0)).p(f64::NAN).eval();
        InvalidArgument "finite minval < maxval" => random::uniform(&random::key(0), [2]).minval(2.0).maxval(1.0).eval();
        InvalidArgument "finite minval < maxval" => random::uniform(&random::key(0), [2]).minval(f64::NAN).eval();
        InvalidArgument "requires a shape of rank >= 2" => random::glorot_normal(&random::key(0), [3]).eval();
        InvalidArgument "requires a shape of rank >= 2" => random::he_normal(&random::key(0), []).eval();
        Type "dtype must be float32 or float64" => random::uniform(&random::key(0), [2]).dtype(qb::BOOL).eval();
        Tracer "a Key is a host value; pass its key tensor random.key_data(key)" => qb::jit(|k: random::Key| random::normal(&k, [2]).eval()).call(&random::key(0));
        Tracer "a Key is a host value; pass its key tensor random.key_data(key)" => qb::grad(|(x, _k): (Tensor, random::Key)| x.sum()).call(&(v3(), random::key(0))).map(|g: Tensor| g);
        Shape "does not broadcast to the sample shape" => qb::jit(|x: Tensor| random::uniform(&random::key(0), [2]).minval(&x).maxval(1e9).eval()).call(&v3());
        OutOfMemory "cannot allocate" => random::normal(&random::key(0), [1 << 20, 1 << 20]).eval();
        // Saving and loading (IO1..IO4, TY9, TR2).
        Format "not a quabla file" => qb::load(&mut &b"not a file at all"[..]);
        Format "truncated quabla file" => qb::load(&mut &b"\x93QUABLA\n\x10\x00"[..]);
        Format "truncated quabla file" => qb::load(&mut &b"\x93QUABLA\n\xff\xff\xff\xff\xff\xff\xff\xff"[..]);
        Format "malformed quabla header" => qb::load(&mut &b"\x93QUABLA\n\x08\x00\x00\x00\x00\x00\x00\x00{{{{{{{{"[..]);
        Type "cannot save" => qb::save(&mut Vec::new(), &random::key(0));
        Type "cannot save" => qb::save(&mut Vec::new(), &qb::ShapeDtype::new([2], qb::F64));
        Tracer "save() needs a concrete value" => qb::jit(|x: Tensor| { qb::save(&mut Vec::new(), &x)?; Ok(x) }).call(&v3());
        Io "" => qb::load("/nonexistent/quabla/ckpt.qb");
        Io "" => qb::save("/nonexistent/quabla/ckpt.qb", &v3());
        Io "" => qb::save("", &v3());
        Structure "pytree structures differ" => { let mut b = Vec::new(); qb::save(&mut b, &(1.0, 2.0))?; qb::load_as::<Vec<f64>>(&mut b.as_slice()) };
        // Plugins.
        Device "" => qb::load_plugin("");
        Device "" => qb::load_plugin("/nonexistent/libquabla_x_plugin.so");
        Device "" => qb::load_plugin(std::env::temp_dir());
        // ODE arguments.
        InvalidArgument "requires steps" => qb::ode::odeint(|y: &Tensor, _t: &Tensor, _: &[Tensor]| y.neg(), &v3(), (0.0, 1.0)).method(qb::ode::Method::Rk4).eval();
        InvalidArgument "must be a finite positive number" => qb::ode::odeint(|y: &Tensor, _t: &Tensor, _: &[Tensor]| y.neg(), &v3(), (0.0, 1.0)).method(qb::ode::Method::Dopri5).rtol(-1.0).eval();
        InvalidArgument "" => qb::ode::odeint(|y: &Tensor, _t: &Tensor, _: &[Tensor]| y.neg(), &v3(), (0.0, 1.0)).method(qb::ode::Method::Rk4).steps(0).eval();
        InvalidArgument "" => qb::ode::odeint(|y: &Tensor, _t: &Tensor, _: &[Tensor]| y.neg(), &v3(), (0.0, f64::NAN)).eval();
        Shape "" => qb::ode::odeint(|_y: &Tensor, _t: &Tensor, _: &[Tensor]| qb::ones([2]), &v3(), (0.0, 1.0)).method(qb::ode::Method::Dopri5).eval();
        // Messages in the user's terms.
        Tracer "was used after its trace ended" => { let leaked = std::sync::Mutex::new(None); let _ = qb::jit(|x: Tensor| { *leaked.lock().unwrap() = Some(x.clone()); Ok(x) }).call(&v3()); let t = leaked.lock().unwrap().clone().unwrap(); qb::jit(|x: Tensor| x.sin()).call(&t) };
        Tracer "was used after its trace ended" => { let leaked = std::sync::Mutex::new(None); let _ = qb::jit(|x: Tensor| { *leaked.lock().unwrap() = Some(x.clone()); Ok(x) }).call(&v3()); let t = leaked.lock().unwrap().clone().unwrap(); t.add(1.0) };
        BoolOperand "bool" => qb::linalg::solve(qb::array([[true, false], [false, true]]).unwrap(), qb::ones([2]).unwrap());
        Shape "logsumexp" => m23().logsumexp_axes([1, 1]);
        Type "cannot differentiate with respect to the integer 3" => qb::grad(|x: Tensor| x.sum()).call(&3i64).map(|g: Tensor| g);
        InvalidArgument "cannot differentiate with respect to a bool input" => qb::grad(|(x, _b): (Tensor, bool)| x.sum()).argnums(&[0, 1]).call(&(v3(), true)).map(|g: (Tensor, Tensor)| g.0);
        InvalidArgument "out of range for usize" => Value::Int(-1).into_typed::<usize>();
        InvalidArgument "lower" => qb::jit(|v: Value| Ok(v)).call(&Value::Abstract(qb::ShapeDtype::new([2], qb::F64)));
        // IEEE results, not errors (numerics.md).
        Ok "inf" => qb::ones([2]).div(0.0);
        Ok "nan" => qb::zeros([2]).div(0.0);
        Ok "nan" => qb::array([-1.0]).and_then(|x| x.sqrt());
        Ok "-inf" => qb::array([0.0]).and_then(|x| x.log());
        Ok "nan" => qb::array([f64::NAN]).and_then(|x| x.max());
        Ok "inf" => qb::array([1e308]).and_then(|x| x.mul(10.0));
        Ok "0." => qb::array([1e-320]).and_then(|x| x.mul(1e-10));
    }
}

#[test]
fn every_misuse_gets_the_promised_outcome() {
    let table = table();
    let mut failures = Vec::new();
    for case in &table {
        let outcome = catch_unwind(AssertUnwindSafe(|| (case.run)()));
        let problem = match outcome {
            Err(_) => Some("panicked".to_string()),
            Ok(Ok(value)) if case.kind == "Ok" => (!value.contains(case.fragment))
                .then(|| format!("value {value} lacks {:?}", case.fragment)),
            Ok(Ok(value)) => Some(format!("silently succeeded with {value}")),
            Ok(Err(e)) if case.kind == "Ok" => Some(format!("expected a value, got {e:?}")),
            Ok(Err(e)) => {
                let message = e.to_string();
                if kind(&e) != case.kind {
                    Some(format!(
                        "expected {}, got {} ({message})",
                        case.kind,
                        kind(&e)
                    ))
                } else if !message.contains(case.fragment) {
                    Some(format!("message {message:?} lacks {:?}", case.fragment))
                } else if message.contains("does not fit usize")
                    || message.contains("extent 18446744073709551615")
                {
                    Some(format!("message leaks an integer overflow: {message}"))
                } else {
                    None
                }
            }
        };
        if let Some(p) = problem {
            failures.push(format!("{}\n    {p}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        table.len(),
        failures.join("\n")
    );
}
