"""Trace-cache keys of Python values (transforms.md §2.1): values Python calls equal but a
function can tell apart (`1`, `True`, `1.0`; `0.0` and `-0.0`) are different keys, and a NaN
hits its own bits. Every pair of the category, in every position a Python value takes a key:
static arguments of `jit` (by position, by name, keyword-only), scalars in traced positions of
`jit`, `vmap` and `grad`, values inside containers, and dataclass meta fields."""

import dataclasses
import itertools
import warnings

import pytest

import quabla as qb

NAN = float("nan")

# One entry per key: the values in each group are the same key, different groups are not.
GROUPS = [
    [1],
    [True],
    [1.0],
    [0],
    [False],
    [0.0],
    [-0.0],
    [NAN, float("nan")],  # two NaN objects with the same bits
    [2.5],
    [(1,)],
    [(1.0,)],
    [(True,)],
    [(0.0,)],
    [(-0.0,)],
    ["1"],
]


def code(n):
    """A number the function computes from its static value that tells the groups apart the
    way the function can: by type and by the value's exact spelling."""
    text = f"{type(n).__name__}:{n!r}"
    if isinstance(n, tuple):
        text += ":" + ",".join(type(i).__name__ for i in n)
    return float(sum(ord(c) * (k + 1) for k, c in enumerate(text)) % 9973)


def fresh_count():
    return {"n": 0}


@pytest.mark.parametrize("mode", ["argnums", "argnames", "kwonly"])
def test_static_arguments_key_by_type_and_bits(mode):
    x = qb.array([1.0, 3.0])
    for first, second in itertools.permutations(range(len(GROUPS)), 2):
        traces = fresh_count()

        def f(v, n):
            traces["n"] += 1
            return v * code(n)

        def g(v, *, n):
            traces["n"] += 1
            return v * code(n)

        if mode == "argnums":
            s = qb.jit(f, static_argnums=1)
            call = lambda n: s(x, n)  # noqa: E731
        elif mode == "argnames":
            s = qb.jit(f, static_argnames="n")
            call = lambda n: s(x, n=n)  # noqa: E731
        else:
            s = qb.jit(g, static_argnames="n")
            call = lambda n: s(x, n=n)  # noqa: E731
        a, b = GROUPS[first][0], GROUPS[second][0]
        assert call(a).tolist() == [code(a), 3 * code(a)]
        assert call(b).tolist() == [code(b), 3 * code(b)], (a, b)
        assert traces["n"] == 2, (a, b)
    # Values of one group share the entry.
    for group in GROUPS:
        traces = fresh_count()

        def h(v, n):
            traces["n"] += 1
            return v * code(n)

        s = qb.jit(h, static_argnums=1)
        for n in group * 2:
            s(x, n)
        assert traces["n"] == 1, group


def test_scalars_in_traced_positions_key_by_type_and_bits():
    # Non-static Python scalars are weak constants of the trace (transforms.md §3): each key
    # traces once, and the pairs that Python calls equal stay apart.
    x = qb.array([1.0, 3.0])
    scalars = [1, True, 1.0, 0, False, 0.0, -0.0, NAN, 2.5]
    for first, second in itertools.permutations(range(len(scalars)), 2):
        a, b = scalars[first], scalars[second]
        for transform in ("jit", "vmap", "grad"):
            traces = fresh_count()

            def f(v, n):
                traces["n"] += 1
                return qb.sum(v) * code(n)

            if transform == "jit":
                t = qb.jit(f)
            elif transform == "vmap":
                t = qb.vmap(f, in_axes=(0, None))
            else:
                t = qb.grad(f)
            for n in (a, b):
                want = {
                    "jit": 4.0 * code(n),
                    "vmap": [code(n), 3.0 * code(n)],
                    "grad": [code(n), code(n)],
                }[transform]
                assert t(x, n).tolist() == want, (transform, a, b)
            assert traces["n"] == 2, (transform, a, b)


def test_values_inside_containers_and_meta_fields_key_by_type():
    @dataclasses.dataclass
    class Layer:
        w: object
        scale: object

    qb.tree.register_dataclass(Layer, data_fields=["w"], meta_fields=["scale"])
    x = qb.array([1.0, 3.0])
    values = [1, True, 1.0, 0.0, -0.0]
    for a, b in itertools.permutations(values, 2):
        traces = fresh_count()

        def f(layer):
            traces["n"] += 1
            return layer.w * code(layer.scale)

        j = qb.jit(f)
        assert j(Layer(x, a)).tolist() == [code(a), 3 * code(a)]
        assert j(Layer(x, b)).tolist() == [code(b), 3 * code(b)]
        traces_meta = traces["n"]
        assert traces_meta == 2, (a, b)

        # A static tuple holding the value.
        k = qb.jit(lambda v, t: v * code(t[0]), static_argnums=1)
        assert k(x, (a,)).tolist() == [code(a), 3 * code(a)]
        assert k(x, (b,)).tolist() == [code(b), 3 * code(b)]


def test_nan_static_hits_the_cache_without_retrace_warnings():
    s = qb.jit(lambda v, n: v * 2.0, static_argnums=1, max_traces=1)
    x = qb.ones((2,))
    with warnings.catch_warnings():
        warnings.simplefilter("error", qb.RetraceWarning)
        for _ in range(3):
            s(x, float("nan"))
