"""Python operators on tensors against NumPy (api.md §2.1, §2.2 as amended): `==`/`!=` are
elementwise on tensors and tracers, tensors are unhashable, `@` is exactly `matmul` with every
rank combination, and NumPy scalars are weak constants on either side of a tensor or tracer."""

import itertools

import numpy as np
import pytest

import quabla as qb

A = np.array([[1.0, 2.0, 3.0], [4.0, 2.0, 6.0]])
OTHERS = [
    2.0,  # Python float
    2,  # Python int
    np.float64(2.0),
    np.float32(2.0),
    np.int64(2),
    [1.0, 2.0, 6.0],  # a list, broadcast along rows
    np.array([1.0, 2.0, 6.0]),
]


def as_qb(o):
    return qb.asarray(o) if isinstance(o, np.ndarray) else o


@pytest.mark.parametrize("op", ["==", "!="])
def test_equality_is_elementwise_on_tensors_and_tracers(op):
    fn = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b}[op]
    x = qb.asarray(A)
    for other in OTHERS + [qb.asarray(np.array([1.0, 2.0, 6.0]))]:
        want = fn(A, np.asarray(other, dtype=float)).tolist()
        got = fn(x, other)
        assert got.dtype == qb.bool_ and got.tolist() == want, other
        # The reflected form (a scalar or NumPy value on the left).
        if not isinstance(other, list):
            assert fn(other, x).tolist() == want, other
        # Traced: the same values, and usable with where (the reported case).
        traced = qb.jit(lambda v, o=as_qb(other): qb.where(fn(v, o), 1.0, 0.0))(x)
        assert traced.tolist() == np.where(want, 1.0, 0.0).tolist(), other
    i = qb.array(2.0)
    assert qb.where(qb.arange(4) == i, qb.ones((4,)), 0.0).tolist() == [0.0, 0.0, 1.0, 0.0]
    # NaN is unequal to itself; float32 against a weak scalar compares in float32.
    n32 = qb.array([1.0, float("nan"), 0.1], dtype=qb.float32)
    assert (n32 == n32).tolist() == [True, False, True]
    assert (n32 != n32).tolist() == [False, True, False]
    assert (n32 == 0.1).tolist() == (np.float32([1.0, np.nan, 0.1]) == np.float32(0.1)).tolist()
    assert (qb.array([True, False]) == True).tolist() == [True, False]  # noqa: E712
    # Objects that are no arrays compare by identity, as Python's default.
    assert (x == None) is False and (x != None) is True  # noqa: E711
    assert (x == "abc") is False


def test_tensors_are_unhashable():
    for t in (qb.ones((2,)), qb.array(1.0)):
        with pytest.raises(TypeError, match="^unhashable type: 'Tensor'$"):
            hash(t)
        with pytest.raises(TypeError, match="unhashable"):
            {t: 1}
    with pytest.raises(TypeError, match="^unhashable type: 'TraceTensor'$"):
        qb.jit(lambda v: hash(v) and v)(qb.ones((2,)))
    # Identity stays available, and containers of tensors still work by identity.
    t = qb.ones((2,))
    assert {id(t): t}[id(t)] is t


def test_matmul_operator_follows_numpy_for_every_rank_combination():
    rng = np.random.default_rng(0)
    shapes = {
        1: [(3,)],
        2: [(2, 3), (3, 4)],
        3: [(5, 2, 3), (5, 3, 4), (1, 3, 4)],
    }
    cases = 0
    for ra, rb in itertools.product([1, 2, 3], repeat=2):
        for sa, sb in itertools.product(shapes[ra], shapes[rb]):
            a, b = rng.standard_normal(sa), rng.standard_normal(sb)
            try:
                want = a @ b
            except ValueError:
                with pytest.raises(ValueError):
                    qb.asarray(a) @ qb.asarray(b)
                continue
            cases += 1
            for got in (
                qb.asarray(a) @ qb.asarray(b),
                qb.asarray(a) @ b,  # NumPy on the right
                a @ qb.asarray(b),  # NumPy on the left (deferred to the tensor)
                qb.matmul(qb.asarray(a), qb.asarray(b)),
                qb.jit(lambda p, q: p @ q)(qb.asarray(a), qb.asarray(b)),
            ):
                assert isinstance(got, qb.Tensor)
                np.testing.assert_allclose(np.asarray(got), want, rtol=1e-13, atol=1e-13)
    assert cases >= 10
    # Derivatives through a rank-1 product: d(v @ M @ v)/dv = (M + Mᵀ) v.
    m = rng.standard_normal((3, 3))
    v = rng.standard_normal(3)
    g = qb.grad(lambda u: u @ qb.asarray(m) @ u)(qb.asarray(v))
    np.testing.assert_allclose(np.asarray(g), (m + m.T) @ v, rtol=1e-13)
    with pytest.raises(ValueError):
        qb.ones((3,)) @ 2.0


def test_numpy_scalars_are_weak_constants_on_both_sides():
    x32 = qb.ones((2,), dtype=qb.float32)
    x64 = qb.ones((2,))
    ops = [
        lambda a, b: a + b,
        lambda a, b: a - b,
        lambda a, b: a * b,
        lambda a, b: a / b,
        lambda a, b: a ** b,
    ]
    for scalar in (np.float64(2.0), np.float32(2.0), np.int64(2), np.int32(2)):
        for op in ops:
            for x in (x32, x64):
                want = op(np.asarray(x), float(scalar))
                for got in (
                    op(x, scalar),
                    qb.jit(lambda v, op=op, s=scalar: op(v, s))(x),
                ):
                    # Weak: the tensor keeps its dtype.
                    assert got.dtype == x.dtype, (scalar, got)
                    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
                want_r = op(float(scalar), np.asarray(x))
                for got in (
                    op(scalar, x),
                    qb.jit(lambda v, op=op, s=scalar: op(s, v))(x),
                ):
                    assert isinstance(got, qb.Tensor) and got.dtype == x.dtype, (scalar, got)
                    np.testing.assert_allclose(np.asarray(got), want_r, rtol=1e-6)
    # The reported port: a NumPy constant in a traced log-density.
    f = qb.jit(lambda v: -0.5 * (v * v + np.log(2 * np.pi)))
    np.testing.assert_allclose(np.asarray(f(x64)), -0.5 * (1 + np.log(2 * np.pi)), rtol=1e-15)
    # NumPy arrays are still never captured by a tracer (TY3 on the right, TR2 on the left).
    with pytest.raises(TypeError, match="NumPy arrays are not captured automatically"):
        qb.jit(lambda v: v + np.ones(2))(x64)
    with pytest.raises(qb.TracerError, match="needs a concrete value"):
        qb.jit(lambda v: np.ones(2) + v)(x64)
