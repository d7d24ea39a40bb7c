"""Times the Quabla benchmark workloads in JAX on the CPU.

`cargo xtask bench --vs-jax` writes this script under target/ and runs it with
the interpreter of target/jax-venv. Each workload is jitted, run once to
compile and warm up, then timed over several runs (each waiting on
`block_until_ready`); the median is reported, one line per workload:

    workload=<name> seconds=<median seconds>

Rows of programs written as users write them come from `jax_user_programs.py`, which xtask
writes beside this script.

Usage: python jax_bench.py [--only SUBSTRING[,SUBSTRING...]] [REPEATS]
       python jax_bench.py --scaling [--only SUBSTRING[,SUBSTRING...]]

`--only` keeps the rows (the scaling families) whose name contains one of the substrings.
"""

import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

DEFAULT_REPEATS = 15


def chain(x):
    return jnp.sin(x) ** 2 + jnp.cos(x)


def workloads():
    """Yields (name, jitted function, arguments) for every workload."""
    rng = np.random.default_rng(0)

    x = jnp.asarray(rng.standard_normal(1_000_000).astype(np.float32))
    assert x.dtype == jnp.float32
    yield "chain_f32_1e6", jax.jit(chain), (x,)

    matmul = jax.jit(jnp.matmul)
    for name, dtype in (("matmul_f32_512", np.float32), ("matmul_f64_512", np.float64)):
        a = jnp.asarray(rng.standard_normal((512, 512)).astype(dtype))
        b = jnp.asarray(rng.standard_normal((512, 512)).astype(dtype))
        assert a.dtype == dtype and b.dtype == dtype
        yield name, matmul, (a, b)
        if dtype == np.float32:
            # The peer of our product jitted at precision("float32"): JAX's float32 is native.
            yield "matmul_f32_512_precision_f32", matmul, (a, b)

    s = jnp.asarray(rng.standard_normal(10_000_000).astype(np.float64))
    assert s.dtype == jnp.float64
    yield "sum_f64_1e7", jax.jit(jnp.sum), (s,)

    yield "jit_elementwise_1e6_f32", jax.jit(chain), (x,)

    def fori(c):
        return jax.lax.fori_loop(0, 100_000, lambda i, c: c * 0.999999 + 1e-6, c)

    yield "fori_1e5", jax.jit(fori), (jnp.asarray(1.0, dtype=jnp.float64),)


def many_calls(fn, args, calls=2000):
    """Per-call time of a cached jitted call (the median over batches of `calls`)."""
    fn(*args).block_until_ready()

    def batch():
        for _ in range(calls):
            out = fn(*args)
        out.block_until_ready()
        return out

    return batch, calls


def two_hundred_nodes(scale):
    def f(x):
        for i in range(100):
            x = jnp.sin(x)
            x = x * (scale + i * 1e-3)
        return x

    return f


def first_call_seconds(repeats):
    """Trace, compile and run a fresh 200-node function (a new constant defeats caches)."""
    x = jnp.ones((64,), dtype=jnp.float64)
    times = []
    for r in range(repeats):
        fn = jax.jit(two_hundred_nodes(1.0 + r * 1e-7))
        start = time.perf_counter()
        fn(x).block_until_ready()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def median_seconds(fn, args, repeats):
    jax.block_until_ready(fn(*args))  # compile and warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


ONLY = []


def wants(name):
    """Whether the row (or scaling family) `name` runs under `--only`."""
    return not ONLY or any(part in name for part in ONLY)


def row(names, seconds):
    """Prints `workload=` lines for the wanted names of `names` (one name, or a row and its
    Python-package twin that share one JAX time), timing with `seconds()` only if one is."""
    names = (names,) if isinstance(names, str) else names
    wanted = [name for name in names if wants(name)]
    if wanted:
        value = seconds()
        for name in wanted:
            print(f"workload={name} seconds={value:.9g}", flush=True)


