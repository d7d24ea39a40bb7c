"""Every error of errors.md §2 reachable from Python on the CPU, by code: the Python class (and
its builtin bases), the key phrase of the message, and Python spelling throughout (no Rust
paths or builder calls). Optimizer errors are tested with the optimizers; device-only codes
(UN3–UN5) need their hardware; TF12's uneven shards need several processes
(test_distributed.py runs them under mpirun); TF3 is unreachable (every loop derivative order
is supported, tests/control_flow.rs)."""

import collections
import dataclasses
import io
import re
import warnings

import numpy as np
import pytest

import quabla as qb

X = qb.array([1.0, 2.0])
M = qb.ones((2, 2))
LEAKED = []


def leak(v):
    LEAKED.append(v)
    return v


def use_leaked():
    qb.jit(leak)(X)
    return LEAKED[-1] + 1.0


@qb.custom_vjp
def cv(v):
    return qb.sin(v)


cv.defvjp(lambda v: (qb.sin(v), v), lambda v, g: (qb.cos(v) * g,))


def custom_rule_capture(outer):
    f = qb.custom_jvp(lambda v: v * outer)
    f.defjvp(lambda p, t: (p[0] * outer, t[0] * outer))
    return qb.sum(f(X))


@dataclasses.dataclass
class Unregistered:
    w: object


class Sub(dict):
    pass


