"""`vmap` axes in every form of transforms.md §9, for `in_axes` and `out_axes`: ints
(negative too), `None`, tuples, lists, dicts, NamedTuples and registered dataclasses, nested,
as prefixes; each against the per-example loop. Invalid specifications raise, never map
silently: `in_axes=None` maps nothing, `out_axes=None` needs an unmapped result."""

import dataclasses
from typing import NamedTuple

import numpy as np
import pytest

import quabla as qb


class P(NamedTuple):
    a: object
    b: object


@dataclasses.dataclass
class D:
    a: object
    b: object
    tag: str = "d"


qb.tree.register_dataclass(D, data_fields=["a", "b"], meta_fields=["tag"])

RNG = np.random.default_rng(3)
A = RNG.standard_normal((4, 3))  # four examples of [3]
B = RNG.standard_normal(3)  # shared


def per_example(fn, mapped, shared, axis=0):
    rows = [fn(np.take(mapped, i, axis=axis), shared) for i in range(mapped.shape[axis])]
    return np.stack(rows)


def f_np(a, b):
    return np.tanh(a) * b + a.sum()


def f_qb(a, b):
    return qb.tanh(a) * b + qb.sum(a)


def test_every_in_axes_form_matches_the_loop():
    want = per_example(f_np, A, B)
    want_t = per_example(f_np, A.T, B, axis=1)  # mapped along axis 1 of A.T
    a, b, at = qb.asarray(A), qb.asarray(B), qb.asarray(A.T)
    cases = [
        # (function of the call's arguments, in_axes, arguments, expected)
        (lambda a, b: f_qb(a, b), (0, None), (a, b), want),
        (lambda a, b: f_qb(a, b), [0, None], (a, b), want),
        (lambda a, b: f_qb(a, b), (1, None), (at, b), want_t),
        (lambda a, b: f_qb(a, b), (-1, None), (at, b), want_t),
        (lambda t: f_qb(t[0], t[1]), ((0, None),), ((a, b),), want),
        (lambda t: f_qb(t[0], t[1]), ([0, None],), ([a, b],), want),
        (lambda d: f_qb(d["a"], d["b"]), ({"a": 0, "b": None},), ({"a": a, "b": b},), want),
        (lambda p: f_qb(p.a, p.b), (P(0, None),), (P(a, b),), want),
        (lambda p: f_qb(p.a, p.b), (P(-1, None),), (P(at, b),), want_t),
        (lambda d: f_qb(d.a, d.b), (D(0, None),), (D(a, b),), want),
        (lambda d: f_qb(d.a, d.b), (D(1, None, "other tag"),), (D(at, b),), want_t),
        # Nested: a NamedTuple inside a dict inside a tuple, with a prefix leaf for a subtree.
        (lambda d: f_qb(d["p"].a, d["p"].b), ({"p": P(0, None)},), ({"p": P(a, b)},), want),
        (lambda d, c: f_qb(d["p"].a, c), ({"p": 0}, None), ({"p": P(a, a)}, b), want),
    ]
    for k, (fn, in_axes, args, expected) in enumerate(cases):
        for wrap in (lambda g: g, qb.jit):
            got = wrap(qb.vmap(fn, in_axes=in_axes))(*args)
            np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-13, err_msg=str(k))


def test_every_out_axes_form_matches_the_loop():
    a = qb.asarray(A)

    def two(v):
        return {"row": qb.sin(v), "col": qb.cos(v)}, P(qb.exp(v), qb.sum(v))

    leaves = (np.sin(A), np.cos(A), np.exp(A), A.sum(axis=1))
    for out_axes, axes in (
        (0, (0, 0, 0, 0)),
        (-1, (1, 1, 1, 0)),
        (({"row": 0, "col": 1}, P(-1, 0)), (0, 1, 1, 0)),
        (({"row": 1, "col": 0}, 0), (1, 0, 0, 0)),
        ((1, P(1, 0)), (1, 1, 1, 0)),
    ):
        (d, p) = qb.vmap(two, out_axes=out_axes)(a)
        for got, want, axis in zip((d["row"], d["col"], p.a, p.b), leaves, axes):
            np.testing.assert_allclose(
                np.asarray(got), np.moveaxis(want, 0, axis), rtol=1e-13, err_msg=str(out_axes)
            )
    with pytest.raises(ValueError, match="out of range"):
        qb.vmap(two, out_axes=1)(a)
    # An unmapped result with out_axes=None comes back unbatched; with an int it is broadcast.
    w = qb.asarray(B)
    out = qb.vmap(lambda v, w: (v * w, w * 2.0), in_axes=(0, None), out_axes=(0, None))(a, w)
    assert out[1].shape == [3]
    out = qb.vmap(lambda v, w: (v * w, w * 2.0), in_axes=(0, None), out_axes=0)(a, w)
    assert out[1].shape == [4, 3]


def test_invalid_axes_raise():
    m = qb.ones((2, 3))
    with pytest.raises(ValueError, match="vmap needs at least one mapped argument"):
        qb.vmap(qb.sum, in_axes=None)(m)
    with pytest.raises(ValueError, match="vmap needs at least one mapped argument"):
        qb.vmap(lambda x, y: x + y, in_axes=(None, None))(m, m)
    with pytest.raises(ValueError, match="out_axes=None requires an unmapped result"):
        qb.vmap(lambda v: v * 2.0, out_axes=None)(m)
    with pytest.raises(ValueError, match="out_axes=None requires an unmapped result"):
        qb.vmap(lambda v: (v, v), out_axes=(0, None))(m)
    with pytest.raises(ValueError, match=r"pytree structures differ: in_axes P\(a=0, b=None\) vs"):
        qb.vmap(lambda p: p.a, in_axes=(P(0, None, ),))({"a": m, "b": m})
    with pytest.raises(ValueError, match="pytree structures differ"):
        qb.vmap(lambda d: d.a, in_axes=(D(0, None),))(P(m, m))
    with pytest.raises(ValueError, match="inconsistent sizes"):
        qb.vmap(lambda x, y: x + y)(m, qb.ones((3, 3)))
    with pytest.raises(ValueError, match="must have in_axes None"):
        qb.vmap(lambda x, s: x * s)(m, 2.0)
    with pytest.raises(TypeError, match="in_axes and out_axes take ints, None"):
        qb.vmap(lambda x: x, in_axes="0")(m)
    with pytest.raises(ValueError, match="out of range"):
        qb.vmap(lambda x: x, in_axes=2)(m)
