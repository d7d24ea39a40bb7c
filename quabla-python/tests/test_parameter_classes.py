"""The exception class of every integer and type parameter of the public API (errors.md §1.1):
an int a parameter cannot take (negative for a count, beyond 64 bits) is ``ValueError`` naming
the parameter, never PyO3's ``OverflowError``; an object of the wrong kind is ``TypeError``;
an exception raised by the user's own object propagates unchanged. One parametrized table."""

import re

import pytest

import quabla as qb

X = qb.ones((3,))
M = qb.ones((2, 2))
HUGE = 2**70
KEY = qb.random.key(0)


def sgd_update(schedule):
    opt = qb.optim.SGD(schedule)
    return opt.update({"w": X}, {"w": X}, opt.init({"w": X}))


def adam_step(step):
    opt = qb.optim.Adam(0.1)
    state = opt.init({"w": X})
    state["step"] = step
    return opt.update({"w": X}, {"w": X}, state)


# Integer parameters: (name as the error prints it, a call taking the value, signed).
# An unsigned parameter refuses -1 and 2**70 with ValueError; a signed one (axes, offsets,
# bounds) refuses 2**70; both refuse 1.5 and "3" with TypeError. A step count ("count") takes
# whole floats too.
INT_PARAMS = [
    ("max_traces", lambda v: qb.jit(lambda x: x, max_traces=v), False),
    ("lower", lambda v: qb.fori_loop(v, 3, lambda i, c: c, X), True),
    ("upper", lambda v: qb.fori_loop(0, v, lambda i, c: c, X), True),
    ("length", lambda v: qb.scan(lambda c, i: (c, c), X, length=v), False),
    ("max_trips", lambda v: qb.while_loop(lambda c: qb.sum(c) < 0, lambda c: c, X, max_trips=v), False),
    ("num", lambda v: qb.random.split(KEY, v), False),
    ("num", lambda v: qb.linspace(0.0, 1.0, v), False),
    ("n", lambda v: qb.eye(v), False),
    ("m", lambda v: qb.eye(2, v), False),
    ("history", lambda v: qb.optim.LBFGS(history=v), False),
    ("max_iterations", lambda v: qb.optim.LBFGS(max_iterations=v), False),
    ("max_evaluations", lambda v: qb.optim.LBFGS(max_evaluations=v), False),
    ("maxiter", lambda v: qb.linalg.cg(lambda v_: v_, X, maxiter=v), False),
    ("maxiter", lambda v: qb.linalg.gmres(lambda v_: v_, X, maxiter=v), False),
    ("restart", lambda v: qb.linalg.gmres(lambda v_: v_, X, restart=v), False),
    ("maxiter", lambda v: qb.newton(lambda x: x, X, maxiter=v), False),
    ("steps", lambda v: qb.ode.odeint(lambda y, t: y, X, (0.0, 1.0), steps=v), False),
    ("max_steps", lambda v: qb.ode.odeint(lambda y, t: y, X, (0.0, 1.0), method="dopri5",
                                          max_steps=v), False),
    ("device_ordinal", lambda v: qb.jit(lambda x: x).lower(X).program.compile(
        "cpu", device_ordinal=v), False),
    ("transition_steps", lambda v: qb.optim.exponential_decay(0.1, v, 0.5), False),
    ("transition_begin", lambda v: qb.optim.exponential_decay(0.1, 10, 0.5, transition_begin=v), False),
    ("decay_steps", lambda v: qb.optim.cosine_decay(0.1, v), False),
    ("warmup_steps", lambda v: qb.optim.warmup_cosine_decay(0.0, 0.1, v, 100), False),
    ("decay_steps", lambda v: qb.optim.warmup_cosine_decay(0.0, 0.1, 10, v), False),
    ("step", lambda v: qb.optim.cosine_decay(0.1, 100)(v), "count"),
    ("boundaries", lambda v: qb.optim.piecewise_constant([v], [0.1, 0.01]), False),
    ("step", adam_step, "count"),
    ("ddof", lambda v: qb.var(X, ddof=v), False),
    ("ddof", lambda v: X.std(ddof=v), False),
    ("n", lambda v: qb.diff(X, n=v), False),
    ("n", lambda v: qb.linalg.matrix_power(M, v), True),
    ("exponent", lambda v: X.powi(v), True),
    ("axis", lambda v: qb.sum(X, axis=v), True),
    ("axis", lambda v: qb.concat([X, X], v), True),
    ("axis", lambda v: qb.stack([X, X], v), True),
    ("axis", lambda v: qb.softmax(X, axis=v), True),
    ("axis", lambda v: qb.cumsum(X, axis=v), True),
    ("axis", lambda v: qb.squeeze(M[:1], v), True),
    ("axis", lambda v: qb.expand_dims(X, v), True),
    ("axis", lambda v: qb.flip(X, v), True),
    ("axis", lambda v: qb.trapezoid(X, axis=v), True),
    ("axis", lambda v: qb.linalg.norm(X, axis=v), True),
    ("axis", lambda v: X.gather([0], axis=v), True),
    ("axis", lambda v: qb.split(X, 3, axis=v), True),
    ("axis", lambda v: X.slice(v, 0, 1), True),
    ("start", lambda v: X.slice(0, v, 1), True),
    ("length", lambda v: X.slice(0, 0, v), False),
    ("step", lambda v: X.slice(0, 0, 1, v), True),
    ("axis1", lambda v: qb.swapaxes(M, v, 1), True),
    ("axis2", lambda v: qb.swapaxes(M, 0, v), True),
    ("offset", lambda v: qb.trace(M, offset=v), True),
    ("k", lambda v: qb.diag(X, k=v), True),
    ("axisa", lambda v: qb.cross(qb.ones((3,)), qb.ones((3,)), axisa=v), True),
    ("shift", lambda v: qb.roll(X, v), True),
    ("source", lambda v: qb.moveaxis(M, v, 0), True),
    ("destination", lambda v: qb.moveaxis(M, 0, v), True),
    ("indices", lambda v: X.gather([v]), True),
    ("axes", lambda v: qb.transpose(M, (v, 0)), True),
    ("axes", lambda v: qb.tensordot(M, M, axes=v), False),
    ("shape", lambda v: X.reshape((v,)), True),
    ("pad_width", lambda v: qb.pad(X, v), False),
    ("indices_or_sections", lambda v: qb.split(X, v), False),
    ("repeats", lambda v: qb.repeat(X, v), True),
    ("argnums", lambda v: qb.grad(lambda x: qb.sum(x), argnums=v)(X), False),
    ("static_argnums", lambda v: qb.jit(lambda x: x, static_argnums=v), False),
    ("nondiff_argnums", lambda v: qb.custom_vjp(lambda x: x, nondiff_argnums=v), False),
    ("in_axes", lambda v: qb.vmap(lambda x: x, in_axes=v)(M), True),
]

