"""Bad input from Python: each case raises the spec's exception class with a message that
names the fix, and never crashes the interpreter. Odd NumPy layouts convert correctly."""

import collections
import dataclasses
import threading

import numpy as np
import pytest

import quabla as qb


def test_unconvertible_objects_are_type_errors():
    with pytest.raises(TypeError, match="cannot convert str to a quabla Tensor"):
        qb.array("abc")
    with pytest.raises(TypeError, match="cannot convert object"):
        qb.sin(object())
    with pytest.raises(TypeError, match="cannot convert"):
        qb.ones((2,)) + "x"
    with pytest.raises(ValueError, match="ragged"):
        qb.array([[1.0, 2.0], [3.0]])


def test_rejected_pytree_containers():
    @dataclasses.dataclass
    class Unregistered:
        w: object

    f = qb.grad(lambda p: qb.sum(p["w"]))
    with pytest.raises(TypeError, match="OrderedDict is not a supported pytree container; register it"):
        f(collections.OrderedDict(w=qb.ones((2,))))
    with pytest.raises(TypeError, match="Unregistered is not a supported pytree container"):
        qb.jit(lambda p: p.w)(Unregistered(qb.ones((2,))))

    class MyList(list):
        pass
    with pytest.raises(TypeError, match="MyList is not a supported pytree container"):
        qb.tree.flatten(MyList([1.0]))
    with pytest.raises(TypeError, match="must all be str or all be int"):
        qb.jit(lambda d: d)({"a": qb.ones((1,)), 1: qb.ones((1,))})


def test_registration_errors():
    @dataclasses.dataclass
    class Twice:
        w: object
    qb.tree.register_dataclass(Twice)
    with pytest.raises(ValueError, match="already registered"):
        qb.tree.register_dataclass(Twice)

    @dataclasses.dataclass
    class Bad:
        w: object
        n: int
    with pytest.raises(ValueError, match="exactly once"):
        qb.tree.register_dataclass(Bad, data_fields=["w"], meta_fields=())
    with pytest.raises(TypeError, match="needs a dataclass"):
        qb.tree.register_dataclass(int)


def test_wrong_keyword_names_and_values():
    with pytest.raises(TypeError):
        qb.sum(qb.ones((2,)), axes=0)
    with pytest.raises(TypeError):
        qb.jit(lambda x: x, static_argnumz=1)
    with pytest.raises(ValueError, match="indexing"):
        qb.meshgrid(qb.ones((2,)), indexing="zz")
    with pytest.raises(ValueError, match="mode"):
        qb.pad(qb.ones((2,)), 1, mode="nope")
    with pytest.raises(TypeError, match="dtype must be"):
        qb.zeros((2,), dtype="int16")
    with pytest.raises(TypeError, match="static argument 1 is not hashable"):
        qb.jit(lambda x, n: x, static_argnums=1)(qb.ones((1,)), [1, 2])
    with pytest.raises(TypeError, match="key must be a quabla.random.Key"):
        qb.random.normal(3, (2,))
    with pytest.raises(ValueError, match='precision must be None, "float32" or "float64"'):
        qb.jit(lambda x: x, precision="float16")(qb.ones((1,)))


def test_precision_float32_contracts_natively_within_tolerance():
    a = np.sin(np.linspace(-1.0, 1.0, 64 * 200, dtype=np.float32)).reshape(64, 200)
    b = np.cos(np.linspace(-2.0, 3.0, 200 * 32, dtype=np.float32)).reshape(200, 32)
    f = lambda a, b: a @ b  # noqa: E731
    reference = np.asarray(qb.jit(f)(a, b))
    native = np.asarray(qb.jit(f, precision="float32")(a, b))
    assert native.dtype == np.float32
    np.testing.assert_allclose(native, reference, rtol=1e-5, atol=1e-4)


def test_numpy_dtypes():
    # Integer arrays keep a signed integer dtype (numerics.md §1.3 as amended); complex and
    # float16 are refused.
    t = qb.asarray(np.arange(3, dtype=np.int32))
    assert str(t.dtype) == "i32" and t.tolist() == [0, 1, 2]
    with pytest.raises(TypeError, match="cannot convert ndarray"):
        qb.asarray(np.ones(2, dtype=np.complex128))
    with pytest.raises(TypeError, match="float16 is not supported"):
        qb.asarray(np.ones(2, dtype=np.float16))
    assert str(qb.asarray(np.array([True, False])).dtype) == "bool"
    assert str(qb.asarray(np.ones(2, dtype=np.float32)).dtype) == "f32"


