"""qb.optim from Python: the state's step as a tensor (a jitted update traces once), schedules
as tensor functions of the step, validation at construction, the Trainer's batches, last loss
and threads, and the errors a port from optax meets first."""

import math
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import quabla as qb


def params():
    return {"w": qb.array([0.5, -1.0, 2.0]), "b": qb.array(0.25)}


def loss(p, x, y):
    return qb.mean((p["w"] * x + p["b"] - y) ** 2)


X = qb.array([1.0, 2.0, 3.0])
Y = qb.array([2.0, 3.0, 5.0])


def leaves(tree):
    return [np.asarray(t) for t in qb.tree.leaves(tree)]


def same_bits(a, b):
    for x, y in zip(leaves(a), leaves(b)):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x.view(np.uint64 if x.dtype == np.float64 else np.uint32),
                              y.view(np.uint64 if y.dtype == np.float64 else np.uint32))


SCHEDULES = {
    "constant": lambda: 0.05,
    "exponential": lambda: qb.optim.exponential_decay(0.1, 10, 0.5, staircase=True),
    "cosine": lambda: qb.optim.cosine_decay(0.1, 20, alpha=0.1),
    "warmup": lambda: qb.optim.warmup_cosine_decay(0.0, 0.1, 5, 20),
    "piecewise": lambda: qb.optim.piecewise_constant([3, 8], [0.1, 0.05, 0.01]),
    "tensor function": lambda: (lambda step: 0.1 * qb.exp(-0.05 * step)),
}


@pytest.mark.parametrize("opt_name", ["Adam", "AdamW", "SGD"])
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_a_jitted_update_traces_once_and_equals_the_eager_update(opt_name, schedule):
    opt = getattr(qb.optim, opt_name)(SCHEDULES[schedule]())
    grad = qb.grad(loss)

    @qb.jit
    def step(p, state):
        g = grad(p, X, Y)
        return opt.update(p, g, state)

    p_jit = p_eager = params()
    s_jit = s_eager = opt.init(p_jit)
    with warnings.catch_warnings():
        warnings.simplefilter("error", qb.RetraceWarning)
        for _ in range(25):
            p_jit, s_jit = step(p_jit, s_jit)
            p_eager, s_eager = opt.update(p_eager, grad(p_eager, X, Y), s_eager)
    same_bits(p_jit, p_eager)
    if s_jit is not None:
        assert isinstance(s_jit["step"], qb.Tensor)
        assert float(s_jit["step"]) == 25.0 == float(s_eager["step"])


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_the_trainer_equals_the_functional_loop(schedule):
    opt = qb.optim.Adam(SCHEDULES[schedule]())
    trainer = qb.optim.Trainer(loss, params(), opt, X, Y)
    p, s = params(), opt.init(params())
    grad = qb.grad(loss)
    for _ in range(12):
        trainer.step()
        p, s = opt.update(p, grad(p, X, Y), s)
    same_bits(trainer.params, p)
    assert trainer.steps == 12


def test_a_host_only_schedule_runs_eagerly_and_in_the_trainer_but_not_under_jit():
    def host(step):
        return 0.1 * math.exp(-float(step) / 10)  # reads the step as a Python number

    opt = qb.optim.SGD(host)
    p, s = params(), opt.init(params())
    p, s = opt.update(p, qb.grad(loss)(p, X, Y), s)  # eager: fine
    with pytest.raises(qb.TracerError):
        qb.jit(lambda p, s: opt.update(p, qb.grad(loss)(p, X, Y), s))(p, s)
    # The trainer cannot trace it into its plan, so it evaluates it on the host each step.
    trainer = qb.optim.Trainer(loss, params(), opt, X, Y)
    q, t = params(), opt.init(params())
    for _ in range(5):
        trainer.step()
        q, t = opt.update(q, qb.grad(loss)(q, X, Y), t)
    same_bits(trainer.params, q)


def test_a_built_in_schedule_gives_the_same_value_for_an_int_and_a_tensor_step():
    for name in ["exponential", "cosine", "warmup", "piecewise"]:
        schedule = SCHEDULES[name]()
        for step in range(0, 30, 3):
            host = schedule(step)
            assert isinstance(host, float)
            tensor = schedule(qb.array(float(step)))
            assert isinstance(tensor, qb.Tensor)
            assert float(tensor) == host, (name, step)


