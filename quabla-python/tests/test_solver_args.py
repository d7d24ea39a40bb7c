"""Extra arguments of the solver callbacks (`args=` of `cg`, `gmres`, `newton`, `odeint`):
a tuple of pytrees, each rebuilt for the callback (`matvec(v, *args)`, `f(x, *args)`,
`f(y, t, *args)`) and differentiated through; a lone array is refused instead of being
unpacked row by row; a callback that closes over a tracer is told to use `args=`."""

from typing import NamedTuple

import numpy as np
import pytest

import quabla as qb

A = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.5], [0.0, 0.5, 2.0]])
B = np.array([1.0, 2.0, 3.0])
WANT = np.linalg.solve(A, B)


class Op(NamedTuple):
    m: object
    shift: object


# Each form of args with the matvec that reads it; every one computes A @ v.
FORMS = [
    ((), lambda v: qb.asarray(A) @ v),
    ((qb.asarray(A),), lambda v, a: a @ v),
    ([qb.asarray(A)], lambda v, a: a @ v),
    (({"a": qb.asarray(A)},), lambda v, d: d["a"] @ v),
    ((qb.asarray(2 * A), 0.5), lambda v, a, s: s * (a @ v)),
    (((qb.asarray(A), (qb.asarray(A), None)),), lambda v, t: 0.5 * (t[0] @ v + t[1][0] @ v)),
    ((Op(qb.asarray(A), qb.array(0.0)),), lambda v, o: o.m @ v + o.shift * v),
]


@pytest.mark.parametrize("solver", ["cg", "gmres"])
def test_krylov_args_forms(solver):
    solve = getattr(qb.linalg, solver)
    b = qb.asarray(B)
    for args, matvec in FORMS:
        for wrap in (lambda f: f, qb.jit):
            x = wrap(lambda b, args=args, matvec=matvec: solve(matvec, b, args=args, tol=1e-12))(b)
            np.testing.assert_allclose(np.asarray(x), WANT, rtol=1e-9, err_msg=str(args))
        # A preconditioner takes the same extra arguments.
        x = solve(matvec, b, args=args, tol=1e-12, M=lambda v, *rest: v / 2.0)
        np.testing.assert_allclose(np.asarray(x), WANT, rtol=1e-9)
    # Derivatives reach arrays inside the pytree: d(c . x)/dA = -x_adj x^T with x_adj = A^-T c.
    c = np.array([0.3, -1.0, 2.0])
    g = qb.grad(lambda d: qb.sum(qb.asarray(c) * solve(lambda v, d: d["a"] @ v, b, args=(d,), tol=1e-12)))(
        {"a": qb.asarray(A)}
    )
    adj = np.linalg.solve(A.T, c)
    np.testing.assert_allclose(np.asarray(g["a"]), -np.outer(adj, WANT), rtol=1e-7, atol=1e-9)
    # A lone array or number is refused: it would otherwise be unpacked row by row.
    for bad in (qb.asarray(A), A, 2.0):
        with pytest.raises(TypeError, match=f"{solver}: args must be a tuple of extra arguments, got .*; write args=\\(value,\\)"):
            solve(lambda v, a: a @ v, b, args=bad)


def test_newton_and_odeint_args_forms():
    # newton: f(x, *args) = x^3 - c with c from a pytree.
    for args, f in (
        ((qb.array(8.0),), lambda x, c: x ** 3 - c),
        (({"c": qb.array(8.0)},), lambda x, d: x ** 3 - d["c"]),
        ((Op(qb.array(8.0), 0.0),), lambda x, o: x ** 3 - o.m + o.shift),
    ):
        root = qb.newton(f, qb.array(1.5), args=args)
        assert abs(root.tolist() - 2.0) < 1e-10
    # odeint: f(y, t, *args), y' = -k y with k in a dict: y(1) = exp(-k).
    for args, f in (
        ((qb.array(0.7),), lambda y, t, k: -k * y),
        (({"k": qb.array(0.7)},), lambda y, t, d: -d["k"] * y),
        ((qb.array(0.35), 2.0), lambda y, t, k, s: -s * k * y),
    ):
        y = qb.ode.odeint(f, qb.ones((1,)), (0.0, 1.0), method="dopri5", args=args, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.asarray(y), [np.exp(-0.7)], rtol=1e-8)
    g = qb.grad(
        lambda d: qb.sum(qb.ode.odeint(lambda y, t, d: -d["k"] * y, qb.ones((1,)), (0.0, 1.0),
                                       method="dopri5", args=(d,), rtol=1e-10, atol=1e-12))
    )({"k": qb.array(0.7)})
    np.testing.assert_allclose(g["k"].tolist(), -np.exp(-0.7), rtol=1e-6)
    with pytest.raises(TypeError, match="odeint: args must be a tuple"):
        qb.ode.odeint(lambda y, t, k: -k * y, qb.ones((1,)), (0.0, 1.0), steps=4, args=qb.array(1.0))
    with pytest.raises(TypeError, match="newton: args must be a tuple"):
        qb.newton(lambda x, c: x - c, qb.array(1.0), args=qb.array(1.0))


def test_closing_over_a_tracer_names_args_and_the_callback_form():
    a = qb.asarray(A)
    b = qb.asarray(B)
    cases = [
        ("cg", "matvec(v, *args)", lambda m: qb.linalg.cg(lambda v: m @ v, b)),
        ("gmres", "matvec(v, *args)", lambda m: qb.linalg.gmres(lambda v: m @ v, b)),
        ("cg", "M(v, *args)", lambda m: qb.linalg.cg(lambda v: qb.asarray(A) @ v, b, M=lambda v: m[0, 0] * v)),
        ("newton", "f(x, *args)", lambda m: qb.newton(lambda x: x - m[0, 0], qb.array(1.0))),
        ("odeint", "f(y, t, *args)", lambda m: qb.ode.odeint(lambda y, t: -m[0, 0] * y, qb.ones((1,)), (0.0, 1.0), steps=4)),
    ]
    for solver, form, fn in cases:
        for transform in (qb.jit, qb.grad):
            body = fn if transform is qb.jit else (lambda m, fn=fn: qb.sum(fn(m)))
            with pytest.raises(qb.TracerError) as e:
                transform(body)(a)
            message = str(e.value)
            assert message.startswith(f"{solver}: "), message
            assert "args=(value, ...)" in message and form in message, message
            assert "operands=" not in message and "::" not in message and "(&[" not in message
