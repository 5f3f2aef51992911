"""New float arrays made while a function is traced.

``z = np.zeros(n); z[0] = x[0] ** 2; z[1:] = ...`` builds an array by writing
traced values into it. ``np.zeros`` takes no array argument, so NumPy's
dispatch (``__array_function__``) never sees it, and it answers a plain float
array, which cannot hold a traced value.

While :func:`new_arrays_in` is active, the names of the traced function's
module that hold NumPy (``np``, ``numpy``) hold a facade of it instead, whose
``zeros``, ``ones``, ``empty`` and ``full`` answer a constant of the trace for
a float64 array made in the tracing thread (an ``ArrayValue`` of its own, so
each write is a functional update, ``ir.array_index.setitem``); names holding
those functions themselves (``from numpy import zeros``) hold the facade's.
``np.empty``'s array holds zeros (any content is NumPy's answer for it). The
user's code alone sees the facade: NumPy, SciPy and every other module keep
their own ``np`` (their C and Cython code makes its buffers with it), and other
threads, other dtypes and ``like=`` get NumPy's own answer. The names are
restored when the last trace using that module ends.

Traced element by element, the arrays hold Values (:func:`values_made`): an
array of constants, into which ``z[i] = z[i - 1] * 0.5 + x[i]`` writes a Value.
"""

from __future__ import annotations

import functools
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .arrays import ArrayTrace
from .tensor import ValueArray
from .value import constant

_ORIGINAL: dict[str, Callable] = {n: getattr(np, n) for n in ("zeros", "ones", "empty", "full")}
_local = threading.local()
_lock = threading.Lock()
_patched: dict[int, list] = {}  # id(module globals) -> [traces using it, (name, value)...]


def _wrapper(name: str) -> Callable:
    original = _ORIGINAL[name]
    fill = _ORIGINAL["zeros"] if name == "empty" else original

    @functools.wraps(original)
    def make(*args: Any, **kwargs: Any) -> Any:
        rec: ArrayTrace | Callable | None = getattr(_local, "trace", None)
        if rec is None or kwargs.get("like") is not None:
            return original(*args, **kwargs)
        arr = fill(*args, **kwargs)
        if not isinstance(arr, np.ndarray) or arr.dtype != np.float64:
            return arr
        if not isinstance(rec, ArrayTrace):  # (element by element: ``values_made``)
            return rec(arr)
        made = rec.const(arr)
        made.kind = "made"  # (a 0-d one too is an array, written in place)
        return made

    return make


_WRAPPERS = {name: _wrapper(name) for name in _ORIGINAL}


class _NumPyFacade(types.ModuleType):
    """NumPy, but for the four functions above (module doc)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    def __dir__(self) -> list[str]:
        return dir(np)


FACADE = _NumPyFacade("numpy", np.__doc__)
for _name, _fn in _WRAPPERS.items():
    setattr(FACADE, _name, _fn)
_SWAP = {id(np): FACADE, **{id(fn): _WRAPPERS[n] for n, fn in _ORIGINAL.items()}}


def _user_globals(fun: Any) -> dict | None:
    """The module globals of the user's function (of a method, a callable object)."""
    while hasattr(fun, "user_function"):  # (adcompile's wrapper of it: ``arguments``)
        fun = fun.user_function
    fun = getattr(fun, "__wrapped__", fun)
    if isinstance(fun, types.MethodType):
        fun = fun.__func__
    if not isinstance(fun, types.FunctionType):
        fun = type(fun).__dict__.get("__call__")  # (a callable object's method)
    g = getattr(fun, "__globals__", None)
    if not isinstance(g, dict) or str(g.get("__name__", "")).startswith("adcompile."):
        return None  # (a wrapper of adcompile's own: its NumPy stays NumPy)
    return g


@contextmanager
def new_arrays_in(rec: ArrayTrace | Callable[[np.ndarray], Any], fun: Any) -> Iterator[None]:
    """While active, new float arrays that ``fun``'s module makes with NumPy in this
    thread are constants of ``rec`` (module doc), or what ``rec`` makes of them
    (traced element by element: ``values_made``)."""
    g = _user_globals(fun)
    before = getattr(_local, "trace", None)
    _local.trace = rec
    if g is not None:
        with _lock:
            entry = _patched.get(id(g))
            if entry is None:
                saved = [(k, v) for k, v in g.items() if id(v) in _SWAP]
                for k, v in saved:
                    g[k] = _SWAP[id(v)]
                entry = _patched[id(g)] = [0, *saved]
            entry[0] += 1
    try:
        yield
    finally:
        _local.trace = before
        if g is not None:
            with _lock:
                entry = _patched[id(g)]
                entry[0] -= 1
                if entry[0] == 0:
                    del _patched[id(g)]
                    for k, v in entry[1:]:
                        if g.get(k) is _SWAP[id(v)]:  # (unless the user rebound it since)
                            g[k] = v


def values_made(arr: np.ndarray) -> np.ndarray:
    """A new float array traced element by element: an array of constant Values."""
    made = np.empty(arr.shape, dtype=object)
    for k, v in enumerate(arr.flat):
        made.flat[k] = constant(v)
    return made.view(ValueArray)
