"""Sampler parameters as arrays (traced or not, broadcast to the shape as in JAX) and the
samplers over a population (`choice`, `permutation` of an array): each element is the host
formula of its numbers, the same bits eagerly, jitted and batched, chi-square tests of the
distributions with NumPy, derivatives with respect to the population."""

import numpy as np
import pytest

import quabla as qb

R = qb.random


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", [qb.float64, qb.float32])
def test_uniform_bounds_per_element(dtype):
    k = R.key(3)
    lo = [0.0, -3.5, -1e308, 1.0, 0.1, -0.7]
    hi = [1.0, 2.25, 1.5e308, 1.0 + 2.0**-52, 0.10000001, 0.3]
    pairs = [(a, b) for a, b in zip(lo, hi) if dtype == qb.float64 or (a, b) != (1.0, 1.0 + 2.0**-52)]
    lo, hi = qb.array([p[0] for p in pairs]), qb.array([p[1] for p in pairs])
    n = len(pairs)
    got = R.uniform(k, (n,), dtype=dtype, minval=lo, maxval=hi)
    for e, (a, b) in enumerate(pairs):
        same(got[e], R.uniform(k, (n,), dtype=dtype, minval=a, maxval=b)[e])
    same(qb.jit(lambda k, a, b: R.uniform(k, (n,), dtype=dtype, minval=a, maxval=b))(k, lo, hi), got)


def test_parameters_broadcast_and_batch():
    k = R.key(9)
    u = R.uniform(k, (2, 3), minval=qb.array([0.0, 10.0, -5.0]), maxval=20.0)
    for c, a in enumerate([0.0, 10.0, -5.0]):
        same(u[:, c], R.uniform(k, (2, 3), minval=a, maxval=20.0)[:, c])
    with pytest.raises(ValueError, match=r"does not broadcast to the sample shape \[2, 3\]"):
        R.uniform(k, (2, 3), minval=qb.zeros((4,)))
    # bernoulli's shape defaults to p's; an array p per row.
    b = R.bernoulli(k, qb.array([[0.0], [1.0]]))
    assert b.shape == [2, 1] and b.tolist() == [[False], [True]]
    same(R.bernoulli(k, qb.array([0.3, 0.8]), (4, 2))[:, 1], R.bernoulli(k, 0.8, (4, 2))[:, 1])
    # randint with array bounds, per element the bounds' numbers.
    r = R.randint(k, (3, 2), qb.array([-3, 0]), qb.array([5, 1 << 40]))
    same(r[:, 1], R.randint(k, (3, 2), 0, 1 << 40)[:, 1])
    with pytest.raises(TypeError, match="astype"):
        R.randint(k, (2,), qb.array([0.5, 1.0]), 3)
    with pytest.raises(ValueError):
        R.uniform(k, (2,), minval=qb.array([0.0, 2.0]), maxval=qb.array([1.0, 1.0]))
    # Traced: an empty interval is NaN (uniform) or its minval (randint).
    u, r = qb.jit(lambda a, b: (R.uniform(k, (2,), minval=a, maxval=b),
                               R.randint(k, (2,), a.astype(qb.int64), b.astype(qb.int64))))(
        qb.array([0.0, 2.0]), qb.array([1.0, 1.0]))
    assert np.isnan(np.asarray(u)[1]) and r.tolist()[1] == 2
    # Per example bounds and keys under vmap.
    keys = R.split(R.key(2), 3)
    lows = qb.array([0.0, 1.0, 2.0])
    batched = qb.vmap(lambda k, a: R.uniform(k, (4,), minval=a, maxval=3.0))(R.key_data(keys), lows)
    for e, key in enumerate(keys):
        same(batched[e], R.uniform(key, (4,), minval=float(lows[e]), maxval=3.0))
    # The bounds' derivatives: x = lo + u (hi - lo).
    g = qb.grad(lambda a: qb.sum(R.uniform(k, (5,), minval=a, maxval=2.0)))(qb.array(-1.0))
    x = np.asarray(R.uniform(k, (5,), minval=-1.0, maxval=2.0))
    assert abs(float(g) - np.sum(1 - (x + 1.0) / 3.0)) < 1e-12


