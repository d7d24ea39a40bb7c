"""The names a JAX/NumPy port reaches for first, each against NumPy or a closed form, eagerly
and traced: `concatenate`, `pi`/`e`/`inf`/`nan`/`newaxis`, `isclose`/`allclose`,
`jacfwd`/`jacrev`, `linalg.eigvalsh`, `cho_factor`/`cho_solve`, `lu_factor`/`lu_solve`,
`linalg.expm` (with derivatives), and the aliases the spec names."""

import itertools
import math

import numpy as np
import pytest

import quabla as qb

RNG = np.random.default_rng(7)


def test_concatenate_and_constants():
    a, b = RNG.standard_normal((2, 3)), RNG.standard_normal((1, 3))
    np.testing.assert_array_equal(np.asarray(qb.concatenate([qb.asarray(a), qb.asarray(b)])), np.concatenate([a, b]))
    c = RNG.standard_normal((2, 2))
    np.testing.assert_array_equal(
        np.asarray(qb.jit(lambda x, y: qb.concatenate((x, y), axis=1))(qb.asarray(a), qb.asarray(c))),
        np.concatenate([a, c], axis=1),
    )
    assert (qb.pi, qb.e) == (math.pi, math.e)
    assert math.isinf(qb.inf) and math.isnan(qb.nan) and qb.newaxis is None
    # Constants are weak: a float32 program stays float32.
    x32 = qb.ones((2,), dtype=qb.float32)
    assert (x32 * qb.pi).dtype == qb.float32
    assert qb.ones((3,))[qb.newaxis].shape == [1, 3]
    assert qb.remainder is qb.mod and qb.remat is qb.checkpoint


def test_isclose_and_allclose_follow_numpy():
    values = [0.0, -0.0, 1.0, 1.0 + 1e-6, 1.0 + 1e-4, -1.0, 1e-9, 2e-9, math.inf, -math.inf, math.nan, 1e300]
    pairs = list(itertools.product(values, repeat=2))
    a = np.array([p[0] for p in pairs])
    b = np.array([p[1] for p in pairs])
    for rtol, atol, equal_nan in itertools.product((1e-5, 0.0, 1e-3), (1e-8, 0.0), (False, True)):
        want = np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
        kwargs = dict(rtol=rtol, atol=atol, equal_nan=equal_nan)
        got = qb.isclose(qb.asarray(a), qb.asarray(b), **kwargs)
        assert got.dtype == qb.bool_
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=str(kwargs))
        traced = qb.jit(lambda x, y, k=tuple(kwargs.items()): qb.isclose(x, y, **dict(k)))(qb.asarray(a), qb.asarray(b))
        np.testing.assert_array_equal(np.asarray(traced), want)
        for i in range(0, len(a), 12):
            sl = slice(i, i + 12)
            all_want = np.allclose(a[sl], b[sl], rtol=rtol, atol=atol, equal_nan=equal_nan)
            all_got = qb.allclose(qb.asarray(a[sl]), qb.asarray(b[sl]), **kwargs)
            assert all_got.shape == [] and bool(all_got) == all_want
    # Broadcasting, scalars on either side, float32.
    m = RNG.standard_normal((3, 4))
    np.testing.assert_array_equal(np.asarray(qb.isclose(qb.asarray(m), 0.5)), np.isclose(m, 0.5))
    np.testing.assert_array_equal(np.asarray(qb.isclose(0.5, qb.asarray(m))), np.isclose(0.5, m))
    m32 = m.astype(np.float32)
    np.testing.assert_array_equal(np.asarray(qb.isclose(qb.asarray(m32), qb.asarray(m32 + np.float32(1e-6)))),
                                  np.isclose(m32, m32 + np.float32(1e-6)))
    assert bool(qb.allclose(qb.asarray(m), qb.asarray(m)))


def test_jacfwd_and_jacrev_agree_with_jacobian():
    def f(x, y):
        return {"a": qb.sin(x) * y[0], "b": qb.stack([qb.sum(x ** 2), y[1] * x[0]])}

    x, y = qb.asarray(RNG.standard_normal(3)), qb.asarray(RNG.standard_normal(2))
    for argnums in (0, 1, (0, 1)):
        want = qb.jacobian(f, argnums=argnums)(x, y)
        for jac in (qb.jacfwd, qb.jacrev):
            got = jac(f, argnums=argnums)(x, y)
            for w, g in zip(qb.tree.leaves(want), qb.tree.leaves(got)):
                np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-14, atol=1e-15)
            jitted = qb.jit(jac(f, argnums=argnums))(x, y)
            for w, g in zip(qb.tree.leaves(want), qb.tree.leaves(jitted)):
                np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-14, atol=1e-15)
    # Hessian as jacfwd(jacrev(f)), as JAX writes it.
    h = qb.jacfwd(qb.jacrev(lambda v: qb.sum(v ** 3)))(x)
    np.testing.assert_allclose(np.asarray(h), np.diag(6 * np.asarray(x)), rtol=1e-14)

    @qb.custom_vjp
    def g(v):
        return qb.sin(v)

    g.defvjp(lambda v: (qb.sin(v), v), lambda v, ct: (qb.cos(v) * ct,))
    np.testing.assert_allclose(np.asarray(qb.jacrev(g)(x)), np.diag(np.cos(np.asarray(x))), rtol=1e-15)
    with pytest.raises(qb.UnsupportedOperationError, match="forward-mode differentiation"):
        qb.jacfwd(g)(x)


