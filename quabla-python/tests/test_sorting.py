"""The order and counting functions, ``switch`` and ``scan(f, init, xs)`` from Python, against
NumPy: values and integer edge cases (NaN, signed zeros, ties, the extremes of each dtype),
eagerly and under jit with the same bits, vmap against a loop, and derivatives."""

import numpy as np
import pytest

import quabla as qb

I64 = np.iinfo(np.int64)
AWKWARD = np.array([3.0, np.nan, -0.0, 1.5, -np.inf, 0.0, 1.5, np.inf, -2.0, np.nan])


def same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    if got.dtype.kind == "f":
        assert got.tobytes() == want.tobytes(), (got, want)
    else:
        assert got.tolist() == want.tolist(), (got, want)


def test_sort_argsort_match_numpy():
    x = qb.asarray(AWKWARD)
    same(qb.sort(x), np.sort(AWKWARD, kind="stable"))
    same(qb.argsort(x), np.argsort(AWKWARD, kind="stable"))
    same(x.sort(), np.sort(AWKWARD, kind="stable"))
    m = np.array([[3, -1, 3, 0], [I64.min, I64.max, -7, -7]], dtype=np.int64)
    for axis in (0, 1, -1, None):
        same(qb.sort(m, axis=axis), np.sort(m, axis=axis, kind="stable"))
        same(qb.argsort(m, axis=axis), np.argsort(m, axis=axis, kind="stable"))
    m32 = m.astype(np.int32)
    same(qb.sort(qb.asarray(m32)), np.sort(m32, kind="stable"))
    # Descending keeps ties in index order (a stable sort of the negated keys).
    v = np.array([2.0, 5.0, 2.0, -1.0, 5.0])
    same(qb.argsort(v, descending=True), np.argsort(-v, kind="stable"))
    same(qb.sort(v, descending=True), -np.sort(-v, kind="stable"))


def test_argmax_argmin_match_numpy():
    a = np.array([[1.0, 5.0, 5.0, -2.0], [np.nan, 0.0, np.nan, -7.0], [0.0, -0.0, 0.0, 1.0]])
    for f, g in [(qb.argmax, np.argmax), (qb.argmin, np.argmin)]:
        for axis in (None, 0, 1):
            same(f(a, axis=axis), g(a, axis=axis))
            same(f(a, axis=axis, keepdims=True), g(a, axis=axis, keepdims=True))
        ints = np.array([I64.min, I64.max, I64.max, I64.min])
        same(f(ints), g(ints))
    assert qb.asarray(a).argmax(axis=1).tolist() == np.argmax(a, axis=1).tolist()


def test_top_k_searchsorted_one_hot_bincount_cumprod():
    x = np.array([[0.5, 3.0, 3.0, -1.0, 2.0], [np.nan, 1.0, np.inf, 1.0, -np.inf]])
    values, indices = qb.top_k(x, 3)
    order = np.argsort(-np.where(np.isnan(x), np.inf, x), axis=-1, kind="stable")
    order[1] = [0, 2, 1]  + [3, 4]  # NaN ranks above +inf
    same(indices, order[:, :3])
    same(values, np.take_along_axis(x, order[:, :3], axis=-1))
    edges = np.array([-1.0, 0.0, 0.0, 2.5, np.inf, np.nan])
    vals = np.array([[-5.0, 0.0, -0.0], [2.5, np.inf, np.nan]])
    for side in ("left", "right"):
        same(qb.searchsorted(edges, vals, side=side), np.searchsorted(edges, vals, side=side))
    with pytest.raises(ValueError, match="side"):
        qb.searchsorted(edges, vals, side="middle")
    labels = np.array([2, 0, -1, 3, 2])
    same(qb.one_hot(labels, 3), (labels[:, None] == np.arange(3)).astype(np.float64))
    assert qb.one_hot(labels, 3, dtype=qb.float32).dtype == qb.float32
    # NumPy refuses negative values; JAX (and we) count them as 0. Values >= length drop.
    same(qb.bincount(labels, length=3), np.bincount(np.clip(labels, 0, 2)[labels < 3], minlength=3))
    same(qb.bincount(np.array([1, 1, 4])), np.bincount([1, 1, 4]))
    w = np.array([0.5, 1.0, 2.0, 4.0, 8.0])
    same(qb.bincount(labels, w, length=4), np.bincount(np.clip(labels, 0, None), w, minlength=4))
    with pytest.raises(TypeError, match="astype"):
        qb.bincount(np.array([1.0, 2.0]), length=3)
    with pytest.raises(qb.TracerError, match="length="):
        qb.jit(lambda v: qb.bincount(v))(qb.array([1, 2]))
    with np.errstate(over="ignore"):
        for dtype in (np.int32, np.int64):
            info = np.iinfo(dtype)
            c = np.array([3, -7, info.max, 2, 0, 5], dtype=dtype)
            same(qb.cumprod(c), np.cumprod(c, dtype=dtype))
    f = np.linspace(0.5, 1.7, 12).reshape(3, 4)
    np.testing.assert_allclose(np.asarray(qb.cumprod(f, axis=1)), np.cumprod(f, axis=1), rtol=4e-16)
    np.testing.assert_allclose(np.asarray(qb.cumprod(f, axis=0, reverse=True)),
                               np.cumprod(f[::-1], axis=0)[::-1], rtol=4e-16)


