"""A recurrent network over a sequence with ``qb.scan(f, init, xs)``.

An Elman RNN ``h_t = tanh(W_h h_{t-1} + W_x x_t + b)`` reads a noisy sine wave one sample at a
time and predicts the next sample with ``w_o . h_t``. The step function receives each time
step's slice of the pytree ``xs = {"x": inputs, "target": targets}`` directly (no one-hot
masks, no traced indexing). The loss and its gradient come from one jitted
``value_and_grad`` through the scan, and plain gradient descent trains the weights. Prints
``initial_loss=<l>``, ``step=<k> loss=<l>`` every 100 steps and ``final_loss=<l>``; the tests
(``quabla-python/tests/test_rnn_example.py``) check the gradient against the same network
written as a Python loop, and the loss's decrease.

    python quabla-python/examples/rnn_scan.py
"""

import math

import quabla as qb

HIDDEN = 8
STEPS = 40
TRAIN_STEPS = 300
RATE = 0.1


def sequence():
    """``{"x": inputs [T, 1], "target": targets [T]}``: a sine wave with a little noise, and
    the next sample of the clean wave."""
    t = qb.linspace(0.0, 4.0 * math.pi, STEPS + 1)
    wave = qb.sin(t)
    noise = qb.random.normal(qb.random.key(7), (STEPS,))
    return {"x": (wave[:STEPS] + 0.05 * noise).reshape(STEPS, 1), "target": wave[1:]}


def init():
    """Small random weights ``{"wh", "wx", "b", "wo"}``."""
    k = qb.random.split(qb.random.key(0), 4)
    return {
        "wh": 0.3 * qb.random.normal(k[0], (HIDDEN, HIDDEN)),
        "wx": 0.5 * qb.random.normal(k[1], (HIDDEN, 1)),
        "b": 0.1 * qb.random.normal(k[2], (HIDDEN,)),
        "wo": 0.5 * qb.random.normal(k[3], (HIDDEN,)),
    }


def cell(h, x, target, wh, wx, b, wo):
    """One time step: the new hidden state and the squared error of its prediction."""
    h = qb.tanh(wh @ h + wx @ x + b)
    return h, (qb.dot(wo, h) - target) ** 2


def loss(params, xs):
    """The mean squared error over the sequence, by ``scan`` over ``xs``."""
    def step(h, x, wh, wx, b, wo):
        return cell(h, x["x"], x["target"], wh, wx, b, wo)

    weights = (params["wh"], params["wx"], params["b"], params["wo"])
    _, errors = qb.scan(step, qb.zeros((HIDDEN,)), xs, operands=weights)
    return qb.mean(errors)


def loss_unrolled(params, xs):
    """The same loss as a Python loop over the steps (the tests' reference)."""
    h, total = qb.zeros((HIDDEN,)), 0.0
    for t in range(STEPS):
        h, e = cell(h, xs["x"][t], xs["target"][t],
                    params["wh"], params["wx"], params["b"], params["wo"])
        total = total + e
    return total / STEPS


def main(out=print):
    xs = sequence()
    params = init()
    step = qb.jit(qb.value_and_grad(loss))
    value = None
    for k in range(TRAIN_STEPS + 1):
        value, grads = step(params, xs)
        if k == 0:
            out(f"initial_loss={value.item()}")
        elif k % 100 == 0:
            out(f"step={k} loss={value.item()}")
        if k == TRAIN_STEPS:
            break
        params = {name: params[name] - RATE * grads[name] for name in params}
    out(f"final_loss={value.item()}")
    return params


if __name__ == "__main__":
    main()
