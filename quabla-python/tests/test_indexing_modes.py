"""`take`/`take_along_axis` with JAX's modes and fill values, and `x.at[idx].subtract /
divide / power / apply`, against NumPy (`np.take` with `mode="clip"`/`"wrap"`, and the
unbuffered `ufunc.at`, which applies every repeated update as JAX does): eagerly, under `jit`
with traced indices, and derivatives against central differences."""

import numpy as np
import pytest

import quabla as qb

X = np.array([0.5, -1.0, 2.0, 3.5, -4.25])
IDX = np.array([0, 4, -1, -5, 5, -6, 100, 2])


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    np.testing.assert_array_equal(a, b)


def reference_fill(x, idx, fill, axis=0):
    n = x.shape[axis]
    wrapped = np.where(idx < 0, idx + n, idx)
    valid = (wrapped >= 0) & (wrapped < n)
    out = np.take(x, np.where(valid, wrapped, 0), axis=axis)
    shape = [1] * axis + list(idx.shape) + [1] * (x.ndim - axis - 1)
    return np.where(valid.reshape(shape), out, fill)


@pytest.mark.parametrize("dtype,fill", [(np.float64, np.nan), (np.float32, np.nan),
                                         (np.int64, np.iinfo(np.int64).min),
                                         (np.int32, np.iinfo(np.int32).min)])
def test_take_modes_against_numpy(dtype, fill):
    x = X.astype(dtype)
    same(qb.take(qb.asarray(x), qb.asarray(IDX)), reference_fill(x, IDX, fill).astype(dtype))
    same(qb.take(x, IDX, mode="fill", fill_value=7), reference_fill(x, IDX, 7).astype(dtype))
    same(qb.take(x, IDX, mode="wrap"), np.take(x, IDX, mode="wrap"))
    # NumPy's clip does not count negative indices from the end; ours does (then clips).
    same(qb.take(x, IDX, mode="clip"), np.take(x, np.where(IDX < 0, IDX + 5, IDX), mode="clip"))
    with pytest.raises(ValueError, match="mode must be"):
        qb.take(x, IDX, mode="raise")


def test_take_along_axis_and_axes():
    m = np.arange(12.0).reshape(3, 4)
    idx = np.array([[0, 5], [-1, -6], [3, 2]])
    same(qb.take(m, idx, axis=1), reference_fill(m, idx, np.nan, axis=1))
    same(qb.take_along_axis(m, idx, 1),
         np.where((idx >= -4) & (idx < 4), np.take_along_axis(m, np.clip(np.where(idx < 0, idx + 4, idx), 0, 3), 1), np.nan))
    same(qb.take_along_axis(m, idx, 1, mode="wrap"), np.take_along_axis(m, idx % 4, 1))
    # Jitted with traced indices, and the gradient: a scatter to the positions read, the rest
    # to the fill value.
    f = lambda x, i, v: qb.sum(qb.take(x, i, mode="fill", fill_value=v) * qb.arange(1.0, 9.0))
    same(qb.jit(lambda x, i: qb.take(x, i))(X, IDX), qb.take(X, IDX))
    gx, gv = qb.grad(f, argnums=(0, 2))(qb.array(X), qb.asarray(IDX), qb.array(0.0))
    want = np.zeros(5)
    w = np.arange(1.0, 9.0)
    wrapped = np.where(IDX < 0, IDX + 5, IDX)
    valid = (wrapped >= 0) & (wrapped < 5)
    np.add.at(want, wrapped[valid], w[valid])
    np.testing.assert_array_equal(np.asarray(gx), want)
    assert float(gv) == w[~valid].sum()


UPDATES = {
    "subtract": (lambda r, i, v: r.subtract(v), np.subtract),
    "divide": (lambda r, i, v: r.divide(v), np.divide),
    "power": (lambda r, i, v: r.power(v), np.power),
}


@pytest.mark.parametrize("name", sorted(UPDATES))
def test_updates_against_numpy_ufunc_at(name):
    update, ufunc = UPDATES[name]
    x = np.array([1.5, 2.0, 0.5, 3.0, 0.75])
    i = np.array([1, 4, 1, -1])        # 1 twice, -1 is 4: every update applies
    v = np.array([0.5, 2.0, -3.0, 1.5])
    want = x.copy()
    ufunc.at(want, i, v)
    got = update(qb.array(x).at[qb.asarray(i)], i, qb.array(v))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-14)
    jitted = qb.jit(lambda x, i, v: update(x.at[i], i, v))(x, i, v)
    same(jitted, got)
    # Derivatives with unique indices, against central differences.
    iu = np.array([3, 0])
    loss = lambda x, v: qb.sum(qb.tanh(update(x.at[iu], iu, v)))
    gx, gv = qb.grad(loss, argnums=(0, 1))(qb.array(x), qb.array([0.5, 1.25]))
    h = 1e-6
    for k in range(5):
        e = np.eye(5)[k] * h
        fd = (float(loss(qb.array(x + e), qb.array([0.5, 1.25])))
              - float(loss(qb.array(x - e), qb.array([0.5, 1.25])))) / (2 * h)
        assert abs(float(gx[k]) - fd) < 1e-7
    for k in range(2):
        e = np.eye(2)[k] * h
        fd = (float(loss(qb.array(x), qb.array([0.5, 1.25] + e)))
              - float(loss(qb.array(x), qb.array([0.5, 1.25] - e)))) / (2 * h)
        assert abs(float(gv[k]) - fd) < 1e-7


def test_apply_once_per_occurrence():
    x = np.array([0.3, 0.7, -0.4, 1.2])
    i = np.array([1, 1, 2, 9])        # 9 is out of range: dropped
    want = x.copy()
    np.sin.at(want, i[i < 4])
    got = qb.array(x).at[i].apply(qb.sin)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-15)
    # Traced indices: the repetitions are found in the graph (a bounded while_loop).
    same(qb.jit(lambda x, i: x.at[i].apply(qb.sin))(x, i), got)
    g = qb.grad(lambda x: qb.sum(x.at[i].apply(qb.sin)))(qb.array(x))
    assert abs(float(g[1]) - np.cos(np.sin(0.7)) * np.cos(0.7)) < 1e-15
    assert float(g[0]) == 1.0 and float(g[3]) == 1.0
    with pytest.raises(TypeError, match="apply takes a function"):
        qb.array(x).at[i].apply(3)
    with pytest.raises(TypeError, match="astype"):
        qb.array([1, 2]).at[0].divide(2)