def test_non_contiguous_and_big_endian_numpy_arrays():
    a = np.arange(12.0).reshape(3, 4)
    assert qb.asarray(a[:, ::2]).tolist() == a[:, ::2].tolist()
    assert qb.asarray(a.T).tolist() == a.T.tolist()
    assert qb.asarray(a[::-1, 1:3]).tolist() == a[::-1, 1:3].tolist()
    be = np.array([1.5, -2.25, 3.0], dtype=">f8")
    assert qb.asarray(be).tolist() == [1.5, -2.25, 3.0]
    be32 = np.array([1.5, -2.25], dtype=">f4")
    assert qb.asarray(be32).tolist() == [1.5, -2.25]
    # Buffer-protocol objects without NumPy's help.
    import array
    assert qb.asarray(memoryview(array.array("d", [1.0, 2.0]))).tolist() == [1.0, 2.0]


def test_numpy_array_meeting_a_tracer():
    with pytest.raises(TypeError, match="NumPy arrays are not captured automatically"):
        qb.jit(lambda x: x + np.ones(2))(qb.ones((2,)))


def test_concrete_values_of_tracers():
    for op in (lambda x: float(x), lambda x: x.item(), lambda x: x.tolist(), lambda x: np.asarray(x)):
        with pytest.raises(qb.TracerError, match="needs a concrete value"):
            qb.jit(lambda x, op=op: op(x) and x)(qb.array(1.0))
    with pytest.raises(qb.TracerError, match="cannot drive Python control flow"):
        qb.jit(lambda x: bool(x))(qb.array(1.0))


def test_bool_and_item_rules():
    assert bool(qb.array([1.0, 2.0])) is True
    assert bool(qb.array(False)) is False
    with pytest.raises(ValueError, match="ambiguous"):
        bool(qb.array([True, False]))
    with pytest.raises(ValueError, match="exactly one element"):
        qb.ones((2,)).item()
    assert int(qb.array(-2.7)) == -2
    # `@` is matmul (api.md §2.2 as amended): two vectors give their dot product.
    assert (qb.ones((2,)) @ qb.ones((2,))).tolist() == 2.0


def test_python_exceptions_pass_through_transforms_unchanged():
    class Mine(Exception):
        pass

    def f(x):
        raise Mine("from the loss")
    for transform in (qb.jit, qb.grad, qb.vmap, qb.hessian, qb.jacobian):
        with pytest.raises(Mine, match="from the loss") as e:
            transform(f)(qb.ones((2,)) if transform is not qb.grad else 1.0)
        assert e.traceback[-1].name == "f"
    with pytest.raises(Mine):
        qb.fori_loop(0, 3, lambda i, c: f(c), qb.ones((1,)))
    with pytest.raises(Mine):
        qb.optim.Adam(lambda step: f(step)).update({"w": qb.ones((1,))}, {"w": qb.ones((1,))},
                                                    qb.optim.Adam(0.1).init({"w": qb.ones((1,))}))


def test_wrong_structures_and_states():
    opt = qb.optim.Adam(0.1)
    with pytest.raises(ValueError, match='^Adam state is missing one of the keys "step", "m", "v"$'):
        opt.update({"w": qb.ones((1,))}, {"w": qb.ones((1,))}, {"step": 0, "v": {}})
    with pytest.raises(ValueError):
        qb.tree.unflatten(qb.tree.structure([1.0, 2.0]), [1.0])
    with pytest.raises(TypeError, match="parameters and gradients must be floating"):
        opt.init({"w": qb.array([True])})


def test_the_gil_is_released_while_a_plan_runs():
    f = qb.jit(lambda x: qb.sum(qb.sin(x) ** 2))
    x = qb.linspace(0.0, 1.0, 200000)
    ticks = []
    done = threading.Event()

    def other():
        while not done.is_set():
            ticks.append(1)
    t = threading.Thread(target=other)
    t.start()
    for _ in range(20):
        f(x)
    done.set()
    t.join()
    assert ticks