def test_jit_same_bits_vmap_matches_a_loop_and_derivatives():
    fs = [
        lambda v: qb.sort(v),
        lambda v: qb.argsort(v, axis=0, descending=True),
        lambda v: qb.argmax(v, axis=-1),
        lambda v: qb.top_k(v, 2)[0],
        lambda v: qb.cumprod(v, axis=-1),
        lambda v: qb.searchsorted(qb.array([-1.0, 0.0, 2.0]), v),
        lambda v: qb.one_hot(v.astype(qb.int64), 3),
    ]
    x = np.array([[2.5, -0.0, np.nan], [1.0, 1.0, -3.0]])
    batch = np.arange(18.0).reshape(3, 2, 3) % 5 - 2
    for f in fs:
        same(qb.jit(f)(x), np.asarray(f(qb.asarray(x))))
        batched = qb.vmap(f)(batch)
        for i in range(3):
            same(batched[i], np.asarray(f(qb.asarray(batch[i]))))
    # sort differentiates through its permutation.
    v = qb.array([0.3, -1.2, 2.0, 0.7])
    g = qb.grad(lambda v: qb.sum(qb.sort(v) * qb.array([1.0, 2.0, 3.0, 4.0])))(v)
    ranks = np.argsort(np.argsort(np.asarray(v)))
    assert g.tolist() == (ranks + 1.0).tolist()
    assert qb.grad(lambda v: qb.sum(qb.top_k(v, 2)[0]))(v).tolist() == [0.0, 0.0, 1.0, 1.0]


def test_switch():
    branches = [lambda x, y: x * x, lambda x, y: qb.sin(x), lambda x, y: x * y]
    x, y = qb.array(0.75), qb.array(-2.0)
    want = [0.5625, np.sin(0.75), -1.5]
    for i in (-4, 0, 1, 2, 9):
        assert qb.switch(i, branches, x, y).item() == want[min(max(i, 0), 2)]
        j = qb.jit(lambda i, x, y: qb.switch(i, branches, x, y))(qb.array(i), x, y)
        assert j.item() == want[min(max(i, 0), 2)]
    assert qb.grad(lambda x: qb.switch(1, branches, x, y))(x).item() == np.cos(0.75)
    out = qb.vmap(lambda i: qb.switch(i, branches, x, y))(qb.array([2, 0, 1]))
    assert out.tolist() == [want[2], want[0], want[1]]
    with pytest.raises(TypeError, match="astype"):
        qb.switch(1.0, branches, x, y)
    with pytest.raises(TypeError, match="callable"):
        qb.switch(0, [1], x)


def test_scan_over_xs_pytrees():
    xs = {"a": np.array([0.5, -1.5, 2.0]), "n": np.array([[1, 2], [3, 4], [5, I64.max]])}

    def step(c, x, s):
        c = (c * x["a"] + 1.0) * s
        return c, {"c": c, "n": qb.sum(x["n"])}

    c, ys = qb.scan(step, 0.5, xs, operands=(1.25,))
    ref, cs = 0.5, []
    for a in xs["a"]:
        ref = (ref * a + 1.0) * 1.25
        cs.append(ref)
    assert c.item() == ref and ys["c"].tolist() == cs
    with np.errstate(over="ignore"):
        same(ys["n"], xs["n"].sum(axis=1))
    jc, jys = qb.jit(lambda c0, xs: qb.scan(step, c0, xs, operands=(1.25,)))(qb.array(0.5), xs)
    assert jc.item() == c.item() and jys["c"].tolist() == cs
    rc, rys = qb.scan(step, 0.5, xs, operands=(1.25,), reverse=True)
    ref, back = 0.5, []
    for a in xs["a"][::-1]:
        ref = (ref * a + 1.0) * 1.25
        back.append(ref)
    assert rc.item() == ref and rys["c"].tolist() == back[::-1]
    # The indexed form is unchanged; bad forms are typed errors.
    c2, ys2 = qb.scan(lambda c, i: (c + i, c), 0.0, length=3)
    assert c2.item() == 3.0 and ys2.tolist() == [0.0, 0.0, 1.0]
    with pytest.raises(TypeError, match="length"):
        qb.scan(lambda c, i: (c, c), 0.0)
    with pytest.raises(ValueError, match="leading extent"):
        qb.scan(lambda c, x: (c, x), 0.0, (np.zeros(2), np.zeros(3)))


def test_bad_arguments_are_typed_errors_naming_the_parameter():
    x = qb.array([1.0, 2.0, 3.0])
    for k in (0, -1, 4):
        with pytest.raises(ValueError, match="top_k: k must be between 1 and"):
            qb.top_k(x, k)
    with pytest.raises(TypeError, match="num_classes"):
        qb.one_hot(qb.array([1]), "3")
    with pytest.raises(ValueError, match="num_classes"):
        qb.one_hot(qb.array([1]), 0)
    with pytest.raises(TypeError, match="minlength"):
        qb.bincount(qb.array([1]), minlength=1.5)
    with pytest.raises(ValueError, match="rank-1"):
        qb.searchsorted(qb.zeros((2, 2)), x)
    with pytest.raises(ValueError, match="rank >= 1"):
        qb.sort(qb.array(1.0))
    with pytest.raises(ValueError, match="bool"):
        qb.cumprod(qb.array([True]))
