"""Linear algebra and solvers (api.md §17). Dense functions act on the last two axes and
broadcast leading batch axes; every one has derivatives of every order. Results with named
fields are NamedTuples, so they are pytrees."""

from typing import NamedTuple as _NamedTuple

from ._quabla import _linalg as _native


class SlogdetResult(_NamedTuple):
    sign: object
    logabsdet: object


class EighResult(_NamedTuple):
    eigenvalues: object
    eigenvectors: object


class QRResult(_NamedTuple):
    Q: object
    R: object


class SVDResult(_NamedTuple):
    U: object
    S: object
    Vh: object


class LstsqResult(_NamedTuple):
    solution: object
    residuals: object


solve = _native.solve
solve_triangular = _native.solve_triangular
cholesky = _native.cholesky
det = _native.det
inv = _native.inv
norm = _native.norm
matrix_power = _native.matrix_power
pinv = _native.pinv
cg = _native.cg
gmres = _native.gmres
eigvalsh = _native.eigvalsh
expm = _native.expm
lu_factor = _native.lu_factor
lu_solve = _native.lu_solve


def cho_factor(a, lower=False):
    """``(c, lower)``: the Cholesky factor of ``a`` for :func:`cho_solve`, lower (``a = c cᵀ``)
    or upper (``a = cᵀ c``, the default, as SciPy's). Only the lower triangle of ``a`` is
    read; the other triangle of ``c`` is zero."""
    c = _native.cholesky(a)
    return (c, True) if lower else (c.swapaxes(-1, -2), False)


def cho_solve(c_and_lower, b, lower=True):
    """Solves ``a x = b`` from a Cholesky factor: ``cho_solve((c, lower), b)`` with the pair
    :func:`cho_factor` returns (SciPy's form), or ``cho_solve(c, b, lower=True)``."""
    if isinstance(c_and_lower, tuple):
        if len(c_and_lower) != 2:
            raise TypeError("cho_solve: the first argument must be a factor or the pair (c, lower) "
                            "that cho_factor returned")
        c, lower = c_and_lower
        return _native.cho_solve(c, b, bool(lower))
    return _native.cho_solve(c_and_lower, b, lower)


def slogdet(a):
    """``SlogdetResult(sign, logabsdet)`` from LU."""
    return SlogdetResult(*_native.slogdet(a))


def eigh(a):
    """``EighResult(eigenvalues, eigenvectors)`` of the symmetric part of ``a``."""
    return EighResult(*_native.eigh(a))


def qr(a, mode="reduced"):
    """Householder QR: ``QRResult(Q, R)``, or the ``R`` array alone with ``mode="r"``."""
    out = _native.qr(a, mode)
    return out if mode == "r" else QRResult(*out)


def svd(a, full_matrices=False, compute_uv=True):
    """``SVDResult(U, S, Vh)`` with descending ``S``, or ``S`` alone with ``compute_uv=False``."""
    out = _native.svd(a, full_matrices, compute_uv)
    return SVDResult(*out) if compute_uv else out


def lstsq(a, b, return_residuals=False):
    """Least squares (tall ``a``) or minimum norm (wide ``a``) via QR."""
    out = _native.lstsq(a, b, return_residuals)
    return LstsqResult(*out) if return_residuals else out


__all__ = [
    "solve", "solve_triangular", "cholesky", "cho_solve", "slogdet", "det", "inv", "eigh",
    "qr", "svd", "lstsq", "norm", "matrix_power", "pinv", "cg", "gmres", "SlogdetResult",
    "EighResult", "QRResult", "SVDResult", "LstsqResult", "eigvalsh", "expm", "lu_factor",
    "lu_solve", "cho_factor",
]
