"""Every code block of the guide chapter "Performance, Debugging, and Limitations", run as
written (the blocks are copied verbatim; names they leave free are defined first)."""

import math
import warnings

import pytest

import quabla as qb
from conftest import close


def test_inspect_the_compiled_graph():
    n = 8
    f = lambda x: qb.sum(qb.sin(x) ** 2)  # noqa: E731
    # --- guide ---
    text = qb.jit(f).lower(qb.ShapeDtype((n,))).as_text()
    print(len(text.splitlines()), "lines")
    # --- end ---
    assert 3 < len(text.splitlines()) < 20


def test_graph_size_loop_versus_vmap(capsys):
    # --- guide ---
    d = qb.grad(qb.grad(lambda x: qb.sin(x) ** 2))

    def per_point_loop(xs):
        return qb.stack([d(xs[i]) for i in range(xs.shape[0])])

    def per_point_vmap(xs):
        return qb.vmap(d)(xs)
    # --- end ---
    size = lambda f, n: len(qb.jit(f).lower(qb.ShapeDtype((n,))).as_text().splitlines())  # noqa: E731
    loop = {n: size(per_point_loop, n) for n in (4, 8, 16)}
    vmap = {n: size(per_point_vmap, n) for n in (4, 8, 16)}
    # The table: constant vmap lines, loop lines growing linearly with the points.
    assert vmap[4] == vmap[8] == vmap[16]
    assert loop[16] - loop[8] == 2 * (loop[8] - loop[4]) > 0
    assert loop[4] > vmap[4]
    # Both compute the same values.
    xs = qb.linspace(0.1, 1.0, 4)
    close(per_point_loop(xs), per_point_vmap(xs), rtol=1e-14)


def test_retrace_warning_becomes_an_error():
    with warnings.catch_warnings():
        # --- guide ---
        import warnings as w
        w.simplefilter("error", qb.RetraceWarning)
        # --- end ---
        f = qb.jit(lambda x: x * 2.0, max_traces=1)
        f(qb.zeros((1,)))
        with pytest.raises(qb.RetraceWarning) as e:
            f(qb.zeros((2,)))
        assert "exceeded max_traces=1" in str(e.value)
    # Without the filter, it is a warning and the call returns its value.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = qb.jit(lambda x: x * 2.0, max_traces=1)
        f(qb.zeros((1,)))
        out = f(qb.ones((2,)))
    assert [type(c.message) for c in caught] == [qb.RetraceWarning]
    close(out, [2.0, 2.0])


def test_see_what_you_compiled(capsys):
    loss = lambda p, x: qb.mean((x @ p["w"]) ** 2)  # noqa: E731
    params = {"w": qb.ones((2, 1))}
    x = qb.ones((3, 2))
    # --- guide ---
    lowered = qb.jit(qb.value_and_grad(loss)).lower(params, x)
    print(lowered.as_text())
    # --- end ---
    out = capsys.readouterr().out
    assert "matmul" in out and "input[name=" in out


def test_check_gradients_numerically():
    # --- guide ---
    def fd_check(f, x, v, eps=1e-6):
        analytic = qb.sum(qb.grad(f)(x) * v).item()
        numeric = (f(x + eps * v).item() - f(x - eps * v).item()) / (2 * eps)
        return analytic, numeric
    # --- end ---
    f = lambda x: qb.sum(qb.tanh(x) ** 3 * qb.exp(x))  # noqa: E731
    analytic, numeric = fd_check(f, qb.array([0.1, -0.4, 0.8]), qb.array([1.0, 0.5, -2.0]))
    assert abs(analytic - numeric) <= 1e-7 * abs(analytic)


def test_hunting_nan():
    x = qb.array([-1.0, 0.0, 2.0])
    mask = x > 0
    # --- guide ---
    qb.where(mask, x, 0.0)
    qb.log(qb.where(x > 0, x, 1.0))
    # --- end ---
    close(qb.where(mask, x, 0.0), [0.0, 0.0, 2.0])
    close(qb.log(qb.where(x > 0, x, 1.0)), [0.0, 0.0, 0.6931471805599453])
    close(mask * qb.array([float("nan"), 1.0, 1.0]), [float("nan"), 0.0, 1.0])