def tiny_call_seconds(fn, repeats):
    x8 = jnp.ones((8,), dtype=jnp.float32)
    batch, calls = many_calls(fn, (x8,))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        batch()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def main(repeats):
    print(f"# jax {jax.__version__} on {jax.devices()[0].platform}", file=sys.stderr)
    for name, fn, args in workloads():
        # The peer of the same chain evaluated from Python through the quabla package.
        names = (name, "py_chain_f32_1e6") if name == "chain_f32_1e6" else name
        row(names, lambda: median_seconds(fn, args, repeats))

    # The second name is the peer of the same call made from Python through the quabla package.
    row(("jit_call_tiny", "py_jit_call_tiny"),
        lambda: tiny_call_seconds(jax.jit(lambda x: x * 2 + 1), repeats))
    # Our `grad` caches its compiled plan like `jit`, so the peer is jit(grad(f)).
    row("grad_call_tiny",
        lambda: tiny_call_seconds(jax.jit(jax.grad(lambda x: jnp.sum(x * x))), repeats))
    row("first_call_200_nodes", lambda: first_call_seconds(5))
    row("first_call_mlp_value_and_grad", lambda: first_call_mlp(3))
    row("mlp_value_and_grad_1024x64", lambda: mlp_step_seconds(repeats))
    row("trainer_step_mlp", lambda: trainer_step_seconds(5))
    # The peer of our float32 step at precision("float32"): JAX's float32 is native.
    row("mlp_value_and_grad_1024x64_f32_precision_f32",
        lambda: mlp_step_seconds(repeats, jnp.float32))
    ode_workloads(repeats)
    linalg_workloads(repeats)
    optim_workloads()
    import jax_user_programs

    jax_user_programs.run(wants, repeats, median_seconds)


def linalg_workloads(repeats):
    """The linear-algebra rows at 256 x 256 float64 with jax.numpy.linalg, on the matrices the
    Rust side builds: cholesky and eigh of a symmetric positive-definite matrix, solve with one
    right-hand side, the full svd, and the gradient of slogdet's logabsdet."""
    n = 256
    i = np.arange(n, dtype=np.float64)[:, None]
    j = np.arange(n, dtype=np.float64)[None, :]
    a = np.sin(0.37 * i + 0.11 * j) * 0.5 + np.eye(n) * n
    a = jnp.asarray(a)
    spd = a @ a.T / n
    b = jnp.ones((n,))

    def both(factors):
        return jnp.concatenate([f.reshape(-1) for f in factors])

    rows = (
        ("linalg_cholesky_256_f64", jax.jit(jnp.linalg.cholesky), (spd,)),
        ("linalg_solve_256_f64", jax.jit(jnp.linalg.solve), (a, b)),
        # Every factor is kept live, as the Rust rows return them all.
        ("linalg_eigh_256_f64", jax.jit(lambda m: both(jnp.linalg.eigh(m))), (spd,)),
        ("linalg_svd_256_f64",
         jax.jit(lambda m: both(jnp.linalg.svd(m, full_matrices=False))), (a,)),
        ("linalg_grad_slogdet_256_f64",
         jax.jit(jax.grad(lambda m: jnp.linalg.slogdet(m)[1])), (a,)),
    )
    for name, fn, args in rows:
        row(name, lambda: median_seconds(fn, args, repeats))

def lotka_volterra(t, y, th):
    x, z = y[0], y[1]
    return jnp.stack([th[0] * x - th[1] * x * z, th[2] * x * z - th[3] * z])


def robertson(t, y, args):
    a, b, c = y[0], y[1], y[2]
    bc = 1e4 * b * c
    bb = 3e7 * b * b
    return jnp.stack([-0.04 * a + bc, 0.04 * a - bc - bb, bb])


