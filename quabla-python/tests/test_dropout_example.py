"""The dropout example (``quabla-python/examples/dropout.py``) runs: the mask drawn inside the
Trainer's compiled step is the one an eager call draws with the same key, and training lowers
the loss."""

import importlib.util
import pathlib

import numpy as np

import quabla as qb

_PATH = pathlib.Path(__file__).resolve().parents[1] / "examples" / "dropout.py"
_spec = importlib.util.spec_from_file_location("dropout", _PATH)
dropout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dropout)


def test_the_compiled_step_draws_the_eager_mask():
    trainer, x, y, base = dropout.train(steps=3)
    # The trainer's loss is computed in compiled code at its current parameters and latest
    # batch, the key among it: the eager loss with that key must give the same bits.
    key = dropout.step_key(base, 7)
    trainer.step(key)
    params = trainer.params
    eager = dropout.loss(params, x, y, key)
    np.testing.assert_array_equal(np.asarray(trainer.loss()), np.asarray(eager))
    # Another key draws another mask, so the comparison can fail.
    other = dropout.loss(params, x, y, dropout.step_key(base, 8))
    assert float(other) != float(eager)


def test_the_mask_keeps_the_expected_fraction():
    keep = qb.random.bernoulli(dropout.step_key(qb.random.key(1), 0), dropout.KEEP, (200, 50))
    fraction = float(qb.mean(keep.astype(qb.float64)))
    # 10^4 draws: the standard deviation of the fraction is 0.004.
    assert abs(fraction - dropout.KEEP) < 0.02, fraction


def test_training_lowers_the_loss():
    lines = []
    dropout.main(out=lines.append)
    first = float(lines[0].split("=")[1])
    last = float(lines[-1].split("=")[1])
    assert lines[0].startswith("initial_loss=") and lines[-1].startswith("final_loss=")
    assert np.isfinite(last) and last < 0.2 * first, lines
