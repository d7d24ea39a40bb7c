"""Keyed random numbers (api.md §14): explicit keys, no global state, identical numbers on
every platform. A `Key` samples on the host; its int64 key tensor (`key_data`, or a `Key`
passed as a traced argument of a transform) gives the same numbers inside `jit`, per example
under `vmap` and in loop bodies."""

from ._quabla import _random as _native

Key = _native.Key
bernoulli = _native.bernoulli
categorical = _native.categorical
choice = _native.choice
fold_in = _native.fold_in
glorot_normal = _native.glorot_normal
glorot_uniform = _native.glorot_uniform
he_normal = _native.he_normal
key = _native.key
key_data = _native.key_data
normal = _native.normal
permutation = _native.permutation
randint = _native.randint
split = _native.split
truncated_normal = _native.truncated_normal
uniform = _native.uniform
wrap_key_data = _native.wrap_key_data

__all__ = [
    "Key",
    "bernoulli",
    "categorical",
    "choice",
    "fold_in",
    "glorot_normal",
    "glorot_uniform",
    "he_normal",
    "key",
    "key_data",
    "normal",
    "permutation",
    "randint",
    "split",
    "truncated_normal",
    "uniform",
    "wrap_key_data",
]
