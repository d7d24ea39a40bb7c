"""Indexing by arrays from Python: `x[idx]` with tensors (traced or not), NumPy arrays and
lists, `take`, `take_along_axis`, `dynamic_slice`, `dynamic_update_slice` and `x.at[...]`,
against NumPy with JAX's index rules (negative indices wrap once, reads clamp, updates drop,
repeated updates combine in order), the same bits eagerly and under `jit`, `vmap` against a
loop, derivatives by finite differences, and boolean masks eager only."""

import numpy as np
import pytest

import quabla as qb

RNG = np.random.default_rng(44)


def clamp_idx(i, n):
    i = np.asarray(i)
    return np.clip(np.where(i < 0, i + n, i), 0, n - 1)


def np_update(x, idx, vals, op):
    """NumPy reference of x.at[idx].op(vals) on axis 0, dropping out-of-range indices."""
    out = np.array(x, copy=True)
    n = x.shape[0]
    idx = np.asarray(idx).reshape(-1)
    vals = np.broadcast_to(vals, idx.shape + x.shape[1:])
    for k, i in enumerate(idx):
        i = i + n if i < 0 else i
        if 0 <= i < n:
            out[i] = op(out[i], vals[k])
    return out


def test_getitem_with_index_arrays_matches_numpy():
    x = RNG.standard_normal((4, 3, 5))
    t = qb.asarray(x)
    cases = [
        (np.array([[2, -1], [3, 0]]),),
        (slice(1, 3), np.array([2, 0, 2, -1])),
        (np.array([[0], [3]]), np.array([1, -1, 2])),
        (1, slice(None), np.array([4, 0, -2])),
        (Ellipsis, np.array([0, 4])),
        (np.array([0, 2]), None, slice(None, None, -1)),
    ]
    for index in cases:
        want = x[index]
        for form in (lambda a: a, lambda a: qb.asarray(a), lambda a: a.tolist()):
            got = t[tuple(form(i) if isinstance(i, np.ndarray) else i for i in index)]
            np.testing.assert_array_equal(np.asarray(got), want, err_msg=str(index))
    # Out-of-range indices clamp (JAX's rule, where NumPy raises).
    got = t[qb.asarray(np.array([7, -9]))]
    np.testing.assert_array_equal(np.asarray(got), x[clamp_idx([7, -9], 4)])
    # Integer data keeps its dtype and values.
    n = qb.asarray(np.array([2**62, -5, 7], dtype=np.int64))
    assert np.asarray(n[[0, 2, 0]]).tolist() == [2**62, 7, 2**62]
    with pytest.raises(TypeError, match="only integers, slices, None and Ellipsis are valid indices"):
        t[qb.array([0.0])]


def test_take_and_take_along_axis_match_numpy():
    x = RNG.standard_normal((3, 4))
    idx = np.array([3, -1, 2, 0])
    np.testing.assert_array_equal(np.asarray(qb.take(x, idx)), np.take(x, idx))
    np.testing.assert_array_equal(np.asarray(qb.take(x, idx, axis=1)), np.take(x, idx, axis=1))
    # Out of range: JAX's default fills (NaN); mode="clip" clamps (test_indexing_modes.py).
    assert np.isnan(np.asarray(qb.take(x, np.array([9, -20]), axis=0))).all()
    np.testing.assert_array_equal(np.asarray(qb.take(x, np.array([9, -20]), axis=0, mode="clip")),
                                  x[clamp_idx([9, -20], 3)])
    ii = np.array([[1, 0], [3, 3], [-1, 2]])
    np.testing.assert_array_equal(np.asarray(qb.take_along_axis(x, ii, 1)), np.take_along_axis(x, ii, 1))
    ii = np.array([[2, 0, 1, 1]])
    np.testing.assert_array_equal(np.asarray(qb.take_along_axis(x, ii, axis=0)), np.take_along_axis(x, ii, 0))


def test_dynamic_slice_and_update_clamp_starts():
    x = RNG.standard_normal((5, 4))
    for r, c in [(1, 2), (4, 3), (-1, 0), (-9, 7)]:
        r0 = min(clamp_idx(r, 5), 3)
        c0 = min(clamp_idx(c, 4), 2)
        got = qb.dynamic_slice(x, (r, qb.asarray(np.int64(c))), (2, 2))
        np.testing.assert_array_equal(np.asarray(got), x[r0:r0 + 2, c0:c0 + 2])
        u = -np.arange(4.0).reshape(2, 2)
        want = x.copy()
        want[r0:r0 + 2, c0:c0 + 2] = u
        np.testing.assert_array_equal(np.asarray(qb.dynamic_update_slice(x, u, [r, c])), want)
    with pytest.raises(ValueError):
        qb.dynamic_slice(x, (0,), (1,))


