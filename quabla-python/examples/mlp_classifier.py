"""An MLP classifier trained with shuffled minibatches, one jitted call per epoch.

Three Gaussian blobs in the plane, labelled 0, 1, 2 (int64). A one-hidden-layer network gives
logits; the loss picks each example's log-probability at its label with ``take_along_axis``,
and accuracy compares ``argmax`` of the logits with the labels. Each epoch draws a permutation
of the examples on the host (``argsort`` of uniform samples), reshapes it into
``[batches, batch]``, and runs the whole minibatch loop inside ``jit``: ``scan`` hands each step
one row of indices, which gather the batch from the data with a traced index (``x[idx]``), and
the step applies one gradient-descent update to the flat weight vector. Prints
``initial_loss=<l> initial_accuracy=<a>``, one ``epoch=<k> loss=<l> accuracy=<a>`` line per
epoch and ``final_accuracy=<a>``; ``quabla-python/tests/test_mlp_example.py`` checks that the
jitted epoch equals the eager one and that training separates the classes.

    python quabla-python/examples/mlp_classifier.py
"""

import math

import numpy as np

import quabla as qb

PER_CLASS = 40
CLASSES = 3
HIDDEN = 16
BATCH = 20
EPOCHS = 8
RATE = 0.3
EXAMPLES = PER_CLASS * CLASSES
# The lengths of W1 [2, H], b1 [H], W2 [H, C], b2 [C] in the flat weight vector.
SIZES = (2 * HIDDEN, HIDDEN, HIDDEN * CLASSES, CLASSES)


def data():
    """Points ``[N, 2]`` (float64) and labels ``[N]`` (int64)."""
    angles = 2 * math.pi * np.repeat(np.arange(CLASSES), PER_CLASS) / CLASSES
    centers = 2.0 * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    noise = 0.6 * qb.random.normal(qb.random.key(3), (EXAMPLES, 2))
    return qb.asarray(centers) + noise, qb.asarray(np.repeat(np.arange(CLASSES), PER_CLASS))


def init():
    """Small random weights, flattened into one vector (the carry of the minibatch loop)."""
    return 0.5 * qb.random.normal(qb.random.key(0), (sum(SIZES),))


def logits(w, x):
    bounds = np.cumsum((0,) + SIZES)
    w1, b1, w2, b2 = (w[int(a):int(b)] for a, b in zip(bounds[:-1], bounds[1:]))
    hidden = qb.tanh(x @ w1.reshape(2, HIDDEN) + b1)
    return hidden @ w2.reshape(HIDDEN, CLASSES) + b2


def loss(w, x, y):
    """The mean cross-entropy: each example's log-probability picked at its label."""
    logp = qb.log_softmax(logits(w, x), axis=1)
    return -qb.mean(qb.take_along_axis(logp, y.reshape(-1, 1), axis=1))


def accuracy(w, x, y):
    return qb.mean((qb.argmax(logits(w, x), axis=1) == y).astype(qb.float64))


def epoch(w, batches, x, y):
    """A gradient-descent step per row of ``batches`` (``[steps, BATCH]`` indices)."""
    def step(w, idx, x, y):
        value, grad = qb.value_and_grad(loss)(w, x[idx], y[idx])
        return w - RATE * grad, value

    w, losses = qb.scan(step, w, batches, operands=(x, y))
    return w, qb.mean(losses)


def shuffled_batches(key):
    order = qb.argsort(qb.random.uniform(key, (EXAMPLES,)))
    return order.reshape(EXAMPLES // BATCH, BATCH)


def main(out=print):
    x, y = data()
    w = init()
    out(f"initial_loss={loss(w, x, y).item()} initial_accuracy={accuracy(w, x, y).item()}")
    jitted = qb.jit(epoch)
    for k, key in enumerate(qb.random.split(qb.random.key(1), EPOCHS)):
        w, mean_loss = jitted(w, shuffled_batches(key), x, y)
        out(f"epoch={k + 1} loss={mean_loss.item()} accuracy={accuracy(w, x, y).item()}")
    out(f"final_accuracy={accuracy(w, x, y).item()}")
    return w


if __name__ == "__main__":
    main()
