"""The MLP classifier example (``quabla-python/examples/mlp_classifier.py``) runs: one jitted
epoch (the shuffled minibatch loop with traced gathers inside ``jit``) equals the eager epoch,
and training separates the three classes."""

import importlib.util
import pathlib

import numpy as np

import quabla as qb

_PATH = pathlib.Path(__file__).resolve().parents[1] / "examples" / "mlp_classifier.py"
_spec = importlib.util.spec_from_file_location("mlp_classifier", _PATH)
mlp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mlp)


def test_jitted_epoch_equals_the_eager_epoch():
    x, y = mlp.data()
    w = mlp.init()
    batches = mlp.shuffled_batches(qb.random.key(5))
    assert sorted(np.asarray(batches).reshape(-1).tolist()) == list(range(mlp.EXAMPLES))
    we, le = mlp.epoch(w, batches, x, y)
    wj, lj = qb.jit(mlp.epoch)(w, batches, x, y)
    np.testing.assert_allclose(np.asarray(wj), np.asarray(we), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(lj.item(), le.item(), rtol=1e-12)


def test_training_separates_the_classes():
    lines = []
    mlp.main(out=lines.append)
    assert len(lines) == 2 + mlp.EPOCHS
    first = float(lines[0].split("initial_accuracy=")[1])
    last = float(lines[-1].split("=")[1])
    assert last >= 0.9 and last > first, lines