def chi2(counts, expected):
    return float(((counts - expected) ** 2 / expected).sum())


def test_choice_distributions():
    # 0.1% critical values: 4 degrees of freedom 18.47, 3 degrees 16.27.
    k1, k2, k3 = R.split(R.key(17), 3)
    n = 40000
    c = np.bincount(np.asarray(R.choice(k1, 5, (n,))), minlength=5)
    assert chi2(c, np.full(5, n / 5)) < 18.47, c
    p = np.array([0.1, 0.4, 0.0, 0.2, 0.3])
    c = np.bincount(np.asarray(R.choice(k2, 5, (n,), p=qb.array(2 * p))), minlength=5)
    assert c[2] == 0
    keep = p > 0
    assert chi2(c[keep], n * p[keep]) < 16.27, c
    # Without replacement (Gumbel top-k): distinct, the first draw distributed as p.
    keys = R.key_data(R.split(k3, 4000))
    draws = np.asarray(qb.vmap(lambda k: R.choice(k, 5, (3,), replace=False, p=qb.array(p)))(keys))
    assert all(len(set(row)) == 3 for row in draws.tolist())
    c = np.bincount(draws[:, 0], minlength=5)
    assert c[2] == 0 and chi2(c[keep], 4000 * p[keep]) < 16.27, c
    assert sorted(R.choice(k3, 6, (6,), replace=False).tolist()) == list(range(6))
    with pytest.raises(ValueError, match="cannot take 4 distinct elements from a population of 3"):
        R.choice(k3, 3, (4,), replace=False)


@pytest.mark.parametrize("name", ["choice", "choice axis 1", "choice p", "choice no replace",
                                  "permutation", "permutation axis 1"])
def test_choice_and_permutation_of_arrays(name):
    a = qb.array(np.arange(8.0).reshape(4, 2))
    p = qb.array([0.5, 0.0, 0.25, 0.25])
    draw = {
        "choice": lambda k, a, p: R.choice(k, a, (2, 3)),
        "choice axis 1": lambda k, a, p: R.choice(k, a, (3,), axis=1),
        "choice p": lambda k, a, p: R.choice(k, a, (5,), p=p),
        "choice no replace": lambda k, a, p: R.choice(k, a, (3,), replace=False, p=p),
        "permutation": lambda k, a, p: R.permutation(k, a),
        "permutation axis 1": lambda k, a, p: R.permutation(k, a, axis=1),
    }[name]
    k = R.key(30)
    host = draw(k, a, p)
    same(draw(R.key_data(k), a, p), host)
    same(qb.jit(draw)(k, a, p), host)
    keys = R.split(R.key(1), 3)
    batched = qb.vmap(lambda k: draw(k, a, p))(R.key_data(keys))
    for e, key in enumerate(keys):
        same(batched[e], draw(key, a, p))
    # The samples are gathered from `a`: the gradient of sum(w * sample) scatters w back.
    w = np.arange(np.asarray(host).size, dtype=np.float64).reshape(np.asarray(host).shape)
    g = np.asarray(qb.grad(lambda a: qb.sum(draw(k, a, p) * qb.array(w)))(a))
    base = float(qb.sum(host * qb.array(w)))
    for j in range(8):
        bumped = np.arange(8.0).reshape(4, 2)
        bumped.flat[j] += 1.0
        assert g.flat[j] == float(qb.sum(draw(k, qb.array(bumped), p) * qb.array(w))) - base
    if name.startswith("permutation"):
        # A permutation permutes.
        axis = 1 if name.endswith("1") else 0
        np.testing.assert_array_equal(np.sort(np.asarray(host), axis=axis), np.asarray(a))