@pytest.mark.parametrize("name,op", [
    ("set", lambda a, v: v), ("add", lambda a, v: a + v), ("multiply", lambda a, v: a * v),
    ("min", np.minimum), ("max", np.maximum),
])
def test_at_updates_match_numpy_with_repeats(name, op):
    x = RNG.standard_normal((5, 2))
    idx = np.array([1, -1, 1, 7, -9, 0])
    vals = RNG.standard_normal((6, 2))
    got = getattr(qb.asarray(x).at[idx], name)(vals)
    np.testing.assert_array_equal(np.asarray(got), np_update(x, idx, vals, op))
    # Under jit, with traced indices: the same bits.
    f = qb.jit(lambda x, i, v: getattr(x.at[i], name)(v))
    np.testing.assert_array_equal(np.asarray(f(x, qb.asarray(idx), vals)), np.asarray(got))


def test_at_get_and_basic_items():
    x = np.arange(12).reshape(3, 4)
    t = qb.asarray(x)
    np.testing.assert_array_equal(np.asarray(t.at[[2, -1]].get()), x[[2, -1]])
    want = x.copy()
    want[1:, 0] = -1
    np.testing.assert_array_equal(np.asarray(t.at[1:, 0].set(-1)), want)
    assert t.at[0].add(1).dtype == qb.int64


def test_traced_index_in_a_loop_reads_each_row():
    xs = RNG.standard_normal((6, 3))

    def body(i, acc, xs):
        # The loop index has the carry's dtype (float64 here): cast it to index.
        return acc + xs[i.astype(qb.int64)] * i

    total = qb.jit(lambda xs: qb.fori_loop(0, 6, body, qb.zeros((3,)), operands=(xs,)))(xs)
    want = sum(xs[i] * i for i in range(6))
    np.testing.assert_allclose(np.asarray(total), want, rtol=1e-12)
    f = qb.jit(lambda xs, i: qb.dynamic_slice(xs, (i, 0), (2, 3)))
    np.testing.assert_array_equal(np.asarray(f(xs, qb.asarray(np.int64(4)))), xs[4:6])


def test_vmap_matches_a_loop():
    xs = RNG.standard_normal((3, 4, 2))
    idx = np.array([[1, -1], [3, 0], [2, 2]])
    us = RNG.standard_normal((3, 2, 2))
    for f in (lambda x, i, u: x[i], lambda x, i, u: x.at[i].add(u), lambda x, i, u: x.at[i].set(u),
              lambda x, i, u: qb.take_along_axis(x, i[:, None], 0)):
        got = np.asarray(qb.vmap(f)(xs, qb.asarray(idx), us))
        for b in range(3):
            np.testing.assert_array_equal(got[b], np.asarray(f(qb.asarray(xs[b]), qb.asarray(idx[b]), us[b])))
        got = np.asarray(qb.vmap(f, in_axes=(None, 0, 0))(xs[0], qb.asarray(idx), us))
        for b in range(3):
            np.testing.assert_array_equal(got[b], np.asarray(f(qb.asarray(xs[0]), qb.asarray(idx[b]), us[b])))


def finite_difference(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for k in range(x.size):
        e = np.zeros_like(x)
        e.flat[k] = eps
        g.flat[k] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def test_gradients_against_finite_differences():
    x = qb.asarray(RNG.standard_normal((4, 3)))
    u = qb.asarray(RNG.standard_normal((2, 3)))
    idx = qb.asarray(np.array([1, 1]))
    fs = [
        lambda x, u: qb.sum(qb.sin(x[idx]) * x[:, qb.asarray(np.array([2, 0]))].sum()),
        lambda x, u: qb.sum(qb.exp(x.at[idx].set(u))),
        lambda x, u: qb.sum(qb.sin(x.at[idx].add(u))),
        lambda x, u: qb.sum(qb.sin(x.at[qb.asarray(np.array([0, 3]))].max(u))),
        lambda x, u: qb.sum(qb.tanh(qb.dynamic_slice(x, (qb.asarray(np.int64(2)), 1), (2, 2)))),
    ]
    for f in fs:
        gx, gu = qb.grad(f, argnums=(0, 1))(x, u)
        fx = lambda v: float(f(qb.asarray(v), u))
        fu = lambda v: float(f(x, qb.asarray(v)))
        np.testing.assert_allclose(np.asarray(gx), finite_difference(fx, np.asarray(x)), atol=1e-6)
        np.testing.assert_allclose(np.asarray(gu), finite_difference(fu, np.asarray(u)), atol=1e-6)


def test_boolean_masks_are_eager_only():
    x = np.array([[1.0, -2.0], [3.0, -4.0]])
    t = qb.asarray(x)
    np.testing.assert_array_equal(np.asarray(t[t < 0]), x[x < 0])
    np.testing.assert_array_equal(np.asarray(t[np.array([False, True])]), x[np.array([False, True])])
    want = x.copy()
    want[x < 0] = 0
    np.testing.assert_array_equal(np.asarray(t.at[t < 0].set(0.0)), want)
    with pytest.raises(TypeError, match="where"):
        qb.jit(lambda x: x[x < 0].sum())(x)
