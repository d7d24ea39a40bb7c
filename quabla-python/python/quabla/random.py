"""Keyed random numbers (api.md §14): explicit keys, no global state, eager host sampling,
identical numbers on every platform."""

from ._quabla.random import (  # noqa: F401
    Key,
    bernoulli,
    fold_in,
    glorot_normal,
    glorot_uniform,
    he_normal,
    key,
    normal,
    split,
    uniform,
)

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