CASES = [
    # (code, callable, class, key phrase)
    ("TR1", lambda: qb.jit(lambda v: v if v[0] > 0 else -v)(X), qb.TracerError,
     "^TraceTensor cannot drive Python control flow: its value is unknown while tracing"),
    ("TR2 float", lambda: qb.jit(lambda v: float(v[0]) * v)(X), qb.TracerError, "float\\(\\) needs a concrete value.*its value is not known while tracing"),
    ("TR2 index", lambda: qb.jit(lambda i: [0.0, 1.0][i])(qb.array(1.0)), qb.TracerError, "__index__\\(\\) needs a concrete value"),
    ("TR2 numpy left", lambda: qb.jit(lambda v: np.ones(2) * v)(X), qb.TracerError, "needs a concrete value"),
    ("TR2 save", lambda: qb.jit(lambda v: qb.save(io.BytesIO(), v) or v)(X), qb.TracerError,
     "save\\(\\) needs a concrete value.*use qb.where or qb.cond"),
    ("TR3", lambda: qb.jit(lambda v: qb.fori_loop(0, 2, lambda i, c: c * v, X))(X), qb.TracerError,
     "^control-flow regions cannot close over an outer tracer; pass it explicitly using operands="),
    ("TR4", lambda: qb.grad(custom_rule_capture)(qb.array(2.0)), qb.TracerError, "cannot close over tracers of an enclosing transform"),
    ("TR5", use_leaked, qb.TracerError, "was used after its trace ended"),
    ("TR6 seed", lambda: qb.jit(lambda s: qb.random.key(s))(qb.array(1.0)), qb.TracerError,
     "a Key is a host value; use key tensors"),
    ("TY1", lambda: qb.array("abc"), TypeError, "^cannot convert str to a quabla Tensor; accepted inputs are"),
    ("TY2", lambda: qb.asarray(np.ones(2, dtype=np.float16)), TypeError, "float16 is not supported"),
    ("TY3", lambda: qb.jit(lambda v: v + np.ones(2))(X), TypeError, "NumPy arrays are not captured automatically"),
    ("TY4", lambda: qb.jit(lambda v, s: v, static_argnums=1)(X, [1]), TypeError, "^static argument 1 is not hashable \\(list\\); static values must support hash\\(\\)$"),
    ("TY5", lambda: qb.jit(lambda v, w: v)(X, w=X), TypeError, "keyword argument w must be static"),
    ("TY6", lambda: qb.grad(lambda v: qb.sum(v))(v=X), TypeError, "grad\\(\\) takes positional arguments only"),
    ("TY7 OrderedDict", lambda: qb.jit(lambda d: d)(collections.OrderedDict(a=X)), TypeError, "OrderedDict is not a supported pytree container"),
    ("TY7 dict subclass", lambda: qb.jit(lambda d: d)(Sub(a=X)), TypeError, "Sub is not a supported pytree container"),
    ("TY7 dataclass", lambda: qb.jit(lambda d: d.w)(Unregistered(X)), TypeError, "Unregistered is not a supported pytree container"),
    ("TY8", lambda: qb.jit(lambda d: d)({"a": X, 1: X}), TypeError, "must all be str or all be int"),
    ("TY9", lambda: qb.save(io.BytesIO(), {"a": np.ones(2)}), TypeError, "cannot save"),
    ("TY10", lambda: qb.random.normal(0, (2,)), TypeError, "^key must be a quabla.random.Key or an int64 key tensor, got int"),
    ("TY11", lambda: qb.random.normal(qb.random.key(0), (2,), dtype=qb.bool_), TypeError, "dtype must be float32 or float64"),
    ("TY13", lambda: qb.linalg.cg(3, X), TypeError, "cg: matvec must be callable"),
    ("TY14", lambda: qb.linalg.cg(lambda v: (v > 0.0), X), TypeError, "cg: matvec returned bool"),
    ("TY15 str", lambda: X["a"], TypeError, "only integers, slices, None and Ellipsis are valid indices; got str"),
    ("TY15 array", lambda: X[qb.array([0.0])], TypeError, "only integers, slices, None and Ellipsis are valid indices"),
    ("TY float()", lambda: float(X), TypeError, "only single-element tensors can be converted"),
    ("TY int()", lambda: int(X), TypeError, "only single-element tensors can be converted"),
    ("TY hash", lambda: hash(X), TypeError, "^unhashable type: 'Tensor'$"),
    ("TY carry", lambda: qb.fori_loop(0, 1, lambda i, c: c, (X, X > 0.0)), TypeError, "carry arrays must be floating or integer, got bool"),
    ("TY args", lambda: qb.linalg.cg(lambda v, a: a @ v, X, args=M), TypeError, "args must be a tuple"),
    ("DT1", lambda: X + X.astype(qb.float32), ValueError, "^tensor add operands have mismatched dtypes|^tensor \\+ operands"),
    ("DT2", lambda: qb.sin(qb.array([True])), ValueError, "is not defined for bool tensors"),
    ("DT3", lambda: X & X, ValueError, "requires bool operands"),
    ("SH1", lambda: qb.sum(X, axis=3), ValueError, "^axis 3 is out of range for a tensor of rank 1$"),
    ("SH2", lambda: qb.sum(M, axis=(0, 0)), ValueError, "repeated axis"),
    ("SH3", lambda: qb.squeeze(M, 0), ValueError, "cannot squeeze axis"),
    ("SH4", lambda: X + qb.ones((3,)), ValueError, "could not be broadcast"),
    ("SH5", lambda: X.reshape(3), ValueError, "cannot reshape"),
    ("SH6", lambda: X[1:1], ValueError, "empty slices are not supported"),
    ("SH7", lambda: qb.linalg.inv(qb.ones((2, 3))), ValueError, "^inv expects square matrices of shape \\[..., n, n\\], got"),
    ("SH8", lambda: qb.linalg.solve(M, qb.ones((3,))), ValueError, "matrix has 2 rows but the right-hand side has 3"),
    ("SH9", lambda: qb.matmul(M, qb.ones((3, 2))), ValueError, "inner dimensions differ"),
    ("SH11", lambda: qb.concat([M, qb.ones((2, 3))], 0), ValueError, "shapes differ"),
    ("SH12", lambda: qb.meshgrid(X, X, indexing="zz"), ValueError, "indexing must be \"xy\" or \"ij\""),
    ("SH13 carry", lambda: qb.fori_loop(0, 1, lambda i, c: qb.ones((3,)), X), ValueError, "body changed the carry"),
    ("SH13 cond", lambda: qb.cond(True, lambda v: v, lambda v: qb.ones((3,)), X), ValueError, "cond branches return different shapes"),
    ("IX1", lambda: X[5], IndexError, "index 5 is out of range"),
    ("IX2", lambda: X[0, 0], IndexError, "too many indices"),
    ("IX3", lambda: M[..., ...], IndexError, "at most one Ellipsis"),
    ("AR1", lambda: qb.jit(lambda v: v, device="gpu")(X), ValueError, "invalid device 'gpu'|invalid device \"gpu\""),
    ("AR2", lambda: qb.jit(lambda v: v, precision=64)(X), ValueError, "precision must be None"),
    ("AR3", lambda: qb.jit(lambda v: v, max_traces=0)(X), ValueError, "^max_traces must be at least 1"),
    ("AR4 rtol", lambda: qb.ode.odeint(lambda y, t: -y, X, (0.0, 1.0), method="dopri5", rtol=0.0), ValueError, "^rtol must be a finite positive number$"),
    ("AR4 atol", lambda: qb.ode.odeint(lambda y, t: -y, X, (0.0, 1.0), method="dopri5", atol=-1.0), ValueError, "^atol must be a finite non-negative number$"),
    ("AR10", lambda: qb.random.split(qb.random.key(0), 0), ValueError, "num must be >= 1"),
    ("AR11", lambda: qb.random.bernoulli(qb.random.key(0), 1.5, (2,)), ValueError, "p must be in \\[0, 1\\]"),
    ("AR12", lambda: qb.random.glorot_normal(qb.random.key(0), (3,)), ValueError, "requires a shape of rank >= 2"),
    ("AR13", lambda: qb.linalg.qr(M, mode="full"), ValueError, "qr mode must be"),
    ("AR14", lambda: qb.interp(X, qb.array([1.0, 0.0]), X), ValueError, "interp requires strictly increasing xp"),
    ("AR15", lambda: qb.clip(X), ValueError, "clip requires lo or hi"),
    ("AR16", lambda: qb.ode.odeint(lambda y, t: -y, X, (0.0, 1.0)), ValueError, "requires steps"),
    ("AR17", lambda: bool(qb.array([True, False])), ValueError, "is ambiguous"),
    ("AR18", lambda: X[::0], ValueError, "step must not be zero"),
    ("AR19", lambda: qb.save(io.BytesIO(), 2 ** 70), ValueError, "outside the signed 64-bit range"),
    ("AR20", lambda: qb.grad(lambda v: qb.sum(v) > 0.0)(X), ValueError, "requires a floating output, got bool"),
    ("AR22 scalar", lambda: qb.vmap(lambda v, s: v * s)(X, 2.0), ValueError, "must have in_axes None"),
    ("AR22 none", lambda: qb.vmap(qb.sum, in_axes=None)(M), ValueError, "vmap needs at least one mapped argument"),
    ("AR fori", lambda: qb.fori_loop(2**70, 2, lambda i, c: c, X), ValueError, "lower must be an int from"),
    ("TF1", lambda: qb.grad(lambda v: v)(X), ValueError, "^grad requires a scalar output, got shape"),
    ("TF2", lambda: qb.grad(lambda v: qb.sum(qb.while_loop(lambda c: qb.sum(c) < 10.0, lambda c: c * 2.0, v)))(X),
     qb.UnsupportedOperationError, "^reverse-mode differentiation through while_loop is not supported.*max_trips=n"),
    ("TF4", lambda: qb.jvp(cv, (X,), (X,)), qb.UnsupportedOperationError, "^forward-mode differentiation \\(jvp\\) of custom_vjp\\(cv\\) is not supported"),
    ("TF5", lambda: qb.jit(lambda v: qb.fori_loop(0, 1, lambda i, c: cv(c), v))(X), ValueError, "cannot be called inside a fori_loop body"),
    ("TF6", lambda: qb.vmap(lambda a, b: a + b)(X, qb.ones((3,))), ValueError, "inconsistent sizes for mapped axes"),
    ("TF7", lambda: qb.vmap(lambda v: v, out_axes=None)(X), ValueError, "out_axes=None requires an unmapped result"),
    ("TF8", lambda: qb.tree.map(lambda a, b: a, [1], [1, 2]), ValueError, "pytree structures differ"),
    ("TF9", lambda: qb.tree.unflatten(qb.tree.structure([1, 2]), [1]), ValueError, "unflatten expected 2 leaves, got 1"),
    ("TF10", lambda: qb.jit(lambda v: v).lower(X).compile()(M), ValueError, "compiled function expects"),
    ("TF11", lambda: qb.grad(lambda m: qb.sum(qb.linalg.qr(m, mode="complete").Q))(qb.ones((3, 2))), ValueError, "extra columns"),
    ("TF12", lambda: qb.distributed.value_and_grad(lambda w, x: qb.sum(w * x), shard_argnums=(0,))(X, M), ValueError, "^distributed.value_and_grad: cannot differentiate with respect to sharded argument 0"),
    ("UN1", lambda: qb.jit(lambda v: v, device="cuda")(X), qb.UnsupportedOperationError, "cuda target is unavailable in this build"),
    ("UN6", lambda: qb.einsum("ii->i", M), qb.UnsupportedOperationError, "einsum supports only matrix products"),
    ("LA1", lambda: qb.linalg.solve(qb.zeros((2, 2)), X), ValueError, "^solve: matrix is singular"),
    ("LA1 jit", lambda: qb.jit(qb.linalg.inv)(qb.zeros((2, 2))), ValueError, "matrix is singular"),
    ("RT1", lambda: qb.ode.odeint(lambda y, t: y * y, X, (0.0, 10.0), method="dopri5", max_steps=3), RuntimeError, "stopped at t=.* before t1 after max_steps=3 step attempts"),
    ("RT2", lambda: qb.linalg.cg(lambda v: qb.asarray(np.array([[1.0, 2.0], [2.0, -5.0]])) @ v, X, maxiter=1, tol=1e-14), RuntimeError, "cg did not converge"),
    ("RT3", lambda: qb.linalg.gmres(lambda v: qb.asarray(np.array([[1.0, 2.0], [3.0, -5.0]])) @ v, X, maxiter=1, restart=1, tol=1e-14), RuntimeError, "gmres did not converge"),
]