def spd(n, batch=()):
    m = RNG.standard_normal(batch + (n, n))
    return m @ np.swapaxes(m, -1, -2) + n * np.eye(n)


def test_eigvalsh_cho_factor_lu_factor_against_numpy():
    a = spd(4)
    np.testing.assert_allclose(np.asarray(qb.linalg.eigvalsh(qb.asarray(a))), np.linalg.eigvalsh(a), rtol=1e-13)
    b = RNG.standard_normal(4)
    bm = RNG.standard_normal((4, 2))
    for rhs in (b, bm):
        want = np.linalg.solve(a, rhs)
        for lower in (False, True):
            c_and_lower = qb.linalg.cho_factor(qb.asarray(a), lower=lower)
            assert c_and_lower[1] is lower
            c = np.asarray(c_and_lower[0])
            np.testing.assert_allclose(c @ c.T if lower else c.T @ c, a, rtol=1e-13)
            np.testing.assert_allclose(np.asarray(qb.linalg.cho_solve(c_and_lower, qb.asarray(rhs))), want, rtol=1e-12)
            np.testing.assert_allclose(
                np.asarray(qb.linalg.cho_solve(c_and_lower[0], qb.asarray(rhs), lower=lower)), want, rtol=1e-12
            )
        g = RNG.standard_normal((4, 4))
        lu, piv = qb.linalg.lu_factor(qb.asarray(g))
        for trans, mat in ((0, g), (1, g.T), ("N", g), ("T", g.T)):
            x = qb.linalg.lu_solve((lu, piv), qb.asarray(rhs), trans=trans)
            np.testing.assert_allclose(np.asarray(x), np.linalg.solve(mat, rhs), rtol=1e-11)
        # P g = L U with the interchanges applied in order.
        lu_np, p = np.asarray(lu), np.asarray(piv).astype(int)
        perm = g.copy()
        for k, pk in enumerate(p):
            perm[[k, pk]] = perm[[pk, k]]
        low = np.tril(lu_np, -1) + np.eye(4)
        np.testing.assert_allclose(low @ np.triu(lu_np), perm, rtol=1e-12, atol=1e-14)
    with pytest.raises(TypeError, match="the pair \\(lu, piv\\) that lu_factor returned"):
        qb.linalg.lu_solve(qb.asarray(a), qb.asarray(b))
    with pytest.raises(ValueError, match="trans must be 0, 1"):
        qb.linalg.lu_solve(qb.linalg.lu_factor(qb.asarray(a)), qb.asarray(b), trans=2)


def test_expm_values_and_derivatives():
    for theta in (0.3, 2.0, 25.0):
        gen = qb.asarray(np.array([[0.0, -theta], [theta, 0.0]]))
        want = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
        for fn in (qb.linalg.expm, qb.jit(qb.linalg.expm)):
            np.testing.assert_allclose(np.asarray(fn(gen)), want, atol=1e-13 * theta)
    d = RNG.standard_normal(3)
    np.testing.assert_allclose(np.asarray(qb.linalg.expm(qb.asarray(np.diag(d)))), np.diag(np.exp(d)), rtol=1e-14)
    # d/dθ trace(expm(θ G)) = -2 sin θ, and the second derivative -2 cos θ.
    g = qb.asarray(np.array([[0.0, -1.0], [1.0, 0.0]]))
    tr = lambda t: qb.trace(qb.linalg.expm(t * g))  # noqa: E731
    t = qb.array(0.7)
    np.testing.assert_allclose(qb.grad(tr)(t).tolist(), -2 * np.sin(0.7), rtol=1e-13)
    np.testing.assert_allclose(qb.grad(qb.grad(tr))(t).tolist(), -2 * np.cos(0.7), rtol=1e-12)
    batch = qb.asarray(RNG.standard_normal((3, 2, 2)))
    np.testing.assert_array_equal(np.asarray(qb.vmap(qb.linalg.expm)(batch)), np.asarray(qb.linalg.expm(batch)))


def test_cholesky_of_input_that_is_not_positive_definite_is_nan_everywhere():
    # docs/linalg.md: NaN, never an error, eagerly and compiled alike; a batch keeps its good
    # matrices; check_nans locates it.
    good = np.array([[4.0, 2.0], [2.0, 3.0]])
    for bad in (np.array([[0.0]]), -np.eye(2), np.array([[1.0, 1.0], [1.0, 1.0]]), np.array([[1.0, 2.0], [2.0, 1.0]])):
        for fn in (qb.linalg.cholesky, qb.jit(qb.linalg.cholesky)):
            assert np.all(np.isnan(np.asarray(fn(qb.asarray(bad))))), bad
    batch = qb.asarray(np.stack([good, -np.eye(2)]))
    out = np.asarray(qb.vmap(qb.linalg.cholesky)(batch))
    np.testing.assert_allclose(out[0], np.linalg.cholesky(good), rtol=1e-15)
    assert np.all(np.isnan(out[1]))
    # Jitter makes a semi-definite matrix usable.
    assert np.all(np.isfinite(np.asarray(qb.linalg.cholesky(qb.asarray(np.ones((2, 2)) + 1e-9 * np.eye(2))))))
    with pytest.raises(FloatingPointError, match="= cholesky\\("):
        qb.jit(lambda m: qb.sum(qb.linalg.cholesky(m)), check_nans=True)(qb.asarray(-np.eye(2)))