def ode_workloads(repeats):
    """The ODE rows with diffrax: a jitted Dopri5 solve of Lotka-Volterra over [0, 10] at
    rtol 1e-6, atol 1e-9; the gradient of the sum of squares of its final state with respect
    to the 4 parameters; and Kvaerno3 on the stiff Robertson problem over [0, 40] at rtol 1e-4,
    atol 1e-8 (the peer of our rosenbrock23: diffrax has no Rosenbrock method)."""
    try:
        import diffrax
    except ImportError as e:
        print(f"note: diffrax is not installed ({e}); the ode rows have no JAX time", flush=True)
        return

    theta = jnp.asarray([1.5, 1.0, 1.0, 3.0])
    y0 = jnp.asarray([1.0, 1.0])

    def lv_solve(th):
        return diffrax.diffeqsolve(
            diffrax.ODETerm(lotka_volterra), diffrax.Dopri5(), t0=0.0, t1=10.0, dt0=None,
            y0=y0, args=th,
            stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-9))

    if wants("ode_dopri5_lotka_volterra"):
        solve = jax.jit(lambda th: lv_solve(th).ys)
        print(f"workload=ode_dopri5_lotka_volterra "
              f"seconds={median_seconds(solve, (theta,), repeats):.9g}", flush=True)
        stats = jax.jit(lambda th: lv_solve(th).stats)(theta)
        print(f"note: diffrax Dopri5 on ode_dopri5_lotka_volterra takes "
              f"{int(stats['num_accepted_steps'])} accepted and "
              f"{int(stats['num_rejected_steps'])} rejected steps", flush=True)

    grad = jax.jit(jax.grad(lambda th: jnp.sum(lv_solve(th).ys[-1] ** 2)))
    row("ode_dopri5_lotka_volterra_grad", lambda: median_seconds(grad, (theta,), repeats))

    r0 = jnp.asarray([1.0, 0.0, 0.0])

    def robertson_solve(y0):
        return diffrax.diffeqsolve(
            diffrax.ODETerm(robertson), diffrax.Kvaerno3(), t0=0.0, t1=40.0, dt0=None, y0=y0,
            stepsize_controller=diffrax.PIDController(rtol=1e-4, atol=1e-8))

    if wants("ode_rosenbrock23_robertson"):
        stiff = jax.jit(lambda y0: robertson_solve(y0).ys)
        print(f"workload=ode_rosenbrock23_robertson "
              f"seconds={median_seconds(stiff, (r0,), repeats):.9g}", flush=True)
        stats = jax.jit(lambda y0: robertson_solve(y0).stats)(r0)
        print(f"note: ode_rosenbrock23_robertson runs diffrax Kvaerno3 on the JAX side: "
              f"{int(stats['num_accepted_steps'])} accepted and "
              f"{int(stats['num_rejected_steps'])} rejected steps", flush=True)


def mlp_params(width, scale):
    """Weights and biases of a 1-width-width-1 network, deterministic; the hidden and output
    weights are scaled by `scale` (the same values as the Quabla side)."""

    def init(rows, cols, seed):
        return jnp.sin(jnp.linspace(-1.0, 1.0, rows * cols) * seed).reshape(rows, cols)

    return [init(1, width, 1.3), jnp.zeros(width), init(width, width, 2.1) * scale,
            jnp.zeros(width), init(width, 1, 0.7) * scale, jnp.zeros(1)]


def mlp_loss(p, x, y):
    """Mean squared error of the tanh MLP."""
    h = jnp.tanh(x @ p[0] + p[1])
    h = jnp.tanh(h @ p[2] + p[3])
    out = h @ p[4] + p[5]
    return jnp.mean((out - y) ** 2)


