"""Keyed random numbers (api.md §14): explicit keys, no global state, eager host sampling,
identical numbers on every platform."""

from ._quabla import _random as _native

Key = _native.Key
bernoulli = _native.bernoulli
fold_in = _native.fold_in
glorot_normal = _native.glorot_normal
glorot_uniform = _native.glorot_uniform
he_normal = _native.he_normal
key = _native.key
normal = _native.normal
split = _native.split
uniform = _native.uniform

__all__ = [
    "Key",
    "bernoulli",
    "fold_in",
    "glorot_normal",
    "glorot_uniform",
    "he_normal",
    "key",
    "normal",
    "split",
    "uniform",
]
