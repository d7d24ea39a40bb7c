"""Derivatives of `interp` (numerics.md §5) with respect to `x`, `xp` and `fp` at every kind of
query point: inside an interval, at a knot, at the ends, outside on either side, far outside,
infinite and NaN. A query point whose value comes from one branch (an interval, `left` or
`right`) puts nothing from the others into any derivative: no NaN from `0 * inf`."""

import numpy as np

import quabla as qb

XP = np.array([0.0, 1.0, 2.5, 4.0])
FP = np.array([1.0, -2.0, 0.5, 3.0])
QUERIES = [0.3, 1.0, 2.0, 0.0, 4.0, -1.0, 5.0, -1e300, 1e300, np.inf, -np.inf, np.nan]


def interp_np(x, xp, fp):
    return np.interp(x, xp, fp)


def fd(f, v, i, h=1e-6):
    e = np.zeros_like(v)
    e[i] = h
    return (f(v + e) - f(v - e)) / (2 * h)


def test_interp_derivatives_at_every_kind_of_query_point():
    for q in QUERIES:
        x = np.array([q])
        jx = np.asarray(qb.jacobian(lambda x: qb.interp(x, qb.asarray(XP), qb.asarray(FP)))(qb.asarray(x)))
        jxp = np.asarray(qb.jacobian(lambda xp: qb.interp(qb.asarray(x), xp, qb.asarray(FP)))(qb.asarray(XP)))
        jfp = np.asarray(qb.jacobian(lambda fp: qb.interp(qb.asarray(x), qb.asarray(XP), fp))(qb.asarray(FP)))
        if np.isnan(q):
            # NaN propagates into the value; no finite answer is defined.
            continue
        assert np.all(np.isfinite(jxp)) and np.all(np.isfinite(jfp)), (q, jxp, jfp)
        if not np.isfinite(q) or abs(q) > 10:
            # Outside on either side: the value is fp[0] or fp[-1], the only derivative.
            want_fp = np.zeros(4)
            want_fp[0 if q < 0 else -1] = 1.0
            np.testing.assert_array_equal(jfp[0], want_fp)
            np.testing.assert_array_equal(jxp[0], np.zeros(4))
            np.testing.assert_array_equal(jx[0], [0.0])
            continue
        # Inside (away from knots for finite differences in xp), against float64 differences.
        if q not in XP:
            for i in range(4):
                np.testing.assert_allclose(jxp[0, i], fd(lambda v: interp_np(x, v, FP), XP, i)[0], atol=1e-7)
        for i in range(4):
            np.testing.assert_allclose(jfp[0, i], fd(lambda v: interp_np(x, XP, v), FP, i)[0], atol=1e-7)


def test_interp_gradients_of_a_mixed_batch_are_the_sum_of_the_clean_parts():
    # The reported case: one infinite query point made every gradient entry NaN.
    finite = np.array([0.3, 1.7, 3.9])
    mixed = np.concatenate([finite, [np.inf, -np.inf]])
    for wrt in ("xp", "fp"):
        def total(v, x, wrt=wrt):
            xp = v if wrt == "xp" else qb.asarray(XP)
            fp = v if wrt == "fp" else qb.asarray(FP)
            return qb.sum(qb.interp(qb.asarray(x), xp, fp))

        start = qb.asarray(XP if wrt == "xp" else FP)
        g_mixed = np.asarray(qb.grad(lambda v: total(v, mixed))(start))
        g_finite = np.asarray(qb.grad(lambda v: total(v, finite))(start))
        extra = np.zeros(4) if wrt == "xp" else np.array([1.0, 0.0, 0.0, 1.0])
        np.testing.assert_allclose(g_mixed, g_finite + extra, rtol=1e-14)
        # Under jit and with explicit left/right (then fp gets nothing from the outside points).
        g_jit = np.asarray(qb.jit(qb.grad(lambda v: total(v, mixed)))(start))
        np.testing.assert_array_equal(g_jit, g_mixed)
    g = np.asarray(qb.grad(lambda fp: qb.sum(qb.interp(qb.asarray(mixed), qb.asarray(XP), fp, left=0.0, right=0.0)))(qb.asarray(FP)))
    g_finite = np.asarray(qb.grad(lambda fp: qb.sum(qb.interp(qb.asarray(finite), qb.asarray(XP), fp)))(qb.asarray(FP)))
    np.testing.assert_allclose(g, g_finite, rtol=1e-14)
    # Second order stays finite too.
    h = np.asarray(qb.hessian(lambda xp: qb.sum(qb.interp(qb.asarray(mixed), xp, qb.asarray(FP))))(qb.asarray(XP)))
    assert np.all(np.isfinite(h))
