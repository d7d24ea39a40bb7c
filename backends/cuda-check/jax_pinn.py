"""The JAX side of the Quabla CUDA device check's PINN comparison.

The network and loss of acceptance section 13 (a 1-16-16-1 tanh network, the residual of
-u'' = pi^2 sin(pi x) at 32 interior points by vmap(grad(grad(u))), plus the boundary values),
trained by Adam with the rate 1e-2 * 0.5 ** (t / 1000), in float32 on the default device (the
GPU), with matmuls at the "highest" precision. Parameters, moments and the step count stay on
the device; one jitted function makes a step, as Quabla's Trainer does.

Prints one JSON line: step_seconds (median over three runs of --steps steps), first_call_seconds,
device, jax_version.
"""

import argparse
import json
import statistics
import time

import jax

jax.config.update("jax_default_matmul_precision", "highest")
import jax.numpy as jnp  # noqa: E402

SIZES = (1, 16, 16, 1)
B1, B2, EPS = 0.9, 0.999, 1e-8


def init(key):
    keys = jax.random.split(key, len(SIZES) - 1)
    glorot = jax.nn.initializers.glorot_normal()
    return [
        {"w": glorot(k, (m, n), jnp.float32), "b": jnp.zeros((n,), jnp.float32)}
        for k, m, n in zip(keys, SIZES[:-1], SIZES[1:])
    ]


def u(params, x):
    h = x.reshape(1, 1)
    for i, layer in enumerate(params):
        h = h @ layer["w"] + layer["b"]
        if i + 1 < len(params):
            h = jnp.tanh(h)
    return h.reshape(())


def loss(params, xi, xb):
    u_xx = jax.vmap(jax.grad(jax.grad(lambda x: u(params, x))))(xi)
    residual = u_xx + jnp.pi**2 * jnp.sin(jnp.pi * xi)
    boundary = jax.vmap(lambda x: u(params, x))(xb)
    return jnp.mean(residual**2) + jnp.mean(boundary**2)


def make_step():
    def step(params, m, v, t, xi, xb):
        value, grads = jax.value_and_grad(loss)(params, xi, xb)
        t = t + 1.0
        lr = 1e-2 * 0.5 ** ((t - 1.0) / 1000.0)
        m = jax.tree_util.tree_map(lambda m, g: B1 * m + (1 - B1) * g, m, grads)
        v = jax.tree_util.tree_map(lambda v, g: B2 * v + (1 - B2) * g * g, v, grads)

        def update(p, m, v):
            m_hat = m / (1 - B1**t)
            v_hat = v / (1 - B2**t)
            return p - lr * m_hat / (jnp.sqrt(v_hat) + EPS)

        return jax.tree_util.tree_map(update, params, m, v), m, v, t, value

    return jax.jit(step, donate_argnums=(0, 1, 2, 3))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    xi = jnp.linspace(0.0, 1.0, 34, dtype=jnp.float32)[1:33]
    xb = jnp.array([0.0, 1.0], jnp.float32)

    def fresh():
        params = init(jax.random.PRNGKey(0))
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return params, zeros, jax.tree_util.tree_map(jnp.zeros_like, params), jnp.float32(0.0)

    params, m, v, t = fresh()
    start = time.perf_counter()
    step = make_step()
    params, m, v, t, value = step(params, m, v, t, xi, xb)
    jax.block_until_ready(value)
    first = time.perf_counter() - start

    runs = []
    for _ in range(3):
        params, m, v, t = fresh()
        for _ in range(10):
            params, m, v, t, value = step(params, m, v, t, xi, xb)
        jax.block_until_ready(value)
        start = time.perf_counter()
        for _ in range(args.steps):
            params, m, v, t, value = step(params, m, v, t, xi, xb)
        jax.block_until_ready(value)
        runs.append((time.perf_counter() - start) / args.steps)
    print(
        json.dumps(
            {
                "step_seconds": statistics.median(runs),
                "first_call_seconds": first,
                "final_loss": float(value),
                "device": str(jax.devices()[0]),
                "jax_version": jax.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