def first_call_mlp(repeats):
    """Trace, differentiate, compile and run jit(value_and_grad(loss)) of a 1-16-16-1 tanh MLP
    on 32 points; a fresh scale per repetition defeats compilation caches."""
    xs = jnp.linspace(-1.0, 1.0, 32).reshape(32, 1)
    ys = jnp.sin(xs)
    params = mlp_params(16, 0.25)
    times = []
    for r in range(repeats):
        scale = 1.0 + r * 1e-7

        def loss(p, x, y):
            return mlp_loss(p, x, y * scale)

        step = jax.jit(jax.value_and_grad(loss))
        start = time.perf_counter()
        value, grads = step(params, xs, ys)
        value.block_until_ready()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def mlp_step_seconds(repeats, dtype=jnp.float64):
    """A cached call of jit(value_and_grad(loss)) of a 1-64-64-1 tanh MLP on 1024 points in
    `dtype`: the steady state of a small training loop."""
    xs = jnp.linspace(-1.0, 1.0, 1024).reshape(1024, 1).astype(dtype)
    ys = jnp.sin(xs)
    params = [p.astype(dtype) for p in mlp_params(64, 0.125)]
    step = jax.jit(jax.value_and_grad(mlp_loss))
    jax.block_until_ready(step(params, xs, ys))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(step(params, xs, ys))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def trainer_step_seconds(repeats):
    """An Adam step of the 1-64-64-1 tanh MLP on 1024 points, loss, gradient and update in one
    jitted function whose parameters and moments are donated (the JAX way to train in place),
    per step over 200 steps: the twin of a Quabla `Trainer` step."""
    b1, b2, eps, lr = 0.9, 0.999, 1e-8, 1e-3
    xs = jnp.linspace(-1.0, 1.0, 1024).reshape(1024, 1)
    ys = jnp.sin(xs)

    def step(params, m, v, t, x, y):
        value, grads = jax.value_and_grad(mlp_loss)(params, x, y)
        t = t + 1.0
        m = [b1 * mi + (1 - b1) * g for mi, g in zip(m, grads)]
        v = [b2 * vi + (1 - b2) * g * g for vi, g in zip(v, grads)]
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        params = [p - lr * (mi / bc1) / (jnp.sqrt(vi / bc2) + eps)
                  for p, mi, vi in zip(params, m, v)]
        return params, m, v, t, value

    step = jax.jit(step, donate_argnums=(0, 1, 2, 3))
    params = mlp_params(64, 0.125)
    m = [jnp.zeros_like(p) for p in params]
    v = [jnp.zeros_like(p) for p in params]
    t = jnp.zeros(())
    params, m, v, t, value = step(params, m, v, t, xs, ys)
    jax.block_until_ready(value)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(200):
            params, m, v, t, value = step(params, m, v, t, xs, ys)
        jax.block_until_ready(value)
        times.append((time.perf_counter() - start) / 200)
    return statistics.median(times)


def pinn_init(key):
    """A 1-16-16-1 network, glorot-normal weights (JAX's own generator), zero biases."""
    sizes = (1, 16, 16, 1)
    keys = jax.random.split(key, len(sizes) - 1)
    init = jax.nn.initializers.glorot_normal()
    return [{"w": init(k, (m, n), jnp.float64), "b": jnp.zeros((n,))}
            for k, m, n in zip(keys, sizes[:-1], sizes[1:])]


def pinn_u(params, x):
    h = x.reshape(1, 1)
    for i, layer in enumerate(params):
        h = h @ layer["w"] + layer["b"]
        if i + 1 < len(params):
            h = jnp.tanh(h)
    return h.reshape(())


def pinn_loss(params, xi, xb):
    u_xx = jax.vmap(jax.grad(jax.grad(lambda x: pinn_u(params, x))))(xi)
    residual = u_xx + jnp.pi ** 2 * jnp.sin(jnp.pi * xi)
    boundary = jax.vmap(lambda x: pinn_u(params, x))(xb)
    return jnp.mean(residual ** 2) + jnp.mean(boundary ** 2)


def make_pinn_step():
    """Loss, gradient and an Adam update (numerics.md §8.1, as optax writes it with
    jax.tree_util) in one jitted step; the scheduled rate comes in as an argument."""
    b1, b2, eps = 0.9, 0.999, 1e-8

    def step(params, m, v, t, lr, xi, xb):
        value, grads = jax.value_and_grad(pinn_loss)(params, xi, xb)
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
        def update(p, m, v):
            m_hat = m / (1 - b1 ** t)
            v_hat = v / (1 - b2 ** t)
            return p - lr * m_hat / (jnp.sqrt(v_hat) + eps)
        params = jax.tree_util.tree_map(update, params, m, v)
        return params, m, v, value

    return jax.jit(step)


