"""The JAX twins of the benchmark rows written as users write them.

The Quabla side is quabla/examples/support/user_programs.rs (the programs) and user_rows.rs
(their rows). Both sides compute the same functions of the same numbers: every input comes
from `uniform`, a splitmix64 stream turned into floats with plain float64 arithmetic, written
here as there. Each row prints, before it is timed, a `check=<row> <key>=<value>...` line by
the rule of the Quabla side (a value of at most 8 elements entry by entry, a larger one as its
sum and sum of squares), which `cargo xtask bench` compares with ours.

`jax_bench.py` imports this module and calls `run(wants, repeats, median_seconds)`.
"""

import math
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

MASK = (1 << 64) - 1


def splitmix64(seed, count):
    state = seed
    out = []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        out.append(z ^ (z >> 31))
    return out


def uniform(seed, count, lo, hi):
    scale = 1.0 / float(1 << 53)
    return [lo + (hi - lo) * ((z >> 11) * scale) for z in splitmix64(seed, count)]


def uniform_array(seed, shape, lo, hi):
    return np.asarray(uniform(seed, math.prod(shape), lo, hi), dtype=np.float64).reshape(shape)


def check(row, values):
    parts = [f"check={row}"]
    for key, value in values:
        a = [float(v) for v in np.asarray(value, dtype=np.float64).ravel()]
        if len(a) == 1:
            parts.append(f"{key}={a[0]!r}")
        elif len(a) <= 8:
            parts.extend(f"{key}{i}={v!r}" for i, v in enumerate(a))
        else:
            total = 0.0
            squares = 0.0
            for v in a:
                total += v
                squares += v * v
            parts.append(f"{key}_sum={total!r} {key}_sq={squares!r}")
    print(" ".join(parts), flush=True)


# ---------------------------------------------------------------------------------------------
# Fitting Lotka-Volterra to observations: diffrax Dopri5 with SaveAt(ts=)

LV_T1 = 10.0
LV_TRUE = [1.5, 1.0, 1.0, 3.0]
LV_GUESS = [1.2, 0.8, 1.25, 2.5]
LV_RTOL = 1e-6
LV_ATOL = 1e-9


def lotka_volterra(t, y, th):
    prey, predator = y[0], y[1]
    meet = prey * predator
    return jnp.stack([th[0] * prey - th[1] * meet, th[2] * meet - th[3] * predator])


def lv_solve(th, ts):
    import diffrax

    return diffrax.diffeqsolve(
        diffrax.ODETerm(lotka_volterra), diffrax.Dopri5(), t0=0.0, t1=LV_T1, dt0=None,
        y0=jnp.asarray([1.0, 1.0]), args=th, saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=LV_RTOL, atol=LV_ATOL))


def ode_fit_data(observations):
    ts = jnp.asarray([LV_T1 * (k + 1) / observations for k in range(observations)])
    clean = jax.jit(lambda th, ts: lv_solve(th, ts).ys)(jnp.asarray(LV_TRUE), ts)
    return ts, clean + uniform_array(1, (observations, 2), -0.05, 0.05)


def ode_fit_loss(th, ts, data):
    return jnp.mean((lv_solve(th, ts).ys - data) ** 2)


# ---------------------------------------------------------------------------------------------
# A tanh RNN through lax.scan


def rnn_params(hidden, inp):
    sx = 1.0 / math.sqrt(inp)
    sh = 1.0 / math.sqrt(hidden)
    return (uniform_array(11, (inp, hidden), -sx, sx), uniform_array(12, (hidden, hidden), -sh, sh),
            uniform_array(13, (hidden,), -0.1, 0.1), uniform_array(14, (hidden, 1), -sh, sh))


def rnn_data(steps, batch, inp):
    return uniform_array(15, (steps, batch, inp), -1.0, 1.0), uniform_array(16, (batch, 1), -1.0, 1.0)


def rnn_loss(params, xs, targets):
    wx, wh, b, wo = params

    def step(h, x):
        return jnp.tanh(x @ wx + h @ wh + b), None

    last, _ = jax.lax.scan(step, jnp.zeros((xs.shape[1], wh.shape[0])), xs)
    return jnp.mean((last @ wo - targets) ** 2)


# ---------------------------------------------------------------------------------------------
# Newton's method for L2-regularized logistic regression

