"""Shared helpers of the Python test suite."""

import math


def values(t):
    """A tensor (or nested structure of tensors and numbers) as nested Python floats."""
    if hasattr(t, "tolist"):
        return t.tolist()
    if isinstance(t, (list, tuple)):
        return [values(v) for v in t]
    return t


def close(got, want, rtol=1e-7, atol=1e-8):
    """The acceptance tolerance: |got - want| <= atol + rtol * |want|, elementwise; NaN
    matches NaN."""
    got, want = values(got), values(want)
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            close(g, w, rtol, atol)
        return
    if isinstance(want, float) and math.isnan(want):
        assert math.isnan(got), (got, want)
        return
    if isinstance(want, float) and math.isinf(want):
        assert got == want, (got, want)
        return
    assert abs(got - want) <= atol + rtol * abs(want), (got, want)