INT_CASES = []
for name, call, signed in INT_PARAMS:
    if signed == "count":
        # A step count: a whole number (an int, or a float with no fraction, as optax's
        # float counts are) in [0, 2**53).
        for bad in (-1, HUGE, 1.5):
            INT_CASES.append((name, call, bad, ValueError, f"{name} must be a whole number in \\[0, 2\\*\\*53\\)"))
        INT_CASES.append((name, call, "3", TypeError, f"{name} must be an int"))
        continue
    if not signed:
        INT_CASES.append((name, call, -1, ValueError, f"{name} must be a non-negative int, got -1"))
        INT_CASES.append((name, call, HUGE, ValueError, f"{name} must be an int from 0 to \\d+, got {HUGE}"))
    else:
        INT_CASES.append((name, call, HUGE, ValueError, f"{name} must be an int from -\\d+ to \\d+, got {HUGE}"))
    for bad in (1.5, "3"):
        # The message names the parameter (some say which other forms it takes).
        INT_CASES.append((name, call, bad, TypeError, re.escape(name)))


@pytest.mark.parametrize(
    "name,call,value,cls,pattern",
    INT_CASES,
    ids=[f"{c[0]}-{i}-{c[2]!r}" for i, c in enumerate(INT_CASES)],
)
def test_integer_parameters(name, call, value, cls, pattern):
    with pytest.raises(cls, match=pattern) as caught:
        call(value)
    assert type(caught.value) is cls, caught.value


def test_the_integers_a_parameter_takes_still_work():
    # fori_loop bounds of any sign: range(-5, 3).
    assert qb.fori_loop(-5, 3, lambda i, c: c + i, qb.zeros(())).item() == sum(range(-5, 3))
    traced = qb.jit(lambda c: qb.fori_loop(-5, 3, lambda i, c: c + i, c))(qb.zeros(()))
    assert traced.item() == sum(range(-5, 3))
    assert qb.fori_loop(3, -5, lambda i, c: c + 1.0, X) is X
    # NumPy integers and other __index__ objects are ints; huge slice bounds clamp.
    np = pytest.importorskip("numpy")
    assert qb.sum(M, axis=np.int64(0)).tolist() == [2.0, 2.0]
    assert X[: 2**70].tolist() == [1.0, 1.0, 1.0]
    assert X[-(2**70):].tolist() == [1.0, 1.0, 1.0]
    assert qb.linalg.matrix_power(M, -1 + 1).tolist() == [[1.0, 0.0], [0.0, 1.0]]


