"""The walk of ``captures.scan``: what a function can reach, found and sorted.

:class:`Scanner` starts at a function's globals, closure cells and defaults (and
its object's attributes), by the names its code reads, and follows helper
functions, methods (and the special methods Python calls for an operation),
objects, containers and the functions libraries wrap. Each value found is a
:class:`Hidden` input (a float or float array it can swap for a traced one), a
watched value (``watching``), a random generator or iterator (``randomness``), or
an outer ``Value``; ``captures`` says what each becomes.
"""

from __future__ import annotations

import array
import collections
import functools
import numbers
import os
import types
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .libraries import (
    NN_MODULE,
    attribute_names,
    class_attr,
    is_library,
    library_module,
    library_object,
    method_reads,
    special_methods,
)
from .randomness import moves
from .rebind import ANY_ATTRIBUTE
from .rebind import names_read as _names
from .value import Value
from .watching import Watched

#: How deep helper functions (a function that calls a function ...) are followed.
MAX_DEPTH = 16
#: Containers longer than this are not searched for arrays.
MAX_CONTAINER = 64


def _kind(value: Any) -> str | None:
    """'array' or 'number' for what can be a hidden input, 'watch' for what must be
    checked, None for what cannot change a trace by itself (functions, objects,
    containers: they are followed, and checked by identity)."""
    t = type(value)
    if t is float or isinstance(value, np.floating):
        return "number"
    if t is np.ndarray:
        if value.dtype.kind == "f" and value.size:
            return "array"
        return "watch" if value.dtype.kind != "O" else None  # (structured, strings ...)
    if isinstance(value, np.ndarray) and value.dtype != object:  # (np.matrix, masked)
        return "watch"
    if isinstance(value, Value):
        return "number" if value.is_leaf else "watch"
    if value is None or isinstance(value, (bool, int, complex, str, bytes, numbers.Number)):
        return "watch"
    if isinstance(value, (range, slice)):
        return "watch"
    return None


@dataclass(frozen=True)
class Hidden:
    """A value ``f`` reads from outside its arguments that becomes an input."""

    name: str  # the input's name in generated code
    what: str  # where it lives, for messages: "X (a global of module __main__)"
    holder: Any  # a cell, a globals dict, or a function (its defaults)
    key: Any  # None for a cell, the name for a dict, (kind, index or name) for defaults
    get: Callable[[], Any]  # reads the current value

    def read(self) -> Any:
        """The current value (a Value's ``.data``)."""
        v = self.get()
        return v.data if isinstance(v, Value) else v


