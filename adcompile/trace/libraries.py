"""Which code and objects belong to a library (adcompile, NumPy, the standard
library ...), not looked into when ``captures`` scans what a function reads; and
what a class defines and its methods read."""

from __future__ import annotations

import sys
import sysconfig
import types
from typing import Any

from .rebind import names_read

#: adcompile's layers (``ad.nn``, ``ad.MLP``): looked into, they hold a model.
NN_MODULE = "adcompile.nn"

_LIBRARY_MODULES = (
    "adcompile",
    "numpy",
    "scipy",
    "sympy",
    "numba",
    "math",
    "builtins",
    "functools",
    "torch",
    "jax",
)
_LIBRARY_PATHS = tuple(
    p for p in {sysconfig.get_paths().get(k) for k in ("stdlib", "purelib", "platlib")} if p
)


def is_library(fn: types.FunctionType) -> bool:
    module = (fn.__globals__.get("__name__") or "").split(".")[0]
    return module in _LIBRARY_MODULES or fn.__code__.co_filename.startswith(_LIBRARY_PATHS)


def attribute_names(obj: Any) -> set[str]:
    """The attributes ``obj`` has in its own ``__dict__`` and its classes'."""
    names = set(getattr(obj, "__dict__", None) or ())
    for c in (obj if isinstance(obj, type) else type(obj)).__mro__[:-1]:
        names.update(c.__dict__)
    return names


def class_attr(cls: type, name: str) -> Any:
    """``name`` as defined on ``cls`` or a base (unbound: a property, a function ...)."""
    for c in cls.__mro__:
        if name in c.__dict__:
            return c.__dict__[name]
    return None


def library_module(m: types.ModuleType) -> bool:
    return (m.__name__ or "").split(".")[
        0
    ] in _LIBRARY_MODULES or m.__name__ in sys.builtin_module_names


def library_object(obj: Any) -> bool:
    """Whether ``obj`` belongs to a library (NumPy, adcompile ...): not looked into.
    adcompile's layers (``ad.nn``, ``ad.MLP``) are looked into: they hold a model."""
    t = obj if isinstance(obj, type) else type(obj)
    module = t.__module__ or ""
    if module == NN_MODULE:
        return False
    return module.split(".")[0] in _LIBRARY_MODULES or module == "builtins"


def method_reads(cls: type, attrs: frozenset[str] | set[str]) -> frozenset[str]:
    """``attrs`` and the attribute names that the methods of ``cls`` among them read,
    and those that theirs read in turn (``m.weights()`` reads ``self.w``)."""
    seen, todo = set(attrs), list(attrs)
    while todo:
        found = class_attr(cls, todo.pop())
        if isinstance(found, (staticmethod, classmethod)):
            found = found.__func__
        if isinstance(found, types.FunctionType) and not is_library(found):
            new = names_read(found.__code__)[1] - seen
            seen |= new
            todo.extend(new)
    return frozenset(seen)


#: Special methods that an operation of the traced function does not call.
_NOT_OPERATIONS = frozenset(
    {"__init__", "__new__", "__del__", "__init_subclass__", "__set_name__"}
    | {"__repr__", "__str__", "__setattr__", "__delattr__", "__getstate__"}
    | {"__setstate__", "__reduce__", "__reduce_ex__", "__copy__", "__deepcopy__"}
)


def special_methods(cls: type) -> frozenset[str]:
    """The special methods of the user's classes among ``cls`` and its bases that
    Python calls for an operation on its objects (``bag[1]``: ``__getitem__``;
    ``len(bag)``, ``-v``, ``float(v)`` ...): the traced function reads them by no name."""
    names = set()
    for c in cls.__mro__:
        if library_object(c):
            continue
        for n, v in c.__dict__.items():
            special = n.startswith("__") and n.endswith("__") and n not in _NOT_OPERATIONS
            if special and isinstance(v, (types.FunctionType, property)):
                names.add(n)
    return frozenset(names)
