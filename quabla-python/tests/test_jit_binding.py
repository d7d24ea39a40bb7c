"""How `jit` binds a call (transforms.md §6, §15): static arguments by position, by name and
keyword-only, with defaults; the same binding for `lower(...)` and for the `compile()`d
function, which accepts exactly the lowered call (TF10 otherwise)."""

import pytest

import quabla as qb

X = qb.array([1.0, 2.0])


def test_lower_compile_call_with_static_arguments():
    def scale(p, s):
        return p * s

    def scale_kw(p, *, s=3.0):
        return p * s

    cases = [
        (qb.jit(scale, static_argnums=1), (X, 2), {}),
        (qb.jit(scale, static_argnums=1), (X,), {"s": 2}),
        (qb.jit(scale, static_argnames="s"), (X, 2), {}),
        (qb.jit(scale, static_argnames="s"), (X,), {"s": 2}),
        (qb.jit(scale_kw, static_argnames="s"), (X,), {"s": 2}),
        (qb.jit(scale_kw, static_argnames=("s",)), (X,), {}),
    ]
    for j, args, kwargs in cases:
        want = j(*args, **kwargs).tolist()
        compiled = j.lower(*args, **kwargs).compile()
        assert compiled(*args, **kwargs).tolist() == want, (args, kwargs)
        # Another static value is another signature: TF10.
        with pytest.raises(ValueError, match="compiled function expects"):
            if kwargs or not args[1:]:
                compiled(X, s=5)
            else:
                compiled(X, 5)
        with pytest.raises(ValueError, match="compiled function expects"):
            compiled(qb.ones((3,)), *args[1:], **kwargs)
    assert cases[0][0](X, 2).tolist() == [2.0, 4.0]
    assert cases[5][0](X).tolist() == [3.0, 6.0]


def test_keyword_only_static_arguments():
    traces = []

    def f(x, *, scale, shift=0.0):
        traces.append((scale, shift))
        return x * scale + shift

    j = qb.jit(f, static_argnames=("scale", "shift"))
    assert j(X, scale=2.0).tolist() == [2.0, 4.0]
    assert j(X, scale=2.0, shift=1.0).tolist() == [3.0, 5.0]
    assert j(X, shift=0.0, scale=2.0).tolist() == [2.0, 4.0]
    assert j(X, scale=2.0).tolist() == [2.0, 4.0]
    assert traces == [(2.0, 0.0), (2.0, 1.0)], traces
    # A static keyword-only value is keyed by type like any static value.
    assert j(X, scale=2).tolist() == [2.0, 4.0] and len(traces) == 3
    # Keyword arguments must be static (TY5); missing ones are Python's TypeError.
    with pytest.raises(TypeError, match="keyword argument shift must be static"):
        qb.jit(f, static_argnames="scale")(X, scale=2.0, shift=qb.array(1.0))
    with pytest.raises(TypeError, match="scale"):
        j(X)
    with pytest.raises(TypeError, match="static keyword arguments must be hashable"):
        j(X, scale=[1.0])

    # **kwargs collects static keywords too.
    def g(x, **options):
        return x * options["scale"]

    assert qb.jit(g, static_argnames="scale")(X, scale=3.0).tolist() == [3.0, 6.0]
    # Inside another transform.
    assert qb.grad(lambda x: qb.sum(j(x, scale=2.0)))(X).tolist() == [2.0, 2.0]
    # Plan inputs keep the names of the positional parameters.
    assert "x" in j.lower(X, scale=2.0).program.input_names


def test_precision_must_be_a_string_or_none():
    for bad in (64, 32.0, qb.float64):
        with pytest.raises(ValueError, match=r'^precision must be None, "float32" or "float64", got'):
            qb.jit(lambda x: x, precision=bad)(X)
    with pytest.raises(ValueError, match=r'precision must be None, "float32" or "float64", got \'float16\''):
        qb.jit(lambda x: x, precision="float16")(X)