class Scanner:
    """Walks what ``f`` can reach by the names its code reads, from its globals,
    cells and defaults (and its object's attributes), and those of the helpers it
    reaches; each value found is a hidden input or watched, by an expression
    from its root (``_r0['cfg'].scale``)."""

    def __init__(self, caps: Any, exclude: set[int], swap: bool, gradients: bool) -> None:
        self.swap = swap
        self.caps = caps  # (a captures.Captures, filled in)
        self.exclude = exclude
        self.gradients = gradients  # (see ``captures.scan``)
        self.seen: set[tuple[int, bool]] = set()
        self.names: set[str] = set()
        self.hidden_ids: dict[tuple[int, Any], Hidden] = {}
        self.roots: dict[int, str] = {}

    def root(self, obj: Any) -> str:
        """The name ``obj`` has in the checks' namespace."""
        name = self.roots.get(id(obj))
        if name is None:
            name = self.roots[id(obj)] = f"_r{len(self.roots)}"
            self.caps.ns[name] = obj
        return name

    def watch(self, what: str, expr: str, how: str) -> None:
        get = eval(f"lambda: {expr}", self.caps.ns)  # noqa: S307 (our own expression)
        self.caps.watched.append(Watched(what, expr, how, get))

    def top(self, f: Any) -> None:
        if isinstance(f, types.FunctionType):
            self.function(f, self.swap, 0, f.__name__)
        elif isinstance(f, types.MethodType) and isinstance(f.__func__, types.FunctionType):
            self.function(f.__func__, self.swap, 0, f.__name__)
            attrs = _names(f.__func__.__code__)[1]
            self.other(
                f.__self__,
                attrs,
                ("self", f"the object of {f.__name__}()"),
                0,
                self.root(f.__self__),
            )
        else:
            what = ("self", f"the {type(f).__name__} object transformed")
            self.follow(f, what, False, frozenset(), 0, self.root(f))

    # -- functions: their cells, globals and defaults

    def function(self, fn: types.FunctionType, swappable: bool, depth: int, fname: str) -> None:
        if (id(fn), swappable) in self.seen or depth > MAX_DEPTH:
            return
        self.seen.add((id(fn), swappable))
        code = fn.__code__
        glob, attrs = _names(code)
        if "modules" in attrs:  # (sys.modules[...].X reads the module, not a copy's globals)
            swappable = False
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                v = cell.cell_contents
            except ValueError:  # not yet assigned
                continue
            place = f"a variable of the scope enclosing {fname}()"
            self.found(
                v,
                name,
                place,
                swappable,
                cell,
                None,
                attrs,
                depth,
                lambda c=cell: c.cell_contents,
                f"{self.root(cell)}.cell_contents",
            )
        g = fn.__globals__
        module = g.get("__name__", "?")
        for name in sorted(glob):
            if name in g:
                self.found(
                    g[name],
                    name,
                    f"a global of module {module}",
                    swappable,
                    g,
                    name,
                    attrs,
                    depth,
                    lambda g=g, n=name: g[n],
                    f"{self.root(g)}[{name!r}]",
                )
        params = code.co_varnames[: code.co_argcount]
        for k, v in enumerate(fn.__defaults__ or ()):
            name = params[len(params) - len(fn.__defaults__) + k]
            self.found(
                v,
                name,
                f"a default of {fname}()",
                swappable,
                fn,
                ("pos", k),
                attrs,
                depth,
                lambda fn=fn, k=k: fn.__defaults__[k],
                f"{self.root(fn)}.__defaults__[{k}]",
            )
        for name, v in (fn.__kwdefaults__ or {}).items():
            self.found(
                v,
                name,
                f"a default of {fname}()",
                swappable,
                fn,
                ("kw", name),
                attrs,
                depth,
                lambda fn=fn, n=name: fn.__kwdefaults__[n],
                f"{self.root(fn)}.__kwdefaults__[{name!r}]",
            )

    def found(
        self,
        v: Any,
        name: str,
        place: str,
        swappable: bool,
        holder: Any,
        key: Any,
        attrs: frozenset[str],
        depth: int,
        get: Callable[[], Any],
        expr: str,
    ) -> None:
        kind = _kind(v)
        if isinstance(v, Value):
            self.value_attrs(name, place, expr, attrs)
        if kind in ("array", "number") and id(v) in self.exclude:
            return
        if self.gradients and isinstance(v, Value) and v.requires_grad:
            kind = None  # (read as itself: the trace finds it, its gradient is taken)
        if isinstance(v, Value) and "requires_grad" in attrs:
            kind = None  # (read as itself: a stand-in's flag would be its own)
        if kind in ("array", "number") and swappable:
            ident = (id(holder), key)
            if ident not in self.hidden_ids:
                h = Hidden(self._unique(name), f"{name} ({place})", holder, key, get)
                self.hidden_ids[ident] = h
                self.caps.hidden.append(h)
        else:
            self.leaf(v, (name, place), expr, attrs, depth, swappable)

    def value_attrs(self, name: str, place: str, expr: str, attrs: frozenset[str]) -> None:
        """A Value's label and requires_grad, where ``f`` reads them (``if
        p.label.startswith('w')``): watched."""
        for n in ("label", "requires_grad"):
            if n in attrs:
                self.watch(f"{name}.{n} ({place})", f"{expr}.{n}", "value")

    def leaf(
        self,
        v: Any,
        what: tuple[str, str],
        expr: str,
        attrs: frozenset[str] | set[str],
        depth: int,
        swappable: bool = False,
    ) -> None:
        """A value reached by ``expr``: watched as it is, and followed if it holds more
        (a helper function found in a cell or a global may read hidden inputs)."""
        text = f"{what[0]} ({what[1]})"
        if id(v) in self.exclude:  # (an input already: which one it is, is watched)
            self.watch(text, expr, "identity")
            self.caps.watched[-1].parameter = True
            return
        if isinstance(v, types.ModuleType) and library_module(v):
            if v is os and "environ" in attrs:  # (os.environ["SCALE"]: the environment)
                self.watch(f"os.environ ({what[1]})", f"{expr}.environ", "copy")
            return
        kind = _kind(v)
        if isinstance(v, Value):
            self.watch(text, expr, "identity")  # (its .data is read as an input)
            self.caps.read_values.append(v)
            self.value_attrs(what[0], what[1], expr, attrs)
            return
        if kind is not None:
            kind = "subarray" if isinstance(v, np.ndarray) else "value"  # (np.matrix ...)
            self.watch(text, expr, "array" if type(v) is np.ndarray else kind)
            return
        if moves(v):  # (a random generator or an iterator: watched while tracing)
            self.caps.generators.append((text, v))
            return
        if isinstance(v, np.ndarray) and v.dtype == object:  # (Values: ad.tensor, weights)
            self.watch(text, expr, "items")
            return
        if isinstance(v, COPIED) or (isinstance(v, Mapping) and not isinstance(v, dict)):
            self.watch(text, expr, "copy")  # (a ChainMap, os.environ: as a dict)
            return
        if isinstance(v, weakref.ref):  # (wr().k: what it refers to, followed)
            self.leaf(v(), (f"{what[0]}()", what[1]), f"{expr}()", attrs, depth + 1)
            return
        inside = what
        if not what[1].startswith("through "):
            inside = (what[0], f"through {what[0]}, {what[1]}")
        if isinstance(v, (list, tuple, dict)):
            self.follow(v, inside, False, attrs, depth, expr)
        elif isinstance(v, _CALLABLES) and not (
            isinstance(v, types.FunctionType) and is_library(v)
        ):
            self.watch(text, expr, "identity")  # (a helper redefined)
            self.follow(v, what, swappable, attrs, depth, expr)
        elif isinstance(v, types.ModuleType):
            self.follow(v, inside, False, attrs, depth, expr)
        elif not library_object(v) or _is_transform(v):
            self.watch(text, expr, "identity")
            self.follow(v, inside, False, attrs, depth, expr)
        else:
            self.library(v, what, expr, attrs, depth)

    def library(self, v: Any, what: tuple[str, str], expr: str, attrs: Any, depth: int) -> None:
        """A library's function or object held in a variable (``ACT = np.tanh``, ``OP =
        max``, ``T = float``): watched by identity (another one traces again), and what
        it holds of the user's followed: a primitive's rules, the function a decorator
        wraps (``functools.lru_cache``, ``np.vectorize``), a builtin method's object
        (``get = D.get``: the dict)."""
        self.watch(f"{what[0]} ({what[1]})", expr, "identity")
        if hasattr(v, "__adcompile_code__"):  # (a primitive: its rules, ``follow``)
            self.follow(v, what, False, attrs, depth, expr)
        for name in ("__wrapped__", "pyfunc"):
            inner = getattr(v, name, None) if isinstance(v, _WRAPPERS) else None
            if isinstance(inner, types.FunctionType):
                e = f"{expr}.{name}"
                self.leaf(inner, (f"{what[0]}.{name}", what[1]), e, attrs, depth + 1)
        owner = getattr(v, "__self__", None)
        if isinstance(v, types.BuiltinMethodType) and isinstance(owner, (list, dict, set)):
            e = f"{expr}.__self__"
            self.leaf(owner, (f"{what[0]}.__self__", what[1]), e, attrs, depth + 1)

    def follow(
        self,
        v: Any,
        what: tuple[str, str],
        swappable: bool,
        attrs: frozenset[str],
        depth: int,
        expr: str,
    ) -> None:
        """Look inside what ``f`` reads: helper functions, methods, objects, containers.

        ``what``: (the expression that reaches ``v``, where it starts), for messages;
        ``expr``: the expression that reads it in the checks.
        """
        name, place = what
        if isinstance(v, types.FunctionType):
            if not is_library(v):
                self.function(v, swappable, depth + 1, v.__name__)
            # (a primitive's function: its forward and derivative rules are the user's)
            for k, rule in enumerate(getattr(v, "__adcompile_code__", ())):
                e = f"{expr}.__adcompile_code__[{k}]"
                self.leaf(rule, (f"{name}'s rule", place), e, attrs, depth + 1)
        elif isinstance(v, types.MethodType):
            self.follow(v.__func__, what, False, attrs, depth, f"{expr}.__func__")
            if isinstance(v.__func__, types.FunctionType):
                attrs = attrs | _names(v.__func__.__code__)[1]
            self.other(v.__self__, attrs, what, depth, f"{expr}.__self__")
        elif isinstance(v, (staticmethod, classmethod)):
            self.follow(v.__func__, what, False, attrs, depth, f"{expr}.__func__")
        elif isinstance(v, functools.partial):
            self.follow(v.func, what, False, attrs, depth, f"{expr}.func")
            for k, a in enumerate(v.args):
                self.leaf(a, (f"{name}.args[{k}]", place), f"{expr}.args[{k}]", attrs, depth)
            for k, a in v.keywords.items():
                self.leaf(
                    a, (f"{name}.keywords[{k!r}]", place), f"{expr}.keywords[{k!r}]", attrs, depth
                )
        elif isinstance(v, types.ModuleType):
            if library_module(v):
                return
            d = vars(v)
            for n in sorted(attrs):
                if n in d:
                    self.leaf(d[n], (f"{name}.{n}", place), f"{expr}.{n}", attrs, depth + 1)
        else:
            self.other(v, attrs, what, depth, expr)

    def other(
        self,
        obj: Any,
        attrs: frozenset[str] | set[str],
        what: tuple[str, str],
        depth: int,
        expr: str,
    ) -> None:
        """An object: its attributes that ``f`` names (own, its class's, properties),
        its methods, a container's items and length, a transform's function."""
        name, place = what
        if (id(obj), False) in self.seen or depth > MAX_DEPTH:
            return
        self.seen.add((id(obj), False))
        if _is_transform(obj):  # another transform (ad.grad(g) ...)
            self.follow(obj.fun, what, False, attrs, depth + 1, f"{expr}.fun")
            return
        if isinstance(obj, (list, tuple, dict)) and len(obj) > MAX_CONTAINER:
            # too long to look into item by item: the same items (by identity)
            self.watch(f"the items of {name} ({place})", expr, "items")
            return
        if isinstance(obj, (list, tuple)):
            self.watch(f"len({name}) ({place})", expr, "length")
            for k, a in enumerate(obj):
                self.leaf(a, (f"{name}[{k}]", place), f"{expr}[{k}]", attrs, depth + 1)
            return
        if isinstance(obj, dict):
            keys = [k for k in obj if isinstance(k, (str, int, float, bool)) or k is None]
            self.watch(
                f"the keys of {name} ({place})", expr, "items" if len(keys) < len(obj) else "keys"
            )  # (in order: a loop over the dict goes in that order)
            for k in keys:
                self.leaf(obj[k], (f"{name}[{k!r}]", place), f"{expr}[{k!r}]", attrs, depth + 1)
            return
        if library_object(obj):
            return
        cls = obj if isinstance(obj, type) else type(obj)
        if not isinstance(obj, type):
            self.watch(f"the class of {name} ({place})", f"{expr}.__class__", "identity")
            call = type(obj).__call__ if callable(obj) else None
            if isinstance(call, types.FunctionType):
                self.function(call, False, depth + 1, f"{cls.__name__}.__call__")
                attrs = attrs | _names(call.__code__)[1]
            attrs = attrs | special_methods(cls)  # (bag[1]: what __getitem__ reads)
        d = getattr(obj, "__dict__", None)
        if type(obj).__module__ == NN_MODULE and isinstance(d, dict):
            attrs = attrs | set(d)  # (its methods are library code, not scanned)
        if ANY_ATTRIBUTE in attrs:  # (getattr with a name made at run time)
            attrs = attrs | {n for n in attribute_names(obj) if not n.startswith("__")}
        attrs = method_reads(cls, attrs)  # (m.weights() reads m.w: watched too)
        for n in sorted(attrs - {ANY_ATTRIBUTE}):
            e, w = f"{expr}.{n}", (f"{name}.{n}", place)
            if not isinstance(obj, type) and isinstance(d, dict) and n in d:
                self.leaf(d[n], w, e, attrs, depth + 1)
                continue
            found = class_attr(cls, n)
            if found is None:
                continue
            if isinstance(found, property):
                if found.fget is not None:
                    self.follow(found.fget, w, False, attrs, depth + 1, f"{expr}.__class__")
                try:
                    self.leaf(getattr(obj, n), w, e, attrs, depth + 1)
                except Exception:  # (the property fails now: f will say so)
                    pass
            elif isinstance(found, types.FunctionType):
                if not is_library(found):
                    self.function(found, False, depth + 1, f"{cls.__name__}.{n}")
                self.method(obj, n, w, expr, isinstance(d, dict))
            elif isinstance(found, (staticmethod, classmethod)):
                self.follow(found.__func__, w, False, attrs, depth + 1, e)
            elif not callable(found) or isinstance(found, type):
                self.leaf(getattr(obj, n), w, e, attrs, depth + 1)

    def method(self, obj: Any, n: str, w: tuple[str, str], expr: str, own: bool) -> None:
        """A method of ``obj`` that ``f`` calls (or Python does: ``__getitem__``): the
        function its class holds, and where ``own``, the instance's own attribute of
        that name (``c.get = lambda: 5.0`` shadows it), watched by identity."""
        if isinstance(obj, type):
            self.watch(f"{w[0]} ({w[1]})", f"{expr}.{n}", "identity")
            return
        self.watch(f"{w[0]} ({w[1]})", f"{expr}.__class__.{n}", "identity")
        if own:
            self.watch(f"{w[0]} ({w[1]})", f"{expr}.__dict__.get({n!r})", "identity")

    def _unique(self, name: str) -> str:
        base, k = name, 2
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name


#: Containers checked by their contents, against a copy (sets, deques, bytearrays).
COPIED = (set, frozenset, collections.deque, bytearray, array.array, memoryview)

#: Library callables that hold a user's function: decorators' wrappers, np.vectorize.
_WRAPPERS = (types.FunctionType, np.vectorize, type(functools.lru_cache()(lambda: 0)))

_CALLABLES = (
    types.FunctionType,
    types.MethodType,
    functools.partial,
    staticmethod,
    classmethod,
)


def _is_transform(obj: Any) -> bool:
    """Whether ``obj`` is an adcompile transform (``ad.grad(g)`` ...) of a function."""
    if not type(obj).__module__.startswith("adcompile"):  # (before any attribute: a
        return False  # user's __getattr__ may raise anything for a name it lacks)
    return callable(getattr(obj, "fun", None))
