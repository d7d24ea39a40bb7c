"""Loop carries that are pytrees (a random key next to float state, an integer counter) and
the integer loop index (docs/loops.md): the same bits eagerly, jitted and per example under
`vmap`, against the same loop written in Python on host keys; derivatives through the float
leaves against central differences."""

import numpy as np
import pytest

import quabla as qb

R = qb.random


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    assert a.tobytes() == b.tobytes()


def walk_step(carry, scale):
    key, x, n = carry
    k_next, k_draw = R.split(key)
    return k_next, x + scale * R.normal(k_draw, (3,)), n + 1


def walk_reference(key, x, scale, steps):
    x = np.array(x, dtype=np.float64)
    for _ in range(steps):
        key, k_draw = R.split(key)
        x = x + scale * np.asarray(R.normal(k_draw, (3,)))
    return key, x


LOOPS = {
    "fori_loop": lambda init, s: qb.fori_loop(0, 4, lambda i, c, s: walk_step(c, s), init, operands=(s,)),
    "scan": lambda init, s: qb.scan(
        lambda c, i, s: (walk_step(c, s), c[1]), init, length=4, operands=(s,)
    )[0],
    "scan over xs": lambda init, s: qb.scan(
        lambda c, x, s: (walk_step(c, s * x), x), init, xs=qb.ones((4,)), operands=(s,)
    )[0],
    "while_loop": lambda init, s: qb.while_loop(
        lambda c, s: c[2] < 4, lambda c, s: walk_step(c, s), init, operands=(s,), max_trips=10
    ),
}

X0 = [0.5, -1.0, 2.0]


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_a_key_is_carried_next_to_float_state(name):
    loop = LOOPS[name]
    k = R.key(21)
    want_key, want_x = walk_reference(k, X0, 0.3, 4)
    # A Key leaf travels as its key tensor; the counter stays int64.
    for key in (k, R.key_data(k)):
        key_out, x, n = loop((key, qb.array(X0), 0), 0.3)
        assert R.wrap_key_data(key_out) == want_key
        np.testing.assert_array_equal(np.asarray(x), want_x)
        assert (n.dtype, n.tolist()) == (qb.int64, 4)
    eager = loop((k, qb.array(X0), 0), 0.3)
    jitted = qb.jit(lambda key, x, s: loop((key, x, 0), s))(k, qb.array(X0), 0.3)
    for a, b in zip(jitted, eager):
        same(a, b)
    # Per example under vmap: each example walks from its own key.
    keys = R.split(R.key(3), 3)
    batched = qb.vmap(lambda key: loop((key, qb.array(X0), 0), 0.3))(R.key_data(keys))
    for e, key in enumerate(keys):
        want_key, want_x = walk_reference(key, X0, 0.3, 4)
        assert R.wrap_key_data(batched[0][e]) == want_key
        np.testing.assert_array_equal(np.asarray(batched[1][e]), want_x)
    # The float leaves differentiate (the key and the counter do not): against central
    # differences of the same loop in float64.
    def loss(x, s):
        return qb.sum(qb.tanh(loop((k, x, 0), s)[1]))

    gx, gs = qb.grad(loss, argnums=(0, 1))(qb.array(X0), 0.3)
    h = 1e-6
    fd = (float(loss(qb.array(X0), 0.3 + h)) - float(loss(qb.array(X0), 0.3 - h))) / (2 * h)
    assert abs(float(gs) - fd) < 1e-7
    for j in range(3):
        e = np.eye(3)[j] * h
        fd = (float(loss(qb.array(np.array(X0) + e), 0.3))
              - float(loss(qb.array(np.array(X0) - e), 0.3))) / (2 * h)
        assert abs(float(gx[j]) - fd) < 1e-7


def test_the_loop_index_is_an_integer():
    xs = qb.array([0.5, -1.0, 2.0, 0.25, 3.0, -0.75], dtype=qb.float32)
    v = np.asarray(xs)

    def body(i, c, xs):
        acc, seen, key = c
        # Indexing, arithmetic on the index, dynamic_slice and fold_in take it as it is; a
        # weak integer meets a float32 array and stays float32.
        term = xs[i] * i + xs[i + 1] + qb.sum(qb.dynamic_slice(xs, (i,), (2,))) + i * 0.5
        return acc + term, seen.at[i].set(1.0), R.fold_in(key, i)

    init = (qb.array(0.0, dtype=qb.float32), qb.zeros((6,), dtype=qb.float32), R.key_data(R.key(4)))
    want = np.float32(0.0)
    key = R.key(4)
    for i in range(1, 4):
        want += np.float32(v[i] * i + v[i + 1] + (v[i] + v[i + 1]) + np.float32(i * 0.5))
        key = R.fold_in(key, i)
    out = qb.fori_loop(1, 4, body, init, operands=(xs,))
    assert out[0].dtype == qb.float32
    assert out[0].tolist() == pytest.approx(float(want), rel=1e-6)
    assert out[1].tolist() == [0.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert R.wrap_key_data(out[2]) == key
    for unroll in (False, True):
        jitted = qb.jit(lambda init, xs: qb.fori_loop(1, 4, body, init, operands=(xs,), unroll=unroll))(
            init, xs)
        for a, b in zip(jitted, out):
            same(a, b)
    # Traced, the index is a weak int64; eagerly a Python int.
    seen = []

    def record(i, c):
        seen.append((type(i).__name__, getattr(i, "dtype", None)))
        return c

    qb.fori_loop(0, 1, record, 0.0)
    qb.jit(lambda c: qb.fori_loop(0, 1, record, c))(0.0)
    assert seen == [("int", None), ("TraceTensor", qb.int64)]
    # A negative lower bound: the index counts from it, and still indexes.
    ys = qb.arange(10.0)
    got = qb.jit(lambda c: qb.fori_loop(-3, 0, lambda i, c: c + ys[i], c))(0.0)
    assert got.tolist() == 7.0 + 8.0 + 9.0
