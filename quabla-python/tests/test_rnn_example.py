"""The RNN example (``quabla-python/examples/rnn_scan.py``) runs: its ``scan(f, init, xs)``
loss and gradient equal those of the same network written as a Python loop, and training
lowers the loss."""

import importlib.util
import pathlib

import numpy as np

import quabla as qb

_PATH = pathlib.Path(__file__).resolve().parents[1] / "examples" / "rnn_scan.py"
_spec = importlib.util.spec_from_file_location("rnn_scan", _PATH)
rnn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rnn)


def test_scan_over_xs_agrees_with_the_python_loop():
    xs, params = rnn.sequence(), rnn.init()
    v, g = qb.value_and_grad(rnn.loss)(params, xs)
    w, h = qb.value_and_grad(rnn.loss_unrolled)(params, xs)
    np.testing.assert_allclose(v.item(), w.item(), rtol=1e-12)
    for name in params:
        np.testing.assert_allclose(np.asarray(g[name]), np.asarray(h[name]), rtol=1e-10, atol=1e-13)


def test_training_lowers_the_loss():
    lines = []
    rnn.main(out=lines.append)
    first = float(lines[0].split("=")[1])
    last = float(lines[-1].split("=")[1])
    assert lines[0].startswith("initial_loss=") and lines[-1].startswith("final_loss=")
    assert len(lines) == 2 + rnn.TRAIN_STEPS // 100
    assert np.isfinite(last) and last < 0.2 * first, lines
