"""Solvers and custom rules inside control-flow region bodies (errors.md TF5): refused with the
same ValueError eagerly and under ``jit``, for every solver and rule and every region kind; an
unrolled loop is plain code in both forms and accepts them."""

import pytest

import quabla as qb


def _custom_vjp(x):
    f = qb.custom_vjp(qb.sin)
    f.defvjp(lambda x: (qb.sin(x), x), lambda x, g: (g * qb.cos(x),))
    return f(x)


def _custom_jvp(x):
    f = qb.custom_jvp(qb.sin)
    f.defjvp(lambda p, t: (qb.sin(p[0]), t[0] * qb.cos(p[0])))
    return f(x)


CALLS = {
    "cg": lambda x: qb.linalg.cg(lambda v: 2.0 * v, x),
    "gmres": lambda x: qb.linalg.gmres(lambda v: 2.0 * v, x),
    "newton": lambda x: qb.newton(lambda v, a: 2.0 * v - a, x, args=(x,)),
    "custom_vjp": _custom_vjp,
    "custom_jvp": _custom_jvp,
    "checkpoint": lambda x: qb.checkpoint(qb.sin)(x),
}

REGIONS = {
    "cond true branch": ("cond", lambda inner, x: qb.cond(True, inner, lambda c: c, x)),
    "cond false branch": ("cond", lambda inner, x: qb.cond(False, lambda c: c, inner, x)),
    "fori_loop": ("fori_loop", lambda inner, x: qb.fori_loop(0, 2, lambda i, c: inner(c), x)),
    "scan": ("scan", lambda inner, x: qb.scan(lambda c, i: (inner(c), c), x, length=2)[0]),
    "while_loop body": (
        "while_loop",
        lambda inner, x: qb.while_loop(lambda c: qb.sum(c) < 1e9, inner, x, max_trips=2),
    ),
    "while_loop cond": (
        "while_loop",
        lambda inner, x: qb.while_loop(lambda c: qb.sum(inner(c)) < 1e9, lambda c: 2.0 * c, x,
                                       max_trips=2),
    ),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("region", sorted(REGIONS))
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_solvers_and_custom_rules_in_region_bodies_are_value_errors(call, region, mode):
    primitive, build = REGIONS[region]
    inner = CALLS[call]
    x = qb.asarray([1.0, 2.0])
    f = (lambda x: build(inner, x)) if mode == "eager" else qb.jit(lambda x: build(inner, x))
    wrapper = "custom_vjp" if call in ("cg", "gmres", "newton") else call
    with pytest.raises(ValueError, match=f"{wrapper} functions and solvers cannot be called "
                                         f"inside a {primitive} body"):
        f(x)


@pytest.mark.parametrize("call", sorted(CALLS))
def test_unrolled_loops_accept_them_in_both_forms(call):
    inner = CALLS[call]

    def f(x):
        c = qb.fori_loop(0, 2, lambda i, c: inner(c), x, unroll=True)
        return qb.scan(lambda c, i: (inner(c), c), c, length=1, unroll=True)[0]

    x = qb.asarray([1.0, 2.0])
    eager, traced = f(x).tolist(), qb.jit(f)(x).tolist()
    assert all(abs(a - b) <= 1e-6 * max(1.0, abs(a)) for a, b in zip(eager, traced))