RUST_SPELLINGS = re.compile(r"::|\(&|\(\.\.\)\.|\.eval\(\)|\bF32\b|\bF64\b|Some\(|None\)\s*=>")


@pytest.mark.parametrize("code,fn,cls,phrase", CASES, ids=[c[0] for c in CASES])
def test_error_class_and_message(code, fn, cls, phrase):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(cls) as info:
            fn()
    message = str(info.value)
    assert re.search(phrase, message), (code, message)
    assert not RUST_SPELLINGS.search(message), (code, message)
    # The Quabla classes keep their builtin bases.
    if cls is qb.TracerError:
        assert isinstance(info.value, TypeError) and isinstance(info.value, qb.QuablaError)
    if cls is qb.UnsupportedOperationError:
        assert isinstance(info.value, ValueError) and isinstance(info.value, NotImplementedError)
        assert isinstance(info.value.op, str)


def test_every_python_class_has_a_case():
    classes = {c[2] for c in CASES}
    for cls in (qb.TracerError, qb.UnsupportedOperationError, TypeError, ValueError, IndexError, RuntimeError):
        assert cls in classes


def test_retrace_warning_points_at_the_calling_line():
    f = qb.jit(lambda v: v * 2.0, max_traces=1)
    f(qb.ones((1,)))
    with pytest.warns(qb.RetraceWarning) as record:
        f(qb.ones((2,)))  # the line the warning must name
    assert record[0].filename == __file__
    import inspect
    source = inspect.getsource(test_retrace_warning_points_at_the_calling_line).splitlines()
    offset = next(i for i, l in enumerate(source) if "the line the warning must name" in l)
    first = test_retrace_warning_points_at_the_calling_line.__code__.co_firstlineno
    assert record[0].lineno == first + offset


def test_small_conversions():
    assert repr(qb.bool_) == "quabla.bool_"
    assert (repr(qb.float32), repr(qb.float64)) == ("quabla.float32", "quabla.float64")
    assert qb.bool_.name == "bool"
    a = qb.ones((3,))
    # __array__: no copy for the same dtype, a copy for another, ValueError when copy=False
    # cannot be honoured (NumPy 2's protocol).
    v1, v2 = a.__array__(np.float64), a.__array__()
    assert np.shares_memory(v1, v2)
    assert not np.shares_memory(a.__array__(np.float64, copy=True), v1)
    assert a.__array__(np.float32).dtype == np.float32
    with pytest.raises(ValueError, match="needs a copy, but copy=False was given"):
        a.__array__(np.float32, copy=False)
    assert np.shares_memory(a.__array__(None, copy=False), v1)
    # ODE pure relative control: atol=0 is allowed (errors AR4 as amended).
    for method in ("dopri5", "rosenbrock23"):
        y = qb.ode.odeint(lambda y, t: -y, qb.ones((1,)), (0.0, 1.0), method=method, atol=0.0, rtol=1e-8)
        np.testing.assert_allclose(np.asarray(y), [np.exp(-1.0)], rtol=1e-5)