BAD_CONSTRUCTIONS = [
    ("exponential_decay transition_steps 0", lambda: qb.optim.exponential_decay(1.0, 0, 0.5)),
    ("exponential_decay rate 0", lambda: qb.optim.exponential_decay(1.0, 10, 0.0)),
    ("exponential_decay init nan", lambda: qb.optim.exponential_decay(math.nan, 10, 0.5)),
    ("cosine_decay steps 0", lambda: qb.optim.cosine_decay(1.0, 0)),
    ("warmup > decay", lambda: qb.optim.warmup_cosine_decay(0.0, 1.0, 10, 5)),
    ("piecewise lengths", lambda: qb.optim.piecewise_constant([1, 2], [1.0])),
    ("piecewise order", lambda: qb.optim.piecewise_constant([2, 1], [1.0, 0.5, 0.1])),
    ("constant inf", lambda: qb.optim.constant(math.inf)),
    ("Adam rate -1", lambda: qb.optim.Adam(learning_rate=-1)),
    ("Adam rate 0", lambda: qb.optim.Adam(learning_rate=0.0)),
    ("Adam b1 1", lambda: qb.optim.Adam(b1=1.0)),
    ("Adam b2 -0.1", lambda: qb.optim.Adam(b2=-0.1)),
    ("Adam eps 0", lambda: qb.optim.Adam(eps=0.0)),
    ("Adam clip_norm 0", lambda: qb.optim.Adam(clip_norm=0)),
    ("AdamW weight_decay -1", lambda: qb.optim.AdamW(weight_decay=-1.0)),
    ("SGD rate nan", lambda: qb.optim.SGD(math.nan)),
    ("SGD clip_norm -1", lambda: qb.optim.SGD(0.1, clip_norm=-1.0)),
    ("LBFGS history 0", lambda: qb.optim.LBFGS(history=0)),
    ("LBFGS max_iterations 0", lambda: qb.optim.LBFGS(max_iterations=0)),
    ("LBFGS tolerance_grad -1", lambda: qb.optim.LBFGS(tolerance_grad=-1.0)),
    ("LBFGS line_search", lambda: qb.optim.LBFGS(line_search="backtracking")),
]


@pytest.mark.parametrize("name,build", BAD_CONSTRUCTIONS, ids=[n for n, _ in BAD_CONSTRUCTIONS])
def test_every_bad_hyperparameter_is_a_value_error_at_construction(name, build):
    with pytest.raises(ValueError):
        build()


# Every float hyperparameter of every constructor, by keyword: NaN is never a setting, and the
# ones that must be positive or non-negative refuse a negative value, all at construction.
FLOAT_OPTIONS = [
    (qb.optim.Adam, {}, ["learning_rate", "b1", "b2", "eps", "clip_norm"]),
    (qb.optim.AdamW, {}, ["learning_rate", "b1", "b2", "eps", "weight_decay", "clip_norm"]),
    (qb.optim.SGD, {"learning_rate": 0.1}, ["learning_rate", "clip_norm"]),
    (qb.optim.LBFGS, {}, ["tolerance_grad", "tolerance_change"]),
    (qb.optim.constant, {}, ["value"]),
    (qb.optim.exponential_decay, {"init_value": 1.0, "transition_steps": 10, "decay_rate": 0.5},
     ["init_value", "decay_rate", "end_value"]),
    (qb.optim.cosine_decay, {"init_value": 1.0, "decay_steps": 10}, ["init_value", "alpha"]),
    (qb.optim.warmup_cosine_decay,
     {"init_value": 0.0, "peak_value": 1.0, "warmup_steps": 2, "decay_steps": 10},
     ["init_value", "peak_value", "end_value"]),
]
# (`alpha` may be any finite number, as in optax: the final multiplier of the rate.)
NON_NEGATIVE = {"b1", "b2", "eps", "clip_norm", "weight_decay", "tolerance_grad",
                "tolerance_change", "decay_rate"}
FLOAT_CASES = [(build, base, option, bad)
               for build, base, options in FLOAT_OPTIONS for option in options
               for bad in [math.nan] + ([-1.0] if option in NON_NEGATIVE else [])]


@pytest.mark.parametrize("build,base,option,bad", FLOAT_CASES,
                         ids=[f"{b.__name__}-{o}-{v}" for b, _, o, v in FLOAT_CASES])
def test_every_float_hyperparameter_refuses_nan_and_out_of_range(build, base, option, bad):
    with pytest.raises(ValueError, match=option):
        build(**{**base, option: bad})


def test_an_unknown_lbfgs_option_names_the_real_ones():
    with pytest.raises(TypeError, match="did you mean max_iterations.*history, max_iterations"):
        qb.optim.LBFGS(max_iters=10)


def test_the_update_signature_is_named_when_the_arguments_come_in_optax_order():
    opt = qb.optim.Adam(0.1)
    p = params()
    state = opt.init(p)
    grads = qb.grad(loss)(p, X, Y)
    with pytest.raises(TypeError, match=r"Adam.update\(params, grads, state\).*optax"):
        opt.update(grads, state, p)  # optax's order
    with pytest.raises(TypeError, match=r"update\(grads, state, params\)"):
        opt.update(p, p, [state])