LOGREG_L2 = 1e-2
CG_ITERATIONS = 20
CG_TOL = 1e-14


def logreg_data(n, d):
    x = uniform(21, n * d, -1.0, 1.0)
    hidden = uniform(22, d, -1.0, 1.0)
    draws = uniform(23, n, 0.0, 1.0)
    labels = []
    for i in range(n):
        z = 0.0
        for j in range(d):
            z = z + x[i * d + j] * hidden[j]
        p = 1.0 / (1.0 + math.exp(-z))
        labels.append(1.0 if draws[i] < p else 0.0)
    return (np.asarray(x).reshape(n, d), np.asarray(labels), uniform_array(24, (d,), -0.1, 0.1))


def logreg_loss(w, x, y):
    z = x @ w
    softplus = jnp.maximum(z, 0.0) + jnp.log1p(jnp.exp(-jnp.abs(z)))
    return jnp.mean(softplus - y * z) + 0.5 * LOGREG_L2 * jnp.sum(w ** 2)


def newton_step(w, x, y):
    g = jax.grad(logreg_loss)(w, x, y)
    h = jax.hessian(logreg_loss)(w, x, y)
    return w - jnp.linalg.solve(h, g)


def newton_cg_step(w, x, y):
    gradient = jax.grad(logreg_loss)
    g = gradient(w, x, y)

    def hvp(v):
        return jax.jvp(lambda w: gradient(w, x, y), (w,), (v,))[1]

    p, _ = jax.scipy.sparse.linalg.cg(hvp, g, tol=CG_TOL, maxiter=CG_ITERATIONS)
    return w - p


# ---------------------------------------------------------------------------------------------
# A 2-32-32-2 classifier trained with Adam on minibatches (optax is not in the benchmark's
# environment: Adam as numerics.md §8.1 and optax write it)

CLASSIFIER_SIZES = (2, 32, 32, 2)
CLASSIFIER_RATE = 1e-3


def classifier_params():
    params = []
    for k, (fan_in, fan_out) in enumerate(zip(CLASSIFIER_SIZES[:-1], CLASSIFIER_SIZES[1:])):
        s = math.sqrt(6.0 / (fan_in + fan_out))
        params.append(jnp.asarray(uniform_array(31 + k, (fan_in, fan_out), -s, s)))
        params.append(jnp.zeros((fan_out,)))
    return params


def classifier_batches(count, batch):
    points = np.asarray(uniform(41, count * batch * 2, -1.0, 1.0)).reshape(count, batch, 2)
    labels = (points[:, :, 0] * points[:, :, 1] > 0).astype(np.int64)
    return [(jnp.asarray(points[k]), jnp.asarray(labels[k])) for k in range(count)]


