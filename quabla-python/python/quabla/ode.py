"""Differential equations (api.md §18): ``odeint`` with fixed-step (``rk4``, ``heun``,
``euler``) and adaptive (``dopri5``, ``rosenbrock23``) methods, differentiable with respect
to ``y0``, the time span, ``saveat`` times and every array in ``args``."""

from ._quabla import _ode as _native

odeint = _native.odeint

__all__ = ["odeint"]