@pytest.mark.parametrize("step,error", [(-1, ValueError), (2**64 - 1, ValueError),
                                        (2**53, ValueError), (1.5, ValueError),
                                        (True, TypeError), ("3", TypeError)])
def test_a_state_step_out_of_range_is_refused(step, error):
    opt = qb.optim.Adam(0.1)
    p = params()
    state = dict(opt.init(p))
    state["step"] = step
    with pytest.raises(error):
        opt.update(p, p, state)


def test_an_integer_step_is_accepted_and_the_moments_must_be_float64():
    opt = qb.optim.Adam(0.1)
    p = params()
    state = dict(opt.init(p))
    state["step"] = 7
    _, new = opt.update(p, p, state)
    assert float(new["step"]) == 8.0
    state["m"] = {"w": qb.zeros((3,), dtype=qb.float32), "b": qb.zeros((), dtype=qb.float32)}
    with pytest.raises(TypeError, match="Adam moments must be float64, got float32"):
        opt.update(p, p, state)


def test_a_single_batch_argument_replaces_its_data_argument():
    def l(w, x):
        return qb.sum((w - x) ** 2)

    trainer = qb.optim.Trainer(l, qb.zeros([4]), qb.optim.SGD(0.01), qb.ones([4]),
                               batch_argnums=(0,))
    assert trainer.last_loss is None
    trainer.step(qb.full([4], 2.0))
    # The loss of the first step is at w = 0 with the new batch: sum(4) = 16.
    assert float(trainer.last_loss) == 16.0
    np.testing.assert_array_equal(np.asarray(trainer.params), np.full(4, 0.04))
    with pytest.raises(TypeError, match="one batch value per name in batch_argnums"):
        trainer.step(qb.ones([4]), qb.ones([4]))


def test_two_threads_stepping_one_trainer_take_turns():
    # In a subprocess with a timeout: a deadlock must fail the test, not hang the suite.
    code = textwrap.dedent("""
        import threading, quabla as qb
        def loss(w, x):
            return qb.sum((w - x) ** 2)
        trainer = qb.optim.Trainer(loss, qb.zeros([8]), qb.optim.Adam(0.01), qb.ones([8]))
        def work():
            for _ in range(200):
                trainer.step()
        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads: t.start()
        for t in threads: t.join()
        assert trainer.steps == 400, trainer.steps
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_the_cpu_moves_no_data():
    t = qb.transfers("cpu")
    assert t == {"uploads": 0, "downloads": 0, "bytes_uploaded": 0, "bytes_downloaded": 0}


def test_donated_jit_arguments_are_lent_and_stay_valid():
    f = qb.jit(lambda x, n: x * n, donate_argnums=0)
    x = qb.array([1.0, 2.0, 3.0])
    y = f(x, 2.0)
    np.testing.assert_array_equal(np.asarray(y), [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(np.asarray(x), [1.0, 2.0, 3.0])  # still valid, unchanged
    for _ in range(3):
        x = f(x, 0.5)
    np.testing.assert_array_equal(np.asarray(x), [0.125, 0.25, 0.375])
    with pytest.raises(ValueError, match="both static and donated"):
        qb.jit(lambda x, n: x * n, static_argnums=1, donate_argnums=(1,))
    with pytest.raises(ValueError, match="non-negative"):
        qb.jit(lambda x: x, donate_argnums=-1)
    with pytest.raises(ValueError, match="donate_argnums names argument 2"):
        qb.jit(lambda x, n: x * n, donate_argnums=(0, 2))(x, 1.0)


def test_a_callback_that_calls_its_own_trainer_is_refused_not_deadlocked():
    # In a subprocess with a timeout: a deadlock must fail the test, not hang the suite.
    code = textwrap.dedent("""
        import math, quabla as qb
        holder = {}
        def schedule(step):
            rate = 0.1 * math.exp(-float(step))   # a host schedule: the trainer calls it per step
            holder["t"].params                    # reads the trainer from inside its own step
            return rate
        def loss(w, x):
            return qb.sum((w - x) ** 2)
        trainer = qb.optim.Trainer(loss, qb.zeros([2]), qb.optim.SGD(schedule), qb.ones([2]))
        holder["t"] = trainer
        try:
            trainer.step()
        except RuntimeError as e:
            assert "from inside one of its own steps" in str(e), e
            print("refused")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "refused", out.stderr


def test_a_retrace_warning_handler_may_call_the_function_that_warned():
    code = textwrap.dedent("""
        import warnings, quabla as qb
        f = qb.jit(lambda x: x * 2, max_traces=1)
        calls = []
        def show(message, category, filename, lineno, file=None, line=None):
            calls.append(float(f(qb.ones(()))))   # the same jitted function, from the handler
        warnings.showwarning = show
        warnings.simplefilter("always")
        for n in range(1, 5):
            f(qb.ones((n,)))
        assert calls and all(c == 2.0 for c in calls), calls
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