class Raises:
    """An object whose own conversion hook raises: its exception must propagate."""

    def __array__(self, dtype=None, copy=None):
        raise KeyError("from __array__")

    def __index__(self):
        raise KeyError("from __index__")


class BadWriter:
    write = None


# Type parameters: (id, call, class, pattern).
TYPE_CASES = [
    ("shape str", lambda: qb.zeros("3"), TypeError, "a shape must be an int or a tuple or list of ints"),
    ("shape negative", lambda: qb.zeros((2, -1)), ValueError, "a shape must be non-negative ints"),
    ("shape huge", lambda: qb.zeros(HUGE), ValueError, "a shape must be non-negative ints"),
    ("dtype", lambda: qb.zeros((2,), dtype="int8"), TypeError, "dtype must be"),
    ("key", lambda: qb.random.normal(3, (2,)), TypeError, "key must be a quabla.random.Key"),
    ("fori body", lambda: qb.fori_loop(0, 2, 3, X), TypeError, "body must be callable"),
    ("cg matvec", lambda: qb.linalg.cg(3, X), TypeError, "matvec must be callable"),
    ("jit fun", lambda: qb.jit(3)(X), TypeError, "callable"),
    ("save file int", lambda: qb.save(12345, X), TypeError, "file must be a path"),
    ("save file None", lambda: qb.save(None, X), TypeError, "file must be a path"),
    ("save write not callable", lambda: qb.save(BadWriter(), X), TypeError, "file must be a path"),
    ("load file None", lambda: qb.load(None), TypeError, "file must be a path"),
    ("load file int", lambda: qb.load(12345), TypeError, "file must be a path"),
    ("schedule returns None", lambda: sgd_update(lambda s: None), TypeError,
     "a learning-rate schedule must return a float or a rank-0 tensor, got NoneType"),
    ("schedule returns str", lambda: sgd_update(lambda s: "0.1"), TypeError,
     "a learning-rate schedule must return a float or a rank-0 tensor, got str"),
    ("matvec returns None", lambda: qb.linalg.cg(lambda v: None, X), TypeError,
     "cg: matvec must return an array, got NoneType"),
    ("matvec returns str", lambda: qb.linalg.gmres(lambda v: "v", X), TypeError,
     "gmres: matvec must return an array, got str"),
    ("newton f returns None", lambda: qb.newton(lambda x: None, X), TypeError,
     "newton: f must return an array, got NoneType"),
    ("odeint rhs returns None", lambda: qb.ode.odeint(lambda y, t: None, X, (0.0, 1.0), steps=2),
     TypeError, "odeint: f must return an array, got NoneType"),
    ("odeint rhs returns str", lambda: qb.ode.odeint(lambda y, t: "y", X, (0.0, 1.0), steps=2),
     TypeError, "odeint: f must return an array, got str"),
    ("loop body returns None", lambda: qb.fori_loop(0, 2, lambda i, c: None, X), TypeError,
     "must return one array"),
    ("scan returns no pair", lambda: qb.scan(lambda c, i: c, X, length=2), TypeError,
     "must return a pair"),
    ("__array__ raises", lambda: qb.asarray(Raises()), KeyError, "from __array__"),
    ("__array__ raises in an op", lambda: qb.sin(Raises()), KeyError, "from __array__"),
    ("__index__ raises", lambda: qb.sum(X, axis=Raises()), KeyError, "from __index__"),
    ("Trainer str parameter", lambda: qb.optim.Trainer(lambda p: qb.sum(p["w"]), {"w": X, "name": "mlp"},
                                                      qb.optim.SGD(0.1)),
     TypeError, "Trainer parameters and gradients must be floating; got str at \\['name'\\]"),
    ("SGD str parameter", lambda: qb.optim.SGD(0.1).init({"w": X, "name": "mlp"}), TypeError,
     "parameters and gradients must be floating; got str at \\['name'\\]"),
]


@pytest.mark.parametrize("case,call,cls,pattern", TYPE_CASES, ids=[c[0] for c in TYPE_CASES])
def test_type_parameters(case, call, cls, pattern):
    with pytest.raises(cls, match=pattern) as caught:
        call()
    assert not isinstance(caught.value, OverflowError)