def test_type_stubs_name_every_public_name():
    import pathlib
    import re
    package = pathlib.Path(qb.__file__).parent
    assert (package / "py.typed").exists()
    for module, stub in [(qb, "__init__.pyi"), (qb.tree, "tree.pyi"), (qb.random, "random.pyi"),
                         (qb.optim, "optim.pyi"), (qb.linalg, "linalg.pyi"), (qb.ode, "ode.pyi"),
                         (qb.distributed, "distributed.pyi")]:
        text = (package / stub).read_text()
        declared = set(re.findall(r"^(?:def|class) (\w+)", text, re.M)) | set(re.findall(r"^(\w+):", text, re.M))
        declared |= set(re.findall(r"(\w+) as \1", text))
        declared |= set(re.findall(r"^(\w+) = \w+$", text, re.M))  # aliases: remat = checkpoint
        missing = [n for n in module.__all__ if n not in declared]
        assert not missing, (stub, missing)


def test_type_stubs_are_typed_where_the_type_is_known():
    import pathlib
    import re
    package = pathlib.Path(qb.__file__).parent
    for stub in ("__init__.pyi", "linalg.pyi", "random.pyi", "ode.pyi", "tree.pyi"):
        text = (package / stub).read_text()
        # Array, axis, dtype, shape and function parameters have their types, never Any.
        untyped = re.findall(r"\b(x|x1|x2|a|b|axis|dtype|shape|fun|f|key|other|matvec): Any\b", text)
        assert not untyped, (stub, untyped)
    text = (package / "__init__.pyi").read_text()
    assert re.search(r"^def sum\(x: ArrayLike, .*\) -> Tensor: \.\.\.$", text, re.M)
    assert re.search(r"^def grad\(.*\) -> GradFunction: \.\.\.$", text, re.M)
    assert "def __eq__(self, other: object) -> Tensor" in text


def test_integers_outside_int64_are_value_errors_and_edges_round_trip():
    import io

    def round_trip(tree):
        buf = io.BytesIO()
        qb.save(buf, tree)
        buf.seek(0)
        return qb.load(buf)

    for v in [-2**63, -1, 0, 2**63 - 1]:
        assert round_trip(v) == v
        assert round_trip({v: [v]}) == {v: [v]}
        assert qb.jit(lambda x, n: (x, n))(qb.ones((1,)), v)[1] == v
    x = qb.ones((1,))
    for v in [2**63, 2**64 - 1, -2**63 - 1, 2**70]:
        msg = f"{v} is outside the signed 64-bit range"
        for call in [
            lambda: qb.save(io.BytesIO(), v),
            lambda: qb.save(io.BytesIO(), [1, v]),
            lambda: qb.save(io.BytesIO(), {v: 1.0}),
            lambda: qb.jit(lambda x, n: x)(x, v),
            lambda: qb.jit(lambda x, d: x)(x, {"n": v}),
            lambda: qb.grad(lambda x, n: qb.sum(x))(x, v),
            lambda: qb.vmap(lambda x, n: x, in_axes=(0, None))(x, v),
            lambda: qb.jit(lambda x: (x, v))(x),
        ]:
            with pytest.raises(ValueError, match=msg):
                call()


def test_plan_input_names_never_collide():
    keys = ["a", "0", "a/0", "a/0/b", "/", "~", "~1", "a~1b", ""]
    x = qb.ones((1,))
    shapes = [x, [x, x], [{"b": x}]] + [{k: x} for k in keys]
    for i, k1 in enumerate(keys):
        for k2 in keys[i + 1:]:
            for s1 in shapes:
                for s2 in shapes[:3]:
                    tree = {k1: s1, k2: s2}
                    names = qb.jit(lambda p: 0.0).lower(tree).program.input_names
                    paths = [p for p, _ in qb.tree.flatten_with_path(tree)[0]]
                    assert len(set(names)) == len(names) == len(paths), (tree, names)
                    for name, path in zip(names, paths):
                        parts = [s.replace("~1", "/").replace("~0", "~") for s in name.split("/")]
                        assert parts == ["p"] + [str(e) for e in path], (name, path)
    # The tree lowers to a program callable by name.
    f = qb.jit(lambda p: p["a"][0]["b"] * 10.0 + p["a/0/b"])
    program = f.lower({"a": [{"b": x}], "a/0/b": x}).program
    assert program.input_names == ["p/a/0/b", "p/a~10~1b"]
    exe = program.compile("cpu")
    out = exe({"p/a/0/b": qb.asarray([2.0]), "p/a~10~1b": qb.asarray([3.0])})
    assert out[0].tolist() == [23.0]


