"""Pytrees (api.md §13): nested ``dict``, ``list``, ``tuple``, ``None``, ``NamedTuple`` and
registered classes, traversed in the library's order (dicts by sorted key)."""

import dataclasses as _dataclasses

from ._quabla import _tree as _native

TreeDef = _native.TreeDef
flatten = _native.flatten
flatten_with_path = _native.flatten_with_path
leaves = _native.leaves
map = _native.map
register = _native.register
structure = _native.structure
unflatten = _native.unflatten
_register_dataclass = _native._register_dataclass

__all__ = [
    "TreeDef",
    "flatten",
    "flatten_with_path",
    "leaves",
    "map",
    "register",
    "register_dataclass",
    "structure",
    "unflatten",
]


def register_dataclass(cls=None, data_fields=None, meta_fields=()):
    """Registers a dataclass as a pytree container.

    Works as ``@register_dataclass``, ``@register_dataclass(meta_fields=(...))`` or a direct
    call. ``data_fields`` defaults to every ``__init__`` field not in ``meta_fields``, in
    declaration order; data and meta fields together must name each ``__init__`` field once.
    Meta fields are static: hashable, and part of every trace signature.
    """
    if cls is None:
        return lambda c: register_dataclass(c, data_fields=data_fields, meta_fields=meta_fields)
    if not _dataclasses.is_dataclass(cls) or not isinstance(cls, type):
        raise TypeError(f"register_dataclass needs a dataclass, got {cls!r}")
    init_fields = [f.name for f in _dataclasses.fields(cls) if f.init]
    meta = list(meta_fields)
    data = [f for f in init_fields if f not in meta] if data_fields is None else list(data_fields)
    named = data + meta
    if sorted(named) != sorted(init_fields) or len(set(named)) != len(named):
        raise ValueError(
            f"register_dataclass({cls.__name__}): data_fields {data} and meta_fields {meta} "
            f"must together name each __init__ field ({init_fields}) exactly once"
        )
    _register_dataclass(cls, data, meta)
    return cls
