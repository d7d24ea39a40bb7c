"""Dropout inside a jitted training step.

A one-hidden-layer network fits ``sin(3x)`` on ``[-1, 1]`` with inverted dropout on its hidden
layer. The ``Trainer`` compiles its step once; the dropout mask is drawn inside that compiled
step from a key passed in with the batch (``batch_argnums=(2,)``), a fresh one per step
(``fold_in(base, step)``), so the step never leaves compiled code for random numbers and each
mask is the one an eager call of the loss with the same key draws. Prints
``initial_loss=<l>`` and ``final_loss=<l>`` (the loss without dropout);
``quabla-python/tests/test_dropout_example.py`` checks that the compiled step's loss equals the
eager loss with the same key and that training lowers the loss.

    python quabla-python/examples/dropout.py
"""

import quabla as qb

R = qb.random

KEEP = 0.8  # the probability of keeping a hidden unit
HIDDEN = 32
STEPS = 500


def init(key):
    """Glorot-normal weights, zero biases."""
    k1, k2 = R.split(key)
    return {
        "w1": R.glorot_normal(k1, (1, HIDDEN)),
        "b1": qb.zeros((HIDDEN,)),
        "w2": R.glorot_normal(k2, (HIDDEN, 1)),
        "b2": qb.zeros((1,)),
    }


def predict(p, x, key=None):
    """The network's output, with inverted dropout on the hidden layer when a key is given."""
    h = qb.tanh(x @ p["w1"] + p["b1"])
    if key is not None:
        keep = R.bernoulli(key, KEEP, h.shape)
        h = qb.where(keep, h / KEEP, 0.0)
    return h @ p["w2"] + p["b2"]


def loss(p, x, y, key):
    """The training loss: mean squared error with dropout."""
    return qb.mean((predict(p, x, key) - y) ** 2)


def eval_loss(p, x, y):
    """The loss without dropout."""
    return qb.mean((predict(p, x) - y) ** 2)


def data():
    x = qb.linspace(-1.0, 1.0, 64).reshape(64, 1)
    return x, qb.sin(3.0 * x)


def step_key(base, step):
    """The key tensor of step ``step``'s dropout mask."""
    return R.key_data(R.fold_in(base, step))


def train(steps=STEPS):
    """Trains for ``steps`` steps; returns the trainer, the data and the key base."""
    x, y = data()
    init_key, base = R.split(R.key(0))
    trainer = qb.optim.Trainer(
        loss, init(init_key), qb.optim.Adam(0.05), x, y, step_key(base, 0), batch_argnums=(2,)
    )
    for step in range(steps):
        trainer.step(step_key(base, step))
    return trainer, x, y, base


def main(out=print):
    x, y = data()
    init_key, _ = R.split(R.key(0))
    out(f"initial_loss={float(eval_loss(init(init_key), x, y)):.6f}")
    trainer, x, y, _ = train()
    out(f"final_loss={float(eval_loss(trainer.params, x, y)):.6f}")


if __name__ == "__main__":
    main()
