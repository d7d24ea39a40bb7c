"""The Python rows of `cargo xtask bench`: the same workloads as the Rust rows, timed from
Python through the package (`workload=<name> seconds=<s>` lines; the JAX script prints the
peer rows under the same names)."""

import math
import statistics
import sys
import time

import quabla as qb


def median_seconds(fn, repeats=15):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def jit_call_tiny():
    tiny = qb.jit(lambda x: x * 2 + 1)
    x8 = qb.ones((8,), dtype=qb.float32)
    tiny(x8)
    calls = 20000

    def batch():
        for _ in range(calls):
            tiny(x8)
    return median_seconds(batch) / calls


def chain_f32_1e6():
    x = qb.linspace(-3.0, 3.0, 1_000_000, dtype=qb.float32)
    return median_seconds(lambda: qb.sin(x) ** 2 + qb.cos(x))


def pinn_adam_2000():
    """The PINN tutorial's 2000 Adam steps, each one `Trainer.step()` (loss, gradient and
    update in one compiled plan) called from Python."""
    sizes = (1, 16, 16, 1)
    keys = qb.random.split(qb.random.key(0), len(sizes) - 1)
    params = [{"w": qb.random.glorot_normal(k, (m, n)), "b": qb.zeros((n,))}
              for k, m, n in zip(keys, sizes[:-1], sizes[1:])]

    def u(params, x):
        h = x.reshape(1, 1)
        for i, layer in enumerate(params):
            h = h @ layer["w"] + layer["b"]
            if i < len(params) - 1:
                h = qb.tanh(h)
        return h.reshape(())

    def loss(params, xi, xb):
        u_xx = qb.vmap(qb.grad(qb.grad(lambda t: u(params, t))))(xi)
        r = u_xx + math.pi ** 2 * qb.sin(math.pi * xi)
        return qb.mean(r ** 2) + qb.mean(qb.vmap(lambda t: u(params, t))(xb) ** 2)

    xi = qb.linspace(0.0, 1.0, 34)[1:-1]
    xb = qb.array([0.0, 1.0])
    runs = []
    for _ in range(3):
        trainer = qb.optim.Trainer(loss, params, qb.optim.Adam(qb.optim.exponential_decay(1e-2, 1000, 0.5)), xi, xb)
        trainer.step()
        start = time.perf_counter()
        for _ in range(2000):
            trainer.step()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main(only):
    for name, fn in (("py_jit_call_tiny", jit_call_tiny), ("py_chain_f32_1e6", chain_f32_1e6),
                     ("py_pinn_adam_2000", pinn_adam_2000)):
        if not only or any(part in name for part in only):
            print(f"workload={name} seconds={fn():.9g}", flush=True)


if __name__ == "__main__":
    # `--only a,b`: only the rows whose name contains one of the substrings.
    args = sys.argv[1:]
    if args and (args[0] != "--only" or len(args) != 2):
        sys.exit("usage: bench_python.py [--only SUBSTRING[,SUBSTRING...]]")
    main([part for part in args[1].split(",") if part] if args else [])
