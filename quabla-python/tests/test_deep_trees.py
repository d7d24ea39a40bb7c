"""Deep pytrees: every API that walks a user's structure accepts trees nested up to the one
depth limit (``MAX_DEPTH`` = 128 containers, the file format's) and refuses deeper ones with
``ValueError``, from 10^2 to 10^6 levels, eagerly and inside each transform. The sweep runs in
a child interpreter, so a regression (a stack overflow kills the process) fails this test
instead of the test run."""

import subprocess
import sys
import textwrap

import pytest

import quabla as qb

MAX_DEPTH = 128

SWEEP = textwrap.dedent(
    r'''
    import dataclasses, io, sys
    import quabla as qb

    def nest(depth, leaf):
        v = leaf
        for level in range(depth):
            v = [[v], (None, v), {"k": v}][level % 3]
        return v

    def leaf_of(v):
        while not isinstance(v, qb.Tensor):
            v = v["k"] if isinstance(v, dict) else v[-1]
        return v

    def loss(v):
        return qb.sum(qb.sin(leaf_of(v)))

    @qb.tree.register_dataclass
    @dataclasses.dataclass
    class Link:
        next: object
        x: object

    def chain(depth):
        link = Link(None, qb.ones((2,)))
        for _ in range(depth - 1):
            link = Link(link, None)
        return link

    x = qb.asarray([1.0, 2.0])

    def sgd(v):
        opt = qb.optim.SGD(0.1)
        opt.update(v, v, opt.init(v))

    def custom_vjp(v):
        f = qb.custom_vjp(loss)
        f.defvjp(lambda v: (loss(v), leaf_of(v)), lambda r, g: (None,))
        return f(v)

    CASES = {
        # Arguments.
        "jit": lambda v, d: qb.jit(lambda v: v)(v),
        "jit lower": lambda v, d: qb.jit(loss).lower(v),
        "grad": lambda v, d: qb.grad(loss)(v),
        "value_and_grad": lambda v, d: qb.value_and_grad(loss)(v),
        "vmap": lambda v, d: qb.vmap(lambda v: qb.sin(leaf_of(v)))(v),
        "jvp": lambda v, d: qb.jvp(loss, (v,), (v,)),
        "vjp": lambda v, d: qb.vjp(loss, v),
        "jacobian": lambda v, d: qb.jacobian(loss)(v),
        "checkpoint": lambda v, d: qb.grad(qb.checkpoint(loss))(v),
        "custom_vjp": lambda v, d: custom_vjp(v),
        "tree.flatten": lambda v, d: qb.tree.flatten(v),
        "tree.leaves": lambda v, d: qb.tree.leaves(v),
        "tree.structure": lambda v, d: repr(qb.tree.structure(v)),
        "tree.map": lambda v, d: qb.tree.map(lambda a, b: a, v, v),
        "tree.flatten_with_path": lambda v, d: qb.tree.flatten_with_path(v),
        "save": lambda v, d: qb.save(io.BytesIO(), v),
        "optimizer": lambda v, d: sgd(v),
        "asarray of nested lists": lambda v, d: qb.asarray(
            __import__("functools").reduce(lambda a, _: [a], range(d), 1.0)),
        "registered dataclass": lambda v, d: qb.jit(lambda c: 0.0)(chain((d + 1) // 2)),
        # Built inside a transform, from its tracer.
        "inside jit": lambda v, d: qb.jit(lambda x: qb.jit(loss)(nest(d, x)))(x),
        "inside grad": lambda v, d: qb.grad(lambda x: qb.jit(loss)(nest(d, x)))(x),
        "inside vmap": lambda v, d: qb.vmap(lambda x: leaf_of(qb.tree.map(qb.sin, nest(d, x))))(x),
        "returned by a jitted function": lambda v, d: qb.jit(lambda x: nest(d, x))(x),
    }

    for depth in map(int, sys.argv[1:]):
        v = nest(depth, x)
        for name, case in CASES.items():
            try:
                case(v, depth)
                outcome = "ok"
            except ValueError as e:
                outcome = "ValueError " + str(e).splitlines()[0]
            except Exception as e:
                outcome = "other " + type(e).__name__ + " " + str(e)
            print(f"{depth}|{name}|{outcome}", flush=True)
    # A list that contains itself is infinitely deep.
    cycle = []
    cycle.append(cycle)
    for name, f in [("jit", qb.jit(lambda v: 0.0)), ("tree.flatten", qb.tree.flatten),
                    ("save", lambda v: qb.save(io.BytesIO(), v))]:
        try:
            f(cycle)
            print(f"cycle|{name}|ok")
        except ValueError as e:
            print(f"cycle|{name}|ValueError " + str(e))
    print("done")
    '''
)


def test_deep_trees_are_refused_at_every_depth_by_every_api():
    depths = [100, 1_000, 10_000, 100_000, 1_000_000]
    out = subprocess.run(
        [sys.executable, "-c", SWEEP, *map(str, depths)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, f"the child died ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    lines = out.stdout.splitlines()
    assert lines[-1] == "done", out.stdout + out.stderr
    results = [line.split("|", 2) for line in lines[:-1]]
    by_depth = {}
    for depth, name, outcome in results:
        by_depth.setdefault(depth, []).append((name, outcome))
    assert len(by_depth["100"]) == 23
    for name, outcome in by_depth["100"]:
        assert outcome == "ok", (name, outcome)
    for depth in ["1000", "10000", "100000", "1000000", "cycle"]:
        for name, outcome in by_depth[depth]:
            assert outcome.startswith("ValueError"), (depth, name, outcome)
            assert f"more than {MAX_DEPTH}" in outcome, (depth, name, outcome)


def nest_lists(depth, leaf):
    v = leaf
    for _ in range(depth):
        v = [v]
    return v


def test_the_limit_is_exactly_128_containers():
    import io

    deepest, deeper = nest_lists(MAX_DEPTH, 1.0), nest_lists(MAX_DEPTH + 1, 1.0)
    # The tree functions and save count from the tree's root.
    assert len(qb.tree.leaves(deepest)) == 1
    buf = io.BytesIO()
    qb.save(buf, deepest)
    buf.seek(0)
    assert qb.tree.structure(qb.load(buf)) == qb.tree.structure(deepest)
    for f in (qb.tree.leaves, lambda t: qb.save(io.BytesIO(), t)):
        with pytest.raises(ValueError, match="pytree nests containers more than 128 deep"):
            f(deeper)
    # The positional arguments of a transformed function are one tuple: each argument may
    # nest one container less (docs/python.md, "Limits").
    out = qb.jit(lambda v: v)(nest_lists(MAX_DEPTH - 1, qb.ones((1,))))
    assert qb.tree.structure(out) == qb.tree.structure(nest_lists(MAX_DEPTH - 1, 0.0))
    with pytest.raises(ValueError, match="more than 128 deep"):
        qb.jit(lambda v: v)(deepest)
    # Arrays from nested lists: at most 128 axes.
    assert tuple(qb.asarray(nest_lists(MAX_DEPTH, 2.0)).shape) == (1,) * MAX_DEPTH
    with pytest.raises(ValueError, match="more than 128 levels deep"):
        qb.asarray(nest_lists(MAX_DEPTH + 1, 2.0))