def classifier_loss(params, x, labels):
    h = x
    for k in range(0, len(params), 2):
        h = h @ params[k] + params[k + 1]
        if k + 2 < len(params):
            h = jax.nn.relu(h)
    logp = jax.nn.log_softmax(h, axis=1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def make_classifier_step():
    b1, b2, eps, lr = 0.9, 0.999, 1e-8, CLASSIFIER_RATE

    def step(params, m, v, t, x, labels):
        value, grads = jax.value_and_grad(classifier_loss)(params, x, labels)
        t = t + 1.0
        m = [b1 * mi + (1 - b1) * g for mi, g in zip(m, grads)]
        v = [b2 * vi + (1 - b2) * g * g for vi, g in zip(v, grads)]
        params = [p - lr * (mi / (1 - b1 ** t)) / (jnp.sqrt(vi / (1 - b2 ** t)) + eps)
                  for p, mi, vi in zip(params, m, v)]
        return params, m, v, t, value

    return jax.jit(step, donate_argnums=(0, 1, 2, 3))


def classifier_start():
    params = classifier_params()
    zeros = [jnp.zeros_like(p) for p in params]
    return params, zeros, [jnp.zeros_like(p) for p in params], jnp.zeros(())


# ---------------------------------------------------------------------------------------------
# The log marginal likelihood of a Gaussian process

GP_GUESS = [0.0, -2.3025850929940455]


def gp_data(n):
    x = uniform(51, n, 0.0, 10.0)
    noise = uniform(52, n, -0.1, 0.1)
    return np.asarray(x), np.asarray([math.sin(a) + e for a, e in zip(x, noise)])


def gp_log_marginal_likelihood(log_hyper, x, y):
    n = x.shape[0]
    lengthscale = jnp.exp(log_hyper[0])
    noise = jnp.exp(log_hyper[1])
    diff = x[:, None] - x[None, :]
    k = jnp.exp(diff ** 2 / (-2.0 * lengthscale ** 2)) + jnp.eye(n) * noise ** 2
    l = jnp.linalg.cholesky(k)
    alpha = jax.scipy.linalg.cho_solve((l, True), y)
    fit = -0.5 * jnp.sum(y * alpha)
    return fit - jnp.sum(jnp.log(jnp.diag(l))) - 0.5 * n * math.log(2.0 * math.pi)


# ---------------------------------------------------------------------------------------------
# The rows


def run(wants, repeats, median_seconds):
    """Checks and times every wanted row; `median_seconds(fn, args, repeats)` is the
    steady-state timer of jax_bench.py."""
    for observations in (40, 200):
        name = f"ode_fit_lv_obs{observations}"
        if not wants(name):
            continue
        try:
            import diffrax  # noqa: F401
        except ImportError as e:
            print(f"note: diffrax is not installed ({e}); {name} has no JAX time", flush=True)
            continue
        ts, data = ode_fit_data(observations)
        args = (jnp.asarray(LV_GUESS), ts, data)
        step = jax.jit(jax.value_and_grad(ode_fit_loss))
        value, grad = step(*args)
        check(name, [("value", value), ("grad", grad)])
        print(f"workload={name} seconds={median_seconds(step, args, repeats):.9g}", flush=True)
        stats = jax.jit(lambda th, ts: lv_solve(th, ts).stats)(args[0], ts)
        print(f"note: diffrax Dopri5 on {name} takes {int(stats['num_accepted_steps'])} accepted "
              f"and {int(stats['num_rejected_steps'])} rejected steps (max_steps 4096, "
              f"RecursiveCheckpointAdjoint: diffrax's defaults)", flush=True)

    name = "rnn_scan_h64_t100"
    if wants(name):
        xs, targets = rnn_data(100, 16, 8)
        args = (rnn_params(64, 8), xs, targets)
        step = jax.jit(jax.value_and_grad(rnn_loss))
        value, g = step(*args)
        check(name, [("value", value), ("grad_wx", g[0]), ("grad_wh", g[1]), ("grad_b", g[2]),
                     ("grad_wo", g[3])])
        print(f"workload={name} seconds={median_seconds(step, args, repeats):.9g}", flush=True)

    for name, d, fn in (("newton_logreg_d50", 50, newton_step),
                        ("newton_cg_logreg_d200", 200, newton_cg_step)):
        if not wants(name):
            continue
        x, y, w = logreg_data(1000, d)
        args = (jnp.asarray(w), jnp.asarray(x), jnp.asarray(y))
        step = jax.jit(fn)
        check(name, [("w", step(*args))])
        print(f"workload={name} seconds={median_seconds(step, args, repeats):.9g}", flush=True)

    name = "mlp_classifier_b64"
    if wants(name):
        batches = classifier_batches(8, 64)
        step = make_classifier_step()
        state = classifier_start()
        first = None
        for x, labels in batches:
            *state, value = step(*state, x, labels)
            first = value if first is None else first
        params = state[0]
        check(name, [("first_loss", first), ("last_loss", value), ("w1", params[0]),
                     ("w3", params[4])])
        state = classifier_start()
        *state, value = step(*state, *batches[0])
        jax.block_until_ready(value)
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            for k in range(200):
                *state, value = step(*state, *batches[k % len(batches)])
            jax.block_until_ready(value)
            runs.append((time.perf_counter() - start) / 200)
        print(f"workload={name} seconds={statistics.median(runs):.9g}", flush=True)

    name = "gp_mll_grad_n200"
    if wants(name):
        x, y = gp_data(200)
        args = (jnp.asarray(GP_GUESS), jnp.asarray(x), jnp.asarray(y))
        step = jax.jit(jax.value_and_grad(gp_log_marginal_likelihood))
        value, grad = step(*args)
        check(name, [("value", value), ("grad", grad)])
        print(f"workload={name} seconds={median_seconds(step, args, repeats):.9g}", flush=True)
