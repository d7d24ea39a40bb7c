"""Quabla: a differentiable array library with composable transforms.

Eager arrays (``qb.array``), functions traced into a tensor IR, and transforms that are
graph-to-graph rewrites (``grad``, ``jvp``, ``vjp``, ``jacobian``, ``hessian``, ``vmap``,
``jit``), so they compose to any order. Every computation runs in the Rust library; this
package adapts Python values to it.
"""

from . import _quabla
from ._quabla import *  # noqa: F401,F403  (the array library)
from ._quabla import (
    Tensor,
    TraceTensor,
    TensorView,
    ShapeDtype,
    dtype,
    float32,
    float64,
    bool_,
    int32,
    int64,
    __version__,
    _grad,
    _value_and_grad,
    _jit,
    _vmap,
)
from ._errors import (
    QuablaError,
    RetraceWarning,
    TracerError,
    UnsupportedOperationError,
)
from . import tree, random, optim, linalg, ode, distributed  # noqa: E402

import abc as _abc
import math as _math

# Constants a port reaches for (as in NumPy and jax.numpy): Python floats, so weak scalars.
pi = _math.pi
e = _math.e
inf = _math.inf
nan = _math.nan
newaxis = None

# Aliases (api.md): the same function objects.
remainder = mod  # noqa: F405


def scan(f, init, xs=None, length=None, *, operands=None, reverse=False, unroll=False):
    """JAX's ``scan`` in two forms. With ``xs`` (a pytree of arrays sharing a leading
    extent): ``(carry, y) = f(carry, x, *operands)`` where ``x`` is slice ``k`` of every array
    of ``xs``, for each ``k`` (from the last with ``reverse=True``); returns the final carry and
    the pytree of ``y``s stacked on a new leading axis. Without ``xs``, the indexed form
    (api.md §11): ``(carry, y) = f(carry, i, *operands)`` for ``i`` in ``range(length)``.
    The carry is one array or a pytree of floating or integer arrays (a random key next to
    float state); traced values the step reads enter through ``operands``."""
    if xs is None:
        if length is None:
            raise TypeError("scan needs xs, or length= for the indexed form f(carry, i)")
        if reverse:
            raise ValueError("scan: reverse=True needs xs; the indexed form counts up")
        return _quabla.scan(f, init, length=length, operands=operands, unroll=unroll)
    leaves, xs_def = tree.flatten(xs)
    y_defs = []

    def step(carry, x_leaves, *ops):
        out = f(carry, tree.unflatten(xs_def, x_leaves), *ops)
        if not isinstance(out, tuple) or len(out) != 2:
            raise TypeError("the scan function must return a pair (carry, y)")
        y_leaves, y_def = tree.flatten(out[1])
        y_defs.append(y_def)
        return out[0], y_leaves

    if length is not None and leaves and len(leaves[0]) != length:
        raise ValueError(
            f"scan: length={length} differs from the leading extent {len(leaves[0])} of xs"
        )
    carry, ys = _quabla._scan_over(
        step, init, leaves, operands=operands, reverse=reverse, unroll=unroll
    )
    # (`any` is quabla's here, not the builtin.)
    for d in y_defs:
        if d != y_defs[0]:
            raise TypeError("scan: the per-step output y must keep one pytree structure")
    return carry, tree.unflatten(y_defs[0], ys)


def concatenate(arrays, axis=0):
    """NumPy's name of :func:`concat`: joins ``arrays`` along an existing ``axis`` (default 0)."""
    return concat(arrays, axis)  # noqa: F405


class Array(_abc.ABC):
    """Abstract base of every Quabla array: ``isinstance(x, qb.Array)``."""


Array.register(Tensor)
Array.register(TraceTensor)
Array.register(TensorView)


def _decorator_or_call(build, fun, kwargs):
    """``build(fun, **kwargs)``, or a decorator when only keyword arguments were given."""
    if fun is None:
        return lambda f: build(f, **kwargs)
    return build(fun, **kwargs)


def grad(fun=None, argnums=0, has_aux=False):
    """Reverse-mode gradient of a rank-0 floating output with respect to ``argnums``."""
    return _decorator_or_call(_grad, fun, dict(argnums=argnums, has_aux=has_aux))


def value_and_grad(fun=None, argnums=0, has_aux=False):
    """``(value, grads)``, or ``((value, aux), grads)`` with ``has_aux=True``."""
    return _decorator_or_call(_value_and_grad, fun, dict(argnums=argnums, has_aux=has_aux))


def jit(fun=None, device=None, static_argnums=(), max_traces=8, static_argnames=(), precision=None,
        check_nans=False, donate_argnums=()):
    """Traces ``fun`` once per signature, compiles the plan and caches ``max_traces`` plans.

    ``donate_argnums`` is accepted as in JAX; a Python caller holds its arguments while the call
    runs, so they are lent, never written, and stay valid (docs/python/optim.md)."""
    return _decorator_or_call(
        _jit,
        fun,
        dict(
            device=device,
            static_argnums=static_argnums,
            max_traces=max_traces,
            static_argnames=static_argnames,
            precision=precision,
            check_nans=check_nans,
            donate_argnums=donate_argnums,
        ),
    )


def vmap(fun, in_axes=0, out_axes=0):
    """Vectorizing map over the axes ``in_axes`` of the arguments."""
    return _vmap(fun, in_axes=in_axes, out_axes=out_axes)


_NOT_IN_ALL = {"sum", "max", "min", "any", "all", "abs", "round", "random"}

__all__ = sorted(
    name
    for name in list(globals())
    if not name.startswith("_") and name not in _NOT_IN_ALL and name not in {"abc", "math"}
)