def optim_workloads():
    xi = jnp.linspace(0.0, 1.0, 34)[1:33]
    xb = jnp.array([0.0, 1.0])
    params = pinn_init(jax.random.PRNGKey(0))
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)

    def lr(step):
        return 1e-2 * 0.5 ** (step / 1000)

    def first_call():
        first = []
        for _ in range(5):
            start = time.perf_counter()
            step = make_pinn_step()  # a new function object: traced and compiled afresh
            out = step(params, zeros, zeros, 1.0, lr(0), xi, xb)
            jax.block_until_ready(out)
            first.append(time.perf_counter() - start)
        return statistics.median(first)

    row("pinn_first_call", first_call)

    def two_thousand_steps():
        step = make_pinn_step()
        jax.block_until_ready(step(params, zeros, zeros, 1.0, lr(0), xi, xb))
        runs = []
        for _ in range(3):
            p, m, v = params, zeros, zeros
            start = time.perf_counter()
            for i in range(2000):
                p, m, v, value = step(p, m, v, float(i + 1), lr(i), xi, xb)
            jax.block_until_ready(p)
            runs.append(time.perf_counter() - start)
        return statistics.median(runs)

    # The second name is the peer of the same steps taken from Python through the package.
    row(("pinn_adam_2000", "py_pinn_adam_2000"), two_thousand_steps)

    from jax.scipy.optimize import minimize

    def rosen(z):
        return (1 - z[0]) ** 2 + 100 * (z[1] - z[0] ** 2) ** 2

    solve = jax.jit(lambda z0: minimize(rosen, z0, method="BFGS").x)
    z0 = jnp.array([-1.2, 1.0])
    row("lbfgs_rosenbrock", lambda: median_seconds(solve, (z0,), DEFAULT_REPEATS))


