"""Optimization (api.md §16): functional optimizers (``init``/``update``), learning-rate
schedules, ``clip_by_global_norm``, L-BFGS, and the ``Trainer`` that keeps parameters,
optimizer state and data resident between steps."""

from ._quabla import _optim as _native

Adam = _native.Adam
AdamW = _native.AdamW
SGD = _native.SGD
LBFGS = _native.LBFGS
Trainer = _native.Trainer
Optimizer = _native.Optimizer
Schedule = _native.Schedule
clip_by_global_norm = _native.clip_by_global_norm
constant = _native.constant
exponential_decay = _native.exponential_decay
cosine_decay = _native.cosine_decay
warmup_cosine_decay = _native.warmup_cosine_decay
piecewise_constant = _native.piecewise_constant

__all__ = [
    "Adam",
    "AdamW",
    "SGD",
    "LBFGS",
    "Trainer",
    "clip_by_global_norm",
    "constant",
    "exponential_decay",
    "cosine_decay",
    "warmup_cosine_decay",
    "piecewise_constant",
]