def test_print_inside_a_traced_function(capsys):
    qb.jit(lambda x: print(x) or x)(qb.zeros((2,), dtype=qb.float32))
    assert capsys.readouterr().out == "TraceTensor(node_id=0, shape=[2], dtype=float32)\n"


def test_common_errors_table():
    with pytest.raises(qb.TracerError, match="^TraceTensor cannot drive Python control flow"):
        qb.jit(lambda x: x if x > 0 else -x)(qb.array(1.0))
    with pytest.raises(qb.TracerError, match="operands="):
        qb.jit(lambda x, a: qb.fori_loop(0, 3, lambda i, c: c * a, x))(qb.array([1.0]), qb.array(2.0))
    with pytest.raises(ValueError, match="mismatched dtypes f64 and f32"):
        qb.array([1.0]) + qb.array([1.0], dtype=qb.float32)
    with pytest.raises(ValueError, match="grad requires a scalar output"):
        qb.grad(lambda x: x * 2.0)(qb.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="reverse-mode differentiation through while_loop"):
        qb.grad(lambda a: qb.while_loop(lambda x, a: x < a, lambda x, a: x + 1.0, a, operands=(a,)))(2.0)
    with pytest.raises(qb.UnsupportedOperationError, match="target is unavailable in this build") as e:
        qb.jit(lambda x: x, device="cuda")(qb.ones((2,)))
    assert e.value.device == "cuda"
    with pytest.raises(RuntimeError, match=r"stopped at t=.* before t1 after max_steps=512"):
        qb.ode.odeint(lambda y, t, lam: -lam * (y - qb.cos(t)), qb.array([0.0]), (0.0, 1.0),
                      method="rosenbrock23", args=(1e4,), max_steps=512)


def test_bounded_while_loop_has_a_reverse_mode_and_third_derivatives_go_through_loops():
    def newton_sqrt(a):
        return qb.while_loop(lambda x, a: qb.abs(x * x - a) > 1e-12 * a,
                             lambda x, a: 0.5 * (x + a / x), a, operands=(a,), max_trips=100)

    assert abs(float(qb.grad(newton_sqrt)(4.0)) - 0.25) < 1e-10
    assert abs(float(qb.jit(qb.grad(newton_sqrt))(qb.array(9.0))) - 1.0 / 6.0) < 1e-10
    with pytest.raises(RuntimeError, match="max_trips=2"):
        qb.while_loop(lambda x, a: qb.abs(x * x - a) > 1e-12 * a,
                      lambda x, a: 0.5 * (x + a / x), qb.array(2.0), operands=(qb.array(2.0),),
                      max_trips=2)

    # Python's abs works on tensors and tracers alike.
    assert float(abs(qb.array(-2.0))) == 2.0
    assert float(qb.grad(lambda x: abs(x))(-3.0)) == -1.0

    def cube_loop(a):
        return qb.fori_loop(0, 5, lambda i, x, a: x * a, qb.array(1.0), operands=(a,))

    # d^3/da^3 a^5 = 60 a^2, through reverse, reverse, reverse.
    third = qb.grad(qb.grad(qb.grad(cube_loop)))(2.0)
    assert abs(float(third) - 240.0) < 1e-9


def test_check_nans_debug_nans_and_debug_print(capfd):
    def loss(x):
        return qb.sum(qb.where(x > 0, qb.sqrt(x), 0.0))

    x = qb.array([4.0, -1.0])
    assert math.isnan(qb.jit(qb.grad(loss))(x).tolist()[1])
    with pytest.raises(FloatingPointError, match="made by the vjp rule of sqrt"):
        qb.jit(qb.grad(loss), check_nans=True)(x)
    qb.debug_nans(True)
    try:
        with pytest.raises(FloatingPointError, match="eager sqrt"):
            qb.sqrt(qb.array([-1.0]))
    finally:
        qb.debug_nans(False)

    @qb.jit
    def f(x):
        qb.debug_print("x = {}", x)
        return x * 2.0
    f(qb.array([1.0, 2.0]))
    f(qb.array([3.0, 4.0]))
    assert capfd.readouterr().out.splitlines()[-2:] == ["x = [1, 2]", "x = [3, 4]"]