def scaling_seconds(fn, args, runs, inner):
    """Median seconds of one call, each timing averaging `inner` calls, after a warm-up."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(inner):
            out = fn(*args)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / inner)
    return statistics.median(times)


def sizes(family, values):
    """The sizes of a scaling family, none when `--only` leaves it out."""
    return values if wants(family) else ()


def scaling():
    """The families of `cargo xtask bench --scaling`, the same sizes and functions as our
    `scaling_workloads` example: `scaling=<family> n=<size> seconds=<s>` lines."""

    def report(family, n, seconds):
        print(f"scaling={family} n={n} seconds={seconds:.9g}", flush=True)

    chain_fn = jax.jit(chain)
    for n in sizes("elementwise", (1_000, 10_000, 100_000, 1_000_000, 10_000_000)):
        x = jnp.linspace(-3.0, 3.0, n, dtype=jnp.float32)
        report("elementwise", n, scaling_seconds(chain_fn, (x,), 7, max(1, 1_000_000 // n)))

    matmul = jax.jit(jnp.matmul)
    for n in sizes("matmul", (32, 64, 128, 256, 512, 1024)):
        a = jnp.linspace(-1.0, 1.0, n * n).reshape(n, n)
        args = (a, jnp.sin(a.T))
        report("matmul", n, scaling_seconds(matmul, args, 7, (1 << 27) // (n * n * n) + 1))

    x = jnp.ones((64,), dtype=jnp.float64)
    for n in sizes("first_call", (100, 1_000, 10_000)):
        times = []
        for r in range(3):
            def f(x, r=r):
                for i in range(n // 2):
                    x = jnp.sin(x) * (1.0 + i * 1e-6 + r * 1e-9)
                return x

            start = time.perf_counter()
            jax.jit(f)(x).block_until_ready()
            times.append(time.perf_counter() - start)
        report("first_call", n, statistics.median(times))

    def loss(w, x):
        return jnp.sum(jnp.tanh(w * x))

    per_example = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0)))
    w = jnp.linspace(-1.0, 1.0, 64)
    for n in sizes("vmap_grad", (1, 16, 256, 4_096)):
        xs = jnp.linspace(-2.0, 2.0, n)
        report("vmap_grad", n, scaling_seconds(per_example, (w, xs), 7, max(1, 20_000 // n)))

    x = jnp.linspace(0.1, 0.8, 8, dtype=jnp.float64)
    for n in sizes("first_call_loop", (250, 1_000, 2_000, 4_000, 10_000)):
        times = []
        for r in range(3):
            def body(i, c, r=r):
                for k in range(n // 2):
                    c = jnp.sin(c) * (1.0 + k * 1e-6 + r * 1e-9)
                return c

            def loss(x, body=body):
                return jnp.sum(jax.lax.fori_loop(0, 10, body, x))

            start = time.perf_counter()
            jax.jit(jax.grad(loss))(x).block_until_ready()
            times.append(time.perf_counter() - start)
        report("first_call_loop", n, statistics.median(times))

    def nested(x, depth, r):
        if depth == 0:
            return jnp.sin(x) * (1.0001 + r * 1e-9)
        return jax.lax.fori_loop(0, 1, lambda i, c: nested(c, depth - 1, r), x)

    for n in sizes("first_call_nested", (1, 2, 5, 10, 20, 50)):
        times = []
        for r in range(3):
            def loss(x, r=r):
                return jnp.sum(nested(x, n, r))

            start = time.perf_counter()
            jax.jit(jax.grad(loss))(x).block_until_ready()
            times.append(time.perf_counter() - start)
        report("first_call_nested", n, statistics.median(times))

    for n in sizes("fori", (100, 1_000, 10_000, 100_000, 1_000_000)):
        fori = jax.jit(lambda c, n=n: jax.lax.fori_loop(0, n, lambda i, c: c * 0.999999 + 1e-6, c))
        c = jnp.asarray(1.0, dtype=jnp.float64)
        report("fori", n, scaling_seconds(fori, (c,), 5, max(1, 100_000 // n)))

    loop_state(report)


# 8 * round(2 ** (k / 2)): the powers of two from 8 to 4096 and the half octaves between them.
LOOP_STATE_SIZES = (8, 16, 24, 32, 48, 64, 88, 128, 184, 256, 360, 512, 728, 1024, 1448, 2048, 2896, 4096)
LOOP_STATE_TRIPS = 100


def loop_state(report):
    """The loop-state sweep, the twin of `loop_state` in our scaling_workloads example: 100
    iterations of a `fori_loop` and of a `scan` over a carry of n elements (LOOP_STATE_SIZES),
    held as `[n / 8, 8]`, with an elementwise body `c * 0.999 + sin(c) * 1e-3`, one of cheap
    arithmetic `c * 0.999 + c * c * 1e-3`, and one that multiplies the carry by a fixed 8 x 8
    matrix `w`: `c * 0.999 + sin(c @ w) * 1e-3`. The scan also reads one scalar of `xs` per
    step (added times 1e-3) and stacks the new carry as its output."""
    w = jnp.asarray(np.sin(np.arange(64, dtype=np.float64) * 0.37).reshape(8, 8) * 0.3)
    xs = jnp.linspace(0.0, 1.0, LOOP_STATE_TRIPS)

    def elementwise(c, w):
        return c * 0.999 + jnp.sin(c) * 1e-3

    def arithmetic(c, w):
        return c * 0.999 + (c * c) * 1e-3

    def with_matmul(c, w):
        return c * 0.999 + jnp.sin(c @ w) * 1e-3

    for body_name, body in (("elementwise", elementwise), ("arithmetic", arithmetic),
                            ("matmul", with_matmul)):
        fori_family = f"loop_state_fori_{body_name}"
        scan_family = f"loop_state_scan_{body_name}"

        def fori(c, w, body=body):
            return jax.lax.fori_loop(0, LOOP_STATE_TRIPS, lambda i, c: body(c, w), c)

        def scan(c, w, xs, body=body):
            def step(c, x):
                c = body(c, w) + x * 1e-3
                return c, c

            return jax.lax.scan(step, c, xs)

        fori, scan = jax.jit(fori), jax.jit(scan)
        for n in LOOP_STATE_SIZES:
            c = jnp.linspace(0.1, 0.8, n).reshape(n // 8, 8)
            inner = max(2, 20_000 // n)
            if wants(fori_family):
                report(fori_family, n, scaling_seconds(fori, (c, w), 7, inner))
            if wants(scan_family):
                report(scan_family, n, scaling_seconds(scan, (c, w, xs), 7, inner))


def parse_args(argv):
    """`(scaling, repeats)` from the command line; fills `ONLY` from `--only`."""
    scaling_mode = False
    repeats = DEFAULT_REPEATS
    args = iter(argv)
    for arg in args:
        if arg == "--scaling":
            scaling_mode = True
        elif arg == "--only" or arg.startswith("--only="):
            value = arg[len("--only="):] if arg.startswith("--only=") else next(args, "")
            parts = [part for part in value.split(",") if part]
            if not parts:
                sys.exit("jax_bench.py: `--only` needs a substring of a row name")
            ONLY.extend(parts)
        else:
            repeats = int(arg)
    return scaling_mode, repeats


if __name__ == "__main__":
    scaling_mode, repeats = parse_args(sys.argv[1:])
    if scaling_mode:
        scaling()
    else:
        main(repeats)
