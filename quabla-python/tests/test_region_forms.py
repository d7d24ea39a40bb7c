"""Control-flow regions as a port writes them (api.md §11, transforms.md §10 as amended in
docs/loops.md): a loop carry is one array or, as in JAX, a pytree of arrays (a list of numbers
stays an array literal); eager `cond` calls each branch function once; `fori_loop` bounds and
the empty loop."""

import numpy as np
import pytest

import quabla as qb

X = qb.array([1.0, 2.0])
PYTREES = {
    "tuple": (X, X),
    "list": [X, X],
    "dict": {"a": X},
    "nested": ((X,), X),
}


def runners(carry_fn, y_fn=lambda c: c):
    """Each loop primitive with an initial carry `init` and a body returning `carry_fn(c)`."""
    return {
        "fori_loop": lambda init: qb.fori_loop(0, 2, lambda i, c: carry_fn(c), init),
        "scan": lambda init: qb.scan(lambda c, i: (carry_fn(c), y_fn(c)), init, length=2),
        "while_loop": lambda init: qb.while_loop(
            lambda c: qb.sum(qb.tree.leaves(c)[0]) < 10.0, lambda c: carry_fn(c), init, max_trips=5
        ),
    }


@pytest.mark.parametrize("staged", [False, True])
def test_pytree_carries_work_as_in_jax(staged):
    def run(f, *args):
        return qb.jit(f)(*args) if staged else f(*args)

    double = lambda c: qb.tree.map(lambda v: v * 2.0, c)
    for name, init in PYTREES.items():
        for primitive, loop in runners(double).items():
            out = run(lambda v, loop=loop, init=init: loop(qb.tree.map(lambda _: v, init)), X)
            if primitive == "scan":
                out = out[0]
            # The structure comes back; every leaf doubled twice (the while loop stops when
            # the first leaf sums to 10 or more: [4, 8] after two trips).
            assert qb.tree.structure(out) == qb.tree.structure(init), (name, primitive)
            for leaf in qb.tree.leaves(out):
                assert leaf.tolist() == [4.0, 8.0], (name, primitive)
    # A scan's y may be a pytree too.
    carry, ys = run(lambda v: qb.scan(lambda c, i: (c + 1.0, {"y": c, "i": i}), v, length=2), X)
    assert ys["y"].tolist() == [[1.0, 2.0], [2.0, 3.0]]
    assert ys["i"].tolist() == [0, 1]
    # A body returning another structure than its carry: SH13 (ValueError), or the packing
    # advice for a one-array carry.
    for primitive, loop in runners(lambda c: (c, c)).items():
        with pytest.raises(TypeError, match=f"{primitive} carry must be one array, got tuple"):
            run(lambda v, loop=loop: loop(v), X)
    with pytest.raises(ValueError, match="changed the carry's structure from"):
        run(lambda v: qb.fori_loop(0, 2, lambda i, c: (c[0],), (v, v)), X)
    with pytest.raises(TypeError, match="cond branch result must be one array, got tuple"):
        run(lambda v: qb.cond(True, lambda u: (u, u), lambda u: (u, u), v), X)
    # Array literals are still arrays: a list of numbers, a nested list, a Python number.
    assert qb.fori_loop(0, 2, lambda i, c: c * 2.0, [1.0, 2.0]).tolist() == [4.0, 8.0]
    assert qb.fori_loop(0, 1, lambda i, c: c + 1.0, [[1.0], [2.0]]).tolist() == [[2.0], [3.0]]
    assert qb.fori_loop(0, 3, lambda i, c: c + 1.0, 0.0).tolist() == 3.0
    carry, ys = qb.scan(lambda c, i: (c + 1.0, c), 0.0, length=3)
    assert (carry.tolist(), ys.tolist()) == (3.0, [0.0, 1.0, 2.0])


def test_eager_cond_calls_each_branch_function_once():
    for pred in (True, False, qb.array(True), qb.array(0.0), qb.array(2.0)):
        calls = []

        def branch(name, scale):
            def f(v):
                calls.append((name, type(v).__name__))
                return v * scale
            return f

        out = qb.cond(pred, branch("t", 2.0), branch("f", 3.0), X)
        taken = "t" if bool(np.asarray(pred)) else "f"
        other = "f" if taken == "t" else "t"
        assert out.tolist() == ([2.0, 4.0] if taken == "t" else [3.0, 6.0])
        # The selected branch runs on the operands; the other is traced once for the checks.
        assert sorted(calls) == sorted([(taken, "Tensor"), (other, "TraceTensor")]), (pred, calls)
        # Under a transform each branch is traced once.
        calls.clear()
        qb.jit(lambda v, p=pred: qb.cond(p, branch("t", 2.0), branch("f", 3.0), v))(X)
        assert sorted(calls) == [("f", "TraceTensor"), ("t", "TraceTensor")]
    # The eager checks are those of a traced cond: one shape, a weak branch adopts the dtype.
    x32 = qb.ones((2,), dtype=qb.float32)
    for pred in (True, False):
        out = qb.cond(pred, lambda v: v, lambda v: 0.0 * qb.ones((2,)).astype(qb.float32), x32)
        assert out.dtype == qb.float32
        weak = qb.cond(pred, lambda v: v, lambda v: 0.5, qb.ones(()).astype(qb.float32))
        assert weak.dtype == qb.float32
        with pytest.raises(ValueError, match="cond branches return different shapes"):
            qb.cond(pred, lambda v: v, lambda v: qb.ones((3,)), X)


def test_fori_loop_bounds_and_the_empty_loop():
    calls = []

    def body(i, c):
        calls.append(i)
        return c + 1.0

    for lower, upper in ((2, 2), (3, 2), (0, 0)):
        assert qb.fori_loop(lower, upper, body, X) is X
        assert qb.jit(lambda v, lo=lower, hi=upper: qb.fori_loop(lo, hi, body, v))(X).tolist() == [1.0, 2.0]
    assert calls == []
    assert qb.fori_loop(np.int64(0), np.int32(2), body, X).tolist() == [3.0, 4.0]
    # Bounds of any sign, as range(lower, upper).
    assert qb.fori_loop(0, -3, body, X) is X
    assert qb.fori_loop(-2, 1, lambda i, c: c + i, X).tolist() == [-2.0, -1.0]
    for bad, error, message in (
        (2**70, ValueError, "lower must be an int from -9223372036854775808 to 9223372036854775807, got"),
        (True, TypeError, "lower must be an int, got bool"),
        (1.0, TypeError, "lower must be an int, got float"),
    ):
        with pytest.raises(error, match=message):
            qb.fori_loop(bad, 2, body, X)
    with pytest.raises(qb.TracerError, match="needs a concrete value"):
        qb.jit(lambda n: qb.fori_loop(0, n, body, X))(qb.array(2.0))