def test_dict_keys_mixing_kinds_are_type_errors_everywhere():
    import io

    x = qb.ones((2,))
    for tree in [{1: x, "a": x}, [x, {1: x, "a": x}], {"p": {0: x, "a": x}}]:
        for name, call in {
            "jit": lambda: qb.jit(lambda d: d)(tree),
            "grad": lambda: qb.grad(lambda d: qb.sum(qb.tree.leaves(d)[0]))(tree),
            "vmap": lambda: qb.vmap(lambda d: d)(tree),
            "jvp": lambda: qb.jvp(lambda d: qb.sum(qb.tree.leaves(d)[0]), (tree,), (tree,)),
            "tree.map": lambda: qb.tree.map(lambda t: t, tree),
            "tree.flatten": lambda: qb.tree.flatten(tree),
            "save": lambda: qb.save(io.BytesIO(), tree),
            "optimizer": lambda: qb.optim.SGD(0.1).init(tree),
            "a jitted result": lambda: qb.jit(lambda v: {0: v, "a": v})(x),
        }.items():
            with pytest.raises(TypeError, match="dict keys in a pytree must all be str or all be int"):
                call()


@pytest.mark.parametrize("defect", ["shape", "rank", "scalar", "dtype"])
@pytest.mark.parametrize("rule", ["jvp primal_out", "jvp tangent_out", "vjp fwd", "vjp bwd"])
def test_every_output_of_every_custom_rule_is_checked(defect, rule):
    bad = {
        "shape": lambda y: qb.concat([y, y], 0),
        "rank": lambda y: qb.reshape(y, (1, 2)),
        "scalar": lambda y: qb.sum(y),
        "dtype": lambda y: y.astype(qb.float32),
    }[defect]
    ok = lambda y: y  # noqa: E731
    if rule.startswith("jvp"):
        p, t = (bad, ok) if rule == "jvp primal_out" else (ok, bad)
        f = qb.custom_jvp(qb.sin)
        f.defjvp(lambda prim, tan: (p(qb.sin(prim[0])), t(tan[0] * qb.cos(prim[0]))))
        prefix = "the jvp rule of custom_jvp"
    else:
        o, c = (bad, ok) if rule == "vjp fwd" else (ok, bad)
        f = qb.custom_vjp(qb.sin)
        f.defvjp(lambda x: (o(qb.sin(x)), x), lambda x, g: (c(g * qb.cos(x)),))
        prefix = "the fwd rule of custom_vjp" if rule == "vjp fwd" else "the bwd rule of custom_vjp"
    x = qb.asarray([0.5, 1.5])
    calls = [lambda: qb.grad(lambda x: qb.sum(f(x)))(x),
             lambda: qb.jit(qb.grad(lambda x: qb.sum(f(x))))(x),
             lambda: qb.vjp(f, x)]
    if rule.startswith("jvp"):
        calls.append(lambda: qb.jvp(f, (x,), (x,)))
    for call in calls:
        with pytest.raises(ValueError, match=prefix):
            call()


def test_a_tracer_handed_to_another_thread_is_refused_there():
    import queue

    to_b, to_a = queue.Queue(), queue.Queue()

    def thread_b():
        a = to_b.get()
        outcomes = {}
        for name, call in {
            "jit": lambda: qb.jit(lambda x: x + a)(qb.ones((2,))),
            "grad": lambda: qb.grad(lambda x: qb.sum(x * a))(qb.ones((2,))),
            "vmap": lambda: qb.vmap(lambda x: x + a)(qb.ones((3, 2))),
            "eager": lambda: a + 1.0,
        }.items():
            try:
                outcomes[name] = ("no error", call())
            except qb.TracerError as e:
                outcomes[name] = ("TracerError", str(e))
        to_a.put(outcomes)

    def f(x):
        to_b.put(x)
        seen.update(to_a.get(timeout=60))
        return x * 2.0

    seen = {}
    b = threading.Thread(target=thread_b)
    b.start()
    out = qb.jit(f)(qb.full((2,), 7.0))
    b.join(timeout=60)
    assert out.tolist() == [14.0, 14.0]
    assert set(seen) == {"jit", "grad", "vmap", "eager"}
    for name, (kind, detail) in seen.items():
        assert kind == "TracerError" and "was used after its trace ended" in detail, (name, detail)
