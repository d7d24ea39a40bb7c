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
